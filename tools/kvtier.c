/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"
#include "kvtier-fleet.h"

#include <errno.h>
#include <ftw.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <json-glib/json-glib.h>

/* The `kvtier` command: subcommands bench (kvtier-bench.c), plugins,
 * config check, and inspect fs (kvtier-inspect.c). Exit codes: 0 success,
 * 1 the command failed, 2 it was used wrongly. */

/* ------------------------------------------------------------------------ */
/* Helpers */

gboolean
tool_parse_size (const char  *text,
                 guint64     *out_size,
                 GError     **error)
{
  static const struct { const char *unit; guint64 mult; } units[] = {
    { "", 1 }, { "b", 1 }, { "kib", 1ULL << 10 }, { "mib", 1ULL << 20 },
    { "gib", 1ULL << 30 }, { "tib", 1ULL << 40 },
  };
  g_autofree char *unit = NULL;
  g_autofree char *unit_text = NULL;
  char *end = NULL;
  gdouble value;

  value = g_ascii_strtod (text, &end);
  if (end == text || !(value >= 0) || !isfinite (value))
    goto bad;
  unit_text = g_strstrip (g_strdup (end));
  unit = g_ascii_strdown (unit_text, -1);
  for (guint i = 0; i < G_N_ELEMENTS (units); i++)
    if (g_str_equal (unit, units[i].unit))
      {
        gdouble bytes = value * units[i].mult;

        if (bytes > (gdouble) G_MAXUINT64 || bytes != floor (bytes))
          goto bad;
        *out_size = (guint64) bytes;
        return TRUE;
      }

bad:
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
               "'%s' is not a size (a number of bytes with an optional unit: B, KiB,"
               " MiB, GiB, TiB)", text);
  return FALSE;
}

char *
tool_format_size (guint64 bytes)
{
  static const char * const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
  gdouble value = (gdouble) bytes;
  guint u = 0;

  while (value >= 1024 && u + 1 < G_N_ELEMENTS (units))
    {
      value /= 1024;
      u++;
    }
  if (u == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT " B", bytes);
  return g_strdup_printf (value == floor (value) ? "%.0f %s" : "%.1f %s", value, units[u]);
}

char *
tool_format_count (guint64 n)
{
  return g_strdup_printf ("%" G_GUINT64_FORMAT, n);
}

void
tool_json_add_int (JsonBuilder *builder,
                   const char  *name,
                   gint64       value)
{
  json_builder_set_member_name (builder, name);
  json_builder_add_int_value (builder, value);
}

void
tool_json_add_double (JsonBuilder *builder,
                      const char  *name,
                      gdouble      value)
{
  json_builder_set_member_name (builder, name);
  json_builder_add_double_value (builder, value);
}

void
tool_json_add_string (JsonBuilder *builder,
                      const char  *name,
                      const char  *value)
{
  json_builder_set_member_name (builder, name);
  json_builder_add_string_value (builder, value);
}

int
tool_usage_error (GOptionContext *context,
                  const char     *format,
                  ...)
{
  g_autofree char *message = NULL;
  va_list args;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);
  g_printerr ("%s: %s\nTry “%s --help” for more information.\n",
              g_get_prgname (), message, g_get_prgname ());
  (void) context;
  return TOOL_EXIT_USAGE;
}

/* Monotonic nanoseconds, for the benches' timings. */
gint64
tool_now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

static int
remove_entry (const char        *path,
              const struct stat *sb,
              int                flag,
              struct FTW        *ftw)
{
  return remove (path);
}

/* Removes a directory a subcommand made for its run, without following
 * links out of it; says so when it cannot. */
void
tool_remove_tree (const char *root)
{
  if (nftw (root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
    g_printerr ("kvtier: could not remove %s: %s\n", root, g_strerror (errno));
}

KvTierRegistry *
tool_load_registry (gboolean  report_errors,
                    gboolean *out_plugin_errors)
{
  g_autoptr(GError) error = NULL;
  KvTierRegistry *registry = kv_tier_registry_new ();

  *out_plugin_errors = FALSE;
  if (!kv_tier_registry_load_plugins (registry, &error))
    {
      *out_plugin_errors = TRUE;
      if (report_errors)
        g_printerr ("kvtier: warning: %s\n", error->message);
    }
  return registry;
}

/* Loads each --tier-module into @registry; the tier types they define
 * are named after their files (doc/config.md, "Tier modules"). */
gboolean
tool_load_tier_modules (KvTierRegistry  *registry,
                        char           **paths,
                        GError         **error)
{
  for (guint i = 0; paths != NULL && paths[i] != NULL; i++)
    {
      g_auto(GStrv) names = kv_tier_registry_load_tier_module (registry, paths[i], error);
      g_autofree char *joined = NULL;

      if (names == NULL)
        return FALSE;
      joined = g_strjoinv (", ", names);
      g_debug ("%s defines tier types %s", paths[i], joined);
    }
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* kvtier plugins */

static void
print_type (KvTierRegistry *registry,
            gboolean        device,
            const char     *name)
{
  g_autoptr(GVariant) description = NULL;
  g_autoptr(GVariant) props = NULL;
  const char *gtype = NULL, *origin = NULL;
  GVariantIter iter;
  GVariant *prop;

  description = device ? kv_tier_registry_describe_device_type (registry, name, NULL)
                       : kv_tier_registry_describe_tier_type (registry, name, NULL);
  g_variant_lookup (description, "gtype", "&s", &gtype);
  g_variant_lookup (description, "origin", "&s", &origin);
  printf ("  %s  (%s, %s)\n", name, gtype, origin);

  props = g_variant_lookup_value (description, "properties", G_VARIANT_TYPE ("aa{sv}"));
  g_variant_iter_init (&iter, props);
  while ((prop = g_variant_iter_next_value (&iter)) != NULL)
    {
      const char *pname = NULL, *type = NULL, *def = NULL, *blurb = NULL;

      g_variant_lookup (prop, "name", "&s", &pname);
      g_variant_lookup (prop, "type", "&s", &type);
      g_variant_lookup (prop, "default", "&s", &def);
      g_variant_lookup (prop, "blurb", "&s", &blurb);
      printf ("      %-26s = %-16s (%s)\n", pname, *def != '\0' ? def : "(none)", type);
      if (*blurb != '\0')
        printf ("          %s\n", blurb);
      g_variant_unref (prop);
    }
}

static int
cmd_plugins (int    argc,
             char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = NULL;
  g_auto(GStrv) dirs = NULL;
  g_auto(GStrv) tiers = NULL;
  g_auto(GStrv) devices = NULL;
  g_auto(GStrv) tier_modules = NULL;
  gboolean as_json = FALSE;
  gboolean plugin_errors = FALSE;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &as_json, "Print the descriptions as JSON", NULL },
    TOOL_TIER_MODULE_OPTION (&tier_modules),
    { NULL }
  };

  context = g_option_context_new ("- list the tier and device types and their properties");
  g_option_context_set_summary (context,
    "Loads the plugins of KVTIER_PLUGIN_PATH and " KVTIER_PLUGINDIR "\n"
    "and lists every tier and device type with the properties a configuration can set,\n"
    "each with its default (what an object of the type runs with when the configuration\n"
    "does not set it) and a one-line description.\n"
    "Exits with 1 when a plugin failed to load.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);
  if (argc > 1)
    return tool_usage_error (context, "unexpected argument '%s'", argv[1]);

  registry = tool_load_registry (TRUE, &plugin_errors);
  if (!tool_load_tier_modules (registry, tier_modules, &error))
    {
      g_printerr ("kvtier: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  dirs = kv_tier_registry_get_plugin_dirs ();
  tiers = kv_tier_registry_list_tier_types (registry);
  devices = kv_tier_registry_list_device_types (registry);

  if (as_json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonGenerator) generator = json_generator_new ();
      g_autoptr(JsonNode) root = NULL;
      g_autofree char *text = NULL;

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "plugin_dirs");
      json_builder_begin_array (builder);
      for (guint i = 0; dirs[i] != NULL; i++)
        json_builder_add_string_value (builder, dirs[i]);
      json_builder_end_array (builder);
      for (int kind = 0; kind < 2; kind++)
        {
          char **names = kind == 0 ? tiers : devices;

          json_builder_set_member_name (builder, kind == 0 ? "tiers" : "devices");
          json_builder_begin_array (builder);
          for (guint i = 0; names[i] != NULL; i++)
            {
              g_autoptr(GVariant) description = kind == 0
                ? kv_tier_registry_describe_tier_type (registry, names[i], NULL)
                : kv_tier_registry_describe_device_type (registry, names[i], NULL);

              json_builder_add_value (builder, json_gvariant_serialize (description));
            }
          json_builder_end_array (builder);
        }
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      json_generator_set_root (generator, root);
      json_generator_set_pretty (generator, TRUE);
      text = json_generator_to_data (generator, NULL);
      printf ("%s\n", text);
    }
  else
    {
      printf ("Plugin directories (searched in order):\n");
      for (guint i = 0; dirs[i] != NULL; i++)
        printf ("  %s%s\n", dirs[i], g_file_test (dirs[i], G_FILE_TEST_IS_DIR) ? "" : "  (missing)");
      printf ("\nTier types:\n");
      if (tiers[0] == NULL)
        printf ("  (none: no tier plugin was found)\n");
      for (guint i = 0; tiers[i] != NULL; i++)
        print_type (registry, FALSE, tiers[i]);
      printf ("\nDevice types:\n");
      for (guint i = 0; devices[i] != NULL; i++)
        print_type (registry, TRUE, devices[i]);
    }

  return plugin_errors ? TOOL_EXIT_FAILURE : TOOL_EXIT_OK;
}

/* ------------------------------------------------------------------------ */
/* kvtier config check */

static void
print_value (const char *key,
             const char *value,
             gboolean    is_default,
             const char *blurb)
{
  g_autofree char *shown = g_strdup_printf ("%s%s", value, is_default ? "  (default)" : "");

  if (blurb != NULL && *blurb != '\0')
    printf ("    %-28s = %-20s  # %s\n", key, shown, blurb);
  else
    printf ("    %-28s = %s\n", key, shown);
}

static void
print_section (KvConfig       *config,
               KvTierRegistry *registry,
               GVariant       *section,
               const char     *title,
               gboolean        device)
{
  g_autoptr(GVariant) description = NULL;
  g_autoptr(GVariant) props = NULL;
  g_autoptr(GHashTable) listed = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GHashTable) blurbs = g_hash_table_new (g_str_hash, g_str_equal);
  const char *type = NULL, *gtype = NULL, *origin = NULL;
  GVariantIter iter;
  const char *key;
  GVariant *prop;

  g_variant_lookup (section, "type", "&s", &type);
  description = device ? kv_tier_registry_describe_device_type (registry, type, NULL)
                       : kv_tier_registry_describe_tier_type (registry, type, NULL);
  g_variant_lookup (description, "gtype", "&s", &gtype);
  g_variant_lookup (description, "origin", "&s", &origin);
  printf ("[%s]  type %s → %s (%s)\n", title, type, gtype, origin);

  /* the one-line description of each property */
  props = g_variant_lookup_value (description, "properties", G_VARIANT_TYPE ("aa{sv}"));
  g_variant_iter_init (&iter, props);
  while ((prop = g_variant_iter_next_value (&iter)) != NULL)
    {
      const char *pname = NULL, *blurb = NULL;

      g_variant_lookup (prop, "name", "&s", &pname);
      g_variant_lookup (prop, "blurb", "&s", &blurb);
      g_hash_table_insert (blurbs, (gpointer) pname, (gpointer) blurb);
      g_variant_unref (prop);
    }

  /* What the file sets, in its order, then the defaults: the values a
   * tier of the type runs with when the file does not set them. */
  g_variant_iter_init (&iter, section);
  while (g_variant_iter_next (&iter, "{&sv}", &key, NULL))
    {
      g_autofree char *value = NULL;

      if (g_str_equal (key, "name") || g_str_equal (key, "type"))
        continue;
      value = kv_config_get_value (config, title, key);
      print_value (key, value, FALSE, g_hash_table_lookup (blurbs, key));
      g_hash_table_add (listed, (gpointer) key);
    }
  g_variant_iter_init (&iter, props);
  while ((prop = g_variant_iter_next_value (&iter)) != NULL)
    {
      const char *pname = NULL, *def = NULL;

      g_variant_lookup (prop, "name", "&s", &pname);
      g_variant_lookup (prop, "default", "&s", &def);
      if (!g_hash_table_contains (listed, pname))
        print_value (pname, *def != '\0' ? def : "(none)", TRUE,
                     g_hash_table_lookup (blurbs, pname));
      g_variant_unref (prop);
    }
}

static int
cmd_config (int    argc,
            char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(GVariant) variant = NULL;
  g_autoptr(GVariant) device = NULL;
  g_autoptr(GVariant) tiers = NULL;
  gboolean plugin_errors = FALSE;
  g_autofree char *size = NULL;
  g_autofree char *slot = NULL;
  g_autofree char *policy = NULL;
  guint64 slot_size;
  GVariantIter iter;
  GVariant *tier;
  g_auto(GStrv) tier_modules = NULL;
  GOptionEntry entries[] = {
    TOOL_TIER_MODULE_OPTION (&tier_modules),
    { NULL }
  };

  context = g_option_context_new ("check FILE - validate a configuration and print the resolved objects");
  g_option_context_set_summary (context,
    "Parses FILE, checks every section and key against the registered tier and device\n"
    "types, and prints each object with every property: the values the file sets and the\n"
    "defaults of the rest. Every object is constructed and checked as building would,\n"
    "but nothing is started: no memory is mapped and no file or device is opened.\n"
    "Exits with 1 when the file is invalid or building it would fail.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);
  if (argc < 2)
    return tool_usage_error (context, "missing subcommand (config check FILE)");
  if (!g_str_equal (argv[1], "check"))
    return tool_usage_error (context, "unknown subcommand '%s' (config check FILE)", argv[1]);
  if (argc < 3)
    return tool_usage_error (context, "missing FILE (config check FILE)");
  if (argc > 3)
    return tool_usage_error (context, "unexpected argument '%s'", argv[3]);

  registry = tool_load_registry (TRUE, &plugin_errors);
  if (!tool_load_tier_modules (registry, tier_modules, &error))
    {
      g_printerr ("kvtier: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }
  config = kv_config_new_from_file (registry, argv[2], &error);
  if (config == NULL)
    {
      g_printerr ("kvtier: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }

  /* Valid means that building would succeed: build everything but
   * start nothing. */
  if (!kv_config_check (config, &error))
    {
      g_printerr ("kvtier: %s\n", error->message);
      return TOOL_EXIT_FAILURE;
    }

  printf ("%s: valid\n\n", argv[2]);
  slot_size = kv_config_get_slot_size (config);
  size = tool_format_size (kv_config_get_primary_size (config));
  slot = tool_format_size (slot_size);
  policy = kv_config_get_value (config, "primary", "policy");
  printf ("[primary]  %" G_GUINT64_FORMAT " slots of %s (%s), policy %s\n",
          kv_config_get_primary_size (config) / slot_size, slot, size,
          policy != NULL ? policy : "lru");
  for (const char * const *k = (const char *[]) { "shared", "file", "events", NULL }; *k; k++)
    {
      g_autofree char *value = kv_config_get_value (config, "primary", *k);

      if (value != NULL)
        printf ("    %-28s = %s\n", *k, value);
    }

  variant = g_variant_ref_sink (kv_config_to_variant (config));
  device = g_variant_lookup_value (variant, "device", G_VARIANT_TYPE_VARDICT);
  if (device != NULL)
    print_section (config, registry, device, "device", TRUE);
  else
    printf ("[device]   none (kvtier bench adds a host device)\n");

  tiers = g_variant_lookup_value (variant, "tiers", G_VARIANT_TYPE ("aa{sv}"));
  g_variant_iter_init (&iter, tiers);
  for (guint index = 1; (tier = g_variant_iter_next_value (&iter)) != NULL; index++)
    {
      const char *name = NULL;
      g_autofree char *title = NULL;

      g_variant_lookup (tier, "name", "&s", &name);
      title = g_strdup_printf ("tier %s", name);
      printf ("\n#%u ", index);
      print_section (config, registry, tier, title, FALSE);
      g_variant_unref (tier);
    }
  if (g_variant_n_children (tiers) == 0)
    printf ("\n(no secondary tiers)\n");
  return TOOL_EXIT_OK;
}

/* ------------------------------------------------------------------------ */

typedef struct
{
  const char *name;
  int       (*run) (int argc, char **argv);
  const char *summary;
} Command;

static const Command commands[] = {
  { "bench", tool_bench, "replay requests through device, primary and tiers; report what tiering saved" },
  { "plugins", cmd_plugins, "list the tier and device types and their properties" },
  { "config", cmd_config, "config check FILE: validate a configuration, print the resolved objects" },
  { "inspect", tool_inspect, "inspect fs ROOT: namespaces, chunks, checksums, stale files" },
#ifdef KVTIER_HAVE_SERVE
  { "serve", tool_serve, "serve --config FILE: run a node, serve its tiers to peers, /metrics" },
  { "route", tool_route, "route --config FILE --nodes …: pick the node of each request (HTTP)" },
#endif
#ifdef KVTIER_HAVE_PEER_CHECK
  { "peer", tool_peer, "peer check HOST:PORT --config FILE: can this node use that peer?" },
#endif
};

static char *
commands_help (void)
{
  GString *s = g_string_new ("Commands:\n");

  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    g_string_append_printf (s, "  %-9s %s\n", commands[i].name, commands[i].summary);
  g_string_append (s, "\nRun “kvtier COMMAND --help” for the options of a command.\n"
                      "Exit status: 0 success, 1 failure, 2 usage error.");
  return g_string_free (s, FALSE);
}

int
main (int   argc,
      char *argv[])
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *help = commands_help ();
  gboolean version = FALSE;
  GOptionEntry entries[] = {
    { "version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL },
    { NULL }
  };

  setlocale (LC_ALL, "");
  g_set_prgname ("kvtier");

  context = g_option_context_new ("COMMAND [OPTION…] - tiered KV-cache offloading");
  g_option_context_set_strict_posix (context, TRUE);
  g_option_context_set_description (context, help);
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);

  if (version)
    {
      printf ("kvtier %s (libkvtier %u.%u.%u, plugin ABI %u)\n", PACKAGE_VERSION,
              kv_get_major_version (), kv_get_minor_version (), kv_get_micro_version (),
              (guint) KV_PLUGIN_ABI_VERSION);
      return TOOL_EXIT_OK;
    }
  if (argc < 2)
    return tool_usage_error (context, "missing COMMAND");

  if (g_str_equal (argv[1], "help"))
    {
      g_autofree char *text = g_option_context_get_help (context, TRUE, NULL);

      if (argc > 2)
        {
          char *sub_argv[] = { argv[2], (char *) "--help", NULL };

          for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
            if (g_str_equal (commands[i].name, argv[2]))
              {
                g_autofree char *prgname = g_strdup_printf ("kvtier %s", argv[2]);

                g_set_prgname (prgname);
                return commands[i].run (2, sub_argv);
              }
          return tool_usage_error (context, "unknown command '%s'", argv[2]);
        }
      printf ("%s", text);
      return TOOL_EXIT_OK;
    }

  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    if (g_str_equal (commands[i].name, argv[1]))
      {
        g_autofree char *prgname = g_strdup_printf ("kvtier %s", argv[1]);

        g_set_prgname (prgname);
        return commands[i].run (argc - 1, argv + 1);
      }

  return tool_usage_error (context, "unknown command '%s'", argv[1]);
}
