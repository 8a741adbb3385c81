/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-redis-tier.h"

#include <stdlib.h>
#include <string.h>

#include "kv-chunk-format.h"
#include "kv-chunk-name.h"
#include "kv-key-index.h"
#include "kv-log-limiter.h"
#include "kv-redis-connection.h"
#include "kv-redis-slot-map.h"

#define DEFAULT_SERVERS "127.0.0.1:6379"
#define DEFAULT_NODE_INFLIGHT_BYTES (G_GUINT64_CONSTANT (256) << 20)
#define DEFAULT_CONNECT_TIMEOUT_MS 2000
/* 16 MiB of index when full (16 bytes a key), as the s3 tier's */
#define DEFAULT_INDEX_MAX_KEYS (1u << 20)
#define MAX_REDIRECTS 5
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
#define REFRESH_MIN_INTERVAL_US (100 * G_TIME_SPAN_MILLISECOND)
#define MAP_REFRESH_INTERVAL_US (10 * G_TIME_SPAN_SECOND)
/* How long a lookup batch waits for its EXISTS replies when the tier has
 * no deadline; past it, the unanswered keys are misses. */
#define LOOKUP_WAIT_DEFAULT_MS 2000

typedef enum {
  OP_LOAD,
  OP_STORE,
  OP_EXISTS,
  OP_DEL,
  OP_PING,
  OP_ASKING,
  OP_CLUSTER_SLOTS,
} OpKind;

typedef struct _Node Node;
typedef struct _RedisJob RedisJob;
typedef struct _LookupBatch LookupBatch;

/* One command of the tier: a key of a job, a lookup, a DEL of a corrupt
 * value, a probe's PING, a map refresh. The connection op comes first. */
typedef struct
{
  KvRedisOp     op;
  KvRedisTier  *tier;
  OpKind        kind;
  RedisJob     *job;        /* loads and stores */
  LookupBatch  *batch;      /* EXISTS */
  guint         index;      /* in the job or batch */
  KvKey        *key;
  char         *redis_key;
  guint16       slot;
  Node         *node;       /* where it was sent, while in flight */
  Node         *ask_node;   /* an ASK redirect's target */
  Node         *waiting_on; /* the node whose budget it waits for */
  gboolean      to_replica;
  guint         attempts;
  gsize         bytes;      /* counted against the node's budget */
  guint8       *header;     /* KV_CHUNK_HEADER_SIZE, loads and stores */
  guint32       primary_slot;
  gboolean      has_payload_checksum; /* stores: carried by the primary slot */
  guint64       payload_checksum;
  KvChunkHasher *payload_hasher;      /* loads: the payload's, as it lands */
  char          suffix[64];
  guint64       probe_id;
  gboolean      healthy;
} KeyOp;

struct _Node
{
  KvRedisTier       *tier;
  char              *address;
  char              *host;
  guint16            port;
  gboolean           replica;
  KvRedisConnection *connection;
  KvCircuitBreaker  *breaker;
  gint64             retry_at;
  guint              backoff_ms;
  guint64            inflight_bytes;
  GQueue             waiting;      /* KeyOp over the budget */
  KvRedisConnection *lost;         /* the closed connection backed off for */
  KvLogLimiter       link;         /* reachable or not, and its messages */
};

/* A load or store job: the tier's own part of it, the commands. What it
 * reports (the state of each key, time, bytes, the stored event) is its
 * KvTierJob's. Everything but refs and cancelled runs on the I/O thread. */
struct _RedisJob
{
  KvRedisTier     *tier;
  KvTierJob       *tier_job;
  KvTransferJob   *job;
  gboolean         is_load;
  guint            n_keys;
  KeyOp           *ops;
  guint            n_outstanding;
  gint64           first_start;     /* the first command's start */
  gint             cancelled;       /* (atomic) the deadline passed */
  guint            refs;            /* tier lock */
};

/* EXISTS for the keys of one lookup batch; the worker thread waits for
 * it, and may give up first. Each holder has its reference: the worker
 * (until it stops waiting), lookup_dispatch() (while it walks the ops:
 * they may all complete inside it, a node being down), and the ops
 * outstanding (until the last completes). */
struct _LookupBatch
{
  KvRedisTier *tier;
  guint        n_keys;
  KeyOp       *ops;
  gboolean    *results;
  guint        n_outstanding;   /* tier lock */
  gint         refs;            /* (atomic) */
};

struct _KvRedisTier
{
  KvSecondaryTier  parent_instance;

  /* construct-only properties */
  char            *servers;
  gboolean         cluster;
  char            *username;
  char            *password;
  guint            database;
  char            *namespace_;
  guint64          ttl_ms;
  gboolean         tls;
  char            *tls_ca_file;
  gboolean         read_from_replicas;
  guint64          node_inflight_bytes;
  guint            connect_timeout_ms;
  guint            index_max_keys;
  gint             n_unfinished_io;  /* connects and closes still running */

  /* set up by init(), then read-only */
  gboolean         initialized;
  KvHostBuffer    *primary;
  gsize            block_size;
  guint            n_slots;
  guint8           namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  char            *key_prefix;      /* "kvtier:<namespace digest hex>:" */
  gsize            key_prefix_len;
  GPtrArray       *seeds;           /* "host:port" */
  GTlsDatabase    *tls_database;
  GMainContext    *context;
  GMainLoop       *loop;
  GThread         *thread;
  /* the keys this tier knows are stored (its own lock, any thread); NULL
   * when index-max-keys is 0 or ttl-ms is set (keys expire by themselves) */
  KvKeyIndex      *index;

  /* I/O thread only */
  GHashTable      *nodes;           /* address → Node */
  KvRedisSlotMap  *map;             /* cluster */
  Node            *standalone;
  gboolean         closing;         /* close_all() ran: no more outages */
  KeyOp           *refresh;         /* a CLUSTER SLOTS in flight */
  GSource         *refresh_timer;
  GSource         *stall_timer;
  gint64           last_refresh;
  guint            next_seed;

  /* tier lock */
  GMutex           lock;
  GCond            cond;
  guint            n_live_jobs;
  guint            n_io_ops;        /* lookups, DELs, probes, refreshes in flight */
  gboolean         shut_down;
  gboolean         started;         /* init's first contact ended */
  GError          *start_error;

  KvCounterSet    *counters;        /* KvRedisCounter order, reported by the base class */
  gint             n_servers_down;  /* (atomic) nodes whose link is down */
};

enum {
  PROP_0,
  PROP_SERVERS,
  PROP_CLUSTER,
  PROP_USERNAME,
  PROP_PASSWORD,
  PROP_DATABASE,
  PROP_NAMESPACE,
  PROP_TTL_MS,
  PROP_TLS,
  PROP_TLS_CA_FILE,
  PROP_READ_FROM_REPLICAS,
  PROP_NODE_INFLIGHT_BYTES,
  PROP_CONNECT_TIMEOUT_MS,
  PROP_INDEX_MAX_KEYS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static const char *const counter_names[KV_REDIS_N_COUNTERS] = {
  "stored_chunks", "skipped_chunks", "loaded_chunks", "missing_chunks", "corrupt_chunks",
  "store_failures", "load_failures", "node_errors", "error_replies", "moved_redirects",
  "ask_redirects", "map_refreshes", "bytes_written", "bytes_read", "server_outages",
  "node_breaker_openings", "index_hits", "index_stale_keys",
};

/* Their families (doc/metrics.md) and help, in the same order. */
static const struct
{
  const char *name;
  const char *doc;
} counter_info[KV_REDIS_N_COUNTERS] = {
  { "kvtier_redis_stored_chunks", "Chunks stored (SET)" },
  { "kvtier_redis_skipped_chunks", "Chunks a store skipped because the key existed (SET NX)" },
  { "kvtier_redis_loaded_chunks", "Chunks loaded and verified" },
  { "kvtier_redis_missing_chunks", "Chunks a load found no value for (evicted, expired)" },
  { "kvtier_redis_corrupt_chunks", "Values that failed their check, deleted" },
  { "kvtier_redis_store_failures", "Chunks a store failed to write" },
  { "kvtier_redis_load_failures", "Chunks a load failed to read" },
  { "kvtier_redis_node_errors",
    "Commands lost with their connection or refused by a server that is down" },
  { "kvtier_redis_error_replies", "Error replies other than redirects" },
  { "kvtier_redis_moved_redirects", "MOVED redirects (cluster)" },
  { "kvtier_redis_ask_redirects", "ASK redirects (cluster)" },
  { "kvtier_redis_map_refreshes", "Cluster slot map refreshes" },
  { "kvtier_redis_written_bytes", "Payload bytes stored" },
  { "kvtier_redis_read_bytes", "Payload bytes loaded" },
  { "kvtier_redis_server_outages",
    "Times a server became unreachable: a connection lost or a first connect failed (each is "
    "logged)" },
  { "kvtier_redis_node_breaker_openings",
    "Times the circuit breaker of one server opened (each is logged)" },
  { "kvtier_redis_index_hits", "Lookups answered from the index of known chunks, without an EXISTS" },
  { "kvtier_redis_index_stale_keys",
    "Indexed chunks a load found missing (evicted, or deleted by others)" },
};

#define REDIS_SERVERS_DOWN "kvtier_redis_servers_down"
#define REDIS_INDEX_KEYS "kvtier_redis_index_keys"

static void kv_redis_tier_initable_iface_init (GInitableIface *iface);
static void kv_redis_tier_configurable_iface_init (KvConfigurableInterface *iface);
static void dispatch (KvRedisTier *self, KeyOp *kop);
static void schedule_refresh (KvRedisTier *self);
static void arm_refresh_timer (KvRedisTier *self, gint64 due);

/**
 * KvRedisTier:
 *
 * The redis tier, registered as `redis`: one chunk per key of a Redis
 * server or a Redis Cluster, shared by every process that names the same
 * servers and namespace.
 *
 * A key is `kvtier:<namespace digest>:<hex block hash>_g<group>`, its value
 * the kvtier chunk record (the fs tier's 4096-byte header, then the
 * payload), checked on every load, payload checksum included: a value
 * that is short, long, damaged, or written for another key or namespace
 * is deleted, counted, and fails the load. Stores are `SET … NX` (a key
 * already there is skipped) with an optional `PX` ttl; loads are `GET`s
 * whose value is read from the socket straight into the primary slot;
 * lookups of the keys the tier knows are stored (its index: stored or
 * found by this tier, [property@KvRedisTier:index-max-keys] of them) are
 * a HIT at once, and the others pipelined `EXISTS` off the owner thread
 * (#KvAsyncLookup: RETRY until known), as are all lookups while a server
 * is unreachable. A key that was evicted or deleted behind the tier's
 * back answers HIT until its load finds it missing (a miss for the
 * manager) and removes it from the index.
 *
 * Connections run on the tier's own I/O thread and main context (TCP or
 * TLS through GIO; commands and replies through hiredis). With
 * [property@KvRedisTier:cluster], the tier reads the slot map with
 * `CLUSTER SLOTS`, keeps a connection per node, follows `MOVED` (and
 * refreshes the map) and `ASK`, and each node has its own circuit breaker
 * and in-flight budget: a dead node fails its commands, its keys answer
 * MISS, and service comes back when the map names its replacement.
 * Redis's own eviction (`maxmemory-policy allkeys-lru`) bounds the tier:
 * an evicted key is a miss.
 *
 * Every vfunc runs on the owner thread and returns at once, except
 * construction, which connects once to check the servers and
 * credentials.
 */
G_DEFINE_FINAL_TYPE_WITH_CODE (KvRedisTier, kv_redis_tier, KV_TYPE_SECONDARY_TIER,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_redis_tier_initable_iface_init)
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                      kv_redis_tier_configurable_iface_init))

static void
count (KvRedisTier    *self,
       KvRedisCounter  counter,
       guint64         n)
{
  kv_counter_set_add (self->counters, counter, n);
}

/* Every lookup, load and store names its chunks (kv-chunk-name: a hex
 * table, not a printf per byte). */
static char *
redis_key (KvRedisTier *self,
           KvKey       *key)
{
  return kv_chunk_name_for_key (self->key_prefix, self->key_prefix_len, key);
}

/* ---- the index of known keys --------------------------------------------- */

/* A key is indexed when this tier's SET NX stored it or found it there, an
 * EXISTS found it or a load verified it, and forgotten when a load found
 * it missing or damaged (the tier deletes a damaged value): lookups of
 * indexed keys send no EXISTS. Where the key lives (which node, after
 * which failover) does not matter: its load goes where the map says. Any
 * thread (the index has its own lock, held for one probe). */
static void
index_add (KvRedisTier *self,
           KvKey       *key)
{
  if (self->index != NULL && key != NULL)
    kv_key_index_add (self->index, kv_key_index_digest (key));
}

static gboolean
index_remove (KvRedisTier *self,
              KvKey       *key)
{
  return self->index != NULL && key != NULL &&
         kv_key_index_remove (self->index, kv_key_index_digest (key));
}

/* ---- key ops ------------------------------------------------------------- */

/* Formats a command whose arguments are @argv (not a SET of a chunk). */
static void
key_op_format (KeyOp       *kop,
               int          argc,
               const char **argv)
{
  int len = redisFormatCommandArgv (&kop->op.command, argc, argv, NULL);

  g_assert (len > 0);
  kop->op.command_len = len;
}

static void
key_op_clear (KeyOp *kop)
{
  kv_redis_op_clear (&kop->op);
  g_clear_pointer (&kop->key, kv_key_unref);
  g_clear_pointer (&kop->redis_key, g_free);
  g_clear_pointer (&kop->header, g_free);
  g_clear_pointer (&kop->payload_hasher, kv_chunk_hasher_free);
}

/* ---- nodes --------------------------------------------------------------- */

static void
node_free (Node *node)
{
  if (node->connection != NULL)
    {
      g_signal_handlers_disconnect_by_data (node->connection, node);
      kv_redis_connection_close (node->connection, "the tier shut down");
      g_clear_object (&node->connection);
    }
  g_clear_object (&node->breaker);
  g_free (node->address);
  g_free (node->host);
  g_free (node);
}

/* "redis tier 1:redis, server 10.0.0.5:6379": what the node's breaker
 * messages name. */
static void
name_node_breaker (KvRedisTier *self,
                   Node        *node)
{
  g_autofree char *label = kv_secondary_tier_dup_metric_label (KV_SECONDARY_TIER (self));
  g_autofree char *name = g_strdup_printf ("redis tier %s, server %s", label, node->address);

  kv_circuit_breaker_set_name (node->breaker, name);
}

/* I/O thread: the tier got its label (added to a manager). */
static gboolean
rename_node_breakers (gpointer data)
{
  KvRedisTier *self = data;
  GHashTableIter iter;
  gpointer node;

  g_hash_table_iter_init (&iter, self->nodes);
  while (g_hash_table_iter_next (&iter, NULL, &node))
    name_node_breaker (self, node);
  return G_SOURCE_REMOVE;
}

/* Owner thread: ::notify::metric-label. */
static void
metric_label_changed (GObject    *object,
                      GParamSpec *pspec,
                      gpointer    data)
{
  KvRedisTier *self = KV_REDIS_TIER (object);
  gboolean running;

  g_mutex_lock (&self->lock);
  running = self->context != NULL && !self->shut_down;
  g_mutex_unlock (&self->lock);
  if (running)
    g_main_context_invoke_full (self->context, G_PRIORITY_DEFAULT, rename_node_breakers,
                                g_object_ref (self), g_object_unref);
}

static Node *
node_get (KvRedisTier *self,
          const char  *address,
          gboolean     replica)
{
  Node *node = g_hash_table_lookup (self->nodes, address);
  g_autofree char *host = NULL;
  guint16 port;

  if (node != NULL)
    return node;
  /* every address a server names (maps, redirects) becomes a node: bounded */
  if (g_hash_table_size (self->nodes) >= KV_REDIS_MAX_NODES ||
      !kv_redis_parse_address (address, &host, &port, NULL))
    return NULL;
  node = g_new0 (Node, 1);
  node->tier = self;
  node->address = g_strdup (address);
  node->host = g_steal_pointer (&host);
  node->port = port;
  node->replica = replica;
  node->breaker = kv_circuit_breaker_new (
    kv_circuit_breaker_get_failure_threshold (kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self))),
    kv_circuit_breaker_get_open_ms (kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self))),
    kv_secondary_tier_get_clock (KV_SECONDARY_TIER (self)));
  name_node_breaker (self, node);
  g_hash_table_insert (self->nodes, node->address, node);
  return node;
}

static void
connection_ready (KvRedisConnection *connection,
                  Node              *node)
{
  gboolean was_down = node->link.down;
  gint64 away_us = 0;

  node->backoff_ms = 0;
  if (was_down)
    g_atomic_int_add (&node->tier->n_servers_down, -1);
  if (kv_log_limiter_log_up (&node->link, g_get_monotonic_time (), &away_us))
    {
      g_autofree char *label = kv_secondary_tier_dup_metric_label (KV_SECONDARY_TIER (node->tier));

      g_message ("redis tier %s: server %s answers again after %.1f s", label, node->address,
                 away_us / 1e6);
    }
}

/* Once per connection: from its ::closed, or earlier from
 * node_connection(), when a completion of one of its ops (which fail
 * before ::closed is emitted) asks for the node again. */
static void
connection_closed (KvRedisConnection *connection,
                   Node              *node)
{
  KvRedisTier *self = node->tier;
  const GError *error = kv_redis_connection_get_error (connection);
  gboolean loss = !node->link.down;
  guint64 n_losses = 0;

  if (node->lost == connection)
    return;
  node->lost = connection;
  /* the tier closing its own connections is no outage of the server */
  if (self->closing)
    return;
  if (loss)
    {
      count (self, KV_REDIS_COUNTER_SERVER_OUTAGES, 1);
      g_atomic_int_inc (&self->n_servers_down);
    }
  if (kv_log_limiter_log_down (&node->link, loss, g_get_monotonic_time (), &n_losses))
    {
      g_autofree char *label = kv_secondary_tier_dup_metric_label (KV_SECONDARY_TIER (self));
      g_autofree char *more = n_losses > 1 ? g_strdup_printf (" (%" G_GUINT64_FORMAT " outages "
                                                              "in all since the last message)",
                                                              n_losses)
                                           : g_strdup ("");

      g_message ("redis tier %s: server %s unreachable: %s%s; its commands fail until it "
                 "answers again", label, node->address,
                 error != NULL ? error->message : "connection closed", more);
    }

  node->backoff_ms = node->backoff_ms == 0 ? BACKOFF_MIN_MS :
                     MIN (node->backoff_ms * 2, BACKOFF_MAX_MS);
  node->retry_at = g_get_monotonic_time () + node->backoff_ms * G_TIME_SPAN_MILLISECOND;
  if (self->cluster)
    schedule_refresh (self);
}

/* The node's connection, (re)connecting unless it failed within its
 * backoff; NULL while it backs off. */
static KvRedisConnection *
node_connection (KvRedisTier *self,
                 Node        *node)
{
  KvRedisConnectionConfig config = { 0 };

  if (node->connection != NULL &&
      kv_redis_connection_get_state (node->connection) != KV_REDIS_CONNECTION_CLOSED)
    return node->connection;
  /* closing, its ::closed not emitted yet: its backoff starts now, not
   * skipped by a reconnect at once */
  if (node->connection != NULL)
    connection_closed (node->connection, node);
  if (node->connection != NULL && g_get_monotonic_time () < node->retry_at)
    return NULL;
  if (node->connection != NULL)
    {
      g_signal_handlers_disconnect_by_data (node->connection, node);
      g_clear_object (&node->connection);
      node->lost = NULL;
    }
  config.username = self->username;
  config.password = self->password;
  config.database = self->cluster ? 0 : self->database;
  config.read_only = node->replica;
  config.tls = self->tls;
  config.tls_database = self->tls_database;
  config.connect_timeout_ms = self->connect_timeout_ms;
  config.n_unfinished_io = &self->n_unfinished_io;
  node->connection = kv_redis_connection_new (node->host, node->port, &config, self->context);
  g_signal_connect (node->connection, "ready", G_CALLBACK (connection_ready), node);
  g_signal_connect (node->connection, "closed", G_CALLBACK (connection_closed), node);
  return node->connection;
}

static void key_op_done (KvRedisOp *op, gpointer user_data);

/* Sends what the node's budget allows of its waiting ops. */
static void
node_pump (KvRedisTier *self,
           Node        *node)
{
  while (node->waiting.head != NULL)
    {
      KeyOp *kop = node->waiting.head->data;
      KvRedisConnection *connection;

      if (node->inflight_bytes > 0 && node->inflight_bytes + kop->bytes > self->node_inflight_bytes)
        return;
      g_queue_pop_head (&node->waiting);
      kop->waiting_on = NULL;
      connection = node_connection (self, node);
      node->inflight_bytes += kop->bytes;
      kop->node = node;
      if (connection == NULL)
        {
          kop->op.error = g_error_new (G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED,
                                       "Redis server %s is down (reconnecting)", node->address);
          key_op_done (&kop->op, kop);
          continue;
        }
      kv_redis_connection_send (connection, &kop->op);
    }
}

/* ---- the slot map -------------------------------------------------------- */

static void refresh_done (KvRedisOp *op, gpointer user_data);

static void
io_op_started (KvRedisTier *self)
{
  g_mutex_lock (&self->lock);
  self->n_io_ops++;
  g_mutex_unlock (&self->lock);
}

static void
io_op_ended (KvRedisTier *self)
{
  g_mutex_lock (&self->lock);
  self->n_io_ops--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* The address to ask for the map next: the seeds, then every node known,
 * in turn, so that a dead node is not asked forever. */
static const char *
next_refresh_address (KvRedisTier *self)
{
  guint n_known = self->map != NULL ? self->map->addresses->len : 0;
  guint n = self->seeds->len + n_known;
  guint i = self->next_seed++ % n;

  if (i < self->seeds->len)
    return self->seeds->pdata[i];
  return self->map->addresses->pdata[i - self->seeds->len];
}

static void
start_refresh (KvRedisTier *self)
{
  const char *argv[] = { "CLUSTER", "SLOTS" };
  KvRedisConnection *connection;
  KeyOp *kop;
  Node *node;
  guint tries = self->seeds->len + (self->map != NULL ? self->map->addresses->len : 0);

  if (self->refresh != NULL || self->shut_down)
    return;
  /* a node that is not backing off */
  do
    {
      node = node_get (self, next_refresh_address (self), FALSE);
      connection = node != NULL ? node_connection (self, node) : NULL;
    }
  while (connection == NULL && --tries > 0);
  if (connection == NULL)
    {
      /* every node backs off: ask when the first may be back */
      arm_refresh_timer (self, g_get_monotonic_time () + BACKOFF_MIN_MS * G_TIME_SPAN_MILLISECOND);
      return;
    }
  self->last_refresh = g_get_monotonic_time ();
  count (self, KV_REDIS_COUNTER_MAP_REFRESHES, 1);
  kop = g_new0 (KeyOp, 1);
  kop->tier = self;
  kop->kind = OP_CLUSTER_SLOTS;
  kop->node = node;
  key_op_format (kop, 2, argv);
  kop->op.kind = KV_REDIS_OP_COMMAND;
  kop->op.done = refresh_done;
  kop->op.user_data = kop;
  self->refresh = kop;
  io_op_started (self);
  kv_redis_connection_send (connection, &kop->op);
}

static gboolean
refresh_timer_fired (gpointer user_data)
{
  KvRedisTier *self = user_data;

  g_clear_pointer (&self->refresh_timer, g_source_unref);
  start_refresh (self);
  return G_SOURCE_REMOVE;
}

/* A refresh at @due (monotonic µs), unless one is in flight or due. Never
 * at once: callers are completions and connection callbacks, some inside
 * start_refresh() itself. */
static void
arm_refresh_timer (KvRedisTier *self,
                   gint64       due)
{
  gint64 now = g_get_monotonic_time ();

  if (self->refresh != NULL || self->refresh_timer != NULL || self->shut_down)
    return;
  self->refresh_timer = g_timeout_source_new (due > now ? (due - now) / 1000 + 1 : 0);
  g_source_set_callback (self->refresh_timer, refresh_timer_fired, self, NULL);
  g_source_attach (self->refresh_timer, self->context);
}

/* Reads the map again soon: now, or REFRESH_MIN_INTERVAL_US after the
 * last read, so that a storm of redirects or errors asks once. */
static void
schedule_refresh (KvRedisTier *self)
{
  arm_refresh_timer (self, self->last_refresh + REFRESH_MIN_INTERVAL_US);
}

static void
apply_map (KvRedisTier    *self,
           KvRedisSlotMap *map)
{
  g_autofree gboolean *is_master = g_new0 (gboolean, map->addresses->len);

  for (guint s = 0; s < KV_REDIS_N_SLOTS; s++)
    if (map->master[s] >= 0)
      is_master[map->master[s]] = TRUE;
  for (guint i = 0; i < map->addresses->len; i++)
    node_get (self, map->addresses->pdata[i], !is_master[i]);
  kv_redis_slot_map_free (self->map);
  self->map = map;
}

static void signal_started (KvRedisTier *self, const GError *error);

static void
refresh_done (KvRedisOp *op,
              gpointer   user_data)
{
  KeyOp *kop = user_data;
  KvRedisTier *self = kop->tier;
  g_autoptr(GError) error = NULL;
  KvRedisSlotMap *map = NULL;

  self->refresh = NULL;
  if (op->error != NULL)
    error = g_error_copy (op->error);
  else if (kv_redis_op_is_error (op, NULL))
    error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                         "Redis server %s refused CLUSTER SLOTS: %s",
                         kop->node->address, op->reply->str);
  else
    map = kv_redis_slot_map_parse (op->reply, kop->node->host, &error);

  key_op_clear (kop);
  g_free (kop);
  if (map != NULL)
    {
      apply_map (self, map);
      signal_started (self, NULL);
    }
  else
    {
      g_debug ("redis tier: no slot map: %s", error->message);
      /* At start, every seed is asked once before the tier gives up;
       * later, another node soon. */
      if (!self->started && self->next_seed < self->seeds->len)
        start_refresh (self);
      else
        {
          signal_started (self, error);
          schedule_refresh (self);
        }
    }
  io_op_ended (self);
}

/* ---- dispatching --------------------------------------------------------- */

/* The node for @kop: the ASK target, the standalone server, or the slot's
 * master (a replica for reads with read-from-replicas). */
static Node *
route (KvRedisTier *self,
       KeyOp       *kop)
{
  gint index;

  if (kop->ask_node != NULL)
    return kop->ask_node;
  if (!self->cluster)
    return self->standalone;
  if (self->map == NULL)
    return NULL;
  index = self->map->master[kop->slot];
  if (kop->to_replica && self->map->replica[kop->slot] >= 0)
    {
      Node *replica = node_get (self, self->map->addresses->pdata[self->map->replica[kop->slot]], TRUE);

      if (replica != NULL && kv_circuit_breaker_allows_requests (replica->breaker))
        return replica;
    }
  if (index < 0)
    return NULL;
  return node_get (self, self->map->addresses->pdata[index], FALSE);
}

static void send_asking (KvRedisTier *self, Node *node);

/* Sends @kop to its node, or completes it failed when there is none to
 * send it to. */
static void
dispatch (KvRedisTier *self,
          KeyOp       *kop)
{
  Node *node = route (self, kop);

  kop->node = NULL;
  if (self->shut_down)
    {
      kop->op.error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_CLOSED, "The redis tier shut down");
      key_op_done (&kop->op, kop);
      return;
    }
  if (node == NULL)
    {
      kop->op.error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                   "No redis cluster node serves slot %u", kop->slot);
      if (self->cluster)
        schedule_refresh (self);
      key_op_done (&kop->op, kop);
      return;
    }
  if (!kv_circuit_breaker_allows_requests (node->breaker) &&
      !kv_circuit_breaker_half_open (node->breaker))
    {
      kop->node = node;
      kop->op.error = g_error_new (G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED,
                                   "Redis server %s is failing (circuit breaker open)",
                                   node->address);
      node->inflight_bytes += kop->bytes;
      key_op_done (&kop->op, kop);
      return;
    }
  if (kop->ask_node != NULL)
    {
      /* ASKING flags the connection's next command: no queue between */
      KvRedisConnection *connection = node_connection (self, node);

      kop->node = node;
      node->inflight_bytes += kop->bytes;
      if (connection == NULL)
        {
          kop->op.error = g_error_new (G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED,
                                       "Redis server %s is down (reconnecting)", node->address);
          key_op_done (&kop->op, kop);
          return;
        }
      send_asking (self, node);
      kv_redis_connection_send (connection, &kop->op);
      return;
    }
  kop->waiting_on = node;
  g_queue_push_tail (&node->waiting, kop);
  node_pump (self, node);
}

/* The command of a key op, formatted again for each attempt (a redirect
 * sends it to another node). */
static void
format_key_op (KvRedisTier *self,
               KeyOp       *kop)
{
  switch (kop->kind)
    {
    case OP_LOAD:
      {
        const char *argv[] = { "GET", kop->redis_key };

        key_op_format (kop, 2, argv);
        kop->op.kind = KV_REDIS_OP_GET_INTO;
      }
      break;
    case OP_EXISTS:
      {
        const char *argv[] = { "EXISTS", kop->redis_key };

        key_op_format (kop, 2, argv);
        kop->op.kind = KV_REDIS_OP_COMMAND;
      }
      break;
    case OP_DEL:
      {
        const char *argv[] = { "DEL", kop->redis_key };

        key_op_format (kop, 2, argv);
        kop->op.kind = KV_REDIS_OP_COMMAND;
      }
      break;
    case OP_PING:
      {
        const char *argv[] = { "PING" };

        key_op_format (kop, 1, argv);
        kop->op.kind = KV_REDIS_OP_COMMAND;
      }
      break;
    case OP_STORE:
      {
        gsize value_len = KV_CHUNK_HEADER_SIZE + self->block_size;
        gsize key_len = strlen (kop->redis_key);
        char *prefix;

        /* The value goes out as header + slot bytes, never formatted into
         * one buffer: SET key <value> NX [PX ttl]. */
        prefix = g_strdup_printf ("*%u\r\n$3\r\nSET\r\n$%" G_GSIZE_FORMAT "\r\n%s\r\n$%" G_GSIZE_FORMAT "\r\n",
                                  self->ttl_ms > 0 ? 6 : 4, key_len, kop->redis_key, value_len);
        kop->op.command_len = strlen (prefix);
        /* freed by redisFreeCommand(), i.e. free(): GLib allocates with malloc */
        kop->op.command = prefix;
        kop->op.kind = KV_REDIS_OP_SET;
      }
      break;
    default:
      g_assert_not_reached ();
    }
}

/* ---- ASK ----------------------------------------------------------------- */

static void
asking_done (KvRedisOp *op,
             gpointer   user_data)
{
  KeyOp *kop = user_data;

  /* its command's reply says what happened */
  key_op_clear (kop);
  g_free (kop);
}

static void
send_asking (KvRedisTier *self,
             Node        *node)
{
  KvRedisConnection *connection = node_connection (self, node);
  const char *argv[] = { "ASKING" };
  KeyOp *kop;

  if (connection == NULL)
    return;
  kop = g_new0 (KeyOp, 1);
  kop->tier = self;
  kop->kind = OP_ASKING;
  key_op_format (kop, 1, argv);
  kop->op.kind = KV_REDIS_OP_COMMAND;
  kop->op.done = asking_done;
  kop->op.user_data = kop;
  kv_redis_connection_send (connection, &kop->op);
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the target node. */
static Node *
redirect_target (KvRedisTier *self,
                 const char  *error_reply,
                 guint16     *slot)
{
  g_auto(GStrv) parts = g_strsplit (error_reply, " ", 4);
  guint64 value;

  if (g_strv_length (parts) != 3 ||
      !g_ascii_string_to_unsigned (parts[1], 10, 0, KV_REDIS_N_SLOTS - 1, &value, NULL))
    return NULL;
  *slot = (guint16) value;
  if (parts[2][0] == ':')
    {
      /* an empty host: the node that answered */
      return NULL;
    }
  return node_get (self, parts[2], FALSE);
}

/* ---- jobs ---------------------------------------------------------------- */

static void
redis_job_free (RedisJob *rj)
{
  for (guint i = 0; i < rj->n_keys; i++)
    key_op_clear (&rj->ops[i]);
  g_free (rj->ops);
  g_clear_object (&rj->tier_job);
  g_clear_pointer (&rj->job, kv_transfer_job_unref);
  g_free (rj);
}

static void
redis_job_unref (RedisJob *rj)
{
  KvRedisTier *self = rj->tier;
  gboolean last;

  g_mutex_lock (&self->lock);
  last = --rj->refs == 0;
  g_mutex_unlock (&self->lock);
  if (!last)
    return;
  redis_job_free (rj);
  g_mutex_lock (&self->lock);
  self->n_live_jobs--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* A load's value failed its check: delete it, so that no one loads it
 * again. A plain DEL: a valid value another process stored between the
 * GET and the DEL is lost too, which only costs a miss. */
static void
delete_value (KvRedisTier *self,
              KeyOp       *load)
{
  KeyOp *kop = g_new0 (KeyOp, 1);

  index_remove (self, load->key);
  kop->tier = self;
  kop->kind = OP_DEL;
  kop->key = load->key != NULL ? kv_key_ref (load->key) : NULL;
  kop->redis_key = g_strdup (load->redis_key);
  kop->slot = load->slot;
  io_op_started (self);
  format_key_op (self, kop);
  kop->op.done = key_op_done;
  kop->op.user_data = kop;
  dispatch (self, kop);
}

/* The key of @kop is marked: the last one reports the job. */
static void
job_key_done (KvRedisTier *self,
              KeyOp       *kop)
{
  RedisJob *rj = kop->job;

  if (rj->first_start > 0)
    kv_tier_job_record_io (rj->tier_job, rj->first_start, MAX (g_get_monotonic_time (), rj->first_start));
  g_assert (rj->n_outstanding > 0);
  if (--rj->n_outstanding == 0)
    {
      kv_tier_job_report (rj->tier_job);
      redis_job_unref (rj);
    }
}

/* A key of a job failed: the tier's fault (counted by the breaker) only
 * where a standalone server failed it; a cluster's nodes have breakers of
 * their own, and an error reply or a bad value is the data's. */
static void
fail_key (KeyOp             *kop,
          KvKeyFailureFlags  flags,
          const char        *why)
{
  g_autoptr(GError) error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "%s %s: %s",
                                         kop->kind == OP_LOAD ? "GET" : "SET",
                                         kop->redis_key != NULL ? kop->redis_key : "(no key)",
                                         why);

  kv_tier_job_mark_failed (kop->job->tier_job, kop->index, flags, error);
}

/* Checks a loaded value in place. */
static KvChunkCheck
check_value (KvRedisTier *self,
             KeyOp       *kop)
{
  KvChunkCheck check;

  if (kop->op.get_status == KV_REDIS_GET_WRONG_SIZE)
    return kop->op.value_len < KV_CHUNK_HEADER_SIZE + self->block_size ?
           KV_CHUNK_CHECK_SHORT : KV_CHUNK_CHECK_WRONG_LENGTH;
  /* the payload was hashed as it landed (the op's payload_hasher): no
   * second pass over it */
  check = kv_chunk_check (kop->header, KV_CHUNK_HEADER_SIZE, kop->op.dest_payload,
                          self->block_size, self->block_size, self->namespace_digest,
                          kop->key, FALSE);
  if (check == KV_CHUNK_CHECK_OK &&
      kv_chunk_hasher_digest (kop->payload_hasher) != kv_chunk_header_get_payload_checksum (kop->header))
    check = KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM;
  return check;
}

static void
lookup_key_done (KvRedisTier *self,
                 KeyOp       *kop,
                 gboolean     exists);

/* Every key op ends here, on the I/O thread. */
static void
key_op_done (KvRedisOp *op,
             gpointer   user_data)
{
  KeyOp *kop = user_data;
  KvRedisTier *self = kop->tier;
  Node *node = kop->node;
  gboolean transport_error = op->error != NULL &&
                             !g_error_matches (op->error, G_IO_ERROR, G_IO_ERROR_CANCELLED) &&
                             !g_error_matches (op->error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  gboolean ok = FALSE;

  if (node != NULL)
    {
      g_assert (node->inflight_bytes >= kop->bytes);
      node->inflight_bytes -= kop->bytes;
      kop->node = NULL;
    }

  /* redirects */
  if (op->error == NULL && (kv_redis_op_is_error (op, "MOVED ") || kv_redis_op_is_error (op, "ASK ")))
    {
      gboolean ask = kv_redis_op_is_error (op, "ASK ");
      guint16 slot = 0;
      Node *target = redirect_target (self, op->reply->str, &slot);

      count (self, ask ? KV_REDIS_COUNTER_ASK : KV_REDIS_COUNTER_MOVED, 1);
      if (!ask && self->cluster)
        schedule_refresh (self);
      if (target != NULL && kop->attempts < MAX_REDIRECTS && (!ask || kop->ask_node == NULL))
        {
          kop->attempts++;
          if (ask)
            kop->ask_node = target;
          else
            {
              kop->ask_node = NULL;
              /* until the refresh: the slot is the target's */
              if (self->map != NULL)
                self->map->master[slot] = (gint16) kv_redis_slot_map_add_address (self->map,
                                                                                  target->address);
            }
          kop->to_replica = FALSE;
          if (node != NULL)
            node_pump (self, node);
          kv_redis_op_clear (op);
          format_key_op (self, kop);
          dispatch (self, kop);
          return;
        }
    }
  /* a replica that failed: its master answers */
  if (transport_error && kop->to_replica)
    {
      kop->to_replica = FALSE;
      if (node != NULL)
        node_pump (self, node);
      kv_redis_op_clear (op);
      format_key_op (self, kop);
      dispatch (self, kop);
      return;
    }

  if (node != NULL)
    {
      if (transport_error)
        {
          guint64 trips = kv_circuit_breaker_get_n_trips (node->breaker);

          kv_circuit_breaker_record_error (node->breaker, op->error->message);
          if (kv_circuit_breaker_get_n_trips (node->breaker) != trips)
            count (self, KV_REDIS_COUNTER_NODE_BREAKER_OPENINGS, 1);
        }
      else if (op->error == NULL)
        kv_circuit_breaker_record_success (node->breaker);
      node_pump (self, node);
    }
  if (transport_error)
    {
      count (self, KV_REDIS_COUNTER_NODE_ERRORS, 1);
      /* what the tier's breaker names if these failures open it */
      kv_circuit_breaker_set_cause (kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self)),
                                    op->error->message);
      g_debug ("redis tier: %s", op->error->message);
    }
  else if (kv_redis_op_is_error (op, NULL) && !(kop->kind == OP_LOAD &&
                                                  kv_redis_op_is_error (op, "WRONGTYPE")))
    {
      count (self, KV_REDIS_COUNTER_ERROR_REPLIES, 1);
      g_debug ("redis tier: error reply: %s", op->reply->str);
      if (self->cluster && (kv_redis_op_is_error (op, "CLUSTERDOWN") ||
                            kv_redis_op_is_error (op, "TRYAGAIN")))
        schedule_refresh (self);
    }
  else if (op->error == NULL)
    ok = TRUE;

  switch (kop->kind)
    {
    case OP_LOAD:
      {
        gboolean landed = FALSE;
        KvKeyFailureFlags flags = transport_error && !self->cluster ? KV_KEY_FAILURE_FLAGS_NONE
                                                                    : KV_KEY_FAILURE_FLAGS_NOT_A_FAULT;

        if (ok && op->get_status == KV_REDIS_GET_NIL)
          {
            /* evicted, expired, deleted by another node or an operator: a
             * miss (and, when the index answered the lookup, a stale
             * entry: the next lookup sends an EXISTS) */
            if (index_remove (self, kop->key))
              count (self, KV_REDIS_COUNTER_INDEX_STALE_KEYS, 1);
            count (self, KV_REDIS_COUNTER_MISSING_CHUNKS, 1);
            kv_tier_job_mark_missing (kop->job->tier_job, kop->index);
          }
        else if (kv_redis_op_is_error (op, "WRONGTYPE"))
          {
            /* a poison value under the key, of another type (a list, a
             * hash): no SET NX can ever replace it, so it goes, as a
             * damaged string does */
            count (self, KV_REDIS_COUNTER_CORRUPT_CHUNKS, 1);
            g_message ("redis tier: deleted value %s (not a string)", kop->redis_key);
            fail_key (kop, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT, "a value of another type");
            delete_value (self, kop);
          }
        else if (ok)
          {
            KvChunkCheck check = check_value (self, kop);

            if (check == KV_CHUNK_CHECK_OK)
              {
                landed = TRUE;
                /* verified: tiers storing the promoted chunk need not
                 * hash it again (the slot is still this load's) */
                kv_host_buffer_set_slot_checksum (self->primary, kop->primary_slot,
                                                  kv_chunk_header_get_payload_checksum (kop->header));
                count (self, KV_REDIS_COUNTER_LOADED_CHUNKS, 1);
                count (self, KV_REDIS_COUNTER_BYTES_READ, self->block_size);
                index_add (self, kop->key);
                kv_tier_job_mark_landed (kop->job->tier_job, kop->index);
              }
            else
              {
                count (self, KV_REDIS_COUNTER_CORRUPT_CHUNKS, 1);
                g_message ("redis tier: deleted value %s (%s)", kop->redis_key,
                           kv_chunk_check_to_string (check));
                fail_key (kop, check == KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM ||
                               check == KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM ?
                               KV_KEY_FAILURE_FLAGS_CHECKSUM : KV_KEY_FAILURE_FLAGS_NOT_A_FAULT,
                          kv_chunk_check_to_string (check));
                delete_value (self, kop);
              }
          }
        else
          fail_key (kop, flags, op->error != NULL ? op->error->message : "an error reply");
        if (!landed)
          count (self, KV_REDIS_COUNTER_LOAD_FAILURES, 1);
        job_key_done (self, kop);
      }
      break;

    case OP_STORE:
      {
        if (ok && op->reply->type == REDIS_REPLY_NIL)
          {
            /* NX: the key was there (this tier's or another's) */
            index_add (self, kop->key);
            count (self, KV_REDIS_COUNTER_SKIPPED_CHUNKS, 1);
            kv_tier_job_mark_skipped (kop->job->tier_job, kop->index);
          }
        else if (ok)
          {
            index_add (self, kop->key);
            count (self, KV_REDIS_COUNTER_STORED_CHUNKS, 1);
            count (self, KV_REDIS_COUNTER_BYTES_WRITTEN, self->block_size);
            kv_tier_job_mark_landed (kop->job->tier_job, kop->index);
          }
        else
          {
            count (self, KV_REDIS_COUNTER_STORE_FAILURES, 1);
            fail_key (kop, transport_error && !self->cluster ? KV_KEY_FAILURE_FLAGS_NONE
                                                             : KV_KEY_FAILURE_FLAGS_NOT_A_FAULT,
                      op->error != NULL ? op->error->message : "an error reply");
          }
        job_key_done (self, kop);
      }
      break;

    case OP_EXISTS:
      {
        gboolean exists = ok && op->reply->type == REDIS_REPLY_INTEGER && op->reply->integer == 1;

        if (exists)
          index_add (self, kop->key);
        lookup_key_done (self, kop, exists);
      }
      break;

    case OP_DEL:
      /* again: a store of the key that ended between the GET and the DEL
       * indexed a value the DEL removed */
      index_remove (self, kop->key);
      key_op_clear (kop);
      g_free (kop);
      io_op_ended (self);
      break;

    case OP_PING:
      {
        guint64 probe_id = kop->probe_id;

        ok = ok && op->reply->type == REDIS_REPLY_STATUS;
        key_op_clear (kop);
        g_free (kop);
        kv_secondary_tier_complete_probe (KV_SECONDARY_TIER (self), probe_id, ok);
        io_op_ended (self);
      }
      break;

    default:
      g_assert_not_reached ();
    }
}

/* SET's prepare: the deadline may have passed while the op waited in the
 * node's queue (its slot may hold other bytes now): drop it; else encode
 * the header from the slot, now, so that its checksum covers the bytes
 * that are sent. */
static gboolean
store_prepare (KvRedisOp *op,
               gpointer   user_data)
{
  KeyOp *kop = user_data;
  KvRedisTier *self = kop->tier;

  if (g_atomic_int_get (&kop->job->cancelled))
    return FALSE;
  /* the checksum computed once, as the chunk came into the primary */
  if (kop->has_payload_checksum)
    kv_chunk_header_encode_with_checksum (kop->header, self->namespace_digest, kop->key,
                                          self->block_size, kop->payload_checksum,
                                          g_get_real_time ());
  else
    kv_chunk_header_encode (kop->header, self->namespace_digest, kop->key, op->payload,
                            self->block_size, g_get_real_time ());
  if (kop->job->first_start == 0)
    kop->job->first_start = g_get_monotonic_time ();
  return TRUE;
}

/* On the I/O thread: send every op of a job. */
static gboolean
job_dispatch (gpointer user_data)
{
  RedisJob *rj = user_data;
  KvRedisTier *self = rj->tier;
  guint n_started = 0;

  for (guint i = 0; i < rj->n_keys; i++)
    if (!kv_tier_job_is_marked (rj->tier_job, i))
      n_started++;
  rj->n_outstanding = n_started;
  if (n_started == 0)
    {
      kv_tier_job_report (rj->tier_job);
      redis_job_unref (rj);
      return G_SOURCE_REMOVE;
    }
  if (rj->is_load)
    rj->first_start = g_get_monotonic_time ();
  /* held across the loop: an op may complete the job synchronously */
  g_mutex_lock (&self->lock);
  rj->refs++;
  g_mutex_unlock (&self->lock);
  for (guint i = 0; i < rj->n_keys; i++)
    if (rj->ops[i].key != NULL)
      {
        format_key_op (self, &rj->ops[i]);
        dispatch (self, &rj->ops[i]);
      }
  redis_job_unref (rj);
  return G_SOURCE_REMOVE;
}

/* On the I/O thread, after the job's deadline: withdraw its unsent
 * stores (see kv_redis_connection_abort(); one already on the wire is
 * sent whole and published late with the bytes it started with). */
static gboolean
job_abort (gpointer user_data)
{
  RedisJob *rj = user_data;

  if (!rj->is_load && rj->n_outstanding > 0)
    for (guint i = 0; i < rj->n_keys; i++)
      {
        KeyOp *kop = &rj->ops[i];

        if (kop->waiting_on != NULL)
          {
            g_queue_remove (&kop->waiting_on->waiting, kop);
            kop->waiting_on = NULL;
            kop->op.error = g_error_new (G_IO_ERROR, G_IO_ERROR_CANCELLED,
                                         "The store of %s passed its deadline", kop->redis_key);
            key_op_done (&kop->op, kop);
          }
        else if (kop->node != NULL && kop->node->connection != NULL && kop->op.where != 0)
          kv_redis_connection_abort (kop->node->connection, &kop->op);
      }
  redis_job_unref (rj);
  return G_SOURCE_REMOVE;
}

/* The job's deadline passed (KvTierJob runs this once, on the watchdog's
 * thread, never after the report): stores not sent yet are dropped. */
static void
job_cancelled (KvTierJob *tier_job,
               gpointer   user_data)
{
  RedisJob *rj = user_data;
  KvRedisTier *self = rj->tier;

  g_atomic_int_set (&rj->cancelled, TRUE);
  g_mutex_lock (&self->lock);
  rj->refs++;
  g_mutex_unlock (&self->lock);
  g_main_context_invoke (self->context, job_abort, rj);
}

static RedisJob *
redis_job_new (KvRedisTier   *self,
               KvTransferJob *job,
               gboolean       is_load)
{
  RedisJob *rj = g_new0 (RedisJob, 1);
  guint n = kv_transfer_job_get_n_keys (job);

  rj->tier = self;
  rj->tier_job = kv_tier_job_new (KV_SECONDARY_TIER (self), job);
  rj->job = kv_transfer_job_ref (job);
  rj->is_load = is_load;
  rj->n_keys = n;
  rj->ops = g_new0 (KeyOp, MAX (n, 1));
  rj->refs = 1;

  for (guint i = 0; i < n; i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint32 slot = kv_transfer_job_get_chunk_id (job, i);
      KeyOp *kop = &rj->ops[i];

      kop->tier = self;
      kop->job = rj;
      kop->index = i;
      kop->kind = is_load ? OP_LOAD : OP_STORE;
      if (slot >= self->n_slots || !kv_chunk_key_fits (key))
        {
          fail_key (kop, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT,
                    slot >= self->n_slots ? "a slot outside the primary buffer"
                                          : "a key a chunk record cannot hold");
          count (self, is_load ? KV_REDIS_COUNTER_LOAD_FAILURES : KV_REDIS_COUNTER_STORE_FAILURES, 1);
          continue;
        }
      kop->key = kv_key_ref (key);
      kop->redis_key = redis_key (self, key);
      kop->slot = kv_redis_key_slot (kop->redis_key, strlen (kop->redis_key));
      kop->header = g_malloc (KV_CHUNK_HEADER_SIZE);
      kop->bytes = KV_CHUNK_HEADER_SIZE + self->block_size;
      kop->to_replica = is_load && self->read_from_replicas;
      kop->primary_slot = slot;
      kop->op.header_len = KV_CHUNK_HEADER_SIZE;
      kop->op.payload_len = self->block_size;
      kop->op.done = key_op_done;
      kop->op.user_data = kop;
      if (is_load)
        {
          kop->op.dest_header = kop->header;
          kop->op.dest_payload = kv_host_buffer_peek_slot (self->primary, slot);
          kop->payload_hasher = kv_chunk_hasher_new ();
          kop->op.payload_hasher = kop->payload_hasher;
        }
      else
        {
          int len;

          kop->op.header = kop->header;
          kop->op.payload = kv_host_buffer_peek_slot (self->primary, slot);
          kop->has_payload_checksum = kv_host_buffer_get_slot_checksum (self->primary, slot,
                                                                        &kop->payload_checksum);
          kop->op.prepare = store_prepare;
          if (self->ttl_ms > 0)
            {
              char ttl[24];

              g_snprintf (ttl, sizeof ttl, "%" G_GUINT64_FORMAT, self->ttl_ms);
              len = g_snprintf (kop->suffix, sizeof kop->suffix,
                                "\r\n$2\r\nNX\r\n$2\r\nPX\r\n$%zu\r\n%s\r\n", strlen (ttl), ttl);
            }
          else
            len = g_snprintf (kop->suffix, sizeof kop->suffix, "\r\n$2\r\nNX\r\n");
          kop->op.suffix = kop->suffix;
          kop->op.suffix_len = len;
        }
    }

  /* Before the commands are sent: a deadline that passes first drops
   * the stores (store_prepare), as a later one withdraws those unsent. */
  kv_tier_job_set_cancel_func (rj->tier_job, job_cancelled, rj, NULL);
  return rj;
}

static gboolean
submit (KvRedisTier   *self,
        KvTransferJob *job,
        gboolean       is_load)
{
  RedisJob *rj = redis_job_new (self, job, is_load);

  g_mutex_lock (&self->lock);
  self->n_live_jobs++;
  g_mutex_unlock (&self->lock);
  g_main_context_invoke (self->context, job_dispatch, rj);
  return TRUE;
}

static gboolean
kv_redis_tier_submit_store (KvSecondaryTier  *tier,
                            KvTransferJob    *job,
                            GError          **error)
{
  return submit (KV_REDIS_TIER (tier), job, FALSE);
}

static gboolean
kv_redis_tier_submit_load (KvSecondaryTier  *tier,
                           KvTransferJob    *job,
                           GError          **error)
{
  return submit (KV_REDIS_TIER (tier), job, TRUE);
}

/* ---- lookups ------------------------------------------------------------- */

static void
lookup_batch_unref (LookupBatch *batch)
{
  if (!g_atomic_int_dec_and_test (&batch->refs))
    return;
  for (guint i = 0; i < batch->n_keys; i++)
    key_op_clear (&batch->ops[i]);
  g_free (batch->ops);
  g_free (batch->results);
  g_free (batch);
}

static void
lookup_key_done (KvRedisTier *self,
                 KeyOp       *kop,
                 gboolean     exists)
{
  LookupBatch *batch = kop->batch;
  gboolean last;

  g_mutex_lock (&self->lock);
  batch->results[kop->index] = exists;
  last = --batch->n_outstanding == 0;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  if (last)
    {
      lookup_batch_unref (batch);
      io_op_ended (self);
    }
}

/* Takes the reference batch_exists() gave it. */
static gboolean
lookup_dispatch (gpointer user_data)
{
  LookupBatch *batch = user_data;

  /* the ops' reference: the last one to complete drops it, maybe within
   * this loop (a node down or failing completes its ops at once) */
  g_atomic_int_inc (&batch->refs);
  for (guint i = 0; i < batch->n_keys; i++)
    {
      format_key_op (batch->tier, &batch->ops[i]);
      dispatch (batch->tier, &batch->ops[i]);
    }
  lookup_batch_unref (batch);
  return G_SOURCE_REMOVE;
}

/* On a lookup worker: pipelined EXISTS, one per key (in a cluster the
 * keys of a batch live on several nodes). A key whose node is down or
 * failing, or that is not answered within the deadline, is a miss. */
static void
batch_exists (KvKey * const *keys,
              guint          n_keys,
              KvRequest     *request,
              gboolean      *results,
              gpointer       user_data)
{
  KvRedisTier *self = user_data;
  LookupBatch *batch = g_new0 (LookupBatch, 1);
  guint wait_ms = kv_secondary_tier_get_deadline_ms (KV_SECONDARY_TIER (self));
  gint64 end_time = g_get_monotonic_time () +
                    (wait_ms > 0 ? wait_ms : LOOKUP_WAIT_DEFAULT_MS) * G_TIME_SPAN_MILLISECOND;
  guint n = 0;

  batch->tier = self;
  batch->ops = g_new0 (KeyOp, MAX (n_keys, 1));
  batch->results = g_new0 (gboolean, MAX (n_keys, 1));
  batch->refs = 2;  /* this worker's, lookup_dispatch()'s */
  for (guint i = 0; i < n_keys; i++)
    {
      KeyOp *kop;

      results[i] = FALSE;
      if (!kv_chunk_key_fits (keys[i]))
        continue;
      kop = &batch->ops[n];
      kop->tier = self;
      kop->kind = OP_EXISTS;
      kop->batch = batch;
      kop->index = i;
      kop->key = kv_key_ref (keys[i]);
      kop->redis_key = redis_key (self, keys[i]);
      kop->slot = kv_redis_key_slot (kop->redis_key, strlen (kop->redis_key));
      kop->to_replica = self->read_from_replicas;
      kop->op.done = key_op_done;
      kop->op.user_data = kop;
      n++;
    }
  batch->n_keys = n;
  batch->n_outstanding = n;
  if (n == 0)
    {
      g_atomic_int_set (&batch->refs, 1);
      lookup_batch_unref (batch);
      return;
    }
  io_op_started (self);
  g_main_context_invoke (self->context, lookup_dispatch, batch);

  g_mutex_lock (&self->lock);
  while (batch->n_outstanding > 0 && !self->shut_down)
    if (!g_cond_wait_until (&self->cond, &self->lock, end_time))
      break;
  for (guint i = 0; i < n_keys; i++)
    results[i] = batch->results[i];
  g_mutex_unlock (&self->lock);
  lookup_batch_unref (batch);
}

static KvLookupResult
kv_redis_tier_lookup (KvSecondaryTier *tier,
                      KvKey           *key,
                      KvRequest       *request)
{
  KvRedisTier *self = KV_REDIS_TIER (tier);

  /* An open breaker and a load of the key that failed for this request
   * answer MISS before this is called. */
  if (!kv_chunk_key_fits (key))
    return KV_LOOKUP_RESULT_MISS;
  /* a key known to be stored: no EXISTS (a stale entry costs one failed
   * load, which the manager takes as a miss). Not while a server is
   * unreachable: the key may be one of its, and its EXISTS answers MISS
   * where the index would answer HIT for a load bound to fail. */
  if (self->index != NULL && g_atomic_int_get (&self->n_servers_down) == 0 &&
      kv_key_index_contains (self->index, kv_key_index_digest (key)))
    {
      count (self, KV_REDIS_COUNTER_INDEX_HITS, 1);
      return KV_LOOKUP_RESULT_HIT;
    }
  /* the async lookup, which the base class also flushes at each step's
   * end, counts as pending work and cleans up */
  return KV_SECONDARY_TIER_CLASS (kv_redis_tier_parent_class)->lookup (tier, key, request);
}

static gboolean
kv_redis_tier_has_pending_work (KvSecondaryTier *tier)
{
  KvRedisTier *self = KV_REDIS_TIER (tier);
  gboolean pending;

  g_mutex_lock (&self->lock);
  pending = self->n_live_jobs > 0;
  g_mutex_unlock (&self->lock);
  return pending;
}

static KvOffloadPolicy
kv_redis_tier_on_new_request (KvSecondaryTier *tier,
                              KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

/* ---- probe --------------------------------------------------------------- */

typedef struct
{
  KvRedisTier *tier;
  guint64      probe_id;
} ProbeStart;

static gboolean
probe_dispatch (gpointer user_data)
{
  ProbeStart *start = user_data;
  KvRedisTier *self = start->tier;
  KeyOp *kop = g_new0 (KeyOp, 1);

  kop->tier = self;
  kop->kind = OP_PING;
  kop->probe_id = start->probe_id;
  /* a slot of the first range in the map: its master must answer */
  kop->slot = 0;
  if (self->map != NULL)
    for (guint s = 0; s < KV_REDIS_N_SLOTS; s++)
      if (self->map->master[s] >= 0)
        {
          kop->slot = s;
          break;
        }
  kop->op.done = key_op_done;
  kop->op.user_data = kop;
  format_key_op (self, kop);
  g_free (start);
  dispatch (self, kop);
  return G_SOURCE_REMOVE;
}

static gboolean
kv_redis_tier_probe (KvSecondaryTier  *tier,
                     guint64           probe_id,
                     GCancellable     *cancellable,
                     GError          **error)
{
  KvRedisTier *self = KV_REDIS_TIER (tier);
  ProbeStart *start = g_new (ProbeStart, 1);

  start->tier = self;
  start->probe_id = probe_id;
  io_op_started (self);
  g_main_context_invoke (self->context, probe_dispatch, start);
  return TRUE;
}

/* ---- metrics ------------------------------------------------------------- */

static const char *const tier_label_names[] = { "tier", NULL };

const char *
kv_redis_counter_get_name (KvRedisCounter counter)
{
  g_return_val_if_fail (counter < KV_REDIS_N_COUNTERS, NULL);
  return counter_names[counter];
}

static gboolean
kv_redis_tier_register_metrics (KvSecondaryTier   *tier,
                                KvMetricRegistry  *registry,
                                GError           **error)
{
  for (guint c = 0; c < KV_REDIS_N_COUNTERS; c++)
    if (!kv_metric_registry_add_counter (registry, counter_info[c].name, counter_info[c].doc,
                                         tier_label_names, error))
      return FALSE;
  return kv_metric_registry_add_gauge (registry, REDIS_SERVERS_DOWN,
                                       "Servers unreachable now (each loss and return is logged)",
                                       tier_label_names, error) &&
         kv_metric_registry_add_gauge (registry, REDIS_INDEX_KEYS,
                                       "Chunks in the index of chunks known to be stored",
                                       tier_label_names, error);
}

/* The gauges; the base class adds the counters (kv_secondary_tier_set_counters()). */
static KvStats *
kv_redis_tier_get_stats (KvSecondaryTier *tier)
{
  KvRedisTier *self = KV_REDIS_TIER (tier);
  g_autofree char *label = kv_secondary_tier_dup_metric_label (tier);
  const char *labels[] = { label, NULL };
  KvStats *stats = kv_stats_new ();

  kv_stats_set_gauge (stats, REDIS_SERVERS_DOWN, g_atomic_int_get (&self->n_servers_down), labels);
  kv_stats_set_gauge (stats, REDIS_INDEX_KEYS, kv_redis_tier_get_index_size (self), labels);
  return stats;
}

/* ---- the I/O thread, start and shutdown ---------------------------------- */

static gboolean
keep_ticking (gpointer user_data)
{
  return G_SOURCE_CONTINUE;
}

static gpointer
io_thread_main (gpointer user_data)
{
  KvRedisTier *self = user_data;

  g_main_context_push_thread_default (self->context);
  g_main_loop_run (self->loop);
  /* Cancelled connects and TLS closes report back on this context, which
   * nobody iterates after this thread: until they do, they hold their
   * sockets open. Bounded: a stuck TLS thread must not hang shutdown. */
  if (g_atomic_int_get (&self->n_unfinished_io) > 0)
    {
      gint64 give_up = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
      GSource *tick = g_timeout_source_new (50);

      g_source_set_callback (tick, keep_ticking, NULL, NULL);
      g_source_attach (tick, self->context);
      while (g_atomic_int_get (&self->n_unfinished_io) > 0 &&
             g_get_monotonic_time () < give_up)
        g_main_context_iteration (self->context, TRUE);
      if (g_atomic_int_get (&self->n_unfinished_io) > 0)
        g_warning ("redis tier: %d connects or closes did not finish at shutdown",
                   g_atomic_int_get (&self->n_unfinished_io));
      g_source_destroy (tick);
      g_source_unref (tick);
    }
  /* the callbacks of cancelled I/O, which hold the connections */
  while (g_main_context_pending (self->context))
    g_main_context_iteration (self->context, FALSE);
  g_main_context_pop_thread_default (self->context);
  return NULL;
}

static void
signal_started (KvRedisTier  *self,
                const GError *error)
{
  g_mutex_lock (&self->lock);
  if (!self->started)
    {
      self->started = TRUE;
      if (error != NULL)
        self->start_error = g_error_copy (error);
      g_cond_broadcast (&self->cond);
    }
  g_mutex_unlock (&self->lock);
}

static void
first_ping_done (KvRedisOp *op,
                 gpointer   user_data)
{
  KeyOp *kop = user_data;
  KvRedisTier *self = kop->tier;
  g_autoptr(GError) error = NULL;

  if (op->error != NULL)
    error = g_error_copy (op->error);
  else if (kv_redis_op_is_error (op, NULL))
    error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "Redis server %s: %s",
                         self->standalone->address, op->reply->str);
  signal_started (self, error);
  key_op_clear (kop);
  g_free (kop);
  io_op_ended (self);
}

/* The first contact: a PING to the server, or the slot map. */
static gboolean
start_dispatch (gpointer user_data)
{
  KvRedisTier *self = user_data;

  if (self->cluster)
    start_refresh (self);
  else
    {
      KeyOp *kop = g_new0 (KeyOp, 1);
      const char *argv[] = { "PING" };

      kop->tier = self;
      kop->kind = OP_PING;
      key_op_format (kop, 1, argv);
      kop->op.kind = KV_REDIS_OP_COMMAND;
      kop->op.done = first_ping_done;
      kop->op.user_data = kop;
      io_op_started (self);
      kv_redis_connection_send (node_connection (self, self->standalone), &kop->op);
    }
  return G_SOURCE_REMOVE;
}

/* A reply not in full twice the deadline after it was due (its command
 * written, the reply before it in) means a wedged connection: a hung
 * server, one that trickles its replies a byte at a time, a reply that
 * announced more than it sends. It is closed, so that its commands fail
 * and the node reconnects. Measured on the monotonic clock: a manual tier
 * clock does not move it. A cluster's map is also read again every
 * MAP_REFRESH_INTERVAL_US. */
static gboolean
stall_check (gpointer user_data)
{
  KvRedisTier *self = user_data;
  guint deadline_ms = kv_secondary_tier_get_deadline_ms (KV_SECONDARY_TIER (self));
  gint64 limit = 2 * (gint64) (deadline_ms > 0 ? deadline_ms : LOOKUP_WAIT_DEFAULT_MS) * 1000;
  gint64 now = g_get_monotonic_time ();
  g_autoptr(GPtrArray) wedged = g_ptr_array_new_with_free_func (g_object_unref);
  GHashTableIter iter;
  Node *node;

  g_hash_table_iter_init (&iter, self->nodes);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &node))
    if (node->connection != NULL &&
        kv_redis_connection_get_reply_wait_us (node->connection, now) > limit)
      g_ptr_array_add (wedged, g_object_ref (node->connection));
  /* closed outside the iteration: their callbacks may add nodes */
  for (guint i = 0; i < wedged->len; i++)
    {
      g_autofree char *why = g_strdup_printf ("a reply not in within %" G_GINT64_FORMAT " ms",
                                              limit / 1000);

      kv_redis_connection_close (wedged->pdata[i], why);
    }
  /* replicas and slots that moved without a redirect to say so */
  if (self->cluster && now - self->last_refresh > MAP_REFRESH_INTERVAL_US)
    schedule_refresh (self);
  return G_SOURCE_CONTINUE;
}

static gboolean
close_all (gpointer user_data)
{
  KvRedisTier *self = user_data;
  GHashTableIter iter;
  Node *node;

  self->closing = TRUE;
  if (self->refresh_timer != NULL)
    {
      g_source_destroy (self->refresh_timer);
      g_clear_pointer (&self->refresh_timer, g_source_unref);
    }
  if (self->stall_timer != NULL)
    {
      g_source_destroy (self->stall_timer);
      g_clear_pointer (&self->stall_timer, g_source_unref);
    }
  g_hash_table_iter_init (&iter, self->nodes);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &node))
    {
      /* ops waiting for the budget fail first, then the connection's */
      while (node->waiting.head != NULL)
        {
          KeyOp *kop = g_queue_pop_head (&node->waiting);

          kop->node = NULL;
          kop->waiting_on = NULL;
          kop->op.error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                                       "The redis tier shut down");
          key_op_done (&kop->op, kop);
        }
      if (node->connection != NULL)
        kv_redis_connection_close (node->connection, "the tier shut down");
    }
  return G_SOURCE_REMOVE;
}

static gboolean
free_nodes (gpointer user_data)
{
  KvRedisTier *self = user_data;

  g_hash_table_remove_all (self->nodes);
  g_main_loop_quit (self->loop);
  return G_SOURCE_REMOVE;
}

/* Fails every command in flight, waits for every job and I/O op to be
 * reported, then stops the I/O thread. */
static void
stop_io (KvRedisTier *self)
{
  KvAsyncLookup *async_lookup = kv_secondary_tier_get_async_lookup (KV_SECONDARY_TIER (self));

  if (self->thread == NULL)
    return;
  g_mutex_lock (&self->lock);
  self->shut_down = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  g_main_context_invoke (self->context, close_all, self);
  /* Here, not after this (as the base class would): a check posted but
   * not started yet is dispatched on the I/O thread, which must still
   * run to fail it on the closed connections. */
  if (async_lookup != NULL)
    kv_async_lookup_shutdown (async_lookup);
  g_mutex_lock (&self->lock);
  while (self->n_live_jobs > 0 || self->n_io_ops > 0)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
  g_main_context_invoke (self->context, free_nodes, self);
  g_thread_join (self->thread);
  self->thread = NULL;
  /* no command left to add to it: give its memory back */
  if (self->index != NULL)
    kv_key_index_clear (self->index);
}

static gboolean
kv_redis_tier_shutdown (KvSecondaryTier  *tier,
                        GError          **error)
{
  stop_io (KV_REDIS_TIER (tier));
  return TRUE;
}

/* ---- construction -------------------------------------------------------- */

/* What init refuses before it connects, and the KvConfigurable check. */
static gboolean
check_configuration (KvRedisTier  *self,
                     GPtrArray   **out_seeds,
                     GError      **error)
{
  KvSecondaryTier *tier = KV_SECONDARY_TIER (self);
  KvHostBuffer *primary = kv_secondary_tier_get_primary (tier);
  g_autoptr(GPtrArray) seeds = g_ptr_array_new_with_free_func (g_free);
  g_auto(GStrv) parts = NULL;

  if (primary == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The redis tier needs a primary buffer (the primary property)");
      return FALSE;
    }
  if (self->servers == NULL || *self->servers == '\0')
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The redis tier needs servers (host:port, comma-separated)");
      return FALSE;
    }
  parts = g_strsplit (self->servers, ",", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    {
      g_autofree char *host = NULL;
      char *address = g_strstrip (parts[i]);
      guint16 port;

      if (!kv_redis_parse_address (address, &host, &port, error))
        return FALSE;
      g_ptr_array_add (seeds, g_strdup (address));
    }
  if (!self->cluster && seeds->len != 1)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "servers=%s names %u redis servers: a standalone redis tier uses one "
                   "(set cluster=true for a Redis Cluster)", self->servers, seeds->len);
      return FALSE;
    }
  if (self->cluster && self->database != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "database=%u cannot be combined with cluster=true: a Redis Cluster has "
                   "only database 0", self->database);
      return FALSE;
    }
  if (self->read_from_replicas && !self->cluster)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "read-from-replicas=true needs cluster=true");
      return FALSE;
    }
  if (self->username != NULL && self->password == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The redis tier's username needs a password");
      return FALSE;
    }
  if (self->tls_ca_file != NULL && !self->tls)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "tls-ca-file=%s needs tls=true", self->tls_ca_file);
      return FALSE;
    }
  if (self->node_inflight_bytes < KV_CHUNK_HEADER_SIZE + kv_host_buffer_get_slot_size (primary))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "node-inflight-bytes=%" G_GUINT64_FORMAT " is less than one value (%"
                   G_GSIZE_FORMAT " bytes)", self->node_inflight_bytes,
                   KV_CHUNK_HEADER_SIZE + kv_host_buffer_get_slot_size (primary));
      return FALSE;
    }
  if (out_seeds != NULL)
    *out_seeds = g_steal_pointer (&seeds);
  return TRUE;
}

static gboolean
kv_redis_tier_check (KvConfigurable  *configurable,
                     GError         **error)
{
  return check_configuration (KV_REDIS_TIER (configurable), NULL, error);
}

static void
kv_redis_tier_configurable_iface_init (KvConfigurableInterface *iface)
{
  iface->check = kv_redis_tier_check;
}

static gboolean
kv_redis_tier_initable_init (GInitable     *initable,
                             GCancellable  *cancellable,
                             GError       **error)
{
  KvRedisTier *self = KV_REDIS_TIER (initable);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (initable);
  g_autoptr(KvAsyncLookup) async_lookup = NULL;
  gint64 end_time;
  guint wait_ms;

  if (self->initialized)
    return TRUE;
  if (!check_configuration (self, &self->seeds, error))
    return FALSE;
  if (self->tls && self->tls_ca_file != NULL)
    {
      g_autoptr(GError) local_error = NULL;

      self->tls_database = g_tls_file_database_new (self->tls_ca_file, &local_error);
      if (self->tls_database == NULL)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "The redis tier cannot read its CA file %s: %s", self->tls_ca_file,
                       local_error->message);
          return FALSE;
        }
    }
  if (self->tls && g_tls_backend_supports_tls (g_tls_backend_get_default ()) == FALSE)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "tls=true but GIO has no TLS backend (install glib-networking)");
      return FALSE;
    }

  self->primary = kv_secondary_tier_get_primary (tier);
  self->block_size = kv_host_buffer_get_slot_size (self->primary);
  self->n_slots = kv_host_buffer_get_n_slots (self->primary);
  kv_chunk_namespace_digest (self->namespace_, self->block_size, self->namespace_digest);
  self->key_prefix = kv_chunk_name_namespace_prefix ("kvtier:", self->namespace_digest, ':');
  self->key_prefix_len = strlen (self->key_prefix);

  self->nodes = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, (GDestroyNotify) node_free);
  if (!self->cluster)
    self->standalone = node_get (self, self->seeds->pdata[0], FALSE);
  /* With a ttl, keys expire by themselves, a moment the index cannot
   * know (a SET NX that found the key does not say when it expires):
   * every lookup sends its EXISTS, as without an index. */
  if (self->index_max_keys > 0 && self->ttl_ms == 0)
    self->index = kv_key_index_new (self->index_max_keys);
  self->context = g_main_context_new ();
  self->loop = g_main_loop_new (self->context, FALSE);
  self->thread = g_thread_new ("kvtier-redis", io_thread_main, self);
  async_lookup = kv_async_lookup_new (kv_secondary_tier_get_tier_type (tier),
                                      batch_exists, self, NULL, 2, 8, 16384);
  /* the base class runs it (see kv_secondary_tier_set_async_lookup) */
  kv_secondary_tier_set_async_lookup (tier, async_lookup);

  /* Connect once, so that a wrong address or password fails here with a
   * clear error rather than as failed jobs. */
  self->stall_timer = g_timeout_source_new (250);
  g_source_set_callback (self->stall_timer, stall_check, self, NULL);
  g_source_attach (self->stall_timer, self->context);
  g_main_context_invoke (self->context, start_dispatch, self);
  /* connected within connect-timeout-ms, answered within the deadline */
  wait_ms = self->connect_timeout_ms + MAX (kv_secondary_tier_get_deadline_ms (tier), 2000u);
  end_time = g_get_monotonic_time () + wait_ms * G_TIME_SPAN_MILLISECOND;
  g_mutex_lock (&self->lock);
  while (!self->started)
    if (!g_cond_wait_until (&self->cond, &self->lock, end_time))
      break;
  if (!self->started)
    self->start_error = g_error_new (G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                     "No answer from redis server %s within %u ms",
                                     (const char *) self->seeds->pdata[0], wait_ms);
  g_mutex_unlock (&self->lock);
  if (self->start_error != NULL)
    {
      g_propagate_prefixed_error (error, g_steal_pointer (&self->start_error),
                                  "The redis tier cannot start: ");
      stop_io (self);
      return FALSE;
    }
  self->initialized = TRUE;
  return TRUE;
}

static void
kv_redis_tier_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_redis_tier_initable_init;
}

/* ---- GObject ------------------------------------------------------------- */

static void
kv_redis_tier_dispose (GObject *object)
{
  KvRedisTier *self = KV_REDIS_TIER (object);

  /* internal teardown only: no vfunc, no signal */
  stop_io (self);
  G_OBJECT_CLASS (kv_redis_tier_parent_class)->dispose (object);
}

static void
kv_redis_tier_finalize (GObject *object)
{
  KvRedisTier *self = KV_REDIS_TIER (object);

  g_clear_pointer (&self->nodes, g_hash_table_unref);
  g_clear_pointer (&self->map, kv_redis_slot_map_free);
  g_clear_pointer (&self->loop, g_main_loop_unref);
  g_clear_pointer (&self->context, g_main_context_unref);
  g_clear_pointer (&self->seeds, g_ptr_array_unref);
  g_clear_pointer (&self->index, kv_key_index_free);
  g_clear_object (&self->tls_database);
  g_clear_error (&self->start_error);
  g_clear_pointer (&self->counters, kv_counter_set_unref);
  g_free (self->key_prefix);
  g_free (self->servers);
  g_free (self->username);
  g_free (self->password);
  g_free (self->namespace_);
  g_free (self->tls_ca_file);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (kv_redis_tier_parent_class)->finalize (object);
}

static void
kv_redis_tier_get_property (GObject    *object,
                            guint       prop_id,
                            GValue     *value,
                            GParamSpec *pspec)
{
  KvRedisTier *self = KV_REDIS_TIER (object);

  switch (prop_id)
    {
    case PROP_SERVERS: g_value_set_string (value, self->servers); break;
    case PROP_CLUSTER: g_value_set_boolean (value, self->cluster); break;
    case PROP_USERNAME: g_value_set_string (value, self->username); break;
    case PROP_PASSWORD: g_value_set_string (value, self->password); break;
    case PROP_DATABASE: g_value_set_uint (value, self->database); break;
    case PROP_NAMESPACE: g_value_set_string (value, self->namespace_); break;
    case PROP_TTL_MS: g_value_set_uint64 (value, self->ttl_ms); break;
    case PROP_TLS: g_value_set_boolean (value, self->tls); break;
    case PROP_TLS_CA_FILE: g_value_set_string (value, self->tls_ca_file); break;
    case PROP_READ_FROM_REPLICAS: g_value_set_boolean (value, self->read_from_replicas); break;
    case PROP_NODE_INFLIGHT_BYTES: g_value_set_uint64 (value, self->node_inflight_bytes); break;
    case PROP_CONNECT_TIMEOUT_MS: g_value_set_uint (value, self->connect_timeout_ms); break;
    case PROP_INDEX_MAX_KEYS: g_value_set_uint (value, self->index_max_keys); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
set_string (char         **field,
            const GValue  *value)
{
  g_free (*field);
  *field = g_value_dup_string (value);
}

static void
kv_redis_tier_set_property (GObject      *object,
                            guint         prop_id,
                            const GValue *value,
                            GParamSpec   *pspec)
{
  KvRedisTier *self = KV_REDIS_TIER (object);

  switch (prop_id)
    {
    case PROP_SERVERS: set_string (&self->servers, value); break;
    case PROP_CLUSTER: self->cluster = g_value_get_boolean (value); break;
    case PROP_USERNAME: set_string (&self->username, value); break;
    case PROP_PASSWORD: set_string (&self->password, value); break;
    case PROP_DATABASE: self->database = g_value_get_uint (value); break;
    case PROP_NAMESPACE: set_string (&self->namespace_, value); break;
    case PROP_TTL_MS: self->ttl_ms = g_value_get_uint64 (value); break;
    case PROP_TLS: self->tls = g_value_get_boolean (value); break;
    case PROP_TLS_CA_FILE: set_string (&self->tls_ca_file, value); break;
    case PROP_READ_FROM_REPLICAS: self->read_from_replicas = g_value_get_boolean (value); break;
    case PROP_NODE_INFLIGHT_BYTES: self->node_inflight_bytes = g_value_get_uint64 (value); break;
    case PROP_CONNECT_TIMEOUT_MS: self->connect_timeout_ms = g_value_get_uint (value); break;
    case PROP_INDEX_MAX_KEYS: self->index_max_keys = g_value_get_uint (value); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

#define CONSTRUCT_FLAGS (G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | \
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY)

static void
kv_redis_tier_class_init (KvRedisTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  object_class->dispose = kv_redis_tier_dispose;
  object_class->finalize = kv_redis_tier_finalize;
  object_class->get_property = kv_redis_tier_get_property;
  object_class->set_property = kv_redis_tier_set_property;

  tier_class->medium = KV_MEDIUM_STORAGE;
  tier_class->lookup = kv_redis_tier_lookup;
  tier_class->submit_store = kv_redis_tier_submit_store;
  tier_class->submit_load = kv_redis_tier_submit_load;
  tier_class->has_pending_work = kv_redis_tier_has_pending_work;
  tier_class->on_new_request = kv_redis_tier_on_new_request;
  tier_class->shutdown = kv_redis_tier_shutdown;
  tier_class->register_metrics = kv_redis_tier_register_metrics;
  tier_class->get_stats = kv_redis_tier_get_stats;
  tier_class->probe = kv_redis_tier_probe;
  /* A SET already sent runs when the server resumes, whatever the job's
   * cancellable says: a store failed at its deadline keeps its slots
   * pinned until the tier reports it (and its payload is read from them). */
  tier_class->can_cancel_stores = FALSE;

  /**
   * KvRedisTier:servers:
   *
   * `host:port` of the redis server; with [property@KvRedisTier:cluster],
   * a comma-separated list of cluster nodes to read the slot map from.
   */
  properties[PROP_SERVERS] =
    g_param_spec_string ("servers", NULL,
                         "host:port of the redis server; with cluster, the cluster nodes to read the slot map from (comma-separated)", DEFAULT_SERVERS, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:cluster:
   *
   * Whether the servers are a Redis Cluster: keys go to the node serving
   * their hash slot, read from `CLUSTER SLOTS` and kept current through
   * `MOVED` and `ASK` redirects.
   */
  properties[PROP_CLUSTER] =
    g_param_spec_boolean ("cluster", NULL,
                          "The servers are a Redis Cluster: keys go to the node that serves their hash slot", FALSE, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:username:
   *
   * The ACL user of `AUTH` (needs a password); %NULL for the default user.
   */
  properties[PROP_USERNAME] =
    g_param_spec_string ("username", NULL,
                         "The ACL user of AUTH (needs a password; none: the default user)", NULL, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:password:
   *
   * The password of `AUTH`, sent on every connection; %NULL: no `AUTH`.
   */
  properties[PROP_PASSWORD] =
    g_param_spec_string ("password", NULL,
                         "The password of AUTH, sent on every connection (none: no AUTH)", NULL, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:database:
   *
   * The database (`SELECT`) of a standalone server.
   */
  properties[PROP_DATABASE] =
    g_param_spec_uint ("database", NULL,
                       "The database (SELECT) of a standalone server", 0, G_MAXINT, 0, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:namespace:
   *
   * The cache identity (model, dtype, layout, parallelism...): its digest,
   * with the chunk size, is part of every key and every value's header, so
   * tiers with different identities never read each other's chunks.
   */
  properties[PROP_NAMESPACE] =
    g_param_spec_string ("namespace", NULL,
                         "The cache identity (model, dtype, layout, parallelism), part of every key", "default", CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:ttl-ms:
   *
   * How long a stored chunk lives (`PX`), 0 for ever (until Redis evicts
   * it).
   */
  properties[PROP_TTL_MS] =
    g_param_spec_uint64 ("ttl-ms", NULL,
                         "Milliseconds a stored chunk lives (0: until Redis evicts it)", 0, G_MAXINT64, 0, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:tls:
   *
   * Whether to connect with TLS (glib-networking), checking the servers'
   * certificates against [property@KvRedisTier:tls-ca-file] or the
   * system's CAs.
   */
  properties[PROP_TLS] =
    g_param_spec_boolean ("tls", NULL,
                          "Connect with TLS, checking the servers' certificates", FALSE, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:tls-ca-file:
   *
   * A PEM file of the CAs that sign the servers' certificates.
   */
  properties[PROP_TLS_CA_FILE] =
    g_param_spec_string ("tls-ca-file", NULL,
                         "PEM file of the CAs that sign the servers' certificates (none: the system's)", NULL, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:read-from-replicas:
   *
   * Whether loads and lookups go to a replica of the slot (`READONLY`)
   * when it has one, and to its master when the replica fails. A replica
   * lags its master: a chunk stored a moment ago may miss.
   */
  properties[PROP_READ_FROM_REPLICAS] =
    g_param_spec_boolean ("read-from-replicas", NULL,
                          "Loads and lookups go to a replica of the slot when it has one", FALSE, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:node-inflight-bytes:
   *
   * The most value bytes in flight to or from one node; more wait in the
   * tier until replies come back.
   */
  properties[PROP_NODE_INFLIGHT_BYTES] =
    g_param_spec_uint64 ("node-inflight-bytes", NULL,
                         "Most value bytes in flight to or from one node", 0, G_MAXUINT64,
                         DEFAULT_NODE_INFLIGHT_BYTES, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:connect-timeout-ms:
   *
   * How long a connection may take to open.
   */
  properties[PROP_CONNECT_TIMEOUT_MS] =
    g_param_spec_uint ("connect-timeout-ms", NULL,
                       "Milliseconds a connection may take to open", 1, G_MAXINT / 2,
                       DEFAULT_CONNECT_TIMEOUT_MS, CONSTRUCT_FLAGS);

  /**
   * KvRedisTier:index-max-keys:
   *
   * The most chunks the tier's index of the chunks it knows are stored
   * holds (16 to 32 bytes each): their lookups answer HIT without an
   * `EXISTS`. When it is full, new chunks are not added (their lookups
   * send an `EXISTS`); 0 turns the index off. With
   * [property@KvRedisTier:ttl-ms] set, keys expire by themselves and the
   * tier keeps no index.
   */
  properties[PROP_INDEX_MAX_KEYS] =
    g_param_spec_uint ("index-max-keys", NULL,
                       "Most chunks the index of chunks known to be stored holds (0: none; none with ttl-ms)",
                       0, KV_KEY_INDEX_MAX_KEYS_LIMIT, DEFAULT_INDEX_MAX_KEYS, CONSTRUCT_FLAGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_redis_tier_init (KvRedisTier *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->servers = g_strdup (DEFAULT_SERVERS);
  self->namespace_ = g_strdup ("default");
  self->node_inflight_bytes = DEFAULT_NODE_INFLIGHT_BYTES;
  self->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
  self->index_max_keys = DEFAULT_INDEX_MAX_KEYS;
  {
    const char *names[KV_REDIS_N_COUNTERS + 1] = { NULL };

    for (guint c = 0; c < KV_REDIS_N_COUNTERS; c++)
      names[c] = counter_info[c].name;
    self->counters = kv_counter_set_new (names);
  }
  kv_secondary_tier_set_counters (KV_SECONDARY_TIER (self), self->counters);
  /* this tier's defaults for the base class's liveness knobs */
  kv_secondary_tier_set_deadline_ms (KV_SECONDARY_TIER (self), 5000);
  kv_circuit_breaker_set_failure_threshold (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self)), 5);
  g_signal_connect (self, "notify::metric-label", G_CALLBACK (metric_label_changed), NULL);
}

/* ---- API ----------------------------------------------------------------- */

/* A standalone redis tier on @servers with every other property at its
 * default. Owner thread; connects once. */
KvRedisTier *
kv_redis_tier_new (KvHostBuffer  *primary,
                   const char    *servers,
                   GError       **error)
{
  return g_initable_new (KV_TYPE_REDIS_TIER, NULL, error,
                         "tier-type", "redis",
                         "primary", primary,
                         "servers", servers,
                         NULL);
}

/* Any thread. */
guint64
kv_redis_tier_get_counter (KvRedisTier    *self,
                           KvRedisCounter  counter)
{
  g_return_val_if_fail (KV_IS_REDIS_TIER (self), 0);
  g_return_val_if_fail (counter < KV_REDIS_N_COUNTERS, 0);

  return kv_counter_set_get (self->counters, counter);
}

/* The redis key of @key (for tests and tools). */
char *
kv_redis_tier_get_redis_key (KvRedisTier *self,
                             KvKey       *key)
{
  g_return_val_if_fail (KV_IS_REDIS_TIER (self) && self->initialized, NULL);
  return redis_key (self, key);
}

/* The chunks in the tier's index now (0 without one). Any thread. */
guint
kv_redis_tier_get_index_size (KvRedisTier *self)
{
  g_return_val_if_fail (KV_IS_REDIS_TIER (self), 0);
  return self->index != NULL ? kv_key_index_get_size (self->index) : 0;
}
