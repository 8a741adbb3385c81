/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fault-tier.h"

/*
 * KvFaultTier: an example tier (so it really stores and loads bytes) that
 * fails, trims, stalls or refuses jobs on command. Test-only.
 *
 * The fault mode in force when a job is submitted decides what happens to
 * it; the delays are read by the worker when the job starts.
 */

typedef struct
{
  KvTransferJob *job;
  gboolean       is_load;
} StalledJob;

struct _KvFaultTier
{
  KvExampleTier parent_instance;

  GMutex        lock;
  KvFaultMode   store_fault;
  KvFaultMode   load_fault;
  guint64       store_delay_us;
  guint64       load_delay_us;
  GHashTable   *job_faults;  /* KvTransferJob* → KvFaultMode, FAIL/PARTIAL jobs */
  GPtrArray    *stalled;     /* StalledJob*, in submit order */
};

G_DEFINE_FINAL_TYPE (KvFaultTier, kv_fault_tier, KV_TYPE_EXAMPLE_TIER)

static void
stalled_job_free (StalledJob *stalled)
{
  kv_transfer_job_unref (stalled->job);
  g_free (stalled);
}

static gboolean
parent_submit (KvFaultTier    *self,
               KvTransferJob  *job,
               gboolean        is_load,
               GError        **error)
{
  KvSecondaryTierClass *parent_class = KV_SECONDARY_TIER_CLASS (kv_fault_tier_parent_class);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (self);

  return is_load ? parent_class->submit_load (tier, job, error)
                 : parent_class->submit_store (tier, job, error);
}

static gboolean
kv_fault_tier_submit (KvFaultTier    *self,
                      KvTransferJob  *job,
                      gboolean        is_load,
                      GError        **error)
{
  KvFaultMode mode;

  g_mutex_lock (&self->lock);
  mode = is_load ? self->load_fault : self->store_fault;
  switch (mode)
    {
    case KV_FAULT_STALL:
      {
        StalledJob *stalled = g_new (StalledJob, 1);

        stalled->job = kv_transfer_job_ref (job);
        stalled->is_load = is_load;
        g_ptr_array_add (self->stalled, stalled);
      }
      g_mutex_unlock (&self->lock);
      return TRUE;

    case KV_FAULT_SUBMIT_ERROR:
      g_mutex_unlock (&self->lock);
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "Fault tier refused %s job %" G_GUINT64_FORMAT " (KV_FAULT_SUBMIT_ERROR)",
                   is_load ? "load" : "store", kv_transfer_job_get_id (job));
      return FALSE;

    case KV_FAULT_FAIL:
    case KV_FAULT_PARTIAL:
      g_hash_table_insert (self->job_faults, job, GINT_TO_POINTER (mode));
      break;

    case KV_FAULT_NONE:
    default:
      break;
    }
  g_mutex_unlock (&self->lock);

  if (!parent_submit (self, job, is_load, error))
    {
      g_mutex_lock (&self->lock);
      g_hash_table_remove (self->job_faults, job);
      g_mutex_unlock (&self->lock);
      return FALSE;
    }
  return TRUE;
}

static gboolean
kv_fault_tier_submit_store (KvSecondaryTier  *tier,
                            KvTransferJob    *job,
                            GError          **error)
{
  return kv_fault_tier_submit (KV_FAULT_TIER (tier), job, FALSE, error);
}

static gboolean
kv_fault_tier_submit_load (KvSecondaryTier  *tier,
                           KvTransferJob    *job,
                           GError          **error)
{
  return kv_fault_tier_submit (KV_FAULT_TIER (tier), job, TRUE, error);
}

static void
parent_run (KvFaultTier *self,
            KvTierJob   *tier_job)
{
  KvExampleTierClass *parent_class = KV_EXAMPLE_TIER_CLASS (kv_fault_tier_parent_class);

  if (kv_tier_job_is_load (tier_job))
    parent_class->run_load (KV_EXAMPLE_TIER (self), tier_job);
  else
    parent_class->run_store (KV_EXAMPLE_TIER (self), tier_job);
}

/* Worker thread. */
static void
kv_fault_tier_run (KvExampleTier *example,
                   KvTierJob     *tier_job)
{
  KvFaultTier *self = KV_FAULT_TIER (example);
  KvTransferJob *job = kv_tier_job_get_job (tier_job);
  gpointer mode = GINT_TO_POINTER (KV_FAULT_NONE);
  guint64 delay_us;
  guint n_keys = kv_tier_job_get_n_keys (tier_job);
  g_autoptr(GError) error = NULL;

  g_mutex_lock (&self->lock);
  g_hash_table_steal_extended (self->job_faults, job, NULL, &mode);
  delay_us = kv_tier_job_is_load (tier_job) ? self->load_delay_us : self->store_delay_us;
  g_mutex_unlock (&self->lock);

  /* A slow device, for backpressure benchmarks. */
  if (delay_us > 0)
    g_usleep (delay_us);

  switch (GPOINTER_TO_INT (mode))
    {
    case KV_FAULT_FAIL:
      /* no byte moved */
      error = g_error_new_literal (KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "KV_FAULT_FAIL");
      kv_tier_job_mark_remaining_failed (tier_job, KV_KEY_FAILURE_FLAGS_NONE, error);
      break;

    case KV_FAULT_PARTIAL:
      /* the first half of the keys moves, the rest fails */
      error = g_error_new_literal (KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "KV_FAULT_PARTIAL");
      for (guint i = n_keys / 2; i < n_keys; i++)
        kv_tier_job_mark_failed (tier_job, i, KV_KEY_FAILURE_FLAGS_NONE, error);
      parent_run (self, tier_job);
      break;

    default:
      parent_run (self, tier_job);
      break;
    }
}

static GPtrArray *
steal_stalled (KvFaultTier *self)
{
  GPtrArray *stalled;

  g_mutex_lock (&self->lock);
  stalled = g_steal_pointer (&self->stalled);
  self->stalled = g_ptr_array_new_with_free_func ((GDestroyNotify) stalled_job_free);
  g_mutex_unlock (&self->lock);

  return stalled;
}

static gboolean
kv_fault_tier_has_pending_work (KvSecondaryTier *tier)
{
  KvFaultTier *self = KV_FAULT_TIER (tier);
  gboolean stalled;

  g_mutex_lock (&self->lock);
  stalled = self->stalled->len > 0;
  g_mutex_unlock (&self->lock);

  return stalled || KV_SECONDARY_TIER_CLASS (kv_fault_tier_parent_class)->has_pending_work (tier);
}

/* Held jobs are cancelled, and reported failed as drain_jobs() requires;
 * the jobs on the workers finish normally. */
static gboolean
kv_fault_tier_drain_jobs (KvSecondaryTier  *tier,
                          GError          **error)
{
  KvFaultTier *self = KV_FAULT_TIER (tier);
  g_autoptr(GPtrArray) stalled = steal_stalled (self);
  guint i;

  for (i = 0; i < stalled->len; i++)
    {
      StalledJob *held = g_ptr_array_index (stalled, i);
      g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (held->job), FALSE);

      kv_secondary_tier_complete_job (tier, result);
    }

  return KV_SECONDARY_TIER_CLASS (kv_fault_tier_parent_class)->drain_jobs (tier, error);
}

static void
kv_fault_tier_finalize (GObject *object)
{
  KvFaultTier *self = KV_FAULT_TIER (object);

  /* Jobs still held when the tier goes away are dropped unreported. */
  g_clear_pointer (&self->stalled, g_ptr_array_unref);
  g_clear_pointer (&self->job_faults, g_hash_table_unref);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_fault_tier_parent_class)->finalize (object);
}

static void
kv_fault_tier_class_init (KvFaultTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);
  KvExampleTierClass *example_class = KV_EXAMPLE_TIER_CLASS (klass);

  object_class->finalize = kv_fault_tier_finalize;

  tier_class->submit_store = kv_fault_tier_submit_store;
  tier_class->submit_load = kv_fault_tier_submit_load;
  tier_class->has_pending_work = kv_fault_tier_has_pending_work;
  tier_class->drain_jobs = kv_fault_tier_drain_jobs;

  example_class->run_store = kv_fault_tier_run;
  example_class->run_load = kv_fault_tier_run;
}

static void
kv_fault_tier_init (KvFaultTier *self)
{
  g_mutex_init (&self->lock);
  self->job_faults = g_hash_table_new (NULL, NULL);
  self->stalled = g_ptr_array_new_with_free_func ((GDestroyNotify) stalled_job_free);
}

/* Creates a fault tier named "fault" with no fault set. */
KvFaultTier *
kv_fault_tier_new (KvHostBuffer *primary)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);

  return g_object_new (KV_TYPE_FAULT_TIER,
                       "primary", primary,
                       "tier-type", "fault",
                       NULL);
}

/* What to do with store jobs submitted from now on. Owner thread. */
void
kv_fault_tier_set_store_fault (KvFaultTier *self,
                               KvFaultMode  mode)
{
  g_return_if_fail (KV_IS_FAULT_TIER (self));

  g_mutex_lock (&self->lock);
  self->store_fault = mode;
  g_mutex_unlock (&self->lock);
}

/* What to do with load jobs submitted from now on. Owner thread. */
void
kv_fault_tier_set_load_fault (KvFaultTier *self,
                              KvFaultMode  mode)
{
  g_return_if_fail (KV_IS_FAULT_TIER (self));

  g_mutex_lock (&self->lock);
  self->load_fault = mode;
  g_mutex_unlock (&self->lock);
}

/* How long a worker sleeps before running a store job. Any thread. */
void
kv_fault_tier_set_store_delay_us (KvFaultTier *self,
                                  guint64      delay_us)
{
  g_return_if_fail (KV_IS_FAULT_TIER (self));

  g_mutex_lock (&self->lock);
  self->store_delay_us = delay_us;
  g_mutex_unlock (&self->lock);
}

/* How long a worker sleeps before running a load job. Any thread. */
void
kv_fault_tier_set_load_delay_us (KvFaultTier *self,
                                 guint64      delay_us)
{
  g_return_if_fail (KV_IS_FAULT_TIER (self));

  g_mutex_lock (&self->lock);
  self->load_delay_us = delay_us;
  g_mutex_unlock (&self->lock);
}

/* The number of jobs held by KV_FAULT_STALL. Any thread. */
guint
kv_fault_tier_get_n_stalled (KvFaultTier *self)
{
  guint n;

  g_return_val_if_fail (KV_IS_FAULT_TIER (self), 0);

  g_mutex_lock (&self->lock);
  n = self->stalled->len;
  g_mutex_unlock (&self->lock);

  return n;
}

/* Hands every held job to the workers, where it runs normally. Owner
 * thread (it submits to the example tier). */
void
kv_fault_tier_release_stalled (KvFaultTier *self)
{
  g_autoptr(GPtrArray) stalled = NULL;
  guint i;

  g_return_if_fail (KV_IS_FAULT_TIER (self));

  stalled = steal_stalled (self);
  for (i = 0; i < stalled->len; i++)
    {
      StalledJob *held = g_ptr_array_index (stalled, i);
      g_autoptr(GError) error = NULL;

      /* The job was accepted, so it must be reported even if the workers
       * are gone. */
      if (!parent_submit (self, held->job, held->is_load, &error))
        {
          g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (held->job), FALSE);

          kv_secondary_tier_complete_job (KV_SECONDARY_TIER (self), result);
        }
    }
}
