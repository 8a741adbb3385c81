/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-tier-job.h"

/* Submits a job of @n keys on @slots to @tier (a KvSecondaryTier), drains
 * the tier and returns the job's result, checking that it is the only one
 * the tier reported. Stores: the caller filled the slots. @id 0 takes the
 * next id of this process; @request %NULL a new request. */
KvJobResult *
test_tier_run_job (gpointer        tier,
                   guint64         id,
                   gboolean        is_load,
                   KvKey * const  *keys,
                   const guint32  *slots,
                   guint           n,
                   KvRequest      *request)
{
  static guint64 next_id = G_GUINT64_CONSTANT (1) << 40;
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  g_autoptr(KvRequest) own_request = request ? g_object_ref (request) : kv_request_new ("req", NULL);
  g_autoptr(KvTransferJob) job = NULL;
  g_autoptr(GError) error = NULL;
  KvJobResult *found = NULL;
  KvJobResult **results;

  if (id == 0)
    id = next_id++;
  job = kv_transfer_job_new (id, keys, slots, n, is_load, own_request);
  if (is_load)
    g_assert_true (kv_secondary_tier_submit_load (st, job, &error));
  else
    g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
  g_assert_no_error (error);
  g_assert_true (kv_secondary_tier_drain_jobs (st, &error));
  g_assert_no_error (error);
  results = kv_secondary_tier_get_finished_jobs (st);
  for (guint i = 0; results != NULL && results[i] != NULL; i++)
    {
      g_assert_null (found);
      g_assert_cmpuint (kv_job_result_get_job_id (results[i]), ==, id);
      found = results[i];
    }
  g_free (results);
  g_assert_nonnull (found);
  return found;
}
