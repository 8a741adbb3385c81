/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

#define CONTRACT_TYPE_PULL_TIER (contract_pull_tier_get_type ())
G_DECLARE_FINAL_TYPE (ContractPullTier, contract_pull_tier, CONTRACT, PULL_TIER, KvSecondaryTier)

void     contract_pull_tier_set_stalled (ContractPullTier *self,
                                         gboolean          stalled);
void     contract_pull_tier_damage      (ContractPullTier *self,
                                         KvKey            *key);
gboolean contract_pull_tier_is_idle     (ContractPullTier *self);

G_END_DECLS
