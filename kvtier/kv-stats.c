/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-stats.h"
#include "kv-stats-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv-metric-registry-private.h"

typedef struct
{
  char    **label_values;
  /* counters and gauges */
  gdouble   value;
  /* histograms: either raw observations or counts per bucket */
  guint64   count;
  gdouble   sum;
  GArray   *raw;            /* gdouble; NULL once bucketed */
  gdouble  *bounds;         /* n_bounds finite upper bounds */
  guint     n_bounds;
  guint64  *bucket_counts;  /* n_bounds + 1, non-cumulative */
} Sample;

typedef struct
{
  KvMetricKind  kind;
  GHashTable   *samples;    /* label key -> Sample* */
} Metric;

struct _KvStats
{
  GObject parent_instance;

  KvMetricRegistry *registry;
  GHashTable       *metrics;  /* name -> Metric* */
};

/**
 * KvStats:
 *
 * Metric values keyed by metric name and label values: counters that grow,
 * gauges that are set, histograms that count observations.
 *
 * This is kvtier's counterpart of vLLM's offloading connector stats. The
 * tiering manager and each tier return a `KvStats` holding what happened
 * since the previous call (take-and-reset), and the caller folds them with
 * [method@Kv.Stats.aggregate]. A stats object can be flattened to a
 * dictionary ([method@Kv.Stats.reduce]) or rendered in the Prometheus text
 * format against the definitions of a [class@Kv.MetricRegistry]
 * ([method@Kv.Stats.to_prometheus]).
 *
 * Histograms keep their raw observations until they know their buckets: a
 * stats object made with [ctor@Kv.Stats.new_for_registry] counts
 * observations of the histograms the registry defines in their buckets at
 * once, so a long-lived, cumulative stats object (the one a `/metrics`
 * endpoint renders) stays small.
 *
 * Label values are given as a %NULL-terminated array (%NULL for a metric
 * without labels), in the order of the metric's label names.
 *
 * Not thread-safe: use a stats object from one thread at a time.
 */
G_DEFINE_FINAL_TYPE (KvStats, kv_stats, G_TYPE_OBJECT)

static void
sample_free (gpointer data)
{
  Sample *sample = data;

  g_strfreev (sample->label_values);
  if (sample->raw != NULL)
    g_array_unref (sample->raw);
  g_free (sample->bounds);
  g_free (sample->bucket_counts);
  g_free (sample);
}

static void
metric_free (gpointer data)
{
  Metric *metric = data;

  g_hash_table_unref (metric->samples);
  g_free (metric);
}

static GHashTable *
new_metrics_table (void)
{
  return g_hash_table_new_full (g_str_hash, g_str_equal, g_free, metric_free);
}

static void
kv_stats_finalize (GObject *object)
{
  KvStats *self = KV_STATS (object);

  g_hash_table_unref (self->metrics);
  g_clear_object (&self->registry);

  G_OBJECT_CLASS (kv_stats_parent_class)->finalize (object);
}

static void
kv_stats_class_init (KvStatsClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_stats_finalize;
}

static void
kv_stats_init (KvStats *self)
{
  self->metrics = new_metrics_table ();
}

/**
 * kv_stats_new:
 *
 * Creates an empty stats object. Histograms keep their raw observations
 * (fine for the per-call deltas tiers return).
 *
 * Returns: (transfer full): a new stats object
 */
KvStats *
kv_stats_new (void)
{
  return g_object_new (KV_TYPE_STATS, NULL);
}

/**
 * kv_stats_new_for_registry:
 * @registry: the definitions to count histogram buckets with
 *
 * Creates an empty stats object whose histograms, when @registry defines
 * them, are counted in their buckets at once instead of keeping every
 * observation: use it for a long-lived stats object that aggregates deltas.
 *
 * Returns: (transfer full): a new stats object
 */
KvStats *
kv_stats_new_for_registry (KvMetricRegistry *registry)
{
  KvStats *self;

  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (registry), NULL);

  self = kv_stats_new ();
  self->registry = g_object_ref (registry);
  return self;
}

/* The label tuple as Python prints it, `()`, `('a',)`, `('a', 'b')`: the
 * key vLLM's stats use, reused here for hashing and for reduce(). */
static char *
label_key (const char * const *label_values)
{
  GString *key = g_string_new ("(");
  guint n = 0;

  for (; label_values != NULL && label_values[n] != NULL; n++)
    {
      if (n > 0)
        g_string_append (key, ", ");
      g_string_append_c (key, '\'');
      for (const char *p = label_values[n]; *p != '\0'; p++)
        {
          switch (*p)
            {
            case '\\':
              g_string_append (key, "\\\\");
              break;
            case '\'':
              g_string_append (key, "\\'");
              break;
            case '\n':
              g_string_append (key, "\\n");
              break;
            default:
              g_string_append_c (key, *p);
            }
        }
      g_string_append_c (key, '\'');
    }
  if (n == 1)
    g_string_append_c (key, ',');
  g_string_append_c (key, ')');

  return g_string_free (key, FALSE);
}

guint
kv_stats_bucket_index (const gdouble *bounds,
                       guint          n_bounds,
                       gdouble        value)
{
  guint lo = 0, hi = n_bounds;

  /* First bound >= value (Prometheus buckets are "less than or equal"). */
  while (lo < hi)
    {
      guint mid = lo + (hi - lo) / 2;

      if (bounds[mid] >= value)
        hi = mid;
      else
        lo = mid + 1;
    }
  return lo;
}

static void
histogram_make_bucketed (Sample        *sample,
                         const gdouble *bounds,
                         guint          n_bounds)
{
  sample->bounds = n_bounds > 0 ? g_memdup2 (bounds, n_bounds * sizeof (gdouble)) : NULL;
  sample->n_bounds = n_bounds;
  sample->bucket_counts = g_new0 (guint64, n_bounds + 1);

  if (sample->raw != NULL)
    {
      for (guint i = 0; i < sample->raw->len; i++)
        sample->bucket_counts[kv_stats_bucket_index (bounds, n_bounds,
                                                     g_array_index (sample->raw, gdouble, i))] += 1;
      g_clear_pointer (&sample->raw, g_array_unref);
    }
}

/* Counts of @sample in the buckets @bounds; @out has n_bounds + 1 entries.
 * Counts kept in other buckets are moved to the bucket of their upper
 * bound, which is exact when the bounds match. */
static void
histogram_counts_for (const Sample  *sample,
                      const gdouble *bounds,
                      guint          n_bounds,
                      guint64       *out)
{
  memset (out, 0, (n_bounds + 1) * sizeof (guint64));

  if (sample->raw != NULL)
    {
      for (guint i = 0; i < sample->raw->len; i++)
        out[kv_stats_bucket_index (bounds, n_bounds, g_array_index (sample->raw, gdouble, i))] += 1;
      return;
    }

  for (guint i = 0; i <= sample->n_bounds; i++)
    {
      guint to = i < sample->n_bounds
                 ? kv_stats_bucket_index (bounds, n_bounds, sample->bounds[i])
                 : n_bounds;
      out[to] += sample->bucket_counts[i];
    }
}

static void
histogram_merge (Sample       *into,
                 const Sample *from)
{
  into->count += from->count;
  into->sum += from->sum;

  if (into->bucket_counts == NULL && from->bucket_counts != NULL)
    histogram_make_bucketed (into, from->bounds, from->n_bounds);

  if (into->bucket_counts != NULL)
    {
      g_autofree guint64 *counts = g_new (guint64, into->n_bounds + 1);

      histogram_counts_for (from, into->bounds, into->n_bounds, counts);
      for (guint i = 0; i <= into->n_bounds; i++)
        into->bucket_counts[i] += counts[i];
    }
  else if (from->raw != NULL)
    {
      g_array_append_vals (into->raw, from->raw->data, from->raw->len);
    }
}

static Sample *
get_sample (KvStats            *self,
            const char         *name,
            KvMetricKind        kind,
            const char * const *label_values)
{
  g_autofree char *key = NULL;
  Metric *metric;
  Sample *sample;

  metric = g_hash_table_lookup (self->metrics, name);
  if (metric == NULL)
    {
      metric = g_new0 (Metric, 1);
      metric->kind = kind;
      metric->samples = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, sample_free);
      g_hash_table_insert (self->metrics, g_strdup (name), metric);
    }
  else if (metric->kind != kind)
    {
      g_critical ("Metric %s is a %s, not a %s", name,
                  kv_metric_registry_kind_to_string (metric->kind),
                  kv_metric_registry_kind_to_string (kind));
      return NULL;
    }

  key = label_key (label_values);
  sample = g_hash_table_lookup (metric->samples, key);
  if (sample == NULL)
    {
      sample = g_new0 (Sample, 1);
      sample->label_values = label_values != NULL ? g_strdupv ((char **) label_values)
                                                  : g_new0 (char *, 1);
      if (kind == KV_METRIC_KIND_HISTOGRAM)
        {
          const KvMetricDefinition *def = NULL;

          if (self->registry != NULL)
            def = kv_metric_registry_lookup_definition (self->registry, name);
          if (def != NULL && def->kind == KV_METRIC_KIND_HISTOGRAM)
            histogram_make_bucketed (sample, def->buckets, def->n_buckets);
          else
            sample->raw = g_array_new (FALSE, FALSE, sizeof (gdouble));
        }
      g_hash_table_insert (metric->samples, g_steal_pointer (&key), sample);
    }

  return sample;
}

/**
 * kv_stats_increase_counter:
 * @self: a stats object
 * @name: the counter's name (without `_total`)
 * @value: how much to add; >= 0
 * @label_values: (array zero-terminated=1) (nullable): the label values, or
 *   %NULL for none
 *
 * Adds @value to a counter (creating it at 0: adding 0 makes the series
 * exist).
 */
void
kv_stats_increase_counter (KvStats            *self,
                           const char         *name,
                           gdouble             value,
                           const char * const *label_values)
{
  Sample *sample;

  g_return_if_fail (KV_IS_STATS (self));
  g_return_if_fail (name != NULL);
  g_return_if_fail (value >= 0.0);

  sample = get_sample (self, name, KV_METRIC_KIND_COUNTER, label_values);
  if (sample != NULL)
    sample->value += value;
}

/**
 * kv_stats_set_gauge:
 * @self: a stats object
 * @name: the gauge's name
 * @value: the value
 * @label_values: (array zero-terminated=1) (nullable): the label values, or
 *   %NULL for none
 *
 * Sets a gauge.
 */
void
kv_stats_set_gauge (KvStats            *self,
                    const char         *name,
                    gdouble             value,
                    const char * const *label_values)
{
  Sample *sample;

  g_return_if_fail (KV_IS_STATS (self));
  g_return_if_fail (name != NULL);

  sample = get_sample (self, name, KV_METRIC_KIND_GAUGE, label_values);
  if (sample != NULL)
    sample->value = value;
}

/**
 * kv_stats_observe_histogram:
 * @self: a stats object
 * @name: the histogram's name
 * @value: the observation
 * @label_values: (array zero-terminated=1) (nullable): the label values, or
 *   %NULL for none
 *
 * Records one observation in a histogram.
 */
void
kv_stats_observe_histogram (KvStats            *self,
                            const char         *name,
                            gdouble             value,
                            const char * const *label_values)
{
  Sample *sample;

  g_return_if_fail (KV_IS_STATS (self));
  g_return_if_fail (name != NULL);

  sample = get_sample (self, name, KV_METRIC_KIND_HISTOGRAM, label_values);
  if (sample == NULL)
    return;

  sample->count += 1;
  sample->sum += value;
  if (sample->bucket_counts != NULL)
    sample->bucket_counts[kv_stats_bucket_index (sample->bounds, sample->n_bounds, value)] += 1;
  else
    g_array_append_val (sample->raw, value);
}

void
kv_stats_add_histogram_buckets (KvStats            *self,
                                const char         *name,
                                const char * const *label_values,
                                const gdouble      *bounds,
                                guint               n_bounds,
                                const guint64      *counts,
                                gdouble             sum)
{
  Sample from = { 0, };
  Sample *sample;

  g_return_if_fail (KV_IS_STATS (self));
  g_return_if_fail (name != NULL);
  g_return_if_fail (counts != NULL);

  sample = get_sample (self, name, KV_METRIC_KIND_HISTOGRAM, label_values);
  if (sample == NULL)
    return;

  from.bounds = (gdouble *) bounds;
  from.n_bounds = n_bounds;
  from.bucket_counts = (guint64 *) counts;
  from.sum = sum;
  for (guint i = 0; i <= n_bounds; i++)
    from.count += counts[i];

  histogram_merge (sample, &from);
}

/**
 * kv_stats_aggregate:
 * @self: a stats object
 * @other: stats to fold in
 *
 * Folds @other into @self: counters add up, gauges take @other's value,
 * histograms merge their observations. A metric whose kind differs between
 * the two is left out with a critical warning.
 */
void
kv_stats_aggregate (KvStats *self,
                    KvStats *other)
{
  GHashTableIter miter;
  gpointer name, value;

  g_return_if_fail (KV_IS_STATS (self));
  g_return_if_fail (KV_IS_STATS (other));

  if (self == other)
    return;

  g_hash_table_iter_init (&miter, other->metrics);
  while (g_hash_table_iter_next (&miter, &name, &value))
    {
      Metric *metric = value;
      GHashTableIter siter;
      gpointer svalue;

      g_hash_table_iter_init (&siter, metric->samples);
      while (g_hash_table_iter_next (&siter, NULL, &svalue))
        {
          const Sample *from = svalue;
          Sample *into = get_sample (self, name, metric->kind,
                                     (const char * const *) from->label_values);

          if (into == NULL)
            break;

          switch (metric->kind)
            {
            case KV_METRIC_KIND_COUNTER:
              into->value += from->value;
              break;
            case KV_METRIC_KIND_GAUGE:
              into->value = from->value;
              break;
            case KV_METRIC_KIND_HISTOGRAM:
              histogram_merge (into, from);
              break;
            default:
              g_assert_not_reached ();
            }
        }
    }
}

/**
 * kv_stats_is_empty:
 * @self: a stats object
 *
 * Whether no value was recorded (a counter increased by zero counts as
 * recorded).
 *
 * Returns: %TRUE if empty
 */
gboolean
kv_stats_is_empty (KvStats *self)
{
  g_return_val_if_fail (KV_IS_STATS (self), TRUE);

  return g_hash_table_size (self->metrics) == 0;
}

/**
 * kv_stats_take:
 * @self: a stats object
 *
 * Moves everything recorded so far into a new stats object and leaves
 * @self empty (take-and-reset).
 *
 * Returns: (transfer full): the recorded values
 */
KvStats *
kv_stats_take (KvStats *self)
{
  KvStats *taken;

  g_return_val_if_fail (KV_IS_STATS (self), NULL);

  taken = kv_stats_new ();
  if (self->registry != NULL)
    taken->registry = g_object_ref (self->registry);
  g_hash_table_unref (taken->metrics);
  taken->metrics = g_steal_pointer (&self->metrics);
  self->metrics = new_metrics_table ();
  return taken;
}

/**
 * kv_stats_reset:
 * @self: a stats object
 *
 * Forgets every recorded value.
 */
void
kv_stats_reset (KvStats *self)
{
  g_return_if_fail (KV_IS_STATS (self));

  g_hash_table_remove_all (self->metrics);
}

static const Sample *
find_sample (KvStats            *self,
             const char         *name,
             const char * const *label_values,
             KvMetricKind       *out_kind)
{
  g_autofree char *key = NULL;
  Metric *metric = g_hash_table_lookup (self->metrics, name);

  if (metric == NULL)
    return NULL;

  key = label_key (label_values);
  *out_kind = metric->kind;
  return g_hash_table_lookup (metric->samples, key);
}

/**
 * kv_stats_lookup:
 * @self: a stats object
 * @name: a counter or gauge name
 * @label_values: (array zero-terminated=1) (nullable): the label values, or
 *   %NULL for none
 * @out_value: (out) (optional): the value
 *
 * Reads a counter or a gauge.
 *
 * Returns: %TRUE if @name with these labels was recorded (and is not a
 *   histogram)
 */
gboolean
kv_stats_lookup (KvStats            *self,
                 const char         *name,
                 const char * const *label_values,
                 gdouble            *out_value)
{
  KvMetricKind kind = KV_METRIC_KIND_COUNTER;
  const Sample *sample;

  g_return_val_if_fail (KV_IS_STATS (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);

  sample = find_sample (self, name, label_values, &kind);
  if (sample == NULL || kind == KV_METRIC_KIND_HISTOGRAM)
    return FALSE;

  if (out_value != NULL)
    *out_value = sample->value;
  return TRUE;
}

/**
 * kv_stats_get_histogram_count:
 * @self: a stats object
 * @name: a histogram name
 * @label_values: (array zero-terminated=1) (nullable): the label values, or
 *   %NULL for none
 * @out_sum: (out) (optional): the sum of the observations
 *
 * Reads how many observations a histogram recorded.
 *
 * Returns: the number of observations (0 if none was recorded)
 */
guint64
kv_stats_get_histogram_count (KvStats            *self,
                              const char         *name,
                              const char * const *label_values,
                              gdouble            *out_sum)
{
  KvMetricKind kind = KV_METRIC_KIND_COUNTER;
  const Sample *sample;

  g_return_val_if_fail (KV_IS_STATS (self), 0);
  g_return_val_if_fail (name != NULL, 0);

  if (out_sum != NULL)
    *out_sum = 0.0;

  sample = find_sample (self, name, label_values, &kind);
  if (sample == NULL || kind != KV_METRIC_KIND_HISTOGRAM)
    return 0;

  if (out_sum != NULL)
    *out_sum = sample->sum;
  return sample->count;
}

/**
 * kv_stats_get_histogram_buckets:
 * @self: a stats object
 * @name: a histogram name
 * @label_values: (array zero-terminated=1) (nullable): the label values, or
 *   %NULL for none
 * @bounds: (array length=n_bounds) (nullable): the buckets' finite upper
 *   bounds, strictly increasing (usually the histogram's own, from
 *   [method@Kv.MetricRegistry.get_buckets])
 * @n_bounds: the number of bounds
 * @out_n_counts: (out): where to store the number of counts, @n_bounds + 1
 * @out_sum: (out) (optional): the sum of the observations
 *
 * Reads how many observations a histogram recorded in each bucket of
 * @bounds, as Prometheus counts them: bucket `i` holds the observations
 * greater than `bounds[i - 1]` and at most `bounds[i]`, the last one those
 * greater than every bound (`+Inf`). The counts are per bucket, not
 * cumulative; they add up to [method@Kv.Stats.get_histogram_count].
 *
 * The counts are exact when the histogram kept its observations (a stats
 * object made with [ctor@Kv.Stats.new]) or counted them in the same
 * buckets (one made with [ctor@Kv.Stats.new_for_registry] whose registry
 * defines the histogram with @bounds); a histogram counted in other
 * buckets has each of its buckets' counts in the bucket of @bounds that
 * holds its upper bound.
 *
 * Returns: (array length=out_n_counts) (transfer full): the count of each
 *   bucket; all zero when @name with these labels was not recorded
 */
guint64 *
kv_stats_get_histogram_buckets (KvStats            *self,
                                const char         *name,
                                const char * const *label_values,
                                const gdouble      *bounds,
                                guint               n_bounds,
                                guint              *out_n_counts,
                                gdouble            *out_sum)
{
  KvMetricKind kind = KV_METRIC_KIND_COUNTER;
  const Sample *sample;
  guint64 *counts;

  g_return_val_if_fail (out_n_counts != NULL, NULL);
  *out_n_counts = 0;
  g_return_val_if_fail (KV_IS_STATS (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);
  g_return_val_if_fail (bounds != NULL || n_bounds == 0, NULL);
  for (guint i = 0; i < n_bounds; i++)
    g_return_val_if_fail (isfinite (bounds[i]) && (i == 0 || bounds[i - 1] < bounds[i]), NULL);

  if (out_sum != NULL)
    *out_sum = 0.0;
  counts = g_new0 (guint64, n_bounds + 1);
  *out_n_counts = n_bounds + 1;
  sample = find_sample (self, name, label_values, &kind);
  if (sample == NULL || kind != KV_METRIC_KIND_HISTOGRAM)
    return counts;

  histogram_counts_for (sample, bounds, n_bounds, counts);
  if (out_sum != NULL)
    *out_sum = sample->sum;
  return counts;
}

static gint
compare_strings (gconstpointer a,
                 gconstpointer b)
{
  return strcmp (*(const char * const *) a, *(const char * const *) b);
}

/* Keys of @table, sorted, so that output does not depend on hashing. */
static GPtrArray *
sorted_keys (GHashTable *table)
{
  GPtrArray *keys = g_ptr_array_sized_new (g_hash_table_size (table));
  GHashTableIter iter;
  gpointer key;

  g_hash_table_iter_init (&iter, table);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    g_ptr_array_add (keys, key);
  g_ptr_array_sort (keys, compare_strings);
  return keys;
}

/**
 * kv_stats_reduce:
 * @self: a stats object
 *
 * Flattens the stats to a dictionary keyed `"<name>:<labels>"`, where
 * `<labels>` is the label tuple as Python prints it (`()`, `('1:fs',)`),
 * as vLLM's offloading stats do. A histogram contributes two entries,
 * `"<name>_count:<labels>"` and `"<name>_sum:<labels>"`.
 *
 * Returns: (transfer full): an `a{sd}` dictionary
 */
GVariant *
kv_stats_reduce (KvStats *self)
{
  g_autoptr(GPtrArray) names = NULL;
  GVariantBuilder builder;

  g_return_val_if_fail (KV_IS_STATS (self), NULL);

  g_variant_builder_init (&builder, G_VARIANT_TYPE ("a{sd}"));
  names = sorted_keys (self->metrics);
  for (guint i = 0; i < names->len; i++)
    {
      const char *name = g_ptr_array_index (names, i);
      Metric *metric = g_hash_table_lookup (self->metrics, name);
      g_autoptr(GPtrArray) keys = sorted_keys (metric->samples);

      for (guint j = 0; j < keys->len; j++)
        {
          const char *key = g_ptr_array_index (keys, j);
          const Sample *sample = g_hash_table_lookup (metric->samples, key);

          if (metric->kind == KV_METRIC_KIND_HISTOGRAM)
            {
              g_autofree char *count_key = g_strdup_printf ("%s_count:%s", name, key);
              g_autofree char *sum_key = g_strdup_printf ("%s_sum:%s", name, key);

              g_variant_builder_add (&builder, "{sd}", count_key, (gdouble) sample->count);
              g_variant_builder_add (&builder, "{sd}", sum_key, sample->sum);
            }
          else
            {
              g_autofree char *flat_key = g_strdup_printf ("%s:%s", name, key);

              g_variant_builder_add (&builder, "{sd}", flat_key, sample->value);
            }
        }
    }

  return g_variant_ref_sink (g_variant_builder_end (&builder));
}

/* @value as Python's prometheus_client writes it (floatToGoString), which
 * is what vLLM's /metrics shows: Python's repr() of the float — the
 * shortest digits that read back as @value, "1.0", "10.0", "0.5",
 * "5e-05", "1e+16" — except that a positive value with seven or more
 * integer digits is written with an exponent as Go would ("1.234567e+06";
 * the client writes the exponent "e+0" followed by the digits, so 1e10 is
 * "1e+010"). "+Inf", "-Inf", "NaN". Bucket bounds (`le`) and sample values
 * alike, so `le="10.0"` matches vLLM's series. */
void
kv_stats_format_value (GString *out,
                       gdouble  value)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  char digits[32];
  GString *repr;
  const char *e;
  gsize n_digits = 0;
  gint decpt, exponent;
  gssize dot;

  if (isnan (value))
    {
      g_string_append (out, "NaN");
      return;
    }
  if (isinf (value))
    {
      g_string_append (out, value > 0 ? "+Inf" : "-Inf");
      return;
    }
  if (value == 0.0)
    {
      g_string_append (out, signbit (value) ? "-0.0" : "0.0");
      return;
    }

  /* the shortest "d.ddde±x" that reads back as @value */
  for (int precision = 0; precision <= 16; precision++)
    {
      char format[8];

      g_snprintf (format, sizeof format, "%%.%de", precision);
      g_ascii_formatd (buf, sizeof buf, format, fabs (value));
      if (g_ascii_strtod (buf, NULL) == fabs (value))
        break;
    }
  e = strchr (buf, 'e');
  for (const char *p = buf; p < e; p++)
    if (g_ascii_isdigit (*p) && n_digits < sizeof digits - 1)
      digits[n_digits++] = *p;
  digits[n_digits] = '\0';
  exponent = atoi (e + 1);
  decpt = exponent + 1;

  repr = g_string_new (value < 0 ? "-" : "");
  if (decpt <= -4 || decpt > 16)
    {
      g_string_append_c (repr, digits[0]);
      if (n_digits > 1)
        g_string_append_printf (repr, ".%s", digits + 1);
      g_string_append_printf (repr, "e%c%02d", exponent < 0 ? '-' : '+', ABS (exponent));
    }
  else if (decpt <= 0)
    {
      g_string_append (repr, "0.");
      for (gint i = 0; i < -decpt; i++)
        g_string_append_c (repr, '0');
      g_string_append (repr, digits);
    }
  else if ((gsize) decpt < n_digits)
    {
      g_string_append_len (repr, digits, decpt);
      g_string_append_printf (repr, ".%s", digits + decpt);
    }
  else
    {
      g_string_append (repr, digits);
      for (gsize i = n_digits; i < (gsize) decpt; i++)
        g_string_append_c (repr, '0');
      g_string_append (repr, ".0");
    }

  /* Go switches to an exponent sooner than Python */
  e = strchr (repr->str, '.');
  dot = e != NULL ? e - repr->str : -1;
  if (value > 0 && dot > 6)
    {
      GString *mantissa = g_string_new (NULL);

      g_string_append_c (mantissa, repr->str[0]);
      g_string_append_c (mantissa, '.');
      g_string_append_len (mantissa, repr->str + 1, dot - 1);
      g_string_append (mantissa, repr->str + dot + 1);
      while (mantissa->len > 0 &&
             (mantissa->str[mantissa->len - 1] == '0' || mantissa->str[mantissa->len - 1] == '.'))
        g_string_truncate (mantissa, mantissa->len - 1);
      g_string_append_printf (out, "%se+0%" G_GSSIZE_FORMAT, mantissa->str, dot - 1);
      g_string_free (mantissa, TRUE);
    }
  else
    {
      g_string_append (out, repr->str);
    }
  g_string_free (repr, TRUE);
}

static void
append_escaped (GString    *out,
                const char *text,
                gboolean    escape_quotes)
{
  for (const char *p = text; *p != '\0'; p++)
    {
      if (*p == '\\')
        g_string_append (out, "\\\\");
      else if (*p == '\n')
        g_string_append (out, "\\n");
      else if (*p == '"' && escape_quotes)
        g_string_append (out, "\\\"");
      else
        g_string_append_c (out, *p);
    }
}

/* `{a="x",b="y"` plus `,le="..."` when @le is set, then `}`; nothing at all
 * when there are no labels and no @le. */
static void
append_labels (GString                  *out,
               const KvMetricDefinition *def,
               const Sample             *sample,
               const char               *le)
{
  if (def->n_labels == 0 && le == NULL)
    return;

  g_string_append_c (out, '{');
  for (guint i = 0; i < def->n_labels; i++)
    {
      if (i > 0)
        g_string_append_c (out, ',');
      g_string_append_printf (out, "%s=\"", def->label_names[i]);
      append_escaped (out, sample->label_values[i], TRUE);
      g_string_append_c (out, '"');
    }
  if (le != NULL)
    g_string_append_printf (out, "%sle=\"%s\"", def->n_labels > 0 ? "," : "", le);
  g_string_append_c (out, '}');
}

static void
append_histogram (GString                  *out,
                  const KvMetricDefinition *def,
                  const Sample             *sample)
{
  g_autofree guint64 *counts = g_new (guint64, def->n_buckets + 1);
  guint64 cumulative = 0;

  histogram_counts_for (sample, def->buckets, def->n_buckets, counts);
  for (guint i = 0; i <= def->n_buckets; i++)
    {
      GString *le = g_string_new (NULL);

      if (i < def->n_buckets)
        kv_stats_format_value (le, def->buckets[i]);
      else
        g_string_append (le, "+Inf");

      cumulative += counts[i];
      g_string_append_printf (out, "%s_bucket", def->name);
      append_labels (out, def, sample, le->str);
      g_string_append_c (out, ' ');
      kv_stats_format_value (out, (gdouble) cumulative);
      g_string_append_c (out, '\n');
      g_string_free (le, TRUE);
    }

  g_string_append_printf (out, "%s_count", def->name);
  append_labels (out, def, sample, NULL);
  g_string_append_c (out, ' ');
  kv_stats_format_value (out, (gdouble) sample->count);
  g_string_append_c (out, '\n');

  g_string_append_printf (out, "%s_sum", def->name);
  append_labels (out, def, sample, NULL);
  g_string_append_c (out, ' ');
  kv_stats_format_value (out, sample->sum);
  g_string_append_c (out, '\n');
}

/* Recorded but undefined metrics cannot be rendered without label names. */
static void
warn_undefined (KvStats          *self,
                KvMetricRegistry *registry)
{
  GHashTableIter iter;
  gpointer name;

  g_hash_table_iter_init (&iter, self->metrics);
  while (g_hash_table_iter_next (&iter, &name, NULL))
    {
      if (!kv_metric_registry_has_metric (registry, name))
        g_warning ("Metric %s is not defined in the registry; left out", (const char *) name);
    }
}

/**
 * kv_stats_to_prometheus:
 * @self: a stats object
 * @registry: the definitions of the metrics
 *
 * Renders the stats in the Prometheus text exposition format, version
 * 0.0.4 (content type `text/plain; version=0.0.4`), in the order @registry
 * defines the metrics. Each metric with at least one recorded series gets
 * its `# HELP` and `# TYPE` lines; counters are exposed with a `_total`
 * suffix, histograms as cumulative `_bucket{le="..."}` series ending with
 * `le="+Inf"`, then `_count` and `_sum`. Label values are escaped.
 *
 * Counters are exposed as they are, so render a cumulative stats object
 * (one that aggregated every delta), not a delta. Recorded metrics that
 * @registry does not define, or defines with another kind or another
 * number of labels, are left out with a warning.
 *
 * Returns: (transfer full): the exposition text
 */
char *
kv_stats_to_prometheus (KvStats          *self,
                        KvMetricRegistry *registry)
{
  GString *out;
  guint n_metrics;

  g_return_val_if_fail (KV_IS_STATS (self), NULL);
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (registry), NULL);

  out = g_string_new (NULL);
  n_metrics = kv_metric_registry_get_n_metrics (registry);

  for (guint m = 0; m < n_metrics; m++)
    {
      const KvMetricDefinition *def = kv_metric_registry_get_definition (registry, m);
      Metric *metric = g_hash_table_lookup (self->metrics, def->name);
      g_autoptr(GPtrArray) keys = NULL;
      g_autofree char *exposed = NULL;

      if (metric == NULL || g_hash_table_size (metric->samples) == 0)
        continue;
      if (metric->kind != def->kind)
        {
          g_warning ("Metric %s was recorded as a %s but is defined as a %s; left out",
                     def->name, kv_metric_registry_kind_to_string (metric->kind),
                     kv_metric_registry_kind_to_string (def->kind));
          continue;
        }

      if (def->kind == KV_METRIC_KIND_COUNTER && !g_str_has_suffix (def->name, "_total"))
        exposed = g_strconcat (def->name, "_total", NULL);
      else
        exposed = g_strdup (def->name);

      g_string_append_printf (out, "# HELP %s ", exposed);
      append_escaped (out, def->documentation, FALSE);
      g_string_append_printf (out, "\n# TYPE %s %s\n", exposed,
                              kv_metric_registry_kind_to_string (def->kind));

      keys = sorted_keys (metric->samples);
      for (guint i = 0; i < keys->len; i++)
        {
          const Sample *sample = g_hash_table_lookup (metric->samples, g_ptr_array_index (keys, i));

          if (g_strv_length (sample->label_values) != def->n_labels)
            {
              g_warning ("Metric %s was recorded with labels %s, but it has %u labels; "
                         "series left out", def->name,
                         (const char *) g_ptr_array_index (keys, i), def->n_labels);
              continue;
            }

          if (def->kind == KV_METRIC_KIND_HISTOGRAM)
            {
              append_histogram (out, def, sample);
              continue;
            }

          g_string_append (out, exposed);
          append_labels (out, def, sample, NULL);
          g_string_append_c (out, ' ');
          kv_stats_format_value (out, sample->value);
          g_string_append_c (out, '\n');
        }
    }

  warn_undefined (self, registry);

  return g_string_free (out, FALSE);
}
