/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-negative-cache-private.h"

#include "kv-job-result-private.h"

typedef struct
{
  KvTransferJob *job;
  KvJobResult   *result;
} FailedLoad;

static void
failed_load_free (FailedLoad *f)
{
  kv_transfer_job_unref (f->job);
  kv_job_result_unref (f->result);
  g_free (f);
}

KvNegativeCache *
_kv_negative_cache_new (void)
{
  KvNegativeCache *self = g_new0 (KvNegativeCache, 1);

  g_mutex_init (&self->lock);
  self->failed = g_ptr_array_new_with_free_func ((GDestroyNotify) failed_load_free);
  return self;
}

void
_kv_negative_cache_free (KvNegativeCache *self)
{
  if (self == NULL)
    return;
  g_ptr_array_unref (self->failed);
  g_mutex_clear (&self->lock);
  g_free (self);
}

void
_kv_negative_cache_add_failed_load (KvNegativeCache *self,
                                    KvTransferJob   *job,
                                    KvJobResult     *result)
{
  FailedLoad *f = g_new (FailedLoad, 1);

  f->job = kv_transfer_job_ref (job);
  f->result = kv_job_result_ref (result);
  g_mutex_lock (&self->lock);
  g_ptr_array_add (self->failed, f);
  g_atomic_int_set (&self->n_failed, self->failed->len);
  g_mutex_unlock (&self->lock);
}

void
_kv_negative_cache_apply (KvNegativeCache *self,
                          KvAsyncLookup   *async_lookup)
{
  g_autoptr(GPtrArray) failed = NULL;
  GPtrArray *fresh;

  if (g_atomic_int_get (&self->n_failed) == 0)
    return;

  fresh = g_ptr_array_new_with_free_func ((GDestroyNotify) failed_load_free);
  g_mutex_lock (&self->lock);
  failed = self->failed;
  self->failed = fresh;
  g_atomic_int_set (&self->n_failed, 0);
  g_mutex_unlock (&self->lock);

  for (guint i = 0; i < failed->len; i++)
    {
      FailedLoad *f = failed->pdata[i];
      KvRequest *request = kv_transfer_job_get_request (f->job);
      guint n_keys = 0, n_ok = 0, n_missed = 0;
      KvKey * const *keys = kv_transfer_job_get_keys (f->job, &n_keys);
      KvKey * const *ok = kv_job_result_get_successful_keys (f->result, &n_ok);
      g_autofree KvKey **missed = g_new (KvKey *, MAX (n_keys, 1));
      GHashTable *set = NULL;

      /* the manager fails the whole job of a result that breaks the rule */
      if (!_kv_job_result_follows_load_rule (f->result, f->job, NULL))
        n_ok = 0;

      /* Every key that did not land, not only the one that broke; the
       * landed ones are in the job's order (KvJobResult's rule). */
      for (guint k = 0, j = 0; k < n_keys; k++)
        {
          if (j < n_ok && kv_key_equal (ok[j], keys[k]))
            j++;
          else
            missed[n_missed++] = keys[k];
        }
      if (n_missed == 0)
        continue;

      if (async_lookup != NULL)
        kv_async_lookup_mark_miss (async_lookup, missed, n_missed);

      if (request == NULL)
        continue;
      set = kv_request_get_state (request, &self->tag);
      if (set == NULL)
        {
          set = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                       (GDestroyNotify) kv_key_unref, NULL);
          kv_request_set_state (request, &self->tag, set,
                                (GDestroyNotify) g_hash_table_unref);
        }
      for (guint k = 0; k < n_missed; k++)
        if (!g_hash_table_contains (set, missed[k]))
          g_hash_table_add (set, kv_key_ref (missed[k]));
      self->has_negatives = TRUE;
    }
}

gboolean
_kv_negative_cache_lookup_slow (KvNegativeCache *self,
                                KvKey           *key,
                                KvRequest       *request)
{
  GHashTable *negatives = kv_request_get_state (request, &self->tag);

  return negatives != NULL && g_hash_table_contains (negatives, key);
}
