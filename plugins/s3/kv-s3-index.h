/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* The most keys an index may be told to hold (a table of 4 GiB). */
#define KV_S3_INDEX_MAX_KEYS_LIMIT (1u << 28)

/* The chunks an s3 tier knows exist in its bucket, as a bounded set of
 * 64-bit key digests; every function is thread-safe. */
typedef struct _KvS3Index KvS3Index;

KvS3Index  *kv_s3_index_new            (guint            max_keys);
void        kv_s3_index_free           (KvS3Index       *self);
guint64     kv_s3_index_digest         (const KvKey     *key);
guint64     kv_s3_index_digest_hash    (const guint8    *hash,
                                        gsize            hash_len,
                                        guint32          group);
gboolean    kv_s3_index_contains       (KvS3Index       *self,
                                        guint64          digest);
gboolean    kv_s3_index_add            (KvS3Index       *self,
                                        guint64          digest);
gboolean    kv_s3_index_remove         (KvS3Index       *self,
                                        guint64          digest);
void        kv_s3_index_clear          (KvS3Index       *self);
guint       kv_s3_index_get_size       (KvS3Index       *self);
guint       kv_s3_index_get_max_keys   (KvS3Index       *self);
gsize       kv_s3_index_get_table_bytes (KvS3Index      *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvS3Index, kv_s3_index_free)

G_END_DECLS
