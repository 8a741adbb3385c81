/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-cuda-layout.h"

#include <errno.h>
#include <stdlib.h>

/* Parses "0x7f3a00000000" or "140234567680": what Python's hex() and str()
 * make of tensor.data_ptr(). */
gboolean
kv_cuda_layout_parse_addresses (const char * const *texts,
                                guint64           **out_addresses,
                                guint              *out_n,
                                GError            **error)
{
  guint n = texts != NULL ? g_strv_length ((char **) texts) : 0;
  g_autofree guint64 *addresses = g_new0 (guint64, MAX (n, 1));

  for (guint i = 0; i < n; i++)
    {
      const char *text = texts[i];
      guint base = 10;
      const char *digits = text;
      guint64 value;
      char *end = NULL;

      while (g_ascii_isspace (*digits))
        digits++;
      if (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
        {
          base = 16;
          digits += 2;
        }
      errno = 0;
      value = g_ascii_strtoull (digits, &end, base);
      if (end != NULL)
        while (g_ascii_isspace (*end))
          end++;
      if (!g_ascii_isxdigit (digits[0]) || end == NULL || *end != '\0' || errno != 0 ||
          (base == 10 && !g_ascii_isdigit (digits[0])))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "KvCudaDevice: layer %u's address “%s” is not a decimal or"
                       " 0x-hexadecimal 64-bit number", i, text);
          return FALSE;
        }
      addresses[i] = value;
    }

  *out_addresses = g_steal_pointer (&addresses);
  *out_n = n;
  return TRUE;
}

guint64
kv_cuda_layout_lane_start (const KvCudaLayout *layout,
                           guint               layer,
                           guint               plane)
{
  return layout->layer_addresses[layer] + (guint64) plane * layout->plane_stride;
}

/* One past the lane's last byte; valid once kv_cuda_layout_check() passed. */
guint64
kv_cuda_layout_lane_end (const KvCudaLayout *layout,
                         guint               layer,
                         guint               plane)
{
  return kv_cuda_layout_lane_start (layout, layer, plane) +
         (guint64) (layout->n_blocks - 1) * layout->block_stride + layout->plane_bytes;
}

typedef struct
{
  guint64 start;
  guint64 end;
  guint   layer;
  guint   plane;
} Lane;

static int
compare_lanes (gconstpointer a,
               gconstpointer b)
{
  const Lane *x = a, *y = b;

  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  return 0;
}

/* Whether lanes @a and @b (a->start ≤ b->start) share a byte, and which
 * block of @a does: every lane has the same stride and width, so block i of
 * @a meets block j of @b only where |(i − j) × stride − d| < width, d the
 * distance of their starts; j = 0 and the two i around d / stride are the
 * only candidates. */
static gboolean
lanes_overlap (const KvCudaLayout *layout,
               const Lane         *a,
               const Lane         *b,
               guint64            *out_block)
{
  guint64 d = b->start - a->start;
  guint64 w = layout->plane_bytes;
  guint64 s = layout->block_stride;
  guint64 m;

  if (layout->n_blocks == 1 || s == 0)
    {
      *out_block = 0;
      return d < w;
    }
  m = d / s;
  if (m < layout->n_blocks && d - m * s < w)
    {
      *out_block = m;
      return TRUE;
    }
  if (m + 1 < layout->n_blocks && (m + 1) * s - d < w)
    {
      *out_block = m + 1;
      return TRUE;
    }
  return FALSE;
}

/* Everything that can be said of a layout without a GPU: sizes, address
 * arithmetic that stays inside 64 bits, and no byte of device memory
 * claimed by two (layer, plane, block) triples. */
gboolean
kv_cuda_layout_check (const KvCudaLayout  *layout,
                      GError             **error)
{
  g_autofree Lane *lanes = NULL;
  g_autoptr(GArray) active = NULL;
  guint n_lanes;

  if (layout->n_layers == 0 || layout->n_blocks == 0 || layout->block_bytes == 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: the layout has %u layers of %u blocks of %"
                   G_GUINT64_FORMAT " bytes: none may be zero",
                   layout->n_layers, layout->n_blocks, layout->block_bytes);
      return FALSE;
    }
  if (layout->n_planes == 0 || layout->n_planes > KV_CUDA_LAYOUT_MAX_PLANES ||
      layout->block_bytes % layout->n_planes != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: block-bytes %" G_GUINT64_FORMAT " does not split"
                   " into n-planes %u equal planes (1 to %u planes)",
                   layout->block_bytes, layout->n_planes, KV_CUDA_LAYOUT_MAX_PLANES);
      return FALSE;
    }
  if ((guint64) layout->n_layers * layout->n_planes > KV_CUDA_LAYOUT_MAX_LANES)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: %u layers × %u planes exceed the %u (layer,"
                   " plane) pairs a layout may have", layout->n_layers,
                   layout->n_planes, KV_CUDA_LAYOUT_MAX_LANES);
      return FALSE;
    }
  if (layout->n_blocks > 1 && layout->block_stride < layout->plane_bytes)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: consecutive blocks overlap: the block stride %"
                   G_GUINT64_FORMAT " is below the %" G_GUINT64_FORMAT " bytes of"
                   " a plane", layout->block_stride, layout->plane_bytes);
      return FALSE;
    }

  n_lanes = layout->n_layers * layout->n_planes;
  lanes = g_new (Lane, n_lanes);
  for (guint l = 0; l < layout->n_layers; l++)
    {
      guint64 base = layout->layer_addresses[l];
      guint64 span;

      if (base == 0)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "KvCudaDevice: layer %u's address is 0", l);
          return FALSE;
        }
      /* span = (n_blocks − 1) × block_stride + (n_planes − 1) × plane_stride
       * + plane_bytes, each step checked against 2^64. */
      if (!g_uint64_checked_mul (&span, layout->n_blocks - 1, layout->block_stride) ||
          !g_uint64_checked_add (&span, span, layout->plane_bytes))
        goto out_of_range;
      for (guint p = 0; p < layout->n_planes; p++)
        {
          Lane *lane = &lanes[l * layout->n_planes + p];
          guint64 offset;

          if (!g_uint64_checked_mul (&offset, p, layout->plane_stride) ||
              !g_uint64_checked_add (&lane->start, base, offset) ||
              !g_uint64_checked_add (&lane->end, lane->start, span))
            goto out_of_range;
          lane->layer = l;
          lane->plane = p;
        }
      continue;

    out_of_range:
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "KvCudaDevice: layer %u at 0x%" G_GINT64_MODIFIER "x: its %u"
                   " blocks (stride %" G_GUINT64_FORMAT ", %u planes %"
                   G_GUINT64_FORMAT " bytes apart) run past the end of the 64-bit"
                   " address space", l, base, layout->n_blocks,
                   layout->block_stride, layout->n_planes, layout->plane_stride);
      return FALSE;
    }

  /* Sweep by start address: only lanes whose ranges interleave are compared
   * block by block. */
  qsort (lanes, n_lanes, sizeof (Lane), compare_lanes);
  active = g_array_new (FALSE, FALSE, sizeof (guint));
  for (guint i = 0; i < n_lanes; i++)
    {
      const Lane *b = &lanes[i];
      guint kept = 0;

      for (guint k = 0; k < active->len; k++)
        {
          const Lane *a = &lanes[g_array_index (active, guint, k)];
          guint64 block;

          if (a->end <= b->start)
            continue;
          g_array_index (active, guint, kept++) = g_array_index (active, guint, k);
          if (lanes_overlap (layout, a, b, &block))
            {
              g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                           "KvCudaDevice: the layout's blocks overlap: block %"
                           G_GUINT64_FORMAT " of layer %u plane %u (at 0x%"
                           G_GINT64_MODIFIER "x) and block 0 of layer %u plane %u"
                           " (at 0x%" G_GINT64_MODIFIER "x) share bytes",
                           block, a->layer, a->plane,
                           a->start + block * layout->block_stride,
                           b->layer, b->plane, b->start);
              return FALSE;
            }
        }
      g_array_set_size (active, kept);
      g_array_append_val (active, i);
    }
  return TRUE;
}

/* Appends one (device, host, width) piece, growing the last run when the
 * piece continues it: in one dimension when both sides are contiguous,
 * else as one more row at the same pitches. */
static void
append_piece (GArray  *runs,
              guint64  device,
              guint64  host_offset,
              guint64  width,
              guint64  max_pitch)
{
  KvCudaRun *run = runs->len > 0 ? &g_array_index (runs, KvCudaRun, runs->len - 1) : NULL;
  KvCudaRun fresh = { device, host_offset, width, 1, width, width };

  if (run != NULL && run->height == 1 &&
      run->device + run->width == device && run->host_offset + run->width == host_offset)
    {
      run->width += width;
      run->device_pitch = run->host_pitch = run->width;
      return;
    }
  if (run != NULL && run->width == width)
    {
      if (run->height == 1 && device > run->device && host_offset > run->host_offset)
        {
          guint64 dp = device - run->device;
          guint64 hp = host_offset - run->host_offset;

          if (dp >= width && hp >= width && dp <= max_pitch && hp <= max_pitch)
            {
              run->device_pitch = dp;
              run->host_pitch = hp;
              run->height = 2;
              return;
            }
        }
      else if (run->height > 1 &&
               device == run->device + run->height * run->device_pitch &&
               host_offset == run->host_offset + run->height * run->host_pitch)
        {
          run->height++;
          return;
        }
    }
  g_array_append_val (runs, fresh);
}

/* Turns a job's pieces into as few copies as the addresses allow. */
GArray *
kv_cuda_layout_plan (const KvCudaLayout *layout,
                     const KvDeviceCopy *copies,
                     guint               n_copies,
                     guint64             max_pitch)
{
  GArray *runs = g_array_new (FALSE, FALSE, sizeof (KvCudaRun));

  /* Plane by plane: a layer's K blocks are adjacent on the device, its K
   * and V pieces of one block are not. */
  for (guint p = 0; p < layout->n_planes; p++)
    for (guint i = 0; i < n_copies; i++)
      {
        const KvDeviceCopy *copy = &copies[i];

        append_piece (runs,
                      kv_cuda_layout_lane_start (layout, copy->layer, p) +
                        (guint64) copy->block * layout->block_stride,
                      copy->primary_offset + (guint64) p * layout->plane_bytes,
                      layout->plane_bytes, max_pitch);
      }
  return runs;
}

void
kv_cuda_layout_clear (KvCudaLayout *layout)
{
  g_clear_pointer (&layout->layer_addresses, g_free);
  layout->n_layers = 0;
}

/* The gather/scatter kernel's descriptors live in a ring of @capacity
 * entries per direction, handed out and given back in job order: [tail,
 * head) are in use (counters that only grow; entry i is at i % capacity).
 * Finds where @n ≤ @capacity contiguous entries go: at @head, or at the
 * ring's start when they would wrap (the entries skipped go with them).
 * Returns whether they are free now; if not, the caller waits for older
 * jobs to give theirs back (@tail grows) and asks again. With nothing in
 * use, @tail moves up to the new start, so a request always fits then. */
gboolean
kv_cuda_ring_reserve (guint64  capacity,
                      guint64  head,
                      guint64 *tail,
                      guint64  n,
                      guint64 *out_start)
{
  guint64 start = head;

  g_return_val_if_fail (n > 0 && n <= capacity, FALSE);

  if (start % capacity + n > capacity)
    start += capacity - start % capacity;
  if (*tail == head)
    *tail = start;
  *out_start = start;
  return start + n - *tail <= capacity;
}
