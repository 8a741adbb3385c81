/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

#define KV_TYPE_CLOCK (kv_clock_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvClock, kv_clock, KV, CLOCK, GObject)

KVTIER_AVAILABLE_IN_ALL
KvClock  *kv_clock_get_default (void);
KVTIER_AVAILABLE_IN_ALL
KvClock  *kv_clock_new_manual  (gint64   start_us);
KVTIER_AVAILABLE_IN_ALL
gint64    kv_clock_get_time    (KvClock *self);
KVTIER_AVAILABLE_IN_ALL
gboolean  kv_clock_is_manual   (KvClock *self);
KVTIER_AVAILABLE_IN_ALL
void      kv_clock_set_time    (KvClock *self,
                                gint64   time_us);
KVTIER_AVAILABLE_IN_ALL
void      kv_clock_advance     (KvClock *self,
                                gint64   delta_us);

G_END_DECLS
