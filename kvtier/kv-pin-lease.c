/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-pin-lease.h"
#include "kv-pin-lease-private.h"

/**
 * KvPinLease:
 *
 * Chunks of the primary tier held in place while someone reads their
 * slots: what a tier gets from [method@Kv.ParentManager.pin] to send
 * chunks to another node, as the peer tier's server does.
 *
 * A lease says, for each key it was asked for, whether the key is pinned
 * ([method@Kv.PinLease.is_pinned]) and which primary slot holds its bytes
 * ([method@Kv.PinLease.get_chunk_id]; read them with
 * [method@Kv.HostBuffer.peek_slot] in C or
 * [method@Kv.HostBuffer.read_slot] from a binding). A key that was not in
 * the primary tier, or was still being written, is not pinned. While the
 * lease is held, no pinned chunk is evicted, and its slot's bytes do not
 * change.
 *
 * The holder releases the lease exactly once with
 * [method@Kv.PinLease.release], from any thread (an I/O thread that
 * finished sending, say). The release only queues: the manager unpins the
 * chunks on its owner thread at its next step, and an idle engine is woken
 * for it through [method@Kv.TieringManager.get_wakeup_fd]. A lease that is
 * never released keeps its chunks pinned until the manager shuts down;
 * [method@Kv.TieringManager.reset_cache] fails while a lease is held, and
 * [method@Kv.TieringManager.shutdown] unpins the chunks of leases still
 * held (with a warning), after which their release fails with
 * %KV_TIER_ERROR_CLOSED.
 *
 * Every getter may be called from any thread: what a lease holds does not
 * change after it is made.
 */

typedef enum
{
  LEASE_HELD,      /* in table->held */
  LEASE_QUEUED,    /* released, in table->released */
  LEASE_UNPINNED,  /* handed to the owner (taken or closed) */
} LeaseState;

struct _KvPinLease
{
  GObject parent_instance;

  KvPinTable *table;
  guint tier;
  guint n_keys;
  KvKey **keys;         /* owned */
  guint32 *chunk_ids;   /* G_MAXUINT32: not pinned */
  KvKey **pinned;       /* borrowed from keys: the pinned ones, in order */
  guint n_pinned;
  gint64 pin_time;

  /* under table->lock */
  LeaseState state;
  gboolean released;    /* kv_pin_lease_release() was called */
  gboolean success;
  gint64 release_time;
};

struct _KvPinTable
{
  gatomicrefcount ref_count;
  GMutex lock;
  KvClock *clock;
  KvPinTableQueuedFunc queued_func;
  gpointer queued_data;
  GHashTable *held;       /* KvPinLease (owned), a set */
  GPtrArray *released;    /* KvPinLease (owned), in release order */
  gint has_released;      /* (atomic) released is not empty */
  gboolean closed;
};

G_DEFINE_FINAL_TYPE (KvPinLease, kv_pin_lease, G_TYPE_OBJECT)

static void
kv_pin_lease_finalize (GObject *object)
{
  KvPinLease *self = KV_PIN_LEASE (object);

  for (guint i = 0; i < self->n_keys; i++)
    kv_key_unref (self->keys[i]);
  g_free (self->keys);
  g_free (self->chunk_ids);
  g_free (self->pinned);
  g_clear_pointer (&self->table, _kv_pin_table_unref);

  G_OBJECT_CLASS (kv_pin_lease_parent_class)->finalize (object);
}

static void
kv_pin_lease_class_init (KvPinLeaseClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_pin_lease_finalize;
}

static void
kv_pin_lease_init (KvPinLease *self)
{
}

/**
 * kv_pin_lease_get_n_keys:
 * @self: a lease
 *
 * Counts the keys the lease was asked for, pinned or not. Any thread.
 *
 * Returns: the number of keys
 */
guint
kv_pin_lease_get_n_keys (KvPinLease *self)
{
  g_return_val_if_fail (KV_IS_PIN_LEASE (self), 0);
  return self->n_keys;
}

/**
 * kv_pin_lease_get_key:
 * @self: a lease
 * @index: a key index, below [method@Kv.PinLease.get_n_keys]
 *
 * Gets a key the lease was asked for, in the order it was asked. Any
 * thread.
 *
 * Returns: (transfer none): the key
 */
KvKey *
kv_pin_lease_get_key (KvPinLease *self,
                      guint       index)
{
  g_return_val_if_fail (KV_IS_PIN_LEASE (self), NULL);
  g_return_val_if_fail (index < self->n_keys, NULL);
  return self->keys[index];
}

/**
 * kv_pin_lease_is_pinned:
 * @self: a lease
 * @index: a key index, below [method@Kv.PinLease.get_n_keys]
 *
 * Whether the key at @index is pinned: it was ready in the primary tier.
 * A key that was not is a miss for whoever asked for it. Any thread.
 *
 * Returns: %TRUE if the key's slot may be read until the release
 */
gboolean
kv_pin_lease_is_pinned (KvPinLease *self,
                        guint       index)
{
  g_return_val_if_fail (KV_IS_PIN_LEASE (self), FALSE);
  g_return_val_if_fail (index < self->n_keys, FALSE);
  return self->chunk_ids[index] != G_MAXUINT32;
}

/**
 * kv_pin_lease_get_chunk_id:
 * @self: a lease
 * @index: a key index, below [method@Kv.PinLease.get_n_keys]
 *
 * Gets the primary slot that holds the bytes of the key at @index. Any
 * thread.
 *
 * Returns: the slot's chunk id, or %G_MAXUINT32 when the key is not pinned
 */
guint32
kv_pin_lease_get_chunk_id (KvPinLease *self,
                           guint       index)
{
  g_return_val_if_fail (KV_IS_PIN_LEASE (self), G_MAXUINT32);
  g_return_val_if_fail (index < self->n_keys, G_MAXUINT32);
  return self->chunk_ids[index];
}

/**
 * kv_pin_lease_get_chunk_ids:
 * @self: a lease
 * @n_keys: (out) (optional): return location for the number of keys
 *
 * Gets the primary slot of every key, in key order: %G_MAXUINT32 for a key
 * that is not pinned. Any thread.
 *
 * Returns: (array length=n_keys) (transfer none): the chunk ids, valid as
 *   long as the lease
 */
const guint32 *
kv_pin_lease_get_chunk_ids (KvPinLease *self,
                            guint      *n_keys)
{
  g_return_val_if_fail (KV_IS_PIN_LEASE (self), NULL);

  if (n_keys != NULL)
    *n_keys = self->n_keys;
  return self->chunk_ids;
}

/**
 * kv_pin_lease_get_n_pinned:
 * @self: a lease
 *
 * Counts the keys the lease pinned. Any thread.
 *
 * Returns: the number of pinned keys
 */
guint
kv_pin_lease_get_n_pinned (KvPinLease *self)
{
  g_return_val_if_fail (KV_IS_PIN_LEASE (self), 0);
  return self->n_pinned;
}

/**
 * kv_pin_lease_release:
 * @self: a lease
 * @success: whether the pinned bytes reached whoever they were read for
 *   (counted in the manager's `kvtier_tiering_served_*` metrics)
 * @error: return location for an error
 *
 * Gives the pinned chunks back. Call it exactly once, from any thread,
 * when nothing reads the slots any more. The chunks are unpinned on the
 * manager's owner thread at its next step; the slots must not be read
 * after this call.
 *
 * Fails with %KV_TIER_ERROR_INVALID_ARGUMENT when the lease was already
 * released, and with %KV_TIER_ERROR_CLOSED when the manager shut down
 * first (it unpinned the chunks then); the lease counts as released in
 * both cases.
 *
 * Returns: %TRUE if the release was queued
 */
gboolean
kv_pin_lease_release (KvPinLease  *self,
                      gboolean     success,
                      GError     **error)
{
  KvPinTable *table;

  g_return_val_if_fail (KV_IS_PIN_LEASE (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  table = self->table;
  g_mutex_lock (&table->lock);
  if (self->released)
    {
      g_mutex_unlock (&table->lock);
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "This pin lease of %u chunks was already released", self->n_keys);
      return FALSE;
    }
  self->released = TRUE;
  if (self->state != LEASE_HELD)
    {
      /* closed with the table: the manager unpinned the chunks */
      g_mutex_unlock (&table->lock);
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                   "The tiering manager of this pin lease shut down and unpinned its %u chunks",
                   self->n_pinned);
      return FALSE;
    }

  self->success = success;
  self->release_time = kv_clock_get_time (table->clock);
  self->state = LEASE_QUEUED;
  g_hash_table_steal (table->held, self);
  g_ptr_array_add (table->released, self);
  g_atomic_int_set (&table->has_released, TRUE);
  if (table->queued_func != NULL)
    table->queued_func (table->queued_data);
  g_mutex_unlock (&table->lock);
  return TRUE;
}

/* ---- the manager's side -------------------------------------------------- */

KvPinTable *
_kv_pin_table_new (KvClock              *clock,
                   KvPinTableQueuedFunc  queued_func,
                   gpointer              queued_data)
{
  KvPinTable *table = g_new0 (KvPinTable, 1);

  g_atomic_ref_count_init (&table->ref_count);
  g_mutex_init (&table->lock);
  table->clock = g_object_ref (clock);
  table->queued_func = queued_func;
  table->queued_data = queued_data;
  table->held = g_hash_table_new_full (NULL, NULL, g_object_unref, NULL);
  table->released = g_ptr_array_new_with_free_func (g_object_unref);
  return table;
}

void
_kv_pin_table_unref (KvPinTable *table)
{
  if (!g_atomic_ref_count_dec (&table->ref_count))
    return;
  g_hash_table_unref (table->held);
  g_ptr_array_unref (table->released);
  g_object_unref (table->clock);
  g_mutex_clear (&table->lock);
  g_free (table);
}

KvPinLease *
_kv_pin_table_add (KvPinTable    *table,
                   guint          tier,
                   KvKey * const *keys,
                   guint32       *chunk_ids,
                   guint          n_keys)
{
  KvPinLease *self = g_object_new (KV_TYPE_PIN_LEASE, NULL);

  g_atomic_ref_count_inc (&table->ref_count);
  self->table = table;
  self->tier = tier;
  self->n_keys = n_keys;
  self->keys = g_new (KvKey *, MAX (n_keys, 1));
  self->chunk_ids = chunk_ids;
  self->pinned = g_new (KvKey *, MAX (n_keys, 1));
  for (guint i = 0; i < n_keys; i++)
    {
      self->keys[i] = kv_key_ref (keys[i]);
      if (chunk_ids[i] != G_MAXUINT32)
        self->pinned[self->n_pinned++] = self->keys[i];
    }
  self->pin_time = kv_clock_get_time (table->clock);
  self->state = LEASE_HELD;

  g_mutex_lock (&table->lock);
  g_hash_table_add (table->held, g_object_ref (self));
  g_mutex_unlock (&table->lock);
  return self;
}

gboolean
_kv_pin_table_has_released (KvPinTable *table)
{
  return g_atomic_int_get (&table->has_released);
}

GPtrArray *
_kv_pin_table_take_released (KvPinTable *table)
{
  GPtrArray *taken = NULL;

  g_mutex_lock (&table->lock);
  if (table->released->len > 0)
    {
      taken = g_steal_pointer (&table->released);
      table->released = g_ptr_array_new_with_free_func (g_object_unref);
      for (guint i = 0; i < taken->len; i++)
        ((KvPinLease *) taken->pdata[i])->state = LEASE_UNPINNED;
    }
  g_atomic_int_set (&table->has_released, FALSE);
  g_mutex_unlock (&table->lock);
  return taken;
}

guint
_kv_pin_table_get_n_held (KvPinTable *table)
{
  guint n;

  g_mutex_lock (&table->lock);
  n = g_hash_table_size (table->held);
  g_mutex_unlock (&table->lock);
  return n;
}

GPtrArray *
_kv_pin_table_close (KvPinTable *table,
                     guint      *n_unreleased)
{
  GPtrArray *left;
  GHashTableIter iter;
  gpointer lease;
  gint64 now;

  g_mutex_lock (&table->lock);
  table->closed = TRUE;
  table->queued_func = NULL;
  now = kv_clock_get_time (table->clock);
  left = g_steal_pointer (&table->released);
  table->released = g_ptr_array_new_with_free_func (g_object_unref);
  if (n_unreleased != NULL)
    *n_unreleased = g_hash_table_size (table->held);
  g_hash_table_iter_init (&iter, table->held);
  while (g_hash_table_iter_next (&iter, &lease, NULL))
    {
      KvPinLease *held = lease;

      held->success = FALSE;
      held->release_time = now;
      g_ptr_array_add (left, held);
      g_hash_table_iter_steal (&iter);
    }
  for (guint i = 0; i < left->len; i++)
    ((KvPinLease *) left->pdata[i])->state = LEASE_UNPINNED;
  g_atomic_int_set (&table->has_released, FALSE);
  g_mutex_unlock (&table->lock);

  if (left->len == 0)
    g_clear_pointer (&left, g_ptr_array_unref);
  return left;
}

guint
_kv_pin_lease_get_tier (KvPinLease *lease)
{
  return lease->tier;
}

KvKey **
_kv_pin_lease_get_pinned (KvPinLease *lease,
                          guint      *n_pinned)
{
  *n_pinned = lease->n_pinned;
  return lease->pinned;
}

gboolean
_kv_pin_lease_get_success (KvPinLease *lease)
{
  return lease->success;
}

gdouble
_kv_pin_lease_get_held_time (KvPinLease *lease)
{
  return MAX (lease->release_time - lease->pin_time, 0) / (gdouble) G_USEC_PER_SEC;
}
