/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"
#include "kv-request.h"

G_BEGIN_DECLS

#define KV_TYPE_TRANSFER_JOB (kv_transfer_job_get_type ())

typedef struct _KvTransferJob KvTransferJob;

KVTIER_AVAILABLE_IN_ALL
GType          kv_transfer_job_get_type        (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvTransferJob *kv_transfer_job_new             (guint64          id,
                                                KvKey * const   *keys,
                                                const guint32   *chunk_ids,
                                                guint            n_keys,
                                                gboolean         is_promotion,
                                                KvRequest       *request);
KVTIER_AVAILABLE_IN_ALL
KvTransferJob *kv_transfer_job_ref             (KvTransferJob   *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_transfer_job_unref           (KvTransferJob   *self);
KVTIER_AVAILABLE_IN_ALL
guint64        kv_transfer_job_get_id          (const KvTransferJob *self);
KVTIER_AVAILABLE_IN_ALL
guint          kv_transfer_job_get_n_keys      (const KvTransferJob *self);
KVTIER_AVAILABLE_IN_ALL
KvKey * const *kv_transfer_job_get_keys        (const KvTransferJob *self,
                                                guint           *n_keys);
KVTIER_AVAILABLE_IN_ALL
KvKey         *kv_transfer_job_get_key         (const KvTransferJob *self,
                                                guint            index);
KVTIER_AVAILABLE_IN_ALL
const guint32 *kv_transfer_job_get_chunk_ids   (const KvTransferJob *self,
                                                guint           *n_chunk_ids);
KVTIER_AVAILABLE_IN_ALL
guint32        kv_transfer_job_get_chunk_id    (const KvTransferJob *self,
                                                guint            index);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_transfer_job_is_promotion    (const KvTransferJob *self);
KVTIER_AVAILABLE_IN_ALL
KvRequest     *kv_transfer_job_get_request     (const KvTransferJob *self);
KVTIER_AVAILABLE_IN_ALL
gint64         kv_transfer_job_get_submit_time (const KvTransferJob *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_transfer_job_set_submit_time (KvTransferJob   *self,
                                                gint64           submit_time_us);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvTransferJob, kv_transfer_job_unref)

G_END_DECLS
