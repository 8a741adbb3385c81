/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <glib/gstdio.h>

#include <kvtier.h>

#include "kv-config-test-tier.h"

static KvTierRegistry *
new_registry (void)
{
  KvTierRegistry *registry = kv_tier_registry_new ();

  g_assert_true (kv_tier_registry_register_tier_type (registry, "test", KV_TYPE_CONFIG_TEST_TIER, NULL));
  return registry;
}

static KvConfig *
parse (const char  *text,
       GError     **error)
{
  g_autoptr(KvTierRegistry) registry = new_registry ();

  return kv_config_new_from_data (registry, text, -1, "test.conf", error);
}

/* Parses @text, expecting an error of @code whose message contains each
 * of the NULL-terminated fragments. */
static void
expect_error (const char *text,
              gint        code,
              ...)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse (text, &error);
  const char *fragment;
  va_list args;

  g_assert_null (config);
  g_assert_error (error, KV_CONFIG_ERROR, code);
  va_start (args, code);
  while ((fragment = va_arg (args, const char *)) != NULL)
    {
      if (strstr (error->message, fragment) == NULL)
        g_error ("“%s” not in “%s”", fragment, error->message);
    }
  va_end (args);
}

static const char full_config[] =
  "# a full configuration\n"
  "[primary]\n"
  "size = 64MiB\n"
  "slot-size = 64KiB\n"
  "policy = arc\n"
  "\n"
  "[device]\n"
  "type = host\n"
  "n-blocks = 256\n"
  "block-bytes = 16KiB\n"
  "n-layers = 2\n"
  "blocks-per-chunk = 2\n"
  "n-workers = 1\n"
  "\n"
  "[tier fast]\n"
  "type = test\n"
  "max-size = 1.5GiB\n"
  "n-threads = 8\n"
  "offset = -3\n"
  "ratio = 0.25\n"
  "label = fast one\n"
  "verify = yes\n"
  "hosts = 10.0.0.5:6379, 10.0.0.6:6379\n"
  "create-flags = private,replace-destination\n"
  "locality = remote\n"
  "\n"
  "[tier slow]\n"
  "type = test\n"
  "label = slow\n"
  "backpressure = ema\n"
  "backpressure-high-water-s = 0.05\n"
  "backpressure-low-water-s = 0.01\n"
  "backpressure-alpha = 0.15\n"
  "backpressure-warmup-completions = 10\n"
  "backpressure-policy = drop\n";

static void
test_full (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse (full_config, &error);
  g_auto(GStrv) names = NULL;
  struct { const char *section, *key, *value; } expected[] = {
    { "primary", "size", "64MiB" },
    { "primary", "slot-size", "64KiB" },
    { "primary", "policy", "arc" },
    { "device", "type", "host" },
    { "device", "block-bytes", "16KiB" },
    { "device", "n-blocks", "256" },
    { "tier fast", "type", "test" },
    { "tier fast", "max-size", "1536MiB" },
    { "tier fast", "n-threads", "8" },
    { "tier fast", "offset", "-3" },
    { "tier fast", "ratio", "0.25" },
    { "tier fast", "label", "fast one" },
    { "tier fast", "verify", "true" },
    { "tier fast", "hosts", "10.0.0.5:6379,10.0.0.6:6379" },
    { "tier fast", "create-flags", "private,replace-destination" },
    { "tier fast", "locality", "remote" },
    { "tier slow", "backpressure", "ema" },
    { "tier slow", "backpressure-high-water-s", "0.05" },
    { "tier slow", "backpressure-warmup-completions", "10" },
    { "tier slow", "backpressure-policy", "drop" },
  };

  g_assert_no_error (error);
  g_assert_nonnull (config);

  names = kv_config_get_tier_names (config);
  g_assert_cmpstrv (names, ((const char *[]) { "fast", "slow", NULL }));
  g_assert_cmpstr (kv_config_get_tier_type (config, "fast"), ==, "test");
  g_assert_null (kv_config_get_tier_type (config, "missing"));
  g_assert_cmpstr (kv_config_get_device_type (config), ==, "host");
  g_assert_cmpuint (kv_config_get_primary_size (config), ==, 64 * 1024 * 1024);
  g_assert_cmpuint (kv_config_get_slot_size (config), ==, 64 * 1024);

  for (guint i = 0; i < G_N_ELEMENTS (expected); i++)
    {
      g_autofree char *value = kv_config_get_value (config, expected[i].section, expected[i].key);

      g_assert_cmpstr (value, ==, expected[i].value);
    }
  /* Keys left to their default are not set. */
  g_assert_null (kv_config_get_value (config, "tier slow", "ratio"));
  g_assert_null (kv_config_get_value (config, "tier nope", "ratio"));
}

static void
test_defaults (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse ("", &error);
  g_auto(GStrv) names = NULL;

  g_assert_no_error (error);
  names = kv_config_get_tier_names (config);
  g_assert_cmpuint (g_strv_length (names), ==, 0);
  g_assert_null (kv_config_get_device_type (config));
  g_assert_cmpuint (kv_config_get_primary_size (config), ==, G_GUINT64_CONSTANT (1) << 30);
  g_assert_cmpuint (kv_config_get_slot_size (config), ==, 2 * 1024 * 1024);
}

static void
test_sizes (void)
{
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = kv_config_new (registry);
  struct { const char *text; guint64 bytes; } good[] = {
    { "4096", 4096 }, { "4096B", 4096 }, { "8 KiB", 8192 }, { "4kib", 4096 },
    { "1.5GiB", G_GUINT64_CONSTANT (1610612736) }, { "1TiB", G_GUINT64_CONSTANT (1) << 40 },
    { "0.5MiB", 512 * 1024 },
  };
  struct { const char *text; const char *message; } bad[] = {
    { "12XB", "'12XB' is not a size (a number with an optional unit: B, KiB, MiB, GiB, TiB)" },
    { "12 GB", "is not a size" },
    { "", "is not a size" },
    { "1.0000001KiB", "is not a size" },
    { "1.3KiB", "'1.3KiB' is not a whole number of bytes" },
    { "-4096", "-4096 is out of range (minimum 4KiB" },
    { "100", "100 is out of range (minimum 4KiB" },
    { "99999999999TiB", "'99999999999TiB' is too large" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (good); i++)
    {
      g_autoptr(GError) error = NULL;

      gboolean ok = kv_config_set_value (config, "primary", "size", good[i].text, &error);

      g_assert_no_error (error);
      g_assert_true (ok);
      g_assert_cmpuint (kv_config_get_primary_size (config), ==, good[i].bytes);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;

      g_assert_false (kv_config_set_value (config, "primary", "size", bad[i].text, &error));
      g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
      if (strstr (error->message, bad[i].message) == NULL)
        g_error ("“%s” not in “%s”", bad[i].message, error->message);
      g_assert_nonnull (strstr (error->message, "[primary] key 'size': "));
    }
}

static void
test_error_parse (void)
{
  expect_error ("[primary]\nsize = 1GiB\nthis line is wrong\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:3: 'this line is wrong' is not a section header, 'key = value' or comment",
                NULL);
  expect_error ("size = 1GiB\n[primary]\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:1: key 'size': key outside any section", NULL);
  expect_error ("\n[primary\nsize = 1GiB\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:2: '[primary' is not a section header", NULL);
}

static void
test_error_unknown_section (void)
{
  expect_error ("[primary]\n\n[tiers fs]\ntype = test\n", KV_CONFIG_ERROR_UNKNOWN_SECTION,
                "test.conf:3: unknown section [tiers fs] (accepted: [primary], [device], [backpressure], [tier NAME]",
                NULL);
  expect_error ("[tier]\ntype = test\n", KV_CONFIG_ERROR_UNKNOWN_SECTION,
                "test.conf:1: unknown section [tier]", NULL);
  expect_error ("[tier a/b]\ntype = test\n", KV_CONFIG_ERROR_UNKNOWN_SECTION,
                "unknown section [tier a/b]", NULL);
}

static void
test_error_unknown_key (void)
{
  expect_error ("[primary]\nsize = 1GiB\ncolour = red\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:3: [primary] key 'colour': unknown key"
                " (accepted: size, slot-size, policy, shared, file, events, enable-metrics,"
                " hit-pending-deadline)", NULL);
  expect_error ("[tier a]\ntype = test\n\nrooot = /tmp\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:4: [tier a] key 'rooot': unknown key for tier type 'test' (accepted: type,",
                "max-size", "n-threads", "locality", "backpressure-high-water-s", NULL);
  expect_error ("[tier a]\ntype = test\nbackpressure-colour = red\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:3: [tier a] key 'backpressure-colour': unknown key", NULL);
  /* Managed by the configuration itself: not a key. */
  expect_error ("[tier a]\ntype = test\nprimary = x\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:3: [tier a] key 'primary': unknown key", NULL);
  expect_error ("[device]\ntype = host\nchunk-bytes = 4\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:3: [device] key 'chunk-bytes': unknown key for device type 'host'", NULL);
  expect_error ("[primary]\ntype = host\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:2: [primary] key 'type': the primary tier has no type", NULL);
}

static void
test_error_bad_value (void)
{
  expect_error ("[primary]\nsize = 12XB\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:2: [primary] key 'size': '12XB' is not a size", NULL);
  expect_error ("[primary]\nslot-size = 6000\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:2: [primary] key 'slot-size': 6000 is not a multiple of 4096 bytes", NULL);
  expect_error ("[primary]\npolicy = lfu\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:2: [primary] key 'policy': 'lfu' is not one of: lru, arc", NULL);
  expect_error ("[primary]\nshared = maybe\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "'maybe' is not a boolean (accepted: true, false, yes, no, on, off, 1, 0)", NULL);
  expect_error ("[tier a]\ntype = test\nn-threads = 100\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:3: [tier a] key 'n-threads': 100 is out of range (minimum 1, maximum 64)",
                NULL);
  expect_error ("[tier a]\ntype = test\noffset = -11\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "-11 is out of range (minimum -10, maximum 10)", NULL);
  expect_error ("[tier a]\ntype = test\nn-threads = four\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "'four' is not an integer", NULL);
  expect_error ("[tier a]\ntype = test\nratio = abc\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "'abc' is not a number", NULL);
  expect_error ("[tier a]\ntype = test\nratio = 1.5\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "1.5 is out of range (minimum 0, maximum 1)", NULL);
  expect_error ("[tier a]\ntype = test\nlocality = far\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:3: [tier a] key 'locality': 'far' is not one of: unspecified, local, remote",
                NULL);
  expect_error ("[tier a]\ntype = test\ncreate-flags = private,sparkly\n",
                KV_CONFIG_ERROR_INVALID_VALUE,
                "'private,sparkly' is not a list of: none, private, replace-destination", NULL);
  expect_error ("[tier a]\ntype = test\nbackpressure = sometimes\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "'sometimes' is not one of: none, ema", NULL);
}

static void
test_error_missing_type (void)
{
  expect_error ("[primary]\n\n[tier a]\nlabel = x\n", KV_CONFIG_ERROR_MISSING_KEY,
                "test.conf:3: [tier a]: missing key 'type' (tier types: test)", NULL);
  expect_error ("[device]\nn-blocks = 4\n", KV_CONFIG_ERROR_MISSING_KEY,
                "test.conf:1: [device]: missing key 'type' (device types: host)", NULL);
}

static void
test_error_unknown_type (void)
{
  expect_error ("[tier a]\nlabel = x\ntype = nope\n", KV_CONFIG_ERROR_UNKNOWN_TYPE,
                "test.conf:3: [tier a] key 'type': Unknown secondary tier type: 'nope'."
                " Supported types: ['test'].", NULL);
  expect_error ("[device]\ntype = cuda\n", KV_CONFIG_ERROR_UNKNOWN_TYPE,
                "test.conf:2: [device] key 'type': Unknown device type: 'cuda'."
                " Supported types: ['host'].", NULL);
}

static void
test_error_duplicate (void)
{
  expect_error ("[tier a]\ntype = test\n\n[tier a]\ntype = test\n", KV_CONFIG_ERROR_DUPLICATE,
                "test.conf:4: duplicate section [tier a] (first at line 1)", NULL);
  /* Different text, same tier name. */
  expect_error ("[tier a]\ntype = test\n[tier  a]\ntype = test\n", KV_CONFIG_ERROR_DUPLICATE,
                "test.conf:3: [tier a]: duplicate section (first at line 1)", NULL);
  expect_error ("[primary]\nsize = 1GiB\nslot-size = 1MiB\nsize = 2GiB\n", KV_CONFIG_ERROR_DUPLICATE,
                "test.conf:4: [primary] key 'size': duplicate key (first at line 2)", NULL);
  expect_error ("[device]\ntype = host\n[primary]\n[device]\ntype = host\n", KV_CONFIG_ERROR_DUPLICATE,
                "test.conf:4: duplicate section [device] (first at line 1)", NULL);
}

static void
test_backpressure (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse (full_config, &error);
  g_autoptr(KvTieringManager) manager = NULL;
  KvBackpressureDetector *detector;
  KvSecondaryTier *fast;
  KvSecondaryTier *slow;

  g_assert_no_error (error);
  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_tiering_manager_get_n_tiers (manager), ==, 2);

  fast = kv_tiering_manager_get_tier (manager, 0);
  slow = kv_tiering_manager_get_tier (manager, 1);
  g_assert_null (kv_secondary_tier_get_backpressure_detector (fast));
  detector = kv_secondary_tier_get_backpressure_detector (slow);
  g_assert_true (KV_IS_EMA_BACKPRESSURE_DETECTOR (detector));
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (KV_EMA_BACKPRESSURE_DETECTOR (detector)), ==, 0.05);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (KV_EMA_BACKPRESSURE_DETECTOR (detector)), ==, 0.01);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_alpha (KV_EMA_BACKPRESSURE_DETECTOR (detector)), ==, 0.15);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_warmup_completions (KV_EMA_BACKPRESSURE_DETECTOR (detector)), ==, 10);
  g_assert_true (KV_IS_DROP_STORE_POLICY (kv_backpressure_detector_get_policy (detector)));
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
}

/* Water marks not given come from the presets for the tier's locality. */
static void
test_backpressure_presets (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  KvEmaBackpressureDetector *remote, *local;
  KvBackpressurePolicy *policy;
  gdouble ramp = 0;

  config = parse ("[primary]\nsize = 1MiB\nslot-size = 64KiB\n"
                  "[tier remote]\ntype = test\nlocality = remote\nbackpressure = ema\n"
                  "[tier local]\ntype = test\nbackpressure-ramp-factor = 3\n", &error);
  g_assert_no_error (error);
  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);

  remote = KV_EMA_BACKPRESSURE_DETECTOR (kv_secondary_tier_get_backpressure_detector (kv_tiering_manager_get_tier (manager, 0)));
  local = KV_EMA_BACKPRESSURE_DETECTOR (kv_secondary_tier_get_backpressure_detector (kv_tiering_manager_get_tier (manager, 1)));
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (remote), ==, 0.020);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (remote), ==, 0.005);
  /* backpressure-* keys alone ask for the detector. */
  g_assert_nonnull (local);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (local), ==, 0.005);
  policy = kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (local));
  g_assert_true (KV_IS_THROTTLED_DROP_POLICY (policy));
  g_object_get (policy, "ramp-factor", &ramp, NULL);
  g_assert_cmpfloat (ramp, ==, 3.0);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
}

static void
test_backpressure_errors (void)
{
  expect_error ("[tier a]\ntype = test\nbackpressure = ema\n"
                "backpressure-high-water-s = 0.001\nbackpressure-low-water-s = 0.01\n",
                KV_CONFIG_ERROR_INVALID_VALUE, "test.conf:3: [tier a] key 'backpressure': ",
                "low-water-s", NULL);
  expect_error ("[tier a]\ntype = test\nbackpressure = none\nbackpressure-alpha = 0.5\n",
                KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:4: [tier a] key 'backpressure-alpha': backpressure keys need"
                " 'backpressure = ema'", NULL);
}

static void
assert_round_trip (KvConfig *config)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(GVariant) va = g_variant_ref_sink (kv_config_to_variant (config));
  g_autoptr(KvConfig) from_variant = kv_config_new_from_variant (registry, va, &error);
  g_autoptr(GVariant) vb = NULL;
  g_autofree char *text_b = NULL;
  g_autoptr(KvConfig) from_text = NULL;
  g_autoptr(GVariant) vc = NULL;
  g_autofree char *text_c = NULL;

  g_assert_no_error (error);
  vb = g_variant_ref_sink (kv_config_to_variant (from_variant));
  text_b = kv_config_to_data (from_variant, NULL);
  from_text = kv_config_new_from_data (registry, text_b, -1, "round-trip", &error);
  g_assert_no_error (error);
  vc = g_variant_ref_sink (kv_config_to_variant (from_text));
  text_c = kv_config_to_data (from_text, NULL);

  if (!g_variant_equal (va, vb) || !g_variant_equal (va, vc))
    {
      g_autofree char *a = g_variant_print (va, TRUE);
      g_autofree char *b = g_variant_print (vb, TRUE);
      g_autofree char *c = g_variant_print (vc, TRUE);

      g_error ("round trip changed the configuration:\n%s\n%s\n%s", a, b, c);
    }
  g_assert_cmpstr (text_b, ==, text_c);
}

static void
test_round_trip (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse (full_config, &error);
  g_autoptr(GVariant) variant = NULL;
  g_autoptr(GVariant) primary = NULL;
  g_autoptr(GVariant) tiers = NULL;
  g_autoptr(GVariant) fast = NULL;
  g_autofree char *text = NULL;
  guint64 size = 0;
  const char *s = NULL;

  g_assert_no_error (error);
  assert_round_trip (config);

  /* The dictionary has typed values. */
  variant = g_variant_ref_sink (kv_config_to_variant (config));
  primary = g_variant_lookup_value (variant, "primary", G_VARIANT_TYPE_VARDICT);
  g_assert_true (g_variant_lookup (primary, "size", "t", &size));
  g_assert_cmpuint (size, ==, 64 * 1024 * 1024);
  g_assert_true (g_variant_lookup (primary, "policy", "&s", &s));
  g_assert_cmpstr (s, ==, "arc");
  tiers = g_variant_lookup_value (variant, "tiers", G_VARIANT_TYPE ("aa{sv}"));
  g_assert_cmpuint (g_variant_n_children (tiers), ==, 2);
  fast = g_variant_get_child_value (tiers, 0);
  g_assert_true (g_variant_lookup (fast, "name", "&s", &s));
  g_assert_cmpstr (s, ==, "fast");
  g_assert_true (g_variant_lookup (fast, "type", "&s", &s));
  g_assert_cmpstr (s, ==, "test");

  /* The text has canonical values, in file order. */
  text = kv_config_to_data (config, NULL);
  g_assert_nonnull (strstr (text, "[primary]\nsize=64MiB\nslot-size=64KiB\npolicy=arc\n"));
  g_assert_nonnull (strstr (text, "[tier fast]\ntype=test\nmax-size=1536MiB\n"));
  g_assert_true (strstr (text, "[tier fast]") < strstr (text, "[tier slow]"));
}

/* An empty section asks for its defaults: the fuzzer's 14-byte file, only
 * "[backpressure]", kept its section through to_data and back. */
static void
test_round_trip_empty_section (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse ("[backpressure]", &error);
  g_autoptr(GVariant) variant = NULL;
  g_autoptr(GVariant) section = NULL;
  g_autofree char *text = NULL;

  g_assert_no_error (error);
  variant = g_variant_ref_sink (kv_config_to_variant (config));
  section = g_variant_lookup_value (variant, "backpressure", G_VARIANT_TYPE_VARDICT);
  g_assert_nonnull (section);
  g_assert_cmpuint (g_variant_n_children (section), ==, 0);
  text = kv_config_to_data (config, NULL);
  g_assert_nonnull (strstr (text, "[backpressure]\n"));
  assert_round_trip (config);
}

static void
test_variant (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(GVariant) dict = NULL;
  g_autofree char *value = NULL;
  g_auto(GStrv) names = NULL;

  dict = g_variant_ref_sink (g_variant_new_parsed (
    "{'primary': <{'size': <'32MiB'>, 'slot-size': <uint64 65536>, 'shared': <true>}>,"
    " 'device': <{'type': <'host'>, 'n-blocks': <64>, 'block-bytes': <'32KiB'>}>,"
    " 'tiers': <[{'name': <'b'>, 'type': <'test'>, 'n-threads': <uint32 2>, 'ratio': <0.75>,"
    "             'hosts': <['x', 'y']>, 'offset': <int64 -2>},"
    "            {'name': <'a'>, 'type': <'test'>, 'backpressure': <'ema'>}]>}"));
  config = kv_config_new_from_variant (registry, dict, &error);
  g_assert_no_error (error);

  names = kv_config_get_tier_names (config);
  g_assert_cmpstrv (names, ((const char *[]) { "b", "a", NULL }));
  value = kv_config_get_value (config, "primary", "slot-size");
  g_assert_cmpstr (value, ==, "64KiB");
  g_clear_pointer (&value, g_free);
  value = kv_config_get_value (config, "tier b", "hosts");
  g_assert_cmpstr (value, ==, "x,y");
  g_clear_pointer (&value, g_free);
  value = kv_config_get_value (config, "tier b", "offset");
  g_assert_cmpstr (value, ==, "-2");
  assert_round_trip (config);
}

static void
expect_variant_error (const char *text,
                      gint        code,
                      const char *fragment)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = NULL;

  config = kv_config_new_from_variant (registry, g_variant_new_parsed (text), &error);
  g_assert_null (config);
  g_assert_error (error, KV_CONFIG_ERROR, code);
  if (strstr (error->message, fragment) == NULL)
    g_error ("“%s” not in “%s”", fragment, error->message);
}

static void
test_variant_errors (void)
{
  expect_variant_error ("{'primary': <{'size': <'1GiB'>}>, 'extra': <1>}",
                        KV_CONFIG_ERROR_UNKNOWN_SECTION,
                        "configuration dictionary: unknown section 'extra' (accepted: primary, device, backpressure, tiers)");
  expect_variant_error ("{'tiers': <'fs'>}", KV_CONFIG_ERROR_INVALID_VALUE,
                        "'tiers' must be an array of dictionaries (aa{sv}), not 's'");
  expect_variant_error ("{'tiers': <[{'type': <'test'>}]>}", KV_CONFIG_ERROR_MISSING_KEY,
                        "'tiers'[0]: missing key 'name'");
  expect_variant_error ("{'tiers': <[{'name': <'a'>}]>}", KV_CONFIG_ERROR_MISSING_KEY,
                        "[tier a]: missing key 'type' (tier types: test)");
  expect_variant_error ("{'tiers': <[{'name': <'a'>, 'type': <'test'>},"
                        " {'name': <'a'>, 'type': <'test'>}]>}",
                        KV_CONFIG_ERROR_DUPLICATE, "[tier a]: duplicate tier name");
  expect_variant_error ("{'tiers': <[{'name': <'a'>, 'type': <'test'>, 'verify': <int32 3>}]>}",
                        KV_CONFIG_ERROR_INVALID_VALUE,
                        "[tier a] key 'verify': 3 (of GVariant type 'i') is not a boolean");
  expect_variant_error ("{'tiers': <[{'name': <'a'>, 'type': <'test'>, 'n-threads': <uint64 65>}]>}",
                        KV_CONFIG_ERROR_INVALID_VALUE,
                        "[tier a] key 'n-threads': 65 is out of range (minimum 1, maximum 64)");
  expect_variant_error ("{'tiers': <[{'name': <'a'>, 'type': <7>}]>}",
                        KV_CONFIG_ERROR_INVALID_VALUE, "the type must be a string, not 'i'");
  expect_variant_error ("{'primary': <'big'>}", KV_CONFIG_ERROR_INVALID_VALUE,
                        "'primary' must be a dictionary (a{sv}), not 's'");
  expect_variant_error ("[1, 2]", KV_CONFIG_ERROR_INVALID_VALUE,
                        "a configuration is a dictionary (a{sv}), not 'ai'");
}

/* A top-level [backpressure] section is merged into each tier's
 * backpressure keys, key by key, the tier's winning (vLLM's top-level
 * `backpressure` dictionary); a tier that says `backpressure = none` gets
 * no detector; where the section comes in the file does not matter. */
static const char inherited_config[] =
  "[primary]\nsize = 1MiB\nslot-size = 64KiB\nhit-pending-deadline = 12.5\n"
  "[tier plain]\ntype = test\n"
  "[tier own]\ntype = test\nbackpressure-high-water-s = 0.2\nbackpressure-policy = throttled\n"
  "[tier off]\ntype = test\nbackpressure = none\n"
  "[backpressure]\nbackpressure = ema\nbackpressure-high-water-s = 0.05\n"
  "backpressure-low-water-s = 0.01\nbackpressure-policy = drop\n";

static KvEmaBackpressureDetector *
tier_detector (KvTieringManager *manager,
               guint             index)
{
  return (KvEmaBackpressureDetector *)
    kv_secondary_tier_get_backpressure_detector (kv_tiering_manager_get_tier (manager, index));
}

static void
test_backpressure_section (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse (inherited_config, &error);
  g_autoptr(KvTieringManager) manager = NULL;
  g_autofree char *deadline = NULL;
  KvEmaBackpressureDetector *plain, *own;

  g_assert_no_error (error);
  g_assert_true (kv_config_check (config, &error));
  g_assert_no_error (error);
  deadline = kv_config_get_value (config, "primary", "hit-pending-deadline");
  g_assert_cmpstr (deadline, ==, "12.5");
  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (kv_tiering_manager_get_hit_pending_deadline (manager), ==, 12.5);

  /* every key from [backpressure] */
  plain = tier_detector (manager, 0);
  g_assert_true (KV_IS_EMA_BACKPRESSURE_DETECTOR (plain));
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (plain), ==, 0.05);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (plain), ==, 0.01);
  g_assert_true (KV_IS_DROP_STORE_POLICY (kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (plain))));
  /* the tier's own win, the others are inherited */
  own = tier_detector (manager, 1);
  g_assert_true (KV_IS_EMA_BACKPRESSURE_DETECTOR (own));
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (own), ==, 0.2);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (own), ==, 0.01);
  g_assert_true (KV_IS_THROTTLED_DROP_POLICY (kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (own))));
  /* none wins over the section */
  g_assert_null (tier_detector (manager, 2));
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);

  /* the section is kept through both written forms */
  assert_round_trip (config);
}

/* The dictionary form: 'backpressure' beside 'primary' and 'tiers', in
 * any order. */
static void
test_backpressure_section_variant (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(GVariant) variant = NULL;
  g_autoptr(GVariant) written = NULL;
  g_autoptr(GVariant) section = NULL;
  KvEmaBackpressureDetector *detector;

  variant = g_variant_parse (
    G_VARIANT_TYPE_VARDICT,
    "{'primary': <{'size': <'1MiB'>, 'slot-size': <'64KiB'>, 'hit-pending-deadline': <0.0>}>,"
    " 'tiers': <[{'name': <'a'>, 'type': <'test'>,"
    "             'backpressure-low-water-s': <0.02>}]>,"
    " 'backpressure': <{'backpressure-high-water-s': <0.5>, 'backpressure-alpha': <0.5>}>}",
    NULL, NULL, &error);
  g_assert_no_error (error);
  config = kv_config_new_from_variant (registry, variant, &error);
  g_assert_no_error (error);
  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (kv_tiering_manager_get_hit_pending_deadline (manager), ==, 0.0);
  detector = tier_detector (manager, 0);
  g_assert_true (KV_IS_EMA_BACKPRESSURE_DETECTOR (detector));
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (detector), ==, 0.5);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (detector), ==, 0.02);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_alpha (detector), ==, 0.5);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));

  written = g_variant_ref_sink (kv_config_to_variant (config));
  section = g_variant_lookup_value (written, "backpressure", G_VARIANT_TYPE_VARDICT);
  g_assert_nonnull (section);
  g_assert_cmpuint (g_variant_n_children (section), ==, 2);
}

static void
test_backpressure_section_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autofree char *value = NULL;

  /* only backpressure keys */
  expect_error ("[backpressure]\ntype = ema\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:2: [backpressure] key 'type': unknown key (accepted: backpressure,"
                " backpressure-policy, backpressure-ramp-factor, backpressure-", NULL);
  expect_error ("[backpressure]\nbackpressure = ema\n[backpressure]\nbackpressure-alpha = 0.5\n",
                KV_CONFIG_ERROR_DUPLICATE, NULL);
  expect_error ("[backpressure]\nbackpressure = none\nbackpressure-alpha = 0.5\n",
                KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:3: [backpressure] key 'backpressure-alpha': backpressure keys need"
                " 'backpressure = ema'", NULL);
  /* a tier checked with what it inherits, even from a later section */
  expect_error ("[tier a]\ntype = test\nbackpressure-low-water-s = 0.5\n"
                "[backpressure]\nbackpressure-high-water-s = 0.1\n",
                KV_CONFIG_ERROR_INVALID_VALUE, "[tier a]", "low-water-s",
                "(with the keys of [backpressure])", NULL);
  expect_error ("[primary]\nhit-pending-deadline = -1\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "test.conf:2: [primary] key 'hit-pending-deadline'", NULL);

  /* set_value adds the section and checks every tier again */
  config = parse ("[tier a]\ntype = test\nbackpressure-low-water-s = 0.004\n", &error);
  g_assert_no_error (error);
  g_assert_true (kv_config_set_value (config, "backpressure", "backpressure-alpha", "0.25", &error));
  g_assert_no_error (error);
  value = kv_config_get_value (config, "backpressure", "backpressure-alpha");
  g_assert_cmpstr (value, ==, "0.25");
  g_assert_false (kv_config_set_value (config, "backpressure", "backpressure-high-water-s", "0.001",
                                       &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
  g_clear_error (&error);
  /* refused: as it was (no such key), and a replaced value comes back */
  g_clear_pointer (&value, g_free);
  value = kv_config_get_value (config, "backpressure", "backpressure-high-water-s");
  g_assert_null (value);
  g_assert_false (kv_config_set_value (config, "tier a", "backpressure-low-water-s", "0.5", &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
  g_clear_error (&error);
  value = kv_config_get_value (config, "tier a", "backpressure-low-water-s");
  g_assert_cmpstr (value, ==, "0.004");
  g_clear_pointer (&value, g_free);

  /* a new [backpressure] section that a tier refuses is not kept */
  g_clear_object (&config);
  config = parse ("[tier a]\ntype = test\nbackpressure-low-water-s = 0.004\n", &error);
  g_assert_no_error (error);
  g_assert_false (kv_config_set_value (config, "backpressure", "backpressure-high-water-s", "0.001",
                                       &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
  g_clear_error (&error);
  value = kv_config_get_value (config, "backpressure", "backpressure-high-water-s");
  g_assert_null (value);
  g_assert_true (kv_config_check (config, &error));
  g_assert_no_error (error);
}

static void
test_create_manager (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse (full_config, &error);
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(KvDevice) device = NULL;
  KvPrimaryTier *primary;
  KvSecondaryTier *fast;
  g_autofree char *label = NULL;
  g_auto(GStrv) hosts = NULL;
  guint64 max_size = 0;
  GFileCreateFlags create_flags = 0;
  gint offset = 0;

  g_assert_no_error (error);
  manager = kv_config_create_manager (config, &error);
  g_assert_no_error (error);

  primary = kv_tiering_manager_get_primary (manager);
  g_assert_cmpuint (kv_primary_tier_get_n_slots (primary), ==, 1024);
  g_assert_cmpuint (kv_primary_tier_get_slot_size (primary), ==, 64 * 1024);
  g_assert_true (KV_IS_ARC_POLICY (kv_primary_tier_get_policy (primary)));

  fast = kv_tiering_manager_get_tier (manager, 0);
  g_assert_true (KV_IS_CONFIG_TEST_TIER (fast));
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (fast), ==, "test");
  g_assert_cmpint (kv_secondary_tier_get_locality (fast), ==, KV_LOCALITY_REMOTE);
  g_object_get (fast, "max-size", &max_size, "label", &label, "hosts", &hosts,
                "create-flags", &create_flags, "offset", &offset, NULL);
  g_assert_cmpuint (max_size, ==, G_GUINT64_CONSTANT (1610612736));
  g_assert_cmpstr (label, ==, "fast one");
  g_assert_cmpstrv (hosts, ((const char *[]) { "10.0.0.5:6379", "10.0.0.6:6379", NULL }));
  g_assert_cmpint (create_flags, ==, G_FILE_CREATE_PRIVATE | G_FILE_CREATE_REPLACE_DESTINATION);
  g_assert_cmpint (offset, ==, -3);

  device = kv_config_create_device (config, kv_primary_tier_get_buffer (primary), &error);
  g_assert_no_error (error);
  g_assert_true (KV_IS_HOST_DEVICE (device));
  g_assert_cmpuint (kv_device_get_n_blocks (device), ==, 256);
  g_assert_cmpuint (kv_device_get_block_bytes (device), ==, 16384);
  g_assert_cmpuint (kv_device_get_chunk_bytes (device), ==, 2 * 2 * 16384);
  g_assert_cmpuint (kv_host_device_get_n_workers (KV_HOST_DEVICE (device)), ==, 1);

  g_assert_true (kv_device_shutdown (device, &error));
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
}

/* A tier that fails to start: those created before it are shut down in
 * reverse order and nothing is returned. */
static void
test_create_failure (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(GPtrArray) shutdown_log = NULL;

  config = parse ("[primary]\nsize = 1MiB\nslot-size = 64KiB\n"
                  "[tier a]\ntype = test\nlabel = a\n"
                  "[tier b]\ntype = test\nlabel = b\n"
                  "[tier c]\ntype = test\nlabel = c\nfail-start = true\n"
                  "[tier d]\ntype = test\nlabel = d\n", &error);
  g_assert_no_error (error);

  shutdown_log = g_ptr_array_new_with_free_func (g_free);
  kv_config_test_tier_set_shutdown_log (shutdown_log);
  manager = kv_config_create_manager (config, &error);
  g_assert_null (manager);
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_FAILED);
  g_assert_cmpstr (error->message, ==,
                   "test.conf:10: [tier c]: cannot create the tier: tier c refuses to start");
  g_assert_cmpuint (shutdown_log->len, ==, 2);
  g_assert_cmpstr (g_ptr_array_index (shutdown_log, 0), ==, "b");
  g_assert_cmpstr (g_ptr_array_index (shutdown_log, 1), ==, "a");
  kv_config_test_tier_set_shutdown_log (NULL);
}

static void
test_create_primary_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse ("[primary]\nsize = 64KiB\nslot-size = 128KiB\n", &error);
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autoptr(KvDevice) device = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (1, 4096, NULL);

  g_assert_no_error (error);
  primary = kv_config_create_primary (config, &error);
  g_assert_null (primary);
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
  g_assert_cmpstr (error->message, ==, "test.conf:1: [primary] key 'size': 64KiB makes 0 slots"
                   " of 128KiB (1 to 4294967295 accepted)");
  g_clear_error (&error);

  device = kv_config_create_device (config, buffer, &error);
  g_assert_null (device);
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_MISSING_KEY);
  g_assert_nonnull (strstr (error->message, "the configuration has no [device] section"));
}

static void
test_set_value (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = kv_config_new (registry);
  g_autofree char *value = NULL;
  g_auto(GStrv) names = NULL;

  g_assert_true (kv_config_set_value (config, "tier x", "type", "test", &error));
  g_assert_no_error (error);
  g_assert_true (kv_config_set_value (config, "tier x", "max-size", "2GiB", &error));
  g_assert_no_error (error);
  g_assert_true (kv_config_set_value (config, "tier x", "max-size", "3GiB", &error));
  value = kv_config_get_value (config, "tier x", "max-size");
  g_assert_cmpstr (value, ==, "3GiB");
  g_assert_true (kv_config_set_value (config, "device", "type", "host", &error));
  g_assert_true (kv_config_set_value (config, "tier y", "type", "test", &error));
  names = kv_config_get_tier_names (config);
  g_assert_cmpstrv (names, ((const char *[]) { "x", "y", NULL }));

  g_assert_false (kv_config_set_value (config, "tier z", "label", "q", &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_MISSING_KEY);
  g_assert_nonnull (strstr (error->message, "[tier z] key 'label': the section does not exist yet"));
  g_clear_error (&error);
  g_assert_false (kv_config_set_value (config, "device", "type", "other", &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_UNKNOWN_TYPE);
  g_clear_error (&error);
  g_assert_false (kv_config_set_value (config, "disk", "size", "1", &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_UNKNOWN_SECTION);
  g_clear_error (&error);
  g_assert_false (kv_config_set_value (config, "tier x", "backpressure-alpha", "2", &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
  g_assert_nonnull (strstr (error->message, "alpha"));
}

static void
test_file (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = NULL;
  g_autofree char *dir = g_dir_make_tmp ("kvtier-config-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "kvtier.conf", NULL);
  g_autofree char *missing = g_build_filename (dir, "missing.conf", NULL);
  g_autofree char *expected = g_strdup_printf ("%s:2: [primary] key 'size'", path);

  g_assert_no_error (error);
  g_assert_true (g_file_set_contents (path, "[primary]\nsize = lots\n", -1, &error));
  config = kv_config_new_from_file (registry, path, &error);
  g_assert_null (config);
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE);
  g_assert_nonnull (strstr (error->message, expected));
  g_clear_error (&error);

  config = kv_config_new_from_file (registry, missing, &error);
  g_assert_null (config);
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT);
  g_clear_error (&error);

  g_assert_true (g_file_set_contents (path, full_config, -1, &error));
  config = kv_config_new_from_file (registry, path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (config);
  g_assert_true (kv_config_get_registry (config) == registry);
  g_remove (path);
  g_rmdir (dir);
}

/* g_key_file_get_string() returns the text of a value with an invalid
 * escape and sets an error: the error is what counts, for every key. */
static void
test_error_escape (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = NULL;
  g_autofree char *label = NULL;

  expect_error ("[primary]\nfile = /dev/shm/a\\qb\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:2: [primary] key 'file': '/dev/shm/a\\qb' has an invalid escape"
                " sequence (accepted: \\s \\n \\t \\r \\\\)", NULL);
  /* Two such keys: the first is reported (a reused GError would warn
   * "GError set over the top" and report the second). */
  expect_error ("[tier t]\ntype = test\nlabel = a\\q\nhosts = b\\z\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:3: [tier t] key 'label': 'a\\q' has an invalid escape", NULL);
  expect_error ("[primary]\nsize = 1MiB\n\n[tier t]\ntype = test\nlabel = ok\n"
                "hosts = b\\z\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:7: [tier t] key 'hosts': 'b\\z' has an invalid escape", NULL);
  /* A bad escape and a trailing one: GKeyFile alone would set its error
   * twice ("GError set over the top", found by fuzz-config). */
  expect_error ("[tier t]\ntype = test\nlabel = a\\q\\\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:3: [tier t] key 'label': 'a\\q\\' has an invalid escape", NULL);
  /* A key-file escape at the end of a line. */
  expect_error ("[tier t]\ntype = test\nlabel = tail\\\n", KV_CONFIG_ERROR_PARSE,
                "test.conf:3: [tier t] key 'label'", "invalid escape", NULL);

  /* Valid escapes still mean what the key-file format says. */
  config = parse ("[tier t]\ntype = test\nlabel = \\sa\\tb\\\\c\n", &error);
  g_assert_no_error (error);
  label = kv_config_get_value (config, "tier t", "label");
  g_assert_cmpstr (label, ==, " a\tb\\c");
}

/* A NUL byte is refused with its line: the key-file parser and the scan
 * that finds lines and duplicates must see the same text. */
static void
test_error_nul (void)
{
  static const char after_nul[] = "[primary]\nsize = 1MiB\n\0[bogus]\nx = 1\n";
  static const char in_value[] = "[primary]\nsize = 1MiB\nslot-size = 4KiB\0 junk\n";
  static const char in_last_line[] = "[primary]\nsize = 1MiB\n[tier t]\ntype = test\n\0";
  const struct { const char *text; gsize length; const char *message; } cases[] = {
    { after_nul, sizeof after_nul - 1,
      "test.conf:3: a NUL byte at column 1 (a configuration is text)" },
    { in_value, sizeof in_value - 1,
      "test.conf:3: a NUL byte at column 17 (a configuration is text)" },
    { in_last_line, sizeof in_last_line - 1,
      "test.conf:5: a NUL byte at column 1 (a configuration is text)" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(KvTierRegistry) registry = new_registry ();
      g_autoptr(KvConfig) config = kv_config_new_from_data (registry, cases[i].text,
                                                            (gssize) cases[i].length,
                                                            "test.conf", &error);

      g_assert_null (config);
      g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_PARSE);
      g_assert_cmpstr (error->message, ==, cases[i].message);
    }
}

/* check() must say what building would, and build nothing. */
static void
expect_check_error (const char *text,
                    gint        code,
                    const char *message)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GError) build_error = NULL;
  g_autoptr(KvConfig) config = parse (text, &error);
  g_autoptr(KvTieringManager) manager = NULL;

  g_assert_no_error (error);
  kv_config_test_tier_reset_n_started ();
  g_assert_false (kv_config_check (config, &error));
  g_assert_error (error, KV_CONFIG_ERROR, code);
  g_assert_cmpstr (error->message, ==, message);
  g_assert_cmpuint (kv_config_test_tier_get_n_started (), ==, 0);

  manager = kv_config_create_manager (config, &build_error);
  g_assert_null (manager);
  g_assert_error (build_error, KV_CONFIG_ERROR, code);
  g_assert_cmpstr (build_error->message, ==, message);
}

static void
test_check (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse (full_config, &error);

  g_assert_no_error (error);
  kv_config_test_tier_reset_n_started ();
  g_assert_true (kv_config_check (config, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_config_test_tier_get_n_started (), ==, 0);

  /* No slot at all, and more slots than a primary tier can have. */
  expect_check_error ("[primary]\nsize = 64KiB\nslot-size = 128KiB\n",
                      KV_CONFIG_ERROR_INVALID_VALUE,
                      "test.conf:1: [primary] key 'size': 64KiB makes 0 slots of 128KiB"
                      " (1 to 4294967295 accepted)");
  expect_check_error ("[primary]\nsize = 2048000000000000\nslot-size = 4KiB\n",
                      KV_CONFIG_ERROR_INVALID_VALUE,
                      "test.conf:1: [primary] key 'size': 1953125000MiB makes 500000000000"
                      " slots of 4KiB (1 to 4294967295 accepted)");
  /* A tier whose start would fail says so without starting. */
  expect_check_error ("[primary]\nsize = 1MiB\nslot-size = 64KiB\n"
                      "[tier a]\ntype = test\nlabel = a\n"
                      "[tier c]\ntype = test\nlabel = c\nfail-start = true\n",
                      KV_CONFIG_ERROR_FAILED,
                      "test.conf:7: [tier c]: cannot create the tier: tier c refuses to start");
}

/* The device is checked with the tiers: a chunk larger than a slot. */
static void
test_check_device (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvConfig) config = parse ("[primary]\nsize = 1MiB\nslot-size = 64KiB\n"
                                      "[device]\ntype = host\nn-blocks = 4\n"
                                      "block-bytes = 64KiB\nn-layers = 2\n", &error);
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autoptr(KvDevice) device = NULL;
  g_autoptr(GError) build_error = NULL;

  g_assert_no_error (error);
  g_assert_false (kv_config_check (config, &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "test.conf:4: [device]: cannot create the device: "));

  primary = kv_config_create_primary (config, &build_error);
  g_assert_no_error (build_error);
  device = kv_config_create_device (config, kv_primary_tier_get_buffer (primary), &build_error);
  g_assert_null (device);
  g_assert_error (build_error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_FAILED);
  g_assert_cmpstr (build_error->message, ==, error->message);
  g_clear_error (&error);
  g_clear_object (&config);

  /* The host device's own refusal, after the device's: memory it could
   * not even address (checked only: building would map a 1 TiB slot). */
  config = parse ("[primary]\nsize = 1TiB\nslot-size = 1TiB\n"
                  "[device]\ntype = host\nn-blocks = 33554432\nblock-bytes = 1GiB\n"
                  "n-layers = 1024\nblocks-per-chunk = 1\n", &error);
  g_assert_no_error (error);
  g_assert_false (kv_config_check (config, &error));
  g_assert_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_FAILED);
  g_assert_cmpstr (error->message, ==, "test.conf:4: [device]: cannot create the device: "
                   "KvHostDevice: 1024 layers × 33554432 blocks × 1073741824 bytes overflow"
                   " the address space");
}

/* [primary] keys set the host buffer's and the primary tier's properties:
 * `shared` a memfd, `file` the buffer's path, `events` enable-events, and
 * an ARC policy gets the slot count as its capacity. */
static void
test_create_primary_properties (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("kvtier-config-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "primary.mmap", NULL);
  g_autofree char *text = g_strdup_printf ("[primary]\nsize = 1MiB\nslot-size = 64KiB\n"
                                           "file = %s\nevents = yes\npolicy = arc\n", path);
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autofree char *buffer_path = NULL;
  gboolean events = FALSE;
  guint capacity = 0;

  g_assert_no_error (error);
  config = parse (text, &error);
  g_assert_no_error (error);
  primary = kv_config_create_primary (config, &error);
  g_assert_no_error (error);
  g_assert_cmpint (kv_host_buffer_get_backing (kv_primary_tier_get_buffer (primary)), ==,
                   KV_HOST_BUFFER_BACKING_FILE);
  g_object_get (kv_primary_tier_get_buffer (primary), "path", &buffer_path, NULL);
  g_assert_cmpstr (buffer_path, ==, path);
  g_assert_true (g_file_test (path, G_FILE_TEST_IS_REGULAR));
  g_object_get (primary, "enable-events", &events, NULL);
  g_assert_true (events);
  g_assert_true (KV_IS_ARC_POLICY (kv_primary_tier_get_policy (primary)));
  g_object_get (kv_primary_tier_get_policy (primary), "capacity", &capacity, NULL);
  g_assert_cmpuint (capacity, ==, 16);
  g_clear_object (&primary);
  g_clear_object (&config);
  /* The buffer created the file, and removed it. */
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));

  config = parse ("[primary]\nsize = 1MiB\nslot-size = 64KiB\nshared = true\n", &error);
  g_assert_no_error (error);
  primary = kv_config_create_primary (config, &error);
  g_assert_no_error (error);
  g_assert_cmpint (kv_host_buffer_get_backing (kv_primary_tier_get_buffer (primary)), ==,
                   KV_HOST_BUFFER_BACKING_MEMFD);
  g_object_get (primary, "enable-events", &events, NULL);
  g_assert_false (events);
  g_assert_true (KV_IS_LRU_POLICY (kv_primary_tier_get_policy (primary)));
  g_rmdir (dir);
}

/* GObject finds "max_size" for "max-size": a configuration takes only the
 * canonical name, or a section giving both would set the property twice
 * (a critical, found by fuzz-config). The registry's dictionaries too. */
static void
test_error_key_spelling (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (1, 4096, &error);
  g_autoptr(KvSecondaryTier) tier = NULL;
  GVariantBuilder props;

  expect_error ("[tier a]\ntype = test\nmax_size = 1GiB\nmax-size = 2GiB\n",
                KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:3: [tier a] key 'max_size': unknown key for tier type 'test'"
                " (accepted: type,", "max-size", NULL);
  expect_error ("[tier a]\ntype = test\nbackpressure-high_water-s = 5\n",
                KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:3: [tier a] key 'backpressure-high_water-s': unknown key", NULL);
  expect_error ("[device]\ntype = host\nn_blocks = 4\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:3: [device] key 'n_blocks': unknown key", NULL);
  expect_error ("[primary]\nslot_size = 64KiB\n", KV_CONFIG_ERROR_UNKNOWN_KEY,
                "test.conf:2: [primary] key 'slot_size': unknown key", NULL);

  g_assert_no_error (error);
  g_variant_builder_init (&props, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&props, "{sv}", "max_size", g_variant_new_string ("1GiB"));
  g_variant_builder_add (&props, "{sv}", "max-size", g_variant_new_string ("2GiB"));
  tier = kv_tier_registry_create_tier (registry, "test", buffer, NULL,
                                       g_variant_builder_end (&props), &error);
  g_assert_null (tier);
  g_assert_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY);
  g_assert_nonnull (strstr (error->message, "no configurable property 'max_size'"));
}

/* A string list from a dictionary is taken as the text form takes it, so
 * it writes back as it was read (found by fuzz-config: ['', ''] became []
 * on a round trip). An item holding a separator cannot be written. */
static void
test_variant_lists (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvConfig) reread = NULL;
  g_autofree char *value = NULL;
  g_autofree char *text = NULL;
  g_autoptr(GVariant) variant = NULL;
  g_autoptr(GVariant) reread_variant = NULL;

  config = kv_config_new_from_variant (registry, g_variant_new_parsed (
    "{'tiers': <[{'name': <'a'>, 'type': <'test'>, 'hosts': <['', ' x ', 'y', '']>}]>}"),
    &error);
  g_assert_no_error (error);
  value = kv_config_get_value (config, "tier a", "hosts");
  g_assert_cmpstr (value, ==, "x,y");
  text = kv_config_to_data (config, NULL);
  reread = kv_config_new_from_data (registry, text, -1, NULL, &error);
  g_assert_no_error (error);
  variant = g_variant_ref_sink (kv_config_to_variant (config));
  reread_variant = g_variant_ref_sink (kv_config_to_variant (reread));
  g_assert_true (g_variant_equal (variant, reread_variant));

  expect_variant_error ("{'tiers': <[{'name': <'a'>, 'type': <'test'>, 'hosts': <['x,y']>}]>}",
                        KV_CONFIG_ERROR_INVALID_VALUE,
                        "'x,y' cannot be an item of a string list (',' and ';' separate items)");
}

/* A subnormal double from a dictionary is written as text that must read
 * back (found by fuzz-config: strtod's ERANGE refused it); an overflow is
 * still not a number. */
static void
test_subnormal (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvTierRegistry) registry = new_registry ();
  g_autoptr(KvConfig) config = NULL;
  g_autoptr(KvConfig) reread = NULL;
  g_autofree char *value = NULL;
  g_autofree char *text = NULL;
  g_autoptr(GVariant) variant = NULL;
  g_autoptr(GVariant) reread_variant = NULL;

  config = kv_config_new_from_variant (registry, g_variant_new_parsed (
    "{'tiers': <[{'name': <'a'>, 'type': <'test'>, 'ratio': <%d>}]>}", 3.4225272238268e-310),
    &error);
  g_assert_no_error (error);
  value = kv_config_get_value (config, "tier a", "ratio");
  g_assert_cmpstr (value, ==, "3.4225272238268e-310");
  text = kv_config_to_data (config, NULL);
  reread = kv_config_new_from_data (registry, text, -1, NULL, &error);
  g_assert_no_error (error);
  variant = g_variant_ref_sink (kv_config_to_variant (config));
  reread_variant = g_variant_ref_sink (kv_config_to_variant (reread));
  g_assert_true (g_variant_equal (variant, reread_variant));

  expect_error ("[tier a]\ntype = test\nratio = 1e999\n", KV_CONFIG_ERROR_INVALID_VALUE,
                "'1e999' is not a number", NULL);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/config/full", test_full);
  g_test_add_func ("/kvtier/config/defaults", test_defaults);
  g_test_add_func ("/kvtier/config/sizes", test_sizes);
  g_test_add_func ("/kvtier/config/error/parse", test_error_parse);
  g_test_add_func ("/kvtier/config/error/unknown-section", test_error_unknown_section);
  g_test_add_func ("/kvtier/config/error/unknown-key", test_error_unknown_key);
  g_test_add_func ("/kvtier/config/error/bad-value", test_error_bad_value);
  g_test_add_func ("/kvtier/config/error/missing-type", test_error_missing_type);
  g_test_add_func ("/kvtier/config/error/unknown-type", test_error_unknown_type);
  g_test_add_func ("/kvtier/config/error/duplicate", test_error_duplicate);
  g_test_add_func ("/kvtier/config/backpressure", test_backpressure);
  g_test_add_func ("/kvtier/config/backpressure-presets", test_backpressure_presets);
  g_test_add_func ("/kvtier/config/backpressure-errors", test_backpressure_errors);
  g_test_add_func ("/kvtier/config/backpressure-section", test_backpressure_section);
  g_test_add_func ("/kvtier/config/backpressure-section-variant", test_backpressure_section_variant);
  g_test_add_func ("/kvtier/config/backpressure-section-errors", test_backpressure_section_errors);
  g_test_add_func ("/kvtier/config/round-trip", test_round_trip);
  g_test_add_func ("/kvtier/config/round-trip-empty-section", test_round_trip_empty_section);
  g_test_add_func ("/kvtier/config/variant", test_variant);
  g_test_add_func ("/kvtier/config/variant-errors", test_variant_errors);
  g_test_add_func ("/kvtier/config/variant-lists", test_variant_lists);
  g_test_add_func ("/kvtier/config/subnormal", test_subnormal);
  g_test_add_func ("/kvtier/config/create-manager", test_create_manager);
  g_test_add_func ("/kvtier/config/create-failure", test_create_failure);
  g_test_add_func ("/kvtier/config/create-primary-errors", test_create_primary_errors);
  g_test_add_func ("/kvtier/config/set-value", test_set_value);
  g_test_add_func ("/kvtier/config/file", test_file);
  g_test_add_func ("/kvtier/config/error/escape", test_error_escape);
  g_test_add_func ("/kvtier/config/error/nul", test_error_nul);
  g_test_add_func ("/kvtier/config/error/key-spelling", test_error_key_spelling);
  g_test_add_func ("/kvtier/config/check", test_check);
  g_test_add_func ("/kvtier/config/check-device", test_check_device);
  g_test_add_func ("/kvtier/config/create-primary-properties", test_create_primary_properties);

  return g_test_run ();
}
