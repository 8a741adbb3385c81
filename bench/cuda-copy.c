/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <kvtier.h>

#include "kv-cuda-device.h"
#include "kv-cuda-kernels.h"

/*
 * cuda-copy: how close the CUDA device gets to PCIe.
 *
 * First the ceiling, in the same run and process: one large pinned
 * cudaMemcpyAsync at a time, host → device, device → host, and both at
 * once on two streams (the bidirectional ceiling is the sum of the two
 * directions' bytes over the time).
 *
 * Then, for each block size, a KvCudaDevice on vLLM's per-layer layout
 * (one tensor per layer, blocks scattered at random as a block table
 * leaves them) with the primary buffer registered: stores alone, loads
 * alone, then both at once, each keeping several jobs in flight:
 *
 *   store 2MiB cuda: <x> GB/s = <y>% of ceiling <z> GB/s
 *
 * Each block size is measured a second time with the other copy path
 * (copy engines or the gather/scatter kernel), printed as `#` lines.
 *
 * Targets (doc/cuda.md): ≥ 90% of the ceiling each way at ≥ 512 KiB
 * blocks, ≥ 70% at 64 KiB, bidirectional ≥ 85% of the bidirectional
 * ceiling. Without a GPU it says so and exits 0.
 *
 *   cuda-copy [--total SIZE] [--block-sizes 64KiB,512KiB,2MiB]
 *             [--layers N] [--gather-run-bytes SIZE] [--ceiling-bytes SIZE]
 */

#define N_SLOTS 32
#define BPC 4
#define CHUNKS_PER_JOB 8
#define IN_FLIGHT 16

static guint64 opt_total = 8ULL << 30;
static char *opt_sizes;
static guint opt_layers = 8;
static guint64 opt_gather = 256 * 1024;
static guint64 opt_ceiling = 512 << 20;

static void
cuda_or_die (cudaError_t err,
             const char *what)
{
  if (err != cudaSuccess)
    {
      g_printerr ("cuda-copy: %s: %s (%s)\n", what, cudaGetErrorName (err), cudaGetErrorString (err));
      exit (1);
    }
}

static gboolean
parse_size (const char *text,
            guint64    *out)
{
  char *end = NULL;
  guint64 v = g_ascii_strtoull (text, &end, 10);

  if (end == text)
    return FALSE;
  if (g_ascii_strcasecmp (end, "KiB") == 0)
    v <<= 10;
  else if (g_ascii_strcasecmp (end, "MiB") == 0)
    v <<= 20;
  else if (g_ascii_strcasecmp (end, "GiB") == 0)
    v <<= 30;
  else if (*end != '\0')
    return FALSE;
  *out = v;
  return v > 0;
}

static char *
size_name (guint64 bytes)
{
  if (bytes % (1 << 20) == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT "MiB", bytes >> 20);
  return g_strdup_printf ("%" G_GUINT64_FORMAT "KiB", bytes >> 10);
}

typedef struct
{
  gdouble h2d;
  gdouble d2h;
  gdouble bidir;
} Ceiling;

/* GB/s of @reps copies of @bytes each way that @mask asks for (1: host →
 * device, 2: device → host, 3: both at once). */
static gdouble
time_copies (void         *host_a,
             void         *host_b,
             void         *dev_a,
             void         *dev_b,
             gsize         bytes,
             guint         reps,
             guint         mask,
             cudaStream_t  streams[2])
{
  cudaEvent_t start, stop[2];
  float ms = 0, ms_b = 0;
  guint64 moved = 0;

  cuda_or_die (cudaEventCreate (&start), "cudaEventCreate");
  cuda_or_die (cudaEventCreate (&stop[0]), "cudaEventCreate");
  cuda_or_die (cudaEventCreate (&stop[1]), "cudaEventCreate");
  cuda_or_die (cudaDeviceSynchronize (), "cudaDeviceSynchronize");
  cuda_or_die (cudaEventRecord (start, streams[0]), "cudaEventRecord");
  cuda_or_die (cudaStreamWaitEvent (streams[1], start, 0), "cudaStreamWaitEvent");
  for (guint r = 0; r < reps; r++)
    {
      if (mask & 1)
        cuda_or_die (cudaMemcpyAsync (dev_a, host_a, bytes, cudaMemcpyHostToDevice, streams[0]),
                     "cudaMemcpyAsync");
      if (mask & 2)
        cuda_or_die (cudaMemcpyAsync (host_b, dev_b, bytes, cudaMemcpyDeviceToHost, streams[1]),
                     "cudaMemcpyAsync");
    }
  cuda_or_die (cudaEventRecord (stop[0], streams[0]), "cudaEventRecord");
  cuda_or_die (cudaEventRecord (stop[1], streams[1]), "cudaEventRecord");
  cuda_or_die (cudaEventSynchronize (stop[0]), "cudaEventSynchronize");
  cuda_or_die (cudaEventSynchronize (stop[1]), "cudaEventSynchronize");
  cuda_or_die (cudaEventElapsedTime (&ms, start, stop[0]), "cudaEventElapsedTime");
  cuda_or_die (cudaEventElapsedTime (&ms_b, start, stop[1]), "cudaEventElapsedTime");
  ms = MAX (ms, ms_b);
  moved = (guint64) bytes * reps * ((mask & 1 ? 1 : 0) + (mask & 2 ? 1 : 0));
  cudaEventDestroy (start);
  cudaEventDestroy (stop[0]);
  cudaEventDestroy (stop[1]);
  return moved / (ms / 1e3) / 1e9;
}

static Ceiling
measure_ceiling (void)
{
  const gsize bytes = opt_ceiling;
  void *host_a, *host_b, *dev_a, *dev_b;
  cudaStream_t streams[2];
  Ceiling c;

  cuda_or_die (cudaHostAlloc (&host_a, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  cuda_or_die (cudaHostAlloc (&host_b, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  cuda_or_die (cudaMalloc (&dev_a, bytes), "cudaMalloc");
  cuda_or_die (cudaMalloc (&dev_b, bytes), "cudaMalloc");
  memset (host_a, 1, bytes);
  memset (host_b, 2, bytes);
  cuda_or_die (cudaStreamCreateWithFlags (&streams[0], cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_or_die (cudaStreamCreateWithFlags (&streams[1], cudaStreamNonBlocking), "cudaStreamCreate");

  /* Warm both paths, then the best of three of each. */
  (void) time_copies (host_a, host_b, dev_a, dev_b, bytes, 1, 3, streams);
  c.h2d = c.d2h = c.bidir = 0;
  for (guint i = 0; i < 3; i++)
    {
      c.h2d = MAX (c.h2d, time_copies (host_a, host_b, dev_a, dev_b, bytes, 8, 1, streams));
      c.d2h = MAX (c.d2h, time_copies (host_a, host_b, dev_a, dev_b, bytes, 8, 2, streams));
      c.bidir = MAX (c.bidir, time_copies (host_a, host_b, dev_a, dev_b, bytes, 8, 3, streams));
    }

  cudaStreamDestroy (streams[0]);
  cudaStreamDestroy (streams[1]);
  cudaFree (dev_a);
  cudaFree (dev_b);
  cudaFreeHost (host_a);
  cudaFreeHost (host_b);
  return c;
}

typedef struct
{
  KvDevice   *device;
  GRand      *rand;
  guint       n_blocks;
  gsize       job_bytes;
  GHashTable *direction_of;   /* job id → direction + 1 */
  guint       failed;
} Run;

static void
submit_one (Run   *run,
            guint  direction,
            guint  k)
{
  guint32 chunks[CHUNKS_PER_JOB];
  guint32 blocks[CHUNKS_PER_JOB * BPC];
  g_autoptr(GError) error = NULL;
  guint64 id;

  /* Stores use the lower half of the slots and blocks, loads the upper;
   * blocks at random, as a block table leaves them. */
  for (guint c = 0; c < CHUNKS_PER_JOB; c++)
    chunks[c] = direction * (N_SLOTS / 2) + (k * CHUNKS_PER_JOB + c) % (N_SLOTS / 2);
  for (guint i = 0; i < CHUNKS_PER_JOB * BPC; i++)
    blocks[i] = direction * (run->n_blocks / 2) + g_rand_int_range (run->rand, 0, run->n_blocks / 2);
  if (direction == 0)
    id = kv_device_submit_store (run->device, blocks, CHUNKS_PER_JOB * BPC, chunks, CHUNKS_PER_JOB, &error);
  else
    id = kv_device_submit_load (run->device, chunks, CHUNKS_PER_JOB, blocks, CHUNKS_PER_JOB * BPC, &error);
  if (id == 0)
    {
      g_printerr ("cuda-copy: submit: %s\n", error->message);
      exit (1);
    }
  g_hash_table_insert (run->direction_of, GSIZE_TO_POINTER (id), GUINT_TO_POINTER (direction + 1));
}

/* Moves about @total bytes in each direction @mask names (1: stores,
 * 2: loads, 3: both at once), IN_FLIGHT jobs per direction at a time.
 * Returns GB/s over the directions together. */
static gdouble
time_device (Run     *run,
             guint64  total,
             guint    mask)
{
  guint n_jobs = (guint) MAX (4, total / run->job_bytes);
  guint submitted[2] = { 0, 0 }, done[2] = { 0, 0 };
  guint want[2] = { mask & 1 ? n_jobs : 0, mask & 2 ? n_jobs : 0 };
  gint64 start = g_get_monotonic_time ();
  gdouble seconds;

  while (done[0] + done[1] < want[0] + want[1])
    {
      struct pollfd pfd = { kv_device_get_wakeup_fd (run->device), POLLIN, 0 };
      KvJobResult **results;

      for (guint d = 0; d < 2; d++)
        while (submitted[d] < want[d] && submitted[d] - done[d] < IN_FLIGHT)
          submit_one (run, d, submitted[d]++);
      (void) poll (&pfd, 1, 1000);
      results = kv_device_get_finished (run->device);
      for (KvJobResult **r = results; *r != NULL; r++)
        {
          gpointer key = GSIZE_TO_POINTER (kv_job_result_get_job_id (*r));
          guint d = GPOINTER_TO_UINT (g_hash_table_lookup (run->direction_of, key));

          g_assert (d == 1 || d == 2);
          g_hash_table_remove (run->direction_of, key);
          if (!kv_job_result_get_success (*r))
            run->failed++;
          done[d - 1]++;
          kv_job_result_unref (*r);
        }
      g_free (results);
    }
  seconds = (g_get_monotonic_time () - start) / 1e6;
  return (gdouble) run->job_bytes * (want[0] + want[1]) / seconds / 1e9;
}

static void
report (const char *prefix,
        const char *what,
        const char *size,
        const char *path,
        gdouble     gbps,
        gdouble     ceiling)
{
  printf ("%s%s %s %s: %.1f GB/s = %.0f%% of ceiling %.1f GB/s\n",
          prefix, what, size, path, gbps, 100 * gbps / ceiling, ceiling);
  fflush (stdout);
}

/* Stores, loads and both at once at @block_bytes, with the device's
 * gather-run-bytes at @gather; the lines start with @prefix. */
static gboolean
measure (KvHostBuffer  *buffer,
         guint64        block_bytes,
         guint64        gather,
         const char    *prefix,
         const char    *path,
         const Ceiling *ceiling,
         GError       **error)
{
  gsize chunk_bytes = (gsize) BPC * opt_layers * block_bytes;
  guint n_blocks = 256;
  g_autoptr(KvCudaDevice) device = NULL;
  g_autofree char *name = size_name (block_bytes);
  Run run = { 0 };
  gdouble store, load, both;
  gboolean ok;

  /* Device memory of its own (dense, one tensor per layer) filled by a
   * kernel, so stores move real bytes. */
  device = g_initable_new (KV_TYPE_CUDA_DEVICE, NULL, error,
                           "primary", buffer, "n-blocks", n_blocks,
                           "block-bytes", block_bytes, "n-layers", opt_layers,
                           "blocks-per-chunk", (guint) BPC, "gather-run-bytes", gather, NULL);
  if (device == NULL)
    return FALSE;
  cuda_or_die (kv_cuda_launch_fill_pattern ((unsigned long long *) (guintptr)
                                              kv_cuda_device_get_layer_address (device, 0),
                                            (guint64) opt_layers * n_blocks * block_bytes / 8, 7, NULL),
               "fill kernel");
  cuda_or_die (cudaDeviceSynchronize (), "cudaDeviceSynchronize");

  run.device = KV_DEVICE (device);
  run.rand = g_rand_new_with_seed (42);
  run.n_blocks = n_blocks;
  run.job_bytes = chunk_bytes * CHUNKS_PER_JOB;
  run.direction_of = g_hash_table_new (g_direct_hash, g_direct_equal);

  (void) time_device (&run, 2 * run.job_bytes * IN_FLIGHT, 3);   /* warm up */
  store = time_device (&run, opt_total, 1);
  load = time_device (&run, opt_total, 2);
  both = time_device (&run, opt_total, 3);
  report (prefix, "store", name, path, store, ceiling->d2h);
  report (prefix, "load", name, path, load, ceiling->h2d);
  report (prefix, "bidir", name, path, both, ceiling->bidir);

  g_hash_table_unref (run.direction_of);
  g_rand_free (run.rand);
  ok = kv_device_shutdown (KV_DEVICE (device), error);
  if (ok && run.failed > 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "%u jobs failed", run.failed);
      ok = FALSE;
    }
  return ok;
}

/* The device as configured, then (as # lines) the other copy path, so the
 * gather-run-bytes threshold can be set from measurements: blocks are
 * scattered, so a job's runs are single blocks and the kernel moves them
 * when a block is at most gather-run-bytes. */
static gboolean
bench_block_size (guint64        block_bytes,
                  const Ceiling *ceiling,
                  GError       **error)
{
  g_autoptr(KvHostBuffer) buffer = NULL;
  gboolean kernel = opt_gather > 0 && block_bytes <= opt_gather;

  buffer = kv_host_buffer_new (N_SLOTS, (gsize) BPC * opt_layers * block_bytes, error);
  if (buffer == NULL)
    return FALSE;
  return measure (buffer, block_bytes, opt_gather, "", "cuda", ceiling, error) &&
         measure (buffer, block_bytes, kernel ? 0 : G_MAXUINT64, "# ",
                  kernel ? "cuda, copy engines only" : "cuda, gather/scatter kernel only",
                  ceiling, error);
}

int
main (int argc, char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) sizes = NULL;
  g_autofree char *total_text = NULL;
  g_autofree char *gather_text = NULL;
  g_autofree char *ceiling_text = NULL;
  struct cudaDeviceProp prop;
  int count = 0;
  cudaError_t err;
  Ceiling ceiling;
  const GOptionEntry entries[] = {
    { "total", 0, 0, G_OPTION_ARG_STRING, &total_text, "Bytes per measurement and direction (8GiB)", "SIZE" },
    { "block-sizes", 0, 0, G_OPTION_ARG_STRING, &opt_sizes, "Block sizes (64KiB,512KiB,2MiB)", "LIST" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &opt_layers, "Layers (8)", "N" },
    { "gather-run-bytes", 0, 0, G_OPTION_ARG_STRING, &gather_text, "The device's gather-run-bytes (256KiB)", "SIZE" },
    { "ceiling-bytes", 0, 0, G_OPTION_ARG_STRING, &ceiling_text, "Bytes of the ceiling's one copy (512MiB)", "SIZE" },
    { NULL }
  };

  context = g_option_context_new ("- the CUDA device against PCIe");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("cuda-copy: %s\n", error->message);
      return 2;
    }
  if ((total_text != NULL && !parse_size (total_text, &opt_total)) ||
      (gather_text != NULL && !parse_size (gather_text, &opt_gather) && !g_str_equal (gather_text, "0")) ||
      (ceiling_text != NULL && !parse_size (ceiling_text, &opt_ceiling)) ||
      opt_layers == 0)
    {
      g_printerr ("cuda-copy: bad --total, --gather-run-bytes or --layers\n");
      return 2;
    }
  if (gather_text != NULL && g_str_equal (gather_text, "0"))
    opt_gather = 0;

  err = cudaGetDeviceCount (&count);
  if (err != cudaSuccess || count == 0)
    {
      printf ("cuda-copy: no CUDA device (%s): nothing to measure\n",
              err != cudaSuccess ? cudaGetErrorString (err) : "the driver sees none");
      return 0;
    }
  cuda_or_die (cudaGetDeviceProperties (&prop, 0), "cudaGetDeviceProperties");
  printf ("# %s, PCI %04x:%02x:%02x\n", prop.name, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);

  ceiling = measure_ceiling ();
  printf ("# ceiling: one %" G_GUINT64_FORMAT " MiB pinned cudaMemcpyAsync at a time: host → device"
          " %.1f GB/s, device → host %.1f GB/s, both at once %.1f GB/s\n",
          opt_ceiling >> 20, ceiling.h2d, ceiling.d2h, ceiling.bidir);

  sizes = g_strsplit (opt_sizes != NULL ? opt_sizes : "64KiB,512KiB,2MiB", ",", -1);
  for (guint i = 0; sizes[i] != NULL; i++)
    {
      guint64 block_bytes;

      if (!parse_size (g_strstrip (sizes[i]), &block_bytes) || block_bytes % 8 != 0)
        {
          g_printerr ("cuda-copy: bad block size “%s”\n", sizes[i]);
          return 2;
        }
      if (!bench_block_size (block_bytes, &ceiling, &error))
        {
          g_printerr ("cuda-copy: %s blocks: %s\n", sizes[i], error->message);
          return 1;
        }
    }
  return 0;
}
