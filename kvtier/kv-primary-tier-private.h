/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-primary-tier.h"

G_BEGIN_DECLS

/* kv_primary_tier_prepare_store() without the result object, for the
 * manager's promotions (one key per lookup). @to_store (borrowed keys) and
 * @chunk_ids have room for @n_keys. *@evicted points to room for @n_keys + 1
 * evicted keys (NULL-terminated, transfer full); a custom policy may swap in
 * an array of its own, which the caller frees when it differs from the one
 * it passed. FALSE with @error set (KV_TIER_ERROR_NO_SPACE) when the keys
 * cannot fit: nothing changed then. */
G_GNUC_INTERNAL
gboolean _kv_primary_tier_prepare_store_into (KvPrimaryTier  *self,
                                              KvKey * const  *keys,
                                              guint           n_keys,
                                              KvKey         **to_store,
                                              guint32        *chunk_ids,
                                              guint          *n_to_store,
                                              KvKey        ***evicted,
                                              guint          *n_evicted,
                                              GError        **error);

G_END_DECLS
