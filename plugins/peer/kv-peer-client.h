/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>
#include <kvtier.h>

#include "kv-peer-counters.h"
#include "kv-peer-frame.h"

G_BEGIN_DECLS

/* What a KvPeerClient needs to talk to one peer. */
typedef struct
{
  GBytes          *secret;
  gsize            block_size;
  guint8           namespace_digest[32];
  guint            io_timeout_ms;        /* per connect, handshake, request */
  guint            max_connections;
  guint            breaker_threshold;
  guint            breaker_open_ms;
  KvClock         *clock;
  GMainContext    *timer_context;        /* runs the I/O timeouts */
  gboolean         tls;
  GTlsDatabase    *tls_database;         /* trusted CAs; NULL: the system's */
  GTlsCertificate *tls_certificate;      /* client certificate, for mutual TLS */
} KvPeerClientSettings;

#define KV_TYPE_PEER_CLIENT (kv_peer_client_get_type ())
G_DECLARE_FINAL_TYPE (KvPeerClient, kv_peer_client, KV, PEER_CLIENT, GObject)

KvPeerClient *kv_peer_client_new          (const char                 *address,
                                           const KvPeerClientSettings *settings,
                                           KvPeerCounters             *counters,
                                           GError                    **error);
const char   *kv_peer_client_get_address  (KvPeerClient               *self);
KvCircuitBreaker *kv_peer_client_get_breaker (KvPeerClient            *self);
void          kv_peer_client_set_tier_label (KvPeerClient             *self,
                                             const char               *label);
gboolean      kv_peer_client_allows_requests (KvPeerClient            *self);
gboolean      kv_peer_client_lookup       (KvPeerClient               *self,
                                           KvKey * const              *keys,
                                           guint                       n_keys,
                                           guint8                     *answers,
                                           GError                    **error);
gboolean      kv_peer_client_fetch        (KvPeerClient               *self,
                                           KvKey * const              *keys,
                                           guint                       n_keys,
                                           guint8 * const             *slots,
                                           gboolean                   *landed,
                                           guint64                    *payload_checksums,
                                           GCancellable               *cancellable,
                                           GError                    **error);
void          kv_peer_client_close        (KvPeerClient               *self);

G_END_DECLS
