/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <glib-object.h>

#include "kv-stats.h"

G_BEGIN_DECLS

#define KV_TYPE_COUNTER_SET (kv_counter_set_get_type ())

typedef struct _KvCounterSet KvCounterSet;

KVTIER_AVAILABLE_IN_ALL
GType         kv_counter_set_get_type        (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvCounterSet *kv_counter_set_new             (const char * const *names);
KVTIER_AVAILABLE_IN_ALL
KvCounterSet *kv_counter_set_ref             (KvCounterSet       *self);
KVTIER_AVAILABLE_IN_ALL
void          kv_counter_set_unref           (KvCounterSet       *self);
KVTIER_AVAILABLE_IN_ALL
guint         kv_counter_set_get_n_counters  (KvCounterSet       *self);
KVTIER_AVAILABLE_IN_ALL
const char   *kv_counter_set_get_name        (KvCounterSet       *self,
                                              guint               index);
KVTIER_AVAILABLE_IN_ALL
void          kv_counter_set_add             (KvCounterSet       *self,
                                              guint               index,
                                              guint64             n);
KVTIER_AVAILABLE_IN_ALL
void          kv_counter_set_update          (KvCounterSet       *self,
                                              guint               index,
                                              guint64             total);
KVTIER_AVAILABLE_IN_ALL
guint64       kv_counter_set_get             (KvCounterSet       *self,
                                              guint               index);
KVTIER_AVAILABLE_IN_ALL
void          kv_counter_set_take_deltas     (KvCounterSet       *self,
                                              KvStats            *stats,
                                              const char * const *labels);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvCounterSet, kv_counter_set_unref)

G_END_DECLS
