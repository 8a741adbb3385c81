/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* `kvtier peer check HOST:PORT --config FILE`: connects to a peer node as
 * the configuration's peer tier would (its secret, TLS settings, namespace
 * and chunk size), one step at a time, and prints a verdict for each step:
 * the connection, TLS, the protocol's HELLO, the shared secret (both
 * proofs), the chunk size, the namespace and the peer's limits. A failed
 * step is one line with a named cause; the steps after it are "not checked".
 *
 * It speaks the handshake itself (doc/protocol.md, "Handshake") rather than
 * through the tier's client, which folds every failure into a miss: here
 * each answer of the peer is told apart. */

#include "config.h"

#include <stdio.h>

#include "kvtier-tool.h"
#include "kv-chunk-format.h"
#include "kv-peer-frame.h"
#include "kv-peer-handshake.h"

typedef enum {
  STEP_CONFIG,
  STEP_CONNECT,
  STEP_TLS,
  STEP_HELLO,
  STEP_SECRET,
  STEP_CHUNK_SIZE,
  STEP_NAMESPACE,
  STEP_LIMITS,
  N_STEPS
} Step;

static const char * const step_names[N_STEPS] = {
  "config", "connect", "tls", "protocol", "secret", "chunk-size", "namespace", "limits",
};

/* What the configuration's peer tier would connect with. */
typedef struct
{
  char            *tier_name;
  char            *secret_file;
  GBytes          *secret;
  char            *namespace_;
  guint64          chunk_size;
  guint8           digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  guint            io_timeout_ms;
  gboolean         tls;
  GTlsDatabase    *tls_database;
  GTlsCertificate *tls_certificate;
} Settings;

static void
settings_clear (Settings *s)
{
  g_free (s->tier_name);
  g_free (s->secret_file);
  g_clear_pointer (&s->secret, g_bytes_unref);
  g_free (s->namespace_);
  g_clear_object (&s->tls_database);
  g_clear_object (&s->tls_certificate);
}

typedef struct
{
  Step  reached;   /* the first step not passed (N_STEPS: all passed) */
} Report;

static void
report_ok (Report     *report,
           Step        step,
           const char *format,
           ...) G_GNUC_PRINTF (3, 4);

static void
report_ok (Report     *report,
           Step        step,
           const char *format,
           ...)
{
  g_autofree char *detail = NULL;
  va_list args;

  va_start (args, format);
  detail = g_strdup_vprintf (format, args);
  va_end (args);
  printf ("  %-11s ok    %s\n", step_names[step], detail);
}

/* The failed step: one line, "FAIL  CAUSE: what happened", then every
 * later step as not checked. */
static void
report_fail (Report     *report,
             Step        step,
             const char *cause,
             const char *format,
             ...) G_GNUC_PRINTF (4, 5);

static void
report_fail (Report     *report,
             Step        step,
             const char *cause,
             const char *format,
             ...)
{
  g_autofree char *detail = NULL;
  va_list args;

  va_start (args, format);
  detail = g_strdup_vprintf (format, args);
  va_end (args);
  printf ("  %-11s FAIL  %s: %s\n", step_names[step], cause, detail);
  for (guint i = step + 1; i < N_STEPS; i++)
    printf ("  %-11s -     not checked\n", step_names[i]);
  report->reached = step;
}

/* ---- the configuration ---------------------------------------------------- */

static gboolean
parse_bool (const char *text)
{
  return text != NULL && (g_ascii_strcasecmp (text, "true") == 0 ||
                          g_ascii_strcasecmp (text, "yes") == 0 ||
                          g_str_equal (text, "1"));
}

/* The peer tier of @config (the one named @tier_name, or the only one). */
static char *
find_peer_tier (KvConfig    *config,
                const char  *tier_name,
                GError     **error)
{
  g_auto(GStrv) names = kv_config_get_tier_names (config);
  char *found = NULL;

  for (guint i = 0; names[i] != NULL; i++)
    {
      if (tier_name != NULL && !g_str_equal (names[i], tier_name))
        continue;
      if (g_strcmp0 (kv_config_get_tier_type (config, names[i]), "peer") != 0)
        {
          if (tier_name != NULL)
            {
              g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                           "tier '%s' is of type '%s', not peer", tier_name,
                           kv_config_get_tier_type (config, names[i]));
              return NULL;
            }
          continue;
        }
      if (found != NULL)
        {
          g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                       "the configuration has several peer tiers ('%s', '%s'): choose one with --tier",
                       found, names[i]);
          g_free (found);
          return NULL;
        }
      found = g_strdup (names[i]);
    }
  if (found == NULL)
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                 tier_name != NULL ? "the configuration has no tier '%s'"
                                   : "the configuration has no peer tier%s",
                 tier_name != NULL ? tier_name : "");
  return found;
}

/* Reads what the tier would connect with; a setting the tier would refuse
 * is @error, with @cause naming it. */
static gboolean
load_settings (KvConfig     *config,
               const char   *tier_name,
               Settings     *s,
               const char  **cause,
               GError      **error)
{
  g_autofree char *section = NULL;
  g_autofree char *tls = NULL;
  g_autofree char *cert_file = NULL;
  g_autofree char *key_file = NULL;
  g_autofree char *ca_file = NULL;
  g_autofree char *timeout = NULL;

  *cause = "bad-config";
  s->tier_name = find_peer_tier (config, tier_name, error);
  if (s->tier_name == NULL)
    return FALSE;
  section = g_strdup_printf ("tier %s", s->tier_name);

  s->namespace_ = kv_config_get_value (config, section, "namespace");
  if (s->namespace_ == NULL)
    s->namespace_ = g_strdup ("default");
  s->chunk_size = kv_config_get_slot_size (config);
  kv_chunk_namespace_digest (s->namespace_, s->chunk_size, s->digest);

  timeout = kv_config_get_value (config, section, "io-timeout-ms");
  s->io_timeout_ms = timeout != NULL ? (guint) g_ascii_strtoull (timeout, NULL, 10) : 2000;
  if (s->io_timeout_ms == 0)
    s->io_timeout_ms = 2000;

  s->secret_file = kv_config_get_value (config, section, "secret-file");
  if (s->secret_file == NULL || s->secret_file[0] == '\0')
    {
      *cause = "no-secret";
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   "[%s] sets no secret-file: the shared secret of the nodes", section);
      return FALSE;
    }
  s->secret = kv_peer_secret_load (s->secret_file, error);
  if (s->secret == NULL)
    {
      *cause = "bad-secret-file";
      return FALSE;
    }

  tls = kv_config_get_value (config, section, "tls");
  s->tls = parse_bool (tls);
  if (!s->tls)
    return TRUE;
  *cause = "bad-tls-config";
  cert_file = kv_config_get_value (config, section, "tls-cert-file");
  key_file = kv_config_get_value (config, section, "tls-key-file");
  ca_file = kv_config_get_value (config, section, "tls-ca-file");
  if ((cert_file == NULL) != (key_file == NULL))
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   "[%s] needs both tls-cert-file and tls-key-file", section);
      return FALSE;
    }
  if (cert_file != NULL)
    {
      s->tls_certificate = g_tls_certificate_new_from_files (cert_file, key_file, error);
      if (s->tls_certificate == NULL)
        {
          g_prefix_error (error, "tls-cert-file %s: ", cert_file);
          return FALSE;
        }
    }
  if (ca_file != NULL)
    {
      s->tls_database = g_tls_file_database_new (ca_file, error);
      if (s->tls_database == NULL)
        {
          g_prefix_error (error, "tls-ca-file %s: ", ca_file);
          return FALSE;
        }
    }
  return TRUE;
}

/* ---- the connection --------------------------------------------------------- */

static gboolean
read_exact (GIOStream     *stream,
            void          *buffer,
            gsize          len,
            GError       **error)
{
  gsize n = 0;

  if (!g_input_stream_read_all (g_io_stream_get_input_stream (stream), buffer, len, &n, NULL, error))
    return FALSE;
  if (n < len)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                           n == 0 ? "the peer closed the connection"
                                  : "the peer closed the connection in the middle of a frame");
      return FALSE;
    }
  return TRUE;
}

/* Reads one frame of at most @max_body bytes (or an ERROR frame). */
static gboolean
read_message (GIOStream      *stream,
              guint32         max_body,
              GByteArray     *buf,
              KvPeerMessage  *message,
              GError        **error)
{
  guint8 header_bytes[KV_PEER_FRAME_HEADER_SIZE];
  KvPeerFrameHeader header;

  if (!read_exact (stream, header_bytes, sizeof header_bytes, error))
    return FALSE;
  if (!kv_peer_frame_header_parse (header_bytes, MAX (max_body, 6 + KV_PEER_MAX_ERROR_MESSAGE),
                                   &header, error))
    return FALSE;
  if (header.type != KV_PEER_FRAME_ERROR && header.body_len > max_body)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "a %s frame of %u bytes", kv_peer_frame_type_to_string (header.type),
                   header.body_len);
      return FALSE;
    }
  g_byte_array_set_size (buf, header.body_len);
  if (header.body_len > 0 && !read_exact (stream, buf->data, header.body_len, error))
    return FALSE;
  return kv_peer_message_parse (header.type, buf->data, header.body_len, 0, message, error);
}

static gboolean
write_all (GIOStream   *stream,
           GByteArray  *buf,
           GError     **error)
{
  return g_output_stream_write_all (g_io_stream_get_output_stream (stream), buf->data, buf->len,
                                    NULL, NULL, error);
}

static const char *
io_cause (const GError *error)
{
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT))
    return "timeout";
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED) ||
      g_error_matches (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE) ||
      g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED))
    return "closed";
  return "io-error";
}

/* A refusal of the peer (an ERROR frame) during step @step. */
static void
report_refusal (Report        *report,
                Step           step,
                KvPeerMessage *message,
                const Settings *s)
{
  const char *why = message->error_message != NULL ? message->error_message : "";

  switch (message->error_code)
    {
    case KV_PEER_ERROR_AUTH_FAILED:
      report_fail (report, STEP_SECRET, "wrong-secret",
                   "the peer refused this node's proof: secret-file %s is not the peer's secret",
                   s->secret_file);
      break;
    case KV_PEER_ERROR_CHUNK_SIZE:
      report_ok (report, STEP_SECRET, "the peer accepted this node's proof of the secret of %s",
                 s->secret_file);
      report_fail (report, STEP_CHUNK_SIZE, "chunk-size-mismatch", "the peer says: %s", why);
      break;
    case KV_PEER_ERROR_NAMESPACE:
      report_ok (report, STEP_SECRET, "the peer accepted this node's proof of the secret of %s",
                 s->secret_file);
      report_ok (report, STEP_CHUNK_SIZE, "%" G_GUINT64_FORMAT " bytes", s->chunk_size);
      report_fail (report, STEP_NAMESPACE, "namespace-mismatch",
                   "the peer serves another namespace than '%s' (the peer says: %s)",
                   s->namespace_, why);
      break;
    case KV_PEER_ERROR_VERSION:
      report_fail (report, STEP_HELLO, "version-mismatch", "the peer says: %s", why);
      break;
    case KV_PEER_ERROR_BUSY:
      report_fail (report, step, "busy", "the peer refused: %s", why);
      break;
    case KV_PEER_ERROR_LIMIT:
      report_fail (report, step, "limit", "the peer refused: %s", why);
      break;
    default:
      report_fail (report, step, "refused", "the peer refused: %s (code %u)", why,
                   message->error_code);
      break;
    }
}

/* HELLO and AUTH on @stream, each answer told apart. */
static void
check_handshake (Report         *report,
                 GIOStream      *stream,
                 const Settings *s)
{
  g_autoptr(GByteArray) buf = g_byte_array_new ();
  g_auto(KvPeerMessage) hello = { 0 };
  g_auto(KvPeerMessage) auth = { 0 };
  g_autoptr(GError) error = NULL;
  guint8 client_nonce[KV_PEER_NONCE_LEN];
  guint8 params[KV_PEER_AUTH_PARAMS_SIZE];
  guint8 mac[KV_PEER_MAC_LEN];

  if (!kv_peer_random_nonce (client_nonce, &error))
    {
      report_fail (report, STEP_HELLO, "no-randomness", "%s", error->message);
      return;
    }
  kv_peer_frame_append_hello (buf, client_nonce);
  if (!write_all (stream, buf, &error) ||
      !read_message (stream, KV_PEER_HELLO_BODY_SIZE, buf, &hello, &error))
    {
      if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED) && !s->tls)
        report_fail (report, STEP_HELLO, "closed",
                     "the peer closed the connection without a HELLO: not a kvtier peer port, "
                     "or the peer expects TLS (tls = false here)");
      else if (g_error_matches (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME) ||
               error->domain == KV_PEER_FRAME_ERROR_DOMAIN)
        report_fail (report, STEP_HELLO, "not-kvtier",
                     "the answer to HELLO is not a kvtier peer frame: %s", error->message);
      else
        report_fail (report, STEP_HELLO, io_cause (error), "waiting for the peer's HELLO: %s",
                     error->message);
      return;
    }
  if (hello.type == KV_PEER_FRAME_ERROR)
    {
      report_refusal (report, STEP_HELLO, &hello, s);
      return;
    }
  if (hello.type != KV_PEER_FRAME_HELLO)
    {
      report_fail (report, STEP_HELLO, "not-kvtier", "the peer answered HELLO with a %s frame",
                   kv_peer_frame_type_to_string (hello.type));
      return;
    }
  if (hello.version != KV_PEER_PROTOCOL_VERSION)
    {
      report_fail (report, STEP_HELLO, "version-mismatch",
                   "the peer speaks protocol version %u, this node %u", hello.version,
                   KV_PEER_PROTOCOL_VERSION);
      return;
    }
  report_ok (report, STEP_HELLO, "kvtier peer protocol version %u", hello.version);

  kv_peer_frame_auth_params (params, s->chunk_size, s->digest, 0, 0);
  kv_peer_handshake_mac (s->secret, KV_PEER_ROLE_CLIENT, client_nonce, hello.nonce, params, mac);
  g_byte_array_set_size (buf, 0);
  kv_peer_frame_append_auth (buf, params, mac);
  if (!write_all (stream, buf, &error) ||
      !read_message (stream, KV_PEER_AUTH_BODY_SIZE, buf, &auth, &error))
    {
      report_fail (report, STEP_SECRET,
                   error->domain == KV_PEER_FRAME_ERROR_DOMAIN ? "bad-answer" : io_cause (error),
                   "waiting for the peer's AUTH: %s", error->message);
      return;
    }
  if (auth.type == KV_PEER_FRAME_ERROR)
    {
      report_refusal (report, STEP_SECRET, &auth, s);
      return;
    }
  if (auth.type != KV_PEER_FRAME_AUTH)
    {
      report_fail (report, STEP_SECRET, "bad-answer", "the peer answered AUTH with a %s frame",
                   kv_peer_frame_type_to_string (auth.type));
      return;
    }
  /* the peer accepted ours; now its proof, over its own parameters */
  if (!kv_peer_handshake_verify (s->secret, KV_PEER_ROLE_SERVER, client_nonce, hello.nonce,
                                 buf->data, auth.mac))
    {
      report_fail (report, STEP_SECRET, "peer-unproven",
                   "the peer accepted this node but could not prove it holds the secret of %s",
                   s->secret_file);
      return;
    }
  report_ok (report, STEP_SECRET, "both nodes proved they hold the secret of %s", s->secret_file);
  if (auth.block_size != s->chunk_size)
    {
      report_fail (report, STEP_CHUNK_SIZE, "chunk-size-mismatch",
                   "the peer's chunks are %" G_GUINT64_FORMAT " bytes, this node's %" G_GUINT64_FORMAT,
                   auth.block_size, s->chunk_size);
      return;
    }
  report_ok (report, STEP_CHUNK_SIZE, "%" G_GUINT64_FORMAT " bytes", s->chunk_size);
  if (!kv_peer_constant_time_equal (auth.namespace_digest, s->digest, sizeof s->digest))
    {
      report_fail (report, STEP_NAMESPACE, "namespace-mismatch",
                   "the peer serves another namespace than '%s'", s->namespace_);
      return;
    }
  report_ok (report, STEP_NAMESPACE, "'%s'", s->namespace_);
  if (auth.max_keys == 0 || auth.max_inflight_bytes < s->chunk_size)
    {
      report_fail (report, STEP_LIMITS, "limit",
                   "the peer allows %u keys and %" G_GUINT64_FORMAT " bytes per request: "
                   "not one chunk", auth.max_keys, auth.max_inflight_bytes);
      return;
    }
  {
    g_autofree char *inflight = tool_format_size (auth.max_inflight_bytes);

    report_ok (report, STEP_LIMITS, "up to %u keys and %s per request", auth.max_keys, inflight);
  }
  report->reached = N_STEPS;
}

static const char *
connect_cause (const GError *error)
{
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED))
    return "refused";
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT))
    return "timeout";
  if (g_error_matches (error, G_RESOLVER_ERROR, G_RESOLVER_ERROR_NOT_FOUND) ||
      g_error_matches (error, G_RESOLVER_ERROR, G_RESOLVER_ERROR_TEMPORARY_FAILURE))
    return "unknown-host";
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_HOST_UNREACHABLE) ||
      g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NETWORK_UNREACHABLE))
    return "unreachable";
  return "connect-failed";
}

static void
check_peer (Report         *report,
            const char     *address,
            const Settings *s)
{
  g_autoptr(GSocketClient) client = g_socket_client_new ();
  g_autoptr(GSocketConnectable) connectable = NULL;
  g_autoptr(GSocketConnection) connection = NULL;
  g_autoptr(GIOStream) tls = NULL;
  g_autoptr(GError) error = NULL;
  GIOStream *stream;

  connectable = g_network_address_parse (address, 0, &error);
  if (connectable == NULL)
    {
      report_fail (report, STEP_CONNECT, "bad-address", "%s", error->message);
      return;
    }
  /* the socket's timeout bounds the connect and every read and write */
  g_socket_client_set_timeout (client, MAX (1, (s->io_timeout_ms + 999) / 1000));
  /* as the peer tier connects: no system proxy in between */
  g_socket_client_set_enable_proxy (client, FALSE);
  connection = g_socket_client_connect (client, connectable, NULL, &error);
  if (connection == NULL)
    {
      report_fail (report, STEP_CONNECT, connect_cause (error), "%s: %s", address, error->message);
      return;
    }
  {
    g_autoptr(GSocketAddress) remote = g_socket_connection_get_remote_address (connection, NULL);
    g_autofree char *remote_text = remote != NULL
      ? g_socket_connectable_to_string (G_SOCKET_CONNECTABLE (remote)) : g_strdup (address);

    report_ok (report, STEP_CONNECT, "TCP connection to %s", remote_text);
  }

  if (s->tls)
    {
      tls = g_tls_client_connection_new (G_IO_STREAM (connection), connectable, &error);
      if (tls == NULL)
        {
          report_fail (report, STEP_TLS, "tls-unavailable", "%s", error->message);
          return;
        }
      if (s->tls_database != NULL)
        g_tls_connection_set_database (G_TLS_CONNECTION (tls), s->tls_database);
      if (s->tls_certificate != NULL)
        g_tls_connection_set_certificate (G_TLS_CONNECTION (tls), s->tls_certificate);
      if (!g_tls_connection_handshake (G_TLS_CONNECTION (tls), NULL, &error))
        {
          const char *cause = "tls-failed";

          if (g_error_matches (error, G_TLS_ERROR, G_TLS_ERROR_BAD_CERTIFICATE))
            cause = "untrusted-certificate";
          else if (g_error_matches (error, G_TLS_ERROR, G_TLS_ERROR_NOT_TLS))
            cause = "not-tls";
          else if (g_error_matches (error, G_TLS_ERROR, G_TLS_ERROR_CERTIFICATE_REQUIRED))
            cause = "certificate-required";
          report_fail (report, STEP_TLS, cause, "%s", error->message);
          return;
        }
      report_ok (report, STEP_TLS, "%s", s->tls_certificate != NULL
                 ? "handshake done, peer certificate trusted, this node's certificate sent"
                 : "handshake done, peer certificate trusted");
      stream = tls;
    }
  else
    {
      report_ok (report, STEP_TLS, "not used (tls = false)");
      stream = G_IO_STREAM (connection);
    }

  check_handshake (report, stream, s);
  g_io_stream_close (stream, NULL, NULL);
}

int
tool_peer (int    argc,
           char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autofree char *config_path = NULL;
  g_autofree char *tier_name = NULL;
  g_auto(GStrv) tier_modules = NULL;
  gboolean plugin_errors = FALSE;
  Settings settings = { 0 };
  Report report = { .reached = STEP_CONFIG };
  const char *cause = NULL;
  GOptionEntry entries[] = {
    { "config", 'c', 0, G_OPTION_ARG_FILENAME, &config_path,
      "The configuration whose peer tier connects (secret, TLS, namespace, chunk size)", "FILE" },
    { "tier", 't', 0, G_OPTION_ARG_STRING, &tier_name,
      "The peer tier of FILE to check as (default: its only peer tier)", "NAME" },
    TOOL_TIER_MODULE_OPTION (&tier_modules),
    { NULL }
  };

  context = g_option_context_new ("check HOST:PORT --config FILE - check that this node can use a peer");
  g_option_context_set_summary (context,
    "Connects to the peer node at HOST:PORT as the peer tier of FILE would, and prints a\n"
    "verdict for each step: connect, tls, protocol (HELLO), secret (both nodes' proofs),\n"
    "chunk-size, namespace and limits. A failed step prints FAIL, a named cause (refused,\n"
    "timeout, not-tls, untrusted-certificate, wrong-secret, chunk-size-mismatch,\n"
    "namespace-mismatch, …) and what happened; the steps after it are not checked.\n"
    "Exits with 0 when every step passed, 1 when one failed.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);
  if (argc < 2)
    return tool_usage_error (context, "missing subcommand (peer check HOST:PORT --config FILE)");
  if (!g_str_equal (argv[1], "check"))
    return tool_usage_error (context, "unknown subcommand '%s' (peer check HOST:PORT --config FILE)",
                             argv[1]);
  if (argc < 3)
    return tool_usage_error (context, "missing HOST:PORT (peer check HOST:PORT --config FILE)");
  if (argc > 3)
    return tool_usage_error (context, "unexpected argument '%s'", argv[3]);
  if (config_path == NULL)
    return tool_usage_error (context, "--config FILE is required");

  registry = tool_load_registry (TRUE, &plugin_errors);
  if (!tool_load_tier_modules (registry, tier_modules, &error))
    {
      g_printerr ("kvtier peer: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  config = kv_config_new_from_file (registry, config_path, &error);
  if (config == NULL)
    {
      g_printerr ("kvtier peer: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }

  printf ("peer %s, as %s of %s\n", argv[2],
          tier_name != NULL ? tier_name : "the peer tier", config_path);
  if (!load_settings (config, tier_name, &settings, &cause, &error))
    report_fail (&report, STEP_CONFIG, cause, "%s", error->message);
  else
    {
      report_ok (&report, STEP_CONFIG, "[tier %s]: secret-file %s, namespace '%s', "
                 "%" G_GUINT64_FORMAT "-byte chunks, tls %s", settings.tier_name,
                 settings.secret_file, settings.namespace_, settings.chunk_size,
                 settings.tls ? "on" : "off");
      check_peer (&report, argv[2], &settings);
    }
  settings_clear (&settings);
  if (report.reached == N_STEPS)
    {
      printf ("peer %s: usable\n", argv[2]);
      return TOOL_EXIT_OK;
    }
  printf ("peer %s: not usable (%s)\n", argv[2], step_names[report.reached]);
  return TOOL_EXIT_FAILURE;
}
