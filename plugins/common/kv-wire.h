/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <string.h>

#include <glib.h>

G_BEGIN_DECLS

/* Little-endian integers at any alignment, as every kvtier wire and file
 * format stores them (the chunk record, the peer protocol's frames). */

static inline guint16
kv_wire_get_u16 (const guint8 *p)
{
  guint16 v;

  memcpy (&v, p, 2);
  return GUINT16_FROM_LE (v);
}

static inline guint32
kv_wire_get_u32 (const guint8 *p)
{
  guint32 v;

  memcpy (&v, p, 4);
  return GUINT32_FROM_LE (v);
}

static inline guint64
kv_wire_get_u64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, 8);
  return GUINT64_FROM_LE (v);
}

static inline void
kv_wire_put_u16 (guint8  *p,
                 guint16  v)
{
  v = GUINT16_TO_LE (v);
  memcpy (p, &v, 2);
}

static inline void
kv_wire_put_u32 (guint8  *p,
                 guint32  v)
{
  v = GUINT32_TO_LE (v);
  memcpy (p, &v, 4);
}

static inline void
kv_wire_put_u64 (guint8  *p,
                 guint64  v)
{
  v = GUINT64_TO_LE (v);
  memcpy (p, &v, 8);
}

static inline void
kv_wire_append_u16 (GByteArray *out,
                    guint16     v)
{
  guint8 b[2];

  kv_wire_put_u16 (b, v);
  g_byte_array_append (out, b, 2);
}

static inline void
kv_wire_append_u32 (GByteArray *out,
                    guint32     v)
{
  guint8 b[4];

  kv_wire_put_u32 (b, v);
  g_byte_array_append (out, b, 4);
}

static inline void
kv_wire_append_u64 (GByteArray *out,
                    guint64     v)
{
  guint8 b[8];

  kv_wire_put_u64 (b, v);
  g_byte_array_append (out, b, 8);
}

G_END_DECLS
