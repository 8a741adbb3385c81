/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <kvtier.h>

G_BEGIN_DECLS

/**
 * KV_CUDA_DEVICE_ERROR:
 *
 * Error domain of [class@Kv.CudaDevice] (the `kvtier-cuda` plugin). Errors
 * in this domain are from the [error@Kv.CudaDeviceError] enumeration.
 */
#define KV_CUDA_DEVICE_ERROR (kv_cuda_device_error_quark ())

/**
 * KvCudaDeviceError:
 * @KV_CUDA_DEVICE_ERROR_NOT_AVAILABLE: no CUDA driver or no CUDA device:
 *   the message names the CUDA error.
 * @KV_CUDA_DEVICE_ERROR_FAILED: a CUDA call failed; the message names it
 *   and the CUDA error.
 *
 * Error codes for %KV_CUDA_DEVICE_ERROR.
 */
typedef enum {
  KV_CUDA_DEVICE_ERROR_NOT_AVAILABLE,
  KV_CUDA_DEVICE_ERROR_FAILED,
} KvCudaDeviceError;

GQuark kv_cuda_device_error_quark (void);

#define KV_TYPE_CUDA_DEVICE (kv_cuda_device_get_type ())

G_DECLARE_FINAL_TYPE (KvCudaDevice, kv_cuda_device, KV, CUDA_DEVICE, KvDevice)

guint         kv_cuda_device_cancel          (KvCudaDevice *self);
int           kv_cuda_device_get_ordinal     (KvCudaDevice *self);
guint64       kv_cuda_device_get_layer_address (KvCudaDevice *self,
                                              guint         layer);
char         *kv_cuda_device_dup_last_error  (KvCudaDevice *self);
gboolean      kv_cuda_device_fill_blocks     (KvCudaDevice *self,
                                              guint64       seed,
                                              guint         first_block,
                                              guint         n_blocks);
guint64       kv_cuda_device_check_blocks    (KvCudaDevice *self,
                                              guint64       seed,
                                              guint         first_block,
                                              guint         n_blocks);

G_END_DECLS
