/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include "kv-cache-policy.h"

G_BEGIN_DECLS

#define KV_TYPE_LRU_POLICY (kv_lru_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvLruPolicy, kv_lru_policy, KV, LRU_POLICY, GObject)

KVTIER_AVAILABLE_IN_ALL
KvCachePolicy *kv_lru_policy_new (void);

G_END_DECLS
