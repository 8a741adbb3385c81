/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

#define KV_TYPE_EXAMPLE_TIER (kv_example_tier_get_type ())

G_DECLARE_DERIVABLE_TYPE (KvExampleTier, kv_example_tier, KV, EXAMPLE_TIER, KvSecondaryTier)

/**
 * KvExampleTierClass:
 * @parent_class: the parent class
 * @run_store: copies the job's primary slots into the store and returns
 *   the job's result; runs on a worker thread.
 * @run_load: copies stored bytes into the job's primary slots and returns
 *   the job's result; runs on a worker thread.
 *
 * Subclasses may wrap the two worker-thread hooks (to delay, fail or
 * trim jobs) and chain up to do the copies.
 */
struct _KvExampleTierClass
{
  KvSecondaryTierClass parent_class;

  KvJobResult *(*run_store) (KvExampleTier *self,
                             KvTransferJob *job);
  KvJobResult *(*run_load)  (KvExampleTier *self,
                             KvTransferJob *job);

  /*< private >*/
  gpointer _reserved[4];
};

KvExampleTier   *kv_example_tier_new          (KvHostBuffer  *primary);
guint            kv_example_tier_get_n_stored (KvExampleTier *self);
gboolean         kv_example_tier_contains     (KvExampleTier *self,
                                               KvKey         *key);

G_END_DECLS
