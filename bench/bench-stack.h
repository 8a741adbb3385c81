/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* What the throughput benches drive: a tiering manager over a fresh
 * primary tier and one secondary tier, stepped as an engine steps it, and
 * the store and load passes they time. */
typedef struct
{
  KvHostBuffer     *buffer;
  KvPrimaryTier    *primary;
  KvTieringManager *manager;
  KvSecondaryTier  *tier;
  int               wakeup_fd;
  /* set by the bench before a pass */
  guint8            key_tag;         /* the last byte of every chunk's hash */
  guint             wakeup_ms;       /* the longest wait for a result (default 5) */
  gboolean          carry_checksum;  /* stored slots carry slot_checksum, as after a device copy */
  guint64           slot_checksum;
  /* the tier's own counts of chunks loaded and of failed loads (for the
   * load pass of bench_stack_run_load) */
  guint64         (*loaded_chunks)   (KvSecondaryTier *tier);
  guint64         (*load_failures)   (KvSecondaryTier *tier);
} BenchStack;

gboolean bench_stack_init_primary (BenchStack       *s,
                                   guint             n_slots,
                                   gsize             chunk,
                                   guint8            fill,
                                   GError          **error);
gboolean bench_stack_add_tier     (BenchStack       *s,
                                   gpointer          tier,
                                   GError          **error);
void     bench_stack_carry_checksums (BenchStack    *s);
void     bench_stack_clear        (BenchStack       *s);
void     bench_stack_step         (BenchStack       *s);
void     bench_stack_wait_wakeup  (BenchStack       *s);
KvKey   *bench_stack_key          (BenchStack       *s,
                                   guint64           i);
gdouble  bench_stack_run_store    (BenchStack       *s,
                                   guint64           first,
                                   guint64           n_chunks,
                                   guint             batch);
gdouble  bench_stack_run_load     (BenchStack       *s,
                                   guint64           n_chunks,
                                   guint             batch);
gdouble  bench_stack_timed_load   (BenchStack       *s,
                                   guint64           n_chunks,
                                   guint             batch,
                                   const char       *what,
                                   gdouble          *out_cpu_s);
void     bench_stack_look_up_all  (BenchStack       *s,
                                   guint64           n_chunks,
                                   gint64            timeout_us);

void     bench_shortfall          (guint64           got,
                                   guint64           want,
                                   const char       *what);
gboolean bench_shortfall_seen     (void);

G_END_DECLS
