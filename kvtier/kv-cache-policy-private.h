/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-cache-policy.h"
#include "kv-lru-policy.h"

G_BEGIN_DECLS

/* The protected keys of one evict() call. A handful of keys is scanned
 * linearly; a store batch (tens of keys) is first filtered by a bit mask of
 * the keys' cached hashes, so that an unprotected candidate is usually
 * rejected in O(1) without building anything on the heap; only very large
 * sets are put in a hash set. */
#define KV_PROTECTED_MASK_WORDS 16

typedef struct
{
  KvKey * const *keys;
  guint          n_keys;
  GHashTable    *set;
  gboolean       use_mask;
  guint64        mask[KV_PROTECTED_MASK_WORDS];
} KvProtectedSet;

G_GNUC_INTERNAL
void     kv_protected_set_init     (KvProtectedSet *set,
                                    KvKey * const  *keys,
                                    guint           n_keys);
G_GNUC_INTERNAL
gboolean kv_protected_set_contains (const KvProtectedSet *set,
                                    const KvKey          *key);
G_GNUC_INTERNAL
void     kv_protected_set_clear    (KvProtectedSet *set);

/* The primary tier's fast path over the built-in LRU policy.
 *
 * The tier keeps the node returned for each key it inserts, so that
 * pinning, releasing and removing the key skip any lookup. @key is the key
 * the node was inserted for, kept referenced by the caller; a node that no
 * longer tracks it (the policy was changed behind the tier's back) is
 * ignored in favour of a lookup. Same semantics as the interface's insert,
 * mark_evictable / mark_non_evictable, remove and evict; @user_data is
 * attached to the node and handed back by _kv_lru_policy_evict_into(),
 * which evicts into caller-allocated @keys (room for @n + 1, then NULL;
 * transfer full) and fills @user_data[0..n-1] for them (NULL for keys
 * inserted through the interface), so that the tier finds its entries
 * without a lookup either.
 *
 * Protection is by epoch rather than by a set of keys: the tier calls
 * _kv_lru_policy_protect_begin(), then _kv_lru_policy_protect_node() for
 * each key of its batch that the policy may track (a key the tier has just
 * claimed has no node yet and needs none), then at most one
 * _kv_lru_policy_evict_into(), which skips the nodes protected since the
 * last begin and ends the protection.
 *
 * A tier that attaches itself also answers the policy's lookups by key
 * (the resolver returns the node it keeps for @key, or NULL): the nodes it
 * inserts then stay out of the policy's own table, so a store costs no
 * table insert and an eviction no table removal there, while every
 * interface method still finds those keys. Only one tier can attach; it
 * detaches before it drops the policy, which then keeps its keys in its
 * table. */
typedef struct _KvLruNode KvLruNode;
typedef KvLruNode *(*KvLruResolveFunc) (gpointer     user_data,
                                        const KvKey *key);

G_GNUC_INTERNAL
gboolean   _kv_lru_policy_attach             (KvLruPolicy      *self,
                                              KvLruResolveFunc  resolve,
                                              gpointer          resolve_data);
G_GNUC_INTERNAL
void       _kv_lru_policy_detach             (KvLruPolicy      *self);

G_GNUC_INTERNAL
KvLruNode *_kv_lru_policy_insert_node        (KvLruPolicy *self,
                                              KvKey       *key,
                                              gboolean     evictable,
                                              gpointer     user_data);
G_GNUC_INTERNAL
void       _kv_lru_policy_protect_begin      (KvLruPolicy *self);
G_GNUC_INTERNAL
void       _kv_lru_policy_protect_node       (KvLruPolicy *self,
                                              KvLruNode   *node,
                                              KvKey       *key);
G_GNUC_INTERNAL
gboolean   _kv_lru_policy_evict_into         (KvLruPolicy  *self,
                                              guint         n,
                                              KvKey       **keys,
                                              gpointer     *user_data);
G_GNUC_INTERNAL
void       _kv_lru_policy_set_node_evictable (KvLruPolicy *self,
                                              KvLruNode   *node,
                                              KvKey       *key,
                                              gboolean     evictable);
G_GNUC_INTERNAL
void       _kv_lru_policy_remove_node        (KvLruPolicy *self,
                                              KvLruNode   *node,
                                              KvKey       *key);

G_END_DECLS
