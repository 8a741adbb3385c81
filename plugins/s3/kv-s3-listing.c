/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-s3-listing.h"

#include <string.h>

#include "kv-s3-error.h"

typedef enum {
  FIELD_NONE,
  FIELD_KEY,           /* <Contents><Key> */
  FIELD_SIZE,          /* <Contents><Size> */
  FIELD_TRUNCATED,     /* <IsTruncated> */
  FIELD_TOKEN,         /* <NextContinuationToken> */
} Field;

typedef struct
{
  KvS3ListPage *out;
  guint         depth;
  gboolean      seen_root;
  gboolean      in_contents;
  Field         field;
  GString      *text;
  char         *key;        /* of the <Contents> being read */
  gint64        size;
} ParseState;

static void
start_element (GMarkupParseContext  *context,
               const char           *name,
               const char          **attribute_names,
               const char          **attribute_values,
               gpointer              user_data,
               GError              **error)
{
  ParseState *state = user_data;

  if (++state->depth > KV_S3_LIST_MAX_DEPTH)
    {
      g_set_error (error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                   "elements nested deeper than %u", KV_S3_LIST_MAX_DEPTH);
      return;
    }
  state->field = FIELD_NONE;
  g_string_truncate (state->text, 0);
  if (state->depth == 1)
    {
      if (strcmp (name, "ListBucketResult") != 0)
        {
          g_set_error (error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                       "the root element is <%.64s>, not <ListBucketResult>", name);
          return;
        }
      state->seen_root = TRUE;
    }
  else if (state->depth == 2)
    {
      if (strcmp (name, "Contents") == 0)
        {
          if (state->out->keys->len >= KV_S3_LIST_MAX_KEYS)
            {
              g_set_error (error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                           "more than %u objects in a page", KV_S3_LIST_MAX_KEYS);
              return;
            }
          state->in_contents = TRUE;
          g_clear_pointer (&state->key, g_free);
          state->size = -1;
        }
      else if (strcmp (name, "IsTruncated") == 0)
        state->field = FIELD_TRUNCATED;
      else if (strcmp (name, "NextContinuationToken") == 0)
        state->field = FIELD_TOKEN;
    }
  else if (state->depth == 3 && state->in_contents)
    {
      if (strcmp (name, "Key") == 0)
        state->field = FIELD_KEY;
      else if (strcmp (name, "Size") == 0)
        state->field = FIELD_SIZE;
    }
}

static void
end_element (GMarkupParseContext  *context,
             const char           *name,
             gpointer              user_data,
             GError              **error)
{
  ParseState *state = user_data;
  const char *value = state->text->str;

  switch (state->field)
    {
    case FIELD_KEY:
      /* the first of a repeated element counts */
      if (state->key == NULL)
        state->key = g_strdup (value);
      break;
    case FIELD_SIZE:
      {
        guint64 size = 0;

        if (!g_ascii_string_to_unsigned (g_strstrip (state->text->str), 10, 0, G_MAXINT64,
                                         &size, NULL))
          {
            g_set_error (error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                         "an object's <Size> is not a number");
            return;
          }
        state->size = (gint64) size;
      }
      break;
    case FIELD_TRUNCATED:
      state->out->truncated = strcmp (g_strstrip (state->text->str), "true") == 0;
      break;
    case FIELD_TOKEN:
      if (state->out->next_token == NULL)
        state->out->next_token = g_strdup (value);
      break;
    default:
      break;
    }
  state->field = FIELD_NONE;
  if (state->depth == 2 && state->in_contents)
    {
      state->in_contents = FALSE;
      if (state->key != NULL)
        {
          g_ptr_array_add (state->out->keys, g_steal_pointer (&state->key));
          g_array_append_val (state->out->sizes, state->size);
        }
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

  if (state->field == FIELD_NONE)
    return;
  /* a key or token cut short would name another object: refused */
  if (state->text->len + text_len > KV_S3_LIST_MAX_FIELD)
    {
      g_set_error (error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                   "a field longer than %u bytes", KV_S3_LIST_MAX_FIELD);
      return;
    }
  g_string_append_len (state->text, text, text_len);
}

static const GMarkupParser parser = {
  start_element, end_element, text, NULL, NULL,
};

void
kv_s3_list_page_clear (KvS3ListPage *page)
{
  g_clear_pointer (&page->keys, g_ptr_array_unref);
  g_clear_pointer (&page->sizes, g_array_unref);
  g_clear_pointer (&page->next_token, g_free);
  page->truncated = FALSE;
}

/* Parses a `<ListBucketResult>` page of at most KV_S3_LIST_MAX_BODY bytes
 * and KV_S3_LIST_MAX_KEYS objects; FALSE (with @error, KV_S3_ERROR_BAD_REPLY)
 * for anything else: not XML, another root, too deep, a field too long, a
 * size that is not a number, a truncated page without a continuation
 * token. */
gboolean
kv_s3_list_page_parse (const char    *body,
                       gsize          len,
                       KvS3ListPage  *out,
                       GError       **error)
{
  g_autoptr(GMarkupParseContext) context = NULL;
  g_autoptr(GError) local_error = NULL;
  ParseState state = { out, 0, FALSE, FALSE, FIELD_NONE, NULL, NULL, -1 };
  gboolean ok;

  memset (out, 0, sizeof *out);
  out->keys = g_ptr_array_new_with_free_func (g_free);
  out->sizes = g_array_new (FALSE, FALSE, sizeof (gint64));
  if (len > KV_S3_LIST_MAX_BODY)
    {
      kv_s3_list_page_clear (out);
      g_set_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY,
                   "a listing page of %" G_GSIZE_FORMAT " bytes (at most %u are read)",
                   len, KV_S3_LIST_MAX_BODY);
      return FALSE;
    }
  state.text = g_string_sized_new (256);
  context = g_markup_parse_context_new (&parser, G_MARKUP_PREFIX_ERROR_POSITION, &state, NULL);
  ok = g_markup_parse_context_parse (context, body, len, &local_error) &&
       g_markup_parse_context_end_parse (context, &local_error);
  g_string_free (state.text, TRUE);
  g_free (state.key);
  if (ok && !state.seen_root)
    {
      ok = FALSE;
      local_error = g_error_new (G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                                 "no <ListBucketResult> element");
    }
  if (ok && out->truncated && (out->next_token == NULL || out->next_token[0] == '\0'))
    {
      ok = FALSE;
      local_error = g_error_new (G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT,
                                 "a truncated page without <NextContinuationToken>");
    }
  if (!ok)
    {
      /* GMarkup quotes the bytes it refused, which need not be UTF-8 */
      kv_s3_sanitize_text (local_error->message);
      kv_s3_list_page_clear (out);
      g_set_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY, "not an S3 listing: %s",
                   local_error->message);
      return FALSE;
    }
  return TRUE;
}
