/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include "kvtier.h"
#include "kv-fault-tier.h"

/* The operator's messages of circuit breakers, read from the stderr of
 * the process that caused them (each test runs its scenario in a
 * subprocess): one line per opening and per closing, naming what the
 * breaker guards and the cause, at most one opening every 30 s for a
 * breaker that flaps, and lines that add up to the counters. */

#define SLOT_SIZE 4096

/* A breaker that flaps within 30 s is logged once, and the next line
 * says how many openings it stands for. Manual clock. */
static void
test_breaker_flapping (void)
{
  g_autoptr(KvClock) clock = NULL;
  g_autoptr(KvCircuitBreaker) breaker = NULL;

  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr (
        "*test thing: circuit breaker opened after 1 failures in a row (last: boom 1); "
        "work is refused for 100 ms, then retried\n"
        "*test thing: circuit breaker closed after 0.1 s: a request succeeded\n"
        "*test thing: circuit breaker opened (last: boom 3); 2 openings in all since the last "
        "message (it flaps); work is refused for 100 ms, then retried\n"
        "*test thing: circuit breaker closed after 0.1 s: a probe succeeded\n");
      g_test_trap_assert_stderr_unmatched ("*boom 2*");
      /* two lines for three openings, two closings */
      g_test_trap_assert_stderr_unmatched ("*opened*opened*opened*");
      g_test_trap_assert_stderr_unmatched ("*closed*closed*closed*");
      return;
    }

  clock = kv_clock_new_manual (0);
  breaker = kv_circuit_breaker_new (1, 100, clock);
  kv_circuit_breaker_set_name (breaker, "test thing");

  kv_circuit_breaker_record_error (breaker, "boom 1");            /* logged */
  kv_clock_advance (clock, 100 * 1000);
  g_assert_true (kv_circuit_breaker_half_open (breaker));
  kv_circuit_breaker_record_success (breaker);                    /* logged */

  kv_circuit_breaker_record_error (breaker, "boom 2");            /* within 30 s: left out */
  kv_clock_advance (clock, 100 * 1000);
  g_assert_true (kv_circuit_breaker_half_open (breaker));
  kv_circuit_breaker_record_success (breaker);                    /* its closing too */
  kv_circuit_breaker_record_error (breaker, "boom 3");            /* left out */
  g_assert_cmpuint (kv_circuit_breaker_get_n_trips (breaker), ==, 3);

  /* still open 30 s after the first line: the next failure logs it */
  kv_clock_advance (clock, 30 * G_USEC_PER_SEC);
  g_assert_true (kv_circuit_breaker_start_probe (breaker));
  kv_circuit_breaker_end_probe (breaker, FALSE);                  /* logged, late */
  kv_clock_advance (clock, 100 * 1000);
  g_assert_true (kv_circuit_breaker_start_probe (breaker));
  kv_circuit_breaker_end_probe (breaker, TRUE);                   /* logged */
  g_assert_cmpuint (kv_circuit_breaker_get_n_trips (breaker), ==, 3);
}

/* GPU → primary store of @key: the manager cascades it to every tier. */
static void
store_key (KvTieringManager *manager,
           KvKey            *key,
           KvRequest        *request)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  guint n = 0;

  prepared = kv_tiering_manager_prepare_store (manager, &key, 1, request, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
  g_assert_cmpuint (n, ==, 1);
  kv_tiering_manager_complete_store (manager, to_store, n, request, TRUE);
}

/* Waits for the tier's jobs and lets the manager take their results. */
static void
settle (KvTieringManager *manager,
        KvSecondaryTier  *tier)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_secondary_tier_drain_jobs (tier, &error));
  g_assert_no_error (error);
  kv_tiering_manager_on_schedule_end (manager, end);
}

static KvKey *
make_key (guint i)
{
  guint8 hash[32] = { 0 };

  hash[0] = (guint8) i;
  hash[1] = 0x5a;
  return kv_key_new (hash, sizeof hash, 0);
}

static gdouble
counter (KvStats    *stats,
         const char *name)
{
  const char *labels[] = { "1:fault", NULL };
  gdouble value = -1;

  g_assert_true (kv_stats_lookup (stats, name, labels, &value));
  return value;
}

/* A tier in a manager whose jobs fail: its breaker's opening names the
 * tier by its label and the cause; its closing after the interval, when
 * a job succeeds, is logged too; the counter agrees. */
static void
test_fault_tier (void)
{
  g_autoptr(KvClock) clock = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(KvFaultTier) fault = NULL;
  g_autoptr(KvRequest) request = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *label = NULL;
  KvSecondaryTier *tier;
  KvCircuitBreaker *breaker;

  if (!g_test_subprocess ())
    {
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
      g_test_trap_assert_passed ();
      g_test_trap_assert_stderr (
        "*Kvtier-Message: *tier 1:fault: circuit breaker opened after 2 failures in a row "
        "(last: KV_FAULT_FAIL); work is refused for 1000 ms, then "
        "retried\n"
        "*Kvtier-Message: *tier 1:fault: circuit breaker closed after 1.0 s: a request succeeded\n");
      /* once each */
      g_test_trap_assert_stderr_unmatched ("*circuit breaker opened*circuit breaker opened*");
      g_test_trap_assert_stderr_unmatched ("*circuit breaker closed*circuit breaker closed*");
      return;
    }

  clock = kv_clock_new_manual (G_USEC_PER_SEC);
  buffer = kv_host_buffer_new (16, SLOT_SIZE, &error);
  g_assert_no_error (error);
  primary = kv_primary_tier_new (buffer, NULL, FALSE);
  manager = g_object_new (KV_TYPE_TIERING_MANAGER, "primary", primary, "clock", clock, NULL);
  fault = g_object_new (KV_TYPE_FAULT_TIER, "primary", buffer, "tier-type", "fault",
                        "clock", clock, "breaker-threshold", 2, "breaker-open-ms", 1000, NULL);
  tier = KV_SECONDARY_TIER (fault);
  breaker = kv_secondary_tier_get_circuit_breaker (tier);
  g_assert_true (kv_tiering_manager_add_tier (manager, tier, &error));
  g_assert_no_error (error);
  /* the manager names the tier as vLLM's labels do */
  label = kv_secondary_tier_dup_metric_label (tier);
  g_assert_cmpstr (label, ==, "1:fault");

  request = kv_request_new ("r", NULL);
  kv_tiering_manager_on_new_request (manager, request);
  kv_fault_tier_set_store_fault (fault, KV_FAULT_FAIL);
  for (guint i = 0; i < 2; i++)
    {
      g_autoptr(KvKey) key = make_key (i);

      store_key (manager, key, request);
      settle (manager, tier);
    }
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);
  stats = kv_tiering_manager_get_stats (manager);
  g_assert_cmpfloat (counter (stats, "kvtier_tier_breaker_openings"), ==, 1);
  g_assert_cmpfloat (counter (stats, "kvtier_tier_breaker_open"), ==, 1);
  g_clear_object (&stats);

  /* the interval passes; the next store reaches the tier and succeeds */
  kv_fault_tier_set_store_fault (fault, KV_FAULT_NONE);
  kv_clock_advance (clock, 1000 * 1000);
  {
    g_autoptr(KvKey) key = make_key (7);

    g_assert_cmpint (kv_tiering_manager_lookup (manager, key, request), ==, KV_LOOKUP_RESULT_MISS);
    store_key (manager, key, request);
    settle (manager, tier);
  }
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_CLOSED);
  stats = kv_tiering_manager_get_stats (manager);
  g_assert_cmpfloat (counter (stats, "kvtier_tier_breaker_open"), ==, 0);
  g_assert_false (kv_stats_lookup (stats, "kvtier_tier_breaker_openings",
                                   (const char * const[]) { "1:fault", NULL }, NULL));
  kv_tiering_manager_on_request_finished (manager, request);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/kvtier/messages/breaker-flapping", test_breaker_flapping);
  g_test_add_func ("/kvtier/messages/fault-tier", test_fault_tier);

  return g_test_run ();
}
