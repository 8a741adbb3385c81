/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-tiering-manager.h"
#include "kv-tiering-manager-private.h"
#include "kv-tiering-manager-instance-private.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kv-backpressure-admission-policy.h"
#include "kv-job-table-private.h"
#include "kv-metric-registry.h"
#include "kv-primary-tier-private.h"
#include "kv-promotions-private.h"
#include "kv-secondary-tier-private.h"
#include "kv-stats.h"
#include "kv-tier-parent-private.h"
#include "kv-tiering-metrics-private.h"
#include "kv-wakeup-source-private.h"

/* The GObject, its properties and public API, request tracking, the store
 * path and the lookup of a primary hit, which stays here so that it is
 * inlined into each entry point. Two units hold the rest, each with its
 * state in a struct of its own in the instance
 * (kv-tiering-manager-instance-private.h): kv-job-table.c (jobs between
 * submit and report, results applied, slots held after a deadline, pin
 * leases, cascades) and kv-promotions.c (lookups beyond the primary tier,
 * the step's pending promotions and their flush at its end, hit-pending
 * waits, lazy promotion reservation). Longer than ~1,500 lines because it
 * is the manager's public contract: a quarter of it is the documentation
 * of its properties and 28 public methods, which gi-docgen and the
 * bindings read from here. */

/**
 * KvTieringManager:
 *
 * The orchestrator of a primary tier and any number of secondary tiers: it
 * answers lookups, starts promotions (secondary → primary), fans stores out
 * to every tier (cascades), tracks every transfer job until its tier reports
 * it, and finalizes requests in the order the tiers' contract requires.
 *
 * The manager reproduces the observable behaviour of vLLM's
 * `TieringOffloadingManager`:
 *
 * - job completions are consumed at most once per step, at the first entry
 *   point of the step ([method@Kv.TieringManager.lookup],
 *   [method@Kv.TieringManager.prepare_store] or, as a catch-all,
 *   [method@Kv.TieringManager.on_schedule_end]);
 * - a key that is pending in the primary tier answers
 *   %KV_LOOKUP_RESULT_HIT_PENDING without asking any secondary tier, so one
 *   chunk is promoted once however many requests look it up;
 * - promotions are allocated at lookup time and submitted at the end of the
 *   step, one job per (tier, request); a tier with
 *   [property@Kv.SecondaryTier:lazy-promotion-allocation] reserves the
 *   slots itself when it starts the load;
 * - a successful store to the primary tier is cascaded to every tier (one
 *   job per tier, each pinning the chunks), unless the
 *   [iface@Kv.AdmissionPolicy] drops it (the default,
 *   [class@Kv.BackpressureAdmissionPolicy], asks the tier's backpressure
 *   detector); the policy is asked before anything is pinned, allocated or
 *   numbered, for stores and promotions alike;
 * - a request that has waited [property@Kv.TieringManager:hit-pending-deadline]
 *   on a chunk that stays %KV_LOOKUP_RESULT_HIT_PENDING gets
 *   %KV_LOOKUP_RESULT_MISS for it from then on, and recomputes it;
 * - a tier hears [vfunc@Kv.SecondaryTier.on_request_finished] only when no
 *   more store job for the request can follow.
 *
 * Threading: every method runs on the owner thread, the thread that drives
 * the manager, and every tier method is called there. Tiers complete jobs
 * from any thread; when they do, the fd returned by
 * [method@Kv.TieringManager.get_wakeup_fd] becomes readable, so an idle
 * engine can sleep until work arrives instead of polling.
 *
 * The owner thread is the first thread that calls one of the manager's
 * serving methods (a request, a lookup, a store or load, a step, events,
 * reset or shutdown) after construction; a manager may be built and
 * configured ([method@Kv.TieringManager.add_tier] and the getters) on
 * another thread before that. From then on every method, and every method
 * of its [class@Kv.PrimaryTier] except the getters of construction
 * values, checks the calling thread: a call from another thread does
 * nothing, logs a critical naming the function and both threads, and
 * returns a failure value. [method@Kv.TieringManager.get_primary],
 * [method@Kv.TieringManager.get_wakeup_fd] and
 * [method@Kv.TieringManager.create_source] may be called from any thread.
 */

enum {
  PROP_0,
  PROP_PRIMARY,
  PROP_CLOCK,
  PROP_ENABLE_METRICS,
  PROP_ADMISSION_POLICY,
  PROP_HIT_PENDING_DEADLINE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (KvTieringManager, kv_tiering_manager, G_TYPE_OBJECT)

gboolean
_kv_owner_thread_check_slow (KvOwnerThread *owner,
                             const char    *function,
                             const char    *what,
                             gboolean       bind)
{
  guintptr caller = _kv_thread_id ();
  guintptr id;
  char caller_name[16] = "";

  if (bind && g_atomic_pointer_get (&owner->id) == 0 &&
      g_atomic_int_compare_and_exchange (&owner->binding, 0, 1))
    {
      owner->gthread = g_thread_self ();
      if (pthread_getname_np (pthread_self (), owner->name, sizeof owner->name) != 0)
        owner->name[0] = '\0';
      /* published last: a thread that sees the id sees the name */
      g_atomic_pointer_set (&owner->id, caller);
      return TRUE;
    }
  /* another thread's first call may be binding it */
  while ((id = (guintptr) g_atomic_pointer_get (&owner->id)) == 0 &&
         g_atomic_int_get (&owner->binding))
    g_thread_yield ();
  if (id == 0 || id == caller)
    return TRUE;

  if (pthread_getname_np (pthread_self (), caller_name, sizeof caller_name) != 0)
    caller_name[0] = '\0';
  g_critical ("%s: called from thread %p \"%s\", but this %s belongs to thread %p \"%s\" "
              "(the first thread that used it); every call must come from that thread",
              function, (gpointer) g_thread_self (), caller_name, what,
              (gpointer) owner->gthread, owner->name);
  return FALSE;
}

/* Both types are final: an exact match of the instance's class is the
 * whole check, made without a get_type() call (set in class_init). */
static GType manager_type;
static GType request_type;
#define IS_INSTANCE_OF_FINAL(instance, type) \
  ((instance) != NULL && ((GTypeInstance *) (instance))->g_class != NULL && \
   ((GTypeInstance *) (instance))->g_class->g_type == (type))
#define IS_MANAGER(instance) IS_INSTANCE_OF_FINAL (instance, manager_type)
#define IS_REQUEST(instance) IS_INSTANCE_OF_FINAL (instance, request_type)

static void
request_state_free (gpointer data)
{
  KvRequestState *state = data;

  g_object_unref (state->request);
  g_clear_pointer (&state->request_level_tiers, g_array_unref);
  g_clear_pointer (&state->parked_keys, g_ptr_array_unref);
  g_free (state);
}

static void
tier_slot_clear (gpointer data)
{
  KvTierSlot *slot = data;

  g_clear_object (&slot->tier);
  g_clear_object (&slot->parent);
  g_clear_pointer (&slot->pending_loads, g_ptr_array_unref);
  g_clear_pointer (&slot->pending_loads_by_req, g_hash_table_unref);
  g_clear_pointer (&slot->refused, g_ptr_array_unref);
}

/* Runs on whatever thread completed a job: only touches the eventfd. */
void
_kv_tiering_manager_tier_queued (gpointer user_data)
{
  KvTieringManager *self = user_data;
  guint64 one = 1;

  if (g_atomic_int_compare_and_exchange (&self->wakeup_pending, 0, 1))
    {
      if (write (self->wakeup_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        g_warning ("Could not signal the kvtier wake-up fd: %s", g_strerror (errno));
    }
}

static void
kv_tiering_manager_clear_wakeup (KvTieringManager *self)
{
  guint64 value;

  if (g_atomic_int_compare_and_exchange (&self->wakeup_pending, 1, 0))
    {
      /* Non-blocking: a concurrent writer may already have been drained. */
      if (read (self->wakeup_fd, &value, sizeof value) < 0 && errno != EAGAIN)
        g_warning ("Could not drain the kvtier wake-up fd: %s", g_strerror (errno));
    }
}

static void
kv_tiering_manager_dispose (GObject *object)
{
  KvTieringManager *self = KV_TIERING_MANAGER (object);

  if (self->tiers != NULL)
    {
      for (guint i = 0; i < self->tiers->len; i++)
        {
          KvTierSlot *slot = tier_slot (self, i);

          if (slot->tier != NULL)
            {
              _kv_secondary_tier_set_queued_func (slot->tier, NULL, NULL);
              _kv_secondary_tier_set_reserve_func (slot->tier, NULL, NULL);
            }
        }
      g_clear_pointer (&self->tiers, g_array_unref);
    }
  _kv_job_table_dispose (&self->jobs);
  g_clear_pointer (&self->requests, g_hash_table_unref);
  if (self->primary != NULL)
    _kv_primary_tier_set_owner (self->primary, NULL);
  if (self->metrics != NULL && self->primary != NULL)
    _kv_primary_tier_set_stamp_drop_func (self->primary, NULL, NULL);
  self->hooks = NULL;
  g_clear_pointer (&self->metrics, kv_tiering_metrics_free);
  g_clear_object (&self->primary);
  g_clear_object (&self->clock);
  self->admission_iface = NULL;
  g_clear_object (&self->admission);

  G_OBJECT_CLASS (kv_tiering_manager_parent_class)->dispose (object);
}

static void
kv_tiering_manager_finalize (GObject *object)
{
  KvTieringManager *self = KV_TIERING_MANAGER (object);

  if (self->wakeup_fd >= 0)
    close (self->wakeup_fd);
  _kv_job_table_finalize (&self->jobs);
  _kv_promotions_finalize (&self->promotions);

  G_OBJECT_CLASS (kv_tiering_manager_parent_class)->finalize (object);
}

static void
kv_tiering_manager_get_property (GObject    *object,
                                 guint       prop_id,
                                 GValue     *value,
                                 GParamSpec *pspec)
{
  KvTieringManager *self = KV_TIERING_MANAGER (object);

  switch (prop_id)
    {
    case PROP_PRIMARY:
      g_value_set_object (value, self->primary);
      break;
    case PROP_CLOCK:
      g_value_set_object (value, self->clock);
      break;
    case PROP_ENABLE_METRICS:
      g_value_set_boolean (value, self->enable_metrics);
      break;
    case PROP_ADMISSION_POLICY:
      g_value_set_object (value, self->admission);
      break;
    case PROP_HIT_PENDING_DEADLINE:
      g_value_set_double (value,
                          self->promotions.hit_pending_deadline_us / (gdouble) G_USEC_PER_SEC);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_tiering_manager_set_property (GObject      *object,
                                 guint         prop_id,
                                 const GValue *value,
                                 GParamSpec   *pspec)
{
  KvTieringManager *self = KV_TIERING_MANAGER (object);

  switch (prop_id)
    {
    case PROP_PRIMARY:
      self->primary = g_value_dup_object (value);
      break;
    case PROP_CLOCK:
      if (g_value_get_object (value) != NULL)
        g_set_object (&self->clock, g_value_get_object (value));
      break;
    case PROP_ENABLE_METRICS:
      self->enable_metrics = g_value_get_boolean (value);
      break;
    case PROP_ADMISSION_POLICY:
      if (g_value_get_object (value) != NULL)
        g_set_object (&self->admission, g_value_get_object (value));
      break;
    case PROP_HIT_PENDING_DEADLINE:
      kv_tiering_manager_set_hit_pending_deadline (self, g_value_get_double (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_tiering_manager_constructed (GObject *object)
{
  KvTieringManager *self = KV_TIERING_MANAGER (object);

  G_OBJECT_CLASS (kv_tiering_manager_parent_class)->constructed (object);

  if (self->clock == NULL)
    self->clock = g_object_ref (kv_clock_get_default ());
  if (self->admission == NULL)
    self->admission = KV_ADMISSION_POLICY (kv_backpressure_admission_policy_new ());
  self->admission_iface = KV_ADMISSION_POLICY_GET_IFACE (self->admission);
  if (self->admission_iface->should_admit == NULL)
    g_critical ("%s does not implement KvAdmissionPolicy.should_admit; every job is admitted",
                G_OBJECT_TYPE_NAME (self->admission));
  if (self->primary == NULL)
    {
      g_critical ("KvTieringManager needs a primary tier (the construct property \"primary\")");
      return;
    }

  _kv_primary_tier_set_owner (self->primary, &self->owner);

  /* From construction on, so that a scrape before the first request
   * already sees every series; tiers add their labels as they are added. */
  if (self->enable_metrics)
    {
      g_autofree char *primary_label = kv_tiering_metrics_make_tier_label (0, "primary");
      const char * const labels[] = { primary_label, NULL };

      self->metrics = kv_tiering_metrics_new (labels,
                                              kv_primary_tier_get_n_slots (self->primary),
                                              kv_primary_tier_get_slot_size (self->primary),
                                              self->clock);
      self->hooks = &kv_tiering_metrics_hooks;
      self->hooks_data = self->metrics;
      _kv_primary_tier_set_stamp_drop_func (self->primary, kv_tiering_metrics_on_stamp_dropped,
                                            self->metrics);
    }
}

static void
kv_tiering_manager_class_init (KvTieringManagerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  manager_type = G_TYPE_FROM_CLASS (klass);
  request_type = KV_TYPE_REQUEST;

  object_class->constructed = kv_tiering_manager_constructed;
  object_class->dispose = kv_tiering_manager_dispose;
  object_class->finalize = kv_tiering_manager_finalize;
  object_class->get_property = kv_tiering_manager_get_property;
  object_class->set_property = kv_tiering_manager_set_property;

  /**
   * KvTieringManager:primary:
   *
   * The primary tier: the only tier the device reads and writes.
   */
  properties[PROP_PRIMARY] =
    g_param_spec_object ("primary", NULL, NULL,
                         KV_TYPE_PRIMARY_TIER,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * KvTieringManager:clock:
   *
   * The clock that stamps jobs' submit times, which backpressure detectors
   * compare with their own clock. Tests pass a manual clock; the default is
   * [func@Kv.Clock.get_default].
   */
  properties[PROP_CLOCK] =
    g_param_spec_object ("clock", NULL, NULL,
                         KV_TYPE_CLOCK,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * KvTieringManager:enable-metrics:
   *
   * Whether the manager records vLLM's tiering metrics (lookup counters and
   * delay histograms, job bytes and times, usage gauges). Engines that do
   * not log statistics turn it off and save a table probe per lookup (each
   * request's key is counted once per tier) and two clock reads per
   * secondary-tier lookup; [method@Kv.TieringManager.get_stats] then
   * returns only the tiers' own metrics.
   */
  properties[PROP_ENABLE_METRICS] =
    g_param_spec_boolean ("enable-metrics", NULL, NULL,
                          TRUE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * KvTieringManager:admission-policy:
   *
   * The policy asked before every store and promotion (see
   * [iface@Kv.AdmissionPolicy]). %NULL at construction means a new
   * [class@Kv.BackpressureAdmissionPolicy], which gates cascades with each
   * tier's backpressure detector, as vLLM's offloading spec installs it;
   * pass a [class@Kv.AlwaysAdmitPolicy] to ignore the detectors. The
   * manager tells the policy about each tier as it is added.
   */
  properties[PROP_ADMISSION_POLICY] =
    g_param_spec_object ("admission-policy", NULL, NULL,
                         KV_TYPE_ADMISSION_POLICY,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * KvTieringManager:hit-pending-deadline:
   *
   * Seconds a request may wait on one chunk that answers
   * %KV_LOOKUP_RESULT_HIT_PENDING (a store or a promotion in flight) before
   * the chunk answers %KV_LOOKUP_RESULT_MISS to that request, which then
   * recomputes it instead of waiting on a write that may never finish
   * (vLLM's `hit_pending_deadline_s`). The wait starts at the first lookup
   * of the request that finds the chunk pending, on the manager's
   * [property@Kv.TieringManager:clock]; a lookup that starts the chunk's
   * promotion starts no wait (the request's next lookup, a step later at
   * most, does), so that finding chunks in a tier costs nothing more. Each
   * release is counted in the `kvtier_tiering_hit_pending_deadline_releases_total`
   * metric. 0 turns the deadline off.
   */
  properties[PROP_HIT_PENDING_DEADLINE] =
    g_param_spec_double ("hit-pending-deadline", NULL, NULL,
                         0.0, 1e6, 60.0,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT | G_PARAM_STATIC_STRINGS |
                         G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_tiering_manager_init (KvTieringManager *self)
{
  self->enable_metrics = TRUE;
  self->tiers = g_array_new (FALSE, TRUE, sizeof (KvTierSlot));
  g_array_set_clear_func (self->tiers, tier_slot_clear);
  _kv_job_table_init (&self->jobs);
  self->requests = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, request_state_free);
  _kv_promotions_init (&self->promotions);
  self->wakeup_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (self->wakeup_fd < 0)
    g_critical ("Could not create the kvtier wake-up eventfd: %s", g_strerror (errno));
}

/**
 * kv_tiering_manager_new:
 * @primary: the primary tier
 *
 * Creates a manager over @primary with no secondary tier yet; add tiers with
 * [method@Kv.TieringManager.add_tier] before the first request.
 *
 * Returns: (transfer full): a new manager
 */
KvTieringManager *
kv_tiering_manager_new (KvPrimaryTier *primary)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (primary), NULL);

  return g_object_new (KV_TYPE_TIERING_MANAGER, "primary", primary, NULL);
}

/**
 * kv_tiering_manager_add_tier:
 * @self: a manager
 * @tier: a secondary tier over the same primary buffer
 * @error: return location for an error
 *
 * Appends @tier to the manager's ordered list of secondary tiers: tiers
 * added first are asked first on lookups. Tiers can only be added before the
 * manager serves its first request, and each tier must have been created
 * with the primary tier's [class@Kv.HostBuffer] as its
 * [property@Kv.SecondaryTier:primary].
 *
 * Returns: %TRUE if the tier was added
 */
gboolean
kv_tiering_manager_add_tier (KvTieringManager  *self,
                             KvSecondaryTier   *tier,
                             GError           **error)
{
  KvTierSlot slot = { 0 };

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), FALSE);
  g_return_val_if_fail (KV_IS_SECONDARY_TIER (tier), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  OWNER_SETUP (self, FALSE);

  if (self->started || self->shut_down)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_BUSY,
                   "Cannot add tier '%s': the manager is already %s",
                   kv_secondary_tier_get_tier_type (tier),
                   self->shut_down ? "shut down" : "serving requests");
      return FALSE;
    }
  if (kv_secondary_tier_get_primary (tier) != kv_primary_tier_get_buffer (self->primary))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Cannot add tier '%s': its \"primary\" buffer is not the primary tier's buffer",
                   kv_secondary_tier_get_tier_type (tier));
      return FALSE;
    }
  for (guint i = 0; i < self->tiers->len; i++)
    {
      if (tier_slot (self, i)->tier == tier)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                       "Tier '%s' was already added to this manager",
                       kv_secondary_tier_get_tier_type (tier));
          return FALSE;
        }
    }

  slot.tier = g_object_ref (tier);
  slot.parent = kv_tier_parent_new (self, self->tiers->len);
  slot.medium = kv_secondary_tier_get_medium (tier);
  slot.locality = kv_secondary_tier_get_locality (tier);
  slot.lazy = kv_secondary_tier_get_lazy_promotion_allocation (tier);
  slot.no_cascades = !kv_secondary_tier_get_accepts_cascaded_stores (tier);
  slot.refused = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  slot.default_drain =
    KV_SECONDARY_TIER_GET_CLASS (tier)->get_finished_jobs ==
    ((KvSecondaryTierClass *) g_type_class_peek (KV_TYPE_SECONDARY_TIER))->get_finished_jobs;
  g_array_append_val (self->tiers, slot);
  _kv_tiering_manager_init_tier_promotions (self, self->tiers->len - 1);
  {
    g_autofree char *label = kv_tiering_metrics_make_tier_label (self->tiers->len,
                                                                 kv_secondary_tier_get_tier_type (tier));

    /* the tier's own families and messages use the same label */
    kv_secondary_tier_set_metric_label (tier, label);
    if (self->metrics != NULL)
      kv_tiering_metrics_add_label (self->metrics, label);
  }

  _kv_secondary_tier_set_queued_func (tier, _kv_tiering_manager_tier_queued, self);
  if (slot.lazy)
    {
      self->promotions.n_lazy_tiers++;
      _kv_secondary_tier_set_reserve_func (tier, _kv_tiering_manager_reserve_lazy_promotion, self);
    }
  kv_admission_policy_tier_added (self->admission, self->tiers->len - 1, tier);
  return TRUE;
}

/**
 * kv_tiering_manager_get_primary:
 * @self: a manager
 *
 * Gets the primary tier the manager was created for. Any thread.
 *
 * Returns: (transfer none): the primary tier
 */
KvPrimaryTier *
kv_tiering_manager_get_primary (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  return self->primary;
}

/**
 * kv_tiering_manager_get_n_tiers:
 * @self: a manager
 *
 * Counts the secondary tiers added with
 * [method@Kv.TieringManager.add_tier]. Owner thread.
 *
 * Returns: the number of secondary tiers
 */
guint
kv_tiering_manager_get_n_tiers (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), 0);
  OWNER_SETUP (self, 0);
  return self->tiers->len;
}

/**
 * kv_tiering_manager_get_tier:
 * @self: a manager
 * @index: a secondary tier index, from 0
 *
 * Gets a secondary tier, in the order they were added (the order stores
 * cascade and lookups ask them). Owner thread.
 *
 * Returns: (transfer none): the secondary tier at @index; metric labels name
 *   it `"<index + 1>:<tier-type>"`
 */
KvSecondaryTier *
kv_tiering_manager_get_tier (KvTieringManager *self,
                             guint             index)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  g_return_val_if_fail (index < self->tiers->len, NULL);
  OWNER_SETUP (self, NULL);
  return tier_slot (self, index)->tier;
}

/**
 * kv_tiering_manager_get_clock:
 * @self: a manager
 *
 * Gets the clock the manager stamps jobs with (submit times, transfer
 * times of the metrics). Owner thread.
 *
 * Returns: (transfer none): the clock that stamps jobs
 */
KvClock *
kv_tiering_manager_get_clock (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  OWNER_SETUP (self, NULL);
  return self->clock;
}

/* The tier list is fixed from the first request on, and so are the metric
 * labels ("0:primary", "1:<type>", ...), added with the tiers. */
static inline void
ensure_started (KvTieringManager *self)
{
  self->started = TRUE;
}

/* Consumes what the tiers reported, and drains the wake-up fd first so
 * that a completion queued meanwhile wakes the engine again. */
static void
process_finished_jobs (KvTieringManager *self)
{
  kv_tiering_manager_clear_wakeup (self);
  _kv_tiering_manager_process_results (self);
}

/* Completions are consumed at most once per step, at its first entry point
 * (reference §5.2): a tier that completes synchronously inside a step sees
 * its results applied in the next step. */
static inline void
maybe_process_finished_jobs (KvTieringManager *self)
{
  if (G_LIKELY (self->processed_jobs_this_step))
    return;
  self->processed_jobs_this_step = TRUE;
  ensure_started (self);
  process_finished_jobs (self);
}

/* ---- requests ------------------------------------------------------------ */

static KvRequestState *
lookup_request (KvTieringManager *self,
                KvRequest        *request)
{
  return g_hash_table_lookup (self->requests, kv_request_get_id (request));
}

static void
maybe_finalize_request (KvTieringManager *self,
                        KvRequestState   *state)
{
  if (!state->finished || state->pending_primary_stores > 0 ||
      (state->parked_keys != NULL && state->parked_keys->len > 0))
    return;

  for (guint i = 0; i < self->tiers->len; i++)
    if (i != state->origin)
      kv_secondary_tier_on_request_finished (tier_slot (self, i)->tier, state->request);

  HOOK (self, request_finished, kv_request_get_id (state->request));
  _kv_promotions_forget_request (&self->promotions, state->request);
  g_hash_table_remove (self->requests, kv_request_get_id (state->request));
}

KvOffloadPolicy
_kv_tiering_manager_on_new_request_excluding (KvTieringManager *self,
                                              KvRequest        *request,
                                              guint             exclude_tier)
{
  KvRequestState *state;

  ensure_started (self);

  state = g_new0 (KvRequestState, 1);
  state->request = g_object_ref (request);
  state->origin = exclude_tier;
  /* A request id seen again starts over, as the reference does, lookup
   * accounting included. */
  if (self->hooks != NULL && g_hash_table_contains (self->requests, kv_request_get_id (request)))
    HOOK (self, request_restarted, kv_request_get_id (request));
  _kv_promotions_forget_request (&self->promotions, request);
  g_hash_table_replace (self->requests, (gpointer) kv_request_get_id (request), state);

  for (guint i = 0; i < self->tiers->len; i++)
    {
      if (i == exclude_tier)
        continue;
      if (kv_secondary_tier_on_new_request (tier_slot (self, i)->tier, request) ==
          KV_OFFLOAD_POLICY_REQUEST_LEVEL)
        {
          if (state->request_level_tiers == NULL)
            state->request_level_tiers = g_array_new (FALSE, FALSE, sizeof (guint));
          g_array_append_val (state->request_level_tiers, i);
        }
    }

  return state->request_level_tiers != NULL ? KV_OFFLOAD_POLICY_REQUEST_LEVEL
                                            : KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

/**
 * kv_tiering_manager_on_new_request:
 * @self: a manager
 * @request: a request the scheduler starts serving
 *
 * Starts tracking @request and asks every tier for its offload policy.
 * Call it before any [method@Kv.TieringManager.prepare_store] for the
 * request. A request id already tracked starts over.
 *
 * Returns: %KV_OFFLOAD_POLICY_REQUEST_LEVEL if any tier wants the whole
 *   request, else %KV_OFFLOAD_POLICY_CHUNK_LEVEL
 */
KvOffloadPolicy
kv_tiering_manager_on_new_request (KvTieringManager *self,
                                   KvRequest        *request)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_return_val_if_fail (KV_IS_REQUEST (request), KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_return_val_if_fail (!self->shut_down, KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  OWNER_SERVE (self, KV_OFFLOAD_POLICY_CHUNK_LEVEL);

  return _kv_tiering_manager_on_new_request_excluding (self, request, KV_TIER_INDEX_NONE);
}

void
_kv_tiering_manager_on_request_finished_excluding (KvTieringManager *self,
                                                   KvRequest        *request,
                                                   guint             exclude_tier)
{
  KvRequestState *state;

  /* The primary tier hears about it at once; secondary tiers only when no
   * more store job for the request can follow. */
  kv_primary_tier_on_request_finished (self->primary, request);

  state = lookup_request (self, request);
  if (state == NULL)
    {
      g_warning ("on_request_finished: request %s is not tracked (on_new_request was not "
                 "called, or it already finished)", kv_request_get_id (request));
      return;
    }
  if (exclude_tier != KV_TIER_INDEX_NONE)
    state->origin = exclude_tier;
  state->finished = TRUE;
  maybe_finalize_request (self, state);
}

/**
 * kv_tiering_manager_on_request_finished:
 * @self: a manager
 * @request: a request previously passed to
 *   [method@Kv.TieringManager.on_new_request]
 *
 * Says that the scheduler will make no more submit-side call for @request.
 * Transfers may still be in flight; the tiers are told once the last store
 * of the request has been cascaded.
 */
void
kv_tiering_manager_on_request_finished (KvTieringManager *self,
                                        KvRequest        *request)
{
  g_return_if_fail (KV_IS_TIERING_MANAGER (self));
  g_return_if_fail (KV_IS_REQUEST (request));
  g_return_if_fail (!self->shut_down);
  OWNER_SERVE (self, );

  _kv_tiering_manager_on_request_finished_excluding (self, request, KV_TIER_INDEX_NONE);
}

/* ---- lookup and promotion ------------------------------------------------ */

/* The lookup of one key, inlined into each entry point: a primary hit is
 * one hash probe and, with metrics, one call to the hook. */
static inline KvLookupResult
lookup_one (KvTieringManager *self,
            KvKey            *key,
            KvRequest        *request,
            guint             exclude_tier)
{
  KvLookupResult result;
  guint64 *stamp;

  maybe_process_finished_jobs (self);

  /* A primary lookup is one hash probe, far below the 1 µs resolution of
   * the clock: it is not timed (its sync-delay sample is 0 s). The hook
   * gets the chunk's stamp, so that counting it once per request takes no
   * second probe. */
  result = _kv_primary_tier_lookup_stamp (self->primary, key, &stamp);
  if (G_LIKELY (result == KV_LOOKUP_RESULT_HIT))
    {
      if (self->hooks != NULL)
        self->hooks->primary_lookup (self->hooks_data, request, key, result, stamp);
      return result;
    }
  /* the hook hears the other answers there, with what became of them */
  return _kv_tiering_manager_lookup_beyond_primary_hit (self, key, request, exclude_tier, result);
}

KvLookupResult
_kv_tiering_manager_lookup_excluding (KvTieringManager *self,
                                      KvKey            *key,
                                      KvRequest        *request,
                                      guint             exclude_tier)
{
  return lookup_one (self, key, request, exclude_tier);
}

/**
 * kv_tiering_manager_lookup:
 * @self: a manager
 * @key: the key of a chunk
 * @request: the request looking it up
 *
 * Looks @key up in the primary tier and then, in order, in the secondary
 * tiers that @request's load tier filter allows. A secondary hit that the
 * admission policy admits allocates a primary slot (or, for a tier with
 * [property@Kv.SecondaryTier:lazy-promotion-allocation], leaves that to the
 * tier) and queues a promotion that is submitted at the end of the step;
 * the chunk then answers %KV_LOOKUP_RESULT_HIT_PENDING until the tier has
 * loaded it, and %KV_LOOKUP_RESULT_HIT from the step after that. A request
 * that waited [property@Kv.TieringManager:hit-pending-deadline] on a
 * pending chunk gets %KV_LOOKUP_RESULT_MISS for it.
 *
 * The primary-hit path does no allocation and no system call.
 *
 * Returns: HIT, HIT_PENDING, RETRY (some tier does not know yet; ask again
 *   next step) or MISS (also when the primary tier has no room to promote,
 *   or the admission policy refuses the promotion)
 */
KvLookupResult
kv_tiering_manager_lookup (KvTieringManager *self,
                           KvKey            *key,
                           KvRequest        *request)
{
  /* per key: the type checks without a get_type() call */
  g_return_val_if_fail (IS_MANAGER (self), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (key != NULL, KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (IS_REQUEST (request), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (!self->shut_down, KV_LOOKUP_RESULT_MISS);
  OWNER_SERVE (self, KV_LOOKUP_RESULT_MISS);

  return lookup_one (self, key, request, KV_TIER_INDEX_NONE);
}

/* The connector's lookup: where a promotion started, from the manager that
 * chose the tier, rather than by asking the tiers again. A chunk this
 * request promotes is the last key of its pending promotion from that
 * tier (promotions are submitted at the step's end); only a pending
 * answer is looked at, so the lookup path itself is unchanged. */
KvLookupResult
_kv_tiering_manager_lookup_promoting (KvTieringManager *self,
                                      KvKey            *key,
                                      KvRequest        *request,
                                      guint            *promoted_from)
{
  KvLookupResult result;

  *promoted_from = KV_TIER_INDEX_NONE;
  g_return_val_if_fail (IS_MANAGER (self), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (key != NULL, KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (IS_REQUEST (request), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (!self->shut_down, KV_LOOKUP_RESULT_MISS);
  OWNER_SERVE (self, KV_LOOKUP_RESULT_MISS);

  result = lookup_one (self, key, request, KV_TIER_INDEX_NONE);
  if (result != KV_LOOKUP_RESULT_HIT_PENDING)
    return result;
  *promoted_from = _kv_tiering_manager_find_promotion (self, key, request);
  return result;
}

/**
 * kv_tiering_manager_lookup_many: (skip)
 * @self: a manager
 * @keys: (array length=n_keys): keys of chunks, usually a request's prefix
 * @n_keys: the number of keys
 * @request: the request looking them up
 * @results: (out caller-allocates) (array length=n_keys): the result of each lookup
 *
 * Looks up each key as [method@Kv.TieringManager.lookup] would, in order.
 * For C callers that look up long prefixes: it checks its arguments once
 * and allocates nothing. C only (@results is a caller-allocated array whose
 * length is an input, which introspection cannot describe); bindings call
 * [method@Kv.TieringManager.lookup] per key.
 */
void
kv_tiering_manager_lookup_many (KvTieringManager *self,
                                KvKey * const    *keys,
                                guint             n_keys,
                                KvRequest        *request,
                                KvLookupResult   *results)
{
  g_return_if_fail (KV_IS_TIERING_MANAGER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  g_return_if_fail (KV_IS_REQUEST (request));
  g_return_if_fail (results != NULL || n_keys == 0);
  g_return_if_fail (!self->shut_down);
  OWNER_SERVE (self, );

  for (guint i = 0; i < n_keys; i++)
    results[i] = lookup_one (self, keys[i], request, KV_TIER_INDEX_NONE);
}

/* ---- GPU-facing load path ------------------------------------------------ */

/**
 * kv_tiering_manager_prepare_load:
 * @self: a manager
 * @keys: (array length=n_keys): keys that answered HIT in this step
 * @n_keys: the number of keys
 * @request: the request loading them
 * @n_chunk_ids: (out) (optional): where to store the number of slots (@n_keys)
 * @error: return location for an error
 *
 * Pins @keys in the primary tier for a device load until
 * [method@Kv.TieringManager.complete_load].
 *
 * Returns: (array length=n_chunk_ids) (transfer full): the primary slot of
 *   each key, in order; %NULL (nothing pinned) if a key is not ready
 */
guint32 *
kv_tiering_manager_prepare_load (KvTieringManager  *self,
                                 KvKey * const     *keys,
                                 guint              n_keys,
                                 KvRequest         *request,
                                 guint             *n_chunk_ids,
                                 GError           **error)
{
  g_autofree guint32 *chunk_ids = NULL;

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (KV_IS_REQUEST (request), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  OWNER_SERVE (self, NULL);

  /* never NULL on success, even for no key */
  chunk_ids = g_new (guint32, MAX (n_keys, 1));
  if (!kv_primary_tier_prepare_load (self->primary, keys, n_keys, chunk_ids, error))
    return NULL;
  if (n_chunk_ids != NULL)
    *n_chunk_ids = n_keys;
  return g_steal_pointer (&chunk_ids);
}

/**
 * kv_tiering_manager_touch:
 * @self: a manager
 * @keys: (array length=n_keys): keys the request used
 * @n_keys: the number of keys
 * @request: the request
 *
 * Marks @keys recently used in the primary tier (the first key ends up the
 * most recent) and passes the hint to every secondary tier once.
 */
void
kv_tiering_manager_touch (KvTieringManager *self,
                          KvKey * const    *keys,
                          guint             n_keys,
                          KvRequest        *request)
{
  g_return_if_fail (KV_IS_TIERING_MANAGER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  g_return_if_fail (KV_IS_REQUEST (request));
  OWNER_SERVE (self, );

  kv_primary_tier_touch (self->primary, keys, n_keys);
  for (guint i = 0; i < self->tiers->len; i++)
    kv_secondary_tier_touch (tier_slot (self, i)->tier, keys, n_keys, request);
}

/**
 * kv_tiering_manager_complete_load:
 * @self: a manager
 * @keys: (array length=n_keys): keys pinned by
 *   [method@Kv.TieringManager.prepare_load]
 * @n_keys: the number of keys
 * @request: the request
 *
 * Unpins @keys once the device has read them.
 */
void
kv_tiering_manager_complete_load (KvTieringManager *self,
                                  KvKey * const    *keys,
                                  guint             n_keys,
                                  KvRequest        *request)
{
  g_return_if_fail (KV_IS_TIERING_MANAGER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  OWNER_SERVE (self, );

  kv_primary_tier_complete_load (self->primary, keys, n_keys);
}

/* ---- store path ---------------------------------------------------------- */

static void
park_key (KvRequestState *state,
          KvKey          *key,
          guint          *n_parked_requests)
{
  if (state->parked_keys == NULL)
    state->parked_keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  if (state->parked_keys->len == 0)
    (*n_parked_requests)++;
  g_ptr_array_add (state->parked_keys, kv_key_ref (key));
}

/* Request-level tiers want the whole request, including chunks that were
 * already in the primary tier: cascade the ready ones now, park the pending
 * ones until their write lands (reference §5.6 step 4, §5.7). */
static void
cascade_existing_chunks (KvTieringManager *self,
                         KvRequestState   *state,
                         KvKey * const    *keys,
                         guint             n_keys)
{
  g_autoptr(GPtrArray) ready = g_ptr_array_new ();

  for (guint i = 0; i < n_keys; i++)
    {
      switch (kv_primary_tier_lookup (self->primary, keys[i]))
        {
        case KV_LOOKUP_RESULT_HIT:
          g_ptr_array_add (ready, keys[i]);
          break;
        case KV_LOOKUP_RESULT_HIT_PENDING:
          park_key (state, keys[i], &self->n_parked_requests);
          break;
        case KV_LOOKUP_RESULT_MISS:
        case KV_LOOKUP_RESULT_RETRY:
        default:
          break;
        }
    }

  if (ready->len == 0)
    return;
  for (guint t = 0; t < state->request_level_tiers->len; t++)
    _kv_tiering_manager_cascade_to_tier (self, (KvKey **) ready->pdata, ready->len, state->request,
                                         g_array_index (state->request_level_tiers, guint, t));
}

/**
 * kv_tiering_manager_prepare_store:
 * @self: a manager
 * @keys: (array length=n_keys): keys of chunks the device computed
 * @n_keys: the number of keys
 * @request: a request passed to [method@Kv.TieringManager.on_new_request]
 * @error: return location for an error
 *
 * Allocates primary slots for the keys not stored yet, evicting unpinned
 * chunks if needed, and leaving room for the chunks this step's lookups
 * found in a tier with [property@Kv.SecondaryTier:lazy-promotion-allocation]
 * (their slots would have been allocated at lookup otherwise).
 * Completions that arrived since the last step are applied first, so their
 * unpinned chunks can be evicted. Call
 * [method@Kv.TieringManager.complete_store] exactly once for every result
 * whose keys to store are not empty.
 *
 * Returns: (transfer full): the keys to store and their slots; %NULL with
 *   %KV_TIER_ERROR_NO_SPACE when the primary tier cannot make room (nothing
 *   changed), or %KV_TIER_ERROR_NOT_FOUND for an unknown request
 */
KvPrepareStoreResult *
kv_tiering_manager_prepare_store (KvTieringManager  *self,
                                  KvKey * const     *keys,
                                  guint              n_keys,
                                  KvRequest         *request,
                                  GError           **error)
{
  KvPrepareStoreResult *prepared;
  KvRequestState *state;
  KvKey * const *to_store;
  guint n_to_store;

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (KV_IS_REQUEST (request), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  g_return_val_if_fail (!self->shut_down, NULL);
  OWNER_SERVE (self, NULL);

  maybe_process_finished_jobs (self);

  state = lookup_request (self, request);
  if (state == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND,
                   "prepare_store: request %s is not tracked; call on_new_request first",
                   kv_request_get_id (request));
      return NULL;
    }

  if (G_UNLIKELY (self->promotions.n_lazy_claims > 0) &&
      !_kv_tiering_manager_room_beside_claims (self, keys, n_keys, error))
    return NULL;
  prepared = kv_primary_tier_prepare_store (self->primary, keys, n_keys, error);
  if (prepared == NULL)
    return NULL;

  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  if (n_to_store > 0)
    state->pending_primary_stores++;

  if (state->request_level_tiers != NULL && n_to_store < n_keys)
    {
      g_autoptr(GPtrArray) existing = g_ptr_array_sized_new (n_keys - n_to_store);
      guint j = 0;

      /* keys_to_store is an order-preserving subsequence of keys */
      for (guint i = 0; i < n_keys; i++)
        {
          if (j < n_to_store && kv_key_equal (keys[i], to_store[j]))
            j++;
          else
            g_ptr_array_add (existing, keys[i]);
        }
      cascade_existing_chunks (self, state, (KvKey **) existing->pdata, existing->len);
    }

  return prepared;
}

/**
 * kv_tiering_manager_complete_store:
 * @self: a manager
 * @keys: (array length=n_keys): the keys to store of a
 *   [method@Kv.TieringManager.prepare_store] result
 * @n_keys: the number of keys
 * @request: the request
 * @success: whether the device copied the chunks into their slots
 *
 * Makes the chunks readable (or frees their slots on failure) and, on
 * success, cascades them to every secondary tier for which the admission
 * policy admits the store: one job per tier, each pinning the chunks until
 * the tier reports it.
 */
void
kv_tiering_manager_complete_store (KvTieringManager *self,
                                   KvKey * const    *keys,
                                   guint             n_keys,
                                   KvRequest        *request,
                                   gboolean          success)
{
  KvRequestState *state;

  g_return_if_fail (KV_IS_TIERING_MANAGER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  g_return_if_fail (KV_IS_REQUEST (request));
  g_return_if_fail (!self->shut_down);
  OWNER_SERVE (self, );

  ensure_started (self);
  if (success && n_keys > 0)
    _kv_tiering_manager_complete_store_and_cascade (self, keys, n_keys, request);
  else
    kv_primary_tier_complete_store (self->primary, keys, n_keys, success);

  state = lookup_request (self, request);
  if (state == NULL || state->pending_primary_stores == 0)
    {
      g_warning ("complete_store: request %s has no store in flight (complete_store must "
                 "follow a prepare_store with keys to store, once)", kv_request_get_id (request));
      return;
    }
  state->pending_primary_stores--;
  maybe_finalize_request (self, state);
}

static void
flush_pending_cascades (KvTieringManager *self)
{
  g_autoptr(GPtrArray) parked = NULL;
  GHashTableIter iter;
  gpointer value;

  if (self->n_parked_requests == 0)
    return;

  parked = g_ptr_array_new ();
  g_hash_table_iter_init (&iter, self->requests);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      KvRequestState *state = value;

      if (state->parked_keys != NULL && state->parked_keys->len > 0)
        g_ptr_array_add (parked, state);
    }

  for (guint i = 0; i < parked->len; i++)
    {
      KvRequestState *state = g_ptr_array_index (parked, i);
      g_autoptr(GPtrArray) keys = g_steal_pointer (&state->parked_keys);

      self->n_parked_requests--;
      /* HIT → cascaded now, still pending → parked again, gone → dropped */
      cascade_existing_chunks (self, state, (KvKey **) keys->pdata, keys->len);
      maybe_finalize_request (self, state);
    }
}

/* ---- deadlines ----------------------------------------------------------- */

/**
 * kv_tiering_manager_get_hit_pending_deadline:
 * @self: a manager
 *
 * Gets [property@Kv.TieringManager:hit-pending-deadline]. Owner thread.
 *
 * Returns: the deadline in seconds, 0 when off
 */
gdouble
kv_tiering_manager_get_hit_pending_deadline (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), 0.0);
  OWNER_SETUP (self, 0.0);

  return self->promotions.hit_pending_deadline_us / (gdouble) G_USEC_PER_SEC;
}

/**
 * kv_tiering_manager_set_hit_pending_deadline:
 * @self: a manager
 * @seconds: how long a request may wait on one pending chunk, 0 for ever
 *
 * Sets [property@Kv.TieringManager:hit-pending-deadline]. Waits already
 * running are measured against the new value. Owner thread.
 */
void
kv_tiering_manager_set_hit_pending_deadline (KvTieringManager *self,
                                             gdouble           seconds)
{
  gint64 us;

  g_return_if_fail (KV_IS_TIERING_MANAGER (self));
  g_return_if_fail (seconds >= 0.0 && seconds <= 1e6);
  OWNER_SETUP (self, );

  us = (gint64) (seconds * G_USEC_PER_SEC + 0.5);
  if (us == self->promotions.hit_pending_deadline_us)
    return;
  self->promotions.hit_pending_deadline_us = us;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_HIT_PENDING_DEADLINE]);
}

/**
 * kv_tiering_manager_get_admission_policy:
 * @self: a manager
 *
 * Gets [property@Kv.TieringManager:admission-policy]. Owner thread.
 *
 * Returns: (transfer none): the policy asked before every store and
 *   promotion
 */
KvAdmissionPolicy *
kv_tiering_manager_get_admission_policy (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  OWNER_SETUP (self, NULL);

  return self->admission;
}

/* ---- step end ------------------------------------------------------------ */

/**
 * kv_tiering_manager_on_schedule_end:
 * @self: a manager
 * @schedule_end: what the scheduler did this step
 *
 * Ends a step, in this order: applies completions if no entry point did
 * yet this step; lets every tier serve other nodes' requests; re-arms the
 * once-per-step completion poll; submits the promotions allocated this step
 * (one job per tier and request); re-tries parked request-level cascades;
 * calls every tier's [vfunc@Kv.SecondaryTier.on_schedule_end].
 */
void
kv_tiering_manager_on_schedule_end (KvTieringManager *self,
                                    KvScheduleEnd    *schedule_end)
{
  g_return_if_fail (KV_IS_TIERING_MANAGER (self));
  g_return_if_fail (schedule_end != NULL);
  g_return_if_fail (!self->shut_down);
  OWNER_SERVE (self, );

  maybe_process_finished_jobs (self);

  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvTierSlot *slot = tier_slot (self, i);

      kv_secondary_tier_serve_external_requests (slot->tier, KV_PARENT_MANAGER (slot->parent));
    }

  /* After serving, so lookups made while serving did not poll again. */
  self->processed_jobs_this_step = FALSE;

  _kv_tiering_manager_flush_promotions (self);
  flush_pending_cascades (self);

  for (guint i = 0; i < self->tiers->len; i++)
    kv_secondary_tier_on_schedule_end (tier_slot (self, i)->tier, schedule_end);

  /* Requests that got their blocks this step stop counting lookups. */
  if (self->hooks != NULL)
    for (const char * const *id = kv_schedule_end_get_new_request_ids (schedule_end); *id != NULL; id++)
      if (g_hash_table_contains (self->requests, *id))
        HOOK (self, request_allocated, *id);
}

/**
 * kv_tiering_manager_has_pending_work:
 * @self: a manager
 *
 * Whether the engine must keep calling the manager (for example
 * [method@Kv.TieringManager.on_schedule_end]) even when it has no request
 * to schedule, so that the results of jobs in flight are consumed. Owner
 * thread.
 *
 * Returns: %TRUE while jobs are in flight, request-level cascades are
 *   parked, a released [class@Kv.PinLease] waits to be unpinned, or a tier
 *   has work of its own: the engine must keep stepping
 */
gboolean
kv_tiering_manager_has_pending_work (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), FALSE);
  OWNER_SERVE (self, FALSE);

  if (_kv_job_table_get_n_jobs (&self->jobs) > 0 || self->n_parked_requests > 0 ||
      _kv_job_table_has_released_leases (&self->jobs))
    return TRUE;
  for (guint i = 0; i < self->tiers->len; i++)
    if (kv_secondary_tier_has_pending_work (tier_slot (self, i)->tier))
      return TRUE;
  return FALSE;
}

/**
 * kv_tiering_manager_get_n_active_jobs:
 * @self: a manager
 *
 * Counts the transfer jobs the manager submitted (stores, loads and jobs
 * tiers made themselves) whose results it has not consumed yet. Owner
 * thread.
 *
 * Returns: the number of jobs registered and not yet reported
 */
guint
kv_tiering_manager_get_n_active_jobs (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), 0);
  OWNER_SETUP (self, 0);
  return _kv_job_table_get_n_jobs (&self->jobs);
}

/**
 * kv_tiering_manager_take_events:
 * @self: a manager
 *
 * Drains the KV events: the primary tier's, then each secondary tier's in
 * tier order. The manager never makes events up for a tier.
 *
 * Returns: (transfer full) (array zero-terminated=1): the events
 */
KvEvent **
kv_tiering_manager_take_events (KvTieringManager *self)
{
  GPtrArray *all;
  KvEvent **events;

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  OWNER_SERVE (self, NULL);

  all = g_ptr_array_new ();
  events = kv_primary_tier_take_events (self->primary);
  for (KvEvent **e = events; *e != NULL; e++)
    g_ptr_array_add (all, *e);
  g_free (events);
  for (guint i = 0; i < self->tiers->len; i++)
    {
      events = kv_secondary_tier_take_events (tier_slot (self, i)->tier);
      for (KvEvent **e = events; *e != NULL; e++)
        g_ptr_array_add (all, *e);
      g_free (events);
    }
  g_ptr_array_add (all, NULL);
  return (KvEvent **) g_ptr_array_free (all, FALSE);
}

/* ---- metrics ------------------------------------------------------------- */

/**
 * kv_tiering_manager_get_stats:
 * @self: a manager
 *
 * Takes the metrics recorded since the last call (return-and-reset, as
 * vLLM's `get_stats`): lookup counters and delay histograms per tier, job
 * bytes, times and failures, primary usage and active-job gauges, the
 * admission policy's metrics (the default policy's backpressure gauges and
 * drop counters), aggregated with each tier's own
 * [vfunc@Kv.SecondaryTier.get_stats]. Render them with
 * [method@Kv.Stats.to_prometheus] and the registry from
 * [method@Kv.TieringManager.create_metric_registry].
 *
 * Before the manager serves its first request, every series of every
 * tier added so far is there at zero (counters, histograms and gauges), so
 * that a scrape made before any traffic already lists them all.
 *
 * Returns: (transfer full): the metrics; with
 *   [property@Kv.TieringManager:enable-metrics] off, only the tiers' own
 */
KvStats *
kv_tiering_manager_get_stats (KvTieringManager *self)
{
  KvStats *stats;

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  OWNER_SETUP (self, NULL);

  if (self->metrics != NULL)
    {
      g_autoptr(KvStats) policy_stats = kv_admission_policy_get_stats (self->admission);

      /* the first one holds every series, at zero */
      stats = kv_tiering_metrics_take_stats (self->metrics);
      if (policy_stats != NULL)
        kv_stats_aggregate (stats, policy_stats);
    }
  else
    {
      stats = kv_stats_new ();
    }
  for (guint i = 0; i < self->tiers->len; i++)
    {
      g_autoptr(KvStats) tier_stats = kv_secondary_tier_get_stats (tier_slot (self, i)->tier);

      if (tier_stats != NULL)
        kv_stats_aggregate (stats, tier_stats);
    }
  return stats;
}

/**
 * kv_tiering_manager_create_metric_registry:
 * @self: a manager
 * @error: return location for an error
 *
 * Builds the definitions of every metric the manager and its tiers report:
 * the manager's own ([method@Kv.MetricRegistry.add_manager_metrics]:
 * vLLM's `vllm:kv_offload_tiering_*` with the reference's histogram
 * buckets, and kvtier's `kvtier_tiering_*`), the admission policy's
 * ([method@Kv.AdmissionPolicy.register_metrics]), then each tier class's own
 * ([vfunc@Kv.SecondaryTier.register_metrics]).
 *
 * Returns: (transfer full): a new registry, or %NULL if two definitions clash
 */
KvMetricRegistry *
kv_tiering_manager_create_metric_registry (KvTieringManager  *self,
                                           GError           **error)
{
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(GHashTable) seen = g_hash_table_new (NULL, NULL);

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  OWNER_SETUP (self, NULL);

  if (!kv_tiering_metrics_register (registry, error) ||
      !kv_admission_policy_register_metrics (self->admission, registry, error))
    return NULL;
  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvSecondaryTier *tier = tier_slot (self, i)->tier;

      /* one definition set per class, however many instances */
      if (!g_hash_table_add (seen, GSIZE_TO_POINTER (G_OBJECT_TYPE (tier))))
        continue;
      if (!kv_secondary_tier_register_metrics (tier, registry, error))
        return NULL;
    }
  return g_steal_pointer (&registry);
}

/* ---- reset and shutdown -------------------------------------------------- */

/**
 * kv_tiering_manager_reset_cache:
 * @self: a manager
 * @error: return location for an error
 *
 * Empties the primary tier (for sleep, weight updates, resume) without
 * freeing a slot that tier I/O may still touch: every tier drains its jobs
 * first and their results are applied; promotions not submitted yet are
 * dropped; finished requests are finalized, active ones kept with no store
 * in flight; the admission policy is reset last (the default one resets
 * the backpressure detectors). Secondary tiers keep their
 * data. Blocks while the tiers drain. Fails with %KV_TIER_ERROR_BUSY while
 * a [class@Kv.PinLease] is held after the drain (its slots may be read).
 *
 * Returns: %TRUE on success; on error the primary tier is left untouched
 */
gboolean
kv_tiering_manager_reset_cache (KvTieringManager  *self,
                                GError           **error)
{
  g_autoptr(GPtrArray) finished = NULL;
  GHashTableIter iter;
  gpointer value;

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  g_return_val_if_fail (!self->shut_down, FALSE);
  OWNER_SERVE (self, FALSE);

  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvTierSlot *slot = tier_slot (self, i);
      g_autoptr(GError) local_error = NULL;

      if (!kv_secondary_tier_drain_jobs (slot->tier, &local_error))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                       "reset_cache: tier #%u (%s) could not drain its jobs: %s",
                       i + 1, kv_secondary_tier_get_tier_type (slot->tier), local_error->message);
          return FALSE;
        }
    }

  process_finished_jobs (self);
  if (!_kv_tiering_manager_check_jobs_idle (self, error))
    return FALSE;

  if (self->metrics != NULL && !kv_tiering_metrics_is_idle (self->metrics))
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                           "reset_cache: the job metrics still count jobs in flight after the drain");
      return FALSE;
    }

  _kv_tiering_manager_reset_promotions (self);

  finished = g_ptr_array_new ();
  g_hash_table_iter_init (&iter, self->requests);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      KvRequestState *state = value;

      state->pending_primary_stores = 0;
      if (state->parked_keys != NULL)
        g_ptr_array_set_size (state->parked_keys, 0);
      if (state->finished)
        g_ptr_array_add (finished, state);
    }
  self->n_parked_requests = 0;
  for (guint i = 0; i < finished->len; i++)
    maybe_finalize_request (self, g_ptr_array_index (finished, i));

  kv_primary_tier_reset (self->primary);
  self->processed_jobs_this_step = FALSE;

  kv_admission_policy_reset (self->admission);
  return TRUE;
}

/**
 * kv_tiering_manager_shutdown:
 * @self: a manager
 * @error: return location for an error
 *
 * Shuts every tier down (each reports its remaining jobs first), then
 * applies the last results so no primary pin is left: the chunks of a
 * [class@Kv.PinLease] not released by then are unpinned (with a warning),
 * and its later release fails with %KV_TIER_ERROR_CLOSED. A tier that fails to
 * shut down does not stop the others; the last such failure is returned,
 * and the primary buffer stays mapped while that tier holds it, since the
 * tier may still touch it. Calling it again does nothing.
 *
 * Returns: %TRUE if every tier shut down cleanly
 */
gboolean
kv_tiering_manager_shutdown (KvTieringManager  *self,
                             GError           **error)
{
  g_autoptr(GError) last_error = NULL;

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  OWNER_SERVE (self, FALSE);

  if (self->shut_down)
    return TRUE;

  for (guint i = 0; i < self->tiers->len; i++)
    {
      KvTierSlot *slot = tier_slot (self, i);
      g_autoptr(GError) local_error = NULL;

      if (!kv_secondary_tier_shutdown (slot->tier, &local_error))
        {
          g_warning ("Tier #%u (%s, %s) failed to shut down: %s",
                     i + 1, kv_secondary_tier_get_tier_type (slot->tier),
                     G_OBJECT_TYPE_NAME (slot->tier), local_error->message);
          g_clear_error (&last_error);
          last_error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                    "Tier #%u (%s) failed to shut down: %s",
                                    i + 1, kv_secondary_tier_get_tier_type (slot->tier),
                                    local_error->message);
        }
    }

  process_finished_jobs (self);
  /* Nothing takes a slot any more: a cascade a tier never answered leaves
   * no pin behind. */
  _kv_tiering_manager_release_held_pins (self);
  self->shut_down = TRUE;
  _kv_tiering_manager_close_pins (self);

  if (last_error != NULL)
    {
      g_propagate_error (error, g_steal_pointer (&last_error));
      return FALSE;
    }
  return TRUE;
}

/* ---- wake-up ------------------------------------------------------------- */

/**
 * kv_tiering_manager_get_wakeup_fd:
 * @self: a manager
 *
 * An eventfd that becomes readable when a tier has queued job results or
 * events since the manager last consumed them. An idle engine polls it
 * (with its own loop, or through [method@Kv.TieringManager.create_source])
 * and runs a step when it fires. The manager drains it when it consumes
 * results; do not read it yourself.
 *
 * Results are consumed at most once per step, at the step's first entry
 * point (as in vLLM). A completion that arrives after that waits for the
 * next step: an engine woken in the middle of a step ends it with
 * [method@Kv.TieringManager.on_schedule_end] and sees the results in the
 * next one.
 *
 * Returns: a file descriptor owned by the manager
 */
int
kv_tiering_manager_get_wakeup_fd (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), -1);
  return self->wakeup_fd;
}

/* Re-arm before the source's callback, so completions queued while it
 * runs wake the loop again instead of being lost. */
static void
rearm_wakeup (gpointer owner)
{
  kv_tiering_manager_clear_wakeup (KV_TIERING_MANAGER (owner));
}

/**
 * kv_tiering_manager_create_source:
 * @self: a manager
 *
 * Creates a #GSource that dispatches when a tier has completed work, for
 * engines that run a #GMainLoop: attach it to the owner thread's context
 * and set a callback (with g_source_set_callback()) that runs a scheduler
 * step. Nothing polls while nothing happens.
 *
 * Returns: (transfer full): a new source, not attached
 */
GSource *
kv_tiering_manager_create_source (KvTieringManager *self)
{
  g_return_val_if_fail (KV_IS_TIERING_MANAGER (self), NULL);

  return _kv_wakeup_source_new (G_OBJECT (self), self->wakeup_fd, rearm_wakeup,
                                "KvTieringManager wake-up");
}
