/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

#include "kv-peer-subscriber.h"
#include "kv-peer-tier.h"

/* Registers the peer tier under the name `peer`. The registry keeps the
 * module resident, so the tier's types are plain static types. The fleet
 * subscriber (KvPeerSubscriber) is registered too, so that tools and
 * bindings find it by its type name. */
static void
kv_peer_plugin_register (KvTierRegistry *registry,
                         GTypeModule    *module)
{
  g_autoptr(GError) error = NULL;

  if (!kv_tier_registry_register_tier_type (registry, "peer", KV_TYPE_PEER_TIER, &error))
    g_message ("Cannot register the peer tier: %s", error->message);
  g_type_ensure (KV_TYPE_PEER_SUBSCRIBER);
}

KV_PLUGIN_DEFINE (kv_peer_plugin_register);
