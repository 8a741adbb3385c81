/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <gio/gio.h>
#include <sys/resource.h>
#include <unistd.h>

#include "kv-accept-loop.h"

/* The accept loop of kvtier's servers out of descriptors: it pauses
 * rather than spins on a listening socket that stays readable, says so
 * once, and accepts the connections that waited in the backlog once
 * descriptors are back. */

static void
accepted (KvAcceptLoop *loop,
          GSocket      *socket,
          gpointer      data)
{
  g_ptr_array_add (data, socket);
}

static gboolean
timed_out (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

/* Iterates @context for @ms milliseconds. */
static void
iterate_for (GMainContext *context,
             guint         ms)
{
  GSource *timer = g_timeout_source_new (ms);
  gboolean done = FALSE;

  g_source_set_callback (timer, timed_out, &done, NULL);
  g_source_attach (timer, context);
  while (!done)
    g_main_context_iteration (context, TRUE);
  g_source_destroy (timer);
  g_source_unref (timer);
}

static gdouble
thread_cpu_seconds (void)
{
  struct rusage usage;

  g_assert_cmpint (getrusage (RUSAGE_THREAD, &usage), ==, 0);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

static GSocket *
client_connect (GSocketAddress *address)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, &error);

  g_assert_no_error (error);
  g_assert_true (g_socket_connect (socket, address, NULL, &error));
  g_assert_no_error (error);
  return g_steal_pointer (&socket);
}

static void
test_out_of_descriptors (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(GPtrArray) sockets = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr(GPtrArray) clients = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr(GArray) fillers = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvAcceptLoop) loop = NULL;
  struct rlimit saved, low;
  gdouble cpu;
  gint64 until;
  int fd;

  g_main_context_push_thread_default (context);
  loop = kv_accept_loop_new ("test listener", any, 16, context, accepted, sockets, &error);
  g_assert_no_error (error);

  /* it accepts */
  g_ptr_array_add (clients, client_connect (kv_accept_loop_get_local_address (loop)));
  until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  while (sockets->len < 1 && g_get_monotonic_time () < until)
    g_main_context_iteration (context, TRUE);
  g_assert_cmpuint (sockets->len, ==, 1);

  /* three wait in the backlog while no descriptor is left */
  for (guint i = 0; i < 3; i++)
    g_ptr_array_add (clients, client_connect (kv_accept_loop_get_local_address (loop)));
  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &saved), ==, 0);
  low = saved;
  low.rlim_cur = MIN (saved.rlim_cur, 256);
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &low), ==, 0);
  while ((fd = open ("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
    g_array_append_val (fillers, fd);
  g_assert_cmpint (errno, ==, EMFILE);

  g_test_expect_message ("Kvtier-Net", G_LOG_LEVEL_WARNING,
                         "test listener: cannot accept connections: *(descriptor limit *");
  cpu = thread_cpu_seconds ();
  iterate_for (context, 1500);
  cpu = thread_cpu_seconds () - cpu;
  g_test_assert_expected_messages ();
  g_test_message ("out of descriptors for 1.5 s: %.3f s of CPU, %" G_GUINT64_FORMAT " pause",
                  cpu, kv_accept_loop_get_n_pauses (loop));
  /* paused, not spinning (GSocketService spun at 100 %), said once */
  g_assert_cmpuint (sockets->len, ==, 1);
  g_assert_cmpuint (kv_accept_loop_get_n_pauses (loop), ==, 1);
  g_assert_cmpfloat (cpu, <, 0.3);

  /* descriptors back: the three are accepted, and it says so */
  for (guint i = 0; i < fillers->len; i++)
    close (g_array_index (fillers, int, i));
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &saved), ==, 0);
  g_test_expect_message ("Kvtier-Net", G_LOG_LEVEL_MESSAGE,
                         "test listener: accepting connections again*");
  until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  while (sockets->len < 4 && g_get_monotonic_time () < until)
    g_main_context_iteration (context, TRUE);
  g_test_assert_expected_messages ();
  g_assert_cmpuint (sockets->len, ==, 4);
  g_assert_cmpuint (kv_accept_loop_get_n_pauses (loop), ==, 1);

  /* stopped: no more */
  kv_accept_loop_stop (loop);
  g_main_context_pop_thread_default (context);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/accept-loop/out-of-descriptors", test_out_of_descriptors);
  return g_test_run ();
}
