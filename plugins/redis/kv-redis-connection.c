/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-redis-connection.h"

#include <kvtier.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#define READ_BUFFER_SIZE (64 * 1024)
#define MAX_LINE 512
#define MAX_VECTORS 256

enum { WHERE_NONE, WHERE_PENDING, WHERE_WRITING, WHERE_SENT };
enum { GET_LINE, GET_HEADER, GET_PAYLOAD, GET_TRAILER, GET_DISCARD };

/**
 * KvRedisConnection:
 *
 * One connection to one redis server, on the main context it was created
 * for (the redis tier's I/O thread): a GIO stream (TCP, or TLS through
 * #GTlsClientConnection), commands encoded by hiredis and pipelined, replies
 * parsed by a hiredis `redisReader`, except the value of a GET, which is
 * read from the socket straight into its destination (the primary slot).
 *
 * Every reply is bounded: a bulk string or an array larger than
 * %KV_REDIS_MAX_REPLY_BYTES / %KV_REDIS_MAX_REPLY_ELEMENTS, or a GET value
 * longer than %KV_REDIS_MAX_DISCARD_BYTES, closes the connection (a GET
 * value of any other wrong length is read and dropped). Every op sent is
 * completed exactly once, with its reply or the error that closed the
 * connection. Not thread-safe: everything runs on its context.
 */
struct _KvRedisConnection
{
  GObject             parent_instance;

  char               *host;
  guint16             port;
  char               *address;
  KvRedisConnectionConfig config;
  GMainContext       *context;

  KvRedisConnectionState state;
  GError             *error;
  GCancellable       *cancellable;
  GSource            *connect_timeout;
  GIOStream          *stream;
  GInputStream       *input;
  GOutputStream      *output;

  GQueue              pending;    /* not written yet */
  GQueue              sent;       /* written (or being written), awaiting a reply */
  guint               n_startup;  /* startup ops at the head of the queues */
  KvRedisOp           startup[3];

  gboolean            writing;        /* a batch is being written */
  GSource            *write_source;   /* pollable streams: awaits room to write */
  GOutputVector       vectors[MAX_VECTORS];
  guint               n_vectors;      /* of the batch being written */
  guint               vector_pos;     /* its first vector not written whole */

  gboolean            reading;        /* a read is outstanding (or, pollable, running) */
  GSource            *read_source;    /* pollable streams: reads whenever bytes are there */
  gint64              reply_due;      /* monotonic µs: since the head of sent awaits its reply */
  KvRedisOp          *reading_into;  /* an op whose value an asynchronous read is filling */
  guint8             *rbuf;
  gsize               rstart;
  gsize               rend;
  redisReader        *reader;
  redisReplyObjectFunctions reader_functions;
};

enum { SIGNAL_READY, SIGNAL_CLOSED, N_SIGNALS };
static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (KvRedisConnection, kv_redis_connection, G_TYPE_OBJECT)

static void start_read (KvRedisConnection *self);
static void start_write (KvRedisConnection *self);

void
kv_redis_op_clear (KvRedisOp *op)
{
  g_clear_pointer (&op->command, redisFreeCommand);
  g_clear_pointer (&op->reply, freeReplyObject);
  g_clear_error (&op->error);
  op->get_status = KV_REDIS_GET_NONE;
  op->where = WHERE_NONE;
  op->state = GET_LINE;
  op->body_pos = 0;
  op->discard = 0;
}

/* Whether @op ended with an error reply starting with @prefix (any error
 * reply if NULL). */
gboolean
kv_redis_op_is_error (const KvRedisOp *op,
                      const char      *prefix)
{
  return op->reply != NULL && op->reply->type == REDIS_REPLY_ERROR &&
         (prefix == NULL || g_str_has_prefix (op->reply->str, prefix));
}

/* ---- bounded reader ------------------------------------------------------ */

/* hiredis's own functions, the same for every reader */
static redisReplyObjectFunctions *default_functions;
static gsize default_functions_set;

/* The reader's object functions, bounded: a reply is a peer's word. */
static void *
bounded_create_string (const redisReadTask *task,
                       char                *str,
                       size_t               len)
{
  if (len > KV_REDIS_MAX_REPLY_BYTES)
    return NULL;
  return default_functions->createString (task, str, len);
}

static void *
bounded_create_array (const redisReadTask *task,
                      int                  elements)
{
  if (elements < 0 || elements > KV_REDIS_MAX_REPLY_ELEMENTS)
    return NULL;
  return default_functions->createArray (task, elements);
}

/* ---- completion and closing ---------------------------------------------- */

static void
complete (KvRedisConnection *self,
          KvRedisOp         *op)
{
  op->where = WHERE_NONE;
  if (op->done != NULL)
    op->done (op, op->user_data);
}

static void
fail_op (KvRedisConnection *self,
         KvRedisOp         *op,
         const GError      *error)
{
  if (op->error == NULL)
    op->error = g_error_copy (error);
  complete (self, op);
}

/* A TLS stream's close runs on a thread and reports back here; until it
 * does, the socket stays open. */
static void
stream_closed (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  gint *n_unfinished_io = user_data;

  g_io_stream_close_finish (G_IO_STREAM (source), result, NULL);
  if (n_unfinished_io != NULL)
    g_atomic_int_add (n_unfinished_io, -1);
}

/* Closes the connection: every op not completed yet fails with @error,
 * except one whose value a read is still filling, which fails when that
 * read returns (its destination must not be written after it completes). */
static void
close_with_error (KvRedisConnection *self,
                  GError            *error)
{
  g_autoptr(GError) owned = error;
  g_autoptr(GObject) keep = NULL;
  GQueue ops = G_QUEUE_INIT;
  GList *link;

  if (self->state == KV_REDIS_CONNECTION_CLOSED)
    return;
  keep = g_object_ref (G_OBJECT (self));
  g_debug ("redis connection to %s closed: %s", self->address, error->message);
  self->state = KV_REDIS_CONNECTION_CLOSED;
  self->error = g_steal_pointer (&owned);
  g_cancellable_cancel (self->cancellable);
  if (self->read_source != NULL)
    {
      g_source_destroy (self->read_source);
      g_clear_pointer (&self->read_source, g_source_unref);
      self->reading = FALSE;
    }
  if (self->write_source != NULL)
    {
      g_source_destroy (self->write_source);
      g_clear_pointer (&self->write_source, g_source_unref);
      self->writing = FALSE;
    }
  if (self->connect_timeout != NULL)
    {
      g_source_destroy (self->connect_timeout);
      g_clear_pointer (&self->connect_timeout, g_source_unref);
    }
  if (self->stream != NULL)
    {
      if (self->config.n_unfinished_io != NULL)
        g_atomic_int_inc (self->config.n_unfinished_io);
      g_io_stream_close_async (self->stream, G_PRIORITY_DEFAULT, NULL, stream_closed,
                               self->config.n_unfinished_io);
    }

  /* Taken first: a done callback may send more ops, which fail at once. */
  while ((link = g_queue_pop_head_link (&self->sent)) != NULL)
    g_queue_push_tail_link (&ops, link);
  while ((link = g_queue_pop_head_link (&self->pending)) != NULL)
    g_queue_push_tail_link (&ops, link);
  while ((link = g_queue_pop_head_link (&ops)) != NULL)
    {
      KvRedisOp *op = link->data;

      if (op == self->reading_into)
        continue;
      fail_op (self, op, self->error);
    }
  g_signal_emit (self, signals[SIGNAL_CLOSED], 0);
}

static void
close_protocol_error (KvRedisConnection *self,
                      const char        *what)
{
  close_with_error (self, g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                       "Protocol error from redis server %s: %s",
                                       self->address, what));
}

/* Closes the connection; its ops fail with an error naming @why. */
void
kv_redis_connection_close (KvRedisConnection *self,
                           const char        *why)
{
  g_return_if_fail (KV_IS_REDIS_CONNECTION (self));

  close_with_error (self, g_error_new (G_IO_ERROR, G_IO_ERROR_CLOSED,
                                       "Connection to redis server %s closed: %s",
                                       self->address, why));
}

/* ---- replies ------------------------------------------------------------- */

/* @op's reply is in: it leaves the sent queue, and the next op's reply is
 * due from now. */
static void
reply_done (KvRedisConnection *self,
            KvRedisOp         *op)
{
  g_queue_unlink (&self->sent, &op->link);
  self->reply_due = g_get_monotonic_time ();
}

static gsize
buffered (KvRedisConnection *self)
{
  return self->rend - self->rstart;
}

/* The reader keeps the bytes fed after the reply it returned; a GET's
 * value is parsed here, so they come back to the read buffer (which is
 * empty whenever the reader holds bytes: parse_command_reply feeds it all). */
static void
take_back_from_reader (KvRedisConnection *self)
{
  redisReader *r = self->reader;
  gsize left = r->len - r->pos;

  if (left == 0)
    return;
  g_assert (buffered (self) == 0);
  g_assert (r->ridx == -1);
  g_assert (left <= READ_BUFFER_SIZE);
  memcpy (self->rbuf, r->buf + r->pos, left);
  self->rstart = 0;
  self->rend = left;
  r->pos = r->len;
}

/* A command's reply through the reader. Returns FALSE when more bytes are
 * needed (or the connection closed). */
static gboolean
parse_command_reply (KvRedisConnection *self,
                     KvRedisOp         *op)
{
  void *reply = NULL;

  /* A reply that announces more than any reply of ours can hold is
   * refused at its first line rather than waited for: the reader would
   * wait for all of it before calling the bounded functions above. */
  if (self->reader->ridx == -1 && self->reader->len == self->reader->pos && buffered (self) > 0 &&
      (self->rbuf[self->rstart] == '$' || self->rbuf[self->rstart] == '*'))
    {
      const char *line = (const char *) self->rbuf + self->rstart;
      const char *end = memchr (line, '\r', MIN (buffered (self), 32));
      gint64 announced;

      if (end == NULL && buffered (self) >= 32)
        {
          close_protocol_error (self, "reply line too long");
          return FALSE;
        }
      if (end != NULL)
        {
          announced = g_ascii_strtoll (line + 1, NULL, 10);
          if (announced > (line[0] == '$' ? (gint64) KV_REDIS_MAX_REPLY_BYTES :
                                            (gint64) KV_REDIS_MAX_REPLY_ELEMENTS))
            {
              close_protocol_error (self, "reply too large");
              return FALSE;
            }
        }
    }
  if (buffered (self) > 0)
    {
      if (redisReaderFeed (self->reader, (const char *) self->rbuf + self->rstart,
                           buffered (self)) != REDIS_OK)
        {
          close_protocol_error (self, "reader refused input");
          return FALSE;
        }
      self->rstart = self->rend = 0;
    }
  if (redisReaderGetReply (self->reader, &reply) != REDIS_OK)
    {
      close_protocol_error (self, self->reader->errstr[0] ? self->reader->errstr :
                                  "malformed reply");
      return FALSE;
    }
  if (reply == NULL)
    {
      if (self->reader->len - self->reader->pos > KV_REDIS_MAX_REPLY_BYTES + MAX_LINE)
        close_protocol_error (self, "reply too large");
      return FALSE;
    }
  reply_done (self, op);
  op->reply = reply;
  complete (self, op);
  return TRUE;
}

typedef enum {
  PARSE_MORE,       /* needs more bytes (or the connection closed) */
  PARSE_COMPLETED,  /* the op completed: it may be freed already */
  PARSE_CONTINUE,   /* the value follows */
} ParseStep;

/* Parses "$<len>\r\n", "-<error>\r\n" at the head of the read buffer. */
static ParseStep
parse_get_line (KvRedisConnection *self,
                KvRedisOp         *op)
{
  const char *start = (const char *) self->rbuf + self->rstart;
  const char *end = memchr (start, '\n', MIN (buffered (self), MAX_LINE));
  gsize line_len;
  gint64 len;
  char *endptr;

  if (end == NULL)
    {
      if (buffered (self) >= MAX_LINE)
        close_protocol_error (self, "reply line too long");
      return PARSE_MORE;
    }
  if (end == start || end[-1] != '\r')
    {
      close_protocol_error (self, "line not ended by CRLF");
      return PARSE_MORE;
    }
  line_len = end - start + 1;

  switch (start[0])
    {
    case '-':
      /* freeReplyObject() frees with free() */
      op->reply = calloc (1, sizeof (redisReply));
      op->reply->type = REDIS_REPLY_ERROR;
      op->reply->len = line_len - 3;
      op->reply->str = malloc (line_len - 2);
      memcpy (op->reply->str, start + 1, line_len - 3);
      op->reply->str[line_len - 3] = '\0';
      self->rstart += line_len;
      reply_done (self, op);
      complete (self, op);
      return PARSE_COMPLETED;

    case '$':
      if (start[1] == '-' && line_len == 5 && start[2] == '1')
        {
          self->rstart += line_len;
          op->get_status = KV_REDIS_GET_NIL;
          reply_done (self, op);
          complete (self, op);
          return PARSE_COMPLETED;
        }
      if (!g_ascii_isdigit (start[1]))
        break;
      len = g_ascii_strtoll (start + 1, &endptr, 10);
      if (endptr != end - 1 || len < 0)
        break;
      /* a poison value under the key (a string far longer than a chunk
       * record) is dropped as it streams in, and deleted by the tier: the
       * connection and its other commands go on */
      if ((guint64) len > KV_REDIS_MAX_DISCARD_BYTES)
        {
          close_protocol_error (self, "GET value larger than any value a server holds");
          return PARSE_MORE;
        }
      self->rstart += line_len;
      op->value_len = len;
      op->body_pos = 0;
      if ((gsize) len == op->header_len + op->payload_len)
        {
          op->state = GET_HEADER;
          if (op->payload_hasher != NULL)
            kv_chunk_hasher_reset (op->payload_hasher);
        }
      else
        {
          op->state = GET_DISCARD;
          op->discard = (gsize) len;
        }
      return PARSE_CONTINUE;

    default:
      break;
    }
  close_protocol_error (self, "unexpected reply to GET");
  return PARSE_MORE;
}

/* Moves buffered value bytes to the op's destination. Returns FALSE when
 * more bytes are needed. */
static gboolean
parse_get_reply (KvRedisConnection *self,
                 KvRedisOp         *op)
{
  for (;;)
    {
      gsize n;

      switch (op->state)
        {
        case GET_LINE:
          switch (parse_get_line (self, op))
            {
            case PARSE_MORE:
              return FALSE;
            case PARSE_COMPLETED:
              return TRUE;  /* nil or an error reply; @op may be gone */
            default:
              break;
            }
          break;

        case GET_HEADER:
        case GET_PAYLOAD:
          {
            guint8 *dest = op->state == GET_HEADER ? op->dest_header : op->dest_payload;
            gsize size = op->state == GET_HEADER ? op->header_len : op->payload_len;

            if (op->body_pos < size)
              {
                n = MIN (size - op->body_pos, buffered (self));
                if (n == 0)
                  return FALSE;
                memcpy (dest + op->body_pos, self->rbuf + self->rstart, n);
                /* hashed while the piece is still in this core's cache */
                if (op->state == GET_PAYLOAD && op->payload_hasher != NULL)
                  kv_chunk_hasher_update (op->payload_hasher, dest + op->body_pos, n);
                self->rstart += n;
                op->body_pos += n;
              }
            if (op->body_pos == size)
              {
                op->state = op->state == GET_HEADER ? GET_PAYLOAD : GET_TRAILER;
                op->body_pos = 0;
              }
          }
          break;

        case GET_DISCARD:
          n = MIN (op->discard, buffered (self));
          self->rstart += n;
          op->discard -= n;
          if (op->discard > 0)
            return FALSE;
          op->state = GET_TRAILER;
          break;

        case GET_TRAILER:
          if (buffered (self) < 2)
            return FALSE;
          if (self->rbuf[self->rstart] != '\r' || self->rbuf[self->rstart + 1] != '\n')
            {
              close_protocol_error (self, "GET value not ended by CRLF");
              return FALSE;
            }
          self->rstart += 2;
          op->get_status = op->value_len == op->header_len + op->payload_len ?
                           KV_REDIS_GET_FOUND : KV_REDIS_GET_WRONG_SIZE;
          reply_done (self, op);
          complete (self, op);
          return TRUE;

        default:
          g_assert_not_reached ();
        }
    }
}

static void
process_replies (KvRedisConnection *self)
{
  g_autoptr(GObject) keep = g_object_ref (G_OBJECT (self));

  while (self->state != KV_REDIS_CONNECTION_CLOSED)
    {
      GList *head = self->sent.head;
      KvRedisOp *op;

      if (head == NULL)
        {
          if (buffered (self) > 0 || self->reader->len > self->reader->pos)
            close_protocol_error (self, "reply to no command");
          return;
        }
      op = head->data;
      if (op->kind == KV_REDIS_OP_GET_INTO)
        {
          take_back_from_reader (self);
          if (!parse_get_reply (self, op))
            return;
        }
      else if (!parse_command_reply (self, op))
        return;
    }
}

/* ---- reading ------------------------------------------------------------- */

/* Where the next bytes go: into the head op's slot when a GET's value is
 * due and nothing is buffered (*@into set), else into the read buffer.
 * FALSE when the connection closed instead (a reply line too long). */
static gboolean
read_destination (KvRedisConnection  *self,
                  KvRedisOp         **into,
                  guint8            **dest,
                  gsize              *size)
{
  KvRedisOp *head = self->sent.head != NULL ? self->sent.head->data : NULL;

  *into = NULL;
  if (head != NULL && head->kind == KV_REDIS_OP_GET_INTO && buffered (self) == 0 &&
      (head->state == GET_HEADER || head->state == GET_PAYLOAD) &&
      self->reader->len == self->reader->pos)
    {
      *into = head;
      *dest = (head->state == GET_HEADER ? head->dest_header : head->dest_payload) + head->body_pos;
      *size = (head->state == GET_HEADER ? head->header_len : head->payload_len) - head->body_pos;
      return TRUE;
    }
  if (self->rstart > 0)
    {
      memmove (self->rbuf, self->rbuf + self->rstart, buffered (self));
      self->rend -= self->rstart;
      self->rstart = 0;
    }
  if (self->rend == READ_BUFFER_SIZE)
    {
      /* only a GET line can fill it unparsed; parse_get_line refused it */
      close_protocol_error (self, "reply line too long");
      return FALSE;
    }
  *dest = self->rbuf + self->rend;
  *size = READ_BUFFER_SIZE - self->rend;
  return TRUE;
}

/* @n bytes (or @error) came from a read into @into's destination (NULL:
 * the read buffer); the replies they complete are processed. FALSE when
 * the connection closed. */
static gboolean
got_bytes (KvRedisConnection *self,
           KvRedisOp         *into,
           gssize             n,
           GError            *error)
{
  g_autoptr(GError) owned = error;

  if (n <= 0)
    {
      if (owned == NULL)
        owned = g_error_new (G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                             "Redis server %s closed the connection", self->address);
      else
        g_prefix_error (&owned, "Redis server %s: ", self->address);
      close_with_error (self, g_steal_pointer (&owned));
      return FALSE;
    }
  if (into != NULL)
    {
      /* read straight into the destination: hashed as it landed */
      if (into->state == GET_PAYLOAD && into->payload_hasher != NULL)
        kv_chunk_hasher_update (into->payload_hasher, into->dest_payload + into->body_pos, n);
      into->body_pos += n;
    }
  else
    self->rend += n;
  process_replies (self);
  return self->state == KV_REDIS_CONNECTION_READY;
}

/* A stream that cannot be polled: one asynchronous read at a time. */
static void
read_done (GObject      *source,
           GAsyncResult *result,
           gpointer      user_data)
{
  KvRedisConnection *self = user_data;
  GError *error = NULL;
  KvRedisOp *into = self->reading_into;
  gssize n;

  n = g_input_stream_read_finish (G_INPUT_STREAM (source), result, &error);
  self->reading = FALSE;
  self->reading_into = NULL;

  if (self->state == KV_REDIS_CONNECTION_CLOSED)
    {
      /* the op whose destination the read was filling fails now */
      if (into != NULL)
        fail_op (self, into, self->error);
      g_clear_error (&error);
      g_object_unref (self);
      return;
    }
  /* the read is over (reading_into is clear): on an error @into fails
   * with the rest */
  if (got_bytes (self, into, n, error))
    start_read (self);
  g_object_unref (self);
}

/* Reads at most this many times in a row before the I/O thread's other
 * connections and timers get their turn. */
#define READS_PER_TURN 32

/* A pollable stream: reads without blocking for as long as bytes are
 * there (up to READS_PER_TURN times). */
static void
read_available (KvRedisConnection *self)
{
  GPollableInputStream *pollable = G_POLLABLE_INPUT_STREAM (self->input);
  g_autoptr(GObject) keep = NULL;

  /* a reply's callback may send, and sending reads: no second loop */
  if (self->reading || self->state != KV_REDIS_CONNECTION_READY)
    return;
  keep = g_object_ref (G_OBJECT (self));
  self->reading = TRUE;
  for (guint turn = 0; turn < READS_PER_TURN && self->state == KV_REDIS_CONNECTION_READY; turn++)
    {
      GError *error = NULL;
      KvRedisOp *into;
      guint8 *dest;
      gsize size;
      gssize n;

      if (!read_destination (self, &into, &dest, &size))
        break;
      n = g_pollable_input_stream_read_nonblocking (pollable, dest, size, NULL, &error);
      if (n < 0 && g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
        {
          g_clear_error (&error);
          break;
        }
      if (!got_bytes (self, into, n, error))
        break;
    }
  self->reading = FALSE;
}

static gboolean
readable (GObject  *stream,
          gpointer  user_data)
{
  read_available (user_data);
  return G_SOURCE_CONTINUE;
}

/* Keeps reading while connected: into the slot when a GET's value is due
 * and nothing is buffered, else into the read buffer. A pollable stream
 * (TCP, TLS) has one source for the connection's life, which reads
 * whenever bytes are there: no GTask, cancellable or source per read, and
 * never a read in flight when the connection closes. */
static void
start_read (KvRedisConnection *self)
{
  KvRedisOp *into;
  guint8 *dest;
  gsize size;

  if (self->state != KV_REDIS_CONNECTION_READY)
    return;
  if (G_IS_POLLABLE_INPUT_STREAM (self->input) &&
      g_pollable_input_stream_can_poll (G_POLLABLE_INPUT_STREAM (self->input)))
    {
      if (self->read_source == NULL)
        {
          self->read_source = g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM (self->input),
                                                                      NULL);
          g_source_set_callback (self->read_source, G_SOURCE_FUNC (readable), self, NULL);
          g_source_attach (self->read_source, self->context);
        }
      return;
    }
  if (self->reading || !read_destination (self, &into, &dest, &size))
    return;
  self->reading = TRUE;
  self->reading_into = into;
  g_input_stream_read_async (self->input, dest, size, G_PRIORITY_DEFAULT, self->cancellable,
                             read_done, g_object_ref (self));
}

/* ---- writing ------------------------------------------------------------- */

/* The batch just written: its commands are the tail of @sent, after
 * every earlier batch's (a reply may have taken some from its head
 * already): only they are walked, not the thousands of commands waiting
 * for replies. */
static void
batch_sent (KvRedisConnection *self)
{
  for (GList *l = self->sent.tail; l != NULL; l = l->prev)
    {
      KvRedisOp *op = l->data;

      if (op->where != WHERE_WRITING)
        break;
      op->where = WHERE_SENT;
    }
  self->n_vectors = self->vector_pos = 0;
}

/* Takes the next pending commands into a batch of vectors (none: 0).
 * FALSE when the connection closed meanwhile. */
static gboolean
fill_batch (KvRedisConnection *self)
{
  guint n = 0;

  while (self->pending.head != NULL && n + 4 <= MAX_VECTORS)
    {
      KvRedisOp *op = self->pending.head->data;

      g_queue_unlink (&self->pending, &op->link);
      if (op->prepare != NULL && !op->prepare (op, op->user_data))
        {
          op->error = g_error_new (G_IO_ERROR, G_IO_ERROR_CANCELLED,
                                   "The command to redis server %s was cancelled", self->address);
          complete (self, op);
          if (self->state != KV_REDIS_CONNECTION_READY)
            return FALSE;
          continue;
        }
      self->vectors[n++] = (GOutputVector) { op->command, op->command_len };
      if (op->kind == KV_REDIS_OP_SET)
        {
          self->vectors[n++] = (GOutputVector) { op->header, op->header_len };
          self->vectors[n++] = (GOutputVector) { op->payload, op->payload_len };
          self->vectors[n++] = (GOutputVector) { op->suffix, op->suffix_len };
        }
      op->where = WHERE_WRITING;
      if (self->sent.length == 0)
        self->reply_due = g_get_monotonic_time ();
      g_queue_push_tail_link (&self->sent, &op->link);
    }
  self->n_vectors = n;
  self->vector_pos = 0;
  return TRUE;
}

/* Moves the batch on by @written bytes. */
static void
advance_batch (KvRedisConnection *self,
               gsize              written)
{
  while (written > 0)
    {
      GOutputVector *v = &self->vectors[self->vector_pos];
      gsize take = MIN (written, v->size);

      v->buffer = (const guint8 *) v->buffer + take;
      v->size -= take;
      written -= take;
      if (v->size == 0)
        self->vector_pos++;
    }
  while (self->vector_pos < self->n_vectors && self->vectors[self->vector_pos].size == 0)
    self->vector_pos++;
}

/* A stream that cannot be polled: one asynchronous write per batch. */
static void
write_done (GObject      *source,
            GAsyncResult *result,
            gpointer      user_data)
{
  KvRedisConnection *self = user_data;
  g_autoptr(GError) error = NULL;

  self->writing = FALSE;
  if (!g_output_stream_writev_all_finish (G_OUTPUT_STREAM (source), result, NULL, &error))
    {
      g_prefix_error (&error, "Redis server %s: ", self->address);
      close_with_error (self, g_steal_pointer (&error));
      g_object_unref (self);
      return;
    }
  batch_sent (self);
  start_write (self);
  g_object_unref (self);
}

static gboolean
writable (GObject  *stream,
          gpointer  user_data)
{
  KvRedisConnection *self = user_data;

  g_clear_pointer (&self->write_source, g_source_unref);
  self->writing = FALSE;
  start_write (self);
  return G_SOURCE_REMOVE;
}

/* Batches written before the I/O thread's other connections and timers
 * get their turn. */
#define BATCHES_PER_TURN 16

/* Writes the pending commands in batches of vectors. A pollable stream
 * (TCP, TLS) is written without blocking for as long as it takes bytes,
 * and a source awaits room for the rest: no GTask per write. Commands
 * sent meanwhile (a cancelled command's completion may send) join the
 * next batch. */
static void
start_write (KvRedisConnection *self)
{
  g_autoptr(GObject) keep = NULL;
  GPollableOutputStream *pollable;
  guint batches = 0;

  if (self->writing || self->state != KV_REDIS_CONNECTION_READY)
    return;

  /* a cancelled command's completion may drop the last other reference */
  keep = g_object_ref (G_OBJECT (self));
  self->writing = TRUE;
  if (!G_IS_POLLABLE_OUTPUT_STREAM (self->output) ||
      !g_pollable_output_stream_can_poll (G_POLLABLE_OUTPUT_STREAM (self->output)))
    {
      if (!fill_batch (self) || self->n_vectors == 0)
        {
          self->writing = FALSE;
          return;
        }
      g_output_stream_writev_all_async (self->output, self->vectors, self->n_vectors,
                                        G_PRIORITY_DEFAULT, self->cancellable, write_done,
                                        g_object_ref (self));
      start_read (self);
      return;
    }

  pollable = G_POLLABLE_OUTPUT_STREAM (self->output);
  while (self->state == KV_REDIS_CONNECTION_READY)
    {
      g_autoptr(GError) error = NULL;
      GPollableReturn ret = G_POLLABLE_RETURN_OK;
      gsize written = 0;

      if (self->vector_pos == self->n_vectors)
        {
          if (batches == BATCHES_PER_TURN)
            ret = G_POLLABLE_RETURN_WOULD_BLOCK;
          else if (!fill_batch (self))
            break;
          else if (self->n_vectors == 0)
            break;
          batches++;
        }
      if (self->vector_pos < self->n_vectors)
        ret = g_pollable_output_stream_writev_nonblocking (pollable,
                                                           self->vectors + self->vector_pos,
                                                           self->n_vectors - self->vector_pos,
                                                           &written, NULL, &error);
      if (ret == G_POLLABLE_RETURN_FAILED)
        {
          g_prefix_error (&error, "Redis server %s: ", self->address);
          close_with_error (self, g_steal_pointer (&error));
          return;
        }
      if (ret == G_POLLABLE_RETURN_WOULD_BLOCK || written == 0)
        {
          self->write_source = g_pollable_output_stream_create_source (pollable, NULL);
          g_source_set_callback (self->write_source, G_SOURCE_FUNC (writable), self, NULL);
          g_source_attach (self->write_source, self->context);
          start_read (self);
          return;
        }
      advance_batch (self, written);
      if (self->vector_pos == self->n_vectors)
        batch_sent (self);
    }
  self->writing = FALSE;
  start_read (self);
}

/* Queues @op (the caller keeps it alive until its done callback). On a
 * closed connection it completes at once with the connection's error. */
void
kv_redis_connection_send (KvRedisConnection *self,
                          KvRedisOp         *op)
{
  g_return_if_fail (KV_IS_REDIS_CONNECTION (self));

  op->link.data = op;
  op->link.prev = op->link.next = NULL;
  op->state = GET_LINE;
  op->body_pos = 0;
  op->get_status = KV_REDIS_GET_NONE;
  if (self->state == KV_REDIS_CONNECTION_CLOSED)
    {
      fail_op (self, op, self->error);
      return;
    }
  op->where = WHERE_PENDING;
  g_queue_push_tail_link (&self->pending, &op->link);
  start_write (self);
}

/* Withdraws @op: unsent, it completes cancelled; being written or
 * written, nothing happens and its reply completes it. A command being
 * written is sent whole: closing the connection to stop it would fail
 * every other command on it and leave the server unreachable for the
 * reconnect wait, and its bytes stay valid (the redis tier cannot call
 * stores back, so the manager keeps their slots pinned until it answers:
 * KvSecondaryTier:can-cancel-stores). */
void
kv_redis_connection_abort (KvRedisConnection *self,
                           KvRedisOp         *op)
{
  g_return_if_fail (KV_IS_REDIS_CONNECTION (self));

  switch (op->where)
    {
    case WHERE_PENDING:
      g_queue_unlink (&self->pending, &op->link);
      op->error = g_error_new (G_IO_ERROR, G_IO_ERROR_CANCELLED,
                               "The command to redis server %s was cancelled", self->address);
      complete (self, op);
      break;
    default:
      break;
    }
}

/* ---- connecting ---------------------------------------------------------- */

static void
startup_done (KvRedisOp *op,
              gpointer   user_data)
{
  KvRedisConnection *self = user_data;
  self->n_startup--;
  if (op->error == NULL && kv_redis_op_is_error (op, NULL))
    {
      /* AUTH's refusal names itself: "WRONGPASS invalid username-password
       * pair", "NOAUTH ...", "ERR ... SELECT ..." */
      close_with_error (self, g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                           "Redis server %s refused the connection's setup: %s",
                                           self->address, op->reply->str));
    }
  if (self->n_startup == 0 && self->state == KV_REDIS_CONNECTION_READY)
    g_signal_emit (self, signals[SIGNAL_READY], 0);
}

static void
queue_startup (KvRedisConnection *self,
               int                argc,
               const char       **argv)
{
  KvRedisOp *op = &self->startup[self->n_startup++];
  int len;

  len = redisFormatCommandArgv (&op->command, argc, argv, NULL);
  g_assert (len > 0);
  op->command_len = len;
  op->kind = KV_REDIS_OP_COMMAND;
  op->done = startup_done;
  op->user_data = self;
  op->link.data = op;
  op->where = WHERE_PENDING;
  g_queue_push_tail_link (&self->pending, &op->link);
}

static void
connected (GObject      *source,
           GAsyncResult *result,
           gpointer      user_data)
{
  KvRedisConnection *self = user_data;
  g_autoptr(GError) error = NULL;
  GSocketConnection *connection;

  connection = g_socket_client_connect_to_host_finish (G_SOCKET_CLIENT (source), result, &error);
  if (self->config.n_unfinished_io != NULL)
    g_atomic_int_add (self->config.n_unfinished_io, -1);
  if (self->state == KV_REDIS_CONNECTION_CLOSED)
    {
      g_clear_object (&connection);
      g_object_unref (self);
      return;
    }
  if (connection == NULL)
    {
      g_prefix_error (&error, "Cannot connect to redis server %s: ", self->address);
      close_with_error (self, g_steal_pointer (&error));
      g_object_unref (self);
      return;
    }
  if (self->connect_timeout != NULL)
    {
      g_source_destroy (self->connect_timeout);
      g_clear_pointer (&self->connect_timeout, g_source_unref);
    }
  {
    GSocket *socket = g_socket_connection_get_socket (connection);

    g_socket_set_option (socket, IPPROTO_TCP, TCP_NODELAY, 1, NULL);
  }
  self->stream = G_IO_STREAM (connection);
  self->input = g_io_stream_get_input_stream (self->stream);
  self->output = g_io_stream_get_output_stream (self->stream);
  self->state = KV_REDIS_CONNECTION_READY;
  if (self->n_startup == 0)
    g_signal_emit (self, signals[SIGNAL_READY], 0);
  start_write (self);
  start_read (self);
  g_object_unref (self);
}

static void
client_event (GSocketClient      *client,
              GSocketClientEvent  event,
              GSocketConnectable *connectable,
              GIOStream          *connection,
              gpointer            user_data)
{
  KvRedisConnection *self = user_data;

  if (event == G_SOCKET_CLIENT_TLS_HANDSHAKING && self->config.tls_database != NULL)
    g_tls_connection_set_database (G_TLS_CONNECTION (connection), self->config.tls_database);
}

static gboolean
connect_timed_out (gpointer user_data)
{
  KvRedisConnection *self = user_data;

  g_clear_pointer (&self->connect_timeout, g_source_unref);
  close_with_error (self, g_error_new (G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                       "Cannot connect to redis server %s: no answer in %u ms",
                                       self->address, self->config.connect_timeout_ms));
  return G_SOURCE_REMOVE;
}

static void
start_connect (KvRedisConnection *self)
{
  g_autoptr(GSocketClient) client = g_socket_client_new ();

  /* straight to the server: no system proxy between a cache and its store */
  g_socket_client_set_enable_proxy (client, FALSE);

  if (self->config.tls)
    {
      g_socket_client_set_tls (client, TRUE);
      g_signal_connect_object (client, "event", G_CALLBACK (client_event), self, 0);
    }
  if (self->config.connect_timeout_ms > 0)
    {
      self->connect_timeout = g_timeout_source_new (self->config.connect_timeout_ms);
      g_source_set_callback (self->connect_timeout, connect_timed_out, self, NULL);
      g_source_attach (self->connect_timeout, self->context);
    }
  if (self->config.n_unfinished_io != NULL)
    g_atomic_int_inc (self->config.n_unfinished_io);
  g_socket_client_connect_to_host_async (client, self->host, self->port, self->cancellable,
                                         connected, g_object_ref (self));
}

/* ---- GObject ------------------------------------------------------------- */

static void
kv_redis_connection_dispose (GObject *object)
{
  KvRedisConnection *self = KV_REDIS_CONNECTION (object);

  if (self->state != KV_REDIS_CONNECTION_CLOSED)
    kv_redis_connection_close (self, "connection disposed");
  G_OBJECT_CLASS (kv_redis_connection_parent_class)->dispose (object);
}

static void
kv_redis_connection_finalize (GObject *object)
{
  KvRedisConnection *self = KV_REDIS_CONNECTION (object);

  for (guint i = 0; i < G_N_ELEMENTS (self->startup); i++)
    kv_redis_op_clear (&self->startup[i]);
  g_clear_object (&self->stream);
  g_clear_object (&self->cancellable);
  g_clear_object (&self->config.tls_database);
  g_clear_error (&self->error);
  if (self->reader != NULL)
    redisReaderFree (self->reader);
  g_free (self->rbuf);
  g_free (self->host);
  g_free (self->address);
  g_free ((char *) self->config.username);
  g_free ((char *) self->config.password);
  g_main_context_unref (self->context);

  G_OBJECT_CLASS (kv_redis_connection_parent_class)->finalize (object);
}

static void
kv_redis_connection_class_init (KvRedisConnectionClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = kv_redis_connection_dispose;
  object_class->finalize = kv_redis_connection_finalize;

  /* Emitted when the connection's setup (AUTH, SELECT, READONLY) passed. */
  signals[SIGNAL_READY] = g_signal_new ("ready", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                        0, NULL, NULL, NULL, G_TYPE_NONE, 0);
  /* Emitted once, when the connection closed, after its ops failed. */
  signals[SIGNAL_CLOSED] = g_signal_new ("closed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                         0, NULL, NULL, NULL, G_TYPE_NONE, 0);
}

static void
kv_redis_connection_init (KvRedisConnection *self)
{
  self->cancellable = g_cancellable_new ();
  self->rbuf = g_malloc (READ_BUFFER_SIZE);
  self->reader = redisReaderCreate ();
  /* set before any reader parses, on the first connection's creation */
  if (g_once_init_enter (&default_functions_set))
    {
      default_functions = self->reader->fn;
      g_once_init_leave (&default_functions_set, 1);
    }
  self->reader_functions = *self->reader->fn;
  self->reader_functions.createString = bounded_create_string;
  self->reader_functions.createArray = bounded_create_array;
  self->reader->fn = &self->reader_functions;
}

/* Starts connecting to @host:@port on @context (call it there); ops sent
 * meanwhile wait for the connection and its setup. */
KvRedisConnection *
kv_redis_connection_new (const char                    *host,
                         guint16                        port,
                         const KvRedisConnectionConfig *config,
                         GMainContext                  *context)
{
  KvRedisConnection *self = g_object_new (KV_TYPE_REDIS_CONNECTION, NULL);
  char database[16];

  self->host = g_strdup (host);
  self->port = port;
  self->address = strchr (host, ':') ? g_strdup_printf ("[%s]:%u", host, port) :
                                       g_strdup_printf ("%s:%u", host, port);
  self->config = *config;
  self->config.username = g_strdup (config->username);
  self->config.password = g_strdup (config->password);
  if (config->tls_database != NULL)
    g_object_ref (config->tls_database);
  self->context = g_main_context_ref (context);
  self->state = KV_REDIS_CONNECTION_CONNECTING;

  if (config->password != NULL)
    {
      const char *argv[] = { "AUTH", config->username, config->password };

      if (config->username != NULL)
        queue_startup (self, 3, argv);
      else
        {
          argv[1] = config->password;
          queue_startup (self, 2, argv);
        }
    }
  if (config->database != 0)
    {
      const char *argv[] = { "SELECT", database };

      g_snprintf (database, sizeof database, "%u", config->database);
      queue_startup (self, 2, argv);
    }
  if (config->read_only)
    {
      const char *argv[] = { "READONLY" };

      queue_startup (self, 1, argv);
    }
  start_connect (self);
  return self;
}

/* A connection over @stream, already open (tests and fuzzing: one end of a
 * socket pair); no setup commands. Call it on @context's thread. */
KvRedisConnection *
kv_redis_connection_new_for_stream (GIOStream    *stream,
                                    const char   *name,
                                    GMainContext *context)
{
  KvRedisConnection *self = g_object_new (KV_TYPE_REDIS_CONNECTION, NULL);

  self->host = g_strdup (name);
  self->address = g_strdup (name);
  self->context = g_main_context_ref (context);
  self->stream = g_object_ref (stream);
  self->input = g_io_stream_get_input_stream (stream);
  self->output = g_io_stream_get_output_stream (stream);
  self->state = KV_REDIS_CONNECTION_READY;
  start_read (self);
  return self;
}

const char *
kv_redis_connection_get_address (KvRedisConnection *self)
{
  return self->address;
}

KvRedisConnectionState
kv_redis_connection_get_state (KvRedisConnection *self)
{
  return self->state;
}

/* Why it closed, once closed. */
const GError *
kv_redis_connection_get_error (KvRedisConnection *self)
{
  return self->error;
}

/* How long the reply now due has been awaited, in µs (since its command
 * was written, or the reply before it came in): 0 when none is due. A
 * server that trickles its reply (a byte a second) is as stalled as a
 * silent one. */
gint64
kv_redis_connection_get_reply_wait_us (KvRedisConnection *self,
                                       gint64             now)
{
  if (self->state != KV_REDIS_CONNECTION_READY || self->sent.length == 0)
    return 0;
  return MAX (now - self->reply_due, 0);
}

/* Ops queued or awaiting a reply. */
guint
kv_redis_connection_get_n_ops (KvRedisConnection *self)
{
  return self->pending.length + self->sent.length;
}
