/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-job-table-private.h"
#include "kv-tiering-manager-instance-private.h"

#include <string.h>

#include "kv-job-result-private.h"
#include "kv-secondary-tier-private.h"
#include "kv-transfer-job-private.h"

/* The manager's job table: see kv-job-table-private.h. */

typedef struct
{
  guint64 id;
  GArray *slots;            /* guint32: a promotion's, out of use */
  GPtrArray *pinned;        /* KvKey: a cascade's, still pinned */
} HeldSlots;

static void
held_slots_free (gpointer data)
{
  HeldSlots *held = data;

  g_clear_pointer (&held->slots, g_array_unref);
  g_clear_pointer (&held->pinned, g_ptr_array_unref);
  g_free (held);
}

static void
job_entry_free (gpointer data)
{
  KvJobEntry *entry = data;

  kv_transfer_job_unref (entry->job);
  g_free (entry);
}

void
_kv_job_table_init (KvJobTable *table)
{
  table->next_id = 0;
  table->entries = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL, job_entry_free);
  table->held_slots = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL, held_slots_free);
  table->pins = NULL;
}

void
_kv_job_table_dispose (KvJobTable *table)
{
  g_clear_pointer (&table->entries, g_hash_table_unref);
  if (table->pins != NULL)
    {
      g_autoptr(GPtrArray) left = _kv_pin_table_close (table->pins, NULL);

      /* not unpinned here, where any thread may be: the leases' later
       * releases fail cleanly */
      g_clear_pointer (&table->pins, _kv_pin_table_unref);
    }
}

void
_kv_job_table_finalize (KvJobTable *table)
{
  g_clear_pointer (&table->held_slots, g_hash_table_unref);
}

KvTransferJob *
_kv_tiering_manager_register_job (KvTieringManager *self,
                                  KvKey * const    *keys,
                                  const guint32    *chunk_ids,
                                  guint             n_keys,
                                  KvJobKind         kind,
                                  KvRequest        *request,
                                  guint             tier,
                                  gboolean          lazy)
{
  KvJobEntry *entry = g_new (KvJobEntry, 1);

  entry->id = self->jobs.next_id++;
  entry->job = kv_transfer_job_new (entry->id, keys, chunk_ids, n_keys,
                                    kind == KV_JOB_KIND_PROMOTION, request);
  kv_transfer_job_set_submit_time (entry->job, kv_clock_get_time (self->clock));
  entry->tier = tier;
  entry->lazy = lazy;
  entry->reserved = FALSE;
  entry->has_slots = !lazy;
  entry->kind = kind;
  g_hash_table_insert (self->jobs.entries, &entry->id, entry);
  /* a lazy promotion's slots count from their reservation */
  HOOK (self, job_registered, tier + 1, kind, lazy ? 0 : n_keys);
  if (self->admission_iface->on_admitted != NULL)
    self->admission_iface->on_admitted (self->admission, entry->job, tier);
  return entry->job;
}

/* @keys NULL-terminated for the policy (binding-friendly): in @room when
 * it holds @n_keys + 1, else in *@heap, which the caller frees. */
static inline KvKey **
terminate_keys (KvKey * const *keys,
                guint          n_keys,
                KvKey        **room,
                guint          room_size,
                KvKey       ***heap)
{
  KvKey **terminated = room;

  if (n_keys + 1 > room_size)
    terminated = *heap = g_new (KvKey *, n_keys + 1);
  if (n_keys > 0)
    memcpy (terminated, keys, n_keys * sizeof (KvKey *));
  terminated[n_keys] = NULL;
  return terminated;
}

/* A tier that refuses a submission still gets its job reported exactly
 * once: the manager queues a failed result that the next poll consumes as
 * if the tier had reported it. */
void
_kv_tiering_manager_refuse_job (KvTieringManager *self,
                                guint             tier,
                                KvTransferJob    *job,
                                const GError     *error)
{
  KvTierSlot *slot = tier_slot (self, tier);

  g_warning ("Tier #%u (%s) refused %s job %" G_GUINT64_FORMAT ": %s",
             tier + 1, kv_secondary_tier_get_tier_type (slot->tier),
             kv_transfer_job_is_promotion (job) ? "load" : "store",
             kv_transfer_job_get_id (job), error->message);
  g_ptr_array_add (slot->refused, kv_job_result_new (kv_transfer_job_get_id (job), FALSE));
  _kv_tiering_manager_tier_queued (self);
}

/* Pins @keys for reading and registers a store job under @tier, which
 * admitted it. */
static KvTransferJob *
create_admitted_store_job (KvTieringManager  *self,
                           KvKey * const     *keys,
                           guint              n_keys,
                           KvRequest         *request,
                           guint              tier,
                           KvJobKind          kind,
                           GError           **error)
{
  guint32 stack_ids[64];
  g_autofree guint32 *heap_ids = NULL;
  guint32 *chunk_ids = stack_ids;

  if (n_keys > G_N_ELEMENTS (stack_ids))
    chunk_ids = heap_ids = g_new (guint32, n_keys);
  if (!kv_primary_tier_prepare_read (self->primary, keys, n_keys, chunk_ids, error))
    return NULL;
  return _kv_tiering_manager_register_job (self, keys, chunk_ids, n_keys, kind, request, tier,
                                           FALSE);
}

/* A tier's own store (KvParentManager): asks the admission policy first,
 * as a store to @tier (vLLM's create_store_job); a refusal pins nothing
 * and consumes no job id, and the tier answers its peer with a miss. */
KvTransferJob *
_kv_tiering_manager_create_store_job (KvTieringManager  *self,
                                      KvKey * const     *keys,
                                      guint              n_keys,
                                      KvRequest         *request,
                                      guint              tier,
                                      GError           **error)
{
  KvKey *room[65];
  g_autofree KvKey **heap = NULL;

  g_return_val_if_fail (tier < self->tiers->len, NULL);

  if (!policy_admits (self, terminate_keys (keys, n_keys, room, G_N_ELEMENTS (room), &heap),
                      tier, FALSE))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY,
                   "The admission policy (%s) refused a store of %u chunks to tier #%u (%s); "
                   "answer them as a miss",
                   G_OBJECT_TYPE_NAME (self->admission), n_keys, tier + 1,
                   kv_secondary_tier_get_tier_type (tier_slot (self, tier)->tier));
      return NULL;
    }
  return create_admitted_store_job (self, keys, n_keys, request, tier, KV_JOB_KIND_SERVED, error);
}

/* Pins the ready keys of @keys for @tier (KvParentManager.pin): all at
 * once when every key is ready, else one by one. No admission, no job: a
 * lease is not a transfer into a tier. The served-store metrics count it
 * as one served job. */
KvPinLease *
_kv_tiering_manager_pin (KvTieringManager  *self,
                         KvKey * const     *keys,
                         guint              n_keys,
                         guint              tier,
                         GError           **error)
{
  guint32 *chunk_ids;
  KvPinLease *lease;
  guint n_pinned = 0;

  g_return_val_if_fail (tier < self->tiers->len, NULL);
  OWNER_SERVE (self, NULL);

  if (self->shut_down)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                           "Cannot pin chunks: the tiering manager was shut down");
      return NULL;
    }

  chunk_ids = g_new (guint32, MAX (n_keys, 1));
  if (n_keys > 0 && kv_primary_tier_prepare_read (self->primary, keys, n_keys, chunk_ids, NULL))
    n_pinned = n_keys;
  else
    for (guint i = 0; i < n_keys; i++)
      if (kv_primary_tier_prepare_read (self->primary, &keys[i], 1, &chunk_ids[i], NULL))
        n_pinned++;
      else
        chunk_ids[i] = G_MAXUINT32;

  if (self->jobs.pins == NULL)
    self->jobs.pins = _kv_pin_table_new (self->clock, _kv_tiering_manager_tier_queued, self);
  lease = _kv_pin_table_add (self->jobs.pins, tier, keys, chunk_ids, n_keys);
  if (n_pinned > 0)
    HOOK (self, job_registered, tier + 1, KV_JOB_KIND_SERVED, n_pinned);
  return lease;
}

/* Unpins the chunks of a lease taken from the table (owner thread). */
static void
unpin_lease (KvTieringManager *self,
             KvPinLease       *lease)
{
  guint n_pinned;
  KvKey **pinned = _kv_pin_lease_get_pinned (lease, &n_pinned);

  if (n_pinned == 0)
    return;
  kv_primary_tier_complete_load (self->primary, pinned, n_pinned);
  if (self->hooks != NULL)
    {
      g_autoptr(KvJobResult) result = kv_job_result_new (0, _kv_pin_lease_get_success (lease));

      kv_job_result_set_transfer_time (result, _kv_pin_lease_get_held_time (lease));
      self->hooks->job_finished (self->hooks_data, _kv_pin_lease_get_tier (lease) + 1,
                                 KV_JOB_KIND_SERVED, n_pinned, result);
    }
}

static void
unpin_released_leases (KvTieringManager *self)
{
  g_autoptr(GPtrArray) released = _kv_pin_table_take_released (self->jobs.pins);

  for (guint i = 0; released != NULL && i < released->len; i++)
    unpin_lease (self, released->pdata[i]);
}

static void
submit_store_job (KvTieringManager *self,
                  guint             tier,
                  KvTransferJob    *job)
{
  g_autoptr(GError) error = NULL;

  if (!kv_secondary_tier_submit_store (tier_slot (self, tier)->tier, job, &error))
    _kv_tiering_manager_refuse_job (self, tier, job, error);
}

/* Whether @tier takes a cascade of @keys: a tier that does not accept
 * cascaded stores never does (nothing asked, nothing counted); an open
 * circuit breaker or the admission policy may drop it, and a dropped store
 * consumes no job id and pins nothing (reference §6.5; the tier or the
 * policy counts the drop). */
static gboolean
cascade_admitted (KvTieringManager *self,
                  KvKey * const    *terminated,
                  guint             tier)
{
  if (tier_slot (self, tier)->no_cascades)
    return FALSE;
  if (_kv_secondary_tier_reject_store (tier_slot (self, tier)->tier))
    return FALSE;
  return policy_admits (self, terminated, tier, FALSE);
}

/* Pins @keys (ready in the primary tier) and submits their store job to
 * @tier, which admitted it. */
static void
cascade_admitted_to_tier (KvTieringManager *self,
                          KvKey * const    *keys,
                          guint             n_keys,
                          KvRequest        *request,
                          guint             tier)
{
  g_autoptr(GError) error = NULL;
  KvTransferJob *job;

  job = create_admitted_store_job (self, keys, n_keys, request, tier, KV_JOB_KIND_CASCADE, &error);
  if (job == NULL)
    {
      g_warning ("Cannot cascade %u chunks of request %s to tier #%u (%s): %s",
                 n_keys, kv_request_get_id (request), tier + 1,
                 kv_secondary_tier_get_tier_type (tier_slot (self, tier)->tier),
                 error->message);
      return;
    }
  submit_store_job (self, tier, job);
}

/* Cascades @keys (ready in the primary tier) to @tier unless it drops the
 * store. */
void
_kv_tiering_manager_cascade_to_tier (KvTieringManager *self,
                                     KvKey * const    *keys,
                                     guint             n_keys,
                                     KvRequest        *request,
                                     guint             tier)
{
  KvKey *room[65];
  g_autofree KvKey **heap = NULL;

  if (cascade_admitted (self, terminate_keys (keys, n_keys, room, G_N_ELEMENTS (room), &heap),
                        tier))
    cascade_admitted_to_tier (self, keys, n_keys, request, tier);
}

/* A successful store of @keys, cascaded to every tier that admits it. In
 * the usual case (every key was being written) each chunk goes straight
 * from written to pinned once per cascade job, in one primary lookup per
 * key; otherwise the primary tier completes the store and each job pins
 * the chunks itself. */
void
_kv_tiering_manager_complete_store_and_cascade (KvTieringManager *self,
                                                KvKey * const    *keys,
                                                guint             n_keys,
                                                KvRequest        *request)
{
  guint *admitted = g_newa (guint, self->tiers->len);
  guint n_admitted = 0;
  guint32 stack_ids[64];
  g_autofree guint32 *heap_ids = NULL;
  guint32 *chunk_ids = stack_ids;
  KvKey *room[65];
  g_autofree KvKey **heap_keys = NULL;
  KvKey **terminated = NULL;

  for (guint i = 0; i < self->tiers->len; i++)
    {
      if (terminated == NULL)
        terminated = terminate_keys (keys, n_keys, room, G_N_ELEMENTS (room), &heap_keys);
      if (cascade_admitted (self, terminated, i))
        admitted[n_admitted++] = i;
    }

  if (n_keys > G_N_ELEMENTS (stack_ids))
    chunk_ids = heap_ids = g_new (guint32, n_keys);
  if (n_admitted > 0 &&
      _kv_primary_tier_complete_store_pinned (self->primary, keys, n_keys, n_admitted, chunk_ids))
    {
      for (guint i = 0; i < n_admitted; i++)
        submit_store_job (self, admitted[i],
                          _kv_tiering_manager_register_job (self, keys, chunk_ids, n_keys,
                                                            KV_JOB_KIND_CASCADE, request,
                                                            admitted[i], FALSE));
      return;
    }

  kv_primary_tier_complete_store (self->primary, keys, n_keys, TRUE);
  for (guint i = 0; i < n_admitted; i++)
    cascade_admitted_to_tier (self, keys, n_keys, request, admitted[i]);
}

/* Applies a load's result to the primary tier: its landed keys become
 * readable, the others are dropped. A result that breaks the partial-load
 * rule (KvJobResult) is a tier bug: trusting it could mark foreign slots
 * ready, so the whole job fails. */
static void
complete_promotion (KvTieringManager *self,
                    guint             tier,
                    KvTransferJob    *job,
                    KvJobResult      *result)
{
  guint n_keys, n_ok;
  KvKey * const *keys = kv_transfer_job_get_keys (job, &n_keys);
  KvKey * const *ok = kv_job_result_get_successful_keys (result, &n_ok);
  const char *why = NULL;

  if (!_kv_job_result_follows_load_rule (result, job, &why))
    {
      g_critical ("Tier #%u (%s) reported load job %" G_GUINT64_FORMAT " with a result that "
                  "breaks the partial-load rule (%s); the whole job is treated as failed",
                  tier + 1, kv_secondary_tier_get_tier_type (tier_slot (self, tier)->tier),
                  kv_transfer_job_get_id (job), why);
      kv_primary_tier_complete_store (self->primary, keys, n_keys, FALSE);
      return;
    }

  if (kv_job_result_get_success (result))
    {
      kv_primary_tier_complete_store (self->primary, keys, n_keys, TRUE);
      return;
    }
  if (n_ok == 0)
    {
      kv_primary_tier_complete_store (self->primary, keys, n_keys, FALSE);
      return;
    }

  {
    g_autofree KvKey **bad = g_new (KvKey *, n_keys - n_ok);
    guint n_bad = 0;

    /* the landed keys are a subsequence of the job's, in its order */
    for (guint k = 0, j = 0; k < n_keys; k++)
      {
        if (j < n_ok && kv_key_equal (ok[j], keys[k]))
          j++;
        else
          bad[n_bad++] = keys[k];
      }
    kv_primary_tier_complete_store (self->primary, ok, n_ok, TRUE);
    kv_primary_tier_complete_store (self->primary, bad, n_bad, FALSE);
  }
}

static void
process_result (KvTieringManager *self,
                guint             tier,
                KvJobResult      *result)
{
  KvTierSlot *slot = tier_slot (self, tier);
  guint64 id = kv_job_result_get_job_id (result);
  KvJobEntry *entry;
  KvTransferJob *job;
  gboolean lazy, reserved, has_slots;

  entry = g_hash_table_lookup (self->jobs.entries, &id);
  if (entry == NULL)
    {
      g_warning ("Tier #%u (%s) reported job %" G_GUINT64_FORMAT ", which is not in flight "
                 "(unknown, or already reported); ignoring it",
                 tier + 1, kv_secondary_tier_get_tier_type (slot->tier), id);
      return;
    }
  if (entry->tier != tier)
    {
      g_warning ("Tier #%u (%s) reported job %" G_GUINT64_FORMAT ", which belongs to tier #%u; "
                 "ignoring it", tier + 1, kv_secondary_tier_get_tier_type (slot->tier),
                 id, entry->tier + 1);
      return;
    }

  job = kv_transfer_job_ref (entry->job);
  lazy = entry->lazy;
  reserved = entry->reserved;
  has_slots = entry->has_slots;
  HOOK (self, job_finished, tier + 1, entry->kind,
        has_slots ? kv_transfer_job_get_n_keys (job) : 0, result);
  g_hash_table_remove (self->jobs.entries, &id);
  if (self->admission_iface->on_completed != NULL)
    self->admission_iface->on_completed (self->admission, job, tier, result);

  if (lazy && !has_slots)
    {
      guint n_keys;
      KvKey * const *keys = kv_transfer_job_get_keys (job, &n_keys);

      /* Never reserved (its keys still answer HIT_PENDING through
       * lazy_promoting), or its reservation failed (no key left): nothing
       * reached the primary tier. */
      if (!reserved)
        _kv_promotions_forget_lazy_keys (self, keys, n_keys);
      if (kv_job_result_get_success (result) && !reserved && n_keys > 0)
        g_warning ("Tier #%u (%s) reported load job %" G_GUINT64_FORMAT " as done without "
                   "reserving its primary slots (kv_secondary_tier_reserve_load_slots); "
                   "its chunks were not promoted",
                   tier + 1, kv_secondary_tier_get_tier_type (slot->tier), id);
    }
  else if (kv_transfer_job_is_promotion (job) && !kv_job_result_get_success (result) &&
           _kv_secondary_tier_hold_slots (slot->tier, id))
    {
      /* Failed at its deadline, but the tier may still write the slots:
       * the keys go, the slots wait for the tier's answer. */
      guint n_keys;
      KvKey * const *keys = kv_transfer_job_get_keys (job, &n_keys);
      HeldSlots *held = g_new (HeldSlots, 1);

      held->id = id;
      held->pinned = NULL;
      held->slots = g_array_sized_new (FALSE, FALSE, sizeof (guint32), n_keys);
      g_array_set_size (held->slots, n_keys);
      g_array_set_size (held->slots,
                        _kv_primary_tier_drop_pending_keep_slots (self->primary, keys, n_keys,
                                                                  (guint32 *) held->slots->data));
      g_hash_table_insert (self->jobs.held_slots, &held->id, held);
    }
  else if (kv_transfer_job_is_promotion (job))
    {
      complete_promotion (self, tier, job, result);
    }
  else if (!kv_job_result_get_success (result) && _kv_secondary_tier_hold_slots (slot->tier, id))
    {
      /* Failed at its deadline by a tier that cannot call a store back:
       * it may still read the slots and publish what they hold, so they
       * keep the job's bytes (stay pinned) until the tier answers. */
      guint n_keys;
      KvKey * const *keys = kv_transfer_job_get_keys (job, &n_keys);
      HeldSlots *held = g_new (HeldSlots, 1);

      held->id = id;
      held->slots = NULL;
      held->pinned = g_ptr_array_new_full (n_keys, (GDestroyNotify) kv_key_unref);
      for (guint i = 0; i < n_keys; i++)
        g_ptr_array_add (held->pinned, kv_key_ref (keys[i]));
      g_hash_table_insert (self->jobs.held_slots, &held->id, held);
    }
  else
    {
      guint n_keys;
      KvKey * const *keys = kv_transfer_job_get_keys (job, &n_keys);

      /* Cascade reads unpin whether or not the tier managed to store. */
      kv_primary_tier_complete_load (self->primary, keys, n_keys);
    }

  _kv_secondary_tier_emit_job_finished (slot->tier, result);
  kv_transfer_job_unref (job);
}

/* Frees (a promotion's) or unpins (a cascade's) slots held for a job
 * failed at its deadline. */
static void
release_held (KvTieringManager *self,
              HeldSlots        *held)
{
  if (held->slots != NULL)
    _kv_primary_tier_free_slots (self->primary, (guint32 *) held->slots->data, held->slots->len);
  if (held->pinned != NULL)
    kv_primary_tier_complete_load (self->primary, (KvKey * const *) held->pinned->pdata,
                                   held->pinned->len);
}

/* The tier answered jobs it had been failed for at their deadline: their
 * slots may be used again. */
static void
release_held_slots (KvTieringManager *self,
                    KvSecondaryTier  *tier)
{
  guint n_ids = 0;
  g_autofree guint64 *ids = _kv_secondary_tier_take_released (tier, &n_ids);

  for (guint i = 0; i < n_ids; i++)
    {
      HeldSlots *held = g_hash_table_lookup (self->jobs.held_slots, &ids[i]);

      if (held == NULL)
        continue;
      release_held (self, held);
      g_hash_table_remove (self->jobs.held_slots, &ids[i]);
    }
}

void
_kv_tiering_manager_process_results (KvTieringManager *self)
{
  if (_kv_job_table_has_released_leases (&self->jobs))
    unpin_released_leases (self);

  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvTierSlot *slot = tier_slot (self, i);
      g_autoptr(GPtrArray) refused = NULL;
      KvJobResult **results;

      if (slot->refused->len > 0)
        {
          refused = g_steal_pointer (&slot->refused);
          slot->refused = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
          for (guint j = 0; j < refused->len; j++)
            process_result (self, i, g_ptr_array_index (refused, j));
        }

      /* The default drain would return an empty array: no call, no
       * allocation in a step without completions. */
      if (slot->default_drain && !_kv_secondary_tier_has_queued_results (slot->tier))
        continue;

      results = kv_secondary_tier_get_finished_jobs (slot->tier);
      for (KvJobResult **r = results; *r != NULL; r++)
        {
          process_result (self, i, *r);
          kv_job_result_unref (*r);
        }
      g_free (results);
      release_held_slots (self, slot->tier);
    }
}

gboolean
_kv_tiering_manager_check_jobs_idle (KvTieringManager  *self,
                                     GError           **error)
{
  if (g_hash_table_size (self->jobs.held_slots) > 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY,
                   "reset_cache: a tier has not answered %u jobs failed at their deadline, "
                   "and may still touch their primary slots",
                   g_hash_table_size (self->jobs.held_slots));
      return FALSE;
    }
  if (self->jobs.pins != NULL && _kv_pin_table_get_n_held (self->jobs.pins) > 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY,
                   "reset_cache: %u pin leases (KvParentManager.pin) are still held, and "
                   "their primary slots may still be read",
                   _kv_pin_table_get_n_held (self->jobs.pins));
      return FALSE;
    }
  if (g_hash_table_size (self->jobs.entries) > 0)
    {
      GHashTableIter iter;
      gpointer value;
      KvJobEntry *entry;

      g_hash_table_iter_init (&iter, self->jobs.entries);
      g_hash_table_iter_next (&iter, NULL, &value);
      entry = value;
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "reset_cache: %u jobs are still in flight after every tier drained "
                   "(job %" G_GUINT64_FORMAT " of tier #%u (%s) was never reported)",
                   g_hash_table_size (self->jobs.entries), entry->id, entry->tier + 1,
                   kv_secondary_tier_get_tier_type (tier_slot (self, entry->tier)->tier));
      return FALSE;
    }
  return TRUE;
}

void
_kv_tiering_manager_release_held_pins (KvTieringManager *self)
{
  GHashTableIter iter;
  gpointer value;

  g_hash_table_iter_init (&iter, self->jobs.held_slots);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      HeldSlots *held = value;

      if (held->pinned == NULL)
        continue;
      kv_primary_tier_complete_load (self->primary, (KvKey * const *) held->pinned->pdata,
                                     held->pinned->len);
      g_hash_table_iter_remove (&iter);
    }
}

void
_kv_tiering_manager_close_pins (KvTieringManager *self)
{
  guint n_unreleased = 0;
  g_autoptr(GPtrArray) left = NULL;

  if (self->jobs.pins == NULL)
    return;
  left = _kv_pin_table_close (self->jobs.pins, &n_unreleased);
  if (n_unreleased > 0)
    g_warning ("%u pin leases (KvParentManager.pin) were not released before the "
               "manager shut down; their chunks are unpinned now, and releasing them "
               "later fails", n_unreleased);
  for (guint i = 0; left != NULL && i < left->len; i++)
    unpin_lease (self, left->pdata[i]);
}
