/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-manager-stack.h"
#include "test-stats.h"

#include "kv-delayed-tier.h"
#include "kv-tiering-metrics-private.h"

/* Lazy promotion allocation (vLLM issue #49902, RFC #51439): a tier with
 * lazy-promotion-allocation gets its loads without primary slots and
 * reserves them when it starts each load, so a long prefix waiting in a
 * slow tier holds no slot; a reservation that finds no room fails the job
 * cleanly and the request's chunks answer MISS. The fs tier opts in. */

#define SLOT_SIZE 4096

typedef struct
{
  KvClock *clock;
  KvHostBuffer *buffer;
  KvPrimaryTier *primary;
  KvTieringManager *manager;
  KvDelayedTier *tier;      /* lazy */
  KvKey *keys[12];
} Fixture;

static KvKey *
make_key (guint i)
{
  guint8 hash[32];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 41 + b);
  hash[0] = (guint8) i;
  return kv_key_new (hash, sizeof hash, 0);
}

static GBytes *
pattern_bytes (guint i)
{
  guint8 *data = g_malloc (SLOT_SIZE);

  memset (data, 0x40 + i, SLOT_SIZE);
  return g_bytes_new_take (data, SLOT_SIZE);
}

static void
fixture_setup_n (Fixture *f,
                 guint    n_slots)
{
  g_autoptr(GError) error = NULL;

  f->clock = kv_clock_new_manual (1000000);
  f->buffer = kv_host_buffer_new (n_slots, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->primary = kv_primary_tier_new (f->buffer, NULL, TRUE);
  f->manager = g_object_new (KV_TYPE_TIERING_MANAGER, "primary", f->primary, "clock", f->clock, NULL);
  f->tier = g_object_new (KV_TYPE_DELAYED_TIER, "primary", f->buffer, "tier-type", "slow",
                          "lazy-promotion-allocation", TRUE, NULL);
  g_assert_true (kv_secondary_tier_get_lazy_promotion_allocation (KV_SECONDARY_TIER (f->tier)));
  g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier), &error));
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    {
      g_autoptr(GBytes) bytes = pattern_bytes (i);

      f->keys[i] = make_key (i);
      kv_delayed_tier_put (f->tier, f->keys[i], bytes);
    }
}

static void
fixture_setup_4 (Fixture       *f,
                 gconstpointer  data)
{
  fixture_setup_n (f, 4);
}

static void
fixture_setup_8 (Fixture       *f,
                 gconstpointer  data)
{
  fixture_setup_n (f, 8);
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
  g_assert_no_error (error);
  /* every job reported, every slot back */
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (f->primary), ==, 0);
  g_object_add_weak_pointer (G_OBJECT (f->manager), (gpointer *) &f->manager);
  g_object_unref (f->manager);
  g_assert_null (f->manager);
  g_clear_object (&f->tier);
  g_clear_object (&f->primary);
  g_clear_object (&f->buffer);
  g_clear_object (&f->clock);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
}

static void
step (Fixture *f)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (f->manager, end);
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

static void
assert_unpinned (Fixture *f,
                 guint    n_keys)
{
  for (guint i = 0; i < n_keys; i++)
    {
      gint ref = 0;

      if (kv_primary_tier_get_ref_count (f->primary, f->keys[i], &ref))
        g_assert_cmpint (ref, ==, 0);
    }
}

/* A prefix of 10 chunks, longer than the 4-slot primary, waits in the slow
 * tier without holding a slot; other requests wait on it too, and one load
 * is submitted. When the tier starts it, every slot is being written: the
 * job fails cleanly, the failure is counted, and the first request
 * recomputes while a later one may promote again. */
static void
test_long_prefix_holds_no_slot (Fixture       *f,
                                gconstpointer  data)
{
  g_autoptr(KvRequest) r1 = kv_request_new ("r1", NULL);
  g_autoptr(KvRequest) r2 = kv_request_new ("r2", NULL);
  g_autoptr(KvRequest) writer = kv_request_new ("w", NULL);
  g_autoptr(KvPrepareStoreResult) held = NULL;
  g_autoptr(KvKey) k12 = make_key (12);
  g_autoptr(KvKey) k13 = make_key (13);
  KvKey *others[4];
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;
  KvTransferJob *job;
  const guint32 *chunk_ids;
  guint n_chunk_ids, n_lookups;
  KvKey * const *held_keys;
  guint n_held;

  /* the engine writes 4 other chunks: every slot is taken for now */
  others[0] = f->keys[10];
  others[1] = f->keys[11];
  others[2] = k12;
  others[3] = k13;
  kv_tiering_manager_on_new_request (f->manager, writer);
  held = kv_tiering_manager_prepare_store (f->manager, others, 4, writer, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (f->primary), ==, 4);

  kv_tiering_manager_on_new_request (f->manager, r1);
  kv_tiering_manager_on_new_request (f->manager, r2);
  for (guint i = 0; i < 10; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], r1), ==,
                     KV_LOOKUP_RESULT_HIT_PENDING);
  /* nothing allocated for them: the 4 slots are the writer's */
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 4);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "submit_load"), ==, 1);
  job = kv_delayed_tier_get_pending (f->tier, 0);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job), ==, 10);
  chunk_ids = kv_transfer_job_get_chunk_ids (job, &n_chunk_ids);
  for (guint i = 0; i < n_chunk_ids; i++)
    g_assert_cmpuint (chunk_ids[i], ==, G_MAXUINT32);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 4);

  /* another request waits on the same load, without asking the tier */
  n_lookups = kv_delayed_tier_count_calls (f->tier, "lookup");
  for (guint i = 0; i < 10; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], r2), ==,
                     KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "lookup"), ==, n_lookups);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "submit_load"), ==, 1);

  /* the tier starts the load (and finishes it): no slot to be had */
  kv_delayed_tier_complete_all (f->tier, TRUE);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job), ==, 0);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 4);
  step (f);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);

  /* r1 recomputes */
  for (guint i = 0; i < 10; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], r1), ==, KV_LOOKUP_RESULT_MISS);
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, NULL), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES,
                                       (const char * const[]) { "1:slow", NULL }), ==, 1);

  /* the writes fail and free their slots; r2 did not fail: its lookup
   * promotes key 0 anew, and that one fits */
  held_keys = kv_prepare_store_result_get_keys_to_store (held, &n_held);
  kv_tiering_manager_complete_store (f->manager, held_keys, n_held, writer, FALSE);
  kv_tiering_manager_on_request_finished (f->manager, writer);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 0);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], r2), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "submit_load"), ==, 2);
  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], r2), ==, KV_LOOKUP_RESULT_HIT);
  assert_slot_holds (f, 0);
  kv_tiering_manager_on_request_finished (f->manager, r1);
  kv_tiering_manager_on_request_finished (f->manager, r2);
  assert_unpinned (f, 10);

  /* a finished request no longer carries the failure: r1 anew promotes */
  kv_tiering_manager_on_new_request (f->manager, r1);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[1], r1), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[1], r1), ==, KV_LOOKUP_RESULT_HIT);
  assert_slot_holds (f, 1);
  kv_tiering_manager_on_request_finished (f->manager, r1);
}

/* The slots are reserved when the tier starts the load, once; the job's
 * slots are then real, the primary counts them written, and the usage
 * gauge counts them from then on. */
static void
test_reserved_when_started (Fixture       *f,
                            gconstpointer  data)
{
  static const char * const slow[] = { "1:slow", NULL };
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvStats) before = NULL;
  g_autoptr(KvStats) during = NULL;
  g_autoptr(KvStats) after = NULL;
  KvTransferJob *job;
  const guint32 *chunk_ids;
  guint n;

  kv_tiering_manager_on_new_request (f->manager, req);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  before = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (before, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, slow), ==, 0);
  g_assert_cmpfloat (test_stats_value (before, KV_METRIC_ACTIVE_PROMOTION_JOBS, slow), ==, 1);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (f->primary), ==, 0);

  job = kv_delayed_tier_get_pending (f->tier, 0);
  g_assert_true (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (f->tier), job, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job), ==, 3);
  chunk_ids = kv_transfer_job_get_chunk_ids (job, &n);
  for (guint i = 0; i < n; i++)
    {
      g_assert_cmpuint (chunk_ids[i], <, 8);
      for (guint j = 0; j < i; j++)
        g_assert_cmpuint (chunk_ids[i], !=, chunk_ids[j]);
    }
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (f->primary), ==, 3);
  /* idempotent */
  g_assert_true (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (f->tier), job, &error));
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 3);
  /* now the primary tier answers for the keys */
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  during = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (during, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, slow), ==, 3.0 / 8.0);

  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  for (guint i = 0; i < 3; i++)
    {
      g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT);
      assert_slot_holds (f, i);
    }
  after = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (after, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, slow), ==, 0);
  g_assert_cmpfloat (test_stats_value (after, KV_METRIC_READ_BYTES, slow), ==, 3 * SLOT_SIZE);
  kv_tiering_manager_on_request_finished (f->manager, req);
  assert_unpinned (f, 3);
}

/* A chunk that reached the primary tier between the lookup and the start
 * of the load leaves the job; the others load. */
static void
test_key_stored_meanwhile (Fixture       *f,
                           gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvRequest) writer = kv_request_new ("w", NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(GError) error = NULL;
  KvKey * const *to_store;
  const guint32 *slots;
  KvTransferJob *job;
  guint n_to_store;

  kv_tiering_manager_on_new_request (f->manager, req);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);

  /* the engine computes key 1 for another request */
  kv_tiering_manager_on_new_request (f->manager, writer);
  prepared = kv_tiering_manager_prepare_store (f->manager, &f->keys[1], 1, writer, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  slots = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  g_assert_cmpuint (n_to_store, ==, 1);
  memset (kv_host_buffer_peek_slot (f->buffer, slots[0]), 0x41, SLOT_SIZE);
  kv_tiering_manager_complete_store (f->manager, to_store, 1, writer, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, writer);

  job = kv_delayed_tier_get_pending (f->tier, 0);
  g_assert_true (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (f->tier), job, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job), ==, 2);
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job, 0), f->keys[0]));
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job, 1), f->keys[2]));
  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  step (f);
  for (guint i = 0; i < 3; i++)
    {
      g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT);
      assert_slot_holds (f, i);
    }
  kv_tiering_manager_on_request_finished (f->manager, req);
  assert_unpinned (f, 3);
}

/* A load that fails before the tier started it frees nothing (it held
 * nothing), counts no allocation failure, and its chunks may be promoted
 * again. */
static void
test_failed_before_start (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvRequest) other = kv_request_new ("r2", NULL);
  g_autoptr(KvJobResult) failed = NULL;
  g_autoptr(KvStats) stats = NULL;
  KvTransferJob *job;

  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[4], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  job = kv_delayed_tier_get_pending (f->tier, 0);
  failed = kv_job_result_new (kv_transfer_job_get_id (job), FALSE);
  g_assert_true (kv_delayed_tier_complete_job_with (f->tier, kv_transfer_job_get_id (job), failed));
  step (f);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 0);
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, NULL), <=, 0);

  /* the key left the lazy set: the tier is asked again (its negative
   * cache answers MISS to the request whose load failed), and another
   * request promotes it anew */
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[4], req), ==, KV_LOOKUP_RESULT_MISS);
  kv_tiering_manager_on_new_request (f->manager, other);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[4], other), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "submit_load"), ==, 2);
  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[4], other), ==, KV_LOOKUP_RESULT_HIT);
  assert_slot_holds (f, 4);
  kv_tiering_manager_on_request_finished (f->manager, req);
  kv_tiering_manager_on_request_finished (f->manager, other);
}

/* The lookup that starts a lazy promotion counts its primary miss and its
 * tier hit once for its request (kept with the key until its slot is
 * reserved, then in the slot's entry, or in the tables when the load
 * failed first); a chunk waiting for its lazy promotion is pending for
 * every request, as a promoted chunk with a slot is. */
static void
test_metrics_counted_once (Fixture       *f,
                           gconstpointer  data)
{
  const char * const primary[] = { "0:primary", NULL };
  const char * const slow[] = { "1:slow", NULL };
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(KvJobResult) failed = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;
  KvTransferJob *job;

  g_object_unref (kv_tiering_manager_get_stats (f->manager));
  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[1], a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], b), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, primary), ==, 2);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_HITS, primary);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, slow), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, slow), ==, 2);
  g_clear_object (&stats);

  step (f);
  job = kv_delayed_tier_get_pending (f->tier, 0);
  g_assert_true (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (f->tier), job, &error));
  g_assert_no_error (error);
  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  /* landed: a counted them; b's first hit counts */
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], a), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[1], a), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], b), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], a), ==, KV_LOOKUP_RESULT_HIT);
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, primary), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, primary), ==, 1);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_QUERIES, slow);
  g_clear_object (&stats);

  /* a load that fails before it reserved its slot: a's next lookups of
   * the key (the tier now answers MISS to it) count nothing */
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[2], a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  job = kv_delayed_tier_get_pending (f->tier, 0);
  failed = kv_job_result_new (kv_transfer_job_get_id (job), FALSE);
  g_assert_true (kv_delayed_tier_complete_job_with (f->tier, kv_transfer_job_get_id (job), failed));
  step (f);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[2], a), ==, KV_LOOKUP_RESULT_MISS);
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, primary), ==, 1);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_HITS, primary);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, slow), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, slow), ==, 1);

  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
}

/* Stores the keys @first .. @first + @n - 1 for @request without
 * completing them: they hold their slots as writes in flight. Returns the
 * result (NULL with @error when refused). */
static KvPrepareStoreResult *
start_store (Fixture    *f,
             KvRequest  *request,
             guint       first,
             guint       n,
             GError    **error)
{
  return kv_tiering_manager_prepare_store (f->manager, &f->keys[first], n, request, error);
}

static void
finish_store (Fixture              *f,
              KvRequest            *request,
              KvPrepareStoreResult *prepared)
{
  KvKey * const *to_store;
  guint n_to_store;

  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  kv_tiering_manager_complete_store (f->manager, to_store, n_to_store, request, FALSE);
}

/* Room for part of the job when the tier starts it: the longest prefix
 * that fits loads, the request recomputes the rest. */
static void
test_prefix_that_fits (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(KvRequest) writer = kv_request_new ("w", NULL);
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvPrepareStoreResult) held = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;
  KvTransferJob *job;

  /* 2 of the 4 slots are being written */
  kv_tiering_manager_on_new_request (f->manager, writer);
  held = start_store (f, writer, 8, 2, &error);
  g_assert_no_error (error);
  kv_tiering_manager_on_new_request (f->manager, req);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  job = kv_delayed_tier_get_pending (f->tier, 0);
  g_assert_true (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (f->tier), job, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job), ==, 2);
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job, 0), f->keys[0]));
  g_assert_true (kv_key_equal (kv_transfer_job_get_key (job, 1), f->keys[1]));
  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[0], req), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[1], req), ==, KV_LOOKUP_RESULT_HIT);
  assert_slot_holds (f, 0);
  assert_slot_holds (f, 1);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[2], req), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[3], req), ==, KV_LOOKUP_RESULT_MISS);
  stats = kv_tiering_manager_get_stats (f->manager);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, NULL), ==, 1);

  finish_store (f, writer, held);
  kv_tiering_manager_on_request_finished (f->manager, writer);
  kv_tiering_manager_on_request_finished (f->manager, req);
  assert_unpinned (f, 4);
}

/* The chunks this step's lookups found in the lazy tier keep their room
 * until the step ends, as slots allocated at lookup would; from the next
 * step on, a load waiting in the tier holds nothing. */
static void
test_room_kept_until_step_end (Fixture       *f,
                               gconstpointer  data)
{
  g_autoptr(KvRequest) writer = kv_request_new ("w", NULL);
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvPrepareStoreResult) refused = NULL;
  g_autoptr(KvPrepareStoreResult) five = NULL;
  g_autoptr(KvPrepareStoreResult) later = NULL;
  g_autoptr(GError) error = NULL;
  KvTransferJob *job;

  kv_tiering_manager_on_new_request (f->manager, writer);
  kv_tiering_manager_on_new_request (f->manager, req);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 0);
  /* 6 + 3 > 8: refused, nothing changed; 5 + 3 fit */
  refused = start_store (f, writer, 4, 6, &error);
  g_assert_null (refused);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE);
  g_clear_error (&error);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 0);
  five = start_store (f, writer, 4, 5, &error);
  g_assert_no_error (error);
  finish_store (f, writer, five);
  step (f);

  /* the tier starts the load: the room is there */
  job = kv_delayed_tier_get_pending (f->tier, 0);
  g_assert_true (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (f->tier), job, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job), ==, 3);
  kv_delayed_tier_complete_all (f->tier, TRUE);
  step (f);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], req), ==, KV_LOOKUP_RESULT_HIT);
  kv_tiering_manager_on_request_finished (f->manager, req);
  step (f);

  /* a new load waits in the tier past its step: stores take every slot */
  {
    g_autoptr(KvRequest) waiting = kv_request_new ("r2", NULL);

    kv_tiering_manager_on_new_request (f->manager, waiting);
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[10], waiting), ==, KV_LOOKUP_RESULT_HIT_PENDING);
    step (f);
    later = start_store (f, writer, 0, 8, &error);
    g_assert_no_error (error);
    g_assert_nonnull (later);
    finish_store (f, writer, later);
    kv_delayed_tier_complete_all (f->tier, TRUE);
    step (f);
    kv_tiering_manager_on_request_finished (f->manager, waiting);
  }
  kv_tiering_manager_on_request_finished (f->manager, writer);
}

/* Bad calls get a clear error and change nothing. */
static void
test_reserve_errors (Fixture       *f,
                     gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvDelayedTier) loose = kv_delayed_tier_new (f->buffer, "loose");
  const guint32 slots[] = { 0 };
  g_autoptr(KvTransferJob) foreign_load = kv_transfer_job_new (99, f->keys, slots, 1, TRUE, req);
  g_autoptr(KvTransferJob) foreign_store = kv_transfer_job_new (98, f->keys, slots, 1, FALSE, req);

  /* a tier in no manager */
  g_assert_false (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (loose), foreign_load, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_true (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (loose), foreign_store, &error));
  g_assert_no_error (error);

  /* a job the manager does not know */
  g_assert_false (kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (f->tier), foreign_load, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND);
  g_clear_error (&error);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (foreign_load), ==, 1);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 0);
}

/* ---- the fs tier --------------------------------------------------------- */

static KvSecondaryTier *
make_fs_tier (KvHostBuffer *buffer,
              gpointer      data)
{
  g_autoptr(GError) error = NULL;
  FsVariant variant = { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_KVTIER };
  KvFsTier *tier = fs_test_tier_new_full (buffer, data, &variant, NULL, &error,
                                          "breaker-threshold", 0, NULL);

  g_assert_no_error (error);
  return KV_SECONDARY_TIER (tier);
}

/* The fs tier opts in and reserves in submit_load, where its load starts:
 * not at lookup. With no room then, the job fails cleanly and the request
 * recomputes. */
static void
test_fs_tier_is_lazy (void)
{
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  g_autoptr(KvRequest) req = kv_request_new ("reader", NULL);
  g_autoptr(KvRequest) filler = kv_request_new ("filler", NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(GPtrArray) fill = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  g_autoptr(GError) error = NULL;
  KvKey *keys[4];
  KvKey * const *to_store;
  guint n_to_store;
  TestStack s = { 0 };

  test_stack_init (&s, 8, FS_TEST_SLOT, make_fs_tier, root);
  g_assert_true (kv_secondary_tier_get_lazy_promotion_allocation (KV_SECONDARY_TIER (s.tier)));
  /* keys 0-3 go to disk, and out of the primary tier */
  g_assert_cmpuint (test_stack_store (&s, 0, 4), ==, 4);
  g_assert_cmpuint (test_stack_store (&s, 4, 4), ==, 4);
  g_assert_cmpuint (test_stack_store (&s, 8, 4), ==, 4);
  for (guint i = 0; i < 4; i++)
    {
      keys[i] = test_chunk_key (i);
      g_assert_cmpint (kv_primary_tier_lookup (s.primary, keys[i]), ==, KV_LOOKUP_RESULT_MISS);
    }

  kv_tiering_manager_on_new_request (s.manager, req);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (s.manager, keys[i], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  /* lookup reserved nothing */
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (s.primary), ==, 0);
  test_stack_step (&s);
  /* submit_load started the load: its 4 slots are being written */
  g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (s.tier), NULL));
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (s.primary), ==, 4);
  test_stack_step (&s);
  for (guint i = 0; i < 4; i++)
    {
      guint32 chunk;

      g_assert_cmpint (kv_tiering_manager_lookup (s.manager, keys[i], req), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_true (kv_primary_tier_get_chunk_id (s.primary, keys[i], &chunk));
      g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (s.buffer, chunk), FS_TEST_SLOT, i));
    }
  kv_tiering_manager_on_request_finished (s.manager, req);
  test_stack_step (&s);

  /* keys 8-11 now, while every slot is taken by writes in flight */
  g_assert_cmpuint (test_stack_store (&s, 12, 4), ==, 4);
  g_assert_cmpuint (test_stack_store (&s, 16, 4), ==, 4);
  for (guint i = 0; i < 8; i++)
    g_ptr_array_add (fill, test_chunk_key (100 + i));
  kv_tiering_manager_on_new_request (s.manager, filler);
  prepared = kv_tiering_manager_prepare_store (s.manager, (KvKey * const *) fill->pdata, 8, filler, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  g_assert_cmpuint (n_to_store, ==, 8);
  kv_tiering_manager_on_new_request (s.manager, req);
  for (guint i = 0; i < 4; i++)
    {
      kv_key_unref (keys[i]);
      keys[i] = test_chunk_key (8 + i);
      g_assert_cmpint (kv_tiering_manager_lookup (s.manager, keys[i], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
    }
  test_stack_step (&s);           /* the load starts: no room */
  g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (s.tier), NULL));
  test_stack_step (&s);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (s.manager), ==, 0);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (s.manager, keys[i], req), ==, KV_LOOKUP_RESULT_MISS);
  kv_tiering_manager_complete_store (s.manager, to_store, n_to_store, filler, FALSE);
  kv_tiering_manager_on_request_finished (s.manager, filler);
  kv_tiering_manager_on_request_finished (s.manager, req);
  test_stack_settle (&s);
  test_stack_assert_no_pins (&s, 20);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (s.primary), ==, 0);

  for (guint i = 0; i < 4; i++)
    kv_key_unref (keys[i]);
  test_stack_clear (&s);
  test_dir_remove (root);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

#define ADD(path, setup, func) \
  g_test_add ("/kvtier/lazy-promotion/" path, Fixture, NULL, setup, func, fixture_teardown)
  ADD ("long-prefix-holds-no-slot", fixture_setup_4, test_long_prefix_holds_no_slot);
  ADD ("reserved-when-started", fixture_setup_8, test_reserved_when_started);
  ADD ("key-stored-meanwhile", fixture_setup_8, test_key_stored_meanwhile);
  ADD ("failed-before-start", fixture_setup_8, test_failed_before_start);
  ADD ("prefix-that-fits", fixture_setup_4, test_prefix_that_fits);
  ADD ("room-kept-until-step-end", fixture_setup_8, test_room_kept_until_step_end);
  ADD ("reserve-errors", fixture_setup_8, test_reserve_errors);
  ADD ("metrics-counted-once", fixture_setup_8, test_metrics_counted_once);
#undef ADD
  g_test_add_func ("/kvtier/lazy-promotion/fs-tier", test_fs_tier_is_lazy);

  return g_test_run ();
}
