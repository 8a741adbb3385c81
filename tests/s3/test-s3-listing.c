/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include "kv-chunk-name.h"
#include "kv-s3-error.h"
#include "kv-s3-listing.h"

/* What index-list-at-start reads (no gateway): ListObjectsV2 pages parsed
 * within their bounds, and chunk names read back into keys, exactly. */

static const char page_text[] =
  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
  "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
  "<Name>b</Name><Prefix>kvtier/ab/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
  "<IsTruncated>true</IsTruncated>"
  "<Contents><Key>kvtier/ab/00ff_g7</Key><LastModified>2026-12-02T19:00:00.000Z</LastModified>"
  "<ETag>&quot;x&quot;</ETag><Size>69632</Size><StorageClass>STANDARD</StorageClass></Contents>"
  "<Contents><Key>kvtier/ab/a&amp;b</Key><Size>3</Size>"
  "<Owner><ID>o</ID><DisplayName>o</DisplayName></Owner></Contents>"
  "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
  "</ListBucketResult>";

static void
test_page (void)
{
  g_auto(KvS3ListPage) page = { 0 };
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_s3_list_page_parse (page_text, strlen (page_text), &page, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (page.keys->len, ==, 2);
  g_assert_cmpstr (page.keys->pdata[0], ==, "kvtier/ab/00ff_g7");
  g_assert_cmpstr (page.keys->pdata[1], ==, "kvtier/ab/a&b");
  g_assert_cmpint (g_array_index (page.sizes, gint64, 0), ==, 69632);
  g_assert_cmpint (g_array_index (page.sizes, gint64, 1), ==, 3);
  g_assert_true (page.truncated);
  g_assert_cmpstr (page.next_token, ==, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

static void
test_last_page (void)
{
  const char *text = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                     "<Contents><Key>k</Key></Contents></ListBucketResult>";
  g_auto(KvS3ListPage) page = { 0 };
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_s3_list_page_parse (text, strlen (text), &page, &error));
  g_assert_no_error (error);
  g_assert_false (page.truncated);
  g_assert_null (page.next_token);
  g_assert_cmpuint (page.keys->len, ==, 1);
  /* no <Size>: -1, which no chunk record is */
  g_assert_cmpint (g_array_index (page.sizes, gint64, 0), ==, -1);
}

static void
assert_refused (const char *text,
                gssize      len,
                const char *says)
{
  g_auto(KvS3ListPage) page = { 0 };
  g_autoptr(GError) error = NULL;

  g_assert_false (kv_s3_list_page_parse (text, len < 0 ? strlen (text) : (gsize) len, &page, &error));
  g_assert_error (error, KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY);
  g_test_message ("%s", error->message);
  if (strstr (error->message, says) == NULL)
    g_error ("“%s” does not say “%s”", error->message, says);
  g_assert_null (page.keys);
  g_assert_null (page.next_token);
}

static void
test_refused (void)
{
  g_autoptr(GString) deep = g_string_new ("<ListBucketResult>");
  g_autoptr(GString) many = g_string_new ("<ListBucketResult>");
  g_autoptr(GString) long_key = g_string_new ("<ListBucketResult><Contents><Key>");
  g_autoptr(GString) huge = g_string_new ("<ListBucketResult>");

  assert_refused ("<Error><Code>AccessDenied</Code></Error>", -1, "not <ListBucketResult>");
  assert_refused ("not xml", -1, "not an S3 listing");
  assert_refused ("", 0, "not an S3 listing");
  assert_refused ("<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents></ListBucketResult>",
                  -1, "<Size> is not a number");
  assert_refused ("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", -1,
                  "without <NextContinuationToken>");
  for (guint i = 0; i < KV_S3_LIST_MAX_DEPTH; i++)
    g_string_append (deep, "<a>");
  assert_refused (deep->str, deep->len, "deeper than");
  for (guint i = 0; i <= KV_S3_LIST_MAX_KEYS; i++)
    g_string_append (many, "<Contents><Key>k</Key></Contents>");
  g_string_append (many, "</ListBucketResult>");
  assert_refused (many->str, many->len, "more than 1000 objects");
  for (guint i = 0; i <= KV_S3_LIST_MAX_FIELD; i++)
    g_string_append_c (long_key, 'k');
  g_string_append (long_key, "</Key></Contents></ListBucketResult>");
  assert_refused (long_key->str, long_key->len, "longer than 1024 bytes");
  while (huge->len <= KV_S3_LIST_MAX_BODY)
    g_string_append (huge, "<Name>padding padding padding</Name>");
  g_string_append (huge, "</ListBucketResult>");
  assert_refused (huge->str, huge->len, "at most 1048576 are read");
}

/* Every prefix of a page, and each byte of it flipped: refused or parsed,
 * never more than a page holds. */
static void
test_damaged_pages (void)
{
  gsize len = strlen (page_text);
  g_autofree char *copy = g_malloc (len);

  for (gsize cut = 0; cut < len; cut++)
    {
      g_auto(KvS3ListPage) page = { 0 };

      if (kv_s3_list_page_parse (page_text, cut, &page, NULL))
        g_assert_cmpuint (page.keys->len, <=, 2);
    }
  for (gsize at = 0; at < len; at++)
    {
      g_auto(KvS3ListPage) page = { 0 };

      memcpy (copy, page_text, len);
      copy[at] ^= 0x41;
      if (kv_s3_list_page_parse (copy, len, &page, NULL))
        g_assert_cmpuint (page.keys->len, <=, 2);
    }
}

static void
test_chunk_names (void)
{
  guint8 hash[KV_CHUNK_MAX_KEY_HASH_LEN];
  gsize hash_len = 0;
  guint32 group = 0;
  const char *refused[] = {
    "", "_g1", "0_g1", "0A_g1", "zz_g1", "00", "00_g", "00_g01", "00_g-1", "00_g1x",
    "00_g4294967296", "00_g99999999999", "00ff", "00_x1",
  };
  guint8 in[KV_CHUNK_MAX_KEY_HASH_LEN];

  /* names kv_chunk_name_for_key() writes read back to their key */
  for (guint len = 1; len <= KV_CHUNK_MAX_KEY_HASH_LEN; len += 37)
    for (guint g = 0; g < 3; g++)
      {
        guint32 groups[] = { 0, 7, G_MAXUINT32 };
        g_autoptr(KvKey) key = NULL;
        g_autofree char *name = NULL;

        for (guint i = 0; i < len; i++)
          in[i] = (guint8) (i * 31 + len);
        key = kv_key_new (in, len, groups[g]);
        name = kv_chunk_name_for_key ("p/", 2, key);
        g_assert_true (kv_chunk_name_parse (name + 2, hash, &hash_len, &group));
        g_assert_cmpuint (hash_len, ==, len);
        g_assert_cmpmem (hash, hash_len, in, len);
        g_assert_cmpuint (group, ==, groups[g]);
      }
  for (guint i = 0; i < G_N_ELEMENTS (refused); i++)
    if (kv_chunk_name_parse (refused[i], hash, &hash_len, &group))
      g_error ("“%s” read as a chunk name", refused[i]);
  /* a hash longer than a chunk record holds */
  {
    g_autoptr(GString) name = g_string_new (NULL);

    for (guint i = 0; i <= KV_CHUNK_MAX_KEY_HASH_LEN; i++)
      g_string_append (name, "ab");
    g_string_append (name, "_g1");
    g_assert_false (kv_chunk_name_parse (name->str, hash, &hash_len, &group));
  }
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/s3-listing/page", test_page);
  g_test_add_func ("/s3-listing/last-page", test_last_page);
  g_test_add_func ("/s3-listing/refused", test_refused);
  g_test_add_func ("/s3-listing/damaged-pages", test_damaged_pages);
  g_test_add_func ("/s3-listing/chunk-names", test_chunk_names);
  return g_test_run ();
}
