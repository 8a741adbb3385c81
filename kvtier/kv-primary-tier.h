/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-cache-policy.h"
#include "kv-event.h"
#include "kv-host-buffer.h"
#include "kv-key.h"
#include "kv-prepare-store-result.h"
#include "kv-request.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_PRIMARY_TIER (kv_primary_tier_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvPrimaryTier, kv_primary_tier, KV, PRIMARY_TIER, GObject)

KVTIER_AVAILABLE_IN_ALL
KvPrimaryTier        *kv_primary_tier_new                 (KvHostBuffer   *buffer,
                                                           KvCachePolicy  *policy,
                                                           gboolean        enable_events);
KVTIER_AVAILABLE_IN_ALL
KvHostBuffer         *kv_primary_tier_get_buffer          (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
KvCachePolicy        *kv_primary_tier_get_policy          (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
guint                 kv_primary_tier_get_n_slots         (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
gsize                 kv_primary_tier_get_slot_size       (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_primary_tier_get_slot_checksum   (KvPrimaryTier  *self,
                                                           guint32         slot,
                                                           guint64        *out_checksum);

KVTIER_AVAILABLE_IN_ALL
KvLookupResult        kv_primary_tier_lookup              (KvPrimaryTier  *self,
                                                           const KvKey    *key);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_primary_tier_prepare_load        (KvPrimaryTier  *self,
                                                           KvKey * const  *keys,
                                                           guint           n_keys,
                                                           guint32        *chunk_ids,
                                                           GError        **error);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_primary_tier_prepare_read        (KvPrimaryTier  *self,
                                                           KvKey * const  *keys,
                                                           guint           n_keys,
                                                           guint32        *chunk_ids,
                                                           GError        **error);
KVTIER_AVAILABLE_IN_ALL
void                  kv_primary_tier_complete_load       (KvPrimaryTier  *self,
                                                           KvKey * const  *keys,
                                                           guint           n_keys);
KVTIER_AVAILABLE_IN_ALL
void                  kv_primary_tier_touch               (KvPrimaryTier  *self,
                                                           KvKey * const  *keys,
                                                           guint           n_keys);
KVTIER_AVAILABLE_IN_ALL
KvPrepareStoreResult *kv_primary_tier_prepare_store       (KvPrimaryTier  *self,
                                                           KvKey * const  *keys,
                                                           guint           n_keys,
                                                           GError        **error);
KVTIER_AVAILABLE_IN_ALL
void                  kv_primary_tier_complete_store      (KvPrimaryTier  *self,
                                                           KvKey * const  *keys,
                                                           guint           n_keys,
                                                           gboolean        success);
KVTIER_AVAILABLE_IN_ALL
void                  kv_primary_tier_on_request_finished (KvPrimaryTier  *self,
                                                           KvRequest      *request);
KVTIER_AVAILABLE_IN_ALL
KvEvent             **kv_primary_tier_take_events         (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
void                  kv_primary_tier_reset               (KvPrimaryTier  *self);

KVTIER_AVAILABLE_IN_ALL
gboolean              kv_primary_tier_get_ref_count       (KvPrimaryTier  *self,
                                                           const KvKey    *key,
                                                           gint           *out_ref_count);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_primary_tier_get_chunk_id        (KvPrimaryTier  *self,
                                                           const KvKey    *key,
                                                           guint32        *out_chunk_id);
KVTIER_AVAILABLE_IN_ALL
guint                 kv_primary_tier_get_n_free          (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
guint                 kv_primary_tier_get_n_allocated     (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
guint                 kv_primary_tier_get_n_stored        (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
guint                 kv_primary_tier_get_n_evictable     (KvPrimaryTier  *self);
KVTIER_AVAILABLE_IN_ALL
guint                 kv_primary_tier_get_n_write_pending (KvPrimaryTier  *self);

G_END_DECLS
