/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-transfer-job.h"

G_BEGIN_DECLS

/* Replaces the keys and slots of a lazy promotion when its primary slots
 * are reserved (kv_secondary_tier_reserve_load_slots()): @keys, a subset of
 * the job's keys in order (referenced), and their @chunk_ids (copied).
 * Owner thread, before the tier hands the job to any other thread. */
G_GNUC_INTERNAL
void _kv_transfer_job_set_slots (KvTransferJob  *self,
                                 KvKey * const  *keys,
                                 const guint32  *chunk_ids,
                                 guint           n_keys);

G_END_DECLS
