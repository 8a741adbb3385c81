/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-key-index.h"

/* The index of known chunks the s3 and redis tiers keep
 * (plugins/common/kv-key-index): a set of 64-bit digests against a
 * GHashTable model through adds and removals that wrap around the table
 * and cross its growth, its bound, the digest 0, the digests of keys that
 * differ only in their group, and its bytes a key. */

static guint64
next_digest (guint64 *state)
{
  /* splitmix64: distinct, well mixed, reproducible */
  guint64 z = (*state += G_GUINT64_CONSTANT (0x9e3779b97f4a7c15));

  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static void
assert_same (KvKeyIndex *index,
             GHashTable *model,
             guint64    *digests,
             guint       n)
{
  g_assert_cmpuint (kv_key_index_get_size (index), ==, g_hash_table_size (model));
  for (guint i = 0; i < n; i++)
    g_assert_cmpint (kv_key_index_contains (index, digests[i]), ==,
                     g_hash_table_contains (model, &digests[i]));
}

/* Random adds and removals, many of them of digests that share their low
 * bits (long runs that wrap the table's end), against a model. */
static void
test_model (void)
{
  const guint n = 4000;
  g_autoptr(KvKeyIndex) index = kv_key_index_new (n);
  g_autoptr(GHashTable) model = g_hash_table_new (g_int64_hash, g_int64_equal);
  g_autofree guint64 *digests = g_new (guint64, n);
  guint64 state = 42;
  GRand *rand = g_rand_new_with_seed (7);

  for (guint i = 0; i < n; i++)
    {
      digests[i] = next_digest (&state);
      /* a third collide on their low 12 bits, and some sit at the end of
       * the table, so that runs wrap */
      if (i % 3 == 0)
        digests[i] = (digests[i] & ~G_GUINT64_CONSTANT (0xfff)) | (0xff0 + i % 16);
    }
  for (guint round = 0; round < 40000; round++)
    {
      guint i = g_rand_int_range (rand, 0, n);

      if (g_rand_boolean (rand))
        {
          g_assert_true (kv_key_index_add (index, digests[i]));
          g_hash_table_add (model, &digests[i]);
        }
      else
        g_assert_cmpint (kv_key_index_remove (index, digests[i]), ==,
                         g_hash_table_remove (model, &digests[i]));
      if (round % 5000 == 0)
        assert_same (index, model, digests, n);
    }
  assert_same (index, model, digests, n);
  /* everything out, in order: the runs close up */
  for (guint i = 0; i < n; i++)
    g_assert_cmpint (kv_key_index_remove (index, digests[i]), ==,
                     g_hash_table_remove (model, &digests[i]));
  g_assert_cmpuint (kv_key_index_get_size (index), ==, 0);
  assert_same (index, model, digests, n);
  g_rand_free (rand);
}

/* Full: a new digest is refused, one already in is still "in", a removal
 * makes room; clear empties it and gives the table back. */
static void
test_bound (void)
{
  g_autoptr(KvKeyIndex) index = kv_key_index_new (3);
  gsize small = kv_key_index_get_table_bytes (index);

  g_assert_cmpuint (kv_key_index_get_max_keys (index), ==, 3);
  g_assert_true (kv_key_index_add (index, 10));
  g_assert_true (kv_key_index_add (index, 20));
  g_assert_true (kv_key_index_add (index, 30));
  g_assert_false (kv_key_index_add (index, 40));
  g_assert_false (kv_key_index_contains (index, 40));
  g_assert_true (kv_key_index_add (index, 20));
  g_assert_cmpuint (kv_key_index_get_size (index), ==, 3);
  g_assert_true (kv_key_index_remove (index, 20));
  g_assert_false (kv_key_index_remove (index, 20));
  g_assert_true (kv_key_index_add (index, 40));
  g_assert_true (kv_key_index_contains (index, 40));
  /* 0 is a digest like another */
  g_assert_true (kv_key_index_remove (index, 40));
  g_assert_true (kv_key_index_add (index, 0));
  g_assert_true (kv_key_index_contains (index, 0));
  g_assert_true (kv_key_index_remove (index, 0));
  g_assert_false (kv_key_index_contains (index, 0));
  kv_key_index_clear (index);
  g_assert_cmpuint (kv_key_index_get_size (index), ==, 0);
  g_assert_false (kv_key_index_contains (index, 10));
  g_assert_cmpuint (kv_key_index_get_table_bytes (index), ==, small);
}

/* Bytes a key: 8 a slot, at most half the slots used, so 16 to 32 bytes
 * a key once the table has grown (16 when full at a power of two). */
static void
test_bytes_per_key (void)
{
  const guint max_keys = 1u << 16;
  g_autoptr(KvKeyIndex) index = kv_key_index_new (max_keys);
  guint64 state = 1;

  for (guint i = 0; i < max_keys; i++)
    {
      g_assert_true (kv_key_index_add (index, next_digest (&state)));
      if (i + 1 >= 1024)
        {
          gsize bytes = kv_key_index_get_table_bytes (index);

          g_assert_cmpuint (bytes, >=, 16 * (gsize) (i + 1));
          g_assert_cmpuint (bytes, <=, 32 * (gsize) (i + 1));
        }
    }
  g_assert_cmpuint (kv_key_index_get_table_bytes (index), ==, 16 * (gsize) max_keys);
  g_assert_false (kv_key_index_add (index, next_digest (&state)));
  g_assert_cmpuint (kv_key_index_get_table_bytes (index), ==, 16 * (gsize) max_keys);
}

/* Keys that differ in their hash or only in their group have different
 * digests; equal keys the same. */
static void
test_key_digest (void)
{
  guint8 hash[32] = { 0 };
  g_autoptr(KvKey) a = NULL;
  g_autoptr(KvKey) a_again = NULL;
  g_autoptr(KvKey) other_group = NULL;
  g_autoptr(KvKey) other_hash = NULL;

  for (guint i = 0; i < sizeof hash; i++)
    hash[i] = (guint8) i;
  a = kv_key_new (hash, sizeof hash, 0);
  a_again = kv_key_new (hash, sizeof hash, 0);
  other_group = kv_key_new (hash, sizeof hash, 1);
  hash[31] ^= 1;
  other_hash = kv_key_new (hash, sizeof hash, 0);
  g_assert_cmpuint (kv_key_index_digest (a), ==, kv_key_index_digest (a_again));
  g_assert_cmpuint (kv_key_index_digest (a), !=, kv_key_index_digest (other_group));
  g_assert_cmpuint (kv_key_index_digest (a), !=, kv_key_index_digest (other_hash));
  g_assert_cmpuint (kv_key_index_digest (a), !=, 0);
}

/* Adds, lookups and removals from four threads at once, each on digests
 * of its own: every one of them right at the end. */
typedef struct
{
  KvKeyIndex *index;
  guint64     seed;
} Worker;

static gpointer
worker (gpointer data)
{
  Worker *w = data;
  guint64 state = w->seed;
  guint64 digests[512];

  for (guint round = 0; round < 50; round++)
    {
      for (guint i = 0; i < G_N_ELEMENTS (digests); i++)
        {
          digests[i] = next_digest (&state);
          g_assert_true (kv_key_index_add (w->index, digests[i]));
        }
      for (guint i = 0; i < G_N_ELEMENTS (digests); i++)
        g_assert_true (kv_key_index_contains (w->index, digests[i]));
      for (guint i = 0; i < G_N_ELEMENTS (digests); i += 2)
        g_assert_true (kv_key_index_remove (w->index, digests[i]));
      for (guint i = 0; i < G_N_ELEMENTS (digests); i++)
        g_assert_cmpint (kv_key_index_contains (w->index, digests[i]), ==, i % 2 == 1);
      for (guint i = 1; i < G_N_ELEMENTS (digests); i += 2)
        g_assert_true (kv_key_index_remove (w->index, digests[i]));
    }
  return NULL;
}

static void
test_threads (void)
{
  g_autoptr(KvKeyIndex) index = kv_key_index_new (4 * 512);
  Worker workers[4];
  GThread *threads[4];

  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    {
      workers[t] = (Worker) { index, (guint64) (t + 1) << 32 };
      threads[t] = g_thread_new ("index", worker, &workers[t]);
    }
  for (guint t = 0; t < G_N_ELEMENTS (threads); t++)
    g_thread_join (threads[t]);
  g_assert_cmpuint (kv_key_index_get_size (index), ==, 0);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/key-index/model", test_model);
  g_test_add_func ("/key-index/bound", test_bound);
  g_test_add_func ("/key-index/bytes-per-key", test_bytes_per_key);
  g_test_add_func ("/key-index/key-digest", test_key_digest);
  g_test_add_func ("/key-index/threads", test_threads);
  return g_test_run ();
}
