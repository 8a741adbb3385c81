/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

#define KV_TYPE_SCHEDULE_END (kv_schedule_end_get_type ())

typedef struct _KvScheduleEnd KvScheduleEnd;

KVTIER_AVAILABLE_IN_ALL
GType               kv_schedule_end_get_type            (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvScheduleEnd      *kv_schedule_end_new                 (const char * const *new_request_ids,
                                                         const char * const *preempted_request_ids);
KVTIER_AVAILABLE_IN_ALL
const char * const *kv_schedule_end_get_new_request_ids (const KvScheduleEnd *self);
KVTIER_AVAILABLE_IN_ALL
const char * const *kv_schedule_end_get_preempted_request_ids (const KvScheduleEnd *self);
KVTIER_AVAILABLE_IN_ALL
KvScheduleEnd      *kv_schedule_end_ref                 (KvScheduleEnd *self);
KVTIER_AVAILABLE_IN_ALL
void                kv_schedule_end_unref               (KvScheduleEnd *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvScheduleEnd, kv_schedule_end_unref)

G_END_DECLS
