/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-parent-manager.h"

G_BEGIN_DECLS

typedef struct _KvTieringManager KvTieringManager;

/* The KvParentManager a tier receives in serve_external_requests(): it
 * forwards to the manager with the origin tier excluded (reference §5.9). */
#define KV_TYPE_TIER_PARENT (kv_tier_parent_get_type ())
G_DECLARE_FINAL_TYPE (KvTierParent, kv_tier_parent, KV, TIER_PARENT, GObject)

KvTierParent *kv_tier_parent_new (KvTieringManager *manager,
                                  guint             origin_tier_index);

G_END_DECLS
