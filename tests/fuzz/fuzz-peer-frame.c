/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* The peer protocol's frame parser (plugins/peer/kv-peer-frame.c) on an
 * arbitrary byte stream, read as the server and the client read it: a
 * header checked against the body limit before anything is allocated, then
 * the body parsed by its type. Every frame that parses is encoded again
 * and must parse to the same message (and, where the encoding is unique,
 * to the same bytes). The HMAC check runs on every AUTH body and must
 * refuse it. */

#include "config.h"

#include "fuzz-common.h"

#include <string.h>

#include "kv-peer-frame.h"
#include "kv-peer-handshake.h"

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

static void
assert_same_keys (GPtrArray *a,
                  GPtrArray *b)
{
  g_assert_cmpuint (a->len, ==, b->len);
  for (guint i = 0; i < a->len; i++)
    g_assert_true (kv_key_equal (a->pdata[i], b->pdata[i]));
}

/* Encodes @message again and checks that it parses back the same. */
static void
round_trip (const KvPeerMessage *message,
            const guint8        *body,
            gsize                body_len,
            guint32              max_keys)
{
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_auto(KvPeerMessage) again = { 0 };
  KvPeerFrameHeader header;
  g_autoptr(GError) error = NULL;
  gboolean same_bytes = TRUE;

  switch (message->type)
    {
    case KV_PEER_FRAME_HELLO:
      kv_peer_frame_append_hello (out, message->nonce);
      /* a HELLO of another version re-encodes as this one's */
      same_bytes = message->version == KV_PEER_PROTOCOL_VERSION && body[10] == 0 && body[11] == 0;
      break;
    case KV_PEER_FRAME_AUTH:
      {
        guint8 params[KV_PEER_AUTH_PARAMS_SIZE];

        kv_peer_frame_auth_params (params, message->block_size, message->namespace_digest,
                                   message->max_keys, message->max_inflight_bytes);
        kv_peer_frame_append_auth (out, params, message->mac);
        same_bytes = memcmp (body + 44, "\0\0\0\0", 4) == 0;
      }
      break;
    case KV_PEER_FRAME_LOOKUP:
    case KV_PEER_FRAME_FETCH:
      g_assert_true (kv_peer_frame_append_keys (out, message->type, message->request_id,
                                                (KvKey * const *) message->keys->pdata,
                                                message->keys->len, &error));
      g_assert_no_error (error);
      break;
    case KV_PEER_FRAME_LOOKUP_RESP:
      kv_peer_frame_append_lookup_resp (out, message->request_id, message->answers, message->n_answers);
      break;
    case KV_PEER_FRAME_DATA:
      {
        guint8 prefix[KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE];

        kv_peer_frame_encode_data_prefix (prefix, message->request_id, message->index,
                                          message->status, 0);
        g_byte_array_append (out, prefix, sizeof prefix);
        same_bytes = body_len == KV_PEER_DATA_PREFIX_SIZE;
      }
      break;
    case KV_PEER_FRAME_DONE:
      kv_peer_frame_append_done (out, message->request_id, message->n_sent);
      break;
    case KV_PEER_FRAME_ERROR:
      kv_peer_frame_append_error (out, message->error_code, message->error_message);
      /* invalid UTF-8 was replaced */
      same_bytes = g_utf8_validate ((const char *) body + 6, body_len - 6, NULL) &&
                   memchr (body + 6, 0, body_len - 6) == NULL;
      break;
    case KV_PEER_FRAME_BYE:
      kv_peer_frame_append_bye (out);
      break;
    default:
      g_assert_not_reached ();
    }

  g_assert_cmpuint (out->len, >=, KV_PEER_FRAME_HEADER_SIZE);
  g_assert_true (kv_peer_frame_header_parse (out->data, G_MAXUINT32, &header, NULL));
  g_assert_cmpint (header.type, ==, message->type);
  g_assert_cmpuint (header.body_len, ==, out->len - KV_PEER_FRAME_HEADER_SIZE);
  if (same_bytes && message->type != KV_PEER_FRAME_ERROR)
    {
      g_assert_cmpuint (header.body_len, ==, body_len);
      g_assert_cmpmem (out->data + KV_PEER_FRAME_HEADER_SIZE, header.body_len, body, body_len);
    }
  g_assert_true (kv_peer_message_parse (header.type, out->data + KV_PEER_FRAME_HEADER_SIZE,
                                        header.body_len, max_keys, &again, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (again.request_id, ==, message->request_id);
  if (message->keys != NULL)
    assert_same_keys (message->keys, again.keys);
  if (message->answers != NULL)
    g_assert_cmpmem (again.answers, again.n_answers, message->answers, message->n_answers);
  if (message->type == KV_PEER_FRAME_ERROR)
    {
      g_assert_cmpuint (again.error_code, ==, message->error_code);
      g_assert_true (g_str_has_prefix (message->error_message, again.error_message));
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  static const char secret_text[] = "fuzzing-secret-0123456789";
  g_autoptr(GBytes) secret = g_bytes_new_static (secret_text, sizeof secret_text - 1);
  guint8 client_nonce[KV_PEER_NONCE_LEN] = { 1 };
  guint8 server_nonce[KV_PEER_NONCE_LEN] = { 2 };
  /* the first byte picks the limits the stream is read with */
  guint32 max_keys = size > 0 ? 1 + data[0] % 64 : 8;
  guint32 max_body = size > 0 && (data[0] & 0x80) ? 4096 : KV_PEER_MAX_CONTROL_BODY;
  gsize pos = size > 0 ? 1 : 0;

  while (size - pos >= KV_PEER_FRAME_HEADER_SIZE)
    {
      g_auto(KvPeerMessage) message = { 0 };
      g_autoptr(GError) error = NULL;
      KvPeerFrameHeader header;
      const guint8 *body;

      if (!kv_peer_frame_header_parse (data + pos, max_body, &header, &error))
        {
          g_assert_nonnull (error);
          g_assert_true (error->domain == KV_PEER_FRAME_ERROR_DOMAIN);
          break;
        }
      g_assert_cmpuint (header.body_len, <=, max_body);
      pos += KV_PEER_FRAME_HEADER_SIZE;
      if (size - pos < header.body_len)
        break;  /* a truncated frame: the reader waits, then times out */
      body = data + pos;
      pos += header.body_len;

      /* a copy of exactly the body, so ASan sees any read past it */
      {
        g_autofree guint8 *copy = g_malloc (MAX (header.body_len, 1));

        memcpy (copy, body, header.body_len);

        if (!kv_peer_message_parse (header.type, copy, header.body_len, max_keys, &message, &error))
          {
            g_assert_nonnull (error);
            g_assert_null (message.keys);
            g_assert_null (message.answers);
            continue;
          }
        g_assert_no_error (error);
        g_assert_cmpint (message.type, ==, header.type);
        if (message.keys != NULL)
          g_assert_cmpuint (message.keys->len, <=, max_keys);
        if (message.type == KV_PEER_FRAME_AUTH)
          g_assert_false (kv_peer_handshake_verify (secret, KV_PEER_ROLE_CLIENT, client_nonce,
                                                    server_nonce, copy, message.mac));
        round_trip (&message, copy, header.body_len, max_keys);
      }
    }
  return 0;
}
