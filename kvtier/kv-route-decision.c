/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-route-decision.h"

/**
 * KvRouteDecision:
 *
 * Where [method@Kv.FleetRouter.route] sends a request: the chosen node,
 * how many leading chunks of the request it holds itself, and, when
 * another node holds a longer prefix, that node (the request's `kv_peer`,
 * from which the chosen node's peer tier fetches what it lacks).
 *
 * Immutable and atomically reference counted.
 */
struct _KvRouteDecision
{
  gatomicrefcount ref_count;
  guint           node;
  char           *node_name;
  guint           n_chunks;
  guint           prefix;
  gint            peer;
  char           *peer_name;
  guint           peer_prefix;
};

G_DEFINE_BOXED_TYPE (KvRouteDecision, kv_route_decision, kv_route_decision_ref,
                     kv_route_decision_unref)

/**
 * kv_route_decision_new:
 * @node: the chosen node's id
 * @node_name: the chosen node's name
 * @n_chunks: the request's length in chunks
 * @prefix: leading chunks the chosen node holds
 * @peer: the node to fetch a longer prefix from, or -1
 * @peer_name: (nullable): its name (the request's `kv_peer`), %NULL when
 *   @peer is -1
 * @peer_prefix: leading chunks @peer holds (more than @prefix), 0 when
 *   @peer is -1
 *
 * Creates a decision. Any thread.
 *
 * Returns: (transfer full): a new decision
 */
KvRouteDecision *
kv_route_decision_new (guint       node,
                       const char *node_name,
                       guint       n_chunks,
                       guint       prefix,
                       gint        peer,
                       const char *peer_name,
                       guint       peer_prefix)
{
  KvRouteDecision *self;

  g_return_val_if_fail (node_name != NULL, NULL);
  g_return_val_if_fail (prefix <= n_chunks, NULL);
  g_return_val_if_fail ((peer < 0) == (peer_name == NULL), NULL);
  g_return_val_if_fail (peer < 0 || (peer_prefix > prefix && peer_prefix <= n_chunks), NULL);

  self = g_new0 (KvRouteDecision, 1);
  g_atomic_ref_count_init (&self->ref_count);
  self->node = node;
  self->node_name = g_strdup (node_name);
  self->n_chunks = n_chunks;
  self->prefix = prefix;
  self->peer = peer;
  self->peer_name = g_strdup (peer_name);
  self->peer_prefix = peer < 0 ? 0 : peer_prefix;
  return self;
}

/**
 * kv_route_decision_ref:
 * @self: a decision
 *
 * Takes a reference.
 *
 * Returns: (transfer full): @self
 */
KvRouteDecision *
kv_route_decision_ref (KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);
  return self;
}

/**
 * kv_route_decision_unref:
 * @self: (transfer full): a decision
 *
 * Drops a reference; the last one frees @self.
 */
void
kv_route_decision_unref (KvRouteDecision *self)
{
  g_return_if_fail (self != NULL);

  if (!g_atomic_ref_count_dec (&self->ref_count))
    return;
  g_free (self->node_name);
  g_free (self->peer_name);
  g_free (self);
}

/**
 * kv_route_decision_get_node:
 * @self: a decision
 *
 * Gets the chosen node.
 *
 * Returns: its id in the index
 */
guint
kv_route_decision_get_node (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->node;
}

/**
 * kv_route_decision_get_node_name:
 * @self: a decision
 *
 * Gets the chosen node's name (its peer address).
 *
 * Returns: (transfer none): the name, owned by @self
 */
const char *
kv_route_decision_get_node_name (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->node_name;
}

/**
 * kv_route_decision_get_n_chunks:
 * @self: a decision
 *
 * Gets the request's length.
 *
 * Returns: the number of chunk keys routed
 */
guint
kv_route_decision_get_n_chunks (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_chunks;
}

/**
 * kv_route_decision_get_prefix:
 * @self: a decision
 *
 * Gets how many leading chunks the chosen node holds itself.
 *
 * Returns: a count of chunks
 */
guint
kv_route_decision_get_prefix (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->prefix;
}

/**
 * kv_route_decision_get_peer:
 * @self: a decision
 *
 * Gets the node holding a longer prefix than the chosen one, which the
 * chosen node should fetch from.
 *
 * Returns: its id, or -1 when no node holds more or peers are not used
 */
gint
kv_route_decision_get_peer (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, -1);
  return self->peer;
}

/**
 * kv_route_decision_get_peer_name:
 * @self: a decision
 *
 * Gets the name of [method@Kv.RouteDecision.get_peer]: the request's
 * `kv_peer`.
 *
 * Returns: (transfer none) (nullable): the peer's "HOST:PORT", or %NULL
 */
const char *
kv_route_decision_get_peer_name (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->peer_name;
}

/**
 * kv_route_decision_get_peer_prefix:
 * @self: a decision
 *
 * Gets how many leading chunks the peer holds.
 *
 * Returns: a count of chunks, 0 without a peer
 */
guint
kv_route_decision_get_peer_prefix (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->peer_prefix;
}

/**
 * kv_route_decision_get_n_computed:
 * @self: a decision
 *
 * Gets how many chunks the chosen node will compute, as the index sees
 * the fleet: those past its own prefix, or past the peer's.
 *
 * Returns: a count of chunks
 */
guint
kv_route_decision_get_n_computed (const KvRouteDecision *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_chunks - MAX (self->prefix, self->peer_prefix);
}

/**
 * kv_route_decision_dup_transfer_params:
 * @self: a decision
 *
 * Gets the transfer parameters to give the request
 * ([ctor@Kv.Request.new]): `{"kv_peer": <"HOST:PORT">}` when there is a
 * peer, an empty dictionary otherwise.
 *
 * Returns: (transfer full): a new `a{sv}` variant
 */
GVariant *
kv_route_decision_dup_transfer_params (const KvRouteDecision *self)
{
  GVariantBuilder builder;

  g_return_val_if_fail (self != NULL, NULL);

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  if (self->peer_name != NULL)
    g_variant_builder_add (&builder, "{sv}", "kv_peer", g_variant_new_string (self->peer_name));
  return g_variant_ref_sink (g_variant_builder_end (&builder));
}
