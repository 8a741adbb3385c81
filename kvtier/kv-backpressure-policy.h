/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

#define KV_TYPE_BACKPRESSURE_POLICY (kv_backpressure_policy_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_DERIVABLE_TYPE (KvBackpressurePolicy, kv_backpressure_policy, KV, BACKPRESSURE_POLICY, GObject)

typedef struct _KvBackpressureDetector KvBackpressureDetector;

/**
 * KvBackpressurePolicyClass:
 * @parent_class: the parent class
 * @should_store: decide whether a store may go ahead while @detector reports
 *   its state; called only when the detector is not on its healthy fast path.
 * @on_store_skipped: count a store of @n_chunks chunks that was dropped; the
 *   default adds to the counters returned by
 *   [method@Kv.BackpressurePolicy.pop_stores_dropped].
 * @reset: forget all state; the default zeroes the drop counters.
 *
 * The class structure of [class@Kv.BackpressurePolicy].
 */
struct _KvBackpressurePolicyClass
{
  GObjectClass parent_class;

  gboolean (*should_store)     (KvBackpressurePolicy   *self,
                                KvBackpressureDetector *detector);
  void     (*on_store_skipped) (KvBackpressurePolicy   *self,
                                guint                   n_chunks);
  void     (*reset)            (KvBackpressurePolicy   *self);

  /*< private >*/
  gpointer _reserved[8];
};

KVTIER_AVAILABLE_IN_ALL
gboolean kv_backpressure_policy_should_store       (KvBackpressurePolicy   *self,
                                                    KvBackpressureDetector *detector);
KVTIER_AVAILABLE_IN_ALL
void     kv_backpressure_policy_on_store_skipped   (KvBackpressurePolicy   *self,
                                                    guint                   n_chunks);
KVTIER_AVAILABLE_IN_ALL
void     kv_backpressure_policy_pop_stores_dropped (KvBackpressurePolicy   *self,
                                                    guint64                *out_stores,
                                                    guint64                *out_chunks);
KVTIER_AVAILABLE_IN_ALL
void     kv_backpressure_policy_reset              (KvBackpressurePolicy   *self);

G_END_DECLS
