/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-redis-server.h"

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <glib/gstdio.h>

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
gboolean
redis_test_init (void)
{
  g_autofree char *server = g_find_program_in_path ("redis-server");
  g_autofree char *cli = g_find_program_in_path ("redis-cli");

  if (server == NULL || cli == NULL)
    {
      g_print ("1..0 # SKIP redis-server or redis-cli is not installed\n");
      return FALSE;
    }
  if (redis_test_pids == NULL)
    {
      redis_test_pids = g_array_new (FALSE, FALSE, sizeof (GPid));
      atexit (redis_test_kill_all);
    }
  return TRUE;
}

/* A port nothing listens on now (the kernel's choice). */
guint
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
char *
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

char *
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

gboolean
redis_server_is_up (const RedisServer *server)
{
  g_autofree char *pong = redis_cli (server, "PING", NULL);

  return g_strcmp0 (pong, "PONG") == 0;
}

/* Whether the server answering on @server's port is process @pid (its
 * INFO's process_id). */
static gboolean
redis_server_is_process (const RedisServer *server,
                         GPid               pid)
{
  g_autofree char *info = redis_cli (server, "INFO", "server", NULL);
  g_autofree char *expected = g_strdup_printf ("process_id:%d\r\n", (int) pid);
  g_autofree char *expected_lf = g_strdup_printf ("process_id:%d\n", (int) pid);

  return info != NULL && (strstr (info, expected) != NULL || strstr (info, expected_lf) != NULL);
}

/* A server dies with the test program, even one killed by a timeout. */
static void
redis_test_child_setup (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

/* Starts redis-server on @port with @extra args (NULL-terminated, may be
 * NULL); waits until it answers PING. @dir is the test's temporary
 * directory (the server's working directory). */
void
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

  g_assert_nonnull (redis_test_pids);
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

  /* the answer must be this server's: a restart on an old port can find
   * it taken by another test's server, and this one then exits */
  end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (!redis_server_is_up (server) || !redis_server_is_process (server, server->pid))
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

void
redis_server_start (RedisServer        *server,
                    const char         *dir,
                    const char * const *extra)
{
  redis_server_start_on (server, dir, redis_test_free_port (), extra);
}

/* Stops the server: SIGTERM, or SIGKILL with @kill_it (a crash). */
void
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

void
redis_server_clear (RedisServer *server)
{
  redis_server_stop (server, FALSE);
  g_clear_pointer (&server->dir, g_free);
  g_clear_pointer (&server->password, g_free);
  g_clear_pointer (&server->tls_args, g_strfreev);
}

char *
redis_server_address (const RedisServer *server)
{
  return g_strdup_printf ("127.0.0.1:%u", server->port);
}

/* ---- a Redis Cluster ----------------------------------------------------- */

/* Every running node of @nodes says cluster_state:ok. */
gboolean
redis_cluster_is_ok (const RedisServer *nodes,
                     guint              n_nodes)
{
  for (guint i = 0; i < n_nodes; i++)
    {
      g_autofree char *info = NULL;

      if (nodes[i].pid == 0)
        continue;
      info = redis_cli (&nodes[i], "CLUSTER", "INFO", NULL);
      if (strstr (info, "cluster_state:ok") == NULL)
        return FALSE;
    }
  return TRUE;
}

/* Prints what each running node of @nodes says of the cluster (its
 * state, its role and its view of the nodes), for a test that fails
 * waiting on the cluster. */
void
redis_cluster_dump (const RedisServer *nodes,
                    guint              n_nodes)
{
  for (guint i = 0; i < n_nodes; i++)
    {
      g_autofree char *state = NULL;
      g_autofree char *role = NULL;
      g_autofree char *view = NULL;

      if (nodes[i].pid == 0)
        {
          g_printerr ("node %u (port %u): down\n", i, nodes[i].port);
          continue;
        }
      state = redis_cli (&nodes[i], "CLUSTER", "INFO", NULL);
      role = redis_cli (&nodes[i], "INFO", "replication", NULL);
      view = redis_cli (&nodes[i], "CLUSTER", "NODES", NULL);
      g_printerr ("node %u (port %u):\n%s\n%s\n%s\n", i, nodes[i].port, state, role, view);
    }
}

static gint
compare_strings (gconstpointer a,
                 gconstpointer b)
{
  return strcmp (*(const char * const *) a, *(const char * const *) b);
}

/* Which master holds which slots, in @node's view: one sorted line per
 * master that holds any ("id slot-range..."), slots in migration left
 * out. */
static char *
slot_owners (const RedisServer *node)
{
  g_autofree char *view = redis_cli (node, "CLUSTER", "NODES", NULL);
  g_auto(GStrv) lines = g_strsplit (view, "\n", -1);
  g_autoptr(GPtrArray) owners = g_ptr_array_new_with_free_func (g_free);
  GString *joined = g_string_new (NULL);

  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) fields = g_strsplit (g_strstrip (lines[i]), " ", -1);
      GString *owner;

      if (g_strv_length (fields) < 9 || strstr (fields[2], "master") == NULL)
        continue;
      owner = g_string_new (fields[0]);
      for (guint f = 8; fields[f] != NULL; f++)
        if (fields[f][0] != '[')
          g_string_append_printf (owner, " %s", fields[f]);
      g_ptr_array_add (owners, g_string_free (owner, FALSE));
    }
  g_ptr_array_sort (owners, compare_strings);
  for (guint i = 0; i < owners->len; i++)
    g_string_append_printf (joined, "%s\n", (const char *) owners->pdata[i]);
  return g_string_free (joined, FALSE);
}

/* Every running node of @nodes names the same owner for every slot: a
 * slot move or a failover has reached the replicas too. A replica
 * promoted before its master's last slot move reached it would own a
 * slot that it does not know it owns, and the cluster never settles. */
gboolean
redis_cluster_agrees (const RedisServer *nodes,
                      guint              n_nodes)
{
  g_autofree char *first = NULL;

  for (guint i = 0; i < n_nodes; i++)
    {
      g_autofree char *owners = NULL;

      if (nodes[i].pid == 0)
        continue;
      owners = slot_owners (&nodes[i]);
      if (first == NULL)
        first = g_steal_pointer (&owners);
      else if (strcmp (first, owners) != 0)
        return FALSE;
    }
  return TRUE;
}

#define N_SLOTS 16384

/* Marks in @slots what @view (CLUSTER NODES) says @id holds, or every
 * master when @id is NULL; slots in migration are left out. */
static void
mark_slots (const char *view,
            const char *id,
            guint8     *slots)
{
  g_auto(GStrv) lines = g_strsplit (view, "\n", -1);

  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) fields = g_strsplit (g_strstrip (lines[i]), " ", -1);

      if (g_strv_length (fields) < 9 || strstr (fields[2], "master") == NULL ||
          (id != NULL && strcmp (fields[0], id) != 0))
        continue;
      for (guint f = 8; fields[f] != NULL; f++)
        {
          char *dash = strchr (fields[f], '-');
          guint64 first, last;

          if (fields[f][0] == '[')
            continue;
          first = g_ascii_strtoull (fields[f], NULL, 10);
          last = dash != NULL ? g_ascii_strtoull (dash + 1, NULL, 10) : first;
          for (guint64 slot = first; slot <= last && slot < N_SLOTS; slot++)
            slots[slot] = 1;
        }
    }
}

/* Redis 7.0 can leave a master that does not know it holds a slot which
 * every other node says it holds: a replica promoted while its old
 * master's last slot move was new, then the old master back with its
 * stale claim (seen after the failover cases). Nobody claims the slot
 * again and the cluster stays failed; this gives the slot to the master
 * that everyone else names, as `redis-cli --cluster fix` would. */
static void
repair_unknown_slots (const RedisServer *nodes,
                      guint              n_nodes)
{
  for (guint i = 0; i < n_nodes; i++)
    {
      g_autofree char *id = NULL;
      g_autofree char *own_view = NULL;
      g_autofree guint8 *assigned = NULL;
      g_autofree guint8 *named = NULL;
      guint n_others = 0;

      if (nodes[i].pid == 0)
        continue;
      id = redis_cli (&nodes[i], "CLUSTER", "MYID", NULL);
      own_view = redis_cli (&nodes[i], "CLUSTER", "NODES", NULL);
      assigned = g_malloc0 (N_SLOTS);
      named = g_malloc0 (N_SLOTS);
      mark_slots (own_view, NULL, assigned);
      /* named[slot]: how many other nodes say @id holds it */
      for (guint j = 0; j < n_nodes; j++)
        {
          g_autofree char *view = NULL;
          g_autofree guint8 *held = NULL;

          if (j == i || nodes[j].pid == 0)
            continue;
          view = redis_cli (&nodes[j], "CLUSTER", "NODES", NULL);
          held = g_malloc0 (N_SLOTS);
          mark_slots (view, id, held);
          for (guint slot = 0; slot < N_SLOTS; slot++)
            named[slot] += held[slot];
          n_others++;
        }
      for (guint slot = 0; slot < N_SLOTS && n_others > 0; slot++)
        if (!assigned[slot] && named[slot] == n_others)
          {
            g_autofree char *slot_str = g_strdup_printf ("%u", slot);
            g_autofree char *out = redis_cli (&nodes[i], "CLUSTER", "ADDSLOTS", slot_str, NULL);

            g_printerr ("redis cluster: node %u (port %u) did not know it holds slot %u: %s\n", i,
                        nodes[i].port, slot, out);
          }
    }
}

/* Waits up to @seconds for redis_cluster_is_ok() and
 * redis_cluster_agrees(); past them, dumps every node's view (so that a
 * cluster that never settles can be told apart from a slow one) and
 * fails. */
void
redis_cluster_wait_ok (const RedisServer *nodes,
                       guint              n_nodes,
                       guint              seconds)
{
  gint64 end = g_get_monotonic_time () + seconds * G_USEC_PER_SEC;

  while (!redis_cluster_is_ok (nodes, n_nodes) || !redis_cluster_agrees (nodes, n_nodes))
    {
      repair_unknown_slots (nodes, n_nodes);
      if (g_get_monotonic_time () >= end)
        {
          redis_cluster_dump (nodes, n_nodes);
          g_error ("The cluster did not say cluster_state:ok, every node naming the same owner of "
                   "every slot, within %u s (its nodes' views above)", seconds);
        }
      g_usleep (100 * 1000);
    }
}

/* Starts @n_nodes cluster-enabled servers, each in a directory of its own
 * under @dir, and makes them one cluster with `redis-cli --cluster create`
 * (@n_replicas replicas per master); returns once every node says the
 * cluster is ok and the slot map names every node. Returns the address of
 * the first node (a seed for the tier's `servers`). */
char *
redis_cluster_start (RedisServer *nodes,
                     guint        n_nodes,
                     guint        n_replicas,
                     const char  *dir)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) error = NULL;
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  int status = 0;

  for (guint i = 0; i < n_nodes; i++)
    {
      g_autofree char *node_dir = g_strdup_printf ("%s/node%u", dir, i);
      g_autofree char *conf = g_strdup_printf ("nodes-%u.conf", i);
      const char *extra[] = { "--cluster-enabled", "yes", "--cluster-config-file", conf,
                              "--cluster-node-timeout", "1000", NULL };

      g_assert_cmpint (g_mkdir (node_dir, 0700), ==, 0);
      redis_server_start (&nodes[i], node_dir, extra);
    }
  g_ptr_array_add (argv, g_strdup ("redis-cli"));
  g_ptr_array_add (argv, g_strdup ("--cluster"));
  g_ptr_array_add (argv, g_strdup ("create"));
  for (guint i = 0; i < n_nodes; i++)
    g_ptr_array_add (argv, redis_server_address (&nodes[i]));
  g_ptr_array_add (argv, g_strdup ("--cluster-replicas"));
  g_ptr_array_add (argv, g_strdup_printf ("%u", n_replicas));
  g_ptr_array_add (argv, g_strdup ("--cluster-yes"));
  g_ptr_array_add (argv, NULL);
  g_assert_true (g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL,
                               &out, &err, &status, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("redis-cli --cluster create failed: %s %s", out, err);
  redis_cluster_wait_ok (nodes, n_nodes, 30);
  /* and until the map names every replica (gossip brings them a moment
   * after the slots) */
  for (gint64 end = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;;)
    {
      g_autofree char *slots = redis_cli (&nodes[0], "CLUSTER", "SLOTS", NULL);
      g_auto(GStrv) lines = g_strsplit (slots, "\n", -1);
      guint n_listed = 0;

      for (guint i = 0; lines[i] != NULL; i++)
        if (g_str_equal (g_strstrip (lines[i]), "127.0.0.1"))
          n_listed++;
      if (n_listed == n_nodes)
        break;
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (100 * 1000);
    }
  return redis_server_address (&nodes[0]);
}
