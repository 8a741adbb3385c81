/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-device.h"

G_BEGIN_DECLS

#define KV_TYPE_HOST_DEVICE (kv_host_device_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvHostDevice, kv_host_device, KV, HOST_DEVICE, KvDevice)

KVTIER_AVAILABLE_IN_ALL
KvHostDevice *kv_host_device_new         (KvHostBuffer  *primary,
                                          guint          n_blocks,
                                          gsize          block_bytes,
                                          guint          n_layers,
                                          guint          blocks_per_chunk,
                                          GError       **error);
KVTIER_AVAILABLE_IN_ALL
guint         kv_host_device_get_n_workers (KvHostDevice *self);
KVTIER_AVAILABLE_IN_ALL
gpointer      kv_host_device_peek_block  (KvHostDevice  *self,
                                          guint          layer,
                                          guint          block);
KVTIER_AVAILABLE_IN_ALL
GBytes       *kv_host_device_read_block  (KvHostDevice  *self,
                                          guint          layer,
                                          guint          block,
                                          GError       **error);
KVTIER_AVAILABLE_IN_ALL
gboolean      kv_host_device_write_block (KvHostDevice  *self,
                                          guint          layer,
                                          guint          block,
                                          GBytes        *data,
                                          GError       **error);

G_END_DECLS
