/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <poll.h>
#include <string.h>

#include <kvtier.h>
#include <xxhash.h>

#include "kv-delayed-tier.h"

/* A chunk is 2 layers × 1 block of 4096 bytes, in an 8 KiB slot. */
#define SLOT_SIZE   8192
#define BLOCK_BYTES 4096
#define N_LAYERS    2
#define N_BLOCKS    32

typedef struct
{
  KvHostBuffer  *buffer;
  KvPrimaryTier *primary;
  KvTieringManager *manager;
  KvDelayedTier *tier;        /* NULL without a tier */
  KvDelayedTier *tier2;       /* NULL without a second tier */
  KvHostDevice  *device;
  KvConnector   *connector;
  KvKey         *keys[16];
} Fixture;

typedef struct
{
  guint    n_slots;
  gboolean with_tier;
  gboolean with_second_tier;
} Setup;

static const Setup with_tier = { 4, TRUE };
static const Setup no_tier = { 4, FALSE };
static const Setup three_slots = { 3, TRUE };
static const Setup two_tiers = { 4, TRUE, TRUE };

static KvKey *
make_key (guint i)
{
  guint8 hash[16];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 37u + b * 11u + 1u);
  return kv_key_new (hash, sizeof hash, 0);
}

static guint8
pattern (guint  chunk,
         guint  layer,
         gsize  offset)
{
  return (guint8) ((chunk * 151u + layer * 29u + offset * 7u + (offset >> 9)) & 0xff);
}

/* "Computes" chunk @chunk into device block @block. */
static void
compute (Fixture *f,
         guint    chunk,
         guint    block)
{
  for (guint layer = 0; layer < N_LAYERS; layer++)
    {
      guint8 *mem = kv_host_device_peek_block (f->device, layer, block);

      for (gsize i = 0; i < BLOCK_BYTES; i++)
        mem[i] = pattern (chunk, layer, i);
    }
}

static gboolean
holds (Fixture *f,
       guint    chunk,
       guint    block)
{
  for (guint layer = 0; layer < N_LAYERS; layer++)
    {
      const guint8 *mem = kv_host_device_peek_block (f->device, layer, block);

      for (gsize i = 0; i < BLOCK_BYTES; i++)
        if (mem[i] != pattern (chunk, layer, i))
          return FALSE;
    }
  return TRUE;
}

static void
fixture_set_up (Fixture       *f,
                gconstpointer  data)
{
  const Setup *setup = data;
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (setup->n_slots, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->primary = kv_primary_tier_new (f->buffer, NULL, FALSE);
  f->manager = kv_tiering_manager_new (f->primary);
  if (setup->with_tier)
    {
      f->tier = kv_delayed_tier_new (f->buffer, "mem");
      kv_delayed_tier_set_synchronous (f->tier, TRUE);
      g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier), &error));
      g_assert_no_error (error);
    }
  if (setup->with_second_tier)
    {
      f->tier2 = kv_delayed_tier_new (f->buffer, "mem2");
      kv_delayed_tier_set_synchronous (f->tier2, TRUE);
      g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier2), &error));
      g_assert_no_error (error);
    }
  f->device = kv_host_device_new (f->buffer, N_BLOCKS, BLOCK_BYTES, N_LAYERS, 1, &error);
  g_assert_no_error (error);
  f->connector = kv_connector_new (f->manager, KV_DEVICE (f->device), &error);
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = make_key (i);
}

static void
fixture_tear_down (Fixture       *f,
                   gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_connector_shutdown (f->connector, &error));
  g_assert_no_error (error);
  /* No pin survives: every slot holding a chunk is evictable. */
  g_assert_cmpuint (kv_primary_tier_get_n_evictable (f->primary), ==,
                    kv_primary_tier_get_n_stored (f->primary));
  g_assert_finalize_object (f->connector);
  g_clear_object (&f->device);
  g_clear_object (&f->manager);
  g_clear_object (&f->tier);
  g_clear_object (&f->tier2);
  g_clear_object (&f->primary);
  g_clear_object (&f->buffer);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
}

static gboolean
fd_readable (int fd)
{
  struct pollfd pfd = { fd, POLLIN, 0 };

  return poll (&pfd, 1, 0) == 1;
}

/* Sleeps on the connector's descriptor until it is readable. */
static void
wait_wakeup (Fixture *f)
{
  struct pollfd pfd = { kv_connector_get_wakeup_fd (f->connector), POLLIN, 0 };

  g_assert_cmpint (poll (&pfd, 1, 10000), ==, 1);
}

/* Waits for the device and takes its results: each must be one of @ids
 * (the job ids the connector returned), each exactly once. */
static guint
take_expecting (Fixture       *f,
                const guint64 *ids,
                guint          n_ids)
{
  g_autoptr(GError) error = NULL;
  g_autofree gboolean *seen = g_new0 (gboolean, MAX (n_ids, 1));
  KvJobResult **results;
  guint n = 0;

  g_assert_true (kv_connector_wait (f->connector, &error));
  g_assert_no_error (error);
  results = kv_connector_take_finished (f->connector);
  for (KvJobResult **r = results; *r != NULL; r++, n++)
    {
      guint64 id = kv_job_result_get_job_id (*r);
      guint k;

      for (k = 0; k < n_ids && ids[k] != id; k++)
        ;
      g_assert_cmpuint (k, <, n_ids);
      g_assert_false (seen[k]);
      seen[k] = TRUE;
      g_assert_true (kv_job_result_get_success (*r));
      kv_job_result_unref (*r);
    }
  g_free (results);
  g_assert_cmpuint (n, ==, n_ids);
  return n;
}

/* Steps until no transfer and no tier job is left. */
static void
settle (Fixture *f)
{
  KvJobResult **results;

  /* a step first: promotions started by lookups are submitted at its end */
  kv_connector_end_step (f->connector, NULL, NULL);
  for (guint i = 0; i < 100 && kv_connector_has_pending_work (f->connector); i++)
    {
      results = kv_connector_take_finished (f->connector);
      for (KvJobResult **r = results; *r != NULL; r++)
        kv_job_result_unref (*r);
      g_free (results);
      kv_connector_end_step (f->connector, NULL, NULL);
    }
  g_assert_false (kv_connector_has_pending_work (f->connector));
}

static guint64
store_chunks (Fixture    *f,
              KvRequest  *request,
              guint       first,
              guint       n,
              guint       first_block)
{
  g_autoptr(GError) error = NULL;
  g_autofree guint32 *blocks = g_new (guint32, n);
  guint64 job;

  for (guint i = 0; i < n; i++)
    {
      blocks[i] = first_block + i;
      compute (f, first + i, blocks[i]);
    }
  job = kv_connector_store (f->connector, request, f->keys + first, n, blocks, n, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (job, !=, 0);
  return job;
}

static gdouble
stat (KvStats    *stats,
      const char *name,
      const char *label)
{
  const char *labels[] = { label, NULL };
  gdouble value = -1;

  g_assert_true (kv_stats_lookup (stats, name, label != NULL ? labels : NULL, &value));
  return value;
}

/* Bytes stored from device blocks come back bit-exact into other blocks
 * after they fell out of the primary tier and were promoted back. */
static void
test_round_trip (Fixture       *f,
                 gconstpointer  data)
{
  g_autoptr(KvRequest) writer = kv_request_new ("writer", NULL);
  g_autoptr(KvRequest) reader = kv_request_new ("reader", NULL);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvStats) stats = NULL;
  guint32 blocks[4] = { 20, 21, 22, 23 };
  guint64 jobs[2];
  guint64 load;
  gint ref;

  kv_connector_add_request (f->connector, writer);
  jobs[0] = store_chunks (f, writer, 0, 4, 0);
  g_assert_cmpuint (kv_connector_get_n_transfers (f->connector, writer), ==, 1);
  take_expecting (f, jobs, 1);
  g_assert_cmpuint (kv_connector_get_n_transfers (f->connector, writer), ==, 0);
  kv_connector_end_step (f->connector, NULL, NULL);
  settle (f);
  for (guint i = 0; i < 4; i++)
    g_assert_nonnull (kv_delayed_tier_get_stored (f->tier, f->keys[i]));

  /* Four more chunks push the first four out of the 4-slot primary tier. */
  jobs[1] = store_chunks (f, writer, 4, 4, 4);
  take_expecting (f, jobs + 1, 1);
  g_assert_false (kv_connector_finish_request (f->connector, writer));
  settle (f);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), ==, KV_LOOKUP_RESULT_MISS);
  /* Overwrite the source blocks: what comes back must come from the tier. */
  for (guint b = 0; b < 4; b++)
    compute (f, 99, b);

  kv_connector_add_request (f->connector, reader);
  lookup = kv_connector_lookup (f->connector, reader, f->keys, 4, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_hits (lookup), ==, 4);
  g_assert_cmpuint (kv_prefix_lookup_get_n_ready (lookup), ==, 0);
  g_assert_cmpuint (kv_prefix_lookup_get_n_pending (lookup), ==, 4);
  g_assert_false (kv_prefix_lookup_is_complete (lookup));
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_TIER), ==, 4);
  g_clear_pointer (&lookup, kv_prefix_lookup_unref);

  /* Step 1 submits the promotions, which complete at once; the manager
   * consumes them in step 2; then they are ready. */
  kv_connector_end_step (f->connector, NULL, NULL);
  wait_wakeup (f);
  kv_connector_end_step (f->connector, NULL, NULL);
  lookup = kv_connector_lookup (f->connector, reader, f->keys, 4, 0, &error);
  g_assert_no_error (error);
  g_assert_true (kv_prefix_lookup_is_complete (lookup));
  g_assert_cmpuint (kv_prefix_lookup_get_n_ready (lookup), ==, 4);
  /* ready in the primary tier now, but found in the tier first */
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_TIER), ==, 4);
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_PRIMARY), ==, 0);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 3), ==, KV_CHUNK_SOURCE_TIER);

  load = kv_connector_load (f->connector, lookup, blocks, 4, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (load, !=, 0);
  /* pinned while the device reads them */
  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[0], &ref));
  g_assert_cmpint (ref, ==, 1);
  kv_connector_touch (f->connector, reader, f->keys, 4);
  g_assert_null (kv_connector_get_ready_requests (f->connector)[0]);
  take_expecting (f, &load, 1);
  g_assert_true (kv_connector_get_ready_requests (f->connector)[0] == reader);
  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[0], &ref));
  g_assert_cmpint (ref, ==, 0);
  for (guint i = 0; i < 4; i++)
    g_assert_true (holds (f, i, blocks[i]));
  g_assert_false (kv_connector_finish_request (f->connector, reader));
  settle (f);

  stats = kv_connector_get_stats (f->connector);
  g_assert_cmpfloat (stat (stats, "vllm:kv_offload_total_bytes", "GPU_to_CPU"), ==, 8.0 * 2 * BLOCK_BYTES);
  g_assert_cmpfloat (stat (stats, "vllm:kv_offload_total_bytes", "CPU_to_GPU"), ==, 4.0 * 2 * BLOCK_BYTES);
  g_assert_cmpfloat (stat (stats, "kvtier_connector_chunk_hits", "1:mem"), ==, 4);
  g_assert_cmpfloat (stat (stats, "kvtier_connector_chunk_hits", "0:primary"), ==, 0);
  g_assert_cmpfloat (stat (stats, "kvtier_connector_computed_chunks", NULL), ==, 0);
  g_assert_cmpfloat (stat (stats, "kvtier_connector_manager_lookups", NULL), ==, 8);
  g_assert_cmpfloat (stat (stats, "vllm:kv_offload_tiering_read_bytes", "1:mem"), ==, 4.0 * SLOT_SIZE);
  g_assert_cmpuint (kv_connector_get_n_manager_lookups (f->connector), ==, 8);
  g_assert_cmpfloat (kv_connector_get_manager_time (f->connector), >, 0);
  g_clear_object (&stats);
  /* return and reset */
  stats = kv_connector_get_stats (f->connector);
  g_assert_cmpfloat (stat (stats, "vllm:kv_offload_total_bytes", "GPU_to_CPU"), ==, 0);
}

/* Whether @key's primary slot carries the checksum of its bytes (and
 * fails the test when it carries a wrong one). */
static gboolean
carries_checksum (Fixture     *f,
                  const KvKey *key)
{
  guint32 slot = 0;
  guint64 carried = 0;

  g_assert_true (kv_primary_tier_get_chunk_id (f->primary, key, &slot));
  if (!kv_primary_tier_get_slot_checksum (f->primary, slot, &carried))
    return FALSE;
  g_assert_cmpuint (carried, ==,
                    XXH3_64bits (kv_host_buffer_peek_slot (f->buffer, slot), SLOT_SIZE));
  return TRUE;
}

/* The device's copy of a stored chunk leaves its checksum with the slot,
 * through the store's completion and the cascade; a slot taken over by
 * another chunk carries that chunk's; a promotion by a tier that does not
 * set one leaves the slot without. */
static void
test_store_carries_checksum (Fixture       *f,
                             gconstpointer  data)
{
  g_autoptr(KvRequest) writer = kv_request_new ("writer", NULL);
  g_autoptr(KvRequest) reader = kv_request_new ("reader", NULL);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  guint64 job;

  kv_connector_add_request (f->connector, writer);
  job = store_chunks (f, writer, 0, 4, 0);
  take_expecting (f, &job, 1);
  settle (f);
  for (guint i = 0; i < 4; i++)
    {
      g_assert_nonnull (kv_delayed_tier_get_stored (f->tier, f->keys[i]));
      g_assert_true (carries_checksum (f, f->keys[i]));
    }

  /* four more take the first four's slots */
  job = store_chunks (f, writer, 4, 4, 4);
  take_expecting (f, &job, 1);
  g_assert_false (kv_connector_finish_request (f->connector, writer));
  settle (f);
  for (guint i = 4; i < 8; i++)
    g_assert_true (carries_checksum (f, f->keys[i]));

  /* the first two come back from the tier into two of those slots */
  kv_connector_add_request (f->connector, reader);
  lookup = kv_connector_lookup (f->connector, reader, f->keys, 2, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_pending (lookup), ==, 2);
  kv_connector_end_step (f->connector, NULL, NULL);
  wait_wakeup (f);
  kv_connector_end_step (f->connector, NULL, NULL);
  for (guint i = 0; i < 2; i++)
    {
      g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[i]), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_false (carries_checksum (f, f->keys[i]));
    }
  g_assert_false (kv_connector_finish_request (f->connector, reader));
  settle (f);
}

/* One lookup says where each leading chunk is: device, primary, a tier,
 * pending; a RETRY stops it. */
static void
test_lookup_counts (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(KvRequest) writer = kv_request_new ("writer", NULL);
  g_autoptr(KvRequest) reader = kv_request_new ("reader", NULL);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) bytes = g_bytes_new_take (g_malloc0 (SLOT_SIZE), SLOT_SIZE);
  guint64 job;

  /* keys[2] ready in the primary tier, keys[3] only in the tier,
   * keys[5] unknown yet (RETRY). */
  kv_connector_add_request (f->connector, writer);
  job = store_chunks (f, writer, 2, 1, 0);
  take_expecting (f, &job, 1);
  kv_connector_finish_request (f->connector, writer);
  settle (f);
  kv_delayed_tier_put (f->tier, f->keys[3], bytes);
  kv_delayed_tier_set_lookup_result (f->tier, f->keys[5], KV_LOOKUP_RESULT_RETRY);

  kv_connector_add_request (f->connector, reader);
  lookup = kv_connector_lookup (f->connector, reader, f->keys, 5, 2, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_chunks (lookup), ==, 5);
  g_assert_cmpuint (kv_prefix_lookup_get_n_device (lookup), ==, 2);
  g_assert_cmpuint (kv_prefix_lookup_get_n_hits (lookup), ==, 2);
  g_assert_cmpuint (kv_prefix_lookup_get_n_ready (lookup), ==, 1);
  g_assert_cmpuint (kv_prefix_lookup_get_n_pending (lookup), ==, 1);
  g_assert_false (kv_prefix_lookup_get_retry (lookup));
  g_assert_cmpuint (kv_prefix_lookup_get_n_sources (lookup), ==, 3);
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_DEVICE), ==, 2);
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_PRIMARY), ==, 1);
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_TIER), ==, 1);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 0), ==, KV_CHUNK_SOURCE_DEVICE);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 2), ==, KV_CHUNK_SOURCE_PRIMARY);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 3), ==, KV_CHUNK_SOURCE_TIER);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 4), ==, -1);
  g_assert_false (kv_prefix_lookup_is_complete (lookup));
  /* keys[4] missed: keys[5] was never asked */
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "lookup"), >, 0);
  g_clear_pointer (&lookup, kv_prefix_lookup_unref);

  /* Without keys[4] in the prompt, the RETRY of keys[5] stops the hits. */
  {
    KvKey *prompt[] = { f->keys[2], f->keys[3], f->keys[5], f->keys[6] };

    lookup = kv_connector_lookup (f->connector, reader, prompt, 4, 0, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (kv_prefix_lookup_get_n_hits (lookup), ==, 2);
    g_assert_true (kv_prefix_lookup_get_retry (lookup));
    g_assert_false (kv_prefix_lookup_is_complete (lookup));
    g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 1), ==, KV_CHUNK_SOURCE_TIER);
  }
  kv_connector_finish_request (f->connector, reader);
  settle (f);
}

/* The source of a promoted chunk is the tier the manager promoted it
 * from, which is asked once: with two tiers holding the chunk, the first;
 * when the first one's load fails, the second, whose bytes land on the
 * device. */
static void
test_source_is_promoting_tier (Fixture       *f,
                               gconstpointer  data)
{
  g_autoptr(KvRequest) writer = kv_request_new ("writer", NULL);
  g_autoptr(KvRequest) reader = kv_request_new ("reader", NULL);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  guint32 block = 20;
  guint64 jobs[2];
  guint64 load;

  /* chunks 0-7 cascade into both tiers; 4-7 push 0-3 out of the primary
   * tier */
  kv_connector_add_request (f->connector, writer);
  jobs[0] = store_chunks (f, writer, 0, 4, 0);
  take_expecting (f, jobs, 1);
  settle (f);
  jobs[1] = store_chunks (f, writer, 4, 4, 4);
  take_expecting (f, jobs + 1, 1);
  g_assert_false (kv_connector_finish_request (f->connector, writer));
  settle (f);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_nonnull (kv_delayed_tier_get_stored (f->tier2, f->keys[0]));
  /* the second tier holds chunk 1's bytes under key 0: the bytes that
   * land tell which tier served the load */
  kv_delayed_tier_put (f->tier2, f->keys[0], kv_delayed_tier_get_stored (f->tier, f->keys[1]));
  kv_delayed_tier_set_synchronous (f->tier, FALSE);
  kv_delayed_tier_clear_calls (f->tier);
  kv_delayed_tier_clear_calls (f->tier2);

  /* both hold it: the first tier promotes, and is asked once */
  kv_connector_add_request (f->connector, reader);
  lookup = kv_connector_lookup (f->connector, reader, f->keys, 1, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_pending (lookup), ==, 1);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 0), ==, KV_CHUNK_SOURCE_TIER);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "lookup"), ==, 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "lookup"), ==, 0);
  g_clear_pointer (&lookup, kv_prefix_lookup_unref);

  /* its load fails */
  kv_connector_end_step (f->connector, NULL, NULL);
  g_assert_cmpuint (kv_delayed_tier_get_n_pending (f->tier), ==, 1);
  kv_delayed_tier_complete_all (f->tier, FALSE);
  kv_connector_end_step (f->connector, NULL, NULL);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);

  /* the request's next lookup promotes from the second tier */
  kv_delayed_tier_clear_calls (f->tier2);
  lookup = kv_connector_lookup (f->connector, reader, f->keys, 1, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_pending (lookup), ==, 1);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 0), ==, KV_CHUNK_SOURCE_TIER + 1);
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier2, "lookup"), ==, 1);
  g_clear_pointer (&lookup, kv_prefix_lookup_unref);
  settle (f);

  /* landed: ready, still from the second tier, with its bytes */
  lookup = kv_connector_lookup (f->connector, reader, f->keys, 1, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_ready (lookup), ==, 1);
  g_assert_cmpint (kv_prefix_lookup_get_source (lookup, 0), ==, KV_CHUNK_SOURCE_TIER + 1);
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_TIER + 1), ==, 1);
  g_assert_cmpuint (kv_prefix_lookup_get_n_from (lookup, KV_CHUNK_SOURCE_TIER), ==, 0);
  load = kv_connector_load (f->connector, lookup, &block, 1, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (load, !=, 0);
  take_expecting (f, &load, 1);
  g_assert_true (holds (f, 1, block));
  g_assert_false (kv_connector_finish_request (f->connector, reader));
  settle (f);
}

/* The descriptor is readable exactly while something finished and was
 * not consumed. */
static void
test_wakeup_fd (Fixture       *f,
                gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(GError) error = NULL;
  int fd = kv_connector_get_wakeup_fd (f->connector);
  guint64 job;

  g_assert_cmpint (fd, >=, 0);
  g_assert_false (fd_readable (fd));
  kv_connector_add_request (f->connector, request);
  job = store_chunks (f, request, 0, 2, 0);
  g_assert_true (kv_connector_wait (f->connector, &error));
  g_assert_no_error (error);
  g_assert_true (fd_readable (fd));
  take_expecting (f, &job, 1);
  if (f->tier == NULL)
    {
      g_assert_false (fd_readable (fd));
    }
  else
    {
      /* The store cascaded to the tier, which completed at once, after
       * this step's manager had polled its tiers (prepare_store did): the
       * result waits for the next step (the reference's poll gate), and
       * the descriptor says so until that step consumed it. */
      g_assert_true (fd_readable (fd));
      kv_connector_end_step (f->connector, NULL, NULL);
      g_assert_true (fd_readable (fd));
      kv_connector_end_step (f->connector, NULL, NULL);
      g_assert_false (fd_readable (fd));
    }
  kv_connector_finish_request (f->connector, request);
  settle (f);
  g_assert_false (fd_readable (fd));
}

static gboolean
on_wakeup (gpointer user_data)
{
  guint *n = user_data;

  (*n)++;
  return G_SOURCE_CONTINUE;
}

static void
test_source (Fixture       *f,
             gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(GMainContext) context = g_main_context_new ();
  GSource *source = kv_connector_create_source (f->connector);
  KvJobResult **results;
  guint n = 0;

  g_source_set_callback (source, on_wakeup, &n, NULL);
  g_source_attach (source, context);
  g_assert_false (g_main_context_iteration (context, FALSE));
  kv_connector_add_request (f->connector, request);
  store_chunks (f, request, 0, 1, 0);
  while (n == 0)
    g_main_context_iteration (context, TRUE);
  results = kv_connector_take_finished (f->connector);
  g_assert_nonnull (results[0]);
  for (KvJobResult **r = results; *r != NULL; r++)
    kv_job_result_unref (*r);
  g_free (results);
  g_assert_false (g_main_context_iteration (context, FALSE));
  g_source_destroy (source);
  g_source_unref (source);
  kv_connector_finish_request (f->connector, request);
  settle (f);
}

/* Errors release every pin and slot they took. */
static void
test_error_paths (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvRequest) stranger = kv_request_new ("stranger", NULL);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  guint32 bad[2] = { N_BLOCKS + 5, 0 };
  guint32 good[2] = { 8, 9 };
  guint64 job;
  gint ref;

  /* unknown request */
  lookup = kv_connector_lookup (f->connector, stranger, f->keys, 2, 0, &error);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND);
  g_assert_null (lookup);
  g_clear_error (&error);

  kv_connector_add_request (f->connector, request);
  lookup = kv_connector_lookup (f->connector, request, f->keys, 2, 3, &error);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  /* a device store that cannot start gives its slots back */
  g_assert_cmpuint (kv_connector_store (f->connector, request, f->keys, 2, bad, 2, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, 0);
  g_assert_cmpint (kv_primary_tier_lookup (f->primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_connector_get_n_transfers (f->connector, request), ==, 0);

  /* blocks that do not match the chunks */
  g_assert_cmpuint (kv_connector_store (f->connector, request, f->keys, 2, good, 1, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  /* a device load that cannot start unpins */
  job = store_chunks (f, request, 0, 2, 0);
  take_expecting (f, &job, 1);
  kv_connector_end_step (f->connector, NULL, NULL);
  lookup = kv_connector_lookup (f->connector, request, f->keys, 2, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_ready (lookup), ==, 2);
  g_assert_cmpuint (kv_connector_load (f->connector, lookup, bad, 2, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  for (guint i = 0; i < 2; i++)
    {
      g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[i], &ref));
      g_assert_cmpint (ref, ==, 0);
    }
  /* the lookup was not used: it still loads */
  job = kv_connector_load (f->connector, lookup, good, 2, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (job, !=, 0);
  /* but only once */
  g_assert_cmpuint (kv_connector_load (f->connector, lookup, good, 2, &error), ==, 0);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  take_expecting (f, &job, 1);
  g_assert_true (holds (f, 0, 8) && holds (f, 1, 9));

  /* no room: every slot pinned by a load in flight */
  {
    g_autoptr(KvPrefixLookup) pin = NULL;
    guint64 more = store_chunks (f, request, 2, 2, 2);
    guint32 four[4] = { 10, 11, 12, 13 };

    take_expecting (f, &more, 1);
    kv_connector_end_step (f->connector, NULL, NULL);
    settle (f);
    pin = kv_connector_lookup (f->connector, request, f->keys, 4, 0, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (kv_prefix_lookup_get_n_ready (pin), ==, 4);
    more = kv_connector_load (f->connector, pin, four, 4, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (kv_connector_store (f->connector, request, f->keys + 6, 1, good, 1, &error), ==, 0);
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE);
    g_clear_error (&error);
    take_expecting (f, &more, 1);
  }
  g_assert_cmpuint (kv_primary_tier_get_n_evictable (f->primary), ==, 4);
  kv_connector_finish_request (f->connector, request);
  settle (f);
  {
    g_autoptr(KvStats) stats = kv_connector_get_stats (f->connector);

    g_assert_cmpfloat (stat (stats, "kvtier_connector_refused_store_chunks", NULL), ==, 1);
  }
}

/* A prompt that names a chunk twice ([7, 7]) stores it once and loads it
 * into both blocks. */
static void
test_repeated_keys (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  KvKey *prompt[] = { f->keys[7], f->keys[7] };
  guint32 blocks[2] = { 3, 4 };
  guint32 into[2] = { 10, 11 };
  guint64 job;
  gint ref;

  kv_connector_add_request (f->connector, request);
  lookup = kv_connector_lookup (f->connector, request, prompt, 2, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_hits (lookup), ==, 0);
  g_assert_cmpuint (kv_connector_load (f->connector, lookup, NULL, 0, &error), ==, 0);
  g_assert_no_error (error);
  compute (f, 7, 3);
  compute (f, 7, 4);
  job = kv_connector_store (f->connector, request, prompt, 2, blocks, 2, &error);
  g_assert_no_error (error);
  take_expecting (f, &job, 1);
  g_assert_cmpuint (kv_primary_tier_get_n_stored (f->primary), ==, 1);
  kv_connector_end_step (f->connector, NULL, NULL);
  g_clear_pointer (&lookup, kv_prefix_lookup_unref);

  lookup = kv_connector_lookup (f->connector, request, prompt, 2, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (kv_prefix_lookup_get_n_ready (lookup), ==, 2);
  job = kv_connector_load (f->connector, lookup, into, 2, &error);
  g_assert_no_error (error);
  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[7], &ref));
  g_assert_cmpint (ref, ==, 2);
  take_expecting (f, &job, 1);
  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[7], &ref));
  g_assert_cmpint (ref, ==, 0);
  g_assert_true (holds (f, 7, 10) && holds (f, 7, 11));
  kv_connector_finish_request (f->connector, request);
  settle (f);
}

/* A request finished while its store is on the device: the engine keeps
 * its blocks; the manager completes the store, cascades it, and only then
 * tells the tier the request is finished. */
static void
test_finish_in_flight (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autofree char *calls = NULL;
  guint64 job;

  kv_connector_add_request (f->connector, request);
  job = store_chunks (f, request, 0, 2, 0);
  g_assert_true (kv_connector_finish_request (f->connector, request));
  g_assert_cmpuint (kv_connector_get_n_transfers (f->connector, request), ==, 1);
  /* finishing twice is a caller bug: the manager hears of it once */
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*was finished already*");
  g_assert_true (kv_connector_finish_request (f->connector, request));
  g_test_assert_expected_messages ();
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier, "on_request_finished"), ==, 0);
  take_expecting (f, &job, 1);
  g_assert_cmpuint (kv_connector_get_n_transfers (f->connector, request), ==, 0);
  /* its blocks may be freed now */
  g_assert_true (kv_connector_get_ready_requests (f->connector)[0] == request);
  g_assert_null (kv_connector_get_ready_requests (f->connector)[1]);
  calls = kv_delayed_tier_dup_calls (f->tier, NULL);
  g_assert_nonnull (strstr (calls, "submit_store"));
  g_assert_nonnull (strstr (calls, "on_request_finished"));
  g_assert_true (strstr (calls, "submit_store") < strstr (calls, "on_request_finished"));
  settle (f);
}

/* Shutdown with transfers in flight applies them: no pin is left. */
static void
test_shutdown_in_flight (Fixture       *f,
                         gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(GError) error = NULL;

  kv_connector_add_request (f->connector, request);
  store_chunks (f, request, 0, 3, 0);
  g_assert_true (kv_connector_shutdown (f->connector, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (f->primary), ==, 0);
  g_assert_true (kv_connector_shutdown (f->connector, &error));
}

static void
test_wrong_buffer (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) a = kv_host_buffer_new (2, SLOT_SIZE, &error);
  g_autoptr(KvHostBuffer) b = kv_host_buffer_new (2, SLOT_SIZE, &error);
  g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (a, NULL, FALSE);
  g_autoptr(KvTieringManager) manager = kv_tiering_manager_new (primary);
  g_autoptr(KvHostDevice) device = kv_host_device_new (b, 4, BLOCK_BYTES, N_LAYERS, 1, &error);
  g_autoptr(KvConnector) connector = NULL;

  g_assert_no_error (error);
  connector = kv_connector_new (manager, KV_DEVICE (device), &error);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_null (connector);
  kv_device_shutdown (KV_DEVICE (device), NULL);
  kv_tiering_manager_shutdown (manager, NULL);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

#define ADD(path, setup, func) \
  g_test_add ("/kvtier/connector/" path, Fixture, setup, fixture_set_up, func, fixture_tear_down)
  ADD ("round-trip", &with_tier, test_round_trip);
  ADD ("store-carries-checksum", &with_tier, test_store_carries_checksum);
  ADD ("lookup-counts", &three_slots, test_lookup_counts);
  ADD ("source-is-promoting-tier", &two_tiers, test_source_is_promoting_tier);
  ADD ("wakeup-fd", &with_tier, test_wakeup_fd);
  ADD ("wakeup-fd-no-tier", &no_tier, test_wakeup_fd);
  ADD ("source", &no_tier, test_source);
  ADD ("error-paths", &with_tier, test_error_paths);
  ADD ("repeated-keys", &with_tier, test_repeated_keys);
  ADD ("finish-in-flight", &with_tier, test_finish_in_flight);
  ADD ("shutdown-in-flight", &with_tier, test_shutdown_in_flight);
#undef ADD
  g_test_add_func ("/kvtier/connector/wrong-buffer", test_wrong_buffer);

  return g_test_run ();
}
