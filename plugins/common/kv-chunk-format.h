/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* The kvtier chunk record: a 4096-byte header, then the payload (one
 * primary slot). The fs tier stores it as a file, the redis tier as a value,
 * the peer tier sends it in DATA frames; every reader checks it the same way.
 * Every field is little-endian; doc/on-disk-format.md describes it byte by
 * byte. */
#define KV_CHUNK_HEADER_SIZE          4096
#define KV_CHUNK_FORMAT_VERSION       1
#define KV_CHUNK_MAGIC                "KVTIERFS"
#define KV_CHUNK_NAMESPACE_DIGEST_LEN 32
/* Longest block hash a kvtier-layout file can hold: its hex form is the
 * file name, which must stay below NAME_MAX. */
#define KV_CHUNK_MAX_KEY_HASH_LEN     112

#define KV_CHUNK_OFF_MAGIC            0
#define KV_CHUNK_OFF_VERSION          8
#define KV_CHUNK_OFF_HEADER_SIZE      12
#define KV_CHUNK_OFF_NAMESPACE        16
#define KV_CHUNK_OFF_PAYLOAD_LEN      48
#define KV_CHUNK_OFF_PAYLOAD_XXH3     56
#define KV_CHUNK_OFF_GROUP            64
#define KV_CHUNK_OFF_HASH_LEN         68
#define KV_CHUNK_OFF_FLAGS            72
#define KV_CHUNK_OFF_CREATED          80
#define KV_CHUNK_OFF_HASH             88
#define KV_CHUNK_OFF_HEADER_XXH3      4088

/*
 * KvChunkCheck:
 * The outcome of checking a chunk file read back from disk.
 */
typedef enum {
  KV_CHUNK_CHECK_OK,
  KV_CHUNK_CHECK_SHORT,             /* fewer bytes than the format requires */
  KV_CHUNK_CHECK_BAD_MAGIC,
  KV_CHUNK_CHECK_BAD_VERSION,
  KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM,
  KV_CHUNK_CHECK_WRONG_NAMESPACE,
  KV_CHUNK_CHECK_WRONG_KEY,         /* e.g. a file renamed to another key's name */
  KV_CHUNK_CHECK_WRONG_LENGTH,
  KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM,
  KV_CHUNK_CHECK_BAD_FILE_CHECKSUM,    /* vLLM's user.vllm.kv_crc32c */
} KvChunkCheck;

const char *kv_chunk_check_to_string      (KvChunkCheck     check);

guint64     kv_chunk_checksum             (const void   *data,
                                        gsize         len);

/* A payload checksum computed in pieces, as the bytes arrive (a network
 * read, a copy): hashing each piece right after it was written, while it is
 * still in the core's cache, costs a fraction of a second pass over the
 * whole chunk. The result equals kv_chunk_checksum() of the concatenation. */
typedef struct _KvChunkHasher KvChunkHasher;

KvChunkHasher *kv_chunk_hasher_new       (void);
void        kv_chunk_hasher_reset         (KvChunkHasher *hasher);
void        kv_chunk_hasher_update        (KvChunkHasher *hasher,
                                           const void    *data,
                                           gsize          len);
guint64     kv_chunk_hasher_digest        (KvChunkHasher *hasher);
void        kv_chunk_hasher_free          (KvChunkHasher *hasher);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvChunkHasher, kv_chunk_hasher_free)

void        kv_chunk_namespace_digest     (const char   *namespace_,
                                        gsize         block_size,
                                        guint8        digest[KV_CHUNK_NAMESPACE_DIGEST_LEN]);

gboolean    kv_chunk_key_fits             (const KvKey  *key);

void        kv_chunk_header_encode        (guint8       *header,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        const KvKey  *key,
                                        const void   *payload,
                                        gsize         payload_len,
                                        gint64        created_unix_us);

void        kv_chunk_header_encode_with_checksum (guint8       *header,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        const KvKey  *key,
                                        gsize         payload_len,
                                        guint64       payload_checksum,
                                        gint64        created_unix_us);

/* The payload checksum a header records; meaningful once the header
 * checked out (kv_chunk_check() or kv_chunk_header_check()). */
guint64     kv_chunk_header_get_payload_checksum (const guint8 *header);

KvChunkCheck   kv_chunk_header_check         (const guint8 *header,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        const KvKey  *key,
                                        gsize         payload_len,
                                        guint64      *out_payload_checksum);

KvChunkCheck   kv_chunk_check          (const guint8 *header,
                                        gsize         header_bytes_read,
                                        const void   *payload,
                                        gsize         payload_len,
                                        gsize         payload_bytes_read,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        const KvKey  *key,
                                        gboolean      verify_payload);

KvChunkCheck   kv_chunk_check_copied   (const guint8 *header,
                                        gsize         payload_len,
                                        guint64       payload_checksum,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        const KvKey  *key,
                                        gboolean      verify_payload);

/* ---- slab slots (the fs tier's layout=slab) -------------------------------
 *
 * A slab file (or block device) starts with a KV_SLAB_HEADER_SIZE file
 * header, then an array of fixed-size slots: slot i at
 * KV_SLAB_HEADER_SIZE + i * (KV_CHUNK_HEADER_SIZE + payload length). A
 * slot is a chunk record whose header has KV_CHUNK_FLAG_SLOT set in its
 * flags and a sequence number at KV_CHUNK_OFF_SEQUENCE (in the zero area
 * of a file's header, so readers of chunk files read a slot's header the
 * same way); the newest copy of a key is the one of the highest sequence
 * number. doc/on-disk-format.md describes both. */
#define KV_CHUNK_FLAG_SLOT            ((guint64) 1)
#define KV_CHUNK_OFF_SEQUENCE         200

#define KV_SLAB_HEADER_SIZE           4096
#define KV_SLAB_FORMAT_VERSION        1
#define KV_SLAB_MAGIC                 "KVTSLAB1"
#define KV_SLAB_OFF_MAGIC             0
#define KV_SLAB_OFF_VERSION           8
#define KV_SLAB_OFF_HEADER_SIZE       12
#define KV_SLAB_OFF_NAMESPACE         16
#define KV_SLAB_OFF_SLOT_SIZE         48
#define KV_SLAB_OFF_PAYLOAD_LEN       56
#define KV_SLAB_OFF_N_SLOTS           64
#define KV_SLAB_OFF_FLAGS             72
#define KV_SLAB_OFF_CREATED           80
#define KV_SLAB_OFF_HEADER_XXH3       4088

void        kv_chunk_slot_header_encode   (guint8       *header,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        const KvKey  *key,
                                        gsize         payload_len,
                                        guint64       payload_checksum,
                                        gint64        created_unix_us,
                                        guint64       sequence);
void        kv_chunk_slot_header_reencode (guint8       *header,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        const KvKey  *key,
                                        gsize         payload_len,
                                        guint64       payload_checksum,
                                        gint64        created_unix_us,
                                        guint64       sequence);

KvChunkCheck   kv_chunk_slot_header_parse  (const guint8 *header,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        gsize         payload_len,
                                        KvKey       **out_key,
                                        guint64      *out_sequence,
                                        guint64      *out_payload_checksum);

guint64     kv_chunk_slot_header_get_sequence (const guint8 *header);

void        kv_chunk_slab_header_encode   (guint8       *header,
                                        const guint8  namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        gsize         payload_len,
                                        guint64       n_slots,
                                        gint64        created_unix_us);

gboolean    kv_chunk_slab_header_parse    (const guint8 *header,
                                        guint8        out_namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                        guint64      *out_payload_len,
                                        guint64      *out_n_slots);

guint64     kv_chunk_slab_slot_offset     (gsize         payload_len,
                                        guint64       slot);

G_END_DECLS
