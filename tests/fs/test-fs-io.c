/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "kv-fs-io.h"

/*
 * The whole-transfer helpers against a real file, with the positioned
 * syscalls they make wrapped here (this executable's definitions come
 * before libc's): a wrapped call can fail with EINTR first, or move at
 * most a few bytes, as a signal or a busy filesystem makes them do.
 */

static struct
{
  guint n_eintr;    /* calls left to fail with EINTR */
  gsize max_bytes;  /* most bytes one call moves; 0: no limit */
  guint n_calls;
} fault;

typedef ssize_t (*VecFunc) (int, const struct iovec *, int, off_t);
typedef ssize_t (*ReadFunc) (int, void *, size_t, off_t);
typedef ssize_t (*WriteFunc) (int, const void *, size_t, off_t);

/* Trims @iov to fault.max_bytes into @out; returns its entry count. */
static int
limit_vec (const struct iovec *iov,
           int                 n,
           struct iovec       *out)
{
  gsize left = fault.max_bytes;
  int k = 0;

  for (int i = 0; i < n && (fault.max_bytes == 0 || left > 0); i++, k++)
    {
      out[k] = iov[i];
      if (fault.max_bytes > 0)
        {
          out[k].iov_len = MIN (out[k].iov_len, left);
          left -= out[k].iov_len;
        }
    }
  return k;
}

static gboolean
take_eintr (void)
{
  fault.n_calls++;
  if (fault.n_eintr == 0)
    return FALSE;
  fault.n_eintr--;
  errno = EINTR;
  return TRUE;
}

#define WRAP_VEC(name)                                                       \
  ssize_t name (int fd, const struct iovec *iov, int n, off_t offset);      \
  ssize_t                                                                    \
  name (int fd, const struct iovec *iov, int n, off_t offset)               \
  {                                                                          \
    static VecFunc real;                                                     \
    struct iovec limited[KV_FS_IO_MAX_VEC];                                  \
                                                                             \
    if (real == NULL)                                                        \
      real = (VecFunc) dlsym (RTLD_NEXT, #name);                             \
    if (take_eintr ())                                                       \
      return -1;                                                             \
    return real (fd, limited, limit_vec (iov, n, limited), offset);          \
  }

#define WRAP_ONE(name, Func, Buf)                                            \
  ssize_t name (int fd, Buf buf, size_t len, off_t offset);                  \
  ssize_t                                                                    \
  name (int fd, Buf buf, size_t len, off_t offset)                           \
  {                                                                          \
    static Func real;                                                        \
                                                                             \
    if (real == NULL)                                                        \
      real = (Func) dlsym (RTLD_NEXT, #name);                                \
    if (take_eintr ())                                                       \
      return -1;                                                             \
    if (fault.max_bytes > 0)                                                 \
      len = MIN (len, fault.max_bytes);                                      \
    return real (fd, buf, len, offset);                                      \
  }

/* Both names: the helpers call the 64-bit ones (_FILE_OFFSET_BITS=64). */
WRAP_VEC (preadv64)
WRAP_VEC (pwritev64)
WRAP_ONE (pread64, ReadFunc, void *)
WRAP_ONE (pwrite64, WriteFunc, const void *)

typedef struct
{
  char *dir;
  int   fd;
} Fixture;

static void
fixture_set_up (Fixture       *f,
                gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *path = NULL;

  f->dir = g_dir_make_tmp ("kvtier-fs-io-XXXXXX", &error);
  g_assert_no_error (error);
  path = g_build_filename (f->dir, "file", NULL);
  f->fd = open (path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  g_assert_cmpint (f->fd, >=, 0);
  memset (&fault, 0, sizeof fault);
}

static void
fixture_tear_down (Fixture       *f,
                   gconstpointer  data)
{
  g_autofree char *path = g_build_filename (f->dir, "file", NULL);

  memset (&fault, 0, sizeof fault);
  close (f->fd);
  g_unlink (path);
  g_rmdir (f->dir);
  g_free (f->dir);
}

static void
fill_pattern (guint8 *buf,
              gsize   len,
              guint8  seed)
{
  for (gsize i = 0; i < len; i++)
    buf[i] = (guint8) (i * 31 + seed);
}

/* A vector of three buffers (one empty) written and read back at an
 * offset, every call interrupted once and moving at most 7 bytes. */
static void
test_vec_short_and_interrupted (Fixture       *f,
                                gconstpointer  data)
{
  guint8 a[100], b[333], c[64];
  guint8 ra[100], rb[333], rc[64];
  struct iovec out[] = { { a, sizeof a }, { NULL, 0 }, { b, sizeof b }, { c, sizeof c } };
  struct iovec in[] = { { ra, sizeof ra }, { NULL, 0 }, { rb, sizeof rb }, { rc, sizeof rc } };
  gssize got;

  fill_pattern (a, sizeof a, 1);
  fill_pattern (b, sizeof b, 2);
  fill_pattern (c, sizeof c, 3);

  fault.max_bytes = 7;
  fault.n_eintr = 3;
  g_assert_cmpint (kv_fs_io_pwritev_full (f->fd, out, G_N_ELEMENTS (out), 4096), ==, 0);
  /* 497 bytes, 7 at a time, and the interrupted calls */
  g_assert_cmpuint (fault.n_calls, ==, 3 + (497 + 6) / 7);
  /* the caller's vector is left as it was */
  g_assert_true (out[0].iov_base == a && out[0].iov_len == sizeof a);
  g_assert_true (out[2].iov_base == b && out[2].iov_len == sizeof b);

  fault.n_eintr = 2;
  memset (ra, 0, sizeof ra);
  memset (rb, 0, sizeof rb);
  memset (rc, 0, sizeof rc);
  got = kv_fs_io_preadv_full (f->fd, in, G_N_ELEMENTS (in), 4096);
  g_assert_cmpint (got, ==, 497);
  g_assert_cmpmem (ra, sizeof ra, a, sizeof a);
  g_assert_cmpmem (rb, sizeof rb, b, sizeof b);
  g_assert_cmpmem (rc, sizeof rc, c, sizeof c);
  g_assert_cmpuint (kv_fs_io_vec_length (in, G_N_ELEMENTS (in)), ==, 497);
}

/* A read past the end of the file returns what there was: end of file
 * is a short count, not an error. */
static void
test_vec_end_of_file (Fixture       *f,
                      gconstpointer  data)
{
  guint8 a[50];
  guint8 r1[40], r2[40];
  struct iovec in[] = { { r1, sizeof r1 }, { r2, sizeof r2 } };

  fill_pattern (a, sizeof a, 9);
  g_assert_cmpint (kv_fs_io_pwrite_full (f->fd, a, sizeof a, 0), ==, 0);
  fault.max_bytes = 3;
  fault.n_eintr = 1;
  g_assert_cmpint (kv_fs_io_preadv_full (f->fd, in, 2, 0), ==, 50);
  g_assert_cmpmem (r1, sizeof r1, a, 40);
  g_assert_cmpmem (r2, 10, a + 40, 10);
  g_assert_cmpint (kv_fs_io_preadv_full (f->fd, in, 2, 50), ==, 0);
  g_assert_cmpint (kv_fs_io_pread_full (f->fd, r1, sizeof r1, 45), ==, 5);
  g_assert_cmpmem (r1, 5, a + 45, 5);
}

/* The single-buffer forms, interrupted and short. */
static void
test_one_short_and_interrupted (Fixture       *f,
                                gconstpointer  data)
{
  guint8 a[1000];
  guint8 r[1000];

  fill_pattern (a, sizeof a, 5);
  fault.max_bytes = 100;
  fault.n_eintr = 2;
  g_assert_cmpint (kv_fs_io_pwrite_full (f->fd, a, sizeof a, 12), ==, 0);
  g_assert_cmpuint (fault.n_calls, ==, 2 + 10);
  fault.n_eintr = 2;
  g_assert_cmpint (kv_fs_io_pread_full (f->fd, r, sizeof r, 12), ==, sizeof r);
  g_assert_cmpmem (r, sizeof r, a, sizeof a);
}

/* Errors other than EINTR come back as errnos, at once. */
static void
test_errors (Fixture       *f,
             gconstpointer  data)
{
  guint8 a[16] = { 0 };
  struct iovec v = { a, sizeof a };
  int fd = dup (f->fd);

  close (fd);
  g_assert_cmpint (kv_fs_io_pwritev_full (fd, &v, 1, 0), ==, EBADF);
  g_assert_cmpint (kv_fs_io_preadv_full (fd, &v, 1, 0), ==, -EBADF);
  g_assert_cmpint (kv_fs_io_pwrite_full (fd, a, sizeof a, 0), ==, EBADF);
  g_assert_cmpint (kv_fs_io_pread_full (fd, a, sizeof a, 0), ==, -EBADF);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add ("/kvtier/fs/io/vec-short-and-interrupted", Fixture, NULL, fixture_set_up,
              test_vec_short_and_interrupted, fixture_tear_down);
  g_test_add ("/kvtier/fs/io/vec-end-of-file", Fixture, NULL, fixture_set_up,
              test_vec_end_of_file, fixture_tear_down);
  g_test_add ("/kvtier/fs/io/one-short-and-interrupted", Fixture, NULL, fixture_set_up,
              test_one_short_and_interrupted, fixture_tear_down);
  g_test_add ("/kvtier/fs/io/errors", Fixture, NULL, fixture_set_up,
              test_errors, fixture_tear_down);

  return g_test_run ();
}
