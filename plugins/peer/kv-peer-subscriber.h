/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>
#include <kvtier.h>

G_BEGIN_DECLS

#define KV_TYPE_PEER_SUBSCRIBER (kv_peer_subscriber_get_type ())
G_DECLARE_FINAL_TYPE (KvPeerSubscriber, kv_peer_subscriber, KV, PEER_SUBSCRIBER, GObject)

G_END_DECLS
