/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>
#include <sys/uio.h>

#include "kv-chunk-format.h"
#include "kv-fs-layout.h"

G_BEGIN_DECLS

/*
 * KvFsOp: one chunk-sized piece of work for an I/O engine (store one file,
 * load one file, delete one file, probe a root). The tier fills the
 * request part, an engine runs it on its own threads and fills the result
 * part, then calls @done exactly once, from an engine thread (or from the
 * thread that cancelled it).
 *
 * An op with KV_FS_OP_FLAG_AT_OFFSET only moves bytes: the layout that
 * made it (layout=slab) keeps its files open, encodes its records and
 * checks them, and hands the engine a vector of buffers to read or write
 * at an offset of one of its descriptors, with two hooks of its own.
 */

typedef enum {
  KV_FS_OP_LOAD,
  KV_FS_OP_STORE,
  KV_FS_OP_DELETE,
  KV_FS_OP_PROBE,
} KvFsOpKind;

typedef enum {
  KV_FS_OP_FLAG_O_DIRECT      = 1 << 0,
  KV_FS_OP_FLAG_DATASYNC      = 1 << 1, /* fdatasync() before rename */
  KV_FS_OP_FLAG_DIRSYNC       = 1 << 2, /* fsync() the directory after rename */
  KV_FS_OP_FLAG_SKIP_EXISTING = 1 << 3, /* store: succeed without writing if the file exists */
  KV_FS_OP_FLAG_VERIFY        = 1 << 4, /* load: check the payload checksum */
  KV_FS_OP_FLAG_HEADER        = 1 << 5, /* the file has a KV_CHUNK_HEADER_SIZE header */
  /* store: @reuse_path is no chunk's name (a spare file): overwrite it
   * where it is and publish it with one rename, without first renaming
   * it to a temporary name; a crash leaves it a spare, whose bytes
   * nobody reads */
  KV_FS_OP_FLAG_REUSE_IN_PLACE = 1 << 6,
  /* read or write @io_vec at @io_offset of @io_fd, a descriptor the
   * layout holds open: no file opened, created or renamed; the layout's
   * hooks prepare and check the bytes (see KvFsSlab) */
  KV_FS_OP_FLAG_AT_OFFSET     = 1 << 7,
  /* vLLM's file checksum (KV_FS_VLLM_CRC32C_XATTR, headerless files):
   * store: set it on the temporary file before the rename; load: check
   * it where the file has one (with VERIFY) */
  KV_FS_OP_FLAG_FILE_CRC32C   = 1 << 8,
} KvFsOpFlags;

typedef enum {
  KV_FS_OP_STATUS_PENDING,
  KV_FS_OP_STATUS_OK,
  KV_FS_OP_STATUS_EXISTS,     /* store skipped: the file was there */
  KV_FS_OP_STATUS_NOT_FOUND,  /* load: no such file */
  KV_FS_OP_STATUS_CORRUPT,    /* load: failed its check; the file was deleted */
  KV_FS_OP_STATUS_IO_ERROR,   /* errno in @error; files kept */
  KV_FS_OP_STATUS_CANCELLED,  /* never started */
  KV_FS_OP_STATUS_FOREIGN,    /* load: the file is not the tier's user's (or
                               * not a regular file, or writable by others):
                               * not read, not deleted */
} KvFsOpStatus;

typedef struct _KvFsOp KvFsOp;

typedef void (*KvFsOpDoneFunc) (KvFsOp   *op,
                                gpointer  user_data);

/* What an engine does once an AT_OFFSET op's bytes moved. */
typedef enum {
  KV_FS_OP_IO_DONE,    /* the op is over: op->status is set */
  KV_FS_OP_IO_AGAIN,   /* move @io_vec again (the hook changed it) */
} KvFsOpIoNext;

/* AT_OFFSET hooks, called on an engine thread (never the tier's), with
 * no engine lock held. @prepare runs once before the first write and may
 * read the whole payload (a checksum); @complete runs after each whole
 * transfer (and its fdatasync with DATASYNC), sets op->status and says
 * whether the vector moves again. An I/O error ends the op as IO_ERROR
 * without calling @complete. */
typedef void         (*KvFsOpPrepareFunc)  (KvFsOp *op);
typedef void         (*KvFsOpCopyFunc)     (KvFsOp *op);
typedef KvFsOpIoNext (*KvFsOpCompleteFunc) (KvFsOp *op);

/* The most buffers of one AT_OFFSET op: a record's header and payload,
 * or those of 8 adjacent records read at once (see KvFsSlab). */
#define KV_FS_OP_MAX_VEC 16

struct _KvFsOp
{
  /* request, set by the tier */
  KvFsOpKind      kind;
  KvFsOpFlags     flags;
  guint           root;          /* index of the per-root in-flight budget */
  char           *path;          /* final file (owned) */
  char           *reuse_path;    /* store: an evicted chunk's file to take over
                                  * instead of creating one (owned, nullable) */
  KvKey          *key;           /* (nullable) owned; checked against the header */
  guint8         *payload;       /* primary slot, or NULL */
  gsize           payload_len;
  guint32         slot;          /* slot index of @payload, G_MAXUINT32 if none */
  /* store: the payload's kv_chunk_checksum() carried with its slot, used
   * instead of reading the payload; load: set from a header the payload
   * was verified against, for the slot to carry */
  guint64         payload_checksum;
  gboolean        has_payload_checksum;
  /* load: the payload's kv_chunk_checksum(), computed by an io_copy hook
   * as the bytes moved, so that the check reads none of them again */
  guint64         copied_checksum;
  gboolean        has_copied_checksum;
  /* FILE_CRC32C: store: the file's CRC32C, computed with the header;
   * load: the file's attribute, when it has one (or a malformed one) */
  guint32         file_crc32c;
  gboolean        has_file_crc32c;
  gboolean        bad_file_crc32c;
  const guint8   *namespace_digest;
  guint64         temp_tag;      /* names the writer in temporary names */
  KvFsOpDoneFunc  done;
  gpointer        done_data;

  gint            aborted;       /* (atomic) store: do not publish (deadline passed) */

  /* KV_FS_OP_FLAG_AT_OFFSET: the bytes to move, set by the layout */
  int                 io_fd;       /* borrowed: open for the op's life */
  guint64             io_offset;
  gboolean            io_write;
  struct iovec        io_vec[KV_FS_OP_MAX_VEC];
  guint               io_n_vec;
  /* (nullable): the bytes at @io_offset in the layout's shared mapping
   * of @io_fd (a memory-backed root): they are copied by @io_copy, not
   * read or written, and not synced */
  guint8             *io_map;
  KvFsOpCopyFunc      io_copy;     /* a mapped op's copy (set with @io_map): the
                                    * layout's, which lays out and checks its
                                    * record as it moves */
  KvFsOpPrepareFunc   io_prepare;  /* (nullable) */
  KvFsOpCompleteFunc  io_complete; /* (nullable): without, a whole transfer is OK */

  /* the layout's own, which no engine reads (see KvFsSlab) */
  guint32         slab_slot;     /* the slot's number across the tier's slabs */
  guint64         sequence;      /* store: the slot header's sequence number */
  gpointer        layout_data;

  /* result, set by the engine */
  KvFsOpStatus    status;
  int             error;         /* errno for IO_ERROR (and NOT_FOUND) */
  KvChunkCheck       check;         /* why a load was CORRUPT */
  gint64          start_us;      /* monotonic */
  gint64          end_us;

  /* engine bookkeeping */
  GList           queue_link;    /* in an engine queue while not started */
  gint            queued;        /* TRUE while in a queue (engine lock) */
  gsize           cost;          /* bytes charged to the root's budget */
  char           *tmp_path;      /* store: temporary file */
  gboolean        reused;        /* store: tmp_path is the taken-over file */
  guint8         *header;        /* a KV_CHUNK_HEADER_SIZE buffer from the engine */
  int             fd;
  int             state;
  int             n_pending;     /* engine-defined: outstanding sub-requests */
  gssize          got_header;
  gssize          got_payload;
  gpointer        engine_data;

  /* directories, set by kv_fs_op_open_dirs(): every file operation is
   * made relative to them */
  KvFsRootDirs   *dirs;          /* the root's, held while the op runs */
  int             dir_fd;        /* the directory of @path */
  int             tmp_dir_fd;    /* of @tmp_path: @dir_fd or @reuse_dir_fd */
  int             reuse_dir_fd;  /* of @reuse_path */
  gboolean        own_dir_fd;
  gboolean        own_reuse_dir_fd;
  const char     *name;          /* the file name in @path */
  const char     *tmp_name;      /* in @tmp_path */
  const char     *reuse_name;    /* in @reuse_path */
};

void        kv_fs_op_init           (KvFsOp       *op,
                                     KvFsOpKind    kind,
                                     KvFsOpFlags   flags,
                                     guint         root,
                                     char         *path,
                                     KvKey        *key);
void        kv_fs_op_clear          (KvFsOp       *op);

/* Whether kv_fs_op_init() set @op up and kv_fs_op_clear() has not run
 * since (a job's ops start zeroed; a slab op has a key but no path, a
 * probe a path but no key). */
static inline gboolean
kv_fs_op_is_set_up (const KvFsOp *op)
{
  return op->key != NULL || op->path != NULL;
}

gsize       kv_fs_op_file_size      (const KvFsOp *op);
const char *kv_fs_op_status_to_string (KvFsOpStatus status);

/* Shared by the engines: the work that does not depend on how the bytes
 * move. */
void        kv_fs_op_prepare_header (KvFsOp       *op);
void        kv_fs_op_check_load     (KvFsOp       *op);
void        kv_fs_op_run_at_offset  (KvFsOp       *op);
int         kv_fs_op_write_file_checksum (KvFsOp *op,
                                          int     fd);
int         kv_fs_op_read_file_checksum  (KvFsOp *op,
                                          int     fd);
int         kv_fs_op_open_dirs      (KvFsOp           *op,
                                     const KvFsLayout *layout);
int         kv_fs_op_reopen_dirs    (KvFsOp           *op,
                                     const KvFsLayout *layout);
void        kv_fs_op_close_dirs     (KvFsOp       *op);
gboolean    kv_fs_op_trusts_file    (const KvFsOp     *op,
                                     const KvFsLayout *layout,
                                     int               fd);
char       *kv_fs_temp_path         (const char   *final_path,
                                     guint64       tag);
void        kv_fs_op_make_temp      (KvFsOp       *op);
int         kv_fs_op_open_flags     (const KvFsOp *op,
                                     gboolean      for_write);
int         kv_fs_op_take_over      (KvFsOp       *op);
gboolean    kv_fs_op_reuse_in_place (KvFsOp       *op);
int         kv_fs_op_fit_taken_over (KvFsOp       *op,
                                     int           fd);
void        kv_fs_op_give_up_reuse  (KvFsOp       *op);
gboolean    kv_fs_op_is_aligned     (const KvFsOp *op);

G_END_DECLS
