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
 *  - submit_store()/submit_load() wrap the job in a KvTierJob and hand it
 *    to a worker thread;
 *  - the worker moves the bytes, marks each key of the KvTierJob (landed,
 *    skipped, missing or failed) and reports it once, which is safe from
 *    any thread.
 *
 * KvTierJob builds the job's result (by the one partial-load rule of
 * KvJobResult), fills its time and bytes and pushes the stored event of a
 * successful store when `enable-events` is set. The default
 * get_finished_jobs(), take_events() and drain_jobs() of KvSecondaryTier
 * drain what was reported and wait for the jobs in flight, so the tier
 * does not implement them.
 *
 * What it does not write either, because KvSecondaryTier does it for
 * every tier (doc/writing-a-tier.md, "Inherited liveness"):
 *
 *  - deadlines: with `deadline-ms = 2000` in its [tier] section, a job not
 *    reported within 2 s is reported failed by the library's watchdog and
 *    the worker's later report is dropped (kvtier_tier_late_completions);
 *  - the circuit breaker: `breaker-threshold = 5` failed jobs in a row
 *    make lookups answer MISS and jobs fail at once without reaching the
 *    tier, for `breaker-open-ms = 1000`; a tier with a cheap health check
 *    implements the optional probe vfunc to close it (this one has nothing
 *    to check: after the interval the next job decides);
 *  - the negative cache of failed loads.
 *
 * A tier whose I/O can outlive a deadline passes the KvTierJob's
 * cancellable to it (or sets a cancel func); this one only copies memory,
 * but a job can wait in the worker pool past its deadline, so a store
 * checks the cancellable after copying a slot and before publishing it.
 */

typedef struct
{
  /* Construct-only settings. */
  guint           n_workers;
  KvOffloadPolicy offload_policy;

  GThreadPool    *pool;

  /* Workers write the store while the owner thread looks keys up, so both
   * go through the lock; the copies themselves run outside it. */
  GMutex          lock;
  GHashTable     *store;       /* KvKey → GBytes (one slot of bytes) */
} KvExampleTierPrivate;

enum {
  PROP_0,
  PROP_N_WORKERS,
  PROP_OFFLOAD_POLICY,
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
 * are copied by worker threads and reported with [class@Kv.TierJob].
 * Subclasses can wrap the worker-thread hooks `run_store` and `run_load`
 * of [struct@Kv.ExampleTierClass].
 *
 * Like every tier it takes the settings of its base class:
 * [property@Kv.SecondaryTier:enable-events],
 * [property@Kv.SecondaryTier:deadline-ms] (0 here: memory copies always
 * finish), [property@Kv.SecondaryTier:breaker-threshold] and
 * [property@Kv.SecondaryTier:breaker-open-ms], settable from its
 * configuration section.
 */
G_DEFINE_TYPE_WITH_PRIVATE (KvExampleTier, kv_example_tier, KV_TYPE_SECONDARY_TIER)

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

/* Worker thread: copy the job's slots into new GBytes. */
static void
kv_example_tier_real_run_store (KvExampleTier *self,
                                KvTierJob     *tier_job)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);
  KvHostBuffer *primary = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));
  KvTransferJob *job = kv_tier_job_get_job (tier_job);
  KvKey * const *keys;
  const guint32 *chunk_ids;
  gsize slot_size;
  guint n_keys;

  keys = kv_transfer_job_get_keys (job, &n_keys);
  chunk_ids = kv_transfer_job_get_chunk_ids (job, NULL);
  slot_size = kv_secondary_tier_get_block_size_bytes (KV_SECONDARY_TIER (self));

  for (guint i = 0; i < n_keys; i++)
    {
      GBytes *bytes;

      /* left alone: a subclass decided about it */
      if (kv_tier_job_is_marked (tier_job, i))
        continue;

      /* Equal keys hold equal bytes: a stored chunk is never rewritten. */
      if (kv_example_tier_contains (self, keys[i]))
        {
          kv_tier_job_mark_skipped (tier_job, i);
          continue;
        }

      /* Copy outside the lock, so lookups never wait for a memcpy. The
       * manager keeps the slot pinned until the job is reported, or until
       * its deadline: a job that waited in the pool past it finds the
       * cancellable cancelled, and the slot may hold another chunk's bytes
       * by now. So the copy is published only if the job was not cancelled
       * once it was taken. */
      bytes = g_bytes_new (kv_host_buffer_peek_slot (primary, chunk_ids[i]), slot_size);
      if (g_cancellable_is_cancelled (kv_tier_job_get_cancellable (tier_job)))
        {
          g_bytes_unref (bytes);
          kv_tier_job_mark_remaining_failed (tier_job, KV_KEY_FAILURE_FLAGS_NONE, NULL);
          return;
        }

      g_mutex_lock (&priv->lock);
      if (!g_hash_table_contains (priv->store, keys[i]))
        g_hash_table_insert (priv->store, kv_key_ref (keys[i]), g_steal_pointer (&bytes));
      g_mutex_unlock (&priv->lock);

      g_clear_pointer (&bytes, g_bytes_unref);
      kv_tier_job_mark_landed (tier_job, i);
    }
}

/* Worker thread: copy stored bytes into the job's slots. Each key lands
 * or is missing on its own: the result lists every key that landed. */
static void
kv_example_tier_real_run_load (KvExampleTier *self,
                               KvTierJob     *tier_job)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);
  KvHostBuffer *primary = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));
  KvTransferJob *job = kv_tier_job_get_job (tier_job);
  KvKey * const *keys;
  const guint32 *chunk_ids;
  gsize slot_size;
  guint n_keys;

  keys = kv_transfer_job_get_keys (job, &n_keys);
  chunk_ids = kv_transfer_job_get_chunk_ids (job, NULL);
  slot_size = kv_secondary_tier_get_block_size_bytes (KV_SECONDARY_TIER (self));

  for (guint i = 0; i < n_keys; i++)
    {
      GBytes *bytes;

      if (kv_tier_job_is_marked (tier_job, i))
        continue;

      g_mutex_lock (&priv->lock);
      bytes = g_hash_table_lookup (priv->store, keys[i]);
      if (bytes != NULL)
        g_bytes_ref (bytes);
      g_mutex_unlock (&priv->lock);

      if (bytes == NULL)
        {
          kv_tier_job_mark_missing (tier_job, i);
          continue;
        }

      memcpy (kv_host_buffer_peek_slot (primary, chunk_ids[i]),
              g_bytes_get_data (bytes, NULL), slot_size);
      g_bytes_unref (bytes);
      kv_tier_job_mark_landed (tier_job, i);
    }
}

/* Thread pool function: run one job and report it. */
static void
kv_example_tier_worker (gpointer data,
                        gpointer user_data)
{
  KvTierJob *tier_job = data;
  KvExampleTier *self = user_data;
  KvExampleTierClass *klass = KV_EXAMPLE_TIER_GET_CLASS (self);
  KvHostBuffer *primary = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));

  if (!job_fits_primary (primary, kv_tier_job_get_job (tier_job)))
    {
      g_autoptr(GError) error = g_error_new_literal (KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                                                     "the job names a slot outside the primary buffer");

      kv_tier_job_mark_remaining_failed (tier_job, KV_KEY_FAILURE_FLAGS_NONE, error);
    }
  else if (kv_tier_job_is_load (tier_job))
    klass->run_load (self, tier_job);
  else
    klass->run_store (self, tier_job);

  /* Once: the result, its time and bytes, the stored event. */
  kv_tier_job_report (tier_job);
  g_object_unref (tier_job);
}

/* Stops the threads once the queued jobs finished; with @wait, waits for
 * that. */
static void
stop_workers (KvExampleTierPrivate *priv,
              gboolean              wait)
{
  GThreadPool *pool = g_steal_pointer (&priv->pool);

  if (pool != NULL)
    g_thread_pool_free (pool, FALSE, wait);
}

static gboolean
kv_example_tier_submit (KvSecondaryTier  *tier,
                        KvTransferJob    *job,
                        GError          **error)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (KV_EXAMPLE_TIER (tier));

  if (priv->pool == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "%s has no worker threads", G_OBJECT_TYPE_NAME (tier));
      return FALSE;
    }

  /* The pool's threads exist already (it is exclusive), so pushing cannot
   * fail and never blocks. */
  g_thread_pool_push (priv->pool, kv_tier_job_new (tier, job), NULL);
  return TRUE;
}

static KvLookupResult
kv_example_tier_lookup (KvSecondaryTier *tier,
                        KvKey           *key,
                        KvRequest       *request)
{
  return kv_example_tier_contains (KV_EXAMPLE_TIER (tier), key)
    ? KV_LOOKUP_RESULT_HIT : KV_LOOKUP_RESULT_MISS;
}

static KvOffloadPolicy
kv_example_tier_on_new_request (KvSecondaryTier *tier,
                                KvRequest       *request)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (KV_EXAMPLE_TIER (tier));

  return priv->offload_policy;
}

static gboolean
kv_example_tier_shutdown (KvSecondaryTier  *tier,
                          GError          **error)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (KV_EXAMPLE_TIER (tier));

  /* Through the vfunc, so that a subclass's drain (which may hold jobs of
   * its own) runs too; the default waits for every job in flight. */
  if (!KV_SECONDARY_TIER_GET_CLASS (tier)->drain_jobs (tier, error))
    return FALSE;

  stop_workers (priv, TRUE);
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

  /* Without a shutdown: no job is queued (each KvTierJob holds the tier),
   * but this may run on a worker that dropped the last reference, so the
   * threads end on their own. */
  stop_workers (priv, FALSE);

  G_OBJECT_CLASS (kv_example_tier_parent_class)->dispose (object);
}

static void
kv_example_tier_finalize (GObject *object)
{
  KvExampleTier *self = KV_EXAMPLE_TIER (object);
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);

  g_clear_pointer (&priv->store, g_hash_table_unref);
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
  tier_class->submit_store = kv_example_tier_submit;
  tier_class->submit_load = kv_example_tier_submit;
  tier_class->on_new_request = kv_example_tier_on_new_request;
  tier_class->shutdown = kv_example_tier_shutdown;

  klass->run_store = kv_example_tier_real_run_store;
  klass->run_load = kv_example_tier_real_run_load;

  /**
   * KvExampleTier:n-workers:
   *
   * The number of worker threads that copy bytes.
   */
  properties[PROP_N_WORKERS] =
    g_param_spec_uint ("n-workers", NULL,
                       "Worker threads that copy bytes",
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
    g_param_spec_enum ("offload-policy", NULL,
                       "What the tier asks to receive for every request",
                       KV_TYPE_OFFLOAD_POLICY,
                       KV_OFFLOAD_POLICY_CHUNK_LEVEL,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_example_tier_init (KvExampleTier *self)
{
  KvExampleTierPrivate *priv = kv_example_tier_get_instance_private (self);

  g_mutex_init (&priv->lock);
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
