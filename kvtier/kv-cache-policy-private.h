/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-cache-policy.h"

G_BEGIN_DECLS

/* The protected keys of one evict() call. A handful of keys (the usual
 * prepare_store batch) is scanned linearly; more are put in a hash set. */
typedef struct
{
  KvKey * const *keys;
  guint          n_keys;
  GHashTable    *set;
} KvProtectedSet;

G_GNUC_INTERNAL
void     kv_protected_set_init     (KvProtectedSet *set,
                                    KvKey * const  *keys,
                                    guint           n_keys);
G_GNUC_INTERNAL
gboolean kv_protected_set_contains (const KvProtectedSet *set,
                                    const KvKey          *key);
G_GNUC_INTERNAL
void     kv_protected_set_clear    (KvProtectedSet *set);

G_END_DECLS
