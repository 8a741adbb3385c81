/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-device.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kv-configurable.h"


typedef struct
{
  KvHostBuffer *primary;
  guint         n_blocks;
  guint64       block_bytes;
  guint         n_layers;
  guint         blocks_per_chunk;

  gboolean      opened;   /* GInitable.init succeeded */
  gboolean      closed;   /* shutdown() ran */
  guint64       next_job_id;

  /* Filled from any thread by complete_job(), drained on the owner thread
   * by the default get_finished(). */
  GMutex        lock;
  GCond         cond;
  GHashTable   *in_flight;   /* job id (guint64 *) → itself */
  GPtrArray    *finished;    /* (element-type KvJobResult) */
  int           wakeup_fd;
} KvDevicePrivate;

enum {
  PROP_0,
  PROP_PRIMARY,
  PROP_N_BLOCKS,
  PROP_BLOCK_BYTES,
  PROP_N_LAYERS,
  PROP_BLOCKS_PER_CHUNK,
  PROP_CHUNK_BYTES,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void kv_device_initable_iface_init (GInitableIface *iface);
static void kv_device_configurable_iface_init (KvConfigurableInterface *iface);

/**
 * KvDevice:
 *
 * The abstract mover of chunks between device (GPU) memory and the slots
 * of the primary tier's [class@Kv.HostBuffer].
 *
 * Device memory is described by a layout: [property@Kv.Device:n-layers]
 * layers of [property@Kv.Device:n-blocks] blocks, each
 * [property@Kv.Device:block-bytes] bytes (one layer's KV bytes of one GPU
 * block). A chunk is [property@Kv.Device:blocks-per-chunk] consecutive
 * blocks of the engine's block table across every layer; in its primary
 * slot the chunk is laid out layer by layer: layer 0's blocks in order,
 * then layer 1's, and so on, so slot byte
 * `(layer × blocks-per-chunk + j) × block-bytes` starts the j-th block of
 * the layer.
 *
 * [method@Kv.Device.submit_store] (device → primary, the first half of a
 * store) and [method@Kv.Device.submit_load] (primary → device) turn a batch
 * of chunks into one job of (block × layer) pieces, like the reference GPU
 * worker's batched `(src, dst, size)` copies, and return its id at once.
 * Jobs of one direction run strictly in submission order; the two
 * directions run concurrently. Submitting never waits for the copies:
 * results arrive later, as
 * [struct@Kv.JobResult]s with the job's transfer time and bytes, from
 * [method@Kv.Device.get_finished]. An idle owner can sleep on
 * [method@Kv.Device.get_wakeup_fd] until one arrives.
 *
 * Subclasses implement [vfunc@Kv.Device.submit] and report each job once,
 * from any thread, with [method@Kv.Device.complete_job]; a device that
 * learns of completions by polling (CUDA events) does so from its own
 * [vfunc@Kv.Device.get_finished] and chains up. [class@Kv.HostDevice]
 * keeps "device memory" in host memory and copies with a worker pool.
 *
 * Devices are created with [func@Gio.Initable.new] (or a subclass
 * constructor), which checks that a chunk fits in a primary slot.
 * Submitting and taking results happen on the owner thread;
 * [method@Kv.Device.complete_job], the getters and
 * [method@Kv.Device.get_n_active_jobs] may be called from any thread.
 */
G_DEFINE_ABSTRACT_TYPE_WITH_CODE (KvDevice, kv_device, G_TYPE_OBJECT,
                                  G_ADD_PRIVATE (KvDevice)
                                  G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                         kv_device_initable_iface_init)
                                  G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                         kv_device_configurable_iface_init))

/**
 * KvDeviceClass::submit:
 * @self: a device
 * @job_id: the id [method@Kv.Device.complete_job] reports the job with
 * @direction: which way the job copies
 * @copies: (array length=n_copies): the job's pieces
 * @n_copies: the number of pieces; 0 for an empty job, which still
 *   completes in order
 * @error: return location for a #GError
 *
 * Starts a job and returns without waiting for it. @copies is only valid
 * during the call.
 *
 * Returns: %TRUE when the job was started, %FALSE with @error set when it
 *   could not be
 */

/**
 * KvDeviceClass::get_finished:
 * @self: a device
 *
 * Takes the results of the jobs reported since the last call.
 *
 * Returns: (transfer full) (array zero-terminated=1): the results
 */

/**
 * KvDeviceClass::wait:
 * @self: a device
 * @job_ids: (array length=n_job_ids): jobs to wait for
 * @n_job_ids: the number of jobs
 * @error: return location for a #GError
 *
 * Blocks until the jobs have finished.
 *
 * Returns: %TRUE when they finished, %FALSE with @error set otherwise
 */

static gboolean
kv_device_real_open (KvDevice  *self,
                     GError   **error)
{
  return TRUE;
}

static void
kv_device_real_close (KvDevice *self)
{
}

static KvJobResult **
kv_device_real_get_finished (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);
  GPtrArray *out;
  guint64 counter;

  /* complete_job() queues and writes under the lock: reset and take
   * together, so the descriptor is readable exactly while results wait. */
  g_mutex_lock (&priv->lock);
  if (priv->wakeup_fd >= 0)
    {
      ssize_t r G_GNUC_UNUSED;

      r = read (priv->wakeup_fd, &counter, sizeof counter);
    }
  out = g_steal_pointer (&priv->finished);
  priv->finished = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  g_mutex_unlock (&priv->lock);

  g_ptr_array_set_free_func (out, NULL);
  g_ptr_array_add (out, NULL);
  return (KvJobResult **) g_ptr_array_free (out, FALSE);
}

static gboolean
any_in_flight_locked (KvDevicePrivate *priv,
                      const guint64   *job_ids,
                      guint            n_job_ids)
{
  for (guint i = 0; i < n_job_ids; i++)
    if (g_hash_table_contains (priv->in_flight, &job_ids[i]))
      return TRUE;
  return FALSE;
}

static gboolean
kv_device_real_wait (KvDevice       *self,
                     const guint64  *job_ids,
                     guint           n_job_ids,
                     GError        **error)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  while (any_in_flight_locked (priv, job_ids, n_job_ids))
    g_cond_wait (&priv->cond, &priv->lock);
  g_mutex_unlock (&priv->lock);

  return TRUE;
}

/* What init refuses before its first side effect; also the
 * KvConfigurable check, so `kvtier config check` refuses the same. */
static gboolean
kv_device_check (KvConfigurable  *configurable,
                 GError         **error)
{
  KvDevice *self = KV_DEVICE (configurable);
  KvDevicePrivate *priv = kv_device_get_instance_private (self);
  guint64 chunk_bytes;
  gsize slot_size;

  if (priv->primary == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "%s: the “primary” property is not set",
                   G_OBJECT_TYPE_NAME (self));
      return FALSE;
    }

  chunk_bytes = kv_device_get_chunk_bytes (self);
  slot_size = kv_host_buffer_get_slot_size (priv->primary);
  if (chunk_bytes > slot_size)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "%s: a chunk of %u blocks × %u layers × %" G_GUINT64_FORMAT
                   " bytes (%" G_GUINT64_FORMAT " bytes) does not fit in a"
                   " primary slot of %" G_GSIZE_FORMAT " bytes",
                   G_OBJECT_TYPE_NAME (self), priv->blocks_per_chunk,
                   priv->n_layers, priv->block_bytes, chunk_bytes, slot_size);
      return FALSE;
    }
  return TRUE;
}

static void
kv_device_configurable_iface_init (KvConfigurableInterface *iface)
{
  iface->check = kv_device_check;
}

static gboolean
kv_device_initable_init (GInitable     *initable,
                         GCancellable  *cancellable,
                         GError       **error)
{
  KvDevice *self = KV_DEVICE (initable);
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  if (priv->opened)
    return TRUE;
  if (!kv_device_check (KV_CONFIGURABLE (self), error))
    return FALSE;

  priv->wakeup_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (priv->wakeup_fd < 0)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "%s: could not create the wake-up eventfd: %s",
                   G_OBJECT_TYPE_NAME (self), g_strerror (errsv));
      return FALSE;
    }

  if (!KV_DEVICE_GET_CLASS (self)->open (self, error))
    {
      close (priv->wakeup_fd);
      priv->wakeup_fd = -1;
      return FALSE;
    }

  priv->opened = TRUE;
  return TRUE;
}

static void
kv_device_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_device_initable_init;
}

static void
kv_device_dispose (GObject *object)
{
  KvDevice *self = KV_DEVICE (object);
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_mutex_lock (&priv->lock);
  g_ptr_array_set_size (priv->finished, 0);
  g_mutex_unlock (&priv->lock);
  g_clear_object (&priv->primary);

  G_OBJECT_CLASS (kv_device_parent_class)->dispose (object);
}

static void
kv_device_finalize (GObject *object)
{
  KvDevice *self = KV_DEVICE (object);
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  if (priv->wakeup_fd >= 0)
    close (priv->wakeup_fd);
  g_hash_table_unref (priv->in_flight);
  g_ptr_array_unref (priv->finished);
  g_cond_clear (&priv->cond);
  g_mutex_clear (&priv->lock);

  G_OBJECT_CLASS (kv_device_parent_class)->finalize (object);
}

static void
kv_device_get_property (GObject    *object,
                        guint       prop_id,
                        GValue     *value,
                        GParamSpec *pspec)
{
  KvDevice *self = KV_DEVICE (object);
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_PRIMARY:
      g_value_set_object (value, priv->primary);
      break;
    case PROP_N_BLOCKS:
      g_value_set_uint (value, priv->n_blocks);
      break;
    case PROP_BLOCK_BYTES:
      g_value_set_uint64 (value, priv->block_bytes);
      break;
    case PROP_N_LAYERS:
      g_value_set_uint (value, priv->n_layers);
      break;
    case PROP_BLOCKS_PER_CHUNK:
      g_value_set_uint (value, priv->blocks_per_chunk);
      break;
    case PROP_CHUNK_BYTES:
      g_value_set_uint64 (value, kv_device_get_chunk_bytes (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_device_set_property (GObject      *object,
                        guint         prop_id,
                        const GValue *value,
                        GParamSpec   *pspec)
{
  KvDevice *self = KV_DEVICE (object);
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  switch (prop_id)
    {
    case PROP_PRIMARY:
      priv->primary = g_value_dup_object (value);
      break;
    case PROP_N_BLOCKS:
      priv->n_blocks = g_value_get_uint (value);
      break;
    case PROP_BLOCK_BYTES:
      priv->block_bytes = g_value_get_uint64 (value);
      break;
    case PROP_N_LAYERS:
      priv->n_layers = g_value_get_uint (value);
      break;
    case PROP_BLOCKS_PER_CHUNK:
      priv->blocks_per_chunk = g_value_get_uint (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_device_class_init (KvDeviceClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = kv_device_dispose;
  object_class->finalize = kv_device_finalize;
  object_class->get_property = kv_device_get_property;
  object_class->set_property = kv_device_set_property;

  klass->open = kv_device_real_open;
  klass->get_finished = kv_device_real_get_finished;
  klass->wait = kv_device_real_wait;
  klass->close = kv_device_real_close;

  /**
   * KvDevice:primary:
   *
   * The primary tier's buffer: the host side of every transfer.
   */
  properties[PROP_PRIMARY] =
    g_param_spec_object ("primary", NULL,
                         "The primary tier's slot memory: the host side of every transfer",
                         KV_TYPE_HOST_BUFFER,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvDevice:n-blocks:
   *
   * The number of device blocks per layer.
   */
  properties[PROP_N_BLOCKS] =
    g_param_spec_uint ("n-blocks", NULL, "Device blocks per layer",
                       1, G_MAXUINT32, 1024,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvDevice:block-bytes:
   *
   * The bytes of one block of one layer.
   */
  properties[PROP_BLOCK_BYTES] =
    g_param_spec_uint64 ("block-bytes", NULL, "Bytes of one block of one layer",
                         1, G_MAXUINT32, 16384,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvDevice:n-layers:
   *
   * The number of layers (KV tensors) of the model.
   */
  properties[PROP_N_LAYERS] =
    g_param_spec_uint ("n-layers", NULL, "Layers (KV tensors)",
                       1, 65536, 1,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvDevice:blocks-per-chunk:
   *
   * How many consecutive device blocks make one chunk.
   */
  properties[PROP_BLOCKS_PER_CHUNK] =
    g_param_spec_uint ("blocks-per-chunk", NULL, "Device blocks per chunk",
                       1, 65536, 1,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvDevice:chunk-bytes:
   *
   * The bytes of one chunk: blocks-per-chunk × n-layers × block-bytes; at
   * most the primary slot size.
   */
  properties[PROP_CHUNK_BYTES] =
    g_param_spec_uint64 ("chunk-bytes", NULL, "Bytes of one chunk",
                         0, G_MAXUINT64, 0,
                         G_PARAM_READABLE |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static guint
job_id_hash (gconstpointer v)
{
  return g_int64_hash (v);
}

static gboolean
job_id_equal (gconstpointer a,
              gconstpointer b)
{
  return g_int64_equal (a, b);
}

static void
kv_device_init (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_mutex_init (&priv->lock);
  g_cond_init (&priv->cond);
  priv->in_flight = g_hash_table_new_full (job_id_hash, job_id_equal, g_free, NULL);
  priv->finished = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  priv->wakeup_fd = -1;
  priv->blocks_per_chunk = 1;
  priv->n_layers = 1;
}

/**
 * kv_device_get_primary:
 * @self: a device
 *
 * Gets the primary tier's buffer. May be called from any thread.
 *
 * Returns: (transfer none): the buffer
 */
KvHostBuffer *
kv_device_get_primary (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), NULL);

  return priv->primary;
}

/**
 * kv_device_get_n_blocks:
 * @self: a device
 *
 * Gets the number of device blocks per layer. May be called from any
 * thread.
 *
 * Returns: the number of blocks
 */
guint
kv_device_get_n_blocks (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);

  return priv->n_blocks;
}

/**
 * kv_device_get_block_bytes:
 * @self: a device
 *
 * Gets the bytes of one block of one layer. May be called from any thread.
 *
 * Returns: the block size in bytes
 */
gsize
kv_device_get_block_bytes (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);

  return priv->block_bytes;
}

/**
 * kv_device_get_n_layers:
 * @self: a device
 *
 * Gets the number of layers. May be called from any thread.
 *
 * Returns: the number of layers
 */
guint
kv_device_get_n_layers (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);

  return priv->n_layers;
}

/**
 * kv_device_get_blocks_per_chunk:
 * @self: a device
 *
 * Gets how many consecutive device blocks make one chunk. May be called
 * from any thread.
 *
 * Returns: the blocks per chunk
 */
guint
kv_device_get_blocks_per_chunk (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);

  return priv->blocks_per_chunk;
}

/**
 * kv_device_get_chunk_bytes:
 * @self: a device
 *
 * Gets the bytes of one chunk (blocks per chunk × layers × block bytes),
 * which a transfer copies per chunk. May be called from any thread.
 *
 * Returns: the chunk size in bytes
 */
gsize
kv_device_get_chunk_bytes (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);

  return (gsize) priv->blocks_per_chunk * priv->n_layers * priv->block_bytes;
}

static guint64
submit (KvDevice          *self,
        KvDeviceDirection  direction,
        const guint32     *block_ids,
        guint              n_block_ids,
        const guint32     *chunk_ids,
        guint              n_chunk_ids,
        GError           **error)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);
  g_autofree KvDeviceCopy *copies = NULL;
  guint n_slots;
  gsize slot_size;
  guint bpc = priv->blocks_per_chunk;
  guint skip;
  guint n_copies = 0;
  guint k = 0;
  guint64 job_id;
  guint64 *key;

  if (priv->closed)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED,
                   "%s: the device was shut down", G_OBJECT_TYPE_NAME (self));
      return 0;
    }

  /* Only the first chunk may be partial: its leading blocks are skipped
   * (they are already where they belong), as in the reference worker. */
  if (n_chunk_ids == 0 ? n_block_ids != 0
                       : (n_block_ids > (guint64) n_chunk_ids * bpc ||
                          n_block_ids <= (guint64) (n_chunk_ids - 1) * bpc))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "%s: %u blocks do not fill %u chunks of %u blocks (only the"
                   " first chunk may be partial)",
                   G_OBJECT_TYPE_NAME (self), n_block_ids, n_chunk_ids, bpc);
      return 0;
    }

  n_slots = kv_host_buffer_get_n_slots (priv->primary);
  slot_size = kv_host_buffer_get_slot_size (priv->primary);

  for (guint i = 0; i < n_chunk_ids; i++)
    if (chunk_ids[i] >= n_slots)
      {
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                     "%s: chunk id %u is out of range (the primary buffer has"
                     " %u slots)", G_OBJECT_TYPE_NAME (self), chunk_ids[i],
                     n_slots);
        return 0;
      }
  for (guint i = 0; i < n_block_ids; i++)
    if (block_ids[i] >= priv->n_blocks)
      {
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                     "%s: block id %u is out of range (the device has %u"
                     " blocks)", G_OBJECT_TYPE_NAME (self), block_ids[i],
                     priv->n_blocks);
        return 0;
      }

  skip = n_chunk_ids > 0 ? n_chunk_ids * bpc - n_block_ids : 0;
  copies = g_new (KvDeviceCopy, (gsize) n_block_ids * priv->n_layers);
  for (guint c = 0; c < n_chunk_ids; c++)
    {
      guint first = c == 0 ? skip : 0;
      guint64 slot_base = (guint64) chunk_ids[c] * slot_size;

      /* Layer-major inside the slot, so each layer's blocks are adjacent. */
      for (guint layer = 0; layer < priv->n_layers; layer++)
        for (guint j = first; j < bpc; j++)
          {
            KvDeviceCopy *copy = &copies[n_copies++];

            copy->layer = layer;
            copy->block = block_ids[k + (j - first)];
            copy->primary_offset = slot_base + ((guint64) layer * bpc + j) * priv->block_bytes;
          }
      k += bpc - first;
    }
  g_assert (k == n_block_ids);

  job_id = ++priv->next_job_id;
  key = g_new (guint64, 1);
  *key = job_id;
  g_mutex_lock (&priv->lock);
  g_hash_table_add (priv->in_flight, key);
  g_mutex_unlock (&priv->lock);

  if (!KV_DEVICE_GET_CLASS (self)->submit (self, job_id, direction, copies, n_copies, error))
    {
      g_mutex_lock (&priv->lock);
      g_hash_table_remove (priv->in_flight, &job_id);
      g_cond_broadcast (&priv->cond);
      g_mutex_unlock (&priv->lock);
      /* A binding's implementation may fail without saying why. */
      if (error != NULL && *error == NULL)
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                     "%s: submit failed without an error",
                     G_OBJECT_TYPE_NAME (self));
      return 0;
    }

  return job_id;
}

/**
 * kv_device_submit_store:
 * @self: a device
 * @block_ids: (array length=n_block_ids): device blocks, in block-table
 *   order
 * @n_block_ids: the number of blocks: blocks-per-chunk per chunk, except
 *   that the first chunk may be partial (its leading blocks are skipped)
 * @chunk_ids: (array length=n_chunk_ids): destination primary slots, one
 *   per chunk
 * @n_chunk_ids: the number of chunks
 * @error: return location for a #GError
 *
 * Starts copying chunks from device memory into primary slots (the first
 * half of a store: afterwards the caller completes the store with
 * [method@Kv.TieringManager.complete_store]). Returns at once; the job is
 * reported by [method@Kv.Device.get_finished]. Call on the owner thread.
 *
 * Returns: the job id (never 0), or 0 with @error set when an id is out of
 *   range, the counts do not match, or the device was shut down
 */
guint64
kv_device_submit_store (KvDevice       *self,
                        const guint32  *block_ids,
                        guint           n_block_ids,
                        const guint32  *chunk_ids,
                        guint           n_chunk_ids,
                        GError        **error)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);
  g_return_val_if_fail (priv->opened, 0);
  g_return_val_if_fail (block_ids != NULL || n_block_ids == 0, 0);
  g_return_val_if_fail (chunk_ids != NULL || n_chunk_ids == 0, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);

  return submit (self, KV_DEVICE_DIRECTION_TO_PRIMARY, block_ids, n_block_ids,
                 chunk_ids, n_chunk_ids, error);
}

/**
 * kv_device_submit_load:
 * @self: a device
 * @chunk_ids: (array length=n_chunk_ids): source primary slots (pinned by
 *   [method@Kv.TieringManager.prepare_load]), one per chunk
 * @n_chunk_ids: the number of chunks
 * @block_ids: (array length=n_block_ids): destination device blocks, in
 *   block-table order
 * @n_block_ids: the number of blocks: blocks-per-chunk per chunk, except
 *   that the first chunk may be partial (its leading blocks are skipped)
 * @error: return location for a #GError
 *
 * Starts copying chunks from primary slots into device memory (the last
 * half of a load: when the job is reported, the caller releases the slots
 * with [method@Kv.TieringManager.complete_load]). Returns at once; the job
 * is reported by [method@Kv.Device.get_finished]. Call on the owner thread.
 *
 * Returns: the job id (never 0), or 0 with @error set when an id is out of
 *   range, the counts do not match, or the device was shut down
 */
guint64
kv_device_submit_load (KvDevice       *self,
                       const guint32  *chunk_ids,
                       guint           n_chunk_ids,
                       const guint32  *block_ids,
                       guint           n_block_ids,
                       GError        **error)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);
  g_return_val_if_fail (priv->opened, 0);
  g_return_val_if_fail (block_ids != NULL || n_block_ids == 0, 0);
  g_return_val_if_fail (chunk_ids != NULL || n_chunk_ids == 0, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);

  return submit (self, KV_DEVICE_DIRECTION_TO_DEVICE, block_ids, n_block_ids,
                 chunk_ids, n_chunk_ids, error);
}

/**
 * kv_device_get_finished:
 * @self: a device
 *
 * Takes the results of the jobs that finished since the last call, in
 * completion order; within one direction that is submission order. Each
 * result carries the job's [method@Kv.JobResult.get_transfer_time] and
 * [method@Kv.JobResult.get_transfer_bytes]. Never blocks. Call on the owner
 * thread.
 *
 * Returns: (transfer full) (array zero-terminated=1): the finished jobs,
 *   possibly none
 */
KvJobResult **
kv_device_get_finished (KvDevice *self)
{
  KvJobResult **results;

  g_return_val_if_fail (KV_IS_DEVICE (self), NULL);

  results = KV_DEVICE_GET_CLASS (self)->get_finished (self);
  if (results == NULL)
    results = g_new0 (KvJobResult *, 1);
  return results;
}

/**
 * kv_device_wait:
 * @self: a device
 * @job_ids: (array length=n_job_ids): jobs to wait for
 * @n_job_ids: the number of jobs
 * @error: return location for a #GError
 *
 * Blocks until every job in @job_ids has finished (ids that are not in
 * flight are ignored); their results stay queued for
 * [method@Kv.Device.get_finished]. For shutdown paths: the steady-state
 * owner never waits. Must not be called from a device's own worker.
 *
 * Returns: %TRUE when the jobs finished, %FALSE with @error set when the
 *   device could not wait for them
 */
gboolean
kv_device_wait (KvDevice       *self,
                const guint64  *job_ids,
                guint           n_job_ids,
                GError        **error)
{
  gboolean ok;

  g_return_val_if_fail (KV_IS_DEVICE (self), FALSE);
  g_return_val_if_fail (job_ids != NULL || n_job_ids == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  ok = KV_DEVICE_GET_CLASS (self)->wait (self, job_ids, n_job_ids, error);
  if (!ok && error != NULL && *error == NULL)
    g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                 "%s: wait failed without an error", G_OBJECT_TYPE_NAME (self));
  return ok;
}

/**
 * kv_device_wait_all:
 * @self: a device
 * @error: return location for a #GError
 *
 * Blocks until every job submitted so far has finished, like
 * [method@Kv.Device.wait] with every job in flight.
 *
 * Returns: %TRUE when the jobs finished, %FALSE with @error set otherwise
 */
gboolean
kv_device_wait_all (KvDevice  *self,
                    GError   **error)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);
  g_autoptr(GArray) ids = NULL;
  GHashTableIter iter;
  gpointer key;

  g_return_val_if_fail (KV_IS_DEVICE (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  ids = g_array_new (FALSE, FALSE, sizeof (guint64));
  g_mutex_lock (&priv->lock);
  g_hash_table_iter_init (&iter, priv->in_flight);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    g_array_append_val (ids, *(guint64 *) key);
  g_mutex_unlock (&priv->lock);

  return kv_device_wait (self, (const guint64 *) ids->data, ids->len, error);
}

/**
 * kv_device_get_n_active_jobs:
 * @self: a device
 *
 * Gets the number of jobs submitted and not yet reported with
 * [method@Kv.Device.complete_job]. May be called from any thread.
 *
 * Returns: the number of jobs in flight
 */
guint
kv_device_get_n_active_jobs (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);
  guint n;

  g_return_val_if_fail (KV_IS_DEVICE (self), 0);

  g_mutex_lock (&priv->lock);
  n = g_hash_table_size (priv->in_flight);
  g_mutex_unlock (&priv->lock);
  return n;
}

/**
 * kv_device_get_wakeup_fd:
 * @self: a device
 *
 * Gets an eventfd that becomes readable when results are queued, so an
 * idle owner can sleep in poll() (or a [struct@GLib.Source] made with
 * `g_unix_fd_source_new()`) until a job finishes.
 * [method@Kv.Device.get_finished] resets it. The descriptor belongs to
 * @self; do not close it.
 *
 * Returns: the descriptor, or -1 before the device was initialized
 */
int
kv_device_get_wakeup_fd (KvDevice *self)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), -1);

  return priv->wakeup_fd;
}

/**
 * kv_device_shutdown:
 * @self: a device
 * @error: return location for a #GError
 *
 * Waits for every job in flight, then releases the device's resources
 * ([vfunc@Kv.Device.close]). Results of the last jobs stay available from
 * [method@Kv.Device.get_finished]; later submits fail with
 * %KV_TIER_ERROR_CLOSED. Calling it again does nothing. Call on the owner
 * thread; it blocks.
 *
 * Returns: %TRUE on success, %FALSE with @error set when waiting failed
 */
gboolean
kv_device_shutdown (KvDevice  *self,
                    GError   **error)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);

  g_return_val_if_fail (KV_IS_DEVICE (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (priv->closed || !priv->opened)
    {
      priv->closed = TRUE;
      return TRUE;
    }

  if (!kv_device_wait_all (self, error))
    return FALSE;

  priv->closed = TRUE;
  KV_DEVICE_GET_CLASS (self)->close (self);
  return TRUE;
}

/**
 * kv_device_complete_job:
 * @self: a device
 * @result: (transfer none): the result of a job in flight
 *
 * Reports a job: queues @result for [method@Kv.Device.get_finished], wakes
 * [method@Kv.Device.wait] and makes the wake-up descriptor readable. Every
 * submitted job is reported exactly once. Thread-safe: device
 * implementations call it from their worker or completion threads.
 */
void
kv_device_complete_job (KvDevice    *self,
                        KvJobResult *result)
{
  KvDevicePrivate *priv = kv_device_get_instance_private (self);
  guint64 job_id;
  guint64 one = 1;
  gboolean known;

  g_return_if_fail (KV_IS_DEVICE (self));
  g_return_if_fail (result != NULL);

  job_id = kv_job_result_get_job_id (result);

  g_mutex_lock (&priv->lock);
  known = g_hash_table_remove (priv->in_flight, &job_id);
  if (known)
    {
      g_ptr_array_add (priv->finished, kv_job_result_ref (result));
      /* Before waking wait(): whoever it returns to sees the descriptor
       * readable, and a get_finished() that took this result cannot be
       * followed by a stale wake-up for it. */
      if (priv->wakeup_fd >= 0)
        {
          ssize_t w G_GNUC_UNUSED;

          w = write (priv->wakeup_fd, &one, sizeof one);
        }
    }
  g_cond_broadcast (&priv->cond);
  g_mutex_unlock (&priv->lock);

  if (!known)
    g_critical ("%s: job %" G_GUINT64_FORMAT " was reported but is not in"
                " flight", G_OBJECT_TYPE_NAME (self), job_id);
}
