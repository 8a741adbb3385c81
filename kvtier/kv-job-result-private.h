/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-job-result.h"
#include "kv-transfer-job.h"

G_BEGIN_DECLS

/* Whether @result, reported for the load @job, follows the partial-load
 * rule (see KvJobResult): its successful keys, if any, are keys of @job in
 * the job's order without repeats, all of them exactly when it succeeded
 * and fewer when it failed. When it does not, *@why (if given) says how.
 * Any thread. */
G_GNUC_INTERNAL
gboolean _kv_job_result_follows_load_rule (const KvJobResult  *result,
                                           KvTransferJob      *job,
                                           const char        **why);

G_END_DECLS
