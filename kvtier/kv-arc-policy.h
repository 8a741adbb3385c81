/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include "kv-cache-policy.h"

G_BEGIN_DECLS

#define KV_TYPE_ARC_POLICY (kv_arc_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvArcPolicy, kv_arc_policy, KV, ARC_POLICY, GObject)

KVTIER_AVAILABLE_IN_ALL
KvCachePolicy *kv_arc_policy_new            (guint        capacity);
KVTIER_AVAILABLE_IN_ALL
guint          kv_arc_policy_get_target_t1  (KvArcPolicy *self);

G_END_DECLS
