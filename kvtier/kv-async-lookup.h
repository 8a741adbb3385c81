/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"
#include "kv-request.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_ASYNC_LOOKUP (kv_async_lookup_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvAsyncLookup, kv_async_lookup, KV, ASYNC_LOOKUP, GObject)

/**
 * KvAsyncLookupBatchFunc: (skip)
 * @keys: the keys to check
 * @n_keys: the number of keys
 * @request: the request that looked them up
 * @results: where to write one verdict per key: %TRUE if the key is stored,
 *   %FALSE if not
 * @user_data: the data given to [ctor@Kv.AsyncLookup.new]
 *
 * Checks which of @keys a tier holds. Runs on one of the lookup's worker
 * threads, possibly on several at once when the lookup has more than one
 * worker; it must not touch state owned by the scheduler thread and may
 * block (that is its purpose). An entry left unset (neither %TRUE nor
 * %FALSE) marks the whole batch as failed: every key resolves to a miss and
 * a warning names the tier.
 */
typedef void (*KvAsyncLookupBatchFunc) (KvKey * const *keys,
                                        guint          n_keys,
                                        KvRequest     *request,
                                        gboolean      *results,
                                        gpointer       user_data);

/**
 * KvAsyncLookupKeyFunc:
 * @key: the key to check
 * @request: the request that looked it up
 * @user_data: (closure): the data given to [ctor@Kv.AsyncLookup.new_for_keys]
 *
 * Checks whether a tier holds @key. Runs on one of the lookup's worker
 * threads (see [ctor@Kv.AsyncLookup.new_for_keys]).
 *
 * Returns: %TRUE if the key is stored
 */
typedef gboolean (*KvAsyncLookupKeyFunc) (KvKey     *key,
                                          KvRequest *request,
                                          gpointer   user_data);

KVTIER_AVAILABLE_IN_ALL
KvAsyncLookup  *kv_async_lookup_new               (const char              *tier_type,
                                                   KvAsyncLookupBatchFunc   func,
                                                   gpointer                 user_data,
                                                   GDestroyNotify           destroy,
                                                   guint                    n_workers,
                                                   guint                    max_pending_batches,
                                                   guint                    max_keys_per_step);
KVTIER_AVAILABLE_IN_ALL
KvAsyncLookup  *kv_async_lookup_new_for_keys      (const char              *tier_type,
                                                   KvAsyncLookupKeyFunc     func,
                                                   gpointer                 user_data,
                                                   GDestroyNotify           destroy,
                                                   guint                    n_workers,
                                                   guint                    max_pending_batches,
                                                   guint                    max_keys_per_step);
KVTIER_AVAILABLE_IN_ALL
const char     *kv_async_lookup_get_tier_type     (KvAsyncLookup           *self);
KVTIER_AVAILABLE_IN_ALL
KvLookupResult  kv_async_lookup_lookup            (KvAsyncLookup           *self,
                                                   KvKey                   *key,
                                                   KvRequest               *request);
KVTIER_AVAILABLE_IN_ALL
void            kv_async_lookup_flush             (KvAsyncLookup           *self);
KVTIER_AVAILABLE_IN_ALL
void            kv_async_lookup_drain_results     (KvAsyncLookup           *self);
KVTIER_AVAILABLE_IN_ALL
void            kv_async_lookup_cleanup           (KvAsyncLookup           *self,
                                                   const char              *request_id);
KVTIER_AVAILABLE_IN_ALL
void            kv_async_lookup_mark_miss         (KvAsyncLookup           *self,
                                                   KvKey * const           *keys,
                                                   guint                    n_keys);
KVTIER_AVAILABLE_IN_ALL
void            kv_async_lookup_invalidate        (KvAsyncLookup           *self,
                                                   KvKey * const           *keys,
                                                   guint                    n_keys);
KVTIER_AVAILABLE_IN_ALL
guint64         kv_async_lookup_take_dropped_keys (KvAsyncLookup           *self);
KVTIER_AVAILABLE_IN_ALL
guint           kv_async_lookup_get_n_pending     (KvAsyncLookup           *self);
KVTIER_AVAILABLE_IN_ALL
void            kv_async_lookup_shutdown          (KvAsyncLookup           *self);

G_END_DECLS
