/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-host-buffer.h"

G_BEGIN_DECLS

/* The per-slot "checksum known" flags (n-slots bytes, valid while the
 * buffer lives), for the primary tier's slot allocator to clear without a
 * call: kv_host_buffer_clear_slot_checksum() is flags[slot] = FALSE. */
G_GNUC_INTERNAL
guint8 *_kv_host_buffer_get_checksum_flags (KvHostBuffer *self);

G_END_DECLS
