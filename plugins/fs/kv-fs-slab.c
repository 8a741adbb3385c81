/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-slab.h"
#include "kv-fs-io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <glib/gstdio.h>

#ifdef FALLOC_FL_WRITE_ZEROES
# define KV_FS_FALLOC_FL_WRITE_ZEROES FALLOC_FL_WRITE_ZEROES
#else
/* linux/falloc.h of Linux 6.17; older kernels refuse it (EOPNOTSUPP) */
# define KV_FS_FALLOC_FL_WRITE_ZEROES 0x80
#endif

typedef enum {
  SLOT_FREE,     /* in the free stack */
  SLOT_BUSY,     /* a store writes it, or the restart scan has not read it */
  SLOT_VALID,    /* holds @key, in the map */
  SLOT_DEAD,     /* dropped (found damaged) while loads still read it */
} SlotState;

typedef struct
{
  KvKey   *key;       /* VALID, DEAD */
  guint32  readers;   /* loads in flight */
  guint8   state;
  gboolean checked;   /* VALID: written by this tier, or loaded whole since;
                       * not a slot the restart scan took on its header's word */
} Slot;

typedef struct
{
  char    *path;
  guint    root;
  int      fd;          /* buffered */
  int      fd_direct;   /* O_DIRECT, or -1 */
  guint32  first;       /* its first slot's number */
  guint32  n_slots;
  gboolean existed;     /* made by an earlier tier: scan it */
  guint8  *map;         /* the whole file, on a memory-backed root, or NULL */
  gsize    map_size;
} SlabFile;

struct _KvFsSlab
{
  gsize         payload_len;
  gsize         slot_size;
  const guint8 *ns_digest;   /* the layout's */

  SlabFile     *files;
  guint         n_files;
  guint32       n_slots;

  GMutex        lock;
  Slot         *slots;
  guint32      *free_stack;
  guint32       n_free;
  GHashTable   *map;         /* KvKey (slot->key) → slot number + 1 */
  guint64       last_sequence;      /* (atomic) the newest store's */
  gint          scanned_unchecked;  /* (atomic) a restart scan mapped a slot
                                     * on its header's word (never cleared) */
  /* header buffers of no op now, for ops' records: a store's buffer only
   * ever holds headers its stores encoded, zeros past the fields (see
   * kv_chunk_slot_header_reencode()); loads and probes read anything */
  GPtrArray    *store_headers;
  GPtrArray    *read_headers;

  /* While a restart scan reads the slots: the stretches read so far
   * (FileScan *, their valid slots oldest first), which a store that
   * finds no free slot takes from (kv_fs_slab_take_scanned()); NULL
   * otherwise. */
  GPtrArray    *scanned;
  GHashTable   *taken;         /* keys whose scanned slot a store took */
};

/* A slot whose header the restart scan found valid. */
typedef struct
{
  KvKey   *key;       /* NULL once a store took the slot */
  guint32  slot;
  guint64  sequence;
} Candidate;

/* The scan of slots [first, first + n_slots) of one slab file. */
typedef struct
{
  KvFsSlab   *slab;
  SlabFile   *file;
  guint32     first;     /* in the file */
  guint32     n_slots;
  const gint *cancel;
  GArray     *found;     /* Candidate, oldest first once read */
  guint       next_take; /* found[next_take] is the next a store takes */
  guint64     n_bad;
} FileScan;

/* ---- files -------------------------------------------------------------- */

/* Sets @error for a failed @what of @path; returns FALSE. */
static gboolean
set_errno_error (GError     **error,
                 int          errsv,
                 const char  *what,
                 const char  *path)
{
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
               "Cannot %s the slab file ‘%s’: %s", what, path, g_strerror (errsv));
  return FALSE;
}

/* Writes a slab file's header at its start; FALSE with errno set. */
static gboolean
write_slab_header (int           fd,
                   const guint8 *header)
{
  int err = kv_fs_io_pwrite_full (fd, header, KV_SLAB_HEADER_SIZE, 0);

  errno = err;
  return err == 0;
}

/* Opens slab file @index of @root (creating and preallocating it if
 * missing) for @n_slots slots, relative to the root's directory held
 * open, never through a link: the file must be a regular file the tier
 * trusts (see kv_fs_layout_trusts()). */
/* On a memory-backed root (tmpfs) a slab file is mapped: moving a record
 * is then one copy between its primary slot and the file's pages, with
 * no system call, page-cache lookup or bounce per transfer. Every page
 * is reserved first, so that no store through the mapping can meet a
 * full tmpfs (a SIGBUS, not an error); ramfs, which cannot reserve
 * pages, is left to the engines, as is any file that cannot be mapped. */
static void
map_if_memory_backed (SlabFile *file,
                      guint64   size)
{
  struct statfs fs;
  void *map;

  if (fstatfs (file->fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC || size > G_MAXSIZE ||
      fallocate (file->fd, 0, 0, size) != 0)
    return;
  /* populated now: the first store into each page would otherwise
   * fault it in (a slab's first pass ran at a fifth of its later ones) */
  map = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, file->fd, 0);
  if (map == MAP_FAILED)
    {
      g_debug ("fs slab: %s stays unmapped: %s", file->path, g_strerror (errno));
      return;
    }
  file->map = map;
  file->map_size = size;
}

static gboolean
open_slab_file (KvFsSlab          *self,
                const KvFsLayout  *layout,
                SlabFile          *file,
                guint              index,
                gboolean           o_direct,
                gboolean           map_memory_backed,
                GError           **error)
{
  g_autoptr(KvFsRootDirs) dirs = kv_fs_layout_ref_dirs (layout, file->root);
  int dir_fd = kv_fs_root_dirs_get_chunk_fd (dirs);
  g_autofree char *name = g_strdup_printf (KV_FS_SLAB_FILE_FORMAT, index);
  guint64 size = kv_chunk_slab_slot_offset (self->payload_len, file->n_slots);
  guint8 *header = NULL;
  guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  guint64 payload_len = 0;
  guint64 n_slots = 0;
  gboolean rewrite = TRUE;
  gboolean created = FALSE;
  struct stat st;
  struct stat st_direct;
  ssize_t got;

  file->path = g_build_filename (kv_fs_layout_get_chunk_dir (layout, file->root), name, NULL);
  /* O_NONBLOCK: a FIFO or device planted under the name must not block
   * or act on being opened; it is refused below, and a slab file's
   * descriptor drops the flag */
  file->fd = openat (dir_fd, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (file->fd < 0 && errno == ENOENT)
    {
      file->fd = openat (dir_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      created = file->fd >= 0;
    }
  if (file->fd < 0)
    {
      if (errno == ELOOP)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                       "The slab file ‘%s’ is a symbolic link: the tier follows no link "
                       "inside its root", file->path);
          return FALSE;
        }
      return set_errno_error (error, errno, "open", file->path);
    }
  if (fstat (file->fd, &st) != 0)
    return set_errno_error (error, errno, "examine", file->path);
  if (!kv_fs_layout_trusts (layout, &st, TRUE))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "The slab file ‘%s’ is owned by uid %u, group %u, mode %04o: it must be a "
                   "regular file of the tier's user that no other user can write (another "
                   "user could forge the tier's chunks)",
                   file->path, (guint) st.st_uid, (guint) st.st_gid, (guint) (st.st_mode & 07777));
      return FALSE;
    }
  if (fcntl (file->fd, F_SETFL, fcntl (file->fd, F_GETFL) & ~O_NONBLOCK) != 0)
    return set_errno_error (error, errno, "open", file->path);

  if (posix_memalign ((void **) &header, 4096, KV_SLAB_HEADER_SIZE) != 0)
    g_error ("Cannot allocate an aligned slab header");
  if (!created && st.st_size >= KV_SLAB_HEADER_SIZE)
    {
      got = kv_fs_io_pread_full (file->fd, header, KV_SLAB_HEADER_SIZE, 0);
      if (got == KV_SLAB_HEADER_SIZE &&
          kv_chunk_slab_header_parse (header, ns, &payload_len, &n_slots) &&
          memcmp (ns, self->ns_digest, sizeof ns) == 0 && payload_len == self->payload_len)
        {
          /* a slab of an earlier tier: its slots are scanned; a new
           * max-size only moves its end */
          file->existed = TRUE;
          rewrite = n_slots != file->n_slots;
        }
      else
        /* Damaged or of another format: its slots are checked all the
         * same (each stands alone), and it gets a new header. */
        file->existed = TRUE;
    }

  if ((guint64) st.st_size > size && ftruncate (file->fd, size) != 0)
    {
      free (header);
      return set_errno_error (error, errno, "shrink", file->path);
    }
  if ((guint64) st.st_size < size)
    {
      /* Blocks allocated once, now: no store allocates any. Written as
       * zeros where the filesystem and device can do that without moving
       * the bytes (Linux 6.17): otherwise the first store into each block
       * also converts it from unwritten, in the filesystem's journal. */
      if (fallocate (file->fd, KV_FS_FALLOC_FL_WRITE_ZEROES, st.st_size, size - st.st_size) != 0 &&
          fallocate (file->fd, 0, 0, size) != 0)
        {
          int errsv = errno;

          if ((errsv != EOPNOTSUPP && errsv != ENOSYS) || ftruncate (file->fd, size) != 0)
            {
              free (header);
              if (created)
                unlinkat (dir_fd, name, 0);
              return set_errno_error (error, errsv, "preallocate", file->path);
            }
        }
    }
  if (rewrite)
    {
      kv_chunk_slab_header_encode (header, self->ns_digest, self->payload_len, file->n_slots,
                                   g_get_real_time ());
      if (!write_slab_header (file->fd, header) || fdatasync (file->fd) != 0)
        {
          free (header);
          return set_errno_error (error, errno, "write the header of", file->path);
        }
      /* the new name lasts too */
      if (created)
        (void) fsync (dir_fd);
    }
  free (header);

  if (map_memory_backed)
    map_if_memory_backed (file, size);
  if (o_direct && file->map == NULL)
    {
      file->fd_direct = openat (dir_fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_DIRECT);
      /* the same file, not one put in its place since */
      if (file->fd_direct >= 0 &&
          (fstat (file->fd_direct, &st_direct) != 0 || st_direct.st_ino != st.st_ino ||
           st_direct.st_dev != st.st_dev))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                       "The slab file ‘%s’ was replaced while the tier opened it", file->path);
          return FALSE;
        }
    }
  return TRUE;
}

/* Opens the block device @file->path (layout=slab with root=/dev/...) as
 * one slab of at most @want slots (0: as many as it holds). The device
 * node must be a block device that its owner (the tier's user or root)
 * alone may write. Its first 4096 bytes must be this namespace's slab
 * header (a device the tier used before) or zero: a device that holds
 * anything else (a filesystem, another namespace's slab) is refused,
 * never overwritten. */
static gboolean
open_slab_device (KvFsSlab          *self,
                  SlabFile          *file,
                  guint64            want,
                  gboolean           o_direct,
                  GError           **error)
{
  guint8 *header = NULL;
  guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  guint64 payload_len = 0;
  guint64 n_slots = 0;
  guint64 dev_size = 0;
  gboolean zero = TRUE;
  gboolean rewrite = TRUE;
  struct stat st;
  struct stat st_direct;
  gssize got;

  /* the root's own name may be a link (/dev/disk/by-id/...) of the
   * tier's user or of root, as a root directory's may */
  if (lstat (file->path, &st) == 0 && S_ISLNK (st.st_mode) && st.st_uid != geteuid () &&
      st.st_uid != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "The slab device ‘%s’ is a symbolic link owned by uid %u: only links of "
                   "the tier's user or of root are followed", file->path, (guint) st.st_uid);
      return FALSE;
    }
  file->fd = open (file->path, O_RDWR | O_CLOEXEC);
  if (file->fd < 0)
    return set_errno_error (error, errno, "open", file->path);
  if (fstat (file->fd, &st) != 0)
    return set_errno_error (error, errno, "examine", file->path);
  if (!S_ISBLK (st.st_mode) || (st.st_mode & (S_IWOTH | S_IWGRP)) != 0 ||
      (st.st_uid != geteuid () && st.st_uid != 0))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "The slab device ‘%s’ is %s owned by uid %u, mode %04o: it must be a block "
                   "device of the tier's user or of root that no other user can write",
                   file->path, S_ISBLK (st.st_mode) ? "a block device" : "not a block device",
                   (guint) st.st_uid, (guint) (st.st_mode & 07777));
      return FALSE;
    }
  if (ioctl (file->fd, BLKGETSIZE64, &dev_size) != 0)
    return set_errno_error (error, errno, "size", file->path);
  if (dev_size < KV_SLAB_HEADER_SIZE + self->slot_size)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE,
                   "The slab device ‘%s’ (%" G_GUINT64_FORMAT " bytes) cannot hold one %"
                   G_GSIZE_FORMAT "-byte slot", file->path, dev_size, self->slot_size);
      return FALSE;
    }
  n_slots = (dev_size - KV_SLAB_HEADER_SIZE) / self->slot_size;
  file->n_slots = (guint32) MIN (MIN (n_slots, want > 0 ? want : n_slots), G_MAXUINT32 / 2);

  if (posix_memalign ((void **) &header, 4096, KV_SLAB_HEADER_SIZE) != 0)
    g_error ("Cannot allocate an aligned slab header");
  got = kv_fs_io_pread_full (file->fd, header, KV_SLAB_HEADER_SIZE, 0);
  if (got != KV_SLAB_HEADER_SIZE)
    {
      free (header);
      /* a device shorter than its header was refused above */
      return set_errno_error (error, got < 0 ? (int) -got : EIO, "read", file->path);
    }
  for (guint i = 0; i < KV_SLAB_HEADER_SIZE && zero; i++)
    zero = header[i] == 0;
  if (kv_chunk_slab_header_parse (header, ns, &payload_len, &n_slots) &&
      memcmp (ns, self->ns_digest, sizeof ns) == 0 && payload_len == self->payload_len)
    {
      file->existed = TRUE;
      rewrite = n_slots != file->n_slots;
    }
  else if (!zero)
    {
      free (header);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS,
                   "The device ‘%s’ holds data that is not a kvtier slab of this namespace and "
                   "chunk size (its first 4096 bytes are neither zero nor such a slab's "
                   "header); the tier does not overwrite it. To give the device to the tier, "
                   "zero them (dd if=/dev/zero of=%s bs=4096 count=1)", file->path, file->path);
      return FALSE;
    }
  if (rewrite)
    {
      kv_chunk_slab_header_encode (header, self->ns_digest, self->payload_len, file->n_slots,
                                   g_get_real_time ());
      if (!write_slab_header (file->fd, header) || fdatasync (file->fd) != 0)
        {
          free (header);
          return set_errno_error (error, errno, "write the header of", file->path);
        }
    }
  free (header);

  if (o_direct)
    {
      file->fd_direct = open (file->path, O_RDWR | O_CLOEXEC | O_DIRECT);
      if (file->fd_direct >= 0 &&
          (fstat (file->fd_direct, &st_direct) != 0 || st_direct.st_rdev != st.st_rdev))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                       "The slab device ‘%s’ was replaced while the tier opened it", file->path);
          return FALSE;
        }
    }
  return TRUE;
}

/* Removes the slab files past the last one used (max-size shrank). */
static void
remove_extra_files (const KvFsLayout *layout,
                    guint             root,
                    guint             first_unused)
{
  g_autoptr(KvFsRootDirs) dirs = kv_fs_layout_ref_dirs (layout, root);
  int dir_fd = kv_fs_root_dirs_get_chunk_fd (dirs);

  for (guint i = first_unused; i < 10000; i++)
    {
      g_autofree char *name = g_strdup_printf (KV_FS_SLAB_FILE_FORMAT, i);
      struct stat st;

      if (fstatat (dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        break;
      if (!kv_fs_layout_trusts (layout, &st, TRUE) || unlinkat (dir_fd, name, 0) != 0)
        break;
    }
}

/* Makes (or opens) the slab files holding @capacity bytes of slots,
 * spread evenly over the layout's roots, in files of at most
 * @slab_size bytes; with @map_memory_backed, the files on memory-backed
 * roots are mapped and their records copied (see map_if_memory_backed()). */
KvFsSlab *
kv_fs_slab_new (const KvFsLayout *layout,
                guint64           capacity,
                guint64           slab_size,
                const gboolean   *o_direct,
                gboolean          map_memory_backed,
                GError          **error)
{
  KvFsSlab *self;
  guint n_roots = kv_fs_layout_get_n_roots (layout);
  gsize payload_len = kv_fs_layout_get_block_size (layout);
  gsize slot_size = KV_CHUNK_HEADER_SIZE + payload_len;
  guint64 total = capacity / slot_size;
  guint64 per_file;
  g_autoptr(GArray) files = g_array_new (FALSE, TRUE, sizeof (SlabFile));
  guint32 next = 0;

  if (slab_size < KV_SLAB_HEADER_SIZE + slot_size)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "slab-size=%" G_GUINT64_FORMAT " cannot hold one slot: a slab file needs "
                   "%" G_GSIZE_FORMAT " bytes for its header and one %" G_GSIZE_FORMAT
                   "-byte slot (a chunk and its header)",
                   slab_size, KV_SLAB_HEADER_SIZE + slot_size, slot_size);
      return NULL;
    }
  if (capacity == 0)
    {
      /* only block devices know their own size */
      for (guint r = 0; r < n_roots; r++)
        if (!kv_fs_layout_root_is_device (layout, r))
          {
            g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                         "layout=slab needs max-size on the directory root ‘%s’: the bytes of "
                         "slab files it preallocates, which bound it",
                         kv_fs_layout_get_root (layout, r));
            return NULL;
          }
    }
  else if (total < n_roots)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "max-size=%" G_GUINT64_FORMAT " holds fewer than one %" G_GSIZE_FORMAT
                   "-byte slot per root: layout=slab preallocates max-size in slab files, "
                   "so it must be at least %" G_GUINT64_FORMAT,
                   capacity, slot_size, (guint64) slot_size * n_roots);
      return NULL;
    }
  if (total > G_MAXUINT32 - 1)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "max-size=%" G_GUINT64_FORMAT " makes more than %u slots of %" G_GSIZE_FORMAT
                   " bytes; use fewer, larger chunks or a smaller max-size",
                   capacity, G_MAXUINT32 - 1, slot_size);
      return NULL;
    }
  per_file = (slab_size - KV_SLAB_HEADER_SIZE) / slot_size;

  self = g_new0 (KvFsSlab, 1);
  g_mutex_init (&self->lock);
  self->payload_len = payload_len;
  self->slot_size = slot_size;
  self->ns_digest = kv_fs_layout_get_namespace_digest (layout);
  self->map = g_hash_table_new (kv_key_hash, kv_key_equal);
  self->store_headers = g_ptr_array_new_with_free_func (free);
  self->read_headers = g_ptr_array_new_with_free_func (free);
  self->last_sequence = g_get_real_time ();

  for (guint r = 0; r < n_roots; r++)
    {
      guint64 left = total / n_roots + (r < total % n_roots ? 1 : 0);
      guint index = 0;

      if (kv_fs_layout_root_is_device (layout, r))
        {
          SlabFile file = { 0 };

          file.root = r;
          file.fd = -1;
          file.fd_direct = -1;
          file.first = next;
          file.path = g_strdup (kv_fs_layout_get_root (layout, r));
          g_array_append_val (files, file);
          if (!open_slab_device (self, &g_array_index (files, SlabFile, files->len - 1), left,
                                 o_direct != NULL && o_direct[r], error))
            {
              gsize n_files = 0;

              self->files = (SlabFile *) g_array_steal (files, &n_files);
              self->n_files = n_files;
              kv_fs_slab_free (self);
              return NULL;
            }
          next += g_array_index (files, SlabFile, files->len - 1).n_slots;
          continue;
        }
      for (; left > 0; index++)
        {
          SlabFile file = { 0 };

          file.root = r;
          file.fd = -1;
          file.fd_direct = -1;
          file.first = next;
          file.n_slots = (guint32) MIN (left, per_file);
          g_array_append_val (files, file);
          if (!open_slab_file (self, layout, &g_array_index (files, SlabFile, files->len - 1),
                               index, o_direct != NULL && o_direct[r], map_memory_backed, error))
            {
              gsize n_files = 0;

              self->files = (SlabFile *) g_array_steal (files, &n_files);
              self->n_files = n_files;
              kv_fs_slab_free (self);
              return NULL;
            }
          next += file.n_slots;
          left -= file.n_slots;
        }
      remove_extra_files (layout, r, index);
    }
  {
    gsize n_files = 0;

    self->files = (SlabFile *) g_array_steal (files, &n_files);
    self->n_files = n_files;
  }
  self->n_slots = next;
  self->slots = g_new0 (Slot, self->n_slots);
  self->free_stack = g_new (guint32, self->n_slots);

  /* Free slots of new files, popped in turn from every file (hence every
   * root): stores spread over the drives. A file of an earlier tier has
   * its slots BUSY until the scan has read them. */
  {
    g_autoptr(GArray) order = g_array_new (FALSE, FALSE, sizeof (guint32));
    guint32 max_per_file = 0;

    for (guint f = 0; f < self->n_files; f++)
      max_per_file = MAX (max_per_file, self->files[f].n_slots);
    for (guint32 i = 0; i < max_per_file; i++)
      for (guint f = 0; f < self->n_files; f++)
        {
          SlabFile *file = &self->files[f];
          guint32 slot = file->first + i;

          if (i >= file->n_slots)
            continue;
          if (file->existed)
            self->slots[slot].state = SLOT_BUSY;
          else
            g_array_append_val (order, slot);
        }
    for (guint i = order->len; i > 0; i--)
      {
        guint32 slot = g_array_index (order, guint32, i - 1);

        self->slots[slot].state = SLOT_FREE;
        self->free_stack[self->n_free++] = slot;
      }
  }
  return self;
}

void
kv_fs_slab_free (KvFsSlab *self)
{
  if (self == NULL)
    return;
  for (guint f = 0; f < self->n_files; f++)
    {
      if (self->files[f].fd >= 0)
        close (self->files[f].fd);
      if (self->files[f].fd_direct >= 0)
        close (self->files[f].fd_direct);
      if (self->files[f].map != NULL)
        munmap (self->files[f].map, self->files[f].map_size);
      g_free (self->files[f].path);
    }
  for (guint32 s = 0; self->slots != NULL && s < self->n_slots; s++)
    g_clear_pointer (&self->slots[s].key, kv_key_unref);
  g_free (self->files);
  g_free (self->slots);
  g_free (self->free_stack);
  if (self->map != NULL)
    g_hash_table_unref (self->map);
  g_ptr_array_unref (self->store_headers);
  g_ptr_array_unref (self->read_headers);
  g_mutex_clear (&self->lock);
  g_free (self);
}

/* Whether every slab file is mapped (every root is memory-backed, and
 * slab-map is on): no record moves through a read or a write. */
gboolean
kv_fs_slab_is_mapped (KvFsSlab *self)
{
  for (guint f = 0; f < self->n_files; f++)
    if (self->files[f].map == NULL)
      return FALSE;
  return self->n_files > 0;
}

guint32
kv_fs_slab_get_n_slots (KvFsSlab *self)
{
  return self->n_slots;
}

guint
kv_fs_slab_get_n_files (KvFsSlab *self)
{
  return self->n_files;
}

guint32
kv_fs_slab_get_n_free (KvFsSlab *self)
{
  guint32 n;

  g_mutex_lock (&self->lock);
  n = self->n_free;
  g_mutex_unlock (&self->lock);
  return n;
}

/* Whether slab files of an earlier tier were found: their slots are BUSY
 * until kv_fs_slab_scan() has read them. */
gboolean
kv_fs_slab_needs_scan (KvFsSlab *self)
{
  for (guint f = 0; f < self->n_files; f++)
    if (self->files[f].existed)
      return TRUE;
  return FALSE;
}

static SlabFile *
file_of_slot (KvFsSlab *self,
              guint32   slot)
{
  guint lo = 0;
  guint hi = self->n_files;

  while (hi - lo > 1)
    {
      guint mid = (lo + hi) / 2;

      if (self->files[mid].first <= slot)
        lo = mid;
      else
        hi = mid;
    }
  return &self->files[lo];
}

/* ---- records: what the engines move --------------------------------------- */

/* The payload's checksum for a store's slot header: the one carried with
 * the primary slot (see kv_host_buffer_get_slot_checksum()), or else
 * computed here, the one place that reads the whole slot for it. */
static guint64
payload_checksum (const KvFsOp *op)
{
  if (op->has_payload_checksum)
    return op->payload_checksum;
  return kv_chunk_checksum (op->payload, op->payload_len);
}

static guint8 *
record_header (const KvFsOp *op)
{
  return op->io_vec[0].iov_base;
}

/* Store, io_prepare (an engine thread): the header, whose payload
 * checksum reads the whole payload unless the slot carried it. */
static void
encode_store_header (KvFsOp *op)
{
  kv_chunk_slot_header_reencode (record_header (op), op->namespace_digest, op->key,
                                 op->payload_len, payload_checksum (op), g_get_real_time (),
                                 op->sequence);
}

/* Store, io_complete: written. Past its deadline, its primary slot may
 * hold another chunk's bytes by now, so the slot must not stay valid:
 * its header is written again as zeros, and the store is cancelled. */
static KvFsOpIoNext
store_written (KvFsOp *op)
{
  if (op->status == KV_FS_OP_STATUS_CANCELLED)
    return KV_FS_OP_IO_DONE;   /* the zeros are written */
  if (g_atomic_int_get (&op->aborted))
    {
      memset (record_header (op), 0, KV_CHUNK_HEADER_SIZE);
      op->io_n_vec = 1;
      op->status = KV_FS_OP_STATUS_CANCELLED;
      op->error = ECANCELED;
      return KV_FS_OP_IO_AGAIN;
    }
  op->status = KV_FS_OP_STATUS_OK;
  return KV_FS_OP_IO_DONE;
}

/* Load, io_complete (an engine thread): header and payload are read;
 * both are checked, the payload always (a torn slot has a valid header
 * of either chunk). */
static KvFsOpIoNext
load_read (KvFsOp *op)
{
  op->header = record_header (op);
  op->got_header = KV_CHUNK_HEADER_SIZE;
  op->got_payload = op->payload_len;
  kv_fs_op_check_load (op);
  return KV_FS_OP_IO_DONE;
}

/* Bytes a mapped copy moves before hashing them, while they are still
 * in the core's cache. */
#define COPY_PIECE (64 * 1024)

static void
free_hasher (gpointer hasher)
{
  kv_chunk_hasher_free (hasher);
}

static GPrivate copy_hasher = G_PRIVATE_INIT (free_hasher);

/* Copies @len bytes from @from to @to a piece at a time, each piece
 * hashed right after its copy, while it is still in the core's cache;
 * returns the XXH3-64 of the bytes (the calling thread's hasher). */
static guint64
copy_and_hash (guint8       *to,
               const guint8 *from,
               gsize         len)
{
  KvChunkHasher *hasher = g_private_get (&copy_hasher);

  if (hasher == NULL)
    {
      hasher = kv_chunk_hasher_new ();
      g_private_set (&copy_hasher, hasher);
    }
  kv_chunk_hasher_reset (hasher);
  for (gsize done = 0; done < len; done += COPY_PIECE)
    {
      gsize n = MIN (COPY_PIECE, len - done);

      memcpy (to + done, from + done, n);
      kv_chunk_hasher_update (hasher, to + done, n);
    }
  return kv_chunk_hasher_digest (hasher);
}

/* Load of a mapped record, io_copy (an engine thread): the payload a
 * piece at a time, each piece hashed right after its copy, so that the
 * check (load_read()) reads no byte of it again: copy and check in one
 * pass over memory. The header is checked where it lies, in the
 * mapping: the slot is pinned, so no store of the tier writes it
 * meanwhile. */
static void
copy_and_hash_record (KvFsOp *op)
{
  g_assert (op->io_n_vec == 2 && op->io_vec[1].iov_base == op->payload);
  g_assert (record_header (op) == op->io_map);
  op->copied_checksum = copy_and_hash (op->payload, op->io_map + KV_CHUNK_HEADER_SIZE,
                                       op->payload_len);
  op->has_copied_checksum = TRUE;
}

/* Store into a mapped record, io_copy (an engine thread): the payload
 * first (hashed a piece at a time as it is copied, unless the slot
 * carried its checksum), then the header encoded in place over the
 * slot's old one, its own checksum last. Until then the slot's header is
 * the old chunk's or half written: a crash between leaves a slot whose
 * header check or payload check fails, as a torn write on a disk does.
 * A store past its deadline leaves zeros in the header instead (see
 * store_written()). */
static void
store_into_map (KvFsOp *op)
{
  guint8 *to = op->io_map + KV_CHUNK_HEADER_SIZE;

  g_assert (op->io_vec[0].iov_base == op->io_map);
  if (op->has_payload_checksum)
    memcpy (to, op->payload, op->payload_len);
  else
    {
      op->payload_checksum = copy_and_hash (to, op->payload, op->payload_len);
      op->has_payload_checksum = TRUE;
    }
  if (g_atomic_int_get (&op->aborted))
    {
      memset (op->io_map, 0, KV_CHUNK_HEADER_SIZE);
      op->status = KV_FS_OP_STATUS_CANCELLED;
      op->error = ECANCELED;
      return;
    }
  encode_store_header (op);
  op->status = KV_FS_OP_STATUS_OK;
}

/* io_complete of a mapped store: store_into_map() said how it went. */
static KvFsOpIoNext
stored_into_map (KvFsOp *op)
{
  return KV_FS_OP_IO_DONE;
}

/* Probe of a block device, io_complete: its slab header was read; it
 * must be intact. */
static KvFsOpIoNext
probe_read (KvFsOp *op)
{
  if (kv_chunk_slab_header_parse (record_header (op), NULL, NULL, NULL))
    op->status = KV_FS_OP_STATUS_OK;
  else
    {
      op->status = KV_FS_OP_STATUS_IO_ERROR;
      op->error = EIO;
    }
  return KV_FS_OP_IO_DONE;
}

/*
 * Makes @op (a store or load whose key, payload and namespace are set,
 * and for a store its sequence number) the transfer of one slot record,
 * header then payload, at @offset of @fd, with @header (a
 * KV_CHUNK_HEADER_SIZE buffer aligned for O_DIRECT, alive as long as the
 * op) for the header. For a store, @header holds zeros or a header an
 * earlier store encoded: only its fields are written again
 * (kv_chunk_slot_header_reencode()). A store whose slot carried its
 * payload's checksum has its header encoded now; otherwise on an engine
 * thread.
 */
void
kv_fs_slab_init_record (KvFsOp  *op,
                        guint8  *header,
                        int      fd,
                        guint64  offset)
{
  g_return_if_fail (op->kind == KV_FS_OP_STORE || op->kind == KV_FS_OP_LOAD);

  op->flags |= KV_FS_OP_FLAG_AT_OFFSET | KV_FS_OP_FLAG_HEADER;
  op->io_fd = fd;
  op->io_offset = offset;
  op->io_write = op->kind == KV_FS_OP_STORE;
  op->io_vec[0] = (struct iovec) { header, KV_CHUNK_HEADER_SIZE };
  op->io_vec[1] = (struct iovec) { op->payload, op->payload_len };
  op->io_n_vec = 2;
  op->io_map = NULL;
  op->io_copy = NULL;
  op->has_copied_checksum = FALSE;
  op->io_prepare = NULL;
  if (op->kind == KV_FS_OP_LOAD)
    {
      op->io_complete = load_read;
      return;
    }
  op->io_complete = store_written;
  if (op->has_payload_checksum)
    encode_store_header (op);
  else
    op->io_prepare = encode_store_header;
}

/*
 * Makes @op (a store whose key, payload, namespace and sequence number
 * are set) the store of the slot record mapped at @map, at @offset of
 * @fd: one copy of the payload into the slot, then its header encoded in
 * place (store_into_map()), both on an engine thread; nothing is encoded
 * on the caller's, and no header buffer is taken.
 */
void
kv_fs_slab_init_mapped_store (KvFsOp  *op,
                              guint8  *map,
                              int      fd,
                              guint64  offset)
{
  g_return_if_fail (op->kind == KV_FS_OP_STORE);

  op->flags |= KV_FS_OP_FLAG_AT_OFFSET | KV_FS_OP_FLAG_HEADER;
  op->io_fd = fd;
  op->io_offset = offset;
  op->io_write = TRUE;
  op->io_map = map;
  op->io_vec[0] = (struct iovec) { map, KV_CHUNK_HEADER_SIZE };
  op->io_vec[1] = (struct iovec) { op->payload, op->payload_len };
  op->io_n_vec = 2;
  op->io_prepare = NULL;
  op->io_copy = store_into_map;
  op->io_complete = stored_into_map;
  op->has_copied_checksum = FALSE;
}

/* A header buffer for an op's record: one given back before, or a new
 * one (zeros: a store's may be encoded over). Lock held. */
static guint8 *
take_header_locked (KvFsSlab *self,
                    gboolean  for_store)
{
  GPtrArray *pool = for_store ? self->store_headers : self->read_headers;
  guint8 *header = NULL;

  if (pool->len > 0)
    return g_ptr_array_steal_index_fast (pool, pool->len - 1);
  if (posix_memalign ((void **) &header, 4096, KV_CHUNK_HEADER_SIZE) != 0)
    g_error ("Cannot allocate an aligned slot header");
  memset (header, 0, KV_CHUNK_HEADER_SIZE);
  return header;
}

/* Lock held: @op's record is over, its header buffer free again. */
static void
give_back_header_locked (KvFsSlab *self,
                         KvFsOp   *op)
{
  if (!(op->flags & KV_FS_OP_FLAG_AT_OFFSET) || record_header (op) == NULL)
    return;
  /* a mapped record's header is the slot's own, in the mapping */
  if (op->io_map != NULL)
    {
      op->io_vec[0].iov_base = NULL;
      op->header = NULL;
      return;
    }
  g_ptr_array_add (op->kind == KV_FS_OP_STORE ? self->store_headers : self->read_headers,
                   record_header (op));
  op->io_vec[0].iov_base = NULL;
  op->header = NULL;
}

/* ---- slots -------------------------------------------------------------- */

/* Lock held. */
static void
free_slot_locked (KvFsSlab *self,
                  guint32   slot)
{
  Slot *s = &self->slots[slot];

  g_clear_pointer (&s->key, kv_key_unref);
  s->state = SLOT_FREE;
  self->free_stack[self->n_free++] = slot;
}

/* Lock held: takes @key out of the map if it maps to @slot. */
static void
unmap_locked (KvFsSlab    *self,
              const KvKey *key,
              guint32      slot)
{
  gpointer value = g_hash_table_lookup (self->map, key);

  if (value != NULL && GPOINTER_TO_UINT (value) - 1 == slot)
    g_hash_table_remove (self->map, key);
}

/* Points @op, a breaker probe of @root (a block device), at the device's
 * slab header: the probe reads and checks it. Give it back with
 * kv_fs_slab_probe_done(). */
void
kv_fs_slab_init_probe (KvFsSlab *self,
                       KvFsOp   *op,
                       guint     root)
{
  for (guint f = 0; f < self->n_files; f++)
    if (self->files[f].root == root)
      {
        guint8 *header;

        g_mutex_lock (&self->lock);
        header = take_header_locked (self, FALSE);
        g_mutex_unlock (&self->lock);
        op->flags |= KV_FS_OP_FLAG_AT_OFFSET;
        op->io_fd = self->files[f].fd_direct >= 0 ? self->files[f].fd_direct
                                                  : self->files[f].fd;
        op->io_offset = 0;
        op->io_write = FALSE;
        op->io_vec[0] = (struct iovec) { header, KV_SLAB_HEADER_SIZE };
        op->io_n_vec = 1;
        op->io_complete = probe_read;
        return;
      }
}

/* A probe made by kv_fs_slab_init_probe() is over. */
void
kv_fs_slab_probe_done (KvFsSlab *self,
                       KvFsOp   *op)
{
  g_mutex_lock (&self->lock);
  give_back_header_locked (self, op);
  g_mutex_unlock (&self->lock);
}

/* A slot for a store: with @victim (a chunk the index just evicted), the
 * victim's slot, which it leaves; else a free one. FALSE when there is
 * none (every slot in use, or not scanned yet). */
gboolean
kv_fs_slab_alloc (KvFsSlab    *self,
                  const KvKey *victim,
                  guint32     *out_slot)
{
  gboolean found = FALSE;

  g_mutex_lock (&self->lock);
  if (victim != NULL)
    {
      gpointer value = g_hash_table_lookup (self->map, victim);

      if (value != NULL)
        {
          guint32 slot = GPOINTER_TO_UINT (value) - 1;
          Slot *s = &self->slots[slot];

          g_hash_table_remove (self->map, victim);
          if (s->readers == 0)
            {
              g_clear_pointer (&s->key, kv_key_unref);
              s->state = SLOT_BUSY;
              *out_slot = slot;
              found = TRUE;
            }
          else
            /* never written under a reader: freed when it leaves */
            s->state = SLOT_DEAD;
        }
    }
  else if (self->n_free > 0)
    {
      *out_slot = self->free_stack[--self->n_free];
      self->slots[*out_slot].state = SLOT_BUSY;
      found = TRUE;
    }
  g_mutex_unlock (&self->lock);
  return found;
}

/* A store's sequence number: above every one given before, and
 * clock-based, so that stores made while a restart scan still reads the
 * slots (whose highest number it does not know yet) are newer than
 * theirs. Any thread. */
static guint64
next_sequence (KvFsSlab *self)
{
  guint64 now = g_get_real_time ();
  guint64 seen = __atomic_load_n (&self->last_sequence, __ATOMIC_RELAXED);
  guint64 next;

  do
    next = MAX (seen + 1, now);
  while (!__atomic_compare_exchange_n (&self->last_sequence, &seen, next, TRUE,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return next;
}

/* The restart scan found stores numbered up to @sequence: later ones
 * get higher numbers. Any thread. */
static void
raise_sequence (KvFsSlab *self,
                guint64   sequence)
{
  guint64 seen = __atomic_load_n (&self->last_sequence, __ATOMIC_RELAXED);

  while (sequence > seen &&
         !__atomic_compare_exchange_n (&self->last_sequence, &seen, sequence, TRUE,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}

/* Points @op (a store or load whose key, payload and namespace are set)
 * at @slot: its file's descriptor (O_DIRECT where the file has one and
 * the slot's memory is aligned), offset, a path naming both for
 * messages, and for a store a sequence number above every one given
 * before; then makes it the transfer of the slot's record (see
 * kv_fs_slab_init_record()), or on a mapped slab file a store into the
 * mapped record (kv_fs_slab_init_mapped_store()). */
void
kv_fs_slab_init_op (KvFsSlab *self,
                    KvFsOp   *op,
                    guint32   slot)
{
  SlabFile *file = file_of_slot (self, slot);
  guint64 offset = kv_chunk_slab_slot_offset (self->payload_len, slot - file->first);
  gboolean mapped_store = file->map != NULL && op->kind == KV_FS_OP_STORE;
  /* a mapped record's header is read or written in the mapping */
  guint8 *header = file->map != NULL ? file->map + offset : NULL;
  int fd;

  op->root = file->root;
  op->slab_slot = slot;
  if (file->fd_direct >= 0 && kv_fs_op_is_aligned (op))
    {
      fd = file->fd_direct;
      op->flags |= KV_FS_OP_FLAG_O_DIRECT;
    }
  else
    {
      fd = file->fd;
      op->flags &= ~KV_FS_OP_FLAG_O_DIRECT;
    }
  if (header == NULL)
    {
      g_mutex_lock (&self->lock);
      header = take_header_locked (self, op->kind == KV_FS_OP_STORE);
      g_mutex_unlock (&self->lock);
    }
  if (op->kind == KV_FS_OP_STORE)
    op->sequence = next_sequence (self);
  if (mapped_store)
    {
      kv_fs_slab_init_mapped_store (op, file->map + offset, fd, offset);
      return;
    }
  kv_fs_slab_init_record (op, header, fd, offset);
  if (file->map != NULL)
    {
      /* a slab's load is always checked */
      g_assert (op->kind == KV_FS_OP_LOAD && (op->flags & KV_FS_OP_FLAG_VERIFY));
      op->io_map = header;
      op->io_copy = copy_and_hash_record;
    }
}

/*
 * Merged reads. A load batch that asks for adjacent slots of one slab
 * file reads them with one transfer: the first load of the stretch
 * carries the others (its riders), its vector holds every record's
 * header and payload buffers in slot order, and each record is still
 * checked on its own, so a damaged one fails alone. The riders are never
 * submitted; the carrier's completion reports them, then itself.
 */

/* The most records one transfer reads. */
#define MERGE_MAX_RECORDS (KV_FS_OP_MAX_VEC / 2)

typedef struct
{
  KvFsOpDoneFunc  done;         /* the carrier's own */
  gpointer        done_data;
  gboolean        checked;      /* every record was read and checked */
  guint           n_riders;
  KvFsOp         *riders[MERGE_MAX_RECORDS - 1];
} MergedRead;

/* io_complete of a carrier: each record checked on its own. */
static KvFsOpIoNext
merged_read (KvFsOp *carrier)
{
  MergedRead *merged = carrier->layout_data;

  load_read (carrier);
  for (guint i = 0; i < merged->n_riders; i++)
    load_read (merged->riders[i]);
  merged->checked = TRUE;
  return KV_FS_OP_IO_DONE;
}

/* The carrier's done function: its riders report first, with their own
 * check's outcome, or the transfer's failure when there was no check;
 * the carrier last, since its report may be the job's last and free
 * every op of it. */
static void
merged_read_done (KvFsOp   *carrier,
                  gpointer  user_data)
{
  MergedRead *merged = user_data;
  KvFsOpDoneFunc done = merged->done;
  gpointer done_data = merged->done_data;

  for (guint i = 0; i < merged->n_riders; i++)
    {
      KvFsOp *rider = merged->riders[i];

      if (!merged->checked)
        {
          rider->status = carrier->status;
          rider->error = carrier->error;
        }
      rider->start_us = carrier->start_us;
      rider->end_us = carrier->end_us;
      rider->done (rider, rider->done_data);
    }
  carrier->layout_data = NULL;
  carrier->io_n_vec = 2;   /* its own record, for kv_fs_slab_unpin() */
  carrier->done = done;
  carrier->done_data = done_data;
  g_free (merged);
  done (carrier, done_data);
}

/* Whether @next (made by kv_fs_slab_init_op()) is the record right after
 * @prev's in the same slab file, read the same way. Mapped records are
 * never merged: a copy costs no request, and apart they are copied by
 * several threads at once. */
static gboolean
follows (KvFsSlab     *self,
         const KvFsOp *prev,
         const KvFsOp *next)
{
  return next->kind == KV_FS_OP_LOAD && prev->kind == KV_FS_OP_LOAD &&
         prev->io_map == NULL && next->io_map == NULL &&
         next->slab_slot == prev->slab_slot + 1 &&
         file_of_slot (self, next->slab_slot) == file_of_slot (self, prev->slab_slot) &&
         next->io_fd == prev->io_fd && next->io_offset == prev->io_offset + self->slot_size;
}

/*
 * Merges @ops, loads made by kv_fs_slab_init_op() in the batch's order,
 * where consecutive ones read adjacent slots of one file: the first of
 * each stretch (of at most MERGE_MAX_RECORDS) carries the others. Leaves
 * in @ops the ops to submit, in order, and returns how many; every op
 * of @ops still has its done function called once.
 */
guint
kv_fs_slab_merge_loads (KvFsSlab  *self,
                        KvFsOp   **ops,
                        guint      n_ops)
{
  guint n_out = 0;
  guint i = 0;

  while (i < n_ops)
    {
      KvFsOp *carrier = ops[i];
      guint end = i + 1;
      MergedRead *merged;

      while (end < n_ops && end - i < MERGE_MAX_RECORDS && follows (self, ops[end - 1], ops[end]))
        end++;
      ops[n_out++] = carrier;
      if (end - i > 1)
        {
          merged = g_new0 (MergedRead, 1);
          merged->done = carrier->done;
          merged->done_data = carrier->done_data;
          for (guint k = i + 1; k < end; k++)
            {
              KvFsOp *rider = ops[k];

              merged->riders[merged->n_riders++] = rider;
              carrier->io_vec[carrier->io_n_vec++] = rider->io_vec[0];
              carrier->io_vec[carrier->io_n_vec++] = rider->io_vec[1];
            }
          carrier->io_complete = merged_read;
          carrier->layout_data = merged;
          carrier->done = merged_read_done;
          carrier->done_data = merged;
        }
      i = end;
    }
  return n_out;
}

/* A store into op->slab_slot is over: the slot holds op->key, or (a
 * failure: it may hold part of the chunk, which no check accepts) is
 * free again. */
void
kv_fs_slab_store_done (KvFsSlab *self,
                       KvFsOp   *op,
                       gboolean  success)
{
  guint32 slot = op->slab_slot;
  Slot *s = &self->slots[slot];

  g_mutex_lock (&self->lock);
  give_back_header_locked (self, op);
  g_assert (s->state == SLOT_BUSY);
  if (success)
    {
      /* The index lets one store of a key run at a time. Another slot
       * mapped to the key can only be one the restart scan found and is
       * giving up (the index holds the key already): it frees that slot
       * itself. */
      s->key = kv_key_ref (op->key);
      s->state = SLOT_VALID;
      s->checked = TRUE;
      g_hash_table_replace (self->map, s->key, GUINT_TO_POINTER (slot + 1));
    }
  else
    free_slot_locked (self, slot);
  g_mutex_unlock (&self->lock);
}

/* A slot taken by kv_fs_slab_alloc() is not used after all: free again. */
void
kv_fs_slab_release (KvFsSlab *self,
                    guint32   slot)
{
  g_mutex_lock (&self->lock);
  g_assert (self->slots[slot].state == SLOT_BUSY);
  free_slot_locked (self, slot);
  g_mutex_unlock (&self->lock);
}

/* A load of @key begins: FALSE if no slot holds it. The slot is not
 * written until kv_fs_slab_unpin(). */
gboolean
kv_fs_slab_pin (KvFsSlab    *self,
                const KvKey *key,
                guint32     *out_slot)
{
  gpointer value;
  gboolean found = FALSE;

  g_mutex_lock (&self->lock);
  value = g_hash_table_lookup (self->map, key);
  if (value != NULL)
    {
      *out_slot = GPOINTER_TO_UINT (value) - 1;
      self->slots[*out_slot].readers++;
      found = TRUE;
    }
  g_mutex_unlock (&self->lock);
  return found;
}

/* A load of op->slab_slot (pinned by kv_fs_slab_pin(), made by
 * kv_fs_slab_init_op()) is over: with @loaded, it passed its check;
 * with @drop, it failed it: its key is forgotten and the slot freed once
 * no load reads it. */
void
kv_fs_slab_unpin (KvFsSlab *self,
                  KvFsOp   *op,
                  gboolean  loaded,
                  gboolean  drop)
{
  guint32 slot = op->slab_slot;
  Slot *s = &self->slots[slot];

  g_mutex_lock (&self->lock);
  give_back_header_locked (self, op);
  g_assert (s->readers > 0);
  s->readers--;
  if (loaded && s->state == SLOT_VALID)
    s->checked = TRUE;
  if (drop && s->state == SLOT_VALID)
    {
      unmap_locked (self, s->key, slot);
      s->state = SLOT_DEAD;
    }
  if (s->state == SLOT_DEAD && s->readers == 0)
    free_slot_locked (self, slot);
  g_mutex_unlock (&self->lock);
}

/*
 * A store of @key, which the tier holds in a slot the restart scan found:
 * the scan read only the slot's header, and a slot torn by a crash (its
 * header whole, its payload not) has a valid header, so a store must not
 * be skipped on its word. Frees that slot (unless a load reads it now,
 * which checks it) and returns TRUE: the caller forgets the key in the
 * index and stores it again, into another slot, with a newer sequence
 * number. FALSE when the key's slot was written or checked by this tier.
 */
gboolean
kv_fs_slab_take_unchecked (KvFsSlab    *self,
                           const KvKey *key)
{
  gpointer value;
  gboolean taken = FALSE;

  /* a tier that found no slot on restart holds none: no lock per store */
  if (!g_atomic_int_get (&self->scanned_unchecked))
    return FALSE;
  g_mutex_lock (&self->lock);
  value = g_hash_table_lookup (self->map, key);
  if (value != NULL)
    {
      guint32 slot = GPOINTER_TO_UINT (value) - 1;
      Slot *s = &self->slots[slot];

      if (s->state == SLOT_VALID && !s->checked && s->readers == 0)
        {
          g_hash_table_remove (self->map, key);
          free_slot_locked (self, slot);
          taken = TRUE;
        }
    }
  g_mutex_unlock (&self->lock);
  return taken;
}

/* Where @key's slot is: its slab file's path and the offset of its
 * header there (for inspection and tests). */
gboolean
kv_fs_slab_locate (KvFsSlab     *self,
                   const KvKey  *key,
                   char        **out_path,
                   guint64      *out_offset)
{
  gpointer value;

  g_mutex_lock (&self->lock);
  value = g_hash_table_lookup (self->map, key);
  g_mutex_unlock (&self->lock);
  if (value == NULL)
    return FALSE;
  {
    guint32 slot = GPOINTER_TO_UINT (value) - 1;
    SlabFile *file = file_of_slot (self, slot);

    if (out_path != NULL)
      *out_path = g_strdup (file->path);
    if (out_offset != NULL)
      *out_offset = kv_chunk_slab_slot_offset (self->payload_len, slot - file->first);
  }
  return TRUE;
}

/* Where the record of @op lies, for a message: "<slab file>@<offset>".
 * Made only when a message needs it, not for every op (a store of a
 * 64 KiB chunk spent 3 % of its CPU formatting a name nobody read). */
char *
kv_fs_slab_describe_op (KvFsSlab     *self,
                        const KvFsOp *op)
{
  SlabFile *file;

  if (op->kind != KV_FS_OP_STORE && op->kind != KV_FS_OP_LOAD)
    return g_strdup ("(a slab file's header)");
  file = file_of_slot (self, op->slab_slot);
  return g_strdup_printf ("%s@%" G_GUINT64_FORMAT, file->path,
                          kv_chunk_slab_slot_offset (self->payload_len,
                                                     op->slab_slot - file->first));
}

/* ---- warm restart ------------------------------------------------------- */

/* Headers read per batch: one preadv of this many headers when slots are
 * small enough that reading the payloads between them costs less than
 * one request per header. */
#define SCAN_BATCH_BYTES ((gsize) 4 << 20)


/* Reads the headers of @file's slots [@first, @first + @n) into @buf
 * (KV_CHUNK_HEADER_SIZE each): one large read when the slots are small
 * (the payloads between the headers are read and dropped), else one
 * read per header. Returns FALSE on an I/O error. */
static gboolean
read_headers (KvFsSlab *self,
              SlabFile *file,
              guint32   first,
              guint32   n,
              guint8   *buf,
              guint8   *span)
{
  int fd = file->fd_direct >= 0 ? file->fd_direct : file->fd;
  guint64 start = kv_chunk_slab_slot_offset (self->payload_len, first);

  if (span != NULL)
    {
      gsize len = (gsize) n * self->slot_size;

      if (kv_fs_io_pread_full (fd, span, len, start) != (gssize) len)
        return FALSE;
      for (guint32 i = 0; i < n; i++)
        memcpy (buf + (gsize) i * KV_CHUNK_HEADER_SIZE, span + (gsize) i * self->slot_size,
                KV_CHUNK_HEADER_SIZE);
      return TRUE;
    }
  for (guint32 i = 0; i < n; i++)
    if (kv_fs_io_pread_full (fd, buf + (gsize) i * KV_CHUNK_HEADER_SIZE, KV_CHUNK_HEADER_SIZE,
                             start + (guint64) i * self->slot_size) != KV_CHUNK_HEADER_SIZE)
      return FALSE;
  return TRUE;
}

static int
compare_newest_first (gconstpointer a,
                      gconstpointer b)
{
  const Candidate *ca = a;
  const Candidate *cb = b;

  return ca->sequence < cb->sequence ? 1 : ca->sequence > cb->sequence ? -1 : 0;
}

/* Oldest first; of equal sequence numbers, the first slot first (the
 * scan keeps the first of two equal copies). */
static int
compare_oldest_first (gconstpointer a,
                      gconstpointer b)
{
  const Candidate *ca = a;
  const Candidate *cb = b;

  if (ca->sequence != cb->sequence)
    return ca->sequence < cb->sequence ? -1 : 1;
  return ca->slot < cb->slot ? -1 : ca->slot > cb->slot ? 1 : 0;
}

/*
 * A slot for a store while a restart scan runs and no slot is free: that
 * of the oldest chunk among the slots the scan has read so far (each
 * stretch's are sorted oldest first: one look per stretch). Its chunk,
 * not in the index yet, is dropped (the caller counts it evicted), and
 * any other copy of its key the scan finds is freed. Without this, a full
 * slab refused every store until the whole scan was over, seconds on a
 * large one. FALSE when no scan runs or none of the slots it read is left.
 */
gboolean
kv_fs_slab_take_scanned (KvFsSlab *self,
                         guint32  *out_slot)
{
  FileScan *oldest = NULL;
  Candidate *c;

  g_mutex_lock (&self->lock);
  for (guint i = 0; self->scanned != NULL && i < self->scanned->len; i++)
    {
      FileScan *scan = self->scanned->pdata[i];

      if (scan->next_take < scan->found->len &&
          (oldest == NULL ||
           compare_oldest_first (&g_array_index (scan->found, Candidate, scan->next_take),
                                 &g_array_index (oldest->found, Candidate,
                                                 oldest->next_take)) < 0))
        oldest = scan;
    }
  if (oldest == NULL)
    {
      g_mutex_unlock (&self->lock);
      return FALSE;
    }
  c = &g_array_index (oldest->found, Candidate, oldest->next_take++);
  /* the slot is BUSY (unread slots of an earlier tier's file are): the
   * store's now */
  g_assert (self->slots[c->slot].state == SLOT_BUSY);
  g_hash_table_add (self->taken, g_steal_pointer (&c->key));
  *out_slot = c->slot;
  g_mutex_unlock (&self->lock);
  return TRUE;
}

/* Slots per scan task: the tasks run on a few threads, so that a
 * device sees several header reads at once. */
#define SCAN_TASK_SLOTS 128


/* Reads @scan's slot headers in batches: valid ones become candidates,
 * the others are freed at once (stores may use them while the other
 * slots are read). */
static void
scan_file (gpointer data,
           gpointer user_data)
{
  FileScan *scan = data;
  KvFsSlab *self = scan->slab;
  SlabFile *file = scan->file;
  guint32 batch_slots = MAX (1, SCAN_BATCH_BYTES / self->slot_size);
  /* small slots: read whole stretches of slots, headers and payloads,
   * rather than one request per header */
  gboolean spans = self->slot_size <= 16 * KV_CHUNK_HEADER_SIZE &&
                   (file->fd_direct < 0 || self->slot_size % 4096 == 0);
  guint8 *buf = NULL;
  guint8 *span = NULL;

  if (posix_memalign ((void **) &buf, 4096, (gsize) batch_slots * KV_CHUNK_HEADER_SIZE) != 0 ||
      (spans && posix_memalign ((void **) &span, 4096, (gsize) batch_slots * self->slot_size) != 0))
    g_error ("Cannot allocate the slab scan buffers");

  for (guint32 i = scan->first; i < scan->first + scan->n_slots; i += batch_slots)
    {
      guint32 n = MIN (batch_slots, scan->first + scan->n_slots - i);
      gboolean ok = !g_atomic_int_get (scan->cancel) &&
                    read_headers (self, file, i, n, buf, span);

      for (guint32 k = 0; k < n; k++)
        {
          const guint8 *header = buf + (gsize) k * KV_CHUNK_HEADER_SIZE;
          Candidate c = { NULL, file->first + i + k, 0 };
          KvChunkCheck check = KV_CHUNK_CHECK_SHORT;

          if (ok)
            check = kv_chunk_slot_header_parse (header, self->ns_digest, self->payload_len,
                                                &c.key, &c.sequence, NULL);
          if (check == KV_CHUNK_CHECK_OK)
            {
              g_array_append_val (scan->found, c);
              continue;
            }
          /* never written (zeros) is no damage */
          if (ok && check != KV_CHUNK_CHECK_BAD_MAGIC)
            scan->n_bad++;
          g_mutex_lock (&self->lock);
          free_slot_locked (self, c.slot);
          g_mutex_unlock (&self->lock);
        }
    }
  free (buf);
  free (span);

  /* a store with no free slot may take the oldest of them from now on */
  g_array_sort (scan->found, compare_oldest_first);
  g_mutex_lock (&self->lock);
  if (self->scanned != NULL)
    g_ptr_array_add (self->scanned, scan);
  g_mutex_unlock (&self->lock);
}

/*
 * Rebuilds the index from the slot headers of slab files of an earlier
 * tier (headers only: payloads are checked when loaded), in stretches of
 * SCAN_TASK_SLOTS slots read by a few threads at once.
 * Slots that hold no valid header are freed as they are read, so stores
 * go on meanwhile; of two slots of one key the higher sequence number
 * wins and the other is freed; the winners go into @index, oldest in the
 * eviction order, unless a store of the key came first. While the slots
 * are read, a store that finds no free slot takes one already read
 * (kv_fs_slab_take_scanned()). @read_done, if not NULL, is called once
 * every slot is read, before the index gets the keys (a test hook).
 * Returns the chunks added; *@out_n_bad counts slots that held a damaged
 * header (not those never written).
 */
guint64
kv_fs_slab_scan (KvFsSlab         *self,
                 KvFsIndex        *index,
                 const gint       *cancel,
                 KvFsSlabScanHook  read_done,
                 gpointer          read_done_data,
                 guint64          *out_n_bad)
{
  g_autoptr(GHashTable) taken = NULL;
  g_autoptr(GHashTable) best = g_hash_table_new (kv_key_hash, kv_key_equal);  /* → Candidate * */
  g_autoptr(GArray) found = g_array_new (FALSE, FALSE, sizeof (Candidate));
  g_autoptr(GArray) scans = g_array_new (FALSE, TRUE, sizeof (FileScan));
  GThreadPool *pool;
  guint64 n_added = 0;
  guint64 n_bad = 0;
  guint64 max_sequence = 0;

  /* in file order, so that of two copies of equal sequence numbers the
   * first stays */
  for (guint f = 0; f < self->n_files; f++)
    for (guint32 i = 0; self->files[f].existed && i < self->files[f].n_slots;
         i += SCAN_TASK_SLOTS)
      {
        FileScan scan = { 0 };

        scan.slab = self;
        scan.file = &self->files[f];
        scan.first = i;
        scan.n_slots = MIN (SCAN_TASK_SLOTS, self->files[f].n_slots - i);
        scan.cancel = cancel;
        scan.found = g_array_new (FALSE, FALSE, sizeof (Candidate));
        g_array_append_val (scans, scan);
      }
  /* (scans holds every stretch now: their addresses stay) */
  g_mutex_lock (&self->lock);
  self->scanned = g_ptr_array_new ();
  self->taken = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                       (GDestroyNotify) kv_key_unref, NULL);
  g_mutex_unlock (&self->lock);

  pool = g_thread_pool_new (scan_file, NULL, MIN (8, MAX (scans->len, 1)), TRUE, NULL);
  for (guint t = 0; t < scans->len; t++)
    g_thread_pool_push (pool, &g_array_index (scans, FileScan, t), NULL);
  g_thread_pool_free (pool, FALSE, TRUE);
  if (read_done != NULL)
    read_done (read_done_data);

  /* no store takes a scanned slot from here on: the candidates are this
   * thread's again */
  g_mutex_lock (&self->lock);
  g_clear_pointer (&self->scanned, g_ptr_array_unref);
  taken = g_steal_pointer (&self->taken);
  g_mutex_unlock (&self->lock);

  /* of two copies of a key, the newer stays */
  for (guint t = 0; t < scans->len; t++)
    {
      FileScan *scan = &g_array_index (scans, FileScan, t);

      for (guint i = 0; i < scan->found->len; i++)
        {
          Candidate *c = &g_array_index (scan->found, Candidate, i);
          Candidate *other;
          guint32 loser;

          max_sequence = MAX (max_sequence, c->sequence);
          if (c->key == NULL)
            continue;  /* a store took the slot */
          if (g_hash_table_contains (taken, c->key))
            {
              /* another copy of a key whose slot a store took: gone too */
              g_clear_pointer (&c->key, kv_key_unref);
              g_mutex_lock (&self->lock);
              free_slot_locked (self, c->slot);
              g_mutex_unlock (&self->lock);
              continue;
            }
          other = g_hash_table_lookup (best, c->key);
          if (other == NULL)
            {
              g_hash_table_insert (best, c->key, c);
              continue;
            }
          loser = c->slot;
          if (c->sequence > other->sequence)
            {
              loser = other->slot;
              other->slot = c->slot;
              other->sequence = c->sequence;
            }
          g_clear_pointer (&c->key, kv_key_unref);
          g_mutex_lock (&self->lock);
          free_slot_locked (self, loser);
          g_mutex_unlock (&self->lock);
        }
      n_bad += scan->n_bad;
    }
  g_hash_table_remove_all (best);
  for (guint t = 0; t < scans->len; t++)
    {
      FileScan *scan = &g_array_index (scans, FileScan, t);

      for (guint i = 0; i < scan->found->len; i++)
        {
          Candidate *c = &g_array_index (scan->found, Candidate, i);

          if (c->key != NULL)
            g_array_append_val (found, *c);
        }
      g_array_unref (scan->found);
    }

  raise_sequence (self, max_sequence);

  /* Oldest first in the eviction order: the newest go in first, each
   * then ahead of the ones before. */
  g_array_sort (found, compare_newest_first);
  for (guint i = 0; i < found->len; i++)
    {
      Candidate *c = &g_array_index (found, Candidate, i);
      Slot *s = &self->slots[c->slot];
      gboolean mapped = FALSE;

      /* The slot is mapped before the index holds the key, so that a
       * store that evicts the key at once finds its slot. */
      g_mutex_lock (&self->lock);
      if (!g_atomic_int_get (cancel) && !g_hash_table_contains (self->map, c->key))
        {
          /* before the key can be found: see kv_fs_slab_take_unchecked() */
          g_atomic_int_set (&self->scanned_unchecked, TRUE);
          s->key = kv_key_ref (c->key);
          s->state = SLOT_VALID;
          s->checked = FALSE;
          g_hash_table_insert (self->map, s->key, GUINT_TO_POINTER (c->slot + 1));
          mapped = TRUE;
        }
      else
        free_slot_locked (self, c->slot);
      g_mutex_unlock (&self->lock);

      if (mapped && kv_fs_index_add_scanned (index, c->key, file_of_slot (self, c->slot)->root,
                                             self->slot_size))
        n_added++;
      else if (mapped)
        {
          /* stored again since the tier started: that copy is newer */
          g_mutex_lock (&self->lock);
          unmap_locked (self, c->key, c->slot);
          if (s->readers == 0)
            free_slot_locked (self, c->slot);
          else
            s->state = SLOT_DEAD;
          g_mutex_unlock (&self->lock);
        }
      kv_key_unref (c->key);
    }
  if (out_n_bad != NULL)
    *out_n_bad = n_bad;
  return n_added;
}
