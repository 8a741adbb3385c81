/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <unistd.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "kv-fs-engine.h"
#include "kv-fs-op.h"
#if KV_FS_HAVE_URING
# include "kv-fs-uring-engine.h"
#endif

/* Every I/O engine, with and without O_DIRECT, runs the same ops: store,
 * load, delete, probe, corruption, cancellation, error injection, and
 * (for the engines with one dispatcher) loads ahead of stores. */

#define N_SLOTS 8

typedef struct
{
  KvFsIoEngine engine;
  gboolean     o_direct;
} Variant;

typedef struct
{
  KvFsEngine *engine;
  guint8     *buffer;
  char       *root;
  KvFsLayout *layout;
  const char *dir;     /* the layout's chunk directory: ops' files go below */
  guint8      ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  KvFsOpFlags flags;
  KvKey      *keys[N_SLOTS];
  GMutex      lock;
  GCond       cond;
  guint       n_done;
  GPtrArray  *order;   /* ops in completion order */
} Fixture;

static void
op_done (KvFsOp   *op,
         gpointer  user_data)
{
  Fixture *f = user_data;

  g_mutex_lock (&f->lock);
  f->n_done++;
  g_ptr_array_add (f->order, op);
  g_cond_broadcast (&f->cond);
  g_mutex_unlock (&f->lock);
}

static void
wait_done (Fixture *f,
           guint    n)
{
  g_mutex_lock (&f->lock);
  while (f->n_done < n)
    g_cond_wait (&f->cond, &f->lock);
  g_mutex_unlock (&f->lock);
}

static KvFsEngine *
make_engine (Fixture       *f,
             const Variant *v,
             guint64        inflight_bytes,
             GError       **error)
{
  KvFsEngineConfig config = { 0 };

  config.n_roots = 1;
  config.inflight_bytes = inflight_bytes;
  config.n_read_threads = 1;
  config.n_write_threads = 1;
  config.queue_depth = 8;
  config.buffer = f->buffer;
  config.buffer_size = N_SLOTS * FS_TEST_SLOT;
  config.slot_size = FS_TEST_SLOT;
  config.layout = f->layout;
  return kv_fs_engine_new (v->engine, &config, error);
}

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  const Variant *v = data;
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (posix_memalign ((void **) &f->buffer, 4096, N_SLOTS * FS_TEST_SLOT), ==, 0);
  memset (f->buffer, 0, N_SLOTS * FS_TEST_SLOT);
  f->root = test_dir_make ("kvtier-fs-test");
  /* vLLM's layout: its chunk directory holds nothing but chunks, and
   * directories below it are made on first use */
  f->layout = kv_fs_layout_new (KV_FS_LAYOUT_KIND_VLLM, f->root, NULL, FS_TEST_SLOT,
                                FS_TEST_VLLM_IDENTITY, 0, &error);
  g_assert_no_error (error);
  g_assert_true (kv_fs_layout_create_dirs (f->layout, &error));
  g_assert_no_error (error);
  f->dir = kv_fs_layout_get_chunk_dir (f->layout, 0);
  kv_chunk_namespace_digest ("engine-test", FS_TEST_SLOT, f->ns);
  f->flags = KV_FS_OP_FLAG_HEADER | (v->o_direct ? KV_FS_OP_FLAG_O_DIRECT : 0);
  for (guint i = 0; i < N_SLOTS; i++)
    f->keys[i] = test_chunk_key (i);
  g_mutex_init (&f->lock);
  g_cond_init (&f->cond);
  f->order = g_ptr_array_new ();
  f->engine = make_engine (f, v, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpint (kv_fs_engine_get_kind (f->engine), ==, v->engine);
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  kv_fs_engine_shutdown (f->engine);
  g_object_add_weak_pointer (G_OBJECT (f->engine), (gpointer *) &f->engine);
  g_object_unref (f->engine);
  g_assert_null (f->engine);
  for (guint i = 0; i < N_SLOTS; i++)
    kv_key_unref (f->keys[i]);
  kv_fs_layout_free (f->layout);
  test_dir_remove (f->root);
  g_free (f->root);
  free (f->buffer);
  g_ptr_array_unref (f->order);
  g_mutex_clear (&f->lock);
  g_cond_clear (&f->cond);
}

static guint8 *
slot (Fixture *f,
      guint    i)
{
  return f->buffer + (gsize) i * FS_TEST_SLOT;
}

static KvFsOp *
new_op (Fixture    *f,
        KvFsOpKind  kind,
        guint       key,
        guint       slot_index,
        KvFsOpFlags extra)
{
  KvFsOp *op = g_new0 (KvFsOp, 1);
  g_autofree char *name = g_strdup_printf ("chunk-%u.kv", key);

  kv_fs_op_init (op, kind, f->flags | extra, 0, g_build_filename (f->dir, "a", "b", name, NULL),
                 kv_key_ref (f->keys[key]));
  op->payload = slot (f, slot_index);
  op->payload_len = FS_TEST_SLOT;
  op->slot = slot_index;
  op->namespace_digest = f->ns;
  op->done = op_done;
  op->done_data = f;
  return op;
}

static void
free_op (KvFsOp *op)
{
  kv_fs_op_clear (op);
  g_free (op);
}

/* Runs one op to completion. */
static KvFsOpStatus
run (Fixture *f,
     KvFsOp  *op)
{
  guint before;
  KvFsOpStatus status;

  g_mutex_lock (&f->lock);
  before = f->n_done;
  g_mutex_unlock (&f->lock);
  kv_fs_engine_submit (f->engine, &op, 1);
  wait_done (f, before + 1);
  status = op->status;
  return status;
}

static void
store (Fixture *f,
       guint    key,
       guint    slot_index)
{
  KvFsOp *op = new_op (f, KV_FS_OP_STORE, key, slot_index, 0);

  test_chunk_fill (slot (f, slot_index), FS_TEST_SLOT, key);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  free_op (op);
}

static char *
path_of (Fixture *f,
         guint    key)
{
  g_autofree char *name = g_strdup_printf ("chunk-%u.kv", key);

  return g_build_filename (f->dir, "a", "b", name, NULL);
}

static void
test_round_trip (Fixture       *f,
                 gconstpointer  data)
{
  g_autofree char *path = path_of (f, 1);
  g_autofree char *contents = NULL;
  gsize length = 0;
  GStatBuf st;
  KvFsOp *op;

  store (f, 1, 0);
  g_assert_true (g_file_get_contents (path, &contents, &length, NULL));
  g_assert_cmpuint (length, ==, KV_CHUNK_HEADER_SIZE + FS_TEST_SLOT);
  g_assert_cmpint (kv_chunk_check ((guint8 *) contents, KV_CHUNK_HEADER_SIZE,
                                      contents + KV_CHUNK_HEADER_SIZE, FS_TEST_SLOT, FS_TEST_SLOT,
                                      f->ns, f->keys[1], TRUE), ==, KV_CHUNK_CHECK_OK);
  g_assert_true (test_chunk_check ((guint8 *) contents + KV_CHUNK_HEADER_SIZE, FS_TEST_SLOT, 1));
  g_assert_cmpint (g_stat (path, &st), ==, 0);
  g_assert_cmpuint (st.st_mode & 0777, ==, 0600);
  g_assert_cmpuint (test_dir_count_files (f->dir, ".tmp"), ==, 0);

  /* into another slot */
  op = new_op (f, KV_FS_OP_LOAD, 1, 5, KV_FS_OP_FLAG_VERIFY);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  g_assert_true (test_chunk_check (slot (f, 5), FS_TEST_SLOT, 1));
  g_assert_cmpint (op->got_payload, ==, FS_TEST_SLOT);
  free_op (op);

  op = new_op (f, KV_FS_OP_DELETE, 1, 0, 0);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  free_op (op);
  /* deleting a missing file is fine */
  op = new_op (f, KV_FS_OP_DELETE, 1, 0, 0);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  free_op (op);
}

static void
test_headerless (Fixture       *f,
                 gconstpointer  data)
{
  g_autofree char *path = path_of (f, 2);
  g_autofree char *contents = NULL;
  gsize length = 0;
  KvFsOp *op;

  f->flags &= ~KV_FS_OP_FLAG_HEADER;
  store (f, 2, 1);
  g_assert_true (g_file_get_contents (path, &contents, &length, NULL));
  g_assert_cmpuint (length, ==, FS_TEST_SLOT);
  g_assert_true (test_chunk_check ((guint8 *) contents, FS_TEST_SLOT, 2));

  op = new_op (f, KV_FS_OP_LOAD, 2, 6, KV_FS_OP_FLAG_VERIFY);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  g_assert_true (test_chunk_check (slot (f, 6), FS_TEST_SLOT, 2));
  free_op (op);

  /* a short headerless file: deleted */
  g_assert_true (g_file_set_contents (path, contents, FS_TEST_SLOT / 2, NULL));
  op = new_op (f, KV_FS_OP_LOAD, 2, 6, KV_FS_OP_FLAG_VERIFY);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_CORRUPT);
  g_assert_cmpint (op->check, ==, KV_CHUNK_CHECK_SHORT);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  free_op (op);
}

static void
rewrite_byte (const char *path,
              gsize       offset)
{
  g_autofree char *contents = NULL;
  gsize length = 0;

  g_assert_true (g_file_get_contents (path, &contents, &length, NULL));
  g_assert_cmpuint (offset, <, length);
  contents[offset] ^= 0x01;
  g_assert_true (g_file_set_contents (path, contents, length, NULL));
}

static void
test_corrupt_and_missing (Fixture       *f,
                          gconstpointer  data)
{
  g_autofree char *path = path_of (f, 3);
  KvFsOp *op;

  op = new_op (f, KV_FS_OP_LOAD, 3, 4, KV_FS_OP_FLAG_VERIFY);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_NOT_FOUND);
  g_assert_cmpint (op->error, ==, ENOENT);
  free_op (op);

  /* a payload bit flip, verify off: loaded as is, file kept */
  store (f, 3, 0);
  rewrite_byte (path, KV_CHUNK_HEADER_SIZE + 100);
  op = new_op (f, KV_FS_OP_LOAD, 3, 4, 0);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  free_op (op);
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));

  /* verify on: detected and deleted */
  op = new_op (f, KV_FS_OP_LOAD, 3, 4, KV_FS_OP_FLAG_VERIFY);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_CORRUPT);
  g_assert_cmpint (op->check, ==, KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM);
  free_op (op);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));

  /* the file of key 3 under key 4's name */
  store (f, 3, 0);
  {
    g_autofree char *other = path_of (f, 4);

    g_assert_cmpint (g_rename (path, other), ==, 0);
    op = new_op (f, KV_FS_OP_LOAD, 4, 4, KV_FS_OP_FLAG_VERIFY);
    g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_CORRUPT);
    g_assert_cmpint (op->check, ==, KV_CHUNK_CHECK_WRONG_KEY);
    g_assert_false (g_file_test (other, G_FILE_TEST_EXISTS));
    free_op (op);
  }
}

static void
test_skip_existing (Fixture       *f,
                    gconstpointer  data)
{
  KvFsOp *op;

  store (f, 5, 0);
  op = new_op (f, KV_FS_OP_STORE, 5, 0, KV_FS_OP_FLAG_SKIP_EXISTING);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_EXISTS);
  free_op (op);
  /* without the flag, the file is replaced atomically */
  op = new_op (f, KV_FS_OP_STORE, 5, 0, 0);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  free_op (op);
  g_assert_cmpuint (test_dir_count_files (f->dir, ".tmp"), ==, 0);
}

static void
test_durability (Fixture       *f,
                 gconstpointer  data)
{
  KvFsOp *op;

  test_chunk_fill (slot (f, 2), FS_TEST_SLOT, 6);
  op = new_op (f, KV_FS_OP_STORE, 6, 2, KV_FS_OP_FLAG_DATASYNC | KV_FS_OP_FLAG_DIRSYNC);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  free_op (op);
  op = new_op (f, KV_FS_OP_LOAD, 6, 3, KV_FS_OP_FLAG_VERIFY);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  g_assert_true (test_chunk_check (slot (f, 3), FS_TEST_SLOT, 6));
  free_op (op);
}

static void
test_probe (Fixture       *f,
            gconstpointer  data)
{
  KvFsOp *op = new_op (f, KV_FS_OP_PROBE, 0, 0, 0);

  op->payload = NULL;
  op->payload_len = 0;
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  free_op (op);
  g_assert_cmpuint (test_dir_count_files (f->dir, NULL), ==, 0);
}

static void
test_cancel_stalled (Fixture       *f,
                     gconstpointer  data)
{
  KvFsOp *ops[3];

  kv_fs_engine_set_stalled (f->engine, TRUE);
  for (guint i = 0; i < 3; i++)
    ops[i] = new_op (f, i == 2 ? KV_FS_OP_LOAD : KV_FS_OP_STORE, i, i, 0);
  kv_fs_engine_submit (f->engine, ops, 3);
  g_assert_cmpuint (kv_fs_engine_get_n_queued (f->engine), ==, 3);
  g_assert_cmpuint (kv_fs_engine_cancel (f->engine, ops, 2), ==, 2);
  g_assert_cmpuint (f->n_done, ==, 2);
  g_assert_cmpint (ops[0]->status, ==, KV_FS_OP_STATUS_CANCELLED);
  g_assert_cmpint (ops[1]->status, ==, KV_FS_OP_STATUS_CANCELLED);

  kv_fs_engine_set_stalled (f->engine, FALSE);
  wait_done (f, 3);
  g_assert_cmpint (ops[2]->status, ==, KV_FS_OP_STATUS_NOT_FOUND);
  /* running or finished ops cannot be cancelled */
  g_assert_cmpuint (kv_fs_engine_cancel (f->engine, ops, 3), ==, 0);
  g_assert_cmpuint (test_dir_count_files (f->dir, NULL), ==, 0);
  for (guint i = 0; i < 3; i++)
    free_op (ops[i]);
}

static void
test_injected_error (Fixture       *f,
                     gconstpointer  data)
{
  KvFsOp *op;

  kv_fs_engine_inject_error (f->engine, KV_FS_OP_STORE, EIO, 1);
  op = new_op (f, KV_FS_OP_STORE, 1, 0, 0);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_IO_ERROR);
  g_assert_cmpint (op->error, ==, EIO);
  free_op (op);
  g_assert_cmpuint (test_dir_count_files (f->dir, NULL), ==, 0);
  /* only once */
  store (f, 1, 0);
}

/* Submitted stores then loads, one op at a time (a budget of one chunk):
 * the loads go first. */
static void
test_loads_first (Fixture       *f,
                  gconstpointer  data)
{
  const Variant *v = data;
  g_autoptr(GError) error = NULL;
  KvFsOp *ops[4];

  store (f, 0, 0);
  store (f, 1, 1);
  kv_fs_engine_shutdown (f->engine);
  g_object_unref (f->engine);
  f->engine = make_engine (f, v, 1, &error);
  g_assert_no_error (error);
  g_ptr_array_set_size (f->order, 0);
  f->n_done = 0;

  kv_fs_engine_set_stalled (f->engine, TRUE);
  ops[0] = new_op (f, KV_FS_OP_STORE, 2, 2, 0);
  ops[1] = new_op (f, KV_FS_OP_STORE, 3, 3, 0);
  ops[2] = new_op (f, KV_FS_OP_LOAD, 0, 4, 0);
  ops[3] = new_op (f, KV_FS_OP_LOAD, 1, 5, 0);
  kv_fs_engine_submit (f->engine, ops, 4);
  kv_fs_engine_set_stalled (f->engine, FALSE);
  wait_done (f, 4);
  g_assert_true (f->order->pdata[0] == ops[2]);
  g_assert_true (f->order->pdata[1] == ops[3]);
  g_assert_true (f->order->pdata[2] == ops[0]);
  g_assert_true (f->order->pdata[3] == ops[1]);
  for (guint i = 0; i < 4; i++)
    {
      g_assert_cmpint (ops[i]->status, ==, KV_FS_OP_STATUS_OK);
      free_op (ops[i]);
    }
}

/* An unaligned buffer cannot go through O_DIRECT: that op is buffered. */
static void
test_unaligned_fallback (Fixture       *f,
                         gconstpointer  data)
{
  KvFsOp *op = new_op (f, KV_FS_OP_STORE, 7, 0, 0);

  op->payload = slot (f, 1) + 512;
  op->payload_len = FS_TEST_SLOT - 1024;
  test_chunk_fill (op->payload, op->payload_len, 7);
  g_assert_false (kv_fs_op_is_aligned (op));
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  free_op (op);

  op = new_op (f, KV_FS_OP_LOAD, 7, 0, KV_FS_OP_FLAG_VERIFY);
  op->payload = slot (f, 4) + 512;
  op->payload_len = FS_TEST_SLOT - 1024;
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  g_assert_true (test_chunk_check (slot (f, 4) + 512, FS_TEST_SLOT - 1024, 7));
  free_op (op);
}

static void
test_uring_fixed_buffers (Fixture       *f,
                          gconstpointer  data)
{
#if KV_FS_HAVE_URING
  /* Root may pin memory; an unprivileged run may fall back. */
  if (!kv_fs_uring_engine_uses_fixed_buffers (KV_FS_URING_ENGINE (f->engine)))
    g_test_message ("the primary buffer could not be registered (RLIMIT_MEMLOCK?)");
  else
    g_test_message ("primary registered as fixed buffers");
  store (f, 2, 2);
#endif
}

/* ---- bytes at an offset (KV_FS_OP_FLAG_AT_OFFSET) ----------------------- */

/* What the hooks of the ops below saw. */
static struct
{
  gint     n_prepared;
  gint     n_completed;
  gboolean off_thread;   /* every hook ran on a thread not the test's */
  GThread *test_thread;
  guint8  *again_header; /* the buffer a store's first completion swaps in */
} at_offset;

static void
at_offset_prepare (KvFsOp *op)
{
  g_atomic_int_inc (&at_offset.n_prepared);
  if (g_thread_self () == at_offset.test_thread)
    at_offset.off_thread = FALSE;
  memset (op->io_vec[0].iov_base, 0xa5, op->io_vec[0].iov_len);
}

/* Store: the first completion writes another header in place of the
 * first (as a layout retracts a record), the second ends the op. */
static KvFsOpIoNext
at_offset_store_complete (KvFsOp *op)
{
  if (g_thread_self () == at_offset.test_thread)
    at_offset.off_thread = FALSE;
  if (g_atomic_int_add (&at_offset.n_completed, 1) == 0)
    {
      op->io_vec[0].iov_base = at_offset.again_header;
      op->io_n_vec = 1;
      return KV_FS_OP_IO_AGAIN;
    }
  op->status = KV_FS_OP_STATUS_OK;
  return KV_FS_OP_IO_DONE;
}

static KvFsOpIoNext
at_offset_load_complete (KvFsOp *op)
{
  g_atomic_int_inc (&at_offset.n_completed);
  if (g_thread_self () == at_offset.test_thread)
    at_offset.off_thread = FALSE;
  op->status = KV_FS_OP_STATUS_OK;
  return KV_FS_OP_IO_DONE;
}

static KvFsOp *
new_at_offset_op (Fixture            *f,
                  KvFsOpKind          kind,
                  int                 fd,
                  guint64             offset,
                  guint8             *head,
                  guint               slot_index,
                  KvFsOpCompleteFunc  complete)
{
  KvFsOp *op = g_new0 (KvFsOp, 1);

  kv_fs_op_init (op, kind, KV_FS_OP_FLAG_AT_OFFSET | KV_FS_OP_FLAG_DATASYNC, 0,
                 g_strdup ("bytes"), NULL);
  op->payload = slot (f, slot_index);
  op->payload_len = FS_TEST_SLOT;
  op->io_fd = fd;
  op->io_offset = offset;
  op->io_write = kind == KV_FS_OP_STORE;
  op->io_vec[0] = (struct iovec) { head, KV_CHUNK_HEADER_SIZE };
  op->io_vec[1] = (struct iovec) { slot (f, slot_index), FS_TEST_SLOT };
  op->io_n_vec = 2;
  op->io_complete = complete;
  op->done = op_done;
  op->done_data = f;
  return op;
}

/* Every engine moves a vector (one buffer in the primary, one not) at an
 * offset of a descriptor it did not open, runs the prepare hook once and
 * the complete hook after each transfer, on its own threads, moves the
 * vector again when asked, and fails a read past the end of the file
 * with EIO without calling the hook. */
static void
test_at_offset (Fixture       *f,
                gconstpointer  data)
{
  const Variant *v = data;
  g_autofree char *path = g_build_filename (f->root, "bytes", NULL);
  guint8 *head = NULL;
  guint8 *again = NULL;
  guint8 *back = NULL;
  guint8 *expect;
  const guint64 offset = 3 * 4096;
  KvFsOp *op;
  int fd;

  g_assert_cmpint (posix_memalign ((void **) &head, 4096, KV_CHUNK_HEADER_SIZE), ==, 0);
  g_assert_cmpint (posix_memalign ((void **) &again, 4096, KV_CHUNK_HEADER_SIZE), ==, 0);
  g_assert_cmpint (posix_memalign ((void **) &back, 4096, KV_CHUNK_HEADER_SIZE), ==, 0);
  memset (again, 0x3c, KV_CHUNK_HEADER_SIZE);
  fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | (v->o_direct ? O_DIRECT : 0), 0600);
  if (fd < 0 && v->o_direct && errno == EINVAL)
    fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  g_assert_cmpint (fd, >=, 0);
  memset (&at_offset, 0, sizeof at_offset);
  at_offset.off_thread = TRUE;
  at_offset.test_thread = g_thread_self ();
  at_offset.again_header = again;

  /* a store, prepared, written, then its header written again */
  test_chunk_fill (slot (f, 0), FS_TEST_SLOT, 3);
  op = new_at_offset_op (f, KV_FS_OP_STORE, fd, offset, head, 0, at_offset_store_complete);
  op->io_prepare = at_offset_prepare;
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  g_assert_cmpint (at_offset.n_prepared, ==, 1);
  g_assert_cmpint (at_offset.n_completed, ==, 2);
  free_op (op);

  /* read back into another slot: the second header, then the payload */
  at_offset.n_completed = 0;
  op = new_at_offset_op (f, KV_FS_OP_LOAD, fd, offset, back, 1, at_offset_load_complete);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_OK);
  g_assert_cmpint (at_offset.n_completed, ==, 1);
  g_assert_cmpmem (back, KV_CHUNK_HEADER_SIZE, again, KV_CHUNK_HEADER_SIZE);
  g_assert_true (test_chunk_check (slot (f, 1), FS_TEST_SLOT, 3));
  free_op (op);
  g_assert_true (at_offset.off_thread);

  /* the bytes are where they were asked to go, and nothing else */
  {
    g_autofree char *contents = NULL;
    gsize len = 0;

    g_assert_true (g_file_get_contents (path, &contents, &len, NULL));
    g_assert_cmpuint (len, ==, offset + KV_CHUNK_HEADER_SIZE + FS_TEST_SLOT);
    expect = g_malloc0 (offset);
    g_assert_cmpmem (contents, offset, expect, offset);
    g_free (expect);
    g_assert_cmpmem (contents + offset, KV_CHUNK_HEADER_SIZE, again, KV_CHUNK_HEADER_SIZE);
    g_assert_cmpmem (contents + offset + KV_CHUNK_HEADER_SIZE, FS_TEST_SLOT,
                     slot (f, 0), FS_TEST_SLOT);
  }

  /* past the end of the file: EIO, and no hook */
  at_offset.n_completed = 0;
  op = new_at_offset_op (f, KV_FS_OP_LOAD, fd, offset + 4096, back, 2, at_offset_load_complete);
  g_assert_cmpint (run (f, op), ==, KV_FS_OP_STATUS_IO_ERROR);
  g_assert_cmpint (op->error, ==, EIO);
  g_assert_cmpint (at_offset.n_completed, ==, 0);
  free_op (op);

  close (fd);
  g_unlink (path);
  free (head);
  free (again);
  free (back);
}

static void
add (const char *name,
     void      (*func) (Fixture *, gconstpointer),
     gboolean    single_dispatcher_only)
{
  static const Variant variants[] = {
#if KV_FS_HAVE_URING
    { KV_FS_IO_ENGINE_URING, TRUE }, { KV_FS_IO_ENGINE_URING, FALSE },
#endif
    { KV_FS_IO_ENGINE_GIO, TRUE }, { KV_FS_IO_ENGINE_GIO, FALSE },
    { KV_FS_IO_ENGINE_THREADS, TRUE }, { KV_FS_IO_ENGINE_THREADS, FALSE },
  };

  for (guint i = 0; i < G_N_ELEMENTS (variants); i++)
    {
      g_autofree char *path = NULL;

      /* The thread pool's store threads prefer stores by design (§8.8). */
      if ((single_dispatcher_only && variants[i].engine == KV_FS_IO_ENGINE_THREADS) ||
          fs_test_skip_engine (variants[i].engine))
        continue;
      path = g_strdup_printf ("/kvtier/fs/engine/%s/%s/%s", fs_engine_name (variants[i].engine),
                              variants[i].o_direct ? "direct" : "buffered", name);
      g_test_add (path, Fixture, &variants[i], setup, func, teardown);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  add ("round-trip", test_round_trip, FALSE);
  add ("headerless", test_headerless, FALSE);
  add ("corrupt-and-missing", test_corrupt_and_missing, FALSE);
  add ("skip-existing", test_skip_existing, FALSE);
  add ("durability", test_durability, FALSE);
  add ("probe", test_probe, FALSE);
  add ("cancel-stalled", test_cancel_stalled, FALSE);
  add ("injected-error", test_injected_error, FALSE);
  add ("unaligned-fallback", test_unaligned_fallback, FALSE);
  add ("loads-ahead-of-stores", test_loads_first, TRUE);
  add ("at-offset", test_at_offset, FALSE);
#if KV_FS_HAVE_URING
  if (!fs_test_skip_engine (KV_FS_IO_ENGINE_URING))
  {
    static const Variant uring = { KV_FS_IO_ENGINE_URING, TRUE };

    g_test_add ("/kvtier/fs/engine/uring/fixed-buffers", Fixture, &uring, setup,
                test_uring_fixed_buffers, teardown);
  }
#endif

  return g_test_run ();
}
