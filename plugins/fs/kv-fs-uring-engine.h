/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-fs-engine.h"

G_BEGIN_DECLS

#define KV_TYPE_FS_URING_ENGINE (kv_fs_uring_engine_get_type ())

G_DECLARE_FINAL_TYPE (KvFsUringEngine, kv_fs_uring_engine, KV, FS_URING_ENGINE, KvFsEngine)

gboolean kv_fs_uring_engine_uses_fixed_buffers (KvFsUringEngine *self);

G_END_DECLS
