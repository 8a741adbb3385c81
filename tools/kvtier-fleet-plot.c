/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-drawing.h"
#include "kvtier-fleet.h"

#include <math.h>

#include <gio/gio.h>

/* `kvtier bench --nodes … --plot`: two panels against the number of
 * nodes, one line per routing policy. Top: the hit rate (chunks found
 * anywhere / chunks looked up). Bottom: the load imbalance (most requests
 * on a node / the mean). */

#define WIDTH 900.0
#define HEIGHT 700.0
#define LEFT 80.0
#define RIGHT 230.0
#define TOP 50.0
#define GAP 80.0

ToolFleetSeries *
tool_fleet_series_new (const char *label)
{
  ToolFleetSeries *series = g_new0 (ToolFleetSeries, 1);

  series->label = g_strdup (label);
  series->nodes = g_array_new (FALSE, FALSE, sizeof (guint));
  series->hit_rate = g_array_new (FALSE, FALSE, sizeof (gdouble));
  series->imbalance = g_array_new (FALSE, FALSE, sizeof (gdouble));
  return series;
}

/* Adds a point, kept in order of the number of nodes. */
void
tool_fleet_series_add (ToolFleetSeries *series,
                       guint            nodes,
                       gdouble          hit_rate,
                       gdouble          imbalance)
{
  guint k = 0;

  while (k < series->nodes->len && g_array_index (series->nodes, guint, k) < nodes)
    k++;
  g_array_insert_val (series->nodes, k, nodes);
  g_array_insert_val (series->hit_rate, k, hit_rate);
  g_array_insert_val (series->imbalance, k, imbalance);
}

void
tool_fleet_series_free (ToolFleetSeries *series)
{
  g_free (series->label);
  g_array_unref (series->nodes);
  g_array_unref (series->hit_rate);
  g_array_unref (series->imbalance);
  g_free (series);
}

/* One panel: @get picks the value of a point. */
static void
panel (cairo_t    *cr,
       double      y0,
       double      h,
       GPtrArray  *series,
       guint       x_max,
       gboolean    rates,
       const char *y_label,
       const char *title)
{
  double w = WIDTH - LEFT - RIGHT;
  double y_min = rates ? 0 : 1, y_max = rates ? 0 : 1.5;
  char buf[32];

  for (guint i = 0; i < series->len; i++)
    {
      ToolFleetSeries *s = series->pdata[i];
      GArray *values = rates ? s->hit_rate : s->imbalance;

      for (guint k = 0; k < values->len; k++)
        y_max = MAX (y_max, g_array_index (values, gdouble, k));
    }
  y_max = rates ? MIN (100, ceil (y_max / 10 + 0.5) * 10) : ceil (y_max * 10 + 1) / 10;

  cairo_set_source_rgb (cr, 0, 0, 0);
  cairo_set_line_width (cr, 1);
  cairo_rectangle (cr, LEFT, y0, w, h);
  cairo_stroke (cr);
  cairo_set_font_size (cr, 11);
  for (guint n = 1; n <= x_max; n++)
    {
      double x = LEFT + w * (x_max > 1 ? (n - 1.0) / (x_max - 1) : 0.5);

      cairo_move_to (cr, x, y0 + h);
      cairo_line_to (cr, x, y0 + h + 4);
      cairo_stroke (cr);
      g_snprintf (buf, sizeof buf, "%u", n);
      tool_drawing_text (cr, x, y0 + h + 16, 0.5, buf);
    }
  tool_drawing_text (cr, LEFT + w / 2, y0 + h + 32, 0.5, "nodes");
  for (double v = y_min, step = tool_drawing_nice_step (y_max - y_min, 5); v <= y_max + 1e-9; v += step)
    {
      double y = y0 + h - h * (v - y_min) / (y_max - y_min);

      cairo_set_source_rgba (cr, 0, 0, 0, 0.15);
      cairo_move_to (cr, LEFT, y);
      cairo_line_to (cr, LEFT + w, y);
      cairo_stroke (cr);
      cairo_set_source_rgb (cr, 0, 0, 0);
      g_snprintf (buf, sizeof buf, "%g", v);
      tool_drawing_text (cr, LEFT - 6, y + 4, 1.0, buf);
    }
  cairo_save (cr);
  cairo_translate (cr, LEFT - 50, y0 + h / 2);
  cairo_rotate (cr, -G_PI / 2);
  tool_drawing_text (cr, 0, 0, 0.5, y_label);
  cairo_restore (cr);
  cairo_set_font_size (cr, 13);
  tool_drawing_text (cr, LEFT, y0 - 8, 0.0, title);

  cairo_set_line_width (cr, 2);
  for (guint i = 0; i < series->len; i++)
    {
      ToolFleetSeries *s = series->pdata[i];
      GArray *values = rates ? s->hit_rate : s->imbalance;
      tool_drawing_set_color (cr, i);
      for (guint k = 0; k < values->len; k++)
        {
          guint n = g_array_index (s->nodes, guint, k);
          double x = LEFT + w * (x_max > 1 ? (n - 1.0) / (x_max - 1) : 0.5);
          double y = y0 + h - h * (MIN (g_array_index (values, gdouble, k), y_max) - y_min) /
                              (y_max - y_min);

          if (k == 0)
            cairo_move_to (cr, x, y);
          else
            cairo_line_to (cr, x, y);
        }
      cairo_stroke (cr);
      for (guint k = 0; k < values->len; k++)
        {
          guint n = g_array_index (s->nodes, guint, k);
          double x = LEFT + w * (x_max > 1 ? (n - 1.0) / (x_max - 1) : 0.5);
          double y = y0 + h - h * (MIN (g_array_index (values, gdouble, k), y_max) - y_min) /
                              (y_max - y_min);

          cairo_arc (cr, x, y, 3.5, 0, 2 * G_PI);
          cairo_fill (cr);
        }
      cairo_set_font_size (cr, 11);
      cairo_rectangle (cr, LEFT + w + 20, y0 + 12 + i * 18 - 9, 12, 10);
      cairo_fill (cr);
      cairo_set_source_rgb (cr, 0, 0, 0);
      tool_drawing_text (cr, LEFT + w + 38, y0 + 12 + i * 18, 0.0, s->label);
    }
}

typedef struct
{
  GPtrArray *series;
  guint      x_max;
} FleetPlot;

static void
draw (cairo_t  *cr,
      gpointer  data)
{
  FleetPlot *plot = data;
  double h = (HEIGHT - TOP - GAP - 60) / 2;

  panel (cr, TOP + 10, h, plot->series, plot->x_max, TRUE, "hit rate (%)",
         "Prompt chunks found anywhere in the fleet");
  panel (cr, TOP + 10 + h + GAP, h, plot->series, plot->x_max, FALSE, "max / mean requests",
         "Load imbalance");
}

gboolean
tool_plot_fleet_write (const char  *path,
                       const char  *title,
                       GPtrArray   *series,
                       GError     **error)
{
  FleetPlot plot = { series, 1 };

  for (guint i = 0; i < series->len; i++)
    {
      ToolFleetSeries *s = series->pdata[i];

      for (guint k = 0; k < s->nodes->len; k++)
        plot.x_max = MAX (plot.x_max, g_array_index (s->nodes, guint, k));
    }
  return tool_drawing_write (path, WIDTH, HEIGHT, title, draw, &plot, error);
}
