/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-admission-policy.h"
#include "kv-clock.h"
#include "kv-event.h"
#include "kv-key.h"
#include "kv-metric-registry.h"
#include "kv-prepare-store-result.h"
#include "kv-primary-tier.h"
#include "kv-request.h"
#include "kv-schedule-end.h"
#include "kv-secondary-tier.h"
#include "kv-stats.h"
#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_TIERING_MANAGER (kv_tiering_manager_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvTieringManager, kv_tiering_manager, KV, TIERING_MANAGER, GObject)

/* Owner thread: the first thread that calls a serving method (anything but
 * construction, add_tier and the getters) owns the manager and its primary
 * tier; calls from any other thread log a critical naming both threads and
 * return without touching state. get_primary, get_wakeup_fd and
 * create_source may be called from any thread. See the KvTieringManager
 * documentation and doc/threading.md. */

KVTIER_AVAILABLE_IN_ALL
KvTieringManager     *kv_tiering_manager_new                 (KvPrimaryTier    *primary);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_tiering_manager_add_tier            (KvTieringManager *self,
                                                              KvSecondaryTier  *tier,
                                                              GError          **error);
KVTIER_AVAILABLE_IN_ALL
KvPrimaryTier        *kv_tiering_manager_get_primary         (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
guint                 kv_tiering_manager_get_n_tiers         (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
KvSecondaryTier      *kv_tiering_manager_get_tier            (KvTieringManager *self,
                                                              guint             index);
KVTIER_AVAILABLE_IN_ALL
KvClock              *kv_tiering_manager_get_clock           (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
KvAdmissionPolicy    *kv_tiering_manager_get_admission_policy (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
gdouble               kv_tiering_manager_get_hit_pending_deadline (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
void                  kv_tiering_manager_set_hit_pending_deadline (KvTieringManager *self,
                                                                   gdouble           seconds);

KVTIER_AVAILABLE_IN_ALL
KvOffloadPolicy       kv_tiering_manager_on_new_request      (KvTieringManager *self,
                                                              KvRequest        *request);
KVTIER_AVAILABLE_IN_ALL
void                  kv_tiering_manager_on_request_finished (KvTieringManager *self,
                                                              KvRequest        *request);
KVTIER_AVAILABLE_IN_ALL
KvLookupResult        kv_tiering_manager_lookup              (KvTieringManager *self,
                                                              KvKey            *key,
                                                              KvRequest        *request);
KVTIER_AVAILABLE_IN_ALL
void                  kv_tiering_manager_lookup_many         (KvTieringManager *self,
                                                              KvKey * const    *keys,
                                                              guint             n_keys,
                                                              KvRequest        *request,
                                                              KvLookupResult   *results);
KVTIER_AVAILABLE_IN_ALL
guint32              *kv_tiering_manager_prepare_load        (KvTieringManager *self,
                                                              KvKey * const    *keys,
                                                              guint             n_keys,
                                                              KvRequest        *request,
                                                              guint            *n_chunk_ids,
                                                              GError          **error);
KVTIER_AVAILABLE_IN_ALL
void                  kv_tiering_manager_touch               (KvTieringManager *self,
                                                              KvKey * const    *keys,
                                                              guint             n_keys,
                                                              KvRequest        *request);
KVTIER_AVAILABLE_IN_ALL
void                  kv_tiering_manager_complete_load       (KvTieringManager *self,
                                                              KvKey * const    *keys,
                                                              guint             n_keys,
                                                              KvRequest        *request);
KVTIER_AVAILABLE_IN_ALL
KvPrepareStoreResult *kv_tiering_manager_prepare_store       (KvTieringManager *self,
                                                              KvKey * const    *keys,
                                                              guint             n_keys,
                                                              KvRequest        *request,
                                                              GError          **error);
KVTIER_AVAILABLE_IN_ALL
void                  kv_tiering_manager_complete_store      (KvTieringManager *self,
                                                              KvKey * const    *keys,
                                                              guint             n_keys,
                                                              KvRequest        *request,
                                                              gboolean          success);
KVTIER_AVAILABLE_IN_ALL
void                  kv_tiering_manager_on_schedule_end     (KvTieringManager *self,
                                                              KvScheduleEnd    *schedule_end);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_tiering_manager_has_pending_work    (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
KvEvent             **kv_tiering_manager_take_events         (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_tiering_manager_reset_cache         (KvTieringManager *self,
                                                              GError          **error);
KVTIER_AVAILABLE_IN_ALL
gboolean              kv_tiering_manager_shutdown            (KvTieringManager *self,
                                                              GError          **error);

KVTIER_AVAILABLE_IN_ALL
KvStats              *kv_tiering_manager_get_stats           (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
KvMetricRegistry     *kv_tiering_manager_create_metric_registry (KvTieringManager *self,
                                                              GError          **error);

KVTIER_AVAILABLE_IN_ALL
int                   kv_tiering_manager_get_wakeup_fd       (KvTieringManager *self);
KVTIER_AVAILABLE_IN_ALL
GSource              *kv_tiering_manager_create_source       (KvTieringManager *self);

KVTIER_AVAILABLE_IN_ALL
guint                 kv_tiering_manager_get_n_active_jobs   (KvTieringManager *self);

G_END_DECLS
