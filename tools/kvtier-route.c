/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"
#include "kvtier-fleet.h"
#include "kvtier-http-server.h"
#include "kvtier-json.h"

#include <glib-unix.h>
#include <libsoup/soup.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/*
 * kvtier route --config FILE --nodes HOST:PORT,…: a router in front of a
 * fleet of `kvtier serve` nodes. It follows every node's event stream
 * (the peer plugin's KvPeerSubscriber, authenticated with the secret,
 * namespace and chunk size of FILE's peer tier) into a KvFleetIndex, and
 * answers over HTTP:
 *
 *   POST /route   {"keys": ["<hex block hash>", …], "group": 0}
 *                 or {"hash_ids": [<Mooncake block id>, …]}
 *                 → {"node": "HOST:PORT", "kv_peer": "HOST:PORT" | null,
 *                    "prefix": N, "peer_prefix": N, "computed": N,
 *                    "transfer_params": {"kv_peer": "HOST:PORT"}}
 *                 the request counts in the node's load until /finish
 *   POST /finish  {"node": "HOST:PORT"}
 *   GET  /nodes   every node: alive, keys held, load, requests routed
 *   GET  /health  "ok"
 *
 * A Mooncake block id maps to the key `kvtier bench` uses (SHA-256 of the
 * decimal id, group 0). Bodies are bounded (1 MiB, 65536 keys, JSON nested
 * at most TOOL_JSON_MAX_DEPTH deep); anything else is a 400 that says why.
 * The HTTP front is `kvtier serve`'s (ToolHttpServer): at most
 * HTTP_MAX_CONNECTIONS connections (a sixteenth of the descriptor limit
 * under a low one; a new one closes the oldest that has sent no whole
 * request), --http-timeout-ms (10 s) for each request, an accept loop
 * that backs off when descriptors run out.
 * Prints `ready http=HOST:PORT` once serving; SIGTERM or SIGINT stops it.
 */

#define MAX_BODY (1024 * 1024)
#define MAX_KEYS 65536
/* The HTTP front's bounds (ToolHttpServer): connections at most (fewer
 * under a low descriptor limit: a sixteenth of it), and the time each has
 * to send a whole request (1 MiB at most) from its start or its previous
 * answer. */
#define HTTP_MAX_CONNECTIONS 256
#define HTTP_DEFAULT_TIMEOUT_MS 10000

typedef struct
{
  KvFleetIndex  *index;
  KvFleetRouter *router;
  GPtrArray     *subscribers;
  GMainLoop     *loop;
} Route;

static void
reply_json (SoupServerMessage *msg,
            guint              status,
            JsonBuilder       *builder)
{
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autoptr(JsonNode) root = json_builder_get_root (builder);
  char *text;
  gsize len = 0;

  json_generator_set_root (generator, root);
  text = json_generator_to_data (generator, &len);
  soup_server_message_set_status (msg, status, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_TAKE, text, len);
}

static void
reply_error (SoupServerMessage *msg,
             guint              status,
             const char        *message)
{
  g_autoptr(JsonBuilder) builder = json_builder_new ();

  json_builder_begin_object (builder);
  tool_json_add_string (builder, "error", message);
  json_builder_end_object (builder);
  reply_json (msg, status, builder);
}

/* The request's JSON object, or NULL after a 400. */
static JsonObject *
read_body (SoupServerMessage  *msg,
           JsonNode          **out_root)
{
  SoupMessageBody *body = soup_server_message_get_request_body (msg);
  g_autoptr(GError) error = NULL;
  JsonNode *root;

  if (soup_server_message_get_method (msg) != SOUP_METHOD_POST)
    {
      soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
      return NULL;
    }
  if (body->length > MAX_BODY)
    {
      reply_error (msg, SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE, "the body is larger than 1 MiB");
      return NULL;
    }
  root = tool_json_parse (body->data, body->length, MAX_BODY, &error);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST,
                   error != NULL ? error->message : "the body is not a JSON object");
      g_clear_pointer (&root, json_node_unref);
      return NULL;
    }
  *out_root = root;
  return json_node_get_object (root);
}

static KvKey *
key_of_hash_id (gint64 id)
{
  g_autoptr(GChecksum) checksum = g_checksum_new (G_CHECKSUM_SHA256);
  char decimal[24];
  guint8 digest[32];
  gsize len = sizeof digest;

  g_snprintf (decimal, sizeof decimal, "%" G_GINT64_FORMAT, id);
  g_checksum_update (checksum, (const guchar *) decimal, -1);
  g_checksum_get_digest (checksum, digest, &len);
  return kv_key_new (digest, len, 0);
}

static KvKey *
key_of_hex (const char *hex,
            guint32     group)
{
  gsize len = hex != NULL ? strlen (hex) : 0;
  g_autofree guint8 *bytes = NULL;

  /* a block hash of 1 to 112 bytes, as the peer protocol carries */
  if (len == 0 || len % 2 != 0 || len > 224)
    return NULL;
  bytes = g_malloc (len / 2);
  for (gsize i = 0; i < len / 2; i++)
    {
      gint hi = g_ascii_xdigit_value (hex[2 * i]);
      gint lo = g_ascii_xdigit_value (hex[2 * i + 1]);

      if (hi < 0 || lo < 0)
        return NULL;
      bytes[i] = (guint8) (hi << 4 | lo);
    }
  return kv_key_new (bytes, len / 2, group);
}

/* The request's keys, or NULL after a 400. */
static GPtrArray *
request_keys (SoupServerMessage *msg,
              JsonObject        *object)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  gboolean by_id = json_object_has_member (object, "hash_ids");
  JsonNode *member = json_object_get_member (object, by_id ? "hash_ids" : "keys");
  gint64 group = 0;
  JsonArray *array;

  if (member == NULL || !JSON_NODE_HOLDS_ARRAY (member))
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "the body needs \"keys\" (hex block hashes) or "
                   "\"hash_ids\" (integers), an array");
      return NULL;
    }
  if (json_object_has_member (object, "group"))
    {
      JsonNode *node = json_object_get_member (object, "group");

      if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_INT64 ||
          (group = json_node_get_int (node)) < 0 || group > G_MAXUINT32)
        {
          reply_error (msg, SOUP_STATUS_BAD_REQUEST, "\"group\" is not an integer from 0 to 2^32-1");
          return NULL;
        }
    }
  array = json_node_get_array (member);
  if (json_array_get_length (array) > MAX_KEYS)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "more than 65536 keys");
      return NULL;
    }
  for (guint i = 0; i < json_array_get_length (array); i++)
    {
      JsonNode *node = json_array_get_element (array, i);
      KvKey *key = NULL;

      if (by_id && JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_INT64)
        key = key_of_hash_id (json_node_get_int (node));
      else if (!by_id && JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_STRING)
        key = key_of_hex (json_node_get_string (node), (guint32) group);
      if (key == NULL)
        {
          g_autofree char *why = g_strdup_printf ("element %u of \"%s\" is not %s", i,
                                                  by_id ? "hash_ids" : "keys",
                                                  by_id ? "an integer" : "a hex block hash of 1 to 112 bytes");

          reply_error (msg, SOUP_STATUS_BAD_REQUEST, why);
          return NULL;
        }
      g_ptr_array_add (keys, key);
    }
  return g_steal_pointer (&keys);
}

static void
handle_route (SoupServer        *server,
              SoupServerMessage *msg,
              const char        *path,
              GHashTable        *query,
              gpointer           data)
{
  Route *route = data;
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GPtrArray) keys = NULL;
  g_autoptr(KvRouteDecision) decision = NULL;
  g_autoptr(JsonBuilder) builder = NULL;
  g_autoptr(GError) error = NULL;
  JsonObject *object = read_body (msg, &root);
  const char *peer;

  if (object == NULL || (keys = request_keys (msg, object)) == NULL)
    return;
  decision = kv_fleet_router_route (route->router, (KvKey * const *) keys->pdata, keys->len, &error);
  if (decision == NULL)
    {
      reply_error (msg, SOUP_STATUS_SERVICE_UNAVAILABLE, error->message);
      return;
    }
  peer = kv_route_decision_get_peer_name (decision);
  builder = json_builder_new ();
  json_builder_begin_object (builder);
  tool_json_add_string (builder, "node", kv_route_decision_get_node_name (decision));
  json_builder_set_member_name (builder, "kv_peer");
  if (peer != NULL)
    json_builder_add_string_value (builder, peer);
  else
    json_builder_add_null_value (builder);
  tool_json_add_int (builder, "prefix", kv_route_decision_get_prefix (decision));
  tool_json_add_int (builder, "peer_prefix", kv_route_decision_get_peer_prefix (decision));
  tool_json_add_int (builder, "computed", kv_route_decision_get_n_computed (decision));
  json_builder_set_member_name (builder, "transfer_params");
  json_builder_begin_object (builder);
  if (peer != NULL)
    tool_json_add_string (builder, "kv_peer", peer);
  json_builder_end_object (builder);
  json_builder_end_object (builder);
  reply_json (msg, SOUP_STATUS_OK, builder);
}

static void
handle_finish (SoupServer        *server,
               SoupServerMessage *msg,
               const char        *path,
               GHashTable        *query,
               gpointer           data)
{
  Route *route = data;
  g_autoptr(JsonNode) root = NULL;
  JsonObject *object = read_body (msg, &root);
  const char *name;
  gint node;

  if (object == NULL)
    return;
  name = json_object_has_member (object, "node") ? json_object_get_string_member_with_default (object, "node", NULL)
                                                 : NULL;
  node = name != NULL ? kv_fleet_index_find_node (route->index, name) : -1;
  if (node < 0)
    {
      reply_error (msg, SOUP_STATUS_BAD_REQUEST, "\"node\" names no node of the fleet");
      return;
    }
  kv_fleet_router_finish (route->router, (guint) node);
  soup_server_message_set_status (msg, SOUP_STATUS_NO_CONTENT, NULL);
}

static void
handle_nodes (SoupServer        *server,
              SoupServerMessage *msg,
              const char        *path,
              GHashTable        *query,
              gpointer           data)
{
  Route *route = data;
  g_autoptr(JsonBuilder) builder = json_builder_new ();

  if (soup_server_message_get_method (msg) != SOUP_METHOD_GET)
    {
      soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
      return;
    }
  json_builder_begin_array (builder);
  for (guint id = 0; id < kv_fleet_index_get_n_nodes (route->index); id++)
    {
      g_autofree char *name = kv_fleet_index_dup_node_name (route->index, id);

      json_builder_begin_object (builder);
      tool_json_add_string (builder, "node", name);
      json_builder_set_member_name (builder, "alive");
      json_builder_add_boolean_value (builder, kv_fleet_index_is_node_alive (route->index, id));
      tool_json_add_int (builder, "keys", (gint64) kv_fleet_index_get_node_n_keys (route->index, id));
      tool_json_add_int (builder, "load", kv_fleet_router_get_load (route->router, id));
      tool_json_add_int (builder, "routed", (gint64) kv_fleet_router_get_n_routed (route->router, id));
      json_builder_end_object (builder);
    }
  json_builder_end_array (builder);
  reply_json (msg, SOUP_STATUS_OK, builder);
}

/* Before any body is read: one without a length, or over the bound, is
 * refused (a stranger does not make the router hold gigabytes). */
static void
check_headers (SoupServer        *server,
               SoupServerMessage *msg,
               const char        *path,
               GHashTable        *query,
               gpointer           data)
{
  SoupMessageHeaders *headers = soup_server_message_get_request_headers (msg);

  if (soup_server_message_get_method (msg) != SOUP_METHOD_POST)
    return;
  if (soup_message_headers_get_encoding (headers) != SOUP_ENCODING_CONTENT_LENGTH ||
      soup_message_headers_get_content_length (headers) > MAX_BODY)
    reply_error (msg, SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE,
                 "a body needs a Content-Length of at most 1 MiB");
}

static void
handle_health (SoupServer        *server,
               SoupServerMessage *msg,
               const char        *path,
               GHashTable        *query,
               gpointer           data)
{
  soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
  soup_server_message_set_response (msg, "text/plain; charset=utf-8", SOUP_MEMORY_STATIC, "ok\n", 3);
}

static gboolean
expire_tick (gpointer data)
{
  Route *route = data;

  kv_fleet_index_expire (route->index);
  return G_SOURCE_CONTINUE;
}

static gboolean
on_signal (gpointer data)
{
  g_main_loop_quit (((Route *) data)->loop);
  return G_SOURCE_CONTINUE;
}

/* The peer tier section of @config: its secret, namespace and TLS. */
static const char *
peer_section (KvConfig  *config,
              char     **out_section)
{
  g_auto(GStrv) names = kv_config_get_tier_names (config);

  for (guint i = 0; names[i] != NULL; i++)
    if (g_strcmp0 (kv_config_get_tier_type (config, names[i]), "peer") == 0)
      {
        *out_section = g_strdup_printf ("tier %s", names[i]);
        return *out_section;
      }
  return NULL;
}

int
tool_route (int    argc,
            char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(ToolHttpServer) http = NULL;
  g_autofree char *config_path = NULL;
  g_autofree char *nodes_text = NULL;
  g_autofree char *http_address = NULL;
  g_autofree char *policy_text = NULL;
  g_autofree char *section = NULL;
  g_auto(GStrv) nodes = NULL;
  gint timeout_ms = 10000;
  gint http_timeout_ms = HTTP_DEFAULT_TIMEOUT_MS;
  gboolean plugin_errors = FALSE, no_peers = FALSE;
  KvRoutePolicy policy = KV_ROUTE_POLICY_CACHE_AWARE;
  GType subscriber_type;
  Route route = { 0 };
  int status = TOOL_EXIT_OK;
  guint tick_id, term_id, int_id;
  GOptionEntry entries[] = {
    { "config", 'c', 0, G_OPTION_ARG_FILENAME, &config_path,
      "A node's configuration: its peer tier's secret, namespace and TLS, its chunk size", "FILE" },
    { "nodes", 0, 0, G_OPTION_ARG_STRING, &nodes_text, "The nodes' peer addresses", "HOST:PORT[,…]" },
    { "http", 0, 0, G_OPTION_ARG_STRING, &http_address,
      "Serve the router on HOST:PORT (default 127.0.0.1:9470; port 0: any)", "HOST:PORT" },
    { "policy", 0, 0, G_OPTION_ARG_STRING, &policy_text,
      "round-robin, least-loaded or cache-aware (the default)", "POLICY" },
    { "no-peers", 0, 0, G_OPTION_ARG_NONE, &no_peers,
      "Do not name a kv_peer: nodes compute what they do not hold", NULL },
    { "node-timeout-ms", 0, 0, G_OPTION_ARG_INT, &timeout_ms,
      "Forget a node that sent nothing for this long (default 10000)", "MS" },
    { "http-timeout-ms", 0, 0, G_OPTION_ARG_INT, &http_timeout_ms,
      "Close an HTTP connection that has not sent a whole request this long after it connected "
      "or was last answered (default 10000)", "MS" },
    { NULL }
  };

  g_log_writer_default_set_use_stderr (TRUE);
  context = g_option_context_new ("--config FILE --nodes HOST:PORT,… - route requests across a fleet");
  g_option_context_set_summary (context,
    "Follows the event streams of the `kvtier serve` nodes into a fleet index and picks, for\n"
    "each request's chunk keys, the node to run it and the peer it should fetch from\n"
    "(POST /route, /finish; GET /nodes, /health). Prints `ready http=HOST:PORT` once serving.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);
  if (argc > 1)
    return tool_usage_error (context, "unexpected argument '%s'", argv[1]);
  if (config_path == NULL || nodes_text == NULL)
    return tool_usage_error (context, "--config FILE and --nodes are required");
  if (timeout_ms < 0)
    return tool_usage_error (context, "--node-timeout-ms must not be negative");
  if (http_timeout_ms <= 0)
    return tool_usage_error (context, "--http-timeout-ms must be positive");
  if (policy_text != NULL && !kv_route_policy_from_string (policy_text, &policy, &error))
    return tool_usage_error (context, "--policy: %s", error->message);

  registry = tool_load_registry (TRUE, &plugin_errors);
  subscriber_type = g_type_from_name ("KvPeerSubscriber");
  if (subscriber_type == G_TYPE_INVALID)
    {
      g_printerr ("kvtier route: the peer plugin is not loaded (KVTIER_PLUGIN_PATH)\n");
      return TOOL_EXIT_FAILURE;
    }
  config = kv_config_new_from_file (registry, config_path, &error);
  if (config == NULL)
    {
      g_printerr ("kvtier route: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  if (peer_section (config, &section) == NULL)
    {
      g_printerr ("kvtier route: %s has no peer tier: the nodes' secret and namespace are needed\n",
                  config_path);
      return TOOL_EXIT_FAILURE;
    }

  route.index = g_object_new (KV_TYPE_FLEET_INDEX, "node-timeout-ms", (guint) timeout_ms, NULL);
  route.router = kv_fleet_router_new (route.index, policy);
  g_object_set (route.router, "use-peers", !no_peers, NULL);
  route.subscribers = g_ptr_array_new_with_free_func (g_object_unref);
  route.loop = g_main_loop_new (NULL, FALSE);

  /* The HTTP server first, before any subscriber's thread: its address
   * is parsed and bound while this is the only thread touching GIO's
   * resolver and types. */
  {
    const char *address = http_address != NULL ? http_address : "127.0.0.1:9470";
    SoupServer *soup;

    http = tool_http_server_new ("kvtier route: HTTP", address, "kvtier-route", HTTP_MAX_CONNECTIONS,
                                 (guint) http_timeout_ms, &error);
    if (http == NULL)
      {
        g_printerr ("kvtier route: cannot serve HTTP on %s: %s\n", address, error->message);
        status = TOOL_EXIT_FAILURE;
        goto out;
      }
    soup = tool_http_server_get_soup (http);
    soup_server_add_early_handler (soup, "/route", check_headers, &route, NULL);
    soup_server_add_early_handler (soup, "/finish", check_headers, &route, NULL);
    soup_server_add_handler (soup, "/route", handle_route, &route, NULL);
    soup_server_add_handler (soup, "/finish", handle_finish, &route, NULL);
    soup_server_add_handler (soup, "/nodes", handle_nodes, &route, NULL);
    soup_server_add_handler (soup, "/health", handle_health, &route, NULL);
  }

  nodes = g_strsplit (nodes_text, ",", -1);
  for (guint i = 0; nodes[i] != NULL; i++)
    {
      g_autofree char *secret = kv_config_get_value (config, section, "secret-file");
      g_autofree char *namespace_ = kv_config_get_value (config, section, "namespace");
      g_autofree char *tls = kv_config_get_value (config, section, "tls");
      g_autofree char *ca = kv_config_get_value (config, section, "tls-ca-file");
      g_autofree char *cert = kv_config_get_value (config, section, "tls-cert-file");
      g_autofree char *key = kv_config_get_value (config, section, "tls-key-file");
      GObject *subscriber;

      g_strstrip (nodes[i]);
      if (nodes[i][0] == '\0')
        continue;
      subscriber = g_initable_new (subscriber_type, NULL, &error,
                                   "address", nodes[i], "index", route.index,
                                   "secret-file", secret,
                                   "namespace", namespace_ != NULL ? namespace_ : "default",
                                   "slot-size", (guint64) kv_config_get_slot_size (config),
                                   "tls", g_strcmp0 (tls, "true") == 0,
                                   "tls-ca-file", ca, "tls-cert-file", cert, "tls-key-file", key,
                                   NULL);
      if (subscriber == NULL)
        {
          g_printerr ("kvtier route: node %s: %s\n", nodes[i], error->message);
          status = TOOL_EXIT_FAILURE;
          goto out;
        }
      g_ptr_array_add (route.subscribers, subscriber);
    }

  printf ("ready http=%s\n", tool_http_server_get_address (http));
  fflush (stdout);

  tick_id = g_timeout_add (200, expire_tick, &route);
  term_id = g_unix_signal_add (SIGTERM, on_signal, &route);
  int_id = g_unix_signal_add (SIGINT, on_signal, &route);
  g_main_loop_run (route.loop);
  g_source_remove (tick_id);
  g_source_remove (term_id);
  g_source_remove (int_id);

out:
  g_clear_pointer (&http, tool_http_server_free);
  /* the subscribers' threads stop before the index goes */
  for (guint i = 0; route.subscribers != NULL && i < route.subscribers->len; i++)
    g_object_run_dispose (route.subscribers->pdata[i]);
  g_clear_pointer (&route.subscribers, g_ptr_array_unref);
  g_clear_object (&route.router);
  g_clear_object (&route.index);
  g_clear_pointer (&route.loop, g_main_loop_unref);
  return status;
}
