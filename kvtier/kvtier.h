/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#define KVTIER_INSIDE

#include "kv-version-macros.h"
#include "kv-types.h"
#include "kv-enums.h"

#include "kv-arc-policy.h"
#include "kv-async-lookup.h"
#include "kv-backpressure-detector.h"
#include "kv-backpressure-policy.h"
#include "kv-cache-policy.h"
#include "kv-circuit-breaker.h"
#include "kv-clock.h"
#include "kv-config.h"
#include "kv-connector.h"
#include "kv-device.h"
#include "kv-drop-store-policy.h"
#include "kv-ema-backpressure-detector.h"
#include "kv-event.h"
#include "kv-host-buffer.h"
#include "kv-host-device.h"
#include "kv-job-result.h"
#include "kv-key.h"
#include "kv-lru-policy.h"
#include "kv-metric-registry.h"
#include "kv-parent-manager.h"
#include "kv-plugin.h"
#include "kv-prefix-lookup.h"
#include "kv-prepare-store-result.h"
#include "kv-primary-tier.h"
#include "kv-request.h"
#include "kv-schedule-end.h"
#include "kv-secondary-tier.h"
#include "kv-stats.h"
#include "kv-throttled-drop-policy.h"
#include "kv-tier-filter.h"
#include "kv-tier-registry.h"
#include "kv-tiering-manager.h"
#include "kv-transfer-job.h"

#undef KVTIER_INSIDE
