/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-index.h"

/* How many of the coldest chunks a store looks at for one on its own
 * root, whose file it can take over (see kv_fs_evictor_pick_on_root()):
 * with two roots, all but 1 in 2^16 stores find one. */
#define VICTIM_WINDOW 16

struct _KvFsIndex
{
  GMutex       lock;
  GHashTable  *table;      /* KvKey (entry->key) → KvFsEntry */
  KvFsEvictor *evictor;
  guint64      max_size;   /* 0 = unbounded */
  guint64      used;       /* STORING + PRESENT bytes */
  guint64      reserved;   /* spare files (preallocate): on disk, no chunk yet */
  guint        n_deleting; /* DELETING entries still in the table */
};

static void
entry_free (KvFsEntry *entry)
{
  kv_key_unref (entry->key);
  g_free (entry);
}

KvFsIndex *
kv_fs_index_new (KvFsEviction policy,
                 guint64      max_size)
{
  KvFsIndex *self = g_new0 (KvFsIndex, 1);

  g_mutex_init (&self->lock);
  self->table = g_hash_table_new (kv_key_hash, kv_key_equal);
  self->evictor = kv_fs_evictor_new (policy);
  self->max_size = max_size;
  return self;
}

void
kv_fs_index_free (KvFsIndex *self)
{
  GHashTableIter iter;
  gpointer value;

  if (self == NULL)
    return;
  /* Entries being deleted are owned by their in-flight delete; the tier
   * waits for those before it frees the index. */
  g_hash_table_iter_init (&iter, self->table);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    entry_free (value);
  g_hash_table_unref (self->table);
  kv_fs_evictor_free (self->evictor);
  g_mutex_clear (&self->lock);
  g_free (self);
}

/* Takes @entry out of the table and the chains (lock held). Frees it
 * unless a reader still holds it. */
static void
drop_locked (KvFsIndex *self,
             KvFsEntry *entry)
{
  kv_fs_evictor_detach (self->evictor, entry);
  if (entry->state != KV_FS_ENTRY_DELETING)
    self->used -= entry->size;
  else if (entry->in_table)
    self->n_deleting--;
  if (entry->in_table)
    {
      g_hash_table_remove (self->table, entry->key);
      entry->in_table = FALSE;
    }
  entry->gone = TRUE;
  if (entry->readers == 0)
    entry_free (entry);
}

/* Marks @entry DELETING and hands it to the caller's victims. */
static void
evict_locked (KvFsIndex *self,
              KvFsEntry *entry,
              GPtrArray *victims)
{
  kv_fs_evictor_detach (self->evictor, entry);
  entry->state = KV_FS_ENTRY_DELETING;
  self->used -= entry->size;
  self->n_deleting++;
  g_ptr_array_add (victims, entry);
}

KvFsIndexState
kv_fs_index_lookup (KvFsIndex   *self,
                    const KvKey *key,
                    gboolean     touch)
{
  KvFsEntry *entry;
  KvFsIndexState state = KV_FS_INDEX_ABSENT;

  g_mutex_lock (&self->lock);
  entry = g_hash_table_lookup (self->table, key);
  if (entry != NULL)
    {
      if (entry->state == KV_FS_ENTRY_PRESENT)
        {
          state = KV_FS_INDEX_PRESENT;
          if (touch)
            kv_fs_evictor_touch (self->evictor, entry);
        }
      else
        state = KV_FS_INDEX_BUSY;
    }
  g_mutex_unlock (&self->lock);
  return state;
}

/* Recency: @keys were used, most recent last. */
void
kv_fs_index_touch (KvFsIndex     *self,
                   KvKey * const *keys,
                   guint          n_keys)
{
  g_mutex_lock (&self->lock);
  for (guint i = 0; i < n_keys; i++)
    {
      KvFsEntry *entry = g_hash_table_lookup (self->table, keys[i]);

      if (entry != NULL && entry->state == KV_FS_ENTRY_PRESENT)
        kv_fs_evictor_touch (self->evictor, entry);
    }
  g_mutex_unlock (&self->lock);
}

/* Reserves @size bytes for a store of @key on @root, evicting chunks
 * (returned in @victims, now DELETING; on @root where the eviction order
 * allows) to stay within max-size. @parent_key is the
 * chunk before @key in its prefix chain, if known. With @from_reserved,
 * the store takes over a spare file: its @size reserved bytes (see
 * kv_fs_index_reserve()) become the chunk's, with no eviction, if and
 * only if the store goes ahead. */
KvFsBeginStore
kv_fs_index_begin_store (KvFsIndex *self,
                         KvKey     *key,
                         KvKey     *parent_key,
                         guint      root,
                         guint64    size,
                         gboolean   from_reserved,
                         GPtrArray *victims)
{
  KvFsEntry *entry;

  g_mutex_lock (&self->lock);
  entry = g_hash_table_lookup (self->table, key);
  if (entry != NULL)
    {
      KvFsBeginStore ret = entry->state == KV_FS_ENTRY_DELETING ?
                           KV_FS_BEGIN_STORE_BUSY : KV_FS_BEGIN_STORE_EXISTS;

      if (ret == KV_FS_BEGIN_STORE_EXISTS)
        kv_fs_evictor_touch (self->evictor, entry);
      g_mutex_unlock (&self->lock);
      return ret;
    }

  if (from_reserved)
    {
      g_assert (self->reserved >= size);
      self->reserved -= size;
    }
  else if (self->max_size > 0)
    {
      if (size > self->max_size)
        {
          g_mutex_unlock (&self->lock);
          return KV_FS_BEGIN_STORE_NO_SPACE;
        }
      while (self->used + self->reserved + size > self->max_size)
        {
          KvFsEntry *victim = kv_fs_evictor_pick_on_root (self->evictor, root,
                                                          VICTIM_WINDOW);

          if (victim == NULL)
            {
              g_mutex_unlock (&self->lock);
              return KV_FS_BEGIN_STORE_NO_SPACE;
            }
          evict_locked (self, victim, victims);
        }
    }

  entry = g_new0 (KvFsEntry, 1);
  entry->key = kv_key_ref (key);
  entry->size = size;
  entry->root = root;
  entry->state = KV_FS_ENTRY_STORING;
  entry->in_table = TRUE;
  g_hash_table_insert (self->table, entry->key, entry);
  self->used += size;
  if (parent_key != NULL)
    {
      KvFsEntry *parent = g_hash_table_lookup (self->table, parent_key);

      if (parent != NULL && parent->state != KV_FS_ENTRY_DELETING)
        kv_fs_evictor_link (self->evictor, entry, parent);
    }
  g_mutex_unlock (&self->lock);
  return KV_FS_BEGIN_STORE_NEW;
}

/* The store reserved by kv_fs_index_begin_store() finished. */
void
kv_fs_index_end_store (KvFsIndex   *self,
                       const KvKey *key,
                       gboolean     success)
{
  KvFsEntry *entry;

  g_mutex_lock (&self->lock);
  entry = g_hash_table_lookup (self->table, key);
  if (entry != NULL && entry->state == KV_FS_ENTRY_STORING)
    {
      if (success)
        {
          entry->state = KV_FS_ENTRY_PRESENT;
          kv_fs_evictor_add (self->evictor, entry, FALSE);
        }
      else
        drop_locked (self, entry);
    }
  g_mutex_unlock (&self->lock);
}

/* Pins a PRESENT entry for a load: it cannot be evicted until unpinned.
 * Returns NULL if @key is not readable. */
KvFsEntry *
kv_fs_index_pin (KvFsIndex   *self,
                 const KvKey *key)
{
  KvFsEntry *entry;

  g_mutex_lock (&self->lock);
  entry = g_hash_table_lookup (self->table, key);
  if (entry != NULL && entry->state == KV_FS_ENTRY_PRESENT)
    entry->readers++;
  else
    entry = NULL;
  g_mutex_unlock (&self->lock);
  return entry;
}

/* Releases a pin; with @remove, the chunk's file is gone (deleted as
 * corrupt, or vanished) and the key is forgotten. */
void
kv_fs_index_unpin (KvFsIndex *self,
                   KvFsEntry *entry,
                   gboolean   remove)
{
  g_mutex_lock (&self->lock);
  g_assert (entry->readers > 0);
  entry->readers--;
  if (remove && !entry->gone)
    drop_locked (self, entry);
  else if (entry->gone && entry->readers == 0)
    entry_free (entry);
  g_mutex_unlock (&self->lock);
}

/* Forgets @key (its file is known to be gone). */
gboolean
kv_fs_index_remove (KvFsIndex   *self,
                    const KvKey *key)
{
  KvFsEntry *entry;
  gboolean found = FALSE;

  g_mutex_lock (&self->lock);
  entry = g_hash_table_lookup (self->table, key);
  if (entry != NULL && entry->state == KV_FS_ENTRY_PRESENT)
    {
      drop_locked (self, entry);
      found = TRUE;
    }
  g_mutex_unlock (&self->lock);
  return found;
}

/* Evicts at least @bytes (or everything evictable), e.g. after the disk
 * said ENOSPC. */
void
kv_fs_index_evict_bytes (KvFsIndex *self,
                         guint64    bytes,
                         GPtrArray *victims)
{
  guint64 freed = 0;

  g_mutex_lock (&self->lock);
  while (freed < bytes)
    {
      KvFsEntry *victim = kv_fs_evictor_pick (self->evictor);

      if (victim == NULL)
        break;
      freed += victim->size;
      evict_locked (self, victim, victims);
    }
  g_mutex_unlock (&self->lock);
}

/* Evicts until the index fits max-size again (after a warm restart found
 * more than fits). */
void
kv_fs_index_trim (KvFsIndex *self,
                  GPtrArray *victims)
{
  g_mutex_lock (&self->lock);
  while (self->max_size > 0 && self->used > self->max_size)
    {
      KvFsEntry *victim = kv_fs_evictor_pick (self->evictor);

      if (victim == NULL)
        break;
      evict_locked (self, victim, victims);
    }
  g_mutex_unlock (&self->lock);
}

/* The delete of an evicted entry finished: forget it. */
void
kv_fs_index_delete_done (KvFsIndex *self,
                         KvFsEntry *entry)
{
  g_mutex_lock (&self->lock);
  g_assert (entry->state == KV_FS_ENTRY_DELETING);
  drop_locked (self, entry);
  g_mutex_unlock (&self->lock);
}

/* A chunk found on disk by the warm-restart scan: PRESENT, older than
 * anything used since the tier started. FALSE if the key is known
 * already. */
gboolean
kv_fs_index_add_scanned (KvFsIndex *self,
                         KvKey     *key,
                         guint      root,
                         guint64    size)
{
  KvFsEntry *entry;

  g_mutex_lock (&self->lock);
  if (g_hash_table_contains (self->table, key))
    {
      g_mutex_unlock (&self->lock);
      return FALSE;
    }
  entry = g_new0 (KvFsEntry, 1);
  entry->key = kv_key_ref (key);
  entry->size = size;
  entry->root = root;
  entry->state = KV_FS_ENTRY_PRESENT;
  entry->in_table = TRUE;
  g_hash_table_insert (self->table, entry->key, entry);
  self->used += size;
  kv_fs_evictor_add (self->evictor, entry, TRUE);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

guint64
kv_fs_index_get_used (KvFsIndex *self)
{
  guint64 used;

  g_mutex_lock (&self->lock);
  used = self->used;
  g_mutex_unlock (&self->lock);
  return used;
}

/* Sets @size bytes aside for a spare file if chunks and spares leave
 * room for it within max-size (without evicting anything). */
gboolean
kv_fs_index_reserve (KvFsIndex *self,
                     guint64    size)
{
  gboolean ok;

  g_mutex_lock (&self->lock);
  ok = self->max_size == 0 || self->used + self->reserved + size <= self->max_size;
  if (ok)
    self->reserved += size;
  g_mutex_unlock (&self->lock);
  return ok;
}

/* A spare file of @size bytes is gone (deleted, not taken over). */
void
kv_fs_index_release_reserved (KvFsIndex *self,
                              guint64    size)
{
  g_mutex_lock (&self->lock);
  g_assert (self->reserved >= size);
  self->reserved -= size;
  g_mutex_unlock (&self->lock);
}

/* Whether a store of @size bytes, without a spare, would evict. */
gboolean
kv_fs_index_is_full (KvFsIndex *self,
                     guint64    size)
{
  gboolean full;

  g_mutex_lock (&self->lock);
  full = self->max_size > 0 && self->used + self->reserved + size > self->max_size;
  g_mutex_unlock (&self->lock);
  return full;
}

guint64
kv_fs_index_get_max_size (KvFsIndex *self)
{
  return self->max_size;
}

guint
kv_fs_index_get_n_entries (KvFsIndex *self)
{
  guint n;

  g_mutex_lock (&self->lock);
  n = g_hash_table_size (self->table) - self->n_deleting;
  g_mutex_unlock (&self->lock);
  return n;
}
