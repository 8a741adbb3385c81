/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "kv-fs-index.h"

/* The in-memory index and the eviction orders (lru, chain). */

#define SZ 100

static KvKey *keys[20];

/* Stores key @i (after @parent, or none) and publishes it. */
static void
put (KvFsIndex *index,
     guint      i,
     gint       parent,
     GPtrArray *victims)
{
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[i], parent >= 0 ? keys[parent] : NULL,
                                            0, SZ, FALSE, victims), ==, KV_FS_BEGIN_STORE_NEW);
  kv_fs_index_end_store (index, keys[i], TRUE);
}

/* Index of the key of @entry in keys[]. */
static gint
which (KvFsEntry *entry)
{
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    if (kv_key_equal (entry->key, keys[i]))
      return i;
  return -1;
}

static void
release (KvFsIndex *index,
         GPtrArray *victims)
{
  for (guint i = 0; i < victims->len; i++)
    kv_fs_index_delete_done (index, victims->pdata[i]);
  g_ptr_array_set_size (victims, 0);
}

static void
test_lookup_states (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_LRU, 0);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();

  g_assert_cmpint (kv_fs_index_lookup (index, keys[0], FALSE), ==, KV_FS_INDEX_ABSENT);
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[0], NULL, 0, SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_NEW);
  /* being written: not readable, and a second store skips it */
  g_assert_cmpint (kv_fs_index_lookup (index, keys[0], FALSE), ==, KV_FS_INDEX_BUSY);
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[0], NULL, 0, SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_EXISTS);
  g_assert_cmpuint (kv_fs_index_get_used (index), ==, SZ);
  kv_fs_index_end_store (index, keys[0], TRUE);
  g_assert_cmpint (kv_fs_index_lookup (index, keys[0], FALSE), ==, KV_FS_INDEX_PRESENT);

  /* a failed store forgets the key and its bytes */
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[1], NULL, 0, SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_NEW);
  kv_fs_index_end_store (index, keys[1], FALSE);
  g_assert_cmpint (kv_fs_index_lookup (index, keys[1], FALSE), ==, KV_FS_INDEX_ABSENT);
  g_assert_cmpuint (kv_fs_index_get_used (index), ==, SZ);

  g_assert_true (kv_fs_index_remove (index, keys[0]));
  g_assert_false (kv_fs_index_remove (index, keys[0]));
  g_assert_cmpuint (kv_fs_index_get_used (index), ==, 0);
  g_assert_cmpuint (victims->len, ==, 0);
  kv_fs_index_free (index);
}

static void
test_lru_order (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_LRU, 4 * SZ);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();

  for (guint i = 0; i < 4; i++)
    put (index, i, -1, victims);
  g_assert_cmpuint (victims->len, ==, 0);
  /* 0 and 1 used again: 2 is now the least recently used */
  g_assert_cmpint (kv_fs_index_lookup (index, keys[0], TRUE), ==, KV_FS_INDEX_PRESENT);
  kv_fs_index_touch (index, &keys[1], 1);

  put (index, 4, -1, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 2);
  /* evicted: gone for lookups, still blocking a store until deleted */
  g_assert_cmpint (kv_fs_index_lookup (index, keys[2], FALSE), ==, KV_FS_INDEX_BUSY);
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[2], NULL, 0, SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_BUSY);
  release (index, victims);
  g_assert_cmpint (kv_fs_index_lookup (index, keys[2], FALSE), ==, KV_FS_INDEX_ABSENT);

  put (index, 5, -1, victims);
  g_assert_cmpint (which (victims->pdata[0]), ==, 3);
  release (index, victims);
  g_assert_cmpuint (kv_fs_index_get_used (index), ==, 4 * SZ);
  kv_fs_index_free (index);
}

static void
test_pinned_never_evicted (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_LRU, 2 * SZ);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();
  KvFsEntry *pin0;
  KvFsEntry *pin1;

  put (index, 0, -1, victims);
  put (index, 1, -1, victims);
  pin0 = kv_fs_index_pin (index, keys[0]);
  g_assert_nonnull (pin0);
  g_assert_null (kv_fs_index_pin (index, keys[7]));

  /* 0 is older but being read: 1 goes */
  put (index, 2, -1, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 1);
  release (index, victims);

  /* everything pinned: no room, nothing evicted */
  pin1 = kv_fs_index_pin (index, keys[2]);
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[3], NULL, 0, SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_NO_SPACE);
  g_assert_cmpuint (victims->len, ==, 0);
  /* a reader that found the file corrupt removes it */
  kv_fs_index_unpin (index, pin1, TRUE);
  g_assert_cmpint (kv_fs_index_lookup (index, keys[2], FALSE), ==, KV_FS_INDEX_ABSENT);
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[3], NULL, 0, SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_NEW);
  kv_fs_index_end_store (index, keys[3], TRUE);
  kv_fs_index_unpin (index, pin0, FALSE);
  g_assert_cmpint (kv_fs_index_lookup (index, keys[0], FALSE), ==, KV_FS_INDEX_PRESENT);

  /* larger than the whole tier */
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[9], NULL, 0, 3 * SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_NO_SPACE);
  kv_fs_index_free (index);
}

/* chain: two chains 0→1→2→3 and 4→5; 6 alone. */
static void
test_chain_order (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_CHAIN, 7 * SZ);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();
  GArray *order = g_array_new (FALSE, FALSE, sizeof (gint));

  put (index, 0, -1, victims);
  put (index, 1, 0, victims);
  put (index, 2, 1, victims);
  put (index, 3, 2, victims);
  put (index, 4, -1, victims);
  put (index, 5, 4, victims);
  put (index, 6, -1, victims);

  /* Tails first, least recently used first: 3, then (3's predecessor
   * became the coldest tail) 2, 1, 0, ... */
  kv_fs_index_evict_bytes (index, 4 * SZ, victims);
  for (guint i = 0; i < victims->len; i++)
    {
      gint w = which (victims->pdata[i]);

      g_array_append_val (order, w);
    }
  release (index, victims);
  g_assert_cmpuint (order->len, ==, 4);
  g_assert_cmpint (g_array_index (order, gint, 0), ==, 3);
  g_assert_cmpint (g_array_index (order, gint, 1), ==, 2);
  g_assert_cmpint (g_array_index (order, gint, 2), ==, 1);
  g_assert_cmpint (g_array_index (order, gint, 3), ==, 0);
  g_array_unref (order);
  g_assert_cmpint (kv_fs_index_lookup (index, keys[5], FALSE), ==, KV_FS_INDEX_PRESENT);
  g_assert_cmpint (kv_fs_index_lookup (index, keys[6], FALSE), ==, KV_FS_INDEX_PRESENT);
  kv_fs_index_free (index);
}

/* A chunk whose predecessor is gone is unreachable: it goes first, even
 * when it was used more recently. */
static void
test_chain_orphans_first (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_CHAIN, 0);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();

  put (index, 0, -1, victims);
  put (index, 1, 0, victims);
  put (index, 2, 1, victims);
  put (index, 7, -1, victims);
  kv_fs_index_touch (index, &keys[2], 1);

  /* the middle of the chain is lost (its file was found corrupt) */
  g_assert_true (kv_fs_index_remove (index, keys[1]));

  kv_fs_index_evict_bytes (index, SZ, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 2);
  release (index, victims);
  /* then the tails by recency: 0 (its successor is gone) before 7 */
  kv_fs_index_evict_bytes (index, SZ, victims);
  g_assert_cmpint (which (victims->pdata[0]), ==, 0);
  release (index, victims);
  kv_fs_index_free (index);
}

/* Chunks found at restart are older than anything used since. */
static void
test_scanned_are_oldest (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_LRU, 3 * SZ);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();

  put (index, 0, -1, victims);
  g_assert_true (kv_fs_index_add_scanned (index, keys[1], 0, SZ));
  g_assert_true (kv_fs_index_add_scanned (index, keys[2], 0, SZ));
  g_assert_false (kv_fs_index_add_scanned (index, keys[0], 0, SZ));
  g_assert_cmpuint (kv_fs_index_get_n_entries (index), ==, 3);

  put (index, 3, -1, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  /* added newest-first at the head: 2 is the oldest */
  g_assert_cmpint (which (victims->pdata[0]), ==, 2);
  release (index, victims);
  kv_fs_index_free (index);
}

static void
test_trim (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_LRU, 2 * SZ);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();

  for (guint i = 0; i < 5; i++)
    g_assert_true (kv_fs_index_add_scanned (index, keys[i], 0, SZ));
  g_assert_cmpuint (kv_fs_index_get_used (index), ==, 5 * SZ);
  kv_fs_index_trim (index, victims);
  g_assert_cmpuint (victims->len, ==, 3);
  g_assert_cmpuint (kv_fs_index_get_used (index), ==, 2 * SZ);
  release (index, victims);
  g_assert_cmpuint (kv_fs_index_get_n_entries (index), ==, 2);
  kv_fs_index_free (index);
}

/* Stores key @i on root @root and publishes it; returns its victims. */
static void
put_on_root (KvFsIndex *index,
             guint      i,
             guint      root,
             GPtrArray *victims)
{
  g_assert_cmpint (kv_fs_index_begin_store (index, keys[i], NULL, root, SZ, FALSE, victims),
                   ==, KV_FS_BEGIN_STORE_NEW);
  kv_fs_index_end_store (index, keys[i], TRUE);
}

/* With several roots a store evicts the coldest chunk on its own root (its
 * file can be taken over), within the 16 coldest; past them, or with
 * none on the root, the coldest of all. */
static void
test_victim_on_same_root (void)
{
  KvFsIndex *index = kv_fs_index_new (KV_FS_EVICTION_LRU, 4 * SZ);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();

  put_on_root (index, 0, 1, victims);
  put_on_root (index, 1, 1, victims);
  put_on_root (index, 2, 0, victims);
  put_on_root (index, 3, 0, victims);
  g_assert_cmpuint (victims->len, ==, 0);

  /* root 0: key 2, though keys 0 and 1 are colder */
  put_on_root (index, 4, 0, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 2);
  release (index, victims);
  /* root 1: its coldest, key 0 */
  put_on_root (index, 5, 1, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 0);
  release (index, victims);
  /* root 2 holds nothing: the coldest of all (key 1) */
  put_on_root (index, 6, 2, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 1);
  release (index, victims);
  kv_fs_index_free (index);

  /* 16 chunks on root 1, then one on root 0: the 17th coldest, past the
   * window, so a store on root 0 evicts the coldest of all... */
  index = kv_fs_index_new (KV_FS_EVICTION_LRU, 17 * SZ);
  for (guint i = 0; i < 17; i++)
    put_on_root (index, i, i == 16 ? 0 : 1, victims);
  g_assert_cmpuint (victims->len, ==, 0);
  put_on_root (index, 17, 0, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 0);
  release (index, victims);
  /* ...and once it is the 16th coldest, that one */
  put_on_root (index, 18, 0, victims);
  g_assert_cmpuint (victims->len, ==, 1);
  g_assert_cmpint (which (victims->pdata[0]), ==, 16);
  release (index, victims);
  kv_fs_index_free (index);
}

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    keys[i] = test_chunk_key (i);

  g_test_add_func ("/kvtier/fs/index/lookup-states", test_lookup_states);
  g_test_add_func ("/kvtier/fs/index/lru-order", test_lru_order);
  g_test_add_func ("/kvtier/fs/index/pinned-never-evicted", test_pinned_never_evicted);
  g_test_add_func ("/kvtier/fs/index/chain-order", test_chain_order);
  g_test_add_func ("/kvtier/fs/index/chain-orphans-first", test_chain_orphans_first);
  g_test_add_func ("/kvtier/fs/index/scanned-are-oldest", test_scanned_are_oldest);
  g_test_add_func ("/kvtier/fs/index/trim", test_trim);
  g_test_add_func ("/kvtier/fs/index/victim-on-same-root", test_victim_on_same_root);

  ret = g_test_run ();
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    kv_key_unref (keys[i]);
  return ret;
}
