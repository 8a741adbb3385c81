/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-tier-job.h"

/* The fs tier gets its negative cache from KvSecondaryTier: a load that
 * fails on a damaged chunk marks every key that did not land for its
 * request (reference §8.7), not only the damaged one. */

static void
test_failed_load_marks_every_key (gconstpointer data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (8, FS_TEST_SLOT, &error);
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  g_autoptr(KvFsTier) tier = NULL;
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvRequest) other = kv_request_new ("other", NULL);
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  KvSecondaryTier *st;
  KvKey *keys[3] = { test_chunk_key (0), test_chunk_key (1), test_chunk_key (2) };
  guint32 slots[3] = { 0, 1, 2 };
  guint32 load_slots[3] = { 3, 4, 5 };
  g_autofree char *path = NULL;
  g_autofree char *contents = NULL;
  KvKey * const *ok;
  gsize length = 0;
  guint n_ok = 0;

  tier = fs_test_tier_new (buffer, root, data, NULL);
  st = KV_SECONDARY_TIER (tier);
  stored = test_tier_run_job (tier, 1, FALSE, keys, slots, 3, request);
  g_assert_true (kv_job_result_get_success (stored));

  /* key 1's payload is damaged: the load lands keys 0 and 2, and lists
   * them in the job's order (KvJobResult's partial-load rule) */
  path = kv_fs_tier_get_chunk_path (tier, keys[1]);
  g_assert_true (g_file_get_contents (path, &contents, &length, NULL));
  contents[length - 1] ^= 0x40;
  g_assert_true (g_file_set_contents (path, contents, length, NULL));
  loaded = test_tier_run_job (tier, 2, TRUE, keys, load_slots, 3, request);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_true (kv_job_result_get_checksum_failed (loaded));
  ok = kv_job_result_get_successful_keys (loaded, &n_ok);
  g_assert_cmpuint (n_ok, ==, 2);
  g_assert_true (kv_key_equal (ok[0], keys[0]));
  g_assert_true (kv_key_equal (ok[1], keys[2]));

  /* key 1 did not land: MISS to this request, and to another one too,
   * since the damaged file is gone; the landed keys are still there */
  g_assert_cmpint (kv_secondary_tier_lookup (st, keys[1], request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_secondary_tier_lookup (st, keys[0], request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_secondary_tier_lookup (st, keys[2], request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_secondary_tier_lookup (st, keys[2], other), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_secondary_tier_lookup (st, keys[1], other), ==, KV_LOOKUP_RESULT_MISS);

  /* a damaged chunk is not the device's fault: the breaker stays shut */
  g_assert_false (kv_fs_tier_is_breaker_open (tier));
  g_assert_cmpuint (kv_circuit_breaker_get_n_trips (kv_secondary_tier_get_circuit_breaker (st)), ==, 0);

  fs_test_shutdown (tier);
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    kv_key_unref (keys[i]);
  test_dir_remove (root);
}

/* The fs tier's defaults for the base class's knobs, and its old name
 * for the open interval. */
static void
test_defaults (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (2, FS_TEST_SLOT, &error);
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  FsVariant v = { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER };
  g_autoptr(KvFsTier) tier = fs_test_tier_new (buffer, root, &v, "probe-interval-ms", 250, NULL);
  guint deadline = 0, threshold = 0, open_ms = 0;

  g_object_get (tier, "deadline-ms", &deadline, "breaker-threshold", &threshold,
                "breaker-open-ms", &open_ms, NULL);
  g_assert_cmpuint (deadline, ==, 5000);
  g_assert_cmpuint (threshold, ==, 5);
  g_assert_cmpuint (open_ms, ==, 250);
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
  };

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  for (guint i = 0; i < G_N_ELEMENTS (variants); i++)
    if (!fs_test_skip_engine (variants[i].engine))
      {
        g_autofree char *path = g_strdup_printf ("/kvtier/fs/resilience/%s/failed-load-marks-every-key",
                                                 fs_engine_name (variants[i].engine));

        g_test_add_data_func (path, &variants[i], test_failed_load_marks_every_key);
      }
  g_test_add_func ("/kvtier/fs/resilience/defaults", test_defaults);

  return g_test_run ();
}
