/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-key.h"

G_BEGIN_DECLS

#define KV_TYPE_JOB_RESULT (kv_job_result_get_type ())

typedef struct _KvJobResult KvJobResult;

KVTIER_AVAILABLE_IN_ALL
GType          kv_job_result_get_type           (void) G_GNUC_CONST;
KVTIER_AVAILABLE_IN_ALL
KvJobResult   *kv_job_result_new                (guint64        job_id,
                                                 gboolean       success);
KVTIER_AVAILABLE_IN_ALL
KvJobResult   *kv_job_result_ref                (KvJobResult   *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_job_result_unref              (KvJobResult   *self);
KVTIER_AVAILABLE_IN_ALL
guint64        kv_job_result_get_job_id         (const KvJobResult *self);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_job_result_get_success        (const KvJobResult *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_job_result_set_successful_keys (KvJobResult  *self,
                                                 KvKey * const *keys,
                                                 guint          n_keys);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_job_result_has_successful_keys (const KvJobResult *self);
KVTIER_AVAILABLE_IN_ALL
KvKey * const *kv_job_result_get_successful_keys (const KvJobResult *self,
                                                 guint         *n_keys);
KVTIER_AVAILABLE_IN_ALL
void           kv_job_result_set_transfer_time  (KvJobResult   *self,
                                                 gdouble        seconds);
KVTIER_AVAILABLE_IN_ALL
gdouble        kv_job_result_get_transfer_time  (const KvJobResult *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_job_result_set_transfer_bytes (KvJobResult   *self,
                                                 gint64         bytes);
KVTIER_AVAILABLE_IN_ALL
gint64         kv_job_result_get_transfer_bytes (const KvJobResult *self);
KVTIER_AVAILABLE_IN_ALL
void           kv_job_result_set_checksum_failed (KvJobResult  *self,
                                                 gboolean       checksum_failed);
KVTIER_AVAILABLE_IN_ALL
gboolean       kv_job_result_get_checksum_failed (const KvJobResult *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (KvJobResult, kv_job_result_unref)

G_END_DECLS
