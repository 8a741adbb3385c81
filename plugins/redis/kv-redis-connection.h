/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>
#include <hiredis/hiredis.h>

#include "kv-chunk-format.h"

G_BEGIN_DECLS

typedef enum {
  KV_REDIS_OP_COMMAND,   /* any command; its whole reply in ->reply */
  KV_REDIS_OP_GET_INTO,  /* GET whose bulk value lands in dest_header + dest_payload */
  KV_REDIS_OP_SET,       /* command prefix, then header + payload + suffix, unformatted */
} KvRedisOpKind;

typedef enum {
  KV_REDIS_GET_NONE,
  KV_REDIS_GET_FOUND,        /* the value, header_len + payload_len bytes, landed */
  KV_REDIS_GET_NIL,          /* no such key */
  KV_REDIS_GET_WRONG_SIZE,   /* a value of another size (its bytes were dropped) */
} KvRedisGetStatus;

typedef struct _KvRedisOp KvRedisOp;

/* Called on the connection's main context, once per op. */
typedef void     (*KvRedisOpDone)    (KvRedisOp *op,
                                      gpointer   user_data);
/* Called just before the op's bytes are written; FALSE drops it unsent
 * (it completes with G_IO_ERROR_CANCELLED). */
typedef gboolean (*KvRedisOpPrepare) (KvRedisOp *op,
                                      gpointer   user_data);

/* One command on a connection. The caller owns it and its buffers until
 * done runs; the connection fills the outcome fields. */
struct _KvRedisOp
{
  KvRedisOpKind     kind;
  char             *command;       /* RESP bytes (SET: up to the value) */
  gsize             command_len;
  /* SET: the value's parts, written as they are */
  const guint8     *header;
  const guint8     *payload;
  const char       *suffix;        /* "\r\n" and the arguments after the value */
  gsize             suffix_len;
  /* GET_INTO */
  guint8           *dest_header;
  guint8           *dest_payload;
  /* GET_INTO, nullable: fed with each piece of dest_payload as it lands
   * (reset when a value of the expected length starts), so that the caller
   * checks the payload's checksum without a second pass over it; complete
   * when get_status says the value was found */
  KvChunkHasher    *payload_hasher;
  gsize             header_len;    /* SET and GET_INTO */
  gsize             payload_len;
  KvRedisOpPrepare  prepare;
  KvRedisOpDone     done;
  gpointer          user_data;

  /* outcome */
  redisReply       *reply;         /* COMMAND, SET, and a GET's error reply */
  KvRedisGetStatus  get_status;
  gsize             value_len;     /* GET: the length the server sent */
  GError           *error;         /* the connection failed (or the op was dropped) */

  /* the connection's */
  GList             link;
  guint             where;
  guint             state;
  gsize             body_pos;
  gsize             discard;
};

void     kv_redis_op_clear       (KvRedisOp *op);
gboolean kv_redis_op_is_error    (const KvRedisOp *op,
                                  const char      *prefix);

/* Bounds on what a server may send: every reply but a GET's value (which
 * goes to its slot) is buffered whole, so it is bounded. */
#define KV_REDIS_MAX_REPLY_BYTES   (8u << 20)
#define KV_REDIS_MAX_REPLY_ELEMENTS 65536
/* A GET value of another length than its destination's is read and
 * dropped, never buffered, up to this (Redis's own proto-max-bulk-len is
 * 512 MiB by default); a longer one closes the connection. */
#define KV_REDIS_MAX_DISCARD_BYTES (G_GUINT64_CONSTANT (1) << 30)

typedef struct
{
  const char *username;        /* nullable */
  const char *password;        /* nullable: no AUTH */
  guint       database;        /* SELECT unless 0 */
  gboolean    read_only;       /* READONLY: reads from a cluster replica */
  gboolean    tls;
  GTlsDatabase *tls_database;  /* nullable: the system's */
  guint       connect_timeout_ms;
  /* nullable: counts this connection's connects and closes still running
   * on the context, so its owner can let them finish (and release their
   * sockets) before it stops iterating the context */
  gint       *n_unfinished_io;
} KvRedisConnectionConfig;

typedef enum {
  KV_REDIS_CONNECTION_CONNECTING,
  KV_REDIS_CONNECTION_READY,
  KV_REDIS_CONNECTION_CLOSED,
} KvRedisConnectionState;

#define KV_TYPE_REDIS_CONNECTION (kv_redis_connection_get_type ())

G_DECLARE_FINAL_TYPE (KvRedisConnection, kv_redis_connection, KV, REDIS_CONNECTION, GObject)

KvRedisConnection     *kv_redis_connection_new          (const char                    *host,
                                                         guint16                        port,
                                                         const KvRedisConnectionConfig *config,
                                                         GMainContext                  *context);
KvRedisConnection     *kv_redis_connection_new_for_stream (GIOStream    *stream,
                                                           const char   *name,
                                                           GMainContext *context);
const char            *kv_redis_connection_get_address  (KvRedisConnection *self);
KvRedisConnectionState kv_redis_connection_get_state    (KvRedisConnection *self);
const GError          *kv_redis_connection_get_error    (KvRedisConnection *self);
void                   kv_redis_connection_send         (KvRedisConnection *self,
                                                         KvRedisOp         *op);
void                   kv_redis_connection_abort        (KvRedisConnection *self,
                                                         KvRedisOp         *op);
void                   kv_redis_connection_close        (KvRedisConnection *self,
                                                         const char        *why);
guint                  kv_redis_connection_get_n_ops    (KvRedisConnection *self);
gint64                 kv_redis_connection_get_reply_wait_us (KvRedisConnection *self,
                                                              gint64             now);

G_END_DECLS
