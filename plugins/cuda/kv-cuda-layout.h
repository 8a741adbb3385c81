/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

#include <kvtier.h>

G_BEGIN_DECLS

/* Most (layer × plane) lanes a layout may have: the overlap check is
 * quadratic in the lanes whose address ranges interleave. */
#define KV_CUDA_LAYOUT_MAX_LANES 4096
#define KV_CUDA_LAYOUT_MAX_PLANES 16

/* Where the engine's KV blocks live in device memory. Block `b` of layer
 * `l` is `n_planes` pieces of `plane_bytes` (K and V are two planes):
 * plane `p` starts at
 *   layer_addresses[l] + p × plane_stride + b × block_stride
 * and lands at `p × plane_bytes` of the block's place in the primary slot.
 * Pure host data: checking and planning never touch CUDA. */
typedef struct
{
  guint    n_layers;
  guint64 *layer_addresses;   /* n_layers entries */
  guint    n_blocks;
  guint64  block_bytes;       /* every plane of one block of one layer */
  guint    n_planes;
  guint64  plane_bytes;       /* block_bytes / n_planes */
  guint64  block_stride;
  guint64  plane_stride;
} KvCudaLayout;

/* One copy: `height` rows of `width` bytes, row `r` at
 * `device + r × device_pitch` and `host_offset + r × host_pitch` (an
 * offset in the primary buffer). A 1D run has height 1. */
typedef struct
{
  guint64 device;
  guint64 host_offset;
  guint64 width;
  guint64 height;
  guint64 device_pitch;
  guint64 host_pitch;
} KvCudaRun;

gboolean  kv_cuda_layout_parse_addresses (const char * const *texts,
                                          guint64           **out_addresses,
                                          guint              *out_n,
                                          GError            **error);
gboolean  kv_cuda_layout_check           (const KvCudaLayout  *layout,
                                          GError             **error);
guint64   kv_cuda_layout_lane_start      (const KvCudaLayout  *layout,
                                          guint                layer,
                                          guint                plane);
guint64   kv_cuda_layout_lane_end        (const KvCudaLayout  *layout,
                                          guint                layer,
                                          guint                plane);
GArray   *kv_cuda_layout_plan            (const KvCudaLayout  *layout,
                                          const KvDeviceCopy  *copies,
                                          guint                n_copies,
                                          guint64              max_pitch);
void      kv_cuda_layout_clear           (KvCudaLayout        *layout);

gboolean  kv_cuda_ring_reserve           (guint64              capacity,
                                          guint64              head,
                                          guint64             *tail,
                                          guint64              n,
                                          guint64             *out_start);

G_END_DECLS
