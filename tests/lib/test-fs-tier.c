/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-fs-tier.h"

#include <glib/gstdio.h>

#include "test-object.h"

/* Valgrind does not let a thread blocked in io_uring_enter() release its
 * lock, so the uring engine hangs under it: valgrind runs (the `valgrind`
 * test setup sets KVTIER_UNDER_VALGRIND) skip it, and `auto` means the
 * thread pool there. */
gboolean
fs_test_skip_engine (KvFsIoEngine engine)
{
  return engine == KV_FS_IO_ENGINE_URING && g_getenv ("KVTIER_UNDER_VALGRIND") != NULL;
}

KvFsIoEngine
fs_test_engine (KvFsIoEngine engine)
{
  if (engine == KV_FS_IO_ENGINE_AUTO && g_getenv ("KVTIER_UNDER_VALGRIND") != NULL)
    return KV_FS_IO_ENGINE_THREADS;
  return engine;
}

const char *
fs_engine_name (KvFsIoEngine engine)
{
  switch (engine)
    {
    case KV_FS_IO_ENGINE_URING: return "uring";
    case KV_FS_IO_ENGINE_GIO: return "gio";
    case KV_FS_IO_ENGINE_THREADS: return "threads";
    default: return "auto";
    }
}

/* Creates the directories above @path (0700), as a tier would. */
void
fs_test_make_parent (const char *path)
{
  g_autofree char *dir = g_path_get_dirname (path);

  g_assert_cmpint (g_mkdir_with_parents (dir, 0700), ==, 0);
}

/* Runs a python3 snippet (with /usr/bin/python3, independent of the code
 * under test) and returns its stripped stdout; NULL without python3. */
char *
fs_test_python (const char *script)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  const char *argv[] = { "/usr/bin/python3", "-c", script, NULL };
  int status = 0;

  if (!g_file_test (argv[0], G_FILE_TEST_IS_EXECUTABLE))
    return NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                               &out, &err, &status, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("python3 failed: %s", err);
  return g_strstrip (g_steal_pointer (&out));
}

/* Creates a tier with the variant's engine, O_DIRECT mode and layout,
 * 2+2 threads, a manual clock (no deadline passes unless a test moves
 * it), then @first_property... as extra settings. */
KvFsTier *
fs_test_tier_new_valist (KvHostBuffer    *buffer,
                         const char      *root,
                         const FsVariant *variant,
                         KvClock         *clock,
                         GError         **error,
                         const char      *first_property,
                         va_list          args)
{
  g_autoptr(TestProperties) props = test_properties_new (KV_TYPE_FS_TIER);
  g_autoptr(KvClock) own_clock = clock ? g_object_ref (clock) : kv_clock_new_manual (1000000);

  test_properties_set (props, "tier-type", G_TYPE_STRING, "fs");
  test_properties_set (props, "primary", KV_TYPE_HOST_BUFFER, buffer);
  test_properties_set (props, "root", G_TYPE_STRING, root);
  test_properties_set (props, "io-engine", KV_TYPE_FS_IO_ENGINE, fs_test_engine (variant->engine));
  test_properties_set (props, "o-direct", KV_TYPE_FS_ODIRECT, variant->o_direct);
  test_properties_set (props, "layout", KV_TYPE_FS_LAYOUT_KIND, variant->layout);
  test_properties_set (props, "n-read-threads", G_TYPE_UINT, 2);
  test_properties_set (props, "n-write-threads", G_TYPE_UINT, 2);
  test_properties_set (props, "queue-depth", G_TYPE_UINT, 16);
  test_properties_set (props, "clock", KV_TYPE_CLOCK, own_clock);
  if (variant->layout == KV_FS_LAYOUT_KIND_VLLM)
    test_properties_set (props, "vllm-identity", G_TYPE_STRING, FS_TEST_VLLM_IDENTITY);
  /* layout=slab preallocates max-size: 64 slots by default, in slab
   * files of 16 slots, so that tests cross files */
  if (variant->layout == KV_FS_LAYOUT_KIND_SLAB)
    {
      test_properties_set (props, "max-size", G_TYPE_UINT64,
                           (guint64) FS_TEST_SLAB_SLOTS * (FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE));
      test_properties_set (props, "slab-size", G_TYPE_UINT64,
                           (guint64) KV_SLAB_HEADER_SIZE + 16 * (guint64) (FS_TEST_SLOT + KV_CHUNK_HEADER_SIZE));
    }
  test_properties_collect (props, first_property, args);
  return (KvFsTier *) test_properties_new_initable (props, error);
}

KvFsTier *
fs_test_tier_new_full (KvHostBuffer    *buffer,
                       const char      *root,
                       const FsVariant *variant,
                       KvClock         *clock,
                       GError         **error,
                       const char      *first_property,
                       ...)
{
  va_list args;
  KvFsTier *tier;

  va_start (args, first_property);
  tier = fs_test_tier_new_valist (buffer, root, variant, clock, error, first_property, args);
  va_end (args);
  return tier;
}

KvFsTier *
fs_test_tier_new (KvHostBuffer    *buffer,
                  const char      *root,
                  const FsVariant *variant,
                  const char      *first_property,
                  ...)
{
  g_autoptr(GError) error = NULL;
  va_list args;
  KvFsTier *tier;

  va_start (args, first_property);
  tier = fs_test_tier_new_valist (buffer, root, variant, NULL, &error, first_property, args);
  va_end (args);
  g_assert_no_error (error);
  g_assert_nonnull (tier);
  return tier;
}

void
fs_test_shutdown (KvFsTier *tier)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (tier), &error));
  g_assert_no_error (error);
}
