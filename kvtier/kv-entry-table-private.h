/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

#include "kv-key.h"

G_BEGIN_DECLS

/* The primary tier's index (kv-primary-tier.c), KvKey → the tier's entry:
 * open addressing with linear probing over the keys' own hashes (computed
 * once per key), and deletion by backward shift, so that the steady churn
 * of stores and evictions leaves no tombstones to rehash; the table only
 * grows, while the tier fills. At most half full.
 *
 * A bucket holds all a lookup needs: the hash, the key, the entry pointer
 * tagged while the entry is being written (see KV_ENTRY_PENDING_TAG), and
 * the manager's stamp (the serial of the last request that counted the
 * chunk, and the tier it counted it on when its lookup promoted it, see
 * _kv_primary_tier_lookup_stamp(); 0 for none). A hit, metrics
 * included, reads one bucket and never the entry.
 *
 * Owner thread only, as the tier: no lock. What a lookup, a store's
 * probe or an eviction runs is inline below; what makes or grows the
 * table is in kv-entry-table.c. */
typedef struct
{
  guint    hash;
  KvKey   *key;       /* the entry's key */
  gpointer value;     /* the tier's tagged KvEntry *, NULL when empty */
  guint64  stamp;
} KvBucket;

typedef struct
{
  KvBucket *buckets;
  guint     mask;     /* capacity - 1 */
  guint     n_entries;
} KvEntryTable;

G_GNUC_INTERNAL
void _kv_entry_table_init          (KvEntryTable *table);
G_GNUC_INTERNAL
void _kv_entry_table_clear         (KvEntryTable *table);
/* Adds @value, the entry of @key, which is not in the table. */
G_GNUC_INTERNAL
void _kv_entry_table_add           (KvEntryTable *table,
                                    KvKey        *key,
                                    gpointer      value);
/* The bucket of @key, or NULL. The loop of _kv_entry_table_probe() without
 * the empty bucket: written on its own, it costs the manager's store cycle
 * 0.1 % fewer instructions than calling that one (callgrind). */
static inline KvBucket *
_kv_entry_table_find (KvEntryTable *table,
                      const KvKey  *key)
{
  guint hash = kv_key_hash (key);

  for (guint i = hash & table->mask;; i = (i + 1) & table->mask)
    {
      KvBucket *bucket = &table->buckets[i];

      if (bucket->value == NULL)
        return NULL;
      if (bucket->hash == hash && kv_key_equal (bucket->key, key))
        return bucket;
    }
}

static inline gpointer
_kv_entry_table_lookup (KvEntryTable *table,
                        const KvKey  *key)
{
  KvBucket *bucket = _kv_entry_table_find (table, key);

  return bucket != NULL ? bucket->value : NULL;
}

/* Whether adding a key makes the table more than half full. */
static inline gboolean
_kv_entry_table_add_grows (KvEntryTable *table)
{
  return (table->n_entries + 1) * 2 > table->mask + 1;
}

/* The bucket of @key (whose hash is @hash), or NULL with *@empty set to
 * the empty bucket where it would go, valid until the table changes. */
static inline KvBucket *
_kv_entry_table_probe (KvEntryTable *table,
                       const KvKey  *key,
                       guint         hash,
                       KvBucket    **empty)
{
  for (guint i = hash & table->mask;; i = (i + 1) & table->mask)
    {
      KvBucket *bucket = &table->buckets[i];

      if (bucket->value == NULL)
        {
          *empty = bucket;
          return NULL;
        }
      if (bucket->hash == hash && kv_key_equal (bucket->key, key))
        return bucket;
    }
}

/* Empties @bucket and shifts back the entries that probed past it, so
 * every key stays reachable from its home bucket without tombstones. */
static inline void
_kv_entry_table_remove_bucket (KvEntryTable *table,
                               KvBucket     *bucket)
{
  guint hole = (guint) (bucket - table->buckets);

  for (guint j = (hole + 1) & table->mask; table->buckets[j].value != NULL; j = (j + 1) & table->mask)
    {
      guint home = table->buckets[j].hash & table->mask;

      /* the entry at j may move into the hole unless its home lies
       * cyclically in (hole, j] */
      if (((j - home) & table->mask) >= ((j - hole) & table->mask))
        {
          table->buckets[hole] = table->buckets[j];
          hole = j;
        }
    }
  table->buckets[hole].value = NULL;
  table->n_entries--;
}

static inline void
_kv_entry_table_remove (KvEntryTable *table,
                        const KvKey  *key)
{
  KvBucket *bucket = _kv_entry_table_find (table, key);

  if (bucket != NULL)
    _kv_entry_table_remove_bucket (table, bucket);
}

G_END_DECLS
