/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/**
 * S3SignFunc:
 * @method: "PUT", "GET" or "HEAD"
 * @path: the request's path, bucket included
 * @put: whether the request carries a body
 * @user_data: the data given with the function
 *
 * Returns: (transfer full): the request's signed header lines, each
 *   ending in "\r\n", without the request line and the final empty line
 */
typedef char *(*S3SignFunc) (const char *method,
                             const char *path,
                             gboolean    put,
                             gpointer    user_data);

gboolean s3_own_framing_pass (const char  *host,
                              guint16      port,
                              guint        n_connections,
                              S3SignFunc   sign,
                              gpointer     sign_data,
                              const char  *path_prefix,
                              const char  *method,
                              guint64      n_objects,
                              gsize        object_size,
                              gint         timeout_ms,
                              double      *seconds,
                              double      *cpu_seconds,
                              GError     **error);

G_END_DECLS
