/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/*
 * The ceiling of fs-throughput on a memory-backed root (tmpfs, ramfs),
 * where a file's bytes are pages of memory and "the device" is memory
 * itself: a plain memcpy of the same chunks, between memory laid out like
 * the tier's (a primary-sized buffer of slots, and a buffer of the run's
 * total size standing for the files' pages), by 1 to n-CPUs threads,
 * measured in the same run; and the same reads checking what they copy.
 * See fs-memory-ceiling.c.
 */
typedef struct
{
  guint8  *primary;        /* like the primary tier's slots */
  gsize    primary_size;
  guint8  *files;          /* like the files' pages, written once beforehand */
  gsize    files_size;
  gsize    io_size;
  guint64  n_ios;
  guint64 *order;          /* chunk i of a pass is order[i] */

  /* the sweep's best */
  guint    write_threads;
  guint    read_threads;
  double   write_gbs;
  double   read_gbs;
  double   write_cpu;      /* s/GB */
  double   read_cpu;
  /* reads that check what they copy, as a load of the tier must */
  guint    checked_threads;
  double   checked_gbs;
  double   checked_cpu;
} MemoryCeiling;

gboolean memory_backed_dir       (const char    *dir,
                                  const char   **out_fs_name);
gboolean memory_ceiling_init     (MemoryCeiling *c,
                                  gsize          io_size,
                                  guint64        total,
                                  gsize          primary_size,
                                  gboolean       details);
double   memory_ceiling_pass     (MemoryCeiling *c,
                                  gboolean       write,
                                  guint          n_threads,
                                  double        *out_cpu);
double   memory_ceiling_checked_read_pass (MemoryCeiling *c,
                                           guint          n_threads,
                                           double        *out_cpu);
void     memory_ceiling_clear    (MemoryCeiling *c);

G_END_DECLS
