/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-threads-engine.h"
#include "kv-fs-io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * The thread-pool engine, the reference's dual-queue pool (§8.8): a set
 * of load threads that take loads first and a set of store threads that
 * take stores first; each takes from the other queue when its own is
 * empty, so neither direction starves and no thread idles while work is
 * queued. Each op runs with plain syscalls: open, preadv/pwritev straight
 * between the file and the primary slot (the header goes to a per-thread
 * aligned buffer), fdatasync, close, rename.
 */

struct _KvFsThreadsEngine
{
  KvFsEngine  parent_instance;

  GPtrArray  *threads;
};

G_DEFINE_FINAL_TYPE (KvFsThreadsEngine, kv_fs_threads_engine, KV_TYPE_FS_ENGINE)

typedef struct
{
  KvFsEngine *engine;
  gboolean    prefer_loads;
} Worker;

/* Opens @op's file (@write: its temporary file) relative to its
 * directory. A store that finds its directory gone (the root deleted
 * under the tier) has the root's directories made again, once. */
static int
retry_open (KvFsOp           *op,
            const KvFsLayout *layout,
            gboolean          write)
{
  int flags = kv_fs_op_open_flags (op, write);
  gboolean reopened = FALSE;
  int fd;

  for (;;)
    {
      fd = write ? openat (op->tmp_dir_fd, op->tmp_name, flags, 0600)
                 : openat (op->dir_fd, op->name, flags);
      if (fd >= 0)
        return fd;
      if (errno == EINTR)
        continue;
      /* A filesystem that refuses O_DIRECT for this file: buffered. */
      if (errno == EINVAL && (flags & O_DIRECT))
        {
          flags &= ~O_DIRECT;
          continue;
        }
      if (errno == ENOENT && write && !reopened)
        {
          int err = kv_fs_op_reopen_dirs (op, layout);

          reopened = TRUE;
          if (err != 0)
            {
              errno = err;
              return -1;
            }
          kv_fs_op_make_temp (op);
          continue;
        }
      return -1;
    }
}

static void
run_store (KvFsOp           *op,
           const KvFsLayout *layout)
{
  struct iovec iov[2];
  struct stat st;
  int n_iov = 0;
  int fd;
  int err;

  if ((op->flags & KV_FS_OP_FLAG_SKIP_EXISTING) && op->kind == KV_FS_OP_STORE &&
      fstatat (op->dir_fd, op->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
    {
      op->status = KV_FS_OP_STATUS_EXISTS;
      return;
    }

  kv_fs_op_make_temp (op);
  fd = kv_fs_op_take_over (op);
  if (fd < 0)
    fd = retry_open (op, layout, TRUE);
  if (fd < 0)
    {
      op->status = KV_FS_OP_STATUS_IO_ERROR;
      op->error = errno;
      return;
    }

  kv_fs_op_prepare_header (op);
  if ((op->flags & KV_FS_OP_FLAG_HEADER) || op->kind == KV_FS_OP_PROBE)
    iov[n_iov++] = (struct iovec) { op->header, KV_CHUNK_HEADER_SIZE };
  if (op->payload_len > 0)
    iov[n_iov++] = (struct iovec) { op->payload, op->payload_len };

  err = kv_fs_io_pwritev_full (fd, iov, n_iov, 0);
  if (err == 0)
    err = kv_fs_op_write_file_checksum (op, fd);
  if (err == 0 && (op->flags & (KV_FS_OP_FLAG_DATASYNC | KV_FS_OP_FLAG_DIRSYNC)) &&
      fdatasync (fd) != 0)
    err = errno;
  if (close (fd) != 0 && err == 0)
    err = errno;
  /* Past its deadline, a store is not published: its slot may already
   * hold another chunk. */
  if (err == 0 && op->kind == KV_FS_OP_STORE && g_atomic_int_get (&op->aborted))
    err = ECANCELED;
  if (err == 0 && op->kind == KV_FS_OP_STORE &&
      renameat (op->tmp_dir_fd, op->tmp_name, op->dir_fd, op->name) != 0)
    err = errno;
  if (err != 0 || op->kind == KV_FS_OP_PROBE)
    unlinkat (op->tmp_dir_fd, op->tmp_name, 0);
  if (err == 0 && op->kind == KV_FS_OP_STORE && (op->flags & KV_FS_OP_FLAG_DIRSYNC) &&
      fsync (op->dir_fd) != 0)
    err = errno;

  op->status = err == 0 ? KV_FS_OP_STATUS_OK :
               err == ECANCELED ? KV_FS_OP_STATUS_CANCELLED : KV_FS_OP_STATUS_IO_ERROR;
  op->error = err;
}

static void
run_load (KvFsOp           *op,
          const KvFsLayout *layout)
{
  struct iovec iov[2];
  int n_iov = 0;
  gboolean has_header = (op->flags & KV_FS_OP_FLAG_HEADER) != 0;
  gssize got;
  int fd;

  fd = retry_open (op, layout, FALSE);
  if (fd < 0)
    {
      op->error = errno;
      op->status = errno == ENOENT ? KV_FS_OP_STATUS_NOT_FOUND : KV_FS_OP_STATUS_IO_ERROR;
      return;
    }
  if (!kv_fs_op_trusts_file (op, layout, fd))
    {
      close (fd);
      op->status = KV_FS_OP_STATUS_FOREIGN;
      return;
    }
  if (has_header)
    iov[n_iov++] = (struct iovec) { op->header, KV_CHUNK_HEADER_SIZE };
  iov[n_iov++] = (struct iovec) { op->payload, op->payload_len };
  got = kv_fs_io_preadv_full (fd, iov, n_iov, 0);
  if (got >= 0)
    {
      int err = kv_fs_op_read_file_checksum (op, fd);

      if (err != 0)
        got = -err;
    }
  close (fd);
  if (got < 0)
    {
      op->status = KV_FS_OP_STATUS_IO_ERROR;
      op->error = (int) -got;
      return;
    }

  if (has_header)
    {
      op->got_header = MIN (got, KV_CHUNK_HEADER_SIZE);
      op->got_payload = got - op->got_header;
    }
  else
    op->got_payload = got;

  kv_fs_op_check_load (op);
  /* Stores are atomic, so a file that fails its check is corrupt, never
   * half-written: delete it so that it is not read again. */
  if (op->status == KV_FS_OP_STATUS_CORRUPT)
    unlinkat (op->dir_fd, op->name, 0);
}

/* Runs @op to completion on the calling thread. @header_buffer is a
 * KV_CHUNK_HEADER_SIZE buffer aligned for O_DIRECT. */
void
kv_fs_op_run_sync (KvFsEngine *engine,
                   KvFsOp     *op,
                   guint8     *header_buffer)
{
  const KvFsLayout *layout = _kv_fs_engine_get_config (engine)->layout;
  int err;

  if (_kv_fs_engine_take_injected (engine, op))
    return;
  /* bytes at an offset of a file its layout holds open */
  if (op->flags & KV_FS_OP_FLAG_AT_OFFSET)
    {
      kv_fs_op_run_at_offset (op);
      return;
    }
  op->header = header_buffer;
  err = kv_fs_op_open_dirs (op, layout);
  if (err != 0)
    {
      op->status = err == ENOENT && op->kind != KV_FS_OP_STORE ? KV_FS_OP_STATUS_NOT_FOUND
                                                                : KV_FS_OP_STATUS_IO_ERROR;
      op->error = err;
      if (op->kind == KV_FS_OP_DELETE && err == ENOENT)
        op->status = KV_FS_OP_STATUS_OK;
      return;
    }

  switch (op->kind)
    {
    case KV_FS_OP_STORE:
    case KV_FS_OP_PROBE:
      run_store (op, layout);
      break;

    case KV_FS_OP_LOAD:
      run_load (op, layout);
      break;

    case KV_FS_OP_DELETE:
      if (unlinkat (op->dir_fd, op->name, 0) == 0 || errno == ENOENT)
        op->status = KV_FS_OP_STATUS_OK;
      else
        {
          op->status = KV_FS_OP_STATUS_IO_ERROR;
          op->error = errno;
        }
      break;
    }
}

static gpointer
worker_main (gpointer data)
{
  Worker *worker = data;
  guint8 *header = NULL;
  KvFsOp *op;

  if (posix_memalign ((void **) &header, 4096, KV_CHUNK_HEADER_SIZE) != 0)
    g_error ("Cannot allocate an aligned header buffer");

  while ((op = _kv_fs_engine_pop (worker->engine, worker->prefer_loads, TRUE)) != NULL)
    {
      kv_fs_op_run_sync (worker->engine, op, header);
      if (op->header == header)
        op->header = NULL;
      _kv_fs_engine_finish (worker->engine, op);
    }

  free (header);
  g_free (worker);
  return NULL;
}

static gboolean
kv_fs_threads_engine_start (KvFsEngine  *engine,
                            GError     **error)
{
  KvFsThreadsEngine *self = KV_FS_THREADS_ENGINE (engine);
  const KvFsEngineConfig *config = _kv_fs_engine_get_config (engine);
  guint n = config->n_read_threads + config->n_write_threads;

  for (guint i = 0; i < n; i++)
    {
      Worker *worker = g_new0 (Worker, 1);
      gboolean loads = i < config->n_read_threads;
      g_autofree char *name = g_strdup_printf ("kvtier-fs-%c%u", loads ? 'l' : 's',
                                               loads ? i : i - config->n_read_threads);

      worker->engine = engine;
      worker->prefer_loads = loads;
      g_ptr_array_add (self->threads, g_thread_new (name, worker_main, worker));
    }
  return TRUE;
}

static void
kv_fs_threads_engine_stop (KvFsEngine *engine)
{
  KvFsThreadsEngine *self = KV_FS_THREADS_ENGINE (engine);

  /* The base class set "stopping": workers finish their op and leave. */
  for (guint i = 0; i < self->threads->len; i++)
    g_thread_join (self->threads->pdata[i]);
  g_ptr_array_set_size (self->threads, 0);
}

static void
kv_fs_threads_engine_finalize (GObject *object)
{
  KvFsThreadsEngine *self = KV_FS_THREADS_ENGINE (object);

  g_ptr_array_unref (self->threads);

  G_OBJECT_CLASS (kv_fs_threads_engine_parent_class)->finalize (object);
}

static void
kv_fs_threads_engine_class_init (KvFsThreadsEngineClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvFsEngineClass *engine_class = KV_FS_ENGINE_CLASS (klass);

  object_class->finalize = kv_fs_threads_engine_finalize;
  engine_class->start = kv_fs_threads_engine_start;
  engine_class->stop = kv_fs_threads_engine_stop;
}

static void
kv_fs_threads_engine_init (KvFsThreadsEngine *self)
{
  self->threads = g_ptr_array_new ();
}
