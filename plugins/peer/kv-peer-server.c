/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "kv-chunk-format.h"
#include "kv-peer-handshake.h"

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
 * within io-timeout-ms (a slow sender or a reader that does not drain) ends
 * its connection. Every rejection is counted.
 */

typedef enum {
  CONN_HELLO,
  CONN_AUTH,
  CONN_READY,
  CONN_BUSY,     /* a request is with the owner thread or being answered */
  CONN_CLOSED,
} ConnState;

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
  GIOStream        *stream;       /* socket_conn, or the TLS connection over it */
  GCancellable     *cancellable;
  GSource          *timer;
  KvPeerCounter     timer_counter;

  guint8            header[KV_PEER_FRAME_HEADER_SIZE];
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
  guint8              *data_head;  /* DATA header, prefix and chunk header */
  GOutputVector        vectors[2];
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
  GSocketService *service;        /* I/O thread */
  GHashTable     *conns;          /* I/O thread: id → Conn */
  guint64         next_conn_id;
  char           *address;

  GMutex          lock;
  GCond           cond;
  gboolean        started;        /* guarded by lock, with start_error */
  GError         *start_error;
  gboolean        stopping;
  GPtrArray      *queue;          /* KvPeerServeRequest, for the owner thread */
  gint            n_connections;  /* atomic */
  gint            n_busy;         /* atomic */
};

G_DEFINE_FINAL_TYPE (KvPeerServer, kv_peer_server, G_TYPE_OBJECT)

static void read_frame (Conn *conn, guint32 max_body, guint timeout_ms,
                        KvPeerCounter timeout_counter, FrameFunc on_frame);
static void read_request (Conn *conn);

static void
count (KvPeerServer  *self,
       KvPeerCounter  counter)
{
  kv_peer_counters_add (self->counters, counter, 1);
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
  g_clear_object (&conn->cancellable);
  g_clear_pointer (&conn->body, g_free);
  g_clear_pointer (&conn->out, g_byte_array_unref);
  g_clear_pointer (&conn->data_head, g_free);
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

/* Closes @conn now (I/O thread). Pending reads and writes fail with
 * G_IO_ERROR_CANCELLED and drop their references. */
static void
conn_close (Conn *conn)
{
  KvPeerServer *self = conn->server;
  gboolean authenticated;

  if (conn->state == CONN_CLOSED)
    return;
  authenticated = conn->state == CONN_READY || conn->state == CONN_BUSY;
  if (conn->state == CONN_BUSY)
    g_atomic_int_add (&self->n_busy, -1);
  conn->state = CONN_CLOSED;
  stop_timer (conn);
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
  gsize n = 0;

  g_input_stream_read_all_finish (G_INPUT_STREAM (stream), result, &n, &error);
  if (conn->state == CONN_CLOSED)
    goto out;
  if (error != NULL || n < KV_PEER_FRAME_HEADER_SIZE)
    {
      /* End of stream between frames is a peer hanging up; anything
       * else is counted. */
      if (error != NULL)
        count (self, KV_PEER_COUNTER_CONNECTION_ERRORS);
      else if (n > 0)
        count (self, KV_PEER_COUNTER_BAD_FRAMES);
      else if (conn->state == CONN_HELLO || conn->state == CONN_AUTH)
        count (self, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
      conn_close (conn);
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
   * (the handshake keeps its own, overall timer). */
  if (conn->state != CONN_HELLO && conn->state != CONN_AUTH)
    start_timer (conn, self->settings.io_timeout_ms, KV_PEER_COUNTER_IDLE_TIMEOUTS);
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
  if (timeout_ms > 0)
    start_timer (conn, timeout_ms, timeout_counter);
  g_input_stream_read_all_async (g_io_stream_get_input_stream (conn->stream),
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
      conn_fail (conn, KV_PEER_COUNTER_AUTH_FAILURES, KV_PEER_ERROR_AUTH_FAILED,
                 "authentication failed");
      return;
    }
  if (message.block_size != self->settings.block_size)
    {
      g_autofree char *why = g_strdup_printf ("chunk size %" G_GUINT64_FORMAT " differs from "
                                              "this node's %" G_GSIZE_FORMAT,
                                              message.block_size, self->settings.block_size);

      conn_fail (conn, KV_PEER_COUNTER_NAMESPACE_MISMATCHES, KV_PEER_ERROR_CHUNK_SIZE, why);
      return;
    }
  if (!kv_peer_constant_time_equal (message.namespace_digest, self->settings.namespace_digest, 32))
    {
      conn_fail (conn, KV_PEER_COUNTER_NAMESPACE_MISMATCHES, KV_PEER_ERROR_NAMESPACE,
                 "the cache namespace differs from this node's");
      return;
    }

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
      conn->fetch_index++;
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

/* One DATA frame per key, in order: the chunk record's header is built
 * here, its payload is written from the primary slot itself (no copy). */
static void
send_next_data (Conn *conn)
{
  KvPeerServer *self = conn->server;
  KvPeerServeRequest *request = conn->fetch;
  guint i = conn->fetch_index;
  gsize block_size = self->settings.block_size;
  gsize head_len;

  if (i == request->keys->len)
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

  if (conn->data_head == NULL)
    conn->data_head = g_malloc (KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE +
                                KV_CHUNK_HEADER_SIZE);
  if (conn->chunks[i].payload != NULL)
    {
      const KvPeerServedChunk *chunk = &conn->chunks[i];
      guint8 *record_header = conn->data_head + KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE;

      kv_peer_frame_encode_data_prefix (conn->data_head, request->request_id, i, KV_PEER_DATA_OK,
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
      head_len = KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE + KV_CHUNK_HEADER_SIZE;
      conn->vectors[1].buffer = conn->chunks[i].payload;
      conn->vectors[1].size = block_size;
      conn->fetch_sent++;
    }
  else
    {
      kv_peer_frame_encode_data_prefix (conn->data_head, request->request_id, i,
                                        KV_PEER_DATA_MISS, 0);
      head_len = KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE;
      conn->vectors[1].buffer = NULL;
      conn->vectors[1].size = 0;
      count (self, KV_PEER_COUNTER_SERVED_MISSES);
    }
  conn->vectors[0].buffer = conn->data_head;
  conn->vectors[0].size = head_len;
  start_timer (conn, self->settings.io_timeout_ms, KV_PEER_COUNTER_SLOW_READERS);
  g_output_stream_writev_all_async (g_io_stream_get_output_stream (conn->stream),
                                    conn->vectors, conn->vectors[1].size > 0 ? 2 : 1,
                                    G_PRIORITY_DEFAULT, conn->cancellable, data_written,
                                    conn_ref (conn));
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
  g_autoptr(GError) error = NULL;

  if (!g_tls_connection_handshake_finish (G_TLS_CONNECTION (source), result, &error))
    {
      if (conn->state != CONN_CLOSED)
        {
          g_debug ("peer server: TLS handshake failed: %s", error->message);
          count (conn->server, KV_PEER_COUNTER_HANDSHAKE_FAILURES);
          conn_close (conn);
        }
    }
  else if (conn->state != CONN_CLOSED)
    start_handshake (conn);
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

static gboolean
incoming (GSocketService    *service,
          GSocketConnection *connection,
          GObject           *source_object,
          gpointer           data)
{
  KvPeerServer *self = data;
  GSocket *socket = g_socket_connection_get_socket (connection);
  g_autoptr(GError) error = NULL;
  Conn *conn;

  if ((guint) g_atomic_int_get (&self->n_connections) >= self->settings.max_connections)
    {
      count (self, KV_PEER_COUNTER_CONNECTIONS_REJECTED);
      g_socket_close (socket, NULL);
      return TRUE;
    }
  count (self, KV_PEER_COUNTER_CONNECTIONS_ACCEPTED);
  g_atomic_int_inc (&self->n_connections);
  g_socket_set_option (socket, IPPROTO_TCP, TCP_NODELAY, 1, NULL);

  conn = g_new0 (Conn, 1);
  conn->ref_count = 1;  /* the table's */
  conn->server = self;
  conn->id = ++self->next_conn_id;
  conn->state = CONN_HELLO;
  conn->socket_conn = g_object_ref (connection);
  conn->cancellable = g_cancellable_new ();
  conn->out = g_byte_array_new ();
  g_hash_table_insert (self->conns, &conn->id, conn);

  start_timer (conn, self->settings.handshake_timeout_ms, KV_PEER_COUNTER_HANDSHAKE_TIMEOUTS);
  if (self->settings.tls_certificate != NULL)
    {
      GIOStream *tls = g_tls_server_connection_new (G_IO_STREAM (connection),
                                                    self->settings.tls_certificate, &error);

      if (tls == NULL)
        {
          g_warning ("peer server: cannot start TLS: %s", error->message);
          conn_close (conn);
          return TRUE;
        }
      if (self->settings.tls_client_database != NULL)
        {
          g_tls_connection_set_database (G_TLS_CONNECTION (tls), self->settings.tls_client_database);
          g_object_set (tls, "authentication-mode", G_TLS_AUTHENTICATION_REQUIRED, NULL);
          g_signal_connect (tls, "accept-certificate", G_CALLBACK (accept_verified_client), NULL);
        }
      conn->stream = tls;
      g_tls_connection_handshake_async (G_TLS_CONNECTION (tls), G_PRIORITY_DEFAULT,
                                        conn->cancellable, tls_handshaken, conn_ref (conn));
    }
  else
    {
      conn->stream = G_IO_STREAM (g_object_ref (connection));
      start_handshake (conn);
    }
  return TRUE;
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
  g_autoptr(GSocketAddress) effective = NULL;
  g_autoptr(GError) local_error = NULL;

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
  if (!g_socket_listener_add_address (G_SOCKET_LISTENER (self->service), socket_address,
                                      G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL,
                                      &effective, &local_error))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "Cannot listen on ‘%s’: %s", address, local_error->message);
      return FALSE;
    }
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

static gpointer
server_thread (gpointer data)
{
  StartData *start = data;
  KvPeerServer *self = start->self;
  GError *error = NULL;

  g_main_context_push_thread_default (self->context);
  self->service = g_socket_service_new ();
  g_socket_listener_set_backlog (G_SOCKET_LISTENER (self->service), 1024);
  g_signal_connect (self->service, "incoming", G_CALLBACK (incoming), self);
  if (!bind_address (self, start->address, &error))
    g_socket_service_stop (self->service);

  g_mutex_lock (&self->lock);
  self->started = TRUE;
  self->start_error = error;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  if (error == NULL)
    g_main_loop_run (self->loop);

  g_socket_service_stop (self->service);
  g_socket_listener_close (G_SOCKET_LISTENER (self->service));
  g_clear_object (&self->service);
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

static gboolean
stop_accepting_in_thread (gpointer data)
{
  KvPeerServer *self = data;

  if (self->service != NULL)
    {
      g_socket_service_stop (self->service);
      g_socket_listener_close (G_SOCKET_LISTENER (self->service));
    }
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
  g_clear_pointer (&self->queue, g_ptr_array_unref);
  g_clear_pointer (&self->loop, g_main_loop_unref);
  g_clear_pointer (&self->context, g_main_context_unref);
  g_clear_pointer (&self->settings.secret, g_bytes_unref);
  g_clear_object (&self->settings.tls_certificate);
  g_clear_object (&self->settings.tls_client_database);
  g_clear_error (&self->start_error);
  g_free (self->address);
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
  self->counters = counters;
  self->queued_func = queued_func;
  self->queued_data = queued_data;
  return self;
}
