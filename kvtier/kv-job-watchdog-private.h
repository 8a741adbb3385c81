/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The library's one watchdog: a single thread, started by the first
 * deadline and kept for the life of the process, that calls each
 * registered client's function once the client's next deadline
 * (monotonic time, µs) has passed. Every secondary tier is one client; it keeps its own jobs
 * ordered and tells the watchdog only its earliest deadline, so the
 * thread's work per wake-up is O(number of tiers), not O(jobs). */

typedef void (*KvJobWatchdogFunc) (gpointer user_data);

typedef struct _KvJobWatchdogClient KvJobWatchdogClient;
struct _KvJobWatchdogClient
{
  /*< private >*/
  KvJobWatchdogFunc func;
  gpointer          user_data;
  gint64            deadline;     /* G_MAXINT64: none */
  gboolean          registered;
  gboolean          firing;
};

/* Any thread. The client struct must stay valid until unregistered. */
G_GNUC_INTERNAL
void _kv_job_watchdog_register   (KvJobWatchdogClient *client,
                                  KvJobWatchdogFunc    func,
                                  gpointer             user_data);
/* Any thread but the watchdog's; waits for a call of the client's function
 * that is running now. Must not be called with a lock that the function
 * takes. */
G_GNUC_INTERNAL
void _kv_job_watchdog_unregister (KvJobWatchdogClient *client);
/* Any thread. Sets when the client's function runs next (G_MAXINT64 for
 * never); the function is called once per deadline set, and sets the next
 * one itself if it still has jobs in flight. */
G_GNUC_INTERNAL
void _kv_job_watchdog_schedule   (KvJobWatchdogClient *client,
                                  gint64               deadline_us);

G_END_DECLS
