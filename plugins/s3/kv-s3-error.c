/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-s3-error.h"

#include <string.h>

G_DEFINE_QUARK (kv-s3-error-quark, kv_s3_error)

typedef enum {
  FIELD_NONE,
  FIELD_CODE,
  FIELD_MESSAGE,
  FIELD_BUCKET,
  FIELD_KEY,
  FIELD_REQUEST_ID,
} Field;

typedef struct
{
  KvS3ErrorBody *out;
  guint          depth;
  gboolean       seen_root;
  Field          field;     /* the child of <Error> being read */
  GString       *text;
} ParseState;

static Field
field_for (const char *name)
{
  if (strcmp (name, "Code") == 0)
    return FIELD_CODE;
  if (strcmp (name, "Message") == 0)
    return FIELD_MESSAGE;
  if (strcmp (name, "BucketName") == 0)
    return FIELD_BUCKET;
  if (strcmp (name, "Key") == 0)
    return FIELD_KEY;
  if (strcmp (name, "RequestId") == 0)
    return FIELD_REQUEST_ID;
  return FIELD_NONE;
}

static void
start_element (GMarkupParseContext  *context,
               const char           *name,
               const char          **attribute_names,
               const char          **attribute_values,
               gpointer              user_data,
               GError              **error)
{
  ParseState *state = user_data;

  if (++state->depth > KV_S3_MAX_ERROR_DEPTH)
    {
      g_set_error (error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                   "elements nested deeper than %u", KV_S3_MAX_ERROR_DEPTH);
      return;
    }
  if (state->depth == 1)
    {
      if (strcmp (name, "Error") != 0)
        {
          g_set_error (error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                       "the root element is <%.64s>, not <Error>", name);
          return;
        }
      state->seen_root = TRUE;
    }
  else if (state->depth == 2)
    {
      state->field = field_for (name);
      g_string_truncate (state->text, 0);
    }
}

static void
set_field (char       **field,
           const char  *value)
{
  /* the first of a repeated element counts */
  if (*field == NULL)
    *field = g_strdup (value);
}

static void
end_element (GMarkupParseContext  *context,
             const char           *name,
             gpointer              user_data,
             GError              **error)
{
  ParseState *state = user_data;

  if (state->depth == 2 && state->field != FIELD_NONE)
    {
      const char *value = g_strstrip (state->text->str);

      switch (state->field)
        {
        case FIELD_CODE: set_field (&state->out->code, value); break;
        case FIELD_MESSAGE: set_field (&state->out->message, value); break;
        case FIELD_BUCKET: set_field (&state->out->bucket, value); break;
        case FIELD_KEY: set_field (&state->out->key, value); break;
        case FIELD_REQUEST_ID: set_field (&state->out->request_id, value); break;
        default: break;
        }
      state->field = FIELD_NONE;
    }
  state->depth--;
}

static void
text (GMarkupParseContext  *context,
      const char           *text,
      gsize                 text_len,
      gpointer              user_data,
      GError              **error)
{
  ParseState *state = user_data;
  gsize room;

  if (state->depth != 2 || state->field == FIELD_NONE)
    return;
  room = KV_S3_MAX_ERROR_FIELD - MIN (state->text->len, KV_S3_MAX_ERROR_FIELD);
  g_string_append_len (state->text, text, MIN (text_len, room));
}

static const GMarkupParser parser = {
  start_element, end_element, text, NULL, NULL,
};

void
kv_s3_error_body_clear (KvS3ErrorBody *body)
{
  g_clear_pointer (&body->code, g_free);
  g_clear_pointer (&body->message, g_free);
  g_clear_pointer (&body->bucket, g_free);
  g_clear_pointer (&body->key, g_free);
  g_clear_pointer (&body->request_id, g_free);
}

/* Only printable ASCII of a server's text reaches a message or a log:
 * any other byte of @s becomes '?', in place (the error body's fields,
 * a listing's, GMarkup's messages quoting refused bytes). */
void
kv_s3_sanitize_text (char *s)
{
  for (; s != NULL && *s != '\0'; s++)
    if (!g_ascii_isprint (*s))
      *s = '?';
}

gboolean
kv_s3_error_body_parse (const char     *body,
                        gsize           len,
                        KvS3ErrorBody  *out,
                        GError        **error)
{
  g_autoptr(GMarkupParseContext) context = NULL;
  g_autoptr(GError) local_error = NULL;
  ParseState state = { out, 0, FALSE, FIELD_NONE, NULL };
  gboolean ok;

  memset (out, 0, sizeof *out);
  if (len > KV_S3_MAX_ERROR_BODY)
    {
      g_set_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY,
                   "an error body of %" G_GSIZE_FORMAT " bytes (at most %u are read)",
                   len, KV_S3_MAX_ERROR_BODY);
      return FALSE;
    }
  state.text = g_string_sized_new (64);
  context = g_markup_parse_context_new (&parser, G_MARKUP_PREFIX_ERROR_POSITION, &state, NULL);
  ok = g_markup_parse_context_parse (context, body, len, &local_error) &&
       g_markup_parse_context_end_parse (context, &local_error);
  g_string_free (state.text, TRUE);
  if (ok && (!state.seen_root || out->code == NULL || out->code[0] == '\0'))
    {
      ok = FALSE;
      local_error = g_error_new (G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                                 state.seen_root ? "no <Code> in <Error>" : "no <Error> element");
    }
  if (!ok)
    {
      /* GMarkup quotes the bytes it refused, which need not be UTF-8 */
      kv_s3_sanitize_text (local_error->message);
      kv_s3_error_body_clear (out);
      g_set_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY, "not an S3 error body: %s",
                   local_error->message);
      return FALSE;
    }
  kv_s3_sanitize_text (out->code);
  kv_s3_sanitize_text (out->message);
  kv_s3_sanitize_text (out->bucket);
  kv_s3_sanitize_text (out->key);
  kv_s3_sanitize_text (out->request_id);
  return TRUE;
}

static KvS3Error
code_for (guint       status,
          const char *s3_code)
{
  static const struct { const char *name; KvS3Error code; } codes[] = {
    { "NoSuchBucket", KV_S3_ERROR_NO_SUCH_BUCKET },
    { "NoSuchKey", KV_S3_ERROR_NO_SUCH_KEY },
    { "InvalidAccessKeyId", KV_S3_ERROR_INVALID_ACCESS_KEY },
    { "SignatureDoesNotMatch", KV_S3_ERROR_SIGNATURE_MISMATCH },
    { "AccessDenied", KV_S3_ERROR_ACCESS_DENIED },
    { "SlowDown", KV_S3_ERROR_SLOW_DOWN },
    { "InternalError", KV_S3_ERROR_SERVER_ERROR },
    { "ServiceUnavailable", KV_S3_ERROR_SLOW_DOWN },
  };

  for (guint i = 0; s3_code != NULL && i < G_N_ELEMENTS (codes); i++)
    if (strcmp (s3_code, codes[i].name) == 0)
      return codes[i].code;
  switch (status)
    {
    case 403: return KV_S3_ERROR_ACCESS_DENIED;
    case 503: return KV_S3_ERROR_SLOW_DOWN;
    case 500:
    case 502:
    case 504: return KV_S3_ERROR_SERVER_ERROR;
    default: return KV_S3_ERROR_FAILED;
    }
}

/* What a body-less reply (HEAD) most likely meant. */
static const char *
code_name_for_status (guint       status,
                      const char *key)
{
  switch (status)
    {
    case 301: return "PermanentRedirect";
    case 400: return "BadRequest";
    case 403: return "Forbidden";
    case 404: return key != NULL ? "NotFound" : "NoSuchBucket";
    case 500: return "InternalError";
    case 503: return "SlowDown";
    default: return "Error";
    }
}

GError *
kv_s3_error_new_for_reply (guint       status,
                           const char *method,
                           const char *bucket,
                           const char *key,
                           const char *body,
                           gsize       body_len)
{
  g_auto(KvS3ErrorBody) parsed = { 0 };
  g_autoptr(GError) parse_error = NULL;
  g_autofree char *resource = key != NULL ? g_strdup_printf ("s3://%s/%s", bucket, key) :
                                            g_strdup_printf ("s3://%s", bucket);
  g_autofree char *detail = NULL;
  const char *code_name;
  KvS3Error code;

  if (body_len > 0 && !kv_s3_error_body_parse (body, body_len, &parsed, &parse_error))
    {
      /* the status still says what happened; the body is garbage */
      code = code_for (status, NULL);
      if (code == KV_S3_ERROR_FAILED)
        code = KV_S3_ERROR_BAD_REPLY;
      return g_error_new (KV_S3_ERROR, code, "S3 %s %s: HTTP %u with a body that is %s",
                          method, resource, status, parse_error->message);
    }
  code_name = parsed.code != NULL ? parsed.code : code_name_for_status (status, key);
  code = code_for (status, parsed.code != NULL ? parsed.code : (status == 404 && key == NULL ?
                                                                "NoSuchBucket" : NULL));
  if (status == 404 && parsed.code == NULL && key != NULL)
    code = KV_S3_ERROR_NO_SUCH_KEY;
  if (parsed.message != NULL && parsed.message[0] != '\0')
    detail = g_strdup_printf (": %s", parsed.message);
  return g_error_new (KV_S3_ERROR, code, "S3 %s %s: HTTP %u %s%s%s%s%s", method, resource, status,
                      code_name, detail != NULL ? detail : "",
                      parsed.request_id != NULL ? " (request " : "",
                      parsed.request_id != NULL ? parsed.request_id : "",
                      parsed.request_id != NULL ? ")" : "");
}

gboolean
kv_s3_error_is_transient (const GError *error)
{
  return g_error_matches (error, KV_S3_ERROR, KV_S3_ERROR_SLOW_DOWN) ||
         g_error_matches (error, KV_S3_ERROR, KV_S3_ERROR_SERVER_ERROR);
}
