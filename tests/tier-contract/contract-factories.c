/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "contract-factory.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "contract-pull-tier.h"
#include "kv-fault-tier.h"
#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-object.h"

#ifdef CONTRACT_HAVE_FS
#include "test-fs-tier.h"
#endif
#ifdef CONTRACT_HAVE_REDIS
#include "test-redis-server.h"
#include "test-redis-tier.h"
#endif
#ifdef CONTRACT_HAVE_PEER
#include "test-peer-harness.h"
#endif
#ifdef CONTRACT_HAVE_S3
#include "kv-s3-client.h"
#include "kv-s3-tier.h"
#include "s3-gateway.h"
#endif

#define CONTRACT_SLOT 8192

/* ---- example ------------------------------------------------------------ */

/* The example tier, through KvFaultTier: its test subclass, which behaves
 * as the example tier unless told otherwise. The suite only uses its stall
 * (jobs submitted while stalled are held before they reach the example
 * tier's workers) to stand for storage that stops answering; the example
 * tier copies memory and has no storage of its own to stop. */
static KvSecondaryTier *
example_new_tier (KvHostBuffer  *buffer,
                  KvClock       *clock,
                  gpointer      *state)
{
  g_autoptr(TestProperties) props = test_properties_new (KV_TYPE_FAULT_TIER);

  test_properties_set (props, "tier-type", G_TYPE_STRING, "example");
  test_properties_set (props, "primary", KV_TYPE_HOST_BUFFER, buffer);
  test_properties_set (props, "clock", KV_TYPE_CLOCK, clock);
  return KV_SECONDARY_TIER (test_properties_new_initable (props, NULL));
}

static void
example_stall (gpointer         state,
               KvSecondaryTier *tier,
               gboolean         stalled)
{
  KvFaultMode mode = stalled ? KV_FAULT_STALL : KV_FAULT_NONE;

  kv_fault_tier_set_store_fault (KV_FAULT_TIER (tier), mode);
  kv_fault_tier_set_load_fault (KV_FAULT_TIER (tier), mode);
  if (!stalled)
    kv_fault_tier_release_stalled (KV_FAULT_TIER (tier));
}

/* ---- a C tier in the pull model ----------------------------------------- */

/* ContractPullTier (contract-pull-tier.c): reports through
 * get_finished_jobs, as vLLM's tiers and most Python tiers do. */
static KvSecondaryTier *
pull_new_tier (KvHostBuffer  *buffer,
               KvClock       *clock,
               gpointer      *state)
{
  g_autoptr(TestProperties) props = test_properties_new (CONTRACT_TYPE_PULL_TIER);

  test_properties_set (props, "tier-type", G_TYPE_STRING, "c-pull");
  test_properties_set (props, "primary", KV_TYPE_HOST_BUFFER, buffer);
  test_properties_set (props, "clock", KV_TYPE_CLOCK, clock);
  return KV_SECONDARY_TIER (test_properties_new_initable (props, NULL));
}

static void
pull_stall (gpointer         state,
            KvSecondaryTier *tier,
            gboolean         stalled)
{
  contract_pull_tier_set_stalled (CONTRACT_PULL_TIER (tier), stalled);
}

static void
pull_damage (gpointer         state,
             KvSecondaryTier *tier,
             KvKey           *key)
{
  contract_pull_tier_damage (CONTRACT_PULL_TIER (tier), key);
}

static gboolean
pull_is_idle (gpointer         state,
              KvSecondaryTier *tier)
{
  return contract_pull_tier_is_idle (CONTRACT_PULL_TIER (tier));
}

/* ---- fs ----------------------------------------------------------------- */

#ifdef CONTRACT_HAVE_FS

typedef struct
{
  char *root;
} FsState;

/* layout=kvtier makes 256 shard directories in a new root, which takes
 * seconds on a busy disk: its tiers share one root per program, emptied
 * of chunk files after each case (a new tier finds it as after a clean
 * restart). layout=slab gets a new root for each tier. */
static char *fs_shared_root;

static void
remove_chunk_files (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR))
        remove_chunk_files (child);
      else if (g_str_has_suffix (name, ".kv") || g_str_has_suffix (name, ".tmp"))
        g_assert_cmpint (unlink (child), ==, 0);
    }
}

static void
fs_free_state (gpointer data)
{
  FsState *fs = data;

  if (g_strcmp0 (fs->root, fs_shared_root) == 0)
    remove_chunk_files (fs->root);
  else
    test_dir_remove (fs->root);
  g_free (fs->root);
  g_free (fs);
}

static void
fs_teardown (void)
{
  if (fs_shared_root != NULL)
    test_dir_remove (fs_shared_root);
  g_clear_pointer (&fs_shared_root, g_free);
}

static KvSecondaryTier *
fs_new_tier (KvHostBuffer    *buffer,
             KvClock         *clock,
             gpointer        *state,
             KvFsLayoutKind   layout,
             KvFsIoEngine     engine)
{
  g_autoptr(GError) error = NULL;
  FsVariant variant = { engine, KV_FS_O_DIRECT_AUTO, layout };
  FsState *fs = g_new0 (FsState, 1);
  KvFsTier *tier;

  if (layout == KV_FS_LAYOUT_KIND_KVTIER)
    {
      if (fs_shared_root == NULL)
        fs_shared_root = test_dir_make ("kvtier-contract-fs");
      fs->root = g_strdup (fs_shared_root);
    }
  else
    fs->root = test_dir_make ("kvtier-contract-fs");
  *state = fs;
  tier = fs_test_tier_new_full (buffer, fs->root, &variant, clock, &error, NULL);
  g_assert_no_error (error);
  kv_fs_tier_wait_index_ready (tier);
  return KV_SECONDARY_TIER (tier);
}

#define FS_FACTORY_NEW(layout_name, engine_name, layout, engine) \
  static KvSecondaryTier * \
  fs_new_##layout_name##_##engine_name (KvHostBuffer *buffer, KvClock *clock, gpointer *state) \
  { \
    return fs_new_tier (buffer, clock, state, layout, engine); \
  }
FS_FACTORY_NEW (kvtier, uring, KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_URING)
FS_FACTORY_NEW (kvtier, gio, KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_GIO)
FS_FACTORY_NEW (kvtier, threads, KV_FS_LAYOUT_KIND_KVTIER, KV_FS_IO_ENGINE_THREADS)
FS_FACTORY_NEW (slab, uring, KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_URING)
FS_FACTORY_NEW (slab, gio, KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_GIO)
FS_FACTORY_NEW (slab, threads, KV_FS_LAYOUT_KIND_SLAB, KV_FS_IO_ENGINE_THREADS)
#undef FS_FACTORY_NEW

static void
fs_stall (gpointer         state,
          KvSecondaryTier *tier,
          gboolean         stalled)
{
  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (KV_FS_TIER (tier)), stalled);
}

/* Flips a bit in the middle of the chunk's payload, in its file or its
 * slab slot, as a bad sector would. */
static void
fs_damage (gpointer         state,
           KvSecondaryTier *tier,
           KvKey           *key)
{
  g_autofree char *path = NULL;
  guint64 offset = 0;
  guint8 byte;
  int fd;

  if (!kv_fs_tier_get_slab_location (KV_FS_TIER (tier), key, &path, &offset))
    path = kv_fs_tier_get_chunk_path (KV_FS_TIER (tier), key);
  g_assert_nonnull (path);
  offset += KV_CHUNK_HEADER_SIZE + 99;
  fd = open (path, O_RDWR);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (pread (fd, &byte, 1, offset), ==, 1);
  byte ^= 0x10;
  g_assert_cmpint (pwrite (fd, &byte, 1, offset), ==, 1);
  close (fd);
}

static gboolean
fs_setup (char **skip_reason)
{
  return TRUE;
}

#if KV_FS_HAVE_URING
/* Valgrind cannot run io_uring (test-fs-tier.h) */
static gboolean
fs_setup_uring (char **skip_reason)
{
  if (fs_test_skip_engine (KV_FS_IO_ENGINE_URING))
    {
      *skip_reason = g_strdup ("the uring engine does not run under valgrind");
      return FALSE;
    }
  return TRUE;
}
#else
static gboolean
fs_setup_uring (char **skip_reason)
{
  *skip_reason = g_strdup ("built without liburing");
  return FALSE;
}
#endif

#endif /* CONTRACT_HAVE_FS */

/* ---- redis -------------------------------------------------------------- */

#ifdef CONTRACT_HAVE_REDIS

#define REDIS_CLUSTER_NODES 6

/* The servers of the program: one standalone, or a cluster of 3 masters
 * and 3 replicas; every tier gets a namespace of its own on them. */
static char *redis_dir;
static RedisServer redis_servers[REDIS_CLUSTER_NODES];
static guint redis_n_servers;
static char *redis_address;
static gboolean redis_is_cluster;

typedef struct
{
  char *namespace;
} RedisState;

static gboolean
redis_setup_common (char     **skip_reason,
                    gboolean   cluster)
{
  g_autofree char *server = g_find_program_in_path ("redis-server");
  g_autofree char *cli = g_find_program_in_path ("redis-cli");

  if (server == NULL || cli == NULL)
    {
      *skip_reason = g_strdup ("redis-server or redis-cli is not installed");
      return FALSE;
    }
  /* redis_test_init() prints a TAP plan only when it cannot run */
  g_assert_true (redis_test_init ());
  redis_dir = test_dir_make ("kvtier-contract-redis");
  redis_is_cluster = cluster;
  if (cluster)
    {
      redis_n_servers = REDIS_CLUSTER_NODES;
      redis_address = redis_cluster_start (redis_servers, REDIS_CLUSTER_NODES, 1, redis_dir);
    }
  else
    {
      redis_n_servers = 1;
      redis_server_start (&redis_servers[0], redis_dir, NULL);
      redis_address = redis_server_address (&redis_servers[0]);
    }
  return TRUE;
}

static gboolean
redis_setup (char **skip_reason)
{
  return redis_setup_common (skip_reason, FALSE);
}

static gboolean
redis_cluster_setup (char **skip_reason)
{
  return redis_setup_common (skip_reason, TRUE);
}

static void
redis_teardown (void)
{
  for (guint i = 0; i < redis_n_servers; i++)
    redis_server_clear (&redis_servers[i]);
  test_dir_remove (redis_dir);
  g_clear_pointer (&redis_dir, g_free);
  g_clear_pointer (&redis_address, g_free);
}

static void
redis_free_state (gpointer data)
{
  RedisState *redis = data;

  g_free (redis->namespace);
  g_free (redis);
}

static KvSecondaryTier *
redis_new_tier (KvHostBuffer  *buffer,
                KvClock       *clock,
                gpointer      *state)
{
  static guint serial;
  g_autoptr(GError) error = NULL;
  RedisState *redis = g_new0 (RedisState, 1);
  KvRedisTier *tier;

  redis->namespace = g_strdup_printf ("contract-%u-%u", (guint) getpid (), serial++);
  *state = redis;
  tier = redis_test_tier_new_full (buffer, redis_address, &error,
                                   "cluster", redis_is_cluster,
                                   "namespace", redis->namespace,
                                   "clock", clock,
                                   NULL);
  g_assert_no_error (error);
  return KV_SECONDARY_TIER (tier);
}

/* SIGSTOP: the servers keep their connections but answer nothing. */
static void
redis_stall (gpointer         state,
             KvSecondaryTier *tier,
             gboolean         stalled)
{
  for (guint i = 0; i < redis_n_servers; i++)
    kill (redis_servers[i].pid, stalled ? SIGSTOP : SIGCONT);
}

/* Overwrites the chunk's value with one that is not a chunk record. */
static void
redis_damage (gpointer         state,
              KvSecondaryTier *tier,
              KvKey           *key)
{
  g_autofree char *name = kv_redis_tier_get_redis_key (KV_REDIS_TIER (tier), key);
  g_autofree char *reply = NULL;

  if (redis_is_cluster)
    reply = redis_cli (&redis_servers[0], "-c", "SET", name, "not a chunk", NULL);
  else
    reply = redis_cli (&redis_servers[0], "SET", name, "not a chunk", NULL);
  g_assert_cmpstr (reply, ==, "OK");
}

#endif /* CONTRACT_HAVE_REDIS */

/* ---- peer --------------------------------------------------------------- */

#ifdef CONTRACT_HAVE_PEER

#define PEER_SEEDED 64

/* A `kvtier serve` node on loopback holding the synthetic chunks [0, 64)
 * in its primary; the tier under test asks it. The peer tier stores
 * nothing of its own. */
static KvTierRegistry *peer_registry;
static PeerNode *peer_node;
static GType peer_type;

static gboolean
peer_setup (char **skip_reason)
{
  g_autoptr(GError) error = NULL;
  const char *module = g_getenv ("KVTIER_CONTRACT_PEER_MODULE");

  if (module == NULL || g_getenv ("KVTIER_EXE") == NULL)
    {
      *skip_reason = g_strdup ("KVTIER_CONTRACT_PEER_MODULE and KVTIER_EXE are not set "
                               "(run it through meson test)");
      return FALSE;
    }
  harness_init ();
  peer_registry = kv_tier_registry_new ();
  g_assert_true (kv_tier_registry_load_plugin (peer_registry, module, &error));
  g_assert_no_error (error);
  peer_type = kv_tier_registry_lookup_tier_type (peer_registry, "peer", &error);
  g_assert_no_error (error);
  peer_node = peer_node_start ("", CONTRACT_SLOT / 1024, 0, PEER_SEEDED);
  return TRUE;
}

static void
peer_teardown (void)
{
  g_clear_pointer (&peer_node, peer_node_free);
  g_clear_object (&peer_registry);
  harness_cleanup ();
}

static KvSecondaryTier *
peer_new_tier (KvHostBuffer  *buffer,
               KvClock       *clock,
               gpointer      *state)
{
  g_autoptr(TestProperties) props = test_properties_new (peer_type);
  g_autoptr(GError) error = NULL;
  GObject *tier;

  test_properties_set (props, "tier-type", G_TYPE_STRING, "peer");
  test_properties_set (props, "primary", KV_TYPE_HOST_BUFFER, buffer);
  test_properties_set (props, "clock", KV_TYPE_CLOCK, clock);
  test_properties_set (props, "peers", G_TYPE_STRING, peer_node->peer_address);
  test_properties_set (props, "secret-file", G_TYPE_STRING, harness_secret_path ());
  test_properties_set (props, "namespace", G_TYPE_STRING, "test-model/fp16/tp1");
  tier = test_properties_new_initable (props, &error);
  g_assert_no_error (error);
  return KV_SECONDARY_TIER (tier);
}

static void
peer_stall (gpointer         state,
            KvSecondaryTier *tier,
            gboolean         stalled)
{
  peer_node_signal (peer_node, stalled ? SIGSTOP : SIGCONT);
}

static KvKey *
peer_key (guint i)
{
  return synthetic_key (i);
}

static void
peer_fill (guint8 *slot,
           gsize   len,
           guint   i)
{
  synthetic_fill (slot, len, i);
}

#endif /* CONTRACT_HAVE_PEER */

/* ---- s3 ----------------------------------------------------------------- */

#ifdef CONTRACT_HAVE_S3

#define S3_BUCKET "kvtier-contract"

/* One Ceph RADOS Gateway for the program (tests/s3/s3-gateway.c); every
 * tier gets a namespace of its own in its one bucket. */
static S3Gateway *s3_gateway;

typedef struct
{
  char *namespace;
} S3State;

/* A plain client of the gateway's bucket, for the bucket itself and for
 * damage done behind the tier's back. */
static KvS3Client *
s3_client_new (void)
{
  KvS3ClientConfig config = {
    .endpoint = s3_gateway->endpoint, .bucket = S3_BUCKET, .region = "us-east-1",
    .addressing = KV_S3_ADDRESSING_PATH,
    .access_key = s3_gateway->access_key, .secret_key = s3_gateway->secret_key,
    .max_connections = 1, .connect_timeout_ms = 2000, .reply_timeout_ms = 10000,
    .max_attempts = 1, .retry_base_ms = 20,
  };
  g_autoptr(GError) error = NULL;
  KvS3Client *client = kv_s3_client_new (&config, &error);

  g_assert_no_error (error);
  return client;
}

static void
s3_put (const char   *key,
        const guint8 *body,
        gsize         len)
{
  KvS3Client *client = s3_client_new ();
  KvS3Op op;

  kv_s3_op_init (&op, KV_S3_METHOD_PUT, key);
  op.body[0] = body;
  op.body_len[0] = len;
  kv_s3_client_run (client, &op);
  g_assert_no_error (op.error);
  g_assert_cmpint (op.outcome, ==, KV_S3_OP_OK);
  kv_s3_op_clear (&op);
  kv_s3_client_shutdown (client);
  g_object_unref (client);
}

static gboolean
s3_setup (char **skip_reason)
{
  g_autoptr(GError) error = NULL;
  char *missing = s3_gateway_missing ();

  if (missing != NULL)
    {
      *skip_reason = missing;
      return FALSE;
    }
  s3_gateway = s3_gateway_start (&error);
  g_assert_no_error (error);
  s3_put (NULL, NULL, 0);   /* the bucket */
  return TRUE;
}

static void
s3_teardown (void)
{
  g_clear_pointer (&s3_gateway, s3_gateway_free);
}

static void
s3_free_state (gpointer data)
{
  S3State *s3 = data;

  g_free (s3->namespace);
  g_free (s3);
}

static KvSecondaryTier *
s3_new_tier (KvHostBuffer  *buffer,
             KvClock       *clock,
             gpointer      *state)
{
  static guint serial;
  g_autoptr(TestProperties) props = test_properties_new (KV_TYPE_S3_TIER);
  g_autoptr(GError) error = NULL;
  S3State *s3 = g_new0 (S3State, 1);
  GObject *tier;

  s3->namespace = g_strdup_printf ("contract-%u-%u", (guint) getpid (), serial++);
  *state = s3;
  test_properties_set (props, "tier-type", G_TYPE_STRING, "s3");
  test_properties_set (props, "primary", KV_TYPE_HOST_BUFFER, buffer);
  test_properties_set (props, "clock", KV_TYPE_CLOCK, clock);
  test_properties_set (props, "endpoint", G_TYPE_STRING, s3_gateway->endpoint);
  test_properties_set (props, "bucket", G_TYPE_STRING, S3_BUCKET);
  test_properties_set (props, "access-key", G_TYPE_STRING, s3_gateway->access_key);
  test_properties_set (props, "secret-key", G_TYPE_STRING, s3_gateway->secret_key);
  test_properties_set (props, "namespace", G_TYPE_STRING, s3->namespace);
  tier = test_properties_new_initable (props, &error);
  g_assert_no_error (error);
  return KV_SECONDARY_TIER (tier);
}

/* SIGSTOP: the gateway keeps its connections but answers nothing. */
static void
s3_stall (gpointer         state,
          KvSecondaryTier *tier,
          gboolean         stalled)
{
  kill (s3_gateway->rgw_pid, stalled ? SIGSTOP : SIGCONT);
}

/* Overwrites the chunk's object with one that is not a chunk record. */
static void
s3_damage (gpointer         state,
           KvSecondaryTier *tier,
           KvKey           *key)
{
  g_autofree char *name = kv_s3_tier_get_object_key (KV_S3_TIER (tier), key);

  s3_put (name, (const guint8 *) "not a chunk", 11);
}

#endif /* CONTRACT_HAVE_S3 */

/* ---- the table ---------------------------------------------------------- */

static void
no_state (gpointer state)
{
}

#define FS_CAPS (CONTRACT_CAN_STORE | CONTRACT_CANCELS | CONTRACT_PROBES | CONTRACT_CAN_DAMAGE)
/* A SET already sent is executed by the server when it resumes: a redis
 * store cannot be called back once it left (the tier says so:
 * can-cancel-stores is FALSE). */
#define REDIS_CAPS (CONTRACT_CAN_STORE | CONTRACT_PROBES | CONTRACT_CAN_DAMAGE)
/* An aborted PUT whose body reached the stalled gateway's socket is
 * executed when it resumes, as a redis SET: not CONTRACT_CANCELS. */
#define S3_CAPS (CONTRACT_CAN_STORE | CONTRACT_PROBES | CONTRACT_CAN_DAMAGE)

const ContractFactory contract_factories[] = {
  { "example", CONTRACT_CAN_STORE | CONTRACT_CANCELS, CONTRACT_SLOT, 0,
    NULL, NULL, example_new_tier, no_state, example_stall, NULL, NULL,
    test_chunk_key, test_chunk_fill },
  { "c-pull", CONTRACT_CAN_STORE | CONTRACT_CANCELS | CONTRACT_CAN_DAMAGE, CONTRACT_SLOT, 0,
    NULL, NULL, pull_new_tier, no_state, pull_stall, pull_damage, pull_is_idle,
    test_chunk_key, test_chunk_fill },
#ifdef CONTRACT_HAVE_FS
  { "fs-kvtier-uring", FS_CAPS, FS_TEST_SLOT, 0,
    fs_setup_uring, fs_teardown, fs_new_kvtier_uring, fs_free_state, fs_stall, fs_damage, NULL,
    test_chunk_key, test_chunk_fill },
  { "fs-kvtier-gio", FS_CAPS, FS_TEST_SLOT, 0,
    fs_setup, fs_teardown, fs_new_kvtier_gio, fs_free_state, fs_stall, fs_damage, NULL,
    test_chunk_key, test_chunk_fill },
  { "fs-kvtier-threads", FS_CAPS, FS_TEST_SLOT, 0,
    fs_setup, fs_teardown, fs_new_kvtier_threads, fs_free_state, fs_stall, fs_damage, NULL,
    test_chunk_key, test_chunk_fill },
  { "fs-slab-uring", FS_CAPS, FS_TEST_SLOT, 0,
    fs_setup_uring, fs_teardown, fs_new_slab_uring, fs_free_state, fs_stall, fs_damage, NULL,
    test_chunk_key, test_chunk_fill },
  { "fs-slab-gio", FS_CAPS, FS_TEST_SLOT, 0,
    fs_setup, fs_teardown, fs_new_slab_gio, fs_free_state, fs_stall, fs_damage, NULL,
    test_chunk_key, test_chunk_fill },
  { "fs-slab-threads", FS_CAPS, FS_TEST_SLOT, 0,
    fs_setup, fs_teardown, fs_new_slab_threads, fs_free_state, fs_stall, fs_damage, NULL,
    test_chunk_key, test_chunk_fill },
#endif
#ifdef CONTRACT_HAVE_REDIS
  { "redis", REDIS_CAPS, CONTRACT_SLOT, 0,
    redis_setup, redis_teardown, redis_new_tier, redis_free_state, redis_stall, redis_damage, NULL,
    test_chunk_key, test_chunk_fill },
  { "redis-cluster", REDIS_CAPS, CONTRACT_SLOT, 0,
    redis_cluster_setup, redis_teardown, redis_new_tier, redis_free_state, redis_stall,
    redis_damage, NULL, test_chunk_key, test_chunk_fill },
#endif
#ifdef CONTRACT_HAVE_S3
  { "s3", S3_CAPS, CONTRACT_SLOT, 0,
    s3_setup, s3_teardown, s3_new_tier, s3_free_state, s3_stall, s3_damage, NULL,
    test_chunk_key, test_chunk_fill },
#endif
#ifdef CONTRACT_HAVE_PEER
  { "peer", CONTRACT_CANCELS, CONTRACT_SLOT, PEER_SEEDED,
    peer_setup, peer_teardown, peer_new_tier, no_state, peer_stall, NULL, NULL,
    peer_key, peer_fill },
#endif
};

const guint contract_n_factories = G_N_ELEMENTS (contract_factories);
