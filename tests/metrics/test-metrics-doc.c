/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include "kvtier.h"
#include "metrics-doc.h"

/* doc/metrics.md against the library's definitions: every family the
 * library, the admission policy and the in-tree tiers define is listed,
 * with its type, its labels and its help text, and nothing else is. The
 * names of kvtier's own families follow Prometheus' conventions. */

static const char *
kind_name (KvMetricKind kind)
{
  switch (kind)
    {
    case KV_METRIC_KIND_COUNTER:
      return "counter";
    case KV_METRIC_KIND_GAUGE:
      return "gauge";
    case KV_METRIC_KIND_HISTOGRAM:
      return "histogram";
    default:
      g_assert_not_reached ();
    }
}

/* kvtier_<component>_<words>, base units at the end of what they measure. */
static void
assert_conventional (const char   *name,
                     KvMetricKind  kind)
{
  /* what Prometheus' linter calls abbreviations and non-base units */
  static const char * const non_base[] = {
    "s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "kib", "mib", "gib", "m", "h", "d",
    "millis", "milliseconds", "microseconds", "nanoseconds", "minutes", "hours", "days",
    "kilobytes", "megabytes", "gigabytes", "bits", "time", "perc", "percent",
  };
  g_auto(GStrv) words = g_strsplit (name, "_", -1);

  g_assert_true (g_str_has_prefix (name, "kvtier_"));
  g_assert_null (strchr (name, ':'));
  for (const char *p = name; *p != '\0'; p++)
    g_assert_true (g_ascii_islower (*p) || g_ascii_isdigit (*p) || *p == '_');
  for (guint w = 0; words[w] != NULL; w++)
    {
      g_assert_cmpstr (words[w], !=, "");
      for (guint i = 0; i < G_N_ELEMENTS (non_base); i++)
        if (g_str_equal (words[w], non_base[i]))
          g_error ("%s: not a base unit (%s)", name, non_base[i]);
    }
  /* the exposition adds _total; the suffixes of other types are theirs */
  g_assert_false (g_str_has_suffix (name, "_total"));
  if (kind != KV_METRIC_KIND_HISTOGRAM)
    g_assert_false (g_str_has_suffix (name, "_count") || g_str_has_suffix (name, "_sum") ||
                    g_str_has_suffix (name, "_bucket"));
}

static void
test_doc_lists_every_family (void)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvBackpressureAdmissionPolicy) policy = kv_backpressure_admission_policy_new ();
  g_autoptr(KvTierRegistry) types = kv_tier_registry_new ();
  g_autoptr(GHashTable) rows = metrics_doc_read ();
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) names = NULL;
  guint n_tier_types = 0;

  g_assert_true (kv_metric_registry_add_manager_metrics (registry, &error));
  g_assert_true (kv_admission_policy_register_metrics (KV_ADMISSION_POLICY (policy), registry, &error));
  g_assert_true (kv_metric_registry_add_tier_metrics (registry, &error));
  g_assert_true (kv_metric_registry_add_connector_metrics (registry, &error));
  g_assert_no_error (error);

  /* each in-tree tier class's own (those built here), from a tier that is
   * made, not started */
  g_assert_true (kv_tier_registry_load_plugins (types, NULL));
  for (guint i = 0; i < 4; i++)
    {
      const char *type_names[] = { "fs", "redis", "peer", "s3" };
      const char *prefixes[] = { "kvtier_fs_", "kvtier_redis_", "kvtier_peer_", "kvtier_s3_" };
      GType type = kv_tier_registry_lookup_tier_type (types, type_names[i], NULL);
      g_autoptr(KvSecondaryTier) tier = NULL;

      if (type == G_TYPE_INVALID)
        {
          /* not built here: its rows are not checked */
          GHashTableIter iter;
          gpointer key;

          g_test_message ("the %s tier is not built: its families are not checked", type_names[i]);
          g_hash_table_iter_init (&iter, rows);
          while (g_hash_table_iter_next (&iter, &key, NULL))
            if (g_str_has_prefix (key, prefixes[i]))
              g_hash_table_iter_remove (&iter);
          continue;
        }
      tier = g_object_new (type, "tier-type", type_names[i], NULL);
      g_assert_true (kv_secondary_tier_register_metrics (tier, registry, &error));
      g_assert_no_error (error);
      n_tier_types++;
    }
  g_test_message ("%u tier classes", n_tier_types);

  names = kv_metric_registry_list_names (registry);
  for (guint i = 0; names[i] != NULL; i++)
    {
      MetricsDocRow *row = g_hash_table_lookup (rows, names[i]);
      KvMetricKind kind = kv_metric_registry_get_kind (registry, names[i]);
      g_autofree char *labels = g_strjoinv (", ", (char **) kv_metric_registry_get_label_names (registry, names[i]));

      if (row == NULL)
        g_error ("doc/metrics.md does not list %s", names[i]);
      g_assert_cmpstr (row->type, ==, kind_name (kind));
      g_assert_cmpstr (row->labels, ==, labels);
      g_assert_cmpstr (row->meaning, ==, kv_metric_registry_get_documentation (registry, names[i]));
      if (g_str_has_prefix (names[i], "vllm:"))
        g_assert_true (g_str_has_prefix (names[i], "vllm:kv_offload_"));
      else
        assert_conventional (names[i], kind);
      g_hash_table_remove (rows, names[i]);
    }
  if (g_hash_table_size (rows) > 0)
    {
      GHashTableIter iter;
      gpointer key;

      g_hash_table_iter_init (&iter, rows);
      while (g_hash_table_iter_next (&iter, &key, NULL))
        g_test_message ("not defined: %s", (const char *) key);
      g_error ("doc/metrics.md lists %u families the library does not define",
               g_hash_table_size (rows));
    }
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/kvtier/metrics-doc/every-family", test_doc_lists_every_family);

  return g_test_run ();
}
