/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <cairo.h>
#include <glib.h>

G_BEGIN_DECLS

/* What the plots of `kvtier bench --plot` and `kvtier bench --nodes --plot`
 * share: a page with a title, text placed by its alignment, round axis
 * steps, one palette, and the file written as SVG or PNG. */

typedef void (*ToolDrawFunc) (cairo_t  *cr,
                              gpointer  data);

void     tool_drawing_text      (cairo_t      *cr,
                                 double        x,
                                 double        y,
                                 double        align,
                                 const char   *s);
double   tool_drawing_nice_step (double        range,
                                 int           n_steps);
void     tool_drawing_set_color (cairo_t      *cr,
                                 guint         index);
gboolean tool_drawing_write     (const char   *path,
                                 double        width,
                                 double        height,
                                 const char   *title,
                                 ToolDrawFunc  draw,
                                 gpointer      data,
                                 GError      **error);

G_END_DECLS
