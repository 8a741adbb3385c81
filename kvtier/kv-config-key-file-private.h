/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-config-document-private.h"

G_BEGIN_DECLS

/* The text form: key-file syntax with line numbers in every error. */

G_GNUC_INTERNAL
gboolean  kv_config_key_file_load  (KvConfigDocument        *document,
                                    const char              *data,
                                    gsize                    length,
                                    GError                 **error);
G_GNUC_INTERNAL
char     *kv_config_key_file_write (const KvConfigDocument  *document,
                                    gsize                   *length);

G_END_DECLS
