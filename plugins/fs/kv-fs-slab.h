/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-fs-index.h"
#include "kv-fs-layout.h"
#include "kv-fs-op.h"

G_BEGIN_DECLS

/*
 * KvFsSlab: the slab files of a layout=slab tier and their slots.
 *
 * Each root holds a few slab files (`slab-NNNN.kvslab` in the namespace's
 * `kvslab-<ns16>` directory), preallocated with fallocate() when made:
 * a 4096-byte file header, then fixed-size slots, each one chunk record
 * (the 4096-byte header, with a sequence number, and the payload). The
 * tier's KvFsIndex says which keys it holds and which go first; this
 * says where each one is: key → slot, the free slots, and how many loads
 * read each slot, so that a slot is never written while one is read.
 *
 * A store takes a free slot (or the slot of the chunk it evicts) and
 * writes header and payload there; nothing is renamed, so crash safety
 * is in the slot itself: it is valid only when its header checksum, its
 * namespace and length, and its payload checksum all match, and of two
 * valid copies of a key the higher sequence number wins. Loads therefore
 * always check the payload checksum (a torn slot has a valid header of
 * either the old or the new chunk). See doc/on-disk-format.md.
 *
 * The slab encodes and checks its own records: an op it makes
 * (kv_fs_slab_init_op()) is a transfer of header and payload at the
 * slot's offset of a slab file held open (KV_FS_OP_FLAG_AT_OFFSET), with
 * the slab's hooks to encode the header and to check what was read, so
 * that the engines only move bytes; loads of adjacent slots move in one
 * transfer (kv_fs_slab_merge_loads()). Every function but
 * kv_fs_slab_init_record() takes the slab's lock; any thread.
 */
typedef struct _KvFsSlab KvFsSlab;

/* The slab files' name in a namespace directory: slab-0000.kvslab... */
#define KV_FS_SLAB_FILE_FORMAT "slab-%04u.kvslab"
#define KV_FS_SLAB_DEFAULT_SIZE (G_GUINT64_CONSTANT (1) << 30)

/* Called by kv_fs_slab_scan() once it has read every slot (tests). */
typedef void (*KvFsSlabScanHook) (gpointer data);

KvFsSlab   *kv_fs_slab_new              (const KvFsLayout *layout,
                                         guint64           capacity,
                                         guint64           slab_size,
                                         const gboolean   *o_direct,
                                         gboolean          map_memory_backed,
                                         GError          **error);
void        kv_fs_slab_free             (KvFsSlab         *self);

guint32     kv_fs_slab_get_n_slots      (KvFsSlab         *self);
guint       kv_fs_slab_get_n_files      (KvFsSlab         *self);
gboolean    kv_fs_slab_is_mapped        (KvFsSlab         *self);
guint32     kv_fs_slab_get_n_free       (KvFsSlab         *self);
gboolean    kv_fs_slab_needs_scan       (KvFsSlab         *self);

gboolean    kv_fs_slab_alloc            (KvFsSlab         *self,
                                         const KvKey      *victim,
                                         guint32          *out_slot);
void        kv_fs_slab_init_probe       (KvFsSlab         *self,
                                         KvFsOp           *op,
                                         guint             root);
void        kv_fs_slab_init_op          (KvFsSlab         *self,
                                         KvFsOp           *op,
                                         guint32           slot);
void        kv_fs_slab_probe_done       (KvFsSlab         *self,
                                         KvFsOp           *op);
void        kv_fs_slab_store_done       (KvFsSlab         *self,
                                         KvFsOp           *op,
                                         gboolean          success);
void        kv_fs_slab_release          (KvFsSlab         *self,
                                         guint32           slot);
gboolean    kv_fs_slab_pin              (KvFsSlab         *self,
                                         const KvKey      *key,
                                         guint32          *out_slot);
void        kv_fs_slab_unpin            (KvFsSlab         *self,
                                         KvFsOp           *op,
                                         gboolean          loaded,
                                         gboolean          drop);
guint       kv_fs_slab_merge_loads      (KvFsSlab         *self,
                                         KvFsOp          **ops,
                                         guint             n_ops);
gboolean    kv_fs_slab_take_unchecked   (KvFsSlab         *self,
                                         const KvKey      *key);
char       *kv_fs_slab_describe_op      (KvFsSlab         *self,
                                         const KvFsOp     *op);
gboolean    kv_fs_slab_locate           (KvFsSlab         *self,
                                         const KvKey      *key,
                                         char            **out_path,
                                         guint64          *out_offset);

guint64     kv_fs_slab_scan             (KvFsSlab         *self,
                                         KvFsIndex        *index,
                                         const gint       *cancel,
                                         KvFsSlabScanHook  read_done,
                                         gpointer          read_done_data,
                                         guint64          *out_n_bad);
gboolean    kv_fs_slab_take_scanned     (KvFsSlab         *self,
                                         guint32          *out_slot);

/* No slab needed: a slot record at an offset of a descriptor, or a
 * store into a record mapped at @map (tests). */
void        kv_fs_slab_init_record      (KvFsOp           *op,
                                         guint8           *header,
                                         int               fd,
                                         guint64           offset);
void        kv_fs_slab_init_mapped_store (KvFsOp          *op,
                                          guint8          *map,
                                          int              fd,
                                          guint64          offset);

G_END_DECLS
