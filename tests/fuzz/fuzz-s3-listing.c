/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* The s3 tier's listing pages (plugins/s3/kv-s3-listing.c, what
 * index-list-at-start reads) on arbitrary bytes from a server, and the
 * chunk names in them (kv_chunk_name_parse()).
 *
 * The parser either refuses the page, leaving nothing behind, or returns
 * at most KV_S3_LIST_MAX_KEYS keys, each within its bound, with a size
 * each, and a continuation token when the page says it is truncated; a
 * name read as a chunk's is written back the same by
 * kv_chunk_name_for_key(). */

#include "config.h"

#include "fuzz-common.h"

#include "kv-chunk-name.h"
#include "kv-s3-error.h"
#include "kv-s3-listing.h"

#include <string.h>

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

static void
check_name (const char *name)
{
  guint8 hash[KV_CHUNK_MAX_KEY_HASH_LEN];
  gsize hash_len = 0;
  guint32 group = 0;
  g_autoptr(KvKey) key = NULL;
  g_autofree char *again = NULL;

  if (!kv_chunk_name_parse (name, hash, &hash_len, &group))
    return;
  g_assert_cmpuint (hash_len, >, 0);
  g_assert_cmpuint (hash_len, <=, KV_CHUNK_MAX_KEY_HASH_LEN);
  key = kv_key_new (hash, hash_len, group);
  again = kv_chunk_name_for_key ("", 0, key);
  g_assert_cmpstr (again, ==, name);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_auto(KvS3ListPage) page = { 0 };
  g_autoptr(GError) error = NULL;
  g_autofree char *name = g_strndup ((const char *) data, MIN (size, 4096));

  check_name (name);
  if (!kv_s3_list_page_parse ((const char *) data, size, &page, &error))
    {
      g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
      g_assert_null (page.keys);
      g_assert_null (page.next_token);
      return 0;
    }
  g_assert_no_error (error);
  g_assert_cmpuint (page.keys->len, <=, KV_S3_LIST_MAX_KEYS);
  g_assert_cmpuint (page.sizes->len, ==, page.keys->len);
  for (guint i = 0; i < page.keys->len; i++)
    {
      g_assert_cmpuint (strlen (page.keys->pdata[i]), <=, KV_S3_LIST_MAX_FIELD);
      check_name (page.keys->pdata[i]);
    }
  if (page.truncated)
    {
      g_assert_nonnull (page.next_token);
      g_assert_cmpuint (strlen (page.next_token), >, 0);
    }
  return 0;
}
