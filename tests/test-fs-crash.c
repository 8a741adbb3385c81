/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "test-fs-common.h"

/*
 * Crash safety. A child process (this program, started with --child)
 * stores chunks whose bytes are a function of their key, reporting each
 * finished store job on stdout; the parent kills it with SIGKILL at a
 * random moment, then opens a fresh tier on the same root and checks:
 *
 *  - every chunk the child reported stored is there and byte-exact
 *    (at most the chunks in flight are lost);
 *  - every chunk file there loads byte-exact (no partial chunk is ever
 *    visible);
 *  - no temporary file is left after the restart scan.
 *
 * The bounded cases give the child a max-size of BOUNDED_FILES chunks, so
 * that soon every store evicts a chunk and overwrites its file: a kill
 * while a victim's file is being rewritten must not leave it served
 * (evicted chunks are gone, so there only the newest confirmed job's
 * chunks must be there). The preallocated cases also have the child
 * write spare files (preallocate) while it stores and take them over:
 * a kill while a spare is written or taken over must leave neither a
 * temporary file after the restart nor more chunks and spares than
 * max-size, and every spare on disk is one the new tier knows.
 *
 * 30 rounds by default; `--rounds N` (or KVTIER_FS_CRASH_ROUNDS=N) runs a
 * longer stress. Rounds use fresh keys; when the key space runs low the
 * root is emptied and the keys start over, so every round asked for runs.
 */

#define JOB_KEYS 4
#define MAX_KEYS 4096
#define BOUNDED_FILES 16

typedef struct
{
  const char *engine;
  gboolean    bounded;
  gboolean    preallocate;   /* bounded, with spare files */
} CrashCase;

static guint n_rounds = 30;
static const char *self_path;

static KvKey *
crash_key (guint i)
{
  return test_chunk_key (i);
}

/* ---- child -------------------------------------------------------------- */

static int
child_main (const char *root,
            guint       first,
            const char *engine,
            guint       max_files,
            gboolean    preallocate)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (JOB_KEYS, FS_TEST_SLOT, &error);
  FsVariant v = { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER };
  g_autoptr(KvFsTier) tier = NULL;
  g_autoptr(KvRequest) request = kv_request_new ("child", NULL);

  if (g_strcmp0 (engine, "uring") == 0)
    v.engine = KV_FS_IO_ENGINE_URING;
  else if (g_strcmp0 (engine, "gio") == 0)
    v.engine = KV_FS_IO_ENGINE_GIO;
  tier = fs_test_tier_new (buffer, root, &v,
                           "max-size", (guint64) max_files * (FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE),
                           "preallocate", preallocate, NULL);
  printf ("ready\n");
  fflush (stdout);

  for (guint base = first; base + JOB_KEYS <= MAX_KEYS; base += JOB_KEYS)
    {
      KvKey *keys[JOB_KEYS];
      guint32 slots[JOB_KEYS];
      g_autoptr(KvJobResult) result = NULL;

      for (guint i = 0; i < JOB_KEYS; i++)
        {
          keys[i] = crash_key (base + i);
          slots[i] = i;
          fs_test_fill_slot (buffer, i, FS_TEST_SLOT, base + i);
        }
      result = fs_test_run_job (tier, base, FALSE, keys, slots, JOB_KEYS, request);
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
spawn_child (Child      *child,
             const char *root,
             guint       first,
             const char *engine,
             guint       max_files,
             gboolean    preallocate)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *first_str = g_strdup_printf ("%u", first);
  g_autofree char *max_str = g_strdup_printf ("%u", max_files);
  const char *argv[] = { self_path, "--child", root, first_str, engine, max_str,
                         preallocate ? "1" : "0", NULL };
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

static void
test_crash (gconstpointer data)
{
  const CrashCase *crash = data;
  guint64 max_size = crash->bounded ? BOUNDED_FILES * (FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE) : 0;
  g_autofree char *root = fs_test_make_dir ();
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (8, FS_TEST_SLOT, &error);
  FsVariant v = { KV_FS_IO_ENGINE_AUTO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER };
  guint next = 0;
  guint64 checked = 0;
  guint passes = 1;
  guint rounds_run = 0;

  for (guint round = 0; round < n_rounds; round++)
    {
      Child child = { 0, NULL, next };
      g_autoptr(KvFsTier) tier = NULL;
      g_autoptr(KvRequest) request = kv_request_new ("check", NULL);
      guint present = 0;
      guint high = next;

      /* The keys ran low: the next rounds start over on an empty root, so
       * that every round requested runs (and the root stays small). */
      if (next + MAX_KEYS / 4 > MAX_KEYS)
        {
          fs_test_rm_rf (root);
          g_assert_cmpint (g_mkdir (root, 0700), ==, 0);
          next = 0;
          child.confirmed = 0;
          high = 0;
          passes++;
        }

      spawn_child (&child, root, next, crash->engine, crash->bounded ? BOUNDED_FILES : 0,
                   crash->preallocate);
      /* a random moment: before, during or between stores */
      g_usleep (g_test_rand_int_range (0, 20000));
      kill_child (&child);

      /* bounded: the child may have been killed before its own restart
       * scan trimmed what it found to max-size; this one trims it */
      tier = fs_test_tier_new (buffer, root, &v, "max-size", max_size,
                               "preallocate", crash->preallocate, NULL);
      kv_fs_tier_wait_index_ready (tier);
      kv_fs_tier_wait_preallocated (tier);
      kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (tier), NULL);
      g_assert_cmpuint (fs_test_count_files (root, ".tmp"), ==, 0);
      /* every file but the identity file is a chunk or a known spare */
      g_assert_cmpuint (fs_test_count_files (root, NULL), ==,
                        fs_test_count_files (root, ".kv") + 1 +
                        kv_fs_tier_get_n_spare_files (tier));
      if (crash->preallocate)
        g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier) + kv_fs_tier_get_n_spare_files (tier),
                          ==, BOUNDED_FILES);

      /* every confirmed chunk is there, every present chunk is exact */
      for (guint i = next; i < MAX_KEYS && i < child.confirmed + 64; i++)
        {
          KvKey *key = crash_key (i);
          guint32 s = 0;
          g_autoptr(KvJobResult) result = NULL;

          if (kv_secondary_tier_lookup (KV_SECONDARY_TIER (tier), key, request) != KV_LOOKUP_RESULT_HIT)
            {
              /* bounded: only the newest confirmed job is sure to stay */
              g_assert_true (i >= child.confirmed ||
                             (crash->bounded && i + JOB_KEYS < child.confirmed));
              kv_key_unref (key);
              continue;
            }
          memset (kv_host_buffer_peek_slot (buffer, 0), 0, FS_TEST_SLOT);
          result = fs_test_run_job (tier, i + 1, TRUE, &key, &s, 1, request);
          g_assert_true (kv_job_result_get_success (result));
          g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (buffer, 0), FS_TEST_SLOT, i));
          present++;
          checked++;
          high = i + 1;
          kv_key_unref (key);
        }
      g_assert_cmpuint (kv_fs_tier_get_counter (tier, KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 0);
      /* nothing on disk that the index does not know */
      g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), ==, fs_test_count_files (root, ".kv"));
      if (crash->bounded)
        g_assert_cmpuint (kv_fs_tier_get_n_chunks (tier), <=, BOUNDED_FILES);
      g_test_message ("round %u: killed after %u confirmed chunks, %u present",
                      round, child.confirmed - next, present);
      fs_test_shutdown (tier);
      next = MAX (high, child.confirmed);
      /* keep the key space for later rounds */
      next = (next + JOB_KEYS - 1) / JOB_KEYS * JOB_KEYS;
      rounds_run++;
    }
  g_test_message ("%u rounds over %u passes of the key space, %" G_GUINT64_FORMAT
                  " chunks verified", rounds_run, passes, checked);
  /* it ran out of keys and stopped early, printing the rounds asked for */
  g_assert_cmpuint (rounds_run, ==, n_rounds);
  fs_test_rm_rf (root);
}

int
main (int argc, char **argv)
{
  const char *env = g_getenv ("KVTIER_FS_CRASH_ROUNDS");
  int out = 1;

  self_path = argv[0];
  if (argc >= 7 && g_str_equal (argv[1], "--child"))
    return child_main (argv[2], (guint) g_ascii_strtoull (argv[3], NULL, 10), argv[4],
                       (guint) g_ascii_strtoull (argv[5], NULL, 10), g_str_equal (argv[6], "1"));

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
  {
    static const CrashCase cases[] = {
      { "threads", FALSE, FALSE }, { "threads", TRUE, FALSE }, { "threads", TRUE, TRUE },
#if KV_FS_HAVE_URING
      { "uring", FALSE, FALSE }, { "uring", TRUE, FALSE }, { "uring", TRUE, TRUE },
#endif
    };

    for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
      {
        g_autofree char *path = NULL;

        if (g_str_equal (cases[c].engine, "uring") && fs_test_skip_engine (KV_FS_IO_ENGINE_URING))
          continue;
        path = g_strdup_printf ("/kvtier/fs/crash/%s%s", cases[c].engine,
                                cases[c].preallocate ? "/preallocated" :
                                cases[c].bounded ? "/bounded" : "");
        g_test_add_data_func (path, &cases[c], test_crash);
      }
  }
  return g_test_run ();
}
