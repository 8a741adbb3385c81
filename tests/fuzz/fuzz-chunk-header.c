/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* The fs tier's chunk-file check (plugins/common/kv-chunk-format.c) on arbitrary
 * file contents. The input is a whole chunk file: a header, then the
 * payload; the namespace's chunk size is the payload's length.
 *
 * Each input is checked:
 *  1. as it is, against a fixed namespace and key and against the ones it
 *     names itself, with whole and short reads (a short read must never be
 *     read past);
 *  2. with its header checksum recomputed, so that the fields the checksum
 *     guards (version, namespace, key, length) are reached by mutation;
 *  3. re-encoded: a header written by kv_chunk_header_encode() for the key and
 *     payload the input names must check OK, and the same file with any
 *     one byte changed must not. */

#include "config.h"

#include "fuzz-common.h"

#include "kv-chunk-format.h"

#include <string.h>

static guint32
read_u32 (const guint8 *p)
{
  guint32 v;

  memcpy (&v, p, 4);
  return GUINT32_FROM_LE (v);
}

static guint64
read_u64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, 8);
  return GUINT64_FROM_LE (v);
}

/* What an OK answer promises about the file it was given. */
static void
assert_ok_means_intact (const guint8 *header,
                        const guint8 *payload,
                        gsize         payload_len,
                        const guint8  digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                        const KvKey  *key,
                        gboolean      verified_payload)
{
  const guint8 *hash;
  gsize hash_len = 0;

  hash = kv_key_get_hash (key, &hash_len);
  g_assert_cmpmem (header + KV_CHUNK_OFF_MAGIC, 8, KV_CHUNK_MAGIC, 8);
  g_assert_cmpuint (read_u32 (header + KV_CHUNK_OFF_VERSION), ==, KV_CHUNK_FORMAT_VERSION);
  g_assert_cmpuint (read_u32 (header + KV_CHUNK_OFF_HEADER_SIZE), ==, KV_CHUNK_HEADER_SIZE);
  g_assert_cmpuint (read_u64 (header + KV_CHUNK_OFF_HEADER_XXH3), ==,
                    kv_chunk_checksum (header, KV_CHUNK_OFF_HEADER_XXH3));
  g_assert_cmpmem (header + KV_CHUNK_OFF_NAMESPACE, KV_CHUNK_NAMESPACE_DIGEST_LEN,
                   digest, KV_CHUNK_NAMESPACE_DIGEST_LEN);
  g_assert_cmpuint (read_u32 (header + KV_CHUNK_OFF_HASH_LEN), ==, hash_len);
  g_assert_cmpuint (hash_len, <=, KV_CHUNK_MAX_KEY_HASH_LEN);
  g_assert_cmpmem (header + KV_CHUNK_OFF_HASH, hash_len, hash, hash_len);
  g_assert_cmpuint (read_u32 (header + KV_CHUNK_OFF_GROUP), ==, kv_key_get_group (key));
  g_assert_cmpuint (read_u64 (header + KV_CHUNK_OFF_PAYLOAD_LEN), ==, payload_len);
  if (verified_payload)
    g_assert_cmpuint (read_u64 (header + KV_CHUNK_OFF_PAYLOAD_XXH3), ==,
                      kv_chunk_checksum (payload, payload_len));
}

/* Every way the tier calls the check on one file. */
static void
check_file (const guint8 *header,
            gsize         header_bytes_read,
            const guint8 *payload,
            gsize         payload_len,
            const guint8  digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
            const KvKey  *key)
{
  for (guint verify = 0; verify <= 1; verify++)
    {
      KvChunkCheck check;

      check = kv_chunk_check (header, header_bytes_read, payload, payload_len,
                                 payload_len, digest, key, verify);
      g_assert_nonnull (kv_chunk_check_to_string (check));
      if (header_bytes_read < KV_CHUNK_HEADER_SIZE)
        g_assert_cmpint (check, ==, KV_CHUNK_CHECK_SHORT);
      if (check == KV_CHUNK_CHECK_OK)
        assert_ok_means_intact (header, payload, payload_len, digest, key, verify);

      /* a payload read that came back short is never OK */
      if (payload_len > 0)
        {
          check = kv_chunk_check (header, header_bytes_read, payload, payload_len,
                                     payload_len - 1, digest, key, verify);
          g_assert_cmpint (check, !=, KV_CHUNK_CHECK_OK);
        }
    }

  /* headerless (vLLM layout) files: only their length is checked */
  g_assert_cmpint (kv_chunk_check (NULL, 0, payload, payload_len, payload_len,
                                      digest, key, TRUE), ==, KV_CHUNK_CHECK_OK);
}

/* The key a header names, as far as it can name one. */
static KvKey *
key_named_by (const guint8 *header)
{
  guint32 hash_len = read_u32 (header + KV_CHUNK_OFF_HASH_LEN);

  if (hash_len == 0 || hash_len > KV_CHUNK_MAX_KEY_HASH_LEN)
    hash_len = hash_len % KV_CHUNK_MAX_KEY_HASH_LEN + 1;
  return kv_key_new (header + KV_CHUNK_OFF_HASH, hash_len,
                     read_u32 (header + KV_CHUNK_OFF_GROUP));
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  static const guint8 fixed_hash[] = { 0x6b, 0x76, 0x74, 0x69, 0x65, 0x72 };
  g_autoptr(KvKey) fixed_key = kv_key_new (fixed_hash, sizeof fixed_hash, 0);
  g_autoptr(KvKey) named_key = NULL;
  g_autofree guint8 *header = NULL;
  g_autofree guint8 *file = NULL;
  guint8 fixed_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  guint8 named_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  const guint8 *payload;
  gsize payload_len;
  gsize flip;

  if (size < KV_CHUNK_HEADER_SIZE)
    {
      /* A file shorter than its header: the check must say so without
       * reading the header (ASan sees any read past @size). */
      kv_chunk_namespace_digest ("fuzz", 0, fixed_digest);
      check_file (data, size, data + size, 0, fixed_digest, fixed_key);
      return 0;
    }

  payload = data + KV_CHUNK_HEADER_SIZE;
  payload_len = size - KV_CHUNK_HEADER_SIZE;
  kv_chunk_namespace_digest ("fuzz", payload_len, fixed_digest);
  memcpy (named_digest, data + KV_CHUNK_OFF_NAMESPACE, KV_CHUNK_NAMESPACE_DIGEST_LEN);
  named_key = key_named_by (data);

  /* 1. as read from disk */
  check_file (data, size, payload, payload_len, fixed_digest, fixed_key);
  check_file (data, size, payload, payload_len, fixed_digest, named_key);
  check_file (data, size, payload, payload_len, named_digest, named_key);

  /* 2. with a header checksum that matches, so the fields behind it are
   * reached */
  header = g_memdup2 (data, KV_CHUNK_HEADER_SIZE);
  {
    guint64 sum = GUINT64_TO_LE (kv_chunk_checksum (header, KV_CHUNK_OFF_HEADER_XXH3));

    memcpy (header + KV_CHUNK_OFF_HEADER_XXH3, &sum, 8);
  }
  check_file (header, KV_CHUNK_HEADER_SIZE, payload, payload_len, fixed_digest, named_key);
  check_file (header, KV_CHUNK_HEADER_SIZE, payload, payload_len, named_digest, named_key);
  check_file (header, KV_CHUNK_HEADER_SIZE, payload, payload_len, named_digest, fixed_key);

  /* 3. written by the encoder: OK, and not OK once any byte changes */
  file = g_malloc (size);
  kv_chunk_header_encode (file, named_digest, named_key, payload, payload_len,
                       (gint64) read_u64 (data + KV_CHUNK_OFF_CREATED));
  memcpy (file + KV_CHUNK_HEADER_SIZE, payload, payload_len);
  g_assert_cmpint (kv_chunk_check (file, KV_CHUNK_HEADER_SIZE, file + KV_CHUNK_HEADER_SIZE,
                                      payload_len, payload_len, named_digest, named_key,
                                      TRUE), ==, KV_CHUNK_CHECK_OK);
  assert_ok_means_intact (file, file + KV_CHUNK_HEADER_SIZE, payload_len,
                          named_digest, named_key, TRUE);

  flip = kv_chunk_checksum (data, size) % size;
  file[flip] ^= 0x01 << (data[flip] & 7);
  /* Bytes the check compares field by field cannot pass; bytes only the
   * checksums cover pass with odds of 2^-64 (XXH3 collisions). */
  g_assert_cmpint (kv_chunk_check (file, KV_CHUNK_HEADER_SIZE, file + KV_CHUNK_HEADER_SIZE,
                                      payload_len, payload_len, named_digest, named_key,
                                      TRUE), !=, KV_CHUNK_CHECK_OK);
  return 0;
}
