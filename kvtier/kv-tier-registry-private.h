/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-tier-registry.h"

G_BEGIN_DECLS

/* The completion context a tier of type @type_name is constructed with
 * (a tier module whose loader runs it on a main context: JavaScript), or
 * NULL. Whoever constructs tiers by type name passes it as the tier's
 * `completion-context`. */
G_GNUC_INTERNAL
GMainContext *kv_tier_registry_dup_completion_context (KvTierRegistry *self,
                                                       const char     *type_name);

G_END_DECLS
