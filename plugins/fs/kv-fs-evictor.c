/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-evictor.h"

/* The caller (KvFsIndex) holds its lock around every call. */

enum {
  LIST_NONE,
  LIST_LRU,       /* lru policy */
  LIST_ORPHANS,   /* chain policy */
  LIST_TAILS,
  LIST_INNER,
  N_LISTS
};

struct _KvFsEvictor
{
  KvFsEviction policy;
  GQueue       lists[N_LISTS];
};

KvFsEvictor *
kv_fs_evictor_new (KvFsEviction policy)
{
  KvFsEvictor *self = g_new0 (KvFsEvictor, 1);

  self->policy = policy;
  for (guint i = 0; i < N_LISTS; i++)
    g_queue_init (&self->lists[i]);
  return self;
}

void
kv_fs_evictor_free (KvFsEvictor *self)
{
  g_free (self);
}

KvFsEviction
kv_fs_evictor_get_policy (KvFsEvictor *self)
{
  return self->policy;
}

static guint
list_for (KvFsEvictor *self,
          KvFsEntry   *entry)
{
  if (self->policy == KV_FS_EVICTION_LRU)
    return LIST_LRU;
  if (entry->orphan)
    return LIST_ORPHANS;
  return entry->n_children > 0 ? LIST_INNER : LIST_TAILS;
}

static void
unlist (KvFsEvictor *self,
        KvFsEntry   *entry)
{
  if (entry->list != LIST_NONE)
    {
      g_queue_unlink (&self->lists[entry->list], &entry->link);
      entry->list = LIST_NONE;
    }
}

static void
put (KvFsEvictor *self,
     KvFsEntry   *entry,
     guint        list,
     gboolean     as_oldest)
{
  entry->link.data = entry;
  entry->link.prev = entry->link.next = NULL;
  if (as_oldest)
    g_queue_push_head_link (&self->lists[list], &entry->link);
  else
    g_queue_push_tail_link (&self->lists[list], &entry->link);
  entry->list = list;
}

/* Records that @parent precedes @entry in a prefix chain (chain policy
 * only; both may still be STORING). */
void
kv_fs_evictor_link (KvFsEvictor *self,
                    KvFsEntry   *entry,
                    KvFsEntry   *parent)
{
  if (self->policy != KV_FS_EVICTION_CHAIN || parent == NULL || parent == entry ||
      entry->parent != NULL)
    return;
  entry->parent = parent;
  entry->next_sibling = parent->first_child;
  parent->first_child = entry;
  parent->n_children++;
  /* A tail that gained a successor is no longer a tail. */
  if (parent->list == LIST_TAILS)
    {
      unlist (self, parent);
      put (self, parent, LIST_INNER, FALSE);
    }
}

/* Makes a PRESENT entry evictable: most recently used, or, for entries
 * found by a warm-restart scan, older than everything used since. */
void
kv_fs_evictor_add (KvFsEvictor *self,
                   KvFsEntry   *entry,
                   gboolean     as_oldest)
{
  unlist (self, entry);
  put (self, entry, list_for (self, entry), as_oldest);
}

void
kv_fs_evictor_touch (KvFsEvictor *self,
                     KvFsEntry   *entry)
{
  guint list = entry->list;

  if (list == LIST_NONE)
    return;
  g_queue_unlink (&self->lists[list], &entry->link);
  g_queue_push_tail_link (&self->lists[list], &entry->link);
}

/* Takes @entry out of the eviction order (it is being deleted, or its
 * store failed) but keeps its chain links. */
void
kv_fs_evictor_remove (KvFsEvictor *self,
                      KvFsEntry   *entry)
{
  unlist (self, entry);
}

/* Cuts @entry out of its chain: its predecessor may become a tail (the
 * coldest one: the chain is being peeled), its successors become
 * orphans. */
void
kv_fs_evictor_detach (KvFsEvictor *self,
                      KvFsEntry   *entry)
{
  KvFsEntry *parent = entry->parent;
  KvFsEntry *child;

  unlist (self, entry);
  if (parent != NULL)
    {
      KvFsEntry **p = &parent->first_child;

      while (*p != NULL && *p != entry)
        p = &(*p)->next_sibling;
      if (*p == entry)
        *p = entry->next_sibling;
      parent->n_children--;
      if (parent->n_children == 0 && parent->list == LIST_INNER)
        {
          unlist (self, parent);
          put (self, parent, LIST_TAILS, TRUE);
        }
      entry->parent = NULL;
      entry->next_sibling = NULL;
    }

  child = entry->first_child;
  while (child != NULL)
    {
      KvFsEntry *next = child->next_sibling;

      child->parent = NULL;
      child->next_sibling = NULL;
      child->orphan = TRUE;
      if (child->list != LIST_NONE)
        {
          unlist (self, child);
          put (self, child, LIST_ORPHANS, FALSE);
        }
      child = next;
    }
  entry->first_child = NULL;
  entry->n_children = 0;
}

static const guint pick_order[] = { LIST_LRU, LIST_ORPHANS, LIST_TAILS, LIST_INNER };

static gboolean
evictable (const KvFsEntry *entry)
{
  return entry->readers == 0 && entry->state == KV_FS_ENTRY_PRESENT;
}

/* The next entry to evict: the first unpinned one in eviction order, or
 * NULL. It stays listed; the caller removes it. */
KvFsEntry *
kv_fs_evictor_pick (KvFsEvictor *self)
{
  for (guint i = 0; i < G_N_ELEMENTS (pick_order); i++)
    for (GList *l = self->lists[pick_order[i]].head; l != NULL; l = l->next)
      if (evictable (l->data))
        return l->data;
  return NULL;
}

/* Like kv_fs_evictor_pick(), but among the first @window evictable
 * entries of the list the pick comes from, the first one on @root if
 * there is one: a store takes over its victim's file only on the same
 * root (filesystem), so a victim a few places warmer is worth more than
 * the coldest one on another drive. The choice never leaves the list of
 * the coldest class (orphans before tails, say). */
KvFsEntry *
kv_fs_evictor_pick_on_root (KvFsEvictor *self,
                            guint        root,
                            guint        window)
{
  for (guint i = 0; i < G_N_ELEMENTS (pick_order); i++)
    {
      KvFsEntry *first = NULL;
      guint seen = 0;

      for (GList *l = self->lists[pick_order[i]].head; l != NULL && seen < window; l = l->next)
        {
          KvFsEntry *entry = l->data;

          if (!evictable (entry))
            continue;
          if (entry->root == root)
            return entry;
          if (first == NULL)
            first = entry;
          seen++;
        }
      if (first != NULL)
        return first;
    }
  return NULL;
}
