/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-uring-engine.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "kv-fs-crc32c.h"

/*
 * The io_uring engine. One thread owns the ring and drives every op as a
 * small state machine of asynchronous requests:
 *
 *   store: openat(dir, tmp, O_EXCL|O_DIRECT) → writev(header, payload)
 *          → [fsetxattr(vLLM's file checksum)] → [fsync(DATASYNC)] → close
 *          → renameat(dir, tmp, dir, final) → [fsync(dir)]
 *   store over an evicted chunk's file: renameat(victim, tmp) →
 *          openat(tmp, O_DIRECT) → write_fixed header + write_fixed
 *          payload (overwrites, in flight together) → ... as above; a
 *          victim that cannot be taken over is unlinked and a new file
 *          created
 *   load:  openat(final, O_DIRECT) → read_fixed header + read_fixed
 *          payload (in flight together) → close → check (on this thread)
 *          → [unlinkat if corrupt]
 *   delete: unlinkat
 *   bytes at an offset (KV_FS_OP_FLAG_AT_OFFSET, layout=slab): [the
 *          layout's prepare hook (checksum pool)] → one readv or writev
 *          of the whole vector (a single buffer: one read or write, fixed
 *          where it lies in the primary) → [fsync(DATASYNC)] → the layout's complete
 *          hook (on this thread), which may ask for the vector again;
 *          nothing opened, closed or renamed; a mapped op (a slab on a
 *          memory-backed root) is copied whole on the checksum pool
 *
 * Every path is a name in a directory held open (see
 * kv_fs_op_open_dirs(): the kvtier layout's shard directories stay open
 * for the tier's life, vLLM's are opened, without following links, when
 * the op starts), never a path walked from the root again.
 *
 * The primary buffer is registered with the ring (fixed buffers, split
 * in pieces of at most 1 GiB on slot boundaries) together with a pool of
 * 4096-byte header buffers, so loads move payloads from the device into
 * the slots by DMA, copied by no CPU, without pinning pages per request.
 * A store writes header and payload with one writev instead: a new file
 * grows with each write and ext4 serializes extending O_DIRECT writes, so
 * one request beats two (headerless vLLM-layout stores use write_fixed).
 * Requests that cannot complete without blocking (creating, extending,
 * renaming, unlinking files) go straight to io-wq workers (IOSQE_ASYNC),
 * so this thread never stalls inside the filesystem. Nor does it read
 * payloads: a store's checksum, when its slot does not carry it (see
 * kv_host_buffer_get_slot_checksum()), is computed from the whole
 * payload on a small pool of threads, which hands the store back when
 * its header is ready; this thread alone would otherwise cap small-chunk
 * stores on a fast disk. Loads are taken
 * from the queues ahead of stores. Other threads hand over work through
 * the base class queues and wake the ring through an eventfd it reads.
 *
 * liburing 2.3 has no IO_URING_VERSION macros; the opcodes this engine
 * needs are probed when it starts, and `io-engine=auto` falls back to
 * the thread pool when one is missing.
 */

#define WAKE_TOKEN ((guint64) 1)
#define TAG_STEP   0
#define TAG_HEADER 1
#define TAG_BODY   2
#define TAG_BOTH   3
#define TAG_PART   4   /* the request of one buffer of an AT_OFFSET op */
#define TAG_VEC    5   /* the one request of a whole AT_OFFSET vector */
#define TAG_MASK   ((guintptr) 7)
#define MAX_FIXED_PIECE ((gsize) 1 << 30)

typedef enum {
  ST_OPEN,
  ST_IO,
  ST_SYNC,
  ST_CLOSE,
  ST_RENAME,
  ST_DIR_SYNC,
  ST_FAIL_CLOSE,
  ST_UNLINK,
  ST_TAKE_OVER,
  ST_GIVE_UP_REUSE,
  ST_XATTR,
  ST_DONE,
} OpState;

/* One buffer of an AT_OFFSET op's vector: a request's user data. */
typedef struct
{
  KvFsOp *op;
  gsize   done;            /* bytes moved in this round */
} VecPart;

/* the tags live in the low bits of the pointers */
G_STATIC_ASSERT (G_ALIGNOF (KvFsOp) > TAG_MASK && G_ALIGNOF (VecPart) > TAG_MASK);

/* Per-op engine state, in op->engine_data. */
typedef struct
{
  int      header_index;   /* in the header pool */
  int      err;            /* first error seen */
  gboolean o_direct;
  gboolean retried_parent;
  gsize    header_done;    /* store: bytes written so far */
  gsize    body_done;
  gsize    round_start;    /* header_done + body_done when the writes went out */
  struct iovec iov[2];     /* store: header + payload in one writev */
  gboolean xattr_done;     /* store: vLLM's file checksum set (or not needed) */
  guint32  crc_be;         /* its value, while the request is in flight */
  VecPart  parts[KV_FS_OP_MAX_VEC];  /* AT_OFFSET */
  guint    vec_first;      /* AT_OFFSET: the first part the readv/writev moves */
  struct iovec vec_iov[KV_FS_OP_MAX_VEC];  /* ...and its vector */
} OpData;

struct _KvFsUringEngine
{
  KvFsEngine      parent_instance;

  struct io_uring ring;
  gboolean        ring_ready;
  int             wake_fd;
  guint64         wake_value;
  GThread        *thread;

  /* fixed buffers: pieces of the primary, then the header pool */
  gboolean        fixed;
  guint8         *base;
  gsize           base_size;
  gsize           piece_size;
  guint           n_pieces;

  guint8         *headers;
  guint           n_headers;
  int            *free_headers;
  guint           n_free_headers;

  OpData         *op_data;        /* one per header slot */
  GThreadPool    *checksum_pool;  /* stores whose header to fill... */
  GAsyncQueue    *checksummed;    /* ...and then back to this thread */
  guint           n_active;
  gint            stop_requested; /* (atomic) */
  gboolean        have_fsetxattr; /* the kernel has IORING_OP_FSETXATTR */
};

G_DEFINE_FINAL_TYPE (KvFsUringEngine, kv_fs_uring_engine, KV_TYPE_FS_ENGINE)

static struct io_uring_sqe *
get_sqe (KvFsUringEngine *self)
{
  struct io_uring_sqe *sqe;

  while ((sqe = io_uring_get_sqe (&self->ring)) == NULL)
    io_uring_submit (&self->ring);
  return sqe;
}

static void
arm_wake (KvFsUringEngine *self)
{
  struct io_uring_sqe *sqe = get_sqe (self);

  io_uring_prep_read (sqe, self->wake_fd, &self->wake_value, sizeof self->wake_value, 0);
  io_uring_sqe_set_data64 (sqe, WAKE_TOKEN);
}

static void
set_op (struct io_uring_sqe *sqe,
        KvFsOp              *op,
        guintptr             tag)
{
  io_uring_sqe_set_data64 (sqe, (guint64) ((guintptr) op | tag));
}

/* Index of the registered piece that holds [ptr, ptr + len), or -1. */
static int
fixed_index (KvFsUringEngine *self,
             const guint8    *ptr,
             gsize            len)
{
  gsize offset;
  gsize piece;

  if (!self->fixed || self->base == NULL || ptr < self->base ||
      ptr + len > self->base + self->base_size)
    return -1;
  offset = ptr - self->base;
  piece = offset / self->piece_size;
  if (offset + len > (piece + 1) * self->piece_size)
    return -1;
  return (int) piece;
}

static const KvFsLayout *
layout_of (KvFsUringEngine *self)
{
  return _kv_fs_engine_get_config (KV_FS_ENGINE (self))->layout;
}

static void
prep_rw (KvFsUringEngine *self,
         KvFsOp          *op,
         gboolean         write,
         guint8          *buf,
         gsize            len,
         off_t            offset,
         int              buf_index,
         guintptr         tag)
{
  struct io_uring_sqe *sqe = get_sqe (self);

  if (buf_index >= 0)
    {
      if (write)
        io_uring_prep_write_fixed (sqe, op->fd, buf, len, offset, buf_index);
      else
        io_uring_prep_read_fixed (sqe, op->fd, buf, len, offset, buf_index);
    }
  else if (write)
    io_uring_prep_write (sqe, op->fd, buf, len, offset);
  else
    io_uring_prep_read (sqe, op->fd, buf, len, offset);
  set_op (sqe, op, tag);
}

static int
header_fixed_index (KvFsUringEngine *self)
{
  return self->fixed ? (int) self->n_pieces : -1;
}

static void
op_release (KvFsUringEngine *self,
            KvFsOp          *op)
{
  OpData *data = op->engine_data;

  self->free_headers[self->n_free_headers++] = data->header_index;
  op->engine_data = NULL;
  if (!(op->flags & KV_FS_OP_FLAG_AT_OFFSET))
    op->header = NULL;
  self->n_active--;
  _kv_fs_engine_finish (KV_FS_ENGINE (self), op);
}

static void
op_finish_error (KvFsUringEngine *self,
                 KvFsOp          *op,
                 int              err)
{
  if (err == ECANCELED)
    op->status = KV_FS_OP_STATUS_CANCELLED;
  else if (err == ENOENT && op->kind == KV_FS_OP_LOAD)
    op->status = KV_FS_OP_STATUS_NOT_FOUND;
  else
    op->status = KV_FS_OP_STATUS_IO_ERROR;
  op->error = err;
  op_release (self, op);
}

static void
submit_open (KvFsUringEngine *self,
             KvFsOp          *op)
{
  OpData *data = op->engine_data;
  struct io_uring_sqe *sqe = get_sqe (self);
  gboolean write = op->kind != KV_FS_OP_LOAD;
  int flags = kv_fs_op_open_flags (op, write);

  if (!data->o_direct)
    flags &= ~O_DIRECT;
  if (op->reused)
    flags &= ~(O_CREAT | O_EXCL);
  op->state = ST_OPEN;
  if (write)
    io_uring_prep_openat (sqe, op->tmp_dir_fd, op->tmp_name, flags, 0600);
  else
    io_uring_prep_openat (sqe, op->dir_fd, op->name, flags, 0);
  /* Creating a file (inode allocation, journal) may take long: straight
   * to an io-wq worker, never inline on this thread, which must keep
   * submitting and reaping. Opening an existing file stays inline. */
  if (write && !op->reused)
    io_uring_sqe_set_flags (sqe, IOSQE_ASYNC);
  set_op (sqe, op, TAG_STEP);
}

static void
submit_close (KvFsUringEngine *self,
              KvFsOp          *op,
              int              fd,
              OpState          state)
{
  struct io_uring_sqe *sqe = get_sqe (self);

  op->state = state;
  io_uring_prep_close (sqe, fd);
  set_op (sqe, op, TAG_STEP);
}

static void
submit_unlink (KvFsUringEngine *self,
               KvFsOp          *op,
               int              dir_fd,
               const char      *name)
{
  struct io_uring_sqe *sqe = get_sqe (self);

  op->state = ST_UNLINK;
  io_uring_prep_unlinkat (sqe, dir_fd, name, 0);
  io_uring_sqe_set_flags (sqe, IOSQE_ASYNC);
  set_op (sqe, op, TAG_STEP);
}

static void
submit_io (KvFsUringEngine *self,
           KvFsOp          *op)
{
  OpData *data = op->engine_data;
  gboolean write = op->kind != KV_FS_OP_LOAD;
  gboolean has_header = (op->flags & KV_FS_OP_FLAG_HEADER) || op->kind == KV_FS_OP_PROBE;
  gsize header_len = has_header ? KV_CHUNK_HEADER_SIZE : 0;

  op->state = ST_IO;
  op->n_pending = 0;
  data->round_start = data->header_done + data->body_done;

  /* A new file grows with every write, and ext4 runs extending O_DIRECT
   * writes one at a time (and off the ring, in io-wq): header and payload
   * go out as one writev, a single request. A taken-over file has its
   * blocks already: its two fixed-buffer writes overwrite them together,
   * without leaving the ring. */
  if (write && has_header && !op->reused && op->payload_len > 0 &&
      data->header_done == 0 && data->body_done == 0)
    {
      struct io_uring_sqe *sqe = get_sqe (self);

      data->iov[0] = (struct iovec) { op->header, KV_CHUNK_HEADER_SIZE };
      data->iov[1] = (struct iovec) { op->payload, op->payload_len };
      io_uring_prep_writev (sqe, op->fd, data->iov, 2, 0);
      io_uring_sqe_set_flags (sqe, IOSQE_ASYNC);
      set_op (sqe, op, TAG_BOTH);
      op->n_pending = 1;
      return;
    }
  if (has_header && data->header_done < KV_CHUNK_HEADER_SIZE)
    {
      prep_rw (self, op, write, op->header + data->header_done,
               KV_CHUNK_HEADER_SIZE - data->header_done, data->header_done,
               data->header_done == 0 ? header_fixed_index (self) : -1, TAG_HEADER);
      op->n_pending++;
    }
  if (op->payload_len > data->body_done)
    {
      int index = data->body_done == 0 ? fixed_index (self, op->payload, op->payload_len) : -1;

      prep_rw (self, op, write, op->payload + data->body_done,
               op->payload_len - data->body_done,
               header_len + data->body_done,
               index, TAG_BODY);
      op->n_pending++;
    }
  if (op->n_pending == 0)
    submit_close (self, op, op->fd, ST_CLOSE);
}

/* AT_OFFSET: the rest of the vector as one readv/writev when it is two
 * buffers or more, the parts before @first moved and none after it begun
 * (always so: the parts only move one request at a time). One request
 * per record, not one per buffer: a slab store's header and payload
 * reach the device as one write, and a merged load of N slots is one
 * read instead of 2 × N. The payload is then not a fixed buffer (its
 * pages are pinned per request), which costs less than the request it
 * saves (fs-throughput, 64 KiB slab: store CPU 0.28 → 0.20 s/GB, load
 * 0.37 → 0.30). */
static gboolean
submit_vec_as_one (KvFsUringEngine *self,
                   KvFsOp          *op,
                   guint            first,
                   guint64          offset)
{
  OpData *data = op->engine_data;
  struct io_uring_sqe *sqe;
  guint n = 0;

  for (guint i = first; i < op->io_n_vec; i++)
    {
      gsize done = data->parts[i].done;

      if (i > first && done > 0)
        return FALSE;
      if (op->io_vec[i].iov_len == done)
        continue;
      data->vec_iov[n].iov_base = (guint8 *) op->io_vec[i].iov_base + done;
      data->vec_iov[n].iov_len = op->io_vec[i].iov_len - done;
      n++;
    }
  if (n < 2)
    return FALSE;
  sqe = get_sqe (self);
  offset += data->parts[first].done;
  if (op->io_write)
    io_uring_prep_writev (sqe, op->io_fd, data->vec_iov, n, offset);
  else
    io_uring_prep_readv (sqe, op->io_fd, data->vec_iov, n, offset);
  data->vec_first = first;
  set_op (sqe, op, TAG_VEC);
  op->n_pending = 1;
  return TRUE;
}

/* AT_OFFSET: every buffer of the vector not moved yet in this round, at
 * its place after the ones before it: one vectored request (above), or
 * a request per buffer, all in flight together, fixed where the buffer
 * lies in the registered primary. */
static void
submit_vec (KvFsUringEngine *self,
            KvFsOp          *op)
{
  OpData *data = op->engine_data;
  guint64 offset = op->io_offset;
  guint first = 0;

  op->state = ST_IO;
  op->n_pending = 0;
  while (first < op->io_n_vec && data->parts[first].done == op->io_vec[first].iov_len)
    offset += op->io_vec[first++].iov_len;
  if (submit_vec_as_one (self, op, first, offset))
    return;
  for (guint i = first; i < op->io_n_vec; i++)
    {
      VecPart *part = &data->parts[i];
      guint8 *buf = (guint8 *) op->io_vec[i].iov_base + part->done;
      gsize len = op->io_vec[i].iov_len - part->done;
      struct io_uring_sqe *sqe;
      int index;

      if (len == 0)
        {
          offset += op->io_vec[i].iov_len;
          continue;
        }
      sqe = get_sqe (self);
      index = fixed_index (self, buf, len);
      if (index >= 0 && op->io_write)
        io_uring_prep_write_fixed (sqe, op->io_fd, buf, len, offset + part->done, index);
      else if (index >= 0)
        io_uring_prep_read_fixed (sqe, op->io_fd, buf, len, offset + part->done, index);
      else if (op->io_write)
        io_uring_prep_write (sqe, op->io_fd, buf, len, offset + part->done);
      else
        io_uring_prep_read (sqe, op->io_fd, buf, len, offset + part->done);
      io_uring_sqe_set_data64 (sqe, (guint64) ((guintptr) part | TAG_PART));
      op->n_pending++;
      offset += op->io_vec[i].iov_len;
    }
}

static void at_offset_transferred (KvFsUringEngine *self,
                                   KvFsOp          *op);

/* AT_OFFSET: the vector is to move (again) from its start. */
static void
start_vec (KvFsUringEngine *self,
           KvFsOp          *op)
{
  OpData *data = op->engine_data;

  for (guint i = 0; i < KV_FS_OP_MAX_VEC; i++)
    data->parts[i] = (VecPart) { op, 0 };
  submit_vec (self, op);
  if (op->n_pending == 0)
    at_offset_transferred (self, op);   /* an empty vector */
}

/* AT_OFFSET: the whole vector moved (and was synced): the layout's hook
 * (on this thread: a load's check costs less here than two hand-overs to
 * the pool and back) says whether it is over. */
static void
at_offset_transferred (KvFsUringEngine *self,
                       KvFsOp          *op)
{
  if (op->io_complete == NULL)
    op->status = KV_FS_OP_STATUS_OK;
  else if (op->io_complete (op) == KV_FS_OP_IO_AGAIN)
    {
      start_vec (self, op);
      return;
    }
  op_release (self, op);
}

static void submit_take_over (KvFsUringEngine *self,
                              KvFsOp          *op);

static void kv_fs_uring_engine_kick (KvFsEngine *engine);

static void
continue_op (KvFsUringEngine *self,
             KvFsOp          *op)
{
  /* back from the checksum pool: the layout prepared its bytes, or a
   * mapped op was copied there whole */
  if (op->flags & KV_FS_OP_FLAG_AT_OFFSET)
    {
      if (op->io_map != NULL)
        op_release (self, op);
      else
        start_vec (self, op);
      return;
    }
  if (op->reuse_path != NULL && !kv_fs_op_reuse_in_place (op))
    submit_take_over (self, op);
  else
    submit_open (self, op);
}

/* On a pool thread: fills the header of store @data (or runs its
 * layout's prepare hook), then hands it back to the ring, waking
 * it when the queue was empty (otherwise a wake-up is already on its
 * way). */
static void
checksum_func (gpointer data,
               gpointer user_data)
{
  KvFsOp *op = data;
  KvFsUringEngine *self = user_data;
  gint queued;

  if (op->flags & KV_FS_OP_FLAG_AT_OFFSET && op->io_map != NULL)
    kv_fs_op_run_at_offset (op);
  else if (op->flags & KV_FS_OP_FLAG_AT_OFFSET)
    op->io_prepare (op);
  else
    kv_fs_op_prepare_header (op);
  g_async_queue_lock (self->checksummed);
  g_async_queue_push_unlocked (self->checksummed, op);
  queued = g_async_queue_length_unlocked (self->checksummed);
  g_async_queue_unlock (self->checksummed);
  if (queued == 1)
    kv_fs_uring_engine_kick (KV_FS_ENGINE (self));
}

/* AT_OFFSET: the file is open already; the layout's prepare hook (which
 * may read the whole payload) runs on the checksum pool, then the
 * vector goes out. A mapped op is a copy, which the pool makes whole:
 * this thread never copies. Its header slot only counts it among the
 * ops running. */
static void
start_at_offset_op (KvFsUringEngine *self,
                    KvFsOp          *op)
{
  int header_index = self->free_headers[--self->n_free_headers];
  OpData *data = &self->op_data[header_index];

  memset (data, 0, sizeof *data);
  data->header_index = header_index;
  op->engine_data = data;
  self->n_active++;
  if (op->io_prepare != NULL || op->io_map != NULL)
    g_thread_pool_push (self->checksum_pool, op, NULL);
  else
    start_vec (self, op);
}

static void
start_op (KvFsUringEngine *self,
          KvFsOp          *op)
{
  OpData *data;
  struct stat st;
  int header_index;
  int err;

  if (_kv_fs_engine_take_injected (KV_FS_ENGINE (self), op))
    {
      _kv_fs_engine_finish (KV_FS_ENGINE (self), op);
      return;
    }
  if (op->flags & KV_FS_OP_FLAG_AT_OFFSET)
    {
      start_at_offset_op (self, op);
      return;
    }
  /* a lookup in a held-open shard directory, or (vLLM's layout) a few
   * openat() of cached directory names */
  err = kv_fs_op_open_dirs (op, layout_of (self));
  if (err != 0)
    {
      op->error = err;
      op->status = op->kind == KV_FS_OP_DELETE && err == ENOENT ? KV_FS_OP_STATUS_OK :
                   op->kind != KV_FS_OP_STORE && err == ENOENT ? KV_FS_OP_STATUS_NOT_FOUND :
                   KV_FS_OP_STATUS_IO_ERROR;
      _kv_fs_engine_finish (KV_FS_ENGINE (self), op);
      return;
    }
  if (op->kind == KV_FS_OP_STORE && (op->flags & KV_FS_OP_FLAG_SKIP_EXISTING) &&
      fstatat (op->dir_fd, op->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
    {
      op->status = KV_FS_OP_STATUS_EXISTS;
      _kv_fs_engine_finish (KV_FS_ENGINE (self), op);
      return;
    }

  header_index = self->free_headers[--self->n_free_headers];
  data = &self->op_data[header_index];
  memset (data, 0, sizeof *data);
  data->header_index = header_index;
  data->o_direct = (op->flags & KV_FS_OP_FLAG_O_DIRECT) != 0;
  op->engine_data = data;
  op->header = self->headers + (gsize) header_index * KV_CHUNK_HEADER_SIZE;
  op->fd = -1;
  self->n_active++;

  if (op->kind == KV_FS_OP_DELETE)
    {
      submit_unlink (self, op, op->dir_fd, op->name);
      return;
    }
  if (op->kind != KV_FS_OP_LOAD)
    {
      kv_fs_op_make_temp (op);
      /* The checksums read the whole slot: on the pool (see above),
       * unless the slot carried it. */
      if (op->kind == KV_FS_OP_STORE &&
          (((op->flags & KV_FS_OP_FLAG_HEADER) && !op->has_payload_checksum) ||
           (op->flags & KV_FS_OP_FLAG_FILE_CRC32C)))
        {
          g_thread_pool_push (self->checksum_pool, op, NULL);
          return;
        }
      kv_fs_op_prepare_header (op);
    }
  continue_op (self, op);
}

/* Renames the evicted chunk's file op->reuse_path to op->tmp_path. */
static void
submit_take_over (KvFsUringEngine *self,
                  KvFsOp          *op)
{
  struct io_uring_sqe *sqe = get_sqe (self);

  op->state = ST_TAKE_OVER;
  io_uring_prep_renameat (sqe, op->reuse_dir_fd, op->reuse_name, op->tmp_dir_fd, op->tmp_name, 0);
  io_uring_sqe_set_flags (sqe, IOSQE_ASYNC);
  set_op (sqe, op, TAG_STEP);
}

/* The evicted chunk's file could not be taken over: removes it (it must
 * not outlive its index entry; @name in @dir_fd: its old name, or the
 * temporary name it was renamed to), then the store creates a new file. */
static void
submit_give_up_reuse (KvFsUringEngine *self,
                      KvFsOp          *op,
                      int              dir_fd,
                      const char      *name)
{
  struct io_uring_sqe *sqe = get_sqe (self);

  op->reused = FALSE;
  op->state = ST_GIVE_UP_REUSE;
  io_uring_prep_unlinkat (sqe, dir_fd, name, 0);
  io_uring_sqe_set_flags (sqe, IOSQE_ASYNC);
  set_op (sqe, op, TAG_STEP);
}

static void fail_with_cleanup (KvFsUringEngine *self,
                               KvFsOp          *op,
                               int              err);

/* After the data went out: vLLM's file checksum, sync, close, publish. */
static void
store_after_io (KvFsUringEngine *self,
                KvFsOp          *op)
{
  OpData *data = op->engine_data;

  if (op->has_file_crc32c && !data->xattr_done)
    {
      data->xattr_done = TRUE;
      if (self->have_fsetxattr)
        {
          struct io_uring_sqe *sqe = get_sqe (self);

          data->crc_be = GUINT32_TO_BE (op->file_crc32c);
          op->state = ST_XATTR;
          io_uring_prep_fsetxattr (sqe, op->fd, KV_FS_VLLM_CRC32C_XATTR,
                                   (const char *) &data->crc_be, 0, sizeof data->crc_be);
          io_uring_sqe_set_flags (sqe, IOSQE_ASYNC);
          set_op (sqe, op, TAG_STEP);
          return;
        }
      /* an older kernel: on this thread */
      {
        int err = kv_fs_op_write_file_checksum (op, op->fd);

        if (err != 0)
          {
            fail_with_cleanup (self, op, err);
            return;
          }
      }
    }
  if (op->flags & (KV_FS_OP_FLAG_DATASYNC | KV_FS_OP_FLAG_DIRSYNC))
    {
      struct io_uring_sqe *sqe = get_sqe (self);

      op->state = ST_SYNC;
      io_uring_prep_fsync (sqe, op->fd, IORING_FSYNC_DATASYNC);
      set_op (sqe, op, TAG_STEP);
      return;
    }
  submit_close (self, op, op->fd, ST_CLOSE);
}

static void
fail_with_cleanup (KvFsUringEngine *self,
                   KvFsOp          *op,
                   int              err)
{
  OpData *data = op->engine_data;

  if (data->err == 0)
    data->err = err;
  /* (an AT_OFFSET op's file is its layout's: op->fd is -1) */
  if (op->fd >= 0)
    {
      int fd = op->fd;

      op->fd = -1;
      submit_close (self, op, fd, ST_FAIL_CLOSE);
      return;
    }
  if (op->kind != KV_FS_OP_LOAD && op->tmp_path != NULL)
    {
      submit_unlink (self, op, op->tmp_dir_fd, op->tmp_name);
      return;
    }
  op_finish_error (self, op, data->err);
}

static void
handle_open (KvFsUringEngine *self,
             KvFsOp          *op,
             int              res)
{
  OpData *data = op->engine_data;
  gboolean write = op->kind != KV_FS_OP_LOAD;

  if (res >= 0 && op->reused && kv_fs_op_fit_taken_over (op, res) != 0)
    {
      close (res);
      submit_give_up_reuse (self, op, op->tmp_dir_fd, op->tmp_name);
      return;
    }
  /* another user's file under a chunk's name (an fstat of an open file
   * costs less than a request) */
  if (res >= 0 && !write && !kv_fs_op_trusts_file (op, layout_of (self), res))
    {
      close (res);
      op->status = KV_FS_OP_STATUS_FOREIGN;
      op_release (self, op);
      return;
    }
  if (res >= 0)
    {
      op->fd = res;
      submit_io (self, op);
      return;
    }
  if (res == -EINVAL && data->o_direct)
    {
      /* This filesystem refuses O_DIRECT here: buffered. */
      data->o_direct = FALSE;
      submit_open (self, op);
      return;
    }
  if (op->reused)
    {
      submit_give_up_reuse (self, op, op->tmp_dir_fd, op->tmp_name);
      return;
    }
  if (res == -ENOENT && write && !data->retried_parent)
    {
      int err;

      /* The directory held open was removed (the root deleted under the
       * tier): made again, synchronously, once per removal. */
      data->retried_parent = TRUE;
      err = kv_fs_op_reopen_dirs (op, layout_of (self));
      if (err == 0)
        {
          kv_fs_op_make_temp (op);
          submit_open (self, op);
          return;
        }
      res = -err;
    }
  if (write)
    {
      /* O_EXCL: nothing was created, nothing to remove. */
      g_clear_pointer (&op->tmp_path, g_free);
    }
  fail_with_cleanup (self, op, -res);
}

static void
handle_io (KvFsUringEngine *self,
           KvFsOp          *op,
           guintptr         tag,
           int              res)
{
  OpData *data = op->engine_data;
  gboolean write = op->kind != KV_FS_OP_LOAD;

  if (res < 0)
    {
      if (data->err == 0)
        data->err = -res;
    }
  else if (tag == TAG_BOTH)
    {
      gsize n = res;

      data->header_done = MIN (n, KV_CHUNK_HEADER_SIZE);
      data->body_done = n - data->header_done;
    }
  else if (tag == TAG_HEADER)
    {
      if (write)
        data->header_done += res;
      else
        op->got_header = res;
    }
  else
    {
      if (write)
        data->body_done += res;
      else
        op->got_payload = res;
    }

  if (--op->n_pending > 0)
    return;

  if (data->err != 0)
    {
      fail_with_cleanup (self, op, data->err);
      return;
    }
  if (!write)
    {
      int fd = op->fd;
      /* vLLM's file checksum attribute: one getxattr of an inode just
       * read, on this thread like the check that uses it */
      int err = kv_fs_op_read_file_checksum (op, fd);

      if (err != 0)
        {
          fail_with_cleanup (self, op, err);
          return;
        }
      op->fd = -1;
      submit_close (self, op, fd, ST_CLOSE);
      return;
    }
  /* A short write (a full disk, usually) continues where it stopped;
   * a second short write reports the disk's error. */
  if (data->header_done < ((op->flags & KV_FS_OP_FLAG_HEADER) || op->kind == KV_FS_OP_PROBE ?
                           KV_CHUNK_HEADER_SIZE : 0) ||
      data->body_done < op->payload_len)
    {
      if (data->header_done + data->body_done == data->round_start)
        {
          fail_with_cleanup (self, op, ENOSPC);
          return;
        }
      submit_io (self, op);
      return;
    }
  store_after_io (self, op);
}

/* AT_OFFSET: every request of the round is back. A short transfer
 * continues where it stopped (a request that moved nothing, at end of
 * file or of space, is EIO: a layout's records lie inside its files),
 * then the sync, then the layout's hook. */
static void
vec_round_done (KvFsUringEngine *self,
                KvFsOp          *op)
{
  OpData *data = op->engine_data;

  if (data->err != 0)
    {
      op_finish_error (self, op, data->err);
      return;
    }
  submit_vec (self, op);
  if (op->n_pending > 0)
    return;
  if (op->io_write && (op->flags & KV_FS_OP_FLAG_DATASYNC))
    {
      struct io_uring_sqe *sqe = get_sqe (self);

      op->state = ST_SYNC;
      io_uring_prep_fsync (sqe, op->io_fd, IORING_FSYNC_DATASYNC);
      set_op (sqe, op, TAG_STEP);
      return;
    }
  at_offset_transferred (self, op);
}

/* AT_OFFSET: one buffer's request is back. */
static void
handle_part (KvFsUringEngine *self,
             VecPart         *part,
             int              res)
{
  KvFsOp *op = part->op;
  OpData *data = op->engine_data;

  if (res <= 0 && data->err == 0)
    data->err = res < 0 ? -res : EIO;
  else if (res > 0)
    part->done += res;
  if (--op->n_pending == 0)
    vec_round_done (self, op);
}

/* AT_OFFSET: the readv/writev of the rest of the vector is back: what it
 * moved fills the parts in order. */
static void
handle_vec (KvFsUringEngine *self,
            KvFsOp          *op,
            int              res)
{
  OpData *data = op->engine_data;

  if (res <= 0 && data->err == 0)
    data->err = res < 0 ? -res : EIO;
  for (guint i = data->vec_first; res > 0 && i < op->io_n_vec; i++)
    {
      VecPart *part = &data->parts[i];
      gsize take = MIN ((gsize) res, op->io_vec[i].iov_len - part->done);

      part->done += take;
      res -= take;
    }
  op->n_pending = 0;
  vec_round_done (self, op);
}

static void
handle_step (KvFsUringEngine *self,
             KvFsOp          *op,
             int              res)
{
  OpData *data = op->engine_data;

  switch ((OpState) op->state)
    {
    case ST_OPEN:
      handle_open (self, op, res);
      break;

    case ST_XATTR:
      /* a filesystem without user attributes stores the file without */
      if (res < 0 && res != -ENOTSUP)
        fail_with_cleanup (self, op, -res);
      else
        store_after_io (self, op);
      break;

    case ST_SYNC:
      if (res < 0)
        fail_with_cleanup (self, op, -res);
      else if (op->flags & KV_FS_OP_FLAG_AT_OFFSET)
        at_offset_transferred (self, op);
      else
        {
          int fd = op->fd;

          op->fd = -1;
          submit_close (self, op, fd, ST_CLOSE);
        }
      break;

    case ST_CLOSE:
      op->fd = -1;
      if (op->kind == KV_FS_OP_LOAD)
        {
          kv_fs_op_check_load (op);
          if (op->status == KV_FS_OP_STATUS_CORRUPT)
            {
              /* Stores are atomic: a bad file is corrupt, not in flight. */
              submit_unlink (self, op, op->dir_fd, op->name);
              return;
            }
          op_release (self, op);
        }
      else if (res < 0)
        fail_with_cleanup (self, op, -res);
      else if (op->kind == KV_FS_OP_PROBE)
        submit_unlink (self, op, op->tmp_dir_fd, op->tmp_name);
      else if (g_atomic_int_get (&op->aborted))
        {
          /* Past its deadline: never published, its slot may be reused. */
          data->err = ECANCELED;
          submit_unlink (self, op, op->tmp_dir_fd, op->tmp_name);
        }
      else
        {
          struct io_uring_sqe *sqe = get_sqe (self);

          op->state = ST_RENAME;
          io_uring_prep_renameat (sqe, op->tmp_dir_fd, op->tmp_name, op->dir_fd, op->name, 0);
          io_uring_sqe_set_flags (sqe, IOSQE_ASYNC);
          set_op (sqe, op, TAG_STEP);
        }
      break;

    case ST_RENAME:
      if (res < 0)
        {
          fail_with_cleanup (self, op, -res);
          return;
        }
      g_clear_pointer (&op->tmp_path, g_free);
      if (op->flags & KV_FS_OP_FLAG_DIRSYNC)
        {
          struct io_uring_sqe *sqe = get_sqe (self);

          op->state = ST_DIR_SYNC;
          io_uring_prep_fsync (sqe, op->dir_fd, 0);
          set_op (sqe, op, TAG_STEP);
          return;
        }
      op->status = KV_FS_OP_STATUS_OK;
      op_release (self, op);
      break;

    case ST_DIR_SYNC:
      if (res < 0)
        op_finish_error (self, op, -res);
      else
        {
          op->status = KV_FS_OP_STATUS_OK;
          op_release (self, op);
        }
      break;

    case ST_TAKE_OVER:
      if (res < 0)
        submit_give_up_reuse (self, op, op->reuse_dir_fd, op->reuse_name);
      else
        {
          g_clear_pointer (&op->reuse_path, g_free);
          op->reused = TRUE;
          submit_open (self, op);
        }
      break;

    case ST_GIVE_UP_REUSE:
      /* the file is gone either way (or was never there): create one,
       * under a temporary name (a spare's was its own) */
      g_clear_pointer (&op->reuse_path, g_free);
      if (op->flags & KV_FS_OP_FLAG_REUSE_IN_PLACE)
        kv_fs_op_make_temp (op);
      submit_open (self, op);
      break;

    case ST_FAIL_CLOSE:
      if (op->kind != KV_FS_OP_LOAD && op->tmp_path != NULL)
        submit_unlink (self, op, op->tmp_dir_fd, op->tmp_name);
      else
        op_finish_error (self, op, data->err);
      break;

    case ST_UNLINK:
      if (op->kind == KV_FS_OP_DELETE)
        {
          if (res < 0 && res != -ENOENT)
            op_finish_error (self, op, -res);
          else
            {
              op->status = KV_FS_OP_STATUS_OK;
              op_release (self, op);
            }
        }
      else if (op->kind == KV_FS_OP_LOAD)
        op_release (self, op);   /* status CORRUPT, file gone */
      else if (data->err != 0)
        op_finish_error (self, op, data->err);
      else
        {
          /* a probe's temporary file */
          op->status = KV_FS_OP_STATUS_OK;
          op_release (self, op);
        }
      break;

    default:
      g_assert_not_reached ();
    }
}

static gpointer
ring_main (gpointer user_data)
{
  KvFsUringEngine *self = user_data;
  KvFsEngine *engine = KV_FS_ENGINE (self);

  arm_wake (self);
  for (;;)
    {
      struct io_uring_cqe *cqe;
      unsigned head;
      unsigned seen = 0;
      gboolean woken = FALSE;
      KvFsOp *op;

      while ((op = g_async_queue_try_pop (self->checksummed)) != NULL)
        continue_op (self, op);
      while (self->n_free_headers > 0 &&
             (op = _kv_fs_engine_pop (engine, TRUE, FALSE)) != NULL)
        start_op (self, op);

      if (g_atomic_int_get (&self->stop_requested) && self->n_active == 0)
        break;

      io_uring_submit_and_wait (&self->ring, 1);

      io_uring_for_each_cqe (&self->ring, head, cqe)
        {
          guint64 ud = io_uring_cqe_get_data64 (cqe);
          int res = cqe->res;

          seen++;
          if (ud == WAKE_TOKEN)
            {
              woken = TRUE;
              continue;
            }
          op = (KvFsOp *) (guintptr) (ud & ~(guint64) TAG_MASK);
          if ((ud & TAG_MASK) == TAG_STEP)
            handle_step (self, op, res);
          else if ((ud & TAG_MASK) == TAG_PART)
            handle_part (self, (VecPart *) op, res);
          else if ((ud & TAG_MASK) == TAG_VEC)
            handle_vec (self, op, res);
          else
            handle_io (self, op, ud & TAG_MASK, res);
        }
      io_uring_cq_advance (&self->ring, seen);

      if (woken)
        {
          if (_kv_fs_engine_is_stopping (engine))
            g_atomic_int_set (&self->stop_requested, TRUE);
          /* stores on the checksum pool come back through a wake-up */
          if (!g_atomic_int_get (&self->stop_requested) || self->n_active > 0)
            arm_wake (self);
        }
    }
  return NULL;
}

static void
kv_fs_uring_engine_kick (KvFsEngine *engine)
{
  KvFsUringEngine *self = KV_FS_URING_ENGINE (engine);
  guint64 one = 1;

  if (write (self->wake_fd, &one, sizeof one) < 0)
    g_critical ("Cannot wake the io_uring thread: %s", g_strerror (errno));
}

static gboolean
probe_opcodes (struct io_uring  *ring,
               GError          **error)
{
  static const struct { int op; const char *name; } needed[] = {
    { IORING_OP_OPENAT, "openat" }, { IORING_OP_CLOSE, "close" },
    { IORING_OP_READ, "read" }, { IORING_OP_WRITE, "write" },
    { IORING_OP_READV, "readv" }, { IORING_OP_WRITEV, "writev" },
    { IORING_OP_READ_FIXED, "read_fixed" }, { IORING_OP_WRITE_FIXED, "write_fixed" },
    { IORING_OP_FSYNC, "fsync" }, { IORING_OP_RENAMEAT, "renameat" },
    { IORING_OP_UNLINKAT, "unlinkat" },
  };
  struct io_uring_probe *probe = io_uring_get_probe_ring (ring);

  if (probe == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "io_uring: the kernel cannot list its opcodes (too old)");
      return FALSE;
    }
  for (guint i = 0; i < G_N_ELEMENTS (needed); i++)
    if (!io_uring_opcode_supported (probe, needed[i].op))
      {
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                     "io_uring: the kernel lacks the %s opcode", needed[i].name);
        io_uring_free_probe (probe);
        return FALSE;
      }
  io_uring_free_probe (probe);
  return TRUE;
}

static void
register_buffers (KvFsUringEngine        *self,
                  const KvFsEngineConfig *config)
{
  g_autofree struct iovec *iov = NULL;
  guint n = 0;
  int ret;

  self->base = config->buffer;
  self->base_size = config->buffer_size;
  if (self->base != NULL && config->slot_size > 0 && config->slot_size <= MAX_FIXED_PIECE)
    {
      gsize slots_per_piece = MAX_FIXED_PIECE / config->slot_size;

      self->piece_size = slots_per_piece * config->slot_size;
      self->n_pieces = (self->base_size + self->piece_size - 1) / self->piece_size;
    }
  else
    self->n_pieces = 0;

  iov = g_new0 (struct iovec, self->n_pieces + 1);
  for (guint i = 0; i < self->n_pieces; i++)
    {
      gsize offset = (gsize) i * self->piece_size;

      iov[n++] = (struct iovec) { self->base + offset, MIN (self->piece_size, self->base_size - offset) };
    }
  iov[n++] = (struct iovec) { self->headers, (gsize) self->n_headers * KV_CHUNK_HEADER_SIZE };

  ret = io_uring_register_buffers (&self->ring, iov, n);
  if (ret == 0)
    self->fixed = TRUE;
  else
    {
      /* Pinning refused (RLIMIT_MEMLOCK, file-backed memory...): plain
       * reads and writes still go straight to the slots. */
      g_debug ("io_uring: cannot register %u fixed buffers (%s); using plain requests",
               n, g_strerror (-ret));
      self->fixed = FALSE;
      self->n_pieces = 0;
    }
}

static gboolean
kv_fs_uring_engine_start (KvFsEngine  *engine,
                          GError     **error)
{
  KvFsUringEngine *self = KV_FS_URING_ENGINE (engine);
  const KvFsEngineConfig *config = _kv_fs_engine_get_config (engine);
  struct io_uring_params params = { 0 };
  guint entries;
  int ret;

  self->n_headers = config->queue_depth;
  entries = 1;
  while (entries < 2 * self->n_headers + 2)
    entries <<= 1;

  params.flags = IORING_SETUP_CLAMP;
  ret = io_uring_queue_init_params (entries, &self->ring, &params);
  if (ret < 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "io_uring: cannot create a ring of %u entries: %s", entries, g_strerror (-ret));
      return FALSE;
    }
  self->ring_ready = TRUE;
  if (!probe_opcodes (&self->ring, error))
    return FALSE;
  {
    struct io_uring_probe *probe = io_uring_get_probe_ring (&self->ring);

    self->have_fsetxattr = probe != NULL && io_uring_opcode_supported (probe, IORING_OP_FSETXATTR);
    if (probe != NULL)
      io_uring_free_probe (probe);
  }

  if (posix_memalign ((void **) &self->headers, 4096,
                      (gsize) self->n_headers * KV_CHUNK_HEADER_SIZE) != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "io_uring: cannot allocate %u header buffers", self->n_headers);
      return FALSE;
    }
  memset (self->headers, 0, (gsize) self->n_headers * KV_CHUNK_HEADER_SIZE);
  self->free_headers = g_new (int, self->n_headers);
  self->op_data = g_new0 (OpData, self->n_headers);
  for (guint i = 0; i < self->n_headers; i++)
    self->free_headers[i] = self->n_headers - 1 - i;
  self->n_free_headers = self->n_headers;

  register_buffers (self, config);

  /* Creating, extending and renaming files cannot be done without
   * blocking, so those requests run on io-wq workers; the default cap
   * (4 per CPU) is too few to keep a fast device busy. */
  {
    unsigned int max_workers[2] = { MAX (64, self->n_headers), 0 };

    io_uring_register_iowq_max_workers (&self->ring, max_workers);
  }

  /* Blocking: a read request on a non-blocking eventfd completes at once
   * with -EAGAIN instead of waiting. */
  self->wake_fd = eventfd (0, EFD_CLOEXEC);
  if (self->wake_fd < 0)
    {
      int errsv = errno;

      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "io_uring: cannot create an eventfd: %s", g_strerror (errsv));
      return FALSE;
    }

  /* a thread per core but the ring's, up to 4: one XXH3 reads memory at
   * several GB/s; where every record is a copy on this pool, a thread
   * per core (the ring has nothing to do) */
  self->checksum_pool = g_thread_pool_new (checksum_func, self,
                                           CLAMP ((gint) g_get_num_processors () -
                                                  (config->mapped ? 0 : 1), 1, 4),
                                           FALSE, NULL);
  self->thread = g_thread_new ("kvtier-fs-uring", ring_main, self);
  return TRUE;
}

static void
kv_fs_uring_engine_stop (KvFsEngine *engine)
{
  KvFsUringEngine *self = KV_FS_URING_ENGINE (engine);

  if (self->thread != NULL)
    {
      g_thread_join (self->thread);
      self->thread = NULL;
    }
  /* idle: the ring ends once every store it started is back */
  if (self->checksum_pool != NULL)
    g_thread_pool_free (g_steal_pointer (&self->checksum_pool), FALSE, TRUE);
}

static void
kv_fs_uring_engine_finalize (GObject *object)
{
  KvFsUringEngine *self = KV_FS_URING_ENGINE (object);

  if (self->ring_ready)
    io_uring_queue_exit (&self->ring);
  if (self->wake_fd >= 0)
    close (self->wake_fd);
  if (self->checksum_pool != NULL)
    g_thread_pool_free (g_steal_pointer (&self->checksum_pool), FALSE, TRUE);
  g_async_queue_unref (self->checksummed);
  free (self->headers);
  g_free (self->free_headers);
  g_free (self->op_data);

  G_OBJECT_CLASS (kv_fs_uring_engine_parent_class)->finalize (object);
}

static void
kv_fs_uring_engine_class_init (KvFsUringEngineClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvFsEngineClass *engine_class = KV_FS_ENGINE_CLASS (klass);

  object_class->finalize = kv_fs_uring_engine_finalize;
  engine_class->start = kv_fs_uring_engine_start;
  engine_class->kick = kv_fs_uring_engine_kick;
  engine_class->stop = kv_fs_uring_engine_stop;
}

static void
kv_fs_uring_engine_init (KvFsUringEngine *self)
{
  self->wake_fd = -1;
  self->checksummed = g_async_queue_new ();
}

/* Whether the primary buffer was registered with the ring. */
gboolean
kv_fs_uring_engine_uses_fixed_buffers (KvFsUringEngine *self)
{
  return self->fixed && self->n_pieces > 0;
}
