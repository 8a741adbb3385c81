/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

#define KV_TYPE_EXAMPLE_TIER (kv_example_tier_get_type ())

G_DECLARE_DERIVABLE_TYPE (KvExampleTier, kv_example_tier, KV, EXAMPLE_TIER, KvSecondaryTier)

/**
 * KvExampleTierClass:
 * @parent_class: the parent class
 * @run_store: copies the job's primary slots into the store and marks
 *   each key of @tier_job; runs on a worker thread, which reports the job
 *   afterwards.
 * @run_load: copies stored bytes into the job's primary slots and marks
 *   each key of @tier_job; runs on a worker thread.
 *
 * Subclasses may wrap the two worker-thread hooks (to delay, fail or
 * trim jobs) and chain up to do the copies; keys a subclass marked before
 * it chains up are left alone.
 */
struct _KvExampleTierClass
{
  KvSecondaryTierClass parent_class;

  void (*run_store) (KvExampleTier *self,
                     KvTierJob     *tier_job);
  void (*run_load)  (KvExampleTier *self,
                     KvTierJob     *tier_job);

  /*< private >*/
  gpointer _reserved[4];
};

KvExampleTier   *kv_example_tier_new          (KvHostBuffer  *primary);
guint            kv_example_tier_get_n_stored (KvExampleTier *self);
gboolean         kv_example_tier_contains     (KvExampleTier *self,
                                               KvKey         *key);

G_END_DECLS
