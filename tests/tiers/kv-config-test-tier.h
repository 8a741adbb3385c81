/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* A test-only tier with a construct property of every kind a configuration
 * can set (uint64 `max-size`, uint `n-threads`, int `offset`, double
 * `ratio`, string `label`, boolean `verify`, strv `hosts`, flags
 * `create-flags`). `fail-start = true` makes both its KvConfigurable check
 * and its GInitable init refuse it, so a configuration reaches either
 * verdict. Its jobs complete at submit. Shared by test-config and the
 * config fuzz target. */
#define KV_TYPE_CONFIG_TEST_TIER (kv_config_test_tier_get_type ())
G_DECLARE_FINAL_TYPE (KvConfigTestTier, kv_config_test_tier, KV, CONFIG_TEST_TIER, KvSecondaryTier)

/* How many tiers of this type GInitable init started, in this process. */
guint kv_config_test_tier_get_n_started   (void);
void  kv_config_test_tier_reset_n_started (void);
/* shutdown() appends the tier's label to @log (NULL: nothing is logged). */
void  kv_config_test_tier_set_shutdown_log (GPtrArray *log);

G_END_DECLS
