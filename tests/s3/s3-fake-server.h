/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A scripted HTTP/1.1 server on 127.0.0.1 for the s3 tests: what a real
 * gateway never does (trickles, lies about lengths, garbage, refusals on
 * demand). Each connection runs in its own thread; each request is read
 * whole (request line, headers, a body of Content-Length bytes) and handed
 * to the test's handler, which writes whatever it likes. */

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct _S3FakeServer S3FakeServer;

typedef struct
{
  char       *method;
  char       *path;
  GHashTable *headers;    /* lower-case name → value */
  gsize       body_len;   /* bytes of body read (and dropped) */
  guint       index;      /* 0 for the server's first request */
  guint       connection; /* 0 for the server's first connection */
  GInputStream *in;       /* the connection's (a silent handler reads it) */
} S3FakeRequest;

/* Writes the reply to @out; FALSE closes the connection afterwards. */
typedef gboolean (*S3FakeHandler) (S3FakeServer        *server,
                                   const S3FakeRequest *request,
                                   GOutputStream       *out,
                                   gpointer             user_data);

S3FakeServer *s3_fake_server_new             (S3FakeHandler  handler,
                                              gpointer       user_data);
/* The handler runs once a request's head came, its body unread (a server
 * that refuses an upload at its head, as S3 may). */
void          s3_fake_server_set_reply_before_body (S3FakeServer *server,
                                                    gboolean      reply_before_body);
guint         s3_fake_server_get_port        (S3FakeServer  *server);
char         *s3_fake_server_get_endpoint    (S3FakeServer  *server);
guint         s3_fake_server_get_n_requests  (S3FakeServer  *server);
guint         s3_fake_server_get_n_connections (S3FakeServer *server);
guint         s3_fake_server_get_max_concurrent (S3FakeServer *server);
/* A copy of the headers of request @index, or NULL. */
GHashTable   *s3_fake_server_dup_headers     (S3FakeServer  *server,
                                              guint          index);
/* Stops accepting, closes every connection, waits for the threads. */
void          s3_fake_server_free            (S3FakeServer  *server);

/* Writes all of @data (the handler's helper); FALSE when the client left. */
gboolean      s3_fake_write                  (GOutputStream *out,
                                              const void    *data,
                                              gsize          len);
gboolean      s3_fake_write_str              (GOutputStream *out,
                                              const char    *text);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (S3FakeServer, s3_fake_server_free)

G_END_DECLS
