/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-backpressure-admission-policy.h"

#include "kv-ema-backpressure-detector.h"
#include "kv-tiering-metrics-private.h"

typedef struct
{
  KvSecondaryTier *tier;
  KvBackpressureDetector *detector;  /* the tier's, or NULL */
  char *label;                       /* "<index + 1>:<tier-type>" */
  gboolean under_pressure;           /* last state seen, for the log */
} TierEntry;

struct _KvBackpressureAdmissionPolicy
{
  GObject parent_instance;

  GArray *tiers;  /* TierEntry, by tier index */
  guint n_detectors;
};

/**
 * KvBackpressureAdmissionPolicy:
 *
 * An [iface@Kv.AdmissionPolicy] that drops stores to a tier its
 * [class@Kv.BackpressureDetector] reports saturated (vLLM's
 * `BackpressureAdmissionPolicy`). It is the [class@Kv.TieringManager]'s
 * default policy.
 *
 * The policy reads each tier's
 * [property@Kv.SecondaryTier:backpressure-detector] and owns none:
 *
 * - a store is admitted when the tier has no detector, or when
 *   [method@Kv.BackpressureDetector.should_store] says so (the detector's
 *   [class@Kv.BackpressurePolicy] counts what it drops);
 * - a promotion is always admitted: dropping it would only delay a hit the
 *   lookup already paid for, and a promotion takes load off the tier later;
 * - each successful store feeds its detector its latency (from the job's
 *   submit time, on the manager's clock) and its bytes (the result's
 *   transfer bytes, else the job's chunks × the tier's block size); a
 *   change of state is logged;
 * - [method@Kv.AdmissionPolicy.reset] resets every detector.
 *
 * Its metrics are vLLM's backpressure metrics, labelled with the tier
 * (`"<index + 1>:<tier-type>"`): the gauge
 * `vllm:kv_offload_tiering_backpressure_store_latency_ema` (s/MiB, for an
 * [class@Kv.EmaBackpressureDetector], sent on every call) and the counters
 * `vllm:kv_offload_tiering_backpressure_stores_dropped` and
 * `…_blocks_dropped` (taken from the detector's policy on every call).
 */
static void kv_backpressure_admission_policy_iface_init (KvAdmissionPolicyInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvBackpressureAdmissionPolicy, kv_backpressure_admission_policy,
                               G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_ADMISSION_POLICY,
                                                      kv_backpressure_admission_policy_iface_init))

static void
tier_entry_clear (gpointer data)
{
  TierEntry *entry = data;

  g_clear_object (&entry->tier);
  g_clear_object (&entry->detector);
  g_clear_pointer (&entry->label, g_free);
}

static inline TierEntry *
tier_entry (KvBackpressureAdmissionPolicy *self,
            guint                          tier_index)
{
  if (G_UNLIKELY (tier_index >= self->tiers->len))
    return NULL;
  return &g_array_index (self->tiers, TierEntry, tier_index);
}

static void
kv_backpressure_admission_policy_tier_added (KvAdmissionPolicy *policy,
                                             guint              tier_index,
                                             KvSecondaryTier   *tier)
{
  KvBackpressureAdmissionPolicy *self = KV_BACKPRESSURE_ADMISSION_POLICY (policy);
  TierEntry *entry;
  KvBackpressureDetector *detector;

  if (tier_index >= self->tiers->len)
    g_array_set_size (self->tiers, tier_index + 1);
  entry = tier_entry (self, tier_index);
  if (entry->detector != NULL)
    self->n_detectors--;
  tier_entry_clear (entry);

  /* construct-only on the tier: read once */
  detector = kv_secondary_tier_get_backpressure_detector (tier);
  entry->tier = g_object_ref (tier);
  entry->detector = detector != NULL ? g_object_ref (detector) : NULL;
  entry->label = kv_tiering_metrics_make_tier_label (tier_index + 1,
                                                     kv_secondary_tier_get_tier_type (tier));
  entry->under_pressure = FALSE;
  if (entry->detector != NULL)
    self->n_detectors++;
}

static gboolean
kv_backpressure_admission_policy_should_admit (KvAdmissionPolicy  *policy,
                                               KvKey             **keys,
                                               guint               tier_index,
                                               gboolean            is_promotion)
{
  KvBackpressureAdmissionPolicy *self = (KvBackpressureAdmissionPolicy *) policy;
  TierEntry *entry;
  guint n_keys = 0;

  if (is_promotion)
    return TRUE;
  entry = tier_entry (self, tier_index);
  if (entry == NULL || entry->detector == NULL)
    return TRUE;
  while (keys[n_keys] != NULL)
    n_keys++;
  return kv_backpressure_detector_should_store (entry->detector, n_keys);
}

static void
kv_backpressure_admission_policy_on_completed (KvAdmissionPolicy *policy,
                                               KvTransferJob     *job,
                                               guint              tier_index,
                                               KvJobResult       *result)
{
  KvBackpressureAdmissionPolicy *self = (KvBackpressureAdmissionPolicy *) policy;
  TierEntry *entry;
  gint64 bytes;
  gboolean was_under;

  if (kv_transfer_job_is_promotion (job) || !kv_job_result_get_success (result))
    return;
  entry = tier_entry (self, tier_index);
  if (entry == NULL || entry->detector == NULL)
    return;

  /* unknown or zero bytes: the job's chunks (the reference's `or`) */
  bytes = kv_job_result_get_transfer_bytes (result);
  if (bytes <= 0)
    bytes = (gint64) kv_transfer_job_get_n_keys (job) *
            (gint64) kv_secondary_tier_get_block_size_bytes (entry->tier);

  was_under = entry->under_pressure;
  kv_backpressure_detector_update (entry->detector, kv_transfer_job_get_submit_time (job),
                                   (guint64) bytes);
  entry->under_pressure = kv_backpressure_detector_is_under_pressure (entry->detector);
  if (entry->under_pressure != was_under)
    g_info ("Tier #%u (%s) back-pressure %s", tier_index + 1,
            kv_secondary_tier_get_tier_type (entry->tier),
            entry->under_pressure ? "activated" : "cleared");
}

static void
kv_backpressure_admission_policy_reset (KvAdmissionPolicy *policy)
{
  KvBackpressureAdmissionPolicy *self = KV_BACKPRESSURE_ADMISSION_POLICY (policy);

  for (guint i = 0; i < self->tiers->len; i++)
    {
      TierEntry *entry = tier_entry (self, i);

      if (entry->detector != NULL)
        kv_backpressure_detector_reset (entry->detector);
      entry->under_pressure = FALSE;
    }
}

static gboolean
kv_backpressure_admission_policy_register_metrics (KvAdmissionPolicy  *policy,
                                                   KvMetricRegistry   *registry,
                                                   GError            **error)
{
  static const char * const tier[] = { "tier", NULL };

  return
    kv_metric_registry_add_gauge (registry, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA,
                                  "Moving average of a tier's store latency, in seconds per MiB",
                                  tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_BACKPRESSURE_STORES_DROPPED,
                                    "Cascades dropped because the tier was under backpressure",
                                    tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED,
                                    "Chunks in the cascades dropped under backpressure",
                                    tier, error);
}

static KvStats *
kv_backpressure_admission_policy_get_stats (KvAdmissionPolicy *policy)
{
  KvBackpressureAdmissionPolicy *self = KV_BACKPRESSURE_ADMISSION_POLICY (policy);
  KvStats *stats;

  if (self->n_detectors == 0)
    return NULL;

  stats = kv_stats_new ();
  for (guint i = 0; i < self->tiers->len; i++)
    {
      TierEntry *entry = tier_entry (self, i);
      const char *labels[] = { entry->label, NULL };
      guint64 stores = 0, chunks = 0;

      if (entry->detector == NULL)
        continue;
      /* the gauge persists across reads; the counters are taken */
      if (KV_IS_EMA_BACKPRESSURE_DETECTOR (entry->detector))
        kv_stats_set_gauge (stats, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA,
                            kv_ema_backpressure_detector_get_store_latency_ema (
                              KV_EMA_BACKPRESSURE_DETECTOR (entry->detector)),
                            labels);
      kv_backpressure_policy_pop_stores_dropped (kv_backpressure_detector_get_policy (entry->detector),
                                                 &stores, &chunks);
      /* sent at 0 too, so that every series exists from the first scrape */
      kv_stats_increase_counter (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, stores, labels);
      kv_stats_increase_counter (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, chunks, labels);
    }
  return stats;
}

static void
kv_backpressure_admission_policy_iface_init (KvAdmissionPolicyInterface *iface)
{
  iface->tier_added = kv_backpressure_admission_policy_tier_added;
  iface->should_admit = kv_backpressure_admission_policy_should_admit;
  iface->on_completed = kv_backpressure_admission_policy_on_completed;
  iface->reset = kv_backpressure_admission_policy_reset;
  iface->register_metrics = kv_backpressure_admission_policy_register_metrics;
  iface->get_stats = kv_backpressure_admission_policy_get_stats;
}

static void
kv_backpressure_admission_policy_finalize (GObject *object)
{
  KvBackpressureAdmissionPolicy *self = KV_BACKPRESSURE_ADMISSION_POLICY (object);

  g_clear_pointer (&self->tiers, g_array_unref);

  G_OBJECT_CLASS (kv_backpressure_admission_policy_parent_class)->finalize (object);
}

static void
kv_backpressure_admission_policy_class_init (KvBackpressureAdmissionPolicyClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_backpressure_admission_policy_finalize;
}

static void
kv_backpressure_admission_policy_init (KvBackpressureAdmissionPolicy *self)
{
  self->tiers = g_array_new (FALSE, TRUE, sizeof (TierEntry));
  g_array_set_clear_func (self->tiers, tier_entry_clear);
}

/**
 * kv_backpressure_admission_policy_new:
 *
 * Creates a backpressure admission policy with no tier; the
 * [class@Kv.TieringManager] it is given to tells it about each tier with
 * [method@Kv.AdmissionPolicy.tier_added].
 *
 * Returns: (transfer full): a new policy
 */
KvBackpressureAdmissionPolicy *
kv_backpressure_admission_policy_new (void)
{
  return g_object_new (KV_TYPE_BACKPRESSURE_ADMISSION_POLICY, NULL);
}
