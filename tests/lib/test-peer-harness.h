/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the peer tests share: `kvtier serve` nodes started as processes on
 * 127.0.0.1 (killed by PID on every exit path: explicitly, and by the
 * kernel if the test process dies first), client managers built from a
 * configuration, the synthetic chunks `kvtier serve --synthetic-chunks`
 * stores, and a /metrics scrape with curl. */

#include <kvtier.h>

#include "kv-peer-frame.h"

G_BEGIN_DECLS

typedef struct
{
  GSubprocess *process;
  char        *peer_address;
  char        *http_address;
  char        *config_path;
} PeerNode;

void              harness_init            (void);
void              harness_cleanup         (void);
const char       *harness_dir             (void);
void              harness_child_setup     (gpointer    data);
void              harness_set_child_nofile (guint      limit);
const char       *harness_secret_path     (void);
char             *harness_write_file      (const char *name,
                                           const char *contents,
                                           int         mode);

PeerNode         *peer_node_start         (const char *tier_settings,
                                           guint       slot_kib,
                                           guint64     first_chunk,
                                           guint64     n_chunks);
PeerNode         *peer_node_start_with    (const char *tier_settings,
                                           const char *more_sections,
                                           guint       slot_kib,
                                           guint       n_slots,
                                           guint64     first_chunk,
                                           guint64     n_chunks);
void              peer_node_signal        (PeerNode   *node,
                                           int         signum);
int               peer_node_terminate     (PeerNode   *node,
                                           guint       timeout_ms);
void              peer_node_free          (PeerNode   *node);

KvKey            *synthetic_key           (guint64     index);
void              synthetic_fill          (guint8     *slot,
                                           gsize       size,
                                           guint64     index);

KvTieringManager *client_manager_new      (const char *tier_settings,
                                           guint       slot_kib,
                                           GError    **error);
KvLookupResult    client_lookup_settled   (KvTieringManager *manager,
                                           KvRequest        *request,
                                           KvKey            *key,
                                           guint             timeout_ms);
void              client_step             (KvTieringManager *manager);
gboolean          client_chunk_is         (KvTieringManager *manager,
                                           KvRequest        *request,
                                           KvKey            *key,
                                           guint64           index);

char             *scrape_metrics          (PeerNode   *node);
gdouble           metric_sum              (const char *text,
                                           const char *name);
gdouble           harness_wait_metric     (PeerNode   *node,
                                           const char *name,
                                           gdouble     at_least);

/* Clients written with the protocol library itself (hostile ones, and
 * good ones whose every frame a test checks), on any stream: a plain
 * connection or TLS. */
void              harness_stream_send     (GIOStream     *stream,
                                           const void    *data,
                                           gsize          len);
gboolean          harness_stream_read_frame (GIOStream   *stream,
                                           KvPeerMessage *message);
gboolean          harness_stream_handshake (GIOStream    *stream,
                                           GBytes        *secret,
                                           const char    *namespace_,
                                           gsize          block_size,
                                           KvPeerMessage *answer);

/* Raw sockets and processes, for the tests that load a node with
 * hostile connections and bound its CPU. */
GSocket          *harness_tcp_connect     (const char  *address,
                                           const char  *source,
                                           guint        timeout_s);
gboolean          harness_raise_own_nofile (guint       needed);
gdouble           harness_process_cpu_seconds (GSubprocess *process);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PeerNode, peer_node_free)

G_END_DECLS
