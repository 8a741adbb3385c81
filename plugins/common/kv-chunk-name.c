/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-chunk-name.h"

#include <string.h>

/* Writes @len bytes at @data as 2 * @len lowercase hex digits at @out (no
 * NUL); returns where the digits end. */
char *
kv_chunk_name_write_hex (char         *out,
                         const guint8 *data,
                         gsize         len)
{
  static const char hex[] = "0123456789abcdef";

  for (gsize i = 0; i < len; i++)
    {
      *out++ = hex[data[i] >> 4];
      *out++ = hex[data[i] & 0xf];
    }
  return out;
}

/* "<head><digest hex><separator>": what the names of one namespace's
 * chunks start with. @head may be empty. */
char *
kv_chunk_name_namespace_prefix (const char   *head,
                                const guint8  digest[KV_CHUNK_NAMESPACE_DIGEST_LEN],
                                char          separator)
{
  gsize head_len = strlen (head);
  char *prefix = g_malloc (head_len + 2 * KV_CHUNK_NAMESPACE_DIGEST_LEN + 2);
  char *p;

  memcpy (prefix, head, head_len);
  p = kv_chunk_name_write_hex (prefix + head_len, digest, KV_CHUNK_NAMESPACE_DIGEST_LEN);
  *p++ = separator;
  *p = '\0';
  return prefix;
}

/* "<prefix><hash hex>_g<group>" of @key; @prefix_len is strlen (@prefix). */
char *
kv_chunk_name_for_key (const char  *prefix,
                       gsize        prefix_len,
                       const KvKey *key)
{
  gsize len = 0;
  const guint8 *hash = kv_key_get_hash (key, &len);
  /* "_g" and a guint32 in decimal, and the NUL */
  gsize suffix_size = 2 + 10 + 1;
  char *name = g_malloc (prefix_len + 2 * len + suffix_size);
  char *p;

  memcpy (name, prefix, prefix_len);
  p = kv_chunk_name_write_hex (name + prefix_len, hash, len);
  g_snprintf (p, suffix_size, "_g%u", kv_key_get_group (key));
  return name;
}

static gint
hex_value (char c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

/* The key of a name kv_chunk_name_for_key() wrote, its prefix skipped:
 * "<hash hex>_g<group>", exactly (lowercase hex, a hash of 1 to
 * KV_CHUNK_MAX_KEY_HASH_LEN bytes, a guint32 in decimal without leading
 * zeros); FALSE for any other string (a name listed in a shared bucket
 * need not be a chunk's). */
gboolean
kv_chunk_name_parse (const char *name,
                     guint8      hash[KV_CHUNK_MAX_KEY_HASH_LEN],
                     gsize      *hash_len,
                     guint32    *group)
{
  const char *sep = strstr (name, "_g");
  gsize n_digits;
  guint64 value = 0;
  const char *digits;

  if (sep == NULL)
    return FALSE;
  n_digits = sep - name;
  if (n_digits == 0 || n_digits % 2 != 0 || n_digits / 2 > KV_CHUNK_MAX_KEY_HASH_LEN)
    return FALSE;
  for (gsize i = 0; i < n_digits; i += 2)
    {
      gint hi = hex_value (name[i]), lo = hex_value (name[i + 1]);

      if (hi < 0 || lo < 0)
        return FALSE;
      hash[i / 2] = (guint8) (hi << 4 | lo);
    }
  digits = sep + 2;
  if (!g_ascii_isdigit (digits[0]) || (digits[0] == '0' && digits[1] != '\0'))
    return FALSE;
  for (const char *p = digits; *p != '\0'; p++)
    {
      if (!g_ascii_isdigit (*p) || p - digits >= 10)
        return FALSE;
      value = value * 10 + (guint64) (*p - '0');
    }
  if (value > G_MAXUINT32)
    return FALSE;
  *hash_len = n_digits / 2;
  *group = (guint32) value;
  return TRUE;
}
