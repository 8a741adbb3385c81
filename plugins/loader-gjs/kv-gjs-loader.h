/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

#define KV_TYPE_GJS_LOADER (kv_gjs_loader_get_type ())

G_DECLARE_FINAL_TYPE (KvGjsLoader, kv_gjs_loader, KV, GJS_LOADER, KvTierModuleLoader)

KvTierModuleLoader *kv_gjs_loader_get_default (void);

G_END_DECLS
