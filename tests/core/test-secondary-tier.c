/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <gmodule.h>

#include "kvtier.h"
#include "kv-secondary-tier-private.h"
#include "kv-async-lookup-private.h"

#include "kv-example-tier.h"
#include "kv-fault-tier.h"

#define SLOT_SIZE 4096
#define N_SLOTS   8

/* ------------------------------------------------------------------ */
/* A configurable tier for the invoker tests                           */

#define TEST_TYPE_TIER (test_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestTier, test_tier, TEST, TIER, KvSecondaryTier)

struct _TestTier
{
  KvSecondaryTier parent_instance;

  KvLookupResult  lookup_answer;
  KvOffloadPolicy policy_answer;
  gboolean        submit_fails_silently; /* FALSE without a GError */
  gboolean        drain_fails_silently;
  gboolean        shutdown_fails;        /* FALSE with a GError */
  gboolean        finished_returns_null;

  guint           n_lookups;
  guint           n_submits;
  guint           n_shutdowns;
  guint           n_touches;
  guint           n_job_finished;
  GPtrArray      *touched;               /* keys of the last touch */
  gboolean        touched_terminated;
};

G_DEFINE_FINAL_TYPE (TestTier, test_tier, KV_TYPE_SECONDARY_TIER)

static KvLookupResult
test_tier_lookup (KvSecondaryTier *tier,
                  KvKey           *key,
                  KvRequest       *request)
{
  TestTier *self = TEST_TIER (tier);

  self->n_lookups++;
  return self->lookup_answer;
}

static gboolean
test_tier_submit (KvSecondaryTier  *tier,
                  KvTransferJob    *job,
                  GError          **error)
{
  TestTier *self = TEST_TIER (tier);

  self->n_submits++;
  return !self->submit_fails_silently;
}

static KvOffloadPolicy
test_tier_on_new_request (KvSecondaryTier *tier,
                          KvRequest       *request)
{
  return TEST_TIER (tier)->policy_answer;
}

static gboolean
test_tier_drain_jobs (KvSecondaryTier  *tier,
                      GError          **error)
{
  return !TEST_TIER (tier)->drain_fails_silently;
}

static gboolean
test_tier_shutdown (KvSecondaryTier  *tier,
                    GError          **error)
{
  TestTier *self = TEST_TIER (tier);

  self->n_shutdowns++;
  if (self->shutdown_fails)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_BUSY, "busy");
      return FALSE;
    }
  return TRUE;
}

static void
test_tier_touch (KvSecondaryTier  *tier,
                 KvKey           **keys,
                 KvRequest        *request)
{
  TestTier *self = TEST_TIER (tier);
  guint i;

  self->n_touches++;
  g_ptr_array_set_size (self->touched, 0);
  for (i = 0; keys[i] != NULL; i++)
    g_ptr_array_add (self->touched, kv_key_ref (keys[i]));
  self->touched_terminated = keys[i] == NULL;
}

static KvJobResult **
test_tier_get_finished_jobs (KvSecondaryTier *tier)
{
  TestTier *self = TEST_TIER (tier);

  if (self->finished_returns_null)
    return NULL;
  return KV_SECONDARY_TIER_CLASS (test_tier_parent_class)->get_finished_jobs (tier);
}

static void
test_tier_job_finished (KvSecondaryTier *tier,
                        KvJobResult     *result)
{
  TEST_TIER (tier)->n_job_finished++;
}

static void
test_tier_finalize (GObject *object)
{
  g_ptr_array_unref (TEST_TIER (object)->touched);
  G_OBJECT_CLASS (test_tier_parent_class)->finalize (object);
}

static void
test_tier_class_init (TestTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = test_tier_finalize;

  tier_class->medium = KV_MEDIUM_STORAGE;
  tier_class->lookup = test_tier_lookup;
  tier_class->submit_store = test_tier_submit;
  tier_class->submit_load = test_tier_submit;
  tier_class->on_new_request = test_tier_on_new_request;
  tier_class->drain_jobs = test_tier_drain_jobs;
  tier_class->shutdown = test_tier_shutdown;
  tier_class->touch = test_tier_touch;
  tier_class->get_finished_jobs = test_tier_get_finished_jobs;
  tier_class->job_finished = test_tier_job_finished;
}

static void
test_tier_init (TestTier *self)
{
  self->touched = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
}

/* A tier that implements nothing. */
#define TEST_TYPE_EMPTY_TIER (test_empty_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestEmptyTier, test_empty_tier, TEST, EMPTY_TIER, KvSecondaryTier)

struct _TestEmptyTier
{
  KvSecondaryTier parent_instance;
};

G_DEFINE_FINAL_TYPE (TestEmptyTier, test_empty_tier, KV_TYPE_SECONDARY_TIER)

static void
test_empty_tier_class_init (TestEmptyTierClass *klass)
{
}

static void
test_empty_tier_init (TestEmptyTier *self)
{
}

/* A tier that answers through an async lookup and writes none of its
 * plumbing: its vfuncs only record that they ran, and what the lookup
 * looked like when they did. */
#define TEST_TYPE_LOOKUP_TIER (test_lookup_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestLookupTier, test_lookup_tier, TEST, LOOKUP_TIER, KvSecondaryTier)

struct _TestLookupTier
{
  KvSecondaryTier parent_instance;
  gint            n_checks;          /* atomic: the lookup's key func */
  guint           n_finished;        /* on_request_finished calls */
  guint           keys_at_finished;  /* lookup's keys during the last one */
  guint           n_step_ends;
  guint           posted_at_step_end; /* lookup's batches during the last one */
  guint           n_shutdowns;
  gboolean        live_at_shutdown;  /* the lookup still took keys then */
};

G_DEFINE_FINAL_TYPE (TestLookupTier, test_lookup_tier, KV_TYPE_SECONDARY_TIER)

static KvKey *make_key (guint n);

static gboolean
test_lookup_tier_check (KvKey     *key,
                        KvRequest *request,
                        gpointer   user_data)
{
  TestLookupTier *self = user_data;

  g_atomic_int_inc (&self->n_checks);
  return TRUE;
}

static gboolean
test_lookup_tier_has_pending_work (KvSecondaryTier *tier)
{
  return FALSE;
}

static void
test_lookup_tier_on_request_finished (KvSecondaryTier *tier,
                                      KvRequest       *request)
{
  TestLookupTier *self = TEST_LOOKUP_TIER (tier);

  self->n_finished++;
  self->keys_at_finished = kv_async_lookup_get_n_keys (kv_secondary_tier_get_async_lookup (tier));
}

static void
test_lookup_tier_on_schedule_end (KvSecondaryTier *tier,
                                  KvScheduleEnd   *schedule_end)
{
  TestLookupTier *self = TEST_LOOKUP_TIER (tier);

  self->n_step_ends++;
  self->posted_at_step_end = kv_async_lookup_get_n_posted (kv_secondary_tier_get_async_lookup (tier));
}

static gboolean
test_lookup_tier_shutdown (KvSecondaryTier  *tier,
                           GError          **error)
{
  TestLookupTier *self = TEST_LOOKUP_TIER (tier);
  g_autoptr(KvRequest) probe = kv_request_new ("at-shutdown", NULL);
  g_autoptr(KvKey) key = make_key (999);

  self->n_shutdowns++;
  /* a lookup that is shut down answers MISS at once, a live one RETRY */
  self->live_at_shutdown =
    kv_async_lookup_lookup (kv_secondary_tier_get_async_lookup (tier), key, probe) ==
    KV_LOOKUP_RESULT_RETRY;
  return TRUE;
}

static void
test_lookup_tier_class_init (TestLookupTierClass *klass)
{
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  /* no lookup: the base class's default answers (nor on_new_request,
   * which these cases do not call) */
  tier_class->has_pending_work = test_lookup_tier_has_pending_work;
  tier_class->on_request_finished = test_lookup_tier_on_request_finished;
  tier_class->on_schedule_end = test_lookup_tier_on_schedule_end;
  tier_class->shutdown = test_lookup_tier_shutdown;
}

static void
test_lookup_tier_init (TestLookupTier *self)
{
}

static KvAsyncLookup *
test_lookup_tier_attach (TestLookupTier *self)
{
  g_autoptr(KvAsyncLookup) async =
    kv_async_lookup_new_for_keys ("lookup-tier", test_lookup_tier_check, self, NULL, 1, 8, 1024);

  kv_secondary_tier_set_async_lookup (KV_SECONDARY_TIER (self), async);
  return async;
}

/* A concrete detector, only to fill the property. */
#define TEST_TYPE_DETECTOR (test_detector_get_type ())
G_DECLARE_FINAL_TYPE (TestDetector, test_detector, TEST, DETECTOR, KvBackpressureDetector)

struct _TestDetector
{
  KvBackpressureDetector parent_instance;
};

G_DEFINE_FINAL_TYPE (TestDetector, test_detector, KV_TYPE_BACKPRESSURE_DETECTOR)

static void
test_detector_class_init (TestDetectorClass *klass)
{
}

static void
test_detector_init (TestDetector *self)
{
}

/* An example tier whose store jobs wait on the worker until released. */
#define TEST_TYPE_BLOCKING_TIER (test_blocking_tier_get_type ())
G_DECLARE_FINAL_TYPE (TestBlockingTier, test_blocking_tier, TEST, BLOCKING_TIER, KvExampleTier)

struct _TestBlockingTier
{
  KvExampleTier parent_instance;

  GMutex   lock;
  GCond    cond;
  guint    n_entered;
  gboolean released;
};

G_DEFINE_FINAL_TYPE (TestBlockingTier, test_blocking_tier, KV_TYPE_EXAMPLE_TIER)

static void
test_blocking_tier_run_store (KvExampleTier *example,
                              KvTierJob     *tier_job)
{
  TestBlockingTier *self = TEST_BLOCKING_TIER (example);

  g_mutex_lock (&self->lock);
  self->n_entered++;
  g_cond_broadcast (&self->cond);
  while (!self->released)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);

  KV_EXAMPLE_TIER_CLASS (test_blocking_tier_parent_class)->run_store (example, tier_job);
}

static void
test_blocking_tier_finalize (GObject *object)
{
  TestBlockingTier *self = TEST_BLOCKING_TIER (object);

  g_cond_clear (&self->cond);
  g_mutex_clear (&self->lock);
  G_OBJECT_CLASS (test_blocking_tier_parent_class)->finalize (object);
}

static void
test_blocking_tier_class_init (TestBlockingTierClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = test_blocking_tier_finalize;
  KV_EXAMPLE_TIER_CLASS (klass)->run_store = test_blocking_tier_run_store;
}

static void
test_blocking_tier_init (TestBlockingTier *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
}

/* A parent manager whose answers the tests choose. */
#define TEST_TYPE_PARENT (test_parent_get_type ())
G_DECLARE_FINAL_TYPE (TestParent, test_parent, TEST, PARENT, GObject)

struct _TestParent
{
  GObject         parent_instance;

  KvLookupResult  lookup_answer;
  KvTransferJob  *job_answer;       /* NULL: fail without an error */
  guint           n_new_requests;
  guint           n_finished_requests;
  guint           n_keys_seen;
};

static void test_parent_iface_init (KvParentManagerInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (TestParent, test_parent, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_PARENT_MANAGER, test_parent_iface_init))

static KvOffloadPolicy
test_parent_on_new_request (KvParentManager *parent,
                            KvRequest       *request)
{
  TEST_PARENT (parent)->n_new_requests++;
  return KV_OFFLOAD_POLICY_REQUEST_LEVEL;
}

static KvLookupResult
test_parent_lookup (KvParentManager *parent,
                    KvKey           *key,
                    KvRequest       *request)
{
  return TEST_PARENT (parent)->lookup_answer;
}

static KvTransferJob *
test_parent_create_store_job (KvParentManager  *parent,
                              KvKey           **keys,
                              KvRequest        *request,
                              GError          **error)
{
  TestParent *self = TEST_PARENT (parent);
  guint n = 0;

  while (keys[n] != NULL)
    n++;
  self->n_keys_seen = n;

  return self->job_answer != NULL ? kv_transfer_job_ref (self->job_answer) : NULL;
}

static void
test_parent_on_request_finished (KvParentManager *parent,
                                 KvRequest       *request)
{
  TEST_PARENT (parent)->n_finished_requests++;
}

static void
test_parent_iface_init (KvParentManagerInterface *iface)
{
  iface->on_new_request = test_parent_on_new_request;
  iface->lookup = test_parent_lookup;
  iface->create_store_job = test_parent_create_store_job;
  iface->on_request_finished = test_parent_on_request_finished;
}

static void
test_parent_class_init (TestParentClass *klass)
{
}

static void
test_parent_init (TestParent *self)
{
}

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

static KvKey *
make_key (guint n)
{
  guint8 hash[32];

  memset (hash, 0, sizeof hash);
  hash[0] = 0xab;
  hash[30] = (guint8) (n >> 8);
  hash[31] = (guint8) n;
  return kv_key_new (hash, sizeof hash, 0);
}

static KvKey **
make_keys (guint first,
           guint n)
{
  KvKey **keys = g_new0 (KvKey *, n + 1);
  guint i;

  for (i = 0; i < n; i++)
    keys[i] = make_key (first + i);
  return keys;
}

static void
free_keys (KvKey **keys)
{
  guint i;

  for (i = 0; keys[i] != NULL; i++)
    kv_key_unref (keys[i]);
  g_free (keys);
}

static KvHostBuffer *
make_primary (void)
{
  g_autoptr(GError) error = NULL;
  KvHostBuffer *primary = kv_host_buffer_new (N_SLOTS, SLOT_SIZE, &error);

  g_assert_no_error (error);
  g_assert_nonnull (primary);
  return primary;
}

static guint8
pattern_byte (guint seed,
              gsize offset)
{
  return (guint8) (seed * 131 + offset * 7 + (offset >> 8));
}

static void
fill_slot (KvHostBuffer *primary,
           guint32       slot,
           guint         seed)
{
  guint8 *p = kv_host_buffer_peek_slot (primary, slot);
  gsize i;

  for (i = 0; i < SLOT_SIZE; i++)
    p[i] = pattern_byte (seed, i);
}

static void
assert_slot_pattern (KvHostBuffer *primary,
                     guint32       slot,
                     guint         seed)
{
  const guint8 *p = kv_host_buffer_peek_slot (primary, slot);
  gsize i;

  for (i = 0; i < SLOT_SIZE; i++)
    if (p[i] != pattern_byte (seed, i))
      g_error ("slot %u byte %" G_GSIZE_FORMAT ": %u, expected %u",
               slot, i, p[i], pattern_byte (seed, i));
}

static void
assert_slot_zero (KvHostBuffer *primary,
                  guint32       slot)
{
  const guint8 *p = kv_host_buffer_peek_slot (primary, slot);
  gsize i;

  for (i = 0; i < SLOT_SIZE; i++)
    g_assert_cmpuint (p[i], ==, 0);
}

static KvTransferJob *
make_job (guint64        id,
          KvKey        **keys,
          const guint32 *chunk_ids,
          guint          n,
          gboolean       is_promotion,
          KvRequest     *request)
{
  return kv_transfer_job_new (id, keys, chunk_ids, n, is_promotion, request);
}

static guint
count_results (KvJobResult **results)
{
  guint n = 0;

  while (results[n] != NULL)
    n++;
  return n;
}

static void
free_results (KvJobResult **results)
{
  guint i;

  for (i = 0; results[i] != NULL; i++)
    kv_job_result_unref (results[i]);
  g_free (results);
}

static void
free_events (KvEvent **events)
{
  guint i;

  for (i = 0; events[i] != NULL; i++)
    kv_event_unref (events[i]);
  g_free (events);
}

/* Drains @tier and returns what it reported. */
static KvJobResult **
drain_and_collect (KvSecondaryTier *tier)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_secondary_tier_drain_jobs (tier, &error));
  g_assert_no_error (error);
  return kv_secondary_tier_get_finished_jobs (tier);
}

/* Submits one job, drains, and returns its single result. */
static KvJobResult *
run_one (KvSecondaryTier *tier,
         KvTransferJob   *job,
         gboolean         is_load)
{
  g_autoptr(GError) error = NULL;
  KvJobResult **results;
  KvJobResult *result;
  gboolean ok;

  ok = is_load ? kv_secondary_tier_submit_load (tier, job, &error)
               : kv_secondary_tier_submit_store (tier, job, &error);
  g_assert_no_error (error);
  g_assert_true (ok);

  results = drain_and_collect (tier);
  g_assert_cmpuint (count_results (results), ==, 1);
  result = kv_job_result_ref (results[0]);
  free_results (results);

  g_assert_cmpuint (kv_job_result_get_job_id (result), ==, kv_transfer_job_get_id (job));
  return result;
}

static void
queued_count_cb (gpointer user_data)
{
  g_atomic_int_inc ((gint *) user_data);
}

/* ------------------------------------------------------------------ */
/* KvSecondaryTier                                                     */

static void
test_tier_properties (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(KvBackpressureDetector) detector = g_object_new (TEST_TYPE_DETECTOR, NULL);
  g_autoptr(KvSecondaryTier) plain = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvSecondaryTier) tier = NULL;
  g_autofree char *tier_type = NULL;
  guint64 block_size = 0;
  KvMedium medium;

  /* Defaults: the type name, the class medium, no primary. */
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (plain), ==, "TestTier");
  g_assert_cmpint (kv_secondary_tier_get_medium (plain), ==, KV_MEDIUM_STORAGE);
  g_assert_cmpint (kv_secondary_tier_get_locality (plain), ==, KV_LOCALITY_UNSPECIFIED);
  g_assert_null (kv_secondary_tier_get_primary (plain));
  g_assert_null (kv_secondary_tier_get_backpressure_detector (plain));
  g_assert_cmpuint (kv_secondary_tier_get_block_size_bytes (plain), ==, 0);

  tier = g_object_new (TEST_TYPE_TIER,
                       "tier-type", "mine",
                       "primary", primary,
                       "backpressure-detector", detector,
                       "locality", KV_LOCALITY_REMOTE,
                       "medium", KV_MEDIUM_CPU,
                       NULL);
  g_assert_cmpstr (kv_secondary_tier_get_tier_type (tier), ==, "mine");
  g_assert_true (kv_secondary_tier_get_primary (tier) == primary);
  g_assert_true (kv_secondary_tier_get_backpressure_detector (tier) == detector);
  g_assert_cmpint (kv_secondary_tier_get_locality (tier), ==, KV_LOCALITY_REMOTE);
  g_assert_cmpint (kv_secondary_tier_get_medium (tier), ==, KV_MEDIUM_CPU);
  g_assert_cmpuint (kv_secondary_tier_get_block_size_bytes (tier), ==, SLOT_SIZE);

  g_object_get (tier,
                "tier-type", &tier_type,
                "block-size-bytes", &block_size,
                "medium", &medium,
                NULL);
  g_assert_cmpstr (tier_type, ==, "mine");
  g_assert_cmpuint (block_size, ==, SLOT_SIZE);
  g_assert_cmpint (medium, ==, KV_MEDIUM_CPU);
}

static void
test_tier_argument_checks (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);
  g_autoptr(GError) error = NULL;
  KvKey *keys_with_hole[] = { key, NULL, key };

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*KV_IS_SECONDARY_TIER*failed*");
  g_assert_cmpint (kv_secondary_tier_lookup (NULL, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*key != NULL*failed*");
  g_assert_cmpint (kv_secondary_tier_lookup (tier, NULL, request), ==, KV_LOOKUP_RESULT_MISS);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*KV_IS_REQUEST*failed*");
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, NULL), ==, KV_LOOKUP_RESULT_MISS);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*job != NULL*failed*");
  g_assert_false (kv_secondary_tier_submit_store (tier, NULL, &error));
  g_test_assert_expected_messages ();
  g_assert_no_error (error);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*job != NULL*failed*");
  g_assert_false (kv_secondary_tier_submit_load (tier, NULL, &error));
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*keys[i] != NULL*failed*");
  kv_secondary_tier_touch (tier, keys_with_hole, 3, request);
  g_test_assert_expected_messages ();
  g_assert_cmpuint (TEST_TIER (tier)->n_touches, ==, 0);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*keys != NULL*failed*");
  kv_secondary_tier_touch (tier, NULL, 2, request);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*result != NULL*failed*");
  kv_secondary_tier_complete_job (tier, NULL);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*event != NULL*failed*");
  kv_secondary_tier_push_event (tier, NULL);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*KV_IS_PARENT_MANAGER*failed*");
  kv_secondary_tier_serve_external_requests (tier, NULL);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*schedule_end != NULL*failed*");
  kv_secondary_tier_on_schedule_end (tier, NULL);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*KV_IS_SECONDARY_TIER*failed*");
  g_assert_null (kv_secondary_tier_get_finished_jobs (NULL));
  g_test_assert_expected_messages ();

  g_assert_cmpuint (TEST_TIER (tier)->n_lookups, ==, 0);
  g_assert_cmpuint (TEST_TIER (tier)->n_submits, ==, 0);
}

static void
test_tier_false_without_error (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);
  g_autoptr(KvTransferJob) job = make_job (7, &key, (guint32[]) { 0 }, 1, FALSE, request);
  g_autoptr(GError) error = NULL;

  /* What PyGObject returns when do_submit_store raised a ValueError. */
  TEST_TIER (tier)->submit_fails_silently = TRUE;
  g_assert_false (kv_secondary_tier_submit_store (tier, job, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "TestTier"));
  g_assert_nonnull (strstr (error->message, "submit_store"));
  g_clear_error (&error);

  g_assert_false (kv_secondary_tier_submit_load (tier, job, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "submit_load"));
  g_clear_error (&error);

  /* A caller that passes no GError still gets FALSE. */
  g_assert_false (kv_secondary_tier_submit_store (tier, job, NULL));

  TEST_TIER (tier)->drain_fails_silently = TRUE;
  g_assert_false (kv_secondary_tier_drain_jobs (tier, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "TestTier.drain_jobs"));
  g_clear_error (&error);

  TEST_TIER (tier)->submit_fails_silently = FALSE;
  g_assert_true (kv_secondary_tier_submit_store (tier, job, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (TEST_TIER (tier)->n_submits, ==, 4);
}

static void
test_tier_missing_vfunc (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_EMPTY_TIER, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);
  g_autoptr(KvTransferJob) job = make_job (1, &key, (guint32[]) { 0 }, 1, FALSE, request);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;

  g_assert_false (kv_secondary_tier_submit_store (tier, job, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_assert_cmpstr (error->message, ==, "TestEmptyTier does not implement submit_store");
  g_clear_error (&error);

  g_assert_false (kv_secondary_tier_submit_load (tier, job, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_assert_cmpstr (error->message, ==, "TestEmptyTier does not implement submit_load");
  g_clear_error (&error);

  /* drain_jobs has a default: wait for the jobs the invokers accepted
   * (none here). */
  g_assert_true (kv_secondary_tier_drain_jobs (tier, &error));
  g_assert_no_error (error);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "TestEmptyTier does not implement lookup");
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "TestEmptyTier does not implement on_new_request");
  g_assert_cmpint (kv_secondary_tier_on_new_request (tier, request), ==, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_test_assert_expected_messages ();

  /* The optional vfuncs have defaults. */
  g_assert_false (kv_secondary_tier_has_pending_work (tier));
  kv_secondary_tier_touch (tier, &key, 1, request);
  kv_secondary_tier_on_request_finished (tier, request);
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_null (results[0]);
  free_results (results);
  g_assert_true (kv_secondary_tier_shutdown (tier, &error));
  g_assert_no_error (error);
}

/* A tier that set an async lookup gets its plumbing from the base class:
 * the default lookup asks it, the step's end flushes it after the tier's
 * vfunc, pending checks are pending work whatever the tier says, a
 * finished request is forgotten after the tier's vfunc, and shutdown
 * stops it after the tier's own. */
static void
test_tier_async_lookup_defaults (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_LOOKUP_TIER, NULL);
  TestLookupTier *self = TEST_LOOKUP_TIER (tier);
  KvAsyncLookup *async = test_lookup_tier_attach (self);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);
  g_autoptr(KvKey) late = make_key (2);
  g_autoptr(KvScheduleEnd) schedule_end = kv_schedule_end_new (NULL, NULL);
  g_autoptr(GError) error = NULL;

  /* the default lookup: not known yet, asked in the background */
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_RETRY);
  g_assert_cmpuint (kv_async_lookup_get_n_keys (async), ==, 1);
  g_assert_false (kv_secondary_tier_has_pending_work (tier));

  /* flushed at the step's end, after the tier's vfunc */
  kv_secondary_tier_on_schedule_end (tier, schedule_end);
  g_assert_cmpuint (self->n_step_ends, ==, 1);
  g_assert_cmpuint (self->posted_at_step_end, ==, 0);
  g_assert_cmpuint (kv_async_lookup_get_n_posted (async), ==, 1);
  /* posted and not answered yet, or answered: pending until collected */
  if (kv_async_lookup_get_n_pending (async) > 0)
    g_assert_true (kv_secondary_tier_has_pending_work (tier));
  kv_async_lookup_wait_idle (async);
  g_assert_false (kv_secondary_tier_has_pending_work (tier));
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (g_atomic_int_get (&self->n_checks), ==, 1);

  /* forgotten after the tier's vfunc */
  kv_secondary_tier_on_request_finished (tier, request);
  g_assert_cmpuint (self->n_finished, ==, 1);
  g_assert_cmpuint (self->keys_at_finished, ==, 1);
  g_assert_cmpuint (kv_async_lookup_get_n_keys (async), ==, 0);

  /* shut down after the tier's own shutdown */
  g_assert_true (kv_secondary_tier_shutdown (tier, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (self->n_shutdowns, ==, 1);
  g_assert_true (self->live_at_shutdown);
  g_assert_cmpint (kv_async_lookup_lookup (async, late, request), ==, KV_LOOKUP_RESULT_MISS);
}

/* has_pending_work counts the checks in flight even for a tier that says
 * FALSE: held up in the key func until the test lets it go. */
static GMutex held_lock;
static GCond held_cond;
static gboolean held_release;
static gboolean held_entered;

static gboolean
held_check (KvKey     *key,
            KvRequest *request,
            gpointer   user_data)
{
  g_mutex_lock (&held_lock);
  held_entered = TRUE;
  g_cond_broadcast (&held_cond);
  while (!held_release)
    g_cond_wait (&held_cond, &held_lock);
  g_mutex_unlock (&held_lock);
  return FALSE;
}

static void
test_tier_async_lookup_pending (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_LOOKUP_TIER, NULL);
  g_autoptr(KvAsyncLookup) async =
    kv_async_lookup_new_for_keys ("lookup-tier", held_check, NULL, NULL, 1, 8, 1024);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);
  g_autoptr(KvScheduleEnd) schedule_end = kv_schedule_end_new (NULL, NULL);

  kv_secondary_tier_set_async_lookup (tier, async);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_RETRY);
  kv_secondary_tier_on_schedule_end (tier, schedule_end);

  g_mutex_lock (&held_lock);
  while (!held_entered)
    g_cond_wait (&held_cond, &held_lock);
  g_mutex_unlock (&held_lock);
  g_assert_true (kv_secondary_tier_has_pending_work (tier));

  g_mutex_lock (&held_lock);
  held_release = TRUE;
  g_cond_broadcast (&held_cond);
  g_mutex_unlock (&held_lock);
  kv_async_lookup_wait_idle (async);
  g_assert_false (kv_secondary_tier_has_pending_work (tier));
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
}

/* A tier dropped without a shutdown: its dispose joins the lookup's
 * workers while the tier is whole, even if someone else holds the
 * lookup. */
static void
test_tier_async_lookup_dispose (void)
{
  KvSecondaryTier *tier = g_object_new (TEST_TYPE_LOOKUP_TIER, NULL);
  g_autoptr(KvAsyncLookup) async = g_object_ref (test_lookup_tier_attach (TEST_LOOKUP_TIER (tier)));
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);

  g_object_unref (tier);
  g_assert_cmpint (kv_async_lookup_lookup (async, key, request), ==, KV_LOOKUP_RESULT_MISS);
}

static void
test_tier_closed_after_shutdown (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);
  g_autoptr(KvTransferJob) job = make_job (3, &key, (guint32[]) { 0 }, 1, FALSE, request);
  g_autoptr(KvJobResult) result = kv_job_result_new (3, TRUE);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;

  TEST_TIER (tier)->lookup_answer = KV_LOOKUP_RESULT_HIT;

  /* A failed shutdown leaves the tier open. */
  TEST_TIER (tier)->shutdown_fails = TRUE;
  g_assert_false (kv_secondary_tier_shutdown (tier, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_BUSY);
  g_clear_error (&error);
  g_assert_true (kv_secondary_tier_submit_store (tier, job, &error));
  g_assert_no_error (error);
  kv_secondary_tier_complete_job (tier, result);

  TEST_TIER (tier)->shutdown_fails = FALSE;
  g_assert_true (kv_secondary_tier_shutdown (tier, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (TEST_TIER (tier)->n_shutdowns, ==, 2);

  g_assert_false (kv_secondary_tier_submit_store (tier, job, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  g_assert_nonnull (strstr (error->message, "TestTier"));
  g_clear_error (&error);
  g_assert_false (kv_secondary_tier_submit_load (tier, job, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  g_clear_error (&error);
  g_assert_cmpuint (TEST_TIER (tier)->n_submits, ==, 1);

  /* A closed tier misses and ignores hints, without calling vfuncs. */
  g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (TEST_TIER (tier)->n_lookups, ==, 0);
  kv_secondary_tier_touch (tier, &key, 1, request);
  g_assert_cmpuint (TEST_TIER (tier)->n_touches, ==, 0);

  /* Nothing to drain, a second shutdown is a no-op... */
  g_assert_true (kv_secondary_tier_drain_jobs (tier, &error));
  g_assert_no_error (error);
  g_assert_true (kv_secondary_tier_shutdown (tier, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (TEST_TIER (tier)->n_shutdowns, ==, 2);

  /* ...and the result reported before still comes out. */
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_cmpuint (count_results (results), ==, 1);
  g_assert_true (results[0] == result);
  free_results (results);
}

static void
test_tier_lookup_mapping (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(KvKey) key = make_key (1);
  const struct {
    int answer;
    KvLookupResult expected;
  } cases[] = {
    { KV_LOOKUP_RESULT_HIT, KV_LOOKUP_RESULT_HIT },
    { KV_LOOKUP_RESULT_MISS, KV_LOOKUP_RESULT_MISS },
    { KV_LOOKUP_RESULT_RETRY, KV_LOOKUP_RESULT_RETRY },
    { KV_LOOKUP_RESULT_HIT_PENDING, KV_LOOKUP_RESULT_RETRY },
    { 42, KV_LOOKUP_RESULT_MISS },
    { -1, KV_LOOKUP_RESULT_MISS },
  };
  gsize i;

  for (i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      TEST_TIER (tier)->lookup_answer = (KvLookupResult) cases[i].answer;
      g_assert_cmpint (kv_secondary_tier_lookup (tier, key, request), ==, cases[i].expected);
    }
  g_assert_cmpuint (TEST_TIER (tier)->n_lookups, ==, G_N_ELEMENTS (cases));

  /* Same idea for the offload policy. */
  TEST_TIER (tier)->policy_answer = KV_OFFLOAD_POLICY_REQUEST_LEVEL;
  g_assert_cmpint (kv_secondary_tier_on_new_request (tier, request), ==, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  TEST_TIER (tier)->policy_answer = (KvOffloadPolicy) 9;
  g_assert_cmpint (kv_secondary_tier_on_new_request (tier, request), ==, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
}

static void
test_tier_touch_terminates_keys (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  const guint sizes[] = { 0, 3, 64, 65, 200 };
  gsize s;

  for (s = 0; s < G_N_ELEMENTS (sizes); s++)
    {
      KvKey **keys = make_keys (0, sizes[s]);
      guint i;

      kv_secondary_tier_touch (tier, keys, sizes[s], request);
      g_assert_cmpuint (TEST_TIER (tier)->n_touches, ==, s + 1);
      g_assert_true (TEST_TIER (tier)->touched_terminated);
      g_assert_cmpuint (TEST_TIER (tier)->touched->len, ==, sizes[s]);
      for (i = 0; i < sizes[s]; i++)
        g_assert_true (g_ptr_array_index (TEST_TIER (tier)->touched, i) == keys[i]);
      free_keys (keys);
    }
}

static void
test_tier_finished_jobs_never_null (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvJobResult) result = kv_job_result_new (1, TRUE);
  KvJobResult **results;
  KvEvent **events;

  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_nonnull (results);
  g_assert_null (results[0]);
  free_results (results);

  events = kv_secondary_tier_take_events (tier);
  g_assert_nonnull (events);
  g_assert_null (events[0]);
  free_events (events);

  /* A binding vfunc returning None gives an empty array too; what
   * complete_job() queued (the base class's queue: also the failures of
   * deadlines) comes out all the same, whatever the override returns. */
  TEST_TIER (tier)->finished_returns_null = TRUE;
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_nonnull (results);
  g_assert_null (results[0]);
  free_results (results);

  kv_secondary_tier_complete_job (tier, result);
  g_assert_true (_kv_secondary_tier_has_queued_results (tier));
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_cmpuint (count_results (results), ==, 1);
  g_assert_true (results[0] == result);
  free_results (results);
  g_assert_false (_kv_secondary_tier_has_queued_results (tier));

  TEST_TIER (tier)->finished_returns_null = FALSE;
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_cmpuint (count_results (results), ==, 0);
  free_results (results);
}

#define N_CONCURRENT_RESULTS 10000

static void
complete_from_pool (gpointer data,
                    gpointer user_data)
{
  KvSecondaryTier *tier = user_data;
  guint64 job_id = GPOINTER_TO_SIZE (data) - 1; /* pool data cannot be NULL */
  KvJobResult *result = kv_job_result_new (job_id, TRUE);

  kv_secondary_tier_complete_job (tier, result);
  kv_job_result_unref (result);
}

static guint
take_and_mark (KvSecondaryTier *tier,
               guint8          *seen)
{
  KvJobResult **results = kv_secondary_tier_get_finished_jobs (tier);
  guint n = 0;

  for (; results[n] != NULL; n++)
    {
      guint64 id = kv_job_result_get_job_id (results[n]);

      g_assert_cmpuint (id, <, N_CONCURRENT_RESULTS);
      if (seen[id])
        g_error ("job %" G_GUINT64_FORMAT " reported twice", id);
      seen[id] = 1;
    }
  free_results (results);
  return n;
}

static void
test_tier_complete_job_threads (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(GError) error = NULL;
  g_autofree guint8 *seen = g_new0 (guint8, N_CONCURRENT_RESULTS);
  guint n_threads = g_get_num_processors () + 2;
  GThreadPool *pool;
  gint n_queued_calls = 0;
  guint n_seen = 0;
  guint i;

  _kv_secondary_tier_set_queued_func (tier, queued_count_cb, &n_queued_calls);

  pool = g_thread_pool_new (complete_from_pool, tier, (gint) n_threads, TRUE, &error);
  g_assert_no_error (error);
  for (i = 0; i < N_CONCURRENT_RESULTS; i++)
    g_thread_pool_push (pool, GSIZE_TO_POINTER ((gsize) i + 1), NULL);

  /* The owner thread drains while the workers are still completing... */
  while (g_thread_pool_unprocessed (pool) > 0)
    {
      guint n = take_and_mark (tier, seen);

      n_seen += n;
      if (n == 0)
        g_thread_yield ();
    }
  g_thread_pool_free (pool, FALSE, TRUE);

  /* ...and takes the rest once they are done. */
  n_seen += take_and_mark (tier, seen);
  g_assert_cmpuint (n_seen, ==, N_CONCURRENT_RESULTS);
  for (i = 0; i < N_CONCURRENT_RESULTS; i++)
    g_assert_cmpuint (seen[i], ==, 1);
  g_assert_cmpuint (take_and_mark (tier, seen), ==, 0);
  g_assert_false (_kv_secondary_tier_has_queued_results (tier));
  g_assert_cmpint (g_atomic_int_get (&n_queued_calls), ==, N_CONCURRENT_RESULTS);

  /* Once removed, the function is not called any more. */
  _kv_secondary_tier_set_queued_func (tier, NULL, NULL);
  complete_from_pool (GSIZE_TO_POINTER (1), tier);
  g_assert_cmpint (g_atomic_int_get (&n_queued_calls), ==, N_CONCURRENT_RESULTS);
  g_assert_true (_kv_secondary_tier_has_queued_results (tier));
}

typedef struct
{
  KvSecondaryTier *tier;
  KvEvent         *reentrant_event;
  guint            n_calls;
} ReentrantData;

/* Pushing from inside the queued func would deadlock if the tier held its
 * lock while calling out. */
static void
reentrant_queued_cb (gpointer user_data)
{
  ReentrantData *data = user_data;

  if (data->n_calls++ == 0)
    kv_secondary_tier_push_event (data->tier, data->reentrant_event);
}

static void
test_tier_push_event (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  KvKey **keys = make_keys (0, 2);
  g_autoptr(KvEvent) stored = kv_event_new (keys, 2, KV_MEDIUM_STORAGE, FALSE, KV_LOCALITY_LOCAL);
  g_autoptr(KvEvent) removed = kv_event_new (keys, 1, KV_MEDIUM_STORAGE, TRUE, KV_LOCALITY_LOCAL);
  ReentrantData data = { tier, removed, 0 };
  KvEvent **events;

  _kv_secondary_tier_set_queued_func (tier, reentrant_queued_cb, &data);
  kv_secondary_tier_push_event (tier, stored);
  g_assert_cmpuint (data.n_calls, ==, 2);
  /* Events are not results. */
  g_assert_false (_kv_secondary_tier_has_queued_results (tier));

  events = kv_secondary_tier_take_events (tier);
  g_assert_true (events[0] == stored);
  g_assert_true (events[1] == removed);
  g_assert_null (events[2]);
  free_events (events);

  events = kv_secondary_tier_take_events (tier);
  g_assert_null (events[0]);
  free_events (events);

  _kv_secondary_tier_set_queued_func (tier, NULL, NULL);
  free_keys (keys);
}

static void
job_finished_cb (KvSecondaryTier *tier,
                 KvJobResult     *result,
                 gpointer         user_data)
{
  KvJobResult **seen = user_data;

  /* Handlers run before the class closure (RUN_LAST). */
  g_assert_cmpuint (TEST_TIER (tier)->n_job_finished, ==, 0);
  *seen = result;
}

static void
test_tier_job_finished_signal (void)
{
  g_autoptr(KvSecondaryTier) tier = g_object_new (TEST_TYPE_TIER, NULL);
  g_autoptr(KvJobResult) result = kv_job_result_new (11, FALSE);
  KvJobResult *seen = NULL;

  g_signal_connect (tier, "job-finished", G_CALLBACK (job_finished_cb), &seen);
  _kv_secondary_tier_emit_job_finished (tier, result);
  g_assert_true (seen == result);
  g_assert_cmpuint (TEST_TIER (tier)->n_job_finished, ==, 1);
}

/* ------------------------------------------------------------------ */
/* KvParentManager                                                     */

static void
test_parent_manager_invokers (void)
{
  g_autoptr(TestParent) parent = g_object_new (TEST_TYPE_PARENT, NULL);
  KvParentManager *manager = KV_PARENT_MANAGER (parent);
  g_autoptr(KvRequest) request = kv_request_new ("remote", NULL);
  KvKey **keys = make_keys (0, 3);
  g_autoptr(KvTransferJob) job = make_job (5, keys, (guint32[]) { 0, 1, 2 }, 3, FALSE, request);
  g_autoptr(KvTransferJob) made = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (kv_parent_manager_on_new_request (manager, request), ==, KV_OFFLOAD_POLICY_REQUEST_LEVEL);
  g_assert_cmpuint (parent->n_new_requests, ==, 1);

  /* The manager, unlike a tier, may answer HIT_PENDING. */
  parent->lookup_answer = KV_LOOKUP_RESULT_HIT_PENDING;
  g_assert_cmpint (kv_parent_manager_lookup (manager, keys[0], request), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  parent->lookup_answer = (KvLookupResult) 17;
  g_assert_cmpint (kv_parent_manager_lookup (manager, keys[0], request), ==, KV_LOOKUP_RESULT_MISS);

  /* NULL without an error becomes KV_TIER_ERROR_FAILED. */
  g_assert_null (kv_parent_manager_create_store_job (manager, keys, request, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "TestParent"));
  g_clear_error (&error);
  g_assert_cmpuint (parent->n_keys_seen, ==, 3);

  parent->job_answer = job;
  made = kv_parent_manager_create_store_job (manager, keys, request, &error);
  g_assert_no_error (error);
  g_assert_true (made == job);

  kv_parent_manager_on_request_finished (manager, request);
  g_assert_cmpuint (parent->n_finished_requests, ==, 1);

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*keys != NULL*failed*");
  g_assert_null (kv_parent_manager_create_store_job (manager, NULL, request, &error));
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*KV_IS_PARENT_MANAGER*failed*");
  g_assert_cmpint (kv_parent_manager_lookup (NULL, keys[0], request), ==, KV_LOOKUP_RESULT_MISS);
  g_test_assert_expected_messages ();

  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*assertion*KV_IS_REQUEST*failed*");
  kv_parent_manager_on_request_finished (manager, NULL);
  g_test_assert_expected_messages ();
  g_assert_cmpuint (parent->n_finished_requests, ==, 1);

  free_keys (keys);
}

/* ------------------------------------------------------------------ */
/* KvExampleTier                                                       */

static void
test_example_defaults (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(KvExampleTier) example = kv_example_tier_new (primary);
  g_autoptr(KvSecondaryTier) request_level = NULL;
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (example);
  KvOffloadPolicy policy;
  gboolean events;
  guint n_workers;

  g_assert_cmpstr (kv_secondary_tier_get_tier_type (tier), ==, "example");
  g_assert_cmpint (kv_secondary_tier_get_medium (tier), ==, KV_MEDIUM_CPU);
  g_assert_cmpuint (kv_secondary_tier_get_block_size_bytes (tier), ==, SLOT_SIZE);
  g_object_get (tier,
                "n-workers", &n_workers,
                "offload-policy", &policy,
                "enable-events", &events,
                NULL);
  g_assert_cmpuint (n_workers, ==, 2);
  g_assert_cmpint (policy, ==, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_assert_false (events);
  g_assert_cmpint (kv_secondary_tier_on_new_request (tier, request), ==, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_assert_false (kv_secondary_tier_has_pending_work (tier));
  g_assert_cmpuint (kv_example_tier_get_n_stored (example), ==, 0);

  request_level = g_object_new (KV_TYPE_EXAMPLE_TIER,
                                "primary", primary,
                                "offload-policy", KV_OFFLOAD_POLICY_REQUEST_LEVEL,
                                "n-workers", 1,
                                NULL);
  g_assert_cmpint (kv_secondary_tier_on_new_request (request_level, request), ==,
                   KV_OFFLOAD_POLICY_REQUEST_LEVEL);
}

static void
test_example_round_trip (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(KvExampleTier) example = kv_example_tier_new (primary);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (example);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  KvKey **keys = make_keys (0, 3);
  g_autoptr(KvKey) absent = make_key (99);
  g_autoptr(KvTransferJob) store = make_job (1, keys, (guint32[]) { 0, 1, 2 }, 3, FALSE, request);
  g_autoptr(KvTransferJob) again = make_job (2, keys, (guint32[]) { 0, 1, 2 }, 3, FALSE, request);
  g_autoptr(KvTransferJob) load = make_job (3, keys, (guint32[]) { 7, 5, 6 }, 3, TRUE, request);
  g_autoptr(KvTransferJob) empty = make_job (4, NULL, NULL, 0, FALSE, request);
  KvJobResult *result;
  guint i;

  for (i = 0; i < 3; i++)
    fill_slot (primary, i, i + 1);
  g_assert_cmpint (kv_secondary_tier_lookup (tier, keys[0], request), ==, KV_LOOKUP_RESULT_MISS);

  result = run_one (tier, store, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 3 * SLOT_SIZE);
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), >=, 0.0);
  kv_job_result_unref (result);

  g_assert_cmpuint (kv_example_tier_get_n_stored (example), ==, 3);
  for (i = 0; i < 3; i++)
    {
      g_assert_true (kv_example_tier_contains (example, keys[i]));
      g_assert_cmpint (kv_secondary_tier_lookup (tier, keys[i], request), ==, KV_LOOKUP_RESULT_HIT);
    }
  g_assert_cmpint (kv_secondary_tier_lookup (tier, absent, request), ==, KV_LOOKUP_RESULT_MISS);

  /* Stored keys are skipped: nothing is copied twice. */
  result = run_one (tier, again, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 0);
  kv_job_result_unref (result);
  g_assert_cmpuint (kv_example_tier_get_n_stored (example), ==, 3);

  /* Overwrite the source slots: the tier keeps its own copy. */
  for (i = 0; i < 3; i++)
    memset (kv_host_buffer_peek_slot (primary, i), 0xee, SLOT_SIZE);

  result = run_one (tier, load, TRUE);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 3 * SLOT_SIZE);
  kv_job_result_unref (result);
  assert_slot_pattern (primary, 7, 1);
  assert_slot_pattern (primary, 5, 2);
  assert_slot_pattern (primary, 6, 3);
  assert_slot_zero (primary, 3);
  assert_slot_zero (primary, 4);

  /* An empty job succeeds. */
  result = run_one (tier, empty, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);

  free_keys (keys);
}

static void
test_example_partial_load (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(KvExampleTier) example = kv_example_tier_new (primary);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (example);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  KvKey **keys = make_keys (0, 3);
  KvKey *stored_keys[] = { keys[0], keys[2] };
  g_autoptr(KvTransferJob) store = make_job (1, stored_keys, (guint32[]) { 0, 2 }, 2, FALSE, request);
  g_autoptr(KvTransferJob) load = make_job (2, keys, (guint32[]) { 4, 5, 6 }, 3, TRUE, request);
  KvKey *missing_first[] = { keys[1], keys[0] };
  g_autoptr(KvTransferJob) load_second = make_job (3, missing_first, (guint32[]) { 3, 7 }, 2, TRUE, request);
  KvKey *missing_only[] = { keys[1] };
  g_autoptr(KvTransferJob) load_none = make_job (4, missing_only, (guint32[]) { 1 }, 1, TRUE, request);
  KvKey * const *landed;
  KvJobResult *result;
  guint n_landed = 0;

  fill_slot (primary, 0, 10);
  fill_slot (primary, 2, 12);
  result = run_one (tier, store, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);

  /* The middle key is missing: the job failed, and lists every key that
   * landed, in its order (KvJobResult's partial-load rule). */
  result = run_one (tier, load, TRUE);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_true (kv_job_result_has_successful_keys (result));
  landed = kv_job_result_get_successful_keys (result, &n_landed);
  g_assert_cmpuint (n_landed, ==, 2);
  g_assert_true (kv_key_equal (landed[0], keys[0]));
  g_assert_true (kv_key_equal (landed[1], keys[2]));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 2 * SLOT_SIZE);
  kv_job_result_unref (result);
  assert_slot_pattern (primary, 4, 10);
  assert_slot_zero (primary, 5);
  assert_slot_pattern (primary, 6, 12);

  /* The first key is missing: the second lands all the same. */
  result = run_one (tier, load_second, TRUE);
  g_assert_false (kv_job_result_get_success (result));
  landed = kv_job_result_get_successful_keys (result, &n_landed);
  g_assert_cmpuint (n_landed, ==, 1);
  g_assert_true (kv_key_equal (landed[0], keys[0]));
  kv_job_result_unref (result);
  assert_slot_zero (primary, 3);
  assert_slot_pattern (primary, 7, 10);

  /* Nothing landed: no key list at all. */
  result = run_one (tier, load_none, TRUE);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  kv_job_result_unref (result);
  assert_slot_zero (primary, 1);

  free_keys (keys);
}

static void
test_example_chunk_out_of_range (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(KvExampleTier) example = kv_example_tier_new (primary);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (example);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  KvKey **keys = make_keys (0, 2);
  g_autoptr(KvTransferJob) store = make_job (1, keys, (guint32[]) { 0, N_SLOTS }, 2, FALSE, request);
  g_autoptr(KvTransferJob) store_ok = make_job (2, keys, (guint32[]) { 0, 1 }, 2, FALSE, request);
  g_autoptr(KvTransferJob) load = make_job (3, keys, (guint32[]) { 2, G_MAXUINT32 }, 2, TRUE, request);
  KvJobResult *result;

  /* The job fails as a whole; not even the valid first chunk is stored. */
  result = run_one (tier, store, FALSE);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 0);
  kv_job_result_unref (result);
  g_assert_cmpuint (kv_example_tier_get_n_stored (example), ==, 0);

  fill_slot (primary, 0, 1);
  fill_slot (primary, 1, 2);
  result = run_one (tier, store_ok, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);

  result = run_one (tier, load, TRUE);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  kv_job_result_unref (result);
  assert_slot_zero (primary, 2);

  free_keys (keys);
}

static void
test_example_events (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(KvSecondaryTier) with_events = g_object_new (KV_TYPE_EXAMPLE_TIER,
                                                          "primary", primary,
                                                          "enable-events", TRUE,
                                                          "locality", KV_LOCALITY_LOCAL,
                                                          NULL);
  g_autoptr(KvSecondaryTier) without = g_object_new (KV_TYPE_EXAMPLE_TIER,
                                                      "primary", primary,
                                                      NULL);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  KvKey **keys = make_keys (0, 2);
  g_autoptr(KvTransferJob) store = make_job (1, keys, (guint32[]) { 0, 1 }, 2, FALSE, request);
  g_autoptr(KvTransferJob) bad_store = make_job (2, keys, (guint32[]) { 0, 99 }, 2, FALSE, request);
  g_autoptr(KvTransferJob) load = make_job (3, keys, (guint32[]) { 2, 3 }, 2, TRUE, request);
  KvKey * const *event_keys;
  guint n_event_keys = 0;
  KvEvent **events;
  KvJobResult *result;

  result = run_one (with_events, store, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);

  events = kv_secondary_tier_take_events (with_events);
  g_assert_nonnull (events[0]);
  g_assert_null (events[1]);
  event_keys = kv_event_get_keys (events[0], &n_event_keys);
  g_assert_cmpuint (n_event_keys, ==, 2);
  g_assert_true (kv_key_equal (event_keys[0], keys[0]));
  g_assert_true (kv_key_equal (event_keys[1], keys[1]));
  g_assert_cmpint (kv_event_get_medium (events[0]), ==, KV_MEDIUM_CPU);
  g_assert_false (kv_event_get_removed (events[0]));
  g_assert_cmpint (kv_event_get_locality (events[0]), ==, KV_LOCALITY_LOCAL);
  free_events (events);

  /* Drained once. */
  events = kv_secondary_tier_take_events (with_events);
  g_assert_null (events[0]);
  free_events (events);

  /* No event for a load or a failed store. */
  result = run_one (with_events, load, TRUE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);
  result = run_one (with_events, bad_store, FALSE);
  g_assert_false (kv_job_result_get_success (result));
  kv_job_result_unref (result);
  events = kv_secondary_tier_take_events (with_events);
  g_assert_null (events[0]);
  free_events (events);

  /* Disabled by default. */
  result = run_one (without, store, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);
  events = kv_secondary_tier_take_events (without);
  g_assert_null (events[0]);
  free_events (events);

  free_keys (keys);
}

static void
test_example_pending_work (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(TestBlockingTier) blocking = g_object_new (TEST_TYPE_BLOCKING_TIER,
                                                       "primary", primary,
                                                       NULL);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (blocking);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  KvKey **keys = make_keys (0, 1);
  g_autoptr(KvTransferJob) store = make_job (1, keys, (guint32[]) { 0 }, 1, FALSE, request);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;

  g_assert_false (kv_secondary_tier_has_pending_work (tier));
  g_assert_true (kv_secondary_tier_submit_store (tier, store, &error));
  g_assert_no_error (error);

  g_mutex_lock (&blocking->lock);
  while (blocking->n_entered == 0)
    g_cond_wait (&blocking->cond, &blocking->lock);
  g_mutex_unlock (&blocking->lock);

  /* The worker holds the job: in flight, not reported. */
  g_assert_true (kv_secondary_tier_has_pending_work (tier));
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_null (results[0]);
  free_results (results);
  g_assert_false (_kv_secondary_tier_has_queued_results (tier));

  g_mutex_lock (&blocking->lock);
  blocking->released = TRUE;
  g_cond_broadcast (&blocking->cond);
  g_mutex_unlock (&blocking->lock);

  results = drain_and_collect (tier);
  g_assert_false (kv_secondary_tier_has_pending_work (tier));
  g_assert_cmpuint (count_results (results), ==, 1);
  g_assert_true (kv_job_result_get_success (results[0]));
  free_results (results);
  g_assert_true (kv_example_tier_contains (KV_EXAMPLE_TIER (blocking), keys[0]));

  free_keys (keys);
}

static void
test_example_shutdown (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  g_autoptr(KvExampleTier) example = kv_example_tier_new (primary);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (example);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  g_autoptr(GError) error = NULL;
  gint n_queued_calls = 0;
  KvJobResult **results;
  guint i;

  _kv_secondary_tier_set_queued_func (tier, queued_count_cb, &n_queued_calls);

  for (i = 0; i < N_SLOTS; i++)
    {
      g_autoptr(KvKey) key = make_key (i);
      guint32 chunk = i;
      g_autoptr(KvTransferJob) job = make_job (i, &key, &chunk, 1, FALSE, request);

      fill_slot (primary, i, i);
      g_assert_true (kv_secondary_tier_submit_store (tier, job, &error));
      g_assert_no_error (error);
    }

  /* Shutdown reports every job before it returns. */
  g_assert_true (kv_secondary_tier_shutdown (tier, &error));
  g_assert_no_error (error);
  g_assert_cmpint (g_atomic_int_get (&n_queued_calls), ==, N_SLOTS);
  results = kv_secondary_tier_get_finished_jobs (tier);
  g_assert_cmpuint (count_results (results), ==, N_SLOTS);
  for (i = 0; i < N_SLOTS; i++)
    g_assert_true (kv_job_result_get_success (results[i]));
  free_results (results);
  g_assert_cmpuint (kv_example_tier_get_n_stored (example), ==, N_SLOTS);

  {
    g_autoptr(KvKey) key = make_key (100);
    g_autoptr(KvTransferJob) late = make_job (100, &key, (guint32[]) { 0 }, 1, FALSE, request);

    g_assert_false (kv_secondary_tier_submit_store (tier, late, &error));
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_CLOSED);
  }

  _kv_secondary_tier_set_queued_func (tier, NULL, NULL);
}

static void
test_example_unref_with_jobs_queued (void)
{
  g_autoptr(KvHostBuffer) primary = make_primary ();
  KvExampleTier *example = kv_example_tier_new (primary);
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);
  KvKey **keys = make_keys (0, N_SLOTS);
  guint32 chunks[N_SLOTS];
  GWeakRef weak;
  gint64 give_up = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  guint i;

  for (i = 0; i < N_SLOTS; i++)
    chunks[i] = i;
  g_weak_ref_init (&weak, example);

  for (i = 0; i < 4; i++)
    {
      g_autoptr(KvTransferJob) job = make_job (i, keys, chunks, N_SLOTS, FALSE, request);

      g_assert_true (kv_secondary_tier_submit_store (KV_SECONDARY_TIER (example), job, NULL));
    }

  /* Each queued KvTierJob holds the tier, as a GTask holds its source
   * object: the tier goes away (on a worker) once they were reported,
   * with the results nobody took. */
  g_object_unref (example);
  for (;;)
    {
      KvExampleTier *alive = g_weak_ref_get (&weak);

      if (alive == NULL)
        break;
      g_object_unref (alive);
      g_assert_cmpint (g_get_monotonic_time (), <, give_up);
      g_usleep (1000);
    }
  g_weak_ref_clear (&weak);

  free_keys (keys);
}

/* ------------------------------------------------------------------ */
/* KvFaultTier                                                         */

typedef struct
{
  KvHostBuffer  *primary;
  KvFaultTier   *fault;
  KvSecondaryTier *tier;
  KvRequest     *request;
  KvKey        **keys;     /* 4 keys */
} FaultFixture;

static void
fault_setup (FaultFixture  *fixture,
             gconstpointer  data)
{
  guint i;

  fixture->primary = make_primary ();
  fixture->fault = kv_fault_tier_new (fixture->primary);
  fixture->tier = KV_SECONDARY_TIER (fixture->fault);
  fixture->request = kv_request_new ("req", NULL);
  fixture->keys = make_keys (0, 4);
  for (i = 0; i < 4; i++)
    fill_slot (fixture->primary, i, i + 20);
}

static void
fault_teardown (FaultFixture  *fixture,
                gconstpointer  data)
{
  free_keys (fixture->keys);
  g_object_unref (fixture->request);
  g_object_unref (fixture->fault);
  g_object_unref (fixture->primary);
}

static KvTransferJob *
fault_store_job (FaultFixture *fixture,
                 guint64       id)
{
  return make_job (id, fixture->keys, (guint32[]) { 0, 1, 2, 3 }, 4, FALSE, fixture->request);
}

static KvTransferJob *
fault_load_job (FaultFixture *fixture,
                guint64       id)
{
  return make_job (id, fixture->keys, (guint32[]) { 4, 5, 6, 7 }, 4, TRUE, fixture->request);
}

static void
test_fault_fail (FaultFixture  *fixture,
                 gconstpointer  data)
{
  g_autoptr(KvTransferJob) store = fault_store_job (fixture, 1);
  g_autoptr(KvTransferJob) load = fault_load_job (fixture, 2);
  KvJobResult *result;
  guint i;

  g_assert_cmpstr (kv_secondary_tier_get_tier_type (fixture->tier), ==, "fault");

  kv_fault_tier_set_store_fault (fixture->fault, KV_FAULT_FAIL);
  result = run_one (fixture->tier, store, FALSE);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 0);
  kv_job_result_unref (result);
  g_assert_cmpuint (kv_example_tier_get_n_stored (KV_EXAMPLE_TIER (fixture->fault)), ==, 0);

  kv_fault_tier_set_store_fault (fixture->fault, KV_FAULT_NONE);
  result = run_one (fixture->tier, store, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);

  kv_fault_tier_set_load_fault (fixture->fault, KV_FAULT_FAIL);
  result = run_one (fixture->tier, load, TRUE);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_false (kv_job_result_has_successful_keys (result));
  kv_job_result_unref (result);
  for (i = 4; i < 8; i++)
    assert_slot_zero (fixture->primary, i);
}

static void
test_fault_partial (FaultFixture  *fixture,
                    gconstpointer  data)
{
  g_autoptr(KvTransferJob) store = fault_store_job (fixture, 1);
  g_autoptr(KvTransferJob) store_all = fault_store_job (fixture, 2);
  g_autoptr(KvTransferJob) load = fault_load_job (fixture, 3);
  KvExampleTier *example = KV_EXAMPLE_TIER (fixture->fault);
  KvKey * const *landed;
  guint n_landed = 0;
  KvJobResult *result;

  /* A partial store keeps the first half and reports failure. */
  kv_fault_tier_set_store_fault (fixture->fault, KV_FAULT_PARTIAL);
  result = run_one (fixture->tier, store, FALSE);
  g_assert_false (kv_job_result_get_success (result));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (result), ==, 2 * SLOT_SIZE);
  kv_job_result_unref (result);
  g_assert_cmpuint (kv_example_tier_get_n_stored (example), ==, 2);
  g_assert_true (kv_example_tier_contains (example, fixture->keys[0]));
  g_assert_true (kv_example_tier_contains (example, fixture->keys[1]));
  g_assert_false (kv_example_tier_contains (example, fixture->keys[2]));
  g_assert_false (kv_example_tier_contains (example, fixture->keys[3]));

  kv_fault_tier_set_store_fault (fixture->fault, KV_FAULT_NONE);
  result = run_one (fixture->tier, store_all, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  kv_job_result_unref (result);

  /* A partial load lands the first half and names it. */
  kv_fault_tier_set_load_fault (fixture->fault, KV_FAULT_PARTIAL);
  result = run_one (fixture->tier, load, TRUE);
  g_assert_false (kv_job_result_get_success (result));
  landed = kv_job_result_get_successful_keys (result, &n_landed);
  g_assert_cmpuint (n_landed, ==, 2);
  g_assert_true (kv_key_equal (landed[0], fixture->keys[0]));
  g_assert_true (kv_key_equal (landed[1], fixture->keys[1]));
  kv_job_result_unref (result);
  assert_slot_pattern (fixture->primary, 4, 20);
  assert_slot_pattern (fixture->primary, 5, 21);
  assert_slot_zero (fixture->primary, 6);
  assert_slot_zero (fixture->primary, 7);
}

static void
test_fault_stall_release (FaultFixture  *fixture,
                          gconstpointer  data)
{
  g_autoptr(KvTransferJob) store1 = fault_store_job (fixture, 1);
  g_autoptr(KvTransferJob) store2 = fault_store_job (fixture, 2);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;

  kv_fault_tier_set_store_fault (fixture->fault, KV_FAULT_STALL);
  g_assert_true (kv_secondary_tier_submit_store (fixture->tier, store1, &error));
  g_assert_true (kv_secondary_tier_submit_store (fixture->tier, store2, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_fault_tier_get_n_stalled (fixture->fault), ==, 2);
  g_assert_true (kv_secondary_tier_has_pending_work (fixture->tier));
  results = kv_secondary_tier_get_finished_jobs (fixture->tier);
  g_assert_null (results[0]);
  free_results (results);

  /* Released jobs run normally even though STALL is still set. */
  kv_fault_tier_release_stalled (fixture->fault);
  g_assert_cmpuint (kv_fault_tier_get_n_stalled (fixture->fault), ==, 0);
  results = drain_and_collect (fixture->tier);
  g_assert_cmpuint (count_results (results), ==, 2);
  g_assert_cmpuint (kv_job_result_get_job_id (results[0]) + kv_job_result_get_job_id (results[1]), ==, 3);
  g_assert_true (kv_job_result_get_success (results[0]));
  g_assert_true (kv_job_result_get_success (results[1]));
  free_results (results);
  g_assert_false (kv_secondary_tier_has_pending_work (fixture->tier));
  g_assert_cmpuint (kv_example_tier_get_n_stored (KV_EXAMPLE_TIER (fixture->fault)), ==, 4);
}

static void
test_fault_stall_drain (FaultFixture  *fixture,
                        gconstpointer  data)
{
  g_autoptr(KvTransferJob) store = fault_store_job (fixture, 1);
  g_autoptr(KvTransferJob) load1 = fault_load_job (fixture, 2);
  g_autoptr(KvTransferJob) load2 = fault_load_job (fixture, 3);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;
  guint i;

  kv_fault_tier_set_store_fault (fixture->fault, KV_FAULT_STALL);
  kv_fault_tier_set_load_fault (fixture->fault, KV_FAULT_STALL);
  g_assert_true (kv_secondary_tier_submit_store (fixture->tier, store, &error));
  g_assert_true (kv_secondary_tier_submit_load (fixture->tier, load1, &error));
  g_assert_true (kv_secondary_tier_submit_load (fixture->tier, load2, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_fault_tier_get_n_stalled (fixture->fault), ==, 3);

  /* drain_jobs cancels held jobs and reports each one failed. */
  results = drain_and_collect (fixture->tier);
  g_assert_cmpuint (count_results (results), ==, 3);
  for (i = 0; i < 3; i++)
    {
      g_assert_cmpuint (kv_job_result_get_job_id (results[i]), ==, i + 1);
      g_assert_false (kv_job_result_get_success (results[i]));
    }
  free_results (results);
  g_assert_cmpuint (kv_fault_tier_get_n_stalled (fixture->fault), ==, 0);
  g_assert_false (kv_secondary_tier_has_pending_work (fixture->tier));
  g_assert_cmpuint (kv_example_tier_get_n_stored (KV_EXAMPLE_TIER (fixture->fault)), ==, 0);
  for (i = 4; i < 8; i++)
    assert_slot_zero (fixture->primary, i);

  /* Shutdown reports held jobs the same way. */
  g_assert_true (kv_secondary_tier_submit_store (fixture->tier, store, &error));
  g_assert_true (kv_secondary_tier_shutdown (fixture->tier, &error));
  g_assert_no_error (error);
  results = kv_secondary_tier_get_finished_jobs (fixture->tier);
  g_assert_cmpuint (count_results (results), ==, 1);
  g_assert_false (kv_job_result_get_success (results[0]));
  free_results (results);
}

static void
test_fault_submit_error (FaultFixture  *fixture,
                         gconstpointer  data)
{
  g_autoptr(KvTransferJob) store = fault_store_job (fixture, 1);
  g_autoptr(KvTransferJob) load = fault_load_job (fixture, 2);
  g_autoptr(GError) error = NULL;
  KvJobResult **results;

  kv_fault_tier_set_store_fault (fixture->fault, KV_FAULT_SUBMIT_ERROR);
  kv_fault_tier_set_load_fault (fixture->fault, KV_FAULT_SUBMIT_ERROR);
  g_assert_false (kv_secondary_tier_submit_store (fixture->tier, store, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_clear_error (&error);
  g_assert_false (kv_secondary_tier_submit_load (fixture->tier, load, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED);
  g_clear_error (&error);

  /* A refused job is not in flight and never reported. */
  g_assert_false (kv_secondary_tier_has_pending_work (fixture->tier));
  results = drain_and_collect (fixture->tier);
  g_assert_null (results[0]);
  free_results (results);
}

static void
test_fault_delay (FaultFixture  *fixture,
                  gconstpointer  data)
{
  g_autoptr(KvTransferJob) store = fault_store_job (fixture, 1);
  g_autoptr(KvTransferJob) load = fault_load_job (fixture, 2);
  KvJobResult *result;

  /* The worker sleeps at least this long, so the measured time is at
   * least as long (a lower bound only: never an upper one). */
  kv_fault_tier_set_store_delay_us (fixture->fault, 2000);
  kv_fault_tier_set_load_delay_us (fixture->fault, 1000);

  result = run_one (fixture->tier, store, FALSE);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), >=, 0.002);
  kv_job_result_unref (result);

  result = run_one (fixture->tier, load, TRUE);
  g_assert_true (kv_job_result_get_success (result));
  g_assert_cmpfloat (kv_job_result_get_transfer_time (result), >=, 0.001);
  kv_job_result_unref (result);
  assert_slot_pattern (fixture->primary, 7, 23);
}

/* ------------------------------------------------------------------ */
/* The plugin module                                                   */

static void
test_example_plugin_module (void)
{
  const char *search_path = g_getenv ("KVTIER_PLUGIN_PATH");
  g_auto(GStrv) dirs = NULL;
  g_autofree char *path = NULL;
  GModule *module;
  gpointer abi_version = NULL;
  gpointer register_func = NULL;
  guint i;

  if (search_path == NULL || *search_path == '\0')
    {
      g_test_skip ("KVTIER_PLUGIN_PATH is not set (run through meson test)");
      return;
    }

  dirs = g_strsplit (search_path, G_SEARCHPATH_SEPARATOR_S, -1);
  for (i = 0; dirs[i] != NULL && path == NULL; i++)
    {
      g_autofree char *candidate = g_build_filename (dirs[i], "libkvtier-example.so", NULL);

      if (g_file_test (candidate, G_FILE_TEST_IS_REGULAR))
        path = g_steal_pointer (&candidate);
    }
  if (path == NULL)
    g_error ("libkvtier-example.so is in none of KVTIER_PLUGIN_PATH=%s", search_path);

  module = g_module_open (path, G_MODULE_BIND_LAZY | G_MODULE_BIND_LOCAL);
  if (module == NULL)
    g_error ("%s", g_module_error ());

  g_assert_true (g_module_symbol (module, "kvtier_plugin_abi_version", &abi_version));
  g_assert_nonnull (abi_version);
  g_assert_cmpuint (*(const guint32 *) abi_version, ==, KV_PLUGIN_ABI_VERSION);

  /* Only check that the entry point exists: calling it would register the
   * module's copy of the type, which this binary already has statically
   * (the registry tests load the module for real). */
  g_assert_true (g_module_symbol (module, "kvtier_plugin_register", &register_func));
  g_assert_nonnull (register_func);

  /* The module exports nothing else of its own. */
  g_assert_false (g_module_symbol (module, "kv_example_tier_new", &register_func));

  g_assert_true (g_module_close (module));
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  g_test_add_func ("/kvtier/secondary-tier/properties", test_tier_properties);
  g_test_add_func ("/kvtier/secondary-tier/argument-checks", test_tier_argument_checks);
  g_test_add_func ("/kvtier/secondary-tier/false-without-error", test_tier_false_without_error);
  g_test_add_func ("/kvtier/secondary-tier/missing-vfunc", test_tier_missing_vfunc);
  g_test_add_func ("/kvtier/secondary-tier/async-lookup/defaults", test_tier_async_lookup_defaults);
  g_test_add_func ("/kvtier/secondary-tier/async-lookup/pending", test_tier_async_lookup_pending);
  g_test_add_func ("/kvtier/secondary-tier/async-lookup/dispose", test_tier_async_lookup_dispose);
  g_test_add_func ("/kvtier/secondary-tier/closed-after-shutdown", test_tier_closed_after_shutdown);
  g_test_add_func ("/kvtier/secondary-tier/lookup-mapping", test_tier_lookup_mapping);
  g_test_add_func ("/kvtier/secondary-tier/touch-terminates-keys", test_tier_touch_terminates_keys);
  g_test_add_func ("/kvtier/secondary-tier/finished-jobs-never-null", test_tier_finished_jobs_never_null);
  g_test_add_func ("/kvtier/secondary-tier/complete-job-threads", test_tier_complete_job_threads);
  g_test_add_func ("/kvtier/secondary-tier/push-event", test_tier_push_event);
  g_test_add_func ("/kvtier/secondary-tier/job-finished-signal", test_tier_job_finished_signal);

  g_test_add_func ("/kvtier/parent-manager/invokers", test_parent_manager_invokers);

  g_test_add_func ("/kvtier/example-tier/defaults", test_example_defaults);
  g_test_add_func ("/kvtier/example-tier/round-trip", test_example_round_trip);
  g_test_add_func ("/kvtier/example-tier/partial-load", test_example_partial_load);
  g_test_add_func ("/kvtier/example-tier/chunk-out-of-range", test_example_chunk_out_of_range);
  g_test_add_func ("/kvtier/example-tier/events", test_example_events);
  g_test_add_func ("/kvtier/example-tier/pending-work", test_example_pending_work);
  g_test_add_func ("/kvtier/example-tier/shutdown", test_example_shutdown);
  g_test_add_func ("/kvtier/example-tier/unref-with-jobs-queued", test_example_unref_with_jobs_queued);
  g_test_add_func ("/kvtier/example-tier/plugin-module", test_example_plugin_module);

  g_test_add ("/kvtier/fault-tier/fail", FaultFixture, NULL, fault_setup, test_fault_fail, fault_teardown);
  g_test_add ("/kvtier/fault-tier/partial", FaultFixture, NULL, fault_setup, test_fault_partial, fault_teardown);
  g_test_add ("/kvtier/fault-tier/stall-release", FaultFixture, NULL, fault_setup, test_fault_stall_release, fault_teardown);
  g_test_add ("/kvtier/fault-tier/stall-drain", FaultFixture, NULL, fault_setup, test_fault_stall_drain, fault_teardown);
  g_test_add ("/kvtier/fault-tier/submit-error", FaultFixture, NULL, fault_setup, test_fault_submit_error, fault_teardown);
  g_test_add ("/kvtier/fault-tier/delay", FaultFixture, NULL, fault_setup, test_fault_delay, fault_teardown);

  return g_test_run ();
}
