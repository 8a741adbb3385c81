/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-metric-registry.h"
#include "kv-metric-registry-private.h"

#include <math.h>

#include "kv-tiering-metrics-private.h"
#include "kv-types.h"

struct _KvMetricRegistry
{
  GObject parent_instance;

  GPtrArray  *definitions;   /* KvMetricDefinition*, in definition order */
  GHashTable *by_name;       /* name -> KvMetricDefinition* (not owned) */
};

/**
 * KvMetricRegistry:
 *
 * The definitions of the metrics kvtier and its tiers report: name, kind,
 * documentation, label names and, for histograms, bucket bounds.
 *
 * It is the metadata half of metrics; the values live in [class@Kv.Stats],
 * which renders them in the Prometheus text format against a registry
 * ([method@Kv.Stats.to_prometheus]).
 *
 * It is also where kvtier's metric definitions live, once: the tiering
 * manager's ([method@Kv.MetricRegistry.add_manager_metrics]: vLLM's
 * `vllm:kv_offload_tiering_*` names exactly as vLLM defines them, so
 * dashboards work unchanged, and kvtier's `kvtier_tiering_*`), those every
 * tier inherits ([method@Kv.MetricRegistry.add_tier_metrics]), the
 * connector's ([method@Kv.MetricRegistry.add_connector_metrics]), and each
 * tier class's own from its `register_metrics` method. Read a registry
 * (names, kinds, help, labels, buckets) to declare the same families
 * elsewhere, for example in vLLM's `build_metric_definitions()`.
 * `doc/metrics.md` lists them all.
 *
 * kvtier's own names follow Prometheus' conventions: `kvtier_` then the
 * component, base units (`_seconds`, `_bytes`), and counters named without
 * the `_total` the exposition adds. The `tier` label, on vLLM's families
 * and kvtier's alike, is `<index>:<tier-type>` (`0:primary`, `1:fs`).
 *
 * Defining the same metric twice with the same kind, labels and buckets is
 * allowed (two tiers of one class both register); a conflicting definition
 * is an error.
 *
 * Not thread-safe: fill it once, on one thread, then read it from any.
 */
G_DEFINE_FINAL_TYPE (KvMetricRegistry, kv_metric_registry, G_TYPE_OBJECT)

static void
definition_free (gpointer data)
{
  KvMetricDefinition *def = data;

  g_free (def->name);
  g_free (def->documentation);
  g_strfreev (def->label_names);
  g_free (def->buckets);
  g_free (def);
}

static void
kv_metric_registry_finalize (GObject *object)
{
  KvMetricRegistry *self = KV_METRIC_REGISTRY (object);

  g_hash_table_unref (self->by_name);
  g_ptr_array_unref (self->definitions);

  G_OBJECT_CLASS (kv_metric_registry_parent_class)->finalize (object);
}

static void
kv_metric_registry_class_init (KvMetricRegistryClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_metric_registry_finalize;
}

static void
kv_metric_registry_init (KvMetricRegistry *self)
{
  self->definitions = g_ptr_array_new_with_free_func (definition_free);
  self->by_name = g_hash_table_new (g_str_hash, g_str_equal);
}

/**
 * kv_metric_registry_new:
 *
 * Creates an empty registry.
 *
 * Returns: (transfer full): a new registry
 */
KvMetricRegistry *
kv_metric_registry_new (void)
{
  return g_object_new (KV_TYPE_METRIC_REGISTRY, NULL);
}

/* The exposition name of @kind, also used in messages. */
const char *
kv_metric_registry_kind_to_string (KvMetricKind kind)
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
      return "unknown";
    }
}

/* Prometheus: metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names
 * [a-zA-Z_][a-zA-Z0-9_]* not starting with "__". */
static gboolean
is_valid_name (const char *name,
               gboolean    allow_colon)
{
  if (name[0] == '\0' || g_ascii_isdigit (name[0]))
    return FALSE;

  for (const char *p = name; *p != '\0'; p++)
    {
      if (!g_ascii_isalnum (*p) && *p != '_' && !(allow_colon && *p == ':'))
        return FALSE;
    }

  return TRUE;
}

static gboolean
same_definition (const KvMetricDefinition *a,
                 const KvMetricDefinition *b)
{
  if (a->kind != b->kind || g_strcmp0 (a->documentation, b->documentation) != 0)
    return FALSE;
  if (!g_strv_equal ((const char * const *) a->label_names,
                     (const char * const *) b->label_names))
    return FALSE;
  if (a->n_buckets != b->n_buckets)
    return FALSE;
  for (guint i = 0; i < a->n_buckets; i++)
    {
      if (a->buckets[i] != b->buckets[i])
        return FALSE;
    }
  return TRUE;
}

static gboolean
add_definition (KvMetricRegistry    *self,
                KvMetricKind         kind,
                const char          *name,
                const char          *documentation,
                const char * const  *label_names,
                const gdouble       *buckets,
                guint                n_buckets,
                GError             **error)
{
  static const char * const no_labels[] = { NULL };
  KvMetricDefinition *def, *existing;

  if (label_names == NULL)
    label_names = no_labels;

  if (!is_valid_name (name, TRUE))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Metric name “%s” is not a valid Prometheus name "
                   "([a-zA-Z_:][a-zA-Z0-9_:]*)", name);
      return FALSE;
    }

  for (guint i = 0; label_names[i] != NULL; i++)
    {
      if (!is_valid_name (label_names[i], FALSE) || g_str_has_prefix (label_names[i], "__"))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "Label name “%s” of metric %s is not a valid Prometheus label "
                       "name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)",
                       label_names[i], name);
          return FALSE;
        }
      if (kind == KV_METRIC_KIND_HISTOGRAM && g_str_equal (label_names[i], "le"))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "Histogram %s cannot have a label named “le”: it is the "
                       "bucket label", name);
          return FALSE;
        }
      for (guint j = 0; j < i; j++)
        {
          if (g_str_equal (label_names[i], label_names[j]))
            {
              g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "Metric %s names the label “%s” twice", name, label_names[i]);
              return FALSE;
            }
        }
    }

  for (guint i = 0; i < n_buckets; i++)
    {
      if (isnan (buckets[i]) || isinf (buckets[i]) || (i > 0 && buckets[i] <= buckets[i - 1]))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "Histogram %s: bucket bounds must be finite and strictly "
                       "increasing (bound %u is %g)", name, i, buckets[i]);
          return FALSE;
        }
    }

  def = g_new0 (KvMetricDefinition, 1);
  def->kind = kind;
  def->name = g_strdup (name);
  def->documentation = g_strdup (documentation != NULL ? documentation : "");
  def->label_names = g_strdupv ((char **) label_names);
  def->n_labels = g_strv_length (def->label_names);
  def->buckets = n_buckets > 0 ? g_memdup2 (buckets, n_buckets * sizeof (gdouble)) : NULL;
  def->n_buckets = n_buckets;

  existing = g_hash_table_lookup (self->by_name, name);
  if (existing != NULL)
    {
      gboolean same = same_definition (existing, def);

      if (!same)
        {
          g_autofree char *labels = g_strjoinv (", ", existing->label_names);

          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "Metric %s is already defined differently (as a %s with "
                       "labels [%s])", name,
                       kv_metric_registry_kind_to_string (existing->kind), labels);
        }
      definition_free (def);
      return same;
    }

  g_ptr_array_add (self->definitions, def);
  g_hash_table_insert (self->by_name, def->name, def);
  return TRUE;
}

/**
 * kv_metric_registry_add_counter:
 * @self: a registry
 * @name: the metric name, without the `_total` suffix the exposition adds
 * @documentation: the help text
 * @label_names: (array zero-terminated=1) (nullable): the label names, or
 *   %NULL for none
 * @error: return location for an error
 *
 * Defines a counter.
 *
 * Returns: %TRUE if defined (or already defined the same way); %FALSE with
 *   @error set if a name is invalid or @name is defined differently
 */
gboolean
kv_metric_registry_add_counter (KvMetricRegistry    *self,
                                const char          *name,
                                const char          *documentation,
                                const char * const  *label_names,
                                GError             **error)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return add_definition (self, KV_METRIC_KIND_COUNTER, name, documentation, label_names,
                         NULL, 0, error);
}

/**
 * kv_metric_registry_add_gauge:
 * @self: a registry
 * @name: the metric name
 * @documentation: the help text
 * @label_names: (array zero-terminated=1) (nullable): the label names, or
 *   %NULL for none
 * @error: return location for an error
 *
 * Defines a gauge.
 *
 * Returns: %TRUE if defined (or already defined the same way); %FALSE with
 *   @error set if a name is invalid or @name is defined differently
 */
gboolean
kv_metric_registry_add_gauge (KvMetricRegistry    *self,
                              const char          *name,
                              const char          *documentation,
                              const char * const  *label_names,
                              GError             **error)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return add_definition (self, KV_METRIC_KIND_GAUGE, name, documentation, label_names,
                         NULL, 0, error);
}

/**
 * kv_metric_registry_add_histogram:
 * @self: a registry
 * @name: the metric name
 * @documentation: the help text
 * @label_names: (array zero-terminated=1) (nullable): the label names, or
 *   %NULL for none; `le` is reserved
 * @buckets: (array length=n_buckets): the finite upper bounds of the
 *   buckets, strictly increasing (`+Inf` is implied)
 * @n_buckets: the number of bounds
 * @error: return location for an error
 *
 * Defines a histogram.
 *
 * Returns: %TRUE if defined (or already defined the same way); %FALSE with
 *   @error set if a name or bound is invalid or @name is defined differently
 */
gboolean
kv_metric_registry_add_histogram (KvMetricRegistry    *self,
                                  const char          *name,
                                  const char          *documentation,
                                  const char * const  *label_names,
                                  const gdouble       *buckets,
                                  guint                n_buckets,
                                  GError             **error)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (buckets != NULL || n_buckets == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return add_definition (self, KV_METRIC_KIND_HISTOGRAM, name, documentation, label_names,
                         buckets, n_buckets, error);
}

const KvMetricDefinition *
kv_metric_registry_lookup_definition (KvMetricRegistry *self,
                                      const char       *name)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);

  return g_hash_table_lookup (self->by_name, name);
}

const KvMetricDefinition *
kv_metric_registry_get_definition (KvMetricRegistry *self,
                                   guint             index)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), NULL);
  g_return_val_if_fail (index < self->definitions->len, NULL);

  return g_ptr_array_index (self->definitions, index);
}

/**
 * kv_metric_registry_has_metric:
 * @self: a registry
 * @name: a metric name
 *
 * Whether @name is defined.
 *
 * Returns: %TRUE if defined
 */
gboolean
kv_metric_registry_has_metric (KvMetricRegistry *self,
                               const char       *name)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);

  return g_hash_table_contains (self->by_name, name);
}

#define GET_DEFINITION_OR_RETURN(val)                                         \
  const KvMetricDefinition *def;                                              \
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), val);                   \
  g_return_val_if_fail (name != NULL, val);                                   \
  def = g_hash_table_lookup (self->by_name, name);                            \
  g_return_val_if_fail (def != NULL, val)

/**
 * kv_metric_registry_get_kind:
 * @self: a registry
 * @name: a defined metric name
 *
 * Gets the kind of a defined metric.
 *
 * Returns: the kind
 */
KvMetricKind
kv_metric_registry_get_kind (KvMetricRegistry *self,
                             const char       *name)
{
  GET_DEFINITION_OR_RETURN (KV_METRIC_KIND_COUNTER);

  return def->kind;
}

/**
 * kv_metric_registry_get_documentation:
 * @self: a registry
 * @name: a defined metric name
 *
 * Gets the help text of a defined metric.
 *
 * Returns: (transfer none): the documentation
 */
const char *
kv_metric_registry_get_documentation (KvMetricRegistry *self,
                                      const char       *name)
{
  GET_DEFINITION_OR_RETURN (NULL);

  return def->documentation;
}

/**
 * kv_metric_registry_get_label_names:
 * @self: a registry
 * @name: a defined metric name
 *
 * Gets the label names of a defined metric.
 *
 * Returns: (transfer none) (array zero-terminated=1): the label names
 */
const char * const *
kv_metric_registry_get_label_names (KvMetricRegistry *self,
                                    const char       *name)
{
  GET_DEFINITION_OR_RETURN (NULL);

  return (const char * const *) def->label_names;
}

/**
 * kv_metric_registry_get_buckets:
 * @self: a registry
 * @name: a defined metric name
 * @n_buckets: (out): the number of bounds
 *
 * Gets the bucket bounds of a defined histogram (none for other kinds).
 *
 * Returns: (transfer none) (array length=n_buckets) (nullable): the bounds
 */
const gdouble *
kv_metric_registry_get_buckets (KvMetricRegistry *self,
                                const char       *name,
                                guint            *n_buckets)
{
  GET_DEFINITION_OR_RETURN (NULL);

  if (n_buckets != NULL)
    *n_buckets = def->n_buckets;
  return def->buckets;
}

/**
 * kv_metric_registry_list_names:
 * @self: a registry
 *
 * Lists the defined metric names, in definition order.
 *
 * Returns: (transfer full) (array zero-terminated=1): the names
 */
char **
kv_metric_registry_list_names (KvMetricRegistry *self)
{
  GStrvBuilder *builder;
  char **names;

  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), NULL);

  builder = g_strv_builder_new ();
  for (guint i = 0; i < self->definitions->len; i++)
    g_strv_builder_add (builder, ((KvMetricDefinition *) g_ptr_array_index (self->definitions, i))->name);
  names = g_strv_builder_end (builder);
  g_strv_builder_unref (builder);
  return names;
}

/**
 * kv_metric_registry_get_n_metrics:
 * @self: a registry
 *
 * Counts the defined metrics.
 *
 * Returns: the number of metrics
 */
guint
kv_metric_registry_get_n_metrics (KvMetricRegistry *self)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), 0);

  return self->definitions->len;
}

/**
 * kv_metric_registry_add_manager_metrics:
 * @self: a registry
 * @error: return location for an error
 *
 * Adds the definitions of the metrics a [class@Kv.TieringManager] reports
 * itself (not its admission policy's nor its tiers'): vLLM's
 * `vllm:kv_offload_tiering_*` families, with vLLM's names, help and
 * histogram buckets, and kvtier's `kvtier_tiering_*` ones. All but two
 * are labelled `tier`.
 *
 * Returns: %TRUE on success; %FALSE with @error set if @self defines one
 *   of the names differently
 */
gboolean
kv_metric_registry_add_manager_metrics (KvMetricRegistry  *self,
                                        GError           **error)
{
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return kv_tiering_metrics_register (self, error);
}

/**
 * kv_metric_registry_add_tier_metrics:
 * @self: a registry
 * @error: return location for an error
 *
 * Adds the definitions of the metrics every [class@Kv.SecondaryTier]
 * reports, whatever its class (its deadlines and its circuit breaker; see
 * [method@Kv.SecondaryTier.get_stats]), labelled `tier`.
 * [method@Kv.SecondaryTier.register_metrics] adds them with the class's
 * own.
 *
 * Returns: %TRUE on success; %FALSE with @error set if @self defines one
 *   of the names differently
 */
gboolean
kv_metric_registry_add_tier_metrics (KvMetricRegistry  *self,
                                     GError           **error)
{
  static const char * const tier[] = { "tier", NULL };

  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return
    kv_metric_registry_add_counter (self, KV_METRIC_TIER_DEADLINE_FAILURES,
                                    "Jobs a tier had not reported by their deadline, reported "
                                    "failed", tier, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_TIER_LATE_COMPLETIONS,
                                    "Reports of jobs already failed at their deadline, dropped",
                                    tier, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_TIER_BREAKER_REJECTED_JOBS,
                                    "Jobs failed at once or not made while the tier's circuit "
                                    "breaker was open", tier, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_TIER_BREAKER_OPENINGS,
                                    "Times the tier's circuit breaker opened (each is logged)",
                                    tier, error) &&
    kv_metric_registry_add_gauge (self, KV_METRIC_TIER_BREAKER_OPEN,
                                  "1 while the tier's circuit breaker refuses work (lookups "
                                  "answer miss), else 0", tier, error);
}

/**
 * kv_metric_registry_add_connector_metrics:
 * @self: a registry
 * @error: return location for an error
 *
 * Adds the definitions of the metrics a [class@Kv.Connector] reports
 * itself (see [method@Kv.Connector.get_stats]): vLLM's offloading
 * connector's `vllm:kv_offload_total_bytes` and
 * `vllm:kv_offload_total_time` (label `transfer_type`) and kvtier's
 * `kvtier_connector_*`.
 *
 * Returns: %TRUE on success; %FALSE with @error set if @self defines one
 *   of the names differently
 */
gboolean
kv_metric_registry_add_connector_metrics (KvMetricRegistry  *self,
                                          GError           **error)
{
  static const char * const transfer[] = { "transfer_type", NULL };
  static const char * const source[] = { "source", NULL };

  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_BYTES,
                                    "Bytes moved between device and primary tier", transfer,
                                    error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_TIME,
                                    "Seconds the device spent on transfers", transfer, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_FAILURES,
                                    "Device transfers that failed", transfer, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_HITS,
                                    "Prompt chunks of scheduled requests, by where they were "
                                    "found (device, or the tier label)", source, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_COMPUTED,
                                    "Prompt chunks of scheduled requests that were computed",
                                    NULL, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_REFUSED,
                                    "Computed chunks the primary tier had no room for", NULL,
                                    error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_MANAGER_TIME,
                                    "Seconds spent in the tiering manager", NULL, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_MANAGER_LOOKUPS,
                                    "Chunks looked up in the tiering manager", NULL, error) &&
    kv_metric_registry_add_counter (self, KV_METRIC_CONNECTOR_STEPS, "Scheduler steps", NULL,
                                    error);
}
