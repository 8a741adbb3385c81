/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-subscriber.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "kv-chunk-format.h"
#include "kv-peer-frame.h"
#include "kv-peer-handshake.h"
#include "kv-peer-stream.h"

/*
 * KvPeerSubscriber (registered by the peer plugin; reached by its type
 * name, "KvPeerSubscriber"): follows one node's event stream
 * (doc/protocol.md, "Event stream") into a KvFleetIndex.
 *
 * A thread of its own connects, authenticates as a peer of the node's
 * namespace, sends SUBSCRIBE and applies what comes: a snapshot between
 * begin_snapshot and end_snapshot of the index, then each EVENTS frame in
 * sequence; a HEARTBEAT keeps the node alive in the index. Anything out of
 * order, malformed or over the limits the node announced ends the
 * connection. So does silence longer than silence-timeout-ms. The
 * subscriber then reconnects (backing off up to 8 × reconnect-ms) and gets
 * a new snapshot; it does not forget the node itself: the index does,
 * after its node-timeout-ms without a sign of life
 * (kv_fleet_index_expire(), which this thread also calls while it waits).
 *
 * Losing and regaining the node is logged once each, naming it.
 */

struct _KvPeerSubscriber
{
  GObject parent_instance;

  /* construct-only */
  char         *address;
  KvFleetIndex *index;
  char         *secret_file;
  char         *namespace_;
  guint64       slot_size;
  gboolean      tls;
  char         *tls_ca_file;
  char         *tls_cert_file;
  char         *tls_key_file;
  guint         io_timeout_ms;
  guint         silence_timeout_ms;
  guint         reconnect_ms;

  gboolean          initialized;
  GBytes           *secret;
  guint8            digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  GTlsDatabase     *tls_database;
  GTlsCertificate  *tls_certificate;
  GSocketConnectable *connectable;
  GCancellable     *cancellable;
  GThread          *thread;
  GMutex            lock;
  GCond             cond;

  /* atomics, read from any thread */
  guint             node;
  guint64           applied_seq;
  gint              connected;
  guint64           n_connects;
  guint64           n_snapshots;
};

enum {
  PROP_0,
  PROP_ADDRESS,
  PROP_INDEX,
  PROP_SECRET_FILE,
  PROP_NAMESPACE,
  PROP_SLOT_SIZE,
  PROP_TLS,
  PROP_TLS_CA_FILE,
  PROP_TLS_CERT_FILE,
  PROP_TLS_KEY_FILE,
  PROP_IO_TIMEOUT_MS,
  PROP_SILENCE_TIMEOUT_MS,
  PROP_RECONNECT_MS,
  PROP_NODE,
  PROP_APPLIED_SEQ,
  PROP_CONNECTED,
  PROP_N_CONNECTS,
  PROP_N_SNAPSHOTS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void kv_peer_subscriber_initable_iface_init (GInitableIface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvPeerSubscriber, kv_peer_subscriber, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_peer_subscriber_initable_iface_init))

typedef struct
{
  GSocketConnection *socket_conn;
  GIOStream         *stream;
  GByteArray        *buf;
  guint32            max_entries;
} Link;

static void
link_clear (Link *link)
{
  if (link->socket_conn != NULL)
    g_socket_close (g_socket_connection_get_socket (link->socket_conn), NULL);
  g_clear_object (&link->stream);
  g_clear_object (&link->socket_conn);
  g_clear_pointer (&link->buf, g_byte_array_unref);
}

/* ---- I/O with deadlines --------------------------------------------------- */

/* Reads exactly @len bytes within @timeout_ms. */
static gboolean
read_exact (KvPeerSubscriber  *self,
            Link              *link,
            guint8            *buffer,
            gsize              len,
            guint              timeout_ms,
            GError           **error)
{
  GInputStream *in = g_io_stream_get_input_stream (link->stream);
  GSocket *socket = g_socket_connection_get_socket (link->socket_conn);
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  gsize done = 0;

  while (done < len)
    {
      g_autoptr(GError) local_error = NULL;
      gssize n;

      if (!g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM (in)))
        {
          gint64 left = deadline - g_get_monotonic_time ();

          if (left <= 0 ||
              !g_socket_condition_timed_wait (socket, G_IO_IN, left, self->cancellable, &local_error))
            {
              if (local_error == NULL ||
                  g_error_matches (local_error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT))
                {
                  g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                               "nothing arrived for %u ms", timeout_ms);
                  return FALSE;
                }
              g_propagate_error (error, g_steal_pointer (&local_error));
              return FALSE;
            }
        }
      n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM (in), buffer + done,
                                                    len - done, self->cancellable, &local_error);
      if (n < 0)
        {
          if (g_error_matches (local_error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            continue;
          g_propagate_error (error, g_steal_pointer (&local_error));
          return FALSE;
        }
      if (n == 0)
        {
          g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                               done == 0 ? "the node closed the connection"
                                         : "the node closed the connection in the middle of a frame");
          return FALSE;
        }
      done += n;
    }
  return TRUE;
}

static gboolean
write_buf (KvPeerSubscriber  *self,
           Link              *link,
           GError           **error)
{
  return g_output_stream_write_all (g_io_stream_get_output_stream (link->stream),
                                    link->buf->data, link->buf->len, NULL, self->cancellable, error);
}

/* Reads one frame's header (waiting up to @wait_ms) and body (within the
 * I/O timeout), of at most @max_body bytes; an ERROR frame becomes @error. */
static gboolean
read_frame (KvPeerSubscriber   *self,
            Link               *link,
            guint               wait_ms,
            guint32             max_body,
            KvPeerFrameHeader  *header,
            GError            **error)
{
  guint8 bytes[KV_PEER_FRAME_HEADER_SIZE];

  if (!read_exact (self, link, bytes, sizeof bytes, wait_ms, error))
    return FALSE;
  if (!kv_peer_frame_header_parse (bytes, MAX (max_body, 6 + KV_PEER_MAX_ERROR_MESSAGE),
                                   header, error))
    return FALSE;
  if (header->type != KV_PEER_FRAME_ERROR && header->body_len > max_body)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                   "a %s frame of %u bytes is over the limit of %u",
                   kv_peer_frame_type_to_string (header->type), header->body_len, max_body);
      return FALSE;
    }
  g_byte_array_set_size (link->buf, header->body_len);
  if (header->body_len > 0 &&
      !read_exact (self, link, link->buf->data, header->body_len, self->io_timeout_ms, error))
    return FALSE;
  if (header->type == KV_PEER_FRAME_ERROR)
    {
      g_auto(KvPeerMessage) message = { 0 };

      if (kv_peer_message_parse (header->type, link->buf->data, header->body_len, 0, &message, error))
        g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, message.error_code,
                     "the node refused: %s (code %u)", message.error_message, message.error_code);
      return FALSE;
    }
  return TRUE;
}

static gboolean
expect_message (KvPeerSubscriber  *self,
                Link              *link,
                KvPeerFrameType    type,
                guint32            body_size,
                KvPeerMessage     *message,
                GError           **error)
{
  KvPeerFrameHeader header;

  if (!read_frame (self, link, self->io_timeout_ms, body_size, &header, error))
    return FALSE;
  if (header.type != type)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                   "expected %s, got a %s frame", kv_peer_frame_type_to_string (type),
                   kv_peer_frame_type_to_string (header.type));
      return FALSE;
    }
  return kv_peer_message_parse (header.type, link->buf->data, header.body_len, 0, message, error);
}

/* ---- a session ------------------------------------------------------------ */

static gboolean
handshake (KvPeerSubscriber  *self,
           Link              *link,
           GError           **error)
{
  g_auto(KvPeerMessage) hello = { 0 };
  g_auto(KvPeerMessage) auth = { 0 };
  guint8 client_nonce[KV_PEER_NONCE_LEN];

  if (!kv_peer_random_nonce (client_nonce, error))
    return FALSE;
  g_byte_array_set_size (link->buf, 0);
  kv_peer_frame_append_hello (link->buf, client_nonce);
  if (!write_buf (self, link, error) ||
      !expect_message (self, link, KV_PEER_FRAME_HELLO, KV_PEER_HELLO_BODY_SIZE, &hello, error) ||
      !kv_peer_handshake_append_client_auth (link->buf, self->secret, client_nonce, &hello,
                                             self->slot_size, self->digest, "node", error) ||
      !write_buf (self, link, error) ||
      !expect_message (self, link, KV_PEER_FRAME_AUTH, KV_PEER_AUTH_BODY_SIZE, &auth, error) ||
      !kv_peer_handshake_check_server_auth (self->secret, client_nonce, &hello, link->buf->data,
                                            &auth, self->slot_size, self->digest, "node", error))
    return FALSE;
  if (auth.max_keys == 0)
    {
      g_set_error_literal (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                           "the node allows no keys per frame");
      return FALSE;
    }
  link->max_entries = MIN (auth.max_keys, KV_PEER_MAX_KEYS_LIMIT);
  return TRUE;
}

static gboolean
connect_link (KvPeerSubscriber  *self,
              Link              *link,
              GError           **error)
{
  g_autoptr(GSocketClient) client = g_socket_client_new ();
  GSocket *socket;

  link->buf = g_byte_array_new ();
  g_socket_client_set_timeout (client, MAX (1, (self->io_timeout_ms + 999) / 1000));
  /* straight to the node: no system proxy between a router and its fleet */
  g_socket_client_set_enable_proxy (client, FALSE);
  link->socket_conn = g_socket_client_connect (client, self->connectable, self->cancellable, error);
  if (link->socket_conn == NULL)
    return FALSE;
  socket = g_socket_connection_get_socket (link->socket_conn);
  g_socket_set_option (socket, IPPROTO_TCP, TCP_NODELAY, 1, NULL);
  /* bounds the few small writes; reads have their own deadlines */
  g_socket_set_timeout (socket, MAX (1, (self->io_timeout_ms + 999) / 1000));
  if (self->tls)
    {
      GIOStream *tls = g_tls_client_connection_new (G_IO_STREAM (link->socket_conn),
                                                    self->connectable, error);

      if (tls == NULL)
        return FALSE;
      link->stream = tls;
      if (self->tls_database != NULL)
        g_tls_connection_set_database (G_TLS_CONNECTION (tls), self->tls_database);
      if (self->tls_certificate != NULL)
        g_tls_connection_set_certificate (G_TLS_CONNECTION (tls), self->tls_certificate);
      if (!g_tls_connection_handshake (G_TLS_CONNECTION (tls), self->cancellable, error))
        return FALSE;
    }
  else
    link->stream = G_IO_STREAM (g_object_ref (link->socket_conn));
  return handshake (self, link, error);
}

/* Follows the node until the connection fails or the subscriber stops;
 * always returns FALSE with @error set. */
static gboolean
follow (KvPeerSubscriber  *self,
        Link              *link,
        gboolean          *out_connected,
        GError           **error)
{
  KvPeerStreamReader reader;
  guint node;

  g_byte_array_set_size (link->buf, 0);
  kv_peer_stream_append_subscribe (link->buf);
  if (!write_buf (self, link, error))
    return FALSE;
  node = kv_fleet_index_add_node (self->index, self->address);
  if (node == G_MAXUINT)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE,
                   "the index holds no more nodes");
      return FALSE;
    }
  g_atomic_int_set (&self->node, node);
  kv_peer_stream_reader_init (&reader, self->index, node);

  for (;;)
    {
      g_auto(KvPeerStreamMessage) message = { 0 };
      KvPeerFrameHeader header;
      guint32 max_body = kv_peer_stream_max_body (KV_PEER_FRAME_EVENTS, link->max_entries);
      gboolean snapshot_done = FALSE;

      if (!read_frame (self, link, self->silence_timeout_ms, max_body, &header, error))
        return FALSE;
      if (!kv_peer_stream_is_stream_frame (header.type) || header.type == KV_PEER_FRAME_SUBSCRIBE)
        {
          g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BAD_FRAME,
                       "unexpected %s frame in the event stream",
                       kv_peer_frame_type_to_string (header.type));
          return FALSE;
        }
      if (header.body_len > kv_peer_stream_max_body (header.type, link->max_entries))
        {
          g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_LIMIT,
                       "a %s frame of %u bytes is over its limit",
                       kv_peer_frame_type_to_string (header.type), header.body_len);
          return FALSE;
        }
      if (!kv_peer_stream_parse (header.type, link->buf->data, header.body_len,
                                 link->max_entries, &message, error) ||
          !kv_peer_stream_reader_apply (&reader, &message, &snapshot_done, error))
        return FALSE;
      if (header.type == KV_PEER_FRAME_SNAPSHOT_END || header.type == KV_PEER_FRAME_EVENTS)
        __atomic_store_n (&self->applied_seq, reader.last_seq, __ATOMIC_RELEASE);
      if (snapshot_done)
        {
          __atomic_add_fetch (&self->n_snapshots, 1, __ATOMIC_RELAXED);
          if (!*out_connected)
            {
              g_message ("fleet subscriber: following node %s (%" G_GUINT64_FORMAT " chunks at "
                         "sequence %" G_GUINT64_FORMAT ")", self->address, reader.snap_count,
                         reader.last_seq);
              *out_connected = TRUE;
              g_atomic_int_set (&self->connected, TRUE);
            }
        }
    }
}

static void
wait_ms (KvPeerSubscriber *self,
         guint             ms)
{
  gint64 until = g_get_monotonic_time () + (gint64) ms * 1000;

  g_mutex_lock (&self->lock);
  while (!g_cancellable_is_cancelled (self->cancellable))
    {
      gint64 now = g_get_monotonic_time ();

      if (now >= until)
        break;
      /* the index forgets the node on time even while it is away */
      g_mutex_unlock (&self->lock);
      kv_fleet_index_expire (self->index);
      g_mutex_lock (&self->lock);
      g_cond_wait_until (&self->cond, &self->lock, MIN (until, now + 100 * 1000));
    }
  g_mutex_unlock (&self->lock);
}

static gpointer
subscriber_thread (gpointer data)
{
  KvPeerSubscriber *self = data;
  guint backoff = self->reconnect_ms;
  gboolean reported_failure = FALSE;

  while (!g_cancellable_is_cancelled (self->cancellable))
    {
      g_autoptr(GError) error = NULL;
      Link link = { 0 };
      gboolean connected = FALSE;

      if (connect_link (self, &link, &error))
        {
          __atomic_add_fetch (&self->n_connects, 1, __ATOMIC_RELAXED);
          follow (self, &link, &connected, &error);
        }
      link_clear (&link);
      g_atomic_int_set (&self->connected, FALSE);
      if (g_cancellable_is_cancelled (self->cancellable))
        break;
      if (connected)
        {
          g_message ("fleet subscriber: lost node %s: %s; reconnecting", self->address,
                     error->message);
          backoff = self->reconnect_ms;
          reported_failure = FALSE;
        }
      else if (!reported_failure)
        {
          g_message ("fleet subscriber: cannot follow node %s: %s; retrying", self->address,
                     error->message);
          reported_failure = TRUE;
        }
      wait_ms (self, backoff);
      backoff = MIN (backoff * 2, self->reconnect_ms * 8);
    }
  return NULL;
}

/* ---- setup ---------------------------------------------------------------- */

static gboolean
kv_peer_subscriber_initable_init (GInitable     *initable,
                                  GCancellable  *cancellable,
                                  GError       **error)
{
  KvPeerSubscriber *self = KV_PEER_SUBSCRIBER (initable);
  g_autoptr(GError) local_error = NULL;

  if (self->initialized)
    return TRUE;
  if (self->address == NULL || self->index == NULL || self->secret_file == NULL ||
      self->slot_size == 0)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "A fleet subscriber needs address, index, secret-file and slot-size");
      return FALSE;
    }
  self->connectable = g_network_address_parse (self->address, 0, &local_error);
  if (self->connectable == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The node address ‘%s’ is not HOST:PORT: %s", self->address, local_error->message);
      return FALSE;
    }
  self->secret = kv_peer_secret_load (self->secret_file, error);
  if (self->secret == NULL)
    return FALSE;
  if (self->tls)
    {
      if (self->tls_ca_file != NULL)
        {
          self->tls_database = g_tls_file_database_new (self->tls_ca_file, error);
          if (self->tls_database == NULL)
            return FALSE;
        }
      if ((self->tls_cert_file != NULL) != (self->tls_key_file != NULL))
        {
          g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                               "A fleet subscriber needs both tls-cert-file and tls-key-file");
          return FALSE;
        }
      if (self->tls_cert_file != NULL)
        {
          self->tls_certificate = g_tls_certificate_new_from_files (self->tls_cert_file,
                                                                   self->tls_key_file, error);
          if (self->tls_certificate == NULL)
            return FALSE;
        }
    }
  kv_chunk_namespace_digest (self->namespace_, self->slot_size, self->digest);
  self->thread = g_thread_new ("kvtier-fleet-sub", subscriber_thread, self);
  self->initialized = TRUE;
  return TRUE;
}

static void
kv_peer_subscriber_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_peer_subscriber_initable_init;
}

static void
kv_peer_subscriber_dispose (GObject *object)
{
  KvPeerSubscriber *self = KV_PEER_SUBSCRIBER (object);

  g_mutex_lock (&self->lock);
  g_cancellable_cancel (self->cancellable);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  if (self->thread != NULL)
    g_thread_join (g_steal_pointer (&self->thread));

  G_OBJECT_CLASS (kv_peer_subscriber_parent_class)->dispose (object);
}

static void
kv_peer_subscriber_finalize (GObject *object)
{
  KvPeerSubscriber *self = KV_PEER_SUBSCRIBER (object);

  g_free (self->address);
  g_clear_object (&self->index);
  g_free (self->secret_file);
  g_free (self->namespace_);
  g_free (self->tls_ca_file);
  g_free (self->tls_cert_file);
  g_free (self->tls_key_file);
  g_clear_pointer (&self->secret, g_bytes_unref);
  g_clear_object (&self->tls_database);
  g_clear_object (&self->tls_certificate);
  g_clear_object (&self->connectable);
  g_clear_object (&self->cancellable);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);

  G_OBJECT_CLASS (kv_peer_subscriber_parent_class)->finalize (object);
}

static void
kv_peer_subscriber_get_property (GObject    *object,
                                 guint       prop_id,
                                 GValue     *value,
                                 GParamSpec *pspec)
{
  KvPeerSubscriber *self = KV_PEER_SUBSCRIBER (object);

  switch (prop_id)
    {
    case PROP_ADDRESS: g_value_set_string (value, self->address); break;
    case PROP_INDEX: g_value_set_object (value, self->index); break;
    case PROP_SECRET_FILE: g_value_set_string (value, self->secret_file); break;
    case PROP_NAMESPACE: g_value_set_string (value, self->namespace_); break;
    case PROP_SLOT_SIZE: g_value_set_uint64 (value, self->slot_size); break;
    case PROP_TLS: g_value_set_boolean (value, self->tls); break;
    case PROP_TLS_CA_FILE: g_value_set_string (value, self->tls_ca_file); break;
    case PROP_TLS_CERT_FILE: g_value_set_string (value, self->tls_cert_file); break;
    case PROP_TLS_KEY_FILE: g_value_set_string (value, self->tls_key_file); break;
    case PROP_IO_TIMEOUT_MS: g_value_set_uint (value, self->io_timeout_ms); break;
    case PROP_SILENCE_TIMEOUT_MS: g_value_set_uint (value, self->silence_timeout_ms); break;
    case PROP_RECONNECT_MS: g_value_set_uint (value, self->reconnect_ms); break;
    case PROP_NODE: g_value_set_uint (value, (guint) g_atomic_int_get (&self->node)); break;
    case PROP_APPLIED_SEQ:
      g_value_set_uint64 (value, __atomic_load_n (&self->applied_seq, __ATOMIC_ACQUIRE));
      break;
    case PROP_CONNECTED: g_value_set_boolean (value, g_atomic_int_get (&self->connected)); break;
    case PROP_N_CONNECTS:
      g_value_set_uint64 (value, __atomic_load_n (&self->n_connects, __ATOMIC_RELAXED));
      break;
    case PROP_N_SNAPSHOTS:
      g_value_set_uint64 (value, __atomic_load_n (&self->n_snapshots, __ATOMIC_RELAXED));
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
kv_peer_subscriber_set_property (GObject      *object,
                                 guint         prop_id,
                                 const GValue *value,
                                 GParamSpec   *pspec)
{
  KvPeerSubscriber *self = KV_PEER_SUBSCRIBER (object);

  switch (prop_id)
    {
    case PROP_ADDRESS: set_string (&self->address, value); break;
    case PROP_INDEX: g_set_object (&self->index, g_value_get_object (value)); break;
    case PROP_SECRET_FILE: set_string (&self->secret_file, value); break;
    case PROP_NAMESPACE:
      g_free (self->namespace_);
      self->namespace_ = g_value_dup_string (value);
      if (self->namespace_ == NULL)
        self->namespace_ = g_strdup ("default");
      break;
    case PROP_SLOT_SIZE: self->slot_size = g_value_get_uint64 (value); break;
    case PROP_TLS: self->tls = g_value_get_boolean (value); break;
    case PROP_TLS_CA_FILE: set_string (&self->tls_ca_file, value); break;
    case PROP_TLS_CERT_FILE: set_string (&self->tls_cert_file, value); break;
    case PROP_TLS_KEY_FILE: set_string (&self->tls_key_file, value); break;
    case PROP_IO_TIMEOUT_MS: self->io_timeout_ms = g_value_get_uint (value); break;
    case PROP_SILENCE_TIMEOUT_MS: self->silence_timeout_ms = g_value_get_uint (value); break;
    case PROP_RECONNECT_MS: self->reconnect_ms = g_value_get_uint (value); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

#define CONSTRUCT_FLAGS (G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS)
#define READ_FLAGS (G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)

static void
kv_peer_subscriber_class_init (KvPeerSubscriberClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = kv_peer_subscriber_dispose;
  object_class->finalize = kv_peer_subscriber_finalize;
  object_class->get_property = kv_peer_subscriber_get_property;
  object_class->set_property = kv_peer_subscriber_set_property;

  properties[PROP_ADDRESS] =
    g_param_spec_string ("address", NULL, "The node's peer address, HOST:PORT (also its name in the index)",
                         NULL, CONSTRUCT_FLAGS);
  properties[PROP_INDEX] =
    g_param_spec_object ("index", NULL, "The fleet index the node's events go to",
                         KV_TYPE_FLEET_INDEX, CONSTRUCT_FLAGS);
  properties[PROP_SECRET_FILE] =
    g_param_spec_string ("secret-file", NULL, "The nodes' shared secret (16 bytes to 4 KiB, mode 0600)",
                         NULL, CONSTRUCT_FLAGS);
  properties[PROP_NAMESPACE] =
    g_param_spec_string ("namespace", NULL, "The cache namespace of the fleet's nodes",
                         "default", CONSTRUCT_FLAGS);
  properties[PROP_SLOT_SIZE] =
    g_param_spec_uint64 ("slot-size", NULL, "The nodes' chunk size in bytes (their primary slot size)",
                         0, G_MAXUINT64, 0, CONSTRUCT_FLAGS);
  properties[PROP_TLS] =
    g_param_spec_boolean ("tls", NULL, "Whether the node serves over TLS", FALSE, CONSTRUCT_FLAGS);
  properties[PROP_TLS_CA_FILE] =
    g_param_spec_string ("tls-ca-file", NULL, "PEM CA certificates trusted for the node's certificate",
                         NULL, CONSTRUCT_FLAGS);
  properties[PROP_TLS_CERT_FILE] =
    g_param_spec_string ("tls-cert-file", NULL, "PEM client certificate, for mutual TLS",
                         NULL, CONSTRUCT_FLAGS);
  properties[PROP_TLS_KEY_FILE] =
    g_param_spec_string ("tls-key-file", NULL, "The PEM private key of tls-cert-file",
                         NULL, CONSTRUCT_FLAGS);
  properties[PROP_IO_TIMEOUT_MS] =
    g_param_spec_uint ("io-timeout-ms", NULL, "Time to connect, to authenticate and to read one frame",
                       1, G_MAXUINT, 2000, CONSTRUCT_FLAGS);
  properties[PROP_SILENCE_TIMEOUT_MS] =
    g_param_spec_uint ("silence-timeout-ms", NULL,
                       "A node that sends nothing (not even a heartbeat) for this long is reconnected",
                       1, G_MAXUINT, 5000, CONSTRUCT_FLAGS);
  properties[PROP_RECONNECT_MS] =
    g_param_spec_uint ("reconnect-ms", NULL, "The first wait before reconnecting (doubling up to 8 times)",
                       1, G_MAXUINT, 500, CONSTRUCT_FLAGS);
  properties[PROP_NODE] =
    g_param_spec_uint ("node", NULL, "The node's id in the index (G_MAXUINT before it is reached)",
                       0, G_MAXUINT, G_MAXUINT, READ_FLAGS);
  properties[PROP_APPLIED_SEQ] =
    g_param_spec_uint64 ("applied-seq", NULL, "The last sequence number applied to the index",
                         0, G_MAXUINT64, 0, READ_FLAGS);
  properties[PROP_CONNECTED] =
    g_param_spec_boolean ("connected", NULL, "Whether the node's stream is followed now",
                          FALSE, READ_FLAGS);
  properties[PROP_N_CONNECTS] =
    g_param_spec_uint64 ("n-connects", NULL, "Connections made to the node",
                         0, G_MAXUINT64, 0, READ_FLAGS);
  properties[PROP_N_SNAPSHOTS] =
    g_param_spec_uint64 ("n-snapshots", NULL, "Snapshots applied (one per connection, and resyncs)",
                         0, G_MAXUINT64, 0, READ_FLAGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_peer_subscriber_init (KvPeerSubscriber *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->namespace_ = g_strdup ("default");
  self->io_timeout_ms = 2000;
  self->silence_timeout_ms = 5000;
  self->reconnect_ms = 500;
  self->node = G_MAXUINT;
  self->cancellable = g_cancellable_new ();
}
