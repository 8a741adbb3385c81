/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include <kvtier.h>
#include <xxhash.h>

/* The `kvtier` command: every subcommand's exit status and output on good
 * and bad input (0 success, 1 failure, 2 usage error). The bench's numbers
 * are checked by tests/cli/test_cli_bench.py. */

typedef struct
{
  int   status;
  char *out;
  char *err;
} Result;

static void
result_clear (Result *result)
{
  g_clear_pointer (&result->out, g_free);
  g_clear_pointer (&result->err, g_free);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Result, result_clear)

/* Runs kvtier with the NULL-terminated arguments; @plugin_path replaces
 * KVTIER_PLUGIN_PATH when not NULL. */
static void
run_kvtier (Result     *result,
            const char *plugin_path,
            ...)
{
  g_autofree char *kvtier = g_test_build_filename (G_TEST_BUILT, "..", "tools", "kvtier", NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_auto(GStrv) envp = g_get_environ ();
  g_autoptr(GError) error = NULL;
  int wait_status = 0;
  const char *arg;
  va_list args;

  g_ptr_array_add (argv, kvtier);
  va_start (args, plugin_path);
  while ((arg = va_arg (args, const char *)) != NULL)
    g_ptr_array_add (argv, (gpointer) arg);
  va_end (args);
  g_ptr_array_add (argv, NULL);

  if (plugin_path != NULL)
    envp = g_environ_setenv (envp, "KVTIER_PLUGIN_PATH", plugin_path, TRUE);
  envp = g_environ_unsetenv (envp, "G_DEBUG");

  memset (result, 0, sizeof *result);
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, envp, G_SPAWN_DEFAULT, NULL, NULL,
                               &result->out, &result->err, &wait_status, &error));
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (wait_status));
  result->status = WEXITSTATUS (wait_status);
  g_test_message ("kvtier %s → %d\n%s%s", (const char *) argv->pdata[1], result->status,
                  result->out, result->err);
}

static void
assert_contains (const char *haystack,
                 const char *needle)
{
  if (strstr (haystack, needle) == NULL)
    g_error ("“%s” not found in:\n%s", needle, haystack);
}

/* Files the tests write go into a directory of this process's own, not
 * under fixed names in /tmp, which other runs of the suite share. */
static char *scratch_dir;

static char *
scratch_path (const char *name)
{
  if (scratch_dir == NULL)
    {
      g_autoptr(GError) error = NULL;

      scratch_dir = g_dir_make_tmp ("kvtier-cli-files-XXXXXX", &error);
      g_assert_no_error (error);
    }
  return g_build_filename (scratch_dir, name, NULL);
}

static char *
write_temp (const char *name,
            const char *contents)
{
  g_autoptr(GError) error = NULL;
  char *path = scratch_path (name);

  g_assert_true (g_file_set_contents (path, contents, -1, &error));
  g_assert_no_error (error);
  return path;
}

static void
test_usage (void)
{
  g_auto(Result) r = { 0 };

  run_kvtier (&r, NULL, NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "kvtier: missing COMMAND");
  result_clear (&r);

  run_kvtier (&r, NULL, "frobnicate", NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "unknown command 'frobnicate'");
  result_clear (&r);

  run_kvtier (&r, NULL, "--frobnicate", NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "Unknown option --frobnicate");
  result_clear (&r);

  run_kvtier (&r, NULL, "--help", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "Commands:");
  assert_contains (r.out, "  bench ");
  assert_contains (r.out, "  plugins ");
  assert_contains (r.out, "  config ");
  assert_contains (r.out, "0 success, 1 failure, 2 usage error");
  result_clear (&r);

  run_kvtier (&r, NULL, "--version", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "kvtier " PACKAGE_VERSION);
  result_clear (&r);

  run_kvtier (&r, NULL, "help", "bench", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "kvtier bench [OPTION");
  assert_contains (r.out, "--trace=FILE");
}

static void
test_help_everywhere (void)
{
  const char *commands[] = { "bench", "plugins", "config" };

  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    {
      g_auto(Result) r = { 0 };
      g_autofree char *usage = g_strdup_printf ("kvtier %s [OPTION", commands[i]);

      run_kvtier (&r, NULL, commands[i], "--help", NULL);
      g_assert_cmpint (r.status, ==, 0);
      assert_contains (r.out, usage);
    }
}

static void
test_bench_usage_errors (void)
{
  struct { const char *a, *b, *c, *message; } cases[] = {
    { "--batch", "0", NULL, "--batch must be at least 1" },
    { "--chunk-size", "12XB", NULL, "--chunk-size: '12XB' is not a size" },
    { "--trace", "x.jsonl", "--synthetic", "--trace and --synthetic exclude each other" },
    { "--plot", "out.gif", NULL, "--plot FILE must end in .svg or .png" },
    { "--requests", "-3", NULL, "must not be negative" },
    { "--batch", "many", NULL, "Cannot parse integer value “many” for --batch" },
    { "extra", NULL, NULL, "unexpected argument 'extra'" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_auto(Result) r = { 0 };

      run_kvtier (&r, NULL, "bench", cases[i].a, cases[i].b, cases[i].c, NULL);
      g_assert_cmpint (r.status, ==, 2);
      assert_contains (r.err, cases[i].message);
      assert_contains (r.err, "Try “kvtier bench --help”");
    }
}

static void
test_bench_bad_input (void)
{
  g_auto(Result) r = { 0 };
  g_autofree char *bad = write_temp ("bad-trace.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1, 2]}\n"
                                     "{\"timestamp\": 1, \"hash_ids\": [1, 2,\n");
  g_autofree char *negative = write_temp ("negative-trace.jsonl",
                                          "{\"timestamp\": 0, \"hash_ids\": [1, -2]}\n");
  g_autofree char *bad_config = write_temp ("bad-bench.conf", "[primary]\nsize = 12XB\n");
  g_autofree char *expected = g_strdup_printf ("%s:2: not JSON", bad);

  run_kvtier (&r, NULL, "bench", "--trace", "/nonexistent/trace.jsonl", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "/nonexistent/trace.jsonl");
  result_clear (&r);

  run_kvtier (&r, NULL, "bench", "--trace", bad, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, expected);
  result_clear (&r);

  run_kvtier (&r, NULL, "bench", "--trace", negative, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, ":1: hash_ids[1] is not a non-negative integer");
  result_clear (&r);

  run_kvtier (&r, NULL, "bench", "--config", bad_config, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "bad-bench.conf:2: [primary] key 'size': '12XB' is not a size");
  result_clear (&r);

  /* A chunk that does not split into whole layers. */
  run_kvtier (&r, NULL, "bench", "--chunk-size", "12KiB", "--layers", "5", NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "a chunk of 12288 bytes does not split into 5 layers");
}

/* Issue 13 item 4: a prompt may name a chunk twice. [7, 7] is stored once
 * (one device slot, one primary slot) and, after [5, 6] pushed it off the
 * two-chunk device, loaded back from the primary tier into both places. */
static void
test_bench_repeated_ids (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autofree char *trace = write_temp ("repeated-trace.jsonl",
                                       "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [7, 7]}\n"
                                       "{\"timestamp\": 1, \"input_length\": 1024, \"hash_ids\": [5, 6]}\n"
                                       "{\"timestamp\": 2, \"input_length\": 1024, \"hash_ids\": [7, 7]}\n");
  g_autofree char *dir = g_dir_make_tmp ("kvtier-cli-XXXXXX", NULL);
  g_autofree char *json = g_build_filename (dir, "repeated.json", NULL);
  JsonObject *root, *hits, *paths;

  run_kvtier (&r, NULL, "bench", "--trace", trace, "--chunk-size", "16KiB", "--layers", "2",
              "--gpu-size", "32KiB", "--prefill-rate", "0", "--sync", "--batch", "1",
              "--no-progress", "--quiet", "--json", json, NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_cmpstr (r.err, ==, "");
  g_assert_true (json_parser_load_from_file (parser, json, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  hits = json_object_get_object_member (root, "hits");
  g_assert_cmpint (json_object_get_int_member (root, "requests"), ==, 3);
  g_assert_cmpint (json_object_get_int_member (root, "lookups"), ==, 6);
  g_assert_cmpint (json_object_get_int_member (hits, "device"), ==, 0);
  g_assert_cmpint (json_object_get_int_member (hits, "primary"), ==, 2);
  g_assert_cmpint (json_object_get_int_member (root, "misses"), ==, 4);
  g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (root, "verify"),
                                               "mismatches"), ==, 0);
  g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (root, "verify"),
                                               "chunks"), ==, 2);
  paths = json_object_get_object_member (root, "paths");
  /* three distinct chunks stored, one of them loaded twice */
  g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (paths, "device_to_primary"),
                                               "bytes"), ==, 3 * 16384);
  g_assert_cmpint (json_object_get_int_member (json_object_get_object_member (paths, "primary_to_device"),
                                               "bytes"), ==, 2 * 16384);
  g_unlink (json);
  g_unlink (trace);
  g_rmdir (dir);
}

/* Issue 13 item 10: a usage error frees every option string it parsed
 * (checked with valgrind when it is installed). */
static void
test_bench_usage_error_frees (void)
{
  g_autofree char *valgrind = g_find_program_in_path ("valgrind");
  g_autofree char *kvtier = g_test_build_filename (G_TEST_BUILT, "..", "tools", "kvtier", NULL);
  g_auto(GStrv) envp = g_get_environ ();
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL, *err = NULL;
  int wait_status = 0;
  const char *argv[] = {
    NULL, "--leak-check=full", "--errors-for-leak-kinds=definite", "--error-exitcode=99", "-q",
    NULL, "bench", "--config", "/nonexistent/kvtier.conf", "--json", "out.json",
    "--plot", "out.svg", "--trace", "trace.jsonl", "--backpressure", "bogus", NULL
  };

#if defined(__SANITIZE_ADDRESS__)
  /* an AddressSanitizer build checks leaks itself; it cannot run under valgrind */
  g_test_skip ("built with AddressSanitizer");
  return;
#endif
  if (valgrind == NULL)
    {
      g_test_skip ("valgrind is not installed");
      return;
    }
  argv[0] = valgrind;
  argv[5] = kvtier;
  envp = g_environ_setenv (envp, "G_SLICE", "always-malloc", TRUE);
  envp = g_environ_unsetenv (envp, "G_DEBUG");
  g_assert_true (g_spawn_sync (NULL, (char **) argv, envp, G_SPAWN_DEFAULT, NULL, NULL,
                               &out, &err, &wait_status, &error));
  g_assert_no_error (error);
  g_test_message ("%s", err);
  g_assert_true (WIFEXITED (wait_status));
  /* 2 (usage), not valgrind's 99 */
  g_assert_cmpint (WEXITSTATUS (wait_status), ==, 2);
  assert_contains (err, "--backpressure must be ema or none, not 'bogus'");
}

/* Issue 13 item 8: the table and the JSON show each tier's failure
 * counters; an fs tier of 1 MiB evicts (--sync: every store reaches it
 * before the run ends). */
static void
test_bench_failures (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autofree char *dir = g_dir_make_tmp ("kvtier-cli-XXXXXX", NULL);
  g_autofree char *json = g_build_filename (dir, "failures.json", NULL);
  const char *keys[] = { "failed_stores", "failed_loads", "no_space", "io_errors", "evictions",
                         "corrupt_chunks", "breaker_openings", "timeouts", "late_completions" };
  JsonObject *root, *failures, *fs;

  run_kvtier (&r, NULL, "bench", "--synthetic", "--conversations", "30", "--turns", "3",
              "--chunk-size", "16KiB", "--layers", "2", "--gpu-size", "256KiB",
              "--primary-size", "1MiB", "--tier-size", "1MiB", "--prefill-rate", "0",
              "--sync", "--batch", "1", "--no-progress", "--json", json, NULL);
  if (strstr (r.out, "  tiers    fs (fs)") == NULL)
    {
      g_unlink (json);
      g_rmdir (dir);
      g_test_skip ("the fs tier plugin is not built");
      return;
    }
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "  failures                     fs: ");
  assert_contains (r.out, " ENOSPC, ");
  assert_contains (r.out, " breaker openings");
  g_assert_true (json_parser_load_from_file (parser, json, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  failures = json_object_get_object_member (root, "failures");
  g_assert_nonnull (failures);
  fs = json_object_get_object_member (failures, "fs");
  g_assert_nonnull (fs);
  for (guint k = 0; k < G_N_ELEMENTS (keys); k++)
    g_assert_true (json_object_has_member (fs, keys[k]));
  g_assert_cmpint (json_object_get_int_member (fs, "evictions"), >, 0);
  g_assert_cmpint (json_object_get_int_member (fs, "corrupt_chunks"), ==, 0);
  g_assert_cmpint (json_object_get_int_member (fs, "io_errors"), ==, 0);
  g_unlink (json);
  g_rmdir (dir);
}

static void
test_bench_synthetic (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autofree char *json = scratch_path ("bench.json");
  g_autofree char *svg = scratch_path ("bench.svg");
  g_autofree char *png = scratch_path ("bench.png");
  g_autofree char *svg_text = NULL;
  g_autofree char *png_bytes = NULL;
  gsize png_len = 0;
  JsonObject *root, *hits;
  GList *members;
  gint64 lookups, total;

  run_kvtier (&r, NULL, "bench", "--synthetic", "--conversations", "24", "--turns", "3",
              "--chunk-size", "16KiB", "--layers", "2", "--gpu-size", "1MiB",
              "--primary-size", "2MiB", "--json", json, "--plot", svg, "--progress=never", NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_cmpstr (r.err, ==, "");
  assert_contains (r.out, "kvtier bench: synthetic chats (24 conversations × 3 turns");
  assert_contains (r.out, "\n  requests ");
  assert_contains (r.out, "prefix chunks looked up");
  assert_contains (r.out, "hits  device");
  assert_contains (r.out, "saved by offloading");
  assert_contains (r.out, "device → primary");
  assert_contains (r.out, "manager time per step");
  assert_contains (r.out, "0 mismatches");

  g_assert_true (json_parser_load_from_file (parser, json, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  g_assert_cmpstr (json_object_get_string_member (root, "schema"), ==, "kvtier-bench/1");
  g_assert_cmpint (json_object_get_int_member (root, "requests"), ==, 72);
  lookups = json_object_get_int_member (root, "lookups");
  hits = json_object_get_object_member (root, "hits");
  total = json_object_get_int_member (root, "misses") +
          json_object_get_int_member (hits, "device") +
          json_object_get_int_member (hits, "primary");
  members = json_object_get_members (hits);
  for (GList *m = members; m != NULL; m = m->next)
    if (!g_str_equal (m->data, "device") && !g_str_equal (m->data, "primary"))
      total += json_object_get_int_member (hits, m->data);
  g_list_free (members);
  g_assert_cmpint (lookups, >, 0);
  g_assert_cmpint (total, ==, lookups);
  g_assert_true (json_object_has_member (root, "paths"));
  g_assert_true (json_object_has_member (root, "manager"));

  g_assert_true (g_file_get_contents (svg, &svg_text, NULL, &error));
  g_assert_no_error (error);
  assert_contains (svg_text, "<svg");
  result_clear (&r);

  run_kvtier (&r, NULL, "bench", "--synthetic", "--conversations", "8", "--turns", "2",
              "--chunk-size", "16KiB", "--layers", "2", "--gpu-size", "1MiB", "--quiet",
              "--plot", png, NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_cmpstr (r.out, ==, "");
  g_assert_true (g_file_get_contents (png, &png_bytes, &png_len, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (png_len, >, 8);
  g_assert_cmpmem (png_bytes, 8, "\x89PNG\r\n\x1a\n", 8);
  g_remove (json);
  g_remove (svg);
  g_remove (png);
}

static void
test_plugins (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *test_plugins = g_test_build_filename (G_TEST_BUILT, "plugins", NULL);
  g_autofree char *empty = g_dir_make_tmp ("kvtier-empty-XXXXXX", NULL);
  JsonObject *root;
  JsonArray *devices;

  run_kvtier (&r, empty, "plugins", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "Plugin directories (searched in order):");
  assert_contains (r.out, empty);
  assert_contains (r.out, "Tier types:\n  (none: no tier plugin was found)");
  assert_contains (r.out, "host  (KvHostDevice, built-in)");
  assert_contains (r.out, "block-bytes");
  result_clear (&r);

  run_kvtier (&r, empty, "plugins", "--json", NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_true (json_parser_load_from_data (parser, r.out, -1, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  devices = json_object_get_array_member (root, "devices");
  g_assert_cmpuint (json_array_get_length (devices), ==, 1);
  g_assert_cmpstr (json_object_get_string_member (json_array_get_object_element (devices, 0), "name"),
                   ==, "host");
  g_assert_cmpuint (json_array_get_length (json_object_get_array_member (root, "tiers")), ==, 0);
  result_clear (&r);

  /* The test plugins: two register "test-good" (the first in name order,
   * the dup plugin, wins), one has the wrong ABI. */
  run_kvtier (&r, test_plugins, "plugins", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, "test-good  (KvTestDupTier, ");
  assert_contains (r.out, "max-size");
  assert_contains (r.err, "was built for kvtier plugin ABI 2, but this kvtier loads ABI 1");
  assert_contains (r.err, "Tier 'test-good' is already registered.");
  result_clear (&r);

  run_kvtier (&r, empty, "plugins", "extra", NULL);
  g_assert_cmpint (r.status, ==, 2);
  g_rmdir (empty);
}

static const char *
json_property_string (JsonObject *type,
                      const char *property,
                      const char *member)
{
  JsonArray *props = json_object_get_array_member (type, "properties");

  for (guint i = 0; i < json_array_get_length (props); i++)
    {
      JsonObject *prop = json_array_get_object_element (props, i);

      if (g_str_equal (json_object_get_string_member (prop, "name"), property))
        return json_object_get_string_member (prop, member);
    }
  g_error ("%s has no property %s", json_object_get_string_member (type, "name"), property);
}

/* Every property of every tier and device type of the plugins has a
 * one-line description, and the defaults shown are the values an object
 * of the type runs with: the fs and redis tiers set deadline-ms 5000 and
 * breaker-threshold 5 when they are made, the peer tier locality remote,
 * which their param specs do not say. */
static void
test_plugins_descriptions (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) missing = g_string_new (NULL);
  g_autoptr(GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);
  JsonObject *root;
  guint n_properties = 0;

  run_kvtier (&r, NULL, "plugins", "--json", NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_true (json_parser_load_from_data (parser, r.out, -1, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  for (const char * const *kind = (const char *[]) { "tiers", "devices", NULL }; *kind; kind++)
    {
      JsonArray *types = json_object_get_array_member (root, *kind);

      for (guint t = 0; t < json_array_get_length (types); t++)
        {
          JsonObject *type = json_array_get_object_element (types, t);
          const char *type_name = json_object_get_string_member (type, "name");
          JsonArray *props = json_object_get_array_member (type, "properties");

          g_hash_table_add (seen, (gpointer) type_name);
          for (guint i = 0; i < json_array_get_length (props); i++)
            {
              JsonObject *prop = json_array_get_object_element (props, i);
              const char *blurb = json_object_get_string_member (prop, "blurb");

              n_properties++;
              if (*blurb == '\0' || strchr (blurb, '\n') != NULL)
                g_string_append_printf (missing, " %s:%s", type_name,
                                        json_object_get_string_member (prop, "name"));
            }
          if (g_str_equal (type_name, "fs") || g_str_equal (type_name, "redis"))
            {
              g_assert_cmpstr (json_property_string (type, "deadline-ms", "default"), ==, "5000");
              g_assert_cmpstr (json_property_string (type, "breaker-threshold", "default"), ==, "5");
            }
          if (g_str_equal (type_name, "peer"))
            g_assert_cmpstr (json_property_string (type, "locality", "default"), ==, "remote");
          if (g_str_equal (type_name, "example"))
            g_assert_cmpstr (json_property_string (type, "deadline-ms", "default"), ==, "0");
        }
    }
  if (missing->len > 0)
    g_error ("properties without a one-line description (a blurb in their param spec):%s",
             missing->str);
  /* the host device at least, and whichever tiers are built */
  g_assert_true (g_hash_table_contains (seen, "host"));
  g_assert_cmpuint (n_properties, >=, 5);
  result_clear (&r);

  run_kvtier (&r, NULL, "plugins", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "      n-workers                  = 2                (unsigned integer)\n"
                          "          Copy threads\n");
  if (g_hash_table_contains (seen, "fs"))
    assert_contains (r.out, "      deadline-ms                = 5000             (unsigned integer)\n"
                            "          Milliseconds a job may take before it is reported failed"
                            " (0: no deadline)\n");
}

static void
test_config_check (void)
{
  g_auto(Result) r = { 0 };
  g_autofree char *empty = g_dir_make_tmp ("kvtier-empty-XXXXXX", NULL);
  g_autofree char *test_plugins = g_test_build_filename (G_TEST_BUILT, "plugins", NULL);
  g_autofree char *path = g_strdup_printf ("%s:%s", empty, test_plugins);
  g_autofree char *good = write_temp ("good.conf",
                                      "[primary]\nsize = 64MiB\nslot-size = 1MiB\n\n"
                                      "[device]\ntype = host\nn-blocks = 32\n"
                                      "block-bytes = 128KiB\nn-layers = 8\n\n"
                                      "[tier t]\ntype = test-good\nlabel = fast\n"
                                      "backpressure = ema\n");
  g_autofree char *bad = write_temp ("bad.conf", "[primary]\n\nsize = 64XB\n");

  run_kvtier (&r, path, "config", "check", good, NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "good.conf: valid");
  assert_contains (r.out, "[primary]  64 slots of 1 MiB (64 MiB), policy lru");
  assert_contains (r.out, "[device]  type host → KvHostDevice (built-in)");
  assert_contains (r.out, "    n-blocks                     = 32                    # Device blocks per layer\n");
  assert_contains (r.out, "    n-workers                    = 2  (default)");
  assert_contains (r.out, "#1 [tier t]  type test-good → KvTestDupTier (");
  assert_contains (r.out, "    label                        = fast");
  assert_contains (r.out, "    backpressure                 = ema");
  assert_contains (r.out, "    max-size                     = 1GiB  (default)");
  /* The plugin errors of the test directory are warnings here. */
  assert_contains (r.err, "kvtier: warning: ");
  result_clear (&r);

  run_kvtier (&r, path, "config", "check", bad, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "bad.conf:3: [primary] key 'size': '64XB' is not a size");
  result_clear (&r);

  run_kvtier (&r, empty, "config", "check", "/nonexistent.conf", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "/nonexistent.conf");
  result_clear (&r);

  run_kvtier (&r, empty, "config", NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "missing subcommand (config check FILE)");
  result_clear (&r);

  run_kvtier (&r, empty, "config", "lint", good, NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "unknown subcommand 'lint'");
  result_clear (&r);

  run_kvtier (&r, empty, "config", "check", NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "missing FILE");
  g_remove (good);
  g_remove (bad);
  g_rmdir (empty);
}

static int
remove_entry (const char        *path,
              const struct stat *sb,
              int                flag,
              struct FTW        *ftw)
{
  return remove (path);
}

static guint64
json_path_int (const char *file,
               const char *member,
               const char *field)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *root;

  g_assert_true (json_parser_load_from_file (parser, file, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  return (guint64) json_object_get_int_member (json_object_get_object_member (
    json_object_get_object_member (root, "paths"), member), field);
}

static gint64
json_setup_int (const char *file,
                const char *field)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  JsonObject *root;

  g_assert_true (json_parser_load_from_file (parser, file, &error));
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  return json_object_get_int_member (json_object_get_object_member (root, "setup"), field);
}

/* A configuration without [primary] slot-size keeps the bench's chunk
 * size (256 KiB) and says so, instead of the library's 2 MiB slots; one
 * that sets it gets chunks of its slot, silently. */
static void
test_bench_config_without_slot_size (void)
{
  g_auto(Result) r = { 0 };
  g_autofree char *bare = write_temp ("bench-no-primary.conf", "[tier mem]\ntype = example\n");
  g_autofree char *sized = write_temp ("bench-slot.conf",
                                       "[primary]\nslot-size = 64KiB\n\n[tier mem]\ntype = example\n");
  g_autofree char *json = scratch_path ("bench-no-primary.json");
  g_autofree char *message = g_strdup_printf ("kvtier bench: %s sets no [primary] slot-size:"
                                              " chunks are 256 KiB, the bench's default", bare);

  run_kvtier (&r, NULL, "bench", "--config", bare, "--conversations", "2", "--turns", "2",
              "--no-progress", "--quiet", "--json", json, NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.err, message);
  g_assert_cmpint (json_setup_int (json, "chunk_bytes"), ==, 256 * 1024);
  result_clear (&r);

  run_kvtier (&r, NULL, "bench", "--config", sized, "--conversations", "2", "--turns", "2",
              "--no-progress", "--quiet", "--json", json, NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_cmpstr (r.err, ==, "");
  g_assert_cmpint (json_setup_int (json, "chunk_bytes"), ==, 64 * 1024);
}

/* layout=slab: the chunks in the slots of slab files, counted and, with
 * --verify, checked slot by slot; a flipped payload byte is found. */
static void
test_inspect_slab_layout (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(GError) error = NULL;
  g_autofree char *root = g_dir_make_tmp ("kvtier-inspect-XXXXXX", &error);
  g_autofree char *conf_text = g_strdup_printf ("[primary]\nsize = 8MiB\nslot-size = 64KiB\n"
                                                "[tier fs]\ntype = fs\nroot = %s\n"
                                                "layout = slab\nmax-size = 8MiB\n"
                                                "slab-size = 2MiB\n", root);
  g_autofree char *conf = write_temp ("inspect-slab.conf", conf_text);
  g_autofree char *json = scratch_path ("inspect-slab-bench.json");
  g_autofree char *ok = NULL;
  g_autofree char *slab0 = NULL;
  g_autoptr(GDir) top = NULL;
  guint64 n_chunks;
  const char *ns_dir = NULL;

  g_assert_no_error (error);
  run_kvtier (&r, NULL, "bench", "--config", conf, "--conversations", "4", "--turns", "2",
              "--no-progress", "--quiet", "--json", json, NULL);
  if (r.status != 0 && strstr (r.err, "Unknown secondary tier type: 'fs'") != NULL)
    {
      g_test_skip ("the fs tier plugin is not built");
      g_rmdir (root);
      return;
    }
  g_assert_cmpint (r.status, ==, 0);
  n_chunks = json_path_int (json, "primary_to_fs", "bytes") / (64 * 1024);
  g_assert_cmpuint (n_chunks, >, 0);
  g_assert_cmpuint (n_chunks, <=, 120);
  result_clear (&r);

  run_kvtier (&r, NULL, "inspect", "fs", root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "(slab layout, namespace \"default\", chunks of 64 KiB)");
  /* 8 MiB of 68 KiB slots: 120, in slab files of 30 */
  assert_contains (r.out, "slots          120 in 4 slab files, ");
  ok = g_strdup_printf ("verified       %" G_GUINT64_FORMAT " ok, 0 bad", n_chunks);
  assert_contains (r.out, ok);
  result_clear (&r);

  /* a payload byte of the first slot of a slab file that holds one */
  top = g_dir_open (root, 0, NULL);
  for (const char *base; (base = g_dir_read_name (top)) != NULL;)
    if (g_str_has_prefix (base, "kvslab-"))
      ns_dir = base;
  g_assert_nonnull (ns_dir);
  slab0 = g_build_filename (root, ns_dir, "slab-0000.kvslab", NULL);
  {
    g_autofree char *bytes = NULL;
    gsize len = 0;

    g_assert_true (g_file_get_contents (slab0, &bytes, &len, &error));
    g_assert_cmpmem (bytes + 4096, 8, "KVTIERFS", 8);
    bytes[4096 + 4096 + 100] ^= 0x5a;
    g_assert_true (g_file_set_contents (slab0, bytes, len, &error));
  }
  run_kvtier (&r, NULL, "inspect", "fs", root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, " ok, 1 bad");
  assert_contains (r.out, "payload checksum mismatch    1");
  assert_contains (r.out, "slab-0000.kvslab@4096");
  result_clear (&r);
  run_kvtier (&r, NULL, "inspect", "fs", root, "--json", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, "\"layout\" : \"slab\"");
  result_clear (&r);

  g_remove (json);
  g_remove (conf);
  g_assert_cmpint (nftw (root, remove_entry, 16, FTW_DEPTH | FTW_PHYS), ==, 0);
}

/* Chunks the bench stored with the fs tier, read back from disk. */
static void
test_inspect_fs (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(GError) error = NULL;
  g_autofree char *root = g_dir_make_tmp ("kvtier-inspect-XXXXXX", &error);
  g_autofree char *conf_text = g_strdup_printf ("[primary]\nsize = 8MiB\nslot-size = 64KiB\n"
                                                "[tier fs]\ntype = fs\nroot = %s\n", root);
  g_autofree char *conf = write_temp ("inspect.conf", conf_text);
  g_autofree char *json = scratch_path ("inspect-bench.json");
  g_autofree char *count = NULL;
  g_autofree char *ok = NULL;
  g_autofree char *victim = NULL;
  g_autofree char *temp = NULL;
  g_autoptr(GDir) top = NULL;
  guint64 n_chunks;
  const char *ns_dir = NULL;

  g_assert_no_error (error);
  run_kvtier (&r, NULL, "bench", "--config", conf, "--conversations", "16", "--turns", "2",
              "--no-progress", "--quiet", "--json", json, NULL);
  if (r.status != 0 && strstr (r.err, "Unknown secondary tier type: 'fs'") != NULL)
    {
      g_test_skip ("the fs tier plugin is not built");
      g_rmdir (root);
      return;
    }
  g_assert_cmpint (r.status, ==, 0);
  n_chunks = json_path_int (json, "primary_to_fs", "bytes") / (64 * 1024);
  g_assert_cmpuint (n_chunks, >, 0);
  result_clear (&r);

  run_kvtier (&r, NULL, "inspect", "fs", root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 0);
  assert_contains (r.out, ": 1 namespace\n");
  assert_contains (r.out, "(kvtier layout, namespace \"default\", chunks of 64 KiB)");
  count = g_strdup_printf ("chunks         %" G_GUINT64_FORMAT " (", n_chunks);
  assert_contains (r.out, count);
  ok = g_strdup_printf ("verified       %" G_GUINT64_FORMAT " ok, 0 bad", n_chunks);
  assert_contains (r.out, ok);
  assert_contains (r.out, "temp files     0 (0 B), 0 stale");
  result_clear (&r);

  /* Flip a payload byte of one chunk and leave an old temporary file. */
  top = g_dir_open (root, 0, NULL);
  for (const char *base; (base = g_dir_read_name (top)) != NULL;)
    if (g_str_has_prefix (base, "kvtier-"))
      ns_dir = base;
  g_assert_nonnull (ns_dir);
  {
    g_autofree char *dir = g_build_filename (root, ns_dir, NULL);
    g_autoptr(GDir) d1 = g_dir_open (dir, 0, NULL);
    const char *a, *c;

    /* <namespace>/<shard>/<chunk>.kv (doc/on-disk-format.md) */
    while ((a = g_dir_read_name (d1)) != NULL && victim == NULL)
      {
        g_autofree char *p1 = g_build_filename (dir, a, NULL);
        g_autoptr(GDir) d2 = NULL;

        if (!g_file_test (p1, G_FILE_TEST_IS_DIR))
          continue;
        d2 = g_dir_open (p1, 0, NULL);
        while ((c = g_dir_read_name (d2)) != NULL && victim == NULL)
          if (g_str_has_suffix (c, ".kv"))
            {
              victim = g_build_filename (p1, c, NULL);
              temp = g_strdup_printf ("%s_x-1.tmp", victim);
            }
      }
  }
  g_assert_nonnull (victim);
  {
    g_autofree char *bytes = NULL;
    gsize len = 0;
    struct utimbuf old = { 0, 0 };

    g_assert_true (g_file_get_contents (victim, &bytes, &len, &error));
    bytes[4096 + 100] ^= 0x5a;
    g_assert_true (g_file_set_contents (victim, bytes, len, &error));
    g_assert_true (g_file_set_contents (temp, "partial", -1, &error));
    g_assert_cmpint (g_utime (temp, &old), ==, 0);
  }

  run_kvtier (&r, NULL, "inspect", "fs", root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, " ok, 1 bad");
  assert_contains (r.out, "payload checksum mismatch    1");
  assert_contains (r.out, victim);
  assert_contains (r.out, "temp files     1 (7 B), 1 stale");
  result_clear (&r);

  /* Without --verify only sizes are checked: the flipped byte goes unseen. */
  run_kvtier (&r, NULL, "inspect", "fs", root, NULL);
  g_assert_cmpint (r.status, ==, 0);
  result_clear (&r);

  /* Spare files (preallocate) are counted apart, neither chunks nor temp. */
  {
    g_autofree char *spares = g_build_filename (root, ns_dir, ".kvtier-spare", NULL);
    g_autofree char *spare = g_build_filename (spares, "0", NULL);
    g_autofree char *zeros = g_malloc0 (4096 + 64 * 1024);

    g_assert_cmpint (g_mkdir (spares, 0700), ==, 0);
    g_assert_true (g_file_set_contents (spare, zeros, 4096 + 64 * 1024, &error));
    run_kvtier (&r, NULL, "inspect", "fs", root, NULL);
    g_assert_cmpint (r.status, ==, 0);
    assert_contains (r.out, count);
    assert_contains (r.out, "temp files     1 (7 B), 1 stale");
    assert_contains (r.out, "spare files    1 (68 KiB)");
    result_clear (&r);
  }

  run_kvtier (&r, NULL, "inspect", NULL);
  g_assert_cmpint (r.status, ==, 2);
  result_clear (&r);
  run_kvtier (&r, NULL, "inspect", "redis", root, NULL);
  g_assert_cmpint (r.status, ==, 2);
  assert_contains (r.err, "cannot inspect tier type 'redis'");
  result_clear (&r);
  run_kvtier (&r, NULL, "inspect", "fs", "/nonexistent/kvtier", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "/nonexistent/kvtier");

  g_remove (json);
  g_remove (conf);
  g_assert_cmpint (nftw (root, remove_entry, 16, FTW_DEPTH | FTW_PHYS), ==, 0);
}

/* `config check` says "valid" only for what building accepts, and
 * builds nothing: no directory appears. */
static void
test_config_check_builds (void)
{
  g_autofree char *dir = g_dir_make_tmp ("kvtier-check-XXXXXX", NULL);
  g_autofree char *root = g_build_filename (dir, "never-created", NULL);
  const struct { const char *name; const char *text; const char *message; } cases[] = {
    { "no-slot.conf", "[primary]\nsize = 64KiB\nslot-size = 128KiB\n",
      "no-slot.conf:1: [primary] key 'size': 64KiB makes 0 slots of 128KiB" },
    { "many-slots.conf", "[primary]\nsize = 2048000000000000\nslot-size = 4KiB\n",
      "many-slots.conf:1: [primary] key 'size': 1953125000MiB makes 500000000000 slots" },
    { "empty-root.conf", "[primary]\nsize = 64MiB\nslot-size = 1MiB\n\n[tier disk]\ntype = fs\nroot =\n",
      "empty-root.conf:5: [tier disk]: cannot create the tier: The fs tier needs the root property" },
    { "vllm.conf", NULL,
      "vllm.conf:5: [tier disk]: cannot create the tier: layout=vllm needs the vllm-identity" },
    { "trust-group.conf", "[primary]\nsize = 64MiB\nslot-size = 1MiB\n\n[tier disk]\ntype = fs\n"
      "root = /nonexistent/kvtier-check\ntrust-group = no-such-group-kvtier\n",
      "trust-group.conf:5: [tier disk]: cannot create the tier: trust-group ‘no-such-group-kvtier’"
      " is neither a group name nor a group number" },
    { "slab.conf", "[primary]\nsize = 64MiB\nslot-size = 1MiB\n\n[tier disk]\ntype = fs\n"
      "root = /nonexistent/kvtier-check\nlayout = slab\n",
      "slab.conf:5: [tier disk]: cannot create the tier: layout=slab needs max-size" },
    { "big-chunk.conf", "[primary]\nsize = 64MiB\nslot-size = 1MiB\n\n[device]\ntype = host\n"
      "n-blocks = 32\nblock-bytes = 1MiB\nn-layers = 8\n",
      "big-chunk.conf:5: [device]: cannot create the device: " },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_auto(Result) r = { 0 };
      g_autofree char *text = cases[i].text != NULL ? g_strdup (cases[i].text)
        : g_strdup_printf ("[primary]\nsize = 64MiB\nslot-size = 1MiB\n\n[tier disk]\n"
                           "type = fs\nroot = %s\nlayout = vllm\n", root);
      g_autofree char *conf = write_temp (cases[i].name, text);

      run_kvtier (&r, NULL, "config", "check", conf, NULL);
      g_assert_cmpint (r.status, ==, 1);
      g_assert_null (strstr (r.out, "valid"));
      assert_contains (r.err, cases[i].message);
      g_remove (conf);
    }

  /* A good fs tier is valid, and its root is still not there. */
  {
    g_auto(Result) r = { 0 };
    g_autofree char *text = g_strdup_printf ("[primary]\nsize = 64MiB\nslot-size = 1MiB\n\n"
                                             "[tier disk]\ntype = fs\nroot = %s\n", root);
    g_autofree char *conf = write_temp ("good-fs.conf", text);

    run_kvtier (&r, NULL, "config", "check", conf, NULL);
    g_assert_cmpint (r.status, ==, 0);
    assert_contains (r.out, "good-fs.conf: valid");
    g_remove (conf);
  }
  g_assert_false (g_file_test (root, G_FILE_TEST_EXISTS));
  g_rmdir (dir);
}

/* A kvtier-layout namespace written by hand (doc/on-disk-format.md), so
 * that every field can be wrong on purpose. */
typedef struct
{
  char   *root;
  char   *dir;        /* <root>/kvtier-<ns16> */
  guint8  digest[32];
} HandRoot;

static void
hand_root_clear (HandRoot *hr)
{
  if (hr->root != NULL)
    g_assert_cmpint (nftw (hr->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS), ==, 0);
  g_free (hr->root);
  g_free (hr->dir);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (HandRoot, hand_root_clear)

static void
hand_root_init (HandRoot   *hr,
                const char *name,
                guint64     block_size,
                gboolean    with_json)
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autoptr(GError) error = NULL;
  g_autofree char *size = g_strdup_printf ("%" G_GUINT64_FORMAT, block_size);
  g_autofree char *base = NULL;
  gsize len = 32;

  g_checksum_update (sum, (const guchar *) "kvtier-fs\0" "1\0", 12);
  g_checksum_update (sum, (const guchar *) name, -1);
  g_checksum_update (sum, (const guchar *) "", 1);
  g_checksum_update (sum, (const guchar *) size, -1);
  g_checksum_get_digest (sum, hr->digest, &len);
  base = g_strdup_printf ("kvtier-%02x%02x%02x%02x%02x%02x%02x%02x", hr->digest[0], hr->digest[1],
                          hr->digest[2], hr->digest[3], hr->digest[4], hr->digest[5],
                          hr->digest[6], hr->digest[7]);
  hr->root = g_dir_make_tmp ("kvtier-hand-XXXXXX", &error);
  g_assert_no_error (error);
  hr->dir = g_build_filename (hr->root, base, NULL);
  g_assert_cmpint (g_mkdir (hr->dir, 0700), ==, 0);
  if (with_json)
    {
      g_autofree char *json = g_strdup_printf ("{\n  \"block_size\": %" G_GUINT64_FORMAT ",\n"
                                               "  \"format_version\": 1,\n  \"header_size\": 4096,\n"
                                               "  \"namespace\": \"%s\"\n}\n", block_size, name);
      g_autofree char *path = g_build_filename (hr->dir, "namespace.json", NULL);

      g_assert_true (g_file_set_contents (path, json, -1, &error));
      g_assert_no_error (error);
    }
}

/* Writes the chunk of key (@id as one hash byte, group 0) in its shard:
 * a valid header for a payload of @payload_len bytes, and @file_len bytes
 * in all. Returns its path. */
static char *
hand_root_chunk (HandRoot *hr,
                 guint8    id,
                 guint64   payload_len,
                 gsize     file_len)
{
  g_autoptr(GError) error = NULL;
  g_autofree guint8 *bytes = g_malloc0 (MAX (file_len, 4096 + payload_len));
  guint8 offload[5] = { id, 0, 0, 0, 0 };
  g_autofree char *shard = g_strdup_printf ("%02x", (guint) (XXH3_64bits (offload, 5) >> 56));
  g_autofree char *shard_dir = g_build_filename (hr->dir, shard, NULL);
  g_autofree char *name = g_strdup_printf ("%02x_g0.kv", id);
  guint64 v;
  guint32 w;

  memcpy (bytes, "KVTIERFS", 8);
  w = GUINT32_TO_LE (1);
  memcpy (bytes + 8, &w, 4);
  w = GUINT32_TO_LE (4096);
  memcpy (bytes + 12, &w, 4);
  memcpy (bytes + 16, hr->digest, 32);
  v = GUINT64_TO_LE (payload_len);
  memcpy (bytes + 48, &v, 8);
  memset (bytes + 4096, id, payload_len);
  v = GUINT64_TO_LE (XXH3_64bits (bytes + 4096, payload_len));
  memcpy (bytes + 56, &v, 8);
  w = GUINT32_TO_LE (1);
  memcpy (bytes + 68, &w, 4);
  bytes[88] = id;
  v = GUINT64_TO_LE (XXH3_64bits (bytes, 4088));
  memcpy (bytes + 4088, &v, 8);

  g_mkdir (shard_dir, 0700);
  {
    g_autofree char *path = g_build_filename (shard_dir, name, NULL);

    g_assert_true (g_file_set_contents (path, (const char *) bytes, file_len, &error));
    g_assert_no_error (error);
    return g_steal_pointer (&path);
  }
}

/* namespace.json lies in a directory anyone may have written: every field
 * is checked, and a bad one is named (it crashed --verify: a negative
 * block_size read an empty chunk through NULL, a huge one aborted). */
static void
test_inspect_bad_namespace_json (void)
{
  g_autofree char *deep = g_strnfill (100, '[');
  g_autofree char *long_json = g_strdup_printf ("{\"namespace\": \"%0*d\"}", 70000, 0);
  struct { const char *json; gsize chunk_len; const char *message; } cases[] = {
    { "{\"block_size\": -4096, \"format_version\": 1, \"header_size\": 4096, \"namespace\": \"x\"}",
      0, "namespace.json: \"block_size\" is -4096, not a positive multiple of 4096" },
    { "{\"block_size\": 4611686018427387904, \"format_version\": 1, \"header_size\": 4096,"
      " \"namespace\": \"x\"}",
      4096, "\"block_size\" is 4611686018427387904, not a positive multiple of 4096" },
    { "{\"block_size\": 100, \"format_version\": 1, \"header_size\": 4096, \"namespace\": \"x\"}",
      4196, "\"block_size\" is 100, not a positive multiple of 4096" },
    { "{\"block_size\": \"4096\", \"format_version\": 1, \"header_size\": 4096, \"namespace\": \"x\"}",
      0, "namespace.json: \"block_size\" is not an integer" },
    { "{\"block_size\": 4096.5, \"format_version\": 1, \"header_size\": 4096, \"namespace\": \"x\"}",
      0, "namespace.json: \"block_size\" is not an integer" },
    { "{\"format_version\": 1, \"header_size\": 4096, \"namespace\": \"x\"}",
      0, "namespace.json: \"block_size\" is missing" },
    { "{\"block_size\": 4096, \"format_version\": 2, \"header_size\": 4096, \"namespace\": \"x\"}",
      0, "namespace.json: \"format_version\" is 2, not 1" },
    { "{\"block_size\": 4096, \"format_version\": 1, \"header_size\": 512, \"namespace\": \"x\"}",
      0, "namespace.json: \"header_size\" is 512, not 4096" },
    { "{\"block_size\": 4096, \"format_version\": 1, \"header_size\": 4096, \"namespace\": 7}",
      0, "namespace.json: \"namespace\" is not a string" },
    { "{\"block_size\": 4096, \"format_version\": 1, \"header_size\": 4096}",
      0, "namespace.json: \"namespace\" is missing" },
    { "{\"block_size\": 4096, \"format_version\": 1, \"header_size\": 4096, \"namespace\": \"x\","
      " \"owner\": \"mallory\"}",
      0, "namespace.json: unknown member \"owner\"" },
    { "[4096, 1]", 0, "namespace.json: not a JSON object" },
    /* json-glib 1.6 leaks what it parsed when text follows the value: the
     * pre-scan refuses it first (found by fuzz-namespace) */
    { " 0[41],69]", 0, "namespace.json: data after the JSON value (at byte 3)" },
    { "{\"block_size\": 4096} {}", 0, "namespace.json: data after the JSON value (at byte 22)" },
    { "\"kvtier\"", 0, "namespace.json: not a JSON object" },
    { "{\"block_size\": 4096,", 0, "namespace.json: not valid JSON: " },
    { "", 0, "namespace.json: empty" },
    { deep, 0, "namespace.json: nested deeper than 64 levels" },
    { long_json, 0, "namespace.json: 70017 bytes, more than the 65536 allowed" },
    /* valid, but not what the directory's name was derived from */
    { "{\"block_size\": 8192, \"format_version\": 1, \"header_size\": 4096, \"namespace\": \"t\"}",
      0, "namespace.json does not match its directory: its namespace and block size belong in"
         " kvtier-" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_auto(HandRoot) hr = { 0 };
      g_auto(Result) r = { 0 };
      g_autoptr(GError) error = NULL;
      g_autofree char *json_path = NULL;

      hand_root_init (&hr, "t", 4096, FALSE);
      json_path = g_build_filename (hr.dir, "namespace.json", NULL);
      g_assert_true (g_file_set_contents (json_path, cases[i].json, -1, &error));
      g_assert_no_error (error);
      g_free (hand_root_chunk (&hr, 1, 4096, cases[i].chunk_len));

      for (guint verify = 0; verify < 2; verify++)
        {
          g_test_message ("case %u, %s", i, verify ? "--verify" : "sizes only");
          run_kvtier (&r, NULL, "inspect", "fs", hr.root, verify ? "--verify" : NULL, NULL);
          g_assert_cmpint (r.status, ==, 1);
          assert_contains (r.out, ": 1 namespace\n");
          assert_contains (r.out, "(kvtier layout, namespace unknown)");
          assert_contains (r.out, json_path);
          assert_contains (r.out, cases[i].message);
          assert_contains (r.out, "chunks         1 (");
          if (verify)
            assert_contains (r.out, "verified       not possible: namespace.json cannot be trusted");
          /* no criticals, no warnings: the bad file is the only news */
          g_assert_cmpstr (r.err, ==, "");
          result_clear (&r);
        }
    }
}

/* Sizes: short, too long, and a header that disagrees with namespace.json,
 * each named as such (every one was "short file"). */
static void
test_inspect_wrong_sizes (void)
{
  g_auto(HandRoot) hr = { 0 };
  g_auto(Result) r = { 0 };
  g_autofree char *good = NULL, *truncated = NULL, *extended = NULL, *other_len = NULL;
  g_autofree char *short_chunk = NULL;
  g_autofree char *line = NULL;

  hand_root_init (&hr, "t", 4096, TRUE);
  good = hand_root_chunk (&hr, 1, 4096, 8192);
  truncated = hand_root_chunk (&hr, 2, 4096, 4096 + 100);
  extended = hand_root_chunk (&hr, 3, 4096, 8192 + 10);
  other_len = hand_root_chunk (&hr, 4, 8192, 4096 + 8192);
  short_chunk = hand_root_chunk (&hr, 5, 4096, 100);

  run_kvtier (&r, NULL, "inspect", "fs", hr.root, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, "(kvtier layout, namespace \"t\", chunks of 4 KiB)");
  assert_contains (r.out, "chunks         5 (");
  assert_contains (r.out, "wrong size     4\n");
  line = g_strdup_printf ("bad: %s: short file (4196 bytes, a chunk is 8192)", truncated);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("bad: %s: too long (8202 bytes, a chunk is 8192)", extended);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("bad: %s: too long (12288 bytes, a chunk is 8192)", other_len);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("bad: %s: short file (100 bytes, a chunk is 8192)", short_chunk);
  assert_contains (r.out, line);
  g_free (line);
  g_assert_null (strstr (r.out, good));
  result_clear (&r);

  /* --verify reads the header: its payload length is the first suspect. */
  run_kvtier (&r, NULL, "inspect", "fs", hr.root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, "verified       1 ok, 4 bad");
  assert_contains (r.out, "short file                   2");
  assert_contains (r.out, "too long                     1");
  assert_contains (r.out, "wrong payload length         1");
  line = g_strdup_printf ("bad: %s: short file (4196 bytes, a chunk is 8192)", truncated);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("bad: %s: too long (8202 bytes, a chunk is 8192)", extended);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("bad: %s: wrong payload length (the header says 8192 bytes,"
                          " namespace.json 4096)", other_len);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("bad: %s: short file (100 bytes, shorter than the 4096-byte header)",
                          short_chunk);
  assert_contains (r.out, line);
  g_assert_cmpstr (r.err, ==, "");
}

/* What the tier never writes is reported by name and reason, and left
 * unread: links are not followed, FIFOs not opened, other users' files
 * not trusted (all were skipped without a word, or followed). */
static void
test_inspect_hostile_entries (void)
{
  g_auto(HandRoot) hr = { 0 };
  g_auto(HandRoot) elsewhere = { 0 };
  g_auto(Result) r = { 0 };
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *good = NULL, *outside = NULL, *foreign = NULL;
  g_autofree char *link = NULL, *fifo = NULL, *unknown = NULL, *shard_link = NULL;
  g_autofree char *junk = NULL, *line = NULL, *open_to_all = NULL;
  gboolean as_root = getuid () == 0;
  JsonObject *ignored;

  hand_root_init (&hr, "t", 4096, TRUE);
  hand_root_init (&elsewhere, "t", 4096, TRUE);
  good = hand_root_chunk (&hr, 1, 4096, 8192);
  /* a valid chunk of the same namespace, outside the root */
  outside = hand_root_chunk (&elsewhere, 2, 4096, 8192);
  {
    g_autofree char *shard = g_path_get_dirname (good);
    g_autofree char *outside_shard = g_path_get_dirname (outside);
    g_autofree char *outside_name = g_path_get_basename (outside);
    g_autofree char *outside_shard_name = g_path_get_basename (outside_shard);

    link = g_build_filename (shard, "02_g0.kv", NULL);
    g_assert_cmpint (symlink (outside, link), ==, 0);
    fifo = g_build_filename (shard, "03_g0.kv", NULL);
    g_assert_cmpint (mkfifo (fifo, 0600), ==, 0);
    unknown = g_build_filename (shard, "notes.txt", NULL);
    g_assert_true (g_file_set_contents (unknown, "hello", -1, &error));
    /* a whole shard directory through a link: the outside chunk's shard,
     * unless that is the good chunk's */
    shard_link = g_build_filename (hr.dir, outside_shard_name, NULL);
    if (!g_str_equal (shard_link, shard))
      g_assert_cmpint (symlink (outside_shard, shard_link), ==, 0);
    else
      g_clear_pointer (&shard_link, g_free);
    (void) outside_name;
  }
  junk = g_build_filename (hr.root, "junk", NULL);
  g_assert_true (g_file_set_contents (junk, "x", -1, &error));
  open_to_all = hand_root_chunk (&hr, 5, 4096, 8192);
  g_assert_cmpint (g_chmod (open_to_all, 0666), ==, 0);
  if (as_root)
    {
      foreign = hand_root_chunk (&hr, 4, 4096, 8192);
      g_assert_cmpint (chown (foreign, 65534, 65534), ==, 0);
    }

  run_kvtier (&r, NULL, "inspect", "fs", hr.root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, "chunks         1 (");
  assert_contains (r.out, "verified       1 ok, 0 bad");
  line = g_strdup_printf ("ignored: %s: symbolic link (not followed)", link);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("ignored: %s: not a regular file", fifo);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("ignored: %s: unknown name", unknown);
  assert_contains (r.out, line);
  g_free (line);
  line = g_strdup_printf ("ignored: %s: unknown name", junk);
  assert_contains (r.out, line);
  g_free (line);
  if (shard_link != NULL)
    {
      line = g_strdup_printf ("ignored: %s: symbolic link (not followed)", shard_link);
      assert_contains (r.out, line);
      g_free (line);
    }
  line = g_strdup_printf ("ignored: %s: writable by any user (mode 0666)", open_to_all);
  assert_contains (r.out, line);
  g_free (line);
  if (foreign != NULL)
    {
      line = g_strdup_printf ("ignored: %s: owned by another user (uid 65534, the root's owner"
                              " is uid 0)", foreign);
      assert_contains (r.out, line);
      g_free (line);
    }
  line = g_strdup_printf ("ignored entries: %u (", 5 + (shard_link != NULL) + (foreign != NULL));
  assert_contains (r.out, line);
  g_assert_null (strstr (r.out, outside));
  g_assert_cmpstr (r.err, ==, "");
  result_clear (&r);

  run_kvtier (&r, NULL, "inspect", "fs", hr.root, "--json", NULL);
  g_assert_cmpint (r.status, ==, 1);
  g_assert_true (json_parser_load_from_data (parser, r.out, -1, &error));
  g_assert_no_error (error);
  ignored = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)),
                                           "ignored");
  g_assert_cmpint (json_object_get_int_member (ignored, "count"), ==,
                   5 + (shard_link != NULL) + (foreign != NULL));
  g_assert_cmpint (json_object_get_int_member (ignored, "writable by any user"), ==, 1);
  g_assert_cmpint (json_object_get_int_member (ignored, "symbolic link (not followed)"), ==,
                   1 + (shard_link != NULL));
  g_assert_cmpint (json_object_get_int_member (ignored, "not a regular file"), ==, 1);
  g_assert_cmpint (json_object_get_int_member (ignored, "unknown name"), ==, 2);
}

/* The vLLM layout's names are known too: its chunks are counted, the
 * model read from config.json, and only what vLLM does not write is
 * reported. */
static void
test_inspect_vllm_layout (void)
{
  g_auto(Result) r = { 0 };
  g_autoptr(GError) error = NULL;
  g_autofree char *root = g_dir_make_tmp ("kvtier-vllm-XXXXXX", &error);
  g_autofree char *identity = g_build_filename (root, "org_model_0a2dfacb72cf", NULL);
  g_autofree char *config = g_build_filename (identity, "config.json", NULL);
  g_autofree char *leaf = g_build_filename (root, "org_model_0a2dfacb72cf_r0", "4fc", "82_g0", NULL);
  g_autofree char *chunk = g_build_filename (leaf, "4fc82b26aecb47d2.bin", NULL);
  g_autofree char *temp = g_build_filename (leaf, "4fc82b26aecb47d2.bin_1234.tmp", NULL);
  g_autofree char *stray = g_build_filename (leaf, "4FC82B26.bin", NULL);
  g_autofree char *line = NULL;

  g_assert_no_error (error);
  g_assert_cmpint (g_mkdir_with_parents (identity, 0700), ==, 0);
  g_assert_cmpint (g_mkdir_with_parents (leaf, 0700), ==, 0);
  g_assert_true (g_file_set_contents (config, "{\"model_name\": \"org/model\"}", -1, &error));
  g_assert_true (g_file_set_contents (chunk, "0123456789", -1, &error));
  g_assert_true (g_file_set_contents (temp, "01234", -1, &error));
  g_assert_true (g_file_set_contents (stray, "x", -1, &error));
  g_assert_no_error (error);

  run_kvtier (&r, NULL, "inspect", "fs", root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, ": 1 namespace\n");
  assert_contains (r.out, "_r0  (vLLM layout, model org/model)");
  assert_contains (r.out, "chunks         1 (10 B)");
  assert_contains (r.out, "verified       not possible: vLLM files have no header or checksum");
  assert_contains (r.out, "temp files     1 (5 B), 0 stale");
  line = g_strdup_printf ("ignored: %s: unknown name", stray);
  assert_contains (r.out, line);
  assert_contains (r.out, "ignored entries: 1 (");
  result_clear (&r);

  g_assert_cmpint (g_remove (stray), ==, 0);
  run_kvtier (&r, NULL, "inspect", "fs", root, NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_null (strstr (r.out, "ignored"));
  g_assert_cmpint (nftw (root, remove_entry, 16, FTW_DEPTH | FTW_PHYS), ==, 0);
}

/* Chunk files without namespace.json: one namespace, its chunks counted,
 * the missing file named (it read "0 namespaces"). */
static void
test_inspect_missing_namespace_json (void)
{
  g_auto(HandRoot) hr = { 0 };
  g_auto(Result) r = { 0 };
  g_autofree char *problem = NULL;

  hand_root_init (&hr, "t", 4096, FALSE);
  g_free (hand_root_chunk (&hr, 1, 4096, 8192));
  g_free (hand_root_chunk (&hr, 2, 4096, 8192));

  run_kvtier (&r, NULL, "inspect", "fs", hr.root, "--verify", NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.out, ": 1 namespace\n");
  problem = g_strdup_printf ("problem        %s/namespace.json is missing\n", hr.dir);
  assert_contains (r.out, problem);
  assert_contains (r.out, "chunks         2 (16 KiB), unchecked: the chunk size is unknown");
  assert_contains (r.out, "verified       not possible: namespace.json cannot be trusted");
  g_assert_cmpstr (r.err, ==, "");
}

static gboolean
built_with_asan (void)
{
#if defined(__SANITIZE_ADDRESS__)
  return TRUE;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return TRUE;
#else
  return FALSE;
#endif
#else
  return FALSE;
#endif
}

/* Runs kvtier under valgrind and returns the reports of its definite
 * leaks, the stack of each. */
static GStrv
valgrind_definite_leaks (const char         *valgrind,
                         const char * const *args)
{
  g_autofree char *kvtier = g_test_build_filename (G_TEST_BUILT, "..", "tools", "kvtier", NULL);
  g_autoptr(GPtrArray) argv = g_ptr_array_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  g_autofree char *log = NULL;
  int wait_status = 0;

  g_ptr_array_add (argv, (gpointer) valgrind);
  g_ptr_array_add (argv, (gpointer) "--leak-check=full");
  g_ptr_array_add (argv, (gpointer) "--show-leak-kinds=definite");
  g_ptr_array_add (argv, kvtier);
  for (guint i = 0; args[i] != NULL; i++)
    g_ptr_array_add (argv, (gpointer) args[i]);
  g_ptr_array_add (argv, NULL);
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                               &out, &log, &wait_status, &error));
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (wait_status));
  /* each report: "N bytes in M blocks are definitely lost ...", its stack */
  return g_strsplit (log, "are definitely lost", -1);
}

/* The kvtier command's own code frees what it allocates, on success and
 * error paths (tool_parse_size leaked the text after the number). The
 * leaks of other parts (GOptionContext strings in bench) are theirs. */
static void
test_no_leaks (void)
{
  g_autofree char *valgrind = g_find_program_in_path ("valgrind");
  g_autoptr(GError) error = NULL;
  g_autofree char *root = g_dir_make_tmp ("kvtier-leaks-XXXXXX", &error);
  g_autofree char *good = write_temp ("leaks.conf", "[primary]\nsize = 64MiB\nslot-size = 1MiB\n");
  g_autofree char *trace = write_temp ("leaks-trace.jsonl", "{\"hash_ids\": [[[[1]]]]}\n");
  const char * const commands[][8] = {
    { "bench", "--chunk-size", "12KiB", "--layers", "5", NULL },
    { "bench", "--chunk-size", "12XB", NULL },
    { "bench", "--trace", trace, NULL },
    { "config", "check", good, NULL },
    { "plugins", NULL },
    { "inspect", "fs", root, "--verify", NULL },
    { "inspect", "fs", "/nonexistent/kvtier", NULL },
    { "help", NULL },
  };
  const char * const sources[] = { "(kvtier.c:", "(kvtier-inspect.c:", "(kvtier-workload.c:",
                                   "(kvtier-json.c:", "(kvtier-namespace.c:" };

  g_assert_no_error (error);
  if (valgrind == NULL || built_with_asan ())
    {
      /* an ASan build's LeakSanitizer checks every run of kvtier instead */
      g_test_skip (valgrind == NULL ? "valgrind is not installed"
                                    : "an ASan build does not run under valgrind");
      g_rmdir (root);
      g_remove (good);
      g_remove (trace);
      return;
    }
  /* something for inspect to read, and a namespace.json it refuses */
  {
    g_autofree char *ns = g_build_filename (root, "kvtier-0000000000000000", NULL);
    g_autofree char *json = g_build_filename (ns, "namespace.json", NULL);

    g_assert_cmpint (g_mkdir (ns, 0700), ==, 0);
    g_assert_true (g_file_set_contents (json, "{\"block_size\": -1}", -1, &error));
  }

  for (guint c = 0; c < G_N_ELEMENTS (commands); c++)
    {
      g_auto(GStrv) leaks = valgrind_definite_leaks (valgrind, commands[c]);
      guint n = 0;

      for (guint i = 1; leaks[i] != NULL; i++)
        {
          /* whose leak: the innermost frame in the command's code (tools/) */
          const char *frame = strstr (leaks[i], " (kvtier");

          for (guint s = 0; frame != NULL && s < G_N_ELEMENTS (sources); s++)
            if (g_str_has_prefix (frame + 1, sources[s]))
              {
                g_test_message ("kvtier %s %s: a leak in %s%s", commands[c][0],
                                commands[c][1] != NULL ? commands[c][1] : "", sources[s],
                                leaks[i]);
                n++;
              }
        }
      g_assert_cmpuint (n, ==, 0);
    }

  g_remove (good);
  g_remove (trace);
  g_assert_cmpint (nftw (root, remove_entry, 16, FTW_DEPTH | FTW_PHYS), ==, 0);
}

/* A trace line is bounded and its nesting checked before json-glib, which
 * recurses, parses it (100,000 levels overflowed the stack). */
static void
test_bench_hostile_trace (void)
{
  g_auto(Result) r = { 0 };
  g_autofree char *open_brackets = g_strnfill (100000, '[');
  g_autofree char *close_brackets = g_strnfill (100000, ']');
  g_autofree char *deep_text = g_strdup_printf ("{\"timestamp\": 0, \"hash_ids\": [1]}\n"
                                                "{\"hash_ids\": %s%s}\n",
                                                open_brackets, close_brackets);
  g_autofree char *deep = write_temp ("deep-trace.jsonl", deep_text);
  g_autofree char *deep_objects_text = NULL;
  g_autofree char *deep_objects = NULL;
  g_autofree char *long_ids = NULL;
  g_autofree char *long_text = NULL;
  g_autofree char *long_line = NULL;
  g_autofree char *in_strings = NULL;
  g_autofree char *trailing = NULL;
  GString *objects = g_string_new (NULL);
  GString *ids = g_string_new ("1");

  run_kvtier (&r, NULL, "bench", "--trace", deep, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "deep-trace.jsonl:2: nested deeper than 64 levels (at byte 77)");
  result_clear (&r);

  for (guint i = 0; i < 100000; i++)
    g_string_append (objects, "{\"a\":");
  g_string_append (objects, "1");
  for (guint i = 0; i < 100000; i++)
    g_string_append_c (objects, '}');
  deep_objects_text = g_string_free (objects, FALSE);
  deep_objects = write_temp ("deep-objects.jsonl", deep_objects_text);
  run_kvtier (&r, NULL, "bench", "--trace", deep_objects, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "deep-objects.jsonl:1: nested deeper than 64 levels (at byte 321)");
  result_clear (&r);

  /* Text after a line's value is refused before json-glib, which leaks
   * its nodes on that error (found by fuzz-trace-line). */
  trailing = write_temp ("trailing-trace.jsonl", "{\"hash_ids\": [1]} ]}\n");
  run_kvtier (&r, NULL, "bench", "--trace", trailing, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "trailing-trace.jsonl:1: data after the JSON value (at byte 19)");
  result_clear (&r);

  /* 64 levels are fine; brackets in strings, escaped quotes included, are
   * not nesting. */
  in_strings = write_temp ("strings-trace.jsonl",
                           "{\"note\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\","
                           " \"quoted\": \"\\\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\\\","
                           " \"hash_ids\": [1, 2]}\n");
  run_kvtier (&r, NULL, "bench", "--trace", in_strings, "--chunk-size", "16KiB", "--layers", "2",
              "--gpu-size", "1MiB", "--primary-size", "2MiB", "--quiet", NULL);
  g_assert_cmpint (r.status, ==, 0);
  g_assert_cmpstr (r.err, ==, "");
  result_clear (&r);

  /* A line longer than 1 MiB is refused before it is parsed. */
  while (ids->len < 1100 * 1024)
    g_string_append (ids, ", 1234567");
  long_ids = g_string_free (ids, FALSE);
  long_text = g_strdup_printf ("{\"hash_ids\": [%s]}\n", long_ids);
  long_line = write_temp ("long-trace.jsonl", long_text);
  run_kvtier (&r, NULL, "bench", "--trace", long_line, NULL);
  g_assert_cmpint (r.status, ==, 1);
  assert_contains (r.err, "long-trace.jsonl:1: ");
  assert_contains (r.err, " bytes long, more than the 1048576 allowed");

  g_remove (deep);
  g_remove (trailing);
  g_remove (deep_objects);
  g_remove (in_strings);
  g_remove (long_line);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/cli/usage", test_usage);
  g_test_add_func ("/kvtier/cli/help-everywhere", test_help_everywhere);
  g_test_add_func ("/kvtier/cli/bench/usage-errors", test_bench_usage_errors);
  g_test_add_func ("/kvtier/cli/bench/bad-input", test_bench_bad_input);
  g_test_add_func ("/kvtier/cli/bench/synthetic", test_bench_synthetic);
  g_test_add_func ("/kvtier/cli/bench/repeated-ids", test_bench_repeated_ids);
  g_test_add_func ("/kvtier/cli/bench/failures", test_bench_failures);
  g_test_add_func ("/kvtier/cli/bench/usage-error-frees", test_bench_usage_error_frees);
  g_test_add_func ("/kvtier/cli/plugins", test_plugins);
  g_test_add_func ("/kvtier/cli/plugins/descriptions", test_plugins_descriptions);
  g_test_add_func ("/kvtier/cli/config-check", test_config_check);
  g_test_add_func ("/kvtier/cli/config-check-builds", test_config_check_builds);
  g_test_add_func ("/kvtier/cli/inspect-fs", test_inspect_fs);
  g_test_add_func ("/kvtier/cli/inspect-fs/bad-namespace-json", test_inspect_bad_namespace_json);
  g_test_add_func ("/kvtier/cli/inspect-fs/wrong-sizes", test_inspect_wrong_sizes);
  g_test_add_func ("/kvtier/cli/inspect-fs/hostile-entries", test_inspect_hostile_entries);
  g_test_add_func ("/kvtier/cli/inspect-fs/missing-namespace-json",
                   test_inspect_missing_namespace_json);
  g_test_add_func ("/kvtier/cli/inspect-fs/vllm-layout", test_inspect_vllm_layout);
  g_test_add_func ("/kvtier/cli/inspect-fs/slab-layout", test_inspect_slab_layout);
  g_test_add_func ("/kvtier/cli/no-leaks", test_no_leaks);
  g_test_add_func ("/kvtier/cli/bench/hostile-trace", test_bench_hostile_trace);
  g_test_add_func ("/kvtier/cli/bench/config-without-slot-size",
                   test_bench_config_without_slot_size);

  status = g_test_run ();

  if (scratch_dir != NULL)
    {
      g_autoptr(GDir) dir = g_dir_open (scratch_dir, 0, NULL);
      const char *name;

      while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
        {
          g_autofree char *path = g_build_filename (scratch_dir, name, NULL);

          g_remove (path);
        }
      g_rmdir (scratch_dir);
      g_clear_pointer (&scratch_dir, g_free);
    }
  return status;
}
