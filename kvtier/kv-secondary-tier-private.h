/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-secondary-tier.h"

G_BEGIN_DECLS

/* Called (from any thread, with no kvtier lock held) right after a result
 * or an event was queued on the tier; the manager uses it to make its
 * wake-up fd readable. */
typedef void (*KvSecondaryTierQueuedFunc) (gpointer user_data);

void     _kv_secondary_tier_set_queued_func     (KvSecondaryTier           *self,
                                                 KvSecondaryTierQueuedFunc  func,
                                                 gpointer                   user_data);
/* Emits ::job-finished; owner thread only. */
void     _kv_secondary_tier_emit_job_finished   (KvSecondaryTier           *self,
                                                 KvJobResult               *result);
/* Cheap, lock-free: whether complete_job() queued anything not yet taken. */
gboolean _kv_secondary_tier_has_queued_results  (KvSecondaryTier           *self);

/* Owner thread, for a failed job: TRUE when the job was failed at its
 * deadline, the tier has not answered and may still touch the job's
 * slots: a load's (it may write them) or a store's of a tier that cannot
 * cancel stores (it may read and publish them). The caller then keeps
 * those slots out of use (a load's) or pinned (a store's) until
 * _kv_secondary_tier_take_released() names the job. */
gboolean _kv_secondary_tier_hold_slots          (KvSecondaryTier           *self,
                                                 guint64                    job_id);
/* Owner thread: ids of held jobs that the tier has answered (late) since
 * the last call, or NULL; *n_ids set. Lock-free when there are none. */
guint64 *_kv_secondary_tier_take_released       (KvSecondaryTier           *self,
                                                 guint                     *n_ids);
/* Owner thread: TRUE (and counted) when the circuit breaker refuses a
 * store now, so that the manager does not make the job at all. */
gboolean _kv_secondary_tier_reject_store        (KvSecondaryTier           *self);

/* Reserves the primary slots of a lazy promotion (the manager's side of
 * kv_secondary_tier_reserve_load_slots()); owner thread. */
typedef gboolean (*KvSecondaryTierReserveFunc) (gpointer          user_data,
                                                KvSecondaryTier  *tier,
                                                KvTransferJob    *job,
                                                GError          **error);

/* Owner thread: installed by the manager the tier is added to. */
void     _kv_secondary_tier_set_reserve_func    (KvSecondaryTier            *self,
                                                 KvSecondaryTierReserveFunc  func,
                                                 gpointer                    user_data);

G_END_DECLS
