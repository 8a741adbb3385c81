/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-dir.h"

#include <sys/stat.h>

#include <glib/gstdio.h>

/* A new private (0700) directory under the temporary directory, named
 * after @prefix ("kvtier-fs-test" makes kvtier-fs-test-XXXXXX). */
char *
test_dir_make (const char *prefix)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *template = g_strdup_printf ("%s-XXXXXX", prefix);
  char *dir = g_dir_make_tmp (template, &error);

  g_assert_no_error (error);
  return dir;
}

/* Removes @path and everything below it; a symbolic link is removed, never
 * followed. Nothing happens when @path does not exist. */
void
test_dir_remove (const char *path)
{
  g_autoptr(GDir) dir = NULL;
  const char *name;
  GStatBuf st;

  if (g_lstat (path, &st) != 0)
    return;
  if (!S_ISDIR (st.st_mode))
    {
      g_unlink (path);
      return;
    }
  dir = g_dir_open (path, 0, NULL);
  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      test_dir_remove (child);
    }
  g_rmdir (path);
}

/* Regular files under @path (recursively) whose name ends with @suffix,
 * or all of them when @suffix is %NULL. */
guint
test_dir_count_files (const char *path,
                      const char *suffix)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;
  guint n = 0;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR))
        n += test_dir_count_files (child, suffix);
      else if (suffix == NULL || g_str_has_suffix (name, suffix))
        n++;
    }
  return n;
}
