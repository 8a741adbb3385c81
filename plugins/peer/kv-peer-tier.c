/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-tier.h"

#include <string.h>

#include "kv-chunk-format.h"
#include "kv-peer-client.h"
#include "kv-peer-events.h"
#include "kv-peer-handshake.h"
#include "kv-peer-server.h"

/*
 * The peer tier: a node fetches the chunks another node already holds
 * instead of recomputing them (reference §5.9), over the protocol of
 * doc/protocol.md.
 *
 * Asking (the `peers` list): lookups are batched per step through a
 * KvAsyncLookup, whose workers ask each peer in turn (or only the peer a
 * request names in its transfer parameters, `kv_peer`) and remember which
 * peer holds a key; a load fetches each key from that peer on a fetch
 * worker, straight into the job's primary slots, and checks every chunk
 * record as the fs tier checks its files. Each peer has its own circuit
 * breaker: a peer that fails or stops answering is skipped, the others
 * are still asked.
 *
 * Serving (`listen`): a KvPeerServer accepts peers on its own thread; the
 * requests it queues are answered here, in serve_external_requests on the
 * owner thread, from this node's primary and other tiers through the
 * KvParentManager (this tier excluded): a LOOKUP asks the manager, a FETCH
 * pins the chunks with a pin lease (a chunk that cannot be pinned is a
 * miss for the peer) and the server writes them from the pinned slots; the
 * lease is released when the last byte left, or the server gave up.
 *
 * The tier stores nothing of its own: its class does not accept cascaded
 * stores, so the manager never pins a chunk for it.
 *
 * Streaming (`max-subscribers` > 0 with `listen`): a KvPeerEvents follows
 * the node's chunk events, which whoever drives the manager hands over
 * with the ::publish-event action (`kvtier serve` does, each step), and
 * the server streams them to subscribers that sent SUBSCRIBE.
 */

struct _KvPeerTier
{
  KvSecondaryTier parent_instance;

  /* construct-only settings */
  char      *namespace_;
  char      *peers;
  char      *listen;
  char      *secret_file;
  gboolean   tls;
  char      *tls_cert_file;
  char      *tls_key_file;
  char      *tls_ca_file;
  gboolean   tls_require_client_cert;
  guint      max_connections;
  guint      max_handshakes;
  guint      max_handshakes_per_address;
  guint      handshake_timeout_ms;
  guint      idle_timeout_ms;
  guint      io_timeout_ms;
  guint64    max_inflight_bytes;
  guint      max_keys;
  guint      connections_per_peer;
  guint      peer_breaker_threshold;
  guint      peer_breaker_open_ms;
  guint      max_subscribers;
  guint64    events_backlog;
  guint      heartbeat_ms;

  gboolean        initialized;
  KvHostBuffer   *primary;
  gsize           block_size;
  guint8          digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  KvPeerCounters  counters;         /* counted by the client and server sides */
  KvCounterSet   *counter_set;      /* their totals, reported by the base class */

  GPtrArray      *clients;          /* KvPeerClient, in `peers` order */
  KvPeerServer   *server;
  KvPeerEvents   *events;           /* NULL: no event stream */
  GMainContext   *timer_context;
  GMainLoop      *timer_loop;
  GThread        *timer_thread;
  KvAsyncLookup  *async_lookup;
  GPtrArray      *fetch_pools;      /* GThreadPool per peer, connections-per-peer threads */

  GMutex          lock;
  GCond           idle_cond;
  GHashTable     *locations;        /* KvKey → peer index + 1, from lookups */
  guint           n_loads;          /* load jobs not reported yet */
  guint           n_serving;        /* served fetches whose pin lease is held */

  GHashTable     *serve_requests;   /* owner thread: connection id → KvRequest */
  gboolean        draining;
};

enum {
  PROP_0,
  PROP_NAMESPACE,
  PROP_PEERS,
  PROP_LISTEN,
  PROP_SECRET_FILE,
  PROP_TLS,
  PROP_TLS_CERT_FILE,
  PROP_TLS_KEY_FILE,
  PROP_TLS_CA_FILE,
  PROP_TLS_REQUIRE_CLIENT_CERT,
  PROP_MAX_CONNECTIONS,
  PROP_MAX_HANDSHAKES,
  PROP_MAX_HANDSHAKES_PER_ADDRESS,
  PROP_HANDSHAKE_TIMEOUT_MS,
  PROP_IDLE_TIMEOUT_MS,
  PROP_IO_TIMEOUT_MS,
  PROP_MAX_INFLIGHT_BYTES,
  PROP_MAX_KEYS_PER_REQUEST,
  PROP_CONNECTIONS_PER_PEER,
  PROP_PEER_BREAKER_THRESHOLD,
  PROP_PEER_BREAKER_OPEN_MS,
  PROP_MAX_SUBSCRIBERS,
  PROP_EVENTS_BACKLOG,
  PROP_HEARTBEAT_MS,
  PROP_BOUND_ADDRESS,
  PROP_EVENT_SEQ,
  PROP_EVENTS_PENDING,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

enum {
  SIGNAL_REQUESTS_QUEUED,
  SIGNAL_DRAIN,
  SIGNAL_PUBLISH_EVENT,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

/* kvtier_peer_<name>_total, in KvPeerCounter order (doc/metrics.md) */
static const struct { const char *name; const char *doc; } counter_info[KV_PEER_N_COUNTERS] = {
  { "kvtier_peer_lookup_keys", "Peer tier: keys asked of peers" },
  { "kvtier_peer_lookup_hits", "Peer tier: keys a peer said it holds" },
  { "kvtier_peer_fetched_chunks", "Peer tier: chunks fetched and verified" },
  { "kvtier_peer_fetched_bytes", "Peer tier: payload bytes fetched and verified" },
  { "kvtier_peer_fetch_misses", "Peer tier: fetched keys the peer no longer had" },
  { "kvtier_peer_fetch_failures", "Peer tier: fetches that failed (connection, timeout, protocol)" },
  { "kvtier_peer_checksum_failures", "Peer tier: fetched chunks that failed their check" },
  { "kvtier_peer_connect_failures",
    "Peer tier: connections to a peer that failed (connect, TLS, handshake)" },
  { "kvtier_peer_request_errors", "Peer tier: requests to a peer that failed (counted by its breaker)" },
  { "kvtier_peer_breaker_skips", "Peer tier: requests not sent because the peer's breaker was open" },
  { "kvtier_peer_breaker_openings",
    "Peer tier: times the circuit breaker of one peer opened (each is logged)" },
  { "kvtier_peer_outages",
    "Peer tier: times a peer became unreachable (each is logged, and its return)" },
  { "kvtier_peer_connections_accepted", "Peer server: connections accepted" },
  { "kvtier_peer_connections_rejected",
    "Peer server: connections refused at max-connections or max-handshakes-per-address" },
  { "kvtier_peer_handshake_failures",
    "Peer server: handshakes that failed (not the protocol, bad HELLO or AUTH, TLS; logged)" },
  { "kvtier_peer_auth_failures",
    "Peer server: clients that failed the shared-secret proof (logged)" },
  { "kvtier_peer_namespace_mismatches",
    "Peer server: authenticated clients of another namespace or chunk size (logged)" },
  { "kvtier_peer_bad_frames", "Peer server: malformed, unexpected or truncated frames" },
  { "kvtier_peer_limit_violations", "Peer server: frames over the size, key or in-flight limits" },
  { "kvtier_peer_handshake_timeouts",
    "Peer server: connections closed for not finishing the handshake in time" },
  { "kvtier_peer_idle_timeouts", "Peer server: connections closed for idling or sending too slowly" },
  { "kvtier_peer_slow_readers",
    "Peer server: connections closed for not reading an answer in time" },
  { "kvtier_peer_connection_errors", "Peer server: connections that failed with an I/O error" },
  { "kvtier_peer_served_lookup_keys", "Peer server: keys looked up for peers" },
  { "kvtier_peer_served_chunks", "Peer server: chunks sent to peers" },
  { "kvtier_peer_served_bytes",
    "Peer server: payload bytes sent to peers (not counted as written into a tier)" },
  { "kvtier_peer_served_misses", "Peer server: fetched keys answered as misses" },
  { "kvtier_peer_serve_failures", "Peer server: fetch answers that could not be sent in full" },
  { "kvtier_peer_handshakes_evicted",
    "Peer server: handshakes closed to make room for newer ones at max-handshakes" },
  { "kvtier_peer_accept_pauses",
    "Peer server: times accepting paused because descriptors or memory ran out" },
};

#define PEER_CONNECTIONS_OPEN  "kvtier_peer_connections_open"
#define PEER_BREAKERS_OPEN     "kvtier_peer_breakers_open"
/* the event stream's (kv-peer-events.c) */
#define PEER_EVENT_SUBSCRIBERS "kvtier_peer_event_subscribers"
#define PEER_EVENT_KEYS        "kvtier_peer_event_keys"
#define PEER_EVENT_SNAPSHOTS   "kvtier_peer_event_snapshots"
#define PEER_EVENT_RESYNCS     "kvtier_peer_event_resyncs"

static void kv_peer_tier_initable_iface_init (GInitableIface *iface);
static void kv_peer_tier_configurable_iface_init (KvConfigurableInterface *iface);

/**
 * KvPeerTier:
 *
 * A secondary tier, registered as `peer`, that fetches chunks from other
 * kvtier nodes and serves this node's chunks to them (doc/protocol.md).
 */
G_DEFINE_FINAL_TYPE_WITH_CODE (KvPeerTier, kv_peer_tier, KV_TYPE_SECONDARY_TIER,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_peer_tier_initable_iface_init)
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                      kv_peer_tier_configurable_iface_init))

/* ---- settings ------------------------------------------------------------- */

static char **
split_peers (const char *peers)
{
  g_auto(GStrv) parts = g_strsplit_set (peers != NULL ? peers : "", ", ", -1);
  GPtrArray *out = g_ptr_array_new ();

  for (guint i = 0; parts[i] != NULL; i++)
    if (parts[i][0] != '\0')
      g_ptr_array_add (out, g_strdup (parts[i]));
  g_ptr_array_add (out, NULL);
  return (char **) g_ptr_array_free (out, FALSE);
}

static gboolean
check_address (const char  *address,
               const char  *what,
               GError     **error)
{
  g_autoptr(GSocketConnectable) connectable = NULL;
  g_autoptr(GError) local_error = NULL;

  connectable = g_network_address_parse (address, 0, &local_error);
  if (connectable == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The peer tier's %s ‘%s’ is not HOST:PORT: %s", what, address,
                   local_error->message);
      return FALSE;
    }
  return TRUE;
}

/* Everything a start would read, checked without touching the network:
 * the secret, the addresses, the TLS files. */
static gboolean
check_settings (KvPeerTier       *self,
                GBytes          **out_secret,
                GTlsCertificate **out_certificate,
                GTlsDatabase    **out_database,
                GError          **error)
{
  g_autoptr(GBytes) secret = NULL;
  g_autoptr(GTlsCertificate) certificate = NULL;
  g_autoptr(GTlsDatabase) database = NULL;
  g_auto(GStrv) peers = split_peers (self->peers);

  if (self->secret_file == NULL || self->secret_file[0] == '\0')
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "The peer tier needs secret-file: the shared secret of the nodes");
      return FALSE;
    }
  secret = kv_peer_secret_load (self->secret_file, error);
  if (secret == NULL)
    return FALSE;
  if (peers[0] == NULL && (self->listen == NULL || self->listen[0] == '\0'))
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "The peer tier has neither peers to ask nor a listen address to serve on");
      return FALSE;
    }
  for (guint i = 0; peers[i] != NULL; i++)
    if (!check_address (peers[i], "peer", error))
      return FALSE;
  if (self->listen != NULL && self->listen[0] != '\0' && !check_address (self->listen, "listen address", error))
    return FALSE;

  if (self->tls)
    {
      gboolean serving = self->listen != NULL && self->listen[0] != '\0';

      if (self->tls_cert_file != NULL || self->tls_key_file != NULL)
        {
          if (self->tls_cert_file == NULL || self->tls_key_file == NULL)
            {
              g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                                   "The peer tier needs both tls-cert-file and tls-key-file");
              return FALSE;
            }
          certificate = g_tls_certificate_new_from_files (self->tls_cert_file, self->tls_key_file, error);
          if (certificate == NULL)
            {
              g_prefix_error (error, "The peer tier's TLS certificate: ");
              return FALSE;
            }
        }
      else if (serving)
        {
          g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                               "A peer tier that listens with tls = true needs tls-cert-file and "
                               "tls-key-file");
          return FALSE;
        }
      if (self->tls_ca_file != NULL)
        {
          database = g_tls_file_database_new (self->tls_ca_file, error);
          if (database == NULL)
            {
              g_prefix_error (error, "The peer tier's tls-ca-file: ");
              return FALSE;
            }
        }
      if (self->tls_require_client_cert && database == NULL)
        {
          g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                               "tls-require-client-cert needs tls-ca-file, the CA that signs "
                               "the peers' certificates");
          return FALSE;
        }
    }

  if (out_secret != NULL)
    *out_secret = g_steal_pointer (&secret);
  if (out_certificate != NULL)
    *out_certificate = g_steal_pointer (&certificate);
  if (out_database != NULL)
    *out_database = g_steal_pointer (&database);
  return TRUE;
}

static gboolean
kv_peer_tier_check (KvConfigurable  *configurable,
                    GError         **error)
{
  return check_settings (KV_PEER_TIER (configurable), NULL, NULL, NULL, error);
}

static void
kv_peer_tier_configurable_iface_init (KvConfigurableInterface *iface)
{
  iface->check = kv_peer_tier_check;
}

/* ---- asking peers ---------------------------------------------------------- */

/* The peers @request may be asked: the one its transfer parameters name
 * (`kv_peer`, which must be one of `peers`), else all. */
static GArray *
candidate_peers (KvPeerTier *self,
                 KvRequest  *request)
{
  GArray *out = g_array_new (FALSE, FALSE, sizeof (guint));
  GVariant *params = request != NULL ? kv_request_get_transfer_params (request) : NULL;
  const char *named = NULL;

  if (params != NULL && g_variant_lookup (params, "kv_peer", "&s", &named))
    {
      for (guint i = 0; i < self->clients->len; i++)
        if (g_str_equal (kv_peer_client_get_address (self->clients->pdata[i]), named))
          g_array_append_val (out, i);
      if (out->len == 0)
        g_debug ("peer tier: request %s names peer %s, which is not in the peer list",
                 kv_request_get_id (request), named);
      return out;
    }
  for (guint i = 0; i < self->clients->len; i++)
    g_array_append_val (out, i);
  return out;
}

/* KvAsyncLookup worker: asks the candidate peers in turn about the keys no
 * earlier peer had. A key a peer is still promoting is asked again a few
 * times. */
static void
lookup_batch (KvKey * const *keys,
              guint          n_keys,
              KvRequest     *request,
              gboolean      *results,
              gpointer       user_data)
{
  KvPeerTier *self = user_data;
  g_autoptr(GArray) peers = candidate_peers (self, request);
  g_autoptr(GPtrArray) pending = g_ptr_array_new ();
  g_autoptr(GArray) pending_index = g_array_new (FALSE, FALSE, sizeof (guint));

  for (guint i = 0; i < n_keys; i++)
    results[i] = FALSE;

  for (guint p = 0; p < peers->len; p++)
    {
      guint peer = g_array_index (peers, guint, p);
      KvPeerClient *client = self->clients->pdata[peer];

      g_ptr_array_set_size (pending, 0);
      g_array_set_size (pending_index, 0);
      for (guint i = 0; i < n_keys; i++)
        if (!results[i])
          {
            g_ptr_array_add (pending, keys[i]);
            g_array_append_val (pending_index, i);
          }
      if (pending->len == 0)
        break;
      if (!kv_peer_client_allows_requests (client))
        {
          kv_peer_counters_add (&self->counters, KV_PEER_COUNTER_PEER_SKIPPED, 1);
          continue;
        }

      /* keys the peer is promoting from its own tiers: asked again for up
       * to 200 ms, then a miss */
      for (gint64 until = g_get_monotonic_time () + 200 * G_TIME_SPAN_MILLISECOND, attempt = 0;
           pending->len > 0 && (attempt == 0 || g_get_monotonic_time () < until); attempt++)
        {
          g_autofree guint8 *answers = g_malloc (pending->len);
          g_autoptr(GError) error = NULL;
          guint kept = 0;

          if (attempt > 0)
            g_usleep (MIN (attempt, 10) * 1000);
          kv_peer_counters_add (&self->counters, KV_PEER_COUNTER_LOOKUP_KEYS, pending->len);
          if (!kv_peer_client_lookup (client, (KvKey * const *) pending->pdata, pending->len,
                                      answers, &error))
            {
              g_debug ("peer tier: %s", error->message);
              break;
            }
          for (guint j = 0; j < pending->len; j++)
            {
              guint i = g_array_index (pending_index, guint, j);

              if (answers[j] == KV_PEER_LOOKUP_HIT)
                {
                  results[i] = TRUE;
                  kv_peer_counters_add (&self->counters, KV_PEER_COUNTER_LOOKUP_HITS, 1);
                  g_mutex_lock (&self->lock);
                  /* Hints only, bounded: forgotten ones are fetched from the
                   * first peer. */
                  if (g_hash_table_size (self->locations) > 65536)
                    g_hash_table_remove_all (self->locations);
                  g_hash_table_replace (self->locations, kv_key_ref (keys[i]),
                                        GUINT_TO_POINTER (peer + 1));
                  g_mutex_unlock (&self->lock);
                }
              else if (answers[j] == KV_PEER_LOOKUP_PENDING)
                {
                  pending->pdata[kept] = pending->pdata[j];
                  g_array_index (pending_index, guint, kept) = i;
                  kept++;
                }
            }
          g_ptr_array_set_size (pending, kept);
          g_array_set_size (pending_index, kept);
        }
    }
}

static KvLookupResult
kv_peer_tier_lookup (KvSecondaryTier *tier,
                     KvKey           *key,
                     KvRequest       *request)
{
  KvPeerTier *self = KV_PEER_TIER (tier);

  if (self->async_lookup == NULL || !kv_chunk_key_fits (key))
    return KV_LOOKUP_RESULT_MISS;
  return kv_async_lookup_lookup (self->async_lookup, key, request);
}

/* ---- loads ------------------------------------------------------------------ */

typedef struct
{
  KvPeerTier     *self;
  KvTierJob      *tier_job;
  gint            n_groups_left;  /* atomic */
} LoadTask;

typedef struct
{
  LoadTask *task;
  guint     peer;
  GArray   *indices;   /* guint: the keys of the job this peer fetches */
} FetchGroup;

/* The last fetch group of @task is done: report the job (by the one
 * partial-load rule of KvTierJob) and let drain_jobs() go on. */
static void
finish_load (LoadTask *task)
{
  KvPeerTier *self = task->self;

  kv_tier_job_report (task->tier_job);
  g_object_unref (task->tier_job);
  g_free (task);

  g_mutex_lock (&self->lock);
  if (--self->n_loads == 0)
    g_cond_broadcast (&self->idle_cond);
  g_mutex_unlock (&self->lock);
  g_object_unref (self);
}

/* Fetch worker: one peer's share of a load job. */
static void
fetch_group (gpointer data,
             gpointer user_data)
{
  FetchGroup *group = data;
  LoadTask *task = group->task;
  KvPeerTier *self = task->self;
  KvTransferJob *job = kv_tier_job_get_job (task->tier_job);
  KvPeerClient *client = self->clients->pdata[group->peer];
  guint n = group->indices->len;
  g_autofree KvKey **keys = g_new (KvKey *, n);
  g_autofree guint8 **slots = g_new (guint8 *, n);
  g_autofree gboolean *landed = g_new0 (gboolean, n);
  g_autofree guint64 *checksums = g_new0 (guint64, n);
  g_autoptr(GError) error = NULL;

  for (guint j = 0; j < n; j++)
    {
      guint i = g_array_index (group->indices, guint, j);

      keys[j] = kv_transfer_job_get_key (job, i);
      slots[j] = kv_host_buffer_peek_slot (self->primary, kv_transfer_job_get_chunk_id (job, i));
    }

  if (!kv_peer_client_allows_requests (client))
    {
      kv_peer_counters_add (&self->counters, KV_PEER_COUNTER_PEER_SKIPPED, 1);
      g_set_error (&error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "Peer %u is not asked while its circuit breaker is open", group->peer);
    }
  else if (!kv_peer_client_fetch (client, keys, n, slots, landed, checksums,
                                  kv_tier_job_get_cancellable (task->tier_job), &error))
    {
      /* one line per fetch would flood the log while a peer fails:
       * the peer's breaker and its unreachable message name it once */
      g_debug ("peer tier: %s", error->message);
      kv_circuit_breaker_set_cause (kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self)),
                                    error->message);
    }

  for (guint j = 0; j < n; j++)
    {
      guint i = g_array_index (group->indices, guint, j);

      if (landed[j])
        {
          /* verified: tiers storing the fetched chunk need not hash it
           * again (before the job is reported, while the slot is this
           * load's) */
          kv_host_buffer_set_slot_checksum (self->primary, kv_transfer_job_get_chunk_id (job, i),
                                            checksums[j]);
          kv_tier_job_mark_landed (task->tier_job, i);
        }
      else if (error != NULL)
        /* the peer failed (a connection, a timeout, an open breaker) */
        kv_tier_job_mark_failed (task->tier_job, i, KV_KEY_FAILURE_FLAGS_NONE, error);
      else
        /* the peer answered, without this chunk (or with a damaged one):
         * the data's failure, not the tier's */
        kv_tier_job_mark_missing (task->tier_job, i);
    }

  g_array_unref (group->indices);
  g_free (group);
  if (g_atomic_int_dec_and_test (&task->n_groups_left))
    finish_load (task);
}

static gboolean
kv_peer_tier_submit_load (KvSecondaryTier  *tier,
                          KvTransferJob    *job,
                          GError          **error)
{
  KvPeerTier *self = KV_PEER_TIER (tier);
  guint n_keys = kv_transfer_job_get_n_keys (job);
  g_autoptr(GArray) candidates = NULL;
  g_autofree GArray **by_peer = NULL;
  LoadTask *task;
  guint n_groups = 0;

  if (self->fetch_pools == NULL || self->clients->len == 0)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                           "The peer tier has no peers to fetch from");
      return FALSE;
    }
  for (guint i = 0; i < n_keys; i++)
    if (kv_transfer_job_get_chunk_id (job, i) >= kv_host_buffer_get_n_slots (self->primary))
      {
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                     "Load job %" G_GUINT64_FORMAT " names a slot outside the primary tier",
                     kv_transfer_job_get_id (job));
        return FALSE;
      }

  /* Each key from the peer that said it holds it; else the peer the
   * request names, else the first. */
  candidates = candidate_peers (self, kv_transfer_job_get_request (job));
  by_peer = g_new0 (GArray *, self->clients->len);
  g_mutex_lock (&self->lock);
  for (guint i = 0; i < n_keys; i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint peer = GPOINTER_TO_UINT (g_hash_table_lookup (self->locations, key));

      if (peer > 0)
        g_hash_table_remove (self->locations, key);
      peer = peer > 0 ? peer - 1 : candidates->len > 0 ? g_array_index (candidates, guint, 0) : 0;
      if (by_peer[peer] == NULL)
        {
          by_peer[peer] = g_array_new (FALSE, FALSE, sizeof (guint));
          n_groups++;
        }
      g_array_append_val (by_peer[peer], i);
    }
  self->n_loads++;
  g_mutex_unlock (&self->lock);

  task = g_new0 (LoadTask, 1);
  task->self = g_object_ref (self);
  task->tier_job = kv_tier_job_new (tier, job);
  task->n_groups_left = n_groups;
  if (n_groups == 0)
    {
      finish_load (task);
      return TRUE;
    }
  for (guint p = 0; p < self->clients->len; p++)
    if (by_peer[p] != NULL)
      {
        FetchGroup *group = g_new (FetchGroup, 1);

        group->task = task;
        group->peer = p;
        group->indices = by_peer[p];
        g_thread_pool_push (self->fetch_pools->pdata[p], group, NULL);
      }
  return TRUE;
}

static gboolean
kv_peer_tier_submit_store (KvSecondaryTier  *tier,
                           KvTransferJob    *job,
                           GError          **error)
{
  /* Never reached through the manager: the class accepts no cascades. */
  g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "The peer tier stores nothing of its own: it fetches from its peers");
  return FALSE;
}

/* ---- serving ------------------------------------------------------------------ */

typedef struct
{
  KvPeerTier *self;
  KvPinLease *lease;   /* NULL: nothing could be pinned */
} ServedFetch;

/* The server finished (or gave up) sending, on its I/O thread or, when it
 * stopped, on the owner thread: the slots are no longer read. */
static void
served_fetch_done (gboolean success,
                   gpointer data)
{
  ServedFetch *served = data;
  KvPeerTier *self = served->self;

  if (served->lease != NULL)
    {
      g_autoptr(GError) error = NULL;

      /* CLOSED: the manager shut down first and unpinned the chunks */
      if (!kv_pin_lease_release (served->lease, success, &error))
        g_debug ("Peer tier: a served fetch's pin lease: %s", error->message);
      g_object_unref (served->lease);
    }
  g_free (served);

  g_mutex_lock (&self->lock);
  if (--self->n_serving == 0)
    g_cond_broadcast (&self->idle_cond);
  g_mutex_unlock (&self->lock);
  g_object_unref (self);
}

/* Pins the keys a peer fetches (those not in the primary tier are misses
 * for the peer) and hands their slots to the server: a pinned slot's bytes
 * do not change while the lease is held, so neither does the checksum
 * carried with it. */
static void
serve_fetch (KvPeerTier         *self,
             KvParentManager    *parent,
             KvPeerServeRequest *serve)
{
  guint n_keys;
  KvKey * const *keys = kv_peer_serve_request_get_keys (serve, &n_keys);
  g_autofree KvPeerServedChunk *chunks = g_new0 (KvPeerServedChunk, MAX (n_keys, 1));
  g_autoptr(GError) error = NULL;
  ServedFetch *served = g_new0 (ServedFetch, 1);

  served->self = g_object_ref (self);
  served->lease = kv_parent_manager_pin (parent, (KvKey **) keys, n_keys, &error);
  if (served->lease == NULL)
    g_debug ("Peer tier: nothing of a fetch of %u chunks could be pinned: %s",
             n_keys, error->message);
  for (guint i = 0; served->lease != NULL && i < n_keys; i++)
    {
      guint32 slot = kv_pin_lease_get_chunk_id (served->lease, i);

      if (slot == G_MAXUINT32)
        continue;
      chunks[i].payload = kv_host_buffer_peek_slot (self->primary, slot);
      chunks[i].has_payload_checksum =
        kv_host_buffer_get_slot_checksum (self->primary, slot, &chunks[i].payload_checksum);
    }

  g_mutex_lock (&self->lock);
  self->n_serving++;
  g_mutex_unlock (&self->lock);
  kv_peer_serve_request_answer_fetch (serve, chunks, NULL, served_fetch_done, served);
}

static void
kv_peer_tier_serve_external_requests (KvSecondaryTier *tier,
                                      KvParentManager *parent)
{
  KvPeerTier *self = KV_PEER_TIER (tier);
  g_autoptr(GPtrArray) requests = NULL;

  if (self->server == NULL || !kv_peer_server_has_requests (self->server))
    return;

  requests = kv_peer_server_take_requests (self->server);
  for (guint r = 0; r < requests->len; r++)
    {
      KvPeerServeRequest *serve = requests->pdata[r];
      guint64 conn_id = kv_peer_serve_request_get_connection_id (serve);
      KvRequest *request = g_hash_table_lookup (self->serve_requests, &conn_id);
      guint n_keys;
      KvKey * const *keys;

      if (kv_peer_serve_request_get_kind (serve) == KV_PEER_SERVE_CLOSED)
        {
          if (request != NULL)
            {
              kv_parent_manager_on_request_finished (parent, request);
              g_hash_table_remove (self->serve_requests, &conn_id);
            }
          continue;
        }
      /* One request per peer connection, for as long as it is open. */
      if (request == NULL)
        {
          g_autofree char *id = g_strdup_printf ("kvtier-peer-%p-%" G_GUINT64_FORMAT, self, conn_id);
          guint64 *key = g_new (guint64, 1);

          *key = conn_id;
          request = kv_request_new (id, NULL);
          g_hash_table_insert (self->serve_requests, key, request);
          kv_parent_manager_on_new_request (parent, request);
        }

      /* answered requests are taken from the array */
      requests->pdata[r] = NULL;
      keys = kv_peer_serve_request_get_keys (serve, &n_keys);
      if (kv_peer_serve_request_get_kind (serve) == KV_PEER_SERVE_LOOKUP)
        {
          g_autofree guint8 *answers = g_malloc (n_keys);

          for (guint i = 0; i < n_keys; i++)
            switch (kv_parent_manager_lookup (parent, keys[i], request))
              {
              case KV_LOOKUP_RESULT_HIT:
                answers[i] = KV_PEER_LOOKUP_HIT;
                break;
              case KV_LOOKUP_RESULT_HIT_PENDING:
              case KV_LOOKUP_RESULT_RETRY:
                answers[i] = KV_PEER_LOOKUP_PENDING;
                break;
              case KV_LOOKUP_RESULT_MISS:
              default:
                answers[i] = KV_PEER_LOOKUP_MISS;
                break;
              }
          kv_peer_serve_request_answer_lookup (serve, answers);
        }
      else
        serve_fetch (self, parent, serve);
    }
}

/* ---- the rest of the contract ------------------------------------------------ */

static gboolean
kv_peer_tier_has_pending_work (KvSecondaryTier *tier)
{
  KvPeerTier *self = KV_PEER_TIER (tier);
  gboolean pending;

  g_mutex_lock (&self->lock);
  pending = self->n_loads > 0;
  g_mutex_unlock (&self->lock);
  /* the async lookup's unanswered checks: the base class counts them */
  return pending ||
         (self->server != NULL && (kv_peer_server_has_requests (self->server) ||
                                   kv_peer_server_get_n_busy (self->server) > 0));
}

static KvOffloadPolicy
kv_peer_tier_on_new_request (KvSecondaryTier *tier,
                             KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

/* Until every load is reported and every served fetch has released its
 * pin lease. */
static void
wait_idle (KvPeerTier *self)
{
  g_mutex_lock (&self->lock);
  while (self->n_loads > 0 || self->n_serving > 0)
    g_cond_wait (&self->idle_cond, &self->lock);
  g_mutex_unlock (&self->lock);
}

static gboolean
kv_peer_tier_drain_jobs (KvSecondaryTier  *tier,
                         GError          **error)
{
  /* Fetches end within their I/O timeouts, and served fetches once written
   * or their connection closed (their leases are unpinned at the manager's
   * next step); then the base class's wait. */
  wait_idle (KV_PEER_TIER (tier));
  kv_secondary_tier_wait_jobs (tier);
  return TRUE;
}

static gboolean
quit_timer_loop (gpointer data)
{
  g_main_loop_quit (data);
  return G_SOURCE_REMOVE;
}

static void
stop_everything (KvPeerTier *self)
{
  if (self->server != NULL)
    kv_peer_server_stop (self->server);
  /* Here, not after this (as the base class would): a lookup asks the
   * peers over the clients closed below. */
  if (self->async_lookup != NULL)
    kv_async_lookup_shutdown (self->async_lookup);
  if (self->fetch_pools != NULL)
    {
      g_autoptr(GPtrArray) pools = g_steal_pointer (&self->fetch_pools);

      for (guint i = 0; i < pools->len; i++)
        g_thread_pool_free (pools->pdata[i], FALSE, TRUE);
    }
  wait_idle (self);
  for (guint i = 0; self->clients != NULL && i < self->clients->len; i++)
    kv_peer_client_close (self->clients->pdata[i]);
  if (self->timer_thread != NULL)
    {
      /* quit from within the loop: a quit that comes before the thread
       * entered g_main_loop_run() (a tier shut down right after it was
       * made) is lost, and the join would wait forever */
      g_autoptr(GSource) quit = g_idle_source_new ();

      g_source_set_callback (quit, quit_timer_loop, self->timer_loop, NULL);
      g_source_attach (quit, self->timer_context);
      g_thread_join (g_steal_pointer (&self->timer_thread));
    }
}

static gboolean
kv_peer_tier_shutdown (KvSecondaryTier  *tier,
                       GError          **error)
{
  KvPeerTier *self = KV_PEER_TIER (tier);

  /* The server fails what it could not send, so every job is reported. */
  stop_everything (self);
  kv_secondary_tier_wait_jobs (tier);
  return TRUE;
}

/* ---- metrics ------------------------------------------------------------------ */

static const char *const tier_label_names[] = { "tier", NULL };

static gboolean
kv_peer_tier_register_metrics (KvSecondaryTier   *tier,
                               KvMetricRegistry  *registry,
                               GError           **error)
{
  for (guint c = 0; c < KV_PEER_N_COUNTERS; c++)
    if (!kv_metric_registry_add_counter (registry, counter_info[c].name, counter_info[c].doc,
                                         tier_label_names, error))
      return FALSE;
  return kv_metric_registry_add_gauge (registry, PEER_CONNECTIONS_OPEN,
                                       "Peer server: connections open now", tier_label_names, error) &&
         kv_metric_registry_add_gauge (registry, PEER_BREAKERS_OPEN,
                                       "Peer tier: peers whose circuit breaker is open now",
                                       tier_label_names, error) &&
         kv_metric_registry_add_gauge (registry, PEER_EVENT_SUBSCRIBERS,
                                       "Peer server: subscribers following this node's events now",
                                       tier_label_names, error) &&
         kv_metric_registry_add_gauge (registry, PEER_EVENT_KEYS,
                                       "Peer server: keys the event stream says this node holds",
                                       tier_label_names, error) &&
         kv_metric_registry_add_counter (registry, PEER_EVENT_SNAPSHOTS,
                                         "Peer server: snapshots sent to subscribers (resyncs included)",
                                         tier_label_names, error) &&
         kv_metric_registry_add_counter (registry, PEER_EVENT_RESYNCS,
                                         "Peer server: subscribers that fell behind the backlog and got a new snapshot",
                                         tier_label_names, error);
}

static KvStats *
kv_peer_tier_get_stats (KvSecondaryTier *tier)
{
  KvPeerTier *self = KV_PEER_TIER (tier);
  g_autofree char *label = kv_secondary_tier_dup_metric_label (tier);
  const char *labels[] = { label, NULL };
  KvStats *stats = kv_stats_new ();
  guint n_open = 0;

  /* the base class reports what they moved */
  for (guint c = 0; c < KV_PEER_N_COUNTERS; c++)
    kv_counter_set_update (self->counter_set, c, kv_peer_counters_get (&self->counters, c));
  if (self->events != NULL)
    {
      kv_counter_set_update (self->counter_set, KV_PEER_N_COUNTERS,
                             kv_peer_events_get_n_snapshots (self->events));
      kv_counter_set_update (self->counter_set, KV_PEER_N_COUNTERS + 1,
                             kv_peer_events_get_n_resyncs (self->events));
    }
  for (guint i = 0; self->clients != NULL && i < self->clients->len; i++)
    if (!kv_circuit_breaker_allows_requests (kv_peer_client_get_breaker (self->clients->pdata[i])))
      n_open++;
  kv_stats_set_gauge (stats, PEER_CONNECTIONS_OPEN,
                      self->server != NULL ? kv_peer_server_get_n_connections (self->server) : 0,
                      labels);
  kv_stats_set_gauge (stats, PEER_BREAKERS_OPEN, n_open, labels);
  kv_stats_set_gauge (stats, PEER_EVENT_SUBSCRIBERS,
                      self->events != NULL ? kv_peer_events_get_n_subscribers (self->events) : 0,
                      labels);
  kv_stats_set_gauge (stats, PEER_EVENT_KEYS,
                      self->events != NULL ? kv_peer_events_get_n_keys (self->events) : 0, labels);
  return stats;
}

/* ---- start ------------------------------------------------------------------- */

static gpointer
timer_main (gpointer data)
{
  KvPeerTier *self = data;

  g_main_context_push_thread_default (self->timer_context);
  g_main_loop_run (self->timer_loop);
  g_main_context_pop_thread_default (self->timer_context);
  return NULL;
}

/* Server I/O thread: a request is queued for the owner thread. */
static void
requests_queued (gpointer data)
{
  g_signal_emit (data, signals[SIGNAL_REQUESTS_QUEUED], 0);
}

/* What the messages of the clients (and their breakers) and of the
 * server call the tier: its metric label ("1:peer"). Any thread. */
static void
name_parts (KvPeerTier *self)
{
  g_autofree char *label = kv_secondary_tier_dup_metric_label (KV_SECONDARY_TIER (self));
  g_autofree char *name = g_strdup_printf ("peer tier %s", label);

  for (guint i = 0; self->clients != NULL && i < self->clients->len; i++)
    kv_peer_client_set_tier_label (self->clients->pdata[i], label);
  if (self->server != NULL)
    kv_peer_server_set_name (self->server, name);
}

static void
metric_label_changed (GObject    *object,
                      GParamSpec *pspec,
                      gpointer    data)
{
  KvPeerTier *self = KV_PEER_TIER (object);

  if (self->initialized)
    name_parts (self);
}

static gboolean
kv_peer_tier_initable_init (GInitable     *initable,
                            GCancellable  *cancellable,
                            GError       **error)
{
  KvPeerTier *self = KV_PEER_TIER (initable);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (initable);
  g_autoptr(GBytes) secret = NULL;
  g_autoptr(GTlsCertificate) certificate = NULL;
  g_autoptr(GTlsDatabase) database = NULL;
  g_auto(GStrv) peers = NULL;

  if (self->initialized)
    return TRUE;
  if (!check_settings (self, &secret, &certificate, &database, error))
    return FALSE;

  self->primary = kv_secondary_tier_get_primary (tier);
  if (self->primary == NULL)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "The peer tier needs the primary tier's buffer");
      return FALSE;
    }
  self->block_size = kv_host_buffer_get_slot_size (self->primary);
  kv_chunk_namespace_digest (self->namespace_, self->block_size, self->digest);
  if (self->max_inflight_bytes < self->block_size)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The peer tier's max-inflight-bytes (%" G_GUINT64_FORMAT ") is smaller than "
                   "one chunk (%" G_GSIZE_FORMAT " bytes)", self->max_inflight_bytes, self->block_size);
      return FALSE;
    }

  self->timer_context = g_main_context_new ();
  self->timer_loop = g_main_loop_new (self->timer_context, FALSE);
  self->timer_thread = g_thread_new ("kvtier-peer-timer", timer_main, self);

  peers = split_peers (self->peers);
  for (guint i = 0; peers[i] != NULL; i++)
    {
      KvPeerClientSettings settings = {
        .secret = secret,
        .block_size = self->block_size,
        .io_timeout_ms = self->io_timeout_ms,
        /* the fetches, and the lookup workers beside them */
        .max_connections = self->connections_per_peer + 2,
        .breaker_threshold = self->peer_breaker_threshold,
        .breaker_open_ms = self->peer_breaker_open_ms,
        .clock = kv_secondary_tier_get_clock (tier),
        .timer_context = self->timer_context,
        .tls = self->tls,
        .tls_database = database,
        .tls_certificate = certificate,
      };
      KvPeerClient *client;

      memcpy (settings.namespace_digest, self->digest, sizeof self->digest);
      client = kv_peer_client_new (peers[i], &settings, &self->counters, error);
      if (client == NULL)
        return FALSE;
      g_ptr_array_add (self->clients, client);
    }
  if (self->clients->len > 0)
    {
      self->async_lookup = kv_async_lookup_new (kv_secondary_tier_get_tier_type (tier),
                                                lookup_batch, self, NULL, 2, 8, 16384);
      /* the base class flushes and cleans it up, counts its checks as
       * pending and marks failed loads' keys as misses there */
      kv_secondary_tier_set_async_lookup (tier, self->async_lookup);
      /* a pool per peer: one slow peer holds its own threads only */
      self->fetch_pools = g_ptr_array_new ();
      for (guint i = 0; i < self->clients->len; i++)
        {
          GThreadPool *pool = g_thread_pool_new (fetch_group, self, (gint) self->connections_per_peer,
                                                 FALSE, error);

          if (pool == NULL)
            return FALSE;
          g_ptr_array_add (self->fetch_pools, pool);
        }
    }

  if (self->listen != NULL && self->listen[0] != '\0')
    {
      KvPeerServerSettings settings = {
        .secret = secret,
        .block_size = self->block_size,
        .max_connections = self->max_connections,
        .max_handshakes = self->max_handshakes,
        .max_handshakes_per_address = self->max_handshakes_per_address,
        .handshake_timeout_ms = self->handshake_timeout_ms,
        .idle_timeout_ms = self->idle_timeout_ms,
        .io_timeout_ms = self->io_timeout_ms,
        .max_inflight_bytes = self->max_inflight_bytes,
        .max_keys = self->max_keys,
        .tls_certificate = self->tls ? certificate : NULL,
        .tls_client_database = self->tls && self->tls_require_client_cert ? database : NULL,
      };

      memcpy (settings.namespace_digest, self->digest, sizeof self->digest);
      if (self->max_subscribers > 0)
        {
          KvPeerEventsSettings events_settings = {
            .max_subscribers = self->max_subscribers,
            .max_entries = self->max_keys,
            .backlog_bytes = self->events_backlog,
            .heartbeat_ms = self->heartbeat_ms,
            .io_timeout_ms = self->io_timeout_ms,
          };

          self->events = kv_peer_events_new (&events_settings, &self->counters);
          settings.events = self->events;
        }
      self->server = kv_peer_server_new (&settings, &self->counters, requests_queued, self);
      if (!kv_peer_server_listen (self->server, self->listen, error))
        return FALSE;
    }

  self->initialized = TRUE;
  name_parts (self);
  return TRUE;
}

static void
kv_peer_tier_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_peer_tier_initable_init;
}

/**
 * kv_peer_tier_get_listen_address:
 * @self: a peer tier
 *
 * The address the tier serves peers on, with the port it was given when
 * `listen` asked for port 0. Any thread.
 *
 * Returns: (transfer full) (nullable): "HOST:PORT", or %NULL when the tier
 *   does not serve
 */
char *
kv_peer_tier_get_listen_address (KvPeerTier *self)
{
  g_return_val_if_fail (KV_IS_PEER_TIER (self), NULL);
  return self->server != NULL ? kv_peer_server_get_address (self->server) : NULL;
}

static void
kv_peer_tier_drain (KvPeerTier *self)
{
  if (!self->draining && self->server != NULL)
    kv_peer_server_stop_accepting (self->server);
  self->draining = TRUE;
}

static void
kv_peer_tier_publish_event (KvPeerTier *self,
                            guint       source,
                            KvEvent    *event)
{
  if (self->events != NULL && event != NULL)
    kv_peer_events_publish (self->events, source, event);
}

/* ---- GObject -------------------------------------------------------------------- */

static void
kv_peer_tier_dispose (GObject *object)
{
  KvPeerTier *self = KV_PEER_TIER (object);

  stop_everything (self);
  g_clear_object (&self->server);
  g_clear_object (&self->events);
  g_clear_object (&self->async_lookup);

  G_OBJECT_CLASS (kv_peer_tier_parent_class)->dispose (object);
}

static void
kv_peer_tier_finalize (GObject *object)
{
  KvPeerTier *self = KV_PEER_TIER (object);

  g_clear_pointer (&self->clients, g_ptr_array_unref);
  g_clear_pointer (&self->counter_set, kv_counter_set_unref);
  g_clear_pointer (&self->locations, g_hash_table_unref);
  g_clear_pointer (&self->serve_requests, g_hash_table_unref);
  g_clear_pointer (&self->timer_loop, g_main_loop_unref);
  g_clear_pointer (&self->timer_context, g_main_context_unref);
  g_free (self->namespace_);
  g_free (self->peers);
  g_free (self->listen);
  g_free (self->secret_file);
  g_free (self->tls_cert_file);
  g_free (self->tls_key_file);
  g_free (self->tls_ca_file);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->idle_cond);

  G_OBJECT_CLASS (kv_peer_tier_parent_class)->finalize (object);
}

static void
kv_peer_tier_get_property (GObject    *object,
                           guint       prop_id,
                           GValue     *value,
                           GParamSpec *pspec)
{
  KvPeerTier *self = KV_PEER_TIER (object);

  switch (prop_id)
    {
    case PROP_NAMESPACE: g_value_set_string (value, self->namespace_); break;
    case PROP_PEERS: g_value_set_string (value, self->peers); break;
    case PROP_LISTEN: g_value_set_string (value, self->listen); break;
    case PROP_SECRET_FILE: g_value_set_string (value, self->secret_file); break;
    case PROP_TLS: g_value_set_boolean (value, self->tls); break;
    case PROP_TLS_CERT_FILE: g_value_set_string (value, self->tls_cert_file); break;
    case PROP_TLS_KEY_FILE: g_value_set_string (value, self->tls_key_file); break;
    case PROP_TLS_CA_FILE: g_value_set_string (value, self->tls_ca_file); break;
    case PROP_TLS_REQUIRE_CLIENT_CERT: g_value_set_boolean (value, self->tls_require_client_cert); break;
    case PROP_MAX_CONNECTIONS: g_value_set_uint (value, self->max_connections); break;
    case PROP_MAX_HANDSHAKES: g_value_set_uint (value, self->max_handshakes); break;
    case PROP_MAX_HANDSHAKES_PER_ADDRESS: g_value_set_uint (value, self->max_handshakes_per_address); break;
    case PROP_HANDSHAKE_TIMEOUT_MS: g_value_set_uint (value, self->handshake_timeout_ms); break;
    case PROP_IDLE_TIMEOUT_MS: g_value_set_uint (value, self->idle_timeout_ms); break;
    case PROP_IO_TIMEOUT_MS: g_value_set_uint (value, self->io_timeout_ms); break;
    case PROP_MAX_INFLIGHT_BYTES: g_value_set_uint64 (value, self->max_inflight_bytes); break;
    case PROP_MAX_KEYS_PER_REQUEST: g_value_set_uint (value, self->max_keys); break;
    case PROP_CONNECTIONS_PER_PEER: g_value_set_uint (value, self->connections_per_peer); break;
    case PROP_PEER_BREAKER_THRESHOLD: g_value_set_uint (value, self->peer_breaker_threshold); break;
    case PROP_PEER_BREAKER_OPEN_MS: g_value_set_uint (value, self->peer_breaker_open_ms); break;
    case PROP_MAX_SUBSCRIBERS: g_value_set_uint (value, self->max_subscribers); break;
    case PROP_EVENTS_BACKLOG: g_value_set_uint64 (value, self->events_backlog); break;
    case PROP_HEARTBEAT_MS: g_value_set_uint (value, self->heartbeat_ms); break;
    case PROP_BOUND_ADDRESS: g_value_take_string (value, kv_peer_tier_get_listen_address (self)); break;
    case PROP_EVENT_SEQ:
      g_value_set_uint64 (value, self->events != NULL ? kv_peer_events_get_seq (self->events) : 0);
      break;
    case PROP_EVENTS_PENDING:
      g_value_set_uint (value, self->events != NULL ? kv_peer_events_get_n_pending (self->events) : 0);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
set_string (char         **field,
            const GValue  *value)
{
  const char *text = g_value_get_string (value);

  g_free (*field);
  *field = text != NULL && text[0] != '\0' ? g_strdup (text) : NULL;
}

static void
kv_peer_tier_set_property (GObject      *object,
                           guint         prop_id,
                           const GValue *value,
                           GParamSpec   *pspec)
{
  KvPeerTier *self = KV_PEER_TIER (object);

  switch (prop_id)
    {
    case PROP_NAMESPACE:
      g_free (self->namespace_);
      self->namespace_ = g_value_dup_string (value);
      if (self->namespace_ == NULL)
        self->namespace_ = g_strdup ("default");
      break;
    case PROP_PEERS: set_string (&self->peers, value); break;
    case PROP_LISTEN: set_string (&self->listen, value); break;
    case PROP_SECRET_FILE: set_string (&self->secret_file, value); break;
    case PROP_TLS: self->tls = g_value_get_boolean (value); break;
    case PROP_TLS_CERT_FILE: set_string (&self->tls_cert_file, value); break;
    case PROP_TLS_KEY_FILE: set_string (&self->tls_key_file, value); break;
    case PROP_TLS_CA_FILE: set_string (&self->tls_ca_file, value); break;
    case PROP_TLS_REQUIRE_CLIENT_CERT: self->tls_require_client_cert = g_value_get_boolean (value); break;
    case PROP_MAX_CONNECTIONS: self->max_connections = g_value_get_uint (value); break;
    case PROP_MAX_HANDSHAKES: self->max_handshakes = g_value_get_uint (value); break;
    case PROP_MAX_HANDSHAKES_PER_ADDRESS: self->max_handshakes_per_address = g_value_get_uint (value); break;
    case PROP_HANDSHAKE_TIMEOUT_MS: self->handshake_timeout_ms = g_value_get_uint (value); break;
    case PROP_IDLE_TIMEOUT_MS: self->idle_timeout_ms = g_value_get_uint (value); break;
    case PROP_IO_TIMEOUT_MS: self->io_timeout_ms = g_value_get_uint (value); break;
    case PROP_MAX_INFLIGHT_BYTES: self->max_inflight_bytes = g_value_get_uint64 (value); break;
    case PROP_MAX_KEYS_PER_REQUEST: self->max_keys = g_value_get_uint (value); break;
    case PROP_CONNECTIONS_PER_PEER: self->connections_per_peer = g_value_get_uint (value); break;
    case PROP_PEER_BREAKER_THRESHOLD: self->peer_breaker_threshold = g_value_get_uint (value); break;
    case PROP_PEER_BREAKER_OPEN_MS: self->peer_breaker_open_ms = g_value_get_uint (value); break;
    case PROP_MAX_SUBSCRIBERS: self->max_subscribers = g_value_get_uint (value); break;
    case PROP_EVENTS_BACKLOG: self->events_backlog = g_value_get_uint64 (value); break;
    case PROP_HEARTBEAT_MS: self->heartbeat_ms = g_value_get_uint (value); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

#define CONSTRUCT_FLAGS (G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | \
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY)

static void
kv_peer_tier_class_init (KvPeerTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  object_class->dispose = kv_peer_tier_dispose;
  object_class->finalize = kv_peer_tier_finalize;
  object_class->get_property = kv_peer_tier_get_property;
  object_class->set_property = kv_peer_tier_set_property;

  tier_class->medium = KV_MEDIUM_CPU;
  /* it stores nothing of its own: no cascade job, nothing pinned for it */
  tier_class->accepts_cascaded_stores = FALSE;
  /* across a network, unless said otherwise (a request's load tier
   * filter matches it) */
  tier_class->locality = KV_LOCALITY_REMOTE;
  tier_class->lookup = kv_peer_tier_lookup;
  tier_class->submit_store = kv_peer_tier_submit_store;
  tier_class->submit_load = kv_peer_tier_submit_load;
  tier_class->has_pending_work = kv_peer_tier_has_pending_work;
  tier_class->on_new_request = kv_peer_tier_on_new_request;
  tier_class->serve_external_requests = kv_peer_tier_serve_external_requests;
  tier_class->drain_jobs = kv_peer_tier_drain_jobs;
  tier_class->shutdown = kv_peer_tier_shutdown;
  tier_class->register_metrics = kv_peer_tier_register_metrics;
  tier_class->get_stats = kv_peer_tier_get_stats;

  /**
   * KvPeerTier:namespace:
   *
   * The cache namespace (model, dtype, layout, parallelism): peers of
   * another namespace or chunk size are refused at the handshake.
   */
  properties[PROP_NAMESPACE] =
    g_param_spec_string ("namespace", NULL,
                         "The cache namespace (model, dtype, layout, parallelism); peers of another one are refused", "default", CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:peers:
   *
   * The peers to ask, "HOST:PORT" separated by commas, in order.
   */
  properties[PROP_PEERS] =
    g_param_spec_string ("peers", NULL,
                         "The peers to ask, HOST:PORT separated by commas, in order", NULL, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:listen:
   *
   * "HOST:PORT" to serve this node's chunks on (port 0: any free port), or
   * empty not to serve.
   */
  properties[PROP_LISTEN] =
    g_param_spec_string ("listen", NULL,
                         "HOST:PORT to serve this node's chunks on (port 0: any free port; empty: do not serve)", NULL, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:secret-file:
   *
   * The file holding the nodes' shared secret (16 bytes to 4 KiB, mode
   * 0600, owned by this user).
   */
  properties[PROP_SECRET_FILE] =
    g_param_spec_string ("secret-file", NULL,
                         "File holding the nodes' shared secret (16 bytes to 4 KiB, mode 0600)", NULL, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:tls:
   *
   * Whether connections run over TLS.
   */
  properties[PROP_TLS] =
    g_param_spec_boolean ("tls", NULL,
                          "Connections run over TLS", FALSE, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:tls-cert-file:
   *
   * PEM certificate: the server's, and the client's for mutual TLS.
   */
  properties[PROP_TLS_CERT_FILE] =
    g_param_spec_string ("tls-cert-file", NULL,
                         "PEM certificate: the server's, and the client's for mutual TLS", NULL, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:tls-key-file:
   *
   * The PEM private key of [property@Kv.PeerTier:tls-cert-file].
   */
  properties[PROP_TLS_KEY_FILE] =
    g_param_spec_string ("tls-key-file", NULL,
                         "PEM private key of tls-cert-file", NULL, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:tls-ca-file:
   *
   * PEM CA certificates trusted for the peers' certificates (default: the
   * system's).
   */
  properties[PROP_TLS_CA_FILE] =
    g_param_spec_string ("tls-ca-file", NULL,
                         "PEM CA certificates trusted for the peers' certificates (none: the system's)", NULL, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:tls-require-client-cert:
   *
   * Mutual TLS: the server requires a client certificate signed by
   * [property@Kv.PeerTier:tls-ca-file].
   */
  properties[PROP_TLS_REQUIRE_CLIENT_CERT] =
    g_param_spec_boolean ("tls-require-client-cert", NULL,
                          "Mutual TLS: the server requires a client certificate signed by tls-ca-file", FALSE, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:max-connections:
   *
   * Authenticated connections the server holds open at once; one more is
   * refused (`ERROR` busy) once it authenticated. Connections still in
   * their handshake have their own budget,
   * [property@KvPeerTier:max-handshakes]. Both are lowered to fit the
   * process's descriptor limit (`RLIMIT_NOFILE`), with a message.
   */
  properties[PROP_MAX_CONNECTIONS] =
    g_param_spec_uint ("max-connections", NULL,
                       "Authenticated connections the server holds open at once; one more is answered busy",
                       1, 65536, 1024, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:max-handshakes:
   *
   * Connections the server holds that have not authenticated yet, from
   * every address together; a new one beyond it closes the oldest (a real
   * peer authenticates in a few round trips, a hostile one holds on).
   */
  properties[PROP_MAX_HANDSHAKES] =
    g_param_spec_uint ("max-handshakes", NULL,
                       "Connections that have not authenticated yet, from every address together",
                       1, 65536, 128, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:max-handshakes-per-address:
   *
   * Connections not authenticated yet from one source address; more from
   * that address are closed at accept.
   */
  properties[PROP_MAX_HANDSHAKES_PER_ADDRESS] =
    g_param_spec_uint ("max-handshakes-per-address", NULL,
                       "Connections that have not authenticated yet from one source address",
                       1, 65536, 16, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:handshake-timeout-ms:
   *
   * Time a new connection has to authenticate (TLS included).
   */
  properties[PROP_HANDSHAKE_TIMEOUT_MS] =
    g_param_spec_uint ("handshake-timeout-ms", NULL,
                       "Milliseconds a new connection has to authenticate, TLS handshake included",
                       1, G_MAXUINT, 1000, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:idle-timeout-ms:
   *
   * An authenticated connection that sends nothing for this long is closed.
   */
  properties[PROP_IDLE_TIMEOUT_MS] =
    g_param_spec_uint ("idle-timeout-ms", NULL,
                       "Milliseconds of silence after which an authenticated connection is closed", 1, G_MAXUINT, 60000, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:io-timeout-ms:
   *
   * Time for one frame to be read or written in full, on either side: a
   * peer slower than this (a slow reader, a stalled node) is dropped.
   */
  properties[PROP_IO_TIMEOUT_MS] =
    g_param_spec_uint ("io-timeout-ms", NULL,
                       "Milliseconds for one frame to be read or written in full", 1, G_MAXUINT, 2000, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:max-inflight-bytes:
   *
   * The most chunk bytes one FETCH may ask of the server, per connection.
   */
  properties[PROP_MAX_INFLIGHT_BYTES] =
    g_param_spec_uint64 ("max-inflight-bytes", NULL,
                         "Most chunk bytes one FETCH may ask of the server, per connection", 1, G_MAXUINT64, 256 << 20, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:max-keys-per-request:
   *
   * The most keys one LOOKUP or FETCH may carry.
   */
  properties[PROP_MAX_KEYS_PER_REQUEST] =
    g_param_spec_uint ("max-keys-per-request", NULL,
                       "Most keys one LOOKUP or FETCH may carry", 1, KV_PEER_MAX_KEYS_LIMIT, 4096,
                       CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:connections-per-peer:
   *
   * Fetches run at once per peer, each on its own connection (lookups use
   * up to two more connections).
   */
  properties[PROP_CONNECTIONS_PER_PEER] =
    g_param_spec_uint ("connections-per-peer", NULL,
                       "Fetches run at once per peer, each on its own connection", 1, 64, 4, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:peer-breaker-threshold:
   *
   * Failed requests in a row that open one peer's circuit breaker (0:
   * never).
   */
  properties[PROP_PEER_BREAKER_THRESHOLD] =
    g_param_spec_uint ("peer-breaker-threshold", NULL,
                       "Failed requests in a row that open one peer's circuit breaker (0: never)", 0, G_MAXUINT, 3, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:peer-breaker-open-ms:
   *
   * How long an open peer breaker skips the peer before a request tries
   * it again.
   */
  properties[PROP_PEER_BREAKER_OPEN_MS] =
    g_param_spec_uint ("peer-breaker-open-ms", NULL,
                       "Milliseconds an open peer breaker skips the peer", 0, G_MAXUINT, 1000, CONSTRUCT_FLAGS);

  /**
   * KvPeerTier:max-subscribers:
   *
   * Subscribers that may follow this node's chunk events at once (the
   * event stream of doc/protocol.md; needs `listen`); 0: no stream.
   */
  properties[PROP_MAX_SUBSCRIBERS] =
    g_param_spec_uint ("max-subscribers", NULL,
                       "Subscribers that may follow this node's chunk events at once (0: no event stream)", 0, 1024, 16, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:events-backlog:
   *
   * Bytes of recent event frames kept for subscribers that read slowly;
   * one that falls further behind gets a new snapshot.
   */
  properties[PROP_EVENTS_BACKLOG] =
    g_param_spec_uint64 ("events-backlog", NULL,
                         "Bytes of recent event frames kept for subscribers that read slowly", 4096, G_MAXUINT64, 16 << 20, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:heartbeat-ms:
   *
   * How often a subscriber that is up to date hears from the node when
   * nothing changes, so it can tell a quiet node from a dead one.
   */
  properties[PROP_HEARTBEAT_MS] =
    g_param_spec_uint ("heartbeat-ms", NULL,
                       "Milliseconds between heartbeats to an up-to-date subscriber when nothing changes", 10, 600000, 1000, CONSTRUCT_FLAGS);
  /**
   * KvPeerTier:event-seq:
   *
   * The sequence number of the last event frame the stream made.
   */
  properties[PROP_EVENT_SEQ] =
    g_param_spec_uint64 ("event-seq", NULL,
                         "Sequence number of the last event frame the stream made", 0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /**
   * KvPeerTier:events-pending:
   *
   * Events handed to ::publish-event that the stream has not applied yet.
   */
  properties[PROP_EVENTS_PENDING] =
    g_param_spec_uint ("events-pending", NULL,
                       "Events handed to ::publish-event that the stream has not applied yet", 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /**
   * KvPeerTier:bound-address:
   *
   * "HOST:PORT" the tier serves on (with the port chosen for port 0), or
   * %NULL when it does not serve.
   */
  properties[PROP_BOUND_ADDRESS] =
    g_param_spec_string ("bound-address", NULL,
                         "HOST:PORT the tier serves on, once listening", NULL,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);

  /**
   * KvPeerTier::requests-queued:
   *
   * Emitted on the server's thread when a peer's request waits for the
   * owner thread: a node that serves runs a scheduler step soon after
   * (`kvtier serve` does), which answers it in
   * [vfunc@Kv.SecondaryTier.serve_external_requests].
   */
  signals[SIGNAL_REQUESTS_QUEUED] =
    g_signal_new ("requests-queued", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 0);

  /**
   * KvPeerTier::drain:
   *
   * An action: stop accepting peers before a shutdown. The requests of the
   * peers already connected are still answered, and keep
   * [vfunc@Kv.SecondaryTier.has_pending_work] true until they are. Owner
   * thread.
   */
  signals[SIGNAL_DRAIN] =
    g_signal_new_class_handler ("drain", G_TYPE_FROM_CLASS (klass),
                                G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
                                G_CALLBACK (kv_peer_tier_drain), NULL, NULL, NULL, G_TYPE_NONE, 0);

  /**
   * KvPeerTier::publish-event:
   * @source: where the event happened, numbered as [enum@Kv.ChunkSource]:
   *   0 the device, 1 the primary tier, 2 + t the manager's secondary
   *   tier t
   * @event: the event
   *
   * An action: hands one of this node's chunk events to the event stream
   * (doc/protocol.md). Whoever drives the manager emits it for every event
   * it takes from the primary tier and the tiers (`kvtier serve` does),
   * and for the device's own. Queues only: the stream does its per-key
   * work on the server's thread. Does nothing without a stream.
   */
  signals[SIGNAL_PUBLISH_EVENT] =
    g_signal_new_class_handler ("publish-event", G_TYPE_FROM_CLASS (klass),
                                G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
                                G_CALLBACK (kv_peer_tier_publish_event), NULL, NULL, NULL,
                                G_TYPE_NONE, 2, G_TYPE_UINT, KV_TYPE_EVENT);
}

static void
kv_peer_tier_init (KvPeerTier *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->idle_cond);
  self->namespace_ = g_strdup ("default");
  self->max_connections = 1024;
  self->max_handshakes = 128;
  self->max_handshakes_per_address = 16;
  self->handshake_timeout_ms = 1000;
  self->idle_timeout_ms = 60000;
  self->io_timeout_ms = 2000;
  self->max_inflight_bytes = 256 << 20;
  self->max_keys = 4096;
  self->connections_per_peer = 4;
  self->peer_breaker_threshold = 3;
  self->peer_breaker_open_ms = 1000;
  self->max_subscribers = 16;
  self->events_backlog = 16 << 20;
  self->heartbeat_ms = 1000;
  self->clients = g_ptr_array_new_with_free_func (g_object_unref);
  self->locations = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                           (GDestroyNotify) kv_key_unref, NULL);
  self->serve_requests = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, g_object_unref);
  /* this tier's default for the base class's deadline */
  kv_secondary_tier_set_deadline_ms (KV_SECONDARY_TIER (self), 5000);
  {
    const char *names[KV_PEER_N_COUNTERS + 3] = { NULL };

    for (guint c = 0; c < KV_PEER_N_COUNTERS; c++)
      names[c] = counter_info[c].name;
    names[KV_PEER_N_COUNTERS] = PEER_EVENT_SNAPSHOTS;
    names[KV_PEER_N_COUNTERS + 1] = PEER_EVENT_RESYNCS;
    self->counter_set = kv_counter_set_new (names);
  }
  kv_secondary_tier_set_counters (KV_SECONDARY_TIER (self), self->counter_set);
  g_signal_connect (self, "notify::metric-label", G_CALLBACK (metric_label_changed), NULL);
}
