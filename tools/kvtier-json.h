/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* json-glib parses recursively: a document nested deep enough overflows
 * the stack. Every JSON text the tools read from files is checked against
 * this depth first. */
#define TOOL_JSON_MAX_DEPTH 64

gboolean  tool_json_check_depth (const char  *text,
                                 gsize        length,
                                 guint        max_depth,
                                 GError     **error);
JsonNode *tool_json_parse       (const char  *text,
                                 gsize        length,
                                 gsize        max_length,
                                 GError     **error);

G_END_DECLS
