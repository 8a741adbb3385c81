/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "peer-harness.h"

#include "kv-chunk-format.h"

#include <glib/gstdio.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>

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

/* Removes @path and everything below it (a directory a tier filled). */
void
harness_remove_tree (const char *path)
{
  g_autoptr(GFile) file = g_file_new_for_path (path);
  g_autoptr(GFileEnumerator) children = NULL;
  GFileInfo *info;

  children = g_file_enumerate_children (file, G_FILE_ATTRIBUTE_STANDARD_NAME "," G_FILE_ATTRIBUTE_STANDARD_TYPE,
                                        G_FILE_QUERY_INFO_NOFOLLOW_SYMLINKS, NULL, NULL);
  while (children != NULL && (info = g_file_enumerator_next_file (children, NULL, NULL)) != NULL)
    {
      g_autoptr(GFile) child = g_file_get_child (file, g_file_info_get_name (info));
      g_autofree char *child_path = g_file_get_path (child);

      if (g_file_info_get_file_type (info) == G_FILE_TYPE_DIRECTORY)
        harness_remove_tree (child_path);
      else
        g_remove (child_path);
      g_object_unref (info);
    }
  g_rmdir (path);
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

/* The child dies with the test process, whatever ends it. */
void
harness_child_setup (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
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
