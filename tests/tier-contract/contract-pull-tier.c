/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "contract-pull-tier.h"

#include <string.h>

/*
 * A tier in C that reports its jobs the way vLLM's tiers do: it keeps its
 * results and hands them over when get_finished_jobs() is called (the pull
 * model), never through kv_secondary_tier_complete_job(). Chunks live in
 * memory with a checksum each; one worker thread moves the bytes. It
 * checks its job cancellable before publishing a store, and follows the
 * partial-load rule.
 *
 * Test hooks: a stall (the worker takes no job until it is lifted) and
 * damage (a stored chunk's bytes change under its checksum).
 */

struct _ContractPullTier
{
  KvSecondaryTier parent_instance;

  GThread    *worker;
  GMutex      lock;
  GCond       cond;         /* jobs queued, stall lifted, worker idle */
  GQueue      jobs;         /* KvTransferJob: submitted, not started */
  GHashTable *store;        /* KvKey → GBytes: checksum (8 bytes) + chunk */
  GPtrArray  *finished;     /* KvJobResult: finished, not collected */
  guint       n_running;    /* jobs queued or being moved */
  gboolean    stalled;
  gboolean    quit;
};

G_DEFINE_FINAL_TYPE (ContractPullTier, contract_pull_tier, KV_TYPE_SECONDARY_TIER)

static guint64
checksum_of (const guint8 *data,
             gsize         len)
{
  guint64 h = G_GUINT64_CONSTANT (14695981039346656037);

  for (gsize i = 0; i < len; i++)
    h = (h ^ data[i]) * G_GUINT64_CONSTANT (1099511628211);
  return h;
}

/* Worker thread: the job's bytes, moved; its result, by the rule. */
static KvJobResult *
run_job (ContractPullTier *self,
         KvTransferJob    *job)
{
  KvSecondaryTier *tier = KV_SECONDARY_TIER (self);
  KvHostBuffer *buffer = kv_secondary_tier_get_primary (tier);
  gsize len = kv_host_buffer_get_slot_size (buffer);
  guint n = kv_transfer_job_get_n_keys (job);
  KvKey * const *keys = kv_transfer_job_get_keys (job, NULL);
  const guint32 *slots = kv_transfer_job_get_chunk_ids (job, NULL);
  g_autoptr(GPtrArray) landed = g_ptr_array_new ();
  KvJobResult *result;

  if (!kv_transfer_job_is_promotion (job))
    {
      g_autoptr(GCancellable) cancellable = kv_secondary_tier_get_job_cancellable (tier, job);

      /* failed at its deadline: the slots are not the job's any more */
      if (cancellable != NULL && g_cancellable_is_cancelled (cancellable))
        return kv_job_result_new (kv_transfer_job_get_id (job), FALSE);
      for (guint i = 0; i < n; i++)
        {
          const guint8 *slot = kv_host_buffer_peek_slot (buffer, slots[i]);
          guint8 *record = g_malloc (8 + len);
          guint64 sum = checksum_of (slot, len);

          memcpy (record, &sum, 8);
          memcpy (record + 8, slot, len);
          g_mutex_lock (&self->lock);
          g_hash_table_replace (self->store, kv_key_ref (keys[i]), g_bytes_new_take (record, 8 + len));
          g_mutex_unlock (&self->lock);
        }
      result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);
      kv_job_result_set_transfer_bytes (result, (gint64) (n * len));
      return result;
    }

  for (guint i = 0; i < n; i++)
    {
      g_autoptr(GBytes) record = NULL;
      const guint8 *data;
      guint64 sum;

      g_mutex_lock (&self->lock);
      record = g_hash_table_lookup (self->store, keys[i]);
      if (record != NULL)
        g_bytes_ref (record);
      g_mutex_unlock (&self->lock);
      if (record == NULL)
        continue;
      data = g_bytes_get_data (record, NULL);
      memcpy (&sum, data, 8);
      if (checksum_of (data + 8, len) != sum)
        {
          /* damaged: forgotten, as the fs tier deletes a bad file */
          g_mutex_lock (&self->lock);
          g_hash_table_remove (self->store, keys[i]);
          g_mutex_unlock (&self->lock);
          continue;
        }
      memcpy (kv_host_buffer_peek_slot (buffer, slots[i]), data + 8, len);
      g_ptr_array_add (landed, keys[i]);
    }
  result = kv_job_result_new (kv_transfer_job_get_id (job), landed->len == n);
  if (landed->len > 0 && landed->len < n)
    kv_job_result_set_successful_keys (result, (KvKey * const *) landed->pdata, landed->len);
  kv_job_result_set_transfer_bytes (result, (gint64) (landed->len * len));
  return result;
}

static gpointer
worker_main (gpointer data)
{
  ContractPullTier *self = data;

  g_mutex_lock (&self->lock);
  for (;;)
    {
      KvTransferJob *job;
      KvJobResult *result;

      while (!self->quit && (self->stalled || g_queue_is_empty (&self->jobs)))
        g_cond_wait (&self->cond, &self->lock);
      if (self->quit && g_queue_is_empty (&self->jobs))
        break;
      job = g_queue_pop_head (&self->jobs);
      g_mutex_unlock (&self->lock);
      result = run_job (self, job);
      kv_transfer_job_unref (job);
      g_mutex_lock (&self->lock);
      g_ptr_array_add (self->finished, result);
      self->n_running--;
      g_cond_broadcast (&self->cond);
    }
  g_mutex_unlock (&self->lock);
  return NULL;
}

static gboolean
contract_pull_tier_submit (KvSecondaryTier  *tier,
                           KvTransferJob    *job,
                           GError          **error)
{
  ContractPullTier *self = CONTRACT_PULL_TIER (tier);

  g_mutex_lock (&self->lock);
  g_queue_push_tail (&self->jobs, kv_transfer_job_ref (job));
  self->n_running++;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

/* Its own results, after what the base class queued (the jobs its
 * watchdog failed at their deadline), as vLLM's tiers are polled. */
static KvJobResult **
contract_pull_tier_get_finished_jobs (KvSecondaryTier *tier)
{
  ContractPullTier *self = CONTRACT_PULL_TIER (tier);
  KvSecondaryTierClass *parent_class = KV_SECONDARY_TIER_CLASS (contract_pull_tier_parent_class);
  g_autofree KvJobResult **queued = parent_class->get_finished_jobs (tier);
  GPtrArray *results = g_ptr_array_new ();

  for (guint i = 0; queued != NULL && queued[i] != NULL; i++)
    g_ptr_array_add (results, queued[i]);
  g_mutex_lock (&self->lock);
  for (guint i = 0; i < self->finished->len; i++)
    g_ptr_array_add (results, self->finished->pdata[i]);
  g_ptr_array_set_free_func (self->finished, NULL);
  g_ptr_array_set_size (self->finished, 0);
  g_ptr_array_set_free_func (self->finished, (GDestroyNotify) kv_job_result_unref);
  g_mutex_unlock (&self->lock);
  g_ptr_array_add (results, NULL);
  return (KvJobResult **) g_ptr_array_free (results, FALSE);
}

static KvLookupResult
contract_pull_tier_lookup (KvSecondaryTier *tier,
                           KvKey           *key,
                           KvRequest       *request)
{
  ContractPullTier *self = CONTRACT_PULL_TIER (tier);
  gboolean found;

  g_mutex_lock (&self->lock);
  found = g_hash_table_contains (self->store, key);
  g_mutex_unlock (&self->lock);
  return found ? KV_LOOKUP_RESULT_HIT : KV_LOOKUP_RESULT_MISS;
}

static KvOffloadPolicy
contract_pull_tier_on_new_request (KvSecondaryTier *tier,
                                   KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

/* Waits for its own worker, as a vLLM tier does; the results stay for
 * get_finished_jobs(). */
static gboolean
contract_pull_tier_drain_jobs (KvSecondaryTier  *tier,
                               GError          **error)
{
  ContractPullTier *self = CONTRACT_PULL_TIER (tier);

  g_mutex_lock (&self->lock);
  while (self->n_running > 0)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

static gboolean
contract_pull_tier_shutdown (KvSecondaryTier  *tier,
                             GError          **error)
{
  ContractPullTier *self = CONTRACT_PULL_TIER (tier);

  g_mutex_lock (&self->lock);
  self->quit = TRUE;
  self->stalled = FALSE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  g_clear_pointer (&self->worker, g_thread_join);
  return TRUE;
}

static void
contract_pull_tier_finalize (GObject *object)
{
  ContractPullTier *self = CONTRACT_PULL_TIER (object);

  contract_pull_tier_shutdown (KV_SECONDARY_TIER (self), NULL);
  g_queue_clear_full (&self->jobs, (GDestroyNotify) kv_transfer_job_unref);
  g_hash_table_unref (self->store);
  g_ptr_array_unref (self->finished);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (contract_pull_tier_parent_class)->finalize (object);
}

static void
contract_pull_tier_class_init (ContractPullTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  object_class->finalize = contract_pull_tier_finalize;
  tier_class->lookup = contract_pull_tier_lookup;
  tier_class->submit_store = contract_pull_tier_submit;
  tier_class->submit_load = contract_pull_tier_submit;
  tier_class->get_finished_jobs = contract_pull_tier_get_finished_jobs;
  tier_class->on_new_request = contract_pull_tier_on_new_request;
  tier_class->drain_jobs = contract_pull_tier_drain_jobs;
  tier_class->shutdown = contract_pull_tier_shutdown;
}

static void
contract_pull_tier_init (ContractPullTier *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_queue_init (&self->jobs);
  self->store = g_hash_table_new_full ((GHashFunc) kv_key_hash, (GEqualFunc) kv_key_equal,
                                       (GDestroyNotify) kv_key_unref, (GDestroyNotify) g_bytes_unref);
  self->finished = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  self->worker = g_thread_new ("contract-pull", worker_main, self);
}

/* Holds every job not started yet until it is lifted. Any thread. */
void
contract_pull_tier_set_stalled (ContractPullTier *self,
                                gboolean          stalled)
{
  g_mutex_lock (&self->lock);
  self->stalled = stalled;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* Flips a bit of @key's stored bytes, under its checksum. */
void
contract_pull_tier_damage (ContractPullTier *self,
                           KvKey            *key)
{
  GBytes *record;
  guint8 *copy;
  gsize len;

  g_mutex_lock (&self->lock);
  record = g_hash_table_lookup (self->store, key);
  g_assert_nonnull (record);
  copy = g_bytes_unref_to_data (g_bytes_ref (record), &len);
  copy[8 + 99] ^= 0x10;
  g_hash_table_replace (self->store, kv_key_ref (key), g_bytes_new_take (copy, len));
  g_mutex_unlock (&self->lock);
}

/* Whether every accepted job is finished (its result may wait to be
 * collected). */
gboolean
contract_pull_tier_is_idle (ContractPullTier *self)
{
  gboolean idle;

  g_mutex_lock (&self->lock);
  idle = self->n_running == 0;
  g_mutex_unlock (&self->lock);
  return idle;
}
