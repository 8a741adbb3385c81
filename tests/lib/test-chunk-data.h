/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Test chunks any tier's tests can store and check: the key and the bytes
 * of chunk @i are deterministic functions of the index, so a chunk read
 * back is checked against the index alone. */

#include <kvtier.h>

G_BEGIN_DECLS

KvKey    *test_chunk_key       (guint         i);
void      test_chunk_fill      (guint8       *slot,
                                gsize         len,
                                guint         i);
gboolean  test_chunk_check     (const guint8 *slot,
                                gsize         len,
                                guint         i);
void      test_chunk_fill_slot (KvHostBuffer *buffer,
                                guint32       slot,
                                guint         i);

G_END_DECLS
