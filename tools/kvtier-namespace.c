/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-namespace.h"
#include "kvtier-json.h"

#include <string.h>

#include <gio/gio.h>

/* Reads namespace.json as doc/on-disk-format.md defines it; every field
 * is checked, since the file lies in a directory anyone may have written. */

static const char * const members[] = {
  "block_size", "format_version", "header_size", "namespace",
  "layout",   /* "slab" in a layout=slab namespace (kvslab-<ns16>) */
};

static JsonNode *
get_member (JsonObject  *object,
            const char  *member,
            const char  *file,
            GError     **error)
{
  JsonNode *node = json_object_get_member (object, member);

  if (node == NULL)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                 "%s: \"%s\" is missing", file, member);
  return node;
}

static gboolean
get_int (JsonObject  *object,
         const char  *member,
         const char  *file,
         gint64      *out,
         GError     **error)
{
  JsonNode *node = get_member (object, member, file, error);

  if (node == NULL)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_INT64)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: \"%s\" is not an integer", file, member);
      return FALSE;
    }
  *out = json_node_get_int (node);
  return TRUE;
}

/**
 * tool_namespace_parse:
 * @data: (array length=length): the contents of namespace.json
 * @length: bytes of @data
 * @file: the file's name, for the messages
 * @out_name: (out) (transfer full): the namespace
 * @out_block_size: (out): the chunk size in bytes
 * @error: return location for a #GError
 *
 * Validates namespace.json: a JSON object of exactly `block_size` (a
 * positive multiple of 4096 up to %TOOL_NAMESPACE_MAX_BLOCK_SIZE),
 * `format_version` (1), `header_size` (4096) and `namespace` (a UTF-8
 * string), at most %TOOL_NAMESPACE_JSON_MAX_BYTES long.
 *
 * Returns: %TRUE when valid; otherwise %FALSE with @error naming @file
 *   and the field
 */
gboolean
tool_namespace_parse (const char  *data,
                      gsize        length,
                      const char  *file,
                      char       **out_name,
                      guint64     *out_block_size,
                      GError     **error)
{
  g_autoptr(GError) parse_error = NULL;
  g_autoptr(JsonNode) root = NULL;
  g_autoptr(GList) names = NULL;
  JsonObject *object;
  JsonNode *node;
  gint64 value = 0;
  const char *name;
  gsize name_len;

  root = tool_json_parse (data, length, TOOL_NAMESPACE_JSON_MAX_BYTES, &parse_error);
  if (root == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "%s: %s%s", file,
                   parse_error->domain == JSON_PARSER_ERROR ? "not valid JSON: " : "",
                   parse_error->message);
      return FALSE;
    }
  if (!JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: not a JSON object", file);
      return FALSE;
    }
  object = json_node_get_object (root);

  names = json_object_get_members (object);
  for (GList *l = names; l != NULL; l = l->next)
    if (!g_strv_contains (members, l->data))
      {
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                     "%s: unknown member \"%s\"", file, (const char *) l->data);
        return FALSE;
      }

  if (!get_int (object, "format_version", file, &value, error))
    return FALSE;
  if (value != TOOL_NAMESPACE_FORMAT_VERSION)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: \"format_version\" is %" G_GINT64_FORMAT ", not %d", file, value,
                   TOOL_NAMESPACE_FORMAT_VERSION);
      return FALSE;
    }
  if (!get_int (object, "header_size", file, &value, error))
    return FALSE;
  if (value != TOOL_NAMESPACE_HEADER_SIZE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: \"header_size\" is %" G_GINT64_FORMAT ", not %d", file, value,
                   TOOL_NAMESPACE_HEADER_SIZE);
      return FALSE;
    }
  if (!get_int (object, "block_size", file, &value, error))
    return FALSE;
  if (value <= 0 || value % 4096 != 0 || (guint64) value > TOOL_NAMESPACE_MAX_BLOCK_SIZE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: \"block_size\" is %" G_GINT64_FORMAT ", not a positive multiple of 4096"
                   " up to %" G_GUINT64_FORMAT, file, value, TOOL_NAMESPACE_MAX_BLOCK_SIZE);
      return FALSE;
    }

  node = json_object_get_member (object, "layout");
  if (node != NULL &&
      (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING ||
       !g_str_equal (json_node_get_string (node), "slab")))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: \"layout\" is not \"slab\"", file);
      return FALSE;
    }

  node = get_member (object, "namespace", file, error);
  if (node == NULL)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: \"namespace\" is not a string", file);
      return FALSE;
    }
  name = json_node_get_string (node);
  name_len = strlen (name);
  if (!g_utf8_validate (name, (gssize) name_len, NULL))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: \"namespace\" is not UTF-8", file);
      return FALSE;
    }

  *out_name = g_strdup (name);
  *out_block_size = (guint64) value;
  return TRUE;
}

/**
 * tool_namespace_digest:
 * @name: the namespace
 * @block_size: the chunk size in bytes
 * @digest: (out caller-allocates) (array fixed-size=32): the namespace digest
 *
 * The namespace digest of doc/on-disk-format.md: SHA-256 over
 * `"kvtier-fs\0" "1" "\0" name "\0" block_size`.
 */
void
tool_namespace_digest (const char *name,
                       guint64     block_size,
                       guint8      digest[32])
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree char *size = g_strdup_printf ("%" G_GUINT64_FORMAT, block_size);
  gsize len = 32;

  g_checksum_update (sum, (const guchar *) "kvtier-fs", 10);   /* with its NUL */
  g_checksum_update (sum, (const guchar *) "1", 1);
  g_checksum_update (sum, (const guchar *) "", 1);
  g_checksum_update (sum, (const guchar *) name, -1);
  g_checksum_update (sum, (const guchar *) "", 1);
  g_checksum_update (sum, (const guchar *) size, -1);
  g_checksum_get_digest (sum, digest, &len);
}
