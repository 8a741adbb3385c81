/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* What the tier counts; kvtier_redis_<name>_total in its metrics
 * (doc/metrics.md). */
typedef enum {
  KV_REDIS_COUNTER_STORED_CHUNKS,
  KV_REDIS_COUNTER_SKIPPED_CHUNKS,   /* SET NX found the key */
  KV_REDIS_COUNTER_LOADED_CHUNKS,
  KV_REDIS_COUNTER_MISSING_CHUNKS,   /* GET found nothing (evicted, expired) */
  KV_REDIS_COUNTER_CORRUPT_CHUNKS,   /* a value that failed its check, deleted */
  KV_REDIS_COUNTER_STORE_FAILURES,
  KV_REDIS_COUNTER_LOAD_FAILURES,
  KV_REDIS_COUNTER_NODE_ERRORS,      /* commands lost with their connection or refused by a down node */
  KV_REDIS_COUNTER_ERROR_REPLIES,    /* error replies other than redirects */
  KV_REDIS_COUNTER_MOVED,
  KV_REDIS_COUNTER_ASK,
  KV_REDIS_COUNTER_MAP_REFRESHES,
  KV_REDIS_COUNTER_BYTES_WRITTEN,
  KV_REDIS_COUNTER_BYTES_READ,
  KV_REDIS_COUNTER_SERVER_OUTAGES,   /* a server became unreachable (each is logged) */
  KV_REDIS_COUNTER_NODE_BREAKER_OPENINGS, /* a server's own breaker opened (logged) */
  KV_REDIS_COUNTER_INDEX_HITS,       /* lookups the index answered (no EXISTS) */
  KV_REDIS_COUNTER_INDEX_STALE_KEYS, /* indexed keys a load found missing */
  KV_REDIS_N_COUNTERS
} KvRedisCounter;

#define KV_TYPE_REDIS_TIER (kv_redis_tier_get_type ())

G_DECLARE_FINAL_TYPE (KvRedisTier, kv_redis_tier, KV, REDIS_TIER, KvSecondaryTier)

KvRedisTier *kv_redis_tier_new            (KvHostBuffer   *primary,
                                           const char     *servers,
                                           GError        **error);
guint64      kv_redis_tier_get_counter    (KvRedisTier    *self,
                                           KvRedisCounter  counter);
const char  *kv_redis_counter_get_name    (KvRedisCounter  counter);
char        *kv_redis_tier_get_redis_key  (KvRedisTier    *self,
                                           KvKey          *key);
guint        kv_redis_tier_get_index_size (KvRedisTier    *self);

G_END_DECLS
