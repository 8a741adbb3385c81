/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config-key-file-private.h"

#include <string.h>

#include "kv-config-value-private.h"

/* ------------------------------------------------------------------------ */
/* Reading */

typedef struct
{
  char       *title;
  guint       line;
  GHashTable *keys;   /* key → line (GUINT_TO_POINTER) */
} ScannedSection;

static void
scanned_section_free (ScannedSection *scanned)
{
  g_free (scanned->title);
  g_hash_table_unref (scanned->keys);
  g_free (scanned);
}

/* GKeyFile knows no line numbers and merges repeated sections and keys
 * silently, so the text is scanned first: for the lines that errors name,
 * and to refuse duplicates and malformed lines with their line number. */
static GPtrArray *
scan_key_file (const char  *data,
               gsize        length,
               const char  *origin,
               GError     **error)
{
  g_autoptr(GPtrArray) sections = g_ptr_array_new_with_free_func ((GDestroyNotify) scanned_section_free);
  g_autofree char *copy = g_strndup (data, length);
  g_auto(GStrv) lines = g_strsplit (copy, "\n", -1);
  ScannedSection *current = NULL;

  for (guint n = 0; lines[n] != NULL; n++)
    {
      char *line = g_strstrip (lines[n]);
      KvConfigLocation loc = { origin, n + 1 };

      if (*line == '\0' || *line == '#')
        continue;

      if (*line == '[')
        {
          char *end = strrchr (line, ']');

          if (end == NULL || end[1] != '\0')
            {
              kv_config_set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL,
                                   "'%s' is not a section header ('[NAME]')", line);
              return NULL;
            }
          *end = '\0';
          for (guint i = 0; i < sections->len; i++)
            {
              ScannedSection *other = g_ptr_array_index (sections, i);

              if (g_str_equal (other->title, line + 1))
                {
                  kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                                       "duplicate section [%s] (first at line %u)",
                                       line + 1, other->line);
                  return NULL;
                }
            }
          current = g_new0 (ScannedSection, 1);
          current->title = g_strdup (line + 1);
          current->line = n + 1;
          current->keys = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
          g_ptr_array_add (sections, current);
          continue;
        }

      {
        char *eq = strchr (line, '=');
        g_autofree char *key = NULL;
        gpointer first_line;

        if (eq == NULL)
          {
            kv_config_set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL,
                                 "'%s' is not a section header, 'key = value' or comment", line);
            return NULL;
          }
        key = g_strstrip (g_strndup (line, (gsize) (eq - line)));
        if (current == NULL)
          {
            kv_config_set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, key,
                                 "key outside any section");
            return NULL;
          }
        if (g_hash_table_lookup_extended (current->keys, key, NULL, &first_line))
          {
            kv_config_set_error (error, KV_CONFIG_ERROR_DUPLICATE, &loc, NULL, NULL,
                                 "[%s] key '%s': duplicate key (first at line %u)",
                                 current->title, key, GPOINTER_TO_UINT (first_line));
            return NULL;
          }
        g_hash_table_insert (current->keys, g_steal_pointer (&key), GUINT_TO_POINTER (n + 1));
      }
    }

  return g_steal_pointer (&sections);
}

/* The escapes g_key_file_get_string() accepts: \s \n \t \r \\. */
static gboolean
escapes_are_valid (const char *raw)
{
  for (const char *p = raw; *p != '\0'; p++)
    if (*p == '\\')
      {
        p++;
        if (*p == '\0' || strchr ("sntr\\", *p) == NULL)
          return FALSE;
      }
  return TRUE;
}

gboolean
kv_config_key_file_load (KvConfigDocument  *document,
                         const char        *data,
                         gsize              length,
                         GError           **error)
{
  const char *origin = kv_config_document_get_origin (document);
  g_autoptr(GKeyFile) key_file = g_key_file_new ();
  g_autoptr(GPtrArray) scanned = NULL;
  g_autoptr(GError) local_error = NULL;
  const char *nul = memchr (data, '\0', length);

  /* GKeyFile and the scan below read C strings: text after a NUL byte
   * would be seen by one and not the other, so neither may see any. */
  if (nul != NULL)
    {
      guint line = 1;
      const char *line_start = data;

      for (const char *p = data; p < nul; p++)
        if (*p == '\n')
          {
            line++;
            line_start = p + 1;
          }
      {
        KvConfigLocation loc = { origin, line };

        kv_config_set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL,
                             "a NUL byte at column %u (a configuration is text)",
                             (guint) (nul - line_start) + 1);
      }
      return FALSE;
    }

  scanned = scan_key_file (data, length, origin, error);
  if (scanned == NULL)
    return FALSE;

  if (!g_key_file_load_from_data (key_file, data, length, G_KEY_FILE_NONE, &local_error))
    {
      KvConfigLocation loc = { origin, 0 };

      kv_config_set_error (error, KV_CONFIG_ERROR_PARSE, &loc, NULL, NULL,
                           "%s", local_error->message);
      return FALSE;
    }

  /* [backpressure] first: every tier is checked with the keys it inherits,
   * wherever the file puts that section. */
  for (guint s = 0; s < scanned->len; s++)
    {
      ScannedSection *sc = g_ptr_array_index (scanned, s);

      if (g_str_equal (sc->title, "backpressure") && s > 0)
        {
          g_ptr_array_steal_index (scanned, s);
          g_ptr_array_insert (scanned, 0, sc);
          break;
        }
    }

  for (guint s = 0; s < scanned->len; s++)
    {
      ScannedSection *sc = g_ptr_array_index (scanned, s);
      g_auto(GStrv) keys = NULL;
      g_autoptr(GPtrArray) texts = g_ptr_array_new_with_free_func (g_free);
      g_autofree KvConfigRawKey *raw = NULL;
      g_autofree char *name = NULL;
      KvConfigSectionKind kind;
      gsize n_keys = 0;
      KvConfigLocation loc = { origin, sc->line };

      if (!kv_config_section_parse_title (sc->title, &kind, &name))
        {
          kv_config_set_error (error, KV_CONFIG_ERROR_UNKNOWN_SECTION, &loc, NULL, NULL,
                               "unknown section [%s] (accepted: [primary], [device],"
                               " [backpressure], [tier NAME] where NAME is letters, digits,"
                               " '-', '_' or '.')",
                               sc->title);
          return FALSE;
        }

      keys = g_key_file_get_keys (key_file, sc->title, &n_keys, NULL);
      raw = g_new0 (KvConfigRawKey, n_keys + 1);
      for (gsize k = 0; k < n_keys; k++)
        {
          guint line = GPOINTER_TO_UINT (g_hash_table_lookup (sc->keys, keys[k]));
          KvConfigLocation key_loc = { origin, line };
          KvConfigSection probe = { .kind = kind, .name = name };
          g_autofree char *raw_text = g_key_file_get_value (key_file, sc->title, keys[k], NULL);
          g_autoptr(GError) key_error = NULL;
          char *text;

          /* Escapes are checked before GKeyFile unescapes: it returns the
           * text of a value with a bad escape (with an error), and sets its
           * error twice for two ("GError set over the top"). */
          if (raw_text != NULL && !escapes_are_valid (raw_text))
            {
              kv_config_set_error (error, KV_CONFIG_ERROR_PARSE, &key_loc, &probe, keys[k],
                                   "'%s' has an invalid escape sequence (accepted: \\s \\n"
                                   " \\t \\r \\\\)", raw_text);
              return FALSE;
            }
          text = g_key_file_get_string (key_file, sc->title, keys[k], &key_error);
          if (key_error != NULL || text == NULL)
            {
              g_free (text);
              kv_config_set_error (error, KV_CONFIG_ERROR_PARSE, &key_loc, &probe, keys[k],
                                   "%s", key_error != NULL ? key_error->message : "no value");
              return FALSE;
            }
          g_ptr_array_add (texts, text);
          raw[k].key = keys[k];
          raw[k].text = text;
          raw[k].line = line;
        }

      if (!kv_config_document_add_section (document, kind, name, sc->line, raw,
                                           (guint) n_keys, error))
        return FALSE;
    }

  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* Writing */

static void
section_to_key_file (const KvConfigSection *section,
                     GKeyFile              *key_file)
{
  g_autofree char *title = kv_config_section_title (section);

  /* section_title() gives "[...]"; groups are named without brackets. */
  title[strlen (title) - 1] = '\0';
  if (section->type_name != NULL)
    g_key_file_set_string (key_file, title + 1, "type", section->type_name);
  if (section->module != NULL)
    g_key_file_set_string (key_file, title + 1, "module", section->module);
  for (guint i = 0; i < section->entries->len; i++)
    {
      const KvConfigEntry *entry = g_ptr_array_index (section->entries, i);
      g_autofree char *text = kv_config_value_to_string (entry->pspec, &entry->value);

      g_key_file_set_string (key_file, title + 1, entry->key, text);
    }
  if (section->type_name == NULL && section->entries->len == 0)
    {
      /* GKeyFile makes a group only for a key: an empty section (an empty
       * [backpressure] asks for the defaults) must still be written */
      g_key_file_set_string (key_file, title + 1, "type", "");
      g_key_file_remove_key (key_file, title + 1, "type", NULL);
      g_key_file_set_comment (key_file, title + 1, NULL, " defaults", NULL);
    }
}

char *
kv_config_key_file_write (const KvConfigDocument *document,
                          gsize                  *length)
{
  g_autoptr(GKeyFile) key_file = g_key_file_new ();

  section_to_key_file (document->primary, key_file);
  if (document->device != NULL)
    section_to_key_file (document->device, key_file);
  if (document->backpressure != NULL)
    section_to_key_file (document->backpressure, key_file);
  for (guint i = 0; i < document->tiers->len; i++)
    section_to_key_file (g_ptr_array_index (document->tiers, i), key_file);
  return g_key_file_to_data (key_file, length, NULL);
}
