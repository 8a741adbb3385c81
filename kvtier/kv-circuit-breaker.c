/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-circuit-breaker.h"
#include "kv-circuit-breaker-private.h"

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
 *
 * Each opening and each closing is logged (a `g_message()` in the
 * `Kvtier` domain), naming what the breaker guards
 * ([property@Kv.CircuitBreaker:name]) and the cause of its last failure
 * ([method@Kv.CircuitBreaker.record_error]):
 *
 * ```
 * tier 1:redis: circuit breaker opened after 5 failures in a row (last: …); work is refused for 1000 ms, then retried
 * tier 1:redis: circuit breaker closed after 3.2 s open: a probe succeeded
 * ```
 *
 * A breaker that flaps is logged at most once every 30 s: an opening
 * within 30 s of the last one logged is not logged, nor is its closing,
 * and the next line logged says how many openings it left out (an opening
 * left out is logged late, at the next failure after the 30 s, if the
 * breaker is still open then), so that the lines add up to
 * [method@Kv.CircuitBreaker.get_n_trips].
 */

/* The shortest time between two logged openings of one breaker. */
#define LOG_INTERVAL_US (30 * G_USEC_PER_SEC)
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

  /* messages */
  char           *name;
  char           *last_cause;       /* of the last failure recorded */
  gboolean        logged_open;      /* the last line logged said "opened" */
  gboolean        ever_logged;
  gint64          logged_open_at;   /* clock µs of the last "opened" line */
  guint64         unlogged_trips;   /* openings not logged yet */
};

enum {
  PROP_0,
  PROP_FAILURE_THRESHOLD,
  PROP_OPEN_MS,
  PROP_CLOCK,
  PROP_STATE,
  PROP_NAME,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (KvCircuitBreaker, kv_circuit_breaker, G_TYPE_OBJECT)

static void
kv_circuit_breaker_finalize (GObject *object)
{
  KvCircuitBreaker *self = KV_CIRCUIT_BREAKER (object);

  g_clear_object (&self->clock);
  g_free (self->name);
  g_free (self->last_cause);
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
    case PROP_NAME:
      g_value_take_string (value, kv_circuit_breaker_dup_name (self));
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
    case PROP_NAME:
      kv_circuit_breaker_set_name (self, g_value_get_string (value));
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

  /**
   * KvCircuitBreaker:name:
   *
   * What the breaker guards, as its messages name it: `tier 1:redis`,
   * `redis tier 1:redis, server 10.0.0.5:6379`. %NULL (the default)
   * logs as `circuit breaker`.
   */
  properties[PROP_NAME] =
    g_param_spec_string ("name", NULL, NULL, NULL,
                         G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

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

/* Lock held: the line to log (after unlocking) for an opening, now or
 * left out from earlier, or NULL when it must not be logged yet. */
static char *
open_message_locked (KvCircuitBreaker *self,
                     gboolean          tripped)
{
  gint64 now = kv_clock_get_time (self->clock);
  GString *line;

  if (tripped)
    self->unlogged_trips++;
  if (self->logged_open || self->unlogged_trips == 0 ||
      (self->ever_logged && now - self->logged_open_at < LOG_INTERVAL_US))
    return NULL;

  line = g_string_new (NULL);
  g_string_append_printf (line, "%s: circuit breaker opened",
                          self->name != NULL ? self->name : "circuit breaker");
  if (tripped)
    g_string_append_printf (line, " after %u failures in a row", self->n_failures);
  g_string_append_printf (line, " (last: %s)",
                          self->last_cause != NULL ? self->last_cause : "no cause given");
  if (self->unlogged_trips > 1)
    g_string_append_printf (line, "; %" G_GUINT64_FORMAT " openings in all since the last "
                            "message (it flaps)", self->unlogged_trips);
  g_string_append_printf (line, "; work is refused for %u ms, then retried", self->open_ms);
  self->logged_open = TRUE;
  self->ever_logged = TRUE;
  self->logged_open_at = now;
  self->unlogged_trips = 0;
  return g_string_free (line, FALSE);
}

/* Lock held: the line to log for a closing, or NULL when its opening was
 * not logged. */
static char *
close_message_locked (KvCircuitBreaker *self,
                      const char       *how)
{
  gint64 open_us = kv_clock_get_time (self->clock) - self->logged_open_at;

  if (!self->logged_open)
    return NULL;
  self->logged_open = FALSE;
  return g_strdup_printf ("%s: circuit breaker closed after %.1f s: %s",
                          self->name != NULL ? self->name : "circuit breaker",
                          MAX (open_us, 0) / 1e6, how);
}

static void
log_line (char *line)
{
  if (line != NULL)
    g_message ("%s", line);
  g_free (line);
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
  char *line = NULL;

  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  if (self->state == KV_CIRCUIT_STATE_HALF_OPEN && self->probing)
    {
      if (healthy)
        {
          self->state = KV_CIRCUIT_STATE_CLOSED;
          self->probing = FALSE;
          self->n_failures = 0;
          g_clear_pointer (&self->last_cause, g_free);
          update_gate_locked (self);
          line = close_message_locked (self, "a probe succeeded");
        }
      else
        {
          open_locked (self);
          line = open_message_locked (self, FALSE);
        }
    }
  g_mutex_unlock (&self->lock);
  log_line (line);
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
  char *line = NULL;

  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  if (self->state == KV_CIRCUIT_STATE_CLOSED ||
      (self->state == KV_CIRCUIT_STATE_HALF_OPEN && !self->probing))
    {
      if (self->state == KV_CIRCUIT_STATE_HALF_OPEN)
        line = close_message_locked (self, "a request succeeded");
      self->state = KV_CIRCUIT_STATE_CLOSED;
      self->n_failures = 0;
      /* the cause of a later opening is that of its own failures */
      g_clear_pointer (&self->last_cause, g_free);
      update_gate_locked (self);
    }
  g_mutex_unlock (&self->lock);
  log_line (line);
}

/* Lock held for everything; @cause (nullable) replaces the last one. */
static char *
record_failure_locked (KvCircuitBreaker *self,
                       const char       *cause)
{
  if (cause != NULL)
    {
      g_free (self->last_cause);
      self->last_cause = g_strdup (cause);
    }

  switch (self->state)
    {
    case KV_CIRCUIT_STATE_CLOSED:
      self->n_failures++;
      if (self->failure_threshold > 0 && self->n_failures >= self->failure_threshold)
        {
          open_locked (self);
          self->n_trips++;
          return open_message_locked (self, TRUE);
        }
      return NULL;
    case KV_CIRCUIT_STATE_HALF_OPEN:
      if (!self->probing)
        open_locked (self);
      return open_message_locked (self, FALSE);
    case KV_CIRCUIT_STATE_OPEN:
    default:
      /* an opening left out earlier, now that the interval has passed */
      return open_message_locked (self, FALSE);
    }
}

/**
 * kv_circuit_breaker_record_failure:
 * @self: a breaker
 *
 * Records a failure of the tier itself (an I/O error, a job past its
 * deadline; not a chunk that was missing). The one that reaches
 * [property@Kv.CircuitBreaker:failure-threshold] opens the breaker; a
 * failure while half-open without a probe opens it again. Any thread.
 * [method@Kv.CircuitBreaker.record_error] also names the cause.
 */
void
kv_circuit_breaker_record_failure (KvCircuitBreaker *self)
{
  char *line;

  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  line = record_failure_locked (self, NULL);
  g_mutex_unlock (&self->lock);
  log_line (line);
}

/**
 * kv_circuit_breaker_record_error:
 * @self: a breaker
 * @cause: what failed, as a message names it ("Could not connect to
 *   10.0.0.5:6379: Connection refused")
 *
 * Records a failure as [method@Kv.CircuitBreaker.record_failure] does,
 * and keeps @cause: the message logged when the breaker opens names the
 * cause of the last failure recorded. Any thread.
 */
void
kv_circuit_breaker_record_error (KvCircuitBreaker *self,
                                 const char       *cause)
{
  char *line;

  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));
  g_return_if_fail (cause != NULL);

  g_mutex_lock (&self->lock);
  line = record_failure_locked (self, cause);
  g_mutex_unlock (&self->lock);
  log_line (line);
}

/* A failure whose cause is @fallback unless a cause was given since the
 * last success (kv_circuit_breaker_set_cause() by the tier). */
void
_kv_circuit_breaker_record_failure_or (KvCircuitBreaker *self,
                                       const char       *fallback)
{
  char *line;

  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  line = record_failure_locked (self, self->last_cause == NULL ? fallback : NULL);
  g_mutex_unlock (&self->lock);
  log_line (line);
}

/**
 * kv_circuit_breaker_set_cause:
 * @self: a breaker
 * @cause: what failed last
 *
 * Keeps @cause as the cause of the next failure recorded without one
 * (for a caller whose failures are recorded elsewhere, such as a tier
 * whose failed jobs the base class records). Any thread.
 */
void
kv_circuit_breaker_set_cause (KvCircuitBreaker *self,
                              const char       *cause)
{
  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));
  g_return_if_fail (cause != NULL);

  g_mutex_lock (&self->lock);
  g_free (self->last_cause);
  self->last_cause = g_strdup (cause);
  g_mutex_unlock (&self->lock);
}

/**
 * kv_circuit_breaker_dup_last_cause:
 * @self: a breaker
 *
 * Gets the cause of the last failure recorded with one. Any thread.
 *
 * Returns: (transfer full) (nullable): the cause, or %NULL if none was given
 */
char *
kv_circuit_breaker_dup_last_cause (KvCircuitBreaker *self)
{
  char *cause;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), NULL);

  g_mutex_lock (&self->lock);
  cause = g_strdup (self->last_cause);
  g_mutex_unlock (&self->lock);
  return cause;
}

/**
 * kv_circuit_breaker_set_name:
 * @self: a breaker
 * @name: (nullable): what the breaker guards, as messages name it
 *
 * Sets [property@Kv.CircuitBreaker:name]. Any thread.
 */
void
kv_circuit_breaker_set_name (KvCircuitBreaker *self,
                             const char       *name)
{
  gboolean changed;

  g_return_if_fail (KV_IS_CIRCUIT_BREAKER (self));

  g_mutex_lock (&self->lock);
  changed = g_strcmp0 (self->name, name) != 0;
  if (changed)
    {
      g_free (self->name);
      self->name = g_strdup (name);
    }
  g_mutex_unlock (&self->lock);
  if (changed)
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_NAME]);
}

/**
 * kv_circuit_breaker_dup_name:
 * @self: a breaker
 *
 * Gets [property@Kv.CircuitBreaker:name]. Any thread.
 *
 * Returns: (transfer full) (nullable): the name
 */
char *
kv_circuit_breaker_dup_name (KvCircuitBreaker *self)
{
  char *name;

  g_return_val_if_fail (KV_IS_CIRCUIT_BREAKER (self), NULL);

  g_mutex_lock (&self->lock);
  name = g_strdup (self->name);
  g_mutex_unlock (&self->lock);
  return name;
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
