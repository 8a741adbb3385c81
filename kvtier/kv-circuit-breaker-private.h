/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-circuit-breaker.h"

G_BEGIN_DECLS

/* Records a failure; its cause (for the message of an opening) is
 * @fallback unless one was given since the last success. Any thread. */
void _kv_circuit_breaker_record_failure_or (KvCircuitBreaker *self,
                                            const char       *fallback);

G_END_DECLS
