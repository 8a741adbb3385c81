/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

#define KV_TYPE_PYTHON_LOADER (kv_python_loader_get_type ())

G_DECLARE_FINAL_TYPE (KvPythonLoader, kv_python_loader, KV, PYTHON_LOADER, KvTierModuleLoader)

KvTierModuleLoader *kv_python_loader_get_default (void);

G_END_DECLS
