/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-clock.h"
#include "kv-fleet-match.h"
#include "kv-key.h"
#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KV_FLEET_INDEX_MAX_NODES:
 *
 * The most nodes one [class@Kv.FleetIndex] tracks.
 */
#define KV_FLEET_INDEX_MAX_NODES 4096

#define KV_TYPE_FLEET_INDEX (kv_fleet_index_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvFleetIndex, kv_fleet_index, KV, FLEET_INDEX, GObject)

KVTIER_AVAILABLE_IN_ALL
KvFleetIndex    *kv_fleet_index_new               (void);

KVTIER_AVAILABLE_IN_ALL
guint            kv_fleet_index_add_node          (KvFleetIndex     *self,
                                                   const char       *name);
KVTIER_AVAILABLE_IN_ALL
gint             kv_fleet_index_find_node         (KvFleetIndex     *self,
                                                   const char       *name);
KVTIER_AVAILABLE_IN_ALL
guint            kv_fleet_index_get_n_nodes       (KvFleetIndex     *self);
KVTIER_AVAILABLE_IN_ALL
char            *kv_fleet_index_dup_node_name     (KvFleetIndex     *self,
                                                   guint             node);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_fleet_index_is_node_alive     (KvFleetIndex     *self,
                                                   guint             node);
KVTIER_AVAILABLE_IN_ALL
guint64          kv_fleet_index_get_node_n_keys   (KvFleetIndex     *self,
                                                   guint             node);
KVTIER_AVAILABLE_IN_ALL
void             kv_fleet_index_forget_node       (KvFleetIndex     *self,
                                                   guint             node);

KVTIER_AVAILABLE_IN_ALL
gboolean         kv_fleet_index_update            (KvFleetIndex     *self,
                                                   guint             node,
                                                   KvKey            *key,
                                                   KvFleetLocation   locations);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_fleet_index_update_many       (KvFleetIndex     *self,
                                                   guint             node,
                                                   KvKey * const    *keys,
                                                   const guint8     *locations,
                                                   guint             n_keys);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_fleet_index_begin_snapshot    (KvFleetIndex     *self,
                                                   guint             node);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_fleet_index_end_snapshot      (KvFleetIndex     *self,
                                                   guint             node);
KVTIER_AVAILABLE_IN_ALL
gboolean         kv_fleet_index_heartbeat         (KvFleetIndex     *self,
                                                   guint             node);
KVTIER_AVAILABLE_IN_ALL
guint            kv_fleet_index_expire            (KvFleetIndex     *self);

KVTIER_AVAILABLE_IN_ALL
KvFleetLocation  kv_fleet_index_get_locations     (KvFleetIndex     *self,
                                                   guint             node,
                                                   KvKey            *key);
KVTIER_AVAILABLE_IN_ALL
KvFleetMatch    *kv_fleet_index_lookup            (KvFleetIndex     *self,
                                                   KvKey * const    *keys,
                                                   guint             n_keys);
KVTIER_AVAILABLE_IN_ALL
guint            kv_fleet_index_lookup_into       (KvFleetIndex     *self,
                                                   KvKey * const    *keys,
                                                   guint             n_keys,
                                                   KvFleetNodeMatch *matches,
                                                   guint             max_matches);

KVTIER_AVAILABLE_IN_ALL
guint64          kv_fleet_index_get_n_keys        (KvFleetIndex     *self);
KVTIER_AVAILABLE_IN_ALL
guint64          kv_fleet_index_get_n_forgotten   (KvFleetIndex     *self);
KVTIER_AVAILABLE_IN_ALL
guint64          kv_fleet_index_get_memory_size   (KvFleetIndex     *self);
KVTIER_AVAILABLE_IN_ALL
guint            kv_fleet_index_get_node_timeout_ms (KvFleetIndex   *self);
KVTIER_AVAILABLE_IN_ALL
void             kv_fleet_index_set_node_timeout_ms (KvFleetIndex   *self,
                                                     guint           timeout_ms);

G_END_DECLS
