/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-host-device.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kv-configurable.h"

#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
# include <xxh_x86dispatch.h>
# define host_xxh3_update XXH3_64bits_update_dispatch
#else
# define host_xxh3_update XXH3_64bits_update
#endif

/* A chunk copied into the primary is hashed in pieces of this size right
 * after each is copied, while the piece is still in the core's cache: one
 * pass over memory instead of the copy now and a tier's read of the whole
 * slot later. Small enough for L2 with room to spare, large enough that
 * the per-update cost does not show. */
#define HASH_PIECE ((gsize) 64 * 1024)

#ifndef MADV_POPULATE_WRITE
# define MADV_POPULATE_WRITE 23
#endif

typedef struct _HostJob HostJob;

struct _HostJob
{
  guint64            id;
  KvDeviceDirection  direction;
  KvDeviceCopy      *copies;
  guint              n_copies;
  gint               pieces_left;   /* (atomic) tasks still copying */
  gint64             start_ns;
};

typedef struct
{
  HostJob *job;
  guint    first;
  guint    end;
} HostTask;

/**
 * KvHostDevice:
 *
 * A [class@Kv.Device] whose "device memory" is host memory: the simulated
 * GPU of tests, benchmarks and CPU-only engines.
 *
 * Device memory is one anonymous mapping of n-layers × n-blocks ×
 * block-bytes bytes, layer by layer (block `b` of layer `l` starts at
 * `(l × n-blocks + b) × block-bytes`), populated when the device is
 * initialized so page faults stay out of transfers. A job's pieces are
 * split among [property@Kv.HostDevice:n-workers] threads of a
 * [struct@GLib.ThreadPool]; one job per direction runs at a time, so each
 * direction is a strict FIFO, and the last worker to finish a job reports
 * it with [method@Kv.Device.complete_job].
 *
 * Copying into the primary, a worker takes whole chunks and computes each
 * chunk's checksum as it copies it (in cache-sized pieces, each hashed
 * right after it is copied), then carries it with the slot
 * ([method@Kv.HostBuffer.set_slot_checksum]) for the tiers that store the
 * chunk. A job of fewer chunks than workers copies on fewer workers.
 *
 * C code reads and writes device memory with
 * [method@Kv.HostDevice.peek_block]; bindings use
 * [method@Kv.HostDevice.read_block] and [method@Kv.HostDevice.write_block].
 * Block memory belongs to whoever owns the block: the engine must not touch
 * a block while a job copies it.
 */
struct _KvHostDevice
{
  KvDevice      parent_instance;

  guint         n_workers;

  guint8       *memory;
  gsize         memory_size;
  guint8       *primary_data;
  KvHostBuffer *primary;
  gsize         slot_size;
  gsize         block_bytes;
  guint         n_blocks;
  guint         n_layers;

  GThreadPool  *pool;

  GMutex        lock;
  GCond         idle_cond;   /* signalled when a direction runs dry */
  GQueue        queued[2];   /* (element-type HostJob) waiting per direction */
  HostJob      *active[2];   /* the job copying now, per direction */
};

enum {
  PROP_0,
  PROP_N_WORKERS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void kv_host_device_configurable_iface_init (KvConfigurableInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvHostDevice, kv_host_device, KV_TYPE_DEVICE,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                      kv_host_device_configurable_iface_init))

static KvConfigurableInterface *kv_host_device_configurable_parent;

static gint64
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}

static void
host_job_free (HostJob *job)
{
  g_free (job->copies);
  g_free (job);
}

static void start_job (KvHostDevice *self,
                       HostJob      *job);

/* Reports @job and returns the next job of its direction, now active. */
static HostJob *
finish_job (KvHostDevice *self,
            HostJob      *job)
{
  g_autoptr(KvJobResult) result = NULL;
  KvDeviceDirection direction = job->direction;
  HostJob *next;

  result = kv_job_result_new (job->id, TRUE);
  kv_job_result_set_transfer_time (result, (now_ns () - job->start_ns) / 1e9);
  kv_job_result_set_transfer_bytes (result, (gint64) job->n_copies * self->block_bytes);

  /* Report before the next job starts, so results of one direction arrive
   * in submission order. */
  kv_device_complete_job (KV_DEVICE (self), result);

  g_mutex_lock (&self->lock);
  next = g_queue_pop_head (&self->queued[direction]);
  self->active[direction] = next;
  if (next == NULL)
    g_cond_broadcast (&self->idle_cond);
  g_mutex_unlock (&self->lock);

  host_job_free (job);
  return next;
}

static inline guint8 *
device_piece (KvHostDevice       *self,
              const KvDeviceCopy *copy)
{
  return self->memory + ((gsize) copy->layer * self->n_blocks + copy->block) * self->block_bytes;
}

static inline guint32
slot_of (KvHostDevice       *self,
         const KvDeviceCopy *copy)
{
  return (guint32) (copy->primary_offset / self->slot_size);
}

/* Copies pieces [first, end) of @job, which all go to one slot and are
 * all of that slot's pieces in the job, hashing the slot as they go: the
 * bytes between and around the pieces (a partial chunk's leading block of
 * each layer, a slot larger than a chunk) are the slot's own, which nobody
 * changes while it is being stored. Pieces out of order or overlapping
 * (never from kv_device_submit_store()) are copied without a checksum. */
static void
copy_chunk_hashed (KvHostDevice *self,
                   HostJob      *job,
                   guint         first,
                   guint         end)
{
  guint32 slot = slot_of (self, &job->copies[first]);
  guint8 *slot_data = self->primary_data + (gsize) slot * self->slot_size;
  gsize slot_base = (gsize) slot * self->slot_size;
  gsize pos = 0;
  XXH3_state_t state;
  gboolean ordered = TRUE;

  for (guint i = first + 1; i < end && ordered; i++)
    ordered = job->copies[i].primary_offset >= job->copies[i - 1].primary_offset + self->block_bytes;
  if (!ordered)
    {
      for (guint i = first; i < end; i++)
        memcpy (self->primary_data + job->copies[i].primary_offset,
                device_piece (self, &job->copies[i]), self->block_bytes);
      return;
    }

  XXH3_64bits_reset (&state);
  for (guint i = first; i < end; i++)
    {
      const guint8 *src = device_piece (self, &job->copies[i]);
      gsize offset = job->copies[i].primary_offset - slot_base;

      if (offset > pos)
        host_xxh3_update (&state, slot_data + pos, offset - pos);
      pos = offset;
      for (gsize done = 0; done < self->block_bytes; done += HASH_PIECE)
        {
          gsize n = MIN (HASH_PIECE, self->block_bytes - done);

          memcpy (slot_data + pos, src + done, n);
          host_xxh3_update (&state, slot_data + pos, n);
          pos += n;
        }
    }
  if (pos < self->slot_size)
    host_xxh3_update (&state, slot_data + pos, self->slot_size - pos);
  kv_host_buffer_set_slot_checksum (self->primary, slot, XXH3_64bits_digest (&state));
}

static void
run_task (gpointer data,
          gpointer user_data)
{
  KvHostDevice *self = user_data;
  HostTask *task = data;
  HostJob *job = task->job;

  if (job->direction == KV_DEVICE_DIRECTION_TO_PRIMARY)
    {
      /* start_job() split the job on slot boundaries */
      for (guint i = task->first; i < task->end;)
        {
          guint32 slot = slot_of (self, &job->copies[i]);
          guint end = i + 1;

          while (end < task->end && slot_of (self, &job->copies[end]) == slot)
            end++;
          copy_chunk_hashed (self, job, i, end);
          i = end;
        }
    }
  else
    {
      for (guint i = task->first; i < task->end; i++)
        memcpy (device_piece (self, &job->copies[i]),
                self->primary_data + job->copies[i].primary_offset, self->block_bytes);
    }
  g_free (task);

  if (g_atomic_int_dec_and_test (&job->pieces_left))
    {
      HostJob *next = finish_job (self, job);

      if (next != NULL)
        start_job (self, next);
    }
}

/* Splits @job among the workers; empty jobs finish here, in order. */
static void
start_job (KvHostDevice *self,
           HostJob      *job)
{
  guint n_tasks;

  while (job != NULL && job->n_copies == 0)
    {
      job->start_ns = now_ns ();
      job = finish_job (self, job);
    }
  if (job == NULL)
    return;

  n_tasks = MIN (self->n_workers, job->n_copies);
  job->start_ns = now_ns ();
  if (job->direction == KV_DEVICE_DIRECTION_TO_PRIMARY)
    {
      /* Whole chunks per task, so that one worker hashes each chunk: each
       * even split point moves on to the next slot's first piece, and the
       * tasks left empty are dropped. */
      guint bounds[257];
      guint n = 0;

      n_tasks = MIN (n_tasks, G_N_ELEMENTS (bounds) - 1);
      bounds[0] = 0;
      for (guint t = 1; t <= n_tasks; t++)
        {
          guint b = t == n_tasks ? job->n_copies
                                 : (guint) ((guint64) job->n_copies * t / n_tasks);

          b = MAX (b, bounds[n]);
          while (b > 0 && b < job->n_copies &&
                 slot_of (self, &job->copies[b]) == slot_of (self, &job->copies[b - 1]))
            b++;
          if (b > bounds[n])
            bounds[++n] = b;
        }
      g_atomic_int_set (&job->pieces_left, (gint) n);
      for (guint t = 0; t < n; t++)
        {
          HostTask *task = g_new (HostTask, 1);

          task->job = job;
          task->first = bounds[t];
          task->end = bounds[t + 1];
          g_thread_pool_push (self->pool, task, NULL);
        }
      return;
    }
  g_atomic_int_set (&job->pieces_left, (gint) n_tasks);
  for (guint t = 0; t < n_tasks; t++)
    {
      HostTask *task = g_new (HostTask, 1);

      task->job = job;
      task->first = (guint) ((guint64) job->n_copies * t / n_tasks);
      task->end = (guint) ((guint64) job->n_copies * (t + 1) / n_tasks);
      g_thread_pool_push (self->pool, task, NULL);
    }
}

/* What open() refuses before it maps anything; also the KvConfigurable
 * check, after the device's own. */
static gboolean
check_memory_size (KvDevice  *device,
                   GError   **error)
{
  gsize block_bytes = kv_device_get_block_bytes (device);
  guint n_blocks = kv_device_get_n_blocks (device);
  guint n_layers = kv_device_get_n_layers (device);

  if ((guint64) n_layers * n_blocks > G_MAXSIZE / block_bytes)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvHostDevice: %u layers × %u blocks × %" G_GSIZE_FORMAT
                   " bytes overflow the address space",
                   n_layers, n_blocks, block_bytes);
      return FALSE;
    }
  return TRUE;
}

static gboolean
kv_host_device_check (KvConfigurable  *configurable,
                      GError         **error)
{
  return kv_host_device_configurable_parent->check (configurable, error) &&
         check_memory_size (KV_DEVICE (configurable), error);
}

static void
kv_host_device_configurable_iface_init (KvConfigurableInterface *iface)
{
  kv_host_device_configurable_parent = g_type_interface_peek_parent (iface);
  iface->check = kv_host_device_check;
}

static gboolean
kv_host_device_open (KvDevice  *device,
                     GError   **error)
{
  KvHostDevice *self = KV_HOST_DEVICE (device);
  KvHostBuffer *primary = kv_device_get_primary (device);
  void *memory;

  self->block_bytes = kv_device_get_block_bytes (device);
  self->n_blocks = kv_device_get_n_blocks (device);
  self->n_layers = kv_device_get_n_layers (device);
  self->primary_data = kv_host_buffer_get_data (primary);
  self->primary = primary;
  self->slot_size = kv_host_buffer_get_slot_size (primary);

  if (!check_memory_size (device, error))
    return FALSE;
  self->memory_size = (gsize) self->n_layers * self->n_blocks * self->block_bytes;

  memory = mmap (NULL, self->memory_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "KvHostDevice: could not map %" G_GSIZE_FORMAT
                   " bytes of device memory: %s",
                   self->memory_size, g_strerror (errsv));
      return FALSE;
    }
  /* A real device's memory is resident; fault it in now (huge pages where
   * the kernel has them) so first-touch faults stay out of transfers. An old
   * kernel without MADV_POPULATE_WRITE just faults later. */
  (void) madvise (memory, self->memory_size, MADV_HUGEPAGE);
  (void) madvise (memory, self->memory_size, MADV_POPULATE_WRITE);
  self->memory = memory;

  self->pool = g_thread_pool_new (run_task, self, (gint) self->n_workers, TRUE, error);
  if (self->pool == NULL)
    {
      munmap (self->memory, self->memory_size);
      self->memory = NULL;
      return FALSE;
    }

  return TRUE;
}

static gboolean
kv_host_device_submit (KvDevice            *device,
                       guint64              job_id,
                       KvDeviceDirection    direction,
                       const KvDeviceCopy  *copies,
                       guint                n_copies,
                       GError             **error)
{
  KvHostDevice *self = KV_HOST_DEVICE (device);
  HostJob *job;
  gboolean start;

  g_return_val_if_fail (direction == KV_DEVICE_DIRECTION_TO_PRIMARY ||
                        direction == KV_DEVICE_DIRECTION_TO_DEVICE, FALSE);

  job = g_new0 (HostJob, 1);
  job->id = job_id;
  job->direction = direction;
  job->copies = g_memdup2 (copies, sizeof (KvDeviceCopy) * n_copies);
  job->n_copies = n_copies;

  g_mutex_lock (&self->lock);
  start = self->active[direction] == NULL;
  if (start)
    self->active[direction] = job;
  else
    g_queue_push_tail (&self->queued[direction], job);
  g_mutex_unlock (&self->lock);

  if (start)
    start_job (self, job);
  return TRUE;
}

/* Stops the workers once every job has finished; safe to call twice. */
static void
stop_workers (KvHostDevice *self)
{
  if (self->pool == NULL)
    return;

  /* Jobs start their successors from worker threads, so wait for the
   * queues to empty before the pool goes away. */
  g_mutex_lock (&self->lock);
  while (self->active[0] != NULL || self->active[1] != NULL)
    g_cond_wait (&self->idle_cond, &self->lock);
  g_mutex_unlock (&self->lock);

  g_thread_pool_free (g_steal_pointer (&self->pool), FALSE, TRUE);
}

static void
kv_host_device_close (KvDevice *device)
{
  stop_workers (KV_HOST_DEVICE (device));
}

static void
kv_host_device_dispose (GObject *object)
{
  KvHostDevice *self = KV_HOST_DEVICE (object);

  /* Copies still running read and write memory that finalize unmaps. */
  stop_workers (self);

  G_OBJECT_CLASS (kv_host_device_parent_class)->dispose (object);
}

static void
kv_host_device_finalize (GObject *object)
{
  KvHostDevice *self = KV_HOST_DEVICE (object);

  if (self->memory != NULL)
    munmap (self->memory, self->memory_size);
  g_cond_clear (&self->idle_cond);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_host_device_parent_class)->finalize (object);
}

static void
kv_host_device_get_property (GObject    *object,
                             guint       prop_id,
                             GValue     *value,
                             GParamSpec *pspec)
{
  KvHostDevice *self = KV_HOST_DEVICE (object);

  switch (prop_id)
    {
    case PROP_N_WORKERS:
      g_value_set_uint (value, self->n_workers);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_host_device_set_property (GObject      *object,
                             guint         prop_id,
                             const GValue *value,
                             GParamSpec   *pspec)
{
  KvHostDevice *self = KV_HOST_DEVICE (object);

  switch (prop_id)
    {
    case PROP_N_WORKERS:
      self->n_workers = g_value_get_uint (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_host_device_class_init (KvHostDeviceClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvDeviceClass *device_class = KV_DEVICE_CLASS (klass);

  object_class->dispose = kv_host_device_dispose;
  object_class->finalize = kv_host_device_finalize;
  object_class->get_property = kv_host_device_get_property;
  object_class->set_property = kv_host_device_set_property;

  device_class->open = kv_host_device_open;
  device_class->submit = kv_host_device_submit;
  device_class->close = kv_host_device_close;

  /**
   * KvHostDevice:n-workers:
   *
   * The number of copy threads; a job's pieces are split among them.
   */
  properties[PROP_N_WORKERS] =
    g_param_spec_uint ("n-workers", NULL, "Copy threads",
                       1, 256, 2,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_host_device_init (KvHostDevice *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->idle_cond);
  g_queue_init (&self->queued[0]);
  g_queue_init (&self->queued[1]);
  self->n_workers = 2;
}

/**
 * kv_host_device_new:
 * @primary: the primary tier's buffer
 * @n_blocks: device blocks per layer
 * @block_bytes: bytes of one block of one layer
 * @n_layers: the number of layers
 * @blocks_per_chunk: device blocks per chunk
 * @error: return location for a #GError
 *
 * Creates a host device with two copy workers and allocates its memory.
 *
 * Returns: (transfer full): the new device, or %NULL with @error set when a
 *   chunk does not fit in a primary slot or memory could not be mapped
 */
KvHostDevice *
kv_host_device_new (KvHostBuffer  *primary,
                    guint          n_blocks,
                    gsize          block_bytes,
                    guint          n_layers,
                    guint          blocks_per_chunk,
                    GError       **error)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);
  g_return_val_if_fail (n_blocks > 0 && block_bytes > 0, NULL);
  g_return_val_if_fail (n_layers > 0 && blocks_per_chunk > 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return g_initable_new (KV_TYPE_HOST_DEVICE, NULL, error,
                         "primary", primary,
                         "n-blocks", n_blocks,
                         "block-bytes", (guint64) block_bytes,
                         "n-layers", n_layers,
                         "blocks-per-chunk", blocks_per_chunk,
                         NULL);
}

/**
 * kv_host_device_get_n_workers:
 * @self: a host device
 *
 * Gets the number of copy threads. May be called from any thread.
 *
 * Returns: the number of workers
 */
guint
kv_host_device_get_n_workers (KvHostDevice *self)
{
  g_return_val_if_fail (KV_IS_HOST_DEVICE (self), 0);

  return self->n_workers;
}

/**
 * kv_host_device_peek_block:
 * @self: a host device
 * @layer: a layer, below n-layers
 * @block: a block, below n-blocks
 *
 * Gets the memory of one block of one layer (block-bytes bytes) for C code
 * that computes it in place. May be called from any thread; valid as long
 * as @self is alive.
 *
 * Returns: (transfer none): the start of the block
 */
gpointer
kv_host_device_peek_block (KvHostDevice *self,
                           guint         layer,
                           guint         block)
{
  g_return_val_if_fail (KV_IS_HOST_DEVICE (self), NULL);
  g_return_val_if_fail (self->memory != NULL, NULL);
  g_return_val_if_fail (layer < self->n_layers, NULL);
  g_return_val_if_fail (block < self->n_blocks, NULL);

  return self->memory + ((gsize) layer * self->n_blocks + block) * self->block_bytes;
}

static gboolean
check_block (KvHostDevice  *self,
             guint          layer,
             guint          block,
             GError       **error)
{
  if (self->memory == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                   "KvHostDevice: the device is not initialized");
      return FALSE;
    }
  if (layer >= self->n_layers || block >= self->n_blocks)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvHostDevice: block %u of layer %u is out of range (%u"
                   " layers of %u blocks)", block, layer, self->n_layers,
                   self->n_blocks);
      return FALSE;
    }
  return TRUE;
}

/**
 * kv_host_device_read_block:
 * @self: a host device
 * @layer: a layer, below n-layers
 * @block: a block, below n-blocks
 * @error: return location for a #GError
 *
 * Copies the bytes of one block of one layer. May be called from any
 * thread.
 *
 * Returns: (transfer full): a copy of the block's block-bytes bytes, or
 *   %NULL with @error set when @layer or @block is out of range
 */
GBytes *
kv_host_device_read_block (KvHostDevice  *self,
                           guint          layer,
                           guint          block,
                           GError       **error)
{
  g_return_val_if_fail (KV_IS_HOST_DEVICE (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_block (self, layer, block, error))
    return NULL;
  return g_bytes_new (kv_host_device_peek_block (self, layer, block), self->block_bytes);
}

/**
 * kv_host_device_write_block:
 * @self: a host device
 * @layer: a layer, below n-layers
 * @block: a block, below n-blocks
 * @data: at most block-bytes bytes; a shorter @data leaves the rest of the
 *   block as it was
 * @error: return location for a #GError
 *
 * Writes the bytes of one block of one layer, as an engine's compute would.
 * May be called from any thread.
 *
 * Returns: %TRUE on success, %FALSE with @error set when @layer or @block
 *   is out of range or @data is too long
 */
gboolean
kv_host_device_write_block (KvHostDevice  *self,
                            guint          layer,
                            guint          block,
                            GBytes        *data,
                            GError       **error)
{
  gsize len;
  const guint8 *src;

  g_return_val_if_fail (KV_IS_HOST_DEVICE (self), FALSE);
  g_return_val_if_fail (data != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_block (self, layer, block, error))
    return FALSE;
  src = g_bytes_get_data (data, &len);
  if (len > self->block_bytes)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvHostDevice: %" G_GSIZE_FORMAT " bytes do not fit in a"
                   " block of %" G_GSIZE_FORMAT " bytes", len, self->block_bytes);
      return FALSE;
    }
  if (len > 0)
    memcpy (kv_host_device_peek_block (self, layer, block), src, len);
  return TRUE;
}
