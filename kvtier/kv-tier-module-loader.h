/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

#define KV_TYPE_TIER_MODULE_LOADER (kv_tier_module_loader_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_DERIVABLE_TYPE (KvTierModuleLoader, kv_tier_module_loader, KV, TIER_MODULE_LOADER, GObject)

/**
 * KvTierModuleLoaderClass:
 * @parent_class: the parent class
 * @load_file: evaluate the source file at @path (an absolute path) in the
 *   loader's interpreter, on the calling thread, so that the tier classes
 *   it defines get their GTypes. Return %FALSE with @error set to the
 *   cause (a syntax error, an exception and where it was raised) when the
 *   file cannot be read or evaluated; the registry's error adds the file
 *   name. Required.
 *
 * The virtual methods of a tier module loader. A loader module creates
 * one loader per process and registers it with every registry that loads
 * the module ([method@Kv.TierRegistry.register_module_loader]).
 */
struct _KvTierModuleLoaderClass
{
  GObjectClass parent_class;

  gboolean (*load_file) (KvTierModuleLoader  *self,
                         const char          *path,
                         GError             **error);

  /*< private >*/
  gpointer _reserved[8];
};

KVTIER_AVAILABLE_IN_ALL
gboolean      kv_tier_module_loader_load_file        (KvTierModuleLoader  *self,
                                                      const char          *path,
                                                      GError             **error);
KVTIER_AVAILABLE_IN_ALL
const char   *kv_tier_module_loader_get_language     (KvTierModuleLoader  *self);
KVTIER_AVAILABLE_IN_ALL
GMainContext *kv_tier_module_loader_get_main_context (KvTierModuleLoader  *self);

G_END_DECLS
