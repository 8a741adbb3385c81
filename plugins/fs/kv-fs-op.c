/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-op.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "kv-fs-crc32c.h"
#include "kv-fs-io.h"

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
  op->io_fd = -1;
  op->dir_fd = -1;
  op->tmp_dir_fd = -1;
  op->reuse_dir_fd = -1;
  op->status = KV_FS_OP_STATUS_PENDING;
  op->queue_link.data = op;
}

void
kv_fs_op_clear (KvFsOp *op)
{
  kv_fs_op_close_dirs (op);
  g_clear_pointer (&op->path, g_free);
  g_clear_pointer (&op->reuse_path, g_free);
  g_clear_pointer (&op->tmp_path, g_free);
  g_clear_pointer (&op->key, kv_key_unref);
}

gsize
kv_fs_op_file_size (const KvFsOp *op)
{
  if (op->flags & KV_FS_OP_FLAG_AT_OFFSET)
    return kv_fs_io_vec_length (op->io_vec, op->io_n_vec);
  return op->payload_len + ((op->flags & KV_FS_OP_FLAG_HEADER) ? KV_CHUNK_HEADER_SIZE : 0);
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
    case KV_FS_OP_STATUS_FOREIGN: return "not the tier's file";
    default: return "unknown";
    }
}

/* Fills op->header for a store (reads the whole payload for its
 * checksum, unless the slot carried it); a no-op for headerless files. */
void
kv_fs_op_prepare_header (KvFsOp *op)
{
  if (op->kind == KV_FS_OP_PROBE)
    {
      memset (op->header, 0, KV_CHUNK_HEADER_SIZE);
      memcpy (op->header, "KVTIERFS-PROBE", 14);
      return;
    }
  if (op->kind == KV_FS_OP_STORE && (op->flags & KV_FS_OP_FLAG_FILE_CRC32C))
    {
      op->file_crc32c = kv_fs_crc32c (op->payload, op->payload_len);
      op->has_file_crc32c = TRUE;
    }
  if (!(op->flags & KV_FS_OP_FLAG_HEADER))
    return;
  if (op->has_payload_checksum)
    kv_chunk_header_encode_with_checksum (op->header, op->namespace_digest, op->key,
                                          op->payload_len, op->payload_checksum,
                                          g_get_real_time ());
  else
    kv_chunk_header_encode (op->header, op->namespace_digest, op->key,
                            op->payload, op->payload_len, g_get_real_time ());
}

/* Sets op->status to OK or CORRUPT from what a load read
 * (op->got_header, op->got_payload). */
void
kv_fs_op_check_load (KvFsOp *op)
{
  gboolean has_header = (op->flags & KV_FS_OP_FLAG_HEADER) != 0;

  if (op->has_copied_checksum && has_header && op->got_header >= KV_CHUNK_HEADER_SIZE &&
      op->got_payload >= (gssize) op->payload_len)
    op->check = kv_chunk_check_copied (op->header, op->payload_len, op->copied_checksum,
                                       op->namespace_digest, op->key,
                                       (op->flags & KV_FS_OP_FLAG_VERIFY) != 0);
  else
    op->check = kv_chunk_check (has_header ? op->header : NULL,
                                MAX (op->got_header, 0),
                                op->payload, op->payload_len, MAX (op->got_payload, 0),
                                op->namespace_digest, op->key,
                                (op->flags & KV_FS_OP_FLAG_VERIFY) != 0);
  op->status = op->check == KV_CHUNK_CHECK_OK ? KV_FS_OP_STATUS_OK : KV_FS_OP_STATUS_CORRUPT;
  /* vLLM's file checksum, where the file has one: a mismatch, or an
   * attribute that is not 4 bytes, is a damaged file (vLLM deletes it
   * too); none is a file written without it, accepted */
  if (op->status == KV_FS_OP_STATUS_OK && (op->flags & KV_FS_OP_FLAG_FILE_CRC32C) &&
      (op->flags & KV_FS_OP_FLAG_VERIFY) &&
      (op->bad_file_crc32c ||
       (op->has_file_crc32c && kv_fs_crc32c (op->payload, op->payload_len) != op->file_crc32c)))
    {
      op->check = KV_CHUNK_CHECK_BAD_FILE_CHECKSUM;
      op->status = KV_FS_OP_STATUS_CORRUPT;
    }
  /* the payload matched its header's checksum: the slot can carry it */
  if (op->status == KV_FS_OP_STATUS_OK && has_header && (op->flags & KV_FS_OP_FLAG_VERIFY))
    {
      guint64 le;

      memcpy (&le, op->header + KV_CHUNK_OFF_PAYLOAD_XXH3, sizeof le);
      op->payload_checksum = GUINT64_FROM_LE (le);
      op->has_payload_checksum = TRUE;
    }
}

/* Runs an AT_OFFSET op to completion on the calling thread (the
 * thread-pool and GIO engines, and the io_uring engine's pool for a
 * mapped op): the layout's prepare hook, the vector moved whole (a read
 * that meets end of file is EIO: the layout's records lie inside its
 * files) or, where the op has a mapping, the layout's copy hook;
 * fdatasync() with DATASYNC (not for a mapping: its pages are memory),
 * then the layout's complete hook, as long as it asks for another
 * transfer. */
void
kv_fs_op_run_at_offset (KvFsOp *op)
{
  g_return_if_fail (op->flags & KV_FS_OP_FLAG_AT_OFFSET);

  if (op->io_prepare != NULL)
    op->io_prepare (op);
  for (;;)
    {
      int err;

      if (op->io_map != NULL)
        {
          g_assert (op->io_copy != NULL);
          op->io_copy (op);
          err = 0;
        }
      else if (op->io_write)
        err = kv_fs_io_pwritev_full (op->io_fd, op->io_vec, op->io_n_vec, op->io_offset);
      else
        {
          gssize got = kv_fs_io_preadv_full (op->io_fd, op->io_vec, op->io_n_vec,
                                             op->io_offset);

          err = got < 0 ? (int) -got :
                (gsize) got < kv_fs_io_vec_length (op->io_vec, op->io_n_vec) ? EIO : 0;
        }
      if (err == 0 && op->io_write && op->io_map == NULL &&
          (op->flags & KV_FS_OP_FLAG_DATASYNC) && fdatasync (op->io_fd) != 0)
        err = errno;
      if (err != 0)
        {
          op->status = KV_FS_OP_STATUS_IO_ERROR;
          op->error = err;
          return;
        }
      if (op->io_complete == NULL)
        {
          op->status = KV_FS_OP_STATUS_OK;
          return;
        }
      if (op->io_complete (op) == KV_FS_OP_IO_DONE)
        return;
    }
}

/* Store, FILE_CRC32C: sets vLLM's checksum attribute on @fd, the
 * temporary file whose payload is written, so that the file is never
 * published without it. A filesystem without user attributes stores the
 * file without one (vLLM readers accept that). Returns 0 or an errno. */
int
kv_fs_op_write_file_checksum (KvFsOp *op,
                              int     fd)
{
  guint32 be;

  if (op->kind != KV_FS_OP_STORE || !op->has_file_crc32c)
    return 0;
  be = GUINT32_TO_BE (op->file_crc32c);
  if (fsetxattr (fd, KV_FS_VLLM_CRC32C_XATTR, &be, sizeof be, 0) == 0 ||
      errno == ENOTSUP)
    return 0;
  return errno;
}

/* Load, FILE_CRC32C: reads vLLM's checksum attribute of @fd, just read,
 * for kv_fs_op_check_load(). None (or a filesystem without attributes) is
 * no checksum; a value of another length is a bad one. Returns 0, or the
 * errno of a failed read (the load fails, the file is kept, as vLLM
 * does). */
int
kv_fs_op_read_file_checksum (KvFsOp *op,
                             int     fd)
{
  guint8 value[8];
  ssize_t n;

  op->has_file_crc32c = op->bad_file_crc32c = FALSE;
  if (op->kind != KV_FS_OP_LOAD || !(op->flags & KV_FS_OP_FLAG_FILE_CRC32C) ||
      !(op->flags & KV_FS_OP_FLAG_VERIFY))
    return 0;
  n = fgetxattr (fd, KV_FS_VLLM_CRC32C_XATTR, value, sizeof value);
  if (n < 0 && errno == ERANGE)
    n = sizeof value + 1;   /* longer than any checksum */
  if (n < 0)
    return errno == ENODATA || errno == ENOTSUP ? 0 : errno;
  if (n != 4)
    {
      op->bad_file_crc32c = TRUE;
      return 0;
    }
  op->file_crc32c = ((guint32) value[0] << 24) | ((guint32) value[1] << 16) |
                    ((guint32) value[2] << 8) | value[3];
  op->has_file_crc32c = TRUE;
  return 0;
}

static const char *
base_name (const char *path)
{
  const char *slash = strrchr (path, '/');

  return slash != NULL ? slash + 1 : path;
}

/* Opens the directories of the op's files, relative to its root's held
 * open (see kv_fs_layout_open_parent()): that of @path, made if missing
 * for a store (only vLLM's layout makes directories on first use), and
 * that of @reuse_path; a file to take over whose directory cannot be
 * opened is not taken over. Blocking only for directories not held open
 * (the vLLM layout's, the spare directory): a few openat() of cached
 * names. Returns 0 or an errno (EPERM: a directory the tier does not
 * trust). */
int
kv_fs_op_open_dirs (KvFsOp           *op,
                    const KvFsLayout *layout)
{
  gboolean create = op->kind == KV_FS_OP_STORE || op->kind == KV_FS_OP_PROBE;
  int fd;

  kv_fs_op_close_dirs (op);
  op->dirs = kv_fs_layout_ref_dirs (layout, op->root);
  fd = kv_fs_layout_open_parent (layout, op->root, op->dirs, op->path, create,
                                 &op->name, &op->own_dir_fd);
  if (fd == -ENOENT && create)
    {
      /* a directory could not be made in one held open: it was removed
       * (the root deleted under the tier); make them all again, once */
      KvFsRootDirs *stale = op->dirs;

      op->dirs = kv_fs_layout_reopen_dirs (layout, op->root, stale);
      kv_fs_root_dirs_unref (stale);
      fd = kv_fs_layout_open_parent (layout, op->root, op->dirs, op->path, create,
                                     &op->name, &op->own_dir_fd);
    }
  if (fd < 0)
    return -fd;
  op->dir_fd = fd;
  op->tmp_dir_fd = fd;
  if (op->tmp_path != NULL)
    op->tmp_name = base_name (op->tmp_path);
  if (op->reuse_path != NULL)
    {
      fd = kv_fs_layout_open_parent (layout, op->root, op->dirs, op->reuse_path, FALSE,
                                     &op->reuse_name, &op->own_reuse_dir_fd);
      if (fd >= 0)
        op->reuse_dir_fd = fd;
      else
        g_clear_pointer (&op->reuse_path, g_free);
    }
  return 0;
}

/* A file could not be created in the op's directory: it was removed
 * (the root deleted under the tier). Makes the root's directories again
 * and opens the op's. Returns 0 or an errno. */
int
kv_fs_op_reopen_dirs (KvFsOp           *op,
                      const KvFsLayout *layout)
{
  KvFsRootDirs *stale = kv_fs_root_dirs_ref (op->dirs);

  kv_fs_root_dirs_unref (kv_fs_layout_reopen_dirs (layout, op->root, stale));
  kv_fs_root_dirs_unref (stale);
  return kv_fs_op_open_dirs (op, layout);
}

void
kv_fs_op_close_dirs (KvFsOp *op)
{
  if (op->own_dir_fd && op->dir_fd >= 0)
    close (op->dir_fd);
  if (op->own_reuse_dir_fd && op->reuse_dir_fd >= 0)
    close (op->reuse_dir_fd);
  op->dir_fd = op->tmp_dir_fd = op->reuse_dir_fd = -1;
  op->own_dir_fd = op->own_reuse_dir_fd = FALSE;
  g_clear_pointer (&op->dirs, kv_fs_root_dirs_unref);
}

/* Whether @fd, a chunk file just opened for a load, is one the tier may
 * serve: a regular file of the tier's user that no other user can write
 * (see kv_fs_layout_trusts()). A file planted by another user can have
 * a valid header and checksums: they detect damage, not forgery. */
gboolean
kv_fs_op_trusts_file (const KvFsOp     *op,
                      const KvFsLayout *layout,
                      int               fd)
{
  struct stat st;

  return fstat (fd, &st) == 0 && kv_fs_layout_trusts (layout, &st, TRUE);
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
  op->tmp_name = base_name (op->tmp_path);
  op->tmp_dir_fd = op->dir_fd;
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
  if (op->reuse_dir_fd >= 0)
    (void) unlinkat (op->reuse_dir_fd, op->reuse_name, 0);
  g_clear_pointer (&op->reuse_path, g_free);
  op->reuse_name = NULL;
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
  op->tmp_name = op->reuse_name;
  op->tmp_dir_fd = op->reuse_dir_fd;
  op->reuse_name = NULL;
  op->reused = TRUE;
  return TRUE;
}

/* Blocking: takes over op->reuse_path as op->tmp_path (a spare file is
 * written where it is, see kv_fs_op_reuse_in_place()) and opens it for
 * writing, relative to the directories kv_fs_op_open_dirs() opened. Returns the
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
      renameat (op->reuse_dir_fd, op->reuse_name, op->tmp_dir_fd, op->tmp_name) != 0)
    {
      kv_fs_op_give_up_reuse (op);
      return -1;
    }
  g_clear_pointer (&op->reuse_path, g_free);
  do
    {
      fd = openat (op->tmp_dir_fd, op->tmp_name, flags);
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
      (void) unlinkat (op->tmp_dir_fd, op->tmp_name, 0);
      op->reused = FALSE;
      if (in_place)
        kv_fs_op_make_temp (op);
      return -1;
    }
  op->reused = TRUE;
  return fd;
}
