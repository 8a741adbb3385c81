/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-throttled-drop-policy.h"

#include "kv-backpressure-detector.h"
#include "kv-ema-backpressure-detector.h"

/* Slack for the accumulated drop credit: summing a rate like 0.1 ten times
 * gives 0.9999999999999999, which must still count as one whole drop. */
#define CREDIT_EPSILON 1e-9

struct _KvThrottledDropPolicy
{
  KvBackpressurePolicy parent_instance;

  gdouble ramp_factor;
  /* Fraction of a drop owed so far; a store is dropped whenever a whole one
   * is owed, so the drop fraction over any run of calls is the rate. */
  gdouble credit;
};

enum {
  PROP_0,
  PROP_RAMP_FACTOR,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/**
 * KvThrottledDropPolicy:
 *
 * A [class@Kv.BackpressurePolicy] that drops a fraction of the cascades
 * which grows with how far the tier's store latency is above its high-water
 * mark.
 *
 * It needs a [class@Kv.EmaBackpressureDetector]. While the detector is under
 * pressure the drop rate is
 * `min (1, max (0, ema - high) / high / ramp_factor)`: nothing is dropped at
 * or below the high-water mark, everything from `(1 + ramp_factor) × high`
 * up. In between exactly that fraction of the stores is dropped, spread
 * evenly: the policy accumulates the rate on every call and drops a store
 * each time a whole drop is owed. (The reference drops one store in
 * `round (1 / rate)`, which under-applies rates above one half: a 75 % target
 * dropped only 50 %.)
 *
 * With any other detector, or a high-water mark of zero, every store is
 * refused while under pressure, as in the reference.
 *
 * Owner thread only, like its detector.
 */
G_DEFINE_FINAL_TYPE (KvThrottledDropPolicy, kv_throttled_drop_policy, KV_TYPE_BACKPRESSURE_POLICY)

static gdouble
compute_drop_rate (KvThrottledDropPolicy  *self,
                   KvBackpressureDetector *detector)
{
  KvEmaBackpressureDetector *ema_detector;
  gdouble high, ema, overshoot;

  if (!KV_IS_EMA_BACKPRESSURE_DETECTOR (detector))
    return 1.0;

  ema_detector = KV_EMA_BACKPRESSURE_DETECTOR (detector);
  high = kv_ema_backpressure_detector_get_high_water_s (ema_detector);
  if (high <= 0.0)
    return 1.0;

  ema = kv_ema_backpressure_detector_get_store_latency_ema (ema_detector);
  overshoot = MAX (0.0, ema - high) / high;
  return MIN (1.0, overshoot / self->ramp_factor);
}

static gboolean
kv_throttled_drop_policy_should_store (KvBackpressurePolicy   *policy,
                                       KvBackpressureDetector *detector)
{
  KvThrottledDropPolicy *self = KV_THROTTLED_DROP_POLICY (policy);
  gdouble rate;

  if (!kv_backpressure_detector_is_under_pressure (detector))
    return TRUE;

  rate = compute_drop_rate (self, detector);
  if (rate <= 0.0)
    return TRUE;
  if (rate >= 1.0)
    return FALSE;

  self->credit += rate;
  if (self->credit >= 1.0 - CREDIT_EPSILON)
    {
      self->credit -= 1.0;
      return FALSE;
    }

  return TRUE;
}

static void
kv_throttled_drop_policy_reset (KvBackpressurePolicy *policy)
{
  KvThrottledDropPolicy *self = KV_THROTTLED_DROP_POLICY (policy);

  self->credit = 0.0;

  KV_BACKPRESSURE_POLICY_CLASS (kv_throttled_drop_policy_parent_class)->reset (policy);
}

static void
kv_throttled_drop_policy_get_property (GObject    *object,
                                       guint       prop_id,
                                       GValue     *value,
                                       GParamSpec *pspec)
{
  KvThrottledDropPolicy *self = KV_THROTTLED_DROP_POLICY (object);

  switch (prop_id)
    {
    case PROP_RAMP_FACTOR:
      g_value_set_double (value, self->ramp_factor);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_throttled_drop_policy_set_property (GObject      *object,
                                       guint         prop_id,
                                       const GValue *value,
                                       GParamSpec   *pspec)
{
  KvThrottledDropPolicy *self = KV_THROTTLED_DROP_POLICY (object);

  switch (prop_id)
    {
    case PROP_RAMP_FACTOR:
      self->ramp_factor = g_value_get_double (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_throttled_drop_policy_class_init (KvThrottledDropPolicyClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvBackpressurePolicyClass *policy_class = KV_BACKPRESSURE_POLICY_CLASS (klass);

  object_class->get_property = kv_throttled_drop_policy_get_property;
  object_class->set_property = kv_throttled_drop_policy_set_property;

  policy_class->should_store = kv_throttled_drop_policy_should_store;
  policy_class->reset = kv_throttled_drop_policy_reset;

  /**
   * KvThrottledDropPolicy:ramp-factor:
   *
   * How many high-water marks of overshoot it takes to reach a 100 % drop
   * rate: the rate is `overshoot / high / ramp-factor`. With the default
   * of 2, a latency of twice the high-water mark drops half the stores and
   * three times drops all of them. Construct-only; must be positive.
   */
  properties[PROP_RAMP_FACTOR] =
    g_param_spec_double ("ramp-factor", NULL, NULL,
                         G_MINDOUBLE, G_MAXDOUBLE, 2.0,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_throttled_drop_policy_init (KvThrottledDropPolicy *self)
{
  self->ramp_factor = 2.0;
}

/**
 * kv_throttled_drop_policy_new:
 * @ramp_factor: overshoot (in high-water marks) at which every store is
 *   dropped; positive, 2 in the reference
 *
 * Creates a throttled drop policy.
 *
 * Returns: (transfer full): a new policy
 */
KvThrottledDropPolicy *
kv_throttled_drop_policy_new (gdouble ramp_factor)
{
  g_return_val_if_fail (ramp_factor > 0.0, NULL);

  return g_object_new (KV_TYPE_THROTTLED_DROP_POLICY,
                       "ramp-factor", ramp_factor,
                       NULL);
}

/**
 * kv_throttled_drop_policy_get_ramp_factor:
 * @self: a policy
 *
 * Gets [property@Kv.ThrottledDropPolicy:ramp-factor].
 *
 * Returns: the ramp factor
 */
gdouble
kv_throttled_drop_policy_get_ramp_factor (KvThrottledDropPolicy *self)
{
  g_return_val_if_fail (KV_IS_THROTTLED_DROP_POLICY (self), 0.0);

  return self->ramp_factor;
}

/**
 * kv_throttled_drop_policy_get_drop_rate:
 * @self: a policy
 * @detector: a detector
 *
 * Computes the fraction of stores the policy drops at @detector's current
 * store latency, assuming the detector is under pressure. It does not ask
 * the detector whether it is (that may decay its state) and changes
 * nothing.
 *
 * Owner thread only.
 *
 * Returns: the drop rate, from 0 to 1
 */
gdouble
kv_throttled_drop_policy_get_drop_rate (KvThrottledDropPolicy  *self,
                                        KvBackpressureDetector *detector)
{
  g_return_val_if_fail (KV_IS_THROTTLED_DROP_POLICY (self), 0.0);
  g_return_val_if_fail (KV_IS_BACKPRESSURE_DETECTOR (detector), 0.0);

  return compute_drop_rate (self, detector);
}
