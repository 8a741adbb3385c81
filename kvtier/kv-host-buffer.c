/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include "kv-host-buffer.h"
#include "kv-host-buffer-private.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv-enums.h"
#include "kv-types.h"

#define KV_HOST_BUFFER_PAGE_SIZE 4096
#define KV_HOST_BUFFER_HUGEPAGE_MIN (2 * 1024 * 1024)

/**
 * KvHostBuffer:
 *
 * Page-aligned host memory cut into `n-slots` slots of `slot-size` bytes:
 * the storage of a [class@Kv.PrimaryTier].
 *
 * The memory is one of:
 *
 * - private anonymous memory ([ctor@Kv.HostBuffer.new]), advised to use
 *   transparent huge pages when it is at least 2 MiB;
 * - a memfd ([ctor@Kv.HostBuffer.new_shared]) whose descriptor
 *   ([method@Kv.HostBuffer.get_fd]) another process, such as an engine's GPU
 *   worker, can map; [ctor@Kv.HostBuffer.new_for_fd] maps such a descriptor;
 * - a shared file ([ctor@Kv.HostBuffer.new_for_file]) following vLLM's
 *   `/dev/shm` protocol: the first opener creates and sizes the file, later
 *   openers map it as it is, and the creator unlinks it when the buffer is
 *   finalized;
 * - memory the caller already mapped and keeps
 *   ([ctor@Kv.HostBuffer.new_for_memory]), such as a region whose file name
 *   is gone: nothing is mapped again, slots are the caller's bytes.
 *
 * C code reaches slot memory directly with [method@Kv.HostBuffer.peek_slot]
 * (and the whole mapping with [method@Kv.HostBuffer.get_data], for io_uring
 * buffer registration or `cudaHostRegister`); bindings use
 * [method@Kv.HostBuffer.read_slot], a zero-copy [struct@GLib.Bytes] that
 * keeps the buffer alive, and [method@Kv.HostBuffer.write_slot].
 *
 * The buffer's geometry never changes after construction, so its getters may
 * be called from any thread. Slot contents are not synchronised: whoever owns
 * a slot at a given time (the primary tier's reference counts decide) may read
 * or write it from any thread.
 *
 * Each slot can carry the checksum of its bytes (XXH3-64, seed 0, of all
 * `slot-size` bytes), computed once by whoever wrote them while the bytes
 * were at hand — [class@Kv.HostDevice] as it copies a chunk in, a tier
 * that verified a chunk it loaded — so that every tier that stores the
 * chunk reuses it instead of reading the whole slot again; see
 * [method@Kv.HostBuffer.get_slot_checksum]. Like the bytes, the checksum
 * belongs to the slot's owner.
 */
struct _KvHostBuffer
{
  GObject parent_instance;

  guint n_slots;
  gsize slot_size;
  gsize size;
  KvHostBufferBacking backing;
  char *path;

  /* The descriptor given in the `fd` property (not owned) and the one this
   * buffer owns (memfd, dup of the given one, or the shared file). */
  int construct_fd;
  int fd;

  guint8 *data;
  gboolean creator;

  /* KV_HOST_BUFFER_BACKING_BORROWED: the caller's memory, and what to call
   * once this buffer no longer uses it. */
  guint8 *borrowed;
  GDestroyNotify release;
  gpointer release_data;

  /* per slot: the XXH3-64 of its bytes, valid where checksum_known[slot] */
  guint64 *checksums;
  guint8 *checksum_known;
};

enum {
  PROP_0,
  PROP_N_SLOTS,
  PROP_SLOT_SIZE,
  PROP_BACKING,
  PROP_PATH,
  PROP_FD,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void kv_host_buffer_initable_iface_init (GInitableIface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (KvHostBuffer, kv_host_buffer, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_host_buffer_initable_iface_init))

static void
set_error_from_errno (GError     **error,
                      int          errsv,
                      const char  *what,
                      const char  *path)
{
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
               "%s “%s”: %s", what, path, g_strerror (errsv));
}

static gboolean
map_fd (KvHostBuffer  *self,
        const char    *name,
        GError       **error)
{
  void *data;

  data = mmap (NULL, self->size, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, 0);
  if (data == MAP_FAILED)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Could not map %" G_GSIZE_FORMAT " bytes of “%s”: %s",
                   self->size, name, g_strerror (errsv));
      return FALSE;
    }

  self->data = data;
  return TRUE;
}

static gboolean
init_anonymous (KvHostBuffer  *self,
                GError       **error)
{
  void *data;

  data = mmap (NULL, self->size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Could not map %" G_GSIZE_FORMAT " bytes of anonymous memory: %s",
                   self->size, g_strerror (errsv));
      return FALSE;
    }

  /* Huge pages cut first-touch faults by 512×; a kernel without THP (or with
   * THP disabled) simply keeps small pages, so a failure is not an error. */
  if (self->size >= KV_HOST_BUFFER_HUGEPAGE_MIN)
    (void) madvise (data, self->size, MADV_HUGEPAGE);

  self->data = data;
  return TRUE;
}

static gboolean
init_memfd (KvHostBuffer  *self,
            GError       **error)
{
  if (self->construct_fd >= 0)
    {
      struct stat st;
      g_autofree char *name = g_strdup_printf ("fd %d", self->construct_fd);

      /* The caller keeps its descriptor; this buffer owns a duplicate. */
      self->fd = fcntl (self->construct_fd, F_DUPFD_CLOEXEC, 0);
      if (self->fd < 0)
        {
          set_error_from_errno (error, errno, "Could not duplicate", name);
          return FALSE;
        }

      if (fstat (self->fd, &st) < 0)
        {
          set_error_from_errno (error, errno, "Could not stat", name);
          return FALSE;
        }

      if (st.st_size < 0 || (guint64) st.st_size < self->size)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "fd %d holds %" G_GINT64_FORMAT " bytes but %u slots of %"
                       G_GSIZE_FORMAT " bytes need %" G_GSIZE_FORMAT,
                       self->construct_fd, (gint64) st.st_size,
                       self->n_slots, self->slot_size, self->size);
          return FALSE;
        }

      return map_fd (self, name, error);
    }

  self->fd = memfd_create ("kvtier-primary", MFD_CLOEXEC);
  if (self->fd < 0)
    {
      set_error_from_errno (error, errno, "Could not create memfd", "kvtier-primary");
      return FALSE;
    }

  if (ftruncate (self->fd, (off_t) self->size) < 0)
    {
      set_error_from_errno (error, errno, "Could not size memfd", "kvtier-primary");
      return FALSE;
    }

  return map_fd (self, "kvtier-primary", error);
}

static gboolean
init_file (KvHostBuffer  *self,
           GError       **error)
{
  struct stat st;

  if (self->path == NULL || self->path[0] == '\0')
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "A file-backed host buffer needs the “path” property");
      return FALSE;
    }

  /* vLLM's protocol: the first opener (O_EXCL succeeds) creates and sizes
   * the region; everyone else maps the existing file. */
  self->fd = open (self->path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (self->fd >= 0)
    {
      self->creator = TRUE;
      if (ftruncate (self->fd, (off_t) self->size) < 0)
        {
          set_error_from_errno (error, errno, "Could not size", self->path);
          return FALSE;
        }
      return map_fd (self, self->path, error);
    }

  if (errno != EEXIST)
    {
      set_error_from_errno (error, errno, "Could not create", self->path);
      return FALSE;
    }

  self->fd = open (self->path, O_RDWR | O_CLOEXEC);
  if (self->fd < 0)
    {
      set_error_from_errno (error, errno, "Could not open", self->path);
      return FALSE;
    }

  if (fstat (self->fd, &st) < 0)
    {
      set_error_from_errno (error, errno, "Could not stat", self->path);
      return FALSE;
    }

  if (st.st_size < 0 || (guint64) st.st_size < self->size)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "“%s” holds %" G_GINT64_FORMAT " bytes but %u slots of %"
                   G_GSIZE_FORMAT " bytes need %" G_GSIZE_FORMAT,
                   self->path, (gint64) st.st_size,
                   self->n_slots, self->slot_size, self->size);
      return FALSE;
    }

  return map_fd (self, self->path, error);
}

static gboolean
init_borrowed (KvHostBuffer  *self,
               GError       **error)
{
  if (self->borrowed == NULL)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "A borrowed host buffer is made with "
                           "kv_host_buffer_new_for_memory(), which names its memory");
      return FALSE;
    }

  /* Slots are page aligned, as for every other backing: O_DIRECT reads and
   * writes go straight into them. */
  if ((guintptr) self->borrowed % KV_HOST_BUFFER_PAGE_SIZE != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The memory at %p is not aligned to %d bytes",
                   self->borrowed, KV_HOST_BUFFER_PAGE_SIZE);
      return FALSE;
    }

  self->data = self->borrowed;
  return TRUE;
}

static gboolean
kv_host_buffer_initable_init (GInitable     *initable,
                              GCancellable  *cancellable,
                              GError       **error)
{
  KvHostBuffer *self = KV_HOST_BUFFER (initable);
  gboolean ok = FALSE;

  if (self->data != NULL)
    return TRUE;

  if (self->n_slots == 0)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "A host buffer needs at least one slot (n-slots 0)");
      return FALSE;
    }

  if (self->slot_size == 0 || self->slot_size % KV_HOST_BUFFER_PAGE_SIZE != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "slot-size %" G_GSIZE_FORMAT " is not a positive multiple of %d",
                   self->slot_size, KV_HOST_BUFFER_PAGE_SIZE);
      return FALSE;
    }

  if (!g_size_checked_mul (&self->size, self->n_slots, self->slot_size) ||
      self->size > (gsize) G_MAXINT64)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "%u slots of %" G_GSIZE_FORMAT " bytes do not fit in memory",
                   self->n_slots, self->slot_size);
      return FALSE;
    }

  switch (self->backing)
    {
    case KV_HOST_BUFFER_BACKING_ANONYMOUS:
      ok = init_anonymous (self, error);
      break;
    case KV_HOST_BUFFER_BACKING_MEMFD:
      ok = init_memfd (self, error);
      break;
    case KV_HOST_BUFFER_BACKING_FILE:
      ok = init_file (self, error);
      break;
    case KV_HOST_BUFFER_BACKING_BORROWED:
      ok = init_borrowed (self, error);
      break;
    default:
      g_assert_not_reached ();
    }

  if (ok)
    (void) _kv_host_buffer_get_checksum_flags (self);
  else
    {
      /* Leave nothing behind: a file this buffer created is removed again. */
      if (self->creator)
        (void) unlink (self->path);
      self->creator = FALSE;
      if (self->fd >= 0)
        close (self->fd);
      self->fd = -1;
      self->size = 0;
    }

  return ok;
}

static void
kv_host_buffer_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_host_buffer_initable_init;
}

static void
kv_host_buffer_finalize (GObject *object)
{
  KvHostBuffer *self = KV_HOST_BUFFER (object);

  if (self->data != NULL && self->backing != KV_HOST_BUFFER_BACKING_BORROWED)
    munmap (self->data, self->size);
  if (self->fd >= 0)
    close (self->fd);
  /* Borrowed memory goes back to its owner once, built or not. */
  if (self->release != NULL)
    self->release (self->release_data);
  /* Like vLLM's SharedOffloadRegion.cleanup(): only the creator removes the
   * shared file, so processes still mapping it keep their memory. */
  if (self->creator)
    (void) unlink (self->path);
  g_free (self->path);
  g_free (self->checksums);
  g_free (self->checksum_known);

  G_OBJECT_CLASS (kv_host_buffer_parent_class)->finalize (object);
}

static void
kv_host_buffer_get_property (GObject    *object,
                             guint       prop_id,
                             GValue     *value,
                             GParamSpec *pspec)
{
  KvHostBuffer *self = KV_HOST_BUFFER (object);

  switch (prop_id)
    {
    case PROP_N_SLOTS:
      g_value_set_uint (value, self->n_slots);
      break;
    case PROP_SLOT_SIZE:
      g_value_set_uint64 (value, self->slot_size);
      break;
    case PROP_BACKING:
      g_value_set_enum (value, self->backing);
      break;
    case PROP_PATH:
      g_value_set_string (value, self->path);
      break;
    case PROP_FD:
      g_value_set_int (value, self->fd);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_host_buffer_set_property (GObject      *object,
                             guint         prop_id,
                             const GValue *value,
                             GParamSpec   *pspec)
{
  KvHostBuffer *self = KV_HOST_BUFFER (object);

  switch (prop_id)
    {
    case PROP_N_SLOTS:
      self->n_slots = g_value_get_uint (value);
      break;
    case PROP_SLOT_SIZE:
      self->slot_size = g_value_get_uint64 (value);
      break;
    case PROP_BACKING:
      self->backing = g_value_get_enum (value);
      break;
    case PROP_PATH:
      g_free (self->path);
      self->path = g_value_dup_string (value);
      break;
    case PROP_FD:
      self->construct_fd = g_value_get_int (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_host_buffer_class_init (KvHostBufferClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_host_buffer_finalize;
  object_class->get_property = kv_host_buffer_get_property;
  object_class->set_property = kv_host_buffer_set_property;

  /**
   * KvHostBuffer:n-slots:
   *
   * How many slots the buffer holds; at least 1.
   */
  properties[PROP_N_SLOTS] =
    g_param_spec_uint ("n-slots", NULL, NULL,
                       1, G_MAXUINT32, 1,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvHostBuffer:slot-size:
   *
   * The size of one slot in bytes: a positive multiple of 4096, so every
   * slot is page aligned (O_DIRECT I/O straight into slots needs that).
   */
  properties[PROP_SLOT_SIZE] =
    g_param_spec_uint64 ("slot-size", NULL, NULL,
                         0, G_MAXUINT64, 0,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvHostBuffer:backing:
   *
   * What the slot memory is made of.
   */
  properties[PROP_BACKING] =
    g_param_spec_enum ("backing", NULL, NULL,
                       KV_TYPE_HOST_BUFFER_BACKING,
                       KV_HOST_BUFFER_BACKING_ANONYMOUS,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                       G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvHostBuffer:path:
   *
   * The shared file of a %KV_HOST_BUFFER_BACKING_FILE buffer; %NULL for
   * other backings.
   */
  properties[PROP_PATH] =
    g_param_spec_string ("path", NULL, NULL,
                         NULL,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvHostBuffer:fd:
   *
   * When constructing a %KV_HOST_BUFFER_BACKING_MEMFD buffer: a descriptor
   * to map (the buffer maps a duplicate and the caller keeps its own), or -1
   * to create a new memfd. Once constructed, reading the property gives the
   * descriptor the buffer owns (see [method@Kv.HostBuffer.get_fd]).
   */
  properties[PROP_FD] =
    g_param_spec_int ("fd", NULL, NULL,
                      -1, G_MAXINT, -1,
                      G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                      G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_host_buffer_init (KvHostBuffer *self)
{
  self->construct_fd = -1;
  self->fd = -1;
}

static gboolean
check_n_slots (guint    n_slots,
               GError **error)
{
  /* Checked before g_object_new(), whose range check would only warn. */
  if (n_slots == 0)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "A host buffer needs at least one slot (n-slots 0)");
      return FALSE;
    }
  return TRUE;
}

/**
 * kv_host_buffer_new:
 * @n_slots: how many slots, at least 1
 * @slot_size: bytes per slot, a positive multiple of 4096
 * @error: return location for an error
 *
 * Creates a buffer of private anonymous memory, advised to use transparent
 * huge pages when it is at least 2 MiB.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new buffer, or %NULL with @error set when the
 *   geometry is invalid or the memory cannot be mapped
 */
KvHostBuffer *
kv_host_buffer_new (guint    n_slots,
                    gsize    slot_size,
                    GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_n_slots (n_slots, error))
    return NULL;

  return g_initable_new (KV_TYPE_HOST_BUFFER, NULL, error,
                         "n-slots", n_slots,
                         "slot-size", (guint64) slot_size,
                         "backing", KV_HOST_BUFFER_BACKING_ANONYMOUS,
                         NULL);
}

/**
 * kv_host_buffer_new_shared:
 * @n_slots: how many slots, at least 1
 * @slot_size: bytes per slot, a positive multiple of 4096
 * @error: return location for an error
 *
 * Creates a buffer in a new memfd, so that another process can map the same
 * memory through the descriptor returned by [method@Kv.HostBuffer.get_fd].
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new buffer, or %NULL with @error set
 */
KvHostBuffer *
kv_host_buffer_new_shared (guint    n_slots,
                           gsize    slot_size,
                           GError **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_n_slots (n_slots, error))
    return NULL;

  return g_initable_new (KV_TYPE_HOST_BUFFER, NULL, error,
                         "n-slots", n_slots,
                         "slot-size", (guint64) slot_size,
                         "backing", KV_HOST_BUFFER_BACKING_MEMFD,
                         "fd", -1,
                         NULL);
}

/**
 * kv_host_buffer_new_for_fd:
 * @fd: a descriptor of shareable memory (a memfd, a shm file)
 * @n_slots: how many slots, at least 1
 * @slot_size: bytes per slot, a positive multiple of 4096
 * @error: return location for an error
 *
 * Maps memory that another buffer (possibly in another process) shares
 * through @fd. The buffer maps a duplicate of @fd: the caller keeps @fd and
 * closes it when it likes. The object behind @fd must hold at least
 * @n_slots × @slot_size bytes.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new buffer, or %NULL with @error set
 */
KvHostBuffer *
kv_host_buffer_new_for_fd (int      fd,
                           guint    n_slots,
                           gsize    slot_size,
                           GError **error)
{
  g_return_val_if_fail (fd >= 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_n_slots (n_slots, error))
    return NULL;

  return g_initable_new (KV_TYPE_HOST_BUFFER, NULL, error,
                         "n-slots", n_slots,
                         "slot-size", (guint64) slot_size,
                         "backing", KV_HOST_BUFFER_BACKING_MEMFD,
                         "fd", fd,
                         NULL);
}

/**
 * kv_host_buffer_new_for_file:
 * @path: (type filename): the shared file, such as
 *   `/dev/shm/vllm_offload_<engine>.mmap`
 * @n_slots: how many slots, at least 1
 * @slot_size: bytes per slot, a positive multiple of 4096
 * @error: return location for an error
 *
 * Maps a shared file with vLLM's `SharedOffloadRegion` protocol. If @path
 * does not exist, it is created (mode 0600) and sized to
 * @n_slots × @slot_size, and this buffer becomes its creator: it unlinks the
 * file when it is finalized. If @path exists, it is mapped as it is and must
 * already hold at least @n_slots × @slot_size bytes (unlike vLLM, which
 * waits up to 30 s for the creator to size it, this fails at once).
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new buffer, or %NULL with @error set (naming
 *   @path) when the file cannot be created, opened, sized or mapped, or is
 *   too small
 */
KvHostBuffer *
kv_host_buffer_new_for_file (const char  *path,
                             guint        n_slots,
                             gsize        slot_size,
                             GError     **error)
{
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_n_slots (n_slots, error))
    return NULL;

  return g_initable_new (KV_TYPE_HOST_BUFFER, NULL, error,
                         "n-slots", n_slots,
                         "slot-size", (guint64) slot_size,
                         "backing", KV_HOST_BUFFER_BACKING_FILE,
                         "path", path,
                         NULL);
}

/**
 * kv_host_buffer_new_for_memory:
 * @data: (not nullable): the first byte of the memory, page aligned
 * @n_slots: how many slots, at least 1
 * @slot_size: bytes per slot, a positive multiple of 4096
 * @release: (scope async) (closure release_data) (nullable): called once
 *   with @release_data when the buffer no longer uses @data
 * @release_data: (nullable): data for @release
 * @error: return location for an error
 *
 * Makes a buffer of memory the caller already has, without mapping or
 * copying anything: slot `i` is the @slot_size bytes at
 * @data + `i` × @slot_size. Use it for memory that has no name to map again,
 * such as vLLM's primary region once vLLM removed its `/dev/shm` file (the
 * mapping lives on in every process that has it); its
 * [property@Kv.HostBuffer:backing] is %KV_HOST_BUFFER_BACKING_BORROWED and
 * [method@Kv.HostBuffer.get_fd] is -1.
 *
 * The caller keeps @data mapped, readable and writable until @release is
 * called: when the buffer is finalized, or at once when construction fails.
 * From Python, pass the address as an int and a function that holds what
 * owns the memory (a `memoryview`, an `mmap`), so that it lives as long as
 * the buffer.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new buffer, or %NULL with @error set when the
 *   geometry is invalid or @data is not page aligned
 */
KvHostBuffer *
kv_host_buffer_new_for_memory (gpointer        data,
                               guint           n_slots,
                               gsize           slot_size,
                               GDestroyNotify  release,
                               gpointer        release_data,
                               GError        **error)
{
  g_autoptr(KvHostBuffer) self = NULL;

  g_return_val_if_fail (data != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_n_slots (n_slots, error))
    {
      if (release != NULL)
        release (release_data);
      return NULL;
    }

  self = g_object_new (KV_TYPE_HOST_BUFFER,
                       "n-slots", n_slots,
                       "slot-size", (guint64) slot_size,
                       "backing", KV_HOST_BUFFER_BACKING_BORROWED,
                       NULL);
  self->borrowed = data;
  self->release = release;
  self->release_data = release_data;
  /* A failed init leaves the release to finalize, like a built buffer's. */
  if (!g_initable_init (G_INITABLE (self), NULL, error))
    return NULL;

  return g_steal_pointer (&self);
}

/**
 * kv_host_buffer_get_n_slots:
 * @self: a buffer
 *
 * Gets the number of slots. May be called from any thread.
 *
 * Returns: the value of [property@Kv.HostBuffer:n-slots]
 */
guint
kv_host_buffer_get_n_slots (KvHostBuffer *self)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), 0);

  return self->n_slots;
}

/**
 * kv_host_buffer_get_slot_size:
 * @self: a buffer
 *
 * Gets the size of one slot in bytes. May be called from any thread.
 *
 * Returns: the value of [property@Kv.HostBuffer:slot-size]
 */
gsize
kv_host_buffer_get_slot_size (KvHostBuffer *self)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), 0);

  return self->slot_size;
}

/**
 * kv_host_buffer_get_size:
 * @self: a buffer
 *
 * Gets the size of the whole mapping, `n-slots` × `slot-size` bytes. May be
 * called from any thread.
 *
 * Returns: the size in bytes
 */
gsize
kv_host_buffer_get_size (KvHostBuffer *self)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), 0);

  return self->size;
}

/**
 * kv_host_buffer_get_backing:
 * @self: a buffer
 *
 * Gets what the slot memory is made of. May be called from any thread.
 *
 * Returns: the value of [property@Kv.HostBuffer:backing]
 */
KvHostBufferBacking
kv_host_buffer_get_backing (KvHostBuffer *self)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), KV_HOST_BUFFER_BACKING_ANONYMOUS);

  return self->backing;
}

/**
 * kv_host_buffer_get_fd:
 * @self: a buffer
 *
 * Gets the descriptor of the shared memory: the memfd of a
 * %KV_HOST_BUFFER_BACKING_MEMFD buffer (to pass to another process, which
 * maps it with [ctor@Kv.HostBuffer.new_for_fd]) or the open shared file of a
 * %KV_HOST_BUFFER_BACKING_FILE buffer. The buffer owns it and closes it when
 * finalized; duplicate it to keep it longer. May be called from any thread.
 *
 * Returns: the descriptor, or -1 for anonymous and borrowed memory
 */
int
kv_host_buffer_get_fd (KvHostBuffer *self)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), -1);

  return self->fd;
}

/**
 * kv_host_buffer_get_data:
 * @self: a buffer
 *
 * Gets the start of the mapping, page aligned: slot `i` starts at
 * `i × slot-size` bytes from it. Use it to register the whole buffer once
 * (io_uring fixed buffers, `cudaHostRegister`). May be called from any
 * thread; valid as long as @self is alive.
 *
 * Returns: (transfer none): the start of the slot memory
 */
gpointer
kv_host_buffer_get_data (KvHostBuffer *self)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), NULL);

  return self->data;
}

/**
 * kv_host_buffer_peek_slot:
 * @self: a buffer
 * @slot: a slot index, below `n-slots`
 *
 * Gets the memory of one slot (`slot-size` bytes, page aligned) for C code
 * that reads or writes it in place. May be called from any thread; valid as
 * long as @self is alive.
 *
 * Returns: (transfer none): the start of the slot
 */
gpointer
kv_host_buffer_peek_slot (KvHostBuffer *self,
                          guint32       slot)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), NULL);
  g_return_val_if_fail (slot < self->n_slots, NULL);
  g_return_val_if_fail (self->data != NULL, NULL);

  return self->data + (gsize) slot * self->slot_size;
}

static gboolean
check_slot (KvHostBuffer  *self,
            guint32        slot,
            GError       **error)
{
  if (slot >= self->n_slots)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Slot %u is out of range (the buffer has %u slots)",
                   slot, self->n_slots);
      return FALSE;
    }
  return TRUE;
}

/**
 * kv_host_buffer_read_slot:
 * @self: a buffer
 * @slot: a slot index
 * @error: return location for an error
 *
 * Gets the memory of one slot as bytes without copying: the returned bytes
 * point into the buffer and keep it alive. They see later writes to the slot,
 * so only hold them while the slot is pinned (for example between
 * `prepare_read` and `complete_read` of the primary tier).
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): `slot-size` bytes of slot memory, or %NULL with
 *   @error set when @slot is out of range
 */
GBytes *
kv_host_buffer_read_slot (KvHostBuffer  *self,
                          guint32        slot,
                          GError       **error)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_slot (self, slot, error))
    return NULL;

  return g_bytes_new_with_free_func (self->data + (gsize) slot * self->slot_size,
                                     self->slot_size,
                                     g_object_unref, g_object_ref (self));
}

/**
 * kv_host_buffer_write_slot:
 * @self: a buffer
 * @slot: a slot index
 * @data: at most `slot-size` bytes
 * @error: return location for an error
 *
 * Copies @data to the start of @slot; the rest of the slot is left as it
 * is, and the slot's checksum is forgotten (see
 * [method@Kv.HostBuffer.get_slot_checksum]). May be called from any thread
 * by the owner of the slot.
 *
 * Returns: %TRUE on success, %FALSE with @error set when @slot is out of
 *   range or @data is longer than a slot
 */
gboolean
kv_host_buffer_write_slot (KvHostBuffer  *self,
                           guint32        slot,
                           GBytes        *data,
                           GError       **error)
{
  gconstpointer src;
  gsize len;

  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), FALSE);
  g_return_val_if_fail (data != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_slot (self, slot, error))
    return FALSE;

  src = g_bytes_get_data (data, &len);
  if (len > self->slot_size)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "%" G_GSIZE_FORMAT " bytes do not fit in slot %u of %"
                   G_GSIZE_FORMAT " bytes",
                   len, slot, self->slot_size);
      return FALSE;
    }

  self->checksum_known[slot] = FALSE;
  if (len > 0)
    memcpy (self->data + (gsize) slot * self->slot_size, src, len);
  return TRUE;
}

/**
 * kv_host_buffer_get_slot_checksum:
 * @self: a buffer
 * @slot: a slot index, below `n-slots`
 * @out_checksum: (out) (optional): the XXH3-64 (seed 0) of the slot's
 *   `slot-size` bytes
 *
 * Gets the checksum carried with the slot's current bytes, when whoever
 * wrote them computed it (see [method@Kv.HostBuffer.set_slot_checksum]).
 * A tier that stores the slot writes it into its own record instead of
 * reading the whole slot to compute it; without it, the tier computes it.
 *
 * The checksum is known from the moment the slot's writer sets it until the
 * primary tier hands the slot to a new writer or frees it, or
 * [method@Kv.HostBuffer.write_slot] or
 * [method@Kv.HostBuffer.clear_slot_checksum] changes the slot. Call it
 * while the slot is pinned (a store job's slots are), from any thread that
 * may read the slot.
 *
 * Returns: %TRUE when the checksum is known, %FALSE (leaving
 *   @out_checksum alone) when it must be computed from the bytes
 */
gboolean
kv_host_buffer_get_slot_checksum (KvHostBuffer *self,
                                  guint32       slot,
                                  guint64      *out_checksum)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (self), FALSE);
  g_return_val_if_fail (self->checksum_known != NULL, FALSE);
  g_return_val_if_fail (slot < self->n_slots, FALSE);

  if (!self->checksum_known[slot])
    return FALSE;
  if (out_checksum != NULL)
    *out_checksum = self->checksums[slot];
  return TRUE;
}

/**
 * kv_host_buffer_set_slot_checksum:
 * @self: a buffer
 * @slot: a slot index, below `n-slots`
 * @checksum: the XXH3-64 (seed 0) of the slot's `slot-size` bytes, as they
 *   are now and will stay
 *
 * Records the checksum of the slot's bytes, for the slot's writer that
 * computed it while it wrote them: [class@Kv.HostDevice] as it copies a
 * chunk from the device, a secondary tier after it loaded a chunk and
 * verified it against the checksum the chunk was stored with. Set it
 * before the write is reported (the store completed, the load job
 * finished), and only for bytes that will not change until then: a wrong
 * checksum makes every tier store a chunk that fails its check when
 * loaded. Any thread, by the slot's owner.
 */
void
kv_host_buffer_set_slot_checksum (KvHostBuffer *self,
                                  guint32       slot,
                                  guint64       checksum)
{
  g_return_if_fail (KV_IS_HOST_BUFFER (self));
  g_return_if_fail (self->checksum_known != NULL);
  g_return_if_fail (slot < self->n_slots);

  self->checksums[slot] = checksum;
  self->checksum_known[slot] = TRUE;
}

/**
 * kv_host_buffer_clear_slot_checksum:
 * @self: a buffer
 * @slot: a slot index, below `n-slots`
 *
 * Forgets the checksum of the slot's bytes: for a writer that changes
 * them in place (through [method@Kv.HostBuffer.peek_slot]) after a
 * checksum was set. The primary tier clears it itself whenever it hands
 * the slot to a new writer and when it frees the slot. Any thread, by the
 * slot's owner.
 */
void
kv_host_buffer_clear_slot_checksum (KvHostBuffer *self,
                                    guint32       slot)
{
  g_return_if_fail (KV_IS_HOST_BUFFER (self));
  g_return_if_fail (self->checksum_known != NULL);
  g_return_if_fail (slot < self->n_slots);

  self->checksum_known[slot] = FALSE;
}

guint8 *
_kv_host_buffer_get_checksum_flags (KvHostBuffer *self)
{
  /* a buffer never initialized (a binding that skipped GInitable) still
   * gets its flags: the primary tier writes them */
  if (self->checksum_known == NULL && self->n_slots > 0)
    {
      self->checksums = g_new (guint64, self->n_slots);
      self->checksum_known = g_new0 (guint8, self->n_slots);
    }
  return self->checksum_known;
}
