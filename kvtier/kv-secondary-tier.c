/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-secondary-tier.h"
#include "kv-secondary-tier-private.h"

#include <string.h>

#include "kv-enums.h"

/* Keys handed to touch() are copied into a NULL-terminated array for the
 * vfunc; up to this many go on the stack. */
#define TOUCH_STACK_KEYS 64

typedef struct
{
  char                   *tier_type;
  KvHostBuffer           *primary;
  KvBackpressureDetector *detector;
  KvLocality              locality;
  KvMedium                medium;

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
} KvSecondaryTierPrivate;

enum {
  PROP_0,
  PROP_TIER_TYPE,
  PROP_PRIMARY,
  PROP_BACKPRESSURE_DETECTOR,
  PROP_LOCALITY,
  PROP_MEDIUM,
  PROP_BLOCK_SIZE_BYTES,
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

  /* Whatever nobody took is dropped with the tier. */
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

    case PROP_BLOCK_SIZE_BYTES:
      g_value_set_uint64 (value, kv_secondary_tier_get_block_size_bytes (self));
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
  gboolean ret;

  if (priv->closed)
    return closed_error (self, is_load ? "load" : "store", error);

  func = is_load ? klass->submit_load : klass->submit_store;
  if (func == NULL)
    return missing_vfunc (self, vfunc, error);

  ret = func (self, job, &local_error);
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
  KvSecondaryTierClass *klass;
  KvJobResult **results;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (klass->get_finished_jobs == NULL)
    return empty_results ();

  results = klass->get_finished_jobs (self);
  return results != NULL ? results : empty_results ();
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
  if (priv->closed || klass->has_pending_work == NULL)
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
  if (!priv->closed && klass->on_schedule_end != NULL)
    klass->on_schedule_end (self, schedule_end);
}

/**
 * kv_secondary_tier_drain_jobs:
 * @self: a tier
 * @error: return location for an error
 *
 * Blocks until every submitted job has been reported with
 * [method@Kv.SecondaryTier.complete_job], so that the results are
 * available from [method@Kv.SecondaryTier.get_finished_jobs]. Copies in
 * flight are finished, not aborted; jobs still queued may be cancelled,
 * but are then reported as failed. Afterwards no I/O of the tier touches
 * primary slots. Owner thread only; the vfunc must not wait for the owner
 * thread's main context. The vfunc is required.
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
  if (klass->drain_jobs == NULL)
    return missing_vfunc (self, "drain_jobs", error);

  ret = klass->drain_jobs (self, &local_error);
  return check_vfunc_result (self, "drain_jobs", ret, local_error, error);
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

  if (klass->shutdown != NULL)
    {
      ret = klass->shutdown (self, &local_error);
      if (!check_vfunc_result (self, "shutdown", ret, local_error, error))
        return FALSE;
    }

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
 * whether it succeeded or not.
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
  KvSecondaryTierPrivate *priv;
  KvSecondaryTierQueuedFunc func;
  gpointer user_data;

  g_return_if_fail (KV_IS_SECONDARY_TIER (self));
  g_return_if_fail (result != NULL);

  priv = kv_secondary_tier_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  g_ptr_array_add (priv->finished, kv_job_result_ref (result));
  g_atomic_int_inc (&priv->n_queued);
  func = priv->queued_func;
  user_data = priv->queued_data;
  if (func != NULL)
    priv->n_queued_calls++;
  g_mutex_unlock (&priv->lock);

  notify_queued (priv, func, user_data);
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
  return g_atomic_int_get (&priv->n_queued) > 0;
}

/**
 * kv_secondary_tier_register_metrics:
 * @self: a tier
 * @registry: the registry to add definitions to
 * @error: return location for an error
 *
 * Adds the definitions of the tier's own metrics (those its
 * [vfunc@Kv.SecondaryTier.get_stats] reports) to @registry, as vLLM's
 * `build_metric_definitions`. Owner thread only. The default adds nothing.
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
 * [method@Kv.TieringManager.get_stats]. The default returns %NULL.
 *
 * Returns: (transfer full) (nullable): the tier's metrics, or %NULL when it
 *   has none
 */
KvStats *
kv_secondary_tier_get_stats (KvSecondaryTier *self)
{
  KvSecondaryTierClass *klass;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (self), NULL);

  klass = KV_SECONDARY_TIER_GET_CLASS (self);
  if (klass->get_stats == NULL)
    return NULL;
  return klass->get_stats (self);
}
