/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

#include "kv-request.h"
#include "kv-secondary-tier.h"
#include "kv-tiering-manager-private.h"

G_BEGIN_DECLS

/* The manager's lookups beyond a primary hit and the promotions they
 * start (kv-promotions.c): asking the secondary tiers, allocating a slot
 * (or, for a lazy tier, claiming room) for each admitted hit, queuing the
 * step's promotions per (tier, request) and submitting them at its end,
 * reserving a lazy tier's slots when it starts a load, and the
 * hit-pending deadline of each request's waits on pending chunks.
 *
 * The primary-hit lookup stays in kv-tiering-manager.c, inlined into each
 * entry point; only keys the primary tier did not answer HIT for come
 * here. Owner thread only, no lock. */

/* Embedded in the manager; kv-promotions.c writes it, except the deadline
 * (the manager's property) and n_lazy_tiers (counted as tiers are added). */
typedef struct
{
  /* 0: off. A request waiting longer on a HIT_PENDING chunk gets MISS. */
  gint64 hit_pending_deadline_us;

  /* Keys of lazy promotions not reserved yet: they answer HIT_PENDING
   * though the primary tier does not know them. KvKey (owned) → the stamp
   * word the metrics hook gave the lookup that found it (see
   * KvTieringManagerHooks.lookup_settled), which moves into the key's
   * primary entry when the promotion reserves it; NULL for none (always
   * where a pointer has fewer than 64 bits). */
  GHashTable *lazy_promoting;
  guint n_lazy_tiers;
  /* Lazy promotions found by this step's lookups, submitted at its end:
   * until then the step's stores leave them room, as they would a slot
   * allocated at lookup time. */
  guint n_lazy_claims;

  /* addresses used as request-state owners */
  guint8 pending_wait_tag;      /* GHashTable KvKey → first HIT_PENDING time */
  guint8 promotion_failed_tag;  /* a lazy promotion of the request failed */
} KvPromotions;

G_GNUC_INTERNAL
void _kv_promotions_init     (KvPromotions *promotions);
G_GNUC_INTERNAL
void _kv_promotions_finalize (KvPromotions *promotions);

/* A request starts over or is finalized: its waits and failed lazy
 * promotions are forgotten. */
static inline void
_kv_promotions_forget_request (KvPromotions *promotions,
                               KvRequest    *request)
{
  kv_request_set_state (request, &promotions->promotion_failed_tag, NULL, NULL);
  kv_request_set_state (request, &promotions->pending_wait_tag, NULL, NULL);
}

/* A lazy promotion ended without reserving its slots: its keys stop
 * answering HIT_PENDING. */
G_GNUC_INTERNAL
void _kv_promotions_forget_lazy_keys (KvTieringManager *self,
                                      KvKey * const    *keys,
                                      guint             n_keys);

/* The per-tier queue of the step's promotions, made when tier @index is
 * added. */
G_GNUC_INTERNAL
void           _kv_tiering_manager_init_tier_promotions  (KvTieringManager  *self,
                                                          guint              index);
/* A key the primary tier answered @primary_result (not HIT) for. Out of
 * line, so that the primary-hit path inlined into each entry point stays
 * small. */
G_GNUC_INTERNAL G_GNUC_NO_INLINE
KvLookupResult _kv_tiering_manager_lookup_beyond_primary_hit (KvTieringManager *self,
                                                              KvKey            *key,
                                                              KvRequest        *request,
                                                              guint             exclude_tier,
                                                              KvLookupResult    primary_result);
/* The tier whose pending promotion for @request ends with @key (the one a
 * lookup just started), else KV_TIER_INDEX_NONE. */
G_GNUC_INTERNAL
guint          _kv_tiering_manager_find_promotion        (KvTieringManager  *self,
                                                          KvKey             *key,
                                                          KvRequest         *request);
/* Step end: submits the promotions queued this step, one job per (tier,
 * request). */
G_GNUC_INTERNAL
void           _kv_tiering_manager_flush_promotions      (KvTieringManager  *self);
/* The function a lazy tier calls through
 * kv_secondary_tier_reserve_load_slots(); @user_data is the manager. */
G_GNUC_INTERNAL
gboolean       _kv_tiering_manager_reserve_lazy_promotion (gpointer          user_data,
                                                           KvSecondaryTier  *tier,
                                                           KvTransferJob    *job,
                                                           GError          **error);
/* Whether storing @keys leaves room for this step's lazy claims. */
G_GNUC_INTERNAL
gboolean       _kv_tiering_manager_room_beside_claims    (KvTieringManager  *self,
                                                          KvKey * const     *keys,
                                                          guint              n_keys,
                                                          GError           **error);
/* reset_cache: drops the promotions never submitted (no I/O touched their
 * slots; lazy ones have none) and the lazy claims. */
G_GNUC_INTERNAL
void           _kv_tiering_manager_reset_promotions      (KvTieringManager  *self);

G_END_DECLS
