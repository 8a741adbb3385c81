/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <poll.h>
#include <string.h>

#include <kvtier.h>

#include "kv-delayed-tier.h"
#include "kv-tiering-metrics-private.h"

/* KvPinLease, from KvParentManager.pin(): what it pins and says, that it
 * is released exactly once from any thread and unpinned on the owner
 * thread at the next step, that eviction cannot take a leased chunk, and
 * what happens to a lease that outlives reset_cache() and shutdown(). The
 * peer tier's FETCH serving through it is tested in tests/peer. */

#define SLOT_SIZE 4096

typedef struct
{
  KvHostBuffer *buffer;
  KvPrimaryTier *primary;
  KvTieringManager *manager;
  KvDelayedTier *tier;
  KvParentManager *parent;   /* kept from serve_external_requests */
  KvRequest *request;
  gboolean shut_down;        /* the test shut the manager down itself */
  KvKey *keys[16];
} Fixture;

static KvKey *
make_key (guint i)
{
  guint8 hash[32];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 7 + b);
  hash[0] = (guint8) i;
  return kv_key_new (hash, sizeof hash, 0);
}

static void
keep_parent (KvDelayedTier   *tier,
             KvParentManager *parent,
             gpointer         user_data)
{
  Fixture *f = user_data;

  if (f->parent == NULL)
    f->parent = g_object_ref (parent);
}

static void
step (Fixture *f)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (f->manager, end);
}

/* Two steps: the cascades of a store (completed at once by the tier) are
 * consumed at the first entry point of the step after the store's. */
static void
settle (Fixture *f)
{
  step (f);
  step (f);
}

static void
fixture_setup_n (Fixture *f,
                 guint    n_slots)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (n_slots, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->primary = kv_primary_tier_new (f->buffer, NULL, TRUE);
  f->manager = kv_tiering_manager_new (f->primary);
  f->tier = kv_delayed_tier_new (f->buffer, "delayed");
  kv_delayed_tier_set_synchronous (f->tier, TRUE);
  g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier), &error));
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = make_key (i);
  f->request = kv_request_new ("local", NULL);
  kv_tiering_manager_on_new_request (f->manager, f->request);

  /* the parent handle the tier gets at every step */
  kv_delayed_tier_set_serve_func (f->tier, keep_parent, f);
  step (f);
  g_assert_nonnull (f->parent);
}

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  fixture_setup_n (f, 8);
}

static void
fixture_setup_small (Fixture       *f,
                     gconstpointer  data)
{
  fixture_setup_n (f, 4);
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  kv_delayed_tier_set_serve_func (f->tier, NULL, NULL);
  if (!f->shut_down)
    {
      kv_tiering_manager_on_request_finished (f->manager, f->request);
      g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
      g_assert_no_error (error);
    }
  if (f->manager != NULL)
    {
      g_object_add_weak_pointer (G_OBJECT (f->manager), (gpointer *) &f->manager);
      g_object_unref (f->manager);
      g_assert_null (f->manager);
    }
  g_clear_object (&f->parent);
  g_clear_object (&f->request);
  g_clear_object (&f->tier);
  g_clear_object (&f->primary);
  g_clear_object (&f->buffer);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
}

/* Stores keys [first, first + n) with a byte pattern per key; with
 * @complete FALSE they stay "being written". */
static void
store_keys (Fixture  *f,
            guint     first,
            guint     n,
            gboolean  complete)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  const guint32 *chunk_ids;
  guint n_to_store;

  prepared = kv_tiering_manager_prepare_store (f->manager, &f->keys[first], n, f->request, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  g_assert_cmpuint (n_to_store, ==, n);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  for (guint i = 0; i < n_to_store; i++)
    memset (kv_host_buffer_peek_slot (f->buffer, chunk_ids[i]),
            0x40 + kv_key_get_hash (to_store[i], NULL)[0], SLOT_SIZE);
  if (complete)
    kv_tiering_manager_complete_store (f->manager, to_store, n_to_store, f->request, TRUE);
}

static gint
ref_count (Fixture *f,
           guint    key_index)
{
  gint ref = G_MININT;

  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[key_index], &ref));
  return ref;
}

static void
assert_slot_holds (Fixture *f,
                   guint32  slot,
                   guint    key_index)
{
  const guint8 *bytes = kv_host_buffer_peek_slot (f->buffer, slot);

  for (guint b = 0; b < SLOT_SIZE; b++)
    if (bytes[b] != 0x40 + key_index)
      g_error ("slot %u: byte %u is %#x, expected %#x (key %u)",
               slot, b, bytes[b], 0x40 + key_index, key_index);
}

static KvPinLease *
pin (Fixture        *f,
     const guint    *indices,
     guint           n)
{
  g_autoptr(GError) error = NULL;
  g_autofree KvKey **keys = g_new (KvKey *, n);
  KvPinLease *lease;

  for (guint i = 0; i < n; i++)
    keys[i] = f->keys[indices[i]];
  lease = kv_parent_manager_pin (f->parent, keys, n, &error);
  g_assert_no_error (error);
  g_assert_nonnull (lease);
  return lease;
}

static gboolean
wakeup_readable (Fixture *f)
{
  struct pollfd pfd = { kv_tiering_manager_get_wakeup_fd (f->manager), POLLIN, 0 };

  return poll (&pfd, 1, 0) == 1 && (pfd.revents & POLLIN) != 0;
}

/* The served-job metric @name of the tier in @stats, or -1 without it. */
static gdouble
served_value (KvStats    *stats,
              const char *name)
{
  static const char * const labels[] = { "1:delayed", NULL };
  gdouble value = -1.0;

  if (stats == NULL || !kv_stats_lookup (stats, name, labels, &value))
    return -1.0;
  return value;
}

/* Only what is ready in the primary tier is pinned; the lease says which,
 * in the order asked, with the slots that hold the bytes. */
static void
test_pins_what_is_ready (Fixture       *f,
                         gconstpointer  data)
{
  static const guint asked[] = { 0, 5, 1, 6, 0 };
  g_autoptr(KvPinLease) lease = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvStats) stats = NULL;
  const guint32 *ids;
  guint n_ids = 0;
  guint32 slot0, slot1;

  store_keys (f, 0, 2, TRUE);
  store_keys (f, 6, 1, FALSE);    /* key 6 is still being written; key 5 is absent */
  settle (f);
  g_assert_true (kv_primary_tier_get_chunk_id (f->primary, f->keys[0], &slot0));
  g_assert_true (kv_primary_tier_get_chunk_id (f->primary, f->keys[1], &slot1));

  lease = pin (f, asked, G_N_ELEMENTS (asked));
  g_assert_cmpuint (kv_pin_lease_get_n_keys (lease), ==, 5);
  g_assert_cmpuint (kv_pin_lease_get_n_pinned (lease), ==, 3);
  for (guint i = 0; i < G_N_ELEMENTS (asked); i++)
    g_assert_true (kv_key_equal (kv_pin_lease_get_key (lease, i), f->keys[asked[i]]));
  g_assert_true (kv_pin_lease_is_pinned (lease, 0));
  g_assert_false (kv_pin_lease_is_pinned (lease, 1));
  g_assert_true (kv_pin_lease_is_pinned (lease, 2));
  g_assert_false (kv_pin_lease_is_pinned (lease, 3));
  g_assert_true (kv_pin_lease_is_pinned (lease, 4));
  g_assert_cmpuint (kv_pin_lease_get_chunk_id (lease, 0), ==, slot0);
  g_assert_cmpuint (kv_pin_lease_get_chunk_id (lease, 1), ==, G_MAXUINT32);
  g_assert_cmpuint (kv_pin_lease_get_chunk_id (lease, 2), ==, slot1);
  g_assert_cmpuint (kv_pin_lease_get_chunk_id (lease, 4), ==, slot0);
  ids = kv_pin_lease_get_chunk_ids (lease, &n_ids);
  g_assert_cmpuint (n_ids, ==, 5);
  g_assert_cmpuint (ids[2], ==, slot1);
  g_assert_cmpuint (ids[3], ==, G_MAXUINT32);
  assert_slot_holds (f, slot0, 0);
  assert_slot_holds (f, slot1, 1);

  /* key 0 was asked twice: pinned twice */
  g_assert_cmpint (ref_count (f, 0), ==, 2);
  g_assert_cmpint (ref_count (f, 1), ==, 1);
  g_assert_cmpint (ref_count (f, 6), ==, -1);
  /* no job, no admission: a lease is not a transfer into a tier */
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (served_value (stats, KV_METRIC_ACTIVE_SERVED_JOBS), ==, 1);
  g_clear_object (&stats);

  g_assert_true (kv_pin_lease_release (lease, TRUE, &error));
  g_assert_no_error (error);
  /* the unpin waits for the owner's next step */
  g_assert_cmpint (ref_count (f, 0), ==, 2);
  g_assert_true (kv_tiering_manager_has_pending_work (f->manager));
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  /* one served job of three chunks (get_stats returns and resets) */
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (served_value (stats, KV_METRIC_ACTIVE_SERVED_JOBS), ==, 0);
  g_assert_cmpfloat (served_value (stats, KV_METRIC_SERVED_BYTES), ==, 3.0 * SLOT_SIZE);
  g_assert_cmpfloat (served_value (stats, KV_METRIC_SERVED_JOB_FAILURES), <=, 0);

  kv_tiering_manager_complete_store (f->manager, &f->keys[6], 1, f->request, TRUE);
}

typedef struct
{
  KvPinLease *lease;
  gint *n_ok;
  gint *n_already;
  GCond *cond;
  GMutex *lock;
  gboolean *go;
} Releaser;

static gpointer
release_thread (gpointer data)
{
  Releaser *r = data;
  g_autoptr(GError) error = NULL;

  g_mutex_lock (r->lock);
  while (!*r->go)
    g_cond_wait (r->cond, r->lock);
  g_mutex_unlock (r->lock);

  if (kv_pin_lease_release (r->lease, TRUE, &error))
    g_atomic_int_inc (r->n_ok);
  else if (g_error_matches (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT))
    g_atomic_int_inc (r->n_already);
  return NULL;
}

/* Eight threads release one lease at once: exactly one release counts,
 * the others fail with a clear error; the chunks are unpinned once, on the
 * owner thread, at its next step, which the wake-up fd announces. */
static void
test_release_once_from_threads (Fixture       *f,
                                gconstpointer  data)
{
  static const guint asked[] = { 0, 1 };
  g_autoptr(KvPinLease) lease = NULL;
  g_autoptr(GError) error = NULL;
  GThread *threads[8];
  Releaser r;
  gint n_ok = 0, n_already = 0;
  GCond cond;
  GMutex lock;
  gboolean go = FALSE;

  store_keys (f, 0, 2, TRUE);
  settle (f);
  lease = pin (f, asked, G_N_ELEMENTS (asked));
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  step (f);
  g_assert_false (wakeup_readable (f));

  g_cond_init (&cond);
  g_mutex_init (&lock);
  r = (Releaser) { lease, &n_ok, &n_already, &cond, &lock, &go };
  for (guint i = 0; i < G_N_ELEMENTS (threads); i++)
    threads[i] = g_thread_new ("releaser", release_thread, &r);
  g_mutex_lock (&lock);
  go = TRUE;
  g_cond_broadcast (&cond);
  g_mutex_unlock (&lock);
  for (guint i = 0; i < G_N_ELEMENTS (threads); i++)
    g_thread_join (threads[i]);
  g_cond_clear (&cond);
  g_mutex_clear (&lock);

  g_assert_cmpint (n_ok, ==, 1);
  g_assert_cmpint (n_already, ==, G_N_ELEMENTS (threads) - 1);
  g_assert_true (wakeup_readable (f));
  /* nothing unpinned off the owner thread */
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  g_assert_cmpint (ref_count (f, 1), ==, 1);
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  g_assert_false (wakeup_readable (f));

  /* once more from the owner thread: refused, nothing unpinned twice */
  g_assert_false (kv_pin_lease_release (lease, TRUE, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_false (kv_tiering_manager_has_pending_work (f->manager));
}

/* A primary tier of four slots, full: stores must evict, but never the
 * leased chunk, whose bytes stay as they were. */
static void
test_no_eviction_of_leased (Fixture       *f,
                            gconstpointer  data)
{
  static const guint asked[] = { 0 };
  g_autoptr(KvPinLease) lease = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) refused = NULL;
  guint32 slot;

  store_keys (f, 0, 4, TRUE);
  settle (f);
  g_assert_cmpuint (kv_primary_tier_get_n_free (f->primary), ==, 0);
  lease = pin (f, asked, 1);
  slot = kv_pin_lease_get_chunk_id (lease, 0);

  /* three new chunks evict the three unleased ones */
  store_keys (f, 8, 3, TRUE);
  settle (f);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  for (guint i = 1; i < 4; i++)
    g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), ==, KV_LOOKUP_RESULT_MISS);
  /* four more cannot fit beside it */
  refused = kv_tiering_manager_prepare_store (f->manager, &f->keys[11], 4, f->request, &error);
  g_assert_null (refused);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE);
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  assert_slot_holds (f, slot, 0);

  /* this step consumed its results already (prepare_store): the next one
   * unpins */
  g_assert_true (kv_pin_lease_release (lease, TRUE, NULL));
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
}

/* reset_cache() does not free slots a lease may still read. */
static void
test_reset_cache_waits_for_release (Fixture       *f,
                                    gconstpointer  data)
{
  static const guint asked[] = { 0 };
  g_autoptr(KvPinLease) lease = NULL;
  g_autoptr(GError) error = NULL;

  store_keys (f, 0, 1, TRUE);
  settle (f);
  lease = pin (f, asked, 1);
  g_assert_false (kv_tiering_manager_reset_cache (f->manager, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY);
  g_assert_nonnull (strstr (error->message, "pin lease"));
  g_clear_error (&error);
  g_assert_cmpint (ref_count (f, 0), ==, 1);

  g_assert_true (kv_pin_lease_release (lease, TRUE, NULL));
  g_assert_true (kv_tiering_manager_reset_cache (f->manager, &error));
  g_assert_no_error (error);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
}

/* A lease that outlives shutdown() fails cleanly: shutdown unpins its
 * chunks (warning once), its release then fails with CLOSED, a second one
 * says it was released; pins after shutdown, and releases after the
 * manager is gone, fail with CLOSED too. */
static void
test_outlives_shutdown (Fixture       *f,
                        gconstpointer  data)
{
  static const guint asked[] = { 0, 1 };
  g_autoptr(KvPinLease) held = NULL;
  g_autoptr(KvPinLease) released = NULL;
  g_autoptr(GError) error = NULL;
  KvKey *keys[] = { f->keys[0] };

  store_keys (f, 0, 2, TRUE);
  settle (f);
  held = pin (f, asked, 2);
  released = pin (f, asked, 1);
  g_assert_cmpint (ref_count (f, 0), ==, 2);
  /* released, not unpinned yet when the manager shuts down */
  g_assert_true (kv_pin_lease_release (released, TRUE, NULL));

  kv_tiering_manager_on_request_finished (f->manager, f->request);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING,
                         "*1 pin leases (KvParentManager.pin) were not released*");
  g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
  g_test_assert_expected_messages ();
  g_assert_no_error (error);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (ref_count (f, 1), ==, 0);

  g_assert_false (kv_pin_lease_release (held, TRUE, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_false (kv_pin_lease_release (held, TRUE, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_cmpint (ref_count (f, 0), ==, 0);

  g_assert_null (kv_parent_manager_pin (f->parent, keys, 1, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  g_clear_error (&error);

  f->shut_down = TRUE;
}

/* A lease released after its manager was finalized. */
static void
test_outlives_manager (Fixture       *f,
                       gconstpointer  data)
{
  static const guint asked[] = { 0 };
  g_autoptr(KvPinLease) lease = NULL;
  g_autoptr(GError) error = NULL;
  KvKey *keys[] = { f->keys[0] };

  store_keys (f, 0, 1, TRUE);
  settle (f);
  lease = pin (f, asked, 1);
  g_assert_true (kv_pin_lease_release (lease, TRUE, NULL));
  g_clear_object (&lease);
  lease = pin (f, asked, 1);

  kv_tiering_manager_on_request_finished (f->manager, f->request);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*1 pin leases*not released*");
  g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
  g_test_assert_expected_messages ();
  g_clear_object (&f->manager);

  g_assert_false (kv_pin_lease_release (lease, FALSE, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_null (kv_parent_manager_pin (f->parent, keys, 1, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  g_assert_nonnull (strstr (error->message, "gone"));
  f->shut_down = TRUE;
}

static void
test_bad_arguments (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  KvKey *keys[] = { f->keys[0], NULL };
  g_autoptr(KvPinLease) empty = NULL;

  g_assert_null (kv_parent_manager_pin (f->parent, keys, 2, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  /* nothing asked, nothing pinned: a lease all the same, released once */
  empty = kv_parent_manager_pin (f->parent, keys, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_pin_lease_get_n_keys (empty), ==, 0);
  g_assert_cmpuint (kv_pin_lease_get_n_pinned (empty), ==, 0);
  g_assert_true (kv_pin_lease_release (empty, FALSE, &error));
  g_assert_no_error (error);
  step (f);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

#define ADD(path, func) \
  g_test_add ("/kvtier/pin-lease/" path, Fixture, NULL, fixture_setup, func, fixture_teardown)
  ADD ("pins-what-is-ready", test_pins_what_is_ready);
  ADD ("release-once-from-threads", test_release_once_from_threads);
  ADD ("reset-cache-waits-for-release", test_reset_cache_waits_for_release);
  ADD ("outlives-shutdown", test_outlives_shutdown);
  ADD ("outlives-manager", test_outlives_manager);
  ADD ("bad-arguments", test_bad_arguments);
#undef ADD
  g_test_add ("/kvtier/pin-lease/no-eviction-of-leased", Fixture, NULL, fixture_setup_small,
              test_no_eviction_of_leased, fixture_teardown);

  return g_test_run ();
}
