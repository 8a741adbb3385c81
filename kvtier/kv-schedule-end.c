/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-schedule-end.h"

/**
 * KvScheduleEnd:
 *
 * What happened in the scheduler step that is ending (vLLM's
 * `ScheduleEndContext`): the ids of the requests scheduled for the first
 * time in this step, and of the requests preempted in it. Handed to
 * [method@Kv.TieringManager.on_schedule_end] and on to every tier.
 *
 * Immutable and atomically reference counted; may be used from any thread.
 */
struct _KvScheduleEnd
{
  gatomicrefcount ref_count;
  GStrv new_request_ids;
  GStrv preempted_request_ids;
};

G_DEFINE_BOXED_TYPE (KvScheduleEnd, kv_schedule_end, kv_schedule_end_ref, kv_schedule_end_unref)

static GStrv
copy_strv (const char * const *strv)
{
  return strv != NULL ? g_strdupv ((char **) strv) : g_new0 (char *, 1);
}

/**
 * kv_schedule_end_new:
 * @new_request_ids: (array zero-terminated=1) (nullable): ids of the requests
 *   scheduled for the first time in this step, or %NULL for none
 * @preempted_request_ids: (array zero-terminated=1) (nullable): ids of the
 *   requests preempted in this step, or %NULL for none
 *
 * Creates the description of a step's end. Both lists are copied.
 *
 * May be called from any thread.
 *
 * Returns: (transfer full): a new step-end description
 */
KvScheduleEnd *
kv_schedule_end_new (const char * const *new_request_ids,
                     const char * const *preempted_request_ids)
{
  KvScheduleEnd *self = g_new0 (KvScheduleEnd, 1);

  g_atomic_ref_count_init (&self->ref_count);
  self->new_request_ids = copy_strv (new_request_ids);
  self->preempted_request_ids = copy_strv (preempted_request_ids);

  return self;
}

/**
 * kv_schedule_end_get_new_request_ids:
 * @self: a step-end description
 *
 * Gets the ids of the requests scheduled for the first time in this step.
 *
 * May be called from any thread.
 *
 * Returns: (array zero-terminated=1) (transfer none): the ids; empty, never
 *   %NULL, when there are none
 */
const char * const *
kv_schedule_end_get_new_request_ids (const KvScheduleEnd *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  return (const char * const *) self->new_request_ids;
}

/**
 * kv_schedule_end_get_preempted_request_ids:
 * @self: a step-end description
 *
 * Gets the ids of the requests preempted in this step.
 *
 * May be called from any thread.
 *
 * Returns: (array zero-terminated=1) (transfer none): the ids; empty, never
 *   %NULL, when there are none
 */
const char * const *
kv_schedule_end_get_preempted_request_ids (const KvScheduleEnd *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  return (const char * const *) self->preempted_request_ids;
}

/**
 * kv_schedule_end_ref:
 * @self: a step-end description
 *
 * Takes a reference on @self. Thread-safe.
 *
 * Returns: (transfer full): @self
 */
KvScheduleEnd *
kv_schedule_end_ref (KvScheduleEnd *self)
{
  g_return_val_if_fail (self != NULL, NULL);

  g_atomic_ref_count_inc (&self->ref_count);

  return self;
}

/**
 * kv_schedule_end_unref:
 * @self: (transfer full): a step-end description
 *
 * Drops a reference on @self, freeing it when the last one is gone.
 * Thread-safe.
 */
void
kv_schedule_end_unref (KvScheduleEnd *self)
{
  g_return_if_fail (self != NULL);

  if (g_atomic_ref_count_dec (&self->ref_count))
    {
      g_strfreev (self->new_request_ids);
      g_strfreev (self->preempted_request_ids);
      g_free (self);
    }
}
