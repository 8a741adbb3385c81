/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-tier-filter.h"

G_BEGIN_DECLS

#define KV_TYPE_REQUEST (kv_request_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvRequest, kv_request, KV, REQUEST, GObject)

KVTIER_AVAILABLE_IN_ALL
KvRequest    *kv_request_new                  (const char   *id,
                                               GVariant     *transfer_params);
KVTIER_AVAILABLE_IN_ALL
const char   *kv_request_get_id               (KvRequest    *self);
KVTIER_AVAILABLE_IN_ALL
GVariant     *kv_request_get_transfer_params  (KvRequest    *self);
KVTIER_AVAILABLE_IN_ALL
KvTierFilter *kv_request_get_load_tier_filter (KvRequest    *self);
KVTIER_AVAILABLE_IN_ALL
void          kv_request_set_load_tier_filter (KvRequest    *self,
                                               KvTierFilter *filter);
KVTIER_AVAILABLE_IN_ALL
gpointer      kv_request_get_state            (KvRequest    *self,
                                               gconstpointer owner);
KVTIER_AVAILABLE_IN_ALL
void          kv_request_set_state            (KvRequest    *self,
                                               gconstpointer owner,
                                               gpointer      state,
                                               GDestroyNotify destroy);

G_END_DECLS
