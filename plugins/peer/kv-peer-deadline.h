/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* The time one request of the peer client has: @cancellable, which the
 * request's I/O calls get, is cancelled when no frame came or went for
 * the timeout, or when the job's own cancellable (@outer) is. Moving the
 * time on, once per frame, touches no GSource: the timer on the timer
 * context is made once per request and, when it fires before the time,
 * sets itself for it. */
typedef struct
{
  GCancellable *cancellable;
  GCancellable *outer;
  gulong        outer_handler;
  GSource      *timer;
  guint         timeout_ms;
} KvPeerDeadline;

void     kv_peer_deadline_begin     (KvPeerDeadline *deadline,
                                     GMainContext   *timer_context,
                                     guint           timeout_ms,
                                     GCancellable   *outer);
void     kv_peer_deadline_restart   (KvPeerDeadline *deadline);
gboolean kv_peer_deadline_timed_out (KvPeerDeadline *deadline);
void     kv_peer_deadline_end       (KvPeerDeadline *deadline);

G_END_DECLS
