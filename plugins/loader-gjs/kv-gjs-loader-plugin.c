/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-gjs-loader.h"

/* Makes the process's GJS loader the loader of `.js` and `.mjs` tier
 * modules in each registry that loads this module. */
static void
kv_gjs_loader_plugin_register (KvTierRegistry *registry,
                               GTypeModule    *module)
{
  const char * const extensions[] = { "js", "mjs" };

  for (guint i = 0; i < G_N_ELEMENTS (extensions); i++)
    {
      g_autoptr(GError) error = NULL;

      if (!kv_tier_registry_register_module_loader (registry, extensions[i],
                                                    kv_gjs_loader_get_default (),
                                                    &error))
        g_message ("Cannot register the JavaScript tier module loader: %s", error->message);
    }
}

KV_PLUGIN_DEFINE (kv_gjs_loader_plugin_register);
