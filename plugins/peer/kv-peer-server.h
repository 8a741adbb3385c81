/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>
#include <kvtier.h>

#include "kv-peer-counters.h"
#include "kv-peer-events.h"
#include "kv-peer-frame.h"

G_BEGIN_DECLS

/* What a KvPeerServer enforces. */
typedef struct
{
  GBytes          *secret;
  gsize            block_size;
  guint8           namespace_digest[32];
  guint            max_connections;      /* authenticated; 0: 1024 */
  guint            max_handshakes;       /* not authenticated yet, from anywhere; 0: 128 */
  guint            max_handshakes_per_address;  /* 0: 16 */
  guint            handshake_timeout_ms;
  guint            idle_timeout_ms;
  guint            io_timeout_ms;
  guint64          max_inflight_bytes;   /* per connection */
  guint            max_keys;             /* per LOOKUP or FETCH */
  GTlsCertificate *tls_certificate;      /* NULL: plain TCP */
  GTlsDatabase    *tls_client_database;  /* non-NULL: client certificates required */
  KvPeerEvents    *events;               /* NULL: SUBSCRIBE is refused */
} KvPeerServerSettings;

typedef enum {
  KV_PEER_SERVE_LOOKUP,
  KV_PEER_SERVE_FETCH,
  KV_PEER_SERVE_CLOSED,   /* the connection is gone: end its request */
} KvPeerServeKind;

/* One request of a peer for the owner thread to answer. */
typedef struct _KvPeerServeRequest KvPeerServeRequest;

/* Called once a FETCH answer was sent in full (@success) or could not be. */
typedef void (*KvPeerFetchDoneFunc) (gboolean success,
                                     gpointer user_data);
typedef void (*KvPeerServerQueuedFunc) (gpointer user_data);

#define KV_TYPE_PEER_SERVER (kv_peer_server_get_type ())
G_DECLARE_FINAL_TYPE (KvPeerServer, kv_peer_server, KV, PEER_SERVER, GObject)

KvPeerServer   *kv_peer_server_new              (const KvPeerServerSettings *settings,
                                                 KvPeerCounters             *counters,
                                                 KvPeerServerQueuedFunc      queued_func,
                                                 gpointer                    queued_data);
gboolean        kv_peer_server_listen           (KvPeerServer               *self,
                                                 const char                 *address,
                                                 GError                    **error);
char           *kv_peer_server_get_address      (KvPeerServer               *self);
void            kv_peer_server_set_name         (KvPeerServer               *self,
                                                 const char                 *name);
guint           kv_peer_server_get_n_connections (KvPeerServer              *self);
guint           kv_peer_server_get_n_busy       (KvPeerServer               *self);
guint           kv_peer_server_get_max_connections (KvPeerServer            *self);
guint           kv_peer_server_get_max_handshakes  (KvPeerServer            *self);
void            kv_peer_server_stop_accepting   (KvPeerServer               *self);
void            kv_peer_server_stop             (KvPeerServer               *self);

/* One key of a FETCH answer: its pinned primary slot (NULL: a miss) and
 * the payload checksum the slot carries, when known, so the server need
 * not hash the bytes it sends. */
typedef struct
{
  const guint8 *payload;
  guint64       payload_checksum;
  gboolean      has_payload_checksum;
} KvPeerServedChunk;

GPtrArray      *kv_peer_server_take_requests    (KvPeerServer               *self);
gboolean        kv_peer_server_has_requests     (KvPeerServer               *self);

KvPeerServeKind kv_peer_serve_request_get_kind  (KvPeerServeRequest         *request);
guint64         kv_peer_serve_request_get_connection_id (KvPeerServeRequest *request);
KvKey * const  *kv_peer_serve_request_get_keys  (KvPeerServeRequest         *request,
                                                 guint                      *n_keys);
void            kv_peer_serve_request_answer_lookup (KvPeerServeRequest     *request,
                                                 const guint8               *answers);
void            kv_peer_serve_request_answer_fetch  (KvPeerServeRequest     *request,
                                                 const KvPeerServedChunk    *chunks,
                                                 GCancellable               *cancellable,
                                                 KvPeerFetchDoneFunc         done_func,
                                                 gpointer                    done_data);
void            kv_peer_serve_request_free      (KvPeerServeRequest         *request);

G_END_DECLS
