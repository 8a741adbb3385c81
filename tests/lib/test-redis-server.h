/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Real redis-server processes for tests: on 127.0.0.1, on free ports, in a
 * directory of the test's, stopped by the PIDs this process spawned (also
 * when a test fails: atexit, and the kernel when the test process dies).
 * A test program without redis-server or redis-cli skips. */

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct
{
  GPid   pid;
  guint  port;
  char  *dir;
  char  *password;   /* for redis-cli */
  char **tls_args;   /* for redis-cli, or NULL */
} RedisServer;

gboolean  redis_test_init       (void);
guint     redis_test_free_port  (void);

char     *redis_cli_argv        (const RedisServer  *server,
                                 const char * const *args);
char     *redis_cli             (const RedisServer  *server,
                                 ...) G_GNUC_NULL_TERMINATED;
gboolean  redis_server_is_up    (const RedisServer  *server);
void      redis_server_start_on (RedisServer        *server,
                                 const char         *dir,
                                 guint               port,
                                 const char * const *extra);
void      redis_server_start    (RedisServer        *server,
                                 const char         *dir,
                                 const char * const *extra);
void      redis_server_stop     (RedisServer        *server,
                                 gboolean            kill_it);
void      redis_server_clear    (RedisServer        *server);
char     *redis_server_address  (const RedisServer  *server);

char     *redis_cluster_start   (RedisServer        *nodes,
                                 guint               n_nodes,
                                 guint               n_replicas,
                                 const char         *dir);
gboolean  redis_cluster_is_ok   (const RedisServer  *nodes,
                                 guint               n_nodes);
gboolean  redis_cluster_agrees  (const RedisServer  *nodes,
                                 guint               n_nodes);
void      redis_cluster_dump    (const RedisServer  *nodes,
                                 guint               n_nodes);
void      redis_cluster_wait_ok (const RedisServer  *nodes,
                                 guint               n_nodes,
                                 guint               seconds);

G_END_DECLS
