/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "test-peer-harness.h"

/* `kvtier route`'s HTTP endpoint against connections that hold on (the
 * bounds `kvtier serve`'s endpoint has, from the same server): under
 * `ulimit -n 128`, 200 idle connections and 50 slow-loris clients (a
 * header line that never ends, a byte at a time) leave good clients
 * served within 3 s and the router's CPU far from the spin of an accept
 * loop out of descriptors; a slow-loris client is closed by the
 * per-request deadline however steadily it trickles.
 *
 * Attackers connect from 127.0.0.2 and up, good clients from 127.0.0.1.
 * The bounds are generous: the machines that run the suite are shared. */

#define SLOT_KIB 128
#define N_CHUNKS 4

#if defined(__SANITIZE_ADDRESS__)
# define ATTACK_CPU_MAX_CORES 0.9
# define GOOD_CLIENT_MAX_US (10 * G_USEC_PER_SEC)
#else
# define ATTACK_CPU_MAX_CORES 0.5
# define GOOD_CLIENT_MAX_US (3 * G_USEC_PER_SEC)
#endif

typedef struct
{
  PeerNode    *node;
  GSubprocess *process;
  char        *http;
} Router;

/* `kvtier route` in front of one node holding chunks 0..N_CHUNKS-1,
 * under a descriptor limit of @nofile (0: the test's own), with
 * --http-timeout-ms @http_timeout_ms (NULL: the default). */
static Router *
router_start (guint       nofile,
              const char *http_timeout_ms)
{
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autoptr(GDataInputStream) out = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = NULL;
  Router *router = g_new0 (Router, 1);

  router->node = peer_node_start ("", SLOT_KIB, 0, N_CHUNKS);
  harness_set_child_nofile (nofile);
  g_subprocess_launcher_set_child_setup (launcher, harness_child_setup, NULL, NULL);
  /* without a timeout given, the default one (10 s) */
  router->process = g_subprocess_launcher_spawn (launcher, &error, g_getenv ("KVTIER_EXE"), "route",
                                                 "--config", router->node->config_path,
                                                 "--nodes", router->node->peer_address,
                                                 "--http", "127.0.0.1:0",
                                                 http_timeout_ms != NULL ? "--http-timeout-ms" : NULL,
                                                 http_timeout_ms, NULL);
  harness_set_child_nofile (0);
  g_assert_no_error (error);
  out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (router->process));
  line = g_data_input_stream_read_line_utf8 (out, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (line);
  g_assert_true (g_str_has_prefix (line, "ready http="));
  router->http = g_strdup (line + strlen ("ready http="));
  g_test_message ("kvtier route serves on %s", router->http);
  return router;
}

static void
router_stop (Router *router)
{
  gint64 until = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;

  g_subprocess_send_signal (router->process, SIGTERM);
  /* a router that does not stop is a failure that says so, not a hang */
  while (g_subprocess_get_identifier (router->process) != NULL)
    {
      if (g_get_monotonic_time () > until)
        g_error ("kvtier route did not stop within 20 s of SIGTERM");
      g_usleep (10 * 1000);
    }
  g_assert_true (g_subprocess_wait_check (router->process, NULL, NULL));
  g_clear_object (&router->process);
  g_assert_cmpint (peer_node_terminate (router->node, 5000), ==, 0);
  peer_node_free (router->node);
  g_free (router->http);
  g_free (router);
}

/* ---- clients ------------------------------------------------------------------ */

static void
socket_send_all (GSocket    *socket,
                 const char *data)
{
  gsize len = strlen (data);

  while (len > 0)
    {
      g_autoptr(GError) error = NULL;
      gssize n = g_socket_send (socket, data, len, NULL, &error);

      g_assert_no_error (error);
      data += n;
      len -= n;
    }
}

/* Reads an answer until its body ends with @end; returns it, or NULL
 * when the router closed the connection first. */
static char *
socket_read_answer (GSocket    *socket,
                    const char *end)
{
  g_autoptr(GString) reply = g_string_new (NULL);

  while (!g_str_has_suffix (reply->str, end))
    {
      g_autoptr(GError) error = NULL;
      char buf[1024];
      gssize n = g_socket_receive (socket, buf, sizeof buf, NULL, &error);

      if (n == 0 || g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED))
        return NULL;
      g_assert_no_error (error);
      g_string_append_len (reply, buf, n);
      g_assert_cmpuint (reply->len, <, 64 * 1024);
    }
  return g_string_free (g_steal_pointer (&reply), FALSE);
}

/* Sends @request from 127.0.0.1 on a new connection and reads the answer
 * (up to @end). The router may close a connection whose request it has
 * not read yet to make room (it cannot tell a new client from a new
 * attacker); a real client connects again, within the bound the caller
 * checks, and so does this one. */
static char *
exchange (Router     *router,
          const char *request,
          const char *end)
{
  gint64 until = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;

  for (;;)
    {
      g_autoptr(GSocket) socket = harness_tcp_connect (router->http, NULL, 15);
      char *reply;

      g_assert_cmpint (g_get_monotonic_time (), <, until);
      g_assert_nonnull (socket);
      if (g_socket_send (socket, request, strlen (request), NULL, NULL) == (gssize) strlen (request) &&
          (reply = socket_read_answer (socket, end)) != NULL)
        return reply;
      g_test_message ("a good client was closed before its answer: again");
    }
}

/* The body of a POST /route for chunks 0..N_CHUNKS-1. */
static char *
route_body (void)
{
  GString *body = g_string_new ("{\"keys\": [");

  for (guint64 i = 0; i < N_CHUNKS; i++)
    {
      g_autoptr(KvKey) key = synthetic_key (i);
      gsize len = 0;
      const guint8 *hash = kv_key_get_hash (key, &len);

      g_string_append (body, i > 0 ? ", \"" : "\"");
      for (gsize b = 0; b < len; b++)
        g_string_append_printf (body, "%02x", hash[b]);
      g_string_append_c (body, '"');
    }
  g_string_append (body, "]}");
  return g_string_free (body, FALSE);
}

/* POST /route from 127.0.0.1, the whole prefix asked for: the answer's
 * status line and body. */
static char *
post_route (Router *router)
{
  g_autofree char *body = route_body ();
  g_autofree char *request = g_strdup_printf ("POST /route HTTP/1.1\r\nHost: kvtier\r\n"
                                              "Content-Type: application/json\r\n"
                                              "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                                              strlen (body), body);

  return exchange (router, request, "}");
}

/* The router follows the node: /route names it with the whole prefix. */
static void
wait_routable (Router *router)
{
  gint64 until = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  g_autofree char *expected = g_strdup_printf ("\"node\":\"%s\"", router->node->peer_address);

  for (;;)
    {
      g_autofree char *reply = post_route (router);

      if (g_str_has_prefix (reply, "HTTP/1.1 200") && strstr (reply, expected) != NULL &&
          strstr (reply, "\"prefix\":4") != NULL)
        {
          g_test_message ("kvtier route follows the node");
          return;
        }
      g_assert_cmpint (g_get_monotonic_time (), <, until);
      g_usleep (50 * 1000);
    }
}

/* A good client: GET /health then POST /route (the node, the whole
 * prefix). Returns the time the slower took, in µs. */
static gint64
good_client (Router *router)
{
  static const char health[] = "GET /health HTTP/1.1\r\nHost: kvtier\r\nConnection: close\r\n\r\n";
  g_autofree char *expected = g_strdup_printf ("\"node\":\"%s\"", router->node->peer_address);
  gint64 start = g_get_monotonic_time ();
  gint64 health_us, route_us;
  g_autofree char *reply = NULL;
  g_autofree char *routed = NULL;

  reply = exchange (router, health, "ok\n");
  g_assert_true (g_str_has_prefix (reply, "HTTP/1.1 200"));
  health_us = g_get_monotonic_time () - start;

  start = g_get_monotonic_time ();
  routed = post_route (router);
  g_assert_true (g_str_has_prefix (routed, "HTTP/1.1 200"));
  g_assert_nonnull (strstr (routed, expected));
  g_assert_nonnull (strstr (routed, "\"prefix\":4"));
  route_us = g_get_monotonic_time () - start;
  return MAX (health_us, route_us);
}

/* Whether the router closed @socket (end of stream or reset), waiting at
 * most its timeout. */
static gboolean
socket_closed_by_peer (GSocket *socket)
{
  char buf[256];
  g_autoptr(GError) error = NULL;
  gssize n = g_socket_receive (socket, buf, sizeof buf, NULL, &error);

  if (n == 0 || g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED) ||
      g_error_matches (error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE))
    return TRUE;
  /* a timeout is "not closed"; anything else is the test's failure */
  g_assert_true (n > 0 || g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
  return FALSE;
}

/* ---- attackers ------------------------------------------------------------------ */

/* Connections that hold on, reopened when the router closes them, from
 * @n_sources addresses, at most 5 new ones per 50 ms. An idle one sends
 * nothing; a slow-loris one sends the start of a request and then, every
 * 50 ms, one more byte of a header that never ends. */
typedef struct
{
  char      *address;
  guint      n_target;
  guint      n_sources;
  gboolean   loris;
  GPtrArray *sockets;
  guint      opened;   /* atomic */
  gint       stop;     /* atomic */
  GThread   *thread;
} Attack;

static gpointer
attack_main (gpointer data)
{
  Attack *attack = data;

  while (!g_atomic_int_get (&attack->stop))
    {
      for (guint i = 0; i < attack->sockets->len;)
        {
          GSocket *socket = attack->sockets->pdata[i];
          char buf[512];
          gssize n;

          if (g_socket_condition_check (socket, G_IO_IN | G_IO_HUP | G_IO_ERR) != 0)
            {
              n = g_socket_receive_with_blocking (socket, buf, sizeof buf, FALSE, NULL, NULL);
              if (n <= 0)
                {
                  g_ptr_array_remove_index_fast (attack->sockets, i);
                  continue;
                }
            }
          if (attack->loris &&
              g_socket_send_with_blocking (socket, "a", 1, FALSE, NULL, NULL) < 0)
            {
              g_ptr_array_remove_index_fast (attack->sockets, i);
              continue;
            }
          i++;
        }
      for (guint k = 0; k < 5 && attack->sockets->len < attack->n_target; k++)
        {
          guint n = attack->opened % attack->n_sources;
          g_autofree char *source = g_strdup_printf ("127.0.%u.%u", 1 + n / 250, 2 + n % 250);
          GSocket *socket = harness_tcp_connect (attack->address, source, 1);

          g_atomic_int_inc (&attack->opened);
          if (socket == NULL)
            break;
          if (attack->loris)
            g_socket_send (socket, "GET /health HTTP/1.1\r\nX-Slow: ", 30, NULL, NULL);
          g_ptr_array_add (attack->sockets, socket);
        }
      g_usleep (50 * 1000);
    }
  return NULL;
}

static Attack *
attack_start (const char *address,
              guint       n_target,
              guint       n_sources,
              gboolean    loris)
{
  Attack *attack = g_new0 (Attack, 1);

  attack->address = g_strdup (address);
  attack->n_target = n_target;
  attack->n_sources = n_sources;
  attack->loris = loris;
  attack->sockets = g_ptr_array_new_with_free_func (g_object_unref);
  attack->thread = g_thread_new ("attack", attack_main, attack);
  return attack;
}

static guint
attack_stop (Attack *attack)
{
  guint opened;

  g_atomic_int_set (&attack->stop, TRUE);
  g_thread_join (attack->thread);
  opened = attack->opened;
  g_ptr_array_unref (attack->sockets);
  g_free (attack->address);
  g_free (attack);
  return opened;
}

/* ---- tests ------------------------------------------------------------------------ */

/*
 * The router runs under `ulimit -n 128`: 200 idle connections and 50
 * slow-loris clients, reopened as they are closed, from 20 addresses.
 * Good clients are served within 3 s all along (GET /health, and a
 * POST /route that names the node), the router's CPU stays far from a
 * spinning accept loop (half a core natively, generously); once the
 * attackers leave, it idles and still serves.
 */
static void
test_descriptor_limit (void)
{
  Router *router;
  Attack *idle, *loris;
  gint64 start, until, max_us = 0;
  gdouble cpu_before, cpu_attack, cpu_idle;
  guint opened_idle, opened_loris;

  if (!harness_raise_own_nofile (1024))
    {
      g_test_skip ("RLIMIT_NOFILE's hard limit is below 1024 descriptors");
      return;
    }
  router = router_start (128, NULL);
  wait_routable (router);
  cpu_before = harness_process_cpu_seconds (router->process);
  start = g_get_monotonic_time ();

  idle = attack_start (router->http, 200, 20, FALSE);
  loris = attack_start (router->http, 50, 20, TRUE);
  until = g_get_monotonic_time () + 6 * G_USEC_PER_SEC;
  while (g_get_monotonic_time () < until)
    {
      gint64 us = good_client (router);

      g_assert_cmpint (us, <, GOOD_CLIENT_MAX_US);
      max_us = MAX (max_us, us);
      g_usleep (300 * 1000);
    }
  cpu_attack = harness_process_cpu_seconds (router->process) - cpu_before;
  opened_idle = attack_stop (idle);
  opened_loris = attack_stop (loris);
  g_test_message ("ulimit -n 128: %u idle + %u slow-loris connections in %.1f s; good clients "
                  "within %.2f s; router CPU %.2f s", opened_idle, opened_loris,
                  (g_get_monotonic_time () - start) / 1e6, max_us / 1e6, cpu_attack);
  /* they kept coming back: the router closed them for room */
  g_assert_cmpuint (opened_idle + opened_loris, >, 250);
  g_assert_cmpfloat (cpu_attack, <, ATTACK_CPU_MAX_CORES * (g_get_monotonic_time () - start) / 1e6);

  /* the attackers gone, the router idles */
  g_usleep (1000 * 1000);
  cpu_idle = harness_process_cpu_seconds (router->process);
  g_usleep (2 * G_USEC_PER_SEC);
  cpu_idle = harness_process_cpu_seconds (router->process) - cpu_idle;
  g_test_message ("idle: %.2f s of CPU in 2 s", cpu_idle);
  g_assert_cmpfloat (cpu_idle, <, 0.2);
  good_client (router);
  router_stop (router);
}

/*
 * --http-timeout-ms 3000, no connection pressure: a slow-loris client
 * that sends a header byte every 50 ms (never idle), one that sends its
 * headers and trickles its body, and one that sends nothing are each
 * closed about 3 s after they connected, while a client that takes 1 s
 * to send its request is answered.
 */
static void
test_request_deadline (void)
{
  static const char health[] = "GET /health HTTP/1.1\r\nHost: kvtier\r\nConnection: close\r\n\r\n";
  Router *router = router_start (0, "3000");
  g_autoptr(GSocket) silent = NULL;
  g_autoptr(GSocket) header = NULL;
  g_autoptr(GSocket) body = NULL;
  GSocket *trickling[2];
  gint64 start, closed_us[2] = { 0, 0 };
  gint64 silent_us;

  wait_routable (router);

  /* a client that takes 1 s to send its request is within the deadline */
  {
    g_autoptr(GSocket) late = harness_tcp_connect (router->http, NULL, 5);
    g_autofree char *reply = NULL;

    g_assert_nonnull (late);
    g_usleep (1000 * 1000);
    socket_send_all (late, health);
    reply = socket_read_answer (late, "ok\n");
    g_assert_nonnull (reply);
    g_assert_true (g_str_has_prefix (reply, "HTTP/1.1 200"));
  }

  start = g_get_monotonic_time ();
  silent = harness_tcp_connect (router->http, "127.0.0.2", 1);
  header = harness_tcp_connect (router->http, "127.0.0.3", 1);
  body = harness_tcp_connect (router->http, "127.0.0.4", 1);
  g_assert_nonnull (silent);
  g_assert_nonnull (header);
  g_assert_nonnull (body);
  socket_send_all (header, "GET /health HTTP/1.1\r\nX-Slow: ");
  socket_send_all (body, "POST /route HTTP/1.1\r\nHost: kvtier\r\nContent-Length: 1000\r\n\r\n{\"keys\": [");
  trickling[0] = header;
  trickling[1] = body;
  /* a byte every 50 ms on each, until the router closes it (at most 12 s) */
  while ((closed_us[0] == 0 || closed_us[1] == 0) && g_get_monotonic_time () - start < 12 * G_USEC_PER_SEC)
    {
      for (guint i = 0; i < 2; i++)
        {
          if (closed_us[i] != 0)
            continue;
          if (g_socket_condition_check (trickling[i], G_IO_IN | G_IO_HUP | G_IO_ERR) != 0 ||
              g_socket_send_with_blocking (trickling[i], " ", 1, FALSE, NULL, NULL) < 0)
            closed_us[i] = g_get_monotonic_time () - start;
        }
      g_usleep (50 * 1000);
    }
  g_test_message ("closed after %.2f s (a header a byte at a time), %.2f s (a body a byte at a time)",
                  closed_us[0] / 1e6, closed_us[1] / 1e6);
  g_assert_cmpint (closed_us[0], >, 0);
  g_assert_cmpint (closed_us[1], >, 0);
  g_assert_cmpint (closed_us[0], >=, 2 * G_USEC_PER_SEC);
  g_assert_cmpint (closed_us[1], >=, 2 * G_USEC_PER_SEC);
  /* the idle one went at the same deadline */
  g_socket_set_timeout (silent, 5);
  g_assert_true (socket_closed_by_peer (silent));
  silent_us = g_get_monotonic_time () - start;
  g_test_message ("the silent one closed after %.2f s", silent_us / 1e6);
  g_assert_cmpint (silent_us, <, 12 * G_USEC_PER_SEC);
  router_stop (router);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, NULL);
  harness_init ();
  g_test_add_func ("/route-limits/request-deadline", test_request_deadline);
  g_test_add_func ("/route-limits/descriptor-limit", test_descriptor_limit);
  status = g_test_run ();
  harness_cleanup ();
  return status;
}
