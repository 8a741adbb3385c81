/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

/* ------------------------------------------------------------------ */
/* enums, error domain, version                                        */

static void
test_medium_strings (void)
{
  KvMedium medium = KV_MEDIUM_UNSPECIFIED;
  g_autoptr(GError) error = NULL;

  g_assert_cmpstr (kv_medium_to_string (KV_MEDIUM_CPU), ==, "CPU");
  g_assert_cmpstr (kv_medium_to_string (KV_MEDIUM_STORAGE), ==, "STORAGE");
  g_assert_null (kv_medium_to_string (KV_MEDIUM_UNSPECIFIED));

  g_assert_true (kv_medium_from_string ("CPU", &medium, &error));
  g_assert_no_error (error);
  g_assert_cmpint (medium, ==, KV_MEDIUM_CPU);
  g_assert_true (kv_medium_from_string ("STORAGE", &medium, &error));
  g_assert_no_error (error);
  g_assert_cmpint (medium, ==, KV_MEDIUM_STORAGE);

  /* Strict: no case folding, no empty string, no removed REMOTE medium. */
  medium = KV_MEDIUM_STORAGE;
  g_assert_false (kv_medium_from_string ("cpu", &medium, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "“cpu”"));
  g_assert_nonnull (strstr (error->message, "CPU, STORAGE"));
  g_assert_cmpint (medium, ==, KV_MEDIUM_STORAGE);
  g_clear_error (&error);

  g_assert_false (kv_medium_from_string ("", &medium, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  g_assert_false (kv_medium_from_string ("REMOTE", &medium, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
}

static void
test_locality_strict (void)
{
  KvLocality locality = KV_LOCALITY_UNSPECIFIED;
  g_autoptr(GError) error = NULL;

  g_assert_cmpstr (kv_locality_to_string (KV_LOCALITY_LOCAL), ==, "LOCAL");
  g_assert_cmpstr (kv_locality_to_string (KV_LOCALITY_REMOTE), ==, "REMOTE");
  g_assert_null (kv_locality_to_string (KV_LOCALITY_UNSPECIFIED));

  g_assert_true (kv_locality_from_string ("LOCAL", &locality, &error));
  g_assert_no_error (error);
  g_assert_cmpint (locality, ==, KV_LOCALITY_LOCAL);
  g_assert_true (kv_locality_from_string ("REMOTE", &locality, &error));
  g_assert_no_error (error);
  g_assert_cmpint (locality, ==, KV_LOCALITY_REMOTE);

  /* The fs tier's test: "local" and "" are errors. */
  g_assert_false (kv_locality_from_string ("local", &locality, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "“local”"));
  g_assert_nonnull (strstr (error->message, "LOCAL, REMOTE"));
  g_assert_cmpint (locality, ==, KV_LOCALITY_REMOTE);
  g_clear_error (&error);

  g_assert_false (kv_locality_from_string ("", &locality, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "“”"));
  g_clear_error (&error);

  g_assert_false (kv_locality_from_string ("LOCAL ", &locality, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
}

static void
test_lookup_result_strings (void)
{
  g_assert_cmpstr (kv_lookup_result_to_string (KV_LOOKUP_RESULT_MISS), ==, "MISS");
  g_assert_cmpstr (kv_lookup_result_to_string (KV_LOOKUP_RESULT_HIT), ==, "HIT");
  g_assert_cmpstr (kv_lookup_result_to_string (KV_LOOKUP_RESULT_HIT_PENDING), ==, "HIT_PENDING");
  g_assert_cmpstr (kv_lookup_result_to_string (KV_LOOKUP_RESULT_RETRY), ==, "RETRY");
  g_assert_cmpint (KV_LOOKUP_RESULT_MISS, ==, 0);
}

static void
test_error_quark (void)
{
  g_assert_cmpstr (g_quark_to_string (KV_TIER_ERROR), ==, "kv-tier-error-quark");
  g_assert_cmpuint (kv_tier_error_quark (), ==, KV_TIER_ERROR);
}

static void
test_version (void)
{
  g_assert_cmpuint (kv_get_major_version (), ==, KVTIER_MAJOR_VERSION);
  g_assert_cmpuint (kv_get_minor_version (), ==, KVTIER_MINOR_VERSION);
  g_assert_cmpuint (kv_get_micro_version (), ==, KVTIER_MICRO_VERSION);
  g_assert_true (KVTIER_CHECK_VERSION (0, 1, 0));
}

/* ------------------------------------------------------------------ */
/* KvKey                                                               */

static void
test_key_offload_round_trip (void)
{
  static const guint8 hash[] = { 0xde, 0xad };
  static const guint8 expected[] = { 0xde, 0xad, 0x00, 0x00, 0x01, 0x02 };
  g_autoptr(KvKey) key = kv_key_new (hash, sizeof hash, 258);
  g_autoptr(GBytes) offload = kv_key_to_offload_key (key);
  g_autoptr(KvKey) back = NULL;
  g_autoptr(GError) error = NULL;
  const guint8 *data;
  gsize len;

  data = g_bytes_get_data (offload, &len);
  g_assert_cmpmem (data, len, expected, sizeof expected);

  back = kv_key_new_from_offload_key (expected, sizeof expected, &error);
  g_assert_no_error (error);
  g_assert_nonnull (back);
  g_assert_cmpuint (kv_key_get_group (back), ==, 258);
  data = kv_key_get_hash (back, &len);
  g_assert_cmpmem (data, len, hash, sizeof hash);
  g_assert_true (kv_key_equal (key, back));
  g_assert_cmpuint (kv_key_hash (key), ==, kv_key_hash (back));

  /* The largest group survives the big-endian suffix too. */
  {
    static const guint8 max_group[] = { 0x01, 0xff, 0xff, 0xff, 0xfe };
    g_autoptr(KvKey) k = kv_key_new_from_offload_key (max_group, sizeof max_group, &error);

    g_assert_no_error (error);
    g_assert_cmpuint (kv_key_get_group (k), ==, 0xfffffffeu);
    data = kv_key_get_hash (k, &len);
    g_assert_cmpuint (len, ==, 1);
    g_assert_cmpuint (data[0], ==, 0x01);
  }
}

static void
test_key_offload_too_short (void)
{
  static const guint8 four[] = { 0x00, 0x00, 0x01, 0x02 };
  g_autoptr(GError) error = NULL;
  KvKey *key;

  key = kv_key_new_from_offload_key (four, sizeof four, &error);
  g_assert_null (key);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "00000102"));
  g_assert_nonnull (strstr (error->message, "4 bytes"));
  g_clear_error (&error);

  key = kv_key_new_from_offload_key (NULL, 0, &error);
  g_assert_null (key);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
}

static void
test_key_equal_hash (void)
{
  static const guint8 h1[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
  static const guint8 h2[] = { 1, 2, 3, 4, 5, 6, 7, 9 };
  g_autoptr(KvKey) a = kv_key_new (h1, sizeof h1, 0);
  g_autoptr(GBytes) bytes = g_bytes_new_static (h1, sizeof h1);
  g_autoptr(KvKey) a2 = kv_key_new_from_bytes (bytes, 0);
  g_autoptr(KvKey) other_group = kv_key_new (h1, sizeof h1, 1);
  g_autoptr(KvKey) other_hash = kv_key_new (h2, sizeof h2, 0);
  g_autoptr(KvKey) prefix = kv_key_new (h1, sizeof h1 - 1, 0);
  g_autoptr(GHashTable) table = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                                       (GDestroyNotify) kv_key_unref, NULL);

  g_assert_true (a != a2);
  g_assert_true (kv_key_equal (a, a));
  g_assert_true (kv_key_equal (a, a2));
  g_assert_true (kv_key_equal (a2, a));
  g_assert_cmpuint (kv_key_hash (a), ==, kv_key_hash (a2));

  g_assert_false (kv_key_equal (a, other_group));
  g_assert_cmpuint (kv_key_hash (a), !=, kv_key_hash (other_group));
  g_assert_false (kv_key_equal (a, other_hash));
  g_assert_false (kv_key_equal (a, prefix));
  g_assert_false (kv_key_equal (prefix, a));

  /* A table keyed by one key finds an equal, distinct key. */
  g_hash_table_add (table, kv_key_ref (a));
  g_assert_true (g_hash_table_contains (table, a2));
  g_assert_false (g_hash_table_contains (table, other_group));
  g_assert_false (g_hash_table_contains (table, other_hash));
}

static void
test_key_to_string (void)
{
  static const guint8 hash[] = { 0x00, 0x0f, 0xa0, 0xff, 0x7b };
  g_autoptr(KvKey) key = kv_key_new (hash, sizeof hash, 0x01020304);
  g_autofree char *str = kv_key_to_string (key);

  /* Lowercase hex of the hash only; the group is not rendered. */
  g_assert_cmpstr (str, ==, "000fa0ff7b");
}

static void
test_key_hash_bytes (void)
{
  static const guint8 hash[] = { 9, 8, 7 };
  g_autoptr(KvKey) key = kv_key_new (hash, sizeof hash, 5);
  g_autoptr(GBytes) bytes = kv_key_get_hash_bytes (key);
  const guint8 *data;
  gsize len = 0;

  g_assert_cmpmem (g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes), hash, sizeof hash);
  data = kv_key_get_hash (key, &len);
  g_assert_cmpmem (data, len, hash, sizeof hash);
  g_assert_true (kv_key_get_hash (key, NULL) == data);
  g_assert_cmpuint (kv_key_get_group (key), ==, 5);
}

static void
test_key_boxed (void)
{
  static const guint8 hash[] = { 1 };
  g_autoptr(KvKey) key = kv_key_new (hash, sizeof hash, 0);
  KvKey *copy;

  g_assert_true (G_TYPE_IS_BOXED (KV_TYPE_KEY));
  g_assert_cmpstr (g_type_name (KV_TYPE_KEY), ==, "KvKey");
  copy = g_boxed_copy (KV_TYPE_KEY, key);
  g_assert_true (copy == key);
  g_boxed_free (KV_TYPE_KEY, copy);
  g_assert_cmpuint (kv_key_get_group (key), ==, 0);
}

static void
test_key_empty_hash (void)
{
  static const guint8 hash[] = { 1 };
  g_autoptr(GBytes) empty = g_bytes_new (NULL, 0);
  KvKey *key;

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*hash_len > 0*");
  key = kv_key_new (hash, 0, 0);
  g_test_assert_expected_messages ();
  g_assert_null (key);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*len > 0*");
  key = kv_key_new_from_bytes (empty, 0);
  g_test_assert_expected_messages ();
  g_assert_null (key);
}

/* ------------------------------------------------------------------ */
/* KvTierFilter                                                        */

static const KvMedium all_media[] = { KV_MEDIUM_UNSPECIFIED, KV_MEDIUM_CPU, KV_MEDIUM_STORAGE };
static const KvLocality all_localities[] = { KV_LOCALITY_UNSPECIFIED, KV_LOCALITY_LOCAL, KV_LOCALITY_REMOTE };

static void
test_filter_all_identity (void)
{
  KvTierFilter *all = kv_tier_filter_get_all ();
  g_autoptr(KvTierFilter) equivalent = kv_tier_filter_new ();
  KvTierFilter *ref;

  g_assert_true (kv_tier_filter_get_all () == all);
  g_assert_true (kv_tier_filter_is_all (all));
  g_assert_cmpuint (kv_tier_filter_get_n_matchers (all), ==, 1);

  /* Same matcher, but not ALL: identity, not structure, decides. */
  kv_tier_filter_add_matcher (equivalent, KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_UNSPECIFIED);
  g_assert_false (kv_tier_filter_is_all (equivalent));
  for (guint m = 0; m < G_N_ELEMENTS (all_media); m++)
    for (guint l = 0; l < G_N_ELEMENTS (all_localities); l++)
      {
        g_assert_true (kv_tier_filter_allows (all, all_media[m], all_localities[l]));
        g_assert_true (kv_tier_filter_allows (equivalent, all_media[m], all_localities[l]));
      }

  /* Unbalanced unrefs (e.g. from a binding) must not free the singleton. */
  ref = kv_tier_filter_ref (all);
  g_assert_true (ref == all);
  kv_tier_filter_unref (all);
  kv_tier_filter_unref (all);
  g_assert_true (kv_tier_filter_is_all (kv_tier_filter_get_all ()));
  g_assert_cmpuint (kv_tier_filter_get_n_matchers (kv_tier_filter_get_all ()), ==, 1);
}

static void
test_filter_all_immutable (void)
{
  KvTierFilter *all = kv_tier_filter_get_all ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*!kv_tier_filter_is_all (self)*");
  kv_tier_filter_add_matcher (all, KV_MEDIUM_CPU, KV_LOCALITY_LOCAL);
  g_test_assert_expected_messages ();

  g_assert_cmpuint (kv_tier_filter_get_n_matchers (all), ==, 1);
  g_assert_true (kv_tier_filter_allows (all, KV_MEDIUM_STORAGE, KV_LOCALITY_REMOTE));
}

static void
test_filter_empty_denies (void)
{
  g_autoptr(KvTierFilter) filter = kv_tier_filter_new ();

  g_assert_cmpuint (kv_tier_filter_get_n_matchers (filter), ==, 0);
  g_assert_false (kv_tier_filter_is_all (filter));
  for (guint m = 0; m < G_N_ELEMENTS (all_media); m++)
    for (guint l = 0; l < G_N_ELEMENTS (all_localities); l++)
      g_assert_false (kv_tier_filter_allows (filter, all_media[m], all_localities[l]));
}

static void
test_filter_allows_matrix (void)
{
  /* Rows: a filter with one matcher (m, l); columns: a tier (m, l).
   * U = unspecified, C = CPU, S = STORAGE, L = LOCAL, R = REMOTE. */
  static const struct {
    KvMedium fm;
    KvLocality fl;
    const char *allowed; /* 9 chars, tier order (U,U) (U,L) (U,R) (C,U) ... */
  } rows[] = {
    { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_UNSPECIFIED, "111111111" },
    { KV_MEDIUM_CPU,         KV_LOCALITY_UNSPECIFIED, "111111000" },
    { KV_MEDIUM_STORAGE,     KV_LOCALITY_UNSPECIFIED, "111000111" },
    { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_LOCAL,       "110110110" },
    { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_REMOTE,      "101101101" },
    { KV_MEDIUM_CPU,         KV_LOCALITY_LOCAL,       "110110000" },
    { KV_MEDIUM_STORAGE,     KV_LOCALITY_REMOTE,      "101000101" },
  };

  for (guint r = 0; r < G_N_ELEMENTS (rows); r++)
    {
      g_autoptr(KvTierFilter) filter = kv_tier_filter_new ();

      kv_tier_filter_add_matcher (filter, rows[r].fm, rows[r].fl);
      for (guint m = 0; m < G_N_ELEMENTS (all_media); m++)
        for (guint l = 0; l < G_N_ELEMENTS (all_localities); l++)
          {
            gboolean expected = rows[r].allowed[m * 3 + l] == '1';

            if (kv_tier_filter_allows (filter, all_media[m], all_localities[l]) != expected)
              g_error ("matcher (%d,%d) on tier (%d,%d): expected %d",
                       rows[r].fm, rows[r].fl, all_media[m], all_localities[l], expected);
          }
    }

  /* Several matchers: any one allowing is enough. */
  {
    g_autoptr(KvTierFilter) filter = kv_tier_filter_new ();

    kv_tier_filter_add_matcher (filter, KV_MEDIUM_CPU, KV_LOCALITY_LOCAL);
    kv_tier_filter_add_matcher (filter, KV_MEDIUM_STORAGE, KV_LOCALITY_REMOTE);
    g_assert_cmpuint (kv_tier_filter_get_n_matchers (filter), ==, 2);
    g_assert_true (kv_tier_filter_allows (filter, KV_MEDIUM_CPU, KV_LOCALITY_LOCAL));
    g_assert_true (kv_tier_filter_allows (filter, KV_MEDIUM_STORAGE, KV_LOCALITY_REMOTE));
    g_assert_false (kv_tier_filter_allows (filter, KV_MEDIUM_CPU, KV_LOCALITY_REMOTE));
    g_assert_false (kv_tier_filter_allows (filter, KV_MEDIUM_STORAGE, KV_LOCALITY_LOCAL));
  }
}

/* One §2.3 parse rule, written once as JSON and once as GVariant text. */
typedef struct {
  const char *json;
  const char *variant;          /* g_variant_parse() text */
  gboolean warns;               /* non-list → ALL with a warning */
  gboolean is_all;              /* result is the ALL singleton */
  guint n_matchers;             /* when not ALL */
  struct { KvMedium m; KvLocality l; } matchers[3];
} ParseCase;

static const ParseCase parse_non_list[] = {
  { "{\"medium\": \"CPU\"}", "{'medium': <'CPU'>}", TRUE, TRUE, 0, { { 0 } } },
  { "\"CPU\"", "'CPU'", TRUE, TRUE, 0, { { 0 } } },
  { "42", "<int64 42>", TRUE, TRUE, 0, { { 0 } } },
  { "null", "@mv nothing", TRUE, TRUE, 0, { { 0 } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};
static const ParseCase parse_empty_list[] = {
  { "[]", "@aa{sv} []", FALSE, FALSE, 0, { { 0 } } },
  { NULL, "@av []", FALSE, FALSE, 0, { { 0 } } },
  { NULL, "<@aa{sv} []>", FALSE, FALSE, 0, { { 0 } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};
static const ParseCase parse_all_unknown[] = {
  { "[{\"medium\": \"GPU\"}, {\"locality\": \"MARS\"}]",
    "[{'medium': <'GPU'>}, {'locality': <'MARS'>}]", FALSE, TRUE, 0, { { 0 } } },
  { "[1, \"x\", null]", "[<1>, <'x'>, <@ms nothing>]", FALSE, TRUE, 0, { { 0 } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};
static const ParseCase parse_non_dict_skipped[] = {
  { "[\"CPU\", 7, [{\"medium\": \"CPU\"}], {\"medium\": \"STORAGE\"}]",
    "[<'CPU'>, <7>, <[{'medium': <'CPU'>}]>, <{'medium': <'STORAGE'>}>]",
    FALSE, FALSE, 1, { { KV_MEDIUM_STORAGE, KV_LOCALITY_UNSPECIFIED } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};
static const ParseCase parse_case_insensitive[] = {
  { "[{\"medium\": \"cpu\", \"locality\": \"Local\"}, {\"medium\": \"sToRaGe\", \"locality\": \"remote\"}]",
    "[{'medium': <'cpu'>, 'locality': <'Local'>}, {'medium': <'sToRaGe'>, 'locality': <'remote'>}]",
    FALSE, FALSE, 2, { { KV_MEDIUM_CPU, KV_LOCALITY_LOCAL }, { KV_MEDIUM_STORAGE, KV_LOCALITY_REMOTE } } },
  /* a{ss} is a dictionary too */
  { NULL, "[{'medium': 'storage'}]",
    FALSE, FALSE, 1, { { KV_MEDIUM_STORAGE, KV_LOCALITY_UNSPECIFIED } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};
static const ParseCase parse_unknown_skipped[] = {
  { "[{\"medium\": \"GPU\"}, {\"medium\": \"cpu\"}, {\"medium\": \"storage\", \"locality\": \"moon\"}]",
    "[{'medium': <'GPU'>}, {'medium': <'cpu'>}, {'medium': <'storage'>, 'locality': <'moon'>}]",
    FALSE, FALSE, 1, { { KV_MEDIUM_CPU, KV_LOCALITY_UNSPECIFIED } } },
  /* the old REMOTE medium is unknown now */
  { "[{\"medium\": \"remote\"}, {\"locality\": \"remote\"}]",
    "[{'medium': <'remote'>}, {'locality': <'remote'>}]",
    FALSE, FALSE, 1, { { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_REMOTE } } },
  /* a value that is not a string skips the entry */
  { "[{\"medium\": 1}, {\"locality\": [\"LOCAL\"]}, {\"locality\": \"local\"}]",
    "[{'medium': <1>}, {'locality': <['LOCAL']>}, {'locality': <'local'>}]",
    FALSE, FALSE, 1, { { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_LOCAL } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};
static const ParseCase parse_missing_keys[] = {
  /* {} and null values match anything; unrelated keys are ignored */
  { "[{}, {\"medium\": null, \"other\": 3}]",
    "[@a{sv} {}, {'medium': <@ms nothing>, 'other': <3>}]",
    FALSE, FALSE, 2, { { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_UNSPECIFIED },
                       { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_UNSPECIFIED } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};
static const ParseCase parse_boxed_list[] = {
  { NULL, "<[{'locality': <'LOCAL'>}]>",
    FALSE, FALSE, 1, { { KV_MEDIUM_UNSPECIFIED, KV_LOCALITY_LOCAL } } },
  { NULL, "<<[<{'medium': <<'CPU'>>}>]>>",
    FALSE, FALSE, 1, { { KV_MEDIUM_CPU, KV_LOCALITY_UNSPECIFIED } } },
  { NULL, NULL, 0, 0, 0, { { 0 } } },
};

static void
check_parsed (const ParseCase *c,
              KvTierFilter    *filter,
              const char      *input)
{
  g_autoptr(KvTierFilter) expected = kv_tier_filter_new ();

  g_assert_nonnull (filter);
  if (c->is_all)
    {
      if (!kv_tier_filter_is_all (filter))
        g_error ("%s: expected ALL", input);
      return;
    }

  if (kv_tier_filter_is_all (filter))
    g_error ("%s: unexpected ALL", input);
  g_assert_cmpuint (kv_tier_filter_get_n_matchers (filter), ==, c->n_matchers);

  for (guint i = 0; i < c->n_matchers; i++)
    kv_tier_filter_add_matcher (expected, c->matchers[i].m, c->matchers[i].l);
  for (guint m = 0; m < G_N_ELEMENTS (all_media); m++)
    for (guint l = 0; l < G_N_ELEMENTS (all_localities); l++)
      if (kv_tier_filter_allows (filter, all_media[m], all_localities[l]) !=
          kv_tier_filter_allows (expected, all_media[m], all_localities[l]))
        g_error ("%s: wrong answer for tier (%d,%d)", input, all_media[m], all_localities[l]);
}

static void
test_parse_variant (gconstpointer data)
{
  for (const ParseCase *c = data; c->json != NULL || c->variant != NULL; c++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GVariant) value = NULL;
      g_autoptr(KvTierFilter) filter = NULL;

      if (c->variant == NULL)
        continue;
      value = g_variant_parse (NULL, c->variant, NULL, NULL, &error);
      g_assert_no_error (error);

      if (c->warns)
        g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*kv_load_tiers must be a list*");
      filter = kv_tier_filter_parse_variant (value);
      g_test_assert_expected_messages ();
      check_parsed (c, filter, c->variant);
    }
}

static void
test_parse_json (gconstpointer data)
{
  for (const ParseCase *c = data; c->json != NULL || c->variant != NULL; c++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(KvTierFilter) filter = NULL;

      if (c->json == NULL)
        continue;
      if (c->warns)
        g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*kv_load_tiers must be a list*");
      filter = kv_tier_filter_parse_json (c->json, &error);
      g_test_assert_expected_messages ();
      g_assert_no_error (error);
      check_parsed (c, filter, c->json);
    }
}

static void
test_parse_null (void)
{
  g_autoptr(KvTierFilter) filter = kv_tier_filter_parse_variant (NULL);

  g_assert_true (kv_tier_filter_is_all (filter));
}

static void
test_parse_floating (void)
{
  /* A floating value is consumed (valgrind checks that nothing leaks). */
  g_autoptr(KvTierFilter) filter =
    kv_tier_filter_parse_variant (g_variant_new_parsed ("[{'medium': <'cpu'>}]"));

  g_assert_cmpuint (kv_tier_filter_get_n_matchers (filter), ==, 1);
  g_assert_true (kv_tier_filter_allows (filter, KV_MEDIUM_CPU, KV_LOCALITY_REMOTE));
  g_assert_false (kv_tier_filter_allows (filter, KV_MEDIUM_STORAGE, KV_LOCALITY_REMOTE));
}

static void
test_parse_json_malformed (void)
{
  static const char * const bad[] = { "[{", "[{\"medium\": cpu}]", "", "   ", "[1,]x" };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      KvTierFilter *filter = kv_tier_filter_parse_json (bad[i], &error);

      g_assert_null (filter);
      g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, "kv_load_tiers"));
    }
}

/* ------------------------------------------------------------------ */
/* KvRequest                                                           */

static void
test_request_properties (void)
{
  g_autoptr(GVariant) params = g_variant_ref_sink (g_variant_new_parsed ("{'x': <1>}"));
  g_autoptr(KvRequest) request = kv_request_new ("req-1", params);
  g_autofree char *id = NULL;
  g_autoptr(GVariant) got = NULL;
  g_autoptr(KvTierFilter) filter = NULL;

  g_assert_cmpstr (kv_request_get_id (request), ==, "req-1");
  g_assert_true (kv_request_get_transfer_params (request) == params);
  g_object_get (request, "id", &id, "transfer-params", &got, "load-tier-filter", &filter, NULL);
  g_assert_cmpstr (id, ==, "req-1");
  g_assert_true (got == params);
  g_assert_true (kv_tier_filter_is_all (filter));
}

static void
test_request_floating_params (void)
{
  g_autoptr(KvRequest) request =
    kv_request_new ("r", g_variant_new_parsed ("{'kv_load_tiers': <[{'medium': <'STORAGE'>}]>}"));
  GVariant *params = kv_request_get_transfer_params (request);

  g_assert_nonnull (params);
  g_assert_false (g_variant_is_floating (params));
  g_assert_true (g_variant_is_of_type (params, G_VARIANT_TYPE_VARDICT));
}

static void
test_request_default_filter (void)
{
  g_autoptr(KvRequest) none = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) no_key = kv_request_new ("b", g_variant_new_parsed ("@a{sv} {}"));
  g_autoptr(KvRequest) empty = kv_request_new ("c", g_variant_new_parsed ("{'kv_load_tiers': <@av []>}"));
  g_autoptr(KvRequest) storage =
    kv_request_new ("d", g_variant_new_parsed ("{'kv_load_tiers': <[{'medium': <'storage'>}]>}"));
  g_autoptr(KvRequest) bad = NULL;
  KvTierFilter *filter;

  g_assert_true (kv_tier_filter_is_all (kv_request_get_load_tier_filter (none)));
  g_assert_true (kv_tier_filter_is_all (kv_request_get_load_tier_filter (no_key)));

  filter = kv_request_get_load_tier_filter (empty);
  g_assert_false (kv_tier_filter_is_all (filter));
  g_assert_cmpuint (kv_tier_filter_get_n_matchers (filter), ==, 0);
  g_assert_false (kv_tier_filter_allows (filter, KV_MEDIUM_CPU, KV_LOCALITY_LOCAL));

  filter = kv_request_get_load_tier_filter (storage);
  g_assert_true (kv_tier_filter_allows (filter, KV_MEDIUM_STORAGE, KV_LOCALITY_LOCAL));
  g_assert_false (kv_tier_filter_allows (filter, KV_MEDIUM_CPU, KV_LOCALITY_LOCAL));

  /* The same rules as kv_tier_filter_parse_variant(): a non-list warns. */
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "*kv_load_tiers must be a list*");
  bad = kv_request_new ("e", g_variant_new_parsed ("{'kv_load_tiers': <'CPU'>}"));
  g_test_assert_expected_messages ();
  g_assert_true (kv_tier_filter_is_all (kv_request_get_load_tier_filter (bad)));
}

static void
count_notify (GObject    *object,
              GParamSpec *pspec,
              gpointer    user_data)
{
  guint *count = user_data;

  g_assert_cmpstr (pspec->name, ==, "load-tier-filter");
  (*count)++;
}

static void
test_request_explicit_filter (void)
{
  g_autoptr(KvRequest) request =
    kv_request_new ("r", g_variant_new_parsed ("{'kv_load_tiers': <@av []>}"));
  g_autoptr(KvTierFilter) cpu = kv_tier_filter_new ();
  g_autoptr(KvRequest) constructed = NULL;
  guint notified = 0;

  kv_tier_filter_add_matcher (cpu, KV_MEDIUM_CPU, KV_LOCALITY_UNSPECIFIED);
  g_signal_connect (request, "notify::load-tier-filter", G_CALLBACK (count_notify), &notified);

  kv_request_set_load_tier_filter (request, cpu);
  g_assert_true (kv_request_get_load_tier_filter (request) == cpu);
  g_assert_cmpuint (notified, ==, 1);

  /* Same filter again: no change, no notify. */
  kv_request_set_load_tier_filter (request, cpu);
  g_assert_cmpuint (notified, ==, 1);

  kv_request_set_load_tier_filter (request, NULL);
  g_assert_true (kv_tier_filter_is_all (kv_request_get_load_tier_filter (request)));
  g_assert_cmpuint (notified, ==, 2);

  /* Given at construction, an explicit filter beats the parameters. */
  constructed = g_object_new (KV_TYPE_REQUEST,
                              "id", "r2",
                              "transfer-params", g_variant_new_parsed ("{'kv_load_tiers': <@av []>}"),
                              "load-tier-filter", cpu,
                              NULL);
  g_assert_true (kv_request_get_load_tier_filter (constructed) == cpu);
}

static void
test_request_bad_construction (void)
{
  g_autoptr(GVariant) not_dict = g_variant_ref_sink (g_variant_new_string ("x"));
  KvRequest *request;

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*G_VARIANT_TYPE_VARDICT*");
  request = kv_request_new ("r", not_dict);
  g_test_assert_expected_messages ();
  g_assert_null (request);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*id != NULL*");
  request = kv_request_new ("", NULL);
  g_test_assert_expected_messages ();
  g_assert_null (request);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*non-empty “id”*");
  request = g_object_new (KV_TYPE_REQUEST, NULL);
  g_test_assert_expected_messages ();
  g_clear_object (&request);
}

typedef struct {
  GPtrArray *log; /* of "destroy:<value>" strings, in call order */
} StateLog;

static void
state_destroy (gpointer data)
{
  StateLog *log = g_object_get_data (G_OBJECT (data), "log");

  g_ptr_array_add (log->log, g_strdup_printf ("destroy:%s", (char *) g_object_get_data (G_OBJECT (data), "name")));
  g_object_unref (data);
}

static GObject *
named_state (StateLog   *log,
             const char *name)
{
  GObject *obj = g_object_new (G_TYPE_OBJECT, NULL);

  g_object_set_data (obj, "log", log);
  g_object_set_data_full (obj, "name", g_strdup (name), g_free);
  return obj;
}

static void
test_request_state (void)
{
  StateLog log = { g_ptr_array_new_with_free_func (g_free) };
  KvRequest *request = kv_request_new ("r", NULL);
  int owner_a, owner_b;
  GObject *a1 = named_state (&log, "a1");
  GObject *a2 = named_state (&log, "a2");
  GObject *b1 = named_state (&log, "b1");
  GObject *b2 = named_state (&log, "b2");

  g_assert_null (kv_request_get_state (request, &owner_a));

  kv_request_set_state (request, &owner_a, a1, state_destroy);
  kv_request_set_state (request, &owner_b, b1, state_destroy);
  g_assert_true (kv_request_get_state (request, &owner_a) == a1);
  g_assert_true (kv_request_get_state (request, &owner_b) == b1);
  g_assert_cmpuint (log.log->len, ==, 0);

  /* Storing the value already there destroys nothing. */
  kv_request_set_state (request, &owner_a, a1, state_destroy);
  g_assert_cmpuint (log.log->len, ==, 0);

  /* Replacing destroys the old value of that owner only. */
  kv_request_set_state (request, &owner_a, a2, state_destroy);
  g_assert_cmpuint (log.log->len, ==, 1);
  g_assert_cmpstr (log.log->pdata[0], ==, "destroy:a1");
  g_assert_true (kv_request_get_state (request, &owner_a) == a2);
  g_assert_true (kv_request_get_state (request, &owner_b) == b1);

  /* NULL clears the slot. */
  kv_request_set_state (request, &owner_b, NULL, NULL);
  g_assert_cmpuint (log.log->len, ==, 2);
  g_assert_cmpstr (log.log->pdata[1], ==, "destroy:b1");
  g_assert_null (kv_request_get_state (request, &owner_b));

  kv_request_set_state (request, &owner_b, b2, state_destroy);

  /* Finalizing destroys what is left, once each. */
  g_object_unref (request);
  g_assert_cmpuint (log.log->len, ==, 4);
  g_assert_true ((g_strcmp0 (log.log->pdata[2], "destroy:a2") == 0 &&
                  g_strcmp0 (log.log->pdata[3], "destroy:b2") == 0) ||
                 (g_strcmp0 (log.log->pdata[2], "destroy:b2") == 0 &&
                  g_strcmp0 (log.log->pdata[3], "destroy:a2") == 0));

  g_ptr_array_unref (log.log);
}

static void
test_request_state_no_destroy (void)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  static int owner, value1, value2;

  kv_request_set_state (request, &owner, &value1, NULL);
  kv_request_set_state (request, &owner, &value2, NULL);
  g_assert_true (kv_request_get_state (request, &owner) == &value2);
}

/* ------------------------------------------------------------------ */
/* KvScheduleEnd                                                       */

static void
test_schedule_end_null (void)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  const char * const *ids;

  ids = kv_schedule_end_get_new_request_ids (end);
  g_assert_nonnull (ids);
  g_assert_null (ids[0]);
  ids = kv_schedule_end_get_preempted_request_ids (end);
  g_assert_nonnull (ids);
  g_assert_null (ids[0]);
}

static void
test_schedule_end_copies (void)
{
  char *new_ids[] = { g_strdup ("a"), g_strdup ("b"), NULL };
  const char * const preempted[] = { "c", NULL };
  KvScheduleEnd *end = kv_schedule_end_new ((const char * const *) new_ids, preempted);
  KvScheduleEnd *ref;
  const char * const expected_new[] = { "a", "b", NULL };

  /* The caller's strings may go away. */
  g_free (new_ids[0]);
  g_free (new_ids[1]);

  g_assert_cmpstrv (kv_schedule_end_get_new_request_ids (end), expected_new);
  g_assert_cmpstrv (kv_schedule_end_get_preempted_request_ids (end), preempted);
  g_assert_true (kv_schedule_end_get_preempted_request_ids (end) != preempted);

  ref = g_boxed_copy (KV_TYPE_SCHEDULE_END, end);
  g_assert_true (ref == end);
  kv_schedule_end_unref (ref);
  g_assert_cmpstrv (kv_schedule_end_get_new_request_ids (end), expected_new);
  kv_schedule_end_unref (end);
}

/* ------------------------------------------------------------------ */
/* KvTransferJob, KvJobResult, KvEvent, KvPrepareStoreResult           */

static KvKey *
make_key (guint8  byte,
          guint32 group)
{
  guint8 hash[4] = { byte, byte, byte, byte };

  return kv_key_new (hash, sizeof hash, group);
}

static void
assert_key (KvKey  *key,
            guint8  byte,
            guint32 group)
{
  g_autoptr(KvKey) expected = make_key (byte, group);

  g_assert_nonnull (key);
  g_assert_true (kv_key_equal (key, expected));
}

static void
test_transfer_job_getters (void)
{
  KvKey *keys[3] = { make_key (1, 0), make_key (2, 0), make_key (3, 1) };
  const guint32 chunk_ids[3] = { 7, 0, 4000000000u };
  KvRequest *request = kv_request_new ("job-req", NULL);
  KvTransferJob *job;
  KvKey * const *got_keys;
  const guint32 *got_ids;
  guint n = 0;

  g_object_add_weak_pointer (G_OBJECT (request), (gpointer *) &request);
  job = kv_transfer_job_new (42, keys, chunk_ids, 3, TRUE, request);

  /* The job holds its own references to keys and request. */
  for (guint i = 0; i < 3; i++)
    kv_key_unref (keys[i]);
  g_object_unref (request);
  g_assert_nonnull (request);

  g_assert_cmpuint (kv_transfer_job_get_id (job), ==, 42);
  g_assert_true (kv_transfer_job_is_promotion (job));
  g_assert_true (kv_transfer_job_get_request (job) == request);
  g_assert_cmpuint (kv_transfer_job_get_n_keys (job), ==, 3);

  got_keys = kv_transfer_job_get_keys (job, &n);
  g_assert_cmpuint (n, ==, 3);
  assert_key (got_keys[0], 1, 0);
  assert_key (got_keys[1], 2, 0);
  assert_key (got_keys[2], 3, 1);
  g_assert_null (got_keys[3]);
  g_assert_true (kv_transfer_job_get_keys (job, NULL) == got_keys);
  g_assert_true (kv_transfer_job_get_key (job, 2) == got_keys[2]);

  n = 0;
  got_ids = kv_transfer_job_get_chunk_ids (job, &n);
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpmem (got_ids, n * sizeof (guint32), chunk_ids, sizeof chunk_ids);
  g_assert_cmpuint (kv_transfer_job_get_chunk_id (job, 2), ==, 4000000000u);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*index < self->n_keys*");
  g_assert_null (kv_transfer_job_get_key (job, 3));
  g_test_assert_expected_messages ();

  /* The last job reference releases the request. */
  g_assert_true (g_boxed_copy (KV_TYPE_TRANSFER_JOB, job) == job);
  kv_transfer_job_unref (job);
  g_assert_nonnull (request);
  kv_transfer_job_unref (job);
  g_assert_null (request);
}

static void
test_transfer_job_empty (void)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (0, NULL, NULL, 0, FALSE, request);
  guint n = 99;
  KvKey * const *keys;

  keys = kv_transfer_job_get_keys (job, &n);
  g_assert_cmpuint (n, ==, 0);
  g_assert_nonnull (keys);
  g_assert_null (keys[0]);
  n = 99;
  g_assert_nonnull (kv_transfer_job_get_chunk_ids (job, &n));
  g_assert_cmpuint (n, ==, 0);
  g_assert_false (kv_transfer_job_is_promotion (job));
}

static void
test_transfer_job_submit_time (void)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvKey) key = make_key (1, 0);
  const guint32 chunk = 0;
  gint64 before, after;
  g_autoptr(KvTransferJob) job = NULL;

  before = kv_clock_get_time (kv_clock_get_default ());
  job = kv_transfer_job_new (1, &key, &chunk, 1, FALSE, request);
  after = kv_clock_get_time (kv_clock_get_default ());

  /* Defaults to the construction time on the default clock's time base. */
  g_assert_cmpint (kv_transfer_job_get_submit_time (job), >=, before);
  g_assert_cmpint (kv_transfer_job_get_submit_time (job), <=, after);

  /* Back-dating, as the back-pressure tests do. */
  kv_transfer_job_set_submit_time (job, before - 5 * G_USEC_PER_SEC);
  g_assert_cmpint (kv_transfer_job_get_submit_time (job), ==, before - 5 * G_USEC_PER_SEC);
}

static void
test_transfer_job_bad_args (void)
{
  g_autoptr(KvKey) key = make_key (1, 0);
  const guint32 chunk = 0;

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*KV_IS_REQUEST*");
  g_assert_null (kv_transfer_job_new (1, &key, &chunk, 1, FALSE, NULL));
  g_test_assert_expected_messages ();
}

static void
test_job_result_defaults (void)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (G_MAXUINT64, TRUE);
  guint n = 99;

  g_assert_cmpuint (kv_job_result_get_job_id (result), ==, G_MAXUINT64);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), ==, -1.0);
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, -1);
  g_assert_false (kv_job_result_has_successful_keys (result));
  g_assert_null (kv_job_result_get_successful_keys (result, &n));
  g_assert_cmpuint (n, ==, 0);
  g_assert_false (kv_job_result_get_checksum_failed (result));
}

static void
test_job_result_setters (void)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (3, FALSE);

  g_assert_false (kv_job_result_get_success (result));
  kv_job_result_set_transfer_time (result, 0.25);
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), ==, 0.25);
  kv_job_result_set_transfer_time (result, 0.0);
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), ==, 0.0);
  kv_job_result_set_transfer_time (result, -3.0);
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), ==, -1.0);

  kv_job_result_set_transfer_bytes (result, 1 << 21);
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 1 << 21);
  kv_job_result_set_transfer_bytes (result, 0);
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 0);
  kv_job_result_set_transfer_bytes (result, -7);
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, -1);

  kv_job_result_set_checksum_failed (result, TRUE);
  g_assert_true (kv_job_result_get_checksum_failed (result));
  kv_job_result_set_checksum_failed (result, FALSE);
  g_assert_false (kv_job_result_get_checksum_failed (result));
}

static void
test_job_result_successful_keys (void)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (9, FALSE);
  KvKey *keys[2] = { make_key (1, 0), make_key (3, 0) };
  KvKey * const *got;
  guint n = 0;

  kv_job_result_set_successful_keys (result, keys, 2);
  kv_key_unref (keys[0]);
  kv_key_unref (keys[1]);

  g_assert_true (kv_job_result_has_successful_keys (result));
  got = kv_job_result_get_successful_keys (result, &n);
  g_assert_cmpuint (n, ==, 2);
  assert_key (got[0], 1, 0);
  assert_key (got[1], 3, 0);
  g_assert_null (got[2]);

  /* Replacing with a subset of the old set (same key objects). */
  kv_job_result_set_successful_keys (result, got + 1, 1);
  got = kv_job_result_get_successful_keys (result, &n);
  g_assert_cmpuint (n, ==, 1);
  assert_key (got[0], 3, 0);

  /* Set but empty: none landed; still "has". */
  kv_job_result_set_successful_keys (result, NULL, 0);
  g_assert_true (kv_job_result_has_successful_keys (result));
  got = kv_job_result_get_successful_keys (result, &n);
  g_assert_cmpuint (n, ==, 0);
  g_assert_nonnull (got);
  g_assert_null (got[0]);
}

static void
test_job_result_refcount (void)
{
  KvJobResult *result = kv_job_result_new (1, TRUE);
  KvJobResult *copy = g_boxed_copy (KV_TYPE_JOB_RESULT, result);

  g_assert_true (copy == result);
  kv_job_result_unref (copy);
  g_assert_cmpuint (kv_job_result_get_job_id (result), ==, 1);
  kv_job_result_unref (result);
}

static void
test_event_getters (void)
{
  KvKey *keys[2] = { make_key (5, 0), make_key (6, 2) };
  KvEvent *event = kv_event_new (keys, 2, KV_MEDIUM_STORAGE, TRUE, KV_LOCALITY_REMOTE);
  KvKey * const *got;
  guint n = 0;

  kv_key_unref (keys[0]);
  kv_key_unref (keys[1]);

  got = kv_event_get_keys (event, &n);
  g_assert_cmpuint (n, ==, 2);
  assert_key (got[0], 5, 0);
  assert_key (got[1], 6, 2);
  g_assert_null (got[2]);
  g_assert_cmpint (kv_event_get_medium (event), ==, KV_MEDIUM_STORAGE);
  g_assert_true (kv_event_get_removed (event));
  g_assert_cmpint (kv_event_get_locality (event), ==, KV_LOCALITY_REMOTE);
  g_assert_null (kv_event_get_ownership (event));

  kv_event_set_ownership (event, "1:fs");
  g_assert_cmpstr (kv_event_get_ownership (event), ==, "1:fs");
  kv_event_set_ownership (event, kv_event_get_ownership (event));
  g_assert_cmpstr (kv_event_get_ownership (event), ==, "1:fs");
  kv_event_set_ownership (event, NULL);
  g_assert_null (kv_event_get_ownership (event));
  kv_event_set_ownership (event, "2:redis");

  g_assert_true (g_boxed_copy (KV_TYPE_EVENT, event) == event);
  kv_event_unref (event);
  g_assert_cmpstr (kv_event_get_ownership (event), ==, "2:redis");
  kv_event_unref (event);
}

static void
test_event_stored_primary (void)
{
  g_autoptr(KvKey) key = make_key (1, 0);
  g_autoptr(KvEvent) event = kv_event_new (&key, 1, KV_MEDIUM_CPU, FALSE, KV_LOCALITY_UNSPECIFIED);

  g_assert_false (kv_event_get_removed (event));
  g_assert_cmpint (kv_event_get_medium (event), ==, KV_MEDIUM_CPU);
  g_assert_cmpint (kv_event_get_locality (event), ==, KV_LOCALITY_UNSPECIFIED);
}

static void
test_prepare_store_result_getters (void)
{
  KvKey *store[2] = { make_key (1, 0), make_key (2, 0) };
  KvKey *evicted[1] = { make_key (9, 0) };
  const guint32 chunk_ids[2] = { 11, 12 };
  KvPrepareStoreResult *result = kv_prepare_store_result_new (store, chunk_ids, 2, evicted, 1);
  KvKey * const *got;
  const guint32 *ids;
  guint n = 0;

  kv_key_unref (store[0]);
  kv_key_unref (store[1]);
  kv_key_unref (evicted[0]);

  got = kv_prepare_store_result_get_keys_to_store (result, &n);
  g_assert_cmpuint (n, ==, 2);
  assert_key (got[0], 1, 0);
  assert_key (got[1], 2, 0);
  g_assert_null (got[2]);
  ids = kv_prepare_store_result_get_chunk_ids (result, &n);
  g_assert_cmpuint (n, ==, 2);
  g_assert_cmpmem (ids, n * sizeof (guint32), chunk_ids, sizeof chunk_ids);
  got = kv_prepare_store_result_get_evicted_keys (result, &n);
  g_assert_cmpuint (n, ==, 1);
  assert_key (got[0], 9, 0);
  g_assert_null (got[1]);

  g_assert_true (g_boxed_copy (KV_TYPE_PREPARE_STORE_RESULT, result) == result);
  kv_prepare_store_result_unref (result);
  assert_key (kv_prepare_store_result_get_keys_to_store (result, NULL)[1], 2, 0);
  kv_prepare_store_result_unref (result);
}

static void
test_prepare_store_result_empty (void)
{
  g_autoptr(KvPrepareStoreResult) result = kv_prepare_store_result_new (NULL, NULL, 0, NULL, 0);
  KvKey * const *keys;
  guint n = 99;

  keys = kv_prepare_store_result_get_keys_to_store (result, &n);
  g_assert_cmpuint (n, ==, 0);
  g_assert_nonnull (keys);
  g_assert_null (keys[0]);
  n = 99;
  g_assert_nonnull (kv_prepare_store_result_get_chunk_ids (result, &n));
  g_assert_cmpuint (n, ==, 0);
  n = 99;
  keys = kv_prepare_store_result_get_evicted_keys (result, &n);
  g_assert_cmpuint (n, ==, 0);
  g_assert_nonnull (keys);
  g_assert_null (keys[0]);
}

/* ------------------------------------------------------------------ */
/* KvClock                                                             */

static void
test_clock_default (void)
{
  KvClock *clock = kv_clock_get_default ();
  gint64 before, now, after;

  g_assert_true (KV_IS_CLOCK (clock));
  g_assert_true (kv_clock_get_default () == clock);
  g_assert_false (kv_clock_is_manual (clock));

  before = g_get_monotonic_time ();
  now = kv_clock_get_time (clock);
  after = g_get_monotonic_time ();
  g_assert_cmpint (now, >=, before);
  g_assert_cmpint (now, <=, after);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*self->manual*");
  kv_clock_set_time (clock, 0);
  g_test_assert_expected_messages ();
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*self->manual*");
  kv_clock_advance (clock, 1000);
  g_test_assert_expected_messages ();
  g_assert_cmpint (kv_clock_get_time (clock), >=, now);
}

static void
test_clock_manual (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (1000);
  gboolean manual = FALSE;
  gint64 start = 0;

  g_assert_true (kv_clock_is_manual (clock));
  g_assert_true (clock != kv_clock_get_default ());
  g_assert_cmpint (kv_clock_get_time (clock), ==, 1000);
  g_assert_cmpint (kv_clock_get_time (clock), ==, 1000);

  kv_clock_advance (clock, 250);
  g_assert_cmpint (kv_clock_get_time (clock), ==, 1250);
  kv_clock_set_time (clock, 5 * G_USEC_PER_SEC);
  g_assert_cmpint (kv_clock_get_time (clock), ==, 5 * G_USEC_PER_SEC);
  kv_clock_advance (clock, -G_USEC_PER_SEC);
  g_assert_cmpint (kv_clock_get_time (clock), ==, 4 * G_USEC_PER_SEC);

  g_object_get (clock, "manual", &manual, "start-time", &start, NULL);
  g_assert_true (manual);
  g_assert_cmpint (start, ==, 1000);
}

#define N_ADVANCE_THREADS 4
#define N_ADVANCES 10000

static gpointer
advance_thread (gpointer data)
{
  KvClock *clock = data;

  for (guint i = 0; i < N_ADVANCES; i++)
    kv_clock_advance (clock, 3);
  return NULL;
}

static void
test_clock_manual_threads (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  GThread *threads[N_ADVANCE_THREADS];

  for (guint i = 0; i < N_ADVANCE_THREADS; i++)
    threads[i] = g_thread_new ("advance", advance_thread, clock);
  for (guint i = 0; i < N_ADVANCE_THREADS; i++)
    g_thread_join (threads[i]);

  g_assert_cmpint (kv_clock_get_time (clock), ==, (gint64) N_ADVANCE_THREADS * N_ADVANCES * 3);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/types/medium/strings", test_medium_strings);
  g_test_add_func ("/kvtier/types/locality/strict", test_locality_strict);
  g_test_add_func ("/kvtier/types/lookup-result/strings", test_lookup_result_strings);
  g_test_add_func ("/kvtier/types/error-quark", test_error_quark);
  g_test_add_func ("/kvtier/types/version", test_version);

  g_test_add_func ("/kvtier/key/offload-key/round-trip", test_key_offload_round_trip);
  g_test_add_func ("/kvtier/key/offload-key/too-short", test_key_offload_too_short);
  g_test_add_func ("/kvtier/key/equal-hash", test_key_equal_hash);
  g_test_add_func ("/kvtier/key/to-string", test_key_to_string);
  g_test_add_func ("/kvtier/key/hash-bytes", test_key_hash_bytes);
  g_test_add_func ("/kvtier/key/boxed", test_key_boxed);
  g_test_add_func ("/kvtier/key/empty-hash", test_key_empty_hash);

  g_test_add_func ("/kvtier/tier-filter/all/identity", test_filter_all_identity);
  g_test_add_func ("/kvtier/tier-filter/all/immutable", test_filter_all_immutable);
  g_test_add_func ("/kvtier/tier-filter/empty-denies", test_filter_empty_denies);
  g_test_add_func ("/kvtier/tier-filter/allows-matrix", test_filter_allows_matrix);
  g_test_add_func ("/kvtier/tier-filter/parse-variant/null", test_parse_null);
  g_test_add_func ("/kvtier/tier-filter/parse-variant/floating", test_parse_floating);
  g_test_add_func ("/kvtier/tier-filter/parse-json/malformed", test_parse_json_malformed);

#define ADD_PARSE_RULE(name, cases) \
  g_test_add_data_func ("/kvtier/tier-filter/parse-variant/" name, cases, test_parse_variant); \
  g_test_add_data_func ("/kvtier/tier-filter/parse-json/" name, cases, test_parse_json)
  ADD_PARSE_RULE ("non-list-all-with-warning", parse_non_list);
  ADD_PARSE_RULE ("empty-list-denies", parse_empty_list);
  ADD_PARSE_RULE ("all-unknown-nonempty-all", parse_all_unknown);
  ADD_PARSE_RULE ("non-dict-skipped", parse_non_dict_skipped);
  ADD_PARSE_RULE ("case-insensitive", parse_case_insensitive);
  ADD_PARSE_RULE ("unknown-skipped", parse_unknown_skipped);
  ADD_PARSE_RULE ("missing-keys-unspecified", parse_missing_keys);
  ADD_PARSE_RULE ("boxed-list", parse_boxed_list);
#undef ADD_PARSE_RULE

  g_test_add_func ("/kvtier/request/properties", test_request_properties);
  g_test_add_func ("/kvtier/request/floating-params", test_request_floating_params);
  g_test_add_func ("/kvtier/request/default-filter", test_request_default_filter);
  g_test_add_func ("/kvtier/request/explicit-filter", test_request_explicit_filter);
  g_test_add_func ("/kvtier/request/bad-construction", test_request_bad_construction);
  g_test_add_func ("/kvtier/request/state", test_request_state);
  g_test_add_func ("/kvtier/request/state-no-destroy", test_request_state_no_destroy);

  g_test_add_func ("/kvtier/schedule-end/null", test_schedule_end_null);
  g_test_add_func ("/kvtier/schedule-end/copies", test_schedule_end_copies);

  g_test_add_func ("/kvtier/transfer-job/getters", test_transfer_job_getters);
  g_test_add_func ("/kvtier/transfer-job/empty", test_transfer_job_empty);
  g_test_add_func ("/kvtier/transfer-job/submit-time", test_transfer_job_submit_time);
  g_test_add_func ("/kvtier/transfer-job/bad-args", test_transfer_job_bad_args);

  g_test_add_func ("/kvtier/job-result/defaults", test_job_result_defaults);
  g_test_add_func ("/kvtier/job-result/setters", test_job_result_setters);
  g_test_add_func ("/kvtier/job-result/successful-keys", test_job_result_successful_keys);
  g_test_add_func ("/kvtier/job-result/refcount", test_job_result_refcount);

  g_test_add_func ("/kvtier/event/getters", test_event_getters);
  g_test_add_func ("/kvtier/event/stored-primary", test_event_stored_primary);

  g_test_add_func ("/kvtier/prepare-store-result/getters", test_prepare_store_result_getters);
  g_test_add_func ("/kvtier/prepare-store-result/empty", test_prepare_store_result_empty);

  g_test_add_func ("/kvtier/clock/default", test_clock_default);
  g_test_add_func ("/kvtier/clock/manual", test_clock_manual);
  g_test_add_func ("/kvtier/clock/manual-threads", test_clock_manual_threads);

  return g_test_run ();
}
