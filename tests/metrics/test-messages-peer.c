/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include "test-peer-harness.h"

/* The peer tier's messages when a node asks another with the wrong
 * shared secret: the server (a `kvtier serve` process) says which client
 * failed authentication, the asking node says which peer it cannot reach
 * and why, and the peer's circuit breaker names the peer when it opens.
 * Both processes write to the stderr of the subprocess that ran the
 * scenario (the node inherits it), which the test reads. */

#define SLOT_KIB 64

static gdouble
wait_metric (PeerNode   *node,
             const char *name,
             gdouble     at_least)
{
  gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  for (;;)
    {
      g_autofree char *text = scrape_metrics (node);
      gdouble value = metric_sum (text, name);

      if (value >= at_least || g_get_monotonic_time () > until)
        return value;
      g_usleep (20 * 1000);
    }
}

static void
run_scenario (void)
{
  g_autoptr(PeerNode) node = peer_node_start ("", SLOT_KIB, 0, 4);
  g_autofree char *wrong = harness_write_file ("wrong-secret", "0123456789abcdef-not-the-one", 0600);
  g_autofree char *settings = g_strdup_printf ("peers = %s\nsecret-file = %s\n"
                                               "peer-breaker-threshold = 2", node->peer_address,
                                               wrong);
  g_autoptr(GError) error = NULL;
  KvTieringManager *manager = client_manager_new (settings, SLOT_KIB, &error);
  g_autoptr(KvStats) stats = NULL;
  const char *labels[] = { "1:peer", NULL };
  gdouble openings = 0, outages = 0;

  g_assert_no_error (error);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *id = g_strdup_printf ("wrong-secret-%u", i);
      g_autoptr(KvRequest) request = kv_request_new (id, NULL);
      g_autoptr(KvKey) key = synthetic_key (i);

      kv_tiering_manager_on_new_request (manager, request);
      g_assert_cmpint (client_lookup_settled (manager, request, key, 5000), ==, KV_LOOKUP_RESULT_MISS);
      kv_tiering_manager_on_request_finished (manager, request);
    }
  stats = kv_tiering_manager_get_stats (manager);
  g_assert_true (kv_stats_lookup (stats, "kvtier_peer_breaker_openings", labels, &openings));
  g_assert_cmpfloat (openings, ==, 1);
  g_assert_true (kv_stats_lookup (stats, "kvtier_peer_outages", labels, &outages));
  g_assert_cmpfloat (outages, ==, 1);
  g_assert_true (kv_tiering_manager_shutdown (manager, NULL));
  g_object_unref (manager);

  g_assert_cmpfloat (wait_metric (node, "kvtier_peer_auth_failures_total", 2), >=, 2);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
}

static void
test_wrong_secret (void)
{
  if (g_test_subprocess ())
    {
      run_scenario ();
      return;
    }
  g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  /* the server: which tier and address, which client, why */
  g_test_trap_assert_stderr ("*Kvtier-Peer-Message: *peer tier 1:peer, server 127.0.0.1:*: client "
                             "127.0.0.1:* failed authentication: its proof does not match this "
                             "node's shared secret; closed\n*");
  /* the asking node: which tier, which peer, the server's answer */
  g_test_trap_assert_stderr ("*Kvtier-Peer-Message: *peer tier 1:peer: peer 127.0.0.1:* unreachable: "
                             "Peer 127.0.0.1:*, a connection: the peer refused: authentication failed "
                             "(code *); it is not asked while its breaker is open\n*");
  g_test_trap_assert_stderr ("*Kvtier-Message: *peer tier 1:peer, peer 127.0.0.1:*: circuit breaker "
                             "opened after 2 failures in a row (last: Peer 127.0.0.1:*, a connection: "
                             "the peer refused: authentication failed (code *)); work is refused for "
                             "1000 ms, then retried\n*");
  /* each once: the server's lines are rate-limited, the client's name a
   * loss once */
  g_test_trap_assert_stderr_unmatched ("*failed authentication*failed authentication*");
  g_test_trap_assert_stderr_unmatched ("*unreachable*unreachable*");
  g_test_trap_assert_stderr_unmatched ("*breaker opened*breaker opened*");
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, NULL);
  harness_init ();
  g_test_add_func ("/kvtier/messages/peer/wrong-secret", test_wrong_secret);
  status = g_test_run ();
  harness_cleanup ();
  return status;
}
