/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

/*
 * bench/peer-throughput: chunks fetched through the peer tier between two
 * processes, against the ceiling of the same machine's loopback TCP.
 *
 *  1. the ceiling: raw loopback TCP, messages the size of one DATA frame
 *     (prefix, chunk header, payload), over 1 and over N connections, no
 *     kvtier (threads of this process, plain sockets);
 *  2. the peer tier: a `kvtier serve` node this program starts (synthetic
 *     chunks) and a peer tier in this process loading them into its primary
 *     slots, N connections, several jobs in flight; without and with TLS.
 *
 * For each chunk size (256 KiB, 2 MiB) it prints
 *   fetch 2MiB peer: <x> GB/s = <y>% of ceiling <z> GB/s, cpu <c> s/GB
 * where the ceiling is the better of the two raw runs made right before
 * (each round pairs them; the line is the median round, every round is a
 * `#` line) and cpu counts both processes (user + system) per GB fetched.
 *
 * Usage: peer-throughput [--seconds S] [--rounds R] [--connections N]
 */

#include <kvtier.h>

#include <arpa/inet.h>
#include <glib/gstdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define GB 1e9

static gdouble opt_seconds = 2.0;
static gint opt_connections = 4;
static gint opt_rounds = 3;

static gdouble
now_s (void)
{
  return g_get_monotonic_time () / 1e6;
}

/* ---- the ceiling: raw loopback TCP ------------------------------------------ */

typedef struct
{
  int      fd;
  gsize    message;
  gdouble  until;
  guint64  bytes;
  guint8  *slots;     /* NULL: one reused buffer; else n_slots messages in turn */
  guint    n_slots;
} Flow;

static gpointer
send_main (gpointer data)
{
  Flow *flow = data;
  g_autofree guint8 *buffer = g_malloc0 (flow->message);

  while (now_s () < flow->until)
    {
      gsize off = 0;

      while (off < flow->message)
        {
          ssize_t n = send (flow->fd, buffer + off, flow->message - off, MSG_NOSIGNAL);

          if (n <= 0)
            return NULL;
          off += n;
        }
    }
  shutdown (flow->fd, SHUT_WR);
  return NULL;
}

static gpointer
receive_main (gpointer data)
{
  Flow *flow = data;
  g_autofree guint8 *buffer = g_malloc (flow->message);

  for (guint i = 0; ; i++)
    {
      guint8 *target = flow->slots != NULL ? flow->slots + (gsize) (i % flow->n_slots) * flow->message
                                           : buffer;
      ssize_t n = recv (flow->fd, target, flow->message, MSG_WAITALL);

      if (n <= 0)
        break;
      flow->bytes += n;
    }
  return NULL;
}

static gdouble self_cpu_s (void);

/* GB/s of @n_conns loopback connections each sending @message-sized
 * messages for opt_seconds; the CPU both ends took per GB in @cpu_s_per_gb.
 * With @slots_bytes, the receivers write in turn over that much memory (as
 * the peer tier writes primary slots) instead of one buffer that stays in
 * the CPU's caches. */
static gdouble
tcp_ceiling (gsize    message,
             guint    n_conns,
             gsize    slots_bytes,
             gdouble *cpu_s_per_gb)
{
  g_autofree guint8 *slots = slots_bytes > 0 ? g_malloc (slots_bytes) : NULL;
  struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  socklen_t len = sizeof addr;
  int listener = socket (AF_INET, SOCK_STREAM, 0);
  g_autofree Flow *senders = g_new0 (Flow, n_conns);
  g_autofree Flow *receivers = g_new0 (Flow, n_conns);
  g_autofree GThread **threads = g_new (GThread *, 2 * n_conns);
  guint64 total = 0;
  gdouble start, elapsed, cpu;
  int one = 1;

  g_assert_cmpint (bind (listener, (struct sockaddr *) &addr, sizeof addr), ==, 0);
  g_assert_cmpint (listen (listener, 64), ==, 0);
  g_assert_cmpint (getsockname (listener, (struct sockaddr *) &addr, &len), ==, 0);
  for (guint i = 0; i < n_conns; i++)
    {
      senders[i].fd = socket (AF_INET, SOCK_STREAM, 0);
      g_assert_cmpint (connect (senders[i].fd, (struct sockaddr *) &addr, sizeof addr), ==, 0);
      setsockopt (senders[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      receivers[i].fd = accept (listener, NULL, NULL);
      g_assert_cmpint (receivers[i].fd, >=, 0);
    }
  if (slots != NULL)
    memset (slots, 0, slots_bytes);   /* faulted in, as warm primary slots are */
  start = now_s ();
  cpu = self_cpu_s ();
  for (guint i = 0; i < n_conns; i++)
    {
      senders[i].message = receivers[i].message = message;
      if (slots != NULL)
        {
          receivers[i].n_slots = MAX (1, slots_bytes / n_conns / message);
          receivers[i].slots = slots + (gsize) i * receivers[i].n_slots * message;
        }
      senders[i].until = start + opt_seconds;
      threads[2 * i] = g_thread_new ("tcp-send", send_main, &senders[i]);
      threads[2 * i + 1] = g_thread_new ("tcp-recv", receive_main, &receivers[i]);
    }
  for (guint i = 0; i < 2 * n_conns; i++)
    g_thread_join (threads[i]);
  elapsed = now_s () - start;
  cpu = self_cpu_s () - cpu;
  for (guint i = 0; i < n_conns; i++)
    {
      total += receivers[i].bytes;
      close (senders[i].fd);
      close (receivers[i].fd);
    }
  close (listener);
  *cpu_s_per_gb = cpu / (total / GB);
  return total / elapsed / GB;
}

/* ---- the peer tier between two processes -------------------------------------- */

static char *dir;

static char *
write_file (const char *name,
            const char *contents)
{
  char *path = g_build_filename (dir, name, NULL);

  g_assert_true (g_file_set_contents_full (path, contents, -1, G_FILE_SET_CONTENTS_CONSISTENT, 0600, NULL));
  return path;
}

static void
openssl (const char *args)
{
  g_autofree char *command = g_strdup_printf ("openssl %s", args);
  g_auto(GStrv) argv = NULL;
  int status = 0;

  g_assert_true (g_shell_parse_argv (command, NULL, &argv, NULL));
  g_assert_true (g_spawn_sync (dir, argv, NULL,
                               G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                               NULL, NULL, NULL, NULL, &status, NULL));
  g_assert_true (g_spawn_check_wait_status (status, NULL));
}

static void
make_certificates (void)
{
  g_autofree char *ext = write_file ("server.ext", "subjectAltName=IP:127.0.0.1\n");
  g_autofree char *sign = g_strdup_printf ("x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem "
                                           "-CAcreateserial -out server.pem -days 2 -extfile %s", ext);

  openssl ("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca-key.pem "
           "-out ca.pem -days 2 -subj /CN=bench-ca");
  openssl ("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server-key.pem "
           "-out server.csr -subj /CN=127.0.0.1");
  openssl (sign);
}

static void
child_setup (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

static gdouble
process_cpu_s (const char *pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%s/stat", pid);
  g_autofree char *stat = NULL;
  g_auto(GStrv) fields = NULL;

  if (!g_file_get_contents (path, &stat, NULL, NULL))
    return 0;
  fields = g_strsplit (strrchr (stat, ')') + 2, " ", -1);
  /* utime and stime are fields 14 and 15, the 12th and 13th after ')' */
  return (g_ascii_strtod (fields[11], NULL) + g_ascii_strtod (fields[12], NULL)) / sysconf (_SC_CLK_TCK);
}

static gdouble
self_cpu_s (void)
{
  struct rusage usage;

  getrusage (RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 +
         usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
}

static KvKey *
synthetic_key (guint64 index)
{
  g_autofree char *text = g_strdup_printf ("kvtier-synthetic:%" G_GUINT64_FORMAT, index);
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  guint8 digest[32];
  gsize len = sizeof digest;

  g_checksum_update (sum, (const guchar *) text, -1);
  g_checksum_get_digest (sum, digest, &len);
  return kv_key_new (digest, len, 0);
}

typedef struct
{
  gdouble gb_per_s;
  gdouble cpu_s_per_gb;
  gdouble client_cpu_s_per_gb;
  gdouble server_cpu_s_per_gb;
} PeerResult;

/* The chunks the peer run fetches, and their bytes. */
static guint
peer_n_chunks (gsize chunk)
{
  return (guint) MIN (256, (256u << 20) / chunk);
}

static gsize
peer_slots_bytes (gsize chunk)
{
  return peer_n_chunks (chunk) * (20 + 4096 + chunk);
}

static PeerResult
peer_fetch (gsize    chunk,
            gboolean tls)
{
  guint n_chunks = peer_n_chunks (chunk);
  guint per_job = (guint) MAX (1, MIN (16, (8u << 20) / chunk));
  g_autofree char *secret = write_file ("secret", "bench-secret-0123456789abcdef");
  g_autofree char *tls_conf = tls ? g_strdup_printf ("tls = true\ntls-cert-file = %s/server.pem\n"
                                                     "tls-key-file = %s/server-key.pem\n", dir, dir)
                                  : g_strdup ("");
  g_autofree char *conf_text = g_strdup_printf ("[primary]\nsize = %" G_GSIZE_FORMAT "\nslot-size = %" G_GSIZE_FORMAT
                                                "\n\n[tier peer]\ntype = peer\nlisten = 127.0.0.1:0\n"
                                                "secret-file = %s\nnamespace = bench\n%s",
                                                (n_chunks + 8) * chunk, chunk, secret, tls_conf);
  g_autofree char *conf = write_file ("server.conf", conf_text);
  g_autofree char *count = g_strdup_printf ("%u", n_chunks);
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autoptr(GSubprocess) server = NULL;
  g_autoptr(GDataInputStream) out = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *line = NULL;
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(KvSecondaryTier) tier = NULL;
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  g_autoptr(KvRequest) request = kv_request_new ("bench", NULL);
  GVariantBuilder props;
  const char *exe = g_getenv ("KVTIER_EXE") ? g_getenv ("KVTIER_EXE") : KVTIER_EXE_PATH;
  const char *peer;
  guint64 job_id = 0, bytes = 0;
  gdouble start = 0, elapsed, cpu_self = 0, cpu_server = 0;
  PeerResult result;

  g_subprocess_launcher_set_child_setup (launcher, child_setup, NULL, NULL);
  server = g_subprocess_launcher_spawn (launcher, &error, exe, "serve", "--config", conf, "--http", "",
                                        "--synthetic-chunks", count, NULL);
  g_assert_no_error (error);
  out = g_data_input_stream_new (g_subprocess_get_stdout_pipe (server));
  line = g_data_input_stream_read_line_utf8 (out, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (line);
  peer = strstr (line, "peer=");
  g_assert_nonnull (peer);
  peer += 5;

  g_assert_true (kv_tier_registry_load_plugins (registry, NULL));
  buffer = kv_host_buffer_new (n_chunks, chunk, &error);
  g_assert_no_error (error);
  g_variant_builder_init (&props, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&props, "{sv}", "peers", g_variant_new_string (peer));
  g_variant_builder_add (&props, "{sv}", "secret-file", g_variant_new_string (secret));
  g_variant_builder_add (&props, "{sv}", "namespace", g_variant_new_string ("bench"));
  g_variant_builder_add (&props, "{sv}", "connections-per-peer",
                         g_variant_new_take_string (g_strdup_printf ("%d", opt_connections)));
  g_variant_builder_add (&props, "{sv}", "deadline-ms", g_variant_new_string ("30000"));
  if (tls)
    {
      g_variant_builder_add (&props, "{sv}", "tls", g_variant_new_boolean (TRUE));
      g_variant_builder_add (&props, "{sv}", "tls-ca-file",
                             g_variant_new_take_string (g_build_filename (dir, "ca.pem", NULL)));
    }
  tier = kv_tier_registry_create_tier (registry, "peer", buffer, NULL, g_variant_builder_end (&props), &error);
  g_assert_no_error (error);
  for (guint i = 0; i < n_chunks; i++)
    g_ptr_array_add (keys, synthetic_key (i));

  /* one warm-up round opens the connections */
  for (guint round = 0; ; round++)
    {
      guint n_jobs = n_chunks / per_job, n_done = 0;

      if (round == 1)
        {
          start = now_s ();
          cpu_self = self_cpu_s ();
          cpu_server = process_cpu_s (g_subprocess_get_identifier (server));
        }
      for (guint j = 0; j < n_jobs; j++)
        {
          g_autofree guint32 *ids = g_new (guint32, per_job);
          g_autoptr(KvTransferJob) job = NULL;

          for (guint k = 0; k < per_job; k++)
            ids[k] = j * per_job + k;
          job = kv_transfer_job_new (++job_id, (KvKey * const *) keys->pdata + j * per_job, ids,
                                     per_job, TRUE, request);
          g_assert_true (kv_secondary_tier_submit_load (tier, job, NULL));
        }
      while (n_done < n_jobs)
        {
          g_autofree KvJobResult **results = kv_secondary_tier_get_finished_jobs (tier);

          for (guint r = 0; results != NULL && results[r] != NULL; r++)
            {
              if (!kv_job_result_get_success (results[r]))
                g_error ("a fetch failed");
              if (round > 0)
                bytes += kv_job_result_get_transfer_bytes (results[r]);
              kv_job_result_unref (results[r]);
              n_done++;
            }
          if (n_done < n_jobs)
            g_usleep (200);
        }
      if (round > 0 && now_s () - start >= opt_seconds)
        break;
    }
  elapsed = now_s () - start;
  cpu_self = self_cpu_s () - cpu_self;
  cpu_server = process_cpu_s (g_subprocess_get_identifier (server)) - cpu_server;

  g_assert_true (kv_secondary_tier_shutdown (tier, NULL));
  g_subprocess_send_signal (server, SIGTERM);
  g_subprocess_wait (server, NULL, NULL);

  result.gb_per_s = bytes / elapsed / GB;
  result.cpu_s_per_gb = (cpu_self + cpu_server) / (bytes / GB);
  result.client_cpu_s_per_gb = cpu_self / (bytes / GB);
  result.server_cpu_s_per_gb = cpu_server / (bytes / GB);
  return result;
}

int
main (int   argc,
      char *argv[])
{
  g_autoptr(GOptionContext) context = g_option_context_new ("- peer tier fetch throughput vs loopback TCP");
  g_autoptr(GError) error = NULL;
  GOptionEntry entries[] = {
    { "seconds", 0, 0, G_OPTION_ARG_DOUBLE, &opt_seconds, "Seconds per measurement (default 2)", "S" },
    { "rounds", 0, 0, G_OPTION_ARG_INT, &opt_rounds, "Rounds per line, the median printed (default 3)", "R" },
    { "connections", 0, 0, G_OPTION_ARG_INT, &opt_connections,
      "Connections (the tier's connections-per-peer; default 4)", "N" },
    { NULL }
  };
  const gsize sizes[] = { 256 << 10, 2 << 20 };

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  if (opt_rounds < 1 || opt_connections < 1 || !(opt_seconds > 0))
    {
      g_printerr ("--rounds, --connections and --seconds must be positive\n");
      return 2;
    }
  if (g_getenv ("KVTIER_PLUGIN_PATH") == NULL)
    g_setenv ("KVTIER_PLUGIN_PATH", PEER_PLUGIN_DIR, TRUE);
  dir = g_dir_make_tmp ("kvtier-peer-bench-XXXXXX", &error);
  g_assert_no_error (error);
  make_certificates ();

  printf ("peer-throughput: %.1f s per run, %d connections, %u CPUs\n",
          opt_seconds, opt_connections, g_get_num_processors ());
  /* Each peer run is paired with a ceiling run right before it (the
   * machine's load drifts); the line is the median round. */
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
    for (int tls = 0; tls <= 1; tls++)
      {
        gsize chunk = sizes[s];
        gsize message = 20 + 4096 + chunk;
        const char *name = chunk == (2 << 20) ? "2MiB" : "256KiB";
        g_autofree gdouble *ratios = g_new (gdouble, opt_rounds);
        g_autofree gdouble *peer_rates = g_new (gdouble, opt_rounds);
        g_autofree gdouble *ceilings = g_new (gdouble, opt_rounds);
        g_autofree gdouble *cpus = g_new (gdouble, opt_rounds);
        g_autofree guint *order = g_new (guint, opt_rounds);
        guint median;

        for (gint r = 0; r < opt_rounds; r++)
          {
            gdouble cpu_one, cpu_many, cpu_slots;
            gdouble one = tcp_ceiling (message, 1, 0, &cpu_one);
            gdouble many = tcp_ceiling (message, opt_connections, 0, &cpu_many);
            gdouble into_slots = tcp_ceiling (message, opt_connections, peer_slots_bytes (chunk), &cpu_slots);
            PeerResult result = peer_fetch (chunk, tls);

            ceilings[r] = MAX (one, many);
            peer_rates[r] = result.gb_per_s;
            cpus[r] = result.cpu_s_per_gb;
            ratios[r] = peer_rates[r] / ceilings[r];
            order[r] = r;
            printf ("# round %d: tcp %.2f GB/s (cpu %.2f s/GB) over 1, %.2f GB/s (cpu %.2f s/GB) over %d,"
                    " %.2f GB/s (cpu %.2f s/GB) into slots; peer%s %.2f GB/s, cpu %.2f s/GB"
                    " (client %.2f, server %.2f)\n", r + 1, one, cpu_one, many, cpu_many, opt_connections,
                    into_slots, cpu_slots, tls ? " tls" : "", peer_rates[r], cpus[r],
                    result.client_cpu_s_per_gb, result.server_cpu_s_per_gb);
            fflush (stdout);
          }
        for (gint i = 1; i < opt_rounds; i++)
          for (gint j = i; j > 0 && ratios[order[j]] < ratios[order[j - 1]]; j--)
            {
              guint t = order[j];

              order[j] = order[j - 1];
              order[j - 1] = t;
            }
        median = order[opt_rounds / 2];
        printf ("fetch %s peer%s: %.2f GB/s = %.0f%% of ceiling %.2f GB/s, cpu %.2f s/GB\n",
                name, tls ? " tls" : "", peer_rates[median], 100 * ratios[median], ceilings[median],
                cpus[median]);
        fflush (stdout);
      }

  {
    g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
    const char *name;

    while ((name = g_dir_read_name (d)) != NULL)
      {
        g_autofree char *path = g_build_filename (dir, name, NULL);

        g_remove (path);
      }
    g_rmdir (dir);
  }
  return 0;
}
