/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-glib/json-glib.h>
#include <xxhash.h>

/* `kvtier inspect fs ROOT`: what an fs tier holds, read from disk as
 * doc/on-disk-format.md describes it (an implementation of its own, not the
 * plugin's code, so it also checks the plugin). */

#define HEADER_SIZE 4096
#define FORMAT_VERSION 1
#define MAX_HASH_LEN 112
#define STALE_TEMP_S 3600

enum {
  BAD_SHORT,
  BAD_MAGIC,
  BAD_HEADER_CHECKSUM,
  BAD_VERSION,
  BAD_NAMESPACE,
  BAD_KEY,
  BAD_LENGTH,
  BAD_PAYLOAD_CHECKSUM,
  BAD_SHARD,
  BAD_UNREADABLE,
  N_BAD
};

static const char * const bad_names[N_BAD] = {
  "short file", "bad magic", "header checksum mismatch", "unknown version",
  "another namespace", "another key", "wrong payload length", "payload checksum mismatch",
  "in the wrong shard directory", "unreadable",
};

typedef struct
{
  char      *dir;           /* kvtier-<ns16> or <model>_<digest>[_r<rank>] */
  gboolean   vllm;
  char      *name;          /* the namespace (kvtier) or model (vllm) */
  guint64    block_size;    /* 0 when unknown */
  guint64    chunks;
  guint64    bytes;
  guint64    wrong_size;
  guint64    verified;
  guint64    bad[N_BAD];
  guint64    temp_files;
  guint64    temp_bytes;
  guint64    spare_files;   /* written ahead by preallocate=true */
  guint64    spare_bytes;
  guint64    stale_temp_files;
  guint8     digest[32];
  GPtrArray *bad_files;     /* "path: reason", the first few */
} Namespace;

static void
namespace_free (Namespace *ns)
{
  g_free (ns->dir);
  g_free (ns->name);
  g_ptr_array_unref (ns->bad_files);
  g_free (ns);
}

static void
namespace_digest (const char *name,
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

static guint64
le64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, sizeof v);
  return GUINT64_FROM_LE (v);
}

static guint32
le32 (const guint8 *p)
{
  guint32 v;

  memcpy (&v, p, sizeof v);
  return GUINT32_FROM_LE (v);
}

/* Parses "<hash-hex>_g<group>.kv". */
static gboolean
parse_chunk_name (const char *base,
                  guint8     *hash,
                  gsize      *hash_len,
                  guint32    *group)
{
  const char *sep = strstr (base, "_g");
  gsize hex_len;
  char *end = NULL;
  guint64 g;

  if (sep == NULL || !g_str_has_suffix (base, ".kv"))
    return FALSE;
  hex_len = (gsize) (sep - base);
  if (hex_len == 0 || hex_len % 2 != 0 || hex_len / 2 > MAX_HASH_LEN)
    return FALSE;
  for (gsize i = 0; i < hex_len / 2; i++)
    {
      int hi = g_ascii_xdigit_value (base[2 * i]);
      int lo = g_ascii_xdigit_value (base[2 * i + 1]);

      if (hi < 0 || lo < 0)
        return FALSE;
      hash[i] = (guint8) (hi << 4 | lo);
    }
  g = g_ascii_strtoull (sep + 2, &end, 10);
  if (end == NULL || !g_str_equal (end, ".kv") || g > G_MAXUINT32)
    return FALSE;
  *hash_len = hex_len / 2;
  *group = (guint32) g;
  return TRUE;
}

static void
add_bad (Namespace  *ns,
         const char *path,
         int         reason)
{
  ns->bad[reason]++;
  if (ns->bad_files->len < 20)
    g_ptr_array_add (ns->bad_files, g_strdup_printf ("%s: %s", path, bad_names[reason]));
}

/* Checks one chunk file as a load would; returns the reason it is bad, or
 * -1 when it is good. */
static int
verify_chunk (Namespace  *ns,
              const char *path,
              const char *shard,
              const char *base)
{
  g_autofree guint8 *buf = NULL;
  guint8 hash[MAX_HASH_LEN];
  guint8 offload[MAX_HASH_LEN + 4];
  gsize hash_len = 0;
  guint32 group = 0, be_group;
  guint64 shard_hash;
  gsize total = HEADER_SIZE + ns->block_size;
  gsize done = 0;
  char expected_shard[8];
  int fd;

  if (!parse_chunk_name (base, hash, &hash_len, &group))
    return BAD_KEY;

  fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return BAD_UNREADABLE;
  buf = g_malloc (total);
  while (done < total)
    {
      ssize_t r = read (fd, buf + done, total - done);

      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        break;
      done += (gsize) r;
    }
  close (fd);

  if (done < total)
    return BAD_SHORT;
  if (memcmp (buf, "KVTIERFS", 8) != 0)
    return BAD_MAGIC;
  if (XXH3_64bits (buf, 4088) != le64 (buf + 4088))
    return BAD_HEADER_CHECKSUM;
  if (le32 (buf + 8) != FORMAT_VERSION || le32 (buf + 12) != HEADER_SIZE)
    return BAD_VERSION;
  if (memcmp (buf + 16, ns->digest, 32) != 0)
    return BAD_NAMESPACE;
  if (le32 (buf + 64) != group || le32 (buf + 68) != hash_len ||
      memcmp (buf + 88, hash, hash_len) != 0)
    return BAD_KEY;
  if (le64 (buf + 48) != ns->block_size)
    return BAD_LENGTH;
  if (XXH3_64bits (buf + HEADER_SIZE, ns->block_size) != le64 (buf + 56))
    return BAD_PAYLOAD_CHECKSUM;

  /* The shard directory: the top byte of XXH3 of the offload key. */
  memcpy (offload, hash, hash_len);
  be_group = GUINT32_TO_BE (group);
  memcpy (offload + hash_len, &be_group, 4);
  shard_hash = XXH3_64bits (offload, hash_len + 4);
  g_snprintf (expected_shard, sizeof expected_shard, "%02x",
              (guint) (shard_hash >> 56) & 0xff);
  if (!g_str_equal (shard, expected_shard))
    return BAD_SHARD;
  return -1;
}

static gboolean
is_temp (const char *base)
{
  return g_str_has_suffix (base, ".tmp");
}

static void
count_temp (Namespace         *ns,
            const struct stat *st,
            gint64             now_s)
{
  ns->temp_files++;
  ns->temp_bytes += (guint64) st->st_size;
  if (now_s - st->st_mtime > STALE_TEMP_S)
    ns->stale_temp_files++;
}

/* The spare directory of a tier with preallocate: files of a chunk's
 * size that hold no chunk yet (doc/on-disk-format.md). */
static void
scan_spares (Namespace  *ns,
             const char *dir,
             gint64      now_s)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *base;

  while (d != NULL && (base = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, base, NULL);
      struct stat st;

      if (lstat (path, &st) != 0 || !S_ISREG (st.st_mode))
        continue;
      if (is_temp (base))
        count_temp (ns, &st, now_s);
      else
        {
          ns->spare_files++;
          ns->spare_bytes += (guint64) st.st_size;
        }
    }
}

/* Walks a namespace directory: chunk files and temporary files. */
static void
scan_tree (Namespace  *ns,
           const char *dir,
           const char *rel,
           gboolean    verify,
           gint64      now_s)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *base;

  if (d == NULL)
    return;
  while ((base = g_dir_read_name (d)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, base, NULL);
      g_autofree char *sub = rel != NULL ? g_strdup_printf ("%s/%s", rel, base) : g_strdup (base);
      struct stat st;

      if (lstat (path, &st) != 0)
        continue;
      if (S_ISDIR (st.st_mode))
        {
          if (g_str_equal (base, ".kvtier-spare"))
            scan_spares (ns, path, now_s);
          else
            scan_tree (ns, path, sub, verify, now_s);
          continue;
        }
      if (!S_ISREG (st.st_mode))
        continue;

      if (is_temp (base))
        {
          count_temp (ns, &st, now_s);
          continue;
        }
      if (ns->vllm ? !g_str_has_suffix (base, ".bin") : !g_str_has_suffix (base, ".kv"))
        continue;

      ns->chunks++;
      ns->bytes += (guint64) st.st_size;
      if (ns->block_size > 0 &&
          (guint64) st.st_size != ns->block_size + (ns->vllm ? 0 : HEADER_SIZE))
        {
          ns->wrong_size++;
          add_bad (ns, path, BAD_SHORT);
          continue;
        }
      if (verify && !ns->vllm && ns->block_size > 0)
        {
          int reason = verify_chunk (ns, path, rel != NULL ? rel : "", base);

          if (reason >= 0)
            add_bad (ns, path, reason);
          else
            ns->verified++;
        }
    }
}

static int
compare_names (gconstpointer a,
               gconstpointer b)
{
  return g_strcmp0 (*(const char * const *) a, *(const char * const *) b);
}

/* vLLM keeps chunks in <model>_<digest>_r<rank>. */
static gboolean
is_vllm_chunk_dir (const char *base)
{
  const char *r = strrchr (base, '_');

  if (r == NULL || r[1] != 'r' || r[2] == '\0')
    return FALSE;
  for (const char *p = r + 2; *p; p++)
    if (!g_ascii_isdigit (*p))
      return FALSE;
  return TRUE;
}

static Namespace *
open_namespace (const char  *root,
                const char  *base,
                GError     **error)
{
  g_autofree char *dir = g_build_filename (root, base, NULL);
  g_autofree char *kvtier_json = g_build_filename (dir, "namespace.json", NULL);
  g_autofree char *vllm_json = g_build_filename (dir, "config.json", NULL);
  g_autoptr(JsonParser) parser = json_parser_new ();
  Namespace *ns;
  JsonObject *object;

  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    return NULL;
  ns = g_new0 (Namespace, 1);
  ns->dir = g_steal_pointer (&dir);
  ns->bad_files = g_ptr_array_new_with_free_func (g_free);

  if (g_str_has_prefix (base, "kvtier-") && g_file_test (kvtier_json, G_FILE_TEST_IS_REGULAR))
    {
      if (!json_parser_load_from_file (parser, kvtier_json, error))
        {
          namespace_free (ns);
          return NULL;
        }
      object = json_node_get_object (json_parser_get_root (parser));
      ns->name = g_strdup (json_object_get_string_member_with_default (object, "namespace", ""));
      ns->block_size = (guint64) json_object_get_int_member_with_default (object, "block_size", 0);
      namespace_digest (ns->name, ns->block_size, ns->digest);
      return ns;
    }
  /* vLLM's layout: the identity lives in <model>_<digest>/config.json, the
   * chunks in <model>_<digest>_r<rank>/. */
  if (!is_vllm_chunk_dir (base))
    {
      namespace_free (ns);
      return NULL;
    }
  ns->vllm = TRUE;
  if (g_file_test (vllm_json, G_FILE_TEST_IS_REGULAR) &&
      json_parser_load_from_file (parser, vllm_json, NULL) &&
      JSON_NODE_HOLDS_OBJECT (json_parser_get_root (parser)))
    {
      object = json_node_get_object (json_parser_get_root (parser));
      ns->name = g_strdup (json_object_get_string_member_with_default (object, "model_name", base));
    }
  else
    ns->name = g_strdup (base);
  return ns;
}

static void
print_namespace (const Namespace *ns,
                 gboolean         verify)
{
  g_autofree char *bytes = tool_format_size (ns->bytes);
  g_autofree char *block = tool_format_size (ns->block_size);
  g_autofree char *temp = tool_format_size (ns->temp_bytes);
  g_autofree char *spare = tool_format_size (ns->spare_bytes);
  guint64 n_bad = 0;

  for (int r = 0; r < N_BAD; r++)
    n_bad += ns->bad[r];

  if (ns->vllm)
    printf ("  %s  (vLLM layout, model %s)\n", ns->dir, ns->name);
  else
    printf ("  %s  (kvtier layout, namespace \"%s\", chunks of %s)\n", ns->dir, ns->name, block);
  printf ("    %-14s %" G_GUINT64_FORMAT " (%s)\n", "chunks", ns->chunks, bytes);
  if (ns->wrong_size > 0)
    printf ("    %-14s %" G_GUINT64_FORMAT "\n", "wrong size", ns->wrong_size);
  if (verify && !ns->vllm)
    {
      printf ("    %-14s %" G_GUINT64_FORMAT " ok, %" G_GUINT64_FORMAT " bad\n", "verified",
              ns->verified, n_bad);
      for (int r = 0; r < N_BAD; r++)
        if (ns->bad[r] > 0)
          printf ("      %-28s %" G_GUINT64_FORMAT "\n", bad_names[r], ns->bad[r]);
    }
  else if (verify)
    printf ("    %-14s not possible: vLLM files have no header or checksum\n", "verified");
  printf ("    %-14s %" G_GUINT64_FORMAT " (%s), %" G_GUINT64_FORMAT " stale (older than %d min)\n",
          "temp files", ns->temp_files, temp, ns->stale_temp_files, STALE_TEMP_S / 60);
  if (ns->spare_files > 0)
    printf ("    %-14s %" G_GUINT64_FORMAT " (%s), written ahead for chunks (preallocate)\n",
            "spare files", ns->spare_files, spare);
  for (guint i = 0; i < ns->bad_files->len; i++)
    printf ("    bad: %s\n", (const char *) g_ptr_array_index (ns->bad_files, i));
}

static JsonNode *
namespace_json (const Namespace *ns)
{
  g_autoptr(JsonBuilder) builder = json_builder_new ();

  json_builder_begin_object (builder);
  tool_json_add_string (builder, "directory", ns->dir);
  tool_json_add_string (builder, "layout", ns->vllm ? "vllm" : "kvtier");
  tool_json_add_string (builder, "namespace", ns->name);
  tool_json_add_int (builder, "chunk_bytes", (gint64) ns->block_size);
  tool_json_add_int (builder, "chunks", (gint64) ns->chunks);
  tool_json_add_int (builder, "bytes", (gint64) ns->bytes);
  tool_json_add_int (builder, "verified", (gint64) ns->verified);
  json_builder_set_member_name (builder, "bad");
  json_builder_begin_object (builder);
  for (int r = 0; r < N_BAD; r++)
    {
      tool_json_add_int (builder, bad_names[r], (gint64) ns->bad[r]);
    }
  json_builder_end_object (builder);
  tool_json_add_int (builder, "temp_files", (gint64) ns->temp_files);
  tool_json_add_int (builder, "stale_temp_files", (gint64) ns->stale_temp_files);
  tool_json_add_int (builder, "spare_files", (gint64) ns->spare_files);
  tool_json_add_int (builder, "spare_bytes", (gint64) ns->spare_bytes);
  json_builder_end_object (builder);
  return json_builder_get_root (builder);
}

int
tool_inspect (int    argc,
              char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) namespaces = g_ptr_array_new_with_free_func ((GDestroyNotify) namespace_free);
  g_auto(GStrv) roots = NULL;
  gboolean verify = FALSE;
  gboolean as_json = FALSE;
  gint64 now_s = g_get_real_time () / G_USEC_PER_SEC;
  guint64 total_bad = 0;
  GOptionEntry entries[] = {
    { "verify", 0, 0, G_OPTION_ARG_NONE, &verify,
      "Read every chunk and check its header, key, place and payload checksum", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &as_json, "Print the results as JSON", NULL },
    { NULL }
  };

  context = g_option_context_new ("fs ROOT - what an fs tier holds on disk");
  g_option_context_set_summary (context,
    "Lists the namespaces under ROOT (a comma-separated list for a multi-root tier) with\n"
    "their chunk count and bytes and the temporary files left by interrupted stores\n"
    "(stale when older than an hour). --verify checks every chunk as a load would\n"
    "(doc/on-disk-format.md). Exits with 1 when a chunk is bad or ROOT cannot be read.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return tool_usage_error (context, "%s", error->message);
  if (argc < 2)
    return tool_usage_error (context, "missing tier type (inspect fs ROOT)");
  if (!g_str_equal (argv[1], "fs"))
    return tool_usage_error (context, "cannot inspect tier type '%s': only fs", argv[1]);
  if (argc < 3)
    return tool_usage_error (context, "missing ROOT (inspect fs ROOT)");
  if (argc > 3)
    return tool_usage_error (context, "unexpected argument '%s'", argv[3]);

  roots = g_strsplit (argv[2], ",", -1);
  for (guint r = 0; roots[r] != NULL; r++)
    {
      g_autoptr(GDir) dir = g_dir_open (roots[r], 0, &error);
      g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
      const char *base;

      if (dir == NULL)
        {
          g_printerr ("kvtier: %s\n", error->message);
          return TOOL_EXIT_FAILURE;
        }
      while ((base = g_dir_read_name (dir)) != NULL)
        g_ptr_array_add (names, g_strdup (base));
      g_ptr_array_sort (names, compare_names);

      for (guint i = 0; i < names->len; i++)
        {
          Namespace *ns = open_namespace (roots[r], g_ptr_array_index (names, i), &error);

          if (ns == NULL && error != NULL)
            {
              g_printerr ("kvtier: %s\n", error->message);
              return TOOL_EXIT_FAILURE;
            }
          if (ns == NULL)
            continue;
          scan_tree (ns, ns->dir, NULL, verify, now_s);
          g_ptr_array_add (namespaces, ns);
        }
    }

  for (guint i = 0; i < namespaces->len; i++)
    {
      Namespace *ns = g_ptr_array_index (namespaces, i);

      for (int r = 0; r < N_BAD; r++)
        total_bad += ns->bad[r];
    }

  if (as_json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonGenerator) generator = json_generator_new ();
      g_autoptr(JsonNode) root = NULL;
      g_autofree char *text = NULL;

      json_builder_begin_object (builder);
      tool_json_add_string (builder, "root", argv[2]);
      json_builder_set_member_name (builder, "verified");
      json_builder_add_boolean_value (builder, verify);
      json_builder_set_member_name (builder, "namespaces");
      json_builder_begin_array (builder);
      for (guint i = 0; i < namespaces->len; i++)
        json_builder_add_value (builder, namespace_json (g_ptr_array_index (namespaces, i)));
      json_builder_end_array (builder);
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      json_generator_set_root (generator, root);
      json_generator_set_pretty (generator, TRUE);
      text = json_generator_to_data (generator, NULL);
      printf ("%s\n", text);
    }
  else
    {
      printf ("%s: %u namespace%s\n", argv[2], namespaces->len, namespaces->len == 1 ? "" : "s");
      for (guint i = 0; i < namespaces->len; i++)
        print_namespace (g_ptr_array_index (namespaces, i), verify);
    }

  return total_bad > 0 ? TOOL_EXIT_FAILURE : TOOL_EXIT_OK;
}
