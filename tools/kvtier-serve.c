/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"

#include <glib-unix.h>
#include <libsoup/soup.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <xxhash.h>

#include "kvtier-http-server.h"

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
 * /health, 200 "ok" while serving and 503 "draining" after SIGTERM. The
 * endpoint (ToolHttpServer, kvtier-http-server.c, as `kvtier route`'s)
 * holds at most HTTP_MAX_CONNECTIONS connections (a new one beyond
 * closes the one that waited longest), each must finish a request within
 * HTTP_TIMEOUT_MS of its start or of its previous request, and its
 * accept loop backs off when descriptors run out.
 *
 * The soft descriptor limit is raised to the hard one at start, so that
 * the peer tier's max-connections fits (it is lowered to fit otherwise).
 * Idle, the command sleeps: the manager is stepped when a tier completed
 * work or a peer's request is queued, and every few milliseconds only
 * while work is pending.
 *
 * SIGTERM or SIGINT: the peer tiers stop accepting, the requests of the
 * peers already connected are answered (up to --drain-timeout-ms), the
 * manager shuts down, and the command exits 0.
 *
 * Event stream: when a peer tier listens with max-subscribers > 0 (the
 * default), the primary tier and every tier that can are configured to
 * queue their chunk events, and each step hands them to the peer tier
 * (::publish-event, numbered as KvChunkSource: 1 the primary, 2 + t tier
 * t), which streams them to its subscribers (doc/protocol.md).
 *
 * --synthetic-chunks N stores N generated chunks before serving, for
 * tests and benchmarks: chunk i (from --synthetic-first) has the key
 * SHA-256("kvtier-synthetic:" i) (group 0) and payload words
 * (i << 32 | w) × 0x9E3779B97F4A7C15, little-endian, for w = 0, 1, …;
 * their slots carry their checksum, as chunks a device copied in do.
 */

/* At most this many HTTP connections (Prometheus uses one), fewer under a
 * low descriptor limit; each must finish a request within the timeout of
 * its start or its previous request (a scrape takes milliseconds; one
 * every 15 s keeps its connection). */
#define HTTP_MAX_CONNECTIONS 32
#define HTTP_TIMEOUT_MS 10000
/* While work is pending, how often the manager is stepped. */
#define STEP_INTERVAL_MS 5

typedef struct _Serve Serve;

struct _Serve
{
  KvTieringManager *manager;
  KvScheduleEnd    *schedule_end;
  KvMetricRegistry *registry;
  KvStats          *totals;
  GMainLoop        *loop;
  GPtrArray        *peer_tiers;    /* tiers with a "drain" action */
  GPtrArray        *streams;       /* tiers streaming events ("publish-event") */
  gint              step_queued;   /* atomic */
  guint             tick_id;       /* armed while work is pending or draining */
  gboolean          draining;
  gint64            drain_until_us;
  guint             drain_timeout_ms;
  int               exit_code;

  ToolHttpServer   *http;
};

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
            {
              guint8 *slot = kv_host_buffer_peek_slot (buffer, chunk_ids[j]);

              synthetic_fill (slot, slot_size, start + i);
              /* as a device leaves a chunk it copied in (KvHostDevice):
               * the tiers and peers this node serves reuse it */
              kv_host_buffer_set_slot_checksum (buffer, chunk_ids[j], XXH3_64bits (slot, slot_size));
            }
      kv_tiering_manager_complete_store (serve->manager, to_store, n_to_store, request, TRUE);
      do
        {
          step (serve);
          /* tiers whose jobs complete from main-loop callbacks (JavaScript) */
          while (g_main_context_iteration (NULL, FALSE))
            ;
          if (kv_tiering_manager_has_pending_work (serve->manager))
            g_usleep (500);
        }
      while (kv_tiering_manager_has_pending_work (serve->manager) && g_get_monotonic_time () < until);
    }
  kv_tiering_manager_on_request_finished (serve->manager, request);
  return TRUE;
}

/* ---- stepping ---------------------------------------------------------------- */

/* Hands the events of @source to every streaming tier. */
static void
publish_events (Serve    *serve,
                guint     source,
                KvEvent **events)
{
  for (KvEvent **e = events; *e != NULL; e++)
    {
      for (guint i = 0; i < serve->streams->len; i++)
        g_signal_emit_by_name (serve->streams->pdata[i], "publish-event", source, *e);
      kv_event_unref (*e);
    }
  g_free (events);
}

static gboolean tick (gpointer data);

/* A step; then, while work is pending (or a drain runs), the next one is
 * due in STEP_INTERVAL_MS: completions wake the loop (the manager's
 * source), but a pending answer is not always a completion. */
static void
step (Serve *serve)
{
  kv_tiering_manager_on_schedule_end (serve->manager, serve->schedule_end);
  /* The events the step made, by source (what each event costs was paid
   * where it was made: here they are only handed over). */
  if (serve->streams != NULL && serve->streams->len > 0)
    {
      publish_events (serve, KV_CHUNK_SOURCE_PRIMARY,
                      kv_primary_tier_take_events (kv_tiering_manager_get_primary (serve->manager)));
      for (guint t = 0; t < kv_tiering_manager_get_n_tiers (serve->manager); t++)
        publish_events (serve, KV_CHUNK_SOURCE_TIER + t,
                        kv_secondary_tier_take_events (kv_tiering_manager_get_tier (serve->manager, t)));
    }
  if (serve->loop != NULL && serve->tick_id == 0 &&
      (serve->draining || kv_tiering_manager_has_pending_work (serve->manager)))
    serve->tick_id = g_timeout_add (STEP_INTERVAL_MS, tick, serve);
}

/* Whether a peer tier of @config will stream events: it listens and
 * allows subscribers. */
static gboolean
config_streams_events (KvConfig *config)
{
  g_auto(GStrv) names = kv_config_get_tier_names (config);

  for (guint i = 0; names[i] != NULL; i++)
    {
      g_autofree char *section = g_strdup_printf ("tier %s", names[i]);
      g_autofree char *listen = NULL;
      g_autofree char *subscribers = NULL;

      if (g_strcmp0 (kv_config_get_tier_type (config, names[i]), "peer") != 0)
        continue;
      listen = kv_config_get_value (config, section, "listen");
      subscribers = kv_config_get_value (config, section, "max-subscribers");
      if (listen != NULL && listen[0] != '\0' && g_strcmp0 (subscribers, "0") != 0)
        return TRUE;
    }
  return FALSE;
}

/* Turns on the events of the primary tier and of every tier that has
 * them, unless the configuration says otherwise. */
static gboolean
enable_events (KvConfig  *config,
               GError   **error)
{
  KvTierRegistry *registry = kv_config_get_registry (config);
  g_auto(GStrv) names = kv_config_get_tier_names (config);
  g_autofree char *primary = kv_config_get_value (config, "primary", "events");

  if (primary == NULL && !kv_config_set_value (config, "primary", "events", "true", error))
    return FALSE;
  for (guint i = 0; names[i] != NULL; i++)
    {
      g_autofree char *section = g_strdup_printf ("tier %s", names[i]);
      g_autofree char *value = kv_config_get_value (config, section, "enable-events");
      GType type = kv_tier_registry_lookup_tier_type (registry, kv_config_get_tier_type (config, names[i]),
                                                      NULL);
      g_autoptr(GTypeClass) klass = NULL;

      if (value != NULL || type == G_TYPE_INVALID)
        continue;
      klass = g_type_class_ref (type);
      if (g_object_class_find_property (G_OBJECT_CLASS (klass), "enable-events") != NULL &&
          !kv_config_set_value (config, section, "enable-events", "true", error))
        return FALSE;
    }
  return TRUE;
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

  serve->tick_id = 0;
  if (serve->draining &&
      (!kv_tiering_manager_has_pending_work (serve->manager) ||
       g_get_monotonic_time () >= serve->drain_until_us))
    {
      if (kv_tiering_manager_has_pending_work (serve->manager))
        g_printerr ("kvtier serve: drain timed out after %u ms; shutting down\n",
                    serve->drain_timeout_ms);
      g_main_loop_quit (serve->loop);
      return G_SOURCE_REMOVE;
    }
  step (serve);
  return G_SOURCE_REMOVE;
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
  step (serve);
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

static gboolean
start_http (Serve       *serve,
            const char  *address,
            GError     **error)
{
  SoupServer *soup;

  serve->http = tool_http_server_new ("kvtier serve: HTTP", address, "kvtier", HTTP_MAX_CONNECTIONS,
                                      HTTP_TIMEOUT_MS, error);
  if (serve->http == NULL)
    return FALSE;
  soup = tool_http_server_get_soup (serve->http);
  soup_server_add_handler (soup, "/metrics", handle_metrics, serve, NULL);
  soup_server_add_handler (soup, "/health", handle_health, serve, NULL);
  return TRUE;
}

/* The soft descriptor limit up to the hard one: each peer and HTTP
 * connection is a descriptor, and the default soft limit (1024) is below
 * the peer tier's max-connections. */
static void
raise_descriptor_limit (void)
{
  struct rlimit limit;

  if (getrlimit (RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max)
    {
      limit.rlim_cur = limit.rlim_max;
      if (setrlimit (RLIMIT_NOFILE, &limit) != 0)
        g_debug ("kvtier serve: cannot raise the descriptor limit to %llu",
                 (unsigned long long) limit.rlim_max);
    }
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
  g_autoptr(GSource) wakeup = NULL;
  g_autofree char *config_path = NULL;
  g_autofree char *http_option = NULL;
  const char *http_address;
  gint64 synthetic_chunks = 0, synthetic_first = 0;
  gint drain_timeout_ms = 10000;
  gboolean plugin_errors = FALSE;
  g_auto(GStrv) tier_modules = NULL;
  Serve serve = { 0 };
  guint term_id, int_id;
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
    TOOL_TIER_MODULE_OPTION (&tier_modules),
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

  raise_descriptor_limit ();
  registry = tool_load_registry (TRUE, &plugin_errors);
  if (!tool_load_tier_modules (registry, tier_modules, &error))
    {
      g_printerr ("kvtier serve: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  config = kv_config_new_from_file (registry, config_path, &error);
  if (config == NULL)
    {
      g_printerr ("kvtier serve: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  if (config_streams_events (config) && !enable_events (config, &error))
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
  serve.totals = kv_stats_new_for_registry (serve.registry);
  serve.loop = g_main_loop_new (NULL, FALSE);
  serve.peer_tiers = g_ptr_array_new ();
  serve.streams = g_ptr_array_new ();
  for (guint i = 0; i < kv_tiering_manager_get_n_tiers (serve.manager); i++)
    {
      KvSecondaryTier *tier = kv_tiering_manager_get_tier (serve.manager, i);
      guint subscribers = 0;

      if (g_signal_lookup ("publish-event", G_OBJECT_TYPE (tier)) == 0)
        continue;
      g_object_get (tier, "max-subscribers", &subscribers, NULL);
      if (subscribers > 0)
        g_ptr_array_add (serve.streams, tier);
    }
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
      if (!start_http (&serve, http_address, &error))
        {
          printf ("\n");
          g_printerr ("kvtier serve: cannot serve HTTP on %s: %s\n", http_address, error->message);
          goto out;
        }
      printf (" http=%s", tool_http_server_get_address (serve.http));
    }
  printf ("\n");
  fflush (stdout);

  wakeup = kv_tiering_manager_create_source (serve.manager);
  g_source_set_callback (wakeup, woken, &serve, NULL);
  g_source_attach (wakeup, NULL);
  term_id = g_unix_signal_add (SIGTERM, on_signal, &serve);
  int_id = g_unix_signal_add (SIGINT, on_signal, &serve);
  /* work the synthetic chunks left pending, and the first tick */
  step (&serve);

  g_main_loop_run (serve.loop);

  if (serve.tick_id != 0)
    g_source_remove (serve.tick_id);
  serve.tick_id = 0;
  g_source_remove (term_id);
  g_source_remove (int_id);
  g_source_destroy (wakeup);
  for (guint i = 0; i < kv_tiering_manager_get_n_tiers (serve.manager); i++)
    g_signal_handlers_disconnect_by_data (kv_tiering_manager_get_tier (serve.manager, i), &serve);
  g_clear_pointer (&serve.http, tool_http_server_free);
  if (!kv_tiering_manager_shutdown (serve.manager, &error))
    {
      g_printerr ("kvtier serve: shutdown: %s\n", error->message);
      serve.exit_code = TOOL_EXIT_FAILURE;
    }
  g_printerr ("kvtier serve: stopped\n");
  goto done;

out:
  serve.exit_code = TOOL_EXIT_FAILURE;
  g_clear_pointer (&serve.http, tool_http_server_free);
  kv_tiering_manager_shutdown (serve.manager, NULL);
done:
  if (serve.tick_id != 0)
    g_source_remove (serve.tick_id);
  /* steps the server threads queued before they stopped */
  while (g_idle_remove_by_data (&serve))
    ;
  g_clear_pointer (&serve.peer_tiers, g_ptr_array_unref);
  g_clear_pointer (&serve.streams, g_ptr_array_unref);
  g_clear_pointer (&serve.loop, g_main_loop_unref);
  g_clear_object (&serve.totals);
  g_clear_object (&serve.registry);
  g_clear_pointer (&serve.schedule_end, kv_schedule_end_unref);
  g_clear_object (&serve.manager);
  return serve.exit_code;
}
