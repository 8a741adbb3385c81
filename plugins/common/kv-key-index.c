/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-key-index.h"

#include <xxhash.h>

/* The table a new or cleared index starts with (512 bytes). */
#define INITIAL_SLOTS 64u

/* The chunks a tier knows are in its store (the s3 tier's bucket, the
 * redis tier's servers), so that their lookups send no request.
 *
 * A set of 64-bit digests, open-addressed with linear probing: 8 bytes a
 * slot, no per-key allocation. The table doubles when it would pass half
 * full and never grows past the first power of two at least twice
 * max_keys, so a full index costs 16 to 32 bytes a key and a probe stays
 * short. Removal shifts the run back (no tombstones), so a set that keys
 * come and go through never degrades. 0 marks an empty slot: a digest of
 * 0 is stored as 1 (a collision, which the caller tolerates anyway). */
struct _KvKeyIndex
{
  GMutex   lock;
  guint    max_keys;
  gsize    max_slots;
  guint64 *table;      /* lock */
  gsize    n_slots;    /* lock: a power of two */
  guint    n_keys;     /* lock */
};

static gsize
slots_for (guint max_keys)
{
  gsize n = INITIAL_SLOTS;

  while (n < 2 * (gsize) max_keys)
    n *= 2;
  return n;
}

/* An index of at most @max_keys keys (1 to KV_KEY_INDEX_MAX_KEYS_LIMIT);
 * its table grows as keys come. */
KvKeyIndex *
kv_key_index_new (guint max_keys)
{
  KvKeyIndex *self;

  g_return_val_if_fail (max_keys > 0 && max_keys <= KV_KEY_INDEX_MAX_KEYS_LIMIT, NULL);

  self = g_new0 (KvKeyIndex, 1);
  g_mutex_init (&self->lock);
  self->max_keys = max_keys;
  self->max_slots = slots_for (max_keys);
  self->n_slots = MIN (INITIAL_SLOTS, self->max_slots);
  self->table = g_new0 (guint64, self->n_slots);
  return self;
}

void
kv_key_index_free (KvKeyIndex *self)
{
  if (self == NULL)
    return;
  g_free (self->table);
  g_mutex_clear (&self->lock);
  g_free (self);
}

/* The digest the index keeps for the key of @hash and @group: XXH3-64 of
 * the hash, seeded with the group (well mixed: its low bits pick the
 * slot). */
guint64
kv_key_index_digest_hash (const guint8 *hash,
                          gsize         hash_len,
                          guint32       group)
{
  guint64 digest = XXH3_64bits_withSeed (hash, hash_len, group);

  return digest != 0 ? digest : 1;
}

guint64
kv_key_index_digest (const KvKey *key)
{
  gsize len = 0;
  const guint8 *hash = kv_key_get_hash (key, &len);

  return kv_key_index_digest_hash (hash, len, kv_key_get_group (key));
}

static inline gsize
home (const KvKeyIndex *self,
      guint64           digest)
{
  return (gsize) digest & (self->n_slots - 1);
}

/* The slot holding @digest, or the empty slot ending its run. Lock held. */
static gsize
find (const KvKeyIndex *self,
      guint64           digest)
{
  gsize mask = self->n_slots - 1;
  gsize i = home (self, digest);

  while (self->table[i] != 0 && self->table[i] != digest)
    i = (i + 1) & mask;
  return i;
}

static void
grow (KvKeyIndex *self)
{
  guint64 *old = self->table;
  gsize n_old = self->n_slots;

  /* at most log2(max_keys) times in an index's life: a rehash under the
   * lock, amortized over the keys that filled the table */
  self->n_slots *= 2;
  self->table = g_new0 (guint64, self->n_slots);
  for (gsize i = 0; i < n_old; i++)
    if (old[i] != 0)
      self->table[find (self, old[i])] = old[i];
  g_free (old);
}

gboolean
kv_key_index_contains (KvKeyIndex *self,
                       guint64     digest)
{
  gboolean found;

  digest = digest != 0 ? digest : 1;
  g_mutex_lock (&self->lock);
  found = self->table[find (self, digest)] != 0;
  g_mutex_unlock (&self->lock);
  return found;
}

/* Adds @digest; FALSE when the index is full (max_keys), and the digest
 * is not added. TRUE when it is in the index now, added or already. */
gboolean
kv_key_index_add (KvKeyIndex *self,
                  guint64     digest)
{
  gsize i;
  gboolean added = TRUE;

  digest = digest != 0 ? digest : 1;
  g_mutex_lock (&self->lock);
  i = find (self, digest);
  if (self->table[i] == 0)
    {
      if (self->n_keys >= self->max_keys)
        added = FALSE;
      else
        {
          if (2 * ((gsize) self->n_keys + 1) > self->n_slots)
            {
              grow (self);
              i = find (self, digest);
            }
          self->table[i] = digest;
          self->n_keys++;
        }
    }
  g_mutex_unlock (&self->lock);
  return added;
}

/* Removes @digest; whether it was in the index. */
gboolean
kv_key_index_remove (KvKeyIndex *self,
                     guint64     digest)
{
  gsize mask, i, j;

  digest = digest != 0 ? digest : 1;
  g_mutex_lock (&self->lock);
  mask = self->n_slots - 1;
  i = find (self, digest);
  if (self->table[i] == 0)
    {
      g_mutex_unlock (&self->lock);
      return FALSE;
    }
  /* shift back each later key of the run that may sit in the hole (its
   * home is not in (i, j]), then empty the last hole */
  for (j = (i + 1) & mask; self->table[j] != 0; j = (j + 1) & mask)
    {
      gsize k = home (self, self->table[j]);

      if ((i <= j) ? (k <= i || k > j) : (k <= i && k > j))
        {
          self->table[i] = self->table[j];
          i = j;
        }
    }
  self->table[i] = 0;
  self->n_keys--;
  g_mutex_unlock (&self->lock);
  return TRUE;
}

/* Forgets every key, and gives the table back. */
void
kv_key_index_clear (KvKeyIndex *self)
{
  guint64 *old;

  g_mutex_lock (&self->lock);
  old = self->table;
  self->n_slots = MIN (INITIAL_SLOTS, self->max_slots);
  self->table = g_new0 (guint64, self->n_slots);
  self->n_keys = 0;
  g_mutex_unlock (&self->lock);
  g_free (old);
}

guint
kv_key_index_get_size (KvKeyIndex *self)
{
  guint n;

  g_mutex_lock (&self->lock);
  n = self->n_keys;
  g_mutex_unlock (&self->lock);
  return n;
}

guint
kv_key_index_get_max_keys (KvKeyIndex *self)
{
  return self->max_keys;
}

/* The table's bytes now (the index's memory, but for its 48-byte head). */
gsize
kv_key_index_get_table_bytes (KvKeyIndex *self)
{
  gsize n;

  g_mutex_lock (&self->lock);
  n = self->n_slots * sizeof (guint64);
  g_mutex_unlock (&self->lock);
  return n;
}
