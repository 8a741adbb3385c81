/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract-factory.h"
#include "test-manager-stack.h"

/*
 * The tier contract (doc/writing-a-tier.md, KvSecondaryTier), checked the
 * same way against every tier: each case below runs against the tier of
 * the factory named by `--tier NAME` (contract-factories.c; meson runs
 * the program once per tier, so a failure names the tier).
 *
 * The cases, written once:
 *  - round-trip, round-trip-manager: chunks come back byte-exact, straight
 *    from the tier and through a manager (cascade, eviction, promotion);
 *  - partial-load: a load of which some keys cannot land reports every key
 *    that landed (and only those) in the job's key order, success only
 *    when all landed, no keys when none did;
 *  - failed-load-forgotten: keys a load failed on answer MISS afterwards,
 *    to every request that had looked them up (vLLM's mark_miss);
 *  - exactly-once, exactly-once-manager: every job is reported once;
 *  - deadline, late-answer: a job past its deadline is reported failed
 *    once, the tier's late answer is dropped and counted, and the slots
 *    it may still write stay out of use until it comes;
 *  - cancel: a job's cancellable is cancelled at its deadline, and a store
 *    failed then is never published (or, by a tier that cannot call a
 *    store back once sent and says so, only with the bytes it started
 *    with: the manager keeps its slots pinned until the tier answers);
 *  - breaker: failures open the breaker (fast MISS, jobs failed without
 *    reaching the tier), and it closes once the storage is back;
 *  - unpolled-drain, unpolled-reset-cache, unpolled-shutdown: jobs the
 *    tier finished but nobody collected yet are reported with the tier's
 *    own result, once, and drain_jobs / reset_cache / shutdown return;
 *  - every manager case ends with nothing pinned, held or write-pending.
 *
 * Time is a manual clock: deadlines pass when a case moves it, never
 * because the machine is slow. A case that waits for something real (a
 * tier's I/O) waits at most WAIT_S seconds and fails saying what it
 * waited for; a call that must return (drain, reset, shutdown) is watched
 * by a thread that fails the test if it does not within WATCHDOG_S.
 *
 * The deadline is long in real time too: tiers bound waits of their own
 * by deadline-ms on the monotonic clock (the redis tier closes a
 * connection that has not answered for twice the deadline and answers
 * MISS while it reconnects; the redis and s3 tiers wait that long for a
 * lookup's answer). A case's stall must stay well inside them however
 * slow the machine, or they fire and the case sees their effect instead
 * of the one it checks (CI, 2 busy cores: a 1 s deadline let the redis
 * tier close its connection during late-answer's stall, and the chunk
 * the case then promoted was a MISS).
 */

#define N_SLOTS 8
#define DEADLINE_MS 60000
#define WAIT_S 20
#define WATCHDOG_S 60
/* chunks no case ever stores (and no node is seeded with) */
#define ABSENT 1000

static const ContractFactory *factory;

static const ContractFactory *
find_factory (const char *name)
{
  for (guint i = 0; i < contract_n_factories; i++)
    if (g_str_equal (contract_factories[i].name, name))
      return &contract_factories[i];
  return NULL;
}

/* ---- fixture ------------------------------------------------------------ */

typedef struct
{
  gpointer          state;      /* the factory's */
  KvClock          *clock;      /* manual */
  /* a tier on its own (bare), or under a manager (stack) */
  KvHostBuffer     *buffer;
  KvSecondaryTier  *tier;
  TestStack         stack;
  gboolean          managed;
  GHashTable       *reported;   /* job id → ::job-finished emissions */
  GHashTable       *succeeded;  /* job id → TRUE if it reported success */
  guint64           next_id;
  guint             max_index;  /* chunks [0, max_index) were touched */
} Fixture;

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  f->clock = kv_clock_new_manual (1000000);
  f->reported = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  f->succeeded = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  f->next_id = 1;
}

static KvSecondaryTier *
make_tier (KvHostBuffer *buffer,
           gpointer      data)
{
  Fixture *f = data;
  KvSecondaryTier *tier = factory->new_tier (buffer, f->clock, &f->state);

  g_assert_nonnull (tier);
  /* no breaker unless a case wants one: the factories' defaults differ */
  g_object_set (tier, "breaker-threshold", 0, NULL);
  return tier;
}

static void
on_job_finished (KvSecondaryTier *tier,
                 KvJobResult     *result,
                 gpointer         data)
{
  Fixture *f = data;
  guint64 id = kv_job_result_get_job_id (result);
  guint n = GPOINTER_TO_UINT (g_hash_table_lookup (f->reported, &id));

  g_hash_table_insert (f->reported, g_memdup2 (&id, sizeof id), GUINT_TO_POINTER (n + 1));
  g_hash_table_insert (f->succeeded, g_memdup2 (&id, sizeof id),
                       GUINT_TO_POINTER (kv_job_result_get_success (result)));
}

/* The tier on its own, on a primary buffer of N_SLOTS slots. */
static void
bare (Fixture *f)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (N_SLOTS, factory->slot_size, &error);
  g_assert_no_error (error);
  f->tier = make_tier (f->buffer, f);
}

/* The tier under a manager with a primary of N_SLOTS slots. */
static void
stack (Fixture *f)
{
  test_stack_init (&f->stack, N_SLOTS, factory->slot_size, make_tier, f);
  f->stack.key = factory->key;
  f->stack.fill = factory->fill;
  f->buffer = g_object_ref (f->stack.buffer);
  f->tier = g_object_ref (f->stack.tier);
  f->managed = TRUE;
  g_signal_connect (f->tier, "job-finished", G_CALLBACK (on_job_finished), f);
}

static void
touch_index (Fixture *f,
             guint    index)
{
  if (index < ABSENT)
    f->max_index = MAX (f->max_index, index + 1);
}

/* Every slot of the primary can take a new chunk: none is pinned, held
 * for a load the tier may still write, or half-written. */
static void
assert_all_slots_usable (Fixture *f)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvRequest) request = kv_request_new ("all-slots", NULL);
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  guint n_to_store = 0;

  for (guint i = 0; i < N_SLOTS; i++)
    g_ptr_array_add (keys, factory->key (5000 + i));
  kv_tiering_manager_on_new_request (f->stack.manager, request);
  prepared = kv_tiering_manager_prepare_store (f->stack.manager, (KvKey * const *) keys->pdata,
                                               N_SLOTS, request, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  g_assert_cmpuint (n_to_store, ==, N_SLOTS);
  /* abandoned: nothing is cascaded */
  kv_tiering_manager_complete_store (f->stack.manager, to_store, n_to_store, request, FALSE);
  kv_tiering_manager_on_request_finished (f->stack.manager, request);
  test_stack_step (&f->stack);
}

static void
assert_settled (Fixture *f)
{
  test_stack_settle (&f->stack);
  test_stack_assert_no_pins (&f->stack, f->max_index);
  /* every job the manager made was reported exactly once */
  {
    GHashTableIter iter;
    gpointer id, n;

    g_hash_table_iter_init (&iter, f->reported);
    while (g_hash_table_iter_next (&iter, &id, &n))
      if (GPOINTER_TO_UINT (n) != 1)
        g_error ("job %" G_GUINT64_FORMAT " was reported %u times", *(guint64 *) id,
                 GPOINTER_TO_UINT (n));
  }
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  if (f->managed)
    {
      /* the storage is back (a case that stalled it resumed it) */
      assert_settled (f);
      assert_all_slots_usable (f);
      g_clear_object (&f->tier);
      g_clear_object (&f->buffer);
      test_stack_clear (&f->stack);
    }
  else if (f->tier != NULL)
    {
      g_assert_true (kv_secondary_tier_shutdown (f->tier, &error));
      g_assert_no_error (error);
      g_clear_object (&f->tier);
      g_clear_object (&f->buffer);
    }
  if (f->state != NULL && factory->free_state != NULL)
    factory->free_state (f->state);
  g_hash_table_unref (f->reported);
  g_hash_table_unref (f->succeeded);
  g_clear_object (&f->clock);
}

/* ---- waiting ------------------------------------------------------------ */

/* Runs what is ready on the owner thread's main context: a tier written in
 * JavaScript moves its bytes and reports its jobs in main-loop callbacks,
 * as an engine's loop would run them between steps. */
static void
pump (void)
{
  while (g_main_context_iteration (NULL, FALSE))
    ;
}

/* A thread that fails the test when a call that must return does not. */
typedef struct
{
  GMutex      lock;
  GCond       cond;
  gboolean    disarmed;
  const char *what;
  GThread    *thread;
} Watchdog;

static gpointer
watchdog_thread (gpointer data)
{
  Watchdog *w = data;
  gint64 until = g_get_monotonic_time () + WATCHDOG_S * G_USEC_PER_SEC;

  g_mutex_lock (&w->lock);
  while (!w->disarmed)
    if (!g_cond_wait_until (&w->cond, &w->lock, until))
      {
        fprintf (stderr, "Bail out! tier %s: %s did not return within %d s\n",
                 factory->name, w->what, WATCHDOG_S);
        fflush (stderr);
        fflush (stdout);
        abort ();
      }
  g_mutex_unlock (&w->lock);
  return NULL;
}

static Watchdog *
watchdog_arm (const char *what)
{
  Watchdog *w = g_new0 (Watchdog, 1);

  g_mutex_init (&w->lock);
  g_cond_init (&w->cond);
  w->what = what;
  w->thread = g_thread_new ("contract-watchdog", watchdog_thread, w);
  return w;
}

static void
watchdog_disarm (Watchdog *w)
{
  g_mutex_lock (&w->lock);
  w->disarmed = TRUE;
  g_cond_signal (&w->cond);
  g_mutex_unlock (&w->lock);
  g_thread_join (w->thread);
  g_mutex_clear (&w->lock);
  g_cond_clear (&w->cond);
  g_free (w);
}

static gboolean
tier_is_idle (Fixture *f)
{
  if (factory->is_idle != NULL)
    return factory->is_idle (f->state, f->tier);
  return kv_secondary_tier_get_n_jobs_in_flight (f->tier) == 0;
}

/* Waits until the tier has finished every job it accepted, without
 * collecting a result. */
static void
wait_tier_idle (Fixture *f)
{
  gint64 until = g_get_monotonic_time () + WAIT_S * G_USEC_PER_SEC;

  while (!tier_is_idle (f))
    {
      if (g_get_monotonic_time () > until)
        g_error ("tier %s did not finish its jobs within %d s", factory->name, WAIT_S);
      pump ();
      g_usleep (1000);
    }
}

static void
wait_late_completions (Fixture *f,
                       guint64  n)
{
  gint64 until = g_get_monotonic_time () + WAIT_S * G_USEC_PER_SEC;

  while (kv_secondary_tier_get_n_late_completions (f->tier) < n)
    {
      if (g_get_monotonic_time () > until)
        g_error ("tier %s: %" G_GUINT64_FORMAT " late answers counted within %d s, not %"
                 G_GUINT64_FORMAT, factory->name, kv_secondary_tier_get_n_late_completions (f->tier),
                 WAIT_S, n);
      pump ();
      if (f->managed)
        test_stack_step (&f->stack);
      else
        g_free (kv_secondary_tier_get_finished_jobs (f->tier));
      g_usleep (1000);
    }
}

/* ---- jobs straight to the tier ------------------------------------------ */

static GPtrArray *
keys_of (const guint *indices,
         guint        n)
{
  GPtrArray *keys = g_ptr_array_new_full (n, (GDestroyNotify) kv_key_unref);

  for (guint i = 0; i < n; i++)
    g_ptr_array_add (keys, factory->key (indices[i]));
  return keys;
}

/* Submits a job of chunks @indices on slots @slots (a store fills them
 * first); returns the job. */
static KvTransferJob *
submit_job (Fixture       *f,
            gboolean       is_load,
            const guint   *indices,
            const guint32 *slots,
            guint          n,
            KvRequest     *request)
{
  g_autoptr(GPtrArray) keys = keys_of (indices, n);
  g_autoptr(KvRequest) own_request = request ? g_object_ref (request) : kv_request_new ("bare", NULL);
  g_autoptr(KvTransferJob) job = NULL;
  g_autoptr(GError) error = NULL;
  guint64 id = f->next_id++;

  for (guint i = 0; i < n; i++)
    {
      touch_index (f, indices[i]);
      if (is_load)
        memset (kv_host_buffer_peek_slot (f->buffer, slots[i]), 0, factory->slot_size);
      else
        {
          kv_host_buffer_clear_slot_checksum (f->buffer, slots[i]);
          factory->fill (kv_host_buffer_peek_slot (f->buffer, slots[i]), factory->slot_size,
                         indices[i]);
        }
    }
  job = kv_transfer_job_new (id, (KvKey * const *) keys->pdata, slots, n, is_load, own_request);
  if (is_load)
    g_assert_true (kv_secondary_tier_submit_load (f->tier, job, &error));
  else
    g_assert_true (kv_secondary_tier_submit_store (f->tier, job, &error));
  g_assert_no_error (error);
  return g_steal_pointer (&job);
}

/* As submit_job(); returns the job's id. */
static guint64
submit (Fixture       *f,
        gboolean       is_load,
        const guint   *indices,
        const guint32 *slots,
        guint          n,
        KvRequest     *request)
{
  g_autoptr(KvTransferJob) job = submit_job (f, is_load, indices, slots, n, request);

  return kv_transfer_job_get_id (job);
}

/* Takes what the tier reported until every id of @ids (n_ids) came, each
 * exactly once and nothing else; drains first. Returns the results in the
 * order of @ids. */
static GPtrArray *
collect (Fixture       *f,
         const guint64 *ids,
         guint          n_ids)
{
  g_autoptr(GPtrArray) results = g_ptr_array_new_full (n_ids, (GDestroyNotify) kv_job_result_unref);
  g_autoptr(GError) error = NULL;
  gint64 until = g_get_monotonic_time () + WAIT_S * G_USEC_PER_SEC;
  guint n_found = 0;
  Watchdog *w;

  g_ptr_array_set_size (results, n_ids);
  w = watchdog_arm ("drain_jobs");
  g_assert_true (kv_secondary_tier_drain_jobs (f->tier, &error));
  watchdog_disarm (w);
  g_assert_no_error (error);
  while (n_found < n_ids)
    {
      g_autofree KvJobResult **got = kv_secondary_tier_get_finished_jobs (f->tier);

      for (guint i = 0; got != NULL && got[i] != NULL; i++)
        {
          guint64 id = kv_job_result_get_job_id (got[i]);
          guint j = 0;

          while (j < n_ids && ids[j] != id)
            j++;
          if (j == n_ids)
            g_error ("tier %s reported job %" G_GUINT64_FORMAT ", which was not asked for",
                     factory->name, id);
          if (results->pdata[j] != NULL)
            g_error ("tier %s reported job %" G_GUINT64_FORMAT " twice", factory->name, id);
          results->pdata[j] = got[i];
          n_found++;
        }
      if (n_found < n_ids)
        {
          if (g_get_monotonic_time () > until)
            g_error ("tier %s reported %u of %u jobs within %d s after drain_jobs",
                     factory->name, n_found, n_ids, WAIT_S);
          pump ();
          g_usleep (1000);
        }
    }
  return g_steal_pointer (&results);
}

/* A job on its own, waited for. */
static KvJobResult *
run (Fixture       *f,
     gboolean       is_load,
     const guint   *indices,
     const guint32 *slots,
     guint          n)
{
  guint64 id = submit (f, is_load, indices, slots, n, NULL);
  g_autoptr(GPtrArray) results = collect (f, &id, 1);

  return kv_job_result_ref (results->pdata[0]);
}

/* Makes chunks @indices exist in the tier: stored (and checked) when it
 * takes stores, seeded otherwise. */
static void
put (Fixture     *f,
     const guint *indices,
     guint        n)
{
  g_autofree guint32 *slots = g_new (guint32, n);
  g_autoptr(KvJobResult) result = NULL;

  if (!(factory->caps & CONTRACT_CAN_STORE))
    {
      for (guint i = 0; i < n; i++)
        g_assert_cmpuint (indices[i], <, factory->n_seeded);
      return;
    }
  g_assert_cmpuint (n, <=, N_SLOTS);
  for (guint i = 0; i < n; i++)
    slots[i] = i;
  result = run (f, FALSE, indices, slots, n);
  g_assert_true (kv_job_result_get_success (result));
}

static gboolean
slot_holds (Fixture *f,
            guint32  slot,
            guint    index)
{
  g_autofree guint8 *expected = g_malloc (factory->slot_size);

  factory->fill (expected, factory->slot_size, index);
  return memcmp (kv_host_buffer_peek_slot (f->buffer, slot), expected, factory->slot_size) == 0;
}

/* The tier's answer for chunk @index, asked until it is not RETRY. */
static KvLookupResult
lookup (Fixture   *f,
        guint      index,
        KvRequest *request)
{
  g_autoptr(KvRequest) own_request = request ? g_object_ref (request) : kv_request_new ("lookup", NULL);
  g_autoptr(KvKey) key = factory->key (index);
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  gint64 until = g_get_monotonic_time () + WAIT_S * G_USEC_PER_SEC;
  KvLookupResult r;

  while ((r = kv_secondary_tier_lookup (f->tier, key, own_request)) == KV_LOOKUP_RESULT_RETRY)
    {
      if (g_get_monotonic_time () > until)
        g_error ("tier %s answered RETRY for %d s", factory->name, WAIT_S);
      kv_secondary_tier_on_schedule_end (f->tier, end);
      pump ();
      g_usleep (1000);
    }
  return r;
}

/* The one partial-load rule: successful_keys lists every key whose bytes
 * landed, in the job's key order; success only if all landed; no keys
 * when none did. @landed: which of the job's keys must have landed. */
static void
assert_load_result (Fixture        *f,
                    KvJobResult    *result,
                    const guint    *indices,
                    const guint32  *slots,
                    const gboolean *landed,
                    guint           n)
{
  guint n_landed = 0;
  guint n_keys = 0;
  KvKey * const *keys;
  guint k = 0;

  for (guint i = 0; i < n; i++)
    n_landed += landed[i];
  g_assert_cmpint (kv_job_result_get_success (result), ==, n_landed == n);
  if (n_landed == 0)
    {
      g_assert_false (kv_job_result_has_successful_keys (result));
      return;
    }
  if (n_landed == n && !kv_job_result_has_successful_keys (result))
    ;   /* all landed: every key shares success */
  else
    {
      g_assert_true (kv_job_result_has_successful_keys (result));
      keys = kv_job_result_get_successful_keys (result, &n_keys);
      g_assert_cmpuint (n_keys, ==, n_landed);
      for (guint i = 0; i < n; i++)
        if (landed[i])
          {
            g_autoptr(KvKey) expected = factory->key (indices[i]);

            g_assert_true (kv_key_equal (keys[k], expected));
            k++;
          }
    }
  for (guint i = 0; i < n; i++)
    if (landed[i] && !slot_holds (f, slots[i], indices[i]))
      g_error ("tier %s: key %u of the load (chunk %u) landed with other bytes",
               factory->name, i, indices[i]);
  if (kv_job_result_get_transfer_bytes (result) >= 0)
    g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==,
                     (gint64) n_landed * (gint64) factory->slot_size);
}

/* ---- cases -------------------------------------------------------------- */

/* Stored chunks load back byte-exact into other slots; lookups know them. */
static void
test_round_trip (Fixture       *f,
                 gconstpointer  data)
{
  const guint chunks[] = { 0, 1, 2, 3 };
  const guint32 into[] = { 4, 5, 6, 7 };
  const gboolean all[] = { TRUE, TRUE, TRUE, TRUE };
  g_autoptr(KvJobResult) loaded = NULL;

  bare (f);
  put (f, chunks, 4);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (lookup (f, chunks[i], NULL), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, ABSENT, NULL), ==, KV_LOOKUP_RESULT_MISS);
  loaded = run (f, TRUE, chunks, into, 4);
  assert_load_result (f, loaded, chunks, into, all, 4);
}

/* Through a manager: a tier that takes stores gets the cascade, and the
 * chunks that left the primary come back from it byte-exact; a tier that
 * takes none gets no cascade job and still serves its chunks. */
static void
test_round_trip_manager (Fixture       *f,
                         gconstpointer  data)
{
  stack (f);
  if (factory->caps & CONTRACT_CAN_STORE)
    {
      for (guint first = 0; first < 12; first += 4)
        g_assert_cmpuint (test_stack_store (&f->stack, first, 4), ==, 4);
      g_assert_cmpuint (g_hash_table_size (f->reported), ==, 3);
      g_assert_cmpuint (g_hash_table_size (f->succeeded), ==, 3);
    }
  else
    {
      test_stack_store (&f->stack, 0, 4);
      /* no cascade job: nothing to report, nothing pinned for one */
      g_assert_cmpuint (g_hash_table_size (f->reported), ==, 0);
      test_stack_assert_no_pins (&f->stack, 4);
      g_assert_true (kv_tiering_manager_reset_cache (f->stack.manager, NULL));
    }
  touch_index (f, 12);
  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(KvKey) key = factory->key (i);

      g_assert_cmpint (kv_primary_tier_lookup (f->stack.primary, key), ==, KV_LOOKUP_RESULT_MISS);
      g_assert_cmpint (test_stack_promote (&f->stack, i), ==, KV_LOOKUP_RESULT_HIT);
    }
  g_assert_cmpint (test_stack_promote (&f->stack, ABSENT), ==, KV_LOOKUP_RESULT_MISS);
  {
    GHashTableIter iter;
    gpointer ok;

    g_hash_table_iter_init (&iter, f->succeeded);
    while (g_hash_table_iter_next (&iter, NULL, &ok))
      g_assert_true (GPOINTER_TO_UINT (ok));
  }
}

/* Loads of which some keys cannot land (never stored): the one rule. */
static void
test_partial_load (Fixture       *f,
                   gconstpointer  data)
{
  const guint stored[] = { 0, 1, 2, 3 };

  bare (f);
  put (f, stored, 4);
  {
    /* the middle key is missing: the keys after it still land */
    const guint chunks[] = { 0, ABSENT, 2 };
    const guint32 into[] = { 4, 5, 6 };
    const gboolean landed[] = { TRUE, FALSE, TRUE };
    g_autoptr(KvJobResult) result = run (f, TRUE, chunks, into, 3);

    assert_load_result (f, result, chunks, into, landed, 3);
  }
  {
    /* the first key is missing */
    const guint chunks[] = { ABSENT + 1, 1, 3 };
    const guint32 into[] = { 4, 5, 6 };
    const gboolean landed[] = { FALSE, TRUE, TRUE };
    g_autoptr(KvJobResult) result = run (f, TRUE, chunks, into, 3);

    assert_load_result (f, result, chunks, into, landed, 3);
  }
  {
    /* none lands */
    const guint chunks[] = { ABSENT + 2, ABSENT + 3 };
    const guint32 into[] = { 4, 5 };
    const gboolean landed[] = { FALSE, FALSE };
    g_autoptr(KvJobResult) result = run (f, TRUE, chunks, into, 2);

    assert_load_result (f, result, chunks, into, landed, 2);
  }
  {
    /* all land */
    const guint chunks[] = { 3, 0 };
    const guint32 into[] = { 6, 7 };
    const gboolean landed[] = { TRUE, TRUE };
    g_autoptr(KvJobResult) result = run (f, TRUE, chunks, into, 2);

    assert_load_result (f, result, chunks, into, landed, 2);
  }
}

/* A chunk damaged behind the tier's back: the load reports the others by
 * the one rule, never the damaged bytes, and the key answers MISS after
 * it, also to a request that had looked it up before (vLLM's mark_miss). */
static void
test_failed_load_forgotten (Fixture       *f,
                            gconstpointer  data)
{
  const guint chunks[] = { 0, 1, 2 };
  const guint32 into[] = { 4, 5, 6 };
  const gboolean landed[] = { TRUE, FALSE, TRUE };
  g_autoptr(KvRequest) earlier = kv_request_new ("earlier", NULL);
  g_autoptr(KvRequest) failing = kv_request_new ("failing", NULL);
  g_autoptr(KvKey) damaged = factory->key (1);
  g_autoptr(KvJobResult) result = NULL;
  guint64 id;

  if (!(factory->caps & CONTRACT_CAN_DAMAGE))
    {
      g_test_skip ("this tier's stored bytes cannot be damaged behind its back "
                   "(no CONTRACT_CAN_DAMAGE): partial-load checks the rule with missing keys");
      return;
    }
  bare (f);
  put (f, chunks, 3);
  kv_secondary_tier_on_new_request (f->tier, earlier);
  kv_secondary_tier_on_new_request (f->tier, failing);
  for (guint i = 0; i < 3; i++)
    {
      g_assert_cmpint (lookup (f, chunks[i], earlier), ==, KV_LOOKUP_RESULT_HIT);
      g_assert_cmpint (lookup (f, chunks[i], failing), ==, KV_LOOKUP_RESULT_HIT);
    }
  factory->damage (f->state, f->tier, damaged);
  id = submit (f, TRUE, chunks, into, 3, failing);
  {
    g_autoptr(GPtrArray) results = collect (f, &id, 1);

    result = kv_job_result_ref (results->pdata[0]);
  }
  assert_load_result (f, result, chunks, into, landed, 3);
  g_assert_cmpint (lookup (f, 1, failing), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 1, earlier), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, 1, NULL), ==, KV_LOOKUP_RESULT_MISS);
  /* the undamaged ones still answer */
  g_assert_cmpint (lookup (f, 0, earlier), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, 2, NULL), ==, KV_LOOKUP_RESULT_HIT);
  kv_secondary_tier_on_request_finished (f->tier, earlier);
  kv_secondary_tier_on_request_finished (f->tier, failing);
}

/* Many jobs in flight at once, stores and loads, some failing: each is
 * reported once, and nothing else is. */
static void
test_exactly_once (Fixture       *f,
                   gconstpointer  data)
{
  const guint stored[] = { 0, 1 };
  guint64 ids[8];
  guint n = 0;
  g_autoptr(GPtrArray) results = NULL;

  bare (f);
  put (f, stored, 2);
  for (guint j = 0; j < 3; j++)
    {
      const guint load[] = { j % 2 };
      const guint32 load_slot[] = { 2 + j };
      const guint absent[] = { ABSENT + j };
      const guint32 absent_slot[] = { 5 };

      ids[n++] = submit (f, TRUE, load, load_slot, 1, NULL);
      ids[n++] = submit (f, TRUE, absent, absent_slot, 1, NULL);
    }
  if (factory->caps & CONTRACT_CAN_STORE)
    {
      const guint more[] = { 10, 11 };
      const guint32 from[] = { 6, 7 };

      ids[n++] = submit (f, FALSE, more, from, 2, NULL);
    }
  results = collect (f, ids, n);
  for (guint i = 0; i < n; i++)
    {
      /* loads of stored chunks and the store succeed, absent ones fail */
      gboolean absent_load = i < 6 && i % 2 == 1;

      g_assert_cmpint (kv_job_result_get_success (results->pdata[i]), ==, !absent_load);
    }
  /* and nothing more comes */
  {
    g_autofree KvJobResult **more = NULL;

    g_assert_true (kv_secondary_tier_drain_jobs (f->tier, NULL));
    more = kv_secondary_tier_get_finished_jobs (f->tier);
    g_assert_true (more == NULL || more[0] == NULL);
  }
}

/* Through a manager: cascades and promotions of several requests, each job
 * reported once through ::job-finished (checked when the case ends). */
static void
test_exactly_once_manager (Fixture       *f,
                           gconstpointer  data)
{
  stack (f);
  for (guint first = 0; first < 16; first += 4)
    test_stack_store (&f->stack, first, 4);
  for (guint i = 0; i < 6; i++)
    g_assert_cmpint (test_stack_promote (&f->stack, i), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&f->stack, ABSENT), ==, KV_LOOKUP_RESULT_MISS);
  touch_index (f, 15);
  if (factory->caps & CONTRACT_CAN_STORE)
    g_assert_cmpuint (g_hash_table_size (f->reported), >=, 4 + 6);
  else
    g_assert_cmpuint (g_hash_table_size (f->reported), ==, 6);
}

/* Jobs the storage never answers: reported failed once at the deadline;
 * the tier's answer when the storage is back is dropped and counted. */
static void
test_deadline (Fixture       *f,
               gconstpointer  data)
{
  const guint stored[] = { 0 };
  const guint32 into[] = { 4 };
  const guint more[] = { 20 };
  const guint32 from[] = { 5 };
  guint64 ids[2];
  guint n = 0;
  g_autoptr(GPtrArray) results = NULL;

  bare (f);
  put (f, stored, 1);
  kv_secondary_tier_set_deadline_ms (f->tier, DEADLINE_MS);
  factory->stall (f->state, f->tier, TRUE);
  ids[n++] = submit (f, TRUE, stored, into, 1, NULL);
  if (factory->caps & CONTRACT_CAN_STORE)
    ids[n++] = submit (f, FALSE, more, from, 1, NULL);
  /* not before the deadline */
  kv_clock_advance (f->clock, (DEADLINE_MS - 1) * 1000);
  g_free (kv_secondary_tier_get_finished_jobs (f->tier));
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (f->tier), ==, 0);
  kv_clock_advance (f->clock, 2 * 1000);
  results = collect (f, ids, n);
  for (guint i = 0; i < n; i++)
    g_assert_false (kv_job_result_get_success (results->pdata[i]));
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (f->tier), ==, n);

  factory->stall (f->state, f->tier, FALSE);
  wait_late_completions (f, n);
  /* dropped: not reported again */
  {
    g_autofree KvJobResult **again = NULL;

    g_assert_true (kv_secondary_tier_drain_jobs (f->tier, NULL));
    again = kv_secondary_tier_get_finished_jobs (f->tier);
    g_assert_true (again == NULL || again[0] == NULL);
  }
  /* and the tier serves again */
  {
    const gboolean landed[] = { TRUE };
    g_autoptr(KvJobResult) loaded = run (f, TRUE, stored, into, 1);

    assert_load_result (f, loaded, stored, into, landed, 1);
  }
}

/* Chunks [0, 4) in the tier and not in the primary. */
static void
promotable (Fixture *f)
{
  if (factory->caps & CONTRACT_CAN_STORE)
    for (guint first = 0; first < 12; first += 4)
      test_stack_store (&f->stack, first, 4);
  touch_index (f, 12);
  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(KvKey) key = factory->key (i);

      g_assert_cmpint (kv_primary_tier_lookup (f->stack.primary, key), ==, KV_LOOKUP_RESULT_MISS);
    }
}

/* The engine's store of chunks [first, first + n) for @request: prepare,
 * fill, complete, so that the manager cascades them at the end of the
 * step; nothing waits for the cascade. */
static void
start_store (Fixture   *f,
             KvRequest *request,
             guint      first,
             guint      n)
{
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(GError) error = NULL;
  KvKey * const *to_store;
  const guint32 *chunk_ids;
  guint n_to_store = 0;

  for (guint i = 0; i < n; i++)
    {
      g_ptr_array_add (keys, factory->key (first + i));
      touch_index (f, first + i);
    }
  prepared = kv_tiering_manager_prepare_store (f->stack.manager, (KvKey * const *) keys->pdata,
                                               n, request, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  g_assert_cmpuint (n_to_store, ==, n);
  for (guint i = 0; i < n; i++)
    {
      g_assert_true (kv_key_equal (to_store[i], keys->pdata[i]));
      kv_host_buffer_clear_slot_checksum (f->buffer, chunk_ids[i]);
      factory->fill (kv_host_buffer_peek_slot (f->buffer, chunk_ids[i]), factory->slot_size,
                     first + i);
    }
  kv_tiering_manager_complete_store (f->stack.manager, to_store, n_to_store, request, TRUE);
}

/* Through a manager: a promotion past its deadline fails the request's
 * lookup, its slot stays out of use until the tier's late answer, which
 * is dropped; a cascade past its deadline unpins its slots at once, or,
 * for a tier that cannot cancel stores, when the tier answers. */
static void
test_late_answer (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("late", NULL);
  g_autoptr(KvKey) key = factory->key (0);
  KvLookupResult r;

  stack (f);
  promotable (f);
  kv_secondary_tier_set_deadline_ms (f->tier, DEADLINE_MS);
  kv_tiering_manager_on_new_request (f->stack.manager, request);
  r = test_stack_lookup_settled (&f->stack, key, request);
  g_assert_cmpint (r, ==, KV_LOOKUP_RESULT_HIT_PENDING);
  factory->stall (f->state, f->tier, TRUE);
  test_stack_step (&f->stack);                  /* submits the promotion */
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->stack.manager), ==, 1);
  kv_clock_advance (f->clock, (DEADLINE_MS + 1) * 1000);
  test_stack_step (&f->stack);                  /* the deadline passes */
  test_stack_step (&f->stack);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (f->tier), ==, 1);
  r = kv_tiering_manager_lookup (f->stack.manager, key, request);
  g_assert_cmpint (r, !=, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (r, !=, KV_LOOKUP_RESULT_HIT_PENDING);
  kv_tiering_manager_on_request_finished (f->stack.manager, request);

  if (factory->caps & CONTRACT_CAN_STORE)
    {
      g_autoptr(KvRequest) storing = kv_request_new ("late-store", NULL);
      g_autoptr(KvKey) cascaded = factory->key (30);
      guint64 late_before;
      gint ref = -1;

      kv_tiering_manager_on_new_request (f->stack.manager, storing);
      start_store (f, storing, 30, 1);
      kv_tiering_manager_on_request_finished (f->stack.manager, storing);
      test_stack_step (&f->stack);              /* submits the cascade */
      g_assert_true (kv_primary_tier_get_ref_count (f->stack.primary, cascaded, &ref));
      g_assert_cmpint (ref, ==, 1);             /* pinned by the cascade */
      late_before = kv_secondary_tier_get_n_late_completions (f->tier);
      kv_clock_advance (f->clock, (DEADLINE_MS + 1) * 1000);
      test_stack_step (&f->stack);
      test_stack_step (&f->stack);
      g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->stack.manager), ==, 0);
      /* failed at its deadline: unpinned though the tier has not answered,
       * unless the tier may still read the slot and publish it: then it
       * stays pinned until the tier answers. A tier whose cancel handler
       * answers at once (a SET not yet sent when the deadline came) is
       * unpinned at once: the answer is counted before the unpin, so it
       * is read after the pin count. */
      g_assert_true (kv_primary_tier_get_ref_count (f->stack.primary, cascaded, &ref));
      if (factory->caps & CONTRACT_CANCELS)
        g_assert_cmpint (ref, ==, 0);
      else if (ref == 0)
        g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (f->tier), >, late_before);
      else
        g_assert_cmpint (ref, ==, 1);
      g_assert_cmpint (kv_secondary_tier_get_can_cancel_stores (f->tier), ==,
                       (factory->caps & CONTRACT_CANCELS) != 0);
    }

  factory->stall (f->state, f->tier, FALSE);
  wait_late_completions (f, kv_secondary_tier_get_n_expired_jobs (f->tier));
  test_stack_settle (&f->stack);
  if (factory->caps & CONTRACT_CAN_STORE)
    {
      g_autoptr(KvKey) cascaded = factory->key (30);
      gint ref = -1;

      /* the tier answered: nothing of the cascade stays pinned */
      g_assert_true (kv_primary_tier_get_ref_count (f->stack.primary, cascaded, &ref));
      g_assert_cmpint (ref, ==, 0);
    }
  /* once the answer came, the chunk promotes again */
  g_assert_cmpint (test_stack_promote (&f->stack, 1), ==, KV_LOOKUP_RESULT_HIT);
}

/* A job's cancellable is cancelled at its deadline; a store failed then is
 * never published, though the storage comes back. A tier that cannot call
 * a store back (can-cancel-stores FALSE: the manager keeps the slots
 * pinned until the tier answers, which late-answer checks) may publish it
 * late, but only with the bytes the job started with. */
static void
test_cancel (Fixture       *f,
             gconstpointer  data)
{
  const guint chunks[] = { 0 };
  const guint32 slots[] = { 3 };
  const guint store[] = { 40 };
  g_autoptr(GCancellable) cancellable = NULL;
  g_autoptr(GPtrArray) results = NULL;
  g_autoptr(KvTransferJob) job = NULL;
  guint64 id;

  bare (f);
  /* what the tier declares is what the suite knows of it */
  g_assert_cmpint (kv_secondary_tier_get_can_cancel_stores (f->tier), ==,
                   (factory->caps & CONTRACT_CANCELS) != 0);
  put (f, chunks, 1);
  kv_secondary_tier_set_deadline_ms (f->tier, DEADLINE_MS);
  factory->stall (f->state, f->tier, TRUE);
  if (factory->caps & CONTRACT_CAN_STORE)
    job = submit_job (f, FALSE, store, slots, 1, NULL);
  else
    job = submit_job (f, TRUE, chunks, slots, 1, NULL);
  id = kv_transfer_job_get_id (job);
  cancellable = kv_secondary_tier_get_job_cancellable (f->tier, job);
  g_assert_nonnull (cancellable);
  g_assert_false (g_cancellable_is_cancelled (cancellable));
  kv_clock_advance (f->clock, (DEADLINE_MS + 1) * 1000);
  results = collect (f, &id, 1);
  g_assert_false (kv_job_result_get_success (results->pdata[0]));
  g_assert_true (g_cancellable_is_cancelled (cancellable));
  if ((factory->caps & CONTRACT_CAN_STORE) && (factory->caps & CONTRACT_CANCELS))
    /* the manager would hand the slot to another chunk now (it keeps it
     * pinned for a tier that cannot cancel stores) */
    memset (kv_host_buffer_peek_slot (f->buffer, slots[0]), 0x5a, factory->slot_size);

  factory->stall (f->state, f->tier, FALSE);
  wait_late_completions (f, 1);
  g_assert_true (kv_secondary_tier_drain_jobs (f->tier, NULL));
  if (factory->caps & CONTRACT_CAN_STORE)
    {
      KvLookupResult r = lookup (f, 40, NULL);

      if (factory->caps & CONTRACT_CANCELS)
        g_assert_cmpint (r, ==, KV_LOOKUP_RESULT_MISS);
      else if (r == KV_LOOKUP_RESULT_HIT)
        {
          /* A tier whose store cannot be called back once started (the
           * bytes are on their way) may publish it, but only with the
           * bytes the job started with: never the slot's later ones. */
          const guint32 into[] = { 6 };
          const gboolean landed[] = { TRUE };
          g_autoptr(KvJobResult) loaded = run (f, TRUE, store, into, 1);

          g_test_message ("tier %s published the store failed at its deadline", factory->name);
          assert_load_result (f, loaded, store, into, landed, 1);
        }
    }
}

/* Failures open the breaker: lookups answer MISS at once and jobs fail
 * without reaching the tier; once the storage is back the breaker closes
 * (the tier's probe, or the next job for a tier without one). */
static void
test_breaker (Fixture       *f,
              gconstpointer  data)
{
  const guint chunks[] = { 0 };
  const guint32 into[] = { 4 };
  KvCircuitBreaker *breaker;
  guint64 ids[2];
  gint64 until;

  bare (f);
  put (f, chunks, 1);
  g_object_set (f->tier, "deadline-ms", DEADLINE_MS, "breaker-threshold", 2,
                "breaker-open-ms", 1000, NULL);
  breaker = kv_secondary_tier_get_circuit_breaker (f->tier);
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_CLOSED);
  factory->stall (f->state, f->tier, TRUE);
  ids[0] = submit (f, TRUE, chunks, into, 1, NULL);
  ids[1] = submit (f, TRUE, chunks, into, 1, NULL);
  kv_clock_advance (f->clock, (DEADLINE_MS + 1) * 1000);
  g_ptr_array_unref (collect (f, ids, 2));
  g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_OPEN);
  g_assert_cmpuint (kv_circuit_breaker_get_n_trips (breaker), ==, 1);

  /* open: a MISS at once, and a job fails without reaching the stalled
   * storage */
  {
    g_autoptr(KvRequest) request = kv_request_new ("open", NULL);
    g_autoptr(KvKey) key = factory->key (0);
    g_autoptr(GPtrArray) refused = NULL;
    guint64 id;

    g_assert_cmpint (kv_secondary_tier_lookup (f->tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
    id = submit (f, TRUE, chunks, into, 1, NULL);
    refused = collect (f, &id, 1);
    g_assert_false (kv_job_result_get_success (refused->pdata[0]));
  }

  factory->stall (f->state, f->tier, FALSE);
  wait_late_completions (f, 2);
  /* the open interval passes; the engine's next step lets the tier probe
   * (or, without a probe, half-opens the breaker) */
  kv_clock_advance (f->clock, 1001 * 1000);
  {
    g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

    kv_secondary_tier_on_schedule_end (f->tier, end);
  }
  if (factory->caps & CONTRACT_PROBES)
    {
      g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
      g_autoptr(KvRequest) request = kv_request_new ("probe", NULL);
      g_autoptr(KvKey) key = factory->key (0);

      until = g_get_monotonic_time () + WAIT_S * G_USEC_PER_SEC;
      while (kv_circuit_breaker_get_state (breaker) != KV_CIRCUIT_STATE_CLOSED)
        {
          if (g_get_monotonic_time () > until)
            g_error ("tier %s: its probe did not close the breaker within %d s",
                     factory->name, WAIT_S);
          kv_secondary_tier_lookup (f->tier, key, request);
          kv_secondary_tier_on_schedule_end (f->tier, end);
          g_free (kv_secondary_tier_get_finished_jobs (f->tier));
          pump ();
          g_usleep (1000);
        }
    }
  else
    {
      /* half open: the next job decides */
      const gboolean landed[] = { TRUE };
      g_autoptr(KvJobResult) loaded = run (f, TRUE, chunks, into, 1);

      assert_load_result (f, loaded, chunks, into, landed, 1);
      g_assert_cmpint (kv_circuit_breaker_get_state (breaker), ==, KV_CIRCUIT_STATE_CLOSED);
    }
  g_assert_cmpint (lookup (f, 0, NULL), ==, KV_LOOKUP_RESULT_HIT);
}

/* ---- finished, not collected -------------------------------------------- */

typedef enum {
  UNPOLLED_DRAIN,
  UNPOLLED_RESET_CACHE,
  UNPOLLED_SHUTDOWN,
} Unpolled;

/* One job the tier finished and nobody collected: drain_jobs (straight to
 * the tier) returns and the job comes out once with the tier's result. */
static void
unpolled_drain (Fixture *f,
                guint    deadline_ms)
{
  const guint chunks[] = { 0, 1 };
  const guint32 into[] = { 4, 5 };
  const gboolean landed[] = { TRUE, TRUE };
  g_autoptr(GPtrArray) results = NULL;
  guint64 id;

  bare (f);
  kv_secondary_tier_set_deadline_ms (f->tier, deadline_ms);
  put (f, chunks, 2);
  id = submit (f, TRUE, chunks, into, 2, NULL);
  wait_tier_idle (f);
  results = collect (f, &id, 1);
  assert_load_result (f, results->pdata[0], chunks, into, landed, 2);
}

/* Through a manager: a cascade (or, for a tier without stores, a
 * promotion) the tier finished and the manager has not collected; then
 * reset_cache or shutdown returns, and ::job-finished came once for it
 * with the tier's own result. */
static void
unpolled_manager (Fixture  *f,
                  Unpolled  how,
                  guint     deadline_ms)
{
  g_autoptr(KvRequest) request = kv_request_new ("unpolled", NULL);
  g_autoptr(GError) error = NULL;
  gboolean ok;
  Watchdog *w;

  stack (f);
  kv_secondary_tier_set_deadline_ms (f->tier, deadline_ms);
  kv_tiering_manager_on_new_request (f->stack.manager, request);
  touch_index (f, 4);
  if (factory->caps & CONTRACT_CAN_STORE)
    start_store (f, request, 0, 2);
  else
    {
      g_autoptr(KvKey) key = factory->key (0);

      g_assert_cmpint (test_stack_lookup_settled (&f->stack, key, request), ==,
                       KV_LOOKUP_RESULT_HIT_PENDING);
    }
  kv_tiering_manager_on_request_finished (f->stack.manager, request);
  test_stack_step (&f->stack);                  /* the job is submitted */
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->stack.manager), ==, 1);
  wait_tier_idle (f);
  g_assert_cmpuint (g_hash_table_size (f->reported), ==, 0);

  w = watchdog_arm (how == UNPOLLED_RESET_CACHE ? "reset_cache" : "shutdown");
  if (how == UNPOLLED_RESET_CACHE)
    ok = kv_tiering_manager_reset_cache (f->stack.manager, &error);
  else
    ok = kv_tiering_manager_shutdown (f->stack.manager, &error);
  watchdog_disarm (w);
  g_assert_no_error (error);
  g_assert_true (ok);
  /* applied by the time it returned */
  g_assert_cmpuint (g_hash_table_size (f->reported), ==, 1);
  {
    GHashTableIter iter;
    gpointer n, success;

    g_hash_table_iter_init (&iter, f->reported);
    g_assert_true (g_hash_table_iter_next (&iter, NULL, &n));
    g_assert_cmpuint (GPOINTER_TO_UINT (n), ==, 1);
    g_hash_table_iter_init (&iter, f->succeeded);
    g_assert_true (g_hash_table_iter_next (&iter, NULL, &success));
    if (!GPOINTER_TO_UINT (success))
      g_error ("tier %s: the job it finished was reported failed by %s", factory->name,
               how == UNPOLLED_RESET_CACHE ? "reset_cache" : "shutdown");
  }
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->stack.manager), ==, 0);
  if (how == UNPOLLED_RESET_CACHE)
    {
      /* the primary is empty and the tier kept the chunks */
      g_autoptr(KvKey) key = factory->key (0);

      g_assert_cmpint (kv_primary_tier_lookup (f->stack.primary, key), ==, KV_LOOKUP_RESULT_MISS);
      g_assert_cmpint (test_stack_promote (&f->stack, 0), ==, KV_LOOKUP_RESULT_HIT);
    }
  else
    {
      /* nothing left pinned by the job */
      test_stack_assert_no_pins (&f->stack, f->max_index);
      g_assert_cmpuint (kv_primary_tier_get_n_write_pending (f->stack.primary), ==, 0);
    }
}

static void
test_unpolled_drain (Fixture       *f,
                     gconstpointer  data)
{
  unpolled_drain (f, GPOINTER_TO_UINT (data));
}

static void
test_unpolled_reset_cache (Fixture       *f,
                           gconstpointer  data)
{
  unpolled_manager (f, UNPOLLED_RESET_CACHE, GPOINTER_TO_UINT (data));
}

static void
test_unpolled_shutdown (Fixture       *f,
                        gconstpointer  data)
{
  unpolled_manager (f, UNPOLLED_SHUTDOWN, GPOINTER_TO_UINT (data));
  /* shut down: the teardown has no manager to settle */
  f->managed = FALSE;
  g_clear_object (&f->tier);
  g_clear_object (&f->buffer);
  test_stack_clear (&f->stack);
}

/* ---- main --------------------------------------------------------------- */

typedef struct
{
  const char      *name;
  GTestFixtureFunc func;
  guint            deadline_ms;   /* passed as the case's data */
} ContractCase;

static const ContractCase cases[] = {
  { "round-trip", (GTestFixtureFunc) test_round_trip, 0 },
  { "round-trip-manager", (GTestFixtureFunc) test_round_trip_manager, 0 },
  { "partial-load", (GTestFixtureFunc) test_partial_load, 0 },
  { "failed-load-forgotten", (GTestFixtureFunc) test_failed_load_forgotten, 0 },
  { "exactly-once", (GTestFixtureFunc) test_exactly_once, 0 },
  { "exactly-once-manager", (GTestFixtureFunc) test_exactly_once_manager, 0 },
  { "deadline", (GTestFixtureFunc) test_deadline, 0 },
  { "late-answer", (GTestFixtureFunc) test_late_answer, 0 },
  { "cancel", (GTestFixtureFunc) test_cancel, 0 },
  { "breaker", (GTestFixtureFunc) test_breaker, 0 },
  { "unpolled-drain", (GTestFixtureFunc) test_unpolled_drain, 0 },
  { "unpolled-drain-deadline", (GTestFixtureFunc) test_unpolled_drain, DEADLINE_MS },
  { "unpolled-reset-cache", (GTestFixtureFunc) test_unpolled_reset_cache, 0 },
  { "unpolled-reset-cache-deadline", (GTestFixtureFunc) test_unpolled_reset_cache, DEADLINE_MS },
  { "unpolled-shutdown", (GTestFixtureFunc) test_unpolled_shutdown, 0 },
  { "unpolled-shutdown-deadline", (GTestFixtureFunc) test_unpolled_shutdown, DEADLINE_MS },
};

int
main (int argc, char **argv)
{
  g_autofree char *skip_reason = NULL;
  const char *tier_name = NULL;
  int out = 1;
  int status;

  /* --tier NAME: taken out before GLib sees the arguments */
  for (int i = 1; i < argc; i++)
    {
      if (g_str_equal (argv[i], "--tier") && i + 1 < argc)
        {
          tier_name = argv[++i];
          continue;
        }
      argv[out++] = argv[i];
    }
  argc = out;
  argv[argc] = NULL;

  /* not G_TEST_OPTION_ISOLATE_DIRS: GSocketClient's proxy resolver reads
   * GSettings, whose schemas an isolated XDG_DATA_DIRS hides */
  g_test_init (&argc, &argv, NULL);
  if (tier_name == NULL || (factory = find_factory (tier_name)) == NULL)
    {
      g_autoptr(GString) names = g_string_new (NULL);

      for (guint i = 0; i < contract_n_factories; i++)
        g_string_append_printf (names, "%s%s", i > 0 ? ", " : "", contract_factories[i].name);
      g_printerr ("usage: %s --tier NAME [GTest options]; tiers: %s\n", argv[0], names->str);
      return 2;
    }
  if (factory->setup != NULL && !factory->setup (&skip_reason))
    {
      g_print ("1..0 # SKIP tier %s: %s\n", factory->name, skip_reason);
      return 0;
    }
  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree char *path = g_strdup_printf ("/tier-contract/%s/%s", factory->name, cases[c].name);

      g_test_add_vtable (path, sizeof (Fixture), GUINT_TO_POINTER (cases[c].deadline_ms),
                         (GTestFixtureFunc) fixture_setup, cases[c].func,
                         (GTestFixtureFunc) fixture_teardown);
    }
  status = g_test_run ();
  if (factory->teardown != NULL)
    factory->teardown ();
  return status;
}
