/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-tier-job.h"
#include "kv-chunk-format.h"
#include "kv-fs-layout.h"
#include "kv-fs-op.h"
#include "kv-fs-crc32c.h"

/* The on-disk format and naming, checked against the rules of
 * doc/on-disk-format.md and, for the vLLM layout, against digests and
 * paths computed independently by python3 (json + hashlib), the way vLLM
 * computes them. */

#define PAYLOAD 8192

static guint8 ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];

static void
encode (guint8 *header,
        guint8 *payload,
        KvKey  *key)
{
  test_chunk_fill (payload, PAYLOAD, 7);
  kv_chunk_header_encode (header, ns, key, payload, PAYLOAD, 1234);
}

static void
test_header_round_trip (void)
{
  g_autoptr(KvKey) key = test_chunk_key (1);
  g_autofree guint8 *header = g_malloc0 (KV_CHUNK_HEADER_SIZE);
  g_autofree guint8 *payload = g_malloc (PAYLOAD);
  guint32 v32;
  guint64 v64;

  encode (header, payload, key);

  /* byte layout of doc/on-disk-format.md */
  g_assert_cmpmem (header, 8, "KVTIERFS", 8);
  memcpy (&v32, header + 8, 4);
  g_assert_cmpuint (GUINT32_FROM_LE (v32), ==, 1);
  memcpy (&v32, header + 12, 4);
  g_assert_cmpuint (GUINT32_FROM_LE (v32), ==, 4096);
  g_assert_cmpmem (header + 16, 32, ns, 32);
  memcpy (&v64, header + 48, 8);
  g_assert_cmpuint (GUINT64_FROM_LE (v64), ==, PAYLOAD);
  memcpy (&v64, header + 56, 8);
  g_assert_cmpuint (GUINT64_FROM_LE (v64), ==, kv_chunk_checksum (payload, PAYLOAD));
  memcpy (&v32, header + 64, 4);
  g_assert_cmpuint (GUINT32_FROM_LE (v32), ==, kv_key_get_group (key));
  memcpy (&v32, header + 68, 4);
  g_assert_cmpuint (GUINT32_FROM_LE (v32), ==, 32);
  memcpy (&v64, header + 80, 8);
  g_assert_cmpuint (GUINT64_FROM_LE (v64), ==, 1234);
  g_assert_cmpmem (header + 88, 32, kv_key_get_hash (key, NULL), 32);
  for (guint i = 88 + 32; i < 4088; i++)
    g_assert_cmpuint (header[i], ==, 0);
  memcpy (&v64, header + 4088, 8);
  g_assert_cmpuint (GUINT64_FROM_LE (v64), ==, kv_chunk_checksum (header, 4088));

  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD, PAYLOAD,
                                      ns, key, TRUE), ==, KV_CHUNK_CHECK_OK);
}

/* A slot header encoded again over the buffer of another (a longer key
 * hash, other fields) is byte for byte the header encoded afresh: the
 * fields are rewritten and nothing of the old one is left. */
static void
test_slot_header_reencode (void)
{
  guint8 long_hash[KV_CHUNK_MAX_KEY_HASH_LEN];
  g_autoptr(KvKey) long_key = NULL;
  g_autoptr(KvKey) key = test_chunk_key (3);
  g_autofree guint8 *reused = g_malloc0 (KV_CHUNK_HEADER_SIZE);
  g_autofree guint8 *fresh = g_malloc (KV_CHUNK_HEADER_SIZE);
  g_autoptr(KvKey) parsed = NULL;
  guint64 sequence = 0, checksum = 0;

  memset (long_hash, 0xee, sizeof long_hash);
  long_key = kv_key_new (long_hash, sizeof long_hash, 9);

  kv_chunk_slot_header_reencode (reused, ns, long_key, PAYLOAD, 0x1111, 1, G_MAXUINT64);
  g_assert_cmpmem (reused + KV_CHUNK_OFF_HASH, sizeof long_hash, long_hash, sizeof long_hash);
  kv_chunk_slot_header_reencode (reused, ns, key, PAYLOAD, 0x2222, 2, 77);

  memset (fresh, 0xa5, KV_CHUNK_HEADER_SIZE);
  kv_chunk_slot_header_encode (fresh, ns, key, PAYLOAD, 0x2222, 2, 77);
  g_assert_cmpmem (reused, KV_CHUNK_HEADER_SIZE, fresh, KV_CHUNK_HEADER_SIZE);

  g_assert_cmpint (kv_chunk_slot_header_parse (reused, ns, PAYLOAD, &parsed, &sequence, &checksum),
                   ==, KV_CHUNK_CHECK_OK);
  g_assert_true (kv_key_equal (parsed, key));
  g_assert_cmpuint (sequence, ==, 77);
  g_assert_cmpuint (checksum, ==, 0x2222);
}

static void
test_header_detects_damage (void)
{
  g_autoptr(KvKey) key = test_chunk_key (1);
  g_autoptr(KvKey) other = test_chunk_key (2);
  g_autofree guint8 *header = g_malloc0 (KV_CHUNK_HEADER_SIZE);
  g_autofree guint8 *payload = g_malloc (PAYLOAD);
  guint8 other_ns[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  struct { guint offset; KvChunkCheck expected; } flips[] = {
    { 0, KV_CHUNK_CHECK_BAD_MAGIC },
    { 9, KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM },
    { 20, KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM },
    { 50, KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM },
    { 100, KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM },
    { 3000, KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM },
    { 4090, KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM },
  };

  for (guint i = 0; i < G_N_ELEMENTS (flips); i++)
    {
      encode (header, payload, key);
      header[flips[i].offset] ^= 0x10;
      g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD, PAYLOAD,
                                          ns, key, TRUE), ==, flips[i].expected);
    }

  /* a payload bit flip: caught by the checksum, unless verify is off */
  encode (header, payload, key);
  payload[PAYLOAD / 2] ^= 1;
  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD, PAYLOAD,
                                      ns, key, TRUE), ==, KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM);
  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD, PAYLOAD,
                                      ns, key, FALSE), ==, KV_CHUNK_CHECK_OK);

  /* an intact file for another key, namespace or size */
  encode (header, payload, key);
  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD, PAYLOAD,
                                      ns, other, TRUE), ==, KV_CHUNK_CHECK_WRONG_KEY);
  kv_chunk_namespace_digest ("other", PAYLOAD, other_ns);
  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD, PAYLOAD,
                                      other_ns, key, TRUE), ==, KV_CHUNK_CHECK_WRONG_NAMESPACE);
  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD / 2,
                                      PAYLOAD / 2, ns, key, TRUE), ==, KV_CHUNK_CHECK_WRONG_LENGTH);

  /* short reads */
  g_assert_cmpint (kv_chunk_check (header, 100, payload, PAYLOAD, 0, ns, key, TRUE),
                   ==, KV_CHUNK_CHECK_SHORT);
  g_assert_cmpint (kv_chunk_check (header, KV_CHUNK_HEADER_SIZE, payload, PAYLOAD, PAYLOAD - 1,
                                      ns, key, TRUE), ==, KV_CHUNK_CHECK_SHORT);
  /* headerless (vLLM) files: only the length counts */
  g_assert_cmpint (kv_chunk_check (NULL, 0, payload, PAYLOAD, PAYLOAD, ns, key, TRUE),
                   ==, KV_CHUNK_CHECK_OK);
  g_assert_cmpint (kv_chunk_check (NULL, 0, payload, PAYLOAD, 10, ns, key, TRUE),
                   ==, KV_CHUNK_CHECK_SHORT);
}

/* The checksum taken in pieces as bytes arrive (peer and redis loads) is
 * the one the header records, whatever the pieces; a changed byte in any
 * piece changes it. */
static void
test_hasher_in_pieces (void)
{
  const gsize len = 3 * 65536 + 4097;
  g_autofree guint8 *data = g_malloc (len);
  g_autoptr(KvChunkHasher) hasher = kv_chunk_hasher_new ();
  const gsize pieces[] = { 1, 63, 64, 4096, 65536, 131072, len };
  guint64 whole;

  test_chunk_fill (data, len, 11);
  whole = kv_chunk_checksum (data, len);
  for (guint p = 0; p < G_N_ELEMENTS (pieces); p++)
    {
      kv_chunk_hasher_reset (hasher);
      for (gsize off = 0; off < len; off += MIN (pieces[p], len - off))
        kv_chunk_hasher_update (hasher, data + off, MIN (pieces[p], len - off));
      g_assert_cmpuint (kv_chunk_hasher_digest (hasher), ==, whole);
    }
  data[len - 1] ^= 1;
  kv_chunk_hasher_reset (hasher);
  kv_chunk_hasher_update (hasher, data, 65536);
  kv_chunk_hasher_update (hasher, data + 65536, len - 65536);
  g_assert_cmpuint (kv_chunk_hasher_digest (hasher), !=, whole);
  g_assert_cmpuint (kv_chunk_hasher_digest (hasher), ==, kv_chunk_checksum (data, len));
}

static void
test_namespace_digest (void)
{
  guint8 a[32], b[32], c[32], d[32];
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  guint8 expected[32];
  gsize len = 32;
  static const guchar bytes[] = "kvtier-fs\0" "1\0" "llama\0" "8192";

  kv_chunk_namespace_digest ("llama", 8192, a);
  kv_chunk_namespace_digest ("llama", 8192, b);
  kv_chunk_namespace_digest ("llama", 4096, c);
  kv_chunk_namespace_digest ("mistral", 8192, d);
  g_assert_cmpmem (a, 32, b, 32);
  g_assert_true (memcmp (a, c, 32) != 0);
  g_assert_true (memcmp (a, d, 32) != 0);

  /* SHA-256("kvtier-fs\0" "1" "\0" namespace "\0" block size) */
  g_checksum_update (sum, bytes, sizeof bytes - 1);
  g_checksum_get_digest (sum, expected, &len);
  g_assert_cmpmem (a, 32, expected, 32);
}

/* Python's json.dumps(sort_keys=True, separators=(",", ":")). */
static void
test_canonical_json (void)
{
  const char *input = "{\"b\": [1, 2.5, true, null, \"x\\\"y\\\\z\\n\"], \"a\": "
                      "{\"\\u00e9t\\u00e9\": \"\\ud83d\\ude00\", \"z\": 1e-7, \"y\": 1e22, "
                      "\"w\": 100.0, \"v\": -0.25, \"u\": \"\\u007f\\u0001\"}, \"c\": []}";
  g_autoptr(JsonNode) node = json_from_string (input, NULL);
  g_autofree char *compact = kv_fs_json_canonical (node, FALSE);
  g_autofree char *pretty = kv_fs_json_canonical (node, TRUE);
  g_autofree char *py1 = NULL;
  g_autofree char *py2 = NULL;
  g_autofree char *s1 = NULL;
  g_autofree char *s2 = NULL;

  s1 = g_strdup_printf ("import json,sys; sys.stdout.write(json.dumps(json.loads(r'''%s'''), "
                        "sort_keys=True, separators=(',', ':')))", input);
  s2 = g_strdup_printf ("import json,sys; sys.stdout.write(json.dumps(json.loads(r'''%s'''), "
                        "sort_keys=True, indent=2))", input);
  py1 = fs_test_python (s1);
  if (py1 == NULL)
    {
      g_test_skip ("/usr/bin/python3 is not installed");
      return;
    }
  py2 = fs_test_python (s2);
  g_assert_cmpstr (compact, ==, py1);
  g_assert_cmpstr (pretty, ==, py2);
}

static const char *vllm_digest_script =
  "import hashlib,json,sys\n"
  "f=json.loads(sys.argv[1])\n"
  "s=json.dumps(f,sort_keys=True,separators=(',',':'))\n"
  "print(hashlib.sha256(s.encode()).hexdigest()[:12])\n";

static char *
python_vllm_digest (const char *identity)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  const char *argv[] = { "/usr/bin/python3", "-c", vllm_digest_script, identity, NULL };
  int status = 0;

  if (!g_file_test (argv[0], G_FILE_TEST_IS_EXECUTABLE))
    return NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                               &out, NULL, &status, &error));
  g_assert_no_error (error);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  return g_strstrip (g_steal_pointer (&out));
}

/* The vLLM layout: paths and file bytes exactly as vLLM's FileMapper and
 * fs tier produce them (reference §8.2). */
static void
test_vllm_paths (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *expected_digest = python_vllm_digest (FS_TEST_VLLM_IDENTITY);
  g_autofree char *digest = NULL;
  g_autofree char *model = NULL;
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  g_autoptr(KvKey) key = test_chunk_key (5);
  g_autofree char *hex = NULL;
  g_autofree char *path = NULL;
  g_autofree char *expected = NULL;
  g_autofree char *config_path = NULL;
  g_autofree char *config = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;
  KvFsLayout *layout;
  GString *h = g_string_new (NULL);
  const guint8 *hash;
  gsize hash_len;

  digest = kv_fs_vllm_digest (FS_TEST_VLLM_IDENTITY, &model, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (model, ==, "meta-llama/Llama-3.1-8B");
  g_assert_cmpuint (strlen (digest), ==, 12);
  if (expected_digest != NULL)
    g_assert_cmpstr (digest, ==, expected_digest);
  else
    g_test_message ("python3 missing: digest not cross-checked");

  layout = kv_fs_layout_new (KV_FS_LAYOUT_KIND_VLLM, root, NULL, FS_TEST_SLOT,
                             FS_TEST_VLLM_IDENTITY, 3, &error);
  g_assert_no_error (error);
  g_assert_true (kv_fs_layout_create_dirs (layout, &error));
  g_assert_no_error (error);

  hash = kv_key_get_hash (key, &hash_len);
  for (gsize i = 0; i < hash_len; i++)
    g_string_append_printf (h, "%02x", hash[i]);
  hex = g_string_free (h, FALSE);
  /* {root}/{model with / → _}_{digest}_r{rank}/{hex[:3]}/{hex[3:5]}_g{group}/{hex}.bin */
  expected = g_strdup_printf ("%s/meta-llama_Llama-3.1-8B_%s_r3/%.3s/%.2s_g%u/%s.bin",
                              root, digest, hex, hex + 3, kv_key_get_group (key), hex);
  path = kv_fs_layout_chunk_path (layout, key, NULL);
  g_assert_cmpstr (path, ==, expected);
  g_assert_false (kv_fs_layout_has_header (layout));
  g_assert_cmpuint (kv_fs_layout_get_file_size (layout), ==, FS_TEST_SLOT);

  /* config.json: the identity, pretty, sorted */
  config_path = g_strdup_printf ("%s/meta-llama_Llama-3.1-8B_%s/config.json", root, digest);
  g_assert_true (g_file_get_contents (config_path, &config, NULL, &error));
  g_assert_no_error (error);
  {
    g_autoptr(JsonNode) a = json_from_string (config, NULL);
    g_autoptr(JsonNode) b = json_from_string (FS_TEST_VLLM_IDENTITY, NULL);

    g_assert_true (json_node_equal (a, b));
  }
  kv_fs_layout_free (layout);

  /* a tier writes exactly the slot's bytes there, headerless */
  buffer = kv_host_buffer_new (4, FS_TEST_SLOT, &error);
  g_assert_no_error (error);
  {
    FsVariant v = { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_VLLM };
    g_autoptr(KvFsTier) tier = fs_test_tier_new (buffer, root, &v, "vllm-rank", 3, NULL);
    g_autoptr(KvJobResult) result = NULL;
    g_autofree char *contents = NULL;
    gsize length = 0;
    guint32 slot = 2;

    test_chunk_fill (kv_host_buffer_peek_slot (buffer, slot), FS_TEST_SLOT, 5);
    result = test_tier_run_job (tier, 1, FALSE, &key, &slot, 1, NULL);
    g_assert_true (kv_job_result_get_success (result));
    g_assert_true (g_file_get_contents (expected, &contents, &length, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (length, ==, FS_TEST_SLOT);
    g_assert_true (test_chunk_check ((guint8 *) contents, length, 5));
    fs_test_shutdown (tier);
  }
  test_dir_remove (root);
}

static void
test_vllm_identity_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  KvFsLayout *layout;

  layout = kv_fs_layout_new (KV_FS_LAYOUT_KIND_VLLM, root, NULL, 4096, NULL, 0, &error);
  g_assert_null (layout);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "vllm-identity"));
  g_clear_error (&error);

  layout = kv_fs_layout_new (KV_FS_LAYOUT_KIND_VLLM, root, NULL, 4096, "{\"x\": 1}", 0, &error);
  g_assert_null (layout);
  g_assert_nonnull (strstr (error->message, "model_name"));
  g_clear_error (&error);

  layout = kv_fs_layout_new (KV_FS_LAYOUT_KIND_VLLM, root, NULL, 4096, "[1", 0, &error);
  g_assert_null (layout);
  g_assert_nonnull (strstr (error->message, "not valid JSON"));
  g_rmdir (root);
}

static void
test_kvtier_paths (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  g_autoptr(KvKey) key = test_chunk_key (9);
  g_autofree char *path = NULL;
  g_autofree char *ns_file = NULL;
  g_autofree char *base = NULL;
  g_autoptr(GBytes) offload = kv_key_to_offload_key (key);
  guint64 shard = kv_chunk_checksum (g_bytes_get_data (offload, NULL), g_bytes_get_size (offload));
  guint8 digest[32];
  GStatBuf st;
  KvFsLayout *layout;
  g_autofree char *expected = NULL;

  layout = kv_fs_layout_new (KV_FS_LAYOUT_KIND_KVTIER, root, "llama-3-bf16-tp1", FS_TEST_SLOT,
                             NULL, 0, &error);
  g_assert_no_error (error);
  g_assert_true (kv_fs_layout_create_dirs (layout, &error));
  g_assert_no_error (error);

  kv_chunk_namespace_digest ("llama-3-bf16-tp1", FS_TEST_SLOT, digest);
  base = g_strdup_printf ("%s/kvtier-%02x%02x%02x%02x%02x%02x%02x%02x", root,
                          digest[0], digest[1], digest[2], digest[3],
                          digest[4], digest[5], digest[6], digest[7]);
  g_assert_cmpstr (kv_fs_layout_get_chunk_dir (layout, 0), ==, base);
  path = kv_fs_layout_chunk_path (layout, key, NULL);
  {
    const guint8 *hash = kv_key_get_hash (key, NULL);
    GString *s = g_string_new (NULL);

    g_string_printf (s, "%s/%02x/", base, (guint) (shard >> 56) & 0xff);
    for (guint i = 0; i < 32; i++)
      g_string_append_printf (s, "%02x", hash[i]);
    g_string_append_printf (s, "_g%u.kv", kv_key_get_group (key));
    expected = g_string_free (s, FALSE);
  }
  g_assert_cmpstr (path, ==, expected);
  g_assert_true (kv_fs_layout_has_header (layout));
  g_assert_cmpuint (kv_fs_layout_get_file_size (layout), ==, FS_TEST_SLOT + 4096);

  /* private modes; the 256 shard directories exist from the start */
  g_assert_cmpint (g_stat (base, &st), ==, 0);
  g_assert_cmpuint (st.st_mode & 0777, ==, 0700);
  {
    g_autofree char *last = g_build_filename (base, "ff", NULL);

    g_assert_cmpint (g_stat (last, &st), ==, 0);
    g_assert_true (S_ISDIR (st.st_mode));
    g_assert_cmpuint (st.st_mode & 0777, ==, 0700);
  }
  ns_file = g_build_filename (base, "namespace.json", NULL);
  g_assert_cmpint (g_stat (ns_file, &st), ==, 0);
  g_assert_cmpuint (st.st_mode & 0777, ==, 0600);

  kv_fs_layout_free (layout);
  test_dir_remove (root);
}

/* Keys go to root (block hash as a big-endian integer) mod n_roots. */
static void
test_multi_root_sharding (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *a = test_dir_make ("kvtier-fs-test");
  g_autofree char *b = test_dir_make ("kvtier-fs-test");
  g_autofree char *c = test_dir_make ("kvtier-fs-test");
  g_autofree char *roots = g_strdup_printf ("%s, %s,%s", a, b, c);
  KvFsLayout *layout = kv_fs_layout_new (KV_FS_LAYOUT_KIND_KVTIER, roots, "x", 4096, NULL, 0, &error);
  guint seen[3] = { 0, 0, 0 };

  g_assert_no_error (error);
  g_assert_cmpuint (kv_fs_layout_get_n_roots (layout), ==, 3);
  g_assert_cmpstr (kv_fs_layout_get_root (layout, 1), ==, b);
  for (guint i = 0; i < 60; i++)
    {
      g_autoptr(KvKey) key = test_chunk_key (i);
      const guint8 *hash = kv_key_get_hash (key, NULL);
      guint root;
      g_autofree char *path = kv_fs_layout_chunk_path (layout, key, &root);
      /* long division of the 256-bit number by 3, by digit sums of
       * base 256 (256 ≡ 1 mod 3) */
      guint sum = 0;

      for (guint j = 0; j < 32; j++)
        sum += hash[j];
      g_assert_cmpuint (root, ==, sum % 3);
      g_assert_true (g_str_has_prefix (path, kv_fs_layout_get_root (layout, root)));
      seen[root]++;
    }
  g_assert_cmpuint (seen[0], >, 0);
  g_assert_cmpuint (seen[1], >, 0);
  g_assert_cmpuint (seen[2], >, 0);
  kv_fs_layout_free (layout);

  /* bad lists */
  {
    g_autofree char *dup = g_strdup_printf ("%s,%s/", a, a);
    g_autofree char *empty = g_strdup_printf ("%s,,%s", a, b);

    g_assert_null (kv_fs_layout_new (KV_FS_LAYOUT_KIND_KVTIER, dup, "x", 4096, NULL, 0, &error));
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
    g_assert_nonnull (strstr (error->message, "twice"));
    g_clear_error (&error);
    g_assert_null (kv_fs_layout_new (KV_FS_LAYOUT_KIND_KVTIER, empty, "x", 4096, NULL, 0, &error));
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
    g_clear_error (&error);
  }
  g_rmdir (a);
  g_rmdir (b);
  g_rmdir (c);
}

typedef struct
{
  GPtrArray *keys;
  GPtrArray *temps;
} ScanResult;

static void
on_chunk (KvKey *key, guint root, int dir_fd, const char *name, const char *path, guint64 size,
          gint64 mtime, gpointer data)
{
  ScanResult *r = data;

  g_ptr_array_add (r->keys, kv_key_to_string (key));
}

static void
on_temp (int dir_fd, const char *name, const char *path, gint64 mtime, gpointer data)
{
  ScanResult *r = data;

  g_ptr_array_add (r->temps, g_strdup (path));
}

static void
scan_layout (KvFsLayoutKind kind)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  KvFsLayout *layout = kv_fs_layout_new (kind, root, "scan", 4096, FS_TEST_VLLM_IDENTITY, 0, &error);
  ScanResult r = { g_ptr_array_new_with_free_func (g_free), g_ptr_array_new_with_free_func (g_free) };
  g_autofree char *temp = NULL;
  g_autofree char *stray = NULL;
  const KvFsScanFuncs funcs = { on_chunk, on_temp, NULL };
  gint cancel = 0;

  if (kind == KV_FS_LAYOUT_KIND_KVTIER)
    {
      kv_fs_layout_free (layout);
      layout = kv_fs_layout_new (kind, root, "scan", 4096, NULL, 0, &error);
    }
  g_assert_no_error (error);
  g_assert_true (kv_fs_layout_create_dirs (layout, &error));
  for (guint i = 0; i < 5; i++)
    {
      g_autoptr(KvKey) key = test_chunk_key (i);
      g_autofree char *path = kv_fs_layout_chunk_path (layout, key, NULL);

      fs_test_make_parent (path);
      g_assert_true (g_file_set_contents (path, "x", 1, NULL));
      if (i == 0)
        {
          g_autofree char *dir = g_path_get_dirname (path);
          g_autofree char *other = g_build_filename (dir, "somebody-else.tmp", NULL);
          g_autofree char *suffixed = g_strdup_printf ("%s.tmp", path);

          temp = kv_fs_temp_path (path, 42);
          g_assert_true (g_file_set_contents (temp, "t", 1, NULL));
          stray = g_strdup_printf ("%s.unrelated", path);
          g_assert_true (g_file_set_contents (stray, "s", 1, NULL));
          /* *.tmp names the tier's format does not define: not its
           * temporary files, never reported for deletion */
          g_assert_true (g_file_set_contents (other, "o", 1, NULL));
          g_assert_true (g_file_set_contents (suffixed, "o", 1, NULL));
        }
    }
  kv_fs_layout_scan (layout, 0, &funcs, &r, &cancel);
  g_assert_cmpuint (r.keys->len, ==, 5);
  for (guint i = 0; i < 5; i++)
    {
      g_autoptr(KvKey) key = test_chunk_key (i);
      g_autofree char *s = kv_key_to_string (key);
      gboolean found = FALSE;

      for (guint j = 0; j < r.keys->len; j++)
        found |= g_strcmp0 (r.keys->pdata[j], s) == 0;
      g_assert_true (found);
    }
  g_assert_cmpuint (r.temps->len, ==, 1);
  g_assert_cmpstr (r.temps->pdata[0], ==, temp);
  g_ptr_array_unref (r.keys);
  g_ptr_array_unref (r.temps);
  kv_fs_layout_free (layout);
  test_dir_remove (root);
}

static void
test_scan_kvtier (void)
{
  scan_layout (KV_FS_LAYOUT_KIND_KVTIER);
}

static void
test_scan_vllm (void)
{
  scan_layout (KV_FS_LAYOUT_KIND_VLLM);
}

/* vLLM's file checksum is CRC32C: the check value of the catalogue and
 * the iSCSI test vectors (RFC 3720 B.4), through the SSE4.2 instruction
 * (where the CPU has it) and the table, at every alignment and length
 * around a word. */
static void
test_crc32c (void)
{
  static const struct { guint8 fill; gboolean counting; guint32 crc; } rfc3720[] = {
    { 0x00, FALSE, 0x8a9136aa }, { 0xff, FALSE, 0x62a8ab43 }, { 0x00, TRUE, 0x46dd794e },
  };
  guint8 buf[64 + 8];

  g_assert_cmphex (kv_fs_crc32c ("123456789", 9), ==, 0xe3069283);
  g_assert_cmphex (kv_fs_crc32c_table ("123456789", 9), ==, 0xe3069283);
  g_assert_cmphex (kv_fs_crc32c ("", 0), ==, 0);
  for (guint v = 0; v < G_N_ELEMENTS (rfc3720); v++)
    {
      for (guint i = 0; i < 32; i++)
        buf[i] = rfc3720[v].counting ? i : rfc3720[v].fill;
      g_assert_cmphex (kv_fs_crc32c (buf, 32), ==, rfc3720[v].crc);
      g_assert_cmphex (kv_fs_crc32c_table (buf, 32), ==, rfc3720[v].crc);
    }
  for (guint i = 0; i < sizeof buf; i++)
    buf[i] = (guint8) (i * 37 + 11);
  for (guint offset = 0; offset < 8; offset++)
    for (guint len = 0; len <= 64; len++)
      g_assert_cmphex (kv_fs_crc32c (buf + offset, len), ==, kv_fs_crc32c_table (buf + offset, len));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  kv_chunk_namespace_digest ("test", PAYLOAD, ns);

  g_test_add_func ("/kvtier/fs/format/header-round-trip", test_header_round_trip);
  g_test_add_func ("/kvtier/fs/format/header-detects-damage", test_header_detects_damage);
  g_test_add_func ("/kvtier/fs/format/slot-header-reencode", test_slot_header_reencode);
  g_test_add_func ("/kvtier/fs/format/hasher-in-pieces", test_hasher_in_pieces);
  g_test_add_func ("/kvtier/fs/format/namespace-digest", test_namespace_digest);
  g_test_add_func ("/kvtier/fs/format/canonical-json", test_canonical_json);
  g_test_add_func ("/kvtier/fs/layout/vllm-paths-and-bytes", test_vllm_paths);
  g_test_add_func ("/kvtier/fs/layout/vllm-identity-errors", test_vllm_identity_errors);
  g_test_add_func ("/kvtier/fs/layout/kvtier-paths", test_kvtier_paths);
  g_test_add_func ("/kvtier/fs/layout/multi-root-sharding", test_multi_root_sharding);
  g_test_add_func ("/kvtier/fs/layout/scan-kvtier", test_scan_kvtier);
  g_test_add_func ("/kvtier/fs/layout/scan-vllm", test_scan_vllm);
  g_test_add_func ("/kvtier/fs/layout/crc32c", test_crc32c);

  return g_test_run ();
}
