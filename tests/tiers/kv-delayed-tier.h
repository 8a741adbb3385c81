/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* A test-only tier that records every call it receives and completes its
 * jobs only when the test says so (or at submit time in synchronous mode).
 * It keeps stored chunks in memory, so promotions move real bytes. */
#define KV_TYPE_DELAYED_TIER (kv_delayed_tier_get_type ())
G_DECLARE_FINAL_TYPE (KvDelayedTier, kv_delayed_tier, KV, DELAYED_TIER, KvSecondaryTier)

typedef void (*KvDelayedTierServeFunc) (KvDelayedTier   *self,
                                        KvParentManager *parent,
                                        gpointer         user_data);

KvDelayedTier *kv_delayed_tier_new                (KvHostBuffer   *primary,
                                                   const char     *tier_type);
/* The calls received so far, one string each, e.g. "submit_store 3 [k1,k2]". */
char          *kv_delayed_tier_dup_calls          (KvDelayedTier  *self,
                                                   const char     *prefix);
guint          kv_delayed_tier_count_calls        (KvDelayedTier  *self,
                                                   const char     *prefix);
void           kv_delayed_tier_clear_calls        (KvDelayedTier  *self);
/* Also appends "<tier-type>: <call>" to @log (shared by several tiers to
 * check the order of calls across tiers). */
void           kv_delayed_tier_set_log            (KvDelayedTier  *self,
                                                   GPtrArray      *log);

guint          kv_delayed_tier_get_n_pending      (KvDelayedTier  *self);
KvTransferJob *kv_delayed_tier_get_pending        (KvDelayedTier  *self,
                                                   guint           index);
/* Moves the bytes of every pending job and reports it. */
void           kv_delayed_tier_complete_all       (KvDelayedTier  *self,
                                                   gboolean        success);
gboolean       kv_delayed_tier_complete_job_with  (KvDelayedTier  *self,
                                                   guint64         job_id,
                                                   KvJobResult    *result);
void           kv_delayed_tier_set_synchronous    (KvDelayedTier  *self,
                                                   gboolean        synchronous);
void           kv_delayed_tier_set_lookup_result  (KvDelayedTier  *self,
                                                   KvKey          *key,
                                                   KvLookupResult  result);
void           kv_delayed_tier_set_offload_policy (KvDelayedTier  *self,
                                                   KvOffloadPolicy policy);
void           kv_delayed_tier_set_serve_func     (KvDelayedTier  *self,
                                                   KvDelayedTierServeFunc func,
                                                   gpointer        user_data);
void           kv_delayed_tier_set_fail_shutdown  (KvDelayedTier  *self,
                                                   gboolean        fail);
void           kv_delayed_tier_put                (KvDelayedTier  *self,
                                                   KvKey          *key,
                                                   GBytes         *bytes);
GBytes        *kv_delayed_tier_get_stored         (KvDelayedTier  *self,
                                                   KvKey          *key);
void           kv_delayed_tier_push_stored_event  (KvDelayedTier  *self,
                                                   KvKey          *key);

/* The tier's own metric (a counter without labels), defined by its
 * register_metrics. */
#define KV_DELAYED_TIER_METRIC_OPERATIONS "kvtier_test_delayed_operations"
/* The next get_stats returns @stats (once; NULL again afterwards). */
void           kv_delayed_tier_set_stats          (KvDelayedTier  *self,
                                                   KvStats        *stats);
/* How many times get_stats was called. */
guint          kv_delayed_tier_get_n_get_stats    (KvDelayedTier  *self);

G_END_DECLS
