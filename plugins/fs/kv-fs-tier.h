/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-fs-engine.h"
#include "kv-fs-enums.h"
#include "kv-fs-types.h"

G_BEGIN_DECLS

#define KV_TYPE_FS_TIER (kv_fs_tier_get_type ())

G_DECLARE_FINAL_TYPE (KvFsTier, kv_fs_tier, KV, FS_TIER, KvSecondaryTier)

KvFsTier   *kv_fs_tier_new                 (KvHostBuffer *primary,
                                            const char   *root,
                                            GError      **error);

guint64     kv_fs_tier_get_counter         (KvFsTier     *self,
                                            KvFsCounter   counter);
guint64     kv_fs_tier_get_used_bytes      (KvFsTier     *self);
guint       kv_fs_tier_get_n_chunks        (KvFsTier     *self);
char       *kv_fs_tier_get_chunk_path      (KvFsTier     *self,
                                            KvKey        *key);
gboolean    kv_fs_tier_get_o_direct        (KvFsTier     *self,
                                            guint         root);
gboolean    kv_fs_tier_is_breaker_open     (KvFsTier     *self);
gboolean    kv_fs_tier_is_index_ready      (KvFsTier     *self);
void        kv_fs_tier_wait_index_ready    (KvFsTier     *self);
guint       kv_fs_tier_get_n_spare_files   (KvFsTier     *self);
void        kv_fs_tier_wait_preallocated   (KvFsTier     *self);
gboolean    kv_fs_tier_get_slab_location   (KvFsTier     *self,
                                            KvKey        *key,
                                            char        **out_path,
                                            guint64      *out_offset);

/* Test hooks: the tier's I/O engine (stall and error injection); holding
 * warm-restart scans at their start (process-wide). */
void        kv_fs_tier_hold_scans          (gboolean      hold);
void        kv_fs_tier_hold_slab_scans_read (gboolean     hold);
KvFsEngine *kv_fs_tier_get_engine          (KvFsTier     *self);

G_END_DECLS
