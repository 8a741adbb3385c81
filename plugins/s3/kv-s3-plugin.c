/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-s3-tier.h"

/* Registers the s3 tier under the name `s3`. The registry keeps the module
 * resident, so the tier's types are plain static types. */
static void
kv_s3_plugin_register (KvTierRegistry *registry,
                       GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_tier_type (registry, "s3", KV_TYPE_S3_TIER, &error))
    g_message ("Cannot register the s3 tier: %s", error->message);
}

KV_PLUGIN_DEFINE (kv_s3_plugin_register);
