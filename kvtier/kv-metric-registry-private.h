/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-metric-registry.h"

G_BEGIN_DECLS

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
