/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-json.h"

#include <string.h>

/* Bounded JSON parsing for the files the tools read (traces,
 * namespace.json): they may come from anyone. */

/**
 * tool_json_check_depth:
 * @text: (array length=length): JSON text, not necessarily valid
 * @length: bytes of @text
 * @max_depth: the deepest nesting of arrays and objects allowed
 * @error: return location for a #GError
 *
 * Counts the nesting of `[` and `{` outside strings (minding escapes),
 * without parsing, so that a text json-glib would recurse too deep on is
 * refused before it is parsed. It also refuses anything but whitespace
 * after the first complete value: json-glib 1.6 leaks the nodes it built
 * when it fails with "expected end of file".
 *
 * Returns: %TRUE when @text nests at most @max_depth levels and holds one
 *   value
 */
gboolean
tool_json_check_depth (const char  *text,
                       gsize        length,
                       guint        max_depth,
                       GError     **error)
{
  gboolean in_string = FALSE;
  gboolean escaped = FALSE;
  gboolean in_scalar = FALSE;   /* a top-level number or literal */
  gboolean value_ended = FALSE; /* the first top-level value is complete */
  guint depth = 0;

  for (gsize i = 0; i < length; i++)
    {
      char c = text[i];

      if (in_string)
        {
          if (escaped)
            escaped = FALSE;
          else if (c == '\\')
            escaped = TRUE;
          else if (c == '"')
            {
              in_string = FALSE;
              value_ended = depth == 0;
            }
          continue;
        }
      if (in_scalar)
        {
          if (!strchr (" \t\r\n[]{}\",:", c))
            continue;
          in_scalar = FALSE;
          value_ended = TRUE;
        }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
        continue;
      if (value_ended)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       "data after the JSON value (at byte %" G_GSIZE_FORMAT ")", i + 1);
          return FALSE;
        }
      switch (c)
        {
        case '"':
          in_string = TRUE;
          break;
        case '[':
        case '{':
          if (++depth > max_depth)
            {
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                           "nested deeper than %u levels (at byte %" G_GSIZE_FORMAT ")",
                           max_depth, i + 1);
              return FALSE;
            }
          break;
        case ']':
        case '}':
          if (depth > 0 && --depth == 0)
            value_ended = TRUE;
          break;
        default:
          if (depth == 0)
            in_scalar = TRUE;
          break;
        }
    }
  return TRUE;
}

/**
 * tool_json_parse:
 * @text: (array length=length): JSON text
 * @length: bytes of @text
 * @max_length: the longest text accepted
 * @error: return location for a #GError
 *
 * Parses @text once it is known to be at most @max_length bytes, free of
 * NUL bytes and nested at most %TOOL_JSON_MAX_DEPTH levels.
 *
 * Returns: (transfer full) (nullable): the root node, or %NULL with @error set
 */
JsonNode *
tool_json_parse (const char  *text,
                 gsize        length,
                 gsize        max_length,
                 GError     **error)
{
  g_autoptr(JsonParser) parser = NULL;
  JsonNode *root;

  if (length > max_length)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%" G_GSIZE_FORMAT " bytes long, more than the %" G_GSIZE_FORMAT " allowed",
                   length, max_length);
      return NULL;
    }
  if (memchr (text, '\0', length) != NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "contains a NUL byte");
      return NULL;
    }
  if (!tool_json_check_depth (text, length, TOOL_JSON_MAX_DEPTH, error))
    return NULL;

  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, text, (gssize) length, error))
    return NULL;
  root = json_parser_get_root (parser);
  if (root == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "empty");
      return NULL;
    }
  return json_node_ref (root);
}
