/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-clock.h"

/**
 * KvClock:
 *
 * A source of time in microseconds, so that time-dependent behaviour
 * (back-pressure latencies, idle decay, deadlines) can be tested without
 * sleeping.
 *
 * The default clock ([func@Kv.Clock.get_default]) follows
 * g_get_monotonic_time(). A manual clock ([ctor@Kv.Clock.new_manual]) only
 * moves when told to with [method@Kv.Clock.set_time] or
 * [method@Kv.Clock.advance].
 *
 * Reading a clock is thread-safe and lock-free, so tiers' worker threads may
 * read the clock their manager uses; manual clocks may also be moved from
 * any thread.
 */
struct _KvClock
{
  GObject parent_instance;

  gboolean manual;
  gint64 start_us;
  gint64 time_us; /* manual clocks only; accessed atomically */
};

enum {
  PROP_0,
  PROP_MANUAL,
  PROP_START_TIME,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (KvClock, kv_clock, G_TYPE_OBJECT)

static void
kv_clock_get_property (GObject    *object,
                       guint       prop_id,
                       GValue     *value,
                       GParamSpec *pspec)
{
  KvClock *self = KV_CLOCK (object);

  switch (prop_id)
    {
    case PROP_MANUAL:
      g_value_set_boolean (value, self->manual);
      break;
    case PROP_START_TIME:
      g_value_set_int64 (value, self->start_us);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_clock_set_property (GObject      *object,
                       guint         prop_id,
                       const GValue *value,
                       GParamSpec   *pspec)
{
  KvClock *self = KV_CLOCK (object);

  switch (prop_id)
    {
    case PROP_MANUAL:
      self->manual = g_value_get_boolean (value);
      break;
    case PROP_START_TIME:
      self->start_us = g_value_get_int64 (value);
      __atomic_store_n (&self->time_us, self->start_us, __ATOMIC_RELEASE);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_clock_class_init (KvClockClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->get_property = kv_clock_get_property;
  object_class->set_property = kv_clock_set_property;

  /**
   * KvClock:manual:
   *
   * Whether the clock only moves when told to. A clock that is not manual
   * follows g_get_monotonic_time().
   */
  properties[PROP_MANUAL] =
    g_param_spec_boolean ("manual", NULL, NULL,
                          FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvClock:start-time:
   *
   * The time of a manual clock when it was created, in microseconds.
   * Ignored by clocks that are not manual.
   */
  properties[PROP_START_TIME] =
    g_param_spec_int64 ("start-time", NULL, NULL,
                        G_MININT64, G_MAXINT64, 0,
                        G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                        G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_clock_init (KvClock *self)
{
}

/**
 * kv_clock_get_default:
 *
 * Gets the process-wide clock that follows g_get_monotonic_time(). It
 * cannot be set or advanced.
 *
 * May be called from any thread.
 *
 * Returns: (transfer none): the default clock
 */
KvClock *
kv_clock_get_default (void)
{
  static KvClock *clock = NULL;

  if (g_once_init_enter (&clock))
    g_once_init_leave (&clock, g_object_new (KV_TYPE_CLOCK, NULL));

  return clock;
}

/**
 * kv_clock_new_manual:
 * @start_us: the initial time, in microseconds
 *
 * Creates a clock that stands still until it is set or advanced. Tests use
 * it to make time-dependent behaviour deterministic.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new manual clock
 */
KvClock *
kv_clock_new_manual (gint64 start_us)
{
  return g_object_new (KV_TYPE_CLOCK,
                       "manual", TRUE,
                       "start-time", start_us,
                       NULL);
}

/**
 * kv_clock_get_time:
 * @self: a clock
 *
 * Gets the current time of the clock.
 *
 * May be called from any thread.
 *
 * Returns: the time in microseconds
 */
gint64
kv_clock_get_time (KvClock *self)
{
  g_return_val_if_fail (KV_IS_CLOCK (self), 0);

  if (!self->manual)
    return g_get_monotonic_time ();

  return __atomic_load_n (&self->time_us, __ATOMIC_ACQUIRE);
}

/**
 * kv_clock_is_manual:
 * @self: a clock
 *
 * Gets whether the clock only moves when told to.
 *
 * May be called from any thread.
 *
 * Returns: %TRUE for a manual clock
 */
gboolean
kv_clock_is_manual (KvClock *self)
{
  g_return_val_if_fail (KV_IS_CLOCK (self), FALSE);

  return self->manual;
}

/**
 * kv_clock_set_time:
 * @self: a manual clock
 * @time_us: the new time, in microseconds
 *
 * Sets the time of a manual clock. It may go backwards; code that reads the
 * clock treats time as monotonic, so tests should only move it forwards
 * unless they test exactly that.
 *
 * May be called from any thread.
 */
void
kv_clock_set_time (KvClock *self,
                   gint64   time_us)
{
  g_return_if_fail (KV_IS_CLOCK (self));
  g_return_if_fail (self->manual);

  __atomic_store_n (&self->time_us, time_us, __ATOMIC_RELEASE);
}

/**
 * kv_clock_advance:
 * @self: a manual clock
 * @delta_us: how far to move the clock, in microseconds
 *
 * Moves a manual clock by @delta_us. Concurrent advances from several
 * threads all take effect.
 *
 * May be called from any thread.
 */
void
kv_clock_advance (KvClock *self,
                  gint64   delta_us)
{
  g_return_if_fail (KV_IS_CLOCK (self));
  g_return_if_fail (self->manual);

  __atomic_add_fetch (&self->time_us, delta_us, __ATOMIC_ACQ_REL);
}
