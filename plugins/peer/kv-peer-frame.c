/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-frame.h"

#include <string.h>

#include "kv-chunk-format.h"
#include "kv-wire.h"

/* Wire layouts (all integers little-endian; doc/protocol.md):
 *
 *   header       type u8 | flags u8 (0) | reserved u16 (0) | body length u32
 *   HELLO        magic[8] | version u16 | reserved u16 | nonce[32]
 *   AUTH         block size u64 | namespace digest[32] | max keys u32 |
 *                reserved u32 | max in-flight bytes u64 | mac[32]
 *   LOOKUP/FETCH request id u32 | n u32 | n × (group u32 | hash length u16 | hash)
 *   LOOKUP_RESP  request id u32 | n u32 | n × answer u8
 *   DATA         request id u32 | index u32 | status u8 | reserved[3] |
 *                the chunk record (kv-chunk-format.h) when status is OK
 *   DONE         request id u32 | n sent u32
 *   ERROR        code u32 | length u16 | message (UTF-8, at most 256 bytes)
 *   BYE          (empty)
 *
 * The event stream's frames (SUBSCRIBE … HEARTBEAT) are parsed by
 * kv-peer-stream.c.
 */

G_DEFINE_QUARK (kv-peer-frame-error-quark, kv_peer_frame_error)

guint
kv_peer_frame_begin (GByteArray      *out,
                     KvPeerFrameType  type)
{
  guint8 header[KV_PEER_FRAME_HEADER_SIZE];
  guint start = out->len;

  kv_peer_frame_header_encode (header, type, 0);
  g_byte_array_append (out, header, sizeof header);
  return start;
}

void
kv_peer_frame_end (GByteArray *out,
                   guint       start)
{
  kv_wire_put_u32 (out->data + start + 4, out->len - start - KV_PEER_FRAME_HEADER_SIZE);
}

const char *
kv_peer_frame_type_to_string (guint type)
{
  switch (type)
    {
    case KV_PEER_FRAME_HELLO: return "HELLO";
    case KV_PEER_FRAME_AUTH: return "AUTH";
    case KV_PEER_FRAME_LOOKUP: return "LOOKUP";
    case KV_PEER_FRAME_LOOKUP_RESP: return "LOOKUP_RESP";
    case KV_PEER_FRAME_FETCH: return "FETCH";
    case KV_PEER_FRAME_DATA: return "DATA";
    case KV_PEER_FRAME_DONE: return "DONE";
    case KV_PEER_FRAME_ERROR: return "ERROR";
    case KV_PEER_FRAME_BYE: return "BYE";
    case KV_PEER_FRAME_SUBSCRIBE: return "SUBSCRIBE";
    case KV_PEER_FRAME_SNAPSHOT_BEGIN: return "SNAPSHOT_BEGIN";
    case KV_PEER_FRAME_SNAPSHOT_ENTRIES: return "SNAPSHOT_ENTRIES";
    case KV_PEER_FRAME_SNAPSHOT_END: return "SNAPSHOT_END";
    case KV_PEER_FRAME_EVENTS: return "EVENTS";
    case KV_PEER_FRAME_HEARTBEAT: return "HEARTBEAT";
    default: return "unknown";
    }
}

void
kv_peer_frame_header_encode (guint8          header[KV_PEER_FRAME_HEADER_SIZE],
                             KvPeerFrameType type,
                             guint32         body_len)
{
  header[0] = (guint8) type;
  header[1] = 0;
  kv_wire_put_u16 (header + 2, 0);
  kv_wire_put_u32 (header + 4, body_len);
}

/* Checks a frame header before anything of the body is read or allocated:
 * a known type, zero flags and reserved bytes, a body within @max_body. */
gboolean
kv_peer_frame_header_parse (const guint8        header[KV_PEER_FRAME_HEADER_SIZE],
                            guint32             max_body,
                            KvPeerFrameHeader  *out,
                            GError            **error)
{
  guint32 body_len = kv_wire_get_u32 (header + 4);

  if (header[0] < KV_PEER_FRAME_HELLO || header[0] > KV_PEER_FRAME_HEARTBEAT)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "unknown frame type %u", header[0]);
      return FALSE;
    }
  if (header[1] != 0 || kv_wire_get_u16 (header + 2) != 0)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "%s frame with nonzero flags or reserved bytes",
                   kv_peer_frame_type_to_string (header[0]));
      return FALSE;
    }
  if (body_len > max_body)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                   "%s frame of %u bytes is larger than the limit of %u",
                   kv_peer_frame_type_to_string (header[0]), body_len, max_body);
      return FALSE;
    }
  out->type = header[0];
  out->body_len = body_len;
  return TRUE;
}

void
kv_peer_message_clear (KvPeerMessage *message)
{
  g_clear_pointer (&message->keys, g_ptr_array_unref);
  g_clear_pointer (&message->answers, g_free);
  g_clear_pointer (&message->error_message, g_free);
  memset (message, 0, sizeof *message);
}

gboolean
kv_peer_frame_bad_body (GError          **error,
                        KvPeerFrameType   type,
                        const char       *why)
{
  g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
               "malformed %s frame: %s", kv_peer_frame_type_to_string (type), why);
  return FALSE;
}

static gboolean
parse_keys (const guint8   *body,
            gsize           body_len,
            guint32         max_keys,
            KvPeerMessage  *out,
            GError        **error)
{
  gsize pos = 8;
  guint32 n;

  if (body_len < 8)
    return kv_peer_frame_bad_body (error, out->type, "shorter than its count");
  out->request_id = kv_wire_get_u32 (body);
  n = kv_wire_get_u32 (body + 4);
  if (n == 0)
    return kv_peer_frame_bad_body (error, out->type, "no keys");
  if (n > max_keys)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                   "%s frame of %u keys is over the limit of %u",
                   kv_peer_frame_type_to_string (out->type), n, max_keys);
      return FALSE;
    }
  /* Each key takes at least 7 bytes: a count the body cannot hold is
   * refused before the array is sized by it. */
  if (n > (body_len - 8) / 7)
    return kv_peer_frame_bad_body (error, out->type, "more keys than bytes");

  out->keys = g_ptr_array_new_full (n, (GDestroyNotify) kv_key_unref);
  for (guint32 i = 0; i < n; i++)
    {
      guint32 group;
      guint16 hash_len;

      if (body_len - pos < 6)
        return kv_peer_frame_bad_body (error, out->type, "a key is cut short");
      group = kv_wire_get_u32 (body + pos);
      hash_len = kv_wire_get_u16 (body + pos + 4);
      pos += 6;
      if (hash_len == 0 || hash_len > KV_CHUNK_MAX_KEY_HASH_LEN)
        return kv_peer_frame_bad_body (error, out->type, "a key hash is empty or longer than 112 bytes");
      if (body_len - pos < hash_len)
        return kv_peer_frame_bad_body (error, out->type, "a key hash is cut short");
      g_ptr_array_add (out->keys, kv_key_new (body + pos, hash_len, group));
      pos += hash_len;
    }
  if (pos != body_len)
    return kv_peer_frame_bad_body (error, out->type, "bytes after the last key");
  return TRUE;
}

/* Parses the body of a frame whose header was accepted. DATA frames are
 * parsed from their 12-byte prefix only: the record behind it is read
 * straight into a primary slot by the caller. */
gboolean
kv_peer_message_parse (KvPeerFrameType  type,
                       const guint8    *body,
                       gsize            body_len,
                       guint32          max_keys,
                       KvPeerMessage   *out,
                       GError         **error)
{
  memset (out, 0, sizeof *out);
  out->type = type;

  switch (type)
    {
    case KV_PEER_FRAME_HELLO:
      if (body_len != KV_PEER_HELLO_BODY_SIZE)
        return kv_peer_frame_bad_body (error, type, "wrong length");
      if (memcmp (body, KV_PEER_MAGIC, KV_PEER_MAGIC_LEN) != 0)
        return kv_peer_frame_bad_body (error, type, "not the kvtier peer protocol");
      out->version = kv_wire_get_u16 (body + KV_PEER_MAGIC_LEN);
      memcpy (out->nonce, body + KV_PEER_MAGIC_LEN + 4, KV_PEER_NONCE_LEN);
      return TRUE;

    case KV_PEER_FRAME_AUTH:
      if (body_len != KV_PEER_AUTH_BODY_SIZE)
        return kv_peer_frame_bad_body (error, type, "wrong length");
      out->block_size = kv_wire_get_u64 (body);
      memcpy (out->namespace_digest, body + 8, 32);
      out->max_keys = kv_wire_get_u32 (body + 40);
      out->max_inflight_bytes = kv_wire_get_u64 (body + 48);
      memcpy (out->mac, body + KV_PEER_AUTH_PARAMS_SIZE, KV_PEER_MAC_LEN);
      return TRUE;

    case KV_PEER_FRAME_LOOKUP:
    case KV_PEER_FRAME_FETCH:
      if (!parse_keys (body, body_len, max_keys, out, error))
        {
          kv_peer_message_clear (out);
          return FALSE;
        }
      return TRUE;

    case KV_PEER_FRAME_LOOKUP_RESP:
      if (body_len < 8)
        return kv_peer_frame_bad_body (error, type, "shorter than its count");
      out->request_id = kv_wire_get_u32 (body);
      out->n_answers = kv_wire_get_u32 (body + 4);
      if (out->n_answers > max_keys || out->n_answers != body_len - 8)
        return kv_peer_frame_bad_body (error, type, "the count does not match the answers");
      for (gsize i = 8; i < body_len; i++)
        if (body[i] > KV_PEER_LOOKUP_PENDING)
          return kv_peer_frame_bad_body (error, type, "unknown answer");
      out->answers = g_memdup2 (body + 8, out->n_answers);
      return TRUE;

    case KV_PEER_FRAME_DATA:
      if (body_len < KV_PEER_DATA_PREFIX_SIZE)
        return kv_peer_frame_bad_body (error, type, "shorter than its prefix");
      out->request_id = kv_wire_get_u32 (body);
      out->index = kv_wire_get_u32 (body + 4);
      out->status = body[8];
      if (out->status > KV_PEER_DATA_MISS || body[9] != 0 || body[10] != 0 || body[11] != 0)
        return kv_peer_frame_bad_body (error, type, "unknown status or nonzero reserved bytes");
      return TRUE;

    case KV_PEER_FRAME_DONE:
      if (body_len != 8)
        return kv_peer_frame_bad_body (error, type, "wrong length");
      out->request_id = kv_wire_get_u32 (body);
      out->n_sent = kv_wire_get_u32 (body + 4);
      return TRUE;

    case KV_PEER_FRAME_ERROR:
      {
        guint16 len;

        if (body_len < 6)
          return kv_peer_frame_bad_body (error, type, "shorter than its length");
        out->error_code = kv_wire_get_u32 (body);
        len = kv_wire_get_u16 (body + 4);
        if (len > KV_PEER_MAX_ERROR_MESSAGE || (gsize) len + 6 != body_len)
          return kv_peer_frame_bad_body (error, type, "the message length does not match");
        /* Shown in logs: anything but valid UTF-8 is replaced. */
        out->error_message = g_utf8_make_valid ((const char *) body + 6, len);
        return TRUE;
      }

    case KV_PEER_FRAME_BYE:
      if (body_len != 0)
        return kv_peer_frame_bad_body (error, type, "wrong length");
      return TRUE;

    default:
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "unknown frame type %u", (guint) type);
      return FALSE;
    }
}

void
kv_peer_frame_append_hello (GByteArray   *out,
                            const guint8  nonce[KV_PEER_NONCE_LEN])
{
  guint start = kv_peer_frame_begin (out, KV_PEER_FRAME_HELLO);
  guint8 version[4];

  g_byte_array_append (out, (const guint8 *) KV_PEER_MAGIC, KV_PEER_MAGIC_LEN);
  kv_wire_put_u16 (version, KV_PEER_PROTOCOL_VERSION);
  kv_wire_put_u16 (version + 2, 0);
  g_byte_array_append (out, version, 4);
  g_byte_array_append (out, nonce, KV_PEER_NONCE_LEN);
  kv_peer_frame_end (out, start);
}

void
kv_peer_frame_auth_params (guint8        params[KV_PEER_AUTH_PARAMS_SIZE],
                           guint64       block_size,
                           const guint8  namespace_digest[32],
                           guint32       max_keys,
                           guint64       max_inflight_bytes)
{
  kv_wire_put_u64 (params, block_size);
  memcpy (params + 8, namespace_digest, 32);
  kv_wire_put_u32 (params + 40, max_keys);
  kv_wire_put_u32 (params + 44, 0);
  kv_wire_put_u64 (params + 48, max_inflight_bytes);
}

void
kv_peer_frame_append_auth (GByteArray   *out,
                           const guint8  params[KV_PEER_AUTH_PARAMS_SIZE],
                           const guint8  mac[KV_PEER_MAC_LEN])
{
  guint start = kv_peer_frame_begin (out, KV_PEER_FRAME_AUTH);

  g_byte_array_append (out, params, KV_PEER_AUTH_PARAMS_SIZE);
  g_byte_array_append (out, mac, KV_PEER_MAC_LEN);
  kv_peer_frame_end (out, start);
}

gboolean
kv_peer_frame_append_keys (GByteArray      *out,
                           KvPeerFrameType  type,
                           guint32          request_id,
                           KvKey * const   *keys,
                           guint            n_keys,
                           GError         **error)
{
  guint start;

  g_return_val_if_fail (type == KV_PEER_FRAME_LOOKUP || type == KV_PEER_FRAME_FETCH, FALSE);

  for (guint i = 0; i < n_keys; i++)
    if (!kv_chunk_key_fits (keys[i]))
      {
        g_autofree char *name = kv_key_to_string (keys[i]);

        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                     "Key %s cannot be sent to a peer: its hash is empty or longer than %u bytes",
                     name, KV_CHUNK_MAX_KEY_HASH_LEN);
        return FALSE;
      }

  start = kv_peer_frame_begin (out, type);
  kv_wire_append_u32 (out, request_id);
  kv_wire_append_u32 (out, n_keys);
  for (guint i = 0; i < n_keys; i++)
    {
      gsize hash_len = 0;
      const guint8 *hash = kv_key_get_hash (keys[i], &hash_len);
      guint8 lenb[2];

      kv_wire_append_u32 (out, kv_key_get_group (keys[i]));
      kv_wire_put_u16 (lenb, (guint16) hash_len);
      g_byte_array_append (out, lenb, 2);
      g_byte_array_append (out, hash, hash_len);
    }
  kv_peer_frame_end (out, start);
  return TRUE;
}

void
kv_peer_frame_append_lookup_resp (GByteArray   *out,
                                  guint32       request_id,
                                  const guint8 *answers,
                                  guint32       n_answers)
{
  guint start = kv_peer_frame_begin (out, KV_PEER_FRAME_LOOKUP_RESP);

  kv_wire_append_u32 (out, request_id);
  kv_wire_append_u32 (out, n_answers);
  g_byte_array_append (out, answers, n_answers);
  kv_peer_frame_end (out, start);
}

/* The header and prefix of a DATA frame; @record_len bytes of chunk
 * record follow it on the wire (0 for a miss). */
void
kv_peer_frame_encode_data_prefix (guint8           frame[KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE],
                                  guint32          request_id,
                                  guint32          index,
                                  KvPeerDataStatus status,
                                  guint32          record_len)
{
  guint8 *body = frame + KV_PEER_FRAME_HEADER_SIZE;

  kv_peer_frame_header_encode (frame, KV_PEER_FRAME_DATA, KV_PEER_DATA_PREFIX_SIZE + record_len);
  kv_wire_put_u32 (body, request_id);
  kv_wire_put_u32 (body + 4, index);
  body[8] = (guint8) status;
  body[9] = body[10] = body[11] = 0;
}

void
kv_peer_frame_append_done (GByteArray *out,
                           guint32     request_id,
                           guint32     n_sent)
{
  guint start = kv_peer_frame_begin (out, KV_PEER_FRAME_DONE);

  kv_wire_append_u32 (out, request_id);
  kv_wire_append_u32 (out, n_sent);
  kv_peer_frame_end (out, start);
}

void
kv_peer_frame_append_error (GByteArray      *out,
                            KvPeerErrorCode  code,
                            const char      *message)
{
  guint start = kv_peer_frame_begin (out, KV_PEER_FRAME_ERROR);
  gsize len = message != NULL ? strlen (message) : 0;
  guint8 lenb[2];

  /* Cut at a character boundary, so that the peer reads valid UTF-8. */
  if (len > KV_PEER_MAX_ERROR_MESSAGE)
    len = g_utf8_find_prev_char (message, message + KV_PEER_MAX_ERROR_MESSAGE + 1) - message;
  kv_wire_append_u32 (out, code);
  kv_wire_put_u16 (lenb, (guint16) len);
  g_byte_array_append (out, lenb, 2);
  g_byte_array_append (out, (const guint8 *) message, len);
  kv_peer_frame_end (out, start);
}

void
kv_peer_frame_append_bye (GByteArray *out)
{
  kv_peer_frame_end (out, kv_peer_frame_begin (out, KV_PEER_FRAME_BYE));
}
