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

G_END_DECLS
