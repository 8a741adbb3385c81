/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-http-server.h"

#include <sys/resource.h>

#include "kv-accept-loop.h"

/*
 * ToolHttpServer:
 *
 * The bounded HTTP front of the kvtier command's servers (`kvtier
 * serve`'s /metrics and /health, `kvtier route`'s /route, /finish,
 * /nodes and /health): a libsoup 3 server whose connections are accepted
 * by a KvAcceptLoop and held to three bounds, so that strangers cannot
 * take the endpoint (or the process's descriptors) away from good
 * clients:
 *
 * - at most max-connections at once, and never more than a sixteenth of
 *   the descriptor limit (at least 2); a connection beyond closes the
 *   oldest one that has not sent a whole request yet (a client sends its
 *   request as it connects, a slow or idle stranger holds on), else the
 *   one idle longest between two requests, never one being answered; with
 *   none to close, the newcomer is closed;
 * - each connection must finish a request within timeout_ms of its start
 *   or of its previous answer, however slowly it trickles its bytes: a
 *   deadline, not an idle timer;
 * - accepting backs off when descriptors run out (KvAcceptLoop) instead
 *   of spinning on a listening socket that stays readable.
 *
 * libsoup's own listener is not used: it leaks the GSocket of every
 * connection it accepts (libsoup 3.2) and cannot back off. Everything
 * runs on the thread-default main context of the thread that created
 * it, which the caller iterates; handlers are added to
 * tool_http_server_get_soup() before the context first runs.
 */

#define BACKLOG 128

typedef struct
{
  ToolHttpServer    *server;
  GSocketConnection *connection;
  GSocketAddress    *remote;       /* the key libsoup's messages give back */
  GSource           *timer;
  GList              link;         /* in server->conns, least recently active first */
  gboolean           in_request;   /* a request was read and is being answered */
  gboolean           answered;     /* a request was answered: a client, idle between two */
} Conn;

struct _ToolHttpServer
{
  char         *name;
  char         *address;
  SoupServer   *soup;
  KvAcceptLoop *accept;
  GQueue        conns;
  guint         max_connections;
  guint         timeout_ms;
};

/* The connection leaves the books (libsoup may still hold it, and frees
 * it when it sees the end). */
static void
conn_forget (Conn *conn)
{
  g_queue_unlink (&conn->server->conns, &conn->link);
  if (conn->timer != NULL)
    {
      g_source_destroy (conn->timer);
      g_source_unref (conn->timer);
    }
  g_object_unref (conn->remote);
  g_object_unref (conn->connection);
  g_free (conn);
}

/* Ends @conn: libsoup reads the end of the stream and lets it go. */
static void
conn_drop (Conn *conn)
{
  GSocket *socket = g_socket_connection_get_socket (conn->connection);

  if (!g_socket_is_closed (socket))
    g_socket_shutdown (socket, TRUE, TRUE, NULL);
  conn_forget (conn);
}

static gboolean
conn_timed_out (gpointer data)
{
  Conn *conn = data;

  g_clear_pointer (&conn->timer, g_source_unref);
  if (!g_socket_is_closed (g_socket_connection_get_socket (conn->connection)))
    g_debug ("%s: connection closed: no request answered within %u ms",
             conn->server->name, conn->server->timeout_ms);
  conn_drop (conn);
  return G_SOURCE_REMOVE;
}

/* The deadline of the next request, from now. */
static void
conn_arm (Conn *conn)
{
  if (conn->timer != NULL)
    {
      g_source_destroy (conn->timer);
      g_source_unref (conn->timer);
    }
  conn->timer = g_timeout_source_new (conn->server->timeout_ms);
  g_source_set_callback (conn->timer, conn_timed_out, conn, NULL);
  g_source_attach (conn->timer, NULL);
}

static Conn *
conn_of (ToolHttpServer    *self,
         SoupServerMessage *msg)
{
  GSocketAddress *remote = soup_server_message_get_remote_address (msg);

  for (GList *l = self->conns.head; l != NULL; l = l->next)
    if (((Conn *) l->data)->remote == remote)
      return l->data;
  return NULL;
}

/* A request came in full: its connection is not closed for room while
 * it is answered (its deadline still runs). */
static void
request_read (SoupServer        *soup,
              SoupServerMessage *msg,
              gpointer           data)
{
  Conn *conn = conn_of (data, msg);

  if (conn != NULL)
    conn->in_request = TRUE;
}

/* A request was answered (or failed): its connection has a new deadline,
 * and is the last to be closed for room. */
static void
request_finished (SoupServer        *soup,
                  SoupServerMessage *msg,
                  gpointer           data)
{
  ToolHttpServer *self = data;
  Conn *conn = conn_of (self, msg);

  if (conn == NULL)
    return;
  conn->in_request = FALSE;
  conn->answered = TRUE;
  g_queue_unlink (&self->conns, &conn->link);
  g_queue_push_tail_link (&self->conns, &conn->link);
  conn_arm (conn);
}

/* The connection to close for a new one (see the top); NULL: the
 * newcomer is refused. */
static Conn *
conn_to_close (ToolHttpServer *self)
{
  for (guint pass = 0; pass < 2; pass++)
    for (GList *l = self->conns.head; l != NULL; l = l->next)
      {
        Conn *conn = l->data;

        if (!conn->in_request && conn->answered == (pass == 1))
          return conn;
      }
  return NULL;
}

static void
incoming (KvAcceptLoop *loop,
          GSocket      *socket,
          gpointer      data)
{
  ToolHttpServer *self = data;
  g_autoptr(GSocket) owned = socket;
  g_autoptr(GSocketConnection) connection = NULL;
  g_autoptr(GSocketAddress) local = NULL;
  g_autoptr(GSocketAddress) remote = NULL;
  g_autoptr(GError) error = NULL;
  Conn *conn;

  /* the ones libsoup closed already */
  for (GList *l = self->conns.head; l != NULL;)
    {
      Conn *old = l->data;

      l = l->next;
      if (g_socket_is_closed (g_socket_connection_get_socket (old->connection)))
        conn_forget (old);
    }
  if (self->conns.length >= self->max_connections)
    {
      Conn *victim = conn_to_close (self);

      if (victim == NULL)
        {
          g_debug ("%s: %u connections, all answering: a new one is closed",
                   self->name, self->conns.length);
          g_socket_close (socket, NULL);
          return;
        }
      conn_drop (victim);
    }

  connection = g_socket_connection_factory_create_connection (socket);
  local = g_socket_get_local_address (socket, NULL);
  remote = g_socket_get_remote_address (socket, NULL);
  if (local == NULL || remote == NULL ||
      !soup_server_accept_iostream (self->soup, G_IO_STREAM (connection), local, remote, &error))
    {
      g_debug ("%s: connection dropped: %s", self->name,
               error != NULL ? error->message : "no address");
      g_socket_close (socket, NULL);
      return;
    }
  conn = g_new0 (Conn, 1);
  conn->server = self;
  conn->connection = g_steal_pointer (&connection);
  conn->remote = g_steal_pointer (&remote);
  conn->link.data = conn;
  g_queue_push_tail_link (&self->conns, &conn->link);
  conn_arm (conn);
}

/*
 * Serves HTTP on @address ("HOST:PORT"; port 0: one the kernel picks),
 * libsoup answering with @server_header, holding at most
 * @max_connections connections (fewer under a low descriptor limit), each
 * with @timeout_ms per request. @name names the server in log messages
 * ("kvtier serve: HTTP"). NULL with @error set if @address does not parse
 * or cannot be bound.
 */
ToolHttpServer *
tool_http_server_new (const char  *name,
                      const char  *address,
                      const char  *server_header,
                      guint        max_connections,
                      guint        timeout_ms,
                      GError     **error)
{
  g_autoptr(ToolHttpServer) self = NULL;
  g_autoptr(GSocketConnectable) connectable = NULL;
  g_autoptr(GSocketAddressEnumerator) enumerator = NULL;
  g_autoptr(GSocketAddress) socket_address = NULL;
  g_autofree char *host = NULL;
  struct rlimit limit = { RLIM_INFINITY, RLIM_INFINITY };
  GInetSocketAddress *bound;

  g_return_val_if_fail (address != NULL, NULL);
  g_return_val_if_fail (max_connections > 0 && timeout_ms > 0, NULL);

  connectable = g_network_address_parse (address, 0, error);
  if (connectable == NULL)
    return NULL;
  /* An IP address is taken as it is: enumerating it goes through GIO's
   * default resolver, which `kvtier route` was seen to block in forever
   * (1 start in ~15 on a loaded machine) while its subscriber threads
   * were connecting. Only a host name is resolved. */
  socket_address = g_inet_socket_address_new_from_string (
    g_network_address_get_hostname (G_NETWORK_ADDRESS (connectable)),
    g_network_address_get_port (G_NETWORK_ADDRESS (connectable)));
  if (socket_address == NULL)
    {
      enumerator = g_socket_connectable_enumerate (connectable);
      socket_address = g_socket_address_enumerator_next (enumerator, NULL, error);
    }
  if (socket_address == NULL)
    {
      if (error != NULL && *error == NULL)
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "%s names no address", address);
      return NULL;
    }

  self = g_new0 (ToolHttpServer, 1);
  self->name = g_strdup_printf ("%s %s", name, address);
  self->timeout_ms = timeout_ms;
  /* a sixteenth of the descriptors at most: the rest are the process's */
  self->max_connections = max_connections;
  if (getrlimit (RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    self->max_connections = (guint) MIN ((rlim_t) max_connections, MAX (limit.rlim_cur / 16, 2));
  self->soup = soup_server_new ("server-header", server_header, NULL);
  g_signal_connect (self->soup, "request-read", G_CALLBACK (request_read), self);
  g_signal_connect (self->soup, "request-finished", G_CALLBACK (request_finished), self);
  g_signal_connect (self->soup, "request-aborted", G_CALLBACK (request_finished), self);
  self->accept = kv_accept_loop_new (self->name, socket_address, BACKLOG, NULL, incoming, self, error);
  if (self->accept == NULL)
    return NULL;
  bound = G_INET_SOCKET_ADDRESS (kv_accept_loop_get_local_address (self->accept));
  host = g_inet_address_to_string (g_inet_socket_address_get_address (bound));
  self->address = g_strdup_printf ("%s:%u", host, g_inet_socket_address_get_port (bound));
  return g_steal_pointer (&self);
}

/* The libsoup server, for its handlers. */
SoupServer *
tool_http_server_get_soup (ToolHttpServer *self)
{
  return self->soup;
}

/* The address it listens on, "HOST:PORT" with the port it got. */
const char *
tool_http_server_get_address (ToolHttpServer *self)
{
  return self->address;
}

/* The connections it holds at most (after the descriptor limit's cap). */
guint
tool_http_server_get_max_connections (ToolHttpServer *self)
{
  return self->max_connections;
}

/* The connections it holds now (some libsoup may have closed since the
 * last accept). */
guint
tool_http_server_get_n_connections (ToolHttpServer *self)
{
  return self->conns.length;
}

/* Stops accepting, closes every connection and frees it; iterates the
 * thread-default context until libsoup let its connections go. */
void
tool_http_server_free (ToolHttpServer *self)
{
  if (self == NULL)
    return;
  g_clear_pointer (&self->accept, kv_accept_loop_free);
  while (self->conns.head != NULL)
    conn_forget (self->conns.head->data);
  if (self->soup != NULL)
    {
      g_signal_handlers_disconnect_by_data (self->soup, self);
      soup_server_disconnect (self->soup);
      /* the connections it closed are freed from idles of this context */
      while (g_main_context_iteration (NULL, FALSE))
        ;
      g_clear_object (&self->soup);
    }
  g_free (self->address);
  g_free (self->name);
  g_free (self);
}
