/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-layout.h"
#include "kv-fs-io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
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
  guint8         ns_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];

  uid_t          uid;          /* the tier's user: owns every directory and file */
  gint64         trusted_gid;  /* a group trusted to write them too, or -1 */
  GMutex         dirs_lock;
  KvFsRootDirs **dirs;         /* per root, held open (dirs_lock) */
  gboolean      *devices;      /* per root: layout=slab on a block device */
};

void
kv_fs_layout_free (KvFsLayout *self)
{
  if (self == NULL)
    return;
  for (guint i = 0; self->dirs != NULL && i < self->n_roots; i++)
    kv_fs_root_dirs_unref (self->dirs[i]);
  g_free (self->dirs);
  g_free (self->devices);
  g_mutex_clear (&self->dirs_lock);
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
  self->uid = geteuid ();
  self->trusted_gid = -1;
  g_mutex_init (&self->dirs_lock);

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

      kv_chunk_namespace_digest (namespace_, block_size, self->ns_digest);
      hex = digest_hex (self->ns_digest, 8);
      /* layout=slab: a directory of its own, holding only slab files */
      dir_name = g_strdup_printf (kind == KV_FS_LAYOUT_KIND_SLAB ? "kvslab-%s" : "kvtier-%s", hex);
      for (guint i = 0; i < self->n_roots; i++)
        {
          g_ptr_array_add (chunk_dirs, g_build_filename (root_list[i], dir_name, NULL));
          g_ptr_array_add (meta_dirs, g_build_filename (root_list[i], dir_name, NULL));
        }

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "format_version");
      json_builder_add_int_value (builder, KV_CHUNK_FORMAT_VERSION);
      json_builder_set_member_name (builder, "namespace");
      json_builder_add_string_value (builder, namespace_ ? namespace_ : "");
      json_builder_set_member_name (builder, "block_size");
      json_builder_add_int_value (builder, block_size);
      json_builder_set_member_name (builder, "header_size");
      json_builder_add_int_value (builder, KV_CHUNK_HEADER_SIZE);
      if (kind == KV_FS_LAYOUT_KIND_SLAB)
        {
          json_builder_set_member_name (builder, "layout");
          json_builder_add_string_value (builder, "slab");
        }
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
  return self->kind == KV_FS_LAYOUT_KIND_KVTIER || self->kind == KV_FS_LAYOUT_KIND_SLAB;
}

gsize
kv_fs_layout_get_file_size (const KvFsLayout *self)
{
  return self->block_size + (kv_fs_layout_has_header (self) ? KV_CHUNK_HEADER_SIZE : 0);
}

/* ---- directories -------------------------------------------------------- */

/*
 * Every directory the tier uses is opened once, by walking from the root
 * with openat (O_DIRECTORY | O_NOFOLLOW), and checked: owned by the
 * tier's user and writable by nobody else (see kv_fs_layout_trusts()).
 * Every file operation is then made relative to those descriptors, so
 * that nobody but the tier's user can redirect it, even by renaming a
 * directory above the root after the tier started.
 */
struct _KvFsRootDirs
{
  gint  ref_count;                      /* atomic */
  int   chunk_fd;                       /* the top of the chunk tree */
  int   shard_fds[KV_FS_N_SHARDS];      /* kvtier layout; -1 otherwise */
  int   spare_fd;                       /* (atomic) the spare directory once
                                         * opened, or -1 */
};

static void
root_dirs_close (KvFsRootDirs *dirs)
{
  if (dirs->chunk_fd >= 0)
    close (dirs->chunk_fd);
  for (guint i = 0; i < KV_FS_N_SHARDS; i++)
    if (dirs->shard_fds[i] >= 0)
      close (dirs->shard_fds[i]);
  if (dirs->spare_fd >= 0)
    close (dirs->spare_fd);
  g_free (dirs);
}

KvFsRootDirs *
kv_fs_root_dirs_ref (KvFsRootDirs *dirs)
{
  g_atomic_int_inc (&dirs->ref_count);
  return dirs;
}

void
kv_fs_root_dirs_unref (KvFsRootDirs *dirs)
{
  if (dirs != NULL && g_atomic_int_dec_and_test (&dirs->ref_count))
    root_dirs_close (dirs);
}

int
kv_fs_root_dirs_get_chunk_fd (const KvFsRootDirs *dirs)
{
  return dirs->chunk_fd;
}

void
kv_fs_layout_set_trusted_gid (KvFsLayout *self,
                              gint64      gid)
{
  self->trusted_gid = gid;
}

gint64
kv_fs_layout_get_trusted_gid (const KvFsLayout *self)
{
  return self->trusted_gid;
}

/* Whether the tier may use what @st describes, a directory or (with
 * @is_file) a chunk file: writable by nobody but the tier's user (the
 * effective uid), who owns it; with a trusted group, also what belongs
 * to that group (only its members, or root, can give a file the group),
 * writable by its members. Never what anyone may write. A directory
 * another user can write lets that user rename files in and out of it;
 * a file of another user holds bytes the tier never wrote (a checksum
 * detects damage, not forgery). */
gboolean
kv_fs_layout_trusts (const KvFsLayout  *self,
                     const struct stat *st,
                     gboolean           is_file)
{
  gboolean in_trusted_group = self->trusted_gid >= 0 && (gint64) st->st_gid == self->trusted_gid;

  if (is_file ? !S_ISREG (st->st_mode) : !S_ISDIR (st->st_mode))
    return FALSE;
  if ((st->st_mode & S_IWOTH) != 0)
    return FALSE;
  if (in_trusted_group)
    return TRUE;
  return st->st_uid == self->uid && (st->st_mode & S_IWGRP) == 0;
}

static void
set_untrusted_error (const KvFsLayout  *self,
                     GError           **error,
                     const char        *what,
                     const char        *path,
                     const struct stat *st)
{
  g_autofree char *trust = NULL;

  if (self->trusted_gid >= 0)
    trust = g_strdup_printf (", or owned by it and writable by the trusted group %" G_GINT64_FORMAT
                             " only", self->trusted_gid);
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
               "The fs tier %s ‘%s’ is %s owned by uid %u, group %u, mode %04o: it must be a "
               "directory owned by uid %u (the tier's user) and writable by no other user%s "
               "(another user could redirect or forge the tier's files)",
               what, path, S_ISDIR (st->st_mode) ? "a directory" : "not a directory",
               (guint) st->st_uid, (guint) st->st_gid, (guint) (st->st_mode & 07777),
               (guint) self->uid, trust != NULL ? trust : "");
}

/* Opens the root @path (creating it and its parents, 0700, if missing)
 * and checks it. The root's own name may be a symbolic link (a cache put
 * on another disk) when the link belongs to the tier's user or to root:
 * the directory it names is checked like any other. */
static int
open_root (const KvFsLayout  *self,
           const char        *path,
           GError           **error)
{
  struct stat st;
  int fd;

  if (lstat (path, &st) == 0 && S_ISLNK (st.st_mode) &&
      st.st_uid != self->uid && st.st_uid != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "The fs tier root ‘%s’ is a symbolic link owned by uid %u, mode %04o: "
                   "only links of uid %u (the tier's user) or of root are followed",
                   path, (guint) st.st_uid, (guint) (st.st_mode & 07777), (guint) self->uid);
      return -1;
    }
  fd = open (path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && g_mkdir_with_parents (path, 0700) == 0)
    fd = open (path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot open the fs tier root ‘%s’: %s", path, g_strerror (errsv));
      return -1;
    }
  if (fstat (fd, &st) != 0)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot examine the fs tier root ‘%s’: %s", path, g_strerror (errsv));
      close (fd);
      return -1;
    }
  if (!kv_fs_layout_trusts (self, &st, FALSE))
    {
      set_untrusted_error (self, error, "root", path, &st);
      close (fd);
      return -1;
    }
  return fd;
}

/* Opens the directory @name in @parent_fd without following a symbolic
 * link, creating it (0700) if missing and @create, and checks it.
 * Returns the descriptor, or -1 with errno set (EPERM: not trusted). */
static int
open_dir_at (const KvFsLayout *self,
             int               parent_fd,
             const char       *name,
             gboolean          create,
             struct stat      *out_st)
{
  const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int fd = openat (parent_fd, name, flags);

  memset (out_st, 0, sizeof *out_st);
  if (fd < 0 && errno == ENOENT && create &&
      (mkdirat (parent_fd, name, 0700) == 0 || errno == EEXIST))
    fd = openat (parent_fd, name, flags);
  if (fd < 0)
    {
      /* ELOOP (a symbolic link) or ENOTDIR: somebody else's doing */
      if (errno == ELOOP || errno == ENOTDIR)
        {
          if (fstatat (parent_fd, name, out_st, AT_SYMLINK_NOFOLLOW) != 0)
            memset (out_st, 0, sizeof *out_st);
          errno = EPERM;
        }
      return -1;
    }
  if (fstat (fd, out_st) != 0 || !kv_fs_layout_trusts (self, out_st, FALSE))
    {
      int errsv = out_st->st_mode == 0 ? errno : EPERM;

      close (fd);
      errno = errsv;
      return -1;
    }
  return fd;
}

/* open_dir_at() with a GError naming the directory. */
static int
open_dir_at_or_error (const KvFsLayout  *self,
                      int                parent_fd,
                      const char        *parent_path,
                      const char        *name,
                      const char        *what,
                      GError           **error)
{
  struct stat st = { 0 };
  int fd = open_dir_at (self, parent_fd, name, TRUE, &st);

  if (fd < 0)
    {
      int errsv = errno;
      g_autofree char *path = g_build_filename (parent_path, name, NULL);

      if (errsv == EPERM && S_ISLNK (st.st_mode))
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                     "The fs tier %s ‘%s’ is a symbolic link (owned by uid %u): the tier "
                     "follows no link inside its root", what, path, (guint) st.st_uid);
      else if (errsv == EPERM)
        set_untrusted_error (self, error, what, path, &st);
      else
        g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                     "Cannot create the fs tier %s ‘%s’: %s", what, path, g_strerror (errsv));
    }
  return fd;
}

/* Writes @contents to @name in @dir_fd unless it exists, through a
 * private temporary file and a rename, so that readers never see half a
 * file. */
static gboolean
write_once_at (int          dir_fd,
               const char  *dir_path,
               const char  *name,
               const char  *contents,
               GError     **error)
{
  g_autofree char *tmp = NULL;
  struct stat st;
  gsize len = strlen (contents);
  int errsv;
  int fd;

  if (fstatat (dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
    return TRUE;

  tmp = g_strdup_printf ("%s.%08x%08x.tmp", name, g_random_int (), g_random_int ());
  fd = openat (dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    {
      errsv = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot write in the fs tier directory ‘%s’: %s", dir_path,
                   g_strerror (errsv));
      return FALSE;
    }
  errsv = kv_fs_io_pwrite_full (fd, contents, len, 0);
  if (errsv != 0)
    {
      close (fd);
      unlinkat (dir_fd, tmp, 0);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot write ‘%s/%s’: %s", dir_path, tmp, g_strerror (errsv));
      return FALSE;
    }
  close (fd);
  if (renameat (dir_fd, tmp, dir_fd, name) != 0)
    {
      errsv = errno;
      unlinkat (dir_fd, tmp, 0);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Cannot rename ‘%s/%s’ to ‘%s’: %s", dir_path, tmp, name, g_strerror (errsv));
      return FALSE;
    }
  return TRUE;
}

/* Opens (creating what is missing) root @i's directories and writes its
 * identity file if missing. */
static KvFsRootDirs *
open_root_dirs (const KvFsLayout  *self,
                guint              i,
                GError           **error)
{
  g_autoptr(GError) local_error = NULL;
  g_autofree char *meta_name = g_path_get_basename (self->meta_dirs[i]);
  g_autofree char *chunk_name = g_path_get_basename (self->chunk_dirs[i]);
  KvFsRootDirs *dirs = g_new0 (KvFsRootDirs, 1);
  int root_fd;
  int meta_fd;

  dirs->ref_count = 1;
  dirs->chunk_fd = -1;
  dirs->spare_fd = -1;
  for (guint s = 0; s < KV_FS_N_SHARDS; s++)
    dirs->shard_fds[s] = -1;

  root_fd = open_root (self, self->roots[i], error);
  if (root_fd < 0)
    goto fail;
  meta_fd = open_dir_at_or_error (self, root_fd, self->roots[i], meta_name,
                                  "namespace directory", error);
  if (meta_fd < 0)
    {
      close (root_fd);
      goto fail;
    }
  if (!write_once_at (meta_fd, self->meta_dirs[i], self->meta_name, self->meta_contents, error))
    {
      close (meta_fd);
      close (root_fd);
      goto fail;
    }
  if (g_strcmp0 (meta_name, chunk_name) == 0)
    dirs->chunk_fd = meta_fd;
  else
    {
      close (meta_fd);
      dirs->chunk_fd = open_dir_at_or_error (self, root_fd, self->roots[i], chunk_name,
                                             "chunk directory", error);
    }
  close (root_fd);
  if (dirs->chunk_fd < 0)
    goto fail;

  /* The kvtier layout's 256 shard directories exist from the start, so
   * no store ever waits for a mkdir, and stay open, so that no store
   * pays a lookup of its directory either. */
  for (guint s = 0; self->kind == KV_FS_LAYOUT_KIND_KVTIER && s < KV_FS_N_SHARDS; s++)
    {
      char name[3];

      g_snprintf (name, sizeof name, "%02x", s);
      dirs->shard_fds[s] = open_dir_at_or_error (self, dirs->chunk_fd, self->chunk_dirs[i],
                                                 name, "shard directory", error);
      if (dirs->shard_fds[s] < 0)
        goto fail;
    }
  return dirs;

fail:
  root_dirs_close (dirs);
  return NULL;
}

/* Creates every root, the namespace directories and their identity file
 * (namespace.json, or vLLM's config.json), checking every directory that
 * was already there, and holds them open. Directories are 0700 and files
 * 0600: KV bytes are derived from users' prompts. */
gboolean
kv_fs_layout_create_dirs (KvFsLayout  *self,
                          GError     **error)
{
  g_return_val_if_fail (self->dirs == NULL, FALSE);

  self->dirs = g_new0 (KvFsRootDirs *, self->n_roots);
  self->devices = g_new0 (gboolean, self->n_roots);
  for (guint i = 0; i < self->n_roots; i++)
    {
      struct stat st;

      /* layout=slab on a block device: no directory, the device is the
       * slab (see KvFsSlab, which opens and checks it) */
      if (self->kind == KV_FS_LAYOUT_KIND_SLAB && stat (self->roots[i], &st) == 0 &&
          S_ISBLK (st.st_mode))
        {
          KvFsRootDirs *dirs = g_new0 (KvFsRootDirs, 1);

          dirs->ref_count = 1;
          dirs->chunk_fd = -1;
          dirs->spare_fd = -1;
          for (guint s = 0; s < KV_FS_N_SHARDS; s++)
            dirs->shard_fds[s] = -1;
          self->dirs[i] = dirs;
          self->devices[i] = TRUE;
          continue;
        }
      self->dirs[i] = open_root_dirs (self, i, error);
      if (self->dirs[i] == NULL)
        return FALSE;
    }
  return TRUE;
}

/* Whether @root is a block device (layout=slab), known once
 * kv_fs_layout_create_dirs() ran. */
gboolean
kv_fs_layout_root_is_device (const KvFsLayout *self,
                             guint             root)
{
  g_return_val_if_fail (root < self->n_roots, FALSE);
  return self->devices != NULL && self->devices[root];
}

/* The directories of @root, held open; (transfer full). */
KvFsRootDirs *
kv_fs_layout_ref_dirs (const KvFsLayout *self,
                       guint             root)
{
  KvFsRootDirs *dirs;

  g_return_val_if_fail (root < self->n_roots && self->dirs != NULL, NULL);
  g_mutex_lock (&((KvFsLayout *) self)->dirs_lock);
  dirs = kv_fs_root_dirs_ref (self->dirs[root]);
  g_mutex_unlock (&((KvFsLayout *) self)->dirs_lock);
  return dirs;
}

/* A file could not be created in @stale, @root's directories: they were
 * removed (the root deleted under a running tier). Opens them again from
 * the root's path, creating them and the identity file as at the start
 * and checking them the same way. Returns the directories now in use
 * (transfer full; @stale itself when they cannot be made), never NULL.
 * Any thread; concurrent callers make them once. */
KvFsRootDirs *
kv_fs_layout_reopen_dirs (const KvFsLayout *self,
                          guint             root,
                          KvFsRootDirs     *stale)
{
  KvFsLayout *mutable = (KvFsLayout *) self;
  KvFsRootDirs *dirs;

  g_mutex_lock (&mutable->dirs_lock);
  if (self->dirs[root] == stale)
    {
      g_autoptr(GError) error = NULL;
      KvFsRootDirs *fresh = open_root_dirs (self, root, &error);

      if (fresh != NULL)
        {
          g_message ("fs tier: made the directories of root %s again", self->roots[root]);
          kv_fs_root_dirs_unref (mutable->dirs[root]);
          mutable->dirs[root] = fresh;
        }
      else
        g_warning ("fs tier: cannot make the directories of root %s again: %s",
                   self->roots[root], error->message);
    }
  dirs = kv_fs_root_dirs_ref (self->dirs[root]);
  g_mutex_unlock (&mutable->dirs_lock);
  return dirs;
}

/* Opens the directory of @path (a file under @dirs' chunk directory):
 * a shard directory of the kvtier layout is one already held open; any
 * other is walked to from the chunk directory, one openat (O_DIRECTORY |
 * O_NOFOLLOW) per level, creating it (0700) with @create, each level
 * checked. Returns the descriptor (closed by the caller when
 * *@out_owned) with *@out_name the file's name in it, or -errno:
 * -EPERM for a directory the tier does not trust, -EINVAL for a path
 * outside the chunk directory. */
int
kv_fs_layout_open_parent (const KvFsLayout  *self,
                          guint              root,
                          KvFsRootDirs      *dirs,
                          const char        *path,
                          gboolean           create,
                          const char       **out_name,
                          gboolean          *out_owned)
{
  const char *base = self->chunk_dirs[root];
  gsize base_len = strlen (base);
  const char *rel;
  const char *name;
  const char *p;
  int fd;
  guint depth = 0;

  *out_owned = FALSE;
  if (strncmp (path, base, base_len) != 0 || path[base_len] != '/')
    return -EINVAL;
  rel = path + base_len + 1;
  name = strrchr (rel, '/');
  name = name != NULL ? name + 1 : rel;
  *out_name = name;
  if (*name == '\0')
    return -EINVAL;
  if (name == rel)
    return dirs->chunk_fd;
  if (self->kind == KV_FS_LAYOUT_KIND_KVTIER && name - rel == 3 &&
      g_ascii_isxdigit (rel[0]) && g_ascii_isxdigit (rel[1]) &&
      !g_ascii_isupper (rel[0]) && !g_ascii_isupper (rel[1]))
    return dirs->shard_fds[g_ascii_xdigit_value (rel[0]) * 16 + g_ascii_xdigit_value (rel[1])];

  /* the spare directory: held open once a store took a spare from it
   * (one stays for the tier's life once made) */
  if (name - rel == sizeof KV_FS_SPARE_DIR_NAME &&
      strncmp (rel, KV_FS_SPARE_DIR_NAME "/", sizeof KV_FS_SPARE_DIR_NAME) == 0)
    {
      struct stat st;

      fd = g_atomic_int_get (&dirs->spare_fd);
      if (fd >= 0)
        return fd;
      fd = open_dir_at (self, dirs->chunk_fd, KV_FS_SPARE_DIR_NAME, FALSE, &st);
      if (fd < 0)
        return -errno;
      if (!g_atomic_int_compare_and_exchange (&dirs->spare_fd, -1, fd))
        {
          close (fd);
          fd = g_atomic_int_get (&dirs->spare_fd);
        }
      return fd;
    }

  fd = dirs->chunk_fd;
  for (p = rel; p < name; depth++)
    {
      const char *slash = strchr (p, '/');
      g_autofree char *component = g_strndup (p, slash - p);
      struct stat st;
      int next;

      if (depth >= KV_FS_MAX_DIR_DEPTH || *component == '\0' ||
          strcmp (component, ".") == 0 || strcmp (component, "..") == 0)
        {
          if (*out_owned)
            close (fd);
          *out_owned = FALSE;
          return -EINVAL;
        }
      next = open_dir_at (self, fd, component, create, &st);
      if (next < 0)
        {
          int errsv = errno;

          if (*out_owned)
            close (fd);
          *out_owned = FALSE;
          return -errsv;
        }
      if (*out_owned)
        close (fd);
      fd = next;
      *out_owned = TRUE;
      p = slash + 1;
    }
  return fd;
}

/* Opens @root's chunk-directory subdirectory @name (one level, such as
 * the spare directory) like kv_fs_layout_open_parent() does. Returns an
 * owned descriptor, or -1 with errno set. */
int
kv_fs_layout_open_subdir (const KvFsLayout *self,
                          guint             root,
                          const char       *name,
                          gboolean          create)
{
  g_autoptr(KvFsRootDirs) dirs = kv_fs_layout_ref_dirs (self, root);
  struct stat st;

  return open_dir_at (self, dirs->chunk_fd, name, create, &st);
}

/* Deletes @path (a file under @root's chunk directory) relative to the
 * directories held open. Returns 0 or an errno. */
int
kv_fs_layout_unlink (const KvFsLayout *self,
                     guint             root,
                     const char       *path)
{
  g_autoptr(KvFsRootDirs) dirs = kv_fs_layout_ref_dirs (self, root);
  const char *name;
  gboolean owned;
  int fd = kv_fs_layout_open_parent (self, root, dirs, path, FALSE, &name, &owned);
  int err = 0;

  if (fd < 0)
    return -fd;
  if (unlinkat (fd, name, 0) != 0)
    err = errno;
  if (owned)
    close (fd);
  return err;
}

/* ---- naming ------------------------------------------------------------- */

gboolean
kv_fs_layout_key_supported (const KvFsLayout *self,
                            const KvKey      *key)
{
  gsize len = 0;

  kv_key_get_hash (key, &len);
  if (self->kind == KV_FS_LAYOUT_KIND_VLLM)
    return len >= 3 && len <= KV_CHUNK_MAX_KEY_HASH_LEN;
  return kv_chunk_key_fits (key);
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
      guint64 shard = kv_chunk_checksum (data, offload_len);

      g_string_append_printf (path, "%02x/", (guint) (shard >> 56) & 0xff);
      append_hex (path, hash, len);
      g_string_append_printf (path, "_g%u.kv", kv_key_get_group (key));
    }

  if (out_root != NULL)
    *out_root = root;
  return g_string_free (path, FALSE);
}

/* ---- scanning ----------------------------------------------------------- */

typedef struct
{
  const KvFsLayout    *layout;
  guint                root;
  const KvFsScanFuncs *funcs;
  gpointer             user_data;
  const gint          *cancel;
  guint64              n_seen;
} ScanState;

static gboolean
parse_hex (const char *hex,
           gsize       hex_len,
           guint8     *out)
{
  if (hex_len == 0 || hex_len % 2 != 0 || hex_len > 2 * KV_CHUNK_MAX_KEY_HASH_LEN)
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
  guint8 hash[KV_CHUNK_MAX_KEY_HASH_LEN];
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
  guint8 hash[KV_CHUNK_MAX_KEY_HASH_LEN];
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

/* The names the tier's own format gives temporary files: kvtier's
 * "<chunk name>_<16 hex>-<8 hex>.tmp" (see kv_fs_temp_path()) in both
 * layouts and, in the vLLM layout, vLLM's "<chunk name>_<decimal>.tmp";
 * the chunk name must be one this directory can hold. Nothing else is
 * ever deleted as a temporary file. */
static gboolean
is_own_temp_name (const KvFsLayout *self,
                  const char       *dir1,
                  const char       *dir2,
                  const char       *name)
{
  gsize len = strlen (name);
  const char *suffix;
  const char *underscore;
  g_autofree char *chunk_name = NULL;
  KvKey *key;
  gboolean ours = FALSE;

  if (len < 5 || !g_str_has_suffix (name, ".tmp"))
    return FALSE;
  suffix = name + len - 4;
  underscore = g_strrstr_len (name, suffix - name, "_");
  if (underscore == NULL)
    return FALSE;
  if (suffix - underscore == 1 + 16 + 1 + 8 && underscore[17] == '-')
    {
      ours = TRUE;
      for (const char *p = underscore + 1; p < suffix; p++)
        if (p != underscore + 17 && !(g_ascii_isxdigit (*p) && !g_ascii_isupper (*p)))
          ours = FALSE;
    }
  if (!ours && self->kind == KV_FS_LAYOUT_KIND_VLLM &&
      suffix - underscore > 1 && suffix - underscore <= 20)
    {
      ours = TRUE;
      for (const char *p = underscore + 1; p < suffix; p++)
        if (!g_ascii_isdigit (*p))
          ours = FALSE;
    }
  if (!ours)
    return FALSE;
  chunk_name = g_strndup (name, underscore - name);
  if (self->kind == KV_FS_LAYOUT_KIND_VLLM)
    key = parse_vllm_name (dir1, dir2, chunk_name);
  else
    key = parse_kvtier_name (chunk_name);
  if (key == NULL)
    return FALSE;
  kv_key_unref (key);
  return TRUE;
}

static int
open_subdir (int         dirfd,
             const char *name)
{
  return openat (dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static gint64
mtime_us (const struct stat *st)
{
  return (gint64) st->st_mtim.tv_sec * G_USEC_PER_SEC + st->st_mtim.tv_nsec / 1000;
}

/* Scans one directory of chunk files; takes @dirfd. */
static void
scan_leaf_dir (ScanState  *state,
               int         dirfd,
               const char *dir_path,
               const char *dir1,
               const char *dir2)
{
  DIR *dir = fdopendir (dirfd);
  struct dirent *de;
  struct stat st;

  if (dir == NULL)
    {
      close (dirfd);
      return;
    }
  /* a shard directory replaced by another user's is none of ours */
  if (fstat (dirfd, &st) != 0 || !kv_fs_layout_trusts (state->layout, &st, FALSE))
    {
      if (state->funcs->foreign != NULL)
        state->funcs->foreign (dir_path, state->user_data);
      closedir (dir);
      return;
    }
  while ((de = readdir (dir)) != NULL && !g_atomic_int_get (state->cancel))
    {
      g_autofree char *path = NULL;
      gboolean is_temp;
      KvKey *key;

      if (de->d_name[0] == '.')
        continue;
      if (fstatat (dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        continue;
      is_temp = is_own_temp_name (state->layout, dir1, dir2, de->d_name);
      if (is_temp)
        key = NULL;
      else if (state->layout->kind == KV_FS_LAYOUT_KIND_VLLM)
        key = parse_vllm_name (dir1, dir2, de->d_name);
      else
        key = parse_kvtier_name (de->d_name);
      if (!is_temp && key == NULL)
        continue;   /* not a name of the tier's: not its business */
      path = g_build_filename (dir_path, de->d_name, NULL);
      state->n_seen++;
      if (!kv_fs_layout_trusts (state->layout, &st, TRUE))
        {
          /* another user's file (or a link, a directory...) under a
           * name of the tier's: never served, never deleted */
          if (state->funcs->foreign != NULL)
            state->funcs->foreign (path, state->user_data);
          g_clear_pointer (&key, kv_key_unref);
          continue;
        }
      if (is_temp)
        {
          if (state->funcs->temp != NULL)
            state->funcs->temp (dirfd, de->d_name, path, mtime_us (&st), state->user_data);
          continue;
        }
      /* A file outside the directory its name maps to is unreachable. */
      {
        g_autofree char *expected = kv_fs_layout_chunk_path (state->layout, key, NULL);

        if (g_strcmp0 (expected, path) == 0 && state->funcs->chunk != NULL)
          state->funcs->chunk (key, state->root, dirfd, de->d_name, path, st.st_size,
                               mtime_us (&st), state->user_data);
      }
      kv_key_unref (key);
    }
  closedir (dir);
}

guint64
kv_fs_layout_scan (const KvFsLayout     *self,
                   guint                 root,
                   const KvFsScanFuncs  *funcs,
                   gpointer              user_data,
                   const gint           *cancel)
{
  ScanState state = { self, root, funcs, user_data, cancel, 0 };
  g_autoptr(KvFsRootDirs) dirs = NULL;
  int top_fd;
  DIR *top;
  struct dirent *d1;

  g_return_val_if_fail (root < self->n_roots, 0);

  dirs = kv_fs_layout_ref_dirs (self, root);
  /* a descriptor of its own: readdir() moves its offset */
  top_fd = openat (dirs->chunk_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
      struct stat st;
      g_autofree char *name1 = NULL;
      g_autofree char *path1 = NULL;

      if (d1->d_name[0] == '.')
        continue;
      fd1 = open_subdir (top_fd, d1->d_name);
      if (fd1 < 0)
        continue;
      path1 = g_build_filename (self->chunk_dirs[root], d1->d_name, NULL);
      if (self->kind == KV_FS_LAYOUT_KIND_KVTIER)
        {
          scan_leaf_dir (&state, fd1, path1, d1->d_name, NULL);
          continue;
        }
      if (fstat (fd1, &st) != 0 || !kv_fs_layout_trusts (self, &st, FALSE))
        {
          if (funcs->foreign != NULL)
            funcs->foreign (path1, user_data);
          close (fd1);
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
          path = g_build_filename (path1, d2->d_name, NULL);
          scan_leaf_dir (&state, fd2, path, name1, d2->d_name);
        }
      closedir (dir1);
    }
  closedir (top);
  return state.n_seen;
}

/* Whether the chunk file of @key exists and is one the tier trusts
 * (checked relative to the directories held open). */
gboolean
kv_fs_layout_chunk_exists (const KvFsLayout *self,
                           const KvKey      *key)
{
  guint root = 0;
  g_autofree char *path = kv_fs_layout_chunk_path (self, key, &root);
  g_autoptr(KvFsRootDirs) dirs = kv_fs_layout_ref_dirs (self, root);
  const char *name = NULL;
  gboolean owned = FALSE;
  gboolean exists;
  struct stat st;
  int fd = kv_fs_layout_open_parent (self, root, dirs, path, FALSE, &name, &owned);

  if (fd < 0)
    return FALSE;
  exists = fstatat (fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
           kv_fs_layout_trusts (self, &st, TRUE);
  if (owned)
    close (fd);
  return exists;
}

/* Whether @dir_fd holds a name not starting with a dot (with
 * @dirs_only, one of a directory). */
static gboolean
dir_fd_has_entries (int      dir_fd,
                    gboolean dirs_only)
{
  int fd = openat (dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir (fd) : NULL;
  struct dirent *de;
  gboolean found = FALSE;

  if (dir == NULL)
    {
      if (fd >= 0)
        close (fd);
      return FALSE;
    }
  while (!found && (de = readdir (dir)) != NULL)
    {
      struct stat st;

      if (de->d_name[0] == '.')
        continue;
      found = !dirs_only ||
              (fstatat (fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR (st.st_mode));
    }
  closedir (dir);
  return found;
}

/* Whether @root's chunk directory holds any chunk yet, as far as a look
 * at its top can tell: a file in a kvtier shard directory, a directory
 * in vLLM's chunk directory. */
gboolean
kv_fs_layout_has_entries (const KvFsLayout *self,
                          guint             root)
{
  g_autoptr(KvFsRootDirs) dirs = kv_fs_layout_ref_dirs (self, root);

  if (self->kind != KV_FS_LAYOUT_KIND_KVTIER)
    return dir_fd_has_entries (dirs->chunk_fd, TRUE);
  for (guint s = 0; s < KV_FS_N_SHARDS; s++)
    if (dir_fd_has_entries (dirs->shard_fds[s], FALSE))
      return TRUE;
  return FALSE;
}
