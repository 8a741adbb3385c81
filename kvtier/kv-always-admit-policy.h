/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-admission-policy.h"

G_BEGIN_DECLS

#define KV_TYPE_ALWAYS_ADMIT_POLICY (kv_always_admit_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvAlwaysAdmitPolicy, kv_always_admit_policy, KV, ALWAYS_ADMIT_POLICY, GObject)

KVTIER_AVAILABLE_IN_ALL
KvAlwaysAdmitPolicy *kv_always_admit_policy_new (void);

G_END_DECLS
