/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-deadline.h"

#include <string.h>

/* The timer: the time is @expires_ms after @begin, stored by the
 * request's thread and read by the timer context's. */
typedef struct
{
  GSource       source;
  GCancellable *cancellable;   /* owned */
  gint64        begin;         /* monotonic µs */
  gint          expires_ms;    /* (atomic) */
} DeadlineSource;

static gboolean
deadline_source_dispatch (GSource     *source,
                          GSourceFunc  callback,
                          gpointer     data)
{
  DeadlineSource *timer = (DeadlineSource *) source;
  gint64 expires = timer->begin + (gint64) g_atomic_int_get (&timer->expires_ms) * 1000;

  /* moved on since the timer was set: set it for the new time */
  if (g_get_monotonic_time () < expires)
    {
      g_source_set_ready_time (source, expires);
      return G_SOURCE_CONTINUE;
    }
  g_cancellable_cancel (timer->cancellable);
  return G_SOURCE_REMOVE;
}

static void
deadline_source_finalize (GSource *source)
{
  g_clear_object (&((DeadlineSource *) source)->cancellable);
}

static GSourceFuncs deadline_source_funcs = {
  .dispatch = deadline_source_dispatch,
  .finalize = deadline_source_finalize,
};

static void
cancel_other (GCancellable *cancellable,
              gpointer      data)
{
  g_cancellable_cancel (data);
}

/* Starts the request's time: @timeout_ms from now, on @timer_context
 * (a context another thread runs). @outer (nullable) is the job's
 * cancellable. */
void
kv_peer_deadline_begin (KvPeerDeadline *deadline,
                        GMainContext   *timer_context,
                        guint           timeout_ms,
                        GCancellable   *outer)
{
  DeadlineSource *timer;

  memset (deadline, 0, sizeof *deadline);
  deadline->cancellable = g_cancellable_new ();
  deadline->timeout_ms = timeout_ms;
  if (outer != NULL)
    {
      deadline->outer = g_object_ref (outer);
      deadline->outer_handler = g_cancellable_connect (outer, G_CALLBACK (cancel_other),
                                                       g_object_ref (deadline->cancellable),
                                                       g_object_unref);
    }
  timer = (DeadlineSource *) g_source_new (&deadline_source_funcs, sizeof (DeadlineSource));
  g_source_set_static_name (&timer->source, "kv-peer-request-deadline");
  timer->cancellable = g_object_ref (deadline->cancellable);
  timer->begin = g_get_monotonic_time ();
  timer->expires_ms = (gint) MIN (timeout_ms, (guint) G_MAXINT);
  g_source_set_ready_time (&timer->source, timer->begin + (gint64) timer->expires_ms * 1000);
  g_source_attach (&timer->source, timer_context);
  deadline->timer = &timer->source;
}

/* The request has the whole timeout again, from now (a frame came or
 * went). */
void
kv_peer_deadline_restart (KvPeerDeadline *deadline)
{
  DeadlineSource *timer = (DeadlineSource *) deadline->timer;
  gint64 elapsed_ms = (g_get_monotonic_time () - timer->begin) / 1000;

  g_atomic_int_set (&timer->expires_ms, (gint) MIN (elapsed_ms + deadline->timeout_ms, G_MAXINT));
}

/* Whether the request was cancelled by its time rather than by the job's
 * cancellable. */
gboolean
kv_peer_deadline_timed_out (KvPeerDeadline *deadline)
{
  return g_cancellable_is_cancelled (deadline->cancellable) &&
         (deadline->outer == NULL || !g_cancellable_is_cancelled (deadline->outer));
}

void
kv_peer_deadline_end (KvPeerDeadline *deadline)
{
  if (deadline->timer != NULL)
    {
      g_source_destroy (deadline->timer);
      g_clear_pointer (&deadline->timer, g_source_unref);
    }
  if (deadline->outer != NULL)
    {
      g_cancellable_disconnect (deadline->outer, deadline->outer_handler);
      g_clear_object (&deadline->outer);
    }
  g_clear_object (&deadline->cancellable);
}
