/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-primary-tier.h"
#include "kv-tiering-manager-private.h"

G_BEGIN_DECLS

/* kv_primary_tier_prepare_store() without the result object, for the
 * manager's promotions (one key per lookup). @to_store (borrowed keys) and
 * @chunk_ids have room for @n_keys. *@evicted points to room for @n_keys + 1
 * evicted keys (NULL-terminated, transfer full); a custom policy may swap in
 * an array of its own, which the caller frees when it differs from the one
 * it passed. FALSE with @error set (KV_TIER_ERROR_NO_SPACE) when the keys
 * cannot fit: nothing changed then. */
G_GNUC_INTERNAL
gboolean _kv_primary_tier_prepare_store_into (KvPrimaryTier  *self,
                                              KvKey * const  *keys,
                                              guint           n_keys,
                                              KvKey         **to_store,
                                              guint32        *chunk_ids,
                                              guint          *n_to_store,
                                              KvKey        ***evicted,
                                              guint          *n_evicted,
                                              GError        **error);

/* For a promotion failed while its tier may still write its slots: removes
 * the write-pending entries of @keys (they answer MISS from now on) but
 * keeps their slots out of the free list. Their numbers go to @slots (room
 * for @n_keys); returns how many. _kv_primary_tier_free_slots() gives them
 * back once the tier has answered. */
G_GNUC_INTERNAL
guint    _kv_primary_tier_drop_pending_keep_slots (KvPrimaryTier *self,
                                                   KvKey * const *keys,
                                                   guint          n_keys,
                                                   guint32       *slots);
G_GNUC_INTERNAL
void     _kv_primary_tier_free_slots              (KvPrimaryTier *self,
                                                   const guint32 *slots,
                                                   guint          n_slots);

/* kv_primary_tier_complete_store() of a successful write followed by
 * @n_pins (> 0) kv_primary_tier_prepare_read() calls, for the manager's
 * cascades: each chunk goes straight from "being written" to pinned
 * @n_pins times, with one lookup per key and no LRU move. @chunk_ids (room
 * for @n_keys) gets the slot of each key. Returns FALSE and changes nothing
 * unless every key is being written and the policy is the built-in LRU
 * (another policy hears every call of the long way). */
G_GNUC_INTERNAL
gboolean _kv_primary_tier_complete_store_pinned (KvPrimaryTier *self,
                                                 KvKey * const *keys,
                                                 guint          n_keys,
                                                 guint          n_pins,
                                                 guint32       *chunk_ids);

/* Called with a stamped entry's key and stamp when the entry goes away
 * (eviction, failed store, reset), before the key is released. */
typedef void (*KvPrimaryStampDropFunc) (KvKey    *key,
                                        guint64   stamp,
                                        gpointer  user_data);

/* kv_primary_tier_lookup() for the manager's hot path, without the type
 * checks. On a HIT, *@stamp points to the chunk's stamp: a 64-bit word the
 * manager's lookup accounting owns (0 when the chunk is stored), so that
 * counting a chunk once per request needs no second table probe. NULL
 * otherwise. Valid until the next call that changes the tier. */
G_GNUC_INTERNAL
KvLookupResult _kv_primary_tier_lookup_stamp (KvPrimaryTier  *self,
                                              const KvKey    *key,
                                              guint64       **stamp);

/* The stamp word of @key's entry, pending or not (NULL when the tier has
 * none): for the manager's accounting of the lookup that just promoted
 * the key into a new entry. Valid until the next call that changes the
 * tier. */
G_GNUC_INTERNAL
guint64       *_kv_primary_tier_stamp_of (KvPrimaryTier *self,
                                          const KvKey   *key);

/* Installs the owner of the stamps (one per primary tier: the manager that
 * records metrics); clears every stamp. NULL uninstalls. */
G_GNUC_INTERNAL
void           _kv_primary_tier_set_stamp_drop_func (KvPrimaryTier          *self,
                                                     KvPrimaryStampDropFunc  func,
                                                     gpointer                user_data);

/* A primary tier owned by a manager shares its owner thread: every entry
 * point (but the getters of construct-time values) then checks it. NULL
 * (when the manager goes away) turns the checks off. */
G_GNUC_INTERNAL
void           _kv_primary_tier_set_owner (KvPrimaryTier *self,
                                           KvOwnerThread *owner);

G_END_DECLS
