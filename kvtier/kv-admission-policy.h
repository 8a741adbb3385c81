/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-job-result.h"
#include "kv-key.h"
#include "kv-metric-registry.h"
#include "kv-secondary-tier.h"
#include "kv-stats.h"
#include "kv-transfer-job.h"

G_BEGIN_DECLS

#define KV_TYPE_ADMISSION_POLICY (kv_admission_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_INTERFACE (KvAdmissionPolicy, kv_admission_policy, KV, ADMISSION_POLICY, GObject)

/**
 * KvAdmissionPolicyInterface:
 * @tier_added: the manager added @tier at @tier_index. Optional.
 * @should_admit: whether a job of @keys may go to (store) or come from
 *   (promotion) the tier at @tier_index. Required.
 * @on_admitted: a job the policy admitted was registered. Optional.
 * @on_completed: a job finished, successfully or not. Optional.
 * @reset: forget learned state (the manager's `reset_cache`). Optional.
 * @register_metrics: add the definitions of the policy's metrics. Optional.
 * @get_stats: the policy's metrics since the last call, or %NULL. Optional.
 *
 * The virtual methods of an admission policy; see
 * [iface@Kv.AdmissionPolicy]. Every one runs on the manager's owner thread.
 */
struct _KvAdmissionPolicyInterface
{
  GTypeInterface g_iface;

  void     (*tier_added)       (KvAdmissionPolicy *self,
                                guint              tier_index,
                                KvSecondaryTier   *tier);
  gboolean (*should_admit)     (KvAdmissionPolicy *self,
                                KvKey            **keys,
                                guint              tier_index,
                                gboolean           is_promotion);
  void     (*on_admitted)      (KvAdmissionPolicy *self,
                                KvTransferJob     *job,
                                guint              tier_index);
  void     (*on_completed)     (KvAdmissionPolicy *self,
                                KvTransferJob     *job,
                                guint              tier_index,
                                KvJobResult       *result);
  void     (*reset)            (KvAdmissionPolicy *self);
  gboolean (*register_metrics) (KvAdmissionPolicy *self,
                                KvMetricRegistry  *registry,
                                GError           **error);
  KvStats *(*get_stats)        (KvAdmissionPolicy *self);

  /*< private >*/
  gpointer _reserved[8];
};

KVTIER_AVAILABLE_IN_ALL
void     kv_admission_policy_tier_added       (KvAdmissionPolicy *self,
                                               guint              tier_index,
                                               KvSecondaryTier   *tier);
KVTIER_AVAILABLE_IN_ALL
gboolean kv_admission_policy_should_admit     (KvAdmissionPolicy *self,
                                               KvKey            **keys,
                                               guint              tier_index,
                                               gboolean           is_promotion);
KVTIER_AVAILABLE_IN_ALL
void     kv_admission_policy_on_admitted      (KvAdmissionPolicy *self,
                                               KvTransferJob     *job,
                                               guint              tier_index);
KVTIER_AVAILABLE_IN_ALL
void     kv_admission_policy_on_completed     (KvAdmissionPolicy *self,
                                               KvTransferJob     *job,
                                               guint              tier_index,
                                               KvJobResult       *result);
KVTIER_AVAILABLE_IN_ALL
void     kv_admission_policy_reset            (KvAdmissionPolicy *self);
KVTIER_AVAILABLE_IN_ALL
gboolean kv_admission_policy_register_metrics (KvAdmissionPolicy *self,
                                               KvMetricRegistry  *registry,
                                               GError           **error);
KVTIER_AVAILABLE_IN_ALL
KvStats *kv_admission_policy_get_stats        (KvAdmissionPolicy *self);

G_END_DECLS
