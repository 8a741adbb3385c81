/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-admission-policy.h"

G_BEGIN_DECLS

#define KV_TYPE_BACKPRESSURE_ADMISSION_POLICY (kv_backpressure_admission_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvBackpressureAdmissionPolicy, kv_backpressure_admission_policy, KV, BACKPRESSURE_ADMISSION_POLICY, GObject)

KVTIER_AVAILABLE_IN_ALL
KvBackpressureAdmissionPolicy *kv_backpressure_admission_policy_new (void);

G_END_DECLS
