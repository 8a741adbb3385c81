/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-chunk-format.h"

#include <string.h>
#include <xxhash.h>

#include "kv-wire.h"
#if defined(__x86_64__)
# include <xxh_x86dispatch.h>
#endif

/*
 * The kvtier chunk file format (doc/on-disk-format.md):
 *
 *   0     8  magic "KVTIERFS"
 *   8     4  format version (1)
 *   12    4  header size (4096)
 *   16   32  namespace digest (SHA-256, see kv_chunk_namespace_digest())
 *   48    8  payload length in bytes
 *   56    8  XXH3-64 of the payload (seed 0)
 *   64    4  key group
 *   68    4  key hash length in bytes (at most KV_CHUNK_MAX_KEY_HASH_LEN)
 *   72    8  flags (0)
 *   80    8  creation time, microseconds since the Unix epoch
 *   88  112  key hash bytes, zero padded
 *   200 ...  zero
 *   4088  8  XXH3-64 of bytes 0..4087
 *
 * The payload starts at 4096, so it stays aligned for O_DIRECT.
 */

const char *
kv_chunk_check_to_string (KvChunkCheck check)
{
  switch (check)
    {
    case KV_CHUNK_CHECK_OK: return "ok";
    case KV_CHUNK_CHECK_SHORT: return "short file";
    case KV_CHUNK_CHECK_BAD_MAGIC: return "bad magic";
    case KV_CHUNK_CHECK_BAD_VERSION: return "unknown format version";
    case KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM: return "header checksum mismatch";
    case KV_CHUNK_CHECK_WRONG_NAMESPACE: return "written for another namespace";
    case KV_CHUNK_CHECK_WRONG_KEY: return "written for another key";
    case KV_CHUNK_CHECK_WRONG_LENGTH: return "wrong payload length";
    case KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM: return "payload checksum mismatch";
    case KV_CHUNK_CHECK_BAD_FILE_CHECKSUM: return "file checksum (user.vllm.kv_crc32c) mismatch";
    default: return "unknown";
    }
}

/* ---- streaming ------------------------------------------------------------- */

struct _KvChunkHasher
{
  XXH3_state_t *state;
};

KvChunkHasher *
kv_chunk_hasher_new (void)
{
  KvChunkHasher *hasher = g_new (KvChunkHasher, 1);

  hasher->state = XXH3_createState ();
  if (hasher->state == NULL)
    g_error ("%s: out of memory", G_STRFUNC);
  XXH3_64bits_reset (hasher->state);
  return hasher;
}

void
kv_chunk_hasher_reset (KvChunkHasher *hasher)
{
  XXH3_64bits_reset (hasher->state);
}

void
kv_chunk_hasher_update (KvChunkHasher *hasher,
                        const void    *data,
                        gsize          len)
{
#if defined(__x86_64__)
  XXH3_64bits_update_dispatch (hasher->state, data, len);
#else
  XXH3_64bits_update (hasher->state, data, len);
#endif
}

guint64
kv_chunk_hasher_digest (KvChunkHasher *hasher)
{
  return XXH3_64bits_digest (hasher->state);
}

void
kv_chunk_hasher_free (KvChunkHasher *hasher)
{
  if (hasher == NULL)
    return;
  XXH3_freeState (hasher->state);
  g_free (hasher);
}

/* XXH3-64 with seed 0; the dispatching variant picks AVX2/AVX-512 at run
 * time and returns the same value as the portable one. */
guint64
kv_chunk_checksum (const void *data,
                gsize       len)
{
#if defined(__x86_64__)
  return XXH3_64bits_dispatch (data, len);
#else
  return XXH3_64bits (data, len);
#endif
}

/* The namespace digest names the cache identity: two tiers share chunk
 * files only when their namespace string and chunk size are equal, so a
 * file can never be read into slots of another size or model. */
void
kv_chunk_namespace_digest (const char *namespace_,
                        gsize       block_size,
                        guint8      digest[KV_CHUNK_NAMESPACE_DIGEST_LEN])
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree char *size_str = g_strdup_printf ("%" G_GSIZE_FORMAT, block_size);
  gsize len = KV_CHUNK_NAMESPACE_DIGEST_LEN;
  static const guchar prefix[] = "kvtier-fs";
  guchar zero = 0;
  char version[16];

  g_snprintf (version, sizeof version, "%u", KV_CHUNK_FORMAT_VERSION);
  g_checksum_update (sum, prefix, sizeof prefix);       /* includes the NUL */
  g_checksum_update (sum, (const guchar *) version, -1);
  g_checksum_update (sum, &zero, 1);
  g_checksum_update (sum, (const guchar *) (namespace_ ? namespace_ : ""), -1);
  g_checksum_update (sum, &zero, 1);
  g_checksum_update (sum, (const guchar *) size_str, -1);
  g_checksum_get_digest (sum, digest, &len);
}

gboolean
kv_chunk_key_fits (const KvKey *key)
{
  gsize len = 0;

  kv_key_get_hash (key, &len);
  return len > 0 && len <= KV_CHUNK_MAX_KEY_HASH_LEN;
}

/* Fills the 4096 bytes at @header for @key and @payload. Runs on an I/O
 * thread: the payload checksum reads the whole slot. */
void
kv_chunk_header_encode (guint8       *header,
                     const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                     const KvKey  *key,
                     const void   *payload,
                     gsize         payload_len,
                     gint64        created_unix_us)
{
  kv_chunk_header_encode_with_checksum (header, namespace_digest, key, payload_len,
                                        kv_chunk_checksum (payload, payload_len),
                                        created_unix_us);
}

/* kv_chunk_header_encode() for a payload whose kv_chunk_checksum() is
 * already known (carried with its primary slot, see
 * kv_host_buffer_get_slot_checksum()): reads nothing but the key. */
void
kv_chunk_header_encode_with_checksum (guint8       *header,
                                      const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                      const KvKey  *key,
                                      gsize         payload_len,
                                      guint64       payload_checksum,
                                      gint64        created_unix_us)
{
  const guint8 *hash;
  gsize hash_len = 0;

  hash = kv_key_get_hash (key, &hash_len);
  g_return_if_fail (hash_len <= KV_CHUNK_MAX_KEY_HASH_LEN);

  memset (header, 0, KV_CHUNK_HEADER_SIZE);
  memcpy (header + KV_CHUNK_OFF_MAGIC, KV_CHUNK_MAGIC, 8);
  kv_wire_put_u32 (header + KV_CHUNK_OFF_VERSION, KV_CHUNK_FORMAT_VERSION);
  kv_wire_put_u32 (header + KV_CHUNK_OFF_HEADER_SIZE, KV_CHUNK_HEADER_SIZE);
  memcpy (header + KV_CHUNK_OFF_NAMESPACE, namespace_digest, KV_CHUNK_NAMESPACE_DIGEST_LEN);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_PAYLOAD_LEN, payload_len);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_PAYLOAD_XXH3, payload_checksum);
  kv_wire_put_u32 (header + KV_CHUNK_OFF_GROUP, kv_key_get_group (key));
  kv_wire_put_u32 (header + KV_CHUNK_OFF_HASH_LEN, hash_len);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_FLAGS, 0);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_CREATED, (guint64) created_unix_us);
  memcpy (header + KV_CHUNK_OFF_HASH, hash, hash_len);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_HEADER_XXH3,
           kv_chunk_checksum (header, KV_CHUNK_OFF_HEADER_XXH3));
}

/* Checks everything but the payload bytes. */
KvChunkCheck
kv_chunk_header_check (const guint8 *header,
                    const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                    const KvKey  *key,
                    gsize         payload_len,
                    guint64      *out_payload_checksum)
{
  const guint8 *hash;
  gsize hash_len = 0;
  guint32 stored_hash_len;

  if (memcmp (header + KV_CHUNK_OFF_MAGIC, KV_CHUNK_MAGIC, 8) != 0)
    return KV_CHUNK_CHECK_BAD_MAGIC;
  /* The header checksum first: every later field is trusted only if the
   * header is intact. */
  if (kv_wire_get_u64 (header + KV_CHUNK_OFF_HEADER_XXH3) !=
      kv_chunk_checksum (header, KV_CHUNK_OFF_HEADER_XXH3))
    return KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM;
  if (kv_wire_get_u32 (header + KV_CHUNK_OFF_VERSION) != KV_CHUNK_FORMAT_VERSION ||
      kv_wire_get_u32 (header + KV_CHUNK_OFF_HEADER_SIZE) != KV_CHUNK_HEADER_SIZE)
    return KV_CHUNK_CHECK_BAD_VERSION;
  if (memcmp (header + KV_CHUNK_OFF_NAMESPACE, namespace_digest, KV_CHUNK_NAMESPACE_DIGEST_LEN) != 0)
    return KV_CHUNK_CHECK_WRONG_NAMESPACE;

  hash = kv_key_get_hash (key, &hash_len);
  stored_hash_len = kv_wire_get_u32 (header + KV_CHUNK_OFF_HASH_LEN);
  if (stored_hash_len != hash_len ||
      kv_wire_get_u32 (header + KV_CHUNK_OFF_GROUP) != kv_key_get_group (key) ||
      hash_len > KV_CHUNK_MAX_KEY_HASH_LEN ||
      memcmp (header + KV_CHUNK_OFF_HASH, hash, hash_len) != 0)
    return KV_CHUNK_CHECK_WRONG_KEY;
  if (kv_wire_get_u64 (header + KV_CHUNK_OFF_PAYLOAD_LEN) != payload_len)
    return KV_CHUNK_CHECK_WRONG_LENGTH;

  if (out_payload_checksum != NULL)
    *out_payload_checksum = kv_wire_get_u64 (header + KV_CHUNK_OFF_PAYLOAD_XXH3);
  return KV_CHUNK_CHECK_OK;
}

guint64
kv_chunk_header_get_payload_checksum (const guint8 *header)
{
  return kv_wire_get_u64 (header + KV_CHUNK_OFF_PAYLOAD_XXH3);
}

/* Checks a chunk read back from disk. @header is NULL for headerless
 * (vLLM layout) files, whose only check is their length. */
KvChunkCheck
kv_chunk_check (const guint8 *header,
                   gsize         header_bytes_read,
                   const void   *payload,
                   gsize         payload_len,
                   gsize         payload_bytes_read,
                   const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                   const KvKey  *key,
                   gboolean      verify_payload)
{
  guint64 expected = 0;
  KvChunkCheck check;

  if (header != NULL)
    {
      if (header_bytes_read < KV_CHUNK_HEADER_SIZE)
        return KV_CHUNK_CHECK_SHORT;
      check = kv_chunk_header_check (header, namespace_digest, key, payload_len, &expected);
      if (check != KV_CHUNK_CHECK_OK)
        return check;
    }
  if (payload_bytes_read < payload_len)
    return KV_CHUNK_CHECK_SHORT;
  if (header != NULL && verify_payload &&
      kv_chunk_checksum (payload, payload_len) != expected)
    return KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM;
  return KV_CHUNK_CHECK_OK;
}

/* kv_chunk_check() of a whole header and payload whose checksum
 * (kv_chunk_checksum()) the caller computed as the payload arrived, so
 * that the check reads no payload byte again. */
KvChunkCheck
kv_chunk_check_copied (const guint8 *header,
                       gsize         payload_len,
                       guint64       payload_checksum,
                       const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                       const KvKey  *key,
                       gboolean      verify_payload)
{
  guint64 expected = 0;
  KvChunkCheck check;

  check = kv_chunk_header_check (header, namespace_digest, key, payload_len, &expected);
  if (check != KV_CHUNK_CHECK_OK)
    return check;
  if (verify_payload && payload_checksum != expected)
    return KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM;
  return KV_CHUNK_CHECK_OK;
}

/* ---- slab slots ---------------------------------------------------------- */

/*
 * A slab slot's header is a chunk header (above) with two more fields:
 *
 *   72    8  flags: KV_CHUNK_FLAG_SLOT
 *   200   8  sequence number: higher is newer
 *
 * Both lie under the header checksum. A slab file's own header:
 *
 *   0     8  magic "KVTSLAB1"
 *   8     4  slab format version (1)
 *   12    4  header size (4096)
 *   16   32  namespace digest
 *   48    8  slot size (4096 + payload length)
 *   56    8  payload length
 *   64    8  number of slots
 *   72    8  flags (0)
 *   80    8  creation time, microseconds since the Unix epoch
 *   88  ...  zero
 *   4088  8  XXH3-64 of bytes 0..4087
 */

/* The bytes of a slot header that hold fields: past them, up to the
 * header checksum, a slot header is all zeros. */
#define SLOT_FIELDS_END MAX (KV_CHUNK_OFF_HASH + KV_CHUNK_MAX_KEY_HASH_LEN, KV_CHUNK_OFF_SEQUENCE + 8)

static void
encode_slot_fields (guint8       *header,
                    gsize         clear_len,
                    const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                    const KvKey  *key,
                    gsize         payload_len,
                    guint64       payload_checksum,
                    gint64        created_unix_us,
                    guint64       sequence)
{
  const guint8 *hash;
  gsize hash_len = 0;

  hash = kv_key_get_hash (key, &hash_len);
  g_return_if_fail (hash_len <= KV_CHUNK_MAX_KEY_HASH_LEN);

  memset (header, 0, clear_len);
  memcpy (header + KV_CHUNK_OFF_MAGIC, KV_CHUNK_MAGIC, 8);
  kv_wire_put_u32 (header + KV_CHUNK_OFF_VERSION, KV_CHUNK_FORMAT_VERSION);
  kv_wire_put_u32 (header + KV_CHUNK_OFF_HEADER_SIZE, KV_CHUNK_HEADER_SIZE);
  memcpy (header + KV_CHUNK_OFF_NAMESPACE, namespace_digest, KV_CHUNK_NAMESPACE_DIGEST_LEN);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_PAYLOAD_LEN, payload_len);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_PAYLOAD_XXH3, payload_checksum);
  kv_wire_put_u32 (header + KV_CHUNK_OFF_GROUP, kv_key_get_group (key));
  kv_wire_put_u32 (header + KV_CHUNK_OFF_HASH_LEN, hash_len);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_FLAGS, KV_CHUNK_FLAG_SLOT);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_CREATED, (guint64) created_unix_us);
  memcpy (header + KV_CHUNK_OFF_HASH, hash, hash_len);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_SEQUENCE, sequence);
  kv_wire_put_u64 (header + KV_CHUNK_OFF_HEADER_XXH3,
                   kv_chunk_checksum (header, KV_CHUNK_OFF_HEADER_XXH3));
}

/* Fills the 4096 bytes at @header for @key in a slab slot, with the
 * payload's checksum computed by the caller (once, wherever the payload
 * was read already). */
void
kv_chunk_slot_header_encode (guint8       *header,
                             const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                             const KvKey  *key,
                             gsize         payload_len,
                             guint64       payload_checksum,
                             gint64        created_unix_us,
                             guint64       sequence)
{
  encode_slot_fields (header, KV_CHUNK_HEADER_SIZE, namespace_digest, key, payload_len,
                      payload_checksum, created_unix_us, sequence);
}

/* kv_chunk_slot_header_encode() over a buffer that holds a slot header
 * one of these two functions made, or zeros: its bytes past the fields
 * are zeros already, so only the fields are written again (clearing all
 * 4096 bytes took a quarter of a 64 KiB slab store's CPU on the caller's
 * thread). The bytes are the same as kv_chunk_slot_header_encode()'s. */
void
kv_chunk_slot_header_reencode (guint8       *header,
                               const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                               const KvKey  *key,
                               gsize         payload_len,
                               guint64       payload_checksum,
                               gint64        created_unix_us,
                               guint64       sequence)
{
  encode_slot_fields (header, SLOT_FIELDS_END, namespace_digest, key, payload_len,
                      payload_checksum, created_unix_us, sequence);
}

/* Reads the key a slot's header names, without knowing it beforehand
 * (the warm-restart scan): checks everything kv_chunk_header_check()
 * does but the key, and that the header is a slot's. On success
 * *@out_key is the key (transfer full). */
KvChunkCheck
kv_chunk_slot_header_parse (const guint8  *header,
                            const guint8   namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                            gsize          payload_len,
                            KvKey        **out_key,
                            guint64       *out_sequence,
                            guint64       *out_payload_checksum)
{
  guint32 hash_len;

  if (memcmp (header + KV_CHUNK_OFF_MAGIC, KV_CHUNK_MAGIC, 8) != 0)
    return KV_CHUNK_CHECK_BAD_MAGIC;
  if (kv_wire_get_u64 (header + KV_CHUNK_OFF_HEADER_XXH3) !=
      kv_chunk_checksum (header, KV_CHUNK_OFF_HEADER_XXH3))
    return KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM;
  if (kv_wire_get_u32 (header + KV_CHUNK_OFF_VERSION) != KV_CHUNK_FORMAT_VERSION ||
      kv_wire_get_u32 (header + KV_CHUNK_OFF_HEADER_SIZE) != KV_CHUNK_HEADER_SIZE ||
      (kv_wire_get_u64 (header + KV_CHUNK_OFF_FLAGS) & KV_CHUNK_FLAG_SLOT) == 0)
    return KV_CHUNK_CHECK_BAD_VERSION;
  if (memcmp (header + KV_CHUNK_OFF_NAMESPACE, namespace_digest, KV_CHUNK_NAMESPACE_DIGEST_LEN) != 0)
    return KV_CHUNK_CHECK_WRONG_NAMESPACE;
  hash_len = kv_wire_get_u32 (header + KV_CHUNK_OFF_HASH_LEN);
  if (hash_len == 0 || hash_len > KV_CHUNK_MAX_KEY_HASH_LEN)
    return KV_CHUNK_CHECK_WRONG_KEY;
  if (kv_wire_get_u64 (header + KV_CHUNK_OFF_PAYLOAD_LEN) != payload_len)
    return KV_CHUNK_CHECK_WRONG_LENGTH;

  if (out_key != NULL)
    *out_key = kv_key_new (header + KV_CHUNK_OFF_HASH, hash_len,
                           kv_wire_get_u32 (header + KV_CHUNK_OFF_GROUP));
  if (out_sequence != NULL)
    *out_sequence = kv_wire_get_u64 (header + KV_CHUNK_OFF_SEQUENCE);
  if (out_payload_checksum != NULL)
    *out_payload_checksum = kv_wire_get_u64 (header + KV_CHUNK_OFF_PAYLOAD_XXH3);
  return KV_CHUNK_CHECK_OK;
}

/* The sequence number of a slot's header (checked by the caller). */
guint64
kv_chunk_slot_header_get_sequence (const guint8 *header)
{
  return kv_wire_get_u64 (header + KV_CHUNK_OFF_SEQUENCE);
}

void
kv_chunk_slab_header_encode (guint8       *header,
                             const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                             gsize         payload_len,
                             guint64       n_slots,
                             gint64        created_unix_us)
{
  memset (header, 0, KV_SLAB_HEADER_SIZE);
  memcpy (header + KV_SLAB_OFF_MAGIC, KV_SLAB_MAGIC, 8);
  kv_wire_put_u32 (header + KV_SLAB_OFF_VERSION, KV_SLAB_FORMAT_VERSION);
  kv_wire_put_u32 (header + KV_SLAB_OFF_HEADER_SIZE, KV_SLAB_HEADER_SIZE);
  memcpy (header + KV_SLAB_OFF_NAMESPACE, namespace_digest, KV_CHUNK_NAMESPACE_DIGEST_LEN);
  kv_wire_put_u64 (header + KV_SLAB_OFF_SLOT_SIZE, KV_CHUNK_HEADER_SIZE + payload_len);
  kv_wire_put_u64 (header + KV_SLAB_OFF_PAYLOAD_LEN, payload_len);
  kv_wire_put_u64 (header + KV_SLAB_OFF_N_SLOTS, n_slots);
  kv_wire_put_u64 (header + KV_SLAB_OFF_FLAGS, 0);
  kv_wire_put_u64 (header + KV_SLAB_OFF_CREATED, (guint64) created_unix_us);
  kv_wire_put_u64 (header + KV_SLAB_OFF_HEADER_XXH3, kv_chunk_checksum (header, KV_SLAB_OFF_HEADER_XXH3));
}

/* Whether @header is an intact slab file header; fills what it says. */
gboolean
kv_chunk_slab_header_parse (const guint8 *header,
                            guint8        out_namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                            guint64      *out_payload_len,
                            guint64      *out_n_slots)
{
  guint64 payload_len;

  if (memcmp (header + KV_SLAB_OFF_MAGIC, KV_SLAB_MAGIC, 8) != 0 ||
      kv_wire_get_u64 (header + KV_SLAB_OFF_HEADER_XXH3) !=
      kv_chunk_checksum (header, KV_SLAB_OFF_HEADER_XXH3) ||
      kv_wire_get_u32 (header + KV_SLAB_OFF_VERSION) != KV_SLAB_FORMAT_VERSION ||
      kv_wire_get_u32 (header + KV_SLAB_OFF_HEADER_SIZE) != KV_SLAB_HEADER_SIZE)
    return FALSE;
  payload_len = kv_wire_get_u64 (header + KV_SLAB_OFF_PAYLOAD_LEN);
  if (payload_len == 0 || payload_len > G_MAXUINT32 ||
      kv_wire_get_u64 (header + KV_SLAB_OFF_SLOT_SIZE) != KV_CHUNK_HEADER_SIZE + payload_len)
    return FALSE;
  if (out_namespace_digest != NULL)
    memcpy (out_namespace_digest, header + KV_SLAB_OFF_NAMESPACE, KV_CHUNK_NAMESPACE_DIGEST_LEN);
  if (out_payload_len != NULL)
    *out_payload_len = payload_len;
  if (out_n_slots != NULL)
    *out_n_slots = kv_wire_get_u64 (header + KV_SLAB_OFF_N_SLOTS);
  return TRUE;
}

/* Where slot @slot starts in a slab of @payload_len-byte chunks. */
guint64
kv_chunk_slab_slot_offset (gsize   payload_len,
                           guint64 slot)
{
  return KV_SLAB_HEADER_SIZE + slot * (guint64) (KV_CHUNK_HEADER_SIZE + payload_len);
}
