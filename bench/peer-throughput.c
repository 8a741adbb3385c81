/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

/*
 * bench/peer-throughput: chunks fetched through the peer tier between two
 * processes, against the ceiling of the same machine's loopback TCP.
 *
 *  1. the ceiling: raw loopback TCP, messages the size of one DATA frame
 *     (prefix, chunk header, payload), over 1 and over N connections, no
 *     kvtier (threads of this process, plain sockets); then the same from
 *     primary-sized memory into primary-sized memory, the least CPU a
 *     transfer between two nodes' slots takes; with TLS, that transfer
 *     through glib-networking's TLS, as the tier uses it;
 *  2. the peer tier: a `kvtier serve` node this program starts (synthetic
 *     chunks, carrying their checksum as a device leaves them) and a peer
 *     tier in this process loading them into its primary slots over N
 *     connections, 2N load jobs kept in flight as an engine submits them;
 *     without and with TLS.
 *
 * For each chunk size (256 KiB, 2 MiB) it prints
 *   fetch 2MiB peer: <x> GB/s = <y>% of ceiling <z> GB/s, cpu <c> s/GB = <r>x TCP's <t> s/GB
 * where the ceiling is the better of the two raw runs made right before
 * (each round pairs them; the line is the median round, every round is a
 * `#` line), cpu counts both processes (user + system) per GB fetched and
 * <t> is the slots-to-slots transfer's. Without TLS the line adds the
 * ratio to that slots-to-slots transfer: the raw runs send one buffer
 * that stays in the caches, while the tier (and that transfer) reads
 * and writes primary-sized memory. It also gives the ratio to the same
 * transfer with each received piece hashed (XXH3-64) as it lands, the
 * check the tier's client must make: the fastest a checked fetch can be
 * here. And the same checked transfer with the sender's slots in a memfd
 * sent by sendfile(), no copy into the socket: what a server sending from
 * a memfd primary could gain on this machine (on loopback the receiver
 * pays for the page references instead). With TLS the line adds the ratio
 * to the TLS transfer and compares the CPU with it.
 *
 * Usage: peer-throughput [--seconds S] [--rounds R] [--connections N]
 *                        [--chunk-sizes 256KiB,2MiB] [--tls no|yes|both]
 */

#include <kvtier.h>

#include "bench-util.h"
#include "kv-chunk-format.h"
#include "kv-secondary-tier-private.h"

#include <arpa/inet.h>
#include <glib/gstdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#define GB 1e9

static gdouble opt_seconds = 2.0;
static gint opt_connections = 4;
static gint opt_rounds = 3;
static char *opt_chunk_sizes = NULL;
static char *opt_tls = NULL;
static gint opt_chunks_per_job = 0;   /* 0: MIN (16, 8 MiB of chunks) */

/* ---- the ceilings: raw loopback TCP, and TLS over it ------------------------ */

/* How a slots-to-slots ceiling moves its messages. */
typedef enum
{
  MOVE_PLAIN,             /* send() from memory, recv() into memory */
  MOVE_CHECKED,           /* and the receiver hashes each piece as it lands */
  MOVE_SENDFILE_CHECKED,  /* sendfile() from a memfd instead of send() */
} Move;

typedef struct
{
  int        fd;
  GIOStream *tls;       /* TLS over @fd, or NULL for plain TCP */
  gsize      message;
  gdouble    until;
  guint64    bytes;
  guint8    *slots;     /* NULL: one reused buffer; else n_slots messages in turn */
  guint      n_slots;
  gboolean   check;     /* receiver: XXH3 of each piece right after it lands */
  int        memfd;     /* sender: >= 0 to sendfile() its slots from there */
  goffset    memfd_offset;
  guint64    digests;   /* receiver: the checks' results, kept */
} Flow;

/* Sends message @i of the flow's slots from its memfd. */
static gboolean
flow_sendfile (Flow  *flow,
               guint  i)
{
  off_t offset = flow->memfd_offset + (goffset) (i % flow->n_slots) * flow->message;

  for (gsize left = flow->message; left > 0; )
    {
      ssize_t n = sendfile (flow->fd, flow->memfd, &offset, left);

      if (n <= 0)
        return FALSE;
      left -= n;
    }
  return TRUE;
}

static gboolean
flow_send (Flow         *flow,
           const guint8 *buffer,
           gsize         len)
{
  if (flow->tls != NULL)
    return g_output_stream_write_all (g_io_stream_get_output_stream (flow->tls), buffer, len,
                                      NULL, NULL, NULL);
  for (gsize off = 0; off < len; )
    {
      ssize_t n = send (flow->fd, buffer + off, len - off, MSG_NOSIGNAL);

      if (n <= 0)
        return FALSE;
      off += n;
    }
  return TRUE;
}

/* Receives a message into @buffer as the peer tier's client does: each
 * piece hashed as it lands, while it is in the cache. */
static gssize
flow_receive_checked (Flow          *flow,
                      KvChunkHasher *hasher,
                      guint8        *buffer,
                      gsize          len)
{
  gsize done = 0;

  kv_chunk_hasher_reset (hasher);
  while (done < len)
    {
      ssize_t n = recv (flow->fd, buffer + done, len - done, 0);

      if (n <= 0)
        return done > 0 ? (gssize) done : n;
      kv_chunk_hasher_update (hasher, buffer + done, n);
      done += n;
    }
  flow->digests ^= kv_chunk_hasher_digest (hasher);
  return done;
}

static gssize
flow_receive (Flow   *flow,
              guint8 *buffer,
              gsize   len)
{
  gsize n = 0;

  if (flow->tls == NULL)
    return recv (flow->fd, buffer, len, MSG_WAITALL);
  if (!g_input_stream_read_all (g_io_stream_get_input_stream (flow->tls), buffer, len, &n, NULL, NULL))
    return -1;
  return n;
}

static gpointer
send_main (gpointer data)
{
  Flow *flow = data;
  g_autofree guint8 *buffer = g_malloc0 (flow->message);

  for (guint i = 0; bench_now_s () < flow->until; i++)
    {
      const guint8 *source = flow->slots != NULL ? flow->slots + (gsize) (i % flow->n_slots) * flow->message
                                                 : buffer;

      if (!(flow->memfd >= 0 ? flow_sendfile (flow, i) : flow_send (flow, source, flow->message)))
        return NULL;
    }
  if (flow->tls != NULL)
    g_io_stream_close (flow->tls, NULL, NULL);
  shutdown (flow->fd, SHUT_WR);
  return NULL;
}

static gpointer
receive_main (gpointer data)
{
  Flow *flow = data;
  g_autofree guint8 *buffer = g_malloc (flow->message);
  KvChunkHasher *hasher = flow->check ? kv_chunk_hasher_new () : NULL;

  for (guint i = 0; ; i++)
    {
      guint8 *target = flow->slots != NULL ? flow->slots + (gsize) (i % flow->n_slots) * flow->message
                                           : buffer;
      gssize n = hasher != NULL ? flow_receive_checked (flow, hasher, target, flow->message)
                                : flow_receive (flow, target, flow->message);

      if (n <= 0)
        break;
      flow->bytes += n;
    }
  g_clear_pointer (&hasher, kv_chunk_hasher_free);
  return NULL;
}

static char *dir;
static GTlsCertificate *server_certificate;
static GTlsDatabase *ca_database;

static GIOStream *
socket_stream (int fd)
{
  g_autoptr(GSocket) socket = g_socket_new_from_fd (dup (fd), NULL);

  g_assert_nonnull (socket);
  return G_IO_STREAM (g_socket_connection_factory_create_connection (socket));
}

static gpointer
server_handshake (gpointer data)
{
  GIOStream *tls = data;
  g_autoptr(GError) error = NULL;

  if (!g_tls_connection_handshake (G_TLS_CONNECTION (tls), NULL, &error))
    g_error ("TLS ceiling: server handshake: %s", error->message);
  return NULL;
}

/* Wraps the two ends of each connection in TLS (glib-networking, as the peer
 * tier and `kvtier serve` use it: the same certificates, the same defaults)
 * and completes the handshakes before anything is timed. */
static void
start_tls (Flow  *senders,
           Flow  *receivers,
           guint  n_conns)
{
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < n_conns; i++)
    {
      g_autoptr(GIOStream) server_base = socket_stream (senders[i].fd);
      g_autoptr(GIOStream) client_base = socket_stream (receivers[i].fd);
      g_autoptr(GSocketConnectable) identity = g_network_address_new ("127.0.0.1", 0);
      GThread *thread;

      senders[i].tls = g_tls_server_connection_new (server_base, server_certificate, &error);
      g_assert_no_error (error);
      receivers[i].tls = g_tls_client_connection_new (client_base, identity, &error);
      g_assert_no_error (error);
      g_tls_connection_set_database (G_TLS_CONNECTION (receivers[i].tls), ca_database);
      thread = g_thread_new ("tls-handshake", server_handshake, senders[i].tls);
      if (!g_tls_connection_handshake (G_TLS_CONNECTION (receivers[i].tls), NULL, &error))
        g_error ("TLS ceiling: client handshake: %s", error->message);
      g_thread_join (thread);
    }
}

/* GB/s of @n_conns loopback connections each sending @message-sized
 * messages for opt_seconds (with @tls, through TLS); the CPU both ends took
 * per GB in @cpu_s_per_gb. With @slots_bytes, the senders read in turn from
 * that much memory and the receivers write in turn over as much again (as
 * a serving node sends from its primary slots and the peer tier fills its
 * own) instead of buffers that stay in the CPU's caches: the least CPU a
 * transfer between two primaries takes. The server end sends, as a serving
 * node does. */
static gdouble
tcp_ceiling (gsize     message,
             guint     n_conns,
             gsize     slots_bytes,
             gboolean  tls,
             Move      move,
             gdouble  *cpu_s_per_gb)
{
  g_autofree guint8 *slots = slots_bytes > 0 ? g_malloc (2 * slots_bytes) : NULL;
  int memfd = -1;
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
      receivers[i].fd = socket (AF_INET, SOCK_STREAM, 0);
      g_assert_cmpint (connect (receivers[i].fd, (struct sockaddr *) &addr, sizeof addr), ==, 0);
      senders[i].fd = accept (listener, NULL, NULL);
      g_assert_cmpint (senders[i].fd, >=, 0);
      setsockopt (senders[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  if (tls)
    start_tls (senders, receivers, n_conns);
  if (slots != NULL)
    memset (slots, 0, 2 * slots_bytes);   /* faulted in, as warm primary slots are */
  if (move == MOVE_SENDFILE_CHECKED)
    {
      /* the senders' slots in a memfd, as a primary tier shared with an
       * engine is, written before anything is timed (shmem sends pages
       * never written as its zero page, which stays in the caches) */
      void *map;

      memfd = memfd_create ("peer-throughput-slots", MFD_CLOEXEC);
      g_assert_cmpint (memfd, >=, 0);
      g_assert_cmpint (ftruncate (memfd, slots_bytes), ==, 0);
      map = mmap (NULL, slots_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
      g_assert_true (map != MAP_FAILED);
      memset (map, 0x5a, slots_bytes);
      munmap (map, slots_bytes);
    }
  start = bench_now_s ();
  cpu = bench_self_cpu_s ();
  for (guint i = 0; i < n_conns; i++)
    {
      senders[i].message = receivers[i].message = message;
      if (slots != NULL)
        {
          receivers[i].n_slots = senders[i].n_slots = MAX (1, slots_bytes / n_conns / message);
          receivers[i].slots = slots + (gsize) i * receivers[i].n_slots * message;
          senders[i].slots = receivers[i].slots + slots_bytes;
          senders[i].memfd_offset = (goffset) i * senders[i].n_slots * message;
        }
      senders[i].memfd = memfd;
      receivers[i].memfd = -1;
      receivers[i].check = move != MOVE_PLAIN;
      senders[i].until = start + opt_seconds;
      threads[2 * i] = g_thread_new (tls ? "tls-send" : "tcp-send", send_main, &senders[i]);
      threads[2 * i + 1] = g_thread_new (tls ? "tls-recv" : "tcp-recv", receive_main, &receivers[i]);
    }
  for (guint i = 0; i < 2 * n_conns; i++)
    g_thread_join (threads[i]);
  elapsed = bench_now_s () - start;
  cpu = bench_self_cpu_s () - cpu;
  for (guint i = 0; i < n_conns; i++)
    {
      total += receivers[i].bytes;
      g_clear_object (&senders[i].tls);
      g_clear_object (&receivers[i].tls);
      close (senders[i].fd);
      close (receivers[i].fd);
    }
  close (listener);
  if (memfd >= 0)
    close (memfd);
  *cpu_s_per_gb = cpu / (total / GB);
  return total / elapsed / GB;
}

/* ---- the peer tier between two processes -------------------------------------- */

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
peer_per_job (gsize chunk)
{
  if (opt_chunks_per_job > 0)
    return (guint) opt_chunks_per_job;
  return (guint) MAX (1, MIN (16, (8u << 20) / chunk));
}

/* Enough chunks for four jobs per connection: the window is 2N jobs. */
static guint
peer_n_chunks (gsize chunk)
{
  return MAX ((guint) MIN (256, (256u << 20) / chunk), 4 * (guint) opt_connections * peer_per_job (chunk));
}

static gsize
peer_slots_bytes (gsize chunk)
{
  return peer_n_chunks (chunk) * (20 + 4096 + chunk);
}

typedef struct
{
  GMutex   lock;
  GCond    cond;
  gboolean queued;
} Wake;

static void
results_queued (gpointer data)
{
  Wake *wake = data;

  g_mutex_lock (&wake->lock);
  wake->queued = TRUE;
  g_cond_signal (&wake->cond);
  g_mutex_unlock (&wake->lock);
}

static PeerResult
peer_fetch (gsize    chunk,
            gboolean tls)
{
  guint n_chunks = peer_n_chunks (chunk);
  guint per_job = peer_per_job (chunk);
  g_autofree char *secret = write_file ("secret", "bench-secret-0123456789abcdef");
  g_autofree char *tls_conf = tls ? g_strdup_printf ("tls = true\ntls-cert-file = %s/server.pem\n"
                                                     "tls-key-file = %s/server-key.pem\n", dir, dir)
                                  : g_strdup ("");
  g_autofree char *conf_text = g_strdup_printf ("[primary]\nsize = %" G_GSIZE_FORMAT "\nslot-size = %" G_GSIZE_FORMAT
                                                "\n\n[tier peer]\ntype = peer\nlisten = 127.0.0.1:0\n"
                                                "secret-file = %s\nnamespace = bench\n"
                                                /* generous, as the client's io-timeout-ms below */
                                                "handshake-timeout-ms = 30000\n%s",
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
  GPid server_pid;
  guint64 job_id = 0, bytes = 0;
  Wake wake = { 0 };
  gdouble start = 0, elapsed, cpu_self = 0, cpu_server = 0;
  PeerResult result;

  g_subprocess_launcher_set_child_setup (launcher, child_setup, NULL, NULL);
  server = g_subprocess_launcher_spawn (launcher, &error, exe, "serve", "--config", conf, "--http", "",
                                        "--synthetic-chunks", count, NULL);
  g_assert_no_error (error);
  server_pid = (GPid) g_ascii_strtoll (g_subprocess_get_identifier (server), NULL, 10);
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
  /* a bench measures throughput, not timeouts: a loaded or sanitized CI
   * machine may take longer than the defaults to connect and handshake */
  g_variant_builder_add (&props, "{sv}", "io-timeout-ms", g_variant_new_uint32 (30000));
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

  /* Load jobs are kept in flight as an engine submits them, step after
   * step: a window of jobs, each refilled as soon as its result came in
   * (the tier's completion wakes this thread; it never polls). A job takes
   * the slots of the job n_jobs before it, long finished. One warm-up pass
   * over every chunk opens the connections and touches the slots. */
  {
    guint n_jobs = n_chunks / per_job;
    guint window = MIN (n_jobs, 2 * (guint) opt_connections);
    guint in_flight = 0, next = 0;
    guint64 warm_jobs = n_jobs, done = 0;
    gboolean timing = FALSE;
    gdouble until = 0;

    _kv_secondary_tier_set_queued_func (tier, results_queued, &wake);
    for (;;)
      {
        g_autofree KvJobResult **results = NULL;

        while (in_flight < window && (!timing || bench_now_s () < until))
          {
            guint j = next++ % n_jobs;
            g_autofree guint32 *ids = g_new (guint32, per_job);
            g_autoptr(KvTransferJob) job = NULL;

            for (guint k = 0; k < per_job; k++)
              ids[k] = j * per_job + k;
            job = kv_transfer_job_new (++job_id, (KvKey * const *) keys->pdata + j * per_job, ids,
                                       per_job, TRUE, request);
            g_assert_true (kv_secondary_tier_submit_load (tier, job, NULL));
            in_flight++;
          }
        if (in_flight == 0)
          break;
        g_mutex_lock (&wake.lock);
        while (!wake.queued)
          g_cond_wait (&wake.cond, &wake.lock);
        wake.queued = FALSE;
        g_mutex_unlock (&wake.lock);
        results = kv_secondary_tier_get_finished_jobs (tier);
        for (guint r = 0; results != NULL && results[r] != NULL; r++)
          {
            if (!kv_job_result_get_success (results[r]))
              g_error ("a fetch failed (the peer tier's message above says why)");
            if (timing)
              bytes += kv_job_result_get_transfer_bytes (results[r]);
            kv_job_result_unref (results[r]);
            in_flight--;
            if (++done == warm_jobs && !timing)
              {
                /* the warm-up's last jobs still in flight count, a little
                 * early: they run while the clock does */
                timing = TRUE;
                start = bench_now_s ();
                until = start + opt_seconds;
                cpu_self = bench_self_cpu_s ();
                cpu_server = bench_process_cpu_s (server_pid);
              }
          }
      }
    _kv_secondary_tier_set_queued_func (tier, NULL, NULL);
  }
  elapsed = bench_now_s () - start;
  cpu_self = bench_self_cpu_s () - cpu_self;
  cpu_server = bench_process_cpu_s (server_pid) - cpu_server;

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
    { "chunk-sizes", 0, 0, G_OPTION_ARG_STRING, &opt_chunk_sizes,
      "Chunk sizes, comma-separated (default 256KiB,2MiB)", "LIST" },
    { "tls", 0, 0, G_OPTION_ARG_STRING, &opt_tls, "Runs without TLS, with it, or both (default both)",
      "no|yes|both" },
    { "chunks-per-job", 0, 0, G_OPTION_ARG_INT, &opt_chunks_per_job,
      "Chunks per load job (default: 16, or fewer so that a job is at most 8 MiB)", "N" },
    { NULL }
  };
  g_autoptr(GArray) sizes = g_array_new (FALSE, FALSE, sizeof (gsize));
  int tls_first = 0, tls_last = 1;

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
  if (opt_chunks_per_job < 0 || opt_chunks_per_job > 4096 || opt_connections > 64)
    {
      g_printerr ("--chunks-per-job is at most 4096 (the tier's max-keys-per-request), --connections at most 64\n");
      return 2;
    }
  {
    g_auto(GStrv) names = g_strsplit (opt_chunk_sizes != NULL ? opt_chunk_sizes : "256KiB,2MiB", ",", -1);

    for (guint i = 0; names[i] != NULL; i++)
      {
        guint64 size = 0;

        if (!bench_parse_size (g_strstrip (names[i]), &size) || size < 4096 || size > (64u << 20) ||
            size % 4096 != 0)
          {
            g_printerr ("--chunk-sizes: %s is not a size of 4 KiB to 64 MiB in whole 4 KiB pages\n", names[i]);
            return 2;
          }
        g_array_append_val (sizes, size);
        if ((guint64) peer_n_chunks (size) * (20 + 4096 + size) > (4ULL << 30))
          {
            g_printerr ("--chunks-per-job: %u chunks of %s per job need more than 4 GiB of slots\n",
                        peer_per_job (size), names[i]);
            return 2;
          }
      }
  }
  if (g_strcmp0 (opt_tls, "no") == 0)
    tls_last = 0;
  else if (g_strcmp0 (opt_tls, "yes") == 0)
    tls_first = 1;
  else if (opt_tls != NULL && g_strcmp0 (opt_tls, "both") != 0)
    {
      g_printerr ("--tls: %s is not no, yes or both\n", opt_tls);
      return 2;
    }
  if (g_getenv ("KVTIER_PLUGIN_PATH") == NULL)
    g_setenv ("KVTIER_PLUGIN_PATH", PEER_PLUGIN_DIR, TRUE);
  dir = g_dir_make_tmp ("kvtier-peer-bench-XXXXXX", &error);
  g_assert_no_error (error);
  make_certificates ();
  {
    g_autofree char *cert = g_build_filename (dir, "server.pem", NULL);
    g_autofree char *key = g_build_filename (dir, "server-key.pem", NULL);
    g_autofree char *ca = g_build_filename (dir, "ca.pem", NULL);

    server_certificate = g_tls_certificate_new_from_files (cert, key, &error);
    g_assert_no_error (error);
    ca_database = g_tls_file_database_new (ca, &error);
    g_assert_no_error (error);
  }

  printf ("peer-throughput: %.1f s per run, %d connections, %u CPUs\n",
          opt_seconds, opt_connections, g_get_num_processors ());
  /* Each peer run is paired with a ceiling run right before it (the
   * machine's load drifts); the line is the median round. */
  for (guint s = 0; s < sizes->len; s++)
    for (int tls = tls_first; tls <= tls_last; tls++)
      {
        gsize chunk = g_array_index (sizes, gsize, s);
        gsize message = 20 + 4096 + chunk;
        g_autofree char *name = bench_size_name (chunk);
        g_autofree gdouble *ratios = g_new (gdouble, opt_rounds);
        g_autofree gdouble *peer_rates = g_new (gdouble, opt_rounds);
        g_autofree gdouble *ceilings = g_new (gdouble, opt_rounds);
        g_autofree gdouble *ceiling_cpus = g_new (gdouble, opt_rounds);
        g_autofree gdouble *slot_ceilings = g_new (gdouble, opt_rounds);
        g_autofree gdouble *tls_ceilings = g_new (gdouble, opt_rounds);
        g_autofree gdouble *tls_cpus = g_new (gdouble, opt_rounds);
        g_autofree gdouble *checked_ceilings = g_new (gdouble, opt_rounds);
        g_autofree gdouble *checked_cpus = g_new (gdouble, opt_rounds);
        g_autofree gdouble *sendfile_ceilings = g_new (gdouble, opt_rounds);
        g_autofree gdouble *sendfile_cpus = g_new (gdouble, opt_rounds);
        g_autofree gdouble *cpus = g_new (gdouble, opt_rounds);
        guint m;

        if (tls == tls_first)
          printf ("# %s: %u chunks served, %u per load job, %u jobs in flight\n", name,
                  peer_n_chunks (chunk), peer_per_job (chunk),
                  MIN (peer_n_chunks (chunk) / peer_per_job (chunk), 2 * (guint) opt_connections));

        for (gint r = 0; r < opt_rounds; r++)
          {
            gdouble cpu_one, cpu_many, cpu_slots, cpu_tls = 0, cpu_checked = 0, cpu_sendfile = 0;
            gdouble one = tcp_ceiling (message, 1, 0, FALSE, MOVE_PLAIN, &cpu_one);
            gdouble many = tcp_ceiling (message, opt_connections, 0, FALSE, MOVE_PLAIN, &cpu_many);
            gdouble into_slots = tcp_ceiling (message, opt_connections, peer_slots_bytes (chunk), FALSE,
                                              MOVE_PLAIN, &cpu_slots);
            gdouble over_tls = tls ? tcp_ceiling (message, opt_connections, peer_slots_bytes (chunk), TRUE,
                                                  MOVE_PLAIN, &cpu_tls)
                                   : 0;
            /* what checking the payload as it lands costs the transfer,
             * and what sending from a memfd without a copy would save */
            gdouble checked = !tls ? tcp_ceiling (message, opt_connections, peer_slots_bytes (chunk), FALSE,
                                                  MOVE_CHECKED, &cpu_checked)
                                   : 0;
            gdouble by_sendfile = !tls ? tcp_ceiling (message, opt_connections, peer_slots_bytes (chunk),
                                                      FALSE, MOVE_SENDFILE_CHECKED, &cpu_sendfile)
                                       : 0;
            PeerResult result = peer_fetch (chunk, tls);

            ceilings[r] = MAX (one, many);
            /* the CPU a transfer into slot-sized memory takes without
             * kvtier: what the peer run must at least spend */
            ceiling_cpus[r] = cpu_slots;
            slot_ceilings[r] = into_slots;
            tls_ceilings[r] = over_tls;
            tls_cpus[r] = cpu_tls;
            checked_ceilings[r] = checked;
            checked_cpus[r] = cpu_checked;
            sendfile_ceilings[r] = by_sendfile;
            sendfile_cpus[r] = cpu_sendfile;
            peer_rates[r] = result.gb_per_s;
            cpus[r] = result.cpu_s_per_gb;
            ratios[r] = peer_rates[r] / ceilings[r];
            printf ("# round %d: tcp %.2f GB/s (cpu %.2f s/GB) over 1, %.2f GB/s (cpu %.2f s/GB) over %d,"
                    " %.2f GB/s (cpu %.2f s/GB) slots to slots", r + 1, one, cpu_one, many, cpu_many,
                    opt_connections, into_slots, cpu_slots);
            if (tls)
              printf (", tls %.2f GB/s (cpu %.2f s/GB) slots to slots", over_tls, cpu_tls);
            else
              printf (", checked %.2f GB/s (cpu %.2f s/GB), sendfile and checked %.2f GB/s (cpu %.2f s/GB)",
                      checked, cpu_checked, by_sendfile, cpu_sendfile);
            printf ("; peer%s %.2f GB/s, cpu %.2f s/GB (client %.2f, server %.2f)\n", tls ? " tls" : "",
                    peer_rates[r], cpus[r], result.client_cpu_s_per_gb, result.server_cpu_s_per_gb);
            fflush (stdout);
          }
        m = bench_median_index (ratios, opt_rounds);
        printf ("fetch %s peer%s: %.2f GB/s = %.0f%% of ceiling %.2f GB/s", name, tls ? " tls" : "",
                peer_rates[m], 100 * ratios[m], ceilings[m]);
        if (tls)
          printf (" (%.0f%% of TLS over it, %.2f GB/s)", 100 * peer_rates[m] / tls_ceilings[m], tls_ceilings[m]);
        else
          printf (" (%.0f%% of TCP slots to slots, %.2f GB/s; %.0f%% of it checked as it lands, %.2f GB/s,"
                  " cpu %.2f s/GB; sent from a memfd by sendfile and checked: %.2f GB/s, cpu %.2f s/GB)",
                  100 * peer_rates[m] / slot_ceilings[m], slot_ceilings[m],
                  100 * peer_rates[m] / checked_ceilings[m], checked_ceilings[m], checked_cpus[m],
                  sendfile_ceilings[m], sendfile_cpus[m]);
        printf (", cpu %.2f s/GB = %.2fx %s's %.2f s/GB\n", cpus[m],
                cpus[m] / (tls ? tls_cpus[m] : ceiling_cpus[m]), tls ? "TLS" : "TCP",
                tls ? tls_cpus[m] : ceiling_cpus[m]);
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
  g_clear_object (&server_certificate);
  g_clear_object (&ca_database);
  return 0;
}
