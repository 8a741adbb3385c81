/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-gio-engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gio/gunixinputstream.h>
#include <gio/gunixoutputstream.h>

/*
 * The GIO engine: every op is a chain of GIO asynchronous calls started
 * from the engine's own thread, which runs its own GMainContext; the
 * callbacks come back there. Payloads are written from and read into the
 * primary slots by g_output_stream_write_all_async() and
 * g_input_stream_read_all_async() on the file descriptor. GIO opens,
 * renames and deletes only by path (GFile): each call walks the whole
 * path again from `/`, following any symbolic link on the way, so a
 * directory renamed or replaced after the tier checked it would redirect
 * it; and it has no O_DIRECT open. The descriptor is therefore opened with
 * openat() relative to the directories the tier holds open (see
 * kv_fs_op_open_dirs()), in a GTask worker, and wrapped in a GUnix
 * stream; files are published and removed with renameat() and
 * unlinkat() in GTask workers too. The CPU work (checksums) runs in GTask
 * workers as well, so the engine thread only sequences requests.
 */

struct _KvFsGioEngine
{
  KvFsEngine    parent_instance;

  GThread      *thread;
  GMainContext *context;
  GMainLoop    *loop;
  GSource      *dispatch;

  /* engine thread only */
  guint         n_active;
  guint8       *headers;
  guint         n_headers;
  int          *free_headers;
  guint         n_free_headers;
};

G_DEFINE_FINAL_TYPE (KvFsGioEngine, kv_fs_gio_engine, KV_TYPE_FS_ENGINE)

typedef struct
{
  KvFsGioEngine *engine;
  KvFsOp        *op;
  int            header_index;
  int            err;
  GInputStream  *in;
  GOutputStream *out;
} GioOp;

static void dispatch_ops (KvFsGioEngine *self);

static int
errno_from_error (const GError *error)
{
  if (error->domain != G_IO_ERROR)
    return EIO;
  switch (error->code)
    {
    case G_IO_ERROR_NOT_FOUND: return ENOENT;
    case G_IO_ERROR_EXISTS: return EEXIST;
    case G_IO_ERROR_NO_SPACE: return ENOSPC;
    case G_IO_ERROR_PERMISSION_DENIED: return EACCES;
    case G_IO_ERROR_TOO_MANY_LINKS: return ELOOP;
    case G_IO_ERROR_INVALID_ARGUMENT: return EINVAL;
    case G_IO_ERROR_READ_ONLY: return EROFS;
    case G_IO_ERROR_CANCELLED: return ECANCELED;
    default: return EIO;
    }
}

static void
return_errno (GTask *task,
              int    err)
{
  g_task_return_new_error (task, G_IO_ERROR, g_io_error_from_errno (err),
                           "%s", g_strerror (err));
}

static void
gio_op_finish (GioOp *gop)
{
  KvFsGioEngine *self = gop->engine;
  KvFsOp *op = gop->op;

  g_clear_object (&gop->in);
  g_clear_object (&gop->out);
  self->free_headers[self->n_free_headers++] = gop->header_index;
  if (!(op->flags & KV_FS_OP_FLAG_AT_OFFSET))
    op->header = NULL;
  op->engine_data = NULL;
  g_free (gop);
  self->n_active--;

  _kv_fs_engine_finish (KV_FS_ENGINE (self), op);
  dispatch_ops (self);
}

static void
gio_op_fail (GioOp *gop,
             int    err)
{
  KvFsOp *op = gop->op;

  op->error = err;
  if (err == ECANCELED)
    op->status = KV_FS_OP_STATUS_CANCELLED;
  else if (err == ENOENT && op->kind == KV_FS_OP_LOAD)
    op->status = KV_FS_OP_STATUS_NOT_FOUND;
  else
    op->status = KV_FS_OP_STATUS_IO_ERROR;
  gio_op_finish (gop);
}

/* ---- worker-thread pieces ----------------------------------------------- */

static const KvFsLayout *
layout_of (GioOp *gop)
{
  return _kv_fs_engine_get_config (KV_FS_ENGINE (gop->engine))->layout;
}

/* Opens the op's file (@write: its temporary file) in its directory; a
 * store that finds the directory gone (the root deleted under the tier)
 * has the root's directories made again, once. Returns the descriptor
 * or -errno. */
static int
open_fd (GioOp    *gop,
         gboolean  write)
{
  KvFsOp *op = gop->op;
  int flags = kv_fs_op_open_flags (op, write);
  gboolean reopened = FALSE;

  for (;;)
    {
      int fd = write ? openat (op->tmp_dir_fd, op->tmp_name, flags, 0600)
                     : openat (op->dir_fd, op->name, flags);

      if (fd >= 0)
        return fd;
      if (errno == EINTR)
        continue;
      if (errno == EINVAL && (flags & O_DIRECT))
        {
          flags &= ~O_DIRECT;
          continue;
        }
      if (errno == ENOENT && write && !reopened)
        {
          int err = kv_fs_op_reopen_dirs (op, layout_of (gop));

          reopened = TRUE;
          if (err != 0)
            return -err;
          kv_fs_op_make_temp (op);
          continue;
        }
      return -errno;
    }
}

/* Store/probe: header checksum, existence check, open the temporary file. */
static void
open_for_write_thread (GTask        *task,
                       gpointer      source,
                       gpointer      task_data,
                       GCancellable *cancellable)
{
  GioOp *gop = task_data;
  KvFsOp *op = gop->op;
  struct stat st;
  int fd;

  fd = kv_fs_op_open_dirs (op, layout_of (gop));
  if (fd != 0)
    {
      return_errno (task, fd);
      return;
    }
  if (op->kind == KV_FS_OP_STORE && (op->flags & KV_FS_OP_FLAG_SKIP_EXISTING) &&
      fstatat (op->dir_fd, op->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
    {
      g_task_return_int (task, -1);
      return;
    }
  kv_fs_op_prepare_header (op);
  fd = kv_fs_op_take_over (op);
  if (fd < 0)
    fd = open_fd (gop, TRUE);
  if (fd < 0)
    return_errno (task, -fd);
  else
    g_task_return_int (task, fd);
}

static void
open_for_read_thread (GTask        *task,
                      gpointer      source,
                      gpointer      task_data,
                      GCancellable *cancellable)
{
  GioOp *gop = task_data;
  int err = kv_fs_op_open_dirs (gop->op, layout_of (gop));
  int fd = err != 0 ? -err : open_fd (gop, FALSE);

  if (fd < 0)
    return_errno (task, -fd);
  else if (!kv_fs_op_trusts_file (gop->op, layout_of (gop), fd))
    {
      /* another user's file under a chunk's name: not read */
      close (fd);
      g_task_return_int (task, -1);
    }
  else
    g_task_return_int (task, fd);
}

static void
sync_thread (GTask        *task,
             gpointer      source,
             gpointer      task_data,
             GCancellable *cancellable)
{
  GioOp *gop = task_data;
  KvFsOp *op = gop->op;

  if (op->state == 0)
    {
      int fd = g_unix_output_stream_get_fd (G_UNIX_OUTPUT_STREAM (gop->out));
      int err = kv_fs_op_write_file_checksum (op, fd);

      if (err == 0 && (op->flags & (KV_FS_OP_FLAG_DATASYNC | KV_FS_OP_FLAG_DIRSYNC)) &&
          fdatasync (fd) != 0)
        err = errno;
      if (err != 0)
        {
          return_errno (task, err);
          return;
        }
    }
  else if (fsync (op->dir_fd) != 0)
    {
      return_errno (task, errno);
      return;
    }
  g_task_return_boolean (task, TRUE);
}

/* op->state: what to remove. */
enum { UNLINK_FILE, UNLINK_TMP };

static void
unlink_thread (GTask        *task,
               gpointer      source,
               gpointer      task_data,
               GCancellable *cancellable)
{
  GioOp *gop = task_data;
  KvFsOp *op = gop->op;
  int err = 0;

  if (op->dir_fd < 0)
    err = kv_fs_op_open_dirs (op, layout_of (gop));
  if (err == 0 && op->state == UNLINK_TMP)
    err = unlinkat (op->tmp_dir_fd, op->tmp_name, 0) == 0 ? 0 : errno;
  else if (err == 0)
    err = unlinkat (op->dir_fd, op->name, 0) == 0 ? 0 : errno;
  if (err != 0 && err != ENOENT)
    return_errno (task, err);
  else
    g_task_return_boolean (task, TRUE);
}

/* rename(2): atomically replaces an equal chunk another writer put there
 * meanwhile. */
static void
rename_thread (GTask        *task,
               gpointer      source,
               gpointer      task_data,
               GCancellable *cancellable)
{
  KvFsOp *op = ((GioOp *) task_data)->op;

  if (renameat (op->tmp_dir_fd, op->tmp_name, op->dir_fd, op->name) != 0)
    return_errno (task, errno);
  else
    g_task_return_boolean (task, TRUE);
}

static void
check_thread (GTask        *task,
              gpointer      source,
              gpointer      task_data,
              GCancellable *cancellable)
{
  GioOp *gop = task_data;

  kv_fs_op_check_load (gop->op);
  g_task_return_boolean (task, TRUE);
}

static void
run_in_thread (GioOp               *gop,
               GTaskThreadFunc      func,
               GAsyncReadyCallback  callback)
{
  GTask *task = g_task_new (NULL, NULL, callback, gop);

  g_task_set_task_data (task, gop, NULL);
  g_task_run_in_thread (task, func);
  g_object_unref (task);
}

/* Bytes at an offset of a file the layout holds open (layout=slab): a
 * positioned transfer, which GIO streams cannot make; it runs whole in a
 * GTask worker, with the layout's hooks. */
static void
at_offset_thread (GTask        *task,
                  gpointer      source,
                  gpointer      task_data,
                  GCancellable *cancellable)
{
  GioOp *gop = task_data;

  kv_fs_op_run_at_offset (gop->op);
  g_task_return_boolean (task, TRUE);
}

static void
at_offset_done (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  g_task_propagate_boolean (G_TASK (result), NULL);
  gio_op_finish (user_data);
}

/* ---- store / probe chain ------------------------------------------------ */

static void
store_cleanup_deleted (GObject      *source,
                       GAsyncResult *result,
                       gpointer      user_data)
{
  GioOp *gop = user_data;

  g_task_propagate_boolean (G_TASK (result), NULL);
  if (gop->err != 0)
    gio_op_fail (gop, gop->err);
  else
    {
      gop->op->status = KV_FS_OP_STATUS_OK;   /* a probe's temporary file */
      gio_op_finish (gop);
    }
}

static void run_in_thread (GioOp               *gop,
                           GTaskThreadFunc      func,
                           GAsyncReadyCallback  callback);

static void
store_delete_tmp (GioOp *gop)
{
  gop->op->state = UNLINK_TMP;
  run_in_thread (gop, unlink_thread, store_cleanup_deleted);
}

static void
store_fail_closed (GObject      *source,
                   GAsyncResult *result,
                   gpointer      user_data)
{
  GioOp *gop = user_data;

  g_output_stream_close_finish (G_OUTPUT_STREAM (source), result, NULL);
  store_delete_tmp (gop);
}

static void
store_fail (GioOp        *gop,
            const GError *error)
{
  if (gop->err == 0)
    gop->err = errno_from_error (error);
  if (gop->out != NULL && !g_output_stream_is_closed (gop->out))
    g_output_stream_close_async (gop->out, G_PRIORITY_DEFAULT, NULL, store_fail_closed, gop);
  else
    store_delete_tmp (gop);
}

static void
store_dir_synced (GObject      *source,
                  GAsyncResult *result,
                  gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;

  if (!g_task_propagate_boolean (G_TASK (result), &error))
    {
      gio_op_fail (gop, errno_from_error (error));
      return;
    }
  gop->op->status = KV_FS_OP_STATUS_OK;
  gio_op_finish (gop);
}

static void
store_moved (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;

  if (!g_task_propagate_boolean (G_TASK (result), &error))
    {
      store_fail (gop, error);
      return;
    }
  g_clear_pointer (&gop->op->tmp_path, g_free);
  if (gop->op->flags & KV_FS_OP_FLAG_DIRSYNC)
    {
      gop->op->state = 1;
      run_in_thread (gop, sync_thread, store_dir_synced);
      return;
    }
  gop->op->status = KV_FS_OP_STATUS_OK;
  gio_op_finish (gop);
}

static void
store_closed (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;

  if (!g_output_stream_close_finish (G_OUTPUT_STREAM (source), result, &error))
    {
      store_fail (gop, error);
      return;
    }
  if (gop->op->kind == KV_FS_OP_PROBE)
    {
      store_delete_tmp (gop);
      return;
    }
  if (g_atomic_int_get (&gop->op->aborted))
    {
      /* Past its deadline: never published, its slot may be reused. */
      gop->err = ECANCELED;
      store_delete_tmp (gop);
      return;
    }
  run_in_thread (gop, rename_thread, store_moved);
}

static void
store_close (GioOp *gop)
{
  g_output_stream_close_async (gop->out, G_PRIORITY_DEFAULT, NULL, store_closed, gop);
}

static void
store_synced (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;

  if (!g_task_propagate_boolean (G_TASK (result), &error))
    {
      store_fail (gop, error);
      return;
    }
  store_close (gop);
}

/* vLLM's file checksum attribute and the data sync, both on the file
 * before it is closed and published. */
static void
store_after_payload (GioOp *gop)
{
  if (gop->op->flags & (KV_FS_OP_FLAG_DATASYNC | KV_FS_OP_FLAG_DIRSYNC |
                        KV_FS_OP_FLAG_FILE_CRC32C))
    {
      gop->op->state = 0;
      run_in_thread (gop, sync_thread, store_synced);
      return;
    }
  store_close (gop);
}

/* Ends one write of a store; on failure abandons the store and returns
 * %FALSE. */
static gboolean
store_write_finish (GObject      *source,
                    GAsyncResult *result,
                    GioOp        *gop)
{
  g_autoptr(GError) error = NULL;

  if (!g_output_stream_write_all_finish (G_OUTPUT_STREAM (source), result, NULL, &error))
    {
      store_fail (gop, error);
      return FALSE;
    }
  return TRUE;
}

static void
store_payload_written (GObject      *source,
                       GAsyncResult *result,
                       gpointer      user_data)
{
  if (store_write_finish (source, result, user_data))
    store_after_payload (user_data);
}

static void
store_write_payload (GioOp *gop)
{
  KvFsOp *op = gop->op;

  if (op->payload_len == 0)
    store_after_payload (gop);
  else
    g_output_stream_write_all_async (gop->out, op->payload, op->payload_len,
                                     G_PRIORITY_DEFAULT, NULL, store_payload_written, gop);
}

static void
store_header_written (GObject      *source,
                      GAsyncResult *result,
                      gpointer      user_data)
{
  if (store_write_finish (source, result, user_data))
    store_write_payload (user_data);
}

static void
store_opened (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  GioOp *gop = user_data;
  KvFsOp *op = gop->op;
  g_autoptr(GError) error = NULL;
  gssize fd = g_task_propagate_int (G_TASK (result), &error);

  if (error != NULL)
    {
      /* O_EXCL: nothing was created. */
      gio_op_fail (gop, errno_from_error (error));
      return;
    }
  if (fd < 0)
    {
      op->status = KV_FS_OP_STATUS_EXISTS;
      gio_op_finish (gop);
      return;
    }
  gop->out = g_unix_output_stream_new ((int) fd, TRUE);
  if ((op->flags & KV_FS_OP_FLAG_HEADER) || op->kind == KV_FS_OP_PROBE)
    g_output_stream_write_all_async (gop->out, op->header, KV_CHUNK_HEADER_SIZE,
                                     G_PRIORITY_DEFAULT, NULL, store_header_written, gop);
  else
    store_write_payload (gop);
}

/* ---- load chain --------------------------------------------------------- */

static void
load_deleted (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  GioOp *gop = user_data;

  g_task_propagate_boolean (G_TASK (result), NULL);
  gio_op_finish (gop);
}

static void
load_checked (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  GioOp *gop = user_data;

  g_task_propagate_boolean (G_TASK (result), NULL);
  if (gop->op->status == KV_FS_OP_STATUS_CORRUPT)
    {
      /* Stores are atomic: a bad file is corrupt, not half-written. */
      gop->op->state = UNLINK_FILE;
      run_in_thread (gop, unlink_thread, load_deleted);
      return;
    }
  gio_op_finish (gop);
}

static void
load_closed (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  GioOp *gop = user_data;

  g_input_stream_close_finish (G_INPUT_STREAM (source), result, NULL);
  if (gop->err != 0)
    {
      gio_op_fail (gop, gop->err);
      return;
    }
  run_in_thread (gop, check_thread, load_checked);
}

static void
load_close (GioOp        *gop,
            const GError *error)
{
  if (error != NULL && gop->err == 0)
    gop->err = errno_from_error (error);
  /* vLLM's file checksum attribute, read while the file is open: one
   * getxattr of an inode just read, not worth a thread */
  if (gop->err == 0)
    gop->err = kv_fs_op_read_file_checksum (gop->op,
                                            g_unix_input_stream_get_fd (G_UNIX_INPUT_STREAM (gop->in)));
  g_input_stream_close_async (gop->in, G_PRIORITY_DEFAULT, NULL, load_closed, gop);
}

static void
load_payload_read (GObject      *source,
                   GAsyncResult *result,
                   gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;
  gsize n = 0;

  g_input_stream_read_all_finish (G_INPUT_STREAM (source), result, &n, &error);
  gop->op->got_payload = n;
  load_close (gop, error);
}

static void
load_read_payload (GioOp *gop)
{
  g_input_stream_read_all_async (gop->in, gop->op->payload, gop->op->payload_len,
                                 G_PRIORITY_DEFAULT, NULL, load_payload_read, gop);
}

static void
load_header_read (GObject      *source,
                  GAsyncResult *result,
                  gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;
  gsize n = 0;

  g_input_stream_read_all_finish (G_INPUT_STREAM (source), result, &n, &error);
  gop->op->got_header = n;
  if (error != NULL || n < KV_CHUNK_HEADER_SIZE)
    {
      load_close (gop, error);
      return;
    }
  load_read_payload (gop);
}

static void
load_opened (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;
  gssize fd = g_task_propagate_int (G_TASK (result), &error);

  if (error != NULL)
    {
      gio_op_fail (gop, errno_from_error (error));
      return;
    }
  if (fd < 0)
    {
      gop->op->status = KV_FS_OP_STATUS_FOREIGN;
      gio_op_finish (gop);
      return;
    }
  gop->in = g_unix_input_stream_new ((int) fd, TRUE);
  if (gop->op->flags & KV_FS_OP_FLAG_HEADER)
    g_input_stream_read_all_async (gop->in, gop->op->header, KV_CHUNK_HEADER_SIZE,
                                   G_PRIORITY_DEFAULT, NULL, load_header_read, gop);
  else
    load_read_payload (gop);
}

/* ---- delete ------------------------------------------------------------- */

static void
delete_done (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  GioOp *gop = user_data;
  g_autoptr(GError) error = NULL;

  if (!g_task_propagate_boolean (G_TASK (result), &error))
    {
      gio_op_fail (gop, errno_from_error (error));
      return;
    }
  gop->op->status = KV_FS_OP_STATUS_OK;
  gio_op_finish (gop);
}

/* ---- dispatch ----------------------------------------------------------- */

static void
start_op (KvFsGioEngine *self,
          KvFsOp        *op)
{
  GioOp *gop;

  if (_kv_fs_engine_take_injected (KV_FS_ENGINE (self), op))
    {
      _kv_fs_engine_finish (KV_FS_ENGINE (self), op);
      return;
    }

  gop = g_new0 (GioOp, 1);
  gop->engine = self;
  gop->op = op;
  /* a header buffer per op running: the pool bounds how many run */
  gop->header_index = self->free_headers[--self->n_free_headers];
  op->engine_data = gop;
  self->n_active++;

  if (op->flags & KV_FS_OP_FLAG_AT_OFFSET)
    {
      run_in_thread (gop, at_offset_thread, at_offset_done);
      return;
    }
  op->header = self->headers + (gsize) gop->header_index * KV_CHUNK_HEADER_SIZE;

  switch (op->kind)
    {
    case KV_FS_OP_STORE:
    case KV_FS_OP_PROBE:
      kv_fs_op_make_temp (op);
      run_in_thread (gop, open_for_write_thread, store_opened);
      break;

    case KV_FS_OP_LOAD:
      run_in_thread (gop, open_for_read_thread, load_opened);
      break;

    case KV_FS_OP_DELETE:
      op->state = UNLINK_FILE;
      run_in_thread (gop, unlink_thread, delete_done);
      break;
    }
}

static void
dispatch_ops (KvFsGioEngine *self)
{
  KvFsEngine *engine = KV_FS_ENGINE (self);
  KvFsOp *op;

  while (self->n_free_headers > 0 && (op = _kv_fs_engine_pop (engine, TRUE, FALSE)) != NULL)
    start_op (self, op);

  if (self->n_active == 0 && _kv_fs_engine_is_stopping (engine))
    g_main_loop_quit (self->loop);
}

static gboolean
dispatch_cb (gpointer user_data)
{
  KvFsGioEngine *self = user_data;

  g_source_set_ready_time (self->dispatch, -1);
  dispatch_ops (self);
  return G_SOURCE_CONTINUE;
}

static gboolean
wake_source_dispatch (GSource     *source,
                      GSourceFunc  callback,
                      gpointer     user_data)
{
  return callback (user_data);
}

static GSourceFuncs wake_source_funcs = {
  .dispatch = wake_source_dispatch,
};

static gpointer
io_thread_main (gpointer user_data)
{
  KvFsGioEngine *self = user_data;

  g_main_context_push_thread_default (self->context);
  g_main_loop_run (self->loop);
  g_main_context_pop_thread_default (self->context);
  return NULL;
}

static void
kv_fs_gio_engine_kick (KvFsEngine *engine)
{
  KvFsGioEngine *self = KV_FS_GIO_ENGINE (engine);

  /* Thread-safe: wakes the engine's context for one dispatch. */
  g_source_set_ready_time (self->dispatch, 0);
}

static gboolean
kv_fs_gio_engine_start (KvFsEngine  *engine,
                        GError     **error)
{
  KvFsGioEngine *self = KV_FS_GIO_ENGINE (engine);
  const KvFsEngineConfig *config = _kv_fs_engine_get_config (engine);

  self->n_headers = config->queue_depth;
  if (posix_memalign ((void **) &self->headers, 4096,
                      (gsize) self->n_headers * KV_CHUNK_HEADER_SIZE) != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "gio engine: cannot allocate %u header buffers", self->n_headers);
      return FALSE;
    }
  self->free_headers = g_new (int, self->n_headers);
  for (guint i = 0; i < self->n_headers; i++)
    self->free_headers[i] = self->n_headers - 1 - i;
  self->n_free_headers = self->n_headers;

  self->context = g_main_context_new ();
  self->loop = g_main_loop_new (self->context, FALSE);
  self->dispatch = g_source_new (&wake_source_funcs, sizeof (GSource));
  g_source_set_callback (self->dispatch, dispatch_cb, self, NULL);
  g_source_set_ready_time (self->dispatch, -1);
  g_source_set_name (self->dispatch, "kvtier-fs-gio-dispatch");
  g_source_attach (self->dispatch, self->context);

  self->thread = g_thread_new ("kvtier-fs-gio", io_thread_main, self);
  return TRUE;
}

static void
kv_fs_gio_engine_stop (KvFsEngine *engine)
{
  KvFsGioEngine *self = KV_FS_GIO_ENGINE (engine);

  if (self->thread != NULL)
    {
      g_thread_join (self->thread);
      self->thread = NULL;
    }
}

static void
kv_fs_gio_engine_finalize (GObject *object)
{
  KvFsGioEngine *self = KV_FS_GIO_ENGINE (object);

  if (self->dispatch != NULL)
    {
      g_source_destroy (self->dispatch);
      g_source_unref (self->dispatch);
    }
  g_clear_pointer (&self->loop, g_main_loop_unref);
  g_clear_pointer (&self->context, g_main_context_unref);
  free (self->headers);
  g_free (self->free_headers);

  G_OBJECT_CLASS (kv_fs_gio_engine_parent_class)->finalize (object);
}

static void
kv_fs_gio_engine_class_init (KvFsGioEngineClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvFsEngineClass *engine_class = KV_FS_ENGINE_CLASS (klass);

  object_class->finalize = kv_fs_gio_engine_finalize;
  engine_class->start = kv_fs_gio_engine_start;
  engine_class->kick = kv_fs_gio_engine_kick;
  engine_class->stop = kv_fs_gio_engine_stop;
}

static void
kv_fs_gio_engine_init (KvFsGioEngine *self)
{
}
