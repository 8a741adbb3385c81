/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Reading a KvStats snapshot in tests: a counter's or gauge's value, and
 * that a count did not move. */

#include <kvtier.h>

G_BEGIN_DECLS

gdouble test_stats_value (KvStats            *stats,
                          const char         *name,
                          const char * const *labels);

/* The series @name of @labels is absent from @stats or 0: nothing was
 * counted since the last read (a macro, so a failure names the caller's
 * line). */
#define test_stats_assert_no_count(stats, name, labels) \
  g_assert_cmpfloat (MAX (test_stats_value ((stats), (name), (labels)), 0), ==, 0)

G_END_DECLS
