/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-example-tier.h"

/* KvCounterSet: counts from many threads, reports increases, and the base
 * class reports a tier's set with its other counters. */

static const char *const names[] = { "kvtier_test_a", "kvtier_test_b", NULL };
static const char *const labels[] = { "t", NULL };

static gdouble
counter (KvStats    *stats,
         const char *name)
{
  gdouble value = -1;

  if (!kv_stats_lookup (stats, name, labels, &value))
    return -1;
  return value;
}

static void
test_deltas (void)
{
  g_autoptr(KvCounterSet) set = kv_counter_set_new (names);
  g_autoptr(KvStats) first = kv_stats_new ();
  g_autoptr(KvStats) second = kv_stats_new ();
  g_autoptr(KvStats) third = kv_stats_new ();

  g_assert_cmpuint (kv_counter_set_get_n_counters (set), ==, 2);
  g_assert_cmpstr (kv_counter_set_get_name (set, 1), ==, "kvtier_test_b");

  /* the first report has every counter, zeros too */
  kv_counter_set_add (set, 0, 3);
  kv_counter_set_take_deltas (set, first, labels);
  g_assert_cmpfloat (counter (first, "kvtier_test_a"), ==, 3);
  g_assert_cmpfloat (counter (first, "kvtier_test_b"), ==, 0);

  /* then what moved, by how much */
  kv_counter_set_add (set, 1, 5);
  kv_counter_set_add (set, 1, 2);
  kv_counter_set_take_deltas (set, second, labels);
  g_assert_cmpfloat (counter (second, "kvtier_test_a"), ==, -1);
  g_assert_cmpfloat (counter (second, "kvtier_test_b"), ==, 7);
  g_assert_cmpuint (kv_counter_set_get (set, 1), ==, 7);

  /* a total counted elsewhere */
  kv_counter_set_update (set, 0, 10);
  kv_counter_set_take_deltas (set, third, labels);
  g_assert_cmpfloat (counter (third, "kvtier_test_a"), ==, 7);
  g_assert_cmpfloat (counter (third, "kvtier_test_b"), ==, -1);
}

#define N_THREADS 4
#define N_ADDS    100000

static gpointer
add_many (gpointer data)
{
  for (guint i = 0; i < N_ADDS; i++)
    kv_counter_set_add (data, i % 2, 1);
  return NULL;
}

static void
test_threads (void)
{
  g_autoptr(KvCounterSet) set = kv_counter_set_new (names);
  GThread *threads[N_THREADS];
  gdouble total = 0;

  for (guint t = 0; t < N_THREADS; t++)
    threads[t] = g_thread_new ("adder", add_many, set);
  /* reports taken while the threads count lose nothing */
  for (guint r = 0; r < 50; r++)
    {
      g_autoptr(KvStats) stats = kv_stats_new ();

      kv_counter_set_take_deltas (set, stats, labels);
      total += MAX (counter (stats, "kvtier_test_a"), 0) + MAX (counter (stats, "kvtier_test_b"), 0);
    }
  for (guint t = 0; t < N_THREADS; t++)
    g_thread_join (threads[t]);
  {
    g_autoptr(KvStats) stats = kv_stats_new ();

    kv_counter_set_take_deltas (set, stats, labels);
    total += MAX (counter (stats, "kvtier_test_a"), 0) + MAX (counter (stats, "kvtier_test_b"), 0);
  }
  g_assert_cmpfloat (total, ==, (gdouble) N_THREADS * N_ADDS);
}

/* The base class adds a tier's counters to what its get_stats returns,
 * labelled with the tier's type. */
static void
test_tier_reports_counters (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (2, 4096, &error);
  g_autoptr(KvSecondaryTier) tier = NULL;
  g_autoptr(KvCounterSet) set = kv_counter_set_new (names);
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvStats) again = NULL;
  const char *tier_labels[] = { "example", NULL };
  gdouble value = 0;

  tier = KV_SECONDARY_TIER (kv_example_tier_new (buffer));
  kv_secondary_tier_set_counters (tier, set);
  kv_counter_set_add (set, 1, 4);
  stats = kv_secondary_tier_get_stats (tier);
  g_assert_nonnull (stats);
  g_assert_true (kv_stats_lookup (stats, "kvtier_test_b", tier_labels, &value));
  g_assert_cmpfloat (value, ==, 4);
  g_assert_true (kv_stats_lookup (stats, "kvtier_test_a", tier_labels, &value));
  g_assert_cmpfloat (value, ==, 0);

  again = kv_secondary_tier_get_stats (tier);
  g_assert_true (again == NULL || !kv_stats_lookup (again, "kvtier_test_b", tier_labels, &value));
  g_assert_true (kv_secondary_tier_shutdown (tier, &error));
  g_assert_no_error (error);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/counter-set/deltas", test_deltas);
  g_test_add_func ("/counter-set/threads", test_threads);
  g_test_add_func ("/counter-set/tier", test_tier_reports_counters);
  return g_test_run ();
}
