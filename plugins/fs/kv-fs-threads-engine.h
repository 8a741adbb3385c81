/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-fs-engine.h"

G_BEGIN_DECLS

#define KV_TYPE_FS_THREADS_ENGINE (kv_fs_threads_engine_get_type ())

G_DECLARE_FINAL_TYPE (KvFsThreadsEngine, kv_fs_threads_engine, KV, FS_THREADS_ENGINE, KvFsEngine)

void kv_fs_op_run_sync (KvFsEngine *engine,
                        KvFsOp     *op,
                        guint8     *header_buffer);

G_END_DECLS
