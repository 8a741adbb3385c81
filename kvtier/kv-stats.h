/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-metric-registry.h"

G_BEGIN_DECLS

#define KV_TYPE_STATS (kv_stats_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvStats, kv_stats, KV, STATS, GObject)

KVTIER_AVAILABLE_IN_ALL
KvStats  *kv_stats_new                  (void);
KVTIER_AVAILABLE_IN_ALL
KvStats  *kv_stats_new_for_registry     (KvMetricRegistry   *registry);
KVTIER_AVAILABLE_IN_ALL
void      kv_stats_increase_counter     (KvStats            *self,
                                         const char         *name,
                                         gdouble             value,
                                         const char * const *label_values);
KVTIER_AVAILABLE_IN_ALL
void      kv_stats_set_gauge            (KvStats            *self,
                                         const char         *name,
                                         gdouble             value,
                                         const char * const *label_values);
KVTIER_AVAILABLE_IN_ALL
void      kv_stats_observe_histogram    (KvStats            *self,
                                         const char         *name,
                                         gdouble             value,
                                         const char * const *label_values);
KVTIER_AVAILABLE_IN_ALL
void      kv_stats_aggregate            (KvStats            *self,
                                         KvStats            *other);
KVTIER_AVAILABLE_IN_ALL
gboolean  kv_stats_is_empty             (KvStats            *self);
KVTIER_AVAILABLE_IN_ALL
KvStats  *kv_stats_take                 (KvStats            *self);
KVTIER_AVAILABLE_IN_ALL
void      kv_stats_reset                (KvStats            *self);
KVTIER_AVAILABLE_IN_ALL
gboolean  kv_stats_lookup               (KvStats            *self,
                                         const char         *name,
                                         const char * const *label_values,
                                         gdouble            *out_value);
KVTIER_AVAILABLE_IN_ALL
guint64   kv_stats_get_histogram_count  (KvStats            *self,
                                         const char         *name,
                                         const char * const *label_values,
                                         gdouble            *out_sum);
KVTIER_AVAILABLE_IN_ALL
guint64  *kv_stats_get_histogram_buckets (KvStats            *self,
                                          const char         *name,
                                          const char * const *label_values,
                                          const gdouble      *bounds,
                                          guint               n_bounds,
                                          guint              *out_n_counts,
                                          gdouble            *out_sum);
KVTIER_AVAILABLE_IN_ALL
GVariant *kv_stats_reduce               (KvStats            *self);
KVTIER_AVAILABLE_IN_ALL
char     *kv_stats_to_prometheus        (KvStats            *self,
                                         KvMetricRegistry   *registry);

G_END_DECLS
