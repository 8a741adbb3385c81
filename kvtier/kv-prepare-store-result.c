/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-prepare-store-result.h"
#include "kv-prepare-store-result-private.h"

#include <string.h>

/**
 * KvPrepareStoreResult:
 *
 * What the primary tier did for a store request (vLLM's
 * `PrepareStoreOutput`): the keys it allocated slots for, each with its
 * slot (chunk id), and the keys it evicted to make room. Keys already
 * present are not in the list, so it may be empty.
 *
 * Immutable and atomically reference counted; may be used from any thread.
 */
struct _KvPrepareStoreResult
{
  gatomicrefcount ref_count;
  guint n_keys;
  guint n_evicted;
  KvKey **keys_to_store; /* n_keys references, then NULL */
  guint32 *chunk_ids;    /* n_keys entries, never NULL */
  KvKey **evicted_keys;  /* n_evicted references, then NULL */
};

G_DEFINE_BOXED_TYPE (KvPrepareStoreResult, kv_prepare_store_result,
                     kv_prepare_store_result_ref, kv_prepare_store_result_unref)

static KvKey **
ref_keys (KvKey * const *keys,
          guint          n_keys)
{
  KvKey **copy = g_new (KvKey *, n_keys + 1);

  for (guint i = 0; i < n_keys; i++)
    copy[i] = kv_key_ref (keys[i]);
  copy[n_keys] = NULL;

  return copy;
}

static void
unref_keys (KvKey **keys,
            guint   n_keys)
{
  for (guint i = 0; i < n_keys; i++)
    kv_key_unref (keys[i]);
  g_free (keys);
}

/**
 * kv_prepare_store_result_new:
 * @keys_to_store: (array length=n_keys) (nullable): the keys that got a
 *   slot, or %NULL if @n_keys is 0
 * @chunk_ids: (array length=n_keys) (nullable): the slot of each key, or
 *   %NULL if @n_keys is 0
 * @n_keys: number of keys to store
 * @evicted_keys: (array length=n_evicted) (nullable): the keys evicted to
 *   make room, or %NULL if @n_evicted is 0
 * @n_evicted: number of evicted keys
 *
 * Creates a prepare-store result. Keys are referenced and chunk ids copied.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new result
 */
KvPrepareStoreResult *
kv_prepare_store_result_new (KvKey * const *keys_to_store,
                             const guint32 *chunk_ids,
                             guint          n_keys,
                             KvKey * const *evicted_keys,
                             guint          n_evicted)
{
  KvPrepareStoreResult *self;

  g_return_val_if_fail (keys_to_store != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (chunk_ids != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (evicted_keys != NULL || n_evicted == 0, NULL);

  for (guint i = 0; i < n_keys; i++)
    g_return_val_if_fail (keys_to_store[i] != NULL, NULL);
  for (guint i = 0; i < n_evicted; i++)
    g_return_val_if_fail (evicted_keys[i] != NULL, NULL);

  self = g_new0 (KvPrepareStoreResult, 1);
  g_atomic_ref_count_init (&self->ref_count);
  self->n_keys = n_keys;
  self->n_evicted = n_evicted;
  self->keys_to_store = ref_keys (keys_to_store, n_keys);
  self->chunk_ids = g_new0 (guint32, MAX (n_keys, 1));
  if (n_keys > 0)
    memcpy (self->chunk_ids, chunk_ids, n_keys * sizeof (guint32));
  self->evicted_keys = ref_keys (evicted_keys, n_evicted);

  return self;
}

/**
 * kv_prepare_store_result_ref:
 * @self: a prepare-store result
 *
 * Takes a reference on @self. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvPrepareStoreResult *
_kv_prepare_store_result_new_take (KvKey   **keys_to_store,
                                   guint32  *chunk_ids,
                                   guint     n_keys,
                                   KvKey   **evicted_keys,
                                   guint     n_evicted)
{
  KvPrepareStoreResult *self = g_new (KvPrepareStoreResult, 1);

  g_atomic_ref_count_init (&self->ref_count);
  self->n_keys = n_keys;
  self->n_evicted = n_evicted;
  for (guint i = 0; i < n_keys; i++)
    kv_key_ref (keys_to_store[i]);
  keys_to_store[n_keys] = NULL;
  self->keys_to_store = keys_to_store;
  self->chunk_ids = chunk_ids;
  evicted_keys[n_evicted] = NULL;
  self->evicted_keys = evicted_keys;
  return self;
}

KvPrepareStoreResult *
kv_prepare_store_result_ref (KvPrepareStoreResult *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);

  return self;
}

/**
 * kv_prepare_store_result_unref:
 * @self: (transfer full): a prepare-store result
 *
 * Drops a reference on @self, freeing it when the last one is gone.
 * Thread-safe.
 */
void
kv_prepare_store_result_unref (KvPrepareStoreResult *self)
{
  g_return_if_fail (self != NULL);

  if (g_atomic_ref_count_dec (&self->ref_count))
    {
      unref_keys (self->keys_to_store, self->n_keys);
      unref_keys (self->evicted_keys, self->n_evicted);
      g_free (self->chunk_ids);
      g_free (self);
    }
}

/**
 * kv_prepare_store_result_get_keys_to_store:
 * @self: a prepare-store result
 * @n_keys: (out) (optional): return location for the number of keys
 *
 * Gets the keys that got a primary slot and must now be written. The array
 * is also %NULL-terminated.
 *
 * May be called from any thread.
 *
 * Returns: (array length=n_keys) (transfer none): the keys, owned by @self;
 *   possibly empty
 */
KvKey * const *
kv_prepare_store_result_get_keys_to_store (const KvPrepareStoreResult *self,
                                           guint                      *n_keys)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (n_keys != NULL)
    *n_keys = self->n_keys;

  return self->keys_to_store;
}

/**
 * kv_prepare_store_result_get_chunk_ids:
 * @self: a prepare-store result
 * @n_chunk_ids: (out) (optional): return location for the number of chunk
 *   ids, the same as the number of keys to store
 *
 * Gets the primary slot of each key to store, in key order.
 *
 * May be called from any thread.
 *
 * Returns: (array length=n_chunk_ids) (transfer none): the chunk ids, owned
 *   by @self; possibly empty
 */
const guint32 *
kv_prepare_store_result_get_chunk_ids (const KvPrepareStoreResult *self,
                                       guint                      *n_chunk_ids)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (n_chunk_ids != NULL)
    *n_chunk_ids = self->n_keys;

  return self->chunk_ids;
}

/**
 * kv_prepare_store_result_get_evicted_keys:
 * @self: a prepare-store result
 * @n_keys: (out) (optional): return location for the number of keys
 *
 * Gets the keys the primary tier evicted to make room. The array is also
 * %NULL-terminated.
 *
 * May be called from any thread.
 *
 * Returns: (array length=n_keys) (transfer none): the keys, owned by @self;
 *   possibly empty
 */
KvKey * const *
kv_prepare_store_result_get_evicted_keys (const KvPrepareStoreResult *self,
                                          guint                      *n_keys)
{
  g_return_val_if_fail (self != NULL, NULL);

  if (n_keys != NULL)
    *n_keys = self->n_evicted;

  return self->evicted_keys;
}
