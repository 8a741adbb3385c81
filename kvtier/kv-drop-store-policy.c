/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-drop-store-policy.h"

#include "kv-backpressure-detector.h"

struct _KvDropStorePolicy
{
  KvBackpressurePolicy parent_instance;
};

/**
 * KvDropStorePolicy:
 *
 * A [class@Kv.BackpressurePolicy] that drops every cascade while the
 * detector reports pressure and admits every cascade otherwise.
 *
 * Owner thread only, like its detector.
 */
G_DEFINE_FINAL_TYPE (KvDropStorePolicy, kv_drop_store_policy, KV_TYPE_BACKPRESSURE_POLICY)

static gboolean
kv_drop_store_policy_should_store (KvBackpressurePolicy   *policy,
                                   KvBackpressureDetector *detector)
{
  return !kv_backpressure_detector_is_under_pressure (detector);
}

static void
kv_drop_store_policy_class_init (KvDropStorePolicyClass *klass)
{
  KvBackpressurePolicyClass *policy_class = KV_BACKPRESSURE_POLICY_CLASS (klass);

  policy_class->should_store = kv_drop_store_policy_should_store;
}

static void
kv_drop_store_policy_init (KvDropStorePolicy *self)
{
}

/**
 * kv_drop_store_policy_new:
 *
 * Creates a policy that drops every store while the tier is under pressure.
 *
 * Returns: (transfer full): a new policy
 */
KvDropStorePolicy *
kv_drop_store_policy_new (void)
{
  return g_object_new (KV_TYPE_DROP_STORE_POLICY, NULL);
}
