/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-backpressure-policy.h"

G_BEGIN_DECLS

#define KV_TYPE_DROP_STORE_POLICY (kv_drop_store_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvDropStorePolicy, kv_drop_store_policy, KV, DROP_STORE_POLICY, KvBackpressurePolicy)

KVTIER_AVAILABLE_IN_ALL
KvDropStorePolicy *kv_drop_store_policy_new (void);

G_END_DECLS
