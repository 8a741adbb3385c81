/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <fcntl.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtier.h"
#include "metrics-doc.h"
#include "test-dir.h"
#include "test-peer-harness.h"
#ifdef KVTIER_TEST_REDIS
#include "test-redis-server.h"
#endif

/* A real Prometheus (Debian's `prometheus`, on a free loopback port, with a
 * storage directory of its own, stopped by PID) scrapes a `kvtier serve`
 * node every second while this process, as another node, fetches chunks
 * from it through its peer tier. Prometheus' HTTP API must then know every
 * family doc/metrics.md lists for `kvtier serve`, and `promtool check
 * metrics` must accept the node's /metrics (its only complaint allowed: the
 * `:` in vLLM's names, which kvtier keeps as vLLM defines them). Skipped
 * where prometheus or promtool is not installed. */

#define SLOT_KIB 64
#define N_CHUNKS 24

static char *
run_capture (const char * const  *argv,
             const char          *input,
             int                 *status)
{
  g_autoptr(GSubprocess) process = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;

  process = g_subprocess_newv (argv, G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE |
                                     G_SUBPROCESS_FLAGS_STDERR_MERGE, &error);
  g_assert_no_error (error);
  g_assert_true (g_subprocess_communicate_utf8 (process, input, NULL, &out, &err, &error));
  g_assert_no_error (error);
  *status = g_subprocess_get_if_exited (process) ? g_subprocess_get_exit_status (process) : -1;
  return g_steal_pointer (&out);
}

/* GET http://ADDRESS/PATH with curl: the body, or NULL when it failed. */
static char *
http_get (const char *address,
          const char *path)
{
  g_autofree char *url = g_strdup_printf ("http://%s%s", address, path);
  const char *argv[] = { "curl", "-sf", "--max-time", "5", "-g", url, NULL };
  int status = 0;
  g_autofree char *body = run_capture (argv, NULL, &status);

  return status == 0 ? g_steal_pointer (&body) : NULL;
}

typedef struct
{
  GPid   pid;
  char  *address;
  char  *dir;
} Prometheus;

static Prometheus prometheus;

static void
prometheus_stop (void)
{
  if (prometheus.pid > 0)
    {
      gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

      kill (prometheus.pid, SIGTERM);
      while (waitpid (prometheus.pid, NULL, WNOHANG) == 0)
        {
          if (g_get_monotonic_time () > until)
            {
              kill (prometheus.pid, SIGKILL);
              waitpid (prometheus.pid, NULL, 0);
              break;
            }
          g_usleep (20 * 1000);
        }
      g_spawn_close_pid (prometheus.pid);
      prometheus.pid = 0;
    }
  if (prometheus.dir != NULL)
    test_dir_remove (prometheus.dir);
  g_clear_pointer (&prometheus.dir, g_free);
  g_clear_pointer (&prometheus.address, g_free);
}

static guint
free_port (void)
{
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
  g_autoptr(GSocketAddress) bound = NULL;
  guint port;

  g_assert_true (g_socket_bind (socket, any, FALSE, NULL));
  bound = g_socket_get_local_address (socket, NULL);
  port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  g_socket_close (socket, NULL);
  return port;
}

/* Starts Prometheus scraping @target every second; waits until ready. */
static void
prometheus_start (const char *target)
{
  g_autofree char *config = NULL;
  g_autofree char *config_path = NULL;
  g_autofree char *storage = NULL;
  g_autofree char *listen = NULL;
  g_autofree char *log_path = NULL;
  g_autoptr(GError) error = NULL;
  gint64 until;
  int log_fd;

  prometheus.dir = test_dir_make ("kvtier-prometheus");
  prometheus.address = g_strdup_printf ("127.0.0.1:%u", free_port ());
  config = g_strdup_printf ("global:\n"
                            "  scrape_interval: 1s\n"
                            "  scrape_timeout: 1s\n"
                            "scrape_configs:\n"
                            "  - job_name: kvtier\n"
                            "    static_configs:\n"
                            "      - targets: ['%s']\n", target);
  config_path = g_build_filename (prometheus.dir, "prometheus.yml", NULL);
  g_assert_true (g_file_set_contents (config_path, config, -1, &error));
  g_assert_no_error (error);
  storage = g_strdup_printf ("--storage.tsdb.path=%s/data", prometheus.dir);
  listen = g_strdup_printf ("--web.listen-address=%s", prometheus.address);
  log_path = g_build_filename (prometheus.dir, "prometheus.log", NULL);
  log_fd = g_open (log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  g_assert_cmpint (log_fd, >=, 0);
  {
    g_autofree char *config_arg = g_strdup_printf ("--config.file=%s", config_path);
    const char *argv[] = { "prometheus", config_arg, storage, listen, "--log.level=warn", NULL };

    g_assert_true (g_spawn_async_with_fds (prometheus.dir, (char **) argv, NULL,
                                           G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD,
                                           harness_child_setup, NULL, &prometheus.pid,
                                           -1, log_fd, log_fd, &error));
    g_assert_no_error (error);
  }
  close (log_fd);

  until = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  for (;;)
    {
      g_autofree char *ready = http_get (prometheus.address, "/-/ready");

      if (ready != NULL)
        break;
      if (g_get_monotonic_time () > until || waitpid (prometheus.pid, NULL, WNOHANG) != 0)
        {
          g_autofree char *log = NULL;

          g_file_get_contents (log_path, &log, NULL, NULL);
          g_error ("prometheus did not start on %s:\n%s", prometheus.address, log);
        }
      g_usleep (100 * 1000);
    }
}

/* The metric names Prometheus has series of. */
static GHashTable *
prometheus_names (void)
{
  g_autofree char *body = http_get (prometheus.address, "/api/v1/label/__name__/values");
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  GHashTable *names = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  JsonObject *root;
  JsonArray *data;

  g_assert_nonnull (body);
  g_assert_true (json_parser_load_from_data (parser, body, -1, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  g_assert_cmpstr (json_object_get_string_member (root, "status"), ==, "success");
  data = json_object_get_array_member (root, "data");
  for (guint i = 0; i < json_array_get_length (data); i++)
    g_hash_table_add (names, g_strdup (json_array_get_string_element (data, i)));
  return names;
}

/* The series of what @query selects (URL-encoded here). */
static guint
prometheus_count (const char *query)
{
  g_autofree char *escaped = g_uri_escape_string (query, NULL, FALSE);
  g_autofree char *path = g_strdup_printf ("/api/v1/query?query=%s", escaped);
  g_autofree char *body = http_get (prometheus.address, path);
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *data;

  g_assert_nonnull (body);
  g_assert_true (json_parser_load_from_data (parser, body, -1, &error));
  g_assert_no_error (error);
  data = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)), "data");
  return json_array_get_length (json_object_get_array_member (data, "result"));
}

/* The names a family has series under. */
static GPtrArray *
series_names (const MetricsDocRow *row)
{
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);

  if (g_str_equal (row->type, "histogram"))
    {
      g_ptr_array_add (names, g_strconcat (row->name, "_bucket", NULL));
      g_ptr_array_add (names, g_strconcat (row->name, "_count", NULL));
      g_ptr_array_add (names, g_strconcat (row->name, "_sum", NULL));
    }
  else
    {
      g_ptr_array_add (names, g_strdup (row->exposed));
    }
  return names;
}

static gboolean with_redis;

/* What the node reports: every section but the connector's (not on
 * `kvtier serve`) and the s3 tier's (no gateway here), and the redis
 * tier's when it has one. */
static gboolean
served_by_kvtier_serve (const MetricsDocRow *row)
{
  return !g_str_equal (row->section, "The connector") &&
         !g_str_equal (row->section, "The s3 tier") &&
         (with_redis || !g_str_equal (row->section, "The redis tier"));
}

/* @text without the families named vllm:*. */
static char *
without_vllm (const char *text)
{
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);
  GString *out = g_string_new (NULL);

  for (guint i = 0; lines[i] != NULL; i++)
    {
      if (g_str_has_prefix (lines[i], "vllm:") || g_str_has_prefix (lines[i], "# HELP vllm:") ||
          g_str_has_prefix (lines[i], "# TYPE vllm:") || lines[i][0] == '\0')
        continue;
      g_string_append_printf (out, "%s\n", lines[i]);
    }
  return g_string_free (out, FALSE);
}

static void
check_promtool (const char *metrics)
{
  const char *argv[] = { "promtool", "check", "metrics", NULL };
  g_autofree char *clean = without_vllm (metrics);
  g_autofree char *out = NULL;
  g_auto(GStrv) problems = NULL;
  int status = 0;

  /* kvtier's own families: nothing to say */
  out = run_capture (argv, clean, &status);
  if (status != 0)
    g_error ("promtool check metrics, kvtier's families (exit %d):\n%s", status, out);
  g_clear_pointer (&out, g_free);

  /* the whole exposition parses; the lint's only complaint is the `:` in
   * vLLM's names (exit 3: lint problems) */
  out = run_capture (argv, metrics, &status);
  g_test_message ("promtool check metrics: exit %d\n%s", status, out);
  g_assert_true (status == 0 || status == 3);
  problems = g_strsplit (out, "\n", -1);
  for (guint i = 0; problems[i] != NULL; i++)
    {
      if (problems[i][0] == '\0')
        continue;
      if (!g_str_has_prefix (problems[i], "vllm:kv_offload_") ||
          !g_str_has_suffix (problems[i], " metric names should not contain ':'"))
        g_error ("promtool check metrics: %s", problems[i]);
    }
}

static void
test_real_prometheus (void)
{
  g_autofree char *fs_root = test_dir_make ("kvtier-prometheus-fs");
  g_autoptr(GString) more = g_string_new (NULL);
  g_autoptr(PeerNode) node = NULL;
  g_autofree char *settings = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GHashTable) rows = metrics_doc_read ();
  g_autoptr(GHashTable) names = NULL;
  g_autofree char *metrics = NULL;
  KvTieringManager *client;
  GHashTableIter iter;
  gpointer value;
  guint n_checked = 0;
  gint64 start = g_get_monotonic_time (), until;
  gboolean all_found = FALSE;
#ifdef KVTIER_TEST_REDIS
  RedisServer redis = { 0 };
  g_autofree char *redis_exe = g_find_program_in_path ("redis-server");
  g_autofree char *redis_cli_exe = g_find_program_in_path ("redis-cli");
#endif

  /* peer (1:peer), then fs with a backpressure detector (2:fs), then redis
   * (3:redis) where there is a redis-server */
  g_string_append_printf (more, "\n[tier disk]\ntype = fs\nroot = %s\nbackpressure = ema\n", fs_root);
#ifdef KVTIER_TEST_REDIS
  with_redis = redis_exe != NULL && redis_cli_exe != NULL && redis_test_init ();
  if (with_redis)
    {
      g_autofree char *address = NULL;

      redis_server_start (&redis, fs_root, NULL);
      address = redis_server_address (&redis);
      g_string_append_printf (more, "\n[tier cache]\ntype = redis\nservers = %s\n", address);
    }
#endif
  if (!with_redis)
    g_test_message ("no redis-server: the redis tier's families are not checked");
  node = peer_node_start_with ("", more->str, SLOT_KIB, 64, 0, N_CHUNKS);
  prometheus_start (node->http_address);

  /* this process fetches every chunk from the node, as a peer */
  settings = g_strdup_printf ("peers = %s", node->peer_address);
  client = client_manager_new (settings, SLOT_KIB, &error);
  g_assert_no_error (error);
  for (guint64 i = 0; i < N_CHUNKS; i++)
    {
      g_autofree char *id = g_strdup_printf ("fetch-%" G_GUINT64_FORMAT, i);
      g_autoptr(KvRequest) request = kv_request_new (id, NULL);
      g_autoptr(KvKey) key = synthetic_key (i);

      kv_tiering_manager_on_new_request (client, request);
      g_assert_cmpint (client_lookup_settled (client, request, key, 5000), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_true (client_chunk_is (client, request, key, i));
      kv_tiering_manager_on_request_finished (client, request);
    }
  g_assert_true (kv_tiering_manager_shutdown (client, NULL));
  g_object_unref (client);

  /* the node's /metrics: what promtool says of it */
  metrics = scrape_metrics (node);
  g_assert_nonnull (metrics);
  check_promtool (metrics);

  /* Prometheus scraped the node at least once since the fetches */
  until = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  while (!all_found && g_get_monotonic_time () < until)
    {
      g_usleep (500 * 1000);
      g_clear_pointer (&names, g_hash_table_unref);
      names = prometheus_names ();
      all_found = prometheus_count ("kvtier_peer_served_chunks_total{tier=\"1:peer\"} > 0") == 1;
      g_hash_table_iter_init (&iter, rows);
      while (all_found && g_hash_table_iter_next (&iter, NULL, &value))
        {
          g_autoptr(GPtrArray) series = series_names (value);

          if (!served_by_kvtier_serve (value))
            continue;
          for (guint i = 0; i < series->len; i++)
            all_found = all_found && g_hash_table_contains (names, series->pdata[i]);
        }
    }
  g_hash_table_iter_init (&iter, rows);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      g_autoptr(GPtrArray) series = series_names (value);

      if (!served_by_kvtier_serve (value))
        continue;
      for (guint i = 0; i < series->len; i++)
        if (!g_hash_table_contains (names, series->pdata[i]))
          g_error ("Prometheus has no series of %s (documented in doc/metrics.md, %s)",
                   (const char *) series->pdata[i], ((MetricsDocRow *) value)->section);
      n_checked++;
    }
  g_test_message ("%u documented families found in Prometheus after %.1f s", n_checked,
                  (g_get_monotonic_time () - start) / 1e6);
  g_assert_cmpuint (n_checked, >, 60);

  /* the buckets as vLLM writes them, the tier label as vLLM's */
  g_assert_cmpuint (prometheus_count ("vllm:kv_offload_tiering_lookup_async_delay_seconds_bucket"
                                      "{le=\"10.0\",tier=\"0:primary\"}"), ==, 1);
  g_assert_cmpuint (prometheus_count ("kvtier_tiering_served_bytes_total{tier=\"1:peer\"} > 0"), ==, 1);
  g_assert_cmpuint (prometheus_count ("vllm:kv_offload_tiering_write_bytes_total{tier=\"1:peer\"} == 0"), ==, 1);
  g_assert_cmpuint (prometheus_count ("kvtier_fs_stored_chunks_total{tier=\"2:fs\"}"), ==, 1);

  if (with_redis)
    g_assert_cmpuint (prometheus_count ("kvtier_redis_servers_down{tier=\"3:redis\"} == 0"), ==, 1);

  prometheus_stop ();
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
#ifdef KVTIER_TEST_REDIS
  if (with_redis)
    redis_server_clear (&redis);
#endif
  test_dir_remove (fs_root);
}

int
main (int   argc,
      char *argv[])
{
  g_autofree char *prometheus_exe = g_find_program_in_path ("prometheus");
  g_autofree char *promtool_exe = g_find_program_in_path ("promtool");
  g_autofree char *curl_exe = g_find_program_in_path ("curl");
  int status;

  g_test_init (&argc, &argv, NULL);
  if (prometheus_exe == NULL || promtool_exe == NULL || curl_exe == NULL)
    {
      g_print ("1..0 # SKIP prometheus, promtool or curl is not installed (Debian: prometheus, curl)\n");
      return 0;
    }
  harness_init ();
  g_test_add_func ("/kvtier/metrics/real-prometheus", test_real_prometheus);
  status = g_test_run ();
  prometheus_stop ();
  harness_cleanup ();
  return status;
}
