/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

/* The CUDA device as users get it: the `kvtier-cuda` module loaded by the
 * registry from KVTIER_PLUGIN_PATH, configured by properties, a{sv}
 * dictionaries and config files. This program links neither the plugin
 * nor CUDA, and runs on machines without a GPU: there, initializing a
 * device fails with the plugin's NOT_AVAILABLE error naming the CUDA
 * error; the layout checks run first, on the host, and fail the same on
 * any machine. */

#define SLOT_SIZE 65536

static KvTierRegistry *
registry_new (void)
{
  g_autoptr(GError) error = NULL;
  KvTierRegistry *registry = kv_tier_registry_new ();

  g_assert_true (kv_tier_registry_load_plugins (registry, &error));
  g_assert_no_error (error);
  return registry;
}

static void
test_registered (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  GType type = kv_tier_registry_lookup_device_type (registry, "cuda", &error);
  g_auto(GStrv) names = kv_tier_registry_list_device_types (registry);

  g_assert_no_error (error);
  g_assert_cmpstr (g_type_name (type), ==, "KvCudaDevice");
  g_assert_true (g_type_is_a (type, KV_TYPE_DEVICE));
  g_assert_true (g_strv_contains ((const char * const *) names, "cuda"));
  g_assert_true (g_strv_contains ((const char * const *) names, "host"));
}

/* `kvtier plugins` lists the device and its layout properties without
 * touching CUDA. */
static void
test_describe (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) description = kv_tier_registry_describe_device_type (registry, "cuda", &error);
  g_autoptr(GVariant) props = NULL;
  const char *expected[] = {
    "n-blocks", "block-bytes", "n-layers", "blocks-per-chunk", "layer-addresses",
    "base-address", "layer-stride-bytes", "n-planes", "plane-stride-bytes",
    "block-stride-bytes", "ordinal", "gather-run-bytes",
  };
  g_autoptr(GPtrArray) seen = g_ptr_array_new_with_free_func (g_free);
  GVariantIter iter;
  GVariant *prop;
  const char *kind = NULL, *origin = NULL;

  g_assert_no_error (error);
  g_assert_true (g_variant_lookup (description, "kind", "&s", &kind));
  g_assert_cmpstr (kind, ==, "device");
  g_assert_true (g_variant_lookup (description, "origin", "&s", &origin));
  g_assert_true (g_str_has_suffix (origin, "libkvtier-cuda.so"));
  props = g_variant_lookup_value (description, "properties", G_VARIANT_TYPE ("aa{sv}"));
  g_assert_nonnull (props);
  g_variant_iter_init (&iter, props);
  while ((prop = g_variant_iter_next_value (&iter)) != NULL)
    {
      const char *name = NULL, *type = NULL;

      g_assert_true (g_variant_lookup (prop, "name", "&s", &name));
      g_assert_true (g_variant_lookup (prop, "type", "&s", &type));
      if (g_str_equal (name, "layer-addresses"))
        g_assert_cmpstr (type, ==, "string list");
      if (g_str_equal (name, "gather-run-bytes"))
        g_assert_cmpstr (type, ==, "size");
      g_ptr_array_add (seen, g_strdup (name));
      g_variant_unref (prop);
    }
  for (guint i = 0; i < G_N_ELEMENTS (expected); i++)
    if (!g_ptr_array_find_with_equal_func (seen, expected[i], g_str_equal, NULL))
      g_error ("the description lacks “%s”", expected[i]);
}

static KvDevice *
create (KvTierRegistry  *registry,
        KvHostBuffer    *buffer,
        GVariant        *extra,   /* (transfer full) (nullable) */
        GError         **error)
{
  g_autoptr(GVariant) owned = extra;   /* g_variant_parse() gave a full reference */
  GVariantDict dict;

  g_variant_dict_init (&dict, owned);
  if (!g_variant_dict_contains (&dict, "n-blocks"))
    g_variant_dict_insert (&dict, "n-blocks", "u", 64);
  if (!g_variant_dict_contains (&dict, "block-bytes"))
    g_variant_dict_insert (&dict, "block-bytes", "t", (guint64) 4096);
  if (!g_variant_dict_contains (&dict, "n-layers"))
    g_variant_dict_insert (&dict, "n-layers", "u", 2);
  if (!g_variant_dict_contains (&dict, "blocks-per-chunk"))
    g_variant_dict_insert (&dict, "blocks-per-chunk", "u", 4);
  return kv_tier_registry_create_device (registry, "cuda", buffer, g_variant_dict_end (&dict), error);
}

static void
assert_not_available_or_opened (KvDevice *device,
                                GError   *error)
{
  if (device != NULL)
    {
      g_autoptr(GError) local_error = NULL;

      /* A machine with a GPU: the device works and shuts down. */
      g_test_message ("a CUDA device is present");
      g_assert_no_error (error);
      g_assert_true (kv_device_shutdown (device, &local_error));
      g_assert_no_error (local_error);
      g_object_unref (device);
      return;
    }
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  g_assert_cmpuint (error->domain, ==, g_quark_from_string ("kv-cuda-device-error-quark"));
  g_assert_cmpint (error->code, ==, 0);   /* KV_CUDA_DEVICE_ERROR_NOT_AVAILABLE */
  g_assert_true (g_str_has_prefix (error->message, "KvCudaDevice: CUDA is not available: "));
  /* It names the CUDA error. */
  g_assert_true (strstr (error->message, ": cudaError") != NULL ||
                 strstr (error->message, "the driver sees no device") != NULL);
}

/* Memory of its own (no addresses): the layout is fine, so what fails
 * without a GPU is CUDA itself. */
static void
test_not_available (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, NULL);
  g_autoptr(GError) error = NULL;
  KvDevice *device = create (registry, buffer, NULL, &error);

  assert_not_available_or_opened (device, error);
}

static void
expect_invalid (const char *fragment,
                GVariant   *extra)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvDevice) device = create (registry, buffer, extra, &error);

  g_assert_null (device);
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  if (strstr (error->message, fragment) == NULL)
    g_error ("“%s” does not say “%s”", error->message, fragment);
  g_assert_true (g_error_matches (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT) ||
                 g_error_matches (error, KV_TIER_REGISTRY_ERROR,
                                  KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY));
}

static GVariant *
dict_parse (const char *text)
{
  g_autoptr(GError) error = NULL;
  GVariant *v = g_variant_parse (G_VARIANT_TYPE_VARDICT, text, NULL, NULL, &error);

  g_assert_no_error (error);
  return v;
}

/* Checked on the host before CUDA is asked anything, so these fail the
 * same with or without a GPU. */
static void
test_layout_errors (void)
{
  expect_invalid ("share bytes",
                  dict_parse ("{'layer-addresses': <['0x7f0000000000', '0x7f0000010000']>}"));
  expect_invalid ("overlap",
                  dict_parse ("{'layer-addresses': <['0x7f0000000000', '0x7f0000000000']>}"));
  expect_invalid ("has 3 addresses for 2 layers",
                  dict_parse ("{'layer-addresses': <['0x7f0000000000', '0x7f1000000000', '0x7f2000000000']>}"));
  expect_invalid ("layer 1's address “nowhere”",
                  dict_parse ("{'layer-addresses': <['0x7f0000000000', 'nowhere']>}"));
  expect_invalid ("layer 1's address is 0",
                  dict_parse ("{'layer-addresses': <['0x7f0000000000', '0']>}"));
  expect_invalid ("64-bit address space",
                  dict_parse ("{'base-address': <uint64 18446744073709500000>, 'layer-stride-bytes': <uint64 262144>}"));
  expect_invalid ("not both",
                  dict_parse ("{'base-address': <uint64 1099511627776>, 'layer-addresses': <['1']>}"));
  expect_invalid ("needs “base-address”",
                  dict_parse ("{'layer-stride-bytes': <uint64 4096>}"));
  expect_invalid ("need “plane-stride-bytes”",
                  dict_parse ("{'base-address': <uint64 1099511627776>, 'layer-stride-bytes': <uint64 1048576>, 'n-planes': <uint32 2>}"));
  expect_invalid ("consecutive blocks overlap",
                  dict_parse ("{'base-address': <uint64 1099511627776>, 'layer-stride-bytes': <uint64 1048576>, 'block-stride-bytes': <uint64 100>}"));
  /* Cross-layer layout with layers closer than a block. */
  expect_invalid ("share bytes",
                  dict_parse ("{'base-address': <uint64 1099511627776>, 'layer-stride-bytes': <uint64 2048>, 'block-stride-bytes': <uint64 8192>}"));
  expect_invalid ("describe the engine's memory",
                  dict_parse ("{'n-planes': <uint32 2>, 'plane-stride-bytes': <uint64 4096>}"));
  expect_invalid ("does not fit in a primary slot",
                  dict_parse ("{'blocks-per-chunk': <uint32 16>}"));
  expect_invalid ("n-planes",
                  dict_parse ("{'n-planes': <uint32 17>}"));
}

/* A well-formed cross-layer layout passes the host checks; without a GPU
 * it then fails for want of CUDA, with a GPU for want of memory there. */
static void
test_valid_layout_reaches_cuda (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvDevice) device = NULL;

  device = create (registry, buffer,
                   dict_parse ("{'base-address': <uint64 1099511627776>,"
                               " 'layer-stride-bytes': <uint64 2048>,"
                               " 'n-planes': <uint32 2>,"
                               " 'plane-stride-bytes': <uint64 1024>,"
                               " 'block-stride-bytes': <uint64 4096>,"
                               " 'block-bytes': <uint64 2048>}"),
                   &error);
  g_assert_null (device);
  g_test_message ("%s", error->message);
  if (!g_error_matches (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT))
    assert_not_available_or_opened (NULL, error);
  else
    g_assert_nonnull (strstr (error->message, "is not memory of CUDA device 0"));
}

/* `[device] type = cuda` in a config file: the same checks, named by
 * `kvtier config check` (KvConfigurable) before anything is opened. */
static void
test_config (void)
{
  g_autoptr(KvTierRegistry) registry = registry_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvConfig) good = NULL;
  g_autoptr(KvPrimaryTier) primary = NULL;
  KvDevice *device;

  config = kv_config_new_from_data (registry,
                                    "[primary]\n"
                                    "size = 256KiB\n"
                                    "slot-size = 64KiB\n"
                                    "[device]\n"
                                    "type = cuda\n"
                                    "n-layers = 2\n"
                                    "block-bytes = 4KiB\n"
                                    "blocks-per-chunk = 4\n"
                                    "layer-addresses = 0x7f0000000000, 0x7f0000001000\n",
                                    -1, "cuda.conf", &error);
  g_assert_no_error (error);
  g_assert_false (kv_config_check (config, &error));
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "share bytes"));
  g_clear_error (&error);

  good = kv_config_new_from_data (registry,
                                  "[primary]\n"
                                  "size = 256KiB\n"
                                  "slot-size = 64KiB\n"
                                  "[device]\n"
                                  "type = cuda\n"
                                  "n-blocks = 64\n"
                                  "n-layers = 2\n"
                                  "block-bytes = 4KiB\n"
                                  "blocks-per-chunk = 4\n"
                                  "gather-run-bytes = 64KiB\n",
                                  -1, "cuda.conf", &error);
  g_assert_no_error (error);
  g_assert_true (kv_config_check (good, &error));
  g_assert_no_error (error);
  primary = kv_config_create_primary (good, &error);
  g_assert_no_error (error);
  device = kv_config_create_device (good, kv_primary_tier_get_buffer (primary), &error);
  if (device == NULL)
    {
      /* The config layer wraps the device's error; its text survives. */
      g_test_message ("%s", error->message);
      g_assert_nonnull (strstr (error->message, "CUDA is not available: "));
    }
  else
    {
      guint64 gather = 0;

      g_object_get (device, "gather-run-bytes", &gather, NULL);
      g_assert_cmpuint (gather, ==, 64 * 1024);
      g_assert_true (kv_device_shutdown (device, &error));
      g_assert_no_error (error);
      g_object_unref (device);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/cuda/plugin/registered", test_registered);
  g_test_add_func ("/kvtier/cuda/plugin/describe", test_describe);
  g_test_add_func ("/kvtier/cuda/plugin/not-available", test_not_available);
  g_test_add_func ("/kvtier/cuda/plugin/layout-errors", test_layout_errors);
  g_test_add_func ("/kvtier/cuda/plugin/valid-layout-reaches-cuda", test_valid_layout_reaches_cuda);
  g_test_add_func ("/kvtier/cuda/plugin/config", test_config);

  return g_test_run ();
}
