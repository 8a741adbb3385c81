/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <gio/gio.h>

#include "kv-peer-deadline.h"

/* The peer client's request deadline (plugins/peer/kv-peer-deadline.c),
 * its timer on a context this test iterates itself: moving the time on
 * keeps the request alive past the timeout as long as it moves, the time
 * is up no earlier than the timeout after the last move, the job's own
 * cancellable cancels it at once and is not a timeout, and an ended
 * deadline leaves nothing behind on the context. */

#define TIMEOUT_MS 300

static void
test_moved_on (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  KvPeerDeadline deadline;
  gint64 start = g_get_monotonic_time ();
  gint64 last_move;

  kv_peer_deadline_begin (&deadline, context, TIMEOUT_MS, NULL);
  /* four timeouts long, a move every 20 ms: the timer fires and sets
   * itself for the moved time, again and again */
  while (g_get_monotonic_time () - start < 4 * TIMEOUT_MS * 1000)
    {
      kv_peer_deadline_restart (&deadline);
      while (g_main_context_iteration (context, FALSE))
        ;
      g_assert_false (g_cancellable_is_cancelled (deadline.cancellable));
      g_usleep (20 * 1000);
    }
  kv_peer_deadline_restart (&deadline);
  last_move = g_get_monotonic_time ();
  while (!g_cancellable_is_cancelled (deadline.cancellable))
    {
      g_assert_cmpint (g_get_monotonic_time () - last_move, <, 30 * G_USEC_PER_SEC);
      g_main_context_iteration (context, TRUE);
    }
  g_assert_cmpint (g_get_monotonic_time () - last_move, >=, (TIMEOUT_MS - 1) * 1000);
  g_assert_true (kv_peer_deadline_timed_out (&deadline));
  kv_peer_deadline_end (&deadline);
  g_assert_false (g_main_context_pending (context));
}

static void
test_outer_cancelled (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(GCancellable) job = g_cancellable_new ();
  KvPeerDeadline deadline;

  kv_peer_deadline_begin (&deadline, context, TIMEOUT_MS, job);
  g_assert_false (g_cancellable_is_cancelled (deadline.cancellable));
  g_cancellable_cancel (job);
  g_assert_true (g_cancellable_is_cancelled (deadline.cancellable));
  /* the job's deadline, not a silent peer */
  g_assert_false (kv_peer_deadline_timed_out (&deadline));
  kv_peer_deadline_end (&deadline);
}

static void
test_ended_early (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(GCancellable) kept = NULL;
  KvPeerDeadline deadline;
  gint64 start;

  kv_peer_deadline_begin (&deadline, context, 50, NULL);
  kept = g_object_ref (deadline.cancellable);
  kv_peer_deadline_end (&deadline);
  g_assert_null (deadline.cancellable);
  g_assert_null (deadline.timer);
  /* past the time: the destroyed timer never fires */
  start = g_get_monotonic_time ();
  while (g_get_monotonic_time () - start < 150 * 1000)
    {
      while (g_main_context_iteration (context, FALSE))
        ;
      g_usleep (10 * 1000);
    }
  g_assert_false (g_cancellable_is_cancelled (kept));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/peer-deadline/moved-on", test_moved_on);
  g_test_add_func ("/peer-deadline/outer-cancelled", test_outer_cancelled);
  g_test_add_func ("/peer-deadline/ended-early", test_ended_early);
  return g_test_run ();
}
