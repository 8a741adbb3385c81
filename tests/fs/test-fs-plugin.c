/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <glib/gstdio.h>
#include <kvtier.h>

/* The fs tier as users get it: the `kvtier-fs` module loaded by the tier
 * registry (from KVTIER_PLUGIN_PATH) and configured from a config file.
 * This program does not link the tier itself. */

static KvTierRegistry *
registry_new (void)
{
  g_autoptr(GError) error = NULL;
  KvTierRegistry *registry = kv_tier_registry_new ();

  g_assert_true (kv_tier_registry_load_plugins (registry, &error));
  g_assert_no_error (error);
  return registry;
}

static KvTieringManager *
manager_from (KvTierRegistry  *registry,
              const char      *root,
              const char      *extra,
              GError         **error)
{
  g_autofree char *text = g_strdup_printf ("[primary]\n"
                                           "size = 64KiB\n"
                                           "slot-size = 8KiB\n"
                                           "[tier disk]\n"
                                           "type = fs\n"
                                           "root = %s\n"
                                           "%s",
                                           root, extra);
  g_autoptr(KvConfig) config = kv_config_new_from_data (registry, text, -1, "fs.conf", error);

  if (config == NULL)
    return NULL;
  return kv_config_create_manager (config, error);
}

static void
rm_rf (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
        rm_rf (child);
      else
        g_unlink (child);
    }
  g_rmdir (path);
}

static void
test_registered (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  GType type = kv_tier_registry_lookup_tier_type (registry, "fs", &error);

  g_assert_no_error (error);
  g_assert_true (g_type_is_a (type, KV_TYPE_SECONDARY_TIER));
  g_assert_true (g_type_is_a (type, G_TYPE_INITABLE));
  g_assert_cmpstr (g_type_name (type), ==, "KvFsTier");
}

/* The factory forwards locality and every other property. */
static void
test_config_properties (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *root = g_dir_make_tmp ("kvtier-fs-plugin-XXXXXX", NULL);
  g_autoptr(KvTieringManager) manager = NULL;
  g_autofree char *engine = NULL;
  KvSecondaryTier *tier;
  guint64 max_size = 0;
  guint deadline = 0;
  gint durability = -1;

  manager = manager_from (registry, root,
                          "locality = REMOTE\n"
                          "io-engine = threads\n"
                          "max-size = 1MiB\n"
                          "durability = data\n"
                          "deadline-ms = 2500\n"
                          "namespace = llama-3-8b\n",
                          &error);
  g_assert_no_error (error);
  g_assert_nonnull (manager);
  tier = kv_tiering_manager_get_tier (manager, 0);
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (tier), ==, "fs");
  g_assert_cmpint (kv_secondary_tier_get_locality (tier), ==, KV_LOCALITY_REMOTE);
  g_assert_cmpint (kv_secondary_tier_get_medium (tier), ==, KV_MEDIUM_STORAGE);
  g_assert_cmpuint (kv_secondary_tier_get_block_size_bytes (tier), ==, 8192);
  g_object_get (tier, "max-size", &max_size, "deadline-ms", &deadline,
                "active-io-engine", &engine, "durability", &durability, NULL);
  g_assert_cmpuint (max_size, ==, 1024 * 1024);
  g_assert_cmpuint (deadline, ==, 2500);
  g_assert_cmpstr (engine, ==, "threads");
  g_assert_cmpint (durability, ==, 1);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
  rm_rf (root);
}

static void
expect_failure (const char *extra,
                const char *fragment)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *root = g_dir_make_tmp ("kvtier-fs-plugin-XXXXXX", NULL);
  g_autoptr(KvTieringManager) manager = manager_from (registry, root, extra, &error);

  g_assert_null (manager);
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, fragment));
  rm_rf (root);
}

static void
test_invalid_locality (void)
{
  expect_failure ("locality = sideways\n", "locality");
}

static void
test_invalid_choice (void)
{
  expect_failure ("io-engine = fast\n", "uring");
  expect_failure ("layout = hdf5\n", "vllm");
  expect_failure ("unknown-option = 1\n", "unknown-option");
}

static void
test_unwritable_root (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("kvtier-fs-plugin-XXXXXX", NULL);
  g_autofree char *file = g_build_filename (dir, "file", NULL);
  g_autofree char *root = g_build_filename (file, "cache", NULL);
  g_autoptr(KvTieringManager) manager = NULL;

  g_assert_true (g_file_set_contents (file, "x", 1, NULL));
  manager = manager_from (registry, root, "", &error);
  g_assert_null (manager);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, root));
  rm_rf (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/fs/plugin/registered", test_registered);
  g_test_add_func ("/kvtier/fs/plugin/config-properties", test_config_properties);
  g_test_add_func ("/kvtier/fs/plugin/invalid-locality", test_invalid_locality);
  g_test_add_func ("/kvtier/fs/plugin/invalid-choice", test_invalid_choice);
  g_test_add_func ("/kvtier/fs/plugin/unwritable-root", test_unwritable_root);

  return g_test_run ();
}
