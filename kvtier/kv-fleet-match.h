/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KvFleetLocation:
 * @KV_FLEET_LOCATION_NONE: nowhere on the node.
 * @KV_FLEET_LOCATION_DEVICE: in the engine's device memory (the GPU prefix
 *   cache).
 * @KV_FLEET_LOCATION_PRIMARY: in the node's primary tier (host memory).
 * @KV_FLEET_LOCATION_DISK: in a secondary tier on the node itself (a disk,
 *   or memory that is not the primary tier).
 * @KV_FLEET_LOCATION_REMOTE: in a secondary tier across the network that
 *   the node reads (a Redis cluster, an object store).
 *
 * Where a node holds a chunk. A chunk may be in several places at once;
 * the lowest bit set is the fastest to reach.
 */
typedef enum /*< flags >*/ {
  KV_FLEET_LOCATION_NONE = 0,
  KV_FLEET_LOCATION_DEVICE = 1 << 0,
  KV_FLEET_LOCATION_PRIMARY = 1 << 1,
  KV_FLEET_LOCATION_DISK = 1 << 2,
  KV_FLEET_LOCATION_REMOTE = 1 << 3,
} KvFleetLocation;

/**
 * KV_FLEET_N_LOCATIONS:
 *
 * The number of places in [flags@Kv.FleetLocation] (without
 * %KV_FLEET_LOCATION_NONE).
 */
#define KV_FLEET_N_LOCATIONS 4

/**
 * KvFleetNodeMatch:
 * @node: the node's id in the index
 * @prefix: how many leading chunks of the request the node holds
 * @n_device: chunks of the prefix whose fastest place is the device
 * @n_primary: chunks of the prefix whose fastest place is the primary tier
 * @n_disk: chunks of the prefix whose fastest place is a local tier
 * @n_remote: chunks of the prefix held only in a remote tier
 *
 * One node's answer to a [method@Kv.FleetIndex.lookup].
 */
typedef struct
{
  guint node;
  guint prefix;
  guint n_device;
  guint n_primary;
  guint n_disk;
  guint n_remote;
} KvFleetNodeMatch;

#define KV_TYPE_FLEET_MATCH (kv_fleet_match_get_type ())

typedef struct _KvFleetMatch KvFleetMatch;

KVTIER_AVAILABLE_IN_ALL
GType             kv_fleet_match_get_type        (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvFleetMatch     *kv_fleet_match_new             (guint                   n_chunks,
                                                  const KvFleetNodeMatch *matches,
                                                  guint                   n_matches);
KVTIER_AVAILABLE_IN_ALL
KvFleetMatch     *kv_fleet_match_ref             (KvFleetMatch           *self);
KVTIER_AVAILABLE_IN_ALL
void              kv_fleet_match_unref           (KvFleetMatch           *self);
KVTIER_AVAILABLE_IN_ALL
guint             kv_fleet_match_get_n_chunks    (const KvFleetMatch     *self);
KVTIER_AVAILABLE_IN_ALL
guint             kv_fleet_match_get_n_nodes     (const KvFleetMatch     *self);
KVTIER_AVAILABLE_IN_ALL
const KvFleetNodeMatch *kv_fleet_match_get_match (const KvFleetMatch     *self,
                                                  guint                   index);
KVTIER_AVAILABLE_IN_ALL
guint             kv_fleet_match_get_node        (const KvFleetMatch     *self,
                                                  guint                   index);
KVTIER_AVAILABLE_IN_ALL
guint             kv_fleet_match_get_prefix      (const KvFleetMatch     *self,
                                                  guint                   index);
KVTIER_AVAILABLE_IN_ALL
guint             kv_fleet_match_get_n_at        (const KvFleetMatch     *self,
                                                  guint                   index,
                                                  KvFleetLocation         location);
KVTIER_AVAILABLE_IN_ALL
guint             kv_fleet_match_get_prefix_of   (const KvFleetMatch     *self,
                                                  guint                   node);
KVTIER_AVAILABLE_IN_ALL
guint             kv_fleet_match_get_longest     (const KvFleetMatch     *self,
                                                  guint                  *out_node);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvFleetMatch, kv_fleet_match_unref)

G_END_DECLS
