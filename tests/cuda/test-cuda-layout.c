/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

#include "kv-cuda-layout.h"

/* The CUDA device's host side, without CUDA: layout checks and the copy
 * planner. "Device memory" here is host memory, so a plan's copies can be
 * replayed with memcpy and compared byte for byte with the pieces they
 * stand for. */

static KvCudaLayout
layout_new (guint          n_layers,
            const guint64 *addresses,
            guint          n_blocks,
            guint64        block_bytes,
            guint          n_planes,
            guint64        block_stride,
            guint64        plane_stride)
{
  KvCudaLayout layout = {
    .n_layers = n_layers,
    .layer_addresses = g_memdup2 (addresses, sizeof (guint64) * n_layers),
    .n_blocks = n_blocks,
    .block_bytes = block_bytes,
    .n_planes = n_planes,
    .plane_bytes = n_planes > 0 ? block_bytes / n_planes : 0,
    .block_stride = block_stride,
    .plane_stride = plane_stride,
  };

  return layout;
}

static void
assert_invalid (KvCudaLayout *layout,
                const char   *fragment)
{
  g_autoptr(GError) error = NULL;

  g_assert_false (kv_cuda_layout_check (layout, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_test_message ("%s", error->message);
  if (strstr (error->message, fragment) == NULL)
    g_error ("“%s” does not say “%s”", error->message, fragment);
  kv_cuda_layout_clear (layout);
}

static void
assert_valid (KvCudaLayout *layout)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_cuda_layout_check (layout, &error));
  g_assert_no_error (error);
  kv_cuda_layout_clear (layout);
}

/* The layouts of vLLM's attention backends and of kvtier's own device. */
static void
test_valid_layouts (void)
{
  const guint64 page = 16 * 2 * 8 * 128;   /* 16 tokens × 8 heads × 128 × bf16 */
  const guint n_blocks = 1000, n_layers = 4;
  guint64 addr[4];
  KvCudaLayout layout;

  /* One tensor per layer, (2, num_blocks, ...): K plane then V plane. */
  for (guint l = 0; l < n_layers; l++)
    addr[l] = 0x7f0000000000ull + l * 0x10000000ull;
  layout = layout_new (n_layers, addr, n_blocks, 2 * page, 2, page, n_blocks * page);
  assert_valid (&layout);

  /* One tensor per layer, (num_blocks, 2, ...): K and V of a block adjacent. */
  layout = layout_new (n_layers, addr, n_blocks, 2 * page, 1, 2 * page, 0);
  assert_valid (&layout);

  /* Cross-layer, blocks first: (num_blocks, num_layers, 2, ...). */
  for (guint l = 0; l < n_layers; l++)
    addr[l] = 0x7f0000000000ull + l * 2 * page;
  layout = layout_new (n_layers, addr, n_blocks, 2 * page, 1, n_layers * 2 * page, 0);
  assert_valid (&layout);
  /* ... and with K and V as planes of their own. */
  layout = layout_new (n_layers, addr, n_blocks, 2 * page, 2, n_layers * 2 * page, page);
  assert_valid (&layout);

  /* One block: the stride does not matter. */
  layout = layout_new (1, addr, 1, 4096, 1, 0, 0);
  assert_valid (&layout);
}

static void
test_invalid_layouts (void)
{
  const guint64 page = 4096;
  guint64 addr[4] = { 0x10000000, 0x20000000, 0x30000000, 0x40000000 };
  guint64 same[2] = { 0x10000000, 0x10000000 };
  guint64 inside[2] = { 0x10000000, 0x10000000 + 10 * page };
  guint64 cross[2] = { 0x10000000, 0x10000000 + page / 2 };
  guint64 zero[2] = { 0x10000000, 0 };
  guint64 top[1] = { G_MAXUINT64 - 8 * page };
  KvCudaLayout layout;

  layout = layout_new (2, addr, 0, page, 1, page, 0);
  assert_invalid (&layout, "none may be zero");
  layout = layout_new (2, addr, 16, 0, 1, page, 0);
  assert_invalid (&layout, "none may be zero");
  layout = layout_new (2, addr, 16, 1000, 3, page, page);
  assert_invalid (&layout, "does not split into n-planes 3");
  layout = layout_new (2, addr, 16, 17 * 64, 17, page, page);
  assert_invalid (&layout, "1 to 16 planes");
  layout = layout_new (2, addr, 16, page, 1, page - 1, 0);
  assert_invalid (&layout, "consecutive blocks overlap");
  layout = layout_new (2, zero, 16, page, 1, page, 0);
  assert_invalid (&layout, "layer 1's address is 0");
  layout = layout_new (1, top, 16, page, 1, page, 0);
  assert_invalid (&layout, "past the end of the 64-bit address space");
  layout = layout_new (2, addr, 16, 4 * page, 4, page, G_MAXUINT64 / 2 + 1);
  assert_invalid (&layout, "past the end of the 64-bit address space");

  /* Two layers on the same memory, one inside the other, and blocks of
   * layers interleaved closer than a block. */
  layout = layout_new (2, same, 16, page, 1, page, 0);
  assert_invalid (&layout, "overlap");
  layout = layout_new (2, inside, 16, page, 1, page, 0);
  assert_invalid (&layout, "block 10 of layer 0 plane 0");
  layout = layout_new (2, cross, 16, page, 1, 2 * page, 0);
  assert_invalid (&layout, "share bytes");
  /* K and V planes closer than a plane. */
  layout = layout_new (1, addr, 16, 2 * page, 2, 2 * page, page / 2);
  assert_invalid (&layout, "layer 0 plane 0");
  /* The V plane of the last blocks reaching the next layer. */
  layout = layout_new (2, inside, 16, 2 * page, 2, page, 5 * page);
  assert_invalid (&layout, "overlap");

  layout = layout_new (4, addr, 16, page, 16, page, 256);
  assert_valid (&layout);
}

static gboolean
brute_force_overlap (const KvCudaLayout *layout)
{
  guint n = layout->n_layers * layout->n_planes * layout->n_blocks;
  g_autofree guint64 *starts = g_new (guint64, n);
  guint k = 0;

  for (guint l = 0; l < layout->n_layers; l++)
    for (guint p = 0; p < layout->n_planes; p++)
      for (guint b = 0; b < layout->n_blocks; b++)
        starts[k++] = layout->layer_addresses[l] + p * layout->plane_stride +
                      b * layout->block_stride;
  for (guint i = 0; i < n; i++)
    for (guint j = i + 1; j < n; j++)
      {
        guint64 a = starts[i], b = starts[j];

        if ((a <= b ? b - a : a - b) < layout->plane_bytes)
          return TRUE;
      }
  return FALSE;
}

/* The sweep's verdict equals comparing every pair of blocks. */
static void
test_overlap_exact (void)
{
  GRand *rand = g_rand_new_with_seed (1234);
  guint n_overlap = 0, n_clear = 0;

  for (guint round = 0; round < 3000; round++)
    {
      guint n_layers = g_rand_int_range (rand, 1, 5);
      guint n_planes = g_rand_int_range (rand, 1, 3);
      guint n_blocks = g_rand_int_range (rand, 1, 7);
      guint64 plane = 16 * g_rand_int_range (rand, 1, 5);
      guint64 stride = plane * g_rand_int_range (rand, 1, 9) + 16 * g_rand_int_range (rand, 0, 3);
      guint64 plane_stride = 16 * g_rand_int_range (rand, 1, 60);
      guint64 addr[4];
      KvCudaLayout layout;
      gboolean expect, got;
      g_autoptr(GError) error = NULL;

      for (guint l = 0; l < n_layers; l++)
        addr[l] = 0x100000 + 16 * g_rand_int_range (rand, 0, 200);
      layout = layout_new (n_layers, addr, n_blocks, plane * n_planes, n_planes, stride, plane_stride);
      expect = brute_force_overlap (&layout);
      got = !kv_cuda_layout_check (&layout, &error);
      if (got)
        g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
      if (expect != got)
        g_error ("round %u: %u layers %u planes %u blocks, plane %" G_GUINT64_FORMAT
                 " stride %" G_GUINT64_FORMAT " plane stride %" G_GUINT64_FORMAT
                 ": brute force says %d, the check %d", round, n_layers, n_planes,
                 n_blocks, plane, stride, plane_stride, expect, got);
      if (expect)
        n_overlap++;
      else
        n_clear++;
      kv_cuda_layout_clear (&layout);
    }
  /* Both verdicts were exercised. */
  g_assert_cmpuint (n_overlap, >, 100);
  g_assert_cmpuint (n_clear, >, 100);
  g_rand_free (rand);
}

static void
test_too_many_lanes (void)
{
  g_autofree guint64 *addr = g_new (guint64, 300);
  KvCudaLayout layout;

  for (guint l = 0; l < 300; l++)
    addr[l] = 0x10000000 + (guint64) l * 0x100000;
  layout = layout_new (300, addr, 4, 16 * 64, 16, 64, 4 * 64);
  assert_invalid (&layout, "exceed the 4096 (layer, plane) pairs");
}

static void
test_parse_addresses (void)
{
  const char *good[] = { "140234567680", "0x7f3a00000000", " 0X10 ", "18446744073709551615", NULL };
  const char *bad[][2] = {
    { "12abc", "layer 0's address “12abc”" },
    { "", "is not a decimal" },
    { "-1", "“-1”" },
    { "0x", "“0x”" },
    { "0x1ffffffffffffffff", "64-bit" },
    { "18446744073709551616", "64-bit" },
    { "0xg1", "“0xg1”" },
    { "1 2", "“1 2”" },
  };
  g_autofree guint64 *addresses = NULL;
  guint n = 0;
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_cuda_layout_parse_addresses (good, &addresses, &n, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (n, ==, 4);
  g_assert_cmpuint (addresses[0], ==, 140234567680ull);
  g_assert_cmpuint (addresses[1], ==, 0x7f3a00000000ull);
  g_assert_cmpuint (addresses[2], ==, 16);
  g_assert_cmpuint (addresses[3], ==, G_MAXUINT64);

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      const char *one[] = { bad[i][0], NULL };
      g_autofree guint64 *none = NULL;
      g_autoptr(GError) local_error = NULL;

      g_assert_false (kv_cuda_layout_parse_addresses (one, &none, &n, &local_error));
      g_assert_error (local_error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
      if (strstr (local_error->message, bad[i][1]) == NULL)
        g_error ("“%s” does not say “%s”", local_error->message, bad[i][1]);
    }
}

/* Replays @runs between @device (the memory the layout's addresses point
 * into, at @device_base) and @host. */
static void
replay (GArray    *runs,
        guint8    *host,
        gboolean   to_host)
{
  for (guint i = 0; i < runs->len; i++)
    {
      const KvCudaRun *run = &g_array_index (runs, KvCudaRun, i);

      g_assert_cmpuint (run->height, >=, 1);
      if (run->height > 1)
        {
          g_assert_cmpuint (run->device_pitch, >=, run->width);
          g_assert_cmpuint (run->host_pitch, >=, run->width);
        }
      for (guint64 r = 0; r < run->height; r++)
        {
          guint8 *dev = (guint8 *) (guintptr) (run->device + r * run->device_pitch);
          guint8 *h = host + run->host_offset + r * run->host_pitch;

          if (to_host)
            memcpy (h, dev, run->width);
          else
            memcpy (dev, h, run->width);
        }
    }
}

/* What the pieces mean, one plane at a time, without any planning. */
static void
naive (const KvCudaLayout *layout,
       const KvDeviceCopy *copies,
       guint               n_copies,
       guint8             *host,
       gboolean            to_host)
{
  for (guint i = 0; i < n_copies; i++)
    for (guint p = 0; p < layout->n_planes; p++)
      {
        guint8 *dev = (guint8 *) (guintptr) (kv_cuda_layout_lane_start (layout, copies[i].layer, p) +
                                             (guint64) copies[i].block * layout->block_stride);
        guint8 *h = host + copies[i].primary_offset + p * layout->plane_bytes;

        if (to_host)
          memcpy (h, dev, layout->plane_bytes);
        else
          memcpy (dev, h, layout->plane_bytes);
      }
}

typedef enum {
  LAYOUT_DENSE,         /* per layer, one plane */
  LAYOUT_KV_PLANES,     /* per layer, (2, num_blocks, ...) */
  LAYOUT_CROSS_LAYER,   /* (num_blocks, num_layers, ...) */
} LayoutKind;

/* The pieces KvDevice makes for chunks: layer-major inside each slot. */
static KvDeviceCopy *
make_copies (GRand   *rand,
             guint    n_layers,
             guint    n_blocks,
             guint    bpc,
             guint64  block_bytes,
             guint64  slot_size,
             guint    n_chunks,
             gboolean consecutive,
             guint   *out_n)
{
  KvDeviceCopy *copies = g_new (KvDeviceCopy, (gsize) n_chunks * bpc * n_layers);
  g_autofree guint *chunk_blocks = g_new (guint, (gsize) n_chunks * bpc);
  guint n = 0;
  guint n_device_chunks = n_blocks / bpc;
  g_autofree guint *perm = g_new (guint, n_device_chunks);

  /* Distinct device chunks (whole ones when consecutive), distinct slots. */
  for (guint i = 0; i < n_device_chunks; i++)
    perm[i] = i;
  for (guint i = n_device_chunks - 1; i > 0; i--)
    {
      guint j = g_rand_int_range (rand, 0, i + 1);
      guint t = perm[i];

      perm[i] = perm[j];
      perm[j] = t;
    }
  for (guint c = 0; c < n_chunks; c++)
    for (guint j = 0; j < bpc; j++)
      chunk_blocks[c * bpc + j] = consecutive ? perm[c] * bpc + j
                                              : perm[(c * bpc + j) % n_device_chunks] * bpc +
                                                g_rand_int_range (rand, 0, bpc);
  for (guint c = 0; c < n_chunks; c++)
    for (guint l = 0; l < n_layers; l++)
      for (guint j = 0; j < bpc; j++)
        {
          copies[n].layer = l;
          copies[n].block = chunk_blocks[c * bpc + j];
          copies[n].primary_offset = (guint64) c * slot_size + ((guint64) l * bpc + j) * block_bytes;
          n++;
        }
  *out_n = n;
  return copies;
}

static void
check_plan (LayoutKind kind,
            gboolean   consecutive,
            guint64    max_pitch,
            guint     *out_runs,
            guint     *out_rows)
{
  const guint n_layers = 3, n_blocks = 64, bpc = 4, n_chunks = 5;
  const guint64 block_bytes = 256;
  const guint64 slot_size = (guint64) bpc * n_layers * block_bytes;
  gsize device_size = (gsize) n_layers * n_blocks * block_bytes;
  g_autofree guint8 *device = g_malloc (device_size);
  g_autofree guint8 *host_plan = g_malloc0 (slot_size * n_chunks);
  g_autofree guint8 *host_naive = g_malloc0 (slot_size * n_chunks);
  g_autofree guint8 *device_copy = NULL;
  g_autofree KvDeviceCopy *copies = NULL;
  GRand *rand = g_rand_new_with_seed (kind * 10 + consecutive);
  guint64 addr[3];
  guint64 base = (guint64) (guintptr) device;
  KvCudaLayout layout;
  g_autoptr(GArray) runs = NULL;
  g_autoptr(GError) error = NULL;
  guint n_copies, rows = 0;

  for (gsize i = 0; i < device_size; i++)
    device[i] = (guint8) g_rand_int (rand);

  switch (kind)
    {
    case LAYOUT_DENSE:
      for (guint l = 0; l < n_layers; l++)
        addr[l] = base + (guint64) l * n_blocks * block_bytes;
      layout = layout_new (n_layers, addr, n_blocks, block_bytes, 1, block_bytes, 0);
      break;
    case LAYOUT_KV_PLANES:
      for (guint l = 0; l < n_layers; l++)
        addr[l] = base + (guint64) l * n_blocks * block_bytes;
      layout = layout_new (n_layers, addr, n_blocks, block_bytes, 2, block_bytes / 2,
                           (guint64) n_blocks * block_bytes / 2);
      break;
    case LAYOUT_CROSS_LAYER:
    default:
      for (guint l = 0; l < n_layers; l++)
        addr[l] = base + (guint64) l * block_bytes;
      layout = layout_new (n_layers, addr, n_blocks, block_bytes, 1, n_layers * block_bytes, 0);
      break;
    }
  g_assert_true (kv_cuda_layout_check (&layout, &error));
  g_assert_no_error (error);

  copies = make_copies (rand, n_layers, n_blocks, bpc, block_bytes, slot_size, n_chunks,
                        consecutive, &n_copies);

  /* Device → host: the plan copies what the pieces name. */
  runs = kv_cuda_layout_plan (&layout, copies, n_copies, max_pitch);
  replay (runs, host_plan, TRUE);
  naive (&layout, copies, n_copies, host_naive, TRUE);
  g_assert_cmpmem (host_plan, slot_size * n_chunks, host_naive, slot_size * n_chunks);
  for (guint i = 0; i < runs->len; i++)
    {
      const KvCudaRun *run = &g_array_index (runs, KvCudaRun, i);

      rows += run->height;
      if (run->height > 1)
        {
          g_assert_cmpuint (run->device_pitch, <=, max_pitch);
          g_assert_cmpuint (run->host_pitch, <=, max_pitch);
        }
    }

  /* Host → device: scribble on the slots, load them back, compare. */
  for (gsize i = 0; i < slot_size * n_chunks; i++)
    host_plan[i] = (guint8) (host_plan[i] ^ 0x5a);
  memcpy (host_naive, host_plan, slot_size * n_chunks);
  device_copy = g_memdup2 (device, device_size);
  replay (runs, host_plan, FALSE);
  {
    g_autofree guint8 *after_plan = g_memdup2 (device, device_size);

    memcpy (device, device_copy, device_size);
    naive (&layout, copies, n_copies, host_naive, FALSE);
    g_assert_cmpmem (after_plan, device_size, device, device_size);
    g_assert_true (memcmp (after_plan, device_copy, device_size) != 0);
  }

  *out_runs = runs->len;
  *out_rows = rows;
  kv_cuda_layout_clear (&layout);
  g_rand_free (rand);
}

/* Whole chunks of consecutive blocks coalesce: one run per (chunk, layer)
 * in a per-layer tensor, one 2D run per (chunk, layer, plane) with K and V
 * planes or in the cross-layer tensor. Scattered blocks and pitches past
 * the limit still copy exactly the pieces' bytes. */
static void
test_plan (void)
{
  guint runs, rows;

  check_plan (LAYOUT_DENSE, TRUE, G_MAXINT, &runs, &rows);
  g_assert_cmpuint (runs, ==, 5 * 3);     /* chunk × layer, bpc blocks each */
  g_assert_cmpuint (rows, ==, 5 * 3);

  check_plan (LAYOUT_KV_PLANES, TRUE, G_MAXINT, &runs, &rows);
  /* A plane's blocks are adjacent on the device, a block-bytes apart in
   * the slot: one 2D run of bpc rows per (chunk, layer, plane). */
  g_assert_cmpuint (runs, ==, 5 * 3 * 2);
  g_assert_cmpuint (rows, ==, 5 * 3 * 4 * 2);

  check_plan (LAYOUT_CROSS_LAYER, TRUE, G_MAXINT, &runs, &rows);
  g_assert_cmpuint (runs, ==, 5 * 3);     /* one 2D run of bpc rows per (chunk, layer) */
  g_assert_cmpuint (rows, ==, 5 * 3 * 4);

  /* Pitches past the limit split runs, bytes unchanged. */
  check_plan (LAYOUT_CROSS_LAYER, TRUE, 256, &runs, &rows);
  g_assert_cmpuint (runs, ==, 5 * 3 * 4);

  check_plan (LAYOUT_DENSE, FALSE, G_MAXINT, &runs, &rows);
  check_plan (LAYOUT_KV_PLANES, FALSE, G_MAXINT, &runs, &rows);
  check_plan (LAYOUT_CROSS_LAYER, FALSE, G_MAXINT, &runs, &rows);
}

static void
test_plan_empty (void)
{
  guint64 addr[1] = { 0x1000 };
  KvCudaLayout layout = layout_new (1, addr, 4, 64, 1, 64, 0);
  g_autoptr(GArray) runs = kv_cuda_layout_plan (&layout, NULL, 0, G_MAXINT);

  g_assert_cmpuint (runs->len, ==, 0);
  kv_cuda_layout_clear (&layout);
}

/* Descriptor ring of the gather/scatter kernel: random requests given
 * back in order never overlap live entries, never wrap, and always fit
 * once everything was given back (no wait that nothing would end). */
static void
test_ring (void)
{
  const guint64 cap = 1000;
  GRand *rand = g_rand_new_with_seed (7);
  GQueue live = G_QUEUE_INIT;   /* (start, end) pairs, oldest first */
  guint64 head = 0, tail = 0;
  guint n_waits = 0, n_skips = 0;

  for (guint round = 0; round < 20000; round++)
    {
      guint64 n = g_rand_int_range (rand, 1, cap + 1);
      guint64 start = 0;

      if (g_rand_int_range (rand, 0, 8) == 0)
        n = g_rand_int_range (rand, cap / 2, cap + 1);
      while (!kv_cuda_ring_reserve (cap, head, &tail, n, &start))
        {
          guint64 *oldest = g_queue_pop_head (&live);

          /* Waiting is only right while something is in use. */
          g_assert_nonnull (oldest);
          tail = MAX (tail, oldest[1]);
          g_free (oldest);
          n_waits++;
        }
      g_assert_cmpuint (start, >=, head);
      g_assert_cmpuint (start % cap + n, <=, cap);   /* contiguous */
      if (start != head)
        n_skips++;
      /* Disjoint from every live entry, modulo the ring. */
      for (GList *l = live.head; l != NULL; l = l->next)
        {
          guint64 *r = l->data;

          g_assert_cmpuint (r[0], <, start);
          g_assert_cmpuint (start + n - r[0], <=, cap);
        }
      head = start + n;
      {
        guint64 *r = g_new (guint64, 2);

        r[0] = start;
        r[1] = head;
        g_queue_push_tail (&live, r);
      }
      /* Jobs finish, in order, now and then. */
      while (!g_queue_is_empty (&live) && g_rand_int_range (rand, 0, 3) == 0)
        {
          guint64 *oldest = g_queue_pop_head (&live);

          tail = MAX (tail, oldest[1]);
          g_free (oldest);
        }
    }
  g_assert_cmpuint (n_waits, >, 100);
  g_assert_cmpuint (n_skips, >, 100);
  g_queue_clear_full (&live, g_free);
  g_rand_free (rand);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/kvtier/cuda/layout/valid", test_valid_layouts);
  g_test_add_func ("/kvtier/cuda/layout/invalid", test_invalid_layouts);
  g_test_add_func ("/kvtier/cuda/layout/overlap-exact", test_overlap_exact);
  g_test_add_func ("/kvtier/cuda/layout/too-many-lanes", test_too_many_lanes);
  g_test_add_func ("/kvtier/cuda/layout/parse-addresses", test_parse_addresses);
  g_test_add_func ("/kvtier/cuda/layout/plan", test_plan);
  g_test_add_func ("/kvtier/cuda/layout/plan-empty", test_plan_empty);
  g_test_add_func ("/kvtier/cuda/layout/ring", test_ring);

  return g_test_run ();
}
