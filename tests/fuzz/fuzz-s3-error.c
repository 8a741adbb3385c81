/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* The s3 tier's error replies (plugins/s3/kv-s3-error.c) on arbitrary
 * bytes from a server. The input's first byte picks the HTTP status (of a
 * table of those S3 sends), the rest is the reply's body.
 *
 * The `<Error>` parser either refuses the body or returns a code that is
 * not empty, with every field within its bound and printable ASCII only
 * (a server's bytes reach messages and logs); the GError built for the
 * reply is always of KV_S3_ERROR and always names the request's bucket and
 * key; a body the parser accepts gives the same code whatever status came
 * with it unless the code is unknown. */

#include "config.h"

#include "fuzz-common.h"

#include "kv-s3-error.h"

#include <string.h>

static const guint statuses[] = { 200, 301, 400, 403, 404, 409, 416, 500, 502, 503, 504, 999 };

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

static void
check_field (const char *field)
{
  if (field == NULL)
    return;
  g_assert_cmpuint (strlen (field), <=, KV_S3_MAX_ERROR_FIELD);
  for (const char *p = field; *p != '\0'; p++)
    g_assert_true (g_ascii_isprint (*p));
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_auto(KvS3ErrorBody) parsed = { 0 };
  g_autoptr(GError) parse_error = NULL;
  g_autoptr(GError) reply = NULL;
  const char *body;
  gsize len;
  guint status;

  if (size == 0)
    return 0;
  status = statuses[data[0] % G_N_ELEMENTS (statuses)];
  body = (const char *) data + 1;
  len = size - 1;

  if (kv_s3_error_body_parse (body, len, &parsed, &parse_error))
    {
      g_assert_no_error (parse_error);
      g_assert_nonnull (parsed.code);
      g_assert_cmpuint (strlen (parsed.code), >, 0);
      check_field (parsed.code);
      check_field (parsed.message);
      check_field (parsed.bucket);
      check_field (parsed.key);
      check_field (parsed.request_id);
    }
  else
    {
      g_assert_error (parse_error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
      g_assert_null (parsed.code);
    }

  reply = kv_s3_error_new_for_reply (status, "GET", "bkt", "pre/fix/key", len > 0 ? body : NULL, len);
  g_assert_nonnull (reply);
  g_assert_true (reply->domain == KV_S3_ERROR);
  g_assert_nonnull (strstr (reply->message, "S3 GET s3://bkt/pre/fix/key: HTTP "));
  g_assert_true (g_utf8_validate (reply->message, -1, NULL));
  return 0;
}
