/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <gio/gio.h>

#include "bench-util.h"
#include "s3-own-framing.h"

/*
 * The floor under the s3 bench's CPU: the same requests as its libcurl
 * ceiling, over plain sockets with the HTTP/1.1 framing written here. A
 * PUT is one writev of the request head and the object, from the object's
 * own memory; a GET reads its head into a small buffer and its body
 * straight into the object's memory. Nothing else is copied, nothing is
 * allocated per request but the signed head. What this spends per GB is
 * what a tier that frames its own requests could get down to on the same
 * machine: the kernel's TCP (both ends of loopback), the poll, the
 * signing.
 *
 * Only what the bench needs: plain http, replies with a Content-Length,
 * every reply 200 (anything else fails the pass), keep-alive on every
 * connection.
 */

#define REPLY_HEAD_MAX 16384

typedef enum
{
  CONN_IDLE,
  CONN_SENDING,
  CONN_READING_HEAD,
  CONN_READING_BODY,
} ConnState;

typedef struct
{
  int        fd;
  ConnState  state;
  guint8    *object;            /* sent by a PUT, received by a GET */
  char      *request;           /* the request's head */
  gsize      request_len;
  gsize      request_sent;
  gsize      body_sent;
  char       reply[REPLY_HEAD_MAX];
  gsize      reply_len;
  gsize      body_len;
  gsize      body_got;
} Conn;

static int
connect_to (const char  *host,
            guint16      port,
            GError     **error)
{
  struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
  struct addrinfo *found = NULL;
  char service[8];
  int fd = -1, one = 1;

  g_snprintf (service, sizeof service, "%u", port);
  if (getaddrinfo (host, service, &hints, &found) != 0 || found == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_HOST_NOT_FOUND, "own framing: no address for %s", host);
      return -1;
    }
  fd = socket (found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect (fd, found->ai_addr, found->ai_addrlen) < 0)
    {
      int saved = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved), "own framing: connect to %s:%u: %s",
                   host, port, g_strerror (saved));
      if (fd >= 0)
        close (fd);
      freeaddrinfo (found);
      return -1;
    }
  freeaddrinfo (found);
  setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

/* The reply head in c->reply[0..head_end) is parsed: 200 and its
 * Content-Length, or an error. */
static gboolean
parse_reply_head (Conn        *c,
                  gsize        head_end,
                  gboolean     is_head,
                  gboolean     is_get,
                  gsize        object_size,
                  GError     **error)
{
  guint status = 0;
  gsize length = 0;
  gboolean has_length = FALSE;
  g_auto(GStrv) lines = NULL;

  c->reply[head_end] = '\0';
  lines = g_strsplit (c->reply, "\r\n", -1);
  if (sscanf (lines[0], "HTTP/1.1 %u", &status) != 1 || status != 200)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "own framing: reply \"%s\"", lines[0]);
      return FALSE;
    }
  for (guint i = 1; lines[i] != NULL; i++)
    if (g_ascii_strncasecmp (lines[i], "Content-Length:", 15) == 0)
      {
        length = g_ascii_strtoull (lines[i] + 15, NULL, 10);
        has_length = TRUE;
      }
  if (!has_length || (is_get && length != object_size))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "own framing: reply without the expected "
                   "Content-Length (%" G_GSIZE_FORMAT ")", length);
      return FALSE;
    }
  /* a HEAD's Content-Length is the object's; no body follows */
  c->body_len = is_head ? 0 : length;
  return TRUE;
}

/* Moves what the socket allows; returns 1 when the request is answered,
 * 0 when it waits for the socket, -1 on failure. */
static int
conn_step (Conn        *c,
           const char  *method,
           gsize        object_size,
           GError     **error)
{
  gboolean put = strcmp (method, "PUT") == 0, get = strcmp (method, "GET") == 0;

  for (;;)
    switch (c->state)
      {
      case CONN_SENDING:
        {
          struct iovec iov[2] = {
            { c->request + c->request_sent, c->request_len - c->request_sent },
            { c->object + c->body_sent, put ? object_size - c->body_sent : 0 },
          };
          ssize_t n = writev (c->fd, iov, 2);

          if (n < 0)
            {
              if (errno == EAGAIN || errno == EINTR)
                return 0;
              g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "own framing: send: %s",
                           g_strerror (errno));
              return -1;
            }
          if ((gsize) n <= iov[0].iov_len)
            c->request_sent += n;
          else
            {
              c->request_sent = c->request_len;
              c->body_sent += n - iov[0].iov_len;
            }
          if (c->request_sent == c->request_len && (!put || c->body_sent == object_size))
            {
              c->state = CONN_READING_HEAD;
              c->reply_len = 0;
            }
          break;
        }
      case CONN_READING_HEAD:
        {
          ssize_t n = recv (c->fd, c->reply + c->reply_len, sizeof c->reply - 1 - c->reply_len, 0);
          const char *end;
          gsize head_end, extra;

          if (n <= 0)
            {
              if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED, "own framing: reply head: %s",
                           n == 0 ? "connection closed" : g_strerror (errno));
              return -1;
            }
          c->reply_len += n;
          end = g_strstr_len (c->reply, c->reply_len, "\r\n\r\n");
          if (end == NULL)
            {
              if (c->reply_len == sizeof c->reply - 1)
                {
                  g_set_error (error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                               "own framing: reply head over %d bytes", REPLY_HEAD_MAX);
                  return -1;
                }
              break;
            }
          head_end = end + 4 - c->reply;
          extra = c->reply_len - head_end;
          /* parse_reply_head writes a NUL at head_end: move the body's
           * first bytes out first */
          if (get && extra > 0)
            memcpy (c->object, c->reply + head_end, MIN (extra, object_size));
          if (!parse_reply_head (c, head_end, strcmp (method, "HEAD") == 0, get, object_size, error))
            return -1;
          if (extra > c->body_len)
            {
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "own framing: more bytes than the reply's");
              return -1;
            }
          c->body_got = extra;
          c->state = CONN_READING_BODY;
          break;
        }
      case CONN_READING_BODY:
        {
          char scratch[4096];
          ssize_t n;

          if (c->body_got == c->body_len)
            {
              c->state = CONN_IDLE;
              return 1;
            }
          if (get)
            n = recv (c->fd, c->object + c->body_got, c->body_len - c->body_got, 0);
          else
            n = recv (c->fd, scratch, MIN (sizeof scratch, c->body_len - c->body_got), 0);
          if (n <= 0)
            {
              if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED, "own framing: reply body: %s",
                           n == 0 ? "connection closed" : g_strerror (errno));
              return -1;
            }
          c->body_got += n;
          break;
        }
      case CONN_IDLE:
      default:
        g_assert_not_reached ();
      }
}

static void
conn_start (Conn        *c,
            S3SignFunc   sign,
            gpointer     sign_data,
            const char  *path_prefix,
            const char  *method,
            guint64      index,
            gsize        object_size)
{
  gboolean put = strcmp (method, "PUT") == 0;
  g_autofree char *path = g_strdup_printf ("%s/%" G_GUINT64_FORMAT, path_prefix, index);
  g_autofree char *headers = sign (method, path, put, sign_data);

  g_free (c->request);
  if (put)
    c->request = g_strdup_printf ("%s %s HTTP/1.1\r\n%sContent-Length: %" G_GSIZE_FORMAT "\r\n\r\n", method,
                                  path, headers, object_size);
  else
    c->request = g_strdup_printf ("%s %s HTTP/1.1\r\n%s\r\n", method, path, headers);
  c->request_len = strlen (c->request);
  c->request_sent = 0;
  c->body_sent = 0;
  c->state = CONN_SENDING;
}

/**
 * s3_own_framing_pass:
 *
 * @method ("PUT", "GET" or "HEAD") for objects `@path_prefix/0` to
 * `@path_prefix/(@n_objects - 1)`, each of @object_size bytes, over
 * @n_connections keep-alive connections to @host:@port, each request
 * signed by @sign. A GET's object must come back whole; any reply but 200,
 * any connection lost, or @timeout_ms without progress on any connection
 * fails the pass.
 *
 * Returns: whether every request was answered; *@seconds the pass took
 *   and *@cpu_seconds this process spent in it, connecting not counted
 *   (the other clients keep their connections from pass to pass)
 */
gboolean
s3_own_framing_pass (const char  *host,
                     guint16      port,
                     guint        n_connections,
                     S3SignFunc   sign,
                     gpointer     sign_data,
                     const char  *path_prefix,
                     const char  *method,
                     guint64      n_objects,
                     gsize        object_size,
                     gint         timeout_ms,
                     double      *seconds,
                     double      *cpu_seconds,
                     GError     **error)
{
  g_autofree Conn *conns = g_new0 (Conn, n_connections);
  g_autofree struct pollfd *fds = g_new0 (struct pollfd, n_connections);
  gint64 start;
  double cpu_start;
  guint64 next = 0, done = 0;
  gboolean ok = TRUE;

  for (guint i = 0; i < n_connections; i++)
    conns[i].fd = -1;
  for (guint i = 0; i < n_connections && ok; i++)
    {
      conns[i].fd = connect_to (host, port, error);
      conns[i].object = g_malloc (object_size);
      memset (conns[i].object, 0x3c + i, object_size);
      ok = conns[i].fd >= 0;
    }
  start = g_get_monotonic_time ();
  cpu_start = bench_self_cpu_s ();
  while (ok && done < n_objects)
    {
      int ready;

      for (guint i = 0; i < n_connections; i++)
        {
          if (conns[i].state == CONN_IDLE && next < n_objects)
            conn_start (&conns[i], sign, sign_data, path_prefix, method, next++, object_size);
          fds[i].fd = conns[i].state == CONN_IDLE ? -1 : conns[i].fd;
          fds[i].events = conns[i].state == CONN_SENDING ? POLLOUT : POLLIN;
          fds[i].revents = 0;
        }
      ready = poll (fds, n_connections, timeout_ms);
      if (ready < 0 && errno != EINTR)
        {
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "own framing: poll: %s",
                       g_strerror (errno));
          ok = FALSE;
        }
      else if (ready == 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "own framing: %s: no reply in %d ms",
                       method, timeout_ms);
          ok = FALSE;
        }
      for (guint i = 0; i < n_connections && ok && ready > 0; i++)
        if (fds[i].revents != 0)
          {
            int r = conn_step (&conns[i], method, object_size, error);

            ok = r >= 0;
            done += r == 1;
          }
    }
  *seconds = (g_get_monotonic_time () - start) / 1e6;
  *cpu_seconds = bench_self_cpu_s () - cpu_start;
  for (guint i = 0; i < n_connections; i++)
    {
      if (conns[i].fd >= 0)
        close (conns[i].fd);
      g_free (conns[i].object);
      g_free (conns[i].request);
    }
  return ok;
}
