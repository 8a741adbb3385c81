/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* The event stream's frames (plugins/peer/kv-peer-stream.c) on an
 * arbitrary byte stream, read as a subscriber reads it: each header
 * checked against the limit of its type before anything is allocated, the
 * body parsed, and the message applied to a KvFleetIndex through the
 * stream reader that holds the node to the stream's order (a snapshot's
 * entries between its begin and end, as many as announced; then deltas in
 * sequence). Every frame that parses is encoded again and must parse to
 * the same message; the index must stay consistent whatever the node
 * sends. The server's SUBSCRIBE is parsed too. */

#include "config.h"

#include "fuzz-common.h"

#include <string.h>

#include "kv-peer-frame.h"
#include "kv-peer-stream.h"

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

static void
round_trip (const KvPeerStreamMessage *message,
            const guint8              *body,
            gsize                      body_len,
            guint32                    max_entries)
{
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_auto(KvPeerStreamMessage) again = { 0 };
  KvPeerFrameHeader header;
  g_autoptr(GError) error = NULL;

  switch (message->type)
    {
    case KV_PEER_FRAME_SUBSCRIBE:
      kv_peer_stream_append_subscribe (out);
      break;
    case KV_PEER_FRAME_SNAPSHOT_BEGIN:
      kv_peer_stream_append_begin (out, message->seq, message->count);
      break;
    case KV_PEER_FRAME_SNAPSHOT_END:
    case KV_PEER_FRAME_HEARTBEAT:
      kv_peer_stream_append_seq (out, message->type, message->seq);
      break;
    case KV_PEER_FRAME_SNAPSHOT_ENTRIES:
    case KV_PEER_FRAME_EVENTS:
      {
        guint start = kv_peer_stream_begin_entries (out, message->type, message->seq);

        for (guint i = 0; i < message->keys->len; i++)
          kv_peer_stream_add_entry (out, message->keys->pdata[i], message->locations[i]);
        kv_peer_stream_end_entries (out, start, message->keys->len);
      }
      break;
    default:
      g_assert_not_reached ();
    }

  /* the encoding is unique: the same bytes */
  g_assert_true (kv_peer_frame_header_parse (out->data, G_MAXUINT32, &header, NULL));
  g_assert_cmpint (header.type, ==, message->type);
  g_assert_cmpmem (out->data + KV_PEER_FRAME_HEADER_SIZE, header.body_len, body, body_len);
  g_assert_true (kv_peer_stream_parse (header.type, out->data + KV_PEER_FRAME_HEADER_SIZE,
                                       header.body_len, max_entries, &again, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (again.seq, ==, message->seq);
  g_assert_cmpuint (again.count, ==, message->count);
  if (message->keys != NULL)
    {
      g_assert_cmpuint (again.keys->len, ==, message->keys->len);
      for (guint i = 0; i < message->keys->len; i++)
        g_assert_true (kv_key_equal (again.keys->pdata[i], message->keys->pdata[i]));
      g_assert_cmpmem (again.locations, again.keys->len, message->locations, message->keys->len);
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(KvFleetIndex) index = kv_fleet_index_new ();
  KvPeerStreamReader reader;
  /* the first byte picks the entries a frame may hold */
  guint32 max_entries = size > 0 ? 1 + data[0] % 64 : 8;
  gsize pos = size > 0 ? 1 : 0;
  guint node = kv_fleet_index_add_node (index, "127.0.0.1:7411");
  gboolean broken = FALSE;

  kv_peer_stream_reader_init (&reader, index, node);
  while (size - pos >= KV_PEER_FRAME_HEADER_SIZE)
    {
      g_auto(KvPeerStreamMessage) message = { 0 };
      g_autoptr(GError) error = NULL;
      KvPeerFrameHeader header;
      g_autofree guint8 *copy = NULL;
      gboolean done = FALSE;

      if (!kv_peer_frame_header_parse (data + pos,
                                       kv_peer_stream_max_body (KV_PEER_FRAME_EVENTS, max_entries),
                                       &header, &error))
        {
          g_assert_true (error->domain == KV_PEER_FRAME_ERROR_DOMAIN);
          break;
        }
      pos += KV_PEER_FRAME_HEADER_SIZE;
      if (size - pos < header.body_len)
        break;
      /* a copy of exactly the body, so ASan sees any read past it */
      copy = g_malloc (MAX (header.body_len, 1));
      memcpy (copy, data + pos, header.body_len);
      pos += header.body_len;

      if (!kv_peer_stream_is_stream_frame (header.type) ||
          header.body_len > kv_peer_stream_max_body (header.type, max_entries))
        continue;
      if (!kv_peer_stream_parse (header.type, copy, header.body_len, max_entries, &message, &error))
        {
          g_assert_nonnull (error);
          g_assert_null (message.keys);
          continue;
        }
      g_assert_no_error (error);
      if (message.keys != NULL)
        {
          g_assert_cmpuint (message.keys->len, >=, 1);
          g_assert_cmpuint (message.keys->len, <=, max_entries);
        }
      round_trip (&message, copy, header.body_len, max_entries);

      /* once the node broke the stream's order, a subscriber reconnects:
       * nothing more of this connection is applied */
      if (broken || header.type == KV_PEER_FRAME_SUBSCRIBE)
        continue;
      if (!kv_peer_stream_reader_apply (&reader, &message, &done, &error))
        {
          g_assert_nonnull (error);
          broken = TRUE;
        }
      /* what the index holds is what the node said, nothing else */
      g_assert_cmpuint (kv_fleet_index_get_n_keys (index), ==,
                        kv_fleet_index_get_node_n_keys (index, node));
    }

  /* the index answers for whatever it holds */
  {
    g_autoptr(KvFleetMatch) match = kv_fleet_index_lookup (index, NULL, 0);

    g_assert_cmpuint (kv_fleet_match_get_n_nodes (match), ==, 0);
  }
  return 0;
}
