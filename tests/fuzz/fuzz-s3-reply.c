/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* The s3 tier's HTTP/1.1 framing (plugins/s3/kv-s3-connection.c) on
 * arbitrary bytes from a server. The input's first byte picks the request
 * ('H': a HEAD, anything else: a GET), the rest is all the server ever
 * sends before it closes its end of a socketpair.
 *
 * Whatever came, the exchange ends exactly once, promptly (the server's
 * close ends any reply still open: nothing may wait for bytes that cannot
 * come); a GET's body never lands past its 1000-byte destination, and
 * only after a 2xx head that did not announce another length; an error
 * body is kept up to its bound; a connection that ended an exchange with
 * anything unread is never reusable. */

#include "config.h"

#include "fuzz-common.h"

#include "kv-s3-connection.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEST_SIZE       1000
#define MAX_ERROR_BODY  (16 * 1024)

typedef struct
{
  guint8              dest[DEST_SIZE];
  gsize               landed;
  gsize               error_body;
  guint               status;
  gboolean            head_seen;
  guint               n_done;
  KvS3ExchangeResult  result;
} Exchange;

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

static gboolean
sink_reply_head (gpointer data,
                 guint    status,
                 gint64   content_length)
{
  Exchange *x = data;

  g_assert_false (x->head_seen);
  g_assert_cmpuint (status, >=, 200);
  g_assert_cmpuint (status, <=, 999);
  x->head_seen = TRUE;
  x->status = status;
  /* as the client: a 2xx object of another length is refused at its head */
  return status >= 300 || content_length < 0 || content_length == DEST_SIZE;
}

static guint8 *
sink_body_place (gpointer  data,
                 gsize    *len)
{
  Exchange *x = data;

  g_assert_true (x->head_seen);
  if (x->status >= 300 || x->landed == DEST_SIZE)
    return NULL;
  *len = DEST_SIZE - x->landed;
  return x->dest + x->landed;
}

static gboolean
sink_body_bytes (gpointer      data,
                 const guint8 *bytes,
                 gsize         n)
{
  Exchange *x = data;

  g_assert_true (x->head_seen);
  g_assert_cmpuint (n, >, 0);
  if (x->status >= 300)
    {
      g_assert_nonnull (bytes);
      x->error_body += n;
      return x->error_body <= MAX_ERROR_BODY;
    }
  if (bytes == NULL)
    {
      /* in place: within what body_place gave */
      g_assert_cmpuint (x->landed + n, <=, DEST_SIZE);
      x->landed += n;
      return TRUE;
    }
  if (x->landed + n > DEST_SIZE)
    return FALSE;
  memcpy (x->dest + x->landed, bytes, n);
  x->landed += n;
  return TRUE;
}

static void
sink_done (gpointer            data,
           KvS3ExchangeResult  result,
           const char         *detail)
{
  Exchange *x = data;

  x->n_done++;
  x->result = result;
  g_assert_true (result == KV_S3_EXCHANGE_OK || detail != NULL);
}

static const KvS3ExchangeSink sink = {
  .reply_head = sink_reply_head,
  .body_place = sink_body_place,
  .body_bytes = sink_body_bytes,
  .done = sink_done,
};

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  static const char request[] = "GET /bucket/key HTTP/1.1\r\nhost: fuzz\r\n\r\n";
  const guint8 *no_body[2] = { NULL, NULL };
  const gsize no_body_len[2] = { 0, 0 };
  gboolean head_request;
  g_autoptr(GMainContext) context = NULL;
  g_autoptr(GSocket) socket = NULL;
  KvS3Connection *connection;
  Exchange x = { 0 };
  gint64 start;
  int fds[2];

  /* what a socketpair's buffer holds without the writer blocking */
  if (size == 0 || size > 64 * 1024)
    return 0;
  head_request = data[0] == 'H';
  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  g_assert_cmpint (write (fds[1], data + 1, size - 1), ==, (gssize) (size - 1));
  shutdown (fds[1], SHUT_WR);

  context = g_main_context_new ();
  socket = g_socket_new_from_fd (fds[0], NULL);
  g_assert_nonnull (socket);
  connection = kv_s3_connection_new_for_socket (context, socket);
  start = g_get_monotonic_time ();
  kv_s3_connection_exchange (connection, request, strlen (request), no_body, no_body_len, head_request,
                             start + 10 * G_USEC_PER_SEC, &sink, &x);
  g_assert_cmpuint (x.n_done, ==, 0);
  while (x.n_done == 0)
    g_main_context_iteration (context, TRUE);
  /* the close ended it, not the deadline */
  g_assert_cmpint (x.result, !=, KV_S3_EXCHANGE_TIMED_OUT);
  g_assert_cmpint (g_get_monotonic_time () - start, <, 5 * G_USEC_PER_SEC);
  /* the server's close is there to see: never reused after it */
  g_assert_false (kv_s3_connection_is_reusable (connection));
  if (x.result == KV_S3_EXCHANGE_OK)
    {
      g_assert_true (x.head_seen);
      /* a HEAD's reply, a 204's or a 304's has no body */
      if (head_request || x.status == 204 || x.status == 304)
        g_assert_cmpuint (x.landed + x.error_body, ==, 0);
    }
  /* nothing more after the one done */
  while (g_main_context_iteration (context, FALSE))
    ;
  g_assert_cmpuint (x.n_done, ==, 1);
  kv_s3_connection_free (connection);
  while (g_main_context_iteration (context, FALSE))
    ;
  close (fds[1]);
  return 0;
}
