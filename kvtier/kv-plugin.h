/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gmodule.h>

#include "kv-tier-registry.h"

G_BEGIN_DECLS

/**
 * KV_PLUGIN_DEFINE:
 * @register_func: the plugin's [callback@Kv.PluginRegisterFunc]: registers
 *   its types with the [class@Kv.TierRegistry] that loads it
 *
 * Defines what a plugin module exports, once per module, at file scope:
 *
 * ```c
 * static void
 * my_plugin_register (KvTierRegistry *registry,
 *                     GTypeModule    *module)
 * {
 *   g_autoptr(GError) error = NULL;
 *
 *   if (!kv_tier_registry_register_tier_type (registry, "my-tier",
 *                                             MY_TYPE_TIER, &error))
 *     g_message ("Cannot register my-tier: %s", error->message);
 * }
 *
 * KV_PLUGIN_DEFINE (my_plugin_register);
 * ```
 *
 * It exports `kvtier_plugin_register`, which calls @register_func, and
 * `kvtier_plugin_abi_version`, set to the %KV_PLUGIN_ABI_VERSION of the
 * kvtier headers the plugin is built against. The registry reads the
 * version first and refuses a module built for another ABI without calling
 * anything in it.
 *
 * Build the module with hidden symbol visibility: these two are exported
 * whatever the visibility, and nothing else needs to be.
 */
#define KV_PLUGIN_DEFINE(register_func)                                       \
  G_MODULE_EXPORT void kvtier_plugin_register (KvTierRegistry *registry,      \
                                               GTypeModule    *module);       \
  G_MODULE_EXPORT void                                                        \
  kvtier_plugin_register (KvTierRegistry *registry,                           \
                          GTypeModule    *module)                             \
  {                                                                           \
    KvPluginRegisterFunc kv_plugin_register_func = (register_func);           \
                                                                              \
    kv_plugin_register_func (registry, module);                               \
  }                                                                           \
  G_MODULE_EXPORT extern const guint32 kvtier_plugin_abi_version;             \
  G_MODULE_EXPORT const guint32 kvtier_plugin_abi_version = KV_PLUGIN_ABI_VERSION

G_END_DECLS
