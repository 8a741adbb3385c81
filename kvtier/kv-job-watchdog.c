/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-job-watchdog-private.h"

/* One thread for the whole library (not one per tier): tiers are few, so
 * a scan of the clients for the earliest deadline is cheaper than keeping
 * a heap in order on every submit. */
static GMutex watchdog_lock;
static GCond watchdog_cond;
static GPtrArray *watchdog_clients;   /* KvJobWatchdogClient, borrowed */
static GThread *watchdog_thread;

static gpointer
watchdog_main (gpointer data)
{
  g_mutex_lock (&watchdog_lock);
  for (;;)
    {
      KvJobWatchdogClient *due = NULL;
      gint64 earliest = G_MAXINT64;
      gint64 now = g_get_monotonic_time ();

      for (guint i = 0; i < watchdog_clients->len; i++)
        {
          KvJobWatchdogClient *client = watchdog_clients->pdata[i];

          if (client->deadline <= now)
            {
              due = client;
              break;
            }
          earliest = MIN (earliest, client->deadline);
        }

      if (due == NULL)
        {
          if (earliest == G_MAXINT64)
            g_cond_wait (&watchdog_cond, &watchdog_lock);
          else
            g_cond_wait_until (&watchdog_cond, &watchdog_lock, earliest);
          continue;
        }

      /* Once per deadline: the function schedules the next one. */
      due->deadline = G_MAXINT64;
      due->firing = TRUE;
      g_mutex_unlock (&watchdog_lock);

      due->func (due->user_data);

      g_mutex_lock (&watchdog_lock);
      due->firing = FALSE;
      g_cond_broadcast (&watchdog_cond);
    }

  return NULL;
}

void
_kv_job_watchdog_register (KvJobWatchdogClient *client,
                           KvJobWatchdogFunc    func,
                           gpointer             user_data)
{
  g_return_if_fail (client != NULL && func != NULL);

  g_mutex_lock (&watchdog_lock);
  g_return_if_fail (!client->registered);
  client->func = func;
  client->user_data = user_data;
  client->deadline = G_MAXINT64;
  client->firing = FALSE;
  client->registered = TRUE;
  if (watchdog_clients == NULL)
    watchdog_clients = g_ptr_array_new ();
  g_ptr_array_add (watchdog_clients, client);
  g_mutex_unlock (&watchdog_lock);
}

void
_kv_job_watchdog_unregister (KvJobWatchdogClient *client)
{
  g_return_if_fail (client != NULL);

  g_mutex_lock (&watchdog_lock);
  if (client->registered)
    {
      while (client->firing)
        g_cond_wait (&watchdog_cond, &watchdog_lock);
      g_ptr_array_remove_fast (watchdog_clients, client);
      client->registered = FALSE;
    }
  g_mutex_unlock (&watchdog_lock);
}

void
_kv_job_watchdog_schedule (KvJobWatchdogClient *client,
                           gint64               deadline_us)
{
  g_return_if_fail (client != NULL);

  g_mutex_lock (&watchdog_lock);
  if (client->registered && deadline_us != client->deadline)
    {
      gboolean earlier = deadline_us < client->deadline;

      client->deadline = deadline_us;
      /* Started by the first deadline: a process whose tiers have none
       * never gets the thread. */
      if (watchdog_thread == NULL && deadline_us != G_MAXINT64)
        watchdog_thread = g_thread_new ("kvtier-watchdog", watchdog_main, NULL);
      /* A later deadline needs no wake-up: the thread wakes at the old
       * one and finds nothing due. */
      if (earlier)
        g_cond_broadcast (&watchdog_cond);
    }
  g_mutex_unlock (&watchdog_lock);
}
