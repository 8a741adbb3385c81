/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-manager-stack.h"

/* Warm restart with lookups in flight (issue 13, item 2).
 *
 * While a restarted fs tier scans its root, a lookup it cannot answer from
 * the index goes to its asynchronous lookup: a worker checks the disk. Once
 * the index is ready, lookups answer from the index and no longer pass
 * through the asynchronous lookup, so its answers used to stay queued
 * forever: kv_tiering_manager_has_pending_work() kept counting them and an
 * engine that steps "while there is pending work" (`kvtier bench`) spun at
 * 100% CPU. Each test here restarts on a populated root while lookups are
 * in flight and asserts that the pending work goes away and that a drain
 * returns. */

#define N_CHUNKS 32
/* Long enough for a worker to check N_CHUNKS files on a loaded machine;
 * the bug keeps the work pending forever. */
#define SETTLE_US (20 * G_USEC_PER_SEC)

typedef struct
{
  FsVariant   variant;
  const char *root;
} TierSpec;

static KvSecondaryTier *
make_tier (KvHostBuffer *buffer,
           gpointer      data)
{
  TierSpec *spec = data;

  return KV_SECONDARY_TIER (fs_test_tier_new (buffer, spec->root, &spec->variant, NULL));
}

/* Looks up every stored key for @request, as a scheduler does for a
 * waiting request, and ends the step. Returns how many answered RETRY. */
static guint
lookup_all (TestStack   *s,
            KvRequest *request)
{
  guint n_retry = 0;

  for (guint i = 0; i < N_CHUNKS; i++)
    {
      g_autoptr(KvKey) key = test_chunk_key (i);

      n_retry += kv_tiering_manager_lookup (s->manager, key, request) == KV_LOOKUP_RESULT_RETRY;
    }
  test_stack_step (s);
  return n_retry;
}

/* Steps like an engine with nothing to schedule until the manager has no
 * pending work; fails if it stays pending. Lookups keep coming from
 * @request, answered by the (ready) index. */
static void
assert_pending_work_ends (TestStack   *s,
                          KvRequest *request)
{
  gint64 deadline = g_get_monotonic_time () + SETTLE_US;
  guint steps = 0;

  while (kv_tiering_manager_has_pending_work (s->manager))
    {
      if (g_get_monotonic_time () > deadline)
        g_error ("has_pending_work still TRUE after %u steps and %d s: the restarted fs "
                 "tier's lookup answers are never collected", steps,
                 (int) (SETTLE_US / G_USEC_PER_SEC));
      if (request != NULL)
        lookup_all (s, request);
      else
        test_stack_step (s);
      steps++;
      g_usleep (500);
    }
}

static void
populate (const char      *root,
          const FsVariant *variant)
{
  TierSpec spec = { *variant, root };
  TestStack s = { 0 };

  test_stack_init (&s, 2 * N_CHUNKS, FS_TEST_SLOT, make_tier, &spec);
  g_assert_cmpuint (test_stack_store (&s, 0, N_CHUNKS), ==, N_CHUNKS);
  test_stack_clear (&s);
}

/* Deterministic: the scan is held at its start, so the lookups go to the
 * asynchronous lookup; the index becomes ready before the answers are
 * collected. */
static void
test_restart_index_ready_first (gconstpointer data)
{
  const FsVariant *variant = data;
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  TierSpec spec = { *variant, root };

  populate (root, variant);

  for (guint round = 0; round < 10; round++)
    {
      g_autofree char *id = g_strdup_printf ("waiting-%u", round);
      g_autoptr(KvRequest) request = kv_request_new (id, NULL);
      TestStack s = { 0 };

      kv_fs_tier_hold_scans (TRUE);
      test_stack_init (&s, 2 * N_CHUNKS, FS_TEST_SLOT, make_tier, &spec);
      g_assert_false (kv_fs_tier_is_index_ready (KV_FS_TIER (s.tier)));
      kv_tiering_manager_on_new_request (s.manager, request);
      /* the index knows nothing yet: every key goes to the disk check,
       * posted at the end of the step */
      g_assert_cmpuint (lookup_all (&s, request), ==, N_CHUNKS);

      kv_fs_tier_hold_scans (FALSE);
      kv_fs_tier_wait_index_ready (KV_FS_TIER (s.tier));
      g_assert_true (kv_fs_tier_is_index_ready (KV_FS_TIER (s.tier)));

      assert_pending_work_ends (&s, request);
      g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (s.tier), NULL));
      kv_tiering_manager_on_request_finished (s.manager, request);
      test_stack_step (&s);
      g_assert_false (kv_tiering_manager_has_pending_work (s.manager));
      /* the restarted tier still serves every chunk */
      g_assert_cmpint (test_stack_promote (&s, round % N_CHUNKS), ==, KV_LOOKUP_RESULT_HIT);
      test_stack_assert_no_pins (&s, N_CHUNKS);
      test_stack_clear (&s);
    }
  test_dir_remove (root);
}

/* Keeps the other core busy, so that the scan, the disk-check workers and
 * the owner thread interleave differently from run to run. */
static gpointer
burn_main (gpointer data)
{
  gint *stop = data;
  volatile guint64 x = 0;

  while (!g_atomic_int_get (stop))
    for (guint i = 0; i < 100000; i++)
      x += i;
  return NULL;
}

/* Unsynchronized: restart after restart with lookups racing the scan,
 * under load, many times. */
static void
test_restart_racing_lookups (gconstpointer data)
{
  const FsVariant *variant = data;
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  TierSpec spec = { *variant, root };
  GThread *burners[2];
  gint stop = FALSE;
  guint rounds = g_test_slow () ? 200 : 40;

  populate (root, variant);
  for (guint i = 0; i < G_N_ELEMENTS (burners); i++)
    burners[i] = g_thread_new ("burn", burn_main, &stop);

  for (guint round = 0; round < rounds; round++)
    {
      g_autofree char *id = g_strdup_printf ("racing-%u", round);
      g_autoptr(KvRequest) request = kv_request_new (id, NULL);
      TestStack s = { 0 };

      test_stack_init (&s, 2 * N_CHUNKS, FS_TEST_SLOT, make_tier, &spec);
      kv_tiering_manager_on_new_request (s.manager, request);
      /* a few steps while the scan runs: some lookups go to the disk
       * check, some are answered by the index once it is ready */
      for (guint step = 0; step < 1 + round % 4; step++)
        lookup_all (&s, request);
      kv_fs_tier_wait_index_ready (KV_FS_TIER (s.tier));
      assert_pending_work_ends (&s, round % 2 == 0 ? request : NULL);
      g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (s.tier), NULL));
      kv_tiering_manager_on_request_finished (s.manager, request);
      test_stack_step (&s);
      g_assert_false (kv_tiering_manager_has_pending_work (s.manager));
      test_stack_clear (&s);
    }

  g_atomic_int_set (&stop, TRUE);
  for (guint i = 0; i < G_N_ELEMENTS (burners); i++)
    g_thread_join (burners[i]);
  test_dir_remove (root);
}

int
main (int argc, char **argv)
{
  static const FsVariant variant = { KV_FS_IO_ENGINE_AUTO, KV_FS_O_DIRECT_AUTO,
                                     KV_FS_LAYOUT_KIND_KVTIER };

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_data_func ("/kvtier/fs/restart/index-ready-before-answers-collected", &variant,
                        test_restart_index_ready_first);
  g_test_add_data_func ("/kvtier/fs/restart/racing-lookups", &variant,
                        test_restart_racing_lookups);

  return g_test_run ();
}
