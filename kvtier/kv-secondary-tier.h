/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-async-lookup.h"
#include "kv-backpressure-detector.h"
#include "kv-circuit-breaker.h"
#include "kv-clock.h"
#include "kv-counter-set.h"
#include "kv-event.h"
#include "kv-host-buffer.h"
#include "kv-job-result.h"
#include "kv-key.h"
#include "kv-metric-registry.h"
#include "kv-parent-manager.h"
#include "kv-request.h"
#include "kv-schedule-end.h"
#include "kv-stats.h"
#include "kv-transfer-job.h"
#include "kv-types.h"

G_BEGIN_DECLS

/**
 * KvCompleteJobFlags:
 * @KV_COMPLETE_JOB_FLAGS_NONE: a failed job counts against the tier's
 *   circuit breaker.
 * @KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT: the job failed because of the data
 *   (a chunk that had vanished or was damaged, a full disk), not because
 *   the tier's storage is unwell: it does not count against the breaker.
 *
 * How [method@Kv.SecondaryTier.complete_job_full] reads a failed job.
 */
typedef enum /*< flags >*/ {
  KV_COMPLETE_JOB_FLAGS_NONE = 0,
  KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT = 1 << 0,
} KvCompleteJobFlags;

#define KV_TYPE_SECONDARY_TIER (kv_secondary_tier_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_DERIVABLE_TYPE (KvSecondaryTier, kv_secondary_tier, KV, SECONDARY_TIER, GObject)

/**
 * KvSecondaryTierClass:
 * @parent_class: the parent class
 * @medium: the medium of every instance of a class written in C (bindings
 *   set the construct-only [property@Kv.SecondaryTier:medium] instead).
 * @locality: the locality of an instance not given one
 *   ([property@Kv.SecondaryTier:locality]); %KV_LOCALITY_UNSPECIFIED by
 *   default.
 * @lookup: is @key stored here? %KV_LOOKUP_RESULT_HIT, %KV_LOOKUP_RESULT_MISS
 *   or %KV_LOOKUP_RESULT_RETRY; must not block. Required, unless the tier
 *   set a [property@Kv.SecondaryTier:async-lookup]: the default asks it.
 * @submit_store: start copying the job's primary slots into the tier; must
 *   not block. Report the job later with [method@Kv.SecondaryTier.complete_job].
 *   Required.
 * @submit_load: start filling the job's (allocated, not yet readable) primary
 *   slots; must not block. Required.
 * @get_finished_jobs: results of jobs finished since the last call. The
 *   default drains the queue filled by [method@Kv.SecondaryTier.complete_job].
 * @has_pending_work: whether the engine must keep stepping for this tier
 *   for work of its own (the invoker adds jobs in flight and the
 *   async lookup's unanswered checks).
 * @take_events: events of the tier's own storage. The default drains the
 *   queue filled by [method@Kv.SecondaryTier.push_event].
 * @touch: recency hint for @keys.
 * @on_new_request: the tier's offload policy for @request. Required.
 * @on_request_finished: no submit or touch for @request will follow (the
 *   invoker then forgets @request in the async lookup).
 * @serve_external_requests: once per step, before promotions are submitted.
 * @on_schedule_end: once per step, after promotions are submitted (the
 *   invoker then flushes the async lookup's batch).
 * @drain_jobs: block until every submitted job has been reported with
 *   [method@Kv.SecondaryTier.complete_job]. The default is
 *   [method@Kv.SecondaryTier.wait_jobs], which the deadline bounds; an
 *   override ends with it. Not called for a tier that left a job
 *   unanswered past its deadline.
 * @shutdown: release threads and connections; every job is reported first.
 *   The invoker shuts the async lookup down after it.
 * @job_finished: class closure of [signal@Kv.SecondaryTier::job-finished].
 * @register_metrics: add the definitions of the tier's own metrics to
 *   @registry (called once per class by
 *   [method@Kv.TieringManager.create_metric_registry]).
 * @get_stats: the tier's own metrics since the last call (return and
 *   reset), or %NULL.
 * @probe: start a cheap health check of the tier's storage and return at
 *   once; report it with [method@Kv.SecondaryTier.complete_probe].
 *   @cancellable is cancelled if the probe is still running at the
 *   deadline. Called while the circuit breaker is open. Optional.
 * @accepts_cascaded_stores: %FALSE when no instance of a class written in
 *   C stores what other tiers store (a tier that only fetches, as the peer
 *   tier): the manager then never makes it a cascade job and pins nothing
 *   for it. %TRUE by default; a class written in Python or JavaScript
 *   states it with [func@Kv.SecondaryTier.type_set_accepts_cascaded_stores].
 * @lazy_promotion_allocation: %TRUE when every instance of a class written
 *   in C reserves the primary slots of its loads itself, as it starts them
 *   (a class written in Python or JavaScript states it with
 *   [func@Kv.SecondaryTier.type_set_lazy_promotion_allocation]).
 * @can_cancel_stores: %FALSE when no instance of a class written in C can
 *   call a store back once it was handed over (a command already sent to a
 *   server): the manager then keeps the slots of a store failed at its
 *   deadline pinned until the tier reports it. %TRUE by default; a class
 *   written in Python or JavaScript states it with
 *   [func@Kv.SecondaryTier.type_set_can_cancel_stores].
 *
 * The virtual methods of a secondary tier. Every one runs on the owner
 * thread (the thread that drives the [class@Kv.TieringManager]).
 *
 * Slots after a deadline ([property@Kv.SecondaryTier:deadline-ms]): a load
 * failed at its deadline keeps its primary slots out of use until the tier
 * reports it, since the tier may still write them; a store failed at its
 * deadline has its slots released at once, so the tier must not publish
 * it (its job cancellable, [method@Kv.SecondaryTier.get_job_cancellable],
 * is cancelled then), unless the class cleared `can_cancel_stores`: then
 * the store's slots stay pinned until the tier reports it, and a late
 * publish carries the bytes the job started with.
 */
struct _KvSecondaryTierClass
{
  GObjectClass parent_class;

  KvMedium medium;

  KvLookupResult  (*lookup)                  (KvSecondaryTier *self,
                                              KvKey           *key,
                                              KvRequest       *request);
  gboolean        (*submit_store)            (KvSecondaryTier *self,
                                              KvTransferJob   *job,
                                              GError         **error);
  gboolean        (*submit_load)             (KvSecondaryTier *self,
                                              KvTransferJob   *job,
                                              GError         **error);
  KvJobResult   **(*get_finished_jobs)       (KvSecondaryTier *self);
  gboolean        (*has_pending_work)        (KvSecondaryTier *self);
  KvEvent       **(*take_events)             (KvSecondaryTier *self);
  void            (*touch)                   (KvSecondaryTier *self,
                                              KvKey          **keys,
                                              KvRequest       *request);
  KvOffloadPolicy (*on_new_request)          (KvSecondaryTier *self,
                                              KvRequest       *request);
  void            (*on_request_finished)     (KvSecondaryTier *self,
                                              KvRequest       *request);
  void            (*serve_external_requests) (KvSecondaryTier *self,
                                              KvParentManager *parent);
  void            (*on_schedule_end)         (KvSecondaryTier *self,
                                              KvScheduleEnd   *schedule_end);
  gboolean        (*drain_jobs)              (KvSecondaryTier *self,
                                              GError         **error);
  gboolean        (*shutdown)                (KvSecondaryTier *self,
                                              GError         **error);

  /* signals */
  void            (*job_finished)            (KvSecondaryTier *self,
                                              KvJobResult     *result);

  gboolean        (*register_metrics)        (KvSecondaryTier  *self,
                                              KvMetricRegistry *registry,
                                              GError          **error);
  KvStats        *(*get_stats)               (KvSecondaryTier *self);
  gboolean        (*probe)                   (KvSecondaryTier *self,
                                              guint64          probe_id,
                                              GCancellable    *cancellable,
                                              GError         **error);

  gboolean        lazy_promotion_allocation;
  gboolean        accepts_cascaded_stores;
  KvLocality      locality;
  gboolean        can_cancel_stores;

  /*< private >*/
  gpointer _reserved[6];
};

KVTIER_AVAILABLE_IN_ALL
const char             *kv_secondary_tier_get_tier_type             (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
char                   *kv_secondary_tier_dup_metric_label          (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
void                    kv_secondary_tier_set_metric_label          (KvSecondaryTier *self,
                                                                     const char      *label);
KVTIER_AVAILABLE_IN_ALL
KvHostBuffer           *kv_secondary_tier_get_primary               (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
gsize                   kv_secondary_tier_get_block_size_bytes      (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
KvMedium                kv_secondary_tier_get_medium                (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
KvLocality              kv_secondary_tier_get_locality              (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
KvBackpressureDetector *kv_secondary_tier_get_backpressure_detector (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
gboolean                kv_secondary_tier_get_lazy_promotion_allocation (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
gboolean                kv_secondary_tier_get_accepts_cascaded_stores (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
gboolean                kv_secondary_tier_get_can_cancel_stores     (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
gboolean                kv_secondary_tier_type_set_accepts_cascaded_stores (GType     tier_type,
                                                                            gboolean  accepts,
                                                                            GError  **error);
KVTIER_AVAILABLE_IN_ALL
gboolean                kv_secondary_tier_type_set_can_cancel_stores (GType     tier_type,
                                                                      gboolean  can_cancel,
                                                                      GError  **error);
KVTIER_AVAILABLE_IN_ALL
gboolean                kv_secondary_tier_type_set_lazy_promotion_allocation (GType     tier_type,
                                                                              gboolean  lazy,
                                                                              GError  **error);
KVTIER_AVAILABLE_IN_ALL
gboolean                kv_secondary_tier_get_enable_events         (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
KvAsyncLookup          *kv_secondary_tier_get_async_lookup          (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
void                    kv_secondary_tier_set_async_lookup          (KvSecondaryTier *self,
                                                                     KvAsyncLookup   *lookup);

KVTIER_AVAILABLE_IN_ALL
KvLookupResult   kv_secondary_tier_lookup                  (KvSecondaryTier *self,
                                                            KvKey           *key,
                                                            KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_secondary_tier_submit_store            (KvSecondaryTier *self,
                                                            KvTransferJob   *job,
                                                            GError         **error);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_secondary_tier_submit_load             (KvSecondaryTier *self,
                                                            KvTransferJob   *job,
                                                            GError         **error);
KVTIER_AVAILABLE_IN_ALL
KvJobResult    **kv_secondary_tier_get_finished_jobs       (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_secondary_tier_has_pending_work        (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
KvEvent        **kv_secondary_tier_take_events             (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_touch                   (KvSecondaryTier *self,
                                                            KvKey * const   *keys,
                                                            guint            n_keys,
                                                            KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
KvOffloadPolicy  kv_secondary_tier_on_new_request          (KvSecondaryTier *self,
                                                            KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_on_request_finished     (KvSecondaryTier *self,
                                                            KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_serve_external_requests (KvSecondaryTier *self,
                                                            KvParentManager *parent);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_on_schedule_end         (KvSecondaryTier *self,
                                                            KvScheduleEnd   *schedule_end);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_secondary_tier_drain_jobs              (KvSecondaryTier *self,
                                                            GError         **error);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_secondary_tier_shutdown                (KvSecondaryTier *self,
                                                            GError         **error);

KVTIER_AVAILABLE_IN_ALL
gboolean         kv_secondary_tier_register_metrics        (KvSecondaryTier  *self,
                                                            KvMetricRegistry *registry,
                                                            GError          **error);
KVTIER_AVAILABLE_IN_ALL
KvStats         *kv_secondary_tier_get_stats               (KvSecondaryTier *self);

KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_complete_job            (KvSecondaryTier *self,
                                                            KvJobResult     *result);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_complete_job_full       (KvSecondaryTier    *self,
                                                            KvJobResult        *result,
                                                            KvCompleteJobFlags  flags);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_set_counters            (KvSecondaryTier *self,
                                                            KvCounterSet    *counters);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_secondary_tier_reserve_load_slots      (KvSecondaryTier *self,
                                                            KvTransferJob   *job,
                                                            GError         **error);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_complete_probe          (KvSecondaryTier *self,
                                                            guint64          probe_id,
                                                            gboolean         healthy);
KVTIER_AVAILABLE_IN_ALL
GCancellable    *kv_secondary_tier_get_job_cancellable     (KvSecondaryTier *self,
                                                            KvTransferJob   *job);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_wait_jobs               (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_secondary_tier_get_n_jobs_in_flight    (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
guint64          kv_secondary_tier_get_n_expired_jobs      (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
guint64          kv_secondary_tier_get_n_late_completions  (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
KvClock         *kv_secondary_tier_get_clock               (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_secondary_tier_get_deadline_ms         (KvSecondaryTier *self);
KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_set_deadline_ms         (KvSecondaryTier *self,
                                                            guint            deadline_ms);
KVTIER_AVAILABLE_IN_ALL
KvCircuitBreaker *kv_secondary_tier_get_circuit_breaker    (KvSecondaryTier *self);

KVTIER_AVAILABLE_IN_ALL
void             kv_secondary_tier_push_event              (KvSecondaryTier *self,
                                                            KvEvent         *event);

G_END_DECLS
