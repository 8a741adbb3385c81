/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-ema-backpressure-detector.h"

#include <math.h>

#define MIB ((gdouble) (1u << 20))

/* Reference defaults. The water marks are seconds per MiB stored, derived by
 * the reference from fio runs: NVMe ≈ 5 GB/s (high ≈ 200 MB/s, low ≈ 1 GB/s)
 * and CephFS ≈ 1.5 GB/s (high ≈ 50 MB/s, low ≈ 200 MB/s). */
#define LOCAL_HIGH_WATER_S        0.005
#define LOCAL_LOW_WATER_S         0.001
#define NETWORK_HIGH_WATER_S      0.020
#define NETWORK_LOW_WATER_S       0.005
#define DEFAULT_ALPHA             0.3
#define DEFAULT_WARMUP            3
#define DEFAULT_DECAY_HALF_LIFE_S 2.0
#define DEFAULT_COOLDOWN_S        1.0
/* Consecutive completions below the low-water mark after which stores skip
 * the policy altogether. */
#define HEALTHY_THRESHOLD         10

struct _KvEmaBackpressureDetector
{
  KvBackpressureDetector parent_instance;

  gdouble  high_water_s;
  gdouble  low_water_s;
  gdouble  alpha;
  guint    warmup_completions;
  gdouble  decay_half_life_s;
  gdouble  cooldown_s;

  gdouble  ema;
  gdouble  warmup_sum;
  guint64  completions;
  gint64   last_update_us;
  guint    healthy_streak;
  guint    cooldown_count;
  gint64   cleared_at_us;
  /* The reference marks "never cleared" with a time of zero; a manual clock
   * may well read zero, so it gets its own flag. */
  guint    cleared : 1;
  guint    under_pressure : 1;
};

enum {
  PROP_0,
  PROP_HIGH_WATER_S,
  PROP_LOW_WATER_S,
  PROP_ALPHA,
  PROP_WARMUP_COMPLETIONS,
  PROP_DECAY_HALF_LIFE_S,
  PROP_COOLDOWN_S,
  PROP_STORE_LATENCY_EMA,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void kv_ema_backpressure_detector_initable_iface_init (GInitableIface *iface);

/**
 * KvEmaBackpressureDetector:
 *
 * A [class@Kv.BackpressureDetector] that follows an exponential moving
 * average of the tier's store latency per MiB.
 *
 * Every successful store is normalised to seconds per MiB (so large and
 * small chunks compare). The first
 * [property@Kv.EmaBackpressureDetector:warmup-completions] samples only seed
 * the average (with their mean) and change no state; after that each sample
 * moves it by [property@Kv.EmaBackpressureDetector:alpha]. Pressure starts
 * when the average rises above
 * [property@Kv.EmaBackpressureDetector:high-water-s] and ends when it falls
 * below [property@Kv.EmaBackpressureDetector:low-water-s]; in between the
 * state is kept (hysteresis).
 *
 * While under pressure stores are dropped, so no new samples arrive: the
 * average therefore decays with a half-life of
 * [property@Kv.EmaBackpressureDetector:decay-half-life-s] whenever
 * [method@Kv.BackpressureDetector.is_under_pressure] is asked (never in
 * `on_store_completed`, never before warm-up). For
 * [property@Kv.EmaBackpressureDetector:cooldown-s] after pressure clears,
 * every second store is dropped (the tier gets a gradual ramp back), and
 * after ten consecutive completions below the low-water mark the detector is
 * healthy: stores are admitted without asking the policy.
 *
 * Construct it with [ctor@Kv.EmaBackpressureDetector.new] or
 * [ctor@Kv.EmaBackpressureDetector.new_for_tier], or with
 * `g_initable_new()` and properties: out-of-range values (alpha outside
 * (0, 1], a negative time, a low-water mark above the high-water mark) are
 * reported as a %KV_TIER_ERROR_INVALID_ARGUMENT error naming the property.
 *
 * Owner thread only.
 */
G_DEFINE_FINAL_TYPE_WITH_CODE (KvEmaBackpressureDetector, kv_ema_backpressure_detector,
                               KV_TYPE_BACKPRESSURE_DETECTOR,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_ema_backpressure_detector_initable_iface_init))

static gint64
now_us (KvEmaBackpressureDetector *self)
{
  return kv_clock_get_time (kv_backpressure_detector_get_clock (KV_BACKPRESSURE_DETECTOR (self)));
}

static void
clear_pressure (KvEmaBackpressureDetector *self,
                gint64                     now)
{
  self->under_pressure = FALSE;
  self->cleared = TRUE;
  self->cleared_at_us = now;
  self->cooldown_count = 0;
}

static void
kv_ema_backpressure_detector_on_store_completed (KvBackpressureDetector *detector,
                                                 gdouble                 elapsed_s,
                                                 guint64                 n_bytes)
{
  KvEmaBackpressureDetector *self = KV_EMA_BACKPRESSURE_DETECTOR (detector);
  gdouble sample = elapsed_s / ((gdouble) n_bytes / MIB);
  gint64 now = now_us (self);

  self->completions += 1;

  if (self->completions <= self->warmup_completions)
    {
      /* Warm-up: no decision on a cold cache or a first slow open. */
      self->warmup_sum += sample;
      if (self->completions == self->warmup_completions)
        {
          self->ema = self->warmup_sum / self->warmup_completions;
          self->last_update_us = now;
        }
      return;
    }

  self->ema = self->alpha * sample + (1.0 - self->alpha) * self->ema;
  self->last_update_us = now;

  if (self->ema > self->high_water_s)
    {
      self->under_pressure = TRUE;
      self->cleared = FALSE;
      self->healthy_streak = 0;
    }
  else if (self->ema < self->low_water_s)
    {
      if (self->under_pressure)
        clear_pressure (self, now);
      self->healthy_streak += 1;
    }
  else
    {
      /* Inside the hysteresis band: keep the state, but the tier is not
       * healthy any more. */
      self->healthy_streak = 0;
    }
}

static gboolean
kv_ema_backpressure_detector_is_under_pressure (KvBackpressureDetector *detector)
{
  KvEmaBackpressureDetector *self = KV_EMA_BACKPRESSURE_DETECTOR (detector);

  if (self->under_pressure && self->completions >= self->warmup_completions)
    {
      gint64 now = now_us (self);
      gint64 dt_us = now - self->last_update_us;

      /* Stores are dropped under pressure, so no sample would ever bring the
       * average down: let it decay while idle. */
      if (dt_us > 0 && self->decay_half_life_s > 0.0)
        {
          self->ema *= pow (0.5, (dt_us / 1e6) / self->decay_half_life_s);
          self->last_update_us = now;
        }
      if (self->ema < self->low_water_s)
        clear_pressure (self, now);
    }

  return self->under_pressure;
}

static gboolean
kv_ema_backpressure_detector_should_store (KvBackpressureDetector *detector,
                                           guint                   n_chunks)
{
  KvEmaBackpressureDetector *self = KV_EMA_BACKPRESSURE_DETECTOR (detector);

  if (kv_ema_backpressure_detector_is_healthy (self))
    return TRUE;

  if (!self->under_pressure && self->cleared &&
      (now_us (self) - self->cleared_at_us) / 1e6 < self->cooldown_s)
    {
      /* Cooldown: admit every other store so a tier that just recovered
       * is not flooded at once. */
      self->cooldown_count += 1;
      if (self->cooldown_count % 2 == 0)
        {
          kv_backpressure_policy_on_store_skipped (kv_backpressure_detector_get_policy (detector),
                                                   n_chunks);
          return FALSE;
        }
    }

  return KV_BACKPRESSURE_DETECTOR_CLASS (kv_ema_backpressure_detector_parent_class)->should_store (detector, n_chunks);
}

static void
kv_ema_backpressure_detector_reset (KvBackpressureDetector *detector)
{
  KvEmaBackpressureDetector *self = KV_EMA_BACKPRESSURE_DETECTOR (detector);

  self->ema = 0.0;
  self->warmup_sum = 0.0;
  self->completions = 0;
  self->last_update_us = 0;
  self->healthy_streak = 0;
  self->cooldown_count = 0;
  self->cleared_at_us = 0;
  self->cleared = FALSE;
  self->under_pressure = FALSE;

  KV_BACKPRESSURE_DETECTOR_CLASS (kv_ema_backpressure_detector_parent_class)->reset (detector);
}

static gboolean
validate (gdouble   high_water_s,
          gdouble   low_water_s,
          gdouble   alpha,
          gdouble   decay_half_life_s,
          gdouble   cooldown_s,
          GError  **error)
{
  /* Written so that NaN fails every check. */
  if (!(alpha > 0.0 && alpha <= 1.0))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "EMA backpressure detector: alpha must be in (0, 1], got %g", alpha);
      return FALSE;
    }
  if (!(high_water_s >= 0.0) || isinf (high_water_s))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "EMA backpressure detector: high-water-s must be a finite number of "
                   "seconds per MiB >= 0, got %g", high_water_s);
      return FALSE;
    }
  if (!(low_water_s >= 0.0))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "EMA backpressure detector: low-water-s must be a number of seconds "
                   "per MiB >= 0, got %g", low_water_s);
      return FALSE;
    }
  if (low_water_s > high_water_s)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "EMA backpressure detector: low-water-s (%g) must not exceed "
                   "high-water-s (%g)", low_water_s, high_water_s);
      return FALSE;
    }
  if (!(decay_half_life_s >= 0.0))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "EMA backpressure detector: decay-half-life-s must be >= 0 "
                   "(0 disables decay), got %g", decay_half_life_s);
      return FALSE;
    }
  if (!(cooldown_s >= 0.0))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "EMA backpressure detector: cooldown-s must be >= 0 (0 disables the "
                   "cooldown), got %g", cooldown_s);
      return FALSE;
    }

  return TRUE;
}

static gboolean
kv_ema_backpressure_detector_initable_init (GInitable     *initable,
                                            GCancellable  *cancellable,
                                            GError       **error)
{
  KvEmaBackpressureDetector *self = KV_EMA_BACKPRESSURE_DETECTOR (initable);

  return validate (self->high_water_s, self->low_water_s, self->alpha,
                   self->decay_half_life_s, self->cooldown_s, error);
}

static void
kv_ema_backpressure_detector_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_ema_backpressure_detector_initable_init;
}

static void
kv_ema_backpressure_detector_get_property (GObject    *object,
                                           guint       prop_id,
                                           GValue     *value,
                                           GParamSpec *pspec)
{
  KvEmaBackpressureDetector *self = KV_EMA_BACKPRESSURE_DETECTOR (object);

  switch (prop_id)
    {
    case PROP_HIGH_WATER_S:
      g_value_set_double (value, self->high_water_s);
      break;
    case PROP_LOW_WATER_S:
      g_value_set_double (value, self->low_water_s);
      break;
    case PROP_ALPHA:
      g_value_set_double (value, self->alpha);
      break;
    case PROP_WARMUP_COMPLETIONS:
      g_value_set_uint (value, self->warmup_completions);
      break;
    case PROP_DECAY_HALF_LIFE_S:
      g_value_set_double (value, self->decay_half_life_s);
      break;
    case PROP_COOLDOWN_S:
      g_value_set_double (value, self->cooldown_s);
      break;
    case PROP_STORE_LATENCY_EMA:
      g_value_set_double (value, self->ema);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_ema_backpressure_detector_set_property (GObject      *object,
                                           guint         prop_id,
                                           const GValue *value,
                                           GParamSpec   *pspec)
{
  KvEmaBackpressureDetector *self = KV_EMA_BACKPRESSURE_DETECTOR (object);

  switch (prop_id)
    {
    case PROP_HIGH_WATER_S:
      self->high_water_s = g_value_get_double (value);
      break;
    case PROP_LOW_WATER_S:
      self->low_water_s = g_value_get_double (value);
      break;
    case PROP_ALPHA:
      self->alpha = g_value_get_double (value);
      break;
    case PROP_WARMUP_COMPLETIONS:
      self->warmup_completions = g_value_get_uint (value);
      break;
    case PROP_DECAY_HALF_LIFE_S:
      self->decay_half_life_s = g_value_get_double (value);
      break;
    case PROP_COOLDOWN_S:
      self->cooldown_s = g_value_get_double (value);
      break;
    case PROP_STORE_LATENCY_EMA:
      kv_ema_backpressure_detector_set_store_latency_ema (self, g_value_get_double (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_ema_backpressure_detector_class_init (KvEmaBackpressureDetectorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvBackpressureDetectorClass *detector_class = KV_BACKPRESSURE_DETECTOR_CLASS (klass);
  const GParamFlags construct_flags = G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                                      G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->get_property = kv_ema_backpressure_detector_get_property;
  object_class->set_property = kv_ema_backpressure_detector_set_property;

  detector_class->on_store_completed = kv_ema_backpressure_detector_on_store_completed;
  detector_class->is_under_pressure = kv_ema_backpressure_detector_is_under_pressure;
  detector_class->should_store = kv_ema_backpressure_detector_should_store;
  detector_class->reset = kv_ema_backpressure_detector_reset;

  /* The ranges are wide on purpose: GInitable.init() checks them and names
   * the property in a GError, where a narrow GParamSpec range would only
   * print a warning and keep the default. */

  /**
   * KvEmaBackpressureDetector:high-water-s:
   *
   * Store latency, in seconds per MiB, above which the tier is under
   * pressure. Construct-only, finite and >= 0. The default 0.005
   * (≈ 200 MB/s) is the reference's LOCAL preset; see
   * [func@Kv.EmaBackpressureDetector.get_default_config].
   */
  properties[PROP_HIGH_WATER_S] =
    g_param_spec_double ("high-water-s", NULL, NULL,
                         -G_MAXDOUBLE, G_MAXDOUBLE, LOCAL_HIGH_WATER_S, construct_flags);

  /**
   * KvEmaBackpressureDetector:low-water-s:
   *
   * Store latency, in seconds per MiB, below which pressure clears.
   * Construct-only, >= 0 and not above
   * [property@Kv.EmaBackpressureDetector:high-water-s]. Default 0.001
   * (≈ 1 GB/s, the LOCAL preset).
   */
  properties[PROP_LOW_WATER_S] =
    g_param_spec_double ("low-water-s", NULL, NULL,
                         -G_MAXDOUBLE, G_MAXDOUBLE, LOCAL_LOW_WATER_S, construct_flags);

  /**
   * KvEmaBackpressureDetector:alpha:
   *
   * Weight of a new sample in the moving average, in (0, 1]; 1 follows
   * the last sample only. Construct-only, default 0.3.
   */
  properties[PROP_ALPHA] =
    g_param_spec_double ("alpha", NULL, NULL,
                         -G_MAXDOUBLE, G_MAXDOUBLE, DEFAULT_ALPHA, construct_flags);

  /**
   * KvEmaBackpressureDetector:warmup-completions:
   *
   * How many first completions only seed the average (with their mean)
   * before any decision is made. Construct-only, default 3.
   */
  properties[PROP_WARMUP_COMPLETIONS] =
    g_param_spec_uint ("warmup-completions", NULL, NULL,
                       0, G_MAXUINT, DEFAULT_WARMUP, construct_flags);

  /**
   * KvEmaBackpressureDetector:decay-half-life-s:
   *
   * While under pressure and idle, the average halves every this many
   * seconds (applied when pressure is asked about). 0 disables the decay.
   * Construct-only, default 2.
   */
  properties[PROP_DECAY_HALF_LIFE_S] =
    g_param_spec_double ("decay-half-life-s", NULL, NULL,
                         -G_MAXDOUBLE, G_MAXDOUBLE, DEFAULT_DECAY_HALF_LIFE_S, construct_flags);

  /**
   * KvEmaBackpressureDetector:cooldown-s:
   *
   * For this many seconds after pressure clears, every second store is
   * dropped. 0 disables the cooldown. Construct-only, default 1.
   */
  properties[PROP_COOLDOWN_S] =
    g_param_spec_double ("cooldown-s", NULL, NULL,
                         -G_MAXDOUBLE, G_MAXDOUBLE, DEFAULT_COOLDOWN_S, construct_flags);

  /**
   * KvEmaBackpressureDetector:store-latency-ema:
   *
   * The current average store latency in seconds per MiB (0 until warm-up
   * ends). Writable so tests and tools can force a state; writing it
   * changes nothing else. Owner thread only.
   */
  properties[PROP_STORE_LATENCY_EMA] =
    g_param_spec_double ("store-latency-ema", NULL, NULL,
                         0.0, G_MAXDOUBLE, 0.0,
                         G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_ema_backpressure_detector_init (KvEmaBackpressureDetector *self)
{
  self->high_water_s = LOCAL_HIGH_WATER_S;
  self->low_water_s = LOCAL_LOW_WATER_S;
  self->alpha = DEFAULT_ALPHA;
  self->warmup_completions = DEFAULT_WARMUP;
  self->decay_half_life_s = DEFAULT_DECAY_HALF_LIFE_S;
  self->cooldown_s = DEFAULT_COOLDOWN_S;
}

/**
 * kv_ema_backpressure_detector_new:
 * @high_water_s: latency in seconds per MiB above which pressure starts
 * @low_water_s: latency in seconds per MiB below which pressure clears
 * @alpha: weight of a new sample, in (0, 1] (0.3 in the reference)
 * @warmup_completions: samples that only seed the average (3)
 * @decay_half_life_s: idle half-life of the average under pressure; 0
 *   disables it (2.0)
 * @cooldown_s: seconds of 50 % admission after pressure clears; 0 disables
 *   it (1.0)
 * @policy: (nullable): the drop policy, or %NULL for a
 *   [class@Kv.ThrottledDropPolicy]
 * @clock: (nullable): the clock, or %NULL for [func@Kv.Clock.get_default]
 * @error: return location for an error
 *
 * Creates an EMA detector, checking every value first.
 *
 * Returns: (transfer full): a new detector, or %NULL with @error set
 *   (%KV_TIER_ERROR_INVALID_ARGUMENT, naming the property) when a value is
 *   out of range
 */
KvEmaBackpressureDetector *
kv_ema_backpressure_detector_new (gdouble                high_water_s,
                                  gdouble                low_water_s,
                                  gdouble                alpha,
                                  guint                  warmup_completions,
                                  gdouble                decay_half_life_s,
                                  gdouble                cooldown_s,
                                  KvBackpressurePolicy  *policy,
                                  KvClock               *clock,
                                  GError               **error)
{
  g_return_val_if_fail (policy == NULL || KV_IS_BACKPRESSURE_POLICY (policy), NULL);
  g_return_val_if_fail (clock == NULL || KV_IS_CLOCK (clock), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  /* Checked before the properties are set: GObject rejects a NaN with a
   * warning of its own. */
  if (!validate (high_water_s, low_water_s, alpha, decay_half_life_s, cooldown_s, error))
    return NULL;

  return g_initable_new (KV_TYPE_EMA_BACKPRESSURE_DETECTOR, NULL, error,
                         "high-water-s", high_water_s,
                         "low-water-s", low_water_s,
                         "alpha", alpha,
                         "warmup-completions", warmup_completions,
                         "decay-half-life-s", decay_half_life_s,
                         "cooldown-s", cooldown_s,
                         "policy", policy,
                         "clock", clock,
                         NULL);
}

/**
 * kv_ema_backpressure_detector_get_default_config:
 * @tier_type: the tier's type name (`fs`, `obj`, `p2p`...)
 * @locality: the tier's locality
 * @out_high_water_s: (out) (optional): the preset high-water mark
 * @out_low_water_s: (out) (optional): the preset low-water mark
 *
 * Gives the reference's water-mark presets for a tier: the NETWORK preset
 * (0.020 / 0.005 s/MiB) when @locality is %KV_LOCALITY_REMOTE or the tier
 * type is `obj`, else the LOCAL preset (0.005 / 0.001 s/MiB). `p2p` gets
 * LOCAL, as in the latest reference.
 */
void
kv_ema_backpressure_detector_get_default_config (const char *tier_type,
                                                 KvLocality  locality,
                                                 gdouble    *out_high_water_s,
                                                 gdouble    *out_low_water_s)
{
  gboolean network;

  g_return_if_fail (tier_type != NULL);

  network = locality == KV_LOCALITY_REMOTE || g_str_equal (tier_type, "obj");
  if (out_high_water_s != NULL)
    *out_high_water_s = network ? NETWORK_HIGH_WATER_S : LOCAL_HIGH_WATER_S;
  if (out_low_water_s != NULL)
    *out_low_water_s = network ? NETWORK_LOW_WATER_S : LOCAL_LOW_WATER_S;
}

/**
 * kv_ema_backpressure_detector_new_for_tier:
 * @tier_type: the tier's type name (`fs`, `obj`, `p2p`...)
 * @locality: the tier's locality
 * @error: return location for an error
 *
 * Creates an EMA detector with the water-mark presets of
 * [func@Kv.EmaBackpressureDetector.get_default_config] and the reference
 * defaults for everything else (default policy and clock).
 *
 * Returns: (transfer full): a new detector, or %NULL with @error set
 */
KvEmaBackpressureDetector *
kv_ema_backpressure_detector_new_for_tier (const char  *tier_type,
                                           KvLocality   locality,
                                           GError     **error)
{
  gdouble high, low;

  g_return_val_if_fail (tier_type != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  kv_ema_backpressure_detector_get_default_config (tier_type, locality, &high, &low);
  return kv_ema_backpressure_detector_new (high, low, DEFAULT_ALPHA, DEFAULT_WARMUP,
                                           DEFAULT_DECAY_HALF_LIFE_S, DEFAULT_COOLDOWN_S,
                                           NULL, NULL, error);
}

/**
 * kv_ema_backpressure_detector_get_high_water_s:
 * @self: a detector
 *
 * Gets [property@Kv.EmaBackpressureDetector:high-water-s].
 *
 * Returns: the high-water mark in seconds per MiB
 */
gdouble
kv_ema_backpressure_detector_get_high_water_s (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0.0);

  return self->high_water_s;
}

/**
 * kv_ema_backpressure_detector_get_low_water_s:
 * @self: a detector
 *
 * Gets [property@Kv.EmaBackpressureDetector:low-water-s].
 *
 * Returns: the low-water mark in seconds per MiB
 */
gdouble
kv_ema_backpressure_detector_get_low_water_s (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0.0);

  return self->low_water_s;
}

/**
 * kv_ema_backpressure_detector_get_alpha:
 * @self: a detector
 *
 * Gets [property@Kv.EmaBackpressureDetector:alpha].
 *
 * Returns: the weight of a new sample
 */
gdouble
kv_ema_backpressure_detector_get_alpha (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0.0);

  return self->alpha;
}

/**
 * kv_ema_backpressure_detector_get_warmup_completions:
 * @self: a detector
 *
 * Gets [property@Kv.EmaBackpressureDetector:warmup-completions].
 *
 * Returns: the number of warm-up samples
 */
guint
kv_ema_backpressure_detector_get_warmup_completions (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0);

  return self->warmup_completions;
}

/**
 * kv_ema_backpressure_detector_get_decay_half_life_s:
 * @self: a detector
 *
 * Gets [property@Kv.EmaBackpressureDetector:decay-half-life-s].
 *
 * Returns: the idle half-life in seconds
 */
gdouble
kv_ema_backpressure_detector_get_decay_half_life_s (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0.0);

  return self->decay_half_life_s;
}

/**
 * kv_ema_backpressure_detector_get_cooldown_s:
 * @self: a detector
 *
 * Gets [property@Kv.EmaBackpressureDetector:cooldown-s].
 *
 * Returns: the cooldown in seconds
 */
gdouble
kv_ema_backpressure_detector_get_cooldown_s (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0.0);

  return self->cooldown_s;
}

/**
 * kv_ema_backpressure_detector_get_store_latency_ema:
 * @self: a detector
 *
 * Gets [property@Kv.EmaBackpressureDetector:store-latency-ema] as it is
 * now, without applying the idle decay.
 *
 * Owner thread only.
 *
 * Returns: the average store latency in seconds per MiB
 */
gdouble
kv_ema_backpressure_detector_get_store_latency_ema (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0.0);

  return self->ema;
}

/**
 * kv_ema_backpressure_detector_set_store_latency_ema:
 * @self: a detector
 * @ema: the new average, in seconds per MiB, >= 0
 *
 * Sets [property@Kv.EmaBackpressureDetector:store-latency-ema]. Nothing
 * else changes: the pressure state follows on the next sample or decay.
 *
 * Owner thread only.
 */
void
kv_ema_backpressure_detector_set_store_latency_ema (KvEmaBackpressureDetector *self,
                                                    gdouble                    ema)
{
  g_return_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self));
  g_return_if_fail (ema >= 0.0);

  if (self->ema == ema)
    return;

  self->ema = ema;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_STORE_LATENCY_EMA]);
}

/**
 * kv_ema_backpressure_detector_get_n_completions:
 * @self: a detector
 *
 * Counts the completions fed since construction or the last reset,
 * warm-up included (saturating at %G_MAXUINT).
 *
 * Returns: the number of completions
 */
guint
kv_ema_backpressure_detector_get_n_completions (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), 0);

  return (guint) MIN (self->completions, G_MAXUINT);
}

/**
 * kv_ema_backpressure_detector_is_healthy:
 * @self: a detector
 *
 * Whether the detector is on its fast path: not under pressure and at least
 * ten consecutive completions below the low-water mark. Healthy detectors
 * admit every store without asking the policy.
 *
 * Owner thread only.
 *
 * Returns: %TRUE when healthy
 */
gboolean
kv_ema_backpressure_detector_is_healthy (KvEmaBackpressureDetector *self)
{
  g_return_val_if_fail (KV_IS_EMA_BACKPRESSURE_DETECTOR (self), FALSE);

  return !self->under_pressure && self->healthy_streak >= HEALTHY_THRESHOLD;
}
