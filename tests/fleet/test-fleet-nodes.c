/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include <string.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <kvtier.h>
#include <signal.h>

#include "test-dir.h"
#include "test-peer-harness.h"

/*
 * A fleet of three `kvtier serve` nodes on 127.0.0.1 and this process as
 * the fleet's index: KvPeerSubscribers (the peer plugin's, found by type
 * name as `kvtier route` finds them) follow each node's event stream into
 * a KvFleetIndex. A node killed by PID leaves the index within its
 * timeout, and says so; a subscriber that comes late sees exactly what one
 * that followed from the start sees, after the nodes changed.
 */

#define SLOT_KIB 4
#define NS "test-model/fp16/tp1"
#define STREAM_SETTINGS "max-subscribers = 4\nheartbeat-ms = 100"

static GMutex log_lock;
static GString *log_text;

static void
capture_log (const char     *domain,
             GLogLevelFlags  level,
             const char     *message,
             gpointer        data)
{
  g_mutex_lock (&log_lock);
  g_string_append_printf (log_text, "%s\n", message);
  g_mutex_unlock (&log_lock);
}

static gboolean
log_has (const char *text)
{
  gboolean found;

  g_mutex_lock (&log_lock);
  found = strstr (log_text->str, text) != NULL;
  g_mutex_unlock (&log_lock);
  return found;
}

static GObject *
follow (KvFleetIndex *index,
        PeerNode     *node)
{
  g_autoptr(GError) error = NULL;
  GType type = g_type_from_name ("KvPeerSubscriber");
  GObject *subscriber;

  g_assert_true (type != G_TYPE_INVALID);
  subscriber = g_initable_new (type, NULL, &error,
                               "address", node->peer_address, "index", index,
                               "secret-file", harness_secret_path (), "namespace", NS,
                               "slot-size", (guint64) SLOT_KIB * 1024,
                               "silence-timeout-ms", 1000, "reconnect-ms", 50, NULL);
  g_assert_no_error (error);
  return subscriber;
}

/* Waits until @node's entries in @index are @n_keys. */
static void
wait_node_keys (KvFleetIndex *index,
                const char   *name,
                guint64       n_keys)
{
  gint64 until = g_get_monotonic_time () + 15 * G_USEC_PER_SEC;
  gint node;

  do
    {
      node = kv_fleet_index_find_node (index, name);
      if (node >= 0 && kv_fleet_index_get_node_n_keys (index, node) == n_keys)
        return;
      g_usleep (10 * 1000);
    }
  while (g_get_monotonic_time () < until);
  g_error ("node %s holds %" G_GUINT64_FORMAT " keys in the index, not %" G_GUINT64_FORMAT, name,
           node >= 0 ? kv_fleet_index_get_node_n_keys (index, node) : 0, n_keys);
}

/* `kvtier route` in front of @nodes, with @config's peer settings. */
static GSubprocess *
start_router (const char  *config,
              PeerNode   **nodes,
              guint        n_nodes,
              char       **out_http)
{
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autoptr(GDataInputStream) out = NULL;
  g_autoptr(GString) list = g_string_new ("");
  g_autoptr(GError) error = NULL;
  g_autofree char *line = NULL;
  GSubprocess *router;

  for (guint i = 0; i < n_nodes; i++)
    g_string_append_printf (list, "%s%s", i > 0 ? "," : "", nodes[i]->peer_address);
  g_subprocess_launcher_set_child_setup (launcher, harness_child_setup, NULL, NULL);
  router = g_subprocess_launcher_spawn (launcher, &error, g_getenv ("KVTIER_EXE"), "route",
                                        "--config", config, "--nodes", list->str,
                                        "--http", "127.0.0.1:0", NULL);
  g_assert_no_error (error);
  out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (router));
  line = g_data_input_stream_read_line_utf8 (out, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (g_str_has_prefix (line, "ready http="));
  *out_http = g_strdup (line + strlen ("ready http="));
  return router;
}

/* POSTs @body to the router's @path; the answer's JSON object (NULL for
 * an empty answer). */
static JsonObject *
router_post (const char *http,
             const char *path,
             const char *body,
             JsonParser *parser)
{
  g_autofree char *url = g_strdup_printf ("http://%s%s", http, path);
  const char *argv[] = { "curl", "-sS", "--max-time", "5", "-X", "POST", "--data", body, url, NULL };
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  int status = 0;

  g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, NULL, &status, &error);
  g_assert_no_error (error);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  /* /finish answers 204, no body */
  if (out[0] == '\0')
    return NULL;
  g_assert_true (json_parser_load_from_data (parser, out, -1, &error));
  g_assert_no_error (error);
  return json_node_get_object (json_parser_get_root (parser));
}

/* The keys of synthetic chunks [first, first + n) as the router takes
 * them: hex block hashes. */
static char *
route_body (guint64 first,
            guint   n)
{
  GString *body = g_string_new ("{\"keys\": [");

  for (guint i = 0; i < n; i++)
    {
      g_autoptr(KvKey) key = synthetic_key (first + i);
      gsize len = 0;
      const guint8 *hash = kv_key_get_hash (key, &len);

      g_string_append_printf (body, "%s\"", i > 0 ? ", " : "");
      for (gsize b = 0; b < len; b++)
        g_string_append_printf (body, "%02x", hash[b]);
      g_string_append_c (body, '"');
    }
  g_string_append (body, "]}");
  return g_string_free (body, FALSE);
}

static KvFleetLocation
where (KvFleetIndex *index,
       PeerNode     *node,
       guint64       chunk)
{
  g_autoptr(KvKey) key = synthetic_key (chunk);
  gint id = kv_fleet_index_find_node (index, node->peer_address);

  g_assert_cmpint (id, >=, 0);
  return kv_fleet_index_get_locations (index, id, key);
}

/* Both indexes hold the same for @node, chunk by chunk. */
static void
assert_same_view (KvFleetIndex *a,
                  KvFleetIndex *b,
                  PeerNode     *node)
{
  for (guint64 chunk = 0; chunk < 160; chunk++)
    g_assert_cmphex (where (a, node, chunk), ==, where (b, node, chunk));
}

static void
test_three_nodes (void)
{
  g_autofree char *root = g_build_filename (harness_dir (), "fleet-fs", NULL);
  g_autofree char *fs = g_strdup_printf ("\n[tier disk]\ntype = fs\nroot = %s\n", root);
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(KvFleetIndex) index = g_object_new (KV_TYPE_FLEET_INDEX, "node-timeout-ms", 1500, NULL);
  g_autoptr(KvFleetIndex) late_index = kv_fleet_index_new ();
  g_autoptr(PeerNode) a = NULL;
  g_autoptr(PeerNode) b = NULL;
  g_autoptr(PeerNode) c = NULL;
  g_autoptr(GPtrArray) subscribers = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr(GPtrArray) late = g_ptr_array_new_with_free_func (g_object_unref);
  guint n_primary = 0;
  gint64 killed, until;
  guint handler;

  kv_tier_registry_load_plugins (registry, NULL);
  if (kv_tier_registry_lookup_tier_type (registry, "fs", NULL) == G_TYPE_INVALID)
    {
      g_test_skip ("the fs tier is not built (-Dfs=disabled)");
      return;
    }
  g_assert_cmpint (g_mkdir (root, 0700), ==, 0);
  log_text = g_string_new ("");
  handler = g_log_set_handler ("Kvtier", G_LOG_LEVEL_MESSAGE, capture_log, NULL);

  /* A: chunks 0..29 in its primary; B: 20..49, its primary (16 slots)
   * keeps the newest, its fs tier all; C: 100..119 */
  a = peer_node_start (STREAM_SETTINGS, SLOT_KIB, 0, 30);
  b = peer_node_start_with (STREAM_SETTINGS, fs, SLOT_KIB, 16, 20, 30);
  c = peer_node_start (STREAM_SETTINGS, SLOT_KIB, 100, 20);
  g_ptr_array_add (subscribers, follow (index, a));
  g_ptr_array_add (subscribers, follow (index, b));
  g_ptr_array_add (subscribers, follow (index, c));

  wait_node_keys (index, a->peer_address, 30);
  wait_node_keys (index, b->peer_address, 30);
  wait_node_keys (index, c->peer_address, 20);
  for (guint64 chunk = 0; chunk < 160; chunk++)
    {
      KvFleetLocation on_b = where (index, b, chunk);

      g_assert_cmphex (where (index, a, chunk), ==, chunk < 30 ? KV_FLEET_LOCATION_PRIMARY : 0);
      g_assert_cmphex (where (index, c, chunk), ==,
                       chunk >= 100 && chunk < 120 ? KV_FLEET_LOCATION_PRIMARY : 0);
      if (chunk < 20 || chunk >= 50)
        g_assert_cmphex (on_b, ==, 0);
      else
        {
          /* every chunk on disk, the newest in the primary too */
          g_assert_true (on_b & KV_FLEET_LOCATION_DISK);
          g_assert_cmphex (on_b & ~(KV_FLEET_LOCATION_DISK | KV_FLEET_LOCATION_PRIMARY), ==, 0);
          n_primary += (on_b & KV_FLEET_LOCATION_PRIMARY) != 0;
        }
    }
  g_assert_cmpuint (n_primary, >, 0);
  g_assert_cmpuint (n_primary, <=, 16);

  /* the index answers prefixes across nodes */
  {
    KvKey *keys[40];
    g_autoptr(KvFleetMatch) match = NULL;
    guint longest = 0;

    for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
      keys[i] = synthetic_key (20 + i);
    match = kv_fleet_index_lookup (index, keys, G_N_ELEMENTS (keys));
    g_assert_cmpuint (kv_fleet_match_get_n_nodes (match), ==, 2);
    g_assert_cmpuint (kv_fleet_match_get_prefix_of (match, kv_fleet_index_find_node (index, a->peer_address)),
                      ==, 10);
    g_assert_cmpuint (kv_fleet_match_get_longest (match, &longest), ==, 30);
    g_assert_cmpint (longest, ==, kv_fleet_index_find_node (index, b->peer_address));
    for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
      kv_key_unref (keys[i]);
  }

  /* C killed by PID: its chunks leave the index within the timeout */
  g_subprocess_force_exit (c->process);
  killed = g_get_monotonic_time ();
  until = killed + 5 * G_USEC_PER_SEC;
  while (kv_fleet_index_is_node_alive (index, kv_fleet_index_find_node (index, c->peer_address)) &&
         g_get_monotonic_time () < until)
    g_usleep (10 * 1000);
  g_assert_false (kv_fleet_index_is_node_alive (index, kv_fleet_index_find_node (index, c->peer_address)));
  /* 1.5 s of silence, and the subscriber's wake-ups every 100 ms */
  g_assert_cmpint (g_get_monotonic_time () - killed, <, 2500 * 1000);
  for (guint64 chunk = 100; chunk < 120; chunk++)
    g_assert_cmphex (where (index, c, chunk), ==, 0);
  g_assert_cmpuint (kv_fleet_index_get_n_forgotten (index), ==, 1);
  {
    g_autofree char *line = g_strdup_printf ("fleet index: node %s sent nothing for", c->peer_address);

    g_assert_true (log_has (line));
  }
  /* the others are still there */
  g_assert_cmpuint (kv_fleet_index_get_node_n_keys (index, kv_fleet_index_find_node (index, a->peer_address)),
                    ==, 30);

  /* B changes: a peer loads chunk 20, which only B's disk held, so B
   * promotes it into its primary (evicting another) */
  {
    g_autofree char *settings = g_strdup_printf ("peers = %s", b->peer_address);
    g_autoptr(GError) error = NULL;
    KvTieringManager *client = client_manager_new (settings, SLOT_KIB, &error);
    g_autoptr(KvRequest) request = kv_request_new ("fleet-client", NULL);
    guint64 promoted = 20;
    g_autoptr(KvKey) key = NULL;

    while (where (index, b, promoted) & KV_FLEET_LOCATION_PRIMARY)
      promoted++;
    g_assert_cmpuint (promoted, <, 50);
    key = synthetic_key (promoted);

    g_assert_no_error (error);
    kv_tiering_manager_on_new_request (client, request);
    g_assert_cmpint (client_lookup_settled (client, request, key, 5000), ==, KV_LOOKUP_RESULT_HIT);
    g_assert_true (client_chunk_is (client, request, key, promoted));
    kv_tiering_manager_on_request_finished (client, request);
    g_assert_true (kv_tiering_manager_shutdown (client, NULL));
    g_object_unref (client);
    until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
    while (!(where (index, b, promoted) & KV_FLEET_LOCATION_PRIMARY) && g_get_monotonic_time () < until)
      g_usleep (10 * 1000);
    g_assert_true (where (index, b, promoted) & KV_FLEET_LOCATION_PRIMARY);
  }

  /* a late subscriber sees exactly what the early one saw */
  g_ptr_array_add (late, follow (late_index, a));
  g_ptr_array_add (late, follow (late_index, b));
  wait_node_keys (late_index, a->peer_address, 30);
  wait_node_keys (late_index, b->peer_address, 30);
  assert_same_view (index, late_index, a);
  assert_same_view (index, late_index, b);
  {
    g_autofree char *metrics = scrape_metrics (a);

    g_assert_cmpfloat (metric_sum (metrics, "kvtier_peer_event_subscribers"), ==, 2);
    g_assert_cmpfloat (metric_sum (metrics, "kvtier_peer_event_keys"), ==, 30);
    g_assert_cmpfloat (metric_sum (metrics, "kvtier_peer_event_snapshots_total"), ==, 2);
  }

  /* `kvtier route` in front of A and B: chunks 20..49 go to B, which
   * holds all of them, until B's load leaves the bound; then A, which
   * holds 20..29, is told to fetch the rest from B */
  {
    PeerNode *routed[] = { a, b };
    g_autofree char *http = NULL;
    g_autofree char *body = route_body (20, 30);
    g_autoptr(GSubprocess) router = start_router (a->config_path, routed, 2, &http);
    g_autoptr(JsonParser) parser = json_parser_new ();
    JsonObject *answer = NULL;
    gint64 ready_until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

    /* until the router follows both nodes */
    do
      {
        g_autofree char *finish = NULL;

        answer = router_post (http, "/route", body, parser);
        /* no node followed yet: an error, try again */
        if (!json_object_has_member (answer, "node"))
          {
            g_usleep (50 * 1000);
            continue;
          }
        if (json_object_get_int_member (answer, "prefix") == 30)
          break;
        /* not yet: that request leaves the node's load again */
        finish = g_strdup_printf ("{\"node\": \"%s\"}", json_object_get_string_member (answer, "node"));
        g_assert_null (router_post (http, "/finish", finish, parser));
        g_usleep (50 * 1000);
      }
    while (g_get_monotonic_time () < ready_until);
    g_assert_true (json_object_has_member (answer, "node"));
    g_assert_cmpstr (json_object_get_string_member (answer, "node"), ==, b->peer_address);
    g_assert_true (json_object_get_null_member (answer, "kv_peer"));
    answer = router_post (http, "/route", body, parser);
    g_assert_cmpstr (json_object_get_string_member (answer, "node"), ==, b->peer_address);
    answer = router_post (http, "/route", body, parser);
    g_assert_cmpstr (json_object_get_string_member (answer, "node"), ==, a->peer_address);
    g_assert_cmpint (json_object_get_int_member (answer, "prefix"), ==, 10);
    g_assert_cmpstr (json_object_get_string_member (answer, "kv_peer"), ==, b->peer_address);
    g_assert_cmpint (json_object_get_int_member (answer, "peer_prefix"), ==, 30);
    g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (answer, "transfer_params"),
                                                    "kv_peer"), ==, b->peer_address);
    /* bad input is refused, saying why */
    answer = router_post (http, "/route", "{\"keys\": [\"xyz\"]}", parser);
    g_assert_nonnull (strstr (json_object_get_string_member (answer, "error"), "hex block hash"));
    g_subprocess_send_signal (router, SIGTERM);
    g_assert_true (g_subprocess_wait_check (router, NULL, NULL));
  }

  g_ptr_array_set_size (late, 0);
  g_ptr_array_set_size (subscribers, 0);
  g_assert_cmpint (peer_node_terminate (a, 5000), ==, 0);
  g_assert_cmpint (peer_node_terminate (b, 5000), ==, 0);
  g_log_remove_handler ("Kvtier", handler);
  g_string_free (log_text, TRUE);
  test_dir_remove (root);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, NULL);
  harness_init ();
  g_test_add_func ("/fleet/nodes/three-nodes", test_three_nodes);
  status = g_test_run ();
  harness_cleanup ();
  return status;
}
