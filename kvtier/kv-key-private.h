/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-key.h"

G_BEGIN_DECLS

/* The layout of a key, for the library's per-key loops (the fleet index's
 * prefix walk) that read a key's fields without a call each. */
struct _KvKey
{
  gatomicrefcount ref_count;
  guint32 group;
  guint hash;
  gsize hash_len;
  /* hash_len bytes of block hash, then be32(group): the OffloadKey, so it
   * can be hashed and exported without copying. */
  guint8 data[];
};

G_END_DECLS
