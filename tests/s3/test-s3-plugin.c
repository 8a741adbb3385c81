/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

#include "s3-fake-server.h"

/* The s3 tier as users get it: the `kvtier-s3` module loaded by the tier
 * registry (from KVTIER_PLUGIN_PATH), configured from a config file,
 * checked without network, and started against a fake S3 server that
 * answers its first GET. This program does not link the tier. */

static KvTierRegistry *
registry_new (void)
{
  g_autoptr(GError) error = NULL;
  KvTierRegistry *registry = kv_tier_registry_new ();

  g_assert_true (kv_tier_registry_load_plugins (registry, &error));
  g_assert_no_error (error);
  return registry;
}

static KvConfig *
config_from (KvTierRegistry  *registry,
             const char      *extra,
             GError         **error)
{
  g_autofree char *text = g_strdup_printf ("[primary]\n"
                                           "size = 64KiB\n"
                                           "slot-size = 8KiB\n"
                                           "[tier archive]\n"
                                           "type = s3\n"
                                           "bucket = kv-cache\n"
                                           "access-key = AKPLUGIN\n"
                                           "secret-key = SKPLUGIN\n"
                                           "%s",
                                           extra);

  return kv_config_new_from_data (registry, text, -1, "s3.conf", error);
}

static void
test_registered (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  GType type = kv_tier_registry_lookup_tier_type (registry, "s3", &error);

  g_assert_no_error (error);
  g_assert_true (g_type_is_a (type, KV_TYPE_SECONDARY_TIER));
  g_assert_true (g_type_is_a (type, KV_TYPE_CONFIGURABLE));
  g_assert_true (g_type_is_a (type, G_TYPE_INITABLE));
  g_assert_cmpstr (g_type_name (type), ==, "KvS3Tier");
}

/* `kvtier config check` of [tier s3]: no request is sent. */
static void
test_config_check (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) good = config_from (registry, "endpoint = http://127.0.0.1:1\n", &error);
  g_autoptr(KvConfig) bad = NULL;

  g_assert_no_error (error);
  g_assert_true (kv_config_check (good, &error));
  g_assert_no_error (error);
  bad = config_from (registry, "endpoint = http://127.0.0.1:1\naddressing = virtual\n", &error);
  g_assert_no_error (error);
  g_assert_false (kv_config_check (bad, &error));
  g_assert_nonnull (strstr (error->message, "addressing=virtual needs an endpoint named by DNS"));
  g_assert_nonnull (strstr (error->message, "[tier archive]"));
}

static gboolean
probe_handler (S3FakeServer        *server,
               const S3FakeRequest *request,
               GOutputStream       *out,
               gpointer             user_data)
{
  const char *body = "<Error><Code>NoSuchKey</Code></Error>";
  g_autofree char *reply = g_strdup_printf ("HTTP/1.1 404 Not Found\r\nContent-Length: %zu\r\n\r\n%s",
                                            strlen (body), body);

  return s3_fake_write_str (out, reply);
}

/* A configuration reaches the tier, which starts (one GET, answered
 * NoSuchKey); nothing listening fails the build naming the endpoint. */
static void
test_config_builds (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(S3FakeServer) server = s3_fake_server_new (probe_handler, NULL);
  g_autofree char *endpoint = s3_fake_server_get_endpoint (server);
  g_autofree char *extra = g_strdup_printf ("endpoint = %s\nnamespace = llama-3-8b\n"
                                            "max-connections = 3\ndeadline-ms = 2500\n", endpoint);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = config_from (registry, extra, &error);
  g_autoptr(KvTieringManager) manager = NULL;
  g_autofree char *namespace_ = NULL;
  KvSecondaryTier *tier;
  guint connections = 0, deadline = 0;

  g_assert_no_error (error);
  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);
  g_assert_nonnull (manager);
  tier = kv_tiering_manager_get_tier (manager, 0);
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (tier), ==, "s3");
  g_assert_cmpint (kv_secondary_tier_get_medium (tier), ==, KV_MEDIUM_STORAGE);
  g_object_get (tier, "max-connections", &connections, "deadline-ms", &deadline,
                "namespace", &namespace_, NULL);
  g_assert_cmpuint (connections, ==, 3);
  g_assert_cmpuint (deadline, ==, 2500);
  g_assert_cmpstr (namespace_, ==, "llama-3-8b");
  /* the secret is write-only */
  g_assert_false (g_object_class_find_property (G_OBJECT_GET_CLASS (tier), "secret-key")->flags &
                  G_PARAM_READABLE);
  g_assert_cmpuint (s3_fake_server_get_n_requests (server), ==, 1);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);

  {
    g_autofree char *nowhere = g_strdup ("endpoint = http://127.0.0.1:1\n");
    g_autoptr(KvConfig) unreachable = config_from (registry, nowhere, &error);
    g_autoptr(KvTieringManager) none = NULL;

    g_assert_no_error (error);
    none = kv_config_create_manager (unreachable, &error);
    g_assert_null (none);
    g_assert_nonnull (error);
    g_assert_nonnull (strstr (error->message, "http://127.0.0.1:1"));
    g_assert_nonnull (strstr (error->message, "s3://kv-cache/"));
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/s3-plugin/registered", test_registered);
  g_test_add_func ("/s3-plugin/config-check", test_config_check);
  g_test_add_func ("/s3-plugin/config-builds", test_config_builds);
  return g_test_run ();
}
