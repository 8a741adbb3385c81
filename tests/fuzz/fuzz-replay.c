/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* Runs a fuzz target over files and directories given on the command line,
 * with no libFuzzer: each regular file is one input. Built with the normal
 * compiler for every target so its seed corpus runs as an ordinary test
 * (and under ASan/UBSan in the sanitizer build) wherever clang is absent. */

#include "config.h"

#include "fuzz-common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Weak: a target that needs no set-up does not define it. */
extern int LLVMFuzzerInitialize (int *argc, char ***argv) __attribute__ ((weak));

static int
compare_names (gconstpointer a,
               gconstpointer b)
{
  return strcmp (*(char * const *) a, *(char * const *) b);
}

static void
replay_file (const char *path,
             guint      *n_inputs)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *contents = NULL;
  gsize len = 0;
  guint8 *exact;

  if (!g_file_get_contents (path, &contents, &len, &error))
    g_error ("%s", error->message);
  /* An exactly sized copy, so that a read past the input's end is seen by
   * ASan as libFuzzer would show it (contents has a NUL after it). */
  exact = g_memdup2 (contents, len > 0 ? len : 1);
  LLVMFuzzerTestOneInput (exact, len);
  g_free (exact);
  (*n_inputs)++;
}

static void
replay_dir (const char *path,
            guint      *n_inputs)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) dir = g_dir_open (path, 0, &error);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  const char *name;

  if (dir == NULL)
    g_error ("%s", error->message);
  while ((name = g_dir_read_name (dir)) != NULL)
    g_ptr_array_add (names, g_build_filename (path, name, NULL));
  /* A fixed order, so a failure is reproduced by the same run. */
  g_ptr_array_sort (names, compare_names);
  for (guint i = 0; i < names->len; i++)
    {
      const char *file = g_ptr_array_index (names, i);

      if (g_file_test (file, G_FILE_TEST_IS_REGULAR))
        replay_file (file, n_inputs);
    }
}

int
main (int    argc,
      char **argv)
{
  guint n_inputs = 0;

  if (argc < 2)
    {
      fprintf (stderr, "usage: %s CORPUS-DIR-OR-FILE...\n", argv[0]);
      return 2;
    }
  if (LLVMFuzzerInitialize != NULL)
    LLVMFuzzerInitialize (&argc, &argv);

  for (int i = 1; i < argc; i++)
    {
      guint before = n_inputs;

      if (g_file_test (argv[i], G_FILE_TEST_IS_DIR))
        replay_dir (argv[i], &n_inputs);
      else
        replay_file (argv[i], &n_inputs);
      printf ("%s: %u inputs\n", argv[i], n_inputs - before);
    }
  /* An empty corpus would make this test pass without checking anything. */
  if (n_inputs == 0)
    {
      fprintf (stderr, "no inputs replayed\n");
      return 1;
    }
  return 0;
}
