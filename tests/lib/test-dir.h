/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Temporary directories of a test: made private, counted, removed. */

#include <glib.h>

G_BEGIN_DECLS

char  *test_dir_make        (const char *prefix);
void   test_dir_remove      (const char *path);
guint  test_dir_count_files (const char *path,
                             const char *suffix);

G_END_DECLS
