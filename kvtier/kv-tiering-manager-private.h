/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-tiering-manager.h"

G_BEGIN_DECLS

/* Index meaning "no tier is excluded" for the *_excluding entry points. */
#define KV_TIER_INDEX_NONE G_MAXUINT

/* The KvParentManager entry points: same as the public ones, with the
 * origin tier excluded from lookups, request hooks and finalization, and
 * store jobs registered under it (reference §5.9). */
KvOffloadPolicy _kv_tiering_manager_on_new_request_excluding      (KvTieringManager *self,
                                                                   KvRequest        *request,
                                                                   guint             exclude_tier);
KvLookupResult  _kv_tiering_manager_lookup_excluding              (KvTieringManager *self,
                                                                   KvKey            *key,
                                                                   KvRequest        *request,
                                                                   guint             exclude_tier);
KvTransferJob  *_kv_tiering_manager_create_store_job              (KvTieringManager *self,
                                                                   KvKey * const    *keys,
                                                                   guint             n_keys,
                                                                   KvRequest        *request,
                                                                   guint             tier_index,
                                                                   GError          **error);
void            _kv_tiering_manager_on_request_finished_excluding (KvTieringManager *self,
                                                                   KvRequest        *request,
                                                                   guint             exclude_tier);

G_END_DECLS
