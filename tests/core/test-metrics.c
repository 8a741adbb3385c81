/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kvtier.h"
#include "kv-stats-private.h"
#include "kv-tiering-metrics-private.h"
#include "test-stats.h"

#define CHUNK 4096

static const char * const L0[] = { "0:primary", NULL };
static const char * const L1[] = { "1:example", NULL };
static const char * const L2[] = { "2:example", NULL };

static KvKey *
make_key (guint8 first)
{
  guint8 hash[4] = { first, 0xaa, 0xbb, 0xcc };

  return kv_key_new (hash, sizeof hash, 0);
}

/* ---- registry ---- */

static void
test_registry_definitions (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(GError) error = NULL;
  static const char * const labels[] = { "tier", "op", NULL };
  static const gdouble buckets[] = { 0.1, 1, 10 };
  g_auto(GStrv) names = NULL;
  const gdouble *got;
  guint n = 0;

  g_assert_true (kv_metric_registry_add_counter (registry, "a:bytes", "Bytes moved", labels, &error));
  g_assert_no_error (error);
  g_assert_true (kv_metric_registry_add_gauge (registry, "b_level", "Level", NULL, &error));
  g_assert_no_error (error);
  g_assert_true (kv_metric_registry_add_histogram (registry, "c_seconds", "Latency", labels,
                                                   buckets, G_N_ELEMENTS (buckets), &error));
  g_assert_no_error (error);

  g_assert_cmpuint (kv_metric_registry_get_n_metrics (registry), ==, 3);
  names = kv_metric_registry_list_names (registry);
  g_assert_cmpstrv (names, ((const char * const[]) { "a:bytes", "b_level", "c_seconds", NULL }));
  g_assert_cmpint (kv_metric_registry_get_kind (registry, "b_level"), ==, KV_METRIC_KIND_GAUGE);
  g_assert_cmpstr (kv_metric_registry_get_documentation (registry, "a:bytes"), ==, "Bytes moved");
  g_assert_cmpstrv (kv_metric_registry_get_label_names (registry, "c_seconds"), labels);
  g_assert_cmpuint (g_strv_length ((GStrv) kv_metric_registry_get_label_names (registry, "b_level")), ==, 0);
  got = kv_metric_registry_get_buckets (registry, "c_seconds", &n);
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpfloat (got[2], ==, 10);
  g_assert_true (kv_metric_registry_has_metric (registry, "a:bytes"));
  g_assert_false (kv_metric_registry_has_metric (registry, "a:bytes_total"));

  /* The same definition again (two tiers of one class) is fine... */
  g_assert_true (kv_metric_registry_add_counter (registry, "a:bytes", "Bytes moved", labels, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_metric_registry_get_n_metrics (registry), ==, 3);
  /* ...a different one is not. */
  g_assert_false (kv_metric_registry_add_gauge (registry, "a:bytes", "Bytes moved", labels, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "a:bytes"));
  g_clear_error (&error);
}

static void
test_registry_invalid (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(GError) error = NULL;
  static const gdouble unsorted[] = { 1, 0.5 };
  static const char * const bad_label[] = { "9lives", NULL };
  static const char * const reserved[] = { "__x", NULL };
  static const char * const le[] = { "le", NULL };
  static const char * const twice[] = { "a", "a", NULL };

  g_assert_false (kv_metric_registry_add_counter (registry, "bad-name", "", NULL, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "bad-name"));
  g_clear_error (&error);

  g_assert_false (kv_metric_registry_add_counter (registry, "ok", "", bad_label, &error));
  g_assert_nonnull (strstr (error->message, "9lives"));
  g_clear_error (&error);
  g_assert_false (kv_metric_registry_add_counter (registry, "ok", "", reserved, &error));
  g_assert_nonnull (strstr (error->message, "__x"));
  g_clear_error (&error);
  g_assert_false (kv_metric_registry_add_histogram (registry, "ok", "", le, NULL, 0, &error));
  g_assert_nonnull (strstr (error->message, "le"));
  g_clear_error (&error);
  g_assert_false (kv_metric_registry_add_gauge (registry, "ok", "", twice, &error));
  g_clear_error (&error);
  g_assert_false (kv_metric_registry_add_histogram (registry, "ok", "", NULL, unsorted, 2, &error));
  g_assert_nonnull (strstr (error->message, "increasing"));
  g_clear_error (&error);

  g_assert_cmpuint (kv_metric_registry_get_n_metrics (registry), ==, 0);
}

static void
test_tiering_definitions (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(GError) error = NULL;
  static const gdouble sync_expected[] = { 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1 };
  static const gdouble async_expected[] = { 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10 };
  const gdouble *buckets;
  guint n;

  g_assert_true (kv_tiering_metrics_register (registry, &error));
  g_assert_no_error (error);
  /* Twice is harmless (one manager per registry is not required). */
  g_assert_true (kv_tiering_metrics_register (registry, &error));
  g_assert_no_error (error);
  /* the backpressure metrics belong to KvBackpressureAdmissionPolicy
   * (test-admission-policy) */
  g_assert_cmpuint (kv_metric_registry_get_n_metrics (registry), ==, 20);

  buckets = kv_metric_registry_get_buckets (registry, "vllm:kv_offload_tiering_lookup_sync_delay_seconds", &n);
  g_assert_cmpmem (buckets, n * sizeof (gdouble), sync_expected, sizeof sync_expected);
  buckets = kv_metric_registry_get_buckets (registry, "vllm:kv_offload_tiering_lookup_async_delay_seconds", &n);
  g_assert_cmpmem (buckets, n * sizeof (gdouble), async_expected, sizeof async_expected);

  g_assert_cmpint (kv_metric_registry_get_kind (registry, "vllm:kv_offload_tiering_read_bytes"), ==, KV_METRIC_KIND_COUNTER);
  g_assert_cmpint (kv_metric_registry_get_kind (registry, "vllm:kv_offload_tiering_primary_write_usage_perc"), ==, KV_METRIC_KIND_GAUGE);
  g_assert_cmpint (kv_metric_registry_get_kind (registry, "kvtier_tiering_hit_pending_deadline_releases"), ==, KV_METRIC_KIND_COUNTER);
  g_assert_cmpstrv (kv_metric_registry_get_label_names (registry, "vllm:kv_offload_tiering_chunk_hits"),
                    ((const char * const[]) { "tier", NULL }));
  g_assert_cmpuint (g_strv_length ((GStrv) kv_metric_registry_get_label_names (registry, "vllm:kv_offload_tiering_promotion_allocation_failures")), ==, 0);
}

/* ---- stats ---- */

static void
test_stats_basic (void)
{
  g_autoptr(KvStats) stats = kv_stats_new ();
  gdouble sum = 0;

  g_assert_true (kv_stats_is_empty (stats));
  kv_stats_increase_counter (stats, "c", 1, L1);
  kv_stats_increase_counter (stats, "c", 2.5, L1);
  kv_stats_increase_counter (stats, "c", 1, L2);
  kv_stats_set_gauge (stats, "g", 3, L1);
  kv_stats_set_gauge (stats, "g", 0.25, L1);
  kv_stats_observe_histogram (stats, "h", 0.5, NULL);
  kv_stats_observe_histogram (stats, "h", 1.5, NULL);
  g_assert_false (kv_stats_is_empty (stats));

  g_assert_cmpfloat (test_stats_value (stats, "c", L1), ==, 3.5);
  g_assert_cmpfloat (test_stats_value (stats, "c", L2), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, "c", L0), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, "g", L1), ==, 0.25);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, "h", NULL, &sum), ==, 2);
  g_assert_cmpfloat (sum, ==, 2.0);
  g_assert_false (kv_stats_lookup (stats, "h", NULL, NULL));

  /* Zero makes the series exist. */
  kv_stats_increase_counter (stats, "zero", 0, NULL);
  g_assert_cmpfloat (test_stats_value (stats, "zero", NULL), ==, 0);

  /* A name used with another kind is refused. */
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "Metric c is a counter, not a gauge");
  kv_stats_set_gauge (stats, "c", 1, L1);
  g_test_assert_expected_messages ();
  g_assert_cmpfloat (test_stats_value (stats, "c", L1), ==, 3.5);
}

static void
test_stats_aggregate (void)
{
  g_autoptr(KvStats) a = kv_stats_new ();
  g_autoptr(KvStats) b = kv_stats_new ();
  gdouble sum;

  kv_stats_increase_counter (a, "c", 1, L1);
  kv_stats_set_gauge (a, "g", 1, L1);
  kv_stats_observe_histogram (a, "h", 1, L1);
  kv_stats_increase_counter (b, "c", 2, L1);
  kv_stats_increase_counter (b, "c", 5, L2);
  kv_stats_set_gauge (b, "g", 7, L1);
  kv_stats_observe_histogram (b, "h", 2, L1);
  kv_stats_observe_histogram (b, "h", 3, L1);

  kv_stats_aggregate (a, b);
  g_assert_cmpfloat (test_stats_value (a, "c", L1), ==, 3);
  g_assert_cmpfloat (test_stats_value (a, "c", L2), ==, 5);
  g_assert_cmpfloat (test_stats_value (a, "g", L1), ==, 7);
  g_assert_cmpuint (kv_stats_get_histogram_count (a, "h", L1, &sum), ==, 3);
  g_assert_cmpfloat (sum, ==, 6);
  /* b is unchanged. */
  g_assert_cmpfloat (test_stats_value (b, "c", L1), ==, 2);

  kv_stats_aggregate (a, a);
  g_assert_cmpfloat (test_stats_value (a, "c", L1), ==, 3);
}

static void
test_stats_take_and_reset (void)
{
  g_autoptr(KvStats) stats = kv_stats_new ();
  g_autoptr(KvStats) taken = NULL;

  kv_stats_increase_counter (stats, "c", 4, NULL);
  taken = kv_stats_take (stats);
  g_assert_true (kv_stats_is_empty (stats));
  g_assert_cmpfloat (test_stats_value (taken, "c", NULL), ==, 4);

  kv_stats_increase_counter (stats, "c", 1, NULL);
  g_assert_cmpfloat (test_stats_value (stats, "c", NULL), ==, 1);
  kv_stats_reset (stats);
  g_assert_true (kv_stats_is_empty (stats));
}

static void
test_stats_reduce (void)
{
  g_autoptr(KvStats) stats = kv_stats_new ();
  g_autoptr(GVariant) flat = NULL;
  static const char * const two[] = { "1:fs", "it's", NULL };
  gdouble v;

  kv_stats_increase_counter (stats, "vllm:c", 3, L1);
  kv_stats_increase_counter (stats, "vllm:c", 1, NULL);
  kv_stats_set_gauge (stats, "g", 0.5, two);
  kv_stats_observe_histogram (stats, "h", 0.25, L0);
  kv_stats_observe_histogram (stats, "h", 0.5, L0);

  flat = kv_stats_reduce (stats);
  g_assert_true (g_variant_is_of_type (flat, G_VARIANT_TYPE ("a{sd}")));
  g_assert_false (g_variant_is_floating (flat));
  g_assert_cmpuint (g_variant_n_children (flat), ==, 5);
  g_assert_true (g_variant_lookup (flat, "vllm:c:('1:example',)", "d", &v));
  g_assert_cmpfloat (v, ==, 3);
  g_assert_true (g_variant_lookup (flat, "vllm:c:()", "d", &v));
  g_assert_cmpfloat (v, ==, 1);
  g_assert_true (g_variant_lookup (flat, "g:('1:fs', 'it\\'s')", "d", &v));
  g_assert_cmpfloat (v, ==, 0.5);
  g_assert_true (g_variant_lookup (flat, "h_count:('0:primary',)", "d", &v));
  g_assert_cmpfloat (v, ==, 2);
  g_assert_true (g_variant_lookup (flat, "h_sum:('0:primary',)", "d", &v));
  g_assert_cmpfloat (v, ==, 0.75);
}

static void
test_stats_buckets_for_registry (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) total = kv_stats_new_for_registry (registry);
  g_autoptr(KvStats) delta = kv_stats_new ();
  static const gdouble bounds[] = { 1, 2 };
  static const guint64 counts[] = { 1, 0, 2 };
  g_autofree char *text = NULL;
  gdouble sum;

  g_assert_true (kv_metric_registry_add_histogram (registry, "h", "doc", NULL, bounds, 2, NULL));
  kv_stats_observe_histogram (total, "h", 0.5, NULL);
  kv_stats_observe_histogram (delta, "h", 1.5, NULL);
  kv_stats_observe_histogram (delta, "h", 9, NULL);
  kv_stats_add_histogram_buckets (delta, "h", NULL, bounds, 2, counts, 21);
  kv_stats_aggregate (total, delta);

  g_assert_cmpuint (kv_stats_get_histogram_count (total, "h", NULL, &sum), ==, 6);
  g_assert_cmpfloat (sum, ==, 32);
  text = kv_stats_to_prometheus (total, registry);
  g_assert_cmpstr (text, ==,
                   "# HELP h doc\n"
                   "# TYPE h histogram\n"
                   "h_bucket{le=\"1.0\"} 2.0\n"
                   "h_bucket{le=\"2.0\"} 3.0\n"
                   "h_bucket{le=\"+Inf\"} 6.0\n"
                   "h_count 6.0\n"
                   "h_sum 32.0\n");
  g_assert_cmpuint (kv_stats_bucket_index (bounds, 2, 1.0), ==, 0);
  g_assert_cmpuint (kv_stats_bucket_index (bounds, 2, 1.0000001), ==, 1);
  g_assert_cmpuint (kv_stats_bucket_index (bounds, 2, 3), ==, 2);
}

/* Per-bucket counts: exact from raw observations (bounds inclusive, one
 * +Inf bucket at the end), exact from counts kept in the same buckets,
 * and all zero for what was not recorded. */
static void
test_stats_histogram_buckets (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) raw = kv_stats_new ();
  g_autoptr(KvStats) bucketed = NULL;
  static const gdouble bounds[] = { 0.001, 0.01, 0.1, 1 };
  static const gdouble values[] = { 0.0005, 0.001, 0.002, 0.01, 0.04, 0.04, 3.0, 1e9, -2 };
  static const guint64 expected[] = { 3, 2, 2, 0, 2 };
  const char *labels[] = { "a", NULL };
  const char *other[] = { "b", NULL };
  static const gdouble coarse[] = { 0.01 };
  g_autofree guint64 *counts = NULL;
  g_autofree guint64 *bucketed_counts = NULL;
  g_autofree guint64 *coarse_counts = NULL;
  g_autofree guint64 *none = NULL;
  guint n = 0;
  gdouble sum = -1, expected_sum = 0;

  g_assert_true (kv_metric_registry_add_histogram (registry, "h", "doc", (const char *[]) { "l", NULL },
                                                   bounds, G_N_ELEMENTS (bounds), NULL));
  bucketed = kv_stats_new_for_registry (registry);
  for (guint i = 0; i < G_N_ELEMENTS (values); i++)
    {
      kv_stats_observe_histogram (raw, "h", values[i], labels);
      expected_sum += values[i];
    }
  kv_stats_aggregate (bucketed, raw);

  counts = kv_stats_get_histogram_buckets (raw, "h", labels, bounds, G_N_ELEMENTS (bounds), &n, &sum);
  g_assert_cmpuint (n, ==, G_N_ELEMENTS (expected));
  g_assert_cmpmem (counts, n * sizeof (guint64), expected, sizeof expected);
  g_assert_cmpfloat (sum, ==, expected_sum);

  bucketed_counts = kv_stats_get_histogram_buckets (bucketed, "h", labels, bounds, G_N_ELEMENTS (bounds),
                                                    &n, NULL);
  g_assert_cmpmem (bucketed_counts, n * sizeof (guint64), expected, sizeof expected);

  /* other bounds: raw observations are counted in them exactly */
  coarse_counts = kv_stats_get_histogram_buckets (raw, "h", labels, coarse, 1, &n, NULL);
  g_assert_cmpuint (n, ==, 2);
  g_assert_cmpuint (coarse_counts[0], ==, 5);
  g_assert_cmpuint (coarse_counts[1], ==, 4);

  none = kv_stats_get_histogram_buckets (raw, "h", other, bounds, G_N_ELEMENTS (bounds), &n, &sum);
  g_assert_cmpuint (n, ==, 5);
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (none[i], ==, 0);
  g_assert_cmpfloat (sum, ==, 0);
}

/* ---- Prometheus exposition, checked with a strict line grammar ---- */

#define NAME_RE   "[a-zA-Z_:][a-zA-Z0-9_:]*"
#define LABEL_RE  "[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\\\\n]|\\\\[\\\\\"n])*\""
#define VALUE_RE  "(?:[-+]?(?:[0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]Inf|NaN)"

typedef struct
{
  char  *name;
  char  *type;
  guint  n_samples;
} Family;

static void
family_free (gpointer data)
{
  Family *family = data;

  g_free (family->name);
  g_free (family->type);
  g_free (family);
}

/* Parses @text line by line; every line must be a HELP, a TYPE or a sample
 * of the family the last TYPE announced, with the suffixes its type
 * allows. Histogram buckets must rise, end with +Inf and match _count. */
static GPtrArray *
parse_exposition (const char *text)
{
  g_autoptr(GRegex) help_re = g_regex_new ("^# HELP (" NAME_RE ") (.*)$", 0, 0, NULL);
  g_autoptr(GRegex) type_re = g_regex_new ("^# TYPE (" NAME_RE ") (counter|gauge|histogram|untyped|summary)$", 0, 0, NULL);
  g_autoptr(GRegex) sample_re = g_regex_new ("^(" NAME_RE ")(?:\\{(" LABEL_RE "(?:," LABEL_RE ")*)\\})? (" VALUE_RE ")$", 0, 0, NULL);
  g_autoptr(GRegex) le_re = g_regex_new ("(?:^|,)le=\"([^\"]*)\"$", 0, 0, NULL);
  g_auto(GStrv) lines = NULL;
  GPtrArray *families = g_ptr_array_new_with_free_func (family_free);
  Family *current = NULL;
  g_autofree char *help_name = NULL;
  gdouble last_le = -G_MAXDOUBLE;
  guint64 last_bucket = 0, inf_bucket = 0;

  g_assert_nonnull (help_re);
  g_assert_nonnull (type_re);
  g_assert_nonnull (sample_re);
  g_assert_true (g_str_has_suffix (text, "\n"));

  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_autoptr(GMatchInfo) match = NULL;
      const char *line = lines[i];

      if (lines[i + 1] == NULL)
        {
          g_assert_cmpstr (line, ==, "");   /* text ends with a newline */
          break;
        }

      if (g_regex_match (help_re, line, 0, &match))
        {
          g_free (help_name);
          help_name = g_match_info_fetch (match, 1);
          continue;
        }
      g_clear_pointer (&match, g_match_info_free);

      if (g_regex_match (type_re, line, 0, &match))
        {
          current = g_new0 (Family, 1);
          current->name = g_match_info_fetch (match, 1);
          current->type = g_match_info_fetch (match, 2);
          /* HELP comes first and names the same family. */
          g_assert_cmpstr (help_name, ==, current->name);
          for (guint f = 0; f < families->len; f++)
            g_assert_cmpstr (((Family *) g_ptr_array_index (families, f))->name, !=, current->name);
          g_ptr_array_add (families, current);
          last_le = -G_MAXDOUBLE;
          continue;
        }
      g_clear_pointer (&match, g_match_info_free);

      if (!g_regex_match (sample_re, line, 0, &match))
        g_error ("line %u does not parse: “%s”", i + 1, line);

      {
        g_autofree char *name = g_match_info_fetch (match, 1);
        g_autofree char *labels = g_match_info_fetch (match, 2);
        g_autofree char *value = g_match_info_fetch (match, 3);

        g_assert_nonnull (current);
        current->n_samples += 1;
        if (g_str_equal (current->type, "counter"))
          {
            g_assert_true (g_str_has_suffix (current->name, "_total"));
            g_assert_cmpstr (name, ==, current->name);
          }
        else if (g_str_equal (current->type, "gauge"))
          {
            g_assert_cmpstr (name, ==, current->name);
          }
        else
          {
            g_autofree char *bucket = g_strconcat (current->name, "_bucket", NULL);
            g_autofree char *count = g_strconcat (current->name, "_count", NULL);
            g_autofree char *sum = g_strconcat (current->name, "_sum", NULL);

            if (g_str_equal (name, bucket))
              {
                g_autoptr(GMatchInfo) le_match = NULL;
                g_autofree char *le = NULL;
                gdouble bound;
                guint64 n = g_ascii_strtoull (value, NULL, 10);

                g_assert_true (g_regex_match (le_re, labels, 0, &le_match));
                le = g_match_info_fetch (le_match, 1);
                bound = g_str_equal (le, "+Inf") ? G_MAXDOUBLE : g_ascii_strtod (le, NULL);
                g_assert_cmpfloat (bound, >, last_le);
                g_assert_cmpuint (n, >=, (bound > last_le && last_le == -G_MAXDOUBLE) ? 0 : last_bucket);
                last_le = bound;
                last_bucket = n;
                if (bound == G_MAXDOUBLE)
                  inf_bucket = n;
              }
            else if (g_str_equal (name, count))
              {
                g_assert_cmpfloat (last_le, ==, G_MAXDOUBLE);
                g_assert_cmpuint (g_ascii_strtoull (value, NULL, 10), ==, inf_bucket);
                last_le = -G_MAXDOUBLE;
              }
            else
              {
                g_assert_cmpstr (name, ==, sum);
              }
          }
      }
    }

  return families;
}

static void
test_prometheus_grammar (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) stats = kv_stats_new ();
  g_autoptr(GPtrArray) families = NULL;
  g_autofree char *text = NULL;
  static const char * const weird[] = { "a\"b\\c\nd", NULL };

  g_assert_true (kv_tiering_metrics_register (registry, NULL));
  kv_stats_increase_counter (stats, KV_METRIC_READ_BYTES, 8192, L1);
  kv_stats_increase_counter (stats, KV_METRIC_READ_BYTES, 4096, L2);
  kv_stats_increase_counter (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, 2, NULL);
  kv_stats_set_gauge (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, 0.5, weird);
  kv_stats_observe_histogram (stats, KV_METRIC_LOOKUP_SYNC_DELAY, 0.00002, L0);
  kv_stats_observe_histogram (stats, KV_METRIC_LOOKUP_SYNC_DELAY, 0.3, L0);
  kv_stats_observe_histogram (stats, KV_METRIC_LOOKUP_SYNC_DELAY, 7, L0);
  kv_stats_observe_histogram (stats, KV_METRIC_LOOKUP_SYNC_DELAY, 0.001, L1);

  text = kv_stats_to_prometheus (stats, registry);
  families = parse_exposition (text);
  g_assert_cmpuint (families->len, ==, 4);
  g_assert_cmpstr (((Family *) families->pdata[0])->name, ==, "vllm:kv_offload_tiering_lookup_sync_delay_seconds");
  g_assert_cmpuint (((Family *) families->pdata[0])->n_samples, ==, 2 * (12 + 2));
  g_assert_cmpstr (((Family *) families->pdata[1])->name, ==, "vllm:kv_offload_tiering_read_bytes_total");
  g_assert_cmpstr (((Family *) families->pdata[1])->type, ==, "counter");
  g_assert_cmpuint (((Family *) families->pdata[1])->n_samples, ==, 2);

  /* A few exact lines. */
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_read_bytes_total{tier=\"1:example\"} 8192.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_promotion_allocation_failures_total 2.0\n"));
  g_assert_nonnull (strstr (text, "{tier=\"a\\\"b\\\\c\\nd\"} 0.5\n"));
  g_assert_nonnull (strstr (text, "_bucket{tier=\"0:primary\",le=\"1e-05\"} 0.0\n"));
  g_assert_nonnull (strstr (text, "_bucket{tier=\"0:primary\",le=\"5e-05\"} 1.0\n"));
  g_assert_nonnull (strstr (text, "_bucket{tier=\"0:primary\",le=\"0.5\"} 2.0\n"));
  g_assert_nonnull (strstr (text, "_bucket{tier=\"0:primary\",le=\"1.0\"} 2.0\n"));
  g_assert_nonnull (strstr (text, "_bucket{tier=\"0:primary\",le=\"+Inf\"} 3.0\n"));
  g_assert_nonnull (strstr (text, "vllm:kv_offload_tiering_lookup_sync_delay_seconds_count{tier=\"0:primary\"} 3.0\n"));
  g_assert_nonnull (strstr (text, "vllm:kv_offload_tiering_lookup_sync_delay_seconds_sum{tier=\"0:primary\"} 7.30002\n"));
  g_assert_nonnull (strstr (text, "# TYPE vllm:kv_offload_tiering_primary_read_usage_perc gauge\n"));
}

/* Values and bucket bounds are written as Python's prometheus_client
 * writes them (what vLLM's /metrics shows), so that `le="10.0"` matches
 * vLLM's series: its floatToGoString() of each value. */
static void
test_prometheus_value_format (void)
{
  static const struct
  {
    gdouble     value;
    const char *text;
  } cases[] = {
    { 0, "0.0" }, { -0.0, "-0.0" }, { 1, "1.0" }, { 10, "10.0" }, { 0.5, "0.5" },
    { 1e-5, "1e-05" }, { 5e-5, "5e-05" }, { 1e-4, "0.0001" }, { 5e-4, "0.0005" },
    { 0.005, "0.005" }, { 7.30002, "7.30002" }, { 8192, "8192.0" }, { 123456, "123456.0" },
    { 999999, "999999.0" }, { 1e6, "1e+06" }, { 1234567, "1.234567e+06" },
    { 12345678.5, "1.23456785e+07" }, { 4294967296.0, "4.294967296e+09" },
    /* the client's quirk: "e+0" then the exponent's digits */
    { 1e10, "1e+010" }, { 1e16, "1e+16" }, { 1e22, "1e+22" }, { -5, "-5.0" },
    { -1234567, "-1234567.0" }, { -1e17, "-1e+17" }, { 2.5e-7, "2.5e-07" },
    { 0.1 + 0.2, "0.30000000000000004" }, { 1.0 / 0.0, "+Inf" }, { -1.0 / 0.0, "-Inf" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GString) out = g_string_new (NULL);

      kv_stats_format_value (out, cases[i].value);
      g_assert_cmpstr (out->str, ==, cases[i].text);
    }
  {
    g_autoptr(GString) out = g_string_new (NULL);

    kv_stats_format_value (out, NAN);
    g_assert_cmpstr (out->str, ==, "NaN");
  }
}

static void
test_prometheus_undefined (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) stats = kv_stats_new ();
  g_autofree char *text = NULL;

  kv_stats_increase_counter (stats, "unknown", 1, NULL);
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING, "Metric unknown is not defined*");
  text = kv_stats_to_prometheus (stats, registry);
  g_test_assert_expected_messages ();
  g_assert_cmpstr (text, ==, "");
}

/* ---- the tiering manager's tracker ---- */

typedef struct
{
  KvClock          *clock;
  KvTieringMetrics *m;
  KvRequest        *r1;
  KvRequest        *r2;
} Tracker;

static void
tracker_setup (Tracker       *t,
               gconstpointer  data)
{
  static const char * const labels[] = { "0:primary", "1:example", "2:example", NULL };

  t->clock = kv_clock_new_manual (1000000);
  t->m = kv_tiering_metrics_new (labels, 6, CHUNK, t->clock);
  /* the first stats hold every series at zero: the tests read deltas */
  g_object_unref (kv_tiering_metrics_take_stats (t->m));
  t->r1 = kv_request_new ("r1", NULL);
  t->r2 = kv_request_new ("r2", NULL);
}

static void
tracker_teardown (Tracker       *t,
                  gconstpointer  data)
{
  kv_tiering_metrics_free (t->m);
  g_object_unref (t->r1);
  g_object_unref (t->r2);
  g_object_unref (t->clock);
}

static void
on_lookup (Tracker        *t,
           KvRequest      *request,
           guint8          key_byte,
           guint           label,
           KvLookupResult  result,
           gint64          dt_us)
{
  g_autoptr(KvKey) key = make_key (key_byte);

  kv_tiering_metrics_on_lookup (t->m, request, key, label, result, dt_us);
}

static void
test_tracker_labels (void)
{
  g_autofree char *label = kv_tiering_metrics_make_tier_label (2, "fs");

  g_assert_cmpstr (label, ==, "2:fs");
}

static void
test_tracker_queries_and_hits (Tracker       *t,
                               gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;

  /* Key 1: primary MISS, tier 1 MISS, tier 2 HIT; key 2: primary HIT. */
  on_lookup (t, t->r1, 1, 0, KV_LOOKUP_RESULT_MISS, 10);
  on_lookup (t, t->r1, 1, 1, KV_LOOKUP_RESULT_MISS, 10);
  on_lookup (t, t->r1, 1, 2, KV_LOOKUP_RESULT_HIT, 10);
  on_lookup (t, t->r1, 2, 0, KV_LOOKUP_RESULT_HIT, 10);
  /* Repeats are not counted again; HIT_PENDING never is. */
  on_lookup (t, t->r1, 2, 0, KV_LOOKUP_RESULT_HIT, 10);
  on_lookup (t, t->r1, 3, 0, KV_LOOKUP_RESULT_HIT_PENDING, 10);
  /* Another request counts its own. */
  on_lookup (t, t->r2, 2, 0, KV_LOOKUP_RESULT_HIT, 10);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, 3);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L0), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L2), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L2), ==, 1);
  g_clear_object (&stats);

  /* Consumed once. */
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, -1);
}

/* Primary hits through the stamp word: each request counts a chunk once,
 * however lookups of several requests interleave, and even when the chunk
 * leaves the primary tier and comes back (its stamp is lost then). */
static void
test_tracker_primary_stamp (Tracker       *t,
                            gconstpointer  data)
{
  g_autoptr(KvKey) key = make_key (7);
  g_autoptr(KvKey) other = make_key (8);
  g_autoptr(KvRequest) r3 = kv_request_new ("r3", NULL);
  g_autoptr(KvStats) stats = NULL;
  guint64 stamp = 0, other_stamp = 0;

#define HIT(request, k, word) \
  kv_tiering_metrics_on_primary_lookup (t->m, request, k, KV_LOOKUP_RESULT_HIT, word)

  /* repeated lookups of one request: one query */
  for (guint i = 0; i < 3; i++)
    HIT (t->r1, key, &stamp);
  g_assert_cmpuint (stamp, !=, 0);
  /* interleaved requests take the stamp over in turn: one query each */
  for (guint i = 0; i < 3; i++)
    {
      HIT (t->r2, key, &stamp);
      HIT (t->r1, key, &stamp);
    }
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L0), ==, 2);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_SYNC_DELAY, L0, NULL), ==, 2);
  g_clear_object (&stats);

  /* the chunk is evicted and stored again: a fresh stamp word */
  kv_tiering_metrics_on_stamp_dropped (key, stamp, t->m);
  stamp = 0;
  HIT (t->r1, key, &stamp);
  HIT (t->r2, key, &stamp);
  /* a miss first, then the chunk lands (a promotion): counted once */
  kv_tiering_metrics_on_primary_lookup (t->m, r3, other, KV_LOOKUP_RESULT_MISS, NULL);
  HIT (r3, other, &other_stamp);
  HIT (r3, other, &other_stamp);
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L0), ==, -1);
  g_clear_object (&stats);

  /* a request that got its blocks stops counting; a restarted id counts
   * again */
  kv_tiering_metrics_on_request_allocated (t->m, "r2");
  kv_tiering_metrics_on_request_finished (t->m, "r1");
  HIT (t->r2, key, &stamp);
  HIT (t->r1, key, &stamp);
  HIT (t->r1, key, &stamp);
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L0), ==, 1);

#undef HIT
}

/* The stamp and the table agree, as the manager uses them: a key counted
 * by a miss (the table) is not counted again by a hit (a stamp), and a key
 * counted by a hit that left the primary tier is not counted again by the
 * miss that follows. */
static void
test_tracker_primary_stamp_and_table (Tracker       *t,
                                      gconstpointer  data)
{
  g_autoptr(KvKey) key = make_key (9);
  g_autoptr(KvKey) gone = make_key (10);
  g_autoptr(KvStats) stats = NULL;
  guint64 stamp = 0, gone_stamp = 0;

  kv_tiering_metrics_on_primary_lookup (t->m, t->r1, key, KV_LOOKUP_RESULT_MISS, NULL);
  kv_tiering_metrics_on_primary_lookup (t->m, t->r1, key, KV_LOOKUP_RESULT_HIT, &stamp);

  kv_tiering_metrics_on_primary_lookup (t->m, t->r2, gone, KV_LOOKUP_RESULT_HIT, &gone_stamp);
  kv_tiering_metrics_on_stamp_dropped (gone, gone_stamp, t->m);
  kv_tiering_metrics_on_primary_lookup (t->m, t->r2, gone, KV_LOOKUP_RESULT_MISS, NULL);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L0), ==, 1);
}

static void
test_tracker_sync_delay (Tracker       *t,
                         gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  gdouble sum;

  /* Two resolved misses on every label: sync count 2 each, no async. */
  for (guint label = 0; label < 3; label++)
    {
      on_lookup (t, t->r1, 1, label, KV_LOOKUP_RESULT_MISS, 20);
      on_lookup (t, t->r1, 2, label, KV_LOOKUP_RESULT_MISS, 30);
    }

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_SYNC_DELAY, L0, &sum), ==, 2);
  g_assert_cmpfloat_with_epsilon (sum, 50e-6, 1e-12);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_SYNC_DELAY, L1, NULL), ==, 2);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_SYNC_DELAY, L2, NULL), ==, 2);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_ASYNC_DELAY, L0, NULL), ==, 0);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_ASYNC_DELAY, L1, NULL), ==, 0);
}

static void
test_tracker_async_delay (Tracker       *t,
                          gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  gdouble sum;

  /* Tier 1 says RETRY (took 100 µs) at t = 1 s, again 20 ms later, and
   * answers at t = 1.05 s: one async sample of 50.1 ms. */
  on_lookup (t, t->r1, 1, 1, KV_LOOKUP_RESULT_RETRY, 100);
  kv_clock_advance (t->clock, 20000);
  on_lookup (t, t->r1, 1, 1, KV_LOOKUP_RESULT_RETRY, 100);
  kv_clock_advance (t->clock, 30000);
  on_lookup (t, t->r1, 1, 1, KV_LOOKUP_RESULT_HIT, 40);
  on_lookup (t, t->r1, 1, 1, KV_LOOKUP_RESULT_HIT, 40);
  /* A RETRY after the answer does not restart the clock. */
  on_lookup (t, t->r1, 1, 1, KV_LOOKUP_RESULT_RETRY, 40);
  on_lookup (t, t->r1, 1, 1, KV_LOOKUP_RESULT_HIT, 40);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_ASYNC_DELAY, L1, &sum), ==, 1);
  g_assert_cmpfloat_with_epsilon (sum, 0.0501, 1e-12);
  g_assert_cmpuint (kv_stats_get_histogram_count (stats, KV_METRIC_LOOKUP_SYNC_DELAY, L1, &sum), ==, 1);
  g_assert_cmpfloat_with_epsilon (sum, 40e-6, 1e-12);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_HITS, L1), ==, 1);
}

static void
test_tracker_ignored_after_allocation (Tracker       *t,
                                       gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;

  on_lookup (t, t->r1, 1, 0, KV_LOOKUP_RESULT_HIT, 10);
  kv_tiering_metrics_on_request_allocated (t->m, "r1");
  on_lookup (t, t->r1, 2, 0, KV_LOOKUP_RESULT_HIT, 10);
  on_lookup (t, t->r1, 3, 1, KV_LOOKUP_RESULT_MISS, 10);
  /* Allocation of a request never seen also stops its accounting. */
  kv_tiering_metrics_on_request_allocated (t->m, "r2");
  on_lookup (t, t->r2, 4, 0, KV_LOOKUP_RESULT_HIT, 10);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L1), ==, -1);

  /* A finished request's state is dropped; a new request with the same id
   * is counted afresh. */
  kv_tiering_metrics_on_request_finished (t->m, "r1");
  kv_tiering_metrics_on_request_finished (t->m, "unknown");
  on_lookup (t, t->r1, 1, 0, KV_LOOKUP_RESULT_HIT, 10);
  g_clear_object (&stats);
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CHUNK_QUERIES, L0), ==, 1);
}

static KvJobResult *
make_result (gboolean success,
             gdouble  transfer_time)
{
  KvJobResult *result = kv_job_result_new (1, success);

  if (transfer_time >= 0)
    kv_job_result_set_transfer_time (result, transfer_time);
  return result;
}

static void
test_tracker_bytes_and_time (Tracker       *t,
                             gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvJobResult) ok_load = make_result (TRUE, 0.5);
  g_autoptr(KvJobResult) ok_store = make_result (TRUE, 0.25);
  g_autoptr(KvJobResult) untimed = make_result (TRUE, -1);

  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_PROMOTION, 3);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_PROMOTION, 3, ok_load);
  kv_tiering_metrics_on_job_registered (t->m, 2, KV_JOB_KIND_CASCADE, 2);
  kv_tiering_metrics_on_job_finished (t->m, 2, KV_JOB_KIND_CASCADE, 2, ok_store);
  kv_tiering_metrics_on_job_registered (t->m, 2, KV_JOB_KIND_CASCADE, 1);
  kv_tiering_metrics_on_job_finished (t->m, 2, KV_JOB_KIND_CASCADE, 1, untimed);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, L1), ==, 3 * CHUNK);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_TIME, L1), ==, 0.5);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, L2), ==, 3 * CHUNK);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_TIME, L2), ==, 0.25);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, L1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, L1), ==, -1);
  g_assert_true (kv_tiering_metrics_is_idle (t->m));
}

static void
test_tracker_failures (Tracker       *t,
                       gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvJobResult) failed_load = make_result (FALSE, 0.5);
  g_autoptr(KvJobResult) failed_store = make_result (FALSE, 0.5);

  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_PROMOTION, 2);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_PROMOTION, 2, failed_load);
  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_CASCADE, 2);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_CASCADE, 2, failed_store);
  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_CASCADE, 2);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_CASCADE, 2, failed_store);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, L1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CASCADE_JOB_FAILURES, L1), ==, 2);
  /* Failed jobs move no bytes and add no time. */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, L1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, L1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_TIME, L1), ==, -1);
}

/* A store a tier served to another node (KvParentManager) reads the
 * primary tier but writes nothing into the tier: its bytes, time and
 * failures are kvtier_tiering_served_*, not vLLM's write counters (which
 * would count them as cascaded), and it has its own in-flight gauge. */
static void
test_tracker_served_jobs (Tracker       *t,
                          gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvJobResult) ok = make_result (TRUE, 0.25);
  g_autoptr(KvJobResult) failed = make_result (FALSE, 0.5);

  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_SERVED, 4);
  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_SERVED, 2);
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_SERVED_JOBS, L1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, L1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, L1), ==, 1.0);
  g_clear_object (&stats);

  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_SERVED, 4, ok);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_SERVED, 2, failed);
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_SERVED_BYTES, L1), ==, 4 * CHUNK);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_SERVED_TIME, L1), ==, 0.25);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_SERVED_JOB_FAILURES, L1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_BYTES, L1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_WRITE_TIME, L1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_CASCADE_JOB_FAILURES, L1), ==, -1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_SERVED_JOBS, L1), ==, 0);
  g_assert_true (kv_tiering_metrics_is_idle (t->m));
}

static void
test_tracker_partial_promotion (Tracker       *t,
                                gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvJobResult) partial = make_result (FALSE, 0.125);
  g_autoptr(KvKey) k0 = make_key (0);
  g_autoptr(KvKey) k2 = make_key (2);
  KvKey *landed[] = { k0, k2 };

  kv_job_result_set_successful_keys (partial, landed, 2);
  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_PROMOTION, 3);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_PROMOTION, 3, partial);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_BYTES, L1), ==, 2 * CHUNK);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_READ_TIME, L1), ==, 0.125);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_JOB_FAILURES, L1), ==, 1);
}

static void
test_tracker_usage_and_active_gauges (Tracker       *t,
                                      gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvJobResult) ok = make_result (TRUE, -1);

  /* 6 primary chunks: a promotion of 2 into tier 1's slots, cascades of
   * 3 chunks to tier 1 and of 1 chunk to tier 2. */
  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_PROMOTION, 2);
  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_CASCADE, 2);
  kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_CASCADE, 1);
  kv_tiering_metrics_on_job_registered (t->m, 2, KV_JOB_KIND_CASCADE, 1);
  g_assert_false (kv_tiering_metrics_is_idle (t->m));

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, L1), ==, 2.0 / 6);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, L1), ==, 3.0 / 6);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, L2), ==, 1.0 / 6);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_WRITE_USAGE_PERC, L2), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, L1), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, L1), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, L2), ==, 1);
  /* The primary has no jobs and no job gauges. */
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_CASCADE_JOBS, L0), ==, -1);
  g_clear_object (&stats);

  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_PROMOTION, 2, ok);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_CASCADE, 2, ok);
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_CASCADE, 1, ok);
  kv_tiering_metrics_on_job_finished (t->m, 2, KV_JOB_KIND_CASCADE, 1, ok);
  g_assert_true (kv_tiering_metrics_is_idle (t->m));

  /* Gauges are sent every time, also at zero. */
  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC, L1), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_ACTIVE_PROMOTION_JOBS, L1), ==, 0);
}

static void
test_tracker_unbalanced_finish (Tracker       *t,
                                gconstpointer  data)
{
  g_autoptr(KvJobResult) ok = make_result (TRUE, -1);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*active_jobs[kind] > 0*");
  kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_CASCADE, 1, ok);
  g_test_assert_expected_messages ();
  g_assert_true (kv_tiering_metrics_is_idle (t->m));
}

static void
test_tracker_allocation_failures (Tracker       *t,
                                  gconstpointer  data)
{
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GVariant) flat = NULL;
  gdouble v;

  kv_tiering_metrics_on_promotion_allocation_failure (t->m);
  kv_tiering_metrics_on_promotion_allocation_failure (t->m);

  stats = kv_tiering_metrics_take_stats (t->m);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, NULL), ==, 2);
  flat = kv_stats_reduce (stats);
  g_assert_true (g_variant_lookup (flat, KV_METRIC_PROMOTION_ALLOCATION_FAILURES ":()", "d", &v));
  g_assert_cmpfloat (v, ==, 2);
}

static void
test_tracker_prometheus (Tracker       *t,
                         gconstpointer  data)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) total = NULL;
  g_autoptr(KvStats) delta = NULL;
  g_autoptr(GPtrArray) families = NULL;
  g_autoptr(KvJobResult) ok = make_result (TRUE, 0.5);
  g_autofree char *text = NULL;

  g_assert_true (kv_tiering_metrics_register (registry, NULL));
  total = kv_stats_new_for_registry (registry);

  for (guint step = 0; step < 3; step++)
    {
      on_lookup (t, t->r1, step, 0, KV_LOOKUP_RESULT_MISS, 5);
      on_lookup (t, t->r1, step, 1, KV_LOOKUP_RESULT_RETRY, 5);
      kv_clock_advance (t->clock, 3000);
      on_lookup (t, t->r1, step, 1, KV_LOOKUP_RESULT_HIT, 5);
      kv_tiering_metrics_on_job_registered (t->m, 1, KV_JOB_KIND_PROMOTION, 1);
      kv_tiering_metrics_on_job_finished (t->m, 1, KV_JOB_KIND_PROMOTION, 1, ok);
      kv_tiering_metrics_on_promotion_allocation_failure (t->m);
      delta = kv_tiering_metrics_take_stats (t->m);
      kv_stats_aggregate (total, delta);
      g_clear_object (&delta);
    }

  text = kv_stats_to_prometheus (total, registry);
  families = parse_exposition (text);
  g_assert_cmpuint (families->len, >=, 8);
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_chunk_queries_total{tier=\"1:example\"} 3.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_read_bytes_total{tier=\"1:example\"} 12288.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_read_time_total{tier=\"1:example\"} 1.5\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_promotion_allocation_failures_total 3.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_lookup_async_delay_seconds_bucket{tier=\"1:example\",le=\"0.001\"} 0.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_lookup_async_delay_seconds_bucket{tier=\"1:example\",le=\"0.005\"} 3.0\n"));
  g_assert_nonnull (strstr (text, "\nvllm:kv_offload_tiering_active_promotion_jobs{tier=\"2:example\"} 0.0\n"));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/metrics/registry/definitions", test_registry_definitions);
  g_test_add_func ("/kvtier/metrics/registry/invalid", test_registry_invalid);
  g_test_add_func ("/kvtier/metrics/registry/tiering-definitions", test_tiering_definitions);
  g_test_add_func ("/kvtier/metrics/stats/basic", test_stats_basic);
  g_test_add_func ("/kvtier/metrics/stats/aggregate", test_stats_aggregate);
  g_test_add_func ("/kvtier/metrics/stats/take-and-reset", test_stats_take_and_reset);
  g_test_add_func ("/kvtier/metrics/stats/reduce", test_stats_reduce);
  g_test_add_func ("/kvtier/metrics/stats/buckets-for-registry", test_stats_buckets_for_registry);
  g_test_add_func ("/kvtier/metrics/stats/histogram-buckets", test_stats_histogram_buckets);
  g_test_add_func ("/kvtier/metrics/prometheus/grammar", test_prometheus_grammar);
  g_test_add_func ("/kvtier/metrics/prometheus/undefined", test_prometheus_undefined);
  g_test_add_func ("/kvtier/metrics/prometheus/value-format", test_prometheus_value_format);
  g_test_add_func ("/kvtier/metrics/tracker/labels", test_tracker_labels);

#define ADD(path, func) \
  g_test_add ("/kvtier/metrics/tracker/" path, Tracker, NULL, tracker_setup, func, tracker_teardown)

  ADD ("queries-and-hits", test_tracker_queries_and_hits);
  ADD ("primary-stamp", test_tracker_primary_stamp);
  ADD ("primary-stamp-and-table", test_tracker_primary_stamp_and_table);
  ADD ("sync-delay", test_tracker_sync_delay);
  ADD ("async-delay", test_tracker_async_delay);
  ADD ("ignored-after-allocation", test_tracker_ignored_after_allocation);
  ADD ("bytes-and-time", test_tracker_bytes_and_time);
  ADD ("failures", test_tracker_failures);
  ADD ("partial-promotion", test_tracker_partial_promotion);
  ADD ("served-jobs", test_tracker_served_jobs);
  ADD ("usage-and-active-gauges", test_tracker_usage_and_active_gauges);
  ADD ("unbalanced-finish", test_tracker_unbalanced_finish);
  ADD ("allocation-failures", test_tracker_allocation_failures);
  ADD ("prometheus", test_tracker_prometheus);

#undef ADD

  return g_test_run ();
}
