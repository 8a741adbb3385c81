/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-tier-job.h"

#include "kv-enums.h"

/**
 * KvTierJob:
 *
 * What a tier does with a [struct@Kv.TransferJob] it accepted: what
 * [class@Gio.Task] is for an asynchronous function. The tier wraps the
 * job when it accepts it, marks each key done from whichever thread moved
 * its bytes, and reports the job once; the tier job builds the
 * [struct@Kv.JobResult] and hands it to the base class.
 *
 * ```c
 * static gboolean
 * my_tier_submit_load (KvSecondaryTier *tier, KvTransferJob *job, GError **error)
 * {
 *   KvTierJob *tier_job = kv_tier_job_new (tier, job);
 *
 *   start_reads (tier_job);   // each read ends in mark_landed/_missing/_failed
 *   return TRUE;              // the last read calls kv_tier_job_report()
 * }
 * ```
 *
 * Each key is marked once, from any thread:
 *
 * - [method@Kv.TierJob.mark_landed]: its bytes are in the tier (a store)
 *   or in its primary slot and verified (a load);
 * - [method@Kv.TierJob.mark_skipped]: a store's key the tier holds
 *   already;
 * - [method@Kv.TierJob.mark_missing]: a load's key the tier does not hold
 *   (any more): the data's failure, not the tier's;
 * - [method@Kv.TierJob.mark_failed]: anything else, with a #GError and
 *   [flags@Kv.KeyFailureFlags] saying whether the failure counts against
 *   the circuit breaker.
 *
 * [method@Kv.TierJob.report] then builds the result by the one
 * partial-load rule (see [struct@Kv.JobResult]): a store succeeds when
 * every key landed or was skipped; a load succeeds when every key landed,
 * and a load that landed only some names them, in the job's order, as its
 * successful keys. A key still unmarked at the report failed. The result
 * carries the transfer time (the span of the I/O recorded with
 * [method@Kv.TierJob.record_io], or the time from the tier job's creation
 * to its report) and bytes (one chunk per landed key). A store that
 * succeeded pushes one stored [struct@Kv.Event] with its keys first when
 * the tier's [property@Kv.SecondaryTier:enable-events] is set. The report
 * goes through [method@Kv.SecondaryTier.complete_job_full], so a job the
 * deadline failed already is dropped and counted as late, and the base
 * class turns the keys of a failed load into misses (the request's own
 * negative cache, and the tier's [property@Kv.SecondaryTier:async-lookup]
 * for every request).
 *
 * The job's [class@Gio.Cancellable] ([method@Kv.TierJob.get_cancellable])
 * is cancelled when the job's deadline passes or the tier shuts down
 * without having reported it; pass it to GIO calls. A C tier that must
 * abort its own I/O sets one [callback@Kv.TierJobCancelFunc] with
 * [method@Kv.TierJob.set_cancel_func] once its I/O is started: it runs
 * once, at once if the job was cancelled before, and never after the
 * report.
 *
 * Marks and the report are thread-safe; a tier job is reported exactly
 * once (a second report is a programming error: it logs a critical and is
 * ignored). Python tiers use it from their worker threads; JavaScript
 * tiers from their GIO callbacks on the main loop.
 */

typedef enum {
  KEY_UNMARKED,
  KEY_LANDED,
  KEY_SKIPPED,
  KEY_MISSING,
  KEY_FAILED,
} KeyMark;

/* What a "cancelled" handler reaches the tier job through: the handler
 * may run on the watchdog's thread while the tier job is being freed. */
typedef struct
{
  GWeakRef tier_job;
} CancelLink;

struct _KvTierJob
{
  GObject parent_instance;

  KvSecondaryTier *tier;
  KvTransferJob   *job;
  gboolean         is_load;
  guint            n_keys;
  gint64           created_us;

  GMutex           lock;
  GCond            cond;          /* the cancel func returned */
  guint8          *marks;         /* KeyMark per key */
  guint            n_marked;
  gboolean         fault;         /* a key failed without NOT_A_FAULT */
  gboolean         checksum_failed;
  GError          *first_error;
  gint64           io_start;      /* 0: no I/O recorded */
  gint64           io_end;
  gboolean         reported;

  GCancellable    *cancellable;   /* made on first use */
  KvTierJobCancelFunc cancel_func;
  gpointer         cancel_data;
  GDestroyNotify   cancel_notify;
  gulong           cancel_handler;
  gboolean         cancel_ran;
  GThread         *cancel_thread; /* running the cancel func now */
};

G_DEFINE_FINAL_TYPE (KvTierJob, kv_tier_job, G_TYPE_OBJECT)

static void
kv_tier_job_finalize (GObject *object)
{
  KvTierJob *self = KV_TIER_JOB (object);

  if (!self->reported)
    g_warning ("KvTierJob for job %" G_GUINT64_FORMAT " of tier %s was freed without being "
               "reported: the job is reported by its deadline or at shutdown only",
               kv_transfer_job_get_id (self->job), kv_secondary_tier_get_tier_type (self->tier));
  if (self->cancel_handler != 0)
    g_signal_handler_disconnect (self->cancellable, self->cancel_handler);
  if (self->cancel_notify != NULL)
    self->cancel_notify (self->cancel_data);
  g_clear_object (&self->cancellable);
  g_clear_error (&self->first_error);
  g_free (self->marks);
  kv_transfer_job_unref (self->job);
  g_object_unref (self->tier);
  g_cond_clear (&self->cond);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_tier_job_parent_class)->finalize (object);
}

static void
kv_tier_job_class_init (KvTierJobClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_tier_job_finalize;
}

static void
kv_tier_job_init (KvTierJob *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
}

/**
 * kv_tier_job_new:
 * @tier: the tier that accepted @job
 * @job: a job the tier received in [vfunc@Kv.SecondaryTier.submit_store]
 *   or [vfunc@Kv.SecondaryTier.submit_load]
 *
 * Wraps @job for @tier. Usually called in the submit vfunc, on the owner
 * thread; a tier with [property@Kv.SecondaryTier:lazy-promotion-allocation]
 * creates it once the load's slots are reserved
 * ([method@Kv.SecondaryTier.reserve_load_slots]), since the keys may
 * change until then. The transfer time counts from now unless
 * [method@Kv.TierJob.record_io] says otherwise.
 *
 * Returns: (transfer full): a new tier job, to be reported once
 */
KvTierJob *
kv_tier_job_new (KvSecondaryTier *tier,
                 KvTransferJob   *job)
{
  KvTierJob *self;

  g_return_val_if_fail (KV_IS_SECONDARY_TIER (tier), NULL);
  g_return_val_if_fail (job != NULL, NULL);

  self = g_object_new (KV_TYPE_TIER_JOB, NULL);
  self->tier = g_object_ref (tier);
  self->job = kv_transfer_job_ref (job);
  self->is_load = kv_transfer_job_is_promotion (job);
  self->n_keys = kv_transfer_job_get_n_keys (job);
  self->marks = g_new0 (guint8, MAX (self->n_keys, 1));
  self->created_us = g_get_monotonic_time ();
  return self;
}

/**
 * kv_tier_job_get_tier:
 * @self: a tier job
 *
 * Gets the tier the job belongs to. Any thread.
 *
 * Returns: (transfer none): the tier
 */
KvSecondaryTier *
kv_tier_job_get_tier (KvTierJob *self)
{
  g_return_val_if_fail (KV_IS_TIER_JOB (self), NULL);
  return self->tier;
}

/**
 * kv_tier_job_get_job:
 * @self: a tier job
 *
 * Gets the wrapped job: its keys and primary slots
 * ([method@Kv.TransferJob.get_keys], [method@Kv.TransferJob.get_chunk_ids]),
 * indexed as the marks are. Any thread.
 *
 * Returns: (transfer none): the job
 */
KvTransferJob *
kv_tier_job_get_job (KvTierJob *self)
{
  g_return_val_if_fail (KV_IS_TIER_JOB (self), NULL);
  return self->job;
}

/**
 * kv_tier_job_is_load:
 * @self: a tier job
 *
 * Whether the job is a load (a promotion into the primary tier) rather
 * than a store. Any thread.
 *
 * Returns: %TRUE for a load
 */
gboolean
kv_tier_job_is_load (KvTierJob *self)
{
  g_return_val_if_fail (KV_IS_TIER_JOB (self), FALSE);
  return self->is_load;
}

/**
 * kv_tier_job_get_n_keys:
 * @self: a tier job
 *
 * Counts the keys to mark. Any thread.
 *
 * Returns: the number of keys of the job
 */
guint
kv_tier_job_get_n_keys (KvTierJob *self)
{
  g_return_val_if_fail (KV_IS_TIER_JOB (self), 0);
  return self->n_keys;
}

/**
 * kv_tier_job_get_cancellable:
 * @self: a tier job
 *
 * The job's cancellable: cancelled when the job's deadline
 * ([property@Kv.SecondaryTier:deadline-ms]) passes, or when the tier is
 * shut down without having reported it. Pass it to the job's GIO calls.
 * Its [signal@Gio.Cancellable::cancelled] is emitted on the thread that
 * cancels (the watchdog's): JavaScript tiers only hand it to GIO. A store
 * cancelled this way must not be published: its slots were released.
 * Any thread.
 *
 * Returns: (transfer none): the job's cancellable
 */
GCancellable *
kv_tier_job_get_cancellable (KvTierJob *self)
{
  GCancellable *cancellable;

  g_return_val_if_fail (KV_IS_TIER_JOB (self), NULL);

  g_mutex_lock (&self->lock);
  if (self->cancellable == NULL)
    {
      self->cancellable = kv_secondary_tier_get_job_cancellable (self->tier, self->job);
      /* a job the base class does not track (not submitted through its
       * invokers) has no deadline: a cancellable nobody cancels */
      if (self->cancellable == NULL)
        self->cancellable = g_cancellable_new ();
    }
  cancellable = self->cancellable;
  g_mutex_unlock (&self->lock);
  return cancellable;
}

/* Runs the cancel func once, unless the job was reported. Any thread. */
static void
run_cancel_func (KvTierJob *self)
{
  KvTierJobCancelFunc func;

  g_mutex_lock (&self->lock);
  if (self->cancel_ran || self->reported || self->cancel_func == NULL)
    {
      g_mutex_unlock (&self->lock);
      return;
    }
  self->cancel_ran = TRUE;
  self->cancel_thread = g_thread_self ();
  func = self->cancel_func;
  g_mutex_unlock (&self->lock);

  func (self, self->cancel_data);

  g_mutex_lock (&self->lock);
  self->cancel_thread = NULL;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

static void
cancelled_cb (GCancellable *cancellable,
              gpointer      user_data)
{
  CancelLink *link = user_data;
  g_autoptr(KvTierJob) self = g_weak_ref_get (&link->tier_job);

  if (self != NULL)
    run_cancel_func (self);
}

static void
cancel_link_free (gpointer  data,
                  GClosure *closure)
{
  CancelLink *link = data;

  g_weak_ref_clear (&link->tier_job);
  g_free (link);
}

/**
 * kv_tier_job_set_cancel_func:
 * @self: a tier job
 * @func: (scope notified): what aborts the job's I/O
 * @user_data: (closure func): data for @func
 * @notify: (destroy user_data): frees @user_data when the tier job is freed
 *
 * Sets what aborts the job's I/O when its deadline passes (or the tier
 * shuts down without having reported it). Call it once, after the I/O it
 * aborts was started: @func runs at once, on this thread, if the job was
 * cancelled already. It runs at most once, never after
 * [method@Kv.TierJob.report] returned: a report made on another thread
 * while @func runs waits for it (so do not report while holding a lock
 * that @func takes). Any thread.
 *
 * @func runs on the thread that cancels, the library's watchdog thread:
 * JavaScript tiers pass [method@Kv.TierJob.get_cancellable] to GIO calls
 * instead.
 */
void
kv_tier_job_set_cancel_func (KvTierJob          *self,
                             KvTierJobCancelFunc func,
                             gpointer            user_data,
                             GDestroyNotify      notify)
{
  GCancellable *cancellable;
  CancelLink *link;
  gulong handler;

  g_return_if_fail (KV_IS_TIER_JOB (self));
  g_return_if_fail (func != NULL);

  cancellable = kv_tier_job_get_cancellable (self);

  g_mutex_lock (&self->lock);
  if (self->cancel_func != NULL)
    {
      g_mutex_unlock (&self->lock);
      g_critical ("kv_tier_job_set_cancel_func: job %" G_GUINT64_FORMAT " of tier %s has a "
                  "cancel func already; it is set once", kv_transfer_job_get_id (self->job),
                  kv_secondary_tier_get_tier_type (self->tier));
      if (notify != NULL)
        notify (user_data);
      return;
    }
  self->cancel_func = func;
  self->cancel_data = user_data;
  self->cancel_notify = notify;
  g_mutex_unlock (&self->lock);

  /* Not g_cancellable_connect(): its handler would hold the tier job,
   * and a handler may not disconnect itself. The link's weak reference
   * lets a handler running on another thread find the tier job gone. */
  link = g_new0 (CancelLink, 1);
  g_weak_ref_init (&link->tier_job, self);
  handler = g_signal_connect_data (cancellable, "cancelled", G_CALLBACK (cancelled_cb), link,
                                   cancel_link_free, 0);
  g_mutex_lock (&self->lock);
  if (self->reported)
    g_signal_handler_disconnect (cancellable, handler);
  else
    self->cancel_handler = handler;
  g_mutex_unlock (&self->lock);
  /* cancelled before the handler was there: run it now (once) */
  if (g_cancellable_is_cancelled (cancellable))
    run_cancel_func (self);
}

static const char *
mark_name (KeyMark mark)
{
  switch (mark)
    {
    case KEY_LANDED:
      return "landed";
    case KEY_SKIPPED:
      return "skipped";
    case KEY_MISSING:
      return "missing";
    case KEY_FAILED:
      return "failed";
    case KEY_UNMARKED:
    default:
      return "unmarked";
    }
}

/* Any thread. */
static void
mark (KvTierJob          *self,
      guint               index,
      KeyMark             what,
      KvKeyFailureFlags   flags,
      const GError       *error,
      const char         *function)
{
  KeyMark before;

  g_mutex_lock (&self->lock);
  if (self->reported)
    {
      g_mutex_unlock (&self->lock);
      g_critical ("%s: job %" G_GUINT64_FORMAT " of tier %s was reported already",
                  function, kv_transfer_job_get_id (self->job),
                  kv_secondary_tier_get_tier_type (self->tier));
      return;
    }
  before = self->marks[index];
  if (before != KEY_UNMARKED)
    {
      g_mutex_unlock (&self->lock);
      g_critical ("%s: key %u of job %" G_GUINT64_FORMAT " of tier %s is marked %s already",
                  function, index, kv_transfer_job_get_id (self->job),
                  kv_secondary_tier_get_tier_type (self->tier), mark_name (before));
      return;
    }
  self->marks[index] = what;
  self->n_marked++;
  if (what == KEY_FAILED)
    {
      if (flags & KV_KEY_FAILURE_FLAGS_CHECKSUM)
        self->checksum_failed = TRUE;
      else if (!(flags & KV_KEY_FAILURE_FLAGS_NOT_A_FAULT))
        self->fault = TRUE;
      if (self->first_error == NULL && error != NULL)
        self->first_error = g_error_copy (error);
    }
  g_mutex_unlock (&self->lock);
}

/**
 * kv_tier_job_mark_landed:
 * @self: a tier job
 * @index: the index of a key of the job
 *
 * The bytes of key @index landed: a store holds them now, a load wrote
 * them into the key's primary slot and verified them (pass a checksum on
 * with [method@Kv.HostBuffer.set_slot_checksum] first, while the slot is
 * still the job's). Each key is marked once. Any thread.
 */
void
kv_tier_job_mark_landed (KvTierJob *self,
                         guint      index)
{
  g_return_if_fail (KV_IS_TIER_JOB (self));
  g_return_if_fail (index < self->n_keys);

  mark (self, index, KEY_LANDED, 0, NULL, G_STRFUNC);
}

/**
 * kv_tier_job_mark_skipped:
 * @self: a tier job
 * @index: the index of a key of a store job
 *
 * The tier held key @index of a store already and did not write it again:
 * it counts as stored. Stores only. Any thread.
 */
void
kv_tier_job_mark_skipped (KvTierJob *self,
                          guint      index)
{
  g_return_if_fail (KV_IS_TIER_JOB (self));
  g_return_if_fail (index < self->n_keys);

  if (self->is_load)
    {
      g_critical ("kv_tier_job_mark_skipped: job %" G_GUINT64_FORMAT " of tier %s is a load: "
                  "a key either lands in its slot or does not (mark it missing or failed)",
                  kv_transfer_job_get_id (self->job), kv_secondary_tier_get_tier_type (self->tier));
      return;
    }
  mark (self, index, KEY_SKIPPED, 0, NULL, G_STRFUNC);
}

/**
 * kv_tier_job_mark_missing:
 * @self: a tier job
 * @index: the index of a key of the job
 *
 * The tier does not hold key @index (any more): the key did not land, and
 * the failure is the data's, not the tier's. Any thread.
 */
void
kv_tier_job_mark_missing (KvTierJob *self,
                          guint      index)
{
  g_return_if_fail (KV_IS_TIER_JOB (self));
  g_return_if_fail (index < self->n_keys);

  mark (self, index, KEY_MISSING, 0, NULL, G_STRFUNC);
}

/**
 * kv_tier_job_mark_failed:
 * @self: a tier job
 * @index: the index of a key of the job
 * @flags: whether the failure is the tier's or the data's
 * @error: (nullable): what went wrong, for the log
 *
 * Key @index did not land. With %KV_KEY_FAILURE_FLAGS_NONE the failure is
 * the tier's and the job counts against its circuit breaker. Any thread.
 */
void
kv_tier_job_mark_failed (KvTierJob         *self,
                         guint              index,
                         KvKeyFailureFlags  flags,
                         const GError      *error)
{
  g_return_if_fail (KV_IS_TIER_JOB (self));
  g_return_if_fail (index < self->n_keys);

  mark (self, index, KEY_FAILED, flags, error, G_STRFUNC);
}

/**
 * kv_tier_job_mark_remaining_failed:
 * @self: a tier job
 * @flags: whether the failure is the tier's or the data's
 * @error: (nullable): what went wrong, for the log
 *
 * Marks every key not marked yet failed, as
 * [method@Kv.TierJob.mark_failed] would: for a job the tier gives up on
 * (no connection, a slot outside the primary buffer), or the keys after
 * the one a load stopped at. Any thread.
 */
void
kv_tier_job_mark_remaining_failed (KvTierJob         *self,
                                   KvKeyFailureFlags  flags,
                                   const GError      *error)
{
  g_return_if_fail (KV_IS_TIER_JOB (self));

  g_mutex_lock (&self->lock);
  if (!self->reported)
    for (guint i = 0; i < self->n_keys; i++)
      if (self->marks[i] == KEY_UNMARKED)
        {
          self->marks[i] = KEY_FAILED;
          self->n_marked++;
          if (flags & KV_KEY_FAILURE_FLAGS_CHECKSUM)
            self->checksum_failed = TRUE;
          else if (!(flags & KV_KEY_FAILURE_FLAGS_NOT_A_FAULT))
            self->fault = TRUE;
          if (self->first_error == NULL && error != NULL)
            self->first_error = g_error_copy (error);
        }
  g_mutex_unlock (&self->lock);
}

/**
 * kv_tier_job_is_marked:
 * @self: a tier job
 * @index: the index of a key of the job
 *
 * Whether key @index was marked already (for example by a subclass that
 * failed it before chaining up). Any thread.
 *
 * Returns: %TRUE once the key is marked
 */
gboolean
kv_tier_job_is_marked (KvTierJob *self,
                       guint      index)
{
  gboolean marked;

  g_return_val_if_fail (KV_IS_TIER_JOB (self), FALSE);
  g_return_val_if_fail (index < self->n_keys, FALSE);

  g_mutex_lock (&self->lock);
  marked = self->marks[index] != KEY_UNMARKED;
  g_mutex_unlock (&self->lock);
  return marked;
}

/**
 * kv_tier_job_record_io:
 * @self: a tier job
 * @start_us: when an I/O of the job started, g_get_monotonic_time() µs
 * @end_us: when it ended
 *
 * Records the span of one I/O of the job. The job's transfer time is then
 * the span from the earliest start to the latest end recorded, rather
 * than the time since the tier job was made (which counts the time the
 * job waited in the tier's queue). Any thread.
 */
void
kv_tier_job_record_io (KvTierJob *self,
                       gint64     start_us,
                       gint64     end_us)
{
  g_return_if_fail (KV_IS_TIER_JOB (self));
  g_return_if_fail (start_us > 0 && end_us >= start_us);

  g_mutex_lock (&self->lock);
  if (self->io_start == 0 || start_us < self->io_start)
    self->io_start = start_us;
  if (end_us > self->io_end)
    self->io_end = end_us;
  g_mutex_unlock (&self->lock);
}

/* Lock held: the result by the one partial-load rule (KvJobResult). */
static KvJobResult *
build_result_locked (KvTierJob *self,
                     gint64     now)
{
  guint64 id = kv_transfer_job_get_id (self->job);
  KvKey * const *keys = kv_transfer_job_get_keys (self->job, NULL);
  guint n_landed = 0, n_done = 0;
  KvJobResult *result;

  for (guint i = 0; i < self->n_keys; i++)
    {
      if (self->marks[i] == KEY_LANDED)
        n_landed++;
      if (self->marks[i] == KEY_LANDED || self->marks[i] == KEY_SKIPPED)
        n_done++;
    }

  result = kv_job_result_new (id, n_done == self->n_keys);
  if (self->is_load && n_landed > 0 && n_landed < self->n_keys)
    {
      g_autofree KvKey **landed = g_new (KvKey *, n_landed);
      guint j = 0;

      for (guint i = 0; i < self->n_keys; i++)
        if (self->marks[i] == KEY_LANDED)
          landed[j++] = keys[i];
      kv_job_result_set_successful_keys (result, landed, n_landed);
    }
  kv_job_result_set_transfer_bytes (result, (gint64) n_landed *
                                            kv_secondary_tier_get_block_size_bytes (self->tier));
  if (self->io_start > 0)
    kv_job_result_set_transfer_time (result, (self->io_end - self->io_start) / (gdouble) G_USEC_PER_SEC);
  else
    kv_job_result_set_transfer_time (result, (now - self->created_us) / (gdouble) G_USEC_PER_SEC);
  if (self->checksum_failed)
    kv_job_result_set_checksum_failed (result, TRUE);
  return result;
}

/**
 * kv_tier_job_report:
 * @self: a tier job
 *
 * Reports the job, once: builds its [struct@Kv.JobResult] from the marks
 * (a key still unmarked failed, as a fault of the tier), pushes the stored
 * event of a successful store when the tier's
 * [property@Kv.SecondaryTier:enable-events] is set, and completes the job
 * with [method@Kv.SecondaryTier.complete_job_full] (%KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT
 * when no failed key was the tier's fault). Waits for a cancel func running
 * on another thread. A second report logs a critical and does nothing.
 * Any thread.
 */
void
kv_tier_job_report (KvTierJob *self)
{
  g_autoptr(KvJobResult) result = NULL;
  g_autoptr(GError) error = NULL;
  gboolean fault;
  gint64 now = g_get_monotonic_time ();
  guint n_unmarked;
  gulong handler;

  g_return_if_fail (KV_IS_TIER_JOB (self));

  g_mutex_lock (&self->lock);
  if (self->reported)
    {
      g_mutex_unlock (&self->lock);
      g_critical ("kv_tier_job_report: job %" G_GUINT64_FORMAT " of tier %s was reported "
                  "already; a job is reported once", kv_transfer_job_get_id (self->job),
                  kv_secondary_tier_get_tier_type (self->tier));
      return;
    }
  self->reported = TRUE;
  /* the cancel func may touch what the tier frees once this returns */
  while (self->cancel_thread != NULL && self->cancel_thread != g_thread_self ())
    g_cond_wait (&self->cond, &self->lock);
  n_unmarked = self->n_keys - self->n_marked;
  fault = self->fault || n_unmarked > 0;
  result = build_result_locked (self, now);
  error = g_steal_pointer (&self->first_error);
  handler = self->cancel_handler;
  self->cancel_handler = 0;
  g_mutex_unlock (&self->lock);

  /* a handler that runs now finds the job reported and does nothing */
  if (handler != 0)
    g_signal_handler_disconnect (self->cancellable, handler);

  if (!kv_job_result_get_success (result))
    g_debug ("Tier %s: %s job %" G_GUINT64_FORMAT " failed%s%s%s",
             kv_secondary_tier_get_tier_type (self->tier), self->is_load ? "load" : "store",
             kv_transfer_job_get_id (self->job),
             error != NULL ? ": " : "", error != NULL ? error->message : "",
             n_unmarked > 0 ? " (keys left unmarked)" : "");

  /* Pushed before the job is reported, so that the manager never sees the
   * job without its event (reference §8.7: one per successful store). */
  if (!self->is_load && self->n_keys > 0 && kv_job_result_get_success (result) &&
      kv_secondary_tier_get_enable_events (self->tier))
    {
      g_autoptr(KvEvent) event =
        kv_event_new (kv_transfer_job_get_keys (self->job, NULL), self->n_keys,
                      kv_secondary_tier_get_medium (self->tier), FALSE,
                      kv_secondary_tier_get_locality (self->tier));

      kv_secondary_tier_push_event (self->tier, event);
    }

  /* the cause the tier's breaker names if this failure opens it */
  if (fault && error != NULL)
    kv_circuit_breaker_set_cause (kv_secondary_tier_get_circuit_breaker (self->tier),
                                  error->message);
  kv_secondary_tier_complete_job_full (self->tier, result,
                                       fault ? KV_COMPLETE_JOB_FLAGS_NONE
                                             : KV_COMPLETE_JOB_FLAGS_NOT_A_FAULT);
}

/**
 * kv_tier_job_is_reported:
 * @self: a tier job
 *
 * Whether [method@Kv.TierJob.report] was called. Any thread.
 *
 * Returns: %TRUE once the job was reported
 */
gboolean
kv_tier_job_is_reported (KvTierJob *self)
{
  gboolean reported;

  g_return_val_if_fail (KV_IS_TIER_JOB (self), FALSE);

  g_mutex_lock (&self->lock);
  reported = self->reported;
  g_mutex_unlock (&self->lock);
  return reported;
}
