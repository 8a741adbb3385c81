/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-redis-common.h"
#include "test-leak-check.h"
#include "kv-redis-slot-map.h"

/* The redis tier on a Redis Cluster of 3 masters and 3 replicas, made by
 * `redis-cli --cluster create` on free loopback ports: keys spread over
 * every master, two processes sharing chunks, ASK during a slot
 * migration, MOVED during a reshard, reads from replicas, and a master
 * killed mid-run (its jobs fail and are counted, nothing hangs, service
 * resumes once its replica took over, every chunk loaded is byte-exact).
 * The tests share the cluster and run in order; the failover runs last. */

#define N_NODES 6
#define N_KEYS 48
#define CHILD_FIRST_KEY 200

static char *test_dir;
static RedisServer nodes[N_NODES];
static char *seed;           /* "127.0.0.1:<port of node 0>" */

static KvHostBuffer *buffer;
static KvKey *keys[N_KEYS];

/* ---- the cluster --------------------------------------------------------- */

static gboolean
node_is_master (guint i)
{
  g_autofree char *role = NULL;

  if (nodes[i].pid == 0)
    return FALSE;
  role = redis_cli (&nodes[i], "ROLE", NULL);
  return g_str_has_prefix (role, "master");
}

static gboolean
cluster_ok (void)
{
  for (guint i = 0; i < N_NODES; i++)
    {
      g_autofree char *info = NULL;

      if (nodes[i].pid == 0)
        continue;
      info = redis_cli (&nodes[i], "CLUSTER", "INFO", NULL);
      if (strstr (info, "cluster_state:ok") == NULL)
        return FALSE;
    }
  return TRUE;
}

static void
wait_cluster_ok (guint seconds)
{
  gint64 end = g_get_monotonic_time () + seconds * G_USEC_PER_SEC;

  while (!cluster_ok ())
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (100 * 1000);
    }
}

static void
cluster_start (void)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  int status = 0;

  for (guint i = 0; i < N_NODES; i++)
    {
      g_autofree char *dir = g_strdup_printf ("%s/node%u", test_dir, i);
      g_autofree char *conf = g_strdup_printf ("nodes-%u.conf", i);
      const char *extra[] = { "--cluster-enabled", "yes", "--cluster-config-file", conf,
                              "--cluster-node-timeout", "1000", NULL };

      g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
      redis_server_start (&nodes[i], dir, extra);
    }
  g_ptr_array_add (argv, g_strdup ("redis-cli"));
  g_ptr_array_add (argv, g_strdup ("--cluster"));
  g_ptr_array_add (argv, g_strdup ("create"));
  for (guint i = 0; i < N_NODES; i++)
    g_ptr_array_add (argv, redis_server_address (&nodes[i]));
  g_ptr_array_add (argv, g_strdup ("--cluster-replicas"));
  g_ptr_array_add (argv, g_strdup ("1"));
  g_ptr_array_add (argv, g_strdup ("--cluster-yes"));
  g_ptr_array_add (argv, NULL);
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL,
                               &out, &err, &status, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("redis-cli --cluster create failed: %s %s", out, err);
  wait_cluster_ok (30);
  /* and until the map names every replica (gossip brings them a moment
   * after the slots) */
  for (gint64 end = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;;)
    {
      g_autofree char *slots = redis_cli (&nodes[0], "CLUSTER", "SLOTS", NULL);
      g_auto(GStrv) lines = g_strsplit (slots, "\n", -1);
      guint n_nodes = 0;

      for (guint i = 0; lines[i] != NULL; i++)
        if (g_str_equal (g_strstrip (lines[i]), "127.0.0.1"))
          n_nodes++;
      if (n_nodes == N_NODES)
        break;
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (100 * 1000);
    }
  seed = redis_server_address (&nodes[0]);
}

static guint
dbsize (guint i)
{
  g_autofree char *n = redis_cli (&nodes[i], "DBSIZE", NULL);

  return (guint) g_ascii_strtoull (n, NULL, 10);
}

/* ---- helpers ------------------------------------------------------------- */

static KvRedisTier *
cluster_tier_new (void)
{
  return redis_test_tier_new (buffer, seed, "cluster", TRUE, NULL);
}

/* Stores keys[first..first+n) (n ≤ 8) from slots 0..n-1. */
static KvJobResult *
store_keys (KvRedisTier *tier,
            KvKey      **ks,
            guint        first_index,
            guint        n)
{
  guint32 slots[8];

  g_assert_cmpuint (n, <=, 8);
  for (guint i = 0; i < n; i++)
    {
      slots[i] = i;
      test_chunk_fill (kv_host_buffer_peek_slot (buffer, i), REDIS_TEST_SLOT, first_index + i);
    }
  return redis_test_run_job (tier, FALSE, ks, slots, n);
}

/* Loads @n keys into slots 8.. and checks the bytes of the keys that
 * landed; returns the job's result. */
static KvJobResult *
load_keys (KvRedisTier *tier,
           KvKey      **ks,
           guint        first_index,
           guint        n)
{
  guint32 slots[8];
  KvJobResult *result;
  guint n_ok = n;

  g_assert_cmpuint (n, <=, 8);
  for (guint i = 0; i < n; i++)
    {
      slots[i] = 8 + i;
      memset (kv_host_buffer_peek_slot (buffer, 8 + i), 0, REDIS_TEST_SLOT);
    }
  result = redis_test_run_job (tier, TRUE, ks, slots, n);
  if (!kv_job_result_get_success (result))
    kv_job_result_get_successful_keys (result, &n_ok);
  /* nothing wrong is ever loaded: every key reported landed is exact */
  for (guint i = 0; i < n_ok; i++)
    g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (buffer, 8 + i), REDIS_TEST_SLOT,
                                     first_index + i));
  return result;
}

static void
store_all (KvRedisTier *tier)
{
  for (guint first = 0; first < N_KEYS; first += 8)
    {
      g_autoptr(KvJobResult) stored = store_keys (tier, &keys[first], first, 8);

      g_assert_true (kv_job_result_get_success (stored));
    }
}

/* Loads every key; returns how many jobs failed. */
static guint
load_all (KvRedisTier *tier)
{
  guint n_failed = 0;

  for (guint first = 0; first < N_KEYS; first += 8)
    {
      g_autoptr(KvJobResult) loaded = load_keys (tier, &keys[first], first, 8);

      if (!kv_job_result_get_success (loaded))
        n_failed++;
    }
  return n_failed;
}

/* ---- tests --------------------------------------------------------------- */

/* Keys land on every master (CRC16 slots), and come back byte-exact. */
static void
test_spread (void)
{
  g_autoptr(KvRedisTier) tier = cluster_tier_new ();
  guint n_masters = 0;

  store_all (tier);
  for (guint i = 0; i < N_NODES; i++)
    if (node_is_master (i))
      {
        n_masters++;
        g_assert_cmpuint (dbsize (i), >, 0);
      }
  g_assert_cmpuint (n_masters, ==, 3);
  g_assert_cmpuint (load_all (tier), ==, 0);
  for (guint i = 0; i < N_KEYS; i += 7)
    g_assert_cmpint (redis_test_lookup (tier, keys[i]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_LOADED_CHUNKS), ==, N_KEYS);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS), ==, 0);
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* A dead first seed: the map comes from the next. */
static void
test_dead_seed (void)
{
  g_autofree char *servers = g_strdup_printf ("127.0.0.1:%u,%s", redis_test_free_port (), seed);
  g_autoptr(KvRedisTier) tier = redis_test_tier_new (buffer, servers, "cluster", TRUE, NULL);

  g_assert_cmpuint (load_all (tier), ==, 0);
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* The child of test_two_processes: stores keys the parent never stored. */
static void
two_processes_child (void)
{
  g_autoptr(KvRedisTier) tier = cluster_tier_new ();
  KvKey *child_keys[8];
  g_autoptr(KvJobResult) stored = NULL;

  for (guint i = 0; i < 8; i++)
    child_keys[i] = test_chunk_key (CHILD_FIRST_KEY + i);
  stored = store_keys (tier, child_keys, CHILD_FIRST_KEY, 8);
  g_assert_true (kv_job_result_get_success (stored));
  for (guint i = 0; i < 8; i++)
    kv_key_unref (child_keys[i]);
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* Another process stores, this one finds and loads its chunks. */
static void
test_two_processes (void)
{
  g_autoptr(KvRedisTier) tier = NULL;
  KvKey *child_keys[8];

  if (g_test_subprocess ())
    {
      two_processes_child ();
      return;
    }
  tier = cluster_tier_new ();
  for (guint i = 0; i < 8; i++)
    {
      child_keys[i] = test_chunk_key (CHILD_FIRST_KEY + i);
      g_assert_cmpint (redis_test_lookup (tier, child_keys[i]), ==, KV_LOOKUP_RESULT_MISS);
    }
  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC,
                          G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed ();
  for (guint i = 0; i < 8; i++)
    g_assert_cmpint (redis_test_lookup (tier, child_keys[i]), ==, KV_LOOKUP_RESULT_HIT);
  {
    g_autoptr(KvJobResult) loaded = load_keys (tier, child_keys, CHILD_FIRST_KEY, 8);

    g_assert_true (kv_job_result_get_success (loaded));
  }
  for (guint i = 0; i < 8; i++)
    kv_key_unref (child_keys[i]);
  redis_test_tier_free (g_steal_pointer (&tier));
}

static char *
node_id (guint i)
{
  return redis_cli (&nodes[i], "CLUSTER", "MYID", NULL);
}

/* The node index serving @slot (its master). */
static guint
master_of_slot (guint slot)
{
  for (guint i = 0; i < N_NODES; i++)
    if (node_is_master (i))
      {
        g_autofree char *n = NULL;
        g_autofree char *s = g_strdup_printf ("%u", slot);

        /* COUNTKEYSINSLOT answers on the slot's master only; the others redirect */
        n = redis_cli (&nodes[i], "CLUSTER", "COUNTKEYSINSLOT", s, NULL);
        if (!g_str_has_prefix (n, "MOVED") && !g_str_has_prefix (n, "ERR") && *n != '\0')
          return i;
      }
  g_assert_not_reached ();
  return 0;
}

/* A key in the middle of a migration: its source answers ASK, the tier
 * sends ASKING + GET to the target. */
static void
test_ask (void)
{
  g_autoptr(KvRedisTier) tier = cluster_tier_new ();
  g_autofree char *k = kv_redis_tier_get_redis_key (tier, keys[3]);
  guint slot = kv_redis_key_slot (k, strlen (k));
  g_autofree char *slot_str = g_strdup_printf ("%u", slot);
  guint source = master_of_slot (slot);
  guint target = G_MAXUINT;
  g_autofree char *source_id = node_id (source);
  g_autofree char *target_id = NULL;
  g_autofree char *port = NULL;
  g_autofree char *out = NULL;

  for (guint i = 0; i < N_NODES && target == G_MAXUINT; i++)
    if (i != source && node_is_master (i))
      target = i;
  target_id = node_id (target);
  port = g_strdup_printf ("%u", nodes[target].port);

  out = redis_cli (&nodes[target], "CLUSTER", "SETSLOT", slot_str, "IMPORTING", source_id, NULL);
  g_assert_cmpstr (out, ==, "OK");
  g_free (out);
  out = redis_cli (&nodes[source], "CLUSTER", "SETSLOT", slot_str, "MIGRATING", target_id, NULL);
  g_assert_cmpstr (out, ==, "OK");
  g_free (out);
  out = redis_cli (&nodes[source], "MIGRATE", "127.0.0.1", port, k, "0", "5000", NULL);
  g_assert_cmpstr (out, ==, "OK");

  {
    g_autoptr(KvJobResult) loaded = load_keys (tier, &keys[3], 3, 1);

    g_assert_true (kv_job_result_get_success (loaded));
  }
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_ASK), >=, 1);

  /* end the migration: the slot is the target's everywhere */
  for (guint i = 0; i < N_NODES; i++)
    {
      g_free (out);
      out = redis_cli (&nodes[i], "CLUSTER", "SETSLOT", slot_str, "NODE", target_id, NULL);
    }
  wait_cluster_ok (10);
  g_assert_cmpuint (load_all (tier), ==, 0);
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* redis-cli --cluster reshard moves slots while the tier loads: MOVED
 * (and ASK) are followed, every load succeeds. */
static void
test_moved_reshard (void)
{
  g_autoptr(KvRedisTier) tier = cluster_tier_new ();
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  guint from = G_MAXUINT, to = G_MAXUINT;
  GPid pid;
  int status = 0;
  guint rounds = 0;
  gboolean done = FALSE;

  /* the tier knows the map before it changes */
  g_assert_cmpuint (load_all (tier), ==, 0);
  for (guint i = 0; i < N_NODES; i++)
    if (node_is_master (i))
      {
        if (from == G_MAXUINT)
          from = i;
        else if (to == G_MAXUINT)
          to = i;
      }
  g_ptr_array_add (argv, g_strdup ("redis-cli"));
  g_ptr_array_add (argv, g_strdup ("--cluster"));
  g_ptr_array_add (argv, g_strdup ("reshard"));
  g_ptr_array_add (argv, redis_server_address (&nodes[from]));
  g_ptr_array_add (argv, g_strdup ("--cluster-from"));
  g_ptr_array_add (argv, node_id (from));
  g_ptr_array_add (argv, g_strdup ("--cluster-to"));
  g_ptr_array_add (argv, node_id (to));
  g_ptr_array_add (argv, g_strdup ("--cluster-slots"));
  g_ptr_array_add (argv, g_strdup ("2000"));
  g_ptr_array_add (argv, g_strdup ("--cluster-yes"));
  g_ptr_array_add (argv, NULL);
  g_assert_true (g_spawn_async (NULL, (char **) argv->pdata, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                                G_SPAWN_STDOUT_TO_DEV_NULL,
                                NULL, NULL, &pid, &error));
  g_assert_no_error (error);
  while (!done)
    {
      done = waitpid (pid, &status, WNOHANG) == pid;
      g_assert_cmpuint (load_all (tier), ==, 0);
      rounds++;
    }
  g_spawn_close_pid (pid);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_cmpuint (load_all (tier), ==, 0);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_MOVED) +
                    kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_ASK), >, 0);
  g_test_message ("%u rounds of loads during the reshard; %" G_GUINT64_FORMAT " MOVED, %"
                  G_GUINT64_FORMAT " ASK", rounds,
                  kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_MOVED),
                  kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_ASK));
  redis_test_tier_free (g_steal_pointer (&tier));
}

static guint64
replica_gets (void)
{
  guint64 total = 0;

  for (guint i = 0; i < N_NODES; i++)
    if (nodes[i].pid != 0 && !node_is_master (i))
      {
        g_autofree char *stats = redis_cli (&nodes[i], "INFO", "commandstats", NULL);
        const char *get = strstr (stats, "cmdstat_get:calls=");

        if (get != NULL)
          total += g_ascii_strtoull (get + strlen ("cmdstat_get:calls="), NULL, 10);
      }
  return total;
}

/* Loads and lookups go to the replicas. */
static void
test_replica_reads (void)
{
  g_autoptr(KvRedisTier) tier = redis_test_tier_new (buffer, seed, "cluster", TRUE,
                                                         "read-from-replicas", TRUE, NULL);
  guint64 before = replica_gets ();

  for (guint i = 0; i < N_NODES; i++)
    if (node_is_master (i))
      {
        g_autofree char *out = redis_cli (&nodes[i], "WAIT", "1", "2000", NULL);
      }
  g_assert_cmpuint (load_all (tier), ==, 0);
  g_assert_cmpuint (replica_gets () - before, >=, N_KEYS);
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* The master with the most keys dies mid-run. */
static void
test_failover (void)
{
  g_autoptr(KvRedisTier) tier = redis_test_tier_new (buffer, seed, "cluster", TRUE,
                                                         "deadline-ms", 3000, NULL);
  guint victim = G_MAXUINT;
  guint most = 0;
  guint failed_jobs = 0;
  guint rounds = 0;
  gint64 end;

  g_assert_cmpuint (load_all (tier), ==, 0);
  for (guint i = 0; i < N_NODES; i++)
    if (node_is_master (i) && dbsize (i) > most)
      {
        most = dbsize (i);
        victim = i;
      }
  g_assert_cmpuint (most, >, 0);
  {
    g_autofree char *out = redis_cli (&nodes[victim], "WAIT", "1", "2000", NULL);

    g_assert_cmpstr (out, ==, "1");
  }
  redis_server_stop (&nodes[victim], TRUE);

  /* jobs on the dead master fail (counted); none hangs; then its replica
   * takes over and every load succeeds */
  end = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  for (;;)
    {
      guint n_failed = load_all (tier);

      rounds++;
      failed_jobs += n_failed;
      if (n_failed == 0 && failed_jobs > 0)
        break;
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (50 * 1000);
    }
  g_assert_cmpuint (failed_jobs, >, 0);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS) +
                    kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_ERROR_REPLIES), >, 0);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_MAP_REFRESHES), >, 1);
  g_assert_cmpuint (load_all (tier), ==, 0);
  for (guint i = 0; i < N_KEYS; i += 5)
    g_assert_cmpint (redis_test_lookup (tier, keys[i]), ==, KV_LOOKUP_RESULT_HIT);
  g_test_message ("failover: %u failed jobs over %u rounds; %" G_GUINT64_FORMAT " node errors",
                  failed_jobs, rounds, kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS));
  redis_test_tier_free (g_steal_pointer (&tier));
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  if (!redis_test_init ())
    return 0;
  buffer = kv_host_buffer_new (16, REDIS_TEST_SLOT, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < N_KEYS; i++)
    keys[i] = test_chunk_key (i);

  g_test_add_func ("/redis-cluster/spread", test_spread);
  g_test_add_func ("/redis-cluster/dead-seed", test_dead_seed);
  g_test_add_func ("/redis-cluster/two-processes", test_two_processes);
  g_test_add_func ("/redis-cluster/ask", test_ask);
  g_test_add_func ("/redis-cluster/moved-reshard", test_moved_reshard);
  g_test_add_func ("/redis-cluster/replica-reads", test_replica_reads);
  g_test_add_func ("/redis-cluster/failover", test_failover);

  if (g_test_subprocess ())
    seed = g_strdup (g_getenv ("KVTIER_REDIS_TEST_SEED"));
  else
    {
      test_dir = redis_test_make_dir ();
      cluster_start ();
      g_setenv ("KVTIER_REDIS_TEST_SEED", seed, TRUE);
    }

  status = g_test_run ();

  for (guint i = 0; i < N_NODES; i++)
    redis_server_clear (&nodes[i]);
  if (test_dir != NULL)
    redis_test_rm_rf (test_dir);
  for (guint i = 0; i < N_KEYS; i++)
    kv_key_unref (keys[i]);
  g_clear_object (&buffer);
  g_free (test_dir);
  g_free (seed);
  test_leak_check_now ();
  return status;
}
