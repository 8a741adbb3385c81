/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

#include "kv-clock.h"
#include "kv-job-result.h"
#include "kv-job-watchdog-private.h"
#include "kv-transfer-job.h"

G_BEGIN_DECLS

/* A secondary tier's jobs between submit and report: each job accepted
 * through the submit invokers is tracked until the tier reports it (then
 * forgotten) or its deadline passes (then failed, and kept to recognise
 * the tier's late answer, and, while the manager holds the job's slots
 * for it, to tell the manager when they may be used again). Also the
 * tier's probe in flight, the counts whatever waits for the tier's jobs
 * waits on, and the deadline failures, late answers and breaker refusals
 * counted for the tier's metrics.
 *
 * Deadlines follow the tier's clock: the library's one watchdog calls the
 * function given to _kv_job_tracker_start() when the earliest one passes;
 * with a manual clock (tests) nobody does, and the owner thread expires
 * jobs itself when it calls the tier.
 *
 * One lock of its own, never held while calling out: the tier reports
 * what expired (queues the failures, cancels the cancellables) with it
 * released. */

typedef struct _KvJobTracker KvJobTracker;

/* A job failed at its deadline (or at shutdown), to be reported. */
typedef struct
{
  KvJobResult   *result;       /* the failure */
  KvTransferJob *load;         /* a load's job (its misses), else NULL */
} KvExpiredJob;

typedef enum {
  KV_JOB_ANSWER_UNTRACKED,     /* not tracked: queue it as it is */
  KV_JOB_ANSWER_IN_TIME,       /* call _kv_job_tracker_settled() once counted */
  KV_JOB_ANSWER_LATE,          /* the deadline reported the job: drop it */
  KV_JOB_ANSWER_LATE_RELEASED, /* ...and the slots held for it are free now */
} KvJobAnswer;

G_GNUC_INTERNAL
KvJobTracker *_kv_job_tracker_new              (void);
/* Once, when the tier is constructed: its clock, and the function the
 * watchdog calls when a deadline passed. */
G_GNUC_INTERNAL
void          _kv_job_tracker_start            (KvJobTracker       *self,
                                                KvClock            *clock,
                                                KvJobWatchdogFunc   fired,
                                                gpointer            user_data);
/* Unregisters from the watchdog (waiting for a call running now), then
 * drops every tracked job. */
G_GNUC_INTERNAL
void          _kv_job_tracker_free             (KvJobTracker       *self);

G_GNUC_INTERNAL
gboolean      _kv_job_tracker_is_manual        (KvJobTracker       *self);
G_GNUC_INTERNAL
guint         _kv_job_tracker_get_deadline_ms  (KvJobTracker       *self);
G_GNUC_INTERNAL
void          _kv_job_tracker_set_deadline_ms  (KvJobTracker       *self,
                                                guint               deadline_ms);

/* Owner thread, before the tier sees @job: FALSE (nothing tracked) when a
 * job with its id is tracked already. */
G_GNUC_INTERNAL
gboolean      _kv_job_tracker_track            (KvJobTracker       *self,
                                                KvTransferJob      *job,
                                                gboolean            is_load);
/* Owner thread: the tier refused the job just tracked. */
G_GNUC_INTERNAL
void          _kv_job_tracker_untrack          (KvJobTracker       *self,
                                                guint64             job_id);

/* Any thread: the tier answered with @result. For an answer in time of a
 * failed load, *failed_load is set to its job (transfer full). With
 * @skip_own, the tracker's own failure of a job (handed back by a pulled
 * tier's get_finished_jobs() that chains up) is UNTRACKED. */
G_GNUC_INTERNAL
KvJobAnswer   _kv_job_tracker_settle           (KvJobTracker       *self,
                                                KvJobResult        *result,
                                                gboolean            skip_own,
                                                KvTransferJob     **failed_load);
/* Any thread: the outcome of an answer in time was counted. */
G_GNUC_INTERNAL
void          _kv_job_tracker_settled          (KvJobTracker       *self);

/* Any thread. Fails the jobs whose deadline passed (every job in flight
 * with @all), appending a KvExpiredJob to @expired (the caller owns
 * them) and their cancellables to *cancellables (made when needed); an
 * overdue probe is failed too (*probe_failed, its cancellable collected).
 * The jobs still count as in flight until _kv_job_tracker_expired_queued():
 * cancel first, queue the failures, then call it. */
G_GNUC_INTERNAL
void          _kv_job_tracker_expire           (KvJobTracker       *self,
                                                gboolean            all,
                                                GArray             *expired,
                                                GPtrArray         **cancellables,
                                                gboolean           *probe_failed);
G_GNUC_INTERNAL
void          _kv_job_tracker_expired_queued   (KvJobTracker       *self,
                                                guint               n_expired);

/* Any thread: the job's cancellable (made on demand, cancelled already if
 * the job expired), or NULL when the job is not tracked. */
G_GNUC_INTERNAL
GCancellable *_kv_job_tracker_get_cancellable  (KvJobTracker       *self,
                                                guint64             job_id);

/* Owner thread: see _kv_secondary_tier_hold_slots(). @stores too: a
 * store's slots are held as well as a load's. */
G_GNUC_INTERNAL
gboolean      _kv_job_tracker_hold             (KvJobTracker       *self,
                                                guint64             job_id,
                                                gboolean            stores_too);
G_GNUC_INTERNAL
guint64      *_kv_job_tracker_take_released    (KvJobTracker       *self,
                                                guint              *n_ids);
G_GNUC_INTERNAL
gboolean      _kv_job_tracker_has_released     (KvJobTracker       *self);

/* The probe in flight: started (its id), reported (TRUE when it was the
 * one in flight), forgotten at shutdown. */
G_GNUC_INTERNAL
guint64       _kv_job_tracker_start_probe      (KvJobTracker       *self,
                                                GCancellable       *cancellable);
G_GNUC_INTERNAL
gboolean      _kv_job_tracker_end_probe        (KvJobTracker       *self,
                                                guint64             probe_id);
G_GNUC_INTERNAL
void          _kv_job_tracker_stop_probe       (KvJobTracker       *self);
G_GNUC_INTERNAL
gboolean      _kv_job_tracker_probe_in_flight  (KvJobTracker       *self);

/* Lock-free counts: jobs tracked and not reported; jobs failed by their
 * deadline that the tier has not answered. */
G_GNUC_INTERNAL
guint         _kv_job_tracker_get_n_in_flight  (KvJobTracker       *self);
G_GNUC_INTERNAL
guint         _kv_job_tracker_get_n_unanswered (KvJobTracker       *self);

/* Totals since the tier was made: jobs failed at their deadline, late
 * answers, jobs the breaker refused (counted with count_rejected()). */
G_GNUC_INTERNAL
void          _kv_job_tracker_count_rejected   (KvJobTracker       *self);
G_GNUC_INTERNAL
void          _kv_job_tracker_get_totals       (KvJobTracker       *self,
                                                guint64            *n_expired,
                                                guint64            *n_late,
                                                guint64            *n_rejected);

/* Owner thread: TRUE when no job is in flight or settling and no probe
 * is; else waits for a change, up to @timeout_us (< 0: no limit; 0: no
 * wait), and returns FALSE. */
G_GNUC_INTERNAL
gboolean      _kv_job_tracker_wait_idle        (KvJobTracker       *self,
                                                gint64              timeout_us);

G_END_DECLS
