/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-transfer-job.h"
#include "kv-transfer-job-private.h"

#include <string.h>

#include "kv-clock.h"

/**
 * KvTransferJob:
 *
 * One transfer between the primary tier and one secondary tier (vLLM's
 * `TransferJob`): a store (cascade, primary → tier) or a promotion
 * (tier → primary) of some chunks.
 *
 * The keys and the primary slot of each key (chunk ids) are parallel
 * arrays. For a store the slots are pinned for the job's lifetime and the
 * tier reads them; for a promotion they are allocated, not yet readable
 * slots that the tier writes. Every job a tier receives must be reported
 * exactly once with a [struct@Kv.JobResult] of the same id.
 *
 * A job is immutable except for its submit time, which the manager (or a
 * test) sets before submitting it, and, for a promotion from a tier with
 * [property@Kv.SecondaryTier:lazy-promotion-allocation], its keys and slots,
 * which [method@Kv.SecondaryTier.reserve_load_slots] sets once. It is atomically reference counted, so
 * a tier may hand it to worker threads.
 */
struct _KvTransferJob
{
  gatomicrefcount ref_count;
  guint64 id;
  guint n_keys;
  gboolean is_promotion;
  KvKey **keys;        /* n_keys references, then NULL */
  guint32 *chunk_ids;  /* n_keys entries */
  KvRequest *request;
  gint64 submit_time;
};

G_DEFINE_BOXED_TYPE (KvTransferJob, kv_transfer_job, kv_transfer_job_ref, kv_transfer_job_unref)

/**
 * kv_transfer_job_new:
 * @id: the job id, unique within a manager
 * @keys: (array length=n_keys): the keys of the chunks to move
 * @chunk_ids: (array length=n_keys): the primary slot of each key
 * @n_keys: number of keys and chunk ids
 * @is_promotion: %TRUE for secondary → primary, %FALSE for a store
 * @request: the request the job is for
 *
 * Creates a job. The keys are referenced and the chunk ids copied. The
 * submit time is the current time of the default [class@Kv.Clock]; change
 * it with [method@Kv.TransferJob.set_submit_time].
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new job
 */
KvTransferJob *
kv_transfer_job_new (guint64          id,
                     KvKey * const   *keys,
                     const guint32   *chunk_ids,
                     guint            n_keys,
                     gboolean         is_promotion,
                     KvRequest       *request)
{
  KvTransferJob *self;

  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (chunk_ids != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (KV_IS_REQUEST (request), NULL);

  for (guint i = 0; i < n_keys; i++)
    g_return_val_if_fail (keys[i] != NULL, NULL);

  self = g_new0 (KvTransferJob, 1);
  g_atomic_ref_count_init (&self->ref_count);
  self->id = id;
  self->n_keys = n_keys;
  self->is_promotion = !!is_promotion;
  self->keys = g_new (KvKey *, n_keys + 1);
  for (guint i = 0; i < n_keys; i++)
    self->keys[i] = kv_key_ref (keys[i]);
  self->keys[n_keys] = NULL;
  self->chunk_ids = g_new0 (guint32, MAX (n_keys, 1));
  if (n_keys > 0)
    memcpy (self->chunk_ids, chunk_ids, n_keys * sizeof (guint32));
  self->request = g_object_ref (request);
  self->submit_time = kv_clock_get_time (kv_clock_get_default ());

  return self;
}

/**
 * kv_transfer_job_ref:
 * @self: a job
 *
 * Takes a reference on @self. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvTransferJob *
kv_transfer_job_ref (KvTransferJob *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);

  return self;
}

/**
 * kv_transfer_job_unref:
 * @self: (transfer full): a job
 *
 * Drops a reference on @self, freeing it when the last one is gone.
 * Thread-safe. The last reference also drops the job's reference on its
 * request, so tiers should release jobs on the owner thread or make sure the
 * manager still holds the request.
 */
void
kv_transfer_job_unref (KvTransferJob *self)
{
  g_return_if_fail (self != NULL);

  if (g_atomic_ref_count_dec (&self->ref_count))
    {
      for (guint i = 0; i < self->n_keys; i++)
        kv_key_unref (self->keys[i]);
      g_free (self->keys);
      g_free (self->chunk_ids);
      g_object_unref (self->request);
      g_free (self);
    }
}

/**
 * kv_transfer_job_get_id:
 * @self: a job
 *
 * Gets the id of the job, which its [struct@Kv.JobResult] repeats.
 *
 * May be called from any thread.
 *
 * Returns: the job id
 */
guint64
kv_transfer_job_get_id (const KvTransferJob *self)
{
  g_return_val_if_fail (self != NULL, 0);

  return self->id;
}

/**
 * kv_transfer_job_get_n_keys:
 * @self: a job
 *
 * Gets the number of keys (and chunk ids) of the job.
 *
 * May be called from any thread.
 *
 * Returns: the number of keys
 */
guint
kv_transfer_job_get_n_keys (const KvTransferJob *self)
{
  g_return_val_if_fail (self != NULL, 0);

  return self->n_keys;
}

/**
 * kv_transfer_job_get_keys:
 * @self: a job
 * @n_keys: (out) (optional): return location for the number of keys
 *
 * Gets the keys of the job. The array is also %NULL-terminated.
 *
 * May be called from any thread.
 *
 * Returns: (array length=n_keys) (transfer none): the keys, owned by @self
 */
KvKey * const *
kv_transfer_job_get_keys (const KvTransferJob *self,
                          guint               *n_keys)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (n_keys != NULL)
    *n_keys = self->n_keys;

  return self->keys;
}

/**
 * kv_transfer_job_get_key:
 * @self: a job
 * @index: an index below the number of keys
 *
 * Gets one key of the job.
 *
 * May be called from any thread.
 *
 * Returns: (transfer none): the key at @index
 */
KvKey *
kv_transfer_job_get_key (const KvTransferJob *self,
                         guint                index)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (index < self->n_keys, NULL);

  return self->keys[index];
}

/**
 * kv_transfer_job_get_chunk_ids:
 * @self: a job
 * @n_chunk_ids: (out) (optional): return location for the number of chunk
 *   ids, the same as the number of keys
 *
 * Gets the primary slot of each key, in key order. A load of a tier with
 * [property@Kv.SecondaryTier:lazy-promotion-allocation] has no slot
 * (%G_MAXUINT32) until the tier reserves them with
 * [method@Kv.SecondaryTier.reserve_load_slots].
 *
 * May be called from any thread.
 *
 * Returns: (array length=n_chunk_ids) (transfer none): the chunk ids, owned
 *   by @self
 */
const guint32 *
kv_transfer_job_get_chunk_ids (const KvTransferJob *self,
                               guint               *n_chunk_ids)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (n_chunk_ids != NULL)
    *n_chunk_ids = self->n_keys;

  return self->chunk_ids;
}

/**
 * kv_transfer_job_get_chunk_id:
 * @self: a job
 * @index: an index below the number of keys
 *
 * Gets the primary slot of one key of the job.
 *
 * May be called from any thread.
 *
 * Returns: the chunk id of the key at @index
 */
guint32
kv_transfer_job_get_chunk_id (const KvTransferJob *self,
                              guint                index)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (index < self->n_keys, 0);

  return self->chunk_ids[index];
}

/**
 * kv_transfer_job_is_promotion:
 * @self: a job
 *
 * Gets the direction of the job.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE for a promotion (secondary → primary), %FALSE for a store
 *   (primary → secondary)
 */
gboolean
kv_transfer_job_is_promotion (const KvTransferJob *self)
{
  g_return_val_if_fail (self != NULL, FALSE);

  return self->is_promotion;
}

/**
 * kv_transfer_job_get_request:
 * @self: a job
 *
 * Gets the request the job is for; the same object the tier saw in its
 * lookups for that request.
 *
 * May be called from any thread (see [class@Kv.Request] for what may be
 * read off the owner thread).
 *
 * Returns: (transfer none): the request
 */
KvRequest *
kv_transfer_job_get_request (const KvTransferJob *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  return self->request;
}

/**
 * kv_transfer_job_get_submit_time:
 * @self: a job
 *
 * Gets when the job was submitted, in microseconds on the time base of the
 * default [class@Kv.Clock] (monotonic time) unless it was set otherwise.
 * Back-pressure detectors measure a store's latency from it.
 *
 * May be called from any thread.
 *
 * Returns: the submit time in microseconds
 */
gint64
kv_transfer_job_get_submit_time (const KvTransferJob *self)
{
  g_return_val_if_fail (self != NULL, 0);

  return self->submit_time;
}

/**
 * kv_transfer_job_set_submit_time:
 * @self: a job
 * @submit_time_us: the submit time in microseconds, on the time base of the
 *   clock the manager uses
 *
 * Sets when the job was submitted, replacing the creation time. A manager
 * driven by another clock (such as a manual [class@Kv.Clock]) sets it from
 * that clock; tests back-date it to simulate slow transfers.
 *
 * Call on the owner thread, before the job is handed to a tier.
 */
void
kv_transfer_job_set_submit_time (KvTransferJob *self,
                                 gint64         submit_time_us)
{
  g_return_if_fail (self != NULL);

  self->submit_time = submit_time_us;
}

void
_kv_transfer_job_set_slots (KvTransferJob  *self,
                            KvKey * const  *keys,
                            const guint32  *chunk_ids,
                            guint           n_keys)
{
  KvKey **old_keys = self->keys;
  guint old_n_keys = self->n_keys;

  self->keys = g_new (KvKey *, n_keys + 1);
  for (guint i = 0; i < n_keys; i++)
    self->keys[i] = kv_key_ref (keys[i]);
  self->keys[n_keys] = NULL;
  g_free (self->chunk_ids);
  self->chunk_ids = g_new0 (guint32, MAX (n_keys, 1));
  if (n_keys > 0)
    memcpy (self->chunk_ids, chunk_ids, n_keys * sizeof (guint32));
  self->n_keys = n_keys;

  /* after: @keys may be the job's own */
  for (guint i = 0; i < old_n_keys; i++)
    kv_key_unref (old_keys[i]);
  g_free (old_keys);
}
