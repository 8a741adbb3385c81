/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-redis-tier.h"

/* Registers the redis tier under the name `redis`. The registry keeps the
 * module resident, so the tier's types are plain static types. */
static void
kv_redis_plugin_register (KvTierRegistry *registry,
                          GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_tier_type (registry, "redis", KV_TYPE_REDIS_TIER, &error))
    g_message ("Cannot register the redis tier: %s", error->message);
}

KV_PLUGIN_DEFINE (kv_redis_plugin_register);
