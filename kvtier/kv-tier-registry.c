/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-tier-registry.h"
#include "kv-tier-registry-private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <gmodule.h>
#include <unistd.h>

#include "kv-config-value-private.h"
#include "kv-plugin-module-private.h"
#include "kv-host-device.h"

/* The registry: the name → GType tables and the three ways types come
 * into them (C plugins, classes registered at run time, tier modules in
 * other languages), the description of a type's configurable properties
 * and the construction of tiers and devices from them. The plugin files'
 * GTypeModule is kv-plugin-module.c; the loaders of tier modules are
 * KvTierModuleLoader subclasses. Longer than ~1,500 lines because the
 * three ways share one table and lock, and a fifth of it is the
 * documentation of the public API, which gi-docgen reads from here. */

#define ORIGIN_BUILT_IN "built-in"
#define ORIGIN_RUN_TIME "run time"

/**
 * kv_tier_registry_error_quark:
 *
 * The error domain of the tier registry, also available as
 * %KV_TIER_REGISTRY_ERROR. Error codes are from
 * [error@Kv.TierRegistryError].
 *
 * May be called from any thread.
 *
 * Returns: the error domain quark
 */
G_DEFINE_QUARK (kv-tier-registry-error-quark, kv_tier_registry_error)

/* ------------------------------------------------------------------------ */

typedef struct
{
  char         *name;
  GType         type;
  char         *origin;   /* plugin or tier module path, ORIGIN_BUILT_IN or ORIGIN_RUN_TIME */
  GMainContext *completion_context;  /* tier modules of main-context loaders */
} TypeEntry;

static void
type_entry_free (TypeEntry *entry)
{
  g_free (entry->name);
  g_free (entry->origin);
  g_clear_pointer (&entry->completion_context, g_main_context_unref);
  g_free (entry);
}

/**
 * KvTierRegistry:
 *
 * The map from type names, as used in configuration files (`type = fs`),
 * to the GTypes of secondary tiers and devices.
 *
 * Every registry knows the library's built-in device type `host`
 * ([class@Kv.HostDevice]). Tier types come from:
 *
 * - C plugins: GModules in `$libdir/kvtier-1/plugins` and in the
 *   directories of the colon-separated `KVTIER_PLUGIN_PATH` (searched
 *   first), loaded by [method@Kv.TierRegistry.load_plugins] or one by one
 *   with [method@Kv.TierRegistry.load_plugin]. A plugin exports
 *   `const guint32 kvtier_plugin_abi_version` (checked against
 *   %KV_PLUGIN_ABI_VERSION before anything in the module runs) and a
 *   [callback@Kv.PluginRegisterFunc] named `kvtier_plugin_register`. Modules
 *   stay resident;
 * - classes written in Python or JavaScript, registered at run time with
 *   [method@Kv.TierRegistry.register_tier_type] and their GType
 *   (`MyTier.__gtype__` in Python, `MyTier.$gtype` in GJS);
 * - tier modules: Python or JavaScript files that define tier classes,
 *   loaded by [method@Kv.TierRegistry.load_tier_module] (or a `module =`
 *   key in a configuration's `[tier NAME]` section) through a
 *   [class@Kv.TierModuleLoader] picked by the file's extension.
 *
 * [method@Kv.TierRegistry.describe_tier_type] lists a type's configurable
 * properties by introspection, and [method@Kv.TierRegistry.create_tier]
 * builds a tier from a dictionary of them; [class@Kv.Config] uses both.
 *
 * A registry may be used from any thread; plugin registration functions
 * run on the thread that loads them.
 */
struct _KvTierRegistry
{
  GObject     parent_instance;

  GRecMutex   lock;
  GHashTable *tiers;     /* name → TypeEntry */
  GHashTable *devices;   /* name → TypeEntry */
  GHashTable *modules;   /* KvPluginModule set: loaded into this registry */
  GHashTable *loaders;   /* file extension → KvTierModuleLoader */

  /* While a plugin's register function runs (under the plugin modules' lock). */
  const char *loading_path;
  GError     *loading_error;
};

G_DEFINE_FINAL_TYPE (KvTierRegistry, kv_tier_registry, G_TYPE_OBJECT)

static void
kv_tier_registry_finalize (GObject *object)
{
  KvTierRegistry *self = KV_TIER_REGISTRY (object);

  g_hash_table_unref (self->tiers);
  g_hash_table_unref (self->devices);
  /* The modules belong to the process-wide table: never unref'd. */
  g_hash_table_unref (self->modules);
  g_hash_table_unref (self->loaders);
  g_rec_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_tier_registry_parent_class)->finalize (object);
}

static void
kv_tier_registry_class_init (KvTierRegistryClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_tier_registry_finalize;
}

static gboolean register_type (KvTierRegistry  *self,
                               gboolean         is_device,
                               const char      *name,
                               GType            type,
                               const char      *origin,
                               GMainContext    *completion_context,
                               GError         **error);

static void
kv_tier_registry_init (KvTierRegistry *self)
{
  g_rec_mutex_init (&self->lock);
  self->tiers = g_hash_table_new_full (g_str_hash, g_str_equal, NULL,
                                       (GDestroyNotify) type_entry_free);
  self->devices = g_hash_table_new_full (g_str_hash, g_str_equal, NULL,
                                         (GDestroyNotify) type_entry_free);
  self->modules = g_hash_table_new (NULL, NULL);
  self->loaders = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_object_unref);

  register_type (self, TRUE, "host", KV_TYPE_HOST_DEVICE, ORIGIN_BUILT_IN, NULL, NULL);
}

/**
 * kv_tier_registry_new:
 *
 * Creates a registry that knows only the built-in types; load plugins with
 * [method@Kv.TierRegistry.load_plugins].
 *
 * Returns: (transfer full): a new registry
 */
KvTierRegistry *
kv_tier_registry_new (void)
{
  return g_object_new (KV_TYPE_TIER_REGISTRY, NULL);
}

/**
 * kv_tier_registry_get_default:
 *
 * Gets the process-wide registry. The first call creates it and loads the
 * plugins of [func@Kv.TierRegistry.get_plugin_dirs]; a plugin that fails
 * to load is reported with a warning and skipped. May be called from any
 * thread.
 *
 * Returns: (transfer none): the default registry
 */
KvTierRegistry *
kv_tier_registry_get_default (void)
{
  static gsize initialized;
  static KvTierRegistry *registry;

  if (g_once_init_enter (&initialized))
    {
      g_autoptr(GError) error = NULL;

      registry = kv_tier_registry_new ();
      if (!kv_tier_registry_load_plugins (registry, &error))
        g_warning ("%s", error->message);
      g_once_init_leave (&initialized, 1);
    }

  return registry;
}

static const char *
kind_name (gboolean is_device)
{
  return is_device ? "Device" : "Tier";
}

static gboolean
valid_type_name (const char *name)
{
  if (name == NULL || *name == '\0')
    return FALSE;
  for (const char *p = name; *p; p++)
    if (!g_ascii_isalnum (*p) && *p != '-' && *p != '_' && *p != '.')
      return FALSE;
  return TRUE;
}

static gboolean
register_type (KvTierRegistry  *self,
               gboolean         is_device,
               const char      *name,
               GType            type,
               const char      *origin,
               GMainContext    *completion_context,
               GError         **error)
{
  GType base = is_device ? KV_TYPE_DEVICE : KV_TYPE_SECONDARY_TIER;
  GHashTable *table = is_device ? self->devices : self->tiers;
  g_autoptr(GError) local_error = NULL;
  TypeEntry *entry;

  g_rec_mutex_lock (&self->lock);

  if (!valid_type_name (name))
    g_set_error (&local_error, KV_TIER_REGISTRY_ERROR,
                 KV_TIER_REGISTRY_ERROR_FAILED,
                 "Invalid %s type name '%s': use letters, digits, '-', '_' and '.'",
                 is_device ? "device" : "tier", name);
  else if (!g_type_is_a (type, base) || G_TYPE_IS_ABSTRACT (type))
    g_set_error (&local_error, KV_TIER_REGISTRY_ERROR,
                 KV_TIER_REGISTRY_ERROR_INVALID_TYPE,
                 "%s '%s': %s is not a concrete %s subclass",
                 kind_name (is_device), name,
                 type != G_TYPE_INVALID ? g_type_name (type) : "(invalid type)",
                 g_type_name (base));
  else if (g_hash_table_contains (table, name))
    g_set_error (&local_error, KV_TIER_REGISTRY_ERROR,
                 KV_TIER_REGISTRY_ERROR_DUPLICATE,
                 "%s '%s' is already registered.", kind_name (is_device), name);

  if (local_error == NULL)
    {
      entry = g_new0 (TypeEntry, 1);
      entry->name = g_strdup (name);
      entry->type = type;
      entry->origin = g_strdup (origin != NULL ? origin
                                : self->loading_path != NULL ? self->loading_path
                                : ORIGIN_RUN_TIME);
      if (completion_context != NULL)
        entry->completion_context = g_main_context_ref (completion_context);
      g_hash_table_insert (table, entry->name, entry);
    }
  else if (self->loading_path != NULL && self->loading_error == NULL)
    {
      /* The plugin's register function returns nothing: remember the
       * failure so load_plugin() can report it. */
      self->loading_error = g_error_copy (local_error);
      g_prefix_error (&self->loading_error, "Plugin “%s”: ", self->loading_path);
    }

  g_rec_mutex_unlock (&self->lock);

  if (local_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
      return FALSE;
    }
  return TRUE;
}

/**
 * kv_tier_registry_register_tier_type:
 * @self: a registry
 * @name: the type name used in configurations (letters, digits, `-`, `_`,
 *   `.`)
 * @type: a concrete [class@Kv.SecondaryTier] subclass
 * @error: return location for a #GError
 *
 * Registers a tier class under @name. Plugins call it from their register
 * function; Python and JavaScript code calls it with its class's GType, after
 * which configurations can use @name.
 *
 * Returns: %TRUE on success; %FALSE with @error set when @name is taken
 *   (%KV_TIER_REGISTRY_ERROR_DUPLICATE) or @type is not a concrete tier
 *   class
 */
gboolean
kv_tier_registry_register_tier_type (KvTierRegistry  *self,
                                     const char      *name,
                                     GType            type,
                                     GError         **error)
{
  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return register_type (self, FALSE, name, type, NULL, NULL, error);
}

/**
 * kv_tier_registry_register_device_type:
 * @self: a registry
 * @name: the type name used in the `[device]` section of configurations
 * @type: a concrete [class@Kv.Device] subclass
 * @error: return location for a #GError
 *
 * Registers a device class under @name (the CUDA plugin registers `cuda`).
 *
 * Returns: %TRUE on success; %FALSE with @error set when @name is taken
 *   (%KV_TIER_REGISTRY_ERROR_DUPLICATE) or @type is not a concrete device
 *   class
 */
gboolean
kv_tier_registry_register_device_type (KvTierRegistry  *self,
                                       const char      *name,
                                       GType            type,
                                       GError         **error)
{
  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return register_type (self, TRUE, name, type, NULL, NULL, error);
}

static char **
list_names (KvTierRegistry *self,
            GHashTable     *table)
{
  GPtrArray *names = g_ptr_array_new ();
  GHashTableIter iter;
  gpointer key;

  g_rec_mutex_lock (&self->lock);
  g_hash_table_iter_init (&iter, table);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    g_ptr_array_add (names, g_strdup (key));
  g_rec_mutex_unlock (&self->lock);

  g_ptr_array_add (names, NULL);
  return (char **) g_ptr_array_free (names, FALSE);
}

static int
compare_names (gconstpointer a,
               gconstpointer b)
{
  return g_strcmp0 (*(const char * const *) a, *(const char * const *) b);
}

static char **
sorted_names (KvTierRegistry *self,
              GHashTable     *table)
{
  char **names = list_names (self, table);

  qsort (names, g_strv_length (names), sizeof (char *), compare_names);
  return names;
}

/**
 * kv_tier_registry_list_tier_types:
 * @self: a registry
 *
 * Lists the registered tier type names, sorted.
 *
 * Returns: (transfer full) (array zero-terminated=1): the names
 */
char **
kv_tier_registry_list_tier_types (KvTierRegistry *self)
{
  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), NULL);

  return sorted_names (self, self->tiers);
}

/**
 * kv_tier_registry_list_device_types:
 * @self: a registry
 *
 * Lists the registered device type names, sorted.
 *
 * Returns: (transfer full) (array zero-terminated=1): the names
 */
char **
kv_tier_registry_list_device_types (KvTierRegistry *self)
{
  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), NULL);

  return sorted_names (self, self->devices);
}

static char *
format_choices (char **names)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; names[i] != NULL; i++)
    g_string_append_printf (s, "%s'%s'", i > 0 ? ", " : "", names[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static gboolean
lookup_entry (KvTierRegistry  *self,
              gboolean         is_device,
              const char      *name,
              TypeEntry       *out,
              GError         **error)
{
  GHashTable *table = is_device ? self->devices : self->tiers;
  TypeEntry *entry;

  g_rec_mutex_lock (&self->lock);
  entry = name != NULL ? g_hash_table_lookup (table, name) : NULL;
  if (entry != NULL)
    {
      out->name = g_strdup (entry->name);
      out->type = entry->type;
      out->origin = g_strdup (entry->origin);
    }
  g_rec_mutex_unlock (&self->lock);

  if (entry == NULL)
    {
      g_auto(GStrv) names = sorted_names (self, table);
      g_autofree char *choices = format_choices (names);

      if (is_device)
        g_set_error (error, KV_TIER_REGISTRY_ERROR,
                     KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE,
                     "Unknown device type: '%s'. Supported types: %s.",
                     name != NULL ? name : "", choices);
      else
        g_set_error (error, KV_TIER_REGISTRY_ERROR,
                     KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE,
                     "Unknown secondary tier type: '%s'. Supported types: %s."
                     " Out-of-tree tiers come from plugin directories"
                     " (KVTIER_PLUGIN_PATH) or register their class at run time.",
                     name != NULL ? name : "", choices);
      return FALSE;
    }
  return TRUE;
}

/**
 * kv_tier_registry_lookup_tier_type:
 * @self: a registry
 * @name: a tier type name
 * @error: return location for a #GError
 *
 * Looks up the class registered under @name.
 *
 * Returns: the GType, or %G_TYPE_INVALID with @error set
 *   (%KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE, the message lists the supported
 *   types)
 */
GType
kv_tier_registry_lookup_tier_type (KvTierRegistry  *self,
                                   const char      *name,
                                   GError         **error)
{
  TypeEntry entry = { 0 };

  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), G_TYPE_INVALID);
  g_return_val_if_fail (error == NULL || *error == NULL, G_TYPE_INVALID);

  if (!lookup_entry (self, FALSE, name, &entry, error))
    return G_TYPE_INVALID;
  g_free (entry.name);
  g_free (entry.origin);
  return entry.type;
}

/**
 * kv_tier_registry_lookup_device_type:
 * @self: a registry
 * @name: a device type name
 * @error: return location for a #GError
 *
 * Looks up the device class registered under @name.
 *
 * Returns: the GType, or %G_TYPE_INVALID with @error set
 *   (%KV_TIER_REGISTRY_ERROR_UNKNOWN_TYPE, the message lists the supported
 *   types)
 */
GType
kv_tier_registry_lookup_device_type (KvTierRegistry  *self,
                                     const char      *name,
                                     GError         **error)
{
  TypeEntry entry = { 0 };

  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), G_TYPE_INVALID);
  g_return_val_if_fail (error == NULL || *error == NULL, G_TYPE_INVALID);

  if (!lookup_entry (self, TRUE, name, &entry, error))
    return G_TYPE_INVALID;
  g_free (entry.name);
  g_free (entry.origin);
  return entry.type;
}

/* An object of @entry's type constructed as configurations construct
 * one, with no configuration and not initialized, to read the defaults it
 * really runs with: a class may set its own when an instance is made (the
 * fs tier's deadline-ms is 5000, the peer tier's locality remote), which
 * its param specs do not say. NULL when none can be made on this thread: a
 * tier module type whose tiers belong to a main context another thread
 * owns (JavaScript). */
static GObject *
new_probe (KvTierRegistry  *self,
           const TypeEntry *entry,
           gboolean         is_device)
{
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (1, 4096, NULL);
  g_autoptr(GMainContext) context = NULL;
  const char *names[3];
  GValue values[3] = { G_VALUE_INIT, G_VALUE_INIT, G_VALUE_INIT };
  guint n = 0;
  GObject *probe;

  if (buffer == NULL)
    return NULL;
  if (!is_device)
    {
      context = kv_tier_registry_dup_completion_context (self, entry->name);
      if (context != NULL && !g_main_context_acquire (context))
        return NULL;
    }

  names[n] = "primary";
  g_value_set_object (g_value_init (&values[n++], KV_TYPE_HOST_BUFFER), buffer);
  if (!is_device)
    {
      names[n] = "tier-type";
      g_value_set_string (g_value_init (&values[n++], G_TYPE_STRING), entry->name);
    }
  if (context != NULL)
    {
      names[n] = "completion-context";
      g_value_set_boxed (g_value_init (&values[n++], G_TYPE_MAIN_CONTEXT), context);
    }
  probe = g_object_new_with_properties (entry->type, n, names, values);
  for (guint i = 0; i < n; i++)
    g_value_unset (&values[i]);
  if (context != NULL)
    g_main_context_release (context);
  return probe;
}

static GVariant *
describe_property (GParamSpec *pspec,
                   GObject    *probe)
{
  GVariantDict dict;
  g_autofree char *type = kv_config_value_describe_type (pspec);
  g_autofree char *def = NULL;
  const char *blurb = g_param_spec_get_blurb (pspec);
  GType vtype = G_PARAM_SPEC_VALUE_TYPE (pspec);

  if (probe != NULL && (pspec->flags & G_PARAM_READABLE) != 0)
    {
      GValue value = G_VALUE_INIT;

      g_value_init (&value, vtype);
      g_object_get_property (probe, pspec->name, &value);
      def = kv_config_value_to_string (pspec, &value);
      g_value_unset (&value);
    }
  else
    def = kv_config_value_to_string (pspec, g_param_spec_get_default_value (pspec));

  g_variant_dict_init (&dict, NULL);
  g_variant_dict_insert (&dict, "name", "s", pspec->name);
  g_variant_dict_insert (&dict, "type", "s", type);
  g_variant_dict_insert (&dict, "value-type", "s", g_type_name (vtype));
  g_variant_dict_insert (&dict, "default", "s", def != NULL ? def : "");
  g_variant_dict_insert (&dict, "blurb", "s", blurb != NULL ? blurb : "");
  g_variant_dict_insert (&dict, "construct-only", "b",
                         (pspec->flags & G_PARAM_CONSTRUCT_ONLY) != 0);

  if (G_IS_PARAM_SPEC_ENUM (pspec) || G_IS_PARAM_SPEC_FLAGS (pspec))
    {
      GVariantBuilder choices;

      g_variant_builder_init (&choices, G_VARIANT_TYPE_STRING_ARRAY);
      if (G_IS_PARAM_SPEC_ENUM (pspec))
        {
          GEnumClass *klass = G_PARAM_SPEC_ENUM (pspec)->enum_class;

          for (guint i = 0; i < klass->n_values; i++)
            g_variant_builder_add (&choices, "s", klass->values[i].value_nick);
        }
      else
        {
          GFlagsClass *klass = G_PARAM_SPEC_FLAGS (pspec)->flags_class;

          for (guint i = 0; i < klass->n_values; i++)
            g_variant_builder_add (&choices, "s", klass->values[i].value_nick);
        }
      g_variant_dict_insert_value (&dict, "choices", g_variant_builder_end (&choices));
    }

#define RANGE(PSPEC_TYPE, CAST, FMT)                                          \
  else if (G_IS_PARAM_SPEC_##PSPEC_TYPE (pspec))                             \
    {                                                                        \
      g_autofree char *lo = g_strdup_printf (FMT, CAST (pspec)->minimum);    \
      g_autofree char *hi = g_strdup_printf (FMT, CAST (pspec)->maximum);    \
      g_variant_dict_insert (&dict, "minimum", "s", lo);                     \
      g_variant_dict_insert (&dict, "maximum", "s", hi);                     \
    }
  if (FALSE)
    ;
  RANGE (INT, G_PARAM_SPEC_INT, "%d")
  RANGE (UINT, G_PARAM_SPEC_UINT, "%u")
  RANGE (LONG, G_PARAM_SPEC_LONG, "%ld")
  RANGE (ULONG, G_PARAM_SPEC_ULONG, "%lu")
  RANGE (INT64, G_PARAM_SPEC_INT64, "%" G_GINT64_FORMAT)
  RANGE (UINT64, G_PARAM_SPEC_UINT64, "%" G_GUINT64_FORMAT)
  RANGE (DOUBLE, G_PARAM_SPEC_DOUBLE, "%g")
  RANGE (FLOAT, G_PARAM_SPEC_FLOAT, "%g")
#undef RANGE

  return g_variant_dict_end (&dict);
}

static GVariant *
describe (KvTierRegistry  *self,
          gboolean         is_device,
          const char      *name,
          GError         **error)
{
  TypeEntry entry = { 0 };
  GVariantDict dict;
  GVariantBuilder props;
  g_autoptr(GTypeClass) klass = NULL;
  g_autofree GParamSpec **pspecs = NULL;
  g_autoptr(GObject) probe = NULL;
  guint n_pspecs;

  if (!lookup_entry (self, is_device, name, &entry, error))
    return NULL;

  klass = g_type_class_ref (entry.type);
  pspecs = g_object_class_list_properties (G_OBJECT_CLASS (klass), &n_pspecs);
  probe = new_probe (self, &entry, is_device);

  g_variant_builder_init (&props, G_VARIANT_TYPE ("aa{sv}"));
  for (guint i = 0; i < n_pspecs; i++)
    if (kv_config_value_is_configurable (pspecs[i], entry.type))
      g_variant_builder_add_value (&props, describe_property (pspecs[i], probe));

  g_variant_dict_init (&dict, NULL);
  g_variant_dict_insert (&dict, "name", "s", entry.name);
  g_variant_dict_insert (&dict, "kind", "s", is_device ? "device" : "tier");
  g_variant_dict_insert (&dict, "gtype", "s", g_type_name (entry.type));
  g_variant_dict_insert (&dict, "origin", "s", entry.origin);
  g_variant_dict_insert_value (&dict, "properties", g_variant_builder_end (&props));

  g_free (entry.name);
  g_free (entry.origin);
  return g_variant_ref_sink (g_variant_dict_end (&dict));
}

/**
 * kv_tier_registry_describe_tier_type:
 * @self: a registry
 * @name: a tier type name
 * @error: return location for a #GError
 *
 * Describes a tier type by introspection of its class. The dictionary
 * (`a{sv}`) holds `name`, `kind` (`"tier"`), `gtype` (the GType name),
 * `origin` (the plugin's path, `"built-in"` or `"run time"`) and
 * `properties`, an array of dictionaries, one per property a configuration
 * may set, each with `name`, `type` (`"size"`, `"uint"`, `"boolean"`,
 * `"enum"`, `"string list"`...), `value-type` (the GType name), `default`
 * and `blurb` (strings), `construct-only` (boolean), `choices` (enums and
 * flags) and `minimum`/`maximum` (numbers, as strings).
 *
 * `default` is the value a tier of the type runs with when a
 * configuration does not set the property: read from one object of the
 * type, constructed as a configuration would construct it but without
 * settings and not initialized (so nothing is opened or started), since a
 * class may set defaults of its own when an instance is made (the fs tier's
 * `deadline-ms` is 5000). For a tier module type whose tiers run on a main
 * context another thread owns (JavaScript), it is the property's declared
 * default.
 *
 * Returns: (transfer full): the description, or %NULL with @error set when
 *   @name is unknown
 */
GVariant *
kv_tier_registry_describe_tier_type (KvTierRegistry  *self,
                                     const char      *name,
                                     GError         **error)
{
  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return describe (self, FALSE, name, error);
}

/**
 * kv_tier_registry_describe_device_type:
 * @self: a registry
 * @name: a device type name
 * @error: return location for a #GError
 *
 * Describes a device type, like [method@Kv.TierRegistry.describe_tier_type]
 * (`kind` is `"device"`).
 *
 * Returns: (transfer full): the description, or %NULL with @error set when
 *   @name is unknown
 */
GVariant *
kv_tier_registry_describe_device_type (KvTierRegistry  *self,
                                       const char      *name,
                                       GError         **error)
{
  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return describe (self, TRUE, name, error);
}

/* Opens, checks and registers one module. A file that is not a kvtier
 * plugin fails with KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN, which directory
 * scans skip. */
static gboolean
load_plugin_file (KvTierRegistry  *self,
                  const char      *path,
                  GError         **error)
{
  g_autofree char *real = NULL;
  KvPluginModule *plugin;
  gboolean ok = TRUE;

  real = realpath (path, NULL);
  if (real == NULL)
    {
      int errsv = errno;

      g_set_error (error, KV_TIER_REGISTRY_ERROR,
                   KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN,
                   "Cannot load plugin “%s”: %s", path, g_strerror (errsv));
      return FALSE;
    }

  _kv_plugin_modules_lock ();
  plugin = _kv_plugin_module_open (path, real, error);
  if (plugin == NULL)
    {
      _kv_plugin_modules_unlock ();
      return FALSE;
    }

  g_rec_mutex_lock (&self->lock);
  if (!g_hash_table_contains (self->modules, plugin))
    {
      g_hash_table_add (self->modules, plugin);
      self->loading_path = real;
      g_clear_error (&self->loading_error);

      if (!_kv_plugin_module_register_into (plugin, self) && self->loading_error == NULL)
        self->loading_error = g_error_new (KV_TIER_REGISTRY_ERROR,
                                           KV_TIER_REGISTRY_ERROR_FAILED,
                                           "Plugin “%s” failed to register its types",
                                           path);

      self->loading_path = NULL;
      if (self->loading_error != NULL)
        {
          g_propagate_error (error, g_steal_pointer (&self->loading_error));
          ok = FALSE;
        }
    }
  g_rec_mutex_unlock (&self->lock);

  _kv_plugin_modules_unlock ();
  return ok;
}

/**
 * kv_tier_registry_load_plugin:
 * @self: a registry
 * @path: (type filename): a plugin module
 * @error: return location for a #GError
 *
 * Loads one plugin: opens the module with local binding, checks its
 * exported `kvtier_plugin_abi_version` against %KV_PLUGIN_ABI_VERSION
 * before anything in it runs, calls its `kvtier_plugin_register` and keeps
 * it resident. Loading a plugin that this registry already loaded does
 * nothing.
 *
 * Returns: %TRUE on success; %FALSE with @error set when @path is not a
 *   kvtier plugin (%KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN), was built for
 *   another ABI (%KV_TIER_REGISTRY_ERROR_ABI_MISMATCH) or registered a name
 *   that is taken (%KV_TIER_REGISTRY_ERROR_DUPLICATE)
 */
gboolean
kv_tier_registry_load_plugin (KvTierRegistry  *self,
                              const char      *path,
                              GError         **error)
{
  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), FALSE);
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return load_plugin_file (self, path, error);
}

/**
 * kv_tier_registry_get_plugin_dirs:
 *
 * Lists the directories [method@Kv.TierRegistry.load_plugins] searches, in
 * order: those of `KVTIER_PLUGIN_PATH` (colon-separated), then
 * `$libdir/kvtier-1/plugins`.
 *
 * Returns: (transfer full) (array zero-terminated=1) (element-type filename):
 *   the directories
 */
char **
kv_tier_registry_get_plugin_dirs (void)
{
  GPtrArray *dirs = g_ptr_array_new ();
  const char *env = g_getenv ("KVTIER_PLUGIN_PATH");

  if (env != NULL)
    {
      g_auto(GStrv) parts = g_strsplit (env, G_SEARCHPATH_SEPARATOR_S, -1);

      for (guint i = 0; parts[i] != NULL; i++)
        if (parts[i][0] != '\0')
          g_ptr_array_add (dirs, g_strdup (parts[i]));
    }
  g_ptr_array_add (dirs, g_strdup (KVTIER_PLUGINDIR));
  g_ptr_array_add (dirs, NULL);
  return (char **) g_ptr_array_free (dirs, FALSE);
}

/**
 * kv_tier_registry_load_plugins:
 * @self: a registry
 * @error: return location for a #GError
 *
 * Loads every plugin in [func@Kv.TierRegistry.get_plugin_dirs]: each
 * `*.so` file of each directory, in name order. A file name already loaded
 * from an earlier directory is skipped, so `KVTIER_PLUGIN_PATH` overrides
 * installed plugins; files that are not kvtier plugins (such as
 * `libkvtier-1.so` itself) and missing directories are skipped silently
 * (with a debug message). The other plugins still load when one fails.
 *
 * Returns: %TRUE when every plugin loaded; %FALSE with @error set (naming
 *   every file that failed) when a plugin has the wrong ABI or registered a
 *   name that is taken
 */
gboolean
kv_tier_registry_load_plugins (KvTierRegistry  *self,
                               GError         **error)
{
  g_auto(GStrv) dirs = NULL;
  g_autoptr(GHashTable) seen = NULL;
  g_autoptr(GString) failures = NULL;
  gint first_code = -1;

  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  dirs = kv_tier_registry_get_plugin_dirs ();
  seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);

  for (guint d = 0; dirs[d] != NULL; d++)
    {
      g_autoptr(GDir) dir = NULL;
      g_autoptr(GPtrArray) names = NULL;
      g_autoptr(GError) dir_error = NULL;
      const char *name;

      dir = g_dir_open (dirs[d], 0, &dir_error);
      if (dir == NULL)
        {
          g_debug ("Skipping plugin directory %s: %s", dirs[d], dir_error->message);
          continue;
        }

      names = g_ptr_array_new_with_free_func (g_free);
      while ((name = g_dir_read_name (dir)) != NULL)
        if (g_str_has_suffix (name, "." G_MODULE_SUFFIX))
          g_ptr_array_add (names, g_strdup (name));
      g_ptr_array_sort (names, compare_names);

      for (guint i = 0; i < names->len; i++)
        {
          const char *base = g_ptr_array_index (names, i);
          g_autofree char *path = g_build_filename (dirs[d], base, NULL);
          g_autoptr(GError) load_error = NULL;

          if (!g_file_test (path, G_FILE_TEST_IS_REGULAR))
            continue;
          if (g_hash_table_contains (seen, base))
            {
              g_debug ("Skipping %s: a plugin of that name was loaded from"
                       " an earlier directory", path);
              continue;
            }

          if (load_plugin_file (self, path, &load_error))
            {
              g_hash_table_add (seen, g_strdup (base));
              continue;
            }

          if (g_error_matches (load_error, KV_TIER_REGISTRY_ERROR,
                               KV_TIER_REGISTRY_ERROR_NOT_A_PLUGIN))
            {
              g_debug ("Skipping %s", load_error->message);
              continue;
            }

          g_hash_table_add (seen, g_strdup (base));
          if (failures == NULL)
            {
              failures = g_string_new (load_error->message);
              first_code = load_error->code;
            }
          else
            g_string_append_printf (failures, "; %s", load_error->message);
        }
    }

  if (failures != NULL)
    {
      g_set_error_literal (error, KV_TIER_REGISTRY_ERROR, first_code, failures->str);
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* Tier modules: files in another language that define tier classes. */

/* The loader modules the registry knows by extension, as libpeas knows
 * its python3 and gjs loaders by name. */
static const struct {
  const char *extension;
  const char *loader;
  const char *language;
} known_loaders[] = {
  { "py", "python", "Python" },
  { "js", "gjs", "JavaScript" },
  { "mjs", "gjs", "JavaScript" },
};

/* What a tier module defined: loaded once per process, then named in
 * every registry that loads it again. */
typedef struct
{
  GArray       *types;         /* GType, sorted by name */
  GMainContext *completion_context;
} TierModule;

static void
tier_module_free (TierModule *module)
{
  g_array_unref (module->types);
  g_clear_pointer (&module->completion_context, g_main_context_unref);
  g_free (module);
}

/* Serializes module loads, whose type discovery compares the GTypes before
 * and after a file ran. Recursive: a module may load another. */
static GRecMutex tier_modules_lock;
static GHashTable *tier_modules;   /* real path → TierModule */

GMainContext *
kv_tier_registry_dup_completion_context (KvTierRegistry *self,
                                         const char     *name)
{
  GMainContext *context = NULL;
  TypeEntry *entry;

  g_rec_mutex_lock (&self->lock);
  entry = g_hash_table_lookup (self->tiers, name);
  if (entry != NULL && entry->completion_context != NULL)
    context = g_main_context_ref (entry->completion_context);
  g_rec_mutex_unlock (&self->lock);
  return context;
}

static char *
normalize_extension (const char *extension)
{
  if (extension[0] == '.')
    extension++;
  return g_ascii_strdown (extension, -1);
}

/**
 * kv_tier_registry_register_module_loader:
 * @self: a registry
 * @extension: the file extension the loader handles, with or without its
 *   dot (`py`, `.js`); case does not matter
 * @loader: the loader
 * @error: return location for a #GError
 *
 * Makes @loader the loader of tier modules whose file name ends in
 * @extension. Loader modules call it from their register function
 * ([callback@Kv.PluginRegisterFunc]); a C program or a test may register
 * a loader of its own. Registering a second loader for an extension fails.
 *
 * Returns: %TRUE on success; %FALSE with @error set
 *   (%KV_TIER_REGISTRY_ERROR_DUPLICATE) when @extension has a loader
 */
gboolean
kv_tier_registry_register_module_loader (KvTierRegistry      *self,
                                         const char          *extension,
                                         KvTierModuleLoader  *loader,
                                         GError             **error)
{
  g_autofree char *ext = NULL;
  gboolean ok = TRUE;

  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), FALSE);
  g_return_val_if_fail (extension != NULL, FALSE);
  g_return_val_if_fail (KV_IS_TIER_MODULE_LOADER (loader), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  ext = normalize_extension (extension);
  if (*ext == '\0' || strchr (ext, '/') != NULL || strchr (ext, '.') != NULL)
    {
      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_FAILED,
                   "Invalid tier module extension '%s'", extension);
      return FALSE;
    }

  g_rec_mutex_lock (&self->lock);
  if (g_hash_table_contains (self->loaders, ext))
    {
      KvTierModuleLoader *other = g_hash_table_lookup (self->loaders, ext);

      if (other != loader)
        {
          g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_DUPLICATE,
                       "Tier modules '.%s' already have a loader (%s)", ext,
                       G_OBJECT_TYPE_NAME (other));
          ok = FALSE;
        }
    }
  else
    g_hash_table_insert (self->loaders, g_steal_pointer (&ext), g_object_ref (loader));
  g_rec_mutex_unlock (&self->lock);
  return ok;
}

/**
 * kv_tier_registry_get_loader_dirs:
 *
 * Lists the directories searched for tier module loaders (the loader
 * modules of [class@Kv.TierModuleLoader]), in order: those of
 * `KVTIER_LOADER_PATH` (colon-separated), then `$libdir/kvtier-1/loaders`.
 *
 * Returns: (transfer full) (array zero-terminated=1) (element-type filename):
 *   the directories
 */
char **
kv_tier_registry_get_loader_dirs (void)
{
  GPtrArray *dirs = g_ptr_array_new ();
  const char *env = g_getenv ("KVTIER_LOADER_PATH");

  if (env != NULL)
    {
      g_auto(GStrv) parts = g_strsplit (env, G_SEARCHPATH_SEPARATOR_S, -1);

      for (guint i = 0; parts[i] != NULL; i++)
        if (parts[i][0] != '\0')
          g_ptr_array_add (dirs, g_strdup (parts[i]));
    }
  g_ptr_array_add (dirs, g_strdup (KVTIER_LOADERDIR));
  g_ptr_array_add (dirs, NULL);
  return (char **) g_ptr_array_free (dirs, FALSE);
}

/* The loader of @ext: registered, or loaded from its loader module. */
static KvTierModuleLoader *
find_loader (KvTierRegistry  *self,
             const char      *path,
             const char      *ext,
             GError         **error)
{
  KvTierModuleLoader *loader;
  const char *loader_name = NULL, *language = NULL;
  g_autofree char *file_name = NULL;
  g_auto(GStrv) dirs = NULL;
  g_autoptr(GString) known = g_string_new (NULL);

  g_rec_mutex_lock (&self->lock);
  loader = g_hash_table_lookup (self->loaders, ext);
  if (loader != NULL)
    g_object_ref (loader);
  g_rec_mutex_unlock (&self->lock);
  if (loader != NULL)
    return loader;

  for (guint i = 0; i < G_N_ELEMENTS (known_loaders); i++)
    {
      g_string_append_printf (known, "%s.%s", known->len > 0 ? ", " : "",
                              known_loaders[i].extension);
      if (g_str_equal (ext, known_loaders[i].extension))
        {
          loader_name = known_loaders[i].loader;
          language = known_loaders[i].language;
        }
    }
  if (loader_name == NULL)
    {
      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER,
                   "Tier module “%s”: no loader for %s%s%s (tier modules are %s files)",
                   path, *ext != '\0' ? "'." : "files without an extension",
                   *ext != '\0' ? ext : "", *ext != '\0' ? "' files" : "", known->str);
      return NULL;
    }

  file_name = g_strdup_printf ("libkvtier-loader-%s." G_MODULE_SUFFIX, loader_name);
  dirs = kv_tier_registry_get_loader_dirs ();
  for (guint d = 0; dirs[d] != NULL; d++)
    {
      g_autofree char *candidate = g_build_filename (dirs[d], file_name, NULL);
      g_autoptr(GError) load_error = NULL;

      if (!g_file_test (candidate, G_FILE_TEST_IS_REGULAR))
        continue;
      if (!load_plugin_file (self, candidate, &load_error))
        {
          g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER,
                       "Tier module “%s”: the %s loader cannot be loaded: %s",
                       path, language, load_error->message);
          return NULL;
        }
      g_rec_mutex_lock (&self->lock);
      loader = g_hash_table_lookup (self->loaders, ext);
      if (loader != NULL)
        g_object_ref (loader);
      g_rec_mutex_unlock (&self->lock);
      if (loader != NULL)
        return loader;
      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER,
                   "Tier module “%s”: %s registered no loader for '.%s' files",
                   path, candidate, ext);
      return NULL;
    }

  {
    g_autofree char *searched = g_strjoinv (", ", dirs);

    g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_LOADER,
                 "Tier module “%s”: the %s loader (%s) is not installed; searched %s"
                 " (KVTIER_LOADER_PATH adds directories)",
                 path, language, file_name, searched);
  }
  return NULL;
}

static void
collect_tier_types (GType       type,
                    GHashTable *into)
{
  guint n_children = 0;
  g_autofree GType *children = g_type_children (type, &n_children);

  for (guint i = 0; i < n_children; i++)
    {
      g_hash_table_add (into, GSIZE_TO_POINTER (children[i]));
      collect_tier_types (children[i], into);
    }
}

static int
compare_type_names (gconstpointer a,
                    gconstpointer b)
{
  return g_strcmp0 (g_type_name (*(const GType *) a), g_type_name (*(const GType *) b));
}

/* The class name of a binding's type: its GType name without PyGObject's
 * "module+" or GJS's "Gjs_" prefix. */
static const char *
class_name (GType type)
{
  const char *name = g_type_name (type);
  const char *plus = strrchr (name, '+');

  if (plus != NULL && plus[1] != '\0')
    return plus + 1;
  if (g_str_has_prefix (name, "Gjs_") && name[4] != '\0')
    return name + 4;
  return name;
}

/* A type name from @text: what valid_type_name() refuses becomes '_'. */
static char *
type_name_from (const char *text)
{
  char *name = g_strdup (text);

  for (char *p = name; *p; p++)
    if (!g_ascii_isalnum (*p) && *p != '-' && *p != '_' && *p != '.')
      *p = '_';
  return name;
}

/* Runs @real_path through its loader (once per process) and returns what
 * it defined; NULL with @error set when it cannot be evaluated. */
static TierModule *
ensure_tier_module (KvTierRegistry  *self,
                    const char      *user_path,
                    const char      *real_path,
                    const char      *ext,
                    GError         **error)
{
  g_autoptr(KvTierModuleLoader) loader = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autoptr(GHashTable) before = NULL;
  g_autoptr(GHashTable) after = NULL;
  GHashTableIter iter;
  gpointer key;
  TierModule *module;
  GMainContext *context;

  if (tier_modules != NULL &&
      (module = g_hash_table_lookup (tier_modules, real_path)) != NULL)
    return module;

  loader = find_loader (self, user_path, ext, error);
  if (loader == NULL)
    return NULL;

  before = g_hash_table_new (NULL, NULL);
  collect_tier_types (KV_TYPE_SECONDARY_TIER, before);
  if (!kv_tier_module_loader_load_file (loader, real_path, &local_error))
    {
      const char *language = kv_tier_module_loader_get_language (loader);

      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED,
                   "Tier module “%s”: %s%s%s", user_path,
                   language != NULL ? language : "", language != NULL ? ": " : "",
                   local_error->message);
      return NULL;
    }
  after = g_hash_table_new (NULL, NULL);
  collect_tier_types (KV_TYPE_SECONDARY_TIER, after);

  module = g_new0 (TierModule, 1);
  module->types = g_array_new (FALSE, FALSE, sizeof (GType));
  g_hash_table_iter_init (&iter, after);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      GType type = GPOINTER_TO_SIZE (key);

      if (!g_hash_table_contains (before, key) && !G_TYPE_IS_ABSTRACT (type))
        g_array_append_val (module->types, type);
    }
  g_array_sort (module->types, compare_type_names);
  context = kv_tier_module_loader_get_main_context (loader);
  if (context != NULL)
    module->completion_context = g_main_context_ref (context);

  if (tier_modules == NULL)
    tier_modules = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                          (GDestroyNotify) tier_module_free);
  g_hash_table_insert (tier_modules, g_strdup (real_path), module);
  return module;
}

/**
 * kv_tier_registry_load_tier_module:
 * @self: a registry
 * @path: (type filename): a Python (`.py`) or JavaScript (`.js`, `.mjs`)
 *   file that defines tier classes; relative to the working directory
 * @error: return location for a #GError
 *
 * Loads a tier module: evaluates @path with the [class@Kv.TierModuleLoader]
 * of its extension (loading the loader module first, from
 * [func@Kv.TierRegistry.get_loader_dirs]) and registers the concrete
 * [class@Kv.SecondaryTier] subclasses that were defined while it ran.
 * A file that defines one tier class registers it under the file's name
 * without its extension (`mytier.py` → `mytier`); a file that defines
 * several registers each as that name, a dot and its class name
 * (`mytiers.MemTier`: the GType name without PyGObject's `module+` or
 * GJS's `Gjs_` prefix). Characters that type names do not allow become
 * `_`. Their origin ([method@Kv.TierRegistry.describe_tier_type]) is the
 * file.
 *
 * A file is evaluated once per process: loading it again, into this or
 * another registry, registers the same types under the same names. Tiers
 * whose loader has a [property@Kv.TierModuleLoader:main-context] (the GJS
 * loader) are created by [method@Kv.TierRegistry.create_tier] with that
 * context as their [property@Kv.SecondaryTier:completion-context].
 *
 * Call it on the thread that will drive the tiers: a JavaScript module
 * runs in a GJS context bound to the thread that loaded it.
 *
 * Returns: (transfer full) (array zero-terminated=1): the names of the
 *   tier types the file defines, sorted; %NULL with @error set, naming the
 *   file and the cause, when the file is missing or fails to evaluate
 *   (%KV_TIER_REGISTRY_ERROR_MODULE_FAILED), no loader handles it
 *   (%KV_TIER_REGISTRY_ERROR_NO_LOADER), it defines no tier class
 *   (%KV_TIER_REGISTRY_ERROR_NO_TIER_TYPE) or a name it would take is
 *   registered to another type (%KV_TIER_REGISTRY_ERROR_DUPLICATE)
 */
char **
kv_tier_registry_load_tier_module (KvTierRegistry  *self,
                                   const char      *path,
                                   GError         **error)
{
  g_autofree char *real_path = NULL;
  g_autofree char *base = NULL;
  g_autofree char *ext = NULL;
  g_autofree char *stem = NULL;
  g_autoptr(GPtrArray) names = NULL;
  const char *dot;
  TierModule *module;
  char *resolved;

  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), NULL);
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  resolved = realpath (path, NULL);
  if (resolved == NULL)
    {
      int saved_errno = errno;

      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED,
                   "Tier module “%s”: %s", path, g_strerror (saved_errno));
      return NULL;
    }
  real_path = g_strdup (resolved);
  free (resolved);
  if (!g_file_test (real_path, G_FILE_TEST_IS_REGULAR))
    {
      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED,
                   "Tier module “%s”: not a regular file", path);
      return NULL;
    }
  if (access (real_path, R_OK) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_MODULE_FAILED,
                   "Tier module “%s”: %s", path, g_strerror (saved_errno));
      return NULL;
    }

  /* The name the user wrote decides the extension and the type name. */
  base = g_path_get_basename (path);
  dot = strrchr (base, '.');
  ext = normalize_extension (dot != NULL && dot != base ? dot + 1 : "");
  stem = dot != NULL && dot != base ? g_strndup (base, dot - base) : g_strdup (base);

  g_rec_mutex_lock (&tier_modules_lock);
  module = ensure_tier_module (self, path, real_path, ext, error);
  if (module == NULL)
    {
      g_rec_mutex_unlock (&tier_modules_lock);
      return NULL;
    }
  if (module->types->len == 0)
    {
      g_rec_mutex_unlock (&tier_modules_lock);
      g_set_error (error, KV_TIER_REGISTRY_ERROR, KV_TIER_REGISTRY_ERROR_NO_TIER_TYPE,
                   "Tier module “%s” defines no tier type: no concrete Kv.SecondaryTier"
                   " subclass was defined while it ran (a class defined by a module"
                   " loaded earlier does not count)", path);
      return NULL;
    }

  names = g_ptr_array_new_with_free_func (g_free);
  for (guint i = 0; i < module->types->len; i++)
    {
      GType type = g_array_index (module->types, GType, i);
      g_autofree char *name = NULL;
      g_autoptr(GError) local_error = NULL;
      TypeEntry *existing;
      gboolean same;

      if (module->types->len == 1)
        name = type_name_from (stem);
      else
        {
          g_autofree char *joined = g_strdup_printf ("%s.%s", stem, class_name (type));

          name = type_name_from (joined);
        }

      g_rec_mutex_lock (&self->lock);
      existing = g_hash_table_lookup (self->tiers, name);
      same = existing != NULL && existing->type == type;
      g_rec_mutex_unlock (&self->lock);
      if (!same &&
          !register_type (self, FALSE, name, type, real_path, module->completion_context,
                          &local_error))
        {
          g_rec_mutex_unlock (&tier_modules_lock);
          g_set_error (error, KV_TIER_REGISTRY_ERROR, local_error->code,
                       "Tier module “%s”: %s", path, local_error->message);
          return NULL;
        }
      g_ptr_array_add (names, g_steal_pointer (&name));
    }
  g_rec_mutex_unlock (&tier_modules_lock);

  g_ptr_array_add (names, NULL);
  return (char **) g_ptr_array_free (g_steal_pointer (&names), FALSE);
}

static gboolean
collect_properties (const char      *kind,
                    const char      *type_name,
                    GObjectClass    *klass,
                    GVariant        *properties,
                    GPtrArray       *names,
                    GArray          *values,
                    GError         **error)
{
  GVariantIter iter;
  const char *key;
  GVariant *value;

  if (properties == NULL)
    return TRUE;

  g_variant_iter_init (&iter, properties);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) owned = value;
      g_autoptr(GError) local_error = NULL;
      GParamSpec *pspec = g_object_class_find_property (klass, key);
      GValue gvalue = G_VALUE_INIT;

      /* Canonical names only: "max_size" and "max-size" would set one
       * property twice. */
      if (pspec == NULL || !g_str_equal (pspec->name, key) ||
          !kv_config_value_is_configurable (pspec, G_TYPE_FROM_CLASS (klass)))
        {
          g_autoptr(GString) accepted = g_string_new (NULL);
          g_autofree GParamSpec **pspecs = NULL;
          guint n_pspecs;

          pspecs = g_object_class_list_properties (klass, &n_pspecs);
          for (guint i = 0; i < n_pspecs; i++)
            if (kv_config_value_is_configurable (pspecs[i], G_TYPE_FROM_CLASS (klass)))
              g_string_append_printf (accepted, "%s%s", accepted->len > 0 ? ", " : "",
                                      pspecs[i]->name);
          g_set_error (error, KV_TIER_REGISTRY_ERROR,
                       KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY,
                       "%s type '%s' has no configurable property '%s'"
                       " (accepted: %s)", kind, type_name, key,
                       accepted->len > 0 ? accepted->str : "none");
          return FALSE;
        }

      if (!kv_config_value_from_variant (pspec, value, &gvalue, &local_error))
        {
          g_set_error (error, KV_TIER_REGISTRY_ERROR,
                       KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY,
                       "%s type '%s', property '%s': %s", kind, type_name, key,
                       local_error->message);
          return FALSE;
        }

      g_ptr_array_add (names, (gpointer) pspec->name);
      g_array_append_val (values, gvalue);
    }
  return TRUE;
}

/* Appends a construct property named @name (a static string) and returns
 * its value, initialized to @type for the caller to set. */
static GValue *
append_value (GPtrArray  *names,
              GArray     *values,
              const char *name,
              GType       type)
{
  GValue value = G_VALUE_INIT;

  g_ptr_array_add (names, (gpointer) name);
  g_array_append_val (values, value);
  return g_value_init (&g_array_index (values, GValue, values->len - 1), type);
}

/* The construct properties every created object gets: its primary buffer. */
static void
new_construct_values (KvHostBuffer  *primary,
                      GPtrArray    **names,
                      GArray       **values)
{
  *names = g_ptr_array_new ();
  *values = g_array_new (FALSE, TRUE, sizeof (GValue));
  g_value_set_object (append_value (*names, *values, "primary", KV_TYPE_HOST_BUFFER),
                      primary);
}

static GObject *
create_object (GType          type,
               const char    *kind,
               const char    *type_name,
               GPtrArray     *names,
               GArray        *values,
               GVariant      *properties,
               GError       **error)
{
  g_autoptr(GTypeClass) klass = g_type_class_ref (type);
  GObject *object = NULL;

  if (collect_properties (kind, type_name, G_OBJECT_CLASS (klass), properties,
                          names, values, error))
    {
      object = g_object_new_with_properties (type, names->len,
                                             (const char **) names->pdata,
                                             (const GValue *) values->data);
      if (G_IS_INITABLE (object) && !g_initable_init (G_INITABLE (object), NULL, error))
        g_clear_object (&object);
    }

  for (guint i = 0; i < values->len; i++)
    g_value_unset (&g_array_index (values, GValue, i));
  return object;
}

/**
 * kv_tier_registry_create_tier:
 * @self: a registry
 * @type_name: a registered tier type name
 * @primary: the primary tier's buffer
 * @detector: (nullable): the tier's backpressure detector, or %NULL for
 *   none
 * @properties: (nullable): an `a{sv}` dictionary of the tier's
 *   configurable properties; values are strings in configuration syntax
 *   (`"64GiB"`, `"true"`, an enum nick) or typed values (`b`, integers,
 *   `d`, `s`, `as`) checked against the property's range
 * @error: return location for a #GError
 *
 * Creates a tier of the type registered under @type_name, with its
 * `tier-type` set to @type_name. A floating @properties is consumed. Tiers
 * that implement [iface@Gio.Initable] are initialized.
 *
 * Returns: (transfer full): the new tier, or %NULL with @error set when the
 *   type is unknown, a property is unknown or its value is wrong
 *   (%KV_TIER_REGISTRY_ERROR_INVALID_PROPERTY), or initialization failed
 */
KvSecondaryTier *
kv_tier_registry_create_tier (KvTierRegistry          *self,
                              const char              *type_name,
                              KvHostBuffer            *primary,
                              KvBackpressureDetector  *detector,
                              GVariant                *properties,
                              GError                 **error)
{
  g_autoptr(GVariant) props = NULL;
  g_autoptr(GPtrArray) names = NULL;
  g_autoptr(GArray) values = NULL;
  g_autoptr(GMainContext) completion_context = NULL;
  GType type;

  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), NULL);
  g_return_val_if_fail (type_name != NULL, NULL);
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);
  g_return_val_if_fail (detector == NULL || KV_IS_BACKPRESSURE_DETECTOR (detector), NULL);
  g_return_val_if_fail (properties == NULL ||
                        g_variant_is_of_type (properties, G_VARIANT_TYPE_VARDICT), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (properties != NULL)
    props = g_variant_ref_sink (properties);

  type = kv_tier_registry_lookup_tier_type (self, type_name, error);
  if (type == G_TYPE_INVALID)
    return NULL;

  new_construct_values (primary, &names, &values);
  g_value_set_string (append_value (names, values, "tier-type", G_TYPE_STRING), type_name);
  completion_context = kv_tier_registry_dup_completion_context (self, type_name);
  if (completion_context != NULL)
    g_value_set_boxed (append_value (names, values, "completion-context", G_TYPE_MAIN_CONTEXT),
                       completion_context);
  if (detector != NULL)
    g_value_set_object (append_value (names, values, "backpressure-detector",
                                      KV_TYPE_BACKPRESSURE_DETECTOR),
                        detector);

  return KV_SECONDARY_TIER (create_object (type, "Tier", type_name, names,
                                           values, props, error));
}

/**
 * kv_tier_registry_create_device:
 * @self: a registry
 * @type_name: a registered device type name
 * @primary: the primary tier's buffer
 * @properties: (nullable): an `a{sv}` dictionary of the device's
 *   configurable properties, as for [method@Kv.TierRegistry.create_tier]
 * @error: return location for a #GError
 *
 * Creates and initializes a device of the type registered under
 * @type_name. A floating @properties is consumed.
 *
 * Returns: (transfer full): the new device, or %NULL with @error set when
 *   the type is unknown, a property is wrong, or initialization failed
 *   (for example when a chunk does not fit in a primary slot)
 */
KvDevice *
kv_tier_registry_create_device (KvTierRegistry  *self,
                                const char      *type_name,
                                KvHostBuffer    *primary,
                                GVariant        *properties,
                                GError         **error)
{
  g_autoptr(GVariant) props = NULL;
  g_autoptr(GPtrArray) names = NULL;
  g_autoptr(GArray) values = NULL;
  GType type;

  g_return_val_if_fail (KV_IS_TIER_REGISTRY (self), NULL);
  g_return_val_if_fail (type_name != NULL, NULL);
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);
  g_return_val_if_fail (properties == NULL ||
                        g_variant_is_of_type (properties, G_VARIANT_TYPE_VARDICT), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (properties != NULL)
    props = g_variant_ref_sink (properties);

  type = kv_tier_registry_lookup_device_type (self, type_name, error);
  if (type == G_TYPE_INVALID)
    return NULL;

  new_construct_values (primary, &names, &values);

  return KV_DEVICE (create_object (type, "Device", type_name, names, values,
                                   props, error));
}
