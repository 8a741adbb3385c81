/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-job-result.h"
#include "kv-job-result-private.h"

/**
 * KvJobResult:
 *
 * The outcome of one [struct@Kv.TransferJob] (vLLM's `JobResult`), reported
 * by a tier with [method@Kv.SecondaryTier.complete_job].
 *
 * `success` is %TRUE only if every key of the job was moved (for a store,
 * also a key the tier held already).
 *
 * One rule for partial loads, whatever the tier: a load's successful keys
 * list every key whose bytes landed in its primary slot and were verified,
 * in the job's key order, each once; `success` is %TRUE if and only if all
 * of them landed (the list is then not needed); when none landed the list
 * is %NULL (vLLM's `tuple(successful) or None`). A key that landed after
 * one that failed is listed too: the primary tier keeps every landed
 * chunk, and a request reads its prefix up to the first missing one. The
 * [class@Kv.TieringManager] checks the rule and treats a result that
 * breaks it as a failed job, with a critical naming the tier. A store's
 * successful keys are ignored. [class@Kv.TierJob] builds results by this
 * rule.
 *
 * The transfer time and byte count are optional measurements used by
 * metrics and back-pressure detection.
 *
 * A tier fills a result on any thread before completing the job; after that
 * it is read-only. Results are atomically reference counted.
 */
struct _KvJobResult
{
  gatomicrefcount ref_count;
  guint64 job_id;
  gboolean success;
  gboolean checksum_failed;
  guint n_successful_keys;
  KvKey **successful_keys; /* NULL when unset, else NULL-terminated refs */
  gdouble transfer_time;   /* seconds; < 0 = unknown */
  gint64 transfer_bytes;   /* < 0 = unknown */
};

G_DEFINE_BOXED_TYPE (KvJobResult, kv_job_result, kv_job_result_ref, kv_job_result_unref)

static void
clear_successful_keys (KvJobResult *self)
{
  if (self->successful_keys == NULL)
    return;

  for (guint i = 0; i < self->n_successful_keys; i++)
    kv_key_unref (self->successful_keys[i]);
  g_clear_pointer (&self->successful_keys, g_free);
  self->n_successful_keys = 0;
}

/**
 * kv_job_result_new:
 * @job_id: the id of the job this result reports
 * @success: %TRUE if every key of the job was moved
 *
 * Creates a result. The transfer time and byte count start unknown, no
 * successful keys are set and the checksum flag is clear.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new result
 */
KvJobResult *
kv_job_result_new (guint64  job_id,
                   gboolean success)
{
  KvJobResult *self = g_new0 (KvJobResult, 1);

  g_atomic_ref_count_init (&self->ref_count);
  self->job_id = job_id;
  self->success = !!success;
  self->transfer_time = -1.0;
  self->transfer_bytes = -1;

  return self;
}

/**
 * kv_job_result_ref:
 * @self: a result
 *
 * Takes a reference on @self. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvJobResult *
kv_job_result_ref (KvJobResult *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);

  return self;
}

/**
 * kv_job_result_unref:
 * @self: (transfer full): a result
 *
 * Drops a reference on @self, freeing it when the last one is gone.
 * Thread-safe.
 */
void
kv_job_result_unref (KvJobResult *self)
{
  g_return_if_fail (self != NULL);

  if (g_atomic_ref_count_dec (&self->ref_count))
    {
      clear_successful_keys (self);
      g_free (self);
    }
}

/**
 * kv_job_result_get_job_id:
 * @self: a result
 *
 * Gets the id of the job this result reports.
 *
 * May be called from any thread.
 *
 * Returns: the job id
 */
guint64
kv_job_result_get_job_id (const KvJobResult *self)
{
  g_return_val_if_fail (self != NULL, 0);

  return self->job_id;
}

/**
 * kv_job_result_get_success:
 * @self: a result
 *
 * Gets whether every key of the job was moved.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if the whole job succeeded
 */
gboolean
kv_job_result_get_success (const KvJobResult *self)
{
  g_return_val_if_fail (self != NULL, FALSE);

  return self->success;
}

/**
 * kv_job_result_set_successful_keys:
 * @self: a result
 * @keys: (array length=n_keys) (nullable): the keys of the job that were
 *   moved, or %NULL if @n_keys is 0
 * @n_keys: number of keys
 *
 * Says which keys of a partly failed promotion did land in the primary tier;
 * the others are dropped from it. By the partial-load rule (see
 * [struct@Kv.JobResult]) @keys are every key that landed and was verified,
 * in the job's order, each once. The keys are referenced; a previous set
 * is replaced. Setting an empty list is allowed and means that none
 * landed.
 *
 * Call before the result is handed to the manager, on any thread.
 */
void
kv_job_result_set_successful_keys (KvJobResult   *self,
                                   KvKey * const *keys,
                                   guint          n_keys)
{
  KvKey **copy;

  g_return_if_fail (self != NULL);
  g_return_if_fail (keys != NULL || n_keys == 0);

  for (guint i = 0; i < n_keys; i++)
    g_return_if_fail (keys[i] != NULL);

  /* Referenced before the old set is dropped, in case they overlap. */
  copy = g_new (KvKey *, n_keys + 1);
  for (guint i = 0; i < n_keys; i++)
    copy[i] = kv_key_ref (keys[i]);
  copy[n_keys] = NULL;

  clear_successful_keys (self);
  self->successful_keys = copy;
  self->n_successful_keys = n_keys;
}

/**
 * kv_job_result_has_successful_keys:
 * @self: a result
 *
 * Gets whether the tier said which keys succeeded
 * ([method@Kv.JobResult.set_successful_keys]), even if it said none did.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if successful keys were set
 */
gboolean
kv_job_result_has_successful_keys (const KvJobResult *self)
{
  g_return_val_if_fail (self != NULL, FALSE);

  return self->successful_keys != NULL;
}

/**
 * kv_job_result_get_successful_keys:
 * @self: a result
 * @n_keys: (out) (optional): return location for the number of keys
 *
 * Gets the keys that were moved by a partly failed job. The array is also
 * %NULL-terminated.
 *
 * May be called from any thread.
 *
 * Returns: (array length=n_keys) (transfer none) (nullable): the keys, owned
 *   by @self, or %NULL (and 0 keys) if they were not set
 */
KvKey * const *
kv_job_result_get_successful_keys (const KvJobResult *self,
                                   guint             *n_keys)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (n_keys != NULL)
    *n_keys = self->n_successful_keys;

  return self->successful_keys;
}

/**
 * kv_job_result_set_transfer_time:
 * @self: a result
 * @seconds: the time the tier spent moving the bytes, in seconds; negative
 *   for unknown
 *
 * Records how long the transfer took, as measured by the tier.
 *
 * Call before the result is handed to the manager, on any thread.
 */
void
kv_job_result_set_transfer_time (KvJobResult *self,
                                 gdouble      seconds)
{
  g_return_if_fail (self != NULL);

  self->transfer_time = seconds >= 0.0 ? seconds : -1.0;
}

/**
 * kv_job_result_get_transfer_time:
 * @self: a result
 *
 * Gets the time the tier spent moving the bytes.
 *
 * May be called from any thread.
 *
 * Returns: the time in seconds, or -1.0 if unknown
 */
gdouble
kv_job_result_get_transfer_time (const KvJobResult *self)
{
  g_return_val_if_fail (self != NULL, -1.0);

  return self->transfer_time;
}

/**
 * kv_job_result_set_transfer_bytes:
 * @self: a result
 * @bytes: the number of bytes actually moved; negative for unknown
 *
 * Records how many bytes the job moved. Back-pressure detection uses it,
 * falling back to the number of keys times the chunk size when unknown.
 *
 * Call before the result is handed to the manager, on any thread.
 */
void
kv_job_result_set_transfer_bytes (KvJobResult *self,
                                  gint64       bytes)
{
  g_return_if_fail (self != NULL);

  self->transfer_bytes = bytes >= 0 ? bytes : -1;
}

/**
 * kv_job_result_get_transfer_bytes:
 * @self: a result
 *
 * Gets how many bytes the job moved.
 *
 * May be called from any thread.
 *
 * Returns: the number of bytes, or -1 if unknown
 */
gint64
kv_job_result_get_transfer_bytes (const KvJobResult *self)
{
  g_return_val_if_fail (self != NULL, -1);

  return self->transfer_bytes;
}

/**
 * kv_job_result_set_checksum_failed:
 * @self: a result
 * @checksum_failed: %TRUE if a stored chunk failed its checksum
 *
 * Records that the job failed (at least partly) because stored data did not
 * match its checksum, for the checksum-failure metric.
 *
 * Call before the result is handed to the manager, on any thread.
 */
void
kv_job_result_set_checksum_failed (KvJobResult *self,
                                   gboolean     checksum_failed)
{
  g_return_if_fail (self != NULL);

  self->checksum_failed = !!checksum_failed;
}

/**
 * kv_job_result_get_checksum_failed:
 * @self: a result
 *
 * Gets whether stored data failed its checksum.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE if a checksum failed
 */
gboolean
kv_job_result_get_checksum_failed (const KvJobResult *self)
{
  g_return_val_if_fail (self != NULL, FALSE);

  return self->checksum_failed;
}

/* See kv-job-result-private.h. */
gboolean
_kv_job_result_follows_load_rule (const KvJobResult  *result,
                                  KvTransferJob      *job,
                                  const char        **why)
{
  guint n_keys;
  KvKey * const *keys = kv_transfer_job_get_keys (job, &n_keys);
  guint k = 0;
  const char *broken = NULL;

  if (result->n_successful_keys == 0)
    return TRUE;

  for (guint i = 0; i < result->n_successful_keys && broken == NULL; i++)
    {
      /* the next key of the job equal to it, after the last one matched */
      while (k < n_keys && !kv_key_equal (keys[k], result->successful_keys[i]))
        k++;
      if (k == n_keys)
        broken = "a successful key that is not a key of the job, or out of the job's order, "
                 "or listed twice";
      k++;
    }
  if (broken == NULL && result->success && result->n_successful_keys != n_keys)
    broken = "success with only some keys listed as successful";
  if (broken == NULL && !result->success && result->n_successful_keys == n_keys)
    broken = "every key listed as successful, but not success";

  if (why != NULL)
    *why = broken;
  return broken == NULL;
}
