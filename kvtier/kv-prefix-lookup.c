/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-prefix-lookup-private.h"

#include <string.h>

/**
 * KvPrefixLookup:
 *
 * The answer of [method@Kv.Connector.lookup] for a request's prompt: how
 * many leading chunks are where. The prompt's chunks `[0, n_device)` are
 * on the device already; the next `n_hits` are held by the offload tiers
 * (the first `n_ready` of them loadable now, the others still on their way
 * into the primary tier), and the rest must be computed. When the chunk
 * after the hits answered "not known yet" (a tier's RETRY),
 * [method@Kv.PrefixLookup.get_retry] is %TRUE.
 *
 * Each chunk also carries where the request first found it
 * ([enum@Kv.ChunkSource]): a chunk promoted from a secondary tier keeps
 * that tier as its source when it later answers from the primary tier.
 *
 * Immutable for its users and atomically reference counted.
 */

G_DEFINE_BOXED_TYPE (KvPrefixLookup, kv_prefix_lookup,
                     kv_prefix_lookup_ref, kv_prefix_lookup_unref)

KvPrefixLookup *
_kv_prefix_lookup_new (KvRequest     *request,
                       KvKey * const *keys,
                       guint          n_keys,
                       guint          n_sources)
{
  KvPrefixLookup *self = g_new0 (KvPrefixLookup, 1);

  g_atomic_ref_count_init (&self->ref_count);
  self->request = g_object_ref (request);
  self->n_chunks = n_keys;
  self->keys = g_new (KvKey *, n_keys + 1);
  for (guint i = 0; i < n_keys; i++)
    self->keys[i] = kv_key_ref (keys[i]);
  self->keys[n_keys] = NULL;
  self->n_sources = n_sources;
  self->n_from = g_new0 (guint, n_sources);
  self->sources = g_new (guint8, MAX (n_keys, 1));
  memset (self->sources, G_MAXUINT8, n_keys);
  return self;
}

/**
 * kv_prefix_lookup_ref:
 * @self: a lookup
 *
 * Takes a reference.
 *
 * Returns: (transfer full): @self
 */
KvPrefixLookup *
kv_prefix_lookup_ref (KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);
  return self;
}

/**
 * kv_prefix_lookup_unref:
 * @self: (transfer full): a lookup
 *
 * Drops a reference; the last one frees @self.
 */
void
kv_prefix_lookup_unref (KvPrefixLookup *self)
{
  g_return_if_fail (self != NULL);

  if (!g_atomic_ref_count_dec (&self->ref_count))
    return;
  for (guint i = 0; i < self->n_chunks; i++)
    kv_key_unref (self->keys[i]);
  g_free (self->keys);
  g_free (self->n_from);
  g_free (self->sources);
  g_object_unref (self->request);
  g_free (self);
}

/**
 * kv_prefix_lookup_get_request:
 * @self: a lookup
 *
 * Gets the request that looked its prompt up.
 *
 * Returns: (transfer none): the request
 */
KvRequest *
kv_prefix_lookup_get_request (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return self->request;
}

/**
 * kv_prefix_lookup_get_n_chunks:
 * @self: a lookup
 *
 * Gets the number of chunks of the prompt that was looked up.
 *
 * Returns: the number of chunks
 */
guint
kv_prefix_lookup_get_n_chunks (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_chunks;
}

/**
 * kv_prefix_lookup_get_keys:
 * @self: a lookup
 * @n_keys: (out) (optional): the number of keys
 *
 * Gets the keys of the prompt's chunks, in order.
 *
 * Returns: (array length=n_keys) (transfer none): the keys
 */
KvKey * const *
kv_prefix_lookup_get_keys (const KvPrefixLookup *self,
                           guint                *n_keys)
{
  g_return_val_if_fail (self != NULL, NULL);
  if (n_keys != NULL)
    *n_keys = self->n_chunks;
  return self->keys;
}

/**
 * kv_prefix_lookup_get_n_device:
 * @self: a lookup
 *
 * Gets the number of leading chunks that were on the device already, as
 * the engine said.
 *
 * Returns: the device prefix in chunks
 */
guint
kv_prefix_lookup_get_n_device (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_device;
}

/**
 * kv_prefix_lookup_get_n_hits:
 * @self: a lookup
 *
 * Gets the number of chunks after the device prefix that the primary or a
 * secondary tier holds (ready or on their way), up to the first chunk that
 * none holds.
 *
 * Returns: the number of offload hits
 */
guint
kv_prefix_lookup_get_n_hits (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_hits;
}

/**
 * kv_prefix_lookup_get_n_ready:
 * @self: a lookup
 *
 * Gets how many of the leading hits are ready in the primary tier now:
 * what [method@Kv.Connector.load] loads.
 *
 * Returns: the number of loadable chunks
 */
guint
kv_prefix_lookup_get_n_ready (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_ready;
}

/**
 * kv_prefix_lookup_get_n_pending:
 * @self: a lookup
 *
 * Gets how many hits are still on their way into the primary tier (a
 * promotion or another request's store in flight).
 *
 * Returns: hits minus ready chunks
 */
guint
kv_prefix_lookup_get_n_pending (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_hits - self->n_ready;
}

/**
 * kv_prefix_lookup_get_retry:
 * @self: a lookup
 *
 * Says whether the chunk after the hits is not known yet: a secondary tier
 * answered RETRY (its existence check is in flight).
 *
 * Returns: %TRUE when a tier asked to be asked again
 */
gboolean
kv_prefix_lookup_get_retry (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->retry;
}

/**
 * kv_prefix_lookup_is_complete:
 * @self: a lookup
 *
 * Says whether the answer is final: every hit is ready and nothing is
 * unknown. Otherwise an engine defers the request and looks it up again
 * when [method@Kv.Connector.get_wakeup_fd] wakes it.
 *
 * Returns: %TRUE when no hit is pending and no tier said RETRY
 */
gboolean
kv_prefix_lookup_is_complete (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, FALSE);
  return self->n_ready == self->n_hits && !self->retry;
}

/**
 * kv_prefix_lookup_get_n_sources:
 * @self: a lookup
 *
 * Gets the number of sources: 2 plus the manager's secondary tiers.
 *
 * Returns: the number of sources
 */
guint
kv_prefix_lookup_get_n_sources (const KvPrefixLookup *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_sources;
}

/**
 * kv_prefix_lookup_get_n_from:
 * @self: a lookup
 * @source: a source index ([enum@Kv.ChunkSource], tiers from
 *   %KV_CHUNK_SOURCE_TIER)
 *
 * Gets how many of the device prefix and the hits were found at @source.
 *
 * Returns: the number of chunks, 0 for an unknown source
 */
guint
kv_prefix_lookup_get_n_from (const KvPrefixLookup *self,
                             guint                 source)
{
  g_return_val_if_fail (self != NULL, 0);
  return source < self->n_sources ? self->n_from[source] : 0;
}

/**
 * kv_prefix_lookup_get_source:
 * @self: a lookup
 * @index: a chunk of the prompt
 *
 * Gets where the request first found chunk @index.
 *
 * Returns: a source index ([enum@Kv.ChunkSource], tiers from
 *   %KV_CHUNK_SOURCE_TIER), or -1 for a chunk that is not a hit
 */
gint
kv_prefix_lookup_get_source (const KvPrefixLookup *self,
                             guint                 index)
{
  g_return_val_if_fail (self != NULL, -1);
  g_return_val_if_fail (index < self->n_chunks, -1);
  return self->sources[index] == G_MAXUINT8 ? -1 : self->sources[index];
}
