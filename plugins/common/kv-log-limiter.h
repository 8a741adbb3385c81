/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* When to log that something a tier talks to (a redis server, a peer)
 * went away and came back: each loss once, its return once, and a thing
 * that flaps at most once every KV_LOG_LIMITER_INTERVAL_US. A loss within
 * that interval of the last one logged is not logged, nor is its return;
 * the next loss logged says how many were left out, and a loss left out
 * is logged late, at a failed retry after the interval, if the thing is
 * still away then. So the lines add up to the counter of losses. The
 * caller serialises the calls (one thread, or its own lock). As
 * KvCircuitBreaker's messages. */

#define KV_LOG_LIMITER_INTERVAL_US (30 * G_USEC_PER_SEC)

typedef struct
{
  gboolean down;            /* the thing is away now */
  gboolean logged_down;     /* the last line logged said "away" */
  gboolean ever_logged;
  gint64   logged_down_at;  /* monotonic µs of that line */
  gint64   down_since;      /* monotonic µs */
  guint64  unlogged;        /* losses not logged yet */
} KvLogLimiter;

/* Lock held by the caller: whether to log the loss now, after @loss
 * (TRUE: a new loss; FALSE: a failed retry while away). *n_losses: the
 * losses the line stands for (more than 1 when some were left out). */
static inline gboolean
kv_log_limiter_log_down (KvLogLimiter *l,
                         gboolean      loss,
                         gint64        now,
                         guint64      *n_losses)
{
  if (loss && !l->down)
    {
      l->down = TRUE;
      l->down_since = now;
      l->unlogged++;
    }
  if (!l->down || l->logged_down || l->unlogged == 0 ||
      (l->ever_logged && now - l->logged_down_at < KV_LOG_LIMITER_INTERVAL_US))
    return FALSE;
  *n_losses = l->unlogged;
  l->unlogged = 0;
  l->logged_down = TRUE;
  l->ever_logged = TRUE;
  l->logged_down_at = now;
  return TRUE;
}

/* The thing answers again: whether to log it (its loss was logged).
 * *away_us: how long it was away. */
static inline gboolean
kv_log_limiter_log_up (KvLogLimiter *l,
                       gint64        now,
                       gint64       *away_us)
{
  gboolean log = l->down && l->logged_down;

  if (!l->down)
    return FALSE;
  *away_us = now - l->down_since;
  l->down = FALSE;
  l->logged_down = FALSE;
  return log;
}

/* Events of one kind (authentication failures on a server...): the
 * first is logged, then at most one line every KV_LOG_LIMITER_INTERVAL_US,
 * which says how many events it stands for. The caller serialises the
 * calls. */
typedef struct
{
  gboolean ever_logged;
  gint64   logged_at;
  guint64  unlogged;
} KvLogEventLimiter;

/* One more event: whether to log it now; *n_events: the events the line
 * stands for (this one and those left out before it). */
static inline gboolean
kv_log_event_limiter_log (KvLogEventLimiter *l,
                          gint64             now,
                          guint64           *n_events)
{
  l->unlogged++;
  if (l->ever_logged && now - l->logged_at < KV_LOG_LIMITER_INTERVAL_US)
    return FALSE;
  *n_events = l->unlogged;
  l->unlogged = 0;
  l->ever_logged = TRUE;
  l->logged_at = now;
  return TRUE;
}

G_END_DECLS
