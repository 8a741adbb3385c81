/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <poll.h>
#include <string.h>

#include <kvtier.h>

#include "kv-delayed-tier.h"

/* The behaviours of reference §11 items 1–17, plus threading, bad input,
 * external requests and shutdown. Tiers are KvDelayedTier instances: they
 * record every call and complete jobs when the test says so. */

#define SLOT_SIZE 4096

typedef struct
{
  KvHostBuffer *buffer;
  KvPrimaryTier *primary;
  KvTieringManager *manager;
  KvDelayedTier *tier1;
  KvDelayedTier *tier2;
  GPtrArray *log;
  KvKey *keys[16];
} Fixture;

static KvKey *
make_key (guint i)
{
  guint8 hash[32];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 31 + b);
  hash[0] = (guint8) i;
  return kv_key_new (hash, sizeof hash, 0);
}

static void
fixture_setup_n (Fixture *f,
                 guint    n_slots,
                 guint    n_tiers)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (n_slots, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->primary = kv_primary_tier_new (f->buffer, NULL, TRUE);
  f->manager = kv_tiering_manager_new (f->primary);
  f->log = g_ptr_array_new_with_free_func (g_free);
  if (n_tiers >= 1)
    {
      f->tier1 = kv_delayed_tier_new (f->buffer, "delayed");
      kv_delayed_tier_set_log (f->tier1, f->log);
      g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier1), &error));
      g_assert_no_error (error);
    }
  if (n_tiers >= 2)
    {
      f->tier2 = kv_delayed_tier_new (f->buffer, "delayed2");
      kv_delayed_tier_set_log (f->tier2, f->log);
      g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier2), &error));
      g_assert_no_error (error);
    }
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = make_key (i);
}

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  fixture_setup_n (f, 8, 2);
}

static void
fixture_setup_small (Fixture       *f,
                     gconstpointer  data)
{
  fixture_setup_n (f, 5, 1);
}

static void
fixture_setup_bare (Fixture       *f,
                    gconstpointer  data)
{
  fixture_setup_n (f, 8, 0);
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
  g_assert_no_error (error);
  g_object_add_weak_pointer (G_OBJECT (f->manager), (gpointer *) &f->manager);
  g_object_unref (f->manager);
  g_assert_null (f->manager);
  g_clear_object (&f->tier1);
  g_clear_object (&f->tier2);
  g_clear_object (&f->primary);
  g_clear_object (&f->buffer);
  g_ptr_array_unref (f->log);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
}

static void
step (Fixture *f)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (f->manager, end);
}

/* Fills the slots of a prepare_store result with a byte pattern per key
 * index and completes the store. */
static void
store_keys (Fixture   *f,
            KvRequest *request,
            guint      first,
            guint      n,
            gboolean   success)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  const guint32 *chunk_ids;
  guint n_to_store;

  prepared = kv_tiering_manager_prepare_store (f->manager, &f->keys[first], n, request, &error);
  g_assert_no_error (error);
  g_assert_nonnull (prepared);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  for (guint i = 0; i < n_to_store; i++)
    memset (kv_host_buffer_peek_slot (f->buffer, chunk_ids[i]),
            0x40 + kv_key_get_hash (to_store[i], NULL)[0], SLOT_SIZE);
  if (n_to_store > 0)
    kv_tiering_manager_complete_store (f->manager, to_store, n_to_store, request, success);
}

static GBytes *
pattern_bytes (guint i)
{
  guint8 *data = g_malloc (SLOT_SIZE);

  memset (data, 0x40 + i, SLOT_SIZE);
  return g_bytes_new_take (data, SLOT_SIZE);
}

static void
assert_slot_holds (Fixture *f,
                   guint    key_index)
{
  guint32 chunk_id;
  const guint8 *slot;

  g_assert_true (kv_primary_tier_get_chunk_id (f->primary, f->keys[key_index], &chunk_id));
  slot = kv_host_buffer_peek_slot (f->buffer, chunk_id);
  for (guint b = 0; b < SLOT_SIZE; b++)
    if (slot[b] != 0x40 + key_index)
      g_error ("slot of key %u: byte %u is %#x, expected %#x", key_index, b, slot[b], 0x40 + key_index);
}

static gint
ref_count (Fixture *f,
           guint    key_index)
{
  gint ref = G_MININT;

  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[key_index], &ref));
  return ref;
}

static char *
joined_log (Fixture    *f,
            const char *needle)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < f->log->len; i++)
    {
      const char *line = g_ptr_array_index (f->log, i);

      if (needle != NULL && strstr (line, needle) == NULL)
        continue;
      if (s->len > 0)
        g_string_append (s, " | ");
      g_string_append (s, line);
    }
  return g_string_free (s, FALSE);
}

/* §11.1 */
static void
test_store_then_hit_without_tiers (Fixture       *f,
                                   gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 3, TRUE);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[3], req), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_false (kv_tiering_manager_has_pending_work (f->manager));
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.2 */
static void
test_cascade_submits_once_per_tier (Fixture       *f,
                                    gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autofree char *calls1 = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 2, TRUE);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 1);
  calls1 = kv_delayed_tier_dup_calls (f->tier1, "submit_store");
  g_assert_true (strstr (calls1, "submit_store 0 r1 [") == calls1);

  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  step (f);
  for (guint i = 0; i < 2; i++)
    {
      g_assert_cmpint (kv_secondary_tier_lookup (KV_SECONDARY_TIER (f->tier1), f->keys[i], req), ==,
                       KV_LOOKUP_RESULT_HIT);
      g_assert_cmpint (kv_secondary_tier_lookup (KV_SECONDARY_TIER (f->tier2), f->keys[i], req), ==,
                       KV_LOOKUP_RESULT_HIT);
    }
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* Stored bytes are the slot bytes, exactly. */
static void
test_cascade_moves_slot_bytes (Fixture       *f,
                               gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 3, TRUE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  for (guint i = 0; i < 3; i++)
    {
      g_autoptr(GBytes) expected = pattern_bytes (i);

      g_assert_true (g_bytes_equal (kv_delayed_tier_get_stored (f->tier1, f->keys[i]), expected));
    }
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.3: completions are consumed at most once per step, at its first
 * entry point. */
static void
test_cascade_ref_count_and_poll_gate (Fixture       *f,
                                      gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  kv_delayed_tier_set_synchronous (f->tier1, TRUE);
  kv_delayed_tier_set_synchronous (f->tier2, TRUE);
  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 2, TRUE);
  g_assert_cmpint (ref_count (f, 0), ==, 2);
  g_assert_cmpint (ref_count (f, 1), ==, 2);
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 2);
  g_assert_cmpint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 2);
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  g_assert_cmpint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.4 */
static void
test_promotion_from_secondary (Fixture       *f,
                               gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GBytes) bytes = pattern_bytes (5);

  kv_delayed_tier_put (f->tier2, f->keys[5], bytes);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[5], req), ==,
                   KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[5]), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_load"), ==, 0);
  /* pending: the tiers are not asked again */
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[5], req), ==,
                   KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "lookup"), ==, 1);

  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_load"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_load"), ==, 0);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[5]), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[5]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[5], req), ==, KV_LOOKUP_RESULT_HIT);
  assert_slot_holds (f, 5);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

static void
promote_three (Fixture   *f,
               KvRequest *req)
{
  for (guint i = 0; i < 3; i++)
    {
      g_autoptr(GBytes) bytes = pattern_bytes (i);

      kv_delayed_tier_put (f->tier1, f->keys[i], bytes);
    }
  kv_tiering_manager_on_new_request (f->manager, req);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==,
                     KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_get_n_pending (f->tier1), ==, 1);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (kv_delayed_tier_get_pending (f->tier1, 0)), ==, 3);
}

/* §11.5: partial promotion with successful_keys = (k0, k2). */
static void
test_partial_promotion (Fixture       *f,
                        gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvJobResult) result = NULL;
  KvTransferJob *job;
  KvKey *ok[2];

  promote_three (f, req);
  job = kv_delayed_tier_get_pending (f->tier1, 0);
  /* the tier moved k0 and k2 only */
  for (guint i = 0; i < 3; i += 2)
    memset (kv_host_buffer_peek_slot (f->buffer, kv_transfer_job_get_chunk_id (job, i)),
            0x40 + i, SLOT_SIZE);
  ok[0] = f->keys[0];
  ok[1] = f->keys[2];
  result = kv_job_result_new (kv_transfer_job_get_id (job), FALSE);
  kv_job_result_set_successful_keys (result, ok, 2);
  g_assert_true (kv_delayed_tier_complete_job_with (f->tier1, kv_transfer_job_get_id (job), result));
  step (f);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[2]), ==, KV_LOOKUP_RESULT_HIT);
  assert_slot_holds (f, 0);
  assert_slot_holds (f, 2);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (f->primary), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.5: failed promotion without successful keys → every key MISS. */
static void
test_failed_promotion (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  promote_three (f, req);
  kv_delayed_tier_complete_all (f->tier1, FALSE);
  step (f);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_primary_tier_get_n_free (f->primary), ==, 8);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A tier naming a key that is not in the job is not trusted. */
static void
test_partial_promotion_foreign_key (Fixture       *f,
                                    gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvJobResult) result = NULL;
  KvTransferJob *job;
  KvKey *ok[1];

  promote_three (f, req);
  job = kv_delayed_tier_get_pending (f->tier1, 0);
  ok[0] = f->keys[9];
  result = kv_job_result_new (kv_transfer_job_get_id (job), FALSE);
  kv_job_result_set_successful_keys (result, ok, 1);
  kv_delayed_tier_complete_job_with (f->tier1, kv_transfer_job_get_id (job), result);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL,
                         "*Tier #1 (delayed)*breaks the partial-load rule*not a key of the job*");
  step (f);
  g_test_assert_expected_messages ();
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), ==, KV_LOOKUP_RESULT_MISS);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.6 */
static void
test_submit_load_batched_per_request (Fixture       *f,
                                      gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  KvTransferJob *job_a, *job_b;

  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(GBytes) bytes = pattern_bytes (i);

      kv_delayed_tier_put (f->tier1, f->keys[i], bytes);
    }
  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[2], b), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[1], a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[3], b), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_load"), ==, 0);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_load"), ==, 2);
  job_a = kv_delayed_tier_get_pending (f->tier1, 0);
  job_b = kv_delayed_tier_get_pending (f->tier1, 1);
  g_assert_true (kv_transfer_job_get_request (job_a) == a);
  g_assert_true (kv_transfer_job_get_request (job_b) == b);
  g_assert_true (kv_transfer_job_is_promotion (job_a));
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job_a), ==, 2);
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job_a, 0), f->keys[0]));
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job_a, 1), f->keys[1]));
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job_b, 0), f->keys[2]));
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job_b, 1), f->keys[3]));
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  for (guint i = 0; i < 4; i++)
    assert_slot_holds (f, i);
  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
}

/* §11.7 */
static void
test_same_chunk_two_requests_one_load (Fixture       *f,
                                       gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(GBytes) bytes = pattern_bytes (7);

  kv_delayed_tier_put (f->tier1, f->keys[7], bytes);
  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[7], a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[7], b), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_load"), ==, 1);
  g_assert_true (kv_transfer_job_get_request (kv_delayed_tier_get_pending (f->tier1, 0)) == a);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
}

/* §11.8: a full primary of 5, unpinned, evicts exactly 2 for 2 new chunks. */
static void
test_eviction_exact (Fixture       *f,
                     gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  KvEvent **events;
  guint n_evicted = 0;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 5, TRUE);
  g_assert_cmpuint (kv_primary_tier_get_n_free (f->primary), ==, 0);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  step (f);
  for (guint i = 0; i < 5; i++)
    g_assert_cmpint (ref_count (f, i), ==, 0);
  events = kv_tiering_manager_take_events (f->manager);
  for (KvEvent **e = events; *e != NULL; e++)
    kv_event_unref (*e);
  g_free (events);

  store_keys (f, req, 5, 2, TRUE);
  events = kv_tiering_manager_take_events (f->manager);
  for (KvEvent **e = events; *e != NULL; e++)
    {
      if (kv_event_get_removed (*e) && kv_event_get_medium (*e) == KV_MEDIUM_CPU)
        {
          guint n;
          KvKey * const *keys = kv_event_get_keys (*e, &n);

          n_evicted += n;
          g_assert_true (kv_key_equal (keys[0], f->keys[0]));
          g_assert_true (kv_key_equal (keys[1], f->keys[1]));
        }
      kv_event_unref (*e);
    }
  g_free (events);
  g_assert_cmpuint (n_evicted, ==, 2);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_MISS);
  for (guint i = 2; i < 7; i++)
    g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), !=, KV_LOOKUP_RESULT_MISS);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.9 */
static void
test_touch_reorders_and_forwards (Fixture       *f,
                                  gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autofree char *touch1 = NULL;
  g_autofree char *touch_expected = NULL;
  g_autofree char *hex0 = kv_key_to_string (f->keys[0]);
  g_autofree char *hex1 = kv_key_to_string (f->keys[1]);

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 5, TRUE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  step (f);
  /* LRU order now k0..k4; touching [k0, k1] makes k0 the most recent */
  kv_tiering_manager_touch (f->manager, &f->keys[0], 2, req);
  touch1 = kv_delayed_tier_dup_calls (f->tier1, "touch");
  touch_expected = g_strdup_printf ("touch r1 [%s,%s]", hex0, hex1);
  g_assert_cmpstr (touch1, ==, touch_expected);

  store_keys (f, req, 5, 3, TRUE);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[2]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[3]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[4]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_HIT);
  /* one more: k1 is older than k0 */
  store_keys (f, req, 8, 1, TRUE);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.10 */
static void
test_failed_store_no_cascade (Fixture       *f,
                              gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 2, FALSE);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 0);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_primary_tier_get_n_free (f->primary), ==, 8);
  kv_tiering_manager_on_request_finished (f->manager, req);
  /* a failed store still finalizes the request */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished"), ==, 1);
}

/* §11.11 */
static void
test_submit_store_same_request_object (Fixture       *f,
                                       gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  KvTransferJob *job;
  guint n_keys;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 2, TRUE);
  job = kv_delayed_tier_get_pending (f->tier2, 0);
  g_assert_true (kv_transfer_job_get_request (job) == req);
  g_assert_false (kv_transfer_job_is_promotion (job));
  kv_transfer_job_get_keys (job, &n_keys);
  g_assert_cmpuint (n_keys, ==, 2);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §11.12: secondary tiers hear on_request_finished after the cascades. */
static void
test_finalization_order (Fixture       *f,
                         gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvRequest) empty = kv_request_new ("r2", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autofree char *order = NULL;
  KvKey * const *to_store;
  guint n;

  kv_tiering_manager_on_new_request (f->manager, req);
  prepared = kv_tiering_manager_prepare_store (f->manager, f->keys, 2, req, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
  kv_tiering_manager_on_request_finished (f->manager, req);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished"), ==, 0);
  g_ptr_array_set_size (f->log, 0);
  kv_tiering_manager_complete_store (f->manager, to_store, n, req, TRUE);
  order = joined_log (f, NULL);
  g_assert_true (g_regex_match_simple ("^delayed: submit_store 0 r1 \\[[^]]*\\] \\| "
                                       "delayed2: submit_store 1 r1 \\[[^]]*\\] \\| "
                                       "delayed: on_request_finished r1 \\| "
                                       "delayed2: on_request_finished r1$", order, 0, 0));

  /* a request that stored nothing finalizes at once */
  kv_tiering_manager_on_new_request (f->manager, empty);
  kv_tiering_manager_on_request_finished (f->manager, empty);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "on_request_finished r2"), ==, 1);

  /* the state is gone: finishing it again is reported */
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*r2 is not tracked*");
  kv_tiering_manager_on_request_finished (f->manager, empty);
  g_test_assert_expected_messages ();

  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
}

/* §11.13 */
static void
test_reset_cache (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvRequest) done = kv_request_new ("done", NULL);
  g_autoptr(KvRequest) active = kv_request_new ("active", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) bytes = pattern_bytes (9);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(KvPrepareStoreResult) unfinished = NULL;

  kv_tiering_manager_on_new_request (f->manager, done);
  kv_tiering_manager_on_new_request (f->manager, active);
  /* 'done' finished with its cascades in flight and one store never
   * completed: it is not finalized until the reset */
  store_keys (f, done, 0, 1, TRUE);
  unfinished = kv_tiering_manager_prepare_store (f->manager, &f->keys[1], 2, done, &error);
  g_assert_no_error (error);
  kv_tiering_manager_on_request_finished (f->manager, done);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished"), ==, 0);
  /* 'active' has a store in flight at reset time */
  prepared = kv_tiering_manager_prepare_store (f->manager, &f->keys[3], 1, active, &error);
  g_assert_no_error (error);
  /* and a promotion allocated but not submitted */
  kv_delayed_tier_put (f->tier2, f->keys[9], bytes);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[9], active), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_delayed_tier_clear_calls (f->tier1);
  kv_delayed_tier_clear_calls (f->tier2);

  g_assert_true (kv_tiering_manager_reset_cache (f->manager, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "drain_jobs"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "drain_jobs"), ==, 1);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 0);
  g_assert_cmpuint (kv_primary_tier_get_n_free (f->primary), ==, 8);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), ==, KV_LOOKUP_RESULT_MISS);
  /* the finished request was finalized by the reset */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished done"), ==, 1);
  /* the promotion was never submitted */
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_load"), ==, 0);
  /* secondary data survives */
  g_assert_nonnull (kv_delayed_tier_get_stored (f->tier1, f->keys[0]));
  /* the active request was kept with no store in flight: it finishes normally */
  kv_tiering_manager_on_request_finished (f->manager, active);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished active"), ==, 1);
}

/* §11.14 */
static void
test_on_new_request_policy (Fixture       *f,
                            gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);

  g_assert_cmpint (kv_tiering_manager_on_new_request (f->manager, a), ==, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  kv_delayed_tier_set_offload_policy (f->tier2, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  g_assert_cmpint (kv_tiering_manager_on_new_request (f->manager, b), ==, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_new_request"), ==, 2);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "on_new_request"), ==, 2);
  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
}

/* §11.15: request-level tiers get the chunks that were already there. */
static void
test_request_level_cascade (Fixture       *f,
                            gconstpointer  data)
{
  g_autoptr(KvRequest) producer = kv_request_new ("p", NULL);
  g_autoptr(KvRequest) warm = kv_request_new ("w", NULL);
  g_autoptr(KvRequest) mixed = kv_request_new ("m", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  guint n;

  kv_tiering_manager_on_new_request (f->manager, producer);
  store_keys (f, producer, 0, 3, TRUE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, producer);
  step (f);
  step (f);
  kv_delayed_tier_clear_calls (f->tier1);
  kv_delayed_tier_clear_calls (f->tier2);

  kv_delayed_tier_set_offload_policy (f->tier2, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  /* fully warm: nothing new to store, tier2 still receives the 3 chunks */
  kv_tiering_manager_on_new_request (f->manager, warm);
  prepared = kv_tiering_manager_prepare_store (f->manager, f->keys, 3, warm, &error);
  g_assert_no_error (error);
  kv_prepare_store_result_get_keys_to_store (prepared, &n);
  g_assert_cmpuint (n, ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 1);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (kv_delayed_tier_get_pending (f->tier2, 0)), ==, 3);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, warm);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  g_clear_pointer (&prepared, kv_prepare_store_result_unref);

  /* mixed: 2 existing chunks go to tier2 at prepare_store, the new one to both */
  kv_delayed_tier_clear_calls (f->tier1);
  kv_delayed_tier_clear_calls (f->tier2);
  kv_tiering_manager_on_new_request (f->manager, mixed);
  store_keys (f, mixed, 1, 3, TRUE);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 2);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (kv_delayed_tier_get_pending (f->tier2, 0)), ==, 2);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (kv_delayed_tier_get_pending (f->tier2, 1)), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 1);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (kv_delayed_tier_get_pending (f->tier1, 0)), ==, 1);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, mixed);
}

/* Existing chunks still being written are parked, cascaded when they land,
 * and hold the request's finalization until then (reference §5.7). */
static void
test_request_level_parked_keys (Fixture       *f,
                                gconstpointer  data)
{
  g_autoptr(KvRequest) writer = kv_request_new ("wr", NULL);
  g_autoptr(KvRequest) reader = kv_request_new ("rd", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) pending = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  guint n;

  kv_delayed_tier_set_offload_policy (f->tier2, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  kv_tiering_manager_on_new_request (f->manager, writer);
  pending = kv_tiering_manager_prepare_store (f->manager, &f->keys[0], 1, writer, &error);
  g_assert_no_error (error);

  kv_tiering_manager_on_new_request (f->manager, reader);
  prepared = kv_tiering_manager_prepare_store (f->manager, &f->keys[0], 1, reader, &error);
  g_assert_no_error (error);
  kv_tiering_manager_on_request_finished (f->manager, reader);
  g_assert_true (kv_tiering_manager_has_pending_work (f->manager));
  step (f);
  /* still pending: parked again, reader not finalized */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "on_request_finished rd"), ==, 0);

  to_store = kv_prepare_store_result_get_keys_to_store (pending, &n);
  kv_tiering_manager_complete_store (f->manager, to_store, n, writer, TRUE);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 1);
  step (f);
  /* the parked key landed: cascaded for the reader, which then finalizes */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 2);
  g_assert_cmpstr (kv_request_get_id (kv_transfer_job_get_request (kv_delayed_tier_get_pending (f->tier2, 1))),
                   ==, "rd");
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "on_request_finished rd"), ==, 1);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, writer);
}

/* §11.16 */
static void
test_tier_filter (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(GBytes) bytes = pattern_bytes (4);
  struct {
    const char *json;
    gboolean queried;
  } cases[] = {
    { NULL, TRUE },
    { "[{\"medium\": \"CPU\"}]", FALSE },
    { "[]", FALSE },
    { "[{\"medium\": \"storage\"}]", TRUE },
    { "[{}]", TRUE },
    /* a matcher field left unset on either side matches: the tier says
     * no locality, so LOCAL matches it */
    { "[{\"medium\": \"CPU\"}, {\"locality\": \"LOCAL\"}]", TRUE },
  };

  kv_delayed_tier_put (f->tier1, f->keys[4], bytes);
  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree char *id = g_strdup_printf ("req%u", c);
      g_autoptr(KvRequest) req = kv_request_new (id, NULL);
      KvLookupResult result;

      if (cases[c].json != NULL)
        {
          g_autoptr(GError) error = NULL;
          g_autoptr(KvTierFilter) filter = kv_tier_filter_parse_json (cases[c].json, &error);

          g_assert_no_error (error);
          kv_request_set_load_tier_filter (req, filter);
        }
      kv_delayed_tier_clear_calls (f->tier1);
      kv_tiering_manager_on_new_request (f->manager, req);
      result = kv_tiering_manager_lookup (f->manager, f->keys[4], req);
      g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "lookup"), ==, cases[c].queried ? 1 : 0);
      g_assert_cmpint (result, ==, cases[c].queried ? KV_LOOKUP_RESULT_HIT_PENDING : KV_LOOKUP_RESULT_MISS);
      /* the primary is never filtered: the pending slot answers for everyone */
      step (f);
      kv_delayed_tier_complete_all (f->tier1, FALSE);
      step (f);
      kv_tiering_manager_on_request_finished (f->manager, req);
    }
}

/* §11.17 */
static void
test_take_events_order (Fixture       *f,
                        gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  KvEvent **events;
  guint n = 0;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 1, TRUE);
  kv_delayed_tier_push_stored_event (f->tier2, f->keys[2]);
  kv_delayed_tier_push_stored_event (f->tier1, f->keys[1]);
  events = kv_tiering_manager_take_events (f->manager);
  for (; events[n] != NULL; n++)
    ;
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpint (kv_event_get_medium (events[0]), ==, KV_MEDIUM_CPU);
  g_assert_true (kv_key_equal (kv_event_get_keys (events[0], NULL)[0], f->keys[0]));
  g_assert_true (kv_key_equal (kv_event_get_keys (events[1], NULL)[0], f->keys[1]));
  g_assert_true (kv_key_equal (kv_event_get_keys (events[2], NULL)[0], f->keys[2]));
  for (guint i = 0; i < n; i++)
    kv_event_unref (events[i]);
  g_free (events);
  events = kv_tiering_manager_take_events (f->manager);
  g_assert_null (events[0]);
  g_free (events);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §5.3: a later tier's HIT wins over an earlier RETRY; RETRY otherwise. */
static void
test_retry_aggregation (Fixture       *f,
                        gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GBytes) bytes = pattern_bytes (6);

  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[6], KV_LOOKUP_RESULT_RETRY);
  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[7], KV_LOOKUP_RESULT_RETRY);
  kv_delayed_tier_put (f->tier2, f->keys[6], bytes);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[7], req), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[6], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_load"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_load"), ==, 0);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A promotion the primary tier cannot allocate answers MISS, not RETRY. */
static void
test_promotion_allocation_failure (Fixture       *f,
                                   gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GBytes) bytes = pattern_bytes (9);
  g_autofree guint32 *chunk_ids = NULL;
  g_autoptr(GError) error = NULL;
  guint n_ids = 0;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 5, TRUE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  step (f);
  /* pin everything for a device load */
  chunk_ids = kv_tiering_manager_prepare_load (f->manager, f->keys, 5, req, &n_ids, &error);
  g_assert_no_error (error);
  g_assert_nonnull (chunk_ids);
  g_assert_cmpuint (n_ids, ==, 5);
  for (guint i = 0; i < 5; i++)
    {
      guint32 id;

      g_assert_true (kv_primary_tier_get_chunk_id (f->primary, f->keys[i], &id));
      g_assert_cmpuint (chunk_ids[i], ==, id);
      g_assert_cmpint (ref_count (f, i), ==, 1);
    }
  kv_delayed_tier_put (f->tier1, f->keys[9], bytes);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[9], req), ==, KV_LOOKUP_RESULT_MISS);
  kv_tiering_manager_complete_load (f->manager, f->keys, 5, req);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[9], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A tier that refuses a submission still has its job reported once, and
 * the chunks it pinned are released. */
static void
test_refused_submission_reported (Fixture       *f,
                                  gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 1, TRUE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);

  /* after shutdown the invoker refuses every submission */
  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (f->tier1), NULL));
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*refused store job*");
  store_keys (f, req, 1, 1, TRUE);
  g_test_assert_expected_messages ();
  g_assert_cmpint (ref_count (f, 1), ==, 1);
  /* this step already polled (at prepare_store): the next one applies it */
  step (f);
  g_assert_cmpint (ref_count (f, 1), ==, 1);
  step (f);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* Unknown or repeated job ids from a tier are reported, never trusted. */
static void
test_unknown_job_reported (Fixture       *f,
                           gconstpointer  data)
{
  g_autoptr(KvJobResult) bogus = kv_job_result_new (4242, TRUE);
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvJobResult) again = NULL;

  kv_secondary_tier_complete_job (KV_SECONDARY_TIER (f->tier1), bogus);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*reported job 4242, which is not in flight*");
  step (f);
  g_test_assert_expected_messages ();

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 1, TRUE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  step (f);
  /* tier1 reports its job 0 a second time, then tier2's job 1 as its own */
  again = kv_job_result_new (0, TRUE);
  kv_secondary_tier_complete_job (KV_SECONDARY_TIER (f->tier1), again);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*reported job 0, which is not in flight*");
  step (f);
  g_test_assert_expected_messages ();
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

static void
test_bad_arguments (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvRequest) unknown = kv_request_new ("nobody", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) other = NULL;
  g_autoptr(KvDelayedTier) stranger = NULL;

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*key != NULL*");
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, NULL, req), ==, KV_LOOKUP_RESULT_MISS);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*KV_IS_REQUEST*");
  kv_tiering_manager_on_new_request (f->manager, NULL);
  g_test_assert_expected_messages ();

  other = kv_host_buffer_new (2, SLOT_SIZE, &error);
  g_assert_no_error (error);
  stranger = kv_delayed_tier_new (other, "stranger");
  g_assert_false (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (stranger), &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  g_assert_null (kv_tiering_manager_prepare_store (f->manager, f->keys, 1, unknown, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND);
  g_clear_error (&error);

  /* once serving, the tier list is fixed */
  kv_tiering_manager_on_new_request (f->manager, req);
  g_clear_object (&stranger);
  stranger = kv_delayed_tier_new (f->buffer, "late");
  g_assert_false (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (stranger), &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY);
  g_clear_error (&error);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*has no store in flight*");
  kv_tiering_manager_complete_store (f->manager, f->keys, 0, req, TRUE);
  g_test_assert_expected_messages ();
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* §5.9: a tier serving remote requests never sees itself through its
 * parent handle, and owns the store jobs it creates. */
typedef struct
{
  Fixture *f;
  KvRequest *remote;
  KvTransferJob *job;
  KvLookupResult lookups[2];
  KvOffloadPolicy policy;
  guint step;
} ServeCtx;

static void
serve_remote (KvDelayedTier   *tier,
              KvParentManager *parent,
              gpointer         user_data)
{
  ServeCtx *ctx = user_data;
  g_autoptr(GError) error = NULL;
  KvKey *keys[] = { ctx->f->keys[0], NULL };

  if (ctx->step++ != 0)
    return;
  ctx->policy = kv_parent_manager_on_new_request (parent, ctx->remote);
  ctx->lookups[0] = kv_parent_manager_lookup (parent, ctx->f->keys[0], ctx->remote);
  ctx->lookups[1] = kv_parent_manager_lookup (parent, ctx->f->keys[8], ctx->remote);
  ctx->job = kv_parent_manager_create_store_job (parent, keys, ctx->remote, &error);
  g_assert_no_error (error);
  kv_parent_manager_on_request_finished (parent, ctx->remote);
}

static void
test_serve_external_requests (Fixture       *f,
                              gconstpointer  data)
{
  g_autoptr(KvRequest) local = kv_request_new ("local", NULL);
  g_autoptr(KvRequest) remote = kv_request_new ("remote", NULL);
  g_autoptr(GBytes) bytes = pattern_bytes (8);
  g_autoptr(KvJobResult) result = NULL;
  ServeCtx ctx = { f, remote, NULL, { 0 }, 0, 0 };

  kv_tiering_manager_on_new_request (f->manager, local);
  store_keys (f, local, 0, 1, TRUE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, local);
  step (f);
  step (f);

  /* key 8 is in both tiers; tier1 serves, so only tier2 may promote it */
  kv_delayed_tier_put (f->tier1, f->keys[8], bytes);
  kv_delayed_tier_put (f->tier2, f->keys[8], bytes);
  kv_delayed_tier_set_serve_func (f->tier1, serve_remote, &ctx);
  kv_delayed_tier_clear_calls (f->tier1);
  kv_delayed_tier_clear_calls (f->tier2);
  step (f);

  g_assert_cmpint (ctx.policy, ==, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_new_request"), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "on_new_request remote"), ==, 1);
  g_assert_cmpint (ctx.lookups[0], ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (ctx.lookups[1], ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "lookup"), ==, 0);
  /* the promotion from the external lookup is flushed in the same step */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_load"), ==, 1);
  /* the store job is pinned and registered under tier1, which moves the bytes itself */
  g_assert_nonnull (ctx.job);
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  /* finishing the remote request tells tier2 only */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "on_request_finished remote"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished"), ==, 0);

  result = kv_job_result_new (kv_transfer_job_get_id (ctx.job), TRUE);
  kv_secondary_tier_complete_job (KV_SECONDARY_TIER (f->tier1), result);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[8]), ==, KV_LOOKUP_RESULT_HIT);
  kv_transfer_job_unref (ctx.job);
}

/* §5.8: the exact order of one step's end. */
static void
test_schedule_end_order (Fixture       *f,
                         gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GBytes) bytes = pattern_bytes (3);
  g_autofree char *order = NULL;

  kv_delayed_tier_put (f->tier1, f->keys[3], bytes);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[3], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_ptr_array_set_size (f->log, 0);
  step (f);
  order = joined_log (f, NULL);
  g_assert_true (g_regex_match_simple ("^delayed: serve_external_requests \\| "
                                       "delayed2: serve_external_requests \\| "
                                       "delayed: submit_load 0 r1 \\[[^]]*\\] \\| "
                                       "delayed: on_schedule_end \\| "
                                       "delayed2: on_schedule_end$", order, 0, 0));
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

static void
test_shutdown_fault_tolerant (Fixture       *f,
                              gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 2, TRUE);
  kv_delayed_tier_set_fail_shutdown (f->tier1, TRUE);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*Tier #1 (delayed, KvDelayedTier) failed to shut down*");
  g_assert_false (kv_tiering_manager_shutdown (f->manager, &error));
  g_test_assert_expected_messages ();
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  /* the failing tier did not stop the next one */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "shutdown"), ==, 1);
  /* tier2 reported its cancelled job: its pin is gone, tier1's stays */
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  g_clear_error (&error);
  /* a second call is a no-op */
  g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
  g_assert_no_error (error);
  kv_delayed_tier_set_fail_shutdown (f->tier1, FALSE);
  kv_delayed_tier_complete_all (f->tier1, FALSE);
}

/* ---- threads ------------------------------------------------------------- */

/* A tier that completes every job on one of g_get_num_processors() + 2
 * pool threads, concurrently. */
#define KV_TYPE_POOL_TIER (kv_pool_tier_get_type ())
G_DECLARE_FINAL_TYPE (KvPoolTier, kv_pool_tier, KV, POOL_TIER, KvSecondaryTier)

struct _KvPoolTier
{
  KvSecondaryTier parent_instance;
  GThreadPool *pool;
  gint in_flight;
};

G_DEFINE_FINAL_TYPE (KvPoolTier, kv_pool_tier, KV_TYPE_SECONDARY_TIER)

static void
pool_tier_run (gpointer data,
               gpointer user_data)
{
  KvTransferJob *job = data;
  KvPoolTier *self = user_data;
  g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);

  kv_secondary_tier_complete_job (KV_SECONDARY_TIER (self), result);
  kv_transfer_job_unref (job);
  g_atomic_int_dec_and_test (&self->in_flight);
}

static gboolean
pool_tier_submit (KvSecondaryTier  *tier,
                  KvTransferJob    *job,
                  GError          **error)
{
  KvPoolTier *self = KV_POOL_TIER (tier);

  g_atomic_int_inc (&self->in_flight);
  return g_thread_pool_push (self->pool, kv_transfer_job_ref (job), error);
}

static KvLookupResult
pool_tier_lookup (KvSecondaryTier *tier,
                  KvKey           *key,
                  KvRequest       *request)
{
  return KV_LOOKUP_RESULT_MISS;
}

static KvOffloadPolicy
pool_tier_on_new_request (KvSecondaryTier *tier,
                          KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static gboolean
pool_tier_drain (KvSecondaryTier  *tier,
                 GError          **error)
{
  KvPoolTier *self = KV_POOL_TIER (tier);

  while (g_atomic_int_get (&self->in_flight) > 0)
    g_thread_yield ();
  return TRUE;
}

static void
pool_tier_finalize (GObject *object)
{
  KvPoolTier *self = KV_POOL_TIER (object);

  g_thread_pool_free (self->pool, FALSE, TRUE);
  G_OBJECT_CLASS (kv_pool_tier_parent_class)->finalize (object);
}

static void
kv_pool_tier_class_init (KvPoolTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = pool_tier_finalize;
  tier_class->medium = KV_MEDIUM_CPU;
  tier_class->lookup = pool_tier_lookup;
  tier_class->submit_store = pool_tier_submit;
  tier_class->submit_load = pool_tier_submit;
  tier_class->on_new_request = pool_tier_on_new_request;
  tier_class->drain_jobs = pool_tier_drain;
}

static void
kv_pool_tier_init (KvPoolTier *self)
{
  self->pool = g_thread_pool_new (pool_tier_run, self, g_get_num_processors () + 2, TRUE, NULL);
}

typedef struct
{
  GThread *owner;
  GHashTable *seen;
  guint n_finished;
  guint n_wrong_thread;
  guint n_doubled;
} FinishedCounter;

static void
on_job_finished (KvSecondaryTier *tier,
                 KvJobResult     *result,
                 gpointer         user_data)
{
  FinishedCounter *counter = user_data;
  guint64 *id = g_new (guint64, 1);

  *id = kv_job_result_get_job_id (result);
  if (g_thread_self () != counter->owner)
    counter->n_wrong_thread++;
  if (!g_hash_table_add (counter->seen, id))
    counter->n_doubled++;
  counter->n_finished++;
}

static void
test_threaded_completions (void)
{
  const guint n_requests = 400;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (64, SLOT_SIZE, &error);
  g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (buffer, NULL, FALSE);
  g_autoptr(KvTieringManager) manager = kv_tiering_manager_new (primary);
  g_autoptr(KvPoolTier) tier = g_object_new (KV_TYPE_POOL_TIER, "primary", buffer, "tier-type", "pool", NULL);
  FinishedCounter counter = { g_thread_self (), g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL), 0, 0, 0 };
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  struct pollfd pfd;

  g_assert_no_error (error);
  g_assert_true (kv_tiering_manager_add_tier (manager, KV_SECONDARY_TIER (tier), &error));
  g_signal_connect (tier, "job-finished", G_CALLBACK (on_job_finished), &counter);
  pfd.fd = kv_tiering_manager_get_wakeup_fd (manager);
  pfd.events = POLLIN;

  for (guint r = 0; r < n_requests; r++)
    {
      g_autofree char *id = g_strdup_printf ("req-%u", r);
      g_autoptr(KvRequest) req = kv_request_new (id, NULL);
      g_autoptr(KvKey) key = make_key (r % 200 + 1000);
      g_autoptr(KvPrepareStoreResult) prepared = NULL;
      KvKey * const *to_store;
      guint n;

      kv_tiering_manager_on_new_request (manager, req);
      while ((prepared = kv_tiering_manager_prepare_store (manager, &key, 1, req, &error)) == NULL)
        {
          /* every slot is pinned by a job in flight: sleep until one returns */
          g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE);
          g_clear_error (&error);
          g_assert_cmpint (poll (&pfd, 1, 10000), ==, 1);
          kv_tiering_manager_on_schedule_end (manager, end);
        }
      to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
      if (n > 0)
        kv_tiering_manager_complete_store (manager, to_store, n, req, TRUE);
      kv_tiering_manager_on_request_finished (manager, req);
      kv_tiering_manager_on_schedule_end (manager, end);
    }
  /* sleep on the wake-up fd until every job came back */
  while (kv_tiering_manager_get_n_active_jobs (manager) > 0)
    {
      g_assert_cmpint (poll (&pfd, 1, 10000), ==, 1);
      kv_tiering_manager_on_schedule_end (manager, end);
    }

  g_assert_cmpuint (counter.n_wrong_thread, ==, 0);
  g_assert_cmpuint (counter.n_doubled, ==, 0);
  g_assert_cmpuint (counter.n_finished, ==, g_hash_table_size (counter.seen));
  g_assert_cmpuint (counter.n_finished, >=, 200);
  g_assert_cmpuint (kv_primary_tier_get_n_evictable (primary), ==, kv_primary_tier_get_n_allocated (primary));
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
  g_hash_table_unref (counter.seen);
}

static gboolean
on_wakeup (gpointer user_data)
{
  gboolean *fired = user_data;

  *fired = TRUE;
  return G_SOURCE_CONTINUE;
}

static gpointer
complete_later (gpointer data)
{
  KvDelayedTier *tier = data;

  kv_delayed_tier_complete_all (tier, TRUE);
  return NULL;
}

/* The GSource dispatches when a tier completes work on another thread. */
static void
test_wakeup_source (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GSource) source = kv_tiering_manager_create_source (f->manager);
  g_autoptr(GMainContext) context = g_main_context_new ();
  GThread *thread;
  gboolean fired = FALSE;

  g_source_set_callback (source, on_wakeup, &fired, NULL);
  g_source_attach (source, context);
  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 1, TRUE);
  g_assert_false (g_main_context_iteration (context, FALSE));
  g_assert_false (fired);

  thread = g_thread_new ("completer", complete_later, f->tier1);
  g_thread_join (thread);
  while (!fired)
    g_main_context_iteration (context, TRUE);
  /* the source re-armed: nothing more until new work */
  fired = FALSE;
  g_assert_false (g_main_context_iteration (context, FALSE));
  g_assert_false (fired);
  g_source_destroy (source);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* ---- owner thread --------------------------------------------------------- */

typedef struct
{
  KvTieringManager *manager;
  KvPrimaryTier *primary;
  KvKey *key;
  KvRequest *request;
  KvRequest *intruder_request;
} OwnerCase;

/* Every call from this thread must fail at once, with a critical, and
 * change nothing. */
static gpointer
intruder_main (gpointer data)
{
  OwnerCase *c = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  g_assert_cmpint (kv_tiering_manager_lookup (c->manager, c->key, c->request), ==,
                   KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_tiering_manager_on_new_request (c->manager, c->intruder_request), ==,
                   KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_assert_null (kv_tiering_manager_prepare_store (c->manager, &c->key, 1, c->request, &error));
  g_assert_no_error (error);
  kv_tiering_manager_on_schedule_end (c->manager, end);
  kv_tiering_manager_on_request_finished (c->manager, c->request);
  g_assert_false (kv_tiering_manager_shutdown (c->manager, &error));
  g_assert_no_error (error);
  /* the primary tier belongs to the manager's owner thread too */
  g_assert_null (kv_primary_tier_prepare_store (c->primary, &c->key, 1, &error));
  g_assert_no_error (error);
  g_assert_cmpint (kv_primary_tier_lookup (c->primary, c->key), ==, KV_LOOKUP_RESULT_MISS);
  return NULL;
}

/* A call from a thread other than the owner is caught: a critical naming
 * the function and both threads, no state touched, no crash; the owner
 * thread goes on as if nothing happened. */
static void
test_owner_thread_check (void)
{
  if (g_test_subprocess ())
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, &error);
      g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (buffer, NULL, FALSE);
      g_autoptr(KvTieringManager) manager = kv_tiering_manager_new (primary);
      g_autoptr(KvKey) key = make_key (7);
      g_autoptr(KvRequest) request = kv_request_new ("owned", NULL);
      g_autoptr(KvRequest) intruder_request = kv_request_new ("intruder", NULL);
      g_autoptr(KvPrepareStoreResult) prepared = NULL;
      OwnerCase c = { manager, primary, key, request, intruder_request };
      KvKey * const *to_store;
      guint n = 0;

      /* the criticals are the point: print them, do not abort */
      g_log_set_always_fatal (G_LOG_FATAL_MASK);
      g_log_set_fatal_mask ("GLib", G_LOG_FATAL_MASK);
      g_log_set_fatal_mask (G_LOG_DOMAIN, G_LOG_FATAL_MASK);

      /* the first serving call makes this thread the owner */
      kv_tiering_manager_on_new_request (manager, request);
      g_thread_join (g_thread_new ("kv-intruder", intruder_main, &c));

      /* nothing changed: the intruder's request is unknown, the key is
       * not stored, the manager is not shut down */
      g_assert_null (kv_tiering_manager_prepare_store (manager, &key, 1, intruder_request, &error));
      g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND);
      g_clear_error (&error);
      g_assert_cmpuint (kv_primary_tier_get_n_stored (primary), ==, 0);
      prepared = kv_tiering_manager_prepare_store (manager, &key, 1, request, &error);
      g_assert_no_error (error);
      to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
      g_assert_cmpuint (n, ==, 1);
      kv_tiering_manager_complete_store (manager, to_store, n, request, TRUE);
      g_assert_cmpint (kv_tiering_manager_lookup (manager, key, request), ==, KV_LOOKUP_RESULT_HIT);
      kv_tiering_manager_on_request_finished (manager, request);
      g_assert_true (kv_tiering_manager_shutdown (manager, &error));
      g_assert_no_error (error);
      return;
    }

  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*CRITICAL*kv_tiering_manager_lookup: called from thread 0x*"
                             " \"kv-intruder\", but this KvTieringManager belongs to thread 0x*"
                             " \"test-tiering-ma\" (the first thread that used it)*");
  g_test_trap_assert_stderr ("*kv_tiering_manager_on_new_request: called from thread*");
  g_test_trap_assert_stderr ("*kv_tiering_manager_prepare_store: called from thread*");
  g_test_trap_assert_stderr ("*kv_tiering_manager_on_schedule_end: called from thread*");
  g_test_trap_assert_stderr ("*kv_tiering_manager_on_request_finished: called from thread*");
  g_test_trap_assert_stderr ("*kv_tiering_manager_shutdown: called from thread*");
  g_test_trap_assert_stderr ("*kv_primary_tier_prepare_store: called from thread* \"kv-intruder\", "
                             "but this KvPrimaryTier (owned by a KvTieringManager) belongs to*");
  g_test_trap_assert_stderr ("*kv_primary_tier_lookup: called from thread*");
}

/* Built and configured on one thread, driven from another: the owner is
 * the thread of the first serving call. */
static gpointer
drive_main (gpointer data)
{
  KvTieringManager *manager = data;
  g_autoptr(KvRequest) request = kv_request_new ("driven", NULL);
  g_autoptr(KvKey) key = make_key (3);

  kv_tiering_manager_on_new_request (manager, request);
  g_assert_cmpint (kv_tiering_manager_lookup (manager, key, request), ==, KV_LOOKUP_RESULT_MISS);
  kv_tiering_manager_on_request_finished (manager, request);
  g_assert_true (kv_tiering_manager_shutdown (manager, NULL));
  return NULL;
}

static void
test_owner_is_first_serving_thread (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, &error);
  g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (buffer, NULL, FALSE);
  g_autoptr(KvTieringManager) manager = kv_tiering_manager_new (primary);
  g_autoptr(KvDelayedTier) tier = g_object_new (KV_TYPE_DELAYED_TIER, "primary", buffer,
                                                "tier-type", "delayed", NULL);

  g_assert_true (kv_tiering_manager_add_tier (manager, KV_SECONDARY_TIER (tier), &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_tiering_manager_get_n_tiers (manager), ==, 1);
  g_thread_join (g_thread_new ("kv-driver", drive_main, manager));
}

#define ADD(path, setup, func) \
  g_test_add ("/kvtier/manager/" path, Fixture, NULL, setup, func, fixture_teardown)

/* ---- hit-pending deadline ------------------------------------------------ */

static gdouble
released_count (KvTieringManager *manager)
{
  g_autoptr(KvStats) stats = kv_tiering_manager_get_stats (manager);
  gdouble value = 0;

  if (!kv_stats_lookup (stats, "kvtier_tiering_hit_pending_deadline_releases", NULL, &value))
    return 0;
  return value;
}

typedef struct
{
  KvClock *clock;
  KvHostBuffer *buffer;
  KvPrimaryTier *primary;
  KvTieringManager *manager;
  KvDelayedTier *tier;
  KvKey *keys[4];
} Deadline;

static void
deadline_setup (Deadline *d)
{
  g_autoptr(GError) error = NULL;

  d->clock = kv_clock_new_manual (1000000);
  d->buffer = kv_host_buffer_new (8, SLOT_SIZE, &error);
  g_assert_no_error (error);
  d->primary = kv_primary_tier_new (d->buffer, NULL, TRUE);
  d->manager = g_object_new (KV_TYPE_TIERING_MANAGER, "primary", d->primary, "clock", d->clock, NULL);
  d->tier = kv_delayed_tier_new (d->buffer, "delayed");
  g_assert_true (kv_tiering_manager_add_tier (d->manager, KV_SECONDARY_TIER (d->tier), &error));
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (d->keys); i++)
    d->keys[i] = make_key (i);
}

static void
deadline_teardown (Deadline *d)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (d->manager, &error));
  g_assert_no_error (error);
  g_clear_object (&d->manager);
  g_clear_object (&d->tier);
  g_clear_object (&d->primary);
  g_clear_object (&d->buffer);
  g_clear_object (&d->clock);
  for (guint i = 0; i < G_N_ELEMENTS (d->keys); i++)
    kv_key_unref (d->keys[i]);
}

static void
deadline_step (Deadline *d)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (d->manager, end);
}

/* A request waiting on a chunk whose store never finishes is released at
 * the deadline (60 s by default), once, and recomputes; a request that
 * starts waiting later has its own deadline; the chunk answers HIT to
 * everyone once it lands. */
static void
test_hit_pending_deadline_store (void)
{
  Deadline d = { 0 };
  g_autoptr(KvRequest) writer = kv_request_new ("writer", NULL);
  g_autoptr(KvRequest) reader = kv_request_new ("reader", NULL);
  g_autoptr(KvRequest) late = kv_request_new ("late", NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(GError) error = NULL;
  KvKey * const *to_store;
  guint n_to_store;

  deadline_setup (&d);
  g_assert_cmpfloat (kv_tiering_manager_get_hit_pending_deadline (d.manager), ==, 60.0);
  kv_tiering_manager_on_new_request (d.manager, writer);
  kv_tiering_manager_on_new_request (d.manager, reader);
  prepared = kv_tiering_manager_prepare_store (d.manager, d.keys, 1, writer, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);

  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], reader), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_clock_advance (d.clock, 59999999);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], reader), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_tiering_manager_on_new_request (d.manager, late);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], late), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_clock_advance (d.clock, 1);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], reader), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], reader), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], late), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  /* released to recompute: the tier was not asked for the chunk */
  g_assert_cmpuint (kv_delayed_tier_count_calls (d.tier, "lookup"), ==, 0);
  g_assert_cmpfloat (released_count (d.manager), ==, 1);
  g_assert_cmpfloat (released_count (d.manager), ==, 0);

  /* the write lands after all */
  memset (kv_host_buffer_peek_slot (d.buffer, kv_prepare_store_result_get_chunk_ids (prepared, NULL)[0]),
          0x5a, SLOT_SIZE);
  kv_tiering_manager_complete_store (d.manager, to_store, n_to_store, writer, TRUE);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], reader), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[0], late), ==, KV_LOOKUP_RESULT_HIT);
  kv_tiering_manager_on_request_finished (d.manager, writer);
  kv_tiering_manager_on_request_finished (d.manager, reader);
  kv_tiering_manager_on_request_finished (d.manager, late);
  deadline_step (&d);
  kv_delayed_tier_complete_all (d.tier, TRUE);
  deadline_step (&d);
  deadline_teardown (&d);
}

/* The same for a promotion the tier never finishes; with the deadline
 * set to 0 a request waits for ever. */
static void
test_hit_pending_deadline_promotion (void)
{
  Deadline d = { 0 };
  g_autoptr(KvRequest) reader = kv_request_new ("reader", NULL);
  g_autoptr(GBytes) bytes = pattern_bytes (1);
  gdouble deadline = -1;

  deadline_setup (&d);
  g_object_set (d.manager, "hit-pending-deadline", 2.5, NULL);
  g_object_get (d.manager, "hit-pending-deadline", &deadline, NULL);
  g_assert_cmpfloat (deadline, ==, 2.5);
  kv_delayed_tier_put (d.tier, d.keys[1], bytes);
  kv_delayed_tier_put (d.tier, d.keys[2], bytes);
  kv_tiering_manager_on_new_request (d.manager, reader);

  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[1], reader), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  deadline_step (&d);
  g_assert_cmpuint (kv_delayed_tier_count_calls (d.tier, "submit_load"), ==, 1);
  /* the lookup that started the promotion started no wait: this one does */
  kv_clock_advance (d.clock, 10000000);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[1], reader), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_clock_advance (d.clock, 2499999);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[1], reader), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_clock_advance (d.clock, 1);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[1], reader), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpfloat (released_count (d.manager), ==, 1);

  /* off */
  kv_tiering_manager_set_hit_pending_deadline (d.manager, 0.0);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[2], reader), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_clock_advance (d.clock, G_GINT64_CONSTANT (100000) * G_USEC_PER_SEC);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[2], reader), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpfloat (released_count (d.manager), ==, 0);

  deadline_step (&d);
  kv_delayed_tier_complete_all (d.tier, TRUE);
  deadline_step (&d);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[1], reader), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (d.manager, d.keys[2], reader), ==, KV_LOOKUP_RESULT_HIT);
  kv_tiering_manager_on_request_finished (d.manager, reader);
  deadline_teardown (&d);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  ADD ("store-then-hit-without-tiers", fixture_setup_bare, test_store_then_hit_without_tiers);
  ADD ("cascade-submits-once-per-tier", fixture_setup, test_cascade_submits_once_per_tier);
  ADD ("cascade-moves-slot-bytes", fixture_setup, test_cascade_moves_slot_bytes);
  ADD ("cascade-ref-count-and-poll-gate", fixture_setup, test_cascade_ref_count_and_poll_gate);
  ADD ("promotion-from-secondary", fixture_setup, test_promotion_from_secondary);
  ADD ("partial-promotion", fixture_setup, test_partial_promotion);
  ADD ("failed-promotion", fixture_setup, test_failed_promotion);
  ADD ("partial-promotion-foreign-key", fixture_setup, test_partial_promotion_foreign_key);
  ADD ("submit-load-batched-per-request", fixture_setup, test_submit_load_batched_per_request);
  ADD ("same-chunk-two-requests-one-load", fixture_setup, test_same_chunk_two_requests_one_load);
  ADD ("eviction-exact", fixture_setup_small, test_eviction_exact);
  ADD ("touch-reorders-and-forwards", fixture_setup_small, test_touch_reorders_and_forwards);
  ADD ("failed-store-no-cascade", fixture_setup, test_failed_store_no_cascade);
  ADD ("submit-store-same-request-object", fixture_setup, test_submit_store_same_request_object);
  ADD ("finalization-order", fixture_setup, test_finalization_order);
  ADD ("reset-cache", fixture_setup, test_reset_cache);
  ADD ("on-new-request-policy", fixture_setup, test_on_new_request_policy);
  ADD ("request-level-cascade", fixture_setup, test_request_level_cascade);
  ADD ("request-level-parked-keys", fixture_setup, test_request_level_parked_keys);
  ADD ("tier-filter", fixture_setup, test_tier_filter);
  ADD ("take-events-order", fixture_setup, test_take_events_order);
  ADD ("retry-aggregation", fixture_setup, test_retry_aggregation);
  ADD ("promotion-allocation-failure", fixture_setup_small, test_promotion_allocation_failure);
  ADD ("refused-submission-reported", fixture_setup_small, test_refused_submission_reported);
  ADD ("unknown-job-reported", fixture_setup, test_unknown_job_reported);
  ADD ("bad-arguments", fixture_setup, test_bad_arguments);
  ADD ("serve-external-requests", fixture_setup, test_serve_external_requests);
  ADD ("schedule-end-order", fixture_setup, test_schedule_end_order);
  ADD ("shutdown-fault-tolerant", fixture_setup, test_shutdown_fault_tolerant);
  ADD ("wakeup-source", fixture_setup, test_wakeup_source);
  g_test_add_func ("/kvtier/manager/hit-pending-deadline/store", test_hit_pending_deadline_store);
  g_test_add_func ("/kvtier/manager/hit-pending-deadline/promotion", test_hit_pending_deadline_promotion);
  g_test_add_func ("/kvtier/manager/threaded-completions", test_threaded_completions);
  g_test_add_func ("/kvtier/manager/owner-thread-check", test_owner_thread_check);
  g_test_add_func ("/kvtier/manager/owner-is-first-serving-thread", test_owner_is_first_serving_thread);

  return g_test_run ();
}
