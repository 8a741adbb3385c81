/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_PIN_LEASE (kv_pin_lease_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvPinLease, kv_pin_lease, KV, PIN_LEASE, GObject)

KVTIER_AVAILABLE_IN_ALL
guint          kv_pin_lease_get_n_keys     (KvPinLease  *self);
KVTIER_AVAILABLE_IN_ALL
KvKey         *kv_pin_lease_get_key        (KvPinLease  *self,
                                            guint        index);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_pin_lease_is_pinned      (KvPinLease  *self,
                                            guint        index);
KVTIER_AVAILABLE_IN_ALL
guint32        kv_pin_lease_get_chunk_id   (KvPinLease  *self,
                                            guint        index);
KVTIER_AVAILABLE_IN_ALL
const guint32 *kv_pin_lease_get_chunk_ids  (KvPinLease  *self,
                                            guint       *n_keys);
KVTIER_AVAILABLE_IN_ALL
guint          kv_pin_lease_get_n_pinned   (KvPinLease  *self);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_pin_lease_release        (KvPinLease  *self,
                                            gboolean     success,
                                            GError     **error);

G_END_DECLS
