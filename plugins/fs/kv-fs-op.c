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
  g_clear_pointer (&op->reuse_path, g_free);
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

/*
 * Taking over an evicted chunk's file. A full cache evicts one chunk for
 * every chunk it stores; instead of unlinking the victim and creating a
 * new file (an inode and a block allocation, journal updates and, with
 * `discard`, a trim each time), a store renames the victim's file to its
 * own temporary name and overwrites the blocks already allocated, which
 * on ext4 runs as fast as writes to a preallocated file. The temporary
 * name keeps it crash-safe: until the final rename the file is a
 * temporary file, removed by the next warm-restart scan, never served.
 */

/* Makes a taken-over file exactly as long as the new chunk: a longer one
 * (a victim of another size) would keep the old tail. A shorter one grows
 * with the writes. Returns 0 or an errno. */
int
kv_fs_op_fit_taken_over (KvFsOp *op,
                         int     fd)
{
  struct stat st;
  gsize size = kv_fs_op_file_size (op);

  if (fstat (fd, &st) != 0)
    return errno;
  if ((guint64) st.st_size > size && ftruncate (fd, size) != 0)
    return errno;
  return 0;
}

/* The victim's file could not be taken over: removes it (it must not
 * outlive its index entry) so that the store creates a new file. */
void
kv_fs_op_give_up_reuse (KvFsOp *op)
{
  if (op->reuse_path == NULL)
    return;
  (void) g_unlink (op->reuse_path);
  g_clear_pointer (&op->reuse_path, g_free);
}

/* With KV_FS_OP_FLAG_REUSE_IN_PLACE, makes op->reuse_path the file the
 * store writes (op->tmp_path), with no rename: it is already out of
 * every chunk's name. Returns FALSE, changing nothing, otherwise. */
gboolean
kv_fs_op_reuse_in_place (KvFsOp *op)
{
  if (op->reuse_path == NULL || !(op->flags & KV_FS_OP_FLAG_REUSE_IN_PLACE))
    return FALSE;
  g_free (op->tmp_path);
  op->tmp_path = g_steal_pointer (&op->reuse_path);
  op->reused = TRUE;
  return TRUE;
}

/* Blocking: takes over op->reuse_path as op->tmp_path (making the
 * directory of the temporary name if needed: vLLM's layout makes its
 * directories on first use; a spare file is written where it is, see
 * kv_fs_op_reuse_in_place()) and opens it for writing. Returns the
 * descriptor, or -1 when there was nothing to take over or it failed
 * (the file is then gone and op->tmp_path a new temporary name: create
 * a new file). */
int
kv_fs_op_take_over (KvFsOp *op)
{
  int flags = kv_fs_op_open_flags (op, TRUE) & ~(O_CREAT | O_EXCL);
  gboolean in_place;
  int fd;

  if (op->reuse_path == NULL)
    return -1;
  in_place = kv_fs_op_reuse_in_place (op);
  if (!in_place &&
      rename (op->reuse_path, op->tmp_path) != 0 &&
      (errno != ENOENT || kv_fs_op_ensure_parent (op->tmp_path) != 0 ||
       rename (op->reuse_path, op->tmp_path) != 0))
    {
      kv_fs_op_give_up_reuse (op);
      return -1;
    }
  g_clear_pointer (&op->reuse_path, g_free);
  do
    {
      fd = open (op->tmp_path, flags);
      if (fd < 0 && errno == EINVAL && (flags & O_DIRECT))
        flags &= ~O_DIRECT;
      else if (fd < 0 && errno != EINTR)
        break;
    }
  while (fd < 0);
  if (fd >= 0 && kv_fs_op_fit_taken_over (op, fd) != 0)
    {
      close (fd);
      fd = -1;
    }
  if (fd < 0)
    {
      (void) g_unlink (op->tmp_path);
      op->reused = FALSE;
      if (in_place)
        kv_fs_op_make_temp (op);
      return -1;
    }
  op->reused = TRUE;
  return fd;
}
