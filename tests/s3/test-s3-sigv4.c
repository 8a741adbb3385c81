/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <glib.h>

#include "kv-s3-sigv4.h"

/* The s3 tier's AWS Signature Version 4 against AWS's published examples.
 * The facts below (credentials, dates, requests, and the expected
 * signatures, digests and keys) are those of:
 *  - AWS's "Signature Version 4 test suite" (aws-sig-v4-test-suite:
 *    get-vanilla, get-vanilla-query-order-key-case,
 *    get-vanilla-empty-query-key, get-utf8), credentials AKIDEXAMPLE,
 *    service "service", 2015-08-30 12:36:00 UTC;
 *  - the signing-key derivation and IAM ListUsers example of the
 *    "Signature Version 4 signing process" pages;
 *  - the four examples of "Authenticating Requests: Using the
 *    Authorization Header (AWS Signature Version 4)" in the Amazon S3 API
 *    reference (GET Object with a Range, PUT Object, GET Bucket lifecycle,
 *    GET Bucket list), credentials AKIAIOSFODNN7EXAMPLE, 2013-05-24.
 * Their signing against the real gateway is in test-s3-client. */

#define SUITE_ACCESS "AKIDEXAMPLE"
#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_DATE   "20150830T123600Z"
#define SUITE_HOST   "example.amazonaws.com"

#define S3_ACCESS    "AKIAIOSFODNN7EXAMPLE"
#define S3_SECRET    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define S3_DATE      "20130524T000000Z"
#define S3_HOST      "examplebucket.s3.amazonaws.com"

static char *
sign (const char       *access,
      const char       *secret,
      const char       *service,
      const char       *method,
      const char       *path,
      const char       *query,
      const KvS3Header *headers,
      guint             n_headers,
      const char       *payload_hash,
      const char       *amz_date)
{
  KvS3Signer signer;
  g_autofree char *uri = kv_s3_uri_encode (path, FALSE);
  g_autofree char *canonical_query = kv_s3_canonical_query (query);
  char *authorization;

  kv_s3_signer_init (&signer, access, secret, "us-east-1", service);
  authorization = kv_s3_signer_authorization (&signer, method, uri, canonical_query, headers,
                                              n_headers, payload_hash, amz_date);
  kv_s3_signer_clear (&signer);
  return authorization;
}

static const char *
signature_of (const char *authorization)
{
  const char *s = strstr (authorization, "Signature=");

  g_assert_nonnull (s);
  return s + strlen ("Signature=");
}

static void
test_signing_key (void)
{
  guint8 key[32];
  g_autofree char *hex = NULL;
  GString *s = g_string_new (NULL);

  kv_s3_signing_key (SUITE_SECRET, "20150830", "us-east-1", "iam", key);
  for (guint i = 0; i < 32; i++)
    g_string_append_printf (s, "%02x", key[i]);
  hex = g_string_free (s, FALSE);
  g_assert_cmpstr (hex, ==, "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");

  /* the IAM example's string to sign, signed with that key */
  {
    g_autoptr(GHmac) hmac = g_hmac_new (G_CHECKSUM_SHA256, key, sizeof key);
    const char *to_sign = "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/iam/aws4_request\n"
                          "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59";

    g_hmac_update (hmac, (const guchar *) to_sign, strlen (to_sign));
    g_assert_cmpstr (g_hmac_get_string (hmac), ==,
                     "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
  }
}

static void
test_suite_get_vanilla (void)
{
  const KvS3Header headers[] = { { "Host", SUITE_HOST }, { "X-Amz-Date", SUITE_DATE } };
  g_autofree char *signed_headers = NULL;
  g_autofree char *request = kv_s3_canonical_request ("GET", "/", "", headers, 2, KV_S3_EMPTY_SHA256,
                                                      &signed_headers);
  g_autofree char *to_sign = kv_s3_string_to_sign (SUITE_DATE, "20150830/us-east-1/service/aws4_request",
                                                   request);
  g_autofree char *authorization = sign (SUITE_ACCESS, SUITE_SECRET, "service", "GET", "/", "",
                                         headers, 2, KV_S3_EMPTY_SHA256, SUITE_DATE);

  g_assert_cmpstr (request, ==,
                   "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                   "host;x-amz-date\n" KV_S3_EMPTY_SHA256);
  g_assert_cmpstr (signed_headers, ==, "host;x-amz-date");
  g_assert_cmpstr (to_sign, ==,
                   "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
                   "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  g_assert_cmpstr (authorization, ==,
                   "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                   "SignedHeaders=host;x-amz-date, "
                   "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

static void
test_suite_queries_and_utf8 (void)
{
  const KvS3Header headers[] = { { "Host", SUITE_HOST }, { "X-Amz-Date", SUITE_DATE } };
  g_autofree char *query = kv_s3_canonical_query ("Param2=value2&Param1=value1");
  g_autofree char *order = sign (SUITE_ACCESS, SUITE_SECRET, "service", "GET", "/",
                                 "Param2=value2&Param1=value1", headers, 2, KV_S3_EMPTY_SHA256,
                                 SUITE_DATE);
  g_autofree char *empty_key = sign (SUITE_ACCESS, SUITE_SECRET, "service", "GET", "/",
                                     "Param1=value1", headers, 2, KV_S3_EMPTY_SHA256, SUITE_DATE);
  g_autofree char *utf8_path = kv_s3_uri_encode ("/\xe1\x88\xb4", FALSE);
  g_autofree char *utf8 = sign (SUITE_ACCESS, SUITE_SECRET, "service", "GET", "/\xe1\x88\xb4", "",
                                headers, 2, KV_S3_EMPTY_SHA256, SUITE_DATE);

  /* get-vanilla-query-order-key-case: sorted by name before signing */
  g_assert_cmpstr (query, ==, "Param1=value1&Param2=value2");
  g_assert_cmpstr (signature_of (order), ==,
                   "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
  g_assert_cmpstr (signature_of (empty_key), ==,
                   "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb");
  /* get-utf8: U+1234 is the bytes E1 88 B4, each encoded */
  g_assert_cmpstr (utf8_path, ==, "/%E1%88%B4");
  g_assert_cmpstr (signature_of (utf8), ==,
                   "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

static void
test_s3_get_object (void)
{
  const KvS3Header headers[] = {
    { "Host", S3_HOST }, { "Range", "bytes=0-9" },
    { "x-amz-content-sha256", KV_S3_EMPTY_SHA256 }, { "x-amz-date", S3_DATE },
  };
  g_autofree char *authorization = sign (S3_ACCESS, S3_SECRET, "s3", "GET", "/test.txt", "",
                                         headers, G_N_ELEMENTS (headers), KV_S3_EMPTY_SHA256, S3_DATE);

  g_assert_cmpstr (authorization, ==,
                   "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                   "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                   "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

static void
test_s3_put_object (void)
{
  const char *body = "Welcome to Amazon S3.";
  g_autofree char *payload_hash = kv_s3_sha256_hex (body, strlen (body));
  const KvS3Header headers[] = {
    /* out of order and in mixed case: canonicalization sorts and folds */
    { "X-Amz-Storage-Class", "REDUCED_REDUNDANCY" }, { "Host", S3_HOST },
    { "Date", "Fri, 24 May 2013 00:00:00 GMT" }, { "x-amz-date", S3_DATE },
    { "x-amz-content-sha256", payload_hash },
  };
  g_autofree char *uri = kv_s3_uri_encode ("/test$file.text", FALSE);
  g_autofree char *request = kv_s3_canonical_request ("PUT", uri, "", headers, G_N_ELEMENTS (headers),
                                                      payload_hash, NULL);
  g_autofree char *to_sign = kv_s3_string_to_sign (S3_DATE, "20130524/us-east-1/s3/aws4_request",
                                                   request);
  g_autofree char *authorization = sign (S3_ACCESS, S3_SECRET, "s3", "PUT", "/test$file.text", "",
                                         headers, G_N_ELEMENTS (headers), payload_hash, S3_DATE);

  g_assert_cmpstr (payload_hash, ==, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  g_assert_cmpstr (uri, ==, "/test%24file.text");
  g_assert_cmpstr (request, ==,
                   "PUT\n/test%24file.text\n\n"
                   "date:Fri, 24 May 2013 00:00:00 GMT\n"
                   "host:examplebucket.s3.amazonaws.com\n"
                   "x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
                   "x-amz-date:20130524T000000Z\n"
                   "x-amz-storage-class:REDUCED_REDUNDANCY\n\n"
                   "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
                   "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  g_assert_cmpstr (to_sign, ==,
                   "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                   "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  g_assert_cmpstr (authorization, ==,
                   "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
                   "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, "
                   "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

static void
test_s3_bucket_queries (void)
{
  const KvS3Header headers[] = {
    { "Host", S3_HOST }, { "x-amz-content-sha256", KV_S3_EMPTY_SHA256 }, { "x-amz-date", S3_DATE },
  };
  g_autofree char *lifecycle_query = kv_s3_canonical_query ("lifecycle");
  g_autofree char *request = kv_s3_canonical_request ("GET", "/", lifecycle_query, headers, 3,
                                                      KV_S3_EMPTY_SHA256, NULL);
  g_autofree char *to_sign = kv_s3_string_to_sign (S3_DATE, "20130524/us-east-1/s3/aws4_request",
                                                   request);
  g_autofree char *lifecycle = sign (S3_ACCESS, S3_SECRET, "s3", "GET", "/", "lifecycle",
                                     headers, 3, KV_S3_EMPTY_SHA256, S3_DATE);
  g_autofree char *list = sign (S3_ACCESS, S3_SECRET, "s3", "GET", "/", "max-keys=2&prefix=J",
                                headers, 3, KV_S3_EMPTY_SHA256, S3_DATE);

  /* a sub-resource without a value signs as "name=" */
  g_assert_cmpstr (lifecycle_query, ==, "lifecycle=");
  g_assert_true (g_str_has_suffix (to_sign, "\n9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca"));
  g_assert_cmpstr (signature_of (lifecycle), ==,
                   "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
  g_assert_cmpstr (signature_of (list), ==,
                   "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

/* Names and values given apart: a value may hold '&' and '=' (a prefix, a
 * continuation token), which the raw form would split; empty names are
 * dropped, a NULL value signs as "". */
static void
test_canonical_query_pairs (void)
{
  const char *pairs[] = {
    "prefix", "a&b=c/d", "list-type", "2", "", "ignored", "continuation-token", "t=1+/&", NULL,
  };
  const char *flag[] = { "lifecycle", NULL, NULL };
  g_autofree char *query = kv_s3_canonical_query_pairs (pairs);
  g_autofree char *flag_query = kv_s3_canonical_query_pairs (flag);
  g_autofree char *none = kv_s3_canonical_query_pairs (NULL);
  g_autofree char *raw = kv_s3_canonical_query ("max-keys=2&prefix=J");
  const char *same[] = { "prefix", "J", "max-keys", "2", NULL };
  g_autofree char *from_pairs = kv_s3_canonical_query_pairs (same);

  g_assert_cmpstr (query, ==, "continuation-token=t%3D1%2B%2F%26&list-type=2&prefix=a%26b%3Dc%2Fd");
  g_assert_cmpstr (flag_query, ==, "lifecycle=");
  g_assert_cmpstr (none, ==, "");
  g_assert_cmpstr (raw, ==, from_pairs);
}

static void
test_canonical_forms (void)
{
  const KvS3Header headers[] = {
    { "My-Header1", "  a   b  c " }, { "host", "h" }, { "my-header1", "second" },
  };
  g_autofree char *signed_headers = NULL;
  g_autofree char *request = kv_s3_canonical_request ("GET", "/", "", headers, 3, "x",
                                                      &signed_headers);
  g_autofree char *space = kv_s3_uri_encode ("/a b+c%/d", FALSE);
  g_autofree char *slash = kv_s3_uri_encode ("a/b=c&d", TRUE);
  g_autofree char *unreserved = kv_s3_uri_encode ("AZaz09-_.~", TRUE);
  char date[KV_S3_AMZ_DATE_LEN];

  /* values trimmed and folded; one name, values in the order given */
  g_assert_cmpstr (request, ==, "GET\n/\n\nhost:h\nmy-header1:a b c,second\n\nhost;my-header1\nx");
  g_assert_cmpstr (signed_headers, ==, "host;my-header1");
  g_assert_cmpstr (space, ==, "/a%20b%2Bc%25/d");
  g_assert_cmpstr (slash, ==, "a%2Fb%3Dc%26d");
  g_assert_cmpstr (unreserved, ==, "AZaz09-_.~");
  kv_s3_amz_date (1369353600, date);
  g_assert_cmpstr (date, ==, S3_DATE);
}

/* A signer caches its key for a day: a request of the next day must be
 * signed with the next day's key, not the cached one. */
static void
test_key_cache_follows_the_date (void)
{
  const KvS3Header headers[] = { { "Host", SUITE_HOST }, { "X-Amz-Date", SUITE_DATE } };
  const KvS3Header next_headers[] = { { "Host", SUITE_HOST }, { "X-Amz-Date", "20150831T123600Z" } };
  KvS3Signer signer;
  g_autofree char *first = NULL;
  g_autofree char *next = NULL;
  g_autofree char *fresh = sign (SUITE_ACCESS, SUITE_SECRET, "service", "GET", "/", "",
                                 next_headers, 2, KV_S3_EMPTY_SHA256, "20150831T123600Z");

  kv_s3_signer_init (&signer, SUITE_ACCESS, SUITE_SECRET, "us-east-1", "service");
  first = kv_s3_signer_authorization (&signer, "GET", "/", "", headers, 2, KV_S3_EMPTY_SHA256,
                                      SUITE_DATE);
  next = kv_s3_signer_authorization (&signer, "GET", "/", "", next_headers, 2, KV_S3_EMPTY_SHA256,
                                     "20150831T123600Z");
  kv_s3_signer_clear (&signer);
  g_assert_cmpstr (signature_of (first), ==,
                   "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  g_assert_cmpstr (next, ==, fresh);
  g_assert_nonnull (strstr (next, "/20150831/"));
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/s3-sigv4/signing-key", test_signing_key);
  g_test_add_func ("/s3-sigv4/suite/get-vanilla", test_suite_get_vanilla);
  g_test_add_func ("/s3-sigv4/suite/queries-and-utf8", test_suite_queries_and_utf8);
  g_test_add_func ("/s3-sigv4/s3/get-object", test_s3_get_object);
  g_test_add_func ("/s3-sigv4/s3/put-object", test_s3_put_object);
  g_test_add_func ("/s3-sigv4/s3/bucket-queries", test_s3_bucket_queries);
  g_test_add_func ("/s3-sigv4/canonical-forms", test_canonical_forms);
  g_test_add_func ("/s3-sigv4/canonical-query-pairs", test_canonical_query_pairs);
  g_test_add_func ("/s3-sigv4/key-cache-follows-the-date", test_key_cache_follows_the_date);
  return g_test_run ();
}
