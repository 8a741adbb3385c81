/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-fleet-index.h"
#include "kv-key.h"
#include "kv-route-decision.h"
#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KvRoutePolicy:
 * @KV_ROUTE_POLICY_ROUND_ROBIN: each alive node in turn.
 * @KV_ROUTE_POLICY_LEAST_LOADED: the node with the fewest requests in
 *   flight (then the fewest routed, then the lowest id).
 * @KV_ROUTE_POLICY_CACHE_AWARE: the node where the request costs least:
 *   the chunks it must compute, plus those it fetches from a peer weighed
 *   by [property@Kv.FleetRouter:fetch-cost], plus its load weighed by
 *   [property@Kv.FleetRouter:load-cost], among the nodes whose load stays
 *   within [property@Kv.FleetRouter:max-load-factor] of the mean.
 *
 * How [class@Kv.FleetRouter] picks a node.
 */
typedef enum {
  KV_ROUTE_POLICY_ROUND_ROBIN,
  KV_ROUTE_POLICY_LEAST_LOADED,
  KV_ROUTE_POLICY_CACHE_AWARE,
} KvRoutePolicy;

KVTIER_AVAILABLE_IN_ALL
gboolean     kv_route_policy_from_string (const char     *str,
                                          KvRoutePolicy  *out_policy,
                                          GError        **error);
KVTIER_AVAILABLE_IN_ALL
const char  *kv_route_policy_to_string   (KvRoutePolicy   policy);

#define KV_TYPE_FLEET_ROUTER (kv_fleet_router_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvFleetRouter, kv_fleet_router, KV, FLEET_ROUTER, GObject)

KVTIER_AVAILABLE_IN_ALL
KvFleetRouter   *kv_fleet_router_new          (KvFleetIndex   *index,
                                               KvRoutePolicy   policy);
KVTIER_AVAILABLE_IN_ALL
KvFleetIndex    *kv_fleet_router_get_index    (KvFleetRouter  *self);
KVTIER_AVAILABLE_IN_ALL
KvRouteDecision *kv_fleet_router_route        (KvFleetRouter  *self,
                                               KvKey * const  *keys,
                                               guint           n_keys,
                                               GError        **error);
KVTIER_AVAILABLE_IN_ALL
void             kv_fleet_router_finish       (KvFleetRouter  *self,
                                               guint           node);
KVTIER_AVAILABLE_IN_ALL
guint            kv_fleet_router_get_load     (KvFleetRouter  *self,
                                               guint           node);
KVTIER_AVAILABLE_IN_ALL
guint64          kv_fleet_router_get_n_routed (KvFleetRouter  *self,
                                               guint           node);

G_END_DECLS
