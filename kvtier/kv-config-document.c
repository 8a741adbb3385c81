/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config-document-private.h"

#include <string.h>

#include "kv-config-build-private.h"
#include "kv-config-schema-private.h"
#include "kv-config-value-private.h"

/* ------------------------------------------------------------------------ */
/* Sections and entries */

static void
entry_free (KvConfigEntry *entry)
{
  g_free (entry->key);
  g_param_spec_unref (entry->pspec);
  g_value_unset (&entry->value);
  g_free (entry);
}

static KvConfigSection *
section_new (KvConfigSectionKind  kind,
             const char          *name,
             guint                line)
{
  KvConfigSection *section = g_new0 (KvConfigSection, 1);

  section->kind = kind;
  section->name = g_strdup (name);
  section->line = line;
  section->entries = g_ptr_array_new_with_free_func ((GDestroyNotify) entry_free);
  return section;
}

static void
section_free (KvConfigSection *section)
{
  g_free (section->name);
  g_free (section->type_name);
  g_free (section->module);
  g_ptr_array_unref (section->entries);
  g_free (section);
}

char *
kv_config_section_title (const KvConfigSection *section)
{
  switch (section->kind)
    {
    case KV_CONFIG_SECTION_PRIMARY: return g_strdup ("[primary]");
    case KV_CONFIG_SECTION_DEVICE: return g_strdup ("[device]");
    case KV_CONFIG_SECTION_TIER: return g_strdup_printf ("[tier %s]", section->name);
    case KV_CONFIG_SECTION_BACKPRESSURE: return g_strdup ("[backpressure]");
    default: g_assert_not_reached ();
    }
}

KvConfigEntry *
kv_config_section_find_entry (const KvConfigSection *section,
                              const char            *key)
{
  for (guint i = 0; i < section->entries->len; i++)
    {
      KvConfigEntry *entry = g_ptr_array_index (section->entries, i);

      if (g_str_equal (entry->key, key))
        return entry;
    }
  return NULL;
}

gint
kv_config_section_get_enum (const KvConfigSection *section,
                            const char            *key,
                            gint                   fallback)
{
  KvConfigEntry *entry = kv_config_section_find_entry (section, key);

  return entry != NULL ? g_value_get_enum (&entry->value) : fallback;
}

/* ------------------------------------------------------------------------ */
/* Errors with locations */

void
kv_config_set_error (GError                 **error,
                     KvConfigError            code,
                     const KvConfigLocation  *loc,
                     const KvConfigSection   *section,
                     const char              *key,
                     const char              *format,
                     ...)
{
  g_autofree char *message = NULL;
  g_autofree char *title = section != NULL ? kv_config_section_title (section) : NULL;
  GString *s = g_string_new (loc->origin);
  va_list args;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);

  if (loc->line > 0)
    g_string_append_printf (s, ":%u", loc->line);
  g_string_append (s, ": ");
  if (title != NULL)
    g_string_append (s, title);
  if (key != NULL)
    g_string_append_printf (s, "%skey '%s'", title != NULL ? " " : "", key);
  if (title != NULL || key != NULL)
    g_string_append (s, ": ");
  g_string_append (s, message);

  g_set_error_literal (error, KV_CONFIG_ERROR, code, s->str);
  g_string_free (s, TRUE);
}

/* ------------------------------------------------------------------------ */
/* Keys */

/* A string list from a dictionary is taken as the text form takes it
 * (items stripped, empty items dropped), and an item may not hold a
 * separator: the text form could not write it back. */
static gboolean
normalize_list (GValue  *value,
                GError **error)
{
  const char * const *items = g_value_get_boxed (value);
  GPtrArray *kept = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; items != NULL && items[i] != NULL; i++)
    {
      char *item;

      if (strpbrk (items[i], ",;") != NULL)
        {
          g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                       "'%s' cannot be an item of a string list (',' and ';' separate items)",
                       items[i]);
          g_ptr_array_free (kept, TRUE);
          return FALSE;
        }
      item = g_strstrip (g_strdup (items[i]));
      if (*item != '\0')
        g_ptr_array_add (kept, item);
      else
        g_free (item);
    }
  g_ptr_array_add (kept, NULL);
  g_value_take_boxed (value, g_ptr_array_free (kept, FALSE));
  return TRUE;
}

/* Sets one key (text or typed variant) of a section whose type is known.
 * An existing value of the key is replaced. */
gboolean
kv_config_section_set (KvConfigSection         *section,
                       const char              *key,
                       const char              *text,
                       GVariant                *variant,
                       const KvConfigLocation  *loc,
                       GError                 **error)
{
  g_autoptr(GError) local_error = NULL;
  GValue value = G_VALUE_INIT;
  GParamSpec *pspec;
  KvConfigTarget target;
  GType owner;
  KvConfigEntry *entry;
  gboolean ok;

  pspec = kv_config_schema_resolve_key (section, key, &target, &owner);
  if (pspec == NULL)
    {
      g_autofree char *accepted = kv_config_schema_accepted_keys (section);

      if (section->kind == KV_CONFIG_SECTION_PRIMARY ||
          section->kind == KV_CONFIG_SECTION_BACKPRESSURE)
        kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, loc, section, key,
                             "unknown key (accepted: %s)", accepted);
      else
        kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, loc, section, key,
                             "unknown key for %s type '%s' (accepted: %s)",
                             section->kind == KV_CONFIG_SECTION_DEVICE ? "device" : "tier",
                             section->type_name, accepted);
      return FALSE;
    }

  ok = variant != NULL ? kv_config_value_from_variant (pspec, variant, &value, &local_error)
                       : kv_config_value_from_string (pspec, text, &value, &local_error);
  if (!ok)
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, key,
                           "%s", local_error->message);
      return FALSE;
    }

  if (G_VALUE_HOLDS (&value, G_TYPE_STRV) && !normalize_list (&value, &local_error))
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, key,
                           "%s", local_error->message);
      g_value_unset (&value);
      return FALSE;
    }

  /* KvHostBuffer: "a positive multiple of 4096, so every slot is page
   * aligned"; refused here with the line rather than at build time. */
  if (section->kind == KV_CONFIG_SECTION_PRIMARY && g_str_equal (key, "slot-size") &&
      g_value_get_uint64 (&value) % 4096 != 0)
    {
      g_autofree char *printed = kv_config_value_to_string (pspec, &value);

      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, key,
                           "%s is not a multiple of 4096 bytes", printed);
      g_value_unset (&value);
      return FALSE;
    }

  entry = kv_config_section_find_entry (section, key);
  if (entry == NULL)
    {
      entry = g_new0 (KvConfigEntry, 1);
      entry->key = g_strdup (key);
      g_ptr_array_add (section->entries, entry);
    }
  else
    {
      g_param_spec_unref (entry->pspec);
      g_value_unset (&entry->value);
    }
  entry->target = target;
  entry->owner = owner;
  entry->pspec = g_param_spec_ref (pspec);
  entry->value = value;
  entry->line = loc->line;
  return TRUE;
}

static const KvConfigEntry *
first_detector_key (const KvConfigSection *section)
{
  for (guint i = 0; i < section->entries->len; i++)
    {
      const KvConfigEntry *entry = g_ptr_array_index (section->entries, i);

      if (entry->target == KV_CONFIG_TARGET_DETECTOR ||
          entry->target == KV_CONFIG_TARGET_BP_POLICY ||
          entry->target == KV_CONFIG_TARGET_BP_RAMP)
        return entry;
    }
  return NULL;
}

/* A tier's backpressure keys over those of the [backpressure] section
 * (@defaults, nullable), key by key, the tier's winning (vLLM merges the
 * top-level `backpressure` dictionary into each tier's the same way). The
 * result borrows the entries of both; free it with
 * kv_config_section_free_merged(). A tier that gives backpressure keys of
 * its own does not inherit `backpressure = none`: its keys ask for a
 * detector. */
KvConfigSection *
kv_config_section_merge_backpressure (const KvConfigSection *section,
                                      const KvConfigSection *defaults)
{
  KvConfigSection *merged = g_new0 (KvConfigSection, 1);
  gboolean own_keys = first_detector_key (section) != NULL;

  *merged = *section;
  merged->entries = g_ptr_array_new ();
  for (guint i = 0; i < section->entries->len; i++)
    g_ptr_array_add (merged->entries, g_ptr_array_index (section->entries, i));
  if (defaults == NULL)
    return merged;
  for (guint i = 0; i < defaults->entries->len; i++)
    {
      KvConfigEntry *entry = g_ptr_array_index (defaults->entries, i);

      if (kv_config_section_find_entry (section, entry->key) != NULL)
        continue;
      if (own_keys && entry->target == KV_CONFIG_TARGET_BACKPRESSURE &&
          g_value_get_enum (&entry->value) == KV_CONFIG_BACKPRESSURE_NONE)
        continue;
      g_ptr_array_add (merged->entries, entry);
    }
  return merged;
}

void
kv_config_section_free_merged (KvConfigSection *merged)
{
  g_ptr_array_unref (merged->entries);
  g_free (merged);
}

/* Checks what needs the whole section: backpressure keys and the detector
 * they build, for a tier with the [backpressure] section's keys it
 * inherits (@defaults, nullable). */
gboolean
kv_config_section_validate (const KvConfigSection  *section,
                            const KvConfigSection  *defaults,
                            const char             *origin,
                            GError                **error)
{
  g_autoptr(KvBackpressureDetector) detector = NULL;
  g_autoptr(GError) local_error = NULL;
  const KvConfigEntry *first;
  KvConfigSection *merged;

  if (section->kind == KV_CONFIG_SECTION_BACKPRESSURE)
    {
      /* the same rule as in a tier; the detector is checked per tier */
      first = first_detector_key (section);
      if (first != NULL && kv_config_section_find_entry (section, "backpressure") != NULL &&
          kv_config_section_get_enum (section, "backpressure",
                                      KV_CONFIG_BACKPRESSURE_NONE) == KV_CONFIG_BACKPRESSURE_NONE)
        {
          KvConfigLocation loc = { origin, first->line };

          kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section, first->key,
                               "backpressure keys need 'backpressure = ema' (the section says"
                               " 'backpressure = none')");
          return FALSE;
        }
      return TRUE;
    }
  if (section->kind != KV_CONFIG_SECTION_TIER)
    return TRUE;

  first = first_detector_key (section);
  if (first != NULL && kv_config_section_find_entry (section, "backpressure") != NULL &&
      kv_config_section_get_enum (section, "backpressure",
                                  KV_CONFIG_BACKPRESSURE_NONE) == KV_CONFIG_BACKPRESSURE_NONE)
    {
      KvConfigLocation loc = { origin, first->line };

      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section, first->key,
                           "backpressure keys need 'backpressure = ema' (the section says"
                           " 'backpressure = none')");
      return FALSE;
    }

  merged = kv_config_section_merge_backpressure (section, defaults);
  detector = kv_config_build_detector (merged, &local_error);
  kv_config_section_free_merged (merged);
  if (detector == NULL && local_error != NULL)
    {
      KvConfigEntry *bp = kv_config_section_find_entry (section, "backpressure");
      KvConfigLocation loc = { origin, bp != NULL ? bp->line : section->line };

      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section,
                           bp != NULL ? "backpressure" : NULL, "%s%s", local_error->message,
                           defaults != NULL ? " (with the keys of [backpressure])" : "");
      return FALSE;
    }
  return TRUE;
}

/* Every tier with the [backpressure] section's keys, after that section
 * changed. */
gboolean
kv_config_document_validate_tiers (const KvConfigDocument  *self,
                                   GError                 **error)
{
  for (guint i = 0; i < self->tiers->len; i++)
    if (!kv_config_section_validate (g_ptr_array_index (self->tiers, i), self->backpressure,
                                     kv_config_document_get_origin (self), error))
      return FALSE;
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* Section titles */

gboolean
kv_config_is_valid_name (const char *name)
{
  if (name == NULL || *name == '\0')
    return FALSE;
  for (const char *p = name; *p; p++)
    if (!g_ascii_isalnum (*p) && *p != '-' && *p != '_' && *p != '.')
      return FALSE;
  return TRUE;
}

/* Splits a section title into its kind and tier name. */
gboolean
kv_config_section_parse_title (const char           *title,
                               KvConfigSectionKind  *out_kind,
                               char                **out_name)
{
  *out_name = NULL;
  if (g_str_equal (title, "primary"))
    {
      *out_kind = KV_CONFIG_SECTION_PRIMARY;
      return TRUE;
    }
  if (g_str_equal (title, "device"))
    {
      *out_kind = KV_CONFIG_SECTION_DEVICE;
      return TRUE;
    }
  if (g_str_equal (title, "backpressure"))
    {
      *out_kind = KV_CONFIG_SECTION_BACKPRESSURE;
      return TRUE;
    }
  if (g_str_has_prefix (title, "tier") && g_ascii_isspace (title[4]))
    {
      g_autofree char *name = g_strstrip (g_strdup (title + 4));

      if (kv_config_is_valid_name (name))
        {
          *out_kind = KV_CONFIG_SECTION_TIER;
          *out_name = g_steal_pointer (&name);
          return TRUE;
        }
    }
  return FALSE;
}

/* ------------------------------------------------------------------------ */
/* The document */

KvConfigDocument *
kv_config_document_new (KvTierRegistry *registry,
                        const char     *origin)
{
  KvConfigDocument *self = g_new0 (KvConfigDocument, 1);

  self->registry = g_object_ref (registry);
  self->origin = g_strdup (origin);
  self->primary = section_new (KV_CONFIG_SECTION_PRIMARY, NULL, 0);
  self->tiers = g_ptr_array_new_with_free_func ((GDestroyNotify) section_free);
  return self;
}

void
kv_config_document_free (KvConfigDocument *self)
{
  g_clear_object (&self->registry);
  g_free (self->origin);
  g_free (self->base_dir);
  section_free (self->primary);
  g_clear_pointer (&self->device, section_free);
  g_clear_pointer (&self->backpressure, section_free);
  g_ptr_array_unref (self->tiers);
  g_free (self);
}

const char *
kv_config_document_get_origin (const KvConfigDocument *self)
{
  return self->origin != NULL ? self->origin : KV_CONFIG_DEFAULT_ORIGIN;
}

KvConfigSection *
kv_config_document_find_tier (const KvConfigDocument *self,
                              const char             *name)
{
  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvConfigSection *section = g_ptr_array_index (self->tiers, i);

      if (g_str_equal (section->name, name))
        return section;
    }
  return NULL;
}

KvConfigSection *
kv_config_document_find_section (const KvConfigDocument  *self,
                                 const char              *title,
                                 KvConfigSectionKind     *out_kind,
                                 char                   **out_name)
{
  if (!kv_config_section_parse_title (title, out_kind, out_name))
    return NULL;
  switch (*out_kind)
    {
    case KV_CONFIG_SECTION_PRIMARY: return self->primary;
    case KV_CONFIG_SECTION_DEVICE: return self->device;
    case KV_CONFIG_SECTION_TIER: return kv_config_document_find_tier (self, *out_name);
    case KV_CONFIG_SECTION_BACKPRESSURE: return self->backpressure;
    default: g_assert_not_reached ();
    }
}

static guint64
primary_uint64 (const KvConfigDocument *self,
                const char             *key)
{
  KvConfigEntry *entry = kv_config_section_find_entry (self->primary, key);

  if (entry != NULL)
    return g_value_get_uint64 (&entry->value);
  return G_PARAM_SPEC_UINT64 (kv_config_schema_primary_pspec (key))->default_value;
}

guint64
kv_config_document_get_primary_size (const KvConfigDocument *self)
{
  return primary_uint64 (self, "size");
}

guint64
kv_config_document_get_slot_size (const KvConfigDocument *self)
{
  return primary_uint64 (self, "slot-size");
}

static char *
registered_types (const KvConfigDocument *self,
                  gboolean                devices)
{
  g_auto(GStrv) names = devices ? kv_tier_registry_list_device_types (self->registry)
                                : kv_tier_registry_list_tier_types (self->registry);
  g_autofree char *joined = g_strjoinv (", ", names);

  return g_strdup_printf ("%s types: %s", devices ? "device" : "tier",
                          *joined != '\0' ? joined : "none registered");
}

/* Gives @section its type; @type_name NULL means the key is missing. */
gboolean
kv_config_document_set_type (KvConfigDocument        *self,
                             KvConfigSection         *section,
                             const char              *type_name,
                             const KvConfigLocation  *loc,
                             GError                 **error)
{
  gboolean device = section->kind == KV_CONFIG_SECTION_DEVICE;
  g_autoptr(GError) local_error = NULL;
  GType type;

  if (type_name == NULL)
    {
      g_autofree char *choices = registered_types (self, device);

      kv_config_set_error (error, KV_CONFIG_ERROR_MISSING_KEY, loc, section, NULL,
                           "missing key 'type' (%s)", choices);
      return FALSE;
    }

  type = device ? kv_tier_registry_lookup_device_type (self->registry, type_name, &local_error)
                : kv_tier_registry_lookup_tier_type (self->registry, type_name, &local_error);
  if (type == G_TYPE_INVALID)
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_TYPE, loc, section, "type",
                           "%s", local_error->message);
      return FALSE;
    }

  if (section->type_name != NULL && !g_str_equal (section->type_name, type_name))
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, "type",
                           "the section already has type '%s'", section->type_name);
      return FALSE;
    }

  g_free (section->type_name);
  section->type_name = g_strdup (type_name);
  section->type = type;
  section->type_line = loc->line;
  return TRUE;
}

/* The text of a string key: a key-file value or a string variant. */
static char *
raw_key_string (KvConfigSection        *section,
                const KvConfigRawKey   *raw,
                const KvConfigLocation *loc,
                GError                **error)
{
  if (raw->variant != NULL && !g_variant_is_of_type (raw->variant, G_VARIANT_TYPE_STRING))
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, loc, section, raw->key,
                           "the %s must be a string, not '%s'", raw->key,
                           g_variant_get_type_string (raw->variant));
      return NULL;
    }
  return g_strstrip (g_strdup (raw->variant != NULL ? g_variant_get_string (raw->variant, NULL)
                                                    : raw->text));
}

/* Loads the tier module of @module_key into the registry and returns the
 * names of the tier types it defines; `module` paths are relative to the
 * configuration file's directory. */
static char **
load_section_module (KvConfigDocument     *self,
                     KvConfigSection      *section,
                     const KvConfigRawKey *module_key,
                     GError              **error)
{
  KvConfigLocation loc = { kv_config_document_get_origin (self),
                           module_key->line != 0 ? module_key->line : section->line };
  g_autofree char *text = raw_key_string (section, module_key, &loc, error);
  g_autofree char *path = NULL;
  g_autoptr(GError) local_error = NULL;
  char **names;

  if (text == NULL)
    return NULL;
  if (*text == '\0')
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section, "module",
                           "empty file name (a Python or JavaScript file that defines"
                           " a tier type)");
      return NULL;
    }
  /* kept absolute, so that the configuration written back loads from
   * anywhere */
  path = g_canonicalize_filename (text, self->base_dir);
  names = kv_tier_registry_load_tier_module (self->registry, path, &local_error);
  if (names == NULL)
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section, "module",
                           "%s", local_error->message);
      return NULL;
    }
  section->module = g_steal_pointer (&path);
  return names;
}

/* Creates the device or tier section @name with the type among @keys. */
static KvConfigSection *
new_typed_section (KvConfigDocument     *self,
                   KvConfigSectionKind   kind,
                   const char           *name,
                   guint                 line,
                   const KvConfigRawKey *type_key,
                   const KvConfigRawKey *module_key,
                   GError              **error)
{
  const char *origin = kv_config_document_get_origin (self);
  KvConfigSection *section = section_new (kind, name, line);
  KvConfigLocation loc = { origin, line };
  g_autofree char *type_text = NULL;
  g_auto(GStrv) module_types = NULL;

  if (module_key != NULL)
    {
      module_types = load_section_module (self, section, module_key, error);
      if (module_types == NULL)
        {
          section_free (section);
          return NULL;
        }
    }

  if (type_key != NULL)
    {
      loc.line = type_key->line != 0 ? type_key->line : line;
      if (type_key->variant != NULL &&
          !g_variant_is_of_type (type_key->variant, G_VARIANT_TYPE_STRING))
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section, "type",
                               "the type must be a string, not '%s'",
                               g_variant_get_type_string (type_key->variant));
          section_free (section);
          return NULL;
        }
      type_text = g_strstrip (g_strdup (type_key->variant != NULL
                                        ? g_variant_get_string (type_key->variant, NULL)
                                        : type_key->text));
    }
  if (module_types != NULL)
    {
      g_autofree char *defined = g_strjoinv (", ", module_types);

      /* the module's own type, unless the section names one of several */
      if (type_text == NULL && g_strv_length (module_types) == 1)
        type_text = g_strdup (module_types[0]);
      else if (type_text == NULL)
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_MISSING_KEY, &loc, section, NULL,
                               "missing key 'type': module %s defines several tier types"
                               " (%s)", section->module, defined);
          section_free (section);
          return NULL;
        }
      else if (!g_strv_contains ((const char * const *) module_types, type_text))
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, section, "type",
                               "'%s' is not a tier type of module %s (it defines: %s)",
                               type_text, section->module, defined);
          section_free (section);
          return NULL;
        }
    }
  if (!kv_config_document_set_type (self, section, type_text, &loc, error))
    {
      section_free (section);
      return NULL;
    }
  return section;
}

/* Adds a section from its raw keys, checking everything. */
gboolean
kv_config_document_add_section (KvConfigDocument     *self,
                                KvConfigSectionKind   kind,
                                const char           *name,
                                guint                 line,
                                KvConfigRawKey       *keys,
                                guint                 n_keys,
                                GError              **error)
{
  const char *origin = kv_config_document_get_origin (self);
  const KvConfigRawKey *type_key = NULL;
  const KvConfigRawKey *module_key = NULL;
  KvConfigLocation loc = { origin, line };
  KvConfigSection *section;

  if (kind == KV_CONFIG_SECTION_PRIMARY)
    {
      section = self->primary;
      if (line > 0)
        section->line = line;
    }
  else if (kind == KV_CONFIG_SECTION_BACKPRESSURE)
    {
      if (self->backpressure != NULL)
        {
          KvConfigSection probe = { .kind = kind };

          if (self->backpressure->line > 0)
            kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, &probe, NULL,
                                 "duplicate section (first at line %u)", self->backpressure->line);
          else
            kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, &probe, NULL,
                                 "duplicate section");
          return FALSE;
        }
      section = self->backpressure = section_new (kind, NULL, line);
    }
  else
    {
      const KvConfigSection *first = kind == KV_CONFIG_SECTION_DEVICE
                                     ? self->device : kv_config_document_find_tier (self, name);

      if (first != NULL)
        {
          KvConfigSection probe = { .kind = kind, .name = (char *) name };

          if (first->line > 0)
            kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, &probe, NULL,
                                 "duplicate section (first at line %u)", first->line);
          else
            kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, &probe, NULL,
                                 kind == KV_CONFIG_SECTION_TIER ? "duplicate tier name"
                                                                : "duplicate section");
          return FALSE;
        }

      for (guint i = 0; i < n_keys; i++)
        if (g_str_equal (keys[i].key, "type"))
          type_key = &keys[i];
        else if (kind == KV_CONFIG_SECTION_TIER && g_str_equal (keys[i].key, "module"))
          module_key = &keys[i];

      section = new_typed_section (self, kind, name, line, type_key, module_key, error);
      if (section == NULL)
        return FALSE;
      if (kind == KV_CONFIG_SECTION_DEVICE)
        self->device = section;
      else
        g_ptr_array_add (self->tiers, section);
    }

  for (guint i = 0; i < n_keys; i++)
    {
      KvConfigLocation key_loc = { origin, keys[i].line };

      if (&keys[i] == type_key || &keys[i] == module_key)
        continue;
      if (kind == KV_CONFIG_SECTION_PRIMARY && g_str_equal (keys[i].key, "type"))
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_KEY, &key_loc, section, "type",
                               "the primary tier has no type");
          return FALSE;
        }
      if (!kv_config_section_set (section, keys[i].key, keys[i].text, keys[i].variant,
                                  &key_loc, error))
        {
          if (kind == KV_CONFIG_SECTION_BACKPRESSURE)
            g_clear_pointer (&self->backpressure, section_free);
          return FALSE;
        }
    }

  if (kind == KV_CONFIG_SECTION_BACKPRESSURE)
    {
      if (kv_config_section_validate (section, NULL, origin, error) &&
          kv_config_document_validate_tiers (self, error))
        return TRUE;
      /* the tiers go on without it */
      g_clear_pointer (&self->backpressure, section_free);
      return FALSE;
    }
  return kv_config_section_validate (section, self->backpressure, origin, error);
}
