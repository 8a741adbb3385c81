/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-s3-client.h"

#include <string.h>

#include <curl/curl.h>
#include <glib-unix.h>

#include "kv-s3-connection.h"
#include "kv-s3-sigv4.h"

/* curl's buffers (https): a GET body is copied once from the receive
 * buffer into its slot, a PUT body once from its slot into the upload
 * buffer; large buffers make few callbacks and few system calls per
 * chunk. */
#define RECEIVE_BUFFER_SIZE   (512 * 1024)
#define UPLOAD_BUFFER_SIZE    (512 * 1024)
/* a 2xx reply's body other than a GET's (S3 sends none or a few bytes) */
#define MAX_DISCARDED_BODY    (64 * 1024)
#define RETRY_MAX_BACKOFF_MS  2000

typedef enum {
  OP_IDLE,
  OP_SUBMITTED,       /* on its way to the I/O thread */
  OP_ABORT_PENDING,   /* aborted before it reached the I/O thread */
  OP_WAITING,         /* for a connection */
  OP_RUNNING,         /* in the multi handle */
  OP_BACKOFF,         /* waiting to be sent again */
  OP_DONE,
} OpState;

typedef enum {
  BODY_DEST,          /* a GET's object, into the destination */
  BODY_ERROR,         /* an error reply's body, kept (bounded) */
  BODY_DISCARD,       /* another 2xx reply's body */
  BODY_WRONG_SIZE,    /* aborted: the object is not the destination's length */
  BODY_TOO_LONG,      /* aborted: an error body past its bound */
  BODY_REPLY,         /* kept in the op's reply */
} BodyMode;

struct _KvS3Client
{
  GObject         parent_instance;

  /* configuration, then read-only */
  char           *endpoint;
  char           *bucket;
  char           *region;
  char           *session_token;
  char           *ca_file;
  KvS3Addressing  addressing;
  guint           max_connections;
  guint           connect_timeout_ms;
  guint           reply_timeout_ms;
  guint           max_attempts;
  guint           retry_base_ms;
  char           *host_header;     /* what the Host header says, and is signed */
  char           *base_url;        /* scheme://host_header */
  char           *path_prefix;     /* "/bucket" (path style) or "" */
  /* plain http: requests framed by KvS3Connection, bodies sent and
   * received in place; https goes through curl */
  gboolean        framed;
  char           *connect_host;
  guint16         connect_port;

  GMainContext   *context;
  GMainLoop      *loop;
  GThread        *thread;          /* to join; NULL once joined or let go */
  GThread        *io_thread;       /* which thread it is, for its whole life */

  /* I/O thread only */
  CURLM          *multi;
  GSource        *timer;
  GQueue          waiting;
  GQueue          running;
  guint           n_running;
  GQueue          backoff;
  GPtrArray      *idle_easy;
  GQueue          idle_connections; /* framed: open, kept alive */
  guint           n_connections;    /* framed: idle ones and those of running ops */
  KvS3Signer      signer;
  gboolean        closing;

  /* lock */
  GMutex          lock;
  GCond           cond;
  guint           n_live;          /* submitted, not done */
  gboolean        shut_down;

  KvCounterSet   *counters;
  guint           first_counter;
};

G_DEFINE_FINAL_TYPE (KvS3Client, kv_s3_client, G_TYPE_OBJECT)

G_STATIC_ASSERT (sizeof (((KvS3Op *) NULL)->curl_error) >= CURL_ERROR_SIZE);

static void pump (KvS3Client *self);
static void attempt_start (KvS3Client *self, KvS3Op *op);

static void
count (KvS3Client        *self,
       KvS3ClientCounter  counter,
       guint64            n)
{
  kv_counter_set_add (self->counters, self->first_counter + counter, n);
}

/* ---- ops ----------------------------------------------------------------- */

void
kv_s3_op_init (KvS3Op     *op,
               KvS3Method  method,
               const char *key)
{
  memset (op, 0, sizeof *op);
  op->method = method;
  op->key = g_strdup (key);
  op->content_length = -1;
}

void
kv_s3_op_clear (KvS3Op *op)
{
  g_assert (op->state == OP_IDLE || op->state == OP_DONE);
  g_clear_pointer (&op->key, g_free);
  g_clear_error (&op->error);
  if (op->error_body != NULL)
    g_string_free (op->error_body, TRUE);
  op->error_body = NULL;
  g_clear_pointer (&op->url, g_free);
}

const char *
kv_s3_method_to_string (KvS3Method method)
{
  switch (method)
    {
    case KV_S3_METHOD_GET: return "GET";
    case KV_S3_METHOD_PUT: return "PUT";
    case KV_S3_METHOD_HEAD: return "HEAD";
    case KV_S3_METHOD_DELETE: return "DELETE";
    default: return "?";
    }
}

static gsize
body_total (const KvS3Op *op)
{
  return op->body_len[0] + op->body_len[1];
}

static gsize
dest_total (const KvS3Op *op)
{
  return op->dest_len[0] + op->dest_len[1];
}

char *
kv_s3_client_describe (KvS3Client *self,
                       const char *key)
{
  if (key == NULL)
    return g_strdup_printf ("s3://%s", self->bucket);
  return g_strdup_printf ("s3://%s/%s", self->bucket, key);
}

/* Ends @op: its done runs, then it counts no more. I/O thread. */
static void
finish (KvS3Client  *self,
        KvS3Op      *op,
        KvS3Outcome  outcome,
        GError      *error)
{
  g_assert (op->state != OP_DONE);
  op->state = OP_DONE;
  op->outcome = outcome;
  g_clear_error (&op->error);
  op->error = error;
  op->done (op, op->user_data);
  /* @op may be gone */
  g_mutex_lock (&self->lock);
  self->n_live--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

static GError *
closed_error (KvS3Client *self,
              KvS3Op     *op)
{
  g_autofree char *what = kv_s3_client_describe (self, op->key);

  return g_error_new (G_IO_ERROR, G_IO_ERROR_CLOSED, "S3 %s %s: the client shut down",
                      kv_s3_method_to_string (op->method), what);
}

static GError *
cancelled_error (KvS3Client *self,
                 KvS3Op     *op)
{
  g_autofree char *what = kv_s3_client_describe (self, op->key);

  return g_error_new (G_IO_ERROR, G_IO_ERROR_CANCELLED, "S3 %s %s: cancelled",
                      kv_s3_method_to_string (op->method), what);
}

/* ---- reply bodies -------------------------------------------------------- */

/* What a reply's body is for, from its status and length. */
static void
set_body_mode (KvS3Op *op,
               guint   status,
               gint64  length)
{
  op->status = status;
  op->content_length = length;
  op->body_mode_set = TRUE;
  if (status >= 200 && status < 300)
    {
      if (op->method != KV_S3_METHOD_GET)
        op->body_mode = BODY_DISCARD;
      else if (op->reply != NULL)
        op->body_mode = BODY_REPLY;
      else if (length >= 0 && (guint64) length != dest_total (op))
        op->body_mode = BODY_WRONG_SIZE;
      else
        op->body_mode = BODY_DEST;
    }
  else
    {
      if (op->error_body == NULL)
        op->error_body = g_string_sized_new (512);
      op->body_mode = BODY_ERROR;
    }
}

static void
choose_body_mode (KvS3Op *op)
{
  long status = 0;
  curl_off_t length = -1;

  curl_easy_getinfo (op->easy, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_getinfo (op->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
  set_body_mode (op, status, length);
}

/* @n bytes of a GET's object landed in place at op->offset (within one
 * of its destination buffers). */
static void
dest_landed (KvS3Op *op,
             gsize   n)
{
  guint part = op->offset < op->dest_len[0] ? 0 : 1;
  gsize at = part == 0 ? op->offset : op->offset - op->dest_len[0];

  /* hashed while the piece is still in this core's cache */
  if (part == 1 && op->dest_hasher != NULL)
    kv_chunk_hasher_update (op->dest_hasher, op->dest[1] + at, n);
  op->offset += n;
  count (op->client, KV_S3_CLIENT_BYTES_RECEIVED, n);
}

/* The reply's body: a GET's object lands in its destination; error bodies
 * are kept up to their bound; anything longer than it may be fails the
 * attempt. FALSE: refused (the body mode says why). */
static gboolean
take_body_bytes (KvS3Op       *op,
                 const guint8 *data,
                 gsize         n)
{
  switch (op->body_mode)
    {
    case BODY_DEST:
      {
        gsize done = 0;

        if (op->offset + n > dest_total (op))
          {
            /* no length announced (chunked): at least this long */
            if (op->content_length < 0)
              op->content_length = op->offset + n;
            op->body_mode = BODY_WRONG_SIZE;
            return FALSE;
          }
        while (done < n)
          {
            guint part = op->offset < op->dest_len[0] ? 0 : 1;
            gsize at = part == 0 ? op->offset : op->offset - op->dest_len[0];
            gsize len = MIN (n - done, op->dest_len[part] - at);

            memcpy (op->dest[part] + at, data + done, len);
            dest_landed (op, len);
            done += len;
          }
        return TRUE;
      }
    case BODY_ERROR:
      if (op->error_body->len + n > KV_S3_MAX_ERROR_BODY)
        {
          op->body_mode = BODY_TOO_LONG;
          return FALSE;
        }
      g_string_append_len (op->error_body, (const char *) data, n);
      return TRUE;
    case BODY_REPLY:
      if (op->reply->len + n > op->reply_max)
        {
          op->body_mode = BODY_TOO_LONG;
          return FALSE;
        }
      g_string_append_len (op->reply, (const char *) data, n);
      count (op->client, KV_S3_CLIENT_BYTES_RECEIVED, n);
      return TRUE;
    case BODY_DISCARD:
      op->offset += n;
      if (op->offset > MAX_DISCARDED_BODY)
        {
          op->body_mode = BODY_TOO_LONG;
          return FALSE;
        }
      return TRUE;
    default:
      return FALSE;
    }
}

/* ---- curl callbacks (https) ---------------------------------------------- */

/* curl's copy of the body, from its receive buffer. */
static size_t
write_cb (char   *data,
          size_t  size,
          size_t  nmemb,
          void   *user_data)
{
  KvS3Op *op = user_data;
  gsize n = size * nmemb;

  if (!op->body_mode_set)
    choose_body_mode (op);
  return take_body_bytes (op, (const guint8 *) data, n) ? n : 0;
}

/* A PUT's body, copied once from its buffers (the primary slot) into
 * curl's upload buffer. */
static size_t
read_cb (char   *buffer,
         size_t  size,
         size_t  nitems,
         void   *user_data)
{
  KvS3Op *op = user_data;
  KvS3Client *self = op->client;
  gsize room = size * nitems;
  gsize done = 0;

  if (op->cancelled != NULL && g_atomic_int_get (op->cancelled))
    return CURL_READFUNC_ABORT;
  while (done < room && op->offset < body_total (op))
    {
      guint part = op->offset < op->body_len[0] ? 0 : 1;
      gsize at = part == 0 ? op->offset : op->offset - op->body_len[0];
      gsize len = MIN (room - done, op->body_len[part] - at);

      memcpy (buffer + done, op->body[part] + at, len);
      done += len;
      op->offset += len;
    }
  count (self, KV_S3_CLIENT_BYTES_SENT, done);
  return done;
}

/* curl rewinds a body it must send again (a reused connection that had
 * died). */
static int
seek_cb (void       *user_data,
         curl_off_t  offset,
         int         origin)
{
  KvS3Op *op = user_data;

  if (origin != SEEK_SET || offset < 0 || (guint64) offset > body_total (op))
    return CURL_SEEKFUNC_CANTSEEK;
  op->offset = offset;
  return CURL_SEEKFUNC_OK;
}

/* ---- the multi handle on the main context -------------------------------- */

static void process_done (KvS3Client *self);

typedef struct
{
  KvS3Client *client;
  GSource    *source;
} SocketWatch;

static gboolean
socket_ready (gint         fd,
              GIOCondition condition,
              gpointer     user_data)
{
  KvS3Client *self = user_data;
  int flags = 0;
  int running = 0;

  if (condition & G_IO_IN)
    flags |= CURL_CSELECT_IN;
  if (condition & G_IO_OUT)
    flags |= CURL_CSELECT_OUT;
  if (condition & (G_IO_ERR | G_IO_HUP))
    flags |= CURL_CSELECT_ERR;
  /* may remove this very source (socket_cb), which the context holds
   * while it dispatches */
  curl_multi_socket_action (self->multi, fd, flags, &running);
  process_done (self);
  return G_SOURCE_CONTINUE;
}

static void
socket_watch_free (SocketWatch *watch)
{
  if (watch->source != NULL)
    {
      g_source_destroy (watch->source);
      g_source_unref (watch->source);
    }
  g_free (watch);
}

static int
socket_cb (CURL          *easy,
           curl_socket_t  fd,
           int            what,
           void          *user_data,
           void          *socket_data)
{
  KvS3Client *self = user_data;
  SocketWatch *watch = socket_data;
  GIOCondition condition = 0;

  if (what == CURL_POLL_REMOVE)
    {
      if (watch != NULL)
        {
          curl_multi_assign (self->multi, fd, NULL);
          socket_watch_free (watch);
        }
      return 0;
    }
  if (watch == NULL)
    {
      watch = g_new0 (SocketWatch, 1);
      watch->client = self;
      curl_multi_assign (self->multi, fd, watch);
    }
  if (watch->source != NULL)
    {
      g_source_destroy (watch->source);
      g_clear_pointer (&watch->source, g_source_unref);
    }
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
    condition |= G_IO_IN;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
    condition |= G_IO_OUT;
  watch->source = g_unix_fd_source_new (fd, condition | G_IO_ERR | G_IO_HUP);
  g_source_set_callback (watch->source, (GSourceFunc) (void (*) (void)) socket_ready, self, NULL);
  g_source_attach (watch->source, self->context);
  return 0;
}

static gboolean
timer_fired (gpointer user_data)
{
  KvS3Client *self = user_data;
  int running = 0;

  /* curl may set the next timer from inside socket_action */
  g_clear_pointer (&self->timer, g_source_unref);
  curl_multi_socket_action (self->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  process_done (self);
  return G_SOURCE_REMOVE;
}

static int
timer_cb (CURLM *multi,
          long   timeout_ms,
          void  *user_data)
{
  KvS3Client *self = user_data;

  if (self->timer != NULL)
    {
      g_source_destroy (self->timer);
      g_clear_pointer (&self->timer, g_source_unref);
    }
  if (timeout_ms >= 0)
    {
      self->timer = g_timeout_source_new (timeout_ms);
      g_source_set_callback (self->timer, timer_fired, self, NULL);
      g_source_attach (self->timer, self->context);
    }
  return 0;
}

/* ---- attempts ------------------------------------------------------------ */

static void
release_easy (KvS3Client *self,
              KvS3Op     *op)
{
  if (op->easy == NULL)
    return;
  /* nothing of the op's survives in the handle */
  curl_easy_reset (op->easy);
  g_ptr_array_add (self->idle_easy, op->easy);
  op->easy = NULL;
  g_clear_pointer ((struct curl_slist **) &op->headers, curl_slist_free_all);
}

static gboolean
retry_fired (gpointer user_data)
{
  KvS3Op *op = user_data;
  KvS3Client *self = op->client;

  g_clear_pointer (&op->retry_timer, g_source_unref);
  g_queue_unlink (&self->backoff, &op->link);
  op->state = OP_WAITING;
  g_queue_push_tail_link (&self->waiting, &op->link);
  pump (self);
  return G_SOURCE_REMOVE;
}

/* Sends @op again after a backoff, if its deadline leaves the time;
 * FALSE when it does not. */
static gboolean
schedule_retry (KvS3Client *self,
                KvS3Op     *op)
{
  guint shift = MIN (op->attempts - 1, 10u);
  guint backoff_ms = MIN ((guint64) self->retry_base_ms << shift, RETRY_MAX_BACKOFF_MS);
  gint64 now = g_get_monotonic_time ();

  /* full jitter over the upper half: many clients do not retry in step */
  backoff_ms = backoff_ms / 2 + g_random_int_range (0, backoff_ms / 2 + 1);
  if (op->attempts >= self->max_attempts || self->closing)
    return FALSE;
  /* another attempt must have the time the last one took, after its
   * backoff: one that cannot finish would only trade the store's answer
   * for a timeout */
  if (op->deadline > 0 &&
      now + (gint64) backoff_ms * 1000 + (now - op->attempt_start) >= op->deadline)
    return FALSE;
  count (self, KV_S3_CLIENT_RETRIES, 1);
  op->state = OP_BACKOFF;
  g_queue_push_tail_link (&self->backoff, &op->link);
  op->retry_timer = g_timeout_source_new (backoff_ms);
  g_source_set_callback (op->retry_timer, retry_fired, op, NULL);
  g_source_attach (op->retry_timer, self->context);
  return TRUE;
}

/* How an attempt's transport ended, whichever carried it. */
typedef struct
{
  gboolean      failed;      /* no whole reply */
  gboolean      cancelled;   /* its op's cancel flag stopped the upload */
  GIOErrorEnum  code;
  gboolean      timed_out;
  gboolean      transient;   /* another attempt, on another connection, may work */
  const char   *detail;
} Transport;

static GError *
transport_error (KvS3Client      *self,
                 KvS3Op          *op,
                 const Transport *transport)
{
  g_autofree char *what = kv_s3_client_describe (self, op->key);

  return g_error_new (G_IO_ERROR, transport->code, "S3 %s %s: %s (%s)", kv_s3_method_to_string (op->method),
                      what, transport->detail, self->endpoint);
}

/* An attempt ended: the op's outcome, or another attempt. */
static void
attempt_judge (KvS3Client      *self,
               KvS3Op          *op,
               const Transport *transport)
{
  g_autofree char *what = kv_s3_client_describe (self, op->key);
  GError *error = NULL;
  KvS3Outcome outcome = KV_S3_OP_FAILED;
  gboolean transient = FALSE;

  if (op->body_mode_set && op->body_mode == BODY_WRONG_SIZE)
    outcome = KV_S3_OP_WRONG_SIZE;
  else if (op->body_mode_set && op->body_mode == BODY_TOO_LONG)
    error = g_error_new (KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY,
                         "S3 %s %s: HTTP %u with a body longer than %u bytes",
                         kv_s3_method_to_string (op->method), what, op->status,
                         op->status >= 300 ? KV_S3_MAX_ERROR_BODY :
                         op->reply != NULL ? (guint) op->reply_max : MAX_DISCARDED_BODY);
  else if (transport->cancelled && op->cancelled != NULL && g_atomic_int_get (op->cancelled))
    error = cancelled_error (self, op);
  else if (transport->failed)
    {
      count (self, KV_S3_CLIENT_TRANSPORT_ERRORS, 1);
      if (transport->timed_out)
        count (self, KV_S3_CLIENT_TIMEOUTS, 1);
      error = transport_error (self, op, transport);
      transient = transport->transient;
    }
  else if (op->status >= 200 && op->status < 300)
    {
      if (op->method == KV_S3_METHOD_GET && op->reply == NULL && op->offset != dest_total (op))
        outcome = KV_S3_OP_WRONG_SIZE;
      else
        outcome = KV_S3_OP_OK;
    }
  else
    {
      gsize len = op->error_body != NULL ? op->error_body->len : 0;

      error = kv_s3_error_new_for_reply (op->status, kv_s3_method_to_string (op->method),
                                         self->bucket, op->key,
                                         len > 0 ? op->error_body->str : NULL, len);
      if (op->status == 404)
        outcome = KV_S3_OP_NOT_FOUND;
      else
        {
          count (self, KV_S3_CLIENT_ERROR_REPLIES, 1);
          transient = kv_s3_error_is_transient (error);
        }
    }

  if (outcome == KV_S3_OP_WRONG_SIZE && op->content_length < 0)
    op->content_length = op->offset;
  if (transient && schedule_retry (self, op))
    {
      /* kept while it waits: if its deadline passes before it is sent
       * again (a timer late on a loaded machine), this is the answer */
      g_clear_error (&op->error);
      op->error = error;
      return;
    }
  finish (self, op, outcome, error);
}

/* An attempt through curl ended (curl's result). */
static void
attempt_done (KvS3Client *self,
              KvS3Op     *op,
              CURLcode    result)
{
  Transport transport = { .failed = result != CURLE_OK, .code = G_IO_ERROR_FAILED };
  long status = 0;

  g_queue_unlink (&self->running, &op->link);
  curl_multi_remove_handle (self->multi, op->easy);
  self->n_running--;
  curl_easy_getinfo (op->easy, CURLINFO_RESPONSE_CODE, &status);
  if (!op->body_mode_set && status != 0)
    choose_body_mode (op);
  release_easy (self, op);

  switch (result)
    {
    case CURLE_OPERATION_TIMEDOUT: transport.code = G_IO_ERROR_TIMED_OUT; break;
    case CURLE_COULDNT_CONNECT: transport.code = G_IO_ERROR_CONNECTION_REFUSED; break;
    case CURLE_COULDNT_RESOLVE_HOST: transport.code = G_IO_ERROR_HOST_NOT_FOUND; break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CACERT_BADFILE: transport.code = G_IO_ERROR_CONNECTION_REFUSED; break;
    default: break;
    }
  transport.cancelled = result == CURLE_ABORTED_BY_CALLBACK;
  transport.timed_out = result == CURLE_OPERATION_TIMEDOUT;
  /* the connection broke under a request that may be sent again (all of
   * ours are idempotent), or its reply did not parse (bytes a server left
   * on a kept-alive connection): curl closed it, the next attempt has
   * another; a refused connect or a reply past its time is not retried:
   * the deadline would be spent on it */
  transport.transient = result == CURLE_GOT_NOTHING || result == CURLE_SEND_ERROR ||
                        result == CURLE_RECV_ERROR || result == CURLE_PARTIAL_FILE ||
                        result == CURLE_WEIRD_SERVER_REPLY || result == CURLE_UNSUPPORTED_PROTOCOL;
  transport.detail = op->curl_error[0] != '\0' ? op->curl_error : curl_easy_strerror (result);
  attempt_judge (self, op, &transport);
}

static void
process_done (KvS3Client *self)
{
  CURLMsg *message;
  int left = 0;

  while ((message = curl_multi_info_read (self->multi, &left)) != NULL)
    if (message->msg == CURLMSG_DONE)
      {
        KvS3Op *op = NULL;

        curl_easy_getinfo (message->easy_handle, CURLINFO_PRIVATE, (char **) &op);
        g_assert (op != NULL && op->easy == message->easy_handle);
        attempt_done (self, op, message->data.result);
      }
  pump (self);
}

/* Signs @op now (SigV4: the date is part of the signature): its request
 * target (path and query, as sent, in @out_target when not NULL; op->url,
 * the whole URL) and its header lines ("name: value"), the body's
 * included. */
static GPtrArray *
sign_request (KvS3Client  *self,
              KvS3Op      *op,
              char       **out_target)
{
  g_autofree char *target = NULL;
  g_autofree char *encoded_key = op->key != NULL ? kv_s3_uri_encode (op->key, FALSE) : NULL;
  g_autofree char *uri = NULL;
  g_autofree char *query = op->query != NULL ? kv_s3_canonical_query_pairs (op->query) : NULL;
  g_autofree char *authorization = NULL;
  const char *method = kv_s3_method_to_string (op->method);
  gboolean has_body = op->method == KV_S3_METHOD_PUT && body_total (op) > 0;
  const char *payload_hash = has_body ? KV_S3_UNSIGNED_PAYLOAD : KV_S3_EMPTY_SHA256;
  char amz_date[KV_S3_AMZ_DATE_LEN];
  KvS3Header headers[4];
  GPtrArray *lines = g_ptr_array_new_with_free_func (g_free);
  guint n = 0;

  if (encoded_key != NULL)
    uri = g_strdup_printf ("%s/%s", self->path_prefix, encoded_key);
  else
    uri = g_strdup (self->path_prefix[0] != '\0' ? self->path_prefix : "/");
  /* the canonical query is encoded as the URL's must be */
  target = g_strconcat (uri, query != NULL && query[0] != '\0' ? "?" : "", query, NULL);
  g_free (op->url);
  op->url = g_strconcat (self->base_url, target, NULL);
  if (out_target != NULL)
    *out_target = g_steal_pointer (&target);

  kv_s3_amz_date (g_get_real_time () / G_USEC_PER_SEC, amz_date);
  headers[n++] = (KvS3Header) { "host", self->host_header };
  headers[n++] = (KvS3Header) { "x-amz-content-sha256", payload_hash };
  headers[n++] = (KvS3Header) { "x-amz-date", amz_date };
  if (self->session_token != NULL)
    headers[n++] = (KvS3Header) { "x-amz-security-token", self->session_token };
  authorization = kv_s3_signer_authorization (&self->signer, method, uri, query != NULL ? query : "",
                                              headers, n,
                                              payload_hash, amz_date);
  for (guint i = 0; i < n; i++)
    g_ptr_array_add (lines, g_strdup_printf ("%s: %s", headers[i].name, headers[i].value));
  g_ptr_array_add (lines, g_strdup_printf ("Authorization: %s", authorization));
  if (has_body)
    g_ptr_array_add (lines, g_strdup ("Content-Type: application/octet-stream"));
  return lines;
}

/* Signs @op and sets its handle up for one attempt. */
static void
setup_easy (KvS3Client *self,
            KvS3Op     *op,
            long        timeout_ms)
{
  /* libcurl frames the request from op->url */
  g_autoptr(GPtrArray) lines = sign_request (self, op, NULL);
  CURL *easy;

  for (guint i = 0; i < lines->len; i++)
    {
      op->headers = curl_slist_append (op->headers, lines->pdata[i]);
      g_assert (op->headers != NULL);
    }
  /* no 100-continue round trip before a body */
  op->headers = curl_slist_append (op->headers, "Expect:");

  if (self->idle_easy->len > 0)
    easy = g_ptr_array_steal_index_fast (self->idle_easy, self->idle_easy->len - 1);
  else
    easy = curl_easy_init ();
  g_assert (easy != NULL);
  op->easy = easy;
  curl_easy_setopt (easy, CURLOPT_URL, op->url);
  curl_easy_setopt (easy, CURLOPT_PRIVATE, op);
  op->curl_error[0] = '\0';
  curl_easy_setopt (easy, CURLOPT_ERRORBUFFER, op->curl_error);
  curl_easy_setopt (easy, CURLOPT_HTTPHEADER, op->headers);
  curl_easy_setopt (easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
  curl_easy_setopt (easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt (easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt (easy, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt (easy, CURLOPT_CONNECTTIMEOUT_MS, (long) self->connect_timeout_ms);
  curl_easy_setopt (easy, CURLOPT_BUFFERSIZE, (long) RECEIVE_BUFFER_SIZE);
  curl_easy_setopt (easy, CURLOPT_WRITEFUNCTION, write_cb);
  curl_easy_setopt (easy, CURLOPT_WRITEDATA, op);
  curl_easy_setopt (easy, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt (easy, CURLOPT_SSL_VERIFYHOST, 2L);
  if (self->ca_file != NULL)
    curl_easy_setopt (easy, CURLOPT_CAINFO, self->ca_file);
  switch (op->method)
    {
    case KV_S3_METHOD_GET:
      break;
    case KV_S3_METHOD_HEAD:
      curl_easy_setopt (easy, CURLOPT_NOBODY, 1L);
      break;
    case KV_S3_METHOD_DELETE:
      curl_easy_setopt (easy, CURLOPT_CUSTOMREQUEST, "DELETE");
      break;
    case KV_S3_METHOD_PUT:
      curl_easy_setopt (easy, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt (easy, CURLOPT_UPLOAD_BUFFERSIZE, (long) UPLOAD_BUFFER_SIZE);
      curl_easy_setopt (easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t) body_total (op));
      curl_easy_setopt (easy, CURLOPT_READFUNCTION, read_cb);
      curl_easy_setopt (easy, CURLOPT_READDATA, op);
      curl_easy_setopt (easy, CURLOPT_SEEKFUNCTION, seek_cb);
      curl_easy_setopt (easy, CURLOPT_SEEKDATA, op);
      break;
    default:
      g_assert_not_reached ();
    }
}

/* ---- framed attempts (plain http) ---------------------------------------- */

static gboolean
framed_cancelled (gpointer data)
{
  KvS3Op *op = data;

  return op->cancelled != NULL && g_atomic_int_get (op->cancelled);
}

static void
framed_request_sent (gpointer data)
{
  KvS3Op *op = data;

  if (op->method == KV_S3_METHOD_PUT)
    count (op->client, KV_S3_CLIENT_BYTES_SENT, body_total (op));
}

static gboolean
framed_reply_head (gpointer data,
                   guint    status,
                   gint64   content_length)
{
  KvS3Op *op = data;

  set_body_mode (op, status, content_length);
  return op->body_mode != BODY_WRONG_SIZE;
}

/* A GET's object lands straight in its destination, a piece at a time. */
static guint8 *
framed_body_place (gpointer  data,
                   gsize    *len)
{
  KvS3Op *op = data;
  guint part;
  gsize at;

  if (op->body_mode != BODY_DEST || op->offset >= dest_total (op))
    return NULL;
  part = op->offset < op->dest_len[0] ? 0 : 1;
  at = part == 0 ? op->offset : op->offset - op->dest_len[0];
  *len = op->dest_len[part] - at;
  return op->dest[part] + at;
}

static gboolean
framed_body_bytes (gpointer      data,
                   const guint8 *bytes,
                   gsize         n)
{
  KvS3Op *op = data;

  if (bytes == NULL)
    {
      dest_landed (op, n);
      return TRUE;
    }
  return take_body_bytes (op, bytes, n);
}

static void
framed_done (gpointer            data,
             KvS3ExchangeResult  result,
             const char         *detail)
{
  KvS3Op *op = data;
  KvS3Client *self = op->client;
  KvS3Connection *connection = g_steal_pointer (&op->connection);
  Transport transport = { .failed = result != KV_S3_EXCHANGE_OK, .code = G_IO_ERROR_FAILED, .detail = detail };

  g_queue_unlink (&self->running, &op->link);
  self->n_running--;
  if (result == KV_S3_EXCHANGE_OK && kv_s3_connection_is_reusable (connection))
    g_queue_push_tail (&self->idle_connections, connection);
  else
    {
      kv_s3_connection_free (connection);
      self->n_connections--;
    }
  switch (result)
    {
    case KV_S3_EXCHANGE_REFUSED:
      transport.code = G_IO_ERROR_CONNECTION_REFUSED;
      break;
    case KV_S3_EXCHANGE_TIMED_OUT:
      transport.code = G_IO_ERROR_TIMED_OUT;
      transport.timed_out = TRUE;
      break;
    case KV_S3_EXCHANGE_NOTHING:
    case KV_S3_EXCHANGE_LOST:
    case KV_S3_EXCHANGE_BAD_REPLY:
      /* as curl's: a request may be sent again (all of ours are
       * idempotent) on another connection */
      transport.transient = TRUE;
      break;
    case KV_S3_EXCHANGE_ABORTED:
      transport.cancelled = TRUE;
      break;
    case KV_S3_EXCHANGE_OK:
    default:
      break;
    }
  attempt_judge (self, op, &transport);
  pump (self);
}

static const KvS3ExchangeSink framed_sink = {
  .cancelled = framed_cancelled,
  .request_sent = framed_request_sent,
  .reply_head = framed_reply_head,
  .body_place = framed_body_place,
  .body_bytes = framed_body_bytes,
  .done = framed_done,
};

/* An idle connection that is still good, else a new one (the running ops
 * hold the others: never more than max-connections in all). */
static KvS3Connection *
take_connection (KvS3Client *self)
{
  KvS3Connection *connection;

  while ((connection = g_queue_pop_tail (&self->idle_connections)) != NULL)
    {
      if (kv_s3_connection_is_reusable (connection))
        return connection;
      kv_s3_connection_free (connection);
      self->n_connections--;
    }
  self->n_connections++;
  return kv_s3_connection_new (self->context, self->connect_host, self->connect_port,
                               self->connect_timeout_ms);
}

/* Signs @op and sends it on a connection of the pool. */
static void
framed_start (KvS3Client *self,
              KvS3Op     *op,
              long        timeout_ms)
{
  g_autofree char *target = NULL;
  g_autoptr(GPtrArray) lines = sign_request (self, op, &target);
  g_autoptr(GString) head = g_string_sized_new (1024);
  const guint8 *body[2] = { NULL, NULL };
  gsize body_len[2] = { 0, 0 };

  g_string_append_printf (head, "%s %s HTTP/1.1\r\n", kv_s3_method_to_string (op->method), target);
  for (guint i = 0; i < lines->len; i++)
    g_string_append_printf (head, "%s\r\n", (const char *) lines->pdata[i]);
  if (op->method == KV_S3_METHOD_PUT)
    {
      g_string_append_printf (head, "Content-Length: %" G_GSIZE_FORMAT "\r\n", body_total (op));
      for (guint i = 0; i < 2; i++)
        {
          body[i] = op->body[i];
          body_len[i] = op->body_len[i];
        }
    }
  g_string_append (head, "\r\n");
  op->connection = take_connection (self);
  kv_s3_connection_exchange (op->connection, head->str, head->len, body, body_len,
                             op->method == KV_S3_METHOD_HEAD,
                             op->attempt_start + (gint64) timeout_ms * 1000, &framed_sink, op);
}

/* Ends @op's attempt under way without its reply. */
static void
attempt_drop (KvS3Client *self,
              KvS3Op     *op)
{
  g_queue_unlink (&self->running, &op->link);
  self->n_running--;
  if (op->connection != NULL)
    {
      kv_s3_connection_free (g_steal_pointer (&op->connection));
      self->n_connections--;
    }
  else
    {
      curl_multi_remove_handle (self->multi, op->easy);
      release_easy (self, op);
    }
}

static void
attempt_start (KvS3Client *self,
               KvS3Op     *op)
{
  gint64 now = g_get_monotonic_time ();
  long timeout_ms = self->reply_timeout_ms;

  if (op->prepare != NULL && !op->prepare (op, op->user_data))
    {
      finish (self, op, KV_S3_OP_FAILED, cancelled_error (self, op));
      return;
    }
  if (op->deadline > 0)
    {
      g_autofree char *what = NULL;

      if (now >= op->deadline && op->error != NULL)
        {
          /* the store's last answer, not a timeout of the client's own */
          finish (self, op, KV_S3_OP_FAILED, g_steal_pointer (&op->error));
          return;
        }
      if (now >= op->deadline)
        {
          what = kv_s3_client_describe (self, op->key);
          finish (self, op, KV_S3_OP_FAILED,
                  g_error_new (G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                               "S3 %s %s: its deadline passed before it could be sent%s",
                               kv_s3_method_to_string (op->method), what,
                               op->attempts > 0 ? " again" : ""));
          return;
        }
      timeout_ms = MIN (timeout_ms, (op->deadline - now) / 1000 + 1);
    }
  if (op->first_start == 0)
    op->first_start = now;
  op->attempt_start = now;
  op->attempts++;
  op->offset = 0;
  if (op->dest_hasher != NULL)
    kv_chunk_hasher_reset (op->dest_hasher);
  op->status = 0;
  op->content_length = -1;
  op->body_mode_set = FALSE;
  if (op->error_body != NULL)
    g_string_truncate (op->error_body, 0);
  if (op->reply != NULL)
    g_string_truncate (op->reply, 0);
  g_clear_error (&op->error);
  count (self, KV_S3_CLIENT_REQUESTS, 1);
  op->state = OP_RUNNING;
  g_queue_push_tail_link (&self->running, &op->link);
  self->n_running++;
  if (self->framed)
    framed_start (self, op, MAX (timeout_ms, 1));
  else
    {
      setup_easy (self, op, MAX (timeout_ms, 1));
      curl_multi_add_handle (self->multi, op->easy);
    }
}

/* Starts what the connection bound allows. */
static void
pump (KvS3Client *self)
{
  while (self->waiting.head != NULL && self->n_running < self->max_connections)
    {
      GList *link = g_queue_pop_head_link (&self->waiting);

      attempt_start (self, link->data);
    }
}

static gboolean
op_start (gpointer user_data)
{
  KvS3Op *op = user_data;
  KvS3Client *self = op->client;

  if (op->state == OP_ABORT_PENDING)
    {
      finish (self, op, KV_S3_OP_FAILED, cancelled_error (self, op));
      return G_SOURCE_REMOVE;
    }
  if (self->closing)
    {
      finish (self, op, KV_S3_OP_FAILED, closed_error (self, op));
      return G_SOURCE_REMOVE;
    }
  op->state = OP_WAITING;
  op->link.data = op;
  g_queue_push_tail_link (&self->waiting, &op->link);
  pump (self);
  return G_SOURCE_REMOVE;
}

void
kv_s3_client_submit (KvS3Client *self,
                     KvS3Op     *op)
{
  gboolean closed;

  g_return_if_fail (KV_IS_S3_CLIENT (self));
  g_return_if_fail (op->done != NULL);
  g_return_if_fail (op->state == OP_IDLE || op->state == OP_DONE);

  op->client = self;
  op->outcome = KV_S3_OP_PENDING;
  op->attempts = 0;
  op->first_start = 0;
  g_clear_error (&op->error);
  op->state = OP_SUBMITTED;
  g_mutex_lock (&self->lock);
  closed = self->shut_down;
  if (!closed)
    self->n_live++;
  g_mutex_unlock (&self->lock);
  if (closed)
    {
      op->state = OP_DONE;
      op->outcome = KV_S3_OP_FAILED;
      op->error = closed_error (self, op);
      op->done (op, op->user_data);
      return;
    }
  g_main_context_invoke (self->context, op_start, op);
}

void
kv_s3_client_abort (KvS3Client *self,
                    KvS3Op     *op)
{
  g_return_if_fail (kv_s3_client_is_io_thread (self));

  switch (op->state)
    {
    case OP_SUBMITTED:
      op->state = OP_ABORT_PENDING;
      break;
    case OP_WAITING:
      g_queue_unlink (&self->waiting, &op->link);
      finish (self, op, KV_S3_OP_FAILED, cancelled_error (self, op));
      break;
    case OP_BACKOFF:
      g_source_destroy (op->retry_timer);
      g_clear_pointer (&op->retry_timer, g_source_unref);
      g_queue_unlink (&self->backoff, &op->link);
      finish (self, op, KV_S3_OP_FAILED, cancelled_error (self, op));
      break;
    case OP_RUNNING:
      attempt_drop (self, op);
      finish (self, op, KV_S3_OP_FAILED, cancelled_error (self, op));
      pump (self);
      break;
    default:
      break;
    }
}

typedef struct
{
  GMutex    lock;
  GCond     cond;
  gboolean  done;
} RunWait;

static void
run_done (KvS3Op   *op,
          gpointer  user_data)
{
  RunWait *wait = user_data;

  g_mutex_lock (&wait->lock);
  wait->done = TRUE;
  g_cond_signal (&wait->cond);
  g_mutex_unlock (&wait->lock);
}

void
kv_s3_client_run (KvS3Client *self,
                  KvS3Op     *op)
{
  RunWait wait = { 0 };

  g_return_if_fail (!kv_s3_client_is_io_thread (self));

  g_mutex_init (&wait.lock);
  g_cond_init (&wait.cond);
  op->done = run_done;
  op->user_data = &wait;
  kv_s3_client_submit (self, op);
  g_mutex_lock (&wait.lock);
  while (!wait.done)
    g_cond_wait (&wait.cond, &wait.lock);
  g_mutex_unlock (&wait.lock);
  g_mutex_clear (&wait.lock);
  g_cond_clear (&wait.cond);
}

void
kv_s3_client_invoke (KvS3Client  *self,
                     GSourceFunc  func,
                     gpointer     data)
{
  g_main_context_invoke (self->context, func, data);
}

gboolean
kv_s3_client_invoke_full (KvS3Client     *self,
                          GSourceFunc     func,
                          gpointer        data,
                          GDestroyNotify  destroy)
{
  if (kv_s3_client_is_io_thread (self))
    {
      func (data);
      if (destroy != NULL)
        destroy (data);
      return TRUE;
    }
  /* attached under the lock: shutdown, which sets shut_down under it,
   * quits the loop only after every source attached before */
  g_mutex_lock (&self->lock);
  if (self->shut_down)
    {
      g_mutex_unlock (&self->lock);
      return FALSE;
    }
  g_main_context_invoke_full (self->context, G_PRIORITY_DEFAULT, func, data, destroy);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

gboolean
kv_s3_client_is_io_thread (KvS3Client *self)
{
  return self->io_thread != NULL && g_thread_self () == self->io_thread;
}

guint64
kv_s3_client_get_counter (KvS3Client        *self,
                          KvS3ClientCounter  counter)
{
  g_return_val_if_fail (counter < KV_S3_CLIENT_N_COUNTERS, 0);
  return kv_counter_set_get (self->counters, self->first_counter + counter);
}

const char *
kv_s3_client_get_bucket (KvS3Client *self)
{
  return self->bucket;
}

/* ---- the I/O thread ------------------------------------------------------ */

static gpointer
io_thread_main (gpointer user_data)
{
  KvS3Client *self = user_data;

  g_main_context_push_thread_default (self->context);
  g_main_loop_run (self->loop);
  /* curl closes its cached connections (and says so through socket_cb) */
  curl_multi_cleanup (self->multi);
  self->multi = NULL;
  for (guint i = 0; i < self->idle_easy->len; i++)
    curl_easy_cleanup (self->idle_easy->pdata[i]);
  g_ptr_array_set_size (self->idle_easy, 0);
  g_queue_clear_full (&self->idle_connections, (GDestroyNotify) kv_s3_connection_free);
  self->n_connections = 0;
  if (self->timer != NULL)
    {
      g_source_destroy (self->timer);
      g_clear_pointer (&self->timer, g_source_unref);
    }
  while (g_main_context_pending (self->context))
    g_main_context_iteration (self->context, FALSE);
  g_main_context_pop_thread_default (self->context);
  /* the thread's reference: the client outlives a shutdown from one of
   * its callbacks until here */
  g_object_unref (self);
  return NULL;
}

static gboolean
close_all (gpointer user_data)
{
  KvS3Client *self = user_data;
  GList *link;

  self->closing = TRUE;
  while ((link = g_queue_pop_head_link (&self->waiting)) != NULL)
    {
      KvS3Op *op = link->data;

      finish (self, op, KV_S3_OP_FAILED, closed_error (self, op));
    }
  while ((link = g_queue_pop_head_link (&self->backoff)) != NULL)
    {
      KvS3Op *op = link->data;

      g_source_destroy (op->retry_timer);
      g_clear_pointer (&op->retry_timer, g_source_unref);
      finish (self, op, KV_S3_OP_FAILED, closed_error (self, op));
    }
  while (self->running.head != NULL)
    {
      KvS3Op *op = self->running.head->data;

      attempt_drop (self, op);
      finish (self, op, KV_S3_OP_FAILED, closed_error (self, op));
    }
  return G_SOURCE_REMOVE;
}

static gboolean
quit_loop (gpointer user_data)
{
  KvS3Client *self = user_data;

  g_main_loop_quit (self->loop);
  return G_SOURCE_REMOVE;
}

void
kv_s3_client_shutdown (KvS3Client *self)
{
  if (self->thread == NULL)
    return;
  g_mutex_lock (&self->lock);
  self->shut_down = TRUE;
  g_mutex_unlock (&self->lock);
  if (kv_s3_client_is_io_thread (self))
    {
      /* Shut down from one of its own callbacks (its owner's last
       * reference dropped there): end every op now, run what is queued on
       * the context (ops on their way in end closed), and let the thread
       * go; it ends when this dispatch returns, dropping its reference. */
      close_all (self);
      while (g_main_context_pending (self->context))
        g_main_context_iteration (self->context, FALSE);
      g_main_loop_quit (self->loop);
      g_thread_unref (g_steal_pointer (&self->thread));
      return;
    }
  g_main_context_invoke (self->context, close_all, self);
  g_mutex_lock (&self->lock);
  while (self->n_live > 0)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
  g_main_context_invoke (self->context, quit_loop, self);
  g_thread_join (g_steal_pointer (&self->thread));
}

/* ---- construction -------------------------------------------------------- */

static gboolean
bucket_name_ok (const char *bucket)
{
  gsize len = strlen (bucket);

  if (len < 3 || len > 63 || !g_ascii_isalnum (bucket[0]) || !g_ascii_isalnum (bucket[len - 1]))
    return FALSE;
  for (gsize i = 0; i < len; i++)
    if (!(g_ascii_islower (bucket[i]) || g_ascii_isdigit (bucket[i]) ||
          bucket[i] == '-' || bucket[i] == '.'))
      return FALSE;
  return TRUE;
}

static gboolean
parse_endpoint (const char  *endpoint,
                char       **out_scheme,
                char       **out_host,
                gint        *out_port,
                GError     **error)
{
  g_autoptr(GUri) uri = NULL;
  g_autoptr(GError) local_error = NULL;
  const char *scheme;
  const char *path;

  if (endpoint == NULL || endpoint[0] == '\0')
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "The s3 tier needs an endpoint (http://host:port or https://host)");
      return FALSE;
    }
  uri = g_uri_parse (endpoint, G_URI_FLAGS_NONE, &local_error);
  if (uri == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "endpoint=%s is not a URL: %s", endpoint, local_error->message);
      return FALSE;
    }
  scheme = g_uri_get_scheme (uri);
  path = g_uri_get_path (uri);
  if (g_ascii_strcasecmp (scheme, "http") != 0 && g_ascii_strcasecmp (scheme, "https") != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "endpoint=%s: the scheme must be http or https", endpoint);
      return FALSE;
    }
  if (g_uri_get_host (uri) == NULL || g_uri_get_host (uri)[0] == '\0')
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "endpoint=%s names no host", endpoint);
      return FALSE;
    }
  if ((path[0] != '\0' && strcmp (path, "/") != 0) || g_uri_get_query (uri) != NULL ||
      g_uri_get_fragment (uri) != NULL || g_uri_get_userinfo (uri) != NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "endpoint=%s: only scheme://host[:port] is allowed (the bucket is its own "
                   "setting, credentials are never in the URL)", endpoint);
      return FALSE;
    }
  if (out_scheme != NULL)
    *out_scheme = g_ascii_strdown (scheme, -1);
  if (out_host != NULL)
    *out_host = g_strdup (g_uri_get_host (uri));
  if (out_port != NULL)
    *out_port = g_uri_get_port (uri);
  return TRUE;
}

gboolean
kv_s3_client_check_config (const KvS3ClientConfig  *config,
                           GError                 **error)
{
  g_autofree char *scheme = NULL;
  g_autofree char *host = NULL;

  if (!parse_endpoint (config->endpoint, &scheme, &host, NULL, error))
    return FALSE;
  if (config->bucket == NULL || !bucket_name_ok (config->bucket))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "bucket=%s is not an S3 bucket name (3 to 63 lower-case letters, digits, "
                   "'.' and '-', starting and ending with a letter or digit)",
                   config->bucket != NULL ? config->bucket : "");
      return FALSE;
    }
  if (config->addressing == KV_S3_ADDRESSING_VIRTUAL &&
      (g_hostname_is_ip_address (host) || strchr (config->bucket, '.') != NULL))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "addressing=virtual needs an endpoint named by DNS and a bucket without "
                   "dots (the bucket becomes part of the host name): use addressing=path");
      return FALSE;
    }
  if (config->region == NULL || config->region[0] == '\0')
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "The s3 tier needs a region");
      return FALSE;
    }
  for (const char *p = config->region; *p != '\0'; p++)
    if (!g_ascii_isalnum (*p) && *p != '-' && *p != '_')
      {
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                     "region=%s is not a region name (letters, digits, '-')", config->region);
        return FALSE;
      }
  if (config->ca_file != NULL && strcmp (scheme, "https") != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "tls-ca-file=%s needs an https endpoint (endpoint=%s)", config->ca_file,
                   config->endpoint);
      return FALSE;
    }
  if (config->ca_file != NULL && !g_file_test (config->ca_file, G_FILE_TEST_IS_REGULAR))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   "tls-ca-file=%s is not a readable file", config->ca_file);
      return FALSE;
    }
  if (config->max_connections == 0 || config->connect_timeout_ms == 0 ||
      config->reply_timeout_ms == 0 || config->max_attempts == 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "max-connections, connect-timeout-ms, reply-timeout-ms and max-attempts "
                   "must be at least 1");
      return FALSE;
    }
  return TRUE;
}

static gpointer
init_curl (gpointer data)
{
  /* thread-safe since curl 7.84 */
  return GINT_TO_POINTER (curl_global_init (CURL_GLOBAL_DEFAULT) == CURLE_OK);
}

KvS3Client *
kv_s3_client_new (const KvS3ClientConfig  *config,
                  GError                 **error)
{
  static GOnce once = G_ONCE_INIT;
  g_autoptr(KvS3Client) self = NULL;
  g_autofree char *scheme = NULL;
  g_autofree char *host = NULL;
  g_autofree char *authority = NULL;
  gint port = -1;

  g_return_val_if_fail (config->counters == NULL ||
                        config->first_counter + KV_S3_CLIENT_N_COUNTERS <=
                        kv_counter_set_get_n_counters (config->counters), NULL);

  if (!kv_s3_client_check_config (config, error) ||
      !parse_endpoint (config->endpoint, &scheme, &host, &port, error))
    return NULL;
  if (config->access_key == NULL || config->access_key[0] == '\0' ||
      config->secret_key == NULL || config->secret_key[0] == '\0')
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "The s3 client needs an access key and a secret key");
      return NULL;
    }
  if (!GPOINTER_TO_INT (g_once (&once, init_curl, NULL)))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "libcurl did not initialize");
      return NULL;
    }

  self = g_object_new (KV_TYPE_S3_CLIENT, NULL);
  self->endpoint = g_strdup (config->endpoint);
  self->bucket = g_strdup (config->bucket);
  self->region = g_strdup (config->region);
  self->session_token = g_strdup (config->session_token);
  self->ca_file = g_strdup (config->ca_file);
  self->addressing = config->addressing;
  self->max_connections = config->max_connections;
  self->connect_timeout_ms = config->connect_timeout_ms;
  self->reply_timeout_ms = config->reply_timeout_ms;
  self->max_attempts = config->max_attempts;
  self->retry_base_ms = MAX (config->retry_base_ms, 1u);
  if (config->counters != NULL)
    {
      self->counters = kv_counter_set_ref (config->counters);
      self->first_counter = config->first_counter;
    }
  else
    {
      static const char * const names[KV_S3_CLIENT_N_COUNTERS + 1] = {
        "requests", "retries", "transport_errors", "timeouts", "error_replies",
        "bytes_sent", "bytes_received", NULL
      };

      self->counters = kv_counter_set_new (names);
    }
  kv_s3_signer_init (&self->signer, config->access_key, config->secret_key, config->region, "s3");

  /* an IPv6 literal keeps its brackets in the Host header and the URL */
  if (strchr (host, ':') != NULL)
    authority = port > 0 ? g_strdup_printf ("[%s]:%d", host, port) : g_strdup_printf ("[%s]", host);
  else
    authority = port > 0 ? g_strdup_printf ("%s:%d", host, port) : g_strdup (host);
  if (self->addressing == KV_S3_ADDRESSING_VIRTUAL)
    {
      self->host_header = g_strdup_printf ("%s.%s", self->bucket, authority);
      self->path_prefix = g_strdup ("");
    }
  else
    {
      self->host_header = g_strdup (authority);
      self->path_prefix = g_strdup_printf ("/%s", self->bucket);
    }
  self->base_url = g_strdup_printf ("%s://%s", scheme, self->host_header);
  self->framed = strcmp (scheme, "http") == 0;
  self->connect_host = self->addressing == KV_S3_ADDRESSING_VIRTUAL ?
                       g_strdup_printf ("%s.%s", self->bucket, host) : g_strdup (host);
  self->connect_port = port > 0 ? port : 80;

  self->multi = curl_multi_init ();
  curl_multi_setopt (self->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
  curl_multi_setopt (self->multi, CURLMOPT_SOCKETDATA, self);
  curl_multi_setopt (self->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
  curl_multi_setopt (self->multi, CURLMOPT_TIMERDATA, self);
  /* HTTP/1.1, one request per connection at a time, at most
   * max-connections of them, kept alive between requests */
  curl_multi_setopt (self->multi, CURLMOPT_PIPELINING, (long) CURLPIPE_NOTHING);
  curl_multi_setopt (self->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long) self->max_connections);
  curl_multi_setopt (self->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) self->max_connections);
  curl_multi_setopt (self->multi, CURLMOPT_MAXCONNECTS, (long) self->max_connections);

  self->context = g_main_context_new ();
  self->loop = g_main_loop_new (self->context, FALSE);
  self->thread = g_thread_new ("kvtier-s3", io_thread_main, g_object_ref (self));
  self->io_thread = self->thread;
  return g_steal_pointer (&self);
}

static void
kv_s3_client_finalize (GObject *object)
{
  KvS3Client *self = KV_S3_CLIENT (object);

  kv_s3_client_shutdown (self);
  if (self->multi != NULL)
    curl_multi_cleanup (self->multi);
  for (guint i = 0; i < self->idle_easy->len; i++)
    curl_easy_cleanup (self->idle_easy->pdata[i]);
  g_ptr_array_unref (self->idle_easy);
  g_clear_pointer (&self->loop, g_main_loop_unref);
  g_clear_pointer (&self->context, g_main_context_unref);
  kv_s3_signer_clear (&self->signer);
  g_free (self->endpoint);
  g_free (self->bucket);
  g_free (self->region);
  if (self->session_token != NULL)
    memset (self->session_token, 0, strlen (self->session_token));
  g_free (self->session_token);
  g_free (self->ca_file);
  g_clear_pointer (&self->counters, kv_counter_set_unref);
  g_free (self->host_header);
  g_free (self->base_url);
  g_free (self->path_prefix);
  g_free (self->connect_host);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (kv_s3_client_parent_class)->finalize (object);
}

static void
kv_s3_client_class_init (KvS3ClientClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_s3_client_finalize;
}

static void
kv_s3_client_init (KvS3Client *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->idle_easy = g_ptr_array_new ();
}
