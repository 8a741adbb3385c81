/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-s3-sigv4.h"

#include <string.h>

#define ALGORITHM "AWS4-HMAC-SHA256"

static const char hex_digits[] = "0123456789abcdef";

static void
to_hex (const guint8 *bytes,
        gsize         len,
        char         *out)
{
  for (gsize i = 0; i < len; i++)
    {
      out[2 * i] = hex_digits[bytes[i] >> 4];
      out[2 * i + 1] = hex_digits[bytes[i] & 15];
    }
  out[2 * len] = '\0';
}

char *
kv_s3_sha256_hex (const void *data,
                  gsize       len)
{
  return g_compute_checksum_for_data (G_CHECKSUM_SHA256, data, len);
}

static void
hmac_sha256 (const guint8 *key,
             gsize         key_len,
             const char   *data,
             guint8        out[32])
{
  g_autoptr(GHmac) hmac = g_hmac_new (G_CHECKSUM_SHA256, key, key_len);
  gsize len = 32;

  g_hmac_update (hmac, (const guchar *) data, strlen (data));
  g_hmac_get_digest (hmac, out, &len);
  g_assert (len == 32);
}

/* RFC 3986 unreserved characters stay, every other byte is %XX (upper-case
 * hex); '/' stays in paths. */
char *
kv_s3_uri_encode (const char *text,
                  gboolean    encode_slash)
{
  GString *s = g_string_sized_new (strlen (text) + 8);

  for (const guchar *p = (const guchar *) text; *p != '\0'; p++)
    {
      if (g_ascii_isalnum (*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' ||
          (*p == '/' && !encode_slash))
        g_string_append_c (s, *p);
      else
        g_string_append_printf (s, "%%%02X", *p);
    }
  return g_string_free (s, FALSE);
}

typedef struct
{
  char *name;
  char *value;
} Pair;

static int
compare_pairs (gconstpointer a,
               gconstpointer b)
{
  const Pair *x = a;
  const Pair *y = b;
  int c = strcmp (x->name, y->name);

  return c != 0 ? c : strcmp (x->value, y->value);
}

/* Pairs' names and values (not encoded) → "a=1&b=2&flag=": each encoded,
 * then sorted by name and value. */
char *
kv_s3_canonical_query_pairs (const char * const *pairs)
{
  g_autoptr(GArray) sorted = g_array_new (FALSE, FALSE, sizeof (Pair));
  GString *s;

  for (guint i = 0; pairs != NULL && pairs[i] != NULL; i += 2)
    {
      Pair pair;

      if (pairs[i][0] == '\0')
        continue;
      pair.name = kv_s3_uri_encode (pairs[i], TRUE);
      pair.value = kv_s3_uri_encode (pairs[i + 1] != NULL ? pairs[i + 1] : "", TRUE);
      g_array_append_val (sorted, pair);
    }
  g_array_sort (sorted, compare_pairs);
  s = g_string_new (NULL);
  for (guint i = 0; i < sorted->len; i++)
    {
      Pair *pair = &g_array_index (sorted, Pair, i);

      g_string_append_printf (s, "%s%s=%s", i > 0 ? "&" : "", pair->name, pair->value);
      g_free (pair->name);
      g_free (pair->value);
    }
  return g_string_free (s, FALSE);
}

/* "b=2&a=1&flag" (names and values not encoded) → "a=1&b=2&flag=": the
 * raw form of AWS's examples, split at each '&' and a part's first '='. */
char *
kv_s3_canonical_query (const char *query)
{
  g_auto(GStrv) parts = NULL;
  g_autoptr(GPtrArray) pairs = g_ptr_array_new ();

  if (query == NULL || *query == '\0')
    return g_strdup ("");
  parts = g_strsplit (query, "&", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    {
      char *eq = strchr (parts[i], '=');

      if (eq != NULL)
        *eq = '\0';
      g_ptr_array_add (pairs, parts[i]);
      g_ptr_array_add (pairs, eq != NULL ? eq + 1 : (char *) "");
    }
  g_ptr_array_add (pairs, NULL);
  return kv_s3_canonical_query_pairs ((const char * const *) pairs->pdata);
}

typedef struct
{
  char    *name;    /* lower case */
  GString *value;   /* values of one name, comma-joined */
  guint    order;
} CanonicalHeader;

static int
compare_headers (gconstpointer a,
                 gconstpointer b)
{
  const CanonicalHeader *x = a;
  const CanonicalHeader *y = b;
  int c = strcmp (x->name, y->name);

  return c != 0 ? c : (x->order > y->order) - (x->order < y->order);
}

/* Trims @value and folds each run of spaces into one. */
static void
append_folded (GString    *s,
               const char *value)
{
  gboolean space = FALSE;
  gsize start = s->len;

  while (*value == ' ' || *value == '\t')
    value++;
  for (; *value != '\0'; value++)
    {
      if (*value == ' ' || *value == '\t')
        {
          space = TRUE;
          continue;
        }
      if (space && s->len > start)
        g_string_append_c (s, ' ');
      space = FALSE;
      g_string_append_c (s, *value);
    }
}

char *
kv_s3_canonical_request (const char        *method,
                         const char        *canonical_uri,
                         const char        *canonical_query,
                         const KvS3Header  *headers,
                         guint              n_headers,
                         const char        *payload_hash,
                         char             **out_signed_headers)
{
  g_autoptr(GArray) sorted = g_array_sized_new (FALSE, FALSE, sizeof (CanonicalHeader), n_headers);
  GString *request = g_string_sized_new (256);
  GString *signed_headers = g_string_sized_new (64);

  for (guint i = 0; i < n_headers; i++)
    {
      CanonicalHeader h = { g_ascii_strdown (headers[i].name, -1), g_string_new (NULL), i };

      append_folded (h.value, headers[i].value);
      g_array_append_val (sorted, h);
    }
  g_array_sort (sorted, compare_headers);

  g_string_append_printf (request, "%s\n%s\n%s\n", method, canonical_uri,
                          canonical_query != NULL ? canonical_query : "");
  for (guint i = 0; i < sorted->len; i++)
    {
      CanonicalHeader *h = &g_array_index (sorted, CanonicalHeader, i);
      CanonicalHeader *next = i + 1 < sorted->len ? &g_array_index (sorted, CanonicalHeader, i + 1) : NULL;

      /* repeated names: one line, values in the order given */
      if (next != NULL && strcmp (next->name, h->name) == 0)
        {
          g_string_prepend_c (next->value, ',');
          g_string_prepend (next->value, h->value->str);
          g_free (h->name);
          g_string_free (h->value, TRUE);
          continue;
        }
      g_string_append_printf (request, "%s:%s\n", h->name, h->value->str);
      g_string_append_printf (signed_headers, "%s%s", signed_headers->len > 0 ? ";" : "", h->name);
      g_free (h->name);
      g_string_free (h->value, TRUE);
    }
  g_string_append_printf (request, "\n%s\n%s", signed_headers->str, payload_hash);
  if (out_signed_headers != NULL)
    *out_signed_headers = g_string_free (signed_headers, FALSE);
  else
    g_string_free (signed_headers, TRUE);
  return g_string_free (request, FALSE);
}

char *
kv_s3_string_to_sign (const char *amz_date,
                      const char *scope,
                      const char *canonical_request)
{
  g_autofree char *hash = kv_s3_sha256_hex (canonical_request, strlen (canonical_request));

  return g_strdup_printf (ALGORITHM "\n%s\n%s\n%s", amz_date, scope, hash);
}

void
kv_s3_signing_key (const char *secret_key,
                   const char *date,
                   const char *region,
                   const char *service,
                   guint8      key[32])
{
  g_autofree char *k_secret = g_strconcat ("AWS4", secret_key, NULL);
  guint8 k_date[32], k_region[32], k_service[32];

  hmac_sha256 ((const guint8 *) k_secret, strlen (k_secret), date, k_date);
  hmac_sha256 (k_date, 32, region, k_region);
  hmac_sha256 (k_region, 32, service, k_service);
  hmac_sha256 (k_service, 32, "aws4_request", key);
  memset (k_secret, 0, strlen (k_secret));
}

void
kv_s3_amz_date (gint64 unix_seconds,
                char   out[KV_S3_AMZ_DATE_LEN])
{
  g_autoptr(GDateTime) t = g_date_time_new_from_unix_utc (unix_seconds);

  g_snprintf (out, KV_S3_AMZ_DATE_LEN, "%04d%02d%02dT%02d%02d%02dZ",
              g_date_time_get_year (t), g_date_time_get_month (t),
              g_date_time_get_day_of_month (t), g_date_time_get_hour (t),
              g_date_time_get_minute (t), g_date_time_get_second (t));
}

void
kv_s3_signer_init (KvS3Signer *signer,
                   const char *access_key,
                   const char *secret_key,
                   const char *region,
                   const char *service)
{
  memset (signer, 0, sizeof *signer);
  signer->access_key = g_strdup (access_key);
  signer->secret_key = g_strdup (secret_key);
  signer->region = g_strdup (region);
  signer->service = g_strdup (service);
}

void
kv_s3_signer_clear (KvS3Signer *signer)
{
  if (signer->secret_key != NULL)
    memset (signer->secret_key, 0, strlen (signer->secret_key));
  memset (signer->key, 0, sizeof signer->key);
  g_clear_pointer (&signer->access_key, g_free);
  g_clear_pointer (&signer->secret_key, g_free);
  g_clear_pointer (&signer->region, g_free);
  g_clear_pointer (&signer->service, g_free);
}

char *
kv_s3_signer_authorization (KvS3Signer       *signer,
                            const char       *method,
                            const char       *canonical_uri,
                            const char       *canonical_query,
                            const KvS3Header *headers,
                            guint             n_headers,
                            const char       *payload_hash,
                            const char       *amz_date)
{
  g_autofree char *signed_headers = NULL;
  g_autofree char *request = kv_s3_canonical_request (method, canonical_uri, canonical_query,
                                                      headers, n_headers, payload_hash,
                                                      &signed_headers);
  g_autofree char *scope = NULL;
  g_autofree char *to_sign = NULL;
  char date[9];
  guint8 signature[32];
  char signature_hex[65];

  g_return_val_if_fail (strlen (amz_date) == KV_S3_AMZ_DATE_LEN - 1, NULL);
  memcpy (date, amz_date, 8);
  date[8] = '\0';
  /* the key changes once a day */
  if (strcmp (signer->key_date, date) != 0)
    {
      kv_s3_signing_key (signer->secret_key, date, signer->region, signer->service, signer->key);
      memcpy (signer->key_date, date, sizeof date);
    }
  scope = g_strdup_printf ("%s/%s/%s/aws4_request", date, signer->region, signer->service);
  to_sign = kv_s3_string_to_sign (amz_date, scope, request);
  hmac_sha256 (signer->key, sizeof signer->key, to_sign, signature);
  to_hex (signature, sizeof signature, signature_hex);
  return g_strdup_printf (ALGORITHM " Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                          signer->access_key, scope, signed_headers, signature_hex);
}
