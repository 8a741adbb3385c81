/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* AWS Signature Version 4 (header-based, AWS4-HMAC-SHA256), with GLib's
 * GChecksum and GHmac: the canonical request, the string to sign, the
 * derived signing key and the Authorization header, as AWS's
 * "Signature Version 4 signing process" and "Authenticating Requests
 * (AWS Signature Version 4)" for S3 describe them. */

#define KV_S3_SHA256_HEX_LEN   64
/* SHA-256 of no bytes: the payload hash of a request without a body */
#define KV_S3_EMPTY_SHA256     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* the payload hash of a body that is not hashed (S3 only) */
#define KV_S3_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
/* "YYYYMMDDTHHMMSSZ" and its NUL */
#define KV_S3_AMZ_DATE_LEN     17

typedef struct
{
  const char *name;    /* any case: canonicalized to lower case */
  const char *value;   /* trimmed, inner runs of spaces folded */
} KvS3Header;

/* What a signing key is derived from; the key is cached for its date. */
typedef struct
{
  char   *access_key;
  char   *secret_key;
  char   *region;
  char   *service;
  char    key_date[9];   /* YYYYMMDD of key, "" before the first */
  guint8  key[32];
} KvS3Signer;

void   kv_s3_signer_init           (KvS3Signer        *signer,
                                    const char        *access_key,
                                    const char        *secret_key,
                                    const char        *region,
                                    const char        *service);
void   kv_s3_signer_clear          (KvS3Signer        *signer);

/* The Authorization header's value for a request made at @amz_date. The
 * headers must include every header to be signed (host, x-amz-date,
 * x-amz-content-sha256, x-amz-security-token...), and only those. */
char  *kv_s3_signer_authorization (KvS3Signer        *signer,
                                    const char        *method,
                                    const char        *canonical_uri,
                                    const char        *canonical_query,
                                    const KvS3Header  *headers,
                                    guint              n_headers,
                                    const char        *payload_hash,
                                    const char        *amz_date);

/* "YYYYMMDDTHHMMSSZ" of @unix_seconds (UTC) into @out. */
void   kv_s3_amz_date              (gint64             unix_seconds,
                                    char               out[KV_S3_AMZ_DATE_LEN]);

/* The steps, for the tests against AWS's published examples. */
char  *kv_s3_uri_encode            (const char        *text,
                                    gboolean           encode_slash);
char  *kv_s3_canonical_query       (const char        *query);
/* Of @pairs: name, value, name, value..., NULL (not encoded; a value may
 * hold '&' and '='). */
char  *kv_s3_canonical_query_pairs (const char * const *pairs);
char  *kv_s3_canonical_request     (const char        *method,
                                    const char        *canonical_uri,
                                    const char        *canonical_query,
                                    const KvS3Header  *headers,
                                    guint              n_headers,
                                    const char        *payload_hash,
                                    char             **out_signed_headers);
char  *kv_s3_string_to_sign        (const char        *amz_date,
                                    const char        *scope,
                                    const char        *canonical_request);
void   kv_s3_signing_key           (const char        *secret_key,
                                    const char        *date,
                                    const char        *region,
                                    const char        *service,
                                    guint8             key[32]);
char  *kv_s3_sha256_hex            (const void        *data,
                                    gsize              len);

G_END_DECLS
