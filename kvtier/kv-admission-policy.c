/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-admission-policy.h"

/**
 * KvAdmissionPolicy:
 *
 * Decides which transfer jobs the [class@Kv.TieringManager] starts: the
 * gate of vLLM's `TieringAdmissionPolicy` (RFC #53485), one place for every
 * "should this store or promotion happen now" rule.
 *
 * The manager asks [method@Kv.AdmissionPolicy.should_admit] before it pins
 * a chunk, allocates a primary slot or takes a job id, for every cascade
 * (store) to a secondary tier, every promotion, and every store a tier
 * makes through [method@Kv.ParentManager.create_store_job] (a store to
 * that tier, as in vLLM). A refused cascade leaves the chunks in the
 * primary tier only; a refused promotion answers %KV_LOOKUP_RESULT_MISS; a
 * refused store of a tier's own fails
 * [method@Kv.ParentManager.create_store_job], and the tier answers its
 * peer with a miss for those chunks. Chunks a tier pins with
 * [method@Kv.ParentManager.pin] to send them to another node are not a
 * transfer into a tier: the policy is not asked.
 *
 * For each admitted job the manager then calls
 * [method@Kv.AdmissionPolicy.on_admitted] once it registered the job, and
 * [method@Kv.AdmissionPolicy.on_completed] exactly once when the job
 * finishes (successfully or not, after the job metrics, before the primary
 * tier hears of it). [method@Kv.AdmissionPolicy.reset] ends the manager's
 * `reset_cache`.
 *
 * kvtier ships [class@Kv.AlwaysAdmitPolicy] and
 * [class@Kv.BackpressureAdmissionPolicy] (the manager's default). A policy
 * may be written in any language with bindings; every method runs on the
 * manager's owner thread, and should_admit() is called once per cascade
 * and per promoted chunk, so it should be cheap.
 */
G_DEFINE_INTERFACE (KvAdmissionPolicy, kv_admission_policy, G_TYPE_OBJECT)

static void
kv_admission_policy_default_init (KvAdmissionPolicyInterface *iface)
{
}

/**
 * kv_admission_policy_tier_added: (virtual tier_added)
 * @self: a policy
 * @tier_index: the index of @tier in the manager, from 0
 * @tier: the secondary tier
 *
 * Tells the policy about a secondary tier of the manager it serves: the
 * manager calls it for each tier, in order, as the tier is added (vLLM
 * passes the tier list to the policy's constructor instead). Owner thread.
 */
void
kv_admission_policy_tier_added (KvAdmissionPolicy *self,
                                guint              tier_index,
                                KvSecondaryTier   *tier)
{
  KvAdmissionPolicyInterface *iface;

  g_return_if_fail (KV_IS_ADMISSION_POLICY (self));
  g_return_if_fail (KV_IS_SECONDARY_TIER (tier));

  iface = KV_ADMISSION_POLICY_GET_IFACE (self);
  if (iface->tier_added != NULL)
    iface->tier_added (self, tier_index, tier);
}

/**
 * kv_admission_policy_should_admit: (virtual should_admit)
 * @self: a policy
 * @keys: (array zero-terminated=1): the chunks of the job
 * @tier_index: the secondary tier, from 0: the store's destination or the
 *   promotion's source
 * @is_promotion: %TRUE for a promotion (secondary → primary), %FALSE for a
 *   store
 *
 * Decides whether the job may start. Called before anything is pinned,
 * allocated or numbered, so a refusal has no side effect on the manager; a
 * policy may count its refusals. Owner thread.
 *
 * Returns: %TRUE to start the job, %FALSE to drop it
 */
gboolean
kv_admission_policy_should_admit (KvAdmissionPolicy *self,
                                  KvKey            **keys,
                                  guint              tier_index,
                                  gboolean           is_promotion)
{
  KvAdmissionPolicyInterface *iface;

  g_return_val_if_fail (KV_IS_ADMISSION_POLICY (self), TRUE);
  g_return_val_if_fail (keys != NULL, TRUE);

  iface = KV_ADMISSION_POLICY_GET_IFACE (self);
  g_return_val_if_fail (iface->should_admit != NULL, TRUE);
  return iface->should_admit (self, keys, tier_index, is_promotion);
}

/**
 * kv_admission_policy_on_admitted: (virtual on_admitted)
 * @self: a policy
 * @job: the job, registered with its id and primary slots
 * @tier_index: the tier that runs it, from 0
 *
 * Called once for each job after it was admitted and registered, before
 * the tier receives it. Owner thread.
 */
void
kv_admission_policy_on_admitted (KvAdmissionPolicy *self,
                                 KvTransferJob     *job,
                                 guint              tier_index)
{
  KvAdmissionPolicyInterface *iface;

  g_return_if_fail (KV_IS_ADMISSION_POLICY (self));
  g_return_if_fail (job != NULL);

  iface = KV_ADMISSION_POLICY_GET_IFACE (self);
  if (iface->on_admitted != NULL)
    iface->on_admitted (self, job, tier_index);
}

/**
 * kv_admission_policy_on_completed: (virtual on_completed)
 * @self: a policy
 * @job: the job
 * @tier_index: the tier that ran it, from 0
 * @result: the job's result (a job refused by its tier at submit, or
 *   failed at its deadline, has a failed result too)
 *
 * Called exactly once for every job the manager registered, whatever its
 * outcome. Owner thread.
 */
void
kv_admission_policy_on_completed (KvAdmissionPolicy *self,
                                  KvTransferJob     *job,
                                  guint              tier_index,
                                  KvJobResult       *result)
{
  KvAdmissionPolicyInterface *iface;

  g_return_if_fail (KV_IS_ADMISSION_POLICY (self));
  g_return_if_fail (job != NULL);
  g_return_if_fail (result != NULL);

  iface = KV_ADMISSION_POLICY_GET_IFACE (self);
  if (iface->on_completed != NULL)
    iface->on_completed (self, job, tier_index, result);
}

/**
 * kv_admission_policy_reset: (virtual reset)
 * @self: a policy
 *
 * Forgets what the policy learned, at the end of
 * [method@Kv.TieringManager.reset_cache]. Owner thread.
 */
void
kv_admission_policy_reset (KvAdmissionPolicy *self)
{
  KvAdmissionPolicyInterface *iface;

  g_return_if_fail (KV_IS_ADMISSION_POLICY (self));

  iface = KV_ADMISSION_POLICY_GET_IFACE (self);
  if (iface->reset != NULL)
    iface->reset (self);
}

/**
 * kv_admission_policy_register_metrics: (virtual register_metrics)
 * @self: a policy
 * @registry: the registry [method@Kv.TieringManager.create_metric_registry]
 *   fills
 * @error: return location for an error
 *
 * Adds the definitions of the metrics that
 * [method@Kv.AdmissionPolicy.get_stats] reports. The default adds none.
 *
 * Returns: %TRUE on success, %FALSE if a definition clashes
 */
gboolean
kv_admission_policy_register_metrics (KvAdmissionPolicy  *self,
                                      KvMetricRegistry   *registry,
                                      GError            **error)
{
  KvAdmissionPolicyInterface *iface;

  g_return_val_if_fail (KV_IS_ADMISSION_POLICY (self), FALSE);
  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (registry), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  iface = KV_ADMISSION_POLICY_GET_IFACE (self);
  if (iface->register_metrics == NULL)
    return TRUE;
  return iface->register_metrics (self, registry, error);
}

/**
 * kv_admission_policy_get_stats: (virtual get_stats)
 * @self: a policy
 *
 * Takes the policy's metrics since the last call (return and reset);
 * [method@Kv.TieringManager.get_stats] adds them to its own. Owner thread.
 *
 * Returns: (transfer full) (nullable): the metrics, or %NULL when there
 *   are none
 */
KvStats *
kv_admission_policy_get_stats (KvAdmissionPolicy *self)
{
  KvAdmissionPolicyInterface *iface;

  g_return_val_if_fail (KV_IS_ADMISSION_POLICY (self), NULL);

  iface = KV_ADMISSION_POLICY_GET_IFACE (self);
  if (iface->get_stats == NULL)
    return NULL;
  return iface->get_stats (self);
}
