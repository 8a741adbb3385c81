/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* One row of the family tables of doc/metrics.md. */
typedef struct
{
  char *name;      /* as defined: counters without the _total they are listed with */
  char *exposed;   /* as listed (and exposed) */
  char *type;      /* counter, gauge, histogram */
  char *labels;    /* "tier", "a, b" or "" */
  char *meaning;
  char *section;   /* "The tiering manager", "The connector", ... */
} MetricsDocRow;

/* The families doc/metrics.md lists: name → MetricsDocRow. Asserts the
 * tables are well formed. */
GHashTable *metrics_doc_read (void);

G_END_DECLS
