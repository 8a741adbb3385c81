/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier.h"
#include "kv-async-lookup-private.h"

static GThread *main_thread;

/* What the batch function saw, recorded from the worker threads. */
typedef struct
{
  GMutex     mutex;
  GPtrArray *calls;        /* Call* */
  /* optional gate: the function blocks until it is opened */
  gboolean   gated;
  gboolean   gate_open;
  guint      n_entered;
  GCond      cond;
  /* when set, the function leaves its results unset */
  gboolean   fail;
} Recorder;

typedef struct
{
  char      *request_id;
  GPtrArray *keys;   /* KvKey */
} Call;

static void
call_free (gpointer data)
{
  Call *call = data;

  g_free (call->request_id);
  g_ptr_array_unref (call->keys);
  g_free (call);
}

static Recorder *
recorder_new (void)
{
  Recorder *rec = g_new0 (Recorder, 1);

  g_mutex_init (&rec->mutex);
  g_cond_init (&rec->cond);
  rec->calls = g_ptr_array_new_with_free_func (call_free);
  return rec;
}

static void
recorder_free (gpointer data)
{
  Recorder *rec = data;

  g_ptr_array_unref (rec->calls);
  g_mutex_clear (&rec->mutex);
  g_cond_clear (&rec->cond);
  g_free (rec);
}

static guint
recorder_n_calls (Recorder *rec)
{
  guint n;

  g_mutex_lock (&rec->mutex);
  n = rec->calls->len;
  g_mutex_unlock (&rec->mutex);
  return n;
}

static Call *
recorder_call (Recorder *rec,
               guint     index)
{
  Call *call;

  g_mutex_lock (&rec->mutex);
  call = g_ptr_array_index (rec->calls, index);
  g_mutex_unlock (&rec->mutex);
  return call;
}

static void
recorder_open_gate (Recorder *rec)
{
  g_mutex_lock (&rec->mutex);
  rec->gate_open = TRUE;
  g_cond_broadcast (&rec->cond);
  g_mutex_unlock (&rec->mutex);
}

static void
recorder_wait_entered (Recorder *rec,
                       guint     n)
{
  g_mutex_lock (&rec->mutex);
  while (rec->n_entered < n)
    g_cond_wait (&rec->cond, &rec->mutex);
  g_mutex_unlock (&rec->mutex);
}

/* A key is stored when the first byte of its hash is odd. */
static gboolean
is_stored (KvKey *key)
{
  return (kv_key_get_hash (key, NULL)[0] & 1) != 0;
}

static void
batch_func (KvKey * const *keys,
            guint          n_keys,
            KvRequest     *request,
            gboolean      *results,
            gpointer       user_data)
{
  Recorder *rec = user_data;
  Call *call = g_new0 (Call, 1);

  g_assert_true (g_thread_self () != main_thread);

  call->request_id = g_strdup (kv_request_get_id (request));
  call->keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  for (guint i = 0; i < n_keys; i++)
    g_ptr_array_add (call->keys, kv_key_ref (keys[i]));

  g_mutex_lock (&rec->mutex);
  g_ptr_array_add (rec->calls, call);
  rec->n_entered += 1;
  g_cond_broadcast (&rec->cond);
  while (rec->gated && !rec->gate_open)
    g_cond_wait (&rec->cond, &rec->mutex);
  g_mutex_unlock (&rec->mutex);

  if (rec->fail)
    return;
  for (guint i = 0; i < n_keys; i++)
    results[i] = is_stored (keys[i]);
}

static KvKey *
make_key (guint8 first)
{
  guint8 hash[8] = { first, 1, 2, 3, 4, 5, 6, 7 };

  return kv_key_new (hash, sizeof hash, 0);
}

/* stored (odd) and absent (even) keys */
#define HIT_A  0x11
#define HIT_B  0x13
#define MISS_A 0x20
#define MISS_B 0x22

typedef struct
{
  Recorder      *rec;
  KvAsyncLookup *lookup;
  KvRequest     *r1;
  KvRequest     *r2;
  KvRequest     *r3;
} Fixture;

static void
fixture_setup_with (Fixture *f,
                    guint    max_pending,
                    guint    max_keys)
{
  f->rec = recorder_new ();
  f->lookup = kv_async_lookup_new ("test", batch_func, f->rec, recorder_free, 1,
                                   max_pending, max_keys);
  f->r1 = kv_request_new ("r1", NULL);
  f->r2 = kv_request_new ("r2", NULL);
  f->r3 = kv_request_new ("r3", NULL);
}

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  fixture_setup_with (f, 0, 0);
}

static void
fixture_setup_bounded (Fixture       *f,
                       gconstpointer  data)
{
  fixture_setup_with (f, 1, 0);
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  g_object_add_weak_pointer (G_OBJECT (f->lookup), (gpointer *) &f->lookup);
  g_object_unref (f->lookup);
  g_assert_null (f->lookup);
  g_object_unref (f->r1);
  g_object_unref (f->r2);
  g_object_unref (f->r3);
}

static KvLookupResult
lookup (Fixture   *f,
        guint8     first,
        KvRequest *request)
{
  g_autoptr(KvKey) key = make_key (first);

  return kv_async_lookup_lookup (f->lookup, key, request);
}

static void
test_new_key_retry (Fixture       *f,
                    gconstpointer  data)
{
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 0);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 0);
  g_assert_cmpuint (kv_async_lookup_get_n_keys (f->lookup), ==, 1);
}

static void
test_hit_and_miss_after_flush (Fixture       *f,
                               gconstpointer  data)
{
  /* the worker holds the batch until the count is read: unanswered, it
   * is pending (ungated, a quick worker answered it first at times) */
  f->rec->gated = TRUE;
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (lookup (f, MISS_A, f->r1), ==, KV_LOOKUP_RESULT_RETRY);
  kv_async_lookup_flush (f->lookup);
  recorder_wait_entered (f->rec, 1);
  g_assert_cmpuint (kv_async_lookup_get_n_pending (f->lookup), ==, 1);

  recorder_open_gate (f->rec);
  kv_async_lookup_wait_idle (f->lookup);
  g_assert_cmpuint (kv_async_lookup_get_n_pending (f->lookup), ==, 0);
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, MISS_A, f->r1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 1);
}

static void
test_drain_before_lookup (Fixture       *f,
                          gconstpointer  data)
{
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_RETRY);
  kv_async_lookup_flush (f->lookup);
  /* Wait for the worker without applying its answer... */
  recorder_wait_entered (f->rec, 1);
  while (kv_async_lookup_get_n_pending (f->lookup) > 0)
    {
      /* ...the next lookup drains whatever the worker finished. */
      if (lookup (f, HIT_A, f->r1) == KV_LOOKUP_RESULT_HIT)
        break;
      g_thread_yield ();
    }
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_async_lookup_get_n_pending (f->lookup), ==, 0);
}

/* A tier that stops routing lookups here (the fs tier once its index is
 * ready) must still see its pending count fall once the workers answered:
 * has_pending_work used to count those batches forever (issue 13, item 2). */
static void
test_pending_ends_without_lookup (Fixture       *f,
                                  gconstpointer  data)
{
  gint64 deadline;

  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_RETRY);
  kv_async_lookup_flush (f->lookup);
  recorder_wait_entered (f->rec, 1);

  /* no lookup from here on: only the count is asked */
  deadline = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  while (kv_async_lookup_get_n_pending (f->lookup) > 0)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_usleep (100);
    }
  /* the answer was applied, not thrown away */
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);
}

/* An empty flush (a step without new keys) applies the answers that are
 * ready, so their batches let go of the requests they hold. */
static void
test_flush_collects_answers (Fixture       *f,
                             gconstpointer  data)
{
  KvRequest *request = kv_request_new ("short-lived", NULL);
  gint64 deadline;

  g_object_add_weak_pointer (G_OBJECT (request), (gpointer *) &request);
  g_assert_cmpint (lookup (f, HIT_A, request), ==, KV_LOOKUP_RESULT_RETRY);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_cleanup (f->lookup, "short-lived");
  g_object_unref (request);
  /* the posted batch still holds it */
  g_assert_nonnull (request);

  deadline = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  while (request != NULL)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_usleep (100);
      kv_async_lookup_flush (f->lookup);
    }
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 1);
}

static void
test_multi_key_batch (Fixture       *f,
                      gconstpointer  data)
{
  Call *call;

  lookup (f, HIT_A, f->r1);
  lookup (f, MISS_A, f->r1);
  lookup (f, HIT_B, f->r1);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);

  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 1);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 1);
  call = recorder_call (f->rec, 0);
  g_assert_cmpstr (call->request_id, ==, "r1");
  g_assert_cmpuint (call->keys->len, ==, 3);
  g_assert_cmpuint (kv_key_get_hash (g_ptr_array_index (call->keys, 0), NULL)[0], ==, HIT_A);
  g_assert_cmpuint (kv_key_get_hash (g_ptr_array_index (call->keys, 1), NULL)[0], ==, MISS_A);
  g_assert_cmpuint (kv_key_get_hash (g_ptr_array_index (call->keys, 2), NULL)[0], ==, HIT_B);

  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, MISS_A, f->r1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, HIT_B, f->r1), ==, KV_LOOKUP_RESULT_HIT);
}

static void
test_one_batch_per_step (Fixture       *f,
                         gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  lookup (f, MISS_A, f->r2);
  lookup (f, HIT_B, f->r1);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);

  /* One batch for the step; the function is called once per request. */
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 1);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 2);
  g_assert_cmpstr (recorder_call (f->rec, 0)->request_id, ==, "r1");
  g_assert_cmpuint (recorder_call (f->rec, 0)->keys->len, ==, 2);
  g_assert_cmpstr (recorder_call (f->rec, 1)->request_id, ==, "r2");
  g_assert_cmpuint (recorder_call (f->rec, 1)->keys->len, ==, 1);
}

static void
test_cleanup_removes (Fixture       *f,
                      gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);

  kv_async_lookup_cleanup (f->lookup, "r1");
  g_assert_cmpuint (kv_async_lookup_get_n_keys (f->lookup), ==, 0);

  /* A fresh request checks again. */
  g_assert_cmpint (lookup (f, HIT_A, f->r2), ==, KV_LOOKUP_RESULT_RETRY);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 2);
  g_assert_cmpint (lookup (f, HIT_A, f->r2), ==, KV_LOOKUP_RESULT_HIT);
}

static void
test_cleanup_preserves_shared (Fixture       *f,
                               gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  lookup (f, HIT_A, f->r2);
  lookup (f, MISS_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);

  kv_async_lookup_cleanup (f->lookup, "r1");
  /* HIT_A is still referenced by r2; MISS_A only by r1. */
  g_assert_cmpuint (kv_async_lookup_get_n_keys (f->lookup), ==, 1);
  g_assert_cmpint (lookup (f, HIT_A, f->r2), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, HIT_A, f->r3), ==, KV_LOOKUP_RESULT_HIT);

  kv_async_lookup_cleanup (f->lookup, "r2");
  kv_async_lookup_cleanup (f->lookup, "r3");
  g_assert_cmpuint (kv_async_lookup_get_n_keys (f->lookup), ==, 0);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 1);
}

static void
test_cleanup_before_answer (Fixture       *f,
                            gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_cleanup (f->lookup, "r1");
  /* The late answer finds no state and is dropped. */
  kv_async_lookup_wait_idle (f->lookup);
  g_assert_cmpuint (kv_async_lookup_get_n_keys (f->lookup), ==, 0);
  g_assert_cmpint (lookup (f, HIT_A, f->r2), ==, KV_LOOKUP_RESULT_RETRY);
}

static void
test_empty_flush (Fixture       *f,
                  gconstpointer  data)
{
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_flush (f->lookup);
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 0);
  g_assert_cmpuint (kv_async_lookup_get_n_pending (f->lookup), ==, 0);

  /* Known keys are not posted again either. */
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 1);
}

static void
test_duplicate_batched_once (Fixture       *f,
                             gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  lookup (f, HIT_A, f->r1);
  lookup (f, HIT_A, f->r2);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);

  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 1);
  g_assert_cmpuint (recorder_call (f->rec, 0)->keys->len, ==, 1);
  g_assert_cmpint (lookup (f, HIT_A, f->r2), ==, KV_LOOKUP_RESULT_HIT);
}

static void
test_unknown_cleanup (Fixture       *f,
                      gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_cleanup (f->lookup, "nobody");
  g_assert_cmpuint (kv_async_lookup_get_n_keys (f->lookup), ==, 1);
}

static void
test_multi_step (Fixture       *f,
                 gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  lookup (f, MISS_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  lookup (f, HIT_B, f->r2);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);

  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 3);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 3);
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, MISS_A, f->r1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, HIT_B, f->r2), ==, KV_LOOKUP_RESULT_HIT);
}

static void
test_shutdown (Fixture       *f,
               gconstpointer  data)
{
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  lookup (f, HIT_B, f->r1);          /* queued, never flushed */

  /* Posted batches are answered before the worker stops. */
  kv_async_lookup_shutdown (f->lookup);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 1);
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, HIT_B, f->r1), ==, KV_LOOKUP_RESULT_MISS);

  /* After shutdown no worker runs: new keys are misses. */
  g_assert_cmpint (lookup (f, HIT_B + 2, f->r2), ==, KV_LOOKUP_RESULT_MISS);
  kv_async_lookup_flush (f->lookup);
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 1);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 1);

  kv_async_lookup_shutdown (f->lookup);
}

static void
test_mark_miss (Fixture       *f,
                gconstpointer  data)
{
  g_autoptr(KvKey) a = make_key (HIT_A);
  g_autoptr(KvKey) b = make_key (HIT_B);
  g_autoptr(KvKey) unknown = make_key (0x55);
  KvKey *keys[] = { a, unknown };
  KvKey *b_keys[] = { b };

  lookup (f, HIT_A, f->r1);
  lookup (f, HIT_B, f->r1);
  kv_async_lookup_flush (f->lookup);
  kv_async_lookup_wait_idle (f->lookup);
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);

  /* A failed load: the same request must not be told HIT again (#49176). */
  kv_async_lookup_mark_miss (f->lookup, keys, G_N_ELEMENTS (keys));
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, HIT_A, f->r2), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_async_lookup_get_n_keys (f->lookup), ==, 2);

  kv_async_lookup_invalidate (f->lookup, b_keys, 1);
  g_assert_cmpint (lookup (f, HIT_B, f->r1), ==, KV_LOOKUP_RESULT_MISS);
  kv_async_lookup_flush (f->lookup);
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 1);

  /* Once every request is gone, a fresh request checks again. */
  kv_async_lookup_cleanup (f->lookup, "r1");
  kv_async_lookup_cleanup (f->lookup, "r2");
  g_assert_cmpint (lookup (f, HIT_A, f->r3), ==, KV_LOOKUP_RESULT_RETRY);
}

static void
test_mark_miss_before_answer (Fixture       *f,
                              gconstpointer  data)
{
  g_autoptr(KvKey) a = make_key (HIT_A);

  f->rec->gated = TRUE;
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  recorder_wait_entered (f->rec, 1);
  kv_async_lookup_mark_miss (f->lookup, &a, 1);
  recorder_open_gate (f->rec);
  kv_async_lookup_wait_idle (f->lookup);
  /* The worker's (stale) hit does not override the miss. */
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_MISS);
}

static void
test_bounded_overflow (Fixture       *f,
                       gconstpointer  data)
{
  /* Occupy the only worker... */
  f->rec->gated = TRUE;
  lookup (f, HIT_A, f->r1);
  kv_async_lookup_flush (f->lookup);
  recorder_wait_entered (f->rec, 1);

  /* ...then one batch per request: r1's waits in the queue (max 1), r2's
   * and r3's find it full and resolve to misses at once. */
  lookup (f, HIT_B, f->r1);
  lookup (f, HIT_B + 2, f->r2);
  lookup (f, HIT_B + 4, f->r3);
  lookup (f, HIT_B + 6, f->r3);
  kv_async_lookup_flush (f->lookup);
  g_assert_cmpuint (kv_async_lookup_get_n_posted (f->lookup), ==, 2);
  g_assert_cmpuint (kv_async_lookup_take_dropped_keys (f->lookup), ==, 3);
  g_assert_cmpuint (kv_async_lookup_take_dropped_keys (f->lookup), ==, 0);
  g_assert_cmpint (lookup (f, HIT_B + 2, f->r2), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, HIT_B + 4, f->r3), ==, KV_LOOKUP_RESULT_MISS);

  recorder_open_gate (f->rec);
  kv_async_lookup_wait_idle (f->lookup);
  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (lookup (f, HIT_B, f->r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (recorder_n_calls (f->rec), ==, 2);
}

static void
test_bounded_step_cap (void)
{
  Recorder *rec = recorder_new ();
  g_autoptr(KvAsyncLookup) al = kv_async_lookup_new ("capped", batch_func, rec, recorder_free,
                                                     2, 8, 2);
  g_autoptr(KvRequest) r1 = kv_request_new ("r1", NULL);
  g_autoptr(KvKey) a = make_key (HIT_A);
  g_autoptr(KvKey) b = make_key (HIT_B);
  g_autoptr(KvKey) c = make_key (HIT_B + 2);

  g_assert_cmpint (kv_async_lookup_lookup (al, a, r1), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpint (kv_async_lookup_lookup (al, b, r1), ==, KV_LOOKUP_RESULT_RETRY);
  /* Beyond max_keys_per_step: a miss at once, never scheduler backpressure. */
  g_assert_cmpint (kv_async_lookup_lookup (al, c, r1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_async_lookup_take_dropped_keys (al), ==, 1);

  kv_async_lookup_flush (al);
  kv_async_lookup_wait_idle (al);
  g_assert_cmpuint (recorder_n_calls (rec), ==, 1);
  g_assert_cmpuint (recorder_call (rec, 0)->keys->len, ==, 2);
  g_assert_cmpint (kv_async_lookup_lookup (al, b, r1), ==, KV_LOOKUP_RESULT_HIT);

  /* The cap is per step. */
  kv_async_lookup_cleanup (al, "r1");
  g_assert_cmpint (kv_async_lookup_lookup (al, c, r1), ==, KV_LOOKUP_RESULT_RETRY);
}

static void
test_failed_batch (Fixture       *f,
                   gconstpointer  data)
{
  f->rec->fail = TRUE;
  lookup (f, HIT_A, f->r1);
  lookup (f, HIT_B, f->r1);
  kv_async_lookup_flush (f->lookup);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_WARNING,
                         "Batch lookup failed on tier test for 2 keys of request r1*");
  kv_async_lookup_wait_idle (f->lookup);
  g_test_assert_expected_messages ();

  g_assert_cmpint (lookup (f, HIT_A, f->r1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (lookup (f, HIT_B, f->r1), ==, KV_LOOKUP_RESULT_MISS);
}

static gint n_key_calls;

static gboolean
key_func (KvKey     *key,
          KvRequest *request,
          gpointer   user_data)
{
  g_assert_cmpstr (user_data, ==, "data");
  g_atomic_int_inc (&n_key_calls);
  return is_stored (key);
}

static void
test_key_func (void)
{
  g_autoptr(KvAsyncLookup) al = kv_async_lookup_new_for_keys ("py", key_func, g_strdup ("data"), g_free,
                                                              3, 0, 0);
  g_autoptr(KvRequest) r1 = kv_request_new ("r1", NULL);
  g_autoptr(KvKey) a = make_key (HIT_A);
  g_autoptr(KvKey) m = make_key (MISS_B);

  g_assert_cmpstr (kv_async_lookup_get_tier_type (al), ==, "py");
  kv_async_lookup_lookup (al, a, r1);
  kv_async_lookup_lookup (al, m, r1);
  kv_async_lookup_flush (al);
  kv_async_lookup_wait_idle (al);
  g_assert_cmpint (g_atomic_int_get (&n_key_calls), ==, 2);
  g_assert_cmpint (kv_async_lookup_lookup (al, a, r1), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_async_lookup_lookup (al, m, r1), ==, KV_LOOKUP_RESULT_MISS);
}

/* Finalizing with work in flight joins the workers (checked by valgrind). */
static void
test_finalize_in_flight (void)
{
  Recorder *rec = recorder_new ();
  KvAsyncLookup *al = kv_async_lookup_new ("fin", batch_func, rec, recorder_free, 4, 0, 0);
  g_autoptr(KvRequest) r1 = kv_request_new ("r1", NULL);

  for (guint8 i = 0; i < 64; i++)
    {
      g_autoptr(KvKey) key = make_key (i);

      kv_async_lookup_lookup (al, key, r1);
      if (i % 8 == 7)
        kv_async_lookup_flush (al);
    }
  g_object_unref (al);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);
  main_thread = g_thread_self ();

#define ADD(path, func) \
  g_test_add ("/kvtier/async-lookup/" path, Fixture, NULL, fixture_setup, func, fixture_teardown)

  ADD ("new-key-retry", test_new_key_retry);
  ADD ("hit-and-miss-after-flush", test_hit_and_miss_after_flush);
  ADD ("drain-before-lookup", test_drain_before_lookup);
  ADD ("pending-ends-without-lookup", test_pending_ends_without_lookup);
  ADD ("flush-collects-answers", test_flush_collects_answers);
  ADD ("multi-key-batch", test_multi_key_batch);
  ADD ("one-batch-per-step", test_one_batch_per_step);
  ADD ("cleanup-removes", test_cleanup_removes);
  ADD ("cleanup-preserves-shared", test_cleanup_preserves_shared);
  ADD ("cleanup-before-answer", test_cleanup_before_answer);
  ADD ("empty-flush-posts-nothing", test_empty_flush);
  ADD ("duplicate-batched-once", test_duplicate_batched_once);
  ADD ("unknown-cleanup-noop", test_unknown_cleanup);
  ADD ("multi-step-flushes", test_multi_step);
  ADD ("shutdown-stops-worker", test_shutdown);
  ADD ("mark-miss", test_mark_miss);
  ADD ("mark-miss-before-answer", test_mark_miss_before_answer);
  ADD ("failed-batch-is-miss", test_failed_batch);
  g_test_add ("/kvtier/async-lookup/bounded/overflow-is-miss", Fixture, NULL,
              fixture_setup_bounded, test_bounded_overflow, fixture_teardown);
  g_test_add_func ("/kvtier/async-lookup/bounded/step-cap", test_bounded_step_cap);
  g_test_add_func ("/kvtier/async-lookup/key-func", test_key_func);
  g_test_add_func ("/kvtier/async-lookup/finalize-in-flight", test_finalize_in_flight);

#undef ADD

  return g_test_run ();
}
