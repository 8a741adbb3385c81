/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-metric-registry.h"

G_BEGIN_DECLS

/* kvtier's own families (doc/metrics.md; vLLM's are in
 * kv-tiering-metrics-private.h). Counters are named without the `_total`
 * the exposition adds. */

/* Every KvSecondaryTier (kv_secondary_tier_get_stats()), label "tier". */
#define KV_METRIC_TIER_DEADLINE_FAILURES     "kvtier_tier_deadline_failures"
#define KV_METRIC_TIER_LATE_COMPLETIONS      "kvtier_tier_late_completions"
#define KV_METRIC_TIER_BREAKER_REJECTED_JOBS "kvtier_tier_breaker_rejected_jobs"
#define KV_METRIC_TIER_BREAKER_OPENINGS      "kvtier_tier_breaker_openings"
#define KV_METRIC_TIER_BREAKER_OPEN          "kvtier_tier_breaker_open"

/* KvConnector (kv_connector_get_stats()). The first two are vLLM's
 * offloading connector's, labelled "transfer_type". */
#define KV_METRIC_CONNECTOR_BYTES            "vllm:kv_offload_total_bytes"
#define KV_METRIC_CONNECTOR_TIME             "vllm:kv_offload_total_time"
#define KV_METRIC_CONNECTOR_FAILURES         "kvtier_connector_transfer_failures"
#define KV_METRIC_CONNECTOR_HITS             "kvtier_connector_chunk_hits"
#define KV_METRIC_CONNECTOR_COMPUTED         "kvtier_connector_computed_chunks"
#define KV_METRIC_CONNECTOR_REFUSED          "kvtier_connector_refused_store_chunks"
#define KV_METRIC_CONNECTOR_MANAGER_TIME     "kvtier_connector_manager_seconds"
#define KV_METRIC_CONNECTOR_MANAGER_LOOKUPS  "kvtier_connector_manager_lookups"
#define KV_METRIC_CONNECTOR_STEPS            "kvtier_connector_steps"

typedef struct
{
  KvMetricKind  kind;
  char         *name;
  char         *documentation;
  char        **label_names;
  guint         n_labels;
  gdouble      *buckets;       /* finite upper bounds; +Inf implied */
  guint         n_buckets;
} KvMetricDefinition;

const KvMetricDefinition *kv_metric_registry_lookup_definition (KvMetricRegistry *self,
                                                                const char       *name);
const KvMetricDefinition *kv_metric_registry_get_definition    (KvMetricRegistry *self,
                                                                guint             index);
const char               *kv_metric_registry_kind_to_string   (KvMetricKind      kind);

G_END_DECLS
