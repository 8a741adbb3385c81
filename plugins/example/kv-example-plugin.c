/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-example-tier.h"

/* Registers the example tier under the name `example`. The registry calls
 * this once per registry and keeps the module resident: GObject types
 * cannot be unloaded, so the tier's type is a plain static type. */
static void
kv_example_plugin_register (KvTierRegistry *registry,
                            GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_tier_type (registry, "example",
                                            KV_TYPE_EXAMPLE_TIER, &error))
    g_message ("Cannot register the example tier: %s", error->message);
}

/* The module's exports: kvtier_plugin_register(), which calls the function
 * above, and the plugin ABI version the registry checks first. */
KV_PLUGIN_DEFINE (kv_example_plugin_register);
