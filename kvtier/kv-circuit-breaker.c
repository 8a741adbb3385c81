/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-circuit-breaker.h"

#include "kv-enums.h"

/**
 * KvCircuitBreaker:
 *
 * Turns a tier that keeps failing into a fast miss, and lets it back in
 * once it answers again.
 *
 * The breaker starts %KV_CIRCUIT_STATE_CLOSED and counts failures in a
 * row ([method@Kv.CircuitBreaker.record_failure]; a success resets the
 * count). At [property@Kv.CircuitBreaker:failure-threshold] it opens:
 * [method@Kv.CircuitBreaker.allows_requests] answers %FALSE, and the
 * caller refuses work without touching the tier. Once
 * [property@Kv.CircuitBreaker:open-ms] have passed it may half-open:
 * [method@Kv.CircuitBreaker.start_probe] for a cheap health check whose
 * outcome [method@Kv.CircuitBreaker.end_probe] reports (requests stay
 * refused meanwhile), or [method@Kv.CircuitBreaker.half_open] to let
 * requests through until the first outcome. A healthy outcome closes the
 * breaker; a failure opens it for another interval.
 *
 * Every [class@Kv.SecondaryTier] owns one and applies it (see
 * [property@Kv.SecondaryTier:breaker-threshold]); a tier never needs to
 * call it itself. All methods are thread-safe; time comes from
 * [property@Kv.CircuitBreaker:clock].
 */
struct _KvCircuitBreaker
{
  GObject         parent_instance;

  KvClock        *clock;

  GMutex          lock;
  guint           failure_threshold;
  guint           open_ms;
  KvCircuitState  state;
  gboolean        probing;          /* HALF_OPEN: a probe decides */
  gint            gate;             /* (atomic) requests allowed: read per lookup */
  guint           n_failures;       /* in a row, while closed */
  gint64          opened_at;        /* clock µs */
  guint64         n_trips;
};

enum {
  PROP_0,
  PROP_FAILURE_THRESHOLD,
  PROP_OPEN_MS,
  PROP_CLOCK,
  PROP_STATE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (KvCircuitBreaker, kv_circuit_breaker, G_TYPE_OBJECT)

static void
kv_circuit_breaker_finalize (GObject *object)
{
  KvCircuitBreaker *self = KV_CIRCUIT_BREAKER (object);

  g_clear_object (&self->clock);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_circuit_breaker_parent_class)->finalize (object);
}

static void
kv_circuit_breaker_constructed (GObject *object)
{
  KvCircuitBreaker *self = KV_CIRCUIT_BREAKER (object);

  G_OBJECT_CLASS (kv_circuit_breaker_parent_class)->constructed (object);

  if (self->clock == NULL)
    self->clock = g_object_ref (kv_clock_get_default ());
}

static void
kv_circuit_breaker_get_property (GObject    *object,
                                 guint       prop_id,
                                 GValue     *value,
                                 GParamSpec *pspec)
{
  KvCircuitBreaker *self = KV_CIRCUIT_BREAKER (object);

  switch (prop_id)
    {
    case PROP_FAILURE_THRESHOLD:
      g_value_set_uint (value, kv_circuit_breaker_get_failure_threshold (self));
      break;
    case PROP_OPEN_MS:
      g_value_set_uint (value, kv_circuit_breaker_get_open_ms (self));
      break;
    case PROP_CLOCK:
      g_value_set_object (value, self->clock);
      break;
    case PROP_STATE:
      g_value_set_enum (value, kv_circuit_breaker_get_state (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_circuit_breaker_set_property (GObject      *object,
                                 guint         prop_id,
                                 const GValue *value,
                                 GParamSpec   *pspec)
{
  KvCircuitBreaker *self = KV_CIRCUIT_BREAKER (object);

  switch (prop_id)
    {
    case PROP_FAILURE_THRESHOLD:
      kv_circuit_breaker_set_failure_threshold (self, g_value_get_uint (value));
      break;
    case PROP_OPEN_MS:
      kv_circuit_breaker_set_open_ms (self, g_value_get_uint (value));
      break;
    case PROP_CLOCK:
      g_mutex_lock (&self->lock);
      g_set_object (&self->clock, g_value_get_object (value));
      if (self->clock == NULL)
        self->clock = g_object_ref (kv_clock_get_default ());
      g_mutex_unlock (&self->lock);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_circuit_breaker_class_init (KvCircuitBreakerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->constructed = kv_circuit_breaker_constructed;
  object_class->finalize = kv_circuit_breaker_finalize;
  object_class->get_property = kv_circuit_breaker_get_property;
  object_class->set_property = kv_circuit_breaker_set_property;

  /**
   * KvCircuitBreaker:failure-threshold:
   *
   * Failures in a row that open the breaker; 0 never opens it.
   */
  properties[PROP_FAILURE_THRESHOLD] =
    g_param_spec_uint ("failure-threshold", NULL, NULL, 0, G_MAXUINT, 5,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvCircuitBreaker:open-ms:
   *
   * How long the breaker stays open before a probe (or a trial request)
   * may close it, in milliseconds.
   */
  properties[PROP_OPEN_MS] =
    g_param_spec_uint ("open-ms", NULL, NULL, 0, G_MAXUINT, 1000,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT |
                       G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvCircuitBreaker:clock:
   *
   * The clock of the open interval; %NULL means
   * [func@Kv.Clock.get_default]. Tests pass a manual clock.
   */
  properties[PROP_CLOCK] =
    g_param_spec_object ("clock", NULL, NULL, KV_TYPE_CLOCK,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvCircuitBreaker:state:
   *
   * The current state. Not notified: it changes on whatever thread
   * records an outcome.
   */
  properties[PROP_STATE] =
    g_param_spec_enum ("state", NULL, NULL, KV_TYPE_CIRCUIT_STATE, KV_CIRCUIT_STATE_CLOSED,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_circuit_breaker_init (KvCircuitBreaker *self)
{
  g_mutex_init (&self->lock);
  self->failure_threshold = 5;
  self->open_ms = 1000;
  self->state = KV_CIRCUIT_STATE_CLOSED;
  self->gate = TRUE;
}

/* Lock held: after every change of state or probing. */
static void
update_gate_locked (KvCircuitBreaker *self)
{
  g_atomic_int_set (&self->gate,
                    self->state == KV_CIRCUIT_STATE_CLOSED ||
                    (self->state == KV_CIRCUIT_STATE_HALF_OPEN && !self->probing));
}

/**
 * kv_circuit_breaker_new:
 * @failure_threshold: failures in a row that open the breaker (0: never)
 * @open_ms: how long it stays open before a probe, in milliseconds
 * @clock: (nullable): the clock, or %NULL for the default one
 *
 * Creates a closed breaker.
 *
 * Returns: (transfer full): a new breaker
 */
KvCircuitBreaker *
kv_circuit_breaker_new (guint    failure_threshold,
                        guint    open_ms,
                        KvClock *clock)
{
  g_return_val_if_fail (clock == NULL || KV_IS_CLOCK (clock), NULL);

  return g_object_new (KV_TYPE_CIRCUIT_BREAKER,
                       "failure-threshold", failure_threshold,
                       "open-ms", open_ms,
                       "clock", clock,
                       NULL);
}

/* Lock held. */
static gboolean
interval_passed (KvCircuitBreaker *self)
{
  return kv_clock_get_time (self->clock) - self->opened_at >= (gint64) self->open_ms * 1000;
}

/* Lock held. */
static void
open_locked (KvCircuitBreaker *self)
{
  self->state = KV_CIRCUIT_STATE_OPEN;
  self->probing = FALSE;
  self->opened_at = kv_clock_get_time (self->clock);
  update_gate_locked (self);
}

/**
 * kv_circuit_breaker_get_state:
 * @self: a breaker
 *
 * Gets [property@Kv.CircuitBreaker:state]. Any thread.
 *
 * Returns: the state
 */
KvCircuitState
kv_circuit_breaker_get_state (KvCircuitBreaker *self)
{
  KvCircuitState state;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), KV_CIRCUIT_STATE_CLOSED);

  g_mutex_lock (&self->lock);
  state = self->state;
  g_mutex_unlock (&self->lock);
  return state;
}

/**
 * kv_circuit_breaker_allows_requests:
 * @self: a breaker
 *
 * Whether work may go to the tier now: when closed, and when half-open
 * without a probe in flight (the next outcome decides). Any thread.
 *
 * Returns: %FALSE while requests must be refused without calling the tier
 */
gboolean
kv_circuit_breaker_allows_requests (KvCircuitBreaker *self)
{
  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), TRUE);

  /* Lock-free: asked for every lookup of a tier. */
  return g_atomic_int_get (&self->gate);
}

/**
 * kv_circuit_breaker_start_probe:
 * @self: a breaker
 *
 * If the breaker is open and its interval has passed, half-opens it for a
 * probe: requests stay refused until [method@Kv.CircuitBreaker.end_probe].
 * Any thread.
 *
 * Returns: %TRUE if the caller must now run a probe and report it
 */
gboolean
kv_circuit_breaker_start_probe (KvCircuitBreaker *self)
{
  gboolean start = FALSE;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), FALSE);

  g_mutex_lock (&self->lock);
  if (self->state == KV_CIRCUIT_STATE_OPEN && interval_passed (self))
    {
      self->state = KV_CIRCUIT_STATE_HALF_OPEN;
      self->probing = TRUE;
      update_gate_locked (self);
      start = TRUE;
    }
  g_mutex_unlock (&self->lock);
  return start;
}

/**
 * kv_circuit_breaker_half_open:
 * @self: a breaker
 *
 * If the breaker is open and its interval has passed, half-opens it
 * without a probe: requests go through, and the next outcome recorded
 * closes or reopens it. For tiers that have no cheap health check. Any
 * thread.
 *
 * Returns: %TRUE if the breaker is now half-open
 */
gboolean
kv_circuit_breaker_half_open (KvCircuitBreaker *self)
{
  gboolean changed = FALSE;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), FALSE);

  g_mutex_lock (&self->lock);
  if (self->state == KV_CIRCUIT_STATE_OPEN && interval_passed (self))
    {
      self->state = KV_CIRCUIT_STATE_HALF_OPEN;
      self->probing = FALSE;
      update_gate_locked (self);
      changed = TRUE;
    }
  g_mutex_unlock (&self->lock);
  return changed;
}

/**
 * kv_circuit_breaker_end_probe:
 * @self: a breaker
 * @healthy: whether the probe succeeded
 *
 * Reports the probe started by [method@Kv.CircuitBreaker.start_probe]: a
 * healthy one closes the breaker, a failed one (or one past its
 * deadline) opens it for another interval. Ignored when no probe is in
 * flight. Any thread.
 */
void
kv_circuit_breaker_end_probe (KvCircuitBreaker *self,
                              gboolean          healthy)
{
  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  if (self->state == KV_CIRCUIT_STATE_HALF_OPEN && self->probing)
    {
      if (healthy)
        {
          self->state = KV_CIRCUIT_STATE_CLOSED;
          self->probing = FALSE;
          self->n_failures = 0;
          update_gate_locked (self);
        }
      else
        open_locked (self);
    }
  g_mutex_unlock (&self->lock);
}

/**
 * kv_circuit_breaker_record_success:
 * @self: a breaker
 *
 * Records a job the tier did: resets the failure count when closed, and
 * closes a breaker half-open without a probe. Ignored when open or
 * probing (a job started before the breaker opened says nothing about
 * now). Any thread.
 */
void
kv_circuit_breaker_record_success (KvCircuitBreaker *self)
{
  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  if (self->state == KV_CIRCUIT_STATE_CLOSED ||
      (self->state == KV_CIRCUIT_STATE_HALF_OPEN && !self->probing))
    {
      self->state = KV_CIRCUIT_STATE_CLOSED;
      self->n_failures = 0;
      update_gate_locked (self);
    }
  g_mutex_unlock (&self->lock);
}

/**
 * kv_circuit_breaker_record_failure:
 * @self: a breaker
 *
 * Records a failure of the tier itself (an I/O error, a job past its
 * deadline; not a chunk that was missing). The one that reaches
 * [property@Kv.CircuitBreaker:failure-threshold] opens the breaker; a
 * failure while half-open without a probe opens it again. Any thread.
 */
void
kv_circuit_breaker_record_failure (KvCircuitBreaker *self)
{
  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  switch (self->state)
    {
    case KV_CIRCUIT_STATE_CLOSED:
      self->n_failures++;
      if (self->failure_threshold > 0 && self->n_failures >= self->failure_threshold)
        {
          open_locked (self);
          self->n_trips++;
          g_message ("Circuit breaker opened after %u failures in a row", self->n_failures);
        }
      break;
    case KV_CIRCUIT_STATE_HALF_OPEN:
      if (!self->probing)
        open_locked (self);
      break;
    case KV_CIRCUIT_STATE_OPEN:
    default:
      break;
    }
  g_mutex_unlock (&self->lock);
}

/**
 * kv_circuit_breaker_get_failure_threshold:
 * @self: a breaker
 *
 * Gets [property@Kv.CircuitBreaker:failure-threshold].
 *
 * Returns: the threshold
 */
guint
kv_circuit_breaker_get_failure_threshold (KvCircuitBreaker *self)
{
  guint value;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), 0);

  g_mutex_lock (&self->lock);
  value = self->failure_threshold;
  g_mutex_unlock (&self->lock);
  return value;
}

/**
 * kv_circuit_breaker_set_failure_threshold:
 * @self: a breaker
 * @failure_threshold: failures in a row that open the breaker (0: never)
 *
 * Sets [property@Kv.CircuitBreaker:failure-threshold].
 */
void
kv_circuit_breaker_set_failure_threshold (KvCircuitBreaker *self,
                                          guint             failure_threshold)
{
  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  self->failure_threshold = failure_threshold;
  g_mutex_unlock (&self->lock);
}

/**
 * kv_circuit_breaker_get_open_ms:
 * @self: a breaker
 *
 * Gets [property@Kv.CircuitBreaker:open-ms].
 *
 * Returns: the open interval in milliseconds
 */
guint
kv_circuit_breaker_get_open_ms (KvCircuitBreaker *self)
{
  guint value;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), 0);

  g_mutex_lock (&self->lock);
  value = self->open_ms;
  g_mutex_unlock (&self->lock);
  return value;
}

/**
 * kv_circuit_breaker_set_open_ms:
 * @self: a breaker
 * @open_ms: the open interval in milliseconds
 *
 * Sets [property@Kv.CircuitBreaker:open-ms].
 */
void
kv_circuit_breaker_set_open_ms (KvCircuitBreaker *self,
                                guint             open_ms)
{
  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  self->open_ms = open_ms;
  g_mutex_unlock (&self->lock);
}

/**
 * kv_circuit_breaker_get_n_trips:
 * @self: a breaker
 *
 * Counts the times the breaker opened from closed.
 *
 * Returns: the number of trips
 */
guint64
kv_circuit_breaker_get_n_trips (KvCircuitBreaker *self)
{
  guint64 value;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), 0);

  g_mutex_lock (&self->lock);
  value = self->n_trips;
  g_mutex_unlock (&self->lock);
  return value;
}
