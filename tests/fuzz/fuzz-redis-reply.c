/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* The redis tier's reply parsing (plugins/redis/kv-redis-connection.c:
 * the GET value path and the bounded hiredis reader) and the CLUSTER SLOTS
 * parser (kv-redis-slot-map.c) on arbitrary bytes from a server.
 *
 * A connection over one end of a socket pair sends four commands: GET
 * (value read into an 8-byte header and a 16-byte payload buffer, exact
 * allocations so that ASan sees any overrun), EXISTS, GET again, CLUSTER
 * SLOTS. The input is what the server answers, then the server closes.
 * Every command must complete exactly once: with its reply, or with the
 * error that closed the connection; a found value has exactly the
 * destination's length; an array reply is given to the slot-map parser. */

#include "config.h"

#include "fuzz-common.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gio/gio.h>
#include <kvtier.h>

#include "kv-redis-connection.h"
#include "kv-redis-slot-map.h"

#define HEADER_LEN 8
#define PAYLOAD_LEN 16
#define N_OPS 4

typedef struct
{
  KvRedisOp op;
  guint     n_done;
} FuzzOp;

static void
op_done (KvRedisOp *op,
         gpointer   user_data)
{
  FuzzOp *f = user_data;

  f->n_done++;
  g_assert_cmpuint (f->n_done, ==, 1);
  if (op->error != NULL)
    return;
  if (op->kind == KV_REDIS_OP_GET_INTO)
    {
      g_assert_true (op->get_status != KV_REDIS_GET_NONE || op->reply != NULL);
      if (op->get_status == KV_REDIS_GET_FOUND)
        g_assert_cmpuint (op->value_len, ==, HEADER_LEN + PAYLOAD_LEN);
      if (op->get_status == KV_REDIS_GET_WRONG_SIZE)
        g_assert_cmpuint (op->value_len, !=, HEADER_LEN + PAYLOAD_LEN);
      if (op->reply != NULL)
        g_assert_cmpint (op->reply->type, ==, REDIS_REPLY_ERROR);
    }
  else
    {
      g_assert_nonnull (op->reply);
      if (op->reply->type == REDIS_REPLY_ARRAY)
        {
          g_autoptr(GError) error = NULL;
          KvRedisSlotMap *map = kv_redis_slot_map_parse (op->reply, "127.0.0.1", &error);

          g_assert_true ((map != NULL) != (error != NULL));
          if (map != NULL)
            {
              g_assert_cmpuint (map->addresses->len, <=, KV_REDIS_MAX_NODES);
              for (guint s = 0; s < KV_REDIS_N_SLOTS; s++)
                {
                  g_assert_cmpint (map->master[s], <, (gint) map->addresses->len);
                  g_assert_cmpint (map->replica[s], <, (gint) map->addresses->len);
                }
            }
          kv_redis_slot_map_free (map);
        }
    }
}

static void
format (FuzzOp      *f,
        int          argc,
        const char **argv)
{
  int len = redisFormatCommandArgv (&f->op.command, argc, argv, NULL);

  g_assert_cmpint (len, >, 0);
  f->op.command_len = len;
}

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(GSocket) ours = NULL;
  g_autoptr(GSocketConnection) stream = NULL;
  g_autoptr(KvRedisConnection) connection = NULL;
  const char *get[] = { "GET", "kvtier:k" };
  const char *exists[] = { "EXISTS", "kvtier:k" };
  const char *slots[] = { "CLUSTER", "SLOTS" };
  guint8 *headers[2], *payloads[2];
  FuzzOp ops[N_OPS];
  int fds[2];
  gsize written = 0;
  gboolean all_done = FALSE;

  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  ours = g_socket_new_from_fd (fds[0], NULL);
  g_assert_nonnull (ours);
  stream = g_socket_connection_factory_create_connection (ours);

  g_main_context_push_thread_default (context);
  connection = kv_redis_connection_new_for_stream (G_IO_STREAM (stream), "fuzz", context);

  memset (ops, 0, sizeof ops);
  for (guint i = 0; i < N_OPS; i++)
    {
      ops[i].op.done = op_done;
      ops[i].op.user_data = &ops[i];
    }
  for (guint g = 0; g < 2; g++)
    {
      FuzzOp *f = &ops[g == 0 ? 0 : 2];

      headers[g] = g_malloc (HEADER_LEN);
      payloads[g] = g_malloc (PAYLOAD_LEN);
      format (f, 2, get);
      f->op.kind = KV_REDIS_OP_GET_INTO;
      f->op.dest_header = headers[g];
      f->op.dest_payload = payloads[g];
      f->op.header_len = HEADER_LEN;
      f->op.payload_len = PAYLOAD_LEN;
    }
  format (&ops[1], 2, exists);
  ops[1].op.kind = KV_REDIS_OP_COMMAND;
  format (&ops[3], 2, slots);
  ops[3].op.kind = KV_REDIS_OP_COMMAND;
  for (guint i = 0; i < N_OPS; i++)
    kv_redis_connection_send (connection, &ops[i].op);

  /* the server's answer, then it hangs up (written as the socket takes it) */
  while (written < size)
    {
      ssize_t n = send (fds[1], data + written, size - written, MSG_DONTWAIT | MSG_NOSIGNAL);

      if (n > 0)
        written += n;
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        break;
      else
        g_main_context_iteration (context, FALSE);
      /* the connection may have closed on a protocol error already */
      if (kv_redis_connection_get_state (connection) == KV_REDIS_CONNECTION_CLOSED)
        break;
    }
  shutdown (fds[1], SHUT_RDWR);
  close (fds[1]);

  while (!all_done)
    {
      all_done = TRUE;
      for (guint i = 0; i < N_OPS; i++)
        if (ops[i].n_done == 0)
          all_done = FALSE;
      if (!all_done)
        g_main_context_iteration (context, TRUE);
    }
  /* exactly once, even after the close */
  kv_redis_connection_close (connection, "fuzz input done");
  while (g_main_context_pending (context))
    g_main_context_iteration (context, FALSE);
  for (guint i = 0; i < N_OPS; i++)
    {
      g_assert_cmpuint (ops[i].n_done, ==, 1);
      kv_redis_op_clear (&ops[i].op);
    }
  g_clear_object (&connection);
  g_clear_object (&stream);
  while (g_main_context_pending (context))
    g_main_context_iteration (context, FALSE);
  g_main_context_pop_thread_default (context);
  for (guint g = 0; g < 2; g++)
    {
      g_free (headers[g]);
      g_free (payloads[g]);
    }
  return 0;
}
