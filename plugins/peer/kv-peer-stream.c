/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-stream.h"

#include <string.h>

#include "kv-chunk-format.h"
#include "kv-wire.h"

/* Wire layouts (all integers little-endian; doc/protocol.md):
 *
 *   SUBSCRIBE         flags u32 (0) | reserved u32 (0)
 *   SNAPSHOT_BEGIN    seq u64 | count u64
 *   SNAPSHOT_ENTRIES  seq u64 | n u32 | n × (group u32 | hash length u16 | hash | locations u8)
 *   SNAPSHOT_END      seq u64
 *   EVENTS            seq u64 | n u32 | n × (group u32 | hash length u16 | hash | locations u8)
 *   HEARTBEAT         seq u64
 */

gboolean
kv_peer_stream_is_stream_frame (guint type)
{
  return type >= KV_PEER_FRAME_SUBSCRIBE && type <= KV_PEER_FRAME_HEARTBEAT;
}

/* The largest body a frame of @type may have, with at most @max_entries
 * entries in an entries frame. */
guint32
kv_peer_stream_max_body (KvPeerFrameType type,
                         guint32         max_entries)
{
  switch (type)
    {
    case KV_PEER_FRAME_SUBSCRIBE:
      return KV_PEER_STREAM_SUBSCRIBE_SIZE;
    case KV_PEER_FRAME_SNAPSHOT_BEGIN:
      return KV_PEER_STREAM_BEGIN_SIZE;
    case KV_PEER_FRAME_SNAPSHOT_END:
    case KV_PEER_FRAME_HEARTBEAT:
      return KV_PEER_STREAM_SEQ_SIZE;
    case KV_PEER_FRAME_SNAPSHOT_ENTRIES:
    case KV_PEER_FRAME_EVENTS:
      return KV_PEER_STREAM_ENTRIES_PREFIX +
             MIN (max_entries, KV_PEER_MAX_KEYS_LIMIT) * KV_PEER_STREAM_ENTRY_WIRE_MAX;
    default:
      return 0;
    }
}

void
kv_peer_stream_message_clear (KvPeerStreamMessage *message)
{
  g_clear_pointer (&message->keys, g_ptr_array_unref);
  g_clear_pointer (&message->locations, g_free);
  memset (message, 0, sizeof *message);
}

static gboolean
parse_entries (const guint8         *body,
               gsize                 body_len,
               guint32               max_entries,
               KvPeerStreamMessage  *out,
               GError              **error)
{
  gsize pos = KV_PEER_STREAM_ENTRIES_PREFIX;
  guint32 n;

  if (body_len < KV_PEER_STREAM_ENTRIES_PREFIX)
    return kv_peer_frame_bad_body (error, out->type, "shorter than its count");
  out->seq = kv_wire_get_u64 (body);
  n = kv_wire_get_u32 (body + 8);
  if (n == 0)
    return kv_peer_frame_bad_body (error, out->type, "no entries");
  if (n > max_entries)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                   "%s frame of %u entries is over the limit of %u",
                   kv_peer_frame_type_to_string (out->type), n, max_entries);
      return FALSE;
    }
  /* Each entry takes at least 8 bytes: a count the body cannot hold is
   * refused before anything is sized by it. */
  if (n > (body_len - KV_PEER_STREAM_ENTRIES_PREFIX) / 8)
    return kv_peer_frame_bad_body (error, out->type, "more entries than bytes");

  out->keys = g_ptr_array_new_full (n, (GDestroyNotify) kv_key_unref);
  out->locations = g_malloc (n);
  for (guint32 i = 0; i < n; i++)
    {
      guint32 group;
      guint16 hash_len;

      if (body_len - pos < 6)
        return kv_peer_frame_bad_body (error, out->type, "an entry is cut short");
      group = kv_wire_get_u32 (body + pos);
      hash_len = kv_wire_get_u16 (body + pos + 4);
      pos += 6;
      if (hash_len == 0 || hash_len > KV_CHUNK_MAX_KEY_HASH_LEN)
        return kv_peer_frame_bad_body (error, out->type, "a key hash is empty or longer than 112 bytes");
      if (body_len - pos < (gsize) hash_len + 1)
        return kv_peer_frame_bad_body (error, out->type, "an entry is cut short");
      if ((body[pos + hash_len] & ~KV_PEER_STREAM_LOCATION_MASK) != 0)
        return kv_peer_frame_bad_body (error, out->type, "unknown location bits");
      g_ptr_array_add (out->keys, kv_key_new (body + pos, hash_len, group));
      out->locations[i] = body[pos + hash_len];
      pos += hash_len + 1;
    }
  if (pos != body_len)
    return kv_peer_frame_bad_body (error, out->type, "bytes after the last entry");
  return TRUE;
}

/* Parses the body of a stream frame whose header was accepted (with a
 * body of at most kv_peer_stream_max_body()). */
gboolean
kv_peer_stream_parse (KvPeerFrameType       type,
                      const guint8         *body,
                      gsize                 body_len,
                      guint32               max_entries,
                      KvPeerStreamMessage  *out,
                      GError              **error)
{
  memset (out, 0, sizeof *out);
  out->type = type;

  switch (type)
    {
    case KV_PEER_FRAME_SUBSCRIBE:
      if (body_len != KV_PEER_STREAM_SUBSCRIBE_SIZE)
        return kv_peer_frame_bad_body (error, type, "wrong length");
      out->flags = kv_wire_get_u32 (body);
      if (out->flags != 0 || kv_wire_get_u32 (body + 4) != 0)
        return kv_peer_frame_bad_body (error, type, "unknown flags or nonzero reserved bytes");
      return TRUE;

    case KV_PEER_FRAME_SNAPSHOT_BEGIN:
      if (body_len != KV_PEER_STREAM_BEGIN_SIZE)
        return kv_peer_frame_bad_body (error, type, "wrong length");
      out->seq = kv_wire_get_u64 (body);
      out->count = kv_wire_get_u64 (body + 8);
      return TRUE;

    case KV_PEER_FRAME_SNAPSHOT_END:
    case KV_PEER_FRAME_HEARTBEAT:
      if (body_len != KV_PEER_STREAM_SEQ_SIZE)
        return kv_peer_frame_bad_body (error, type, "wrong length");
      out->seq = kv_wire_get_u64 (body);
      return TRUE;

    case KV_PEER_FRAME_SNAPSHOT_ENTRIES:
    case KV_PEER_FRAME_EVENTS:
      if (!parse_entries (body, body_len, MIN (max_entries, KV_PEER_MAX_KEYS_LIMIT), out, error))
        {
          kv_peer_stream_message_clear (out);
          return FALSE;
        }
      return TRUE;

    default:
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "%s is not a frame of the event stream",
                   kv_peer_frame_type_to_string (type));
      return FALSE;
    }
}

void
kv_peer_stream_append_subscribe (GByteArray *out)
{
  guint start = kv_peer_frame_begin (out, KV_PEER_FRAME_SUBSCRIBE);

  kv_wire_append_u32 (out, 0);
  kv_wire_append_u32 (out, 0);
  kv_peer_frame_end (out, start);
}

void
kv_peer_stream_append_begin (GByteArray *out,
                             guint64     seq,
                             guint64     count)
{
  guint start = kv_peer_frame_begin (out, KV_PEER_FRAME_SNAPSHOT_BEGIN);

  kv_wire_append_u64 (out, seq);
  kv_wire_append_u64 (out, count);
  kv_peer_frame_end (out, start);
}

/* SNAPSHOT_END or HEARTBEAT. */
void
kv_peer_stream_append_seq (GByteArray      *out,
                           KvPeerFrameType  type,
                           guint64          seq)
{
  guint start;

  g_return_if_fail (type == KV_PEER_FRAME_SNAPSHOT_END || type == KV_PEER_FRAME_HEARTBEAT);
  start = kv_peer_frame_begin (out, type);
  kv_wire_append_u64 (out, seq);
  kv_peer_frame_end (out, start);
}

guint
kv_peer_stream_begin_entries (GByteArray      *out,
                              KvPeerFrameType  type,
                              guint64          seq)
{
  guint start;

  g_return_val_if_fail (type == KV_PEER_FRAME_SNAPSHOT_ENTRIES || type == KV_PEER_FRAME_EVENTS, 0);
  start = kv_peer_frame_begin (out, type);
  kv_wire_append_u64 (out, seq);
  kv_wire_append_u32 (out, 0);  /* the count, set by end */
  return start;
}

/* @key must fit a chunk record (kv_chunk_key_fits()). */
void
kv_peer_stream_add_entry (GByteArray *out,
                          KvKey      *key,
                          guint8      locations)
{
  gsize hash_len = 0;
  const guint8 *hash = kv_key_get_hash (key, &hash_len);

  kv_wire_append_u32 (out, kv_key_get_group (key));
  kv_wire_append_u16 (out, (guint16) hash_len);
  g_byte_array_append (out, hash, hash_len);
  g_byte_array_append (out, &locations, 1);
}

void
kv_peer_stream_end_entries (GByteArray *out,
                            guint       start,
                            guint32     n_entries)
{
  guint32 n = GUINT32_TO_LE (n_entries);

  memcpy (out->data + start + KV_PEER_FRAME_HEADER_SIZE + 8, &n, 4);
  kv_peer_frame_end (out, start);
}

/* ---- applying a stream -------------------------------------------------- */

void
kv_peer_stream_reader_init (KvPeerStreamReader *reader,
                            KvFleetIndex       *index,
                            guint               node)
{
  memset (reader, 0, sizeof *reader);
  reader->index = index;
  reader->node = node;
}

static gboolean
out_of_order (GError     **error,
              const char  *what)
{
  g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
               "the event stream is out of order: %s", what);
  return FALSE;
}

static gboolean
index_refused (GError **error)
{
  g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                       "the index forgot the node: a new snapshot is needed");
  return FALSE;
}

/* Applies one parsed frame of the stream (not SUBSCRIBE) to the index;
 * FALSE when it breaks the stream's rules or the index forgot the node
 * (the subscriber then reconnects for a new snapshot). */
gboolean
kv_peer_stream_reader_apply (KvPeerStreamReader         *reader,
                             const KvPeerStreamMessage  *message,
                             gboolean                   *out_snapshot_done,
                             GError                    **error)
{
  if (out_snapshot_done != NULL)
    *out_snapshot_done = FALSE;

  switch (message->type)
    {
    case KV_PEER_FRAME_SNAPSHOT_BEGIN:
      /* the first one, or a resync after falling behind */
      if (!kv_fleet_index_begin_snapshot (reader->index, reader->node))
        return index_refused (error);
      reader->in_snapshot = TRUE;
      reader->live = FALSE;
      reader->last_seq = message->seq;
      reader->snap_count = message->count;
      reader->snap_got = 0;
      return TRUE;

    case KV_PEER_FRAME_SNAPSHOT_ENTRIES:
      if (!reader->in_snapshot || message->seq != reader->last_seq)
        return out_of_order (error, "snapshot entries outside their snapshot");
      if (message->keys->len > reader->snap_count - reader->snap_got)
        return out_of_order (error, "more snapshot entries than announced");
      reader->snap_got += message->keys->len;
      if (!kv_fleet_index_update_many (reader->index, reader->node,
                                       (KvKey * const *) message->keys->pdata,
                                       message->locations, message->keys->len))
        return index_refused (error);
      return TRUE;

    case KV_PEER_FRAME_SNAPSHOT_END:
      if (!reader->in_snapshot || message->seq != reader->last_seq ||
          reader->snap_got != reader->snap_count)
        return out_of_order (error, "a snapshot ended early or with another sequence number");
      if (!kv_fleet_index_end_snapshot (reader->index, reader->node))
        return index_refused (error);
      reader->in_snapshot = FALSE;
      reader->live = TRUE;
      if (out_snapshot_done != NULL)
        *out_snapshot_done = TRUE;
      return TRUE;

    case KV_PEER_FRAME_EVENTS:
      if (!reader->live || reader->last_seq == G_MAXUINT64 || message->seq != reader->last_seq + 1)
        return out_of_order (error, "a delta is missing or came before its snapshot");
      if (!kv_fleet_index_update_many (reader->index, reader->node,
                                       (KvKey * const *) message->keys->pdata,
                                       message->locations, message->keys->len))
        return index_refused (error);
      reader->last_seq = message->seq;
      return TRUE;

    case KV_PEER_FRAME_HEARTBEAT:
      if (!reader->live || message->seq != reader->last_seq)
        return out_of_order (error, "a heartbeat names another sequence number");
      if (!kv_fleet_index_heartbeat (reader->index, reader->node))
        return index_refused (error);
      return TRUE;

    default:
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "unexpected %s frame in the event stream",
                   kv_peer_frame_type_to_string (message->type));
      return FALSE;
    }
}
