/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-stats.h"

G_BEGIN_DECLS

/* Adds observations already counted in buckets (the tiering metrics
 * tracker counts lookups itself to stay allocation-free): @counts has
 * n_bounds + 1 entries, non-cumulative, the last one for values above every
 * bound. Owner thread. */
void kv_stats_add_histogram_buckets (KvStats            *self,
                                     const char         *name,
                                     const char * const *label_values,
                                     const gdouble      *bounds,
                                     guint               n_bounds,
                                     const guint64      *counts,
                                     gdouble             sum);

/* Index of the bucket @value falls in: the first bound >= @value, or
 * n_bounds for the overflow bucket. */
guint kv_stats_bucket_index         (const gdouble      *bounds,
                                     guint               n_bounds,
                                     gdouble             value);

/* Appends @value as the Prometheus exposition writes it (Python's
 * prometheus_client style: "1.0", "5e-05", "+Inf"). */
void  kv_stats_format_value         (GString            *out,
                                     gdouble             value);

G_END_DECLS
