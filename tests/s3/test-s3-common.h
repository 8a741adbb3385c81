/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Shared by the s3 tests: the one gateway a test program starts (and
 * shares between its cases), clients on it, buckets. */

#include <string.h>

#include <gio/gio.h>

#include "kv-s3-client.h"
#include "s3-gateway.h"

static S3Gateway *s3_test_gateway;
static char *s3_test_gateway_missing;

/* Starts the program's gateway; FALSE when the ceph packages are not
 * installed (the cases that need it then skip, saying why). */
G_GNUC_UNUSED static gboolean
s3_test_start_gateway (void)
{
  g_autoptr(GError) error = NULL;

  s3_test_gateway_missing = s3_gateway_missing ();
  if (s3_test_gateway_missing != NULL)
    {
      g_print ("# no gateway: %s\n", s3_test_gateway_missing);
      return FALSE;
    }
  s3_test_gateway = s3_gateway_start (&error);
  if (s3_test_gateway == NULL)
    g_error ("The test gateway did not start: %s", error->message);
  g_print ("# Ceph RADOS Gateway at %s, started in %.1f s\n", s3_test_gateway->endpoint,
           s3_test_gateway->start_seconds);
  return TRUE;
}

G_GNUC_UNUSED static void
s3_test_stop_gateway (void)
{
  g_clear_pointer (&s3_test_gateway, s3_gateway_free);
  g_clear_pointer (&s3_test_gateway_missing, g_free);
}

/* At the start of a case that needs the gateway. */
G_GNUC_UNUSED static gboolean
s3_test_skip_without_gateway (void)
{
  if (s3_test_gateway != NULL)
    return FALSE;
  g_test_skip (s3_test_gateway_missing);
  return TRUE;
}

/* The gateway's settings for @bucket, defaults for the rest. */
G_GNUC_UNUSED static KvS3ClientConfig
s3_test_config (const char *bucket)
{
  KvS3ClientConfig config = {
    .endpoint = s3_test_gateway != NULL ? s3_test_gateway->endpoint : NULL,
    .bucket = bucket,
    .region = "us-east-1",
    .addressing = KV_S3_ADDRESSING_PATH,
    .access_key = s3_test_gateway != NULL ? s3_test_gateway->access_key : "AKTEST",
    .secret_key = s3_test_gateway != NULL ? s3_test_gateway->secret_key : "SKTEST",
    .max_connections = 8,
    .connect_timeout_ms = 2000,
    .reply_timeout_ms = 10000,
    .max_attempts = 4,
    .retry_base_ms = 20,
  };

  return config;
}

G_GNUC_UNUSED static KvS3Client *
s3_test_client_new (const KvS3ClientConfig *config)
{
  g_autoptr(GError) error = NULL;
  KvS3Client *client = kv_s3_client_new (config, &error);

  g_assert_no_error (error);
  g_assert_nonnull (client);
  return client;
}

G_GNUC_UNUSED static void
s3_test_client_free (KvS3Client *client)
{
  if (client == NULL)
    return;
  kv_s3_client_shutdown (client);
  g_object_unref (client);
}

/* Runs one request of @method on @key and returns its outcome; the op's
 * error, if any, in @error. */
G_GNUC_UNUSED static KvS3Outcome
s3_test_request (KvS3Client    *client,
                 KvS3Method     method,
                 const char    *key,
                 const guint8  *body,
                 gsize          body_len,
                 guint8        *dest,
                 gsize          dest_len,
                 GError       **error)
{
  KvS3Op op;
  KvS3Outcome outcome;

  kv_s3_op_init (&op, method, key);
  op.body[0] = body;
  op.body_len[0] = body_len;
  op.dest[0] = dest;
  op.dest_len[0] = dest_len;
  kv_s3_client_run (client, &op);
  outcome = op.outcome;
  if (op.error != NULL)
    g_propagate_error (error, g_steal_pointer (&op.error));
  kv_s3_op_clear (&op);
  return outcome;
}

/* Makes @bucket on the gateway (a PUT of the bucket). */
G_GNUC_UNUSED static void
s3_test_create_bucket (const char *bucket)
{
  KvS3ClientConfig config = s3_test_config (bucket);
  KvS3Client *client = s3_test_client_new (&config);
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_PUT, NULL, NULL, 0, NULL, 0, &error),
                   ==, KV_S3_OP_OK);
  g_assert_no_error (error);
  s3_test_client_free (client);
}

#ifdef S3_TEST_TIER
#include <gobject/gvaluecollector.h>
#include <kvtier.h>

#include "kv-s3-tier.h"

/* A tier on the gateway's @bucket (its keys, path style) with
 * @first_property... (NULL-terminated) set too; NULL with @error set when
 * it does not start. */
G_GNUC_UNUSED static KvS3Tier *
s3_test_tier_new_valist (KvHostBuffer  *buffer,
                         const char    *bucket,
                         GError       **error,
                         const char    *first_property,
                         va_list        args)
{
  GObjectClass *klass = g_type_class_ref (KV_TYPE_S3_TIER);
  const char *names[40];
  GValue values[40] = { G_VALUE_INIT, };
  GObject *object;
  guint n = 0;

#define SET_STRING(name_, value_) \
  G_STMT_START { \
    names[n] = name_; \
    g_value_init (&values[n], G_TYPE_STRING); \
    g_value_set_string (&values[n++], value_); \
  } G_STMT_END
  SET_STRING ("tier-type", "s3");
  names[n] = "primary";
  g_value_init (&values[n], KV_TYPE_HOST_BUFFER);
  g_value_set_object (&values[n++], buffer);
  SET_STRING ("bucket", bucket);
  if (s3_test_gateway != NULL)
    {
      SET_STRING ("endpoint", s3_test_gateway->endpoint);
      SET_STRING ("access-key", s3_test_gateway->access_key);
      SET_STRING ("secret-key", s3_test_gateway->secret_key);
    }
#undef SET_STRING
  for (const char *name = first_property; name != NULL; name = va_arg (args, const char *))
    {
      GParamSpec *pspec = g_object_class_find_property (klass, name);
      g_autofree char *message = NULL;
      guint at = n;

      g_assert_nonnull (pspec);
      /* a later value of a name replaces the default above */
      for (guint i = 0; i < n; i++)
        if (strcmp (names[i], name) == 0)
          {
            at = i;
            g_value_unset (&values[i]);
          }
      g_assert_cmpuint (at, <, G_N_ELEMENTS (names));
      names[at] = name;
      G_VALUE_COLLECT_INIT (&values[at], pspec->value_type, args, 0, &message);
      g_assert_null (message);
      if (at == n)
        n++;
    }
  object = g_object_new_with_properties (KV_TYPE_S3_TIER, n, names, values);
  if (!g_initable_init (G_INITABLE (object), NULL, error))
    g_clear_object (&object);
  for (guint i = 0; i < n; i++)
    g_value_unset (&values[i]);
  g_type_class_unref (klass);
  return (KvS3Tier *) object;
}

G_GNUC_UNUSED static KvS3Tier *
s3_test_tier_new_full (KvHostBuffer  *buffer,
                       const char    *bucket,
                       GError       **error,
                       const char    *first_property,
                       ...)
{
  KvS3Tier *tier;
  va_list args;

  va_start (args, first_property);
  tier = s3_test_tier_new_valist (buffer, bucket, error, first_property, args);
  va_end (args);
  return tier;
}

G_GNUC_UNUSED static KvS3Tier *
s3_test_tier_new (KvHostBuffer *buffer,
                  const char   *bucket,
                  const char   *first_property,
                  ...)
{
  g_autoptr(GError) error = NULL;
  KvS3Tier *tier;
  va_list args;

  va_start (args, first_property);
  tier = s3_test_tier_new_valist (buffer, bucket, &error, first_property, args);
  va_end (args);
  g_assert_no_error (error);
  g_assert_nonnull (tier);
  return tier;
}

G_GNUC_UNUSED static void
s3_test_tier_free (KvS3Tier *tier)
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

/* Asks the tier until it knows (RETRY: asked, not answered yet). */
G_GNUC_UNUSED static KvLookupResult
s3_test_lookup (KvS3Tier *tier,
                KvKey    *key)
{
  g_autoptr(KvRequest) request = kv_request_new ("lookup", NULL);
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  gint64 deadline = g_get_monotonic_time () + 20 * G_USEC_PER_SEC;
  KvLookupResult r;

  while ((r = kv_secondary_tier_lookup (st, key, request)) == KV_LOOKUP_RESULT_RETRY)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      kv_secondary_tier_on_schedule_end (st, end);
      g_usleep (1000);
    }
  kv_secondary_tier_on_request_finished (st, request);
  return r;
}
#endif /* S3_TEST_TIER */
