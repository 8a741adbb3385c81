/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The gather/scatter kernel of the CUDA device: one launch moves every small
 * piece of a job, reading or writing the primary buffer through its mapped
 * (zero-copy) address, instead of one cudaMemcpyAsync per piece. */
#include "kv-cuda-kernels.h"

#define COPY_THREADS 256

__global__ static void
copy_spans (const KvCudaSpan *spans,
            unsigned int      n_spans)
{
  for (unsigned int s = blockIdx.x; s < n_spans; s += gridDim.x)
    {
      KvCudaSpan span = spans[s];

      if (((span.dst | span.src | span.bytes) & 15) == 0)
        {
          uint4 *__restrict__ dst = (uint4 *) span.dst;
          const uint4 *__restrict__ src = (const uint4 *) span.src;
          unsigned long long n = span.bytes / 16;
          unsigned long long i = threadIdx.x;
          unsigned int step = blockDim.x;

          /* Four loads in flight per thread before their stores: reads
           * through PCIe (the mapped primary) need many outstanding. */
          for (; i + 3 * step < n; i += 4 * step)
            {
              uint4 a = src[i], b = src[i + step], c = src[i + 2 * step], d = src[i + 3 * step];

              dst[i] = a;
              dst[i + step] = b;
              dst[i + 2 * step] = c;
              dst[i + 3 * step] = d;
            }
          for (; i < n; i += step)
            dst[i] = src[i];
        }
      else
        {
          unsigned char *dst = (unsigned char *) span.dst;
          const unsigned char *src = (const unsigned char *) span.src;

          for (unsigned long long i = threadIdx.x; i < span.bytes; i += blockDim.x)
            dst[i] = src[i];
        }
    }
}

extern "C" cudaError_t
kv_cuda_launch_copy_spans (const KvCudaSpan *spans,
                           unsigned int      n_spans,
                           cudaStream_t      stream)
{
  unsigned int grid = n_spans < 65535u ? n_spans : 65535u;

  if (n_spans == 0)
    return cudaSuccess;
  copy_spans<<<grid, COPY_THREADS, 0, stream>>> (spans, n_spans);
  return cudaGetLastError ();
}

__global__ static void
fill_pattern (unsigned long long *dst,
              unsigned long long  n_words,
              unsigned long long  seed)
{
  for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x;
       i < n_words; i += (unsigned long long) gridDim.x * blockDim.x)
    dst[i] = kv_cuda_pattern_word (seed, i);
}

__global__ static void
check_pattern (const unsigned long long *src,
               unsigned long long        n_words,
               unsigned long long        seed,
               unsigned long long       *mismatches)
{
  unsigned long long bad = 0;

  for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x;
       i < n_words; i += (unsigned long long) gridDim.x * blockDim.x)
    bad += src[i] != kv_cuda_pattern_word (seed, i);
  if (bad != 0)
    atomicAdd (mismatches, bad);
}

static unsigned int
grid_for (unsigned long long n_words)
{
  unsigned long long blocks = (n_words + COPY_THREADS - 1) / COPY_THREADS;

  return blocks == 0 ? 1 : blocks < 4096 ? (unsigned int) blocks : 4096;
}

extern "C" cudaError_t
kv_cuda_launch_fill_pattern (unsigned long long *dst,
                             unsigned long long  n_words,
                             unsigned long long  seed,
                             cudaStream_t        stream)
{
  fill_pattern<<<grid_for (n_words), COPY_THREADS, 0, stream>>> (dst, n_words, seed);
  return cudaGetLastError ();
}

extern "C" cudaError_t
kv_cuda_launch_check_pattern (const unsigned long long *src,
                              unsigned long long        n_words,
                              unsigned long long        seed,
                              unsigned long long       *mismatches,
                              cudaStream_t              stream)
{
  check_pattern<<<grid_for (n_words), COPY_THREADS, 0, stream>>> (src, n_words, seed, mismatches);
  return cudaGetLastError ();
}

__global__ static void
fill_word (unsigned long long *dst,
           unsigned long long  n_words,
           unsigned long long  word)
{
  for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x;
       i < n_words; i += (unsigned long long) gridDim.x * blockDim.x)
    dst[i] = word;
}

__global__ static void
check_word (const unsigned long long *src,
            unsigned long long        n_words,
            unsigned long long        word,
            unsigned long long       *mismatches)
{
  unsigned long long bad = 0;

  for (unsigned long long i = blockIdx.x * (unsigned long long) blockDim.x + threadIdx.x;
       i < n_words; i += (unsigned long long) gridDim.x * blockDim.x)
    bad += src[i] != word;
  if (bad != 0)
    atomicAdd (mismatches, bad);
}

extern "C" cudaError_t
kv_cuda_launch_fill_word (unsigned long long *dst,
                          unsigned long long  n_words,
                          unsigned long long  word,
                          cudaStream_t        stream)
{
  fill_word<<<grid_for (n_words), COPY_THREADS, 0, stream>>> (dst, n_words, word);
  return cudaGetLastError ();
}

extern "C" cudaError_t
kv_cuda_launch_check_word (const unsigned long long *src,
                           unsigned long long        n_words,
                           unsigned long long        word,
                           unsigned long long       *mismatches,
                           cudaStream_t              stream)
{
  check_word<<<grid_for (n_words), COPY_THREADS, 0, stream>>> (src, n_words, word, mismatches);
  return cudaGetLastError ();
}
