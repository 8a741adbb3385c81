/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-drawing.h"

#include <math.h>

#include <cairo-svg.h>
#include <gio/gio.h>

static const double palette[][3] = {
  { 0.12, 0.47, 0.71 }, { 1.00, 0.50, 0.05 }, { 0.17, 0.63, 0.17 },
  { 0.84, 0.15, 0.16 }, { 0.58, 0.40, 0.74 }, { 0.55, 0.34, 0.29 },
  { 0.89, 0.47, 0.76 }, { 0.50, 0.50, 0.50 }, { 0.74, 0.74, 0.13 },
  { 0.09, 0.75, 0.81 },
};

/* Draws @s with its left edge (@align 0), middle (0.5) or right edge (1)
 * at @x, on the baseline @y. */
void
tool_drawing_text (cairo_t    *cr,
                   double      x,
                   double      y,
                   double      align,
                   const char *s)
{
  cairo_text_extents_t ext;

  cairo_text_extents (cr, s, &ext);
  cairo_move_to (cr, x - align * ext.width, y);
  cairo_show_text (cr, s);
}

/* A step of 1, 2 or 5 times a power of ten that cuts @range into about
 * @n_steps ticks. */
double
tool_drawing_nice_step (double range,
                        int    n_steps)
{
  double raw = range / n_steps;
  double mag = pow (10, floor (log10 (raw)));
  double norm = raw / mag;

  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

void
tool_drawing_set_color (cairo_t *cr,
                        guint    index)
{
  const double *c = palette[index % G_N_ELEMENTS (palette)];

  cairo_set_source_rgb (cr, c[0], c[1], c[2]);
}

/* Writes @path, SVG when its name ends in ".svg" and PNG otherwise: a
 * white page of @width × @height with @title centred on top, then
 * whatever @draw adds. */
gboolean
tool_drawing_write (const char    *path,
                    double         width,
                    double         height,
                    const char    *title,
                    ToolDrawFunc   draw,
                    gpointer       data,
                    GError       **error)
{
  gboolean svg = g_str_has_suffix (path, ".svg");
  cairo_surface_t *surface;
  cairo_status_t status;
  cairo_t *cr;

  surface = svg ? cairo_svg_surface_create (path, width, height)
                : cairo_image_surface_create (CAIRO_FORMAT_RGB24, (int) width, (int) height);
  cr = cairo_create (surface);
  cairo_set_source_rgb (cr, 1, 1, 1);
  cairo_paint (cr);
  cairo_select_font_face (cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_source_rgb (cr, 0, 0, 0);
  cairo_set_font_size (cr, 14);
  tool_drawing_text (cr, width / 2, 24, 0.5, title);
  draw (cr, data);
  cairo_destroy (cr);

  if (svg)
    {
      cairo_surface_finish (surface);
      status = cairo_surface_status (surface);
    }
  else
    status = cairo_surface_write_to_png (surface, path);
  cairo_surface_destroy (surface);

  if (status != CAIRO_STATUS_SUCCESS)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "%s: %s", path,
                   cairo_status_to_string (status));
      return FALSE;
    }
  return TRUE;
}
