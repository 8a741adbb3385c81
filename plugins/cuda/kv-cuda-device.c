/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-cuda-device.h"

#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "kv-cuda-kernels.h"
#include "kv-cuda-layout.h"

/* Jobs of one direction on the GPU at once (one event each); later jobs
 * wait on the host, where kv_cuda_device_cancel() can still fail them. */
#define WINDOW 32
/* Spans of the gather/scatter kernel in flight per direction. */
#define RING_SPANS 65536
/* Pinned bounce memory per direction, in two halves, where the primary
 * buffer cannot be registered (the tests' CUDA double uses less). */
#ifndef KV_CUDA_BOUNCE_BYTES
# define KV_CUDA_BOUNCE_BYTES (64u << 20)
#endif
#define BOUNCE_BYTES KV_CUDA_BOUNCE_BYTES

typedef enum {
  JOB_PENDING,    /* on the host, not yet handed to the stream */
  JOB_ISSUING,    /* the issuer is enqueueing its copies */
  JOB_ISSUED,     /* on the stream, or failed: the completer reports it */
} JobState;

typedef struct
{
  guint64        id;
  KvDeviceCopy  *copies;
  guint          n_copies;
  JobState       state;
  cudaEvent_t    event;      /* recorded after the copies, or NULL */
  GError        *error;
  guint64        ring_end;   /* end of the job's spans in the ring, or 0 */
  gint64         issued_ns;
} CudaJob;

typedef struct
{
  KvCudaDevice      *self;
  KvDeviceDirection  direction;
  cudaStream_t       stream;
  GThread           *issuer;
  GThread           *completer;
  GCond              cond;        /* any change of the fields below */
  GQueue             pending;     /* (element-type CudaJob) */
  GQueue             issued;      /* (element-type CudaJob), FIFO of reports */
  cudaEvent_t        free_events[WINDOW];
  guint              n_free_events;
  gboolean           stopping;
  KvCudaSpan        *ring;        /* pinned, mapped */
  KvCudaSpan        *ring_device; /* the ring's device address */
  guint64            ring_head;   /* spans handed out, ever */
  guint64            ring_tail;   /* spans given back, ever */
  gint64             last_done_ns;
  guint8            *bounce;      /* pinned, BOUNCE_BYTES, or NULL */
  cudaEvent_t        bounce_events[2];
} Lane;

/**
 * KvCudaDevice:
 *
 * A [class@Kv.Device] on the CUDA runtime: moves chunks between the
 * engine's KV blocks in GPU memory and the primary tier's slots.
 *
 * The engine's layout is given by properties: per-layer base addresses
 * ([property@Kv.CudaDevice:layer-addresses], or
 * [property@Kv.CudaDevice:base-address] plus
 * [property@Kv.CudaDevice:layer-stride-bytes]), the planes of a block (K and
 * V) and the strides between blocks and planes. Without addresses the
 * device allocates dense memory of its own (benchmarks, tests).
 *
 * Initialization checks the layout on the host (sizes, overflow,
 * overlapping blocks), then against the GPU (every block inside one
 * allocation of the device), registers the primary buffer with
 * cudaHostRegister() once, and starts two threads per direction on a
 * non-blocking stream of their own: an issuer that enqueues each job's
 * copies (contiguous pieces coalesced, 2D copies for strided ones, one
 * gather/scatter kernel launch for jobs of small pieces) and records an
 * event, and a completer that synchronizes the events in order and reports
 * the jobs. The owner thread never calls CUDA after initialization.
 */
struct _KvCudaDevice
{
  KvDevice      parent_instance;

  /* properties */
  char        **layer_address_texts;
  guint64       base_address;
  guint64       layer_stride;
  guint         n_planes;
  guint64       plane_stride;
  guint64       block_stride;
  int           ordinal;
  guint64       gather_run_bytes;

  KvCudaLayout  layout;
  gboolean      owns_memory;
  void         *memory;         /* cudaMalloc'ed when owns_memory */
  char         *device_name;
  guint64       max_pitch;

  guint8       *primary_data;
  gsize         primary_size;
  gboolean      registered;     /* we registered the primary buffer */
  gboolean      bounced;        /* nobody could: copies go through bounce memory */
  guint8       *primary_mapped; /* its device address, or NULL: no kernel */

  /* fill-blocks and check-blocks, made on first use (owner thread) */
  cudaStream_t  compute_stream;
  unsigned long long *counter;

  GMutex        lock;
  Lane          lanes[2];
  gboolean      started;
  char         *last_error;
};

enum {
  PROP_0,
  PROP_LAYER_ADDRESSES,
  PROP_BASE_ADDRESS,
  PROP_LAYER_STRIDE_BYTES,
  PROP_N_PLANES,
  PROP_PLANE_STRIDE_BYTES,
  PROP_BLOCK_STRIDE_BYTES,
  PROP_ORDINAL,
  PROP_GATHER_RUN_BYTES,
  PROP_DEVICE_NAME,
  PROP_BOUNCE_BUFFERED,
  PROP_LAST_ERROR,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

enum {
  SIGNAL_CANCEL,
  SIGNAL_FILL_BLOCKS,
  SIGNAL_CHECK_BLOCKS,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

static void kv_cuda_device_configurable_iface_init (KvConfigurableInterface *iface);

G_DEFINE_QUARK (kv-cuda-device-error-quark, kv_cuda_device_error)

G_DEFINE_FINAL_TYPE_WITH_CODE (KvCudaDevice, kv_cuda_device, KV_TYPE_DEVICE,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                      kv_cuda_device_configurable_iface_init))

static KvConfigurableInterface *kv_cuda_device_configurable_parent;

static gint64
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

static gboolean
cuda_check (cudaError_t   err,
            const char   *what,
            GError      **error)
{
  if (err == cudaSuccess)
    return TRUE;
  g_set_error (error, KV_CUDA_DEVICE_ERROR, KV_CUDA_DEVICE_ERROR_FAILED,
               "KvCudaDevice: %s failed: %s (%s)", what, cudaGetErrorName (err),
               cudaGetErrorString (err));
  return FALSE;
}

static void
cuda_job_free (CudaJob *job)
{
  g_free (job->copies);
  g_clear_error (&job->error);
  g_free (job);
}

/* The layout the properties describe, checked on the host. */
static gboolean
build_layout (KvCudaDevice  *self,
              KvCudaLayout  *layout,
              GError       **error)
{
  KvDevice *device = KV_DEVICE (self);
  gboolean have_list = self->layer_address_texts != NULL && self->layer_address_texts[0] != NULL;
  guint n_layers = kv_device_get_n_layers (device);
  g_autofree guint64 *addresses = NULL;
  guint n = 0;

  memset (layout, 0, sizeof *layout);
  layout->n_layers = n_layers;
  layout->n_blocks = kv_device_get_n_blocks (device);
  layout->block_bytes = kv_device_get_block_bytes (device);
  layout->n_planes = self->n_planes;
  layout->plane_bytes = self->n_planes > 0 ? layout->block_bytes / self->n_planes : 0;
  layout->plane_stride = self->plane_stride;
  layout->block_stride = self->block_stride != 0 ? self->block_stride : layout->plane_bytes;

  if (have_list && self->base_address != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: set “layer-addresses” or “base-address”, not both");
      return FALSE;
    }
  if (self->base_address == 0 && self->layer_stride != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: “layer-stride-bytes” needs “base-address”");
      return FALSE;
    }
  if (self->n_planes > 1 && self->plane_stride == 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: %u planes need “plane-stride-bytes”, the"
                   " distance from one plane to the next", self->n_planes);
      return FALSE;
    }

  if (have_list)
    {
      if (!kv_cuda_layout_parse_addresses ((const char * const *) self->layer_address_texts,
                                           &addresses, &n, error))
        return FALSE;
      if (n != n_layers)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "KvCudaDevice: “layer-addresses” has %u addresses for %u"
                       " layers", n, n_layers);
          return FALSE;
        }
    }
  else if (self->base_address != 0)
    {
      addresses = g_new (guint64, n_layers);
      for (guint l = 0; l < n_layers; l++)
        {
          guint64 offset;

          if (!g_uint64_checked_mul (&offset, l, self->layer_stride) ||
              !g_uint64_checked_add (&addresses[l], self->base_address, offset))
            {
              g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "KvCudaDevice: layer %u at base-address + %u ×"
                           " layer-stride-bytes is past the end of the 64-bit"
                           " address space", l, l);
              return FALSE;
            }
        }
    }
  else
    {
      guint64 layer_bytes, total;

      /* Memory of our own: dense, layer after layer, one plane. */
      if (self->n_planes != 1 || self->block_stride != 0)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "KvCudaDevice: n-planes and block-stride-bytes describe"
                       " the engine's memory: set “layer-addresses” or"
                       " “base-address” too");
          return FALSE;
        }
      if (!g_uint64_checked_mul (&layer_bytes, layout->n_blocks, layout->block_bytes) ||
          !g_uint64_checked_mul (&total, layer_bytes, n_layers) || total > G_MAXSIZE)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "KvCudaDevice: %u layers × %u blocks × %" G_GUINT64_FORMAT
                       " bytes overflow the address space", n_layers,
                       layout->n_blocks, layout->block_bytes);
          return FALSE;
        }
      /* Stand-in addresses for the check; open() puts the real ones. */
      addresses = g_new (guint64, MAX (n_layers, 1));
      for (guint l = 0; l < n_layers; l++)
        addresses[l] = 4096 + (guint64) l * layer_bytes;
    }

  layout->layer_addresses = g_steal_pointer (&addresses);
  if (!kv_cuda_layout_check (layout, error))
    {
      kv_cuda_layout_clear (layout);
      return FALSE;
    }
  return TRUE;
}

static gboolean
kv_cuda_device_check (KvConfigurable  *configurable,
                      GError         **error)
{
  KvCudaLayout layout;

  if (!kv_cuda_device_configurable_parent->check (configurable, error))
    return FALSE;
  if (!build_layout (KV_CUDA_DEVICE (configurable), &layout, error))
    return FALSE;
  kv_cuda_layout_clear (&layout);
  return TRUE;
}

static void
kv_cuda_device_configurable_iface_init (KvConfigurableInterface *iface)
{
  kv_cuda_device_configurable_parent = g_type_interface_peek_parent (iface);
  iface->check = kv_cuda_device_check;
}

typedef int (*MemGetAddressRangeFunc) (unsigned long long *base,
                                       size_t             *size,
                                       unsigned long long  ptr);

/* Every lane lies inside one allocation of device memory on our GPU, so no
 * copy or kernel of ours can reach an address the engine does not own. */
static gboolean
check_lanes_on_device (KvCudaDevice  *self,
                       GError       **error)
{
  const KvCudaLayout *layout = &self->layout;
  MemGetAddressRangeFunc get_range = NULL;
  enum cudaDriverEntryPointQueryResult status;

  if (cudaGetDriverEntryPointByVersion ("cuMemGetAddressRange", (void **) &get_range, 12000,
                                        cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess)
    {
      get_range = NULL;
      (void) cudaGetLastError ();
    }

  for (guint l = 0; l < layout->n_layers; l++)
    for (guint p = 0; p < layout->n_planes; p++)
      {
        guint64 start = kv_cuda_layout_lane_start (layout, l, p);
        guint64 end = kv_cuda_layout_lane_end (layout, l, p);
        guint64 ends[2] = { start, end - 1 };

        for (guint e = 0; e < 2; e++)
          {
            struct cudaPointerAttributes attr;
            cudaError_t err = cudaPointerGetAttributes (&attr, (const void *) (guintptr) ends[e]);

            if (err != cudaSuccess)
              (void) cudaGetLastError ();
            if (err != cudaSuccess ||
                (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) ||
                attr.device != self->ordinal)
              {
                g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                             "KvCudaDevice: layer %u plane %u: address 0x%"
                             G_GINT64_MODIFIER "x (its %s byte) is not memory of"
                             " CUDA device %d", l, p, ends[e],
                             e == 0 ? "first" : "last", self->ordinal);
                return FALSE;
              }
          }

        if (get_range != NULL)
          {
            unsigned long long base = 0;
            size_t size = 0;

            /* Memory the driver cannot size (virtual memory management
             * mappings, on some drivers) keeps the two ends' check. */
            if (get_range (&base, &size, start) != 0)
              continue;
            if (end > base + size)
              {
                g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                             "KvCudaDevice: layer %u plane %u: bytes 0x%"
                             G_GINT64_MODIFIER "x to 0x%" G_GINT64_MODIFIER "x"
                             " are not inside one allocation (the one at 0x%llx"
                             " has %zu bytes)", l, p, start, end, base, size);
                return FALSE;
              }
          }
      }
  return TRUE;
}

static void lanes_stop (KvCudaDevice *self);
static void release_cuda (KvCudaDevice *self);
static gpointer issuer_thread (gpointer data);
static gpointer completer_thread (gpointer data);

static gboolean
lane_open (KvCudaDevice  *self,
           Lane          *lane,
           GError       **error)
{
  void *mapped = NULL;

  if (!cuda_check (cudaStreamCreateWithFlags (&lane->stream, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags", error))
    return FALSE;
  for (guint i = 0; i < WINDOW; i++)
    {
      if (!cuda_check (cudaEventCreateWithFlags (&lane->free_events[i],
                                                 cudaEventDisableTiming | cudaEventBlockingSync),
                       "cudaEventCreateWithFlags", error))
        return FALSE;
      lane->n_free_events++;
    }
  if (self->bounced)
    {
      if (!cuda_check (cudaHostAlloc ((void **) &lane->bounce, BOUNCE_BYTES, cudaHostAllocPortable),
                       "cudaHostAlloc of bounce memory", error))
        return FALSE;
      for (guint i = 0; i < 2; i++)
        if (!cuda_check (cudaEventCreateWithFlags (&lane->bounce_events[i],
                                                   cudaEventDisableTiming | cudaEventBlockingSync),
                         "cudaEventCreateWithFlags", error))
          return FALSE;
    }
  if (self->primary_mapped != NULL)
    {
      if (!cuda_check (cudaHostAlloc ((void **) &lane->ring, sizeof (KvCudaSpan) * RING_SPANS,
                                      cudaHostAllocMapped | cudaHostAllocPortable),
                       "cudaHostAlloc", error) ||
          !cuda_check (cudaHostGetDevicePointer (&mapped, lane->ring, 0),
                       "cudaHostGetDevicePointer", error))
        return FALSE;
      lane->ring_device = mapped;
    }
  return TRUE;
}

static gboolean
open_on_current_device (KvCudaDevice  *self,
                        GError       **error)
{
  KvDevice *device = KV_DEVICE (self);
  KvHostBuffer *primary = kv_device_get_primary (device);
  struct cudaDeviceProp prop;
  int max_pitch = 0;
  cudaError_t err;

  if (!cuda_check (cudaGetDeviceProperties (&prop, self->ordinal),
                   "cudaGetDeviceProperties", error))
    return FALSE;
  self->device_name = g_strdup (prop.name);
  if (cudaDeviceGetAttribute (&max_pitch, cudaDevAttrMaxPitch, self->ordinal) != cudaSuccess ||
      max_pitch <= 0)
    max_pitch = G_MAXINT;
  self->max_pitch = (guint64) max_pitch;

  if (self->owns_memory)
    {
      gsize layer_bytes = (gsize) self->layout.n_blocks * self->layout.block_bytes;

      if (!cuda_check (cudaMalloc (&self->memory, layer_bytes * self->layout.n_layers),
                       "cudaMalloc of the device's KV memory", error) ||
          !cuda_check (cudaMemset (self->memory, 0, layer_bytes * self->layout.n_layers),
                       "cudaMemset", error) ||
          /* The memset runs on the legacy stream, which the device's
           * non-blocking streams do not wait for. */
          !cuda_check (cudaStreamSynchronize (NULL), "cudaStreamSynchronize", error))
        return FALSE;
      for (guint l = 0; l < self->layout.n_layers; l++)
        self->layout.layer_addresses[l] = (guint64) (guintptr) self->memory + l * layer_bytes;
    }
  else if (!check_lanes_on_device (self, error))
    return FALSE;

  /* The primary buffer, pinned once: copies go straight to its slots. */
  self->primary_data = kv_host_buffer_get_data (primary);
  self->primary_size = kv_host_buffer_get_size (primary);
  err = cudaHostRegister (self->primary_data, self->primary_size,
                          cudaHostRegisterPortable | cudaHostRegisterMapped);
  if (err == cudaErrorHostMemoryAlreadyRegistered)
    (void) cudaGetLastError ();   /* someone else pinned it: theirs to unpin */
  else if (err != cudaSuccess)
    {
      /* Some sandboxes cannot pin memory they did not allocate: copy
       * through pinned memory of our own instead, at the cost of a CPU
       * copy of every byte. */
      (void) cudaGetLastError ();
      g_message ("KvCudaDevice: cudaHostRegister of the %" G_GSIZE_FORMAT "-byte primary"
                 " buffer failed: %s (%s); copies go through pinned bounce memory",
                 self->primary_size, cudaGetErrorName (err), cudaGetErrorString (err));
      self->bounced = TRUE;
    }
  else
    self->registered = TRUE;

  if (self->gather_run_bytes > 0 && !self->bounced)
    {
      void *mapped = NULL;

      /* Registered by someone else without the mapped flag: copies only. */
      if (cudaHostGetDevicePointer (&mapped, self->primary_data, 0) == cudaSuccess)
        self->primary_mapped = mapped;
      else
        (void) cudaGetLastError ();
    }

  for (guint d = 0; d < 2; d++)
    if (!lane_open (self, &self->lanes[d], error))
      return FALSE;
  return TRUE;
}

static gboolean
kv_cuda_device_open (KvDevice  *device,
                     GError   **error)
{
  KvCudaDevice *self = KV_CUDA_DEVICE (device);
  int count = 0;
  int previous = -1;
  cudaError_t err;
  gboolean ok;

  if (!build_layout (self, &self->layout, error))
    return FALSE;
  self->owns_memory = self->base_address == 0 &&
    (self->layer_address_texts == NULL || self->layer_address_texts[0] == NULL);

  err = cudaGetDeviceCount (&count);
  if (err != cudaSuccess || count == 0)
    {
      if (err != cudaSuccess)
        g_set_error (error, KV_CUDA_DEVICE_ERROR, KV_CUDA_DEVICE_ERROR_NOT_AVAILABLE,
                     "KvCudaDevice: CUDA is not available: %s (%s)",
                     cudaGetErrorName (err), cudaGetErrorString (err));
      else
        g_set_error (error, KV_CUDA_DEVICE_ERROR, KV_CUDA_DEVICE_ERROR_NOT_AVAILABLE,
                     "KvCudaDevice: CUDA is not available: the driver sees no device");
      (void) cudaGetLastError ();
      kv_cuda_layout_clear (&self->layout);
      return FALSE;
    }
  if (self->ordinal >= count)
    {
      g_set_error (error, KV_CUDA_DEVICE_ERROR, KV_CUDA_DEVICE_ERROR_NOT_AVAILABLE,
                   "KvCudaDevice: there is no CUDA device %d (%d found)",
                   self->ordinal, count);
      kv_cuda_layout_clear (&self->layout);
      return FALSE;
    }

  /* Leave the calling thread's current device as it was. */
  if (cudaGetDevice (&previous) != cudaSuccess)
    previous = -1;
  ok = cuda_check (cudaSetDevice (self->ordinal), "cudaSetDevice", error) &&
       open_on_current_device (self, error);
  if (!ok)
    release_cuda (self);
  if (previous >= 0 && previous != self->ordinal)
    (void) cudaSetDevice (previous);
  if (!ok)
    return FALSE;

  self->started = TRUE;
  for (guint d = 0; d < 2 && ok; d++)
    {
      Lane *lane = &self->lanes[d];

      lane->issuer = g_thread_try_new (d == 0 ? "kv-cuda-store" : "kv-cuda-load",
                                       issuer_thread, lane, error);
      lane->completer = lane->issuer == NULL ? NULL :
        g_thread_try_new (d == 0 ? "kv-cuda-store-done" : "kv-cuda-load-done",
                          completer_thread, lane, error);
      ok = lane->issuer != NULL && lane->completer != NULL;
    }
  if (!ok)
    {
      lanes_stop (self);
      release_cuda (self);
    }
  return ok;
}

typedef struct
{
  guint64 device;
  guint64 host_offset;
  guint64 bytes;
  guint64 bounce_offset;
} BouncePiece;

/* Waits for the batch in bounce half @half and, for a store, copies it out
 * to the primary slots. */
static void
bounce_drain (Lane    *lane,
              CudaJob *job,
              GArray  *batch,
              guint    half)
{
  KvCudaDevice *self = lane->self;
  cudaError_t err = cudaEventSynchronize (lane->bounce_events[half]);

  if (err != cudaSuccess)
    {
      (void) cudaGetLastError ();
      if (job->error == NULL)
        cuda_check (err, "the job's copies", &job->error);
    }
  if (lane->direction == KV_DEVICE_DIRECTION_TO_PRIMARY && job->error == NULL)
    for (guint i = 0; i < batch->len; i++)
      {
        const BouncePiece *piece = &g_array_index (batch, BouncePiece, i);

        memcpy (self->primary_data + piece->host_offset, lane->bounce + piece->bounce_offset,
                piece->bytes);
      }
  g_array_set_size (batch, 0);
}

/* Starts the batch in bounce half @half: for a load, its bytes copied in
 * from the slots first; then a copy per piece and the half's event. */
static void
bounce_start (Lane    *lane,
              CudaJob *job,
              GArray  *batch,
              guint    half)
{
  KvCudaDevice *self = lane->self;
  gboolean to_primary = lane->direction == KV_DEVICE_DIRECTION_TO_PRIMARY;
  cudaError_t err;

  for (guint i = 0; i < batch->len && job->error == NULL; i++)
    {
      const BouncePiece *piece = &g_array_index (batch, BouncePiece, i);
      void *dev = (void *) (guintptr) piece->device;
      void *bounce = lane->bounce + piece->bounce_offset;

      if (!to_primary)
        memcpy (bounce, self->primary_data + piece->host_offset, piece->bytes);
      err = cudaMemcpyAsync (to_primary ? bounce : dev, to_primary ? dev : bounce, piece->bytes,
                             to_primary ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                             lane->stream);
      if (err != cudaSuccess)
        {
          (void) cudaGetLastError ();
          cuda_check (err, "cudaMemcpyAsync", &job->error);
        }
    }
  err = cudaEventRecord (lane->bounce_events[half], lane->stream);
  if (err != cudaSuccess)
    {
      (void) cudaGetLastError ();
      if (job->error == NULL)
        cuda_check (err, "cudaEventRecord", &job->error);
    }
}

/* A job through bounce memory, all of it before this returns: batches of
 * half the bounce memory, the CPU filling or emptying one half while the
 * GPU copies the other. */
static void
issue_job_bounced (Lane    *lane,
                   CudaJob *job,
                   GArray  *runs)
{
  const guint64 half_bytes = BOUNCE_BYTES / 2;
  GArray *batches[2] = {
    g_array_new (FALSE, FALSE, sizeof (BouncePiece)),
    g_array_new (FALSE, FALSE, sizeof (BouncePiece)),
  };
  gboolean busy[2] = { FALSE, FALSE };
  guint half = 0;
  guint64 filled = 0;

  for (guint i = 0; i < runs->len && job->error == NULL; i++)
    {
      const KvCudaRun *run = &g_array_index (runs, KvCudaRun, i);

      for (guint64 r = 0; r < run->height && job->error == NULL; r++)
        for (guint64 at = 0; at < run->width && job->error == NULL; )
          {
            BouncePiece piece;

            if (filled == half_bytes)
              {
                bounce_start (lane, job, batches[half], half);
                busy[half] = TRUE;
                half ^= 1;
                filled = 0;
                if (busy[half])
                  bounce_drain (lane, job, batches[half], half);
                busy[half] = FALSE;
              }
            piece.device = run->device + r * run->device_pitch + at;
            piece.host_offset = run->host_offset + r * run->host_pitch + at;
            piece.bytes = MIN (run->width - at, half_bytes - filled);
            piece.bounce_offset = half * half_bytes + filled;
            g_array_append_val (batches[half], piece);
            filled += piece.bytes;
            at += piece.bytes;
          }
    }
  if (filled > 0 && job->error == NULL)
    {
      bounce_start (lane, job, batches[half], half);
      busy[half] = TRUE;
    }
  /* Both halves idle before the job is reported: its memory is free. */
  for (guint h = 0; h < 2; h++)
    {
      if (busy[h])
        bounce_drain (lane, job, batches[h], h);
      g_array_unref (batches[h]);
    }
}

/* Plans the job's copies and enqueues them and its event on the lane's
 * stream. Failures land in job->error; the event is still recorded after
 * whatever was enqueued, so the job is reported only once the GPU is done
 * with its memory. Runs on the issuer thread. */
static void
issue_job (Lane    *lane,
           CudaJob *job)
{
  KvCudaDevice *self = lane->self;
  gboolean to_primary = lane->direction == KV_DEVICE_DIRECTION_TO_PRIMARY;
  g_autoptr(GArray) runs = kv_cuda_layout_plan (&self->layout, job->copies, job->n_copies,
                                                self->max_pitch);
  guint64 rows = 0, bytes = 0, n_spans = 0;
  gboolean use_kernel;
  cudaError_t err;

  for (guint i = 0; i < runs->len; i++)
    {
      const KvCudaRun *run = &g_array_index (runs, KvCudaRun, i);

      rows += run->height;
      bytes += run->width * run->height;
      n_spans += run->height * ((run->width + KV_CUDA_SPAN_MAX_BYTES - 1) / KV_CUDA_SPAN_MAX_BYTES);
    }

  /* Many short rows: one kernel launch through the mapped primary beats a
   * copy call per row. */
  use_kernel = self->primary_mapped != NULL && lane->ring != NULL && rows > 1 &&
               bytes / rows <= self->gather_run_bytes && n_spans <= RING_SPANS;

  if (lane->bounce != NULL)
    issue_job_bounced (lane, job, runs);
  else if (use_kernel)
    {
      guint64 start, offset, k = 0;

      g_mutex_lock (&self->lock);
      while (!kv_cuda_ring_reserve (RING_SPANS, lane->ring_head, &lane->ring_tail, n_spans, &start))
        g_cond_wait (&lane->cond, &self->lock);
      lane->ring_head = start + n_spans;
      job->ring_end = lane->ring_head;
      g_mutex_unlock (&self->lock);

      offset = start % RING_SPANS;
      for (guint i = 0; i < runs->len; i++)
        {
          const KvCudaRun *run = &g_array_index (runs, KvCudaRun, i);

          for (guint64 r = 0; r < run->height; r++)
            for (guint64 at = 0; at < run->width; at += KV_CUDA_SPAN_MAX_BYTES)
              {
                KvCudaSpan *span = &lane->ring[offset + k++];
                guint64 dev = run->device + r * run->device_pitch + at;
                guint64 host = (guint64) (guintptr) self->primary_mapped +
                               run->host_offset + r * run->host_pitch + at;

                span->dst = to_primary ? host : dev;
                span->src = to_primary ? dev : host;
                span->bytes = MIN (KV_CUDA_SPAN_MAX_BYTES, run->width - at);
              }
        }
      g_assert (k == n_spans);
      err = kv_cuda_launch_copy_spans (lane->ring_device + offset, (unsigned int) n_spans,
                                       lane->stream);
      cuda_check (err, "the gather/scatter kernel launch", &job->error);
    }
  else
    {
      /* Explicit kinds: with cudaMemcpyDefault a device address CUDA does
       * not know (memory freed under us) would be read as host memory. */
      enum cudaMemcpyKind kind = to_primary ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;

      for (guint i = 0; i < runs->len && job->error == NULL; i++)
        {
          const KvCudaRun *run = &g_array_index (runs, KvCudaRun, i);
          void *dev = (void *) (guintptr) run->device;
          void *host = self->primary_data + run->host_offset;

          if (run->height == 1)
            err = cudaMemcpyAsync (to_primary ? host : dev, to_primary ? dev : host,
                                   run->width, kind, lane->stream);
          else if (to_primary)
            err = cudaMemcpy2DAsync (host, run->host_pitch, dev, run->device_pitch,
                                     run->width, run->height, kind, lane->stream);
          else
            err = cudaMemcpy2DAsync (dev, run->device_pitch, host, run->host_pitch,
                                     run->width, run->height, kind, lane->stream);
          if (err != cudaSuccess)
            (void) cudaGetLastError ();
          cuda_check (err, run->height == 1 ? "cudaMemcpyAsync" : "cudaMemcpy2DAsync",
                      &job->error);
        }
    }

  err = cudaEventRecord (job->event, lane->stream);
  if (err != cudaSuccess)
    {
      /* Nothing to wait for: the failure is reported in order. */
      (void) cudaGetLastError ();
      if (job->error == NULL)
        cuda_check (err, "cudaEventRecord", &job->error);
      g_mutex_lock (&self->lock);
      lane->free_events[lane->n_free_events++] = job->event;
      job->event = NULL;
      g_mutex_unlock (&self->lock);
    }
}

static gpointer
issuer_thread (gpointer data)
{
  Lane *lane = data;
  KvCudaDevice *self = lane->self;
  GError *set_error = NULL;
  cudaError_t err = cudaSetDevice (self->ordinal);

  /* Then every job fails, in order, saying why. */
  if (err != cudaSuccess)
    cuda_check (err, "cudaSetDevice", &set_error);

  g_mutex_lock (&self->lock);
  for (;;)
    {
      CudaJob *job;

      while (!lane->stopping &&
             (g_queue_is_empty (&lane->pending) || lane->n_free_events == 0))
        g_cond_wait (&lane->cond, &self->lock);
      if (g_queue_is_empty (&lane->pending))
        break;   /* stopping, and nothing left to issue */
      if (lane->n_free_events == 0)
        {
          g_cond_wait (&lane->cond, &self->lock);
          continue;
        }

      /* In the report queue before its copies are enqueued, so a
       * cancellation meanwhile queues its failures after this job. */
      job = g_queue_pop_head (&lane->pending);
      job->state = JOB_ISSUING;
      job->event = lane->free_events[--lane->n_free_events];
      g_queue_push_tail (&lane->issued, job);
      g_mutex_unlock (&self->lock);

      job->issued_ns = now_ns ();
      if (set_error != NULL)
        {
          job->error = g_error_copy (set_error);
          g_mutex_lock (&self->lock);
          lane->free_events[lane->n_free_events++] = job->event;
          job->event = NULL;
          g_mutex_unlock (&self->lock);
        }
      else
        issue_job (lane, job);

      g_mutex_lock (&self->lock);
      job->state = JOB_ISSUED;
      g_cond_broadcast (&lane->cond);
    }
  g_mutex_unlock (&self->lock);
  g_clear_error (&set_error);
  return NULL;
}

static void
report (KvCudaDevice *self,
        Lane         *lane,
        CudaJob      *job,
        gint64        done_ns,
        gint64        start_ns)
{
  g_autoptr(KvJobResult) result = kv_job_result_new (job->id, job->error == NULL);

  kv_job_result_set_transfer_time (result, (done_ns - start_ns) / 1e9);
  kv_job_result_set_transfer_bytes (result, job->error == NULL ?
                                    (gint64) job->n_copies * self->layout.block_bytes : 0);
  if (job->error != NULL)
    {
      g_autofree char *message = g_strdup_printf ("%s job %" G_GUINT64_FORMAT " failed: %s",
                                                  lane->direction == KV_DEVICE_DIRECTION_TO_PRIMARY ?
                                                    "store" : "load",
                                                  job->id, job->error->message);

      if (!g_error_matches (job->error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        g_message ("%s", message);
      g_mutex_lock (&self->lock);
      g_free (self->last_error);
      self->last_error = g_steal_pointer (&message);
      g_mutex_unlock (&self->lock);
    }
  kv_device_complete_job (KV_DEVICE (self), result);
}

static gpointer
completer_thread (gpointer data)
{
  Lane *lane = data;
  KvCudaDevice *self = lane->self;

  (void) cudaSetDevice (self->ordinal);

  g_mutex_lock (&self->lock);
  for (;;)
    {
      CudaJob *job;
      gint64 done_ns, start_ns;

      while ((job = g_queue_peek_head (&lane->issued)) == NULL ||
             job->state != JOB_ISSUED)
        {
          if (job == NULL && lane->stopping && g_queue_is_empty (&lane->pending))
            break;
          g_cond_wait (&lane->cond, &self->lock);
        }
      if (job == NULL)
        break;
      g_mutex_unlock (&self->lock);

      if (job->event != NULL)
        {
          cudaError_t err = cudaEventSynchronize (job->event);

          if (err != cudaSuccess)
            {
              (void) cudaGetLastError ();
              if (job->error == NULL)
                cuda_check (err, "the job's copies", &job->error);
            }
        }
      done_ns = now_ns ();

      g_mutex_lock (&self->lock);
      g_queue_pop_head (&lane->issued);
      if (job->event != NULL)
        lane->free_events[lane->n_free_events++] = job->event;
      job->event = NULL;
      if (job->ring_end != 0)
        lane->ring_tail = MAX (lane->ring_tail, job->ring_end);
      /* The job's own GPU time: from its issue or from the end of the job
       * before it, whichever is later. */
      start_ns = job->issued_ns != 0 ? MAX (job->issued_ns, lane->last_done_ns) : done_ns;
      lane->last_done_ns = done_ns;
      g_cond_broadcast (&lane->cond);
      g_mutex_unlock (&self->lock);

      report (self, lane, job, done_ns, start_ns);
      cuda_job_free (job);

      g_mutex_lock (&self->lock);
    }
  g_mutex_unlock (&self->lock);
  return NULL;
}

/* Fails the jobs not yet on the GPU; they are reported after the ones that
 * are, in order. Call with the lock held. */
static guint
cancel_pending_locked (Lane *lane)
{
  guint n = 0;
  CudaJob *job;

  while ((job = g_queue_pop_head (&lane->pending)) != NULL)
    {
      g_set_error (&job->error, G_IO_ERROR, G_IO_ERROR_CANCELLED,
                   "KvCudaDevice: the job was cancelled before it reached the GPU");
      job->state = JOB_ISSUED;
      g_queue_push_tail (&lane->issued, job);
      n++;
    }
  if (n > 0)
    g_cond_broadcast (&lane->cond);
  return n;
}

/* Cancels what is still on the host, lets the GPU finish the rest, reports
 * every job and joins the threads. */
static void
lanes_stop (KvCudaDevice *self)
{
  if (!self->started)
    return;

  g_mutex_lock (&self->lock);
  for (guint d = 0; d < 2; d++)
    {
      cancel_pending_locked (&self->lanes[d]);
      self->lanes[d].stopping = TRUE;
      g_cond_broadcast (&self->lanes[d].cond);
    }
  g_mutex_unlock (&self->lock);

  for (guint d = 0; d < 2; d++)
    {
      /* Both may be missing when starting them failed. */
      if (self->lanes[d].issuer != NULL)
        g_thread_join (g_steal_pointer (&self->lanes[d].issuer));
      if (self->lanes[d].completer != NULL)
        g_thread_join (g_steal_pointer (&self->lanes[d].completer));
    }
  self->started = FALSE;
}

/* Frees every CUDA resource open() got; safe on a half-opened device. */
static void
release_cuda (KvCudaDevice *self)
{
  int previous = -1;
  gboolean any = self->registered || self->memory != NULL || self->compute_stream != NULL ||
                 self->counter != NULL;

  for (guint d = 0; d < 2; d++)
    any = any || self->lanes[d].stream != NULL || self->lanes[d].n_free_events > 0 ||
          self->lanes[d].ring != NULL || self->lanes[d].bounce != NULL ||
          self->lanes[d].bounce_events[0] != NULL || self->lanes[d].bounce_events[1] != NULL;
  if (!any)
    return;

  if (cudaGetDevice (&previous) != cudaSuccess)
    previous = -1;
  (void) cudaSetDevice (self->ordinal);

  for (guint d = 0; d < 2; d++)
    {
      Lane *lane = &self->lanes[d];

      while (lane->n_free_events > 0)
        (void) cudaEventDestroy (lane->free_events[--lane->n_free_events]);
      if (lane->stream != NULL)
        (void) cudaStreamDestroy (g_steal_pointer (&lane->stream));
      if (lane->ring != NULL)
        (void) cudaFreeHost (g_steal_pointer (&lane->ring));
      lane->ring_device = NULL;
      if (lane->bounce != NULL)
        (void) cudaFreeHost (g_steal_pointer (&lane->bounce));
      for (guint i = 0; i < 2; i++)
        if (lane->bounce_events[i] != NULL)
          (void) cudaEventDestroy (g_steal_pointer (&lane->bounce_events[i]));
    }
  if (self->compute_stream != NULL)
    (void) cudaStreamDestroy (g_steal_pointer (&self->compute_stream));
  if (self->counter != NULL)
    (void) cudaFree (g_steal_pointer (&self->counter));
  if (self->registered)
    (void) cudaHostUnregister (self->primary_data);
  self->registered = FALSE;
  self->bounced = FALSE;
  self->primary_mapped = NULL;
  if (self->memory != NULL)
    (void) cudaFree (g_steal_pointer (&self->memory));
  (void) cudaGetLastError ();

  if (previous >= 0 && previous != self->ordinal)
    (void) cudaSetDevice (previous);
}

static gboolean
kv_cuda_device_submit (KvDevice            *device,
                       guint64              job_id,
                       KvDeviceDirection    direction,
                       const KvDeviceCopy  *copies,
                       guint                n_copies,
                       GError             **error)
{
  KvCudaDevice *self = KV_CUDA_DEVICE (device);
  Lane *lane;
  CudaJob *job;

  g_return_val_if_fail (direction == KV_DEVICE_DIRECTION_TO_PRIMARY ||
                        direction == KV_DEVICE_DIRECTION_TO_DEVICE, FALSE);

  job = g_new0 (CudaJob, 1);
  job->id = job_id;
  job->copies = g_memdup2 (copies, sizeof (KvDeviceCopy) * n_copies);
  job->n_copies = n_copies;
  job->state = JOB_PENDING;

  lane = &self->lanes[direction];
  g_mutex_lock (&self->lock);
  g_queue_push_tail (&lane->pending, job);
  g_cond_broadcast (&lane->cond);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

static void
kv_cuda_device_close (KvDevice *device)
{
  KvCudaDevice *self = KV_CUDA_DEVICE (device);

  lanes_stop (self);
  release_cuda (self);
}

static void
kv_cuda_device_dispose (GObject *object)
{
  KvCudaDevice *self = KV_CUDA_DEVICE (object);

  /* Jobs still in flight read and write memory released below. */
  lanes_stop (self);
  release_cuda (self);

  G_OBJECT_CLASS (kv_cuda_device_parent_class)->dispose (object);
}

static void
kv_cuda_device_finalize (GObject *object)
{
  KvCudaDevice *self = KV_CUDA_DEVICE (object);

  g_strfreev (self->layer_address_texts);
  kv_cuda_layout_clear (&self->layout);
  g_free (self->device_name);
  g_free (self->last_error);
  for (guint d = 0; d < 2; d++)
    g_cond_clear (&self->lanes[d].cond);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_cuda_device_parent_class)->finalize (object);
}

static void
kv_cuda_device_get_property (GObject    *object,
                             guint       prop_id,
                             GValue     *value,
                             GParamSpec *pspec)
{
  KvCudaDevice *self = KV_CUDA_DEVICE (object);

  switch (prop_id)
    {
    case PROP_LAYER_ADDRESSES:
      g_value_set_boxed (value, self->layer_address_texts);
      break;
    case PROP_BASE_ADDRESS:
      g_value_set_uint64 (value, self->base_address);
      break;
    case PROP_LAYER_STRIDE_BYTES:
      g_value_set_uint64 (value, self->layer_stride);
      break;
    case PROP_N_PLANES:
      g_value_set_uint (value, self->n_planes);
      break;
    case PROP_PLANE_STRIDE_BYTES:
      g_value_set_uint64 (value, self->plane_stride);
      break;
    case PROP_BLOCK_STRIDE_BYTES:
      g_value_set_uint64 (value, self->block_stride);
      break;
    case PROP_ORDINAL:
      g_value_set_int (value, self->ordinal);
      break;
    case PROP_GATHER_RUN_BYTES:
      g_value_set_uint64 (value, self->gather_run_bytes);
      break;
    case PROP_DEVICE_NAME:
      g_value_set_string (value, self->device_name);
      break;
    case PROP_BOUNCE_BUFFERED:
      g_value_set_boolean (value, self->bounced);
      break;
    case PROP_LAST_ERROR:
      g_value_take_string (value, kv_cuda_device_dup_last_error (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_cuda_device_set_property (GObject      *object,
                             guint         prop_id,
                             const GValue *value,
                             GParamSpec   *pspec)
{
  KvCudaDevice *self = KV_CUDA_DEVICE (object);

  switch (prop_id)
    {
    case PROP_LAYER_ADDRESSES:
      g_strfreev (self->layer_address_texts);
      self->layer_address_texts = g_value_dup_boxed (value);
      break;
    case PROP_BASE_ADDRESS:
      self->base_address = g_value_get_uint64 (value);
      break;
    case PROP_LAYER_STRIDE_BYTES:
      self->layer_stride = g_value_get_uint64 (value);
      break;
    case PROP_N_PLANES:
      self->n_planes = g_value_get_uint (value);
      break;
    case PROP_PLANE_STRIDE_BYTES:
      self->plane_stride = g_value_get_uint64 (value);
      break;
    case PROP_BLOCK_STRIDE_BYTES:
      self->block_stride = g_value_get_uint64 (value);
      break;
    case PROP_ORDINAL:
      self->ordinal = g_value_get_int (value);
      break;
    case PROP_GATHER_RUN_BYTES:
      self->gather_run_bytes = g_value_get_uint64 (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_cuda_device_class_init (KvCudaDeviceClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvDeviceClass *device_class = KV_DEVICE_CLASS (klass);
  GParamFlags construct = G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY;

  object_class->dispose = kv_cuda_device_dispose;
  object_class->finalize = kv_cuda_device_finalize;
  object_class->get_property = kv_cuda_device_get_property;
  object_class->set_property = kv_cuda_device_set_property;

  device_class->open = kv_cuda_device_open;
  device_class->submit = kv_cuda_device_submit;
  device_class->close = kv_cuda_device_close;

  /**
   * KvCudaDevice:layer-addresses:
   *
   * The device address of each layer's KV memory, one per layer, as
   * decimal or `0x` hexadecimal text (Python: `str(t.data_ptr())`).
   * Exclusive with [property@Kv.CudaDevice:base-address]; with neither,
   * the device allocates memory of its own.
   */
  properties[PROP_LAYER_ADDRESSES] =
    g_param_spec_boxed ("layer-addresses", NULL,
                        "Device address of each layer's KV memory",
                        G_TYPE_STRV, construct);

  /**
   * KvCudaDevice:base-address:
   *
   * The device address of layer 0 when layers are
   * [property@Kv.CudaDevice:layer-stride-bytes] apart in one allocation
   * (vLLM's cross-layer "blocks first" tensor). 0: not set.
   */
  properties[PROP_BASE_ADDRESS] =
    g_param_spec_uint64 ("base-address", NULL, "Device address of layer 0",
                         0, G_MAXUINT64, 0, construct);

  /**
   * KvCudaDevice:layer-stride-bytes:
   *
   * Bytes from one layer to the next, with
   * [property@Kv.CudaDevice:base-address].
   */
  properties[PROP_LAYER_STRIDE_BYTES] =
    g_param_spec_uint64 ("layer-stride-bytes", NULL, "Bytes from one layer to the next",
                         0, G_MAXUINT64, 0, construct);

  /**
   * KvCudaDevice:n-planes:
   *
   * The pieces of one block of one layer that are apart in device memory
   * (2 for K and V in separate planes); each is block-bytes / n-planes
   * bytes, adjacent in the primary slot.
   */
  properties[PROP_N_PLANES] =
    g_param_spec_uint ("n-planes", NULL, "Planes per block (K and V: 2)",
                       1, KV_CUDA_LAYOUT_MAX_PLANES, 1, construct);

  /**
   * KvCudaDevice:plane-stride-bytes:
   *
   * Bytes from one plane of a block to the next (vLLM's per-layer
   * `(2, num_blocks, ...)` tensor: num_blocks × the bytes of a plane).
   */
  properties[PROP_PLANE_STRIDE_BYTES] =
    g_param_spec_uint64 ("plane-stride-bytes", NULL, "Bytes from one plane to the next",
                         0, G_MAXUINT64, 0, construct);

  /**
   * KvCudaDevice:block-stride-bytes:
   *
   * Bytes from one block of a layer to the next; 0: the bytes of a plane
   * (blocks packed).
   */
  properties[PROP_BLOCK_STRIDE_BYTES] =
    g_param_spec_uint64 ("block-stride-bytes", NULL, "Bytes from one block to the next",
                         0, G_MAXUINT64, 0, construct);

  /**
   * KvCudaDevice:ordinal:
   *
   * The CUDA device the memory belongs to.
   */
  properties[PROP_ORDINAL] =
    g_param_spec_int ("ordinal", NULL, "CUDA device number",
                      0, 1023, 0, construct);

  /**
   * KvCudaDevice:gather-run-bytes:
   *
   * Jobs whose copies average at most this many bytes per contiguous run
   * are moved by one gather/scatter kernel launch reading or writing the
   * mapped primary buffer; longer runs use the copy engines. 0: never the
   * kernel.
   */
  properties[PROP_GATHER_RUN_BYTES] =
    g_param_spec_uint64 ("gather-run-bytes", NULL,
                         "Largest average run moved by the gather/scatter kernel",
                         0, G_MAXUINT64, 256 * 1024, construct);

  /**
   * KvCudaDevice:device-name:
   *
   * The GPU's name, once initialized.
   */
  properties[PROP_DEVICE_NAME] =
    g_param_spec_string ("device-name", NULL, "The GPU's name", NULL,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);

  /**
   * KvCudaDevice:bounce-buffered:
   *
   * Whether the primary buffer could not be registered with CUDA (some
   * sandboxes cannot pin memory they did not allocate), so that copies go
   * through pinned memory of the device's own, with a CPU copy of every
   * byte and no gather/scatter kernel.
   */
  properties[PROP_BOUNCE_BUFFERED] =
    g_param_spec_boolean ("bounce-buffered", NULL, "Copies go through bounce memory", FALSE,
                          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);

  /**
   * KvCudaDevice:last-error:
   *
   * Why the last failed job failed (a CUDA error or a cancellation), or
   * %NULL.
   */
  properties[PROP_LAST_ERROR] =
    g_param_spec_string ("last-error", NULL, "Why the last failed job failed", NULL,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);

  /**
   * KvCudaDevice::cancel:
   * @self: a CUDA device
   *
   * Fails the jobs not yet handed to the GPU: see kv_cuda_device_cancel().
   * An action signal, so bindings can emit it.
   *
   * Returns: the number of jobs cancelled
   */
  signals[SIGNAL_CANCEL] =
    g_signal_new_class_handler ("cancel", G_TYPE_FROM_CLASS (klass),
                                G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
                                G_CALLBACK (kv_cuda_device_cancel),
                                g_signal_accumulator_first_wins, NULL, NULL,
                                G_TYPE_UINT, 0);

  /**
   * KvCudaDevice::fill-blocks:
   * @self: an initialized CUDA device
   * @seed: what to fill with
   * @first_block: the first block
   * @n_blocks: how many blocks
   *
   * Writes the blocks first_block .. first_block + n_blocks − 1 of every
   * layer on the GPU, as a benchmark's "compute" would: every 64-bit word
   * of layer `l` becomes the same value, derived from @seed and `l`
   * (kvtier bench's chunk pattern). Synchronous, on a stream of its own;
   * for benchmarks and tests. An action signal: bindings emit it.
   *
   * Returns: %TRUE on success, %FALSE (with a message logged) when the
   *   blocks are out of range or a CUDA call failed
   */
  signals[SIGNAL_FILL_BLOCKS] =
    g_signal_new_class_handler ("fill-blocks", G_TYPE_FROM_CLASS (klass),
                                G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
                                G_CALLBACK (kv_cuda_device_fill_blocks),
                                g_signal_accumulator_first_wins, NULL, NULL,
                                G_TYPE_BOOLEAN, 3, G_TYPE_UINT64, G_TYPE_UINT, G_TYPE_UINT);

  /**
   * KvCudaDevice::check-blocks:
   * @self: an initialized CUDA device
   * @seed: what the blocks should hold
   * @first_block: the first block
   * @n_blocks: how many blocks
   *
   * Counts, on the GPU, the 64-bit words of those blocks of every layer
   * that differ from what [signal@Kv.CudaDevice::fill-blocks] writes for
   * @seed: 0 means a byte-exact match. Synchronous; for benchmarks and
   * tests.
   *
   * Returns: the number of differing words, or %G_MAXUINT64 (with a
   *   message logged) when the blocks are out of range or a CUDA call
   *   failed
   */
  signals[SIGNAL_CHECK_BLOCKS] =
    g_signal_new_class_handler ("check-blocks", G_TYPE_FROM_CLASS (klass),
                                G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
                                G_CALLBACK (kv_cuda_device_check_blocks),
                                g_signal_accumulator_first_wins, NULL, NULL,
                                G_TYPE_UINT64, 3, G_TYPE_UINT64, G_TYPE_UINT, G_TYPE_UINT);
}

static void
kv_cuda_device_init (KvCudaDevice *self)
{
  g_mutex_init (&self->lock);
  self->n_planes = 1;
  self->gather_run_bytes = 256 * 1024;
  for (guint d = 0; d < 2; d++)
    {
      Lane *lane = &self->lanes[d];

      lane->self = self;
      lane->direction = d == 0 ? KV_DEVICE_DIRECTION_TO_PRIMARY : KV_DEVICE_DIRECTION_TO_DEVICE;
      g_cond_init (&lane->cond);
      g_queue_init (&lane->pending);
      g_queue_init (&lane->issued);
    }
}

/**
 * kv_cuda_device_cancel:
 * @self: a CUDA device
 *
 * Fails every job not yet handed to the GPU (each direction keeps at most
 * 32 jobs on its stream; the rest wait on the host) with
 * %G_IO_ERROR_CANCELLED. Jobs on the GPU finish normally. Every job is
 * still reported once, in order. May be called from any thread.
 *
 * Returns: the number of jobs cancelled
 */
guint
kv_cuda_device_cancel (KvCudaDevice *self)
{
  guint n = 0;

  g_return_val_if_fail (KV_IS_CUDA_DEVICE (self), 0);

  g_mutex_lock (&self->lock);
  for (guint d = 0; d < 2; d++)
    n += cancel_pending_locked (&self->lanes[d]);
  g_mutex_unlock (&self->lock);
  return n;
}

/**
 * kv_cuda_device_get_ordinal:
 * @self: a CUDA device
 *
 * Returns: the CUDA device number
 */
int
kv_cuda_device_get_ordinal (KvCudaDevice *self)
{
  g_return_val_if_fail (KV_IS_CUDA_DEVICE (self), -1);

  return self->ordinal;
}

/**
 * kv_cuda_device_get_layer_address:
 * @self: an initialized CUDA device
 * @layer: a layer
 *
 * Gets where @layer's blocks start (plane 0 of block 0), including in
 * memory the device allocated itself.
 *
 * Returns: the device address, or 0 when @layer is out of range
 */
guint64
kv_cuda_device_get_layer_address (KvCudaDevice *self,
                                  guint         layer)
{
  g_return_val_if_fail (KV_IS_CUDA_DEVICE (self), 0);

  if (self->layout.layer_addresses == NULL || layer >= self->layout.n_layers)
    return 0;
  return self->layout.layer_addresses[layer];
}

/**
 * kv_cuda_device_dup_last_error:
 * @self: a CUDA device
 *
 * Returns: (transfer full) (nullable): why the last failed job failed
 */
char *
kv_cuda_device_dup_last_error (KvCudaDevice *self)
{
  char *text;

  g_return_val_if_fail (KV_IS_CUDA_DEVICE (self), NULL);

  g_mutex_lock (&self->lock);
  text = g_strdup (self->last_error);
  g_mutex_unlock (&self->lock);
  return text;
}

/* Fills (or, with @mismatches, checks) blocks of every layer with the
 * bench's chunk pattern, on the compute stream, and waits. */
static gboolean
run_on_blocks (KvCudaDevice  *self,
               guint64        seed,
               guint          first_block,
               guint          n_blocks,
               guint64       *mismatches,
               GError       **error)
{
  const KvCudaLayout *layout = &self->layout;
  gboolean contiguous = layout->block_stride == layout->plane_bytes;
  unsigned long long count = 0;
  int previous = -1;
  gboolean ok = TRUE;

  if (!self->started)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                   "KvCudaDevice: the device is not initialized or was shut down");
      return FALSE;
    }
  if (first_block >= layout->n_blocks || n_blocks > layout->n_blocks - first_block ||
      layout->plane_bytes % 8 != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: blocks %u to %u are not whole 64-bit words of the"
                   " %u blocks", first_block, first_block + n_blocks, layout->n_blocks);
      return FALSE;
    }

  if (cudaGetDevice (&previous) != cudaSuccess)
    previous = -1;
  ok = cuda_check (cudaSetDevice (self->ordinal), "cudaSetDevice", error);
  if (ok && self->compute_stream == NULL)
    ok = cuda_check (cudaStreamCreateWithFlags (&self->compute_stream, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags", error);
  if (ok && mismatches != NULL && self->counter == NULL)
    ok = cuda_check (cudaMalloc ((void **) &self->counter, sizeof *self->counter),
                     "cudaMalloc", error);
  if (ok && mismatches != NULL)
    ok = cuda_check (cudaMemsetAsync (self->counter, 0, sizeof *self->counter,
                                      self->compute_stream), "cudaMemsetAsync", error);

  for (guint l = 0; ok && l < layout->n_layers; l++)
    for (guint p = 0; ok && p < layout->n_planes; p++)
      {
        unsigned long long word = kv_cuda_pattern_word (seed, l + 1);
        guint n_runs = contiguous ? 1 : n_blocks;
        guint64 words = (contiguous ? n_blocks : 1) * layout->plane_bytes / 8;

        for (guint r = 0; ok && r < n_runs; r++)
          {
            unsigned long long *at = (unsigned long long *) (guintptr)
              (kv_cuda_layout_lane_start (layout, l, p) +
               (guint64) (first_block + r) * layout->block_stride);
            cudaError_t err;

            if (mismatches != NULL)
              err = kv_cuda_launch_check_word (at, words, word, self->counter, self->compute_stream);
            else
              err = kv_cuda_launch_fill_word (at, words, word, self->compute_stream);
            ok = cuda_check (err, mismatches != NULL ? "the check kernel" : "the fill kernel", error);
          }
      }

  if (ok && mismatches != NULL)
    ok = cuda_check (cudaMemcpyAsync (&count, self->counter, sizeof count, cudaMemcpyDeviceToHost,
                                      self->compute_stream), "cudaMemcpyAsync", error);
  if (ok)
    ok = cuda_check (cudaStreamSynchronize (self->compute_stream), "cudaStreamSynchronize", error);
  if (!ok)
    (void) cudaGetLastError ();
  if (previous >= 0 && previous != self->ordinal)
    (void) cudaSetDevice (previous);
  if (ok && mismatches != NULL)
    *mismatches = count;
  return ok;
}

/**
 * kv_cuda_device_fill_blocks:
 * @self: an initialized CUDA device
 * @seed: what to fill with
 * @first_block: the first block
 * @n_blocks: how many blocks
 *
 * The handler of [signal@Kv.CudaDevice::fill-blocks].
 *
 * Returns: %TRUE on success
 */
gboolean
kv_cuda_device_fill_blocks (KvCudaDevice *self,
                            guint64       seed,
                            guint         first_block,
                            guint         n_blocks)
{
  g_autoptr(GError) error = NULL;

  g_return_val_if_fail (KV_IS_CUDA_DEVICE (self), FALSE);

  if (!run_on_blocks (self, seed, first_block, n_blocks, NULL, &error))
    {
      g_message ("fill-blocks: %s", error->message);
      return FALSE;
    }
  return TRUE;
}

/**
 * kv_cuda_device_check_blocks:
 * @self: an initialized CUDA device
 * @seed: what the blocks should hold
 * @first_block: the first block
 * @n_blocks: how many blocks
 *
 * The handler of [signal@Kv.CudaDevice::check-blocks].
 *
 * Returns: the number of differing 64-bit words, or %G_MAXUINT64 on error
 */
guint64
kv_cuda_device_check_blocks (KvCudaDevice *self,
                             guint64       seed,
                             guint         first_block,
                             guint         n_blocks)
{
  g_autoptr(GError) error = NULL;
  guint64 mismatches = 0;

  g_return_val_if_fail (KV_IS_CUDA_DEVICE (self), G_MAXUINT64);

  if (!run_on_blocks (self, seed, first_block, n_blocks, &mismatches, &error))
    {
      g_message ("check-blocks: %s", error->message);
      return G_MAXUINT64;
    }
  return mismatches;
}
