/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

#include "kv-tier-registry.h"

G_BEGIN_DECLS

/* KvPluginModule: the GTypeModule of one plugin file, so that plugins can
 * register G_DEFINE_DYNAMIC_TYPE types. Once loaded a module is used
 * forever (GObject types cannot be unloaded) and kept in a process-wide
 * table by canonical path, so a second registry that loads the same file
 * calls its register function again instead of opening it twice.
 *
 * The table and each module's first registration are under one
 * process-wide lock: whoever calls the functions below holds it
 * (_kv_plugin_modules_lock()) from the lookup to the registration. */

#define KV_TYPE_PLUGIN_MODULE (kv_plugin_module_get_type ())
G_GNUC_INTERNAL
G_DECLARE_FINAL_TYPE (KvPluginModule, kv_plugin_module, KV, PLUGIN_MODULE, GTypeModule)

G_GNUC_INTERNAL
void            _kv_plugin_modules_lock   (void);
G_GNUC_INTERNAL
void            _kv_plugin_modules_unlock (void);

/* The module of the plugin file @path (whose canonical path is
 * @real_path): the one already open in this process, or a new one once
 * the file has been opened with local binding and found to export the
 * plugin ABI version this library loads and a register function. Fails
 * with KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN or _ABI_MISMATCH, running none
 * of the file's code. (transfer none): modules live as long as the
 * process. */
G_GNUC_INTERNAL
KvPluginModule *_kv_plugin_module_open    (const char      *path,
                                           const char      *real_path,
                                           GError         **error);

/* Calls the plugin's register function for @registry: on the module's
 * first use in the process through g_type_module_use() (which registers
 * its dynamic types), later directly. FALSE when the first use failed. */
G_GNUC_INTERNAL
gboolean        _kv_plugin_module_register_into (KvPluginModule *self,
                                                 KvTierRegistry *registry);

G_END_DECLS
