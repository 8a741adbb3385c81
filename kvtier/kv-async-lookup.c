/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-async-lookup.h"
#include "kv-async-lookup-private.h"

/* A verdict not known yet: neither TRUE nor FALSE. Workers also prefill
 * the batch function's result array with it to see which entries the
 * function left unset. */
#define VERDICT_UNKNOWN (-1)

typedef struct
{
  char       *id;
  /* Set of the KvKey pointers this request looked up; the keys are owned
   * by their KeyState. */
  GHashTable *keys;
} RequestEntry;

typedef struct
{
  KvKey     *key;
  gint       verdict;
  /* The RequestEntry pointers (not owned) that reference this key. Short:
   * usually one or two requests share a chunk. */
  GPtrArray *requests;
} KeyState;

/* The keys one request looked up in one step, as posted to a worker. */
typedef struct
{
  KvRequest *request;
  GPtrArray *keys;      /* KvKey, owned */
  gboolean  *results;   /* keys->len entries, filled by the worker */
  gboolean   failed;
} LookupGroup;

/* One item on the work queue; it travels back on the result queue so that
 * every reference it holds is dropped on the owner thread. */
typedef struct
{
  GPtrArray *groups;    /* LookupGroup, owned */
} LookupBatch;

struct _KvAsyncLookup
{
  GObject parent_instance;

  char                   *tier_type;
  KvAsyncLookupBatchFunc  batch_func;
  KvAsyncLookupKeyFunc    key_func;
  gpointer                user_data;
  GDestroyNotify          destroy;
  guint                   n_workers;
  guint                   max_pending_batches;
  guint                   max_keys_per_step;

  /* Owner-thread state: no lock needed. */
  GHashTable   *states;            /* KvKey* -> KeyState* */
  GHashTable   *requests;          /* id -> RequestEntry* */
  KvRequest    *last_request;      /* not owned; cache for the hot path */
  RequestEntry *last_entry;
  GPtrArray    *step_groups;       /* LookupGroup* of this step, in order */
  GHashTable   *step_group_by_id;  /* request id -> LookupGroup* (not owned) */
  guint         n_step_keys;
  guint         n_unapplied;       /* batches posted, answers not applied */
  guint         n_posted;
  guint64       dropped_keys;
  gboolean      shut_down;

  /* Shared with the workers. */
  GPtrArray    *threads;           /* GThread*, started lazily */
  GAsyncQueue  *work_queue;        /* LookupBatch* or the stop sentinel */
  GAsyncQueue  *result_queue;      /* LookupBatch* */
  gint          n_queued;          /* atomic: posted, not yet taken */
  gint          n_results_ready;   /* atomic: answered, not yet drained */
  GMutex        idle_mutex;
  GCond         idle_cond;
  guint         n_in_flight;       /* under idle_mutex */
};

static char stop_sentinel;
#define STOP_ITEM ((gpointer) &stop_sentinel)

/**
 * KvAsyncLookup:
 *
 * Makes a tier's existence checks non-blocking: the scheduler asks, a
 * worker thread checks in the background, and the answer is cached.
 *
 * A tier that must ask slow storage whether it holds a chunk (a `stat` on
 * a network filesystem, a round trip to a server) composes one of these and
 * implements only a batch check that runs on a worker thread:
 *
 * - [method@Kv.AsyncLookup.lookup] (the tier's `lookup`) answers
 *   %KV_LOOKUP_RESULT_RETRY for a key seen for the first time and queues it;
 *   once a worker has answered it returns %KV_LOOKUP_RESULT_HIT or
 *   %KV_LOOKUP_RESULT_MISS. The same key looked up twice, by any request, is
 *   checked once.
 * - [method@Kv.AsyncLookup.flush] (the tier's `on_schedule_end`) posts the
 *   keys of the step to the workers, which check them while the model runs;
 *   answers are applied on the owner thread at the next lookup.
 * - [method@Kv.AsyncLookup.cleanup] (the tier's `on_request_finished`)
 *   forgets the request. A verdict is cached only while some request
 *   references its key, so a fresh request checks again.
 * - [method@Kv.AsyncLookup.mark_miss] turns a cached hit into a miss after
 *   a load of the key failed, so the scheduler does not promote the same
 *   broken chunk every step (the reference's issue #49176).
 *
 * With `max_pending_batches` > 0 the lookup is bounded: each request's keys
 * of a step form their own batch, and a batch that finds the queue full,
 * like a key beyond `max_keys_per_step` in one step, resolves to a miss at
 * once and is counted (see [method@Kv.AsyncLookup.take_dropped_keys]). A
 * saturated metadata path is a cache miss, never scheduler backpressure.
 *
 * Threading: every method runs on the owner thread (the thread that drives
 * the tier); only the check function runs on the workers, and the two sides
 * exchange batches through queues, so the owner's tables need no lock.
 * Tiers written in C use [ctor@Kv.AsyncLookup.new]; tiers written in Python
 * may use [ctor@Kv.AsyncLookup.new_for_keys] (PyGObject takes the GIL on
 * the worker thread). Tiers written in JavaScript must not use it at all:
 * GJS refuses to run JavaScript on another thread and the check would
 * silently answer "miss"; they do their checks with GIO async calls on the
 * main loop instead.
 */
G_DEFINE_FINAL_TYPE (KvAsyncLookup, kv_async_lookup, G_TYPE_OBJECT)

static void
request_entry_free (gpointer data)
{
  RequestEntry *entry = data;

  g_hash_table_unref (entry->keys);
  g_free (entry->id);
  g_free (entry);
}

static void
key_state_free (gpointer data)
{
  KeyState *state = data;

  g_ptr_array_unref (state->requests);
  kv_key_unref (state->key);
  g_free (state);
}

static LookupGroup *
lookup_group_new (KvRequest *request)
{
  LookupGroup *group = g_new0 (LookupGroup, 1);

  group->request = g_object_ref (request);
  group->keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  return group;
}

static void
lookup_group_free (gpointer data)
{
  LookupGroup *group = data;

  /* NULL: a slot the bounded flush moved into a batch. */
  if (group == NULL)
    return;

  g_ptr_array_unref (group->keys);
  g_free (group->results);
  g_object_unref (group->request);
  g_free (group);
}

static LookupBatch *
lookup_batch_new (void)
{
  LookupBatch *batch = g_new0 (LookupBatch, 1);

  batch->groups = g_ptr_array_new_with_free_func (lookup_group_free);
  return batch;
}

static void
lookup_batch_free (gpointer data)
{
  LookupBatch *batch = data;

  g_ptr_array_unref (batch->groups);
  g_free (batch);
}

/* Worker side: answer every group of the batch. */
static void
run_group (KvAsyncLookup *self,
           LookupGroup   *group)
{
  guint n = group->keys->len;

  group->results = g_new (gboolean, MAX (n, 1));
  for (guint i = 0; i < n; i++)
    group->results[i] = VERDICT_UNKNOWN;

  if (self->batch_func != NULL)
    {
      self->batch_func ((KvKey * const *) group->keys->pdata, n, group->request,
                        group->results, self->user_data);
      for (guint i = 0; i < n; i++)
        {
          if (group->results[i] != TRUE && group->results[i] != FALSE)
            {
              group->failed = TRUE;
              break;
            }
        }
    }
  else if (self->key_func != NULL)
    {
      for (guint i = 0; i < n; i++)
        group->results[i] = self->key_func (g_ptr_array_index (group->keys, i),
                                            group->request, self->user_data) ? TRUE : FALSE;
    }
  else
    {
      group->failed = TRUE;
    }

  if (group->failed)
    {
      for (guint i = 0; i < n; i++)
        group->results[i] = FALSE;
    }
}

static gpointer
worker_main (gpointer data)
{
  KvAsyncLookup *self = data;

  for (;;)
    {
      gpointer item = g_async_queue_pop (self->work_queue);
      LookupBatch *batch;

      if (item == STOP_ITEM)
        break;

      batch = item;
      g_atomic_int_add (&self->n_queued, -1);

      for (guint i = 0; i < batch->groups->len; i++)
        run_group (self, g_ptr_array_index (batch->groups, i));

      g_async_queue_push (self->result_queue, batch);
      g_atomic_int_inc (&self->n_results_ready);

      g_mutex_lock (&self->idle_mutex);
      self->n_in_flight -= 1;
      g_cond_broadcast (&self->idle_cond);
      g_mutex_unlock (&self->idle_mutex);
    }

  return NULL;
}

static void
start_workers (KvAsyncLookup *self)
{
  g_autofree char *name = NULL;

  if (self->threads->len > 0)
    return;

  /* Thread names are cut to 15 bytes by the kernel. */
  name = g_strdup_printf ("kv-lookup-%s", self->tier_type);
  for (guint i = 0; i < self->n_workers; i++)
    g_ptr_array_add (self->threads, g_thread_new (name, worker_main, self));
}

static void
post_batch (KvAsyncLookup *self,
            LookupBatch   *batch)
{
  start_workers (self);

  g_mutex_lock (&self->idle_mutex);
  self->n_in_flight += 1;
  g_mutex_unlock (&self->idle_mutex);

  self->n_unapplied += 1;
  self->n_posted += 1;
  g_atomic_int_inc (&self->n_queued);
  g_async_queue_push (self->work_queue, batch);
}

/* Resolves every key of @group that has no verdict yet to a miss. */
static void
resolve_group_as_miss (KvAsyncLookup *self,
                       LookupGroup   *group)
{
  for (guint i = 0; i < group->keys->len; i++)
    {
      KeyState *state = g_hash_table_lookup (self->states, g_ptr_array_index (group->keys, i));

      if (state != NULL && state->verdict == VERDICT_UNKNOWN)
        state->verdict = FALSE;
    }
}

static void
apply_batch (KvAsyncLookup *self,
             LookupBatch   *batch)
{
  for (guint g = 0; g < batch->groups->len; g++)
    {
      LookupGroup *group = g_ptr_array_index (batch->groups, g);

      if (group->failed)
        g_warning ("Batch lookup failed on tier %s for %u keys of request %s; "
                   "treating them as misses",
                   self->tier_type, group->keys->len, kv_request_get_id (group->request));

      for (guint i = 0; i < group->keys->len; i++)
        {
          KeyState *state = g_hash_table_lookup (self->states, g_ptr_array_index (group->keys, i));

          /* States removed by cleanup are ignored; so are verdicts set
           * meanwhile (a key marked as a miss stays a miss). */
          if (state != NULL && state->verdict == VERDICT_UNKNOWN)
            state->verdict = group->results[i];
        }
    }
}

static void
discard_step (KvAsyncLookup *self)
{
  g_hash_table_remove_all (self->step_group_by_id);
  g_ptr_array_set_size (self->step_groups, 0);
  self->n_step_keys = 0;
}

static void
kv_async_lookup_finalize (GObject *object)
{
  KvAsyncLookup *self = KV_ASYNC_LOOKUP (object);

  kv_async_lookup_shutdown (self);

  /* Answers nobody drained any more. */
  g_async_queue_unref (self->result_queue);
  g_async_queue_unref (self->work_queue);
  g_ptr_array_unref (self->threads);
  g_hash_table_unref (self->step_group_by_id);
  g_ptr_array_unref (self->step_groups);
  g_hash_table_unref (self->requests);
  g_hash_table_unref (self->states);
  g_mutex_clear (&self->idle_mutex);
  g_cond_clear (&self->idle_cond);

  if (self->destroy != NULL)
    self->destroy (self->user_data);
  g_free (self->tier_type);

  G_OBJECT_CLASS (kv_async_lookup_parent_class)->finalize (object);
}

static void
kv_async_lookup_class_init (KvAsyncLookupClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_async_lookup_finalize;
}

static void
kv_async_lookup_init (KvAsyncLookup *self)
{
  self->tier_type = g_strdup ("unnamed");
  self->n_workers = 1;
  self->states = g_hash_table_new_full (kv_key_hash, kv_key_equal, NULL, key_state_free);
  self->requests = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, request_entry_free);
  self->step_groups = g_ptr_array_new_with_free_func (lookup_group_free);
  self->step_group_by_id = g_hash_table_new (g_str_hash, g_str_equal);
  self->threads = g_ptr_array_new ();
  self->work_queue = g_async_queue_new ();
  self->result_queue = g_async_queue_new_full (lookup_batch_free);
  g_mutex_init (&self->idle_mutex);
  g_cond_init (&self->idle_cond);
}

static KvAsyncLookup *
async_lookup_new (const char     *tier_type,
                  gpointer        user_data,
                  GDestroyNotify  destroy,
                  guint           n_workers,
                  guint           max_pending_batches,
                  guint           max_keys_per_step)
{
  KvAsyncLookup *self = g_object_new (KV_TYPE_ASYNC_LOOKUP, NULL);

  g_free (self->tier_type);
  self->tier_type = g_strdup (tier_type);
  self->user_data = user_data;
  self->destroy = destroy;
  self->n_workers = MAX (n_workers, 1);
  self->max_pending_batches = max_pending_batches;
  self->max_keys_per_step = max_keys_per_step;
  return self;
}

/**
 * kv_async_lookup_new: (skip)
 * @tier_type: the tier's type name, for thread names and messages
 * @func: the batch check, run on a worker thread
 * @user_data: data for @func
 * @destroy: (nullable): frees @user_data when the lookup is finalized
 * @n_workers: worker threads (0 means 1); with more than one, @func runs
 *   concurrently
 * @max_pending_batches: 0 for the unbounded mode (one batch per step);
 *   otherwise the bounded mode: one batch per request per step, and at
 *   most this many batches waiting for a worker
 * @max_keys_per_step: at most this many new keys are checked per step, the
 *   rest resolve to a miss at once; 0 for no limit
 *
 * Creates an asynchronous lookup whose workers call @func once per request
 * and batch. Workers start at the first flush that posts a batch.
 *
 * Owner thread: the thread that calls this is the one that must call every
 * other method.
 *
 * Returns: (transfer full): a new asynchronous lookup
 */
KvAsyncLookup *
kv_async_lookup_new (const char             *tier_type,
                     KvAsyncLookupBatchFunc  func,
                     gpointer                user_data,
                     GDestroyNotify          destroy,
                     guint                   n_workers,
                     guint                   max_pending_batches,
                     guint                   max_keys_per_step)
{
  KvAsyncLookup *self;

  g_return_val_if_fail (tier_type != NULL, NULL);
  g_return_val_if_fail (func != NULL, NULL);

  self = async_lookup_new (tier_type, user_data, destroy, n_workers,
                           max_pending_batches, max_keys_per_step);
  self->batch_func = func;
  return self;
}

/**
 * kv_async_lookup_new_for_keys:
 * @tier_type: the tier's type name, for thread names and messages
 * @func: (scope notified) (closure user_data) (destroy destroy): the check
 *   of one key, run on a worker thread
 * @user_data: data for @func
 * @destroy: (nullable): frees @user_data when the lookup is finalized
 * @n_workers: worker threads (0 means 1); with more than one, @func runs
 *   concurrently
 * @max_pending_batches: 0 for the unbounded mode; see
 *   [ctor@Kv.AsyncLookup.new]
 * @max_keys_per_step: at most this many new keys are checked per step; 0
 *   for no limit
 *
 * Creates an asynchronous lookup whose workers call @func once per key.
 * This is the constructor for tiers written in Python (the check runs on a
 * worker thread with the GIL held); tiers written in JavaScript must not use
 * it (GJS blocks JavaScript called from another thread, and every key would
 * read as a miss). With PyGObject 3.42 pass the user data explicitly
 * (`Kv.AsyncLookup.new_for_keys ("mytier", check, None, 4, 0, 0)`); the
 * function then receives it as a third argument.
 *
 * Owner thread: the thread that calls this is the one that must call every
 * other method.
 *
 * Returns: (transfer full): a new asynchronous lookup
 */
KvAsyncLookup *
kv_async_lookup_new_for_keys (const char           *tier_type,
                              KvAsyncLookupKeyFunc  func,
                              gpointer              user_data,
                              GDestroyNotify        destroy,
                              guint                 n_workers,
                              guint                 max_pending_batches,
                              guint                 max_keys_per_step)
{
  KvAsyncLookup *self;

  g_return_val_if_fail (tier_type != NULL, NULL);
  g_return_val_if_fail (func != NULL, NULL);

  self = async_lookup_new (tier_type, user_data, destroy, n_workers,
                           max_pending_batches, max_keys_per_step);
  self->key_func = func;
  return self;
}

/**
 * kv_async_lookup_get_tier_type:
 * @self: an asynchronous lookup
 *
 * Gets the tier type name given at construction.
 *
 * Returns: the tier type
 */
const char *
kv_async_lookup_get_tier_type (KvAsyncLookup *self)
{
  g_return_val_if_fail (KV_IS_ASYNC_LOOKUP (self), NULL);

  return self->tier_type;
}

static RequestEntry *
get_request_entry (KvAsyncLookup *self,
                   KvRequest     *request)
{
  const char *id = kv_request_get_id (request);
  RequestEntry *entry;

  /* A request usually looks up all its keys in a row. The id is compared
   * too, in case a finished request's memory was reused by a new one. */
  if (request == self->last_request && g_str_equal (self->last_entry->id, id))
    return self->last_entry;

  entry = g_hash_table_lookup (self->requests, id);
  if (entry == NULL)
    {
      entry = g_new0 (RequestEntry, 1);
      entry->id = g_strdup (id);
      entry->keys = g_hash_table_new (kv_key_hash, kv_key_equal);
      g_hash_table_insert (self->requests, entry->id, entry);
    }

  self->last_request = request;
  self->last_entry = entry;
  return entry;
}

static void
queue_key (KvAsyncLookup *self,
           KeyState      *state,
           KvRequest     *request)
{
  const char *id = kv_request_get_id (request);
  LookupGroup *group = g_hash_table_lookup (self->step_group_by_id, id);

  if (group == NULL)
    {
      group = lookup_group_new (request);
      g_ptr_array_add (self->step_groups, group);
      g_hash_table_insert (self->step_group_by_id,
                           (gpointer) kv_request_get_id (group->request), group);
    }

  g_ptr_array_add (group->keys, kv_key_ref (state->key));
  self->n_step_keys += 1;
}

/**
 * kv_async_lookup_lookup:
 * @self: an asynchronous lookup
 * @key: the key
 * @request: the request looking it up
 *
 * Answers from the cache. Answers that workers finished since the last call
 * are applied first. A key seen for the first time is queued for the next
 * [method@Kv.AsyncLookup.flush] and answered %KV_LOOKUP_RESULT_RETRY (or
 * %KV_LOOKUP_RESULT_MISS at once when the step already queued
 * `max_keys_per_step` keys, or after shutdown). The key stays cached until
 * every request that looked it up was cleaned up.
 *
 * Owner thread only. O(1); allocates only for a key or request seen for the
 * first time.
 *
 * Returns: %KV_LOOKUP_RESULT_HIT, %KV_LOOKUP_RESULT_MISS or
 *   %KV_LOOKUP_RESULT_RETRY
 */
KvLookupResult
kv_async_lookup_lookup (KvAsyncLookup *self,
                        KvKey         *key,
                        KvRequest     *request)
{
  RequestEntry *entry;
  KeyState *state;

  g_return_val_if_fail (KV_IS_ASYNC_LOOKUP (self), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (key != NULL, KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (KV_IS_REQUEST (request), KV_LOOKUP_RESULT_MISS);

  if (g_atomic_int_get (&self->n_results_ready) > 0)
    kv_async_lookup_drain_results (self);

  entry = get_request_entry (self, request);
  state = g_hash_table_lookup (self->states, key);
  if (state == NULL)
    {
      state = g_new0 (KeyState, 1);
      state->key = kv_key_ref (key);
      state->verdict = VERDICT_UNKNOWN;
      state->requests = g_ptr_array_new ();
      g_hash_table_insert (self->states, state->key, state);

      if (self->shut_down)
        {
          state->verdict = FALSE;
        }
      else if (self->max_keys_per_step > 0 && self->n_step_keys >= self->max_keys_per_step)
        {
          state->verdict = FALSE;
          self->dropped_keys += 1;
        }
      else
        {
          queue_key (self, state, request);
        }
    }

  if (g_hash_table_add (entry->keys, state->key))
    g_ptr_array_add (state->requests, entry);

  switch (state->verdict)
    {
    case TRUE:
      return KV_LOOKUP_RESULT_HIT;
    case FALSE:
      return KV_LOOKUP_RESULT_MISS;
    default:
      return KV_LOOKUP_RESULT_RETRY;
    }
}

/**
 * kv_async_lookup_flush:
 * @self: an asynchronous lookup
 *
 * Posts the keys queued in this step to the workers: one batch for the
 * whole step, or in the bounded mode one batch per request (a batch that
 * finds `max_pending_batches` batches waiting resolves to misses and is
 * counted as dropped). Posts nothing when no key was queued. Call it from
 * the tier's `on_schedule_end`, so the checks run while the model executes.
 *
 * Owner thread only.
 */
void
kv_async_lookup_flush (KvAsyncLookup *self)
{
  g_return_if_fail (KV_IS_ASYNC_LOOKUP (self));

  /* A tier may stop routing lookups here (the fs tier once its index is
   * ready): answers must still be collected, and the references their
   * batches hold dropped, every step. */
  if (g_atomic_int_get (&self->n_results_ready) > 0)
    kv_async_lookup_drain_results (self);

  if (self->step_groups->len == 0)
    return;

  if (self->max_pending_batches == 0)
    {
      LookupBatch *batch = lookup_batch_new ();

      /* Move the groups into the batch; the step containers start over. */
      g_hash_table_remove_all (self->step_group_by_id);
      g_ptr_array_extend_and_steal (batch->groups, g_steal_pointer (&self->step_groups));
      self->step_groups = g_ptr_array_new_with_free_func (lookup_group_free);
      self->n_step_keys = 0;
      post_batch (self, batch);
      return;
    }

  for (guint i = 0; i < self->step_groups->len; i++)
    {
      LookupGroup *group = g_ptr_array_index (self->step_groups, i);

      if ((guint) g_atomic_int_get (&self->n_queued) >= self->max_pending_batches)
        {
          resolve_group_as_miss (self, group);
          self->dropped_keys += group->keys->len;
        }
      else
        {
          LookupBatch *batch = lookup_batch_new ();

          g_ptr_array_add (batch->groups, g_steal_pointer (&self->step_groups->pdata[i]));
          post_batch (self, batch);
        }
    }
  discard_step (self);
}

/**
 * kv_async_lookup_drain_results:
 * @self: an asynchronous lookup
 *
 * Applies every answer the workers have finished. Keys cleaned up meanwhile
 * are skipped, and so are keys that got a verdict meanwhile (from
 * [method@Kv.AsyncLookup.mark_miss]). A batch whose check failed is logged
 * with a warning and its keys read as misses. [method@Kv.AsyncLookup.lookup]
 * drains by itself; call this only to apply answers without a lookup.
 *
 * Owner thread only.
 */
void
kv_async_lookup_drain_results (KvAsyncLookup *self)
{
  LookupBatch *batch;

  g_return_if_fail (KV_IS_ASYNC_LOOKUP (self));

  while ((batch = g_async_queue_try_pop (self->result_queue)) != NULL)
    {
      g_atomic_int_add (&self->n_results_ready, -1);
      self->n_unapplied -= 1;
      apply_batch (self, batch);
      lookup_batch_free (batch);
    }
}

/**
 * kv_async_lookup_cleanup:
 * @self: an asynchronous lookup
 * @request_id: the finished request's id
 *
 * Forgets @request_id: each key it looked up loses one reference, and a key
 * no request references any more is dropped from the cache (a later request
 * checks it again). An unknown id is ignored. Call it from the tier's
 * `on_request_finished`.
 *
 * Owner thread only.
 */
void
kv_async_lookup_cleanup (KvAsyncLookup *self,
                         const char    *request_id)
{
  RequestEntry *entry;
  GHashTableIter iter;
  gpointer key;

  g_return_if_fail (KV_IS_ASYNC_LOOKUP (self));
  g_return_if_fail (request_id != NULL);

  entry = g_hash_table_lookup (self->requests, request_id);
  if (entry == NULL)
    return;

  g_hash_table_iter_init (&iter, entry->keys);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      KeyState *state = g_hash_table_lookup (self->states, key);

      g_ptr_array_remove_fast (state->requests, entry);
      if (state->requests->len == 0)
        g_hash_table_remove (self->states, key);
    }

  if (self->last_entry == entry)
    {
      self->last_entry = NULL;
      self->last_request = NULL;
    }
  g_hash_table_remove (self->requests, request_id);
}

/**
 * kv_async_lookup_mark_miss:
 * @self: an asynchronous lookup
 * @keys: (array length=n_keys): keys that are known to be unloadable
 * @n_keys: the number of keys
 *
 * Turns the cached verdict of @keys into a miss, for as long as a request
 * references them. Call it when a load of the keys failed: a stale "hit"
 * would make the scheduler promote the same broken chunk every step. Keys
 * not in the cache are ignored (the next request checks them afresh).
 *
 * Owner thread only.
 */
void
kv_async_lookup_mark_miss (KvAsyncLookup *self,
                           KvKey * const *keys,
                           guint          n_keys)
{
  g_return_if_fail (KV_IS_ASYNC_LOOKUP (self));
  g_return_if_fail (keys != NULL || n_keys == 0);

  for (guint i = 0; i < n_keys; i++)
    {
      KeyState *state = g_hash_table_lookup (self->states, keys[i]);

      if (state != NULL)
        state->verdict = FALSE;
    }
}

/**
 * kv_async_lookup_invalidate:
 * @self: an asynchronous lookup
 * @keys: (array length=n_keys): keys whose cached verdict is stale
 * @n_keys: the number of keys
 *
 * The reference's other name for [method@Kv.AsyncLookup.mark_miss], which
 * it is: the verdict becomes a miss rather than unknown, because checking
 * again within the same request is what turned a failed load into a
 * livelock.
 *
 * Owner thread only.
 */
void
kv_async_lookup_invalidate (KvAsyncLookup *self,
                            KvKey * const *keys,
                            guint          n_keys)
{
  kv_async_lookup_mark_miss (self, keys, n_keys);
}

/**
 * kv_async_lookup_take_dropped_keys:
 * @self: an asynchronous lookup
 *
 * Returns how many keys resolved to a miss without a check since the last
 * call (bounded mode: queue full or step cap reached), and zeroes the count.
 *
 * Owner thread only.
 *
 * Returns: the number of dropped keys
 */
guint64
kv_async_lookup_take_dropped_keys (KvAsyncLookup *self)
{
  guint64 dropped;

  g_return_val_if_fail (KV_IS_ASYNC_LOOKUP (self), 0);

  dropped = self->dropped_keys;
  self->dropped_keys = 0;
  return dropped;
}

/**
 * kv_async_lookup_get_n_pending:
 * @self: an asynchronous lookup
 *
 * Counts the batches posted to the workers that no worker has answered yet.
 * Answers that are ready are applied first, so the count goes to zero once
 * the workers are done even if no lookup comes any more: a tier can report
 * pending work while it is not zero without keeping an engine stepping
 * forever.
 *
 * Owner thread only.
 *
 * Returns: the number of unanswered batches
 */
guint
kv_async_lookup_get_n_pending (KvAsyncLookup *self)
{
  g_return_val_if_fail (KV_IS_ASYNC_LOOKUP (self), 0);

  if (g_atomic_int_get (&self->n_results_ready) > 0)
    kv_async_lookup_drain_results (self);
  return self->n_unapplied;
}

/**
 * kv_async_lookup_shutdown:
 * @self: an asynchronous lookup
 *
 * Lets the workers answer every batch already posted, stops and joins them,
 * and applies the answers. Keys still queued for a flush, and keys looked up
 * later, resolve to misses. Calling it again does nothing; finalizing the
 * lookup shuts it down too. Blocks while a check is running.
 *
 * Owner thread only.
 */
void
kv_async_lookup_shutdown (KvAsyncLookup *self)
{
  g_return_if_fail (KV_IS_ASYNC_LOOKUP (self));

  if (self->shut_down)
    return;
  self->shut_down = TRUE;

  for (guint i = 0; i < self->step_groups->len; i++)
    resolve_group_as_miss (self, g_ptr_array_index (self->step_groups, i));
  discard_step (self);

  for (guint i = 0; i < self->threads->len; i++)
    g_async_queue_push (self->work_queue, STOP_ITEM);
  for (guint i = 0; i < self->threads->len; i++)
    g_thread_join (g_ptr_array_index (self->threads, i));
  g_ptr_array_set_size (self->threads, 0);

  kv_async_lookup_drain_results (self);
}

void
kv_async_lookup_wait_idle (KvAsyncLookup *self)
{
  g_return_if_fail (KV_IS_ASYNC_LOOKUP (self));

  g_mutex_lock (&self->idle_mutex);
  while (self->n_in_flight > 0)
    g_cond_wait (&self->idle_cond, &self->idle_mutex);
  g_mutex_unlock (&self->idle_mutex);

  kv_async_lookup_drain_results (self);
}

guint
kv_async_lookup_get_n_posted (KvAsyncLookup *self)
{
  g_return_val_if_fail (KV_IS_ASYNC_LOOKUP (self), 0);

  return self->n_posted;
}

guint
kv_async_lookup_get_n_keys (KvAsyncLookup *self)
{
  g_return_val_if_fail (KV_IS_ASYNC_LOOKUP (self), 0);

  return g_hash_table_size (self->states);
}
