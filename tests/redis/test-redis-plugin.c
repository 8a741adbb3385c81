/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

/* The redis tier as users get it: the `kvtier-redis` module loaded by the
 * tier registry (from KVTIER_PLUGIN_PATH) and configured from a config
 * file, against a real server. This program does not link the tier. */

#include "test-dir.h"
#include "test-redis-server.h"

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
              const char      *extra,
              GError         **error)
{
  g_autofree char *text = g_strdup_printf ("[primary]\n"
                                           "size = 64KiB\n"
                                           "slot-size = 8KiB\n"
                                           "[tier shared]\n"
                                           "type = redis\n"
                                           "%s",
                                           extra);
  g_autoptr(KvConfig) config = kv_config_new_from_data (registry, text, -1, "redis.conf", error);

  if (config == NULL)
    return NULL;
  return kv_config_create_manager (config, error);
}

static void
test_registered (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  GType type = kv_tier_registry_lookup_tier_type (registry, "redis", &error);

  g_assert_no_error (error);
  g_assert_true (g_type_is_a (type, KV_TYPE_SECONDARY_TIER));
  g_assert_true (g_type_is_a (type, KV_TYPE_CONFIGURABLE));
  g_assert_cmpstr (g_type_name (type), ==, "KvRedisTier");
}

/* A configuration reaches the tier, which connects and answers. */
static void
test_config (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = test_dir_make ("kvtier-redis-test");
  g_autofree char *extra = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autofree char *namespace_ = NULL;
  RedisServer server = { 0 };
  KvSecondaryTier *tier;
  guint64 ttl = 0;
  guint deadline = 0;

  redis_server_start (&server, dir, NULL);
  extra = g_strdup_printf ("servers = 127.0.0.1:%u\n"
                           "namespace = llama-3-8b\n"
                           "ttl-ms = 60000\n"
                           "deadline-ms = 2500\n",
                           server.port);
  manager = manager_from (registry, extra, &error);
  g_assert_no_error (error);
  g_assert_nonnull (manager);
  tier = kv_tiering_manager_get_tier (manager, 0);
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (tier), ==, "redis");
  g_assert_cmpint (kv_secondary_tier_get_medium (tier), ==, KV_MEDIUM_STORAGE);
  g_object_get (tier, "ttl-ms", &ttl, "deadline-ms", &deadline, "namespace", &namespace_, NULL);
  g_assert_cmpuint (ttl, ==, 60000);
  g_assert_cmpuint (deadline, ==, 2500);
  g_assert_cmpstr (namespace_, ==, "llama-3-8b");
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
  redis_server_clear (&server);
  test_dir_remove (dir);
}

/* Nothing listens: building the manager fails, naming the address. */
static void
test_config_unreachable (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  guint port = redis_test_free_port ();
  g_autofree char *extra = g_strdup_printf ("servers = 127.0.0.1:%u\n", port);
  g_autofree char *address = g_strdup_printf ("127.0.0.1:%u", port);
  g_autoptr(KvTieringManager) manager = manager_from (registry, extra, &error);

  g_assert_null (manager);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, address));
}

/* `kvtier config check`: index-max-keys from 0 (no index) to 2^28,
 * anything else refused naming the key; the check connects to nothing. */
static void
test_config_check_index (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  const char *good[] = { "0", "268435456" };
  const char *bad[] = { "-1", "268435457", "lots" };

  for (guint i = 0; i < G_N_ELEMENTS (good) + G_N_ELEMENTS (bad); i++)
    {
      gboolean is_good = i < G_N_ELEMENTS (good);
      g_autofree char *text = g_strdup_printf ("[primary]\n"
                                               "size = 64KiB\n"
                                               "slot-size = 8KiB\n"
                                               "[tier shared]\n"
                                               "type = redis\n"
                                               "servers = 127.0.0.1:1\n"
                                               "index-max-keys = %s\n",
                                               is_good ? good[i] : bad[i - G_N_ELEMENTS (good)]);
      g_autoptr(GError) error = NULL;
      g_autoptr(KvConfig) config = kv_config_new_from_data (registry, text, -1, "redis.conf", &error);
      gboolean ok = config != NULL && kv_config_check (config, &error);

      g_assert_cmpint (ok, ==, is_good);
      if (is_good)
        g_assert_no_error (error);
      else
        g_assert_nonnull (strstr (error->message, "index-max-keys"));
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (!redis_test_init ())
    return 0;
  g_test_add_func ("/redis-plugin/registered", test_registered);
  g_test_add_func ("/redis-plugin/config", test_config);
  g_test_add_func ("/redis-plugin/config-unreachable", test_config_unreachable);
  g_test_add_func ("/redis-plugin/config-check-index", test_config_check_index);
  return g_test_run ();
}
