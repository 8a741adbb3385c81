/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-async-lookup.h"

G_BEGIN_DECLS

/* Blocks until every batch posted so far has been answered by a worker,
 * then applies the answers (drain_results). Owner thread; tests and
 * drain paths only. */
void  kv_async_lookup_wait_idle       (KvAsyncLookup *self);
/* How many batches were posted to the workers since construction. */
guint kv_async_lookup_get_n_posted    (KvAsyncLookup *self);
/* How many keys the cache holds a verdict (or a pending check) for. */
guint kv_async_lookup_get_n_keys      (KvAsyncLookup *self);

G_END_DECLS
