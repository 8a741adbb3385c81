/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#define KVTIER_INSIDE

#include "kv-version-macros.h"
#include "kv-types.h"
#include "kv-enums.h"

#include "kv-arc-policy.h"
#include "kv-backpressure-detector.h"
#include "kv-backpressure-policy.h"
#include "kv-cache-policy.h"
#include "kv-clock.h"
#include "kv-event.h"
#include "kv-host-buffer.h"
#include "kv-job-result.h"
#include "kv-key.h"
#include "kv-lru-policy.h"
#include "kv-parent-manager.h"
#include "kv-prepare-store-result.h"
#include "kv-primary-tier.h"
#include "kv-request.h"
#include "kv-schedule-end.h"
#include "kv-secondary-tier.h"
#include "kv-tier-filter.h"
#include "kv-tier-registry.h"
#include "kv-transfer-job.h"
#include "kv-tiering-manager.h"
/* @issue-4-headers@ (backpressure implementations, async lookup, metrics) */
#include "kv-async-lookup.h"
#include "kv-drop-store-policy.h"
#include "kv-ema-backpressure-detector.h"
#include "kv-metric-registry.h"
#include "kv-stats.h"
#include "kv-throttled-drop-policy.h"
/* @issue-6-headers@ (device, host device, config) */
#include "kv-device.h"
#include "kv-host-device.h"
#include "kv-config.h"
/* issue 12 */
#include "kv-circuit-breaker.h"
/* issue 12: the engine-facing connector */
#include "kv-prefix-lookup.h"
#include "kv-connector.h"
#include "kv-configurable.h"

#undef KVTIER_INSIDE
