/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-entry-table-private.h"

#define KV_ENTRY_TABLE_MIN_CAPACITY 64

void
_kv_entry_table_init (KvEntryTable *table)
{
  table->buckets = g_new0 (KvBucket, KV_ENTRY_TABLE_MIN_CAPACITY);
  table->mask = KV_ENTRY_TABLE_MIN_CAPACITY - 1;
  table->n_entries = 0;
}

void
_kv_entry_table_clear (KvEntryTable *table)
{
  g_clear_pointer (&table->buckets, g_free);
  table->mask = 0;
  table->n_entries = 0;
}

static void
place (KvEntryTable   *table,
       const KvBucket *from)
{
  guint i = from->hash & table->mask;

  while (table->buckets[i].value != NULL)
    i = (i + 1) & table->mask;
  table->buckets[i] = *from;
}

void
_kv_entry_table_add (KvEntryTable *table,
                     KvKey        *key,
                     gpointer      value)
{
  KvBucket bucket = { kv_key_hash (key), key, value, 0 };

  if (G_UNLIKELY (_kv_entry_table_add_grows (table)))
    {
      KvBucket *old = table->buckets;
      guint old_capacity = table->mask + 1;

      table->buckets = g_new0 (KvBucket, old_capacity * 2);
      table->mask = old_capacity * 2 - 1;
      for (guint i = 0; i < old_capacity; i++)
        if (old[i].value != NULL)
          place (table, &old[i]);
      g_free (old);
    }
  place (table, &bucket);
  table->n_entries++;
}
