/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kvtier.h"

#define MIB (1u << 20)

/* A policy that counts how often it is asked and refuses everything, to
 * see when the detector bypasses its policy. */
#define TEST_TYPE_REFUSING_POLICY (test_refusing_policy_get_type ())
G_DECLARE_FINAL_TYPE (TestRefusingPolicy, test_refusing_policy, TEST, REFUSING_POLICY, KvBackpressurePolicy)

struct _TestRefusingPolicy
{
  KvBackpressurePolicy parent_instance;
  guint n_asked;
};

G_DEFINE_FINAL_TYPE (TestRefusingPolicy, test_refusing_policy, KV_TYPE_BACKPRESSURE_POLICY)

static gboolean
test_refusing_policy_should_store (KvBackpressurePolicy   *policy,
                                   KvBackpressureDetector *detector)
{
  TEST_REFUSING_POLICY (policy)->n_asked += 1;
  return FALSE;
}

static void
test_refusing_policy_class_init (TestRefusingPolicyClass *klass)
{
  KV_BACKPRESSURE_POLICY_CLASS (klass)->should_store = test_refusing_policy_should_store;
}

static void
test_refusing_policy_init (TestRefusingPolicy *self)
{
}

/* Detector with the LOCAL preset (high 0.005, low 0.001 s/MiB), default
 * alpha 0.3, warm-up 3, half-life 2 s, cooldown 1 s, on @clock. */
static KvEmaBackpressureDetector *
new_detector (KvClock              *clock,
              KvBackpressurePolicy *policy)
{
  g_autoptr(GError) error = NULL;
  KvEmaBackpressureDetector *detector;

  detector = kv_ema_backpressure_detector_new (0.005, 0.001, 0.3, 3, 2.0, 1.0,
                                               policy, clock, &error);
  g_assert_no_error (error);
  g_assert_nonnull (detector);
  return detector;
}

/* Feeds @n completions of @s_per_mib seconds per MiB (1 MiB each). */
static void
feed (KvEmaBackpressureDetector *detector,
      gdouble                    s_per_mib,
      guint                      n)
{
  for (guint i = 0; i < n; i++)
    kv_backpressure_detector_on_store_completed (KV_BACKPRESSURE_DETECTOR (detector), s_per_mib, MIB);
}

static gdouble
ema_of (KvEmaBackpressureDetector *detector)
{
  return kv_ema_backpressure_detector_get_store_latency_ema (detector);
}

static gboolean
under (KvEmaBackpressureDetector *detector)
{
  return kv_backpressure_detector_is_under_pressure (KV_BACKPRESSURE_DETECTOR (detector));
}

static gboolean
should_store (KvEmaBackpressureDetector *detector,
              guint                      n_chunks)
{
  return kv_backpressure_detector_should_store (KV_BACKPRESSURE_DETECTOR (detector), n_chunks);
}

/* Puts @detector under pressure (3 warm-up samples plus one, all at
 * 0.010 s/MiB = 2× high), then forces its average to @ema. */
static void
make_under_pressure (KvEmaBackpressureDetector *detector,
                     gdouble                    ema)
{
  feed (detector, 0.010, 4);
  g_assert_true (under (detector));
  kv_ema_backpressure_detector_set_store_latency_ema (detector, ema);
}

static void
test_warmup_seeds_mean (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);

  feed (detector, 0.002, 1);
  g_assert_cmpfloat (ema_of (detector), ==, 0.0);
  feed (detector, 0.020, 1);
  g_assert_cmpfloat (ema_of (detector), ==, 0.0);
  /* Even a warm-up sample far above high changes no state. */
  g_assert_false (under (detector));
  feed (detector, 0.008, 1);
  g_assert_cmpfloat_with_epsilon (ema_of (detector), (0.002 + 0.020 + 0.008) / 3, 1e-15);
  /* The seed alone does not start pressure (0.010 > high) until a real
   * sample is taken. */
  g_assert_false (under (detector));
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (detector), ==, 3);
}

static void
test_alpha_update (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);
  gdouble expected;

  feed (detector, 0.002, 3);
  g_assert_cmpfloat_with_epsilon (ema_of (detector), 0.002, 1e-15);

  feed (detector, 0.004, 1);
  expected = 0.3 * 0.004 + 0.7 * 0.002;
  g_assert_cmpfloat_with_epsilon (ema_of (detector), expected, 1e-15);

  feed (detector, 0.0, 1);
  expected = 0.7 * expected;
  g_assert_cmpfloat_with_epsilon (ema_of (detector), expected, 1e-15);
}

static void
test_normalised_per_mib (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);
  KvBackpressureDetector *base = KV_BACKPRESSURE_DETECTOR (detector);

  /* 8 ms for 4 MiB, 1 ms for 512 KiB, 3 ms for 1 MiB: 0.002 s/MiB each. */
  kv_backpressure_detector_on_store_completed (base, 0.008, 4 * MIB);
  kv_backpressure_detector_on_store_completed (base, 0.001, MIB / 2);
  kv_backpressure_detector_on_store_completed (base, 0.003, MIB);
  g_assert_cmpfloat_with_epsilon (ema_of (detector), (0.002 + 0.002 + 0.003) / 3, 1e-15);

  /* No bytes, no sample. */
  kv_backpressure_detector_on_store_completed (base, 5.0, 0);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (detector), ==, 3);
}

static void
test_update_uses_clock (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (1000000);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);
  KvBackpressureDetector *base = KV_BACKPRESSURE_DETECTOR (detector);

  /* 6 ms for 2 MiB = 0.003 s/MiB, measured from the submit time. */
  kv_clock_advance (clock, 6000);
  kv_backpressure_detector_update (base, 1000000, 2 * MIB);
  kv_backpressure_detector_update (base, 1000000, 2 * MIB);
  /* Zero bytes are ignored. */
  kv_backpressure_detector_update (base, 0, 0);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (detector), ==, 2);
  kv_backpressure_detector_update (base, 1000000, 2 * MIB);
  g_assert_cmpfloat_with_epsilon (ema_of (detector), 0.003, 1e-12);
  g_assert_true (kv_backpressure_detector_get_clock (base) == clock);
}

static void
test_activation_and_hysteresis (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);

  feed (detector, 0.004, 3);
  g_assert_false (under (detector));

  /* 0.3 × 0.008 + 0.7 × 0.004 = 0.0052 > high: pressure. */
  feed (detector, 0.008, 1);
  g_assert_cmpfloat_with_epsilon (ema_of (detector), 0.0052, 1e-15);
  g_assert_true (under (detector));

  /* Between low and high the state is kept. */
  feed (detector, 0.002, 1);   /* 0.00424 */
  g_assert_cmpfloat (ema_of (detector), <, 0.005);
  g_assert_cmpfloat (ema_of (detector), >, 0.001);
  g_assert_true (under (detector));

  /* Below low: clears. */
  kv_ema_backpressure_detector_set_store_latency_ema (detector, 0.0012);
  feed (detector, 0.0005, 1);  /* 0.3 × 0.0005 + 0.7 × 0.0012 = 0.00099 */
  g_assert_false (under (detector));

  /* Back in the band from below: still not under pressure. */
  feed (detector, 0.004, 1);
  g_assert_cmpfloat (ema_of (detector), >, 0.001);
  g_assert_cmpfloat (ema_of (detector), <, 0.005);
  g_assert_false (under (detector));
}

static void
test_drop_policy_counts (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvDropStorePolicy) policy = kv_drop_store_policy_new ();
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, KV_BACKPRESSURE_POLICY (policy));
  guint64 stores = 99, chunks = 99;

  g_assert_true (should_store (detector, 4));
  make_under_pressure (detector, 0.0075);   /* 1.5 × high */

  g_assert_false (should_store (detector, 1));
  kv_backpressure_policy_pop_stores_dropped (KV_BACKPRESSURE_POLICY (policy), &stores, &chunks);
  g_assert_cmpuint (stores, ==, 1);
  g_assert_cmpuint (chunks, ==, 1);

  /* Popping zeroes; the reference's (1,1) -> (2,3) sequence. */
  g_assert_false (should_store (detector, 1));
  g_assert_false (should_store (detector, 2));
  kv_backpressure_policy_pop_stores_dropped (KV_BACKPRESSURE_POLICY (policy), &stores, &chunks);
  g_assert_cmpuint (stores, ==, 2);
  g_assert_cmpuint (chunks, ==, 3);
  kv_backpressure_policy_pop_stores_dropped (KV_BACKPRESSURE_POLICY (policy), &stores, &chunks);
  g_assert_cmpuint (stores, ==, 0);
  g_assert_cmpuint (chunks, ==, 0);
}

static void
test_drop_policy_drops_all (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvDropStorePolicy) policy = kv_drop_store_policy_new ();
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, KV_BACKPRESSURE_POLICY (policy));
  guint64 stores, chunks;
  guint admitted = 0;

  make_under_pressure (detector, 0.0075);
  for (guint i = 0; i < 100; i++)
    admitted += should_store (detector, 3);
  g_assert_cmpuint (admitted, ==, 0);
  kv_backpressure_policy_pop_stores_dropped (KV_BACKPRESSURE_POLICY (policy), &stores, &chunks);
  g_assert_cmpuint (stores, ==, 100);
  g_assert_cmpuint (chunks, ==, 300);
}

static void
test_resume_after_clear (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvDropStorePolicy) policy = kv_drop_store_policy_new ();
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, KV_BACKPRESSURE_POLICY (policy));

  make_under_pressure (detector, 0.010);
  g_assert_false (should_store (detector, 1));

  /* Fast completions (from stores admitted earlier) bring it down. */
  feed (detector, 0.0001, 10);
  g_assert_false (under (detector));
  /* Past the cooldown, every store is admitted again. */
  kv_clock_advance (clock, 1000001);
  for (guint i = 0; i < 10; i++)
    g_assert_true (should_store (detector, 1));
}

static void
test_idle_decay (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);

  make_under_pressure (detector, 0.008);

  /* 2 s = one half-life: the average halves and stays above low. */
  kv_clock_advance (clock, 2000000);
  g_assert_true (under (detector));
  g_assert_cmpfloat_with_epsilon (ema_of (detector), 0.004, 1e-15);

  /* Asking again without time passing changes nothing. */
  g_assert_true (under (detector));
  g_assert_cmpfloat_with_epsilon (ema_of (detector), 0.004, 1e-15);

  /* 0.004 × 0.5^(3.9/2) ≈ 0.00104: still under pressure... */
  kv_clock_advance (clock, 3900000);
  g_assert_true (under (detector));
  /* ...and 4.1 s in total (0.5^2.05 × 0.004 ≈ 0.00097 < low) clears it. */
  kv_clock_advance (clock, 200000);
  g_assert_false (under (detector));
  g_assert_cmpfloat_with_epsilon (ema_of (detector), 0.004 * pow (0.5, 4.1 / 2.0), 1e-12);
}

static void
test_idle_decay_clears_in_one_step (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);

  make_under_pressure (detector, 0.004);
  kv_clock_advance (clock, 4100000);
  g_assert_false (under (detector));
}

static void
test_no_decay_before_warmup (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);

  feed (detector, 0.5, 2);
  kv_ema_backpressure_detector_set_store_latency_ema (detector, 0.02);
  kv_clock_advance (clock, 10000000);
  g_assert_false (under (detector));
  g_assert_cmpfloat (ema_of (detector), ==, 0.02);
}

static void
test_no_decay_in_store_completed (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);

  make_under_pressure (detector, 0.010);
  /* 10 s idle would decay 0.010 to 0.0003, but a completion only applies
   * the α update to the undecayed value. */
  kv_clock_advance (clock, 10000000);
  feed (detector, 0.010, 1);
  g_assert_cmpfloat_with_epsilon (ema_of (detector), 0.010, 1e-15);
  g_assert_true (under (detector));
}

static void
test_throttled_ramps (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);
  KvBackpressurePolicy *policy = kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (detector));
  KvThrottledDropPolicy *throttled;
  gdouble previous = 0.0;
  guint admitted;

  /* The default policy: throttled, ramp factor 2. */
  g_assert_true (KV_IS_THROTTLED_DROP_POLICY (policy));
  throttled = KV_THROTTLED_DROP_POLICY (policy);
  g_assert_cmpfloat (kv_throttled_drop_policy_get_ramp_factor (throttled), ==, 2.0);

  make_under_pressure (detector, 0.005);
  /* At high: no drop at all, though under pressure. */
  admitted = 0;
  for (guint i = 0; i < 100; i++)
    admitted += should_store (detector, 1);
  g_assert_cmpuint (admitted, ==, 100);
  kv_ema_backpressure_detector_set_store_latency_ema (detector, 0.004);
  g_assert_cmpfloat (kv_throttled_drop_policy_get_drop_rate (throttled, KV_BACKPRESSURE_DETECTOR (detector)), ==, 0.0);

  /* 2× high: half. */
  kv_ema_backpressure_detector_set_store_latency_ema (detector, 0.010);
  admitted = 0;
  for (guint i = 0; i < 100; i++)
    admitted += should_store (detector, 1);
  g_assert_cmpuint (admitted, ==, 50);

  /* 4× high: everything dropped. */
  kv_ema_backpressure_detector_set_store_latency_ema (detector, 0.020);
  admitted = 0;
  for (guint i = 0; i < 100; i++)
    admitted += should_store (detector, 1);
  g_assert_cmpuint (admitted, ==, 0);

  /* The rate never falls as the latency rises. */
  for (gdouble x = 0.0; x <= 5.0; x += 0.05)
    {
      gdouble rate;

      kv_ema_backpressure_detector_set_store_latency_ema (detector, 0.005 * x);
      rate = kv_throttled_drop_policy_get_drop_rate (throttled, KV_BACKPRESSURE_DETECTOR (detector));
      g_assert_cmpfloat (rate, >=, previous);
      g_assert_cmpfloat (rate, <=, 1.0);
      previous = rate;
    }
  g_assert_cmpfloat (previous, ==, 1.0);
}

/* The reference drops one store in round(1/rate), so above 50 % it drops
 * too few (75 % -> 50 %). kvtier must hit the target exactly. */
static void
check_accurate_rate (gdouble rate,
                     guint   expected_drops_per_1000)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = NULL;
  guint dropped = 0, dropped_in_window = 0;

  /* high = 1 s/MiB so the ema for a rate is exact: 1 + 2 × rate. */
  detector = kv_ema_backpressure_detector_new (1.0, 0.5, 0.3, 3, 2.0, 1.0, NULL, clock, &error);
  g_assert_no_error (error);
  feed (detector, 2.0, 4);
  g_assert_true (under (detector));
  kv_ema_backpressure_detector_set_store_latency_ema (detector, 1.0 + 2.0 * rate);

  for (guint i = 0; i < 1000; i++)
    {
      gboolean drop = !should_store (detector, 1);

      dropped += drop;
      dropped_in_window += drop;
      /* Spread evenly: every run of 20 calls drops 20 × rate. */
      if (i % 20 == 19)
        {
          g_assert_cmpuint (dropped_in_window, ==, (guint) (20 * rate + 0.5));
          dropped_in_window = 0;
        }
    }
  g_assert_cmpuint (dropped, ==, expected_drops_per_1000);
}

static void
test_throttled_accurate_10 (void)
{
  check_accurate_rate (0.10, 100);
}

static void
test_throttled_accurate_50 (void)
{
  check_accurate_rate (0.50, 500);
}

static void
test_throttled_accurate_75 (void)
{
  check_accurate_rate (0.75, 750);
}

static void
test_throttled_accurate_90 (void)
{
  check_accurate_rate (0.90, 900);
}

static void
test_throttled_zero_high_water (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvEmaBackpressureDetector) zero_high = NULL;

  /* A high-water mark of zero: refuse while under pressure. */
  zero_high = kv_ema_backpressure_detector_new (0.0, 0.0, 0.3, 0, 0.0, 0.0, NULL, clock, &error);
  g_assert_no_error (error);
  feed (zero_high, 0.001, 1);
  g_assert_true (under (zero_high));
  g_assert_false (should_store (zero_high, 1));
  g_assert_cmpfloat (kv_throttled_drop_policy_get_drop_rate (KV_THROTTLED_DROP_POLICY (kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (zero_high))),
                                                             KV_BACKPRESSURE_DETECTOR (zero_high)),
                     ==, 1.0);
}

static void
test_healthy_fast_path (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(TestRefusingPolicy) policy = g_object_new (TEST_TYPE_REFUSING_POLICY, NULL);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, KV_BACKPRESSURE_POLICY (policy));

  /* 3 warm-up + 9 fast completions: not healthy yet, the policy decides. */
  feed (detector, 0.0001, 12);
  g_assert_false (kv_ema_backpressure_detector_is_healthy (detector));
  g_assert_false (should_store (detector, 1));
  g_assert_cmpuint (policy->n_asked, ==, 1);

  /* The 10th fast completion after warm-up: healthy, policy bypassed. */
  feed (detector, 0.0001, 1);
  g_assert_true (kv_ema_backpressure_detector_is_healthy (detector));
  g_assert_true (should_store (detector, 1));
  g_assert_cmpuint (policy->n_asked, ==, 1);

  /* One slow completion (into the band) ends the streak. */
  feed (detector, 0.010, 1);
  g_assert_false (kv_ema_backpressure_detector_is_healthy (detector));
  g_assert_false (should_store (detector, 1));
  g_assert_cmpuint (policy->n_asked, ==, 2);
}

static void
test_cooldown_admits_half (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);
  KvBackpressurePolicy *policy = kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (detector));
  guint64 stores, chunks;
  guint admitted = 0;

  make_under_pressure (detector, 0.0011);
  kv_backpressure_policy_pop_stores_dropped (policy, NULL, NULL);
  feed (detector, 0.0001, 1);   /* 0.3 × 0.0001 + 0.7 × 0.0011 = 0.0008: clears */
  g_assert_false (under (detector));

  kv_clock_advance (clock, 500000);
  for (guint i = 0; i < 10; i++)
    admitted += should_store (detector, 2);
  g_assert_cmpuint (admitted, ==, 5);
  kv_backpressure_policy_pop_stores_dropped (policy, &stores, &chunks);
  g_assert_cmpuint (stores, ==, 5);
  g_assert_cmpuint (chunks, ==, 10);

  /* After the cooldown everything is admitted. */
  kv_clock_advance (clock, 500000);
  for (guint i = 0; i < 10; i++)
    g_assert_true (should_store (detector, 2));
}

static void
test_cooldown_after_decay (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);
  guint admitted = 0;

  /* Clearing by idle decay also starts a cooldown. */
  make_under_pressure (detector, 0.004);
  kv_clock_advance (clock, 4100000);
  g_assert_false (under (detector));
  for (guint i = 0; i < 10; i++)
    admitted += should_store (detector, 1);
  g_assert_cmpuint (admitted, ==, 5);
}

static void
test_presets (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvEmaBackpressureDetector) fs = NULL;
  g_autoptr(KvEmaBackpressureDetector) obj = NULL;
  g_autoptr(KvEmaBackpressureDetector) p2p = NULL;
  g_autoptr(KvEmaBackpressureDetector) remote_fs = NULL;
  gdouble high, low;

  fs = kv_ema_backpressure_detector_new_for_tier ("fs", KV_LOCALITY_UNSPECIFIED, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (fs), ==, 0.005);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (fs), ==, 0.001);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_alpha (fs), ==, 0.3);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_warmup_completions (fs), ==, 3);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_decay_half_life_s (fs), ==, 2.0);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_cooldown_s (fs), ==, 1.0);
  g_assert_true (kv_backpressure_detector_get_clock (KV_BACKPRESSURE_DETECTOR (fs)) == kv_clock_get_default ());

  obj = kv_ema_backpressure_detector_new_for_tier ("obj", KV_LOCALITY_UNSPECIFIED, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (obj), ==, 0.020);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (obj), ==, 0.005);

  p2p = kv_ema_backpressure_detector_new_for_tier ("p2p", KV_LOCALITY_UNSPECIFIED, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (p2p), ==, 0.005);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (p2p), ==, 0.001);

  remote_fs = kv_ema_backpressure_detector_new_for_tier ("fs", KV_LOCALITY_REMOTE, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_high_water_s (remote_fs), ==, 0.020);
  g_assert_cmpfloat (kv_ema_backpressure_detector_get_low_water_s (remote_fs), ==, 0.005);

  kv_ema_backpressure_detector_get_default_config ("fs", KV_LOCALITY_LOCAL, &high, &low);
  g_assert_cmpfloat (high, ==, 0.005);
  g_assert_cmpfloat (low, ==, 0.001);
}

static void
check_invalid (gdouble     high,
               gdouble     low,
               gdouble     alpha,
               gdouble     half_life,
               gdouble     cooldown,
               const char *property)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvEmaBackpressureDetector) detector = NULL;

  detector = kv_ema_backpressure_detector_new (high, low, alpha, 3, half_life, cooldown,
                                               NULL, NULL, &error);
  g_assert_null (detector);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, property));
}

static void
test_invalid_values (void)
{
  g_autoptr(GError) error = NULL;
  GObject *object = NULL;

  check_invalid (0.005, 0.001, 0.0, 2.0, 1.0, "alpha");
  check_invalid (0.005, 0.001, 1.5, 2.0, 1.0, "alpha");
  check_invalid (0.005, 0.001, NAN, 2.0, 1.0, "alpha");
  check_invalid (0.001, 0.005, 0.3, 2.0, 1.0, "low-water-s");
  check_invalid (-0.005, -0.006, 0.3, 2.0, 1.0, "high-water-s");
  check_invalid (0.005, -0.001, 0.3, 2.0, 1.0, "low-water-s");
  check_invalid (0.005, 0.001, 0.3, -2.0, 1.0, "decay-half-life-s");
  check_invalid (0.005, 0.001, 0.3, 2.0, -1.0, "cooldown-s");

  /* alpha = 1 and low = high are valid. */
  object = g_initable_new (KV_TYPE_EMA_BACKPRESSURE_DETECTOR, NULL, &error,
                           "alpha", 1.0, "high-water-s", 0.01, "low-water-s", 0.01, NULL);
  g_assert_no_error (error);
  g_assert_nonnull (object);
  g_clear_object (&object);

  /* Through GInitable and properties, as bindings and the config do. */
  object = g_initable_new (KV_TYPE_EMA_BACKPRESSURE_DETECTOR, NULL, &error,
                           "low-water-s", 0.5, NULL);
  g_assert_null (object);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "low-water-s"));
}

static void
test_reset (void)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (0);
  g_autoptr(KvEmaBackpressureDetector) detector = new_detector (clock, NULL);
  KvBackpressurePolicy *policy = kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (detector));
  guint64 stores = 1, chunks = 1;
  guint dropped = 0;

  make_under_pressure (detector, 0.010);   /* rate 0.5 */
  g_assert_true (should_store (detector, 1));   /* credit 0.5 */
  g_assert_false (should_store (detector, 1));
  g_assert_true (should_store (detector, 1));   /* credit 0.5 again */

  kv_backpressure_detector_reset (KV_BACKPRESSURE_DETECTOR (detector));
  g_assert_cmpfloat (ema_of (detector), ==, 0.0);
  g_assert_false (under (detector));
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (detector), ==, 0);
  kv_backpressure_policy_pop_stores_dropped (policy, &stores, &chunks);
  g_assert_cmpuint (stores, ==, 0);
  g_assert_cmpuint (chunks, ==, 0);

  /* Warm-up starts over, and the throttle's credit was zeroed: at 50 % the
   * first store goes through again. */
  feed (detector, 0.001, 2);
  g_assert_cmpfloat (ema_of (detector), ==, 0.0);
  make_under_pressure (detector, 0.010);
  dropped += !should_store (detector, 1);
  g_assert_cmpuint (dropped, ==, 0);
  g_assert_false (should_store (detector, 1));
}

static void
test_default_policy_and_clock (void)
{
  g_autoptr(KvEmaBackpressureDetector) detector = g_initable_new (KV_TYPE_EMA_BACKPRESSURE_DETECTOR,
                                                                  NULL, NULL, NULL);
  KvBackpressureDetector *base = KV_BACKPRESSURE_DETECTOR (detector);
  g_autoptr(KvBackpressurePolicy) policy = NULL;
  gdouble high;

  g_assert_true (KV_IS_THROTTLED_DROP_POLICY (kv_backpressure_detector_get_policy (base)));
  g_assert_true (kv_backpressure_detector_get_clock (base) == kv_clock_get_default ());

  g_object_get (detector, "high-water-s", &high, "policy", &policy, NULL);
  g_assert_cmpfloat (high, ==, 0.005);
  g_assert_true (policy == kv_backpressure_detector_get_policy (base));

  g_object_set (detector, "store-latency-ema", 0.25, NULL);
  g_assert_cmpfloat (ema_of (detector), ==, 0.25);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/backpressure/ema/warmup-seeds-mean", test_warmup_seeds_mean);
  g_test_add_func ("/kvtier/backpressure/ema/alpha-update", test_alpha_update);
  g_test_add_func ("/kvtier/backpressure/ema/normalised-per-mib", test_normalised_per_mib);
  g_test_add_func ("/kvtier/backpressure/ema/update-uses-clock", test_update_uses_clock);
  g_test_add_func ("/kvtier/backpressure/ema/activation-and-hysteresis", test_activation_and_hysteresis);
  g_test_add_func ("/kvtier/backpressure/ema/idle-decay", test_idle_decay);
  g_test_add_func ("/kvtier/backpressure/ema/idle-decay-clears", test_idle_decay_clears_in_one_step);
  g_test_add_func ("/kvtier/backpressure/ema/no-decay-before-warmup", test_no_decay_before_warmup);
  g_test_add_func ("/kvtier/backpressure/ema/no-decay-in-store-completed", test_no_decay_in_store_completed);
  g_test_add_func ("/kvtier/backpressure/ema/healthy-fast-path", test_healthy_fast_path);
  g_test_add_func ("/kvtier/backpressure/ema/cooldown-admits-half", test_cooldown_admits_half);
  g_test_add_func ("/kvtier/backpressure/ema/cooldown-after-decay", test_cooldown_after_decay);
  g_test_add_func ("/kvtier/backpressure/ema/presets", test_presets);
  g_test_add_func ("/kvtier/backpressure/ema/invalid-values", test_invalid_values);
  g_test_add_func ("/kvtier/backpressure/ema/reset", test_reset);
  g_test_add_func ("/kvtier/backpressure/ema/defaults", test_default_policy_and_clock);
  g_test_add_func ("/kvtier/backpressure/drop/counts", test_drop_policy_counts);
  g_test_add_func ("/kvtier/backpressure/drop/drops-all", test_drop_policy_drops_all);
  g_test_add_func ("/kvtier/backpressure/drop/resume-after-clear", test_resume_after_clear);
  g_test_add_func ("/kvtier/backpressure/throttled/ramps", test_throttled_ramps);
  g_test_add_func ("/kvtier/backpressure/throttled/accurate-10", test_throttled_accurate_10);
  g_test_add_func ("/kvtier/backpressure/throttled/accurate-50", test_throttled_accurate_50);
  g_test_add_func ("/kvtier/backpressure/throttled/accurate-75", test_throttled_accurate_75);
  g_test_add_func ("/kvtier/backpressure/throttled/accurate-90", test_throttled_accurate_90);
  g_test_add_func ("/kvtier/backpressure/throttled/zero-high-water", test_throttled_zero_high_water);

  return g_test_run ();
}
