/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config.h"

#include <string.h>

#include "kv-config-build-private.h"
#include "kv-config-dictionary-private.h"
#include "kv-config-document-private.h"
#include "kv-config-key-file-private.h"
#include "kv-config-value-private.h"

/* KvConfig is the public face of a configuration; the work is done by
 * units named after their job: kv-config-document (sections, keys, checked
 * values), kv-config-schema (which keys a section takes, from the
 * objects' properties), kv-config-value (text and GVariant to GValue),
 * kv-config-key-file and kv-config-dictionary (the two forms, read and
 * written), kv-config-build (objects, built or checked). */

/**
 * kv_config_error_quark:
 *
 * The error domain of configuration errors, also available as
 * %KV_CONFIG_ERROR. Error codes are from [error@Kv.ConfigError].
 *
 * May be called from any thread.
 *
 * Returns: the error domain quark
 */
G_DEFINE_QUARK (kv-config-error-quark, kv_config_error)

/**
 * KvConfig:
 *
 * A kvtier configuration: the primary tier, the device and the ordered
 * secondary tiers, each named by type and configured through the GObject
 * properties of its class.
 *
 * The text form is a key file (see `doc/config.md`):
 *
 * ```
 * [primary]
 * size = 8GiB
 * slot-size = 2MiB
 * policy = lru
 *
 * [device]
 * type = host
 * n-blocks = 4096
 * block-bytes = 64KiB
 * n-layers = 32
 *
 * [tier fs]
 * type = fs
 * root = /var/cache/kvtier
 * backpressure = ema
 * ```
 *
 * Tiers are consulted in file order. Values are parsed by the type of the
 * property they set: sizes take `B`, `KiB`, `MiB`, `GiB`, `TiB`; numbers
 * are range-checked against the property; enums take their nick; booleans
 * `true`/`false` (or yes/no, on/off, 1/0); string lists are comma
 * separated. A `[tier NAME]` section may give the tier an EMA backpressure
 * detector with `backpressure = ema` and `backpressure-<property>` keys for
 * the detector's properties (`backpressure-high-water-s = 0.05`), plus
 * `backpressure-policy = throttled|drop` and `backpressure-ramp-factor`.
 *
 * The same configuration is a [struct@GLib.Variant] dictionary (`a{sv}`),
 * for Python and JavaScript callers: `primary` and `device` are `a{sv}`
 * dictionaries of the sections' keys, `tiers` is an array of dictionaries
 * (`aa{sv}`), each with `name` and `type` plus its keys. Values are either
 * strings in the text syntax or typed values (`b`, integers, `d`, `as`).
 * [method@Kv.Config.to_variant] and [method@Kv.Config.to_data] write either
 * form back.
 *
 * Loading checks everything it can without side effects: unknown sections
 * and keys, bad values, missing and unknown types and duplicates fail with a
 * [error@Kv.ConfigError] that names the file, the line, the section, the key
 * and the accepted choices. [method@Kv.Config.check] then refuses what
 * building would refuse without starting anything, and
 * [method@Kv.Config.create_manager] builds the objects. A configuration is
 * not thread-safe: use it from one thread at a time.
 */
struct _KvConfig
{
  GObject           parent_instance;

  KvConfigDocument *document;
};

G_DEFINE_FINAL_TYPE (KvConfig, kv_config, G_TYPE_OBJECT)

static void
kv_config_finalize (GObject *object)
{
  KvConfig *self = KV_CONFIG (object);

  g_clear_pointer (&self->document, kv_config_document_free);

  G_OBJECT_CLASS (kv_config_parent_class)->finalize (object);
}

static void
kv_config_class_init (KvConfigClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_config_finalize;
}

static void
kv_config_init (KvConfig *self)
{
}

static KvConfig *
config_new (KvTierRegistry *registry,
            const char     *origin)
{
  KvConfig *self = g_object_new (KV_TYPE_CONFIG, NULL);

  self->document = kv_config_document_new (registry != NULL ? registry
                                                            : kv_tier_registry_get_default (),
                                           origin);
  return self;
}

/**
 * kv_config_new:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 *
 * Creates an empty configuration (a default primary tier, no device, no
 * tiers), to be filled with [method@Kv.Config.set_value].
 *
 * Returns: (transfer full): a new configuration
 */
KvConfig *
kv_config_new (KvTierRegistry *registry)
{
  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);

  return config_new (registry, NULL);
}

/**
 * kv_config_new_from_data:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 * @data: configuration text (key-file syntax)
 * @length: the length of @data, or -1 when it is NUL-terminated
 * @origin: (nullable): the name errors give the text (a file name), or
 *   %NULL for `<data>`
 * @error: return location for a #GError
 *
 * Parses and checks a configuration text. Nothing is created yet.
 *
 * Returns: (transfer full): the configuration, or %NULL with @error set
 *   (%KV_CONFIG_ERROR)
 */
KvConfig *
kv_config_new_from_data (KvTierRegistry  *registry,
                         const char      *data,
                         gssize           length,
                         const char      *origin,
                         GError         **error)
{
  g_autoptr(KvConfig) self = NULL;

  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);
  g_return_val_if_fail (data != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = config_new (registry, origin != NULL ? origin : "<data>");
  if (!kv_config_key_file_load (self->document, data,
                                length < 0 ? strlen (data) : (gsize) length, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * kv_config_new_from_file:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 * @path: (type filename): a configuration file
 * @error: return location for a #GError
 *
 * Reads, parses and checks a configuration file. Nothing is created yet.
 *
 * Returns: (transfer full): the configuration, or %NULL with @error set (a
 *   [error@GLib.FileError] when the file cannot be read, else
 *   %KV_CONFIG_ERROR)
 */
KvConfig *
kv_config_new_from_file (KvTierRegistry  *registry,
                         const char      *path,
                         GError         **error)
{
  g_autofree char *data = NULL;
  g_autoptr(KvConfig) self = NULL;
  gsize length;

  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!g_file_get_contents (path, &data, &length, error))
    return NULL;
  self = config_new (registry, path);
  /* a tier's `module` is found next to the file */
  {
    g_autofree char *dir = g_path_get_dirname (path);

    self->document->base_dir = g_canonicalize_filename (dir, NULL);
  }
  if (!kv_config_key_file_load (self->document, data, length, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * kv_config_new_from_variant:
 * @registry: (nullable): the registry that resolves type names, or %NULL
 *   for [func@Kv.TierRegistry.get_default]
 * @variant: an `a{sv}` dictionary: `primary` (`a{sv}`), `device`
 *   (`a{sv}` with `type`) and `tiers` (`aa{sv}`, each with `name` and
 *   `type`), all optional
 * @error: return location for a #GError
 *
 * Checks a configuration given as a dictionary, the form Python and
 * JavaScript pass. Values are strings in the text syntax or typed values.
 * A floating @variant is consumed.
 *
 * Returns: (transfer full): the configuration, or %NULL with @error set
 *   (%KV_CONFIG_ERROR)
 */
KvConfig *
kv_config_new_from_variant (KvTierRegistry  *registry,
                            GVariant        *variant,
                            GError         **error)
{
  g_autoptr(KvConfig) self = NULL;
  g_autoptr(GVariant) owned = NULL;

  g_return_val_if_fail (registry == NULL || KV_IS_TIER_REGISTRY (registry), NULL);
  g_return_val_if_fail (variant != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  owned = g_variant_ref_sink (variant);
  self = config_new (registry, KV_CONFIG_DICTIONARY_ORIGIN);
  if (!kv_config_dictionary_load (self->document, variant, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * kv_config_get_registry:
 * @self: a configuration
 *
 * Gets the registry that resolves the configuration's type names.
 *
 * Returns: (transfer none): the registry
 */
KvTierRegistry *
kv_config_get_registry (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  return self->document->registry;
}

/**
 * kv_config_set_value:
 * @self: a configuration
 * @section: `primary`, `device`, `backpressure` or `tier NAME`
 * @key: a key of the section (`type`, or a property name)
 * @value: the value, in the text syntax
 * @error: return location for a #GError
 *
 * Sets one key, replacing its value, and checks it as loading would; a
 * refused value leaves the configuration as it was.
 * Setting `type` of a `device` or `tier NAME` section that does not exist
 * yet adds it (a new tier goes last); the type of an existing section
 * cannot change. The `backpressure` section has no type: setting any of
 * its keys adds it, and every tier is checked again with it.
 *
 * Returns: %TRUE on success, %FALSE with @error set (%KV_CONFIG_ERROR)
 */
gboolean
kv_config_set_value (KvConfig    *self,
                     const char  *section,
                     const char  *key,
                     const char  *value,
                     GError     **error)
{
  g_autofree char *name = NULL;
  KvConfigSectionKind kind;
  KvConfigSection *target;
  KvConfigLocation loc = { NULL, 0 };
  KvConfigEntry *old;
  GValue saved = G_VALUE_INIT;
  guint saved_line = 0;
  gboolean valid;

  g_return_val_if_fail (KV_IS_CONFIG (self), FALSE);
  g_return_val_if_fail (section != NULL, FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  g_return_val_if_fail (value != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  loc.origin = kv_config_document_get_origin (self->document);
  if (!kv_config_section_parse_title (section, &kind, &name))
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_SECTION, &loc, NULL, NULL,
                           "unknown section [%s] (accepted: [primary], [device], [backpressure],"
                           " [tier NAME])", section);
      return FALSE;
    }

  g_clear_pointer (&name, g_free);
  target = kv_config_document_find_section (self->document, section, &kind, &name);
  if (target == NULL && kind == KV_CONFIG_SECTION_BACKPRESSURE)
    {
      KvConfigRawKey raw = { key, value, NULL, 0 };

      return kv_config_document_add_section (self->document, kind, NULL, 0, &raw, 1, error);
    }
  if (target == NULL)
    {
      KvConfigRawKey raw = { key, value, NULL, 0 };

      if (!g_str_equal (key, "type") &&
          !(kind == KV_CONFIG_SECTION_TIER && g_str_equal (key, "module")))
        {
          KvConfigSection probe = { .kind = kind, .name = name };

          kv_config_set_error (error, KV_CONFIG_ERROR_MISSING_KEY, &loc, &probe, key,
                               "the section does not exist yet: set its 'type' (or, for a"
                               " tier, its 'module') first");
          return FALSE;
        }
      return kv_config_document_add_section (self->document, kind, name, 0, &raw, 1, error);
    }

  if (kind == KV_CONFIG_SECTION_TIER && g_str_equal (key, "module"))
    {
      g_autofree char *text = g_strstrip (g_strdup (value));
      g_autofree char *module = g_canonicalize_filename (text, NULL);

      if (g_strcmp0 (target->module, module) == 0)
        return TRUE;
      if (target->module != NULL)
        kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, target, key,
                             "the module of an existing tier cannot change (it is %s)",
                             target->module);
      else
        kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, target, key,
                             "an existing tier cannot get a module");
      return FALSE;
    }

  if (g_str_equal (key, "type"))
    {
      g_autofree char *type_name = g_strstrip (g_strdup (value));

      if (kind == KV_CONFIG_SECTION_PRIMARY)
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, &loc, target, key,
                               "the primary tier has no type");
          return FALSE;
        }
      return kv_config_document_set_type (self->document, target, type_name, &loc, error);
    }

  old = kv_config_section_find_entry (target, key);
  if (old != NULL)
    {
      g_value_init (&saved, G_VALUE_TYPE (&old->value));
      g_value_copy (&old->value, &saved);
      saved_line = old->line;
    }
  if (!kv_config_section_set (target, key, value, NULL, &loc, error))
    return FALSE;
  if (kind == KV_CONFIG_SECTION_BACKPRESSURE)
    valid = kv_config_section_validate (target, NULL, loc.origin, error) &&
            kv_config_document_validate_tiers (self->document, error);
  else
    valid = kv_config_section_validate (target, self->document->backpressure, loc.origin, error);
  if (!valid)
    {
      /* refused: the configuration is as it was */
      KvConfigEntry *entry = kv_config_section_find_entry (target, key);

      if (old != NULL)
        {
          g_value_unset (&entry->value);
          entry->value = saved;
          entry->line = saved_line;
          return FALSE;
        }
      g_ptr_array_remove (target->entries, entry);
    }
  if (G_IS_VALUE (&saved))
    g_value_unset (&saved);
  return valid;
}

/**
 * kv_config_get_value:
 * @self: a configuration
 * @section: `primary`, `device`, `backpressure` or `tier NAME`
 * @key: a key of the section
 *
 * Gets a key that the configuration sets, in canonical text form (sizes
 * with units, enums by nick). Keys left to their default are not set.
 *
 * Returns: (transfer full) (nullable): the value, or %NULL when the section
 *   or the key is not set
 */
char *
kv_config_get_value (KvConfig   *self,
                     const char *section,
                     const char *key)
{
  g_autofree char *name = NULL;
  KvConfigSectionKind kind;
  KvConfigSection *target;
  KvConfigEntry *entry;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (section != NULL, NULL);
  g_return_val_if_fail (key != NULL, NULL);

  target = kv_config_document_find_section (self->document, section, &kind, &name);
  if (target == NULL)
    return NULL;
  if (g_str_equal (key, "type"))
    return g_strdup (target->type_name);
  if (g_str_equal (key, "module"))
    return g_strdup (target->module);
  entry = kv_config_section_find_entry (target, key);
  return entry != NULL ? kv_config_value_to_string (entry->pspec, &entry->value) : NULL;
}

/**
 * kv_config_get_tier_names:
 * @self: a configuration
 *
 * Lists the tier names in lookup order (the order of the file).
 *
 * Returns: (transfer full) (array zero-terminated=1): the names
 */
char **
kv_config_get_tier_names (KvConfig *self)
{
  GPtrArray *tiers;
  char **names;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  tiers = self->document->tiers;
  names = g_new0 (char *, tiers->len + 1);
  for (guint i = 0; i < tiers->len; i++)
    names[i] = g_strdup (((KvConfigSection *) g_ptr_array_index (tiers, i))->name);
  return names;
}

/**
 * kv_config_get_tier_type:
 * @self: a configuration
 * @name: a tier name
 *
 * Gets the type of the tier called @name.
 *
 * Returns: (nullable): the type name, or %NULL when there is no such tier
 */
const char *
kv_config_get_tier_type (KvConfig   *self,
                         const char *name)
{
  KvConfigSection *section;

  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);

  section = kv_config_document_find_tier (self->document, name);
  return section != NULL ? section->type_name : NULL;
}

/**
 * kv_config_get_device_type:
 * @self: a configuration
 *
 * Gets the type of the `[device]` section.
 *
 * Returns: (nullable): the type name, or %NULL when the configuration has
 *   no device
 */
const char *
kv_config_get_device_type (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  return self->document->device != NULL ? self->document->device->type_name : NULL;
}

/**
 * kv_config_get_primary_size:
 * @self: a configuration
 *
 * Gets the `size` of the primary tier (its default when not set).
 *
 * Returns: the size in bytes
 */
guint64
kv_config_get_primary_size (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), 0);

  return kv_config_document_get_primary_size (self->document);
}

/**
 * kv_config_get_slot_size:
 * @self: a configuration
 *
 * Gets the `slot-size` of the primary tier (its default when not set).
 *
 * Returns: the slot size in bytes
 */
guint64
kv_config_get_slot_size (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), 0);

  return kv_config_document_get_slot_size (self->document);
}

/**
 * kv_config_to_variant:
 * @self: a configuration
 *
 * Writes the configuration as the dictionary that
 * [ctor@Kv.Config.new_from_variant] reads: typed values (sizes as
 * integers, enums as nicks) for every key that is set, `primary` always
 * present.
 *
 * Returns: (transfer floating): an `a{sv}` dictionary
 */
GVariant *
kv_config_to_variant (KvConfig *self)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  return kv_config_dictionary_write (self->document);
}

/**
 * kv_config_to_data:
 * @self: a configuration
 * @length: (out) (optional): return location for the length of the text
 *
 * Writes the configuration as key-file text that
 * [ctor@Kv.Config.new_from_data] reads: canonical values (sizes with
 * units, enums by nick, lists comma separated) for every key that is set.
 *
 * Returns: (transfer full): the text
 */
char *
kv_config_to_data (KvConfig *self,
                   gsize    *length)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);

  return kv_config_key_file_write (self->document, length);
}

/**
 * kv_config_check:
 * @self: a configuration
 * @error: return location for a #GError
 *
 * Checks everything that building the configuration would check, without
 * building: the primary tier's slot count, then each tier and the device,
 * constructed with their properties and backpressure detectors but not
 * started. No memory is mapped and no file, directory, socket or device is
 * opened. A tier or device class that implements [iface@Kv.Configurable]
 * also runs the checks its start would run (the fs tier's root and layout,
 * the device's chunk size); one that does not can still fail to start.
 * What only starting can find out (a directory that cannot be created,
 * memory that cannot be had) is not checked.
 *
 * Returns: %TRUE when the configuration builds as far as can be told,
 *   %FALSE with @error set to the error that
 *   [method@Kv.Config.create_manager] or [method@Kv.Config.create_device]
 *   would return
 */
gboolean
kv_config_check (KvConfig  *self,
                 GError   **error)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return kv_config_build_check (self->document, error);
}

/**
 * kv_config_create_primary:
 * @self: a configuration
 * @error: return location for a #GError
 *
 * Creates the primary tier of `[primary]`: a [class@Kv.HostBuffer] of
 * `size / slot-size` slots (private memory, a memfd with `shared = true`,
 * or the shared `file`) and the `policy` (`lru` or `arc`).
 *
 * Returns: (transfer full): the primary tier, or %NULL with @error set
 *   when the sizes do not make a slot or the memory cannot be had
 */
KvPrimaryTier *
kv_config_create_primary (KvConfig  *self,
                          GError   **error)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return kv_config_build_primary (self->document, error);
}

/**
 * kv_config_create_manager:
 * @self: a configuration
 * @error: return location for a #GError
 *
 * Builds the objects: the primary tier ([method@Kv.Config.create_primary]),
 * then each tier in order, created with its properties and backpressure
 * detector and started, then a [class@Kv.TieringManager] with the tiers
 * added in order. When a tier fails, the tiers created so far are shut
 * down in reverse order and nothing is returned. The device is separate:
 * [method@Kv.Config.create_device]. Call on the thread that will own the
 * manager.
 *
 * Returns: (transfer full): the manager, or %NULL with @error set
 *   (%KV_CONFIG_ERROR_FAILED naming the section, for a tier that failed to
 *   start)
 */
KvTieringManager *
kv_config_create_manager (KvConfig  *self,
                          GError   **error)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return kv_config_build_manager (self->document, error);
}

/**
 * kv_config_create_device:
 * @self: a configuration
 * @primary: the primary tier's buffer (from the manager's primary tier)
 * @error: return location for a #GError
 *
 * Creates and initializes the device of `[device]`.
 *
 * Returns: (transfer full): the device, or %NULL with @error set when the
 *   configuration has no device section (%KV_CONFIG_ERROR_MISSING_KEY) or
 *   the device cannot be created (%KV_CONFIG_ERROR_FAILED)
 */
KvDevice *
kv_config_create_device (KvConfig      *self,
                         KvHostBuffer  *primary,
                         GError       **error)
{
  g_return_val_if_fail (KV_IS_CONFIG (self), NULL);
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return kv_config_build_device (self->document, primary, error);
}
