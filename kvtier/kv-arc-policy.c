/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include "kv-arc-policy.h"

#include "kv-cache-policy-private.h"

typedef enum {
  ARC_T1,   /* resident, seen once */
  ARC_T2,   /* resident, seen again */
  ARC_B1,   /* ghost of a key evicted from T1 */
  ARC_B2,   /* ghost of a key evicted from T2 */
  ARC_N_LISTS
} ArcList;

/* One key, resident or ghost. The link is embedded so that moving a key
 * between lists never allocates. */
typedef struct
{
  KvKey   *key;
  GList    link;
  ArcList  list;
  gboolean evictable;
} ArcNode;

/**
 * KvArcPolicy:
 *
 * Adaptive replacement cache eviction (`"arc"`), as vLLM's `ARCCachePolicy`.
 *
 * Resident keys live in two recency lists: T1 for keys stored once and T2
 * for keys used again ([method@Kv.CachePolicy.touch] moves a key to the most
 * recent end of T2, last key first, as [class@Kv.LruPolicy] does). Evicted
 * keys are remembered as ghosts: B1 for keys evicted from T1, B2 for keys
 * evicted from T2. Storing a key again that is a B1 ghost shows T1 was too
 * small and grows the target size of T1 ([method@Kv.ArcPolicy.get_target_t1]);
 * a B2 ghost shrinks it; either way the key goes to T2. Eviction takes from
 * T1 while T1 is larger than its target, else from T2, choosing the least
 * recent evictable, unprotected key and falling back to the other list. A
 * one-time scan of new keys therefore only displaces other T1 keys and
 * leaves the frequently used keys of T2 alone.
 *
 * The order of a key depends on when it was stored and touched only;
 * pinning ([method@Kv.CachePolicy.mark_non_evictable]) keeps a key from being
 * evicted without moving it. After each successful eviction the ghost lists
 * are trimmed, least recent first: B1 keeps at most `capacity` − |T1| ghosts
 * and both together at most `capacity`. Ghosts of protected keys (the batch
 * about to be stored) are never trimmed, so that storing them counts as a
 * ghost hit.
 *
 * Owner thread only.
 */
struct _KvArcPolicy
{
  GObject parent_instance;

  guint capacity;
  guint target_t1;
  guint n_evictable;

  /* KvKey (the node's own key) → ArcNode, resident and ghost */
  GHashTable *nodes;
  /* head = least recently used */
  GQueue lists[ARC_N_LISTS];
};

enum {
  PROP_0,
  PROP_CAPACITY,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void kv_arc_policy_iface_init (KvCachePolicyInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvArcPolicy, kv_arc_policy, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CACHE_POLICY,
                                                      kv_arc_policy_iface_init))

static void
arc_node_free (gpointer data)
{
  ArcNode *node = data;

  g_clear_pointer (&node->key, kv_key_unref);
  g_free (node);
}

static guint
arc_capacity (KvArcPolicy *self)
{
  /* A policy nobody sized yet (capacity 0) treats what it holds as full. */
  if (self->capacity > 0)
    return self->capacity;
  return MAX (1, self->lists[ARC_T1].length + self->lists[ARC_T2].length);
}

static gboolean
arc_is_resident (const ArcNode *node)
{
  return node->list == ARC_T1 || node->list == ARC_T2;
}

static void
arc_move (KvArcPolicy *self,
          ArcNode     *node,
          ArcList      list)
{
  g_queue_unlink (&self->lists[node->list], &node->link);
  node->list = list;
  g_queue_push_tail_link (&self->lists[list], &node->link);
}

static void
arc_drop (KvArcPolicy *self,
          ArcNode     *node)
{
  if (arc_is_resident (node) && node->evictable)
    self->n_evictable--;
  g_queue_unlink (&self->lists[node->list], &node->link);
  g_hash_table_remove (self->nodes, node->key);
}

static void
kv_arc_policy_insert (KvCachePolicy *policy,
                      KvKey         *key,
                      gboolean       evictable)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);
  ArcNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node == NULL)
    {
      node = g_new0 (ArcNode, 1);
      node->key = kv_key_ref (key);
      node->link.data = node;
      node->list = ARC_T1;
      g_queue_push_tail_link (&self->lists[ARC_T1], &node->link);
      g_hash_table_insert (self->nodes, node->key, node);
    }
  else
    {
      guint b1 = self->lists[ARC_B1].length;
      guint b2 = self->lists[ARC_B2].length;
      guint delta;

      switch (node->list)
        {
        case ARC_B1:
          /* A recently evicted T1 key came back: T1 was too small. */
          delta = MAX (1, b2 / b1);
          self->target_t1 = MIN (self->target_t1 + delta, arc_capacity (self));
          break;
        case ARC_B2:
          /* A recently evicted T2 key came back: T2 was too small. */
          delta = MAX (1, b1 / b2);
          self->target_t1 = self->target_t1 > delta ? self->target_t1 - delta : 0;
          break;
        case ARC_T1:
        case ARC_T2:
          if (node->evictable)
            self->n_evictable--;
          break;
        case ARC_N_LISTS:
        default:
          g_assert_not_reached ();
        }

      arc_move (self, node, ARC_T2);
    }

  node->evictable = evictable;
  if (evictable)
    self->n_evictable++;
}

static void
kv_arc_policy_remove (KvCachePolicy *policy,
                      KvKey         *key)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);
  ArcNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node != NULL)
    arc_drop (self, node);
}

static void
kv_arc_policy_touch (KvCachePolicy *policy,
                     KvKey * const *keys,
                     guint          n_keys)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);

  /* Last to first, so keys[0] ends up at the most recent end of T2. */
  for (guint i = n_keys; i > 0; i--)
    {
      ArcNode *node = g_hash_table_lookup (self->nodes, keys[i - 1]);

      if (node != NULL && arc_is_resident (node))
        arc_move (self, node, ARC_T2);
    }
}

static void
kv_arc_policy_mark_evictable (KvCachePolicy *policy,
                              KvKey         *key)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);
  ArcNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node != NULL && arc_is_resident (node) && !node->evictable)
    {
      node->evictable = TRUE;
      self->n_evictable++;
    }
}

static void
kv_arc_policy_mark_non_evictable (KvCachePolicy *policy,
                                  KvKey         *key)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);
  ArcNode *node;

  node = g_hash_table_lookup (self->nodes, key);
  if (node != NULL && arc_is_resident (node) && node->evictable)
    {
      node->evictable = FALSE;
      self->n_evictable--;
    }
}

/* The next evictable, unprotected node of a resident list from @cursor on
 * (the list head when *cursor is NULL and *started is FALSE). */
static ArcNode *
arc_next_candidate (KvArcPolicy          *self,
                    ArcList               list,
                    GList               **cursor,
                    gboolean             *started,
                    const KvProtectedSet *protect)
{
  GList *l = *started ? (*cursor != NULL ? (*cursor)->next : NULL)
                      : self->lists[list].head;

  *started = TRUE;
  for (; l != NULL; l = l->next)
    {
      ArcNode *node = l->data;

      if (node->evictable &&
          (protect->n_keys == 0 || !kv_protected_set_contains (protect, node->key)))
        {
          *cursor = l;
          return node;
        }
    }

  /* Exhausted: stay exhausted. */
  *cursor = NULL;
  return NULL;
}

/* Forgets the least recent ghost of @list that is not protected. */
static gboolean
arc_drop_oldest_ghost (KvArcPolicy          *self,
                       ArcList               list,
                       const KvProtectedSet *protect)
{
  for (GList *l = self->lists[list].head; l != NULL; l = l->next)
    {
      ArcNode *node = l->data;

      if (protect->n_keys == 0 || !kv_protected_set_contains (protect, node->key))
        {
          arc_drop (self, node);
          return TRUE;
        }
    }
  return FALSE;
}

static void
arc_trim_ghosts (KvArcPolicy          *self,
                 const KvProtectedSet *protect)
{
  guint capacity = arc_capacity (self);
  GQueue *t1 = &self->lists[ARC_T1];
  GQueue *b1 = &self->lists[ARC_B1];
  GQueue *b2 = &self->lists[ARC_B2];

  /* ARC's bound on L1 = T1 + B1, then on all ghosts. The protected keys are
   * the batch being stored right after this eviction: their ghosts are kept
   * so that storing them counts as the ghost hit it is. */
  while (t1->length + b1->length > capacity &&
         arc_drop_oldest_ghost (self, ARC_B1, protect))
    ;
  while (b1->length + b2->length > capacity &&
         (arc_drop_oldest_ghost (self, ARC_B2, protect) ||
          arc_drop_oldest_ghost (self, ARC_B1, protect)))
    ;
}

static KvKey **
kv_arc_policy_evict (KvCachePolicy *policy,
                     guint          n,
                     KvKey * const *protected_keys,
                     guint          n_protected)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);
  KvProtectedSet protect;
  g_autofree ArcNode **victims = NULL;
  GList *cursor[2] = { NULL, NULL };
  gboolean started[2] = { FALSE, FALSE };
  gboolean exhausted[2] = { FALSE, FALSE };
  guint len[2];
  KvKey **result;
  guint found = 0;

  if (n == 0)
    return g_new0 (KvKey *, 1);
  if (n > self->n_evictable)
    return NULL;

  /* Replay ARC's REPLACE n times on shadow list lengths, changing nothing
   * until all n victims are found. */
  len[ARC_T1] = self->lists[ARC_T1].length;
  len[ARC_T2] = self->lists[ARC_T2].length;
  victims = g_new (ArcNode *, n);
  kv_protected_set_init (&protect, protected_keys, n_protected);
  while (found < n)
    {
      ArcList first = len[ARC_T1] > self->target_t1 ? ARC_T1 : ARC_T2;
      ArcList order[2] = { first, first == ARC_T1 ? ARC_T2 : ARC_T1 };
      ArcNode *victim = NULL;

      for (guint j = 0; j < 2 && victim == NULL; j++)
        {
          ArcList list = order[j];

          if (exhausted[list])
            continue;
          victim = arc_next_candidate (self, list, &cursor[list], &started[list], &protect);
          if (victim == NULL)
            exhausted[list] = TRUE;
          else
            len[list]--;
        }

      if (victim == NULL)
        break;
      victims[found++] = victim;
    }

  if (found < n)
    {
      kv_protected_set_clear (&protect);
      return NULL;
    }

  result = g_new (KvKey *, n + 1);
  for (guint i = 0; i < n; i++)
    {
      ArcNode *node = victims[i];

      result[i] = kv_key_ref (node->key);
      node->evictable = FALSE;
      self->n_evictable--;
      arc_move (self, node, node->list == ARC_T1 ? ARC_B1 : ARC_B2);
    }
  result[n] = NULL;

  arc_trim_ghosts (self, &protect);
  kv_protected_set_clear (&protect);

  return result;
}

static void
kv_arc_policy_clear (KvCachePolicy *policy)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);

  /* The links live in the nodes: forget them before freeing the nodes. */
  for (guint i = 0; i < ARC_N_LISTS; i++)
    g_queue_init (&self->lists[i]);
  g_hash_table_remove_all (self->nodes);
  self->n_evictable = 0;
  self->target_t1 = 0;
}

static guint
kv_arc_policy_get_n_evictable (KvCachePolicy *policy)
{
  KvArcPolicy *self = KV_ARC_POLICY (policy);

  return self->n_evictable;
}

static void
kv_arc_policy_iface_init (KvCachePolicyInterface *iface)
{
  iface->insert = kv_arc_policy_insert;
  iface->remove = kv_arc_policy_remove;
  iface->touch = kv_arc_policy_touch;
  iface->mark_evictable = kv_arc_policy_mark_evictable;
  iface->mark_non_evictable = kv_arc_policy_mark_non_evictable;
  iface->evict = kv_arc_policy_evict;
  iface->clear = kv_arc_policy_clear;
  iface->get_n_evictable = kv_arc_policy_get_n_evictable;
}

static void
kv_arc_policy_finalize (GObject *object)
{
  KvArcPolicy *self = KV_ARC_POLICY (object);

  for (guint i = 0; i < ARC_N_LISTS; i++)
    g_queue_init (&self->lists[i]);
  g_clear_pointer (&self->nodes, g_hash_table_unref);

  G_OBJECT_CLASS (kv_arc_policy_parent_class)->finalize (object);
}

static void
kv_arc_policy_get_property (GObject    *object,
                            guint       prop_id,
                            GValue     *value,
                            GParamSpec *pspec)
{
  KvArcPolicy *self = KV_ARC_POLICY (object);

  switch (prop_id)
    {
    case PROP_CAPACITY:
      g_value_set_uint (value, self->capacity);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_arc_policy_set_property (GObject      *object,
                            guint         prop_id,
                            const GValue *value,
                            GParamSpec   *pspec)
{
  KvArcPolicy *self = KV_ARC_POLICY (object);

  switch (prop_id)
    {
    case PROP_CAPACITY:
      if (self->capacity != g_value_get_uint (value))
        {
          self->capacity = g_value_get_uint (value);
          if (self->capacity > 0)
            self->target_t1 = MIN (self->target_t1, self->capacity);
          g_object_notify_by_pspec (object, pspec);
        }
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_arc_policy_class_init (KvArcPolicyClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_arc_policy_finalize;
  object_class->get_property = kv_arc_policy_get_property;
  object_class->set_property = kv_arc_policy_set_property;

  /**
   * KvArcPolicy:capacity:
   *
   * How many keys the cache holds: the slot count of the primary tier. It
   * bounds the target size of T1 and the number of ghosts. 0 means not
   * known yet; a [class@Kv.PrimaryTier] given a policy of capacity 0 sets it
   * to its slot count. Set it on the owner thread only.
   */
  properties[PROP_CAPACITY] =
    g_param_spec_uint ("capacity", NULL, NULL,
                       0, G_MAXUINT32, 0,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT |
                       G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_arc_policy_init (KvArcPolicy *self)
{
  self->nodes = g_hash_table_new_full (kv_key_hash, kv_key_equal, NULL, arc_node_free);
  for (guint i = 0; i < ARC_N_LISTS; i++)
    g_queue_init (&self->lists[i]);
}

/**
 * kv_arc_policy_new:
 * @capacity: the slot count of the primary tier, or 0 to let the primary
 *   tier set it
 *
 * Creates an adaptive replacement cache policy. May be called from any
 * thread.
 *
 * Returns: (transfer full): a new policy
 */
KvCachePolicy *
kv_arc_policy_new (guint capacity)
{
  return g_object_new (KV_TYPE_ARC_POLICY, "capacity", capacity, NULL);
}

/**
 * kv_arc_policy_get_target_t1:
 * @self: an ARC policy
 *
 * Gets the adaptive target size of T1 (ARC's `p`): it starts at 0, grows
 * when keys evicted from T1 are stored again and shrinks when keys evicted
 * from T2 are. Owner thread only.
 *
 * Returns: the target number of T1 keys
 */
guint
kv_arc_policy_get_target_t1 (KvArcPolicy *self)
{
  g_return_val_if_fail (KV_IS_ARC_POLICY (self), 0);

  return self->target_t1;
}
