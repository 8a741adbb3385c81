/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>
#include <string.h>

#include "kv-primary-tier-private.h"
#include "kv-secondary-tier-private.h"

/* The liveness every tier inherits from KvSecondaryTier: deadlines (one
 * watchdog for the library), exactly-once reporting with late answers
 * dropped, the primary slots of a load that may still be written kept out
 * of use, the circuit breaker with and without a probe, and the
 * per-request negative cache. The tier here never completes a job unless
 * the test says so. */

#define SLOT 4096
#define N_SLOTS 8

/* ---- a tier that never answers --------------------------------------- */

#define TEST_TYPE_HUNG_TIER (test_hung_tier_get_type ())
G_DECLARE_DERIVABLE_TYPE (TestHungTier, test_hung_tier, TEST, HUNG_TIER, KvSecondaryTier)

struct _TestHungTierClass
{
  KvSecondaryTierClass parent_class;
};

typedef struct
{
  GMutex      lock;
  GCond       cond;
  GPtrArray  *pending;      /* KvTransferJob accepted, never reported */
  GHashTable *present;      /* KvKey: answered HIT */
  gboolean    naive_drain;  /* drain_jobs waits for its own jobs, forever */
  gboolean    fail_jobs;    /* report every job failed at submit */
  guint       n_lookups;
  guint       n_submits;
  guint       n_drains;
  guint       n_shutdowns;
} TestHungTierPrivate;

G_DEFINE_TYPE_WITH_PRIVATE (TestHungTier, test_hung_tier, KV_TYPE_SECONDARY_TIER)

static TestHungTierPrivate *
hung (gpointer tier)
{
  return test_hung_tier_get_instance_private (TEST_HUNG_TIER (tier));
}

static KvLookupResult
test_hung_tier_lookup (KvSecondaryTier *tier,
                       KvKey           *key,
                       KvRequest       *request)
{
  TestHungTierPrivate *priv = hung (tier);

  priv->n_lookups++;
  return g_hash_table_contains (priv->present, key) ? KV_LOOKUP_RESULT_HIT : KV_LOOKUP_RESULT_MISS;
}

static gboolean
test_hung_tier_submit (KvSecondaryTier  *tier,
                       KvTransferJob    *job,
                       GError          **error)
{
  TestHungTierPrivate *priv = hung (tier);

  priv->n_submits++;
  if (priv->fail_jobs)
    {
      g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job), FALSE);

      kv_secondary_tier_complete_job (tier, result);
      return TRUE;
    }
  g_mutex_lock (&priv->lock);
  g_ptr_array_add (priv->pending, kv_transfer_job_ref (job));
  g_mutex_unlock (&priv->lock);
  return TRUE;
}

/* A drain written the naive way: it waits for the tier's own jobs, which
 * never end. The base class must not call it once it knows the tier does
 * not answer. */
static gboolean
test_hung_tier_drain_jobs (KvSecondaryTier  *tier,
                           GError          **error)
{
  TestHungTierPrivate *priv = hung (tier);

  priv->n_drains++;
  if (priv->naive_drain)
    {
      g_mutex_lock (&priv->lock);
      while (priv->pending->len > 0)
        g_cond_wait (&priv->cond, &priv->lock);
      g_mutex_unlock (&priv->lock);
    }
  kv_secondary_tier_wait_jobs (tier);
  return TRUE;
}

static gboolean
test_hung_tier_shutdown (KvSecondaryTier  *tier,
                         GError          **error)
{
  hung (tier)->n_shutdowns++;
  return TRUE;
}

static KvOffloadPolicy
test_hung_tier_on_new_request (KvSecondaryTier *tier,
                               KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static void
test_hung_tier_finalize (GObject *object)
{
  TestHungTierPrivate *priv = hung (object);

  g_ptr_array_unref (priv->pending);
  g_hash_table_unref (priv->present);
  g_mutex_clear (&priv->lock);
  g_cond_clear (&priv->cond);

  G_OBJECT_CLASS (test_hung_tier_parent_class)->finalize (object);
}

static void
test_hung_tier_class_init (TestHungTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = test_hung_tier_finalize;
  tier_class->medium = KV_MEDIUM_CPU;
  tier_class->lookup = test_hung_tier_lookup;
  tier_class->submit_store = test_hung_tier_submit;
  tier_class->submit_load = test_hung_tier_submit;
  tier_class->drain_jobs = test_hung_tier_drain_jobs;
  tier_class->shutdown = test_hung_tier_shutdown;
  tier_class->on_new_request = test_hung_tier_on_new_request;
}

static void
test_hung_tier_init (TestHungTier *self)
{
  TestHungTierPrivate *priv = hung (self);

  g_mutex_init (&priv->lock);
  g_cond_init (&priv->cond);
  priv->pending = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_transfer_job_unref);
  priv->present = g_hash_table_new_full (kv_key_hash, kv_key_equal, (GDestroyNotify) kv_key_unref, NULL);
}

/* The tier answers a job it held: @success, late or not. */
static void
hung_answer (gpointer  tier,
             guint64   job_id,
             gboolean  success)
{
  TestHungTierPrivate *priv = hung (tier);
  g_autoptr(KvJobResult) result = kv_job_result_new (job_id, success);
  gboolean found = FALSE;

  g_mutex_lock (&priv->lock);
  for (guint i = 0; i < priv->pending->len; i++)
    if (kv_transfer_job_get_id (priv->pending->pdata[i]) == job_id)
      {
        g_ptr_array_remove_index (priv->pending, i);
        found = TRUE;
        break;
      }
  g_cond_broadcast (&priv->cond);
  g_mutex_unlock (&priv->lock);
  g_assert_true (found);
  kv_secondary_tier_complete_job (KV_SECONDARY_TIER (tier), result);
}

/* ---- the same, unable to call a store back --------------------------- */

#define TEST_TYPE_NO_CANCEL_TIER (test_no_cancel_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestNoCancelTier, test_no_cancel_tier, TEST, NO_CANCEL_TIER, TestHungTier)

struct _TestNoCancelTier
{
  TestHungTier parent_instance;
};

G_DEFINE_FINAL_TYPE (TestNoCancelTier, test_no_cancel_tier, TEST_TYPE_HUNG_TIER)

static void
test_no_cancel_tier_class_init (TestNoCancelTierClass *klass)
{
  KV_SECONDARY_TIER_CLASS (klass)->can_cancel_stores = FALSE;
}

static void
test_no_cancel_tier_init (TestNoCancelTier *self)
{
}

/* ---- the same with a probe -------------------------------------------- */

#define TEST_TYPE_PROBE_TIER (test_probe_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestProbeTier, test_probe_tier, TEST, PROBE_TIER, TestHungTier)

struct _TestProbeTier
{
  TestHungTier parent_instance;
  gboolean     healthy;       /* what the next probe reports */
  gboolean     answer_probes; /* report probes at once (else never) */
  guint        n_probes;
};

G_DEFINE_FINAL_TYPE (TestProbeTier, test_probe_tier, TEST_TYPE_HUNG_TIER)

static gboolean
test_probe_tier_probe (KvSecondaryTier  *tier,
                       guint64           probe_id,
                       GCancellable     *cancellable,
                       GError          **error)
{
  TestProbeTier *self = TEST_PROBE_TIER (tier);

  self->n_probes++;
  if (self->answer_probes)
    kv_secondary_tier_complete_probe (tier, probe_id, self->healthy);
  return TRUE;
}

static void
test_probe_tier_class_init (TestProbeTierClass *klass)
{
  KV_SECONDARY_TIER_CLASS (klass)->probe = test_probe_tier_probe;
}

static void
test_probe_tier_init (TestProbeTier *self)
{
  self->answer_probes = TRUE;
}

/* ---- helpers ------------------------------------------------------------ */

static KvKey *
make_key (guint n)
{
  guint8 hash[16] = { 0 };

  hash[0] = 0xc0;
  hash[1] = n;
  return kv_key_new (hash, sizeof hash, 0);
}

typedef struct
{
  KvHostBuffer     *buffer;
  KvPrimaryTier    *primary;
  KvTieringManager *manager;
  KvSecondaryTier  *tier;
} Stack;

static KvHostBuffer *
shared_buffer (void)
{
  static KvHostBuffer *buffer;

  /* the stack's buffer must exist before its tier: made here, once */
  if (buffer == NULL)
    buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  return buffer;
}

/* A manager over an 8-slot primary and one tier of @tier_type, made with
 * @first_property... (its primary is the primary tier's buffer). */
static void
stack_init (Stack      *s,
            GType       tier_type,
            const char *first_property,
            ...)
{
  g_autoptr(GError) error = NULL;
  va_list args;

  s->buffer = g_object_ref (shared_buffer ());
  s->primary = kv_primary_tier_new (s->buffer, NULL, FALSE);
  s->manager = kv_tiering_manager_new (s->primary);
  va_start (args, first_property);
  s->tier = KV_SECONDARY_TIER (g_object_new_valist (tier_type, first_property, args));
  va_end (args);
  g_assert_true (kv_tiering_manager_add_tier (s->manager, s->tier, &error));
  g_assert_no_error (error);
}

static void
stack_clear (Stack *s)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (s->manager, &error));
  g_assert_no_error (error);
  g_clear_object (&s->manager);
  g_object_add_weak_pointer (G_OBJECT (s->tier), (gpointer *) &s->tier);
  g_object_unref (s->tier);
  g_assert_null (s->tier);
  g_clear_object (&s->primary);
  g_clear_object (&s->buffer);
}

static void
count_signal (gpointer tier,
              gpointer result,
              gpointer user_data)
{
  (*(guint *) user_data)++;
}

static void
stack_step (Stack *s)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (s->manager, end);
}

/* GPU → primary store of @key; the manager cascades it to the tier at
 * once (one job). */
static void
stack_store (Stack     *s,
             KvKey     *key,
             KvRequest *request)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  guint n = 0;

  prepared = kv_tiering_manager_prepare_store (s->manager, &key, 1, request, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
  g_assert_cmpuint (n, ==, 1);
  kv_tiering_manager_complete_store (s->manager, to_store, n, request, TRUE);
}

static gint
ref_count (Stack *s,
           KvKey *key)
{
  gint ref = -100;

  if (!kv_primary_tier_get_ref_count (s->primary, key, &ref))
    return -100;
  return ref;
}

static gdouble
tier_counter (KvSecondaryTier *tier,
              const char      *name)
{
  g_autoptr(KvStats) stats = kv_secondary_tier_get_stats (tier);
  g_autofree char *label = kv_secondary_tier_dup_metric_label (tier);
  const char *labels[] = { label, NULL };
  gdouble value = 0;

  if (stats != NULL)
    kv_stats_lookup (stats, name, labels, &value);
  return value;
}

/* ---- deadlines ------------------------------------------------------------ */

/* A cascade the tier never reports: drain_jobs returns at the deadline,
 * the job is reported failed once, the read pin goes, the tier's later
 * answer is dropped and counted, and the next lookup still reaches the
 * tier. Real clock: the library's watchdog does it. */
static void
test_deadline_store (void)
{
  Stack s = { 0 };
  g_autoptr(KvRequest) request = kv_request_new ("store", NULL);
  g_autoptr(KvKey) key = make_key (1);
  g_autoptr(KvKey) other = make_key (2);
  guint n_finished = 0;
  guint64 job_id;
  gint64 start;

  stack_init (&s, TEST_TYPE_HUNG_TIER, "primary", shared_buffer (), "deadline-ms", 60, NULL);
  g_signal_connect (s.tier, "job-finished", G_CALLBACK (count_signal), &n_finished);
  kv_tiering_manager_on_new_request (s.manager, request);
  /* before the submit: the deadline runs from there */
  start = g_get_monotonic_time ();
  stack_store (&s, key, request);
  stack_step (&s);
  g_assert_cmpuint (hung (s.tier)->n_submits, ==, 1);
  job_id = kv_transfer_job_get_id (hung (s.tier)->pending->pdata[0]);
  g_assert_cmpint (ref_count (&s, key), ==, 1);                 /* pinned by the cascade */
  g_assert_cmpuint (kv_secondary_tier_get_n_jobs_in_flight (s.tier), ==, 1);

  g_assert_true (kv_secondary_tier_drain_jobs (s.tier, NULL));
  g_assert_cmpint (g_get_monotonic_time () - start, >=, 60 * 1000);
  g_test_message ("drain of a tier that never answers returned after %.1f ms (deadline 60 ms)",
                  (g_get_monotonic_time () - start) / 1000.0);
  g_assert_cmpuint (kv_secondary_tier_get_n_jobs_in_flight (s.tier), ==, 0);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (s.tier), ==, 1);

  stack_step (&s);
  stack_step (&s);
  g_assert_cmpint (ref_count (&s, key), ==, 0);                 /* unpinned */
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (s.manager), ==, 0);
  g_assert_cmpuint (n_finished, ==, 1);

  /* the late answer: dropped (the manager would warn about an unknown
   * job, which is fatal here), counted */
  hung_answer (s.tier, job_id, TRUE);
  stack_step (&s);
  stack_step (&s);
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (s.tier), ==, 1);
  g_assert_cmpuint (n_finished, ==, 1);                         /* once */
  g_assert_cmpfloat (tier_counter (s.tier, "kvtier_tier_late_completions"), ==, 1);
  g_assert_cmpfloat (tier_counter (s.tier, "kvtier_tier_late_completions"), ==, 0);

  /* the tier is still asked */
  g_assert_cmpint (kv_secondary_tier_lookup (s.tier, other, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (hung (s.tier)->n_lookups, >=, 1);
  kv_tiering_manager_on_request_finished (s.manager, request);
  stack_clear (&s);
}

/* A promotion the tier never reports fails at the deadline; its key goes
 * (the next lookup is a clean MISS, not a pending hit) but its slot stays
 * out of use until the tier answers, since the tier may still write it. */
static void
test_deadline_load_holds_slot (void)
{
  Stack s = { 0 };
  g_autoptr(KvClock) clock = kv_clock_new_manual (1000000);
  g_autoptr(KvRequest) request = kv_request_new ("load", NULL);
  g_autoptr(KvRequest) fresh = kv_request_new ("fresh", NULL);
  g_autoptr(KvKey) key = make_key (3);
  g_autoptr(GError) error = NULL;
  guint64 job_id;
  guint n_free;
  guint n_lookups;

  stack_init (&s, TEST_TYPE_HUNG_TIER, "primary", shared_buffer (), "clock", clock,
              "deadline-ms", 1000, NULL);
  g_hash_table_add (hung (s.tier)->present, kv_key_ref (key));
  kv_tiering_manager_on_new_request (s.manager, request);
  g_assert_cmpint (kv_tiering_manager_lookup (s.manager, key, request), ==,
                   KV_LOOKUP_RESULT_HIT_PENDING);
  stack_step (&s);                                              /* submits the load */
  g_assert_cmpuint (hung (s.tier)->n_submits, ==, 1);
  job_id = kv_transfer_job_get_id (hung (s.tier)->pending->pdata[0]);
  n_free = kv_primary_tier_get_n_free (s.primary);

  kv_clock_advance (clock, 1000 * 1000 - 1);
  stack_step (&s);
  g_assert_cmpint (kv_primary_tier_lookup (s.primary, key), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_clock_advance (clock, 1);
  stack_step (&s);                                              /* failed, reported */
  stack_step (&s);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (s.tier), ==, 1);
  g_assert_cmpint (kv_primary_tier_lookup (s.primary, key), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (s.primary), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (s.manager), ==, 0);
  /* the slot is neither free nor anyone's */
  g_assert_cmpuint (kv_primary_tier_get_n_free (s.primary), ==, n_free);
  /* reset_cache refuses to hand it out */
  g_assert_false (kv_tiering_manager_reset_cache (s.manager, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY);
  g_clear_error (&error);

  /* the request that failed to load it does not ask the tier again; a
   * fresh one does, and the promotion starts again */
  n_lookups = hung (s.tier)->n_lookups;
  g_assert_cmpint (kv_tiering_manager_lookup (s.manager, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (hung (s.tier)->n_lookups, ==, n_lookups);
  kv_tiering_manager_on_new_request (s.manager, fresh);
  g_assert_cmpint (kv_tiering_manager_lookup (s.manager, key, fresh), ==,
                   KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpuint (hung (s.tier)->n_lookups, ==, n_lookups + 1);
  g_assert_cmpuint (kv_primary_tier_get_n_free (s.primary), ==, n_free - 1);

  /* the tier answers the old load at last: dropped, the slot comes back */
  hung_answer (s.tier, job_id, TRUE);
  stack_step (&s);                        /* ends the step of the lookup above */
  stack_step (&s);                        /* takes the answer */
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (s.tier), ==, 1);
  g_assert_cmpuint (kv_primary_tier_get_n_free (s.primary), ==, n_free);

  /* and the new load works */
  g_assert_cmpuint (hung (s.tier)->pending->len, ==, 1);
  memset (kv_host_buffer_peek_slot (s.buffer, kv_transfer_job_get_chunk_id (hung (s.tier)->pending->pdata[0], 0)),
          0x5a, SLOT);
  hung_answer (s.tier, kv_transfer_job_get_id (hung (s.tier)->pending->pdata[0]), TRUE);
  stack_step (&s);
  stack_step (&s);
  g_assert_cmpint (kv_tiering_manager_lookup (s.manager, key, fresh), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_primary_tier_get_n_free (s.primary), ==, n_free);

  kv_tiering_manager_on_request_finished (s.manager, request);
  kv_tiering_manager_on_request_finished (s.manager, fresh);
  stack_clear (&s);
}

/* The capability: TRUE by default; a class clears it, an instance may
 * narrow its class's, never widen it. */
static void
test_can_cancel_stores (void)
{
  g_autoptr(KvSecondaryTier) plain = g_object_new (TEST_TYPE_HUNG_TIER, "primary", shared_buffer (),
                                                   NULL);
  g_autoptr(KvSecondaryTier) narrowed = g_object_new (TEST_TYPE_HUNG_TIER, "primary",
                                                      shared_buffer (), "can-cancel-stores",
                                                      FALSE, NULL);
  g_autoptr(KvSecondaryTier) widened = g_object_new (TEST_TYPE_NO_CANCEL_TIER, "primary",
                                                     shared_buffer (), "can-cancel-stores",
                                                     TRUE, NULL);
  gboolean value = TRUE;

  g_assert_true (kv_secondary_tier_get_can_cancel_stores (plain));
  g_assert_false (kv_secondary_tier_get_can_cancel_stores (narrowed));
  g_assert_false (kv_secondary_tier_get_can_cancel_stores (widened));
  g_object_get (widened, "can-cancel-stores", &value, NULL);
  g_assert_false (value);
}

/* A tier that cannot call a store back: the cascade failed at its
 * deadline is reported failed once, but its chunk stays pinned (its slot
 * keeps the bytes the tier may still read and publish) until the tier
 * answers; reset_cache refuses meanwhile; a cascade the tier never
 * answers is unpinned when the manager shuts down. */
static void
test_deadline_store_held (void)
{
  Stack s = { 0 };
  g_autoptr(KvClock) clock = kv_clock_new_manual (1000000);
  g_autoptr(KvRequest) request = kv_request_new ("held", NULL);
  g_autoptr(KvKey) key = make_key (5);
  g_autoptr(KvKey) never = make_key (6);
  g_autoptr(GError) error = NULL;
  guint n_finished = 0;
  guint64 job_id;

  stack_init (&s, TEST_TYPE_NO_CANCEL_TIER, "primary", shared_buffer (), "clock", clock,
              "deadline-ms", 1000, NULL);
  g_signal_connect (s.tier, "job-finished", G_CALLBACK (count_signal), &n_finished);
  kv_tiering_manager_on_new_request (s.manager, request);
  stack_store (&s, key, request);
  stack_step (&s);                                              /* submits the cascade */
  g_assert_cmpuint (hung (s.tier)->n_submits, ==, 1);
  job_id = kv_transfer_job_get_id (hung (s.tier)->pending->pdata[0]);
  g_assert_cmpint (ref_count (&s, key), ==, 1);

  kv_clock_advance (clock, 1000 * 1000);
  stack_step (&s);                                              /* failed, reported */
  stack_step (&s);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (s.tier), ==, 1);
  g_assert_cmpuint (n_finished, ==, 1);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (s.manager), ==, 0);
  g_assert_cmpint (ref_count (&s, key), ==, 1);                 /* still pinned */
  g_assert_false (kv_tiering_manager_reset_cache (s.manager, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY);
  g_clear_error (&error);

  /* the tier's late answer: dropped, counted, the pin goes */
  hung_answer (s.tier, job_id, TRUE);
  stack_step (&s);
  stack_step (&s);
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (s.tier), ==, 1);
  g_assert_cmpuint (n_finished, ==, 1);
  g_assert_cmpint (ref_count (&s, key), ==, 0);

  /* never answered: pinned until the manager shuts down */
  stack_store (&s, never, request);
  stack_step (&s);
  kv_clock_advance (clock, 1000 * 1000);
  stack_step (&s);
  stack_step (&s);
  g_assert_cmpuint (n_finished, ==, 2);
  g_assert_cmpint (ref_count (&s, never), ==, 1);
  kv_tiering_manager_on_request_finished (s.manager, request);
  g_assert_true (kv_tiering_manager_shutdown (s.manager, &error));
  g_assert_no_error (error);
  g_assert_cmpint (ref_count (&s, never), ==, 0);
  stack_clear (&s);
}

typedef struct
{
  KvSecondaryTier *tier;
  guint            n_cancelled;
  guint            n_seen;
} CancelPoll;

/* Polls the tier as the owner thread would, from the cancellable's
 * handler: what it finds, the manager could act on now. */
static void
poll_on_cancelled (GCancellable *cancellable,
                   gpointer      user_data)
{
  CancelPoll *p = user_data;
  KvJobResult **results = kv_secondary_tier_get_finished_jobs (p->tier);

  for (guint i = 0; results[i] != NULL; i++)
    {
      p->n_seen++;
      kv_job_result_unref (results[i]);
    }
  g_free (results);
  p->n_cancelled++;
}

/* At the deadline a job's cancellable is cancelled before its failure can
 * be taken: a tier that checks the cancellable before publishing a store
 * never finds it uncancelled once the manager may have handed the slots
 * to another chunk. Regression: the failure was queued first and the
 * cancellables cancelled after, a window in which the owner thread could
 * take it. */
static void
test_deadline_cancels_before_reporting (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", shared_buffer (),
                                                  "clock", clock, "deadline-ms", 10, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) key = make_key (7);
  guint32 slot = 0;
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (9, &key, &slot, 1, FALSE, request);
  g_autoptr(GCancellable) cancellable = NULL;
  CancelPoll poll = { tier, 0, 0 };
  KvJobResult **results;

  g_assert_true (kv_secondary_tier_submit_store (tier, job, NULL));
  cancellable = kv_secondary_tier_get_job_cancellable (tier, job);
  g_signal_connect (cancellable, "cancelled", G_CALLBACK (poll_on_cancelled), &poll);
  kv_clock_advance (clock, 10 * 1000);
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_cmpuint (poll.n_cancelled, ==, 1);
  g_assert_cmpuint (poll.n_seen, ==, 0);
  g_assert_nonnull (results[0]);
  g_assert_cmpuint (kv_job_result_get_job_id (results[0]), ==, 9);
  g_assert_false (kv_job_result_get_success (results[0]));
  g_assert_null (results[1]);
  kv_job_result_unref (results[0]);
  g_free (results);
  g_assert_cmpuint (kv_secondary_tier_get_n_jobs_in_flight (tier), ==, 0);
  g_signal_handlers_disconnect_by_data (cancellable, &poll);
}

/* A drain written to wait for the tier's own jobs would hang: once the
 * deadline failed them, the invoker does not call it; shutdown neither,
 * and every job is still reported exactly once. */
static void
test_unanswered_tier_not_drained (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer,
                                                  "clock", clock, "deadline-ms", 10, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) key = make_key (4);
  guint32 slot = 0;
  g_autoptr(KvTransferJob) job1 = kv_transfer_job_new (7, &key, &slot, 1, FALSE, request);
  g_autoptr(KvTransferJob) job2 = kv_transfer_job_new (8, &key, &slot, 1, FALSE, request);
  KvJobResult **results;
  guint n = 0;

  hung (tier)->naive_drain = TRUE;
  g_assert_true (kv_secondary_tier_submit_store (tier, job1, NULL));
  kv_clock_advance (clock, 10 * 1000);
  g_assert_true (kv_secondary_tier_drain_jobs (tier, NULL));
  g_assert_cmpuint (hung (tier)->n_drains, ==, 0);

  /* a job submitted later, still in flight at shutdown: reported once */
  g_assert_true (kv_secondary_tier_submit_store (tier, job2, NULL));
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  g_assert_cmpuint (hung (tier)->n_shutdowns, ==, 0);
  results = kv_secondary_tier_get_finished_jobs (tier);
  for (; results[n] != NULL; n++)
    {
      g_assert_false (kv_job_result_get_success (results[n]));
      g_assert_cmpuint (kv_job_result_get_job_id (results[n]), ==, 7 + n);
      kv_job_result_unref (results[n]);
    }
  g_free (results);
  g_assert_cmpuint (n, ==, 2);
  /* shutdown is not a deadline */
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (tier), ==, 1);
  hung_answer (tier, 7, TRUE);
  hung_answer (tier, 8, TRUE);
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_null (results[0]);
  g_free (results);
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (tier), ==, 2);
}

/* Without a deadline, a job the tier still holds at shutdown (its
 * shutdown dropped it) is failed by the base class, each exactly once;
 * the tier's late answer is dropped. Regression: only jobs with a
 * deadline were failed, so these were never reported. */
static void
test_shutdown_fails_jobs_without_deadline (void)
{
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer,
                                                  NULL);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) key = make_key (6);
  guint32 slot = 0;
  g_autoptr(KvTransferJob) store = kv_transfer_job_new (11, &key, &slot, 1, FALSE, request);
  g_autoptr(KvTransferJob) load = kv_transfer_job_new (12, &key, &slot, 1, TRUE, request);
  gboolean seen[2] = { FALSE, FALSE };
  KvJobResult **results;
  guint n = 0;

  g_assert_true (kv_secondary_tier_submit_store (tier, store, NULL));
  g_assert_true (kv_secondary_tier_submit_load (tier, load, NULL));
  g_assert_cmpuint (kv_secondary_tier_get_n_jobs_in_flight (tier), ==, 2);
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  g_assert_cmpuint (hung (tier)->n_shutdowns, ==, 1);
  g_assert_cmpuint (kv_secondary_tier_get_n_jobs_in_flight (tier), ==, 0);
  results = kv_secondary_tier_get_finished_jobs (tier);
  for (; results[n] != NULL; n++)
    {
      guint64 id = kv_job_result_get_job_id (results[n]);

      g_assert_false (kv_job_result_get_success (results[n]));
      g_assert_true (id == 11 || id == 12);
      g_assert_false (seen[id - 11]);
      seen[id - 11] = TRUE;
      kv_job_result_unref (results[n]);
    }
  g_free (results);
  g_assert_cmpuint (n, ==, 2);
  /* shutdown is not a deadline */
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (tier), ==, 0);

  hung_answer (tier, 11, TRUE);
  hung_answer (tier, 12, TRUE);
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_null (results[0]);
  g_free (results);
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (tier), ==, 2);
}

/* An answer in time stops the deadline: nothing expires later. */
static void
test_answer_in_time (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer,
                                                  "clock", clock, "deadline-ms", 10, NULL);
  g_autoptr(KvKey) key = make_key (5);
  guint32 slot = 0;
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (9, &key, &slot, 1, FALSE, request);
  KvJobResult **results;

  g_assert_true (kv_secondary_tier_submit_store (tier, job, NULL));
  g_assert_true (kv_secondary_tier_has_pending_work (tier));
  hung_answer (tier, 9, TRUE);
  kv_clock_advance (clock, 60 * 1000);
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_nonnull (results[0]);
  g_assert_true (kv_job_result_get_success (results[0]));
  g_assert_null (results[1]);
  kv_job_result_unref (results[0]);
  g_free (results);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (tier), ==, 0);
  g_assert_false (kv_secondary_tier_has_pending_work (tier));
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
}

/* One watchdog thread for the library, however many tiers have deadlines. */
static guint
count_watchdog_threads (void)
{
  g_autoptr(GDir) dir = g_dir_open ("/proc/self/task", 0, NULL);
  const char *name;
  guint n = 0;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *path = g_build_filename ("/proc/self/task", name, "comm", NULL);
      g_autofree char *comm = NULL;

      if (g_file_get_contents (path, &comm, NULL, NULL) && g_str_has_prefix (comm, "kvtier-watchdog"))
        n++;
    }
  return n;
}

static void
test_one_watchdog (void)
{
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  GPtrArray *tiers = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr(KvKey) key = make_key (6);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  guint32 slot = 0;

  for (guint i = 0; i < 4; i++)
    {
      KvSecondaryTier *tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer,
                                            "deadline-ms", 20, NULL);
      g_autoptr(KvTransferJob) job = kv_transfer_job_new (i + 1, &key, &slot, 1, FALSE, request);

      g_assert_true (kv_secondary_tier_submit_store (tier, job, NULL));
      g_ptr_array_add (tiers, tier);
    }
  g_assert_cmpuint (count_watchdog_threads (), ==, 1);
  for (guint i = 0; i < tiers->len; i++)
    kv_secondary_tier_wait_jobs (tiers->pdata[i]);
  for (guint i = 0; i < tiers->len; i++)
    g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (tiers->pdata[i]), ==, 1);
  g_ptr_array_unref (tiers);
}

/* Completions racing their deadline from worker threads: every job is
 * reported exactly once (by the tier or by the deadline), and every
 * answer that lost the race is counted late. */
typedef struct
{
  KvSecondaryTier *tier;
  GMutex           lock;
  GCond            cond;
  guint            n_done;
} RaceContext;

static void
race_worker (gpointer data,
             gpointer user_data)
{
  KvTransferJob *job = data;
  RaceContext *ctx = user_data;
  g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);

  g_usleep (g_random_int_range (0, 4000));
  kv_secondary_tier_complete_job (ctx->tier, result);
  kv_transfer_job_unref (job);
  g_mutex_lock (&ctx->lock);
  ctx->n_done++;
  g_cond_signal (&ctx->cond);
  g_mutex_unlock (&ctx->lock);
}

static void
test_race_exactly_once (void)
{
  const guint n_jobs = 400;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer,
                                                  "deadline-ms", 2, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("race", NULL);
  g_autoptr(KvKey) key = make_key (40);
  g_autofree guint8 *seen = g_new0 (guint8, n_jobs + 1);
  RaceContext ctx = { tier, { 0 }, { 0 }, 0 };
  GThreadPool *pool = g_thread_pool_new (race_worker, &ctx, 32, FALSE, NULL);
  guint n_results = 0, n_ok = 0;
  guint32 slot = 0;

  g_mutex_init (&ctx.lock);
  g_cond_init (&ctx.cond);
  for (guint i = 1; i <= n_jobs; i++)
    {
      g_autoptr(KvTransferJob) job = kv_transfer_job_new (i, &key, &slot, 1, FALSE, request);

      g_assert_true (kv_secondary_tier_submit_store (tier, job, NULL));
      g_ptr_array_set_size (hung (tier)->pending, 0);
      g_thread_pool_push (pool, kv_transfer_job_ref (job), NULL);
      /* batches of 32, one worker each: answers land around the deadline */
      if (i % 32 == 0 || i == n_jobs)
        {
          g_mutex_lock (&ctx.lock);
          while (ctx.n_done < i)
            g_cond_wait (&ctx.cond, &ctx.lock);
          g_mutex_unlock (&ctx.lock);
        }
    }
  kv_secondary_tier_wait_jobs (tier);

  {
    KvJobResult **results = kv_secondary_tier_get_finished_jobs (tier);

    for (; results[n_results] != NULL; n_results++)
      {
        guint64 id = kv_job_result_get_job_id (results[n_results]);

        g_assert_cmpuint (id, >=, 1);
        g_assert_cmpuint (id, <=, n_jobs);
        g_assert_cmpuint (seen[id], ==, 0);
        seen[id] = 1;
        n_ok += kv_job_result_get_success (results[n_results]);
        kv_job_result_unref (results[n_results]);
      }
    g_free (results);
  }
  g_assert_cmpuint (n_results, ==, n_jobs);
  g_assert_cmpuint (n_ok + kv_secondary_tier_get_n_expired_jobs (tier), ==, n_jobs);
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (tier), ==,
                    kv_secondary_tier_get_n_expired_jobs (tier));
  g_test_message ("%u jobs: %u answered in time, %" G_GUINT64_FORMAT " failed at the deadline",
                  n_jobs, n_ok, kv_secondary_tier_get_n_expired_jobs (tier));
  g_thread_pool_free (pool, FALSE, TRUE);
  g_mutex_clear (&ctx.lock);
  g_cond_clear (&ctx.cond);
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
}

/* ---- circuit breaker ------------------------------------------------------ */

static void
submit_store (KvSecondaryTier *tier,
              guint64          id,
              KvKey           *key)
{
  guint32 slot = 0;
  g_autoptr(KvRequest) request = kv_request_new ("store", NULL);
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (id, &key, &slot, 1, FALSE, request);
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_secondary_tier_submit_store (tier, job, &error));
  g_assert_no_error (error);
}

static guint
take_results (KvSecondaryTier *tier,
              guint           *n_ok)
{
  KvJobResult **results = kv_secondary_tier_get_finished_jobs (tier);
  guint n = 0;

  *n_ok = 0;
  for (; results[n] != NULL; n++)
    {
      *n_ok += kv_job_result_get_success (results[n]);
      kv_job_result_unref (results[n]);
    }
  g_free (results);
  return n;
}

/* N failures open it: lookups MISS and jobs fail without reaching the
 * tier; after the interval a probe runs; a failed probe keeps it open, a
 * healthy one closes it. */
static void
test_breaker_probe (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(TestProbeTier) probe_tier = g_object_new (TEST_TYPE_PROBE_TIER, "primary", buffer,
                                                      "clock", clock, "breaker-threshold", 3,
                                                      "breaker-open-ms", 100, NULL);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (probe_tier);
  KvCircuitBreaker *breaker = kv_secondary_tier_get_circuit_breaker (tier);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) key = make_key (7);
  guint n_ok = 0;
  guint threshold = 0;

  g_object_get (tier, "breaker-threshold", &threshold, NULL);
  g_assert_cmpuint (threshold, ==, 3);
  g_assert_cmpuint (kv_circuit_breaker_get_failure_threshold (breaker), ==, 3);
  g_hash_table_add (hung (tier)->present, kv_key_ref (key));
  hung (tier)->fail_jobs = TRUE;
  for (guint i = 0; i < 3; i++)
    {
      g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_CLOSED);
      submit_store (tier, i + 1, key);
    }
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);
  g_assert_cmpuint (kv_circuit_breaker_get_n_trips (breaker), ==, 1);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 3);

  /* open: nothing reaches the tier */
  hung (tier)->n_lookups = 0;
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (hung (tier)->n_lookups, ==, 0);
  submit_store (tier, 10, key);
  g_assert_cmpuint (hung (tier)->n_submits, ==, 3);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 1);
  g_assert_cmpuint (n_ok, ==, 0);
  g_assert_cmpfloat (tier_counter (tier, "kvtier_tier_breaker_rejected_jobs"), ==, 1);
  g_assert_cmpuint (probe_tier->n_probes, ==, 0);

  /* the interval passes; the probe fails: open for another interval */
  probe_tier->healthy = FALSE;
  kv_clock_advance (clock, 100 * 1000);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (probe_tier->n_probes, ==, 1);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (probe_tier->n_probes, ==, 1);

  /* the next probe is healthy: closed, the tier is asked again */
  probe_tier->healthy = TRUE;
  kv_clock_advance (clock, 100 * 1000);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (probe_tier->n_probes, ==, 2);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_CLOSED);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (hung (tier)->n_lookups, ==, 1);
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
}

/* Jobs past their deadline count as failures (at the deadline, not when
 * the tier answers); a probe that never answers fails at the deadline. */
static void
test_breaker_deadline_probe (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(TestProbeTier) probe_tier = g_object_new (TEST_TYPE_PROBE_TIER, "primary", buffer,
                                                      "clock", clock, "breaker-threshold", 2,
                                                      "breaker-open-ms", 100, "deadline-ms", 50,
                                                      NULL);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (probe_tier);
  KvCircuitBreaker *breaker = kv_secondary_tier_get_circuit_breaker (tier);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) key = make_key (8);
  guint n_ok = 0;

  submit_store (tier, 1, key);
  submit_store (tier, 2, key);
  kv_clock_advance (clock, 50 * 1000);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 2);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);

  probe_tier->answer_probes = FALSE;
  kv_clock_advance (clock, 100 * 1000);
  kv_secondary_tier_lookup (tier, key, request);
  g_assert_cmpuint (probe_tier->n_probes, ==, 1);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_HALF_OPEN);
  g_assert_true (kv_secondary_tier_has_pending_work (tier));
  kv_clock_advance (clock, 50 * 1000);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 0);   /* probes are no jobs */
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);
  /* the tier's late answers are dropped */
  hung_answer (tier, 1, TRUE);
  hung_answer (tier, 2, TRUE);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 0);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
}

/* A tier without a probe half-opens after the interval: the next job is
 * the trial; its success closes the breaker, its failure reopens it. */
static void
test_breaker_half_open_without_probe (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer,
                                                  "clock", clock, "breaker-threshold", 1,
                                                  "breaker-open-ms", 100, NULL);
  KvCircuitBreaker *breaker = kv_secondary_tier_get_circuit_breaker (tier);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) key = make_key (9);
  guint n_ok = 0;

  hung (tier)->fail_jobs = TRUE;
  submit_store (tier, 1, key);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);
  kv_clock_advance (clock, 100 * 1000);
  kv_secondary_tier_lookup (tier, key, request);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_HALF_OPEN);
  submit_store (tier, 2, key);                          /* reaches the tier, fails */
  g_assert_cmpuint (hung (tier)->n_submits, ==, 2);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);

  kv_clock_advance (clock, 100 * 1000);
  kv_secondary_tier_lookup (tier, key, request);
  hung (tier)->fail_jobs = FALSE;
  submit_store (tier, 3, key);
  hung_answer (tier, 3, TRUE);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_CLOSED);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 3);
  g_assert_cmpuint (n_ok, ==, 1);
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
}

/* Not a fault of the tier: does not count. */
static void
test_breaker_not_a_fault (void)
{
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer,
                                                  "breaker-threshold", 1, NULL);
  g_autoptr(KvKey) key = make_key (10);
  guint n_ok = 0;

  submit_store (tier, 1, key);
  {
    g_autoptr(KvJobResult) result = kv_job_result_new (1, FALSE);

    g_ptr_array_set_size (hung (tier)->pending, 0);
    kv_secondary_tier_complete_job_full (tier, result, KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT);
  }
  g_assert_cmpint (kv_circuit_breaker_get_state (kv_secondary_tier_get_circuit_breaker (tier)), ==,
                   KV_CIRCUIT_STATE_CLOSED);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 1);
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
}

/* Through the manager: while open, no cascade job is made, nothing is
 * pinned, and the store is counted. */
static void
test_breaker_no_cascade (void)
{
  Stack s = { 0 };
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) k1 = make_key (11);
  g_autoptr(KvKey) k2 = make_key (12);

  stack_init (&s, TEST_TYPE_HUNG_TIER, "primary", shared_buffer (), "breaker-threshold", 1,
              "breaker-open-ms", 60 * 1000, NULL);
  hung (s.tier)->fail_jobs = TRUE;
  kv_tiering_manager_on_new_request (s.manager, request);
  stack_store (&s, k1, request);
  stack_step (&s);
  stack_step (&s);
  g_assert_cmpint (kv_circuit_breaker_get_state (kv_secondary_tier_get_circuit_breaker (s.tier)), ==,
                   KV_CIRCUIT_STATE_OPEN);
  stack_store (&s, k2, request);
  g_assert_cmpuint (hung (s.tier)->n_submits, ==, 1);
  g_assert_cmpint (ref_count (&s, k2), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (s.manager), ==, 0);
  g_assert_cmpfloat (tier_counter (s.tier, "kvtier_tier_breaker_rejected_jobs"), ==, 1);
  kv_tiering_manager_on_request_finished (s.manager, request);
  stack_clear (&s);
}

/* ---- negative cache --------------------------------------------------------- */

/* A failed load marks every key that did not land (not only the one that
 * broke) as MISS for its request, without asking the tier; keys that
 * landed and other requests still reach the tier. */
static void
test_negative_cache (void)
{
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT, NULL);
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_HUNG_TIER, "primary", buffer, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvRequest) other = kv_request_new ("other", NULL);
  KvKey *keys[3] = { make_key (20), make_key (21), make_key (22) };
  guint32 slots[3] = { 0, 1, 2 };
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (5, keys, slots, 3, TRUE, request);
  g_autoptr(KvJobResult) result = kv_job_result_new (5, FALSE);
  guint n_ok = 0;

  for (guint i = 0; i < 3; i++)
    g_hash_table_add (hung (tier)->present, kv_key_ref (keys[i]));
  g_assert_true (kv_secondary_tier_submit_load (tier, job, NULL));
  kv_job_result_set_successful_keys (result, keys, 1);
  g_ptr_array_set_size (hung (tier)->pending, 0);
  kv_secondary_tier_complete_job (tier, result);
  /* the marks are made when the result is consumed */
  g_assert_cmpint (kv_secondary_tier_lookup (tier, keys[1], request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (take_results (tier, &n_ok), ==, 1);

  hung (tier)->n_lookups = 0;
  g_assert_cmpint (kv_secondary_tier_lookup (tier, keys[1], request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, keys[2], request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (hung (tier)->n_lookups, ==, 0);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, keys[0], request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, keys[1], other), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (hung (tier)->n_lookups, ==, 2);
  for (guint i = 0; i < 3; i++)
    kv_key_unref (keys[i]);
  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
}

/* ---- the primary's held slots --------------------------------------------- */

static void
test_primary_held_slots (void)
{
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (2, SLOT, NULL);
  g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (buffer, NULL, FALSE);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(KvPrepareStoreResult) again = NULL;
  g_autoptr(GError) error = NULL;
  KvKey *keys[2] = { make_key (30), make_key (31) };
  guint32 slots[2];
  guint n;

  prepared = kv_primary_tier_prepare_store (primary, keys, 2, &error);
  g_assert_no_error (error);
  n = _kv_primary_tier_drop_pending_keep_slots (primary, keys, 2, slots);
  g_assert_cmpuint (n, ==, 2);
  g_assert_cmpint (kv_primary_tier_lookup (primary, keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_primary_tier_get_n_free (primary), ==, 0);
  /* no slot to give: both are held */
  again = kv_primary_tier_prepare_store (primary, keys, 1, &error);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE);
  g_assert_null (again);
  g_clear_error (&error);
  _kv_primary_tier_free_slots (primary, slots, n);
  g_assert_cmpuint (kv_primary_tier_get_n_free (primary), ==, 2);
  again = kv_primary_tier_prepare_store (primary, keys, 1, &error);
  g_assert_no_error (error);
  kv_key_unref (keys[0]);
  kv_key_unref (keys[1]);
}

/* ---- configuration ---------------------------------------------------------- */

/* The knobs are properties of the base class, so a configuration file
 * sets them for any tier type, and a bad value is refused with the key
 * named. */
static void
test_config_sets_knobs (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(GError) error = NULL;
  KvSecondaryTier *tier;
  guint deadline = 0, threshold = 0, open_ms = 0;
  const char *text =
    "[primary]\n"
    "size = 64KiB\n"
    "slot-size = 4KiB\n"
    "[tier slow]\n"
    "type = hung\n"
    "deadline-ms = 250\n"
    "breaker-threshold = 3\n"
    "breaker-open-ms = 700\n";

  g_assert_true (kv_tier_registry_register_tier_type (registry, "hung", TEST_TYPE_HUNG_TIER, NULL));
  config = kv_config_new_from_data (registry, text, -1, "resilience.conf", &error);
  g_assert_no_error (error);
  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);
  tier = kv_tiering_manager_get_tier (manager, 0);
  g_object_get (tier, "deadline-ms", &deadline, "breaker-threshold", &threshold,
                "breaker-open-ms", &open_ms, NULL);
  g_assert_cmpuint (deadline, ==, 250);
  g_assert_cmpuint (threshold, ==, 3);
  g_assert_cmpuint (open_ms, ==, 700);
  g_assert_cmpuint (kv_circuit_breaker_get_open_ms (kv_secondary_tier_get_circuit_breaker (tier)), ==, 700);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
  g_clear_object (&config);

  config = kv_config_new_from_data (registry,
                                    "[primary]\nsize = 64KiB\nslot-size = 4KiB\n"
                                    "[tier slow]\ntype = hung\ndeadline-ms = -5\n",
                                    -1, "bad.conf", &error);
  if (config != NULL)
    {
      g_autoptr(KvTieringManager) bad = kv_config_create_manager (config, &error);

      g_assert_null (bad);
    }
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "deadline-ms"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/kvtier/resilience/deadline/store", test_deadline_store);
  g_test_add_func ("/kvtier/resilience/deadline/load-holds-slot", test_deadline_load_holds_slot);
  g_test_add_func ("/kvtier/resilience/can-cancel-stores", test_can_cancel_stores);
  g_test_add_func ("/kvtier/resilience/deadline/store-held", test_deadline_store_held);
  g_test_add_func ("/kvtier/resilience/deadline/cancels-before-reporting",
                   test_deadline_cancels_before_reporting);
  g_test_add_func ("/kvtier/resilience/deadline/unanswered-tier-not-drained",
                   test_unanswered_tier_not_drained);
  g_test_add_func ("/kvtier/resilience/deadline/answer-in-time", test_answer_in_time);
  g_test_add_func ("/kvtier/resilience/shutdown-fails-jobs-without-deadline",
                   test_shutdown_fails_jobs_without_deadline);
  g_test_add_func ("/kvtier/resilience/deadline/one-watchdog", test_one_watchdog);
  g_test_add_func ("/kvtier/resilience/deadline/race-exactly-once", test_race_exactly_once);
  g_test_add_func ("/kvtier/resilience/breaker/probe", test_breaker_probe);
  g_test_add_func ("/kvtier/resilience/breaker/deadline-probe", test_breaker_deadline_probe);
  g_test_add_func ("/kvtier/resilience/breaker/half-open-without-probe",
                   test_breaker_half_open_without_probe);
  g_test_add_func ("/kvtier/resilience/breaker/not-a-fault", test_breaker_not_a_fault);
  g_test_add_func ("/kvtier/resilience/breaker/no-cascade", test_breaker_no_cascade);
  g_test_add_func ("/kvtier/resilience/negative-cache", test_negative_cache);
  g_test_add_func ("/kvtier/resilience/primary-held-slots", test_primary_held_slots);
  g_test_add_func ("/kvtier/resilience/config-sets-knobs", test_config_sets_knobs);

  return g_test_run ();
}
