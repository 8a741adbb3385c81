/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

struct _KvFsLayout
{
  KvFsLayoutKind kind;
  gsize          block_size;
  guint          n_roots;
  char         **roots;        /* canonical root directories */
  char         **chunk_dirs;   /* per root: the top of the chunk tree */
  char         **meta_dirs;    /* per root: where the identity file lives */
  char          *meta_name;    /* namespace.json or config.json */
  char          *meta_contents;
  guint8         ns_digest[KV_FS_NAMESPACE_DIGEST_LEN];
};

void
kv_fs_layout_free (KvFsLayout *self)
{
  if (self == NULL)
    return;
  g_strfreev (self->roots);
  g_strfreev (self->chunk_dirs);
  g_strfreev (self->meta_dirs);
  g_free (self->meta_name);
  g_free (self->meta_contents);
  g_free (self);
}

/* ---- canonical JSON (Python's json.dumps(sort_keys=True)) ---------------- */

static void json_write (GString *out, JsonNode *node, gboolean pretty, guint depth);

static void
json_write_string (GString    *out,
                   const char *str)
{
  const char *p;

  /* ensure_ascii=True: everything outside ' '..'~' is escaped, non-ASCII
   * as \uXXXX (surrogate pairs above the BMP), lowercase hex. */
  g_string_append_c (out, '"');
  for (p = str; *p != '\0'; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);

      switch (c)
        {
        case '"': g_string_append (out, "\\\""); break;
        case '\\': g_string_append (out, "\\\\"); break;
        case '\n': g_string_append (out, "\\n"); break;
        case '\r': g_string_append (out, "\\r"); break;
        case '\t': g_string_append (out, "\\t"); break;
        case '\b': g_string_append (out, "\\b"); break;
        case '\f': g_string_append (out, "\\f"); break;
        default:
          if (c >= 0x20 && c <= 0x7e)
            g_string_append_c (out, (char) c);
          else if (c < 0x10000)
            g_string_append_printf (out, "\\u%04x", c);
          else
            {
              gunichar v = c - 0x10000;

              g_string_append_printf (out, "\\u%04x\\u%04x",
                                      0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            }
        }
    }
  g_string_append_c (out, '"');
}

/* Python's repr() of a float: the shortest digits that round-trip,
 * positional for exponents in [-4, 16), scientific otherwise. */
static void
json_write_double (GString *out,
                   gdouble  v)
{
  char buf[64];
  char digits[32];
  int precision;
  int exponent;
  int n_digits = 0;
  const char *p;
  const char *e;

  if (v != v || v == 1.0 / 0.0 || v == -1.0 / 0.0)
    {
      g_string_append (out, v != v ? "NaN" : (v > 0 ? "Infinity" : "-Infinity"));
      return;
    }
  for (precision = 1; precision <= 17; precision++)
    {
      g_snprintf (buf, sizeof buf, "%.*e", precision - 1, v);
      if (g_ascii_strtod (buf, NULL) == v)
        break;
    }
  p = buf;
  if (*p == '-')
    {
      g_string_append_c (out, '-');
      p++;
    }
  e = strchr (p, 'e');
  for (; p < e; p++)
    if (g_ascii_isdigit (*p))
      digits[n_digits++] = *p;
  digits[n_digits] = '\0';
  while (n_digits > 1 && digits[n_digits - 1] == '0')
    digits[--n_digits] = '\0';
  exponent = atoi (e + 1);

  if (exponent >= -4 && exponent < 16)
    {
      if (exponent < 0)
        {
          g_string_append (out, "0.");
          for (int i = -1; i > exponent; i--)
            g_string_append_c (out, '0');
          g_string_append (out, digits);
        }
      else
        {
          for (int i = 0; i <= exponent; i++)
            g_string_append_c (out, i < n_digits ? digits[i] : '0');
          g_string_append_c (out, '.');
          if (n_digits > exponent + 1)
            g_string_append (out, digits + exponent + 1);
          else
            g_string_append_c (out, '0');
        }
    }
  else
    {
      g_string_append_c (out, digits[0]);
      if (n_digits > 1)
        {
          g_string_append_c (out, '.');
          g_string_append (out, digits + 1);
        }
      g_string_append_printf (out, "e%c%02d", exponent < 0 ? '-' : '+', ABS (exponent));
    }
}

static void
json_newline (GString *out,
              gboolean pretty,
              guint    depth)
{
  if (!pretty)
    return;
  g_string_append_c (out, '\n');
  for (guint i = 0; i < depth; i++)
    g_string_append (out, "  ");
}

static int
compare_members (gconstpointer a,
                 gconstpointer b)
{
  return strcmp (a, b);
}

static void
json_write (GString  *out,
            JsonNode *node,
            gboolean  pretty,
            guint     depth)
{
  switch (JSON_NODE_TYPE (node))
    {
    case JSON_NODE_OBJECT:
      {
        JsonObject *object = json_node_get_object (node);
        GList *members = g_list_sort (json_object_get_members (object), compare_members);

        g_string_append_c (out, '{');
        for (GList *l = members; l != NULL; l = l->next)
          {
            json_newline (out, pretty, depth + 1);
            json_write_string (out, l->data);
            g_string_append (out, pretty ? ": " : ":");
            json_write (out, json_object_get_member (object, l->data), pretty, depth + 1);
            if (l->next != NULL)
              g_string_append_c (out, ',');
          }
        if (members != NULL)
          json_newline (out, pretty, depth);
        g_string_append_c (out, '}');
        g_list_free (members);
        break;
      }

    case JSON_NODE_ARRAY:
      {
        JsonArray *array = json_node_get_array (node);
        guint n = json_array_get_length (array);

        g_string_append_c (out, '[');
        for (guint i = 0; i < n; i++)
          {
            json_newline (out, pretty, depth + 1);
            json_write (out, json_array_get_element (array, i), pretty, depth + 1);
            if (i + 1 < n)
              g_string_append_c (out, ',');
          }
        if (n > 0)
          json_newline (out, pretty, depth);
        g_string_append_c (out, ']');
        break;
      }

    case JSON_NODE_NULL:
      g_string_append (out, "null");
      break;

    case JSON_NODE_VALUE:
      switch (json_node_get_value_type (node))
        {
        case G_TYPE_INT64:
          g_string_append_printf (out, "%" G_GINT64_FORMAT, json_node_get_int (node));
          break;
        case G_TYPE_DOUBLE:
          json_write_double (out, json_node_get_double (node));
          break;
        case G_TYPE_BOOLEAN:
          g_string_append (out, json_node_get_boolean (node) ? "true" : "false");
          break;
        default:
          json_write_string (out, json_node_get_string (node));
          break;
        }
      break;
    }
}

/* The JSON text Python's json.dumps(node, sort_keys=True) writes: compact
 * (separators ",", ":") or, with @pretty, indent=2. */
char *
kv_fs_json_canonical (JsonNode *node,
                      gboolean  pretty)
{
  GString *out = g_string_new (NULL);

  json_write (out, node, pretty, 0);
  return g_string_free (out, FALSE);
}

/* vLLM's FileMapper digest: the first 12 hex digits of SHA-256 over the
 * sorted, compact JSON of the identity fields. */
char *
kv_fs_vllm_digest (const char  *identity_json,
                   char       **out_model_name,
                   GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) local_error = NULL;
  g_autofree char *canonical = NULL;
  g_autofree char *sha = NULL;
  JsonNode *root;
  JsonObject *object;
  JsonNode *model;

  if (identity_json == NULL || *identity_json == '\0')
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "layout=vllm needs the vllm-identity property (the JSON object of vLLM's "
                   "file-mapper identity fields: model_name, tokens_per_hash, ...)");
      return NULL;
    }
  if (!json_parser_load_from_data (parser, identity_json, -1, &local_error))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "vllm-identity is not valid JSON: %s", local_error->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "vllm-identity must be a JSON object, got ‘%s’", identity_json);
      return NULL;
    }
  object = json_node_get_object (root);
  model = json_object_get_member (object, "model_name");
  if (model == NULL || json_node_get_value_type (model) != G_TYPE_STRING)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "vllm-identity has no string member ‘model_name’");
      return NULL;
    }

  canonical = kv_fs_json_canonical (root, FALSE);
  sha = g_compute_checksum_for_string (G_CHECKSUM_SHA256, canonical, -1);
  sha[12] = '\0';
  if (out_model_name != NULL)
    *out_model_name = g_strdup (json_node_get_string (model));
  return g_steal_pointer (&sha);
}

/* ---- construction ------------------------------------------------------- */

static char **
parse_roots (const char  *roots,
             GError     **error)
{
  g_auto(GStrv) parts = NULL;
  g_autoptr(GPtrArray) result = g_ptr_array_new_with_free_func (g_free);

  if (roots == NULL || *roots == '\0')
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The fs tier needs the root property (a directory, or a comma "
                   "separated list of directories)");
      return NULL;
    }
  parts = g_strsplit (roots, ",", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    {
      g_autofree char *canonical = NULL;
      char *trimmed = g_strstrip (parts[i]);

      if (*trimmed == '\0')
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "root ‘%s’ has an empty entry", roots);
          return NULL;
        }
      canonical = g_canonicalize_filename (trimmed, NULL);
      for (guint j = 0; j < result->len; j++)
        if (g_strcmp0 (result->pdata[j], canonical) == 0)
          {
            g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                         "root ‘%s’ names the directory ‘%s’ twice", roots, canonical);
            return NULL;
          }
      g_ptr_array_add (result, g_steal_pointer (&canonical));
    }
  g_ptr_array_add (result, NULL);
  return (char **) g_ptr_array_free (g_steal_pointer (&result), FALSE);
}

static char *
digest_hex (const guint8 *digest,
            gsize         len)
{
  GString *s = g_string_sized_new (len * 2);

  for (gsize i = 0; i < len; i++)
    g_string_append_printf (s, "%02x", digest[i]);
  return g_string_free (s, FALSE);
}

KvFsLayout *
kv_fs_layout_new (KvFsLayoutKind   kind,
                  const char      *roots,
                  const char      *namespace_,
                  gsize            block_size,
                  const char      *vllm_identity,
                  guint            vllm_rank,
                  GError         **error)
{
  g_autoptr(GPtrArray) chunk_dirs = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) meta_dirs = g_ptr_array_new_with_free_func (g_free);
  KvFsLayout *self;
  char **root_list;

  root_list = parse_roots (roots, error);
  if (root_list == NULL)
    return NULL;

  self = g_new0 (KvFsLayout, 1);
  self->kind = kind;
  self->block_size = block_size;
  self->roots = root_list;
  self->n_roots = g_strv_length (root_list);

  if (kind == KV_FS_LAYOUT_KIND_VLLM)
    {
      g_autofree char *model = NULL;
      g_autofree char *digest = kv_fs_vllm_digest (vllm_identity, &model, error);
      g_autoptr(JsonNode) node = NULL;
      g_autofree char *base_name = NULL;

      if (digest == NULL)
        {
          kv_fs_layout_free (self);
          return NULL;
        }
      g_strdelimit (model, "/", '_');
      base_name = g_strdup_printf ("%s_%s", model, digest);
      for (guint i = 0; i < self->n_roots; i++)
        {
          g_autofree char *chunk_name = g_strdup_printf ("%s_r%u", base_name, vllm_rank);

          g_ptr_array_add (meta_dirs, g_build_filename (root_list[i], base_name, NULL));
          g_ptr_array_add (chunk_dirs, g_build_filename (root_list[i], chunk_name, NULL));
        }
      node = json_from_string (vllm_identity, NULL);
      self->meta_name = g_strdup ("config.json");
      self->meta_contents = kv_fs_json_canonical (node, TRUE);
      /* Headerless files carry no namespace; the digest stays zero. */
    }
  else
    {
      g_autofree char *hex = NULL;
      g_autofree char *dir_name = NULL;
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) node = NULL;

      kv_fs_namespace_digest (namespace_, block_size, self->ns_digest);
      hex = digest_hex (self->ns_digest, 8);
      dir_name = g_strdup_printf ("kvtier-%s", hex);
      for (guint i = 0; i < self->n_roots; i++)
        {
          g_ptr_array_add (chunk_dirs, g_build_filename (root_list[i], dir_name, NULL));
          g_ptr_array_add (meta_dirs, g_build_filename (root_list[i], dir_name, NULL));
        }

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "format_version");
      json_builder_add_int_value (builder, KV_FS_FORMAT_VERSION);
      json_builder_set_member_name (builder, "namespace");
      json_builder_add_string_value (builder, namespace_ ? namespace_ : "");
      json_builder_set_member_name (builder, "block_size");
      json_builder_add_int_value (builder, block_size);
      json_builder_set_member_name (builder, "header_size");
      json_builder_add_int_value (builder, KV_FS_HEADER_SIZE);
      json_builder_end_object (builder);
      node = json_builder_get_root (builder);
      self->meta_name = g_strdup ("namespace.json");
      self->meta_contents = kv_fs_json_canonical (node, TRUE);
    }

  g_ptr_array_add (chunk_dirs, NULL);
  g_ptr_array_add (meta_dirs, NULL);
  self->chunk_dirs = (char **) g_ptr_array_free (g_steal_pointer (&chunk_dirs), FALSE);
  self->meta_dirs = (char **) g_ptr_array_free (g_steal_pointer (&meta_dirs), FALSE);
  return self;
}

KvFsLayoutKind
kv_fs_layout_get_kind (const KvFsLayout *self)
{
  return self->kind;
}

guint
kv_fs_layout_get_n_roots (const KvFsLayout *self)
{
  return self->n_roots;
}

const char *
kv_fs_layout_get_root (const KvFsLayout *self,
                       guint             root)
{
  g_return_val_if_fail (root < self->n_roots, NULL);
  return self->roots[root];
}

const char *
kv_fs_layout_get_chunk_dir (const KvFsLayout *self,
                            guint             root)
{
  g_return_val_if_fail (root < self->n_roots, NULL);
  return self->chunk_dirs[root];
}

const guint8 *
kv_fs_layout_get_namespace_digest (const KvFsLayout *self)
{
  return self->ns_digest;
}

gsize
kv_fs_layout_get_block_size (const KvFsLayout *self)
{
  return self->block_size;
}

gboolean
kv_fs_layout_has_header (const KvFsLayout *self)
{
  return self->kind == KV_FS_LAYOUT_KIND_KVTIER;
}

gsize
kv_fs_layout_get_file_size (const KvFsLayout *self)
{
  return self->block_size + (kv_fs_layout_has_header (self) ? KV_FS_HEADER_SIZE : 0);
}

static gboolean
make_dir (const char  *path,
          const char  *what,
          GError     **error)
{
  if (g_mkdir_with_parents (path, 0700) != 0)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot create the fs tier %s ‘%s’: %s", what, path, g_strerror (errsv));
      return FALSE;
    }
  return TRUE;
}

/* Writes @contents to @path unless it exists, through a private temporary
 * file and a rename, so that readers never see half a file. */
static gboolean
write_once (const char  *path,
            const char  *contents,
            GError     **error)
{
  g_autofree char *tmp = NULL;
  gsize len = strlen (contents);
  gsize done = 0;
  int fd;

  if (g_file_test (path, G_FILE_TEST_EXISTS))
    return TRUE;

  tmp = g_strdup_printf ("%s.%08x%08x.tmp", path, g_random_int (), g_random_int ());
  fd = open (tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot write in the fs tier directory of ‘%s’: %s", path, g_strerror (errsv));
      return FALSE;
    }
  while (done < len)
    {
      ssize_t n = write (fd, contents + done, len - done);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          int errsv = n < 0 ? errno : EIO;

          close (fd);
          unlink (tmp);
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                       "Cannot write ‘%s’: %s", tmp, g_strerror (errsv));
          return FALSE;
        }
      done += n;
    }
  close (fd);
  if (rename (tmp, path) != 0)
    {
      int errsv = errno;

      unlink (tmp);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot rename ‘%s’ to ‘%s’: %s", tmp, path, g_strerror (errsv));
      return FALSE;
    }
  return TRUE;
}

/* Creates every root, the namespace directories and their identity file
 * (namespace.json, or vLLM's config.json). Directories are 0700 and files
 * 0600: KV bytes are derived from users' prompts. */
gboolean
kv_fs_layout_create_dirs (const KvFsLayout  *self,
                          GError           **error)
{
  for (guint i = 0; i < self->n_roots; i++)
    {
      g_autofree char *meta_path = NULL;

      if (!make_dir (self->roots[i], "root", error) ||
          !make_dir (self->meta_dirs[i], "namespace directory", error) ||
          !make_dir (self->chunk_dirs[i], "chunk directory", error))
        return FALSE;
      meta_path = g_build_filename (self->meta_dirs[i], self->meta_name, NULL);
      if (!write_once (meta_path, self->meta_contents, error))
        return FALSE;
      /* The kvtier layout's 256 shard directories exist from the start,
       * so no store ever waits for a mkdir. */
      for (guint shard = 0; self->kind == KV_FS_LAYOUT_KIND_KVTIER && shard < 256; shard++)
        {
          g_autofree char *name = g_strdup_printf ("%02x", shard);
          g_autofree char *dir = g_build_filename (self->chunk_dirs[i], name, NULL);

          if (g_mkdir (dir, 0700) != 0 && errno != EEXIST)
            {
              int errsv = errno;

              g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                           "Cannot create the fs tier directory ‘%s’: %s", dir, g_strerror (errsv));
              return FALSE;
            }
        }
    }
  return TRUE;
}

/* ---- naming ------------------------------------------------------------- */

gboolean
kv_fs_layout_key_supported (const KvFsLayout *self,
                            const KvKey      *key)
{
  gsize len = 0;

  kv_key_get_hash (key, &len);
  if (self->kind == KV_FS_LAYOUT_KIND_VLLM)
    return len >= 3 && len <= KV_FS_MAX_KEY_HASH_LEN;
  return kv_fs_key_fits (key);
}

/* vLLM's sharding rule, for both layouts: the block hash read as a
 * big-endian integer, modulo the number of roots. */
guint
kv_fs_layout_root_for_key (const KvFsLayout *self,
                           const KvKey      *key)
{
  const guint8 *hash;
  gsize len = 0;
  guint64 r = 0;

  if (self->n_roots == 1)
    return 0;
  hash = kv_key_get_hash (key, &len);
  for (gsize i = 0; i < len; i++)
    r = (r * 256 + hash[i]) % self->n_roots;
  return (guint) r;
}

static void
append_hex (GString      *out,
            const guint8 *bytes,
            gsize         len)
{
  static const char digits[] = "0123456789abcdef";

  for (gsize i = 0; i < len; i++)
    {
      g_string_append_c (out, digits[bytes[i] >> 4]);
      g_string_append_c (out, digits[bytes[i] & 0xf]);
    }
}

char *
kv_fs_layout_chunk_path (const KvFsLayout *self,
                         const KvKey      *key,
                         guint            *out_root)
{
  const guint8 *hash;
  gsize len = 0;
  guint root = kv_fs_layout_root_for_key (self, key);
  GString *path = g_string_sized_new (256);

  hash = kv_key_get_hash (key, &len);
  g_string_append (path, self->chunk_dirs[root]);
  g_string_append_c (path, '/');

  if (self->kind == KV_FS_LAYOUT_KIND_VLLM)
    {
      gsize start = path->len;

      /* {hex[:3]}/{hex[3:5]}_g{group}/{hex}.bin */
      append_hex (path, hash, len);
      {
        g_autofree char *hex = g_strdup (path->str + start);

        g_string_truncate (path, start);
        g_string_append_len (path, hex, 3);
        g_string_append_c (path, '/');
        g_string_append_len (path, hex + 3, 2);
        g_string_append_printf (path, "_g%u/", kv_key_get_group (key));
        g_string_append (path, hex);
        g_string_append (path, ".bin");
      }
    }
  else
    {
      g_autoptr(GBytes) offload = kv_key_to_offload_key (key);
      gsize offload_len = 0;
      const guint8 *data = g_bytes_get_data (offload, &offload_len);
      guint64 shard = kv_fs_checksum (data, offload_len);

      g_string_append_printf (path, "%02x/", (guint) (shard >> 56) & 0xff);
      append_hex (path, hash, len);
      g_string_append_printf (path, "_g%u.kv", kv_key_get_group (key));
    }

  if (out_root != NULL)
    *out_root = root;
  return g_string_free (path, FALSE);
}

gboolean
kv_fs_layout_is_temp_name (const char *name)
{
  return g_str_has_suffix (name, ".tmp");
}

/* ---- scanning ----------------------------------------------------------- */

typedef struct
{
  const KvFsLayout  *layout;
  guint              root;
  KvFsScanChunkFunc  chunk_func;
  KvFsScanTempFunc   temp_func;
  gpointer           user_data;
  const gint        *cancel;
  guint64            n_seen;
} ScanState;

static gboolean
parse_hex (const char *hex,
           gsize       hex_len,
           guint8     *out)
{
  if (hex_len == 0 || hex_len % 2 != 0 || hex_len > 2 * KV_FS_MAX_KEY_HASH_LEN)
    return FALSE;
  for (gsize i = 0; i < hex_len; i += 2)
    {
      int hi = g_ascii_xdigit_value (hex[i]);
      int lo = g_ascii_xdigit_value (hex[i + 1]);

      if (hi < 0 || lo < 0 || g_ascii_isupper (hex[i]) || g_ascii_isupper (hex[i + 1]))
        return FALSE;
      out[i / 2] = (hi << 4) | lo;
    }
  return TRUE;
}

static gboolean
parse_group (const char *str,
             const char *end,
             guint32    *out)
{
  guint64 v = 0;

  if (str == end)
    return FALSE;
  for (const char *p = str; p < end; p++)
    {
      if (!g_ascii_isdigit (*p))
        return FALSE;
      v = v * 10 + (*p - '0');
      if (v > G_MAXUINT32)
        return FALSE;
    }
  *out = (guint32) v;
  return TRUE;
}

/* kvtier: "<hex>_g<group>.kv" */
static KvKey *
parse_kvtier_name (const char *name)
{
  guint8 hash[KV_FS_MAX_KEY_HASH_LEN];
  const char *suffix;
  const char *g;
  guint32 group;

  if (!g_str_has_suffix (name, ".kv"))
    return NULL;
  suffix = name + strlen (name) - 3;
  g = g_strrstr_len (name, suffix - name, "_g");
  if (g == NULL || !parse_group (g + 2, suffix, &group) ||
      !parse_hex (name, g - name, hash))
    return NULL;
  return kv_key_new (hash, (g - name) / 2, group);
}

/* vLLM: "<hex>.bin" inside "<hex[3:5]>_g<group>" */
static KvKey *
parse_vllm_name (const char *dir1,
                 const char *dir2,
                 const char *name)
{
  guint8 hash[KV_FS_MAX_KEY_HASH_LEN];
  const char *g = strstr (dir2, "_g");
  gsize hex_len;
  guint32 group;

  if (!g_str_has_suffix (name, ".bin") || g == NULL ||
      !parse_group (g + 2, dir2 + strlen (dir2), &group))
    return NULL;
  hex_len = strlen (name) - 4;
  if (hex_len < 5 || strncmp (name, dir1, 3) != 0 || strncmp (name + 3, dir2, 2) != 0 ||
      g - dir2 != 2 || !parse_hex (name, hex_len, hash))
    return NULL;
  return kv_key_new (hash, hex_len / 2, group);
}

static int
open_subdir (int         dirfd,
             const char *name)
{
  return openat (dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static void
scan_leaf_dir (ScanState  *state,
               int         dirfd,
               const char *dir_path,
               const char *dir1,
               const char *dir2)
{
  DIR *dir = fdopendir (dirfd);
  struct dirent *de;

  if (dir == NULL)
    {
      close (dirfd);
      return;
    }
  while ((de = readdir (dir)) != NULL && !g_atomic_int_get (state->cancel))
    {
      struct stat st;
      g_autofree char *path = NULL;
      KvKey *key;

      if (de->d_name[0] == '.')
        continue;
      if (fstatat (dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG (st.st_mode))
        continue;
      path = g_build_filename (dir_path, de->d_name, NULL);
      state->n_seen++;
      if (kv_fs_layout_is_temp_name (de->d_name))
        {
          if (state->temp_func != NULL)
            state->temp_func (path, (gint64) st.st_mtim.tv_sec * G_USEC_PER_SEC +
                                    st.st_mtim.tv_nsec / 1000, state->user_data);
          continue;
        }
      if (state->layout->kind == KV_FS_LAYOUT_KIND_VLLM)
        key = parse_vllm_name (dir1, dir2, de->d_name);
      else
        key = parse_kvtier_name (de->d_name);
      if (key == NULL)
        continue;
      /* A file outside the directory its name maps to is unreachable. */
      {
        g_autofree char *expected = kv_fs_layout_chunk_path (state->layout, key, NULL);

        if (g_strcmp0 (expected, path) == 0 && state->chunk_func != NULL)
          state->chunk_func (key, state->root, path, st.st_size,
                             (gint64) st.st_mtim.tv_sec * G_USEC_PER_SEC +
                             st.st_mtim.tv_nsec / 1000, state->user_data);
      }
      kv_key_unref (key);
    }
  closedir (dir);
}

guint64
kv_fs_layout_scan (const KvFsLayout  *self,
                   guint              root,
                   KvFsScanChunkFunc  chunk_func,
                   KvFsScanTempFunc   temp_func,
                   gpointer           user_data,
                   const gint        *cancel)
{
  ScanState state = { self, root, chunk_func, temp_func, user_data, cancel, 0 };
  int top_fd;
  DIR *top;
  struct dirent *d1;

  g_return_val_if_fail (root < self->n_roots, 0);

  top_fd = open (self->chunk_dirs[root], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (top_fd < 0)
    return 0;
  top = fdopendir (top_fd);
  if (top == NULL)
    {
      close (top_fd);
      return 0;
    }

  /* kvtier: one level of shard directories, then the files; vLLM: two. */
  while ((d1 = readdir (top)) != NULL && !g_atomic_int_get (cancel))
    {
      int fd1;
      DIR *dir1;
      struct dirent *d2;
      g_autofree char *name1 = NULL;

      if (d1->d_name[0] == '.')
        continue;
      fd1 = open_subdir (top_fd, d1->d_name);
      if (fd1 < 0)
        continue;
      if (self->kind == KV_FS_LAYOUT_KIND_KVTIER)
        {
          g_autofree char *path = g_build_filename (self->chunk_dirs[root], d1->d_name, NULL);

          scan_leaf_dir (&state, fd1, path, d1->d_name, NULL);
          continue;
        }
      dir1 = fdopendir (fd1);
      if (dir1 == NULL)
        {
          close (fd1);
          continue;
        }
      name1 = g_strdup (d1->d_name);
      while ((d2 = readdir (dir1)) != NULL && !g_atomic_int_get (cancel))
        {
          g_autofree char *path = NULL;
          int fd2;

          if (d2->d_name[0] == '.')
            continue;
          fd2 = open_subdir (fd1, d2->d_name);
          if (fd2 < 0)
            continue;
          path = g_build_filename (self->chunk_dirs[root], name1, d2->d_name, NULL);
          scan_leaf_dir (&state, fd2, path, name1, d2->d_name);
        }
      closedir (dir1);
    }
  closedir (top);
  return state.n_seen;
}
