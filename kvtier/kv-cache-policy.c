/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include "kv-cache-policy.h"

#include <string.h>

#include "kv-arc-policy.h"
#include "kv-cache-policy-private.h"
#include "kv-lru-policy.h"
#include "kv-types.h"

/* Up to this many protected keys a linear scan is cheapest; up to
 * KV_PROTECTED_MASK_MAX a hash-bit mask filters the scan (with 1024 bits
 * and 128 keys, about one unprotected candidate in nine is scanned);
 * beyond, a hash set. */
#define KV_PROTECTED_LINEAR_MAX 16
#define KV_PROTECTED_MASK_MAX 128
#define KV_PROTECTED_MASK_BITS (KV_PROTECTED_MASK_WORDS * 64)

/**
 * KvCachePolicy:
 *
 * Decides which chunks a [class@Kv.PrimaryTier] evicts when it needs slots.
 *
 * The primary tier owns the chunks' states (reference counts, slots); the
 * policy only orders the keys it is told about. A key is tracked from
 * [method@Kv.CachePolicy.insert] until [method@Kv.CachePolicy.remove] or
 * until [method@Kv.CachePolicy.evict] returns it; only keys marked
 * evictable (reference count 0) may be evicted.
 *
 * kvtier ships [class@Kv.LruPolicy] (`"lru"`, the default) and
 * [class@Kv.ArcPolicy] (`"arc"`); [func@Kv.CachePolicy.new_for_name] picks
 * one by name. All methods are called on the owner thread only.
 */

G_DEFINE_INTERFACE (KvCachePolicy, kv_cache_policy, G_TYPE_OBJECT)

/**
 * KvCachePolicyInterface::evict:
 * @self: a policy
 * @n: how many keys to evict, at least 1
 * @protected_keys: (array length=n_protected) (nullable): keys that must not
 *   be evicted
 * @n_protected: the length of @protected_keys
 *
 * Chooses exactly @n evictable keys that are not protected and stops
 * tracking them, or changes nothing. See [method@Kv.CachePolicy.evict].
 *
 * Returns: (array zero-terminated=1) (transfer full) (nullable): the
 *   evicted keys, or %NULL when @n keys cannot be evicted
 */

static void
kv_cache_policy_default_init (KvCachePolicyInterface *iface)
{
}

void
kv_protected_set_init (KvProtectedSet *set,
                       KvKey * const  *keys,
                       guint           n_keys)
{
  set->keys = keys;
  set->n_keys = n_keys;
  set->set = NULL;
  set->use_mask = FALSE;

  if (n_keys > KV_PROTECTED_MASK_MAX)
    {
      set->set = g_hash_table_new (kv_key_hash, kv_key_equal);
      for (guint i = 0; i < n_keys; i++)
        g_hash_table_add (set->set, keys[i]);
    }
  else if (n_keys > KV_PROTECTED_LINEAR_MAX)
    {
      set->use_mask = TRUE;
      memset (set->mask, 0, sizeof set->mask);
      for (guint i = 0; i < n_keys; i++)
        {
          guint bit = kv_key_hash (keys[i]) % KV_PROTECTED_MASK_BITS;

          set->mask[bit / 64] |= G_GUINT64_CONSTANT (1) << (bit % 64);
        }
    }
}

gboolean
kv_protected_set_contains (const KvProtectedSet *set,
                           const KvKey          *key)
{
  if (set->set != NULL)
    return g_hash_table_contains (set->set, key);

  if (set->use_mask)
    {
      guint bit = kv_key_hash (key) % KV_PROTECTED_MASK_BITS;

      if ((set->mask[bit / 64] & (G_GUINT64_CONSTANT (1) << (bit % 64))) == 0)
        return FALSE;
    }

  for (guint i = 0; i < set->n_keys; i++)
    if (kv_key_equal (set->keys[i], key))
      return TRUE;
  return FALSE;
}

void
kv_protected_set_clear (KvProtectedSet *set)
{
  g_clear_pointer (&set->set, g_hash_table_unref);
}

/**
 * kv_cache_policy_insert:
 * @self: a policy
 * @key: the key of a chunk the primary tier just stored (or is storing)
 * @evictable: whether @key may be evicted now (its reference count is 0)
 *
 * Starts tracking @key as the most recently used key. Owner thread only.
 */
void
kv_cache_policy_insert (KvCachePolicy *self,
                        KvKey         *key,
                        gboolean       evictable)
{
  KvCachePolicyInterface *iface;

  g_return_if_fail (KV_IS_CACHE_POLICY (self));
  g_return_if_fail (key != NULL);

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_if_fail (iface->insert != NULL);
  iface->insert (self, key, evictable);
}

/**
 * kv_cache_policy_remove:
 * @self: a policy
 * @key: a key
 *
 * Stops tracking @key (a failed store, for example). Unknown keys are
 * ignored. Owner thread only.
 */
void
kv_cache_policy_remove (KvCachePolicy *self,
                        KvKey         *key)
{
  KvCachePolicyInterface *iface;

  g_return_if_fail (KV_IS_CACHE_POLICY (self));
  g_return_if_fail (key != NULL);

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_if_fail (iface->remove != NULL);
  iface->remove (self, key);
}

/**
 * kv_cache_policy_touch:
 * @self: a policy
 * @keys: (array length=n_keys): the keys a request used, in request order
 * @n_keys: the length of @keys
 *
 * Marks @keys recently used. They are applied last to first, so @keys[0]
 * ends up the most recently used; unknown keys are ignored. Owner thread
 * only.
 */
void
kv_cache_policy_touch (KvCachePolicy *self,
                       KvKey * const *keys,
                       guint          n_keys)
{
  KvCachePolicyInterface *iface;

  g_return_if_fail (KV_IS_CACHE_POLICY (self));
  g_return_if_fail (keys != NULL || n_keys == 0);

  if (n_keys == 0)
    return;

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_if_fail (iface->touch != NULL);
  iface->touch (self, keys, n_keys);
}

/**
 * kv_cache_policy_mark_evictable:
 * @self: a policy
 * @key: a tracked key
 *
 * Tells the policy that @key's reference count reached 0, so it may be
 * evicted. Owner thread only.
 */
void
kv_cache_policy_mark_evictable (KvCachePolicy *self,
                                KvKey         *key)
{
  KvCachePolicyInterface *iface;

  g_return_if_fail (KV_IS_CACHE_POLICY (self));
  g_return_if_fail (key != NULL);

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_if_fail (iface->mark_evictable != NULL);
  iface->mark_evictable (self, key);
}

/**
 * kv_cache_policy_mark_non_evictable:
 * @self: a policy
 * @key: a tracked key
 *
 * Tells the policy that @key's reference count left 0 (it was pinned), so
 * it must not be evicted. Owner thread only.
 */
void
kv_cache_policy_mark_non_evictable (KvCachePolicy *self,
                                    KvKey         *key)
{
  KvCachePolicyInterface *iface;

  g_return_if_fail (KV_IS_CACHE_POLICY (self));
  g_return_if_fail (key != NULL);

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_if_fail (iface->mark_non_evictable != NULL);
  iface->mark_non_evictable (self, key);
}

/**
 * kv_cache_policy_evict:
 * @self: a policy
 * @n: how many keys to evict
 * @protected_keys: (array length=n_protected) (nullable): keys that must not
 *   be evicted (the keys being stored)
 * @n_protected: the length of @protected_keys
 *
 * Chooses exactly @n evictable keys that are not in @protected_keys and
 * stops tracking them. The choice is atomic: when fewer than @n such keys
 * exist, nothing changes and %NULL is returned. Owner thread only.
 *
 * Returns: (array zero-terminated=1) (transfer full) (nullable): the
 *   evicted keys, an empty array when @n is 0, or %NULL when @n keys cannot
 *   be evicted
 */
KvKey **
kv_cache_policy_evict (KvCachePolicy *self,
                       guint          n,
                       KvKey * const *protected_keys,
                       guint          n_protected)
{
  KvCachePolicyInterface *iface;

  g_return_val_if_fail (KV_IS_CACHE_POLICY (self), NULL);
  g_return_val_if_fail (protected_keys != NULL || n_protected == 0, NULL);

  if (n == 0)
    return g_new0 (KvKey *, 1);

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_val_if_fail (iface->evict != NULL, NULL);
  return iface->evict (self, n, protected_keys, n_protected);
}

/**
 * kv_cache_policy_clear:
 * @self: a policy
 *
 * Forgets every key (the primary tier was reset). Owner thread only.
 */
void
kv_cache_policy_clear (KvCachePolicy *self)
{
  KvCachePolicyInterface *iface;

  g_return_if_fail (KV_IS_CACHE_POLICY (self));

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_if_fail (iface->clear != NULL);
  iface->clear (self);
}

/**
 * kv_cache_policy_get_n_evictable:
 * @self: a policy
 *
 * Counts the tracked keys that may be evicted now (protection aside). Owner
 * thread only.
 *
 * Returns: the number of evictable keys
 */
guint
kv_cache_policy_get_n_evictable (KvCachePolicy *self)
{
  KvCachePolicyInterface *iface;

  g_return_val_if_fail (KV_IS_CACHE_POLICY (self), 0);

  iface = KV_CACHE_POLICY_GET_IFACE (self);
  g_return_val_if_fail (iface->get_n_evictable != NULL, 0);
  return iface->get_n_evictable (self);
}

/**
 * kv_cache_policy_new_for_name:
 * @name: a policy name: `"lru"` or `"arc"`
 * @error: return location for an error
 *
 * Creates a built-in policy by name. An `"arc"` policy is created with
 * capacity 0; the [class@Kv.PrimaryTier] it is given to sets its
 * [property@Kv.ArcPolicy:capacity] to the tier's slot count.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new policy, or %NULL with @error set
 *   (%KV_TIER_ERROR_INVALID_ARGUMENT) when @name is unknown
 */
KvCachePolicy *
kv_cache_policy_new_for_name (const char  *name,
                              GError     **error)
{
  g_return_val_if_fail (name != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (g_str_equal (name, "lru"))
    return kv_lru_policy_new ();
  if (g_str_equal (name, "arc"))
    return kv_arc_policy_new (0);

  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
               "Unknown cache policy “%s” (known policies: lru, arc)", name);
  return NULL;
}
