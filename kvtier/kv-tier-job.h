/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-secondary-tier.h"
#include "kv-transfer-job.h"

G_BEGIN_DECLS

/**
 * KvKeyFailureFlags:
 * @KV_KEY_FAILURE_FLAGS_NONE: the tier's storage failed (an I/O error, a
 *   lost connection, a timeout): the failure counts against the tier's
 *   circuit breaker.
 * @KV_KEY_FAILURE_FLAGS_NOT_A_FAULT: the data failed, not the tier (a
 *   value of the wrong size, a full disk, a file of another user): the
 *   failure does not count against the circuit breaker.
 * @KV_KEY_FAILURE_FLAGS_CHECKSUM: the chunk failed its checksum: the job's
 *   result says so ([method@Kv.JobResult.get_checksum_failed]). A damaged
 *   chunk is the data's failure, so this implies
 *   %KV_KEY_FAILURE_FLAGS_NOT_A_FAULT.
 *
 * How [method@Kv.TierJob.mark_failed] reads the failure of one key.
 */
typedef enum /*< flags >*/ {
  KV_KEY_FAILURE_FLAGS_NONE = 0,
  KV_KEY_FAILURE_FLAGS_NOT_A_FAULT = 1 << 0,
  KV_KEY_FAILURE_FLAGS_CHECKSUM = 1 << 1,
} KvKeyFailureFlags;

#define KV_TYPE_TIER_JOB (kv_tier_job_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvTierJob, kv_tier_job, KV, TIER_JOB, GObject)

/**
 * KvTierJobCancelFunc:
 * @tier_job: the tier job whose deadline passed
 * @user_data: (closure): the data given to
 *   [method@Kv.TierJob.set_cancel_func]
 *
 * Aborts the I/O of @tier_job: its deadline passed, or the tier is shut
 * down without having reported it. Runs at most once, on the thread that
 * cancelled the job (the library's watchdog thread, or the owner thread at
 * shutdown), or at once in [method@Kv.TierJob.set_cancel_func] when the
 * job was cancelled already; never after [method@Kv.TierJob.report]
 * returned. It may mark keys and report the job itself.
 */
typedef void (*KvTierJobCancelFunc) (KvTierJob *tier_job,
                                     gpointer   user_data);

KVTIER_AVAILABLE_IN_ALL
KvTierJob       *kv_tier_job_new                  (KvSecondaryTier    *tier,
                                                   KvTransferJob      *job);
KVTIER_AVAILABLE_IN_ALL
KvSecondaryTier *kv_tier_job_get_tier             (KvTierJob          *self);
KVTIER_AVAILABLE_IN_ALL
KvTransferJob   *kv_tier_job_get_job              (KvTierJob          *self);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_job_is_load              (KvTierJob          *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_tier_job_get_n_keys           (KvTierJob          *self);
KVTIER_AVAILABLE_IN_ALL
GCancellable    *kv_tier_job_get_cancellable      (KvTierJob          *self);
KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_set_cancel_func      (KvTierJob          *self,
                                                   KvTierJobCancelFunc func,
                                                   gpointer            user_data,
                                                   GDestroyNotify      notify);

KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_mark_landed          (KvTierJob          *self,
                                                   guint               index);
KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_mark_skipped         (KvTierJob          *self,
                                                   guint               index);
KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_mark_missing         (KvTierJob          *self,
                                                   guint               index);
KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_mark_failed          (KvTierJob          *self,
                                                   guint               index,
                                                   KvKeyFailureFlags   flags,
                                                   const GError       *error);
KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_mark_remaining_failed (KvTierJob         *self,
                                                   KvKeyFailureFlags   flags,
                                                   const GError       *error);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_job_is_marked            (KvTierJob          *self,
                                                   guint               index);
KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_record_io            (KvTierJob          *self,
                                                   gint64              start_us,
                                                   gint64              end_us);
KVTIER_AVAILABLE_IN_ALL
void             kv_tier_job_report               (KvTierJob          *self);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_job_is_reported          (KvTierJob          *self);

G_END_DECLS
