/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <gio/gio.h>
#include <kvtier.h>

#include "kv-chunk-format.h"
#include "kv-s3-error.h"

G_BEGIN_DECLS

/* An S3 client for one bucket: HTTP/1.1 framed by KvS3Connection over
 * plain http (bodies sent and received in place), through libcurl's multi
 * interface over https, driven by its own I/O thread's GMainContext; a
 * bounded pool of keep-alive connections; AWS Signature Version 4; every reply bounded in
 * size and in time; transient errors retried with backoff until the op's
 * deadline. */

typedef enum {
  KV_S3_METHOD_GET,
  KV_S3_METHOD_PUT,
  KV_S3_METHOD_HEAD,
  KV_S3_METHOD_DELETE,
} KvS3Method;

typedef enum {
  KV_S3_OP_PENDING,
  KV_S3_OP_OK,          /* a 2xx; a GET's body was exactly the destination's length */
  KV_S3_OP_NOT_FOUND,   /* 404 (error says which: NoSuchKey, NoSuchBucket) */
  KV_S3_OP_WRONG_SIZE,  /* a GET of an object that is not the destination's length */
  KV_S3_OP_FAILED,      /* error set: an error reply, the connection, a timeout */
} KvS3Outcome;

typedef struct _KvS3Op KvS3Op;

/* Called once per op, on the client's I/O thread. */
typedef void     (*KvS3OpDone)    (KvS3Op   *op,
                                   gpointer  user_data);
/* Called on the I/O thread before each attempt is sent; FALSE drops the
 * op (it completes failed with G_IO_ERROR_CANCELLED). */
typedef gboolean (*KvS3OpPrepare) (KvS3Op   *op,
                                   gpointer  user_data);

/* One request. The caller owns it and its buffers until done runs; the
 * client fills the outcome fields. */
struct _KvS3Op
{
  KvS3Method     method;
  char          *key;            /* the object's key; NULL: the bucket itself */
  /* PUT: the body, written from these buffers as they are */
  const guint8  *body[2];
  gsize          body_len[2];
  /* GET: where the object lands; it must be exactly this long */
  guint8        *dest[2];
  gsize          dest_len[2];
  /* GET, nullable: fed with each piece of dest[1] as it lands (reset at
   * each attempt), so that the caller checks a payload's checksum without
   * a second pass over it; complete when the outcome is KV_S3_OP_OK */
  KvChunkHasher *dest_hasher;
  /* nullable: the query's names and values, in turn, NULL-terminated
   * ({ "list-type", "2", "prefix", "a/b&c", NULL }: not encoded; the
   * client encodes, sorts and signs them) */
  const char * const *query;
  /* GET, nullable: a 2xx reply's body is kept here (emptied at each
   * attempt), not in dest; one longer than reply_max bytes fails the op */
  GString       *reply;
  gsize          reply_max;
  /* monotonic µs; no attempt starts or runs past it (0: the client's
   * reply timeout alone bounds each attempt) */
  gint64         deadline;
  /* nullable: an (atomic) flag that aborts the op's upload when set */
  const gint    *cancelled;
  KvS3OpPrepare  prepare;
  KvS3OpDone     done;
  gpointer       user_data;

  /* outcome */
  KvS3Outcome    outcome;
  guint          status;          /* the last HTTP status, 0 when none came */
  gint64         content_length;  /* of the last reply, -1 when not given */
  GError        *error;
  guint          attempts;
  gint64         first_start;     /* monotonic µs of the first attempt */

  /* the client's */
  gpointer       client;
  guint          state;
  gint64         attempt_start;   /* monotonic µs of the last attempt */
  gpointer       easy;            /* https: its curl handle */
  gpointer       connection;      /* plain http: its KvS3Connection */
  gpointer       headers;
  gsize          offset;          /* PUT: body bytes handed to curl; GET: bytes landed */
  GString       *error_body;
  gboolean       body_mode_set;
  guint          body_mode;
  GSource       *retry_timer;
  GList          link;
  char          *url;
  char           curl_error[256];  /* CURL_ERROR_SIZE */
};

void     kv_s3_op_init   (KvS3Op      *op,
                          KvS3Method   method,
                          const char  *key);
void     kv_s3_op_clear  (KvS3Op      *op);
/* "GET", "PUT"... */
const char *kv_s3_method_to_string (KvS3Method method);

typedef enum {
  KV_S3_ADDRESSING_PATH,      /* https://host/bucket/key */
  KV_S3_ADDRESSING_VIRTUAL,   /* https://bucket.host/key */
} KvS3Addressing;

typedef struct
{
  const char     *endpoint;          /* http[s]://host[:port] */
  const char     *bucket;
  const char     *region;
  KvS3Addressing  addressing;
  const char     *access_key;
  const char     *secret_key;
  const char     *session_token;     /* nullable */
  const char     *ca_file;           /* nullable: the system's CAs */
  guint           max_connections;
  guint           connect_timeout_ms;
  guint           reply_timeout_ms;  /* the most one attempt may take, whole */
  guint           max_attempts;      /* of a transiently failing request */
  guint           retry_base_ms;     /* the first backoff; doubles */
  /* nullable: the set the client counts in (its counters at
   * first_counter + KvS3ClientCounter, so that a tier reports them with
   * its own); NULL: a set of the client's own */
  KvCounterSet   *counters;
  guint           first_counter;
} KvS3ClientConfig;

/* What the client counts, in KvS3ClientConfig's counter set. */
typedef enum {
  KV_S3_CLIENT_REQUESTS,          /* attempts sent */
  KV_S3_CLIENT_RETRIES,
  KV_S3_CLIENT_TRANSPORT_ERRORS,  /* attempts lost to the connection or a timeout */
  KV_S3_CLIENT_TIMEOUTS,          /* attempts that ran past their time */
  KV_S3_CLIENT_ERROR_REPLIES,     /* non-2xx replies but 404 */
  KV_S3_CLIENT_BYTES_SENT,        /* body bytes */
  KV_S3_CLIENT_BYTES_RECEIVED,    /* GET body bytes landed */
  KV_S3_CLIENT_N_COUNTERS
} KvS3ClientCounter;

#define KV_TYPE_S3_CLIENT (kv_s3_client_get_type ())

G_DECLARE_FINAL_TYPE (KvS3Client, kv_s3_client, KV, S3_CLIENT, GObject)

gboolean      kv_s3_client_check_config (const KvS3ClientConfig *config,
                                         GError                **error);
KvS3Client   *kv_s3_client_new          (const KvS3ClientConfig *config,
                                         GError                **error);
/* Any thread. done runs on the I/O thread (or, after shutdown, at once). */
void          kv_s3_client_submit       (KvS3Client             *self,
                                         KvS3Op                 *op);
/* I/O thread only: ends @op now (done runs, G_IO_ERROR_CANCELLED) unless
 * it has already ended. */
void          kv_s3_client_abort        (KvS3Client             *self,
                                         KvS3Op                 *op);
/* Not on the I/O thread: submits @op and waits for it. */
void          kv_s3_client_run          (KvS3Client             *self,
                                         KvS3Op                 *op);
/* Runs @func on the I/O thread (soon, from any thread). */
void          kv_s3_client_invoke       (KvS3Client             *self,
                                         GSourceFunc             func,
                                         gpointer                data);
/* The same, then @destroy; FALSE (and neither runs) once the client is
 * shut down: every op has ended then. */
gboolean      kv_s3_client_invoke_full  (KvS3Client             *self,
                                         GSourceFunc             func,
                                         gpointer                data,
                                         GDestroyNotify          destroy);
gboolean      kv_s3_client_is_io_thread (KvS3Client             *self);
/* Fails every op (G_IO_ERROR_CLOSED) and stops the I/O thread. */
void          kv_s3_client_shutdown     (KvS3Client             *self);
guint64       kv_s3_client_get_counter  (KvS3Client             *self,
                                         KvS3ClientCounter       counter);
const char   *kv_s3_client_get_bucket   (KvS3Client             *self);
/* "s3://bucket/key" (for messages) */
char         *kv_s3_client_describe     (KvS3Client             *self,
                                         const char             *key);

G_END_DECLS
