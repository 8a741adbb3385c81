/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"
#include "kv-request.h"

G_BEGIN_DECLS

/**
 * KvChunkSource:
 * @KV_CHUNK_SOURCE_DEVICE: the chunk was on the device already (the
 *   engine's prefix cache).
 * @KV_CHUNK_SOURCE_PRIMARY: the primary tier held the chunk (ready, or on
 *   its way in for another request).
 * @KV_CHUNK_SOURCE_TIER: the first secondary tier; secondary tier `t` is
 *   `KV_CHUNK_SOURCE_TIER + t`, the tier a promotion for this request
 *   started from.
 *
 * Where a request found a chunk of its prompt, as a source index of
 * [struct@Kv.PrefixLookup]: 0 the device, 1 the primary tier, 2 + t the
 * secondary tier t of the manager.
 */
typedef enum {
  KV_CHUNK_SOURCE_DEVICE,
  KV_CHUNK_SOURCE_PRIMARY,
  KV_CHUNK_SOURCE_TIER,
} KvChunkSource;

#define KV_TYPE_PREFIX_LOOKUP (kv_prefix_lookup_get_type ())

typedef struct _KvPrefixLookup KvPrefixLookup;

KVTIER_AVAILABLE_IN_ALL
GType           kv_prefix_lookup_get_type      (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvPrefixLookup *kv_prefix_lookup_ref           (KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
void            kv_prefix_lookup_unref         (KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
KvRequest      *kv_prefix_lookup_get_request   (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
guint           kv_prefix_lookup_get_n_chunks  (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
KvKey * const  *kv_prefix_lookup_get_keys      (const KvPrefixLookup *self,
                                                guint                *n_keys);
KVTIER_AVAILABLE_IN_ALL
guint           kv_prefix_lookup_get_n_device  (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
guint           kv_prefix_lookup_get_n_hits    (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
guint           kv_prefix_lookup_get_n_ready   (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
guint           kv_prefix_lookup_get_n_pending (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
gboolean        kv_prefix_lookup_get_retry     (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
gboolean        kv_prefix_lookup_is_complete   (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
guint           kv_prefix_lookup_get_n_sources (const KvPrefixLookup *self);
KVTIER_AVAILABLE_IN_ALL
guint           kv_prefix_lookup_get_n_from    (const KvPrefixLookup *self,
                                                guint                 source);
KVTIER_AVAILABLE_IN_ALL
gint            kv_prefix_lookup_get_source    (const KvPrefixLookup *self,
                                                guint                 index);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvPrefixLookup, kv_prefix_lookup_unref)

G_END_DECLS
