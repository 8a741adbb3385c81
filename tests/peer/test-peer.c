/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <glib/gstdio.h>
#include <kvtier.h>
#include <signal.h>
#include <string.h>

#include "kv-chunk-format.h"
#include "kv-peer-frame.h"
#include "kv-peer-handshake.h"
#include "test-dir.h"
#include "test-peer-harness.h"

/* The peer tier between real processes on 127.0.0.1: `kvtier serve` nodes
 * serving synthetic chunks, and this process as the asking node. */

#define SLOT_KIB 256

static char *
peers_setting (PeerNode *a,
               PeerNode *b)
{
  return b == NULL ? g_strdup_printf ("peers = %s", a->peer_address)
                   : g_strdup_printf ("peers = %s,%s", a->peer_address, b->peer_address);
}

static KvTieringManager *
client_for (const char *settings)
{
  g_autoptr(GError) error = NULL;
  KvTieringManager *manager = client_manager_new (settings, SLOT_KIB, &error);

  g_assert_no_error (error);
  g_assert_nonnull (manager);
  return manager;
}

static void
client_free (KvTieringManager *manager)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
  g_object_unref (manager);
}

/* Looks up chunks [first, first + n) and checks the verdict of each:
 * HIT with the exact bytes for those in [hit_first, hit_end), MISS for the
 * rest. */
static void
expect_chunks (KvTieringManager *manager,
               KvRequest        *request,
               guint64           first,
               guint64           n,
               guint64           hit_first,
               guint64           hit_end)
{
  for (guint64 i = first; i < first + n; i++)
    {
      g_autoptr(KvKey) key = synthetic_key (i);
      KvLookupResult result = client_lookup_settled (manager, request, key, 5000);

      if (i >= hit_first && i < hit_end)
        {
          g_assert_cmpint (result, ==, KV_LOOKUP_RESULT_HIT);
          g_assert_true (client_chunk_is (manager, request, key, i));
        }
      else
        g_assert_cmpint (result, ==, KV_LOOKUP_RESULT_MISS);
    }
}

static void
test_two_nodes (void)
{
  g_autoptr(PeerNode) b = peer_node_start ("", SLOT_KIB, 0, 24);
  g_autofree char *settings = peers_setting (b, NULL);
  KvTieringManager *a = client_for (settings);
  g_autoptr(KvRequest) request = kv_request_new ("two-nodes", NULL);
  g_autofree char *metrics = NULL;

  /* a tier across the network */
  g_assert_cmpint (kv_secondary_tier_get_locality (kv_tiering_manager_get_tier (a, 0)), ==,
                   KV_LOCALITY_REMOTE);
  kv_tiering_manager_on_new_request (a, request);
  /* 0..23 on B: fetched byte for byte; 24..29 nowhere */
  expect_chunks (a, request, 0, 30, 0, 24);
  kv_tiering_manager_on_request_finished (a, request);

  metrics = scrape_metrics (b);
  g_assert_cmpfloat (metric_sum (metrics, "kvtier_peer_served_chunks_total"), ==, 24);
  g_assert_cmpfloat (metric_sum (metrics, "kvtier_peer_served_bytes_total"), ==, 24.0 * SLOT_KIB * 1024);
  g_assert_cmpfloat (metric_sum (metrics, "kvtier_peer_auth_failures_total"), ==, 0);
  client_free (a);
  g_assert_cmpint (peer_node_terminate (b, 5000), ==, 0);
}

static void
test_three_nodes (void)
{
  g_autoptr(PeerNode) b = peer_node_start ("", SLOT_KIB, 0, 16);
  g_autoptr(PeerNode) c = peer_node_start ("", SLOT_KIB, 16, 16);
  g_autofree char *settings = peers_setting (b, c);
  KvTieringManager *a = client_for (settings);
  g_autoptr(KvRequest) request = kv_request_new ("three-nodes", NULL);
  g_autoptr(KvRequest) only_c = NULL;
  g_autoptr(KvKey) key_on_b = synthetic_key (40);

  kv_tiering_manager_on_new_request (a, request);
  /* a prefix split over two peers: each chunk from the one that has it */
  expect_chunks (a, request, 0, 34, 0, 32);
  kv_tiering_manager_on_request_finished (a, request);

  /* A request that names its peer asks only that one. */
  only_c = kv_request_new ("named-peer", g_variant_new_parsed ("{'kv_peer': <%s>}", c->peer_address));
  kv_tiering_manager_on_new_request (a, only_c);
  {
    g_autoptr(KvKey) on_b = synthetic_key (3);
    g_autoptr(KvKey) on_c = synthetic_key (20);

    /* 3 was fetched into A's primary above: that is a primary hit; 40 is
     * nowhere; 20 is C's */
    g_assert_cmpint (client_lookup_settled (a, only_c, key_on_b, 5000), ==, KV_LOOKUP_RESULT_MISS);
    g_assert_cmpint (client_lookup_settled (a, only_c, on_c, 5000), ==, KV_LOOKUP_RESULT_HIT);
    g_assert_cmpint (client_lookup_settled (a, only_c, on_b, 5000), ==, KV_LOOKUP_RESULT_HIT);
  }
  kv_tiering_manager_on_request_finished (a, only_c);

  client_free (a);
  g_assert_cmpint (peer_node_terminate (b, 5000), ==, 0);
  g_assert_cmpint (peer_node_terminate (c, 5000), ==, 0);
}

/* B's primary holds the newest 8 of 32 chunks, its fs tier all 32: a
 * lookup of an older chunk answers "pending" while B promotes it from its
 * fs tier (never from its peer tier: reference §5.9), and A fetches it once
 * it is in B's primary. */
static void
test_from_secondary (void)
{
  g_autofree char *root = g_build_filename (harness_dir (), "fs-root", NULL);
  g_autofree char *fs = g_strdup_printf ("\n[tier fs]\ntype = fs\nroot = %s\n", root);
  g_autoptr(PeerNode) b = NULL;
  g_autofree char *settings = NULL;
  g_autofree char *metrics = NULL;
  KvTieringManager *a;
  g_autoptr(KvRequest) request = kv_request_new ("from-secondary", NULL);
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();

  kv_tier_registry_load_plugins (registry, NULL);
  if (kv_tier_registry_lookup_tier_type (registry, "fs", NULL) == G_TYPE_INVALID)
    {
      g_test_skip ("the fs tier is not built (-Dfs=disabled)");
      return;
    }
  g_assert_cmpint (g_mkdir (root, 0700), ==, 0);
  b = peer_node_start_with ("", fs, SLOT_KIB, 8, 0, 32);
  settings = peers_setting (b, NULL);
  a = client_for (settings);
  kv_tiering_manager_on_new_request (a, request);
  expect_chunks (a, request, 0, 4, 0, 4);
  expect_chunks (a, request, 28, 4, 28, 32);
  kv_tiering_manager_on_request_finished (a, request);
  {
    g_autoptr(KvStats) stats = kv_secondary_tier_get_stats (kv_tiering_manager_get_tier (a, 0));
    const char *labels[] = { "1:peer", NULL };
    gdouble asked = 0;

    /* chunks 0..3 were asked again while B promoted them */
    g_assert_true (kv_stats_lookup (stats, "kvtier_peer_lookup_keys", labels, &asked));
    g_assert_cmpfloat (asked, >, 8);
  }
  metrics = scrape_metrics (b);
  g_assert_cmpfloat (metric_sum (metrics, "kvtier_peer_served_chunks_total"), ==, 8);
  client_free (a);
  g_assert_cmpint (peer_node_terminate (b, 5000), ==, 0);
  test_dir_remove (root);
}

/* ---- the tier on its own: jobs submitted directly -------------------------------- */

typedef struct
{
  KvTierRegistry  *registry;
  KvHostBuffer    *buffer;
  KvSecondaryTier *tier;
} LoneTier;

static void
lone_tier_init (LoneTier   *lone,
                const char *peers,
                const char *extra)
{
  g_autoptr(GError) error = NULL;
  GVariantBuilder props;

  lone->registry = kv_tier_registry_new ();
  g_assert_true (kv_tier_registry_load_plugins (lone->registry, NULL));
  lone->buffer = kv_host_buffer_new (64, SLOT_KIB * 1024, &error);
  g_assert_no_error (error);
  g_variant_builder_init (&props, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&props, "{sv}", "peers", g_variant_new_string (peers));
  g_variant_builder_add (&props, "{sv}", "secret-file", g_variant_new_string (harness_secret_path ()));
  g_variant_builder_add (&props, "{sv}", "namespace", g_variant_new_string ("test-model/fp16/tp1"));
  if (extra != NULL)
    {
      g_auto(GStrv) pairs = g_strsplit (extra, ";", -1);

      for (guint i = 0; pairs[i] != NULL; i++)
        {
          g_auto(GStrv) kv = g_strsplit (pairs[i], "=", 2);

          g_variant_builder_add (&props, "{sv}", kv[0], g_variant_new_string (kv[1]));
        }
    }
  lone->tier = kv_tier_registry_create_tier (lone->registry, "peer", lone->buffer, NULL,
                                             g_variant_builder_end (&props), &error);
  g_assert_no_error (error);
}

static void
lone_tier_clear (LoneTier *lone)
{
  g_assert_true (kv_secondary_tier_shutdown (lone->tier, NULL));
  g_clear_object (&lone->tier);
  g_clear_object (&lone->buffer);
  g_clear_object (&lone->registry);
}

/* Submits a load of chunks [first, first + n) into slots 0.. and waits
 * for its one result. */
static KvJobResult *
lone_load (LoneTier  *lone,
           guint64    job_id,
           guint64    first,
           guint      n,
           gboolean (*between) (gpointer),
           gpointer   data)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  g_autofree guint32 *ids = g_new (guint32, n);
  g_autoptr(KvRequest) request = kv_request_new ("lone", NULL);
  g_autoptr(KvTransferJob) job = NULL;
  g_autoptr(GError) error = NULL;
  gint64 until = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;

  for (guint i = 0; i < n; i++)
    {
      g_ptr_array_add (keys, synthetic_key (first + i));
      ids[i] = i;
    }
  job = kv_transfer_job_new (job_id, (KvKey * const *) keys->pdata, ids, n, TRUE, request);
  g_assert_true (kv_secondary_tier_submit_load (lone->tier, job, &error));
  g_assert_no_error (error);
  if (between != NULL)
    between (data);
  while (g_get_monotonic_time () < until)
    {
      g_autofree KvJobResult **results = kv_secondary_tier_get_finished_jobs (lone->tier);

      if (results != NULL && results[0] != NULL)
        {
          g_assert_null (results[1]);
          g_assert_cmpuint (kv_job_result_get_job_id (results[0]), ==, job_id);
          return results[0];
        }
      g_usleep (1000);
    }
  g_error ("load job %" G_GUINT64_FORMAT " was never reported", job_id);
  return NULL;
}

static gboolean
slot_is (LoneTier *lone,
         guint     slot,
         guint64   index)
{
  g_autofree guint8 *expected = g_malloc (SLOT_KIB * 1024);

  synthetic_fill (expected, SLOT_KIB * 1024, index);
  return memcmp (kv_host_buffer_peek_slot (lone->buffer, slot), expected, SLOT_KIB * 1024) == 0;
}

static void
test_partial (void)
{
  g_autoptr(PeerNode) b = peer_node_start ("", SLOT_KIB, 100, 4);
  LoneTier lone = { 0 };
  KvJobResult *result;
  KvKey * const *landed;
  guint n_landed = 0;

  lone_tier_init (&lone, b->peer_address, NULL);
  /* 100..103 on B, 104..105 not: a partial load naming what landed */
  result = lone_load (&lone, 1, 100, 6, NULL, NULL);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_true (kv_job_result_has_successful_keys (result));
  landed = kv_job_result_get_successful_keys (result, &n_landed);
  g_assert_cmpuint (n_landed, ==, 4);
  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(KvKey) key = synthetic_key (100 + i);

      g_assert_true (kv_key_equal (landed[i], key));
      g_assert_true (slot_is (&lone, i, 100 + i));
    }
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 4 * SLOT_KIB * 1024);
  kv_job_result_unref (result);

  /* all there: success */
  result = lone_load (&lone, 2, 101, 3, NULL, NULL);
  g_assert_true (kv_job_result_get_success (result));
  for (guint i = 0; i < 3; i++)
    g_assert_true (slot_is (&lone, i, 101 + i));
  kv_job_result_unref (result);

  lone_tier_clear (&lone);
}

/* One FETCH of 48 keys, answered in several writes of DATA frames (the
 * server batches at most 16 frames and 2 MiB of payload a write): misses
 * (frames without a payload) and hits in one batch, then batches of hits;
 * every chunk that landed is the right one, byte-exact, in its slot. */
static void
test_batched_answer (void)
{
  g_autoptr(PeerNode) b = peer_node_start ("", SLOT_KIB, 10, 40);
  LoneTier lone = { 0 };
  KvJobResult *result;
  KvKey * const *landed;
  guint n_landed = 0;

  lone_tier_init (&lone, b->peer_address, NULL);
  /* 0..9 are not on B, 10..47 are */
  result = lone_load (&lone, 1, 0, 48, NULL, NULL);
  g_assert_false (kv_job_result_get_success (result));
  landed = kv_job_result_get_successful_keys (result, &n_landed);
  g_assert_cmpuint (n_landed, ==, 38);
  for (guint i = 0; i < n_landed; i++)
    {
      g_autoptr(KvKey) key = synthetic_key (10 + i);

      g_assert_true (kv_key_equal (landed[i], key));
      g_assert_true (slot_is (&lone, 10 + i, 10 + i));
    }
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 38 * SLOT_KIB * 1024);
  kv_job_result_unref (result);
  lone_tier_clear (&lone);
}

static gboolean
kill_node (gpointer data)
{
  PeerNode *node = data;

  /* the FETCH is on its way; the node dies before it answers it in full */
  g_usleep (50 * 1000);
  peer_node_signal (node, SIGKILL);
  return TRUE;
}

static void
test_killed_peer (void)
{
  g_autoptr(PeerNode) b = peer_node_start ("", SLOT_KIB, 0, 8);
  g_autoptr(PeerNode) c = peer_node_start ("", SLOT_KIB, 0, 8);
  g_autofree char *peers = g_strdup_printf ("%s,%s", b->peer_address, c->peer_address);
  LoneTier lone = { 0 };
  KvJobResult *result;
  g_autoptr(KvStats) stats = NULL;

  lone_tier_init (&lone, peers, "io-timeout-ms=2000;connections-per-peer=1");
  /* a first load opens the connection to B */
  result = lone_load (&lone, 1, 0, 2, NULL, NULL);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);
  g_clear_object (&stats);
  stats = kv_secondary_tier_get_stats (lone.tier);

  /* B stopped: the FETCH waits in its socket; then B is killed by PID,
   * the connection is reset in the middle of the transfer */
  peer_node_signal (b, SIGSTOP);
  result = lone_load (&lone, 3, 0, 8, kill_node, b);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  kv_job_result_unref (result);

  g_clear_object (&stats);
  stats = kv_secondary_tier_get_stats (lone.tier);
  {
    const char *labels[] = { "peer", NULL };
    gdouble failures = 0;

    g_assert_true (kv_stats_lookup (stats, "kvtier_peer_fetch_failures", labels, &failures));
    g_assert_cmpfloat (failures, ==, 1);
  }

  /* C serves on: a load from it (the request names it) lands */
  {
    g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
    guint32 ids[4] = { 10, 11, 12, 13 };
    g_autoptr(KvRequest) request = kv_request_new ("to-c", g_variant_new_parsed ("{'kv_peer': <%s>}",
                                                                                c->peer_address));
    g_autoptr(KvTransferJob) job = NULL;
    gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
    gboolean reported = FALSE;

    for (guint i = 0; i < 4; i++)
      g_ptr_array_add (keys, synthetic_key (i));
    job = kv_transfer_job_new (2, (KvKey * const *) keys->pdata, ids, 4, TRUE, request);
    g_assert_true (kv_secondary_tier_submit_load (lone.tier, job, NULL));
    while (!reported && g_get_monotonic_time () < until)
      {
        g_autofree KvJobResult **results = kv_secondary_tier_get_finished_jobs (lone.tier);

        if (results != NULL && results[0] != NULL)
          {
            g_assert_true (kv_job_result_get_success (results[0]));
            kv_job_result_unref (results[0]);
            reported = TRUE;
          }
        g_usleep (1000);
      }
    g_assert_true (reported);
    for (guint i = 0; i < 4; i++)
      g_assert_true (slot_is (&lone, 10 + i, i));
  }
  lone_tier_clear (&lone);
  g_assert_cmpint (peer_node_terminate (c, 5000), ==, 0);
}

static void
test_slow_peer (void)
{
  g_autoptr(PeerNode) b = peer_node_start ("", SLOT_KIB, 0, 8);
  g_autofree char *settings = g_strdup_printf ("peers = %s\nio-timeout-ms = 300\n"
                                               "peer-breaker-threshold = 2\npeer-breaker-open-ms = 400",
                                               b->peer_address);
  KvTieringManager *a = client_for (settings);
  KvSecondaryTier *tier = kv_tiering_manager_get_tier (a, 0);
  g_autoptr(KvRequest) request = kv_request_new ("slow", NULL);
  const char *labels[] = { "1:peer", NULL };
  gdouble breakers = -1, errors = 0, skips = 0;
  gint64 start;

  kv_tiering_manager_on_new_request (a, request);
  peer_node_signal (b, SIGSTOP);
  /* each lookup times out (300 ms); the second failure opens B's breaker */
  for (guint i = 0; i < 2; i++)
    {
      g_autoptr(KvKey) key = synthetic_key (i);

      start = g_get_monotonic_time ();
      g_assert_cmpint (client_lookup_settled (a, request, key, 5000), ==, KV_LOOKUP_RESULT_MISS);
      g_assert_cmpint (g_get_monotonic_time () - start, <, 2 * G_USEC_PER_SEC);
    }
  {
    g_autoptr(KvStats) stats = kv_secondary_tier_get_stats (tier);

    g_assert_true (kv_stats_lookup (stats, "kvtier_peer_breakers_open", labels, &breakers));
    g_assert_true (kv_stats_lookup (stats, "kvtier_peer_request_errors", labels, &errors));
    g_assert_cmpfloat (breakers, ==, 1);
    g_assert_cmpfloat (errors, ==, 2);
  }
  /* open: the peer is not asked at all, the answer comes at once */
  {
    g_autoptr(KvKey) key = synthetic_key (2);
    g_autoptr(KvStats) stats = NULL;

    start = g_get_monotonic_time ();
    g_assert_cmpint (client_lookup_settled (a, request, key, 5000), ==, KV_LOOKUP_RESULT_MISS);
    g_assert_cmpint (g_get_monotonic_time () - start, <, 250 * 1000);
    stats = kv_secondary_tier_get_stats (tier);
    g_assert_true (kv_stats_lookup (stats, "kvtier_peer_breaker_skips", labels, &skips));
    g_assert_cmpfloat (skips, >=, 1);
  }

  /* recovery: B runs again; after the open interval the next request
   * goes through and closes the breaker */
  peer_node_signal (b, SIGCONT);
  g_usleep (500 * 1000);
  {
    g_autoptr(KvKey) key = synthetic_key (5);
    g_autoptr(KvStats) stats = NULL;

    g_assert_cmpint (client_lookup_settled (a, request, key, 5000), ==, KV_LOOKUP_RESULT_HIT);
    g_assert_true (client_chunk_is (a, request, key, 5));
    stats = kv_secondary_tier_get_stats (tier);
    g_assert_true (kv_stats_lookup (stats, "kvtier_peer_breakers_open", labels, &breakers));
    g_assert_cmpfloat (breakers, ==, 0);
  }
  kv_tiering_manager_on_request_finished (a, request);
  client_free (a);
  g_assert_cmpint (peer_node_terminate (b, 5000), ==, 0);
}

static void
test_sigterm (void)
{
  g_autoptr(PeerNode) b = peer_node_start ("", SLOT_KIB, 0, 2);
  g_autofree char *metrics = scrape_metrics (b);

  /* the peer tier's series are there from the first scrape on */
  g_assert_nonnull (strstr (metrics, "\nkvtier_peer_handshake_timeouts_total{tier=\"1:peer\"} 0.0\n"));
  g_assert_nonnull (strstr (metrics, "# TYPE vllm:kv_offload_tiering_"));
  g_assert_cmpint (peer_node_terminate (b, 5000), ==, 0);
}

/* ---- a serving peer that sends damaged chunks --------------------------------- */

typedef enum {
  FAKE_GOOD,
  FAKE_PAYLOAD_BIT,     /* one payload bit flipped after the header was made */
  FAKE_OTHER_KEY,       /* a whole record, of another key */
  FAKE_HEADER_BIT,      /* one header bit flipped */
} FakeChunk;

typedef struct
{
  GSocketListener *listener;
  guint16          port;
  GThread         *thread;
  const FakeChunk *chunks;   /* what the i-th key of each FETCH gets */
  guint            n_chunks;
  guint            n_fetches;
} FakePeer;

static gboolean
fake_read_frame (GInputStream  *in,
                 KvPeerMessage *message)
{
  guint8 header[KV_PEER_FRAME_HEADER_SIZE];
  g_autofree guint8 *body = NULL;
  KvPeerFrameHeader parsed;
  gsize n = 0;

  if (!g_input_stream_read_all (in, header, sizeof header, &n, NULL, NULL) || n < sizeof header)
    return FALSE;
  g_assert_true (kv_peer_frame_header_parse (header, 1 << 20, &parsed, NULL));
  body = g_malloc (MAX (parsed.body_len, 1));
  g_assert_true (g_input_stream_read_all (in, body, parsed.body_len, &n, NULL, NULL));
  g_assert_cmpuint (n, ==, parsed.body_len);
  g_assert_true (kv_peer_message_parse (parsed.type, body, parsed.body_len, 1024, message, NULL));
  return TRUE;
}

static void
fake_write (GOutputStream *out,
            const void    *data,
            gsize          len)
{
  g_autoptr(GError) error = NULL;

  g_output_stream_write_all (out, data, len, NULL, NULL, &error);
  g_assert_no_error (error);
}

/* One connection: the handshake as a real node answers it, then every FETCH
 * answered from chunk synthetic_fill (i), damaged as @chunks says. */
static gpointer
fake_peer_main (gpointer data)
{
  FakePeer *fake = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocketConnection) conn = g_socket_listener_accept (fake->listener, NULL, NULL, &error);
  g_autoptr(GBytes) secret = kv_peer_secret_load (harness_secret_path (), &error);
  GInputStream *in;
  GOutputStream *out;
  g_autoptr(GByteArray) frame = g_byte_array_new ();
  g_auto(KvPeerMessage) hello = { 0 };
  g_auto(KvPeerMessage) auth = { 0 };
  guint8 nonce[KV_PEER_NONCE_LEN], digest[32], params[KV_PEER_AUTH_PARAMS_SIZE], mac[KV_PEER_MAC_LEN];
  const gsize block = SLOT_KIB * 1024;
  g_autofree guint8 *record = g_malloc (KV_CHUNK_HEADER_SIZE + block);

  g_assert_no_error (error);
  in = g_io_stream_get_input_stream (G_IO_STREAM (conn));
  out = g_io_stream_get_output_stream (G_IO_STREAM (conn));
  g_assert_true (fake_read_frame (in, &hello));
  g_assert_cmpint (hello.type, ==, KV_PEER_FRAME_HELLO);
  g_assert_true (kv_peer_random_nonce (nonce, NULL));
  kv_peer_frame_append_hello (frame, nonce);
  fake_write (out, frame->data, frame->len);
  g_assert_true (fake_read_frame (in, &auth));
  g_assert_cmpint (auth.type, ==, KV_PEER_FRAME_AUTH);
  kv_chunk_namespace_digest ("test-model/fp16/tp1", block, digest);
  kv_peer_frame_auth_params (params, block, digest, 1024, 64 << 20);
  kv_peer_handshake_mac (secret, KV_PEER_ROLE_SERVER, hello.nonce, nonce, params, mac);
  g_byte_array_set_size (frame, 0);
  kv_peer_frame_append_auth (frame, params, mac);
  fake_write (out, frame->data, frame->len);

  for (;;)
    {
      g_auto(KvPeerMessage) fetch = { 0 };
      guint n_sent = 0;

      if (!fake_read_frame (in, &fetch) || fetch.type == KV_PEER_FRAME_BYE)
        break;
      g_assert_cmpint (fetch.type, ==, KV_PEER_FRAME_FETCH);
      fake->n_fetches++;
      for (guint i = 0; i < fetch.keys->len; i++)
        {
          FakeChunk kind = i < fake->n_chunks ? fake->chunks[i] : FAKE_GOOD;
          guint8 prefix[KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE];
          guint64 index;
          g_autoptr(KvKey) other = NULL;

          /* the keys are synthetic_key (index): find the index */
          for (index = 0; index < 1000; index++)
            {
              g_autoptr(KvKey) key = synthetic_key (index);

              if (kv_key_equal (key, fetch.keys->pdata[i]))
                break;
            }
          g_assert_cmpuint (index, <, 1000);
          other = synthetic_key (index + 500);
          synthetic_fill (record + KV_CHUNK_HEADER_SIZE, block, index);
          kv_chunk_header_encode (record, digest, kind == FAKE_OTHER_KEY ? other : fetch.keys->pdata[i],
                                  record + KV_CHUNK_HEADER_SIZE, block, g_get_real_time ());
          if (kind == FAKE_PAYLOAD_BIT)
            record[KV_CHUNK_HEADER_SIZE + block / 2 + 3] ^= 0x10;
          else if (kind == FAKE_HEADER_BIT)
            record[KV_CHUNK_OFF_CREATED] ^= 0x01;
          kv_peer_frame_encode_data_prefix (prefix, fetch.request_id, i, KV_PEER_DATA_OK,
                                            KV_CHUNK_HEADER_SIZE + block);
          fake_write (out, prefix, sizeof prefix);
          fake_write (out, record, KV_CHUNK_HEADER_SIZE + block);
          n_sent++;
        }
      g_byte_array_set_size (frame, 0);
      kv_peer_frame_append_done (frame, fetch.request_id, n_sent);
      fake_write (out, frame->data, frame->len);
    }
  return NULL;
}

static void
fake_peer_start (FakePeer        *fake,
                 const FakeChunk *chunks,
                 guint            n_chunks)
{
  g_autoptr(GError) error = NULL;

  fake->listener = g_socket_listener_new ();
  fake->port = g_socket_listener_add_any_inet_port (fake->listener, NULL, &error);
  g_assert_no_error (error);
  fake->chunks = chunks;
  fake->n_chunks = n_chunks;
  fake->thread = g_thread_new ("fake-peer", fake_peer_main, fake);
}

static void
fake_peer_stop (FakePeer *fake)
{
  g_thread_join (fake->thread);
  g_socket_listener_close (fake->listener);
  g_clear_object (&fake->listener);
}

/* A peer's chunk that fails its check is refused and counted, whether its
 * payload, its header or its key is wrong, and the chunks after it in the
 * same FETCH still land, byte-exact, carrying the checksum they were
 * verified with: the check runs as the payload arrives, and a refused
 * chunk is still read whole. */
static void
test_damaged_data (void)
{
  static const FakeChunk chunks[] = { FAKE_PAYLOAD_BIT, FAKE_GOOD, FAKE_OTHER_KEY, FAKE_GOOD,
                                      FAKE_HEADER_BIT, FAKE_GOOD };
  FakePeer fake = { 0 };
  LoneTier lone = { 0 };
  g_autofree char *address = NULL;
  g_autoptr(KvStats) stats = NULL;
  KvJobResult *result;
  KvKey * const *landed;
  guint n_landed = 0;
  const char *labels[] = { "peer", NULL };
  gdouble failures = 0, fetched = 0;

  fake_peer_start (&fake, chunks, G_N_ELEMENTS (chunks));
  address = g_strdup_printf ("127.0.0.1:%u", fake.port);
  lone_tier_init (&lone, address, "connections-per-peer=1");
  result = lone_load (&lone, 1, 10, G_N_ELEMENTS (chunks), NULL, NULL);
  g_assert_false (kv_job_result_get_success (result));
  landed = kv_job_result_get_successful_keys (result, &n_landed);
  g_assert_cmpuint (n_landed, ==, 3);
  for (guint j = 0; j < n_landed; j++)
    {
      guint i = 2 * j + 1;
      g_autoptr(KvKey) key = synthetic_key (10 + i);
      guint64 carried = 0;

      g_assert_true (kv_key_equal (landed[j], key));
      g_assert_true (slot_is (&lone, i, 10 + i));
      g_assert_true (kv_host_buffer_get_slot_checksum (lone.buffer, i, &carried));
      g_assert_cmpuint (carried, ==, kv_chunk_checksum (kv_host_buffer_peek_slot (lone.buffer, i),
                                                        SLOT_KIB * 1024));
    }
  for (guint i = 0; i < G_N_ELEMENTS (chunks); i += 2)
    g_assert_false (kv_host_buffer_get_slot_checksum (lone.buffer, i, NULL));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 3 * SLOT_KIB * 1024);
  kv_job_result_unref (result);

  stats = kv_secondary_tier_get_stats (lone.tier);
  g_assert_true (kv_stats_lookup (stats, "kvtier_peer_checksum_failures", labels, &failures));
  g_assert_cmpfloat (failures, ==, 3);
  g_assert_true (kv_stats_lookup (stats, "kvtier_peer_fetched_chunks", labels, &fetched));
  g_assert_cmpfloat (fetched, ==, 3);
  g_assert_cmpuint (fake.n_fetches, ==, 1);
  lone_tier_clear (&lone);
  fake_peer_stop (&fake);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, NULL);
  harness_init ();
  g_test_add_func ("/peer/two-nodes", test_two_nodes);
  g_test_add_func ("/peer/three-nodes", test_three_nodes);
  g_test_add_func ("/peer/from-secondary", test_from_secondary);
  g_test_add_func ("/peer/partial", test_partial);
  g_test_add_func ("/peer/batched-answer", test_batched_answer);
  g_test_add_func ("/peer/killed-peer", test_killed_peer);
  g_test_add_func ("/peer/slow-peer", test_slow_peer);
  g_test_add_func ("/peer/sigterm", test_sigterm);
  g_test_add_func ("/peer/damaged-data", test_damaged_data);
  status = g_test_run ();
  harness_cleanup ();
  return status;
}
