/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>
#include <kvtier.h>

#include "kv-peer-counters.h"

G_BEGIN_DECLS

/* What a KvPeerEvents stream keeps and allows. */
typedef struct
{
  guint    max_subscribers;
  guint    max_entries;     /* per SNAPSHOT_ENTRIES or EVENTS frame */
  guint64  backlog_bytes;   /* EVENTS frames kept for subscribers behind */
  guint    heartbeat_ms;
  guint    io_timeout_ms;   /* one frame written in full */
} KvPeerEventsSettings;

/* The event sources of a node, as KvChunkSource numbers them: the device,
 * the primary tier, then secondary tier t as KV_PEER_EVENTS_SOURCE_TIER + t. */
#define KV_PEER_EVENTS_SOURCE_DEVICE   0
#define KV_PEER_EVENTS_SOURCE_PRIMARY  1
#define KV_PEER_EVENTS_SOURCE_TIER     2
#define KV_PEER_EVENTS_MAX_SOURCES     32

#define KV_TYPE_PEER_EVENTS (kv_peer_events_get_type ())
G_DECLARE_FINAL_TYPE (KvPeerEvents, kv_peer_events, KV, PEER_EVENTS, GObject)

typedef struct _KvPeerEventsSubscriber KvPeerEventsSubscriber;

/* Called on the I/O thread when a subscriber must go (a write failed or
 * did not finish within the I/O timeout): the server closes the
 * connection, which unsubscribes it. */
typedef void (*KvPeerEventsGoneFunc) (gpointer       data,
                                      KvPeerCounter  why);

KvPeerEvents *kv_peer_events_new             (const KvPeerEventsSettings *settings,
                                              KvPeerCounters             *counters);
void          kv_peer_events_set_context     (KvPeerEvents               *self,
                                              GMainContext               *context);

/* Owner thread (any thread): queues an event of @source for the I/O thread. */
void          kv_peer_events_publish         (KvPeerEvents               *self,
                                              guint                       source,
                                              KvEvent                    *event);
guint64       kv_peer_events_get_seq         (KvPeerEvents               *self);
guint         kv_peer_events_get_n_pending   (KvPeerEvents               *self);
guint         kv_peer_events_get_n_subscribers (KvPeerEvents             *self);
guint64       kv_peer_events_get_n_keys      (KvPeerEvents               *self);
guint64       kv_peer_events_get_n_snapshots (KvPeerEvents               *self);
guint64       kv_peer_events_get_n_resyncs   (KvPeerEvents               *self);

/* I/O thread: the server hands over an authenticated connection that sent
 * SUBSCRIBE; NULL with @error when max-subscribers are streaming already.
 * @gone_data is taken either way (freed at unsubscribe, or at once). */
KvPeerEventsSubscriber *kv_peer_events_subscribe (KvPeerEvents           *self,
                                              GIOStream                  *stream,
                                              GCancellable               *cancellable,
                                              KvPeerEventsGoneFunc        gone_func,
                                              gpointer                    gone_data,
                                              GDestroyNotify              gone_data_free,
                                              GError                    **error);
void          kv_peer_events_unsubscribe     (KvPeerEvents               *self,
                                              KvPeerEventsSubscriber     *subscriber);

G_END_DECLS
