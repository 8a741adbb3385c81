/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A real S3 server for the s3 tier's tests and benchmark: Debian 12's Ceph
 * RADOS Gateway on a one-node RADOS cluster (one ceph-mon, one ceph-osd on
 * memstore), every file in a temporary directory, every port a free
 * loopback port, every daemon started by this process with its own stdio
 * and stopped by its PID. */

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct
{
  char  *dir;           /* the temporary directory: conf, data, logs */
  char  *conf;          /* ceph.conf */
  guint  mon_port;
  guint  rgw_port;
  GPid   mon_pid;
  GPid   osd_pid;
  GPid   rgw_pid;
  guint  rgw_tls_port;  /* 0 without openssl */
  char  *endpoint;      /* http://127.0.0.1:<rgw port> */
  char  *tls_endpoint;  /* https://127.0.0.1:<rgw tls port>, or NULL */
  char  *ca_file;       /* the CA that signed the gateway's certificate */
  char  *other_ca_file; /* a CA that did not */
  char  *access_key;    /* of the user the gateway was given */
  char  *secret_key;
  double start_seconds; /* how long s3_gateway_start() took */
} S3Gateway;

/* NULL when every program the gateway needs is installed, else a sentence
 * naming what is missing (for a test's skip message); free it. */
char      *s3_gateway_missing      (void);

/* Starts the cluster and the gateway and makes one user; NULL with @error
 * set when a step fails (its log named). Also stops everything at exit. */
S3Gateway *s3_gateway_start        (GError   **error);

/* Kills the gateway process (SIGKILL, by PID) and waits for it. */
void       s3_gateway_kill_rgw     (S3Gateway *gateway);

/* Starts the gateway again on its port; waits until it answers. */
gboolean   s3_gateway_restart_rgw  (S3Gateway *gateway,
                                    GError   **error);

/* Stops every daemon (by PID) and removes the directory. */
void       s3_gateway_free         (S3Gateway *gateway);

/* A port nothing listens on now on 127.0.0.1. */
guint      s3_gateway_free_port    (void);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (S3Gateway, s3_gateway_free)

G_END_DECLS
