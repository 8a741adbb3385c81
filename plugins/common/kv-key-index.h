/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/**
 * KV_KEY_INDEX_MAX_KEYS_LIMIT:
 *
 * The most keys an index may be told to hold (a table of 4 GiB): the top
 * of the tiers' `index-max-keys` range.
 */
#define KV_KEY_INDEX_MAX_KEYS_LIMIT (1u << 28)

/**
 * KvKeyIndex:
 *
 * The chunks a tier knows exist in its store (the s3 tier's bucket, the
 * redis tier's servers), as a bounded set of 64-bit key digests, so that
 * a lookup of one of them needs no request. 16 to 32 bytes a key; every
 * function is thread-safe (one lock, held for one probe).
 */
typedef struct _KvKeyIndex KvKeyIndex;

KvKeyIndex *kv_key_index_new             (guint          max_keys);
void        kv_key_index_free            (KvKeyIndex    *self);
guint64     kv_key_index_digest          (const KvKey   *key);
guint64     kv_key_index_digest_hash     (const guint8  *hash,
                                          gsize          hash_len,
                                          guint32        group);
gboolean    kv_key_index_contains        (KvKeyIndex    *self,
                                          guint64        digest);
gboolean    kv_key_index_add             (KvKeyIndex    *self,
                                          guint64        digest);
gboolean    kv_key_index_remove          (KvKeyIndex    *self,
                                          guint64        digest);
void        kv_key_index_clear           (KvKeyIndex    *self);
guint       kv_key_index_get_size        (KvKeyIndex    *self);
guint       kv_key_index_get_max_keys    (KvKeyIndex    *self);
gsize       kv_key_index_get_table_bytes (KvKeyIndex    *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvKeyIndex, kv_key_index_free)

G_END_DECLS
