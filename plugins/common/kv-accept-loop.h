/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* A plain struct, not a GObject type: it is compiled into the peer
 * plugin and into the kvtier command, which loads that plugin, and a type
 * name can be registered once per process. */
typedef struct _KvAcceptLoop KvAcceptLoop;

/* Called on the loop's context with each connection accepted; the
 * callee owns @socket. */
typedef void (*KvAcceptLoopFunc) (KvAcceptLoop *loop,
                                  GSocket      *socket,
                                  gpointer      user_data);

KvAcceptLoop   *kv_accept_loop_new               (const char        *name,
                                                  GSocketAddress    *address,
                                                  int                backlog,
                                                  GMainContext      *context,
                                                  KvAcceptLoopFunc   func,
                                                  gpointer           user_data,
                                                  GError           **error);
GSocketAddress *kv_accept_loop_get_local_address (KvAcceptLoop      *self);
void            kv_accept_loop_stop              (KvAcceptLoop      *self);
void            kv_accept_loop_free              (KvAcceptLoop      *self);
guint64         kv_accept_loop_get_n_pauses      (KvAcceptLoop      *self);
void            kv_accept_loop_set_pause_counter (KvAcceptLoop      *self,
                                                  guint64           *counter);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvAcceptLoop, kv_accept_loop_free)

G_END_DECLS
