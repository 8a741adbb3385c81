/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <kvtier.h>

/* The pull model (issue #23): a tier that reports only through its own
 * get_finished_jobs(), as vLLM's tiers and most Python tiers do. Whatever
 * waits for its jobs (drain_jobs, reset_cache, shutdown, with or without
 * a deadline) collects what it finished, and the job is reported with the
 * tier's own result, once, with ::job-finished. Each case runs in a
 * subprocess with a time limit: before the fix, reset_cache waited for
 * ever. */

#define SLOT_SIZE 4096
#define CASE_TIMEOUT_US (20 * G_USEC_PER_SEC)

#define TEST_TYPE_PULL_TIER (test_pull_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestPullTier, test_pull_tier, TEST, PULL_TIER, KvSecondaryTier)

struct _TestPullTier
{
  KvSecondaryTier parent_instance;

  guint      finish_after_ms;  /* 0: the result is there when submit returns */
  GMutex     lock;
  GPtrArray *done;             /* KvJobResult, returned by get_finished_jobs */
  GPtrArray *threads;          /* late finishers */
  guint      n_pulls;
};

G_DEFINE_FINAL_TYPE (TestPullTier, test_pull_tier, KV_TYPE_SECONDARY_TIER)

typedef struct
{
  TestPullTier *self;
  KvJobResult  *result;
} Late;

static gpointer
finish_later (gpointer data)
{
  Late *late = data;

  g_usleep (late->self->finish_after_ms * 1000);
  g_mutex_lock (&late->self->lock);
  g_ptr_array_add (late->self->done, late->result);
  g_mutex_unlock (&late->self->lock);
  g_free (late);
  return NULL;
}

static gboolean
test_pull_tier_submit (KvSecondaryTier  *tier,
                       KvTransferJob    *job,
                       GError          **error)
{
  TestPullTier *self = TEST_PULL_TIER (tier);
  KvJobResult *result = kv_job_result_new (kv_transfer_job_get_id (job), TRUE);

  if (self->finish_after_ms == 0)
    {
      g_mutex_lock (&self->lock);
      g_ptr_array_add (self->done, result);
      g_mutex_unlock (&self->lock);
    }
  else
    {
      Late *late = g_new (Late, 1);

      late->self = self;
      late->result = result;
      g_ptr_array_add (self->threads, g_thread_new ("finisher", finish_later, late));
    }
  return TRUE;
}

/* vLLM's style: everything finished since the last call, no chain-up */
static KvJobResult **
test_pull_tier_get_finished_jobs (KvSecondaryTier *tier)
{
  TestPullTier *self = TEST_PULL_TIER (tier);
  KvJobResult **results;

  g_mutex_lock (&self->lock);
  self->n_pulls++;
  g_ptr_array_add (self->done, NULL);
  results = (KvJobResult **) g_ptr_array_free (self->done, FALSE);
  self->done = g_ptr_array_new ();
  g_mutex_unlock (&self->lock);
  return results;
}

static KvLookupResult
test_pull_tier_lookup (KvSecondaryTier *tier,
                       KvKey           *key,
                       KvRequest       *request)
{
  return KV_LOOKUP_RESULT_MISS;
}

static KvOffloadPolicy
test_pull_tier_on_new_request (KvSecondaryTier *tier,
                               KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

/* vLLM's drain: the work is done (the results wait to be pulled) */
static gboolean
test_pull_tier_drain_jobs (KvSecondaryTier  *tier,
                           GError          **error)
{
  TestPullTier *self = TEST_PULL_TIER (tier);

  for (guint i = 0; i < self->threads->len; i++)
    g_thread_join (self->threads->pdata[i]);
  g_ptr_array_set_size (self->threads, 0);
  return TRUE;
}

static gboolean
test_pull_tier_shutdown (KvSecondaryTier  *tier,
                         GError          **error)
{
  return test_pull_tier_drain_jobs (tier, error);
}

static void
test_pull_tier_finalize (GObject *object)
{
  TestPullTier *self = TEST_PULL_TIER (object);

  for (guint i = 0; i < self->threads->len; i++)
    g_thread_join (self->threads->pdata[i]);
  g_ptr_array_unref (self->threads);
  g_ptr_array_set_free_func (self->done, (GDestroyNotify) kv_job_result_unref);
  g_ptr_array_unref (self->done);
  g_mutex_clear (&self->lock);
  G_OBJECT_CLASS (test_pull_tier_parent_class)->finalize (object);
}

static void
test_pull_tier_class_init (TestPullTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = test_pull_tier_finalize;
  tier_class->lookup = test_pull_tier_lookup;
  tier_class->submit_store = test_pull_tier_submit;
  tier_class->submit_load = test_pull_tier_submit;
  tier_class->get_finished_jobs = test_pull_tier_get_finished_jobs;
  tier_class->on_new_request = test_pull_tier_on_new_request;
  tier_class->drain_jobs = test_pull_tier_drain_jobs;
  tier_class->shutdown = test_pull_tier_shutdown;
}

static void
test_pull_tier_init (TestPullTier *self)
{
  g_mutex_init (&self->lock);
  self->done = g_ptr_array_new ();
  self->threads = g_ptr_array_new ();
}

typedef enum {
  WAIT_RESET_CACHE,
  WAIT_DRAIN,
  WAIT_SHUTDOWN,
} WaitKind;

typedef struct
{
  const char *name;
  WaitKind    wait;
  guint       deadline_ms;
  guint       finish_after_ms;
} PullCase;

static const PullCase cases[] = {
  { "reset-cache", WAIT_RESET_CACHE, 0, 0 },
  { "reset-cache/deadline", WAIT_RESET_CACHE, 2000, 0 },
  { "reset-cache/later", WAIT_RESET_CACHE, 0, 100 },
  { "reset-cache/later-deadline", WAIT_RESET_CACHE, 2000, 100 },
  { "drain", WAIT_DRAIN, 0, 0 },
  { "drain/deadline", WAIT_DRAIN, 2000, 0 },
  { "shutdown", WAIT_SHUTDOWN, 0, 0 },
  { "shutdown/deadline", WAIT_SHUTDOWN, 2000, 0 },
  { "shutdown/later", WAIT_SHUTDOWN, 0, 100 },
};

static void
on_job_finished (KvSecondaryTier *tier,
                 KvJobResult     *result,
                 gpointer         user_data)
{
  GPtrArray *finished = user_data;

  g_ptr_array_add (finished, kv_job_result_ref (result));
}

static void
run_case (const PullCase *c)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, &error);
  g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (buffer, NULL, TRUE);
  g_autoptr(KvTieringManager) manager = kv_tiering_manager_new (primary);
  g_autoptr(TestPullTier) tier = NULL;
  g_autoptr(GPtrArray) finished = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  g_autoptr(KvRequest) request = kv_request_new ("r", NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(KvKey) key = kv_key_new ((const guint8 *) "0123456789abcdef", 16, 0);
  g_autoptr(GTimer) timer = g_timer_new ();
  guint64 expired_before;

  g_assert_no_error (error);
  tier = g_object_new (TEST_TYPE_PULL_TIER, "primary", buffer, "tier-type", "pull",
                       "deadline-ms", c->deadline_ms, NULL);
  tier->finish_after_ms = c->finish_after_ms;
  g_signal_connect (tier, "job-finished", G_CALLBACK (on_job_finished), finished);
  g_assert_true (kv_tiering_manager_add_tier (manager, KV_SECONDARY_TIER (tier), &error));
  g_assert_no_error (error);

  /* one cascade job, which the tier finishes (now, or a bit later) */
  kv_tiering_manager_on_new_request (manager, request);
  prepared = kv_tiering_manager_prepare_store (manager, &key, 1, request, &error);
  g_assert_no_error (error);
  kv_tiering_manager_complete_store (manager, &key, 1, request, TRUE);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (manager), ==, 1);
  expired_before = kv_secondary_tier_get_n_expired_jobs (KV_SECONDARY_TIER (tier));

  switch (c->wait)
    {
    case WAIT_RESET_CACHE:
      g_assert_true (kv_tiering_manager_reset_cache (manager, &error));
      g_assert_no_error (error);
      break;
    case WAIT_DRAIN:
      {
        g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

        g_assert_true (kv_secondary_tier_drain_jobs (KV_SECONDARY_TIER (tier), &error));
        g_assert_no_error (error);
        g_assert_cmpuint (kv_secondary_tier_get_n_jobs_in_flight (KV_SECONDARY_TIER (tier)), ==, 0);
        /* the next step consumes what the drain collected (this one
         * polled already, in prepare_store) */
        kv_tiering_manager_on_schedule_end (manager, end);
        kv_tiering_manager_on_schedule_end (manager, end);
      }
      break;
    case WAIT_SHUTDOWN:
      g_assert_true (kv_tiering_manager_shutdown (manager, &error));
      g_assert_no_error (error);
      break;
    }

  /* the tier's own result, reported once, well within any deadline */
  g_assert_cmpuint (finished->len, ==, 1);
  g_assert_true (kv_job_result_get_success (finished->pdata[0]));
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (manager), ==, 0);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (KV_SECONDARY_TIER (tier)), ==,
                    expired_before);
  g_assert_cmpuint (kv_secondary_tier_get_n_late_completions (KV_SECONDARY_TIER (tier)), ==, 0);
  if (c->deadline_ms > 0)
    g_assert_cmpfloat (g_timer_elapsed (timer, NULL) * 1000, <, c->deadline_ms);
  /* the tier chunk is unpinned: the primary tier can take it back */
  g_assert_cmpint (kv_primary_tier_lookup (primary, key), ==,
                   c->wait == WAIT_RESET_CACHE ? KV_LOOKUP_RESULT_MISS : KV_LOOKUP_RESULT_HIT);

  if (c->wait != WAIT_SHUTDOWN)
    {
      g_assert_true (kv_tiering_manager_shutdown (manager, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (finished->len, ==, 1);
    }
}

static void
test_pull (gconstpointer data)
{
  const PullCase *c = data;

  if (g_test_subprocess ())
    {
      run_case (c);
      return;
    }
  /* a hang is a failure, not a stuck test run */
  g_test_trap_subprocess (NULL, CASE_TIMEOUT_US, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_test_trap_assert_passed ();
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *path = g_strdup_printf ("/pull-tier/%s", cases[i].name);

      g_test_add_data_func (path, &cases[i], test_pull);
    }
  return g_test_run ();
}
