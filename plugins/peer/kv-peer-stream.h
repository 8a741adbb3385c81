/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

#include "kv-peer-frame.h"

G_BEGIN_DECLS

/* The event stream's frames (doc/protocol.md, "Event stream"): after the
 * handshake a client sends SUBSCRIBE; the server answers with a snapshot
 * (SNAPSHOT_BEGIN, SNAPSHOT_ENTRIES…, SNAPSHOT_END) and then sequenced
 * deltas (EVENTS) and HEARTBEATs, until the connection closes. A
 * subscriber that falls behind gets a new snapshot. These functions encode
 * and parse the bodies in memory; they never read past the buffer they
 * are given and never allocate more than the bounds allow. */

/* SUBSCRIBE: flags u32 · reserved u32 */
#define KV_PEER_STREAM_SUBSCRIBE_SIZE     8
/* SNAPSHOT_BEGIN: seq u64 · count u64 */
#define KV_PEER_STREAM_BEGIN_SIZE         16
/* SNAPSHOT_END, HEARTBEAT: seq u64 */
#define KV_PEER_STREAM_SEQ_SIZE           8
/* SNAPSHOT_ENTRIES, EVENTS: seq u64 · n u32 · n × (key · locations u8) */
#define KV_PEER_STREAM_ENTRIES_PREFIX     12
#define KV_PEER_STREAM_ENTRY_WIRE_MAX     (KV_PEER_KEY_WIRE_MAX + 1)
/* The location bits a node may send (KvFleetLocation). */
#define KV_PEER_STREAM_LOCATION_MASK      0x0f

typedef struct
{
  KvPeerFrameType  type;
  guint32          flags;      /* SUBSCRIBE */
  guint64          seq;        /* every frame but SUBSCRIBE */
  guint64          count;      /* SNAPSHOT_BEGIN: entries to follow */
  GPtrArray       *keys;       /* (element-type KvKey) SNAPSHOT_ENTRIES, EVENTS */
  guint8          *locations;  /* one per key */
} KvPeerStreamMessage;

gboolean  kv_peer_stream_is_stream_frame (guint                 type);
guint32   kv_peer_stream_max_body        (KvPeerFrameType       type,
                                          guint32               max_entries);
gboolean  kv_peer_stream_parse           (KvPeerFrameType       type,
                                          const guint8         *body,
                                          gsize                 body_len,
                                          guint32               max_entries,
                                          KvPeerStreamMessage  *out,
                                          GError              **error);
void      kv_peer_stream_message_clear   (KvPeerStreamMessage  *message);

void      kv_peer_stream_append_subscribe (GByteArray          *out);
void      kv_peer_stream_append_begin    (GByteArray           *out,
                                          guint64               seq,
                                          guint64               count);
void      kv_peer_stream_append_seq      (GByteArray           *out,
                                          KvPeerFrameType       type,
                                          guint64               seq);
/* An entries frame: begin, add up to max_entries entries, end. */
guint     kv_peer_stream_begin_entries   (GByteArray           *out,
                                          KvPeerFrameType       type,
                                          guint64               seq);
void      kv_peer_stream_add_entry       (GByteArray           *out,
                                          KvKey                *key,
                                          guint8                locations);
void      kv_peer_stream_end_entries     (GByteArray           *out,
                                          guint                 start,
                                          guint32               n_entries);

/* What a subscriber knows of the stream it reads, and the rules it holds
 * the node to: a snapshot's entries between its begin and end, as many as
 * announced, at the snapshot's sequence number; then deltas in sequence;
 * heartbeats naming the last one. Parsed frames are applied to @index as
 * node @node. */
typedef struct
{
  KvFleetIndex *index;
  guint         node;
  gboolean      live;
  gboolean      in_snapshot;
  guint64       last_seq;
  guint64       snap_count;
  guint64       snap_got;
} KvPeerStreamReader;

void      kv_peer_stream_reader_init     (KvPeerStreamReader        *reader,
                                          KvFleetIndex              *index,
                                          guint                      node);
gboolean  kv_peer_stream_reader_apply    (KvPeerStreamReader        *reader,
                                          const KvPeerStreamMessage *message,
                                          gboolean                  *out_snapshot_done,
                                          GError                   **error);

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (KvPeerStreamMessage, kv_peer_stream_message_clear)

G_END_DECLS
