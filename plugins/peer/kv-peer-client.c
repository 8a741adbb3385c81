/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "kv-chunk-format.h"
#include "kv-log-limiter.h"
#include "kv-peer-deadline.h"
#include "kv-peer-handshake.h"

/*
 * The asking side of the peer protocol, for one peer: a small pool of
 * authenticated connections, each used by one request at a time. Requests
 * block the calling thread (a KvAsyncLookup worker, a fetch worker of the
 * tier, never the owner thread) and every read or write is bounded by
 * io-timeout-ms: a timer on the tier's timer context cancels the request,
 * as does the job's cancellable at its deadline. A connection that failed
 * or timed out is closed, never reused, since it may hold half a frame.
 *
 * The peer's own circuit breaker counts its transport failures (not its
 * misses): while it is open the tier does not ask this peer at all, and
 * after breaker-open-ms the next request decides.
 *
 * A peer that cannot be reached (a connection or its handshake failed) is
 * logged once, naming the tier, the peer and the cause, and so is its
 * return (kv-log-limiter.h); the breaker logs its own openings.
 */

typedef struct
{
  GSocketConnection *socket_conn;
  GIOStream         *stream;
  guint32            next_request_id;
  guint32            max_keys;
  guint64            max_inflight_bytes;
  guint8            *record_buf;      /* a DATA prefix, then a record header */
  guint8            *record_header;   /* KV_CHUNK_HEADER_SIZE, in record_buf */
  KvChunkHasher     *hasher;          /* the payload being received */
  GByteArray        *buf;
} PeerLink;

struct _KvPeerClient
{
  GObject parent_instance;

  char                 *address;
  KvPeerClientSettings  settings;
  KvPeerCounters       *counters;
  GSocketConnectable   *connectable;
  KvCircuitBreaker     *breaker;

  GMutex                lock;
  GCond                 cond;
  GQueue                idle;         /* PeerLink */
  guint                 n_open;
  gboolean              closed;
  char                 *tier_label;   /* what messages name the tier */
  KvLogLimiter          reach;        /* whether the peer answers */
};

G_DEFINE_FINAL_TYPE (KvPeerClient, kv_peer_client, G_TYPE_OBJECT)

static void
peer_link_free (PeerLink *link)
{
  if (link->socket_conn != NULL)
    g_socket_close (g_socket_connection_get_socket (link->socket_conn), NULL);
  g_clear_object (&link->stream);
  g_clear_object (&link->socket_conn);
  g_free (link->record_buf);
  kv_chunk_hasher_free (link->hasher);
  g_byte_array_unref (link->buf);
  g_free (link);
}

/* ---- per-request deadline -------------------------------------------------- */

static void
deadline_begin (KvPeerClient   *self,
                KvPeerDeadline *deadline,
                GCancellable   *outer)
{
  kv_peer_deadline_begin (deadline, self->settings.timer_context, self->settings.io_timeout_ms,
                          outer);
}

/* Rewrites a cancellation by the timer as a timeout naming the peer. */
static void
name_failure (KvPeerClient    *self,
              KvPeerDeadline  *deadline,
              const char      *what,
              GError         **error)
{
  if (error == NULL || *error == NULL)
    return;
  if (g_error_matches (*error, G_IO_ERROR, G_IO_ERROR_CANCELLED) &&
      kv_peer_deadline_timed_out (deadline))
    {
      g_clear_error (error);
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_TIMED_OUT,
                   "Peer %s did not answer %s within %u ms", self->address, what,
                   self->settings.io_timeout_ms);
      return;
    }
  g_prefix_error (error, "Peer %s, %s: ", self->address, what);
}

/* ---- frames ------------------------------------------------------------- */

static gboolean
write_buf (PeerLink      *link,
           GCancellable  *cancellable,
           GError       **error)
{
  return g_output_stream_write_all (g_io_stream_get_output_stream (link->stream),
                                    link->buf->data, link->buf->len, NULL, cancellable, error);
}

static gboolean
read_exact (PeerLink      *link,
            void          *buffer,
            gsize          len,
            GCancellable  *cancellable,
            GError       **error)
{
  gsize n = 0;

  if (!g_input_stream_read_all (g_io_stream_get_input_stream (link->stream), buffer, len, &n,
                                cancellable, error))
    return FALSE;
  if (n < len)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                           "the connection closed in the middle of a frame");
      return FALSE;
    }
  return TRUE;
}

/* Bytes a payload read asks for at a time: each piece is hashed right
 * after it arrived, while it is still in the core's cache. */
#define PAYLOAD_PIECE (128 * 1024)

/* Reads @len payload bytes into @slot, feeding @hasher (if not NULL) one
 * piece at a time as they arrive, so that the check costs no second pass
 * over the slot. */
static gboolean
read_payload (PeerLink       *link,
              guint8         *slot,
              gsize           len,
              KvChunkHasher  *hasher,
              GCancellable   *cancellable,
              GError        **error)
{
  GInputStream *input = g_io_stream_get_input_stream (link->stream);

  if (hasher != NULL)
    kv_chunk_hasher_reset (hasher);
  for (gsize done = 0; done < len; )
    {
      gssize n = g_input_stream_read (input, slot + done, MIN (len - done, PAYLOAD_PIECE),
                                      cancellable, error);

      if (n < 0)
        return FALSE;
      if (n == 0)
        {
          g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                               "the connection closed in the middle of a frame");
          return FALSE;
        }
      if (hasher != NULL)
        kv_chunk_hasher_update (hasher, slot + done, n);
      done += n;
    }
  return TRUE;
}

/* An ERROR frame from the peer, as a GError. */
static void
set_peer_error (KvPeerMessage  *message,
                GError        **error)
{
  g_set_error (error, KV_TIER_ERROR,
               message->error_code == KV_PEER_ERROR_BUSY ? KV_TIER_ERROR_BUSY : KV_TIER_ERROR_FAILED,
               "the peer refused: %s (code %u)", message->error_message, message->error_code);
}

/* Reads one whole frame (not DATA) of at most @max_body bytes and parses it;
 * an ERROR frame becomes @error. */
static gboolean
read_message (PeerLink       *link,
              guint32         max_body,
              guint32         max_keys,
              KvPeerMessage  *message,
              GCancellable   *cancellable,
              GError        **error)
{
  guint8 header_bytes[KV_PEER_FRAME_HEADER_SIZE];
  KvPeerFrameHeader header;

  if (!read_exact (link, header_bytes, sizeof header_bytes, cancellable, error))
    return FALSE;
  if (!kv_peer_frame_header_parse (header_bytes,
                                   MAX (max_body, 6 + KV_PEER_MAX_ERROR_MESSAGE),
                                   &header, error))
    return FALSE;
  if (header.type != KV_PEER_FRAME_ERROR && header.body_len > max_body)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                   "%s frame of %u bytes is larger than expected",
                   kv_peer_frame_type_to_string (header.type), header.body_len);
      return FALSE;
    }
  g_byte_array_set_size (link->buf, header.body_len);
  if (header.body_len > 0 &&
      !read_exact (link, link->buf->data, header.body_len, cancellable, error))
    return FALSE;
  if (!kv_peer_message_parse (header.type, link->buf->data, header.body_len, max_keys,
                              message, error))
    return FALSE;
  if (message->type == KV_PEER_FRAME_ERROR)
    {
      set_peer_error (message, error);
      kv_peer_message_clear (message);
      return FALSE;
    }
  return TRUE;
}

static gboolean
unexpected (KvPeerMessage  *message,
            const char     *wanted,
            GError        **error)
{
  g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
               "expected %s, got a %s frame", wanted, kv_peer_frame_type_to_string (message->type));
  return FALSE;
}

/* ---- connecting ------------------------------------------------------------- */

static void peer_reached (KvPeerClient *self);

static gboolean
handshake (KvPeerClient  *self,
           PeerLink      *link,
           GCancellable  *cancellable,
           GError       **error)
{
  g_auto(KvPeerMessage) hello = { 0 };
  g_auto(KvPeerMessage) auth = { 0 };
  guint8 client_nonce[KV_PEER_NONCE_LEN];

  if (!kv_peer_random_nonce (client_nonce, error))
    return FALSE;
  g_byte_array_set_size (link->buf, 0);
  kv_peer_frame_append_hello (link->buf, client_nonce);
  if (!write_buf (link, cancellable, error))
    return FALSE;
  if (!read_message (link, KV_PEER_HELLO_BODY_SIZE, 0, &hello, cancellable, error))
    return FALSE;
  if (hello.type != KV_PEER_FRAME_HELLO)
    return unexpected (&hello, "HELLO", error);
  if (!kv_peer_handshake_append_client_auth (link->buf, self->settings.secret, client_nonce, &hello,
                                             self->settings.block_size,
                                             self->settings.namespace_digest, "peer", error) ||
      !write_buf (link, cancellable, error))
    return FALSE;
  if (!read_message (link, KV_PEER_AUTH_BODY_SIZE, 0, &auth, cancellable, error))
    return FALSE;
  if (auth.type != KV_PEER_FRAME_AUTH)
    return unexpected (&auth, "AUTH", error);
  if (!kv_peer_handshake_check_server_auth (self->settings.secret, client_nonce, &hello,
                                            link->buf->data, &auth, self->settings.block_size,
                                            self->settings.namespace_digest, "peer", error))
    return FALSE;
  if (auth.max_keys == 0 || auth.max_inflight_bytes < self->settings.block_size)
    {
      g_set_error_literal (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                           "the peer's limits do not allow a single chunk");
      return FALSE;
    }
  link->max_keys = MIN (auth.max_keys, KV_PEER_MAX_KEYS_LIMIT);
  link->max_inflight_bytes = auth.max_inflight_bytes;
  return TRUE;
}

static PeerLink *
connect_link (KvPeerClient  *self,
              GCancellable  *cancellable,
              GError       **error)
{
  g_autoptr(GSocketClient) client = g_socket_client_new ();
  /* an address of this connect's own: GLib 2.74 caches a parsed address
   * in the GNetworkAddress without a lock, and two links connecting at
   * once from two threads leaked one of the lists (LeakSanitizer) */
  GNetworkAddress *peer = G_NETWORK_ADDRESS (self->connectable);
  g_autoptr(GSocketConnectable) target = g_network_address_new (g_network_address_get_hostname (peer),
                                                                g_network_address_get_port (peer));
  PeerLink *link = g_new0 (PeerLink, 1);

  link->buf = g_byte_array_new ();
  /* a DATA frame's prefix is read just before its record header */
  link->record_buf = g_malloc (KV_PEER_DATA_PREFIX_SIZE + KV_CHUNK_HEADER_SIZE);
  link->record_header = link->record_buf + KV_PEER_DATA_PREFIX_SIZE;
  link->hasher = kv_chunk_hasher_new ();
  /* straight to the peer: no system proxy between two cache nodes */
  g_socket_client_set_enable_proxy (client, FALSE);
  link->socket_conn = g_socket_client_connect (client, target, cancellable, error);
  if (link->socket_conn == NULL)
    goto failed;
  g_socket_set_option (g_socket_connection_get_socket (link->socket_conn),
                       IPPROTO_TCP, TCP_NODELAY, 1, NULL);

  if (self->settings.tls)
    {
      GIOStream *tls = g_tls_client_connection_new (G_IO_STREAM (link->socket_conn),
                                                    self->connectable, error);

      if (tls == NULL)
        goto failed;
      link->stream = tls;
      if (self->settings.tls_database != NULL)
        g_tls_connection_set_database (G_TLS_CONNECTION (tls), self->settings.tls_database);
      if (self->settings.tls_certificate != NULL)
        g_tls_connection_set_certificate (G_TLS_CONNECTION (tls), self->settings.tls_certificate);
      if (!g_tls_connection_handshake (G_TLS_CONNECTION (tls), cancellable, error))
        goto failed;
    }
  else
    link->stream = G_IO_STREAM (g_object_ref (link->socket_conn));

  if (!handshake (self, link, cancellable, error))
    goto failed;
  peer_reached (self);
  return link;

failed:
  kv_peer_counters_add (self->counters, KV_PEER_COUNTER_CONNECT_FAILURES, 1);
  peer_link_free (link);
  return NULL;
}

/* An authenticated connection for one request: an idle one, a new one, or
 * (at max-connections) the next one given back. */
static PeerLink *
take_link (KvPeerClient    *self,
           KvPeerDeadline  *deadline,
           GError         **error)
{
  PeerLink *link = NULL;
  gint64 until = g_get_monotonic_time () + self->settings.io_timeout_ms * G_TIME_SPAN_MILLISECOND;

  g_mutex_lock (&self->lock);
  while (!self->closed && g_queue_is_empty (&self->idle) &&
         self->n_open >= self->settings.max_connections)
    if (!g_cond_wait_until (&self->cond, &self->lock, until))
      break;
  if (self->closed)
    {
      g_mutex_unlock (&self->lock);
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED, "the peer client is closed");
      return NULL;
    }
  link = g_queue_pop_head (&self->idle);
  if (link == NULL && self->n_open >= self->settings.max_connections)
    {
      g_mutex_unlock (&self->lock);
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY,
                   "all %u connections stayed busy for %u ms",
                   self->settings.max_connections, self->settings.io_timeout_ms);
      return NULL;
    }
  if (link == NULL)
    self->n_open++;
  g_mutex_unlock (&self->lock);

  if (link != NULL)
    return link;
  link = connect_link (self, deadline->cancellable, error);
  if (link == NULL)
    {
      g_mutex_lock (&self->lock);
      self->n_open--;
      g_cond_signal (&self->cond);
      g_mutex_unlock (&self->lock);
    }
  return link;
}

/* Gives @link back after a request; a failed one is closed. */
static void
give_link (KvPeerClient *self,
           PeerLink     *link,
           gboolean      healthy)
{
  g_mutex_lock (&self->lock);
  if (healthy && !self->closed)
    g_queue_push_head (&self->idle, link);
  else
    self->n_open--;
  g_cond_signal (&self->cond);
  g_mutex_unlock (&self->lock);
  if (!healthy || self->closed)
    peer_link_free (link);
}

/* Whether requests may go to this peer: its breaker is closed, or open
 * long enough that the next request decides. */
gboolean
kv_peer_client_allows_requests (KvPeerClient *self)
{
  if (kv_circuit_breaker_allows_requests (self->breaker))
    return TRUE;
  kv_circuit_breaker_half_open (self->breaker);
  return kv_circuit_breaker_allows_requests (self->breaker);
}

/* @error: the failure, named (name_failure()), or NULL on success. */
static void
record_outcome (KvPeerClient *self,
                gboolean      success,
                GError      **error)
{
  /* A job cancelled at its deadline is the peer's failure too. */
  if (success)
    kv_circuit_breaker_record_success (self->breaker);
  else
    {
      guint64 trips = kv_circuit_breaker_get_n_trips (self->breaker);

      if (error != NULL && *error != NULL)
        kv_circuit_breaker_record_error (self->breaker, (*error)->message);
      else
        kv_circuit_breaker_record_failure (self->breaker);
      if (kv_circuit_breaker_get_n_trips (self->breaker) != trips)
        kv_peer_counters_add (self->counters, KV_PEER_COUNTER_PEER_BREAKER_OPENINGS, 1);
      kv_peer_counters_add (self->counters, KV_PEER_COUNTER_PEER_ERRORS, 1);
    }
}

/* The peer answered a connection (its handshake included). */
static void
peer_reached (KvPeerClient *self)
{
  g_autofree char *line = NULL;
  gint64 away_us = 0;

  g_mutex_lock (&self->lock);
  if (kv_log_limiter_log_up (&self->reach, g_get_monotonic_time (), &away_us))
    line = g_strdup_printf ("peer tier %s: peer %s answers again after %.1f s",
                            self->tier_label, self->address, away_us / 1e6);
  g_mutex_unlock (&self->lock);
  if (line != NULL)
    g_message ("%s", line);
}

/* No connection could be made for a request (@error says why, named). */
static void
peer_unreached (KvPeerClient *self,
                const GError *error)
{
  g_autofree char *line = NULL;
  gboolean loss;
  guint64 n_losses = 0;

  g_mutex_lock (&self->lock);
  loss = !self->reach.down;
  if (loss)
    kv_peer_counters_add (self->counters, KV_PEER_COUNTER_PEER_OUTAGES, 1);
  if (kv_log_limiter_log_down (&self->reach, loss, g_get_monotonic_time (), &n_losses))
    {
      g_autofree char *more = n_losses > 1 ? g_strdup_printf (" (%" G_GUINT64_FORMAT " outages "
                                                              "in all since the last message)",
                                                              n_losses)
                                           : g_strdup ("");

      line = g_strdup_printf ("peer tier %s: peer %s unreachable: %s%s; it is not asked while "
                              "its breaker is open", self->tier_label, self->address,
                              error->message, more);
    }
  g_mutex_unlock (&self->lock);
  if (line != NULL)
    g_message ("%s", line);
}

/* No connection for a request: the peer's failure, unless every connection
 * was busy here or the client is closing. */
static void
record_link_failure (KvPeerClient  *self,
                     GError       **error)
{
  if (error != NULL && *error != NULL &&
      (g_error_matches (*error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY) ||
       g_error_matches (*error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED)))
    return;
  if (error != NULL && *error != NULL)
    peer_unreached (self, *error);
  record_outcome (self, FALSE, error);
}

/* ---- requests ------------------------------------------------------------- */

/* Asks which of @keys the peer holds: one KvPeerLookupAnswer per key in
 * @answers. Blocks, at most io-timeout-ms per frame. */
gboolean
kv_peer_client_lookup (KvPeerClient   *self,
                       KvKey * const  *keys,
                       guint           n_keys,
                       guint8         *answers,
                       GError        **error)
{
  KvPeerDeadline deadline;
  PeerLink *link;
  gboolean ok = TRUE;

  deadline_begin (self, &deadline, NULL);
  link = take_link (self, &deadline, error);
  if (link == NULL)
    {
      name_failure (self, &deadline, "a connection", error);
      record_link_failure (self, error);
      kv_peer_deadline_end (&deadline);
      return FALSE;
    }

  for (guint done = 0; ok && done < n_keys; )
    {
      guint n = MIN (n_keys - done, link->max_keys);
      guint32 id = ++link->next_request_id;
      g_auto(KvPeerMessage) response = { 0 };

      kv_peer_deadline_restart (&deadline);
      g_byte_array_set_size (link->buf, 0);
      ok = kv_peer_frame_append_keys (link->buf, KV_PEER_FRAME_LOOKUP, id, keys + done, n, error) &&
           write_buf (link, deadline.cancellable, error) &&
           read_message (link, 8 + n, n, &response, deadline.cancellable, error);
      if (ok && (response.type != KV_PEER_FRAME_LOOKUP_RESP || response.request_id != id ||
                 response.n_answers != n))
        {
          g_set_error_literal (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                               "the answer does not match the LOOKUP");
          ok = FALSE;
        }
      if (ok)
        memcpy (answers + done, response.answers, n);
      done += n;
    }

  if (!ok)
    name_failure (self, &deadline, "a LOOKUP", error);
  record_outcome (self, ok, error);
  give_link (self, link, ok);
  kv_peer_deadline_end (&deadline);
  return ok;
}

/* Reads one DATA frame of a FETCH: the record goes straight into @slot
 * (the payload is never copied), then is checked as the fs tier checks a
 * file. */
static gboolean
read_data (KvPeerClient  *self,
           PeerLink      *link,
           guint32        request_id,
           guint          index,
           KvKey         *key,
           guint8        *slot,
           gboolean      *landed,
           guint64       *payload_checksum,
           GCancellable  *cancellable,
           GError       **error)
{
  gsize block_size = self->settings.block_size;
  guint8 frame[KV_PEER_FRAME_HEADER_SIZE + KV_PEER_DATA_PREFIX_SIZE];
  g_auto(KvPeerMessage) message = { 0 };
  KvPeerFrameHeader header;
  KvChunkCheck check;
  gboolean with_record;
  guint8 *prefix;

  *landed = FALSE;
  if (!read_exact (link, frame, KV_PEER_FRAME_HEADER_SIZE, cancellable, error) ||
      !kv_peer_frame_header_parse (frame, KV_PEER_DATA_PREFIX_SIZE + KV_CHUNK_HEADER_SIZE + block_size,
                                   &header, error))
    return FALSE;
  if (header.type == KV_PEER_FRAME_ERROR)
    {
      if (header.body_len > 6 + KV_PEER_MAX_ERROR_MESSAGE)
        return unexpected (&message, "a bounded ERROR", error);
      g_byte_array_set_size (link->buf, header.body_len);
      if (!read_exact (link, link->buf->data, header.body_len, cancellable, error) ||
          !kv_peer_message_parse (header.type, link->buf->data, header.body_len, 0, &message, error))
        return FALSE;
      set_peer_error (&message, error);
      return FALSE;
    }
  if (header.type != KV_PEER_FRAME_DATA || header.body_len < KV_PEER_DATA_PREFIX_SIZE)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "expected DATA, got a %s frame", kv_peer_frame_type_to_string (header.type));
      return FALSE;
    }
  /* a whole chunk's frame: its prefix and its record header in one read */
  with_record = header.body_len == KV_PEER_DATA_PREFIX_SIZE + KV_CHUNK_HEADER_SIZE + block_size;
  prefix = with_record ? link->record_buf : frame + KV_PEER_FRAME_HEADER_SIZE;
  if (!read_exact (link, prefix,
                   KV_PEER_DATA_PREFIX_SIZE + (with_record ? KV_CHUNK_HEADER_SIZE : 0),
                   cancellable, error) ||
      !kv_peer_message_parse (KV_PEER_FRAME_DATA, prefix, KV_PEER_DATA_PREFIX_SIZE, 0, &message, error))
    return FALSE;
  if (message.request_id != request_id || message.index != index ||
      header.body_len != KV_PEER_DATA_PREFIX_SIZE +
                         (message.status == KV_PEER_DATA_OK ? KV_CHUNK_HEADER_SIZE + block_size : 0))
    {
      g_set_error_literal (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                           "a DATA frame does not match the FETCH");
      return FALSE;
    }
  if (message.status == KV_PEER_DATA_MISS)
    {
      kv_peer_counters_add (self->counters, KV_PEER_COUNTER_FETCH_MISSES, 1);
      return TRUE;
    }
  /* the header is checked before the payload is read, the payload as it
   * arrives; a chunk that fails is still read whole, to stay in step */
  check = kv_chunk_header_check (link->record_header, self->settings.namespace_digest, key,
                                 block_size, payload_checksum);
  if (!read_payload (link, slot, block_size, check == KV_CHUNK_CHECK_OK ? link->hasher : NULL,
                     cancellable, error))
    return FALSE;
  if (check == KV_CHUNK_CHECK_OK && kv_chunk_hasher_digest (link->hasher) != *payload_checksum)
    check = KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM;
  if (check != KV_CHUNK_CHECK_OK)
    {
      g_autofree char *name = kv_key_to_string (key);

      kv_peer_counters_add (self->counters, KV_PEER_COUNTER_CHECKSUM_FAILURES, 1);
      g_message ("peer tier: chunk %s from %s failed its check (%s); not used", name,
                 self->address, kv_chunk_check_to_string (check));
      return TRUE;
    }
  *landed = TRUE;
  kv_peer_counters_add (self->counters, KV_PEER_COUNTER_FETCHED_CHUNKS, 1);
  kv_peer_counters_add (self->counters, KV_PEER_COUNTER_FETCHED_BYTES, block_size);
  return TRUE;
}

/* Fetches @keys into @slots (one primary slot each, block-size bytes):
 * @landed says which arrived and checked out, @payload_checksums (as
 * verified against the chunk) holds their checksums. FALSE when the
 * transfer failed; the slots of keys not landed hold undefined bytes. */
gboolean
kv_peer_client_fetch (KvPeerClient   *self,
                      KvKey * const  *keys,
                      guint           n_keys,
                      guint8 * const *slots,
                      gboolean       *landed,
                      guint64        *payload_checksums,
                      GCancellable   *cancellable,
                      GError        **error)
{
  KvPeerDeadline deadline;
  PeerLink *link;
  gboolean ok = TRUE;

  memset (landed, 0, sizeof (gboolean) * n_keys);
  deadline_begin (self, &deadline, cancellable);
  link = take_link (self, &deadline, error);
  if (link == NULL)
    {
      kv_peer_counters_add (self->counters, KV_PEER_COUNTER_FETCH_FAILURES, 1);
      name_failure (self, &deadline, "a connection", error);
      record_link_failure (self, error);
      kv_peer_deadline_end (&deadline);
      return FALSE;
    }

  for (guint done = 0; ok && done < n_keys; )
    {
      guint per_batch = MAX (1, MIN (link->max_keys,
                                     link->max_inflight_bytes / self->settings.block_size));
      guint n = MIN (n_keys - done, per_batch);
      guint32 id = ++link->next_request_id;
      g_auto(KvPeerMessage) trailer = { 0 };

      kv_peer_deadline_restart (&deadline);
      g_byte_array_set_size (link->buf, 0);
      ok = kv_peer_frame_append_keys (link->buf, KV_PEER_FRAME_FETCH, id, keys + done, n, error) &&
           write_buf (link, deadline.cancellable, error);
      for (guint i = 0; ok && i < n; i++)
        {
          /* each frame within the I/O timeout: a peer that stops sending
           * is found out, a long batch is not */
          kv_peer_deadline_restart (&deadline);
          ok = read_data (self, link, id, i, keys[done + i], slots[done + i], &landed[done + i],
                          &payload_checksums[done + i], deadline.cancellable, error);
        }
      if (ok)
        ok = read_message (link, 8, 0, &trailer, deadline.cancellable, error);
      if (ok && (trailer.type != KV_PEER_FRAME_DONE || trailer.request_id != id))
        {
          g_set_error_literal (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                               "a FETCH did not end with its DONE");
          ok = FALSE;
        }
      done += n;
    }

  if (!ok)
    {
      name_failure (self, &deadline, "a FETCH", error);
      kv_peer_counters_add (self->counters, KV_PEER_COUNTER_FETCH_FAILURES, 1);
    }
  record_outcome (self, ok, error);
  give_link (self, link, ok);
  kv_peer_deadline_end (&deadline);
  return ok;
}

const char *
kv_peer_client_get_address (KvPeerClient *self)
{
  return self->address;
}

KvCircuitBreaker *
kv_peer_client_get_breaker (KvPeerClient *self)
{
  return self->breaker;
}

/* What the client's messages and its breaker's call the tier ("1:peer").
 * Any thread. */
void
kv_peer_client_set_tier_label (KvPeerClient *self,
                               const char   *label)
{
  g_autofree char *name = g_strdup_printf ("peer tier %s, peer %s", label, self->address);

  g_mutex_lock (&self->lock);
  g_free (self->tier_label);
  self->tier_label = g_strdup (label);
  g_mutex_unlock (&self->lock);
  kv_circuit_breaker_set_name (self->breaker, name);
}

/* Closes the idle connections; requests still running close theirs when
 * they end, and no new one starts. */
void
kv_peer_client_close (KvPeerClient *self)
{
  GQueue idle = G_QUEUE_INIT;
  PeerLink *link;

  g_mutex_lock (&self->lock);
  self->closed = TRUE;
  idle = self->idle;
  g_queue_init (&self->idle);
  self->n_open -= idle.length;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  while ((link = g_queue_pop_head (&idle)) != NULL)
    peer_link_free (link);
}

static void
kv_peer_client_finalize (GObject *object)
{
  KvPeerClient *self = KV_PEER_CLIENT (object);

  kv_peer_client_close (self);
  g_clear_object (&self->connectable);
  g_clear_object (&self->breaker);
  g_clear_pointer (&self->settings.secret, g_bytes_unref);
  g_clear_pointer (&self->settings.timer_context, g_main_context_unref);
  g_clear_object (&self->settings.clock);
  g_clear_object (&self->settings.tls_database);
  g_clear_object (&self->settings.tls_certificate);
  g_free (self->address);
  g_free (self->tier_label);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);

  G_OBJECT_CLASS (kv_peer_client_parent_class)->finalize (object);
}

static void
kv_peer_client_class_init (KvPeerClientClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_peer_client_finalize;
}

static void
kv_peer_client_init (KvPeerClient *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_queue_init (&self->idle);
}

/* A client of the peer at @address ("HOST:PORT"). Connects lazily. */
KvPeerClient *
kv_peer_client_new (const char                 *address,
                    const KvPeerClientSettings *settings,
                    KvPeerCounters             *counters,
                    GError                    **error)
{
  g_autoptr(GSocketConnectable) connectable = NULL;
  g_autoptr(GError) local_error = NULL;
  KvPeerClient *self;

  connectable = g_network_address_parse (address, 0, &local_error);
  if (connectable == NULL || g_network_address_get_port (G_NETWORK_ADDRESS (connectable)) == 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The peer address ‘%s’ is not HOST:PORT%s%s", address,
                   local_error != NULL ? ": " : "",
                   local_error != NULL ? local_error->message : "");
      return NULL;
    }

  self = g_object_new (KV_TYPE_PEER_CLIENT, NULL);
  self->address = g_strdup (address);
  self->settings = *settings;
  self->settings.secret = g_bytes_ref (settings->secret);
  self->settings.timer_context = g_main_context_ref (settings->timer_context);
  if (settings->clock != NULL)
    g_object_ref (settings->clock);
  if (settings->tls_database != NULL)
    g_object_ref (settings->tls_database);
  if (settings->tls_certificate != NULL)
    g_object_ref (settings->tls_certificate);
  self->counters = counters;
  self->connectable = g_steal_pointer (&connectable);
  self->breaker = kv_circuit_breaker_new (settings->breaker_threshold, settings->breaker_open_ms,
                                          settings->clock);
  kv_peer_client_set_tier_label (self, "peer");
  return self;
}
