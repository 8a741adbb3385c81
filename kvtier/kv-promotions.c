/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-promotions-private.h"
#include "kv-tiering-manager-instance-private.h"

#include "kv-job-table-private.h"
#include "kv-transfer-job-private.h"

/* The manager's lookups beyond a primary hit and its promotions: see
 * kv-promotions-private.h. */

/* A (tier, request)'s promotions queued this step. */
typedef struct
{
  KvRequest *request;
  GPtrArray *keys;        /* KvKey, owned */
  GArray *chunk_ids;      /* guint32 */
} KvPendingPromotion;

static void
pending_promotion_free (gpointer data)
{
  KvPendingPromotion *p = data;

  g_object_unref (p->request);
  g_ptr_array_unref (p->keys);
  g_array_unref (p->chunk_ids);
  g_free (p);
}

void
_kv_promotions_init (KvPromotions *promotions)
{
  promotions->hit_pending_deadline_us = 60 * G_USEC_PER_SEC;
  promotions->lazy_promoting = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                                      (GDestroyNotify) kv_key_unref, NULL);
}

void
_kv_promotions_finalize (KvPromotions *promotions)
{
  g_clear_pointer (&promotions->lazy_promoting, g_hash_table_unref);
}

/* A lazy promotion's key keeps its lookup's stamp word as its value in
 * lazy_promoting, where a pointer holds 64 bits; elsewhere the lookup's
 * observations go to the metrics' tables. */
#if GLIB_SIZEOF_VOID_P == 8
#define LAZY_STAMPS 1
#define STAMP_TO_POINTER(stamp) ((gpointer) (guintptr) (stamp))
#define STAMP_FROM_POINTER(p) ((guint64) (guintptr) (p))
#else
#define LAZY_STAMPS 0
#define STAMP_TO_POINTER(stamp) NULL
#define STAMP_FROM_POINTER(p) 0
#endif

/* Takes @key out of the lazy promotions; returns the stamp word it kept. */
static guint64
take_lazy_key (KvTieringManager *self,
               KvKey            *key)
{
  gpointer stamp = NULL;
  gpointer owned = NULL;

  if (!g_hash_table_steal_extended (self->promotions.lazy_promoting, key, &owned, &stamp))
    return 0;
  kv_key_unref (owned);
  return STAMP_FROM_POINTER (stamp);
}

/* The stamp a lazy promotion kept for @key goes to the key's primary
 * entry (@to_entry, when it has one), or is dropped. */
static void
move_lazy_stamp (KvTieringManager *self,
                 KvKey            *key,
                 guint64           stamp,
                 gboolean          to_entry)
{
  if (stamp != 0 && self->hooks != NULL)
    self->hooks->stamp_moved (self->hooks_data, key, stamp,
                              to_entry ? _kv_primary_tier_stamp_of (self->primary, key) : NULL);
}

void
_kv_promotions_forget_lazy_keys (KvTieringManager *self,
                                 KvKey * const    *keys,
                                 guint             n_keys)
{
  for (guint i = 0; i < n_keys; i++)
    move_lazy_stamp (self, keys[i], take_lazy_key (self, keys[i]), FALSE);
}

void
_kv_tiering_manager_init_tier_promotions (KvTieringManager *self,
                                          guint             index)
{
  KvTierSlot *slot = tier_slot (self, index);

  slot->pending_loads = g_ptr_array_new_with_free_func (pending_promotion_free);
  slot->pending_loads_by_req = g_hash_table_new (g_str_hash, g_str_equal);
}

static KvPendingPromotion *
pending_promotion_for (KvTierSlot *slot,
                       KvRequest  *request)
{
  KvPendingPromotion *p = g_hash_table_lookup (slot->pending_loads_by_req,
                                               kv_request_get_id (request));

  if (p != NULL)
    return p;

  p = g_new (KvPendingPromotion, 1);
  p->request = g_object_ref (request);
  p->keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  p->chunk_ids = g_array_new (FALSE, FALSE, sizeof (guint32));
  g_ptr_array_add (slot->pending_loads, p);
  g_hash_table_insert (slot->pending_loads_by_req, (gpointer) kv_request_get_id (p->request), p);
  return p;
}

/* Allocates a primary slot for @key (state −1, so any later lookup of the
 * key this step answers HIT_PENDING) and defers the load to the end of the
 * step. FALSE when the primary tier has no room: the caller answers MISS,
 * never RETRY forever. */
static gboolean
initiate_promotion (KvTieringManager *self,
                    guint             tier,
                    KvKey            *key,
                    KvRequest        *request)
{
  KvKey *to_store[1];
  guint32 chunk_ids[1];
  KvKey *evicted_room[2];
  KvKey **evicted = evicted_room;
  guint n_keys, n_evicted;
  KvPendingPromotion *p;
  gboolean stored;

  {
    KvKey *one[2] = { key, NULL };

    if (!policy_admits (self, one, tier, TRUE))
      return FALSE;
  }

  if (tier_slot (self, tier)->lazy)
    {
      /* No slot now: the tier reserves it when it starts the load. */
      guint32 no_slot = G_MAXUINT32;

      g_hash_table_insert (self->promotions.lazy_promoting, kv_key_ref (key), NULL);
      self->promotions.n_lazy_claims++;
      p = pending_promotion_for (tier_slot (self, tier), request);
      g_ptr_array_add (p->keys, kv_key_ref (key));
      g_array_append_val (p->chunk_ids, no_slot);
      return TRUE;
    }

  /* As kv_primary_tier_prepare_store (&key, 1), without a result object. */
  stored = _kv_primary_tier_prepare_store_into (self->primary, &key, 1, to_store, chunk_ids,
                                                &n_keys, &evicted, &n_evicted, NULL);
  for (guint i = 0; i < n_evicted; i++)
    kv_key_unref (evicted[i]);
  if (evicted != evicted_room)
    g_free (evicted);
  if (!stored)
    {
      if (self->hooks != NULL)
        self->hooks->promotion_allocation_failed (self->hooks_data);
      return FALSE;
    }
  if (n_keys == 0)
    return FALSE;

  p = pending_promotion_for (tier_slot (self, tier), request);
  g_ptr_array_add (p->keys, kv_key_ref (to_store[0]));
  g_array_append_val (p->chunk_ids, chunk_ids[0]);
  return TRUE;
}

/* *@promoted_stamp: for the metrics hook, the stamp word of the primary
 * entry a promotion made, or @lazy_word for a lazy promotion (its key has
 * no entry yet, see KvPromotions.lazy_promoting); left NULL otherwise. */
static KvLookupResult
lookup_secondary (KvTieringManager *self,
                  KvKey            *key,
                  KvRequest        *request,
                  guint             exclude_tier,
                  guint64         **promoted_stamp,
                  guint64          *lazy_word)
{
  KvTierFilter *filter = kv_request_get_load_tier_filter (request);
  gboolean any_retry = FALSE;

  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvTierSlot *slot = tier_slot (self, i);
      KvLookupResult result;
      gint64 start;

      if (i == exclude_tier || !kv_tier_filter_allows (filter, slot->medium, slot->locality))
        continue;

      if (self->hooks != NULL)
        {
          start = g_get_monotonic_time ();
          result = kv_secondary_tier_lookup (slot->tier, key, request);
          self->hooks->tier_lookup (self->hooks_data, request, key, i + 1, result,
                                    g_get_monotonic_time () - start);
        }
      else
        {
          result = kv_secondary_tier_lookup (slot->tier, key, request);
        }
      switch (result)
        {
        case KV_LOOKUP_RESULT_HIT:
          if (self->promotions.n_lazy_tiers > 0 &&
              kv_request_get_state (request, &self->promotions.promotion_failed_tag) != NULL)
            return KV_LOOKUP_RESULT_MISS;
          if (!initiate_promotion (self, i, key, request))
            return KV_LOOKUP_RESULT_MISS;
          if (self->hooks != NULL && !slot->lazy)
            *promoted_stamp = _kv_primary_tier_stamp_of (self->primary, key);
          else if (self->hooks != NULL && LAZY_STAMPS)
            *promoted_stamp = lazy_word;
          return KV_LOOKUP_RESULT_HIT_PENDING;
        case KV_LOOKUP_RESULT_RETRY:
          /* keep asking: a later tier's HIT still wins */
          any_retry = TRUE;
          break;
        case KV_LOOKUP_RESULT_MISS:
        case KV_LOOKUP_RESULT_HIT_PENDING:
        default:
          break;
        }
    }

  return any_retry ? KV_LOOKUP_RESULT_RETRY : KV_LOOKUP_RESULT_MISS;
}

/* @key answers HIT_PENDING to @request, unless the request has waited on
 * it for hit-pending-deadline already: then MISS, and the request
 * recomputes the chunk. The wait runs from the first lookup that found the
 * key pending (not the one that started its promotion); a release is
 * counted once. */
/* A wait's start in a hash table value, without an allocation where a
 * pointer holds 64 bits; WAIT_RELEASED once the request was released. */
#if GLIB_SIZEOF_VOID_P == 8
#define WAIT_TO_POINTER(t) ((gpointer) (guintptr) (t))
#define WAIT_FROM_POINTER(p) ((gint64) (guintptr) (p))
#define WAIT_FREE NULL
#else
#define WAIT_TO_POINTER(t) ((gpointer) g_memdup2 (&(gint64) { (t) }, sizeof (gint64)))
#define WAIT_FROM_POINTER(p) (*(gint64 *) (p))
#define WAIT_FREE g_free
#endif
#define WAIT_RELEASED G_MININT64

static KvLookupResult
pending_or_released (KvTieringManager *self,
                     KvKey            *key,
                     KvRequest        *request)
{
  GHashTable *waits;
  gpointer value;
  gint64 now, since;

  if (self->promotions.hit_pending_deadline_us <= 0)
    return KV_LOOKUP_RESULT_HIT_PENDING;

  now = kv_clock_get_time (self->clock);
  waits = kv_request_get_state (request, &self->promotions.pending_wait_tag);
  if (waits == NULL)
    {
      waits = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                     (GDestroyNotify) kv_key_unref, WAIT_FREE);
      kv_request_set_state (request, &self->promotions.pending_wait_tag, waits,
                            (GDestroyNotify) g_hash_table_unref);
    }
  if (!g_hash_table_lookup_extended (waits, key, NULL, &value))
    {
      g_hash_table_insert (waits, kv_key_ref (key), WAIT_TO_POINTER (now));
      return KV_LOOKUP_RESULT_HIT_PENDING;
    }
  since = WAIT_FROM_POINTER (value);
  if (since == WAIT_RELEASED)
    return KV_LOOKUP_RESULT_MISS;
  if (now - since < self->promotions.hit_pending_deadline_us)
    return KV_LOOKUP_RESULT_HIT_PENDING;

  {
    g_autofree char *hex = kv_key_to_string (key);

    g_debug ("Request %s waited %.3f s on chunk %s, still pending: released to recompute it",
             kv_request_get_id (request), (now - since) / (gdouble) G_USEC_PER_SEC, hex);
  }
  /* counted once; the request recomputes the chunk */
  g_hash_table_insert (waits, kv_key_ref (key), WAIT_TO_POINTER (WAIT_RELEASED));
  HOOK (self, hit_pending_released, kv_request_get_id (request));
  return KV_LOOKUP_RESULT_MISS;
}

static KvLookupResult
lookup_beyond_primary_hit (KvTieringManager *self,
                           KvKey            *key,
                           KvRequest        *request,
                           guint             exclude_tier,
                           KvLookupResult    primary_result,
                           guint64         **promoted_stamp,
                           guint64          *lazy_word)
{
  gboolean lazy_key;

  /* A pending primary key is being written or promoted already: asking the
   * secondary tiers again would promote it twice. (Metrics count no
   * pending lookup.) */
  if (primary_result == KV_LOOKUP_RESULT_HIT_PENDING)
    return pending_or_released (self, key, request);

  /* So is a lazy promotion's key, which holds no primary slot yet (pending
   * for the metrics too); a request whose lazy promotion found no room
   * recomputes. */
  lazy_key = self->promotions.n_lazy_tiers > 0 &&
             g_hash_table_size (self->promotions.lazy_promoting) > 0 &&
             g_hash_table_contains (self->promotions.lazy_promoting, key);
  if (lazy_key && kv_request_get_state (request, &self->promotions.promotion_failed_tag) == NULL)
    return pending_or_released (self, key, request);

  if (self->hooks != NULL)
    self->hooks->primary_lookup (self->hooks_data, request, key, KV_LOOKUP_RESULT_MISS, NULL);
  if (lazy_key)
    return KV_LOOKUP_RESULT_MISS;
  /* A promotion that starts now starts no wait: the request's next lookup
   * of the chunk, a step later at most, does. The lookup that finds a chunk
   * in a tier stays free of the bookkeeping. */
  return lookup_secondary (self, key, request, exclude_tier, promoted_stamp, lazy_word);
}

/* A key the primary tier did not answer HIT for: out of line (in this
 * unit), so that the primary-hit path inlined into each entry point stays
 * small. */
KvLookupResult
_kv_tiering_manager_lookup_beyond_primary_hit (KvTieringManager *self,
                                               KvKey            *key,
                                               KvRequest        *request,
                                               guint             exclude_tier,
                                               KvLookupResult    primary_result)
{
  guint64 *promoted_stamp = NULL;
  guint64 lazy_word = 0;
  KvLookupResult result = lookup_beyond_primary_hit (self, key, request, exclude_tier,
                                                     primary_result, &promoted_stamp, &lazy_word);

  if (self->hooks != NULL)
    {
      self->hooks->lookup_settled (self->hooks_data, promoted_stamp);
      /* the lazy promotion's key keeps what the hook wrote */
      if (lazy_word != 0)
        g_hash_table_insert (self->promotions.lazy_promoting, kv_key_ref (key),
                             STAMP_TO_POINTER (lazy_word));
    }
  return result;
}

void
_kv_tiering_manager_flush_promotions (KvTieringManager *self)
{
  /* from now on each lazy load competes for room when its tier starts it */
  self->promotions.n_lazy_claims = 0;
  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvTierSlot *slot = tier_slot (self, i);
      g_autoptr(GPtrArray) batch = NULL;

      if (slot->pending_loads->len == 0)
        continue;

      batch = g_steal_pointer (&slot->pending_loads);
      slot->pending_loads = g_ptr_array_new_with_free_func (pending_promotion_free);
      g_hash_table_remove_all (slot->pending_loads_by_req);

      /* Admitted one key at a time at lookup. */
      for (guint j = 0; j < batch->len; j++)
        {
          KvPendingPromotion *p = g_ptr_array_index (batch, j);
          g_autoptr(GError) error = NULL;
          KvTransferJob *job;

          job = _kv_tiering_manager_register_job (self, (KvKey **) p->keys->pdata,
                                                  (guint32 *) p->chunk_ids->data, p->keys->len,
                                                  KV_JOB_KIND_PROMOTION, p->request, i, slot->lazy);
          if (!kv_secondary_tier_submit_load (slot->tier, job, &error))
            _kv_tiering_manager_refuse_job (self, i, job, error);
        }
    }
}

/* A lazy tier starts the load of @job: reserve its primary slots now
 * (kv_secondary_tier_reserve_load_slots()). Keys that reached the primary
 * tier meanwhile leave the job; when the rest does not fit, the job keeps
 * the longest prefix of its keys that does (none: the reservation fails),
 * the allocation failure is counted and the request's lookups of the keys
 * left out answer MISS, so it recomputes them. */
gboolean
_kv_tiering_manager_reserve_lazy_promotion (gpointer          user_data,
                                            KvSecondaryTier  *tier,
                                            KvTransferJob    *job,
                                            GError          **error)
{
  KvTieringManager *self = user_data;
  guint64 id = kv_transfer_job_get_id (job);
  KvJobEntry *entry;
  guint n_keys, n_fit, n_to_store = 0, n_evicted = 0;
  KvKey * const *keys;
  g_autofree KvKey **to_store = NULL;
  g_autofree guint32 *chunk_ids = NULL;
  g_autofree KvKey **evicted_room = NULL;
  g_autofree guint64 *stamps = NULL;
  KvKey **evicted;
  g_autoptr(GError) local_error = NULL;
  gboolean stored;

  OWNER_SERVE (self, FALSE);

  entry = _kv_job_table_lookup (&self->jobs, id);
  if (entry == NULL || entry->job != job)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND,
                   "Load job %" G_GUINT64_FORMAT " is not in flight (already reported, or "
                   "failed at its deadline): no primary slot reserved", id);
      return FALSE;
    }
  if (tier_slot (self, entry->tier)->tier != tier)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Load job %" G_GUINT64_FORMAT " belongs to tier #%u (%s), not to '%s'",
                   id, entry->tier + 1,
                   kv_secondary_tier_get_tier_type (tier_slot (self, entry->tier)->tier),
                   kv_secondary_tier_get_tier_type (tier));
      return FALSE;
    }
  if (!entry->lazy || entry->reserved)
    {
      if (entry->has_slots)
        return TRUE;
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE,
                   "Load job %" G_GUINT64_FORMAT " found no room in the primary tier", id);
      return FALSE;
    }
  entry->reserved = TRUE;

  keys = kv_transfer_job_get_keys (job, &n_keys);
  /* From now on the primary tier answers for them. */
  stamps = g_new (guint64, MAX (n_keys, 1));
  for (guint i = 0; i < n_keys; i++)
    stamps[i] = take_lazy_key (self, keys[i]);

  to_store = g_new (KvKey *, MAX (n_keys, 1));
  chunk_ids = g_new (guint32, MAX (n_keys, 1));
  evicted = evicted_room = g_new (KvKey *, n_keys + 1);
  n_fit = n_keys;
  stored = _kv_primary_tier_prepare_store_into (self->primary, keys, n_keys, to_store, chunk_ids,
                                                &n_to_store, &evicted, &n_evicted, &local_error);
  if (!stored)
    {
      /* A request uses its chunks in order: load the longest prefix that
       * fits (nothing changed when the whole job did not), recompute the
       * rest. */
      guint room = kv_primary_tier_get_n_free (self->primary) +
                   kv_primary_tier_get_n_evictable (self->primary);
      guint absent = 0;

      for (n_fit = 0; n_fit < n_keys; n_fit++)
        {
          if (kv_primary_tier_lookup (self->primary, keys[n_fit]) == KV_LOOKUP_RESULT_MISS &&
              ++absent > room)
            break;
        }
      if (n_fit > 0 && n_fit < n_keys)
        stored = _kv_primary_tier_prepare_store_into (self->primary, keys, n_fit, to_store,
                                                      chunk_ids, &n_to_store, &evicted,
                                                      &n_evicted, NULL);
    }
  for (guint i = 0; i < n_evicted; i++)
    kv_key_unref (evicted[i]);
  if (evicted != evicted_room)
    g_free (evicted);
  for (guint i = 0; i < n_keys; i++)
    move_lazy_stamp (self, keys[i], stamps[i], TRUE);

  if (!stored || n_fit < n_keys)
    {
      KvRequest *request = kv_transfer_job_get_request (job);

      if (self->hooks != NULL)
        self->hooks->promotion_allocation_failed (self->hooks_data);
      /* its chunks not loaded answer MISS to it from now on */
      kv_request_set_state (request, &self->promotions.promotion_failed_tag,
                            GINT_TO_POINTER (1), NULL);
      if (!stored)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE,
                       "No room in the primary tier for the %u chunks of load job %"
                       G_GUINT64_FORMAT " (request %s, which recomputes them): %s",
                       n_keys, id, kv_request_get_id (request), local_error->message);
          _kv_transfer_job_set_slots (job, NULL, NULL, 0);
          return FALSE;
        }
      g_debug ("Load job %" G_GUINT64_FORMAT " of request %s: room for its first %u chunks of %u "
               "in the primary tier; the request recomputes the rest",
               id, kv_request_get_id (request), n_fit, n_keys);
    }

  _kv_transfer_job_set_slots (job, to_store, chunk_ids, n_to_store);
  entry->has_slots = TRUE;
  HOOK (self, promotion_reserved, entry->tier + 1, n_to_store);
  return TRUE;
}

/* Whether storing @keys leaves room for the lazy promotions this step's
 * lookups found: they would have had their slots already had their tier
 * not been lazy, and the step's stores must not take them (the tier
 * reserves them at the step's end, when its loads start). */
gboolean
_kv_tiering_manager_room_beside_claims (KvTieringManager  *self,
                                        KvKey * const     *keys,
                                        guint              n_keys,
                                        GError           **error)
{
  guint room = kv_primary_tier_get_n_free (self->primary) +
               kv_primary_tier_get_n_evictable (self->primary);
  guint absent = 0;

  for (guint i = 0; i < n_keys; i++)
    if (kv_primary_tier_lookup (self->primary, keys[i]) == KV_LOOKUP_RESULT_MISS)
      absent++;
  if ((guint64) absent + self->promotions.n_lazy_claims <= room)
    return TRUE;
  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE,
               "prepare_store: no room for %u chunks in the primary tier beside the %u that "
               "this step's lookups are promoting (%u slots free or evictable)",
               absent, self->promotions.n_lazy_claims, room);
  return FALSE;
}

guint
_kv_tiering_manager_find_promotion (KvTieringManager *self,
                                    KvKey            *key,
                                    KvRequest        *request)
{
  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvPendingPromotion *p = g_hash_table_lookup (tier_slot (self, i)->pending_loads_by_req,
                                                   kv_request_get_id (request));

      if (p != NULL && p->keys->len > 0 &&
          kv_key_equal (g_ptr_array_index (p->keys, p->keys->len - 1), key))
        return i;
    }
  return KV_TIER_INDEX_NONE;
}

void
_kv_tiering_manager_reset_promotions (KvTieringManager *self)
{
  /* Never submitted, so no I/O touched their slots (lazy ones have none). */
  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvTierSlot *slot = tier_slot (self, i);

      g_hash_table_remove_all (slot->pending_loads_by_req);
      g_ptr_array_set_size (slot->pending_loads, 0);
    }
  if (self->hooks != NULL)
    {
      GHashTableIter iter;
      gpointer key, stamp;

      g_hash_table_iter_init (&iter, self->promotions.lazy_promoting);
      while (g_hash_table_iter_next (&iter, &key, &stamp))
        move_lazy_stamp (self, key, STAMP_FROM_POINTER (stamp), FALSE);
    }
  g_hash_table_remove_all (self->promotions.lazy_promoting);
  self->promotions.n_lazy_claims = 0;
}
