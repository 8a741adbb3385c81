/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-config-document-private.h"

G_BEGIN_DECLS

/* Which keys a section accepts and what each sets. Tier and device
 * sections take the configurable properties of their class; [primary]
 * takes those of KvHostBuffer and KvPrimaryTier, under the names the
 * configuration has always used, plus `size` and `policy`. */

/* Choices that are not GObject properties of any class: private enums so
 * that they parse, print and list like every other enum. */
enum { KV_CONFIG_POLICY_LRU, KV_CONFIG_POLICY_ARC };
enum { KV_CONFIG_BACKPRESSURE_NONE, KV_CONFIG_BACKPRESSURE_EMA };
enum { KV_CONFIG_BP_POLICY_THROTTLED, KV_CONFIG_BP_POLICY_DROP };

#define KV_CONFIG_BACKPRESSURE_PREFIX "backpressure-"

G_GNUC_INTERNAL
GParamSpec *kv_config_schema_resolve_key    (const KvConfigSection  *section,
                                             const char             *key,
                                             KvConfigTarget         *out_target,
                                             GType                  *out_owner);
G_GNUC_INTERNAL
char       *kv_config_schema_accepted_keys  (const KvConfigSection  *section);
G_GNUC_INTERNAL
GParamSpec *kv_config_schema_primary_pspec  (const char             *key);

G_END_DECLS
