/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-backpressure-detector.h"

#include "kv-throttled-drop-policy.h"

typedef struct
{
  KvBackpressurePolicy *policy;
  KvClock              *clock;
} KvBackpressureDetectorPrivate;

enum {
  PROP_0,
  PROP_POLICY,
  PROP_CLOCK,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/**
 * KvBackpressureDetector:
 *
 * Watches how long a secondary tier takes to store chunks and tells the
 * [class@Kv.TieringManager] when to stop cascading to it.
 *
 * A slow tier must not lock the primary tier: every cascade pins its primary
 * slots until the tier finishes, so a tier that stores at a fraction of the
 * rate the GPU produces chunks ends up pinning the whole primary tier. The
 * manager's default admission policy, [class@Kv.BackpressureAdmissionPolicy],
 * asks the tier's detector before every cascade
 * ([method@Kv.BackpressureDetector.should_store]) and the manager drops the
 * cascade when it refuses (no job, nothing pinned; the chunk stays in the
 * primary tier only). Promotions (loads) are never gated. The policy feeds
 * every successful store back with [method@Kv.BackpressureDetector.update].
 *
 * Subclasses implement `on_store_completed` and `is_under_pressure`;
 * [class@Kv.EmaBackpressureDetector] is the one kvtier ships. What is
 * dropped while under pressure is decided by the detector's
 * [property@Kv.BackpressureDetector:policy].
 *
 * Every method runs on the owner thread (the thread that drives the
 * manager).
 */
G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (KvBackpressureDetector, kv_backpressure_detector, G_TYPE_OBJECT)

static gboolean
kv_backpressure_detector_real_should_store (KvBackpressureDetector *self,
                                            guint                   n_chunks)
{
  KvBackpressureDetectorPrivate *priv = kv_backpressure_detector_get_instance_private (self);

  if (!kv_backpressure_policy_should_store (priv->policy, self))
    {
      kv_backpressure_policy_on_store_skipped (priv->policy, n_chunks);
      return FALSE;
    }

  return TRUE;
}

static void
kv_backpressure_detector_real_reset (KvBackpressureDetector *self)
{
  KvBackpressureDetectorPrivate *priv = kv_backpressure_detector_get_instance_private (self);

  kv_backpressure_policy_reset (priv->policy);
}

static void
kv_backpressure_detector_constructed (GObject *object)
{
  KvBackpressureDetector *self = KV_BACKPRESSURE_DETECTOR (object);
  KvBackpressureDetectorPrivate *priv = kv_backpressure_detector_get_instance_private (self);

  G_OBJECT_CLASS (kv_backpressure_detector_parent_class)->constructed (object);

  /* The latest reference defaults to the throttled policy. */
  if (priv->policy == NULL)
    priv->policy = KV_BACKPRESSURE_POLICY (kv_throttled_drop_policy_new (2.0));
  if (priv->clock == NULL)
    priv->clock = g_object_ref (kv_clock_get_default ());
}

static void
kv_backpressure_detector_get_property (GObject    *object,
                                       guint       prop_id,
                                       GValue     *value,
                                       GParamSpec *pspec)
{
  KvBackpressureDetector *self = KV_BACKPRESSURE_DETECTOR (object);
  KvBackpressureDetectorPrivate *priv = kv_backpressure_detector_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_POLICY:
      g_value_set_object (value, priv->policy);
      break;
    case PROP_CLOCK:
      g_value_set_object (value, priv->clock);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_backpressure_detector_set_property (GObject      *object,
                                       guint         prop_id,
                                       const GValue *value,
                                       GParamSpec   *pspec)
{
  KvBackpressureDetector *self = KV_BACKPRESSURE_DETECTOR (object);
  KvBackpressureDetectorPrivate *priv = kv_backpressure_detector_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_POLICY:
      g_set_object (&priv->policy, g_value_get_object (value));
      break;
    case PROP_CLOCK:
      g_set_object (&priv->clock, g_value_get_object (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_backpressure_detector_dispose (GObject *object)
{
  KvBackpressureDetector *self = KV_BACKPRESSURE_DETECTOR (object);
  KvBackpressureDetectorPrivate *priv = kv_backpressure_detector_get_instance_private (self);

  g_clear_object (&priv->policy);
  g_clear_object (&priv->clock);

  G_OBJECT_CLASS (kv_backpressure_detector_parent_class)->dispose (object);
}

static void
kv_backpressure_detector_class_init (KvBackpressureDetectorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->constructed = kv_backpressure_detector_constructed;
  object_class->get_property = kv_backpressure_detector_get_property;
  object_class->set_property = kv_backpressure_detector_set_property;
  object_class->dispose = kv_backpressure_detector_dispose;

  klass->should_store = kv_backpressure_detector_real_should_store;
  klass->reset = kv_backpressure_detector_real_reset;

  /**
   * KvBackpressureDetector:policy:
   *
   * What to drop while the tier is under pressure. Construct-only; when
   * not set, a [class@Kv.ThrottledDropPolicy] with a ramp factor of 2 (the
   * reference's default).
   */
  properties[PROP_POLICY] =
    g_param_spec_object ("policy", NULL, NULL,
                         KV_TYPE_BACKPRESSURE_POLICY,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvBackpressureDetector:clock:
   *
   * The clock store latencies and decay are measured with. Construct-only;
   * when not set, [func@Kv.Clock.get_default]. Tests pass a manual clock
   * ([ctor@Kv.Clock.new_manual]).
   */
  properties[PROP_CLOCK] =
    g_param_spec_object ("clock", NULL, NULL,
                         KV_TYPE_CLOCK,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_backpressure_detector_init (KvBackpressureDetector *self)
{
}

/**
 * kv_backpressure_detector_update:
 * @self: a detector
 * @submit_time_us: when the store job was submitted, in microseconds of the
 *   detector's [property@Kv.BackpressureDetector:clock] (the job's
 *   [method@Kv.TransferJob.get_submit_time])
 * @n_bytes: bytes the job moved
 *
 * Feeds one successful store that finishes now. A store of zero bytes is
 * ignored; otherwise this calls
 * [method@Kv.BackpressureDetector.on_store_completed] with the time since
 * @submit_time_us in seconds (queueing included; a submit time in the
 * future counts as zero).
 *
 * Owner thread only.
 */
void
kv_backpressure_detector_update (KvBackpressureDetector *self,
                                 gint64                  submit_time_us,
                                 guint64                 n_bytes)
{
  KvBackpressureDetectorPrivate *priv;
  gint64 elapsed_us;

  g_return_if_fail (KV_IS_BACKPRESSURE_DETECTOR (self));

  if (n_bytes == 0)
    return;

  priv = kv_backpressure_detector_get_instance_private (self);
  elapsed_us = kv_clock_get_time (priv->clock) - submit_time_us;
  kv_backpressure_detector_on_store_completed (self, MAX (elapsed_us, 0) / 1e6, n_bytes);
}

/**
 * kv_backpressure_detector_on_store_completed: (virtual on_store_completed)
 * @self: a detector
 * @elapsed_s: seconds the store took, queueing included
 * @n_bytes: bytes it moved; zero is ignored
 *
 * Feeds one successful store to the detector.
 *
 * Owner thread only.
 */
void
kv_backpressure_detector_on_store_completed (KvBackpressureDetector *self,
                                             gdouble                 elapsed_s,
                                             guint64                 n_bytes)
{
  KvBackpressureDetectorClass *klass;

  g_return_if_fail (KV_IS_BACKPRESSURE_DETECTOR (self));

  klass = KV_BACKPRESSURE_DETECTOR_GET_CLASS (self);
  g_return_if_fail (klass->on_store_completed != NULL);

  /* A latency per byte needs bytes. */
  if (n_bytes == 0)
    return;

  klass->on_store_completed (self, elapsed_s, n_bytes);
}

/**
 * kv_backpressure_detector_is_under_pressure: (virtual is_under_pressure)
 * @self: a detector
 *
 * Whether the tier is saturated now. May update the detector's state (the
 * EMA detector decays its average while no store completes).
 *
 * Owner thread only.
 *
 * Returns: %TRUE while the tier is under pressure
 */
gboolean
kv_backpressure_detector_is_under_pressure (KvBackpressureDetector *self)
{
  KvBackpressureDetectorClass *klass;

  g_return_val_if_fail (KV_IS_BACKPRESSURE_DETECTOR (self), FALSE);

  klass = KV_BACKPRESSURE_DETECTOR_GET_CLASS (self);
  g_return_val_if_fail (klass->is_under_pressure != NULL, FALSE);

  return klass->is_under_pressure (self);
}

/**
 * kv_backpressure_detector_should_store: (virtual should_store)
 * @self: a detector
 * @n_chunks: how many chunks the cascade carries
 *
 * Decides whether a cascade of @n_chunks chunks may be submitted to the
 * tier. The default asks the [property@Kv.BackpressureDetector:policy]; if
 * it refuses, the drop is counted with
 * [method@Kv.BackpressurePolicy.on_store_skipped] and %FALSE is returned.
 *
 * Owner thread only.
 *
 * Returns: %TRUE to submit, %FALSE to drop the cascade
 */
gboolean
kv_backpressure_detector_should_store (KvBackpressureDetector *self,
                                       guint                   n_chunks)
{
  KvBackpressureDetectorClass *klass;

  g_return_val_if_fail (KV_IS_BACKPRESSURE_DETECTOR (self), TRUE);

  klass = KV_BACKPRESSURE_DETECTOR_GET_CLASS (self);
  g_return_val_if_fail (klass->should_store != NULL, TRUE);

  return klass->should_store (self, n_chunks);
}

/**
 * kv_backpressure_detector_reset: (virtual reset)
 * @self: a detector
 *
 * Forgets all state; the default resets the policy. The manager's
 * [class@Kv.BackpressureAdmissionPolicy] calls this from `reset_cache`. An
 * override must chain up.
 *
 * Owner thread only.
 */
void
kv_backpressure_detector_reset (KvBackpressureDetector *self)
{
  KvBackpressureDetectorClass *klass;

  g_return_if_fail (KV_IS_BACKPRESSURE_DETECTOR (self));

  klass = KV_BACKPRESSURE_DETECTOR_GET_CLASS (self);
  if (klass->reset != NULL)
    klass->reset (self);
}

/**
 * kv_backpressure_detector_get_policy:
 * @self: a detector
 *
 * Gets the detector's drop policy.
 *
 * Returns: (transfer none): the policy
 */
KvBackpressurePolicy *
kv_backpressure_detector_get_policy (KvBackpressureDetector *self)
{
  KvBackpressureDetectorPrivate *priv;

  g_return_val_if_fail (KV_IS_BACKPRESSURE_DETECTOR (self), NULL);

  priv = kv_backpressure_detector_get_instance_private (self);
  return priv->policy;
}

/**
 * kv_backpressure_detector_get_clock:
 * @self: a detector
 *
 * Gets the clock the detector measures time with.
 *
 * Returns: (transfer none): the clock
 */
KvClock *
kv_backpressure_detector_get_clock (KvBackpressureDetector *self)
{
  KvBackpressureDetectorPrivate *priv;

  g_return_val_if_fail (KV_IS_BACKPRESSURE_DETECTOR (self), NULL);

  priv = kv_backpressure_detector_get_instance_private (self);
  return priv->clock;
}
