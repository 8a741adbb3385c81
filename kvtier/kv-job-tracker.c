/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-job-tracker-private.h"

typedef enum {
  TRACKED_IN_FLIGHT,
  TRACKED_EXPIRED,      /* failed at the deadline; the tier has not answered */
  TRACKED_HELD,         /* ...and the manager holds the job's slots for it */
} TrackedState;

typedef struct
{
  KvTransferJob *job;
  guint64        id;
  gint64         deadline;     /* tracker clock, µs; G_MAXINT64: none */
  gboolean       is_load;
  TrackedState   state;
  KvJobResult   *expired_result; /* the failure the deadline reported */
  GCancellable  *cancellable;  /* made on demand, cancelled at the deadline */
  GList          link;         /* in by_deadline while in flight */
} TrackedJob;

struct _KvJobTracker
{
  GMutex               lock;
  GCond                cond;           /* n_in_flight, n_settling or probe changed */
  KvClock             *clock;
  gboolean             manual_clock;
  KvJobWatchdogClient  watchdog;

  /* guarded by lock */
  guint                deadline_ms;
  GHashTable          *tracked;        /* guint64* id → TrackedJob */
  GQueue               by_deadline;    /* in-flight TrackedJob, earliest first */
  gint                 n_in_flight;    /* (atomic) tracked, not reported yet */
  guint                n_settling;     /* answered, outcome not counted yet */
  gint                 n_unanswered;   /* (atomic) expired, no answer from the tier */
  GArray              *released;       /* guint64 ids of held jobs answered late */
  gint                 n_released;     /* (atomic) released->len */
  guint64              next_probe_id;
  guint64              probe_id;       /* the probe in flight, or 0 */
  GCancellable        *probe_cancellable;
  gint64               probe_deadline;
  guint64              n_expired;
  guint64              n_late;
  guint64              n_rejected;
};

static void
tracked_free (TrackedJob *t)
{
  kv_transfer_job_unref (t->job);
  g_clear_pointer (&t->expired_result, kv_job_result_unref);
  g_clear_object (&t->cancellable);
  g_free (t);
}

KvJobTracker *
_kv_job_tracker_new (void)
{
  KvJobTracker *self = g_new0 (KvJobTracker, 1);

  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->tracked = g_hash_table_new (g_int64_hash, g_int64_equal);
  self->released = g_array_new (FALSE, FALSE, sizeof (guint64));
  return self;
}

void
_kv_job_tracker_start (KvJobTracker      *self,
                       KvClock           *clock,
                       KvJobWatchdogFunc  fired,
                       gpointer           user_data)
{
  g_return_if_fail (self->clock == NULL);

  self->clock = g_object_ref (clock);
  self->manual_clock = kv_clock_is_manual (clock);
  _kv_job_watchdog_register (&self->watchdog, fired, user_data);
}

void
_kv_job_tracker_free (KvJobTracker *self)
{
  GHashTableIter iter;
  gpointer value;

  if (self == NULL)
    return;

  /* No watchdog call runs past this point. */
  if (self->clock != NULL)
    _kv_job_watchdog_unregister (&self->watchdog);

  /* Whatever nobody took is dropped with the tier. */
  g_hash_table_iter_init (&iter, self->tracked);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    tracked_free (value);
  g_hash_table_unref (self->tracked);
  g_array_unref (self->released);
  g_clear_object (&self->probe_cancellable);
  g_clear_object (&self->clock);
  g_cond_clear (&self->cond);
  g_mutex_clear (&self->lock);
  g_free (self);
}

gboolean
_kv_job_tracker_is_manual (KvJobTracker *self)
{
  return self->manual_clock;
}

guint
_kv_job_tracker_get_deadline_ms (KvJobTracker *self)
{
  guint deadline_ms;

  g_mutex_lock (&self->lock);
  deadline_ms = self->deadline_ms;
  g_mutex_unlock (&self->lock);
  return deadline_ms;
}

void
_kv_job_tracker_set_deadline_ms (KvJobTracker *self,
                                 guint         deadline_ms)
{
  g_mutex_lock (&self->lock);
  self->deadline_ms = deadline_ms;
  g_mutex_unlock (&self->lock);
}

/* Lock held: the earliest moment something tracked may expire. */
static gint64
next_deadline_locked (KvJobTracker *self)
{
  gint64 next = G_MAXINT64;

  if (self->by_deadline.head != NULL)
    next = ((TrackedJob *) self->by_deadline.head->data)->deadline;
  if (self->probe_id != 0)
    next = MIN (next, self->probe_deadline);
  return next;
}

/* Lock held. The watchdog follows g_get_monotonic_time(), which is what
 * the default clock reads; a manual clock is checked on the owner thread
 * instead (tests move it by hand). */
static void
schedule_watchdog_locked (KvJobTracker *self)
{
  if (!self->manual_clock)
    _kv_job_watchdog_schedule (&self->watchdog, next_deadline_locked (self));
}

/* Lock held: a deadline @deadline_ms from now on the tracker's clock. */
static gint64
deadline_from_now_locked (KvJobTracker *self)
{
  return self->deadline_ms > 0 ?
         kv_clock_get_time (self->clock) + (gint64) self->deadline_ms * 1000 :
         G_MAXINT64;
}

gboolean
_kv_job_tracker_track (KvJobTracker  *self,
                       KvTransferJob *job,
                       gboolean       is_load)
{
  TrackedJob *t = g_new0 (TrackedJob, 1);

  t->job = kv_transfer_job_ref (job);
  t->id = kv_transfer_job_get_id (job);
  t->is_load = is_load;
  t->state = TRACKED_IN_FLIGHT;
  t->link.data = t;

  g_mutex_lock (&self->lock);
  if (g_hash_table_contains (self->tracked, &t->id))
    {
      g_mutex_unlock (&self->lock);
      tracked_free (t);
      return FALSE;
    }
  t->deadline = deadline_from_now_locked (self);
  g_hash_table_insert (self->tracked, &t->id, t);
  g_atomic_int_inc (&self->n_in_flight);
  if (t->deadline != G_MAXINT64)
    {
      GList *after = self->by_deadline.tail;

      /* Nearly always appended: deadline-ms rarely changes. */
      while (after != NULL && ((TrackedJob *) after->data)->deadline > t->deadline)
        after = after->prev;
      if (after == NULL)
        g_queue_push_head_link (&self->by_deadline, &t->link);
      else
        g_queue_insert_after_link (&self->by_deadline, after, &t->link);
      if (self->by_deadline.head == &t->link)
        schedule_watchdog_locked (self);
    }
  g_mutex_unlock (&self->lock);
  return TRUE;
}

void
_kv_job_tracker_untrack (KvJobTracker *self,
                         guint64       job_id)
{
  TrackedJob *t;

  g_mutex_lock (&self->lock);
  t = g_hash_table_lookup (self->tracked, &job_id);
  /* unless the tier reported it already (a tier bug the manager logs) */
  if (t != NULL && t->state == TRACKED_IN_FLIGHT)
    {
      g_hash_table_remove (self->tracked, &job_id);
      if (t->deadline != G_MAXINT64)
        g_queue_unlink (&self->by_deadline, &t->link);
      g_atomic_int_add (&self->n_in_flight, -1);
      g_cond_broadcast (&self->cond);
    }
  else
    t = NULL;
  g_mutex_unlock (&self->lock);
  if (t != NULL)
    tracked_free (t);
}

KvJobAnswer
_kv_job_tracker_settle (KvJobTracker   *self,
                        KvJobResult    *result,
                        gboolean        skip_own,
                        KvTransferJob **failed_load)
{
  guint64 id = kv_job_result_get_job_id (result);
  KvJobAnswer answer;
  TrackedJob *t;

  *failed_load = NULL;
  g_mutex_lock (&self->lock);
  t = g_hash_table_lookup (self->tracked, &id);
  /* the deadline's own failure of the job, queued already once */
  if (t == NULL || (skip_own && t->expired_result == result))
    {
      g_mutex_unlock (&self->lock);
      return KV_JOB_ANSWER_UNTRACKED;
    }

  g_hash_table_remove (self->tracked, &t->id);
  g_cond_broadcast (&self->cond);
  if (t->state == TRACKED_IN_FLIGHT)
    {
      if (t->deadline != G_MAXINT64)
        g_queue_unlink (&self->by_deadline, &t->link);
      g_atomic_int_add (&self->n_in_flight, -1);
      /* waiting for jobs waits for their breaker outcome too */
      self->n_settling++;
      if (t->is_load && !kv_job_result_get_success (result))
        *failed_load = kv_transfer_job_ref (t->job);
      answer = KV_JOB_ANSWER_IN_TIME;
    }
  else
    {
      self->n_late++;
      g_atomic_int_add (&self->n_unanswered, -1);
      answer = KV_JOB_ANSWER_LATE;
      /* The manager keeps the slots of this job until it hears this. */
      if (t->state == TRACKED_HELD)
        {
          g_array_append_val (self->released, t->id);
          g_atomic_int_set (&self->n_released, self->released->len);
          answer = KV_JOB_ANSWER_LATE_RELEASED;
        }
    }
  g_mutex_unlock (&self->lock);

  tracked_free (t);
  return answer;
}

void
_kv_job_tracker_settled (KvJobTracker *self)
{
  g_mutex_lock (&self->lock);
  if (--self->n_settling == 0)
    g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* Lock held: marks @t's in-flight job failed, keeping @t to drop the
 * tier's late answer. */
static void
expire_one_locked (KvJobTracker  *self,
                   TrackedJob    *t,
                   gboolean       at_deadline,
                   GArray        *expired,
                   GPtrArray    **cancellables)
{
  KvExpiredJob e = { NULL, NULL };

  t->state = TRACKED_EXPIRED;
  g_atomic_int_inc (&self->n_unanswered);
  if (at_deadline)
    self->n_expired++;
  t->expired_result = kv_job_result_new (t->id, FALSE);
  e.result = kv_job_result_ref (t->expired_result);
  if (t->is_load)
    e.load = kv_transfer_job_ref (t->job);
  g_array_append_val (expired, e);
  if (t->cancellable != NULL)
    {
      if (*cancellables == NULL)
        *cancellables = g_ptr_array_new_with_free_func (g_object_unref);
      g_ptr_array_add (*cancellables, g_object_ref (t->cancellable));
    }
}

void
_kv_job_tracker_expire (KvJobTracker  *self,
                        gboolean       all,
                        GArray        *expired,
                        GPtrArray    **cancellables,
                        gboolean      *probe_failed)
{
  gint64 now = all ? G_MAXINT64 : kv_clock_get_time (self->clock);

  *probe_failed = FALSE;
  g_mutex_lock (&self->lock);
  while (self->by_deadline.head != NULL)
    {
      TrackedJob *t = self->by_deadline.head->data;

      if (t->deadline > now)
        break;
      g_queue_unlink (&self->by_deadline, &t->link);
      expire_one_locked (self, t, !all, expired, cancellables);
    }
  /* Jobs without a deadline are in no queue: at shutdown, find them in
   * the table, or a job the tier dropped would never be reported. */
  if (all && g_atomic_int_get (&self->n_in_flight) > 0)
    {
      GHashTableIter iter;
      TrackedJob *t;

      g_hash_table_iter_init (&iter, self->tracked);
      while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &t))
        if (t->state == TRACKED_IN_FLIGHT)
          expire_one_locked (self, t, FALSE, expired, cancellables);
    }
  if (self->probe_id != 0 && self->probe_deadline <= now)
    {
      self->probe_id = 0;
      *probe_failed = TRUE;
      if (self->probe_cancellable != NULL)
        {
          if (*cancellables == NULL)
            *cancellables = g_ptr_array_new_with_free_func (g_object_unref);
          g_ptr_array_add (*cancellables, g_steal_pointer (&self->probe_cancellable));
        }
      g_cond_broadcast (&self->cond);
    }
  schedule_watchdog_locked (self);
  g_mutex_unlock (&self->lock);
}

void
_kv_job_tracker_expired_queued (KvJobTracker *self,
                                guint         n_expired)
{
  if (n_expired == 0)
    return;
  g_mutex_lock (&self->lock);
  g_atomic_int_add (&self->n_in_flight, - (gint) n_expired);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

GCancellable *
_kv_job_tracker_get_cancellable (KvJobTracker *self,
                                 guint64       job_id)
{
  GCancellable *cancellable = NULL;
  TrackedJob *t;

  g_mutex_lock (&self->lock);
  t = g_hash_table_lookup (self->tracked, &job_id);
  if (t != NULL)
    {
      if (t->cancellable == NULL)
        {
          t->cancellable = g_cancellable_new ();
          /* no handler can be connected yet: nothing runs under the lock */
          if (t->state != TRACKED_IN_FLIGHT)
            g_cancellable_cancel (t->cancellable);
        }
      cancellable = g_object_ref (t->cancellable);
    }
  g_mutex_unlock (&self->lock);
  return cancellable;
}

gboolean
_kv_job_tracker_hold (KvJobTracker *self,
                      guint64       job_id,
                      gboolean      stores_too)
{
  TrackedJob *t;
  gboolean held = FALSE;

  g_mutex_lock (&self->lock);
  t = g_hash_table_lookup (self->tracked, &job_id);
  if (t != NULL && t->state == TRACKED_EXPIRED && (t->is_load || stores_too))
    {
      t->state = TRACKED_HELD;
      held = TRUE;
    }
  g_mutex_unlock (&self->lock);
  return held;
}

guint64 *
_kv_job_tracker_take_released (KvJobTracker *self,
                               guint        *n_ids)
{
  guint64 *ids;
  gsize len;

  *n_ids = 0;
  if (G_LIKELY (g_atomic_int_get (&self->n_released) == 0))
    return NULL;

  g_mutex_lock (&self->lock);
  /* g_array_steal keeps the array (no cast from gchar *, which clang's
   * -Wcast-align refuses) */
  ids = g_array_steal (self->released, &len);
  *n_ids = len;
  g_atomic_int_set (&self->n_released, 0);
  g_mutex_unlock (&self->lock);
  return ids;
}

gboolean
_kv_job_tracker_has_released (KvJobTracker *self)
{
  return g_atomic_int_get (&self->n_released) > 0;
}

guint64
_kv_job_tracker_start_probe (KvJobTracker *self,
                             GCancellable *cancellable)
{
  guint64 id;

  g_mutex_lock (&self->lock);
  id = ++self->next_probe_id;
  self->probe_id = id;
  g_set_object (&self->probe_cancellable, cancellable);
  self->probe_deadline = deadline_from_now_locked (self);
  schedule_watchdog_locked (self);
  g_mutex_unlock (&self->lock);
  return id;
}

gboolean
_kv_job_tracker_end_probe (KvJobTracker *self,
                           guint64       probe_id)
{
  gboolean current = FALSE;

  g_mutex_lock (&self->lock);
  if (probe_id != 0 && self->probe_id == probe_id)
    {
      self->probe_id = 0;
      g_clear_object (&self->probe_cancellable);
      current = TRUE;
      g_cond_broadcast (&self->cond);
    }
  g_mutex_unlock (&self->lock);
  return current;
}

void
_kv_job_tracker_stop_probe (KvJobTracker *self)
{
  g_mutex_lock (&self->lock);
  self->probe_id = 0;
  g_clear_object (&self->probe_cancellable);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

gboolean
_kv_job_tracker_probe_in_flight (KvJobTracker *self)
{
  gboolean in_flight;

  g_mutex_lock (&self->lock);
  in_flight = self->probe_id != 0;
  g_mutex_unlock (&self->lock);
  return in_flight;
}

guint
_kv_job_tracker_get_n_in_flight (KvJobTracker *self)
{
  return (guint) g_atomic_int_get (&self->n_in_flight);
}

guint
_kv_job_tracker_get_n_unanswered (KvJobTracker *self)
{
  return (guint) g_atomic_int_get (&self->n_unanswered);
}

void
_kv_job_tracker_count_rejected (KvJobTracker *self)
{
  g_mutex_lock (&self->lock);
  self->n_rejected++;
  g_mutex_unlock (&self->lock);
}

void
_kv_job_tracker_get_totals (KvJobTracker *self,
                            guint64      *n_expired,
                            guint64      *n_late,
                            guint64      *n_rejected)
{
  g_mutex_lock (&self->lock);
  if (n_expired != NULL)
    *n_expired = self->n_expired;
  if (n_late != NULL)
    *n_late = self->n_late;
  if (n_rejected != NULL)
    *n_rejected = self->n_rejected;
  g_mutex_unlock (&self->lock);
}

gboolean
_kv_job_tracker_wait_idle (KvJobTracker *self,
                           gint64        timeout_us)
{
  gboolean idle;

  g_mutex_lock (&self->lock);
  idle = g_atomic_int_get (&self->n_in_flight) == 0 && self->n_settling == 0 &&
         self->probe_id == 0;
  if (!idle)
    {
      if (timeout_us < 0)
        g_cond_wait (&self->cond, &self->lock);
      else if (timeout_us > 0)
        g_cond_wait_until (&self->cond, &self->lock, g_get_monotonic_time () + timeout_us);
    }
  g_mutex_unlock (&self->lock);
  return idle;
}
