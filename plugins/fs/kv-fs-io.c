/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-io.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

gsize
kv_fs_io_vec_length (const struct iovec *iov,
                     guint               n_iov)
{
  gsize len = 0;

  for (guint i = 0; i < n_iov; i++)
    len += iov[i].iov_len;
  return len;
}

/* Moves all of @iov at @offset, in as many calls as it takes. Returns the
 * bytes moved (fewer than asked only when a read met end of file) or
 * -errno. The vector is copied: a short transfer trims the copy, never
 * the caller's. */
static gssize
move_vec (int                 fd,
          gboolean            write,
          const struct iovec *iov,
          guint               n_iov,
          guint64             offset)
{
  struct iovec left[KV_FS_IO_MAX_VEC];
  struct iovec *cur = left;
  guint n_left = n_iov;
  gssize total = 0;

  g_return_val_if_fail (n_iov <= KV_FS_IO_MAX_VEC, -EINVAL);

  memcpy (left, iov, n_iov * sizeof *iov);
  /* empty entries would make a call that moves nothing look like EOF */
  while (n_left > 0 && cur->iov_len == 0)
    {
      cur++;
      n_left--;
    }
  while (n_left > 0)
    {
      ssize_t n = write ? pwritev (fd, cur, n_left, offset + total)
                        : preadv (fd, cur, n_left, offset + total);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return -errno;
      if (n == 0)
        return write ? -EIO : total;   /* a read at end of file */
      total += n;
      while (n_left > 0 && (gsize) n >= cur->iov_len)
        {
          n -= cur->iov_len;
          cur++;
          n_left--;
        }
      if (n_left > 0)
        {
          cur->iov_base = (char *) cur->iov_base + n;
          cur->iov_len -= n;
        }
    }
  return total;
}

gssize
kv_fs_io_preadv_full (int                 fd,
                      const struct iovec *iov,
                      guint               n_iov,
                      guint64             offset)
{
  return move_vec (fd, FALSE, iov, n_iov, offset);
}

int
kv_fs_io_pwritev_full (int                 fd,
                       const struct iovec *iov,
                       guint               n_iov,
                       guint64             offset)
{
  gssize n = move_vec (fd, TRUE, iov, n_iov, offset);

  return n < 0 ? (int) -n : 0;
}

gssize
kv_fs_io_pread_full (int      fd,
                     void    *buf,
                     gsize    len,
                     guint64  offset)
{
  gsize done = 0;

  while (done < len)
    {
      ssize_t n = pread (fd, (char *) buf + done, len - done, offset + done);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return -errno;
      if (n == 0)
        break;
      done += n;
    }
  return done;
}

int
kv_fs_io_pwrite_full (int         fd,
                      const void *buf,
                      gsize       len,
                      guint64     offset)
{
  gsize done = 0;

  while (done < len)
    {
      ssize_t n = pwrite (fd, (const char *) buf + done, len - done, offset + done);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return errno;
      if (n == 0)
        return EIO;
      done += n;
    }
  return 0;
}
