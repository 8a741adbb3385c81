/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-manager-stack.h"

/*
 * A full disk. The test runs in a subprocess that unshares its mount
 * namespace and mounts a small tmpfs (nothing outside the process sees
 * it); if the machine forbids that, the test is skipped with a message.
 * On it, stores fail cleanly with ENOSPC (counted, no temporary file
 * left, no primary slot left pinned), chunks already stored keep loading,
 * and the tier evicts its oldest chunks so that later stores succeed.
 */

#define TMPFS_SIZE "200k"

/* Whether this process may mount a tmpfs in a private namespace: asked
 * in a forked child (the test process has no thread yet). NULL if so,
 * else why not. */
static char *
mount_forbidden (void)
{
  int status = 0;
  pid_t pid = fork ();

  if (pid == 0)
    {
      char dir[] = "/tmp/kvtier-fs-probe-XXXXXX";
      int code = 0;

      if (unshare (CLONE_NEWNS) != 0)
        code = 1;
      else if (mount ("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0)
        code = 2;
      else if (mkdtemp (dir) == NULL)
        code = 3;
      else
        {
          if (mount ("tmpfs", dir, "tmpfs", 0, "size=64k") != 0)
            code = 4;
          else
            umount (dir);
          rmdir (dir);
        }
      _exit (code);
    }
  if (pid < 0 || waitpid (pid, &status, 0) != pid)
    return g_strdup ("cannot fork a probe process");
  if (WIFEXITED (status) && WEXITSTATUS (status) == 0)
    return NULL;
  switch (WIFEXITED (status) ? WEXITSTATUS (status) : -1)
    {
    case 1: return g_strdup ("unshare(CLONE_NEWNS) is not permitted here");
    case 2: return g_strdup ("cannot make the mount namespace private");
    case 4: return g_strdup ("mounting a tmpfs is not permitted here");
    default: return g_strdup ("cannot set up a private tmpfs");
    }
}

typedef struct
{
  const char *root;
  FsVariant   variant;
} Spec;

static KvSecondaryTier *
make_tier (KvHostBuffer *buffer,
           gpointer      data)
{
  Spec *spec = data;

  return KV_SECONDARY_TIER (fs_test_tier_new (buffer, spec->root, &spec->variant,
                                               "breaker-threshold", 0, NULL));
}

static void
full_disk_body (const char      *root,
                const FsVariant *variant)
{
  Spec spec;
  TestStack s = { 0 };
  guint stored = 0;
  guint first_failure = 0;
  guint next = 0;

  spec.root = root;
  spec.variant = *variant;
  test_stack_init (&s, 8, FS_TEST_SLOT, make_tier, &spec);

  /* fill it: 8 KiB chunks in 12 KiB files on a 200 KiB filesystem */
  for (next = 0; next < 64 && first_failure == 0; next += 2)
    {
      guint before = kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_NO_SPACE);

      test_stack_store (&s, next, 2);
      if (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_NO_SPACE) > before)
        first_failure = next + 1;
    }
  g_assert_cmpuint (first_failure, >, 0);
  stored = kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_STORED_CHUNKS);
  g_assert_cmpuint (stored, >=, 8);
  g_assert_cmpuint (stored, <, 20);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_STORE_FAILURES), >=, 1);
  g_test_message ("%u chunks fit before ENOSPC", stored);

  /* clean failure: no temporary file, no pinned or half-written slot */
  g_assert_cmpuint (test_dir_count_files (root, ".tmp"), ==, 0);
  test_stack_assert_no_pins (&s, next);

  /* the tier made room by evicting its oldest chunks... */
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_EVICTED_CHUNKS), >=, 1);
  {
    g_autoptr(KvKey) oldest = test_chunk_key (0);
    g_autofree char *path = kv_fs_tier_get_chunk_path (KV_FS_TIER (s.tier), oldest);

    g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  }
  /* ...so the next store succeeds */
  {
    guint before = kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_STORED_CHUNKS);

    test_stack_store (&s, 100, 1);
    g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_STORED_CHUNKS), ==, before + 1);
  }
  /* chunks still on disk load (they left the 8-slot primary long ago) */
  for (guint i = 0; i < next; i++)
    {
      g_autoptr(KvKey) key = test_chunk_key (i);
      g_autofree char *path = kv_fs_tier_get_chunk_path (KV_FS_TIER (s.tier), key);

      if (g_file_test (path, G_FILE_TEST_EXISTS) &&
          kv_primary_tier_lookup (s.primary, key) == KV_LOOKUP_RESULT_MISS)
        {
          g_assert_cmpint (test_stack_promote (&s, i), ==, KV_LOOKUP_RESULT_HIT);
          break;
        }
    }
  test_stack_assert_no_pins (&s, next);
  test_stack_clear (&s);
}

static KvSecondaryTier *
make_preallocating_tier (KvHostBuffer *buffer,
                         gpointer      data)
{
  Spec *spec = data;

  /* a max-size far past what the filesystem holds */
  return KV_SECONDARY_TIER (fs_test_tier_new (buffer, spec->root, &spec->variant,
                                               "breaker-threshold", 0,
                                               "max-size", (guint64) 64 * (FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE),
                                               "preallocate", TRUE, NULL));
}

/* preallocate on a disk smaller than max-size: the spare files stop at
 * ENOSPC, the stores take every one of them over, and the first store
 * that must create a file fails cleanly and makes room. */
static void
preallocate_body (const char      *root,
                  const FsVariant *variant)
{
  Spec spec;
  TestStack s = { 0 };
  guint n_spares;

  spec.root = root;
  spec.variant = *variant;
  test_stack_init (&s, 8, FS_TEST_SLOT, make_preallocating_tier, &spec);
  kv_fs_tier_wait_preallocated (KV_FS_TIER (s.tier));
  n_spares = kv_fs_tier_get_n_spare_files (KV_FS_TIER (s.tier));
  g_test_message ("%u spare files fit before ENOSPC", n_spares);
  g_assert_cmpuint (n_spares, >=, 8);
  g_assert_cmpuint (n_spares, <, 20);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_SPARE_FILES_CREATED), ==, n_spares);
  g_assert_cmpuint (test_dir_count_files (root, ".tmp"), ==, 0);

  /* every spare is taken over; the disk never runs out meanwhile */
  for (guint i = 0; i < n_spares; i++)
    test_stack_store (&s, i, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_STORED_CHUNKS), ==, n_spares);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_SPARE_FILES_USED), ==, n_spares);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_NO_SPACE), ==, 0);
  g_assert_cmpuint (kv_fs_tier_get_n_spare_files (KV_FS_TIER (s.tier)), ==, 0);

  /* then a store needs a new file: ENOSPC, counted, no pin left, room made */
  test_stack_store (&s, n_spares, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_NO_SPACE), ==, 1);
  g_assert_cmpuint (test_dir_count_files (root, ".tmp"), ==, 0);
  test_stack_assert_no_pins (&s, n_spares + 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_EVICTED_CHUNKS), >=, 1);
  /* the disk, not max-size, is the limit: no spare races the next store */
  kv_fs_tier_wait_preallocated (KV_FS_TIER (s.tier));
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_SPARE_FILES_CREATED), ==, n_spares);
  test_stack_store (&s, n_spares + 1, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_STORED_CHUNKS), ==, n_spares + 1);
  test_stack_assert_no_pins (&s, n_spares + 2);
  test_stack_clear (&s);
}

/* Runs @body in a subprocess, on a small tmpfs mounted in a mount
 * namespace of its own; skips with a message where mounting is not
 * allowed. */
static void
on_small_tmpfs (void           (*body) (const char *root, const FsVariant *variant),
                const FsVariant *variant)
{
  g_autofree char *forbidden = NULL;

  if (g_test_subprocess ())
    {
      g_autofree char *root = NULL;

      g_assert_cmpint (unshare (CLONE_NEWNS), ==, 0);
      g_assert_cmpint (mount ("none", "/", "none", MS_REC | MS_PRIVATE, NULL), ==, 0);
      root = test_dir_make ("kvtier-fs-test");
      g_assert_cmpint (mount ("tmpfs", root, "tmpfs", 0, "size=" TMPFS_SIZE ",mode=0700"), ==, 0);
      body (root, variant);
      g_assert_cmpint (umount (root), ==, 0);
      g_rmdir (root);
      printf ("KVTIER-FS-DONE\n");
      return;
    }
  forbidden = mount_forbidden ();
  if (forbidden != NULL)
    {
      g_test_skip (forbidden);
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stdout ("*KVTIER-FS-DONE*");
}

static void
test_full_disk (gconstpointer data)
{
  on_small_tmpfs (full_disk_body, data);
}

static void
test_preallocate (gconstpointer data)
{
  on_small_tmpfs (preallocate_body, data);
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
      g_autofree char *path = g_strdup_printf ("/kvtier/fs/full-disk/%s",
                                               fs_engine_name (variants[i].engine));

      g_test_add_data_func (path, &variants[i], test_full_disk);
    }
  /* the spare files' own path; their takeover is the engines' full-tier path */
  g_test_add_data_func ("/kvtier/fs/full-disk/preallocate", &variants[G_N_ELEMENTS (variants) - 1],
                        test_preallocate);
  return g_test_run ();
}
