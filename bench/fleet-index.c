/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <kvtier.h>

/* KvFleetIndex's lookup of a request's prefix, next to the ceiling measured
 * in the same run: a bare GHashTable probe of the same keys.
 *
 * The index holds N_KEYS keys (default 1048576, 32-byte hashes as vLLM's
 * SHA-256 block hashes) in chains of 64, the prompts of N_KEYS / 64
 * requests, spread over 8 nodes: each chain held by one node, a quarter of
 * them by a second node too (a fetched copy), in places that vary. A
 * lookup is one random chain's 64 keys: the walk reads every key (the
 * longest prefix is the whole chain) and answers each holding node's
 * prefix. The ceiling probes the same 64 keys in a GHashTable of the same
 * keys, one kv_key_hash/kv_key_equal probe each, the least any exact
 * index can do. Both walk the chains in the same random order, so both
 * pay the same cache misses.
 *
 * Three measures, each with its ceiling:
 * - keys just made (the target's measure): a router makes a request's
 *   keys from its token blocks right before it looks them up (kvtier
 *   route, the fleet simulator), so the bench makes each batch of 16
 *   requests' keys, untimed, then times their lookups: the keys' own
 *   lines are in cache, the index's and the table's are not;
 * - cold keys: the lookups of the keys the index was filled with, whose
 *   own lines (80 bytes apart, 80 MiB for a million) are cache misses too;
 * - after churn, keys just made: the nodes then evict the tails of random
 *   prompts (1 to 16 chunks, as LRU eviction does) and store them again,
 *   once per chunk of the index on average, so that entries no longer sit
 *   in prompt order (a removed entry's place is taken by the last one,
 *   stored ones go to the end): the walk probes more and follows less.
 *
 * Prints the time of one 64-chunk lookup, the ceiling's, their ratio, and
 * the index's bytes per key.
 *
 *   valgrind --tool=callgrind --toggle-collect=bench_index \
 *     --toggle-collect=bench_ceiling bench/fleet-index 65536 2000
 *
 * counts the lookup's instructions (and the probe's) on a loaded machine,
 * per key: divide by 2 × 2000 × 64 (each measure runs every lookup); add
 * --cache-sim=yes and 1048576 keys for the first-level misses.
 *
 * Usage: fleet-index [N_KEYS] [LOOKUPS] */

#define CHAIN 64
#define N_NODES 8
/* requests whose keys are made together, then looked up */
#define BATCH 16
/* the longest tail a churn step evicts and stores again */
#define CHURN_TAIL 16

static KvKey *
make_key (guint64 i)
{
  guint8 hash[32];
  guint64 z = i * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15) + 1;

  for (guint w = 0; w < 4; w++)
    {
      z ^= z >> 31;
      z *= G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
      memcpy (hash + w * 8, &z, 8);
    }
  return kv_key_new (hash, sizeof hash, 0);
}

static G_GNUC_NO_INLINE guint
bench_index (KvFleetIndex     *index,
             KvKey * const    *keys,
             KvFleetNodeMatch *matches)
{
  return kv_fleet_index_lookup_into (index, keys, CHAIN, matches, N_NODES);
}

static G_GNUC_NO_INLINE guint
bench_ceiling (GHashTable    *table,
               KvKey * const *keys)
{
  guint found = 0;

  for (guint j = 0; j < CHAIN; j++)
    found += g_hash_table_lookup (table, keys[j]) != NULL;
  return found;
}

/* Keys just made: a batch of requests' keys made, then looked up by the
 * index and the ceiling in turn (which goes first alternates). Adds the
 * times and counts. */
static void
measure_fresh_keys (KvFleetIndex     *index,
                    GHashTable       *table,
                    const guint      *order,
                    guint64           n_lookups,
                    KvFleetNodeMatch *matches,
                    gint64           *t_index,
                    gint64           *t_ceiling,
                    guint64          *answers,
                    guint64          *found)
{
  for (guint64 b = 0; b < n_lookups; b += BATCH)
    {
      guint n = (guint) MIN (BATCH, n_lookups - b);
      KvKey *fresh[BATCH * CHAIN];
      gboolean index_first = (b / BATCH) % 2 == 0;

      for (guint r = 0; r < n; r++)
        for (guint j = 0; j < CHAIN; j++)
          fresh[r * CHAIN + j] = make_key ((guint64) order[b + r] * CHAIN + j);
      for (guint pass = 0; pass < 2; pass++)
        {
          gboolean index_pass = (pass == 0) == index_first;
          gint64 t0 = g_get_monotonic_time ();

          for (guint r = 0; r < n; r++)
            {
              if (index_pass)
                *answers += bench_index (index, fresh + r * CHAIN, matches);
              else
                *found += bench_ceiling (table, fresh + r * CHAIN);
            }
          if (index_pass)
            *t_index += g_get_monotonic_time () - t0;
          else
            *t_ceiling += g_get_monotonic_time () - t0;
        }
      for (guint i = 0; i < n * CHAIN; i++)
        kv_key_unref (fresh[i]);
    }
}

static void
print_measure (const char *what,
               gint64      t_index,
               gint64      t_ceiling,
               guint64     n_lookups)
{
  printf ("  %s:\n", what);
  printf ("  index lookup (64-chunk prefix)   %8.0f ns   %.3f µs\n",
          t_index * 1000.0 / n_lookups, t_index / (gdouble) n_lookups);
  printf ("  bare hash probe of the 64 keys   %8.0f ns   (ceiling)\n",
          t_ceiling * 1000.0 / n_lookups);
  printf ("  ratio                            %8.2f × the ceiling\n",
          t_ceiling > 0 ? (gdouble) t_index / t_ceiling : 0.0);
}

int
main (int   argc,
      char *argv[])
{
  guint64 n_keys = 1 << 20, n_lookups = 200000;
  guint n_chains;
  g_autoptr(KvFleetIndex) index = kv_fleet_index_new ();
  g_autoptr(GHashTable) table = g_hash_table_new (kv_key_hash, kv_key_equal);
  g_autoptr(GRand) rand = g_rand_new_with_seed (42);
  g_autofree KvKey **keys = NULL;
  g_autofree guint *order = NULL;
  KvFleetNodeMatch matches[N_NODES];
  guint64 answers = 0, found = 0;
  gint64 t0, t_index = 0, t_ceiling = 0, t_index_cold = 0, t_ceiling_cold = 0;
  gint64 t_index_churn = 0, t_ceiling_churn = 0;
  guint64 bytes;

  if (argc > 1 && (g_str_equal (argv[1], "-h") || g_str_equal (argv[1], "--help")))
    {
      printf ("Usage: %s [N_KEYS] [LOOKUPS]\n\n"
              "Times KvFleetIndex lookups of a 64-chunk prefix over N_KEYS keys (default\n"
              "1048576) next to a bare hash probe of the same keys, LOOKUPS times (default\n"
              "200000), and prints the index's bytes per key.\n", argv[0]);
      return 0;
    }
  if (argc > 1)
    n_keys = g_ascii_strtoull (argv[1], NULL, 10);
  if (argc > 2)
    n_lookups = g_ascii_strtoull (argv[2], NULL, 10);
  if (n_keys < CHAIN || n_lookups == 0)
    {
      fprintf (stderr, "N_KEYS must be at least %u and LOOKUPS at least 1\n", CHAIN);
      return 2;
    }
  n_chains = (guint) (n_keys / CHAIN);
  n_keys = (guint64) n_chains * CHAIN;

  keys = g_new (KvKey *, n_keys);
  for (guint n = 0; n < N_NODES; n++)
    {
      g_autofree char *name = g_strdup_printf ("10.0.0.%u:7411", n + 1);

      kv_fleet_index_add_node (index, name);
    }
  for (guint c = 0; c < n_chains; c++)
    {
      guint owner = c % N_NODES;
      guint8 places[CHAIN];

      for (guint j = 0; j < CHAIN; j++)
        {
          keys[(guint64) c * CHAIN + j] = make_key ((guint64) c * CHAIN + j);
          g_hash_table_add (table, keys[(guint64) c * CHAIN + j]);
          /* the chain's head on the device, the rest in the primary or on disk */
          places[j] = j < 8 ? KV_FLEET_LOCATION_DEVICE | KV_FLEET_LOCATION_PRIMARY
                            : j < 32 ? KV_FLEET_LOCATION_PRIMARY : KV_FLEET_LOCATION_DISK;
        }
      kv_fleet_index_update_many (index, owner, keys + (gsize) c * CHAIN, places, CHAIN);
      if (c % 4 == 0)
        kv_fleet_index_update_many (index, (owner + 3) % N_NODES, keys + (gsize) c * CHAIN, places, CHAIN);
    }
  bytes = kv_fleet_index_get_memory_size (index);

  order = g_new (guint, n_lookups);
  for (guint64 i = 0; i < n_lookups; i++)
    order[i] = g_rand_int_range (rand, 0, n_chains);

  measure_fresh_keys (index, table, order, n_lookups, matches, &t_index, &t_ceiling,
                      &answers, &found);

  /* cold keys: interleaved rounds, so both see the same machine */
  for (guint round = 0; round < 4; round++)
    {
      t0 = g_get_monotonic_time ();
      for (guint64 i = round; i < n_lookups; i += 4)
        answers += bench_index (index, keys + (gsize) order[i] * CHAIN, matches);
      t_index_cold += g_get_monotonic_time () - t0;
      t0 = g_get_monotonic_time ();
      for (guint64 i = round; i < n_lookups; i += 4)
        found += bench_ceiling (table, keys + (gsize) order[i] * CHAIN);
      t_ceiling_cold += g_get_monotonic_time () - t0;
    }

  /* churn, then keys just made again */
  for (guint64 step = 0; step < n_keys / ((CHURN_TAIL + 1) / 2); step++)
    {
      guint c = g_rand_int_range (rand, 0, n_chains);
      guint tail = g_rand_int_range (rand, 1, CHURN_TAIL + 1);
      KvKey **evicted = keys + (gsize) c * CHAIN + CHAIN - tail;
      guint8 none[CHURN_TAIL] = { 0 };
      guint8 places[CHURN_TAIL];

      for (guint j = 0; j < tail; j++)
        places[j] = CHAIN - tail + j < 32 ? KV_FLEET_LOCATION_PRIMARY : KV_FLEET_LOCATION_DISK;
      for (guint holder = 0; holder < (c % 4 == 0 ? 2u : 1u); holder++)
        kv_fleet_index_update_many (index, (c % N_NODES + 3 * holder) % N_NODES, evicted, none, tail);
      for (guint holder = 0; holder < (c % 4 == 0 ? 2u : 1u); holder++)
        kv_fleet_index_update_many (index, (c % N_NODES + 3 * holder) % N_NODES, evicted, places, tail);
    }
  measure_fresh_keys (index, table, order, n_lookups, matches, &t_index_churn, &t_ceiling_churn,
                      &answers, &found);
  if (found != 3 * n_lookups * CHAIN || answers < 3 * n_lookups)
    {
      fprintf (stderr, "wrong answers: %" G_GUINT64_FORMAT " keys found, %" G_GUINT64_FORMAT
               " node answers\n", found, answers);
      return 1;
    }

  printf ("fleet index: %" G_GUINT64_FORMAT " keys in chains of %u over %u nodes, %"
          G_GUINT64_FORMAT " random lookups\n", n_keys, CHAIN, N_NODES, n_lookups);
  print_measure ("keys just made, as a router looks them up", t_index, t_ceiling, n_lookups);
  print_measure ("cold keys (their own lines missed too)", t_index_cold, t_ceiling_cold, n_lookups);
  print_measure ("after churn, keys just made", t_index_churn, t_ceiling_churn, n_lookups);
  printf ("  memory                           %8.1f bytes per key (%.1f MiB)\n",
          (gdouble) bytes / n_keys, bytes / (1024.0 * 1024.0));

  for (guint64 i = 0; i < n_keys; i++)
    kv_key_unref (keys[i]);
  return 0;
}
