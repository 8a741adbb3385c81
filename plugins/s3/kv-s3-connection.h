/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* One keep-alive HTTP/1.1 connection to a plain-http endpoint, framed
 * here rather than by libcurl, so that a request's body is sent from its
 * own buffers (the primary slot) and a reply's body lands straight in the
 * memory its sink names: no copy on either side. One exchange (request,
 * then reply) at a time, driven by a GSource of the context it was made
 * on; every reply bounded: its head (KV_S3_CONNECTION_MAX_HEAD), chunk
 * lines, and the exchange's deadline. */

#define KV_S3_CONNECTION_MAX_HEAD (64 * 1024)

typedef struct _KvS3Connection KvS3Connection;

typedef enum {
  KV_S3_EXCHANGE_OK,          /* a whole reply came */
  KV_S3_EXCHANGE_REFUSED,     /* no connection could be made */
  KV_S3_EXCHANGE_TIMED_OUT,   /* the deadline passed (connecting or before the whole reply) */
  KV_S3_EXCHANGE_NOTHING,     /* closed before the first byte of a reply */
  KV_S3_EXCHANGE_LOST,        /* the connection broke, or closed inside a reply */
  KV_S3_EXCHANGE_BAD_REPLY,   /* a reply that does not parse as HTTP/1.1 */
  KV_S3_EXCHANGE_ABORTED,     /* the sink refused the reply, or the request was cancelled */
} KvS3ExchangeResult;

/* What an exchange's reply goes to; @data is the exchange's. */
typedef struct
{
  /* polled before each send: TRUE stops the request (ABORTED) */
  gboolean (*cancelled)  (gpointer      data);
  /* nullable: the whole request went out (not said when the server
   * answered first) */
  void     (*request_sent) (gpointer    data);
  /* the reply's head came: its status and Content-Length (-1: none); FALSE
   * aborts */
  gboolean (*reply_head) (gpointer      data,
                          guint         status,
                          gint64        content_length);
  /* where the next body bytes may land in place, at most *len of them;
   * NULL: they go through body_bytes from a buffer of the connection */
  guint8  *(*body_place) (gpointer      data,
                          gsize        *len);
  /* @n body bytes came: at the place body_place gave (@bytes NULL), or at
   * @bytes; FALSE aborts */
  gboolean (*body_bytes) (gpointer      data,
                          const guint8 *bytes,
                          gsize         n);
  /* once per exchange, from the context's dispatch (never from within
   * kv_s3_connection_exchange()); @detail says what failed */
  void     (*done)       (gpointer            data,
                          KvS3ExchangeResult  result,
                          const char         *detail);
} KvS3ExchangeSink;

/* Starts connecting to @host:@port (a name under ".localhost" connects to
 * "localhost", as RFC 6761 has it); the first exchange may be given at
 * once. */
KvS3Connection *kv_s3_connection_new          (GMainContext           *context,
                                               const char             *host,
                                               guint16                 port,
                                               guint                   connect_timeout_ms);
/* Over @socket, already connected (a test's socketpair): the connection
 * takes a reference to it, and closes it when freed. */
KvS3Connection *kv_s3_connection_new_for_socket (GMainContext         *context,
                                                 GSocket              *socket);
/* Idle, open, and with nothing unread from the server (neither its close
 * nor stray bytes): another exchange may use it. */
gboolean        kv_s3_connection_is_reusable  (KvS3Connection         *self);
/* Sends @head (the request line and headers, up to the empty line) and
 * the body in @body / @body_len (two pieces, either empty), then reads the
 * reply into @sink; a reply that comes before the whole request went out
 * (a refusal at an upload's head) is read as the answer. A HEAD request's reply has no body whatever its
 * length says. @deadline: monotonic µs. */
void            kv_s3_connection_exchange     (KvS3Connection         *self,
                                               const char             *head,
                                               gsize                   head_len,
                                               const guint8 * const   *body,
                                               const gsize            *body_len,
                                               gboolean                head_request,
                                               gint64                  deadline,
                                               const KvS3ExchangeSink *sink,
                                               gpointer                data);
/* Closes it; an exchange under way ends without its done. */
void            kv_s3_connection_free         (KvS3Connection         *self);

G_END_DECLS
