/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <sys/resource.h>
#include <unistd.h>

#include "test-s3-common.h"
#include "kv-s3-sigv4.h"
#include "s3-fake-server.h"

/* The s3 tier's HTTP client (plugins/s3/kv-s3-client.c): against the real
 * Ceph RADOS Gateway (one per run of this program), byte-exact bodies in
 * two parts, path-style and virtual-hosted addressing, https with a CA
 * file, credentials and buckets refused with their S3 error codes; against
 * fake servers, everything a gateway never does on purpose: trickles,
 * silence, lengths that lie, garbage bodies and status lines, SlowDown
 * retried within the deadline, the connection bound and keep-alive, the
 * headers signed. */

#define BUCKET "kvtier-client"

static guint8 *
pattern (gsize len,
         guint seed)
{
  guint8 *data = g_malloc (len);
  guint32 x = 0x9e3779b9u * (seed + 1);

  for (gsize i = 0; i < len; i++)
    {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      data[i] = (guint8) x;
    }
  return data;
}

/* ---- against the gateway ------------------------------------------------- */

static void
round_trip (KvS3Client *client,
            const char *key,
            gsize       header_len,
            gsize       payload_len,
            guint       seed)
{
  g_autofree guint8 *header = pattern (header_len, seed);
  g_autofree guint8 *payload = pattern (payload_len, seed + 1000);
  g_autofree guint8 *got_header = g_malloc0 (header_len);
  g_autofree guint8 *got_payload = g_malloc0 (payload_len);
  g_autoptr(KvChunkHasher) hasher = kv_chunk_hasher_new ();
  KvS3Op op;

  kv_s3_op_init (&op, KV_S3_METHOD_PUT, key);
  op.body[0] = header;
  op.body_len[0] = header_len;
  op.body[1] = payload;
  op.body_len[1] = payload_len;
  kv_s3_client_run (client, &op);
  g_assert_no_error (op.error);
  g_assert_cmpint (op.outcome, ==, KV_S3_OP_OK);
  g_assert_cmpuint (op.status, ==, 200);
  kv_s3_op_clear (&op);

  kv_s3_op_init (&op, KV_S3_METHOD_HEAD, key);
  kv_s3_client_run (client, &op);
  g_assert_no_error (op.error);
  g_assert_cmpint (op.outcome, ==, KV_S3_OP_OK);
  g_assert_cmpint (op.content_length, ==, header_len + payload_len);
  kv_s3_op_clear (&op);

  /* the object lands in two buffers, split where it was sent from, the
   * second hashed piece by piece as it lands */
  kv_s3_op_init (&op, KV_S3_METHOD_GET, key);
  op.dest[0] = got_header;
  op.dest_len[0] = header_len;
  op.dest[1] = got_payload;
  op.dest_len[1] = payload_len;
  op.dest_hasher = hasher;
  kv_s3_client_run (client, &op);
  g_assert_no_error (op.error);
  g_assert_cmpint (op.outcome, ==, KV_S3_OP_OK);
  g_assert_cmpint (op.content_length, ==, header_len + payload_len);
  kv_s3_op_clear (&op);
  g_assert_cmpmem (got_header, header_len, header, header_len);
  g_assert_cmpmem (got_payload, payload_len, payload, payload_len);
  g_assert_cmpuint (kv_chunk_hasher_digest (hasher), ==, kv_chunk_checksum (payload, payload_len));
}

static void
test_round_trip (void)
{
  KvS3ClientConfig config = s3_test_config (BUCKET);
  const gsize sizes[] = { 64 * 1024, 256 * 1024, 2 * 1024 * 1024 };
  g_autoptr(GError) error = NULL;
  KvS3Client *client;
  guint8 byte;

  if (s3_test_skip_without_gateway ())
    return;
  client = s3_test_client_new (&config);

  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      g_autofree char *key = g_strdup_printf ("round-trip/%u", i);

      round_trip (client, key, 4096, sizes[i], i);
    }
  /* a key with characters that must be encoded, signed as sent */
  round_trip (client, "odd keys/a+b=c&d~e%f", 10, 100, 7);

  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_DELETE, "round-trip/0", NULL, 0, NULL, 0,
                                    &error), ==, KV_S3_OP_OK);
  g_assert_no_error (error);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "round-trip/0", NULL, 0, &byte, 1,
                                    &error), ==, KV_S3_OP_NOT_FOUND);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_KEY);
  g_assert_nonnull (strstr (error->message, "s3://" BUCKET "/round-trip/0: HTTP 404 NoSuchKey"));
  g_clear_error (&error);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_HEAD, "round-trip/0", NULL, 0, NULL, 0,
                                    &error), ==, KV_S3_OP_NOT_FOUND);
  g_clear_error (&error);
  /* nothing was retried, nothing failed */
  g_assert_cmpuint (kv_s3_client_get_counter (client, KV_S3_CLIENT_RETRIES), ==, 0);
  g_assert_cmpuint (kv_s3_client_get_counter (client, KV_S3_CLIENT_TRANSPORT_ERRORS), ==, 0);
  g_assert_cmpuint (kv_s3_client_get_counter (client, KV_S3_CLIENT_BYTES_RECEIVED), ==,
                    3 * 4096 + 64 * 1024 + 256 * 1024 + 2 * 1024 * 1024 + 110);
  s3_test_client_free (client);
}

static void
test_wrong_size (void)
{
  KvS3ClientConfig config = s3_test_config (BUCKET);
  g_autofree guint8 *data = pattern (100000, 3);
  g_autofree guint8 *dest = g_malloc (100001);
  g_autoptr(GError) error = NULL;
  KvS3Client *client;

  if (s3_test_skip_without_gateway ())
    return;
  client = s3_test_client_new (&config);

  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_PUT, "wrong-size", data, 100000, NULL, 0,
                                    &error), ==, KV_S3_OP_OK);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "wrong-size", NULL, 0, dest, 100001,
                                    &error), ==, KV_S3_OP_WRONG_SIZE);
  g_assert_no_error (error);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "wrong-size", NULL, 0, dest, 99999,
                                    &error), ==, KV_S3_OP_WRONG_SIZE);
  g_assert_no_error (error);
  /* the connection is still good for the right size */
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "wrong-size", NULL, 0, dest, 100000,
                                    &error), ==, KV_S3_OP_OK);
  g_assert_cmpmem (dest, 100000, data, 100000);
  s3_test_client_free (client);
}

static void
test_virtual_hosted (void)
{
  KvS3ClientConfig config = s3_test_config (BUCKET);
  g_autofree char *endpoint = NULL;
  KvS3Client *client;

  if (s3_test_skip_without_gateway ())
    return;
  endpoint = g_strdup_printf ("http://localhost:%u", s3_test_gateway->rgw_port);

  config.endpoint = endpoint;
  config.addressing = KV_S3_ADDRESSING_VIRTUAL;
  client = s3_test_client_new (&config);
  round_trip (client, "virtual/1", 4096, 128 * 1024, 11);
  s3_test_client_free (client);

  /* what a virtual-hosted client stored, a path-style one reads */
  config = s3_test_config (BUCKET);
  client = s3_test_client_new (&config);
  {
    g_autofree guint8 *expected = pattern (4096, 11);
    g_autofree guint8 *got = g_malloc (4096 + 128 * 1024);
    g_autoptr(GError) error = NULL;

    g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "virtual/1", NULL, 0, got,
                                      4096 + 128 * 1024, &error), ==, KV_S3_OP_OK);
    g_assert_cmpmem (got, 4096, expected, 4096);
  }
  s3_test_client_free (client);
}

static void
test_https (void)
{
  KvS3ClientConfig config = s3_test_config (BUCKET);
  g_autoptr(GError) error = NULL;
  KvS3Client *client;
  guint8 byte;

  if (s3_test_skip_without_gateway ())
    return;

  if (s3_test_gateway->tls_endpoint == NULL)
    {
      g_test_skip ("openssl is not installed: no certificate for the gateway");
      return;
    }
  config.endpoint = s3_test_gateway->tls_endpoint;
  config.ca_file = s3_test_gateway->ca_file;
  client = s3_test_client_new (&config);
  round_trip (client, "tls/1", 4096, 256 * 1024, 21);
  s3_test_client_free (client);

  /* another CA's file: refused, not trusted (not the system's CAs: a
   * sanitizer build takes tens of seconds to load them); the connect
   * bound, which covers the handshake, is wide so that a slow handshake
   * on a loaded machine is not taken for the refusal */
  config.ca_file = s3_test_gateway->other_ca_file;
  config.connect_timeout_ms = 30000;
  client = s3_test_client_new (&config);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "tls/1", NULL, 0, &byte, 1, &error),
                   ==, KV_S3_OP_FAILED);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED);
  g_assert_nonnull (strstr (error->message, "certificate"));
  s3_test_client_free (client);
}

static void
test_bad_credentials (void)
{
  KvS3ClientConfig config = s3_test_config (BUCKET);
  g_autoptr(GError) error = NULL;
  KvS3Client *client;
  guint8 byte;

  if (s3_test_skip_without_gateway ())
    return;

  config.access_key = "AKNOSUCHKEY000000000";
  client = s3_test_client_new (&config);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "k", NULL, 0, &byte, 1, &error),
                   ==, KV_S3_OP_FAILED);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_INVALID_ACCESS_KEY);
  g_assert_nonnull (strstr (error->message, "s3://" BUCKET "/k: HTTP 403 InvalidAccessKeyId"));
  g_clear_error (&error);
  s3_test_client_free (client);

  config = s3_test_config (BUCKET);
  config.secret_key = "not-the-secret";
  client = s3_test_client_new (&config);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "k", NULL, 0, &byte, 1, &error),
                   ==, KV_S3_OP_FAILED);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_SIGNATURE_MISMATCH);
  g_clear_error (&error);
  /* not retried: a refusal is not transient */
  g_assert_cmpuint (kv_s3_client_get_counter (client, KV_S3_CLIENT_REQUESTS), ==, 1);
  s3_test_client_free (client);

  config = s3_test_config ("kvtier-no-such-bucket");
  client = s3_test_client_new (&config);
  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "k", NULL, 0, &byte, 1, &error),
                   ==, KV_S3_OP_NOT_FOUND);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_BUCKET);
  g_assert_nonnull (strstr (error->message, "s3://kvtier-no-such-bucket/k: HTTP 404 NoSuchBucket"));
  s3_test_client_free (client);
}

static void
test_config_refused (void)
{
  struct { const char *endpoint; const char *bucket; KvS3Addressing addressing; const char *ca; const char *says; } cases[] = {
    { "ftp://host", "bkt", KV_S3_ADDRESSING_PATH, NULL, "scheme" },
    { "http://host/prefix", "bkt", KV_S3_ADDRESSING_PATH, NULL, "only scheme://host[:port]" },
    { "http://user:pw@host", "bkt", KV_S3_ADDRESSING_PATH, NULL, "only scheme://host[:port]" },
    { "not a url", "bkt", KV_S3_ADDRESSING_PATH, NULL, "not a URL" },
    { "", "bkt", KV_S3_ADDRESSING_PATH, NULL, "needs an endpoint" },
    { "http://host", "B_kt", KV_S3_ADDRESSING_PATH, NULL, "not an S3 bucket name" },
    { "http://host", "ab", KV_S3_ADDRESSING_PATH, NULL, "not an S3 bucket name" },
    { "http://127.0.0.1:9000", "bkt", KV_S3_ADDRESSING_VIRTUAL, NULL, "addressing=virtual" },
    { "http://host", "bkt", KV_S3_ADDRESSING_PATH, "/etc/hostname", "needs an https endpoint" },
    { "https://host", "bkt", KV_S3_ADDRESSING_PATH, "/nonexistent/ca.pem", "not a readable file" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      KvS3ClientConfig config = s3_test_config (cases[i].bucket);
      g_autoptr(GError) error = NULL;

      config.endpoint = cases[i].endpoint;
      config.addressing = cases[i].addressing;
      config.ca_file = cases[i].ca;
      g_assert_false (kv_s3_client_check_config (&config, &error));
      g_assert_nonnull (error);
      if (strstr (error->message, cases[i].says) == NULL)
        g_error ("case %u: “%s” does not say “%s”", i, error->message, cases[i].says);
    }
}

/* ---- against fake servers ------------------------------------------------ */

typedef enum {
  FAKE_OK,              /* 200, an object of 1000 bytes for a GET */
  FAKE_SLOW_DOWN_TWICE, /* 503 SlowDown twice, then as FAKE_OK */
  FAKE_SLOW_DOWN,       /* 503 SlowDown, always */
  FAKE_SLOW_SLOW_DOWN,  /* 503 SlowDown, always, each after 300 ms */
  FAKE_INTERNAL_ONCE,   /* 500 InternalError once, then as FAKE_OK */
  FAKE_TRICKLE,         /* the object, a byte every 20 ms */
  FAKE_SILENT,          /* reads the request, never answers */
  FAKE_LONGER,          /* Content-Length 1100 for a 1000-byte object */
  FAKE_CUT,             /* Content-Length 1000, 500 bytes, then closes */
  FAKE_CHUNKED_LONGER,  /* chunked, 1200 bytes */
  FAKE_EXTRA_BYTES,     /* 1000 bytes, then 5 bytes no reply announced */
  FAKE_HTML_403,
  FAKE_BINARY_400,
  FAKE_HUGE_ERROR,      /* a 500 with a 1 MiB body */
  FAKE_BAD_STATUS,      /* not HTTP at all */
  FAKE_CLOSE,           /* closes without a word */
  FAKE_INTERIM,         /* 100 Continue, then as FAKE_OK */
  FAKE_CHUNKED_EXACT,   /* chunked, 1000 bytes in chunks of 1, 399 and 600, with an extension and a trailer */
  FAKE_UNTIL_CLOSE,     /* HTTP/1.0, no length: 1000 bytes, then closes */
  FAKE_CLOSE_AFTER,     /* as FAKE_OK, then closes the kept-alive connection without saying */
  FAKE_HUGE_HEAD,       /* a reply head of 100 KiB */
  FAKE_BAD_LENGTH,      /* two Content-Lengths that disagree */
  FAKE_REFUSE_UPLOAD,   /* 403 AccessDenied at a request's head, its body unread, then closes */
} FakeMode;

typedef struct
{
  FakeMode mode;
  gint     n_served;
} FakeScript;

static gboolean
reply_object (GOutputStream *out,
              const char    *method,
              gsize          len)
{
  /* a HEAD is told the object's length, a PUT or DELETE gets no body */
  gsize announced = strcmp (method, "GET") == 0 || strcmp (method, "HEAD") == 0 ? len : 0;
  g_autofree char *head = g_strdup_printf ("HTTP/1.1 200 OK\r\nContent-Length: %" G_GSIZE_FORMAT
                                           "\r\nContent-Type: application/octet-stream\r\n\r\n",
                                           announced);
  g_autofree guint8 *body = pattern (len, 99);

  if (!s3_fake_write_str (out, head))
    return FALSE;
  if (strcmp (method, "GET") != 0)
    return TRUE;
  return s3_fake_write (out, body, len);
}

static gboolean
reply_error (GOutputStream *out,
             guint          status,
             const char    *reason,
             const char    *body)
{
  g_autofree char *reply = g_strdup_printf ("HTTP/1.1 %u %s\r\nContent-Length: %" G_GSIZE_FORMAT
                                            "\r\nContent-Type: application/xml\r\n\r\n%s",
                                            status, reason, strlen (body), body);

  return s3_fake_write_str (out, reply);
}

static gboolean
fake_handler (S3FakeServer        *server,
              const S3FakeRequest *request,
              GOutputStream       *out,
              gpointer             user_data)
{
  FakeScript *script = user_data;
  gint n = g_atomic_int_add (&script->n_served, 1);
  const char *slow = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>"
                     "<Message>Please reduce your request rate.</Message></Error>";

  switch (script->mode)
    {
    case FAKE_OK:
      return reply_object (out, request->method, 1000);
    case FAKE_SLOW_DOWN_TWICE:
      if (n < 2)
        return reply_error (out, 503, "Slow Down", slow);
      return reply_object (out, request->method, 1000);
    case FAKE_SLOW_DOWN:
      return reply_error (out, 503, "Slow Down", slow);
    case FAKE_SLOW_SLOW_DOWN:
      g_usleep (300 * 1000);
      return reply_error (out, 503, "Slow Down", slow);
    case FAKE_INTERNAL_ONCE:
      if (n < 1)
        return reply_error (out, 500, "Internal Server Error",
                            "<Error><Code>InternalError</Code></Error>");
      return reply_object (out, request->method, 1000);
    case FAKE_TRICKLE:
      if (!s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"))
        return FALSE;
      for (guint i = 0; i < 1000; i++)
        {
          if (!s3_fake_write (out, "x", 1))
            return FALSE;
          g_usleep (20000);
        }
      return TRUE;
    case FAKE_SILENT:
      {
        char byte;

        /* until the client gives up and closes */
        g_input_stream_read (request->in, &byte, 1, NULL, NULL);
        return FALSE;
      }
    case FAKE_LONGER:
      {
        g_autofree guint8 *body = pattern (1000, 99);

        return s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nContent-Length: 1100\r\n\r\n") &&
               s3_fake_write (out, body, 1000) && FALSE;
      }
    case FAKE_CUT:
      {
        g_autofree guint8 *body = pattern (500, 99);

        s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        s3_fake_write (out, body, 500);
        return FALSE;
      }
    case FAKE_CHUNKED_LONGER:
      {
        g_autofree guint8 *body = pattern (1200, 99);

        /* two chunks of 600 (0x258) bytes */
        return s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n") &&
               s3_fake_write (out, body, 600) && s3_fake_write_str (out, "\r\n258\r\n") &&
               s3_fake_write (out, body + 600, 600) && s3_fake_write_str (out, "\r\n0\r\n\r\n");
      }
    case FAKE_EXTRA_BYTES:
      return reply_object (out, request->method, 1000) && s3_fake_write_str (out, "JUNK!");
    case FAKE_HTML_403:
      return reply_error (out, 403, "Forbidden", "<html><body><h1>403 Forbidden</h1></body></html>");
    case FAKE_BINARY_400:
      return reply_error (out, 400, "Bad Request", "\x01\x02\xff\xfe<Error><Code>");
    case FAKE_HUGE_ERROR:
      {
        gsize len = 1024 * 1024;
        g_autofree char *head = g_strdup_printf ("HTTP/1.1 500 Oops\r\nContent-Length: %" G_GSIZE_FORMAT
                                                 "\r\n\r\n<Error><Code>", len);
        g_autofree char *body = g_malloc (len);

        memset (body, 'z', len);
        return s3_fake_write_str (out, head) && s3_fake_write (out, body, len - 13);
      }
    case FAKE_BAD_STATUS:
      s3_fake_write_str (out, "hello there, I am not a web server\r\n\r\n");
      return FALSE;
    case FAKE_INTERIM:
      return s3_fake_write_str (out, "HTTP/1.1 100 Continue\r\n\r\n") &&
             reply_object (out, request->method, 1000);
    case FAKE_CHUNKED_EXACT:
      {
        g_autofree guint8 *body = pattern (1000, 99);

        return s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;x=y\r\n") &&
               s3_fake_write (out, body, 1) && s3_fake_write_str (out, "\r\n18f\r\n") &&
               s3_fake_write (out, body + 1, 399) && s3_fake_write_str (out, "\r\n258\r\n") &&
               s3_fake_write (out, body + 400, 600) &&
               s3_fake_write_str (out, "\r\n0\r\nx-trailer: 1\r\n\r\n");
      }
    case FAKE_UNTIL_CLOSE:
      {
        g_autofree guint8 *body = pattern (1000, 99);

        s3_fake_write_str (out, "HTTP/1.0 200 OK\r\n\r\n");
        s3_fake_write (out, body, 1000);
        return FALSE;
      }
    case FAKE_CLOSE_AFTER:
      reply_object (out, request->method, 1000);
      return FALSE;
    case FAKE_HUGE_HEAD:
      {
        g_autofree char *filler = g_strnfill (100 * 1024, 'a');

        s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nX-Filler: ");
        s3_fake_write_str (out, filler);
        s3_fake_write_str (out, "\r\nContent-Length: 1000\r\n\r\n");
        return FALSE;
      }
    case FAKE_REFUSE_UPLOAD:
      reply_error (out, 403, "Forbidden",
                   "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code>"
                   "<Message>Access Denied</Message></Error>");
      return FALSE;
    case FAKE_BAD_LENGTH:
      s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nContent-Length: 999\r\n\r\n");
      return FALSE;
    case FAKE_CLOSE:
    default:
      return FALSE;
    }
}

typedef struct
{
  FakeScript    script;
  S3FakeServer *server;
  char         *endpoint;
  KvS3Client   *client;
} Fake;

static void
fake_start (Fake                   *fake,
            FakeMode                mode,
            const KvS3ClientConfig *base)
{
  KvS3ClientConfig config = base != NULL ? *base : s3_test_config ("fake-bucket");

  fake->script.mode = mode;
  fake->script.n_served = 0;
  fake->server = s3_fake_server_new (fake_handler, &fake->script);
  fake->endpoint = s3_fake_server_get_endpoint (fake->server);
  config.endpoint = fake->endpoint;
  if (base == NULL)
    {
      config.access_key = "AKFAKE";
      config.secret_key = "SKFAKE";
      config.reply_timeout_ms = 500;
    }
  fake->client = s3_test_client_new (&config);
}

static void
fake_stop (Fake *fake)
{
  s3_test_client_free (fake->client);
  s3_fake_server_free (fake->server);
  g_free (fake->endpoint);
}

static KvS3Outcome
fake_get (Fake     *fake,
          gsize     len,
          GError  **error)
{
  g_autofree guint8 *dest = g_malloc0 (len);
  KvS3Outcome outcome = s3_test_request (fake->client, KV_S3_METHOD_GET, "k", NULL, 0, dest, len, error);

  if (error != NULL && *error != NULL)
    g_test_message ("GET: %s", (*error)->message);
  if (outcome == KV_S3_OP_OK)
    {
      g_autofree guint8 *expected = pattern (len, 99);

      g_assert_cmpmem (dest, len, expected, len);
    }
  return outcome;
}

/* With no file descriptor left (RLIMIT_NOFILE at the lowest free one), a
 * request that needs a new connection fails at once with the error that
 * says so; once descriptors are back, the same client connects again:
 * the failed connect left no connection counted against the bound of
 * one. Run in a subprocess, since the limit is the whole process's. */
static void
test_out_of_descriptors (void)
{
  if (g_test_subprocess ())
    {
      KvS3ClientConfig config = s3_test_config ("fake-bucket");
      g_autoptr(GError) error = NULL;
      struct rlimit saved, low;
      Fake fake = { 0 };
      int lowest_free;

      config.access_key = "AKFAKE";
      config.secret_key = "SKFAKE";
      config.reply_timeout_ms = 2000;
      config.max_connections = 1;
      fake_start (&fake, FAKE_OK, &config);

      g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &saved), ==, 0);
      lowest_free = dup (0);
      g_assert_cmpint (lowest_free, >=, 0);
      close (lowest_free);
      low = saved;
      low.rlim_cur = lowest_free;
      g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &low), ==, 0);
      g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
      g_assert_nonnull (error);
      g_assert_nonnull (strstr (error->message, g_strerror (EMFILE)));
      g_clear_error (&error);
      g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &saved), ==, 0);

      g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_OK);
      g_assert_no_error (error);
      g_assert_cmpuint (s3_fake_server_get_n_requests (fake.server), ==, 1);
      fake_stop (&fake);
      return;
    }
  g_test_trap_subprocess (NULL, 60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

static void
test_signed_headers (void)
{
  KvS3ClientConfig config = s3_test_config ("fake-bucket");
  g_autoptr(GHashTable) get = NULL;
  g_autoptr(GHashTable) put = NULL;
  g_autoptr(GError) error = NULL;
  guint8 body[10] = { 0 };
  Fake fake = { 0 };

  config.access_key = "AKFAKE";
  config.secret_key = "SKFAKE";
  config.session_token = "TOKEN123";
  fake_start (&fake, FAKE_OK, &config);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_OK);
  g_assert_cmpint (s3_test_request (fake.client, KV_S3_METHOD_PUT, "dir/k", body, sizeof body, NULL, 0,
                                    &error), ==, KV_S3_OP_OK);
  get = s3_fake_server_dup_headers (fake.server, 0);
  put = s3_fake_server_dup_headers (fake.server, 1);
  g_assert_nonnull (get);
  g_assert_nonnull (put);
  g_assert_cmpstr (g_hash_table_lookup (get, "host"), ==, strchr (fake.endpoint, '/') + 2);
  g_assert_cmpstr (g_hash_table_lookup (get, "x-amz-content-sha256"), ==, KV_S3_EMPTY_SHA256);
  g_assert_cmpstr (g_hash_table_lookup (get, "x-amz-security-token"), ==, "TOKEN123");
  g_assert_true (g_str_has_prefix (g_hash_table_lookup (get, "authorization"),
                                   "AWS4-HMAC-SHA256 Credential=AKFAKE/"));
  g_assert_nonnull (strstr (g_hash_table_lookup (get, "authorization"),
                            "/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;"
                            "x-amz-date;x-amz-security-token, Signature="));
  g_assert_cmpuint (strlen (g_hash_table_lookup (get, "x-amz-date")), ==, 16);
  g_assert_cmpstr (g_hash_table_lookup (put, "x-amz-content-sha256"), ==, KV_S3_UNSIGNED_PAYLOAD);
  g_assert_cmpstr (g_hash_table_lookup (put, "content-length"), ==, "10");
  /* no 100-continue round trip */
  g_assert_null (g_hash_table_lookup (put, "expect"));
  fake_stop (&fake);
}

/* 128 requests one after another: one connection, kept alive. */
static void
test_keep_alive (void)
{
  g_autoptr(GError) error = NULL;
  Fake fake = { 0 };

  fake_start (&fake, FAKE_OK, NULL);
  for (guint i = 0; i < 128; i++)
    {
      g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_OK);
      g_assert_no_error (error);
    }
  g_assert_cmpuint (s3_fake_server_get_n_requests (fake.server), ==, 128);
  g_assert_cmpuint (s3_fake_server_get_n_connections (fake.server), ==, 1);
  fake_stop (&fake);
}

typedef struct
{
  GMutex lock;
  GCond  cond;
  guint  n_done;
} Counter;

static void
count_done (KvS3Op   *op,
            gpointer  user_data)
{
  Counter *counter = user_data;

  g_mutex_lock (&counter->lock);
  counter->n_done++;
  g_cond_signal (&counter->cond);
  g_mutex_unlock (&counter->lock);
}

static void
wait_done (Counter *counter,
           guint    n)
{
  g_mutex_lock (&counter->lock);
  while (counter->n_done < n)
    g_cond_wait (&counter->cond, &counter->lock);
  g_mutex_unlock (&counter->lock);
}

/* Many requests in flight at once: never more connections than the bound,
 * and the bound used. */
static void
test_connection_bound (void)
{
  KvS3ClientConfig config = s3_test_config ("fake-bucket");
  g_autofree guint8 *dests = g_malloc (64 * 1000);
  KvS3Op ops[64];
  Counter counter = { 0 };
  Fake fake = { 0 };

  config.access_key = "AKFAKE";
  config.secret_key = "SKFAKE";
  config.max_connections = 4;
  fake_start (&fake, FAKE_OK, &config);
  for (guint round = 0; round < 3; round++)
    {
      counter.n_done = 0;
      for (guint i = 0; i < G_N_ELEMENTS (ops); i++)
        {
          kv_s3_op_init (&ops[i], KV_S3_METHOD_GET, "k");
          ops[i].dest[0] = dests + i * 1000;
          ops[i].dest_len[0] = 1000;
          ops[i].done = count_done;
          ops[i].user_data = &counter;
          kv_s3_client_submit (fake.client, &ops[i]);
        }
      wait_done (&counter, G_N_ELEMENTS (ops));
      for (guint i = 0; i < G_N_ELEMENTS (ops); i++)
        {
          g_assert_no_error (ops[i].error);
          g_assert_cmpint (ops[i].outcome, ==, KV_S3_OP_OK);
          kv_s3_op_clear (&ops[i]);
        }
    }
  g_assert_cmpuint (s3_fake_server_get_n_requests (fake.server), ==, 3 * 64);
  g_assert_cmpuint (s3_fake_server_get_max_concurrent (fake.server), <=, 4);
  /* kept alive: the same four connections served all three rounds */
  g_assert_cmpuint (s3_fake_server_get_n_connections (fake.server), <=, 4);
  g_assert_cmpuint (s3_fake_server_get_n_connections (fake.server), >=, 2);
  g_mutex_clear (&counter.lock);
  g_cond_clear (&counter.cond);
  fake_stop (&fake);
}

static void
test_slow_down_retried (void)
{
  g_autoptr(GError) error = NULL;
  Fake fake = { 0 };

  fake_start (&fake, FAKE_SLOW_DOWN_TWICE, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_OK);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_RETRIES), ==, 2);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_REQUESTS), ==, 3);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_ERROR_REPLIES), ==, 2);
  fake_stop (&fake);

  fake_start (&fake, FAKE_INTERNAL_ONCE, NULL);
  {
    guint8 body[3] = { 1, 2, 3 };

    g_assert_cmpint (s3_test_request (fake.client, KV_S3_METHOD_PUT, "k", body, 3, NULL, 0, &error),
                     ==, KV_S3_OP_OK);
  }
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_RETRIES), ==, 1);
  fake_stop (&fake);

  /* SlowDown for ever: max-attempts, then the last error */
  fake_start (&fake, FAKE_SLOW_DOWN, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_SLOW_DOWN);
  g_assert_nonnull (strstr (error->message, "s3://fake-bucket/k: HTTP 503 SlowDown: Please reduce"));
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_REQUESTS), ==, 4);
  fake_stop (&fake);
}

/* Retries stop at the op's deadline, however many attempts are left. */
static void
test_retries_within_deadline (void)
{
  KvS3ClientConfig config = s3_test_config ("fake-bucket");
  g_autofree guint8 *dest = g_malloc (1000);
  Fake fake = { 0 };
  KvS3Op op;
  gint64 start;

  config.access_key = "AKFAKE";
  config.secret_key = "SKFAKE";
  config.max_attempts = 1000;
  config.retry_base_ms = 50;
  fake_start (&fake, FAKE_SLOW_DOWN, &config);
  kv_s3_op_init (&op, KV_S3_METHOD_GET, "k");
  op.dest[0] = dest;
  op.dest_len[0] = 1000;
  start = g_get_monotonic_time ();
  op.deadline = start + 600 * G_TIME_SPAN_MILLISECOND;
  kv_s3_client_run (fake.client, &op);
  g_assert_cmpint (op.outcome, ==, KV_S3_OP_FAILED);
  g_assert_error (op.error, KV_S3_ERROR, KV_S3_ERROR_SLOW_DOWN);
  g_assert_cmpint (g_get_monotonic_time (), <=, op.deadline + 100 * G_TIME_SPAN_MILLISECOND);
  g_assert_cmpuint (op.attempts, >=, 2);
  g_assert_cmpuint (op.attempts, <, 20);
  kv_s3_op_clear (&op);
  fake_stop (&fake);
}

/* An attempt that took 300 ms is not tried again with 200 ms left: the
 * job fails with the store's answer, not with a timeout of its own. */
static void
test_no_retry_that_cannot_finish (void)
{
  KvS3ClientConfig config = s3_test_config ("fake-bucket");
  g_autofree guint8 *dest = g_malloc (1000);
  Fake fake = { 0 };
  KvS3Op op;

  config.access_key = "AKFAKE";
  config.secret_key = "SKFAKE";
  config.max_attempts = 4;
  config.retry_base_ms = 20;
  fake_start (&fake, FAKE_SLOW_SLOW_DOWN, &config);
  kv_s3_op_init (&op, KV_S3_METHOD_GET, "k");
  op.dest[0] = dest;
  op.dest_len[0] = 1000;
  op.deadline = g_get_monotonic_time () + 500 * G_TIME_SPAN_MILLISECOND;
  kv_s3_client_run (fake.client, &op);
  g_assert_cmpint (op.outcome, ==, KV_S3_OP_FAILED);
  g_assert_error (op.error, KV_S3_ERROR, KV_S3_ERROR_SLOW_DOWN);
  g_assert_cmpuint (op.attempts, ==, 1);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_RETRIES), ==, 0);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_TIMEOUTS), ==, 0);
  kv_s3_op_clear (&op);
  fake_stop (&fake);
}

/* A reply is bounded in time as a whole, not only in silence. */
static void
test_trickle_and_silence (void)
{
  FakeMode modes[] = { FAKE_TRICKLE, FAKE_SILENT };

  for (guint i = 0; i < G_N_ELEMENTS (modes); i++)
    {
      g_autoptr(GError) error = NULL;
      Fake fake = { 0 };
      gint64 start;

      fake_start (&fake, modes[i], NULL);
      start = g_get_monotonic_time ();
      g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT);
      /* reply-timeout-ms is 500: one attempt, not retried */
      g_assert_cmpint (g_get_monotonic_time () - start, <, 3 * G_USEC_PER_SEC);
      g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_TIMEOUTS), ==, 1);
      g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_REQUESTS), ==, 1);
      fake_stop (&fake);
    }
}

static void
test_lying_lengths (void)
{
  g_autoptr(GError) error = NULL;
  Fake fake = { 0 };

  /* longer than the destination: refused at the header, nothing written past it */
  fake_start (&fake, FAKE_LONGER, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_WRONG_SIZE);
  g_assert_no_error (error);
  fake_stop (&fake);

  /* chunked, no length announced, longer than the destination: said to
   * be longer (a tier tells a longer object from a truncated one) */
  fake_start (&fake, FAKE_CHUNKED_LONGER, NULL);
  {
    guint8 dest[1000];
    KvS3Op op;

    kv_s3_op_init (&op, KV_S3_METHOD_GET, "k");
    op.dest[0] = dest;
    op.dest_len[0] = sizeof dest;
    kv_s3_client_run (fake.client, &op);
    g_assert_cmpint (op.outcome, ==, KV_S3_OP_WRONG_SIZE);
    g_assert_cmpint (op.content_length, >, 1000);
    kv_s3_op_clear (&op);
  }
  g_assert_cmpint (fake_get (&fake, 1200, &error), ==, KV_S3_OP_OK);
  fake_stop (&fake);

  /* announced 1000, sent 500 and closed: the connection failed, not the
   * object; sent again, then given up */
  fake_start (&fake, FAKE_CUT, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_REQUESTS), ==, 4);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_TRANSPORT_ERRORS), ==, 4);
  fake_stop (&fake);

  /* bytes past a reply: the next reply on that connection is not built
   * from them (curl drops the connection when it sees them, at the latest
   * as the next reply fails to parse, which is sent again elsewhere) */
  fake_start (&fake, FAKE_EXTRA_BYTES, NULL);
  for (guint i = 0; i < 5; i++)
    {
      g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_OK);
      g_assert_no_error (error);
    }
  g_assert_cmpuint (s3_fake_server_get_n_connections (fake.server), >=, 2);
  fake_stop (&fake);
}

static void
test_garbage (void)
{
  g_autoptr(GError) error = NULL;
  Fake fake = { 0 };

  fake_start (&fake, FAKE_HTML_403, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_ACCESS_DENIED);
  g_assert_nonnull (strstr (error->message, "s3://fake-bucket/k: HTTP 403 with a body that is not an S3 error body"));
  g_clear_error (&error);
  fake_stop (&fake);

  fake_start (&fake, FAKE_BINARY_400, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
  g_clear_error (&error);
  fake_stop (&fake);

  /* an error body past its bound is not kept, and not retried for ever */
  fake_start (&fake, FAKE_HUGE_ERROR, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
  g_assert_nonnull (strstr (error->message, "longer than 16384 bytes"));
  g_clear_error (&error);
  fake_stop (&fake);

  fake_start (&fake, FAKE_BAD_STATUS, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_FAILED);
  g_clear_error (&error);
  fake_stop (&fake);

  fake_start (&fake, FAKE_CLOSE, NULL);
  g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, fake.endpoint));
  g_clear_error (&error);
  fake_stop (&fake);

  /* a server that is not there */
  {
    KvS3ClientConfig config = s3_test_config ("fake-bucket");
    g_autofree char *endpoint = g_strdup_printf ("http://127.0.0.1:%u", s3_gateway_free_port ());
    KvS3Client *client;
    guint8 byte;

    config.endpoint = endpoint;
    client = s3_test_client_new (&config);
    g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_GET, "k", NULL, 0, &byte, 1, &error),
                     ==, KV_S3_OP_FAILED);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED);
    g_assert_cmpuint (kv_s3_client_get_counter (client, KV_S3_CLIENT_REQUESTS), ==, 1);
    s3_test_client_free (client);
  }
}

/* What the client reads of HTTP/1.1 besides a plain reply with a length:
 * interim replies, chunks with extensions and trailers, a body that ends
 * with the connection, a kept-alive connection the server closed while
 * idle; and what it refuses: a head past its bound, lengths that
 * disagree. */
static void
test_framing (void)
{
  FakeMode good[] = { FAKE_INTERIM, FAKE_CHUNKED_EXACT, FAKE_UNTIL_CLOSE, FAKE_CLOSE_AFTER };
  FakeMode bad[] = { FAKE_HUGE_HEAD, FAKE_BAD_LENGTH };

  for (guint i = 0; i < G_N_ELEMENTS (good); i++)
    {
      g_autoptr(GError) error = NULL;
      Fake fake = { 0 };

      fake_start (&fake, good[i], NULL);
      for (guint j = 0; j < 3; j++)
        {
          g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_OK);
          g_assert_no_error (error);
        }
      if (good[i] == FAKE_CLOSE_AFTER)
        {
          /* one connection a request; one sent before the server's close
           * arrived fails on the old one and goes again on its own */
          g_assert_cmpuint (s3_fake_server_get_n_connections (fake.server), ==, 3);
          g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_REQUESTS), >=, 3);
        }
      else
        {
          g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_REQUESTS), ==, 3);
          g_assert_cmpuint (s3_fake_server_get_n_connections (fake.server), ==,
                            good[i] == FAKE_UNTIL_CLOSE ? 3 : 1);
        }
      fake_stop (&fake);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      Fake fake = { 0 };

      fake_start (&fake, bad[i], NULL);
      g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
      g_assert_error (error, G_IO_ERROR, G_IO_ERROR_FAILED);
      fake_stop (&fake);
    }
}

/* A server that refuses an upload at its head, before reading its body,
 * and hangs up: the client reads the refusal as the answer (one request,
 * AccessDenied), not as a broken pipe to send again. */
static void
test_reply_before_body (void)
{
  gsize len = 32 * 1024 * 1024;   /* more than the sockets' buffers hold */
  g_autofree guint8 *body = g_malloc0 (len);
  g_autoptr(GError) error = NULL;
  Fake fake = { 0 };

  fake_start (&fake, FAKE_REFUSE_UPLOAD, NULL);
  s3_fake_server_set_reply_before_body (fake.server, TRUE);
  g_assert_cmpint (s3_test_request (fake.client, KV_S3_METHOD_PUT, "k", body, len, NULL, 0, &error),
                   ==, KV_S3_OP_FAILED);
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_ACCESS_DENIED);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_REQUESTS), ==, 1);
  g_assert_cmpuint (kv_s3_client_get_counter (fake.client, KV_S3_CLIENT_BYTES_SENT), ==, 0);
  fake_stop (&fake);
}

typedef struct
{
  KvS3Client *client;
  KvS3Op     *op;
} AbortData;

static gboolean
abort_now (gpointer data)
{
  AbortData *abort = data;

  kv_s3_client_abort (abort->client, abort->op);
  return G_SOURCE_REMOVE;
}

/* Shutdown fails what is in flight (and what waits for a connection) at
 * once; abort ends one op. */
static void
test_abort_and_shutdown (void)
{
  KvS3ClientConfig config = s3_test_config ("fake-bucket");
  guint8 dests[8][1000];
  KvS3Op ops[8];
  Counter counter = { 0 };
  Fake fake = { 0 };
  AbortData abort;
  gint64 start;

  config.access_key = "AKFAKE";
  config.secret_key = "SKFAKE";
  config.max_connections = 2;
  config.reply_timeout_ms = 60000;
  fake_start (&fake, FAKE_SILENT, &config);
  for (guint i = 0; i < G_N_ELEMENTS (ops); i++)
    {
      kv_s3_op_init (&ops[i], KV_S3_METHOD_GET, "k");
      ops[i].dest[0] = dests[i];
      ops[i].dest_len[0] = 1000;
      ops[i].done = count_done;
      ops[i].user_data = &counter;
      kv_s3_client_submit (fake.client, &ops[i]);
    }
  while (s3_fake_server_get_n_requests (fake.server) < 2)
    g_usleep (1000);
  abort.client = fake.client;
  abort.op = &ops[0];
  kv_s3_client_invoke (fake.client, abort_now, &abort);
  wait_done (&counter, 1);
  g_assert_error (ops[0].error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
  start = g_get_monotonic_time ();
  kv_s3_client_shutdown (fake.client);
  g_assert_cmpint (g_get_monotonic_time () - start, <, 2 * G_USEC_PER_SEC);
  g_assert_cmpuint (counter.n_done, ==, G_N_ELEMENTS (ops));
  for (guint i = 1; i < G_N_ELEMENTS (ops); i++)
    {
      g_assert_cmpint (ops[i].outcome, ==, KV_S3_OP_FAILED);
      g_assert_error (ops[i].error, G_IO_ERROR, G_IO_ERROR_CLOSED);
    }
  for (guint i = 0; i < G_N_ELEMENTS (ops); i++)
    kv_s3_op_clear (&ops[i]);
  /* after shutdown: refused at once */
  {
    g_autoptr(GError) error = NULL;

    g_assert_cmpint (fake_get (&fake, 1000, &error), ==, KV_S3_OP_FAILED);
    g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CLOSED);
  }
  g_mutex_clear (&counter.lock);
  g_cond_clear (&counter.cond);
  fake_stop (&fake);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, NULL);
  /* the fake-server cases need no gateway */
  g_test_add_func ("/s3-client/config-refused", test_config_refused);
  g_test_add_func ("/s3-client/fake/signed-headers", test_signed_headers);
  g_test_add_func ("/s3-client/fake/keep-alive", test_keep_alive);
  g_test_add_func ("/s3-client/fake/connection-bound", test_connection_bound);
  g_test_add_func ("/s3-client/fake/slow-down-retried", test_slow_down_retried);
  g_test_add_func ("/s3-client/fake/retries-within-deadline", test_retries_within_deadline);
  g_test_add_func ("/s3-client/fake/no-retry-that-cannot-finish", test_no_retry_that_cannot_finish);
  g_test_add_func ("/s3-client/fake/trickle-and-silence", test_trickle_and_silence);
  g_test_add_func ("/s3-client/fake/lying-lengths", test_lying_lengths);
  g_test_add_func ("/s3-client/fake/garbage", test_garbage);
  g_test_add_func ("/s3-client/fake/framing", test_framing);
  g_test_add_func ("/s3-client/fake/reply-before-body", test_reply_before_body);
  g_test_add_func ("/s3-client/fake/out-of-descriptors", test_out_of_descriptors);
  g_test_add_func ("/s3-client/fake/abort-and-shutdown", test_abort_and_shutdown);
  if (s3_test_start_gateway ())
    s3_test_create_bucket (BUCKET);
  g_test_add_func ("/s3-client/gateway/round-trip", test_round_trip);
  g_test_add_func ("/s3-client/gateway/wrong-size", test_wrong_size);
  g_test_add_func ("/s3-client/gateway/virtual-hosted", test_virtual_hosted);
  g_test_add_func ("/s3-client/gateway/https", test_https);
  g_test_add_func ("/s3-client/gateway/bad-credentials", test_bad_credentials);
  status = g_test_run ();
  s3_test_stop_gateway ();
  return status;
}
