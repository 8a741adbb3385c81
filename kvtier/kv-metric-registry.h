/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KvMetricKind:
 * @KV_METRIC_KIND_COUNTER: a value that only grows; exposed with a `_total`
 *   suffix.
 * @KV_METRIC_KIND_GAUGE: a value that is set.
 * @KV_METRIC_KIND_HISTOGRAM: observations counted in buckets, with their sum
 *   and count.
 *
 * The kind of a metric.
 */
typedef enum {
  KV_METRIC_KIND_COUNTER,
  KV_METRIC_KIND_GAUGE,
  KV_METRIC_KIND_HISTOGRAM,
} KvMetricKind;

#define KV_TYPE_METRIC_REGISTRY (kv_metric_registry_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvMetricRegistry, kv_metric_registry, KV, METRIC_REGISTRY, GObject)

KVTIER_AVAILABLE_IN_ALL
KvMetricRegistry   *kv_metric_registry_new               (void);
KVTIER_AVAILABLE_IN_ALL
gboolean            kv_metric_registry_add_counter       (KvMetricRegistry   *self,
                                                          const char         *name,
                                                          const char         *documentation,
                                                          const char * const *label_names,
                                                          GError            **error);
KVTIER_AVAILABLE_IN_ALL
gboolean            kv_metric_registry_add_gauge         (KvMetricRegistry   *self,
                                                          const char         *name,
                                                          const char         *documentation,
                                                          const char * const *label_names,
                                                          GError            **error);
KVTIER_AVAILABLE_IN_ALL
gboolean            kv_metric_registry_add_histogram     (KvMetricRegistry   *self,
                                                          const char         *name,
                                                          const char         *documentation,
                                                          const char * const *label_names,
                                                          const gdouble      *buckets,
                                                          guint               n_buckets,
                                                          GError            **error);
KVTIER_AVAILABLE_IN_ALL
gboolean            kv_metric_registry_has_metric        (KvMetricRegistry   *self,
                                                          const char         *name);
KVTIER_AVAILABLE_IN_ALL
KvMetricKind        kv_metric_registry_get_kind          (KvMetricRegistry   *self,
                                                          const char         *name);
KVTIER_AVAILABLE_IN_ALL
const char         *kv_metric_registry_get_documentation (KvMetricRegistry   *self,
                                                          const char         *name);
KVTIER_AVAILABLE_IN_ALL
const char * const *kv_metric_registry_get_label_names   (KvMetricRegistry   *self,
                                                          const char         *name);
KVTIER_AVAILABLE_IN_ALL
const gdouble      *kv_metric_registry_get_buckets       (KvMetricRegistry   *self,
                                                          const char         *name,
                                                          guint              *n_buckets);
KVTIER_AVAILABLE_IN_ALL
char              **kv_metric_registry_list_names        (KvMetricRegistry   *self);
KVTIER_AVAILABLE_IN_ALL
guint               kv_metric_registry_get_n_metrics     (KvMetricRegistry   *self);

KVTIER_AVAILABLE_IN_ALL
gboolean            kv_metric_registry_add_manager_metrics   (KvMetricRegistry  *self,
                                                              GError           **error);
KVTIER_AVAILABLE_IN_ALL
gboolean            kv_metric_registry_add_tier_metrics      (KvMetricRegistry  *self,
                                                              GError           **error);
KVTIER_AVAILABLE_IN_ALL
gboolean            kv_metric_registry_add_connector_metrics (KvMetricRegistry  *self,
                                                              GError           **error);

G_END_DECLS
