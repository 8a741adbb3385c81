/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <string.h>

#include <kvtier.h>

#include "kv-delayed-tier.h"
#include "kv-tiering-metrics-private.h"
#include "test-stats.h"

/* Admission policies (vLLM's TieringAdmissionPolicy, RFC #53485): the
 * manager asks the policy before any pin, slot or job id, tells it about
 * each admitted and each finished job exactly once, and resets it last in
 * reset_cache; KvAlwaysAdmitPolicy and KvBackpressureAdmissionPolicy. */

#define SLOT_SIZE 4096

/* ---- a policy that records every call ------------------------------------ */

#define TEST_TYPE_POLICY (test_policy_get_type ())
G_DECLARE_FINAL_TYPE (TestPolicy, test_policy, TEST, POLICY, GObject)

struct _TestPolicy
{
  GObject parent_instance;

  GPtrArray *log;            /* shared with the tiers */
  KvPrimaryTier *primary;    /* to look at pins when asked */
  gboolean refuse_stores_to[4];
  gboolean refuse_promotions;
  GHashTable *admitted;      /* job id → tier, admitted and not completed */
  guint n_admitted;
  guint n_completed;
  guint n_tiers_added;
};

static void test_policy_iface_init (KvAdmissionPolicyInterface *iface);

G_DEFINE_FINAL_TYPE_WITH_CODE (TestPolicy, test_policy, G_TYPE_OBJECT,
                               G_IMPLEMENT_INTERFACE (KV_TYPE_ADMISSION_POLICY, test_policy_iface_init))

static void
test_policy_tier_added (KvAdmissionPolicy *policy,
                        guint              tier_index,
                        KvSecondaryTier   *tier)
{
  TestPolicy *self = TEST_POLICY (policy);

  g_assert_cmpuint (tier_index, ==, self->n_tiers_added);
  self->n_tiers_added++;
}

static gboolean
test_policy_should_admit (KvAdmissionPolicy  *policy,
                          KvKey             **keys,
                          guint               tier_index,
                          gboolean            is_promotion)
{
  TestPolicy *self = TEST_POLICY (policy);
  gint ref = G_MININT;
  gboolean admit;
  guint n_keys = g_strv_length ((char **) keys);

  /* What the primary tier says of the first key when asked: a cascade's
   * chunk is still being written (−1, nothing pinned yet), a promotion's
   * chunk is not there at all (no slot yet). */
  if (!kv_primary_tier_get_ref_count (self->primary, keys[0], &ref))
    ref = G_MININT;
  admit = is_promotion ? !self->refuse_promotions : !self->refuse_stores_to[tier_index];
  g_ptr_array_add (self->log, g_strdup_printf ("policy: should_admit %s tier=%u n=%u ref=%s -> %s",
                                               is_promotion ? "promotion" : "store",
                                               tier_index, n_keys,
                                               ref == G_MININT ? "none" : ref == -1 ? "-1" : ref == 0 ? "0" : "pinned",
                                               admit ? "yes" : "no"));
  return admit;
}

static void
test_policy_on_admitted (KvAdmissionPolicy *policy,
                         KvTransferJob     *job,
                         guint              tier_index)
{
  TestPolicy *self = TEST_POLICY (policy);
  guint64 id = kv_transfer_job_get_id (job);

  g_assert_false (g_hash_table_contains (self->admitted, &id));
  g_hash_table_insert (self->admitted, g_memdup2 (&id, sizeof id), GUINT_TO_POINTER (tier_index));
  self->n_admitted++;
  g_ptr_array_add (self->log, g_strdup_printf ("policy: on_admitted %" G_GUINT64_FORMAT " tier=%u %s",
                                               id, tier_index,
                                               kv_transfer_job_is_promotion (job) ? "promotion" : "store"));
}

static void
test_policy_on_completed (KvAdmissionPolicy *policy,
                          KvTransferJob     *job,
                          guint              tier_index,
                          KvJobResult       *result)
{
  TestPolicy *self = TEST_POLICY (policy);
  guint64 id = kv_transfer_job_get_id (job);
  gpointer tier;
  gint ref = G_MININT;

  /* exactly once, for a job it admitted, on the tier that ran it */
  g_assert_true (g_hash_table_lookup_extended (self->admitted, &id, NULL, &tier));
  g_assert_cmpuint (GPOINTER_TO_UINT (tier), ==, tier_index);
  g_hash_table_remove (self->admitted, &id);
  self->n_completed++;
  /* before the primary tier hears of it: a store's chunk is still pinned */
  if (kv_transfer_job_get_n_keys (job) > 0 &&
      !kv_primary_tier_get_ref_count (self->primary, kv_transfer_job_get_key (job, 0), &ref))
    ref = G_MININT;
  g_ptr_array_add (self->log, g_strdup_printf ("policy: on_completed %" G_GUINT64_FORMAT " %s ref=%s",
                                               id, kv_job_result_get_success (result) ? "ok" : "failed",
                                               ref == G_MININT ? "none" : ref == -1 ? "-1" : ref == 0 ? "0" : "pinned"));
}

static void
test_policy_reset (KvAdmissionPolicy *policy)
{
  TestPolicy *self = TEST_POLICY (policy);

  g_ptr_array_add (self->log, g_strdup ("policy: reset"));
}

static void
test_policy_iface_init (KvAdmissionPolicyInterface *iface)
{
  iface->tier_added = test_policy_tier_added;
  iface->should_admit = test_policy_should_admit;
  iface->on_admitted = test_policy_on_admitted;
  iface->on_completed = test_policy_on_completed;
  iface->reset = test_policy_reset;
}

static void
test_policy_finalize (GObject *object)
{
  TestPolicy *self = TEST_POLICY (object);

  g_hash_table_unref (self->admitted);
  g_ptr_array_unref (self->log);
  G_OBJECT_CLASS (test_policy_parent_class)->finalize (object);
}

static void
test_policy_class_init (TestPolicyClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = test_policy_finalize;
}

static void
test_policy_init (TestPolicy *self)
{
  self->admitted = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
}

/* ---- fixture ------------------------------------------------------------- */

typedef struct
{
  KvHostBuffer *buffer;
  KvPrimaryTier *primary;
  KvTieringManager *manager;
  TestPolicy *policy;       /* NULL for the manager's default */
  KvDelayedTier *tier1;
  KvDelayedTier *tier2;
  GPtrArray *log;
  KvKey *keys[16];
} Fixture;

static KvKey *
make_key (guint i)
{
  guint8 hash[32];

  for (guint b = 0; b < sizeof hash; b++)
    hash[b] = (guint8) (i * 37 + b);
  hash[0] = (guint8) i;
  return kv_key_new (hash, sizeof hash, 0);
}

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  f->buffer = kv_host_buffer_new (8, SLOT_SIZE, &error);
  g_assert_no_error (error);
  f->primary = kv_primary_tier_new (f->buffer, NULL, TRUE);
  f->log = g_ptr_array_new_with_free_func (g_free);
  f->policy = g_object_new (TEST_TYPE_POLICY, NULL);
  f->policy->log = g_ptr_array_ref (f->log);
  f->policy->primary = f->primary;
  f->manager = g_object_new (KV_TYPE_TIERING_MANAGER, "primary", f->primary,
                             "admission-policy", f->policy, NULL);
  f->tier1 = kv_delayed_tier_new (f->buffer, "delayed");
  f->tier2 = kv_delayed_tier_new (f->buffer, "delayed2");
  kv_delayed_tier_set_log (f->tier1, f->log);
  kv_delayed_tier_set_log (f->tier2, f->log);
  g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier1), &error));
  g_assert_true (kv_tiering_manager_add_tier (f->manager, KV_SECONDARY_TIER (f->tier2), &error));
  g_assert_no_error (error);
  g_assert_cmpuint (f->policy->n_tiers_added, ==, 2);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = make_key (i);
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (f->manager, &error));
  g_assert_no_error (error);
  /* every job the policy admitted was reported to it, exactly once */
  g_assert_cmpuint (f->policy->n_completed, ==, f->policy->n_admitted);
  g_assert_cmpuint (g_hash_table_size (f->policy->admitted), ==, 0);
  g_object_add_weak_pointer (G_OBJECT (f->manager), (gpointer *) &f->manager);
  g_object_unref (f->manager);
  g_assert_null (f->manager);
  g_object_add_weak_pointer (G_OBJECT (f->policy), (gpointer *) &f->policy);
  g_object_unref (f->policy);
  g_assert_null (f->policy);
  g_clear_object (&f->tier1);
  g_clear_object (&f->tier2);
  g_clear_object (&f->primary);
  g_clear_object (&f->buffer);
  g_ptr_array_unref (f->log);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
}


static void
step (KvTieringManager *manager)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (manager, end);
}

static void
store_keys (KvTieringManager *manager,
            KvHostBuffer     *buffer,
            KvKey           **keys,
            guint             n,
            KvRequest        *request)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey * const *to_store;
  const guint32 *chunk_ids;
  guint n_to_store;

  prepared = kv_tiering_manager_prepare_store (manager, keys, n, request, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  for (guint i = 0; i < n_to_store; i++)
    memset (kv_host_buffer_peek_slot (buffer, chunk_ids[i]),
            0x40 + kv_key_get_hash (to_store[i], NULL)[0], SLOT_SIZE);
  if (n_to_store > 0)
    kv_tiering_manager_complete_store (manager, to_store, n_to_store, request, TRUE);
  /* the step ends: completions are consumed at the start of the next */
  step (manager);
}

static gint
ref_count (Fixture *f,
           guint    key_index)
{
  gint ref = G_MININT;

  g_assert_true (kv_primary_tier_get_ref_count (f->primary, f->keys[key_index], &ref));
  return ref;
}

static char *
joined_log (GPtrArray  *log,
            const char *needle)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < log->len; i++)
    {
      const char *line = g_ptr_array_index (log, i);

      if (needle != NULL && strstr (line, needle) == NULL)
        continue;
      if (s->len > 0)
        g_string_append (s, " | ");
      g_string_append (s, line);
    }
  return g_string_free (s, FALSE);
}

/* Only the policy's lines and the tiers' job submissions. */
static char *
job_log (Fixture *f)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < f->log->len; i++)
    {
      const char *line = g_ptr_array_index (f->log, i);
      const char *submit = strstr (line, "submit_");

      if (!g_str_has_prefix (line, "policy:") && submit == NULL)
        continue;
      if (s->len > 0)
        g_string_append (s, " | ");
      if (submit != NULL)
        {
          /* "<tier>: submit_store <id> <request>", without the keys */
          const char *keys = strchr (line, '[');

          g_string_append_len (s, line, keys != NULL ? keys - line - 1 : (gssize) strlen (line));
        }
      else
        g_string_append (s, line);
    }
  return g_string_free (s, FALSE);
}

/* ---- the manager's calls --------------------------------------------------- */

static void
test_default_policy (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (4, SLOT_SIZE, &error);
  g_autoptr(KvPrimaryTier) primary = kv_primary_tier_new (buffer, NULL, TRUE);
  g_autoptr(KvTieringManager) manager = kv_tiering_manager_new (primary);
  g_autoptr(KvAdmissionPolicy) policy = NULL;

  /* vLLM's offloading spec always installs the backpressure policy */
  g_assert_true (KV_IS_BACKPRESSURE_ADMISSION_POLICY (kv_tiering_manager_get_admission_policy (manager)));
  g_object_get (manager, "admission-policy", &policy, NULL);
  g_assert_true (policy == kv_tiering_manager_get_admission_policy (manager));
}

/* A cascade asks the policy once per tier before anything is pinned or
 * numbered; each admitted job is announced before its tier sees it; each
 * finished job is reported to the policy before the primary tier unpins. */
static void
test_call_order (Fixture       *f,
                 gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autofree char *log = NULL;

  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f->manager, f->buffer, &f->keys[0], 2, req);
  log = job_log (f);
  g_assert_cmpstr (log, ==,
                   "policy: should_admit store tier=0 n=2 ref=-1 -> yes | "
                   "policy: should_admit store tier=1 n=2 ref=-1 -> yes | "
                   "policy: on_admitted 0 tier=0 store | delayed: submit_store 0 r1 | "
                   "policy: on_admitted 1 tier=1 store | delayed2: submit_store 1 r1");
  g_assert_cmpint (ref_count (f, 0), ==, 2);

  g_ptr_array_set_size (f->log, 0);
  kv_delayed_tier_complete_all (f->tier2, FALSE);
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f->manager);
  g_clear_pointer (&log, g_free);
  log = job_log (f);
  /* still pinned when the policy hears of each job */
  g_assert_cmpstr (log, ==, "policy: on_completed 0 ok ref=pinned | policy: on_completed 1 failed ref=pinned");
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  g_assert_cmpuint (f->policy->n_admitted, ==, 2);
  g_assert_cmpuint (f->policy->n_completed, ==, 2);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A refused cascade pins nothing and consumes no job id: the next
 * admitted job gets the id the refused one would have had. */
static void
test_refused_store_has_no_side_effect (Fixture       *f,
                                       gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autofree char *log = NULL;

  f->policy->refuse_stores_to[0] = TRUE;
  kv_tiering_manager_on_new_request (f->manager, req);
  store_keys (f->manager, f->buffer, &f->keys[0], 3, req);
  log = job_log (f);
  g_assert_cmpstr (log, ==,
                   "policy: should_admit store tier=0 n=3 ref=-1 -> no | "
                   "policy: should_admit store tier=1 n=3 ref=-1 -> yes | "
                   "policy: on_admitted 0 tier=1 store | delayed2: submit_store 0 r1");
  g_assert_cmpuint (kv_delayed_tier_count_calls (f->tier1, "submit_store"), ==, 0);
  /* one pin per key: tier 2's job only */
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (ref_count (f, i), ==, 1);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 1);

  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f->manager);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (ref_count (f, i), ==, 0);

  /* admitted again: ids go on from 1 */
  f->policy->refuse_stores_to[0] = FALSE;
  g_ptr_array_set_size (f->log, 0);
  store_keys (f->manager, f->buffer, &f->keys[3], 1, req);
  g_clear_pointer (&log, g_free);
  log = joined_log (f->log, "submit_store");
  g_assert_nonnull (strstr (log, "delayed: submit_store 1 r1"));
  g_assert_nonnull (strstr (log, "delayed2: submit_store 2 r1"));
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  kv_delayed_tier_complete_all (f->tier2, TRUE);
  step (f->manager);
  g_assert_cmpint (ref_count (f, 3), ==, 0);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* A refused promotion answers MISS before any primary slot or job id. */
static void
test_refused_promotion_is_miss (Fixture       *f,
                                gconstpointer  data)
{
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GBytes) bytes = g_bytes_new_take (g_malloc0 (SLOT_SIZE), SLOT_SIZE);
  g_autofree char *log = NULL;
  guint n_allocated = kv_primary_tier_get_n_allocated (f->primary);

  kv_delayed_tier_put (f->tier1, f->keys[5], bytes);
  f->policy->refuse_promotions = TRUE;
  kv_tiering_manager_on_new_request (f->manager, req);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[5], req), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (f->primary), ==, n_allocated);
  step (f->manager);
  log = job_log (f);
  g_assert_cmpstr (log, ==, "policy: should_admit promotion tier=0 n=1 ref=none -> no");
  g_assert_cmpuint (f->policy->n_admitted, ==, 0);

  /* admitted: HIT_PENDING, one load with job id 0 */
  f->policy->refuse_promotions = FALSE;
  g_ptr_array_set_size (f->log, 0);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[5], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (f->manager);
  g_clear_pointer (&log, g_free);
  log = job_log (f);
  g_assert_cmpstr (log, ==,
                   "policy: should_admit promotion tier=0 n=1 ref=none -> yes | "
                   "policy: on_admitted 0 tier=0 promotion | delayed: submit_load 0 r1");
  kv_delayed_tier_complete_all (f->tier1, TRUE);
  step (f->manager);
  g_assert_cmpint (kv_tiering_manager_lookup (f->manager, f->keys[5], req), ==, KV_LOOKUP_RESULT_HIT);
  kv_tiering_manager_on_request_finished (f->manager, req);
}

/* reset_cache ends with the policy's reset. */
static void
test_reset_cache_resets_policy (Fixture       *f,
                                gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  const char *last;

  kv_delayed_tier_set_synchronous (f->tier1, TRUE);
  kv_delayed_tier_set_synchronous (f->tier2, TRUE);
  g_assert_true (kv_tiering_manager_reset_cache (f->manager, &error));
  g_assert_no_error (error);
  last = g_ptr_array_index (f->log, f->log->len - 1);
  g_assert_cmpstr (last, ==, "policy: reset");
}

/* A tier's own store (ParentManager.create_store_job) is asked of the
 * policy as a store to that tier, as vLLM's manager asks it; refused, it
 * fails with BUSY: nothing pinned, no job id, and the tier answers a miss.
 * A pin lease (ParentManager.pin) is not a store: the policy is not asked. */
typedef struct
{
  Fixture *f;
  KvRequest *remote;
  GError *error;
  KvTransferJob *job;
  KvPinLease *lease;
  guint step;
} ServeCtx;

static void
serve_remote (KvDelayedTier   *tier,
              KvParentManager *parent,
              gpointer         user_data)
{
  ServeCtx *ctx = user_data;
  KvKey *keys[] = { ctx->f->keys[0], ctx->f->keys[1], NULL };

  if (ctx->step++ != 0)
    return;
  kv_parent_manager_on_new_request (parent, ctx->remote);
  g_assert_cmpint (kv_parent_manager_lookup (parent, keys[0], ctx->remote), ==, KV_LOOKUP_RESULT_HIT);
  ctx->job = kv_parent_manager_create_store_job (parent, keys, ctx->remote, &ctx->error);
  kv_parent_manager_on_request_finished (parent, ctx->remote);
}

static void
serve_remote_pin (KvDelayedTier   *tier,
                  KvParentManager *parent,
                  gpointer         user_data)
{
  ServeCtx *ctx = user_data;
  KvKey *keys[] = { ctx->f->keys[0], ctx->f->keys[1] };

  if (ctx->step++ != 0)
    return;
  ctx->lease = kv_parent_manager_pin (parent, keys, G_N_ELEMENTS (keys), &ctx->error);
}

static void
test_refused_parent_store_is_miss (Fixture       *f,
                                     gconstpointer  data)
{
  g_autoptr(KvRequest) local = kv_request_new ("local", NULL);
  g_autoptr(KvRequest) remote = kv_request_new ("remote", NULL);
  ServeCtx ctx = { f, remote, NULL, NULL, NULL, 0 };
  g_autofree char *log = NULL;

  kv_tiering_manager_on_new_request (f->manager, local);
  f->policy->refuse_stores_to[0] = TRUE;
  f->policy->refuse_stores_to[1] = TRUE;
  store_keys (f->manager, f->buffer, &f->keys[0], 2, local);
  kv_tiering_manager_on_request_finished (f->manager, local);
  g_ptr_array_set_size (f->log, 0);

  /* tier 1 (index 0) serves a peer that asks for keys 0 and 1 */
  kv_delayed_tier_set_serve_func (f->tier1, serve_remote, &ctx);
  step (f->manager);
  g_assert_null (ctx.job);
  g_assert_error (ctx.error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY);
  g_assert_nonnull (strstr (ctx.error->message, "miss"));
  log = job_log (f);
  g_assert_cmpstr (log, ==, "policy: should_admit store tier=0 n=2 ref=0 -> no");
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  g_assert_cmpuint (f->policy->n_admitted, ==, 0);
  g_clear_error (&ctx.error);

  /* admitted: a job under the serving tier, id 0, pinning both */
  f->policy->refuse_stores_to[0] = FALSE;
  ctx.step = 0;
  g_ptr_array_set_size (f->log, 0);
  step (f->manager);
  g_assert_no_error (ctx.error);
  g_assert_nonnull (ctx.job);
  g_assert_cmpuint (kv_transfer_job_get_id (ctx.job), ==, 0);
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  g_clear_pointer (&log, g_free);
  log = job_log (f);
  g_assert_cmpstr (log, ==, "policy: should_admit store tier=0 n=2 ref=0 -> yes | "
                            "policy: on_admitted 0 tier=0 store");
  {
    g_autoptr(KvJobResult) result = kv_job_result_new (0, TRUE);

    kv_secondary_tier_complete_job (KV_SECONDARY_TIER (f->tier1), result);
  }
  step (f->manager);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_clear_pointer (&ctx.job, kv_transfer_job_unref);

  /* a pin lease, every store refused: pinned all the same, nothing asked */
  f->policy->refuse_stores_to[0] = TRUE;
  ctx.step = 0;
  g_ptr_array_set_size (f->log, 0);
  kv_delayed_tier_set_serve_func (f->tier1, serve_remote_pin, &ctx);
  step (f->manager);
  g_assert_no_error (ctx.error);
  g_assert_nonnull (ctx.lease);
  g_assert_cmpuint (kv_pin_lease_get_n_pinned (ctx.lease), ==, 2);
  g_assert_cmpint (ref_count (f, 0), ==, 1);
  g_assert_cmpint (ref_count (f, 1), ==, 1);
  g_clear_pointer (&log, g_free);
  log = job_log (f);
  g_assert_cmpstr (log, ==, "");
  g_assert_cmpuint (f->policy->n_admitted, ==, 1);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (f->manager), ==, 0);
  g_assert_true (kv_pin_lease_release (ctx.lease, TRUE, &ctx.error));
  g_assert_no_error (ctx.error);
  step (f->manager);
  g_assert_cmpint (ref_count (f, 0), ==, 0);
  g_assert_cmpint (ref_count (f, 1), ==, 0);
  g_clear_object (&ctx.lease);
  kv_delayed_tier_set_serve_func (f->tier1, NULL, NULL);
}

/* ---- the two policies ---------------------------------------------------- */

static KvEmaBackpressureDetector *
make_detector (KvClock *clock)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(KvDropStorePolicy) drop = kv_drop_store_policy_new ();
  KvEmaBackpressureDetector *detector;

  detector = kv_ema_backpressure_detector_new (0.005, 0.001, 0.3, 3, 2.0, 1.0,
                                               KV_BACKPRESSURE_POLICY (drop), clock, &error);
  g_assert_no_error (error);
  return detector;
}

/* 10 ms per MiB, twice the high-water mark, past the warm-up. */
static void
pressurize (KvEmaBackpressureDetector *detector)
{
  for (guint i = 0; i < 4; i++)
    kv_backpressure_detector_on_store_completed (KV_BACKPRESSURE_DETECTOR (detector), 0.010, 1 << 20);
  g_assert_true (kv_backpressure_detector_is_under_pressure (KV_BACKPRESSURE_DETECTOR (detector)));
}

typedef struct
{
  KvClock *clock;
  KvHostBuffer *buffer;
  KvPrimaryTier *primary;
  KvEmaBackpressureDetector *detector;
  KvSecondaryTier *pressured;   /* "delayed", with the detector */
  KvSecondaryTier *plain;       /* "plain", without */
  KvKey *keys[4];
} Bp;

static void
bp_setup (Bp            *b,
          gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  b->clock = kv_clock_new_manual (1000000);
  b->buffer = kv_host_buffer_new (8, SLOT_SIZE, &error);
  g_assert_no_error (error);
  b->primary = kv_primary_tier_new (b->buffer, NULL, TRUE);
  b->detector = make_detector (b->clock);
  b->pressured = g_object_new (KV_TYPE_DELAYED_TIER, "primary", b->buffer, "tier-type", "delayed",
                               "backpressure-detector", b->detector, NULL);
  b->plain = g_object_new (KV_TYPE_DELAYED_TIER, "primary", b->buffer, "tier-type", "plain", NULL);
  for (guint i = 0; i < G_N_ELEMENTS (b->keys); i++)
    b->keys[i] = make_key (i);
}

static void
bp_teardown (Bp            *b,
             gconstpointer  data)
{
  for (guint i = 0; i < G_N_ELEMENTS (b->keys); i++)
    kv_key_unref (b->keys[i]);
  g_clear_object (&b->pressured);
  g_clear_object (&b->plain);
  g_clear_object (&b->detector);
  g_clear_object (&b->primary);
  g_clear_object (&b->buffer);
  g_clear_object (&b->clock);
}

/* The first @n keys of @b, NULL-terminated (valid until the next call). */
static KvKey **
first_keys (Bp   *b,
            guint n)
{
  static KvKey *terminated[G_N_ELEMENTS (((Bp *) NULL)->keys) + 1];

  g_assert_cmpuint (n, <=, G_N_ELEMENTS (b->keys));
  memcpy (terminated, b->keys, n * sizeof (KvKey *));
  terminated[n] = NULL;
  return terminated;
}

static void
test_always_admits_under_pressure (Bp            *b,
                                   gconstpointer  data)
{
  g_autoptr(KvAlwaysAdmitPolicy) always = kv_always_admit_policy_new ();
  g_autoptr(KvTieringManager) manager = NULL;
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvStats) stats = NULL;
  guint64 stores = 0, chunks = 0;

  pressurize (b->detector);
  g_assert_true (kv_admission_policy_should_admit (KV_ADMISSION_POLICY (always), first_keys (b, 3), 0, FALSE));
  g_assert_null (kv_admission_policy_get_stats (KV_ADMISSION_POLICY (always)));

  /* through a manager: the pressured tier still gets the cascade */
  manager = g_object_new (KV_TYPE_TIERING_MANAGER, "primary", b->primary,
                          "admission-policy", always, NULL);
  g_assert_true (kv_tiering_manager_add_tier (manager, b->pressured, &error));
  g_assert_no_error (error);
  kv_tiering_manager_on_new_request (manager, req);
  store_keys (manager, b->buffer, b->keys, 2, req);
  g_assert_cmpuint (kv_delayed_tier_count_calls (KV_DELAYED_TIER (b->pressured), "submit_store"), ==, 1);
  kv_backpressure_policy_pop_stores_dropped (kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (b->detector)),
                                             &stores, &chunks);
  g_assert_cmpuint (stores, ==, 0);
  kv_delayed_tier_complete_all (KV_DELAYED_TIER (b->pressured), TRUE);
  step (manager);
  kv_tiering_manager_on_request_finished (manager, req);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
}

static void
test_backpressure_should_admit (Bp            *b,
                                gconstpointer  data)
{
  g_autoptr(KvBackpressureAdmissionPolicy) bp = kv_backpressure_admission_policy_new ();
  KvAdmissionPolicy *policy = KV_ADMISSION_POLICY (bp);
  KvBackpressurePolicy *drops = kv_backpressure_detector_get_policy (KV_BACKPRESSURE_DETECTOR (b->detector));
  guint64 stores = 0, chunks = 0;

  kv_admission_policy_tier_added (policy, 0, b->pressured);
  kv_admission_policy_tier_added (policy, 1, b->plain);

  g_assert_true (kv_admission_policy_should_admit (policy, first_keys (b, 3), 0, FALSE));
  pressurize (b->detector);
  /* stores to the pressured tier are dropped and counted by its detector */
  g_assert_false (kv_admission_policy_should_admit (policy, first_keys (b, 3), 0, FALSE));
  kv_backpressure_policy_pop_stores_dropped (drops, &stores, &chunks);
  g_assert_cmpuint (stores, ==, 1);
  g_assert_cmpuint (chunks, ==, 3);
  /* promotions always, a tier without detector always, an unknown tier always */
  g_assert_true (kv_admission_policy_should_admit (policy, first_keys (b, 1), 0, TRUE));
  g_assert_true (kv_admission_policy_should_admit (policy, first_keys (b, 3), 1, FALSE));
  g_assert_true (kv_admission_policy_should_admit (policy, first_keys (b, 3), 7, FALSE));
}

static void
test_backpressure_feedback (Bp            *b,
                            gconstpointer  data)
{
  g_autoptr(KvBackpressureAdmissionPolicy) bp = kv_backpressure_admission_policy_new ();
  KvAdmissionPolicy *policy = KV_ADMISSION_POLICY (bp);
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  const guint32 slots[] = { 0, 1 };
  g_autoptr(KvTransferJob) store = kv_transfer_job_new (0, b->keys, slots, 2, FALSE, req);
  g_autoptr(KvTransferJob) load = kv_transfer_job_new (1, b->keys, slots, 2, TRUE, req);
  g_autoptr(KvJobResult) ok = kv_job_result_new (0, TRUE);
  g_autoptr(KvJobResult) failed = kv_job_result_new (0, FALSE);
  g_autoptr(KvJobResult) ok_load = kv_job_result_new (1, TRUE);
  KvEmaBackpressureDetector *det = b->detector;

  kv_admission_policy_tier_added (policy, 0, b->pressured);
  kv_admission_policy_tier_added (policy, 1, b->plain);

  /* never admitted: no per-job table, so no complaint */
  kv_transfer_job_set_submit_time (store, kv_clock_get_time (b->clock));
  kv_clock_advance (b->clock, 20000);
  /* failed stores and promotions teach nothing */
  kv_admission_policy_on_completed (policy, store, 0, failed);
  kv_admission_policy_on_completed (policy, load, 0, ok_load);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (det), ==, 0);
  /* a tier without detector: nothing to teach */
  kv_admission_policy_on_completed (policy, store, 1, ok);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (det), ==, 0);

  /* 20 ms for 2 × 4 KiB (no transfer bytes: the job's chunks) */
  kv_admission_policy_on_completed (policy, store, 0, ok);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (det), ==, 1);
  kv_admission_policy_on_completed (policy, store, 0, ok);
  kv_admission_policy_on_completed (policy, store, 0, ok);
  g_assert_cmpfloat_with_epsilon (kv_ema_backpressure_detector_get_store_latency_ema (det),
                                  0.020 / (2.0 * SLOT_SIZE / (1 << 20)), 1e-9);
  kv_admission_policy_on_completed (policy, store, 0, ok);
  g_assert_true (kv_backpressure_detector_is_under_pressure (KV_BACKPRESSURE_DETECTOR (det)));

  /* reset forgets it all */
  kv_admission_policy_reset (policy);
  g_assert_cmpuint (kv_ema_backpressure_detector_get_n_completions (det), ==, 0);
  g_assert_false (kv_backpressure_detector_is_under_pressure (KV_BACKPRESSURE_DETECTOR (det)));
}

static void
test_backpressure_metrics (Bp            *b,
                           gconstpointer  data)
{
  static const char * const delayed[] = { "2:delayed", NULL };
  static const char * const plain[] = { "1:plain", NULL };
  g_autoptr(KvBackpressureAdmissionPolicy) bp = kv_backpressure_admission_policy_new ();
  KvAdmissionPolicy *policy = KV_ADMISSION_POLICY (bp);
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_admission_policy_register_metrics (policy, registry, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (kv_metric_registry_get_n_metrics (registry), ==, 3);
  g_assert_cmpint (kv_metric_registry_get_kind (registry, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA), ==, KV_METRIC_KIND_GAUGE);
  g_assert_cmpint (kv_metric_registry_get_kind (registry, KV_METRIC_BACKPRESSURE_STORES_DROPPED), ==, KV_METRIC_KIND_COUNTER);
  g_assert_cmpint (kv_metric_registry_get_kind (registry, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED), ==, KV_METRIC_KIND_COUNTER);
  g_assert_cmpstrv (kv_metric_registry_get_label_names (registry, KV_METRIC_BACKPRESSURE_STORES_DROPPED),
                    ((const char * const[]) { "tier", NULL }));

  /* no tier with a detector: nothing to report */
  kv_admission_policy_tier_added (policy, 0, b->plain);
  g_assert_null (kv_admission_policy_get_stats (policy));

  kv_admission_policy_tier_added (policy, 1, b->pressured);
  pressurize (b->detector);
  g_assert_false (kv_admission_policy_should_admit (policy, first_keys (b, 1), 1, FALSE));
  g_assert_false (kv_admission_policy_should_admit (policy, first_keys (b, 2), 1, FALSE));

  /* vLLM's labels: "<index + 1>:<tier-type>" */
  stats = kv_admission_policy_get_stats (policy);
  g_assert_cmpfloat_with_epsilon (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, delayed), 0.010, 1e-12);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, delayed), ==, 2);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, delayed), ==, 3);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, plain), ==, -1);
  g_clear_object (&stats);

  /* the counters were taken; the gauge persists */
  stats = kv_admission_policy_get_stats (policy);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, delayed), ==, 0);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, delayed), ==, 0);
  g_assert_cmpfloat_with_epsilon (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORE_LATENCY_EMA, delayed), 0.010, 1e-12);
}

/* A manager with the default policy gates cascades with the detector and
 * admits promotions from the pressured tier; the policy's metrics come
 * with the manager's. */
static void
test_backpressure_through_manager (Bp            *b,
                                   gconstpointer  data)
{
  static const char * const delayed[] = { "1:delayed", NULL };
  g_autoptr(KvTieringManager) manager = kv_tiering_manager_new (b->primary);
  g_autoptr(KvRequest) req = kv_request_new ("r1", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(KvMetricRegistry) registry = NULL;
  g_autoptr(GBytes) bytes = g_bytes_new_take (g_malloc0 (SLOT_SIZE), SLOT_SIZE);
  guint n_allocated;
  gint ref = G_MININT;

  g_assert_true (kv_tiering_manager_add_tier (manager, b->pressured, &error));
  g_assert_no_error (error);
  registry = kv_tiering_manager_create_metric_registry (manager, &error);
  g_assert_no_error (error);
  g_assert_cmpint (kv_metric_registry_get_kind (registry, KV_METRIC_BACKPRESSURE_STORES_DROPPED), ==, KV_METRIC_KIND_COUNTER);

  pressurize (b->detector);
  kv_tiering_manager_on_new_request (manager, req);
  n_allocated = kv_primary_tier_get_n_allocated (b->primary);
  store_keys (manager, b->buffer, b->keys, 3, req);
  g_assert_cmpuint (kv_delayed_tier_count_calls (KV_DELAYED_TIER (b->pressured), "submit_store"), ==, 0);
  g_assert_true (kv_primary_tier_get_ref_count (b->primary, b->keys[0], &ref));
  g_assert_cmpint (ref, ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (manager), ==, 0);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (b->primary), ==, n_allocated + 3);

  /* a promotion from the pressured tier goes ahead */
  kv_delayed_tier_put (KV_DELAYED_TIER (b->pressured), b->keys[3], bytes);
  g_assert_cmpint (kv_tiering_manager_lookup (manager, b->keys[3], req), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  step (manager);
  g_assert_cmpuint (kv_delayed_tier_count_calls (KV_DELAYED_TIER (b->pressured), "submit_load"), ==, 1);
  kv_delayed_tier_complete_all (KV_DELAYED_TIER (b->pressured), TRUE);
  step (manager);
  g_assert_cmpint (kv_tiering_manager_lookup (manager, b->keys[3], req), ==, KV_LOOKUP_RESULT_HIT);

  stats = kv_tiering_manager_get_stats (manager);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_STORES_DROPPED, delayed), ==, 1);
  g_assert_cmpfloat (test_stats_value (stats, KV_METRIC_BACKPRESSURE_BLOCKS_DROPPED, delayed), ==, 3);
  kv_tiering_manager_on_request_finished (manager, req);
  g_assert_true (kv_tiering_manager_shutdown (manager, &error));
  g_assert_no_error (error);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/kvtier/admission/default-policy", test_default_policy);
#define ADD(path, func) \
  g_test_add ("/kvtier/admission/" path, Fixture, NULL, fixture_setup, func, fixture_teardown)
  ADD ("manager/call-order", test_call_order);
  ADD ("manager/refused-store-no-side-effect", test_refused_store_has_no_side_effect);
  ADD ("manager/refused-promotion-is-miss", test_refused_promotion_is_miss);
  ADD ("manager/reset-cache-resets-policy", test_reset_cache_resets_policy);
  ADD ("manager/refused-parent-store-is-miss", test_refused_parent_store_is_miss);
#undef ADD
#define ADD(path, func) \
  g_test_add ("/kvtier/admission/" path, Bp, NULL, bp_setup, func, bp_teardown)
  ADD ("always/admits-under-pressure", test_always_admits_under_pressure);
  ADD ("backpressure/should-admit", test_backpressure_should_admit);
  ADD ("backpressure/feedback", test_backpressure_feedback);
  ADD ("backpressure/metrics", test_backpressure_metrics);
  ADD ("backpressure/through-manager", test_backpressure_through_manager);
#undef ADD

  return g_test_run ();
}
