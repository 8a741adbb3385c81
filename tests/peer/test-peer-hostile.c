/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>
#include <glib/gstdio.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "kv-chunk-format.h"
#include "kv-peer-frame.h"
#include "kv-peer-handshake.h"
#include "test-peer-harness.h"

/* A `kvtier serve` node against hostile clients written with the protocol
 * library itself: each one is refused or closed and counted, and the node
 * still answers a good client within its deadline. Then TLS. */

#define SLOT_KIB 128
#define NAMESPACE "test-model/fp16/tp1"

/* The handshake budgets are big enough for a thousand idle connections
 * from this host (test-peer-limits.c tests them) */
#define HOSTILE_LIMITS \
  "handshake-timeout-ms = 1000\n" \
  "idle-timeout-ms = 1500\n" \
  "io-timeout-ms = 1000\n" \
  "max-keys-per-request = 64\n" \
  "max-connections = 64\n" \
  "max-handshakes = 1100\n" \
  "max-handshakes-per-address = 1100\n"

static const char *hostile_settings = HOSTILE_LIMITS "max-inflight-bytes = 4MiB";

static GBytes *
read_secret (const char *path)
{
  g_autoptr(GError) error = NULL;
  GBytes *secret = kv_peer_secret_load (path, &error);

  g_assert_no_error (error);
  return secret;
}

static GSocketConnection *
raw_connect (PeerNode *node)
{
  g_autoptr(GSocketClient) client = g_socket_client_new ();
  g_autoptr(GError) error = NULL;
  GSocketConnection *conn;

  conn = g_socket_client_connect_to_host (client, node->peer_address, 0, NULL, &error);
  g_assert_no_error (error);
  g_socket_set_timeout (g_socket_connection_get_socket (conn), 5);
  return conn;
}

/* The server closes: the next read ends the stream. */
static void
assert_closed (GSocketConnection *conn)
{
  g_auto(KvPeerMessage) message = { 0 };

  while (harness_stream_read_frame (G_IO_STREAM (conn), &message))
    kv_peer_message_clear (&message);
}

static GSocketConnection *
good_connection (PeerNode *node)
{
  g_autoptr(GBytes) secret = read_secret (harness_secret_path ());
  g_auto(KvPeerMessage) answer = { 0 };
  GSocketConnection *conn = raw_connect (node);

  g_assert_true (harness_stream_handshake (G_IO_STREAM (conn), secret, NAMESPACE, SLOT_KIB * 1024, &answer));
  g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_AUTH);
  return conn;
}

/* A good client: authenticated, its LOOKUP answered HIT within 3 s (a
 * client's load deadline is 5 s; the machine running the suite is shared,
 * the server may have a thousand accepts to go through first). */
static void
assert_good_client_served (PeerNode *node)
{
  gint64 start = g_get_monotonic_time ();
  g_autoptr(GSocketConnection) conn = good_connection (node);
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_autoptr(KvKey) key = synthetic_key (0);
  g_auto(KvPeerMessage) answer = { 0 };

  g_assert_true (kv_peer_frame_append_keys (out, KV_PEER_FRAME_LOOKUP, 7, &key, 1, NULL));
  harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
  g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &answer));
  g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_LOOKUP_RESP);
  g_assert_cmpuint (answer.request_id, ==, 7);
  g_assert_cmpuint (answer.n_answers, ==, 1);
  g_assert_cmpuint (answer.answers[0], ==, KV_PEER_LOOKUP_HIT);
  g_assert_cmpint (g_get_monotonic_time () - start, <, 3 * G_USEC_PER_SEC);
}

static void
test_unauthenticated (void)
{
  g_autoptr(PeerNode) node = peer_node_start (hostile_settings, SLOT_KIB, 0, 4);
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_autoptr(KvKey) key = synthetic_key (0);

  /* a LOOKUP before any handshake: closed without an answer */
  {
    g_autoptr(GSocketConnection) conn = raw_connect (node);

    g_assert_true (kv_peer_frame_append_keys (out, KV_PEER_FRAME_LOOKUP, 1, &key, 1, NULL));
    harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
    assert_closed (conn);
  }
  /* a HELLO of another protocol version */
  {
    g_autoptr(GSocketConnection) conn = raw_connect (node);
    g_auto(KvPeerMessage) answer = { 0 };
    guint8 nonce[KV_PEER_NONCE_LEN] = { 0 };

    g_byte_array_set_size (out, 0);
    kv_peer_frame_append_hello (out, nonce);
    out->data[KV_PEER_FRAME_HEADER_SIZE + KV_PEER_MAGIC_LEN] = 99;
    harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
    g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_VERSION);
    assert_closed (conn);
  }
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_handshake_failures_total", 2), ==, 2);
  assert_good_client_served (node);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
}

/* A client whose peer tier has @settings looks a chunk up: a miss, then
 * a clean shutdown. */
static void
assert_client_misses (const char *settings,
                      const char *request_id)
{
  g_autoptr(GError) error = NULL;
  KvTieringManager *manager = client_manager_new (settings, SLOT_KIB, &error);
  g_autoptr(KvRequest) request = kv_request_new (request_id, NULL);
  g_autoptr(KvKey) key = synthetic_key (1);

  g_assert_no_error (error);
  kv_tiering_manager_on_new_request (manager, request);
  g_assert_cmpint (client_lookup_settled (manager, request, key, 5000), ==, KV_LOOKUP_RESULT_MISS);
  kv_tiering_manager_on_request_finished (manager, request);
  g_assert_true (kv_tiering_manager_shutdown (manager, NULL));
  g_object_unref (manager);
}

static void
test_wrong_secret_and_namespace (void)
{
  g_autoptr(PeerNode) node = peer_node_start (hostile_settings, SLOT_KIB, 0, 4);
  g_autoptr(GBytes) secret = read_secret (harness_secret_path ());
  g_autoptr(GBytes) wrong = g_bytes_new_static ("not the secret of these nodes", 29);

  {
    g_autoptr(GSocketConnection) conn = raw_connect (node);
    g_auto(KvPeerMessage) answer = { 0 };

    g_assert_true (harness_stream_handshake (G_IO_STREAM (conn), wrong, NAMESPACE, SLOT_KIB * 1024, &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_AUTH_FAILED);
    assert_closed (conn);
  }
  {
    g_autoptr(GSocketConnection) conn = raw_connect (node);
    g_auto(KvPeerMessage) answer = { 0 };

    g_assert_true (harness_stream_handshake (G_IO_STREAM (conn), secret, "other-model/bf16/tp2",
                                             SLOT_KIB * 1024, &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_NAMESPACE);
    assert_closed (conn);
  }
  {
    g_autoptr(GSocketConnection) conn = raw_connect (node);
    g_auto(KvPeerMessage) answer = { 0 };

    g_assert_true (harness_stream_handshake (G_IO_STREAM (conn), secret, NAMESPACE,
                                             2 * SLOT_KIB * 1024, &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_CHUNK_SIZE);
    assert_closed (conn);
  }
  /* HELLO and a made-up AUTH in one write, without waiting for the
   * server's nonce: HELLO, then ERROR, in that order */
  {
    g_autoptr(GSocketConnection) conn = raw_connect (node);
    g_autoptr(GByteArray) out = g_byte_array_new ();
    g_auto(KvPeerMessage) hello = { 0 };
    g_auto(KvPeerMessage) answer = { 0 };
    guint8 nonce[KV_PEER_NONCE_LEN] = { 7 }, params[KV_PEER_AUTH_PARAMS_SIZE] = { 0 };
    guint8 mac[KV_PEER_MAC_LEN] = { 0 };

    kv_peer_frame_append_hello (out, nonce);
    kv_peer_frame_append_auth (out, params, mac);
    harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
    g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &hello));
    g_assert_cmpint (hello.type, ==, KV_PEER_FRAME_HELLO);
    g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_AUTH_FAILED);
    assert_closed (conn);
  }
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_auth_failures_total", 2), ==, 2);
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_namespace_mismatches_total", 2), ==, 2);

  /* the peer tier of a node with the wrong secret: its lookups miss */
  {
    g_autofree char *wrong_path = harness_write_file ("wrong-secret", "0123456789abcdef-wrong", 0600);
    g_autofree char *settings = g_strdup_printf ("peers = %s\nsecret-file = %s", node->peer_address,
                                                 wrong_path);

    assert_client_misses (settings, "wrong-secret");
  }
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_auth_failures_total", 3), >=, 3);
  assert_good_client_served (node);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
}

/* A server that answers the handshake without proving it holds the
 * secret (@knows_secret FALSE: its AUTH carries a made-up proof), or that
 * proves it but serves another namespace. It accepts one connection,
 * plays its half and then reports what the client sent next: nothing (it
 * closed) or a request. */
typedef struct
{
  GSocketListener *listener;
  GCancellable    *cancellable;  /* cancelled once the client is gone */
  gboolean         knows_secret;
  gboolean         got_auth;
  gboolean         got_request;
} FakeServer;

static gpointer
fake_server_run (gpointer data)
{
  FakeServer *fake = data;
  g_autoptr(GSocketConnection) conn = NULL;
  g_autoptr(GBytes) secret = read_secret (harness_secret_path ());
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_auto(KvPeerMessage) hello = { 0 };
  g_auto(KvPeerMessage) auth = { 0 };
  g_auto(KvPeerMessage) next = { 0 };
  guint8 nonce[KV_PEER_NONCE_LEN], digest[32], params[KV_PEER_AUTH_PARAMS_SIZE];
  guint8 mac[KV_PEER_MAC_LEN] = { 0 };
  g_autoptr(GError) error = NULL;

  /* a client that never came is the test's failure below, not a hang */
  conn = g_socket_listener_accept (fake->listener, NULL, fake->cancellable, &error);
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return NULL;
  g_assert_no_error (error);
  g_socket_set_timeout (g_socket_connection_get_socket (conn), 10);
  g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &hello));
  g_assert_cmpint (hello.type, ==, KV_PEER_FRAME_HELLO);
  g_assert_true (kv_peer_random_nonce (nonce, NULL));
  kv_peer_frame_append_hello (out, nonce);
  harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
  g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &auth));
  g_assert_cmpint (auth.type, ==, KV_PEER_FRAME_AUTH);
  fake->got_auth = TRUE;

  kv_chunk_namespace_digest (fake->knows_secret ? "another-model/bf16/tp2" : NAMESPACE,
                             SLOT_KIB * 1024, digest);
  kv_peer_frame_auth_params (params, SLOT_KIB * 1024, digest, 64, 64 << 20);
  if (fake->knows_secret)
    kv_peer_handshake_mac (secret, KV_PEER_ROLE_SERVER, hello.nonce, nonce, params, mac);
  g_byte_array_set_size (out, 0);
  kv_peer_frame_append_auth (out, params, mac);
  harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
  fake->got_request = harness_stream_read_frame (G_IO_STREAM (conn), &next);
  return NULL;
}

/* The peer tier checks the server's half of the handshake: a server that
 * cannot prove it holds the secret, or serves another namespace, gets no
 * request, and the lookup misses. */
static void
test_unproven_server (void)
{
  for (guint knows_secret = 0; knows_secret <= 1; knows_secret++)
    {
      FakeServer fake = { g_socket_listener_new (), g_cancellable_new (), knows_secret, FALSE, FALSE };
      g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
      g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
      g_autoptr(GSocketAddress) bound = NULL;
      g_autoptr(GError) error = NULL;
      g_autofree char *settings = NULL;
      GThread *thread;

      g_socket_listener_add_address (fake.listener, any, G_SOCKET_TYPE_STREAM,
                                     G_SOCKET_PROTOCOL_TCP, NULL, &bound, &error);
      g_assert_no_error (error);
      settings = g_strdup_printf ("peers = 127.0.0.1:%u",
                                  g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound)));
      thread = g_thread_new ("fake-server", fake_server_run, &fake);

      assert_client_misses (settings, "unproven-server");

      g_cancellable_cancel (fake.cancellable);
      g_thread_join (thread);
      g_assert_true (fake.got_auth);
      g_assert_false (fake.got_request);
      g_socket_listener_close (fake.listener);
      g_object_unref (fake.listener);
      g_object_unref (fake.cancellable);
    }
}

static void
test_bad_frames (void)
{
  g_autoptr(PeerNode) node = peer_node_start (hostile_settings, SLOT_KIB, 0, 80);
  guint8 header[KV_PEER_FRAME_HEADER_SIZE];

  /* oversized: a LOOKUP of 64 MiB is refused from its header */
  {
    g_autoptr(GSocketConnection) conn = good_connection (node);
    g_auto(KvPeerMessage) answer = { 0 };

    kv_peer_frame_header_encode (header, KV_PEER_FRAME_LOOKUP, 64 << 20);
    harness_stream_send (G_IO_STREAM (conn), header, sizeof header);
    g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_LIMIT);
    assert_closed (conn);
  }
  /* a FETCH of more bytes than max-inflight-bytes (64 × 128 KiB > 4 MiB) */
  {
    g_autoptr(GSocketConnection) conn = good_connection (node);
    g_autoptr(GByteArray) out = g_byte_array_new ();
    g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
    g_auto(KvPeerMessage) answer = { 0 };

    for (guint i = 0; i < 64; i++)
      g_ptr_array_add (keys, synthetic_key (i));
    g_assert_true (kv_peer_frame_append_keys (out, KV_PEER_FRAME_FETCH, 1,
                                              (KvKey * const *) keys->pdata, 64, NULL));
    harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
    g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_LIMIT);
    assert_closed (conn);
  }
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_limit_violations_total", 2), ==, 2);

  /* truncated: a header promising 100 bytes, 10 sent, then the end */
  {
    g_autoptr(GSocketConnection) conn = good_connection (node);
    guint8 ten[10] = { 0 };

    kv_peer_frame_header_encode (header, KV_PEER_FRAME_LOOKUP, 100);
    harness_stream_send (G_IO_STREAM (conn), header, sizeof header);
    harness_stream_send (G_IO_STREAM (conn), ten, sizeof ten);
    g_socket_shutdown (g_socket_connection_get_socket (conn), FALSE, TRUE, NULL);
    assert_closed (conn);
  }
  /* garbage after the handshake */
  {
    g_autoptr(GSocketConnection) conn = good_connection (node);
    g_auto(KvPeerMessage) answer = { 0 };
    guint8 garbage[64];

    for (guint i = 0; i < sizeof garbage; i++)
      garbage[i] = 0xA0 + i;
    harness_stream_send (G_IO_STREAM (conn), garbage, sizeof garbage);
    g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    g_assert_cmpuint (answer.error_code, ==, KV_PEER_ERROR_BAD_FRAME);
    assert_closed (conn);
  }
  /* a well-formed frame the server never takes (a DONE) */
  {
    g_autoptr(GSocketConnection) conn = good_connection (node);
    g_autoptr(GByteArray) out = g_byte_array_new ();
    g_auto(KvPeerMessage) answer = { 0 };

    kv_peer_frame_append_done (out, 1, 1);
    harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
    g_assert_true (harness_stream_read_frame (G_IO_STREAM (conn), &answer));
    g_assert_cmpint (answer.type, ==, KV_PEER_FRAME_ERROR);
    assert_closed (conn);
  }
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_bad_frames_total", 3), ==, 3);
  assert_good_client_served (node);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
}

static void
test_slow_reader (void)
{
  g_autoptr(PeerNode) node = peer_node_start (HOSTILE_LIMITS "max-inflight-bytes = 8MiB", SLOT_KIB, 0, 64);
  g_autoptr(GSocketConnection) conn = good_connection (node);
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  int small = 4096;

  /* 8 MiB asked for (more than both socket buffers hold), nothing read:
   * the server's writes stall */
  setsockopt (g_socket_get_fd (g_socket_connection_get_socket (conn)), SOL_SOCKET, SO_RCVBUF,
              &small, sizeof small);
  for (guint i = 0; i < 64; i++)
    g_ptr_array_add (keys, synthetic_key (i));
  g_assert_true (kv_peer_frame_append_keys (out, KV_PEER_FRAME_FETCH, 1,
                                            (KvKey * const *) keys->pdata, 64, NULL));
  harness_stream_send (G_IO_STREAM (conn), out->data, out->len);

  /* closed after the I/O timeout; the pinned chunks are released (their
   * jobs reported failed), and the node serves on */
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_slow_readers_total", 1), ==, 1);
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_serve_failures_total", 1), ==, 1);
  assert_good_client_served (node);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
}

static void
test_idle_connections (void)
{
  g_autoptr(PeerNode) node = peer_node_start (hostile_settings, SLOT_KIB, 0, 4);
  g_autoptr(GPtrArray) idle = g_ptr_array_new_with_free_func (g_object_unref);
  struct rlimit limit;

  /* 1,000 sockets here, 1,000 there: raise the soft limit if needed */
  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &limit), ==, 0);
  if (limit.rlim_cur < 2200)
    {
      if (limit.rlim_max < 2200)
        {
          g_test_skip ("RLIMIT_NOFILE is below 2200 file descriptors");
          return;
        }
      limit.rlim_cur = limit.rlim_max;
      g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &limit), ==, 0);
    }

  for (guint i = 0; i < 1000; i++)
    g_ptr_array_add (idle, raw_connect (node));
  /* while they idle, a good client is served at once */
  assert_good_client_served (node);
  /* and an authenticated connection that idles is closed too */
  {
    g_autoptr(GSocketConnection) quiet = good_connection (node);

    g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_handshake_timeouts_total", 1000), ==, 1000);
    for (guint i = 0; i < idle->len; i++)
      assert_closed (idle->pdata[i]);
    assert_closed (quiet);
    g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_idle_timeouts_total", 1), ==, 1);
  }
  assert_good_client_served (node);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
}

/* The client process of /peer-hostile/killed-client: authenticates with the
 * secret in SECRET_FILE, asks ADDRESS for 32 chunks, reads one frame and
 * waits to be killed. */
static int
killed_client_main (const char *address,
                    const char *secret_file)
{
  g_autoptr(GBytes) secret = read_secret (secret_file);
  g_autoptr(GSocketClient) client = g_socket_client_new ();
  g_autoptr(GSocketConnection) conn = NULL;
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  g_auto(KvPeerMessage) answer = { 0 };
  g_auto(KvPeerMessage) first = { 0 };
  int small = 4096;

  conn = g_socket_client_connect_to_host (client, address, 0, NULL, NULL);
  if (conn == NULL)
    return 1;
  setsockopt (g_socket_get_fd (g_socket_connection_get_socket (conn)), SOL_SOCKET, SO_RCVBUF,
              &small, sizeof small);
  if (!harness_stream_handshake (G_IO_STREAM (conn), secret, NAMESPACE, SLOT_KIB * 1024, &answer) ||
      answer.type != KV_PEER_FRAME_AUTH)
    return 1;
  for (guint i = 0; i < 32; i++)
    g_ptr_array_add (keys, synthetic_key (i));
  kv_peer_frame_append_keys (out, KV_PEER_FRAME_FETCH, 1, (KvKey * const *) keys->pdata, 32, NULL);
  harness_stream_send (G_IO_STREAM (conn), out->data, out->len);
  if (!harness_stream_read_frame (G_IO_STREAM (conn), &first) || first.type != KV_PEER_FRAME_DATA)
    return 1;
  printf ("reading\n");
  fflush (stdout);
  for (;;)
    g_usleep (G_USEC_PER_SEC);
}

/* A client process killed (by PID) in the middle of a FETCH answer: the
 * answer's jobs fail and are counted, and the node serves on. */
static void
test_killed_client (void)
{
  g_autoptr(PeerNode) node = peer_node_start (hostile_settings, SLOT_KIB, 0, 32);
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autoptr(GSubprocess) client = NULL;
  g_autoptr(GDataInputStream) out = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = NULL;

  g_subprocess_launcher_set_child_setup (launcher, harness_child_setup, NULL, NULL);
  client = g_subprocess_launcher_spawn (launcher, &error, g_test_get_filename (G_TEST_BUILT, "peer",
                                                                               "test-peer-hostile", NULL),
                                        "--killed-client", node->peer_address, harness_secret_path (),
                                        NULL);
  g_assert_no_error (error);
  out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (client));
  line = g_data_input_stream_read_line_utf8 (out, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (line, ==, "reading");
  /* by PID */
  g_subprocess_force_exit (client);
  g_assert_false (g_subprocess_wait_check (client, NULL, NULL));

  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_serve_failures_total", 1), ==, 1);
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_served_chunks_total", 0), ==, 0);
  assert_good_client_served (node);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);
}

static void
test_config_check (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autofree char *open_secret = harness_write_file ("readable-secret", "0123456789abcdef0123", 0644);
  g_autofree char *short_secret = harness_write_file ("short-secret", "too short", 0600);
  /* each section is followed by its secret-file line */
  struct { const char *settings; const char *message; } cases[] = {
    { "peers = 127.0.0.1:1", "chmod 600" },
    { "peers = 127.0.0.1:1", "16 to 4096 bytes" },
    { "", "neither peers to ask nor a listen address" },
    { "peers = not an address:x", "not HOST:PORT" },
    { "listen = 127.0.0.1:0\ntls = true", "tls-cert-file and tls-key-file" },
  };

  g_assert_true (kv_tier_registry_load_plugins (registry, NULL));
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const char *secret = i == 0 ? open_secret : i == 1 ? short_secret : harness_secret_path ();
      g_autofree char *section = g_strdup_printf ("%s\nsecret-file = %s", cases[i].settings, secret);
      g_autofree char *data = g_strdup_printf ("[primary]\nsize = 1MiB\nslot-size = 64KiB\n\n"
                                               "[tier peer]\ntype = peer\n%s\n", section);
      g_autoptr(KvConfig) config = kv_config_new_from_data (registry, data, -1, "check", NULL);
      g_autoptr(GError) error = NULL;

      g_assert_nonnull (config);
      /* kvtier config check: refused without touching the network */
      g_assert_false (kv_config_check (config, &error));
      g_assert_nonnull (error);
      if (strstr (error->message, cases[i].message) == NULL)
        g_error ("case %u: '%s' does not say '%s'", i, error->message, cases[i].message);
    }
}

/* ---- TLS -------------------------------------------------------------------------- */

static void
openssl (const char *args)
{
  g_autofree char *command = g_strdup_printf ("openssl %s", args);
  g_auto(GStrv) argv = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *err = NULL;
  int status = 0;

  g_assert_true (g_shell_parse_argv (command, NULL, &argv, NULL));
  g_spawn_sync (harness_dir (), argv, NULL, G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL,
                NULL, NULL, NULL, &err, &status, &error);
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("%s failed: %s", command, err);
}

static void
make_ca (const char *ca)
{
  g_autofree char *cmd = g_strdup_printf ("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                                          "-nodes -keyout %s-key.pem -out %s.pem -days 2 -subj /CN=%s",
                                          ca, ca, ca);

  openssl (cmd);
}

/* A key and a certificate @ca signs for @name, valid for IP 127.0.0.1. */
static void
make_certificate (const char *ca,
                  const char *name)
{
  g_autofree char *ext = g_strdup_printf ("%s.ext", name);
  g_autofree char *ext_path = harness_write_file (ext, "subjectAltName=IP:127.0.0.1\n", 0600);
  g_autofree char *request = g_strdup_printf ("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                                              "-nodes -keyout %s-key.pem -out %s.csr -subj /CN=127.0.0.1",
                                              name, name);
  g_autofree char *sign = g_strdup_printf ("x509 -req -in %s.csr -CA %s.pem -CAkey %s-key.pem "
                                           "-CAcreateserial -out %s.pem -days 2 -extfile %s",
                                           name, ca, ca, name, ext_path);

  openssl (request);
  openssl (sign);
}

static char *
in_dir (const char *name)
{
  return g_build_filename (harness_dir (), name, NULL);
}

static void
remove_in_dir (const char *name)
{
  g_autofree char *path = in_dir (name);

  g_remove (path);
}

static KvSecondaryTier *
tls_client_tier (KvTierRegistry *registry,
                 KvHostBuffer   *buffer,
                 PeerNode       *node,
                 const char     *ca,
                 const char     *cert,
                 gboolean        tls)
{
  GVariantBuilder props;
  g_autoptr(GError) error = NULL;
  KvSecondaryTier *tier;

  g_variant_builder_init (&props, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&props, "{sv}", "peers", g_variant_new_string (node->peer_address));
  g_variant_builder_add (&props, "{sv}", "secret-file", g_variant_new_string (harness_secret_path ()));
  g_variant_builder_add (&props, "{sv}", "namespace", g_variant_new_string (NAMESPACE));
  /* TLS handshakes are slow under ASan with full malloc stacks (the CI
   * sanitizer build): generous bounds, this test is about trust */
  g_variant_builder_add (&props, "{sv}", "io-timeout-ms", g_variant_new_string ("60000"));
  g_variant_builder_add (&props, "{sv}", "deadline-ms", g_variant_new_string ("120000"));
  g_variant_builder_add (&props, "{sv}", "tls", g_variant_new_boolean (tls));
  if (ca != NULL)
    g_variant_builder_add (&props, "{sv}", "tls-ca-file", g_variant_new_take_string (in_dir (ca)));
  if (cert != NULL)
    {
      g_autofree char *cert_name = g_strdup_printf ("%s.pem", cert);
      g_autofree char *key_name = g_strdup_printf ("%s-key.pem", cert);

      g_variant_builder_add (&props, "{sv}", "tls-cert-file", g_variant_new_take_string (in_dir (cert_name)));
      g_variant_builder_add (&props, "{sv}", "tls-key-file", g_variant_new_take_string (in_dir (key_name)));
    }
  tier = kv_tier_registry_create_tier (registry, "peer", buffer, NULL, g_variant_builder_end (&props),
                                       &error);
  g_assert_no_error (error);
  return tier;
}

/* Loads chunks 0..3 into slots 0..3; TRUE if all landed byte for byte. */
static gboolean
tls_load (KvSecondaryTier *tier,
          KvHostBuffer    *buffer)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  guint32 ids[4] = { 0, 1, 2, 3 };
  g_autoptr(KvRequest) request = kv_request_new ("tls", NULL);
  g_autoptr(KvTransferJob) job = NULL;
  gint64 until = g_get_monotonic_time () + 150 * G_USEC_PER_SEC;
  g_autofree guint8 *expected = g_malloc (SLOT_KIB * 1024);
  static guint64 job_id;

  for (guint i = 0; i < 4; i++)
    g_ptr_array_add (keys, synthetic_key (i));
  memset (kv_host_buffer_get_data (buffer), 0, 4 * SLOT_KIB * 1024);
  job = kv_transfer_job_new (++job_id, (KvKey * const *) keys->pdata, ids, 4, TRUE, request);
  g_assert_true (kv_secondary_tier_submit_load (tier, job, NULL));
  while (g_get_monotonic_time () < until)
    {
      g_autofree KvJobResult **results = kv_secondary_tier_get_finished_jobs (tier);

      if (results != NULL && results[0] != NULL)
        {
          gboolean ok = kv_job_result_get_success (results[0]);

          kv_job_result_unref (results[0]);
          for (guint i = 0; ok && i < 4; i++)
            {
              synthetic_fill (expected, SLOT_KIB * 1024, i);
              ok = memcmp (kv_host_buffer_peek_slot (buffer, i), expected, SLOT_KIB * 1024) == 0;
            }
          return ok;
        }
      g_usleep (1000);
    }
  g_error ("the TLS load was never reported");
  return FALSE;
}

static void
test_tls (void)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(PeerNode) node = NULL;
  g_autoptr(PeerNode) mutual = NULL;
  g_autofree char *settings = NULL;
  g_autofree char *mutual_settings = NULL;
  g_autofree char *dir_ca = in_dir ("ca.pem");
  g_autofree char *dir_cert = in_dir ("server.pem");
  g_autofree char *dir_key = in_dir ("server-key.pem");

  g_assert_true (kv_tier_registry_load_plugins (registry, NULL));
  buffer = kv_host_buffer_new (8, SLOT_KIB * 1024, NULL);
  /* the nodes' CA signs the server's and a client's certificate (mutual
   * TLS); another CA signs a stranger's */
  make_ca ("ca");
  make_ca ("other-ca");
  make_certificate ("ca", "server");
  make_certificate ("ca", "client");
  make_certificate ("other-ca", "client-other");

  settings = g_strdup_printf ("tls = true\ntls-cert-file = %s\ntls-key-file = %s\nio-timeout-ms = 60000\n"
                              "handshake-timeout-ms = 60000",
                              dir_cert, dir_key);
  node = peer_node_start (settings, SLOT_KIB, 0, 4);

  /* a client that trusts the CA: the chunks arrive, byte for byte */
  {
    g_autoptr(KvSecondaryTier) tier = tls_client_tier (registry, buffer, node, "ca.pem", NULL, TRUE);

    g_assert_true (tls_load (tier, buffer));
    g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  }
  /* one that trusts another CA refuses the server's certificate */
  {
    g_autoptr(KvSecondaryTier) tier = tls_client_tier (registry, buffer, node, "other-ca.pem", NULL, TRUE);
    g_autoptr(KvStats) stats = NULL;
    const char *labels[] = { "peer", NULL };
    gdouble failures = 0;

    g_assert_false (tls_load (tier, buffer));
    stats = kv_secondary_tier_get_stats (tier);
    g_assert_true (kv_stats_lookup (stats, "kvtier_peer_connect_failures", labels, &failures));
    g_assert_cmpfloat (failures, ==, 1);
    g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  }
  /* and a client without TLS gets nothing */
  {
    g_autoptr(KvSecondaryTier) tier = tls_client_tier (registry, buffer, node, NULL, NULL, FALSE);

    g_assert_false (tls_load (tier, buffer));
    g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  }
  g_assert_cmpfloat (harness_wait_metric (node, "kvtier_peer_handshake_failures_total", 2), ==, 2);
  g_assert_cmpint (peer_node_terminate (node, 5000), ==, 0);

  /* mutual TLS: only a client with a certificate of the CA is served */
  mutual_settings = g_strdup_printf ("%s\ntls-ca-file = %s\ntls-require-client-cert = true",
                                     settings, dir_ca);
  mutual = peer_node_start (mutual_settings, SLOT_KIB, 0, 4);
  {
    g_autoptr(KvSecondaryTier) tier = tls_client_tier (registry, buffer, mutual, "ca.pem", "client", TRUE);

    g_assert_true (tls_load (tier, buffer));
    g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  }
  {
    g_autoptr(KvSecondaryTier) tier = tls_client_tier (registry, buffer, mutual, "ca.pem", NULL, TRUE);

    g_assert_false (tls_load (tier, buffer));
    g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  }
  {
    g_autoptr(KvSecondaryTier) tier = tls_client_tier (registry, buffer, mutual, "ca.pem", "client-other",
                                                       TRUE);

    g_assert_false (tls_load (tier, buffer));
    g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  }
  g_assert_cmpint (peer_node_terminate (mutual, 5000), ==, 0);

  for (const char * const *f = (const char *[]) { "ca.pem", "ca-key.pem", "ca.srl", "server.pem",
                                                  "server-key.pem", "server.csr", "other-ca.pem",
                                                  "other-ca-key.pem", "other-ca.srl", "client-other.pem",
                                                  "client-other-key.pem", "client-other.csr", "client.pem",
                                                  "client-key.pem", "client.csr", NULL }; *f; f++)
    remove_in_dir (*f);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  if (argc == 4 && g_str_equal (argv[1], "--killed-client"))
    return killed_client_main (argv[2], argv[3]);

  g_test_init (&argc, &argv, NULL);
  harness_init ();
  g_test_add_func ("/peer-hostile/unauthenticated", test_unauthenticated);
  g_test_add_func ("/peer-hostile/wrong-secret-and-namespace", test_wrong_secret_and_namespace);
  g_test_add_func ("/peer-hostile/unproven-server", test_unproven_server);
  g_test_add_func ("/peer-hostile/bad-frames", test_bad_frames);
  g_test_add_func ("/peer-hostile/slow-reader", test_slow_reader);
  g_test_add_func ("/peer-hostile/idle-connections", test_idle_connections);
  g_test_add_func ("/peer-hostile/killed-client", test_killed_client);
  g_test_add_func ("/peer-hostile/config-check", test_config_check);
  g_test_add_func ("/peer-hostile/tls", test_tls);
  status = g_test_run ();
  harness_cleanup ();
  return status;
}
