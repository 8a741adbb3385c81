/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "metrics-doc.h"

#include <string.h>

static void
row_free (gpointer data)
{
  MetricsDocRow *row = data;

  g_free (row->name);
  g_free (row->exposed);
  g_free (row->type);
  g_free (row->labels);
  g_free (row->meaning);
  g_free (row->section);
  g_free (row);
}

static char *
strip (const char *cell)
{
  return g_strstrip (g_strdup (cell));
}

GHashTable *
metrics_doc_read (void)
{
  g_autofree char *path = g_test_build_filename (G_TEST_DIST, "..", "doc", "metrics.md", NULL);
  g_autofree char *text = NULL;
  g_autofree char *section = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) lines = NULL;
  g_autoptr(GRegex) name_re = g_regex_new ("^`([a-zA-Z_:][a-zA-Z0-9_:]*)`$", 0, 0, NULL);
  GHashTable *rows = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, row_free);

  g_assert_true (g_file_get_contents (path, &text, NULL, &error));
  g_assert_no_error (error);
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) cells = NULL;
      g_autoptr(GMatchInfo) match = NULL;
      g_autofree char *first = NULL;
      g_autofree char *labels = NULL;
      MetricsDocRow *row;

      if (g_str_has_prefix (lines[i], "## "))
        {
          g_free (section);
          /* the family tables are under "## The ..." */
          section = g_str_has_prefix (lines[i], "## The ") ? g_strdup (lines[i] + 3) : NULL;
        }
      if (section == NULL || !g_str_has_prefix (lines[i], "| `"))
        continue;
      cells = g_strsplit (lines[i], "|", -1);
      g_assert_cmpuint (g_strv_length (cells), ==, 7);
      first = strip (cells[1]);
      if (!g_regex_match (name_re, first, 0, &match))
        g_error ("doc/metrics.md: not a family name: %s", first);
      row = g_new0 (MetricsDocRow, 1);
      row->exposed = g_match_info_fetch (match, 1);
      row->section = g_strdup (section);
      row->type = strip (cells[2]);
      /* counters are listed as exposed, with _total */
      if (g_str_equal (row->type, "counter"))
        {
          g_assert_true (g_str_has_suffix (row->exposed, "_total"));
          row->name = g_strndup (row->exposed, strlen (row->exposed) - strlen ("_total"));
        }
      else
        {
          row->name = g_strdup (row->exposed);
        }
      labels = strip (cells[4]);
      if (g_str_equal (labels, "—"))
        {
          row->labels = g_strdup ("");
        }
      else
        {
          g_auto(GStrv) parts = g_strsplit (labels, ",", -1);

          for (guint p = 0; parts[p] != NULL; p++)
            {
              g_strstrip (parts[p]);
              g_assert_true (g_str_has_prefix (parts[p], "`") && g_str_has_suffix (parts[p], "`"));
              memmove (parts[p], parts[p] + 1, strlen (parts[p]));
              parts[p][strlen (parts[p]) - 1] = '\0';
            }
          row->labels = g_strjoinv (", ", parts);
        }
      row->meaning = strip (cells[5]);
      if (!g_hash_table_insert (rows, row->name, row))
        g_error ("doc/metrics.md lists %s twice", row->name);
    }
  return rows;
}
