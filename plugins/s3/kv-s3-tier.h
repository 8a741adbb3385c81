/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* What the tier counts; kvtier_s3_<name>_total in its metrics. */
typedef enum {
  KV_S3_COUNTER_STORED_CHUNKS,
  KV_S3_COUNTER_LOADED_CHUNKS,
  KV_S3_COUNTER_MISSING_CHUNKS,    /* GET found no object (never stored, expired, deleted) */
  KV_S3_COUNTER_CORRUPT_CHUNKS,    /* objects that failed their check: deleted, never loaded */
  KV_S3_COUNTER_DELETED_OBJECTS,   /* DELETEs of damaged objects the server confirmed */
  KV_S3_COUNTER_STORE_FAILURES,
  KV_S3_COUNTER_LOAD_FAILURES,     /* keys of loads that did not land, missing ones included */
  KV_S3_COUNTER_LOOKUP_ERRORS,     /* HEADs that failed: answered as misses */
  KV_S3_COUNTER_INDEX_HITS,        /* lookups the index answered (no HEAD) */
  KV_S3_COUNTER_INDEX_STALE_KEYS,  /* indexed keys a load found missing */
  KV_S3_COUNTER_REQUESTS,          /* HTTP requests sent, retries included */
  KV_S3_COUNTER_RETRIES,
  KV_S3_COUNTER_TRANSPORT_ERRORS,  /* requests lost to the connection or their time */
  KV_S3_COUNTER_TIMEOUTS,
  KV_S3_COUNTER_ERROR_REPLIES,     /* error replies other than 404 */
  KV_S3_COUNTER_BYTES_WRITTEN,     /* object bytes sent (chunk records) */
  KV_S3_COUNTER_BYTES_READ,        /* object bytes received */
  KV_S3_N_COUNTERS
} KvS3Counter;

#define KV_TYPE_S3_TIER (kv_s3_tier_get_type ())

G_DECLARE_FINAL_TYPE (KvS3Tier, kv_s3_tier, KV, S3_TIER, KvSecondaryTier)

KvS3Tier    *kv_s3_tier_new               (KvHostBuffer  *primary,
                                           const char    *endpoint,
                                           const char    *bucket,
                                           GError       **error);
guint64      kv_s3_tier_get_counter       (KvS3Tier      *self,
                                           KvS3Counter    counter);
const char  *kv_s3_counter_get_name       (KvS3Counter    counter);
guint        kv_s3_tier_get_index_size    (KvS3Tier      *self);
void         kv_s3_tier_wait_for_listing  (KvS3Tier      *self);
/* The object key of @key: <prefix>/<namespace digest>/<hash hex>_g<group>. */
char        *kv_s3_tier_get_object_key    (KvS3Tier      *self,
                                           KvKey         *key);

G_END_DECLS
