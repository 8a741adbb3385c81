/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <cuda_runtime_api.h>
#include <glib.h>

G_BEGIN_DECLS

/* Test double of the CUDA runtime (tests/cuda/fake-cudart.c): what the
 * CUDA device calls, on host memory, with a worker thread per stream, so
 * its threads, ordering, cancellation and error paths run on machines
 * without a GPU. Controls for tests: */

/* The next @n cudaMemcpyAsync / cudaMemcpy2DAsync calls fail with @err. */
void   fake_cuda_fail_copies     (guint        n,
                                  cudaError_t  err);
/* cudaHostRegister fails with @err until called again with cudaSuccess,
 * as in sandboxes that cannot pin memory they did not allocate. */
void   fake_cuda_fail_host_register (cudaError_t err);
/* The next cudaEventSynchronize returns @err, as after a kernel fault. */
void   fake_cuda_fail_next_sync  (cudaError_t  err);
/* Operations each stream has run (copies, kernels, memsets, events). */
guint64 fake_cuda_get_n_ops      (void);
/* Copy calls (1D and 2D) and kernel launches made so far. */
guint64 fake_cuda_get_n_copy_calls (void);
guint64 fake_cuda_get_n_kernel_launches (void);

G_END_DECLS
