/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-backpressure-detector.h"
#include "kv-device.h"
#include "kv-host-buffer.h"
#include "kv-secondary-tier.h"
#include "kv-tier-module-loader.h"
#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KV_PLUGIN_ABI_VERSION:
 *
 * The plugin ABI this build of kvtier loads. A plugin exports it as
 * `const guint32 kvtier_plugin_abi_version` next to its
 * `void kvtier_plugin_register (KvTierRegistry *registry, GTypeModule *module)`;
 * the registry refuses a module whose value differs, before calling it.
 */
#define KV_PLUGIN_ABI_VERSION 1

/**
 * KV_TIER_REGISTRY_ERROR:
 *
 * Error domain of [class@Kv.TierRegistry]. Errors in this domain are from
 * the [error@Kv.TierRegistryError] enumeration.
 */
#define KV_TIER_REGISTRY_ERROR (kv_tier_registry_error_quark ())

/**
 * KvTierRegistryError:
 * @KV_TIER_REGISTRY_ERROR_FAILED: generic failure; callers treat unknown
 *   codes as this.
 * @KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN: the file is not a loadable module,
 *   or does not export the kvtier plugin symbols.
 * @KV_TIER_REGISTRY_ERROR_ABI_MISMATCH: the plugin was built for another
 *   %KV_PLUGIN_ABI_VERSION.
 * @KV_TIER_REGISTRY_ERROR_DUPLICATE: a type of that name is already
 *   registered.
 * @KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE: no type of that name is registered.
 * @KV_TIER_REGISTRY_ERROR_INVALID_TYPE: the GType is not a concrete
 *   [class@Kv.SecondaryTier] (or [class@Kv.Device]) subclass.
 * @KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY: a property given to
 *   [method@Kv.TierRegistry.create_tier] is unknown, not settable, or its
 *   value is wrong.
 * @KV_TIER_REGISTRY_ERROR_NO_LOADER: no loader handles the tier module's
 *   file extension, or its loader module is not installed.
 * @KV_TIER_REGISTRY_ERROR_MODULE_FAILED: the tier module cannot be read
 *   or evaluated (a missing file, a syntax error, an exception).
 * @KV_TIER_REGISTRY_ERROR_NO_TIER_TYPE: the tier module ran but defined no
 *   concrete [class@Kv.SecondaryTier] subclass.
 *
 * Error codes for %KV_TIER_REGISTRY_ERROR.
 */
typedef enum {
  KV_TIER_REGISTRY_ERROR_FAILED,
  KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN,
  KV_TIER_REGISTRY_ERROR_ABI_MISMATCH,
  KV_TIER_REGISTRY_ERROR_DUPLICATE,
  KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE,
  KV_TIER_REGISTRY_ERROR_INVALID_TYPE,
  KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY,
  KV_TIER_REGISTRY_ERROR_NO_LOADER,
  KV_TIER_REGISTRY_ERROR_MODULE_FAILED,
  KV_TIER_REGISTRY_ERROR_NO_TIER_TYPE,
} KvTierRegistryError;

KVTIER_AVAILABLE_IN_ALL
GQuark kv_tier_registry_error_quark (void);

#define KV_TYPE_TIER_REGISTRY (kv_tier_registry_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvTierRegistry, kv_tier_registry, KV, TIER_REGISTRY, GObject)

/**
 * KvPluginRegisterFunc:
 * @registry: the registry loading the plugin
 * @module: the plugin's type module, for `G_DEFINE_DYNAMIC_TYPE` types
 *
 * The type of `kvtier_plugin_register`, the function a plugin exports: it
 * registers its GTypes with @module and names them with
 * [method@Kv.TierRegistry.register_tier_type] or
 * [method@Kv.TierRegistry.register_device_type]. It may be called once per
 * registry that loads the plugin.
 */
typedef void (*KvPluginRegisterFunc) (KvTierRegistry *registry,
                                      GTypeModule    *module);

KVTIER_AVAILABLE_IN_ALL
KvTierRegistry  *kv_tier_registry_get_default           (void);
KVTIER_AVAILABLE_IN_ALL
KvTierRegistry  *kv_tier_registry_new                   (void);

KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_registry_register_tier_type    (KvTierRegistry  *self,
                                                         const char      *name,
                                                         GType            type,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_registry_register_device_type  (KvTierRegistry  *self,
                                                         const char      *name,
                                                         GType            type,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
GType            kv_tier_registry_lookup_tier_type      (KvTierRegistry  *self,
                                                         const char      *name,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
GType            kv_tier_registry_lookup_device_type    (KvTierRegistry  *self,
                                                         const char      *name,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
char           **kv_tier_registry_list_tier_types       (KvTierRegistry  *self);
KVTIER_AVAILABLE_IN_ALL
char           **kv_tier_registry_list_device_types     (KvTierRegistry  *self);
KVTIER_AVAILABLE_IN_ALL
GVariant        *kv_tier_registry_describe_tier_type    (KvTierRegistry  *self,
                                                         const char      *name,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
GVariant        *kv_tier_registry_describe_device_type  (KvTierRegistry  *self,
                                                         const char      *name,
                                                         GError         **error);

KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_registry_load_plugin           (KvTierRegistry  *self,
                                                         const char      *path,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_registry_load_plugins          (KvTierRegistry  *self,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
char           **kv_tier_registry_get_plugin_dirs       (void);

KVTIER_AVAILABLE_IN_ALL
gboolean         kv_tier_registry_register_module_loader (KvTierRegistry     *self,
                                                          const char         *extension,
                                                          KvTierModuleLoader *loader,
                                                          GError            **error);
KVTIER_AVAILABLE_IN_ALL
char           **kv_tier_registry_load_tier_module      (KvTierRegistry  *self,
                                                         const char      *path,
                                                         GError         **error);
KVTIER_AVAILABLE_IN_ALL
char           **kv_tier_registry_get_loader_dirs       (void);

KVTIER_AVAILABLE_IN_ALL
KvSecondaryTier *kv_tier_registry_create_tier           (KvTierRegistry          *self,
                                                         const char              *type_name,
                                                         KvHostBuffer            *primary,
                                                         KvBackpressureDetector  *detector,
                                                         GVariant                *properties,
                                                         GError                 **error);
KVTIER_AVAILABLE_IN_ALL
KvDevice        *kv_tier_registry_create_device         (KvTierRegistry          *self,
                                                         const char              *type_name,
                                                         KvHostBuffer            *primary,
                                                         GVariant                *properties,
                                                         GError                 **error);

G_END_DECLS
