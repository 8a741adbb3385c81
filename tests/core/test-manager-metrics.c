/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

#include "kv-delayed-tier.h"
#include "kv-tiering-metrics-private.h"
#include "test-stats.h"

/* Reference §11 items 18 (metrics), 19 (backpressure, manager side) and 20
 * (admission wiring), seen through KvTieringManager: what
 * kv_tiering_manager_get_stats() reports, which jobs the tiers receive and
 * which primary slots stay pinned. The manager and every detector share one
 * manual clock, so latencies are exact and nothing sleeps. */

#define SLOT_SIZE 4096
#define MIB       1048576.0

static const char * const P[] = { "0:primary", NULL };
static const char * const T1[] = { "1:delayed", NULL };
static const char * const T2[] = { "2:delayed2", NULL };

typedef struct
{
  guint n_slots;
  gboolean det1;    /* tier 1 gets an EMA detector */
  gboolean det2;    /* tier 2 gets an EMA detector */
  gboolean fresh;   /* leave the first get_stats (every series at zero) to the test */
} Setup;

static const Setup setup_default = { 8, TRUE, FALSE, FALSE };
static const Setup setup_small = { 6, FALSE, FALSE, FALSE };
static const Setup setup_both = { 8, TRUE, TRUE, FALSE };
static const Setup setup_fresh = { 8, TRUE, FALSE, TRUE };

typedef struct
{
  KvClock *clock;
  KvHostBuffer *buffer;
  KvPrimaryTier *primary;
  KvTieringManager *manager;
  KvDelayedTier *tier1;
  KvDelayedTier *tier2;
  KvEmaBackpressureDetector *det1;  /* nullable */
  KvEmaBackpressureDetector *det2;  /* nullable */
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

/* The LOCAL preset (high 0.005, low 0.001 s/MiB) with the reference's
 * defaults: alpha 0.3, warm-up 3, half-life 2 s, cooldown 1 s. A drop
 * policy, so every store is dropped while under pressure. */
static KvEmaBackpressureDetector *
new_detector (KvClock *clock)
{
  g_autoptr(KvDropStorePolicy) policy = kv_drop_store_policy_new ();
  g_autoptr(GError) error = NULL;
  KvEmaBackpressureDetector *detector;

  detector = kv_ema_backpressure_detector_new (0.005, 0.001, 0.3, 3, 2.0, 1.0,
                                               KV_BACKPRESSURE_POLICY (policy), clock, &error);
  g_assert_no_error (error);
  g_assert_nonnull (detector);
  return detector;
}

static KvDelayedTier *
new_tier (Fixture                   *f,
          const char                *tier_type,
          KvEmaBackpressureDetector *detector)
{
  return g_object_new (KV_TYPE_DELAYED_TIER,
                       "primary", f->buffer,
                       "tier-type", tier_type,
                       "backpressure-detector", detector,
                       NULL);
}

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  const Setup *setup = data;
  g_autoptr(GError) error = NULL;

  f->clock = kv_clock_new_manual (G_USEC_PER_SEC);
  f->buffer = kv_host_buffer_new (setup->n_slots, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->primary = kv_primary_tier_new (f->buffer, NULL, FALSE);
  f->manager = g_object_new (KV_TYPE_TIERING_MANAGER,
                             "primary", f->primary,
                             "clock", f->clock,
                             NULL);
  if (setup->det1)
    f->det1 = new_detector (f->clock);
  if (setup->det2)
    f->det2 = new_detector (f->clock);
  f->tier1 = new_tier (f, "delayed", f->det1);
  f->tier2 = new_tier (f, "delayed2", f->det2);
  g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier1), &error));
  g_assert_no_error (error);
  g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier2), &error));
  g_assert_no_error (error);
  g_assert_true (kv_secondary_tier_get_backpressure_detector (KV_SECONDARY_TIER (f->tier1)) ==
                 (KvBackpressureDetector *) f->det1);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = make_key (i);
  /* the first get_stats holds every series at zero: the tests read deltas */
  if (!setup->fresh)
    g_object_unref (kv_tiering_manager_get_stats (f->manager));
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
  g_clear_object (&f->det1);
  g_clear_object (&f->det2);
  g_clear_object (&f->primary);
  g_clear_object (&f->buffer);
  g_clear_object (&f->clock);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
}

/* ---- helpers ------------------------------------------------------------- */

static void
step (Fixture *f)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (f->manager, end);
}

/* Ends a step in which the scheduler allocated @req_id's blocks. */
static void
step_allocating (Fixture    *f,
                 const char *req_id)
{
  const char * const ids[] = { req_id, NULL };
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (ids, NULL);

  kv_tiering_manager_on_schedule_end (f->manager, end);
}

/* Stores keys[first .. first + n) through the manager (which cascades them
 * to the tiers whose detector admits the store). */
static void
store_keys (Fixture   *f,
            KvRequest *request,
            guint      first,
            guint      n)
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
  g_assert_cmpuint (n_to_store, ==, n);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  for (guint i = 0; i < n_to_store; i++)
    memset (kv_host_buffer_peek_slot (f->buffer, chunk_ids[i]),
            0x40 + kv_key_get_hash (to_store[i], NULL)[0], SLOT_SIZE);
  kv_tiering_manager_complete_store (f->manager, to_store, n_to_store, request, TRUE);
}

static GBytes *
pattern_bytes (guint i)
{
  guint8 *data = g_malloc (SLOT_SIZE);

  memset (data, 0x40 + i, SLOT_SIZE);
  return g_bytes_new_take (data, SLOT_SIZE);
}

static void
put (KvDelayedTier *tier,
     Fixture       *f,
     guint          key_index)
{
  g_autoptr(GBytes) bytes = pattern_bytes (key_index);

  kv_delayed_tier_put (tier, f->keys[key_index], bytes);
}

static gint
ref_count (Fixture *f,
           guint    key_index)
{
  gint ref = G_MININT;

  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[key_index], &ref));
  return ref;
}

static KvLookupResult
lookup (Fixture   *f,
        guint      key_index,
        KvRequest *request)
{
  return kv_tiering_manager_lookup (f->manager, f->keys[key_index], request);
}

static KvStats *
get_stats (Fixture *f)
{
  KvStats *stats = kv_tiering_manager_get_stats (f->manager);

  g_assert_nonnull (stats);
  return stats;
}

static guint64
sync_count (KvStats            *stats,
            const char * const *labels)
{
  return kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_SYNC_DELAY, labels, NULL);
}

static guint64
async_count (KvStats            *stats,
             const char * const *labels,
             gdouble            *sum)
{
  return kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_ASYNC_DELAY, labels, sum);
}

/* The id of the index-th job the tier holds (not yet completed). */
static guint64
pending_id (KvDelayedTier *tier,
            guint          index)
{
  return kv_transfer_job_get_id (kv_delayed_tier_get_pending (tier, index));
}

static void
complete_pending (KvDelayedTier *tier,
                  guint          index,
                  gboolean       success,
                  gdouble        transfer_time,
                  gint64         transfer_bytes)
{
  guint64 id = pending_id (tier, index);
  g_autoptr(KvJobResult) result = kv_job_result_new (id, success);

  if (transfer_time >= 0)
    kv_job_result_set_transfer_time (result, transfer_time);
  if (transfer_bytes >= 0)
    kv_job_result_set_transfer_bytes (result, transfer_bytes);
  g_assert_true (kv_delayed_tier_complete_job_with (tier, id, result));
}

static gdouble
ema_of (KvEmaBackpressureDetector *detector)
{
  return kv_ema_backpressure_detector_get_store_latency_ema (detector);
}

static gboolean
under (KvEmaBackpressureDetector *detector)
{
  return kv_backpressure_detector_is_under_pressure (KV_BACKPRESSURE_DETECTOR (detector));
}

/* Puts @detector under pressure with (at least) 3 warm-up samples and one
 * real one, all at 0.010 s/MiB (2× high), then pins the average to 0.010
 * (earlier samples, such as a store that took no time, would lower it). The
 * clock does not move, so no idle decay applies until a test advances it. */
static void
pressurize (KvEmaBackpressureDetector *detector)
{
  for (guint i = 0; i < 4; i++)
    kv_backpressure_detector_on_store_completed (KV_BACKPRESSURE_DETECTOR (detector), 0.010, 1 << 20);
  g_assert_true (under (detector));
  kv_ema_backpressure_detector_set_store_latency_ema (detector, 0.010);
}

/* What the EMA detector computes from a store of @n_bytes that took
 * @elapsed_us: seconds per MiB. */
static gdouble
sample_of (gint64  elapsed_us,
           guint64 n_bytes)
{
  return (elapsed_us / 1e6) / ((gdouble) n_bytes / MIB);
}

/* ---- item 18: lookup metrics -------------------------------------------- */

/* Two chunks that miss everywhere: one sync-delay sample per chunk on every
 * tier's label, and no async delay. */
static void
test_sync_delay_per_tier (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 1, req), ==, KV_LOOKUP_RESULT_MISS);
  /* asking again in the same step counts nothing more */
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_MISS);

  stats = get_stats (f);
  g_assert_cmpuint (sync_count (stats, P), ==, 2);
  g_assert_cmpuint (sync_count (stats, T1), ==, 2);
  g_assert_cmpuint (sync_count (stats, T2), ==, 2);
  g_assert_cmpuint (async_count (stats, P, NULL), ==, 0);
  g_assert_cmpuint (async_count (stats, T1, NULL), ==, 0);
  g_assert_cmpuint (async_count (stats, T2, NULL), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T2), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T1), ==, -1);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A chunk answered at once, and a chunk promoted over several steps, give
 * no async-delay sample: HIT_PENDING is never recorded and the chunk's
 * later primary HIT was already counted as the first MISS. */
static void
test_no_async_delay_immediate_or_promotion (Fixture       *f,
                                            gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;

  put (f->tier1, f, 5);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 3, req), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 5, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (lookup (f, 5, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  kv_clock_advance (f->clock, 250000);
  g_assert_cmpint (lookup (f, 5, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  kv_clock_advance (f->clock, 250000);
  g_assert_cmpint (lookup (f, 5, req), ==, KV_LOOKUP_RESULT_HIT);

  stats = get_stats (f);
  g_assert_cmpuint (async_count (stats, P, NULL), ==, 0);
  g_assert_cmpuint (async_count (stats, T1, NULL), ==, 0);
  g_assert_cmpuint (async_count (stats, T2, NULL), ==, 0);
  /* key 3: primary, tier 1 and tier 2 miss; key 5: primary miss, tier 1 hit */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T2), ==, 1);
  g_assert_cmpuint (sync_count (stats, P), ==, 2);
  g_assert_cmpuint (sync_count (stats, T1), ==, 2);
  g_assert_cmpuint (sync_count (stats, T2), ==, 1);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A tier that answers RETRY and resolves later gives exactly one
 * async-delay sample per chunk: the manual time since the first RETRY (plus
 * the real duration of that first lookup, microseconds). */
static void
test_async_delay_after_retry (Fixture       *f,
                              gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) before = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) again = NULL;
  gdouble sum = -1;

  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[0], KV_LOOKUP_RESULT_RETRY);
  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[1], KV_LOOKUP_RESULT_RETRY);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (lookup (f, 1, req), ==, KV_LOOKUP_RESULT_RETRY);
  step (f);

  /* unresolved: tier 1 has counted nothing yet */
  before = get_stats (f);
  g_assert_cmpfloat (test_stats_value (before, KV_METRIC_CHUNK_QUERIES, T1), ==, -1);
  g_assert_cmpuint (sync_count (before, T1), ==, 0);
  g_assert_cmpuint (async_count (before, T1, NULL), ==, 0);
  g_assert_cmpfloat (test_stats_value (before, KV_METRIC_CHUNK_QUERIES, P), ==, 2);
  g_assert_cmpfloat (test_stats_value (before, KV_METRIC_CHUNK_QUERIES, T2), ==, 2);

  /* still RETRY 20 ms later: the first deferral time is kept */
  kv_clock_advance (f->clock, 20000);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_RETRY);
  step (f);
  /* key 0 resolves to MISS 50 ms after its first RETRY */
  kv_clock_advance (f->clock, 30000);
  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[0], KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_MISS);
  step (f);
  /* key 1 resolves to HIT 70 ms after its first RETRY (and is promoted) */
  kv_clock_advance (f->clock, 20000);
  put (f->tier1, f, 1);
  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[1], KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 1, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  /* answered: a RETRY now does not restart the clock, a HIT is not counted again */
  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[0], KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_RETRY);
  kv_delayed_tier_set_lookup_result (f->tier1, f->keys[0], KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_MISS);

  stats = get_stats (f);
  g_assert_cmpuint (async_count (stats, T1, &sum), ==, 2);
  g_assert_cmpfloat (sum, >=, 0.050 + 0.070 - 1e-9);
  g_assert_cmpfloat (sum, <, 0.050 + 0.070 + 1.0);
  g_assert_cmpuint (async_count (stats, P, NULL), ==, 0);
  g_assert_cmpuint (async_count (stats, T2, NULL), ==, 0);
  g_assert_cmpuint (sync_count (stats, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T1), ==, 1);
  /* primary and tier 2 answered at once in the first step: nothing new */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T2), ==, -1);

  /* consumed once */
  again = get_stats (f);
  g_assert_cmpuint (async_count (again, T1, NULL), ==, 0);
  g_assert_cmpuint (sync_count (again, T1), ==, 0);

  step (f);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* Queries and hits per label: a primary hit, a tier-1 hit, a tier-2 hit and
 * a miss everywhere, each counted once per request. */
static void
test_queries_and_hits_per_label (Fixture       *f,
                                 gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) again = NULL;
  KvKey * const *to_store;
  guint n;

  /* key 0 sits in the primary tier (stored behind the manager's back, so no
   * cascade job muddies the counters) */
  prepared = kv_primary_tier_prepare_store (f->primary, &f->keys[0], 1, NULL);
  g_assert_nonnull (prepared);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
  kv_primary_tier_complete_store (f->primary, to_store, n, TRUE);
  put (f->tier1, f, 1);
  put (f->tier2, f, 2);

  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  for (guint round = 0; round < 2; round++)
    {
      g_assert_cmpint (lookup (f, 0, a), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_cmpint (lookup (f, 1, a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
      g_assert_cmpint (lookup (f, 2, a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
      g_assert_cmpint (lookup (f, 3, a), ==, KV_LOOKUP_RESULT_MISS);
    }
  /* another request counts its own lookups */
  g_assert_cmpint (lookup (f, 0, b), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 3, b), ==, KV_LOOKUP_RESULT_MISS);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 4 + 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, 1 + 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T1), ==, 3 + 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T2), ==, 2 + 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T2), ==, 1);
  g_assert_cmpuint (sync_count (stats, P), ==, 6);
  g_assert_cmpuint (sync_count (stats, T1), ==, 4);
  g_assert_cmpuint (sync_count (stats, T2), ==, 3);

  /* counters are consumed by the read */
  again = get_stats (f);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_CHUNK_QUERIES, P), ==, -1);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_CHUNK_HITS, T1), ==, -1);

  step (f);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
}

/* Stores keys[i] in the primary tier behind the manager's back (no
 * cascade), evicting the least recently used chunks if needed. */
static void
store_in_primary (Fixture *f,
                  guint    i)
{
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  guint n;

  prepared = kv_primary_tier_prepare_store (f->primary, &f->keys[i], 1, NULL);
  g_assert_nonnull (prepared);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
  kv_primary_tier_complete_store (f->primary, to_store, n, TRUE);
}

/* A primary hit is counted once per request: across repeated lookups and
 * steps, with other requests' lookups of the same chunk in between, and
 * after the chunk was evicted and stored again; a new request counts it
 * again. */
static void
test_primary_hit_once_per_request (Fixture       *f,
                                   gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(KvRequest) c = kv_request_new ("c", NULL);
  g_autoptr(KvRequest) a_again = kv_request_new ("a", NULL);
  g_autoptr(KvStats) stats = NULL;

  store_in_primary (f, 0);
  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  for (guint round = 0; round < 3; round++)
    {
      g_assert_cmpint (lookup (f, 0, a), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_cmpint (lookup (f, 0, a), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_cmpint (lookup (f, 0, b), ==, KV_LOOKUP_RESULT_HIT);
      step (f);
    }
  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, 2);
  g_assert_cmpuint (sync_count (stats, P), ==, 2);
  g_clear_object (&stats);

  /* a new request counts it */
  kv_tiering_manager_on_new_request (f->manager, c);
  g_assert_cmpint (lookup (f, 0, c), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 0, c), ==, KV_LOOKUP_RESULT_HIT);
  /* key 0 is evicted by 8 other chunks, then stored again: no request
   * counts it twice */
  for (guint i = 1; i <= 8; i++)
    store_in_primary (f, i);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  store_in_primary (f, 0);
  g_assert_cmpint (lookup (f, 0, c), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 0, b), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 0, a), ==, KV_LOOKUP_RESULT_HIT);
  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, 1);
  g_clear_object (&stats);

  /* b got its blocks: no more counting; "a" announced again starts over */
  step_allocating (f, "b");
  g_assert_cmpint (lookup (f, 0, b), ==, KV_LOOKUP_RESULT_HIT);
  kv_tiering_manager_on_new_request (f->manager, a_again);
  g_assert_cmpint (lookup (f, 0, a_again), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 0, a_again), ==, KV_LOOKUP_RESULT_HIT);
  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 1);

  kv_tiering_manager_on_request_finished (f->manager, a_again);
  kv_tiering_manager_on_request_finished (f->manager, b);
  kv_tiering_manager_on_request_finished (f->manager, c);
}

/* The lookup that promotes a chunk counts its primary miss and its tier
 * hit once for its request: not again when the chunk lands and answers
 * HIT, nor when another request's hit took the chunk's stamp over, nor
 * when the chunk was evicted and the request finds it in the tier again. */
static void
test_promoted_chunk_counted_once (Fixture       *f,
                                  gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(KvRequest) c = kv_request_new ("c", NULL);
  g_autoptr(KvStats) stats = NULL;

  put (f->tier1, f, 1);
  put (f->tier2, f, 2);
  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  kv_tiering_manager_on_new_request (f->manager, c);
  g_assert_cmpint (lookup (f, 1, a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (lookup (f, 1, a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  /* tier 1 misses key 2 first, tier 2 has it */
  g_assert_cmpint (lookup (f, 2, c), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 2);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_HITS, P);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T2), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T2), ==, 1);
  g_assert_cmpuint (sync_count (stats, P), ==, 2);
  g_clear_object (&stats);

  /* landed: the requests that promoted them counted them already; b's
   * first hit counts, and takes key 1's stamp over from a */
  g_assert_cmpint (lookup (f, 1, a), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 2, c), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 1, b), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 1, a), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 2, c), ==, KV_LOOKUP_RESULT_HIT);
  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, 1);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_QUERIES, T1);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_QUERIES, T2);
  g_clear_object (&stats);

  /* both evicted by 8 other chunks; found in the tiers again, counted by
   * nobody (c's stamp on key 2 still held its tier 2 hit) */
  for (guint i = 3; i <= 10; i++)
    store_in_primary (f, i);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[2]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 1, a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (lookup (f, 2, c), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (lookup (f, 1, b), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  stats = get_stats (f);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_QUERIES, P);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_QUERIES, T1);
  test_stats_assert_no_count (stats, KV_METRIC_CHUNK_QUERIES, T2);
  g_clear_object (&stats);

  step (f);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
  kv_tiering_manager_on_request_finished (f->manager, c);
}

/* A request whose blocks were allocated (new request ids of the step end)
 * stops counting lookups; other requests still count. */
static void
test_ignored_after_allocation (Fixture       *f,
                               gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(KvStats) stats = NULL;

  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  g_assert_cmpint (lookup (f, 0, a), ==, KV_LOOKUP_RESULT_MISS);
  step_allocating (f, "a");
  g_assert_cmpint (lookup (f, 1, a), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 2, a), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 1, b), ==, KV_LOOKUP_RESULT_MISS);

  stats = get_stats (f);
  /* a's key 0 and b's key 1, on every tier */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, T2), ==, 2);
  g_assert_cmpuint (sync_count (stats, P), ==, 2);
  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
}

/* A request id announced again starts over, lookup accounting included
 * (reference §5.7: on_new_request resets the request's metrics state). */
static void
test_restarted_request_counts_again (Fixture       *f,
                                     gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) again = kv_request_new ("a", NULL);
  g_autoptr(KvStats) stats = NULL;

  kv_tiering_manager_on_new_request (f->manager, a);
  g_assert_cmpint (lookup (f, 0, a), ==, KV_LOOKUP_RESULT_MISS);
  step_allocating (f, "a");
  kv_tiering_manager_on_new_request (f->manager, again);
  g_assert_cmpint (lookup (f, 0, again), ==, KV_LOOKUP_RESULT_MISS);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 2);
  g_assert_cmpuint (sync_count (stats, P), ==, 2);
  kv_tiering_manager_on_request_finished (f->manager, again);
}

/* ---- item 18: job metrics ------------------------------------------------ */

/* Bytes count the chunks of successful jobs (n × slot size, whatever the
 * tier says it moved); time adds the tier's transfer time when it has one. */
static void
test_bytes_and_time (Fixture       *f,
                     gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) again = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 2);
  step (f);
  complete_pending (f->tier1, 0, TRUE, 0.25, 3 * SLOT_SIZE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  for (guint i = 5; i < 8; i++)
    {
      put (f->tier1, f, i);
      g_assert_cmpint (lookup (f, i, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
    }
  step (f);
  complete_pending (f->tier1, 0, TRUE, 0.5, -1);
  step (f);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, T1), ==, 2 * SLOT_SIZE);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_TIME, T1), ==, 0.25);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, T2), ==, 2 * SLOT_SIZE);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_TIME, T2), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, T1), ==, 3 * SLOT_SIZE);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_TIME, T1), ==, 0.5);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, T2), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, T1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CASCADE_JOB_FAILURES, T1), ==, -1);

  again = get_stats (f);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_WRITE_BYTES, T1), ==, -1);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_READ_BYTES, T1), ==, -1);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A failed promotion and a failed cascade count one failure each on their
 * tier's label and move no bytes. */
static void
test_failure_counters (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 2);
  put (f->tier1, f, 5);
  g_assert_cmpint (lookup (f, 5, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  /* tier 1: store OK, promotion failed; tier 2: store failed */
  complete_pending (f->tier1, 0, TRUE, -1, -1);
  complete_pending (f->tier1, 0, FALSE, 0.5, -1);
  kv_delayed_tier_complete_all (f->tier2, FALSE);
  step (f);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[5]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (ref_count (f, 0), ==, 0);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CASCADE_JOB_FAILURES, T1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CASCADE_JOB_FAILURES, T2), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, T2), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, T1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_TIME, T1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, T2), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, T1), ==, 2 * SLOT_SIZE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A promotion of 3 chunks of which 2 landed: bytes = 2 × chunk, one
 * failure, and the tier's time. */
static void
test_partial_promotion_bytes (Fixture       *f,
                              gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvJobResult) result = NULL;
  KvKey *landed[2];

  kv_tiering_manager_on_new_request (f->manager, req);
  for (guint i = 0; i < 3; i++)
    {
      put (f->tier1, f, i);
      g_assert_cmpint (lookup (f, i, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
    }
  step (f);
  g_assert_cmpuint (kv_delayed_tier_get_n_pending (f->tier1), ==, 1);
  landed[0] = f->keys[0];
  landed[1] = f->keys[2];
  result = kv_job_result_new (pending_id (f->tier1, 0), FALSE);
  kv_job_result_set_successful_keys (result, landed, 2);
  kv_job_result_set_transfer_time (result, 0.125);
  g_assert_true (kv_delayed_tier_complete_job_with (f->tier1, pending_id (f->tier1, 0), result));
  step (f);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_MISS);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, T1), ==, 2 * SLOT_SIZE);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_TIME, T1), ==, 0.125);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, T1), ==, 1);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* 6-slot primary: a promotion of 2 chunks in flight from tier 1 is 2/6 of
 * write usage; a cascade of 3 chunks to both tiers is 3/6 of read usage on
 * each tier's label (a chunk pinned by two tiers counts twice). */
static void
test_primary_usage_gauges (Fixture       *f,
                           gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) early = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) idle = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 3);
  g_assert_cmpint (ref_count (f, 0), ==, 2);
  put (f->tier1, f, 8);
  put (f->tier1, f, 9);
  g_assert_cmpint (lookup (f, 8, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (lookup (f, 9, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);

  /* promotions are jobs only once submitted at the step end */
  early = get_stats (f);
  g_assert_cmpfloat (test_stats_value (early, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (early, KV_METRIC_PRIMARY_READ_USAGE_PERC, T1), ==, 3.0 / 6);

  step (f);
  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, T1), ==, 2.0 / 6);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, T1), ==, 3.0 / 6);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, T2), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, T2), ==, 3.0 / 6);
  /* the primary tier runs no job and has no usage gauge */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, P), ==, -1);

  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  idle = get_stats (f);
  g_assert_cmpfloat (test_stats_value (idle, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (idle, KV_METRIC_PRIMARY_READ_USAGE_PERC, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (idle, KV_METRIC_PRIMARY_READ_USAGE_PERC, T2), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* Active job gauges follow registration and completion per tier, and are
 * reported on every read, also at zero. */
static void
test_active_job_gauges (Fixture       *f,
                        gconstpointer  data)
{
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) half = NULL;
  g_autoptr(KvStats) idle = NULL;

  kv_tiering_manager_on_new_request (f->manager, a);
  kv_tiering_manager_on_new_request (f->manager, b);
  store_keys (f, a, 0, 1);
  store_keys (f, b, 1, 2);
  put (f->tier1, f, 8);
  put (f->tier1, f, 9);
  g_assert_cmpint (lookup (f, 8, a), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (lookup (f, 9, b), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, T2), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, T2), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, P), ==, -1);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 6);

  /* tier 2's jobs finish */
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  half = get_stats (f);
  g_assert_cmpfloat (test_stats_value (half, KV_METRIC_ACTIVE_PROMOTION_JOBS, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (half, KV_METRIC_ACTIVE_CASCADE_JOBS, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (half, KV_METRIC_ACTIVE_CASCADE_JOBS, T2), ==, 0);

  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  idle = get_stats (f);
  g_assert_cmpfloat (test_stats_value (idle, KV_METRIC_ACTIVE_PROMOTION_JOBS, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (idle, KV_METRIC_ACTIVE_CASCADE_JOBS, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (idle, KV_METRIC_ACTIVE_CASCADE_JOBS, T2), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, a);
  kv_tiering_manager_on_request_finished (f->manager, b);
}

/* A secondary hit that the full (pinned) primary tier cannot take answers
 * MISS and counts one allocation failure, without labels. */
static void
test_promotion_allocation_failures (Fixture       *f,
                                    gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) again = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  /* all 6 slots pinned by cascades in flight */
  store_keys (f, req, 0, 6);
  put (f->tier1, f, 9);
  put (f->tier2, f, 10);
  g_assert_cmpint (lookup (f, 9, req), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 10, req), ==, KV_LOOKUP_RESULT_MISS);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, NULL), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, T1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, T1), ==, 0);
  again = get_stats (f);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, NULL), ==, -1);

  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* ---- item 18: get_stats -------------------------------------------------- */

/* From construction on, get_stats returns every series at zero, so that a
 * Prometheus scrape made before the first request lists them all. */
static void
test_stats_every_series_before_start (Fixture       *f,
                                      gconstpointer  data)
{
  static const char * const every_metric[] = {
    KV_METRIC_LOOKUP_SYNC_DELAY, KV_METRIC_LOOKUP_ASYNC_DELAY, KV_METRIC_READ_BYTES,
    KV_METRIC_READ_TIME, KV_METRIC_WRITE_BYTES, KV_METRIC_WRITE_TIME,
    KV_METRIC_PROMOTION_JOB_FAILURES, KV_METRIC_CASCADE_JOB_FAILURES, KV_METRIC_CHUNK_QUERIES,
    KV_METRIC_CHUNK_HITS, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, KV_METRIC_PRIMARY_READ_USAGE_PERC,
    KV_METRIC_PROMOTION_ALLOCATION_FAILURES, KV_METRIC_ACTIVE_PROMOTION_JOBS,
    KV_METRIC_ACTIVE_CASCADE_JOBS, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA,
    KV_METRIC_BACKPRESSURE_STORES_DROPPED, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED,
  };
  static const char * const *tiers[] = { T1, T2 };
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvMetricRegistry) registry = NULL;
  g_autoptr(KvStats) scrape = kv_stats_new ();
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;

  registry = kv_tiering_manager_create_metric_registry (f->manager, &error);
  g_assert_no_error (error);
  stats = get_stats (f);
  kv_stats_aggregate (scrape, stats);
  text = kv_stats_to_prometheus (scrape, registry);
  for (guint i = 0; i < G_N_ELEMENTS (every_metric); i++)
    {
      /* counters are exposed with a _total suffix */
      g_autofree char *type_line = g_strdup_printf ("# TYPE %s ", every_metric[i]);
      g_autofree char *counter_line = g_strdup_printf ("# TYPE %s_total counter", every_metric[i]);

      if (strstr (text, type_line) == NULL && strstr (text, counter_line) == NULL)
        g_error ("a scrape before the first request lacks %s:\n%s", every_metric[i], text);
    }
  /* each label's series, at zero */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, 0);
  g_assert_nonnull (strstr (text, "vllm:kv_offload_tiering_lookup_sync_delay_seconds_count{tier=\"0:primary\"} 0"));
  g_assert_nonnull (strstr (text, "vllm:kv_offload_tiering_promotion_allocation_failures_total 0"));
  for (guint t = 0; t < G_N_ELEMENTS (tiers); t++)
    {
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, tiers[t]), ==, 0);
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, tiers[t]), ==, 0);
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_TIME, tiers[t]), ==, 0);
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CASCADE_JOB_FAILURES, tiers[t]), ==, 0);
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, tiers[t]), ==, 0);
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, tiers[t]), ==, 0);
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, tiers[t]), ==, 0);
      g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, tiers[t]), ==, 0);
    }
  /* the primary tier runs no job: no job series under its label */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, P), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, P), ==, -1);

  /* the next read is a delta: untouched counters are left out */
  kv_tiering_manager_on_new_request (f->manager, req);
  g_clear_object (&stats);
  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, -1);
  /* per-tier gauges are always sent */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, T2), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A manager that served before its first get_stats (kvtier serve stores
 * its synthetic chunks before the first scrape) still returns every
 * series then: the families of a node do not depend on what it did
 * first. (Before, only a manager that had not started did.) */
static void
test_stats_every_series_after_start (Fixture       *f,
                                     gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_MISS);
  kv_tiering_manager_on_request_finished (f->manager, req);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, P), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, NULL), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_HIT_PENDING_RELEASES, NULL), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, T2), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_SERVED_BYTES, T2), ==, 0);
  g_assert_cmpuint (async_count (stats, T1, NULL), ==, 0);
  g_assert_true (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_ASYNC_DELAY, T2, NULL) == 0);
  /* the tiers' inherited families, under the same label */
  g_assert_cmpfloat (test_stats_value (stats, "kvtier_tier_deadline_failures", T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, "kvtier_tier_breaker_openings", T2), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, "kvtier_tier_breaker_open", T2), ==, 0);
}

/* With metrics off, get_stats still answers (the tiers' own), never NULL. */
static void
test_stats_metrics_off_not_null (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, &error);
  g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (buffer, NULL, FALSE);
  g_autoptr(KvTieringManager) manager = g_object_new (KV_TYPE_TIERING_MANAGER, "primary", primary,
                                                      "enable-metrics", FALSE, NULL);
  g_autoptr(KvStats) stats = kv_tiering_manager_get_stats (manager);

  g_assert_nonnull (stats);
  g_assert_true (kv_stats_is_empty (stats));
}

/* Each tier's own stats are aggregated into the manager's (the same metric
 * from two tiers adds up), asked once per read and consumed once. */
static void
test_tier_stats_aggregated_once (Fixture       *f,
                                 gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) s1 = kv_stats_new ();
  g_autoptr(KvStats) s2 = kv_stats_new ();
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) again = NULL;

  kv_stats_increase_counter (s1, KV_DELAYED_TIER_METRIC_OPERATIONS, 5, NULL);
  kv_stats_set_gauge (s1, "kvtier_test_tier1_gauge", 0.5, T1);
  kv_stats_increase_counter (s2, KV_DELAYED_TIER_METRIC_OPERATIONS, 7, NULL);
  kv_delayed_tier_set_stats (f->tier1, s1);
  kv_delayed_tier_set_stats (f->tier2, s2);

  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_MISS);

  /* the fixture took the first stats (every series at zero) */
  stats = get_stats (f);
  g_assert_cmpuint (kv_delayed_tier_get_n_get_stats (f->tier1), ==, 2);
  g_assert_cmpuint (kv_delayed_tier_get_n_get_stats (f->tier2), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_DELAYED_TIER_METRIC_OPERATIONS, NULL), ==, 12);
  g_assert_cmpfloat (test_stats_value (stats, "kvtier_test_tier1_gauge", T1), ==, 0.5);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, P), ==, 1);
  /* the tiers' objects were aggregated, not modified */
  g_assert_cmpfloat (test_stats_value (s1, KV_DELAYED_TIER_METRIC_OPERATIONS, NULL), ==, 5);

  again = get_stats (f);
  g_assert_cmpuint (kv_delayed_tier_get_n_get_stats (f->tier1), ==, 3);
  g_assert_cmpuint (kv_delayed_tier_get_n_get_stats (f->tier2), ==, 3);
  g_assert_cmpfloat (test_stats_value (again, KV_DELAYED_TIER_METRIC_OPERATIONS, NULL), ==, -1);
  g_assert_cmpfloat (test_stats_value (again, "kvtier_test_tier1_gauge", T1), ==, -1);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_CHUNK_QUERIES, P), ==, -1);
  g_assert_cmpuint (sync_count (again, P), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* The value of the one sample line of @series in an exposition. */
static gdouble
exposed_value (const char *text,
               const char *series)
{
  g_autofree char *needle = g_strdup_printf ("\n%s ", series);
  const char *line = strstr (text, needle);
  const char *number;
  char *end = NULL;
  gdouble value;

  if (line == NULL)
    g_error ("no sample of %s in the exposition", series);
  g_assert_null (strstr (line + 1, needle));
  number = line + strlen (needle);
  value = g_ascii_strtod (number, &end);
  g_assert_true (end != number && *end == '\n');
  return value;
}

/* get_stats rendered with the manager's registry: vLLM's names, `_total`
 * counters, the tier label, the tiers' own metrics and the EMA gauge. */
static void
test_prometheus (Fixture       *f,
                 gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) s1 = kv_stats_new ();
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvMetricRegistry) registry = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;

  kv_stats_increase_counter (s1, KV_DELAYED_TIER_METRIC_OPERATIONS, 5, NULL);
  kv_delayed_tier_set_stats (f->tier1, s1);
  pressurize (f->det1);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 0, req), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 1, req), ==, KV_LOOKUP_RESULT_MISS);
  store_keys (f, req, 2, 2);

  stats = get_stats (f);
  registry = kv_tiering_manager_create_metric_registry (f->manager, &error);
  g_assert_no_error (error);
  g_assert_nonnull (registry);
  text = kv_stats_to_prometheus (stats, registry);
  g_test_message ("%s", text);

  /* as prometheus_client writes counters in format 0.0.4 */
  g_assert_nonnull (strstr (text, "\n# TYPE vllm:kv_offload_tiering_chunk_queries_total counter\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_chunk_queries_total{tier=\"0:primary\"} 2.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_chunk_queries_total{tier=\"1:delayed\"} 2.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_chunk_queries_total{tier=\"2:delayed2\"} 2.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_lookup_sync_delay_seconds_count{tier=\"2:delayed2\"} 2.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_primary_read_usage_perc{tier=\"2:delayed2\"} 0.25\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_active_cascade_jobs{tier=\"1:delayed\"} 0.0\n"));
  g_assert_cmpfloat_with_epsilon (exposed_value (text, "vllm:kv_offload_tiering_backpressure_store_latency_ema{tier=\"1:delayed\"}"),
                                  0.010, 1e-15);
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_backpressure_stores_dropped_total{tier=\"1:delayed\"} 1.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_backpressure_blocks_dropped_total{tier=\"1:delayed\"} 2.0\n"));
  g_assert_nonnull (strstr (text, "\nkvtier_test_delayed_operations_total 5.0\n"));
  /* no detector, no backpressure series */
  g_assert_null (strstr (text, "backpressure_store_latency_ema{tier=\"2:delayed2\"}"));

  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* ---- item 19: backpressure, manager side -------------------------------- */

/* Under pressure a cascade to the tier is skipped: the chunk is a primary
 * hit, the tier never sees submit_store, no job id is consumed (the other
 * tier's job takes the next id) and only the admitted tier pins it. */
static void
test_bp_stores_skipped (Fixture       *f,
                        gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  guint64 first_t2_id;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 1);
  g_assert_cmpuint (pending_id (f->tier1, 0), ==, 0);
  g_assert_cmpuint (pending_id (f->tier2, 0), ==, 1);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  step (f);
  kv_delayed_tier_clear_calls (f->tier1);

  pressurize (f->det1);
  store_keys (f, req, 1, 1);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[1], req), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_get_n_pending (f->tier1), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_get_n_pending (f->tier2), ==, 1);
  first_t2_id = pending_id (f->tier2, 0);
  g_assert_cmpuint (first_t2_id, ==, 2);
  g_assert_cmpint (ref_count (f, 1), ==, 1);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  step (f);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  /* the chunk never reached tier 1 */
  g_assert_null (kv_delayed_tier_get_stored (f->tier1, f->keys[1]));
  g_assert_nonnull (kv_delayed_tier_get_stored (f->tier2, f->keys[1]));
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* Pressure clears by idle decay (8 s = 4 half-lives: 0.010 → 0.000625 <
 * low), and the next store reaches the tier again. */
static void
test_bp_resume_after_clear (Fixture       *f,
                            gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  pressurize (f->det1);
  store_keys (f, req, 0, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);

  kv_clock_advance (f->clock, 8 * G_USEC_PER_SEC);
  store_keys (f, req, 1, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 1);
  g_assert_false (under (f->det1));
  g_assert_cmpfloat_with_epsilon (ema_of (f->det1), 0.010 / 16, 1e-15);
  g_assert_cmpint (ref_count (f, 1), ==, 2);

  /* past the cooldown every store is admitted */
  kv_clock_advance (f->clock, 2 * G_USEC_PER_SEC);
  store_keys (f, req, 2, 1);
  store_keys (f, req, 3, 1);
  store_keys (f, req, 4, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 4);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, T1), ==, 1);
  g_assert_cmpfloat_with_epsilon (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, T1),
                                  0.010 / 16, 1e-15);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* Drop counters accumulate over skipped cascades (a 1-chunk store makes
 * them (1, 1), a 2-chunk one (2, 3)), are reported with the tier's label
 * and popped by the read. */
static void
test_bp_drop_counters (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) again = NULL;
  guint64 stores = 99, chunks = 99;

  kv_tiering_manager_on_new_request (f->manager, req);
  pressurize (f->det1);
  store_keys (f, req, 0, 1);
  store_keys (f, req, 1, 2);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 2);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, T1), ==, 3);
  /* tier 2 has no detector: no backpressure metric at all */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T2), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, T2), ==, -1);
  /* popped from the policy */
  kv_backpressure_policy_pop_stores_dropped (kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (f->det1)),
                                             &stores, &chunks);
  g_assert_cmpuint (stores, ==, 0);
  g_assert_cmpuint (chunks, ==, 0);

  again = get_stats (f);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), <=, 0);
  g_assert_cmpfloat (test_stats_value (again, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, T1), <=, 0);

  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* The EMA gauge is a gauge: reported on every read, not consumed. */
static void
test_bp_ema_gauge_every_read (Fixture       *f,
                              gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) cold = NULL;
  g_autoptr(KvStats) first = NULL;
  g_autoptr(KvStats) second = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  cold = get_stats (f);
  g_assert_cmpfloat (test_stats_value (cold, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, T1), ==, 0);
  pressurize (f->det1);
  first = get_stats (f);
  second = get_stats (f);
  g_assert_cmpfloat_with_epsilon (test_stats_value (first, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, T1), 0.010, 1e-15);
  g_assert_cmpfloat_with_epsilon (test_stats_value (second, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, T1), 0.010, 1e-15);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* Request-level cascades (chunks already in the primary tier, and parked
 * chunks whose write lands later) are gated like any cascade. */
static void
test_bp_request_level_gated (Fixture       *f,
                             gconstpointer  data)
{
  g_autoptr(KvRequest) producer = kv_request_new ("p", NULL);
  g_autoptr(KvRequest) warm = kv_request_new ("w", NULL);
  g_autoptr(KvRequest) writer = kv_request_new ("wr", NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(KvPrepareStoreResult) pending = NULL;
  g_autoptr(KvPrepareStoreResult) parked = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;
  KvKey * const *to_store;
  guint n;

  kv_tiering_manager_on_new_request (f->manager, producer);
  store_keys (f, producer, 0, 3);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, producer);
  step (f);
  step (f);
  kv_delayed_tier_clear_calls (f->tier1);
  kv_delayed_tier_clear_calls (f->tier2);

  kv_delayed_tier_set_offload_policy (f->tier1, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  pressurize (f->det1);

  /* fully warm request: its 3 chunks would go to tier 1, but are dropped */
  g_assert_cmpint (kv_tiering_manager_on_new_request (f->manager, warm), ==, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  prepared = kv_tiering_manager_prepare_store (f->manager, f->keys, 3, warm, &error);
  g_assert_no_error (error);
  kv_prepare_store_result_get_keys_to_store (prepared, &n);
  g_assert_cmpuint (n, ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (ref_count (f, i), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);

  /* a chunk still being written is parked, then dropped when it lands */
  kv_tiering_manager_on_new_request (f->manager, writer);
  pending = kv_tiering_manager_prepare_store (f->manager, &f->keys[5], 1, writer, &error);
  g_assert_no_error (error);
  parked = kv_tiering_manager_prepare_store (f->manager, &f->keys[5], 1, warm, &error);
  g_assert_no_error (error);
  kv_tiering_manager_on_request_finished (f->manager, warm);
  g_assert_true (kv_tiering_manager_has_pending_work (f->manager));
  to_store = kv_prepare_store_result_get_keys_to_store (pending, &n);
  /* the writer's own cascade: dropped for tier 1, admitted for tier 2 */
  kv_tiering_manager_complete_store (f->manager, to_store, n, writer, TRUE);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 1);
  g_assert_cmpint (ref_count (f, 5), ==, 1);
  /* the warm request's parked chunk was handled: it finalizes */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished w"), ==, 1);

  stats = get_stats (f);
  /* warm (3 chunks), writer (1), parked (1) */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), ==, 3);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, T1), ==, 5);

  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, writer);
}

/* Loads (promotions) from a tier under pressure go on, bytes and all; a
 * promotion is never counted as a dropped store. */
static void
test_bp_loads_continue (Fixture       *f,
                        gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  guint32 chunk_id;
  const guint8 *slot;

  put (f->tier1, f, 6);
  pressurize (f->det1);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 6, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_load"), ==, 1);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  g_assert_cmpint (lookup (f, 6, req), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_true (kv_primary_tier_get_chunk_id (f->primary, f->keys[6], &chunk_id));
  slot = kv_host_buffer_peek_slot (f->buffer, chunk_id);
  g_assert_cmpuint (slot[0], ==, 0x46);
  g_assert_cmpuint (slot[SLOT_SIZE - 1], ==, 0x46);
  /* still under pressure; the promotion did not feed the detector */
  g_assert_true (under (f->det1));
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 4);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, T1), ==, SLOT_SIZE);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* The detector learns from successful store completions only, with the
 * job's latency on the shared clock (queueing included) and bytes from the
 * result's transfer bytes, else keys × slot size. */
/* A store that reports 0 bytes moved is measured by its chunks, as the
 * reference's `transfer_bytes or n_keys * block_size` does. */
static void
test_bp_zero_bytes_falls_back (Fixture       *f,
                               gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 1);
  step (f);
  kv_clock_advance (f->clock, 1000);
  complete_pending (f->tier1, 0, TRUE, -1, 0);
  step (f);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 1);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

static void
test_bp_fed_by_successful_stores (Fixture       *f,
                                  gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  gdouble seed, ema;
  KvBackpressureDetector *det = KV_BACKPRESSURE_DETECTOR (f->det1);

  kv_tiering_manager_on_new_request (f->manager, req);

  /* a failed store changes nothing */
  store_keys (f, req, 0, 1);
  step (f);
  kv_clock_advance (f->clock, 1000);
  complete_pending (f->tier1, 0, FALSE, -1, -1);
  step (f);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 0);
  g_assert_cmpint (ref_count (f, 0), ==, 1); /* tier 2 still holds it */

  /* 1 chunk, 1 ms, the tier says it moved 1 MiB: 0.001 s/MiB */
  store_keys (f, req, 1, 1);
  step (f);
  kv_clock_advance (f->clock, 1000);
  complete_pending (f->tier1, 0, TRUE, -1, 1 << 20);
  step (f);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 1);

  /* 1 chunk, 2 ms, no transfer bytes: 1 × 4096 bytes → 0.512 s/MiB */
  store_keys (f, req, 2, 1);
  step (f);
  kv_clock_advance (f->clock, 2000);
  complete_pending (f->tier1, 0, TRUE, -1, -1);
  step (f);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 2);
  g_assert_cmpfloat (ema_of (f->det1), ==, 0.0);  /* still warming up */

  /* 2 chunks, 3 ms, the delayed tier reports 2 × 4096 bytes: 0.384 s/MiB;
   * the warm-up ends on the mean of the three samples */
  store_keys (f, req, 3, 2);
  step (f);
  kv_clock_advance (f->clock, 3000);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  seed = (sample_of (1000, 1 << 20) + sample_of (2000, SLOT_SIZE) + sample_of (3000, 2 * SLOT_SIZE)) / 3;
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 3);
  g_assert_cmpfloat_with_epsilon (ema_of (f->det1), seed, 1e-12);
  g_assert_false (under (f->det1));

  /* two more stores, submitted at the same time */
  store_keys (f, req, 5, 1);
  store_keys (f, req, 6, 1);
  step (f);
  kv_clock_advance (f->clock, 1000);
  /* after the warm-up, a failure still changes nothing */
  complete_pending (f->tier1, 0, FALSE, -1, -1);
  step (f);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 3);
  g_assert_cmpfloat_with_epsilon (ema_of (f->det1), seed, 1e-12);
  /* the other lands 2 ms after submission: α-update, pressure starts */
  kv_clock_advance (f->clock, 1000);
  complete_pending (f->tier1, 0, TRUE, 0.0001, -1);
  step (f);
  ema = 0.3 * sample_of (2000, SLOT_SIZE) + 0.7 * seed;
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 4);
  g_assert_cmpfloat_with_epsilon (ema_of (f->det1), ema, 1e-12);
  g_assert_true (kv_backpressure_detector_is_under_pressure (det));

  /* tier 2 (no detector) and promotions never feed tier 1's detector */
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  put (f->tier1, f, 9);
  g_assert_cmpint (lookup (f, 9, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  kv_clock_advance (f->clock, 1000);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[9]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (f->det1), ==, 4);

  /* the gauge reports the detector's average */
  stats = get_stats (f);
  g_assert_cmpfloat_with_epsilon (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, T1),
                                  ema_of (f->det1), 1e-15);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CASCADE_JOB_FAILURES, T1), ==, 2);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

static void
assert_detector_reset (KvEmaBackpressureDetector *detector)
{
  g_assert_false (under (detector));
  g_assert_cmpfloat (ema_of (detector), ==, 0.0);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (detector), ==, 0);
}

/* reset_cache resets every detector: average, samples, pressure and the
 * drop counters; stores reach the tier again. */
static void
test_bp_reset_cache (Fixture       *f,
                     gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  pressurize (f->det1);
  pressurize (f->det2);
  store_keys (f, req, 0, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 0);

  g_assert_true (kv_tiering_manager_reset_cache (f->manager, &error));
  g_assert_no_error (error);
  assert_detector_reset (f->det1);
  assert_detector_reset (f->det2);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), <=, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T2), <=, 0);

  store_keys (f, req, 1, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 1);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* ---- item 20: admission wiring ------------------------------------------- */

/* Both tiers under pressure: the cascade is rejected everywhere, consumes no
 * job id (the next promotion takes the next id), pins nothing and leaves no
 * work; the request finalizes at once. */
static void
test_admission_rejected_no_job (Fixture       *f,
                                gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 1);
  g_assert_cmpuint (pending_id (f->tier1, 0), ==, 0);
  g_assert_cmpuint (pending_id (f->tier2, 0), ==, 1);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  step (f);

  pressurize (f->det1);
  pressurize (f->det2);
  store_keys (f, req, 1, 2);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store"), ==, 1);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  g_assert_cmpint (ref_count (f, 2), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  g_assert_false (kv_tiering_manager_has_pending_work (f->manager));

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, T2), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, T2), ==, 2);

  /* the next job gets id 2: the rejected cascades consumed none */
  put (f->tier2, f, 9);
  g_assert_cmpint (lookup (f, 9, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_get_n_pending (f->tier2), ==, 1);
  g_assert_cmpuint (pending_id (f->tier2, 0), ==, 2);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);

  kv_tiering_manager_on_request_finished (f->manager, req);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "on_request_finished r1"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "on_request_finished r1"), ==, 1);
}

/* A promotion is admitted however loaded its tier is. */
static void
test_admission_promotion_admitted (Fixture       *f,
                                   gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) after = NULL;

  pressurize (f->det1);
  pressurize (f->det2);
  put (f->tier1, f, 7);
  put (f->tier2, f, 8);
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (lookup (f, 7, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (lookup (f, 8, req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_load 0 r1"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_load 1 r1"), ==, 1);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, T2), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, T2), ==, 1.0 / 8);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T2), ==, 0);

  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  g_assert_cmpint (lookup (f, 7, req), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 8, req), ==, KV_LOOKUP_RESULT_HIT);
  after = get_stats (f);
  g_assert_cmpfloat (test_stats_value (after, KV_METRIC_READ_BYTES, T1), ==, SLOT_SIZE);
  g_assert_cmpfloat (test_stats_value (after, KV_METRIC_READ_BYTES, T2), ==, SLOT_SIZE);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A tier without a detector admits every store, whatever the pressure of
 * another tier. */
static void
test_admission_tier_without_detector (Fixture       *f,
                                      gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(KvStats) stats = NULL;

  g_assert_null (kv_secondary_tier_get_backpressure_detector (KV_SECONDARY_TIER (f->tier2)));
  pressurize (f->det1);
  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f, req, 0, 3);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "submit_store 0 r1"), ==, 1);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (ref_count (f, i), ==, 1);

  stats = get_stats (f);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, T1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, T1), ==, 3);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, T2), ==, 3.0 / 8);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, T2), ==, 1);

  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f);
  step (f);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (ref_count (f, i), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

#define ADD(path, setup, func) \
  g_test_add ("/kvtier/manager-metrics/" path, Fixture, &setup, fixture_setup, func, fixture_teardown)

  /* item 18 */
  ADD ("lookup/sync-delay-per-tier", setup_default, test_sync_delay_per_tier);
  ADD ("lookup/no-async-delay-immediate-or-promotion", setup_default, test_no_async_delay_immediate_or_promotion);
  ADD ("lookup/async-delay-after-retry", setup_default, test_async_delay_after_retry);
  ADD ("lookup/queries-and-hits-per-label", setup_default, test_queries_and_hits_per_label);
  ADD ("lookup/ignored-after-allocation", setup_default, test_ignored_after_allocation);
  ADD ("lookup/restarted-request-counts-again", setup_default, test_restarted_request_counts_again);
  ADD ("jobs/bytes-and-time", setup_default, test_bytes_and_time);
  ADD ("jobs/failure-counters", setup_default, test_failure_counters);
  ADD ("jobs/partial-promotion-bytes", setup_default, test_partial_promotion_bytes);
  ADD ("jobs/primary-usage-gauges", setup_small, test_primary_usage_gauges);
  ADD ("jobs/active-job-gauges", setup_default, test_active_job_gauges);
  ADD ("jobs/promotion-allocation-failures", setup_small, test_promotion_allocation_failures);
  ADD ("lookups/primary-hit-once-per-request", setup_default, test_primary_hit_once_per_request);
  ADD ("lookups/promoted-chunk-counted-once", setup_default, test_promoted_chunk_counted_once);
  ADD ("stats/every-series-before-start", setup_fresh, test_stats_every_series_before_start);
  ADD ("stats/every-series-after-start", setup_fresh, test_stats_every_series_after_start);
  g_test_add_func ("/kvtier/manager-metrics/stats/metrics-off-not-null", test_stats_metrics_off_not_null);
  ADD ("stats/tier-stats-aggregated-once", setup_default, test_tier_stats_aggregated_once);
  ADD ("stats/prometheus", setup_default, test_prometheus);
  /* item 19, manager side */
  ADD ("backpressure/stores-skipped", setup_default, test_bp_stores_skipped);
  ADD ("backpressure/resume-after-clear", setup_default, test_bp_resume_after_clear);
  ADD ("backpressure/drop-counters", setup_default, test_bp_drop_counters);
  ADD ("backpressure/ema-gauge-every-read", setup_default, test_bp_ema_gauge_every_read);
  ADD ("backpressure/request-level-gated", setup_default, test_bp_request_level_gated);
  ADD ("backpressure/loads-continue", setup_default, test_bp_loads_continue);
  ADD ("backpressure/fed-by-successful-stores", setup_default, test_bp_fed_by_successful_stores);
  ADD ("backpressure/zero-bytes-falls-back", setup_default, test_bp_zero_bytes_falls_back);
  ADD ("backpressure/reset-cache", setup_both, test_bp_reset_cache);
  /* item 20 */
  ADD ("admission/rejected-cascade-no-job", setup_both, test_admission_rejected_no_job);
  ADD ("admission/promotion-admitted", setup_both, test_admission_promotion_admitted);
  ADD ("admission/tier-without-detector", setup_default, test_admission_tier_without_detector);

#undef ADD

  return g_test_run ();
}
