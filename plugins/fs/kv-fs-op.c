/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-op.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>

void
kv_fs_op_init (KvFsOp      *op,
               KvFsOpKind   kind,
               KvFsOpFlags  flags,
               guint        root,
               char        *path,
               KvKey       *key)
{
  memset (op, 0, sizeof *op);
  op->kind = kind;
  op->flags = flags;
  op->root = root;
  op->path = path;
  op->key = key;
  op->slot = G_MAXUINT32;
  op->fd = -1;
  op->status = KV_FS_OP_STATUS_PENDING;
  op->queue_link.data = op;
}

void
kv_fs_op_clear (KvFsOp *op)
{
  g_clear_pointer (&op->path, g_free);
  g_clear_pointer (&op->tmp_path, g_free);
  g_clear_pointer (&op->key, kv_key_unref);
}

gsize
kv_fs_op_file_size (const KvFsOp *op)
{
  return op->payload_len + ((op->flags & KV_FS_OP_FLAG_HEADER) ? KV_FS_HEADER_SIZE : 0);
}

const char *
kv_fs_op_status_to_string (KvFsOpStatus status)
{
  switch (status)
    {
    case KV_FS_OP_STATUS_PENDING: return "pending";
    case KV_FS_OP_STATUS_OK: return "ok";
    case KV_FS_OP_STATUS_EXISTS: return "exists";
    case KV_FS_OP_STATUS_NOT_FOUND: return "not found";
    case KV_FS_OP_STATUS_CORRUPT: return "corrupt";
    case KV_FS_OP_STATUS_IO_ERROR: return "I/O error";
    case KV_FS_OP_STATUS_CANCELLED: return "cancelled";
    default: return "unknown";
    }
}

/* Fills op->header for a store (reads the whole payload for its
 * checksum); a no-op for headerless files. */
void
kv_fs_op_prepare_header (KvFsOp *op)
{
  if (op->kind == KV_FS_OP_PROBE)
    {
      memset (op->header, 0, KV_FS_HEADER_SIZE);
      memcpy (op->header, "KVTIERFS-PROBE", 14);
      return;
    }
  if (!(op->flags & KV_FS_OP_FLAG_HEADER))
    return;
  kv_fs_header_encode (op->header, op->namespace_digest, op->key,
                       op->payload, op->payload_len, g_get_real_time ());
}

/* Sets op->status to OK or CORRUPT from what a load read
 * (op->got_header, op->got_payload). */
void
kv_fs_op_check_load (KvFsOp *op)
{
  gboolean has_header = (op->flags & KV_FS_OP_FLAG_HEADER) != 0;

  op->check = kv_fs_chunk_check (has_header ? op->header : NULL,
                                 MAX (op->got_header, 0),
                                 op->payload, op->payload_len, MAX (op->got_payload, 0),
                                 op->namespace_digest, op->key,
                                 (op->flags & KV_FS_OP_FLAG_VERIFY) != 0);
  op->status = op->check == KV_FS_CHECK_OK ? KV_FS_OP_STATUS_OK : KV_FS_OP_STATUS_CORRUPT;
}

/* Creates the directories above @path (0700). Returns 0 or an errno. */
int
kv_fs_op_ensure_parent (const char *path)
{
  g_autofree char *dir = g_path_get_dirname (path);

  if (g_mkdir_with_parents (dir, 0700) != 0)
    return errno != 0 ? errno : EIO;
  return 0;
}

/* A temporary name next to @final_path, unique across threads and
 * processes: a chunk is published only by rename(), so a crash leaves at
 * most a stale temporary file, which the next scan removes. vLLM's
 * writers use a "_<random>.tmp" suffix; kvtier's "_<tag>-<random>.tmp"
 * also names the tier instance (@tag), so that its own warm-restart scan
 * never removes a file the instance is writing. */
char *
kv_fs_temp_path (const char *final_path,
                 guint64     tag)
{
  return g_strdup_printf ("%s_%016" G_GINT64_MODIFIER "x-%08x.tmp", final_path, tag,
                          g_random_int ());
}

void
kv_fs_op_make_temp (KvFsOp *op)
{
  g_free (op->tmp_path);
  op->tmp_path = kv_fs_temp_path (op->path, op->temp_tag);
}

/* The payload must be page aligned in memory and length for O_DIRECT;
 * an operation that is not falls back to buffered I/O. */
gboolean
kv_fs_op_is_aligned (const KvFsOp *op)
{
  return ((guintptr) op->payload % 4096) == 0 && (op->payload_len % 4096) == 0;
}

int
kv_fs_op_open_flags (const KvFsOp *op,
                     gboolean      for_write)
{
  int flags = O_CLOEXEC | O_NOFOLLOW;

  if (for_write)
    flags |= O_WRONLY | O_CREAT | O_EXCL;
  else
    flags |= O_RDONLY;
  if ((op->flags & KV_FS_OP_FLAG_O_DIRECT) && kv_fs_op_is_aligned (op))
    flags |= O_DIRECT;
  return flags;
}
