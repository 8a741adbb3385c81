/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include "kv-lru-policy.h"

#include "kv-cache-policy-private.h"

/* One tracked key. The list link is embedded so that touching, pinning and
 * releasing a key never allocates. Nodes of keys no longer tracked are kept
 * (key NULL) in a spare list and reused by the next insert, so a steady
 * store/evict cycle does not allocate either. */
struct _KvLruNode
{
  KvKey    *key;
  /* in the evictable queue (in_list) or, untracked, the next spare node */
  GList     link;
  gboolean  in_list;
  /* TRUE: found through the policy's table; FALSE: inserted by the
   * attached primary tier and found through its resolver */
  gboolean  in_table;
  /* what the primary tier attached (its entry), NULL for keys inserted
   * through the interface */
  gpointer  user_data;
};
typedef KvLruNode LruNode;

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

  /* KvKey (the node's own key) → LruNode, for keys inserted through the
   * interface; no destroy functions: nodes go back to the spare list */
  GHashTable *nodes;
  /* evictable nodes only; head = least recently used */
  GQueue evictable;
  /* untracked nodes, ready for reuse, chained by link.next */
  GList *spare;
  /* every node allocated: the tracked ones that are not in the table are
   * found here by clear() and detach */
  GPtrArray *all_nodes;

  /* The primary tier this policy is attached to finds the nodes of its
   * keys in its own table (see _kv_lru_policy_attach()); those nodes are
   * not in self->nodes. */
  KvLruResolveFunc resolve;
  gpointer resolve_data;
};

static void kv_lru_policy_iface_init (KvCachePolicyInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvLruPolicy, kv_lru_policy, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CACHE_POLICY,
                                                      kv_lru_policy_iface_init))

static LruNode *
lru_node_take (KvLruPolicy *self,
               KvKey       *key)
{
  GList *link = self->spare;
  LruNode *node;

  if (link != NULL)
    {
      node = link->data;
      self->spare = link->next;
      link->next = NULL;
    }
  else
    {
      node = g_new0 (LruNode, 1);
      node->link.data = node;
      g_ptr_array_add (self->all_nodes, node);
    }
  node->key = kv_key_ref (key);
  node->in_list = FALSE;
  node->in_table = FALSE;
  node->user_data = NULL;
  return node;
}

/* The node must be out of the table and of the evictable queue (or that
 * whole queue must have been forgotten, as clear() does). */
static void
lru_node_release (KvLruPolicy *self,
                  LruNode     *node)
{
  g_clear_pointer (&node->key, kv_key_unref);
  node->in_list = FALSE;
  node->in_table = FALSE;
  node->user_data = NULL;
  node->link.prev = NULL;
  node->link.next = self->spare;
  self->spare = &node->link;
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

/* The node tracking @key, wherever it is kept. */
static LruNode *
lru_find (KvLruPolicy *self,
          const KvKey *key)
{
  LruNode *node = NULL;

  if (self->resolve != NULL)
    {
      /* A stale handle (its node was reused) shows by its key. */
      node = self->resolve (self->resolve_data, key);
      if (node != NULL && (node->key == NULL || !kv_key_equal (node->key, key)))
        node = NULL;
      if (node != NULL || g_hash_table_size (self->nodes) == 0)
        return node;
    }
  return g_hash_table_lookup (self->nodes, key);
}

/* Takes the node out of the table if it is there (the attached tier
 * forgets its own handle). */
static void
lru_forget (KvLruPolicy *self,
            LruNode     *node)
{
  if (node->in_table)
    g_hash_table_remove (self->nodes, node->key);
}

/* Moves a tracked key to the most recent end if it is evictable, out of
 * the order if not. */
static void
lru_reinsert (KvLruPolicy *self,
              LruNode     *node,
              gboolean     evictable)
{
  if (node->in_list)
    lru_unlink (self, node);
  if (evictable)
    lru_link (self, node);
}

static void
kv_lru_policy_insert (KvCachePolicy *policy,
                      KvKey         *key,
                      gboolean       evictable)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  LruNode *node;

  node = lru_find (self, key);
  if (node == NULL)
    {
      node = lru_node_take (self, key);
      node->in_table = TRUE;
      g_hash_table_insert (self->nodes, node->key, node);
    }
  lru_reinsert (self, node, evictable);
}

static void
lru_remove (KvLruPolicy *self,
            LruNode     *node)
{
  if (node->in_list)
    lru_unlink (self, node);
  lru_forget (self, node);
  lru_node_release (self, node);
}

static void
kv_lru_policy_remove (KvCachePolicy *policy,
                      KvKey         *key)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  LruNode *node;

  node = lru_find (self, key);
  if (node != NULL)
    lru_remove (self, node);
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
      LruNode *node = lru_find (self, keys[i - 1]);

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

  node = lru_find (self, key);
  if (node != NULL && !node->in_list)
    lru_link (self, node);
}

static void
kv_lru_policy_mark_non_evictable (KvCachePolicy *policy,
                                  KvKey         *key)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  LruNode *node;

  node = lru_find (self, key);
  if (node != NULL && node->in_list)
    lru_unlink (self, node);
}

/* Evicts @n keys into @keys (room for n + 1; the node references move
 * there) or changes nothing. @user_data: (nullable): room for n pointers,
 * filled with the victims' user data. */
static gboolean
lru_evict (KvLruPolicy   *self,
           guint          n,
           KvKey * const *protected_keys,
           guint          n_protected,
           KvKey        **keys,
           gpointer      *user_data)
{
  KvProtectedSet protect;
  LruNode *stack_victims[64];
  g_autofree LruNode **heap_victims = NULL;
  LruNode **victims = stack_victims;
  guint found = 0;

  if (n > self->evictable.length)
    return FALSE;

  /* Choose first, change nothing until all n are found. */
  if (n > G_N_ELEMENTS (stack_victims))
    victims = heap_victims = g_new (LruNode *, n);
  kv_protected_set_init (&protect, protected_keys, n_protected);
  for (GList *l = self->evictable.head; l != NULL && found < n; l = l->next)
    {
      LruNode *node = l->data;

      if (n_protected == 0 || !kv_protected_set_contains (&protect, node->key))
        victims[found++] = node;
    }
  kv_protected_set_clear (&protect);

  if (found < n)
    return FALSE;

  for (guint i = 0; i < n; i++)
    {
      LruNode *node = victims[i];

      lru_unlink (self, node);
      lru_forget (self, node);
      if (user_data != NULL)
        user_data[i] = node->user_data;
      /* The node's reference moves to the result. */
      keys[i] = g_steal_pointer (&node->key);
      lru_node_release (self, node);
    }
  keys[n] = NULL;

  return TRUE;
}

static KvKey **
kv_lru_policy_evict (KvCachePolicy *policy,
                     guint          n,
                     KvKey * const *protected_keys,
                     guint          n_protected)
{
  KvKey **keys = g_new (KvKey *, n + 1);

  if (!lru_evict (KV_LRU_POLICY (policy), n, protected_keys, n_protected, keys, NULL))
    g_clear_pointer (&keys, g_free);
  return keys;
}

static void
kv_lru_policy_clear (KvCachePolicy *policy)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);

  /* The links live in the nodes: forget the order before reusing them. */
  g_queue_init (&self->evictable);
  g_hash_table_steal_all (self->nodes);
  for (guint i = 0; i < self->all_nodes->len; i++)
    {
      LruNode *node = g_ptr_array_index (self->all_nodes, i);

      if (node->key != NULL)
        lru_node_release (self, node);
    }
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

  kv_lru_policy_clear (KV_CACHE_POLICY (self));
  self->spare = NULL;
  g_clear_pointer (&self->all_nodes, g_ptr_array_unref);
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
  self->nodes = g_hash_table_new (kv_key_hash, kv_key_equal);
  g_queue_init (&self->evictable);
  self->all_nodes = g_ptr_array_new_with_free_func (g_free);
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

/* ---- the primary tier's fast path (kv-cache-policy-private.h) ---------- */

gboolean
_kv_lru_policy_attach (KvLruPolicy      *self,
                       KvLruResolveFunc  resolve,
                       gpointer          resolve_data)
{
  g_return_val_if_fail (KV_IS_LRU_POLICY (self), FALSE);
  g_return_val_if_fail (resolve != NULL, FALSE);

  if (self->resolve != NULL)
    return FALSE;
  self->resolve = resolve;
  self->resolve_data = resolve_data;
  return TRUE;
}

void
_kv_lru_policy_detach (KvLruPolicy *self)
{
  g_return_if_fail (KV_IS_LRU_POLICY (self));

  /* The policy may outlive the tier: its keys stay findable by key (when
   * the tier holds the last reference, finalize releases them instead). */
  for (guint i = 0; G_OBJECT (self)->ref_count > 1 && i < self->all_nodes->len; i++)
    {
      LruNode *node = g_ptr_array_index (self->all_nodes, i);

      if (node->key == NULL || node->in_table)
        continue;
      node->in_table = TRUE;
      node->user_data = NULL;
      g_hash_table_insert (self->nodes, node->key, node);
    }
  self->resolve = NULL;
  self->resolve_data = NULL;
}

/* A node handle is only trusted while its node still tracks the very key
 * object the caller holds (the caller keeps that key referenced, so its
 * address cannot be reused); a handle made stale by direct calls on the
 * policy falls back to a lookup. */
static inline LruNode *
lru_node_for (KvLruPolicy *self,
              KvLruNode   *node,
              KvKey       *key)
{
  if (G_LIKELY (node != NULL && node->key == key))
    return node;
  return lru_find (self, key);
}

KvLruNode *
_kv_lru_policy_insert_node (KvLruPolicy *self,
                            KvKey       *key,
                            gboolean     evictable,
                            gpointer     user_data)
{
  LruNode *node = NULL;

  /* The tier calls this for keys it has just claimed, whose entries have no
   * node yet: only a key inserted through the interface can be known. */
  if (g_hash_table_size (self->nodes) > 0)
    node = g_hash_table_lookup (self->nodes, key);
  if (node == NULL)
    {
      node = lru_node_take (self, key);
      if (self->resolve == NULL)
        {
          node->in_table = TRUE;
          g_hash_table_insert (self->nodes, node->key, node);
        }
    }
  lru_reinsert (self, node, evictable);
  node->user_data = user_data;
  return node;
}

gboolean
_kv_lru_policy_evict_into (KvLruPolicy   *self,
                           guint          n,
                           KvKey * const *protected_keys,
                           guint          n_protected,
                           KvKey        **keys,
                           gpointer      *user_data)
{
  return lru_evict (self, n, protected_keys, n_protected, keys, user_data);
}

void
_kv_lru_policy_set_node_evictable (KvLruPolicy *self,
                                   KvLruNode   *node,
                                   KvKey       *key,
                                   gboolean     evictable)
{
  node = lru_node_for (self, node, key);
  if (node == NULL || node->in_list == evictable)
    return;
  if (evictable)
    lru_link (self, node);
  else
    lru_unlink (self, node);
}

void
_kv_lru_policy_remove_node (KvLruPolicy *self,
                            KvLruNode   *node,
                            KvKey       *key)
{
  node = lru_node_for (self, node, key);
  if (node != NULL)
    lru_remove (self, node);
}
