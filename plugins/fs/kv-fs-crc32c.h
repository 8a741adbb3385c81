/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The file checksum vLLM's fs tier keeps in an extended attribute of each
 * block file (its `checksum_blocks` option): CRC32C (Castagnoli) of the
 * whole file, stored as 4 big-endian bytes. */
#define KV_FS_VLLM_CRC32C_XATTR "user.vllm.kv_crc32c"

guint32 kv_fs_crc32c       (const void *data,
                            gsize       len);
/* the same without the SSE4.2 instruction, for tests */
guint32 kv_fs_crc32c_table (const void *data,
                            gsize       len);

G_END_DECLS
