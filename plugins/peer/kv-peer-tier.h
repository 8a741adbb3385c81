/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

#define KV_TYPE_PEER_TIER (kv_peer_tier_get_type ())
G_DECLARE_FINAL_TYPE (KvPeerTier, kv_peer_tier, KV, PEER_TIER, KvSecondaryTier)

char *kv_peer_tier_get_listen_address (KvPeerTier *self);

G_END_DECLS
