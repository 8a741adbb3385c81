/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-secondary-tier.h"
#include "kv-secondary-tier-private.h"

#include <string.h>

#include "kv-enums.h"
#include "kv-job-watchdog-private.h"

/* Keys handed to touch() are copied into a NULL-terminated array for the
 * vfunc; up to this many go on the stack. */
#define TOUCH_STACK_KEYS 64

/* A job accepted through the submit invokers, until the tier reports it
 * (then it is forgotten) or its deadline passes (then it is reported
 * failed and kept, to recognise the tier's late answer). */
typedef enum {
  TRACKED_IN_FLIGHT,
  TRACKED_EXPIRED,      /* failed at the deadline; the tier has not answered */
  TRACKED_HELD,         /* ...and the manager holds the load's slots for it */
} TrackedState;

typedef struct
{
  KvTransferJob *job;
  guint64        id;
  gint64         deadline;     /* tier clock, µs; G_MAXINT64: none */
  gboolean       is_load;
  TrackedState   state;
  KvJobResult   *expired_result; /* the failure the deadline reported */
  GCancellable  *cancellable;  /* made on demand, cancelled at the deadline */
  GList          link;         /* in by_deadline while in flight */
} TrackedJob;

/* A failed load of a request: its keys that did not land answer MISS to
 * that request from then on (reference §8.7). */
typedef struct
{
  KvTransferJob *job;
  KvJobResult   *result;
} FailedLoad;

typedef struct
{
  char                   *tier_type;
  KvHostBuffer           *primary;
  KvBackpressureDetector *detector;
  KvLocality              locality;
  KvMedium                medium;
  gboolean                lazy_promotion_allocation;

  /* Owner thread: the manager's reservation of lazy promotions. */
  KvSecondaryTierReserveFunc reserve_func;
  gpointer                reserve_data;

  /* Owner thread only: set once shutdown() succeeded. */
  gboolean                closed;

  /* Filled from any thread by complete_job() / push_event(), drained on
   * the owner thread by the default get_finished_jobs() / take_events(). */
  GMutex                  lock;
  GCond                   calls_cond;
  GPtrArray              *finished;       /* (element-type KvJobResult) */
  GPtrArray              *events;         /* (element-type KvEvent) */
  KvSecondaryTierQueuedFunc queued_func;
  gpointer                queued_data;
  guint                   n_queued_calls; /* queued_func calls running now */
  gint                    n_queued;       /* (atomic) results not taken yet */
  gint                    n_events;       /* (atomic) events not taken yet */

  /* Inherited liveness: deadlines, breaker, negative cache. */
  KvClock                *clock;
  gboolean                manual_clock;
  guint                   deadline_ms;
  KvCircuitBreaker       *breaker;
  GMainContext           *completion_context;
  KvJobWatchdogClient     watchdog;
  /* guarded by lock */
  GHashTable             *tracked;        /* guint64* id → TrackedJob */
  GQueue                  by_deadline;    /* in-flight TrackedJob, earliest first */
  gint                    n_in_flight;    /* (atomic) tracked, not reported yet */
  gint                    n_unanswered;   /* (atomic) expired, no answer from the tier */
  GArray                 *released;       /* guint64 ids of held jobs answered late */
  GPtrArray              *failed_loads;   /* FailedLoad, for the negative cache */
  guint64                 next_probe_id;
  guint64                 probe_id;       /* the probe in flight, or 0 */
  GCancellable           *probe_cancellable;
  gint64                  probe_deadline;
  GCond                   jobs_cond;      /* n_in_flight or probe changed */
  guint64                 n_expired;
  guint64                 n_late;
  guint64                 n_rejected;
  guint64                 reported_expired;  /* owner thread: taken by get_stats */
  guint64                 reported_late;
  guint64                 reported_rejected;
  gint                    n_released;     /* (atomic) released->len */

  /* owner thread: some request has a negative cache entry */
  gboolean                has_negatives;
  /* address used as the request-state owner of the negative cache */
  guint8                  negative_tag;
} KvSecondaryTierPrivate;

enum {
  PROP_0,
  PROP_TIER_TYPE,
  PROP_PRIMARY,
  PROP_BACKPRESSURE_DETECTOR,
  PROP_LOCALITY,
  PROP_MEDIUM,
  PROP_BLOCK_SIZE_BYTES,
  PROP_CLOCK,
  PROP_DEADLINE_MS,
  PROP_BREAKER_THRESHOLD,
  PROP_BREAKER_OPEN_MS,
  PROP_CIRCUIT_BREAKER,
  PROP_COMPLETION_CONTEXT,
  PROP_LAZY_PROMOTION_ALLOCATION,
  N_PROPS
};

enum {
  JOB_FINISHED,
  N_SIGNALS
};

static GParamSpec *properties[N_PROPS];
static guint signals[N_SIGNALS];

/**
 * KvSecondaryTier:
 *
 * The abstract base class of every secondary tier: a store (local disk, a
 * Redis cluster, other kvtier nodes, process memory...) that holds copies
 * of chunks of the primary tier.
 *
 * A tier moves bytes between slots of the primary tier's
 * [class@Kv.HostBuffer] (the [property@Kv.SecondaryTier:primary] property)
 * and its own storage; it never touches GPU memory. The
 * [class@Kv.TieringManager] drives it with the methods of this class, all
 * from one thread, the *owner thread* (the engine's scheduler):
 *
 * - [vfunc@Kv.SecondaryTier.lookup] answers whether a chunk is stored;
 * - [vfunc@Kv.SecondaryTier.submit_store] copies pinned primary slots into
 *   the tier (a *cascade*), [vfunc@Kv.SecondaryTier.submit_load] fills
 *   freshly allocated primary slots from the tier (a *promotion*). Neither
 *   may block: the tier starts the work on its own threads (or with
 *   asynchronous I/O on a main context) and reports each job exactly once,
 *   success or failure, with [method@Kv.SecondaryTier.complete_job], which
 *   may be called from any thread;
 * - [vfunc@Kv.SecondaryTier.drain_jobs] and
 *   [vfunc@Kv.SecondaryTier.shutdown] are the only calls that may block;
 *   they must not wait for the owner thread's main context.
 *
 * Subclasses written in C override the vfuncs in their class structure;
 * Python implements them as `do_lookup`, `do_submit_store`..., JavaScript
 * as `vfunc_lookup`, `vfunc_submit_store`... Key arrays passed to vfuncs
 * are %NULL-terminated (no length parameter) so that every binding can
 * implement them.
 *
 * Each vfunc has a non-virtual invoker (`kv_secondary_tier_lookup()`...)
 * that checks its arguments, refuses jobs after a successful shutdown
 * with %KV_TIER_ERROR_CLOSED, and turns a vfunc that returns %FALSE
 * without setting an error (an exception swallowed by a binding) into
 * %KV_TIER_ERROR_FAILED.
 *
 * The invokers also keep every tier live, whatever its language: a job
 * not reported within [property@Kv.SecondaryTier:deadline-ms] is reported
 * failed by the library's one watchdog thread and the tier's later report
 * is dropped; a [class@Kv.CircuitBreaker] opened by
 * [property@Kv.SecondaryTier:breaker-threshold] failures in a row answers
 * lookups with %KV_LOOKUP_RESULT_MISS and fails jobs without calling the
 * tier until [vfunc@Kv.SecondaryTier.probe] (or, without one, the next
 * job) finds it healthy; and the keys of a failed load that did not land
 * answer %KV_LOOKUP_RESULT_MISS to that request from then on.
 */
G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (KvSecondaryTier, kv_secondary_tier, G_TYPE_OBJECT)

static KvJobResult **
empty_results (void)
{
  return g_new0 (KvJobResult *, 1);
}

static KvEvent **
empty_events (void)
{
  return g_new0 (KvEvent *, 1);
}

/* Turns a queue into the NULL-terminated array handed to the caller. */
static gpointer *
steal_queue (GPtrArray *queue)
{
  g_ptr_array_set_free_func (queue, NULL);
  g_ptr_array_add (queue, NULL);
  return g_ptr_array_free (queue, FALSE);
}

static KvJobResult **
kv_secondary_tier_real_get_finished_jobs (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  GPtrArray *fresh;
  GPtrArray *taken;

  if (g_atomic_int_get (&priv->n_queued) == 0)
    return empty_results ();

  /* Allocate outside the lock so that workers never wait on malloc. */
  fresh = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  g_mutex_lock (&priv->lock);
  taken = priv->finished;
  priv->finished = fresh;
  g_atomic_int_set (&priv->n_queued, 0);
  g_mutex_unlock (&priv->lock);

  return (KvJobResult **) steal_queue (taken);
}

static KvEvent **
kv_secondary_tier_real_take_events (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  GPtrArray *fresh;
  GPtrArray *taken;

  if (g_atomic_int_get (&priv->n_events) == 0)
    return empty_events ();

  fresh = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_event_unref);
  g_mutex_lock (&priv->lock);
  taken = priv->events;
  priv->events = fresh;
  g_atomic_int_set (&priv->n_events, 0);
  g_mutex_unlock (&priv->lock);

  return (KvEvent **) steal_queue (taken);
}

static gboolean
kv_secondary_tier_real_has_pending_work (KvSecondaryTier *self)
{
  return FALSE;
}

static gboolean
kv_secondary_tier_real_shutdown (KvSecondaryTier  *self,
                                 GError          **error)
{
  return TRUE;
}

static void watchdog_fired (gpointer user_data);
static void tracked_free (TrackedJob *t);
static void failed_load_free (FailedLoad *f);
static gboolean settle_locked (KvSecondaryTier    *self,
                               TrackedJob         *t,
                               KvJobResult        *result,
                               KvCompleteJobFlags  flags);
static void finish_settled (KvSecondaryTier    *self,
                            TrackedJob         *t,
                            KvJobResult        *result,
                            KvCompleteJobFlags  flags,
                            gboolean            late);

static gboolean
kv_secondary_tier_real_drain_jobs (KvSecondaryTier  *self,
                                   GError          **error)
{
  kv_secondary_tier_wait_jobs (self);
  return TRUE;
}

static void
kv_secondary_tier_constructed (GObject *object)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  G_OBJECT_CLASS (kv_secondary_tier_parent_class)->constructed (object);

  if (priv->tier_type == NULL)
    priv->tier_type = g_strdup (G_OBJECT_TYPE_NAME (self));
  if (priv->medium == KV_MEDIUM_UNSPECIFIED)
    priv->medium = KV_SECONDARY_TIER_GET_CLASS (self)->medium;
  if (KV_SECONDARY_TIER_GET_CLASS (self)->lazy_promotion_allocation)
    priv->lazy_promotion_allocation = TRUE;
  if (priv->clock == NULL)
    priv->clock = g_object_ref (kv_clock_get_default ());
  priv->manual_clock = kv_clock_is_manual (priv->clock);
  g_object_set (priv->breaker, "clock", priv->clock, NULL);
  _kv_job_watchdog_register (&priv->watchdog, watchdog_fired, self);
}

static void
kv_secondary_tier_dispose (GObject *object)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  /* Only drop references: dispose never calls vfuncs (bindings refuse
   * calls made during garbage collection). */
  g_clear_object (&priv->detector);
  g_clear_object (&priv->primary);

  G_OBJECT_CLASS (kv_secondary_tier_parent_class)->dispose (object);
}

static void
kv_secondary_tier_finalize (GObject *object)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  /* No watchdog call runs past this point. */
  _kv_job_watchdog_unregister (&priv->watchdog);

  /* Whatever nobody took is dropped with the tier. */
  if (priv->tracked != NULL)
    {
      GHashTableIter iter;
      gpointer value;

      g_hash_table_iter_init (&iter, priv->tracked);
      while (g_hash_table_iter_next (&iter, NULL, &value))
        tracked_free (value);
      g_hash_table_unref (priv->tracked);
    }
  g_clear_pointer (&priv->failed_loads, g_ptr_array_unref);
  g_clear_pointer (&priv->released, g_array_unref);
  g_clear_pointer (&priv->completion_context, g_main_context_unref);
  g_clear_object (&priv->probe_cancellable);
  g_clear_object (&priv->breaker);
  g_clear_object (&priv->clock);
  g_cond_clear (&priv->jobs_cond);
  g_clear_pointer (&priv->finished, g_ptr_array_unref);
  g_clear_pointer (&priv->events, g_ptr_array_unref);
  g_clear_pointer (&priv->tier_type, g_free);
  g_cond_clear (&priv->calls_cond);
  g_mutex_clear (&priv->lock);

  G_OBJECT_CLASS (kv_secondary_tier_parent_class)->finalize (object);
}

static void
kv_secondary_tier_get_property (GObject    *object,
                                guint       prop_id,
                                GValue     *value,
                                GParamSpec *pspec)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_TIER_TYPE:
      g_value_set_string (value, priv->tier_type);
      break;

    case PROP_PRIMARY:
      g_value_set_object (value, priv->primary);
      break;

    case PROP_BACKPRESSURE_DETECTOR:
      g_value_set_object (value, priv->detector);
      break;

    case PROP_LOCALITY:
      g_value_set_enum (value, priv->locality);
      break;

    case PROP_MEDIUM:
      g_value_set_enum (value, priv->medium);
      break;

    case PROP_LAZY_PROMOTION_ALLOCATION:
      g_value_set_boolean (value, priv->lazy_promotion_allocation);
      break;

    case PROP_BLOCK_SIZE_BYTES:
      g_value_set_uint64 (value, kv_secondary_tier_get_block_size_bytes (self));
      break;

    case PROP_CLOCK:
      g_value_set_object (value, priv->clock);
      break;

    case PROP_DEADLINE_MS:
      g_value_set_uint (value, kv_secondary_tier_get_deadline_ms (self));
      break;

    case PROP_BREAKER_THRESHOLD:
      g_value_set_uint (value, kv_circuit_breaker_get_failure_threshold (priv->breaker));
      break;

    case PROP_BREAKER_OPEN_MS:
      g_value_set_uint (value, kv_circuit_breaker_get_open_ms (priv->breaker));
      break;

    case PROP_CIRCUIT_BREAKER:
      g_value_set_object (value, priv->breaker);
      break;

    case PROP_COMPLETION_CONTEXT:
      g_value_set_boxed (value, priv->completion_context);
      break;

    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_secondary_tier_set_property (GObject      *object,
                                guint         prop_id,
                                const GValue *value,
                                GParamSpec   *pspec)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_TIER_TYPE:
      g_free (priv->tier_type);
      priv->tier_type = g_value_dup_string (value);
      break;

    case PROP_PRIMARY:
      g_set_object (&priv->primary, g_value_get_object (value));
      break;

    case PROP_BACKPRESSURE_DETECTOR:
      g_set_object (&priv->detector, g_value_get_object (value));
      break;

    case PROP_LOCALITY:
      priv->locality = g_value_get_enum (value);
      break;

    case PROP_MEDIUM:
      priv->medium = g_value_get_enum (value);
      break;

    case PROP_LAZY_PROMOTION_ALLOCATION:
      priv->lazy_promotion_allocation = g_value_get_boolean (value);
      break;

    case PROP_CLOCK:
      g_set_object (&priv->clock, g_value_get_object (value));
      break;

    case PROP_DEADLINE_MS:
      kv_secondary_tier_set_deadline_ms (self, g_value_get_uint (value));
      break;

    case PROP_BREAKER_THRESHOLD:
      kv_circuit_breaker_set_failure_threshold (priv->breaker, g_value_get_uint (value));
      break;

    case PROP_BREAKER_OPEN_MS:
      kv_circuit_breaker_set_open_ms (priv->breaker, g_value_get_uint (value));
      break;

    case PROP_COMPLETION_CONTEXT:
      g_clear_pointer (&priv->completion_context, g_main_context_unref);
      priv->completion_context = g_value_dup_boxed (value);
      break;

    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_secondary_tier_class_init (KvSecondaryTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->constructed = kv_secondary_tier_constructed;
  object_class->dispose = kv_secondary_tier_dispose;
  object_class->finalize = kv_secondary_tier_finalize;
  object_class->get_property = kv_secondary_tier_get_property;
  object_class->set_property = kv_secondary_tier_set_property;

  klass->get_finished_jobs = kv_secondary_tier_real_get_finished_jobs;
  klass->take_events = kv_secondary_tier_real_take_events;
  klass->has_pending_work = kv_secondary_tier_real_has_pending_work;
  klass->shutdown = kv_secondary_tier_real_shutdown;
  klass->drain_jobs = kv_secondary_tier_real_drain_jobs;

  /**
   * KvSecondaryTier:tier-type:
   *
   * The name the tier was configured under (`fs`, `redis`, `example`...),
   * used in metric labels and log messages. %NULL at construction means
   * the name of the instance's type.
   */
  properties[PROP_TIER_TYPE] =
    g_param_spec_string ("tier-type", NULL, NULL,
                         NULL,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:primary:
   *
   * The slot memory of the primary tier. Jobs name slots of this buffer by
   * index ([method@Kv.TransferJob.get_chunk_ids]); the tier reads them for
   * stores and writes them for loads.
   */
  properties[PROP_PRIMARY] =
    g_param_spec_object ("primary", NULL, NULL,
                         KV_TYPE_HOST_BUFFER,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:backpressure-detector:
   *
   * The detector that tells the manager when this tier cannot keep up with
   * stores, or %NULL to never drop a store.
   */
  properties[PROP_BACKPRESSURE_DETECTOR] =
    g_param_spec_object ("backpressure-detector", NULL, NULL,
                         KV_TYPE_BACKPRESSURE_DETECTOR,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:locality:
   *
   * How far the tier's storage is from this process; matched by request
   * tier filters and reported in the tier's events.
   */
  properties[PROP_LOCALITY] =
    g_param_spec_enum ("locality", NULL, NULL,
                       KV_TYPE_LOCALITY,
                       KV_LOCALITY_UNSPECIFIED,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:medium:
   *
   * Where the tier keeps its chunks. %KV_MEDIUM_UNSPECIFIED at
   * construction means the class's `medium` field (tiers written in C set
   * it in `class_init`; tiers written in Python or JavaScript pass this
   * property instead).
   */
  properties[PROP_MEDIUM] =
    g_param_spec_enum ("medium", NULL, NULL,
                       KV_TYPE_MEDIUM,
                       KV_MEDIUM_UNSPECIFIED,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:lazy-promotion-allocation:
   *
   * Whether the tier reserves the primary slots of each load when it
   * starts it, with [method@Kv.SecondaryTier.reserve_load_slots], instead
   * of the manager reserving them when the lookup finds the chunk (vLLM's
   * lazy promotion allocation, issue #49902). A long prefix waiting in a
   * slow tier then holds no primary slot until its load starts. %TRUE when
   * the class's `lazy_promotion_allocation` field is set (tiers written in
   * C set it in `class_init`; tiers written in Python or JavaScript pass
   * this property instead).
   */
  properties[PROP_LAZY_PROMOTION_ALLOCATION] =
    g_param_spec_boolean ("lazy-promotion-allocation", NULL, NULL,
                          FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:block-size-bytes:
   *
   * The size of one chunk in bytes: the slot size of
   * [property@Kv.SecondaryTier:primary], or 0 without a primary buffer.
   */
  properties[PROP_BLOCK_SIZE_BYTES] =
    g_param_spec_uint64 ("block-size-bytes", NULL, NULL,
                         0, G_MAXUINT64, 0,
                         G_PARAM_READABLE |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:clock:
   *
   * The clock of job deadlines and of the circuit breaker's open
   * interval; %NULL at construction means [func@Kv.Clock.get_default].
   * With a manual clock (tests) deadlines are checked only when the owner
   * thread calls the tier, not by the watchdog.
   */
  properties[PROP_CLOCK] =
    g_param_spec_object ("clock", NULL, NULL,
                         KV_TYPE_CLOCK,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:deadline-ms:
   *
   * How long a job may take, in milliseconds; 0 (the default of the base
   * class) means no deadline. A job the tier has not reported by then is
   * reported failed by the library's watchdog, once, through the same
   * queue as [method@Kv.SecondaryTier.complete_job], so that its primary
   * slots are unpinned; the tier's own report, when it comes, is dropped
   * and counted (`kvtier:tier_late_completions`).
   *
   * A load failed this way may still be written by the tier: the manager
   * keeps its slots out of use (neither readable nor handed to another
   * chunk) until the tier reports it. A store failed this way must not
   * be published by the tier: its slots may hold other bytes by then
   * (see [method@Kv.SecondaryTier.get_job_cancellable]).
   */
  properties[PROP_DEADLINE_MS] =
    g_param_spec_uint ("deadline-ms", NULL, NULL,
                       0, G_MAXUINT, 0,
                       G_PARAM_READWRITE |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:breaker-threshold:
   *
   * Failures of the tier in a row (jobs past their deadline, failed jobs
   * not marked %KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT) that open its circuit
   * breaker; 0 (the default of the base class) never opens it. While the
   * breaker is open, lookups answer %KV_LOOKUP_RESULT_MISS without calling
   * the tier and jobs fail at once without reaching it.
   */
  properties[PROP_BREAKER_THRESHOLD] =
    g_param_spec_uint ("breaker-threshold", NULL, NULL,
                       0, G_MAXUINT, 0,
                       G_PARAM_READWRITE |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:breaker-open-ms:
   *
   * How long an open breaker waits before it probes the tier
   * ([vfunc@Kv.SecondaryTier.probe]) or, for a tier without a probe, lets
   * jobs through again until the next outcome; also the wait after a
   * failed probe.
   */
  properties[PROP_BREAKER_OPEN_MS] =
    g_param_spec_uint ("breaker-open-ms", NULL, NULL,
                       0, G_MAXUINT, 1000,
                       G_PARAM_READWRITE |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:circuit-breaker:
   *
   * The tier's circuit breaker, configured by
   * [property@Kv.SecondaryTier:breaker-threshold] and
   * [property@Kv.SecondaryTier:breaker-open-ms].
   */
  properties[PROP_CIRCUIT_BREAKER] =
    g_param_spec_object ("circuit-breaker", NULL, NULL,
                         KV_TYPE_CIRCUIT_BREAKER,
                         G_PARAM_READABLE |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:completion-context:
   *
   * The main context whose callbacks report this tier's jobs, for tiers
   * that complete jobs from main-loop callbacks on the owner thread (a
   * JavaScript tier passes `GLib.MainContext.default()`), or %NULL when
   * completions come from the tier's own threads.
   * [method@Kv.SecondaryTier.wait_jobs] iterates it while it waits.
   */
  properties[PROP_COMPLETION_CONTEXT] =
    g_param_spec_boxed ("completion-context", NULL, NULL,
                        G_TYPE_MAIN_CONTEXT,
                        G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                        G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);

  /**
   * KvSecondaryTier::job-finished:
   * @self: the tier
   * @result: the result of the job
   *
   * Emitted when the manager has consumed the result of one of this tier's
   * jobs (a store, a load or a job made by
   * [method@Kv.ParentManager.create_store_job]), once per job. Emitted only
   * by the manager, on the owner thread, never from the thread that called
   * [method@Kv.SecondaryTier.complete_job], so handlers written in
   * JavaScript are safe.
   */
  signals[JOB_FINISHED] =
    g_signal_new ("job-finished",
                  G_TYPE_FROM_CLASS (klass),
                  G_SIGNAL_RUN_LAST,
                  G_STRUCT_OFFSET (KvSecondaryTierClass, job_finished),
                  NULL, NULL, NULL,
                  G_TYPE_NONE, 1,
                  KV_TYPE_JOB_RESULT);
}

static void
kv_secondary_tier_init (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  g_mutex_init (&priv->lock);
  g_cond_init (&priv->calls_cond);
  priv->finished = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  priv->events = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_event_unref);
  g_cond_init (&priv->jobs_cond);
  priv->tracked = g_hash_table_new (g_int64_hash, g_int64_equal);
  priv->released = g_array_new (FALSE, FALSE, sizeof (guint64));
  priv->failed_loads = g_ptr_array_new_with_free_func ((GDestroyNotify) failed_load_free);
  priv->breaker = kv_circuit_breaker_new (0, 1000, NULL);
}

/* The vfuncs are documented by their invokers below, whose signatures
 * they share (g-ir-scanner pairs them and copies the invoker's text). These
 * blocks only add what differs: touch() takes NULL-terminated keys, and a
 * binding may return None for "nothing". */

/**
 * KvSecondaryTierClass::get_finished_jobs:
 * @self: the tier
 *
 * See [method@Kv.SecondaryTier.get_finished_jobs].
 *
 * Returns: (transfer full) (array zero-terminated=1) (nullable): the
 *   results, or %NULL for none
 */

/**
 * KvSecondaryTierClass::take_events:
 * @self: the tier
 *
 * See [method@Kv.SecondaryTier.take_events].
 *
 * Returns: (transfer full) (array zero-terminated=1) (nullable): the
 *   events, or %NULL for none
 */

/**
 * KvSecondaryTierClass::touch:
 * @self: the tier
 * @keys: (array zero-terminated=1) (transfer none): the keys used, most
 *   recent last
 * @request: the request that used them
 *
 * A recency hint: @keys were just used (by a GPU prefix hit or a load).
 * Called on the owner thread; must not block. The default does nothing.
 */

static gboolean
missing_vfunc (KvSecondaryTier  *self,
               const char       *vfunc,
               GError          **error)
{
  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
               "%s does not implement %s", G_OBJECT_TYPE_NAME (self), vfunc);
  return FALSE;
}

/* Checks what a gboolean vfunc returned: FALSE without an error is what a
 * Python or JavaScript implementation returns when it raised an exception
 * that is not a GLib.Error. */
static gboolean
check_vfunc_result (KvSecondaryTier  *self,
                    const char       *vfunc,
                    gboolean          ret,
                    GError           *local_error,
                    GError          **error)
{
  if (ret)
    {
      if (local_error != NULL)
        {
          g_debug ("%s.%s succeeded but set an error, ignored: %s",
                   G_OBJECT_TYPE_NAME (self), vfunc, local_error->message);
          g_error_free (local_error);
        }
      return TRUE;
    }

  if (local_error == NULL)
    {
      local_error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                 "%s.%s failed without setting an error "
                                 "(an exception in a language binding?)",
                                 G_OBJECT_TYPE_NAME (self), vfunc);
      g_debug ("%s", local_error->message);
    }
  g_propagate_error (error, local_error);
  return FALSE;
}

static gboolean
closed_error (KvSecondaryTier  *self,
              const char       *what,
              GError          **error)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
               "Cannot %s: tier %s (%s) was shut down",
               what, priv->tier_type, G_OBJECT_TYPE_NAME (self));
  return FALSE;
}

/* ---- inherited liveness: tracked jobs, deadlines, breaker ---------------- */

static void
tracked_free (TrackedJob *t)
{
  kv_transfer_job_unref (t->job);
  g_clear_pointer (&t->expired_result, kv_job_result_unref);
  g_clear_object (&t->cancellable);
  g_free (t);
}

static void
failed_load_free (FailedLoad *f)
{
  kv_transfer_job_unref (f->job);
  kv_job_result_unref (f->result);
  g_free (f);
}

/* Lock held. */
static void
add_failed_load_locked (KvSecondaryTierPrivate *priv,
                        KvTransferJob          *job,
                        KvJobResult            *result)
{
  FailedLoad *f;

  if (kv_transfer_job_get_request (job) == NULL)
    return;
  f = g_new (FailedLoad, 1);
  f->job = kv_transfer_job_ref (job);
  f->result = kv_job_result_ref (result);
  g_ptr_array_add (priv->failed_loads, f);
}

/* Lock held: the earliest moment something tracked may expire. */
static gint64
next_deadline_locked (KvSecondaryTierPrivate *priv)
{
  gint64 next = G_MAXINT64;

  if (priv->by_deadline.head != NULL)
    next = ((TrackedJob *) priv->by_deadline.head->data)->deadline;
  if (priv->probe_id != 0)
    next = MIN (next, priv->probe_deadline);
  return next;
}

/* Lock held. The watchdog follows g_get_monotonic_time(), which is what
 * the default clock reads; a manual clock is checked on the owner thread
 * instead (tests move it by hand). */
static void
schedule_watchdog_locked (KvSecondaryTierPrivate *priv)
{
  if (!priv->manual_clock)
    _kv_job_watchdog_schedule (&priv->watchdog, next_deadline_locked (priv));
}

/* Lock held: takes a call of the queued func (see notify_queued()). */
static KvSecondaryTierQueuedFunc
take_queued_func_locked (KvSecondaryTierPrivate *priv,
                         gpointer               *user_data)
{
  *user_data = priv->queued_data;
  if (priv->queued_func != NULL)
    priv->n_queued_calls++;
  return priv->queued_func;
}

static void notify_queued (KvSecondaryTierPrivate    *priv,
                           KvSecondaryTierQueuedFunc  func,
                           gpointer                   user_data);

static void
wake_completion_context (KvSecondaryTierPrivate *priv)
{
  if (priv->completion_context != NULL)
    g_main_context_wakeup (priv->completion_context);
}

/* Lock held: reports @t's in-flight job failed (queued as
 * kv_secondary_tier_complete_job() queues), keeping @t to drop the tier's
 * late answer. Collects its cancellable in @cancellables. */
static void
expire_one_locked (KvSecondaryTierPrivate  *priv,
                   TrackedJob              *t,
                   gboolean                 at_deadline,
                   GPtrArray              **cancellables)
{
  t->state = TRACKED_EXPIRED;
  g_atomic_int_add (&priv->n_in_flight, -1);
  g_atomic_int_inc (&priv->n_unanswered);
  if (at_deadline)
    priv->n_expired++;
  t->expired_result = kv_job_result_new (t->id, FALSE);
  g_ptr_array_add (priv->finished, kv_job_result_ref (t->expired_result));
  g_atomic_int_inc (&priv->n_queued);
  if (t->is_load)
    add_failed_load_locked (priv, t->job, t->expired_result);
  if (t->cancellable != NULL)
    {
      if (*cancellables == NULL)
        *cancellables = g_ptr_array_new_with_free_func (g_object_unref);
      g_ptr_array_add (*cancellables, g_object_ref (t->cancellable));
    }
}

/* Reports every tracked job past its deadline failed (all of them with
 * @all, at shutdown, those without a deadline included), exactly once,
 * through the same queue as kv_secondary_tier_complete_job(); fails an
 * overdue probe. Any thread: the watchdog's, or the owner's with a manual
 * clock. */
static void
expire_jobs (KvSecondaryTier *self,
             gboolean         all)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  g_autoptr(GPtrArray) cancellables = NULL;
  KvSecondaryTierQueuedFunc func = NULL;
  gpointer user_data = NULL;
  gboolean probe_failed = FALSE;
  guint n_expired = 0;
  gint64 now = all ? G_MAXINT64 : kv_clock_get_time (priv->clock);

  g_mutex_lock (&priv->lock);
  while (priv->by_deadline.head != NULL)
    {
      TrackedJob *t = priv->by_deadline.head->data;

      if (t->deadline > now)
        break;
      g_queue_unlink (&priv->by_deadline, &t->link);
      expire_one_locked (priv, t, !all, &cancellables);
      n_expired++;
    }
  /* Jobs without a deadline are in no queue: at shutdown, find them in
   * the table, or a job the tier dropped would never be reported. */
  if (all && g_atomic_int_get (&priv->n_in_flight) > 0)
    {
      GHashTableIter iter;
      TrackedJob *t;

      g_hash_table_iter_init (&iter, priv->tracked);
      while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &t))
        if (t->state == TRACKED_IN_FLIGHT)
          {
            expire_one_locked (priv, t, FALSE, &cancellables);
            n_expired++;
          }
    }
  if (priv->probe_id != 0 && priv->probe_deadline <= now)
    {
      priv->probe_id = 0;
      probe_failed = TRUE;
      if (priv->probe_cancellable != NULL)
        {
          if (cancellables == NULL)
            cancellables = g_ptr_array_new_with_free_func (g_object_unref);
          g_ptr_array_add (cancellables, g_steal_pointer (&priv->probe_cancellable));
        }
    }
  if (n_expired > 0 || probe_failed)
    g_cond_broadcast (&priv->jobs_cond);
  if (n_expired > 0)
    func = take_queued_func_locked (priv, &user_data);
  schedule_watchdog_locked (priv);
  g_mutex_unlock (&priv->lock);

  if (n_expired == 0 && !probe_failed)
    return;

  /* Counted now, not when the tier answers: the breaker must open within
   * the deadline even if the tier never answers. */
  for (guint i = 0; !all && i < n_expired; i++)
    kv_circuit_breaker_record_failure (priv->breaker);
  if (probe_failed)
    kv_circuit_breaker_end_probe (priv->breaker, FALSE);
  if (n_expired > 0)
    g_debug ("Tier %s: %u jobs failed %s", priv->tier_type, n_expired,
             all ? "at shutdown (never reported)" : "at their deadline");

  /* The tier's handlers (abort the I/O, do not publish) run here, with no
   * kvtier lock held: they may report the job, which is then late. */
  for (guint i = 0; cancellables != NULL && i < cancellables->len; i++)
    g_cancellable_cancel (cancellables->pdata[i]);

  notify_queued (priv, func, user_data);
  wake_completion_context (priv);
}

static void
watchdog_fired (gpointer user_data)
{
  expire_jobs (user_data, FALSE);
}

/* Owner thread: starts tracking @job before the tier sees it, so that a
 * completion from a worker during submit finds it. */
static TrackedJob *
track_job (KvSecondaryTier *self,
           KvTransferJob   *job,
           gboolean         is_load)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  TrackedJob *t = g_new0 (TrackedJob, 1);

  t->job = kv_transfer_job_ref (job);
  t->id = kv_transfer_job_get_id (job);
  t->is_load = is_load;
  t->state = TRACKED_IN_FLIGHT;
  t->link.data = t;

  g_mutex_lock (&priv->lock);
  if (g_hash_table_contains (priv->tracked, &t->id))
    {
      g_mutex_unlock (&priv->lock);
      g_warning ("Tier %s: job %" G_GUINT64_FORMAT " submitted while a job with that id is "
                 "in flight; its deadline is not watched", priv->tier_type, t->id);
      tracked_free (t);
      return NULL;
    }
  t->deadline = priv->deadline_ms > 0 ?
                kv_clock_get_time (priv->clock) + (gint64) priv->deadline_ms * 1000 :
                G_MAXINT64;
  g_hash_table_insert (priv->tracked, &t->id, t);
  g_atomic_int_inc (&priv->n_in_flight);
  if (t->deadline != G_MAXINT64)
    {
      GList *after = priv->by_deadline.tail;

      /* Nearly always appended: deadline-ms rarely changes. */
      while (after != NULL && ((TrackedJob *) after->data)->deadline > t->deadline)
        after = after->prev;
      if (after == NULL)
        g_queue_push_head_link (&priv->by_deadline, &t->link);
      else
        g_queue_insert_after_link (&priv->by_deadline, after, &t->link);
      if (priv->by_deadline.head == &t->link)
        schedule_watchdog_locked (priv);
    }
  g_mutex_unlock (&priv->lock);
  return t;
}

/* Owner thread: the tier refused @t's job at submit; forget it unless the
 * tier already reported it (a tier bug the manager will log). */
static void
untrack_job (KvSecondaryTier *self,
             TrackedJob      *t)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  gboolean forget = FALSE;

  g_mutex_lock (&priv->lock);
  if (g_hash_table_lookup (priv->tracked, &t->id) == t && t->state == TRACKED_IN_FLIGHT)
    {
      g_hash_table_remove (priv->tracked, &t->id);
      if (t->deadline != G_MAXINT64)
        g_queue_unlink (&priv->by_deadline, &t->link);
      g_atomic_int_add (&priv->n_in_flight, -1);
      g_cond_broadcast (&priv->jobs_cond);
      forget = TRUE;
    }
  g_mutex_unlock (&priv->lock);
  if (forget)
    tracked_free (t);
}

/* Owner thread: whether the breaker lets work reach the tier; starts a
 * probe (or half-opens) when one is due. */
static void
maybe_probe (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  KvSecondaryTierClass *klass = KV_SECONDARY_TIER_GET_CLASS (self);
  g_autoptr(GError) error = NULL;
  g_autoptr(GCancellable) cancellable = NULL;
  guint64 id;

  if (G_LIKELY (kv_circuit_breaker_allows_requests (priv->breaker)) || priv->closed)
    return;
  if (klass->probe == NULL)
    {
      /* No cheap check: let the next jobs decide. */
      kv_circuit_breaker_half_open (priv->breaker);
      return;
    }
  if (!kv_circuit_breaker_start_probe (priv->breaker))
    return;

  cancellable = g_cancellable_new ();
  g_mutex_lock (&priv->lock);
  id = ++priv->next_probe_id;
  priv->probe_id = id;
  g_set_object (&priv->probe_cancellable, cancellable);
  priv->probe_deadline = priv->deadline_ms > 0 ?
                         kv_clock_get_time (priv->clock) + (gint64) priv->deadline_ms * 1000 :
                         G_MAXINT64;
  schedule_watchdog_locked (priv);
  g_mutex_unlock (&priv->lock);

  if (!klass->probe (self, id, cancellable, &error))
    {
      g_debug ("Tier %s: probe could not start: %s", priv->tier_type,
               error != NULL ? error->message : "no error set");
      kv_secondary_tier_complete_probe (self, id, FALSE);
    }
}

/* Owner thread: turns the failed loads queued since the last call into
 * the requests' negative caches. */
static void
apply_failed_loads (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  g_autoptr(GPtrArray) failed = NULL;

  g_mutex_lock (&priv->lock);
  if (priv->failed_loads->len > 0)
    {
      failed = priv->failed_loads;
      priv->failed_loads = g_ptr_array_new_with_free_func ((GDestroyNotify) failed_load_free);
    }
  g_mutex_unlock (&priv->lock);

  for (guint i = 0; failed != NULL && i < failed->len; i++)
    {
      FailedLoad *f = failed->pdata[i];
      KvRequest *request = kv_transfer_job_get_request (f->job);
      guint n_keys = 0, n_ok = 0;
      KvKey * const *keys = kv_transfer_job_get_keys (f->job, &n_keys);
      KvKey * const *ok = kv_job_result_get_successful_keys (f->result, &n_ok);
      GHashTable *set = kv_request_get_state (request, &priv->negative_tag);

      if (set == NULL)
        {
          set = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                       (GDestroyNotify) kv_key_unref, NULL);
          kv_request_set_state (request, &priv->negative_tag, set,
                                (GDestroyNotify) g_hash_table_unref);
        }
      /* Every key that did not land, not only the one that broke. */
      for (guint k = 0; k < n_keys; k++)
        {
          gboolean landed = FALSE;

          for (guint j = 0; j < n_ok && !landed; j++)
            landed = kv_key_equal (ok[j], keys[k]);
          if (!landed && !g_hash_table_contains (set, keys[k]))
            g_hash_table_add (set, kv_key_ref (keys[k]));
        }
      priv->has_negatives = TRUE;
    }
}

/**
 * kv_secondary_tier_get_tier_type:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:tier-type]. Any thread.
 *
 * Returns: (transfer none): the tier type name
 */
const char *
kv_secondary_tier_get_tier_type (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->tier_type;
}

/**
 * kv_secondary_tier_get_primary:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:primary]. Any thread.
 *
 * Returns: (transfer none) (nullable): the primary slot memory
 */
KvHostBuffer *
kv_secondary_tier_get_primary (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->primary;
}

/**
 * kv_secondary_tier_get_block_size_bytes:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:block-size-bytes]. Any thread.
 *
 * Returns: the size of one chunk in bytes, 0 without a primary buffer
 */
gsize
kv_secondary_tier_get_block_size_bytes (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), 0);

  priv = kv_secondary_tier_get_instance_private (self);
  if (priv->primary == NULL)
    return 0;
  return kv_host_buffer_get_slot_size (priv->primary);
}

/**
 * kv_secondary_tier_get_medium:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:medium]. Any thread.
 *
 * Returns: where the tier keeps its chunks
 */
KvMedium
kv_secondary_tier_get_medium (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), KV_MEDIUM_UNSPECIFIED);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->medium;
}

/**
 * kv_secondary_tier_get_lazy_promotion_allocation:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:lazy-promotion-allocation]. Any thread.
 *
 * Returns: whether the tier reserves its loads' primary slots as it starts
 *   them
 */
gboolean
kv_secondary_tier_get_lazy_promotion_allocation (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->lazy_promotion_allocation;
}

/**
 * kv_secondary_tier_reserve_load_slots:
 * @self: a tier with [property@Kv.SecondaryTier:lazy-promotion-allocation]
 * @job: a load job the tier received in
 *   [vfunc@Kv.SecondaryTier.submit_load]
 * @error: return location for an error
 *
 * Reserves the primary slots of @job now, as the tier starts the load. A
 * lazy tier receives its loads without slots (every chunk id is
 * %G_MAXUINT32) and must call this before it reads
 * [method@Kv.TransferJob.get_chunk_ids] or touches the primary buffer.
 * On success the job's keys and chunk ids are final: the keys are those
 * still to load (a chunk that reached the primary tier meanwhile is
 * dropped from the job, which may end with no key at all), each with its
 * slot; when only part of the job fits, the longest prefix of its keys
 * that does (the request's lookups of the others answer
 * %KV_LOOKUP_RESULT_MISS). On failure (no room at all) the job has no key
 * left: the tier reports it (any result: nothing was allocated) and the
 * request's lookups of its chunks answer %KV_LOOKUP_RESULT_MISS, so it
 * recomputes them.
 *
 * Idempotent: a job that has its slots (every job of a tier that is not
 * lazy) returns %TRUE at once. Owner thread only, before the tier hands
 * the job to another thread.
 *
 * Returns: %TRUE when the job has its slots; %FALSE with
 *   %KV_TIER_ERROR_NO_SPACE (the primary tier is full),
 *   %KV_TIER_ERROR_NOT_FOUND (the job is not in flight any more, e.g.
 *   failed at its deadline) or %KV_TIER_ERROR_CLOSED (no manager)
 */
gboolean
kv_secondary_tier_reserve_load_slots (KvSecondaryTier  *self,
                                      KvTransferJob    *job,
                                      GError          **error)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);
  g_return_val_if_fail (job != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  if (priv->reserve_func == NULL)
    {
      if (!kv_transfer_job_is_promotion (job))
        return TRUE;
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                   "Tier '%s' is not part of a tiering manager: nothing can reserve "
                   "primary slots for load job %" G_GUINT64_FORMAT,
                   priv->tier_type, kv_transfer_job_get_id (job));
      return FALSE;
    }
  return priv->reserve_func (priv->reserve_data, self, job, error);
}

/**
 * kv_secondary_tier_get_locality:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:locality]. Any thread.
 *
 * Returns: how far the tier's storage is
 */
KvLocality
kv_secondary_tier_get_locality (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), KV_LOCALITY_UNSPECIFIED);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->locality;
}

/**
 * kv_secondary_tier_get_backpressure_detector:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:backpressure-detector]. Any thread.
 *
 * Returns: (transfer none) (nullable): the detector
 */
KvBackpressureDetector *
kv_secondary_tier_get_backpressure_detector (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->detector;
}

/**
 * kv_secondary_tier_lookup:
 * @self: a tier
 * @key: the chunk to look for
 * @request: the request the lookup is made for; the same object for every
 *   lookup of a request within one step
 *
 * Whether @key is stored in the tier. Owner thread only; must not block:
 * a tier that needs I/O to know answers %KV_LOOKUP_RESULT_RETRY and finds
 * out in the background. The vfunc is required.
 *
 * A tier answers hit, miss or retry only: the invoker reads
 * %KV_LOOKUP_RESULT_HIT_PENDING as %KV_LOOKUP_RESULT_RETRY and a value
 * outside [enum@Kv.LookupResult] as %KV_LOOKUP_RESULT_MISS. A tier that
 * was shut down answers %KV_LOOKUP_RESULT_MISS without being asked.
 *
 * Returns: %KV_LOOKUP_RESULT_HIT, %KV_LOOKUP_RESULT_MISS or
 *   %KV_LOOKUP_RESULT_RETRY
 */
KvLookupResult
kv_secondary_tier_lookup (KvSecondaryTier *self,
                          KvKey           *key,
                          KvRequest       *request)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;
  KvLookupResult result;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (key != NULL, KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (KV_IS_REQUEST (request), KV_LOOKUP_RESULT_MISS);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);

  if (priv->closed)
    return KV_LOOKUP_RESULT_MISS;

  /* An open breaker answers for the tier. Read before a probe starts: a
   * fast probe could close the breaker before this answer, which would
   * then depend on the tier's speed. */
  if (G_UNLIKELY (!kv_circuit_breaker_allows_requests (priv->breaker)))
    {
      maybe_probe (self);
      return KV_LOOKUP_RESULT_MISS;
    }

  /* A key whose load failed for this request is not offered to it again
   * (reference §8.7, vLLM #49176). */
  if (G_UNLIKELY (priv->has_negatives))
    {
      GHashTable *negatives = kv_request_get_state (request, &priv->negative_tag);

      if (negatives != NULL && g_hash_table_contains (negatives, key))
        return KV_LOOKUP_RESULT_MISS;
    }

  if (klass->lookup == NULL)
    {
      g_critical ("%s does not implement lookup", G_OBJECT_TYPE_NAME (self));
      return KV_LOOKUP_RESULT_MISS;
    }

  result = klass->lookup (self, key, request);
  switch ((int) result)
    {
    case KV_LOOKUP_RESULT_HIT:
    case KV_LOOKUP_RESULT_MISS:
    case KV_LOOKUP_RESULT_RETRY:
      return result;

    case KV_LOOKUP_RESULT_HIT_PENDING:
      /* Only the manager knows whether a primary slot is being written. */
      g_debug ("%s.lookup answered HIT_PENDING, read as RETRY",
               G_OBJECT_TYPE_NAME (self));
      return KV_LOOKUP_RESULT_RETRY;

    default:
      g_debug ("%s.lookup answered %d, not a KvLookupResult; read as MISS",
               G_OBJECT_TYPE_NAME (self), (int) result);
      return KV_LOOKUP_RESULT_MISS;
    }
}

static gboolean
submit_job (KvSecondaryTier  *self,
            gboolean          is_load,
            KvTransferJob    *job,
            GError          **error)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  KvSecondaryTierClass *klass = KV_SECONDARY_TIER_GET_CLASS (self);
  const char *vfunc = is_load ? "submit_load" : "submit_store";
  gboolean (*func) (KvSecondaryTier *, KvTransferJob *, GError **);
  GError *local_error = NULL;
  TrackedJob *tracked;
  gboolean ret;

  if (priv->closed)
    return closed_error (self, is_load ? "load" : "store", error);

  func = is_load ? klass->submit_load : klass->submit_store;
  if (func == NULL)
    return missing_vfunc (self, vfunc, error);

  if (G_UNLIKELY (!kv_circuit_breaker_allows_requests (priv->breaker)))
    {
      /* Accepted and failed at once, without reaching the tier. */
      g_autoptr(KvJobResult) failed = kv_job_result_new (kv_transfer_job_get_id (job), FALSE);

      g_mutex_lock (&priv->lock);
      priv->n_rejected++;
      g_mutex_unlock (&priv->lock);
      kv_secondary_tier_complete_job_full (self, failed, KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT);
      return TRUE;
    }

  tracked = track_job (self, job, is_load);
  ret = func (self, job, &local_error);
  if (!ret && tracked != NULL)
    untrack_job (self, tracked);
  return check_vfunc_result (self, vfunc, ret, local_error, error);
}

/**
 * kv_secondary_tier_submit_store:
 * @self: a tier
 * @job: a store job: keys and the primary slots that hold their bytes
 * @error: return location for an error
 *
 * Starts copying the job's primary slots into the tier (a cascade). Owner
 * thread only; must not block: the tier does the copy on its own threads
 * or with asynchronous I/O. The slots stay pinned until the job is
 * reported. Keys the tier already holds may be skipped. The vfunc is
 * required.
 *
 * An accepted job is reported exactly once, success or failure, with
 * [method@Kv.SecondaryTier.complete_job] (from any thread); a refused one
 * never is. The invoker fails with %KV_TIER_ERROR_CLOSED after a
 * successful [method@Kv.SecondaryTier.shutdown], and turns a vfunc that
 * returned %FALSE without an error (an exception swallowed by a binding)
 * into %KV_TIER_ERROR_FAILED.
 *
 * Returns: %TRUE if the job was accepted, %FALSE with @error set if not
 */
gboolean
kv_secondary_tier_submit_store (KvSecondaryTier  *self,
                                KvTransferJob    *job,
                                GError          **error)
{
  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);
  g_return_val_if_fail (job != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return submit_job (self, FALSE, job, error);
}

/**
 * kv_secondary_tier_submit_load:
 * @self: a tier
 * @job: a load job: keys and the allocated, not yet readable primary
 *   slots to fill
 * @error: return location for an error
 *
 * Starts filling the job's primary slots from the tier (a promotion).
 * Owner thread only; must not block. The vfunc is required.
 *
 * An accepted job is reported exactly once with
 * [method@Kv.SecondaryTier.complete_job]; a load that landed only some
 * keys names them with [method@Kv.JobResult.set_successful_keys]. Errors
 * as for [method@Kv.SecondaryTier.submit_store].
 *
 * Returns: %TRUE if the job was accepted, %FALSE with @error set if not
 */
gboolean
kv_secondary_tier_submit_load (KvSecondaryTier  *self,
                               KvTransferJob    *job,
                               GError          **error)
{
  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);
  g_return_val_if_fail (job != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return submit_job (self, TRUE, job, error);
}

/* Settles the results that an overriding get_finished_jobs() returned
 * itself rather than through complete_job() (those were settled when they
 * were queued): an answer in time stops the job's deadline, a late one is
 * dropped from @results. */
static void
settle_returned_results (KvSecondaryTier  *self,
                         KvJobResult     **results)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  guint kept = 0;

  for (guint i = 0; results[i] != NULL; i++)
    {
      KvJobResult *result = results[i];
      guint64 id = kv_job_result_get_job_id (result);
      TrackedJob *t;
      gboolean drop = FALSE;

      g_mutex_lock (&priv->lock);
      t = g_hash_table_lookup (priv->tracked, &id);
      if (t != NULL && t->expired_result != result)
        drop = settle_locked (self, t, result, KV_COMPLETE_JOB_FLAGS_NONE);
      else
        t = NULL;
      g_mutex_unlock (&priv->lock);
      if (t != NULL)
        finish_settled (self, t, result, KV_COMPLETE_JOB_FLAGS_NONE, drop);

      if (drop)
        kv_job_result_unref (result);
      else
        results[kept++] = result;
    }
  results[kept] = NULL;
}

/* Lock held: the tier answered @t's job with @result. Takes @t out of the
 * table (finish_settled() frees it). Returns TRUE when the answer is late,
 * the deadline having reported the job already: it must be dropped. */
static gboolean
settle_locked (KvSecondaryTier    *self,
               TrackedJob         *t,
               KvJobResult        *result,
               KvCompleteJobFlags  flags)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  g_hash_table_remove (priv->tracked, &t->id);
  g_cond_broadcast (&priv->jobs_cond);
  if (t->state == TRACKED_IN_FLIGHT)
    {
      if (t->deadline != G_MAXINT64)
        g_queue_unlink (&priv->by_deadline, &t->link);
      g_atomic_int_add (&priv->n_in_flight, -1);
      if (t->is_load && !kv_job_result_get_success (result))
        add_failed_load_locked (priv, t->job, result);
      return FALSE;
    }

  priv->n_late++;
  g_atomic_int_add (&priv->n_unanswered, -1);
  /* The manager keeps the slots of this load until it hears this. */
  if (t->state == TRACKED_HELD)
    {
      g_array_append_val (priv->released, t->id);
      g_atomic_int_set (&priv->n_released, priv->released->len);
    }
  return TRUE;
}

static void
record_outcome (KvSecondaryTierPrivate *priv,
                KvJobResult            *result,
                KvCompleteJobFlags      flags)
{
  if (kv_job_result_get_success (result))
    kv_circuit_breaker_record_success (priv->breaker);
  else if (!(flags & KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT))
    kv_circuit_breaker_record_failure (priv->breaker);
}

/* No lock held: the rest of settling @t. */
static void
finish_settled (KvSecondaryTier    *self,
                TrackedJob         *t,
                KvJobResult        *result,
                KvCompleteJobFlags  flags,
                gboolean            late)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  if (late)
    g_debug ("Tier %s reported job %" G_GUINT64_FORMAT " after its deadline; dropped",
             priv->tier_type, t->id);
  else
    record_outcome (priv, result, flags);
  tracked_free (t);
}

/**
 * kv_secondary_tier_get_finished_jobs:
 * @self: a tier
 *
 * The results of the jobs finished since the last call, each job exactly
 * once. Owner thread only; must not block (the manager calls it at most
 * once per step). The default vfunc drains the queue filled by
 * [method@Kv.SecondaryTier.complete_job], so tiers that report through
 * that function need not override it. Also works after shutdown, so that
 * the jobs reported during shutdown can be collected.
 *
 * Returns: (transfer full) (array zero-terminated=1): the results,
 *   possibly none
 */
KvJobResult **
kv_secondary_tier_get_finished_jobs (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;
  KvJobResult **results;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);

  if (priv->manual_clock)
    expire_jobs (self, FALSE);
  maybe_probe (self);

  if (klass->get_finished_jobs == NULL)
    results = empty_results ();
  else
    results = klass->get_finished_jobs (self);
  if (results == NULL)
    results = empty_results ();
  else if (klass->get_finished_jobs != kv_secondary_tier_real_get_finished_jobs)
    settle_returned_results (self, results);

  apply_failed_loads (self);
  return results;
}

/**
 * kv_secondary_tier_has_pending_work:
 * @self: a tier
 *
 * Whether the engine must keep stepping for this tier even without
 * requests (jobs in flight, deferred work). Owner thread only. The default
 * vfunc returns %FALSE; so does the invoker after shutdown.
 *
 * Returns: %TRUE while the tier has work to finish
 */
gboolean
kv_secondary_tier_has_pending_work (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (priv->closed)
    return FALSE;
  /* Jobs or a probe in flight: a step must come to collect them. */
  if (g_atomic_int_get (&priv->n_in_flight) > 0 || g_atomic_int_get (&priv->n_queued) > 0)
    return TRUE;
  g_mutex_lock (&priv->lock);
  if (priv->probe_id != 0)
    {
      g_mutex_unlock (&priv->lock);
      return TRUE;
    }
  g_mutex_unlock (&priv->lock);
  if (klass->has_pending_work == NULL)
    return FALSE;

  return klass->has_pending_work (self) ? TRUE : FALSE;
}

/**
 * kv_secondary_tier_take_events:
 * @self: a tier
 *
 * Events about the tier's own storage (chunks stored or removed) since
 * the last call. Owner thread only. The default vfunc drains the queue
 * filled by [method@Kv.SecondaryTier.push_event]. Also works after
 * shutdown.
 *
 * Returns: (transfer full) (array zero-terminated=1): the events,
 *   possibly none
 */
KvEvent **
kv_secondary_tier_take_events (KvSecondaryTier *self)
{
  KvSecondaryTierClass *klass;
  KvEvent **events;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (klass->take_events == NULL)
    return empty_events ();

  events = klass->take_events (self);
  return events != NULL ? events : empty_events ();
}

/**
 * kv_secondary_tier_touch:
 * @self: a tier
 * @keys: (array length=n_keys) (transfer none): the keys used, most recent
 *   last
 * @n_keys: the number of @keys
 * @request: the request that used them
 *
 * Passes a recency hint to [vfunc@Kv.SecondaryTier.touch], with @keys as
 * a %NULL-terminated array. Owner thread only; does nothing after
 * shutdown.
 */
void
kv_secondary_tier_touch (KvSecondaryTier *self,
                         KvKey * const   *keys,
                         guint            n_keys,
                         KvRequest       *request)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;
  KvKey *stack_keys[TOUCH_STACK_KEYS + 1];
  KvKey **terminated;
  guint i;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  g_return_if_fail (KV_IS_REQUEST (request));
  for (i = 0; i < n_keys; i++)
    g_return_if_fail (keys[i] != NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (priv->closed || klass->touch == NULL)
    return;

  terminated = n_keys <= TOUCH_STACK_KEYS ? stack_keys : g_new (KvKey *, n_keys + 1);
  if (n_keys > 0)
    memcpy (terminated, keys, n_keys * sizeof (KvKey *));
  terminated[n_keys] = NULL;

  klass->touch (self, terminated, request);

  if (terminated != stack_keys)
    g_free (terminated);
}

/**
 * kv_secondary_tier_on_new_request:
 * @self: a tier
 * @request: the new request
 *
 * The tier's offload policy for @request. Owner thread only. The vfunc is
 * required. A value outside [enum@Kv.OffloadPolicy], or a tier that was
 * shut down, gives %KV_OFFLOAD_POLICY_CHUNK_LEVEL.
 *
 * Returns: %KV_OFFLOAD_POLICY_REQUEST_LEVEL to also receive the chunks the
 *   request got as prefix hits, else %KV_OFFLOAD_POLICY_CHUNK_LEVEL
 */
KvOffloadPolicy
kv_secondary_tier_on_new_request (KvSecondaryTier *self,
                                  KvRequest       *request)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;
  KvOffloadPolicy policy;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_return_val_if_fail (KV_IS_REQUEST (request), KV_OFFLOAD_POLICY_CHUNK_LEVEL);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (priv->closed)
    return KV_OFFLOAD_POLICY_CHUNK_LEVEL;

  if (klass->on_new_request == NULL)
    {
      g_critical ("%s does not implement on_new_request", G_OBJECT_TYPE_NAME (self));
      return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
    }

  policy = klass->on_new_request (self, request);
  if (policy != KV_OFFLOAD_POLICY_CHUNK_LEVEL && policy != KV_OFFLOAD_POLICY_REQUEST_LEVEL)
    {
      g_debug ("%s.on_new_request answered %d, not a KvOffloadPolicy; read as CHUNK_LEVEL",
               G_OBJECT_TYPE_NAME (self), (int) policy);
      return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
    }
  return policy;
}

/**
 * kv_secondary_tier_on_request_finished:
 * @self: a tier
 * @request: the finished request
 *
 * No submit or touch for @request will follow; its jobs may still be in
 * flight. Owner thread only. The default vfunc does nothing; the invoker
 * does nothing after shutdown.
 */
void
kv_secondary_tier_on_request_finished (KvSecondaryTier *self,
                                       KvRequest       *request)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (KV_IS_REQUEST (request));

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (!priv->closed && klass->on_request_finished != NULL)
    klass->on_request_finished (self, request);
}

/**
 * kv_secondary_tier_serve_external_requests:
 * @self: a tier
 * @parent: what the tier may ask of the manager, valid only during this
 *   call
 *
 * Serves the requests that other nodes sent to this tier. Called on the
 * owner thread once per step, before promotions are submitted; must not
 * block. The default vfunc does nothing; the invoker does nothing after
 * shutdown.
 */
void
kv_secondary_tier_serve_external_requests (KvSecondaryTier *self,
                                           KvParentManager *parent)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (KV_IS_PARENT_MANAGER (parent));

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (!priv->closed && klass->serve_external_requests != NULL)
    klass->serve_external_requests (self, parent);
}

/**
 * kv_secondary_tier_on_schedule_end:
 * @self: a tier
 * @schedule_end: the requests scheduled in the step
 *
 * The end of a step, after promotions were submitted: the place to flush
 * per-step batches. Owner thread only. The default vfunc does nothing;
 * the invoker does nothing after shutdown.
 */
void
kv_secondary_tier_on_schedule_end (KvSecondaryTier *self,
                                   KvScheduleEnd   *schedule_end)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (schedule_end != NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (priv->closed)
    return;
  maybe_probe (self);
  if (klass->on_schedule_end != NULL)
    klass->on_schedule_end (self, schedule_end);
}

/**
 * kv_secondary_tier_drain_jobs:
 * @self: a tier
 * @error: return location for an error
 *
 * Blocks until every submitted job has been reported with
 * [method@Kv.SecondaryTier.complete_job] (or failed by its deadline), so
 * that the results are available from
 * [method@Kv.SecondaryTier.get_finished_jobs]. Copies in flight are
 * finished, not aborted; jobs still queued may be cancelled, but are then
 * reported as failed. Owner thread only; the vfunc must not wait for the
 * owner thread's main context (except through
 * [property@Kv.SecondaryTier:completion-context]).
 *
 * The default vfunc is [method@Kv.SecondaryTier.wait_jobs], which a
 * deadline bounds: a tier that never answers cannot hang it. An override
 * (to flush queued work, or to wait for work of its own) should end with
 * it too. The invoker does not call the vfunc of a tier that left a job
 * unanswered past its deadline (such a tier would not answer a drain
 * either); it then only waits for the tier's jobs still in flight, which
 * their deadlines bound. Afterwards, when the tier answered everything,
 * no I/O of the tier touches primary slots; the slots of loads it left
 * unanswered stay out of use until it answers.
 *
 * After shutdown there is nothing to wait for: the invoker returns %TRUE
 * at once. It turns %FALSE without an error into %KV_TIER_ERROR_FAILED.
 *
 * Returns: %TRUE on success, %FALSE with @error set
 */
gboolean
kv_secondary_tier_drain_jobs (KvSecondaryTier  *self,
                              GError          **error)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;
  GError *local_error = NULL;
  gboolean ret;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (priv->closed)
    return TRUE;

  if (priv->manual_clock)
    expire_jobs (self, FALSE);
  if (g_atomic_int_get (&priv->n_unanswered) > 0)
    {
      g_debug ("Tier %s left %d jobs unanswered past their deadline: not calling its drain_jobs",
               priv->tier_type, g_atomic_int_get (&priv->n_unanswered));
    }
  else if (klass->drain_jobs != NULL)
    {
      ret = klass->drain_jobs (self, &local_error);
      if (!check_vfunc_result (self, "drain_jobs", ret, local_error, error))
        return FALSE;
    }

  kv_secondary_tier_wait_jobs (self);
  return TRUE;
}

/**
 * kv_secondary_tier_shutdown:
 * @self: a tier
 * @error: return location for an error
 *
 * Reports every job (as [method@Kv.SecondaryTier.drain_jobs] does), then
 * releases the tier's threads and connections. Owner thread only; may
 * block while jobs finish. The default vfunc does nothing.
 *
 * As for [method@Kv.SecondaryTier.drain_jobs], the vfunc of a tier that
 * left a job unanswered past its deadline is not called. Jobs the tier
 * never reported are reported failed here, so that each job is reported
 * exactly once.
 *
 * Once it succeeded the tier refuses jobs with %KV_TIER_ERROR_CLOSED,
 * answers lookups with %KV_LOOKUP_RESULT_MISS and ignores hints; calling
 * it again does nothing and returns %TRUE. The results and events queued
 * before still come out of [method@Kv.SecondaryTier.get_finished_jobs]
 * and [method@Kv.SecondaryTier.take_events].
 *
 * Returns: %TRUE on success, %FALSE with @error set
 */
gboolean
kv_secondary_tier_shutdown (KvSecondaryTier  *self,
                            GError          **error)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;
  GError *local_error = NULL;
  gboolean ret;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (priv->closed)
    return TRUE;

  if (priv->manual_clock)
    expire_jobs (self, FALSE);
  if (g_atomic_int_get (&priv->n_unanswered) > 0)
    {
      g_message ("Tier %s (%s) left %d jobs unanswered past their deadline; shutting down "
                 "without calling its shutdown", priv->tier_type, G_OBJECT_TYPE_NAME (self),
                 g_atomic_int_get (&priv->n_unanswered));
    }
  else if (klass->shutdown != NULL)
    {
      ret = klass->shutdown (self, &local_error);
      if (!check_vfunc_result (self, "shutdown", ret, local_error, error))
        return FALSE;
    }

  /* Exactly once: whatever the tier did not report is failed now. */
  expire_jobs (self, TRUE);
  g_mutex_lock (&priv->lock);
  priv->probe_id = 0;
  g_clear_object (&priv->probe_cancellable);
  g_mutex_unlock (&priv->lock);

  priv->closed = TRUE;
  return TRUE;
}

/* Calls the manager's queued func (if any) with no lock held, counting the
 * call so that _kv_secondary_tier_set_queued_func() can wait for it. */
static void
notify_queued (KvSecondaryTierPrivate    *priv,
               KvSecondaryTierQueuedFunc  func,
               gpointer                   user_data)
{
  if (func == NULL)
    return;

  func (user_data);

  g_mutex_lock (&priv->lock);
  if (--priv->n_queued_calls == 0)
    g_cond_broadcast (&priv->calls_cond);
  g_mutex_unlock (&priv->lock);
}

/**
 * kv_secondary_tier_complete_job:
 * @self: a tier
 * @result: the result of a job the tier accepted
 *
 * Reports a job: queues @result for [method@Kv.SecondaryTier.get_finished_jobs]
 * and wakes the manager. Each accepted job must be reported exactly once,
 * whether it succeeded or not. A failed job counts against the tier's
 * circuit breaker; see [method@Kv.SecondaryTier.complete_job_full].
 *
 * A job already failed by its deadline ([property@Kv.SecondaryTier:deadline-ms])
 * is not reported twice: @result is dropped and counted as a late
 * completion.
 *
 * Thread-safe: call it from the tier's worker threads, I/O completion
 * callbacks or the owner thread. It only queues; the manager consumes the
 * result later on the owner thread and emits
 * [signal@Kv.SecondaryTier::job-finished] there.
 */
void
kv_secondary_tier_complete_job (KvSecondaryTier *self,
                                KvJobResult     *result)
{
  kv_secondary_tier_complete_job_full (self, result, KV_COMPLETE_JOB_FLAGS_NONE);
}

/**
 * kv_secondary_tier_complete_job_full:
 * @self: a tier
 * @result: the result of a job the tier accepted
 * @flags: how to read a failure
 *
 * Reports a job as [method@Kv.SecondaryTier.complete_job] does. With
 * %KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT a failed @result does not count
 * against the circuit breaker (the chunk was missing or damaged, the disk
 * full: the tier itself is fine). Thread-safe.
 */
void
kv_secondary_tier_complete_job_full (KvSecondaryTier    *self,
                                     KvJobResult        *result,
                                     KvCompleteJobFlags  flags)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierQueuedFunc func = NULL;
  gpointer user_data = NULL;
  guint64 id;
  TrackedJob *t;
  gboolean late = FALSE;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (result != NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  id = kv_job_result_get_job_id (result);

  g_mutex_lock (&priv->lock);
  t = g_hash_table_lookup (priv->tracked, &id);
  if (t != NULL)
    late = settle_locked (self, t, result, flags);
  if (!late)
    {
      g_ptr_array_add (priv->finished, kv_job_result_ref (result));
      g_atomic_int_inc (&priv->n_queued);
    }
  if (!late || t->state == TRACKED_HELD)
    func = take_queued_func_locked (priv, &user_data);
  g_mutex_unlock (&priv->lock);

  if (t != NULL)
    finish_settled (self, t, result, flags, late);
  else
    record_outcome (priv, result, flags);

  notify_queued (priv, func, user_data);
  wake_completion_context (priv);
}

/**
 * kv_secondary_tier_push_event:
 * @self: a tier
 * @event: an event about the tier's own storage
 *
 * Queues @event for [method@Kv.SecondaryTier.take_events] and wakes the
 * manager. A tier reports events only for storage it owns (for example
 * one stored event per successful store job).
 *
 * Thread-safe, like [method@Kv.SecondaryTier.complete_job].
 */
void
kv_secondary_tier_push_event (KvSecondaryTier *self,
                              KvEvent         *event)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierQueuedFunc func;
  gpointer user_data;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (event != NULL);

  priv = kv_secondary_tier_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  g_ptr_array_add (priv->events, kv_event_ref (event));
  g_atomic_int_inc (&priv->n_events);
  func = priv->queued_func;
  user_data = priv->queued_data;
  if (func != NULL)
    priv->n_queued_calls++;
  g_mutex_unlock (&priv->lock);

  notify_queued (priv, func, user_data);
}

/* Installs (or, with func == NULL, removes) the function called after a
 * result or an event was queued. Owner thread. Waits for calls of the
 * previous function that other threads are making, so that once this
 * returns the previous user_data is no longer used and may be freed. Must
 * not be called from inside the queued func. */
void
_kv_secondary_tier_set_queued_func (KvSecondaryTier           *self,
                                    KvSecondaryTierQueuedFunc  func,
                                    gpointer                   user_data)
{
  KvSecondaryTierPrivate *priv;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  priv->queued_func = func;
  priv->queued_data = user_data;
  while (priv->n_queued_calls > 0)
    g_cond_wait (&priv->calls_cond, &priv->lock);
  g_mutex_unlock (&priv->lock);
}

void
_kv_secondary_tier_set_reserve_func (KvSecondaryTier            *self,
                                     KvSecondaryTierReserveFunc  func,
                                     gpointer                    user_data)
{
  KvSecondaryTierPrivate *priv;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  priv->reserve_func = func;
  priv->reserve_data = user_data;
}

/* Emits ::job-finished; the manager calls it on the owner thread for each
 * result it consumed. */
void
_kv_secondary_tier_emit_job_finished (KvSecondaryTier *self,
                                      KvJobResult     *result)
{
  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (result != NULL);

  g_signal_emit (self, signals[JOB_FINISHED], 0, result);
}

/* Lock-free: whether complete_job() queued results that the default
 * get_finished_jobs() has not taken yet. Any thread. */
gboolean
_kv_secondary_tier_has_queued_results (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  /* With a manual clock nothing expires by itself: let the manager call
   * get_finished_jobs(), which checks the deadlines, while jobs are in
   * flight. */
  return g_atomic_int_get (&priv->n_queued) > 0 ||
         g_atomic_int_get (&priv->n_released) > 0 ||
         (priv->manual_clock && g_atomic_int_get (&priv->n_in_flight) > 0);
}

/* See kv-secondary-tier-private.h. */
gboolean
_kv_secondary_tier_hold_slots (KvSecondaryTier *self,
                               guint64          job_id)
{
  KvSecondaryTierPrivate *priv;
  TrackedJob *t;
  gboolean held = FALSE;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  t = g_hash_table_lookup (priv->tracked, &job_id);
  if (t != NULL && t->is_load && t->state == TRACKED_EXPIRED)
    {
      t->state = TRACKED_HELD;
      held = TRUE;
    }
  g_mutex_unlock (&priv->lock);
  return held;
}

guint64 *
_kv_secondary_tier_take_released (KvSecondaryTier *self,
                                  guint           *n_ids)
{
  KvSecondaryTierPrivate *priv;
  guint64 *ids;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);
  g_return_val_if_fail (n_ids != NULL, NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  *n_ids = 0;
  if (G_LIKELY (g_atomic_int_get (&priv->n_released) == 0))
    return NULL;

  g_mutex_lock (&priv->lock);
  {
    gsize len;

    /* g_array_steal keeps the array (no cast from gchar *, which clang's
     * -Wcast-align refuses) */
    ids = g_array_steal (priv->released, &len);
    *n_ids = len;
  }
  g_atomic_int_set (&priv->n_released, 0);
  g_mutex_unlock (&priv->lock);
  return ids;
}

gboolean
_kv_secondary_tier_reject_store (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  if (G_LIKELY (kv_circuit_breaker_allows_requests (priv->breaker)))
    return FALSE;
  maybe_probe (self);
  if (kv_circuit_breaker_allows_requests (priv->breaker))
    return FALSE;
  g_mutex_lock (&priv->lock);
  priv->n_rejected++;
  g_mutex_unlock (&priv->lock);
  return TRUE;
}

/**
 * kv_secondary_tier_complete_probe:
 * @self: a tier
 * @probe_id: the id [vfunc@Kv.SecondaryTier.probe] was given
 * @healthy: whether the tier's storage answered as it should
 *
 * Reports a probe: a healthy one closes the circuit breaker, a failed one
 * keeps it open for another [property@Kv.SecondaryTier:breaker-open-ms].
 * A probe not reported within [property@Kv.SecondaryTier:deadline-ms]
 * has failed; its report is then ignored, as is any @probe_id other than
 * the one in flight. Thread-safe.
 */
void
kv_secondary_tier_complete_probe (KvSecondaryTier *self,
                                  guint64          probe_id,
                                  gboolean         healthy)
{
  KvSecondaryTierPrivate *priv;
  gboolean current = FALSE;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  if (probe_id != 0 && priv->probe_id == probe_id)
    {
      priv->probe_id = 0;
      g_clear_object (&priv->probe_cancellable);
      current = TRUE;
      g_cond_broadcast (&priv->jobs_cond);
    }
  g_mutex_unlock (&priv->lock);

  if (!current)
    return;
  kv_circuit_breaker_end_probe (priv->breaker, healthy);
  if (healthy)
    g_message ("Tier %s: probe succeeded, serving again", priv->tier_type);
  wake_completion_context (priv);
}

/**
 * kv_secondary_tier_get_job_cancellable:
 * @self: a tier
 * @job: a job the tier accepted and has not reported
 *
 * A cancellable that is cancelled when @job passes its deadline (or when
 * the tier shuts down without having reported it). Pass it to the job's
 * I/O (GIO calls take it as they are), or connect to
 * [signal@Gio.Cancellable::cancelled] to abort it; the handler runs on the
 * watchdog's thread (so JavaScript tiers only pass it to GIO calls, whose
 * callbacks come back on the main context). A store cancelled this way
 * must not be published: the manager has released its slots. Any thread.
 *
 * Returns: (transfer full) (nullable): the job's cancellable, or %NULL
 *   when @job is not in flight (already reported, or not submitted through
 *   [method@Kv.SecondaryTier.submit_store] or
 *   [method@Kv.SecondaryTier.submit_load])
 */
GCancellable *
kv_secondary_tier_get_job_cancellable (KvSecondaryTier *self,
                                       KvTransferJob   *job)
{
  KvSecondaryTierPrivate *priv;
  GCancellable *cancellable = NULL;
  guint64 id;
  TrackedJob *t;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);
  g_return_val_if_fail (job != NULL, NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  id = kv_transfer_job_get_id (job);
  g_mutex_lock (&priv->lock);
  t = g_hash_table_lookup (priv->tracked, &id);
  if (t != NULL)
    {
      if (t->cancellable == NULL)
        {
          t->cancellable = g_cancellable_new ();
          /* no handler can be connected yet: nothing runs under the lock */
          if (t->state != TRACKED_IN_FLIGHT)
            g_cancellable_cancel (t->cancellable);
        }
      cancellable = g_object_ref (t->cancellable);
    }
  g_mutex_unlock (&priv->lock);
  return cancellable;
}

/**
 * kv_secondary_tier_wait_jobs:
 * @self: a tier
 *
 * Blocks until every job accepted through the submit invokers was
 * reported by the tier or failed by its deadline, and no probe is in
 * flight. With [property@Kv.SecondaryTier:completion-context] set (a
 * JavaScript tier), iterates that context meanwhile, since that is where
 * the tier's completions run; else waits on a condition, woken by
 * [method@Kv.SecondaryTier.complete_job] and by the watchdog.
 *
 * This is the default [vfunc@Kv.SecondaryTier.drain_jobs]; an override
 * calls it to wait. With [property@Kv.SecondaryTier:deadline-ms] set it
 * returns within the deadline even if the tier never answers; without
 * one it waits for the tier. Owner thread only.
 */
void
kv_secondary_tier_wait_jobs (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  for (;;)
    {
      gboolean iterate;

      if (priv->manual_clock)
        expire_jobs (self, FALSE);

      g_mutex_lock (&priv->lock);
      if (g_atomic_int_get (&priv->n_in_flight) == 0 && priv->probe_id == 0)
        {
          g_mutex_unlock (&priv->lock);
          return;
        }
      iterate = priv->completion_context != NULL &&
                g_main_context_acquire (priv->completion_context);
      if (!iterate)
        {
          /* A manual clock moves on other threads without telling: look
           * again now and then. */
          if (priv->manual_clock)
            g_cond_wait_until (&priv->jobs_cond, &priv->lock,
                               g_get_monotonic_time () + G_USEC_PER_SEC / 20);
          else
            g_cond_wait (&priv->jobs_cond, &priv->lock);
        }
      g_mutex_unlock (&priv->lock);

      if (iterate)
        {
          g_main_context_iteration (priv->completion_context, TRUE);
          g_main_context_release (priv->completion_context);
        }
    }
}

/**
 * kv_secondary_tier_get_n_jobs_in_flight:
 * @self: a tier
 *
 * Counts the jobs accepted through the submit invokers that the tier has
 * not reported and whose deadline has not passed. Any thread.
 *
 * Returns: the number of jobs in flight
 */
guint
kv_secondary_tier_get_n_jobs_in_flight (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), 0);

  priv = kv_secondary_tier_get_instance_private (self);
  return (guint) g_atomic_int_get (&priv->n_in_flight);
}

/**
 * kv_secondary_tier_get_n_expired_jobs:
 * @self: a tier
 *
 * Counts the jobs reported failed at their deadline since the tier was
 * made (`kvtier:tier_deadline_failures`). Any thread.
 *
 * Returns: the number of jobs failed by their deadline
 */
guint64
kv_secondary_tier_get_n_expired_jobs (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  guint64 n;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), 0);

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  n = priv->n_expired;
  g_mutex_unlock (&priv->lock);
  return n;
}

/**
 * kv_secondary_tier_get_n_late_completions:
 * @self: a tier
 *
 * Counts the reports the tier made after the job's deadline had failed
 * it, all dropped (`kvtier:tier_late_completions`). Any thread.
 *
 * Returns: the number of late completions
 */
guint64
kv_secondary_tier_get_n_late_completions (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  guint64 n;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), 0);

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  n = priv->n_late;
  g_mutex_unlock (&priv->lock);
  return n;
}

/**
 * kv_secondary_tier_get_clock:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:clock]. Any thread.
 *
 * Returns: (transfer none): the clock of deadlines and of the breaker
 */
KvClock *
kv_secondary_tier_get_clock (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->clock != NULL ? priv->clock : kv_clock_get_default ();
}

/**
 * kv_secondary_tier_get_deadline_ms:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:deadline-ms]. Any thread.
 *
 * Returns: the deadline of a job in milliseconds, 0 for none
 */
guint
kv_secondary_tier_get_deadline_ms (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  guint value;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), 0);

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  value = priv->deadline_ms;
  g_mutex_unlock (&priv->lock);
  return value;
}

/**
 * kv_secondary_tier_set_deadline_ms:
 * @self: a tier
 * @deadline_ms: the deadline of a job in milliseconds, 0 for none
 *
 * Sets [property@Kv.SecondaryTier:deadline-ms] for the jobs submitted
 * from now on. Any thread.
 */
void
kv_secondary_tier_set_deadline_ms (KvSecondaryTier *self,
                                   guint            deadline_ms)
{
  KvSecondaryTierPrivate *priv;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  priv->deadline_ms = deadline_ms;
  g_mutex_unlock (&priv->lock);
}

/**
 * kv_secondary_tier_get_circuit_breaker:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:circuit-breaker]. Any thread.
 *
 * Returns: (transfer none): the tier's circuit breaker
 */
KvCircuitBreaker *
kv_secondary_tier_get_circuit_breaker (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->breaker;
}

static const char *const tier_label_names[] = { "tier", NULL };

static const struct {
  const char *name;
  const char *doc;
} inherited_metrics[] = {
  { "kvtier:tier_deadline_failures",
    "Jobs a tier had not reported by their deadline, reported failed" },
  { "kvtier:tier_late_completions",
    "Reports of jobs already failed by their deadline, dropped" },
  { "kvtier:tier_breaker_rejected_jobs",
    "Jobs failed at once or not made while the tier's circuit breaker was open" },
};

/**
 * kv_secondary_tier_register_metrics:
 * @self: a tier
 * @registry: the registry to add definitions to
 * @error: return location for an error
 *
 * Adds the definitions of the tier's own metrics (those its
 * [vfunc@Kv.SecondaryTier.get_stats] reports) to @registry, as vLLM's
 * `build_metric_definitions`. Owner thread only. The default vfunc adds
 * nothing; the invoker first adds the counters every tier inherits (see
 * [method@Kv.SecondaryTier.get_stats]) unless @registry has them.
 *
 * Returns: %TRUE on success, %FALSE with @error set (for example when a
 *   name is already defined)
 */
gboolean
kv_secondary_tier_register_metrics (KvSecondaryTier   *self,
                                    KvMetricRegistry  *registry,
                                    GError           **error)
{
  KvSecondaryTierClass *klass;
  GError *local_error = NULL;
  gboolean ret;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (registry), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  /* The counters every tier inherits, once per registry. */
  for (guint i = 0; i < G_N_ELEMENTS (inherited_metrics); i++)
    if (!kv_metric_registry_has_metric (registry, inherited_metrics[i].name) &&
        !kv_metric_registry_add_counter (registry, inherited_metrics[i].name,
                                         inherited_metrics[i].doc, tier_label_names, error))
      return FALSE;

  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (klass->register_metrics == NULL)
    return TRUE;
  ret = klass->register_metrics (self, registry, &local_error);
  return check_vfunc_result (self, "register_metrics", ret, local_error, error);
}

/**
 * kv_secondary_tier_get_stats:
 * @self: a tier
 *
 * Takes the tier's own metrics recorded since the last call (return and
 * reset). Owner thread only; the manager aggregates them into
 * [method@Kv.TieringManager.get_stats]. The default vfunc returns %NULL;
 * the invoker adds the counters every tier inherits, labelled with
 * [property@Kv.SecondaryTier:tier-type], when they moved:
 * `kvtier:tier_deadline_failures`, `kvtier:tier_late_completions` and
 * `kvtier:tier_breaker_rejected_jobs`.
 *
 * Returns: (transfer full) (nullable): the tier's metrics, or %NULL when it
 *   has none
 */
KvStats *
kv_secondary_tier_get_stats (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierClass *klass;
  KvStats *stats;
  guint64 expired, late, rejected;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  stats = klass->get_stats != NULL ? klass->get_stats (self) : NULL;

  g_mutex_lock (&priv->lock);
  expired = priv->n_expired - priv->reported_expired;
  late = priv->n_late - priv->reported_late;
  rejected = priv->n_rejected - priv->reported_rejected;
  priv->reported_expired = priv->n_expired;
  priv->reported_late = priv->n_late;
  priv->reported_rejected = priv->n_rejected;
  g_mutex_unlock (&priv->lock);

  if (expired + late + rejected > 0)
    {
      const char *labels[] = { priv->tier_type, NULL };

      if (stats == NULL)
        stats = kv_stats_new ();
      if (expired > 0)
        kv_stats_increase_counter (stats, "kvtier:tier_deadline_failures", expired, labels);
      if (late > 0)
        kv_stats_increase_counter (stats, "kvtier:tier_late_completions", late, labels);
      if (rejected > 0)
        kv_stats_increase_counter (stats, "kvtier:tier_breaker_rejected_jobs", rejected, labels);
    }
  return stats;
}
