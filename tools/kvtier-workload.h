/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kvtier-tool.h"

G_BEGIN_DECLS

/* The longest trace line read: a request of a million-token prompt lists
 * about 2000 block ids, a few dozen KiB. */
#define TOOL_TRACE_MAX_LINE_BYTES (1024 * 1024)

gboolean tool_workload_parse_trace_line (const char   *line,
                                         gsize         length,
                                         const char   *path,
                                         guint         line_number,
                                         ToolRequest  *request,
                                         GError      **error);

KvKey   *tool_workload_chunk_key        (guint64       id);

G_END_DECLS
