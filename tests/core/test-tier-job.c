/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

#include "kv-async-lookup-private.h"

/* KvTierJob: the marks, the one partial-load rule, bytes and time, the
 * stored event, the breaker flag, cancellation and the single report;
 * the manager's check of the rule; and the misses a failed load leaves in
 * every request's cached answers (vLLM's mark_miss). */

#define SLOT_SIZE 4096
#define N_SLOTS   16

/* ------------------------------------------------------------------ */
/* A tier built on KvTierJob                                           */

typedef enum {
  HOLD,        /* keep the tier job for the test to mark */
  RUN,         /* move the bytes in submit, stop a load at a damaged chunk */
  RAW,         /* keep the job for the test to report by hand */
} Mode;

#define TEST_TYPE_JOB_TIER (test_job_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestJobTier, test_job_tier, TEST, JOB_TIER, KvSecondaryTier)

struct _TestJobTier
{
  KvSecondaryTier parent_instance;

  Mode         mode;
  GMutex       lock;
  GHashTable  *stored;    /* KvKey → itself */
  GHashTable  *damaged;   /* KvKey → itself: loads fail their check */
  GPtrArray   *held;      /* KvTierJob, HOLD mode */
  GPtrArray   *raw;       /* KvTransferJob, RAW mode */
  guint        n_lookup_checks;  /* async lookup worker calls */
};

G_DEFINE_FINAL_TYPE (TestJobTier, test_job_tier, KV_TYPE_SECONDARY_TIER)

static gboolean
test_job_tier_holds (TestJobTier *self,
                     KvKey       *key)
{
  gboolean held;

  g_mutex_lock (&self->lock);
  held = g_hash_table_contains (self->stored, key);
  g_mutex_unlock (&self->lock);
  return held;
}

static KvLookupResult
test_job_tier_lookup (KvSecondaryTier *tier,
                      KvKey           *key,
                      KvRequest       *request)
{
  TestJobTier *self = TEST_JOB_TIER (tier);

  if (kv_secondary_tier_get_async_lookup (tier) != NULL)
    return KV_SECONDARY_TIER_CLASS (test_job_tier_parent_class)->lookup (tier, key, request);
  return test_job_tier_holds (self, key) ? KV_LOOKUP_RESULT_HIT : KV_LOOKUP_RESULT_MISS;
}

/* The async lookup's worker. */
static gboolean
check_key (KvKey     *key,
           KvRequest *request,
           gpointer   user_data)
{
  TestJobTier *self = user_data;

  g_atomic_int_inc (&self->n_lookup_checks);
  return test_job_tier_holds (self, key);
}

static void
run (TestJobTier *self,
     KvTierJob   *tier_job)
{
  KvHostBuffer *primary = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));
  KvTransferJob *job = kv_tier_job_get_job (tier_job);

  for (guint i = 0; i < kv_tier_job_get_n_keys (tier_job); i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint32 slot = kv_transfer_job_get_chunk_id (job, i);

      if (!kv_tier_job_is_load (tier_job))
        {
          g_mutex_lock (&self->lock);
          if (g_hash_table_contains (self->stored, key))
            {
              g_mutex_unlock (&self->lock);
              kv_tier_job_mark_skipped (tier_job, i);
              continue;
            }
          g_hash_table_add (self->stored, kv_key_ref (key));
          g_mutex_unlock (&self->lock);
          kv_tier_job_mark_landed (tier_job, i);
          continue;
        }
      if (g_hash_table_contains (self->damaged, key))
        {
          g_autoptr(GError) error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                                 "chunk %u is damaged", i);

          /* as vLLM's batch load: the keys after a damaged one are not read */
          kv_tier_job_mark_failed (tier_job, i, KV_KEY_FAILURE_FLAGS_CHECKSUM, error);
          kv_tier_job_mark_remaining_failed (tier_job, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT, NULL);
          break;
        }
      if (!test_job_tier_holds (self, key))
        {
          kv_tier_job_mark_missing (tier_job, i);
          continue;
        }
      memset (kv_host_buffer_peek_slot (primary, slot), 0x5a, SLOT_SIZE);
      kv_tier_job_mark_landed (tier_job, i);
    }
  kv_tier_job_report (tier_job);
}

static gboolean
test_job_tier_submit (KvSecondaryTier  *tier,
                      KvTransferJob    *job,
                      GError          **error)
{
  TestJobTier *self = TEST_JOB_TIER (tier);
  g_autoptr(KvTierJob) tier_job = NULL;

  if (self->mode == RAW)
    {
      g_ptr_array_add (self->raw, kv_transfer_job_ref (job));
      return TRUE;
    }
  tier_job = kv_tier_job_new (tier, job);
  if (self->mode == HOLD)
    g_ptr_array_add (self->held, g_steal_pointer (&tier_job));
  else
    run (self, tier_job);
  return TRUE;
}

static KvOffloadPolicy
test_job_tier_on_new_request (KvSecondaryTier *tier,
                              KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static void
test_job_tier_finalize (GObject *object)
{
  TestJobTier *self = TEST_JOB_TIER (object);

  g_hash_table_unref (self->stored);
  g_hash_table_unref (self->damaged);
  g_ptr_array_unref (self->held);
  g_ptr_array_unref (self->raw);
  g_mutex_clear (&self->lock);
  G_OBJECT_CLASS (test_job_tier_parent_class)->finalize (object);
}

static void
test_job_tier_class_init (TestJobTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = test_job_tier_finalize;
  tier_class->medium = KV_MEDIUM_STORAGE;
  tier_class->lookup = test_job_tier_lookup;
  tier_class->submit_store = test_job_tier_submit;
  tier_class->submit_load = test_job_tier_submit;
  tier_class->on_new_request = test_job_tier_on_new_request;
  /* the async lookup's flush, cleanup and shutdown: the base class's */
}

static void
test_job_tier_init (TestJobTier *self)
{
  g_mutex_init (&self->lock);
  self->stored = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                        (GDestroyNotify) kv_key_unref, NULL);
  self->damaged = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                         (GDestroyNotify) kv_key_unref, NULL);
  self->held = g_ptr_array_new_with_free_func (g_object_unref);
  self->raw = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_transfer_job_unref);
}

/* ------------------------------------------------------------------ */
/* Fixture: a manager over one such tier                               */

typedef struct
{
  KvHostBuffer     *buffer;
  KvPrimaryTier    *primary;
  KvTieringManager *manager;
  KvClock          *clock;
  TestJobTier      *tier;
  GPtrArray        *finished;    /* KvJobResult, from ::job-finished */
  KvKey            *keys[8];
  KvRequest        *request;
} Fixture;

static KvKey *
make_key (guint i)
{
  guint8 hash[16];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 13 + b + 1);
  return kv_key_new (hash, sizeof hash, 0);
}

static void
on_job_finished (KvSecondaryTier *tier,
                 KvJobResult     *result,
                 gpointer         user_data)
{
  Fixture *f = user_data;

  g_ptr_array_add (f->finished, kv_job_result_ref (result));
}

/* The next fixture's tier refuses cascaded stores (a tier that only
 * fetches). */
static gboolean next_refuses_cascades;

static void
fixture_setup_full (Fixture  *f,
                    Mode      mode,
                    gboolean  events,
                    guint     deadline_ms,
                    guint     breaker_threshold)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (N_SLOTS, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->primary = kv_primary_tier_new (f->buffer, NULL, TRUE);
  f->manager = kv_tiering_manager_new (f->primary);
  f->clock = kv_clock_new_manual (1000000);
  f->tier = g_object_new (TEST_TYPE_JOB_TIER,
                          "primary", f->buffer,
                          "tier-type", "jobs",
                          "locality", KV_LOCALITY_LOCAL,
                          "enable-events", events,
                          "clock", f->clock,
                          "deadline-ms", deadline_ms,
                          "breaker-threshold", breaker_threshold,
                          "accepts-cascaded-stores", !next_refuses_cascades,
                          NULL);
  next_refuses_cascades = FALSE;
  f->tier->mode = mode;
  g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier), &error));
  g_assert_no_error (error);
  f->finished = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  g_signal_connect (f->tier, "job-finished", G_CALLBACK (on_job_finished), f);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = make_key (i);
  f->request = kv_request_new ("a", NULL);
  kv_tiering_manager_on_new_request (f->manager, f->request);
}

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  fixture_setup_full (f, HOLD, TRUE, 0, 0);
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
  g_assert_no_error (error);
  g_clear_object (&f->manager);
  g_clear_object (&f->tier);
  g_clear_object (&f->clock);
  g_clear_object (&f->primary);
  g_clear_object (&f->buffer);
  g_clear_object (&f->request);
  g_ptr_array_unref (f->finished);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
}

static void
step (Fixture *f)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (f->manager, end);
}

/* Ends this step and runs the next, whose first entry point consumes what
 * was reported since this one's (once per step). */
static void
collect (Fixture *f)
{
  step (f);
  step (f);
}

/* Stores keys [first, first + n) in the primary tier and cascades them:
 * one store job to the tier. */
static void
store (Fixture *f,
       guint    first,
       guint    n)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared =
    kv_tiering_manager_prepare_store (f->manager, &f->keys[first], n, f->request, &error);

  g_assert_no_error (error);
  g_assert_nonnull (prepared);
  kv_tiering_manager_complete_store (f->manager, &f->keys[first], n, f->request, TRUE);
}

static void
hold (Fixture *f,
      guint    first,
      guint    n)
{
  for (guint i = first; i < first + n; i++)
    {
      g_mutex_lock (&f->tier->lock);
      g_hash_table_add (f->tier->stored, kv_key_ref (f->keys[i]));
      g_mutex_unlock (&f->tier->lock);
    }
}

static KvTierJob *
held_job (Fixture *f,
          guint    index)
{
  g_assert_cmpuint (f->tier->held->len, >, index);
  return f->tier->held->pdata[index];
}

/* Looks keys [first, first + n) up for the fixture's request (each a
 * promotion from the tier) and ends the step: one load job. */
static void
promote (Fixture *f,
         guint    first,
         guint    n)
{
  for (guint i = first; i < first + n; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[i], f->request), ==,
                     KV_LOOKUP_RESULT_HIT_PENDING);
  step (f);
}

static KvJobResult *
last_finished (Fixture *f)
{
  g_assert_cmpuint (f->finished->len, >, 0);
  return f->finished->pdata[f->finished->len - 1];
}

static void
test_store_success (Fixture       *f,
                    gconstpointer  data)
{
  g_autofree KvEvent **events = NULL;
  KvTierJob *tier_job;
  KvJobResult *result;
  guint n_keys;

  store (f, 0, 3);
  tier_job = held_job (f, 0);
  g_assert_false (kv_tier_job_is_load (tier_job));
  g_assert_cmpuint (kv_tier_job_get_n_keys (tier_job), ==, 3);
  g_assert_true (kv_tier_job_get_tier (tier_job) == KV_SECONDARY_TIER (f->tier));
  kv_tier_job_mark_landed (tier_job, 0);
  kv_tier_job_mark_skipped (tier_job, 1);
  kv_tier_job_mark_landed (tier_job, 2);
  g_assert_false (kv_tier_job_is_reported (tier_job));
  kv_tier_job_report (tier_job);
  g_assert_true (kv_tier_job_is_reported (tier_job));

  collect (f);
  g_assert_cmpuint (f->finished->len, ==, 1);
  result = last_finished (f);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  /* the skipped key moved nothing */
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 2 * SLOT_SIZE);
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), >=, 0.0);
  g_assert_false (kv_job_result_get_checksum_failed (result));

  /* one stored event with every key of the job, the tier's medium and
   * locality */
  events = kv_tiering_manager_take_events (f->manager);
  for (guint i = 0; events[i] != NULL; i++)
    {
      KvKey * const *keys;

      if (kv_event_get_medium (events[i]) != KV_MEDIUM_STORAGE)
        {
          kv_event_unref (events[i]);
          continue;
        }
      keys = kv_event_get_keys (events[i], &n_keys);
      g_assert_cmpuint (n_keys, ==, 3);
      for (guint k = 0; k < 3; k++)
        g_assert_true (kv_key_equal (keys[k], f->keys[k]));
      g_assert_false (kv_event_get_removed (events[i]));
      g_assert_cmpint (kv_event_get_locality (events[i]), ==, KV_LOCALITY_LOCAL);
      kv_event_unref (events[i]);
      n_keys = G_MAXUINT;
    }
  g_assert_cmpuint (n_keys, ==, G_MAXUINT);
}

static void
count_tier_events (Fixture *f,
                   guint   *n_events)
{
  g_autofree KvEvent **events = kv_tiering_manager_take_events (f->manager);

  *n_events = 0;
  for (guint i = 0; events[i] != NULL; i++)
    {
      if (kv_event_get_medium (events[i]) == KV_MEDIUM_STORAGE)
        (*n_events)++;
      kv_event_unref (events[i]);
    }
}

static void
test_store_failure (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(GError) error = g_error_new_literal (G_IO_ERROR, G_IO_ERROR_NO_SPACE, "disk full");
  KvJobResult *result;
  guint n_events;

  store (f, 0, 2);
  kv_tier_job_mark_landed (held_job (f, 0), 0);
  kv_tier_job_mark_failed (held_job (f, 0), 1, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT, error);
  kv_tier_job_report (held_job (f, 0));
  collect (f);

  result = last_finished (f);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, SLOT_SIZE);
  /* no event for a store that did not succeed */
  count_tier_events (f, &n_events);
  g_assert_cmpuint (n_events, ==, 0);
  /* the cascade unpinned its chunks whatever the outcome */
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
}

static void
test_no_events (void)
{
  Fixture f = { 0 };
  guint n_events;

  fixture_setup_full (&f, RUN, FALSE, 0, 0);
  store (&f, 0, 2);
  collect (&f);
  g_assert_cmpuint (f.finished->len, ==, 1);
  g_assert_true (kv_job_result_get_success (last_finished (&f)));
  count_tier_events (&f, &n_events);
  g_assert_cmpuint (n_events, ==, 0);
  fixture_teardown (&f, NULL);
}

/* A tier that does not accept cascaded stores gets no store job: nothing
 * submitted, nothing pinned, nothing reported. */
static void
test_no_cascaded_stores (void)
{
  Fixture f = { 0 };

  next_refuses_cascades = TRUE;
  fixture_setup_full (&f, RUN, TRUE, 0, 0);
  g_assert_false (kv_secondary_tier_get_accepts_cascaded_stores (KV_SECONDARY_TIER (f.tier)));
  store (&f, 0, 2);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f.manager), ==, 0);
  collect (&f);
  g_assert_cmpuint (f.finished->len, ==, 0);
  /* the chunks are the primary tier's alone: both can be evicted */
  g_assert_cmpuint (kv_primary_tier_get_n_evictable (f.primary), ==, 2);
  fixture_teardown (&f, NULL);

  /* and the default, for the same store */
  fixture_setup_full (&f, RUN, TRUE, 0, 0);
  g_assert_true (kv_secondary_tier_get_accepts_cascaded_stores (KV_SECONDARY_TIER (f.tier)));
  store (&f, 0, 2);
  collect (&f);
  g_assert_cmpuint (f.finished->len, ==, 1);
  fixture_teardown (&f, NULL);
}

/* The one rule: every landed key, in the job's order, whatever failed in
 * between. */
static void
test_load_partial (Fixture       *f,
                   gconstpointer  data)
{
  KvTierJob *tier_job;
  KvJobResult *result;
  KvKey * const *ok;
  guint n_ok;

  hold (f, 0, 4);
  promote (f, 0, 4);
  tier_job = held_job (f, 0);
  g_assert_true (kv_tier_job_is_load (tier_job));
  /* marked out of order, from the end */
  kv_tier_job_mark_failed (tier_job, 3, KV_KEY_FAILURE_FLAGS_NONE, NULL);
  kv_tier_job_mark_landed (tier_job, 2);
  kv_tier_job_mark_missing (tier_job, 1);
  kv_tier_job_mark_landed (tier_job, 0);
  kv_tier_job_report (tier_job);
  collect (f);

  result = last_finished (f);
  g_assert_false (kv_job_result_get_success (result));
  ok = kv_job_result_get_successful_keys (result, &n_ok);
  g_assert_cmpuint (n_ok, ==, 2);
  g_assert_true (kv_key_equal (ok[0], f->keys[0]));
  g_assert_true (kv_key_equal (ok[1], f->keys[2]));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 2 * SLOT_SIZE);

  /* the landed keys are readable, the others are gone from the primary */
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[1]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[2]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[3]), ==, KV_LOOKUP_RESULT_MISS);
}

static void
test_load_none_landed (Fixture       *f,
                       gconstpointer  data)
{
  KvJobResult *result;

  hold (f, 0, 2);
  promote (f, 0, 2);
  kv_tier_job_mark_missing (held_job (f, 0), 0);
  kv_tier_job_mark_missing (held_job (f, 0), 1);
  kv_tier_job_report (held_job (f, 0));
  collect (f);

  result = last_finished (f);
  g_assert_false (kv_job_result_get_success (result));
  /* vLLM's `tuple(successful) or None` */
  g_assert_false (kv_job_result_has_successful_keys (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 0);
}

static void
test_load_all_landed (Fixture       *f,
                      gconstpointer  data)
{
  KvJobResult *result;

  hold (f, 0, 3);
  promote (f, 0, 3);
  for (guint i = 0; i < 3; i++)
    kv_tier_job_mark_landed (held_job (f, 0), i);
  kv_tier_job_record_io (held_job (f, 0), 1000000, 1250000);
  kv_tier_job_record_io (held_job (f, 0), 1100000, 1500000);
  kv_tier_job_report (held_job (f, 0));
  collect (f);

  result = last_finished (f);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 3 * SLOT_SIZE);
  /* the span of the recorded I/O: 1.0 s to 1.5 s */
  g_assert_cmpfloat_with_epsilon (kv_job_result_get_transfer_time (result), 0.5, 1e-9);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), ==, KV_LOOKUP_RESULT_HIT);
}

static void
test_unmarked_keys_fail (Fixture       *f,
                         gconstpointer  data)
{
  KvJobResult *result;
  KvKey * const *ok;
  guint n_ok;

  hold (f, 0, 3);
  promote (f, 0, 3);
  kv_tier_job_mark_landed (held_job (f, 0), 1);
  kv_tier_job_report (held_job (f, 0));
  collect (f);

  result = last_finished (f);
  g_assert_false (kv_job_result_get_success (result));
  ok = kv_job_result_get_successful_keys (result, &n_ok);
  g_assert_cmpuint (n_ok, ==, 1);
  g_assert_true (kv_key_equal (ok[0], f->keys[1]));
}

static void
test_checksum (Fixture       *f,
               gconstpointer  data)
{
  KvJobResult *result;

  hold (f, 0, 2);
  promote (f, 0, 2);
  kv_tier_job_mark_landed (held_job (f, 0), 0);
  kv_tier_job_mark_failed (held_job (f, 0), 1, KV_KEY_FAILURE_FLAGS_CHECKSUM, NULL);
  kv_tier_job_report (held_job (f, 0));
  collect (f);

  result = last_finished (f);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_true (kv_job_result_get_checksum_failed (result));
}

/* A data failure leaves the breaker closed; a failure of the tier opens
 * it (threshold 1). */
static void
test_breaker_flags (void)
{
  for (guint c = 0; c < 4; c++)
    {
      Fixture f = { 0 };
      KvCircuitBreaker *breaker;
      KvTierJob *tier_job;
      gboolean opens = FALSE;

      fixture_setup_full (&f, HOLD, FALSE, 0, 1);
      hold (&f, 0, 1);
      promote (&f, 0, 1);
      tier_job = held_job (&f, 0);
      switch (c)
        {
        case 0:
          kv_tier_job_mark_missing (tier_job, 0);
          break;
        case 1:
          kv_tier_job_mark_failed (tier_job, 0, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT, NULL);
          break;
        case 2:
          kv_tier_job_mark_failed (tier_job, 0, KV_KEY_FAILURE_FLAGS_NONE, NULL);
          opens = TRUE;
          break;
        case 3:
          /* left unmarked: the tier gave up on it */
          opens = TRUE;
          break;
        }
      kv_tier_job_report (tier_job);
      collect (&f);
      g_assert_cmpuint (f.finished->len, ==, 1);
      breaker = kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (f.tier));
      g_assert_cmpint (kv_circuit_breaker_allows_requests (breaker), ==, !opens);
      fixture_teardown (&f, NULL);
    }
}

static void
test_report_twice (Fixture       *f,
                   gconstpointer  data)
{
  KvTierJob *tier_job;

  store (f, 0, 1);
  tier_job = held_job (f, 0);
  kv_tier_job_mark_landed (tier_job, 0);
  kv_tier_job_report (tier_job);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*was reported already*");
  kv_tier_job_report (tier_job);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*was reported already*");
  kv_tier_job_mark_landed (tier_job, 0);
  g_test_assert_expected_messages ();

  step (f);
  step (f);
  /* reported once */
  g_assert_cmpuint (f->finished->len, ==, 1);
  g_assert_true (kv_job_result_get_success (last_finished (f)));
}

static void
test_bad_marks (Fixture       *f,
                gconstpointer  data)
{
  KvTierJob *tier_job;
  KvJobResult *result;

  hold (f, 0, 2);
  promote (f, 0, 2);
  tier_job = held_job (f, 0);
  kv_tier_job_mark_landed (tier_job, 0);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*is marked landed already*");
  kv_tier_job_mark_missing (tier_job, 0);
  g_test_assert_expected_messages ();
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*is a load*");
  kv_tier_job_mark_skipped (tier_job, 1);
  g_test_assert_expected_messages ();
  kv_tier_job_mark_landed (tier_job, 1);
  kv_tier_job_report (tier_job);
  collect (f);

  result = last_finished (f);
  g_assert_true (kv_job_result_get_success (result));
}

/* ---- cancellation --------------------------------------------------- */

static void
count_cancel (KvTierJob *tier_job,
              gpointer   user_data)
{
  guint *n = user_data;

  (*n)++;
  g_assert_true (g_cancellable_is_cancelled (kv_tier_job_get_cancellable (tier_job)));
}

/* A deadline (manual clock) cancels the job once; the tier's report after
 * it is late and dropped. */
static void
test_cancel_at_deadline (void)
{
  Fixture f = { 0 };
  KvTierJob *tier_job;
  guint n_cancelled = 0;
  guint n_late_cancelled = 0;
  KvTierJob *late_job;

  fixture_setup_full (&f, HOLD, FALSE, 100, 0);
  store (&f, 0, 1);
  store (&f, 1, 1);
  tier_job = held_job (&f, 0);
  late_job = held_job (&f, 1);
  kv_tier_job_set_cancel_func (tier_job, count_cancel, &n_cancelled, NULL);
  g_assert_false (g_cancellable_is_cancelled (kv_tier_job_get_cancellable (tier_job)));

  kv_clock_advance (f.clock, 200 * 1000);
  step (&f);
  step (&f);
  g_assert_cmpuint (n_cancelled, ==, 1);
  g_assert_cmpuint (f.finished->len, ==, 2);
  g_assert_false (kv_job_result_get_success (f.finished->pdata[0]));

  /* set after the cancellation: runs at once, once */
  kv_tier_job_set_cancel_func (late_job, count_cancel, &n_late_cancelled, NULL);
  g_assert_cmpuint (n_late_cancelled, ==, 1);

  kv_tier_job_mark_landed (tier_job, 0);
  kv_tier_job_report (tier_job);
  kv_tier_job_report (late_job);
  collect (&f);
  g_assert_cmpuint (f.finished->len, ==, 2);
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (KV_SECONDARY_TIER (f.tier)), ==, 2);
  g_assert_cmpuint (n_cancelled, ==, 1);
  fixture_teardown (&f, NULL);
}

typedef struct
{
  GMutex   lock;
  GCond    cond;
  gboolean entered;
  gboolean release;
  gboolean reported;
} Gate;

static void
blocking_cancel (KvTierJob *tier_job,
                 gpointer   user_data)
{
  Gate *gate = user_data;

  g_mutex_lock (&gate->lock);
  gate->entered = TRUE;
  g_cond_broadcast (&gate->cond);
  while (!gate->release)
    g_cond_wait (&gate->cond, &gate->lock);
  g_mutex_unlock (&gate->lock);
}

static gpointer
cancel_thread (gpointer data)
{
  g_cancellable_cancel (data);
  return NULL;
}

static gpointer
report_thread (gpointer data)
{
  KvTierJob *tier_job = data;
  Gate *gate = g_object_get_data (G_OBJECT (tier_job), "gate");

  kv_tier_job_report (tier_job);
  g_mutex_lock (&gate->lock);
  gate->reported = TRUE;
  g_cond_broadcast (&gate->cond);
  g_mutex_unlock (&gate->lock);
  return NULL;
}

/* A report waits for a cancel func running on another thread, so that
 * the tier may free what the func uses once the report returned. */
static void
test_report_waits_for_cancel (Fixture       *f,
                              gconstpointer  data)
{
  Gate gate = { 0 };
  g_autoptr(GCancellable) mine = g_cancellable_new ();
  g_autoptr(KvTransferJob) job = NULL;
  g_autoptr(KvTierJob) tier_job = NULL;
  GThread *canceller, *reporter;

  /* a job the base class does not track: its cancellable is the tier
   * job's own, cancelled here by hand */
  job = kv_transfer_job_new (4242, &f->keys[0], (guint32[]) { 0 }, 1, FALSE, f->request);
  tier_job = kv_tier_job_new (KV_SECONDARY_TIER (f->tier), job);
  g_mutex_init (&gate.lock);
  g_cond_init (&gate.cond);
  g_object_set_data (G_OBJECT (tier_job), "gate", &gate);
  kv_tier_job_set_cancel_func (tier_job, blocking_cancel, &gate, NULL);

  canceller = g_thread_new ("canceller", cancel_thread, kv_tier_job_get_cancellable (tier_job));
  g_mutex_lock (&gate.lock);
  while (!gate.entered)
    g_cond_wait (&gate.cond, &gate.lock);
  g_mutex_unlock (&gate.lock);

  reporter = g_thread_new ("reporter", report_thread, tier_job);
  g_usleep (50 * 1000);
  g_mutex_lock (&gate.lock);
  g_assert_false (gate.reported);
  gate.release = TRUE;
  g_cond_broadcast (&gate.cond);
  while (!gate.reported)
    g_cond_wait (&gate.cond, &gate.lock);
  g_mutex_unlock (&gate.lock);
  g_thread_join (canceller);
  g_thread_join (reporter);

  /* the job was not the manager's: it warns and ignores the report */
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*job 4242*not in flight*");
  step (f);
  g_test_assert_expected_messages ();
  g_mutex_clear (&gate.lock);
  g_cond_clear (&gate.cond);
}

/* A cancel func never runs after the report. */
static void
test_no_cancel_after_report (Fixture       *f,
                             gconstpointer  data)
{
  g_autoptr(KvTransferJob) job = NULL;
  g_autoptr(KvTierJob) tier_job = NULL;
  guint n_cancelled = 0;

  job = kv_transfer_job_new (4343, &f->keys[0], (guint32[]) { 0 }, 1, FALSE, f->request);
  tier_job = kv_tier_job_new (KV_SECONDARY_TIER (f->tier), job);
  kv_tier_job_set_cancel_func (tier_job, count_cancel, &n_cancelled, NULL);
  kv_tier_job_mark_landed (tier_job, 0);
  kv_tier_job_report (tier_job);
  g_cancellable_cancel (kv_tier_job_get_cancellable (tier_job));
  g_assert_cmpuint (n_cancelled, ==, 0);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*job 4343*not in flight*");
  step (f);
  g_test_assert_expected_messages ();
}

/* ---- the manager checks the rule ------------------------------------ */

typedef struct
{
  const char *name;
  guint       ok[4];       /* indices into the job's keys, G_MAXUINT ends */
  gboolean    success;
  const char *why;         /* NULL: follows the rule */
} RuleCase;

static const RuleCase rule_cases[] = {
  { "in-order", { 0, 2, G_MAXUINT }, FALSE, NULL },
  { "out-of-order", { 2, 0, G_MAXUINT }, FALSE, "*out of the job's order*" },
  { "twice", { 1, 1, G_MAXUINT }, FALSE, "*listed twice*" },
  { "foreign", { 0, 7, G_MAXUINT }, FALSE, "*not a key of the job*" },
  { "success-partial", { 0, G_MAXUINT }, TRUE, "*success with only some keys*" },
  { "all-not-success", { 0, 1, 2, G_MAXUINT }, FALSE, "*every key listed*" },
};

static void
test_rule_check (gconstpointer data)
{
  const RuleCase *c = data;
  Fixture f = { 0 };
  g_autoptr(KvJobResult) result = NULL;
  KvTransferJob *job;
  KvKey *ok[4];
  guint n_ok = 0;

  fixture_setup_full (&f, RAW, FALSE, 0, 0);
  hold (&f, 0, 3);
  promote (&f, 0, 3);
  g_assert_cmpuint (f.tier->raw->len, ==, 1);
  job = f.tier->raw->pdata[0];

  /* reported by hand, as a tier without KvTierJob would */
  for (; c->ok[n_ok] != G_MAXUINT; n_ok++)
    ok[n_ok] = f.keys[c->ok[n_ok]];
  result = kv_job_result_new (kv_transfer_job_get_id (job), c->success);
  kv_job_result_set_successful_keys (result, ok, n_ok);
  for (guint i = 0; i < n_ok; i++)
    if (c->ok[i] < 3)
      memset (kv_host_buffer_peek_slot (f.buffer, kv_transfer_job_get_chunk_id (job, c->ok[i])),
              0x11, SLOT_SIZE);
  kv_secondary_tier_complete_job (KV_SECONDARY_TIER (f.tier), result);
  if (c->why != NULL)
    g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, c->why);
  collect (&f);
  g_test_assert_expected_messages ();

  g_assert_cmpuint (f.finished->len, ==, 1);
  for (guint k = 0; k < 3; k++)
    {
      gboolean landed = FALSE;

      for (guint i = 0; c->why == NULL && i < n_ok; i++)
        landed |= c->ok[i] == k;
      g_assert_cmpint (kv_primary_tier_lookup (f.primary, f.keys[k]), ==,
                       landed ? KV_LOOKUP_RESULT_HIT : KV_LOOKUP_RESULT_MISS);
    }
  fixture_teardown (&f, NULL);
}

/* ---- a failed load and every request's cached answers ---------------- */

/* Request B looked keys 1 and 2 up (cached hits in the tier's async
 * lookup); request A loads keys 0..2 and the first chunk is damaged, so
 * the tier stops there: no key lands. Afterwards B gets MISS for keys 1
 * and 2 without the tier being asked again, and A keeps its own MISS for
 * all three. */
static void
test_failed_load_marks_miss (void)
{
  Fixture f = { 0 };
  g_autoptr(KvAsyncLookup) async = NULL;
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  guint n_checks;

  fixture_setup_full (&f, RUN, FALSE, 0, 0);
  async = kv_async_lookup_new_for_keys ("jobs", check_key, f.tier, NULL, 1, 8, 1024);
  kv_secondary_tier_set_async_lookup (KV_SECONDARY_TIER (f.tier), async);
  kv_tiering_manager_on_new_request (f.manager, b);
  hold (&f, 0, 3);
  g_hash_table_add (f.tier->damaged, kv_key_ref (f.keys[0]));

  /* first lookups: the tier does not know yet */
  g_assert_cmpint (kv_tiering_manager_lookup (f.manager, f.keys[0], f.request), ==,
                   KV_LOOKUP_RESULT_RETRY);
  for (guint i = 1; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f.manager, f.keys[i], b), ==,
                     KV_LOOKUP_RESULT_RETRY);
  step (&f);
  kv_async_lookup_wait_idle (async);

  /* A finds all three (cached hits) and promotes them in one job */
  promote (&f, 0, 3);
  step (&f);
  g_assert_cmpuint (f.finished->len, ==, 1);
  g_assert_false (kv_job_result_get_success (last_finished (&f)));
  g_assert_false (kv_job_result_has_successful_keys (last_finished (&f)));
  g_assert_true (kv_job_result_get_checksum_failed (last_finished (&f)));

  n_checks = g_atomic_int_get (&f.tier->n_lookup_checks);
  for (guint i = 1; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f.manager, f.keys[i], b), ==,
                     KV_LOOKUP_RESULT_MISS);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (kv_tiering_manager_lookup (f.manager, f.keys[i], f.request), ==,
                     KV_LOOKUP_RESULT_MISS);
  step (&f);
  kv_async_lookup_wait_idle (async);
  /* answered from the caches, not by asking the tier again */
  g_assert_cmpuint (g_atomic_int_get (&f.tier->n_lookup_checks), ==, n_checks);

  kv_tiering_manager_on_request_finished (f.manager, b);
  fixture_teardown (&f, NULL);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

#define ADD(path, func) \
  g_test_add ("/tier-job/" path, Fixture, NULL, fixture_setup, func, fixture_teardown)
  ADD ("store/success", test_store_success);
  ADD ("store/failure", test_store_failure);
  g_test_add_func ("/tier-job/store/no-events", test_no_events);
  g_test_add_func ("/tier-job/store/no-cascaded-stores", test_no_cascaded_stores);
  ADD ("load/partial", test_load_partial);
  ADD ("load/none-landed", test_load_none_landed);
  ADD ("load/all-landed", test_load_all_landed);
  ADD ("load/unmarked-keys-fail", test_unmarked_keys_fail);
  ADD ("load/checksum", test_checksum);
  g_test_add_func ("/tier-job/breaker-flags", test_breaker_flags);
  ADD ("report-twice", test_report_twice);
  ADD ("bad-marks", test_bad_marks);
  g_test_add_func ("/tier-job/cancel/deadline", test_cancel_at_deadline);
  ADD ("cancel/report-waits", test_report_waits_for_cancel);
  ADD ("cancel/not-after-report", test_no_cancel_after_report);
#undef ADD
  for (guint i = 0; i < G_N_ELEMENTS (rule_cases); i++)
    {
      g_autofree char *path = g_strdup_printf ("/tier-job/rule/%s", rule_cases[i].name);

      g_test_add_data_func (path, &rule_cases[i], test_rule_check);
    }
  g_test_add_func ("/tier-job/failed-load-marks-miss", test_failed_load_marks_miss);

  return g_test_run ();
}
