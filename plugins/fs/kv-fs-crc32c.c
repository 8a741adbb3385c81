/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-crc32c.h"

#include <string.h>
#if defined(__x86_64__)
# include <nmmintrin.h>
#endif

/*
 * CRC32C: the reflected polynomial 0x82F63B78, initial value and final
 * xor 0xFFFFFFFF (crc32c ("123456789") = 0xE3069283). No Debian package
 * offers it to C (zlib has CRC-32 only), so: the SSE4.2 instruction where
 * the CPU has it, eight bytes at a time, and a byte table elsewhere.
 */

static guint32 crc32c_table[256];

static gpointer
init_table (gpointer data)
{
  for (guint32 i = 0; i < 256; i++)
    {
      guint32 crc = i;

      for (guint k = 0; k < 8; k++)
        crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
      crc32c_table[i] = crc;
    }
  return NULL;
}

static guint32
crc32c_table_update (guint32       crc,
                     const guint8 *p,
                     gsize         len)
{
  static GOnce once = G_ONCE_INIT;

  g_once (&once, init_table, NULL);
  while (len-- > 0)
    crc = crc32c_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__ ((target ("sse4.2")))
static guint32
crc32c_sse42_update (guint32       crc,
                     const guint8 *p,
                     gsize         len)
{
  guint64 c = crc;

  for (; len >= 8; p += 8, len -= 8)
    {
      guint64 word;

      memcpy (&word, p, sizeof word);
      c = _mm_crc32_u64 (c, word);
    }
  crc = (guint32) c;
  for (; len > 0; p++, len--)
    crc = _mm_crc32_u8 (crc, *p);
  return crc;
}
#endif

/* The CRC32C of @len bytes at @data. */
guint32
kv_fs_crc32c (const void *data,
              gsize       len)
{
#if defined(__x86_64__)
  if (__builtin_cpu_supports ("sse4.2"))
    return ~crc32c_sse42_update (~0u, data, len);
#endif
  return ~crc32c_table_update (~0u, data, len);
}

guint32
kv_fs_crc32c_table (const void *data,
                    gsize       len)
{
  return ~crc32c_table_update (~0u, data, len);
}
