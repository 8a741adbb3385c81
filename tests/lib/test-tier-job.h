/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One job straight to a tier, waited for: what a tier's own tests do to
 * store or load a few chunks without a manager. */

#include <kvtier.h>

G_BEGIN_DECLS

KvJobResult *test_tier_run_job (gpointer        tier,
                                guint64         id,
                                gboolean        is_load,
                                KvKey * const  *keys,
                                const guint32  *slots,
                                guint           n,
                                KvRequest      *request);

G_END_DECLS
