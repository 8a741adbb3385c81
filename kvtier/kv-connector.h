/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-device.h"
#include "kv-job-result.h"
#include "kv-metric-registry.h"
#include "kv-prefix-lookup.h"
#include "kv-request.h"
#include "kv-stats.h"
#include "kv-tiering-manager.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_CONNECTOR (kv_connector_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvConnector, kv_connector, KV, CONNECTOR, GObject)

KVTIER_AVAILABLE_IN_ALL
KvConnector      *kv_connector_new                 (KvTieringManager   *manager,
                                                    KvDevice           *device,
                                                    GError            **error);
KVTIER_AVAILABLE_IN_ALL
KvTieringManager *kv_connector_get_manager         (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
KvDevice         *kv_connector_get_device          (KvConnector        *self);

KVTIER_AVAILABLE_IN_ALL
KvOffloadPolicy   kv_connector_add_request         (KvConnector        *self,
                                                    KvRequest          *request);
KVTIER_AVAILABLE_IN_ALL
gboolean          kv_connector_finish_request      (KvConnector        *self,
                                                    KvRequest          *request);
KVTIER_AVAILABLE_IN_ALL
guint             kv_connector_get_n_transfers     (KvConnector        *self,
                                                    KvRequest          *request);
KVTIER_AVAILABLE_IN_ALL
KvPrefixLookup   *kv_connector_lookup              (KvConnector        *self,
                                                    KvRequest          *request,
                                                    KvKey * const      *keys,
                                                    guint               n_keys,
                                                    guint               n_device,
                                                    GError            **error);
KVTIER_AVAILABLE_IN_ALL
guint64           kv_connector_load                (KvConnector        *self,
                                                    KvPrefixLookup     *lookup,
                                                    const guint32      *block_ids,
                                                    guint               n_block_ids,
                                                    GError            **error);
KVTIER_AVAILABLE_IN_ALL
guint64           kv_connector_store               (KvConnector        *self,
                                                    KvRequest          *request,
                                                    KvKey * const      *keys,
                                                    guint               n_keys,
                                                    const guint32      *block_ids,
                                                    guint               n_block_ids,
                                                    GError            **error);
KVTIER_AVAILABLE_IN_ALL
void              kv_connector_touch               (KvConnector        *self,
                                                    KvRequest          *request,
                                                    KvKey * const      *keys,
                                                    guint               n_keys);
KVTIER_AVAILABLE_IN_ALL
void              kv_connector_end_step            (KvConnector        *self,
                                                    const char * const *new_request_ids,
                                                    const char * const *preempted_request_ids);
KVTIER_AVAILABLE_IN_ALL
KvJobResult     **kv_connector_take_finished       (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
KvRequest       **kv_connector_get_ready_requests  (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
gboolean          kv_connector_has_pending_work    (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
gboolean          kv_connector_wait                (KvConnector        *self,
                                                    GError            **error);

KVTIER_AVAILABLE_IN_ALL
int               kv_connector_get_wakeup_fd       (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
GSource          *kv_connector_create_source       (KvConnector        *self);

KVTIER_AVAILABLE_IN_ALL
KvStats          *kv_connector_get_stats           (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
KvMetricRegistry *kv_connector_create_metric_registry (KvConnector     *self,
                                                    GError            **error);
KVTIER_AVAILABLE_IN_ALL
gdouble           kv_connector_get_manager_time    (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
gdouble           kv_connector_get_lookup_time     (KvConnector        *self);
KVTIER_AVAILABLE_IN_ALL
guint64           kv_connector_get_n_manager_lookups (KvConnector      *self);

KVTIER_AVAILABLE_IN_ALL
gboolean          kv_connector_shutdown            (KvConnector        *self,
                                                    GError            **error);

G_END_DECLS
