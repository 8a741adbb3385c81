/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-types.h"

G_BEGIN_DECLS

#define KV_TYPE_TIER_FILTER (kv_tier_filter_get_type ())

/**
 * KV_LOAD_TIERS_KEY:
 *
 * The key of a request's transfer parameters that restricts which secondary
 * tiers it may load from (see [func@Kv.TierFilter.parse_variant]).
 */
#define KV_LOAD_TIERS_KEY "kv_load_tiers"

typedef struct _KvTierFilter KvTierFilter;

KVTIER_AVAILABLE_IN_ALL
GType         kv_tier_filter_get_type      (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvTierFilter *kv_tier_filter_get_all       (void);
KVTIER_AVAILABLE_IN_ALL
KvTierFilter *kv_tier_filter_new           (void);
KVTIER_AVAILABLE_IN_ALL
void          kv_tier_filter_add_matcher   (KvTierFilter *self,
                                            KvMedium      medium,
                                            KvLocality    locality);
KVTIER_AVAILABLE_IN_ALL
guint         kv_tier_filter_get_n_matchers (const KvTierFilter *self);
KVTIER_AVAILABLE_IN_ALL
gboolean      kv_tier_filter_is_all        (const KvTierFilter *self);
KVTIER_AVAILABLE_IN_ALL
gboolean      kv_tier_filter_allows        (const KvTierFilter *self,
                                            KvMedium      medium,
                                            KvLocality    locality);
KVTIER_AVAILABLE_IN_ALL
KvTierFilter *kv_tier_filter_parse_variant (GVariant     *value);
KVTIER_AVAILABLE_IN_ALL
KvTierFilter *kv_tier_filter_parse_json    (const char   *json,
                                            GError      **error);
KVTIER_AVAILABLE_IN_ALL
KvTierFilter *kv_tier_filter_ref           (KvTierFilter *self);
KVTIER_AVAILABLE_IN_ALL
void          kv_tier_filter_unref         (KvTierFilter *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvTierFilter, kv_tier_filter_unref)

G_END_DECLS
