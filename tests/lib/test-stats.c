/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-stats.h"

/**
 * test_stats_value:
 * @stats: a snapshot
 * @name: a counter or gauge family
 * @labels: (nullable): its label values
 *
 * Returns: the value of the series, or -1 when @stats does not have it
 */
gdouble
test_stats_value (KvStats            *stats,
                  const char         *name,
                  const char * const *labels)
{
  gdouble value = -1.0;

  if (!kv_stats_lookup (stats, name, labels, &value))
    return -1.0;
  return value;
}
