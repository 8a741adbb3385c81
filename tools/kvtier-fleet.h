/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* `kvtier bench --nodes`: the fleet simulator (kvtier-fleet.c). */
int      tool_bench_fleet        (int          argc,
                                  char       **argv);
/* `kvtier route`: a router in front of a fleet (kvtier-route.c, with
 * libsoup). */
int      tool_route              (int          argc,
                                  char       **argv);

/* One policy's points of the fleet plot: hit rate and load imbalance
 * against the number of nodes (kvtier-fleet-plot.c). */
typedef struct
{
  char   *label;
  GArray *nodes;       /* guint */
  GArray *hit_rate;    /* gdouble, % */
  GArray *imbalance;   /* gdouble, max / mean requests per node */
} ToolFleetSeries;

ToolFleetSeries *tool_fleet_series_new  (const char       *label);
void             tool_fleet_series_add  (ToolFleetSeries  *series,
                                         guint             nodes,
                                         gdouble           hit_rate,
                                         gdouble           imbalance);
void             tool_fleet_series_free (ToolFleetSeries  *series);
gboolean         tool_plot_fleet_write  (const char       *path,
                                         const char       *title,
                                         GPtrArray        *series,
                                         GError          **error);

G_END_DECLS
