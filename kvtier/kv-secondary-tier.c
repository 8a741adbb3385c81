/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-secondary-tier.h"
#include "kv-secondary-tier-private.h"
#include "kv-circuit-breaker-private.h"
#include "kv-metric-registry-private.h"

#include <string.h>

#include "kv-enums.h"
#include "kv-job-tracker-private.h"
#include "kv-negative-cache-private.h"
#include "kv-result-queue-private.h"

/* The base class of every tier: the GObject, its properties and the
 * invokers of its vfuncs, which check arguments and keep every tier live
 * (deadlines, breaker, negative cache) through three rooms with their own
 * locks: kv-job-tracker.c (jobs between submit and report, the probe,
 * slots held after a deadline), kv-result-queue.c (what a tier reports,
 * on its way to the manager) and kv-negative-cache.c (misses of failed
 * loads). Longer than ~1,500 lines because it is the public contract of a
 * tier: most of it is the documentation of its 18 properties and of each
 * invoker, which gi-docgen and the bindings read from here. */

/* Keys handed to touch() are copied into a NULL-terminated array for the
 * vfunc; up to this many go on the stack. */
#define TOUCH_STACK_KEYS 64

typedef struct
{
  char                   *tier_type;
  char                   *metric_label;   /* guarded by lock; NULL: tier_type */
  gboolean                every_series_sent; /* owner thread: get_stats */
  KvHostBuffer           *primary;
  KvBackpressureDetector *detector;
  KvLocality              locality;
  KvMedium                medium;
  gboolean                lazy_promotion_allocation;
  gboolean                accepts_cascaded_stores;
  gboolean                can_cancel_stores;
  gboolean                enable_events;
  /* owner thread: the tier's existence cache, told about failed loads */
  KvAsyncLookup          *async_lookup;
  /* the misses of failed loads */
  KvNegativeCache        *negatives;
  /* the tier's own counters, reported by get_stats */
  KvCounterSet           *counters;

  /* Owner thread: the manager's reservation of lazy promotions. */
  KvSecondaryTierReserveFunc reserve_func;
  gpointer                reserve_data;

  /* Owner thread only: set once shutdown() succeeded. */
  gboolean                closed;

  /* Filled from any thread by complete_job() / push_event(), drained on
   * the owner thread by the default get_finished_jobs() / take_events(). */
  KvResultQueue          *queue;

  /* Inherited liveness: deadlines (the jobs between submit and report),
   * breaker. */
  KvJobTracker           *jobs;
  KvClock                *clock;
  KvCircuitBreaker       *breaker;
  GMainContext           *completion_context;

  GMutex                  lock;           /* metric_label */
  /* owner thread: the totals get_stats reported last */
  guint64                 reported_expired;
  guint64                 reported_late;
  guint64                 reported_rejected;
  guint64                 reported_trips;
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
  PROP_ENABLE_EVENTS,
  PROP_ASYNC_LOOKUP,
  PROP_ACCEPTS_CASCADED_STORES,
  PROP_CAN_CANCEL_STORES,
  PROP_METRIC_LABEL,
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

static KvEvent **
empty_events (void)
{
  return g_new0 (KvEvent *, 1);
}

static KvJobResult **
kv_secondary_tier_real_get_finished_jobs (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  return _kv_result_queue_take (priv->queue);
}

static KvEvent **
kv_secondary_tier_real_take_events (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  return _kv_result_queue_take_events (priv->queue);
}

/* Without an async lookup a tier must answer lookups itself: the
 * invoker's "does not implement lookup" for a class that set none. */
static KvLookupResult
kv_secondary_tier_real_lookup (KvSecondaryTier *self,
                               KvKey           *key,
                               KvRequest       *request)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  if (priv->async_lookup != NULL)
    return kv_async_lookup_lookup (priv->async_lookup, key, request);
  g_critical ("%s does not implement lookup", G_OBJECT_TYPE_NAME (self));
  return KV_LOOKUP_RESULT_MISS;
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

static gboolean
kv_secondary_tier_real_drain_jobs (KvSecondaryTier  *self,
                                   GError          **error)
{
  kv_secondary_tier_wait_jobs (self);
  return TRUE;
}

/* "tier 1:redis": what the tier's breaker messages name. */
static void
name_breaker (KvSecondaryTier *self)
{
  g_autofree char *label = kv_secondary_tier_dup_metric_label (self);
  g_autofree char *name = g_strdup_printf ("tier %s", label);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  kv_circuit_breaker_set_name (priv->breaker, name);
}

/* Type qdata set on a tier class and its ancestors once an instance was
 * constructed: after that, a class statement
 * (kv_secondary_tier_type_set_*()) would reach only later instances. */
static GQuark
instantiated_quark (void)
{
  return g_quark_from_static_string ("kv-secondary-tier-instantiated");
}

static void
mark_instantiated (GType type)
{
  for (; type != KV_TYPE_SECONDARY_TIER; type = g_type_parent (type))
    {
      if (g_type_get_qdata (type, instantiated_quark ()) != NULL)
        break;          /* so are its ancestors */
      g_type_set_qdata (type, instantiated_quark (), GINT_TO_POINTER (TRUE));
    }
}

static void
kv_secondary_tier_constructed (GObject *object)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  G_OBJECT_CLASS (kv_secondary_tier_parent_class)->constructed (object);

  mark_instantiated (G_OBJECT_TYPE (self));
  if (priv->tier_type == NULL)
    priv->tier_type = g_strdup (G_OBJECT_TYPE_NAME (self));
  if (priv->medium == KV_MEDIUM_UNSPECIFIED)
    priv->medium = KV_SECONDARY_TIER_GET_CLASS (self)->medium;
  if (KV_SECONDARY_TIER_GET_CLASS (self)->lazy_promotion_allocation)
    priv->lazy_promotion_allocation = TRUE;
  /* class-level statements: an instance may narrow them, never widen */
  if (!KV_SECONDARY_TIER_GET_CLASS (self)->accepts_cascaded_stores)
    priv->accepts_cascaded_stores = FALSE;
  if (!KV_SECONDARY_TIER_GET_CLASS (self)->can_cancel_stores)
    priv->can_cancel_stores = FALSE;
  if (priv->locality == KV_LOCALITY_UNSPECIFIED)
    priv->locality = KV_SECONDARY_TIER_GET_CLASS (self)->locality;
  if (priv->clock == NULL)
    priv->clock = g_object_ref (kv_clock_get_default ());
  g_object_set (priv->breaker, "clock", priv->clock, NULL);
  name_breaker (self);
  _kv_job_tracker_start (priv->jobs, priv->clock, watchdog_fired, self);
}

static void
kv_secondary_tier_dispose (GObject *object)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  /* Only drop references: dispose never calls vfuncs (bindings refuse
   * calls made during garbage collection). The async lookup's workers are
   * joined here, while the subclass's instance they check with is still
   * whole (its dispose has run, its finalize has not), rather than
   * whenever the lookup's last reference goes. */
  g_clear_object (&priv->detector);
  g_clear_object (&priv->primary);
  if (priv->async_lookup != NULL)
    kv_async_lookup_shutdown (priv->async_lookup);
  g_clear_object (&priv->async_lookup);

  G_OBJECT_CLASS (kv_secondary_tier_parent_class)->dispose (object);
}

static void
kv_secondary_tier_finalize (GObject *object)
{
  KvSecondaryTier *self = KV_SECONDARY_TIER (object);
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);

  /* No watchdog call runs past this point; whatever nobody took is
   * dropped with the tier. */
  g_clear_pointer (&priv->jobs, _kv_job_tracker_free);
  g_clear_pointer (&priv->negatives, _kv_negative_cache_free);
  g_clear_pointer (&priv->completion_context, g_main_context_unref);
  g_clear_object (&priv->breaker);
  g_clear_object (&priv->clock);
  g_clear_pointer (&priv->queue, _kv_result_queue_free);
  g_clear_pointer (&priv->tier_type, g_free);
  g_clear_pointer (&priv->counters, kv_counter_set_unref);
  g_clear_pointer (&priv->metric_label, g_free);
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

    case PROP_ENABLE_EVENTS:
      g_value_set_boolean (value, priv->enable_events);
      break;

    case PROP_ACCEPTS_CASCADED_STORES:
      g_value_set_boolean (value, priv->accepts_cascaded_stores);
      break;

    case PROP_CAN_CANCEL_STORES:
      g_value_set_boolean (value, priv->can_cancel_stores);
      break;

    case PROP_ASYNC_LOOKUP:
      g_value_set_object (value, priv->async_lookup);
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

    case PROP_METRIC_LABEL:
      g_value_take_string (value, kv_secondary_tier_dup_metric_label (self));
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

    case PROP_ENABLE_EVENTS:
      priv->enable_events = g_value_get_boolean (value);
      break;

    case PROP_ACCEPTS_CASCADED_STORES:
      priv->accepts_cascaded_stores = g_value_get_boolean (value);
      break;

    case PROP_CAN_CANCEL_STORES:
      priv->can_cancel_stores = g_value_get_boolean (value);
      break;

    case PROP_ASYNC_LOOKUP:
      kv_secondary_tier_set_async_lookup (self, g_value_get_object (value));
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

    case PROP_METRIC_LABEL:
      kv_secondary_tier_set_metric_label (self, g_value_get_string (value));
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

  klass->lookup = kv_secondary_tier_real_lookup;
  klass->get_finished_jobs = kv_secondary_tier_real_get_finished_jobs;
  /* inherited by every subclass's class structure; a tier that stores
   * nothing of its own clears it in its class_init */
  klass->accepts_cascaded_stores = TRUE;
  klass->can_cancel_stores = TRUE;
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
    g_param_spec_string ("tier-type", NULL,
                         "The name the tier's type is registered under, in metric labels and log messages",
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
    g_param_spec_object ("primary", NULL,
                         "The primary tier's slot memory",
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
    g_param_spec_object ("backpressure-detector", NULL,
                         "Tells the manager when the tier cannot keep up with stores (none: no store is dropped)",
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
    g_param_spec_enum ("locality", NULL,
                       "How far the tier's storage is from this process",
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
    g_param_spec_enum ("medium", NULL,
                       "Where the tier keeps its chunks",
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
   * C set it in `class_init`; a class written in Python or JavaScript
   * states it with
   * [func@Kv.SecondaryTier.type_set_lazy_promotion_allocation], or an
   * instance passes this property).
   */
  properties[PROP_LAZY_PROMOTION_ALLOCATION] =
    g_param_spec_boolean ("lazy-promotion-allocation", NULL,
                          "Reserve a load's primary slots when the tier starts the load, not when a lookup finds the chunk",
                          FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:enable-events:
   *
   * Whether each store job that succeeded queues one "stored"
   * [struct@Kv.Event] with its keys (vLLM's `enable_kv_events`). A tier
   * reporting with [class@Kv.TierJob] gets this done by
   * [method@Kv.TierJob.report]; a tier that reports otherwise reads this
   * property and pushes the event itself with
   * [method@Kv.SecondaryTier.push_event].
   */
  properties[PROP_ENABLE_EVENTS] =
    g_param_spec_boolean ("enable-events", NULL,
                          "Queue a stored event with the keys of each successful store",
                          FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:accepts-cascaded-stores:
   *
   * Whether the tier stores what the engine stores: %FALSE for a tier that
   * only fetches (the peer tier fetches from other nodes and stores
   * nothing of its own). The manager honours it before anything else: a
   * tier that does not accept cascaded stores is never given a cascade
   * job, nothing is pinned for it, and no drop is counted. %FALSE when the
   * class's `accepts_cascaded_stores` field is cleared (tiers written in C
   * clear it in `class_init`; a class written in Python or JavaScript
   * states it with
   * [func@Kv.SecondaryTier.type_set_accepts_cascaded_stores]); an
   * instance may narrow its class with this property, never widen it.
   */
  properties[PROP_ACCEPTS_CASCADED_STORES] =
    g_param_spec_boolean ("accepts-cascaded-stores", NULL,
                          "Take a store job for each chunk the engine stores (FALSE: a tier that only fetches)",
                          TRUE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:can-cancel-stores:
   *
   * Whether the tier can call a store back until it publishes it: it
   * passes the job's cancellable ([method@Kv.SecondaryTier.get_job_cancellable])
   * to its I/O, or checks it before the step that makes the chunk visible.
   * %FALSE for a tier that cannot, once the store was handed over: a
   * command already sent to a server runs when the server resumes (the
   * redis and s3 tiers), and vLLM's tier interface has no cancellation
   * (tiers under kvtier.vllm's `wrap_tier()`).
   *
   * The manager honours it at a store's deadline: the job is still
   * reported failed, once, but for a tier that cannot cancel stores its
   * primary slots stay pinned (not handed to another chunk) until the
   * tier reports the job or shuts down, so that a late publish carries the
   * bytes the job started with (see [property@Kv.SecondaryTier:deadline-ms]).
   * %FALSE when the class's `can_cancel_stores` field is cleared (tiers
   * written in C clear it in `class_init`; a class written in Python or
   * JavaScript states it with
   * [func@Kv.SecondaryTier.type_set_can_cancel_stores]); an instance may
   * narrow its class with this property, never widen it.
   */
  properties[PROP_CAN_CANCEL_STORES] =
    g_param_spec_boolean ("can-cancel-stores", NULL,
                          "Whether a store failed at its deadline can still be called back (FALSE: its slots stay pinned until the tier reports it)",
                          TRUE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:async-lookup:
   *
   * The [class@Kv.AsyncLookup] that answers the tier's lookups, if it has
   * one. When a load fails, the base class marks the keys that did not
   * land as misses in it ([method@Kv.AsyncLookup.mark_miss]), so that every
   * request that had cached a hit for them asks again (vLLM's `mark_miss`
   * after a failed load), whichever way the job was reported. The base
   * class also answers lookups with it, flushes it at each step's end,
   * forgets finished requests in it, counts its unanswered checks as
   * pending work and shuts it down after the tier
   * ([method@Kv.SecondaryTier.set_async_lookup] lists the rules). Set it
   * on the owner thread before the tier serves.
   */
  properties[PROP_ASYNC_LOOKUP] =
    g_param_spec_object ("async-lookup", NULL, NULL,
                         KV_TYPE_ASYNC_LOOKUP,
                         G_PARAM_READWRITE |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:block-size-bytes:
   *
   * The size of one chunk in bytes: the slot size of
   * [property@Kv.SecondaryTier:primary], or 0 without a primary buffer.
   */
  properties[PROP_BLOCK_SIZE_BYTES] =
    g_param_spec_uint64 ("block-size-bytes", NULL,
                         "Bytes of one chunk: the primary tier's slot size",
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
    g_param_spec_object ("clock", NULL,
                         "The clock of job deadlines and of the circuit breaker",
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
   * and counted (`kvtier_tier_late_completions_total`).
   *
   * A load failed this way may still be written by the tier: the manager
   * keeps its slots out of use (neither readable nor handed to another
   * chunk) until the tier reports it. A store failed this way must not
   * be published by the tier: its slots are unpinned and may hold other
   * bytes by then (see [method@Kv.SecondaryTier.get_job_cancellable]).
   * A tier that cannot call a store back once handed over says so with
   * [property@Kv.SecondaryTier:can-cancel-stores] = %FALSE: the manager
   * then keeps the slots of its store pinned after the deadline until the
   * tier's late report (or shutdown), so that a late publish carries the
   * bytes the job started with.
   */
  properties[PROP_DEADLINE_MS] =
    g_param_spec_uint ("deadline-ms", NULL,
                       "Milliseconds a job may take before it is reported failed (0: no deadline)",
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
    g_param_spec_uint ("breaker-threshold", NULL,
                       "Failures in a row that open the tier's circuit breaker (0: never)",
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
    g_param_spec_uint ("breaker-open-ms", NULL,
                       "Milliseconds an open circuit breaker waits before it tries the tier again",
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
    g_param_spec_object ("circuit-breaker", NULL,
                         "The tier's circuit breaker",
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
    g_param_spec_boxed ("completion-context", NULL,
                        "The main context whose callbacks report the tier's jobs (none: the tier's own threads)",
                        G_TYPE_MAIN_CONTEXT,
                        G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                        G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvSecondaryTier:metric-label:
   *
   * The value of the `tier` label on the tier's metric series and the
   * name its messages give it: `<index>:<tier-type>` (`1:fs`, as vLLM's
   * labels, the index counting from 1 in the manager's order) once
   * [method@Kv.TieringManager.add_tier] added it, the tier type before.
   * Setting %NULL goes back to the tier type. A tier wrapped for another
   * framework's manager may set it to that manager's label.
   */
  properties[PROP_METRIC_LABEL] =
    g_param_spec_string ("metric-label", NULL,
                         "The tier label of its metric series and messages (set by the manager)",
                         NULL,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

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
  priv->accepts_cascaded_stores = TRUE;
  priv->can_cancel_stores = TRUE;
  priv->queue = _kv_result_queue_new ();
  priv->jobs = _kv_job_tracker_new ();
  priv->negatives = _kv_negative_cache_new ();
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
wake_completion_context (KvSecondaryTierPrivate *priv)
{
  if (priv->completion_context != NULL)
    g_main_context_wakeup (priv->completion_context);
}

static void
expired_job_clear (KvExpiredJob *e)
{
  g_clear_pointer (&e->result, kv_job_result_unref);
  g_clear_pointer (&e->load, kv_transfer_job_unref);
}

/* Reports every tracked job past its deadline failed (all of them with
 * @all, at shutdown, those without a deadline included), exactly once,
 * through the same queue as kv_secondary_tier_complete_job(); fails an
 * overdue probe. Any thread: the watchdog's, or the owner's with a manual
 * clock.
 *
 * The jobs' cancellables are cancelled before their failures are queued:
 * once the owner thread can take a failure it may hand the job's slots to
 * other chunks, and a tier that checks the cancellable before publishing
 * a store must find it cancelled by then. Until the failures are queued
 * the jobs still count as in flight, so nothing that waits for the tier's
 * jobs returns in between. */
static void
expire_jobs (KvSecondaryTier *self,
             gboolean         all)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  g_autoptr(GPtrArray) cancellables = NULL;
  g_autoptr(GArray) expired = NULL;
  gboolean probe_failed = FALSE;
  guint n_expired;

  expired = g_array_new (FALSE, FALSE, sizeof (KvExpiredJob));
  g_array_set_clear_func (expired, (GDestroyNotify) expired_job_clear);
  _kv_job_tracker_expire (priv->jobs, all, expired, &cancellables, &probe_failed);
  n_expired = expired->len;
  if (n_expired == 0 && !probe_failed)
    return;

  /* Counted now, not when the tier answers: the breaker must open within
   * the deadline even if the tier never answers. */
  if (!all && n_expired > 0)
    {
      for (guint i = 0; i < n_expired; i++)
        kv_circuit_breaker_record_error (priv->breaker,
                                         "a job was not reported by its deadline (deadline-ms)");
    }
  if (probe_failed)
    kv_circuit_breaker_end_probe (priv->breaker, FALSE);
  if (n_expired > 0)
    g_debug ("Tier %s: %u jobs failed %s", priv->tier_type, n_expired,
             all ? "at shutdown (never reported)" : "at their deadline");

  /* The tier's handlers (abort the I/O, do not publish) run here, with no
   * kvtier lock held: they may report the job, which is then late. */
  for (guint i = 0; cancellables != NULL && i < cancellables->len; i++)
    g_cancellable_cancel (cancellables->pdata[i]);

  /* Now the owner thread may take the failures (a failed load's misses
   * recorded first, as for a reported one); queued, they no longer count
   * as in flight. */
  for (guint i = 0; i < n_expired; i++)
    {
      KvExpiredJob *e = &g_array_index (expired, KvExpiredJob, i);

      if (e->load != NULL)
        _kv_negative_cache_add_failed_load (priv->negatives, e->load, e->result);
    }
  for (guint i = 0; i < n_expired; i++)
    _kv_result_queue_push (priv->queue,
                           g_steal_pointer (&g_array_index (expired, KvExpiredJob, i).result),
                           i + 1 == n_expired);
  _kv_job_tracker_expired_queued (priv->jobs, n_expired);

  wake_completion_context (priv);
}

static void
watchdog_fired (gpointer user_data)
{
  expire_jobs (user_data, FALSE);
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
  id = _kv_job_tracker_start_probe (priv->jobs, cancellable);

  if (!klass->probe (self, id, cancellable, &error))
    {
      g_debug ("Tier %s: probe could not start: %s", priv->tier_type,
               error != NULL ? error->message : "no error set");
      kv_secondary_tier_complete_probe (self, id, FALSE);
    }
}

/**
 * kv_secondary_tier_dup_metric_label:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:metric-label]: what the tier's own
 * metrics put in their `tier` label. Any thread.
 *
 * Returns: (transfer full): the label
 */
char *
kv_secondary_tier_dup_metric_label (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  char *label;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  label = g_strdup (priv->metric_label != NULL ? priv->metric_label : priv->tier_type);
  g_mutex_unlock (&priv->lock);
  return label;
}

/**
 * kv_secondary_tier_set_metric_label:
 * @self: a tier
 * @label: (nullable): the label, or %NULL for the tier type
 *
 * Sets [property@Kv.SecondaryTier:metric-label] (the manager sets it when
 * the tier is added). Any thread.
 */
void
kv_secondary_tier_set_metric_label (KvSecondaryTier *self,
                                    const char      *label)
{
  KvSecondaryTierPrivate *priv;
  gboolean changed;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  changed = g_strcmp0 (priv->metric_label, label) != 0;
  if (changed)
    {
      g_free (priv->metric_label);
      priv->metric_label = g_strdup (label);
    }
  g_mutex_unlock (&priv->lock);
  if (!changed)
    return;
  /* before construction ends, constructed() names the breaker */
  if (priv->tier_type != NULL)
    name_breaker (self);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_METRIC_LABEL]);
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
 * kv_secondary_tier_get_accepts_cascaded_stores:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:accepts-cascaded-stores]. Any thread.
 *
 * Returns: whether the manager gives the tier cascade jobs
 */
gboolean
kv_secondary_tier_get_accepts_cascaded_stores (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->accepts_cascaded_stores;
}

/**
 * kv_secondary_tier_get_can_cancel_stores:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:can-cancel-stores]. Any thread.
 *
 * Returns: whether a store failed at its deadline can still be called back
 */
gboolean
kv_secondary_tier_get_can_cancel_stores (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), TRUE);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->can_cancel_stores;
}

/* Writes the gboolean at @offset in the class structure of @tier_type and
 * of its subclasses whose class structure exists already (they copied
 * @tier_type's when they were initialised, before this statement). */
static void
set_class_field (GType    tier_type,
                 gsize    offset,
                 gboolean value)
{
  g_autofree GType *children = NULL;
  gpointer klass = g_type_class_peek (tier_type);
  guint n_children = 0;

  if (klass == NULL)
    return;             /* not initialised: it will copy its parent's */
  G_STRUCT_MEMBER (gboolean, klass, offset) = value;
  children = g_type_children (tier_type, &n_children);
  for (guint i = 0; i < n_children; i++)
    set_class_field (children[i], offset, value);
}

static gboolean
type_set_capability (GType        tier_type,
                     const char  *capability,
                     gsize        offset,
                     gboolean     value,
                     GError     **error)
{
  g_autoptr(GTypeClass) klass = NULL;

  if (tier_type == KV_TYPE_SECONDARY_TIER ||
      !g_type_is_a (tier_type, KV_TYPE_SECONDARY_TIER))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "cannot state %s for %s: not a subclass of KvSecondaryTier",
                   capability, tier_type == G_TYPE_INVALID ? "an invalid type"
                   : g_type_name (tier_type));
      return FALSE;
    }
  if (g_type_get_qdata (tier_type, instantiated_quark ()) != NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY,
                   "cannot state %s for %s: an instance of it exists already "
                   "(state it when the class is defined)",
                   capability, g_type_name (tier_type));
      return FALSE;
    }
  klass = g_type_class_ref (tier_type);
  set_class_field (tier_type, offset, value);
  return TRUE;
}

/**
 * kv_secondary_tier_type_set_accepts_cascaded_stores:
 * @tier_type: a subclass of [class@Kv.SecondaryTier]
 * @accepts: whether instances of @tier_type take cascade jobs
 * @error: return location for a #GError
 *
 * States for every instance of @tier_type, however it is made (by
 * [method@Kv.TierRegistry.create_tier], a tier module loader or
 * g_object_new()), whether it accepts cascaded stores: the class's
 * `accepts_cascaded_stores` field, which tiers written in C set in
 * `class_init`, for tiers written in Python or JavaScript. An instance
 * may still narrow it with
 * [property@Kv.SecondaryTier:accepts-cascaded-stores], never widen it.
 * Subclasses of @tier_type inherit the statement.
 *
 * Call it once, when the class is defined, before any instance of
 * @tier_type or of a subclass exists.
 *
 * Returns: %TRUE; %FALSE with %KV_TIER_ERROR_INVALID_ARGUMENT if
 *   @tier_type is not a subclass of [class@Kv.SecondaryTier], or
 *   %KV_TIER_ERROR_BUSY if an instance was made already
 */
gboolean
kv_secondary_tier_type_set_accepts_cascaded_stores (GType     tier_type,
                                                    gboolean  accepts,
                                                    GError  **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return type_set_capability (tier_type, "accepts-cascaded-stores",
                              G_STRUCT_OFFSET (KvSecondaryTierClass, accepts_cascaded_stores),
                              !!accepts, error);
}

/**
 * kv_secondary_tier_type_set_can_cancel_stores:
 * @tier_type: a subclass of [class@Kv.SecondaryTier]
 * @can_cancel: whether instances of @tier_type can call a store back
 * @error: return location for a #GError
 *
 * States for every instance of @tier_type, however it is made, whether it
 * can cancel stores: the class's `can_cancel_stores` field for tiers
 * written in Python or JavaScript, with the rules of
 * [func@Kv.SecondaryTier.type_set_accepts_cascaded_stores]. An instance
 * may still narrow it with [property@Kv.SecondaryTier:can-cancel-stores].
 *
 * Returns: %TRUE; %FALSE with an error as
 *   [func@Kv.SecondaryTier.type_set_accepts_cascaded_stores]
 */
gboolean
kv_secondary_tier_type_set_can_cancel_stores (GType     tier_type,
                                              gboolean  can_cancel,
                                              GError  **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return type_set_capability (tier_type, "can-cancel-stores",
                              G_STRUCT_OFFSET (KvSecondaryTierClass, can_cancel_stores),
                              !!can_cancel, error);
}

/**
 * kv_secondary_tier_type_set_lazy_promotion_allocation:
 * @tier_type: a subclass of [class@Kv.SecondaryTier]
 * @lazy: whether instances of @tier_type reserve their loads' slots
 * @error: return location for a #GError
 *
 * States for every instance of @tier_type, however it is made, whether it
 * reserves the primary slots of its loads itself: the class's
 * `lazy_promotion_allocation` field for tiers written in Python or
 * JavaScript, with the rules of
 * [func@Kv.SecondaryTier.type_set_accepts_cascaded_stores]. When it is
 * %TRUE, every instance has
 * [property@Kv.SecondaryTier:lazy-promotion-allocation].
 *
 * Returns: %TRUE; %FALSE with an error as
 *   [func@Kv.SecondaryTier.type_set_accepts_cascaded_stores]
 */
gboolean
kv_secondary_tier_type_set_lazy_promotion_allocation (GType     tier_type,
                                                      gboolean  lazy,
                                                      GError  **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return type_set_capability (tier_type, "lazy-promotion-allocation",
                              G_STRUCT_OFFSET (KvSecondaryTierClass, lazy_promotion_allocation),
                              !!lazy, error);
}

/**
 * kv_secondary_tier_get_enable_events:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:enable-events]. Any thread.
 *
 * Returns: whether successful stores queue a stored event
 */
gboolean
kv_secondary_tier_get_enable_events (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->enable_events;
}

/**
 * kv_secondary_tier_get_async_lookup:
 * @self: a tier
 *
 * Gets [property@Kv.SecondaryTier:async-lookup]. Owner thread.
 *
 * Returns: (transfer none) (nullable): the tier's existence cache
 */
KvAsyncLookup *
kv_secondary_tier_get_async_lookup (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return priv->async_lookup;
}

/**
 * kv_secondary_tier_set_async_lookup:
 * @self: a tier
 * @lookup: (nullable): the lookup that answers the tier's lookups
 *
 * Sets [property@Kv.SecondaryTier:async-lookup]: from then on a failed
 * load marks the keys that did not land as misses in @lookup. Owner
 * thread, before the tier serves (a tier sets it where it creates the
 * lookup).
 *
 * The base class then does the plumbing around @lookup, so the tier
 * writes none of it:
 *
 * - the default [vfunc@Kv.SecondaryTier.lookup] answers with
 *   [method@Kv.AsyncLookup.lookup];
 * - [method@Kv.SecondaryTier.has_pending_work] is %TRUE while
 *   [method@Kv.AsyncLookup.get_n_pending] is not zero, whatever the
 *   vfunc says;
 * - [method@Kv.SecondaryTier.on_request_finished] calls
 *   [method@Kv.AsyncLookup.cleanup] and
 *   [method@Kv.SecondaryTier.on_schedule_end] calls
 *   [method@Kv.AsyncLookup.flush], each after the tier's vfunc, whether
 *   it overrides it or not;
 * - [method@Kv.SecondaryTier.shutdown] calls
 *   [method@Kv.AsyncLookup.shutdown] after the tier's vfunc succeeded (see
 *   there for a tier whose checks need what its shutdown stops), and
 *   `dispose` does for a tier never shut down.
 */
void
kv_secondary_tier_set_async_lookup (KvSecondaryTier *self,
                                    KvAsyncLookup   *lookup)
{
  KvSecondaryTierPrivate *priv;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (lookup == NULL || KV_IS_ASYNC_LOOKUP (lookup));

  priv = kv_secondary_tier_get_instance_private (self);
  if (g_set_object (&priv->async_lookup, lookup))
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_ASYNC_LOOKUP]);
}

/**
 * kv_secondary_tier_set_counters:
 * @self: a tier
 * @counters: (nullable): the tier's own counters
 *
 * Hands the tier's counters to the base class: from then on
 * [method@Kv.SecondaryTier.get_stats] adds what they moved since its last
 * call, labelled with [property@Kv.SecondaryTier:tier-type], to what the
 * tier's [vfunc@Kv.SecondaryTier.get_stats] returns (its gauges). The
 * tier keeps counting with [method@Kv.CounterSet.add]. Call it once,
 * before the tier serves (in `init` or `constructed`).
 */
void
kv_secondary_tier_set_counters (KvSecondaryTier *self,
                                KvCounterSet    *counters)
{
  KvSecondaryTierPrivate *priv;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  if (counters != NULL)
    kv_counter_set_ref (counters);
  g_clear_pointer (&priv->counters, kv_counter_set_unref);
  priv->counters = counters;
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
 * out in the background. The vfunc is required, unless the tier set a
 * [property@Kv.SecondaryTier:async-lookup]: the default vfunc then asks
 * it ([method@Kv.AsyncLookup.lookup]). An override that answers some keys
 * itself (a key the tier cannot store is a miss at once) chains up for
 * the others.
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
  if (_kv_negative_cache_contains (priv->negatives, key, request))
    return KV_LOOKUP_RESULT_MISS;

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
  gboolean tracked;
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

      _kv_job_tracker_count_rejected (priv->jobs);
      kv_secondary_tier_complete_job_full (self, failed, KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT);
      return TRUE;
    }

  /* tracked before the tier sees it, so that a completion from a worker
   * during submit finds it */
  tracked = _kv_job_tracker_track (priv->jobs, job, is_load);
  if (!tracked)
    g_warning ("Tier %s: job %" G_GUINT64_FORMAT " submitted while a job with that id is "
               "in flight; its deadline is not watched", priv->tier_type,
               kv_transfer_job_get_id (job));
  ret = func (self, job, &local_error);
  if (!ret && tracked)
    _kv_job_tracker_untrack (priv->jobs, kv_transfer_job_get_id (job));
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

/* Whether the tier reports (also) by being pulled: it overrides
 * get_finished_jobs(), as vLLM's tiers and most Python tiers do. */
static inline gboolean
is_pulled (KvSecondaryTier *self)
{
  return KV_SECONDARY_TIER_GET_CLASS (self)->get_finished_jobs !=
         kv_secondary_tier_real_get_finished_jobs;
}

static void
record_outcome (KvSecondaryTierPrivate *priv,
                KvJobResult            *result,
                KvCompleteJobFlags      flags)
{
  if (kv_job_result_get_success (result))
    kv_circuit_breaker_record_success (priv->breaker);
  else if (!(flags & KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT))
    _kv_circuit_breaker_record_failure_or (priv->breaker,
                                           "a job failed (the tier named no cause)");
}

/* The tier answered with @result: an answer in time is queued (a failed
 * load's misses recorded first) before its job stops counting as
 * settling, so that whoever waits for the tier's jobs finds it, and its
 * outcome counted (outside any lock: the breaker logs; but before
 * wait_jobs() may return: who drained the jobs sees the breaker they
 * left); a late one is dropped. An untracked result is queued as it is,
 * its outcome counted with @count_untracked. The caller tells the
 * manager. */
static KvJobAnswer
take_answer (KvSecondaryTier    *self,
             KvJobResult        *result,
             KvCompleteJobFlags  flags,
             gboolean            skip_own,
             gboolean            count_untracked)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  g_autoptr(KvTransferJob) failed_load = NULL;
  KvJobAnswer answer;

  answer = _kv_job_tracker_settle (priv->jobs, result, skip_own, &failed_load);
  switch (answer)
    {
    case KV_JOB_ANSWER_LATE:
    case KV_JOB_ANSWER_LATE_RELEASED:
      g_debug ("Tier %s reported job %" G_GUINT64_FORMAT " after its deadline; dropped",
               priv->tier_type, kv_job_result_get_job_id (result));
      break;

    case KV_JOB_ANSWER_UNTRACKED:
      _kv_result_queue_push (priv->queue, kv_job_result_ref (result), FALSE);
      if (count_untracked)
        record_outcome (priv, result, flags);
      break;

    case KV_JOB_ANSWER_IN_TIME:
    default:
      if (failed_load != NULL)
        _kv_negative_cache_add_failed_load (priv->negatives, failed_load, result);
      _kv_result_queue_push (priv->queue, kv_job_result_ref (result), FALSE);
      record_outcome (priv, result, flags);
      _kv_job_tracker_settled (priv->jobs);
      break;
    }
  return answer;
}

/* Owner thread: takes the results an overriding get_finished_jobs() has
 * and settles each as kv_secondary_tier_complete_job() would (an answer
 * in time stops the job's deadline, a late one is dropped), queueing them
 * with the others. Whatever waits for the tier's jobs calls this while it
 * waits, so that a job the tier finished counts as reported with the
 * tier's own result. An override that chains up returns what was queued
 * already: those were settled when they were queued, and go back as they
 * are. */
static void
pull_results (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv = kv_secondary_tier_get_instance_private (self);
  KvSecondaryTierClass *klass = KV_SECONDARY_TIER_GET_CLASS (self);
  KvJobResult **results;
  guint n_queued = 0;

  if (!is_pulled (self) || priv->closed || klass->get_finished_jobs == NULL)
    return;
  results = klass->get_finished_jobs (self);
  if (results == NULL)
    return;

  for (guint i = 0; results[i] != NULL; i++)
    {
      /* a result this call settled is news for the manager (one an
       * override that chains up handed back was announced already) */
      if (take_answer (self, results[i], KV_COMPLETE_JOB_FLAGS_NONE, TRUE, FALSE) ==
          KV_JOB_ANSWER_IN_TIME)
        n_queued++;
      kv_job_result_unref (results[i]);
    }
  g_free (results);

  /* queued: the manager's wake-up fd says so, as for complete_job() */
  if (n_queued > 0)
    _kv_result_queue_notify (priv->queue);
}

/**
 * kv_secondary_tier_get_finished_jobs:
 * @self: a tier
 *
 * The results of the jobs finished since the last call, each job exactly
 * once. Owner thread only; must not block (the manager calls it at most
 * once per step). The default vfunc drains the queue filled by
 * [method@Kv.SecondaryTier.complete_job], so tiers that report through
 * that function need not override it. A tier that overrides it (vLLM's
 * pull style) is pulled by this invoker and by whatever waits for its
 * jobs ([method@Kv.SecondaryTier.wait_jobs], drain, shutdown): its results
 * are settled as if it had called [method@Kv.SecondaryTier.complete_job]
 * (a late one is dropped) and returned here with the base class's own
 * (the failures of deadlines and of an open breaker). Also works after
 * shutdown, so that the jobs reported during shutdown can be collected.
 *
 * Returns: (transfer full) (array zero-terminated=1): the results,
 *   possibly none
 */
KvJobResult **
kv_secondary_tier_get_finished_jobs (KvSecondaryTier *self)
{
  KvSecondaryTierPrivate *priv;
  KvJobResult **results;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);

  /* pulled first: a job the tier finished is not failed by the clock */
  pull_results (self);
  if (_kv_job_tracker_is_manual (priv->jobs))
    expire_jobs (self, FALSE);
  maybe_probe (self);

  /* the base queue, also for a tier whose override does not chain up:
   * the failures of its deadlines and of an open breaker are there */
  results = kv_secondary_tier_real_get_finished_jobs (self);

  _kv_negative_cache_apply (priv->negatives, priv->async_lookup);
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
 * The invoker answers %TRUE without calling the vfunc while the tier has
 * jobs or a probe in flight, results not yet taken, or, when it set a
 * [property@Kv.SecondaryTier:async-lookup], batches of existence checks
 * not yet answered ([method@Kv.AsyncLookup.get_n_pending]): an override
 * only adds work of its own and need not chain up.
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
  if (_kv_job_tracker_get_n_in_flight (priv->jobs) > 0 ||
      _kv_result_queue_has_results (priv->queue) ||
      _kv_job_tracker_probe_in_flight (priv->jobs))
    return TRUE;
  /* Unanswered existence checks: a lookup must come to collect them. */
  if (priv->async_lookup != NULL && kv_async_lookup_get_n_pending (priv->async_lookup) > 0)
    return TRUE;
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
 *
 * After the vfunc, the invoker forgets @request in the tier's
 * [property@Kv.SecondaryTier:async-lookup], if it set one
 * ([method@Kv.AsyncLookup.cleanup]): an override need not chain up.
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
  if (priv->closed)
    return;
  if (klass->on_request_finished != NULL)
    klass->on_request_finished (self, request);
  /* after the tier, which may still look at the request's answers */
  if (priv->async_lookup != NULL)
    kv_async_lookup_cleanup (priv->async_lookup, kv_request_get_id (request));
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
 *
 * After the vfunc, the invoker sends the keys looked up in the step to
 * the tier's [property@Kv.SecondaryTier:async-lookup], if it set one, as
 * one batch ([method@Kv.AsyncLookup.flush]): an override need not chain
 * up.
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
  /* after the tier: a lookup it made at the step's end joins the batch */
  if (priv->async_lookup != NULL)
    kv_async_lookup_flush (priv->async_lookup);
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

  pull_results (self);
  if (_kv_job_tracker_is_manual (priv->jobs))
    expire_jobs (self, FALSE);
  if (_kv_job_tracker_get_n_unanswered (priv->jobs) > 0)
    {
      g_debug ("Tier %s left %u jobs unanswered past their deadline: not calling its drain_jobs",
               priv->tier_type, _kv_job_tracker_get_n_unanswered (priv->jobs));
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
 * When the vfunc succeeded, the invoker then shuts down the tier's
 * [property@Kv.SecondaryTier:async-lookup], if it set one
 * ([method@Kv.AsyncLookup.shutdown]: the checks already posted are
 * answered, the workers joined). That is after the tier's own teardown,
 * so the tier's batch function must then return at once without the
 * connections the vfunc closed (answer a miss, or fail its request at
 * once): the vfunc wakes any check waiting on them. A tier whose checks
 * need something its shutdown stops (an I/O thread that must dispatch
 * them) calls [method@Kv.AsyncLookup.shutdown] itself before stopping
 * it; the invoker's call then does nothing. The base class's `dispose`
 * joins the workers too, for a tier that is dropped without a shutdown.
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

  pull_results (self);
  if (_kv_job_tracker_is_manual (priv->jobs))
    expire_jobs (self, FALSE);
  if (_kv_job_tracker_get_n_unanswered (priv->jobs) > 0)
    {
      g_message ("Tier %s (%s) left %u jobs unanswered past their deadline; shutting down "
                 "without calling its shutdown", priv->tier_type, G_OBJECT_TYPE_NAME (self),
                 _kv_job_tracker_get_n_unanswered (priv->jobs));
    }
  else
    {
      if (klass->shutdown != NULL)
        {
          ret = klass->shutdown (self, &local_error);
          if (!check_vfunc_result (self, "shutdown", ret, local_error, error))
            return FALSE;
        }
      /* after the tier's teardown, which woke checks waiting on it; not
       * for a tier left unanswered, whose checks may still be waiting */
      if (priv->async_lookup != NULL)
        kv_async_lookup_shutdown (priv->async_lookup);
    }

  /* Exactly once: what the tier finished is reported with its own result,
   * whatever it did not report is failed now. */
  pull_results (self);
  expire_jobs (self, TRUE);
  _kv_job_tracker_stop_probe (priv->jobs);

  priv->closed = TRUE;
  return TRUE;
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

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (result != NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  /* a result, or held slots released: the manager has news */
  if (take_answer (self, result, flags, FALSE, TRUE) != KV_JOB_ANSWER_LATE)
    _kv_result_queue_notify (priv->queue);
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

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (event != NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  _kv_result_queue_push_event (priv->queue, event);
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
  _kv_result_queue_set_func (priv->queue, func, user_data);
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
  return _kv_result_queue_has_results (priv->queue) ||
         _kv_job_tracker_has_released (priv->jobs) ||
         (_kv_job_tracker_is_manual (priv->jobs) &&
          _kv_job_tracker_get_n_in_flight (priv->jobs) > 0);
}

/* See kv-secondary-tier-private.h. */
gboolean
_kv_secondary_tier_hold_slots (KvSecondaryTier *self,
                               guint64          job_id)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), FALSE);

  priv = kv_secondary_tier_get_instance_private (self);
  /* a load's slots may still be written; a store's read by a tier that
   * cannot call it back, and published */
  return _kv_job_tracker_hold (priv->jobs, job_id, !priv->can_cancel_stores);
}

guint64 *
_kv_secondary_tier_take_released (KvSecondaryTier *self,
                                  guint           *n_ids)
{
  KvSecondaryTierPrivate *priv;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);
  g_return_val_if_fail (n_ids != NULL, NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return _kv_job_tracker_take_released (priv->jobs, n_ids);
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
  _kv_job_tracker_count_rejected (priv->jobs);
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

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  if (!_kv_job_tracker_end_probe (priv->jobs, probe_id))
    return;
  /* the breaker logs its closing, naming the tier */
  kv_circuit_breaker_end_probe (priv->breaker, healthy);
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
 * must not be published: the manager has released its slots (unless the
 * tier declared [property@Kv.SecondaryTier:can-cancel-stores] %FALSE).
 * Any thread.
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

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);
  g_return_val_if_fail (job != NULL, NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  return _kv_job_tracker_get_cancellable (priv->jobs, kv_transfer_job_get_id (job));
}

/**
 * kv_secondary_tier_wait_jobs:
 * @self: a tier
 *
 * Blocks until every job accepted through the submit invokers was
 * reported by the tier (its outcome counted by the circuit breaker) or
 * failed by its deadline, and no probe is in flight. With [property@Kv.SecondaryTier:completion-context] set (a
 * JavaScript tier), iterates that context meanwhile, since that is where
 * the tier's completions run; else waits on a condition, woken by
 * [method@Kv.SecondaryTier.complete_job] and by the watchdog. A tier that
 * overrides [vfunc@Kv.SecondaryTier.get_finished_jobs] is asked for its
 * finished jobs while this waits (every 1 to 16 ms): a job it finished
 * counts as reported, with its own result.
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
  gboolean pulled;
  gboolean manual;
  gint64 poll_us = 1000;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));

  priv = kv_secondary_tier_get_instance_private (self);
  pulled = is_pulled (self);
  manual = _kv_job_tracker_is_manual (priv->jobs);
  for (;;)
    {
      gboolean iterate;
      gint64 timeout_us;

      /* A tier that is pulled tells nobody when it finishes a job: ask it
       * while waiting (before the clock may fail the job). */
      pull_results (self);
      if (manual)
        expire_jobs (self, FALSE);

      iterate = priv->completion_context != NULL &&
                g_main_context_acquire (priv->completion_context);
      /* A manual clock moves on other threads without telling, and a
       * pulled tier finishes jobs without telling: look again now and
       * then (1 ms, then up to 16 ms). */
      if (iterate)
        timeout_us = 0;
      else if (pulled)
        timeout_us = poll_us;
      else if (manual)
        timeout_us = G_USEC_PER_SEC / 20;
      else
        timeout_us = -1;
      if (_kv_job_tracker_wait_idle (priv->jobs, timeout_us))
        {
          if (iterate)
            g_main_context_release (priv->completion_context);
          return;
        }
      if (pulled && !iterate)
        poll_us = MIN (poll_us * 2, 16 * 1000);

      if (iterate)
        {
          /* a pulled tier may have nothing left to dispatch: do not block */
          if (!g_main_context_iteration (priv->completion_context, !pulled) && pulled)
            g_usleep (poll_us);
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
  return _kv_job_tracker_get_n_in_flight (priv->jobs);
}

/**
 * kv_secondary_tier_get_n_expired_jobs:
 * @self: a tier
 *
 * Counts the jobs reported failed at their deadline since the tier was
 * made (`kvtier_tier_deadline_failures_total`). Any thread.
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
  _kv_job_tracker_get_totals (priv->jobs, &n, NULL, NULL);
  return n;
}

/**
 * kv_secondary_tier_get_n_late_completions:
 * @self: a tier
 *
 * Counts the reports the tier made after the job's deadline had failed
 * it, all dropped (`kvtier_tier_late_completions_total`). Any thread.
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
  _kv_job_tracker_get_totals (priv->jobs, NULL, &n, NULL);
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

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), 0);

  priv = kv_secondary_tier_get_instance_private (self);
  return _kv_job_tracker_get_deadline_ms (priv->jobs);
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
  _kv_job_tracker_set_deadline_ms (priv->jobs, deadline_ms);
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

/**
 * kv_secondary_tier_register_metrics:
 * @self: a tier
 * @registry: the registry to add definitions to
 * @error: return location for an error
 *
 * Adds the definitions of the tier's own metrics (those its
 * [vfunc@Kv.SecondaryTier.get_stats] reports) to @registry, as vLLM's
 * `build_metric_definitions`. Owner thread only. The default vfunc adds
 * nothing; the invoker first adds the families every tier inherits
 * ([method@Kv.MetricRegistry.add_tier_metrics]).
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

  if (!kv_metric_registry_add_tier_metrics (registry, error))
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
 * the invoker adds the increase of the tier's own counters
 * ([method@Kv.SecondaryTier.set_counters]) and the families every tier
 * inherits, labelled with [property@Kv.SecondaryTier:metric-label] (all
 * of them at zero on the first call, so that they exist from the first
 * scrape): the counters `kvtier_tier_deadline_failures`,
 * `kvtier_tier_late_completions`, `kvtier_tier_breaker_rejected_jobs` and
 * `kvtier_tier_breaker_openings` when they moved, and the gauge
 * `kvtier_tier_breaker_open` always.
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
  g_autofree char *label = NULL;
  const char *labels[2] = { NULL, NULL };
  guint64 expired, late, rejected, trips;
  guint64 n_expired, n_late, n_rejected;
  gboolean every;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  priv = kv_secondary_tier_get_instance_private (self);
  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  stats = klass->get_stats != NULL ? klass->get_stats (self) : NULL;
  if (stats == NULL)
    stats = kv_stats_new ();

  /* owner thread: the reported totals are its own */
  trips = kv_circuit_breaker_get_n_trips (priv->breaker);
  _kv_job_tracker_get_totals (priv->jobs, &n_expired, &n_late, &n_rejected);
  expired = n_expired - priv->reported_expired;
  late = n_late - priv->reported_late;
  rejected = n_rejected - priv->reported_rejected;
  trips -= priv->reported_trips;
  priv->reported_expired = n_expired;
  priv->reported_late = n_late;
  priv->reported_rejected = n_rejected;
  priv->reported_trips += trips;

  every = !priv->every_series_sent;
  priv->every_series_sent = TRUE;
  label = kv_secondary_tier_dup_metric_label (self);
  labels[0] = label;
  if (priv->counters != NULL)
    kv_counter_set_take_deltas (priv->counters, stats, labels);
  if (expired > 0 || every)
    kv_stats_increase_counter (stats, KV_METRIC_TIER_DEADLINE_FAILURES, expired, labels);
  if (late > 0 || every)
    kv_stats_increase_counter (stats, KV_METRIC_TIER_LATE_COMPLETIONS, late, labels);
  if (rejected > 0 || every)
    kv_stats_increase_counter (stats, KV_METRIC_TIER_BREAKER_REJECTED_JOBS, rejected, labels);
  if (trips > 0 || every)
    kv_stats_increase_counter (stats, KV_METRIC_TIER_BREAKER_OPENINGS, trips, labels);
  kv_stats_set_gauge (stats, KV_METRIC_TIER_BREAKER_OPEN,
                      !kv_circuit_breaker_allows_requests (priv->breaker), labels);
  return stats;
}
