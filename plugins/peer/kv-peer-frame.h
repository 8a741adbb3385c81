/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/* The peer protocol's framing (doc/protocol.md): every frame is an 8-byte
 * header (type, flags, reserved, body length, little-endian), then the body.
 * These functions encode and parse frames in memory; they never read past
 * the buffer they are given and never allocate more than the bounds they
 * are given allow. The peer tier's client and server and the fuzz target
 * tests/fuzz/fuzz-peer-frame.c all parse through them. */

#define KV_PEER_PROTOCOL_VERSION      1
#define KV_PEER_MAGIC                 "KVPEER\r\n"
#define KV_PEER_MAGIC_LEN             8
#define KV_PEER_NONCE_LEN             32
#define KV_PEER_MAC_LEN               32
#define KV_PEER_FRAME_HEADER_SIZE     8

#define KV_PEER_HELLO_BODY_SIZE       (KV_PEER_MAGIC_LEN + 4 + KV_PEER_NONCE_LEN)
/* block size, namespace digest, max keys, reserved, max in-flight bytes */
#define KV_PEER_AUTH_PARAMS_SIZE      (8 + 32 + 4 + 4 + 8)
#define KV_PEER_AUTH_BODY_SIZE        (KV_PEER_AUTH_PARAMS_SIZE + KV_PEER_MAC_LEN)
#define KV_PEER_DATA_PREFIX_SIZE      12
#define KV_PEER_MAX_ERROR_MESSAGE     256
/* Bodies of every frame but DATA: a LOOKUP of the most keys a peer may
 * ever allow (KV_PEER_MAX_KEYS_LIMIT keys of the longest hash) fits. */
#define KV_PEER_MAX_KEYS_LIMIT        8192
#define KV_PEER_KEY_WIRE_MAX          (4 + 2 + 112)
#define KV_PEER_MAX_CONTROL_BODY      (8 + KV_PEER_MAX_KEYS_LIMIT * KV_PEER_KEY_WIRE_MAX)

typedef enum {
  KV_PEER_FRAME_HELLO = 1,
  KV_PEER_FRAME_AUTH,
  KV_PEER_FRAME_LOOKUP,
  KV_PEER_FRAME_LOOKUP_RESP,
  KV_PEER_FRAME_FETCH,
  KV_PEER_FRAME_DATA,
  KV_PEER_FRAME_DONE,
  KV_PEER_FRAME_ERROR,
  KV_PEER_FRAME_BYE,
  /* the event stream (kv-peer-stream.h) */
  KV_PEER_FRAME_SUBSCRIBE,
  KV_PEER_FRAME_SNAPSHOT_BEGIN,
  KV_PEER_FRAME_SNAPSHOT_ENTRIES,
  KV_PEER_FRAME_SNAPSHOT_END,
  KV_PEER_FRAME_EVENTS,
  KV_PEER_FRAME_HEARTBEAT,
} KvPeerFrameType;

/* One answer of a LOOKUP_RESP. */
typedef enum {
  KV_PEER_LOOKUP_MISS = 0,
  KV_PEER_LOOKUP_HIT = 1,
  KV_PEER_LOOKUP_PENDING = 2, /* being promoted on the peer: ask again */
} KvPeerLookupAnswer;

/* The status of a DATA frame. */
typedef enum {
  KV_PEER_DATA_OK = 0,
  KV_PEER_DATA_MISS = 1,
} KvPeerDataStatus;

/* The code of an ERROR frame. */
typedef enum {
  KV_PEER_ERROR_BAD_FRAME = 1,
  KV_PEER_ERROR_AUTH_FAILED,
  KV_PEER_ERROR_VERSION,
  KV_PEER_ERROR_CHUNK_SIZE,
  KV_PEER_ERROR_NAMESPACE,
  KV_PEER_ERROR_LIMIT,
  KV_PEER_ERROR_BUSY,
  KV_PEER_ERROR_TIMEOUT,
  KV_PEER_ERROR_INTERNAL,
} KvPeerErrorCode;

#define KV_PEER_FRAME_ERROR_DOMAIN (kv_peer_frame_error_quark ())
GQuark kv_peer_frame_error_quark (void);

typedef struct
{
  KvPeerFrameType type;
  guint32         body_len;
} KvPeerFrameHeader;

/* A parsed frame body. Which fields are set depends on the type. */
typedef struct
{
  KvPeerFrameType type;

  /* HELLO */
  guint16   version;
  guint8    nonce[KV_PEER_NONCE_LEN];

  /* AUTH */
  guint64   block_size;
  guint8    namespace_digest[32];
  guint32   max_keys;
  guint64   max_inflight_bytes;
  guint8    mac[KV_PEER_MAC_LEN];

  /* LOOKUP, LOOKUP_RESP, FETCH, DATA, DONE */
  guint32   request_id;
  GPtrArray *keys;    /* (element-type KvKey) LOOKUP, FETCH */
  guint8   *answers;  /* LOOKUP_RESP, n_answers of KvPeerLookupAnswer */
  guint32   n_answers;
  guint32   index;    /* DATA */
  guint8    status;   /* DATA */
  guint32   n_sent;   /* DONE */

  /* ERROR */
  guint32   error_code;
  char     *error_message;
} KvPeerMessage;

const char *kv_peer_frame_type_to_string (guint type);

/* Appends a frame header whose body length kv_peer_frame_end() fills in
 * once the body is appended; returns where the frame starts. */
guint    kv_peer_frame_begin         (GByteArray             *out,
                                      KvPeerFrameType         type);
void     kv_peer_frame_end           (GByteArray             *out,
                                      guint                   start);
/* Sets KV_PEER_ERROR_BAD_FRAME ("malformed TYPE frame: WHY"), returns FALSE. */
gboolean kv_peer_frame_bad_body      (GError                **error,
                                      KvPeerFrameType         type,
                                      const char             *why);

void     kv_peer_frame_header_encode (guint8                  header[KV_PEER_FRAME_HEADER_SIZE],
                                      KvPeerFrameType         type,
                                      guint32                 body_len);
gboolean kv_peer_frame_header_parse  (const guint8            header[KV_PEER_FRAME_HEADER_SIZE],
                                      guint32                 max_body,
                                      KvPeerFrameHeader      *out,
                                      GError                **error);

gboolean kv_peer_message_parse       (KvPeerFrameType         type,
                                      const guint8           *body,
                                      gsize                   body_len,
                                      guint32                 max_keys,
                                      KvPeerMessage          *out,
                                      GError                **error);
void     kv_peer_message_clear       (KvPeerMessage          *message);

/* Encoders append one whole frame (header and body) to @out. */
void     kv_peer_frame_append_hello  (GByteArray             *out,
                                      const guint8            nonce[KV_PEER_NONCE_LEN]);
void     kv_peer_frame_auth_params   (guint8                  params[KV_PEER_AUTH_PARAMS_SIZE],
                                      guint64                 block_size,
                                      const guint8            namespace_digest[32],
                                      guint32                 max_keys,
                                      guint64                 max_inflight_bytes);
void     kv_peer_frame_append_auth   (GByteArray             *out,
                                      const guint8            params[KV_PEER_AUTH_PARAMS_SIZE],
                                      const guint8            mac[KV_PEER_MAC_LEN]);
gboolean kv_peer_frame_append_keys   (GByteArray             *out,
                                      KvPeerFrameType         type,
                                      guint32                 request_id,
                                      KvKey * const          *keys,
                                      guint                   n_keys,
                                      GError                **error);
void     kv_peer_frame_append_lookup_resp (GByteArray        *out,
                                      guint32                 request_id,
                                      const guint8           *answers,
                                      guint32                 n_answers);
void     kv_peer_frame_encode_data_prefix (guint8             frame[KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE],
                                      guint32                 request_id,
                                      guint32                 index,
                                      KvPeerDataStatus        status,
                                      guint32                 record_len);
void     kv_peer_frame_append_done   (GByteArray             *out,
                                      guint32                 request_id,
                                      guint32                 n_sent);
void     kv_peer_frame_append_error  (GByteArray             *out,
                                      KvPeerErrorCode         code,
                                      const char             *message);
void     kv_peer_frame_append_bye    (GByteArray             *out);

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (KvPeerMessage, kv_peer_message_clear)

G_END_DECLS
