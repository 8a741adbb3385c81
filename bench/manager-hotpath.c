/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <malloc.h>

#include <kvtier.h>

/* The owner-thread cost of the manager's three hot paths, per key:
 *
 *   primary-hit lookup    kv_tiering_manager_lookup() of a chunk in the primary tier
 *   secondary-hit lookup  the same for a chunk only a secondary tier holds
 *                         (allocates a primary slot and queues the promotion)
 *   store cycle           prepare_store → complete_store → cascade → result processed
 *   promotion round trip  a secondary-hit lookup → the promotion job submitted at
 *                         the step's end → its completion consumed → the lookup
 *                         that answers HIT
 *
 * Each line also shows its ratio to the ceiling measured in the same run: a
 * bare GHashTable probe of the same keys. The secondary tier here
 * is an index of keys that completes every job at once on the owner thread,
 * so the numbers are the manager's own cost, not a tier's.
 *
 * Each phase's per-request work is a function of its own that is never
 * inlined, so an instruction count can be taken per phase, repeatably even
 * on a loaded machine:
 *
 *   valgrind --tool=callgrind --toggle-collect=bench_primary_hits \
 *     bench/manager-hotpath 65536
 *
 * (bench_store_cycle, bench_primary_hits, bench_secondary_hits,
 * bench_promoted_hits, and bench_ceiling for the bare probe; each
 * phase function also runs with metrics off, so divide by twice the key
 * count the run prints, or pass --metrics=on / --metrics=off).
 *
 * Usage: manager-hotpath [N_KEYS] [--metrics=on|off|both]
 * (default 1048576 keys, both) */

#define USAGE \
  "Usage: %s [N_KEYS] [--metrics=on|off|both]\n" \
  "\n" \
  "Measures the owner-thread cost per key of KvTieringManager's hot paths\n" \
  "(primary-hit lookup, secondary-hit lookup, store cycle, promotion round\n" \
  "trip) next to a bare hash probe measured in the same run.\n" \
  "\n" \
  "  N_KEYS          keys stored and looked up (default 1048576, at least 64)\n" \
  "  --metrics=on    only with vLLM's metrics recorded (the manager's default)\n" \
  "  --metrics=off   only without metrics\n" \
  "  --metrics=both  both, metrics on first (the default)\n" \
  "  -h, --help      print this help and exit\n"


#define SLOT_SIZE 4096
#define N_SLOTS 65536
#define BATCH 64

#define KV_TYPE_INDEX_TIER (kv_index_tier_get_type ())
G_DECLARE_FINAL_TYPE (KvIndexTier, kv_index_tier, KV, INDEX_TIER, KvSecondaryTier)

/* The tier's index is an open-addressing set sized up front for the keys
 * the run stores (index_tier_reserve()), so that storing never rehashes:
 * the numbers are meant to be the manager's cost, not the growth of a test
 * double's table. */
struct _KvIndexTier
{
  KvSecondaryTier parent_instance;
  KvKey **slots;
  guint mask;
  guint n_keys;
  /* time spent indexing stored keys, shown apart from the manager's own */
  gint64 store_us;
};

G_DEFINE_FINAL_TYPE (KvIndexTier, kv_index_tier, KV_TYPE_SECONDARY_TIER)

/* The slot holding @key, or the empty slot where it would go. */
static guint
index_tier_find (KvIndexTier *self,
                 const KvKey *key)
{
  guint i = kv_key_hash (key) & self->mask;

  while (self->slots[i] != NULL && !kv_key_equal (self->slots[i], key))
    i = (i + 1) & self->mask;
  return i;
}

/* Makes room for @n_keys keys in all at a load of at most one half. */
static void
index_tier_reserve (KvIndexTier *self,
                    guint        n_keys)
{
  KvKey **old = self->slots;
  guint old_size = self->mask + 1;
  guint size = 64;

  while (size / 2 < n_keys)
    size *= 2;
  if (old != NULL && size <= old_size)
    return;

  self->slots = g_new0 (KvKey *, size);
  self->mask = size - 1;
  for (guint i = 0; old != NULL && i < old_size; i++)
    if (old[i] != NULL)
      self->slots[index_tier_find (self, old[i])] = old[i];
  g_free (old);
}

static void
index_tier_add (KvIndexTier *self,
                KvKey       *key)
{
  guint i;

  if ((self->n_keys + 1) * 2 > self->mask + 1)
    index_tier_reserve (self, (self->n_keys + 1) * 2);
  i = index_tier_find (self, key);
  if (self->slots[i] == NULL)
    {
      self->slots[i] = kv_key_ref (key);
      self->n_keys++;
    }
}

static KvLookupResult
index_tier_lookup (KvSecondaryTier *tier,
                   KvKey           *key,
                   KvRequest       *request)
{
  KvIndexTier *self = KV_INDEX_TIER (tier);

  return self->slots[index_tier_find (self, key)] != NULL ? KV_LOOKUP_RESULT_HIT
                                                          : KV_LOOKUP_RESULT_MISS;
}

static gboolean
index_tier_submit (KvSecondaryTier  *tier,
                   KvTransferJob    *job,
                   GError          **error)
{
  KvIndexTier *self = KV_INDEX_TIER (tier);
  g_autoptr(KvJobResult) result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);

  if (!kv_transfer_job_is_promotion (job))
    {
      gint64 start = g_get_monotonic_time ();

      for (guint i = 0; i < kv_transfer_job_get_n_keys (job); i++)
        index_tier_add (self, kv_transfer_job_get_key (job, i));
      self->store_us += g_get_monotonic_time () - start;
    }
  kv_secondary_tier_complete_job (tier, result);
  return TRUE;
}

static KvOffloadPolicy
index_tier_on_new_request (KvSecondaryTier *tier,
                           KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

static gboolean
index_tier_drain (KvSecondaryTier  *tier,
                  GError          **error)
{
  return TRUE;
}

static void
index_tier_finalize (GObject *object)
{
  KvIndexTier *self = KV_INDEX_TIER (object);

  for (guint i = 0; i <= self->mask; i++)
    g_clear_pointer (&self->slots[i], kv_key_unref);
  g_free (self->slots);
  G_OBJECT_CLASS (kv_index_tier_parent_class)->finalize (object);
}

static void
kv_index_tier_class_init (KvIndexTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = index_tier_finalize;
  tier_class->medium = KV_MEDIUM_CPU;
  tier_class->lookup = index_tier_lookup;
  tier_class->submit_store = index_tier_submit;
  tier_class->submit_load = index_tier_submit;
  tier_class->on_new_request = index_tier_on_new_request;
  tier_class->drain_jobs = index_tier_drain;
}

static void
kv_index_tier_init (KvIndexTier *self)
{
  index_tier_reserve (self, 0);
}

static KvKey *
make_key (guint64 i)
{
  guint8 hash[32];
  guint64 x = i * 0x9E3779B97F4A7C15ull;

  for (guint b = 0; b < sizeof hash; b++)
    {
      x ^= x >> 29;
      x *= 0xBF58476D1CE4E5B9ull;
      hash[b] = (guint8) (x >> 56);
    }
  return kv_key_new (hash, sizeof hash, 0);
}

static KvRequest *
new_request (guint *counter)
{
  char id[32];

  g_snprintf (id, sizeof id, "req-%u", (*counter)++);
  return kv_request_new (id, NULL);
}

/* Ends a step in which @scheduled (if any) got its device blocks. */
static void
end_step (KvTieringManager *manager,
          KvRequest        *scheduled)
{
  const char *ids[] = { scheduled != NULL ? kv_request_get_id (scheduled) : NULL, NULL };
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (ids, NULL);

  kv_tiering_manager_on_schedule_end (manager, end);
}

/* One request's store cycle: its keys are stored, cascaded to the tier
 * (which completes at once), and the result is processed at the next step's
 * first entry point. */
G_GNUC_NO_INLINE static void
bench_store_cycle (KvTieringManager *manager,
                   KvKey * const    *keys,
                   guint             n,
                   guint            *req_counter)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvRequest) req = new_request (req_counter);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;

  kv_tiering_manager_on_new_request (manager, req);
  prepared = kv_tiering_manager_prepare_store (manager, keys, n, req, &error);
  if (prepared == NULL)
    g_error ("prepare_store: %s", error->message);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n);
  kv_tiering_manager_complete_store (manager, to_store, n, req, TRUE);
  end_step (manager, req);
  kv_tiering_manager_on_request_finished (manager, req);
}

G_GNUC_NO_INLINE static guint
bench_primary_hits (KvTieringManager *manager,
                    KvKey * const    *keys,
                    guint             n,
                    KvRequest        *req)
{
  guint hits = 0;

  for (guint j = 0; j < n; j++)
    hits += kv_tiering_manager_lookup (manager, keys[j], req) == KV_LOOKUP_RESULT_HIT;
  return hits;
}

/* The same request's lookups once its promotions landed: HIT each.
 * Returns how many did not (it must not fold with bench_primary_hits, or
 * an instruction count of one phase would include the other). */
G_GNUC_NO_INLINE static guint
bench_promoted_hits (KvTieringManager *manager,
                     KvKey * const    *keys,
                     guint             n,
                     KvRequest        *req)
{
  guint not_landed = 0;

  for (guint j = 0; j < n; j++)
    not_landed += kv_tiering_manager_lookup (manager, keys[j], req) != KV_LOOKUP_RESULT_HIT;
  return not_landed;
}

G_GNUC_NO_INLINE static guint
bench_secondary_hits (KvTieringManager *manager,
                      KvKey * const    *keys,
                      guint             n,
                      KvRequest        *req)
{
  guint promoted = 0;

  for (guint j = 0; j < n; j++)
    promoted += kv_tiering_manager_lookup (manager, keys[j], req) == KV_LOOKUP_RESULT_HIT_PENDING;
  return promoted;
}

/* The ceiling: a bare probe of a GHashTable holding the resident keys. */
G_GNUC_NO_INLINE static guint
bench_ceiling (GHashTable    *table,
               KvKey * const *keys,
               guint          n)
{
  guint found = 0;

  for (guint j = 0; j < n; j++)
    found += g_hash_table_contains (table, keys[j]);
  return found;
}

static double
ns_per_key (gint64 start_us,
            gint64 end_us,
            guint  n)
{
  return (double) (end_us - start_us) * 1000.0 / (double) n;
}

static void
run (guint    n_keys,
     gboolean enable_metrics)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = NULL;
  g_autoptr(KvPrimaryTier) primary = NULL;
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(KvIndexTier) tier = NULL;
  g_autoptr(GHashTable) ceiling = NULL;
  KvKey **keys;
  guint resident = MIN (n_keys, N_SLOTS / 2);
  guint hits = 0;
  volatile guint sink = 0;
  guint req_counter = 0;
  gint64 t0, t1;
  double primary_ns, ceiling_ns, secondary_ns, store_ns, tier_store_ns, round_trip_ns;
  double heap_per_key, warm_heap_per_key;

  if (n_keys < BATCH)
    n_keys = BATCH;

  buffer = kv_host_buffer_new (N_SLOTS, SLOT_SIZE, &error);
  g_assert_no_error (error);
  primary = kv_primary_tier_new (buffer, NULL, FALSE);
  manager = g_object_new (KV_TYPE_TIERING_MANAGER, "primary", primary,
                          "enable-metrics", enable_metrics, NULL);
  tier = g_object_new (KV_TYPE_INDEX_TIER, "primary", buffer, "tier-type", "index", NULL);
  index_tier_reserve (tier, n_keys);
  if (!kv_tiering_manager_add_tier (manager, KV_SECONDARY_TIER (tier), &error))
    g_error ("%s", error->message);

  keys = g_new (KvKey *, n_keys);
  for (guint i = 0; i < n_keys; i++)
    keys[i] = make_key (i);

  /* ---- store cycle: every key stored and cascaded once ---- */
  t0 = g_get_monotonic_time ();
  for (guint i = 0; i < n_keys; i += BATCH)
    bench_store_cycle (manager, &keys[i], MIN (BATCH, n_keys - i), &req_counter);
  end_step (manager, NULL);
  t1 = g_get_monotonic_time ();
  store_ns = ns_per_key (t0, t1, n_keys);
  tier_store_ns = (double) tier->store_us * 1000.0 / n_keys;
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (manager), ==, 0);

  /* ---- primary hits: the last stored keys are resident; each request
   * looks up a prefix of BATCH chunks, as an engine's scheduler does ---- */
  ceiling = g_hash_table_new (kv_key_hash, kv_key_equal);
  for (guint i = n_keys - resident; i < n_keys; i++)
    g_hash_table_add (ceiling, keys[i]);

  {
    gint64 spent = 0;
    gssize heap = 0, warm_heap = 0;
    guint warm_hits = 0;

    for (guint r = 0; r < n_keys; r += resident)
      for (guint i = n_keys - resident; i + BATCH <= n_keys; i += BATCH)
        {
          g_autoptr(KvRequest) req = new_request (&req_counter);
          struct mallinfo2 before, after;
          gint64 s;

          kv_tiering_manager_on_new_request (manager, req);
          before = mallinfo2 ();
          s = g_get_monotonic_time ();
          hits += bench_primary_hits (manager, &keys[i], BATCH, req);
          spent += g_get_monotonic_time () - s;
          after = mallinfo2 ();
          heap += (gssize) after.uordblks - (gssize) before.uordblks;
          /* after a first pass over the resident keys: the steady state */
          if (r > 0)
            {
              warm_heap += (gssize) after.uordblks - (gssize) before.uordblks;
              warm_hits += BATCH;
            }
          end_step (manager, req);
          kv_tiering_manager_on_request_finished (manager, req);
        }
    primary_ns = (double) spent * 1000.0 / hits;
    heap_per_key = (double) heap / hits;
    warm_heap_per_key = warm_hits > 0 ? (double) warm_heap / warm_hits : 0.0;
  }
  g_assert_cmpuint (hits, >=, n_keys / 2);

  t0 = g_get_monotonic_time ();
  for (guint r = 0; r < n_keys; r += resident)
    sink += bench_ceiling (ceiling, &keys[n_keys - resident], resident);
  t1 = g_get_monotonic_time ();
  ceiling_ns = ns_per_key (t0, t1, sink);

  /* ---- secondary hits: evicted keys promote from the tier; the round
   * trip goes on until the same request's lookups answer HIT ---- */
  {
    guint n_promoted = 0, n_landed = 0;
    gint64 spent = 0, round_trip = 0;

    for (guint i = 0; i + BATCH <= n_keys - resident; i += BATCH)
      {
        g_autoptr(KvRequest) req = new_request (&req_counter);
        gint64 s, looked_up;
        guint promoted;

        kv_tiering_manager_on_new_request (manager, req);
        s = g_get_monotonic_time ();
        promoted = bench_secondary_hits (manager, &keys[i], BATCH, req);
        looked_up = g_get_monotonic_time ();
        spent += looked_up - s;
        n_promoted += promoted;
        /* submit the loads (the tier completes them at once), apply them at
         * the next step's first entry point, and look the chunks up again */
        end_step (manager, NULL);
        if (promoted == BATCH)
          {
            n_landed += BATCH - bench_promoted_hits (manager, &keys[i], BATCH, req);
            round_trip += g_get_monotonic_time () - s;
          }
        end_step (manager, req);
        kv_tiering_manager_on_request_finished (manager, req);
      }
    g_assert_cmpuint (n_landed, <=, n_promoted);
    secondary_ns = n_promoted > 0 ? (double) spent * 1000.0 / n_promoted : 0.0;
    round_trip_ns = n_landed > 0 ? (double) round_trip * 1000.0 / n_landed : 0.0;
    g_print ("\n[metrics %s] keys: %u stored, %u primary-hit lookups, %u promotions; "
             "%u slots of %u bytes; requests of %u chunks\n",
             enable_metrics ? "on" : "off", n_keys, hits, n_promoted, N_SLOTS, SLOT_SIZE, BATCH);
  }

  g_print ("primary-hit lookup: %.1f ns/key (ceiling: bare hash probe %.1f ns/key, ratio %.2fx; "
           "heap growth %.2f bytes/key, %.2f after the first pass over the keys)\n",
           primary_ns, ceiling_ns, ceiling_ns > 0 ? primary_ns / ceiling_ns : 0.0, heap_per_key,
           warm_heap_per_key);
  g_print ("secondary-hit lookup: %.1f ns/key (ratio %.2fx the bare hash probe)\n",
           secondary_ns, ceiling_ns > 0 ? secondary_ns / ceiling_ns : 0.0);
  g_print ("store cycle: %.1f ns/key (ratio %.2fx the bare hash probe; requests of %u keys, "
           "one cascade job per request; of which %.1f ns/key the tier indexing the keys it "
           "stores)\n",
           store_ns, ceiling_ns > 0 ? store_ns / ceiling_ns : 0.0, BATCH, tier_store_ns);
  g_print ("promotion round trip: %.1f ns/key (ratio %.2fx the bare hash probe; lookup, "
           "promotion job, completion, lookup answering HIT)\n",
           round_trip_ns, ceiling_ns > 0 ? round_trip_ns / ceiling_ns : 0.0);

  if (!kv_tiering_manager_shutdown (manager, &error))
    g_error ("%s", error->message);
  for (guint i = 0; i < n_keys; i++)
    kv_key_unref (keys[i]);
  g_free (keys);
  g_assert_cmpuint (sink, >, 0);
}

int
main (int   argc,
      char *argv[])
{
  guint n_keys = 1048576;
  gboolean metrics_on = TRUE, metrics_off = TRUE;

  for (int i = 1; i < argc; i++)
    {
      if (g_str_equal (argv[i], "--metrics=on"))
        metrics_off = FALSE;
      else if (g_str_equal (argv[i], "--metrics=off"))
        metrics_on = FALSE;
      else if (g_str_equal (argv[i], "--metrics=both"))
        metrics_on = metrics_off = TRUE;
      else if (g_str_equal (argv[i], "--help") || g_str_equal (argv[i], "-h"))
        {
          g_print (USAGE, argv[0]);
          return 0;
        }
      else if (g_ascii_isdigit (argv[i][0]))
        n_keys = (guint) g_ascii_strtoull (argv[i], NULL, 10);
      else
        {
          g_printerr ("%s: unknown argument '%s'\n\n" USAGE, argv[0], argv[i], argv[0]);
          return 2;
        }
    }

  g_print ("manager-hotpath: owner-thread cost per key of KvTieringManager, %u keys\n", n_keys);
  /* vLLM records these metrics whenever stats are logged: the default */
  if (metrics_on)
    run (n_keys, TRUE);
  if (metrics_off)
    run (n_keys, FALSE);
  return 0;
}
