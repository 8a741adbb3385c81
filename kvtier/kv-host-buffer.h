/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KvHostBufferBacking:
 * @KV_HOST_BUFFER_BACKING_ANONYMOUS: private anonymous memory.
 * @KV_HOST_BUFFER_BACKING_MEMFD: a memfd that another process can map
 *   through [method@Kv.HostBuffer.get_fd].
 * @KV_HOST_BUFFER_BACKING_FILE: an existing shared file, such as vLLM's
 *   `/dev/shm` primary region.
 * @KV_HOST_BUFFER_BACKING_BORROWED: memory the caller mapped and owns, given
 *   to [ctor@Kv.HostBuffer.new_for_memory] (such as vLLM's primary region
 *   after its file name was removed).
 *
 * What the slot memory of a [class@Kv.HostBuffer] is made of.
 */
typedef enum {
  KV_HOST_BUFFER_BACKING_ANONYMOUS,
  KV_HOST_BUFFER_BACKING_MEMFD,
  KV_HOST_BUFFER_BACKING_FILE,
  KV_HOST_BUFFER_BACKING_BORROWED,
} KvHostBufferBacking;

#define KV_TYPE_HOST_BUFFER (kv_host_buffer_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvHostBuffer, kv_host_buffer, KV, HOST_BUFFER, GObject)

KVTIER_AVAILABLE_IN_ALL
KvHostBuffer        *kv_host_buffer_new          (guint          n_slots,
                                                  gsize          slot_size,
                                                  GError       **error);
KVTIER_AVAILABLE_IN_ALL
KvHostBuffer        *kv_host_buffer_new_shared   (guint          n_slots,
                                                  gsize          slot_size,
                                                  GError       **error);
KVTIER_AVAILABLE_IN_ALL
KvHostBuffer        *kv_host_buffer_new_for_fd   (int            fd,
                                                  guint          n_slots,
                                                  gsize          slot_size,
                                                  GError       **error);
KVTIER_AVAILABLE_IN_ALL
KvHostBuffer        *kv_host_buffer_new_for_file (const char    *path,
                                                  guint          n_slots,
                                                  gsize          slot_size,
                                                  GError       **error);
KVTIER_AVAILABLE_IN_ALL
KvHostBuffer        *kv_host_buffer_new_for_memory (gpointer       data,
                                                guint          n_slots,
                                                gsize          slot_size,
                                                GDestroyNotify release,
                                                gpointer       release_data,
                                                GError       **error);
KVTIER_AVAILABLE_IN_ALL
guint                kv_host_buffer_get_n_slots  (KvHostBuffer  *self);
KVTIER_AVAILABLE_IN_ALL
gsize                kv_host_buffer_get_slot_size (KvHostBuffer *self);
KVTIER_AVAILABLE_IN_ALL
gsize                kv_host_buffer_get_size     (KvHostBuffer  *self);
KVTIER_AVAILABLE_IN_ALL
KvHostBufferBacking  kv_host_buffer_get_backing  (KvHostBuffer  *self);
KVTIER_AVAILABLE_IN_ALL
int                  kv_host_buffer_get_fd       (KvHostBuffer  *self);
KVTIER_AVAILABLE_IN_ALL
gpointer             kv_host_buffer_get_data     (KvHostBuffer  *self);
KVTIER_AVAILABLE_IN_ALL
gpointer             kv_host_buffer_peek_slot    (KvHostBuffer  *self,
                                                  guint32        slot);
KVTIER_AVAILABLE_IN_ALL
GBytes              *kv_host_buffer_read_slot    (KvHostBuffer  *self,
                                                  guint32        slot,
                                                  GError       **error);
KVTIER_AVAILABLE_IN_ALL
gboolean             kv_host_buffer_write_slot   (KvHostBuffer  *self,
                                                  guint32        slot,
                                                  GBytes        *data,
                                                  GError       **error);
KVTIER_AVAILABLE_IN_ALL
gboolean             kv_host_buffer_get_slot_checksum   (KvHostBuffer *self,
                                                         guint32       slot,
                                                         guint64      *out_checksum);
KVTIER_AVAILABLE_IN_ALL
void                 kv_host_buffer_set_slot_checksum   (KvHostBuffer *self,
                                                         guint32       slot,
                                                         guint64       checksum);
KVTIER_AVAILABLE_IN_ALL
void                 kv_host_buffer_clear_slot_checksum (KvHostBuffer *self,
                                                         guint32       slot);

G_END_DECLS
