/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <libsoup/soup.h>

G_BEGIN_DECLS

/* A plain struct, not a GObject type: the kvtier command's own HTTP
 * front, shared by `kvtier serve` and `kvtier route` (see the .c). */
typedef struct _ToolHttpServer ToolHttpServer;

ToolHttpServer *tool_http_server_new                 (const char      *name,
                                                      const char      *address,
                                                      const char      *server_header,
                                                      guint            max_connections,
                                                      guint            timeout_ms,
                                                      GError         **error);
SoupServer     *tool_http_server_get_soup            (ToolHttpServer  *self);
const char     *tool_http_server_get_address         (ToolHttpServer  *self);
guint           tool_http_server_get_max_connections (ToolHttpServer  *self);
guint           tool_http_server_get_n_connections   (ToolHttpServer  *self);
void            tool_http_server_free                (ToolHttpServer  *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (ToolHttpServer, tool_http_server_free)

G_END_DECLS
