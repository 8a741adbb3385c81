/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include "kv-lru-policy.h"

#include "kv-cache-policy-private.h"

/* One tracked key. The list links are embedded (an intrusive list), so
 * that touching, pinning and releasing a key never allocates nor calls out
 * of this file. Nodes are allocated in blocks; nodes of keys no longer
 * tracked are kept (key NULL) in a spare list and reused by the next
 * insert, so a steady store/evict cycle does not allocate either. */
struct _KvLruNode
{
  KvKey     *key;
  /* in the evictable order (in_list): the less and the more recent
   * neighbours; untracked: next is the next spare node */
  KvLruNode *prev;
  KvLruNode *next;
  /* the policy's protection epoch this node was protected in: it is
   * protected from eviction while that epoch is the current one */
  guint64    protect_epoch;
  gboolean   in_list;
  /* TRUE: found through the policy's table; FALSE: inserted by the
   * attached primary tier and found through its resolver */
  gboolean   in_table;
  /* what the primary tier attached (its entry), NULL for keys inserted
   * through the interface */
  gpointer   user_data;
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
 * Every operation is O(1) per key, and none allocates once the policy has
 * tracked as many keys at a time before (its list is intrusive and its
 * nodes are reused), except [method@Kv.CachePolicy.evict], which allocates
 * its result. Owner thread only.
 */
struct _KvLruPolicy
{
  GObject parent_instance;

  /* KvKey (the node's own key) → LruNode, for keys inserted through the
   * interface; no destroy functions: nodes go back to the spare list */
  GHashTable *nodes;
  /* evictable nodes only, chained by prev/next; head = least recently
   * used */
  LruNode *head;
  LruNode *tail;
  guint n_evictable;
  /* untracked nodes, ready for reuse, chained by next */
  LruNode *spare;
  /* every node allocated, LRU_BLOCK_SIZE to a block (the last one used up
   * to last_block_used): the tracked ones that are not in the table are
   * found here by clear() and detach */
  GPtrArray *blocks;
  guint last_block_used;
  /* Protection from eviction, instead of a set of keys built per call: a
   * node stamped with the current epoch is protected. A batch starts a new
   * epoch (lru_protect_begin()) and its eviction ends it, so protection
   * costs one stamp per protected key that is tracked, nothing per
   * candidate but a compare, and never outlives the batch. 64 bits never
   * wrap. */
  guint64 epoch;

  /* The primary tier this policy is attached to finds the nodes of its
   * keys in its own table (see _kv_lru_policy_attach()); those nodes are
   * not in self->nodes. */
  KvLruResolveFunc resolve;
  gpointer resolve_data;
};

static void kv_lru_policy_iface_init (KvCachePolicyInterface *iface);

#define LRU_BLOCK_SIZE 256

/* The @i-th node ever allocated (i < lru_n_nodes()). */
static inline LruNode *
lru_node_at (KvLruPolicy *self,
             guint        i)
{
  LruNode *block = g_ptr_array_index (self->blocks, i / LRU_BLOCK_SIZE);

  return &block[i % LRU_BLOCK_SIZE];
}

static inline guint
lru_n_nodes (KvLruPolicy *self)
{
  if (self->blocks->len == 0)
    return 0;
  return (self->blocks->len - 1) * LRU_BLOCK_SIZE + self->last_block_used;
}

G_DEFINE_FINAL_TYPE_WITH_CODE (KvLruPolicy, kv_lru_policy, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CACHE_POLICY,
                                                      kv_lru_policy_iface_init))

static LruNode *
lru_node_take (KvLruPolicy *self,
               KvKey       *key)
{
  LruNode *node = self->spare;

  if (node != NULL)
    {
      self->spare = node->next;
    }
  else
    {
      if (self->blocks->len == 0 || self->last_block_used == LRU_BLOCK_SIZE)
        {
          g_ptr_array_add (self->blocks, g_new0 (LruNode, LRU_BLOCK_SIZE));
          self->last_block_used = 0;
        }
      node = lru_node_at (self, lru_n_nodes (self));
      self->last_block_used++;
    }
  node->key = kv_key_ref (key);
  node->prev = NULL;
  node->next = NULL;
  node->protect_epoch = 0;
  node->in_list = FALSE;
  node->in_table = FALSE;
  node->user_data = NULL;
  return node;
}

/* The node must be out of the table and of the evictable order (or that
 * whole order must have been forgotten, as clear() does). */
static void
lru_node_release (KvLruPolicy *self,
                  LruNode     *node)
{
  g_clear_pointer (&node->key, kv_key_unref);
  node->in_list = FALSE;
  node->in_table = FALSE;
  node->user_data = NULL;
  node->prev = NULL;
  node->next = self->spare;
  self->spare = node;
}

/* Appends @node at the most recent end. */
static inline void
lru_link (KvLruPolicy *self,
          LruNode     *node)
{
  node->prev = self->tail;
  node->next = NULL;
  if (self->tail != NULL)
    self->tail->next = node;
  else
    self->head = node;
  self->tail = node;
  self->n_evictable++;
  node->in_list = TRUE;
}

static inline void
lru_unlink (KvLruPolicy *self,
            LruNode     *node)
{
  if (node->prev != NULL)
    node->prev->next = node->next;
  else
    self->head = node->next;
  if (node->next != NULL)
    node->next->prev = node->prev;
  else
    self->tail = node->prev;
  node->prev = NULL;
  node->next = NULL;
  self->n_evictable--;
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

/* Starts a new protection epoch: every earlier protection ends. */
static inline void
lru_protect_begin (KvLruPolicy *self)
{
  self->epoch++;
}

/* Evicts @n keys that were not protected in the current epoch into @keys
 * (room for n + 1; the node references move there) or changes nothing.
 * @user_data: (nullable): room for n pointers, filled with the victims'
 * user data. Ends the epoch. */
static gboolean
lru_evict (KvLruPolicy  *self,
           guint         n,
           KvKey       **keys,
           gpointer     *user_data)
{
  LruNode *stack_victims[64];
  g_autofree LruNode **heap_victims = NULL;
  LruNode **victims = stack_victims;
  guint64 epoch = self->epoch++;
  guint found = 0;

  if (n > self->n_evictable)
    return FALSE;

  /* Choose first, change nothing until all n are found. */
  if (n > G_N_ELEMENTS (stack_victims))
    victims = heap_victims = g_new (LruNode *, n);
  for (LruNode *node = self->head; node != NULL && found < n; node = node->next)
    if (node->protect_epoch != epoch)
      victims[found++] = node;

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
  KvLruPolicy *self = KV_LRU_POLICY (policy);
  KvKey **keys = g_new (KvKey *, n + 1);

  lru_protect_begin (self);
  for (guint i = 0; i < n_protected; i++)
    {
      LruNode *node = lru_find (self, protected_keys[i]);

      if (node != NULL)
        node->protect_epoch = self->epoch;
    }
  if (!lru_evict (self, n, keys, NULL))
    g_clear_pointer (&keys, g_free);
  return keys;
}

static void
kv_lru_policy_clear (KvCachePolicy *policy)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);

  guint n_nodes = lru_n_nodes (self);

  /* The links live in the nodes: forget the order before reusing them. */
  self->head = self->tail = NULL;
  self->n_evictable = 0;
  g_hash_table_steal_all (self->nodes);
  for (guint i = 0; i < n_nodes; i++)
    {
      LruNode *node = lru_node_at (self, i);

      if (node->key != NULL)
        lru_node_release (self, node);
    }
}

static guint
kv_lru_policy_get_n_evictable (KvCachePolicy *policy)
{
  KvLruPolicy *self = KV_LRU_POLICY (policy);

  return self->n_evictable;
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
  g_clear_pointer (&self->blocks, g_ptr_array_unref);
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
  self->blocks = g_ptr_array_new_with_free_func (g_free);
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
  guint n_nodes;

  g_return_if_fail (KV_IS_LRU_POLICY (self));

  /* The policy may outlive the tier: its keys stay findable by key (when
   * the tier holds the last reference, finalize releases them instead). */
  n_nodes = lru_n_nodes (self);
  for (guint i = 0; G_OBJECT (self)->ref_count > 1 && i < n_nodes; i++)
    {
      LruNode *node = lru_node_at (self, i);

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

void
_kv_lru_policy_protect_begin (KvLruPolicy *self)
{
  lru_protect_begin (self);
}

void
_kv_lru_policy_protect_node (KvLruPolicy *self,
                             KvLruNode   *node,
                             KvKey       *key)
{
  node = lru_node_for (self, node, key);
  if (node != NULL)
    node->protect_epoch = self->epoch;
}

gboolean
_kv_lru_policy_evict_into (KvLruPolicy  *self,
                           guint         n,
                           KvKey       **keys,
                           gpointer     *user_data)
{
  return lru_evict (self, n, keys, user_data);
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
