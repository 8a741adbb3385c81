/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-event.h"

/**
 * KvEvent:
 *
 * A KV-cache event (vLLM's `OffloadingEvent`): some chunks were stored in,
 * or removed from, storage of one medium and locality. A tier emits events
 * only for storage it owns, with [method@Kv.SecondaryTier.push_event]; the
 * manager aggregates them and never makes up events for a tier.
 *
 * The ownership says which secondary tier owns the storage (%NULL for the
 * primary tier). It is set before the event is handed over; otherwise
 * events are immutable. Events are atomically reference counted.
 */
struct _KvEvent
{
  gatomicrefcount ref_count;
  KvMedium medium;
  KvLocality locality;
  gboolean removed;
  guint n_keys;
  KvKey **keys; /* n_keys references, then NULL */
  char *ownership;
};

G_DEFINE_BOXED_TYPE (KvEvent, kv_event, kv_event_ref, kv_event_unref)

/**
 * kv_event_new:
 * @keys: (array length=n_keys) (nullable): the keys of the chunks, or %NULL
 *   if @n_keys is 0
 * @n_keys: number of keys
 * @medium: the medium of the storage
 * @removed: %TRUE if the chunks were removed, %FALSE if they were stored
 * @locality: the locality of the storage, or %KV_LOCALITY_UNSPECIFIED
 *
 * Creates an event. The keys are referenced. The ownership starts as %NULL.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new event
 */
KvEvent *
kv_event_new (KvKey * const *keys,
              guint          n_keys,
              KvMedium       medium,
              gboolean       removed,
              KvLocality     locality)
{
  KvEvent *self;

  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);

  for (guint i = 0; i < n_keys; i++)
    g_return_val_if_fail (keys[i] != NULL, NULL);

  self = g_new0 (KvEvent, 1);
  g_atomic_ref_count_init (&self->ref_count);
  self->medium = medium;
  self->locality = locality;
  self->removed = !!removed;
  self->n_keys = n_keys;
  self->keys = g_new (KvKey *, n_keys + 1);
  for (guint i = 0; i < n_keys; i++)
    self->keys[i] = kv_key_ref (keys[i]);
  self->keys[n_keys] = NULL;

  return self;
}

/**
 * kv_event_ref:
 * @self: an event
 *
 * Takes a reference on @self. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvEvent *
kv_event_ref (KvEvent *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);

  return self;
}

/**
 * kv_event_unref:
 * @self: (transfer full): an event
 *
 * Drops a reference on @self, freeing it when the last one is gone.
 * Thread-safe.
 */
void
kv_event_unref (KvEvent *self)
{
  g_return_if_fail (self != NULL);

  if (g_atomic_ref_count_dec (&self->ref_count))
    {
      for (guint i = 0; i < self->n_keys; i++)
        kv_key_unref (self->keys[i]);
      g_free (self->keys);
      g_free (self->ownership);
      g_free (self);
    }
}

/**
 * kv_event_get_keys:
 * @self: an event
 * @n_keys: (out) (optional): return location for the number of keys
 *
 * Gets the keys of the chunks the event is about. The array is also
 * %NULL-terminated.
 *
 * May be called from any thread.
 *
 * Returns: (array length=n_keys) (transfer none): the keys, owned by @self
 */
KvKey * const *
kv_event_get_keys (const KvEvent *self,
                   guint         *n_keys)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (n_keys != NULL)
    *n_keys = self->n_keys;

  return self->keys;
}

/**
 * kv_event_get_medium:
 * @self: an event
 *
 * Gets the medium of the storage the event is about.
 *
 * May be called from any thread.
 *
 * Returns: the medium
 */
KvMedium
kv_event_get_medium (const KvEvent *self)
{
  g_return_val_if_fail (self != NULL, KV_MEDIUM_UNSPECIFIED);

  return self->medium;
}

/**
 * kv_event_get_removed:
 * @self: an event
 *
 * Gets whether the chunks were removed rather than stored.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE for a removal, %FALSE for a store
 */
gboolean
kv_event_get_removed (const KvEvent *self)
{
  g_return_val_if_fail (self != NULL, FALSE);

  return self->removed;
}

/**
 * kv_event_get_locality:
 * @self: an event
 *
 * Gets the locality of the storage the event is about.
 *
 * May be called from any thread.
 *
 * Returns: the locality, or %KV_LOCALITY_UNSPECIFIED
 */
KvLocality
kv_event_get_locality (const KvEvent *self)
{
  g_return_val_if_fail (self != NULL, KV_LOCALITY_UNSPECIFIED);

  return self->locality;
}

/**
 * kv_event_get_ownership:
 * @self: an event
 *
 * Gets the id of the secondary tier that owns the storage.
 *
 * May be called from any thread.
 *
 * Returns: (nullable): the owning tier's id, or %NULL for the primary tier
 */
const char *
kv_event_get_ownership (const KvEvent *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  return self->ownership;
}

/**
 * kv_event_set_ownership:
 * @self: an event
 * @ownership: (nullable): the owning tier's id, or %NULL for the primary tier
 *
 * Sets the id of the secondary tier that owns the storage.
 *
 * Call before the event is shared, on any thread.
 */
void
kv_event_set_ownership (KvEvent    *self,
                        const char *ownership)
{
  g_return_if_fail (self != NULL);

  if (ownership == self->ownership)
    return;

  g_free (self->ownership);
  self->ownership = g_strdup (ownership);
}
