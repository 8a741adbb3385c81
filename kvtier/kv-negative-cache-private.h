/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-async-lookup.h"
#include "kv-job-result.h"
#include "kv-key.h"
#include "kv-request.h"
#include "kv-transfer-job.h"

G_BEGIN_DECLS

/* A secondary tier's misses of failed loads (reference §8.7, vLLM's
 * mark_miss): the keys of a failed load that did not land answer MISS to
 * the request that asked, without asking the tier, and are marked as
 * misses in the tier's KvAsyncLookup, so that every request that had
 * cached a hit for them asks again. Failed loads are recorded from any
 * thread (a tier's report, a deadline) and turned into misses on the
 * owner thread, which also reads them.
 *
 * One lock of its own (for the failed loads recorded and not applied
 * yet), never held while calling out. */

typedef struct _KvNegativeCache KvNegativeCache;

struct _KvNegativeCache
{
  /*< private >*/
  GMutex     lock;
  GPtrArray *failed;          /* FailedLoad, recorded, not applied yet */
  gint       n_failed;        /* (atomic) failed->len */
  gboolean   has_negatives;   /* owner thread: some request has misses */
  guint8     tag;             /* address: the request-state owner */
};

G_GNUC_INTERNAL
KvNegativeCache *_kv_negative_cache_new               (void);
G_GNUC_INTERNAL
void             _kv_negative_cache_free              (KvNegativeCache *self);

/* Any thread: @job, a load, failed with @result (both referenced). */
G_GNUC_INTERNAL
void             _kv_negative_cache_add_failed_load   (KvNegativeCache *self,
                                                       KvTransferJob   *job,
                                                       KvJobResult     *result);
/* Owner thread: turns the failed loads recorded since the last call into
 * misses, for the request that asked and in @async_lookup (nullable).
 * Lock-free when there are none. */
G_GNUC_INTERNAL
void             _kv_negative_cache_apply             (KvNegativeCache *self,
                                                       KvAsyncLookup   *async_lookup);
G_GNUC_INTERNAL
gboolean         _kv_negative_cache_lookup_slow       (KvNegativeCache *self,
                                                       KvKey           *key,
                                                       KvRequest       *request);

/* Owner thread: whether a load of @key failed for @request. One field
 * test on a lookup while no load failed. */
static inline gboolean
_kv_negative_cache_contains (KvNegativeCache *self,
                             KvKey           *key,
                             KvRequest       *request)
{
  if (G_LIKELY (!self->has_negatives))
    return FALSE;
  return _kv_negative_cache_lookup_slow (self, key, request);
}

G_END_DECLS
