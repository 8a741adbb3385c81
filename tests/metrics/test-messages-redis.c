/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <signal.h>

#include "test-dir.h"
#include "test-redis-server.h"
#include "test-redis-tier.h"
#include "test-tier-job.h"

/* The redis tier's messages when its server is killed in the middle of a
 * run and started again (by PID, on the same port): one line naming the
 * tier, the server and the cause when it goes, the breakers' openings
 * (the server's own and the tier's), one line when it answers again, the
 * breakers' closings; and counters that agree with the lines. Read from
 * the stderr of the subprocess that ran it. */

static char *test_dir;

static KvKey *
make_key (guint i)
{
  guint8 hash[32] = { 0 };

  hash[0] = (guint8) i;
  hash[1] = 0xa5;
  return kv_key_new (hash, sizeof hash, 0);
}

static gdouble
counter (KvStats    *stats,
         const char *name)
{
  const char *labels[] = { "1:redis", NULL };
  gdouble value = -1;

  if (!kv_stats_lookup (stats, name, labels, &value))
    return -1;
  return value;
}

static gboolean
store_ok (KvRedisTier *tier,
          guint        i)
{
  g_autoptr(KvKey) key = make_key (i);
  g_autoptr(KvRequest) request = kv_request_new ("store", NULL);
  guint32 slot = i % 8;
  g_autoptr(KvJobResult) result = test_tier_run_job (tier, i + 1, FALSE, &key, &slot, 1, request);

  return kv_job_result_get_success (result);
}

static void
run_scenario (void)
{
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (8, REDIS_TEST_SLOT, NULL);
  g_autofree char *address = NULL;
  g_autoptr(KvStats) stats = NULL;
  RedisServer server = { 0 };
  KvRedisTier *tier;
  KvCircuitBreaker *breaker;
  guint port;
  gint64 until;
  guint i = 0;

  redis_server_start (&server, test_dir, NULL);
  port = server.port;
  address = redis_server_address (&server);
  tier = redis_test_tier_new (buffer, address, "breaker-open-ms", 200, "deadline-ms", 2000, NULL);
  breaker = kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (tier));
  /* as a manager labels its first tier */
  kv_secondary_tier_set_metric_label (KV_SECONDARY_TIER (tier), "1:redis");
  g_assert_true (store_ok (tier, i++));

  /* killed: stores fail until both breakers are open */
  redis_server_stop (&server, TRUE);
  until = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  while (kv_circuit_breaker_get_state (breaker) != KV_CIRCUIT_STATE_OPEN)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, until);
      g_assert_false (store_ok (tier, i++));
    }

  /* back on its port: the tier's probe closes its breaker, a store gets
   * through the server's once its interval passed */
  redis_server_start_on (&server, test_dir, port, NULL);
  until = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  for (;;)
    {
      g_autoptr(KvKey) key = make_key (1000);

      g_assert_cmpint (g_get_monotonic_time (), <, until);
      g_usleep (50 * 1000);
      (void) redis_test_lookup (tier, key);
      if (kv_circuit_breaker_get_state (breaker) == KV_CIRCUIT_STATE_CLOSED && store_ok (tier, i++))
        break;
    }

  stats = kv_secondary_tier_get_stats (KV_SECONDARY_TIER (tier));
  g_assert_cmpfloat (counter (stats, "kvtier_redis_server_outages"), ==, 1);
  g_assert_cmpfloat (counter (stats, "kvtier_redis_node_breaker_openings"), ==, 1);
  g_assert_cmpfloat (counter (stats, "kvtier_tier_breaker_openings"), ==, 1);
  g_assert_cmpfloat (counter (stats, "kvtier_redis_servers_down"), ==, 0);
  g_assert_cmpfloat (counter (stats, "kvtier_tier_breaker_open"), ==, 0);
  redis_test_tier_free (tier);
  redis_server_clear (&server);
}

static void
test_server_killed_and_back (void)
{
  if (g_test_subprocess ())
    {
      run_scenario ();
      return;
    }
  g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  /* the server goes: tier, server and cause */
  g_test_trap_assert_stderr ("*Kvtier-Redis-Message: *redis tier 1:redis: server 127.0.0.1:* "
                             "unreachable: *127.0.0.1:*; its commands fail until it answers again\n*");
  /* the server's breaker, then the tier's, each with its last cause */
  g_test_trap_assert_stderr ("*Kvtier-Message: *redis tier 1:redis, server 127.0.0.1:*: circuit "
                             "breaker opened after 5 failures in a row (last: *127.0.0.1:*); work is "
                             "refused for 200 ms, then retried\n*");
  g_test_trap_assert_stderr ("*Kvtier-Message: *tier 1:redis: circuit breaker opened after 5 failures "
                             "in a row (last: *127.0.0.1:*)*");
  /* it comes back */
  g_test_trap_assert_stderr ("*redis tier 1:redis: server 127.0.0.1:* answers again after *s\n*");
  g_test_trap_assert_stderr ("*tier 1:redis: circuit breaker closed after *s: a probe succeeded\n*");
  g_test_trap_assert_stderr ("*redis tier 1:redis, server 127.0.0.1:*: circuit breaker closed after *");
  /* once each, as the counters say, and in that order */
  g_test_trap_assert_stderr ("*unreachable*answers again after*");
  g_test_trap_assert_stderr_unmatched ("*unreachable*unreachable*");
  g_test_trap_assert_stderr_unmatched ("*answers again after*answers again after*");
  g_test_trap_assert_stderr_unmatched ("*breaker opened*breaker opened*breaker opened*");
  g_test_trap_assert_stderr_unmatched ("*breaker closed*breaker closed*breaker closed*");
}

/* A tier that shuts down closes its connections itself: no server is
 * lost, so no line says one is unreachable. */
static void
test_shutdown_is_no_outage (void)
{
  if (g_test_subprocess ())
    {
      g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (8, REDIS_TEST_SLOT, NULL);
      g_autofree char *address = NULL;
      RedisServer server = { 0 };
      KvRedisTier *tier;

      redis_server_start (&server, test_dir, NULL);
      address = redis_server_address (&server);
      tier = redis_test_tier_new (buffer, address, NULL);
      kv_secondary_tier_set_metric_label (KV_SECONDARY_TIER (tier), "1:redis");
      g_assert_true (store_ok (tier, 0));
      redis_test_tier_free (tier);
      redis_server_clear (&server);
      return;
    }
  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr_unmatched ("*unreachable*");
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, NULL);
  if (!redis_test_init ())
    return 0;
  test_dir = test_dir_make ("kvtier-redis-messages");

  g_test_add_func ("/kvtier/messages/redis/server-killed-and-back", test_server_killed_and_back);
  g_test_add_func ("/kvtier/messages/redis/shutdown-is-no-outage", test_shutdown_is_no_outage);

  status = g_test_run ();
  test_dir_remove (test_dir);
  g_free (test_dir);
  return status;
}
