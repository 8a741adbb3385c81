/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-server.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "kv-accept-loop.h"
#include "kv-chunk-format.h"
#include "kv-log-limiter.h"
#include "kv-peer-handshake.h"
#include "kv-peer-stream.h"

/* TLS handshakes run at once: glib-networking runs each on a thread of
 * GIO's shared pool until it ends, so each one waiting for a client ties
 * up a thread (and GnuTLS's session buffers) until the handshake timeout. */
#define MAX_TLS_HANDSHAKES 8
/* DATA frames of one FETCH written at once, one asynchronous write and
 * one slow-reader timer (io-timeout-ms) for them all instead of one each:
 * at most this many, and no more payload bytes than DATA_BATCH_MAX_BYTES
 * (but for one frame), so that a reader must go no faster than one frame
 * of 2 MiB in io-timeout-ms asked of it */
#define DATA_BATCH_MAX_FRAMES 16
#define DATA_BATCH_MAX_BYTES (2u << 20)
#define DATA_HEAD_SIZE (KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE + KV_CHUNK_HEADER_SIZE)
/* The largest TLS record a ClientHello may come in (2^14 bytes of
 * plaintext and a margin; a ClientHello is sent in plaintext). */
#define MAX_TLS_RECORD (16384 + 256)
#define TLS_RECORD_HEADER 5

/*
 * The serving side of the peer protocol (doc/protocol.md). A GSocketService
 * accepts connections on a thread of its own, which runs its own
 * GMainContext; every connection is a state machine of asynchronous reads
 * and writes on that thread, so a thousand idle or hostile connections cost
 * memory, not threads, and never stall the others.
 *
 * A connection authenticates before anything else is parsed: the only
 * frames read before the HMAC proof checks out are one HELLO and one AUTH,
 * both of fixed size. Then it asks one thing at a time (LOOKUP or FETCH):
 * the request goes to the owner thread, which answers from the node's
 * primary and tiers (KvPeerTier's serve_external_requests), and the next
 * frame is read only when the answer was written. So the bytes a connection
 * has in flight are bounded by one FETCH, which must fit max-inflight-bytes.
 *
 * Timers close what does not move: the handshake must end within
 * handshake-timeout-ms, a ready connection that sends nothing is closed
 * after idle-timeout-ms, and a frame that is not read or written in full
 * within io-timeout-ms (a slow sender, one that stops in the middle of a
 * frame header, or a reader that does not drain) ends its connection.
 *
 * Connections that have not authenticated have a budget of their own,
 * apart from the peers': at most max-handshakes of them (a new one closes
 * the oldest: a real peer authenticates in a few round trips, a hostile
 * one holds on) and max-handshakes-per-address from one source address
 * (more are closed at accept). With TLS, nothing of a connection is
 * allocated beyond its socket until the client's first TLS record (its
 * ClientHello) is in the socket's buffer in full (SO_RCVLOWAT makes the
 * socket readable only then), and at most MAX_TLS_HANDSHAKES TLS
 * handshakes run at once. Every rejection is counted.
 */

typedef enum {
  CONN_HELLO,
  CONN_AUTH,
  CONN_READY,
  CONN_BUSY,     /* a request is with the owner thread or being answered */
  CONN_SUBSCRIBED, /* streams the node's events (kv-peer-events.c writes) */
  CONN_CLOSED,
} ConnState;

/* Where a TLS connection's handshake is (CONN_HELLO meanwhile). */
typedef enum {
  TLS_NONE,      /* plain TCP, or its TLS handshake is over */
  TLS_PEEKING,   /* waiting for its first TLS record in full */
  TLS_QUEUED,    /* the record is in; waiting for a handshake slot */
  TLS_RUNNING,   /* the handshake runs */
} TlsPhase;

typedef struct _Conn Conn;
typedef void (*FrameFunc) (Conn *conn, const KvPeerFrameHeader *header);

struct _KvPeerServeRequest
{
  KvPeerServeKind kind;
  Conn           *conn;
  guint32         request_id;
  GPtrArray      *keys;
};

struct _Conn
{
  gint              ref_count;
  KvPeerServer     *server;       /* outlives every connection */
  guint64           id;
  ConnState         state;
  GSocketConnection *socket_conn;
  char             *client;       /* "HOST:PORT" of the peer, for messages */
  GIOStream        *stream;       /* socket_conn, or the TLS connection over it */
  GCancellable     *cancellable;
  GSource          *timer;
  KvPeerCounter     timer_counter;
  char             *address;      /* the peer's IP address */
  gboolean          handshaking;  /* in server->handshaking, counted for its address */
  gboolean          progressed;   /* its first message (ClientHello, or HELLO) came in full */
  GList             handshake_link;
  TlsPhase          tls_phase;
  GSource          *tls_watch;    /* TLS_PEEKING */
  GList             tls_link;     /* TLS_QUEUED: in server->tls_queue */
  gboolean          authenticated;

  guint8            header[KV_PEER_FRAME_HEADER_SIZE];
  gsize             header_pos;
  guint8           *body;
  gsize             body_len;
  FrameFunc         on_frame;
  guint32           max_body;

  guint8            client_nonce[KV_PEER_NONCE_LEN];
  guint8            server_nonce[KV_PEER_NONCE_LEN];
  GByteArray       *out;
  gboolean          close_after_write;

  /* the FETCH being answered */
  KvPeerServeRequest  *fetch;
  KvPeerServedChunk   *chunks;
  GCancellable        *fetch_cancellable;
  KvPeerFetchDoneFunc  fetch_done;
  gpointer             fetch_done_data;
  guint                fetch_index;
  guint                fetch_sent;
  guint                batch_frames; /* DATA frames of the write in flight */
  /* per frame of a batch: its DATA header, prefix and chunk header */
  guint8              *data_heads;
  GOutputVector        vectors[2 * DATA_BATCH_MAX_FRAMES];

  KvPeerEventsSubscriber *subscriber;
};

struct _KvPeerServer
{
  GObject parent_instance;

  KvPeerServerSettings    settings;
  KvPeerCounters         *counters;
  KvPeerServerQueuedFunc  queued_func;
  gpointer                queued_data;

  GMainContext   *context;
  GMainLoop      *loop;
  GThread        *thread;
  KvAcceptLoop   *accept_loop;    /* I/O thread */
  GHashTable     *conns;          /* I/O thread: id → Conn */
  guint64         next_conn_id;
  char           *address;

  /* the limits in force: the settings', lowered to fit RLIMIT_NOFILE */
  guint           max_connections;
  guint           max_handshakes;
  guint           max_per_address;

  /* I/O thread */
  GQueue          handshaking;    /* Conn not authenticated yet, oldest first */
  GHashTable     *per_address;    /* address → its connections in handshaking */
  guint           n_authenticated;
  guint           n_tls_running;
  GQueue          tls_queue;      /* Conn whose ClientHello is in, for a TLS slot */

  GMutex          lock;
  GCond           cond;
  gboolean        started;        /* guarded by lock, with start_error */
  GError         *start_error;
  gboolean        stopping;
  GPtrArray      *queue;          /* KvPeerServeRequest, for the owner thread */
  gint            n_connections;  /* atomic */
  gint            n_busy;         /* atomic */

  /* messages */
  char              *name;        /* guarded by lock: "peer tier 1:peer" */
  KvLogEventLimiter  auth_log;    /* I/O thread */
  KvLogEventLimiter  namespace_log;
  KvLogEventLimiter  tls_log;
};

G_DEFINE_FINAL_TYPE (KvPeerServer, kv_peer_server, G_TYPE_OBJECT)

static void read_frame (Conn *conn, guint32 max_body, guint timeout_ms,
                        KvPeerCounter timeout_counter, FrameFunc on_frame);
static void read_request (Conn *conn);
static void subscribe (Conn *conn);
static void tls_start_next (KvPeerServer *self);

static void
count (KvPeerServer  *self,
       KvPeerCounter  counter)
{
  kv_peer_counters_add (self->counters, counter, 1);
}

/* "HOST:PORT" of the other end of @connection, or NULL. */
static char *
client_address (GSocketConnection *connection)
{
  g_autoptr(GSocketAddress) remote = g_socket_connection_get_remote_address (connection, NULL);
  g_autofree char *host = NULL;

  if (remote == NULL || !G_IS_INET_SOCKET_ADDRESS (remote))
    return NULL;
  host = g_inet_address_to_string (g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (remote)));
  return g_strdup_printf (g_inet_address_get_family (g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (remote))) ==
                          G_SOCKET_FAMILY_IPV6 ? "[%s]:%u" : "%s:%u", host,
                          g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (remote)));
}

/* I/O thread: logs a client's failed handshake, at most once every 30 s
 * per kind (@limiter), naming the tier, this server, the client and the
 * cause. The counter of the kind counts every one. */
static void
log_refused_client (Conn              *conn,
                    KvLogEventLimiter *limiter,
                    const char        *what,
                    const char        *cause)
{
  KvPeerServer *self = conn->server;
  const char *client = conn->client;
  g_autofree char *name = NULL;
  guint64 n_events = 0;

  if (!kv_log_event_limiter_log (limiter, g_get_monotonic_time (), &n_events))
    return;
  g_mutex_lock (&self->lock);
  name = g_strdup (self->name != NULL ? self->name : "peer tier");
  g_mutex_unlock (&self->lock);
  if (n_events > 1)
    g_message ("%s, server %s: client %s %s: %s; closed (%" G_GUINT64_FORMAT " such clients "
               "since the last message)", name, self->address, client != NULL ? client : "(unknown)",
               what, cause, n_events);
  else
    g_message ("%s, server %s: client %s %s: %s; closed", name, self->address,
               client != NULL ? client : "(unknown)", what, cause);
}

static Conn *
conn_ref (Conn *conn)
{
  g_atomic_int_inc (&conn->ref_count);
  return conn;
}

static void
conn_unref (Conn *conn)
{
  if (!g_atomic_int_dec_and_test (&conn->ref_count))
    return;
  g_clear_object (&conn->stream);
  g_clear_object (&conn->socket_conn);
  g_clear_pointer (&conn->client, g_free);
  g_clear_object (&conn->cancellable);
  g_clear_pointer (&conn->body, g_free);
  g_clear_pointer (&conn->out, g_byte_array_unref);
  g_clear_pointer (&conn->data_heads, g_free);
  g_free (conn->address);
  g_free (conn);
}

static gboolean
in_handshake (Conn *conn)
{
  return conn->state == CONN_HELLO || conn->state == CONN_AUTH;
}

static void
stop_timer (Conn *conn)
{
  if (conn->timer != NULL)
    {
      g_source_destroy (conn->timer);
      g_clear_pointer (&conn->timer, g_source_unref);
    }
}

/* Ends a FETCH answer exactly once. */
static void
finish_fetch (Conn     *conn,
              gboolean  success)
{
  KvPeerServeRequest *request = g_steal_pointer (&conn->fetch);
  KvPeerFetchDoneFunc done = conn->fetch_done;

  if (request == NULL)
    return;
  conn->fetch_done = NULL;
  if (!success)
    count (conn->server, KV_PEER_COUNTER_SERVE_FAILURES);
  if (done != NULL)
    done (success, conn->fetch_done_data);
  g_clear_pointer (&conn->chunks, g_free);
  g_clear_object (&conn->fetch_cancellable);
  kv_peer_serve_request_free (request);
}

static void
push_request (KvPeerServer       *self,
              KvPeerServeRequest *request)
{
  g_mutex_lock (&self->lock);
  g_ptr_array_add (self->queue, request);
  g_mutex_unlock (&self->lock);
  if (self->queued_func != NULL)
    self->queued_func (self->queued_data);
}

static KvPeerServeRequest *
serve_request_new (Conn            *conn,
                   KvPeerServeKind  kind)
{
  KvPeerServeRequest *request = g_new0 (KvPeerServeRequest, 1);

  request->kind = kind;
  request->conn = conn_ref (conn);
  return request;
}

/* @conn leaves the handshake budget: authenticated, or closed. */
static void
handshake_over (Conn *conn)
{
  KvPeerServer *self = conn->server;
  guint n;

  if (!conn->handshaking)
    return;
  conn->handshaking = FALSE;
  g_queue_unlink (&self->handshaking, &conn->handshake_link);
  n = GPOINTER_TO_UINT (g_hash_table_lookup (self->per_address, conn->address));
  if (n <= 1)
    g_hash_table_remove (self->per_address, conn->address);
  else
    g_hash_table_insert (self->per_address, g_strdup (conn->address), GUINT_TO_POINTER (n - 1));
}

/* Closes @conn now (I/O thread). Pending reads and writes fail with
 * G_IO_ERROR_CANCELLED and drop their references. */
static void
conn_close (Conn *conn)
{
  KvPeerServer *self = conn->server;
  gboolean authenticated;

  if (conn->state == CONN_CLOSED)
    return;
  authenticated = conn->state == CONN_READY || conn->state == CONN_BUSY ||
                  conn->state == CONN_SUBSCRIBED;
  if (conn->subscriber != NULL)
    kv_peer_events_unsubscribe (self->settings.events, g_steal_pointer (&conn->subscriber));
  if (conn->state == CONN_BUSY)
    g_atomic_int_add (&self->n_busy, -1);
  conn->state = CONN_CLOSED;
  stop_timer (conn);
  handshake_over (conn);
  if (conn->authenticated)
    self->n_authenticated--;
  if (conn->tls_watch != NULL)
    {
      g_source_destroy (conn->tls_watch);
      g_clear_pointer (&conn->tls_watch, g_source_unref);
    }
  if (conn->tls_phase == TLS_QUEUED)
    {
      g_queue_unlink (&self->tls_queue, &conn->tls_link);
      conn->tls_phase = TLS_NONE;
    }
  g_cancellable_cancel (conn->cancellable);
  finish_fetch (conn, FALSE);
  /* Closing the socket itself, not the (TLS) stream: a graceful TLS close
   * would wait for a peer that may never read. */
  g_socket_close (g_socket_connection_get_socket (conn->socket_conn), NULL);
  g_atomic_int_add (&self->n_connections, -1);
  /* The owner thread keeps a request per authenticated connection. */
  if (authenticated)
    push_request (self, serve_request_new (conn, KV_PEER_SERVE_CLOSED));
  if (self->conns != NULL)
    g_hash_table_remove (self->conns, &conn->id);  /* drops the table's reference */
}

static gboolean
timer_fired (gpointer data)
{
  Conn *conn = data;

  g_clear_pointer (&conn->timer, g_source_unref);
  count (conn->server, conn->timer_counter);
  g_debug ("peer server: connection %" G_GUINT64_FORMAT " timed out", conn->id);
  conn_close (conn);
  return G_SOURCE_REMOVE;
}

static void
start_timer (Conn          *conn,
             guint          timeout_ms,
             KvPeerCounter  counter)
{
  stop_timer (conn);
  if (timeout_ms == 0)
    return;
  conn->timer_counter = counter;
  conn->timer = g_timeout_source_new (timeout_ms);
  g_source_set_callback (conn->timer, timer_fired, conn, NULL);
  g_source_attach (conn->timer, conn->server->context);
}

/* ---- writing ------------------------------------------------------------- */

typedef void (*WrittenFunc) (Conn *conn);

typedef struct
{
  Conn        *conn;
  WrittenFunc  then;
} WriteOp;

static void
out_written (GObject      *stream,
             GAsyncResult *result,
             gpointer      data)
{
  WriteOp *op = data;
  Conn *conn = op->conn;
  WrittenFunc then = op->then;
  g_autoptr(GError) error = NULL;

  g_free (op);
  if (!g_output_stream_write_all_finish (G_OUTPUT_STREAM (stream), result, NULL, &error))
    {
      if (conn->state != CONN_CLOSED)
        {
          count (conn->server, KV_PEER_COUNTER_CONNECTION_ERRORS);
          conn_close (conn);
        }
      conn_unref (conn);
      return;
    }
  if (conn->state != CONN_CLOSED)
    {
      if (!in_handshake (conn))
        stop_timer (conn);
      g_byte_array_set_size (conn->out, 0);
      if (conn->close_after_write)
        conn_close (conn);
      else if (then != NULL)
        then (conn);
    }
  conn_unref (conn);
}

/* Writes conn->out in full within io-timeout-ms (a reader that does not
 * drain is a slow reader), then calls @then. */
static void
write_out (Conn        *conn,
           WrittenFunc  then)
{
  WriteOp *op = g_new (WriteOp, 1);

  op->conn = conn_ref (conn);
  op->then = then;
  if (!in_handshake (conn))
    start_timer (conn, conn->server->settings.io_timeout_ms, KV_PEER_COUNTER_SLOW_READERS);
  g_output_stream_write_all_async (g_io_stream_get_output_stream (conn->stream),
                                   conn->out->data, conn->out->len, G_PRIORITY_DEFAULT,
                                   conn->cancellable, out_written, op);
}

/* Counts the failure, tells the peer why (best effort, bounded by the I/O
 * timeout) and closes. */
static void
conn_fail (Conn            *conn,
           KvPeerCounter    counter,
           KvPeerErrorCode  code,
           const char      *message)
{
  count (conn->server, counter);
  g_debug ("peer server: closing connection %" G_GUINT64_FORMAT ": %s", conn->id, message);
  if (conn->state == CONN_CLOSED)
    return;
  g_byte_array_set_size (conn->out, 0);
  kv_peer_frame_append_error (conn->out, code, message);
  conn->close_after_write = TRUE;
  write_out (conn, NULL);
}

/* ---- reading ------------------------------------------------------------- */

static void
body_read (GObject      *stream,
           GAsyncResult *result,
           gpointer      data)
{
  Conn *conn = data;
  g_autoptr(GError) error = NULL;
  gsize n = 0;
  KvPeerFrameHeader header;

  g_input_stream_read_all_finish (G_INPUT_STREAM (stream), result, &n, &error);
  if (conn->state == CONN_CLOSED)
    goto out;
  if (error != NULL || n < conn->body_len)
    {
      /* a frame cut short: the peer closed or failed mid-frame */
      count (conn->server, error != NULL ? KV_PEER_COUNTER_CONNECTION_ERRORS
                                         : KV_PEER_COUNTER_BAD_FRAMES);
      conn_close (conn);
      goto out;
    }
  if (!in_handshake (conn))
    stop_timer (conn);
  header.type = conn->header[0];
  header.body_len = conn->body_len;
  conn->on_frame (conn, &header);
out:
  conn_unref (conn);
}

static void
header_read (GObject      *stream,
             GAsyncResult *result,
             gpointer      data)
{
  Conn *conn = data;
  KvPeerServer *self = conn->server;
  g_autoptr(GError) error = NULL;
  KvPeerFrameHeader header;
  gssize n;

  n = g_input_stream_read_finish (G_INPUT_STREAM (stream), result, &error);
  if (conn->state == CONN_CLOSED)
    goto out;
  if (n <= 0)
    {
      /* End of stream between frames is a peer hanging up; anything
       * else is counted. */
      if (error != NULL)
        count (self, KV_PEER_COUNTER_CONNECTION_ERRORS);
      else if (conn->header_pos > 0)
        count (self, KV_PEER_COUNTER_BAD_FRAMES);
      else if (conn->state == CONN_HELLO || conn->state == CONN_AUTH)
        count (self, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
      conn_close (conn);
      goto out;
    }
  if (conn->header_pos == 0 && !in_handshake (conn))
    /* a frame has begun: the rest of its header, and then its body, are
     * due within the I/O timeout, not the idle one */
    start_timer (conn, self->settings.io_timeout_ms, KV_PEER_COUNTER_IDLE_TIMEOUTS);
  conn->header_pos += n;
  if (conn->header_pos < KV_PEER_FRAME_HEADER_SIZE)
    {
      g_input_stream_read_async (G_INPUT_STREAM (stream), conn->header + conn->header_pos,
                                 KV_PEER_FRAME_HEADER_SIZE - conn->header_pos, G_PRIORITY_DEFAULT,
                                 conn->cancellable, header_read, conn_ref (conn));
      goto out;
    }
  if (!kv_peer_frame_header_parse (conn->header, conn->max_body, &header, &error))
    {
      gboolean handshake = conn->state == CONN_HELLO || conn->state == CONN_AUTH;

      /* Before authentication a stranger learns nothing: no ERROR. */
      if (handshake)
        {
          count (self, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
          conn_close (conn);
        }
      /* the event stream owns the writing side of a subscriber */
      else if (conn->state == CONN_SUBSCRIBED)
        {
          count (self, error->code == KV_PEER_ERROR_LIMIT ? KV_PEER_COUNTER_LIMIT_VIOLATIONS
                                                          : KV_PEER_COUNTER_BAD_FRAMES);
          conn_close (conn);
        }
      else
        conn_fail (conn, error->code == KV_PEER_ERROR_LIMIT ? KV_PEER_COUNTER_LIMIT_VIOLATIONS
                                                            : KV_PEER_COUNTER_BAD_FRAMES,
                   error->code, error->message);
      goto out;
    }
  conn->body_len = header.body_len;
  if (header.body_len == 0)
    {
      if (!in_handshake (conn))
        stop_timer (conn);
      conn->on_frame (conn, &header);
      goto out;
    }
  /* The body may arrive in pieces, but all of it within the I/O timeout
   * the frame's first byte started (the handshake keeps its own, overall
   * timer). */
  conn->body = g_realloc (conn->body, header.body_len);
  g_input_stream_read_all_async (G_INPUT_STREAM (stream), conn->body, header.body_len,
                                 G_PRIORITY_DEFAULT, conn->cancellable, body_read,
                                 conn_ref (conn));
out:
  conn_unref (conn);
}

/* Reads one frame whose body is at most @max_body bytes, then calls
 * @on_frame with conn->body holding the body. */
static void
read_frame (Conn          *conn,
            guint32        max_body,
            guint          timeout_ms,
            KvPeerCounter  timeout_counter,
            FrameFunc      on_frame)
{
  conn->max_body = max_body;
  conn->on_frame = on_frame;
  conn->header_pos = 0;
  if (timeout_ms > 0)
    start_timer (conn, timeout_ms, timeout_counter);
  /* in pieces: the first byte switches to the I/O timeout */
  g_input_stream_read_async (g_io_stream_get_input_stream (conn->stream),
                             conn->header, KV_PEER_FRAME_HEADER_SIZE, G_PRIORITY_DEFAULT,
                             conn->cancellable, header_read, conn_ref (conn));
}

/* ---- handshake ------------------------------------------------------------ */

static void
auth_frame (Conn                    *conn,
            const KvPeerFrameHeader *header)
{
  KvPeerServer *self = conn->server;
  g_auto(KvPeerMessage) message = { 0 };
  guint8 params[KV_PEER_AUTH_PARAMS_SIZE];
  guint8 mac[KV_PEER_MAC_LEN];
  g_autoptr(GError) error = NULL;

  if (header->type != KV_PEER_FRAME_AUTH ||
      !kv_peer_message_parse (header->type, conn->body, conn->body_len, 0, &message, &error))
    {
      count (self, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
      conn_close (conn);
      return;
    }

  /* The proof first: nothing the client claims is looked at before it
   * checks out. */
  if (!kv_peer_handshake_verify (self->settings.secret, KV_PEER_ROLE_CLIENT,
                                 conn->client_nonce, conn->server_nonce,
                                 conn->body, message.mac))
    {
      log_refused_client (conn, &self->auth_log, "failed authentication",
                          "its proof does not match this node's shared secret");
      conn_fail (conn, KV_PEER_COUNTER_AUTH_FAILURES, KV_PEER_ERROR_AUTH_FAILED,
                 "authentication failed");
      return;
    }
  if (message.block_size != self->settings.block_size)
    {
      g_autofree char *why = g_strdup_printf ("chunk size %" G_GUINT64_FORMAT " differs from "
                                              "this node's %" G_GSIZE_FORMAT,
                                              message.block_size, self->settings.block_size);

      log_refused_client (conn, &self->namespace_log, "was refused", why);
      conn_fail (conn, KV_PEER_COUNTER_NAMESPACE_MISMATCHES, KV_PEER_ERROR_CHUNK_SIZE, why);
      return;
    }
  if (!kv_peer_constant_time_equal (message.namespace_digest, self->settings.namespace_digest, 32))
    {
      log_refused_client (conn, &self->namespace_log, "was refused",
                          "its cache namespace differs from this node's");
      conn_fail (conn, KV_PEER_COUNTER_NAMESPACE_MISMATCHES, KV_PEER_ERROR_NAMESPACE,
                 "the cache namespace differs from this node's");
      return;
    }

  /* The peers' own budget: a peer over it is told, not left to guess */
  if (self->n_authenticated >= self->max_connections)
    {
      conn_fail (conn, KV_PEER_COUNTER_CONNECTIONS_REJECTED, KV_PEER_ERROR_BUSY,
                 "the node holds max-connections authenticated connections");
      return;
    }
  handshake_over (conn);
  conn->authenticated = TRUE;
  self->n_authenticated++;

  kv_peer_frame_auth_params (params, self->settings.block_size, self->settings.namespace_digest,
                             self->settings.max_keys, self->settings.max_inflight_bytes);
  kv_peer_handshake_mac (self->settings.secret, KV_PEER_ROLE_SERVER,
                         conn->client_nonce, conn->server_nonce, params, mac);
  g_byte_array_set_size (conn->out, 0);
  kv_peer_frame_append_auth (conn->out, params, mac);
  stop_timer (conn);
  conn->state = CONN_READY;
  write_out (conn, read_request);
}

static void
read_auth (Conn *conn)
{
  read_frame (conn, KV_PEER_AUTH_BODY_SIZE, 0, KV_PEER_COUNTER_HANDSHAKE_TIMEOUTS, auth_frame);
}

static void
hello_frame (Conn                    *conn,
             const KvPeerFrameHeader *header)
{
  KvPeerServer *self = conn->server;
  g_auto(KvPeerMessage) message = { 0 };
  g_autoptr(GError) error = NULL;

  if (header->type != KV_PEER_FRAME_HELLO ||
      !kv_peer_message_parse (header->type, conn->body, conn->body_len, 0, &message, &error))
    {
      count (self, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
      conn_close (conn);
      return;
    }
  if (message.version != KV_PEER_PROTOCOL_VERSION)
    {
      conn_fail (conn, KV_PEER_COUNTER_HANDSHAKE_FAILURES, KV_PEER_ERROR_VERSION,
                 "unsupported protocol version");
      return;
    }
  conn->progressed = TRUE;
  memcpy (conn->client_nonce, message.nonce, KV_PEER_NONCE_LEN);
  if (!kv_peer_random_nonce (conn->server_nonce, &error))
    {
      g_warning ("peer server: %s", error->message);
      conn_close (conn);
      return;
    }
  g_byte_array_set_size (conn->out, 0);
  kv_peer_frame_append_hello (conn->out, conn->server_nonce);
  conn->state = CONN_AUTH;
  /* One operation at a time on each stream: the AUTH is read once the
   * HELLO is out (the buffer it is written from stays as it is). The
   * handshake timer keeps running: it bounds the whole handshake. */
  write_out (conn, read_auth);
}

/* ---- requests ------------------------------------------------------------ */

static void
request_frame (Conn                    *conn,
               const KvPeerFrameHeader *header)
{
  KvPeerServer *self = conn->server;
  g_auto(KvPeerMessage) message = { 0 };
  g_autoptr(GError) error = NULL;
  KvPeerServeRequest *request;

  if (header->type == KV_PEER_FRAME_BYE)
    {
      conn_close (conn);
      return;
    }
  if (header->type == KV_PEER_FRAME_SUBSCRIBE)
    {
      subscribe (conn);
      return;
    }
  if (header->type != KV_PEER_FRAME_LOOKUP && header->type != KV_PEER_FRAME_FETCH)
    {
      g_autofree char *why = g_strdup_printf ("unexpected %s frame",
                                              kv_peer_frame_type_to_string (header->type));

      conn_fail (conn, KV_PEER_COUNTER_BAD_FRAMES, KV_PEER_ERROR_BAD_FRAME, why);
      return;
    }
  if (!kv_peer_message_parse (header->type, conn->body, conn->body_len,
                              self->settings.max_keys, &message, &error))
    {
      conn_fail (conn, error->code == KV_PEER_ERROR_LIMIT ? KV_PEER_COUNTER_LIMIT_VIOLATIONS
                                                          : KV_PEER_COUNTER_BAD_FRAMES,
                 error->code, error->message);
      return;
    }
  if (header->type == KV_PEER_FRAME_FETCH &&
      (guint64) message.keys->len * self->settings.block_size > self->settings.max_inflight_bytes)
    {
      conn_fail (conn, KV_PEER_COUNTER_LIMIT_VIOLATIONS, KV_PEER_ERROR_LIMIT,
                 "FETCH asks for more bytes than max-inflight-bytes");
      return;
    }
  /* The body buffer of a large LOOKUP is not kept while idle. */
  if (conn->body_len > 4096)
    g_clear_pointer (&conn->body, g_free);

  request = serve_request_new (conn, header->type == KV_PEER_FRAME_LOOKUP ? KV_PEER_SERVE_LOOKUP
                                                                          : KV_PEER_SERVE_FETCH);
  request->request_id = message.request_id;
  request->keys = g_steal_pointer (&message.keys);
  conn->state = CONN_BUSY;
  g_atomic_int_inc (&self->n_busy);
  push_request (self, request);
}

/* ---- the event stream ------------------------------------------------------- */

static void
subscriber_gone (gpointer      data,
                 KvPeerCounter why)
{
  Conn *conn = data;

  count (conn->server, why);
  conn_close (conn);
}

/* A subscriber sends nothing but BYE; anything else ends it. */
static void
subscribed_frame (Conn                    *conn,
                  const KvPeerFrameHeader *header)
{
  if (header->type != KV_PEER_FRAME_BYE)
    count (conn->server, KV_PEER_COUNTER_BAD_FRAMES);
  conn_close (conn);
}

/* SUBSCRIBE: the connection becomes a stream of the node's events
 * (kv-peer-events.c); it reads nothing more but BYE. */
static void
subscribe (Conn *conn)
{
  KvPeerServer *self = conn->server;
  g_auto(KvPeerStreamMessage) message = { 0 };
  g_autoptr(GError) error = NULL;

  if (!kv_peer_stream_parse (KV_PEER_FRAME_SUBSCRIBE, conn->body, conn->body_len, 0, &message, &error))
    {
      conn_fail (conn, KV_PEER_COUNTER_BAD_FRAMES, error->code, error->message);
      return;
    }
  if (self->settings.events == NULL)
    {
      conn_fail (conn, KV_PEER_COUNTER_BAD_FRAMES, KV_PEER_ERROR_BAD_FRAME,
                 "this node does not stream its events");
      return;
    }
  conn->subscriber = kv_peer_events_subscribe (self->settings.events, conn->stream, conn->cancellable,
                                               subscriber_gone, conn_ref (conn),
                                               (GDestroyNotify) conn_unref, &error);
  if (conn->subscriber == NULL)
    {
      conn_fail (conn, KV_PEER_COUNTER_LIMIT_VIOLATIONS, error->code, error->message);
      return;
    }
  conn->state = CONN_SUBSCRIBED;
  read_frame (conn, 0, 0, KV_PEER_COUNTER_IDLE_TIMEOUTS, subscribed_frame);
}

static void
read_request (Conn *conn)
{
  KvPeerServer *self = conn->server;

  if (conn->state == CONN_BUSY)
    {
      conn->state = CONN_READY;
      g_atomic_int_add (&self->n_busy, -1);
    }
  read_frame (conn, 8 + self->settings.max_keys * KV_PEER_KEY_WIRE_MAX,
              self->settings.idle_timeout_ms, KV_PEER_COUNTER_IDLE_TIMEOUTS, request_frame);
}

/* ---- answers (sent on the I/O thread) -------------------------------------- */

typedef struct
{
  KvPeerServeRequest *request;
  guint8             *answers;
} LookupAnswer;

static gboolean
send_lookup_answer (gpointer data)
{
  LookupAnswer *answer = data;
  Conn *conn = answer->request->conn;

  if (conn->state == CONN_BUSY)
    {
      g_byte_array_set_size (conn->out, 0);
      kv_peer_frame_append_lookup_resp (conn->out, answer->request->request_id,
                                        answer->answers, answer->request->keys->len);
      write_out (conn, read_request);
    }
  kv_peer_serve_request_free (answer->request);
  g_free (answer->answers);
  g_free (answer);
  return G_SOURCE_REMOVE;
}

static void send_next_data (Conn *conn);

static void
data_written (GObject      *stream,
              GAsyncResult *result,
              gpointer      data)
{
  Conn *conn = data;
  g_autoptr(GError) error = NULL;

  if (!g_output_stream_writev_all_finish (G_OUTPUT_STREAM (stream), result, NULL, &error))
    {
      if (conn->state != CONN_CLOSED)
        {
          count (conn->server, KV_PEER_COUNTER_CONNECTION_ERRORS);
          conn_close (conn);
        }
      conn_unref (conn);
      return;
    }
  if (conn->state != CONN_CLOSED)
    {
      stop_timer (conn);
      conn->fetch_index += conn->batch_frames;
      send_next_data (conn);
    }
  conn_unref (conn);
}

static void
fetch_done_written (Conn *conn)
{
  KvPeerServer *self = conn->server;
  guint block_size = self->settings.block_size;

  kv_peer_counters_add (self->counters, KV_PEER_COUNTER_SERVED_CHUNKS, conn->fetch_sent);
  kv_peer_counters_add (self->counters, KV_PEER_COUNTER_SERVED_BYTES,
                        (guint64) conn->fetch_sent * block_size);
  finish_fetch (conn, TRUE);
  read_request (conn);
}

/* Encodes the DATA frame of key @i of the FETCH into @head (a hit: the
 * chunk record's header built here, its payload to be written from the
 * primary slot itself, no copy; a miss: the prefix alone) and says how
 * long the head is and where the payload is. */
static gsize
encode_data_frame (Conn          *conn,
                   guint          i,
                   guint8        *head,
                   GOutputVector *payload)
{
  KvPeerServer *self = conn->server;
  KvPeerServeRequest *request = conn->fetch;
  const KvPeerServedChunk *chunk = &conn->chunks[i];
  gsize block_size = self->settings.block_size;
  guint8 *record_header = head + KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE;

  if (chunk->payload == NULL)
    {
      kv_peer_frame_encode_data_prefix (head, request->request_id, i, KV_PEER_DATA_MISS, 0);
      *payload = (GOutputVector) { NULL, 0 };
      count (self, KV_PEER_COUNTER_SERVED_MISSES);
      return KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE;
    }
  kv_peer_frame_encode_data_prefix (head, request->request_id, i, KV_PEER_DATA_OK,
                                    KV_CHUNK_HEADER_SIZE + block_size);
  /* the checksum computed once, as the chunk came into the primary */
  if (chunk->has_payload_checksum)
    kv_chunk_header_encode_with_checksum (record_header, self->settings.namespace_digest,
                                          request->keys->pdata[i], block_size,
                                          chunk->payload_checksum, g_get_real_time ());
  else
    kv_chunk_header_encode (record_header, self->settings.namespace_digest,
                            request->keys->pdata[i], chunk->payload, block_size,
                            g_get_real_time ());
  *payload = (GOutputVector) { chunk->payload, block_size };
  conn->fetch_sent++;
  return DATA_HEAD_SIZE;
}

/* The DATA frames of the FETCH in order, a batch of them per write (see
 * DATA_BATCH_MAX_FRAMES), then its DONE. */
static void
send_next_data (Conn *conn)
{
  KvPeerServer *self = conn->server;
  KvPeerServeRequest *request = conn->fetch;
  gsize block_size = self->settings.block_size;
  guint n_frames = 0, n_vectors = 0;
  gsize payload_bytes = 0;

  if (conn->fetch_index == request->keys->len)
    {
      g_byte_array_set_size (conn->out, 0);
      kv_peer_frame_append_done (conn->out, request->request_id, conn->fetch_sent);
      write_out (conn, fetch_done_written);
      return;
    }
  /* Past the jobs' deadline the slots may hold other chunks already. */
  if (conn->fetch_cancellable != NULL && g_cancellable_is_cancelled (conn->fetch_cancellable))
    {
      conn_fail (conn, KV_PEER_COUNTER_SERVE_FAILURES, KV_PEER_ERROR_TIMEOUT,
                 "the chunks were released before they could be sent");
      return;
    }

  if (conn->data_heads == NULL)
    conn->data_heads = g_malloc ((gsize) DATA_BATCH_MAX_FRAMES * DATA_HEAD_SIZE);
  while (conn->fetch_index + n_frames < request->keys->len && n_frames < DATA_BATCH_MAX_FRAMES &&
         (n_frames == 0 || payload_bytes + block_size <= DATA_BATCH_MAX_BYTES))
    {
      guint8 *head = conn->data_heads + (gsize) n_frames * DATA_HEAD_SIZE;
      GOutputVector payload;
      gsize head_len = encode_data_frame (conn, conn->fetch_index + n_frames, head, &payload);

      conn->vectors[n_vectors++] = (GOutputVector) { head, head_len };
      if (payload.size > 0)
        conn->vectors[n_vectors++] = payload;
      payload_bytes += payload.size;
      n_frames++;
    }
  conn->batch_frames = n_frames;
  start_timer (conn, self->settings.io_timeout_ms, KV_PEER_COUNTER_SLOW_READERS);
  g_output_stream_writev_all_async (g_io_stream_get_output_stream (conn->stream),
                                    conn->vectors, n_vectors, G_PRIORITY_DEFAULT, conn->cancellable,
                                    data_written, conn_ref (conn));
}

typedef struct
{
  KvPeerServeRequest  *request;
  KvPeerServedChunk   *chunks;
  GCancellable        *cancellable;
  KvPeerFetchDoneFunc  done;
  gpointer             done_data;
} FetchAnswer;

static gboolean
send_fetch_answer (gpointer data)
{
  FetchAnswer *answer = data;
  Conn *conn = answer->request->conn;

  if (conn->state != CONN_BUSY || conn->fetch != NULL)
    {
      count (conn->server, KV_PEER_COUNTER_SERVE_FAILURES);
      answer->done (FALSE, answer->done_data);
      kv_peer_serve_request_free (answer->request);
      g_free (answer->chunks);
      g_clear_object (&answer->cancellable);
      g_free (answer);
      return G_SOURCE_REMOVE;
    }
  conn->fetch = answer->request;
  conn->chunks = answer->chunks;
  conn->fetch_cancellable = answer->cancellable;
  conn->fetch_done = answer->done;
  conn->fetch_done_data = answer->done_data;
  conn->fetch_index = 0;
  conn->fetch_sent = 0;
  g_free (answer);
  send_next_data (conn);
  return G_SOURCE_REMOVE;
}

/* ---- accepting ------------------------------------------------------------ */

static void
start_handshake (Conn *conn)
{
  read_frame (conn, KV_PEER_HELLO_BODY_SIZE, 0, KV_PEER_COUNTER_HANDSHAKE_TIMEOUTS, hello_frame);
}

static void
tls_handshaken (GObject      *source,
                GAsyncResult *result,
                gpointer      data)
{
  Conn *conn = data;
  KvPeerServer *self = conn->server;
  g_autoptr(GError) error = NULL;

  self->n_tls_running--;
  if (conn->tls_phase == TLS_RUNNING)
    conn->tls_phase = TLS_NONE;
  if (!g_tls_connection_handshake_finish (G_TLS_CONNECTION (source), result, &error))
    {
      if (conn->state != CONN_CLOSED)
        {
          log_refused_client (conn, &conn->server->tls_log, "failed the TLS handshake",
                              error->message);
          count (conn->server, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
          conn_close (conn);
        }
    }
  else if (conn->state != CONN_CLOSED)
    start_handshake (conn);
  tls_start_next (self);
  conn_unref (conn);
}

/* glib-networking verifies a client certificate against the database but
 * leaves the verdict to this signal on the server side: only a chain the
 * database fully verified is accepted. */
static gboolean
accept_verified_client (GTlsConnection       *connection,
                        GTlsCertificate      *certificate,
                        GTlsCertificateFlags  errors,
                        gpointer              data)
{
  return errors == 0;
}

/* The TLS connection over @conn's socket, and its handshake. */
static void
tls_start (Conn *conn)
{
  KvPeerServer *self = conn->server;
  g_autoptr(GError) error = NULL;
  GIOStream *tls = g_tls_server_connection_new (G_IO_STREAM (conn->socket_conn),
                                                self->settings.tls_certificate, &error);

  if (tls == NULL)
    {
      g_warning ("peer server: cannot start TLS: %s", error->message);
      conn_close (conn);
      return;
    }
  if (self->settings.tls_client_database != NULL)
    {
      g_tls_connection_set_database (G_TLS_CONNECTION (tls), self->settings.tls_client_database);
      g_object_set (tls, "authentication-mode", G_TLS_AUTHENTICATION_REQUIRED, NULL);
      g_signal_connect (tls, "accept-certificate", G_CALLBACK (accept_verified_client), NULL);
    }
  conn->stream = tls;
  conn->tls_phase = TLS_RUNNING;
  self->n_tls_running++;
  g_tls_connection_handshake_async (G_TLS_CONNECTION (tls), G_PRIORITY_DEFAULT,
                                    conn->cancellable, tls_handshaken, conn_ref (conn));
}

/* Starts the handshakes waiting for a slot, oldest first. */
static void
tls_start_next (KvPeerServer *self)
{
  while (self->n_tls_running < MAX_TLS_HANDSHAKES && self->tls_queue.head != NULL)
    {
      Conn *conn = self->tls_queue.head->data;

      g_queue_unlink (&self->tls_queue, &conn->tls_link);
      conn->tls_phase = TLS_NONE;
      tls_start (conn);
    }
}

/* Whether the other end shut its side down (its FIN is in). */
static gboolean
peer_stopped_sending (int fd)
{
  struct pollfd pfd = { fd, POLLRDHUP, 0 };

  return poll (&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

/* The socket's first TLS record is in (or the client went away). Until
 * then the connection is a socket and this struct: no TLS session, no
 * thread. SO_RCVLOWAT keeps the socket from reading as ready before the
 * whole record is there (and it ends at once on a hang-up). */
static gboolean
tls_first_record (GSocket      *socket,
                  GIOCondition  condition,
                  gpointer      data)
{
  Conn *conn = data;
  KvPeerServer *self = conn->server;
  int fd = g_socket_get_fd (socket);
  guint8 head[TLS_RECORD_HEADER];
  gssize n;
  int available = 0;
  int need;

  do
    n = recv (fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return G_SOURCE_CONTINUE;
  /* a client that stopped sending (FIN) before the whole record: the
   * socket stays readable (at its end), whatever SO_RCVLOWAT says */
  if (n > 0 && peer_stopped_sending (fd))
    condition |= G_IO_HUP;
  if (n <= 0 || (n < TLS_RECORD_HEADER && (condition & (G_IO_HUP | G_IO_ERR))))
    {
      /* gone before its handshake began */
      count (self, n < 0 ? KV_PEER_COUNTER_CONNECTION_ERRORS : KV_PEER_COUNTER_HANDSHAKE_FAILURES);
      conn_close (conn);
      return G_SOURCE_REMOVE;
    }
  if (n < TLS_RECORD_HEADER)
    return G_SOURCE_CONTINUE;
  /* a handshake record (22) of TLS 1.x (3.x), of a length a ClientHello
   * can have: anything else is no TLS client, and learns nothing */
  need = TLS_RECORD_HEADER + ((head[3] << 8) | head[4]);
  if (head[0] != 22 || head[1] != 3 || need == TLS_RECORD_HEADER ||
      need > TLS_RECORD_HEADER + MAX_TLS_RECORD)
    {
      count (self, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
      conn_close (conn);
      return G_SOURCE_REMOVE;
    }
  if (ioctl (fd, FIONREAD, &available) != 0)
    available = 0;
  if (available < need)
    {
      if (condition & (G_IO_HUP | G_IO_ERR))
        {
          count (self, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
          conn_close (conn);
          return G_SOURCE_REMOVE;
        }
      setsockopt (fd, SOL_SOCKET, SO_RCVLOWAT, &need, sizeof need);
      return G_SOURCE_CONTINUE;
    }

  need = 1;
  setsockopt (fd, SOL_SOCKET, SO_RCVLOWAT, &need, sizeof need);
  g_clear_pointer (&conn->tls_watch, g_source_unref);
  conn->progressed = TRUE;
  conn->tls_phase = TLS_QUEUED;
  conn->tls_link.data = conn;
  g_queue_push_tail_link (&self->tls_queue, &conn->tls_link);
  tls_start_next (self);
  return G_SOURCE_REMOVE;
}

/* Whether @conn's first message (its ClientHello, or its HELLO) is in
 * the socket's buffer in full, not looked at yet: a burst of accepts can
 * come before the watch that would have seen it. Marks it progressed. */
static gboolean
first_message_in (Conn *conn)
{
  int fd = g_socket_get_fd (g_socket_connection_get_socket (conn->socket_conn));
  int available = 0;
  gsize need;

  if (ioctl (fd, FIONREAD, &available) != 0)
    return FALSE;
  if (conn->tls_phase == TLS_PEEKING)
    {
      guint8 head[TLS_RECORD_HEADER];

      if (available < TLS_RECORD_HEADER ||
          recv (fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT) != TLS_RECORD_HEADER)
        return FALSE;
      need = TLS_RECORD_HEADER + ((head[3] << 8) | head[4]);
    }
  else if (conn->tls_phase == TLS_NONE && conn->state == CONN_HELLO &&
           conn->stream == G_IO_STREAM (conn->socket_conn))
    need = KV_PEER_FRAME_HEADER_SIZE + KV_PEER_HELLO_BODY_SIZE - conn->header_pos;
  else
    return FALSE;
  if ((gsize) available < need)
    return FALSE;
  conn->progressed = TRUE;
  return TRUE;
}

/* The peer's IP address, which its handshakes are counted under. */
static char *
remote_address (GSocket *socket)
{
  g_autoptr(GSocketAddress) remote = g_socket_get_remote_address (socket, NULL);

  if (remote == NULL || !G_IS_INET_SOCKET_ADDRESS (remote))
    return g_strdup ("?");
  return g_inet_address_to_string (g_inet_socket_address_get_address (G_INET_SOCKET_ADDRESS (remote)));
}

static void
incoming (KvAcceptLoop *loop,
          GSocket      *socket,
          gpointer      data)
{
  KvPeerServer *self = data;
  g_autofree char *address = remote_address (socket);
  guint from_address = GPOINTER_TO_UINT (g_hash_table_lookup (self->per_address, address));
  Conn *conn;

  /* One source holds at most its share of the handshakes... */
  if (from_address >= self->max_per_address)
    {
      count (self, KV_PEER_COUNTER_CONNECTIONS_REJECTED);
      g_debug ("peer server: %s holds max-handshakes-per-address connections: closed", address);
      g_socket_close (socket, NULL);
      g_object_unref (socket);
      return;
    }
  /* ...and a full budget gives the newest a chance: a handshake that has
   * not even sent its first message in full goes (a real client sends it
   * as it connects, a hostile one holds on), taken from the source that
   * holds the most handshakes, its oldest: a flood from a few addresses
   * then never closes a lone client that is slow to send its ClientHello.
   * When there is none, the newcomer is refused: the others are on their
   * way, and end within the handshake timeout. */
  if (self->handshaking.length >= self->max_handshakes)
    {
      Conn *victim = NULL;
      guint victim_source_holds = 0;

      for (GList *l = self->handshaking.head; l != NULL; l = l->next)
        {
          Conn *candidate = l->data;
          guint holds = GPOINTER_TO_UINT (g_hash_table_lookup (self->per_address, candidate->address));

          if (holds > victim_source_holds && !candidate->progressed && !first_message_in (candidate))
            {
              victim = candidate;
              victim_source_holds = holds;
            }
        }
      if (victim == NULL)
        {
          count (self, KV_PEER_COUNTER_CONNECTIONS_REJECTED);
          g_debug ("peer server: max-handshakes, none to close for a new one: %s closed", address);
          g_socket_close (socket, NULL);
          g_object_unref (socket);
          return;
        }
      count (self, KV_PEER_COUNTER_HANDSHAKES_EVICTED);
      g_debug ("peer server: max-handshakes: closing a handshake from %s", victim->address);
      conn_close (victim);
    }
  count (self, KV_PEER_COUNTER_CONNECTIONS_ACCEPTED);
  g_atomic_int_inc (&self->n_connections);
  g_socket_set_option (socket, IPPROTO_TCP, TCP_NODELAY, 1, NULL);

  conn = g_new0 (Conn, 1);
  conn->ref_count = 1;  /* the table's */
  conn->server = self;
  conn->id = ++self->next_conn_id;
  conn->state = CONN_HELLO;
  conn->socket_conn = g_socket_connection_factory_create_connection (socket);
  g_object_unref (socket);
  conn->client = client_address (conn->socket_conn);
  conn->cancellable = g_cancellable_new ();
  conn->out = g_byte_array_new ();
  conn->address = g_steal_pointer (&address);
  conn->handshaking = TRUE;
  conn->handshake_link.data = conn;
  g_queue_push_tail_link (&self->handshaking, &conn->handshake_link);
  g_hash_table_insert (self->per_address, g_strdup (conn->address), GUINT_TO_POINTER (from_address + 1));
  g_hash_table_insert (self->conns, &conn->id, conn);

  start_timer (conn, self->settings.handshake_timeout_ms, KV_PEER_COUNTER_HANDSHAKE_TIMEOUTS);
  if (self->settings.tls_certificate != NULL)
    {
      GSocket *s = g_socket_connection_get_socket (conn->socket_conn);
      int lowat = TLS_RECORD_HEADER;

      setsockopt (g_socket_get_fd (s), SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
      conn->tls_phase = TLS_PEEKING;
      conn->tls_watch = g_socket_create_source (s, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
      g_source_set_callback (conn->tls_watch, (GSourceFunc) (void (*) (void)) tls_first_record,
                             conn, NULL);
      g_source_attach (conn->tls_watch, self->context);
    }
  else
    {
      conn->stream = G_IO_STREAM (g_object_ref (conn->socket_conn));
      start_handshake (conn);
    }
}

/* ---- the I/O thread -------------------------------------------------------- */

typedef struct
{
  KvPeerServer *self;
  char         *address;
} StartData;

static gboolean
bind_address (KvPeerServer  *self,
              const char    *address,
              GError       **error)
{
  g_autoptr(GSocketConnectable) connectable = NULL;
  g_autoptr(GSocketAddressEnumerator) enumerator = NULL;
  g_autoptr(GSocketAddress) socket_address = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autofree char *name = g_strdup_printf ("peer server %s", address);
  GSocketAddress *effective;

  connectable = g_network_address_parse (address, 0, &local_error);
  if (connectable == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The peer listen address ‘%s’ is not HOST:PORT: %s", address, local_error->message);
      return FALSE;
    }
  enumerator = g_socket_connectable_enumerate (connectable);
  socket_address = g_socket_address_enumerator_next (enumerator, NULL, &local_error);
  if (socket_address == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Cannot resolve the peer listen address ‘%s’: %s", address,
                   local_error != NULL ? local_error->message : "no address");
      return FALSE;
    }
  self->accept_loop = kv_accept_loop_new (name, socket_address, 1024, self->context, incoming, self,
                                          &local_error);
  if (self->accept_loop == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "Cannot listen on ‘%s’: %s", address, local_error->message);
      return FALSE;
    }
  kv_accept_loop_set_pause_counter (self->accept_loop,
                                    &self->counters->values[KV_PEER_COUNTER_ACCEPT_PAUSES]);
  effective = kv_accept_loop_get_local_address (self->accept_loop);
  {
    GInetSocketAddress *inet = G_INET_SOCKET_ADDRESS (effective);
    g_autofree char *host = g_inet_address_to_string (g_inet_socket_address_get_address (inet));

    self->address = g_inet_address_get_family (g_inet_socket_address_get_address (inet)) ==
                    G_SOCKET_FAMILY_IPV6
      ? g_strdup_printf ("[%s]:%u", host, g_inet_socket_address_get_port (inet))
      : g_strdup_printf ("%s:%u", host, g_inet_socket_address_get_port (inet));
  }
  return TRUE;
}

/* The limits in force: what the settings ask, lowered so that the
 * connections fit three quarters of the descriptor limit (the rest is the
 * process's: files, other sockets), the handshakes at most half of that.
 * Said once when lowered. */
static void
fit_descriptor_limit (KvPeerServer *self)
{
  struct rlimit limit = { RLIM_INFINITY, RLIM_INFINITY };
  guint64 budget;

  /* 0: the peer tier's defaults */
  self->max_connections = self->settings.max_connections > 0 ? self->settings.max_connections : 1024;
  self->max_handshakes = self->settings.max_handshakes > 0 ? self->settings.max_handshakes : 128;
  self->max_per_address = self->settings.max_handshakes_per_address > 0 ?
                          self->settings.max_handshakes_per_address : 16;
  if (getrlimit (RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return;
  budget = (guint64) limit.rlim_cur * 3 / 4;
  if ((guint64) self->max_connections + self->max_handshakes > budget)
    {
      guint handshakes = (guint) MIN (self->max_handshakes, MAX (budget / 2, 1));
      guint connections = (guint) MIN (self->max_connections, MAX (budget - handshakes, 1));

      g_message ("peer server: max-connections=%u and max-handshakes=%u need more descriptors than "
                 "three quarters of the limit (%llu, `ulimit -n`) leave: using %u and %u",
                 self->max_connections, self->max_handshakes, (unsigned long long) limit.rlim_cur,
                 connections, handshakes);
      self->max_connections = connections;
      self->max_handshakes = handshakes;
    }
  self->max_per_address = MIN (self->max_per_address, self->max_handshakes);
}

static gpointer
server_thread (gpointer data)
{
  StartData *start = data;
  KvPeerServer *self = start->self;
  GError *error = NULL;

  g_main_context_push_thread_default (self->context);
  bind_address (self, start->address, &error);

  g_mutex_lock (&self->lock);
  self->started = TRUE;
  self->start_error = error;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  if (error == NULL)
    g_main_loop_run (self->loop);

  if (self->accept_loop != NULL)
    {
      kv_accept_loop_stop (self->accept_loop);
      g_clear_pointer (&self->accept_loop, kv_accept_loop_free);
    }
  g_main_context_pop_thread_default (self->context);
  g_free (start->address);
  g_free (start);
  return NULL;
}

/* Starts accepting on @address ("HOST:PORT"; port 0 picks a free one). */
gboolean
kv_peer_server_listen (KvPeerServer  *self,
                       const char    *address,
                       GError       **error)
{
  StartData *start;

  g_return_val_if_fail (KV_IS_PEER_SERVER (self), FALSE);
  g_return_val_if_fail (self->thread == NULL, FALSE);

  fit_descriptor_limit (self);
  start = g_new (StartData, 1);
  start->self = self;
  start->address = g_strdup (address);
  self->thread = g_thread_new ("kvtier-peer-srv", server_thread, start);

  g_mutex_lock (&self->lock);
  while (!self->started)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);

  if (self->start_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&self->start_error));
      g_thread_join (g_steal_pointer (&self->thread));
      return FALSE;
    }
  return TRUE;
}

/* "HOST:PORT" the server listens on, with the port it got. */
char *
kv_peer_server_get_address (KvPeerServer *self)
{
  g_return_val_if_fail (KV_IS_PEER_SERVER (self), NULL);
  return g_strdup (self->address);
}

/* What the server's messages call its tier ("peer tier 1:peer"). Any
 * thread. */
void
kv_peer_server_set_name (KvPeerServer *self,
                         const char   *name)
{
  g_return_if_fail (KV_IS_PEER_SERVER (self));

  g_mutex_lock (&self->lock);
  g_free (self->name);
  self->name = g_strdup (name);
  g_mutex_unlock (&self->lock);
}

guint
kv_peer_server_get_n_connections (KvPeerServer *self)
{
  return g_atomic_int_get (&self->n_connections);
}

/* Connections whose request is with the owner thread or being answered. */
guint
kv_peer_server_get_n_busy (KvPeerServer *self)
{
  return g_atomic_int_get (&self->n_busy);
}

/* max-connections in force (the setting, or less to fit RLIMIT_NOFILE);
 * set by kv_peer_server_listen(). */
guint
kv_peer_server_get_max_connections (KvPeerServer *self)
{
  return self->max_connections;
}

/* max-handshakes in force; set by kv_peer_server_listen(). */
guint
kv_peer_server_get_max_handshakes (KvPeerServer *self)
{
  return self->max_handshakes;
}

static gboolean
stop_accepting_in_thread (gpointer data)
{
  KvPeerServer *self = data;

  if (self->accept_loop != NULL)
    kv_accept_loop_stop (self->accept_loop);
  return G_SOURCE_REMOVE;
}

/* Closes the listening socket; connections already open stay (a drain). */
void
kv_peer_server_stop_accepting (KvPeerServer *self)
{
  g_return_if_fail (KV_IS_PEER_SERVER (self));

  if (self->thread != NULL)
    g_main_context_invoke_full (self->context, G_PRIORITY_HIGH, stop_accepting_in_thread,
                                g_object_ref (self), g_object_unref);
}

static gboolean
stop_in_thread (gpointer data)
{
  KvPeerServer *self = data;
  GHashTableIter iter;
  gpointer value;
  g_autoptr(GPtrArray) conns = g_ptr_array_new ();

  stop_accepting_in_thread (self);
  g_hash_table_iter_init (&iter, self->conns);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    g_ptr_array_add (conns, conn_ref (value));
  for (guint i = 0; i < conns->len; i++)
    {
      conn_close (conns->pdata[i]);
      conn_unref (conns->pdata[i]);
    }
  g_main_loop_quit (self->loop);
  return G_SOURCE_REMOVE;
}

/* Closes every connection and stops the thread. Answers given after (or
 * during) the stop fail their FETCH at once, so every job is reported. */
void
kv_peer_server_stop (KvPeerServer *self)
{
  g_return_if_fail (KV_IS_PEER_SERVER (self));

  g_mutex_lock (&self->lock);
  self->stopping = TRUE;
  g_mutex_unlock (&self->lock);

  if (self->thread == NULL)
    return;
  g_main_context_invoke (self->context, stop_in_thread, self);
  g_thread_join (g_steal_pointer (&self->thread));

  /* What the loop left: cancelled reads and writes, answers queued before
   * the stop. They run here and drop their references. */
  g_main_context_push_thread_default (self->context);
  while (g_main_context_iteration (self->context, FALSE))
    ;
  g_main_context_pop_thread_default (self->context);
  if (self->settings.events != NULL)
    kv_peer_events_set_context (self->settings.events, NULL);
}

/* ---- the owner thread's side ------------------------------------------------ */

GPtrArray *
kv_peer_server_take_requests (KvPeerServer *self)
{
  GPtrArray *taken;

  g_mutex_lock (&self->lock);
  taken = self->queue;
  self->queue = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_peer_serve_request_free);
  g_mutex_unlock (&self->lock);
  return taken;
}

gboolean
kv_peer_server_has_requests (KvPeerServer *self)
{
  gboolean any;

  g_mutex_lock (&self->lock);
  any = self->queue->len > 0;
  g_mutex_unlock (&self->lock);
  return any;
}

KvPeerServeKind
kv_peer_serve_request_get_kind (KvPeerServeRequest *request)
{
  return request->kind;
}

guint64
kv_peer_serve_request_get_connection_id (KvPeerServeRequest *request)
{
  return request->conn->id;
}

KvKey * const *
kv_peer_serve_request_get_keys (KvPeerServeRequest *request,
                                guint              *n_keys)
{
  *n_keys = request->keys != NULL ? request->keys->len : 0;
  return request->keys != NULL ? (KvKey * const *) request->keys->pdata : NULL;
}

/* Whether an answer can still reach the I/O thread; if so, hands it over. */
static gboolean
post_answer (KvPeerServer *self,
             GSourceFunc   func,
             gpointer      data)
{
  gboolean posted = FALSE;

  g_mutex_lock (&self->lock);
  if (!self->stopping && self->thread != NULL)
    {
      g_main_context_invoke (self->context, func, data);
      posted = TRUE;
    }
  g_mutex_unlock (&self->lock);
  return posted;
}

/* Answers a LOOKUP (takes @request): one KvPeerLookupAnswer per key. */
void
kv_peer_serve_request_answer_lookup (KvPeerServeRequest *request,
                                     const guint8       *answers)
{
  KvPeerServer *self = request->conn->server;
  LookupAnswer *answer = g_new (LookupAnswer, 1);

  answer->request = request;
  answer->answers = g_memdup2 (answers, request->keys->len);
  kv_peer_counters_add (self->counters, KV_PEER_COUNTER_SERVED_LOOKUP_KEYS, request->keys->len);
  if (!post_answer (self, send_lookup_answer, answer))
    {
      kv_peer_serve_request_free (request);
      g_free (answer->answers);
      g_free (answer);
    }
}

/* Answers a FETCH (takes @request): @chunks holds the pinned primary slot
 * of each key (NULL for a miss) and its carried checksum. @done_func runs once, on the I/O thread
 * or (if the server stopped) here, when the slots are no longer read. */
void
kv_peer_serve_request_answer_fetch (KvPeerServeRequest  *request,
                                    const KvPeerServedChunk *chunks,
                                    GCancellable        *cancellable,
                                    KvPeerFetchDoneFunc  done_func,
                                    gpointer             done_data)
{
  KvPeerServer *self = request->conn->server;
  FetchAnswer *answer = g_new (FetchAnswer, 1);

  answer->request = request;
  answer->chunks = g_memdup2 (chunks, sizeof (KvPeerServedChunk) * request->keys->len);
  answer->cancellable = cancellable != NULL ? g_object_ref (cancellable) : NULL;
  answer->done = done_func;
  answer->done_data = done_data;
  if (!post_answer (self, send_fetch_answer, answer))
    {
      count (self, KV_PEER_COUNTER_SERVE_FAILURES);
      done_func (FALSE, done_data);
      kv_peer_serve_request_free (request);
      g_free (answer->chunks);
      g_clear_object (&answer->cancellable);
      g_free (answer);
    }
}

void
kv_peer_serve_request_free (KvPeerServeRequest *request)
{
  if (request == NULL)
    return;
  g_clear_pointer (&request->keys, g_ptr_array_unref);
  conn_unref (request->conn);
  g_free (request);
}

/* ---- GObject --------------------------------------------------------------- */

static void
kv_peer_server_finalize (GObject *object)
{
  KvPeerServer *self = KV_PEER_SERVER (object);

  kv_peer_server_stop (self);
  g_clear_pointer (&self->conns, g_hash_table_unref);
  g_clear_pointer (&self->per_address, g_hash_table_unref);
  g_clear_pointer (&self->queue, g_ptr_array_unref);
  g_clear_pointer (&self->loop, g_main_loop_unref);
  g_clear_pointer (&self->context, g_main_context_unref);
  g_clear_pointer (&self->settings.secret, g_bytes_unref);
  g_clear_object (&self->settings.tls_certificate);
  g_clear_object (&self->settings.tls_client_database);
  g_clear_object (&self->settings.events);
  g_clear_error (&self->start_error);
  g_free (self->address);
  g_free (self->name);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);

  G_OBJECT_CLASS (kv_peer_server_parent_class)->finalize (object);
}

static void
kv_peer_server_class_init (KvPeerServerClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_peer_server_finalize;
}

static void
kv_peer_server_init (KvPeerServer *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->context = g_main_context_new ();
  self->loop = g_main_loop_new (self->context, FALSE);
  self->conns = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL,
                                       (GDestroyNotify) conn_unref);
  self->per_address = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->queue = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_peer_serve_request_free);
}

/* A server with @settings (copied; the objects in it are referenced). Its
 * counters go to @counters, which must outlive it; @queued_func is called
 * from the I/O thread whenever a request is queued for the owner thread. */
KvPeerServer *
kv_peer_server_new (const KvPeerServerSettings *settings,
                    KvPeerCounters             *counters,
                    KvPeerServerQueuedFunc      queued_func,
                    gpointer                    queued_data)
{
  KvPeerServer *self = g_object_new (KV_TYPE_PEER_SERVER, NULL);

  self->settings = *settings;
  self->settings.secret = g_bytes_ref (settings->secret);
  if (settings->tls_certificate != NULL)
    g_object_ref (settings->tls_certificate);
  if (settings->tls_client_database != NULL)
    g_object_ref (settings->tls_client_database);
  if (settings->events != NULL)
    {
      g_object_ref (settings->events);
      kv_peer_events_set_context (settings->events, self->context);
    }
  self->counters = counters;
  self->queued_func = queued_func;
  self->queued_data = queued_data;
  return self;
}
