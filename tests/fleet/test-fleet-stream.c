/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include <string.h>
#include <sys/socket.h>

#include <glib/gstdio.h>

#include <kvtier.h>

#include "kv-chunk-format.h"
#include "kv-peer-events.h"
#include "kv-peer-handshake.h"
#include "kv-peer-server.h"
#include "kv-peer-stream.h"
#include "kv-peer-subscriber.h"

/*
 * The event stream in one process: a KvPeerServer with a KvPeerEvents on
 * 127.0.0.1, events published by the test as a node's owner thread would,
 * and subscribers on the other end: KvPeerSubscriber into a KvFleetIndex,
 * checked against a model of what was published, and raw sockets that
 * misbehave (no authentication, bad frames, too many, too slow, far
 * behind).
 */

#define SLOT 4096
#define N_KEYS 400
#define NS "test-fleet/stream"

typedef struct
{
  KvPeerCounters  counters;
  KvPeerEvents   *events;
  KvPeerServer   *server;
  char           *address;
  GBytes         *secret;
  char           *secret_path;
  guint8          digest[32];
  KvKey          *keys[N_KEYS];
  guint32         model[N_KEYS];   /* the node's sources holding each key */
} Fixture;

static const guint8 source_class[4] = {
  KV_FLEET_LOCATION_DEVICE, KV_FLEET_LOCATION_PRIMARY, KV_FLEET_LOCATION_DISK,
  KV_FLEET_LOCATION_REMOTE,
};

static void
start_node (Fixture *fx,
            guint    backlog_bytes,
            guint    max_subscribers,
            gboolean with_events)
{
  KvPeerEventsSettings events = {
    .max_subscribers = max_subscribers,
    .max_entries = 64,
    .backlog_bytes = backlog_bytes,
    .heartbeat_ms = 100,
    .io_timeout_ms = 1000,
  };
  KvPeerServerSettings settings = {
    .secret = fx->secret,
    .block_size = SLOT,
    .max_connections = 32,
    .handshake_timeout_ms = 1000,
    .idle_timeout_ms = 5000,
    .io_timeout_ms = 1000,
    .max_inflight_bytes = 1 << 20,
    .max_keys = 64,
  };
  g_autoptr(GError) error = NULL;

  if (with_events)
    fx->events = kv_peer_events_new (&events, &fx->counters);
  settings.events = fx->events;
  memcpy (settings.namespace_digest, fx->digest, 32);
  fx->server = kv_peer_server_new (&settings, &fx->counters, NULL, NULL);
  g_assert_true (kv_peer_server_listen (fx->server, "127.0.0.1:0", &error));
  g_assert_no_error (error);
  fx->address = kv_peer_server_get_address (fx->server);
}

static void
fixture_setup (Fixture       *fx,
               gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  static const char secret[] = "0123456789abcdef-fleet-stream-secret";

  memset (fx, 0, sizeof *fx);
  fx->secret = g_bytes_new_static (secret, sizeof secret - 1);
  g_file_open_tmp ("kvtier-fleet-secret-XXXXXX", &fx->secret_path, &error);
  g_assert_no_error (error);
  g_assert_true (g_file_set_contents_full (fx->secret_path, secret, sizeof secret - 1,
                                           G_FILE_SET_CONTENTS_NONE, 0600, &error));
  kv_chunk_namespace_digest (NS, SLOT, fx->digest);
  for (guint i = 0; i < N_KEYS; i++)
    {
      guint8 hash[32];

      memset (hash, 0x11, sizeof hash);
      memcpy (hash, &i, sizeof i);
      fx->keys[i] = kv_key_new (hash, sizeof hash, i % 7 == 0 ? 2 : 0);
    }
}

static void
fixture_teardown (Fixture       *fx,
                  gconstpointer  data)
{
  if (fx->server != NULL)
    kv_peer_server_stop (fx->server);
  g_clear_object (&fx->server);
  g_clear_object (&fx->events);
  for (guint i = 0; i < N_KEYS; i++)
    kv_key_unref (fx->keys[i]);
  g_unlink (fx->secret_path);
  g_free (fx->secret_path);
  g_free (fx->address);
  g_bytes_unref (fx->secret);
}

/* Publishes that @source stored (or removed) keys [first, first + n), and
 * keeps the model. */
static void
publish (Fixture  *fx,
         guint     source,
         gboolean  removed,
         guint     first,
         guint     n)
{
  g_autoptr(KvEvent) event = NULL;
  KvKey *keys[N_KEYS];

  for (guint i = 0; i < n; i++)
    {
      guint k = (first + i) % N_KEYS;

      keys[i] = fx->keys[k];
      if (removed)
        fx->model[k] &= ~(1u << source);
      else
        fx->model[k] |= 1u << source;
    }
  event = kv_event_new (keys, n, source == 3 ? KV_MEDIUM_STORAGE : KV_MEDIUM_CPU, removed,
                        source == 3 ? KV_LOCALITY_REMOTE : KV_LOCALITY_LOCAL);
  kv_peer_events_publish (fx->events, source, event);
}

static guint8
expected (Fixture *fx,
          guint    k)
{
  guint8 classes = 0;

  for (guint s = 0; s < 4; s++)
    if (fx->model[k] & (1u << s))
      classes |= source_class[s];
  return classes;
}

static void
random_events (Fixture *fx,
               GRand   *rand,
               guint    n)
{
  for (guint e = 0; e < n; e++)
    publish (fx, g_rand_int_range (rand, 0, 4), g_rand_int_range (rand, 0, 3) == 0,
             g_rand_int_range (rand, 0, N_KEYS), g_rand_int_range (rand, 1, 40));
}

/* The stream's sequence number once everything published is applied. */
static guint64
stream_seq (Fixture *fx)
{
  gint64 until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;

  while (kv_peer_events_get_n_pending (fx->events) > 0 && g_get_monotonic_time () < until)
    g_usleep (1000);
  g_assert_cmpuint (kv_peer_events_get_n_pending (fx->events), ==, 0);
  return kv_peer_events_get_seq (fx->events);
}

static GObject *
subscriber_new (Fixture      *fx,
                KvFleetIndex *index)
{
  g_autoptr(GError) error = NULL;
  GObject *subscriber = g_initable_new (KV_TYPE_PEER_SUBSCRIBER, NULL, &error,
                                        "address", fx->address, "index", index,
                                        "secret-file", fx->secret_path, "namespace", NS,
                                        "slot-size", (guint64) SLOT, "silence-timeout-ms", 1000,
                                        "reconnect-ms", 20, NULL);

  g_assert_no_error (error);
  return subscriber;
}

static void
wait_applied (GObject *subscriber,
              guint64  seq)
{
  gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  guint64 applied = 0, snapshots = 0;

  do
    {
      g_object_get (subscriber, "applied-seq", &applied, "n-snapshots", &snapshots, NULL);
      if (snapshots > 0 && applied >= seq)
        return;
      g_usleep (1000);
    }
  while (g_get_monotonic_time () < until);
  g_error ("the subscriber applied sequence %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT,
           applied, seq);
}

static void
assert_index_is_model (Fixture      *fx,
                       KvFleetIndex *index,
                       guint         node)
{
  guint64 held = 0;

  for (guint k = 0; k < N_KEYS; k++)
    {
      g_assert_cmphex (kv_fleet_index_get_locations (index, node, fx->keys[k]), ==, expected (fx, k));
      held += expected (fx, k) != 0;
    }
  g_assert_cmpuint (kv_fleet_index_get_node_n_keys (index, node), ==, held);
}

/* A subscriber from the start and one that comes late see exactly what
 * the node published, through snapshot and deltas. */
static void
test_snapshot_and_deltas (Fixture       *fx,
                          gconstpointer  data)
{
  g_autoptr(KvFleetIndex) early_index = kv_fleet_index_new ();
  g_autoptr(KvFleetIndex) late_index = kv_fleet_index_new ();
  g_autoptr(GRand) rand = g_rand_new_with_seed (27);
  g_autoptr(GObject) early = NULL;
  g_autoptr(GObject) late = NULL;
  guint node = 0;

  start_node (fx, 16 << 20, 4, TRUE);
  /* state before anyone subscribes: in the first snapshot */
  publish (fx, 1, FALSE, 0, 100);
  publish (fx, 2, FALSE, 50, 100);
  publish (fx, 0, FALSE, 0, 10);
  early = subscriber_new (fx, early_index);
  wait_applied (early, stream_seq (fx));
  g_object_get (early, "node", &node, NULL);
  assert_index_is_model (fx, early_index, node);

  /* deltas: stores, removals, keys in several places at once */
  for (guint round = 0; round < 5; round++)
    {
      random_events (fx, rand, 40);
      wait_applied (early, stream_seq (fx));
      assert_index_is_model (fx, early_index, node);
    }

  /* a late subscriber gets the same view from its snapshot alone */
  late = subscriber_new (fx, late_index);
  wait_applied (late, stream_seq (fx));
  assert_index_is_model (fx, late_index, 0);
  random_events (fx, rand, 40);
  {
    guint64 seq = stream_seq (fx);

    wait_applied (early, seq);
    wait_applied (late, seq);
  }
  assert_index_is_model (fx, early_index, node);
  assert_index_is_model (fx, late_index, 0);
  g_assert_cmpuint (kv_peer_events_get_n_subscribers (fx->events), ==, 2);
  g_assert_cmpuint (kv_peer_events_get_n_resyncs (fx->events), ==, 0);
}

/* ---- raw subscribers ------------------------------------------------------------ */

static GSocketConnection *
raw_connect (Fixture *fx,
             gint     rcvbuf)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocketConnectable) connectable = g_network_address_parse (fx->address, 0, &error);
  g_autoptr(GSocketAddressEnumerator) enumerator = g_socket_connectable_enumerate (connectable);
  g_autoptr(GSocketAddress) address = g_socket_address_enumerator_next (enumerator, NULL, &error);
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, &error);

  g_assert_no_error (error);
  /* a small window: the server feels a reader that does not read */
  if (rcvbuf > 0)
    g_assert_true (g_socket_set_option (socket, SOL_SOCKET, SO_RCVBUF, rcvbuf, &error));
  g_socket_set_timeout (socket, 3);
  g_assert_true (g_socket_connect (socket, address, NULL, &error));
  g_assert_no_error (error);
  return g_socket_connection_factory_create_connection (socket);
}

static void
raw_send (GSocketConnection *conn,
          GByteArray        *frame)
{
  g_autoptr(GError) error = NULL;

  g_output_stream_write_all (g_io_stream_get_output_stream (G_IO_STREAM (conn)), frame->data,
                             frame->len, NULL, NULL, &error);
  g_assert_no_error (error);
}

/* Reads one frame: FALSE at the end of the stream (or a timeout). */
static gboolean
raw_read (GSocketConnection *conn,
          KvPeerFrameHeader *header,
          GByteArray        *body)
{
  GInputStream *in = g_io_stream_get_input_stream (G_IO_STREAM (conn));
  guint8 bytes[KV_PEER_FRAME_HEADER_SIZE];
  gsize n = 0;

  if (!g_input_stream_read_all (in, bytes, sizeof bytes, &n, NULL, NULL) || n < sizeof bytes)
    return FALSE;
  g_assert_true (kv_peer_frame_header_parse (bytes, G_MAXUINT32, header, NULL));
  g_byte_array_set_size (body, header->body_len);
  if (!g_input_stream_read_all (in, body->data, body->len, &n, NULL, NULL) || n < body->len)
    return FALSE;
  return TRUE;
}

static guint32
raw_error_code (GSocketConnection *conn)
{
  g_autoptr(GByteArray) body = g_byte_array_new ();
  g_auto(KvPeerMessage) message = { 0 };
  KvPeerFrameHeader header;

  g_assert_true (raw_read (conn, &header, body));
  g_assert_cmpint (header.type, ==, KV_PEER_FRAME_ERROR);
  g_assert_true (kv_peer_message_parse (header.type, body->data, body->len, 0, &message, NULL));
  /* and the server closes */
  g_assert_false (raw_read (conn, &header, body));
  return message.error_code;
}

/* The handshake as a client with @secret; the server's AUTH is checked. */
static GSocketConnection *
raw_subscriber (Fixture *fx,
                GBytes  *secret,
                gint     rcvbuf)
{
  GSocketConnection *conn = raw_connect (fx, rcvbuf);
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_autoptr(GByteArray) body = g_byte_array_new ();
  g_auto(KvPeerMessage) hello = { 0 };
  guint8 nonce[KV_PEER_NONCE_LEN] = { 7 };
  guint8 params[KV_PEER_AUTH_PARAMS_SIZE];
  guint8 mac[KV_PEER_MAC_LEN];
  KvPeerFrameHeader header;

  kv_peer_frame_append_hello (out, nonce);
  raw_send (conn, out);
  g_assert_true (raw_read (conn, &header, body));
  g_assert_cmpint (header.type, ==, KV_PEER_FRAME_HELLO);
  g_assert_true (kv_peer_message_parse (header.type, body->data, body->len, 0, &hello, NULL));
  kv_peer_frame_auth_params (params, SLOT, fx->digest, 0, 0);
  kv_peer_handshake_mac (secret, KV_PEER_ROLE_CLIENT, nonce, hello.nonce, params, mac);
  g_byte_array_set_size (out, 0);
  kv_peer_frame_append_auth (out, params, mac);
  raw_send (conn, out);
  return conn;
}

static void
expect_auth (GSocketConnection *conn)
{
  g_autoptr(GByteArray) body = g_byte_array_new ();
  KvPeerFrameHeader header;

  g_assert_true (raw_read (conn, &header, body));
  g_assert_cmpint (header.type, ==, KV_PEER_FRAME_AUTH);
}

static void
send_subscribe (GSocketConnection *conn)
{
  g_autoptr(GByteArray) out = g_byte_array_new ();

  kv_peer_stream_append_subscribe (out);
  raw_send (conn, out);
}

/* Reads and applies the stream until @reader reaches @seq live. */
static void
follow_until (GSocketConnection  *conn,
              KvPeerStreamReader *reader,
              guint64             seq,
              guint              *n_begins)
{
  g_autoptr(GByteArray) body = g_byte_array_new ();

  while (!reader->live || reader->last_seq < seq)
    {
      g_auto(KvPeerStreamMessage) message = { 0 };
      g_autoptr(GError) error = NULL;
      KvPeerFrameHeader header;

      g_assert_true (raw_read (conn, &header, body));
      g_assert_true (kv_peer_stream_parse (header.type, body->data, body->len, 64, &message, &error));
      g_assert_no_error (error);
      if (header.type == KV_PEER_FRAME_SNAPSHOT_BEGIN && n_begins != NULL)
        (*n_begins)++;
      g_assert_true (kv_peer_stream_reader_apply (reader, &message, NULL, &error));
      g_assert_no_error (error);
    }
}

/* A reader that stalls while the node changes falls behind the backlog:
 * it gets a new snapshot, and its view is exact again. */
static void
test_resync (Fixture       *fx,
             gconstpointer  data)
{
  g_autoptr(KvFleetIndex) index = kv_fleet_index_new ();
  g_autoptr(GSocketConnection) conn = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (5);
  KvPeerStreamReader reader;
  guint node = kv_fleet_index_add_node (index, "raw");
  guint n_begins = 0;

  start_node (fx, 4096, 4, TRUE);
  publish (fx, 1, FALSE, 0, N_KEYS);
  conn = raw_subscriber (fx, fx->secret, 4096);
  expect_auth (conn);
  send_subscribe (conn);
  kv_peer_stream_reader_init (&reader, index, node);
  follow_until (conn, &reader, stream_seq (fx), &n_begins);
  g_assert_cmpuint (n_begins, ==, 1);

  /* far more deltas than the socket and the 4 KiB backlog hold, while
   * the reader reads nothing (for less than the I/O timeout) */
  for (guint round = 0; round < 12; round++)
    {
      random_events (fx, rand, 20);
      stream_seq (fx);
    }
  g_usleep (200 * 1000);
  follow_until (conn, &reader, stream_seq (fx), &n_begins);
  g_assert_cmpuint (n_begins, >=, 2);
  g_assert_cmpuint (kv_peer_events_get_n_resyncs (fx->events), >=, 1);
  assert_index_is_model (fx, index, node);
  g_assert_cmpuint (kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_SLOW_READERS), ==, 0);
}

/* A reader that stops reading is dropped after the I/O timeout. */
static void
test_slow_reader (Fixture       *fx,
                  gconstpointer  data)
{
  g_autoptr(GSocketConnection) conn = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (9);
  gint64 until;

  start_node (fx, 16 << 20, 4, TRUE);
  conn = raw_subscriber (fx, fx->secret, 4096);
  expect_auth (conn);
  send_subscribe (conn);
  /* deltas until the socket's buffers are full and a write stalls for
   * the I/O timeout (the kernel may grow the server's send buffer to
   * megabytes first) */
  until = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  while (kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_SLOW_READERS) == 0 &&
         g_get_monotonic_time () < until)
    {
      random_events (fx, rand, 100);
      g_usleep (20 * 1000);
    }
  g_assert_cmpuint (kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_SLOW_READERS), ==, 1);
  until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  while (kv_peer_events_get_n_subscribers (fx->events) > 0 && g_get_monotonic_time () < until)
    g_usleep (1000);
  g_assert_cmpuint (kv_peer_events_get_n_subscribers (fx->events), ==, 0);
}

/* Strangers, bad frames, too many subscribers. */
static void
test_hostile (Fixture       *fx,
              gconstpointer  data)
{
  static const char wrong[] = "not-the-secret-of-this-fleet!!";
  g_autoptr(GBytes) wrong_secret = g_bytes_new_static (wrong, sizeof wrong - 1);
  g_autoptr(GByteArray) out = g_byte_array_new ();
  g_autoptr(GByteArray) body = g_byte_array_new ();
  KvPeerFrameHeader header;

  start_node (fx, 16 << 20, 2, TRUE);
  publish (fx, 1, FALSE, 0, 10);

  /* SUBSCRIBE before any handshake: closed without a word */
  {
    g_autoptr(GSocketConnection) conn = raw_connect (fx, 0);

    kv_peer_stream_append_subscribe (out);
    raw_send (conn, out);
    g_assert_false (raw_read (conn, &header, body));
    g_assert_cmpuint (kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_HANDSHAKE_FAILURES), ==, 1);
  }
  /* the wrong secret: refused before SUBSCRIBE is read */
  {
    g_autoptr(GSocketConnection) conn = raw_subscriber (fx, wrong_secret, 0);

    send_subscribe (conn);
    g_assert_cmpuint (raw_error_code (conn), ==, KV_PEER_ERROR_AUTH_FAILED);
    g_assert_cmpuint (kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_AUTH_FAILURES), ==, 1);
  }
  /* SUBSCRIBE with flags this version does not know */
  {
    g_autoptr(GSocketConnection) conn = raw_subscriber (fx, fx->secret, 0);
    static const guint8 flagged[] = { 10, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0 };

    expect_auth (conn);
    g_byte_array_set_size (out, 0);
    g_byte_array_append (out, flagged, sizeof flagged);
    raw_send (conn, out);
    g_assert_cmpuint (raw_error_code (conn), ==, KV_PEER_ERROR_BAD_FRAME);
  }
  /* two subscribers are allowed; a third is told the node is busy */
  {
    g_autoptr(GSocketConnection) a = raw_subscriber (fx, fx->secret, 0);
    g_autoptr(GSocketConnection) b = raw_subscriber (fx, fx->secret, 0);
    g_autoptr(GSocketConnection) c = raw_subscriber (fx, fx->secret, 0);
    guint64 limits = kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_LIMIT_VIOLATIONS);

    expect_auth (a);
    expect_auth (b);
    expect_auth (c);
    send_subscribe (a);
    g_assert_true (raw_read (a, &header, body));
    g_assert_cmpint (header.type, ==, KV_PEER_FRAME_SNAPSHOT_BEGIN);
    send_subscribe (b);
    g_assert_true (raw_read (b, &header, body));
    g_assert_cmpint (header.type, ==, KV_PEER_FRAME_SNAPSHOT_BEGIN);
    send_subscribe (c);
    g_assert_cmpuint (raw_error_code (c), ==, KV_PEER_ERROR_BUSY);
    g_assert_cmpuint (kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_LIMIT_VIOLATIONS), ==,
                      limits + 1);

    /* a subscriber that sends anything but BYE is closed, without an
     * ERROR in the middle of its stream: here a frame over the limit */
    {
      static const guint8 big[] = { 3, 0, 0, 0, 0, 1, 0, 0 };

      g_byte_array_set_size (out, 0);
      g_byte_array_append (out, big, sizeof big);
      raw_send (a, out);
      while (raw_read (a, &header, body))
        g_assert_cmpint (header.type, !=, KV_PEER_FRAME_ERROR);
      g_assert_cmpuint (kv_peer_counters_get (&fx->counters, KV_PEER_COUNTER_LIMIT_VIOLATIONS), ==,
                        limits + 2);
    }
    /* BYE ends one quietly */
    g_byte_array_set_size (out, 0);
    kv_peer_frame_append_bye (out);
    raw_send (b, out);
    while (raw_read (b, &header, body))
      ;
  }
  {
    gint64 until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;

    while (kv_peer_events_get_n_subscribers (fx->events) > 0 && g_get_monotonic_time () < until)
      g_usleep (1000);
    g_assert_cmpuint (kv_peer_events_get_n_subscribers (fx->events), ==, 0);
  }
}

/* A node that does not stream refuses SUBSCRIBE. */
static void
test_no_stream (Fixture       *fx,
                gconstpointer  data)
{
  g_autoptr(GSocketConnection) conn = NULL;

  start_node (fx, 0, 0, FALSE);
  conn = raw_subscriber (fx, fx->secret, 0);
  expect_auth (conn);
  send_subscribe (conn);
  g_assert_cmpuint (raw_error_code (conn), ==, KV_PEER_ERROR_BAD_FRAME);
}

static void
count_forgotten (KvFleetIndex *index,
                 guint         node,
                 const char   *name,
                 gpointer      data)
{
  g_atomic_int_inc ((gint *) data);
}

/* Heartbeats keep an idle node alive in the index; once it stops, the
 * index forgets it within its timeout. */
static void
test_heartbeat_and_silence (Fixture       *fx,
                            gconstpointer  data)
{
  g_autoptr(KvFleetIndex) index = g_object_new (KV_TYPE_FLEET_INDEX, "node-timeout-ms", 600, NULL);
  g_autoptr(GObject) subscriber = NULL;
  gint forgotten = 0;
  guint node = 0;
  gint64 until, stopped;

  start_node (fx, 16 << 20, 2, TRUE);
  publish (fx, 1, FALSE, 0, 20);
  g_signal_connect (index, "node-forgotten", G_CALLBACK (count_forgotten), &forgotten);
  subscriber = subscriber_new (fx, index);
  wait_applied (subscriber, stream_seq (fx));
  g_object_get (subscriber, "node", &node, NULL);

  /* 1.5 s of silence from the owner thread: heartbeats only */
  until = g_get_monotonic_time () + 1500 * 1000;
  while (g_get_monotonic_time () < until)
    {
      g_assert_cmpuint (kv_fleet_index_expire (index), ==, 0);
      g_usleep (50 * 1000);
    }
  g_assert_true (kv_fleet_index_is_node_alive (index, node));
  g_assert_cmpuint (kv_fleet_index_get_node_n_keys (index, node), ==, 20);

  kv_peer_server_stop (fx->server);
  stopped = g_get_monotonic_time ();
  /* the subscriber's thread expires the index while it waits to reconnect */
  while (g_atomic_int_get (&forgotten) == 0 && g_get_monotonic_time () < stopped + 5 * G_USEC_PER_SEC)
    g_usleep (10 * 1000);
  g_assert_cmpint (g_atomic_int_get (&forgotten), ==, 1);
  g_assert_cmpint (g_get_monotonic_time () - stopped, <, 2 * G_USEC_PER_SEC);
  g_assert_false (kv_fleet_index_is_node_alive (index, node));
  g_assert_cmpuint (kv_fleet_index_get_n_keys (index), ==, 0);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

#define ADD(path, func) g_test_add (path, Fixture, NULL, fixture_setup, func, fixture_teardown)
  ADD ("/fleet/stream/snapshot-and-deltas", test_snapshot_and_deltas);
  ADD ("/fleet/stream/resync", test_resync);
  ADD ("/fleet/stream/slow-reader", test_slow_reader);
  ADD ("/fleet/stream/hostile", test_hostile);
  ADD ("/fleet/stream/no-stream", test_no_stream);
  ADD ("/fleet/stream/heartbeat-and-silence", test_heartbeat_and_silence);
#undef ADD

  return g_test_run ();
}
