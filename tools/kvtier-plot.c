/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-drawing.h"
#include "kvtier-tool.h"

#include <math.h>

#include <gio/gio.h>

/* `kvtier bench --plot`: two panels over the run's time axis. Top: where
 * the chunks looked up in each interval came from (stacked shares). Bottom:
 * bytes per second on each path. */

#define WIDTH 1000.0
#define HEIGHT 720.0
#define LEFT 80.0
#define RIGHT 200.0
#define TOP 50.0
#define PANEL_GAP 70.0

static void
axes (cairo_t    *cr,
      double      x0,
      double      y0,
      double      w,
      double      h,
      double      t_max,
      double      y_max,
      const char *y_label,
      const char *title)
{
  double step;
  char buf[64];

  cairo_set_source_rgb (cr, 0, 0, 0);
  cairo_set_line_width (cr, 1);
  cairo_rectangle (cr, x0, y0, w, h);
  cairo_stroke (cr);
  cairo_set_font_size (cr, 11);

  step = tool_drawing_nice_step (t_max, 8);
  for (double t = 0; t <= t_max + 1e-9; t += step)
    {
      double x = x0 + w * t / t_max;

      cairo_move_to (cr, x, y0 + h);
      cairo_line_to (cr, x, y0 + h + 4);
      cairo_stroke (cr);
      g_snprintf (buf, sizeof buf, "%g", t);
      tool_drawing_text (cr, x, y0 + h + 16, 0.5, buf);
    }
  tool_drawing_text (cr, x0 + w / 2, y0 + h + 32, 0.5, "time (s)");

  step = tool_drawing_nice_step (y_max, 5);
  for (double v = 0; v <= y_max + 1e-9; v += step)
    {
      double y = y0 + h - h * v / y_max;

      cairo_set_source_rgba (cr, 0, 0, 0, 0.15);
      cairo_move_to (cr, x0, y);
      cairo_line_to (cr, x0 + w, y);
      cairo_stroke (cr);
      cairo_set_source_rgb (cr, 0, 0, 0);
      g_snprintf (buf, sizeof buf, "%g", v);
      tool_drawing_text (cr, x0 - 6, y + 4, 1.0, buf);
    }

  cairo_save (cr);
  cairo_move_to (cr, x0 - 55, y0 + h / 2);
  cairo_rotate (cr, -G_PI / 2);
  {
    cairo_text_extents_t ext;

    cairo_text_extents (cr, y_label, &ext);
    cairo_rel_move_to (cr, -ext.width / 2, 0);
    cairo_show_text (cr, y_label);
  }
  cairo_restore (cr);

  cairo_set_font_size (cr, 13);
  tool_drawing_text (cr, x0, y0 - 8, 0.0, title);
}

static void
legend (cairo_t     *cr,
        double       x,
        double       y,
        guint        n,
        const char **names,
        guint        color_offset)
{
  cairo_set_font_size (cr, 11);
  for (guint i = 0; i < n; i++)
    {
      tool_drawing_set_color (cr, color_offset + i);
      cairo_rectangle (cr, x, y + i * 18 - 9, 12, 10);
      cairo_fill (cr);
      cairo_set_source_rgb (cr, 0, 0, 0);
      tool_drawing_text (cr, x + 18, y + i * 18, 0.0, names[i]);
    }
}

static void
draw (cairo_t  *cr,
      gpointer  data)
{
  const ToolPlotInfo *info = data;
  GPtrArray *samples = info->samples;
  const ToolSample *last = g_ptr_array_index (samples, samples->len - 1);
  double t_max = MAX (last->t_s, 1e-3);
  double w = WIDTH - LEFT - RIGHT;
  double h = (HEIGHT - TOP - PANEL_GAP - 60) / 2;
  double y1 = TOP + 10, y2 = TOP + 10 + h + PANEL_GAP;
  g_autofree const char **hit_names = g_new0 (const char *, info->n_sources + 2);
  double rate_max = 0;


  /* Top: share of each interval's lookups per source, stacked. */
  for (guint k = 1; k < samples->len; k++)
    {
      const ToolSample *a = g_ptr_array_index (samples, k - 1);
      const ToolSample *b = g_ptr_array_index (samples, k);
      double lookups = (double) (b->lookups - a->lookups);
      double xa = LEFT + w * a->t_s / t_max;
      double xb = LEFT + w * b->t_s / t_max;
      double acc = 0;

      if (lookups <= 0)
        continue;
      for (guint s = 0; s <= info->n_sources; s++)
        {
          double part = s < info->n_sources ? (double) (b->hits[s] - a->hits[s])
                                             : (double) (b->misses - a->misses);
          double frac = part / lookups;

          if (s < info->n_sources)
            tool_drawing_set_color (cr, s);
          else
            cairo_set_source_rgb (cr, 0.88, 0.88, 0.88);
          cairo_rectangle (cr, xa, y1 + h - h * (acc + frac), MAX (xb - xa, 0.5), h * frac);
          cairo_fill (cr);
          acc += frac;
        }
    }
  axes (cr, LEFT, y1, w, h, t_max, 100, "% of chunks looked up",
        "Where prefix chunks were found, per interval");
  for (guint s = 0; s < info->n_sources; s++)
    hit_names[s] = info->source_names[s];
  hit_names[info->n_sources] = "miss (computed)";
  legend (cr, LEFT + w + 20, y1 + 12, info->n_sources, hit_names, 0);
  cairo_set_source_rgb (cr, 0.88, 0.88, 0.88);
  cairo_rectangle (cr, LEFT + w + 20, y1 + 12 + info->n_sources * 18 - 9, 12, 10);
  cairo_fill (cr);
  cairo_set_source_rgb (cr, 0, 0, 0);
  tool_drawing_text (cr, LEFT + w + 38, y1 + 12 + info->n_sources * 18, 0.0, hit_names[info->n_sources]);

  /* Bottom: MB/s per path, per interval. */
  for (guint k = 1; k < samples->len; k++)
    {
      const ToolSample *a = g_ptr_array_index (samples, k - 1);
      const ToolSample *b = g_ptr_array_index (samples, k);
      double dt = b->t_s - a->t_s;

      /* A last, short interval (the run's tail) gives meaningless rates. */
      if (dt < 0.05)
        continue;
      for (guint p = 0; p < info->n_paths; p++)
        rate_max = MAX (rate_max, (b->bytes[p] - a->bytes[p]) / dt / 1e6);
    }
  rate_max = rate_max > 0 ? rate_max * 1.1 : 1;
  axes (cr, LEFT, y2, w, h, t_max, rate_max, "MB/s", "Traffic per path");
  cairo_set_line_width (cr, 1.5);
  for (guint p = 0; p < info->n_paths; p++)
    {
      gboolean started = FALSE;

      tool_drawing_set_color (cr, info->n_sources + 1 + p);
      for (guint k = 1; k < samples->len; k++)
        {
          const ToolSample *a = g_ptr_array_index (samples, k - 1);
          const ToolSample *b = g_ptr_array_index (samples, k);
          double dt = b->t_s - a->t_s;
          double rate, x, y;

          if (dt < 0.05)
            continue;
          rate = (b->bytes[p] - a->bytes[p]) / dt / 1e6;
          x = LEFT + w * (a->t_s + b->t_s) / 2 / t_max;
          y = y2 + h - h * rate / rate_max;

          if (!started)
            cairo_move_to (cr, x, y);
          else
            cairo_line_to (cr, x, y);
          started = TRUE;
        }
      cairo_stroke (cr);
    }
  legend (cr, LEFT + w + 20, y2 + 12, info->n_paths, info->path_names, info->n_sources + 1);
}

gboolean
tool_plot_write (const char          *path,
                 const ToolPlotInfo  *info,
                 GError             **error)
{
  if (info->samples->len < 2)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "the run was too short to draw (fewer than two samples)");
      return FALSE;
    }
  return tool_drawing_write (path, WIDTH, HEIGHT, info->title, draw, (gpointer) info, error);
}
