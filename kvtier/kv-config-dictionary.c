/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config-dictionary-private.h"

#include "kv-config-value-private.h"

/* ------------------------------------------------------------------------ */
/* Reading */

static gboolean
collect_dict (GVariant    *dict,
              const char  *what,
              GPtrArray   *out_keys,
              GError     **error)
{
  GVariantIter iter;
  const char *key;
  GVariant *value;
  KvConfigLocation loc = { KV_CONFIG_DICTIONARY_ORIGIN, 0 };

  g_variant_iter_init (&iter, dict);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      KvConfigRawKey *raw;

      for (guint i = 0; i < out_keys->len; i++)
        if (g_str_equal (((KvConfigRawKey *) g_ptr_array_index (out_keys, i))->key, key))
          {
            kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                                 "%s key '%s': duplicate key", what, key);
            g_variant_unref (value);
            return FALSE;
          }
      raw = g_new0 (KvConfigRawKey, 1);
      raw->key = key;
      raw->variant = value;
      g_ptr_array_add (out_keys, raw);
    }
  return TRUE;
}

static void
raw_key_free (KvConfigRawKey *raw)
{
  g_clear_pointer (&raw->variant, g_variant_unref);
  g_free (raw);
}

static gboolean
add_dict_section (KvConfigDocument     *self,
                  KvConfigSectionKind   kind,
                  GVariant             *dict,
                  const char           *what,
                  GError              **error)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) raw_key_free);
  g_autofree char *name = NULL;
  g_autofree KvConfigRawKey *flat = NULL;
  guint n = 0;
  KvConfigLocation loc = { KV_CONFIG_DICTIONARY_ORIGIN, 0 };

  if (!g_variant_is_of_type (dict, G_VARIANT_TYPE_VARDICT))
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                           "%s must be a dictionary (a{sv}), not '%s'", what,
                           g_variant_get_type_string (dict));
      return FALSE;
    }
  if (!collect_dict (dict, what, keys, error))
    return FALSE;

  flat = g_new0 (KvConfigRawKey, keys->len + 1);
  for (guint i = 0; i < keys->len; i++)
    {
      KvConfigRawKey *raw = g_ptr_array_index (keys, i);

      if (kind == KV_CONFIG_SECTION_TIER && g_str_equal (raw->key, "name"))
        {
          if (!g_variant_is_of_type (raw->variant, G_VARIANT_TYPE_STRING) ||
              !kv_config_is_valid_name (g_variant_get_string (raw->variant, NULL)))
            {
              g_autofree char *printed = g_variant_print (raw->variant, TRUE);

              kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                                   "%s key 'name': %s is not a tier name (letters, digits,"
                                   " '-', '_' or '.')", what, printed);
              return FALSE;
            }
          name = g_variant_dup_string (raw->variant, NULL);
          continue;
        }
      flat[n++] = *raw;
    }

  if (kind == KV_CONFIG_SECTION_TIER && name == NULL)
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_MISSING_KEY, &loc, NULL, NULL,
                           "%s: missing key 'name'", what);
      return FALSE;
    }

  return kv_config_document_add_section (self, kind, name, 0, flat, n, error);
}

gboolean
kv_config_dictionary_load (KvConfigDocument  *document,
                           GVariant          *variant,
                           GError           **error)
{
  GVariantIter iter;
  const char *key;
  GVariant *value;
  KvConfigLocation loc = { KV_CONFIG_DICTIONARY_ORIGIN, 0 };
  gboolean seen[4] = { FALSE, FALSE, FALSE, FALSE };
  g_autoptr(GVariant) backpressure = NULL;

  if (!g_variant_is_of_type (variant, G_VARIANT_TYPE_VARDICT))
    {
      kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                           "a configuration is a dictionary (a{sv}), not '%s'",
                           g_variant_get_type_string (variant));
      return FALSE;
    }

  /* The keys every tier inherits first, so that each tier is checked with
   * them wherever the dictionary lists them. */
  backpressure = g_variant_lookup_value (variant, "backpressure", NULL);
  if (backpressure != NULL &&
      !add_dict_section (document, KV_CONFIG_SECTION_BACKPRESSURE, backpressure,
                         "'backpressure'", error))
    return FALSE;

  g_variant_iter_init (&iter, variant);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) section = value;
      int which = g_str_equal (key, "primary") ? 0 : g_str_equal (key, "device") ? 1
                  : g_str_equal (key, "tiers") ? 2 : g_str_equal (key, "backpressure") ? 3 : -1;

      if (which < 0)
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_SECTION, &loc, NULL, NULL,
                               "unknown section '%s' (accepted: primary, device, backpressure,"
                               " tiers)", key);
          return FALSE;
        }
      if (seen[which])
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                               "duplicate section '%s'", key);
          return FALSE;
        }
      seen[which] = TRUE;

      if (which == 0 &&
          !add_dict_section (document, KV_CONFIG_SECTION_PRIMARY, section, "'primary'", error))
        return FALSE;
      if (which == 1 &&
          !add_dict_section (document, KV_CONFIG_SECTION_DEVICE, section, "'device'", error))
        return FALSE;
      if (which == 2)
        {
          GVariantIter tiers;
          GVariant *tier;
          guint index = 0;

          if (!g_variant_is_of_type (section, G_VARIANT_TYPE ("aa{sv}")) &&
              !g_variant_is_of_type (section, G_VARIANT_TYPE ("av")))
            {
              kv_config_set_error (error, KV_CONFIG_ERROR_INVALID_VALUE, &loc, NULL, NULL,
                                   "'tiers' must be an array of dictionaries (aa{sv}), not '%s'",
                                   g_variant_get_type_string (section));
              return FALSE;
            }
          g_variant_iter_init (&tiers, section);
          while ((tier = g_variant_iter_next_value (&tiers)) != NULL)
            {
              g_autoptr(GVariant) owned_tier = tier;
              g_autoptr(GVariant) inner = g_variant_is_of_type (tier, G_VARIANT_TYPE_VARIANT)
                                          ? g_variant_get_variant (tier) : g_variant_ref (tier);
              g_autofree char *what = g_strdup_printf ("'tiers'[%u]", index++);

              if (!add_dict_section (document, KV_CONFIG_SECTION_TIER, inner, what, error))
                return FALSE;
            }
        }
    }

  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* Writing */

static GVariant *
section_to_variant (const KvConfigSection *section)
{
  GVariantBuilder builder;

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  if (section->kind == KV_CONFIG_SECTION_TIER)
    g_variant_builder_add (&builder, "{sv}", "name", g_variant_new_string (section->name));
  if (section->type_name != NULL)
    g_variant_builder_add (&builder, "{sv}", "type", g_variant_new_string (section->type_name));
  if (section->module != NULL)
    g_variant_builder_add (&builder, "{sv}", "module", g_variant_new_string (section->module));
  for (guint i = 0; i < section->entries->len; i++)
    {
      const KvConfigEntry *entry = g_ptr_array_index (section->entries, i);

      g_variant_builder_add (&builder, "{sv}", entry->key,
                             kv_config_value_to_variant (entry->pspec, &entry->value));
    }
  return g_variant_builder_end (&builder);
}

GVariant *
kv_config_dictionary_write (const KvConfigDocument *document)
{
  GVariantBuilder builder;
  GVariantBuilder tiers;

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "primary", section_to_variant (document->primary));
  if (document->device != NULL)
    g_variant_builder_add (&builder, "{sv}", "device", section_to_variant (document->device));
  if (document->backpressure != NULL)
    g_variant_builder_add (&builder, "{sv}", "backpressure",
                           section_to_variant (document->backpressure));
  g_variant_builder_init (&tiers, G_VARIANT_TYPE ("aa{sv}"));
  for (guint i = 0; i < document->tiers->len; i++)
    g_variant_builder_add_value (&tiers, section_to_variant (g_ptr_array_index (document->tiers, i)));
  g_variant_builder_add (&builder, "{sv}", "tiers", g_variant_builder_end (&tiers));
  return g_variant_builder_end (&builder);
}
