/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-host-buffer.h"

G_BEGIN_DECLS

/* kv_host_buffer_clear_slot_checksum() without its checks, for the
 * primary tier's slot allocator (@slot is below n-slots). */
G_GNUC_INTERNAL
void _kv_host_buffer_forget_slot_checksum (KvHostBuffer *self,
                                           guint32       slot);

G_END_DECLS
