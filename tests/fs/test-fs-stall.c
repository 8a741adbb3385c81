/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-tier-job.h"

/* Deadlines and the circuit breaker. The engine's test-only stall hook
 * holds every op; a manual clock moves time, so nothing here depends on
 * how fast the machine is. */

#define DEADLINE_MS 1000
#define PROBE_MS 500

typedef struct
{
  KvHostBuffer *buffer;
  char         *root;
  KvClock      *clock;
  KvFsTier     *tier;
  KvFsEngine   *engine;
  KvRequest    *request;
  KvKey        *keys[8];
} Fixture;

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (8, FS_TEST_SLOT, &error);
  g_assert_no_error (error);
  f->root = test_dir_make ("kvtier-fs-test");
  f->clock = kv_clock_new_manual (1000000);
  f->tier = fs_test_tier_new_full (f->buffer, f->root, data, f->clock, &error,
                                   "deadline-ms", DEADLINE_MS,
                                   "breaker-threshold", 2,
                                   "probe-interval-ms", PROBE_MS,
                                   NULL);
  g_assert_no_error (error);
  f->engine = kv_fs_tier_get_engine (f->tier);
  f->request = kv_request_new ("stall", NULL);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = test_chunk_key (i);
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  kv_fs_engine_set_stalled (f->engine, FALSE);
  fs_test_shutdown (f->tier);
  g_object_add_weak_pointer (G_OBJECT (f->tier), (gpointer *) &f->tier);
  g_object_unref (f->tier);
  g_assert_null (f->tier);
  g_clear_object (&f->request);
  g_clear_object (&f->clock);
  g_clear_object (&f->buffer);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
  test_dir_remove (f->root);
  g_free (f->root);
}

static void
submit (Fixture  *f,
        guint64   id,
        gboolean  is_load,
        guint     key)
{
  g_autoptr(GError) error = NULL;
  guint32 s = key;
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (id, &f->keys[key], &s, 1, is_load, f->request);

  if (!is_load)
    test_chunk_fill_slot (f->buffer, s, key);
  if (is_load)
    g_assert_true (kv_secondary_tier_submit_load (KV_SECONDARY_TIER (f->tier), job, &error));
  else
    g_assert_true (kv_secondary_tier_submit_store (KV_SECONDARY_TIER (f->tier), job, &error));
  g_assert_no_error (error);
}

/* Takes the results available now; returns how many, and how many
 * succeeded in *n_ok. */
static guint
take (Fixture *f,
      guint   *n_ok)
{
  KvJobResult **results = kv_secondary_tier_get_finished_jobs (KV_SECONDARY_TIER (f->tier));
  guint n = 0;

  *n_ok = 0;
  for (; results[n] != NULL; n++)
    {
      *n_ok += kv_job_result_get_success (results[n]);
      kv_job_result_unref (results[n]);
    }
  g_free (results);
  return n;
}

static void
drain (Fixture *f)
{
  g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL));
}

static KvLookupResult
lookup (Fixture *f,
        guint    key)
{
  return kv_secondary_tier_lookup (KV_SECONDARY_TIER (f->tier), f->keys[key], f->request);
}

/* A stalled device: both stores fail at their deadline, the breaker opens
 * then (well within 2× the deadline), lookups answer MISS without touching
 * the disk; once the device is back a probe closes the breaker. */
static void
test_deadline_trips_breaker (Fixture       *f,
                             gconstpointer  data)
{
  guint n_ok = 0;
  gint64 stall_start;

  /* key 0 is stored while the device is healthy */
  submit (f, 1, FALSE, 0);
  drain (f);
  g_assert_cmpuint (take (f, &n_ok), ==, 1);
  g_assert_cmpuint (n_ok, ==, 1);

  kv_fs_engine_set_stalled (f->engine, TRUE);
  stall_start = kv_clock_get_time (f->clock);
  submit (f, 2, FALSE, 1);
  submit (f, 3, FALSE, 2);
  /* just before the deadline nothing is reported */
  kv_clock_advance (f->clock, DEADLINE_MS * 1000 - 1);
  g_assert_cmpuint (take (f, &n_ok), ==, 0);
  g_assert_false (kv_fs_tier_is_breaker_open (f->tier));

  kv_clock_advance (f->clock, 1);
  g_assert_cmpuint (take (f, &n_ok), ==, 2);
  g_assert_cmpuint (n_ok, ==, 0);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_TIMEOUTS), ==, 2);
  g_assert_true (kv_fs_tier_is_breaker_open (f->tier));
  g_assert_cmpint (kv_clock_get_time (f->clock) - stall_start, <=, 2 * DEADLINE_MS * 1000);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_BREAKER_TRIPS), ==, 1);
  /* the cancelled stores left no file behind */
  g_assert_cmpuint (kv_fs_engine_get_n_queued (f->engine), ==, 0);
  g_assert_cmpuint (test_dir_count_files (f->root, ".tmp"), ==, 0);

  /* open: a stored key answers MISS, jobs fail at once, no op reaches the
   * engine */
  g_assert_cmpint (lookup (f, 0), ==, KV_LOOKUP_RESULT_MISS);
  submit (f, 4, TRUE, 0);
  submit (f, 5, FALSE, 3);
  g_assert_cmpuint (kv_fs_engine_get_n_queued (f->engine), ==, 0);
  g_assert_cmpuint (take (f, &n_ok), ==, 2);
  g_assert_cmpuint (n_ok, ==, 0);

  /* the device comes back; the next probe is due after the interval */
  kv_fs_engine_set_stalled (f->engine, FALSE);
  g_assert_cmpint (lookup (f, 0), ==, KV_LOOKUP_RESULT_MISS);
  kv_clock_advance (f->clock, PROBE_MS * 1000);
  g_assert_cmpint (lookup (f, 0), ==, KV_LOOKUP_RESULT_MISS);   /* starts the probe */
  drain (f);
  g_assert_false (kv_fs_tier_is_breaker_open (f->tier));
  g_assert_cmpint (lookup (f, 0), ==, KV_LOOKUP_RESULT_HIT);

  /* and serves again */
  submit (f, 6, FALSE, 4);
  submit (f, 7, TRUE, 0);
  drain (f);
  g_assert_cmpuint (take (f, &n_ok), ==, 2);
  g_assert_cmpuint (n_ok, ==, 2);
  g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, 0), FS_TEST_SLOT, 0));
}

/* A probe that stalls too fails at its deadline; the breaker stays open
 * and probes again later. */
static void
test_probe_failure_keeps_open (Fixture       *f,
                               gconstpointer  data)
{
  guint n_ok = 0;

  kv_fs_engine_set_stalled (f->engine, TRUE);
  submit (f, 1, FALSE, 1);
  submit (f, 2, FALSE, 2);
  kv_clock_advance (f->clock, DEADLINE_MS * 1000);
  g_assert_cmpuint (take (f, &n_ok), ==, 2);
  g_assert_true (kv_fs_tier_is_breaker_open (f->tier));

  kv_clock_advance (f->clock, PROBE_MS * 1000);
  lookup (f, 0);                                   /* probe 1 starts, stalls */
  g_assert_cmpuint (kv_fs_engine_get_n_queued (f->engine), ==, 1);
  kv_clock_advance (f->clock, DEADLINE_MS * 1000);
  g_assert_cmpuint (take (f, &n_ok), ==, 0);       /* probe results are internal */
  g_assert_true (kv_fs_tier_is_breaker_open (f->tier));
  g_assert_cmpuint (kv_fs_engine_get_n_queued (f->engine), ==, 0);

  kv_fs_engine_set_stalled (f->engine, FALSE);
  lookup (f, 0);                                   /* not due yet */
  g_assert_false (kv_secondary_tier_has_pending_work (KV_SECONDARY_TIER (f->tier)));
  kv_clock_advance (f->clock, PROBE_MS * 1000);
  lookup (f, 0);                                   /* probe 2 */
  drain (f);
  g_assert_false (kv_fs_tier_is_breaker_open (f->tier));
}

/* A stalled load is reported failed at its deadline (its read never
 * started, so no byte reaches the slot later). */
static void
test_load_deadline (Fixture       *f,
                    gconstpointer  data)
{
  guint n_ok = 0;

  submit (f, 1, FALSE, 3);
  drain (f);
  take (f, &n_ok);
  memset (kv_host_buffer_peek_slot (f->buffer, 3), 0xee, FS_TEST_SLOT);

  kv_fs_engine_set_stalled (f->engine, TRUE);
  submit (f, 2, TRUE, 3);
  kv_clock_advance (f->clock, DEADLINE_MS * 1000);
  g_assert_cmpuint (take (f, &n_ok), ==, 1);
  g_assert_cmpuint (n_ok, ==, 0);
  kv_fs_engine_set_stalled (f->engine, FALSE);
  drain (f);
  for (guint i = 0; i < FS_TEST_SLOT; i++)
    g_assert_cmpuint (((guint8 *) kv_host_buffer_peek_slot (f->buffer, 3))[i], ==, 0xee);
  /* one timeout is below the threshold of two */
  g_assert_false (kv_fs_tier_is_breaker_open (f->tier));
  /* the request whose load failed does not retry it; another one may */
  g_assert_cmpint (lookup (f, 3), ==, KV_LOOKUP_RESULT_MISS);
  g_clear_object (&f->request);
  f->request = kv_request_new ("fresh", NULL);
  g_assert_cmpint (lookup (f, 3), ==, KV_LOOKUP_RESULT_HIT);
}

/* Injected I/O errors count too; a success in between resets the run. */
static void
test_io_errors_trip_breaker (Fixture       *f,
                             gconstpointer  data)
{
  guint n_ok = 0;

  kv_fs_engine_inject_error (f->engine, KV_FS_OP_STORE, EIO, 1);
  submit (f, 1, FALSE, 1);
  drain (f);
  submit (f, 2, FALSE, 2);
  drain (f);
  g_assert_cmpuint (take (f, &n_ok), ==, 2);
  g_assert_cmpuint (n_ok, ==, 1);
  g_assert_false (kv_fs_tier_is_breaker_open (f->tier));

  kv_fs_engine_inject_error (f->engine, KV_FS_OP_STORE, EIO, 2);
  submit (f, 3, FALSE, 3);
  drain (f);
  submit (f, 4, FALSE, 4);
  drain (f);
  g_assert_cmpuint (take (f, &n_ok), ==, 2);
  g_assert_cmpuint (n_ok, ==, 0);
  g_assert_true (kv_fs_tier_is_breaker_open (f->tier));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_IO_ERRORS), ==, 3);
}

/* With the real clock the tier's watchdog fails a stalled job by itself:
 * drain_jobs() returns once the deadline has passed. */
static void
test_watchdog_real_clock (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (2, FS_TEST_SLOT, &error);
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  FsVariant v = { KV_FS_IO_ENGINE_AUTO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER };
  g_autoptr(KvFsTier) tier = NULL;
  g_autoptr(KvKey) key = test_chunk_key (0);
  g_autoptr(KvJobResult) result = NULL;
  gint64 start;
  guint32 s = 0;

  tier = fs_test_tier_new_full (buffer, root, &v, kv_clock_get_default (), &error,
                                "deadline-ms", 50, NULL);
  g_assert_no_error (error);
  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (tier), TRUE);
  start = g_get_monotonic_time ();
  result = test_tier_run_job (tier, 1, FALSE, &key, &s, 1, NULL);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_TIMEOUTS), ==, 1);
  g_test_message ("stalled store reported after %.1f ms (deadline 50 ms)",
                  (g_get_monotonic_time () - start) / 1000.0);
  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (tier), FALSE);
  fs_test_shutdown (tier);
  test_dir_remove (root);
}

int
main (int argc, char **argv)
{
  static const FsVariant variants[] = {
#if KV_FS_HAVE_URING
    { KV_FS_IO_ENGINE_URING, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER },
#endif
    { KV_FS_IO_ENGINE_GIO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER },
    { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER },
#if KV_FS_HAVE_URING
    { KV_FS_IO_ENGINE_URING, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_SLAB },
#endif
    { KV_FS_IO_ENGINE_GIO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_SLAB },
    { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_SLAB },
  };

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  for (guint i = 0; i < G_N_ELEMENTS (variants); i++)
    if (!fs_test_skip_engine (variants[i].engine))
    {
      /* layout=slab: the engine's name with "-slab" */
      g_autofree char *e = g_strconcat (fs_engine_name (variants[i].engine),
                                        variants[i].layout == KV_FS_LAYOUT_KIND_SLAB ? "-slab" : "",
                                        NULL);
      g_autofree char *p1 = g_strdup_printf ("/kvtier/fs/stall/%s/deadline-trips-breaker", e);
      g_autofree char *p2 = g_strdup_printf ("/kvtier/fs/stall/%s/probe-failure-keeps-open", e);
      g_autofree char *p3 = g_strdup_printf ("/kvtier/fs/stall/%s/load-deadline", e);
      g_autofree char *p4 = g_strdup_printf ("/kvtier/fs/stall/%s/io-errors-trip-breaker", e);

      g_test_add (p1, Fixture, &variants[i], setup, test_deadline_trips_breaker, teardown);
      g_test_add (p2, Fixture, &variants[i], setup, test_probe_failure_keeps_open, teardown);
      g_test_add (p3, Fixture, &variants[i], setup, test_load_deadline, teardown);
      g_test_add (p4, Fixture, &variants[i], setup, test_io_errors_trip_breaker, teardown);
    }
  g_test_add_func ("/kvtier/fs/stall/watchdog-real-clock", test_watchdog_real_clock);

  return g_test_run ();
}
