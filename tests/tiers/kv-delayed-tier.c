/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-delayed-tier.h"

#include <string.h>

struct _KvDelayedTier
{
  KvSecondaryTier parent_instance;

  GPtrArray *calls;           /* char* */
  GPtrArray *log;             /* char*, shared, nullable */
  GPtrArray *pending;         /* KvTransferJob */
  GHashTable *stored;         /* KvKey → GBytes */
  GHashTable *lookup_results; /* KvKey → KvLookupResult */
  KvOffloadPolicy policy;
  gboolean synchronous;
  gboolean fail_shutdown;
  KvDelayedTierServeFunc serve_func;
  gpointer serve_data;
  KvStats *stats;             /* returned by the next get_stats, nullable */
  guint n_get_stats;
};

G_DEFINE_FINAL_TYPE (KvDelayedTier, kv_delayed_tier, KV_TYPE_SECONDARY_TIER)

static void
record (KvDelayedTier *self,
        const char    *format,
        ...) G_GNUC_PRINTF (2, 3);

static void
record (KvDelayedTier *self,
        const char    *format,
        ...)
{
  va_list args;

  char *call;

  va_start (args, format);
  call = g_strdup_vprintf (format, args);
  va_end (args);
  if (self->log != NULL)
    g_ptr_array_add (self->log, g_strdup_printf ("%s: %s",
                                                 kv_secondary_tier_get_tier_type (KV_SECONDARY_TIER (self)),
                                                 call));
  g_ptr_array_add (self->calls, call);
}

static char *
keys_to_string (KvKey * const *keys,
                guint          n_keys)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; i < n_keys; i++)
    {
      g_autofree char *hex = kv_key_to_string (keys[i]);

      if (i > 0)
        g_string_append_c (s, ',');
      g_string_append (s, hex);
    }
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static char *
job_keys_to_string (KvTransferJob *job)
{
  guint n_keys;
  KvKey * const *keys = kv_transfer_job_get_keys (job, &n_keys);

  return keys_to_string (keys, n_keys);
}

/* Moves the bytes of @job (all of them when @n_ok is G_MAXUINT). */
static guint
move_bytes (KvDelayedTier *self,
            KvTransferJob *job,
            guint          n_ok)
{
  KvHostBuffer *buffer = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));
  gsize slot_size = kv_host_buffer_get_slot_size (buffer);
  guint n_keys = kv_transfer_job_get_n_keys (job);
  guint moved = 0;

  for (guint i = 0; i < n_keys && i < n_ok; i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint32 chunk_id = kv_transfer_job_get_chunk_id (job, i);
      guint8 *slot;

      /* a lazy load whose slots were never reserved has none */
      if (chunk_id >= kv_host_buffer_get_n_slots (buffer))
        break;
      slot = kv_host_buffer_peek_slot (buffer, chunk_id);

      if (kv_transfer_job_is_promotion (job))
        {
          GBytes *bytes = g_hash_table_lookup (self->stored, key);

          if (bytes == NULL)
            break;
          memcpy (slot, g_bytes_get_data (bytes, NULL), MIN (slot_size, g_bytes_get_size (bytes)));
        }
      else
        {
          g_hash_table_replace (self->stored, kv_key_ref (key), g_bytes_new (slot, slot_size));
        }
      moved++;
    }
  return moved;
}

static void
finish (KvDelayedTier *self,
        KvTransferJob *job,
        gboolean       success)
{
  g_autoptr(KvJobResult) result = NULL;
  guint n_keys = kv_transfer_job_get_n_keys (job);

  /* A lazy tier starts its load now: its slots are reserved now. */
  if (kv_transfer_job_is_promotion (job) &&
      kv_secondary_tier_get_lazy_promotion_allocation (KV_SECONDARY_TIER (self)) &&
      !kv_secondary_tier_reserve_load_slots (KV_SECONDARY_TIER (self), job, NULL))
    success = FALSE;
  n_keys = kv_transfer_job_get_n_keys (job);
  if (success)
    success = move_bytes (self, job, G_MAXUINT) == n_keys;
  result = kv_job_result_new (kv_transfer_job_get_id (job), success);
  if (success)
    kv_job_result_set_transfer_bytes (result, (gint64) n_keys *
                                      (gint64) kv_secondary_tier_get_block_size_bytes (KV_SECONDARY_TIER (self)));
  kv_secondary_tier_complete_job (KV_SECONDARY_TIER (self), result);
}

static KvLookupResult
kv_delayed_tier_lookup (KvSecondaryTier *tier,
                        KvKey           *key,
                        KvRequest       *request)
{
  KvDelayedTier *self = KV_DELAYED_TIER (tier);
  g_autofree char *hex = kv_key_to_string (key);
  gpointer forced;

  record (self, "lookup %s %s", hex, kv_request_get_id (request));
  if (g_hash_table_lookup_extended (self->lookup_results, key, NULL, &forced))
    return GPOINTER_TO_INT (forced);
  return g_hash_table_contains (self->stored, key) ? KV_LOOKUP_RESULT_HIT : KV_LOOKUP_RESULT_MISS;
}

static gboolean
submit (KvDelayedTier *self,
        KvTransferJob *job,
        const char    *what)
{
  g_autofree char *keys = job_keys_to_string (job);

  record (self, "%s %" G_GUINT64_FORMAT " %s %s", what, kv_transfer_job_get_id (job),
          kv_request_get_id (kv_transfer_job_get_request (job)), keys);
  if (self->synchronous)
    finish (self, job, TRUE);
  else
    g_ptr_array_add (self->pending, kv_transfer_job_ref (job));
  return TRUE;
}

static gboolean
kv_delayed_tier_submit_store (KvSecondaryTier  *tier,
                              KvTransferJob    *job,
                              GError          **error)
{
  return submit (KV_DELAYED_TIER (tier), job, "submit_store");
}

static gboolean
kv_delayed_tier_submit_load (KvSecondaryTier  *tier,
                             KvTransferJob    *job,
                             GError          **error)
{
  return submit (KV_DELAYED_TIER (tier), job, "submit_load");
}

static void
kv_delayed_tier_touch (KvSecondaryTier  *tier,
                       KvKey           **keys,
                       KvRequest        *request)
{
  KvDelayedTier *self = KV_DELAYED_TIER (tier);
  guint n_keys = 0;
  g_autofree char *s = NULL;

  while (keys[n_keys] != NULL)
    n_keys++;
  s = keys_to_string (keys, n_keys);
  record (self, "touch %s %s", kv_request_get_id (request), s);
}

static KvOffloadPolicy
kv_delayed_tier_on_new_request (KvSecondaryTier *tier,
                                KvRequest       *request)
{
  KvDelayedTier *self = KV_DELAYED_TIER (tier);

  record (self, "on_new_request %s", kv_request_get_id (request));
  return self->policy;
}

static void
kv_delayed_tier_on_request_finished (KvSecondaryTier *tier,
                                     KvRequest       *request)
{
  record (KV_DELAYED_TIER (tier), "on_request_finished %s", kv_request_get_id (request));
}

static void
kv_delayed_tier_serve_external_requests (KvSecondaryTier *tier,
                                         KvParentManager *parent)
{
  KvDelayedTier *self = KV_DELAYED_TIER (tier);

  record (self, "serve_external_requests");
  if (self->serve_func != NULL)
    self->serve_func (self, parent, self->serve_data);
}

static void
kv_delayed_tier_on_schedule_end (KvSecondaryTier *tier,
                                 KvScheduleEnd   *schedule_end)
{
  record (KV_DELAYED_TIER (tier), "on_schedule_end");
}

static gboolean
kv_delayed_tier_drain_jobs (KvSecondaryTier  *tier,
                            GError          **error)
{
  KvDelayedTier *self = KV_DELAYED_TIER (tier);

  record (self, "drain_jobs");
  kv_delayed_tier_complete_all (self, TRUE);
  return TRUE;
}

static gboolean
kv_delayed_tier_shutdown (KvSecondaryTier  *tier,
                          GError          **error)
{
  KvDelayedTier *self = KV_DELAYED_TIER (tier);

  record (self, "shutdown");
  if (self->fail_shutdown)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "injected shutdown failure");
      return FALSE;
    }
  /* Every job is reported, even the ones cancelled by shutdown. */
  kv_delayed_tier_complete_all (self, FALSE);
  return TRUE;
}

static gboolean
kv_delayed_tier_has_pending_work (KvSecondaryTier *tier)
{
  return KV_DELAYED_TIER (tier)->pending->len > 0;
}

static gboolean
kv_delayed_tier_register_metrics (KvSecondaryTier   *tier,
                                  KvMetricRegistry  *registry,
                                  GError           **error)
{
  return kv_metric_registry_add_counter (registry, KV_DELAYED_TIER_METRIC_OPERATIONS,
                                         "Operations the test tier reports through get_stats",
                                         NULL, error);
}

static KvStats *
kv_delayed_tier_get_stats (KvSecondaryTier *tier)
{
  KvDelayedTier *self = KV_DELAYED_TIER (tier);

  self->n_get_stats++;
  return g_steal_pointer (&self->stats);
}

static void
kv_delayed_tier_finalize (GObject *object)
{
  KvDelayedTier *self = KV_DELAYED_TIER (object);

  g_ptr_array_unref (self->calls);
  g_clear_pointer (&self->log, g_ptr_array_unref);
  g_ptr_array_unref (self->pending);
  g_hash_table_unref (self->stored);
  g_hash_table_unref (self->lookup_results);
  g_clear_object (&self->stats);

  G_OBJECT_CLASS (kv_delayed_tier_parent_class)->finalize (object);
}

static void
kv_delayed_tier_class_init (KvDelayedTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  object_class->finalize = kv_delayed_tier_finalize;

  tier_class->medium = KV_MEDIUM_STORAGE;
  tier_class->lookup = kv_delayed_tier_lookup;
  tier_class->submit_store = kv_delayed_tier_submit_store;
  tier_class->submit_load = kv_delayed_tier_submit_load;
  tier_class->touch = kv_delayed_tier_touch;
  tier_class->on_new_request = kv_delayed_tier_on_new_request;
  tier_class->on_request_finished = kv_delayed_tier_on_request_finished;
  tier_class->serve_external_requests = kv_delayed_tier_serve_external_requests;
  tier_class->on_schedule_end = kv_delayed_tier_on_schedule_end;
  tier_class->drain_jobs = kv_delayed_tier_drain_jobs;
  tier_class->shutdown = kv_delayed_tier_shutdown;
  tier_class->has_pending_work = kv_delayed_tier_has_pending_work;
  tier_class->register_metrics = kv_delayed_tier_register_metrics;
  tier_class->get_stats = kv_delayed_tier_get_stats;
}

static void
kv_delayed_tier_init (KvDelayedTier *self)
{
  self->calls = g_ptr_array_new_with_free_func (g_free);
  self->pending = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_transfer_job_unref);
  self->stored = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                        (GDestroyNotify) kv_key_unref,
                                        (GDestroyNotify) g_bytes_unref);
  self->lookup_results = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                                (GDestroyNotify) kv_key_unref, NULL);
}

KvDelayedTier *
kv_delayed_tier_new (KvHostBuffer *primary,
                     const char   *tier_type)
{
  return g_object_new (KV_TYPE_DELAYED_TIER,
                       "primary", primary,
                       "tier-type", tier_type != NULL ? tier_type : "delayed",
                       NULL);
}

char *
kv_delayed_tier_dup_calls (KvDelayedTier *self,
                           const char    *prefix)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < self->calls->len; i++)
    {
      const char *call = g_ptr_array_index (self->calls, i);

      if (prefix != NULL && !g_str_has_prefix (call, prefix))
        continue;
      if (s->len > 0)
        g_string_append (s, "; ");
      g_string_append (s, call);
    }
  return g_string_free (s, FALSE);
}

guint
kv_delayed_tier_count_calls (KvDelayedTier *self,
                             const char    *prefix)
{
  guint n = 0;

  for (guint i = 0; i < self->calls->len; i++)
    if (g_str_has_prefix (g_ptr_array_index (self->calls, i), prefix))
      n++;
  return n;
}

void
kv_delayed_tier_clear_calls (KvDelayedTier *self)
{
  g_ptr_array_set_size (self->calls, 0);
}

void
kv_delayed_tier_set_log (KvDelayedTier *self,
                         GPtrArray     *log)
{
  g_clear_pointer (&self->log, g_ptr_array_unref);
  if (log != NULL)
    self->log = g_ptr_array_ref (log);
}

guint
kv_delayed_tier_get_n_pending (KvDelayedTier *self)
{
  return self->pending->len;
}

KvTransferJob *
kv_delayed_tier_get_pending (KvDelayedTier *self,
                             guint          index)
{
  g_return_val_if_fail (index < self->pending->len, NULL);
  return g_ptr_array_index (self->pending, index);
}

void
kv_delayed_tier_complete_all (KvDelayedTier *self,
                              gboolean       success)
{
  g_autoptr(GPtrArray) pending = g_steal_pointer (&self->pending);

  self->pending = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_transfer_job_unref);
  for (guint i = 0; i < pending->len; i++)
    finish (self, g_ptr_array_index (pending, i), success);
}

/* Reports a pending job with the test's own @result; a partial promotion
 * moves the bytes of the keys the result names as landed. */
gboolean
kv_delayed_tier_complete_job_with (KvDelayedTier *self,
                                   guint64        job_id,
                                   KvJobResult   *result)
{
  for (guint i = 0; i < self->pending->len; i++)
    {
      KvTransferJob *job = g_ptr_array_index (self->pending, i);

      if (kv_transfer_job_get_id (job) != job_id)
        continue;
      if (kv_job_result_get_success (result))
        move_bytes (self, job, G_MAXUINT);
      kv_secondary_tier_complete_job (KV_SECONDARY_TIER (self), result);
      g_ptr_array_remove_index (self->pending, i);
      return TRUE;
    }
  return FALSE;
}

void
kv_delayed_tier_set_synchronous (KvDelayedTier *self,
                                 gboolean       synchronous)
{
  self->synchronous = synchronous;
}

void
kv_delayed_tier_set_lookup_result (KvDelayedTier  *self,
                                   KvKey          *key,
                                   KvLookupResult  result)
{
  g_hash_table_replace (self->lookup_results, kv_key_ref (key), GINT_TO_POINTER (result));
}

void
kv_delayed_tier_set_offload_policy (KvDelayedTier   *self,
                                    KvOffloadPolicy  policy)
{
  self->policy = policy;
}

void
kv_delayed_tier_set_serve_func (KvDelayedTier          *self,
                                KvDelayedTierServeFunc  func,
                                gpointer                user_data)
{
  self->serve_func = func;
  self->serve_data = user_data;
}

void
kv_delayed_tier_set_fail_shutdown (KvDelayedTier *self,
                                   gboolean       fail)
{
  self->fail_shutdown = fail;
}

void
kv_delayed_tier_put (KvDelayedTier *self,
                     KvKey         *key,
                     GBytes        *bytes)
{
  g_hash_table_replace (self->stored, kv_key_ref (key), g_bytes_ref (bytes));
}

GBytes *
kv_delayed_tier_get_stored (KvDelayedTier *self,
                            KvKey         *key)
{
  return g_hash_table_lookup (self->stored, key);
}

void
kv_delayed_tier_push_stored_event (KvDelayedTier *self,
                                   KvKey         *key)
{
  g_autoptr(KvEvent) event = kv_event_new (&key, 1, KV_MEDIUM_STORAGE, FALSE,
                                           kv_secondary_tier_get_locality (KV_SECONDARY_TIER (self)));

  kv_secondary_tier_push_event (KV_SECONDARY_TIER (self), event);
}

void
kv_delayed_tier_set_stats (KvDelayedTier *self,
                           KvStats       *stats)
{
  g_set_object (&self->stats, stats);
}

guint
kv_delayed_tier_get_n_get_stats (KvDelayedTier *self)
{
  return self->n_get_stats;
}
