/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-s3-connection.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* a chunk-size line (hex digits and extensions) and a trailer line */
#define MAX_LINE             1024
/* 100 Continue and the like before a reply */
#define MAX_INTERIM_REPLIES  8

typedef enum {
  STATE_CONNECTING,
  STATE_IDLE,
  STATE_SENDING,
  STATE_HEAD,
  STATE_BODY,           /* body_left more bytes */
  STATE_CHUNK_SIZE,     /* a chunk's size line */
  STATE_CHUNK_DATA,     /* body_left more bytes of the chunk */
  STATE_CHUNK_END,      /* the CRLF after a chunk's bytes */
  STATE_TRAILERS,       /* after the last chunk, up to an empty line */
  STATE_UNTIL_CLOSE,    /* neither length nor chunks: the body ends with the connection */
  STATE_CLOSED,
} State;

typedef struct
{
  GSource         source;
  KvS3Connection *connection;
} ConnectionSource;

struct _KvS3Connection
{
  guint                   refs;             /* the source's dispatch and a pending connect hold one */
  GSource                *source;           /* the socket, and the deadline as ready time */
  gpointer                fd_tag;
  GIOCondition            watched;          /* G_IO_IN but while a request waits to be sent */
  GCancellable           *connecting;
  gboolean                connect_timed_out;
  gint64                  connect_deadline;
  GSocketConnection      *stream;
  int                     fd;
  State                   state;

  /* the exchange */
  gboolean                busy;
  const KvS3ExchangeSink *sink;
  gpointer                data;
  gint64                  deadline;
  char                   *head;
  struct iovec            out[3];           /* what is left to send: head, body[0], body[1] */
  gboolean                head_request;
  gboolean                keep_alive;
  guint                   n_interim;
  guint64                 body_left;
  guint64                 reply_bytes;      /* of this exchange's reply: 0 tells NOTHING from LOST */
  gboolean                request_cut;      /* the server replied before the whole request went out */
  int                     early_failure;    /* a send that failed inside exchange(): its errno, or -1 cancelled */

  /* what came from the server and was not taken yet */
  guint8                 *in;
  gsize                   in_start;
  gsize                   in_end;
};

static KvS3Connection *
connection_ref (KvS3Connection *self)
{
  self->refs++;
  return self;
}

static void
connection_unref (KvS3Connection *self)
{
  if (--self->refs > 0)
    return;
  g_free (self->in);
  g_free (self->head);
  g_free (self);
}

/* Each change of what is watched (or of the ready time) wakes the
 * context up: both change only when they must, not per request. */
static void
watch (KvS3Connection *self,
       GIOCondition    condition)
{
  if (self->fd_tag != NULL && self->watched != condition)
    {
      g_source_modify_unix_fd (self->source, self->fd_tag, condition);
      self->watched = condition;
    }
}

static void
close_socket (KvS3Connection *self)
{
  if (self->fd_tag != NULL)
    {
      g_source_remove_unix_fd (self->source, self->fd_tag);
      self->fd_tag = NULL;
    }
  if (self->stream != NULL)
    {
      g_io_stream_close (G_IO_STREAM (self->stream), NULL, NULL);
      g_clear_object (&self->stream);
    }
  self->fd = -1;
  self->state = STATE_CLOSED;
}

/* Ends the exchange: done runs last, and may free the connection. */
static void
finish (KvS3Connection     *self,
        KvS3ExchangeResult  result,
        const char         *detail)
{
  const KvS3ExchangeSink *sink = self->sink;
  gpointer data = self->data;

  g_assert (self->busy);
  self->busy = FALSE;
  self->sink = NULL;
  self->data = NULL;
  /* the deadline stays the ready time: the next exchange moves it, and
   * one that fires on an idle connection is dropped */
  if (result == KV_S3_EXCHANGE_OK && self->keep_alive && !self->request_cut &&
      self->in_start == self->in_end)
    {
      /* reusable: while idle, anything it reads (the server's close, bytes
       * no request asked for) closes it */
      self->state = STATE_IDLE;
      watch (self, G_IO_IN);
    }
  else
    close_socket (self);
  self->in_start = self->in_end = 0;
  sink->done (data, result, detail);
}

static void
finish_errno (KvS3Connection *self,
              const char     *what,
              int             saved_errno)
{
  g_autofree char *detail = g_strdup_printf ("%s: %s", what, g_strerror (saved_errno));

  finish (self, KV_S3_EXCHANGE_LOST, detail);
}

/* ---- sending ------------------------------------------------------------- */

typedef enum {
  SEND_ALL,
  SEND_WAIT,
  SEND_FAILED,      /* errno says why */
  SEND_CANCELLED,
} SendResult;

/* Sends what the socket takes of the request. */
static SendResult
try_send (KvS3Connection *self)
{
  for (;;)
    {
      struct msghdr message = { 0 };
      struct iovec vectors[3];
      guint n_vectors = 0;
      ssize_t n;

      for (guint i = 0; i < 3; i++)
        if (self->out[i].iov_len > 0)
          vectors[n_vectors++] = self->out[i];
      if (n_vectors == 0)
        return SEND_ALL;
      if (self->sink->cancelled != NULL && self->sink->cancelled (self->data))
        return SEND_CANCELLED;
      message.msg_iov = vectors;
      message.msg_iovlen = n_vectors;
      /* a server that went away is an error here, not SIGPIPE */
      n = sendmsg (self->fd, &message, MSG_NOSIGNAL);
      if (n < 0)
        {
          if (errno == EINTR)
            continue;
          return errno == EAGAIN || errno == EWOULDBLOCK ? SEND_WAIT : SEND_FAILED;
        }
      for (guint i = 0; i < 3 && n > 0; i++)
        {
          gsize step = MIN ((gsize) n, self->out[i].iov_len);

          self->out[i].iov_base = (guint8 *) self->out[i].iov_base + step;
          self->out[i].iov_len -= step;
          n -= step;
        }
    }
}

static void
request_sent (KvS3Connection *self)
{
  self->state = STATE_HEAD;
  watch (self, G_IO_IN);
  if (self->sink->request_sent != NULL)
    self->sink->request_sent (self->data);
}

/* The server answers (or hung up) before the whole request went out: a
 * refusal at the head of an upload, which is read as the answer (its
 * reason, not a broken pipe); the connection is not reused. */
static void
reply_early (KvS3Connection *self)
{
  self->request_cut = TRUE;
  self->state = STATE_HEAD;
  watch (self, G_IO_IN);
}

/* Sends the request on; FALSE when the exchange ended. */
static gboolean
send_request (KvS3Connection *self)
{
  switch (try_send (self))
    {
    case SEND_ALL:
      request_sent (self);
      return TRUE;
    case SEND_WAIT:
      /* and the server's early answer */
      watch (self, G_IO_OUT | G_IO_IN);
      return TRUE;
    case SEND_CANCELLED:
      finish (self, KV_S3_EXCHANGE_ABORTED, "cancelled");
      return FALSE;
    case SEND_FAILED:
    default:
      if (errno == EPIPE || errno == ECONNRESET)
        {
          reply_early (self);
          return TRUE;
        }
      finish_errno (self, "sending the request", errno);
      return FALSE;
    }
}

/* ---- receiving ----------------------------------------------------------- */

typedef enum {
  READ_GOT,
  READ_WAIT,
  READ_EOF,
  READ_FAILED,    /* the exchange ended */
} ReadResult;

/* More bytes into the buffer. */
static ReadResult
read_in (KvS3Connection *self)
{
  ssize_t n;

  if (self->in_start == self->in_end)
    self->in_start = self->in_end = 0;
  else if (self->in_end == KV_S3_CONNECTION_MAX_HEAD && self->in_start > 0)
    {
      memmove (self->in, self->in + self->in_start, self->in_end - self->in_start);
      self->in_end -= self->in_start;
      self->in_start = 0;
    }
  /* callers ask for more only while what they need is not all there,
   * and no line or head they wait for may fill the buffer */
  g_assert (self->in_end < KV_S3_CONNECTION_MAX_HEAD);
  do
    n = recv (self->fd, self->in + self->in_end, KV_S3_CONNECTION_MAX_HEAD - self->in_end, 0);
  while (n < 0 && errno == EINTR);
  if (n > 0)
    {
      self->in_end += n;
      self->reply_bytes += n;
      return READ_GOT;
    }
  if (n == 0)
    return READ_EOF;
  if (errno == EAGAIN || errno == EWOULDBLOCK)
    return READ_WAIT;
  finish_errno (self, "reading the reply", errno);
  return READ_FAILED;
}

/* The server closed the connection where the reply was not over. */
static void
finish_closed (KvS3Connection *self)
{
  g_autofree char *detail = NULL;

  if (self->reply_bytes == 0)
    {
      finish (self, KV_S3_EXCHANGE_NOTHING, "the server closed the connection without replying");
      return;
    }
  detail = g_strdup_printf ("the server closed the connection inside its reply (%" G_GUINT64_FORMAT
                            " bytes of it came)", self->reply_bytes);
  finish (self, KV_S3_EXCHANGE_LOST, detail);
}

static gboolean
is_token_in_list (const char *list,
                  const char *token)
{
  g_auto(GStrv) items = g_strsplit (list, ",", -1);

  for (guint i = 0; items[i] != NULL; i++)
    if (g_ascii_strcasecmp (g_strstrip (items[i]), token) == 0)
      return TRUE;
  return FALSE;
}

/* @text: the head, without its final CRLF CRLF. FALSE (and *detail) when
 * it does not parse. */
static gboolean
parse_head (KvS3Connection  *self,
            const char      *text,
            guint           *out_status,
            gint64          *out_length,
            gboolean        *out_chunked,
            char           **detail)
{
  g_auto(GStrv) lines = g_strsplit (text, "\r\n", -1);
  /* an empty head splits into no line at all */
  const char *status_line = lines[0] != NULL ? lines[0] : "";
  gint64 length = -1;
  gboolean chunked = FALSE;
  guint status;

  /* HTTP/1.x NNN[ reason] */
  if (!g_str_has_prefix (status_line, "HTTP/1.") || !g_ascii_isdigit (status_line[7]) ||
      status_line[8] != ' ' || !g_ascii_isdigit (status_line[9]) ||
      !g_ascii_isdigit (status_line[10]) || !g_ascii_isdigit (status_line[11]) ||
      (status_line[12] != '\0' && status_line[12] != ' '))
    {
      g_autofree char *escaped = g_strescape (status_line, NULL);

      *detail = g_strdup_printf ("a reply that is not HTTP/1.1: \"%.64s\"", escaped);
      return FALSE;
    }
  status = (status_line[9] - '0') * 100 + (status_line[10] - '0') * 10 + (status_line[11] - '0');
  /* HTTP/1.0 closes after its reply unless it says otherwise */
  self->keep_alive = status_line[7] != '0';
  for (guint i = 1; lines[i] != NULL; i++)
    {
      char *colon = strchr (lines[i], ':');
      const char *value;

      if (colon == NULL || colon == lines[i])
        {
          *detail = g_strdup ("a reply header without a name and a colon");
          return FALSE;
        }
      *colon = '\0';
      value = g_strstrip (colon + 1);
      if (g_ascii_strcasecmp (lines[i], "Content-Length") == 0)
        {
          guint64 parsed;

          /* digits only, and not so many that they overflow */
          if (value[0] == '\0' || strspn (value, "0123456789") != strlen (value) || strlen (value) > 18 ||
              (parsed = g_ascii_strtoull (value, NULL, 10), length >= 0 && (guint64) length != parsed))
            {
              *detail = g_strdup_printf ("a reply with a bad Content-Length (\"%.32s\")", value);
              return FALSE;
            }
          length = parsed;
        }
      else if (g_ascii_strcasecmp (lines[i], "Transfer-Encoding") == 0)
        {
          if (g_ascii_strcasecmp (value, "chunked") != 0)
            {
              *detail = g_strdup_printf ("a reply in a transfer coding other than chunked (\"%.32s\")", value);
              return FALSE;
            }
          chunked = TRUE;
        }
      else if (g_ascii_strcasecmp (lines[i], "Connection") == 0)
        {
          if (is_token_in_list (value, "close"))
            self->keep_alive = FALSE;
          else if (is_token_in_list (value, "keep-alive"))
            self->keep_alive = TRUE;
        }
    }
  *out_status = status;
  *out_length = length;
  *out_chunked = chunked;
  return TRUE;
}

/* The reply's head, when it is all there: what its body is. FALSE when
 * the exchange ended or must wait. */
static gboolean
take_head (KvS3Connection *self)
{
  const guint8 *start = self->in + self->in_start;
  gsize avail = self->in_end - self->in_start;
  const guint8 *end = memmem (start, avail, "\r\n\r\n", 4);
  g_autofree char *text = NULL;
  g_autofree char *detail = NULL;
  guint status;
  gint64 length;
  gboolean chunked;

  if (end == NULL)
    {
      if (avail >= KV_S3_CONNECTION_MAX_HEAD - 1)
        {
          finish (self, KV_S3_EXCHANGE_BAD_REPLY, "a reply head over 64 KiB");
          return FALSE;
        }
      switch (read_in (self))
        {
        case READ_GOT:
          return TRUE;
        case READ_EOF:
          finish_closed (self);
          return FALSE;
        default:
          return FALSE;
        }
    }
  if (memchr (start, '\0', end - start) != NULL)
    {
      finish (self, KV_S3_EXCHANGE_BAD_REPLY, "a reply head with a NUL byte");
      return FALSE;
    }
  text = g_strndup ((const char *) start, end - start);
  self->in_start += end + 4 - start;
  if (!parse_head (self, text, &status, &length, &chunked, &detail))
    {
      finish (self, KV_S3_EXCHANGE_BAD_REPLY, detail);
      return FALSE;
    }
  if (status < 200)
    {
      /* 100 Continue and its kind: the reply follows */
      if (++self->n_interim > MAX_INTERIM_REPLIES)
        {
          finish (self, KV_S3_EXCHANGE_BAD_REPLY, "too many interim (1xx) replies");
          return FALSE;
        }
      return TRUE;
    }
  if (!self->sink->reply_head (self->data, status, chunked ? -1 : length))
    {
      finish (self, KV_S3_EXCHANGE_ABORTED, "the reply was refused at its head");
      return FALSE;
    }
  if (self->head_request || status == 204 || status == 304 || (!chunked && length == 0))
    {
      finish (self, KV_S3_EXCHANGE_OK, NULL);
      return FALSE;
    }
  if (chunked)
    self->state = STATE_CHUNK_SIZE;
  else if (length > 0)
    {
      self->state = STATE_BODY;
      self->body_left = length;
    }
  else
    {
      self->state = STATE_UNTIL_CLOSE;
      self->keep_alive = FALSE;
      self->body_left = G_MAXUINT64;
    }
  return TRUE;
}

/* Body bytes, at most body_left: from the buffer first, then straight into
 * the sink's place when it gives one. FALSE when the exchange ended or
 * must wait. */
static gboolean
take_body (KvS3Connection *self)
{
  guint8 *place;
  gsize room = 0;
  ssize_t n;

  if (self->in_end > self->in_start)
    {
      gsize take = MIN (self->in_end - self->in_start, self->body_left);

      if (!self->sink->body_bytes (self->data, self->in + self->in_start, take))
        {
          finish (self, KV_S3_EXCHANGE_ABORTED, "the reply's body was refused");
          return FALSE;
        }
      self->in_start += take;
      self->body_left -= take;
      return TRUE;
    }
  place = self->sink->body_place (self->data, &room);
  if (place == NULL || room == 0)
    {
      switch (read_in (self))
        {
        case READ_GOT:
          return TRUE;
        case READ_EOF:
          if (self->state == STATE_UNTIL_CLOSE)
            finish (self, KV_S3_EXCHANGE_OK, NULL);
          else
            finish_closed (self);
          return FALSE;
        default:
          return FALSE;
        }
    }
  do
    n = recv (self->fd, place, MIN (room, self->body_left), 0);
  while (n < 0 && errno == EINTR);
  if (n > 0)
    {
      self->reply_bytes += n;
      self->body_left -= n;
      if (!self->sink->body_bytes (self->data, NULL, n))
        {
          finish (self, KV_S3_EXCHANGE_ABORTED, "the reply's body was refused");
          return FALSE;
        }
      return TRUE;
    }
  if (n == 0)
    {
      if (self->state == STATE_UNTIL_CLOSE)
        finish (self, KV_S3_EXCHANGE_OK, NULL);
      else
        finish_closed (self);
      return FALSE;
    }
  if (errno != EAGAIN && errno != EWOULDBLOCK)
    finish_errno (self, "reading the reply", errno);
  return FALSE;
}

/* A CRLF-ended line of the chunked body, into *line (without the CRLF).
 * FALSE when the exchange ended or must wait for more. */
static gboolean
take_line (KvS3Connection  *self,
           char           **line)
{
  const guint8 *start = self->in + self->in_start;
  gsize avail = self->in_end - self->in_start;
  const guint8 *end = memmem (start, MIN (avail, MAX_LINE + 2), "\r\n", 2);

  if (end == NULL)
    {
      if (avail >= MAX_LINE + 2)
        {
          finish (self, KV_S3_EXCHANGE_BAD_REPLY, "a chunked body's line over 1 KiB");
          return FALSE;
        }
      switch (read_in (self))
        {
        case READ_GOT:
          return take_line (self, line);
        case READ_EOF:
          finish_closed (self);
          return FALSE;
        default:
          return FALSE;
        }
    }
  *line = g_strndup ((const char *) start, end - start);
  self->in_start += end + 2 - start;
  return TRUE;
}

/* FALSE when the exchange ended or must wait. */
static gboolean
take_chunk_size (KvS3Connection *self)
{
  g_autofree char *line = NULL;
  gsize digits;

  if (!take_line (self, &line))
    return FALSE;
  /* hex digits, then nothing or extensions (";name=value") */
  digits = strspn (line, "0123456789abcdefABCDEF");
  if (digits == 0 || digits > 15 || (line[digits] != '\0' && line[digits] != ';' && line[digits] != ' '))
    {
      finish (self, KV_S3_EXCHANGE_BAD_REPLY, "a chunked body with a bad chunk size");
      return FALSE;
    }
  line[digits] = '\0';
  self->body_left = g_ascii_strtoull (line, NULL, 16);
  self->state = self->body_left == 0 ? STATE_TRAILERS : STATE_CHUNK_DATA;
  return TRUE;
}

/* Moves the reply on as far as the socket allows. */
static void
receive_reply (KvS3Connection *self)
{
  for (;;)
    switch (self->state)
      {
      case STATE_HEAD:
        if (!take_head (self))
          return;
        break;
      case STATE_BODY:
        if (self->body_left == 0)
          {
            finish (self, KV_S3_EXCHANGE_OK, NULL);
            return;
          }
        if (!take_body (self))
          return;
        break;
      case STATE_UNTIL_CLOSE:
        if (!take_body (self))
          return;
        break;
      case STATE_CHUNK_SIZE:
        if (!take_chunk_size (self))
          return;
        break;
      case STATE_CHUNK_DATA:
        if (self->body_left == 0)
          {
            self->state = STATE_CHUNK_END;
            break;
          }
        if (!take_body (self))
          return;
        break;
      case STATE_CHUNK_END:
      case STATE_TRAILERS:
        {
          g_autofree char *line = NULL;

          if (!take_line (self, &line))
            return;
          if (self->state == STATE_CHUNK_END)
            {
              if (line[0] != '\0')
                {
                  finish (self, KV_S3_EXCHANGE_BAD_REPLY, "a chunk longer than its size");
                  return;
                }
              self->state = STATE_CHUNK_SIZE;
            }
          else if (line[0] == '\0')
            {
              finish (self, KV_S3_EXCHANGE_OK, NULL);
              return;
            }
          break;
        }
      default:
        g_assert_not_reached ();
      }
}

/* ---- the source ---------------------------------------------------------- */

static gboolean
connection_dispatch (GSource     *source,
                     GSourceFunc  callback,
                     gpointer     user_data)
{
  KvS3Connection *self = connection_ref (((ConnectionSource *) source)->connection);
  gint64 now = g_get_monotonic_time ();

  if (self->state == STATE_CONNECTING)
    {
      /* the connect's time (or the exchange's) is up */
      g_source_set_ready_time (source, -1);
      self->connect_timed_out = TRUE;
      g_cancellable_cancel (self->connecting);
    }
  else if (!self->busy)
    {
      /* idle: the server closed it or wrote to it (it is not reused), or
       * the last exchange's deadline came */
      if (self->fd_tag != NULL && g_source_query_unix_fd (source, self->fd_tag) != 0)
        close_socket (self);
      if (g_source_get_ready_time (source) >= 0 && now >= g_source_get_ready_time (source))
        g_source_set_ready_time (source, -1);
    }
  else if (self->early_failure < 0)
    finish (self, KV_S3_EXCHANGE_ABORTED, "cancelled");
  else if (self->early_failure == EPIPE || self->early_failure == ECONNRESET)
    {
      self->early_failure = 0;
      g_source_set_ready_time (source, self->deadline);
      reply_early (self);
      receive_reply (self);
    }
  else if (self->early_failure != 0)
    finish_errno (self, "sending the request", self->early_failure);
  else if (now >= self->deadline)
    finish (self, KV_S3_EXCHANGE_TIMED_OUT, "no whole reply within the request's time");
  else if (self->state == STATE_SENDING)
    {
      if (g_source_query_unix_fd (source, self->fd_tag) & G_IO_IN)
        {
          reply_early (self);
          receive_reply (self);
        }
      else if (send_request (self) && self->state != STATE_SENDING)
        receive_reply (self);
    }
  else
    receive_reply (self);
  connection_unref (self);
  return G_SOURCE_CONTINUE;
}

static GSourceFuncs connection_source_funcs = {
  .dispatch = connection_dispatch,
};

/* Connected: the socket is watched, and an exchange waiting for it starts. */
static void
attach_stream (KvS3Connection    *self,
               GSocketConnection *stream)
{
  GSocket *socket = g_socket_connection_get_socket (stream);
  int one = 1;

  self->stream = stream;
  g_socket_set_blocking (socket, FALSE);
  self->fd = g_socket_get_fd (socket);
  /* a request's head and its body leave at once, not after an ACK */
  setsockopt (self->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  self->in = g_malloc (KV_S3_CONNECTION_MAX_HEAD);
  self->fd_tag = g_source_add_unix_fd (self->source, self->fd, G_IO_IN);
  self->watched = G_IO_IN;
  if (self->busy)
    {
      /* from the connect's callback: the exchange may end here */
      self->state = STATE_SENDING;
      g_source_set_ready_time (self->source, self->deadline);
      send_request (self);
    }
  else
    {
      self->state = STATE_IDLE;
      g_source_set_ready_time (self->source, -1);
    }
}

static void
connected (GObject      *object,
           GAsyncResult *result,
           gpointer      user_data)
{
  KvS3Connection *self = user_data;
  g_autoptr(GError) error = NULL;
  GSocketConnection *stream = g_socket_client_connect_finish (G_SOCKET_CLIENT (object), result, &error);

  g_clear_object (&self->connecting);
  if (self->state == STATE_CLOSED)
    {
      /* freed while it connected */
      g_clear_object (&stream);
      connection_unref (self);
      return;
    }
  if (stream == NULL)
    {
      g_autofree char *detail = g_strdup_printf ("connecting: %s",
                                                 self->connect_timed_out ? "timed out" : error->message);

      self->state = STATE_CLOSED;
      if (self->busy)
        finish (self, self->connect_timed_out ? KV_S3_EXCHANGE_TIMED_OUT : KV_S3_EXCHANGE_REFUSED, detail);
      connection_unref (self);
      return;
    }
  attach_stream (self, stream);
  connection_unref (self);
}

static KvS3Connection *
connection_new (GMainContext *context)
{
  KvS3Connection *self = g_new0 (KvS3Connection, 1);

  self->refs = 1;
  self->fd = -1;
  self->state = STATE_CONNECTING;
  self->source = g_source_new (&connection_source_funcs, sizeof (ConnectionSource));
  ((ConnectionSource *) self->source)->connection = self;
  g_source_set_name (self->source, "kvtier s3 connection");
  g_source_attach (self->source, context);
  return self;
}

KvS3Connection *
kv_s3_connection_new (GMainContext *context,
                      const char   *host,
                      guint16       port,
                      guint         connect_timeout_ms)
{
  KvS3Connection *self = connection_new (context);
  g_autoptr(GSocketClient) client = g_socket_client_new ();
  g_autoptr(GSocketConnectable) address = NULL;

  self->connect_deadline = g_get_monotonic_time () + (gint64) connect_timeout_ms * 1000;
  g_source_set_ready_time (self->source, self->connect_deadline);

  /* RFC 6761: every name under .localhost is the loopback */
  if (g_str_has_suffix (host, ".localhost"))
    host = "localhost";
  address = g_network_address_new (host, port);
  /* a plain S3 endpoint is reached directly, not through a proxy */
  g_socket_client_set_enable_proxy (client, FALSE);
  self->connecting = g_cancellable_new ();
  g_main_context_push_thread_default (context);
  g_socket_client_connect_async (client, address, self->connecting, connected, connection_ref (self));
  g_main_context_pop_thread_default (context);
  return self;
}

KvS3Connection *
kv_s3_connection_new_for_socket (GMainContext *context,
                                 GSocket      *socket)
{
  KvS3Connection *self = connection_new (context);

  attach_stream (self, g_socket_connection_factory_create_connection (socket));
  return self;
}

gboolean
kv_s3_connection_is_reusable (KvS3Connection *self)
{
  struct pollfd pending;

  if (self->state != STATE_IDLE || self->busy || self->fd < 0)
    return FALSE;
  pending = (struct pollfd) { .fd = self->fd, .events = POLLIN };
  /* readable while idle: its close, or bytes no request asked for */
  return poll (&pending, 1, 0) == 0;
}

void
kv_s3_connection_exchange (KvS3Connection         *self,
                           const char             *head,
                           gsize                   head_len,
                           const guint8 * const   *body,
                           const gsize            *body_len,
                           gboolean                head_request,
                           gint64                  deadline,
                           const KvS3ExchangeSink *sink,
                           gpointer                data)
{
  g_return_if_fail (!self->busy);
  g_return_if_fail (self->state == STATE_CONNECTING || self->state == STATE_IDLE);

  self->busy = TRUE;
  self->sink = sink;
  self->data = data;
  self->deadline = deadline;
  g_free (self->head);
  self->head = g_memdup2 (head, head_len);
  self->out[0] = (struct iovec) { self->head, head_len };
  self->out[1] = (struct iovec) { (void *) body[0], body_len[0] };
  self->out[2] = (struct iovec) { (void *) body[1], body_len[1] };
  self->head_request = head_request;
  self->keep_alive = TRUE;
  self->n_interim = 0;
  self->reply_bytes = 0;
  self->early_failure = 0;
  self->request_cut = FALSE;
  self->in_start = self->in_end = 0;
  if (self->state == STATE_CONNECTING)
    {
      g_source_set_ready_time (self->source, MIN (deadline, self->connect_deadline));
      return;
    }
  /* sent at once, most often whole; done never runs from within this
   * call: a failure is reported from the next dispatch */
  self->state = STATE_SENDING;
  switch (try_send (self))
    {
    case SEND_ALL:
      g_source_set_ready_time (self->source, deadline);
      request_sent (self);
      break;
    case SEND_WAIT:
      g_source_set_ready_time (self->source, deadline);
      watch (self, G_IO_OUT | G_IO_IN);
      break;
    case SEND_CANCELLED:
      self->early_failure = -1;
      g_source_set_ready_time (self->source, 0);
      break;
    case SEND_FAILED:
    default:
      self->early_failure = errno;
      g_source_set_ready_time (self->source, 0);
      break;
    }
}

void
kv_s3_connection_free (KvS3Connection *self)
{
  if (self == NULL)
    return;
  self->busy = FALSE;
  close_socket (self);
  if (self->connecting != NULL)
    g_cancellable_cancel (self->connecting);
  g_source_destroy (self->source);
  g_source_unref (self->source);
  self->source = NULL;
  connection_unref (self);
}
