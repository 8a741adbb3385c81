/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-fs-tier.h"

/* Registers the filesystem tier under the name `fs`. The registry keeps
 * the module resident, so the tier's types are plain static types. */
static void
kv_fs_plugin_register (KvTierRegistry *registry,
                       GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_tier_type (registry, "fs", KV_TYPE_FS_TIER, &error))
    g_message ("Cannot register the fs tier: %s", error->message);
}

KV_PLUGIN_DEFINE (kv_fs_plugin_register);
