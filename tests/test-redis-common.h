/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The harness of the redis-tier tests: real redis-server processes on
 * 127.0.0.1, on free ports, in a temporary directory of their own, stopped
 * by the PIDs this process spawned (also when a test fails: atexit). A
 * test program without redis-server or redis-cli skips. */

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <gobject/gvaluecollector.h>
#include <kvtier.h>

#include "test-chunk-data.h"

#ifndef REDIS_TEST_SERVER_ONLY
#include "kv-chunk-format.h"
#include "kv-redis-tier.h"
#endif

#define REDIS_TEST_SLOT 8192

typedef struct
{
  GPid   pid;
  guint  port;
  char  *dir;
  char  *password;   /* for redis-cli */
  char **tls_args;   /* for redis-cli, or NULL */
} RedisServer;

static GArray *redis_test_pids;   /* GPid: running servers */

static void
redis_test_kill_all (void)
{
  for (guint i = 0; redis_test_pids != NULL && i < redis_test_pids->len; i++)
    {
      GPid pid = g_array_index (redis_test_pids, GPid, i);

      kill (pid, SIGKILL);
      waitpid (pid, NULL, 0);
    }
  g_clear_pointer (&redis_test_pids, g_array_unref);
}

/* FALSE (and a TAP plan that skips everything printed) when the servers
 * cannot run here. */
G_GNUC_UNUSED static gboolean
redis_test_init (void)
{
  g_autofree char *server = g_find_program_in_path ("redis-server");
  g_autofree char *cli = g_find_program_in_path ("redis-cli");

  if (server == NULL || cli == NULL)
    {
      g_print ("1..0 # SKIP redis-server or redis-cli is not installed\n");
      return FALSE;
    }
  redis_test_pids = g_array_new (FALSE, FALSE, sizeof (GPid));
  atexit (redis_test_kill_all);
  return TRUE;
}

/* A port nothing listens on now (the kernel's choice). */
G_GNUC_UNUSED static guint
redis_test_free_port (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, &error);
  g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
  g_autoptr(GSocketAddress) bound = NULL;
  guint port;

  g_assert_no_error (error);
  g_assert_true (g_socket_bind (socket, any, FALSE, &error));
  g_assert_no_error (error);
  bound = g_socket_get_local_address (socket, &error);
  g_assert_no_error (error);
  port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  g_socket_close (socket, NULL);
  /* the 10000 ports above it are the cluster bus ports of a cluster node */
  if (port > 55000)
    return redis_test_free_port ();
  return port;
}

/* Runs redis-cli against @server with @args; returns its stripped stdout. */
G_GNUC_UNUSED static char *
redis_cli_argv (const RedisServer  *server,
                const char * const *args)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  int status = 0;

  g_ptr_array_add (argv, g_strdup ("redis-cli"));
  g_ptr_array_add (argv, g_strdup ("-h"));
  g_ptr_array_add (argv, g_strdup ("127.0.0.1"));
  g_ptr_array_add (argv, g_strdup ("-p"));
  g_ptr_array_add (argv, g_strdup_printf ("%u", server->port));
  if (server->password != NULL)
    {
      g_ptr_array_add (argv, g_strdup ("--no-auth-warning"));
      g_ptr_array_add (argv, g_strdup ("-a"));
      g_ptr_array_add (argv, g_strdup (server->password));
    }
  for (guint i = 0; server->tls_args != NULL && server->tls_args[i] != NULL; i++)
    g_ptr_array_add (argv, g_strdup (server->tls_args[i]));
  for (guint i = 0; args[i] != NULL; i++)
    g_ptr_array_add (argv, g_strdup (args[i]));
  g_ptr_array_add (argv, NULL);
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL,
                               &out, &err, &status, &error));
  g_assert_no_error (error);
  return g_strstrip (g_steal_pointer (&out));
}

G_GNUC_UNUSED G_GNUC_NULL_TERMINATED static char *
redis_cli (const RedisServer *server,
           ...)
{
  g_autoptr(GPtrArray) args = g_ptr_array_new ();
  va_list ap;
  const char *arg;

  va_start (ap, server);
  while ((arg = va_arg (ap, const char *)) != NULL)
    g_ptr_array_add (args, (gpointer) arg);
  va_end (ap);
  g_ptr_array_add (args, NULL);
  return redis_cli_argv (server, (const char * const *) args->pdata);
}

G_GNUC_UNUSED static gboolean
redis_server_is_up (const RedisServer *server)
{
  g_autofree char *pong = redis_cli (server, "PING", NULL);

  return g_strcmp0 (pong, "PONG") == 0;
}

/* A server dies with the test program, even one killed by a timeout. */
static void
redis_test_child_setup (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

/* Starts redis-server on a free port with @extra args (NULL-terminated,
 * may be NULL); waits until it answers PING. @dir is the test's temporary
 * directory (the server's working directory). */
G_GNUC_UNUSED static void
redis_server_start_on (RedisServer        *server,
                       const char         *dir,
                       guint               port,
                       const char * const *extra)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  g_autofree char *log = NULL;
  gboolean tls = FALSE;
  gint64 end;

  server->port = port;
  g_free (server->dir);
  server->dir = g_strdup (dir);
  log = g_strdup_printf ("%s/redis-%u.log", dir, server->port);
  g_ptr_array_add (argv, g_strdup ("redis-server"));
  for (guint i = 0; extra != NULL && extra[i] != NULL; i++)
    if (g_str_equal (extra[i], "--tls-port"))
      tls = TRUE;
#define ARG(...) g_ptr_array_add (argv, g_strdup_printf (__VA_ARGS__))
  ARG ("--port"); ARG ("%u", tls ? 0 : server->port);
  ARG ("--bind"); ARG ("127.0.0.1");
  ARG ("--save"); g_ptr_array_add (argv, g_strdup (""));
  ARG ("--appendonly"); ARG ("no");
  ARG ("--dir"); ARG ("%s", dir);
  ARG ("--logfile"); ARG ("%s", log);
  ARG ("--daemonize"); ARG ("no");
  ARG ("--protected-mode"); ARG ("no");
  ARG ("--dbfilename"); ARG ("dump-%u.rdb", server->port);
#undef ARG
  for (guint i = 0; extra != NULL && extra[i] != NULL; i++)
    g_ptr_array_add (argv, g_strdup (extra[i]));
  if (tls)
    g_ptr_array_add (argv, g_strdup_printf ("%u", server->port));
  g_ptr_array_add (argv, NULL);

  g_assert_true (g_spawn_async (dir, (char **) argv->pdata, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                                G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                                redis_test_child_setup, NULL, &server->pid, &error));
  g_assert_no_error (error);
  g_array_append_val (redis_test_pids, server->pid);

  end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (!redis_server_is_up (server))
    {
      if (g_get_monotonic_time () > end || waitpid (server->pid, NULL, WNOHANG) == server->pid)
        {
          g_autofree char *contents = NULL;

          g_file_get_contents (log, &contents, NULL, NULL);
          g_error ("redis-server on port %u did not start: %s", server->port, contents);
        }
      g_usleep (20000);
    }
}

G_GNUC_UNUSED static void
redis_server_start (RedisServer        *server,
                    const char         *dir,
                    const char * const *extra)
{
  redis_server_start_on (server, dir, redis_test_free_port (), extra);
}

/* Stops the server: SIGTERM, or SIGKILL with @kill_it (a crash). */
G_GNUC_UNUSED static void
redis_server_stop (RedisServer *server,
                   gboolean     kill_it)
{
  if (server->pid == 0)
    return;
  kill (server->pid, kill_it ? SIGKILL : SIGTERM);
  waitpid (server->pid, NULL, 0);
  for (guint i = 0; i < redis_test_pids->len; i++)
    if (g_array_index (redis_test_pids, GPid, i) == server->pid)
      {
        g_array_remove_index_fast (redis_test_pids, i);
        break;
      }
  g_spawn_close_pid (server->pid);
  server->pid = 0;
}

G_GNUC_UNUSED static void
redis_server_clear (RedisServer *server)
{
  redis_server_stop (server, FALSE);
  g_clear_pointer (&server->dir, g_free);
  g_clear_pointer (&server->password, g_free);
  g_clear_pointer (&server->tls_args, g_strfreev);
}

G_GNUC_UNUSED static char *
redis_server_address (const RedisServer *server)
{
  return g_strdup_printf ("127.0.0.1:%u", server->port);
}

G_GNUC_UNUSED static void
redis_test_rm_rf (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
        redis_test_rm_rf (child);
      else
        g_unlink (child);
    }
  g_rmdir (path);
}

G_GNUC_UNUSED static char *
redis_test_make_dir (void)
{
  g_autoptr(GError) error = NULL;
  char *dir = g_dir_make_tmp ("kvtier-redis-test-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

#ifndef REDIS_TEST_SERVER_ONLY

/* ---- keys and bytes ------------------------------------------------------ */

/* ---- the tier ------------------------------------------------------------ */

/* A tier on @servers with @first_property... (NULL-terminated) set too;
 * NULL with @error set when it does not start. */
G_GNUC_UNUSED static KvRedisTier *
redis_test_tier_new_valist (KvHostBuffer  *buffer,
                            const char    *servers,
                            GError       **error,
                            const char    *first_property,
                            va_list        args)
{
  GObjectClass *klass = g_type_class_ref (KV_TYPE_REDIS_TIER);
  const char *names[32];
  GValue values[32] = { G_VALUE_INIT, };
  GObject *object;
  guint n = 0;

  names[n] = "tier-type";
  g_value_init (&values[n], G_TYPE_STRING);
  g_value_set_string (&values[n++], "redis");
  names[n] = "primary";
  g_value_init (&values[n], KV_TYPE_HOST_BUFFER);
  g_value_set_object (&values[n++], buffer);
  names[n] = "servers";
  g_value_init (&values[n], G_TYPE_STRING);
  g_value_set_string (&values[n++], servers);
  for (const char *name = first_property; name != NULL; name = va_arg (args, const char *))
    {
      GParamSpec *pspec = g_object_class_find_property (klass, name);
      g_autofree char *msg = NULL;

      g_assert_nonnull (pspec);
      g_assert_cmpuint (n, <, G_N_ELEMENTS (names));
      names[n] = name;
      G_VALUE_COLLECT_INIT (&values[n], pspec->value_type, args, 0, &msg);
      g_assert_null (msg);
      n++;
    }
  object = g_object_new_with_properties (KV_TYPE_REDIS_TIER, n, names, values);
  if (!g_initable_init (G_INITABLE (object), NULL, error))
    g_clear_object (&object);
  for (guint i = 0; i < n; i++)
    g_value_unset (&values[i]);
  g_type_class_unref (klass);
  return (KvRedisTier *) object;
}

G_GNUC_UNUSED static KvRedisTier *
redis_test_tier_new_full (KvHostBuffer  *buffer,
                          const char    *servers,
                          GError       **error,
                          const char    *first_property,
                          ...)
{
  KvRedisTier *tier;
  va_list args;

  va_start (args, first_property);
  tier = redis_test_tier_new_valist (buffer, servers, error, first_property, args);
  va_end (args);
  return tier;
}

G_GNUC_UNUSED static KvRedisTier *
redis_test_tier_new (KvHostBuffer *buffer,
                     const char   *servers,
                     const char   *first_property,
                     ...)
{
  g_autoptr(GError) error = NULL;
  KvRedisTier *tier;
  va_list args;

  va_start (args, first_property);
  tier = redis_test_tier_new_valist (buffer, servers, &error, first_property, args);
  va_end (args);
  g_assert_no_error (error);
  g_assert_nonnull (tier);
  return tier;
}

G_GNUC_UNUSED static void
redis_test_tier_free (KvRedisTier *tier)
{
  g_autoptr(GError) error = NULL;

  if (tier == NULL)
    return;
  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (tier), &error));
  g_assert_no_error (error);
  g_object_add_weak_pointer (G_OBJECT (tier), (gpointer *) &tier);
  g_object_unref (tier);
  g_assert_null (tier);
}

/* Submits a job of @n keys on @slots and waits for its result (stores:
 * the caller filled the slots). */
G_GNUC_UNUSED static KvJobResult *
redis_test_run_job (KvRedisTier    *tier,
                    gboolean        is_load,
                    KvKey * const  *keys,
                    const guint32  *slots,
                    guint           n)
{
  static guint64 next_id = 1;
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  guint64 id = next_id++;
  g_autoptr(KvTransferJob) job = kv_transfer_job_new (id, keys, slots, n, is_load, request);
  g_autoptr(GError) error = NULL;
  KvJobResult *found = NULL;
  KvJobResult **results;

  if (is_load)
    g_assert_true (kv_secondary_tier_submit_load (st, job, &error));
  else
    g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
  g_assert_no_error (error);
  g_assert_true (kv_secondary_tier_drain_jobs (st, &error));
  g_assert_no_error (error);
  results = kv_secondary_tier_get_finished_jobs (st);
  for (guint i = 0; results != NULL && results[i] != NULL; i++)
    {
      g_assert_null (found);
      g_assert_cmpuint (kv_job_result_get_job_id (results[i]), ==, id);
      found = results[i];
    }
  g_free (results);
  g_assert_nonnull (found);
  return found;
}

/* Asks the tier until it knows (RETRY means: asked, not answered yet). */
G_GNUC_UNUSED static KvLookupResult
redis_test_lookup (KvRedisTier *tier,
                   KvKey       *key)
{
  g_autoptr(KvRequest) request = kv_request_new ("lookup", NULL);
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  KvLookupResult r;
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while ((r = kv_secondary_tier_lookup (st, key, request)) == KV_LOOKUP_RESULT_RETRY)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      kv_secondary_tier_on_schedule_end (st, end);
      g_usleep (1000);
    }
  kv_secondary_tier_on_request_finished (st, request);
  return r;
}

#endif /* REDIS_TEST_SERVER_ONLY */
