/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* What an S3 server's reply meant, as a GError of KV_S3_ERROR. */
#define KV_S3_ERROR (kv_s3_error_quark ())

typedef enum {
  KV_S3_ERROR_FAILED,             /* any other error reply */
  KV_S3_ERROR_NO_SUCH_BUCKET,
  KV_S3_ERROR_NO_SUCH_KEY,
  KV_S3_ERROR_INVALID_ACCESS_KEY, /* InvalidAccessKeyId: no such access key */
  KV_S3_ERROR_SIGNATURE_MISMATCH, /* SignatureDoesNotMatch: a wrong secret */
  KV_S3_ERROR_ACCESS_DENIED,      /* AccessDenied and other 403s */
  KV_S3_ERROR_SLOW_DOWN,          /* 503 SlowDown: retried */
  KV_S3_ERROR_SERVER_ERROR,       /* 500, 502, 504: retried */
  KV_S3_ERROR_BAD_REPLY,          /* a reply that is not what S3 sends */
} KvS3Error;

GQuark kv_s3_error_quark (void);

/* The most bytes of an error body the client keeps and parses. */
#define KV_S3_MAX_ERROR_BODY     (16 * 1024)
/* Deepest element nesting an error body may have (S3's is 2). */
#define KV_S3_MAX_ERROR_DEPTH    8
/* The most bytes kept of each field. */
#define KV_S3_MAX_ERROR_FIELD    512

/* The fields of an S3 `<Error>` body. */
typedef struct
{
  char *code;         /* "NoSuchKey" */
  char *message;
  char *bucket;       /* <BucketName> */
  char *key;          /* <Key> */
  char *request_id;
} KvS3ErrorBody;

/* Parses an `<Error>` document of at most KV_S3_MAX_ERROR_BODY bytes;
 * FALSE (with @error) for anything else: not XML, another root element,
 * no `<Code>`, too deep, too long. */
gboolean  kv_s3_error_body_parse   (const char     *body,
                                    gsize           len,
                                    KvS3ErrorBody  *out,
                                    GError        **error);
void      kv_s3_error_body_clear   (KvS3ErrorBody  *body);

/* Replaces, in place, every byte of @s that is not printable ASCII with
 * '?': what a server sent reaches a message or a log only so. */
void      kv_s3_sanitize_text      (char           *s);

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (KvS3ErrorBody, kv_s3_error_body_clear)

/* The GError of a reply with HTTP @status to @method on @bucket/@key
 * (@key NULL: the bucket itself), from its body when there was one
 * (@body_len 0: none, as for HEAD). Its message names the request, the
 * status and the S3 error code, and the server's message. */
GError   *kv_s3_error_new_for_reply (guint           status,
                                     const char     *method,
                                     const char     *bucket,
                                     const char     *key,
                                     const char     *body,
                                     gsize           body_len);

/* Whether a request that failed with @error may succeed if sent again
 * (SlowDown, a server error). */
gboolean  kv_s3_error_is_transient (const GError   *error);

G_END_DECLS
