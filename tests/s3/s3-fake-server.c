/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "s3-fake-server.h"

#include <string.h>

struct _S3FakeServer
{
  S3FakeHandler  handler;
  gpointer       user_data;
  guint          port;
  GMainContext  *context;
  GMainLoop     *loop;
  GThread       *thread;
  GSocketService *service;

  GMutex         lock;
  GCond          cond;
  gboolean       ready;
  gboolean       stopping;
  gboolean       reply_before_body;
  guint          n_requests;
  guint          n_connections;
  guint          n_active;
  guint          max_active;
  GPtrArray     *sockets;           /* GSocket of live connections */
  GPtrArray     *request_headers;   /* GHashTable per request */
};

static void
request_clear (S3FakeRequest *request)
{
  g_free (request->method);
  g_free (request->path);
  g_clear_pointer (&request->headers, g_hash_table_unref);
}

/* Reads one request (its body unless @skip_body); FALSE at the end of
 * the connection. */
static gboolean
read_request (GDataInputStream *in,
              gboolean          skip_body,
              S3FakeRequest    *request)
{
  g_autofree char *line = g_data_input_stream_read_line (in, NULL, NULL, NULL);
  g_auto(GStrv) parts = NULL;
  guint64 length = 0;
  const char *value;

  if (line == NULL)
    return FALSE;
  g_strchomp (line);
  parts = g_strsplit (line, " ", 3);
  if (g_strv_length (parts) != 3)
    return FALSE;
  request->method = g_strdup (parts[0]);
  request->path = g_strdup (parts[1]);
  request->headers = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  for (;;)
    {
      g_autofree char *header = g_data_input_stream_read_line (in, NULL, NULL, NULL);
      char *colon;

      if (header == NULL)
        return FALSE;
      g_strchomp (header);
      if (header[0] == '\0')
        break;
      colon = strchr (header, ':');
      if (colon == NULL)
        continue;
      *colon = '\0';
      g_hash_table_replace (request->headers, g_ascii_strdown (header, -1),
                            g_strdup (g_strstrip (colon + 1)));
    }
  value = g_hash_table_lookup (request->headers, "content-length");
  if (value != NULL)
    g_ascii_string_to_unsigned (value, 10, 0, G_MAXUINT32, &length, NULL);
  while (!skip_body && request->body_len < length)
    {
      char buffer[65536];
      gssize n = g_input_stream_read (G_INPUT_STREAM (in), buffer,
                                      MIN (sizeof buffer, length - request->body_len), NULL, NULL);

      if (n <= 0)
        return FALSE;
      request->body_len += n;
    }
  return TRUE;
}

static gboolean
run_connection (GThreadedSocketService *service,
                GSocketConnection      *connection,
                GObject                *source_object,
                gpointer                user_data)
{
  S3FakeServer *server = user_data;
  GSocket *socket = g_socket_connection_get_socket (connection);
  g_autoptr(GDataInputStream) in = g_data_input_stream_new (g_io_stream_get_input_stream (G_IO_STREAM (connection)));
  GOutputStream *out = g_io_stream_get_output_stream (G_IO_STREAM (connection));
  guint connection_index;

  g_data_input_stream_set_newline_type (in, G_DATA_STREAM_NEWLINE_TYPE_CR_LF);
  g_filter_input_stream_set_close_base_stream (G_FILTER_INPUT_STREAM (in), FALSE);
  g_mutex_lock (&server->lock);
  if (server->stopping)
    {
      g_mutex_unlock (&server->lock);
      return TRUE;
    }
  connection_index = server->n_connections++;
  server->n_active++;
  server->max_active = MAX (server->max_active, server->n_active);
  g_ptr_array_add (server->sockets, g_object_ref (socket));
  g_mutex_unlock (&server->lock);

  for (;;)
    {
      S3FakeRequest request = { 0 };
      gboolean keep;

      if (!read_request (in, g_atomic_int_get (&server->reply_before_body), &request))
        {
          request_clear (&request);
          break;
        }
      g_mutex_lock (&server->lock);
      request.index = server->n_requests++;
      request.connection = connection_index;
      request.in = G_INPUT_STREAM (in);
      g_ptr_array_add (server->request_headers, g_hash_table_ref (request.headers));
      g_mutex_unlock (&server->lock);
      keep = server->handler (server, &request, out, server->user_data);
      request_clear (&request);
      if (!keep)
        break;
    }
  g_socket_shutdown (socket, TRUE, TRUE, NULL);
  g_mutex_lock (&server->lock);
  g_ptr_array_remove (server->sockets, socket);
  server->n_active--;
  g_cond_broadcast (&server->cond);
  g_mutex_unlock (&server->lock);
  return TRUE;
}

static gpointer
server_thread (gpointer data)
{
  S3FakeServer *server = data;
  g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) address = g_inet_socket_address_new (loopback, 0);
  g_autoptr(GSocketAddress) effective = NULL;
  g_autoptr(GError) error = NULL;

  g_main_context_push_thread_default (server->context);
  server->service = g_threaded_socket_service_new (64);
  g_signal_connect (server->service, "run", G_CALLBACK (run_connection), server);
  if (!g_socket_listener_add_address (G_SOCKET_LISTENER (server->service), address,
                                      G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL,
                                      &effective, &error))
    g_error ("fake S3 server: %s", error->message);
  server->port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (effective));
  g_socket_service_start (server->service);
  g_mutex_lock (&server->lock);
  server->ready = TRUE;
  g_cond_broadcast (&server->cond);
  g_mutex_unlock (&server->lock);
  g_main_loop_run (server->loop);
  g_socket_service_stop (server->service);
  g_socket_listener_close (G_SOCKET_LISTENER (server->service));
  while (g_main_context_pending (server->context))
    g_main_context_iteration (server->context, FALSE);
  g_main_context_pop_thread_default (server->context);
  return NULL;
}

S3FakeServer *
s3_fake_server_new (S3FakeHandler handler,
                    gpointer      user_data)
{
  S3FakeServer *server = g_new0 (S3FakeServer, 1);

  server->handler = handler;
  server->user_data = user_data;
  g_mutex_init (&server->lock);
  g_cond_init (&server->cond);
  server->sockets = g_ptr_array_new_with_free_func (g_object_unref);
  server->request_headers = g_ptr_array_new_with_free_func ((GDestroyNotify) g_hash_table_unref);
  server->context = g_main_context_new ();
  server->loop = g_main_loop_new (server->context, FALSE);
  server->thread = g_thread_new ("s3-fake-server", server_thread, server);
  g_mutex_lock (&server->lock);
  while (!server->ready)
    g_cond_wait (&server->cond, &server->lock);
  g_mutex_unlock (&server->lock);
  return server;
}

void
s3_fake_server_set_reply_before_body (S3FakeServer *server,
                                      gboolean      reply_before_body)
{
  g_atomic_int_set (&server->reply_before_body, reply_before_body);
}

guint
s3_fake_server_get_port (S3FakeServer *server)
{
  return server->port;
}

char *
s3_fake_server_get_endpoint (S3FakeServer *server)
{
  return g_strdup_printf ("http://127.0.0.1:%u", server->port);
}

guint
s3_fake_server_get_n_requests (S3FakeServer *server)
{
  guint n;

  g_mutex_lock (&server->lock);
  n = server->n_requests;
  g_mutex_unlock (&server->lock);
  return n;
}

guint
s3_fake_server_get_n_connections (S3FakeServer *server)
{
  guint n;

  g_mutex_lock (&server->lock);
  n = server->n_connections;
  g_mutex_unlock (&server->lock);
  return n;
}

guint
s3_fake_server_get_max_concurrent (S3FakeServer *server)
{
  guint n;

  g_mutex_lock (&server->lock);
  n = server->max_active;
  g_mutex_unlock (&server->lock);
  return n;
}

GHashTable *
s3_fake_server_dup_headers (S3FakeServer *server,
                            guint         index)
{
  GHashTable *headers = NULL;

  g_mutex_lock (&server->lock);
  if (index < server->request_headers->len)
    headers = g_hash_table_ref (server->request_headers->pdata[index]);
  g_mutex_unlock (&server->lock);
  return headers;
}

static gboolean
quit_loop (gpointer data)
{
  g_main_loop_quit (data);
  return G_SOURCE_REMOVE;
}

void
s3_fake_server_free (S3FakeServer *server)
{
  if (server == NULL)
    return;
  g_main_context_invoke (server->context, quit_loop, server->loop);
  g_thread_join (server->thread);
  /* wake every connection thread blocked in a read, and wait for them */
  g_mutex_lock (&server->lock);
  server->stopping = TRUE;
  for (guint i = 0; i < server->sockets->len; i++)
    g_socket_shutdown (server->sockets->pdata[i], TRUE, TRUE, NULL);
  while (server->n_active > 0)
    g_cond_wait (&server->cond, &server->lock);
  g_mutex_unlock (&server->lock);
  g_clear_object (&server->service);
  g_main_loop_unref (server->loop);
  g_main_context_unref (server->context);
  g_ptr_array_unref (server->sockets);
  g_ptr_array_unref (server->request_headers);
  g_mutex_clear (&server->lock);
  g_cond_clear (&server->cond);
  g_free (server);
}

gboolean
s3_fake_write (GOutputStream *out,
               const void    *data,
               gsize          len)
{
  return g_output_stream_write_all (out, data, len, NULL, NULL, NULL) &&
         g_output_stream_flush (out, NULL, NULL);
}

gboolean
s3_fake_write_str (GOutputStream *out,
                   const char    *text)
{
  return s3_fake_write (out, text, strlen (text));
}
