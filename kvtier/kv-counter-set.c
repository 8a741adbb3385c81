/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-counter-set.h"

/**
 * KvCounterSet:
 *
 * A tier's own counters (chunks stored, corrupt chunks found, bytes
 * read...), counted from any thread and reported as the increase since the
 * last report, as [vfunc@Kv.SecondaryTier.get_stats] returns them (vLLM's
 * return-and-reset `get_stats`).
 *
 * A tier makes one with the names of its counter metrics, counts with
 * [method@Kv.CounterSet.add] wherever the event happens (a relaxed atomic
 * add: no lock, no allocation) and hands it to its base class with
 * [method@Kv.SecondaryTier.set_counters]; the
 * [method@Kv.SecondaryTier.get_stats] invoker then adds what moved since
 * its last call, labelled with the tier's type. The first report includes
 * every counter, zeros too, so that each series exists from the first
 * scrape on. The tier still defines the metrics in its
 * [vfunc@Kv.SecondaryTier.register_metrics].
 */
struct _KvCounterSet
{
  gatomicrefcount ref_count;
  guint    n_counters;
  char   **names;
  guint64 *values;    /* (atomic) */
  guint64 *reported;  /* values at the last take_deltas() */
  gboolean taken;     /* take_deltas() ran once */
  GMutex   take_lock; /* one take_deltas() at a time */
};

G_DEFINE_BOXED_TYPE (KvCounterSet, kv_counter_set, kv_counter_set_ref, kv_counter_set_unref)

/**
 * kv_counter_set_new:
 * @names: (array zero-terminated=1): the metric name of each counter, in
 *   the order of their indices
 *
 * Creates a set of counters at zero. Any thread.
 *
 * Returns: (transfer full): a new counter set
 */
KvCounterSet *
kv_counter_set_new (const char * const *names)
{
  KvCounterSet *self;

  g_return_val_if_fail (names != NULL, NULL);

  self = g_new0 (KvCounterSet, 1);
  g_atomic_ref_count_init (&self->ref_count);
  self->names = g_strdupv ((char **) names);
  self->n_counters = g_strv_length (self->names);
  self->values = g_new0 (guint64, MAX (self->n_counters, 1));
  self->reported = g_new0 (guint64, MAX (self->n_counters, 1));
  g_mutex_init (&self->take_lock);
  return self;
}

/**
 * kv_counter_set_ref:
 * @self: a counter set
 *
 * Takes a reference. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvCounterSet *
kv_counter_set_ref (KvCounterSet *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);
  return self;
}

/**
 * kv_counter_set_unref:
 * @self: (transfer full): a counter set
 *
 * Drops a reference; the last one frees the set. Thread-safe.
 */
void
kv_counter_set_unref (KvCounterSet *self)
{
  g_return_if_fail (self != NULL);

  if (!g_atomic_ref_count_dec (&self->ref_count))
    return;
  g_strfreev (self->names);
  g_free (self->values);
  g_free (self->reported);
  g_mutex_clear (&self->take_lock);
  g_free (self);
}

/**
 * kv_counter_set_get_n_counters:
 * @self: a counter set
 *
 * Counts the counters. Any thread.
 *
 * Returns: the number of counters
 */
guint
kv_counter_set_get_n_counters (KvCounterSet *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->n_counters;
}

/**
 * kv_counter_set_get_name:
 * @self: a counter set
 * @index: a counter's index
 *
 * Gets the metric name of counter @index. Any thread.
 *
 * Returns: (transfer none): the name
 */
const char *
kv_counter_set_get_name (KvCounterSet *self,
                         guint         index)
{
  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (index < self->n_counters, NULL);
  return self->names[index];
}

/**
 * kv_counter_set_add:
 * @self: a counter set
 * @index: a counter's index
 * @n: how much to add
 *
 * Adds @n to counter @index. Any thread; no lock, no allocation.
 */
void
kv_counter_set_add (KvCounterSet *self,
                    guint         index,
                    guint64       n)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (index < self->n_counters);

  __atomic_fetch_add (&self->values[index], n, __ATOMIC_RELAXED);
}

/**
 * kv_counter_set_update:
 * @self: a counter set
 * @index: a counter's index
 * @total: the counter's value, counted elsewhere (never lower than before)
 *
 * Sets counter @index to a total that something else counts (the base
 * class's deadline failures, a circuit breaker's trips), so that it is
 * reported with the others. Any thread.
 */
void
kv_counter_set_update (KvCounterSet *self,
                       guint         index,
                       guint64       total)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (index < self->n_counters);

  __atomic_store_n (&self->values[index], total, __ATOMIC_RELAXED);
}

/**
 * kv_counter_set_get:
 * @self: a counter set
 * @index: a counter's index
 *
 * Reads counter @index: everything added since the set was made. Any
 * thread.
 *
 * Returns: the counter's value
 */
guint64
kv_counter_set_get (KvCounterSet *self,
                    guint         index)
{
  g_return_val_if_fail (self != NULL, 0);
  g_return_val_if_fail (index < self->n_counters, 0);

  return __atomic_load_n (&self->values[index], __ATOMIC_RELAXED);
}

/**
 * kv_counter_set_take_deltas:
 * @self: a counter set
 * @stats: where to add the increases
 * @labels: (array zero-terminated=1) (nullable): the label values of
 *   every counter (usually the tier's type)
 *
 * Increases each counter of @stats by what it moved since the last call;
 * the first call adds every counter, zeros too. Any thread, one call at a
 * time.
 */
void
kv_counter_set_take_deltas (KvCounterSet       *self,
                            KvStats            *stats,
                            const char * const *labels)
{
  g_return_if_fail (self != NULL);
  g_return_if_fail (stats != NULL);

  g_mutex_lock (&self->take_lock);
  for (guint c = 0; c < self->n_counters; c++)
    {
      guint64 value = __atomic_load_n (&self->values[c], __ATOMIC_RELAXED);

      /* never negative: an update() below the last report waits */
      if ((value <= self->reported[c] && self->taken) || value < self->reported[c])
        continue;
      kv_stats_increase_counter (stats, self->names[c], (gdouble) (value - self->reported[c]),
                                 labels);
      self->reported[c] = value;
    }
  self->taken = TRUE;
  g_mutex_unlock (&self->take_lock);
}
