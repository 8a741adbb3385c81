/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include "kv-lru-policy.h"

#include "kv-cache-policy-private.h"

/* One tracked key. The list link is embedded so that touching, pinning and
 * releasing a key never allocates. */
typedef struct
{
  KvKey   *key;
  GList    link;
  gboolean in_list;
} LruNode;

/**
 * KvLruPolicy:
 *
 * Least-recently-used eviction (`"lru"`, the default policy), as vLLM's
 * `LRUCachePolicy`.
 *
 * Only evictable keys (reference count 0) are kept in recency order: a key
 * joins the most recent end when it is inserted evictable or released
 * ([method@Kv.CachePolicy.mark_evictable]) and leaves the order while it is
 * pinned. [method@Kv.CachePolicy.touch] moves the evictable keys it is given
 * to the most recent end, last key first, so the first key ends up the most
 * recent; pinned keys are not moved (they become most recent when they are
 * released). Eviction takes the least recent keys first, skipping protected
 * ones.
 *
 * Every operation is O(1) per key without allocation, except
 * [method@Kv.CachePolicy.evict], which allocates its result. Owner thread
 * only.
 */
struct _KvLruPolicy
{
  GObject parent_instance;

  /* KvKey (the node's own key) → LruNode */
  GHashTable *nodes;
  /* evictable nodes only; head = least recently used */
  GQueue evictable;
};

static void kv_lru_policy_iface_init (KvCachePolicyInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvLruPolicy, kv_lru_policy, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CACHE_POLICY,
                                                      kv_lru_policy_iface_init))

static void
lru_node_free (gpointer data)
{
  LruNode *node = data;

  g_clear_pointer (&node->key, kv_key_unref);
  g_free (node);
}

static void
lru_link (KvLruPolicy *self,
          LruNode     *node)
{
  g_queue_push_tail_link (&self->evictable, &node->link);
  node->in_list = TRUE;
}

static void
lru_unlink (KvLruPolicy *self,
            LruNode     *node)
{
  g_queue_unlink (&self->evictable, &node->link);
  node->in_list = FALSE;
}

static void
kv_lru_policy_insert (KvCachePolicy *policy,
                      KvKey         *key,
                      gboolean       evictable)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  LruNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node == NULL)
    {
      node = g_new0 (LruNode, 1);
      node->key = kv_key_ref (key);
      node->link.data = node;
      g_hash_table_insert (self->nodes, node->key, node);
    }
  else if (node->in_list)
    {
      lru_unlink (self, node);
    }

  if (evictable)
    lru_link (self, node);
}

static void
kv_lru_policy_remove (KvCachePolicy *policy,
                      KvKey         *key)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  LruNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node == NULL)
    return;

  if (node->in_list)
    lru_unlink (self, node);
  g_hash_table_remove (self->nodes, node->key);
}

static void
kv_lru_policy_touch (KvCachePolicy *policy,
                     KvKey * const *keys,
                     guint          n_keys)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);

  /* Last to first, so keys[0] ends up at the most recent end. */
  for (guint i = n_keys; i > 0; i--)
    {
      LruNode *node = g_hash_table_lookup (self->nodes, keys[i - 1]);

      if (node != NULL && node->in_list)
        {
          lru_unlink (self, node);
          lru_link (self, node);
        }
    }
}

static void
kv_lru_policy_mark_evictable (KvCachePolicy *policy,
                              KvKey         *key)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  LruNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node != NULL && !node->in_list)
    lru_link (self, node);
}

static void
kv_lru_policy_mark_non_evictable (KvCachePolicy *policy,
                                  KvKey         *key)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  LruNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node != NULL && node->in_list)
    lru_unlink (self, node);
}

static KvKey **
kv_lru_policy_evict (KvCachePolicy *policy,
                     guint          n,
                     KvKey * const *protected_keys,
                     guint          n_protected)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  KvProtectedSet protect;
  g_autofree LruNode **victims = NULL;
  KvKey **result;
  guint found = 0;

  if (n == 0)
    return g_new0 (KvKey *, 1);
  if (n > self->evictable.length)
    return NULL;

  /* Choose first, change nothing until all n are found. */
  victims = g_new (LruNode *, n);
  kv_protected_set_init (&protect, protected_keys, n_protected);
  for (GList *l = self->evictable.head; l != NULL && found < n; l = l->next)
    {
      LruNode *node = l->data;

      if (n_protected == 0 || !kv_protected_set_contains (&protect, node->key))
        victims[found++] = node;
    }
  kv_protected_set_clear (&protect);

  if (found < n)
    return NULL;

  result = g_new (KvKey *, n + 1);
  for (guint i = 0; i < n; i++)
    {
      LruNode *node = victims[i];

      lru_unlink (self, node);
      g_hash_table_steal (self->nodes, node->key);
      /* The node's reference moves to the result. */
      result[i] = g_steal_pointer (&node->key);
      lru_node_free (node);
    }
  result[n] = NULL;

  return result;
}

static void
kv_lru_policy_clear (KvCachePolicy *policy)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);

  /* The links live in the nodes: forget them before freeing the nodes. */
  g_queue_init (&self->evictable);
  g_hash_table_remove_all (self->nodes);
}

static guint
kv_lru_policy_get_n_evictable (KvCachePolicy *policy)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);

  return self->evictable.length;
}

static void
kv_lru_policy_iface_init (KvCachePolicyInterface *iface)
{
  iface->insert = kv_lru_policy_insert;
  iface->remove = kv_lru_policy_remove;
  iface->touch = kv_lru_policy_touch;
  iface->mark_evictable = kv_lru_policy_mark_evictable;
  iface->mark_non_evictable = kv_lru_policy_mark_non_evictable;
  iface->evict = kv_lru_policy_evict;
  iface->clear = kv_lru_policy_clear;
  iface->get_n_evictable = kv_lru_policy_get_n_evictable;
}

static void
kv_lru_policy_finalize (GObject *object)
{
  KvLruPolicy *self = KV_LRU_POLICY (object);

  g_queue_init (&self->evictable);
  g_clear_pointer (&self->nodes, g_hash_table_unref);

  G_OBJECT_CLASS (kv_lru_policy_parent_class)->finalize (object);
}

static void
kv_lru_policy_class_init (KvLruPolicyClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_lru_policy_finalize;
}

static void
kv_lru_policy_init (KvLruPolicy *self)
{
  self->nodes = g_hash_table_new_full (kv_key_hash, kv_key_equal, NULL, lru_node_free);
  g_queue_init (&self->evictable);
}

/**
 * kv_lru_policy_new:
 *
 * Creates a least-recently-used policy. May be called from any thread.
 *
 * Returns: (transfer full): a new policy
 */
KvCachePolicy *
kv_lru_policy_new (void)
{
  return g_object_new (KV_TYPE_LRU_POLICY, NULL);
}
