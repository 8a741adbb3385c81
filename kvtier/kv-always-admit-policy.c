/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-always-admit-policy.h"

struct _KvAlwaysAdmitPolicy
{
  GObject parent_instance;
};

/**
 * KvAlwaysAdmitPolicy:
 *
 * An [iface@Kv.AdmissionPolicy] that admits every job (vLLM's
 * `AlwaysAdmitPolicy`). It ignores the tiers' backpressure detectors: with
 * it, a saturated tier still receives every cascade. It reports no metric.
 */
static void kv_always_admit_policy_iface_init (KvAdmissionPolicyInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvAlwaysAdmitPolicy, kv_always_admit_policy, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_ADMISSION_POLICY,
                                                      kv_always_admit_policy_iface_init))

static gboolean
kv_always_admit_policy_should_admit (KvAdmissionPolicy  *policy,
                                     KvKey             **keys,
                                     guint               tier_index,
                                     gboolean            is_promotion)
{
  return TRUE;
}

static void
kv_always_admit_policy_iface_init (KvAdmissionPolicyInterface *iface)
{
  iface->should_admit = kv_always_admit_policy_should_admit;
}

static void
kv_always_admit_policy_class_init (KvAlwaysAdmitPolicyClass *klass)
{
}

static void
kv_always_admit_policy_init (KvAlwaysAdmitPolicy *self)
{
}

/**
 * kv_always_admit_policy_new:
 *
 * Creates a policy that admits every store and promotion.
 *
 * Returns: (transfer full): a new policy
 */
KvAlwaysAdmitPolicy *
kv_always_admit_policy_new (void)
{
  return g_object_new (KV_TYPE_ALWAYS_ADMIT_POLICY, NULL);
}
