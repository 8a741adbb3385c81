/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-config-document-private.h"

G_BEGIN_DECLS

/* Objects from a document: what kv_config_create_*() build, and what
 * kv_config_check() constructs without starting. */

G_GNUC_INTERNAL
KvBackpressureDetector *kv_config_build_detector (const KvConfigSection   *section,
                                                  GError                 **error);
G_GNUC_INTERNAL
KvPrimaryTier          *kv_config_build_primary  (const KvConfigDocument  *document,
                                                  GError                 **error);
G_GNUC_INTERNAL
KvTieringManager       *kv_config_build_manager  (const KvConfigDocument  *document,
                                                  GError                 **error);
G_GNUC_INTERNAL
KvDevice               *kv_config_build_device   (const KvConfigDocument  *document,
                                                  KvHostBuffer            *primary,
                                                  GError                 **error);
G_GNUC_INTERNAL
gboolean                kv_config_build_check    (const KvConfigDocument  *document,
                                                  GError                 **error);

G_END_DECLS
