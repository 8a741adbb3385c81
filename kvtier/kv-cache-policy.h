/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"

G_BEGIN_DECLS

#define KV_TYPE_CACHE_POLICY (kv_cache_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_INTERFACE (KvCachePolicy, kv_cache_policy, KV, CACHE_POLICY, GObject)

/**
 * KvCachePolicyInterface:
 * @insert: start tracking @key; @evictable says whether it may be evicted now.
 * @remove: stop tracking @key (no-op if unknown).
 * @touch: mark @keys recently used; the first key ends up most recent.
 * @mark_evictable: @key's reference count reached zero.
 * @mark_non_evictable: @key's reference count left zero.
 * @evict: choose exactly @n evictable keys that are not protected and stop
 *   tracking them, or change nothing and return %NULL.
 * @clear: forget every key.
 * @get_n_evictable: how many tracked keys may be evicted now.
 *
 * The eviction policy of a [class@Kv.PrimaryTier]. All methods run on the
 * owner thread; the primary tier owns the keys' states, the policy only
 * orders them.
 */
struct _KvCachePolicyInterface
{
  GTypeInterface g_iface;

  void     (*insert)             (KvCachePolicy *self,
                                  KvKey         *key,
                                  gboolean       evictable);
  void     (*remove)             (KvCachePolicy *self,
                                  KvKey         *key);
  void     (*touch)              (KvCachePolicy *self,
                                  KvKey * const *keys,
                                  guint          n_keys);
  void     (*mark_evictable)     (KvCachePolicy *self,
                                  KvKey         *key);
  void     (*mark_non_evictable) (KvCachePolicy *self,
                                  KvKey         *key);
  KvKey  **(*evict)              (KvCachePolicy *self,
                                  guint          n,
                                  KvKey * const *protected_keys,
                                  guint          n_protected);
  void     (*clear)              (KvCachePolicy *self);
  guint    (*get_n_evictable)    (KvCachePolicy *self);

  /*< private >*/
  gpointer _reserved[8];
};

KVTIER_AVAILABLE_IN_ALL
void     kv_cache_policy_insert             (KvCachePolicy *self,
                                             KvKey         *key,
                                             gboolean       evictable);
KVTIER_AVAILABLE_IN_ALL
void     kv_cache_policy_remove             (KvCachePolicy *self,
                                             KvKey         *key);
KVTIER_AVAILABLE_IN_ALL
void     kv_cache_policy_touch              (KvCachePolicy *self,
                                             KvKey * const *keys,
                                             guint          n_keys);
KVTIER_AVAILABLE_IN_ALL
void     kv_cache_policy_mark_evictable     (KvCachePolicy *self,
                                             KvKey         *key);
KVTIER_AVAILABLE_IN_ALL
void     kv_cache_policy_mark_non_evictable (KvCachePolicy *self,
                                             KvKey         *key);
KVTIER_AVAILABLE_IN_ALL
KvKey  **kv_cache_policy_evict              (KvCachePolicy *self,
                                             guint          n,
                                             KvKey * const *protected_keys,
                                             guint          n_protected);
KVTIER_AVAILABLE_IN_ALL
void     kv_cache_policy_clear              (KvCachePolicy *self);
KVTIER_AVAILABLE_IN_ALL
guint    kv_cache_policy_get_n_evictable    (KvCachePolicy *self);
KVTIER_AVAILABLE_IN_ALL
KvCachePolicy *kv_cache_policy_new_for_name (const char    *name,
                                             GError       **error);

G_END_DECLS
