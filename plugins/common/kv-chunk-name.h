/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-chunk-format.h"

G_BEGIN_DECLS

/* How the tiers that keep chunks under string keys (the redis tier's keys,
 * the s3 tier's object keys) name them: a prefix per namespace, then the
 * key's hash in lowercase hex and its group, `<prefix><hash hex>_g<group>`.
 * Every lookup, load and store names its chunks, so the hex comes from a
 * table, not a printf per byte. */

char *kv_chunk_name_write_hex        (char         *out,
                                      const guint8 *data,
                                      gsize         len);
char *kv_chunk_name_namespace_prefix (const char   *head,
                                      const guint8  digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                      char          separator);
char *kv_chunk_name_for_key          (const char   *prefix,
                                      gsize         prefix_len,
                                      const KvKey  *key);
gboolean kv_chunk_name_parse         (const char   *name,
                                      guint8        hash[KV_CHUNK_MAX_KEY_HASH_LEN],
                                      gsize        *hash_len,
                                      guint32      *group);

G_END_DECLS
