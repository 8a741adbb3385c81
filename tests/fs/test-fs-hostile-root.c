/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-tier-job.h"
#include "kv-fs-layout.h"

/* The fs tier against another local user: a root, namespace or shard
 * directory that user owns, can write or replaced by a symbolic link is
 * refused (or, below the directories held open, not written through);
 * chunk files that user planted, valid header and checksums included,
 * are never served; the restart scan deletes only names of the tier's
 * own format. The tests run as root and play the other user, `nobody`,
 * in child processes that drop to it. */

#define N_SLOTS 8

typedef struct
{
  KvHostBuffer *buffer;
  char         *base;     /* 0711: `nobody` may pass, not list or write */
  char         *pub;      /* base/pub, 1777: where `nobody` writes */
  char         *root;     /* base/root: the tier's root */
  KvFsTier     *tier;
  KvKey        *keys[8];
  guint64       next_id;
  uid_t         nobody_uid;
  gid_t         nobody_gid;
} Fixture;

static gboolean
have_nobody (Fixture *f)
{
  struct passwd *pw = getpwnam ("nobody");

  if (geteuid () != 0 || pw == NULL || pw->pw_uid == 0)
    {
      g_test_skip ("needs to run as root, with a `nobody` user");
      return FALSE;
    }
  f->nobody_uid = pw->pw_uid;
  f->nobody_gid = pw->pw_gid;
  return TRUE;
}

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (N_SLOTS, FS_TEST_SLOT, &error);
  g_assert_no_error (error);
  f->base = test_dir_make ("kvtier-fs-test");
  g_assert_cmpint (chmod (f->base, 0711), ==, 0);
  f->pub = g_build_filename (f->base, "pub", NULL);
  g_assert_cmpint (g_mkdir (f->pub, 0700), ==, 0);
  g_assert_cmpint (chmod (f->pub, 01777), ==, 0);
  f->root = g_build_filename (f->base, "root", NULL);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = test_chunk_key (i);
  f->next_id = 1;
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  if (f->tier != NULL)
    {
      fs_test_shutdown (f->tier);
      g_clear_object (&f->tier);
    }
  g_clear_object (&f->buffer);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
  test_dir_remove (f->base);
  g_free (f->base);
  g_free (f->pub);
  g_free (f->root);
}

/* Runs the shell command @cmd in a child process as `nobody` (no
 * supplementary groups); asserts it succeeded. The child execs a shell
 * (under valgrind, a forked child that exited would be checked for the
 * parent's memory). */
static void
as_nobody (Fixture    *f,
           const char *cmd)
{
  pid_t pid = fork ();
  int status = 0;

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      if (setgroups (0, NULL) == 0 && setgid (f->nobody_gid) == 0 &&
          setuid (f->nobody_uid) == 0 && geteuid () == f->nobody_uid)
        execl ("/bin/sh", "sh", "-c", cmd, (char *) NULL);
      _exit (127);
    }
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
}

/* As `nobody`: makes the directory @path with @mode. */
static void
nobody_mkdir (Fixture    *f,
              const char *path,
              const char *mode)
{
  g_autofree char *quoted = g_shell_quote (path);
  g_autofree char *cmd = g_strdup_printf ("mkdir -m %s %s", mode, quoted);

  as_nobody (f, cmd);
}

/* As `nobody`: creates @path (0644) holding @len bytes of @contents. */
static void
nobody_write (Fixture    *f,
              const char *path,
              const char *contents,
              gsize       len)
{
  g_autofree char *src = g_strdup_printf ("%s.src", path);
  g_autofree char *quoted_src = g_shell_quote (src);
  g_autofree char *quoted = g_shell_quote (path);
  g_autofree char *cmd = g_strdup_printf ("umask 022 && cp %s %s", quoted_src, quoted);

  g_assert_true (g_file_set_contents (src, contents, len, NULL));
  g_assert_cmpint (chmod (src, 0644), ==, 0);
  as_nobody (f, cmd);
  g_assert_cmpint (unlink (src), ==, 0);
}

/* The tier's namespace (or vLLM chunk) directory for @root. */
static char *
chunk_dir_for (const char      *root,
               const FsVariant *v)
{
  g_autoptr(GError) error = NULL;
  KvFsLayout *layout = kv_fs_layout_new (v->layout, root, "default", FS_TEST_SLOT,
                                         v->layout == KV_FS_LAYOUT_KIND_VLLM ?
                                         FS_TEST_VLLM_IDENTITY : NULL, 0, &error);
  char *dir;

  g_assert_no_error (error);
  dir = g_strdup (kv_fs_layout_get_chunk_dir (layout, 0));
  kv_fs_layout_free (layout);
  return dir;
}

static guint64
foreign_files (KvFsTier *tier)
{
  g_autoptr(GEnumClass) klass = g_type_class_ref (KV_TYPE_FS_COUNTER);
  GEnumValue *value = g_enum_get_value_by_nick (klass, "foreign-files");

  g_assert_nonnull (value);
  return kv_fs_tier_get_counter (tier, value->value);
}

static KvFsTier *
try_tier (Fixture         *f,
          const FsVariant *v,
          GError         **error)
{
  return fs_test_tier_new_full (f->buffer, f->root, v, NULL, error, NULL);
}

static KvJobResult *
run_job (Fixture  *f,
         gboolean  is_load,
         guint     first,
         guint     n)
{
  guint32 slots[N_SLOTS];

  for (guint i = 0; i < n; i++)
    {
      slots[i] = i;
      if (is_load)
        memset (kv_host_buffer_peek_slot (f->buffer, i), 0, FS_TEST_SLOT);
      else
        test_chunk_fill_slot (f->buffer, i, first + i);
    }
  return test_tier_run_job (f->tier, f->next_id++, is_load, &f->keys[first], slots, n, NULL);
}

/* A lookup outside any request's life: MISS or HIT, by the index. */
static KvLookupResult
lookup (Fixture *f,
        guint    key)
{
  g_autoptr(KvRequest) request = kv_request_new ("lookup", NULL);

  return kv_secondary_tier_lookup (KV_SECONDARY_TIER (f->tier), f->keys[key], request);
}

static void
assert_refused (Fixture         *f,
                const FsVariant *v,
                const char      *what,
                const char      *detail)
{
  g_autoptr(GError) error = NULL;
  KvFsTier *tier = try_tier (f, v, &error);

  g_assert_null (tier);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
  g_test_message ("refused: %s", error->message);
  g_assert_nonnull (strstr (error->message, what));
  g_assert_nonnull (strstr (error->message, detail));
}

/* ---- roots ---------------------------------------------------------------- */

/* A root another user made: refused, naming it, its owner and mode;
 * nothing is created in it. */
static void
test_foreign_root (Fixture       *f,
                   gconstpointer  data)
{
  g_autofree char *owner = NULL;

  if (!have_nobody (f))
    return;
  g_free (f->root);
  f->root = g_build_filename (f->pub, "root", NULL);
  nobody_mkdir (f, f->root, "0755");
  owner = g_strdup_printf ("uid %u", (guint) f->nobody_uid);
  assert_refused (f, data, f->root, owner);
  assert_refused (f, data, f->root, "mode 0755");
  g_assert_cmpuint (test_dir_count_files (f->root, NULL), ==, 0);
}

/* A root of the tier's user that its group (or anyone) may write:
 * refused; trust-group accepts it when the group is the one trusted,
 * never when anyone may write it. */
static void
test_group_writable_root (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *gid = NULL;

  if (!have_nobody (f))
    return;
  g_assert_cmpint (g_mkdir (f->root, 0700), ==, 0);
  g_assert_cmpint (chown (f->root, 0, f->nobody_gid), ==, 0);
  g_assert_cmpint (chmod (f->root, 0770), ==, 0);
  assert_refused (f, data, f->root, "mode 0770");

  /* trusting another group does not help */
  f->tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                   "trust-group", "0", NULL);
  g_assert_null (f->tier);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
  g_clear_error (&error);

  gid = g_strdup_printf ("%u", (guint) f->nobody_gid);
  f->tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                   "trust-group", gid, NULL);
  g_assert_no_error (error);
  g_assert_nonnull (f->tier);
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 0, 2);
    g_autoptr(KvJobResult) loaded = NULL;

    g_assert_true (kv_job_result_get_success (stored));
    loaded = run_job (f, TRUE, 0, 2);
    g_assert_true (kv_job_result_get_success (loaded));
  }
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);

  /* writable by anyone: refused even with the group trusted */
  g_assert_cmpint (chmod (f->root, 0777), ==, 0);
  f->tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                   "trust-group", gid, NULL);
  g_assert_null (f->tier);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
  g_assert_nonnull (strstr (error->message, "mode 0777"));
}

static void
test_unknown_trust_group (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  f->tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                   "trust-group", "no-such-group-kvtier", NULL);
  g_assert_null (f->tier);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "no-such-group-kvtier"));
}

/* ---- symbolic links ------------------------------------------------------- */

/* The namespace directory is a link to another user's directory:
 * refused, and nothing is written there. */
static void
test_symlinked_namespace (Fixture       *f,
                          gconstpointer  data)
{
  g_autofree char *evil = g_build_filename (f->pub, "evil", NULL);
  g_autofree char *ns_dir = chunk_dir_for (f->root, data);

  if (!have_nobody (f))
    return;
  nobody_mkdir (f, evil, "0777");
  g_assert_cmpint (g_mkdir (f->root, 0700), ==, 0);
  g_assert_cmpint (symlink (evil, ns_dir), ==, 0);
  g_assert_cmpint (lchown (ns_dir, f->nobody_uid, f->nobody_gid), ==, 0);

  assert_refused (f, data, ns_dir, "symbolic link");
  g_assert_cmpuint (test_dir_count_files (evil, NULL), ==, 0);
}

/* A shard directory is a link to another user's directory: refused,
 * and no chunk lands there. */
static void
test_symlinked_shard (Fixture       *f,
                      gconstpointer  data)
{
  g_autofree char *evil = g_build_filename (f->pub, "evil", NULL);
  g_autofree char *ns_dir = chunk_dir_for (f->root, data);
  g_autofree char *shard = g_build_filename (ns_dir, "00", NULL);

  if (!have_nobody (f))
    return;
  nobody_mkdir (f, evil, "0777");
  g_assert_cmpint (g_mkdir_with_parents (ns_dir, 0700), ==, 0);
  g_assert_cmpint (symlink (evil, shard), ==, 0);

  assert_refused (f, data, shard, "symbolic link");
  g_assert_cmpuint (test_dir_count_files (evil, NULL), ==, 0);
}

/* A shard directory of another user's: refused. */
static void
test_foreign_shard (Fixture       *f,
                    gconstpointer  data)
{
  g_autofree char *ns_dir = chunk_dir_for (f->root, data);
  g_autofree char *shard = g_build_filename (ns_dir, "7f", NULL);
  g_autofree char *owner = NULL;

  if (!have_nobody (f))
    return;
  g_assert_cmpint (g_mkdir_with_parents (shard, 0700), ==, 0);
  g_assert_cmpint (chown (shard, f->nobody_uid, f->nobody_gid), ==, 0);
  owner = g_strdup_printf ("uid %u", (guint) f->nobody_uid);
  assert_refused (f, data, shard, owner);
}

/* vLLM's layout makes its directories on first use: one replaced by a
 * link after the tier started is not written through, by any engine. */
static void
test_symlinked_vllm_dir (Fixture       *f,
                         gconstpointer  data)
{
  g_autofree char *evil = g_build_filename (f->pub, "evil", NULL);
  g_autofree char *path = NULL;
  g_autofree char *dir1 = NULL;
  g_autoptr(KvJobResult) stored = NULL;

  if (!have_nobody (f))
    return;
  nobody_mkdir (f, evil, "0777");
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  /* <chunk dir>/<hex[:3]>/<hex[3:5]>_g<group>/<hex>.bin: link <hex[:3]> */
  path = kv_fs_tier_get_chunk_path (f->tier, f->keys[0]);
  dir1 = g_path_get_dirname (path);
  {
    g_autofree char *top = g_path_get_dirname (dir1);

    g_assert_cmpint (symlink (evil, top), ==, 0);
  }
  stored = run_job (f, FALSE, 0, 1);
  g_assert_false (kv_job_result_get_success (stored));
  g_assert_cmpuint (test_dir_count_files (evil, NULL), ==, 0);
}

/* ---- planted chunks ------------------------------------------------------- */

/* Another user's copy of a valid chunk file (header and checksums
 * right, bytes of its choosing) in place of the tier's: the load is a
 * miss, counted, and the file stays (it is not the tier's to delete). */
static void
test_planted_chunk (Fixture       *f,
                    gconstpointer  data)
{
  g_autofree char *path = NULL;
  g_autofree char *forged = g_build_filename (f->pub, "forged", NULL);
  g_autofree char *contents = NULL;
  gsize len = 0;

  if (!have_nobody (f))
    return;
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 0, 2);

    g_assert_true (kv_job_result_get_success (stored));
  }
  path = kv_fs_tier_get_chunk_path (f->tier, f->keys[0]);
  g_assert_true (g_file_get_contents (path, &contents, &len, NULL));
  nobody_write (f, forged, contents, len);
  /* the other user's file takes the chunk's name (rename keeps its owner) */
  g_assert_cmpint (rename (forged, path), ==, 0);

  {
    g_autoptr(KvJobResult) loaded = run_job (f, TRUE, 0, 1);

    g_assert_false (kv_job_result_get_success (loaded));
  }
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (foreign_files (f->tier), ==, 1);
  g_assert_cmpint (lookup (f, 0), ==, KV_LOOKUP_RESULT_MISS);
  {
    g_autoptr(KvJobResult) loaded = run_job (f, TRUE, 1, 1);

    g_assert_true (kv_job_result_get_success (loaded));
  }
}

/* With trust-group, a chunk file of a member of the group (the file
 * belongs to the group) is served: that is what trusting it means. */
static void
test_trusted_group_chunk (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *gid = NULL;
  g_autofree char *path = NULL;
  g_autofree char *copy = g_build_filename (f->pub, "copy", NULL);
  g_autofree char *contents = NULL;
  gsize len = 0;

  if (!have_nobody (f))
    return;
  gid = g_strdup_printf ("%u", (guint) f->nobody_gid);
  f->tier = fs_test_tier_new_full (f->buffer, f->root, data, NULL, &error,
                                   "trust-group", gid, NULL);
  g_assert_no_error (error);
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 0, 1);

    g_assert_true (kv_job_result_get_success (stored));
  }
  path = kv_fs_tier_get_chunk_path (f->tier, f->keys[0]);
  g_assert_true (g_file_get_contents (path, &contents, &len, NULL));
  nobody_write (f, copy, contents, len);
  g_assert_cmpint (rename (copy, path), ==, 0);
  {
    g_autoptr(KvJobResult) loaded = run_job (f, TRUE, 0, 1);

    g_assert_true (kv_job_result_get_success (loaded));
    g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, 0), FS_TEST_SLOT, 0));
  }
  /* ... but never a file anyone may write */
  g_assert_cmpint (chmod (path, 0666), ==, 0);
  {
    g_autoptr(KvJobResult) loaded = run_job (f, TRUE, 0, 1);

    g_assert_false (kv_job_result_get_success (loaded));
  }
  g_assert_cmpuint (foreign_files (f->tier), ==, 1);
}

/* A chunk file of the tier's user that others may write: not served. */
static void
test_writable_chunk (Fixture       *f,
                     gconstpointer  data)
{
  g_autofree char *path = NULL;

  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 0, 1);

    g_assert_true (kv_job_result_get_success (stored));
  }
  path = kv_fs_tier_get_chunk_path (f->tier, f->keys[0]);
  g_assert_cmpint (chmod (path, 0666), ==, 0);
  {
    g_autoptr(KvJobResult) loaded = run_job (f, TRUE, 0, 1);

    g_assert_false (kv_job_result_get_success (loaded));
  }
  g_assert_cmpuint (foreign_files (f->tier), ==, 1);
}

/* On a warm restart, planted files are neither indexed nor served, and
 * *.tmp files of names the tier's format does not define, or of another
 * user, are not deleted. */
static void
test_restart_scan (Fixture       *f,
                   gconstpointer  data)
{
  g_autofree char *path0 = NULL;
  g_autofree char *dir = NULL;
  g_autofree char *forged = g_build_filename (f->pub, "forged", NULL);
  g_autofree char *foreign_tmp = g_build_filename (f->pub, "foreign-tmp", NULL);
  g_autofree char *notes = NULL;
  g_autofree char *suffixed = NULL;
  g_autofree char *own_tmp = NULL;
  g_autofree char *their_tmp = NULL;
  g_autofree char *contents = NULL;
  gsize len = 0;
  g_autoptr(KvRequest) request = kv_request_new ("restart", NULL);

  if (!have_nobody (f))
    return;
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 0, 3);

    g_assert_true (kv_job_result_get_success (stored));
  }
  path0 = kv_fs_tier_get_chunk_path (f->tier, f->keys[0]);
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);

  /* key 0's file: another user's forgery of it */
  g_assert_true (g_file_get_contents (path0, &contents, &len, NULL));
  nobody_write (f, forged, contents, len);
  g_assert_cmpint (rename (forged, path0), ==, 0);

  dir = g_path_get_dirname (path0);
  notes = g_build_filename (dir, "notes.tmp", NULL);
  g_assert_true (g_file_set_contents (notes, "keep", 4, NULL));
  suffixed = g_strdup_printf ("%s.tmp", path0);
  g_assert_true (g_file_set_contents (suffixed, "keep", 4, NULL));
  /* a temporary name of the tier's format: its own is removed, another
   * user's is not */
  own_tmp = g_strdup_printf ("%s_%016x-%08x.tmp", path0, 0x1234u, 0x5678u);
  g_assert_true (g_file_set_contents (own_tmp, "stale", 5, NULL));
  their_tmp = g_strdup_printf ("%s_%016x-%08x.tmp", path0, 0x1234u, 0x9abcu);
  nobody_write (f, foreign_tmp, "theirs", 6);
  g_assert_cmpint (rename (foreign_tmp, their_tmp), ==, 0);

  kv_fs_tier_hold_scans (TRUE);
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  /* while the scan waits, the disk is asked: the forgery is no chunk */
  {
    KvLookupResult r = kv_secondary_tier_lookup (KV_SECONDARY_TIER (f->tier), f->keys[0],
                                                 request);

    for (guint i = 0; r == KV_LOOKUP_RESULT_RETRY && i < 30000; i++)
      {
        g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

        kv_secondary_tier_on_schedule_end (KV_SECONDARY_TIER (f->tier), end);
        g_usleep (1000);
        r = kv_secondary_tier_lookup (KV_SECONDARY_TIER (f->tier), f->keys[0], request);
      }
    g_assert_cmpint (r, ==, KV_LOOKUP_RESULT_MISS);
  }
  kv_fs_tier_hold_scans (FALSE);
  kv_fs_tier_wait_index_ready (f->tier);
  kv_secondary_tier_on_request_finished (KV_SECONDARY_TIER (f->tier), request);

  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SCANNED_CHUNKS), ==, 2);
  g_assert_cmpint (lookup (f, 0), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_true (g_file_test (notes, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (suffixed, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (their_tmp, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (path0, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (own_tmp, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_TEMP_FILES_REMOVED), ==, 1);
  /* the forged chunk and the other user's temporary file */
  g_assert_cmpuint (foreign_files (f->tier), ==, 2);
}

/* The restart scan deletes the tier's own stale temporary files only:
 * not other *.tmp names, not another user's file of a temporary name. */
static void
test_restart_keeps_tmp (Fixture       *f,
                        gconstpointer  data)
{
  g_autofree char *path0 = NULL;
  g_autofree char *dir = NULL;
  g_autofree char *foreign_tmp = g_build_filename (f->pub, "foreign-tmp", NULL);
  g_autofree char *notes = NULL;
  g_autofree char *suffixed = NULL;
  g_autofree char *own_tmp = NULL;
  g_autofree char *their_tmp = NULL;

  if (!have_nobody (f))
    return;
  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 0, 1);

    g_assert_true (kv_job_result_get_success (stored));
  }
  path0 = kv_fs_tier_get_chunk_path (f->tier, f->keys[0]);
  fs_test_shutdown (f->tier);
  g_clear_object (&f->tier);

  dir = g_path_get_dirname (path0);
  notes = g_build_filename (dir, "notes.tmp", NULL);
  g_assert_true (g_file_set_contents (notes, "keep", 4, NULL));
  suffixed = g_strdup_printf ("%s.tmp", path0);
  g_assert_true (g_file_set_contents (suffixed, "keep", 4, NULL));
  own_tmp = g_strdup_printf ("%s_%016x-%08x.tmp", path0, 0x1234u, 0x5678u);
  g_assert_true (g_file_set_contents (own_tmp, "stale", 5, NULL));
  their_tmp = g_strdup_printf ("%s_%016x-%08x.tmp", path0, 0x1234u, 0x9abcu);
  nobody_write (f, foreign_tmp, "theirs", 6);
  g_assert_cmpint (rename (foreign_tmp, their_tmp), ==, 0);

  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  kv_fs_tier_wait_index_ready (f->tier);
  g_assert_true (g_file_test (notes, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (suffixed, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (their_tmp, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (own_tmp, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_TEMP_FILES_REMOVED), ==, 1);
  g_assert_cmpuint (kv_fs_tier_get_counter (f->tier, KV_FS_COUNTER_SCANNED_CHUNKS), ==, 1);
}

/* ---- a root removed under a running tier ----------------------------------- */

/* Its directories and its identity file are made again, and stores go
 * on (issue 13, item 7). */
static void
test_root_removed (Fixture       *f,
                   gconstpointer  data)
{
  const FsVariant *v = data;
  g_autofree char *meta = NULL;
  g_autofree char *ns_dir = chunk_dir_for (f->root, v);

  f->tier = fs_test_tier_new (f->buffer, f->root, data, NULL);
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 0, 2);

    g_assert_true (kv_job_result_get_success (stored));
  }
  if (v->layout == KV_FS_LAYOUT_KIND_VLLM)
    {
      /* config.json lives beside the chunk directory: <root>/<model>_<digest> */
      g_autofree char *top = g_path_get_basename (ns_dir);

      top[strlen (top) - strlen ("_r0")] = '\0';
      meta = g_build_filename (f->root, top, "config.json", NULL);
    }
  else
    meta = g_build_filename (ns_dir, "namespace.json", NULL);
  g_assert_true (g_file_test (meta, G_FILE_TEST_IS_REGULAR));

  test_dir_remove (f->root);
  g_assert_false (g_file_test (f->root, G_FILE_TEST_EXISTS));
  {
    g_autoptr(KvJobResult) stored = run_job (f, FALSE, 2, 3);
    g_autoptr(KvJobResult) loaded = NULL;

    g_assert_true (kv_job_result_get_success (stored));
    loaded = run_job (f, TRUE, 2, 3);
    g_assert_true (kv_job_result_get_success (loaded));
    for (guint i = 0; i < 3; i++)
      g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (f->buffer, i), FS_TEST_SLOT, 2 + i));
  }
  g_assert_true (g_file_test (meta, G_FILE_TEST_IS_REGULAR));
  {
    struct stat st;

    g_assert_cmpint (stat (f->root, &st), ==, 0);
    g_assert_cmpint (st.st_mode & 0777, ==, 0700);
    g_assert_cmpint (stat (meta, &st), ==, 0);
    g_assert_cmpint (st.st_mode & 0777, ==, 0600);
  }
}

/* ---- main ------------------------------------------------------------------ */

static const FsVariant kvtier_threads = { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_OFF,
                                          KV_FS_LAYOUT_KIND_KVTIER };
static const FsVariant vllm_threads = { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_OFF,
                                        KV_FS_LAYOUT_KIND_VLLM };

static void
add (const char      *name,
     const FsVariant *v,
     void           (*func) (Fixture *, gconstpointer))
{
  g_autofree char *path = g_strdup_printf ("/kvtier/fs/hostile-root/%s/%s/%s",
                                           fs_engine_name (v->engine),
                                           v->layout == KV_FS_LAYOUT_KIND_VLLM ? "vllm" : "kvtier",
                                           name);

  if (fs_test_skip_engine (v->engine))
    return;
  g_test_add (path, Fixture, v, setup, func, teardown);
}

int
main (int   argc,
      char *argv[])
{
  static const FsVariant engines[] = {
    { KV_FS_IO_ENGINE_URING, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER },
    { KV_FS_IO_ENGINE_GIO, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_KVTIER },
    { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER },
    { KV_FS_IO_ENGINE_URING, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_VLLM },
    { KV_FS_IO_ENGINE_GIO, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_VLLM },
    { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_VLLM },
  };

  g_test_init (&argc, &argv, NULL);

  /* construction refuses: one engine is enough */
  add ("foreign-root", &kvtier_threads, test_foreign_root);
  add ("foreign-root", &vllm_threads, test_foreign_root);
  add ("group-writable-root", &kvtier_threads, test_group_writable_root);
  add ("unknown-trust-group", &kvtier_threads, test_unknown_trust_group);
  add ("symlinked-namespace", &kvtier_threads, test_symlinked_namespace);
  add ("symlinked-namespace", &vllm_threads, test_symlinked_namespace);
  add ("symlinked-shard", &kvtier_threads, test_symlinked_shard);
  add ("foreign-shard", &kvtier_threads, test_foreign_shard);

  /* the data path: every engine */
  for (guint i = 0; i < G_N_ELEMENTS (engines); i++)
    {
      if (engines[i].layout == KV_FS_LAYOUT_KIND_VLLM)
        add ("symlinked-dir", &engines[i], test_symlinked_vllm_dir);
      add ("planted-chunk", &engines[i], test_planted_chunk);
      add ("writable-chunk", &engines[i], test_writable_chunk);
      add ("trusted-group-chunk", &engines[i], test_trusted_group_chunk);
      add ("restart-scan", &engines[i], test_restart_scan);
      add ("restart-keeps-tmp", &engines[i], test_restart_keeps_tmp);
      add ("root-removed", &engines[i], test_root_removed);
    }
  return g_test_run ();
}
