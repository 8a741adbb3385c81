/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-plugin-module-private.h"

#include <gmodule.h>

struct _KvPluginModule
{
  GTypeModule           parent_instance;

  GModule              *module;
  KvPluginRegisterFunc  register_func;
  KvTierRegistry       *loading_into;  /* set while the first use() runs */
};

G_DEFINE_FINAL_TYPE (KvPluginModule, kv_plugin_module, G_TYPE_TYPE_MODULE)

G_LOCK_DEFINE_STATIC (plugin_modules);
static GHashTable *plugin_modules;   /* canonical path → KvPluginModule */

static gboolean
kv_plugin_module_load (GTypeModule *type_module)
{
  KvPluginModule *self = KV_PLUGIN_MODULE (type_module);

  if (self->loading_into != NULL)
    self->register_func (self->loading_into, type_module);
  return TRUE;
}

static void
kv_plugin_module_unload (GTypeModule *type_module)
{
  /* Never reached: modules stay in use, hence resident. */
}

static void
kv_plugin_module_class_init (KvPluginModuleClass *klass)
{
  GTypeModuleClass *module_class = G_TYPE_MODULE_CLASS (klass);

  module_class->load = kv_plugin_module_load;
  module_class->unload = kv_plugin_module_unload;
}

static void
kv_plugin_module_init (KvPluginModule *self)
{
}

void
_kv_plugin_modules_lock (void)
{
  G_LOCK (plugin_modules);
}

void
_kv_plugin_modules_unlock (void)
{
  G_UNLOCK (plugin_modules);
}

/* Closes @module and fails with @code and the message. */
static gpointer
refuse (GModule  *module,
        GError  **error,
        int       code,
        const char *format,
        ...) G_GNUC_PRINTF (4, 5);

static gpointer
refuse (GModule     *module,
        GError     **error,
        int          code,
        const char  *format,
        ...)
{
  va_list args;

  va_start (args, format);
  g_propagate_error (error, g_error_new_valist (KV_TIER_REGISTRY_ERROR, code, format, args));
  va_end (args);
  if (module != NULL)
    g_module_close (module);
  return NULL;
}

KvPluginModule *
_kv_plugin_module_open (const char  *path,
                        const char  *real_path,
                        GError     **error)
{
  KvPluginModule *plugin;
  GModule *module;
  gpointer abi_symbol = NULL;
  gpointer register_symbol = NULL;
  guint32 abi;

  if (plugin_modules == NULL)
    plugin_modules = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);

  plugin = g_hash_table_lookup (plugin_modules, real_path);
  if (plugin != NULL)
    return plugin;

  /* Bind now: a plugin with unresolved symbols fails here, cleanly. */
  module = g_module_open (real_path, G_MODULE_BIND_LOCAL);
  if (module == NULL)
    return refuse (NULL, error, KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN,
                   "“%s” is not a loadable module: %s", path, g_module_error ());

  if (!g_module_symbol (module, "kvtier_plugin_abi_version", &abi_symbol) ||
      abi_symbol == NULL)
    return refuse (module, error, KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN,
                   "“%s” is not a kvtier plugin: it does not export"
                   " kvtier_plugin_abi_version", path);

  /* Checked before any of the plugin's code runs. */
  abi = *(const guint32 *) abi_symbol;
  if (abi != KV_PLUGIN_ABI_VERSION)
    return refuse (module, error, KV_TIER_REGISTRY_ERROR_ABI_MISMATCH,
                   "Plugin “%s” was built for kvtier plugin ABI %u, but"
                   " this kvtier loads ABI %u: rebuild the plugin",
                   path, abi, (guint) KV_PLUGIN_ABI_VERSION);

  if (!g_module_symbol (module, "kvtier_plugin_register", &register_symbol) ||
      register_symbol == NULL)
    return refuse (module, error, KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN,
                   "“%s” is not a kvtier plugin: it does not export"
                   " kvtier_plugin_register", path);

  g_module_make_resident (module);
  plugin = g_object_new (KV_TYPE_PLUGIN_MODULE, NULL);
  plugin->module = module;
  plugin->register_func = register_symbol;
  g_type_module_set_name (G_TYPE_MODULE (plugin), real_path);
  g_hash_table_insert (plugin_modules, g_strdup (real_path), plugin);
  return plugin;
}

gboolean
_kv_plugin_module_register_into (KvPluginModule *self,
                                 KvTierRegistry *registry)
{
  gboolean used;

  if (self->loading_into != NULL || G_TYPE_MODULE (self)->use_count > 0)
    {
      self->register_func (registry, G_TYPE_MODULE (self));
      return TRUE;
    }

  /* First load in this process: use() runs load(), which registers the
   * types. The use is never dropped, so the module stays. */
  self->loading_into = registry;
  used = g_type_module_use (G_TYPE_MODULE (self));
  self->loading_into = NULL;
  return used;
}
