/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-backpressure-policy.h"

G_BEGIN_DECLS

#define KV_TYPE_THROTTLED_DROP_POLICY (kv_throttled_drop_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvThrottledDropPolicy, kv_throttled_drop_policy, KV, THROTTLED_DROP_POLICY, KvBackpressurePolicy)

KVTIER_AVAILABLE_IN_ALL
KvThrottledDropPolicy *kv_throttled_drop_policy_new             (gdouble                 ramp_factor);
KVTIER_AVAILABLE_IN_ALL
gdouble                kv_throttled_drop_policy_get_ramp_factor (KvThrottledDropPolicy  *self);
KVTIER_AVAILABLE_IN_ALL
gdouble                kv_throttled_drop_policy_get_drop_rate   (KvThrottledDropPolicy  *self,
                                                                 KvBackpressureDetector *detector);

G_END_DECLS
