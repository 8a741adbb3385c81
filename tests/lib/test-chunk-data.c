/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-chunk-data.h"

#include <string.h>

/* The key of chunk @i: 32 bytes of hash, the index in the first two, and
 * a group that changes with the index. */
KvKey *
test_chunk_key (guint i)
{
  guint8 hash[32];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 131 + b * 7 + 3);
  hash[0] = (guint8) (i >> 8);
  hash[1] = (guint8) i;
  return kv_key_new (hash, sizeof hash, i % 3);
}

/* The bytes of chunk @i: a xorshift stream seeded by the index. */
void
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
      memcpy (slot + o, &x, MIN (4, len - o));
    }
}

gboolean
test_chunk_check (const guint8 *slot,
                  gsize         len,
                  guint         i)
{
  g_autofree guint8 *expected = g_malloc (len);

  test_chunk_fill (expected, len, i);
  return memcmp (slot, expected, len) == 0;
}

/* Fills slot @slot of @buffer with chunk @i's bytes as the slot's new
 * writer would: the checksum a verified load left with the slot (see
 * kv_host_buffer_get_slot_checksum()) is of its old bytes. */
void
test_chunk_fill_slot (KvHostBuffer *buffer,
                      guint32       slot,
                      guint         i)
{
  kv_host_buffer_clear_slot_checksum (buffer, slot);
  test_chunk_fill (kv_host_buffer_peek_slot (buffer, slot),
                   kv_host_buffer_get_slot_size (buffer), i);
}
