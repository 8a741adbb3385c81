/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"

#include <glib-unix.h>
#include <libsoup/soup.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/*
 * kvtier serve --config FILE: runs a node's primary tier and secondary
 * tiers on this thread's main loop and serves them to the other nodes
 * through the configuration's peer tier (its `listen` address). The
 * manager steps whenever a tier completed work, a peer's request is
 * queued (the peer tier's ::requests-queued), or, while work is pending,
 * every few milliseconds.
 *
 * HTTP (libsoup 3), on --http: /metrics, the Prometheus text of the
 * manager's metrics (the vllm:kv_offload_tiering_* families and every
 * tier's own, the peer tier's included), cumulative since the start;
 * /health, 200 "ok" while serving and 503 "draining" after SIGTERM.
 *
 * SIGTERM or SIGINT: the peer tiers stop accepting, the requests of the
 * peers already connected are answered (up to --drain-timeout-ms), the
 * manager shuts down, and the command exits 0.
 *
 * --synthetic-chunks N stores N generated chunks before serving, for
 * tests and benchmarks: chunk i (from --synthetic-first) has the key
 * SHA-256("kvtier-synthetic:" i) (group 0) and payload words
 * (i << 32 | w) × 0x9E3779B97F4A7C15, little-endian, for w = 0, 1, ….
 */

typedef struct
{
  KvTieringManager *manager;
  KvScheduleEnd    *schedule_end;
  KvMetricRegistry *registry;
  KvStats          *totals;
  GMainLoop        *loop;
  GPtrArray        *peer_tiers;    /* tiers with a "drain" action */
  gint              step_queued;   /* atomic */
  gboolean          draining;
  gint64            drain_until_us;
  guint             drain_timeout_ms;
  int               exit_code;
} Serve;

/* The key and bytes of synthetic chunk @index (see the comment above). */
static KvKey *
synthetic_key (guint64 index)
{
  g_autofree char *text = g_strdup_printf ("kvtier-synthetic:%" G_GUINT64_FORMAT, index);
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  guint8 digest[32];
  gsize len = sizeof digest;

  g_checksum_update (sum, (const guchar *) text, -1);
  g_checksum_get_digest (sum, digest, &len);
  return kv_key_new (digest, len, 0);
}

static void
synthetic_fill (guint8  *slot,
                gsize    size,
                guint64  index)
{
  gsize n_words = size / 8;

  for (gsize w = 0; w < n_words; w++)
    {
      guint64 v = GUINT64_TO_LE (((index << 32) | w) * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15));

      memcpy (slot + w * 8, &v, 8);
    }
  for (gsize b = n_words * 8; b < size; b++)
    slot[b] = (guint8) (index + b);
}

static void step (Serve *serve);

static gboolean
store_synthetic (Serve    *serve,
                 guint64   first,
                 guint64   count,
                 GError  **error)
{
  KvPrimaryTier *primary = kv_tiering_manager_get_primary (serve->manager);
  KvHostBuffer *buffer = kv_primary_tier_get_buffer (primary);
  gsize slot_size = kv_host_buffer_get_slot_size (buffer);
  g_autoptr(KvRequest) request = kv_request_new ("kvtier-serve-synthetic", NULL);
  /* a quarter of the primary at a time, its cascades to the other tiers
   * finished before the next: a primary smaller than the chunks keeps the
   * newest, the tiers behind it all of them */
  const guint batch = MAX (1, MIN (64, kv_host_buffer_get_n_slots (buffer) / 4));

  kv_tiering_manager_on_new_request (serve->manager, request);
  for (guint64 start = first; start < first + count; start += batch)
    {
      gint64 until = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
      guint n = (guint) MIN (batch, first + count - start);
      g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
      g_autoptr(KvPrepareStoreResult) result = NULL;
      KvKey * const *to_store;
      const guint32 *chunk_ids;
      guint n_to_store;

      for (guint i = 0; i < n; i++)
        g_ptr_array_add (keys, synthetic_key (start + i));
      result = kv_tiering_manager_prepare_store (serve->manager, (KvKey * const *) keys->pdata, n,
                                                 request, error);
      if (result == NULL)
        return FALSE;
      to_store = kv_prepare_store_result_get_keys_to_store (result, &n_to_store);
      chunk_ids = kv_prepare_store_result_get_chunk_ids (result, NULL);
      for (guint j = 0; j < n_to_store; j++)
        for (guint i = 0; i < n; i++)
          if (kv_key_equal (to_store[j], keys->pdata[i]))
            synthetic_fill (kv_host_buffer_peek_slot (buffer, chunk_ids[j]), slot_size, start + i);
      kv_tiering_manager_complete_store (serve->manager, to_store, n_to_store, request, TRUE);
      do
        {
          step (serve);
          if (kv_tiering_manager_has_pending_work (serve->manager))
            g_usleep (500);
        }
      while (kv_tiering_manager_has_pending_work (serve->manager) && g_get_monotonic_time () < until);
    }
  kv_tiering_manager_on_request_finished (serve->manager, request);
  return TRUE;
}

/* ---- stepping ---------------------------------------------------------------- */

static void
step (Serve *serve)
{
  kv_tiering_manager_on_schedule_end (serve->manager, serve->schedule_end);
}

static gboolean
queued_step (gpointer data)
{
  Serve *serve = data;

  g_atomic_int_set (&serve->step_queued, 0);
  step (serve);
  return G_SOURCE_REMOVE;
}

/* A peer tier's server thread queued a request: step soon, once. */
static void
requests_queued (GObject *tier,
                 gpointer data)
{
  Serve *serve = data;

  if (g_atomic_int_compare_and_exchange (&serve->step_queued, 0, 1))
    g_idle_add_full (G_PRIORITY_HIGH, queued_step, serve, NULL);
}

static gboolean
woken (gpointer data)
{
  step (data);
  return G_SOURCE_CONTINUE;
}

static gboolean
tick (gpointer data)
{
  Serve *serve = data;

  if (kv_tiering_manager_has_pending_work (serve->manager))
    step (serve);
  if (serve->draining &&
      (!kv_tiering_manager_has_pending_work (serve->manager) ||
       g_get_monotonic_time () >= serve->drain_until_us))
    {
      if (kv_tiering_manager_has_pending_work (serve->manager))
        g_printerr ("kvtier serve: drain timed out after %u ms; shutting down\n",
                    serve->drain_timeout_ms);
      g_main_loop_quit (serve->loop);
    }
  return G_SOURCE_CONTINUE;
}

static gboolean
on_signal (gpointer data)
{
  Serve *serve = data;

  if (serve->draining)
    return G_SOURCE_CONTINUE;
  serve->draining = TRUE;
  serve->drain_until_us = g_get_monotonic_time () + serve->drain_timeout_ms * G_TIME_SPAN_MILLISECOND;
  for (guint i = 0; i < serve->peer_tiers->len; i++)
    g_signal_emit_by_name (serve->peer_tiers->pdata[i], "drain");
  g_printerr ("kvtier serve: draining\n");
  return G_SOURCE_CONTINUE;
}

/* ---- HTTP ---------------------------------------------------------------------- */

static void
handle_metrics (SoupServer        *server,
                SoupServerMessage *msg,
                const char        *path,
                GHashTable        *query,
                gpointer           data)
{
  Serve *serve = data;
  g_autoptr(KvStats) stats = NULL;
  char *text;

  if (soup_server_message_get_method (msg) != SOUP_METHOD_GET)
    {
      soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
      return;
    }
  /* The manager's stats are deltas since the last call: keep the sums. */
  stats = kv_tiering_manager_get_stats (serve->manager);
  kv_stats_aggregate (serve->totals, stats);
  text = kv_stats_to_prometheus (serve->totals, serve->registry);
  soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
  soup_server_message_set_response (msg, "text/plain; version=0.0.4; charset=utf-8",
                                    SOUP_MEMORY_TAKE, text, strlen (text));
}

static void
handle_health (SoupServer        *server,
               SoupServerMessage *msg,
               const char        *path,
               GHashTable        *query,
               gpointer           data)
{
  Serve *serve = data;
  const char *body = serve->draining ? "draining\n" : "ok\n";

  soup_server_message_set_status (msg, serve->draining ? SOUP_STATUS_SERVICE_UNAVAILABLE
                                                       : SOUP_STATUS_OK, NULL);
  soup_server_message_set_response (msg, "text/plain; charset=utf-8", SOUP_MEMORY_STATIC,
                                    body, strlen (body));
}

/* libsoup's own listener leaks the GSocket of every connection it accepts
 * (libsoup 3.2): connections are accepted here and handed to the server. */
static gboolean
http_incoming (GSocketService    *service,
               GSocketConnection *connection,
               GObject           *source_object,
               gpointer           data)
{
  SoupServer *server = data;
  g_autoptr(GSocketAddress) local = g_socket_connection_get_local_address (connection, NULL);
  g_autoptr(GSocketAddress) remote = g_socket_connection_get_remote_address (connection, NULL);
  g_autoptr(GError) error = NULL;

  if (local == NULL || remote == NULL ||
      !soup_server_accept_iostream (server, G_IO_STREAM (connection), local, remote, &error))
    g_debug ("kvtier serve: HTTP connection dropped: %s", error != NULL ? error->message : "no address");
  return TRUE;
}

static SoupServer *
start_http (Serve            *serve,
            const char       *address,
            GSocketService  **out_service,
            char            **out_bound,
            GError          **error)
{
  g_autoptr(SoupServer) server = soup_server_new ("server-header", "kvtier", NULL);
  g_autoptr(GSocketService) service = g_socket_service_new ();
  g_autoptr(GSocketConnectable) connectable = NULL;
  g_autoptr(GSocketAddressEnumerator) enumerator = NULL;
  g_autoptr(GSocketAddress) socket_address = NULL;
  g_autoptr(GSocketAddress) effective = NULL;
  g_autofree char *host = NULL;

  connectable = g_network_address_parse (address, 0, error);
  if (connectable == NULL)
    return NULL;
  enumerator = g_socket_connectable_enumerate (connectable);
  socket_address = g_socket_address_enumerator_next (enumerator, NULL, error);
  if (socket_address == NULL)
    return NULL;
  soup_server_add_handler (server, "/metrics", handle_metrics, serve, NULL);
  soup_server_add_handler (server, "/health", handle_health, serve, NULL);
  if (!g_socket_listener_add_address (G_SOCKET_LISTENER (service), socket_address,
                                      G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL,
                                      &effective, error))
    return NULL;
  g_signal_connect (service, "incoming", G_CALLBACK (http_incoming), server);
  g_socket_service_start (service);
  host = g_inet_address_to_string (g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (effective)));
  *out_bound = g_strdup_printf ("%s:%u", host,
                                g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (effective)));
  *out_service = g_steal_pointer (&service);
  return g_steal_pointer (&server);
}

/* ---- the command ------------------------------------------------------------------ */

int
tool_serve (int    argc,
            char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(SoupServer) http = NULL;
  g_autoptr(GSocketService) http_service = NULL;
  g_autoptr(GSource) wakeup = NULL;
  g_autofree char *config_path = NULL;
  g_autofree char *http_option = NULL;
  const char *http_address;
  g_autofree char *http_bound = NULL;
  gint64 synthetic_chunks = 0, synthetic_first = 0;
  gint drain_timeout_ms = 10000;
  gboolean plugin_errors = FALSE;
  Serve serve = { 0 };
  guint tick_id, term_id, int_id;
  GOptionEntry entries[] = {
    { "config", 'c', 0, G_OPTION_ARG_FILENAME, &config_path, "The node's configuration", "FILE" },
    { "http", 0, 0, G_OPTION_ARG_STRING, &http_option,
      "Serve /metrics and /health on HOST:PORT (default 127.0.0.1:9464; port 0: any; empty: no HTTP)",
      "HOST:PORT" },
    { "drain-timeout-ms", 0, 0, G_OPTION_ARG_INT, &drain_timeout_ms,
      "After SIGTERM, how long to let connected peers finish (default 10000)", "MS" },
    { "synthetic-chunks", 0, 0, G_OPTION_ARG_INT64, &synthetic_chunks,
      "Store N generated chunks before serving (tests, benchmarks)", "N" },
    { "synthetic-first", 0, 0, G_OPTION_ARG_INT64, &synthetic_first,
      "The index of the first generated chunk (default 0)", "I" },
    { NULL }
  };

  /* stdout carries the `ready` line: every log message goes to stderr */
  g_log_writer_default_set_use_stderr (TRUE);
  context = g_option_context_new ("--config FILE - run a node and serve its tiers to peers");
  g_option_context_set_summary (context,
    "Builds the primary tier and the tiers of FILE, serves them to other nodes through\n"
    "its peer tier (its `listen` address), and exposes /metrics (Prometheus text) and\n"
    "/health over HTTP. Prints `ready peer=HOST:PORT http=HOST:PORT` once serving.\n"
    "SIGTERM or SIGINT: stop accepting, answer the connected peers, exit 0.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);
  if (argc > 1)
    return tool_usage_error (context, "unexpected argument '%s'", argv[1]);
  if (config_path == NULL)
    return tool_usage_error (context, "--config FILE is required");
  http_address = http_option != NULL ? http_option : "127.0.0.1:9464";
  if (synthetic_chunks < 0 || synthetic_first < 0 || drain_timeout_ms < 0)
    return tool_usage_error (context, "counts and times must not be negative");

  registry = tool_load_registry (TRUE, &plugin_errors);
  config = kv_config_new_from_file (registry, config_path, &error);
  if (config == NULL)
    {
      g_printerr ("kvtier serve: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  serve.manager = kv_config_create_manager (config, &error);
  if (serve.manager == NULL)
    {
      g_printerr ("kvtier serve: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  serve.schedule_end = kv_schedule_end_new (NULL, NULL);
  serve.registry = kv_tiering_manager_create_metric_registry (serve.manager, &error);
  if (serve.registry == NULL)
    {
      g_printerr ("kvtier serve: %s\n", error->message);
      goto out;
    }
  serve.totals = kv_stats_new ();
  serve.loop = g_main_loop_new (NULL, FALSE);
  serve.peer_tiers = g_ptr_array_new ();
  serve.drain_timeout_ms = drain_timeout_ms;
  serve.exit_code = TOOL_EXIT_OK;

  if (synthetic_chunks > 0 &&
      !store_synthetic (&serve, synthetic_first, synthetic_chunks, &error))
    {
      g_printerr ("kvtier serve: cannot store the synthetic chunks: %s\n", error->message);
      goto out;
    }

  printf ("ready");
  for (guint i = 0; i < kv_tiering_manager_get_n_tiers (serve.manager); i++)
    {
      KvSecondaryTier *tier = kv_tiering_manager_get_tier (serve.manager, i);
      g_autofree char *bound = NULL;

      if (g_signal_lookup ("drain", G_OBJECT_TYPE (tier)) != 0)
        g_ptr_array_add (serve.peer_tiers, tier);
      if (g_signal_lookup ("requests-queued", G_OBJECT_TYPE (tier)) != 0)
        g_signal_connect (tier, "requests-queued", G_CALLBACK (requests_queued), &serve);
      if (g_object_class_find_property (G_OBJECT_GET_CLASS (tier), "bound-address") != NULL)
        g_object_get (tier, "bound-address", &bound, NULL);
      if (bound != NULL)
        printf (" peer=%s", bound);
    }

  if (http_address[0] != '\0')
    {
      http = start_http (&serve, http_address, &http_service, &http_bound, &error);
      if (http == NULL)
        {
          printf ("\n");
          g_printerr ("kvtier serve: cannot serve HTTP on %s: %s\n", http_address, error->message);
          goto out;
        }
      printf (" http=%s", http_bound);
    }
  printf ("\n");
  fflush (stdout);

  wakeup = kv_tiering_manager_create_source (serve.manager);
  g_source_set_callback (wakeup, woken, &serve, NULL);
  g_source_attach (wakeup, NULL);
  tick_id = g_timeout_add (5, tick, &serve);
  term_id = g_unix_signal_add (SIGTERM, on_signal, &serve);
  int_id = g_unix_signal_add (SIGINT, on_signal, &serve);

  g_main_loop_run (serve.loop);

  g_source_remove (tick_id);
  g_source_remove (term_id);
  g_source_remove (int_id);
  g_source_destroy (wakeup);
  for (guint i = 0; i < kv_tiering_manager_get_n_tiers (serve.manager); i++)
    g_signal_handlers_disconnect_by_data (kv_tiering_manager_get_tier (serve.manager, i), &serve);
  if (http_service != NULL)
    {
      g_socket_service_stop (http_service);
      g_socket_listener_close (G_SOCKET_LISTENER (http_service));
      g_signal_handlers_disconnect_by_data (http_service, http);
    }
  if (http != NULL)
    {
      soup_server_disconnect (http);
      /* the connections it closed are freed from idles of this context */
      while (g_main_context_iteration (NULL, FALSE))
        ;
      g_clear_object (&http);
    }
  if (!kv_tiering_manager_shutdown (serve.manager, &error))
    {
      g_printerr ("kvtier serve: shutdown: %s\n", error->message);
      serve.exit_code = TOOL_EXIT_FAILURE;
    }
  g_printerr ("kvtier serve: stopped\n");
  goto done;

out:
  serve.exit_code = TOOL_EXIT_FAILURE;
  kv_tiering_manager_shutdown (serve.manager, NULL);
done:
  /* steps the server threads queued before they stopped */
  while (g_idle_remove_by_data (&serve))
    ;
  g_clear_pointer (&serve.peer_tiers, g_ptr_array_unref);
  g_clear_pointer (&serve.loop, g_main_loop_unref);
  g_clear_object (&serve.totals);
  g_clear_object (&serve.registry);
  g_clear_pointer (&serve.schedule_end, kv_schedule_end_unref);
  g_clear_object (&serve.manager);
  return serve.exit_code;
}
