/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The redis tier (plugins/redis, linked statically) as its tests make it:
 * on the servers of test-redis-server.h, with any property set. */

#include <kvtier.h>

#include "kv-redis-tier.h"

G_BEGIN_DECLS

/* A small chunk: tests move many of them on 2 cores. */
#define REDIS_TEST_SLOT 8192

KvRedisTier    *redis_test_tier_new_valist (KvHostBuffer  *buffer,
                                            const char    *servers,
                                            GError       **error,
                                            const char    *first_property,
                                            va_list        args);
KvRedisTier    *redis_test_tier_new_full   (KvHostBuffer  *buffer,
                                            const char    *servers,
                                            GError       **error,
                                            const char    *first_property,
                                            ...);
KvRedisTier    *redis_test_tier_new        (KvHostBuffer  *buffer,
                                            const char    *servers,
                                            const char    *first_property,
                                            ...);
void            redis_test_tier_free       (KvRedisTier   *tier);
KvLookupResult  redis_test_lookup          (KvRedisTier   *tier,
                                            KvKey         *key);

G_END_DECLS
