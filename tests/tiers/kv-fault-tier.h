/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-example-tier.h"

G_BEGIN_DECLS

/* What the fault tier does with the next jobs that run. Test-only; plain C
 * (not introspected). */
typedef enum {
  KV_FAULT_NONE,          /* behave like the example tier */
  KV_FAULT_FAIL,          /* report success=FALSE without moving bytes */
  KV_FAULT_PARTIAL,       /* move the first half of the keys only */
  KV_FAULT_STALL,         /* hold the job until released or drained */
  KV_FAULT_SUBMIT_ERROR,  /* refuse the job at submit with an error */
} KvFaultMode;

#define KV_TYPE_FAULT_TIER (kv_fault_tier_get_type ())

G_DECLARE_FINAL_TYPE (KvFaultTier, kv_fault_tier, KV, FAULT_TIER, KvExampleTier)

KvFaultTier *kv_fault_tier_new                (KvHostBuffer *primary);
void         kv_fault_tier_set_store_fault    (KvFaultTier  *self,
                                               KvFaultMode   mode);
void         kv_fault_tier_set_load_fault     (KvFaultTier  *self,
                                               KvFaultMode   mode);
void         kv_fault_tier_set_store_delay_us (KvFaultTier  *self,
                                               guint64       delay_us);
void         kv_fault_tier_set_load_delay_us  (KvFaultTier  *self,
                                               guint64       delay_us);
guint        kv_fault_tier_get_n_stalled      (KvFaultTier  *self);
void         kv_fault_tier_release_stalled    (KvFaultTier  *self);

G_END_DECLS
