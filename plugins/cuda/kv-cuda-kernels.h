/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One piece the gather/scatter kernel copies: @bytes from @src to @dst,
 * both device-visible addresses (device memory, or mapped host memory).
 * One thread block copies one span, so spans are kept short. */
typedef struct
{
  unsigned long long dst;
  unsigned long long src;
  unsigned long long bytes;
} KvCudaSpan;

/* Longest span the planner makes: long runs are cut into spans of this. */
#define KV_CUDA_SPAN_MAX_BYTES (64u * 1024u)

cudaError_t kv_cuda_launch_copy_spans (const KvCudaSpan *spans,
                                       unsigned int      n_spans,
                                       cudaStream_t      stream);

/* Test and benchmark helpers: fill @n_words 64-bit words at @dst with
 * seed-derived values, or count the words that differ from them. */
cudaError_t kv_cuda_launch_fill_pattern  (unsigned long long *dst,
                                          unsigned long long  n_words,
                                          unsigned long long  seed,
                                          cudaStream_t        stream);
cudaError_t kv_cuda_launch_check_pattern (const unsigned long long *src,
                                          unsigned long long        n_words,
                                          unsigned long long        seed,
                                          unsigned long long       *mismatches,
                                          cudaStream_t              stream);

/* The same with one word everywhere (a bench's computed chunk). */
cudaError_t kv_cuda_launch_fill_word  (unsigned long long *dst,
                                       unsigned long long  n_words,
                                       unsigned long long  word,
                                       cudaStream_t        stream);
cudaError_t kv_cuda_launch_check_word (const unsigned long long *src,
                                       unsigned long long        n_words,
                                       unsigned long long        word,
                                       unsigned long long       *mismatches,
                                       cudaStream_t              stream);

/* The value kv_cuda_launch_fill_pattern() writes at word @i for @seed;
 * host code checks bytes with it. */
#ifdef __CUDACC__
# define KV_CUDA_HOST_DEVICE __host__ __device__
#else
# define KV_CUDA_HOST_DEVICE
#endif

static inline KV_CUDA_HOST_DEVICE unsigned long long
kv_cuda_pattern_word (unsigned long long seed,
                      unsigned long long i)
{
  unsigned long long x = seed * 0x9E3779B97F4A7C15ull + i;

  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

#ifdef __cplusplus
}
#endif
