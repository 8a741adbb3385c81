/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <glib/gstdio.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-tier-job.h"

/*
 * Crash safety, of both layouts. A child process (this program, started
 * with --child) stores chunks whose bytes are a function of their key,
 * reporting each finished store job on stdout; the parent kills it with
 * SIGKILL at a random moment, then opens a fresh tier on the same root
 * and checks:
 *
 *  - every chunk the child reported stored is there and byte-exact (at
 *    most the chunks in flight are lost);
 *  - no load ever returns other bytes than the chunk's;
 *  - what the layout promises on disk after a crash:
 *    - layout=kvtier (a file per chunk, published by rename): every chunk
 *      file loads byte-exact (no partial chunk is ever visible) and no
 *      temporary file is left after the restart scan;
 *    - layout=slab (slots in preallocated files, nothing renamed): a slot
 *      is valid only when its header and payload checksums match, so a
 *      slot torn by the kill (its header written, its payload not) fails
 *      its check when loaded, and is only ever one of a store that was not
 *      confirmed; the slab files never change size.
 *
 * The bounded cases give the child BOUNDED_CHUNKS chunks of room, so that
 * soon every store evicts a chunk and overwrites its file or slot: a kill
 * while a victim is being rewritten must not leave it served (evicted
 * chunks are gone, so only the newest confirmed job's chunks must be
 * there). The preallocated cases (layout=kvtier) also have the child
 * write spare files while it stores and take them over: a kill while a
 * spare is written or taken over must leave neither a temporary file
 * after the restart nor more chunks and spares than max-size, and every
 * spare on disk is one the new tier knows. The buffered cases
 * (layout=slab, o-direct=off) let a kill cut a write short in the page
 * cache, so slots are torn for real.
 *
 * 30 rounds by default; `--rounds N` (or KVTIER_FS_CRASH_ROUNDS=N) runs a
 * longer stress. Rounds use fresh keys; when the key space runs low the
 * root is emptied and the keys start over, so every round asked for runs.
 */

#define JOB_KEYS 4
#define BOUNDED_CHUNKS 16

typedef struct
{
  KvFsLayoutKind layout;
  KvFsIoEngine   engine;
  gboolean       bounded;
  gboolean       preallocate;   /* layout=kvtier, bounded: spare files */
  gboolean       buffered;      /* o-direct=off */
} CrashCase;

static guint n_rounds = 30;
static const char *self_path;

/* The chunks of each layout: small and many for file-per-chunk (creates
 * and renames are what a kill interrupts), large for slab so that a write
 * takes a while and kills land mid-write. */
static gsize
crash_slot_size (const CrashCase *crash)
{
  return crash->layout == KV_FS_LAYOUT_KIND_SLAB ? 256 * 1024 : FS_TEST_SLOT;
}

static guint
crash_max_keys (const CrashCase *crash)
{
  return crash->layout == KV_FS_LAYOUT_KIND_SLAB ? 256 : 4096;
}

/* The tier of a round, in the child that stores (with the case's engine
 * and O_DIRECT mode) and in the parent that checks (with the defaults):
 * the same bounds, so that the parent's restart scan sees what the
 * child's tier would have. */
static KvFsTier *
crash_tier_new (const CrashCase *crash,
                KvHostBuffer    *buffer,
                const char      *root,
                KvFsIoEngine     engine,
                KvFsODirect      o_direct)
{
  guint64 record = crash_slot_size (crash) + KV_CHUNK_HEADER_SIZE;
  FsVariant v = { engine, o_direct, crash->layout };
  KvFsTier *tier;

  if (crash->layout == KV_FS_LAYOUT_KIND_SLAB)
    {
      tier = fs_test_tier_new (buffer, root, &v,
                               "max-size", (crash->bounded ? BOUNDED_CHUNKS : crash_max_keys (crash)) * record,
                               "slab-size", (guint64) 1 << 20, NULL);
      /* stores take only slots the restart scan has read */
      kv_fs_tier_wait_index_ready (tier);
    }
  else
    tier = fs_test_tier_new (buffer, root, &v,
                             "max-size", crash->bounded ? BOUNDED_CHUNKS * record : 0,
                             "preallocate", crash->preallocate, NULL);
  return tier;
}

/* ---- child -------------------------------------------------------------- */

static int
child_main (const CrashCase *crash,
            const char      *root,
            guint            first)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (JOB_KEYS, crash_slot_size (crash), &error);
  g_autoptr(KvFsTier) tier = NULL;
  g_autoptr(KvRequest) request = kv_request_new ("child", NULL);

  g_assert_no_error (error);
  tier = crash_tier_new (crash, buffer, root, crash->engine,
                         crash->buffered ? KV_FS_O_DIRECT_OFF : KV_FS_O_DIRECT_AUTO);
  printf ("ready\n");
  fflush (stdout);

  for (guint base = first; base + JOB_KEYS <= crash_max_keys (crash); base += JOB_KEYS)
    {
      KvKey *keys[JOB_KEYS];
      guint32 slots[JOB_KEYS];
      g_autoptr(KvJobResult) result = NULL;

      for (guint i = 0; i < JOB_KEYS; i++)
        {
          keys[i] = test_chunk_key (base + i);
          slots[i] = i;
          test_chunk_fill_slot (buffer, i, base + i);
        }
      result = test_tier_run_job (tier, base, FALSE, keys, slots, JOB_KEYS, request);
      for (guint i = 0; i < JOB_KEYS; i++)
        kv_key_unref (keys[i]);
      if (kv_job_result_get_success (result))
        {
          printf ("stored %u\n", base + JOB_KEYS);
          fflush (stdout);
        }
    }
  printf ("done\n");
  fflush (stdout);
  fs_test_shutdown (tier);
  return 0;
}

/* ---- parent ------------------------------------------------------------- */

typedef struct
{
  GPid        pid;
  GIOChannel *out;
  guint       confirmed;   /* chunks [0, confirmed) reported stored */
} Child;

static gboolean
read_line (Child  *child,
           char  **line)
{
  gsize term = 0;

  return g_io_channel_read_line (child->out, line, NULL, &term, NULL) == G_IO_STATUS_NORMAL;
}

static void
spawn_child (Child           *child,
             const CrashCase *crash,
             const char      *root,
             guint            first)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *first_str = g_strdup_printf ("%u", first);
  g_autofree char *case_str = g_strdup_printf ("%d,%d,%d,%d,%d", crash->layout, crash->engine,
                                               crash->bounded, crash->preallocate, crash->buffered);
  const char *argv[] = { self_path, "--child", case_str, root, first_str, NULL };
  int out_fd = -1;
  char *line = NULL;

  g_assert_true (g_spawn_async_with_pipes (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                           NULL, NULL, &child->pid, NULL, &out_fd, NULL, &error));
  g_assert_no_error (error);
  child->out = g_io_channel_unix_new (out_fd);
  g_io_channel_set_close_on_unref (child->out, TRUE);
  /* the child is running once its tier exists */
  g_assert_true (read_line (child, &line));
  g_assert_cmpstr (line, ==, "ready\n");
  g_free (line);
}

/* Kills the child and collects what it had confirmed. */
static void
kill_child (Child *child)
{
  char *line = NULL;
  int status = 0;

  kill (child->pid, SIGKILL);
  g_assert_cmpint (waitpid (child->pid, &status, 0), ==, child->pid);
  g_spawn_close_pid (child->pid);
  while (read_line (child, &line))
    {
      guint n = 0;

      if (sscanf (line, "stored %u", &n) == 1)
        child->confirmed = MAX (child->confirmed, n);
      g_free (line);
    }
  g_io_channel_unref (child->out);
}

/* What is on disk after the restart scan, by layout. */
static void
check_files (const CrashCase *crash,
             KvFsTier        *tier,
             const char      *root,
             guint64         *slab_bytes)
{
  if (crash->layout == KV_FS_LAYOUT_KIND_KVTIER)
    {
      kv_fs_tier_wait_preallocated (tier);
      kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (tier), NULL);
      g_assert_cmpuint (test_dir_count_files (root, ".tmp"), ==, 0);
      /* every file but the identity file is a chunk or a known spare */
      g_assert_cmpuint (test_dir_count_files (root, NULL), ==,
                        test_dir_count_files (root, ".kv") + 1 +
                        kv_fs_tier_get_n_spare_files (tier));
      if (crash->preallocate)
        g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier) + kv_fs_tier_get_n_spare_files (tier),
                          ==, BOUNDED_CHUNKS);
    }
  else
    {
      /* nothing but the identity file and the slab files, of the same
       * size as ever */
      g_autoptr(GDir) dir = g_dir_open (root, 0, NULL);
      const char *name = g_dir_read_name (dir);
      g_autofree char *slab_dir = g_build_filename (root, name, NULL);
      g_autofree char *slab0 = g_build_filename (slab_dir, "slab-0000.kvslab", NULL);
      GStatBuf st;

      g_assert_true (g_str_has_prefix (name, "kvslab-"));
      g_assert_null (g_dir_read_name (dir));
      g_assert_cmpuint (test_dir_count_files (root, NULL), ==,
                        test_dir_count_files (root, ".kvslab") + 1);
      g_assert_cmpint (g_stat (slab0, &st), ==, 0);
      if (*slab_bytes == 0)
        *slab_bytes = st.st_size;
      g_assert_cmpuint (st.st_size, ==, *slab_bytes);
    }
}

static void
test_crash (gconstpointer data)
{
  const CrashCase *crash = data;
  gsize slot_size = crash_slot_size (crash);
  guint max_keys = crash_max_keys (crash);
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (8, slot_size, &error);
  guint next = 0;
  guint64 checked = 0;
  guint64 torn = 0;
  guint64 slab_bytes = 0;
  guint passes = 1;
  guint rounds_run = 0;

  g_assert_no_error (error);
  for (guint round = 0; round < n_rounds; round++)
    {
      Child child = { 0, NULL, next };
      g_autoptr(KvFsTier) tier = NULL;
      g_autoptr(KvRequest) request = kv_request_new ("check", NULL);
      guint present = 0;
      guint high = next;
      guint64 corrupt_at_start;

      /* The keys ran low: the next rounds start over on an empty root, so
       * that every round requested runs (and the root stays small). */
      if (next + max_keys / 4 > max_keys)
        {
          test_dir_remove (root);
          g_assert_cmpint (g_mkdir (root, 0700), ==, 0);
          next = 0;
          child.confirmed = 0;
          high = 0;
          passes++;
        }

      spawn_child (&child, crash, root, next);
      /* a random moment: before, during or between stores */
      g_usleep (g_test_rand_int_range (0, 20000));
      kill_child (&child);

      /* bounded: the child may have been killed before its own restart
       * scan trimmed what it found to max-size; this one trims it */
      tier = crash_tier_new (crash, buffer, root, KV_FS_IO_ENGINE_AUTO, KV_FS_O_DIRECT_AUTO);
      kv_fs_tier_wait_index_ready (tier);
      corrupt_at_start = kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS);
      check_files (crash, tier, root, &slab_bytes);

      /* every confirmed chunk is there, every present chunk is exact */
      for (guint i = next; i < max_keys && i < child.confirmed + 64; i++)
        {
          g_autoptr(KvKey) key = test_chunk_key (i);
          guint32 s = 0;
          g_autoptr(KvJobResult) result = NULL;
          /* bounded: only the newest confirmed job is sure to stay */
          gboolean may_be_gone = i >= child.confirmed ||
                                 (crash->bounded && i + JOB_KEYS < child.confirmed);

          if (kv_secondary_tier_lookup (KV_SECONDARY_TIER (tier), key, request) != KV_LOOKUP_RESULT_HIT)
            {
              g_assert_true (may_be_gone);
              continue;
            }
          memset (kv_host_buffer_peek_slot (buffer, 0), 0, slot_size);
          result = test_tier_run_job (tier, i + 1, TRUE, &key, &s, 1, request);
          if (!kv_job_result_get_success (result) && crash->layout == KV_FS_LAYOUT_KIND_SLAB)
            {
              /* a slot torn by the kill: found by its checksum, never
               * served; never one of a confirmed chunk still held */
              g_assert_true (kv_job_result_get_checksum_failed (result));
              g_assert_true (may_be_gone);
              torn++;
              continue;
            }
          g_assert_true (kv_job_result_get_success (result));
          g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (buffer, 0), slot_size, i));
          present++;
          checked++;
          high = i + 1;
        }
      /* layout=kvtier: no file was damaged at all; layout=slab: the scan
       * found no damaged header (a kill tears a slot's payload or leaves
       * its header whole: a header is written whole or not) */
      g_assert_cmpuint (corrupt_at_start, ==, 0);
      if (crash->layout == KV_FS_LAYOUT_KIND_KVTIER)
        {
          g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 0);
          /* nothing on disk that the index does not know */
          g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, test_dir_count_files (root, ".kv"));
        }
      if (crash->bounded)
        g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), <=, BOUNDED_CHUNKS);
      g_test_message ("round %u: killed after %u confirmed chunks, %u present",
                      round, child.confirmed - next, present);
      fs_test_shutdown (tier);
      next = MAX (high, child.confirmed);
      /* keep the key space for later rounds */
      next = (next + JOB_KEYS - 1) / JOB_KEYS * JOB_KEYS;
      rounds_run++;
    }
  g_test_message ("%u rounds over %u passes of the key space, %" G_GUINT64_FORMAT
                  " chunks verified, %" G_GUINT64_FORMAT " torn slots refused",
                  rounds_run, passes, checked, torn);
  /* it ran out of keys and stopped early, printing the rounds asked for */
  g_assert_cmpuint (rounds_run, ==, n_rounds);
  test_dir_remove (root);
}

static const CrashCase cases[] = {
  { KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_THREADS, FALSE, FALSE, FALSE },
  { KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_THREADS, TRUE, FALSE, FALSE },
  { KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_THREADS, TRUE, TRUE, FALSE },
  { KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_THREADS, FALSE, FALSE, FALSE },
  { KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_THREADS, FALSE, FALSE, TRUE },
  { KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_THREADS, TRUE, FALSE, TRUE },
#if KV_FS_HAVE_URING
  { KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_URING, FALSE, FALSE, FALSE },
  { KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_URING, TRUE, FALSE, FALSE },
  { KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_URING, TRUE, TRUE, FALSE },
  { KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_URING, FALSE, FALSE, FALSE },
  { KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_URING, TRUE, FALSE, FALSE },
#endif
};

int
main (int argc, char **argv)
{
  const char *env = g_getenv ("KVTIER_FS_CRASH_ROUNDS");
  int out = 1;

  self_path = argv[0];
  if (argc >= 5 && g_str_equal (argv[1], "--child"))
    {
      CrashCase crash = { 0 };
      int layout, engine, bounded, preallocate, buffered;

      g_assert_cmpint (sscanf (argv[2], "%d,%d,%d,%d,%d", &layout, &engine, &bounded,
                               &preallocate, &buffered), ==, 5);
      crash.layout = layout;
      crash.engine = engine;
      crash.bounded = bounded;
      crash.preallocate = preallocate;
      crash.buffered = buffered;
      return child_main (&crash, argv[3], (guint) g_ascii_strtoull (argv[4], NULL, 10));
    }

  if (env != NULL)
    n_rounds = (guint) g_ascii_strtoull (env, NULL, 10);
  /* --rounds N: taken out before GLib sees the arguments */
  for (int i = 1; i < argc; i++)
    {
      if (g_str_equal (argv[i], "--rounds") && i + 1 < argc)
        {
          n_rounds = (guint) g_ascii_strtoull (argv[i + 1], NULL, 10);
          i++;
          continue;
        }
      argv[out++] = argv[i];
    }
  argc = out;
  argv[argc] = NULL;

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);
  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree char *path = NULL;

      if (fs_test_skip_engine (cases[c].engine))
        continue;
      path = g_strdup_printf ("/kvtier/fs/crash/%s/%s/%s%s",
                              cases[c].layout == KV_FS_LAYOUT_KIND_SLAB ? "slab" : "kvtier",
                              fs_engine_name (cases[c].engine),
                              cases[c].preallocate ? "preallocated" :
                              cases[c].bounded ? "bounded" : "unbounded",
                              cases[c].buffered ? "-buffered" : "");
      g_test_add_data_func (path, &cases[c], test_crash);
    }
  return g_test_run ();
}
