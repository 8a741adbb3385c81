/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Helpers the benchmarks share: sizes as the options spell them, CPU time,
 * medians. */

gboolean bench_parse_size      (const char *text,
                                guint64    *out);
char    *bench_size_name       (guint64     bytes);
gdouble  bench_now_s           (void);
gdouble  bench_self_cpu_s      (void);
gdouble  bench_thread_cpu_s    (void);
gdouble  bench_process_cpu_s   (GPid        pid);
guint    bench_median_index    (const gdouble *values,
                                guint          n);
gdouble  bench_median          (const gdouble *values,
                                guint          n);

G_END_DECLS
