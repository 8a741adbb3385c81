/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-tier-job.h"
#include "kv-chunk-format.h"

/* The fs tier through the KvSecondaryTier API: every FS-tier behaviour of
 * reference §11, plus capacity, warm restart, multi-root and bad
 * configurations. The behaviours that depend on the data path run for
 * every engine, with O_DIRECT on and off, in both layouts. */

#define N_SLOTS 16

typedef struct
{
  KvHostBuffer *buffer;
  char         *root;
  KvFsTier     *tier;
  KvKey        *keys[24];
  guint64       next_id;
} Fixture;

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (N_SLOTS, FS_TEST_SLOT, &error);
  g_assert_no_error (error);
  f->root = test_dir_make ("kvtier-fs-test");
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = test_chunk_key (i);
  f->next_id = 1;
}

static void
setup_tier (Fixture       *f,
            gconstpointer  data)
{
  setup (f, data);
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  if (f->tier != NULL)
    {
      fs_test_shutdown (f->tier);
      g_object_add_weak_pointer (G_OBJECT (f->tier), (gpointer *) &f->tier);
      g_object_unref (f->tier);
      g_assert_null (f->tier);
    }
  g_clear_object (&f->buffer);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
  test_dir_remove (f->root);
  g_free (f->root);
}

static guint8 *
slot (Fixture *f,
      guint32  i)
{
  return kv_host_buffer_peek_slot (f->buffer, i);
}

/* Stores keys[first..first+n) from slots 0..n-1 (filled with each key's
 * pattern) and returns the result. */
static KvJobResult *
store_range (Fixture   *f,
             guint      first,
             guint      n,
             KvRequest *request)
{
  guint32 slots[16];

  g_assert_cmpuint (n, <=, 16);
  for (guint i = 0; i < n; i++)
    {
      slots[i] = i;
      test_chunk_fill_slot (f->buffer, i, first + i);
    }
  return test_tier_run_job (f->tier, f->next_id++, FALSE, &f->keys[first], slots, n, request);
}

static void
store_ok (Fixture *f,
          guint    first,
          guint    n)
{
  g_autoptr(KvJobResult) result = store_range (f, first, n, NULL);

  g_assert_true (kv_job_result_get_success (result));
}

/* Loads keys[first..first+n) into slots 8.. and returns the result. */
static KvJobResult *
load_range (Fixture   *f,
            guint      first,
            guint      n,
            KvRequest *request)
{
  guint32 slots[8];

  g_assert_cmpuint (n, <=, 8);
  for (guint i = 0; i < n; i++)
    {
      slots[i] = 8 + i;
      memset (slot (f, 8 + i), 0, FS_TEST_SLOT);
    }
  return test_tier_run_job (f->tier, f->next_id++, TRUE, &f->keys[first], slots, n, request);
}

static KvLookupResult
lookup (Fixture   *f,
        guint      key,
        KvRequest *request)
{
  g_autoptr(KvRequest) own = request ? g_object_ref (request) : kv_request_new ("lookup", NULL);

  return kv_secondary_tier_lookup (KV_SECONDARY_TIER (f->tier), f->keys[key], own);
}

static char *
chunk_path (Fixture *f,
            guint    key)
{
  return kv_fs_tier_get_chunk_path (f->tier, f->keys[key]);
}

/* A chunk file's size in the variant's layout (a header in kvtier's). */
static guint64
chunk_file_size (const FsVariant *v)
{
  return FS_TEST_SLOT + (v->layout == KV_FS_LAYOUT_KIND_KVTIER ? KV_CHUNK_HEADER_SIZE : 0);
}

/* The chunk files under the fixture's root. */
static guint
count_chunk_files (Fixture         *f,
                   const FsVariant *v)
{
  return test_dir_count_files (f->root, v->layout == KV_FS_LAYOUT_KIND_KVTIER ? ".kv" : ".bin");
}

/* ---- §11 FS tier ------------------------------------------------------- */

static void
test_empty_lookup_miss (Fixture       *f,
                        gconstpointer  data)
{
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_secondary_tier_get_medium (KV_SECONDARY_TIER (f->tier)), ==, KV_MEDIUM_STORAGE);
  g_assert_cmpuint (kv_secondary_tier_get_block_size_bytes (KV_SECONDARY_TIER (f->tier)), ==, FS_TEST_SLOT);
}

static void
test_store_creates_file (Fixture       *f,
                         gconstpointer  data)
{
  const FsVariant *v = data;
  g_autofree char *path = chunk_path (f, 0);
  GStatBuf st;

  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  store_ok (f, 0, 1);
  g_assert_cmpint (g_stat (path, &st), ==, 0);
  g_assert_cmpuint (st.st_size, ==, chunk_file_size (v));
  g_assert_cmpuint (st.st_mode & 0777, ==, 0600);
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_STORED_CHUNKS), ==, 1);
  g_assert_cmpuint (test_dir_count_files (f->root, ".tmp"), ==, 0);

  /* a second store of the key is skipped */
  store_ok (f, 0, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_STORED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SKIPPED_CHUNKS), ==, 1);
}

static void
test_round_trip (Fixture       *f,
                 gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;

  stored = store_range (f, 0, 3, NULL);
  g_assert_true (kv_job_result_get_success (stored));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (stored), ==, 3 * FS_TEST_SLOT);
  loaded = load_range (f, 0, 3, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_false (kv_job_result_has_successful_keys (loaded));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (loaded), ==, 3 * FS_TEST_SLOT);
  g_assert_cmpfloat (kv_job_result_get_transfer_time (loaded), >=, 0);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *path = chunk_path (f, i);

      g_assert_true (test_chunk_check (slot (f, 8 + i), FS_TEST_SLOT, i));
      /* loads keep the files */
      g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
    }
}

static void
test_integrity_batch_sizes (Fixture       *f,
                            gconstpointer  data)
{
  static const guint sizes[] = { 0, 1, 2, 5 };
  guint first = 0;

  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
    {
      g_autoptr(KvJobResult) stored = store_range (f, first, sizes[s], NULL);
      g_autoptr(KvJobResult) loaded = NULL;

      g_assert_true (kv_job_result_get_success (stored));
      loaded = load_range (f, first, sizes[s], NULL);
      g_assert_true (kv_job_result_get_success (loaded));
      for (guint i = 0; i < sizes[s]; i++)
        g_assert_true (test_chunk_check (slot (f, 8 + i), FS_TEST_SLOT, first + i));
      first += sizes[s];
    }
}

static void
test_missing_file_fails_load (Fixture       *f,
                              gconstpointer  data)
{
  g_autofree char *path = chunk_path (f, 0);
  g_autoptr(KvJobResult) loaded = NULL;

  store_ok (f, 0, 1);
  g_assert_cmpint (g_unlink (path), ==, 0);
  loaded = load_range (f, 0, 1, NULL);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_false (kv_job_result_has_successful_keys (loaded));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_MISSING_CHUNKS), ==, 1);
  /* the index forgot it */
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_MISS);
}

/* Load keys 0,1,2 with one of them missing (reference #50321): the
 * result lists every key that landed, in the job's order (KvJobResult's
 * partial-load rule), whichever key is missing. */
static void
test_partial_load (Fixture       *f,
                   gconstpointer  data)
{
  for (guint missing = 0; missing < 3; missing++)
    {
      g_autofree char *path = NULL;
      g_autoptr(KvJobResult) loaded = NULL;
      KvKey * const *ok;
      guint n_ok = 0;
      guint j = 0;

      store_ok (f, 0, 3);
      path = chunk_path (f, missing);
      g_assert_cmpint (g_unlink (path), ==, 0);
      loaded = load_range (f, 0, 3, NULL);
      g_assert_false (kv_job_result_get_success (loaded));
      g_assert_true (kv_job_result_has_successful_keys (loaded));
      ok = kv_job_result_get_successful_keys (loaded, &n_ok);
      g_assert_cmpuint (n_ok, ==, 2);
      for (guint i = 0; i < 3; i++)
        if (i != missing)
          g_assert_true (kv_key_equal (ok[j++], f->keys[i]));
      g_assert_cmpint (kv_job_result_get_transfer_bytes (loaded), ==, 2 * FS_TEST_SLOT);
      for (guint i = 0; i < 3; i++)
        if (i != missing)
          g_assert_true (test_chunk_check (slot (f, 8 + i), FS_TEST_SLOT, i));
    }
}

static void
test_out_of_bounds_slot (Fixture       *f,
                         gconstpointer  data)
{
  guint32 slots[2] = { 0, N_SLOTS };
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;

  stored = test_tier_run_job (f->tier, f->next_id++, FALSE, f->keys, slots, 2, NULL);
  g_assert_false (kv_job_result_get_success (stored));
  g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_MISS);
  slots[0] = N_SLOTS + 5;
  slots[1] = 1;
  loaded = test_tier_run_job (f->tier, f->next_id++, TRUE, f->keys, slots, 2, NULL);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_false (kv_job_result_has_successful_keys (loaded));
}

/* Several jobs in flight at once are tracked and reported separately. */
static void
test_multi_job_tracking (Fixture       *f,
                         gconstpointer  data)
{
  KvSecondaryTier *st = KV_SECONDARY_TIER (f->tier);
  g_autoptr(KvRequest) request = kv_request_new ("multi", NULL);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;
  gboolean seen[4] = { FALSE, };
  guint n = 0;

  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (f->tier), TRUE);
  for (guint j = 0; j < 3; j++)
    {
      guint32 slots[2] = { 2 * j, 2 * j + 1 };
      g_autoptr(KvTransferJob) job = kv_transfer_job_new (10 + j, &f->keys[2 * j], slots, 2,
                                                          FALSE, request);

      test_chunk_fill_slot (f->buffer, 2 * j, 2 * j);
      test_chunk_fill_slot (f->buffer, 2 * j + 1, 2 * j + 1);
      g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
    }
  /* a load of a key that is not there yet fails on its own */
  {
    guint32 s = 9;
    g_autoptr(KvTransferJob) job = kv_transfer_job_new (13, &f->keys[20], &s, 1, TRUE, request);

    g_assert_true (kv_secondary_tier_submit_load (st, job, &error));
  }
  g_assert_true (kv_secondary_tier_has_pending_work (st));
  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (f->tier), FALSE);
  g_assert_true (kv_secondary_tier_drain_jobs (st, &error));
  results = kv_secondary_tier_get_finished_jobs (st);
  for (; results[n] != NULL; n++)
    {
      guint64 id = kv_job_result_get_job_id (results[n]);

      g_assert_cmpuint (id, >=, 10);
      g_assert_cmpuint (id, <=, 13);
      g_assert_false (seen[id - 10]);
      seen[id - 10] = TRUE;
      g_assert_true (kv_job_result_get_success (results[n]) == (id != 13));
      kv_job_result_unref (results[n]);
    }
  g_free (results);
  g_assert_cmpuint (n, ==, 4);
  g_assert_false (kv_secondary_tier_has_pending_work (st));
  /* drained once */
  results = kv_secondary_tier_get_finished_jobs (st);
  g_assert_null (results[0]);
  g_free (results);
}

/* A short file (reference #49176): deleted on the failed load; the same
 * request gets a MISS without a retry, so does a fresh one. */
static void
test_short_read_no_livelock (Fixture       *f,
                             gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("short", NULL);
  g_autofree char *path = chunk_path (f, 0);
  g_autoptr(KvJobResult) loaded = NULL;

  store_ok (f, 0, 1);
  g_assert_cmpint (truncate (path, 100), ==, 0);
  g_assert_cmpint (lookup (f, 0, request), ==, KV_LOOKUP_RESULT_HIT);
  loaded = load_range (f, 0, 1, request);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 1);
  g_assert_cmpint (lookup (f, 0, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_MISS);
}

/* ELOOP (the chunk is a symlink) or EIO: a transient error, the file
 * stays; the failing request does not retry, a fresh request may. */
static void
test_transient_error_keeps_file (Fixture       *f,
                                 gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("eloop", NULL);
  g_autofree char *path = chunk_path (f, 0);
  g_autofree char *moved = g_strdup_printf ("%s.real", path);
  g_autoptr(KvJobResult) loaded = NULL;

  store_ok (f, 0, 1);
  g_assert_cmpint (g_rename (path, moved), ==, 0);
  g_assert_cmpint (symlink (moved, path), ==, 0);
  loaded = load_range (f, 0, 1, request);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_true (g_file_test (path, G_FILE_TEST_IS_SYMLINK));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_IO_ERRORS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 0);
  /* the verdicts are applied on the next poll */
  g_free (kv_secondary_tier_get_finished_jobs (KV_SECONDARY_TIER (f->tier)));
  g_assert_cmpint (lookup (f, 0, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);

  /* EIO: the same */
  {
    g_autoptr(KvRequest) other = kv_request_new ("eio", NULL);
    g_autoptr(KvJobResult) failed = NULL;
    g_autofree char *path1 = chunk_path (f, 1);

    store_ok (f, 1, 1);
    kv_fs_engine_inject_error (kv_fs_tier_get_engine (f->tier), KV_FS_OP_LOAD, EIO, 1);
    failed = load_range (f, 1, 1, other);
    g_assert_false (kv_job_result_get_success (failed));
    g_assert_true (g_file_test (path1, G_FILE_TEST_EXISTS));
    g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_IO_ERRORS), ==, 2);
    g_free (kv_secondary_tier_get_finished_jobs (KV_SECONDARY_TIER (f->tier)));
    g_assert_cmpint (lookup (f, 1, other), ==, KV_LOOKUP_RESULT_MISS);
    g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_HIT);
  }
}

static void
test_checksum_failure (Fixture       *f,
                       gconstpointer  data)
{
  g_autofree char *path = chunk_path (f, 0);
  g_autofree char *contents = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  gsize length = 0;

  store_ok (f, 0, 1);
  g_assert_true (g_file_get_contents (path, &contents, &length, NULL));
  contents[length - 10] ^= 0x80;
  g_assert_true (g_file_set_contents (path, contents, length, NULL));
  loaded = load_range (f, 0, 1, NULL);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_true (kv_job_result_get_checksum_failed (loaded));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_CHECKSUM_FAILURES), ==, 1);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_MISS);

  /* counted in the tier's metrics, reported once */
  {
    const char *labels[] = { "fs", NULL };
    g_autoptr(KvStats) stats = kv_secondary_tier_get_stats (KV_SECONDARY_TIER (f->tier));
    g_autoptr(KvStats) again = NULL;
    g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
    g_autoptr(GError) error = NULL;
    gdouble v = 0;

    g_assert_true (kv_stats_lookup (stats, "kvtier_fs_corrupt_chunks", labels, &v));
    g_assert_cmpfloat (v, ==, 1);
    g_assert_true (kv_stats_lookup (stats, "kvtier_fs_checksum_failures", labels, &v));
    g_assert_cmpfloat (v, ==, 1);
    g_assert_true (kv_stats_lookup (stats, "kvtier_fs_stored_chunks", labels, &v));
    g_assert_cmpfloat (v, ==, 1);
    again = kv_secondary_tier_get_stats (KV_SECONDARY_TIER (f->tier));
    g_assert_false (kv_stats_lookup (again, "kvtier_fs_corrupt_chunks", labels, &v));
    g_assert_true (kv_secondary_tier_register_metrics (KV_SECONDARY_TIER (f->tier), registry, &error));
    g_assert_no_error (error);
    g_assert_true (kv_metric_registry_has_metric (registry, "kvtier_fs_corrupt_chunks"));
    g_assert_true (kv_metric_registry_has_metric (registry, "kvtier_fs_no_space_errors"));
  }
}

/* The payload checksum a chunk file's header holds. */
static guint64
header_payload_checksum (Fixture *f,
                         guint    key)
{
  g_autofree char *path = chunk_path (f, key);
  g_autofree char *contents = NULL;
  gsize length = 0;
  guint64 le;

  g_assert_true (g_file_get_contents (path, &contents, &length, NULL));
  g_assert_cmpuint (length, >=, KV_CHUNK_HEADER_SIZE);
  memcpy (&le, contents + KV_CHUNK_OFF_PAYLOAD_XXH3, sizeof le);
  return GUINT64_FROM_LE (le);
}

/* The checksum a slot carries (computed as the chunk came into the
 * primary) goes into the header as it is: the store does not read the
 * payload for it. A deliberately wrong one shows it — hashing the payload
 * again would have written the right one — and the load catches it. A
 * slot without one gets the payload's. A load verified against its
 * header leaves the checksum with the slot it filled. */
static void
test_carried_checksum (Fixture       *f,
                       gconstpointer  data)
{
  const FsVariant *v = data;
  gboolean header = v->layout == KV_FS_LAYOUT_KIND_KVTIER;
  const guint32 slots[] = { 0, 1, 2 };
  guint64 right, wrong, carried = 0;
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvJobResult) bad = NULL;

  for (guint i = 0; i < 3; i++)
    test_chunk_fill_slot (f->buffer, i, i);
  right = kv_chunk_checksum (slot (f, 0), FS_TEST_SLOT);
  wrong = kv_chunk_checksum (slot (f, 1), FS_TEST_SLOT) ^ G_GUINT64_CONSTANT (0x5a5a);
  kv_host_buffer_set_slot_checksum (f->buffer, 0, right);
  kv_host_buffer_set_slot_checksum (f->buffer, 1, wrong);
  stored = test_tier_run_job (f->tier, f->next_id++, FALSE, f->keys, slots, 3, NULL);
  g_assert_true (kv_job_result_get_success (stored));

  if (header)
    {
      g_assert_cmpuint (header_payload_checksum (f, 0), ==, right);
      g_assert_cmpuint (header_payload_checksum (f, 1), ==, wrong);
      g_assert_cmpuint (header_payload_checksum (f, 2), ==,
                        kv_chunk_checksum (slot (f, 2), FS_TEST_SLOT));
    }

  /* slot 8 carries something stale: the load replaces or forgets it */
  kv_host_buffer_set_slot_checksum (f->buffer, 8, 1);
  kv_host_buffer_clear_slot_checksum (f->buffer, 8);
  loaded = load_range (f, 0, 1, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_true (test_chunk_check (slot (f, 8), FS_TEST_SLOT, 0));
  if (header)
    {
      g_assert_true (kv_host_buffer_get_slot_checksum (f->buffer, 8, &carried));
      g_assert_cmpuint (carried, ==, right);
    }
  else
    g_assert_false (kv_host_buffer_get_slot_checksum (f->buffer, 8, NULL));

  /* (the primary tier forgets a slot's checksum as it hands the slot
   * to a load) */
  kv_host_buffer_clear_slot_checksum (f->buffer, 8);
  bad = load_range (f, 1, 1, NULL);
  if (header)
    {
      g_autofree char *path = chunk_path (f, 1);

      g_assert_false (kv_job_result_get_success (bad));
      g_assert_true (kv_job_result_get_checksum_failed (bad));
      g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
      g_assert_false (kv_host_buffer_get_slot_checksum (f->buffer, 8, NULL));
    }
  else
    g_assert_true (kv_job_result_get_success (bad));
}

/* Without verify, a loaded payload was never checked against its header:
 * the slot does not carry the header's checksum. */
static void
test_unverified_load_carries_nothing (Fixture       *f,
                                      gconstpointer  data)
{
  g_autoptr(KvJobResult) loaded = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "verify", FALSE, NULL);
  store_ok (f, 0, 1);
  loaded = load_range (f, 0, 1, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_false (kv_host_buffer_get_slot_checksum (f->buffer, 8, NULL));
}

static guint
count_events (Fixture  *f,
              gboolean  removed,
              guint     expected_keys)
{
  KvEvent **events = kv_secondary_tier_take_events (KV_SECONDARY_TIER (f->tier));
  guint n = 0;

  for (guint i = 0; events != NULL && events[i] != NULL; i++)
    {
      guint n_keys = 0;

      g_assert_cmpint (kv_event_get_medium (events[i]), ==, KV_MEDIUM_STORAGE);
      g_assert_cmpint (kv_event_get_locality (events[i]), ==,
                       kv_secondary_tier_get_locality (KV_SECONDARY_TIER (f->tier)));
      kv_event_get_keys (events[i], &n_keys);
      if (kv_event_get_removed (events[i]) == removed)
        {
          g_assert_cmpuint (n_keys, ==, expected_keys);
          n++;
        }
      kv_event_unref (events[i]);
    }
  g_free (events);
  return n;
}

static void
test_events (Fixture       *f,
             gconstpointer  data)
{
  g_autoptr(KvJobResult) partial = NULL;
  g_autoptr(KvJobResult) failed = NULL;
  g_autoptr(KvJobResult) loaded = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data,
                              "enable-events", TRUE, "locality", KV_LOCALITY_LOCAL, NULL);
  /* one stored event per successful store job, with its keys */
  g_assert_cmpint (kv_secondary_tier_get_locality (KV_SECONDARY_TIER (f->tier)), ==, KV_LOCALITY_LOCAL);
  store_ok (f, 0, 3);
  g_assert_cmpuint (count_events (f, FALSE, 3), ==, 1);
  /* drained once */
  g_assert_cmpuint (count_events (f, FALSE, 3), ==, 0);
  /* none for loads */
  loaded = load_range (f, 0, 2, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_cmpuint (count_events (f, FALSE, 2), ==, 0);
  /* none for a failed store or a partially failed one */
  kv_fs_engine_inject_error (kv_fs_tier_get_engine (f->tier), KV_FS_OP_STORE, EIO, 1);
  failed = store_range (f, 5, 1, NULL);
  g_assert_false (kv_job_result_get_success (failed));
  kv_fs_engine_inject_error (kv_fs_tier_get_engine (f->tier), KV_FS_OP_STORE, EIO, 1);
  partial = store_range (f, 6, 3, NULL);
  g_assert_false (kv_job_result_get_success (partial));
  g_assert_cmpuint (count_events (f, FALSE, 3), ==, 0);
}

static void
test_events_off_by_default (Fixture       *f,
                            gconstpointer  data)
{
  KvEvent **events;

  store_ok (f, 0, 2);
  events = kv_secondary_tier_take_events (KV_SECONDARY_TIER (f->tier));
  g_assert_true (events == NULL || events[0] == NULL);
  g_free (events);
}

/* Shutdown reports every job (queued ones failed) and stops the threads. */
static void
test_shutdown_reports_queued (Fixture       *f,
                              gconstpointer  data)
{
  KvSecondaryTier *st = KV_SECONDARY_TIER (f->tier);
  g_autoptr(KvRequest) request = kv_request_new ("bye", NULL);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;
  KvFsEngine *engine = kv_fs_tier_get_engine (f->tier);
  guint n = 0;

  kv_fs_engine_set_stalled (engine, TRUE);
  for (guint j = 0; j < 3; j++)
    {
      guint32 s = j;
      g_autoptr(KvTransferJob) job = kv_transfer_job_new (j + 1, &f->keys[j], &s, 1, FALSE, request);

      g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
    }
  g_assert_cmpuint (kv_fs_engine_get_n_queued (engine), ==, 3);
  fs_test_shutdown (f->tier);
  g_assert_cmpuint (kv_fs_engine_get_n_queued (engine), ==, 0);
  g_assert_cmpuint (kv_fs_engine_get_n_running (engine), ==, 0);
  g_assert_false (kv_secondary_tier_has_pending_work (st));
  results = kv_secondary_tier_get_finished_jobs (st);
  for (; results[n] != NULL; n++)
    {
      g_assert_false (kv_job_result_get_success (results[n]));
      kv_job_result_unref (results[n]);
    }
  g_free (results);
  g_assert_cmpuint (n, ==, 3);
  g_assert_cmpuint (test_dir_count_files (f->root, ".kv"), ==, 0);
  g_assert_cmpuint (test_dir_count_files (f->root, ".tmp"), ==, 0);
}

typedef struct
{
  KvSecondaryTier *tier;
  gint             returned;
} DrainData;

static gpointer
drain_thread (gpointer user_data)
{
  DrainData *d = user_data;

  g_assert_true (kv_secondary_tier_drain_jobs (d->tier, NULL));
  g_atomic_int_set (&d->returned, TRUE);
  return NULL;
}

/* drain_jobs blocks until the job it waits for is done (wait_idle). */
static void
test_drain_waits (Fixture       *f,
                  gconstpointer  data)
{
  KvSecondaryTier *st = KV_SECONDARY_TIER (f->tier);
  g_autoptr(KvRequest) request = kv_request_new ("drain", NULL);
  g_autoptr(GError) error = NULL;
  guint32 s = 0;
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (1, f->keys, &s, 1, FALSE, request);
  DrainData d = { st, FALSE };
  KvJobResult **results;
  GThread *thread;

  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (f->tier), TRUE);
  g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
  thread = g_thread_new ("drain", drain_thread, &d);
  /* the job cannot finish while the engine is stalled */
  g_assert_false (g_atomic_int_get (&d.returned));
  results = kv_secondary_tier_get_finished_jobs (st);
  g_assert_null (results[0]);
  g_free (results);
  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (f->tier), FALSE);
  g_thread_join (thread);
  g_assert_true (g_atomic_int_get (&d.returned));
  results = kv_secondary_tier_get_finished_jobs (st);
  g_assert_nonnull (results[0]);
  g_assert_null (results[1]);
  kv_job_result_unref (results[0]);
  g_free (results);
}

/* shared=true: existence checked in batches off the owner thread,
 * RETRY until known (the reference's batch_lookup). */
static KvLookupResult
resolve (Fixture   *f,
         guint      key,
         KvRequest *request)
{
  KvLookupResult r = lookup (f, key, request);

  for (guint i = 0; r == KV_LOOKUP_RESULT_RETRY && i < 30000; i++)
    {
      g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

      kv_secondary_tier_on_schedule_end (KV_SECONDARY_TIER (f->tier), end);
      if (kv_secondary_tier_has_pending_work (KV_SECONDARY_TIER (f->tier)))
        g_usleep (1000);
      r = lookup (f, key, request);
    }
  return r;
}

static void
test_shared_batch_lookup (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("shared", NULL);
  g_autoptr(KvJobResult) loaded = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "shared", TRUE, NULL);
  store_ok (f, 0, 2);
  g_assert_cmpint (lookup (f, 0, request), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (lookup (f, 5, request), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (resolve (f, 0, request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (resolve (f, 5, request), ==, KV_LOOKUP_RESULT_MISS);
  /* another writer's chunk: a shared store skips it */
  store_ok (f, 1, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SKIPPED_CHUNKS), ==, 1);
  loaded = load_range (f, 0, 2, request);
  g_assert_true (kv_job_result_get_success (loaded));
  kv_secondary_tier_on_request_finished (KV_SECONDARY_TIER (f->tier), request);
}

/* ---- construction errors ------------------------------------------------ */

static void
test_unwritable_root (Fixture       *f,
                      gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *file = g_build_filename (f->root, "a-file", NULL);
  g_autofree char *root = g_build_filename (file, "sub", NULL);
  KvFsTier *tier;

  g_assert_true (g_file_set_contents (file, "x", 1, NULL));
  /* root cannot be created (its parent is a file; running as root,
   * permission bits would not stop us) */
  tier = fs_test_tier_new_full (f->buffer, root, data, NULL, &error, NULL);
  g_assert_null (tier);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_DIRECTORY);
  g_assert_nonnull (strstr (error->message, root));
}

static void
test_bad_combinations (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  FsVariant vllm = *(const FsVariant *) data;
  KvFsTier *tier;

  tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                "shared", TRUE, "max-size", (guint64) 1 << 20, NULL);
  g_assert_null (tier);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "shared"));
  g_clear_error (&error);

  tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                "vllm-identity", "{}", NULL);
  g_assert_null (tier);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  vllm.layout = KV_FS_LAYOUT_KIND_VLLM;
  tier = fs_test_tier_new_full (f->buffer, f->root, &vllm, NULL, &error,
                                "vllm-identity", NULL, NULL);
  g_assert_null (tier);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "vllm-identity"));
  g_clear_error (&error);

  tier = fs_test_tier_new_full (f->buffer, "", data, NULL, &error, NULL);
  g_assert_null (tier);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "root"));
  g_clear_error (&error);

  tier = fs_test_tier_new_full (NULL, f->root, data, NULL, &error, NULL);
  g_assert_null (tier);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "primary"));
}

static void
test_buffered_when_off (Fixture       *f,
                        gconstpointer  data)
{
  FsVariant off = *(const FsVariant *) data;
  g_autoptr(KvJobResult) loaded = NULL;

  off.o_direct = KV_FS_O_DIRECT_OFF;
  f->tier = fs_test_tier_new (f->buffer, f->root, &off, NULL);
  g_assert_false (kv_fs_tier_get_o_direct (f->tier, 0));
  store_ok (f, 0, 2);
  loaded = load_range (f, 0, 2, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_true (test_chunk_check (slot (f, 9), FS_TEST_SLOT, 1));
}

static void
test_o_direct_on (Fixture       *f,
                  gconstpointer  data)
{
  FsVariant on = *(const FsVariant *) data;

  on.o_direct = KV_FS_O_DIRECT_ON;
  /* /tmp here is ext4, which supports O_DIRECT */
  f->tier = fs_test_tier_new (f->buffer, f->root, &on, NULL);
  g_assert_true (kv_fs_tier_get_o_direct (f->tier, 0));
}

static void
test_durability_modes (Fixture       *f,
                       gconstpointer  data)
{
  static const KvFsDurability modes[] = {
    KV_FS_DURABILITY_NONE, KV_FS_DURABILITY_DATA, KV_FS_DURABILITY_FULL,
  };

  for (guint m = 0; m < G_N_ELEMENTS (modes); m++)
    {
      g_autoptr(KvJobResult) loaded = NULL;

      f->tier = fs_test_tier_new (f->buffer, f->root, data, "durability", modes[m], NULL);
      store_ok (f, 3 * m, 3);
      loaded = load_range (f, 3 * m, 3, NULL);
      g_assert_true (kv_job_result_get_success (loaded));
      g_assert_true (test_chunk_check (slot (f, 10), FS_TEST_SLOT, 3 * m + 2));
      fs_test_shutdown (f->tier);
      g_clear_object (&f->tier);
    }
}

/* ---- capacity ----------------------------------------------------------- */

static void
test_max_size_lru (Fixture       *f,
                   gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 3 * file,
                              "enable-events", TRUE, NULL);
  store_ok (f, 0, 1);
  store_ok (f, 1, 1);
  store_ok (f, 2, 1);
  g_assert_cmpuint (count_events (f, TRUE, 1), ==, 0);
  /* key 0 used again: 1 is the least recently used */
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);
  store_ok (f, 3, 1);
  g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (count_events (f, TRUE, 1), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), <=, 3 * file);
  /* the delete runs on the engine; the next drain sees it done */
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  store_ok (f, 4, 1);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  g_assert_cmpuint (count_chunk_files (f, v), <=, 3 + 1);
}

/* A full tier overwrites the file of the chunk it evicts instead of
 * deleting it and creating another: the new chunk's file is the victim's
 * inode, cut to the chunk's size (this victim was made longer behind the
 * tier's back), and nothing else is left behind. */
static void
test_evicted_file_reused (Fixture       *f,
                          gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);
  g_autofree char *victim = NULL;
  g_autofree char *stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  struct stat before, after;
  FILE *longer;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 2 * file,
                              "enable-events", TRUE, NULL);
  store_ok (f, 0, 1);
  store_ok (f, 1, 1);
  victim = chunk_path (f, 0);
  longer = fopen (victim, "ab");
  g_assert_nonnull (longer);
  g_assert_cmpint (fputs ("a tail the new chunk must not keep", longer), >=, 0);
  g_assert_cmpint (fclose (longer), ==, 0);
  g_assert_cmpint (stat (victim, &before), ==, 0);
  g_assert_cmpuint (before.st_size, >, file);

  store_ok (f, 2, 1);      /* evicts key 0, the least recently used */
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_REUSED_FILES), ==, 1);
  g_assert_cmpuint (count_events (f, TRUE, 1), ==, 1);
  g_assert_false (g_file_test (victim, G_FILE_TEST_EXISTS));
  stored = chunk_path (f, 2);
  g_assert_cmpint (stat (stored, &after), ==, 0);
  g_assert_cmpuint (after.st_ino, ==, before.st_ino);
  g_assert_cmpuint (after.st_size, ==, file);
  g_assert_cmpuint (test_dir_count_files (f->root, ".tmp"), ==, 0);
  g_assert_cmpuint (count_chunk_files (f, v), ==, 2);

  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_MISS);
  loaded = load_range (f, 2, 1, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_true (test_chunk_check (slot (f, 8), FS_TEST_SLOT, 2));
  /* the evicted key can be stored again, into a file of its own */
  store_ok (f, 0, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_REUSED_FILES), ==, 2);
}

/* A store that never runs (here: an injected failure) leaves no file of
 * the chunk it evicted behind: the victim's file is deleted instead. */
static void
test_unused_victim_deleted (Fixture       *f,
                            gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);
  g_autofree char *victim = NULL;
  g_autoptr(KvJobResult) failed = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 2 * file, NULL);
  store_ok (f, 0, 1);
  store_ok (f, 1, 1);
  victim = chunk_path (f, 0);
  kv_fs_engine_inject_error (kv_fs_tier_get_engine (f->tier), KV_FS_OP_STORE, EIO, 1);
  failed = store_range (f, 2, 1, NULL);
  g_assert_false (kv_job_result_get_success (failed));
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);

  g_assert_false (g_file_test (victim, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_REUSED_FILES), ==, 0);
  g_assert_cmpuint (count_chunk_files (f, v), ==, 1);
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 2, NULL), ==, KV_LOOKUP_RESULT_MISS);
  store_ok (f, 2, 1);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 2 * file);
}

/* Chains of one request: 0→1→2→3 (two jobs) and 4→5; the tails go
 * first and the long chain is peeled from its end. */
static void
test_max_size_chain (Fixture       *f,
                     gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);
  g_autoptr(KvRequest) a = kv_request_new ("a", NULL);
  g_autoptr(KvRequest) b = kv_request_new ("b", NULL);
  g_autoptr(KvJobResult) r1 = NULL;
  g_autoptr(KvJobResult) r2 = NULL;
  g_autoptr(KvJobResult) r3 = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 6 * file,
                              "eviction", KV_FS_EVICTION_CHAIN, NULL);
  r1 = store_range (f, 0, 2, a);
  r2 = store_range (f, 2, 2, a);   /* continues request a's chain */
  r3 = store_range (f, 4, 2, b);
  g_assert_true (kv_job_result_get_success (r1) && kv_job_result_get_success (r2) &&
                 kv_job_result_get_success (r3));
  /* the most recently used is 5, a tail; still 3 (a tail, older) goes
   * first, then its predecessor 2 */
  store_ok (f, 10, 2);
  g_assert_cmpint (lookup (f, 3, NULL), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 2, NULL), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 4, NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 5, NULL), ==, KV_LOOKUP_RESULT_HIT);
}

/* A chunk being read is never deleted under its reader. */
static void
test_no_eviction_under_reader (Fixture       *f,
                               gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);
  KvSecondaryTier *st;
  g_autoptr(KvRequest) request = kv_request_new ("reader", NULL);
  g_autoptr(GError) error = NULL;
  KvFsEngine *engine;
  KvJobResult **results;
  guint32 s = 12;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 2 * file, NULL);
  st = KV_SECONDARY_TIER (f->tier);
  engine = kv_fs_tier_get_engine (f->tier);
  store_ok (f, 0, 1);
  store_ok (f, 1, 1);
  kv_fs_engine_set_stalled (engine, TRUE);
  {
    g_autoptr(KvTransferJob) job = kv_transfer_job_new (100, f->keys, &s, 1, TRUE, request);

    g_assert_true (kv_secondary_tier_submit_load (st, job, &error));
  }
  /* key 0 is the oldest but pinned: key 1 goes */
  {
    guint32 s2 = 2;
    g_autoptr(KvTransferJob) job = kv_transfer_job_new (101, &f->keys[2], &s2, 1, FALSE, request);

    test_chunk_fill_slot (f->buffer, 2, 2);
    g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
  }
  g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_MISS);
  kv_fs_engine_set_stalled (engine, FALSE);
  g_assert_true (kv_secondary_tier_drain_jobs (st, &error));
  results = kv_secondary_tier_get_finished_jobs (st);
  for (guint i = 0; results[i] != NULL; i++)
    {
      g_assert_true (kv_job_result_get_success (results[i]));
      kv_job_result_unref (results[i]);
    }
  g_free (results);
  g_assert_true (test_chunk_check (slot (f, 12), FS_TEST_SLOT, 0));
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);
}

/* ---- warm restart, multi-root ------------------------------------------- */

static void
test_warm_restart (Fixture       *f,
                   gconstpointer  data)
{
  const FsVariant *v = data;
  g_autoptr(KvRequest) request = kv_request_new ("restart", NULL);
  g_autoptr(KvJobResult) loaded = NULL;
  g_autofree char *path = NULL;
  g_autofree char *stale = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  store_ok (f, 0, 5);
  path = chunk_path (f, 0);
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);
  /* a crash of another instance left a temporary file (its name: the
   * final name, the instance's tag, a random number) */
  stale = g_strdup_printf ("%s_%016x-%08x.tmp", path, 0x1234u, 0x5678u);
  g_assert_true (g_file_set_contents (stale, "partial", 7, NULL));

  kv_fs_tier_hold_scans (TRUE);
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  g_assert_false (kv_fs_tier_is_index_ready (f->tier));
  /* during the scan a lookup asks the disk, off the owner thread */
  g_assert_cmpint (lookup (f, 1, request), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (resolve (f, 1, request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (resolve (f, 7, request), ==, KV_LOOKUP_RESULT_MISS);
  kv_fs_tier_hold_scans (FALSE);
  kv_fs_tier_wait_index_ready (f->tier);
  g_assert_true (kv_fs_tier_is_index_ready (f->tier));
  kv_secondary_tier_on_request_finished (KV_SECONDARY_TIER (f->tier), request);

  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SCANNED_CHUNKS), ==, 5);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_TEMP_FILES_REMOVED), ==, 1);
  g_assert_false (g_file_test (stale, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (f->tier), ==, 5);
  for (guint i = 0; i < 5; i++)
    g_assert_cmpint (lookup (f, i, NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 7, NULL), ==, KV_LOOKUP_RESULT_MISS);
  loaded = load_range (f, 0, 5, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  for (guint i = 0; i < 5; i++)
    g_assert_true (test_chunk_check (slot (f, 8 + i), FS_TEST_SLOT, i));
  (void) v;
}

/* A restart with a smaller max-size trims the oldest chunks. */
static void
test_restart_trims (Fixture       *f,
                    gconstpointer  data)
{
  guint64 file = FS_TEST_SLOT + 4096;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  store_ok (f, 0, 6);
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 4 * file, NULL);
  kv_fs_tier_wait_index_ready (f->tier);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 2);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (f->tier), <=, 4);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), <=, 4 * file);
}

static void
test_multi_root (Fixture       *f,
                 gconstpointer  data)
{
  g_autofree char *a = g_build_filename (f->root, "drive-a", NULL);
  g_autofree char *b = g_build_filename (f->root, "drive-b", NULL);
  g_autofree char *roots = g_strdup_printf ("%s,%s", a, b);
  g_autoptr(KvJobResult) loaded = NULL;
  guint on_a = 0;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "root", roots,
                              "inflight-bytes", (guint64) 2 * FS_TEST_SLOT, NULL);
  store_ok (f, 0, 8);
  for (guint i = 0; i < 8; i++)
    {
      g_autofree char *path = chunk_path (f, i);
      const guint8 *hash = kv_key_get_hash (f->keys[i], NULL);
      /* (big-endian hash) mod 2 is the parity of its last byte */
      guint sum = hash[31];

      g_assert_true (g_str_has_prefix (path, sum % 2 == 0 ? a : b));
      g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
      on_a += sum % 2 == 0;
    }
  g_assert_cmpuint (on_a, >, 0);
  g_assert_cmpuint (on_a, <, 8);
  loaded = load_range (f, 0, 8, NULL);
  g_assert_true (kv_job_result_get_success (loaded));

  /* restart: both roots are scanned */
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);
  f->tier = fs_test_tier_new (f->buffer, f->root, data, "root", roots, NULL);
  kv_fs_tier_wait_index_ready (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (f->tier), ==, 8);
}

/* Two tiers (two processes, two primaries) with the same vLLM identity
 * share paths and bytes: one writes, the other reads (cross-TP with a
 * replicated layout uses rank 0 on both sides). */
static void
test_vllm_cross_instance (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) other = kv_host_buffer_new (4, FS_TEST_SLOT, &error);
  g_autoptr(KvFsTier) reader = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autofree char *wpath = NULL;
  g_autofree char *rpath = NULL;
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  guint32 s = 3;

  g_assert_no_error (error);
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  store_ok (f, 0, 2);
  reader = fs_test_tier_new (other, f->root, data, "shared", TRUE, NULL);
  wpath = chunk_path (f, 1);
  rpath = kv_fs_tier_get_chunk_path (reader, f->keys[1]);
  g_assert_cmpstr (wpath, ==, rpath);
  loaded = test_tier_run_job (reader, 1, TRUE, &f->keys[1], &s, 1, request);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (other, 3), FS_TEST_SLOT, 1));
  fs_test_shutdown (reader);
}

/* ---- vLLM's file checksum ---------------------------------------------- */

#define VLLM_CRC_XATTR "user.vllm.kv_crc32c"

/* CRC32C bit by bit, as its definition says (reflected 0x82F63B78,
 * initial value and final xor all ones): independent of the tier's. */
static guint32
reference_crc32c (const guint8 *p,
                  gsize         len)
{
  guint32 crc = 0xffffffffu;

  while (len-- > 0)
    {
      crc ^= *p++;
      for (guint k = 0; k < 8; k++)
        crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
  return ~crc;
}

static void
set_crc_xattr (const char *path,
               guint32     crc)
{
  guint8 be[4] = { crc >> 24, crc >> 16, crc >> 8, crc };

  g_assert_cmpint (setxattr (path, VLLM_CRC_XATTR, be, sizeof be, 0), ==, 0);
}

/* Whether the test directory keeps user extended attributes (tmpfs does
 * only on newer kernels); the test is skipped, saying so, where not. */
static gboolean
xattrs_supported (Fixture *f)
{
  g_autofree char *probe = g_build_filename (f->root, "xattr-probe", NULL);
  gboolean ok;

  g_assert_true (g_file_set_contents (probe, "", 0, NULL));
  ok = setxattr (probe, "user.kvtier-test", "1", 1, 0) == 0;
  if (!ok)
    {
      g_autofree char *why = g_strdup_printf ("%s keeps no user extended attributes: %s",
                                              f->root, g_strerror (errno));

      g_assert_cmpint (errno, ==, ENOTSUP);
      g_test_skip (why);
    }
  g_unlink (probe);
  return ok;
}

/* The vLLM layout stores every file with vLLM's checksum attribute: the
 * CRC32C of the file, 4 bytes big-endian; the kvtier layout, whose
 * headers hold its checksums, does not. A file without the attribute
 * loads; a file whose attribute does not match is deleted and its load
 * fails, counted. */
static void
test_vllm_file_checksum (Fixture       *f,
                         gconstpointer  data)
{
  const FsVariant *v = data;
  g_autofree char *path0 = NULL;
  g_autofree char *path1 = NULL;
  g_autofree char *path2 = NULL;
  g_autofree char *contents = NULL;
  guint8 value[8];
  gsize length = 0;
  ssize_t n;

  if (!xattrs_supported (f))
    return;
  store_ok (f, 0, 3);
  path0 = chunk_path (f, 0);
  path1 = chunk_path (f, 1);
  path2 = chunk_path (f, 2);
  n = getxattr (path0, VLLM_CRC_XATTR, value, sizeof value);
  if (v->layout == KV_FS_LAYOUT_KIND_KVTIER)
    {
      g_assert_cmpint (n, ==, -1);
      g_assert_cmpint (errno, ==, ENODATA);
      return;
    }

  /* what a vLLM reader checks: the whole file's CRC32C, big-endian */
  g_assert_cmpint (n, ==, 4);
  g_assert_true (g_file_get_contents (path0, &contents, &length, NULL));
  g_assert_cmpuint (length, ==, FS_TEST_SLOT);
  g_assert_cmpuint (((guint32) value[0] << 24) | ((guint32) value[1] << 16) |
                    ((guint32) value[2] << 8) | value[3], ==,
                    reference_crc32c ((const guint8 *) contents, length));

  /* without the attribute (a vLLM with checksums off wrote it): loads */
  g_assert_cmpint (removexattr (path0, VLLM_CRC_XATTR), ==, 0);
  {
    g_autoptr(KvJobResult) loaded = load_range (f, 0, 1, NULL);

    g_assert_true (kv_job_result_get_success (loaded));
    g_assert_true (test_chunk_check (slot (f, 8), FS_TEST_SLOT, 0));
  }

  /* a wrong checksum: deleted, load failed, counted */
  set_crc_xattr (path1, reference_crc32c ((const guint8 *) contents, length) ^ 1);
  {
    g_autoptr(KvJobResult) loaded = load_range (f, 1, 1, NULL);

    g_assert_false (kv_job_result_get_success (loaded));
    g_assert_true (kv_job_result_get_checksum_failed (loaded));
    g_assert_false (g_file_test (path1, G_FILE_TEST_EXISTS));
    g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_CHECKSUM_FAILURES), ==, 1);
    g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 1);
    g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_MISS);
  }

  /* an attribute that is no 4-byte checksum is a damaged one */
  g_assert_cmpint (setxattr (path2, VLLM_CRC_XATTR, "12345", 5, 0), ==, 0);
  {
    g_autoptr(KvJobResult) loaded = load_range (f, 2, 1, NULL);

    g_assert_false (kv_job_result_get_success (loaded));
    g_assert_false (g_file_test (path2, G_FILE_TEST_EXISTS));
    g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_CHECKSUM_FAILURES), ==, 2);
  }
}

/* Files a vLLM with `checksum_blocks` on wrote into the shared directory
 * (the payload, then the attribute on the file, as the reference
 * describes): kvtier reads the good one and deletes the damaged one. */
static void
test_vllm_written_checksum (Fixture       *f,
                            gconstpointer  data)
{
  g_autofree guint8 *payload = g_malloc (FS_TEST_SLOT);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autofree char *good = NULL;
  g_autofree char *bad = NULL;
  guint32 slots[] = { 4, 5 };

  if (!xattrs_supported (f))
    return;
  f->tier = fs_test_tier_new (f->buffer, f->root, data, "shared", TRUE, NULL);
  good = chunk_path (f, 6);
  bad = chunk_path (f, 7);
  for (guint k = 0; k < 2; k++)
    {
      const char *path = k == 0 ? good : bad;

      test_chunk_fill (payload, FS_TEST_SLOT, 6 + k);
      fs_test_make_parent (path);
      g_assert_true (g_file_set_contents (path, (const char *) payload, FS_TEST_SLOT, NULL));
      g_assert_cmpint (chmod (path, 0600), ==, 0);
      set_crc_xattr (path, reference_crc32c (payload, FS_TEST_SLOT) ^ (k == 0 ? 0 : 0x100));
    }

  {
    g_autoptr(KvJobResult) loaded = test_tier_run_job (f->tier, f->next_id++, TRUE, &f->keys[6],
                                                     &slots[0], 1, request);

    g_assert_true (kv_job_result_get_success (loaded));
    g_assert_true (test_chunk_check (slot (f, 4), FS_TEST_SLOT, 6));
  }
  {
    g_autoptr(KvJobResult) loaded = test_tier_run_job (f->tier, f->next_id++, TRUE, &f->keys[7],
                                                     &slots[1], 1, request);

    g_assert_false (kv_job_result_get_success (loaded));
    g_assert_true (kv_job_result_get_checksum_failed (loaded));
    g_assert_false (g_file_test (bad, G_FILE_TEST_EXISTS));
    g_assert_true (g_file_test (good, G_FILE_TEST_EXISTS));
  }
}

/* ---- preallocate -------------------------------------------------------- */

/* Appends to @out the paths of the files in every spare directory under
 * @dir (each root has one under its chunk directory). */
static void
collect_spares (const char *dir,
                gboolean    in_spare_dir,
                GPtrArray  *out)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      char *child = g_build_filename (dir, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR))
        {
          collect_spares (child, g_str_equal (name, ".kvtier-spare"), out);
          g_free (child);
        }
      else if (in_spare_dir)
        g_ptr_array_add (out, child);
      else
        g_free (child);
    }
}

static GPtrArray *
spare_files (const char *dir)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);

  collect_spares (dir, FALSE, out);
  return out;
}

/* Counts the spare files written (IN_MODIFY) and renamed away
 * (IN_MOVED_FROM) in the directory watched by inotify descriptor @fd
 * since the last call. */
static void
count_spare_events (int    fd,
                    guint *n_modified,
                    guint *n_moved)
{
  g_autoptr(GHashTable) modified = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  char buf[4096] __attribute__ ((aligned (__alignof__ (struct inotify_event))));
  ssize_t len;

  *n_moved = 0;
  while ((len = read (fd, buf, sizeof buf)) > 0)
    for (char *p = buf; p < buf + len;)
      {
        const struct inotify_event *event = (const struct inotify_event *) p;

        if ((event->mask & IN_MODIFY) && event->len > 0)
          g_hash_table_add (modified, g_strdup (event->name));
        if (event->mask & IN_MOVED_FROM)
          (*n_moved)++;
        p += sizeof *event + event->len;
      }
  *n_modified = g_hash_table_size (modified);
}

/* A new tier with preallocate writes spare files, whole, until they fill
 * max-size; its stores take them over (the chunk file is a spare's
 * inode) and evict only once they are gone. Chunks plus spares never
 * hold more than max-size. */
static void
test_preallocated_spares_taken_over (Fixture       *f,
                                     gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);
  g_autoptr(GPtrArray) spares = NULL;
  g_autoptr(GPtrArray) left = NULL;
  g_autoptr(GHashTable) inodes = g_hash_table_new (g_int64_hash, g_int64_equal);
  g_autoptr(KvJobResult) loaded = NULL;
  g_autofree char *spare_dir = NULL;
  gint64 spare_inodes[4];
  guint n_modified, n_moved;
  int watch;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 4 * file,
                              "preallocate", TRUE, NULL);
  kv_fs_tier_wait_preallocated (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 4);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_CREATED), ==, 4);
  spares = spare_files (f->root);
  g_assert_cmpuint (spares->len, ==, 4);
  for (guint i = 0; i < spares->len; i++)
    {
      struct stat st;

      g_assert_cmpint (stat (spares->pdata[i], &st), ==, 0);
      g_assert_cmpuint (st.st_size, ==, file);
      g_assert_cmpuint (st.st_mode & 0777, ==, 0600);
      spare_inodes[i] = st.st_ino;
      g_hash_table_add (inodes, &spare_inodes[i]);
    }
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 0);
  spare_dir = g_path_get_dirname (spares->pdata[0]);
  watch = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  g_assert_cmpint (watch, >=, 0);
  g_assert_cmpint (inotify_add_watch (watch, spare_dir, IN_MODIFY | IN_MOVED_FROM), >=, 0);

  store_ok (f, 0, 3);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  /* Each spare leaves its directory by one rename. In the kvtier layout
   * that rename publishes it: it was written where it lay. In vLLM's, it
   * goes to a temporary name first (the chunk's directory may not exist
   * yet), and is written there. */
  count_spare_events (watch, &n_modified, &n_moved);
  close (watch);
  g_assert_cmpuint (n_moved, ==, 3);
  g_assert_cmpuint (n_modified, ==, (v->layout == KV_FS_LAYOUT_KIND_VLLM ? 0 : 3));
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *path = chunk_path (f, i);
      struct stat st;
      gint64 ino;

      g_assert_cmpint (stat (path, &st), ==, 0);
      g_assert_cmpuint (st.st_size, ==, file);
      ino = st.st_ino;
      g_assert_true (g_hash_table_contains (inodes, &ino));
    }
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_USED), ==, 3);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 1);
  left = spare_files (f->root);
  g_assert_cmpuint (left->len, ==, 1);
  g_assert_cmpuint (test_dir_count_files (f->root, ".tmp"), ==, 0);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 3 * file);
  loaded = load_range (f, 0, 3, NULL);
  g_assert_true (kv_job_result_get_success (loaded));
  for (guint i = 0; i < 3; i++)
    g_assert_true (test_chunk_check (slot (f, 8 + i), FS_TEST_SLOT, i));

  /* the last spare, then the full tier evicts and takes the victim's file */
  store_ok (f, 3, 1);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 0);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
  store_ok (f, 4, 1);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_REUSED_FILES), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_USED), ==, 4);
  g_assert_cmpuint (count_chunk_files (f, v), ==, 4);
  g_clear_pointer (&left, g_ptr_array_unref);
  left = spare_files (f->root);
  g_assert_cmpuint (left->len, ==, 0);
}

/* A store given a spare that never runs (an injected failure) puts the
 * spare back, untouched, and its bytes are reserved again. */
static void
test_spare_back_after_failed_store (Fixture       *f,
                                    gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);
  g_autoptr(KvJobResult) failed = NULL;
  g_autoptr(GPtrArray) before = NULL;
  g_autoptr(GPtrArray) after = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 2 * file,
                              "preallocate", TRUE, NULL);
  kv_fs_tier_wait_preallocated (f->tier);
  before = spare_files (f->root);
  g_assert_cmpuint (before->len, ==, 2);
  kv_fs_engine_inject_error (kv_fs_tier_get_engine (f->tier), KV_FS_OP_STORE, EIO, 1);
  failed = store_range (f, 0, 1, NULL);
  g_assert_false (kv_job_result_get_success (failed));
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);

  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 2);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_USED), ==, 0);
  after = spare_files (f->root);
  g_assert_cmpuint (after->len, ==, 2);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 0);
  g_assert_cmpuint (count_chunk_files (f, v), ==, 0);
  /* both spares are still there for the next stores: no eviction */
  store_ok (f, 0, 2);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_USED), ==, 2);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
}

/* Room that no store fills (a chunk deleted as corrupt, a store that
 * failed after its victim was evicted) is filled again with a spare
 * file, so that the pool does not run dry over a long run and chunks
 * plus spares keep filling max-size. */
static void
test_preallocate_refill (Fixture       *f,
                         gconstpointer  data)
{
  const FsVariant *v = data;
  guint64 file = chunk_file_size (v);
  g_autofree char *path = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvJobResult) failed = NULL;
  g_autoptr(GPtrArray) spares = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 3 * file,
                              "preallocate", TRUE, NULL);
  path = chunk_path (f, 1);
  kv_fs_tier_wait_preallocated (f->tier);
  store_ok (f, 0, 3);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 0);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_CREATED), ==, 3);

  /* a short file: deleted on load, and a spare takes its room */
  g_assert_cmpint (truncate (path, 100), ==, 0);
  loaded = load_range (f, 1, 1, NULL);
  g_assert_false (kv_job_result_get_success (loaded));
  kv_fs_tier_wait_preallocated (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_CREATED), ==, 4);
  spares = spare_files (f->root);
  g_assert_cmpuint (spares->len, ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 2 * file);

  /* the next store takes it: nothing is evicted */
  store_ok (f, 3, 1);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_USED), ==, 4);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 0);

  /* a store that evicts a chunk and then fails leaves its room empty:
   * refilled too */
  kv_fs_engine_inject_error (kv_fs_tier_get_engine (f->tier), KV_FS_OP_STORE, EIO, 1);
  failed = store_range (f, 4, 1, NULL);
  g_assert_false (kv_job_result_get_success (failed));
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  kv_fs_tier_wait_preallocated (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_CREATED), ==, 5);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 2 * file);
  g_assert_cmpuint (count_chunk_files (f, v), ==, 2);
  g_clear_pointer (&spares, g_ptr_array_unref);
  spares = spare_files (f->root);
  g_assert_cmpuint (spares->len, ==, 1);
  g_assert_cmpuint (test_dir_count_files (f->root, ".tmp"), ==, 0);

  /* a full tier's steady state asks for no spare: each eviction is paid
   * back by its store */
  store_ok (f, 5, 3);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  kv_fs_tier_wait_preallocated (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_CREATED), ==, 5);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_USED), ==, 5);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 3 * file);
  g_assert_cmpuint (count_chunk_files (f, v), ==, 3);
}

/* Spares outlive the tier: the next one takes them over without writing
 * new ones, deletes a half-written spare and one of another size, and a
 * tier without preallocate deletes them all, directory included. */
static void
test_preallocate_restart (Fixture       *f,
                          gconstpointer  data)
{
  guint64 file = FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE;
  g_autoptr(GPtrArray) spares = NULL;
  g_autoptr(GPtrArray) after = NULL;
  g_autofree char *dir = NULL;
  g_autofree char *half = NULL;
  g_autofree char *odd = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 4 * file,
                              "preallocate", TRUE, NULL);
  kv_fs_tier_wait_preallocated (f->tier);
  store_ok (f, 0, 1);
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);

  spares = spare_files (f->root);
  g_assert_cmpuint (spares->len, ==, 3);
  dir = g_path_get_dirname (spares->pdata[0]);
  half = g_build_filename (dir, "7.tmp", NULL);
  odd = g_build_filename (dir, "8", NULL);
  g_assert_true (g_file_set_contents (half, "half", -1, NULL));
  g_assert_true (g_file_set_contents (odd, "another chunk size", -1, NULL));

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 4 * file,
                              "preallocate", TRUE, NULL);
  kv_fs_tier_wait_index_ready (f->tier);
  kv_fs_tier_wait_preallocated (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (f->tier), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 3);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_CREATED), ==, 0);
  g_assert_false (g_file_test (half, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (odd, G_FILE_TEST_EXISTS));
  after = spare_files (f->root);
  g_assert_cmpuint (after->len, ==, 3);
  for (guint i = 0; i < spares->len; i++)
    g_assert_true (g_file_test (spares->pdata[i], G_FILE_TEST_EXISTS));
  store_ok (f, 1, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SPARE_FILES_USED), ==, 1);
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);

  /* preallocate off: the spares go, the chunks stay */
  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 4 * file, NULL);
  kv_fs_tier_wait_index_ready (f->tier);
  kv_fs_tier_wait_preallocated (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 0);
  g_assert_false (g_file_test (dir, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (f->tier), ==, 2);
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_HIT);
}

/* Spares shrink to what the chunks found on disk leave of max-size. */
static void
test_preallocate_fills_what_is_left (Fixture       *f,
                                     gconstpointer  data)
{
  guint64 file = FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE;
  g_autoptr(GPtrArray) spares = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  store_ok (f, 0, 3);
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "max-size", 5 * file,
                              "preallocate", TRUE, NULL);
  kv_fs_tier_wait_preallocated (f->tier);
  g_assert_cmpuint (kv_fs_tier_get_n_chunks (f->tier), ==, 3);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 2);
  spares = spare_files (f->root);
  g_assert_cmpuint (spares->len, ==, 2);
}

/* With two roots the spares are split between them. A store on a root
 * that has none left, in a full tier, deletes a spare of the other root
 * rather than evict a chunk: chunks plus spares stay within max-size,
 * and nothing is evicted until every spare is gone. */
static void
test_preallocate_multi_root (Fixture       *f,
                             gconstpointer  data)
{
  guint64 file = FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE;
  g_autofree char *a = g_build_filename (f->root, "drive-a", NULL);
  g_autofree char *b = g_build_filename (f->root, "drive-b", NULL);
  g_autofree char *roots = g_strdup_printf ("%s,%s", a, b);
  g_autoptr(GPtrArray) on_a = NULL;
  g_autoptr(GPtrArray) on_b = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, "root", roots,
                              "max-size", 4 * file, "preallocate", TRUE, NULL);
  kv_fs_tier_wait_preallocated (f->tier);
  on_a = spare_files (a);
  on_b = spare_files (b);
  g_assert_cmpuint (on_a->len, ==, 2);
  g_assert_cmpuint (on_b->len, ==, 2);

  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(GPtrArray) spares = NULL;

      store_ok (f, i, 1);
      kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
      spares = spare_files (f->root);
      g_assert_cmpuint (test_dir_count_files (f->root, ".kv") + spares->len, ==, 4);
      g_assert_cmpuint (spares->len, ==, kv_fs_tier_get_n_spare_files (f->tier));
      g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 0);
    }
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (f->tier), ==, 0);
  store_ok (f, 4, 1);
  kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (f->tier), NULL);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_EVICTED_CHUNKS), ==, 1);
  g_assert_cmpuint (test_dir_count_files (f->root, ".kv"), ==, 4);
  g_assert_cmpuint (kv_fs_tier_get_used_bytes (f->tier), ==, 4 * file);
}

static void
test_preallocate_needs_max_size (Fixture       *f,
                                 gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  KvFsTier *tier;

  tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                "preallocate", TRUE, NULL);
  g_assert_null (tier);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "preallocate"));
  g_assert_nonnull (strstr (error->message, "max-size"));
}

static void
add (const char      *name,
     void           (*func) (Fixture *, gconstpointer),
     gboolean         every_variant,
     gboolean         make_tier)
{
  static FsVariant variants[12];
  static guint n_variants;
  guint n;

  if (n_variants == 0)
    {
      static const KvFsIoEngine engines[] = {
#if KV_FS_HAVE_URING
        KV_FS_IO_ENGINE_URING,
#endif
        KV_FS_IO_ENGINE_GIO, KV_FS_IO_ENGINE_THREADS,
      };

      for (guint e = 0; e < G_N_ELEMENTS (engines); e++)
        for (guint d = 0; d < 2; d++)
          for (guint l = 0; l < 2; l++)
            variants[n_variants++] = (FsVariant) {
              engines[e], d == 0 ? KV_FS_O_DIRECT_AUTO : KV_FS_O_DIRECT_OFF,
              l == 0 ? KV_FS_LAYOUT_KIND_KVTIER : KV_FS_LAYOUT_KIND_VLLM };
    }

  n = every_variant ? n_variants : 1;
  for (guint i = 0; i < n_variants && n > 0; i++)
    {
      const FsVariant *v = &variants[i];
      g_autofree char *path = NULL;

      if (fs_test_skip_engine (v->engine))
        continue;
      n--;
      path = g_strdup_printf ("/kvtier/fs/tier/%s/%s/%s/%s",
                              fs_engine_name (v->engine),
                              v->o_direct == KV_FS_O_DIRECT_OFF ? "buffered" : "direct",
                              v->layout == KV_FS_LAYOUT_KIND_VLLM ? "vllm" : "kvtier",
                              name);

      g_test_add (path, Fixture, v, make_tier ? setup_tier : setup, func, teardown);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  /* the data path: every engine × O_DIRECT × layout */
  add ("store-creates-file", test_store_creates_file, TRUE, TRUE);
  add ("round-trip", test_round_trip, TRUE, TRUE);
  add ("integrity-batch-sizes", test_integrity_batch_sizes, TRUE, TRUE);
  add ("missing-file-fails-load", test_missing_file_fails_load, TRUE, TRUE);
  add ("partial-load-prefix", test_partial_load, TRUE, TRUE);
  add ("short-read-no-livelock", test_short_read_no_livelock, TRUE, TRUE);
  add ("multi-job-tracking", test_multi_job_tracking, TRUE, TRUE);
  add ("shutdown-reports-queued", test_shutdown_reports_queued, TRUE, TRUE);
  add ("warm-restart", test_warm_restart, TRUE, FALSE);
  add ("max-size-lru", test_max_size_lru, TRUE, FALSE);
  add ("evicted-file-reused", test_evicted_file_reused, TRUE, FALSE);
  add ("preallocated-spares-taken-over", test_preallocated_spares_taken_over, TRUE, FALSE);
  add ("preallocate-refill", test_preallocate_refill, TRUE, FALSE);
  add ("carried-checksum", test_carried_checksum, TRUE, TRUE);
  add ("vllm-file-checksum", test_vllm_file_checksum, TRUE, TRUE);

  /* the rest once */
  add ("empty-lookup-miss", test_empty_lookup_miss, FALSE, TRUE);
  add ("out-of-bounds-slot", test_out_of_bounds_slot, FALSE, TRUE);
  add ("transient-error-keeps-file", test_transient_error_keeps_file, FALSE, TRUE);
  add ("checksum-failure", test_checksum_failure, FALSE, TRUE);
  add ("unverified-load-carries-nothing", test_unverified_load_carries_nothing, FALSE, FALSE);
  add ("events", test_events, FALSE, FALSE);
  add ("events-off-by-default", test_events_off_by_default, FALSE, TRUE);
  add ("drain-waits", test_drain_waits, FALSE, TRUE);
  add ("shared-batch-lookup", test_shared_batch_lookup, FALSE, FALSE);
  add ("unwritable-root", test_unwritable_root, FALSE, FALSE);
  add ("bad-combinations", test_bad_combinations, FALSE, FALSE);
  add ("buffered-when-off", test_buffered_when_off, FALSE, FALSE);
  add ("o-direct-on", test_o_direct_on, FALSE, FALSE);
  add ("durability-modes", test_durability_modes, FALSE, FALSE);
  add ("max-size-chain", test_max_size_chain, FALSE, FALSE);
  add ("unused-victim-deleted", test_unused_victim_deleted, FALSE, FALSE);
  add ("no-eviction-under-reader", test_no_eviction_under_reader, FALSE, FALSE);
  add ("restart-trims", test_restart_trims, FALSE, FALSE);
  add ("multi-root", test_multi_root, FALSE, FALSE);
  add ("spare-back-after-failed-store", test_spare_back_after_failed_store, FALSE, FALSE);
  add ("preallocate-restart", test_preallocate_restart, FALSE, FALSE);
  add ("preallocate-fills-what-is-left", test_preallocate_fills_what_is_left, FALSE, FALSE);
  add ("preallocate-multi-root", test_preallocate_multi_root, FALSE, FALSE);
  add ("preallocate-needs-max-size", test_preallocate_needs_max_size, FALSE, FALSE);
  {
    static const FsVariant vllm = { KV_FS_IO_ENGINE_AUTO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_VLLM };

    g_test_add ("/kvtier/fs/tier/vllm/cross-instance", Fixture, &vllm, setup,
                test_vllm_cross_instance, teardown);
    g_test_add ("/kvtier/fs/tier/vllm/written-by-vllm-with-checksum", Fixture, &vllm, setup,
                test_vllm_written_checksum, teardown);
  }

  return g_test_run ();
}
