/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-fs-engine.h"

G_BEGIN_DECLS

#define KV_TYPE_FS_GIO_ENGINE (kv_fs_gio_engine_get_type ())

G_DECLARE_FINAL_TYPE (KvFsGioEngine, kv_fs_gio_engine, KV, FS_GIO_ENGINE, KvFsEngine)

G_END_DECLS
