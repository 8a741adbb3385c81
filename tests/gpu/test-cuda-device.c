/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <poll.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <kvtier.h>

#include "kv-cuda-device.h"
#include "kv-cuda-kernels.h"

/* The CUDA device on a GPU: byte-exact round trips through random block
 * maps in vLLM's layouts, both directions at once with many jobs in
 * flight, drain, cancellation and disposal with jobs in flight, bad block
 * ids and freed memory. Exits 77 (skipped) where cudaGetDeviceCount finds
 * no GPU. Linked with a static copy of the device.
 *
 * Built a second time as test-cuda-device-fake (tests/cuda), against the
 * test double of the CUDA runtime in tests/cuda/fake-cudart.c, with
 * KV_CUDA_FAKE: the same tests at smaller sizes on host memory, plus
 * injected CUDA failures, so the device's threads and error paths run on
 * every machine. */

#ifdef KV_CUDA_FAKE
# include "fake-cudart.h"
# define MEMORY_BUDGET (8u << 20)
# define BIG_BLOCK (256 * 1024)
# define MID_BLOCK (128 * 1024)
#else
# define MEMORY_BUDGET (256u << 20)
# define BIG_BLOCK (2 * 1024 * 1024)
# define MID_BLOCK (512 * 1024)
#endif

#define N_LAYERS 4
#define BPC 4
#define N_SLOTS 8
#define TIMEOUT_MS 60000

typedef enum {
  LAYOUT_DENSE,        /* a tensor per layer, K and V of a block adjacent */
  LAYOUT_KV_PLANES,    /* a tensor per layer, (2, num_blocks, ...) */
  LAYOUT_CROSS_LAYER,  /* one tensor, (num_blocks, num_layers, ...) */
} LayoutKind;

typedef struct
{
  LayoutKind    kind;
  KvHostBuffer *buffer;
  KvCudaDevice *device;
  guint8       *memory;        /* one cudaMalloc holding every layer */
  gsize         memory_size;
  guint         n_blocks;
  gsize         block_bytes;
  guint         n_planes;
  guint64       seed;
} Rig;

static void
cuda_ok (cudaError_t err,
         const char *what)
{
  if (err != cudaSuccess)
    g_error ("%s: %s (%s)", what, cudaGetErrorName (err), cudaGetErrorString (err));
}

/* Where plane @p of block @b of layer @l lives, as the device is told. */
static guint64
plane_address (Rig   *rig,
               guint  l,
               guint  b,
               guint  p)
{
  guint64 base = (guint64) (guintptr) rig->memory;
  gsize bb = rig->block_bytes;

  switch (rig->kind)
    {
    case LAYOUT_DENSE:
      return base + ((guint64) l * rig->n_blocks + b) * bb;
    case LAYOUT_KV_PLANES:
      return base + (guint64) l * rig->n_blocks * bb + (guint64) p * rig->n_blocks * (bb / 2) +
             (guint64) b * (bb / 2);
    case LAYOUT_CROSS_LAYER:
    default:
      return base + ((guint64) b * N_LAYERS + l) * bb + (guint64) p * (bb / 2);
    }
}

static void
rig_fill (Rig     *rig,
          guint64  seed)
{
  rig->seed = seed;
  cuda_ok (kv_cuda_launch_fill_pattern ((unsigned long long *) (void *) rig->memory, rig->memory_size / 8,
                                        seed, NULL), "fill kernel");
  cuda_ok (cudaDeviceSynchronize (), "cudaDeviceSynchronize");
}

static KvCudaDevice *
device_new (Rig     *rig,
            guint64  gather_run_bytes,
            GError **error)
{
  gsize bb = rig->block_bytes;
  g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();
  g_auto(GStrv) addresses = NULL;

  switch (rig->kind)
    {
    case LAYOUT_DENSE:
      for (guint l = 0; l < N_LAYERS; l++)
        {
          g_autofree char *text = g_strdup_printf ("0x%" G_GINT64_MODIFIER "x", plane_address (rig, l, 0, 0));

          g_strv_builder_add (builder, text);
        }
      addresses = g_strv_builder_end (builder);
      return g_initable_new (KV_TYPE_CUDA_DEVICE, NULL, error,
                             "primary", rig->buffer, "n-blocks", rig->n_blocks,
                             "block-bytes", (guint64) bb, "n-layers", N_LAYERS,
                             "blocks-per-chunk", BPC, "layer-addresses", addresses,
                             "gather-run-bytes", gather_run_bytes, NULL);
    case LAYOUT_KV_PLANES:
      for (guint l = 0; l < N_LAYERS; l++)
        {
          g_autofree char *text = g_strdup_printf ("%" G_GUINT64_FORMAT, plane_address (rig, l, 0, 0));

          g_strv_builder_add (builder, text);
        }
      addresses = g_strv_builder_end (builder);
      return g_initable_new (KV_TYPE_CUDA_DEVICE, NULL, error,
                             "primary", rig->buffer, "n-blocks", rig->n_blocks,
                             "block-bytes", (guint64) bb, "n-layers", N_LAYERS,
                             "blocks-per-chunk", BPC, "layer-addresses", addresses,
                             "n-planes", 2u,
                             "plane-stride-bytes", (guint64) rig->n_blocks * (bb / 2),
                             "block-stride-bytes", (guint64) bb / 2,
                             "gather-run-bytes", gather_run_bytes, NULL);
    case LAYOUT_CROSS_LAYER:
    default:
      return g_initable_new (KV_TYPE_CUDA_DEVICE, NULL, error,
                             "primary", rig->buffer, "n-blocks", rig->n_blocks,
                             "block-bytes", (guint64) bb, "n-layers", N_LAYERS,
                             "blocks-per-chunk", BPC,
                             "base-address", (guint64) (guintptr) rig->memory,
                             "layer-stride-bytes", (guint64) bb,
                             "n-planes", 2u, "plane-stride-bytes", (guint64) bb / 2,
                             "block-stride-bytes", (guint64) N_LAYERS * bb,
                             "gather-run-bytes", gather_run_bytes, NULL);
    }
}

static Rig *
rig_new (LayoutKind kind,
         gsize      block_bytes,
         guint64    gather_run_bytes)
{
  Rig *rig = g_new0 (Rig, 1);
  g_autoptr(GError) error = NULL;
  gsize slot_size = (gsize) BPC * N_LAYERS * block_bytes;

  rig->kind = kind;
  rig->block_bytes = block_bytes;
  rig->n_planes = kind == LAYOUT_DENSE ? 1 : 2;
  /* At most MEMORY_BUDGET of device memory, at least 16 chunks of blocks. */
  rig->n_blocks = (guint) CLAMP (MEMORY_BUDGET / (N_LAYERS * block_bytes), 16 * BPC, 64 * BPC);
  rig->memory_size = (gsize) N_LAYERS * rig->n_blocks * block_bytes;
  cuda_ok (cudaMalloc ((void **) &rig->memory, rig->memory_size), "cudaMalloc");
  rig->buffer = kv_host_buffer_new (N_SLOTS, slot_size, &error);
  g_assert_no_error (error);
  rig_fill (rig, 1);
  rig->device = device_new (rig, gather_run_bytes, &error);
  g_assert_no_error (error);
  g_assert_nonnull (rig->device);
  return rig;
}

static void
rig_free (Rig *rig)
{
  g_autoptr(GError) error = NULL;

  if (rig->device != NULL)
    {
      g_assert_true (kv_device_shutdown (KV_DEVICE (rig->device), &error));
      g_assert_no_error (error);
      g_clear_object (&rig->device);
    }
  g_clear_object (&rig->buffer);
  cuda_ok (cudaFree (rig->memory), "cudaFree");
  g_free (rig);
}

/* Takes results until @n arrived (sleeping on the wake-up descriptor),
 * checking each direction's order and that no job is reported twice. */
static GPtrArray *
collect (KvDevice   *device,
         guint       n,
         GHashTable *store_ids)
{
  GPtrArray *results = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  g_autoptr(GHashTable) seen = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  guint64 last[2] = { 0, 0 };
  gint64 deadline = g_get_monotonic_time () + TIMEOUT_MS * 1000;

  while (results->len < n)
    {
      struct pollfd pfd = { kv_device_get_wakeup_fd (device), POLLIN, 0 };
      KvJobResult **batch;

      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      (void) poll (&pfd, 1, 100);
      batch = kv_device_get_finished (device);
      for (KvJobResult **r = batch; *r != NULL; r++)
        {
          guint64 id = kv_job_result_get_job_id (*r);
          guint d = store_ids != NULL && g_hash_table_contains (store_ids, &id) ? 0 : 1;
          guint64 *key = g_new (guint64, 1);

          *key = id;
          g_assert_false (g_hash_table_contains (seen, key));
          g_hash_table_add (seen, key);
          g_assert_cmpuint (id, >, last[d]);
          last[d] = id;
          g_ptr_array_add (results, *r);
        }
      g_free (batch);
    }
  g_assert_cmpuint (kv_device_get_n_active_jobs (device), ==, 0);
  return results;
}

static guint *
distinct (GRand *rand,
          guint  n,
          guint  range)
{
  guint *out = g_new (guint, n);
  g_autofree guint *perm = g_new (guint, range);

  g_assert_cmpuint (n, <=, range);
  for (guint i = 0; i < range; i++)
    perm[i] = i;
  for (guint i = 0; i < n; i++)
    {
      guint j = g_rand_int_range (rand, i, range);
      guint t = perm[i];

      perm[i] = perm[j];
      perm[j] = t;
      out[i] = perm[i];
    }
  return out;
}

/* The bytes a slot must hold after storing @blocks (@skip leading blocks of
 * the chunk not copied) from device memory filled with the rig's seed. */
static void
check_stored_slot (Rig         *rig,
                   guint        slot,
                   const guint *blocks,
                   guint        skip)
{
  const guint8 *data = kv_host_buffer_peek_slot (rig->buffer, slot);
  gsize pb = rig->block_bytes / rig->n_planes;

  for (guint l = 0; l < N_LAYERS; l++)
    for (guint j = skip; j < BPC; j++)
      for (guint p = 0; p < rig->n_planes; p++)
        {
          /* Blocks are whole 64-bit words apart. */
          const guint64 *got = (const guint64 *) (const void *) (data + ((gsize) l * BPC + j) * rig->block_bytes + p * pb);
          guint64 first = (plane_address (rig, l, blocks[j - skip], p) -
                           (guint64) (guintptr) rig->memory) / 8;

          for (gsize w = 0; w < pb / 8; w++)
            if (got[w] != kv_cuda_pattern_word (rig->seed, first + w))
              g_error ("slot %u layer %u block %u plane %u word %" G_GSIZE_FORMAT
                       ": %" G_GINT64_MODIFIER "x, expected %" G_GINT64_MODIFIER "x",
                       slot, l, blocks[j - skip], p, w, got[w],
                       (guint64) kv_cuda_pattern_word (rig->seed, first + w));
        }
}

/* Random chunks device → primary, then back into other blocks of zeroed
 * device memory; every byte checked, and bytes no job named left zero. */
static void
roundtrip (LayoutKind kind,
           gsize      block_bytes,
           guint64    gather_run_bytes)
{
  Rig *rig = rig_new (kind, block_bytes, gather_run_bytes);
  KvDevice *device = KV_DEVICE (rig->device);
  GRand *rand = g_rand_new_with_seed ((guint32) (kind * 7919 + block_bytes + gather_run_bytes));
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  g_autofree guint *slots = distinct (rand, N_SLOTS, N_SLOTS);
  g_autofree guint8 *after = g_malloc (rig->memory_size);
  guint n_device_chunks = rig->n_blocks / BPC;
  g_autofree guint *store_blocks = NULL;
  g_autofree guint *load_blocks = NULL;
  guint skip = g_rand_boolean (rand) ? 1 : 0;
  guint32 chunk_ids[N_SLOTS];
  guint32 block_ids[N_SLOTS * BPC];
  guint n_chunks = N_SLOTS;
  guint n_block_ids = n_chunks * BPC - skip;
  guint64 id;

  g_test_message ("layout %d, %" G_GSIZE_FORMAT " KiB blocks, gather-run-bytes %"
                  G_GUINT64_FORMAT ", %u device blocks", kind, block_bytes / 1024,
                  gather_run_bytes, rig->n_blocks);

  /* Random scattered blocks: neither adjacent nor in order. */
  store_blocks = distinct (rand, n_block_ids, rig->n_blocks);
  for (guint c = 0; c < n_chunks; c++)
    chunk_ids[c] = slots[c];
  for (guint i = 0; i < n_block_ids; i++)
    block_ids[i] = store_blocks[i];
  /* Two jobs: the first with the partial chunk. */
  id = kv_device_submit_store (device, block_ids, BPC - skip, chunk_ids, 1, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (id, >, 0);
  id = kv_device_submit_store (device, block_ids + BPC - skip, n_block_ids - (BPC - skip),
                               chunk_ids + 1, n_chunks - 1, &error);
  g_assert_no_error (error);
  results = collect (device, 2, NULL);
  for (guint i = 0; i < results->len; i++)
    {
      KvJobResult *r = g_ptr_array_index (results, i);

      g_assert_true (kv_job_result_get_success (r));
      g_assert_cmpfloat (kv_job_result_get_transfer_time (r), >, 0);
    }
  g_assert_cmpint (kv_job_result_get_transfer_bytes (g_ptr_array_index (results, 1)), ==,
                   (gint64) (n_chunks - 1) * BPC * N_LAYERS * block_bytes);
  check_stored_slot (rig, slots[0], store_blocks, skip);
  for (guint c = 1; c < n_chunks; c++)
    check_stored_slot (rig, slots[c], store_blocks + (BPC - skip) + (c - 1) * BPC, 0);
  g_clear_pointer (&results, g_ptr_array_unref);

  /* Load: whole chunks into consecutive blocks of random device chunks
   * (the copy engine's coalesced path) for half the slots, scattered
   * blocks for the rest. */
  cuda_ok (cudaMemset (rig->memory, 0, rig->memory_size), "cudaMemset");
  /* A device memset does not wait for itself; the device's streams do not
   * wait for the legacy stream either. */
  cuda_ok (cudaDeviceSynchronize (), "cudaDeviceSynchronize");
  {
    g_autofree guint *dev_chunks = distinct (rand, n_chunks / 2, n_device_chunks);

    load_blocks = distinct (rand, n_chunks * BPC, rig->n_blocks);
    for (guint c = 0; c < n_chunks / 2; c++)
      for (guint j = 0; j < BPC; j++)
        load_blocks[c * BPC + j] = dev_chunks[c] * BPC + j;
    /* Keep the scattered half away from the consecutive half. */
    for (guint i = (n_chunks / 2) * BPC; i < n_chunks * BPC; i++)
      for (guint c = 0; c < n_chunks / 2; c++)
        if (load_blocks[i] / BPC == dev_chunks[c])
          load_blocks[i] = G_MAXUINT;
  }
  {
    guint n_load = 0;
    guint32 load_chunks[N_SLOTS];
    guint32 load_ids[N_SLOTS * BPC];
    guint n_jobs = 0;

    for (guint c = 0; c < n_chunks; c++)
      {
        gboolean whole = TRUE;

        for (guint j = 0; j < BPC; j++)
          whole = whole && load_blocks[c * BPC + j] != G_MAXUINT;
        if (!whole)
          continue;
        load_chunks[n_load] = slots[c];
        for (guint j = 0; j < BPC; j++)
          load_ids[n_load * BPC + j] = load_blocks[c * BPC + j];
        n_load++;
      }
    g_assert_cmpuint (n_load, >=, n_chunks / 2);
    for (guint c = 0; c < n_load; c++, n_jobs++)
      {
        id = kv_device_submit_load (device, &load_chunks[c], 1, &load_ids[c * BPC], BPC, &error);
        g_assert_no_error (error);
        g_assert_cmpuint (id, >, 0);
      }
    results = collect (device, n_jobs, NULL);
    for (guint i = 0; i < results->len; i++)
      g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, i)));

    cuda_ok (cudaMemcpy (after, rig->memory, rig->memory_size, cudaMemcpyDeviceToHost), "cudaMemcpy");
    {
      g_autofree guint8 *expected = g_malloc0 (rig->memory_size);
      gsize pb = block_bytes / rig->n_planes;

      for (guint c = 0; c < n_load; c++)
        {
          const guint8 *slot = kv_host_buffer_peek_slot (rig->buffer, load_chunks[c]);

          for (guint l = 0; l < N_LAYERS; l++)
            for (guint j = 0; j < BPC; j++)
              for (guint p = 0; p < rig->n_planes; p++)
                memcpy (expected + (plane_address (rig, l, load_ids[c * BPC + j], p) -
                                    (guint64) (guintptr) rig->memory),
                        slot + ((gsize) l * BPC + j) * block_bytes + p * pb, pb);
        }
      /* Loaded blocks hold their slots' bytes; nothing else was written. */
      if (memcmp (after, expected, rig->memory_size) != 0)
        {
          for (gsize i = 0; i < rig->memory_size; i++)
            if (after[i] != expected[i])
              g_error ("device byte %" G_GSIZE_FORMAT " is %u, expected %u",
                       i, after[i], expected[i]);
        }
    }
  }

  g_rand_free (rand);
  rig_free (rig);
}

static void
test_roundtrip (gconstpointer data)
{
#ifdef KV_CUDA_FAKE
  static const gsize sizes[] = { 4096, 64 * 1024, BIG_BLOCK };
#else
  static const gsize sizes[] = { 4096, 64 * 1024, 512 * 1024, 2 * 1024 * 1024 };
#endif
  LayoutKind kind = GPOINTER_TO_INT (data);

  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      roundtrip (kind, sizes[i], 256 * 1024);   /* the kernel for small pieces */
      roundtrip (kind, sizes[i], 0);            /* copy engines only */
      roundtrip (kind, sizes[i], G_MAXUINT64);  /* the kernel always */
    }
}

/* Fills slots @first .. @first + @n with a pattern of @seed from the host. */
static void
fill_slots (Rig     *rig,
            guint    first,
            guint    n,
            guint64  seed)
{
  gsize slot_size = kv_host_buffer_get_slot_size (rig->buffer);

  for (guint s = first; s < first + n; s++)
    {
      guint64 *words = kv_host_buffer_peek_slot (rig->buffer, s);

      for (gsize w = 0; w < slot_size / 8; w++)
        words[w] = kv_cuda_pattern_word (seed + s, w);
    }
}

/* Stores and loads at once, many of each in flight before any result is
 * taken: every job reported once, in order per direction, bytes right. */
static void
test_bidirectional (void)
{
  Rig *rig = rig_new (LAYOUT_DENSE, 64 * 1024, 256 * 1024);
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GHashTable) store_ids = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  g_autoptr(GPtrArray) results = NULL;
  g_autoptr(GError) error = NULL;
  const guint n_jobs = 200;
  guint half = rig->n_blocks / 2;
  g_autofree guint8 *after = g_malloc (rig->memory_size);

  /* Slots 0-3 hold bytes to load into blocks of the upper half; the lower
   * half's blocks are stored into slots 4-7. */
  fill_slots (rig, 0, 4, 77);
  for (guint k = 0; k < n_jobs; k++)
    {
      guint32 store_chunk = 4 + k % 4;
      guint32 load_chunk = k % 4;
      guint32 store_blocks[BPC], load_blocks[BPC];
      guint64 *key = g_new (guint64, 1);
      guint64 id;

      for (guint j = 0; j < BPC; j++)
        {
          store_blocks[j] = (k % 4) * BPC * 2 + j * 2;       /* scattered, lower half */
          g_assert_cmpuint (store_blocks[j], <, half);
          load_blocks[j] = half + (k % 4) * BPC + j;        /* consecutive, upper half */
        }
      *key = kv_device_submit_store (device, store_blocks, BPC, &store_chunk, 1, &error);
      g_assert_no_error (error);
      g_hash_table_add (store_ids, key);
      id = kv_device_submit_load (device, &load_chunk, 1, load_blocks, BPC, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (id, >, 0);
    }
  results = collect (device, 2 * n_jobs, store_ids);
  for (guint i = 0; i < results->len; i++)
    g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, i)));

  for (guint s = 0; s < 4; s++)
    {
      guint blocks[BPC];

      for (guint j = 0; j < BPC; j++)
        blocks[j] = s * BPC * 2 + j * 2;
      check_stored_slot (rig, 4 + s, blocks, 0);
    }
  cuda_ok (cudaMemcpy (after, rig->memory, rig->memory_size, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (guint s = 0; s < 4; s++)
    {
      const guint8 *slot = kv_host_buffer_peek_slot (rig->buffer, s);

      for (guint l = 0; l < N_LAYERS; l++)
        for (guint j = 0; j < BPC; j++)
          g_assert_cmpmem (after + (plane_address (rig, l, half + s * BPC + j, 0) -
                                    (guint64) (guintptr) rig->memory),
                           rig->block_bytes,
                           slot + ((gsize) l * BPC + j) * rig->block_bytes, rig->block_bytes);
    }
  rig_free (rig);
}

/* Big jobs queued, then drained with kv_device_wait_all(): nothing lost. */
static void
test_drain (void)
{
  Rig *rig = rig_new (LAYOUT_CROSS_LAYER, BIG_BLOCK, 256 * 1024);
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GError) error = NULL;
  g_autoptr(GHashTable) store_ids = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  g_autoptr(GPtrArray) results = NULL;
  guint32 blocks[2 * BPC];
  guint32 chunks[2] = { 0, 1 };

  for (guint j = 0; j < 2 * BPC; j++)
    blocks[j] = j;
  for (guint k = 0; k < 100; k++)
    {
      guint64 *key = g_new (guint64, 1);

      *key = kv_device_submit_store (device, blocks, 2 * BPC, chunks, 2, &error);
      g_assert_no_error (error);
      g_hash_table_add (store_ids, key);
    }
  g_assert_true (kv_device_wait_all (device, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_device_get_n_active_jobs (device), ==, 0);
  results = collect (device, 100, store_ids);
  for (guint i = 0; i < results->len; i++)
    g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, i)));
  check_stored_slot (rig, 0, blocks, 0);
  check_stored_slot (rig, 1, blocks + BPC, 0);
  rig_free (rig);
}

/* A short store and load, checked byte for byte: the device still works. */
static void
still_works (Rig *rig)
{
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  guint32 blocks[BPC] = { 3, 9, 1, 20 };
  guint32 chunk = 5;

  rig_fill (rig, rig->seed + 1);
  g_assert_cmpuint (kv_device_submit_store (device, blocks, BPC, &chunk, 1, &error), >, 0);
  g_assert_no_error (error);
  results = collect (device, 1, NULL);
  g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, 0)));
  check_stored_slot (rig, chunk, (guint *) blocks, 0);
}

/* Cancelling with jobs queued: those still on the host fail (cancelled),
 * those on the GPU finish; all reported once, successes before failures in
 * each direction; then the device works. */
static void
test_cancel (void)
{
  Rig *rig = rig_new (LAYOUT_DENSE, BIG_BLOCK, 256 * 1024);
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GError) error = NULL;
  g_autoptr(GHashTable) store_ids = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  g_autoptr(GPtrArray) results = NULL;
  g_autofree char *last_error = NULL;
  guint32 blocks[2 * BPC];
  guint32 store_chunks[2] = { 0, 1 };
  guint32 load_chunks[2] = { 2, 3 };
  guint32 load_blocks[2 * BPC];
  guint n_cancelled, n_failed = 0;
  gboolean failed_seen[2] = { FALSE, FALSE };

  for (guint j = 0; j < 2 * BPC; j++)
    {
      blocks[j] = j;
      load_blocks[j] = 4 * BPC + j;
    }
  for (guint k = 0; k < 64; k++)
    {
      guint64 *key = g_new (guint64, 1);
      gint64 deadline = g_get_monotonic_time () + TIMEOUT_MS * 1000;

      *key = kv_device_submit_store (device, blocks, 2 * BPC, store_chunks, 2, &error);
      g_assert_no_error (error);
      g_hash_table_add (store_ids, key);
      g_assert_cmpuint (kv_device_submit_load (device, load_chunks, 2, load_blocks, 2 * BPC, &error), >, 0);
      g_assert_no_error (error);
      /* The first jobs finish before the rest are queued, so there is
       * something on both sides of the cancellation. */
      while (k == 3 && kv_device_get_n_active_jobs (device) > 6)
        {
          g_assert_cmpint (g_get_monotonic_time (), <, deadline);
          g_usleep (100);
        }
    }
  n_cancelled = kv_cuda_device_cancel (rig->device);
  g_test_message ("%u of 128 jobs cancelled", n_cancelled);
  /* Jobs of 32 big blocks, at most 32 per direction on the GPU: some were
   * waiting; two at least had finished. */
  g_assert_cmpuint (n_cancelled, >, 0);
  g_assert_cmpuint (n_cancelled, <=, 126);

  results = collect (device, 128, store_ids);
  for (guint i = 0; i < results->len; i++)
    {
      KvJobResult *r = g_ptr_array_index (results, i);
      guint64 id = kv_job_result_get_job_id (r);
      guint d = g_hash_table_contains (store_ids, &id) ? 0 : 1;

      if (!kv_job_result_get_success (r))
        {
          failed_seen[d] = TRUE;
          n_failed++;
        }
      else
        g_assert_false (failed_seen[d]);   /* no success after a cancellation */
    }
  g_assert_cmpuint (n_failed, ==, n_cancelled);
  last_error = kv_cuda_device_dup_last_error (rig->device);
  g_assert_nonnull (strstr (last_error, "cancelled"));

  still_works (rig);
  rig_free (rig);
}

/* Unreferencing the device with jobs in flight neither hangs nor crashes,
 * and gives the primary buffer back: a new device registers it again. */
static void
test_dispose_in_flight (void)
{
  Rig *rig = rig_new (LAYOUT_DENSE, MID_BLOCK, 256 * 1024);
  g_autoptr(GError) error = NULL;
  guint32 blocks[2 * BPC];
  guint32 chunks[2] = { 0, 1 };

  for (guint j = 0; j < 2 * BPC; j++)
    blocks[j] = 2 * j;
  for (guint k = 0; k < 100; k++)
    {
      g_assert_cmpuint (kv_device_submit_store (KV_DEVICE (rig->device), blocks, 2 * BPC, chunks, 2, &error), >, 0);
      g_assert_cmpuint (kv_device_submit_load (KV_DEVICE (rig->device), chunks, 2, blocks, 2 * BPC, &error), >, 0);
      g_assert_no_error (error);
    }
  g_clear_object (&rig->device);

  rig->device = device_new (rig, 256 * 1024, &error);
  g_assert_no_error (error);
  still_works (rig);
  rig_free (rig);
}

/* Ids out of range are refused before anything reaches the GPU. */
static void
test_bad_ids (void)
{
  Rig *rig = rig_new (LAYOUT_KV_PLANES, 64 * 1024, 256 * 1024);
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GError) error = NULL;
  guint32 blocks[BPC] = { 0, 1, rig->n_blocks, 2 };
  guint32 chunk = 0, bad_chunk = N_SLOTS;

  g_assert_cmpuint (kv_device_submit_store (device, blocks, BPC, &chunk, 1, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "out of range"));
  g_clear_error (&error);
  g_assert_cmpuint (kv_device_submit_load (device, &chunk, 1, blocks, BPC, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  blocks[2] = 3;
  g_assert_cmpuint (kv_device_submit_load (device, &bad_chunk, 1, blocks, BPC, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_cmpuint (kv_device_get_n_active_jobs (device), ==, 0);

  still_works (rig);
  rig_free (rig);
}

/* The bench's "compute" and GPU-side verification, through the action
 * signals bindings use: filled blocks store the pattern, loaded blocks
 * check clean, other bytes do not. */
static void
test_fill_check (void)
{
  Rig *rig = rig_new (LAYOUT_KV_PLANES, 64 * 1024, 256 * 1024);
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  guint32 blocks[BPC] = { 8, 9, 10, 11 };
  guint32 load_blocks[BPC] = { 20, 21, 22, 23 };
  guint32 chunk = 0;
  gboolean ok = FALSE;
  guint64 bad = 0;
  const guint64 *words;
  gsize block_words = rig->block_bytes / 8;

  g_signal_emit_by_name (rig->device, "fill-blocks", (guint64) 99, 8u, (guint) BPC, &ok);
  g_assert_true (ok);
  g_assert_cmpuint (kv_device_submit_store (device, blocks, BPC, &chunk, 1, &error), >, 0);
  g_assert_no_error (error);
  g_clear_pointer (&results, g_ptr_array_unref);
  results = collect (device, 1, NULL);
  g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, 0)));
  words = kv_host_buffer_peek_slot (rig->buffer, chunk);
  for (guint l = 0; l < N_LAYERS; l++)
    for (gsize w = 0; w < BPC * block_words; w++)
      g_assert_cmpuint (words[l * BPC * block_words + w], ==, kv_cuda_pattern_word (99, l + 1));

  g_signal_emit_by_name (rig->device, "check-blocks", (guint64) 99, 8u, (guint) BPC, &bad);
  g_assert_cmpuint (bad, ==, 0);
  g_signal_emit_by_name (rig->device, "check-blocks", (guint64) 100, 8u, (guint) BPC, &bad);
  g_assert_cmpuint (bad, ==, (guint64) N_LAYERS * BPC * block_words);

  g_assert_cmpuint (kv_device_submit_load (device, &chunk, 1, load_blocks, BPC, &error), >, 0);
  g_assert_no_error (error);
  g_clear_pointer (&results, g_ptr_array_unref);
  results = collect (device, 1, NULL);
  g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, 0)));
  g_assert_cmpuint (kv_cuda_device_check_blocks (rig->device, 99, 20, BPC), ==, 0);
  /* One block off: the pattern of block 19 (from the rig's fill) differs. */
  g_assert_cmpuint (kv_cuda_device_check_blocks (rig->device, 99, 19, BPC), >, 0);
  g_assert_cmpuint (kv_cuda_device_check_blocks (rig->device, 99, rig->n_blocks - 1, 2), ==, G_MAXUINT64);
  g_assert_false (kv_cuda_device_fill_blocks (rig->device, 99, rig->n_blocks, 1));
  rig_free (rig);
}

/* The layout is checked against the GPU's allocations at initialization. */
static void
test_layout_outside_allocation (void)
{
  Rig *rig = rig_new (LAYOUT_DENSE, 64 * 1024, 256 * 1024);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvCudaDevice) device = NULL;
  g_autofree char *past = g_strdup_printf ("%" G_GUINT64_FORMAT,
                                           (guint64) (guintptr) rig->memory + rig->memory_size -
                                           rig->block_bytes);
  const char *addresses[] = { past, NULL };
  int host_memory = 0;
  g_autofree char *host_text = g_strdup_printf ("%" G_GUINT64_FORMAT, (guint64) (guintptr) &host_memory);
  const char *host_addresses[] = { host_text, NULL };

  /* One layer whose last blocks run past the end of the allocation. */
  device = g_initable_new (KV_TYPE_CUDA_DEVICE, NULL, &error,
                           "primary", rig->buffer, "n-blocks", 4u,
                           "block-bytes", (guint64) rig->block_bytes, "n-layers", 1u,
                           "blocks-per-chunk", 1u, "layer-addresses", addresses, NULL);
  g_assert_null (device);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_test_message ("%s", error->message);
  g_assert_true (strstr (error->message, "not inside one allocation") != NULL ||
                 strstr (error->message, "is not memory of CUDA device 0") != NULL);
  g_clear_error (&error);

  /* Host memory is not device memory. */
  device = g_initable_new (KV_TYPE_CUDA_DEVICE, NULL, &error,
                           "primary", rig->buffer, "n-blocks", 1u,
                           "block-bytes", (guint64) 4096, "n-layers", 1u,
                           "blocks-per-chunk", 1u, "layer-addresses", host_addresses, NULL);
  g_assert_null (device);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "is not memory of CUDA device 0"));
  rig_free (rig);
}

/* Memory freed under the device: the copy fails, the job is reported
 * failed with the CUDA error, the process lives. In a subprocess: an error
 * CUDA calls sticky would spoil the other tests' context. */
static void
test_freed_memory (void)
{
  if (g_test_subprocess ())
    {
      Rig *rig = rig_new (LAYOUT_DENSE, MID_BLOCK, 0);
      g_autoptr(GError) error = NULL;
      g_autoptr(GPtrArray) results = NULL;
      g_autofree char *last_error = NULL;
      guint32 blocks[BPC] = { 0, 1, 2, 3 };
      guint32 chunk = 0;

      cuda_ok (cudaFree (rig->memory), "cudaFree");
      rig->memory = NULL;
      g_assert_cmpuint (kv_device_submit_store (KV_DEVICE (rig->device), blocks, BPC, &chunk, 1, &error), >, 0);
      results = collect (KV_DEVICE (rig->device), 1, NULL);
      g_assert_false (kv_job_result_get_success (g_ptr_array_index (results, 0)));
      last_error = kv_cuda_device_dup_last_error (rig->device);
      g_printerr ("last-error: %s\n", last_error);
      g_assert_nonnull (strstr (last_error, "store job"));
      g_assert_nonnull (strstr (last_error, "cuda"));
      g_assert_true (kv_device_shutdown (KV_DEVICE (rig->device), &error));
      g_clear_object (&rig->device);
      g_clear_object (&rig->buffer);
      g_free (rig);
      return;
    }
  g_test_trap_subprocess (NULL, 120 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*last-error: store job * failed: KvCudaDevice: *");
}

#ifdef KV_CUDA_FAKE
/* A copy call that fails fails its job, named, and the next job works; so
 * does an error the GPU reports at the event. */
static void
test_injected_errors (void)
{
  Rig *rig = rig_new (LAYOUT_DENSE, 64 * 1024, 0);
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  g_autofree char *last_error = NULL;
  guint32 blocks[BPC] = { 4, 5, 6, 7 };
  guint32 chunk = 1;

  fake_cuda_fail_copies (1, cudaErrorInvalidValue);
  g_assert_cmpuint (kv_device_submit_store (device, blocks, BPC, &chunk, 1, &error), >, 0);
  g_assert_no_error (error);
  results = collect (device, 1, NULL);
  g_assert_false (kv_job_result_get_success (g_ptr_array_index (results, 0)));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (g_ptr_array_index (results, 0)), ==, 0);
  last_error = kv_cuda_device_dup_last_error (rig->device);
  g_assert_nonnull (strstr (last_error, "failed: KvCudaDevice: cudaMemcpyAsync failed: cudaErrorInvalidValue (invalid argument)"));
  still_works (rig);

  g_clear_pointer (&results, g_ptr_array_unref);
  g_clear_pointer (&last_error, g_free);
  fake_cuda_fail_next_sync (cudaErrorIllegalAddress);
  g_assert_cmpuint (kv_device_submit_load (device, &chunk, 1, blocks, BPC, &error), >, 0);
  results = collect (device, 1, NULL);
  g_assert_false (kv_job_result_get_success (g_ptr_array_index (results, 0)));
  last_error = kv_cuda_device_dup_last_error (rig->device);
  g_assert_nonnull (strstr (last_error, "load job"));
  g_assert_nonnull (strstr (last_error, "cudaErrorIllegalAddress"));
  still_works (rig);
  rig_free (rig);
}

/* Where the primary buffer cannot be registered, copies go through bounce
 * memory (here 1 MiB: many batches, runs split across them): the same
 * round trips, both directions at once, byte for byte. */
static void
test_bounce (void)
{
  Rig *rig;
  gboolean bounced = FALSE;

  fake_cuda_fail_host_register (cudaErrorNotSupported);
  rig = rig_new (LAYOUT_DENSE, 64 * 1024, 256 * 1024);
  g_object_get (rig->device, "bounce-buffered", &bounced, NULL);
  g_assert_true (bounced);
  still_works (rig);
  rig_free (rig);

  roundtrip (LAYOUT_DENSE, 4096, 256 * 1024);
  roundtrip (LAYOUT_KV_PLANES, 64 * 1024, 256 * 1024);
  roundtrip (LAYOUT_CROSS_LAYER, BIG_BLOCK, 0);
  test_bidirectional ();
  test_cancel ();
  fake_cuda_fail_host_register (cudaSuccess);
}

/* Scattered small blocks go through one kernel launch per job, large or
 * contiguous ones through the copy engines. */
static void
test_copy_paths (void)
{
  Rig *rig = rig_new (LAYOUT_DENSE, 64 * 1024, 256 * 1024);
  KvDevice *device = KV_DEVICE (rig->device);
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  guint32 scattered[2 * BPC] = { 40, 3, 17, 9, 22, 1, 30, 12 };
  guint32 chunks[2] = { 2, 3 };
  guint64 launches = fake_cuda_get_n_kernel_launches ();
  guint64 copies = fake_cuda_get_n_copy_calls ();

  g_assert_cmpuint (kv_device_submit_store (device, scattered, 2 * BPC, chunks, 2, &error), >, 0);
  results = collect (device, 1, NULL);
  g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, 0)));
  g_assert_cmpuint (fake_cuda_get_n_kernel_launches (), ==, launches + 1);
  g_assert_cmpuint (fake_cuda_get_n_copy_calls (), ==, copies);
  check_stored_slot (rig, 2, (guint *) scattered, 0);
  check_stored_slot (rig, 3, (guint *) scattered + BPC, 0);
  rig_free (rig);

  /* Copy engines only: one call per contiguous run, here a layer's four
   * consecutive blocks of one chunk: 2 chunks × 4 layers. */
  rig = rig_new (LAYOUT_DENSE, 64 * 1024, 0);
  device = KV_DEVICE (rig->device);
  {
    guint32 consecutive[2 * BPC] = { 8, 9, 10, 11, 20, 21, 22, 23 };

    launches = fake_cuda_get_n_kernel_launches ();
    copies = fake_cuda_get_n_copy_calls ();
    g_clear_pointer (&results, g_ptr_array_unref);
    g_assert_cmpuint (kv_device_submit_store (device, consecutive, 2 * BPC, chunks, 2, &error), >, 0);
    results = collect (device, 1, NULL);
    g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, 0)));
    g_assert_cmpuint (fake_cuda_get_n_kernel_launches (), ==, launches);
    g_assert_cmpuint (fake_cuda_get_n_copy_calls (), ==, copies + 2 * N_LAYERS);
    check_stored_slot (rig, 2, (guint *) consecutive, 0);
    check_stored_slot (rig, 3, (guint *) consecutive + BPC, 0);
  }
  rig_free (rig);
}
#endif

int
main (int argc, char **argv)
{
  int count = 0;
  cudaError_t err;

  g_test_init (&argc, &argv, NULL);

  err = cudaGetDeviceCount (&count);
  if (!g_test_subprocess () && (err != cudaSuccess || count == 0))
    {
      g_print ("SKIP: no CUDA device: %s\n",
               err != cudaSuccess ? cudaGetErrorString (err) : "the driver sees none");
#ifdef __SANITIZE_ADDRESS__
      /* The driver maps memory where ASan keeps its shadow gap. */
      if (err != cudaSuccess && err != cudaErrorNoDevice && err != cudaErrorInsufficientDriver)
        g_print ("SKIP: under AddressSanitizer CUDA needs ASAN_OPTIONS=protect_shadow_gap=0\n");
#endif
      return 77;
    }

  g_test_add_data_func ("/kvtier/cuda/gpu/roundtrip/dense", GINT_TO_POINTER (LAYOUT_DENSE), test_roundtrip);
  g_test_add_data_func ("/kvtier/cuda/gpu/roundtrip/kv-planes", GINT_TO_POINTER (LAYOUT_KV_PLANES), test_roundtrip);
  g_test_add_data_func ("/kvtier/cuda/gpu/roundtrip/cross-layer", GINT_TO_POINTER (LAYOUT_CROSS_LAYER), test_roundtrip);
  g_test_add_func ("/kvtier/cuda/gpu/bidirectional", test_bidirectional);
  g_test_add_func ("/kvtier/cuda/gpu/drain", test_drain);
  g_test_add_func ("/kvtier/cuda/gpu/cancel", test_cancel);
  g_test_add_func ("/kvtier/cuda/gpu/dispose-in-flight", test_dispose_in_flight);
  g_test_add_func ("/kvtier/cuda/gpu/bad-ids", test_bad_ids);
  g_test_add_func ("/kvtier/cuda/gpu/fill-check", test_fill_check);
  g_test_add_func ("/kvtier/cuda/gpu/layout-outside-allocation", test_layout_outside_allocation);
  g_test_add_func ("/kvtier/cuda/gpu/freed-memory", test_freed_memory);
#ifdef KV_CUDA_FAKE
  g_test_add_func ("/kvtier/cuda/gpu/injected-errors", test_injected_errors);
  g_test_add_func ("/kvtier/cuda/gpu/copy-paths", test_copy_paths);
  g_test_add_func ("/kvtier/cuda/gpu/bounce", test_bounce);
#endif

  return g_test_run ();
}
