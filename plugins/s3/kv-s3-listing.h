/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* One page of a ListObjectsV2 reply (`GET /bucket?list-type=2`), parsed
 * within bounds, as the error bodies are (kv-s3-error.c). */

/* The most bytes of a page the client keeps and parses: a page of
 * KV_S3_LIST_MAX_KEYS objects is about 300 KiB on AWS. */
#define KV_S3_LIST_MAX_BODY    (1024 * 1024)
/* The objects a page is asked for (max-keys) and may hold. */
#define KV_S3_LIST_MAX_KEYS    1000
/* Deepest element nesting a page may have (S3's is 3). */
#define KV_S3_LIST_MAX_DEPTH   8
/* The longest object key or continuation token kept (S3's keys are at
 * most 1024 bytes); a longer one fails the page. */
#define KV_S3_LIST_MAX_FIELD   1024

typedef struct
{
  GPtrArray *keys;         /* char *: the objects' keys, in the page's order */
  GArray    *sizes;        /* gint64: their sizes (-1: not given) */
  gboolean   truncated;    /* <IsTruncated>true: there is a next page */
  char      *next_token;   /* <NextContinuationToken>, or NULL */
} KvS3ListPage;

gboolean  kv_s3_list_page_parse  (const char    *body,
                                  gsize          len,
                                  KvS3ListPage  *out,
                                  GError       **error);
void      kv_s3_list_page_clear  (KvS3ListPage  *page);

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (KvS3ListPage, kv_s3_list_page_clear)

G_END_DECLS
