/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <kvtier.h>

/* ------------------------------------------------------------------------ */
/* A tier class registered at run time, as Python or JavaScript code would. */

#define TEST_TYPE_RUNTIME_TIER (test_runtime_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestRuntimeTier, test_runtime_tier, TEST, RUNTIME_TIER, KvSecondaryTier)

struct _TestRuntimeTier
{
  KvSecondaryTier parent_instance;
};

G_DEFINE_FINAL_TYPE (TestRuntimeTier, test_runtime_tier, KV_TYPE_SECONDARY_TIER)

static KvLookupResult
test_runtime_tier_lookup (KvSecondaryTier *tier,
                          KvKey           *key,
                          KvRequest       *request)
{
  return KV_LOOKUP_RESULT_MISS;
}

static gboolean
test_runtime_tier_submit (KvSecondaryTier  *tier,
                          KvTransferJob    *job,
                          GError          **error)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);

  kv_secondary_tier_complete_job (tier, result);
  return TRUE;
}

static KvOffloadPolicy
test_runtime_tier_on_new_request (KvSecondaryTier *tier,
                                  KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static gboolean
test_runtime_tier_drain_jobs (KvSecondaryTier  *tier,
                              GError          **error)
{
  return TRUE;
}

static void
test_runtime_tier_class_init (TestRuntimeTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  tier_class->lookup = test_runtime_tier_lookup;
  tier_class->submit_store = test_runtime_tier_submit;
  tier_class->submit_load = test_runtime_tier_submit;
  tier_class->on_new_request = test_runtime_tier_on_new_request;
  tier_class->drain_jobs = test_runtime_tier_drain_jobs;
}

static void
test_runtime_tier_init (TestRuntimeTier *self)
{
}

/* ------------------------------------------------------------------------ */

static char *
plugin_path (const char *variant)
{
  g_autofree char *name = g_strdup_printf ("libkvtier-test-%s.so", variant);

  return g_test_build_filename (G_TEST_BUILT, "plugins", name, NULL);
}

/* Looks up a property description in a describe_*_type() dictionary. */
static GVariant *
find_property (GVariant   *description,
               const char *name)
{
  g_autoptr(GVariant) props = g_variant_lookup_value (description, "properties",
                                                      G_VARIANT_TYPE ("aa{sv}"));
  GVariantIter iter;
  GVariant *prop;

  g_assert_nonnull (props);
  g_variant_iter_init (&iter, props);
  while ((prop = g_variant_iter_next_value (&iter)) != NULL)
    {
      const char *prop_name = NULL;

      g_assert_true (g_variant_lookup (prop, "name", "&s", &prop_name));
      if (g_str_equal (prop_name, name))
        return prop;
      g_variant_unref (prop);
    }
  return NULL;
}

static void
assert_property (GVariant   *description,
                 const char *name,
                 const char *type,
                 const char *def,
                 const char *blurb)
{
  g_autoptr(GVariant) prop = find_property (description, name);
  const char *s = NULL;

  g_assert_nonnull (prop);
  g_assert_true (g_variant_lookup (prop, "type", "&s", &s));
  g_assert_cmpstr (s, ==, type);
  g_assert_true (g_variant_lookup (prop, "default", "&s", &s));
  g_assert_cmpstr (s, ==, def);
  if (blurb != NULL)
    {
      g_assert_true (g_variant_lookup (prop, "blurb", "&s", &s));
      g_assert_cmpstr (s, ==, blurb);
    }
}

static void
test_built_in (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) devices = kv_tier_registry_list_device_types (registry);
  g_auto(GStrv) tiers = kv_tier_registry_list_tier_types (registry);
  g_autoptr(GVariant) description = NULL;
  g_autoptr(GVariant) primary = NULL;
  g_autoptr(GVariant) chunk_bytes = NULL;
  const char *s = NULL;

  g_assert_cmpstrv (devices, ((const char *[]) { "host", NULL }));
  g_assert_cmpstrv (tiers, ((const char *[]) { NULL }));
  g_assert_true (kv_tier_registry_lookup_device_type (registry, "host", &error) == KV_TYPE_HOST_DEVICE);
  g_assert_no_error (error);

  description = kv_tier_registry_describe_device_type (registry, "host", &error);
  g_assert_no_error (error);
  g_assert_true (g_variant_lookup (description, "kind", "&s", &s));
  g_assert_cmpstr (s, ==, "device");
  g_assert_true (g_variant_lookup (description, "gtype", "&s", &s));
  g_assert_cmpstr (s, ==, "KvHostDevice");
  g_assert_true (g_variant_lookup (description, "origin", "&s", &s));
  g_assert_cmpstr (s, ==, "built-in");
  assert_property (description, "n-workers", "unsigned integer", "2", "Copy threads");
  assert_property (description, "block-bytes", "size", "16KiB", "Bytes of one block of one layer");
  assert_property (description, "n-blocks", "unsigned integer", "1024", NULL);
  /* Managed by the registry or read-only: not listed. */
  primary = find_property (description, "primary");
  g_assert_null (primary);
  chunk_bytes = find_property (description, "chunk-bytes");
  g_assert_null (chunk_bytes);
}

static void
test_unknown_type (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *good = plugin_path ("good");

  g_assert_true (kv_tier_registry_load_plugin (registry, good, &error));
  g_assert_no_error (error);

  g_assert_true (kv_tier_registry_lookup_tier_type (registry, "nope", &error) == G_TYPE_INVALID);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE);
  g_assert_nonnull (strstr (error->message,
                            "Unknown secondary tier type: 'nope'. Supported types: ['test-good']."));
  g_clear_error (&error);

  g_assert_true (kv_tier_registry_lookup_device_type (registry, "cuda", &error) == G_TYPE_INVALID);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE);
  g_assert_nonnull (strstr (error->message, "Unknown device type: 'cuda'. Supported types: ['host']."));
  g_clear_error (&error);

  g_assert_null (kv_tier_registry_describe_tier_type (registry, "nope", &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE);
}

static void
test_load_plugin (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *good = plugin_path ("good");
  g_autofree char *real = realpath (good, NULL);
  g_autoptr(GVariant) description = NULL;
  g_autoptr(GVariant) locality = NULL;
  g_autoptr(GVariant) ratio = NULL;
  g_autoptr(GVariant) tier_type = NULL;
  g_auto(GStrv) tiers = NULL;
  g_auto(GStrv) choices = NULL;
  const char *s = NULL;
  GType type;

  g_assert_true (kv_tier_registry_load_plugin (registry, good, &error));
  g_assert_no_error (error);
  /* Loading it again into the same registry does nothing. */
  g_assert_true (kv_tier_registry_load_plugin (registry, good, &error));
  g_assert_no_error (error);

  tiers = kv_tier_registry_list_tier_types (registry);
  g_assert_cmpstrv (tiers, ((const char *[]) { "test-good", NULL }));
  type = kv_tier_registry_lookup_tier_type (registry, "test-good", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (g_type_name (type), ==, "KvTestGoodTier");
  g_assert_true (g_type_is_a (type, KV_TYPE_SECONDARY_TIER));

  description = kv_tier_registry_describe_tier_type (registry, "test-good", &error);
  g_assert_no_error (error);
  g_assert_true (g_variant_lookup (description, "origin", "&s", &s));
  g_assert_cmpstr (s, ==, real);
  g_assert_true (g_variant_lookup (description, "kind", "&s", &s));
  g_assert_cmpstr (s, ==, "tier");
  assert_property (description, "max-size", "size", "1GiB", "Bytes the tier may hold");
  assert_property (description, "label", "string", "none", "A label");
  assert_property (description, "verify", "boolean", "false", "Verify");
  assert_property (description, "ratio", "number", "0.5", "A ratio");
  assert_property (description, "hosts", "string list", "", "Hosts");
  assert_property (description, "locality", "one of unspecified, local, remote", "unspecified", NULL);

  ratio = find_property (description, "ratio");
  g_assert_true (g_variant_lookup (ratio, "minimum", "&s", &s));
  g_assert_cmpstr (s, ==, "0");
  g_assert_true (g_variant_lookup (ratio, "maximum", "&s", &s));
  g_assert_cmpstr (s, ==, "1");
  locality = find_property (description, "locality");
  g_assert_true (g_variant_lookup (locality, "choices", "^as", &choices));
  g_assert_cmpstrv (choices, ((const char *[]) { "unspecified", "local", "remote", NULL }));
  /* Set by the registry, not by configurations. */
  tier_type = find_property (description, "tier-type");
  g_assert_null (tier_type);
}

/* Every plugin directory made, checked gone once the tests ran. */
static GPtrArray *made_dirs;

/* Under the directories G_TEST_OPTION_ISOLATE_DIRS gives each test (and
 * removes after it), not in /tmp, where every run left some behind. */
static char *
make_plugin_dir (void)
{
  const char *base = g_get_user_runtime_dir ();
  char *dir = g_build_filename (base, "kvtier-plugins-XXXXXX", NULL);

  g_assert_cmpint (g_mkdir_with_parents (base, 0700), ==, 0);
  g_assert_nonnull (g_mkdtemp (dir));
  g_ptr_array_add (made_dirs, g_strdup (dir));
  return dir;
}

static void
link_plugin (const char *dir,
             const char *variant,
             const char *as)
{
  g_autofree char *target = plugin_path (variant);
  g_autofree char *name = g_strdup_printf ("libkvtier-test-%s.so", variant);
  g_autofree char *link = g_build_filename (dir, as != NULL ? as : name, NULL);

  g_assert_cmpint (symlink (target, link), ==, 0);
}

static void
write_file (const char *dir,
            const char *name,
            const char *contents)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *path = g_build_filename (dir, name, NULL);

  g_assert_true (g_file_set_contents (path, contents, -1, &error));
  g_assert_no_error (error);
}

static void
test_plugin_directory (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = make_plugin_dir ();
  g_autofree char *other = make_plugin_dir ();
  g_autofree char *path = g_strdup_printf ("%s::%s", dir, other);
  g_auto(GStrv) dirs = NULL;
  g_auto(GStrv) tiers = NULL;

  /* A good plugin among a module that is no plugin, one without a register
   * function, a text file named like a module, and a file of another kind;
   * the same plugin name in a later directory is skipped. */
  link_plugin (dir, "good", NULL);
  link_plugin (dir, "none", NULL);
  link_plugin (dir, "noreg", NULL);
  write_file (dir, "libbroken.so", "this is not an ELF file\n");
  write_file (dir, "README", "plugins live here\n");
  link_plugin (other, "dup", "libkvtier-test-good.so");

  g_setenv ("KVTIER_PLUGIN_PATH", path, TRUE);
  dirs = kv_tier_registry_get_plugin_dirs ();
  g_assert_cmpuint (g_strv_length (dirs), ==, 3);
  g_assert_cmpstr (dirs[0], ==, dir);
  g_assert_cmpstr (dirs[1], ==, other);
  g_assert_cmpstr (dirs[2], ==, KVTIER_PLUGINDIR);

  g_assert_true (kv_tier_registry_load_plugins (registry, &error));
  g_assert_no_error (error);
  g_unsetenv ("KVTIER_PLUGIN_PATH");

  tiers = kv_tier_registry_list_tier_types (registry);
  g_assert_cmpstrv (tiers, ((const char *[]) { "test-good", NULL }));
  g_assert_cmpstr (g_type_name (kv_tier_registry_lookup_tier_type (registry, "test-good", NULL)),
                   ==, "KvTestGoodTier");
}

static void
test_bad_plugin_file (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = make_plugin_dir ();
  g_autofree char *broken = g_build_filename (dir, "libbroken.so", NULL);
  g_autofree char *missing = g_build_filename (dir, "libmissing.so", NULL);
  g_autofree char *none = plugin_path ("none");
  g_autofree char *noreg = plugin_path ("noreg");
  g_auto(GStrv) tiers = NULL;

  write_file (dir, "libbroken.so", "this is not an ELF file\n");

  g_assert_false (kv_tier_registry_load_plugin (registry, broken, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN);
  g_assert_nonnull (strstr (error->message, "is not a loadable module"));
  g_assert_nonnull (strstr (error->message, broken));
  g_clear_error (&error);

  g_assert_false (kv_tier_registry_load_plugin (registry, missing, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN);
  g_assert_nonnull (strstr (error->message, missing));
  g_clear_error (&error);

  g_assert_false (kv_tier_registry_load_plugin (registry, none, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN);
  g_assert_nonnull (strstr (error->message,
                            "is not a kvtier plugin: it does not export kvtier_plugin_abi_version"));
  g_clear_error (&error);

  g_assert_false (kv_tier_registry_load_plugin (registry, noreg, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN);
  g_assert_nonnull (strstr (error->message, "does not export kvtier_plugin_register"));

  tiers = kv_tier_registry_list_tier_types (registry);
  g_assert_cmpuint (g_strv_length (tiers), ==, 0);
}

static void
test_abi_mismatch (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(KvTierRegistry) scanning = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *abi = plugin_path ("abi");
  g_autofree char *dir = make_plugin_dir ();
  g_autofree char *expected = g_strdup_printf ("built for kvtier plugin ABI %u, but this kvtier"
                                               " loads ABI %u", KV_PLUGIN_ABI_VERSION + 1,
                                               KV_PLUGIN_ABI_VERSION);
  g_auto(GStrv) tiers = NULL;

  /* The plugin's register function aborts if called: the check comes first. */
  g_assert_false (kv_tier_registry_load_plugin (registry, abi, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_ABI_MISMATCH);
  g_assert_nonnull (strstr (error->message, expected));
  g_assert_nonnull (strstr (error->message, abi));
  g_clear_error (&error);

  /* In a directory the mismatch is an error, but the good plugin loads. */
  link_plugin (dir, "abi", NULL);
  link_plugin (dir, "good", NULL);
  g_setenv ("KVTIER_PLUGIN_PATH", dir, TRUE);
  g_assert_false (kv_tier_registry_load_plugins (scanning, &error));
  g_unsetenv ("KVTIER_PLUGIN_PATH");
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_ABI_MISMATCH);
  g_assert_nonnull (strstr (error->message, "libkvtier-test-abi.so"));
  tiers = kv_tier_registry_list_tier_types (scanning);
  g_assert_cmpstrv (tiers, ((const char *[]) { "test-good", NULL }));
}

static void
test_duplicate (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *good = plugin_path ("good");
  g_autofree char *dup = plugin_path ("dup");
  GType type;

  g_assert_true (kv_tier_registry_load_plugin (registry, good, &error));
  g_assert_no_error (error);
  g_assert_false (kv_tier_registry_load_plugin (registry, dup, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_DUPLICATE);
  g_assert_nonnull (strstr (error->message, "Tier 'test-good' is already registered."));
  g_assert_nonnull (strstr (error->message, "libkvtier-test-dup.so"));
  g_clear_error (&error);

  /* The first registration stands. */
  type = kv_tier_registry_lookup_tier_type (registry, "test-good", &error);
  g_assert_cmpstr (g_type_name (type), ==, "KvTestGoodTier");

  g_assert_false (kv_tier_registry_register_tier_type (registry, "test-good",
                                                       TEST_TYPE_RUNTIME_TIER, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_DUPLICATE);
  g_assert_cmpstr (error->message, ==, "Tier 'test-good' is already registered.");
  g_clear_error (&error);

  g_assert_false (kv_tier_registry_register_device_type (registry, "host",
                                                         KV_TYPE_HOST_DEVICE, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_DUPLICATE);
  g_assert_cmpstr (error->message, ==, "Device 'host' is already registered.");
}

static void
test_run_time_type (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) description = NULL;
  const char *s = NULL;

  g_assert_true (kv_tier_registry_register_tier_type (registry, "runtime",
                                                      TEST_TYPE_RUNTIME_TIER, &error));
  g_assert_no_error (error);
  g_assert_true (kv_tier_registry_lookup_tier_type (registry, "runtime", &error) ==
                 TEST_TYPE_RUNTIME_TIER);
  description = kv_tier_registry_describe_tier_type (registry, "runtime", &error);
  g_assert_no_error (error);
  g_assert_true (g_variant_lookup (description, "origin", "&s", &s));
  g_assert_cmpstr (s, ==, "run time");

  g_assert_false (kv_tier_registry_register_tier_type (registry, "abstract",
                                                       KV_TYPE_SECONDARY_TIER, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_TYPE);
  g_assert_nonnull (strstr (error->message, "is not a concrete KvSecondaryTier subclass"));
  g_clear_error (&error);

  g_assert_false (kv_tier_registry_register_tier_type (registry, "object", G_TYPE_OBJECT, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_TYPE);
  g_clear_error (&error);

  g_assert_false (kv_tier_registry_register_device_type (registry, "tier-as-device",
                                                         TEST_TYPE_RUNTIME_TIER, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_TYPE);
  g_assert_nonnull (strstr (error->message, "is not a concrete KvDevice subclass"));
  g_clear_error (&error);

  g_assert_false (kv_tier_registry_register_tier_type (registry, "two words",
                                                       TEST_TYPE_RUNTIME_TIER, &error));
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_FAILED);
}

static void
test_create_tier (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, 4096, NULL);
  g_autoptr(KvSecondaryTier) tier = NULL;
  g_autoptr(KvSecondaryTier) bad = NULL;
  g_autofree char *good = plugin_path ("good");
  g_autofree char *label = NULL;
  g_auto(GStrv) hosts = NULL;
  guint64 max_size = 0;
  gboolean verify = FALSE;
  gdouble ratio = 0;
  GVariantBuilder builder;

  g_assert_true (kv_tier_registry_load_plugin (registry, good, &error));
  g_assert_no_error (error);

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "max-size", g_variant_new_string ("1.5GiB"));
  g_variant_builder_add (&builder, "{sv}", "label", g_variant_new_string ("fast"));
  g_variant_builder_add (&builder, "{sv}", "verify", g_variant_new_boolean (TRUE));
  g_variant_builder_add (&builder, "{sv}", "ratio", g_variant_new_double (0.25));
  g_variant_builder_add (&builder, "{sv}", "hosts",
                         g_variant_new_strv ((const char *[]) { "a:1", "b:2" }, 2));
  g_variant_builder_add (&builder, "{sv}", "locality", g_variant_new_string ("remote"));
  tier = kv_tier_registry_create_tier (registry, "test-good", buffer, NULL,
                                       g_variant_builder_end (&builder), &error);
  g_assert_no_error (error);
  g_assert_nonnull (tier);

  g_object_get (tier, "max-size", &max_size, "label", &label, "verify", &verify,
                "ratio", &ratio, "hosts", &hosts, NULL);
  g_assert_cmpuint (max_size, ==, G_GUINT64_CONSTANT (1610612736));
  g_assert_cmpstr (label, ==, "fast");
  g_assert_true (verify);
  g_assert_cmpfloat (ratio, ==, 0.25);
  g_assert_cmpstrv (hosts, ((const char *[]) { "a:1", "b:2", NULL }));
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (tier), ==, "test-good");
  g_assert_true (kv_secondary_tier_get_primary (tier) == buffer);
  g_assert_cmpint (kv_secondary_tier_get_locality (tier), ==, KV_LOCALITY_REMOTE);

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "ratio", g_variant_new_double (2.0));
  bad = kv_tier_registry_create_tier (registry, "test-good", buffer, NULL,
                                      g_variant_builder_end (&builder), &error);
  g_assert_null (bad);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY);
  g_assert_nonnull (strstr (error->message, "property 'ratio': 2.0 is out of range (minimum 0, maximum 1)"));
  g_clear_error (&error);

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "primary", g_variant_new_string ("x"));
  bad = kv_tier_registry_create_tier (registry, "test-good", buffer, NULL,
                                      g_variant_builder_end (&builder), &error);
  g_assert_null (bad);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY);
  g_assert_nonnull (strstr (error->message, "has no configurable property 'primary'"));
  g_assert_nonnull (strstr (error->message, "accepted: "));
  g_assert_nonnull (strstr (error->message, "max-size"));
  g_clear_error (&error);

  /* the manager names the tier: a configured label would be overwritten */
  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "metric-label", g_variant_new_string ("x"));
  bad = kv_tier_registry_create_tier (registry, "test-good", buffer, NULL,
                                      g_variant_builder_end (&builder), &error);
  g_assert_null (bad);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY);
  g_assert_nonnull (strstr (error->message, "has no configurable property 'metric-label'"));
  g_clear_error (&error);

  bad = kv_tier_registry_create_tier (registry, "missing", buffer, NULL, NULL, &error);
  g_assert_null (bad);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE);
}

static void
test_create_device (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, 8192, NULL);
  g_autoptr(KvDevice) device = NULL;
  g_autoptr(KvDevice) bad = NULL;
  GVariantBuilder builder;

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "n-blocks", g_variant_new_uint32 (8));
  g_variant_builder_add (&builder, "{sv}", "block-bytes", g_variant_new_string ("4KiB"));
  g_variant_builder_add (&builder, "{sv}", "n-layers", g_variant_new_int32 (2));
  g_variant_builder_add (&builder, "{sv}", "n-workers", g_variant_new_string ("3"));
  device = kv_tier_registry_create_device (registry, "host", buffer,
                                           g_variant_builder_end (&builder), &error);
  g_assert_no_error (error);
  g_assert_true (KV_IS_HOST_DEVICE (device));
  g_assert_cmpuint (kv_device_get_chunk_bytes (device), ==, 8192);
  g_assert_cmpuint (kv_host_device_get_n_workers (KV_HOST_DEVICE (device)), ==, 3);
  g_assert_cmpint (kv_device_get_wakeup_fd (device), >=, 0);

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "block-bytes", g_variant_new_string ("8KiB"));
  g_variant_builder_add (&builder, "{sv}", "n-layers", g_variant_new_int32 (2));
  bad = kv_tier_registry_create_device (registry, "host", buffer,
                                        g_variant_builder_end (&builder), &error);
  g_assert_null (bad);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "n-layers", g_variant_new_int32 (-2));
  bad = kv_tier_registry_create_device (registry, "host", buffer,
                                        g_variant_builder_end (&builder), &error);
  g_assert_null (bad);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY);
  g_assert_nonnull (strstr (error->message, "-2 is out of range (minimum 1, maximum 65536)"));
}

/* A plugin loaded into two registries registers into both from one
 * resident module. */
static void
test_two_registries (void)
{
  g_autoptr(KvTierRegistry) first = kv_tier_registry_new ();
  g_autoptr(KvTierRegistry) second = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *good = plugin_path ("good");
  GType a, b;

  g_assert_true (kv_tier_registry_load_plugin (first, good, &error));
  g_assert_no_error (error);
  g_assert_true (kv_tier_registry_load_plugin (second, good, &error));
  g_assert_no_error (error);
  a = kv_tier_registry_lookup_tier_type (first, "test-good", NULL);
  b = kv_tier_registry_lookup_tier_type (second, "test-good", NULL);
  g_assert_true (a != G_TYPE_INVALID);
  g_assert_true (a == b);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/tier-registry/built-in", test_built_in);
  g_test_add_func ("/kvtier/tier-registry/unknown-type", test_unknown_type);
  g_test_add_func ("/kvtier/tier-registry/load-plugin", test_load_plugin);
  g_test_add_func ("/kvtier/tier-registry/plugin-directory", test_plugin_directory);
  g_test_add_func ("/kvtier/tier-registry/bad-plugin-file", test_bad_plugin_file);
  g_test_add_func ("/kvtier/tier-registry/abi-mismatch", test_abi_mismatch);
  g_test_add_func ("/kvtier/tier-registry/duplicate", test_duplicate);
  g_test_add_func ("/kvtier/tier-registry/run-time-type", test_run_time_type);
  g_test_add_func ("/kvtier/tier-registry/create-tier", test_create_tier);
  g_test_add_func ("/kvtier/tier-registry/create-device", test_create_device);
  g_test_add_func ("/kvtier/tier-registry/two-registries", test_two_registries);

  made_dirs = g_ptr_array_new_with_free_func (g_free);
  status = g_test_run ();
  for (guint i = 0; i < made_dirs->len; i++)
    if (g_file_test (g_ptr_array_index (made_dirs, i), G_FILE_TEST_EXISTS))
      {
        g_printerr ("left behind: %s\n", (const char *) g_ptr_array_index (made_dirs, i));
        status = 1;
      }
  g_ptr_array_unref (made_dirs);
  return status;
}
