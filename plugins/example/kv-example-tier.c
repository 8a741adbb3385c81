/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-example-tier.h"

#include <string.h>

/*
 * The example tier: the smallest complete secondary tier, written to be
 * copied. It keeps chunks in a hash table in process memory and does its
 * copies on a thread pool, the way a real tier does its I/O:
 *
 *  - every vfunc runs on the owner thread and returns at once;
 *  - submit_store()/submit_load() hand the job to a worker thread;
 *  - the worker moves the bytes, then reports the job exactly once with
 *    kv_secondary_tier_complete_job(), which is safe from any thread;
 *  - drain_jobs() blocks on a condition variable until no job is in
 *    flight; it never iterates a main context.
 *
 * The default get_finished_jobs() and take_events() of KvSecondaryTier
 * drain what the workers queued, so the tier does not implement them.
 *
 * What it does not write either, because KvSecondaryTier does it for
 * every tier (doc/writing-a-tier.md, "Inherited liveness"):
 *
 *  - deadlines: with `deadline-ms = 2000` in its [tier] section, a job not
 *    reported within 2 s is reported failed by the library's watchdog and
 *    the worker's later report is dropped (kvtier:tier_late_completions);
 *  - the circuit breaker: `breaker-threshold = 5` failed jobs in a row
 *    make lookups answer MISS and jobs fail at once without reaching the
 *    tier, for `breaker-open-ms = 1000`; a tier with a cheap health check
 *    implements the optional probe vfunc to close it (this one has nothing
 *    to check: after the interval the next job decides);
 *  - the per-request negative cache of failed loads.
 *
 * A tier whose I/O can outlive a deadline passes
 * kv_secondary_tier_get_job_cancellable() to it; this one only copies
 * memory, which always finishes.
 */

typedef struct
{
  /* Construct-only settings. */
  guint           n_workers;
  KvOffloadPolicy offload_policy;
  gboolean        enable_events;

  GThreadPool    *pool;

  /* Workers write the store while the owner thread looks keys up, so both
   * go through the lock; the copies themselves run outside it. */
  GMutex          lock;
  GCond           idle_cond;   /* signalled when n_in_flight drops to 0 */
  GHashTable     *store;       /* KvKey → GBytes (one slot of bytes) */
  guint           n_in_flight; /* accepted jobs not reported yet */
} KvExampleTierPrivate;

/* One job handed to the thread pool. */
typedef struct
{
  KvTransferJob *job;
  gboolean       is_load;
} ExampleTask;

enum {
  PROP_0,
  PROP_N_WORKERS,
  PROP_OFFLOAD_POLICY,
  PROP_ENABLE_EVENTS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/**
 * KvExampleTier:
 *
 * An in-memory secondary tier, registered as `example`: the model to copy
 * when writing a tier.
 *
 * Chunks are kept as [struct@GLib.Bytes] in a hash table; stores and loads
 * are copied by worker threads and reported with
 * [method@Kv.SecondaryTier.complete_job]. Subclasses can wrap the
 * worker-thread hooks `run_store` and `run_load` of
 * [struct@Kv.ExampleTierClass].
 *
 * Like every tier it takes the liveness settings of its base class:
 * [property@Kv.SecondaryTier:deadline-ms] (0 here: memory copies always
 * finish), [property@Kv.SecondaryTier:breaker-threshold] and
 * [property@Kv.SecondaryTier:breaker-open-ms], settable from its
 * configuration section.
 */
G_DEFINE_TYPE_WITH_PRIVATE (KvExampleTier, kv_example_tier, KV_TYPE_SECONDARY_TIER)

static void
example_task_free (ExampleTask *task)
{
  kv_transfer_job_unref (task->job);
  g_free (task);
}

/* Whether every chunk id of @job names a slot of @primary. Jobs that do
 * not fit fail as a whole, before any byte is moved. */
static gboolean
job_fits_primary (KvHostBuffer  *primary,
                  KvTransferJob *job)
{
  const guint32 *chunk_ids;
  guint n_chunk_ids;
  guint n_slots;
  guint i;

  if (primary == NULL)
    return kv_transfer_job_get_n_keys (job) == 0;

  chunk_ids = kv_transfer_job_get_chunk_ids (job, &n_chunk_ids);
  n_slots = kv_host_buffer_get_n_slots (primary);
  for (i = 0; i < n_chunk_ids; i++)
    if (chunk_ids[i] >= n_slots)
      return FALSE;

  return n_chunk_ids == kv_transfer_job_get_n_keys (job);
}

static KvJobResult *
failed_result (guint64 job_id)
{
  KvJobResult *result = kv_job_result_new (job_id, FALSE);

  kv_job_result_set_transfer_bytes (result, 0);
  return result;
}

/* Worker thread: copy the job's slots into new GBytes. */
static KvJobResult *
kv_example_tier_real_run_store (KvExampleTier *self,
                                KvTransferJob *job)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);
  KvHostBuffer *primary = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));
  guint64 job_id = kv_transfer_job_get_id (job);
  KvKey * const *keys;
  const guint32 *chunk_ids;
  KvJobResult *result;
  gsize slot_size;
  gint64 copied = 0;
  guint n_keys;
  guint i;

  if (!job_fits_primary (primary, job))
    return failed_result (job_id);

  keys = kv_transfer_job_get_keys (job, &n_keys);
  chunk_ids = kv_transfer_job_get_chunk_ids (job, NULL);
  slot_size = n_keys > 0 ? kv_host_buffer_get_slot_size (primary) : 0;

  for (i = 0; i < n_keys; i++)
    {
      GBytes *bytes;

      /* Equal keys hold equal bytes: a stored chunk is never rewritten. */
      if (kv_example_tier_contains (self, keys[i]))
        continue;

      /* Copy outside the lock, so lookups never wait for a memcpy. The
       * manager keeps the slot pinned until the job is reported. */
      bytes = g_bytes_new (kv_host_buffer_peek_slot (primary, chunk_ids[i]), slot_size);
      copied += slot_size;

      g_mutex_lock (&priv->lock);
      if (!g_hash_table_contains (priv->store, keys[i]))
        g_hash_table_insert (priv->store, kv_key_ref (keys[i]), g_steal_pointer (&bytes));
      g_mutex_unlock (&priv->lock);

      g_clear_pointer (&bytes, g_bytes_unref);
    }

  result = kv_job_result_new (job_id, TRUE);
  kv_job_result_set_transfer_bytes (result, copied);
  return result;
}

/* Worker thread: copy stored bytes into the job's slots, in key order. The
 * first missing key ends the job; the keys before it did land. */
static KvJobResult *
kv_example_tier_real_run_load (KvExampleTier *self,
                               KvTransferJob *job)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);
  KvHostBuffer *primary = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));
  guint64 job_id = kv_transfer_job_get_id (job);
  KvKey * const *keys;
  const guint32 *chunk_ids;
  KvJobResult *result;
  gsize slot_size;
  gint64 copied = 0;
  guint n_keys;
  guint i;

  if (!job_fits_primary (primary, job))
    return failed_result (job_id);

  keys = kv_transfer_job_get_keys (job, &n_keys);
  chunk_ids = kv_transfer_job_get_chunk_ids (job, NULL);
  slot_size = n_keys > 0 ? kv_host_buffer_get_slot_size (primary) : 0;

  for (i = 0; i < n_keys; i++)
    {
      GBytes *bytes;

      g_mutex_lock (&priv->lock);
      bytes = g_hash_table_lookup (priv->store, keys[i]);
      if (bytes != NULL)
        g_bytes_ref (bytes);
      g_mutex_unlock (&priv->lock);

      if (bytes == NULL)
        break;

      memcpy (kv_host_buffer_peek_slot (primary, chunk_ids[i]),
              g_bytes_get_data (bytes, NULL), slot_size);
      g_bytes_unref (bytes);
      copied += slot_size;
    }

  result = kv_job_result_new (job_id, i == n_keys);
  /* A partial load names the keys that landed; with none, the result
   * carries no key list at all (reference: `successful_keys=None`). */
  if (i > 0 && i < n_keys)
    kv_job_result_set_successful_keys (result, keys, i);
  kv_job_result_set_transfer_bytes (result, copied);
  return result;
}

/* Thread pool function: run one job and report it. */
static void
kv_example_tier_worker (gpointer data,
                        gpointer user_data)
{
  ExampleTask *task = data;
  KvExampleTier *self = user_data;
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);
  KvExampleTierClass *klass = KV_EXAMPLE_TIER_GET_CLASS (self);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (self);
  gint64 start_us = g_get_monotonic_time ();
  KvJobResult *result;

  result = task->is_load ? klass->run_load (self, task->job)
                         : klass->run_store (self, task->job);
  if (result == NULL)
    result = kv_job_result_new (kv_transfer_job_get_id (task->job), FALSE);
  if (kv_job_result_get_transfer_time (result) <= 0)
    kv_job_result_set_transfer_time (result,
                                     (g_get_monotonic_time () - start_us) / (gdouble) G_USEC_PER_SEC);

  /* One "stored" event per successful store job, pushed before the job is
   * reported so that the manager never sees the job without its event. */
  if (!task->is_load && priv->enable_events && kv_job_result_get_success (result))
    {
      guint n_keys;
      KvKey * const *keys = kv_transfer_job_get_keys (task->job, &n_keys);
      KvEvent *event = kv_event_new (keys, n_keys,
                                     kv_secondary_tier_get_medium (tier),
                                     FALSE,
                                     kv_secondary_tier_get_locality (tier));

      kv_secondary_tier_push_event (tier, event);
      kv_event_unref (event);
    }

  kv_secondary_tier_complete_job (tier, result);
  kv_job_result_unref (result);

  /* The manager holds its own reference to the job until it has consumed
   * the result, so this never finalizes a job (or its request) here. */
  example_task_free (task);

  /* Only now is the job out of flight: drain_jobs() promises that the
   * results are queued when it returns. */
  g_mutex_lock (&priv->lock);
  if (--priv->n_in_flight == 0)
    g_cond_broadcast (&priv->idle_cond);
  g_mutex_unlock (&priv->lock);
}

/* Lets the queued jobs finish, then stops the threads. */
static void
stop_workers (KvExampleTierPrivate *priv)
{
  GThreadPool *pool = g_steal_pointer (&priv->pool);

  if (pool != NULL)
    g_thread_pool_free (pool, FALSE, TRUE);
}

static gboolean
kv_example_tier_submit (KvExampleTier  *self,
                        KvTransferJob  *job,
                        gboolean        is_load,
                        GError        **error)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);
  ExampleTask *task;

  if (priv->pool == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "%s has no worker threads", G_OBJECT_TYPE_NAME (self));
      return FALSE;
    }

  task = g_new (ExampleTask, 1);
  task->job = kv_transfer_job_ref (job);
  task->is_load = is_load;

  g_mutex_lock (&priv->lock);
  priv->n_in_flight++;
  g_mutex_unlock (&priv->lock);

  /* The pool's threads exist already (it is exclusive), so pushing cannot
   * fail and never blocks. */
  g_thread_pool_push (priv->pool, task, NULL);
  return TRUE;
}

static gboolean
kv_example_tier_submit_store (KvSecondaryTier  *tier,
                              KvTransferJob    *job,
                              GError          **error)
{
  return kv_example_tier_submit (KV_EXAMPLE_TIER (tier), job, FALSE, error);
}

static gboolean
kv_example_tier_submit_load (KvSecondaryTier  *tier,
                             KvTransferJob    *job,
                             GError          **error)
{
  return kv_example_tier_submit (KV_EXAMPLE_TIER (tier), job, TRUE, error);
}

static KvLookupResult
kv_example_tier_lookup (KvSecondaryTier *tier,
                        KvKey           *key,
                        KvRequest       *request)
{
  return kv_example_tier_contains (KV_EXAMPLE_TIER (tier), key)
    ? KV_LOOKUP_RESULT_HIT : KV_LOOKUP_RESULT_MISS;
}

static gboolean
kv_example_tier_has_pending_work (KvSecondaryTier *tier)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (KV_EXAMPLE_TIER (tier));
  gboolean pending;

  g_mutex_lock (&priv->lock);
  pending = priv->n_in_flight > 0;
  g_mutex_unlock (&priv->lock);

  return pending;
}

static KvOffloadPolicy
kv_example_tier_on_new_request (KvSecondaryTier *tier,
                                KvRequest       *request)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (KV_EXAMPLE_TIER (tier));

  return priv->offload_policy;
}

static gboolean
kv_example_tier_drain_jobs (KvSecondaryTier  *tier,
                            GError          **error)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (KV_EXAMPLE_TIER (tier));

  /* Wait on the workers, not on a main context: the owner thread may be
   * the one running it. */
  g_mutex_lock (&priv->lock);
  while (priv->n_in_flight > 0)
    g_cond_wait (&priv->idle_cond, &priv->lock);
  g_mutex_unlock (&priv->lock);

  return TRUE;
}

static gboolean
kv_example_tier_shutdown (KvSecondaryTier  *tier,
                          GError          **error)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (KV_EXAMPLE_TIER (tier));

  /* Through the vfunc, so that a subclass's drain (which may hold jobs of
   * its own) runs too. */
  if (!KV_SECONDARY_TIER_GET_CLASS (tier)->drain_jobs (tier, error))
    return FALSE;

  stop_workers (priv);
  return TRUE;
}

static void
kv_example_tier_constructed (GObject *object)
{
  KvExampleTier *self = KV_EXAMPLE_TIER (object);
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);
  g_autoptr(GError) error = NULL;

  G_OBJECT_CLASS (kv_example_tier_parent_class)->constructed (object);

  /* An exclusive pool starts its threads now, so a submit never has to. */
  priv->pool = g_thread_pool_new (kv_example_tier_worker, self,
                                  (gint) priv->n_workers, TRUE, &error);
  if (priv->pool == NULL)
    g_message ("%s: cannot start %u worker threads: %s; every job will be refused",
               G_OBJECT_TYPE_NAME (self), priv->n_workers, error->message);
}

static void
kv_example_tier_dispose (GObject *object)
{
  KvExampleTier *self = KV_EXAMPLE_TIER (object);
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);

  /* Without a shutdown, let the queued jobs finish: they read primary
   * slots and hold references to this tier's store. */
  stop_workers (priv);

  G_OBJECT_CLASS (kv_example_tier_parent_class)->dispose (object);
}

static void
kv_example_tier_finalize (GObject *object)
{
  KvExampleTier *self = KV_EXAMPLE_TIER (object);
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);

  g_clear_pointer (&priv->store, g_hash_table_unref);
  g_cond_clear (&priv->idle_cond);
  g_mutex_clear (&priv->lock);

  G_OBJECT_CLASS (kv_example_tier_parent_class)->finalize (object);
}

static void
kv_example_tier_get_property (GObject    *object,
                              guint       prop_id,
                              GValue     *value,
                              GParamSpec *pspec)
{
  KvExampleTier *self = KV_EXAMPLE_TIER (object);
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_N_WORKERS:
      g_value_set_uint (value, priv->n_workers);
      break;

    case PROP_OFFLOAD_POLICY:
      g_value_set_enum (value, priv->offload_policy);
      break;

    case PROP_ENABLE_EVENTS:
      g_value_set_boolean (value, priv->enable_events);
      break;

    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_example_tier_set_property (GObject      *object,
                              guint         prop_id,
                              const GValue *value,
                              GParamSpec   *pspec)
{
  KvExampleTier *self = KV_EXAMPLE_TIER (object);
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_N_WORKERS:
      priv->n_workers = g_value_get_uint (value);
      break;

    case PROP_OFFLOAD_POLICY:
      priv->offload_policy = g_value_get_enum (value);
      break;

    case PROP_ENABLE_EVENTS:
      priv->enable_events = g_value_get_boolean (value);
      break;

    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_example_tier_class_init (KvExampleTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  object_class->constructed = kv_example_tier_constructed;
  object_class->dispose = kv_example_tier_dispose;
  object_class->finalize = kv_example_tier_finalize;
  object_class->get_property = kv_example_tier_get_property;
  object_class->set_property = kv_example_tier_set_property;

  /* The required vfuncs, plus the optional ones this tier needs. */
  tier_class->medium = KV_MEDIUM_CPU;
  tier_class->lookup = kv_example_tier_lookup;
  tier_class->submit_store = kv_example_tier_submit_store;
  tier_class->submit_load = kv_example_tier_submit_load;
  tier_class->has_pending_work = kv_example_tier_has_pending_work;
  tier_class->on_new_request = kv_example_tier_on_new_request;
  tier_class->drain_jobs = kv_example_tier_drain_jobs;
  tier_class->shutdown = kv_example_tier_shutdown;

  klass->run_store = kv_example_tier_real_run_store;
  klass->run_load = kv_example_tier_real_run_load;

  /**
   * KvExampleTier:n-workers:
   *
   * The number of worker threads that copy bytes.
   */
  properties[PROP_N_WORKERS] =
    g_param_spec_uint ("n-workers", NULL, NULL,
                       1, 256, 2,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvExampleTier:offload-policy:
   *
   * What the tier asks to receive for every request
   * ([vfunc@Kv.SecondaryTier.on_new_request]).
   */
  properties[PROP_OFFLOAD_POLICY] =
    g_param_spec_enum ("offload-policy", NULL, NULL,
                       KV_TYPE_OFFLOAD_POLICY,
                       KV_OFFLOAD_POLICY_CHUNK_LEVEL,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvExampleTier:enable-events:
   *
   * Whether each successful store job queues one "stored" [struct@Kv.Event]
   * with the job's keys.
   */
  properties[PROP_ENABLE_EVENTS] =
    g_param_spec_boolean ("enable-events", NULL, NULL,
                          FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_example_tier_init (KvExampleTier *self)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);

  g_mutex_init (&priv->lock);
  g_cond_init (&priv->idle_cond);
  priv->store = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                       (GDestroyNotify) kv_key_unref,
                                       (GDestroyNotify) g_bytes_unref);
}

/**
 * kv_example_tier_new:
 * @primary: the primary tier's slot memory
 *
 * Creates an example tier with default settings, named `example`. Any
 * thread.
 *
 * Returns: (transfer full): a new tier
 */
KvExampleTier *
kv_example_tier_new (KvHostBuffer *primary)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);

  return g_object_new (KV_TYPE_EXAMPLE_TIER,
                       "primary", primary,
                       "tier-type", "example",
                       NULL);
}

/**
 * kv_example_tier_get_n_stored:
 * @self: an example tier
 *
 * The number of chunks stored. Any thread.
 *
 * Returns: the number of stored chunks
 */
guint
kv_example_tier_get_n_stored (KvExampleTier *self)
{
  KvExampleTierPrivate *priv;
  guint n;

  g_return_val_if_fail (KV_IS_EXAMPLE_TIER (self), 0);

  priv = kv_example_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  n = g_hash_table_size (priv->store);
  g_mutex_unlock (&priv->lock);

  return n;
}

/**
 * kv_example_tier_contains:
 * @self: an example tier
 * @key: a key
 *
 * Whether the bytes of @key are stored. Any thread.
 *
 * Returns: %TRUE if @key is stored
 */
gboolean
kv_example_tier_contains (KvExampleTier *self,
                          KvKey         *key)
{
  KvExampleTierPrivate *priv;
  gboolean found;

  g_return_val_if_fail (KV_IS_EXAMPLE_TIER (self), FALSE);
  g_return_val_if_fail (key != NULL, FALSE);

  priv = kv_example_tier_get_instance_private (self);
  g_mutex_lock (&priv->lock);
  found = g_hash_table_contains (priv->store, key);
  g_mutex_unlock (&priv->lock);

  return found;
}
