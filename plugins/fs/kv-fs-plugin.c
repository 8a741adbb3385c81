/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <gmodule.h>
#include <kvtier.h>

#include "kv-fs-tier.h"

/*
 * The module entry points KvTierRegistry looks for. The registry checks
 * kvtier_plugin_abi_version before it calls anything, then calls
 * kvtier_plugin_register() once and keeps the module resident, so the
 * tier's types are plain static types.
 */

G_MODULE_EXPORT const guint32 kvtier_plugin_abi_version = KV_PLUGIN_ABI_VERSION;

G_MODULE_EXPORT void kvtier_plugin_register (KvTierRegistry *registry,
                                             GTypeModule    *module);

/* Registers the filesystem tier under the name `fs`. */
G_MODULE_EXPORT void
kvtier_plugin_register (KvTierRegistry *registry,
                        GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_tier_type (registry, "fs", KV_TYPE_FS_TIER, &error))
    g_message ("Cannot register the fs tier: %s", error->message);
}
