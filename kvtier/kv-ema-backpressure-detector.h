/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-backpressure-detector.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_EMA_BACKPRESSURE_DETECTOR (kv_ema_backpressure_detector_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvEmaBackpressureDetector, kv_ema_backpressure_detector, KV, EMA_BACKPRESSURE_DETECTOR, KvBackpressureDetector)

KVTIER_AVAILABLE_IN_ALL
KvEmaBackpressureDetector *kv_ema_backpressure_detector_new                  (gdouble                     high_water_s,
                                                                              gdouble                     low_water_s,
                                                                              gdouble                     alpha,
                                                                              guint                       warmup_completions,
                                                                              gdouble                     decay_half_life_s,
                                                                              gdouble                     cooldown_s,
                                                                              KvBackpressurePolicy       *policy,
                                                                              KvClock                    *clock,
                                                                              GError                    **error);
KVTIER_AVAILABLE_IN_ALL
KvEmaBackpressureDetector *kv_ema_backpressure_detector_new_for_tier         (const char                 *tier_type,
                                                                              KvLocality                  locality,
                                                                              GError                    **error);
KVTIER_AVAILABLE_IN_ALL
void                       kv_ema_backpressure_detector_get_default_config   (const char                 *tier_type,
                                                                              KvLocality                  locality,
                                                                              gdouble                    *out_high_water_s,
                                                                              gdouble                    *out_low_water_s);

KVTIER_AVAILABLE_IN_ALL
gdouble                    kv_ema_backpressure_detector_get_high_water_s      (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
gdouble                    kv_ema_backpressure_detector_get_low_water_s       (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
gdouble                    kv_ema_backpressure_detector_get_alpha             (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
guint                      kv_ema_backpressure_detector_get_warmup_completions (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
gdouble                    kv_ema_backpressure_detector_get_decay_half_life_s (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
gdouble                    kv_ema_backpressure_detector_get_cooldown_s        (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
gdouble                    kv_ema_backpressure_detector_get_store_latency_ema (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
void                       kv_ema_backpressure_detector_set_store_latency_ema (KvEmaBackpressureDetector *self,
                                                                              gdouble                    ema);
KVTIER_AVAILABLE_IN_ALL
guint                      kv_ema_backpressure_detector_get_n_completions     (KvEmaBackpressureDetector *self);
KVTIER_AVAILABLE_IN_ALL
gboolean                   kv_ema_backpressure_detector_is_healthy            (KvEmaBackpressureDetector *self);

G_END_DECLS
