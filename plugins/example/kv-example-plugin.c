/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <gmodule.h>
#include <kvtier.h>

#include "kv-example-tier.h"

/*
 * The module entry points that KvTierRegistry looks for. The registry
 * checks kvtier_plugin_abi_version before it calls anything, then calls
 * kvtier_plugin_register() once and keeps the module resident: GObject
 * types cannot be unloaded, so the tier's type is a plain static type.
 */

G_MODULE_EXPORT const guint32 kvtier_plugin_abi_version = KV_PLUGIN_ABI_VERSION;

G_MODULE_EXPORT void kvtier_plugin_register (KvTierRegistry *registry,
                                             GTypeModule    *module);

/* Registers the example tier under the name `example`. */
G_MODULE_EXPORT void
kvtier_plugin_register (KvTierRegistry *registry,
                        GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_tier_type (registry, "example",
                                            KV_TYPE_EXAMPLE_TIER, &error))
    g_message ("Cannot register the example tier: %s", error->message);
}
