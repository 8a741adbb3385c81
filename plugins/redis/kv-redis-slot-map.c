/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-redis-slot-map.h"

#include <kvtier.h>
#include <string.h>

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis
 * Cluster hashes keys; a byte at a time from a table, since every chunk a
 * cluster tier looks up, loads or stores hashes its key. */
static const guint16 *
crc16_table (void)
{
  static guint16 table[256];
  static gsize ready = 0;

  if (g_once_init_enter (&ready))
    {
      for (guint i = 0; i < 256; i++)
        {
          guint16 crc = (guint16) (i << 8);

          for (guint b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (guint16) ((crc << 1) ^ 0x1021) : (guint16) (crc << 1);
          table[i] = crc;
        }
      g_once_init_leave (&ready, 1);
    }
  return table;
}

static guint16
crc16 (const guint8 *data,
       gsize         len)
{
  const guint16 *table = crc16_table ();
  guint16 crc = 0;

  for (gsize i = 0; i < len; i++)
    crc = (guint16) ((crc << 8) ^ table[(crc >> 8) ^ data[i]]);
  return crc;
}

/* The slot of @key: only the part between the first `{` and the next `}`
 * is hashed when that part is not empty (a hash tag), as Redis does. */
guint16
kv_redis_key_slot (const char *key,
                   gsize       len)
{
  const char *open = memchr (key, '{', len);

  if (open != NULL)
    {
      gsize rest = len - (open - key) - 1;
      const char *close = memchr (open + 1, '}', rest);

      if (close != NULL && close > open + 1)
        return crc16 ((const guint8 *) open + 1, close - open - 1) % KV_REDIS_N_SLOTS;
    }
  return crc16 ((const guint8 *) key, len) % KV_REDIS_N_SLOTS;
}

KvRedisSlotMap *
kv_redis_slot_map_new (void)
{
  KvRedisSlotMap *map = g_new (KvRedisSlotMap, 1);

  map->addresses = g_ptr_array_new_with_free_func (g_free);
  for (guint s = 0; s < KV_REDIS_N_SLOTS; s++)
    map->master[s] = map->replica[s] = -1;
  return map;
}

void
kv_redis_slot_map_free (KvRedisSlotMap *map)
{
  if (map == NULL)
    return;
  g_ptr_array_unref (map->addresses);
  g_free (map);
}

/* The index of @address in the map, added if new; -1 past
 * KV_REDIS_MAX_NODES. */
gint
kv_redis_slot_map_add_address (KvRedisSlotMap *map,
                               const char     *address)
{
  for (guint i = 0; i < map->addresses->len; i++)
    if (g_str_equal (map->addresses->pdata[i], address))
      return i;
  if (map->addresses->len >= KV_REDIS_MAX_NODES)
    return -1;
  g_ptr_array_add (map->addresses, g_strdup (address));
  return map->addresses->len - 1;
}

/* "host:port" or "[v6]:port" into its parts. */
gboolean
kv_redis_parse_address (const char  *address,
                        char       **host,
                        guint16     *port,
                        GError     **error)
{
  const char *colon = strrchr (address, ':');
  guint64 value = 0;

  if (colon == NULL || colon == address ||
      !g_ascii_string_to_unsigned (colon + 1, 10, 1, 65535, &value, NULL))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Invalid redis server address ‘%s’ (expected host:port)", address);
      return FALSE;
    }
  if (address[0] == '[' && colon[-1] == ']')
    *host = g_strndup (address + 1, colon - address - 2);
  else
    *host = g_strndup (address, colon - address);
  *port = (guint16) value;
  return TRUE;
}

/* "host:port" of a node entry of CLUSTER SLOTS ([host, port, id, ...]);
 * an empty host means the node that answered (@default_host). */
static char *
node_address (const redisReply *node,
              const char       *default_host)
{
  const redisReply *host, *port;

  if (node->type != REDIS_REPLY_ARRAY || node->elements < 2)
    return NULL;
  host = node->element[0];
  port = node->element[1];
  if (host->type != REDIS_REPLY_STRING || host->len > 255 || memchr (host->str, '\0', host->len) ||
      port->type != REDIS_REPLY_INTEGER || port->integer <= 0 || port->integer > 65535)
    return NULL;
  if (host->len == 0 || (host->len == 1 && host->str[0] == '?'))
    return g_strdup_printf ("%s:%lld", default_host, port->integer);
  if (memchr (host->str, ':', host->len) != NULL)
    return g_strdup_printf ("[%s]:%lld", host->str, port->integer);
  return g_strdup_printf ("%s:%lld", host->str, port->integer);
}

/* Parses a CLUSTER SLOTS reply: [[start, end, master, replica...]...]. */
KvRedisSlotMap *
kv_redis_slot_map_parse (const redisReply *reply,
                         const char       *default_host,
                         GError          **error)
{
  g_autoptr(KvRedisSlotMap) map = kv_redis_slot_map_new ();

  if (reply->type != REDIS_REPLY_ARRAY)
    goto bad;
  for (gsize r = 0; r < reply->elements; r++)
    {
      const redisReply *range = reply->element[r];
      g_autofree char *master = NULL;
      g_autofree char *replica = NULL;
      gint m, rep = -1;

      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
          range->element[0]->type != REDIS_REPLY_INTEGER ||
          range->element[1]->type != REDIS_REPLY_INTEGER ||
          range->element[0]->integer < 0 ||
          range->element[1]->integer >= KV_REDIS_N_SLOTS ||
          range->element[0]->integer > range->element[1]->integer)
        goto bad;
      master = node_address (range->element[2], default_host);
      if (master == NULL || (m = kv_redis_slot_map_add_address (map, master)) < 0)
        goto bad;
      if (range->elements > 3)
        {
          replica = node_address (range->element[3], default_host);
          if (replica == NULL || (rep = kv_redis_slot_map_add_address (map, replica)) < 0)
            goto bad;
        }
      for (long long s = range->element[0]->integer; s <= range->element[1]->integer; s++)
        {
          map->master[s] = (gint16) m;
          map->replica[s] = (gint16) rep;
        }
    }
  return g_steal_pointer (&map);

bad:
  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
               "Malformed CLUSTER SLOTS reply from redis server %s", default_host);
  return NULL;
}
