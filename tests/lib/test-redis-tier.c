/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-redis-tier.h"

#include <gobject/gvaluecollector.h>

#include "test-object.h"

/* A tier on @servers with @first_property... (NULL-terminated) set too;
 * NULL with @error set when it does not start. */
KvRedisTier *
redis_test_tier_new_valist (KvHostBuffer  *buffer,
                            const char    *servers,
                            GError       **error,
                            const char    *first_property,
                            va_list        args)
{
  g_autoptr(TestProperties) props = test_properties_new (KV_TYPE_REDIS_TIER);

  test_properties_set (props, "tier-type", G_TYPE_STRING, "redis");
  test_properties_set (props, "primary", KV_TYPE_HOST_BUFFER, buffer);
  test_properties_set (props, "servers", G_TYPE_STRING, servers);
  test_properties_collect (props, first_property, args);
  return (KvRedisTier *) test_properties_new_initable (props, error);
}

KvRedisTier *
redis_test_tier_new_full (KvHostBuffer  *buffer,
                          const char    *servers,
                          GError       **error,
                          const char    *first_property,
                          ...)
{
  KvRedisTier *tier;
  va_list args;

  va_start (args, first_property);
  tier = redis_test_tier_new_valist (buffer, servers, error, first_property, args);
  va_end (args);
  return tier;
}

KvRedisTier *
redis_test_tier_new (KvHostBuffer *buffer,
                     const char   *servers,
                     const char   *first_property,
                     ...)
{
  g_autoptr(GError) error = NULL;
  KvRedisTier *tier;
  va_list args;

  va_start (args, first_property);
  tier = redis_test_tier_new_valist (buffer, servers, &error, first_property, args);
  va_end (args);
  g_assert_no_error (error);
  g_assert_nonnull (tier);
  return tier;
}

/* Shuts the tier down and drops it, checking that nothing else held it. */
void
redis_test_tier_free (KvRedisTier *tier)
{
  g_autoptr(GError) error = NULL;

  if (tier == NULL)
    return;
  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (tier), &error));
  g_assert_no_error (error);
  g_object_add_weak_pointer (G_OBJECT (tier), (gpointer *) &tier);
  g_object_unref (tier);
  g_assert_null (tier);
}

/* Asks the tier until it knows (RETRY means: asked, not answered yet). */
KvLookupResult
redis_test_lookup (KvRedisTier *tier,
                   KvKey       *key)
{
  g_autoptr(KvRequest) request = kv_request_new ("lookup", NULL);
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  KvLookupResult r;
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while ((r = kv_secondary_tier_lookup (st, key, request)) == KV_LOOKUP_RESULT_RETRY)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      kv_secondary_tier_on_schedule_end (st, end);
      g_usleep (1000);
    }
  kv_secondary_tier_on_request_finished (st, request);
  return r;
}
