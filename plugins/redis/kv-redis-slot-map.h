/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>
#include <hiredis/hiredis.h>

G_BEGIN_DECLS

/* Redis Cluster's key space: 16384 hash slots, each served by one master
 * and its replicas. */
#define KV_REDIS_N_SLOTS 16384
/* The most nodes a CLUSTER SLOTS reply may name: a reply is a network
 * peer's word, and every name becomes a connection. */
#define KV_REDIS_MAX_NODES 1024

guint16 kv_redis_key_slot (const char *key,
                           gsize       len);

/* Which node serves each slot: indexes into the map's address list, the
 * master first; -1 where no node serves the slot. */
typedef struct
{
  GPtrArray *addresses;                    /* "host:port", owned */
  gint16     master[KV_REDIS_N_SLOTS];
  gint16     replica[KV_REDIS_N_SLOTS];    /* one replica, or -1 */
} KvRedisSlotMap;

KvRedisSlotMap *kv_redis_slot_map_new        (void);
void            kv_redis_slot_map_free       (KvRedisSlotMap   *map);
KvRedisSlotMap *kv_redis_slot_map_parse      (const redisReply *reply,
                                              const char       *default_host,
                                              GError          **error);
gint            kv_redis_slot_map_add_address (KvRedisSlotMap *map,
                                               const char     *address);

gboolean        kv_redis_parse_address       (const char  *address,
                                              char       **host,
                                              guint16     *port,
                                              GError     **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvRedisSlotMap, kv_redis_slot_map_free)

G_END_DECLS
