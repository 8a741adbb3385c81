/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-clock.h"
#include "kv-version-macros.h"

G_BEGIN_DECLS

/**
 * KvCircuitState:
 * @KV_CIRCUIT_STATE_CLOSED: the tier is healthy: requests go through and
 *   failures are counted.
 * @KV_CIRCUIT_STATE_OPEN: the tier failed too often: requests are refused
 *   without calling it until the open interval has passed.
 * @KV_CIRCUIT_STATE_HALF_OPEN: the open interval has passed and a probe
 *   (or, for a tier without one, the next job) decides whether the
 *   breaker closes or opens again.
 *
 * The state of a [class@Kv.CircuitBreaker].
 */
typedef enum {
  KV_CIRCUIT_STATE_CLOSED,
  KV_CIRCUIT_STATE_OPEN,
  KV_CIRCUIT_STATE_HALF_OPEN,
} KvCircuitState;

#define KV_TYPE_CIRCUIT_BREAKER (kv_circuit_breaker_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_FINAL_TYPE (KvCircuitBreaker, kv_circuit_breaker, KV, CIRCUIT_BREAKER, GObject)

KVTIER_AVAILABLE_IN_ALL
KvCircuitBreaker *kv_circuit_breaker_new                (guint             failure_threshold,
                                                         guint             open_ms,
                                                         KvClock          *clock);
KVTIER_AVAILABLE_IN_ALL
KvCircuitState    kv_circuit_breaker_get_state          (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
gboolean          kv_circuit_breaker_allows_requests    (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
gboolean          kv_circuit_breaker_start_probe        (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
gboolean          kv_circuit_breaker_half_open          (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_end_probe          (KvCircuitBreaker *self,
                                                         gboolean          healthy);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_record_success     (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_record_failure     (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_record_error       (KvCircuitBreaker *self,
                                                         const char       *cause);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_set_cause          (KvCircuitBreaker *self,
                                                         const char       *cause);
KVTIER_AVAILABLE_IN_ALL
char             *kv_circuit_breaker_dup_last_cause     (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_set_name           (KvCircuitBreaker *self,
                                                         const char       *name);
KVTIER_AVAILABLE_IN_ALL
char             *kv_circuit_breaker_dup_name           (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
guint             kv_circuit_breaker_get_failure_threshold (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_set_failure_threshold (KvCircuitBreaker *self,
                                                            guint             failure_threshold);
KVTIER_AVAILABLE_IN_ALL
guint             kv_circuit_breaker_get_open_ms        (KvCircuitBreaker *self);
KVTIER_AVAILABLE_IN_ALL
void              kv_circuit_breaker_set_open_ms        (KvCircuitBreaker *self,
                                                         guint             open_ms);
KVTIER_AVAILABLE_IN_ALL
guint64           kv_circuit_breaker_get_n_trips        (KvCircuitBreaker *self);

G_END_DECLS
