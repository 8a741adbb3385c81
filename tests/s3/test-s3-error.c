/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <glib.h>

#include "kv-s3-error.h"

/* The s3 tier's reading of S3 error replies: the XML `<Error>` body parsed
 * (bounded in size, depth and field length) into a GError naming the
 * request's bucket and key, the HTTP status and the S3 error code; garbage
 * bodies, a body-less HEAD reply, and which errors are retried. The fuzz
 * target tests/fuzz/fuzz-s3-error.c runs the same parser on anything. */

static void
test_parse_aws_body (void)
{
  const char *body =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<Error><Code>NoSuchKey</Code><Message>The resource you requested does not exist</Message>"
    "<Key>kvtier/ab/cd</Key><BucketName>bkt</BucketName><RequestId>4442587FB7D0A2F9</RequestId>"
    "<HostId>x</HostId></Error>";
  g_auto(KvS3ErrorBody) parsed = { 0 };
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_s3_error_body_parse (body, strlen (body), &parsed, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (parsed.code, ==, "NoSuchKey");
  g_assert_cmpstr (parsed.message, ==, "The resource you requested does not exist");
  g_assert_cmpstr (parsed.key, ==, "kvtier/ab/cd");
  g_assert_cmpstr (parsed.bucket, ==, "bkt");
  g_assert_cmpstr (parsed.request_id, ==, "4442587FB7D0A2F9");
}

static void
test_error_for_reply (void)
{
  /* the Ceph RADOS Gateway's reply to a wrong secret */
  const char *rgw = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch"
                    "</Code><Message></Message><RequestId>tx0000d0069d6f047cb4f4-006b0f7853</RequestId>"
                    "<HostId>1013-default-default</HostId></Error>";
  const char *no_bucket = "<Error><Code>NoSuchBucket</Code><BucketName>gone</BucketName></Error>";
  const char *slow = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
  g_autoptr(GError) signature = kv_s3_error_new_for_reply (403, "GET", "bkt", "kvtier/k", rgw, strlen (rgw));
  g_autoptr(GError) bucket = kv_s3_error_new_for_reply (404, "GET", "gone", "kvtier/k", no_bucket,
                                                        strlen (no_bucket));
  g_autoptr(GError) slow_down = kv_s3_error_new_for_reply (503, "PUT", "bkt", "k", slow, strlen (slow));
  g_autoptr(GError) internal = kv_s3_error_new_for_reply (500, "PUT", "bkt", "k", NULL, 0);
  g_autoptr(GError) denied = kv_s3_error_new_for_reply (403, "PUT", "bkt", "k", "<Error><Code>AccessDenied</Code></Error>", 40);

  g_assert_error (signature, KV_S3_ERROR, KV_S3_ERROR_SIGNATURE_MISMATCH);
  g_assert_cmpstr (signature->message, ==,
                   "S3 GET s3://bkt/kvtier/k: HTTP 403 SignatureDoesNotMatch "
                   "(request tx0000d0069d6f047cb4f4-006b0f7853)");
  g_assert_error (bucket, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_BUCKET);
  g_assert_nonnull (strstr (bucket->message, "s3://gone/kvtier/k: HTTP 404 NoSuchBucket"));
  g_assert_error (slow_down, KV_S3_ERROR, KV_S3_ERROR_SLOW_DOWN);
  g_assert_cmpstr (slow_down->message, ==,
                   "S3 PUT s3://bkt/k: HTTP 503 SlowDown: Please reduce your request rate.");
  g_assert_true (kv_s3_error_is_transient (slow_down));
  g_assert_error (internal, KV_S3_ERROR, KV_S3_ERROR_SERVER_ERROR);
  g_assert_true (kv_s3_error_is_transient (internal));
  g_assert_error (denied, KV_S3_ERROR, KV_S3_ERROR_ACCESS_DENIED);
  g_assert_false (kv_s3_error_is_transient (denied));
  g_assert_false (kv_s3_error_is_transient (signature));
}

/* HEAD replies have no body: the status alone says what happened. */
static void
test_bodyless_replies (void)
{
  g_autoptr(GError) no_key = kv_s3_error_new_for_reply (404, "HEAD", "bkt", "k", NULL, 0);
  g_autoptr(GError) no_bucket = kv_s3_error_new_for_reply (404, "HEAD", "bkt", NULL, NULL, 0);
  g_autoptr(GError) forbidden = kv_s3_error_new_for_reply (403, "HEAD", "bkt", "k", NULL, 0);
  g_autoptr(GError) teapot = kv_s3_error_new_for_reply (418, "HEAD", "bkt", "k", NULL, 0);

  g_assert_error (no_key, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_KEY);
  g_assert_cmpstr (no_key->message, ==, "S3 HEAD s3://bkt/k: HTTP 404 NotFound");
  g_assert_error (no_bucket, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_BUCKET);
  g_assert_error (forbidden, KV_S3_ERROR, KV_S3_ERROR_ACCESS_DENIED);
  g_assert_error (teapot, KV_S3_ERROR, KV_S3_ERROR_FAILED);
}

static void
test_garbage_bodies (void)
{
  const char *cases[] = {
    "<html><body>Bad Gateway</body></html>",         /* another root */
    "<Error><Message>no code</Message></Error>",    /* no <Code> */
    "<Error><Code>X</Code>",                        /* cut short */
    "not xml at all",
    "<Error><Code>\xff\xfe</Code></Error>",         /* not UTF-8 */
    "<Error><Code>A</Code></Error><Error>",          /* two roots */
    "<!DOCTYPE x [<!ENTITY e SYSTEM \"file:///etc/passwd\">]><Error><Code>&e;</Code></Error>",
    "",
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_auto(KvS3ErrorBody) parsed = { 0 };
      g_autoptr(GError) error = NULL;
      g_autoptr(GError) reply = NULL;
      gsize len = strlen (cases[i]);

      g_assert_false (kv_s3_error_body_parse (cases[i], len, &parsed, &error));
      g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
      g_assert_null (parsed.code);
      /* GMarkup's message quotes the refused bytes: never raw into ours */
      g_assert_true (g_utf8_validate (error->message, -1, NULL));
      if (len == 0)
        continue;
      /* the status still decides: a 502 with an HTML page is retried */
      reply = kv_s3_error_new_for_reply (i == 0 ? 502 : 400, "GET", "bkt", "k", cases[i], len);
      {
        gint expected = i == 0 ? KV_S3_ERROR_SERVER_ERROR : KV_S3_ERROR_BAD_REPLY;

        g_assert_error (reply, KV_S3_ERROR, expected);
      }
      g_assert_nonnull (strstr (reply->message, "s3://bkt/k"));
      g_assert_nonnull (strstr (reply->message, "not an S3 error body"));
    }
}

static void
test_bounds (void)
{
  g_autoptr(GString) deep = g_string_new ("<Error><Code>C</Code>");
  g_autoptr(GString) long_field = g_string_new ("<Error><Code>");
  g_autoptr(GString) huge = g_string_new ("<Error><Code>C</Code><Message>");
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < KV_S3_MAX_ERROR_DEPTH; i++)
    g_string_append (deep, "<a>");
  for (guint i = 0; i < KV_S3_MAX_ERROR_DEPTH; i++)
    g_string_append (deep, "</a>");
  g_string_append (deep, "</Error>");
  {
    g_auto(KvS3ErrorBody) parsed = { 0 };

    g_assert_false (kv_s3_error_body_parse (deep->str, deep->len, &parsed, &error));
    g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
    g_assert_nonnull (strstr (error->message, "deeper"));
    g_clear_error (&error);
  }

  /* a field is kept to its bound, the rest read and dropped */
  for (guint i = 0; i < 4 * KV_S3_MAX_ERROR_FIELD; i++)
    g_string_append_c (long_field, 'x');
  g_string_append (long_field, "</Code><Key>k\x01</Key></Error>");
  {
    g_auto(KvS3ErrorBody) parsed = { 0 };

    g_assert_true (kv_s3_error_body_parse (long_field->str, long_field->len, &parsed, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (strlen (parsed.code), ==, KV_S3_MAX_ERROR_FIELD);
    /* control characters of a server never reach a message */
    g_assert_cmpstr (parsed.key, ==, "k?");
  }

  /* a body past the bound is not parsed */
  while (huge->len <= KV_S3_MAX_ERROR_BODY)
    g_string_append (huge, "yyyyyyyyyyyyyyyy");
  g_string_append (huge, "</Message></Error>");
  {
    g_auto(KvS3ErrorBody) parsed = { 0 };

    g_assert_false (kv_s3_error_body_parse (huge->str, huge->len, &parsed, &error));
    g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
  }
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/s3-error/parse-aws-body", test_parse_aws_body);
  g_test_add_func ("/s3-error/error-for-reply", test_error_for_reply);
  g_test_add_func ("/s3-error/bodyless-replies", test_bodyless_replies);
  g_test_add_func ("/s3-error/garbage-bodies", test_garbage_bodies);
  g_test_add_func ("/s3-error/bounds", test_bounds);
  return g_test_run ();
}
