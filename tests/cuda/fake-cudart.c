/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "fake-cudart.h"

#include <stdlib.h>
#include <string.h>

#include "kv-cuda-kernels.h"

/*
 * A test double of the CUDA runtime for machines without a GPU: the calls
 * the CUDA device (plugins/cuda) and its tests make, with the semantics
 * they rely on, on host memory.
 *
 * - "Device memory" is host memory from cudaMalloc, tracked, so that
 *   cudaPointerGetAttributes, cuMemGetAddressRange (through
 *   cudaGetDriverEntryPointByVersion) and copies can tell device addresses
 *   from others; a copy naming a device range that is not allocated fails
 *   with cudaErrorInvalidValue, as the runtime does.
 * - Each stream is a thread running its operations in order (copies, the
 *   device's kernels done in C, memsets, event records); the legacy stream
 *   (NULL) runs them at once on the caller's thread.
 * - Events complete when their stream reaches them; cudaEventSynchronize
 *   waits for the last record.
 * - Faults can be injected (fake-cudart.h).
 */

typedef struct
{
  void     (*run) (gpointer data);
  gpointer  data;
} Op;

struct CUstream_st
{
  GThread     *thread;
  GAsyncQueue *queue;     /* (element-type Op), a NULL run stops */
  GMutex       lock;
  GCond        cond;
  guint64      queued;
  guint64      done;
};

struct CUevent_st
{
  GMutex   lock;
  GCond    cond;
  guint64  recorded;
  guint64  completed;
  gint64   time_us;     /* when the last record completed */
};

typedef struct
{
  guintptr base;
  gsize    size;
  gboolean device;   /* cudaMalloc; else registered or cudaHostAlloc */
  gboolean owned;    /* ours to free */
} Range;

static GMutex state_lock;
static GArray *ranges;          /* (element-type Range) */
static GPtrArray *streams;      /* every live stream, for cudaDeviceSynchronize */
static guint fail_copies;
static cudaError_t fail_copies_error;
static cudaError_t fail_sync_error;
static cudaError_t fail_register_error;
static guint64 n_ops, n_copy_calls, n_kernel_launches;
static __thread cudaError_t last_error;
static __thread int current_device;

static cudaError_t
fail (cudaError_t err)
{
  last_error = err;
  return err;
}

static void
ranges_init_locked (void)
{
  if (ranges == NULL)
    {
      ranges = g_array_new (FALSE, FALSE, sizeof (Range));
      streams = g_ptr_array_new ();
    }
}

static Range *
find_range_locked (guintptr address,
                   gsize    length,
                   gboolean device)
{
  ranges_init_locked ();
  for (guint i = 0; i < ranges->len; i++)
    {
      Range *r = &g_array_index (ranges, Range, i);

      if (r->device == device && address >= r->base && address - r->base < r->size &&
          length <= r->size - (address - r->base))
        return r;
    }
  return NULL;
}

static gboolean
device_range (const void *address,
              gsize       length)
{
  gboolean found;

  g_mutex_lock (&state_lock);
  found = find_range_locked ((guintptr) address, MAX (length, 1), TRUE) != NULL;
  g_mutex_unlock (&state_lock);
  return found;
}

/* Streams */

static gpointer
stream_thread (gpointer data)
{
  cudaStream_t stream = data;

  for (;;)
    {
      Op *op = g_async_queue_pop (stream->queue);
      gboolean stop = op->run == NULL;

      if (!stop)
        op->run (op->data);
      g_free (op);
      g_mutex_lock (&stream->lock);
      stream->done++;
      g_cond_broadcast (&stream->cond);
      g_mutex_unlock (&stream->lock);
      if (stop)
        return NULL;
    }
}

static void
enqueue (cudaStream_t   stream,
         void         (*run) (gpointer),
         gpointer       data)
{
  Op *op;

  g_mutex_lock (&state_lock);
  n_ops++;
  g_mutex_unlock (&state_lock);
  if (stream == NULL)
    {
      run (data);
      return;
    }
  op = g_new (Op, 1);
  op->run = run;
  op->data = data;
  g_mutex_lock (&stream->lock);
  stream->queued++;
  g_mutex_unlock (&stream->lock);
  g_async_queue_push (stream->queue, op);
}

static void
stream_wait (cudaStream_t stream)
{
  guint64 target;

  g_mutex_lock (&stream->lock);
  target = stream->queued;
  while (stream->done < target)
    g_cond_wait (&stream->cond, &stream->lock);
  g_mutex_unlock (&stream->lock);
}

cudaError_t
cudaStreamCreateWithFlags (cudaStream_t *stream,
                           unsigned int  flags)
{
  cudaStream_t s = g_new0 (struct CUstream_st, 1);

  g_mutex_init (&s->lock);
  g_cond_init (&s->cond);
  s->queue = g_async_queue_new ();
  s->thread = g_thread_new ("fake-cuda-stream", stream_thread, s);
  g_mutex_lock (&state_lock);
  ranges_init_locked ();
  g_ptr_array_add (streams, s);
  g_mutex_unlock (&state_lock);
  *stream = s;
  return cudaSuccess;
}

cudaError_t
cudaStreamDestroy (cudaStream_t stream)
{
  Op *stop = g_new0 (Op, 1);

  if (stream == NULL)
    return fail (cudaErrorInvalidResourceHandle);
  g_mutex_lock (&state_lock);
  g_ptr_array_remove (streams, stream);
  g_mutex_unlock (&state_lock);
  g_mutex_lock (&stream->lock);
  stream->queued++;
  g_mutex_unlock (&stream->lock);
  g_async_queue_push (stream->queue, stop);
  g_thread_join (stream->thread);
  g_async_queue_unref (stream->queue);
  g_mutex_clear (&stream->lock);
  g_cond_clear (&stream->cond);
  g_free (stream);
  return cudaSuccess;
}

cudaError_t
cudaStreamSynchronize (cudaStream_t stream)
{
  if (stream != NULL)
    stream_wait (stream);
  return cudaSuccess;
}

cudaError_t
cudaDeviceSynchronize (void)
{
  g_autoptr(GPtrArray) all = NULL;

  g_mutex_lock (&state_lock);
  ranges_init_locked ();
  all = g_ptr_array_copy (streams, NULL, NULL);
  g_mutex_unlock (&state_lock);
  for (guint i = 0; i < all->len; i++)
    stream_wait (g_ptr_array_index (all, i));
  return cudaSuccess;
}

/* Events */

cudaError_t
cudaEventCreateWithFlags (cudaEvent_t  *event,
                          unsigned int  flags)
{
  cudaEvent_t e = g_new0 (struct CUevent_st, 1);

  g_mutex_init (&e->lock);
  g_cond_init (&e->cond);
  *event = e;
  return cudaSuccess;
}

cudaError_t
cudaEventDestroy (cudaEvent_t event)
{
  if (event == NULL)
    return fail (cudaErrorInvalidResourceHandle);
  g_mutex_clear (&event->lock);
  g_cond_clear (&event->cond);
  g_free (event);
  return cudaSuccess;
}

typedef struct
{
  cudaEvent_t event;
  guint64     target;
} EventOp;

static void
run_event (gpointer data)
{
  EventOp *op = data;

  g_mutex_lock (&op->event->lock);
  op->event->completed = MAX (op->event->completed, op->target);
  op->event->time_us = g_get_monotonic_time ();
  g_cond_broadcast (&op->event->cond);
  g_mutex_unlock (&op->event->lock);
  g_free (op);
}

cudaError_t
cudaEventRecord (cudaEvent_t  event,
                 cudaStream_t stream)
{
  EventOp *op = g_new (EventOp, 1);

  g_mutex_lock (&event->lock);
  op->event = event;
  op->target = ++event->recorded;
  g_mutex_unlock (&event->lock);
  enqueue (stream, run_event, op);
  return cudaSuccess;
}

cudaError_t
cudaEventSynchronize (cudaEvent_t event)
{
  cudaError_t injected;

  g_mutex_lock (&event->lock);
  while (event->completed < event->recorded)
    g_cond_wait (&event->cond, &event->lock);
  g_mutex_unlock (&event->lock);

  g_mutex_lock (&state_lock);
  injected = fail_sync_error;
  fail_sync_error = cudaSuccess;
  g_mutex_unlock (&state_lock);
  return injected != cudaSuccess ? fail (injected) : cudaSuccess;
}

cudaError_t
cudaEventCreate (cudaEvent_t *event)
{
  return cudaEventCreateWithFlags (event, 0);
}

cudaError_t
cudaEventElapsedTime (float       *ms,
                      cudaEvent_t  start,
                      cudaEvent_t  end)
{
  if (start->completed < start->recorded || end->completed < end->recorded)
    return fail (cudaErrorNotReady);
  *ms = (end->time_us - start->time_us) / 1000.0f;
  return cudaSuccess;
}

static void
run_wait_event (gpointer data)
{
  EventOp *op = data;

  g_mutex_lock (&op->event->lock);
  while (op->event->completed < op->target)
    g_cond_wait (&op->event->cond, &op->event->lock);
  g_mutex_unlock (&op->event->lock);
  g_free (op);
}

cudaError_t
cudaStreamWaitEvent (cudaStream_t  stream,
                     cudaEvent_t   event,
                     unsigned int  flags)
{
  EventOp *op = g_new (EventOp, 1);

  g_mutex_lock (&event->lock);
  op->event = event;
  op->target = event->recorded;
  g_mutex_unlock (&event->lock);
  enqueue (stream, run_wait_event, op);
  return cudaSuccess;
}

/* Copies */

typedef struct
{
  guint8       *dst;
  const guint8 *src;
  gsize         width;
  gsize         height;
  gsize         dpitch;
  gsize         spitch;
} CopyOp;

static void
run_copy (gpointer data)
{
  CopyOp *op = data;

  for (gsize r = 0; r < op->height; r++)
    memcpy (op->dst + r * op->dpitch, op->src + r * op->spitch, op->width);
  g_free (op);
}

static cudaError_t
copy_2d (void                *dst,
         size_t               dpitch,
         const void          *src,
         size_t               spitch,
         size_t               width,
         size_t               height,
         enum cudaMemcpyKind  kind,
         cudaStream_t         stream)
{
  CopyOp *op;
  gsize dext = height > 0 ? (height - 1) * dpitch + width : 0;
  gsize sext = height > 0 ? (height - 1) * spitch + width : 0;

  g_mutex_lock (&state_lock);
  n_copy_calls++;
  if (fail_copies > 0)
    {
      cudaError_t err = fail_copies_error;

      fail_copies--;
      g_mutex_unlock (&state_lock);
      return fail (err);
    }
  g_mutex_unlock (&state_lock);

  if (height > 1 && (dpitch < width || spitch < width))
    return fail (cudaErrorInvalidPitchValue);
  if ((kind == cudaMemcpyHostToDevice && !device_range (dst, dext)) ||
      (kind == cudaMemcpyDeviceToHost && !device_range (src, sext)))
    return fail (cudaErrorInvalidValue);

  op = g_new (CopyOp, 1);
  *op = (CopyOp) { dst, src, width, height, dpitch, spitch };
  enqueue (stream, run_copy, op);
  return cudaSuccess;
}

cudaError_t
cudaMemcpyAsync (void                *dst,
                 const void          *src,
                 size_t               count,
                 enum cudaMemcpyKind  kind,
                 cudaStream_t         stream)
{
  return copy_2d (dst, count, src, count, count, 1, kind, stream);
}

cudaError_t
cudaMemcpy2DAsync (void                *dst,
                   size_t               dpitch,
                   const void          *src,
                   size_t               spitch,
                   size_t               width,
                   size_t               height,
                   enum cudaMemcpyKind  kind,
                   cudaStream_t         stream)
{
  return copy_2d (dst, dpitch, src, spitch, width, height, kind, stream);
}

cudaError_t
cudaMemcpy (void                *dst,
            const void          *src,
            size_t               count,
            enum cudaMemcpyKind  kind)
{
  memcpy (dst, src, count);
  return cudaSuccess;
}

typedef struct
{
  void  *dst;
  int    value;
  gsize  count;
} MemsetOp;

static void
run_memset (gpointer data)
{
  MemsetOp *op = data;

  memset (op->dst, op->value, op->count);
  g_free (op);
}

cudaError_t
cudaMemsetAsync (void         *dst,
                 int           value,
                 size_t        count,
                 cudaStream_t  stream)
{
  MemsetOp *op;

  if (!device_range (dst, count))
    return fail (cudaErrorInvalidValue);
  op = g_new (MemsetOp, 1);
  *op = (MemsetOp) { dst, value, count };
  enqueue (stream, run_memset, op);
  return cudaSuccess;
}

cudaError_t
cudaMemset (void   *dst,
            int     value,
            size_t  count)
{
  return cudaMemsetAsync (dst, value, count, NULL);
}

/* Memory */

static cudaError_t
add_range (void     *base,
           gsize     size,
           gboolean  device,
           gboolean  owned)
{
  Range r = { (guintptr) base, size, device, owned };

  g_mutex_lock (&state_lock);
  ranges_init_locked ();
  for (guint i = 0; i < ranges->len; i++)
    {
      Range *o = &g_array_index (ranges, Range, i);

      if (!device && !o->device && r.base < o->base + o->size && o->base < r.base + r.size)
        {
          g_mutex_unlock (&state_lock);
          return fail (cudaErrorHostMemoryAlreadyRegistered);
        }
    }
  g_array_append_val (ranges, r);
  g_mutex_unlock (&state_lock);
  return cudaSuccess;
}

static gboolean
remove_range (void     *base,
              gboolean  device)
{
  gboolean found = FALSE;

  g_mutex_lock (&state_lock);
  ranges_init_locked ();
  for (guint i = 0; i < ranges->len && !found; i++)
    {
      Range *r = &g_array_index (ranges, Range, i);

      if (r->base == (guintptr) base && r->device == device)
        {
          g_array_remove_index_fast (ranges, i);
          found = TRUE;
        }
    }
  g_mutex_unlock (&state_lock);
  return found;
}

cudaError_t
cudaMalloc (void   **ptr,
            size_t   size)
{
  void *p = NULL;

  if (posix_memalign (&p, 256, MAX (size, 1)) != 0)
    return fail (cudaErrorMemoryAllocation);
  /* Device memory is not zeroed: fill it with garbage as a GPU might. */
  memset (p, 0xa5, size);
  *ptr = p;
  return add_range (p, size, TRUE, TRUE);
}

cudaError_t
cudaFree (void *ptr)
{
  if (ptr == NULL)
    return cudaSuccess;
  /* Outstanding work might still use it, as on a GPU: wait for it. */
  cudaDeviceSynchronize ();
  if (!remove_range (ptr, TRUE))
    return fail (cudaErrorInvalidValue);
  free (ptr);
  return cudaSuccess;
}

cudaError_t
cudaHostAlloc (void         **ptr,
               size_t         size,
               unsigned int   flags)
{
  void *p = NULL;

  if (posix_memalign (&p, 4096, MAX (size, 1)) != 0)
    return fail (cudaErrorMemoryAllocation);
  *ptr = p;
  return add_range (p, size, FALSE, TRUE);
}

cudaError_t
cudaFreeHost (void *ptr)
{
  if (!remove_range (ptr, FALSE))
    return fail (cudaErrorInvalidValue);
  free (ptr);
  return cudaSuccess;
}

cudaError_t
cudaHostRegister (void         *ptr,
                  size_t        size,
                  unsigned int  flags)
{
  cudaError_t injected;

  g_mutex_lock (&state_lock);
  injected = fail_register_error;
  g_mutex_unlock (&state_lock);
  if (injected != cudaSuccess)
    return fail (injected);
  return add_range (ptr, size, FALSE, FALSE);
}

cudaError_t
cudaHostUnregister (void *ptr)
{
  return remove_range (ptr, FALSE) ? cudaSuccess : fail (cudaErrorHostMemoryNotRegistered);
}

cudaError_t
cudaHostGetDevicePointer (void         **device_ptr,
                          void          *host_ptr,
                          unsigned int   flags)
{
  gboolean found;

  g_mutex_lock (&state_lock);
  found = find_range_locked ((guintptr) host_ptr, 1, FALSE) != NULL;
  g_mutex_unlock (&state_lock);
  if (!found)
    return fail (cudaErrorInvalidValue);
  *device_ptr = host_ptr;
  return cudaSuccess;
}

cudaError_t
cudaPointerGetAttributes (struct cudaPointerAttributes *attributes,
                          const void                   *ptr)
{
  Range *r;

  memset (attributes, 0, sizeof *attributes);
  g_mutex_lock (&state_lock);
  if ((r = find_range_locked ((guintptr) ptr, 1, TRUE)) != NULL)
    {
      attributes->type = cudaMemoryTypeDevice;
      attributes->devicePointer = (void *) ptr;
    }
  else if ((r = find_range_locked ((guintptr) ptr, 1, FALSE)) != NULL)
    {
      attributes->type = cudaMemoryTypeHost;
      attributes->hostPointer = (void *) ptr;
    }
  else
    attributes->type = cudaMemoryTypeUnregistered;
  g_mutex_unlock (&state_lock);
  attributes->device = 0;
  return cudaSuccess;
}

static int
fake_mem_get_address_range (unsigned long long *base,
                            size_t             *size,
                            unsigned long long  ptr)
{
  Range *r;
  int result = 1;   /* CUDA_ERROR_INVALID_VALUE */

  g_mutex_lock (&state_lock);
  if ((r = find_range_locked ((guintptr) ptr, 1, TRUE)) != NULL)
    {
      *base = r->base;
      *size = r->size;
      result = 0;
    }
  g_mutex_unlock (&state_lock);
  return result;
}

cudaError_t
cudaGetDriverEntryPointByVersion (const char                            *symbol,
                                  void                                 **func,
                                  unsigned int                           version,
                                  unsigned long long                     flags,
                                  enum cudaDriverEntryPointQueryResult  *status)
{
  if (g_strcmp0 (symbol, "cuMemGetAddressRange") == 0)
    {
      *func = (void *) fake_mem_get_address_range;
      if (status != NULL)
        *status = cudaDriverEntryPointSuccess;
      return cudaSuccess;
    }
  *func = NULL;
  if (status != NULL)
    *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

/* Devices and errors */

cudaError_t
cudaGetDeviceCount (int *count)
{
  *count = 1;
  return cudaSuccess;
}

cudaError_t
cudaGetDevice (int *device)
{
  *device = current_device;
  return cudaSuccess;
}

cudaError_t
cudaSetDevice (int device)
{
  if (device != 0)
    return fail (cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t
cudaGetDeviceProperties (struct cudaDeviceProp *prop,
                         int                    device)
{
  if (device != 0)
    return fail (cudaErrorInvalidDevice);
  memset (prop, 0, sizeof *prop);
  g_strlcpy (prop->name, "kvtier fake CUDA device (host memory)", sizeof prop->name);
  return cudaSuccess;
}

cudaError_t
cudaDeviceGetAttribute (int                   *value,
                        enum cudaDeviceAttr    attr,
                        int                    device)
{
  *value = attr == cudaDevAttrMaxPitch ? G_MAXINT : 0;
  return cudaSuccess;
}

cudaError_t
cudaGetLastError (void)
{
  cudaError_t err = last_error;

  last_error = cudaSuccess;
  return err;
}

const char *
cudaGetErrorName (cudaError_t error)
{
  switch (error)
    {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
    }
}

const char *
cudaGetErrorString (cudaError_t error)
{
  switch (error)
    {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    default: return "an error of the fake CUDA runtime";
    }
}

/* The device's kernels, in C, on the stream's thread. */

typedef struct
{
  const KvCudaSpan *spans;
  unsigned int      n;
} SpansOp;

static void
run_spans (gpointer data)
{
  SpansOp *op = data;

  /* Read when the "kernel" runs, as the GPU reads the pinned ring. */
  for (unsigned int i = 0; i < op->n; i++)
    memcpy ((void *) (guintptr) op->spans[i].dst, (const void *) (guintptr) op->spans[i].src,
            op->spans[i].bytes);
  g_free (op);
}

cudaError_t
kv_cuda_launch_copy_spans (const KvCudaSpan *spans,
                           unsigned int      n_spans,
                           cudaStream_t      stream)
{
  SpansOp *op = g_new (SpansOp, 1);

  g_mutex_lock (&state_lock);
  n_kernel_launches++;
  g_mutex_unlock (&state_lock);
  op->spans = spans;
  op->n = n_spans;
  enqueue (stream, run_spans, op);
  return cudaSuccess;
}

typedef struct
{
  unsigned long long *words;
  unsigned long long  n;
  unsigned long long  seed;
  unsigned long long *mismatches;
  gboolean            pattern;   /* position-dependent, else one word */
} WordsOp;

static void
run_fill (gpointer data)
{
  WordsOp *op = data;

  for (unsigned long long i = 0; i < op->n; i++)
    op->words[i] = op->pattern ? kv_cuda_pattern_word (op->seed, i) : op->seed;
  g_free (op);
}

static void
run_check (gpointer data)
{
  WordsOp *op = data;
  unsigned long long bad = 0;

  for (unsigned long long i = 0; i < op->n; i++)
    bad += op->words[i] != (op->pattern ? kv_cuda_pattern_word (op->seed, i) : op->seed);
  *op->mismatches += bad;
  g_free (op);
}

static cudaError_t
launch_words (void (*run) (gpointer), unsigned long long *words, unsigned long long n,
              unsigned long long seed, unsigned long long *mismatches, gboolean pattern,
              cudaStream_t stream)
{
  WordsOp *op;

  if (!device_range (words, n * 8))
    return fail (cudaErrorIllegalAddress);
  op = g_new (WordsOp, 1);
  *op = (WordsOp) { words, n, seed, mismatches, pattern };
  g_mutex_lock (&state_lock);
  n_kernel_launches++;
  g_mutex_unlock (&state_lock);
  enqueue (stream, run, op);
  return cudaSuccess;
}

cudaError_t
kv_cuda_launch_fill_pattern (unsigned long long *dst,
                             unsigned long long  n_words,
                             unsigned long long  seed,
                             cudaStream_t        stream)
{
  return launch_words (run_fill, dst, n_words, seed, NULL, TRUE, stream);
}

cudaError_t
kv_cuda_launch_check_pattern (const unsigned long long *src,
                              unsigned long long        n_words,
                              unsigned long long        seed,
                              unsigned long long       *mismatches,
                              cudaStream_t              stream)
{
  return launch_words (run_check, (unsigned long long *) src, n_words, seed, mismatches, TRUE, stream);
}

cudaError_t
kv_cuda_launch_fill_word (unsigned long long *dst,
                          unsigned long long  n_words,
                          unsigned long long  word,
                          cudaStream_t        stream)
{
  return launch_words (run_fill, dst, n_words, word, NULL, FALSE, stream);
}

cudaError_t
kv_cuda_launch_check_word (const unsigned long long *src,
                           unsigned long long        n_words,
                           unsigned long long        word,
                           unsigned long long       *mismatches,
                           cudaStream_t              stream)
{
  return launch_words (run_check, (unsigned long long *) src, n_words, word, mismatches, FALSE, stream);
}

/* Controls */

void
fake_cuda_fail_copies (guint        n,
                       cudaError_t  err)
{
  g_mutex_lock (&state_lock);
  fail_copies = n;
  fail_copies_error = err;
  g_mutex_unlock (&state_lock);
}

void
fake_cuda_fail_host_register (cudaError_t err)
{
  g_mutex_lock (&state_lock);
  fail_register_error = err;
  g_mutex_unlock (&state_lock);
}

void
fake_cuda_fail_next_sync (cudaError_t err)
{
  g_mutex_lock (&state_lock);
  fail_sync_error = err;
  g_mutex_unlock (&state_lock);
}

guint64
fake_cuda_get_n_ops (void)
{
  guint64 n;

  g_mutex_lock (&state_lock);
  n = n_ops;
  g_mutex_unlock (&state_lock);
  return n;
}

guint64
fake_cuda_get_n_copy_calls (void)
{
  guint64 n;

  g_mutex_lock (&state_lock);
  n = n_copy_calls;
  g_mutex_unlock (&state_lock);
  return n;
}

guint64
fake_cuda_get_n_kernel_launches (void)
{
  guint64 n;

  g_mutex_lock (&state_lock);
  n = n_kernel_launches;
  g_mutex_unlock (&state_lock);
  return n;
}
