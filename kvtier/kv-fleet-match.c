/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fleet-match.h"

/**
 * KvFleetMatch:
 *
 * The answer of [method@Kv.FleetIndex.lookup] for a request's chunk keys:
 * every node that holds at least the first chunk, with the length of its
 * longest cached prefix and where the chunks of that prefix sit (each
 * counted once, at its fastest place). Nodes are in the order of their
 * ids.
 *
 * Immutable and atomically reference counted.
 */
struct _KvFleetMatch
{
  gatomicrefcount   ref_count;
  guint             n_chunks;
  guint             n_matches;
  KvFleetNodeMatch  matches[];
};

G_DEFINE_BOXED_TYPE (KvFleetMatch, kv_fleet_match, kv_fleet_match_ref, kv_fleet_match_unref)

/**
 * kv_fleet_match_new:
 * @n_chunks: how many chunk keys were looked up
 * @matches: (array length=n_matches) (nullable): the nodes' answers
 * @n_matches: the length of @matches
 *
 * Creates a match from the nodes' answers (copied). Any thread.
 *
 * Returns: (transfer full): a new match
 */
KvFleetMatch *
kv_fleet_match_new (guint                   n_chunks,
                    const KvFleetNodeMatch *matches,
                    guint                   n_matches)
{
  KvFleetMatch *self;

  g_return_val_if_fail (matches != NULL || n_matches == 0, NULL);
  g_return_val_if_fail (n_matches <= G_MAXUINT / sizeof (KvFleetNodeMatch) - 1, NULL);

  self = g_malloc (sizeof (KvFleetMatch) + n_matches * sizeof (KvFleetNodeMatch));
  g_atomic_ref_count_init (&self->ref_count);
  self->n_chunks = n_chunks;
  self->n_matches = n_matches;
  for (guint i = 0; i < n_matches; i++)
    self->matches[i] = matches[i];
  return self;
}

/**
 * kv_fleet_match_ref:
 * @self: a match
 *
 * Takes a reference.
 *
 * Returns: (transfer full): @self
 */
KvFleetMatch *
kv_fleet_match_ref (KvFleetMatch *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);
  return self;
}

/**
 * kv_fleet_match_unref:
 * @self: (transfer full): a match
 *
 * Drops a reference; the last one frees @self.
 */
void
kv_fleet_match_unref (KvFleetMatch *self)
{
  g_return_if_fail (self != NULL);

  if (g_atomic_ref_count_dec (&self->ref_count))
    g_free (self);
}

/**
 * kv_fleet_match_get_n_chunks:
 * @self: a match
 *
 * Gets how many chunk keys were looked up.
 *
 * Returns: the length of the request, in chunks
 */
guint
kv_fleet_match_get_n_chunks (const KvFleetMatch *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_chunks;
}

/**
 * kv_fleet_match_get_n_nodes:
 * @self: a match
 *
 * Gets how many nodes hold at least the request's first chunk.
 *
 * Returns: the number of answers
 */
guint
kv_fleet_match_get_n_nodes (const KvFleetMatch *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_matches;
}

/**
 * kv_fleet_match_get_match:
 * @self: a match
 * @index: an answer, below [method@Kv.FleetMatch.get_n_nodes]
 *
 * Gets one node's whole answer.
 *
 * Returns: (transfer none): the answer, owned by @self
 */
const KvFleetNodeMatch *
kv_fleet_match_get_match (const KvFleetMatch *self,
                          guint               index)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (index < self->n_matches, NULL);
  return &self->matches[index];
}

/**
 * kv_fleet_match_get_node:
 * @self: a match
 * @index: an answer, below [method@Kv.FleetMatch.get_n_nodes]
 *
 * Gets the node of an answer.
 *
 * Returns: the node's id in the index
 */
guint
kv_fleet_match_get_node (const KvFleetMatch *self,
                         guint               index)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (index < self->n_matches, 0);
  return self->matches[index].node;
}

/**
 * kv_fleet_match_get_prefix:
 * @self: a match
 * @index: an answer, below [method@Kv.FleetMatch.get_n_nodes]
 *
 * Gets the length of the node's longest cached prefix.
 *
 * Returns: leading chunks of the request the node holds
 */
guint
kv_fleet_match_get_prefix (const KvFleetMatch *self,
                           guint               index)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (index < self->n_matches, 0);
  return self->matches[index].prefix;
}

/**
 * kv_fleet_match_get_n_at:
 * @self: a match
 * @index: an answer, below [method@Kv.FleetMatch.get_n_nodes]
 * @location: one place (a single flag)
 *
 * Gets how many chunks of the node's prefix are fastest reached at
 * @location.
 *
 * Returns: a count of chunks
 */
guint
kv_fleet_match_get_n_at (const KvFleetMatch *self,
                         guint               index,
                         KvFleetLocation     location)
{
  const KvFleetNodeMatch *m;

  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (index < self->n_matches, 0);

  m = &self->matches[index];
  switch (location)
    {
    case KV_FLEET_LOCATION_DEVICE: return m->n_device;
    case KV_FLEET_LOCATION_PRIMARY: return m->n_primary;
    case KV_FLEET_LOCATION_DISK: return m->n_disk;
    case KV_FLEET_LOCATION_REMOTE: return m->n_remote;
    case KV_FLEET_LOCATION_NONE:
    default:
      g_return_val_if_reached (0);
    }
}

/**
 * kv_fleet_match_get_prefix_of:
 * @self: a match
 * @node: a node's id
 *
 * Gets the length of @node's longest cached prefix.
 *
 * Returns: leading chunks @node holds, 0 when it holds not even the first
 */
guint
kv_fleet_match_get_prefix_of (const KvFleetMatch *self,
                              guint               node)
{
  g_return_val_if_fail (self != NULL, 0);

  for (guint i = 0; i < self->n_matches; i++)
    if (self->matches[i].node == node)
      return self->matches[i].prefix;
  return 0;
}

/**
 * kv_fleet_match_get_longest:
 * @self: a match
 * @out_node: (out) (optional): the node holding it (the lowest id among
 *   equals), unchanged when no node holds the first chunk
 *
 * Gets the longest prefix any node holds.
 *
 * Returns: its length in chunks, 0 when no node holds the first chunk
 */
guint
kv_fleet_match_get_longest (const KvFleetMatch *self,
                            guint              *out_node)
{
  guint best = 0;

  g_return_val_if_fail (self != NULL, 0);

  for (guint i = 0; i < self->n_matches; i++)
    if (self->matches[i].prefix > best)
      {
        best = self->matches[i].prefix;
        if (out_node != NULL)
          *out_node = self->matches[i].node;
      }
  return best;
}
