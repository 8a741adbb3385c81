/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-python-loader.h"

/* Makes the process's Python loader the loader of `.py` tier modules in
 * each registry that loads this module. */
static void
kv_python_loader_plugin_register (KvTierRegistry *registry,
                                  GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_module_loader (registry, "py",
                                                kv_python_loader_get_default (),
                                                &error))
    g_message ("Cannot register the Python tier module loader: %s", error->message);
}

KV_PLUGIN_DEFINE (kv_python_loader_plugin_register);
