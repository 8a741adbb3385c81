/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-backpressure-policy.h"

#include "kv-backpressure-detector.h"

typedef struct
{
  guint64 stores_dropped;
  guint64 chunks_dropped;
} KvBackpressurePolicyPrivate;

/**
 * KvBackpressurePolicy:
 *
 * Decides what a [class@Kv.BackpressureDetector] does with a cascade while
 * its tier is saturated, and counts what it dropped.
 *
 * A policy is asked only by its detector (through
 * [method@Kv.BackpressureDetector.should_store]); when it refuses a store the
 * detector reports the skipped store with
 * [method@Kv.BackpressurePolicy.on_store_skipped], and the tiering manager's
 * [class@Kv.BackpressureAdmissionPolicy] collects the counts once per
 * `get_stats` with
 * [method@Kv.BackpressurePolicy.pop_stores_dropped].
 *
 * Subclasses implement `should_store`; kvtier ships
 * [class@Kv.DropStorePolicy] (drop everything under pressure) and
 * [class@Kv.ThrottledDropPolicy] (drop a fraction that grows with the
 * overshoot). Every method runs on the owner thread (the thread that drives
 * the [class@Kv.TieringManager]).
 */
G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (KvBackpressurePolicy, kv_backpressure_policy, G_TYPE_OBJECT)

static void
kv_backpressure_policy_real_on_store_skipped (KvBackpressurePolicy *self,
                                              guint                 n_chunks)
{
  KvBackpressurePolicyPrivate *priv = kv_backpressure_policy_get_instance_private (self);

  priv->stores_dropped += 1;
  priv->chunks_dropped += n_chunks;
}

static void
kv_backpressure_policy_real_reset (KvBackpressurePolicy *self)
{
  KvBackpressurePolicyPrivate *priv = kv_backpressure_policy_get_instance_private (self);

  priv->stores_dropped = 0;
  priv->chunks_dropped = 0;
}

static void
kv_backpressure_policy_class_init (KvBackpressurePolicyClass *klass)
{
  klass->on_store_skipped = kv_backpressure_policy_real_on_store_skipped;
  klass->reset = kv_backpressure_policy_real_reset;
}

static void
kv_backpressure_policy_init (KvBackpressurePolicy *self)
{
}

/**
 * kv_backpressure_policy_should_store: (virtual should_store)
 * @self: a policy
 * @detector: the detector asking; read its state, e.g. with
 *   [method@Kv.BackpressureDetector.is_under_pressure]
 *
 * Decides whether a cascade may be submitted now. Called by the detector
 * only; it does not count a drop (the detector calls
 * [method@Kv.BackpressurePolicy.on_store_skipped] when this returns %FALSE).
 *
 * Owner thread only.
 *
 * Returns: %TRUE to submit the store, %FALSE to drop it
 */
gboolean
kv_backpressure_policy_should_store (KvBackpressurePolicy   *self,
                                     KvBackpressureDetector *detector)
{
  KvBackpressurePolicyClass *klass;

  g_return_val_if_fail (KV_IS_BACKPRESSURE_POLICY (self), TRUE);
  g_return_val_if_fail (KV_IS_BACKPRESSURE_DETECTOR (detector), TRUE);

  klass = KV_BACKPRESSURE_POLICY_GET_CLASS (self);
  g_return_val_if_fail (klass->should_store != NULL, TRUE);

  return klass->should_store (self, detector);
}

/**
 * kv_backpressure_policy_on_store_skipped: (virtual on_store_skipped)
 * @self: a policy
 * @n_chunks: how many chunks the dropped store carried
 *
 * Counts one dropped store of @n_chunks chunks. The default adds one store
 * and @n_chunks chunks to the counters returned by
 * [method@Kv.BackpressurePolicy.pop_stores_dropped]; an override should
 * chain up.
 *
 * Owner thread only.
 */
void
kv_backpressure_policy_on_store_skipped (KvBackpressurePolicy *self,
                                         guint                 n_chunks)
{
  KvBackpressurePolicyClass *klass;

  g_return_if_fail (KV_IS_BACKPRESSURE_POLICY (self));

  klass = KV_BACKPRESSURE_POLICY_GET_CLASS (self);
  if (klass->on_store_skipped != NULL)
    klass->on_store_skipped (self, n_chunks);
}

/**
 * kv_backpressure_policy_pop_stores_dropped:
 * @self: a policy
 * @out_stores: (out) (optional): stores dropped since the last call
 * @out_chunks: (out) (optional): chunks those stores carried
 *
 * Returns the drop counters and zeroes them, so each drop is reported once
 * (the [class@Kv.BackpressureAdmissionPolicy] calls this from `get_stats`).
 *
 * Owner thread only.
 */
void
kv_backpressure_policy_pop_stores_dropped (KvBackpressurePolicy *self,
                                           guint64              *out_stores,
                                           guint64              *out_chunks)
{
  KvBackpressurePolicyPrivate *priv;

  g_return_if_fail (KV_IS_BACKPRESSURE_POLICY (self));

  priv = kv_backpressure_policy_get_instance_private (self);
  if (out_stores != NULL)
    *out_stores = priv->stores_dropped;
  if (out_chunks != NULL)
    *out_chunks = priv->chunks_dropped;
  priv->stores_dropped = 0;
  priv->chunks_dropped = 0;
}

/**
 * kv_backpressure_policy_reset: (virtual reset)
 * @self: a policy
 *
 * Forgets all state, including the drop counters. Called by
 * [method@Kv.BackpressureDetector.reset]; an override must chain up.
 *
 * Owner thread only.
 */
void
kv_backpressure_policy_reset (KvBackpressurePolicy *self)
{
  KvBackpressurePolicyClass *klass;

  g_return_if_fail (KV_IS_BACKPRESSURE_POLICY (self));

  klass = KV_BACKPRESSURE_POLICY_GET_CLASS (self);
  if (klass->reset != NULL)
    klass->reset (self);
}
