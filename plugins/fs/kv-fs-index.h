/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-fs-evictor.h"

G_BEGIN_DECLS

/*
 * KvFsIndex: what the tier holds, in memory. The owner thread asks it
 * (lookups, stores, pins for loads), I/O threads update it as files are
 * published or found bad, the warm-restart scan fills it. One lock guards
 * it; every call is O(1) per key except eviction, which walks the
 * eviction order past pinned entries.
 */
typedef struct _KvFsIndex KvFsIndex;

typedef enum {
  KV_FS_BEGIN_STORE_NEW,      /* reserved: write it */
  KV_FS_BEGIN_STORE_EXISTS,   /* stored or being stored: skip */
  KV_FS_BEGIN_STORE_BUSY,     /* being deleted: do not write now */
  KV_FS_BEGIN_STORE_NO_SPACE, /* over max-size and nothing can be evicted */
} KvFsBeginStore;

typedef enum {
  KV_FS_INDEX_ABSENT,
  KV_FS_INDEX_PRESENT,
  KV_FS_INDEX_BUSY,           /* storing or deleting */
} KvFsIndexState;

KvFsIndex      *kv_fs_index_new          (KvFsEviction   policy,
                                          guint64        max_size);
void            kv_fs_index_free         (KvFsIndex     *self);

KvFsIndexState  kv_fs_index_lookup       (KvFsIndex     *self,
                                          const KvKey   *key,
                                          gboolean       touch);
void            kv_fs_index_touch        (KvFsIndex     *self,
                                          KvKey * const *keys,
                                          guint          n_keys);

KvFsBeginStore  kv_fs_index_begin_store  (KvFsIndex     *self,
                                          KvKey         *key,
                                          KvKey         *parent_key,
                                          guint          root,
                                          guint64        size,
                                          gboolean       from_reserved,
                                          GPtrArray     *victims);
void            kv_fs_index_end_store    (KvFsIndex     *self,
                                          const KvKey   *key,
                                          gboolean       success);

KvFsEntry      *kv_fs_index_pin          (KvFsIndex     *self,
                                          const KvKey   *key);
void            kv_fs_index_unpin        (KvFsIndex     *self,
                                          KvFsEntry     *entry,
                                          gboolean       remove);
gboolean        kv_fs_index_remove       (KvFsIndex     *self,
                                          const KvKey   *key);

void            kv_fs_index_evict_bytes  (KvFsIndex     *self,
                                          guint64        bytes,
                                          GPtrArray     *victims);
void            kv_fs_index_trim         (KvFsIndex     *self,
                                          GPtrArray     *victims);
void            kv_fs_index_delete_done  (KvFsIndex     *self,
                                          KvFsEntry     *entry);

gboolean        kv_fs_index_add_scanned  (KvFsIndex     *self,
                                          KvKey         *key,
                                          guint          root,
                                          guint64        size);

gboolean        kv_fs_index_reserve      (KvFsIndex     *self,
                                          guint64        size);
void            kv_fs_index_release_reserved (KvFsIndex *self,
                                          guint64        size);
gboolean        kv_fs_index_is_full      (KvFsIndex     *self,
                                          guint64        size);

guint64         kv_fs_index_get_used     (KvFsIndex     *self);
guint64         kv_fs_index_get_max_size (KvFsIndex     *self);
guint           kv_fs_index_get_n_entries (KvFsIndex    *self);

G_END_DECLS
