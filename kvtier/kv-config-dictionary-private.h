/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-config-document-private.h"

G_BEGIN_DECLS

/* The dictionary form (a{sv}) that Python and JavaScript pass. */

G_GNUC_INTERNAL
gboolean  kv_config_dictionary_load  (KvConfigDocument        *document,
                                      GVariant                *variant,
                                      GError                 **error);
G_GNUC_INTERNAL
GVariant *kv_config_dictionary_write (const KvConfigDocument  *document);

G_END_DECLS
