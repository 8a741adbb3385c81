/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>
#include <sys/uio.h>

G_BEGIN_DECLS

/*
 * Whole transfers at an offset of a descriptor: the one place that
 * retries EINTR and continues short transfers, for every engine and
 * layout that moves bytes with plain syscalls.
 *
 * Reads return the bytes read, fewer than asked only at end of file, or
 * -errno. Writes return 0 or an errno; a write that moves nothing (which
 * a regular file never does but at an error) is EIO.
 */

/* The most entries of one vector (a merged read of adjacent records
 * stays well below it). */
#define KV_FS_IO_MAX_VEC 64

gssize  kv_fs_io_pread_full   (int                 fd,
                               void               *buf,
                               gsize               len,
                               guint64             offset);
int     kv_fs_io_pwrite_full  (int                 fd,
                               const void         *buf,
                               gsize               len,
                               guint64             offset);
gssize  kv_fs_io_preadv_full  (int                 fd,
                               const struct iovec *iov,
                               guint               n_iov,
                               guint64             offset);
int     kv_fs_io_pwritev_full (int                 fd,
                               const struct iovec *iov,
                               guint               n_iov,
                               guint64             offset);
gsize   kv_fs_io_vec_length   (const struct iovec *iov,
                               guint               n_iov);

G_END_DECLS
