/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-result-queue-private.h"

struct _KvResultQueue
{
  GMutex             lock;
  GCond              calls_cond;
  GPtrArray         *results;       /* (element-type KvJobResult) */
  GPtrArray         *events;        /* (element-type KvEvent) */
  KvResultQueueFunc  func;
  gpointer           user_data;
  guint              n_calls;       /* calls of func running now */
  gint               n_results;     /* (atomic) results->len */
  gint               n_events;      /* (atomic) events->len */
};

KvResultQueue *
_kv_result_queue_new (void)
{
  KvResultQueue *self = g_new0 (KvResultQueue, 1);

  g_mutex_init (&self->lock);
  g_cond_init (&self->calls_cond);
  self->results = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_job_result_unref);
  self->events = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_event_unref);
  return self;
}

void
_kv_result_queue_free (KvResultQueue *self)
{
  if (self == NULL)
    return;
  g_ptr_array_unref (self->results);
  g_ptr_array_unref (self->events);
  g_cond_clear (&self->calls_cond);
  g_mutex_clear (&self->lock);
  g_free (self);
}

/* Lock held: takes a call of the function (see call_func()). */
static KvResultQueueFunc
take_func_locked (KvResultQueue *self,
                  gpointer      *user_data)
{
  *user_data = self->user_data;
  if (self->func != NULL)
    self->n_calls++;
  return self->func;
}

/* No lock held: calls @func taken by take_func_locked(). */
static void
call_func (KvResultQueue     *self,
           KvResultQueueFunc  func,
           gpointer           user_data)
{
  if (func == NULL)
    return;

  func (user_data);

  g_mutex_lock (&self->lock);
  if (--self->n_calls == 0)
    g_cond_broadcast (&self->calls_cond);
  g_mutex_unlock (&self->lock);
}

void
_kv_result_queue_push (KvResultQueue *self,
                       KvJobResult   *result,
                       gboolean       notify)
{
  KvResultQueueFunc func = NULL;
  gpointer user_data = NULL;

  g_mutex_lock (&self->lock);
  g_ptr_array_add (self->results, result);
  g_atomic_int_set (&self->n_results, self->results->len);
  if (notify)
    func = take_func_locked (self, &user_data);
  g_mutex_unlock (&self->lock);

  call_func (self, func, user_data);
}

void
_kv_result_queue_push_event (KvResultQueue *self,
                             KvEvent       *event)
{
  KvResultQueueFunc func;
  gpointer user_data;

  g_mutex_lock (&self->lock);
  g_ptr_array_add (self->events, kv_event_ref (event));
  g_atomic_int_set (&self->n_events, self->events->len);
  func = take_func_locked (self, &user_data);
  g_mutex_unlock (&self->lock);

  call_func (self, func, user_data);
}

void
_kv_result_queue_notify (KvResultQueue *self)
{
  KvResultQueueFunc func;
  gpointer user_data;

  g_mutex_lock (&self->lock);
  func = take_func_locked (self, &user_data);
  g_mutex_unlock (&self->lock);

  call_func (self, func, user_data);
}

/* Swaps @queue for a fresh array (made outside the lock, so that workers
 * never wait on malloc) and hands its items out NULL-terminated. */
static gpointer *
take_queue (KvResultQueue   *self,
            GPtrArray      **queue,
            gint            *n_items,
            GDestroyNotify   free_func)
{
  GPtrArray *fresh;
  GPtrArray *taken;

  if (g_atomic_int_get (n_items) == 0)
    return g_new0 (gpointer, 1);

  fresh = g_ptr_array_new_with_free_func (free_func);
  g_mutex_lock (&self->lock);
  taken = *queue;
  *queue = fresh;
  g_atomic_int_set (n_items, 0);
  g_mutex_unlock (&self->lock);

  g_ptr_array_set_free_func (taken, NULL);
  g_ptr_array_add (taken, NULL);
  return g_ptr_array_free (taken, FALSE);
}

KvJobResult **
_kv_result_queue_take (KvResultQueue *self)
{
  return (KvJobResult **) take_queue (self, &self->results, &self->n_results,
                                      (GDestroyNotify) kv_job_result_unref);
}

KvEvent **
_kv_result_queue_take_events (KvResultQueue *self)
{
  return (KvEvent **) take_queue (self, &self->events, &self->n_events,
                                  (GDestroyNotify) kv_event_unref);
}

gboolean
_kv_result_queue_has_results (KvResultQueue *self)
{
  return g_atomic_int_get (&self->n_results) > 0;
}

void
_kv_result_queue_set_func (KvResultQueue     *self,
                           KvResultQueueFunc  func,
                           gpointer           user_data)
{
  g_mutex_lock (&self->lock);
  self->func = func;
  self->user_data = user_data;
  while (self->n_calls > 0)
    g_cond_wait (&self->calls_cond, &self->lock);
  g_mutex_unlock (&self->lock);
}
