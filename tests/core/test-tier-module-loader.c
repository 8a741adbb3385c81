/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <kvtier.h>

/* KvTierModuleLoader and KvTierRegistry's tier modules, with a loader
 * written here: no interpreter, so the registry's part (type discovery,
 * names, the per-process cache, errors, completion contexts, `module =`
 * in configurations) runs under valgrind too. The Python and GJS loaders
 * are tested through the kvtier command (tests/cli/test_tier_modules.py).
 *
 * TestLineLoader "evaluates" a `.tiers` file: each line names a tier class
 * to define (a new GType derived from TestModuleTier); a line `!TEXT`
 * fails with TEXT; a line `?` fails without an error. */

/* ------------------------------------------------------------------------ */
/* A concrete tier to derive from */

#define TEST_TYPE_MODULE_TIER (test_module_tier_get_type ())
G_DECLARE_DERIVABLE_TYPE (TestModuleTier, test_module_tier, TEST, MODULE_TIER, KvSecondaryTier)

struct _TestModuleTierClass
{
  KvSecondaryTierClass parent_class;
};

G_DEFINE_TYPE (TestModuleTier, test_module_tier, KV_TYPE_SECONDARY_TIER)

static KvLookupResult
test_module_tier_lookup (KvSecondaryTier *tier,
                         KvKey           *key,
                         KvRequest       *request)
{
  return KV_LOOKUP_RESULT_MISS;
}

static gboolean
test_module_tier_submit (KvSecondaryTier  *tier,
                         KvTransferJob    *job,
                         GError          **error)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);

  kv_secondary_tier_complete_job (tier, result);
  return TRUE;
}

static KvOffloadPolicy
test_module_tier_on_new_request (KvSecondaryTier *tier,
                                 KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static gboolean
test_module_tier_drain_jobs (KvSecondaryTier  *tier,
                             GError          **error)
{
  return TRUE;
}

static void
test_module_tier_class_init (TestModuleTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  tier_class->lookup = test_module_tier_lookup;
  tier_class->submit_store = test_module_tier_submit;
  tier_class->submit_load = test_module_tier_submit;
  tier_class->on_new_request = test_module_tier_on_new_request;
  tier_class->drain_jobs = test_module_tier_drain_jobs;
}

static void
test_module_tier_init (TestModuleTier *self)
{
}

/* ------------------------------------------------------------------------ */
/* The loader */

#define TEST_TYPE_LINE_LOADER (test_line_loader_get_type ())
G_DECLARE_FINAL_TYPE (TestLineLoader, test_line_loader, TEST, LINE_LOADER, KvTierModuleLoader)

struct _TestLineLoader
{
  KvTierModuleLoader  parent_instance;

  guint               n_loads;
  GPtrArray          *loaded;   /* paths, in order */
};

G_DEFINE_FINAL_TYPE (TestLineLoader, test_line_loader, KV_TYPE_TIER_MODULE_LOADER)

static gboolean
test_line_loader_load_file (KvTierModuleLoader  *loader,
                            const char          *path,
                            GError             **error)
{
  TestLineLoader *self = TEST_LINE_LOADER (loader);
  g_autofree char *text = NULL;
  g_auto(GStrv) lines = NULL;

  self->n_loads++;
  g_ptr_array_add (self->loaded, g_strdup (path));
  if (!g_file_get_contents (path, &text, NULL, error))
    return FALSE;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *line = g_strstrip (lines[i]);

      if (*line == '\0')
        continue;
      if (line[0] == '!')
        {
          g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, line + 1);
          return FALSE;
        }
      if (line[0] == '?')
        return FALSE;
      g_type_register_static_simple (TEST_TYPE_MODULE_TIER, line,
                                     sizeof (TestModuleTierClass), NULL,
                                     sizeof (TestModuleTier), NULL, 0);
    }
  return TRUE;
}

static void
test_line_loader_finalize (GObject *object)
{
  g_ptr_array_unref (TEST_LINE_LOADER (object)->loaded);

  G_OBJECT_CLASS (test_line_loader_parent_class)->finalize (object);
}

static void
test_line_loader_class_init (TestLineLoaderClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = test_line_loader_finalize;
  KV_TIER_MODULE_LOADER_CLASS (klass)->load_file = test_line_loader_load_file;
}

static void
test_line_loader_init (TestLineLoader *self)
{
  self->loaded = g_ptr_array_new_with_free_func (g_free);
}

/* ------------------------------------------------------------------------ */

typedef struct
{
  char           *dir;
  TestLineLoader *loader;
  GMainContext   *context;
  KvTierRegistry *registry;
} Fixture;

/* Types are process-wide, so every test file defines its own names: a
 * counter keeps them apart. */
static guint type_serial;

static char *
unique_type (const char *base)
{
  return g_strdup_printf ("%s%u", base, ++type_serial);
}

static char *
write_module (Fixture    *fixture,
              const char *name,
              const char *text)
{
  g_autoptr(GError) error = NULL;
  char *path = g_build_filename (fixture->dir, name, NULL);

  g_assert_true (g_file_set_contents (path, text, -1, &error));
  g_assert_no_error (error);
  return path;
}

static void
fixture_set_up (Fixture       *fixture,
                gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  /* the base class exists before any module runs, as a binding's does */
  g_type_ensure (TEST_TYPE_MODULE_TIER);
  fixture->dir = g_dir_make_tmp ("kvtier-tier-modules-XXXXXX", &error);
  g_assert_no_error (error);
  fixture->context = g_main_context_new ();
  fixture->loader = g_object_new (TEST_TYPE_LINE_LOADER,
                                  "language", "Lines",
                                  "main-context", fixture->context,
                                  NULL);
  fixture->registry = kv_tier_registry_new ();
  g_assert_true (kv_tier_registry_register_module_loader (fixture->registry, ".Tiers",
                                                          KV_TIER_MODULE_LOADER (fixture->loader),
                                                          &error));
  g_assert_no_error (error);
}

static void
remove_dir (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, name, NULL);

      if (g_file_test (path, G_FILE_TEST_IS_DIR))
        remove_dir (path);
      else
        g_unlink (path);
    }
  g_rmdir (dir);
}

static void
fixture_tear_down (Fixture       *fixture,
                   gconstpointer  data)
{
  g_clear_object (&fixture->registry);
  g_clear_object (&fixture->loader);
  g_clear_pointer (&fixture->context, g_main_context_unref);
  remove_dir (fixture->dir);
  g_free (fixture->dir);
}

static void
test_loader_properties (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(KvTierModuleLoader) loader = g_object_new (TEST_TYPE_LINE_LOADER,
                                                       "language", "Lines",
                                                       "main-context", context,
                                                       NULL);
  g_autoptr(KvTierModuleLoader) plain = g_object_new (TEST_TYPE_LINE_LOADER, NULL);

  g_assert_cmpstr (kv_tier_module_loader_get_language (loader), ==, "Lines");
  g_assert_true (kv_tier_module_loader_get_main_context (loader) == context);
  g_assert_null (kv_tier_module_loader_get_language (plain));
  g_assert_null (kv_tier_module_loader_get_main_context (plain));
}

/* One class: named after the file; its origin is the file; a second load
 * does not evaluate the file again. */
static void
test_one_type (Fixture       *fixture,
               gconstpointer  data)
{
  g_autofree char *type_name = unique_type ("TestOneTier");
  g_autofree char *path = write_module (fixture, "single.tiers", type_name);
  g_autofree char *real = realpath (path, NULL);
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;
  g_auto(GStrv) again = NULL;
  g_autoptr(GVariant) description = NULL;
  const char *s = NULL;

  names = kv_tier_registry_load_tier_module (fixture->registry, path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (names);
  g_assert_cmpuint (g_strv_length (names), ==, 1);
  g_assert_cmpstr (names[0], ==, "single");
  g_assert_cmpuint (fixture->loader->n_loads, ==, 1);
  /* the loader gets the resolved path */
  g_assert_cmpstr (g_ptr_array_index (fixture->loader->loaded, 0), ==, real);

  g_assert_true (kv_tier_registry_lookup_tier_type (fixture->registry, "single", NULL) ==
                 g_type_from_name (type_name));
  description = kv_tier_registry_describe_tier_type (fixture->registry, "single", &error);
  g_assert_no_error (error);
  g_assert_true (g_variant_lookup (description, "origin", "&s", &s));
  g_assert_cmpstr (s, ==, real);
  g_assert_true (g_variant_lookup (description, "gtype", "&s", &s));
  g_assert_cmpstr (s, ==, type_name);

  again = kv_tier_registry_load_tier_module (fixture->registry, path, &error);
  g_assert_no_error (error);
  g_assert_cmpstrv (again, names);
  g_assert_cmpuint (fixture->loader->n_loads, ==, 1);
}

/* Several classes: FILE.CLASS, without the bindings' prefixes. */
static void
test_several_types (Fixture       *fixture,
                    gconstpointer  data)
{
  g_autofree char *a = unique_type ("Gjs_JsTier");
  g_autofree char *b = unique_type ("mymodule+PyTier");
  g_autofree char *c = unique_type ("Plain");
  g_autofree char *text = g_strdup_printf ("%s\n%s\n\n%s\n", a, b, c);
  g_autofree char *path = write_module (fixture, "my tiers.tiers", text);
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;
  g_autofree char *name_a = g_strdup_printf ("my_tiers.%s", a + strlen ("Gjs_"));
  g_autofree char *name_b = g_strdup_printf ("my_tiers.%s", strchr (b, '+') + 1);
  g_autofree char *name_c = g_strdup_printf ("my_tiers.%s", c);

  names = kv_tier_registry_load_tier_module (fixture->registry, path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (names), ==, 3);
  /* sorted by GType name: Gjs_… < Plain… < mymodule+… */
  g_assert_cmpstr (names[0], ==, name_a);
  g_assert_cmpstr (names[1], ==, name_c);
  g_assert_cmpstr (names[2], ==, name_b);
  g_assert_true (kv_tier_registry_lookup_tier_type (fixture->registry, name_b, NULL) ==
                 g_type_from_name (b));
}

/* A second registry names the types without evaluating the file again. */
static void
test_second_registry (Fixture       *fixture,
                      gconstpointer  data)
{
  g_autofree char *type_name = unique_type ("TestSharedTier");
  g_autofree char *path = write_module (fixture, "shared.tiers", type_name);
  g_autoptr(KvTierRegistry) other = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;
  g_auto(GStrv) other_names = NULL;

  names = kv_tier_registry_load_tier_module (fixture->registry, path, &error);
  g_assert_no_error (error);
  other_names = kv_tier_registry_load_tier_module (other, path, &error);
  g_assert_no_error (error);
  g_assert_cmpstrv (names, other_names);
  g_assert_cmpuint (fixture->loader->n_loads, ==, 1);
  g_assert_true (kv_tier_registry_lookup_tier_type (other, "shared", NULL) ==
                 g_type_from_name (type_name));
}

static void
assert_error_names (GError     *error,
                    const char *path,
                    const char *cause)
{
  g_assert_nonnull (error);
  if (strstr (error->message, path) == NULL || strstr (error->message, cause) == NULL)
    g_error ("“%s” does not name “%s” and “%s”", error->message, path, cause);
}

static void
test_errors (Fixture       *fixture,
             gconstpointer  data)
{
  g_autofree char *missing = g_build_filename (fixture->dir, "missing.tiers", NULL);
  g_autofree char *failing = write_module (fixture, "failing.tiers", "!the cause, in words\n");
  g_autofree char *silent = write_module (fixture, "silent.tiers", "?\n");
  g_autofree char *empty = write_module (fixture, "empty.tiers", "\n");
  g_autofree char *no_ext = write_module (fixture, "noext", "x\n");
  g_autofree char *unknown = write_module (fixture, "tier.rb", "x\n");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;

  names = kv_tier_registry_load_tier_module (fixture->registry, missing, &error);
  g_assert_null (names);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED);
  assert_error_names (error, missing, g_strerror (ENOENT));
  g_clear_error (&error);

  names = kv_tier_registry_load_tier_module (fixture->registry, fixture->dir, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED);
  assert_error_names (error, fixture->dir, "not a regular file");
  g_clear_error (&error);

  names = kv_tier_registry_load_tier_module (fixture->registry, failing, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED);
  assert_error_names (error, failing, "Lines: the cause, in words");
  g_clear_error (&error);

  /* a loader that fails without saying why is still an error */
  names = kv_tier_registry_load_tier_module (fixture->registry, silent, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED);
  assert_error_names (error, silent, "TestLineLoader's load_file failed without saying why");
  g_clear_error (&error);

  names = kv_tier_registry_load_tier_module (fixture->registry, empty, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_TIER_TYPE);
  assert_error_names (error, empty, "defines no tier type");
  g_clear_error (&error);
  /* evaluated once, and still an error the second time */
  names = kv_tier_registry_load_tier_module (fixture->registry, empty, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_TIER_TYPE);
  g_clear_error (&error);

  names = kv_tier_registry_load_tier_module (fixture->registry, no_ext, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER);
  assert_error_names (error, no_ext, "no loader for files without an extension");
  g_clear_error (&error);

  names = kv_tier_registry_load_tier_module (fixture->registry, unknown, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER);
  assert_error_names (error, unknown, "no loader for '.rb' files");
  g_clear_error (&error);

  /* failing, silent, empty: evaluated once each; a failed file is tried
   * again (it may have been fixed) */
  g_assert_cmpuint (fixture->loader->n_loads, ==, 3);
  names = kv_tier_registry_load_tier_module (fixture->registry, failing, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED);
  g_assert_cmpuint (fixture->loader->n_loads, ==, 4);
}

/* The known extensions find their loader module in KVTIER_LOADER_PATH; a
 * missing loader module is an error that says where it looked. */
static void
test_missing_loader_module (Fixture       *fixture,
                            gconstpointer  data)
{
  g_autofree char *path = write_module (fixture, "tier.py", "\n");
  g_autofree char *installed = g_build_filename (KVTIER_LOADERDIR,
                                                 "libkvtier-loader-python." G_MODULE_SUFFIX, NULL);
  g_autofree char *saved = g_strdup (g_getenv ("KVTIER_LOADER_PATH"));
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;
  g_auto(GStrv) dirs = NULL;

  if (g_file_test (installed, G_FILE_TEST_EXISTS))
    {
      g_test_skip ("a Python loader is installed in " KVTIER_LOADERDIR);
      return;
    }
  g_setenv ("KVTIER_LOADER_PATH", fixture->dir, TRUE);
  dirs = kv_tier_registry_get_loader_dirs ();
  g_assert_cmpstr (dirs[0], ==, fixture->dir);
  g_assert_cmpstr (dirs[1], ==, KVTIER_LOADERDIR);
  g_assert_null (dirs[2]);

  names = kv_tier_registry_load_tier_module (fixture->registry, path, &error);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER);
  assert_error_names (error, path, "the Python loader (libkvtier-loader-python.so) is not installed");
  assert_error_names (error, fixture->dir, KVTIER_LOADERDIR);
  if (saved != NULL)
    g_setenv ("KVTIER_LOADER_PATH", saved, TRUE);
  else
    g_unsetenv ("KVTIER_LOADER_PATH");
}

static void
test_register_loader_errors (Fixture       *fixture,
                             gconstpointer  data)
{
  g_autoptr(KvTierModuleLoader) other = g_object_new (TEST_TYPE_LINE_LOADER, NULL);
  g_autoptr(GError) error = NULL;

  /* the same loader again: nothing changes */
  g_assert_true (kv_tier_registry_register_module_loader (fixture->registry, "tiers",
                                                          KV_TIER_MODULE_LOADER (fixture->loader),
                                                          &error));
  g_assert_no_error (error);
  g_assert_false (kv_tier_registry_register_module_loader (fixture->registry, "TIERS", other,
                                                           &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_DUPLICATE);
  g_clear_error (&error);
  for (const char * const *bad = (const char *[]) { "", ".", "a.b", "x/y", NULL }; *bad; bad++)
    {
      g_assert_false (kv_tier_registry_register_module_loader (fixture->registry, *bad, other,
                                                               &error));
      g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_FAILED);
      g_clear_error (&error);
    }
}

/* A name the module would take that belongs to another type. */
static void
test_name_taken (Fixture       *fixture,
                 gconstpointer  data)
{
  g_autofree char *type_name = unique_type ("TestTakenTier");
  g_autofree char *path = write_module (fixture, "taken.tiers", type_name);
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;

  g_assert_true (kv_tier_registry_register_tier_type (fixture->registry, "taken",
                                                      TEST_TYPE_MODULE_TIER, &error));
  names = kv_tier_registry_load_tier_module (fixture->registry, path, &error);
  g_assert_null (names);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_DUPLICATE);
  assert_error_names (error, path, "'taken' is already registered");
}

static KvHostBuffer *
small_buffer (void)
{
  g_autoptr(GError) error = NULL;
  KvHostBuffer *buffer = kv_host_buffer_new (2, 4096, &error);

  g_assert_no_error (error);
  return buffer;
}

/* Tiers of a loader with a main context complete on it: create_tier and
 * configurations give it to them; other tiers get none. */
static void
test_completion_context (Fixture       *fixture,
                         gconstpointer  data)
{
  g_autofree char *type_name = unique_type ("TestContextTier");
  g_autofree char *path = write_module (fixture, "ctx.tiers", type_name);
  g_autoptr(KvHostBuffer) buffer = small_buffer ();
  g_autoptr(KvSecondaryTier) tier = NULL;
  g_autoptr(KvSecondaryTier) plain = NULL;
  g_autoptr(GMainContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;

  names = kv_tier_registry_load_tier_module (fixture->registry, path, &error);
  g_assert_no_error (error);
  tier = kv_tier_registry_create_tier (fixture->registry, "ctx", buffer, NULL, NULL, &error);
  g_assert_no_error (error);
  g_object_get (tier, "completion-context", &context, NULL);
  g_assert_true (context == fixture->context);
  g_clear_pointer (&context, g_main_context_unref);
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (tier), ==, "ctx");

  g_assert_true (kv_tier_registry_register_tier_type (fixture->registry, "plain",
                                                      TEST_TYPE_MODULE_TIER, &error));
  plain = kv_tier_registry_create_tier (fixture->registry, "plain", buffer, NULL, NULL, &error);
  g_assert_no_error (error);
  g_object_get (plain, "completion-context", &context, NULL);
  g_assert_null (context);
}

/* `module = FILE` in a [tier NAME] section: relative to the file's
 * directory, the type defaults to the module's, and it round-trips. */
static void
test_config_module_key (Fixture       *fixture,
                        gconstpointer  data)
{
  g_autofree char *type_name = unique_type ("TestConfigTier");
  g_autofree char *module = write_module (fixture, "conftier.tiers", type_name);
  g_autofree char *text = g_strdup ("[primary]\nsize = 8KiB\nslot-size = 4KiB\n\n"
                                    "[tier mine]\nmodule = conftier.tiers\n");
  g_autofree char *conf = write_module (fixture, "node.conf", text);
  g_autofree char *real_module = realpath (module, NULL);
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvConfig) reread = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(GMainContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *value = NULL;
  g_autofree char *data_text = NULL;
  g_autofree char *cwd = g_get_current_dir ();

  /* from elsewhere: the module is next to the file, not the directory we
   * run in */
  g_assert_cmpint (g_chdir ("/"), ==, 0);
  config = kv_config_new_from_file (fixture->registry, conf, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (kv_config_get_tier_type (config, "mine"), ==, "conftier");
  value = kv_config_get_value (config, "tier mine", "module");
  g_assert_cmpstr (value, ==, module);
  g_assert_true (kv_config_check (config, &error));
  g_assert_no_error (error);

  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);
  g_object_get (kv_tiering_manager_get_tier (manager, 0), "completion-context", &context, NULL);
  g_assert_true (context == fixture->context);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);

  /* written back with the absolute path, it reads from anywhere */
  data_text = kv_config_to_data (config, NULL);
  g_assert_nonnull (strstr (data_text, "module="));
  reread = kv_config_new_from_data (fixture->registry, data_text, -1, "written", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (kv_config_get_tier_type (reread, "mine"), ==, "conftier");
  g_assert_cmpuint (fixture->loader->n_loads, ==, 1);
  g_assert_cmpint (g_chdir (cwd), ==, 0);
  (void) real_module;
}

static void
assert_config_error (Fixture     *fixture,
                     const char  *text,
                     gint         code,
                     const char  *needle)
{
  g_autofree char *conf = write_module (fixture, "bad.conf", text);
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(GError) error = NULL;

  config = kv_config_new_from_file (fixture->registry, conf, &error);
  g_assert_null (config);
  g_assert_error (error, KV_CONFIG_ERROR, code);
  if (strstr (error->message, needle) == NULL)
    g_error ("“%s” not in “%s”", needle, error->message);
}

static void
test_config_module_errors (Fixture       *fixture,
                           gconstpointer  data)
{
  g_autofree char *a = unique_type ("TestTwoA");
  g_autofree char *b = unique_type ("TestTwoB");
  g_autofree char *text = g_strdup_printf ("%s\n%s\n", a, b);
  g_autofree char *two = write_module (fixture, "two.tiers", text);
  g_autofree char *broken = write_module (fixture, "broken.tiers", "!it broke\n");
  g_autofree char *expected = NULL;
  g_autofree char *with_type = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(GError) error = NULL;

  assert_config_error (fixture, "[tier t]\nmodule = broken.tiers\n",
                       KV_CONFIG_ERROR_INVALID_VALUE,
                       "bad.conf:2: [tier t] key 'module': Tier module");
  assert_config_error (fixture, "[tier t]\nmodule = broken.tiers\n",
                       KV_CONFIG_ERROR_INVALID_VALUE, "Lines: it broke");
  assert_config_error (fixture, "[tier t]\nmodule =\n",
                       KV_CONFIG_ERROR_INVALID_VALUE, "empty file name");
  expected = g_strdup_printf ("missing key 'type': module %s defines several tier types"
                              " (two.%s, two.%s)", two, a, b);
  assert_config_error (fixture, "[tier t]\nmodule = two.tiers\n",
                       KV_CONFIG_ERROR_MISSING_KEY, expected);
  assert_config_error (fixture, "[tier t]\nmodule = two.tiers\ntype = plain\n",
                       KV_CONFIG_ERROR_INVALID_VALUE, "'plain' is not a tier type of module");
  /* `module` belongs to tiers */
  assert_config_error (fixture, "[device]\ntype = host\nmodule = two.tiers\n",
                       KV_CONFIG_ERROR_UNKNOWN_KEY, "module");

  with_type = g_strdup_printf ("[tier t]\nmodule = two.tiers\ntype = two.%s\n", b);
  {
    g_autofree char *conf = write_module (fixture, "good.conf", with_type);

    config = kv_config_new_from_file (fixture->registry, conf, &error);
    g_assert_no_error (error);
  }
  /* set_value: a new tier from its module; an existing one keeps its own */
  g_assert_true (kv_config_set_value (config, "tier u", "module", two, &error) == FALSE);
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_MISSING_KEY);
  g_clear_error (&error);
  g_assert_true (kv_config_set_value (config, "tier t", "module", two, &error));
  g_assert_no_error (error);
  g_assert_false (kv_config_set_value (config, "tier t", "module", broken, &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/tier-module-loader/properties", test_loader_properties);
#define ADD(path, func) \
  g_test_add ("/kvtier/tier-module-loader/" path, Fixture, NULL, fixture_set_up, func, fixture_tear_down)
  ADD ("one-type", test_one_type);
  ADD ("several-types", test_several_types);
  ADD ("second-registry", test_second_registry);
  ADD ("errors", test_errors);
  ADD ("missing-loader-module", test_missing_loader_module);
  ADD ("register-loader-errors", test_register_loader_errors);
  ADD ("name-taken", test_name_taken);
  ADD ("completion-context", test_completion_context);
  ADD ("config-module-key", test_config_module_key);
  ADD ("config-module-errors", test_config_module_errors);
#undef ADD

  return g_test_run ();
}
