/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <sys/stat.h>

#include <glib/gstdio.h>

#define S3_TEST_TIER
#include "test-s3-common.h"

#include "kv-chunk-format.h"
#include "kv-chunk-name.h"
#include "s3-fake-server.h"
#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-manager-stack.h"
#include "test-tier-job.h"

/* The s3 tier against the real Ceph RADOS Gateway (one per run of this
 * program): byte-exact round trips at 64 KiB, 256 KiB and 2 MiB chunks,
 * the object keys and records, partial and failed loads, six kinds of
 * damaged objects (detected, deleted, counted, never loaded), wrong
 * credentials and a missing bucket refused at construction, credentials
 * from the environment and a credentials file, `[tier s3]` checked
 * without network, events, two managers sharing the bucket, a store past
 * its deadline, a trickling server, and the gateway killed by its PID in
 * the middle of a run and started again. */

#define BUCKET "kvtier-tier"

static char *test_dir;

typedef struct
{
  KvHostBuffer *buffer;
  KvS3Tier     *tier;
  KvKey        *keys[16];
  gsize         slot_size;
  char         *namespace_;
} Fixture;

static guint64 next_job_id = 1;

/* Each case its own namespace: its objects are its own. */
static void
setup (Fixture       *f,
       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;

  f->slot_size = data != NULL ? GPOINTER_TO_SIZE (data) : 64 * 1024;
  f->buffer = kv_host_buffer_new (8, f->slot_size, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = test_chunk_key (i);
  f->namespace_ = g_strdup_printf ("%s-%" G_GSIZE_FORMAT, g_test_get_path (), f->slot_size);
}

static void
setup_tier (Fixture       *f,
            gconstpointer  data)
{
  setup (f, data);
  if (s3_test_gateway != NULL)
    f->tier = s3_test_tier_new (f->buffer, BUCKET, "namespace", f->namespace_, NULL);
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  s3_test_tier_free (f->tier);
  g_clear_object (&f->buffer);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
  g_free (f->namespace_);
}

static guint8 *
slot (Fixture *f,
      guint32  i)
{
  return kv_host_buffer_peek_slot (f->buffer, i);
}

static KvJobResult *
run_job (KvS3Tier      *tier,
         gboolean       is_load,
         KvKey * const *keys,
         const guint32 *slots,
         guint          n)
{
  g_autoptr(KvRequest) request = kv_request_new ("req", NULL);

  return test_tier_run_job (tier, next_job_id++, is_load, keys, slots, n, request);
}

/* Stores chunks first.. from slots 0.. filled with their bytes; @carried:
 * the slots carry their checksums (as after a device copy). */
static KvJobResult *
store_with (Fixture  *f,
            KvS3Tier *tier,
            guint     first,
            guint     n,
            gboolean  carried)
{
  guint32 slots[8];

  g_assert_cmpuint (n, <=, 8);
  for (guint i = 0; i < n; i++)
    {
      slots[i] = i;
      test_chunk_fill (slot (f, i), f->slot_size, first + i);
      if (carried)
        kv_host_buffer_set_slot_checksum (f->buffer, i, kv_chunk_checksum (slot (f, i), f->slot_size));
      else
        kv_host_buffer_clear_slot_checksum (f->buffer, i);
    }
  return run_job (tier, FALSE, &f->keys[first], slots, n);
}

static void
store_ok (Fixture *f,
          guint    first,
          guint    n)
{
  g_autoptr(KvJobResult) result = store_with (f, f->tier, first, n, TRUE);

  g_assert_true (kv_job_result_get_success (result));
}

/* Loads keys[first..first+n) into slots 8-n.. (other slots than the
 * store's, cleared first). */
static KvJobResult *
load_with (Fixture  *f,
           KvS3Tier *tier,
           guint     first,
           guint     n)
{
  guint32 slots[8];

  for (guint i = 0; i < n; i++)
    {
      slots[i] = 8 - n + i;
      memset (slot (f, slots[i]), 0, f->slot_size);
      kv_host_buffer_clear_slot_checksum (f->buffer, slots[i]);
    }
  return run_job (tier, TRUE, &f->keys[first], slots, n);
}

/* The gateway's raw view of an object (the tier's client is not used). */
static KvS3Client *
raw_client (void)
{
  KvS3ClientConfig config = s3_test_config (BUCKET);

  return s3_test_client_new (&config);
}

static gboolean
raw_get (KvS3Client *client,
         const char *key,
         guint8     *dest,
         gsize       len)
{
  g_autoptr(GError) error = NULL;

  return s3_test_request (client, KV_S3_METHOD_GET, key, NULL, 0, dest, len, &error) == KV_S3_OP_OK;
}

static void
raw_put (KvS3Client   *client,
         const char   *key,
         const guint8 *data,
         gsize         len)
{
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_PUT, key, data, len, NULL, 0, &error),
                   ==, KV_S3_OP_OK);
  g_assert_no_error (error);
}

static gboolean
raw_exists (KvS3Client *client,
            const char *key)
{
  g_autoptr(GError) error = NULL;
  KvS3Outcome outcome = s3_test_request (client, KV_S3_METHOD_HEAD, key, NULL, 0, NULL, 0, &error);

  g_assert_true (outcome == KV_S3_OP_OK || outcome == KV_S3_OP_NOT_FOUND);
  return outcome == KV_S3_OP_OK;
}

static void
raw_delete (KvS3Client *client,
            const char *key)
{
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (s3_test_request (client, KV_S3_METHOD_DELETE, key, NULL, 0, NULL, 0, &error),
                   ==, KV_S3_OP_OK);
  g_assert_no_error (error);
}

static guint64
n_requests (KvS3Tier *tier)
{
  return kv_s3_tier_get_counter (tier, KV_S3_COUNTER_REQUESTS);
}

/* Looks @key up and checks the answer and the requests it sent: 0 when
 * the index answered, 1 (its HEAD) otherwise. A HEAD that finds the chunk
 * indexes it: the lookup asked again after it (RETRY until then) may be
 * answered by the index. */
static void
assert_lookup (KvS3Tier       *tier,
               KvKey          *key,
               KvLookupResult  expected,
               guint64         expected_requests)
{
  guint64 before = n_requests (tier);
  guint64 hits = kv_s3_tier_get_counter (tier, KV_S3_COUNTER_INDEX_HITS);

  g_assert_cmpint (s3_test_lookup (tier, key), ==, expected);
  g_assert_cmpuint (n_requests (tier) - before, ==, expected_requests);
  hits = kv_s3_tier_get_counter (tier, KV_S3_COUNTER_INDEX_HITS) - hits;
  if (expected_requests == 0)
    g_assert_cmpuint (hits, ==, 1);
  else if (expected == KV_LOOKUP_RESULT_MISS)
    g_assert_cmpuint (hits, ==, 0);
}

/* ---- round trips --------------------------------------------------------- */

static void
test_round_trip (Fixture       *f,
                 gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvJobResult) stored_plain = NULL;
  g_autoptr(KvJobResult) loaded_plain = NULL;
  KvS3Client *raw;
  g_autofree char *name = NULL;
  g_autofree guint8 *object = NULL;
  guint n_keys = 0;

  if (s3_test_skip_without_gateway ())
    return;
  /* carried checksums: the header is encoded without hashing the slot */
  stored = store_with (f, f->tier, 0, 3, TRUE);
  g_assert_true (kv_job_result_get_success (stored));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (stored), ==, 3 * f->slot_size);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (s3_test_lookup (f->tier, f->keys[i]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (s3_test_lookup (f->tier, f->keys[3]), ==, KV_LOOKUP_RESULT_MISS);

  loaded = load_with (f, f->tier, 0, 3);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_null (kv_job_result_get_successful_keys (loaded, &n_keys));
  for (guint i = 0; i < 3; i++)
    {
      guint64 checksum = 0;

      g_assert_true (test_chunk_check (slot (f, 5 + i), f->slot_size, i));
      /* verified, so the slot carries its checksum for the next store */
      g_assert_true (kv_host_buffer_get_slot_checksum (f->buffer, 5 + i, &checksum));
      g_assert_cmpuint (checksum, ==, kv_chunk_checksum (slot (f, 5 + i), f->slot_size));
    }

  /* no carried checksum: the tier hashes the slot itself */
  stored_plain = store_with (f, f->tier, 3, 2, FALSE);
  g_assert_true (kv_job_result_get_success (stored_plain));
  loaded_plain = load_with (f, f->tier, 3, 2);
  g_assert_true (kv_job_result_get_success (loaded_plain));
  g_assert_true (test_chunk_check (slot (f, 6), f->slot_size, 3));
  g_assert_true (test_chunk_check (slot (f, 7), f->slot_size, 4));

  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_STORED_CHUNKS), ==, 5);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_LOADED_CHUNKS), ==, 5);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_BYTES_WRITTEN), ==,
                    5 * (KV_CHUNK_HEADER_SIZE + f->slot_size));
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_RETRIES), ==, 0);

  /* the object: <prefix>/<namespace digest>/<hash hex>_g<group>, holding
   * the chunk record */
  name = kv_s3_tier_get_object_key (f->tier, f->keys[1]);
  {
    guint8 digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
    gsize hash_len = 0;
    const guint8 *hash = kv_key_get_hash (f->keys[1], &hash_len);
    g_autoptr(GString) expected = g_string_new ("kvtier/");

    kv_chunk_namespace_digest (f->namespace_, f->slot_size, digest);
    for (guint i = 0; i < sizeof digest; i++)
      g_string_append_printf (expected, "%02x", digest[i]);
    g_string_append_c (expected, '/');
    for (gsize i = 0; i < hash_len; i++)
      g_string_append_printf (expected, "%02x", hash[i]);
    g_string_append_printf (expected, "_g%u", kv_key_get_group (f->keys[1]));
    g_assert_cmpstr (name, ==, expected->str);
  }
  raw = raw_client ();
  object = g_malloc (KV_CHUNK_HEADER_SIZE + f->slot_size);
  g_assert_true (raw_get (raw, name, object, KV_CHUNK_HEADER_SIZE + f->slot_size));
  {
    guint8 digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];

    kv_chunk_namespace_digest (f->namespace_, f->slot_size, digest);
    g_assert_cmpint (kv_chunk_check (object, KV_CHUNK_HEADER_SIZE, object + KV_CHUNK_HEADER_SIZE,
                                     f->slot_size, f->slot_size, digest, f->keys[1], TRUE),
                     ==, KV_CHUNK_CHECK_OK);
    g_assert_true (test_chunk_check (object + KV_CHUNK_HEADER_SIZE, f->slot_size, 1));
  }
  s3_test_client_free (raw);
}

/* ---- partial and failed loads -------------------------------------------- */

static void
test_partial_load (Fixture       *f,
                   gconstpointer  data)
{
  g_autoptr(KvJobResult) first = NULL;
  g_autoptr(KvJobResult) last = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  guint32 slots[4] = { 4, 5, 6, 7 };
  KvKey * const *landed;
  guint n_landed = 0;

  if (s3_test_skip_without_gateway ())
    return;
  /* keys 0, 1 and 3 stored, 2 never */
  first = store_with (f, f->tier, 0, 2, TRUE);
  g_assert_true (kv_job_result_get_success (first));
  last = store_with (f, f->tier, 3, 1, TRUE);
  g_assert_true (kv_job_result_get_success (last));
  for (guint i = 0; i < 4; i++)
    memset (slot (f, slots[i]), 0, f->slot_size);
  loaded = run_job (f->tier, TRUE, f->keys, slots, 4);
  g_assert_false (kv_job_result_get_success (loaded));
  /* every landed key, in the job's order */
  landed = kv_job_result_get_successful_keys (loaded, &n_landed);
  g_assert_cmpuint (n_landed, ==, 3);
  g_assert_true (kv_key_equal (landed[0], f->keys[0]));
  g_assert_true (kv_key_equal (landed[1], f->keys[1]));
  g_assert_true (kv_key_equal (landed[2], f->keys[3]));
  g_assert_true (test_chunk_check (slot (f, 4), f->slot_size, 0));
  g_assert_true (test_chunk_check (slot (f, 5), f->slot_size, 1));
  g_assert_true (test_chunk_check (slot (f, 7), f->slot_size, 3));
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_MISSING_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_CORRUPT_CHUNKS), ==, 0);
  /* a missing key is the data's failure: the breaker does not count it */
  g_assert_true (kv_circuit_breaker_allows_requests (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (f->tier))));
}

static void
test_failed_load (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvJobResult) loaded = NULL;
  guint n_landed = 0;

  if (s3_test_skip_without_gateway ())
    return;
  loaded = load_with (f, f->tier, 5, 2);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_null (kv_job_result_get_successful_keys (loaded, &n_landed));
  g_assert_cmpuint (n_landed, ==, 0);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_MISSING_CHUNKS), ==, 2);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_LOAD_FAILURES), ==, 2);
}

/* ---- damaged objects ----------------------------------------------------- */

typedef enum {
  DAMAGE_PAYLOAD,
  DAMAGE_HEADER,
  DAMAGE_TRUNCATED,
  DAMAGE_LONGER,
  DAMAGE_OTHER_KEY,
  DAMAGE_NAMESPACE,
} Damage;

typedef struct
{
  Damage      damage;
  KvChunkCheck check;      /* what the load must find */
} DamageCase;

static const DamageCase damage_cases[] = {
  { DAMAGE_PAYLOAD, KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM },
  { DAMAGE_HEADER, KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM },
  { DAMAGE_TRUNCATED, KV_CHUNK_CHECK_SHORT },
  { DAMAGE_LONGER, KV_CHUNK_CHECK_WRONG_LENGTH },
  { DAMAGE_OTHER_KEY, KV_CHUNK_CHECK_WRONG_KEY },
  { DAMAGE_NAMESPACE, KV_CHUNK_CHECK_WRONG_NAMESPACE },
};

static void
test_damaged_object (Fixture       *f,
                     gconstpointer  data)
{
  const DamageCase *c = NULL;
  gsize object_size = KV_CHUNK_HEADER_SIZE + f->slot_size;
  g_autofree guint8 *object = g_malloc (object_size + 4096);
  g_autofree char *name = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(GPtrArray) events = NULL;
  KvS3Client *raw;
  gsize len = object_size;
  gint64 end;

  if (s3_test_skip_without_gateway ())
    return;
  for (guint i = 0; i < G_N_ELEMENTS (damage_cases); i++)
    if (g_str_has_suffix (g_test_get_path (), (const char *[]) { "payload", "header", "truncated",
                                                                  "longer", "other-key",
                                                                  "namespace" }[i]))
      c = &damage_cases[i];
  g_assert_nonnull (c);

  stored = store_with (f, f->tier, 0, 2, TRUE);
  g_assert_true (kv_job_result_get_success (stored));
  raw = raw_client ();
  name = kv_s3_tier_get_object_key (f->tier, f->keys[0]);
  g_assert_true (raw_get (raw, name, object, object_size));
  switch (c->damage)
    {
    case DAMAGE_PAYLOAD:
      object[KV_CHUNK_HEADER_SIZE + f->slot_size / 2] ^= 0x01;
      break;
    case DAMAGE_HEADER:
      object[KV_CHUNK_OFF_CREATED] ^= 0x80;
      break;
    case DAMAGE_TRUNCATED:
      len = object_size - 100;
      break;
    case DAMAGE_LONGER:
      memset (object + object_size, 0, 4096);
      len = object_size + 4096;
      break;
    case DAMAGE_OTHER_KEY:
      {
        g_autofree char *other = kv_s3_tier_get_object_key (f->tier, f->keys[1]);

        g_assert_true (raw_get (raw, other, object, object_size));
      }
      break;
    case DAMAGE_NAMESPACE:
      {
        /* the same key stored by a tier of another namespace, its object
         * copied under this namespace's name */
        g_autoptr(KvS3Tier) other_tier = s3_test_tier_new (f->buffer, BUCKET, "namespace", "elsewhere", NULL);
        g_autoptr(KvJobResult) other_stored = store_with (f, other_tier, 0, 1, TRUE);
        g_autofree char *other = kv_s3_tier_get_object_key (other_tier, f->keys[0]);

        g_assert_true (kv_job_result_get_success (other_stored));
        g_assert_true (raw_get (raw, other, object, object_size));
        g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (other_tier), NULL));
      }
      break;
    default:
      g_assert_not_reached ();
    }
  raw_put (raw, name, object, len);

  /* a lookup says HIT for an object of the right length only */
  if (c->damage != DAMAGE_TRUNCATED && c->damage != DAMAGE_LONGER)
    g_assert_cmpint (s3_test_lookup (f->tier, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  /* found for what it is, and said so once */
  {
    g_autofree char *pattern = g_strdup_printf ("s3 tier: The s3 object %s is damaged (%s): deleted",
                                                name, kv_chunk_check_to_string (c->check));

    g_test_expect_message ("Kvtier-S3", G_LOG_LEVEL_MESSAGE, pattern);
  }
  loaded = load_with (f, f->tier, 0, 1);
  g_test_assert_expected_messages ();
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_cmpint (kv_job_result_get_checksum_failed (loaded), ==,
                   c->check == KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM ||
                   c->check == KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_CORRUPT_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_LOADED_CHUNKS), ==, 0);
  /* never loaded: the slot holds no byte of the bad object's payload
   * that passed for the chunk (it may hold some: the job failed) */
  /* deleted (asynchronously, after the load's report) */
  end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_DELETED_OBJECTS) < 1)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (10000);
    }
  g_assert_false (raw_exists (raw, name));
  /* the other key is untouched */
  {
    g_autofree char *other = kv_s3_tier_get_object_key (f->tier, f->keys[1]);

    g_assert_true (raw_exists (raw, other));
  }
  g_assert_cmpint (s3_test_lookup (f->tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  /* a damaged object is the data's failure, not the store's */
  g_assert_true (kv_circuit_breaker_allows_requests (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (f->tier))));
  s3_test_client_free (raw);
}

/* ---- construction -------------------------------------------------------- */

static void
assert_start_fails (Fixture    *f,
                    const char *bucket,
                    const char *says,
                    const char *first_property,
                    ...)
{
  g_autoptr(GError) error = NULL;
  KvS3Tier *tier;
  va_list args;

  va_start (args, first_property);
  tier = s3_test_tier_new_valist (f->buffer, bucket, &error, first_property, args);
  va_end (args);
  g_assert_null (tier);
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  if (strstr (error->message, says) == NULL)
    g_error ("“%s” does not say “%s”", error->message, says);
}

static void
test_refused_at_construction (Fixture       *f,
                              gconstpointer  data)
{
  g_autofree char *unreachable = NULL;

  if (s3_test_skip_without_gateway ())
    return;
  assert_start_fails (f, BUCKET, "HTTP 403 InvalidAccessKeyId", "access-key", "AKNOSUCHKEY000000000", NULL);
  assert_start_fails (f, BUCKET, "HTTP 403 SignatureDoesNotMatch", "secret-key", "wrong-secret", NULL);
  assert_start_fails (f, "kvtier-no-such-bucket", "s3://kvtier-no-such-bucket/", NULL);
  assert_start_fails (f, "kvtier-no-such-bucket", "HTTP 404 NoSuchBucket", NULL);
  unreachable = g_strdup_printf ("http://127.0.0.1:%u", s3_gateway_free_port ());
  assert_start_fails (f, BUCKET, unreachable, "endpoint", unreachable, NULL);
  /* refused before a request is sent */
  assert_start_fails (f, "Bad_Bucket", "not an S3 bucket name", NULL);
  assert_start_fails (f, BUCKET, "addressing=sideways", "addressing", "sideways", NULL);
  assert_start_fails (f, BUCKET, "prefix=/abs", "prefix", "/abs", NULL);
  assert_start_fails (f, BUCKET, "secret-key is set but not its access-key", "access-key", NULL, NULL);
}

/* ---- credentials ---------------------------------------------------------- */

static char *
write_credentials (const char *dir,
                   const char *name,
                   const char *text,
                   int         mode)
{
  char *path = g_build_filename (dir, name, NULL);

  g_assert_true (g_file_set_contents (path, text, -1, NULL));
  g_assert_cmpint (g_chmod (path, mode), ==, 0);
  return path;
}

static void
test_credentials (Fixture       *f,
                  gconstpointer  data)
{
  g_autofree char *dir = NULL;
  g_autofree char *good = NULL;
  g_autofree char *open_file = NULL;
  g_autofree char *text = NULL;
  g_autofree char *home = g_strdup (g_get_home_dir ());
  KvS3Tier *tier;

  if (s3_test_skip_without_gateway ())
    return;
  dir = g_build_filename (test_dir, "credentials", NULL);
  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  text = g_strdup_printf ("# kvtier test\n[default]\naws_access_key_id = nobody\n"
                          "aws_secret_access_key = nothing\n\n"
                          "[kvtier]\naws_access_key_id = %s\naws_secret_access_key = %s\n",
                          s3_test_gateway->access_key, s3_test_gateway->secret_key);
  good = write_credentials (dir, "good", text, 0600);
  open_file = write_credentials (dir, "open", text, 0644);

  /* the environment, when the settings give none */
  g_setenv ("AWS_ACCESS_KEY_ID", s3_test_gateway->access_key, TRUE);
  g_setenv ("AWS_SECRET_ACCESS_KEY", s3_test_gateway->secret_key, TRUE);
  tier = s3_test_tier_new (f->buffer, BUCKET, "access-key", NULL, "secret-key", NULL, NULL);
  s3_test_tier_free (tier);
  g_setenv ("AWS_SECRET_ACCESS_KEY", "wrong", TRUE);
  assert_start_fails (f, BUCKET, "SignatureDoesNotMatch", "access-key", NULL, "secret-key", NULL, NULL);
  g_unsetenv ("AWS_SECRET_ACCESS_KEY");
  assert_start_fails (f, BUCKET, "AWS_ACCESS_KEY_ID is set in the environment but not AWS_SECRET_ACCESS_KEY",
                      "access-key", NULL, "secret-key", NULL, NULL);
  g_unsetenv ("AWS_ACCESS_KEY_ID");

  /* a credentials file, its profile */
  tier = s3_test_tier_new (f->buffer, BUCKET, "access-key", NULL, "secret-key", NULL,
                           "credentials-file", good, "credentials-profile", "kvtier", NULL);
  s3_test_tier_free (tier);
  assert_start_fails (f, BUCKET, "InvalidAccessKeyId", "access-key", NULL, "secret-key", NULL,
                      "credentials-file", good, NULL);
  assert_start_fails (f, BUCKET, "has no [other] profile", "access-key", NULL, "secret-key", NULL,
                      "credentials-file", good, "credentials-profile", "other", NULL);
  /* readable by others: refused, as the peer secret */
  assert_start_fails (f, BUCKET, "chmod 600", "access-key", NULL, "secret-key", NULL,
                      "credentials-file", open_file, "credentials-profile", "kvtier", NULL);
  /* AWS_SHARED_CREDENTIALS_FILE, then ~/.aws/credentials */
  g_setenv ("AWS_SHARED_CREDENTIALS_FILE", good, TRUE);
  assert_start_fails (f, BUCKET, "InvalidAccessKeyId", "access-key", NULL, "secret-key", NULL, NULL);
  g_unsetenv ("AWS_SHARED_CREDENTIALS_FILE");
  g_setenv ("HOME", dir, TRUE);
  assert_start_fails (f, BUCKET, "has no credentials", "access-key", NULL, "secret-key", NULL, NULL);
  {
    g_autofree char *aws = g_build_filename (dir, ".aws", NULL);
    g_autofree char *in_home = NULL;

    g_assert_cmpint (g_mkdir (aws, 0700), ==, 0);
    in_home = write_credentials (aws, "credentials", text, 0600);
    tier = s3_test_tier_new (f->buffer, BUCKET, "access-key", NULL, "secret-key", NULL,
                             "credentials-profile", "kvtier", NULL);
    s3_test_tier_free (tier);
    g_unlink (in_home);
    g_rmdir (aws);
  }
  g_setenv ("HOME", home, TRUE);
  g_unlink (good);
  g_unlink (open_file);
  g_rmdir (dir);
}

/* ---- [tier s3] without network ------------------------------------------- */

/* The configuration with @key set to @value (replacing its line, or
 * added to the section). */
static char *
config_with (const char *key,
             const char *value)
{
  const char *lines[] = {
    "[primary]", "size = 256KiB", "slot-size = 64KiB",
    "[tier archive]", "type = s3", "endpoint = http://127.0.0.1:1", "bucket = kv-cache",
    "region = eu-west-1", "prefix = team/llama", "namespace = llama-3-8b",
    "access-key = AK", "secret-key = SK", "max-connections = 4", "deadline-ms = 3000",
  };
  GString *text = g_string_new (NULL);
  gboolean replaced = FALSE;

  for (guint i = 0; i < G_N_ELEMENTS (lines); i++)
    {
      g_autofree char *prefix = key != NULL ? g_strdup_printf ("%s = ", key) : NULL;

      if (prefix != NULL && g_str_has_prefix (lines[i], prefix))
        {
          g_string_append_printf (text, "%s = %s\n", key, value);
          replaced = TRUE;
        }
      else
        g_string_append_printf (text, "%s\n", lines[i]);
    }
  if (key != NULL && !replaced)
    g_string_append_printf (text, "%s = %s\n", key, value);
  return g_string_free (text, FALSE);
}

static void
test_config_check (Fixture       *f,
                   gconstpointer  data)
{
  g_autoptr(KvTierRegistry) registry = kv_tier_registry_new ();
  g_autoptr(GError) error = NULL;
  struct { const char *key; const char *value; const char *says; } bad[] = {
    { "bucket", "Bad_Bucket", "not an S3 bucket name" },
    { "addressing", "sideways", "addressing=sideways" },
    { "endpoint", "ftp://x", "scheme must be http or https" },
    { "tls-ca-file", "/nonexistent.pem", "needs an https endpoint" },
    { "max-connections", "0", "max-connections" },
    { "index-max-keys", "-1", "index-max-keys" },
    { "index-max-keys", "268435457", "index-max-keys" },
    { "index-max-keys", "lots", "index-max-keys" },
    { "prefix", "a//b", "prefix=a//b" },
    { "secret-key", "", "access-key is set but not its secret-key" },
    { "colour", "blue", "colour" },
  };

  g_assert_true (kv_tier_registry_register_tier_type (registry, "s3", KV_TYPE_S3_TIER, &error));
  g_assert_no_error (error);
  {
    g_autofree char *text = config_with (NULL, NULL);
    g_autoptr(KvConfig) config = kv_config_new_from_data (registry, text, -1, "s3.conf", &error);

    g_assert_no_error (error);
    /* nothing listens on port 1: the check sends no request */
    g_assert_true (kv_config_check (config, &error));
    g_assert_no_error (error);
  }
  /* a listing with no index to fill */
  {
    g_autofree char *base = config_with ("index-max-keys", "0");
    g_autofree char *text = g_strconcat (base, "index-list-at-start = true\n", NULL);
    g_autoptr(KvConfig) config = kv_config_new_from_data (registry, text, -1, "s3.conf", &error);

    g_assert_no_error (error);
    g_assert_false (kv_config_check (config, &error));
    g_assert_nonnull (strstr (error->message, "index-list-at-start"));
    g_clear_error (&error);
  }
  /* the index off, and at its largest */
  for (guint i = 0; i < 2; i++)
    {
      g_autofree char *text = config_with ("index-max-keys", i == 0 ? "0" : "268435456");
      g_autoptr(KvConfig) config = kv_config_new_from_data (registry, text, -1, "s3.conf", &error);

      g_assert_no_error (error);
      g_assert_true (kv_config_check (config, &error));
      g_assert_no_error (error);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *text = config_with (bad[i].key, bad[i].value);
      g_autoptr(KvConfig) config = NULL;
      gboolean ok;

      config = kv_config_new_from_data (registry, text, -1, "s3.conf", &error);
      ok = config != NULL && kv_config_check (config, &error);
      g_assert_false (ok);
      g_assert_nonnull (error);
      g_test_message ("%s", error->message);
      if (strstr (error->message, bad[i].says) == NULL)
        g_error ("case %u: “%s” does not say “%s”", i, error->message, bad[i].says);
      g_clear_error (&error);
    }
}

/* ---- events --------------------------------------------------------------- */

static void
test_events (Fixture       *f,
             gconstpointer  data)
{
  g_autoptr(KvS3Tier) tier = NULL;
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  KvEvent **events;
  KvS3Client *raw;
  g_autofree char *name = NULL;
  guint8 byte = 0;
  gint64 end;

  if (s3_test_skip_without_gateway ())
    return;
  tier = s3_test_tier_new (f->buffer, BUCKET, "namespace", f->namespace_, "enable-events", TRUE, NULL);
  stored = store_with (f, tier, 0, 2, TRUE);
  g_assert_true (kv_job_result_get_success (stored));
  events = kv_secondary_tier_take_events (KV_SECONDARY_TIER (tier));
  g_assert_nonnull (events);
  g_assert_nonnull (events[0]);
  g_assert_null (events[1]);
  g_assert_false (kv_event_get_removed (events[0]));
  {
    guint n_keys = 0;

    kv_event_get_keys (events[0], &n_keys);
    g_assert_cmpuint (n_keys, ==, 2);
  }
  for (guint i = 0; events[i] != NULL; i++)
    kv_event_unref (events[i]);
  g_free (events);

  /* a damaged object deleted: a removed event for its key */
  raw = raw_client ();
  name = kv_s3_tier_get_object_key (tier, f->keys[1]);
  raw_put (raw, name, &byte, 1);
  loaded = load_with (f, tier, 1, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (kv_s3_tier_get_counter (tier, KV_S3_COUNTER_DELETED_OBJECTS) < 1)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (10000);
    }
  events = kv_secondary_tier_take_events (KV_SECONDARY_TIER (tier));
  g_assert_nonnull (events);
  g_assert_nonnull (events[0]);
  g_assert_true (kv_event_get_removed (events[0]));
  {
    guint n_keys = 0;
    KvKey * const *keys = kv_event_get_keys (events[0], &n_keys);

    g_assert_cmpuint (n_keys, ==, 1);
    g_assert_true (kv_key_equal (keys[0], f->keys[1]));
  }
  for (guint i = 0; events[i] != NULL; i++)
    kv_event_unref (events[i]);
  g_free (events);
  s3_test_client_free (raw);
  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (tier), NULL));
}

/* ---- two managers on one bucket ------------------------------------------ */

static KvSecondaryTier *
make_stack_tier (KvHostBuffer *buffer,
                 gpointer      data)
{
  return KV_SECONDARY_TIER (s3_test_tier_new (buffer, BUCKET, "namespace", data, NULL));
}

static void
test_two_managers (Fixture       *f,
                   gconstpointer  data)
{
  TestStack a, b;

  if (s3_test_skip_without_gateway ())
    return;
  test_stack_init (&a, 16, f->slot_size, make_stack_tier, f->namespace_);
  test_stack_init (&b, 16, f->slot_size, make_stack_tier, f->namespace_);
  g_assert_cmpuint (test_stack_store (&a, 0, 6), ==, 6);
  g_assert_cmpuint (test_stack_store (&b, 10, 2), ==, 2);
  /* each finds, promotes and reads what the other stored */
  for (guint i = 0; i < 6; i++)
    g_assert_cmpint (test_stack_promote (&b, i), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&a, 10), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&a, 11), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&a, 12), ==, KV_LOOKUP_RESULT_MISS);
  /* both store the same chunk: the last PUT wins, both are whole */
  g_assert_cmpuint (test_stack_store (&a, 20, 1), ==, 1);
  g_assert_cmpuint (test_stack_store (&b, 20, 1), ==, 1);
  g_assert_cmpint (test_stack_promote (&a, 20), ==, KV_LOOKUP_RESULT_HIT);
  test_stack_assert_no_pins (&a, 21);
  test_stack_assert_no_pins (&b, 21);
  g_assert_cmpuint (kv_s3_tier_get_counter (KV_S3_TIER (b.tier), KV_S3_COUNTER_LOADED_CHUNKS), ==, 6);
  test_stack_clear (&a);
  test_stack_clear (&b);
}

/* ---- the index of known chunks ---------------------------------------------- */

/* Chunks this tier stored are looked up without a request, then load
 * byte-exact; a chunk it never stored is a HEAD's MISS; another writer's
 * chunk is a HEAD's HIT, then indexed. */
static void
test_index_stored (Fixture       *f,
                   gconstpointer  data)
{
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvS3Tier) other = NULL;
  g_autoptr(KvJobResult) other_stored = NULL;

  if (s3_test_skip_without_gateway ())
    return;
  store_ok (f, 0, 3);
  g_assert_cmpuint (kv_s3_tier_get_index_size (f->tier), ==, 3);
  for (guint i = 0; i < 3; i++)
    assert_lookup (f->tier, f->keys[i], KV_LOOKUP_RESULT_HIT, 0);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_INDEX_HITS), ==, 3);
  loaded = load_with (f, f->tier, 0, 3);
  g_assert_true (kv_job_result_get_success (loaded));
  for (guint i = 0; i < 3; i++)
    g_assert_true (test_chunk_check (slot (f, 5 + i), f->slot_size, i));
  /* never stored: a HEAD, a miss, not indexed */
  assert_lookup (f->tier, f->keys[3], KV_LOOKUP_RESULT_MISS, 1);
  assert_lookup (f->tier, f->keys[3], KV_LOOKUP_RESULT_MISS, 1);

  /* stored by another tier on the bucket: found by a HEAD, then known */
  other = s3_test_tier_new (f->buffer, BUCKET, "namespace", f->namespace_, NULL);
  other_stored = store_with (f, other, 4, 1, TRUE);
  g_assert_true (kv_job_result_get_success (other_stored));
  assert_lookup (f->tier, f->keys[4], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (f->tier, f->keys[4], KV_LOOKUP_RESULT_HIT, 0);
  g_assert_cmpuint (kv_s3_tier_get_index_size (f->tier), ==, 4);
  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (other), NULL));
}

/* An indexed chunk deleted behind the tier: the lookup says HIT, the load
 * finds it missing (reported once, counted, not the store's fault), and
 * the next lookup sends a HEAD and says MISS. */
static void
test_index_stale (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvJobResult) still = NULL;
  g_autofree char *name = NULL;
  KvS3Client *raw;
  guint n_landed = 0;

  if (s3_test_skip_without_gateway ())
    return;
  store_ok (f, 0, 2);
  raw = raw_client ();
  name = kv_s3_tier_get_object_key (f->tier, f->keys[0]);
  raw_delete (raw, name);
  g_assert_false (raw_exists (raw, name));

  assert_lookup (f->tier, f->keys[0], KV_LOOKUP_RESULT_HIT, 0);
  /* run_job checks that the job is reported, once */
  loaded = load_with (f, f->tier, 0, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_null (kv_job_result_get_successful_keys (loaded, &n_landed));
  g_assert_cmpuint (n_landed, ==, 0);
  g_assert_false (kv_job_result_get_checksum_failed (loaded));
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_MISSING_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_LOAD_FAILURES), ==, 1);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_INDEX_STALE_KEYS), ==, 1);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_CORRUPT_CHUNKS), ==, 0);
  g_assert_cmpuint (kv_s3_tier_get_index_size (f->tier), ==, 1);
  /* missing is the data's failure, not the store's */
  g_assert_true (kv_circuit_breaker_allows_requests (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (f->tier))));
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (KV_SECONDARY_TIER (f->tier)), ==, 0);

  assert_lookup (f->tier, f->keys[0], KV_LOOKUP_RESULT_MISS, 1);
  assert_lookup (f->tier, f->keys[1], KV_LOOKUP_RESULT_HIT, 0);
  still = load_with (f, f->tier, 1, 1);
  g_assert_true (kv_job_result_get_success (still));
  g_assert_true (test_chunk_check (slot (f, 7), f->slot_size, 1));
  /* a missing key not in the index is no stale entry */
  g_clear_pointer (&loaded, kv_job_result_unref);
  loaded = load_with (f, f->tier, 0, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_MISSING_CHUNKS), ==, 2);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_INDEX_STALE_KEYS), ==, 1);
  s3_test_client_free (raw);
}

/* The same through a manager: the promotion of a stale entry fails, the
 * manager answers a miss, no slot stays pinned. */
static void
test_index_stale_manager (Fixture       *f,
                          gconstpointer  data)
{
  TestStack a, b;
  g_autofree char *name = NULL;
  KvS3Client *raw;
  KvS3Tier *tier_b;

  if (s3_test_skip_without_gateway ())
    return;
  test_stack_init (&a, 16, f->slot_size, make_stack_tier, f->namespace_);
  test_stack_init (&b, 16, f->slot_size, make_stack_tier, f->namespace_);
  tier_b = KV_S3_TIER (b.tier);
  g_assert_cmpuint (test_stack_store (&a, 0, 2), ==, 2);
  /* b finds both by HEAD, and indexes them; one is deleted after */
  assert_lookup (tier_b, f->keys[0], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (tier_b, f->keys[1], KV_LOOKUP_RESULT_HIT, 1);
  raw = raw_client ();
  name = kv_s3_tier_get_object_key (tier_b, f->keys[1]);
  raw_delete (raw, name);

  g_assert_cmpint (test_stack_promote (&b, 1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_s3_tier_get_counter (tier_b, KV_S3_COUNTER_INDEX_STALE_KEYS), ==, 1);
  g_assert_cmpuint (kv_s3_tier_get_counter (tier_b, KV_S3_COUNTER_MISSING_CHUNKS), ==, 1);
  test_stack_assert_no_pins (&b, 2);
  /* then a HEAD's miss; the other one is promoted from the index */
  g_assert_cmpint (test_stack_promote (&b, 1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (test_stack_promote (&b, 0), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_s3_tier_get_counter (tier_b, KV_S3_COUNTER_LOADED_CHUNKS), ==, 1);
  test_stack_assert_no_pins (&b, 2);
  s3_test_client_free (raw);
  test_stack_clear (&a);
  test_stack_clear (&b);
}

/* index-max-keys = 0: every lookup a HEAD; = 2: the third key stored is
 * not indexed, and found by a HEAD every time. */
static void
test_index_bounded (Fixture       *f,
                    gconstpointer  data)
{
  if (s3_test_skip_without_gateway ())
    return;
  s3_test_tier_free (f->tier);
  f->tier = s3_test_tier_new (f->buffer, BUCKET, "namespace", f->namespace_, "index-max-keys", 0, NULL);
  store_ok (f, 0, 3);
  g_assert_cmpuint (kv_s3_tier_get_index_size (f->tier), ==, 0);
  for (guint i = 0; i < 3; i++)
    assert_lookup (f->tier, f->keys[i], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (f->tier, f->keys[3], KV_LOOKUP_RESULT_MISS, 1);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_INDEX_HITS), ==, 0);

  s3_test_tier_free (f->tier);
  f->tier = s3_test_tier_new (f->buffer, BUCKET, "namespace", f->namespace_, "index-max-keys", 2, NULL);
  /* one job each, so that the first two are the ones indexed */
  for (guint i = 0; i < 3; i++)
    {
      g_autoptr(KvJobResult) stored = store_with (f, f->tier, i, 1, TRUE);

      g_assert_true (kv_job_result_get_success (stored));
    }
  g_assert_cmpuint (kv_s3_tier_get_index_size (f->tier), ==, 2);
  assert_lookup (f->tier, f->keys[0], KV_LOOKUP_RESULT_HIT, 0);
  assert_lookup (f->tier, f->keys[1], KV_LOOKUP_RESULT_HIT, 0);
  assert_lookup (f->tier, f->keys[2], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (f->tier, f->keys[2], KV_LOOKUP_RESULT_HIT, 1);
  g_assert_cmpuint (kv_s3_tier_get_index_size (f->tier), ==, 2);
}

/* index-list-at-start: a restarted tier knows the chunks already in the
 * bucket from one listing page (a real gateway checks its signed query),
 * and only those: not an object of another name or of another size. */
static void
test_index_listed (Fixture       *f,
                   gconstpointer  data)
{
  g_autoptr(KvS3Tier) listed = NULL;
  g_autofree char *name = NULL;
  g_autofree char *junk = NULL;
  g_autofree char *short_name = NULL;
  KvS3Client *raw;
  guint8 byte = 7;

  if (s3_test_skip_without_gateway ())
    return;
  store_ok (f, 0, 3);
  raw = raw_client ();
  name = kv_s3_tier_get_object_key (f->tier, f->keys[0]);
  junk = g_strconcat (name, ".junk", NULL);
  raw_put (raw, junk, &byte, 1);
  short_name = kv_s3_tier_get_object_key (f->tier, f->keys[5]);
  raw_put (raw, short_name, &byte, 1);

  listed = s3_test_tier_new (f->buffer, BUCKET, "namespace", f->namespace_,
                             "index-list-at-start", TRUE, NULL);
  kv_s3_tier_wait_for_listing (listed);
  g_assert_cmpuint (kv_s3_tier_get_index_size (listed), ==, 3);
  /* the probe, one page */
  g_assert_cmpuint (n_requests (listed), ==, 2);
  for (guint i = 0; i < 3; i++)
    assert_lookup (listed, f->keys[i], KV_LOOKUP_RESULT_HIT, 0);
  assert_lookup (listed, f->keys[5], KV_LOOKUP_RESULT_MISS, 1);
  assert_lookup (listed, f->keys[6], KV_LOOKUP_RESULT_MISS, 1);
  {
    g_autoptr(KvJobResult) loaded = load_with (f, listed, 0, 3);

    g_assert_true (kv_job_result_get_success (loaded));
    for (guint i = 0; i < 3; i++)
      g_assert_true (test_chunk_check (slot (f, 5 + i), f->slot_size, i));
  }
  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (listed), NULL));
  s3_test_client_free (raw);
}

/* ---- a store past its deadline --------------------------------------------- */

static gboolean
silent_handler (S3FakeServer        *server,
                const S3FakeRequest *request,
                GOutputStream       *out,
                gpointer             user_data)
{
  char byte;

  /* construction's probe GET: NoSuchKey, so that the tier starts */
  if (request->index == 0)
    return s3_fake_write_str (out, "HTTP/1.1 404 Not Found\r\nContent-Length: 41\r\n\r\n"
                                   "<Error><Code>NoSuchKey</Code></Error>    ");
  if (GPOINTER_TO_INT (user_data) == 1)
    {
      /* a trickle: a byte every 50 ms of an object of the right length */
      if (!s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nContent-Length: 69632\r\n\r\n"))
        return FALSE;
      for (guint i = 0; i < 69632; i++)
        {
          if (!s3_fake_write (out, "x", 1))
            return FALSE;
          g_usleep (50000);
        }
      return TRUE;
    }
  /* silence, until the client gives up */
  g_input_stream_read (request->in, &byte, 1, NULL, NULL);
  return FALSE;
}

static void
test_past_deadline (Fixture       *f,
                    gconstpointer  data)
{
  for (guint mode = 0; mode < 2; mode++)
    {
      g_autoptr(S3FakeServer) server = s3_fake_server_new (silent_handler, GINT_TO_POINTER (mode));
      g_autofree char *endpoint = s3_fake_server_get_endpoint (server);
      KvS3Tier *tier;
      g_autoptr(KvJobResult) result = NULL;
      KvSecondaryTier *st;
      gint64 start;

      tier = s3_test_tier_new (f->buffer, "fake-bucket", "endpoint", endpoint,
                               "access-key", "AK", "secret-key", "SK",
                               "deadline-ms", 700, "reply-timeout-ms", 60000, NULL);
      st = KV_SECONDARY_TIER (tier);
      start = g_get_monotonic_time ();
      /* mode 0: a store into silence; mode 1: a load that trickles */
      result = mode == 0 ? store_with (f, tier, 0, 2, TRUE) : load_with (f, tier, 0, 1);
      g_assert_false (kv_job_result_get_success (result));
      /* failed at the deadline, not at the reply timeout */
      g_assert_cmpint (g_get_monotonic_time () - start, <, 5 * G_USEC_PER_SEC);
      g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (st), ==, 1);
      if (mode == 1)
        {
          /* the deadline aborted the GET: the tier answers (late) at once,
           * then shuts down at once */
          gint64 end = g_get_monotonic_time () + 2 * G_USEC_PER_SEC;

          while (kv_secondary_tier_get_n_late_completions (st) < 1)
            {
              g_assert_cmpint (g_get_monotonic_time (), <, end);
              g_usleep (1000);
            }
          start = g_get_monotonic_time ();
          s3_test_tier_free (tier);
          g_assert_cmpint (g_get_monotonic_time () - start, <, 2 * G_USEC_PER_SEC);
        }
      else
        {
          /* dropped at once, its job unanswered: its shutdown is skipped,
           * and the tier goes when its aborted job answers, finalized on
           * its own I/O thread (this used to wait there for itself) */
          gint64 end = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;

          g_object_add_weak_pointer (G_OBJECT (tier), (gpointer *) &tier);
          kv_secondary_tier_shutdown (st, NULL);
          g_object_unref (tier);
          while (tier != NULL)
            {
              g_assert_cmpint (g_get_monotonic_time (), <, end);
              g_usleep (1000);
            }
        }
    }
}

/* ---- object keys and metrics (a fake store) -------------------------------- */

/* Answers construction's probe GET with NoSuchKey and every PUT with 200,
 * and keeps each request's method and path. */
typedef struct
{
  GMutex     lock;
  GPtrArray *requests;   /* "METHOD path" */
} Recorder;

static gboolean
recording_handler (S3FakeServer        *server,
                   const S3FakeRequest *request,
                   GOutputStream       *out,
                   gpointer             user_data)
{
  Recorder *recorder = user_data;

  g_mutex_lock (&recorder->lock);
  g_ptr_array_add (recorder->requests, g_strdup_printf ("%s %s", request->method, request->path));
  g_mutex_unlock (&recorder->lock);
  if (g_str_equal (request->method, "PUT"))
    return s3_fake_write_str (out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  return s3_fake_write_str (out, "HTTP/1.1 404 Not Found\r\nContent-Length: 37\r\n\r\n"
                                 "<Error><Code>NoSuchKey</Code></Error>");
}

static void
recorder_init (Recorder *recorder)
{
  g_mutex_init (&recorder->lock);
  recorder->requests = g_ptr_array_new_with_free_func (g_free);
}

static void
recorder_clear (Recorder *recorder)
{
  g_clear_pointer (&recorder->requests, g_ptr_array_unref);
  g_mutex_clear (&recorder->lock);
}

static gboolean
recorder_saw (Recorder   *recorder,
              const char *request)
{
  gboolean seen = FALSE;

  g_mutex_lock (&recorder->lock);
  for (guint i = 0; i < recorder->requests->len && !seen; i++)
    seen = g_str_equal (recorder->requests->pdata[i], request);
  g_mutex_unlock (&recorder->lock);
  return seen;
}

static KvS3Tier *
fake_tier (Fixture      *f,
           S3FakeServer *server,
           const char   *prefix)
{
  g_autofree char *endpoint = s3_fake_server_get_endpoint (server);

  return s3_test_tier_new (f->buffer, "fake-bucket", "endpoint", endpoint,
                           "access-key", "AK", "secret-key", "SK",
                           "namespace", "key-names", "prefix", prefix, NULL);
}

/* <prefix>/<namespace digest>/<hash hex>_g<group>, spelled out: the
 * digest of namespace "key-names" at 64 KiB chunks (SHA-256, see
 * kv_chunk_namespace_digest()), the hash in lowercase hex, the largest
 * group in decimal; and a stored chunk is PUT under that name. */
static void
test_key_names (Fixture       *f,
                gconstpointer  data)
{
  const char *digest = "7f7c36f9d1fce9e4560616c4eefe4324e41bc3b37d167a372991e498b873c332";
  const char *hash_hex = "00112233445566778899aabbccddeeff"
                         "f0e1d2c3b4a5968778695a4b3c2d1e0f";
  const struct
  {
    const char *prefix;
    const char *head;
  } cases[] = {
    { "kvtier", "kvtier/" },
    { "", "" },
    { "a/b.c-d", "a/b.c-d/" },
  };
  guint8 hash[32];
  g_autoptr(KvKey) key = NULL;
  g_autoptr(KvKey) other = NULL;

  for (guint i = 0; i < 16; i++)
    hash[i] = (guint8) (i * 0x11);
  for (guint i = 16; i < 32; i++)
    hash[i] = (guint8) (((31 - i) << 4) | (i - 16));
  key = kv_key_new (hash, sizeof hash, G_MAXUINT32);
  other = kv_key_new (hash, 1, 7);

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      Recorder recorder;
      g_autoptr(S3FakeServer) server = NULL;
      g_autoptr(KvJobResult) stored = NULL;
      g_autofree char *name = NULL;
      g_autofree char *other_name = NULL;
      g_autofree char *expected = NULL;
      g_autofree char *expected_other = NULL;
      g_autofree char *stored_name = NULL;
      g_autofree char *put = NULL;
      KvS3Tier *tier;

      recorder_init (&recorder);
      server = s3_fake_server_new (recording_handler, &recorder);
      tier = fake_tier (f, server, cases[c].prefix);
      name = kv_s3_tier_get_object_key (tier, key);
      other_name = kv_s3_tier_get_object_key (tier, other);
      expected = g_strconcat (cases[c].head, digest, "/", hash_hex, "_g4294967295", NULL);
      expected_other = g_strconcat (cases[c].head, digest, "/00_g7", NULL);
      g_assert_cmpstr (name, ==, expected);
      g_assert_cmpstr (other_name, ==, expected_other);

      /* the PUT of a stored chunk names it so (path-style) */
      stored = store_with (f, tier, 0, 1, TRUE);
      g_assert_true (kv_job_result_get_success (stored));
      stored_name = kv_s3_tier_get_object_key (tier, f->keys[0]);
      g_assert_true (g_str_has_prefix (stored_name, cases[c].head));
      g_assert_true (g_str_has_prefix (stored_name + strlen (cases[c].head), digest));
      put = g_strconcat ("PUT /fake-bucket/", stored_name, NULL);
      g_assert_true (recorder_saw (&recorder, put));
      s3_test_tier_free (tier);
      g_clear_pointer (&server, s3_fake_server_free);
      recorder_clear (&recorder);
    }
}

/* Listing pages from a fake store: keys[0] and [1] on a truncated first
 * page (with an object of another size and one of another name), keys[2]
 * on the second, asked for with the first's continuation token. */
typedef struct
{
  Recorder  recorder;
  char     *pages[2];
  gboolean  refuse;      /* answer the listing 403 AccessDenied */
  gboolean  stall;       /* answer nothing to the listing until released */
  gboolean  released;    /* (recorder lock) */
  gboolean  gave_up;     /* (recorder lock) the stall ended unreleased */
  GCond     release;
} Lister;

static gboolean
listing_handler (S3FakeServer        *server,
                 const S3FakeRequest *request,
                 GOutputStream       *out,
                 gpointer             user_data)
{
  Lister *lister = user_data;
  const char *page;
  g_autofree char *reply = NULL;

  g_mutex_lock (&lister->recorder.lock);
  g_ptr_array_add (lister->recorder.requests, g_strdup_printf ("%s %s", request->method, request->path));
  g_mutex_unlock (&lister->recorder.lock);
  if (strstr (request->path, "list-type=2") == NULL)
    return s3_fake_write_str (out, "HTTP/1.1 404 Not Found\r\nContent-Length: 37\r\n\r\n"
                                   "<Error><Code>NoSuchKey</Code></Error>");
  if (lister->refuse)
    return s3_fake_write_str (out, "HTTP/1.1 403 Forbidden\r\nContent-Length: 40\r\n\r\n"
                                   "<Error><Code>AccessDenied</Code></Error>");
  if (lister->stall)
    {
      gint64 give_up = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;

      g_mutex_lock (&lister->recorder.lock);
      while (!lister->released && g_cond_wait_until (&lister->release, &lister->recorder.lock, give_up))
        ;
      lister->gave_up = !lister->released;
      g_mutex_unlock (&lister->recorder.lock);
      return FALSE;
    }
  page = lister->pages[strstr (request->path, "continuation-token=") != NULL];
  reply = g_strdup_printf ("HTTP/1.1 200 OK\r\nContent-Length: %" G_GSIZE_FORMAT "\r\n\r\n%s",
                           strlen (page), page);
  return s3_fake_write_str (out, reply);
}

static gboolean
recorder_saw_part (Recorder   *recorder,
                   const char *part)
{
  gboolean seen = FALSE;

  g_mutex_lock (&recorder->lock);
  for (guint i = 0; i < recorder->requests->len && !seen; i++)
    seen = strstr (recorder->requests->pdata[i], part) != NULL;
  g_mutex_unlock (&recorder->lock);
  return seen;
}

/* Whether a request holding @part reaches the server within 10 s (one
 * made by a thread of the tier's that may not have run yet). */
static gboolean
recorder_wait_for_part (Recorder   *recorder,
                        const char *part)
{
  gint64 give_up = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while (!recorder_saw_part (recorder, part))
    {
      if (g_get_monotonic_time () > give_up)
        return FALSE;
      g_usleep (1000);
    }
  return TRUE;
}

static void
test_index_listed_pages (Fixture       *f,
                         gconstpointer  data)
{
  /* the namespace "key-names" at 64 KiB (test_key_names), under a prefix
   * that a raw query string could not carry */
  const char *prefix = "kv&t=1/7f7c36f9d1fce9e4560616c4eefe4324e41bc3b37d167a372991e498b873c332/";
  gsize object_size = KV_CHUNK_HEADER_SIZE + f->slot_size;
  char *names[3] = { NULL };

  /* as a listing holds them: XML-escaped */
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *name = kv_chunk_name_for_key (prefix, strlen (prefix), f->keys[i]);

      names[i] = g_markup_escape_text (name, -1);
    }
  for (guint mode = 0; mode < 3; mode++)
    {
      Lister lister = { 0 };
      g_autoptr(S3FakeServer) server = NULL;
      g_autofree char *endpoint = NULL;
      KvS3Tier *tier;

      recorder_init (&lister.recorder);
      lister.pages[0] = g_strdup_printf (
        "<ListBucketResult><IsTruncated>true</IsTruncated>"
        "<Contents><Key>%s</Key><Size>%" G_GSIZE_FORMAT "</Size></Contents>"
        "<Contents><Key>%s.tmp</Key><Size>%" G_GSIZE_FORMAT "</Size></Contents>"
        "<Contents><Key>%s</Key><Size>%" G_GSIZE_FORMAT "</Size></Contents>"
        "<Contents><Key>%s</Key><Size>17</Size></Contents>"
        "<NextContinuationToken>tok=1/+&amp;x</NextContinuationToken></ListBucketResult>",
        names[0], object_size, names[2], object_size, names[1], object_size, names[2]);
      lister.pages[1] = g_strdup_printf (
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>%s</Key><Size>%" G_GSIZE_FORMAT "</Size></Contents></ListBucketResult>",
        names[2], object_size);
      lister.refuse = mode == 2;
      server = s3_fake_server_new (listing_handler, &lister);
      endpoint = s3_fake_server_get_endpoint (server);
      if (mode == 2)
        g_test_expect_message ("Kvtier-S3", G_LOG_LEVEL_MESSAGE,
                               "s3 tier: the listing that fills the index stopped: *AccessDenied*");
      tier = s3_test_tier_new (f->buffer, "fake-bucket", "endpoint", endpoint,
                               "access-key", "AK", "secret-key", "SK", "namespace", "key-names",
                               "prefix", "kv&t=1", "index-list-at-start", TRUE,
                               "index-max-keys", mode == 1 ? 2 : 1000, NULL);
      kv_s3_tier_wait_for_listing (tier);
      g_test_assert_expected_messages ();
      switch (mode)
        {
        case 0:
          /* both pages; the second asked for with the token, encoded */
          g_assert_cmpuint (kv_s3_tier_get_index_size (tier), ==, 3);
          g_assert_true (recorder_saw_part (&lister.recorder,
                                            "GET /fake-bucket?continuation-token=tok%3D1%2F%2B%26x&"
                                            "list-type=2&max-keys=1000&prefix=kv%26t%3D1%2F7f7c36f9"));
          g_assert_cmpuint (s3_fake_server_get_n_requests (server), ==, 3);
          break;
        case 1:
          /* full after the first page: no second */
          g_assert_cmpuint (kv_s3_tier_get_index_size (tier), ==, 2);
          g_assert_cmpuint (s3_fake_server_get_n_requests (server), ==, 2);
          break;
        default:
          /* refused: the tier starts with an empty index */
          g_assert_cmpuint (kv_s3_tier_get_index_size (tier), ==, 0);
          g_assert_cmpuint (s3_fake_server_get_n_requests (server), ==, 2);
          break;
        }
      if (mode != 2)
        {
          /* answered from the index: no request */
          g_assert_cmpint (s3_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
          g_assert_cmpint (s3_test_lookup (tier, f->keys[1]), ==, KV_LOOKUP_RESULT_HIT);
          g_assert_cmpuint (s3_fake_server_get_n_requests (server), ==, mode == 0 ? 3 : 2);
        }
      s3_test_tier_free (tier);
      g_clear_pointer (&server, s3_fake_server_free);
      recorder_clear (&lister.recorder);
      g_free (lister.pages[0]);
      g_free (lister.pages[1]);
    }
  for (guint i = 0; i < 3; i++)
    g_free (names[i]);
}

/* The listing runs beside the tier, not before it: construction returns
 * while a page is still unanswered, a lookup meanwhile sends its HEAD, and
 * shutting the tier down ends the listing (its request fails on the closed
 * client) instead of waiting for the page. */
static void
test_index_listing_in_background (Fixture       *f,
                                  gconstpointer  data)
{
  Lister lister = { 0 };
  g_autoptr(S3FakeServer) server = NULL;
  g_autofree char *endpoint = NULL;
  KvS3Tier *tier;

  recorder_init (&lister.recorder);
  g_cond_init (&lister.release);
  lister.stall = TRUE;
  server = s3_fake_server_new (listing_handler, &lister);
  endpoint = s3_fake_server_get_endpoint (server);
  tier = s3_test_tier_new (f->buffer, "fake-bucket", "endpoint", endpoint,
                           "access-key", "AK", "secret-key", "SK", "namespace", "key-names",
                           "index-list-at-start", TRUE, "reply-timeout-ms", 60000, NULL);
  g_assert_nonnull (tier);
  g_mutex_lock (&lister.recorder.lock);
  g_assert_false (lister.gave_up);
  g_mutex_unlock (&lister.recorder.lock);
  /* the probe, then a HEAD while the listing's page is outstanding */
  g_assert_cmpint (s3_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  /* (the listing's thread may not have sent its request yet) */
  g_assert_true (recorder_wait_for_part (&lister.recorder, "GET /fake-bucket?list-type=2"));
  g_assert_true (recorder_saw_part (&lister.recorder, "HEAD /fake-bucket/"));
  g_assert_cmpuint (kv_s3_tier_get_index_size (tier), ==, 0);
  /* if shutdown waited for the listing, the page would end unreleased
   * (30 s) before it returned */
  s3_test_tier_free (tier);

  g_mutex_lock (&lister.recorder.lock);
  g_assert_false (lister.gave_up);
  lister.released = TRUE;
  g_cond_broadcast (&lister.release);
  g_mutex_unlock (&lister.recorder.lock);
  g_clear_pointer (&server, s3_fake_server_free);
  recorder_clear (&lister.recorder);
  g_cond_clear (&lister.release);
}

/* The kvtier_s3_* families from the first get_stats on (zeros too), then
 * what moved since the last call and nothing else: the tier counts in a
 * KvCounterSet, its client in the same set, and the base class reports;
 * the one gauge, the index's size, is reported on every call. */
static void
test_metrics_from_start (Fixture       *f,
                         gconstpointer  data)
{
  Recorder recorder;
  g_autoptr(S3FakeServer) server = NULL;
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) first = NULL;
  g_autoptr(KvStats) second = NULL;
  g_autoptr(KvStats) third = NULL;
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) families = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *label = NULL;
  g_autofree char *text = NULL;
  g_auto(GStrv) names = NULL;
  const char *labels[2] = { NULL, NULL };
  KvSecondaryTier *st;
  KvS3Tier *tier;
  gdouble value = -1;

  recorder_init (&recorder);
  server = s3_fake_server_new (recording_handler, &recorder);
  tier = fake_tier (f, server, "kvtier");
  st = KV_SECONDARY_TIER (tier);
  label = kv_secondary_tier_dup_metric_label (st);
  labels[0] = label;
  g_assert_true (kv_metric_registry_add_tier_metrics (registry, &error));
  g_assert_true (kv_secondary_tier_register_metrics (st, registry, &error));
  g_assert_no_error (error);
  names = kv_metric_registry_list_names (registry);
  for (guint i = 0; names[i] != NULL; i++)
    if (g_str_has_prefix (names[i], "kvtier_s3_"))
      g_ptr_array_add (families, g_strdup (names[i]));
  /* the counters and the gauge */
  g_assert_cmpuint (families->len, ==, KV_S3_N_COUNTERS + 1);

  /* every family, before any job: construction's probe is one request */
  first = kv_secondary_tier_get_stats (st);
  text = kv_stats_to_prometheus (first, registry);
  for (guint i = 0; i < families->len; i++)
    {
      const char *family = families->pdata[i];
      gboolean gauge = g_str_equal (family, "kvtier_s3_index_keys");
      g_autofree char *series = g_strdup_printf ("\n%s%s{tier=\"%s\"} ", family,
                                                 gauge ? "" : "_total", label);

      g_assert_true (kv_stats_lookup (first, family, labels, &value));
      g_assert_cmpfloat (value, ==, g_str_equal (family, "kvtier_s3_requests") ? 1 : 0);
      g_assert_nonnull (strstr (text, series));
    }

  /* two chunks stored: their PUTs and bytes, and only what moved */
  stored = store_with (f, tier, 0, 2, TRUE);
  g_assert_true (kv_job_result_get_success (stored));
  second = kv_secondary_tier_get_stats (st);
  g_assert_true (kv_stats_lookup (second, "kvtier_s3_stored_chunks", labels, &value));
  g_assert_cmpfloat (value, ==, 2);
  g_assert_true (kv_stats_lookup (second, "kvtier_s3_requests", labels, &value));
  g_assert_cmpfloat (value, ==, 2);
  g_assert_true (kv_stats_lookup (second, "kvtier_s3_written_bytes", labels, &value));
  g_assert_cmpfloat (value, ==, 2 * (KV_CHUNK_HEADER_SIZE + f->slot_size));
  g_assert_false (kv_stats_lookup (second, "kvtier_s3_store_failures", labels, NULL));
  g_assert_false (kv_stats_lookup (second, "kvtier_s3_loaded_chunks", labels, NULL));
  g_assert_cmpuint (kv_s3_tier_get_counter (tier, KV_S3_COUNTER_REQUESTS), ==, 3);
  g_assert_cmpuint (kv_s3_tier_get_counter (tier, KV_S3_COUNTER_STORED_CHUNKS), ==, 2);
  /* both indexed */
  g_assert_true (kv_stats_lookup (second, "kvtier_s3_index_keys", labels, &value));
  g_assert_cmpfloat (value, ==, 2);

  /* nothing moved: no kvtier_s3_* counter series, the gauge as it is */
  third = kv_secondary_tier_get_stats (st);
  for (guint i = 0; i < families->len; i++)
    if (!g_str_equal (families->pdata[i], "kvtier_s3_index_keys"))
      g_assert_false (kv_stats_lookup (third, families->pdata[i], labels, NULL));
  g_assert_true (kv_stats_lookup (third, "kvtier_s3_index_keys", labels, &value));
  g_assert_cmpfloat (value, ==, 2);

  s3_test_tier_free (tier);
  g_clear_pointer (&server, s3_fake_server_free);
  recorder_clear (&recorder);
}

/* ---- the gateway killed ---------------------------------------------------- */

static void
test_gateway_killed (Fixture       *f,
                     gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  KvSecondaryTier *st;
  guint n_failed = 0;
  gint64 start, end;
  guint32 slots[4] = { 0, 1, 2, 3 };

  if (s3_test_skip_without_gateway ())
    return;
  g_object_unref (f->tier);
  f->tier = s3_test_tier_new (f->buffer, BUCKET, "namespace", f->namespace_, "deadline-ms", 3000,
                              "breaker-open-ms", 300, NULL);
  st = KV_SECONDARY_TIER (f->tier);
  store_ok (f, 0, 4);

  /* a job in flight as the gateway dies (it may have finished first) */
  for (guint i = 0; i < 4; i++)
    test_chunk_fill (slot (f, i), f->slot_size, 8 + i);
  {
    g_autoptr(KvRequest) request = kv_request_new ("during", NULL);
    g_autoptr(KvTransferJob) job = kv_transfer_job_new (next_job_id++, &f->keys[8], slots, 4, FALSE, request);
    KvJobResult **results;
    guint n_results = 0;

    g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
    s3_gateway_kill_rgw (s3_test_gateway);
    g_assert_true (kv_secondary_tier_drain_jobs (st, &error));
    g_assert_no_error (error);
    results = kv_secondary_tier_get_finished_jobs (st);
    for (guint i = 0; results != NULL && results[i] != NULL; i++, n_results++)
      kv_job_result_unref (results[i]);
    g_free (results);
    g_assert_cmpuint (n_results, ==, 1);
  }
  /* jobs after it died: each fails, within its deadline or at once */
  start = g_get_monotonic_time ();
  for (guint round = 0; round < 4; round++)
    {
      g_autoptr(KvJobResult) stored = store_with (f, f->tier, 12, 2, TRUE);
      g_autoptr(KvJobResult) loaded = load_with (f, f->tier, 0, 2);

      n_failed += !kv_job_result_get_success (stored) + !kv_job_result_get_success (loaded);
    }
  g_assert_cmpint (g_get_monotonic_time () - start, <, 8 * 3 * G_USEC_PER_SEC);
  g_assert_cmpuint (n_failed, ==, 8);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_TRANSPORT_ERRORS), >, 0);
  g_assert_cmpuint (kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_STORE_FAILURES) +
                    kv_s3_tier_get_counter (f->tier, KV_S3_COUNTER_LOAD_FAILURES), >=, 8);
  /* lookups answer at once meanwhile (the breaker, or a failed HEAD) */
  g_assert_cmpint (s3_test_lookup (f->tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);

  /* the gateway back on its port: service resumes once a probe passes */
  g_assert_true (s3_gateway_restart_rgw (s3_test_gateway, &error));
  g_assert_no_error (error);
  end = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  for (;;)
    {
      g_autoptr(KvJobResult) loaded = load_with (f, f->tier, 0, 4);

      if (kv_job_result_get_success (loaded))
        break;
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (100000);
    }
  for (guint i = 0; i < 4; i++)
    g_assert_true (test_chunk_check (slot (f, 4 + i), f->slot_size, i));
  store_ok (f, 12, 2);
  g_assert_cmpint (s3_test_lookup (f->tier, f->keys[12]), ==, KV_LOOKUP_RESULT_HIT);
}

int
main (int   argc,
      char *argv[])
{
  int status;

  g_test_init (&argc, &argv, NULL);
  test_dir = test_dir_make ("kvtier-s3-tier-test");
  if (s3_test_start_gateway ())
    s3_test_create_bucket (BUCKET);

#define ADD(path, size, func) \
  g_test_add ("/s3-tier/" path, Fixture, GSIZE_TO_POINTER (size), setup_tier, func, teardown)
#define ADD_BARE(path, func) \
  g_test_add ("/s3-tier/" path, Fixture, NULL, setup, func, teardown)
  ADD_BARE ("config-check", test_config_check);
  ADD_BARE ("past-deadline", test_past_deadline);
  ADD_BARE ("key-names", test_key_names);
  ADD_BARE ("metrics-from-start", test_metrics_from_start);
  ADD ("round-trip/64KiB", 64 * 1024, test_round_trip);
  ADD ("round-trip/256KiB", 256 * 1024, test_round_trip);
  ADD ("round-trip/2MiB", 2 * 1024 * 1024, test_round_trip);
  ADD ("partial-load", 64 * 1024, test_partial_load);
  ADD ("failed-load", 64 * 1024, test_failed_load);
  ADD ("damaged/payload", 64 * 1024, test_damaged_object);
  ADD ("damaged/header", 64 * 1024, test_damaged_object);
  ADD ("damaged/truncated", 64 * 1024, test_damaged_object);
  ADD ("damaged/longer", 64 * 1024, test_damaged_object);
  ADD ("damaged/other-key", 64 * 1024, test_damaged_object);
  ADD ("damaged/namespace", 64 * 1024, test_damaged_object);
  ADD_BARE ("refused-at-construction", test_refused_at_construction);
  ADD_BARE ("credentials", test_credentials);
  ADD_BARE ("events", test_events);
  ADD ("two-managers", 64 * 1024, test_two_managers);
  ADD ("index/stored", 64 * 1024, test_index_stored);
  ADD ("index/stale", 64 * 1024, test_index_stale);
  ADD ("index/stale-through-manager", 64 * 1024, test_index_stale_manager);
  ADD ("index/bounded", 64 * 1024, test_index_bounded);
  ADD ("index/listed", 64 * 1024, test_index_listed);
  ADD_BARE ("index/listed-pages", test_index_listed_pages);
  ADD_BARE ("index/listing-in-background", test_index_listing_in_background);
  /* last (GTest runs a path's cases, then its groups in the order they
   * were made): the gateway's restart slows bucket changes for a while */
  ADD ("restart/gateway-killed", 64 * 1024, test_gateway_killed);
#undef ADD
#undef ADD_BARE

  status = g_test_run ();
  s3_test_stop_gateway ();
  test_dir_remove (test_dir);
  g_free (test_dir);
  return status;
}
