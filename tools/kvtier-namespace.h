/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* namespace.json of the fs tier's kvtier layout (doc/on-disk-format.md). */
#define TOOL_NAMESPACE_FORMAT_VERSION 1
#define TOOL_NAMESPACE_HEADER_SIZE    4096
/* The file is a few lines; anything longer was not written by the tier. */
#define TOOL_NAMESPACE_JSON_MAX_BYTES (64 * 1024)
/* Chunks are primary slots: whole pages, and far from this. */
#define TOOL_NAMESPACE_MAX_BLOCK_SIZE (G_GUINT64_CONSTANT (1) << 40)

gboolean tool_namespace_parse  (const char  *data,
                                gsize        length,
                                const char  *file,
                                char       **out_name,
                                guint64     *out_block_size,
                                GError     **error);
void     tool_namespace_digest (const char  *name,
                                guint64      block_size,
                                guint8       digest[32]);

G_END_DECLS
