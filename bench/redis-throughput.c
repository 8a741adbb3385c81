/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <glib/gstdio.h>
#include <hiredis/hiredis.h>
#include <kvtier.h>

#include "bench-stack.h"
#include "bench-util.h"
#include "kv-chunk-format.h"
#include "kv-redis-tier.h"

/*
 * redis-throughput: how close the redis tier gets to the server.
 *
 * With no --server it starts its own redis-server on a free loopback port
 * (with --cluster, three of them made a cluster of three masters by
 * `redis-cli --cluster create`) and stops them by PID at the end. For each
 * chunk size, against the same server(s), in one run:
 *
 *  - the ceiling, the better of two clients moving the tier's values (the
 *    chunk plus its 4096-byte header): `redis-benchmark -t set,get -d
 *    <value bytes> -P <depth> -c <clients>` (--cluster in cluster mode),
 *    a raw pipelined client in this program, with the tier's shape (one
 *    connection per node, the tier's 256 MiB in flight per node, a writer
 *    and a reader thread each, SET from one buffer, GET into one buffer),
 *    and a plain hiredis client with the same pipelining (one blocking
 *    context per node, as many commands in flight, each written as soon
 *    as it is appended, every reply taken through redisGetReply);
 *  - store: chunks cascade from a KvTieringManager's primary to the tier
 *    (prepare_store, complete_store), until every SET was answered;
 *  - load: a fresh manager on a fresh primary, over a fresh tier (its
 *    index of known keys empty), looks every chunk up (RETRY until the
 *    EXISTS answers come) and promotes it (GET straight into the slot),
 *    until every one landed;
 *  - load-indexed: the same on another fresh stack whose tier first looked
 *    every chunk up, untimed (its EXISTS replies fill its index, as a
 *    process that stored the chunks itself or saw them once): every lookup
 *    of the timed pass is answered from the index, and a load is its GET
 *    alone. Its `#` line says how many lookups the index answered.
 *
 *   store 256KiB redis: <x> GB/s = <y>% of ceiling <z> GB/s (<h>% of hiredis's <g> GB/s;
 *     <s>% of raw slots to slots, <u> GB/s), cpu <c> s/GB = <r>x hiredis's <k> s/GB
 *
 * where "raw slots to slots" is the raw client again, SET from and GET
 * into as much memory as the tier's primary, a slot at a time: the other
 * clients move one value that stays in the caches.
 *
 * Stored slots carry their checksum, as KvHostDevice's copy into the
 * primary leaves it: the tier writes it into the value's record without
 * reading the payload (as bench/fs-throughput); --no-carried-checksum
 * measures the tier computing it instead.
 *
 * Each round measures the ceiling, then the store, then the load; with
 * --rounds R (3) the median round by ratio is printed, each round as a `#`
 * line. GB/s counts payload bytes; the ceiling counts the value bytes the
 * clients moved. CPU is this process's (user + system, all
 * threads) per GB; the server's is not counted.
 *
 *   redis-throughput [--server HOST:PORT] [--cluster] [--total SIZE]
 *                    [--chunk-sizes 256KiB,2MiB] [--depth N] [--clients N]
 *                    [--rounds R] [--no-carried-checksum]
 */

static char *opt_server;
static gboolean opt_cluster;
static char *opt_total_str;
static char *opt_chunks;
static gint opt_depth = 16;
static gint opt_clients = 4;
static gint opt_rounds = 3;
static gboolean opt_carry_checksum = TRUE;

static GOptionEntry entries[] = {
  { "server", 0, 0, G_OPTION_ARG_STRING, &opt_server, "An existing server (host:port)", "ADDR" },
  { "cluster", 0, 0, G_OPTION_ARG_NONE, &opt_cluster, "A Redis Cluster of 3 masters", NULL },
  { "total", 0, 0, G_OPTION_ARG_STRING, &opt_total_str, "Bytes per pass (default 256MiB)", "SIZE" },
  { "chunk-sizes", 0, 0, G_OPTION_ARG_STRING, &opt_chunks, "Chunk sizes (default 256KiB,2MiB)", "LIST" },
  { "depth", 0, 0, G_OPTION_ARG_INT, &opt_depth, "redis-benchmark pipeline depth (-P)", "N" },
  { "clients", 0, 0, G_OPTION_ARG_INT, &opt_clients, "redis-benchmark connections (-c)", "N" },
  { "rounds", 0, 0, G_OPTION_ARG_INT, &opt_rounds, "Rounds; the median by ratio is reported (default 3)", "R" },
  { "no-carried-checksum", 0, G_OPTION_FLAG_REVERSE, G_OPTION_ARG_NONE, &opt_carry_checksum,
    "Stored slots carry no checksum: the tier computes each one", NULL },
  { NULL }
};

#define N_CLUSTER_NODES 3

static GPid server_pids[N_CLUSTER_NODES];
static guint server_ports[N_CLUSTER_NODES];
static char *work_dir;

/* ---- servers ------------------------------------------------------------ */

static guint
free_port (void)
{
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
  g_autoptr(GSocketAddress) bound = NULL;
  guint port;

  g_socket_bind (socket, any, FALSE, NULL);
  bound = g_socket_get_local_address (socket, NULL);
  port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  g_socket_close (socket, NULL);
  return port > 55000 ? free_port () : port;
}

static void
die_with_parent (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

static char *
run_cli (guint        port,
         const char  *a1,
         const char  *a2)
{
  g_autofree char *port_str = g_strdup_printf ("%u", port);
  const char *argv[] = { "redis-cli", "-h", "127.0.0.1", "-p", port_str, a1, a2, NULL };
  char *out = NULL;

  if (!g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH | G_SPAWN_STDERR_TO_DEV_NULL,
                     NULL, NULL, &out, NULL, NULL, NULL))
    return g_strdup ("");
  return g_strstrip (out);
}

static void
stop_servers (void)
{
  for (guint i = 0; i < N_CLUSTER_NODES; i++)
    if (server_pids[i] != 0)
      {
        kill (server_pids[i], SIGTERM);
        waitpid (server_pids[i], NULL, 0);
        server_pids[i] = 0;
      }
}

static gboolean
start_server (guint    i,
              GError **error)
{
  g_autofree char *dir = g_strdup_printf ("%s/node%u", work_dir, i);
  g_autofree char *port = NULL;
  g_autofree char *conf = g_strdup_printf ("nodes-%u.conf", i);
  const char *argv[] = { "redis-server", "--port", NULL, "--bind", "127.0.0.1", "--save", "",
                         "--appendonly", "no", "--protected-mode", "no", "--dir", dir,
                         "--cluster-enabled", opt_cluster ? "yes" : "no",
                         "--cluster-config-file", conf, NULL };
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  server_ports[i] = free_port ();
  port = g_strdup_printf ("%u", server_ports[i]);
  argv[2] = port;
  g_mkdir (dir, 0700);
  if (!g_spawn_async (dir, (char **) argv, NULL,
                      G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL,
                      die_with_parent, NULL, &server_pids[i], error))
    return FALSE;
  for (;;)
    {
      g_autofree char *pong = run_cli (server_ports[i], "PING", NULL);

      if (g_strcmp0 (pong, "PONG") == 0)
        return TRUE;
      if (g_get_monotonic_time () > end)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                       "redis-server on port %s did not start", port);
          return FALSE;
        }
      g_usleep (20000);
    }
}

/* Starts the server(s); returns the tier's `servers`. */
static char *
start_servers (GError **error)
{
  guint n = opt_cluster ? N_CLUSTER_NODES : 1;

  work_dir = g_dir_make_tmp ("kvtier-redis-bench-XXXXXX", error);
  if (work_dir == NULL)
    return NULL;
  for (guint i = 0; i < n; i++)
    if (!start_server (i, error))
      return NULL;
  if (opt_cluster)
    {
      g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
      int status = 0;

      g_ptr_array_add (argv, g_strdup ("redis-cli"));
      g_ptr_array_add (argv, g_strdup ("--cluster"));
      g_ptr_array_add (argv, g_strdup ("create"));
      for (guint i = 0; i < n; i++)
        g_ptr_array_add (argv, g_strdup_printf ("127.0.0.1:%u", server_ports[i]));
      g_ptr_array_add (argv, g_strdup ("--cluster-yes"));
      g_ptr_array_add (argv, NULL);
      if (!g_spawn_sync (NULL, (char **) argv->pdata, NULL,
                         G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL,
                         NULL, NULL, &status, error) ||
          !g_spawn_check_wait_status (status, error))
        return NULL;
      for (guint i = 0; i < n; i++)
        for (gint64 end = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;;)
          {
            g_autofree char *info = run_cli (server_ports[i], "CLUSTER", "INFO");

            if (strstr (info, "cluster_state:ok") != NULL)
              break;
            if (g_get_monotonic_time () > end)
              {
                g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "the cluster is not ok");
                return NULL;
              }
            g_usleep (100000);
          }
    }
  return g_strdup_printf ("127.0.0.1:%u", server_ports[0]);
}

static void
flush_all (const char *servers)
{
  if (opt_server != NULL)
    {
      g_autofree char *host = NULL;
      const char *colon = strrchr (servers, ':');

      if (colon != NULL)
        {
          g_autofree char *out = run_cli ((guint) g_ascii_strtoull (colon + 1, NULL, 10),
                                          "FLUSHALL", NULL);
        }
      return;
    }
  for (guint i = 0; i < N_CLUSTER_NODES; i++)
    if (server_pids[i] != 0)
      {
        g_autofree char *out = run_cli (server_ports[i], "FLUSHALL", NULL);
      }
}

/* ---- the ceiling ---------------------------------------------------------- */

/* redis-benchmark's SET and GET rates, in value GB/s. */
static gboolean
ceiling (const char *servers,
         gsize       value_bytes,
         guint64     total,
         double     *set_gbs,
         double     *get_gbs)
{
  g_autofree char *host = g_strndup (servers, strrchr (servers, ':') - servers);
  g_autofree char *port = g_strdup (strrchr (servers, ':') + 1);
  g_autofree char *d = g_strdup_printf ("%" G_GSIZE_FORMAT, value_bytes);
  g_autofree char *n = g_strdup_printf ("%" G_GUINT64_FORMAT, MAX (total / value_bytes, 64));
  g_autofree char *p = g_strdup_printf ("%d", opt_depth);
  g_autofree char *c = g_strdup_printf ("%d", opt_clients);
  g_autofree char *out = NULL;
  g_autoptr(GError) error = NULL;
  const char *argv[] = { "redis-benchmark", "-h", host, "-p", port, "-t", "set,get", "-d", d,
                         "-n", n, "-P", p, "-c", c, "--csv", opt_cluster ? "--cluster" : NULL,
                         NULL };
  g_auto(GStrv) lines = NULL;
  int status = 0;

  *set_gbs = *get_gbs = 0;
  if (!g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH | G_SPAWN_STDERR_TO_DEV_NULL,
                     NULL, NULL, &out, NULL, &status, &error))
    {
      g_printerr ("redis-benchmark: %s\n", error->message);
      return FALSE;
    }
  lines = g_strsplit (out, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) fields = g_strsplit (lines[i], ",", -1);
      double rps;

      if (g_strv_length (fields) < 2)
        continue;
      rps = g_ascii_strtod (g_strdelimit (fields[1], "\"", ' '), NULL);
      if (g_str_has_prefix (fields[0], "\"SET\""))
        *set_gbs = rps * value_bytes / 1e9;
      else if (g_str_has_prefix (fields[0], "\"GET\""))
        *get_gbs = rps * value_bytes / 1e9;
    }
  return *set_gbs > 0 && *get_gbs > 0;
}

/* ---- the raw pipelined client ------------------------------------------ */

/* One connection per node, as the tier has, moving the same values with
 * nothing but the socket calls: SET from one preallocated value, GET into
 * one scratch buffer, at most @depth commands in flight, a writer and a
 * reader thread per connection. With @slots, SET from and GET into
 * slot-sized memory in turn instead, as the tier moves its primary's
 * slots: the one value and the scratch buffer stay in the caches. */
typedef struct
{
  GSocketConnection *connection;   /* owns @socket; closes it when freed */
  GSocket  *socket;
  char      tag[32];     /* a hash tag the node owns ({t<n>}), cluster */
  guint     node;
  gboolean  get;
  guint64   n_commands;
  gsize     value_bytes;
  const guint8 *value;
  guint8   *slots;       /* NULL, or n_slots values in turn */
  guint     n_slots;
  guint     depth;
  GMutex    lock;
  GCond     cond;
  guint64   sent;
  guint64   answered;
  gboolean  failed;
} RawConnection;

static gboolean
raw_send_all (GSocket     *socket,
              GOutputVector *vectors,
              guint        n)
{
  while (n > 0)
    {
      gssize w = g_socket_send_message (socket, NULL, vectors, n, NULL, 0, 0, NULL, NULL);

      if (w <= 0)
        return FALSE;
      while (n > 0 && (gsize) w >= vectors->size)
        {
          w -= vectors->size;
          vectors++;
          n--;
        }
      if (n > 0)
        {
          vectors->buffer = (const guint8 *) vectors->buffer + w;
          vectors->size -= w;
        }
    }
  return TRUE;
}

/* A one-line reply to a small command (the tag search). */
static char *
raw_command (GSocket    *socket,
             const char *command)
{
  char buf[256];
  gssize n;
  GOutputVector v = { command, strlen (command) };

  if (!raw_send_all (socket, &v, 1))
    return NULL;
  n = g_socket_receive (socket, buf, sizeof buf - 1, NULL, NULL);
  if (n <= 0)
    return NULL;
  buf[n] = '\0';
  return g_strdup (buf);
}

static char *
raw_key (RawConnection *c,
         guint64        i)
{
  return g_strdup_printf ("%sraw:%" G_GUINT64_FORMAT, c->tag, i);
}

static gpointer
raw_writer (gpointer data)
{
  RawConnection *c = data;
  g_autofree char *value_header = g_strdup_printf ("$%" G_GSIZE_FORMAT "\r\n", c->value_bytes);

  for (guint64 i = 0; i < c->n_commands; i++)
    {
      g_autofree char *key = raw_key (c, i);
      g_autofree char *head = NULL;
      GOutputVector v[3];
      guint n = 0;

      g_mutex_lock (&c->lock);
      while (c->sent - c->answered >= c->depth && !c->failed)
        g_cond_wait (&c->cond, &c->lock);
      c->sent++;
      g_mutex_unlock (&c->lock);
      if (c->get)
        {
          head = g_strdup_printf ("*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen (key), key);
          v[n++] = (GOutputVector) { head, strlen (head) };
        }
      else
        {
          const guint8 *value = c->slots != NULL ? c->slots + (i % c->n_slots) * c->value_bytes
                                                 : c->value;

          head = g_strdup_printf ("*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n%s", strlen (key), key, value_header);
          v[n++] = (GOutputVector) { head, strlen (head) };
          v[n++] = (GOutputVector) { value, c->value_bytes };
          v[n++] = (GOutputVector) { "\r\n", 2 };
        }
      if (!raw_send_all (c->socket, v, n))
        {
          c->failed = TRUE;
          return NULL;
        }
    }
  return NULL;
}

static void
raw_answered (RawConnection *c,
              guint64        answered,
              gboolean       failed)
{
  g_mutex_lock (&c->lock);
  c->answered = answered;
  c->failed = c->failed || failed;
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
}

static gboolean
raw_receive_all (GSocket *socket,
                 void    *buffer,
                 gsize    len)
{
  for (gsize done = 0; done < len; )
    {
      gssize n = g_socket_receive (socket, (char *) buffer + done, len - done, NULL, NULL);

      if (n <= 0)
        return FALSE;
      done += n;
    }
  return TRUE;
}

/* GET replies one at a time, each value straight into the next slot. */
static gpointer
raw_reader_into_slots (RawConnection *c)
{
  g_autofree char *get_head = g_strdup_printf ("$%" G_GSIZE_FORMAT "\r\n", c->value_bytes);
  gsize head_len = strlen (get_head);
  char head[64];

  for (guint64 i = 0; i < c->n_commands; i++)
    {
      guint8 *slot = c->slots + (i % c->n_slots) * c->value_bytes;

      if (!raw_receive_all (c->socket, head, head_len) || memcmp (head, get_head, head_len) != 0 ||
          !raw_receive_all (c->socket, slot, c->value_bytes) || !raw_receive_all (c->socket, head, 2))
        {
          g_printerr ("raw client: a GET reply was not a value of %" G_GSIZE_FORMAT " bytes\n",
                      c->value_bytes);
          raw_answered (c, i, TRUE);
          return NULL;
        }
      raw_answered (c, i + 1, FALSE);
    }
  return NULL;
}

/* Counts replies by their bytes: "+OK\r\n" per SET, "$<len>\r\n<value>\r\n"
 * per GET. */
static gpointer
raw_reader (gpointer data)
{
  RawConnection *c = data;
  g_autofree char *get_head = g_strdup_printf ("$%" G_GSIZE_FORMAT "\r\n", c->value_bytes);
  gsize reply_bytes = c->get ? strlen (get_head) + c->value_bytes + 2 : 5;
  gsize buf_size = 1 << 20;
  g_autofree guint8 *buf = g_malloc (buf_size);
  guint64 received = 0;
  guint64 expected = c->n_commands * reply_bytes;

  if (c->get && c->slots != NULL)
    return raw_reader_into_slots (c);
  while (received < expected)
    {
      gssize n = g_socket_receive (c->socket, (char *) buf, MIN (buf_size, expected - received),
                                   NULL, NULL);
      guint64 answered;

      if (n <= 0)
        {
          raw_answered (c, c->answered, TRUE);
          return NULL;
        }
      if (received == 0 && buf[0] != (c->get ? '$' : '+'))
        {
          g_printerr ("raw client: unexpected reply %.*s\n", (int) MIN (n, 60), buf);
          c->failed = TRUE;
        }
      received += n;
      answered = received / reply_bytes;
      raw_answered (c, answered, FALSE);
    }
  return NULL;
}

/* The raw client's SET then GET rate over @n_nodes nodes, in value GB/s;
 * @into_slots: from and into @slot_bytes of memory in all, as many slots as
 * the tier's primary has. */
static gboolean
raw_ceiling (guint    n_nodes,
             const guint *ports,
             gsize    value_bytes,
             guint64  total,
             gsize    slot_bytes,
             gboolean into_slots,
             double  *set_gbs,
             double  *get_gbs)
{
  g_autofree guint8 *value = g_malloc (value_bytes);
  RawConnection *conns = g_new0 (RawConnection, n_nodes);
  guint64 per_node = MAX (total / value_bytes / n_nodes, 16);
  gboolean ok = TRUE;

  memset (value, 0xa5, value_bytes);
  for (guint i = 0; i < n_nodes && ok; i++)
    {
      RawConnection *c = &conns[i];
      g_autoptr(GSocketClient) client = g_socket_client_new ();
      g_autoptr(GSocketConnection) connection =
        g_socket_client_connect_to_host (client, "127.0.0.1", ports[i], NULL, NULL);

      if (connection == NULL)
        {
          ok = FALSE;
          break;
        }
      c->connection = g_object_ref (connection);
      c->socket = g_socket_connection_get_socket (connection);
      g_socket_set_option (c->socket, IPPROTO_TCP, TCP_NODELAY, 1, NULL);
      c->node = i;
      c->value = value;
      c->value_bytes = value_bytes;
      if (into_slots)
        {
          c->n_slots = MAX (slot_bytes / n_nodes / value_bytes, 1);
          c->slots = g_malloc (c->n_slots * value_bytes);
          /* touched now, as the tier's primary is before it is measured */
          memset (c->slots, 0xa5, c->n_slots * value_bytes);
        }
      c->n_commands = per_node;
      /* the tier's per-node budget (node-inflight-bytes, 256 MiB) */
      c->depth = MAX ((256u << 20) / value_bytes, 1);
      g_mutex_init (&c->lock);
      g_cond_init (&c->cond);
      if (opt_cluster)
        for (guint t = 0; c->tag[0] == '\0'; t++)
          {
            g_autofree char *tag = g_strdup_printf ("{t%u}", t);
            g_autofree char *cmd = g_strdup_printf ("*2\r\n$6\r\nEXISTS\r\n$%zu\r\n%s\r\n",
                                                    strlen (tag), tag);
            g_autofree char *reply = raw_command (c->socket, cmd);

            if (reply == NULL)
              {
                ok = FALSE;
                break;
              }
            if (reply[0] == ':')
              g_strlcpy (c->tag, tag, sizeof c->tag);
          }
    }
  for (guint pass = 0; pass < 2 && ok; pass++)
    {
      GThread *threads[2 * N_CLUSTER_NODES];
      double t = bench_now_s ();

      for (guint i = 0; i < n_nodes; i++)
        {
          conns[i].get = pass == 1;
          conns[i].sent = conns[i].answered = 0;
          threads[2 * i] = g_thread_new ("raw-writer", raw_writer, &conns[i]);
          threads[2 * i + 1] = g_thread_new ("raw-reader", raw_reader, &conns[i]);
        }
      for (guint i = 0; i < 2 * n_nodes; i++)
        g_thread_join (threads[i]);
      t = bench_now_s () - t;
      for (guint i = 0; i < n_nodes; i++)
        ok = ok && !conns[i].failed;
      *(pass == 0 ? set_gbs : get_gbs) = n_nodes * per_node * value_bytes / 1e9 / t;
    }
  for (guint i = 0; i < n_nodes; i++)
    {
      conns[i].socket = NULL;
      g_clear_object (&conns[i].connection);
      g_free (conns[i].slots);
      if (conns[i].depth > 0)
        {
          g_mutex_clear (&conns[i].lock);
          g_cond_clear (&conns[i].cond);
        }
    }
  g_free (conns);
  return ok;
}

/* ---- a plain hiredis client -------------------------------------------- */

/* What a plain C client of the same server pays: hiredis formats each SET
 * into its output buffer (a copy of the value) and hands each GET value
 * back in a reply it allocates. One blocking context per node, in a thread
 * of its own, with as many commands in flight as the tier allows a node;
 * each command is written as soon as it is appended, so the window never
 * drains while replies wait in the reader. */
typedef struct
{
  guint         port;
  gboolean      get;
  guint64       n_commands;
  gsize         value_bytes;
  const guint8 *value;
  guint         depth;
  gboolean      failed;
} HiredisRun;

static gboolean
hiredis_flush (redisContext *ctx)
{
  int done = 0;

  while (!done)
    if (redisBufferWrite (ctx, &done) != REDIS_OK)
      return FALSE;
  return TRUE;
}

static gpointer
hiredis_run (gpointer data)
{
  HiredisRun *r = data;
  struct timeval timeout = { 60, 0 };
  redisContext *ctx = redisConnectWithTimeout ("127.0.0.1", (int) r->port, timeout);
  char tag[32] = "";
  guint64 sent = 0, answered = 0;

  if (ctx == NULL || ctx->err != 0 || redisSetTimeout (ctx, timeout) != REDIS_OK)
    goto fail;
  /* in a cluster, a hash tag this node owns */
  for (guint t = 0; opt_cluster && tag[0] == '\0'; t++)
    {
      g_autofree char *candidate = g_strdup_printf ("{t%u}", t);
      redisReply *reply = redisCommand (ctx, "EXISTS %s", candidate);

      if (reply == NULL)
        goto fail;
      if (reply->type == REDIS_REPLY_INTEGER)
        g_strlcpy (tag, candidate, sizeof tag);
      freeReplyObject (reply);
    }
  while (answered < r->n_commands)
    {
      redisReply *reply = NULL;
      gboolean good;

      while (sent < r->n_commands && sent - answered < r->depth)
        {
          g_autofree char *key = g_strdup_printf ("%shi:%" G_GUINT64_FORMAT, tag, sent);
          const char *argv[3] = { r->get ? "GET" : "SET", key, (const char *) r->value };
          size_t lens[3] = { 3, strlen (key), r->value_bytes };

          if (redisAppendCommandArgv (ctx, r->get ? 2 : 3, argv, lens) != REDIS_OK ||
              !hiredis_flush (ctx))
            goto fail;
          sent++;
        }
      if (redisGetReply (ctx, (void **) &reply) != REDIS_OK || reply == NULL)
        goto fail;
      good = r->get ? reply->type == REDIS_REPLY_STRING && reply->len == r->value_bytes
                    : reply->type == REDIS_REPLY_STATUS;
      freeReplyObject (reply);
      if (!good)
        {
          g_printerr ("hiredis client: unexpected reply to %s\n", r->get ? "GET" : "SET");
          goto fail;
        }
      answered++;
    }
  redisFree (ctx);
  return NULL;

fail:
  if (ctx != NULL && ctx->err != 0)
    g_printerr ("hiredis client: %s\n", ctx->errstr);
  if (ctx != NULL)
    redisFree (ctx);
  r->failed = TRUE;
  return NULL;
}

/* The hiredis client's SET then GET rate over @n_nodes nodes, in value
 * GB/s, and this process's CPU per value GB for each. */
static gboolean
hiredis_ceiling (guint        n_nodes,
                 const guint *ports,
                 gsize        value_bytes,
                 guint64      total,
                 double      *gbs,
                 double      *cpu)
{
  g_autofree guint8 *value = g_malloc (value_bytes);
  guint64 per_node = MAX (total / value_bytes / n_nodes, 16);
  gboolean ok = TRUE;

  memset (value, 0xa5, value_bytes);
  for (guint pass = 0; pass < 2 && ok; pass++)
    {
      HiredisRun runs[N_CLUSTER_NODES];
      GThread *threads[N_CLUSTER_NODES];
      double t = bench_now_s (), c = bench_self_cpu_s (), gb = n_nodes * per_node * value_bytes / 1e9;

      for (guint i = 0; i < n_nodes; i++)
        {
          runs[i] = (HiredisRun) {
            .port = ports[i], .get = pass == 1, .n_commands = per_node,
            .value_bytes = value_bytes, .value = value,
            /* the tier's per-node budget (node-inflight-bytes, 256 MiB) */
            .depth = MAX ((256u << 20) / value_bytes, 1),
          };
          threads[i] = g_thread_new ("hiredis-client", hiredis_run, &runs[i]);
        }
      for (guint i = 0; i < n_nodes; i++)
        {
          g_thread_join (threads[i]);
          ok = ok && !runs[i].failed;
        }
      gbs[pass] = gb / (bench_now_s () - t);
      cpu[pass] = (bench_self_cpu_s () - c) / gb;
    }
  return ok;
}

/* ---- the tier through a manager ------------------------------------------ */

static guint64
loaded_chunks (KvSecondaryTier *tier)
{
  return kv_redis_tier_get_counter (KV_REDIS_TIER (tier), KV_REDIS_COUNTER_LOADED_CHUNKS);
}

static guint64
load_failures (KvSecondaryTier *tier)
{
  return kv_redis_tier_get_counter (KV_REDIS_TIER (tier), KV_REDIS_COUNTER_LOAD_FAILURES);
}

static gboolean
stack_init (BenchStack  *s,
            const char  *servers,
            gsize        chunk,
            guint        n_slots,
            GError     **error)
{
  s->key_tag = 0xc3;
  s->loaded_chunks = loaded_chunks;
  s->load_failures = load_failures;
  if (!bench_stack_init_primary (s, n_slots, chunk, 0x5a, error))
    return FALSE;
  if (opt_carry_checksum)
    bench_stack_carry_checksums (s);
  return bench_stack_add_tier (s, g_initable_new (KV_TYPE_REDIS_TIER, NULL, error,
                                                  "tier-type", "redis",
                                                  "primary", s->buffer,
                                                  "servers", servers,
                                                  "cluster", opt_cluster,
                                                  "deadline-ms", 60000,
                                                  NULL), error);
}

/* Untimed: every chunk looked up at the tier, so that its EXISTS replies put
 * every one in the tier's index. */
static gboolean
warm_index (BenchStack *s,
            guint64     n_chunks)
{
  bench_stack_look_up_all (s, n_chunks, 60 * G_USEC_PER_SEC);
  return kv_redis_tier_get_index_size (KV_REDIS_TIER (s->tier)) >= n_chunks;
}

typedef struct
{
  double gbs;
  double ceiling;
  double cpu;
  double hiredis_gbs;  /* the plain hiredis client's rate and CPU, same round */
  double hiredis_cpu;
  double slots_gbs;    /* the raw client's between slot-sized memory, same round */
} Sample;

static gint
sample_compare (gconstpointer a,
                gconstpointer b)
{
  const Sample *x = a, *y = b;
  double rx = x->gbs / x->ceiling, ry = y->gbs / y->ceiling;

  return (rx > ry) - (rx < ry);
}

/* The median round by ratio. */
static void
report (const char *what,
        const char *size,
        GArray     *samples)
{
  const Sample *m;

  g_array_sort (samples, sample_compare);
  m = &g_array_index (samples, Sample, samples->len / 2);
  g_print ("%s %s redis%s: %.2f GB/s = %.0f%% of ceiling %.2f GB/s", what, size,
           opt_cluster ? "-cluster" : "", m->gbs, 100 * m->gbs / m->ceiling, m->ceiling);
  if (m->hiredis_gbs > 0)
    g_print (" (%.0f%% of hiredis's %.2f GB/s", 100 * m->gbs / m->hiredis_gbs, m->hiredis_gbs);
  if (m->slots_gbs > 0)
    g_print ("%s%.0f%% of raw slots to slots, %.2f GB/s", m->hiredis_gbs > 0 ? "; " : " (",
             100 * m->gbs / m->slots_gbs, m->slots_gbs);
  if (m->hiredis_gbs > 0 || m->slots_gbs > 0)
    g_print (")");
  if (m->hiredis_gbs > 0)
    g_print (", cpu %.3f s/GB = %.2fx hiredis's %.3f s/GB\n", m->cpu, m->cpu / m->hiredis_cpu,
             m->hiredis_cpu);
  else
    g_print (", cpu %.3f s/GB\n", m->cpu);
}

/* The ceilings of one round: the best of redis-benchmark, the raw client
 * and the hiredis client, each direction; the hiredis client's own rates
 * and CPU per GB ([0] SET, [1] GET) go to @hiredis_gbs and @hiredis_cpu
 * (0 when it was not run), and the raw client's between @slot_bytes of
 * memory, as the tier's primary, to @slots_gbs: the others move values
 * that stay in the caches. */
static gboolean
measure_ceiling (const char *servers,
                 gsize       value_bytes,
                 guint64     total,
                 gsize       slot_bytes,
                 double     *set_gbs,
                 double     *get_gbs,
                 double     *hiredis_gbs,
                 double     *hiredis_cpu,
                 double     *slots_gbs)
{
  double bench_set = 0, bench_get = 0, raw_set = 0, raw_get = 0;
  gboolean have_hiredis = FALSE;
  guint n_nodes = opt_cluster ? N_CLUSTER_NODES : 1;
  guint ports[N_CLUSTER_NODES] = { 0 };
  gboolean have_raw = FALSE;

  flush_all (servers);
  if (!ceiling (servers, value_bytes, total, &bench_set, &bench_get))
    return FALSE;
  flush_all (servers);
  if (opt_server == NULL)
    memcpy (ports, server_ports, sizeof ports);
  else if (!opt_cluster)
    ports[0] = (guint) g_ascii_strtoull (strrchr (servers, ':') + 1, NULL, 10);
  slots_gbs[0] = slots_gbs[1] = 0;
  if (ports[0] != 0)
    {
      have_raw = raw_ceiling (n_nodes, ports, value_bytes, total, slot_bytes, FALSE, &raw_set, &raw_get);
      flush_all (servers);
      if (have_raw && !raw_ceiling (n_nodes, ports, value_bytes, total, slot_bytes, TRUE,
                                    &slots_gbs[0], &slots_gbs[1]))
        slots_gbs[0] = slots_gbs[1] = 0;
    }
  flush_all (servers);
  hiredis_gbs[0] = hiredis_gbs[1] = hiredis_cpu[0] = hiredis_cpu[1] = 0;
  if (ports[0] != 0)
    {
      have_hiredis = hiredis_ceiling (n_nodes, ports, value_bytes, total, hiredis_gbs, hiredis_cpu);
      if (!have_hiredis)
        hiredis_gbs[0] = hiredis_gbs[1] = 0;
      flush_all (servers);
    }
  g_print ("#   ceiling: redis-benchmark set %.2f get %.2f GB/s; raw client set %.2f get %.2f GB/s%s"
           " (slots to slots set %.2f get %.2f GB/s); "
           "hiredis set %.2f get %.2f GB/s, cpu %.3f / %.3f s/GB%s\n",
           bench_set, bench_get, raw_set, raw_get, have_raw ? "" : " (not measured)",
           slots_gbs[0], slots_gbs[1],
           hiredis_gbs[0], hiredis_gbs[1], hiredis_cpu[0], hiredis_cpu[1],
           have_hiredis ? "" : " (not measured)");
  *set_gbs = MAX (MAX (bench_set, raw_set), hiredis_gbs[0]);
  *get_gbs = MAX (MAX (bench_get, raw_get), hiredis_gbs[1]);
  return TRUE;
}

static gboolean
run_chunk_size (const char  *servers,
                gsize        chunk,
                guint64      total,
                GError     **error)
{
  g_autofree char *name = bench_size_name (chunk);
  guint64 n_chunks = MAX (total / chunk, 16);
  double gb = n_chunks * chunk / 1e9;
  guint primary_slots = MIN (n_chunks, MAX ((256u << 20) / chunk, 16));
  guint batch = MAX ((16u << 20) / chunk, 1);
  g_autoptr(GArray) stores = g_array_new (FALSE, FALSE, sizeof (Sample));
  g_autoptr(GArray) loads = g_array_new (FALSE, FALSE, sizeof (Sample));
  g_autoptr(GArray) indexed = g_array_new (FALSE, FALSE, sizeof (Sample));

  for (gint round = 0; round < opt_rounds; round++)
    {
      double set_ceiling, get_ceiling, t, c, hiredis_gbs[2], hiredis_cpu[2], slots_gbs[2];
      BenchStack store = { 0 }, load = { 0 };
      Sample sample;
      guint64 n_done;

      if (!measure_ceiling (servers, chunk + KV_CHUNK_HEADER_SIZE, total,
                            (gsize) primary_slots * (chunk + KV_CHUNK_HEADER_SIZE), &set_ceiling,
                            &get_ceiling, hiredis_gbs, hiredis_cpu, slots_gbs))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "no ceiling measured");
          return FALSE;
        }
      if (!stack_init (&store, servers, chunk, primary_slots, error))
        {
          bench_stack_clear (&store);
          return FALSE;
        }
      c = bench_self_cpu_s ();
      t = bench_stack_run_store (&store, 0, n_chunks, batch);
      c = bench_self_cpu_s () - c;
      n_done = kv_redis_tier_get_counter (KV_REDIS_TIER (store.tier), KV_REDIS_COUNTER_STORED_CHUNKS);
      bench_shortfall (n_done, n_chunks, "stored");
      sample = (Sample) { gb / t, set_ceiling, c / gb, hiredis_gbs[0], hiredis_cpu[0], slots_gbs[0] };
      g_print ("#   round %d: store %.2f GB/s (%.0f%%), cpu %.3f s/GB\n", round + 1, sample.gbs,
               100 * sample.gbs / sample.ceiling, sample.cpu);
      g_array_append_val (stores, sample);
      bench_stack_clear (&store);

      if (!stack_init (&load, servers, chunk, primary_slots, error))
        {
          bench_stack_clear (&load);
          return FALSE;
        }
      t = bench_stack_timed_load (&load, n_chunks, batch, "loaded", &c);
      sample = (Sample) { gb / t, get_ceiling, c / gb, hiredis_gbs[1], hiredis_cpu[1], slots_gbs[1] };
      g_print ("#   round %d: load %.2f GB/s (%.0f%%), cpu %.3f s/GB\n", round + 1, sample.gbs,
               100 * sample.gbs / sample.ceiling, sample.cpu);
      g_array_append_val (loads, sample);
      bench_stack_clear (&load);

      if (!stack_init (&load, servers, chunk, primary_slots, error))
        {
          bench_stack_clear (&load);
          return FALSE;
        }
      if (!warm_index (&load, n_chunks))
        g_print ("# load-indexed: only %u of %" G_GUINT64_FORMAT " chunks in the index\n",
                 kv_redis_tier_get_index_size (KV_REDIS_TIER (load.tier)), n_chunks);
      {
        KvRedisTier *tier = KV_REDIS_TIER (load.tier);
        guint64 hits = kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_INDEX_HITS);

        t = bench_stack_timed_load (&load, n_chunks, batch, "loaded (index warm)", &c);
        hits = kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_INDEX_HITS) - hits;
        sample = (Sample) { gb / t, get_ceiling, c / gb, hiredis_gbs[1], hiredis_cpu[1], slots_gbs[1] };
        g_print ("#   round %d: load-indexed %.2f GB/s (%.0f%%), cpu %.3f s/GB; %" G_GUINT64_FORMAT
                 " of %" G_GUINT64_FORMAT " chunks' lookups from the index\n", round + 1, sample.gbs,
                 100 * sample.gbs / sample.ceiling, sample.cpu, hits, n_chunks);
      }
      g_array_append_val (indexed, sample);
      bench_stack_clear (&load);
      flush_all (servers);
    }
  report ("store", name, stores);
  report ("load", name, loads);
  report ("load-indexed", name, indexed);
  return TRUE;
}

int
main (int argc, char **argv)
{
  g_autoptr(GOptionContext) context = g_option_context_new ("- redis tier throughput");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) sizes = NULL;
  g_autofree char *servers = NULL;
  guint64 total = 256ULL << 20;
  int status = 0;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  if (opt_total_str != NULL && !bench_parse_size (opt_total_str, &total))
    {
      g_printerr ("Invalid --total %s\n", opt_total_str);
      return 2;
    }
  servers = opt_server != NULL ? g_strdup (opt_server) : start_servers (&error);
  if (servers == NULL)
    {
      g_printerr ("Cannot start redis-server: %s\n", error->message);
      stop_servers ();
      return 1;
    }
  g_print ("# servers %s%s, %" G_GUINT64_FORMAT " MiB per pass, ceiling: redis-benchmark -P %d -c %d\n",
           servers, opt_cluster ? " (cluster of 3 masters)" : "", total >> 20, opt_depth, opt_clients);
  sizes = g_strsplit (opt_chunks != NULL ? opt_chunks : "256KiB,2MiB", ",", -1);
  for (guint i = 0; sizes[i] != NULL && status == 0; i++)
    {
      guint64 chunk;

      if (!bench_parse_size (sizes[i], &chunk))
        {
          g_printerr ("Invalid chunk size %s\n", sizes[i]);
          status = 2;
        }
      else if (!run_chunk_size (servers, chunk, total, &error))
        {
          g_printerr ("%s\n", error->message);
          status = 1;
        }
    }
  if (status == 0 && bench_shortfall_seen ())
    status = 1;
  stop_servers ();
  if (work_dir != NULL)
    {
      g_autofree char *cmd = g_strdup_printf ("rm -rf '%s'", work_dir);

      (void) system (cmd);
    }
  g_free (work_dir);
  return status;
}
