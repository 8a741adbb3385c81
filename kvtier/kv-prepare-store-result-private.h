/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-prepare-store-result.h"

G_BEGIN_DECLS

/* kv_prepare_store_result_new() that takes over its arrays instead of
 * copying them, for the primary tier's store path: @keys_to_store (room for
 * @n_keys + 1; the keys are borrowed and get referenced here), @chunk_ids
 * (room for MAX (@n_keys, 1)) and @evicted_keys (NULL-terminated, the
 * @n_evicted keys transfer full), all freed with g_free(). */
G_GNUC_INTERNAL
KvPrepareStoreResult *_kv_prepare_store_result_new_take (KvKey   **keys_to_store,
                                                         guint32  *chunk_ids,
                                                         guint     n_keys,
                                                         KvKey   **evicted_keys,
                                                         guint     n_evicted);

G_END_DECLS
