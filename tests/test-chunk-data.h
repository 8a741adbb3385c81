/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Test chunks any tier's tests can store and check: the key and the bytes
 * of chunk @i are deterministic functions of the index, so a chunk read
 * back is checked against the index alone. */

#include <string.h>
#include <kvtier.h>

G_GNUC_UNUSED static KvKey *
test_chunk_key (guint i)
{
  guint8 hash[32];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 131 + b * 7 + 3);
  hash[0] = (guint8) (i >> 8);
  hash[1] = (guint8) i;
  return kv_key_new (hash, sizeof hash, i % 3);
}

/* The bytes of chunk @i. */
G_GNUC_UNUSED static void
test_chunk_fill (guint8 *slot,
                 gsize   len,
                 guint   i)
{
  guint32 x = 0x9e3779b9u * (i + 1);

  for (gsize o = 0; o < len; o += 4)
    {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      memcpy (slot + o, &x, 4);
    }
}

G_GNUC_UNUSED static gboolean
test_chunk_check (const guint8 *slot,
                  gsize         len,
                  guint         i)
{
  g_autofree guint8 *expected = g_malloc (len);

  test_chunk_fill (expected, len, i);
  return memcmp (slot, expected, len) == 0;
}
