/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

#define KV_TYPE_ROUTE_DECISION (kv_route_decision_get_type ())

typedef struct _KvRouteDecision KvRouteDecision;

KVTIER_AVAILABLE_IN_ALL
GType            kv_route_decision_get_type        (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvRouteDecision *kv_route_decision_new             (guint                  node,
                                                    const char            *node_name,
                                                    guint                  n_chunks,
                                                    guint                  prefix,
                                                    gint                   peer,
                                                    const char            *peer_name,
                                                    guint                  peer_prefix);
KVTIER_AVAILABLE_IN_ALL
KvRouteDecision *kv_route_decision_ref             (KvRouteDecision       *self);
KVTIER_AVAILABLE_IN_ALL
void             kv_route_decision_unref           (KvRouteDecision       *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_route_decision_get_node        (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
const char      *kv_route_decision_get_node_name   (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_route_decision_get_n_chunks    (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_route_decision_get_prefix      (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
gint             kv_route_decision_get_peer        (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
const char      *kv_route_decision_get_peer_name   (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_route_decision_get_peer_prefix (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_route_decision_get_n_computed  (const KvRouteDecision *self);
KVTIER_AVAILABLE_IN_ALL
GVariant        *kv_route_decision_dup_transfer_params (const KvRouteDecision *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvRouteDecision, kv_route_decision_unref)

G_END_DECLS
