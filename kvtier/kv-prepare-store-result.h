/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"

G_BEGIN_DECLS

#define KV_TYPE_PREPARE_STORE_RESULT (kv_prepare_store_result_get_type ())

typedef struct _KvPrepareStoreResult KvPrepareStoreResult;

KVTIER_AVAILABLE_IN_ALL
GType                 kv_prepare_store_result_get_type          (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvPrepareStoreResult *kv_prepare_store_result_new               (KvKey * const *keys_to_store,
                                                                 const guint32 *chunk_ids,
                                                                 guint          n_keys,
                                                                 KvKey * const *evicted_keys,
                                                                 guint          n_evicted);
KVTIER_AVAILABLE_IN_ALL
KvPrepareStoreResult *kv_prepare_store_result_ref               (KvPrepareStoreResult *self);
KVTIER_AVAILABLE_IN_ALL
void                  kv_prepare_store_result_unref             (KvPrepareStoreResult *self);
KVTIER_AVAILABLE_IN_ALL
KvKey * const        *kv_prepare_store_result_get_keys_to_store (const KvPrepareStoreResult *self,
                                                                 guint         *n_keys);
KVTIER_AVAILABLE_IN_ALL
const guint32        *kv_prepare_store_result_get_chunk_ids     (const KvPrepareStoreResult *self,
                                                                 guint         *n_chunk_ids);
KVTIER_AVAILABLE_IN_ALL
KvKey * const        *kv_prepare_store_result_get_evicted_keys  (const KvPrepareStoreResult *self,
                                                                 guint         *n_keys);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvPrepareStoreResult, kv_prepare_store_result_unref)

G_END_DECLS
