/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-backpressure-policy.h"
#include "kv-clock.h"

G_BEGIN_DECLS

#define KV_TYPE_BACKPRESSURE_DETECTOR (kv_backpressure_detector_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_DERIVABLE_TYPE (KvBackpressureDetector, kv_backpressure_detector, KV, BACKPRESSURE_DETECTOR, GObject)

/**
 * KvBackpressureDetectorClass:
 * @parent_class: the parent class
 * @on_store_completed: feed one successful store that took @elapsed_s seconds
 *   (queueing included) to move @n_bytes bytes.
 * @is_under_pressure: whether the tier is saturated now.
 * @should_store: whether a cascade of @n_chunks chunks may be submitted; the
 *   default asks the policy and counts a drop when it refuses.
 * @reset: forget all state (the manager calls it from `reset_cache`).
 *
 * The class structure of [class@Kv.BackpressureDetector].
 */
struct _KvBackpressureDetectorClass
{
  GObjectClass parent_class;

  void     (*on_store_completed) (KvBackpressureDetector *self,
                                  gdouble                 elapsed_s,
                                  guint64                 n_bytes);
  gboolean (*is_under_pressure)  (KvBackpressureDetector *self);
  gboolean (*should_store)       (KvBackpressureDetector *self,
                                  guint                   n_chunks);
  void     (*reset)              (KvBackpressureDetector *self);

  /*< private >*/
  gpointer _reserved[8];
};

KVTIER_AVAILABLE_IN_ALL
void                  kv_backpressure_detector_update             (KvBackpressureDetector *self,
                                                                   gint64                  submit_time_us,
                                                                   guint64                 n_bytes);
KVTIER_AVAILABLE_IN_ALL
void                  kv_backpressure_detector_on_store_completed (KvBackpressureDetector *self,
                                                                   gdouble                 elapsed_s,
                                                                   guint64                 n_bytes);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_backpressure_detector_is_under_pressure  (KvBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_backpressure_detector_should_store       (KvBackpressureDetector *self,
                                                                   guint                   n_chunks);
KVTIER_AVAILABLE_IN_ALL
void                  kv_backpressure_detector_reset              (KvBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
KvBackpressurePolicy *kv_backpressure_detector_get_policy         (KvBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
KvClock              *kv_backpressure_detector_get_clock          (KvBackpressureDetector *self);

G_END_DECLS
