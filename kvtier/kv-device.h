/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-host-buffer.h"
#include "kv-job-result.h"
#include "kv-types.h"

G_BEGIN_DECLS

/**
 * KvDeviceDirection:
 * @KV_DEVICE_DIRECTION_TO_PRIMARY: device (GPU) blocks to primary slots: the
 *   first half of a store.
 * @KV_DEVICE_DIRECTION_TO_DEVICE: primary slots to device blocks: the last
 *   half of a load.
 *
 * The direction of a [class@Kv.Device] transfer. Each direction is a strict
 * FIFO of its own; the two directions run concurrently.
 */
typedef enum {
  KV_DEVICE_DIRECTION_TO_PRIMARY,
  KV_DEVICE_DIRECTION_TO_DEVICE,
} KvDeviceDirection;

/**
 * KvDeviceCopy:
 * @layer: the layer of the piece.
 * @block: the device block of the piece.
 * @primary_offset: byte offset of the piece in the primary buffer (slot
 *   offset plus the piece's place inside the slot).
 *
 * One piece of a transfer: the [property@Kv.Device:block-bytes] bytes of
 * one (block × layer) pair of device memory and their place in the primary
 * buffer. [class@Kv.Device] turns a batch of chunks into an array of these
 * (the reference's `(src, dst, size)` triples) before it calls
 * [vfunc@Kv.Device.submit].
 */
typedef struct _KvDeviceCopy KvDeviceCopy;

struct _KvDeviceCopy
{
  guint32 layer;
  guint32 block;
  guint64 primary_offset;
};

#define KV_TYPE_DEVICE (kv_device_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_DERIVABLE_TYPE (KvDevice, kv_device, KV, DEVICE, GObject)

/**
 * KvDeviceClass:
 * @parent_class: the parent class
 * @open: acquire the device's resources (allocate or register memory, create
 *   streams); called once by [method@Gio.Initable.init] after the layout was
 *   checked against the primary buffer. Optional.
 * @submit: start one job of @n_copies pieces in @direction and return at
 *   once; never wait for the copies. Jobs of one direction must execute in
 *   submission order. Report the job exactly once, from any thread, with
 *   [method@Kv.Device.complete_job] (or from @get_finished). Required.
 * @get_finished: results of jobs finished since the last call, in completion
 *   order. The default drains the queue filled by
 *   [method@Kv.Device.complete_job]; a device that learns of completions by
 *   polling (CUDA events) overrides it.
 * @wait: block until every job in @job_ids has finished; results stay
 *   queued for @get_finished. The default waits for
 *   [method@Kv.Device.complete_job].
 * @close: release what @open acquired; called once, after every job has
 *   finished. Optional.
 *
 * The virtual methods of a device. @submit and @get_finished run on the
 * owner thread; @wait and @close may block.
 */
struct _KvDeviceClass
{
  GObjectClass parent_class;

  gboolean       (*open)         (KvDevice           *self,
                                  GError            **error);
  gboolean       (*submit)       (KvDevice           *self,
                                  guint64             job_id,
                                  KvDeviceDirection   direction,
                                  const KvDeviceCopy *copies,
                                  guint               n_copies,
                                  GError            **error);
  KvJobResult  **(*get_finished) (KvDevice           *self);
  gboolean       (*wait)         (KvDevice           *self,
                                  const guint64      *job_ids,
                                  guint               n_job_ids,
                                  GError            **error);
  void           (*close)        (KvDevice           *self);

  /*< private >*/
  gpointer _reserved[8];
};

KVTIER_AVAILABLE_IN_ALL
KvHostBuffer  *kv_device_get_primary          (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
guint          kv_device_get_n_blocks         (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
gsize          kv_device_get_block_bytes      (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
guint          kv_device_get_n_layers         (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
guint          kv_device_get_blocks_per_chunk (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
gsize          kv_device_get_chunk_bytes      (KvDevice       *self);

KVTIER_AVAILABLE_IN_ALL
guint64        kv_device_submit_store         (KvDevice       *self,
                                               const guint32  *block_ids,
                                               guint           n_block_ids,
                                               const guint32  *chunk_ids,
                                               guint           n_chunk_ids,
                                               GError        **error);
KVTIER_AVAILABLE_IN_ALL
guint64        kv_device_submit_load          (KvDevice       *self,
                                               const guint32  *chunk_ids,
                                               guint           n_chunk_ids,
                                               const guint32  *block_ids,
                                               guint           n_block_ids,
                                               GError        **error);
KVTIER_AVAILABLE_IN_ALL
KvJobResult  **kv_device_get_finished         (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_device_wait                 (KvDevice       *self,
                                               const guint64  *job_ids,
                                               guint           n_job_ids,
                                               GError        **error);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_device_wait_all             (KvDevice       *self,
                                               GError        **error);
KVTIER_AVAILABLE_IN_ALL
guint          kv_device_get_n_active_jobs    (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
int            kv_device_get_wakeup_fd        (KvDevice       *self);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_device_shutdown             (KvDevice       *self,
                                               GError        **error);

KVTIER_AVAILABLE_IN_ALL
void           kv_device_complete_job         (KvDevice       *self,
                                               KvJobResult    *result);

G_END_DECLS
