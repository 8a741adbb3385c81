/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-peer-harness.h"

#include "kv-chunk-format.h"
#include "kv-peer-handshake.h"

#include <glib/gstdio.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>

static char *dir;
static char *secret_path;
static GPtrArray *files;   /* paths to remove */
static GPtrArray *nodes;   /* PeerNode still running, not owned */

void
harness_init (void)
{
  g_autoptr(GError) error = NULL;
  guint8 raw[32];
  g_autofree char *hex = NULL;

  dir = g_dir_make_tmp ("kvtier-peer-XXXXXX", &error);
  g_assert_no_error (error);
  files = g_ptr_array_new_with_free_func (g_free);
  nodes = g_ptr_array_new ();
  for (guint i = 0; i < sizeof raw; i++)
    raw[i] = g_random_int_range (0, 256);
  hex = g_compute_checksum_for_data (G_CHECKSUM_SHA256, raw, sizeof raw);
  secret_path = harness_write_file ("secret", hex, 0600);
}

void
harness_cleanup (void)
{
  while (nodes->len > 0)
    peer_node_free (nodes->pdata[0]);
  for (guint i = 0; i < files->len; i++)
    g_remove (files->pdata[i]);
  g_rmdir (dir);
  g_clear_pointer (&files, g_ptr_array_unref);
  g_clear_pointer (&nodes, g_ptr_array_unref);
  g_clear_pointer (&dir, g_free);
  g_clear_pointer (&secret_path, g_free);
}

const char *
harness_dir (void)
{
  return dir;
}

const char *
harness_secret_path (void)
{
  return secret_path;
}

char *
harness_write_file (const char *name,
                    const char *contents,
                    int         mode)
{
  g_autoptr(GError) error = NULL;
  char *path = g_build_filename (dir, name, NULL);

  g_file_set_contents_full (path, contents, -1, G_FILE_SET_CONTENTS_CONSISTENT, mode, &error);
  g_assert_no_error (error);
  g_assert_cmpint (g_chmod (path, mode), ==, 0);
  g_ptr_array_add (files, g_strdup (path));
  return path;
}

static rlim_t child_nofile;

/* Nodes started from now on run under a descriptor limit of @limit (soft
 * and hard: `kvtier serve` cannot raise it); 0: the test's own. */
void
harness_set_child_nofile (guint limit)
{
  child_nofile = limit;
}

/* The child dies with the test process, whatever ends it. */
void
harness_child_setup (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (child_nofile > 0)
    {
      struct rlimit limit = { child_nofile, child_nofile };

      setrlimit (RLIMIT_NOFILE, &limit);
    }
}

static char *
section_with_defaults (const char *settings)
{
  GString *s = g_string_new (settings);

  if (strstr (settings, "secret-file") == NULL)
    g_string_append_printf (s, "\nsecret-file = %s", secret_path);
  if (strstr (settings, "namespace") == NULL)
    g_string_append (s, "\nnamespace = test-model/fp16/tp1");
  g_string_append_c (s, '\n');
  return g_string_free (s, FALSE);
}

PeerNode *
peer_node_start (const char *tier_settings,
                 guint       slot_kib,
                 guint64     first_chunk,
                 guint64     n_chunks)
{
  return peer_node_start_with (tier_settings, NULL, slot_kib, MAX (n_chunks, 48) + 16,
                               first_chunk, n_chunks);
}

/* A node whose primary tier has @n_slots slots, with @more_sections (other
 * tiers, after the peer tier) in its configuration. */
PeerNode *
peer_node_start_with (const char *tier_settings,
                      const char *more_sections,
                      guint       slot_kib,
                      guint       n_slots,
                      guint64     first_chunk,
                      guint64     n_chunks)
{
  static guint serial;
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autoptr(GDataInputStream) out = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *section = section_with_defaults (tier_settings);
  g_autofree char *config = NULL;
  g_autofree char *name = g_strdup_printf ("node-%u.conf", ++serial);
  g_autofree char *first = g_strdup_printf ("%" G_GUINT64_FORMAT, first_chunk);
  g_autofree char *count = g_strdup_printf ("%" G_GUINT64_FORMAT, n_chunks);
  g_autofree char *line = NULL;
  g_auto(GStrv) fields = NULL;
  const char *exe = g_getenv ("KVTIER_EXE");
  PeerNode *node = g_new0 (PeerNode, 1);

  g_assert_nonnull (exe);
  config = g_strdup_printf ("[primary]\nsize = %" G_GUINT64_FORMAT "KiB\nslot-size = %uKiB\n\n"
                            "[tier peer]\ntype = peer\nlisten = 127.0.0.1:0\n%s\n%s",
                            (guint64) n_slots * slot_kib, slot_kib, section,
                            more_sections != NULL ? more_sections : "");
  node->config_path = harness_write_file (name, config, 0600);
  g_subprocess_launcher_set_child_setup (launcher, harness_child_setup, NULL, NULL);
  node->process = g_subprocess_launcher_spawn (launcher, &error, exe, "serve",
                                               "--config", node->config_path,
                                               "--http", "127.0.0.1:0",
                                               "--drain-timeout-ms", "3000",
                                               "--synthetic-first", first,
                                               "--synthetic-chunks", count, NULL);
  g_assert_no_error (error);
  g_ptr_array_add (nodes, node);

  out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (node->process));
  line = g_data_input_stream_read_line_utf8 (out, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (line);
  fields = g_strsplit (line, " ", -1);
  g_assert_cmpstr (fields[0], ==, "ready");
  for (guint i = 1; fields[i] != NULL; i++)
    if (g_str_has_prefix (fields[i], "peer="))
      node->peer_address = g_strdup (fields[i] + 5);
    else if (g_str_has_prefix (fields[i], "http="))
      node->http_address = g_strdup (fields[i] + 5);
  g_assert_nonnull (node->peer_address);
  g_assert_nonnull (node->http_address);
  return node;
}

void
peer_node_signal (PeerNode *node,
                  int       signum)
{
  g_autofree char *stat_path = g_strdup_printf ("/proc/%s/stat",
                                                g_subprocess_get_identifier (node->process));
  gint64 until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;

  g_subprocess_send_signal (node->process, signum);
  /* A stop takes effect when the kernel next schedules each thread: wait
   * until every one of them is stopped. */
  while (signum == SIGSTOP && g_get_monotonic_time () < until)
    {
      g_autofree char *stat = NULL;
      const char *state;

      g_assert_true (g_file_get_contents (stat_path, &stat, NULL, NULL));
      state = strrchr (stat, ')');
      if (state != NULL && (state[2] == 'T' || state[2] == 't'))
        {
          g_usleep (20 * 1000);
          return;
        }
      g_usleep (1000);
    }
}

static void
waited (GObject      *source,
        GAsyncResult *result,
        gpointer      data)
{
  gboolean *done = data;

  g_subprocess_wait_finish (G_SUBPROCESS (source), result, NULL);
  *done = TRUE;
}

/* SIGTERM, then the exit status within @timeout_ms; -1 if it did not exit
 * (it is killed then). */
int
peer_node_terminate (PeerNode *node,
                     guint     timeout_ms)
{
  gint64 until = g_get_monotonic_time () + timeout_ms * G_TIME_SPAN_MILLISECOND;
  gboolean done = FALSE;

  g_subprocess_send_signal (node->process, SIGTERM);
  g_subprocess_wait_async (node->process, NULL, waited, &done);
  while (!done && g_get_monotonic_time () < until)
    g_main_context_iteration (NULL, FALSE) || (g_usleep (2000), TRUE);
  if (!done)
    {
      g_subprocess_force_exit (node->process);
      while (!done)
        g_main_context_iteration (NULL, TRUE);
      return -1;
    }
  return g_subprocess_get_if_exited (node->process) ? g_subprocess_get_exit_status (node->process) : -1;
}

void
peer_node_free (PeerNode *node)
{
  if (node == NULL)
    return;
  g_ptr_array_remove (nodes, node);
  /* by PID, never by name */
  g_subprocess_force_exit (node->process);
  g_subprocess_wait (node->process, NULL, NULL);
  g_object_unref (node->process);
  g_free (node->peer_address);
  g_free (node->http_address);
  g_free (node->config_path);
  g_free (node);
}

/* ---- synthetic chunks (as kvtier serve makes them) ----------------------------- */

KvKey *
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

void
synthetic_fill (guint8  *slot,
                gsize    size,
                guint64  index)
{
  for (gsize w = 0; w < size / 8; w++)
    {
      guint64 v = GUINT64_TO_LE (((index << 32) | w) * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15));

      memcpy (slot + w * 8, &v, 8);
    }
}

/* ---- the client node (this process) ------------------------------------------ */

KvTieringManager *
client_manager_new (const char  *tier_settings,
                    guint        slot_kib,
                    GError     **error)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(KvConfig) config = NULL;
  g_autofree char *section = section_with_defaults (tier_settings);
  g_autofree char *data = NULL;

  g_assert_true (kv_tier_registry_load_plugins (registry, NULL));
  data = g_strdup_printf ("[primary]\nsize = %uKiB\nslot-size = %uKiB\n\n"
                          "[tier peer]\ntype = peer\n%s", 128 * slot_kib, slot_kib, section);
  config = kv_config_new_from_data (registry, data, -1, "client", error);
  if (config == NULL)
    return NULL;
  return kv_config_create_manager (config, error);
}

void
client_step (KvTieringManager *manager)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (manager, end);
}

/* Looks @key up, stepping, until the answer is HIT or MISS. */
KvLookupResult
client_lookup_settled (KvTieringManager *manager,
                       KvRequest        *request,
                       KvKey            *key,
                       guint             timeout_ms)
{
  gint64 until = g_get_monotonic_time () + timeout_ms * G_TIME_SPAN_MILLISECOND;

  for (;;)
    {
      KvLookupResult result = kv_tiering_manager_lookup (manager, key, request);

      if (result == KV_LOOKUP_RESULT_HIT || result == KV_LOOKUP_RESULT_MISS ||
          g_get_monotonic_time () > until)
        return result;
      client_step (manager);
      g_usleep (500);
    }
}

gboolean
client_chunk_is (KvTieringManager *manager,
                 KvRequest        *request,
                 KvKey            *key,
                 guint64           index)
{
  KvHostBuffer *buffer = kv_primary_tier_get_buffer (kv_tiering_manager_get_primary (manager));
  gsize size = kv_host_buffer_get_slot_size (buffer);
  g_autofree guint8 *expected = g_malloc (size);
  g_autofree guint32 *ids = NULL;
  g_autoptr(GError) error = NULL;
  guint n = 0;
  gboolean equal;

  ids = kv_tiering_manager_prepare_load (manager, &key, 1, request, &n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 1);
  synthetic_fill (expected, size, index);
  equal = memcmp (kv_host_buffer_peek_slot (buffer, ids[0]), expected, size) == 0;
  if (equal)
    {
      guint64 carried = 0;

      /* a fetched chunk keeps the checksum it was verified with, so the
       * tiers that store it next need not hash it again */
      g_assert_true (kv_host_buffer_get_slot_checksum (buffer, ids[0], &carried));
      g_assert_cmphex (carried, ==, kv_chunk_checksum (expected, size));
    }
  kv_tiering_manager_complete_load (manager, &key, 1, request);
  return equal;
}

/* ---- /metrics ------------------------------------------------------------------ */

/* Scrapes a node's /metrics with curl and checks that every line is
 * Prometheus text format 0.0.4: a HELP or TYPE comment or a sample. */
char *
scrape_metrics (PeerNode *node)
{
  g_autofree char *url = g_strdup_printf ("http://%s/metrics", node->http_address);
  const char *argv[] = { "curl", "-sSf", "--max-time", "5", url, NULL };
  g_autoptr(GError) error = NULL;
  g_autoptr(GRegex) help = NULL, type = NULL, sample = NULL;
  g_auto(GStrv) lines = NULL;
  char *out = NULL;
  int status = 0;

  g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, NULL, &status, &error);
  g_assert_no_error (error);
  g_assert_true (g_spawn_check_wait_status (status, NULL));

  help = g_regex_new ("^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*$", 0, 0, NULL);
  type = g_regex_new ("^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|summary|untyped)$",
                      0, 0, NULL);
  sample = g_regex_new ("^[a-zA-Z_:][a-zA-Z0-9_:]*"
                        "(\\{([a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\\n]|\\\\[\\\\\"n])*\""
                        "(,[a-zA-Z_][a-zA-Z0-9_]*=\"([^\"\\\\\\n]|\\\\[\\\\\"n])*\")*,?)?\\})?"
                        " ([-+]?[0-9]*\\.?[0-9]+([eE][-+]?[0-9]+)?|NaN|[-+]Inf)( -?[0-9]+)?$",
                        0, 0, NULL);
  g_assert_true (g_str_has_suffix (out, "\n"));
  lines = g_strsplit (out, "\n", -1);
  for (guint i = 0; lines[i] != NULL && lines[i + 1] != NULL; i++)
    {
      const char *line = lines[i];

      if (g_regex_match (help, line, 0, NULL) || g_regex_match (type, line, 0, NULL) ||
          g_regex_match (sample, line, 0, NULL))
        continue;
      g_error ("line %u of /metrics is not Prometheus 0.0.4 text: %s", i + 1, line);
    }
  return out;
}

/* The sum of the samples of @name (any labels). */
gdouble
metric_sum (const char *text,
            const char *name)
{
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);
  gsize len = strlen (name);
  gdouble sum = 0;

  for (guint i = 0; lines[i] != NULL; i++)
    if (strncmp (lines[i], name, len) == 0 && (lines[i][len] == '{' || lines[i][len] == ' '))
      sum += g_ascii_strtod (strrchr (lines[i], ' ') + 1, NULL);
  return sum;
}

/* Polls /metrics until the samples of @name add up to @at_least (the
 * counters of a closed connection are counted on the node's thread, a
 * moment later), 10 s at most; returns the last sum. */
gdouble
harness_wait_metric (PeerNode   *node,
                     const char *name,
                     gdouble     at_least)
{
  gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  gdouble value = 0;

  for (;;)
    {
      g_autofree char *text = scrape_metrics (node);

      value = metric_sum (text, name);
      if (value >= at_least || g_get_monotonic_time () > until)
        return value;
      g_usleep (20 * 1000);
    }
}

void
harness_stream_send (GIOStream  *stream,
                     const void *data,
                     gsize       len)
{
  g_autoptr(GError) error = NULL;

  g_output_stream_write_all (g_io_stream_get_output_stream (stream), data, len, NULL, NULL, &error);
  g_assert_no_error (error);
}

/* Reads one frame into @message; FALSE at the end of the stream (or a
 * reset). A DATA frame is parsed up to its payload, which is read and
 * dropped. */
gboolean
harness_stream_read_frame (GIOStream     *stream,
                           KvPeerMessage *message)
{
  GInputStream *in = g_io_stream_get_input_stream (stream);
  guint8 header[KV_PEER_FRAME_HEADER_SIZE];
  g_autofree guint8 *body = NULL;
  KvPeerFrameHeader parsed;
  g_autoptr(GError) error = NULL;
  gsize n = 0;

  if (!g_input_stream_read_all (in, header, sizeof header, &n, NULL, &error) || n < sizeof header)
    {
      /* a reset is the end too; a timeout is a test failure */
      g_assert_false (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
      return FALSE;
    }
  g_assert_true (kv_peer_frame_header_parse (header, 64 << 20, &parsed, NULL));
  body = g_malloc (MAX (parsed.body_len, 1));
  g_assert_true (g_input_stream_read_all (in, body, parsed.body_len, &n, NULL, NULL));
  g_assert_cmpuint (n, ==, parsed.body_len);
  if (parsed.type == KV_PEER_FRAME_DATA)
    return kv_peer_message_parse (parsed.type, body, KV_PEER_DATA_PREFIX_SIZE, 0, message, NULL);
  g_assert_true (kv_peer_message_parse (parsed.type, body, parsed.body_len, 8192, message, NULL));
  return TRUE;
}

/* Sends HELLO, then AUTH with @secret (NULL: the nodes' own),
 * @namespace_ and @block_size; returns the server's answer to AUTH (AUTH
 * or ERROR) in @answer, or FALSE if it closed. */
gboolean
harness_stream_handshake (GIOStream     *stream,
                          GBytes        *secret,
                          const char    *namespace_,
                          gsize          block_size,
                          KvPeerMessage *answer)
{
  g_autoptr(GBytes) own_secret = NULL;
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_auto(KvPeerMessage) hello = { 0 };
  guint8 nonce[KV_PEER_NONCE_LEN], digest[32], params[KV_PEER_AUTH_PARAMS_SIZE], mac[KV_PEER_MAC_LEN];

  if (secret == NULL)
    {
      g_autoptr(GError) error = NULL;

      own_secret = kv_peer_secret_load (harness_secret_path (), &error);
      g_assert_no_error (error);
      secret = own_secret;
    }
  g_assert_true (kv_peer_random_nonce (nonce, NULL));
  kv_peer_frame_append_hello (out, nonce);
  harness_stream_send (stream, out->data, out->len);
  if (!harness_stream_read_frame (stream, &hello))
    return FALSE;
  g_assert_cmpint (hello.type, ==, KV_PEER_FRAME_HELLO);
  kv_chunk_namespace_digest (namespace_, block_size, digest);
  kv_peer_frame_auth_params (params, block_size, digest, 0, 0);
  kv_peer_handshake_mac (secret, KV_PEER_ROLE_CLIENT, nonce, hello.nonce, params, mac);
  g_byte_array_set_size (out, 0);
  kv_peer_frame_append_auth (out, params, mac);
  harness_stream_send (stream, out->data, out->len);
  return harness_stream_read_frame (stream, answer);
}

/* ---- raw sockets and processes ---------------------------------------------- */

/* A TCP connection to @address ("HOST:PORT") from @source (an IP address,
 * or NULL), blocking with a timeout of @timeout_s; NULL if it fails. */
GSocket *
harness_tcp_connect (const char *address,
                     const char *source,
                     guint       timeout_s)
{
  g_autoptr(GSocketConnectable) connectable = g_network_address_parse (address, 0, NULL);
  g_autoptr(GSocketAddressEnumerator) enumerator = g_socket_connectable_enumerate (connectable);
  g_autoptr(GSocketAddress) remote = g_socket_address_enumerator_next (enumerator, NULL, NULL);
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, NULL);

  if (socket == NULL || remote == NULL)
    return NULL;
  g_socket_set_timeout (socket, timeout_s);
  if (source != NULL)
    {
      g_autoptr(GInetAddress) inet = g_inet_address_new_from_string (source);
      g_autoptr(GSocketAddress) local = g_inet_socket_address_new (inet, 0);

      if (!g_socket_bind (socket, local, TRUE, NULL))
        return NULL;
    }
  if (!g_socket_connect (socket, remote, NULL, NULL))
    return NULL;
  return g_steal_pointer (&socket);
}

/* Raises the test process's own descriptor limit to @needed (it opens a
 * few thousand sockets); FALSE if the hard limit is lower. */
gboolean
harness_raise_own_nofile (guint needed)
{
  struct rlimit limit;

  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &limit), ==, 0);
  if (limit.rlim_cur >= needed)
    return TRUE;
  if (limit.rlim_max < needed)
    return FALSE;
  limit.rlim_cur = limit.rlim_max;
  return setrlimit (RLIMIT_NOFILE, &limit) == 0;
}

/* utime + stime of @process (all its threads), in seconds. */
gdouble
harness_process_cpu_seconds (GSubprocess *process)
{
  g_autofree char *path = g_strdup_printf ("/proc/%s/stat", g_subprocess_get_identifier (process));
  g_autofree char *text = NULL;
  g_auto(GStrv) fields = NULL;

  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  /* the fields after the command's ")": state is field 3, utime 14, stime 15 */
  fields = g_strsplit (strrchr (text, ')') + 2, " ", -1);
  return (g_ascii_strtod (fields[11], NULL) + g_ascii_strtod (fields[12], NULL)) /
         sysconf (_SC_CLK_TCK);
}
