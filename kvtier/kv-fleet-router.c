/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fleet-router.h"

#include <math.h>
#include <string.h>

#include "kv-enums.h"
#include "kv-types.h"

/**
 * KvFleetRouter:
 *
 * Picks the node of a fleet that serves a request, from a
 * [class@Kv.FleetIndex] and the load the router itself put on each node
 * (requests routed and not yet finished with
 * [method@Kv.FleetRouter.finish]), with a [enum@Kv.RoutePolicy].
 *
 * The cache-aware policy weighs what a request costs on each node, in
 * chunks: those the node must compute, plus those it fetches from another
 * node times [property@Kv.FleetRouter:fetch-cost], plus its load times
 * [property@Kv.FleetRouter:load-cost]; only nodes whose load stays within
 * [property@Kv.FleetRouter:max-load-factor] of the fleet's mean are
 * considered (bounded-load routing), and equal costs go to the node with
 * the lower load, then the fewer requests routed so far. With
 * [property@Kv.FleetRouter:use-peers], a node that holds a shorter prefix
 * than another is told to fetch the rest from it: the decision names that
 * node as the request's `kv_peer`.
 *
 * Thread-safe: one lock around the router's own counts.
 */

struct _KvFleetRouter
{
  GObject parent_instance;

  KvFleetIndex  *index;
  KvRoutePolicy  policy;
  gdouble        fetch_cost;
  gdouble        load_cost;
  gdouble        max_load_factor;
  gboolean       use_peers;

  GMutex         lock;
  GArray        *load;       /* guint per node id */
  GArray        *routed;     /* guint64 per node id */
  guint          cursor;     /* round robin */
};

enum {
  PROP_0,
  PROP_INDEX,
  PROP_POLICY,
  PROP_FETCH_COST,
  PROP_LOAD_COST,
  PROP_MAX_LOAD_FACTOR,
  PROP_USE_PEERS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (KvFleetRouter, kv_fleet_router, G_TYPE_OBJECT)

static const char *const policy_names[] = {
  [KV_ROUTE_POLICY_ROUND_ROBIN] = "round-robin",
  [KV_ROUTE_POLICY_LEAST_LOADED] = "least-loaded",
  [KV_ROUTE_POLICY_CACHE_AWARE] = "cache-aware",
};

/**
 * kv_route_policy_from_string:
 * @str: "round-robin", "least-loaded" or "cache-aware"
 * @out_policy: (out): the policy
 * @error: return location for a #GError
 *
 * Parses a policy name.
 *
 * Returns: %TRUE, or %FALSE with @error set (%KV_TIER_ERROR_INVALID_ARGUMENT)
 */
gboolean
kv_route_policy_from_string (const char     *str,
                             KvRoutePolicy  *out_policy,
                             GError        **error)
{
  g_return_val_if_fail (str != NULL, FALSE);
  g_return_val_if_fail (out_policy != NULL, FALSE);

  for (guint i = 0; i < G_N_ELEMENTS (policy_names); i++)
    if (g_str_equal (str, policy_names[i]))
      {
        *out_policy = (KvRoutePolicy) i;
        return TRUE;
      }
  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
               "Unknown routing policy ‘%s’: round-robin, least-loaded or cache-aware", str);
  return FALSE;
}

/**
 * kv_route_policy_to_string:
 * @policy: a policy
 *
 * Gets the name of a policy.
 *
 * Returns: (transfer none): "round-robin", "least-loaded" or "cache-aware"
 */
const char *
kv_route_policy_to_string (KvRoutePolicy policy)
{
  g_return_val_if_fail ((guint) policy < G_N_ELEMENTS (policy_names), NULL);
  return policy_names[policy];
}

/* ---- routing ---------------------------------------------------------------- */

static void
grow_counts (KvFleetRouter *self,
             guint          n_nodes)
{
  if (self->load->len < n_nodes)
    {
      g_array_set_size (self->load, n_nodes);
      g_array_set_size (self->routed, n_nodes);
    }
}

#define LOAD(id) g_array_index (self->load, guint, (id))
#define ROUTED(id) g_array_index (self->routed, guint64, (id))

/* Whether node @a is a better pick than @b at equal cost. */
static gboolean
lighter (KvFleetRouter *self,
         guint          a,
         guint          b)
{
  if (LOAD (a) != LOAD (b))
    return LOAD (a) < LOAD (b);
  if (ROUTED (a) != ROUTED (b))
    return ROUTED (a) < ROUTED (b);
  return a < b;
}

static guint
pick_round_robin (KvFleetRouter  *self,
                  const gboolean *alive,
                  guint           n_nodes)
{
  for (guint k = 0; k < n_nodes; k++)
    {
      guint id = (self->cursor + k) % n_nodes;

      if (alive[id])
        {
          self->cursor = id + 1;
          return id;
        }
    }
  g_assert_not_reached ();
}

static guint
pick_least_loaded (KvFleetRouter  *self,
                   const gboolean *alive,
                   guint           n_nodes)
{
  guint best = G_MAXUINT;

  for (guint id = 0; id < n_nodes; id++)
    if (alive[id] && (best == G_MAXUINT || lighter (self, id, best)))
      best = id;
  return best;
}

static guint
pick_cache_aware (KvFleetRouter  *self,
                  const gboolean *alive,
                  const guint    *prefix,
                  guint           n_nodes,
                  guint           n_keys)
{
  guint64 total_load = 0;
  guint n_alive = 0, longest = 0, best = G_MAXUINT;
  gdouble best_cost = 0, cap;
  gboolean any_eligible = FALSE;

  for (guint id = 0; id < n_nodes; id++)
    if (alive[id])
      {
        total_load += LOAD (id);
        n_alive++;
        longest = MAX (longest, prefix[id]);
      }
  /* bounded load: a node may take this request if its load stays within
   * the factor of the mean, this request included, rounded up (so an idle
   * fleet takes one request per node before any takes a second) */
  cap = ceil (self->max_load_factor * (gdouble) (total_load + 1) / n_alive);
  for (guint id = 0; id < n_nodes; id++)
    if (alive[id] && (self->max_load_factor <= 0 || LOAD (id) + 1 <= cap))
      any_eligible = TRUE;

  for (guint id = 0; id < n_nodes; id++)
    {
      guint own, usable;
      gdouble cost;

      if (!alive[id] ||
          (any_eligible && self->max_load_factor > 0 && LOAD (id) + 1 > cap))
        continue;
      own = prefix[id];
      usable = self->use_peers ? MAX (own, longest) : own;
      cost = (gdouble) (n_keys - usable) + self->fetch_cost * (usable - own) +
             self->load_cost * LOAD (id);
      if (best == G_MAXUINT || cost < best_cost - 1e-9 ||
          (cost <= best_cost + 1e-9 && lighter (self, id, best)))
        {
          best = id;
          best_cost = cost;
        }
    }
  return best;
}

/* The node other than @chosen holding the longest prefix, longer than the
 * chosen one's; -1 when there is none. */
static gint
pick_peer (KvFleetRouter  *self,
           const gboolean *alive,
           const guint    *prefix,
           guint           n_nodes,
           guint           chosen)
{
  gint peer = -1;

  for (guint id = 0; id < n_nodes; id++)
    {
      if (id == chosen || !alive[id] || prefix[id] <= prefix[chosen])
        continue;
      if (peer < 0 || prefix[id] > prefix[peer] ||
          (prefix[id] == prefix[peer] && lighter (self, id, (guint) peer)))
        peer = (gint) id;
    }
  return peer;
}

/**
 * kv_fleet_router_route:
 * @self: a router
 * @keys: (array length=n_keys): the request's chunk keys, in prompt order
 * @n_keys: the length of @keys
 * @error: return location for a #GError
 *
 * Picks the node for a request and counts it in flight there until
 * [method@Kv.FleetRouter.finish]. Silent nodes are forgotten first
 * ([method@Kv.FleetIndex.expire]).
 *
 * Returns: (transfer full): the decision, or %NULL with @error set
 *   (%KV_TIER_ERROR_NOT_FOUND) when no node is alive
 */
KvRouteDecision *
kv_fleet_router_route (KvFleetRouter  *self,
                       KvKey * const  *keys,
                       guint           n_keys,
                       GError        **error)
{
  g_autofree gboolean *alive = NULL;
  g_autofree guint *prefix = NULL;
  g_autofree KvFleetNodeMatch *matches = NULL;
  g_autofree char *node_name = NULL;
  g_autofree char *peer_name = NULL;
  guint n_nodes, n_matches, chosen;
  gboolean any = FALSE;
  gint peer = -1;

  g_return_val_if_fail (KV_IS_FLEET_ROUTER (self), NULL);
  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  kv_fleet_index_expire (self->index);
  n_nodes = kv_fleet_index_get_n_nodes (self->index);
  alive = g_new0 (gboolean, MAX (n_nodes, 1));
  prefix = g_new0 (guint, MAX (n_nodes, 1));
  for (guint id = 0; id < n_nodes; id++)
    any |= alive[id] = kv_fleet_index_is_node_alive (self->index, id);
  if (!any)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND,
                           "No node of the fleet is alive to route the request to");
      return NULL;
    }
  if (self->policy == KV_ROUTE_POLICY_CACHE_AWARE || self->use_peers)
    {
      matches = g_new (KvFleetNodeMatch, MAX (n_nodes, 1));
      n_matches = kv_fleet_index_lookup_into (self->index, keys, n_keys, matches, n_nodes);
      for (guint i = 0; i < n_matches; i++)
        if (matches[i].node < n_nodes)
          prefix[matches[i].node] = matches[i].prefix;
    }

  g_mutex_lock (&self->lock);
  grow_counts (self, n_nodes);
  for (guint id = 0; id < n_nodes; id++)
    if (!alive[id])
      LOAD (id) = 0;  /* a forgotten node's requests are not coming back */
  switch (self->policy)
    {
    case KV_ROUTE_POLICY_ROUND_ROBIN:
      chosen = pick_round_robin (self, alive, n_nodes);
      break;
    case KV_ROUTE_POLICY_LEAST_LOADED:
      chosen = pick_least_loaded (self, alive, n_nodes);
      break;
    case KV_ROUTE_POLICY_CACHE_AWARE:
    default:
      chosen = pick_cache_aware (self, alive, prefix, n_nodes, n_keys);
      break;
    }
  if (self->use_peers)
    peer = pick_peer (self, alive, prefix, n_nodes, chosen);
  LOAD (chosen)++;
  ROUTED (chosen)++;
  g_mutex_unlock (&self->lock);

  node_name = kv_fleet_index_dup_node_name (self->index, chosen);
  if (peer >= 0)
    peer_name = kv_fleet_index_dup_node_name (self->index, (guint) peer);
  return kv_route_decision_new (chosen, node_name, n_keys, prefix[chosen], peer, peer_name,
                                peer >= 0 ? prefix[peer] : 0);
}

/**
 * kv_fleet_router_finish:
 * @self: a router
 * @node: the node a request was routed to
 *
 * Tells the router a request routed to @node is done: it no longer counts
 * in the node's load.
 */
void
kv_fleet_router_finish (KvFleetRouter *self,
                        guint          node)
{
  g_return_if_fail (KV_IS_FLEET_ROUTER (self));

  g_mutex_lock (&self->lock);
  if (node < self->load->len && LOAD (node) > 0)
    LOAD (node)--;
  g_mutex_unlock (&self->lock);
}

/**
 * kv_fleet_router_get_load:
 * @self: a router
 * @node: a node id
 *
 * Gets the requests routed to @node and not finished.
 *
 * Returns: the node's load
 */
guint
kv_fleet_router_get_load (KvFleetRouter *self,
                          guint          node)
{
  guint load = 0;

  g_return_val_if_fail (KV_IS_FLEET_ROUTER (self), 0);

  g_mutex_lock (&self->lock);
  if (node < self->load->len)
    load = LOAD (node);
  g_mutex_unlock (&self->lock);
  return load;
}

/**
 * kv_fleet_router_get_n_routed:
 * @self: a router
 * @node: a node id
 *
 * Gets how many requests were routed to @node in all.
 *
 * Returns: a count of requests
 */
guint64
kv_fleet_router_get_n_routed (KvFleetRouter *self,
                              guint          node)
{
  guint64 n = 0;

  g_return_val_if_fail (KV_IS_FLEET_ROUTER (self), 0);

  g_mutex_lock (&self->lock);
  if (node < self->routed->len)
    n = ROUTED (node);
  g_mutex_unlock (&self->lock);
  return n;
}

/**
 * kv_fleet_router_get_index:
 * @self: a router
 *
 * Gets the index the router reads.
 *
 * Returns: (transfer none): the index
 */
KvFleetIndex *
kv_fleet_router_get_index (KvFleetRouter *self)
{
  g_return_val_if_fail (KV_IS_FLEET_ROUTER (self), NULL);
  return self->index;
}

/* ---- GObject --------------------------------------------------------------- */

/**
 * kv_fleet_router_new:
 * @index: the fleet's index
 * @policy: how to pick nodes
 *
 * Creates a router with the default weights.
 *
 * Returns: (transfer full): a new router
 */
KvFleetRouter *
kv_fleet_router_new (KvFleetIndex  *index,
                     KvRoutePolicy  policy)
{
  g_return_val_if_fail (KV_IS_FLEET_INDEX (index), NULL);
  return g_object_new (KV_TYPE_FLEET_ROUTER, "index", index, "policy", policy, NULL);
}

static void
kv_fleet_router_finalize (GObject *object)
{
  KvFleetRouter *self = KV_FLEET_ROUTER (object);

  g_clear_object (&self->index);
  g_array_unref (self->load);
  g_array_unref (self->routed);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_fleet_router_parent_class)->finalize (object);
}

static void
kv_fleet_router_get_property (GObject    *object,
                              guint       prop_id,
                              GValue     *value,
                              GParamSpec *pspec)
{
  KvFleetRouter *self = KV_FLEET_ROUTER (object);

  switch (prop_id)
    {
    case PROP_INDEX: g_value_set_object (value, self->index); break;
    case PROP_POLICY: g_value_set_enum (value, self->policy); break;
    case PROP_FETCH_COST: g_value_set_double (value, self->fetch_cost); break;
    case PROP_LOAD_COST: g_value_set_double (value, self->load_cost); break;
    case PROP_MAX_LOAD_FACTOR: g_value_set_double (value, self->max_load_factor); break;
    case PROP_USE_PEERS: g_value_set_boolean (value, self->use_peers); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_fleet_router_set_property (GObject      *object,
                              guint         prop_id,
                              const GValue *value,
                              GParamSpec   *pspec)
{
  KvFleetRouter *self = KV_FLEET_ROUTER (object);

  /* settings are read under the lock while routing */
  g_mutex_lock (&self->lock);
  switch (prop_id)
    {
    case PROP_INDEX: self->index = g_value_dup_object (value); break;
    case PROP_POLICY: self->policy = g_value_get_enum (value); break;
    case PROP_FETCH_COST: self->fetch_cost = g_value_get_double (value); break;
    case PROP_LOAD_COST: self->load_cost = g_value_get_double (value); break;
    case PROP_MAX_LOAD_FACTOR: self->max_load_factor = g_value_get_double (value); break;
    case PROP_USE_PEERS: self->use_peers = g_value_get_boolean (value); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
  g_mutex_unlock (&self->lock);
}

static void
kv_fleet_router_constructed (GObject *object)
{
  KvFleetRouter *self = KV_FLEET_ROUTER (object);

  G_OBJECT_CLASS (kv_fleet_router_parent_class)->constructed (object);
  if (self->index == NULL)
    self->index = kv_fleet_index_new ();
}

#define RW_FLAGS (G_PARAM_READWRITE | G_PARAM_CONSTRUCT | G_PARAM_STATIC_STRINGS)

static void
kv_fleet_router_class_init (KvFleetRouterClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->constructed = kv_fleet_router_constructed;
  object_class->finalize = kv_fleet_router_finalize;
  object_class->get_property = kv_fleet_router_get_property;
  object_class->set_property = kv_fleet_router_set_property;

  /**
   * KvFleetRouter:index:
   *
   * The fleet's index (a new empty one when none is given).
   */
  properties[PROP_INDEX] =
    g_param_spec_object ("index", NULL, NULL, KV_TYPE_FLEET_INDEX,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);
  /**
   * KvFleetRouter:policy:
   *
   * How nodes are picked.
   */
  properties[PROP_POLICY] =
    g_param_spec_enum ("policy", NULL, NULL, KV_TYPE_ROUTE_POLICY, KV_ROUTE_POLICY_CACHE_AWARE,
                       RW_FLAGS);
  /**
   * KvFleetRouter:fetch-cost:
   *
   * What fetching a chunk from a peer costs, as a share of computing it
   * (cache-aware policy).
   */
  properties[PROP_FETCH_COST] =
    g_param_spec_double ("fetch-cost", NULL, NULL, 0, 1000, 0.1, RW_FLAGS);
  /**
   * KvFleetRouter:load-cost:
   *
   * What one request in flight on a node costs, in chunks computed
   * (cache-aware policy).
   */
  properties[PROP_LOAD_COST] =
    g_param_spec_double ("load-cost", NULL, NULL, 0, 1e9, 0, RW_FLAGS);
  /**
   * KvFleetRouter:max-load-factor:
   *
   * The cache-aware policy only picks a node whose load, this request
   * included, is at most this many times the fleet's mean; 0: no bound.
   */
  properties[PROP_MAX_LOAD_FACTOR] =
    g_param_spec_double ("max-load-factor", NULL, NULL, 0, 1000, 1.25, RW_FLAGS);
  /**
   * KvFleetRouter:use-peers:
   *
   * Whether nodes fetch from each other: a node with a shorter prefix is
   * told the node with the longest (its `kv_peer`), and the cache-aware
   * policy counts those chunks as fetched, not computed.
   */
  properties[PROP_USE_PEERS] =
    g_param_spec_boolean ("use-peers", NULL, NULL, TRUE, RW_FLAGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_fleet_router_init (KvFleetRouter *self)
{
  g_mutex_init (&self->lock);
  self->load = g_array_new (FALSE, TRUE, sizeof (guint));
  self->routed = g_array_new (FALSE, TRUE, sizeof (guint64));
  self->fetch_cost = 0.1;
  self->max_load_factor = 1.25;
  self->use_peers = TRUE;
}
