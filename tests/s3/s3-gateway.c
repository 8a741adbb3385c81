/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "s3-gateway.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

/* What a step may take before the harness gives up on it. The cluster
 * normally starts in about 8 s here (2 cores shared with other builds). */
#define TOOL_TIMEOUT_S      60
#define OSD_UP_TIMEOUT_S    60
#define RGW_UP_TIMEOUT_S    60

static const char *const programs[] = {
  "monmaptool", "ceph-mon", "ceph-osd", "ceph", "radosgw", "radosgw-admin", "timeout",
};

static GMutex pids_lock;
static GArray *live_pids;   /* GPid: daemons this process started and has not reaped */

static void
kill_all_at_exit (void)
{
  g_mutex_lock (&pids_lock);
  for (guint i = 0; live_pids != NULL && i < live_pids->len; i++)
    {
      GPid pid = g_array_index (live_pids, GPid, i);

      kill (pid, SIGKILL);
      waitpid (pid, NULL, 0);
    }
  g_clear_pointer (&live_pids, g_array_unref);
  g_mutex_unlock (&pids_lock);
}

static void
track_pid (GPid pid)
{
  g_mutex_lock (&pids_lock);
  if (live_pids == NULL)
    {
      live_pids = g_array_new (FALSE, FALSE, sizeof (GPid));
      atexit (kill_all_at_exit);
    }
  g_array_append_val (live_pids, pid);
  g_mutex_unlock (&pids_lock);
}

/* Kills @pid (by the PID this process started), reaps it, forgets it. */
static void
stop_pid (GPid *pid)
{
  if (*pid <= 0)
    return;
  kill (*pid, SIGKILL);
  waitpid (*pid, NULL, 0);
  g_mutex_lock (&pids_lock);
  for (guint i = 0; live_pids != NULL && i < live_pids->len; i++)
    if (g_array_index (live_pids, GPid, i) == *pid)
      {
        g_array_remove_index_fast (live_pids, i);
        break;
      }
  g_mutex_unlock (&pids_lock);
  g_spawn_close_pid (*pid);
  *pid = 0;
}

char *
s3_gateway_missing (void)
{
  g_autoptr(GString) missing = g_string_new (NULL);

  for (guint i = 0; i < G_N_ELEMENTS (programs); i++)
    {
      g_autofree char *path = g_find_program_in_path (programs[i]);

      if (path == NULL)
        g_string_append_printf (missing, "%s%s", missing->len > 0 ? ", " : "", programs[i]);
    }
  if (missing->len == 0)
    return NULL;
  return g_strdup_printf ("%s not installed (Debian: apt-get install --no-install-recommends "
                          "radosgw ceph-mon ceph-osd)", missing->str);
}

guint
s3_gateway_free_port (void)
{
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
  g_autoptr(GSocketAddress) bound = NULL;
  guint port;

  g_assert (socket != NULL);
  if (!g_socket_bind (socket, any, FALSE, NULL))
    g_error ("cannot bind a loopback socket");
  bound = g_socket_get_local_address (socket, NULL);
  port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  g_socket_close (socket, NULL);
  /* ceph-osd takes its own ports from 6800-7300: stay out of them */
  if (port >= 6800 && port <= 7300)
    return s3_gateway_free_port ();
  return port;
}

/* The last lines of a log file, for an error message. */
static char *
log_tail (const char *path)
{
  g_autofree char *contents = NULL;
  gsize len = 0;

  if (!g_file_get_contents (path, &contents, &len, NULL))
    return g_strdup_printf ("(no log at %s)", path);
  if (len > 1500)
    return g_strdup_printf ("%s: …%s", path, contents + len - 1500);
  return g_strdup_printf ("%s: %s", path, contents);
}

/* Runs a ceph tool under `timeout`: no step of the harness can hang. */
static gboolean
run_tool (S3Gateway          *gateway,
          const char * const *args,
          char              **out_stdout,
          GError            **error)
{
  g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  int status = 0;

  g_ptr_array_add (argv, g_strdup ("timeout"));
  g_ptr_array_add (argv, g_strdup ("-k"));
  g_ptr_array_add (argv, g_strdup ("5"));
  g_ptr_array_add (argv, g_strdup_printf ("%u", TOOL_TIMEOUT_S));
  for (guint i = 0; args[i] != NULL; i++)
    g_ptr_array_add (argv, g_strdup (args[i]));
  g_ptr_array_add (argv, NULL);
  if (!g_spawn_sync (gateway->dir, (char **) argv->pdata, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL,
                     &out, &err, &status, error))
    return FALSE;
  if (!g_spawn_check_wait_status (status, NULL))
    {
      g_autofree char *cmd = g_strjoinv (" ", (char **) args);

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "`%s` failed (%s): %s%s", cmd,
                   WIFEXITED (status) && WEXITSTATUS (status) == 124 ? "timed out" : "exit status",
                   err != NULL ? err : "", out != NULL ? out : "");
      return FALSE;
    }
  if (out_stdout != NULL)
    *out_stdout = g_steal_pointer (&out);
  return TRUE;
}

/* A daemon dies with the process that started it, even one killed by a
 * test timeout. */
static void
child_setup (gpointer data)
{
  prctl (PR_SET_PDEATHSIG, SIGKILL);
}

/* Starts a daemon in the foreground, stdin, stdout and stderr on
 * /dev/null: a daemon must not hold the test's pipes. */
static gboolean
spawn_daemon (S3Gateway          *gateway,
              const char * const *argv,
              GPid               *pid,
              GError            **error)
{
  if (!g_spawn_async (gateway->dir, (char **) argv, NULL,
                      G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                      G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                      child_setup, NULL, pid, error))
    return FALSE;
  track_pid (*pid);
  return TRUE;
}

static gboolean
daemon_died (GPid pid)
{
  int status;

  return waitpid (pid, &status, WNOHANG) == pid;
}

static char *
random_token (guint len, const char *alphabet)
{
  GString *s = g_string_sized_new (len);
  guint n = strlen (alphabet);

  for (guint i = 0; i < len; i++)
    g_string_append_c (s, alphabet[g_random_int_range (0, n)]);
  return g_string_free (s, FALSE);
}

static gboolean
write_conf (S3Gateway  *gateway,
            const char *fsid,
            GError    **error)
{
  const char *d = gateway->dir;
  g_autofree char *tls = gateway->rgw_tls_port == 0 ? g_strdup ("") :
    g_strdup_printf (" ssl_endpoint=127.0.0.1:%u ssl_certificate=%s/tls/server.pem "
                     "ssl_private_key=%s/tls/server.key", gateway->rgw_tls_port, d, d);
  g_autofree char *conf = g_strdup_printf (
    "[global]\n"
    "fsid = %s\n"
    "mon_host = v2:127.0.0.1:%u\n"
    "auth_cluster_required = none\n"
    "auth_service_required = none\n"
    "auth_client_required = none\n"
    /* with auth none, radosgw's monitor session finds no connection mode
     * unless crc is named (get_initial_auth_request returned -13) */
    "ms_mon_client_mode = crc\n"
    "ms_client_mode = crc\n"
    "ms_bind_msgr1 = false\n"
    "ms_bind_ipv6 = false\n"
    "public_addr = 127.0.0.1\n"
    "cluster_addr = 127.0.0.1\n"
    "osd_pool_default_size = 1\n"
    "osd_pool_default_min_size = 1\n"
    "osd_pool_default_pg_num = 8\n"
    "osd_pool_default_pgp_num = 8\n"
    "osd_pool_default_pg_autoscale_mode = off\n"
    "mon_allow_pool_size_one = true\n"
    "osd_crush_chooseleaf_type = 0\n"
    /* pools are made one after another at the gateway's first start: a
     * monitor that commits every 50 ms rather than every second makes
     * them in 2 s rather than 11 */
    "paxos_propose_interval = 0.05\n"
    "paxos_min_wait = 0.01\n"
    /* a killed gateway leaves watches on its control objects: until they
     * time out, bucket and user changes wait on them (30 s by default) */
    "osd_client_watch_timeout = 10\n"
    "run_dir = %s/run\n"
    "admin_socket = %s/run/$name.asok\n"
    "pid_file = %s/run/$name.pid\n"
    "log_file = %s/log/$name.log\n"
    "mon_data = %s/mon/$name\n"
    "osd_data = %s/osd/$name\n"
    "keyring = %s/keyring\n"
    "osd_objectstore = memstore\n"
    /* the capacity memstore reports (it holds only what is written): far
     * from the full ratios for any test or benchmark run */
    "memstore_device_bytes = 17179869184\n"
    "[client.rgw]\n"
    "rgw_frontends = beast endpoint=127.0.0.1:%u%s\n"
    "rgw_data = %s/rgw\n"
    /* virtual-hosted requests: <bucket>.localhost (curl resolves
     * *.localhost to loopback itself) */
    "rgw_dns_name = localhost\n"
    "rgw_thread_pool_size = 64\n"
    "rgw_enable_gc_threads = false\n"
    "rgw_enable_lc_threads = false\n",
    fsid, gateway->mon_port, d, d, d, d, d, d, d, gateway->rgw_port, tls, d);

  gateway->conf = g_build_filename (d, "ceph.conf", NULL);
  return g_file_set_contents (gateway->conf, conf, -1, error);
}

/* Whether the gateway answers an anonymous `GET /` (200, the empty
 * bucket list of the anonymous user). */
static gboolean
rgw_answers (guint port)
{
  g_autoptr(GSocketClient) client = g_socket_client_new ();
  g_autoptr(GSocketConnection) connection = NULL;
  g_autofree char *request = g_strdup_printf ("GET / HTTP/1.0\r\nHost: 127.0.0.1:%u\r\n\r\n", port);
  char reply[32] = { 0 };
  gsize n = 0;

  g_socket_client_set_timeout (client, 2);
  g_socket_client_set_enable_proxy (client, FALSE);
  connection = g_socket_client_connect_to_host (client, "127.0.0.1", port, NULL, NULL);
  if (connection == NULL)
    return FALSE;
  if (!g_output_stream_write_all (g_io_stream_get_output_stream (G_IO_STREAM (connection)),
                                  request, strlen (request), NULL, NULL, NULL))
    return FALSE;
  if (!g_input_stream_read_all (g_io_stream_get_input_stream (G_IO_STREAM (connection)),
                                reply, sizeof reply - 1, &n, NULL, NULL))
    return FALSE;
  return g_str_has_prefix (reply, "HTTP/1.1 200");
}

static gboolean
start_rgw (S3Gateway  *gateway,
           GError    **error)
{
  const char *argv[] = { "radosgw", "-c", gateway->conf, "-n", "client.rgw", "-f", NULL };
  gint64 end = g_get_monotonic_time () + RGW_UP_TIMEOUT_S * G_USEC_PER_SEC;

  if (!spawn_daemon (gateway, argv, &gateway->rgw_pid, error))
    return FALSE;
  while (!rgw_answers (gateway->rgw_port))
    {
      if (daemon_died (gateway->rgw_pid) || g_get_monotonic_time () > end)
        {
          g_autofree char *path = g_build_filename (gateway->dir, "log", "client.rgw.log", NULL);
          g_autofree char *tail = log_tail (path);

          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "radosgw on port %u did not answer within %d s: %s",
                       gateway->rgw_port, RGW_UP_TIMEOUT_S, tail);
          return FALSE;
        }
      g_usleep (50000);
    }
  return TRUE;
}

static gboolean
wait_osd_up (S3Gateway  *gateway,
             GError    **error)
{
  const char *args[] = { "ceph", "-c", gateway->conf, "--connect-timeout", "20",
                         "osd", "stat", "-f", "json", NULL };
  gint64 end = g_get_monotonic_time () + OSD_UP_TIMEOUT_S * G_USEC_PER_SEC;

  for (;;)
    {
      g_autofree char *out = NULL;

      if (!run_tool (gateway, args, &out, error))
        return FALSE;
      if (strstr (out, "\"num_up_osds\":1") != NULL)
        return TRUE;
      if (daemon_died (gateway->osd_pid) || g_get_monotonic_time () > end)
        {
          g_autofree char *path = g_build_filename (gateway->dir, "log", "osd.0.log", NULL);
          g_autofree char *tail = log_tail (path);

          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "ceph-osd did not come up within %d s (%s): %s", OSD_UP_TIMEOUT_S,
                       g_strstrip (out), tail);
          return FALSE;
        }
      g_usleep (200000);
    }
}

/* A test CA and the gateway's certificate (127.0.0.1, localhost and
 * *.localhost), and a CA that did not sign it, when openssl is
 * installed. */
static gboolean
make_certificates (S3Gateway  *gateway,
                   GError    **error)
{
  g_autofree char *openssl = g_find_program_in_path ("openssl");
  g_autofree char *dir = g_build_filename (gateway->dir, "tls", NULL);
  const char *argv[] = { "/bin/sh", "-c",
    "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kvtier-s3-test-ca "
    "  -keyout ca.key -out ca.pem && "
    "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr && "
    "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:*.localhost\\n' > san.ext && "
    "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
    "  -extfile san.ext -out server.pem && "
    "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kvtier-s3-other-ca "
    "  -keyout other-ca.key -out other-ca.pem", NULL };
  g_autofree char *err = NULL;
  int status = 0;

  if (openssl == NULL)
    return TRUE;
  if (g_mkdir (dir, 0700) != 0)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno),
                   "Cannot make %s: %s", dir, g_strerror (errno));
      return FALSE;
    }
  if (!g_spawn_sync (dir, (char **) argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL,
                     NULL, &err, &status, error))
    return FALSE;
  if (!g_spawn_check_wait_status (status, NULL))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "openssl failed: %s", err);
      return FALSE;
    }
  gateway->ca_file = g_build_filename (dir, "ca.pem", NULL);
  gateway->other_ca_file = g_build_filename (dir, "other-ca.pem", NULL);
  do
    gateway->rgw_tls_port = s3_gateway_free_port ();
  while (gateway->rgw_tls_port == gateway->mon_port || gateway->rgw_tls_port == gateway->rgw_port);
  gateway->tls_endpoint = g_strdup_printf ("https://127.0.0.1:%u", gateway->rgw_tls_port);
  return TRUE;
}

static gboolean
start_cluster (S3Gateway  *gateway,
               GError    **error)
{
  g_autofree char *fsid = g_uuid_string_random ();
  g_autofree char *osd_uuid = g_uuid_string_random ();
  g_autofree char *mon_addr = NULL;
  g_autofree char *monmap = g_build_filename (gateway->dir, "monmap", NULL);
  const char *subdirs[] = { "run", "log", "mon/mon.a", "osd/osd.0", "rgw" };

  for (guint i = 0; i < G_N_ELEMENTS (subdirs); i++)
    {
      g_autofree char *path = g_build_filename (gateway->dir, subdirs[i], NULL);

      if (g_mkdir_with_parents (path, 0700) != 0)
        {
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno),
                       "Cannot make %s: %s", path, g_strerror (errno));
          return FALSE;
        }
    }
  gateway->mon_port = s3_gateway_free_port ();
  do
    gateway->rgw_port = s3_gateway_free_port ();
  while (gateway->rgw_port == gateway->mon_port);
  gateway->endpoint = g_strdup_printf ("http://127.0.0.1:%u", gateway->rgw_port);
  if (!make_certificates (gateway, error) ||
      !write_conf (gateway, fsid, error))
    return FALSE;

  mon_addr = g_strdup_printf ("[v2:127.0.0.1:%u]", gateway->mon_port);
  {
    const char *args[] = { "monmaptool", "--create", "--fsid", fsid, "--addv", "a", mon_addr,
                           monmap, NULL };

    if (!run_tool (gateway, args, NULL, error))
      return FALSE;
  }
  {
    const char *args[] = { "ceph-mon", "-c", gateway->conf, "--mkfs", "-i", "a", "--monmap",
                           monmap, NULL };

    if (!run_tool (gateway, args, NULL, error))
      return FALSE;
  }
  {
    const char *argv[] = { "ceph-mon", "-c", gateway->conf, "-i", "a", "-f", NULL };

    if (!spawn_daemon (gateway, argv, &gateway->mon_pid, error))
      return FALSE;
  }
  {
    /* waits for the monitor: the tool connects until --connect-timeout */
    const char *args[] = { "ceph", "-c", gateway->conf, "--connect-timeout", "30",
                           "osd", "new", osd_uuid, NULL };

    if (!run_tool (gateway, args, NULL, error))
      return FALSE;
  }
  {
    const char *args[] = { "ceph-osd", "-c", gateway->conf, "-i", "0", "--mkfs",
                           "--osd-uuid", osd_uuid, NULL };

    if (!run_tool (gateway, args, NULL, error))
      return FALSE;
  }
  {
    const char *argv[] = { "ceph-osd", "-c", gateway->conf, "-i", "0", "-f", NULL };

    if (!spawn_daemon (gateway, argv, &gateway->osd_pid, error))
      return FALSE;
  }
  /* the gateway makes its pools at its first start: no OSD, no pools */
  return wait_osd_up (gateway, error);
}

static gboolean
make_user (S3Gateway  *gateway,
           GError    **error)
{
  g_autofree char *access = g_strdup_printf ("--access-key=%s", gateway->access_key);
  g_autofree char *secret = g_strdup_printf ("--secret-key=%s", gateway->secret_key);
  const char *args[] = { "radosgw-admin", "-c", gateway->conf, "-n", "client.rgw",
                         "user", "create", "--uid=kvtier-test", "--display-name=kvtier test",
                         access, secret, NULL };

  return run_tool (gateway, args, NULL, error);
}

S3Gateway *
s3_gateway_start (GError **error)
{
  g_autoptr(S3Gateway) gateway = g_new0 (S3Gateway, 1);
  gint64 start = g_get_monotonic_time ();
  g_autofree char *missing = s3_gateway_missing ();

  if (missing != NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "%s", missing);
      return NULL;
    }
  gateway->dir = g_dir_make_tmp ("kvtier-s3-gateway-XXXXXX", error);
  if (gateway->dir == NULL)
    return NULL;
  gateway->access_key = random_token (20, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
  gateway->secret_key = random_token (40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
  if (!start_cluster (gateway, error) ||
      !make_user (gateway, error) ||
      !start_rgw (gateway, error))
    return NULL;
  gateway->start_seconds = (g_get_monotonic_time () - start) / 1e6;
  return g_steal_pointer (&gateway);
}

void
s3_gateway_kill_rgw (S3Gateway *gateway)
{
  stop_pid (&gateway->rgw_pid);
}

gboolean
s3_gateway_restart_rgw (S3Gateway  *gateway,
                        GError    **error)
{
  stop_pid (&gateway->rgw_pid);
  return start_rgw (gateway, error);
}

static void
rm_rf (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
        rm_rf (child);
      else
        g_unlink (child);
    }
  g_rmdir (path);
}

void
s3_gateway_free (S3Gateway *gateway)
{
  if (gateway == NULL)
    return;
  /* memstore: nothing to flush, so no orderly shutdown to wait for */
  stop_pid (&gateway->rgw_pid);
  stop_pid (&gateway->osd_pid);
  stop_pid (&gateway->mon_pid);
  if (gateway->dir != NULL && g_getenv ("KVTIER_S3_KEEP_GATEWAY_DIR") == NULL)
    rm_rf (gateway->dir);
  g_free (gateway->dir);
  g_free (gateway->conf);
  g_free (gateway->endpoint);
  g_free (gateway->tls_endpoint);
  g_free (gateway->ca_file);
  g_free (gateway->other_ca_file);
  g_free (gateway->access_key);
  g_free (gateway->secret_key);
  g_free (gateway);
}
