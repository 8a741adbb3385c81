/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_EVENT (kv_event_get_type ())

typedef struct _KvEvent KvEvent;

KVTIER_AVAILABLE_IN_ALL
GType          kv_event_get_type      (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvEvent       *kv_event_new           (KvKey * const *keys,
                                       guint          n_keys,
                                       KvMedium       medium,
                                       gboolean       removed,
                                       KvLocality     locality);
KVTIER_AVAILABLE_IN_ALL
KvEvent       *kv_event_ref           (KvEvent       *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_event_unref         (KvEvent       *self);
KVTIER_AVAILABLE_IN_ALL
KvKey * const *kv_event_get_keys      (const KvEvent *self,
                                       guint         *n_keys);
KVTIER_AVAILABLE_IN_ALL
KvMedium       kv_event_get_medium    (const KvEvent *self);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_event_get_removed   (const KvEvent *self);
KVTIER_AVAILABLE_IN_ALL
KvLocality     kv_event_get_locality  (const KvEvent *self);
KVTIER_AVAILABLE_IN_ALL
const char    *kv_event_get_ownership (const KvEvent *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_event_set_ownership (KvEvent       *self,
                                       const char    *ownership);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvEvent, kv_event_unref)

G_END_DECLS
