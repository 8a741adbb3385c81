/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-event.h"
#include "kv-job-result.h"

G_BEGIN_DECLS

/* What a secondary tier reports, on its way to the manager: the results
 * of its jobs and the events of its storage. Filled from any thread
 * (kv_secondary_tier_complete_job(), push_event(), the failures of
 * deadlines), drained on the owner thread (the default get_finished_jobs()
 * and take_events()). After a push it calls the function the manager
 * installed (which makes its wake-up fd readable), with no lock held, and
 * counts the calls running so that the function can be replaced safely.
 *
 * One lock of its own, never held while calling out. */

typedef struct _KvResultQueue KvResultQueue;

typedef void (*KvResultQueueFunc) (gpointer user_data);

G_GNUC_INTERNAL
KvResultQueue *_kv_result_queue_new           (void);
G_GNUC_INTERNAL
void           _kv_result_queue_free          (KvResultQueue     *self);

/* Any thread. Queues @result (transfer full); with @notify, calls the
 * installed function afterwards. */
G_GNUC_INTERNAL
void           _kv_result_queue_push          (KvResultQueue     *self,
                                               KvJobResult       *result,
                                               gboolean           notify);
/* Any thread. Queues @event (transfer none) and calls the function. */
G_GNUC_INTERNAL
void           _kv_result_queue_push_event    (KvResultQueue     *self,
                                               KvEvent           *event);
/* Any thread. Calls the function without queuing anything (news the
 * manager reads elsewhere: held slots released). */
G_GNUC_INTERNAL
void           _kv_result_queue_notify        (KvResultQueue     *self);

/* Owner thread. The queued results (events), oldest first, in a
 * NULL-terminated array (transfer full), possibly empty. Lock-free and
 * allocation-free but for the array when the queue is empty. */
G_GNUC_INTERNAL
KvJobResult  **_kv_result_queue_take          (KvResultQueue     *self);
G_GNUC_INTERNAL
KvEvent      **_kv_result_queue_take_events   (KvResultQueue     *self);

/* Any thread, lock-free: whether results are queued. */
G_GNUC_INTERNAL
gboolean       _kv_result_queue_has_results   (KvResultQueue     *self);

/* Owner thread. Installs @func (NULL: none); waits for the calls of the
 * previous function that other threads are making, so that its user_data
 * may be freed once this returns. Not from inside the function. */
G_GNUC_INTERNAL
void           _kv_result_queue_set_func      (KvResultQueue     *self,
                                               KvResultQueueFunc  func,
                                               gpointer           user_data);

G_END_DECLS
