/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

#include "kv-fault-tier.h"

/* A slow secondary tier with and without backpressure (issue 4, reference
 * §6: "slow tier pins the CPU tier").
 *
 * A 1 GiB primary tier (4096 slots of 256 KiB) cascades to a fault tier
 * whose every store job takes 50 ms on each of its 2 workers (≈ 80 MB/s),
 * while the "GPU" offers 8 chunks (2 MiB) every ~2 ms step (≈ 1 GB/s):
 * the field report's situation (GPU→CPU 10 GB/s, CPU→fs 79 MB/s). Each step
 * one returning request also asks for 8 chunks it stored long ago and the
 * tier holds; those are promoted and loaded.
 *
 * The "GPU" is a host device driven through a KvConnector, as an engine
 * would: computed chunks are copied from device blocks into primary slots
 * (and cascade when the copy is reported), loads copy slots into device
 * blocks.
 *
 * The same run drives two managers for DURATION seconds each: one whose
 * tier has no detector, one whose tier has an EMA detector (LOCAL presets,
 * default throttled policy). Every 0.25 s it prints the pinned fraction of
 * the primary tier (slots being read by cascades or written), the stores
 * the detector dropped, the GPU stores the primary refused (no free or
 * evictable slot), promotions started, and chunks loaded after a promotion.
 *
 * Usage: backpressure-slow-tier [DURATION_S] (default 3) */

#define SLOT_SIZE       (256 * 1024)
#define N_SLOTS         4096          /* 1 GiB */
#define CHUNKS_PER_STEP 8
#define STEP_US         2000
#define STORE_DELAY_US  50000
#define RETURN_AGE      64            /* returning requests re-read chunks this many steps old, at least */
#define GIVE_UP_STEPS   200
#define N_DEVICE_BLOCKS 512           /* 128 MiB of simulated device memory */

typedef struct
{
  KvRequest *request;
  GPtrArray *keys;          /* KvKey still wanted */
  GPtrArray *promoted;      /* KvKey whose promotion this request started (compared by address) */
  guint      age;
} Returning;

/* The engine's side of the device: free blocks, and the blocks each
 * transfer in flight holds until the connector reports it. */
typedef struct
{
  KvConnector *connector;
  GArray      *free_blocks;   /* guint32 */
  GHashTable  *held;          /* job id (guint64 *) → GArray of guint32 */
} Device;

typedef struct
{
  guint64 stores_offered;
  guint64 stores_refused;   /* prepare_store found no slot */
  guint64 cascades_dropped; /* by the detector */
  guint64 chunks_dropped;
  guint64 promotions;       /* HIT_PENDING answers */
  guint64 loads_promoted;   /* chunks loaded after a promotion */
  guint64 primary_hits;
  guint64 misses;
  gdouble max_pinned;
} Totals;

static KvKey *
make_key (guint64 step,
          guint   i)
{
  guint8 hash[16];
  guint64 x = (step * CHUNKS_PER_STEP + i + 1) * 0x9E3779B97F4A7C15ull;

  for (guint b = 0; b < sizeof hash; b++)
    {
      x ^= x >> 29;
      x *= 0xBF58476D1CE4E5B9ull;
      hash[b] = (guint8) (x >> 56);
    }
  return kv_key_new (hash, sizeof hash, 0);
}

static void
returning_free (gpointer data)
{
  Returning *ret = data;

  g_object_unref (ret->request);
  g_ptr_array_unref (ret->keys);
  g_ptr_array_unref (ret->promoted);
  g_free (ret);
}

static gdouble
pinned_fraction (KvPrimaryTier *primary)
{
  guint pinned = kv_primary_tier_get_n_allocated (primary) - kv_primary_tier_get_n_evictable (primary);

  return (gdouble) pinned / kv_primary_tier_get_n_slots (primary);
}

static gboolean
take_blocks (Device  *dev,
             guint    n,
             guint32 *out)
{
  if (dev->free_blocks->len < n)
    return FALSE;
  for (guint i = 0; i < n; i++)
    out[i] = g_array_index (dev->free_blocks, guint32, dev->free_blocks->len - 1 - i);
  g_array_set_size (dev->free_blocks, dev->free_blocks->len - n);
  return TRUE;
}

static void
hold_blocks (Device        *dev,
             guint64        job,
             const guint32 *blocks,
             guint          n)
{
  GArray *held = g_array_sized_new (FALSE, FALSE, sizeof (guint32), n);

  g_array_append_vals (held, blocks, n);
  g_hash_table_insert (dev->held, g_memdup2 (&job, sizeof job), held);
}

/* Applies the finished transfers (the connector completes them in the
 * manager) and frees their device blocks. */
static void
take_finished (Device *dev)
{
  KvJobResult **results = kv_connector_take_finished (dev->connector);

  for (KvJobResult **r = results; *r != NULL; r++)
    {
      guint64 id = kv_job_result_get_job_id (*r);
      GArray *held = g_hash_table_lookup (dev->held, &id);

      if (!kv_job_result_get_success (*r))
        g_error ("device job %" G_GUINT64_FORMAT " failed", id);
      g_array_append_vals (dev->free_blocks, held->data, held->len);
      g_hash_table_remove (dev->held, &id);
      kv_job_result_unref (*r);
    }
  g_free (results);
}

/* Looks up the wanted keys of @ret and loads the ready ones into device
 * blocks. Returns TRUE when the request is done. */
static gboolean
step_returning (Device    *dev,
                Returning *ret,
                Totals    *totals)
{
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  guint n_hits, n_ready;

  ret->age += 1;
  lookup = kv_connector_lookup (dev->connector, ret->request, (KvKey * const *) ret->keys->pdata,
                                ret->keys->len, 0, &error);
  if (lookup == NULL)
    g_error ("lookup: %s", error->message);
  n_hits = kv_prefix_lookup_get_n_hits (lookup);
  n_ready = kv_prefix_lookup_get_n_ready (lookup);

  for (guint i = 0; i < n_hits; i++)
    {
      KvKey *key = g_ptr_array_index (ret->keys, i);
      gboolean known = FALSE;

      for (guint p = 0; p < ret->promoted->len; p++)
        known |= ret->promoted->pdata[p] == key;
      if (!known && kv_prefix_lookup_get_source (lookup, i) >= KV_CHUNK_SOURCE_TIER)
        {
          totals->promotions += 1;
          g_ptr_array_add (ret->promoted, kv_key_ref (key));
        }
    }

  if (n_ready > 0)
    {
      guint32 blocks[CHUNKS_PER_STEP];
      guint64 job;

      /* The "GPU" reads them at once, if it has the blocks. */
      if (!take_blocks (dev, n_ready, blocks))
        return FALSE;
      job = kv_connector_load (dev->connector, lookup, blocks, n_ready, &error);
      if (job == 0)
        g_error ("load: %s", error->message);
      hold_blocks (dev, job, blocks, n_ready);
      for (guint i = 0; i < n_ready; i++)
        {
          gboolean promoted = FALSE;

          for (guint p = 0; p < ret->promoted->len; p++)
            promoted |= ret->promoted->pdata[p] == ret->keys->pdata[i];
          if (promoted)
            totals->loads_promoted += 1;
          else
            totals->primary_hits += 1;
        }
      g_ptr_array_remove_range (ret->keys, 0, n_ready);
    }
  else if (n_hits == 0 && !kv_prefix_lookup_get_retry (lookup) && ret->keys->len > 0)
    {
      /* the first wanted chunk is gone: a miss; the rest is asked next step */
      totals->misses += 1;
      g_ptr_array_remove_index (ret->keys, 0);
    }

  return ret->keys->len == 0 || ret->age > GIVE_UP_STEPS;
}

static void
run (gboolean  with_backpressure,
     gdouble   duration_s)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(KvFaultTier) tier = NULL;
  g_autoptr(KvEmaBackpressureDetector) detector = NULL;
  g_autoptr(KvHostDevice) host = NULL;
  g_autoptr(KvConnector) connector = NULL;
  g_autoptr(GPtrArray) returning = g_ptr_array_new_with_free_func (returning_free);
  Device dev;
  Totals totals = { 0, };
  gint64 start, next_report;
  guint64 step;

  buffer = kv_host_buffer_new (N_SLOTS, SLOT_SIZE, &error);
  g_assert_no_error (error);
  primary = kv_primary_tier_new (buffer, NULL, FALSE);
  manager = kv_tiering_manager_new (primary);

  if (with_backpressure)
    {
      detector = kv_ema_backpressure_detector_new_for_tier ("fault", KV_LOCALITY_LOCAL, &error);
      g_assert_no_error (error);
    }
  tier = g_object_new (KV_TYPE_FAULT_TIER,
                       "primary", buffer,
                       "tier-type", "fault",
                       "n-workers", 2,
                       "backpressure-detector", detector,
                       NULL);
  kv_fault_tier_set_store_delay_us (tier, STORE_DELAY_US);
  if (!kv_tiering_manager_add_tier (manager, KV_SECONDARY_TIER (tier), &error))
    g_error ("%s", error->message);
  host = kv_host_device_new (buffer, N_DEVICE_BLOCKS, SLOT_SIZE, 1, 1, &error);
  if (host == NULL)
    g_error ("%s", error->message);
  connector = kv_connector_new (manager, KV_DEVICE (host), &error);
  if (connector == NULL)
    g_error ("%s", error->message);
  dev.connector = connector;
  dev.free_blocks = g_array_new (FALSE, FALSE, sizeof (guint32));
  for (guint32 b = 0; b < N_DEVICE_BLOCKS; b++)
    g_array_append_val (dev.free_blocks, b);
  dev.held = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, (GDestroyNotify) g_array_unref);
  /* first touch outside the measurement: page faults would otherwise
   * dominate the device copies */
  memset (kv_host_device_peek_block (host, 0, 0), 0x5a, (gsize) N_DEVICE_BLOCKS * SLOT_SIZE);
  memset (kv_host_buffer_get_data (buffer), 0, kv_host_buffer_get_size (buffer));

  if (with_backpressure)
    g_print ("\nWITH backpressure (EMA detector, high %.3f / low %.3f s/MiB, throttled drop policy)\n",
             kv_ema_backpressure_detector_get_high_water_s (detector),
             kv_ema_backpressure_detector_get_low_water_s (detector));
  else
    g_print ("\nWITHOUT backpressure (no detector)\n");
  g_print ("%6s %8s %11s %12s %11s %11s %13s %9s %11s\n", "t(s)", "pinned", "max pinned",
           "GPU refused", "bp dropped", "promotions", "loaded(prom)", "prim.hit", "ema(s/MiB)");

  start = g_get_monotonic_time ();
  next_report = start + 250000;
  for (step = 0; ; step++)
    {
      g_autofree char *id = g_strdup_printf ("w%" G_GUINT64_FORMAT, step);
      g_autoptr(KvRequest) writer = kv_request_new (id, NULL);
      KvKey *keys[CHUNKS_PER_STEP];
      guint32 blocks[CHUNKS_PER_STEP];
      guint64 job;
      gint64 now = g_get_monotonic_time ();

      if (now - start >= duration_s * G_USEC_PER_SEC)
        break;

      take_finished (&dev);

      /* A new request computes CHUNKS_PER_STEP chunks into device blocks
       * and offloads them. */
      for (guint i = 0; i < CHUNKS_PER_STEP; i++)
        keys[i] = make_key (step, i);
      kv_connector_add_request (connector, writer);
      totals.stores_offered += 1;
      while (!take_blocks (&dev, CHUNKS_PER_STEP, blocks))
        {
          if (!kv_connector_wait (connector, &error))
            g_error ("%s", error->message);
          take_finished (&dev);
        }
      job = kv_connector_store (connector, writer, keys, CHUNKS_PER_STEP, blocks, CHUNKS_PER_STEP,
                                &error);
      if (job == 0)
        {
          if (error != NULL && !g_error_matches (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE))
            g_error ("store: %s", error->message);
          if (error != NULL)
            totals.stores_refused += 1;
          g_clear_error (&error);
          g_array_append_vals (dev.free_blocks, blocks, CHUNKS_PER_STEP);
        }
      else
        hold_blocks (&dev, job, blocks, CHUNKS_PER_STEP);
      kv_connector_finish_request (connector, writer);
      for (guint i = 0; i < CHUNKS_PER_STEP; i++)
        kv_key_unref (keys[i]);

      /* A returning request wants an old prefix the tier holds. */
      if (step > RETURN_AGE)
        {
          guint64 old = g_random_int_range (0, (gint32) (step - RETURN_AGE));
          g_autoptr(KvKey) probe = make_key (old, 0);
          g_autofree char *rid = g_strdup_printf ("r%" G_GUINT64_FORMAT, step);
          g_autoptr(KvRequest) probe_req = kv_request_new (rid, NULL);

          if (kv_secondary_tier_lookup (KV_SECONDARY_TIER (tier), probe, probe_req) == KV_LOOKUP_RESULT_HIT)
            {
              Returning *ret = g_new0 (Returning, 1);

              ret->request = g_steal_pointer (&probe_req);
              ret->keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
              ret->promoted = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
              for (guint i = 0; i < CHUNKS_PER_STEP; i++)
                g_ptr_array_add (ret->keys, make_key (old, i));
              kv_connector_add_request (connector, ret->request);
              g_ptr_array_add (returning, ret);
            }
        }

      for (guint r = 0; r < returning->len; )
        {
          Returning *ret = g_ptr_array_index (returning, r);

          if (step_returning (&dev, ret, &totals))
            {
              kv_connector_finish_request (connector, ret->request);
              g_ptr_array_remove_index_fast (returning, r);
            }
          else
            r++;
        }

      kv_connector_end_step (connector, NULL, NULL);

      if (detector != NULL)
        {
          guint64 stores, chunks;

          kv_backpressure_policy_pop_stores_dropped (kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (detector)),
                                                     &stores, &chunks);
          totals.cascades_dropped += stores;
          totals.chunks_dropped += chunks;
        }
      totals.max_pinned = MAX (totals.max_pinned, pinned_fraction (primary));

      now = g_get_monotonic_time ();
      if (now >= next_report)
        {
          g_print ("%6.2f %7.1f%% %10.1f%% %12" G_GUINT64_FORMAT " %11" G_GUINT64_FORMAT
                   " %11" G_GUINT64_FORMAT " %13" G_GUINT64_FORMAT " %9" G_GUINT64_FORMAT " %11.4f\n",
                   (now - start) / 1e6, 100 * pinned_fraction (primary), 100 * totals.max_pinned,
                   totals.stores_refused, totals.cascades_dropped, totals.promotions,
                   totals.loads_promoted, totals.primary_hits,
                   detector != NULL ? kv_ema_backpressure_detector_get_store_latency_ema (detector) : 0.0);
          next_report += 250000;
        }

      /* The model runs. */
      g_usleep (STEP_US);
    }

  g_print ("summary %s: %" G_GUINT64_FORMAT " steps, %" G_GUINT64_FORMAT " GPU stores offered, %"
           G_GUINT64_FORMAT " refused by a pinned-full primary (%.1f%%), %" G_GUINT64_FORMAT
           " cascades (%" G_GUINT64_FORMAT " chunks) dropped by backpressure, max pinned %.1f%%, %"
           G_GUINT64_FORMAT " promotions, %" G_GUINT64_FORMAT " chunks loaded after promotion, %"
           G_GUINT64_FORMAT " misses\n",
           with_backpressure ? "with backpressure" : "without backpressure",
           step, totals.stores_offered, totals.stores_refused,
           totals.stores_offered > 0 ? 100.0 * totals.stores_refused / totals.stores_offered : 0.0,
           totals.cascades_dropped, totals.chunks_dropped, 100 * totals.max_pinned,
           totals.promotions, totals.loads_promoted, totals.misses);

  /* The backlog of a slow tier would take minutes at 50 ms a job. */
  kv_fault_tier_set_store_delay_us (tier, 0);
  for (guint r = 0; r < returning->len; r++)
    kv_connector_finish_request (connector, ((Returning *) returning->pdata[r])->request);
  if (!kv_connector_shutdown (connector, &error))
    g_error ("shutdown: %s", error->message);
  take_finished (&dev);
  g_hash_table_unref (dev.held);
  g_array_unref (dev.free_blocks);
}

int
main (int   argc,
      char *argv[])
{
  gdouble duration_s = argc > 1 ? g_ascii_strtod (argv[1], NULL) : 3.0;

  if (duration_s <= 0)
    duration_s = 3.0;

  g_print ("primary: %u slots x %u KiB = %u MiB; tier: 2 workers, %u ms per store job; "
           "offered: %u chunks (%u MiB) per %u us step\n",
           N_SLOTS, SLOT_SIZE / 1024, N_SLOTS * (SLOT_SIZE / 1024) / 1024, STORE_DELAY_US / 1000,
           CHUNKS_PER_STEP, CHUNKS_PER_STEP * SLOT_SIZE / (1024 * 1024), STEP_US);
  run (FALSE, duration_s);
  run (TRUE, duration_s);
  return 0;
}
