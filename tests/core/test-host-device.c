/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <kvtier.h>
#include <xxhash.h>

#define SLOT_SIZE 16384
#define N_SLOTS 64
#define N_BLOCKS 96
#define BLOCK_BYTES 1024
#define N_LAYERS 4
#define BPC 2

/* The byte a (layer, block, offset) holds in a test pattern. */
static guint8
pattern (guint seed,
         guint layer,
         guint block,
         gsize offset)
{
  return (guint8) ((seed * 131u + layer * 31u + block * 7u + offset * 13u + (offset >> 8)) & 0xff);
}

static void
fill_block (KvHostDevice *device,
            guint         seed,
            guint         layer,
            guint         block)
{
  guint8 *mem = kv_host_device_peek_block (device, layer, block);

  for (gsize i = 0; i < BLOCK_BYTES; i++)
    mem[i] = pattern (seed, layer, block, i);
}

static gboolean
block_matches (const guint8 *mem,
               guint         seed,
               guint         layer,
               guint         block)
{
  for (gsize i = 0; i < BLOCK_BYTES; i++)
    if (mem[i] != pattern (seed, layer, block, i))
      return FALSE;
  return TRUE;
}

typedef struct
{
  KvHostBuffer *buffer;
  KvHostDevice *device;
} Fixture;

static void
fixture_set_up (Fixture       *f,
                gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  guint n_workers = GPOINTER_TO_UINT (data);

  f->buffer = kv_host_buffer_new (N_SLOTS, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->device = g_initable_new (KV_TYPE_HOST_DEVICE, NULL, &error,
                              "primary", f->buffer,
                              "n-blocks", N_BLOCKS,
                              "block-bytes", (guint64) BLOCK_BYTES,
                              "n-layers", N_LAYERS,
                              "blocks-per-chunk", BPC,
                              "n-workers", n_workers != 0 ? n_workers : 2,
                              NULL);
  g_assert_no_error (error);
  g_assert_nonnull (f->device);
}

static void
fixture_tear_down (Fixture       *f,
                   gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_device_shutdown (KV_DEVICE (f->device), &error));
  g_assert_no_error (error);
  g_clear_object (&f->device);
  g_clear_object (&f->buffer);
}

/* Waits for @job_id and takes every result so far. */
static GPtrArray *
wait_results (KvDevice *device,
              guint64   job_id)
{
  g_autoptr(GError) error = NULL;
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  KvJobResult **results;

  g_assert_true (kv_device_wait (device, &job_id, 1, &error));
  g_assert_no_error (error);
  results = kv_device_get_finished (device);
  for (guint i = 0; results[i] != NULL; i++)
    g_ptr_array_add (out, results[i]);
  g_free (results);
  return out;
}

static void
test_layout (Fixture       *f,
             gconstpointer  data)
{
  KvDevice *device = KV_DEVICE (f->device);
  guint64 chunk_bytes = 0;

  g_assert_true (kv_device_get_primary (device) == f->buffer);
  g_assert_cmpuint (kv_device_get_n_blocks (device), ==, N_BLOCKS);
  g_assert_cmpuint (kv_device_get_block_bytes (device), ==, BLOCK_BYTES);
  g_assert_cmpuint (kv_device_get_n_layers (device), ==, N_LAYERS);
  g_assert_cmpuint (kv_device_get_blocks_per_chunk (device), ==, BPC);
  g_assert_cmpuint (kv_device_get_chunk_bytes (device), ==, BPC * N_LAYERS * BLOCK_BYTES);
  g_object_get (device, "chunk-bytes", &chunk_bytes, NULL);
  g_assert_cmpuint (chunk_bytes, ==, BPC * N_LAYERS * BLOCK_BYTES);
  g_assert_cmpuint (kv_host_device_get_n_workers (f->device), ==, 2);
  g_assert_cmpint (kv_device_get_wakeup_fd (device), >=, 0);
  g_assert_cmpuint (kv_device_get_n_active_jobs (device), ==, 0);
}

static void
test_chunk_too_big (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, 4096, &error);
  g_autoptr(KvHostDevice) device = NULL;

  g_assert_no_error (error);
  /* 2 blocks × 2 layers × 2048 bytes = 8192 > 4096. */
  device = kv_host_device_new (buffer, 8, 2048, 2, 2, &error);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_null (device);
  g_assert_nonnull (strstr (error->message, "does not fit in a primary slot of 4096 bytes"));
}

/* Device → primary: each (block × layer) lands at its layer-major place in
 * the slot, byte for byte. */
static void
test_store_bytes (Fixture       *f,
                  gconstpointer  data)
{
  const guint32 blocks[] = { 5, 17, 90, 3, 44, 45 };
  const guint32 chunks[] = { 9, 0, 63 };
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  KvJobResult *result;
  guint64 id;

  for (guint l = 0; l < N_LAYERS; l++)
    for (guint b = 0; b < G_N_ELEMENTS (blocks); b++)
      fill_block (f->device, 1, l, blocks[b]);

  id = kv_device_submit_store (KV_DEVICE (f->device), blocks, G_N_ELEMENTS (blocks),
                               chunks, G_N_ELEMENTS (chunks), &error);
  g_assert_no_error (error);
  g_assert_cmpuint (id, >, 0);

  results = wait_results (KV_DEVICE (f->device), id);
  g_assert_cmpuint (results->len, ==, 1);
  result = g_ptr_array_index (results, 0);
  g_assert_cmpuint (kv_job_result_get_job_id (result), ==, id);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==,
                   G_N_ELEMENTS (blocks) * N_LAYERS * BLOCK_BYTES);
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), >=, 0.0);

  for (guint c = 0; c < G_N_ELEMENTS (chunks); c++)
    {
      const guint8 *slot = kv_host_buffer_peek_slot (f->buffer, chunks[c]);

      for (guint l = 0; l < N_LAYERS; l++)
        for (guint j = 0; j < BPC; j++)
          g_assert_true (block_matches (slot + (l * BPC + j) * BLOCK_BYTES, 1, l,
                                        blocks[c * BPC + j]));
    }
}

/* Primary → device, with a partial first chunk: its leading block is
 * skipped, the rest of the block table lines up. */
static void
test_load_bytes_partial_first (Fixture       *f,
                               gconstpointer  data)
{
  const guint32 chunks[] = { 7, 8 };
  const guint32 blocks[] = { 60, 61, 62 };   /* chunk 7's second half, chunk 8 */
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  guint64 id;

  /* Slot pattern: each slot piece holds the pattern of (slot, layer, j). */
  for (guint c = 0; c < G_N_ELEMENTS (chunks); c++)
    {
      guint8 *slot = kv_host_buffer_peek_slot (f->buffer, chunks[c]);

      for (guint l = 0; l < N_LAYERS; l++)
        for (guint j = 0; j < BPC; j++)
          for (gsize i = 0; i < BLOCK_BYTES; i++)
            slot[(l * BPC + j) * BLOCK_BYTES + i] = pattern (2, l, chunks[c] * BPC + j, i);
    }
  fill_block (f->device, 9, 0, 59);

  id = kv_device_submit_load (KV_DEVICE (f->device), chunks, G_N_ELEMENTS (chunks),
                              blocks, G_N_ELEMENTS (blocks), &error);
  g_assert_no_error (error);
  results = wait_results (KV_DEVICE (f->device), id);
  g_assert_cmpuint (results->len, ==, 1);
  g_assert_cmpint (kv_job_result_get_transfer_bytes (g_ptr_array_index (results, 0)), ==,
                   3 * N_LAYERS * BLOCK_BYTES);

  for (guint l = 0; l < N_LAYERS; l++)
    {
      g_assert_true (block_matches (kv_host_device_peek_block (f->device, l, 60), 2, l, 7 * BPC + 1));
      g_assert_true (block_matches (kv_host_device_peek_block (f->device, l, 61), 2, l, 8 * BPC + 0));
      g_assert_true (block_matches (kv_host_device_peek_block (f->device, l, 62), 2, l, 8 * BPC + 1));
    }
  /* A block outside the job is untouched. */
  g_assert_true (block_matches (kv_host_device_peek_block (f->device, 0, 59), 9, 0, 59));
}

/* The checksum a store job carries with each slot is the XXH3-64 of the
 * whole slot as it is after the copy: copied pieces, the rest of the slot
 * (here a slot is twice a chunk), whatever split the workers took. */
static void
assert_slot_checksums (KvHostBuffer  *buffer,
                       const guint32 *slots,
                       guint          n_slots)
{
  for (guint i = 0; i < n_slots; i++)
    {
      guint64 carried = 0;

      g_assert_true (kv_host_buffer_get_slot_checksum (buffer, slots[i], &carried));
      g_assert_cmpuint (carried, ==,
                        XXH3_64bits (kv_host_buffer_peek_slot (buffer, slots[i]), SLOT_SIZE));
    }
}

static void
test_store_checksum (Fixture       *f,
                     gconstpointer  data)
{
  /* 1, 2, 3 and 7 chunks per job: fewer chunks than workers, and splits
   * that do not fall on chunk boundaries */
  static const guint n_chunks[] = { 1, 2, 3, 7 };
  guint32 next_slot = 0, next_block = 0;

  for (guint s = 0; s < N_SLOTS; s++)
    memset (kv_host_buffer_peek_slot (f->buffer, s), 0xa5 ^ s, SLOT_SIZE);
  for (guint k = 0; k < G_N_ELEMENTS (n_chunks); k++)
    {
      guint32 chunks[8], blocks[16];
      g_autoptr(GError) error = NULL;
      g_autoptr(GPtrArray) results = NULL;
      guint64 id;

      for (guint c = 0; c < n_chunks[k]; c++)
        {
          chunks[c] = (next_slot++ * 5) % N_SLOTS;
          for (guint j = 0; j < BPC; j++)
            {
              blocks[c * BPC + j] = next_block++;
              for (guint l = 0; l < N_LAYERS; l++)
                fill_block (f->device, 30 + k, l, blocks[c * BPC + j]);
            }
        }
      id = kv_device_submit_store (KV_DEVICE (f->device), blocks, n_chunks[k] * BPC,
                                   chunks, n_chunks[k], &error);
      g_assert_no_error (error);
      results = wait_results (KV_DEVICE (f->device), id);
      g_assert_cmpuint (results->len, ==, 1);
      g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, 0)));
      for (guint c = 0; c < n_chunks[k]; c++)
        for (guint l = 0; l < N_LAYERS; l++)
          for (guint j = 0; j < BPC; j++)
            g_assert_true (block_matches ((guint8 *) kv_host_buffer_peek_slot (f->buffer, chunks[c]) +
                                          (l * BPC + j) * BLOCK_BYTES, 30 + k, l,
                                          blocks[c * BPC + j]));
      assert_slot_checksums (f->buffer, chunks, n_chunks[k]);
    }
  /* slots no job wrote carry nothing */
  g_assert_false (kv_host_buffer_get_slot_checksum (f->buffer, 1, NULL));
}

/* A partial first chunk: its leading block is not copied, and the checksum
 * still covers the whole slot, those bytes included. A load (primary →
 * device) changes no slot and sets no checksum. */
static void
test_store_checksum_partial_first (Fixture       *f,
                                   gconstpointer  data)
{
  const guint32 chunks[] = { 7, 8 };
  const guint32 blocks[] = { 60, 61, 62 };
  const guint32 load_chunks[] = { 9 };
  const guint32 load_blocks[] = { 10, 11 };
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  guint64 id;

  memset (kv_host_buffer_peek_slot (f->buffer, 7), 0x77, SLOT_SIZE);
  for (guint l = 0; l < N_LAYERS; l++)
    for (guint b = 0; b < G_N_ELEMENTS (blocks); b++)
      fill_block (f->device, 4, l, blocks[b]);
  id = kv_device_submit_store (KV_DEVICE (f->device), blocks, G_N_ELEMENTS (blocks),
                               chunks, G_N_ELEMENTS (chunks), &error);
  g_assert_no_error (error);
  g_clear_pointer (&results, g_ptr_array_unref);
  results = wait_results (KV_DEVICE (f->device), id);
  g_assert_cmpuint (results->len, ==, 1);
  /* chunk 7's first block of every layer kept its bytes */
  for (guint l = 0; l < N_LAYERS; l++)
    {
      const guint8 *slot = kv_host_buffer_peek_slot (f->buffer, 7);

      g_assert_cmpuint (slot[l * BPC * BLOCK_BYTES], ==, 0x77);
      g_assert_true (block_matches (slot + (l * BPC + 1) * BLOCK_BYTES, 4, l, 60));
    }
  assert_slot_checksums (f->buffer, chunks, G_N_ELEMENTS (chunks));

  id = kv_device_submit_load (KV_DEVICE (f->device), load_chunks, 1, load_blocks, 2, &error);
  g_assert_no_error (error);
  g_clear_pointer (&results, g_ptr_array_unref);
  results = wait_results (KV_DEVICE (f->device), id);
  g_assert_false (kv_host_buffer_get_slot_checksum (f->buffer, 9, NULL));
}

static void
test_invalid_arguments (Fixture       *f,
                        gconstpointer  data)
{
  KvDevice *device = KV_DEVICE (f->device);
  const guint32 blocks[] = { 1, 2, 3, 4 };
  const guint32 bad_block[] = { 1, N_BLOCKS };
  const guint32 chunks[] = { 1, 2 };
  const guint32 bad_chunk[] = { N_SLOTS };
  g_autoptr(GError) error = NULL;

  /* Too few blocks: only the first chunk may be partial. */
  g_assert_cmpuint (kv_device_submit_store (device, blocks, 2, chunks, 2, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* Too many. */
  g_assert_cmpuint (kv_device_submit_load (device, chunks, 1, blocks, 3, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_cmpuint (kv_device_submit_store (device, bad_block, 2, chunks, 1, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "block id 96 is out of range"));
  g_clear_error (&error);
  g_assert_cmpuint (kv_device_submit_load (device, bad_chunk, 1, blocks, 2, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "chunk id 64 is out of range"));
  g_clear_error (&error);
  /* Nothing is left in flight by a refused submit. */
  g_assert_cmpuint (kv_device_get_n_active_jobs (device), ==, 0);

  {
    g_autoptr(GBytes) big = g_bytes_new_take (g_malloc0 (BLOCK_BYTES + 1), BLOCK_BYTES + 1);
    g_autoptr(GBytes) none = kv_host_device_read_block (f->device, N_LAYERS, 0, &error);

    g_assert_null (none);
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
    g_clear_error (&error);
    g_assert_false (kv_host_device_write_block (f->device, 0, 0, big, &error));
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  }
}

static void
test_read_write_block (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) in = g_bytes_new_static ("kvtier", 6);
  g_autoptr(GBytes) out = NULL;

  fill_block (f->device, 3, 2, 11);
  g_assert_true (kv_host_device_write_block (f->device, 2, 11, in, &error));
  g_assert_no_error (error);
  out = kv_host_device_read_block (f->device, 2, 11, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (out), ==, BLOCK_BYTES);
  g_assert_cmpmem (g_bytes_get_data (out, NULL), 6, "kvtier", 6);
  /* The rest of the block keeps its bytes. */
  g_assert_cmpuint (((const guint8 *) g_bytes_get_data (out, NULL))[6], ==, pattern (3, 2, 11, 6));
}

static void
test_empty_job (Fixture       *f,
                gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) results = NULL;
  guint64 id;

  id = kv_device_submit_store (KV_DEVICE (f->device), NULL, 0, NULL, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (id, >, 0);
  results = wait_results (KV_DEVICE (f->device), id);
  g_assert_cmpuint (results->len, ==, 1);
  g_assert_true (kv_job_result_get_success (g_ptr_array_index (results, 0)));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (g_ptr_array_index (results, 0)), ==, 0);
}

static gboolean
fd_readable (int fd)
{
  struct pollfd pfd = { .fd = fd, .events = POLLIN };

  return poll (&pfd, 1, 0) == 1;
}

static void
test_wakeup_fd (Fixture       *f,
                gconstpointer  data)
{
  KvDevice *device = KV_DEVICE (f->device);
  const guint32 blocks[] = { 0, 1 };
  const guint32 chunks[] = { 0 };
  g_autoptr(GError) error = NULL;
  KvJobResult **results;
  int fd = kv_device_get_wakeup_fd (device);
  struct pollfd pfd = { .fd = fd, .events = POLLIN };
  guint64 id;

  g_assert_false (fd_readable (fd));
  id = kv_device_submit_store (device, blocks, 2, chunks, 1, &error);
  g_assert_no_error (error);
  /* Blocks until the worker reports: no timing assumption. */
  g_assert_cmpint (poll (&pfd, 1, -1), ==, 1);
  results = kv_device_get_finished (device);
  g_assert_nonnull (results[0]);
  g_assert_cmpuint (kv_job_result_get_job_id (results[0]), ==, id);
  g_assert_null (results[1]);
  kv_job_result_unref (results[0]);
  g_free (results);
  /* Taking the results resets the descriptor. */
  g_assert_false (fd_readable (fd));
}

#define N_JOBS 48

/* Many jobs in both directions at once, on four workers: every byte lands
 * where it belongs, each job is reported once, each direction in order. */
static void
test_concurrent (Fixture       *f,
                 gconstpointer  data)
{
  KvDevice *device = KV_DEVICE (f->device);
  guint64 ids[N_JOBS];
  gboolean is_store[N_JOBS];
  guint64 last_id[2] = { 0, 0 };
  guint n_reported = 0;
  g_autoptr(GHashTable) seen = g_hash_table_new (g_int64_hash, g_int64_equal);
  g_autoptr(GError) error = NULL;

  /* Stores use blocks 0..47 → slots 0..23; loads slots 32..55 → blocks
   * 48..95, so no two jobs touch the same memory. */
  for (guint l = 0; l < N_LAYERS; l++)
    for (guint b = 0; b < 48; b++)
      fill_block (f->device, 4, l, b);
  for (guint s = 32; s < 56; s++)
    {
      guint8 *slot = kv_host_buffer_peek_slot (f->buffer, s);

      for (guint l = 0; l < N_LAYERS; l++)
        for (guint j = 0; j < BPC; j++)
          for (gsize i = 0; i < BLOCK_BYTES; i++)
            slot[(l * BPC + j) * BLOCK_BYTES + i] = pattern (5, l, s * BPC + j, i);
    }

  for (guint n = 0; n < N_JOBS; n++)
    {
      guint k = n / 2;

      is_store[n] = n % 2 == 0;
      if (is_store[n])
        {
          guint32 blocks[2] = { 2 * k, 2 * k + 1 };
          guint32 chunk = k;

          ids[n] = kv_device_submit_store (device, blocks, 2, &chunk, 1, &error);
        }
      else
        {
          guint32 blocks[2] = { 48 + 2 * k, 48 + 2 * k + 1 };
          guint32 chunk = 32 + k;

          ids[n] = kv_device_submit_load (device, &chunk, 1, blocks, 2, &error);
        }
      g_assert_no_error (error);
      g_assert_cmpuint (ids[n], >, 0);
    }

  g_assert_true (kv_device_wait (device, ids, N_JOBS, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_device_get_n_active_jobs (device), ==, 0);

  {
    KvJobResult **results = kv_device_get_finished (device);

    for (guint i = 0; results[i] != NULL; i++)
      {
        guint64 id = kv_job_result_get_job_id (results[i]);
        guint n;

        for (n = 0; n < N_JOBS && ids[n] != id; n++)
          ;
        g_assert_cmpuint (n, <, N_JOBS);
        g_assert_false (g_hash_table_contains (seen, &ids[n]));
        g_hash_table_add (seen, &ids[n]);
        g_assert_true (kv_job_result_get_success (results[i]));
        g_assert_cmpint (kv_job_result_get_transfer_bytes (results[i]), ==,
                         BPC * N_LAYERS * BLOCK_BYTES);
        /* Strict FIFO per direction. */
        g_assert_cmpuint (id, >, last_id[is_store[n]]);
        last_id[is_store[n]] = id;
        n_reported++;
        kv_job_result_unref (results[i]);
      }
    g_free (results);
  }
  g_assert_cmpuint (n_reported, ==, N_JOBS);

  for (guint k = 0; k < N_JOBS / 2; k++)
    {
      const guint8 *slot = kv_host_buffer_peek_slot (f->buffer, k);

      for (guint l = 0; l < N_LAYERS; l++)
        for (guint j = 0; j < BPC; j++)
          {
            g_assert_true (block_matches (slot + (l * BPC + j) * BLOCK_BYTES, 4, l, 2 * k + j));
            g_assert_true (block_matches (kv_host_device_peek_block (f->device, l, 48 + 2 * k + j),
                                          5, l, (32 + k) * BPC + j));
          }
    }
}

static void
test_shutdown (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT_SIZE, &error);
  g_autoptr(KvHostDevice) host = NULL;
  KvDevice *device;
  const guint32 blocks[] = { 0, 1, 2, 3 };
  const guint32 chunks[] = { 0, 1 };
  KvJobResult **results;
  guint n = 0;

  g_assert_no_error (error);
  host = kv_host_device_new (buffer, N_BLOCKS, BLOCK_BYTES, N_LAYERS, BPC, &error);
  g_assert_no_error (error);
  device = KV_DEVICE (host);

  for (guint i = 0; i < 8; i++)
    {
      g_assert_cmpuint (kv_device_submit_store (device, blocks, 4, chunks, 2, &error), >, 0);
      g_assert_no_error (error);
    }
  /* Shutdown waits for every job; their results stay available. */
  g_assert_true (kv_device_shutdown (device, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_device_get_n_active_jobs (device), ==, 0);
  results = kv_device_get_finished (device);
  for (; results[n] != NULL; n++)
    kv_job_result_unref (results[n]);
  g_free (results);
  g_assert_cmpuint (n, ==, 8);

  g_assert_cmpuint (kv_device_submit_store (device, blocks, 4, chunks, 2, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  /* A second shutdown is a no-op. */
  g_clear_error (&error);
  g_assert_true (kv_device_shutdown (device, &error));
}

/* Dropping a device with jobs in flight waits for them: no copy runs into
 * freed memory. */
static void
test_dispose_in_flight (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (N_SLOTS, SLOT_SIZE, &error);
  KvHostDevice *host;
  const guint32 blocks[] = { 0, 1, 2, 3 };
  const guint32 chunks[] = { 0, 1 };

  g_assert_no_error (error);
  host = kv_host_device_new (buffer, N_BLOCKS, BLOCK_BYTES, N_LAYERS, BPC, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < 16; i++)
    g_assert_cmpuint (kv_device_submit_load (KV_DEVICE (host), chunks, 2, blocks, 4, &error), >, 0);
  g_object_unref (host);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add ("/kvtier/host-device/layout", Fixture, NULL,
              fixture_set_up, test_layout, fixture_tear_down);
  g_test_add_func ("/kvtier/host-device/chunk-too-big", test_chunk_too_big);
  g_test_add ("/kvtier/host-device/store-bytes", Fixture, NULL,
              fixture_set_up, test_store_bytes, fixture_tear_down);
  g_test_add ("/kvtier/host-device/load-bytes-partial-first", Fixture, NULL,
              fixture_set_up, test_load_bytes_partial_first, fixture_tear_down);
  g_test_add ("/kvtier/host-device/store-checksum", Fixture, NULL,
              fixture_set_up, test_store_checksum, fixture_tear_down);
  g_test_add ("/kvtier/host-device/store-checksum/3-workers", Fixture, GUINT_TO_POINTER (3),
              fixture_set_up, test_store_checksum, fixture_tear_down);
  g_test_add ("/kvtier/host-device/store-checksum/1-worker", Fixture, GUINT_TO_POINTER (1),
              fixture_set_up, test_store_checksum, fixture_tear_down);
  g_test_add ("/kvtier/host-device/store-checksum-partial-first", Fixture, NULL,
              fixture_set_up, test_store_checksum_partial_first, fixture_tear_down);
  g_test_add ("/kvtier/host-device/invalid-arguments", Fixture, NULL,
              fixture_set_up, test_invalid_arguments, fixture_tear_down);
  g_test_add ("/kvtier/host-device/read-write-block", Fixture, NULL,
              fixture_set_up, test_read_write_block, fixture_tear_down);
  g_test_add ("/kvtier/host-device/empty-job", Fixture, NULL,
              fixture_set_up, test_empty_job, fixture_tear_down);
  g_test_add ("/kvtier/host-device/wakeup-fd", Fixture, NULL,
              fixture_set_up, test_wakeup_fd, fixture_tear_down);
  g_test_add ("/kvtier/host-device/concurrent", Fixture, GUINT_TO_POINTER (4),
              fixture_set_up, test_concurrent, fixture_tear_down);
  g_test_add_func ("/kvtier/host-device/shutdown", test_shutdown);
  g_test_add_func ("/kvtier/host-device/dispose-in-flight", test_dispose_in_flight);

  return g_test_run ();
}
