/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include <string.h>

#include <kvtier.h>

/*
 * KvFleetIndex against a brute-force model: random sequences of updates,
 * snapshots (begin, a subset re-sent, end), forgotten and re-added nodes,
 * checked after every step key by key, and lookups of random prefix
 * chains checked against the model's answer computed the slow way.
 */

#define N_NODES 12      /* more than the 4 holders an entry keeps inline */
#define N_KEYS 300

typedef struct
{
  KvKey  *keys[N_KEYS];
  guint8  model[N_NODES][N_KEYS];   /* locations */
  gboolean alive[N_NODES];
  guint   ids[N_NODES];
  /* a snapshot in progress: keys re-sent since its begin */
  gboolean in_snapshot[N_NODES];
  gboolean resent[N_NODES][N_KEYS];
} Model;

static KvKey *
test_key (guint i)
{
  /* short hashes, 32-byte ones (inline) and longer ones (held by
   * reference), in two groups */
  guint len = i % 3 == 0 ? 8 : i % 3 == 1 ? 32 : 48;
  guint8 hash[48];

  for (guint b = 0; b < len; b++)
    hash[b] = (guint8) (i * 131 + b * 7);
  hash[0] = (guint8) i;
  hash[1] = (guint8) (i >> 8);
  return kv_key_new (hash, len, i % 5 == 0 ? 1 : 0);
}

static void
model_init (Model        *m,
            KvFleetIndex *index)
{
  memset (m, 0, sizeof *m);
  for (guint k = 0; k < N_KEYS; k++)
    m->keys[k] = test_key (k);
  for (guint n = 0; n < N_NODES; n++)
    {
      g_autofree char *name = g_strdup_printf ("10.0.0.%u:7411", n + 1);

      m->ids[n] = kv_fleet_index_add_node (index, name);
      g_assert_cmpuint (m->ids[n], ==, n);
      m->alive[n] = TRUE;
    }
}

static void
model_clear (Model *m)
{
  for (guint k = 0; k < N_KEYS; k++)
    kv_key_unref (m->keys[k]);
}

static void
check_all (Model        *m,
           KvFleetIndex *index)
{
  guint64 distinct = 0;

  for (guint k = 0; k < N_KEYS; k++)
    {
      gboolean held = FALSE;

      for (guint n = 0; n < N_NODES; n++)
        {
          guint8 expected = m->alive[n] ? m->model[n][k] : 0;

          g_assert_cmphex (kv_fleet_index_get_locations (index, n, m->keys[k]), ==, expected);
          held |= expected != 0;
        }
      distinct += held;
    }
  g_assert_cmpuint (kv_fleet_index_get_n_keys (index), ==, distinct);
  for (guint n = 0; n < N_NODES; n++)
    {
      guint64 count = 0;

      for (guint k = 0; k < N_KEYS && m->alive[n]; k++)
        count += m->model[n][k] != 0;
      g_assert_cmpuint (kv_fleet_index_get_node_n_keys (index, n), ==, count);
      g_assert_cmpint (kv_fleet_index_is_node_alive (index, n), ==, m->alive[n]);
    }
}

/* The slow answer: for each alive node holding the first key, how far it
 * holds the chain, and where each chunk is fastest. */
static void
check_lookup (Model        *m,
              KvFleetIndex *index,
              const guint  *chain,
              guint         n)
{
  g_autofree KvKey **keys = g_new (KvKey *, MAX (n, 1));
  g_autoptr(KvFleetMatch) match = NULL;
  guint n_expected = 0;

  for (guint i = 0; i < n; i++)
    keys[i] = m->keys[chain[i]];
  match = kv_fleet_index_lookup (index, keys, n);
  g_assert_cmpuint (kv_fleet_match_get_n_chunks (match), ==, n);

  for (guint node = 0; node < N_NODES; node++)
    {
      KvFleetNodeMatch expected = { node, 0, 0, 0, 0, 0 };
      const KvFleetNodeMatch *got = NULL;

      if (!m->alive[node])
        continue;
      for (guint i = 0; i < n; i++)
        {
          guint8 loc = m->model[node][chain[i]];

          if (loc == 0)
            break;
          expected.prefix++;
          if (loc & KV_FLEET_LOCATION_DEVICE)
            expected.n_device++;
          else if (loc & KV_FLEET_LOCATION_PRIMARY)
            expected.n_primary++;
          else if (loc & KV_FLEET_LOCATION_DISK)
            expected.n_disk++;
          else
            expected.n_remote++;
        }
      if (expected.prefix == 0)
        continue;
      /* answers come in node order */
      g_assert_cmpuint (n_expected, <, kv_fleet_match_get_n_nodes (match));
      got = kv_fleet_match_get_match (match, n_expected);
      g_assert_cmpuint (got->node, ==, node);
      g_assert_cmpuint (got->prefix, ==, expected.prefix);
      g_assert_cmpuint (got->n_device, ==, expected.n_device);
      g_assert_cmpuint (got->n_primary, ==, expected.n_primary);
      g_assert_cmpuint (got->n_disk, ==, expected.n_disk);
      g_assert_cmpuint (got->n_remote, ==, expected.n_remote);
      g_assert_cmpuint (kv_fleet_match_get_prefix_of (match, node), ==, expected.prefix);
      n_expected++;
    }
  g_assert_cmpuint (kv_fleet_match_get_n_nodes (match), ==, n_expected);
}

/* With @chains, each batch of updates is a run of keys in prompt order,
 * as a node's events for a prompt are: new entries then sit one after
 * another, so lookups walk them by following (and removals, branching
 * runs and moved entries make them probe again). */
static void
run_random (guint32  seed,
            guint    n_steps,
            gboolean chains)
{
  g_autoptr(KvFleetIndex) index = kv_fleet_index_new ();
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);
  Model *m = g_new0 (Model, 1);

  kv_fleet_index_set_node_timeout_ms (index, 0);
  model_init (m, index);
  for (guint step = 0; step < n_steps; step++)
    {
      guint op = g_rand_int_range (rand, 0, 100);
      guint node = g_rand_int_range (rand, 0, N_NODES);

      if (op < 70)
        {
          /* a batch of updates; keys cluster so entries gain holders */
          guint n = g_rand_int_range (rand, 1, chains ? 24 : 12);
          guint run_start = g_rand_int_range (rand, 0, g_rand_boolean (rand) ? 40 : N_KEYS);
          g_autofree KvKey **keys = g_new (KvKey *, n);
          g_autofree guint8 *locs = g_new (guint8, n);
          gboolean accepted;

          for (guint i = 0; i < n; i++)
            {
              guint k = chains ? (run_start + i) % N_KEYS
                               : (guint) g_rand_int_range (rand, 0, g_rand_boolean (rand) ? 40 : N_KEYS);

              keys[i] = m->keys[k];
              /* a third are removals */
              locs[i] = g_rand_int_range (rand, 0, 3) == 0 ? 0 : g_rand_int_range (rand, 1, 16);
            }
          accepted = kv_fleet_index_update_many (index, node, keys, locs, n);
          g_assert_cmpint (accepted, ==, m->alive[node]);
          for (guint i = 0; i < n && accepted; i++)
            for (guint k = 0; k < N_KEYS; k++)
              if (m->keys[k] == keys[i])
                {
                  m->model[node][k] = locs[i];
                  m->resent[node][k] = TRUE;
                }
        }
      else if (op < 78)
        {
          /* begin a snapshot (again, maybe: a resync mid-snapshot) */
          g_assert_cmpint (kv_fleet_index_begin_snapshot (index, node), ==, m->alive[node]);
          if (m->alive[node])
            {
              m->in_snapshot[node] = TRUE;
              memset (m->resent[node], 0, sizeof m->resent[node]);
            }
        }
      else if (op < 88)
        {
          /* end it: what was not re-sent is gone */
          g_assert_cmpint (kv_fleet_index_end_snapshot (index, node), ==, m->alive[node]);
          if (m->alive[node] && m->in_snapshot[node])
            {
              for (guint k = 0; k < N_KEYS; k++)
                if (!m->resent[node][k])
                  m->model[node][k] = 0;
              m->in_snapshot[node] = FALSE;
            }
        }
      else if (op < 93)
        {
          kv_fleet_index_forget_node (index, node);
          m->alive[node] = FALSE;
          m->in_snapshot[node] = FALSE;
          memset (m->model[node], 0, sizeof m->model[node]);
        }
      else
        {
          g_autofree char *name = g_strdup_printf ("10.0.0.%u:7411", node + 1);

          g_assert_cmpuint (kv_fleet_index_add_node (index, name), ==, node);
          m->alive[node] = TRUE;
        }

      if (step % 20 == 0)
        check_all (m, index);
      if (step % 5 == 0)
        {
          guint chain[24];
          guint n = g_rand_int_range (rand, 1, G_N_ELEMENTS (chain) + 1);
          guint start = g_rand_int_range (rand, 0, 40);

          /* mostly the clustered keys, in a row, so prefixes are long */
          for (guint i = 0; i < n; i++)
            chain[i] = g_rand_int_range (rand, 0, chains ? 8 : 4) == 0
                         ? (guint) g_rand_int_range (rand, 0, N_KEYS)
                         : chains ? (start + i) % N_KEYS : (start + i) % 40;
          check_lookup (m, index, chain, n);
        }
    }
  check_all (m, index);
  model_clear (m);
  g_free (m);
}

static void
test_random_sequences (void)
{
  for (guint32 seed = 1; seed <= 12; seed++)
    run_random (seed, 1500, FALSE);
}

static void
test_random_chains (void)
{
  for (guint32 seed = 1; seed <= 12; seed++)
    run_random (seed, 1500, TRUE);
}

/* Many keys: the table grows and (as they leave) entries move, and the
 * memory stays within what the documentation promises. */
static void
test_grow_and_shrink (void)
{
  g_autoptr(KvFleetIndex) index = kv_fleet_index_new ();
  const guint n = 50000;
  g_autofree KvKey **keys = g_new (KvKey *, n);
  guint a = kv_fleet_index_add_node (index, "a:1");
  guint b = kv_fleet_index_add_node (index, "b:1");
  guint64 bytes;

  for (guint i = 0; i < n; i++)
    {
      guint8 hash[32] = { 0 };

      memcpy (hash, &i, sizeof i);
      hash[31] = 0x5a;
      keys[i] = kv_key_new (hash, sizeof hash, 0);
      g_assert_true (kv_fleet_index_update (index, a, keys[i], KV_FLEET_LOCATION_PRIMARY));
    }
  g_assert_cmpuint (kv_fleet_index_get_n_keys (index), ==, n);
  bytes = kv_fleet_index_get_memory_size (index);
  /* 64-byte entries and 8 to 21 bytes of slots per key, pages rounded up */
  g_assert_cmpuint (bytes, >=, (guint64) n * 72);
  g_assert_cmpuint (bytes, <=, (guint64) n * 86 + 65536);
  g_test_message ("%u keys: %" G_GUINT64_FORMAT " bytes, %.1f per key", n, bytes,
                  (gdouble) bytes / n);

  for (guint i = 0; i < n; i += 2)
    g_assert_true (kv_fleet_index_update (index, b, keys[i], KV_FLEET_LOCATION_DISK));
  for (guint i = 0; i < n; i++)
    g_assert_true (kv_fleet_index_update (index, a, keys[i], KV_FLEET_LOCATION_NONE));
  g_assert_cmpuint (kv_fleet_index_get_n_keys (index), ==, n / 2);
  for (guint i = 0; i < n; i++)
    {
      g_assert_cmphex (kv_fleet_index_get_locations (index, a, keys[i]), ==, 0);
      g_assert_cmphex (kv_fleet_index_get_locations (index, b, keys[i]), ==,
                       i % 2 == 0 ? KV_FLEET_LOCATION_DISK : 0);
    }
  /* the emptied pages went back */
  g_assert_cmpuint (kv_fleet_index_get_memory_size (index), <, bytes);
  for (guint i = 0; i < n; i++)
    kv_key_unref (keys[i]);
}

static void
on_forgotten (KvFleetIndex *index,
              guint         node,
              const char   *name,
              gpointer      data)
{
  GString *log = data;

  g_string_append_printf (log, "%u=%s;", node, name);
}

/* A node that sends nothing for the timeout is forgotten, says so, and
 * stays forgotten until it is added again. */
static void
test_expire (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (1000000);
  g_autoptr(KvFleetIndex) index = g_object_new (KV_TYPE_FLEET_INDEX, "clock", clock,
                                                "node-timeout-ms", 500, NULL);
  g_autoptr(GString) log = g_string_new ("");
  KvKey *key = test_key (7);
  guint a = kv_fleet_index_add_node (index, "10.0.0.1:7411");
  guint b = kv_fleet_index_add_node (index, "10.0.0.2:7411");
  guint64 forgotten = 0;

  g_signal_connect (index, "node-forgotten", G_CALLBACK (on_forgotten), log);
  g_assert_true (kv_fleet_index_update (index, a, key, KV_FLEET_LOCATION_PRIMARY));
  g_assert_true (kv_fleet_index_update (index, b, key, KV_FLEET_LOCATION_DISK));

  kv_clock_advance (clock, 400 * 1000);
  g_assert_true (kv_fleet_index_heartbeat (index, b));
  kv_clock_advance (clock, 200 * 1000);
  /* a: 600 ms of silence; b: 200 ms */
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_MESSAGE,
                         "fleet index: node 10.0.0.1:7411 sent nothing for 600 ms: its 1 chunks are forgotten");
  g_assert_cmpuint (kv_fleet_index_expire (index), ==, 1);
  g_test_assert_expected_messages ();
  g_assert_cmpstr (log->str, ==, "0=10.0.0.1:7411;");
  g_object_get (index, "n-forgotten", &forgotten, NULL);
  g_assert_cmpuint (forgotten, ==, 1);
  g_assert_false (kv_fleet_index_is_node_alive (index, a));
  g_assert_cmphex (kv_fleet_index_get_locations (index, a, key), ==, 0);
  g_assert_cmphex (kv_fleet_index_get_locations (index, b, key), ==, KV_FLEET_LOCATION_DISK);
  g_assert_cmpuint (kv_fleet_index_expire (index), ==, 0);

  /* late deltas of a forgotten node are refused */
  g_assert_false (kv_fleet_index_update (index, a, key, KV_FLEET_LOCATION_PRIMARY));
  g_assert_false (kv_fleet_index_heartbeat (index, a));
  g_assert_false (kv_fleet_index_begin_snapshot (index, a));
  g_assert_cmphex (kv_fleet_index_get_locations (index, a, key), ==, 0);

  /* added again, it is alive with nothing held */
  g_assert_cmpuint (kv_fleet_index_add_node (index, "10.0.0.1:7411"), ==, a);
  g_assert_true (kv_fleet_index_is_node_alive (index, a));
  g_assert_cmpuint (kv_fleet_index_get_node_n_keys (index, a), ==, 0);
  g_assert_cmpint (kv_fleet_index_find_node (index, "10.0.0.2:7411"), ==, (gint) b);
  g_assert_cmpint (kv_fleet_index_find_node (index, "nowhere:1"), ==, -1);
  kv_key_unref (key);
}

/* A lookup only walks as far as some node holds the chain. */
static void
test_lookup_stops (void)
{
  g_autoptr(KvFleetIndex) index = kv_fleet_index_new ();
  KvKey *keys[6];
  guint a = kv_fleet_index_add_node (index, "a:1");
  guint b = kv_fleet_index_add_node (index, "b:1");
  g_autoptr(KvFleetMatch) match = NULL;
  g_autoptr(KvFleetMatch) none = NULL;
  guint longest_node = 99;

  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    keys[i] = test_key (100 + i);
  /* a: 0 1 2 (device, primary, disk); b: 0 1 2 3 on disk, and 5 */
  kv_fleet_index_update (index, a, keys[0], KV_FLEET_LOCATION_DEVICE | KV_FLEET_LOCATION_DISK);
  kv_fleet_index_update (index, a, keys[1], KV_FLEET_LOCATION_PRIMARY);
  kv_fleet_index_update (index, a, keys[2], KV_FLEET_LOCATION_DISK);
  for (guint i = 0; i < 4; i++)
    kv_fleet_index_update (index, b, keys[i], KV_FLEET_LOCATION_REMOTE);
  kv_fleet_index_update (index, b, keys[5], KV_FLEET_LOCATION_DISK);

  match = kv_fleet_index_lookup (index, keys, G_N_ELEMENTS (keys));
  g_assert_cmpuint (kv_fleet_match_get_n_nodes (match), ==, 2);
  g_assert_cmpuint (kv_fleet_match_get_prefix (match, 0), ==, 3);
  g_assert_cmpuint (kv_fleet_match_get_n_at (match, 0, KV_FLEET_LOCATION_DEVICE), ==, 1);
  g_assert_cmpuint (kv_fleet_match_get_n_at (match, 0, KV_FLEET_LOCATION_PRIMARY), ==, 1);
  g_assert_cmpuint (kv_fleet_match_get_n_at (match, 0, KV_FLEET_LOCATION_DISK), ==, 1);
  g_assert_cmpuint (kv_fleet_match_get_prefix (match, 1), ==, 4);
  g_assert_cmpuint (kv_fleet_match_get_n_at (match, 1, KV_FLEET_LOCATION_REMOTE), ==, 4);
  g_assert_cmpuint (kv_fleet_match_get_longest (match, &longest_node), ==, 4);
  g_assert_cmpuint (longest_node, ==, b);

  /* nobody holds the first chunk: nothing, however long the rest */
  none = kv_fleet_index_lookup (index, keys + 4, 2);
  g_assert_cmpuint (kv_fleet_match_get_n_nodes (none), ==, 0);
  g_assert_cmpuint (kv_fleet_match_get_longest (none, NULL), ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    kv_key_unref (keys[i]);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/fleet/index/random-sequences", test_random_sequences);
  g_test_add_func ("/fleet/index/random-chains", test_random_chains);
  g_test_add_func ("/fleet/index/grow-and-shrink", test_grow_and_shrink);
  g_test_add_func ("/fleet/index/expire", test_expire);
  g_test_add_func ("/fleet/index/lookup-stops", test_lookup_stops);

  return g_test_run ();
}
