/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <signal.h>
#include <string.h>
#include <glib/gstdio.h>

#include "kv-chunk-format.h"
#include "kv-redis-slot-map.h"
#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-manager-stack.h"
#include "test-redis-server.h"
#include "test-redis-tier.h"
#include "test-tier-job.h"

/* The redis tier on a standalone redis-server: byte-exact round trips,
 * SET NX, ttl, damaged values (detected, deleted, counted, never loaded),
 * the index of known keys (lookups without EXISTS, stale entries),
 * AUTH and SELECT, bad settings, a server that dies and comes back, Redis
 * evicting under maxmemory, a hostile server's oversized replies, TLS. */

#define N_SLOTS 16

static char *test_dir;
static RedisServer shared_server;   /* most tests: FLUSHALL first */

typedef struct
{
  KvHostBuffer *buffer;
  KvRedisTier  *tier;
  KvKey        *keys[32];
  char         *address;
} Fixture;

static void
setup (Fixture       *f,
       gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *flushed = redis_cli (&shared_server, "FLUSHALL", NULL);

  g_assert_cmpstr (flushed, ==, "OK");
  f->buffer = kv_host_buffer_new (N_SLOTS, REDIS_TEST_SLOT, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    f->keys[i] = test_chunk_key (i);
  f->address = redis_server_address (&shared_server);
}

static void
setup_tier (Fixture       *f,
            gconstpointer  data)
{
  setup (f, data);
  f->tier = redis_test_tier_new (f->buffer, f->address, NULL);
}

static void
teardown (Fixture       *f,
          gconstpointer  data)
{
  redis_test_tier_free (f->tier);
  g_clear_object (&f->buffer);
  for (guint i = 0; i < G_N_ELEMENTS (f->keys); i++)
    kv_key_unref (f->keys[i]);
  g_free (f->address);
}

static guint8 *
slot (Fixture *f,
      guint32  i)
{
  return kv_host_buffer_peek_slot (f->buffer, i);
}

/* Stores keys[first..first+n) from slots 0..n-1 filled with their bytes. */
static KvJobResult *
store_range_with (Fixture     *f,
                  KvRedisTier *tier,
                  guint        first,
                  guint        n)
{
  guint32 slots[8];

  g_assert_cmpuint (n, <=, 8);
  for (guint i = 0; i < n; i++)
    {
      slots[i] = i;
      test_chunk_fill (slot (f, i), REDIS_TEST_SLOT, first + i);
      /* a new writer of the slot: its old checksum no longer holds */
      kv_host_buffer_clear_slot_checksum (f->buffer, i);
    }
  return test_tier_run_job (tier, 0, FALSE, &f->keys[first], slots, n, NULL);
}

static KvJobResult *
store_range (Fixture *f,
             guint    first,
             guint    n)
{
  return store_range_with (f, f->tier, first, n);
}

/* Loads keys[first..first+n) into slots 8.. (zeroed first). */
static KvJobResult *
load_range_with (Fixture     *f,
                 KvRedisTier *tier,
                 guint        first,
                 guint        n)
{
  guint32 slots[8];

  g_assert_cmpuint (n, <=, 8);
  for (guint i = 0; i < n; i++)
    {
      slots[i] = 8 + i;
      memset (slot (f, 8 + i), 0, REDIS_TEST_SLOT);
    }
  return test_tier_run_job (tier, 0, TRUE, &f->keys[first], slots, n, NULL);
}

static KvJobResult *
load_range (Fixture *f,
            guint    first,
            guint    n)
{
  return load_range_with (f, f->tier, first, n);
}

static guint64
counter (Fixture        *f,
         KvRedisCounter  c)
{
  return kv_redis_tier_get_counter (f->tier, c);
}

static char *
key_of (Fixture *f,
        guint    i)
{
  return kv_redis_tier_get_redis_key (f->tier, f->keys[i]);
}

/* ---- round trips --------------------------------------------------------- */

static void
test_round_trip (Fixture       *f,
                 gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autofree char *k0 = key_of (f, 0);
  g_autofree char *strlen0 = NULL;
  g_autofree char *expected_len = g_strdup_printf ("%u", KV_CHUNK_HEADER_SIZE + REDIS_TEST_SLOT);
  gsize hash_len = 0;
  const guint8 *hash = kv_key_get_hash (f->keys[0], &hash_len);
  g_autofree char *hex = NULL;

  g_assert_cmpint (redis_test_lookup (f->tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  stored = store_range (f, 0, 3);
  g_assert_true (kv_job_result_get_success (stored));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (stored), ==, 3 * REDIS_TEST_SLOT);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_STORED_CHUNKS), ==, 3);

  /* the key names the namespace digest, the block hash and the group */
  hex = g_malloc0 (2 * hash_len + 1);
  for (gsize i = 0; i < hash_len; i++)
    g_snprintf (hex + 2 * i, 3, "%02x", hash[i]);
  g_assert_true (g_str_has_prefix (k0, "kvtier:"));
  g_assert_cmpuint (strlen (k0), ==, strlen ("kvtier:") + 64 + 1 + 2 * hash_len + 3);
  g_assert_true (strstr (k0, hex) != NULL);
  g_assert_true (g_str_has_suffix (k0, "_g0"));
  /* the value is the chunk record: header + payload */
  strlen0 = redis_cli (&shared_server, "STRLEN", k0, NULL);
  g_assert_cmpstr (strlen0, ==, expected_len);

  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (redis_test_lookup (f->tier, f->keys[i]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (redis_test_lookup (f->tier, f->keys[3]), ==, KV_LOOKUP_RESULT_MISS);

  loaded = load_range (f, 0, 3);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_cmpint (kv_job_result_get_transfer_bytes (loaded), ==, 3 * REDIS_TEST_SLOT);
  for (guint i = 0; i < 3; i++)
    g_assert_true (test_chunk_check (slot (f, 8 + i), REDIS_TEST_SLOT, i));
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_LOADED_CHUNKS), ==, 3);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_BYTES_READ), ==, 3 * REDIS_TEST_SLOT);
}

/* A store takes the checksum its slot carries instead of hashing the
 * bytes again: a deliberately wrong carried checksum reaches the value's
 * header as it is, and the load refuses the value. A verified load leaves
 * the checksum from the header with its slot, for the next tier. */
static void
test_carried_checksum (Fixture       *f,
                       gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvJobResult) loaded_good = NULL;
  guint32 slot0 = 0;
  guint32 slot9 = 9;
  guint64 carried = 0;

  test_chunk_fill (slot (f, 0), REDIS_TEST_SLOT, 0);
  kv_host_buffer_set_slot_checksum (f->buffer, 0,
                                    kv_chunk_checksum (slot (f, 0), REDIS_TEST_SLOT) ^ 1);
  stored = test_tier_run_job (f->tier, 0, FALSE, &f->keys[0], &slot0, 1, NULL);
  g_assert_true (kv_job_result_get_success (stored));
  g_clear_pointer (&stored, kv_job_result_unref);
  stored = store_range (f, 1, 1);
  g_assert_true (kv_job_result_get_success (stored));

  loaded = load_range (f, 0, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_true (kv_job_result_get_checksum_failed (loaded));
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_CORRUPT_CHUNKS), ==, 1);

  kv_host_buffer_clear_slot_checksum (f->buffer, 9);
  loaded_good = test_tier_run_job (f->tier, 0, TRUE, &f->keys[1], &slot9, 1, NULL);
  g_assert_true (kv_job_result_get_success (loaded_good));
  g_assert_true (test_chunk_check (slot (f, 9), REDIS_TEST_SLOT, 1));
  g_assert_true (kv_host_buffer_get_slot_checksum (f->buffer, 9, &carried));
  g_assert_cmphex (carried, ==, kv_chunk_checksum (slot (f, 9), REDIS_TEST_SLOT));
}

/* Many keys through one pipeline, loaded back in batches. */
static void
test_many_keys (Fixture       *f,
                gconstpointer  data)
{
  for (guint first = 0; first < 32; first += 8)
    {
      g_autoptr(KvJobResult) stored = store_range (f, first, 8);

      g_assert_true (kv_job_result_get_success (stored));
    }
  for (guint first = 0; first < 32; first += 8)
    {
      g_autoptr(KvJobResult) loaded = load_range (f, first, 8);

      g_assert_true (kv_job_result_get_success (loaded));
      for (guint i = 0; i < 8; i++)
        g_assert_true (test_chunk_check (slot (f, 8 + i), REDIS_TEST_SLOT, first + i));
    }
}

/* SET NX: a key already there is skipped, not overwritten. */
static void
test_set_nx_skip (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvJobResult) first = store_range (f, 0, 1);
  g_autoptr(KvJobResult) again = NULL;
  g_autoptr(KvJobResult) loaded = NULL;
  g_autofree char *k1 = key_of (f, 1);
  g_autofree char *set = redis_cli (&shared_server, "SET", k1, "someone else's", NULL);
  g_autofree char *value = NULL;

  g_assert_true (kv_job_result_get_success (first));
  again = store_range (f, 0, 2);
  g_assert_true (kv_job_result_get_success (again));
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_STORED_CHUNKS), ==, 1);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_SKIPPED_CHUNKS), ==, 2);
  value = redis_cli (&shared_server, "GET", k1, NULL);
  g_assert_cmpstr (value, ==, "someone else's");
  loaded = load_range (f, 0, 1);
  g_assert_true (kv_job_result_get_success (loaded));
  g_assert_true (test_chunk_check (slot (f, 8), REDIS_TEST_SLOT, 0));
}

static void
test_ttl (Fixture       *f,
          gconstpointer  data)
{
  g_autoptr(KvRedisTier) tier = redis_test_tier_new (f->buffer, f->address, "ttl-ms", (guint64) 300, NULL);
  g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 1);
  g_autofree char *k0 = kv_redis_tier_get_redis_key (tier, f->keys[0]);
  g_autofree char *pttl = redis_cli (&shared_server, "PTTL", k0, NULL);
  g_autoptr(KvJobResult) loaded = NULL;
  gint64 ms = g_ascii_strtoll (pttl, NULL, 10);

  g_assert_true (kv_job_result_get_success (stored));
  g_assert_cmpint (ms, >, 0);
  g_assert_cmpint (ms, <=, 300);
  g_assert_cmpint (redis_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  g_usleep (450 * 1000);
  g_assert_cmpint (redis_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  loaded = load_range_with (f, tier, 0, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_MISSING_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_CORRUPT_CHUNKS), ==, 0);
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* ---- damaged values ------------------------------------------------------ */

typedef enum {
  DAMAGE_PAYLOAD,     /* bytes of the payload overwritten */
  DAMAGE_HEADER,      /* a byte of the header */
  DAMAGE_TRUNCATED,   /* a shorter value */
  DAMAGE_LONGER,      /* a longer value */
  DAMAGE_OTHER_KEY,   /* another key's value */
  DAMAGE_NAMESPACE,   /* the same key's value from another namespace */
} Damage;

static void
test_damaged_value (Fixture       *f,
                    gconstpointer  data)
{
  Damage damage = GPOINTER_TO_UINT (data);
  g_autoptr(KvJobResult) stored = store_range (f, 0, 2);
  g_autoptr(KvJobResult) loaded = NULL;
  g_autofree char *k0 = key_of (f, 0);
  g_autofree char *k1 = key_of (f, 1);
  g_autofree char *out = NULL;
  g_autofree char *exists = NULL;
  g_autofree char *offset = NULL;

  g_assert_true (kv_job_result_get_success (stored));
  switch (damage)
    {
    case DAMAGE_PAYLOAD:
      offset = g_strdup_printf ("%u", KV_CHUNK_HEADER_SIZE + 100);
      out = redis_cli (&shared_server, "SETRANGE", k0, offset, "garbage", NULL);
      break;
    case DAMAGE_HEADER:
      out = redis_cli (&shared_server, "SETRANGE", k0, "20", "x", NULL);
      break;
    case DAMAGE_TRUNCATED:
      out = redis_cli (&shared_server, "SET", k0, "short", NULL);
      break;
    case DAMAGE_LONGER:
      offset = g_strdup_printf ("%u", KV_CHUNK_HEADER_SIZE + REDIS_TEST_SLOT);
      out = redis_cli (&shared_server, "SETRANGE", k0, offset, "tail", NULL);
      break;
    case DAMAGE_OTHER_KEY:
      out = redis_cli (&shared_server, "COPY", k1, k0, "REPLACE", NULL);
      break;
    case DAMAGE_NAMESPACE:
      {
        g_autoptr(KvRedisTier) other = redis_test_tier_new (f->buffer, f->address,
                                                            "namespace", "another model", NULL);
        g_autoptr(KvJobResult) other_stored = store_range_with (f, other, 0, 1);
        g_autofree char *other_k0 = kv_redis_tier_get_redis_key (other, f->keys[0]);

        g_assert_true (kv_job_result_get_success (other_stored));
        g_assert_cmpstr (other_k0, !=, k0);
        out = redis_cli (&shared_server, "COPY", other_k0, k0, "REPLACE", NULL);
        redis_test_tier_free (g_steal_pointer (&other));
      }
      break;
    default:
      g_assert_not_reached ();
    }
  g_assert_cmpstr (out, !=, "");

  loaded = load_range (f, 0, 2);
  g_assert_false (kv_job_result_get_success (loaded));
  /* key 1 landed, key 0 did not: the partial load lists key 1 alone */
  {
    guint n_landed = 0;
    KvKey * const *landed = kv_job_result_get_successful_keys (loaded, &n_landed);

    g_assert_cmpuint (n_landed, ==, 1);
    g_assert_true (kv_key_equal (landed[0], f->keys[1]));
  }
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_CORRUPT_CHUNKS), ==, 1);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_LOADED_CHUNKS), ==, 1);
  g_assert_true (test_chunk_check (slot (f, 9), REDIS_TEST_SLOT, 1));
  if (damage == DAMAGE_PAYLOAD || damage == DAMAGE_HEADER)
    g_assert_true (kv_job_result_get_checksum_failed (loaded));
  /* deleted: a miss from now on; a data failure, not the server's */
  for (guint i = 0; i < 200; i++)
    {
      g_free (exists);
      exists = redis_cli (&shared_server, "EXISTS", k0, NULL);
      if (g_str_equal (exists, "0"))
        break;
      g_usleep (10000);
    }
  g_assert_cmpstr (exists, ==, "0");
  g_assert_cmpint (redis_test_lookup (f->tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_NODE_ERRORS), ==, 0);
  g_assert_true (kv_circuit_breaker_allows_requests (
                   kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (f->tier))));
}

/* A chunk's redis key is the tier's prefix, its hash in lowercase hex and
 * its group in decimal, the largest group included; the SET lands under
 * that name. */
static void
test_key_names (Fixture       *f,
                gconstpointer  data)
{
  guint8 hash[32];
  g_autoptr(KvKey) key = NULL;
  g_autoptr(KvKey) other = NULL;
  g_autofree char *name = NULL;
  g_autofree char *other_name = NULL;
  g_autofree char *stored_name = NULL;
  g_autofree char *exists = NULL;
  g_autoptr(KvJobResult) stored = NULL;
  const char *suffix = "00112233445566778899aabbccddeeff"
                       "f0e1d2c3b4a5968778695a4b3c2d1e0f_g4294967295";
  gsize prefix_len;

  for (guint i = 0; i < 16; i++)
    hash[i] = (guint8) (i * 0x11);
  for (guint i = 16; i < 32; i++)
    hash[i] = (guint8) (((31 - i) << 4) | (i - 16));
  key = kv_key_new (hash, sizeof hash, G_MAXUINT32);
  other = kv_key_new (hash, sizeof hash, 7);
  name = kv_redis_tier_get_redis_key (f->tier, key);
  other_name = kv_redis_tier_get_redis_key (f->tier, other);
  g_assert_true (g_str_has_suffix (name, suffix));
  prefix_len = strlen (name) - strlen (suffix);
  g_assert_cmpuint (prefix_len, >, 0);
  g_assert_cmpuint (strlen (other_name), ==, prefix_len + 64 + 3);
  g_assert_cmpmem (other_name, prefix_len, name, prefix_len);
  g_assert_cmpstr (other_name + prefix_len + 64, ==, "_g7");

  stored = store_range_with (f, f->tier, 0, 1);
  g_assert_true (kv_job_result_get_success (stored));
  stored_name = kv_redis_tier_get_redis_key (f->tier, f->keys[0]);
  g_assert_cmpmem (stored_name, prefix_len, name, prefix_len);
  exists = redis_cli (&shared_server, "EXISTS", stored_name, NULL);
  g_assert_cmpstr (exists, ==, "1");
}

/* CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384: the values
 * Redis documents, and a bit-at-a-time CRC over random keys. */
static guint16
reference_crc16 (const guint8 *data,
                 gsize         len)
{
  guint16 crc = 0;

  for (gsize i = 0; i < len; i++)
    {
      crc ^= (guint16) data[i] << 8;
      for (guint b = 0; b < 8; b++)
        crc = (crc & 0x8000) ? (guint16) ((crc << 1) ^ 0x1021) : (guint16) (crc << 1);
    }
  return crc;
}

static void
test_key_slot (void)
{
  g_assert_cmpuint (kv_redis_key_slot ("123456789", 9), ==, 0x31c3 % 16384);
  g_assert_cmpuint (kv_redis_key_slot ("somekey", 7), ==, 11058);
  g_assert_cmpuint (kv_redis_key_slot ("foo{hash_tag}", 13), ==, 2515);
  g_assert_cmpuint (kv_redis_key_slot ("bar{hash_tag}", 13), ==, 2515);
  g_assert_cmpuint (kv_redis_key_slot ("{}x", 3), ==, reference_crc16 ((const guint8 *) "{}x", 3) % 16384);
  for (guint i = 0; i < 2000; i++)
    {
      guint8 key[96];
      gsize len = g_test_rand_int_range (1, sizeof key);

      for (gsize b = 0; b < len; b++)
        {
          key[b] = (guint8) g_test_rand_int_range (0, 256);
          if (key[b] == '{')
            key[b] = 'x';
        }
      g_assert_cmpuint (kv_redis_key_slot ((const char *) key, len), ==,
                        reference_crc16 (key, len) % 16384);
    }
}

/* A load of a key never stored fails for that key only; the longest
 * prefix lands. */
static void
test_missing_key (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = store_range (f, 0, 2);
  g_autoptr(KvJobResult) loaded = NULL;
  guint n_ok = 0;

  g_assert_true (kv_job_result_get_success (stored));
  loaded = load_range (f, 0, 3);
  g_assert_false (kv_job_result_get_success (loaded));
  kv_job_result_get_successful_keys (loaded, &n_ok);
  g_assert_cmpuint (n_ok, ==, 2);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_MISSING_CHUNKS), ==, 1);
  g_assert_true (test_chunk_check (slot (f, 8), REDIS_TEST_SLOT, 0));
  g_assert_true (test_chunk_check (slot (f, 9), REDIS_TEST_SLOT, 1));
}

/* A store whose deadline passes is not published: its command still
 * waiting in the tier (behind the node's in-flight budget) is dropped;
 * the one already written from the pinned slot lands. */
static void
test_store_past_deadline (Fixture       *f,
                          gconstpointer  data)
{
  g_autoptr(KvClock) clock = kv_clock_new_manual (1000000);
  g_autoptr(KvRedisTier) tier = redis_test_tier_new (f->buffer, f->address, "clock", clock,
                                                     "deadline-ms", 2000,
                                                     "node-inflight-bytes",
                                                     (guint64) (KV_CHUNK_HEADER_SIZE + REDIS_TEST_SLOT),
                                                     NULL);
  KvSecondaryTier *st = KV_SECONDARY_TIER (tier);
  g_autoptr(KvRequest) request = kv_request_new ("deadline", NULL);
  g_autoptr(KvTransferJob) job = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *paused = redis_cli (&shared_server, "CLIENT", "PAUSE", "1500", "WRITE", NULL);
  g_autofree char *k0 = kv_redis_tier_get_redis_key (tier, f->keys[0]);
  g_autofree char *k1 = kv_redis_tier_get_redis_key (tier, f->keys[1]);
  guint32 slots[2] = { 0, 1 };
  KvJobResult **results;
  gint64 end;

  g_assert_cmpstr (paused, ==, "OK");
  test_chunk_fill (slot (f, 0), REDIS_TEST_SLOT, 0);
  test_chunk_fill (slot (f, 1), REDIS_TEST_SLOT, 1);
  job = kv_transfer_job_new (77, &f->keys[0], slots, 2, FALSE, request);
  g_assert_true (kv_secondary_tier_submit_store (st, job, &error));
  g_assert_no_error (error);
  /* key 0 is written and held by the paused server; key 1 waits for the budget */
  g_usleep (200 * 1000);
  kv_clock_advance (clock, 2000 * 1000);
  results = kv_secondary_tier_get_finished_jobs (st);
  g_assert_nonnull (results[0]);
  g_assert_null (results[1]);
  g_assert_cmpuint (kv_job_result_get_job_id (results[0]), ==, 77);
  g_assert_false (kv_job_result_get_success (results[0]));
  kv_job_result_unref (results[0]);
  g_free (results);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (st), ==, 1);
  /* the slots may hold other bytes now */
  memset (slot (f, 0), 0xee, REDIS_TEST_SLOT);
  memset (slot (f, 1), 0xee, REDIS_TEST_SLOT);

  end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_STORED_CHUNKS) +
         kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_STORE_FAILURES) < 2)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (20 * 1000);
    }
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_STORED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_STORE_FAILURES), ==, 1);
  {
    g_autofree char *e0 = redis_cli (&shared_server, "EXISTS", k0, NULL);
    g_autofree char *e1 = redis_cli (&shared_server, "EXISTS", k1, NULL);

    g_assert_cmpstr (e0, ==, "1");
    g_assert_cmpstr (e1, ==, "0");
  }
  /* what landed is what the slot held before the deadline */
  {
    g_autoptr(KvRedisTier) reader = redis_test_tier_new (f->buffer, f->address, NULL);
    g_autoptr(KvJobResult) loaded = load_range_with (f, reader, 0, 1);

    g_assert_true (kv_job_result_get_success (loaded));
    g_assert_true (test_chunk_check (slot (f, 8), REDIS_TEST_SLOT, 0));
    redis_test_tier_free (g_steal_pointer (&reader));
  }
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* ---- through a KvTieringManager -------------------------------------------- */

static KvSecondaryTier *
make_tier (KvHostBuffer *buffer,
           gpointer      address)
{
  return KV_SECONDARY_TIER (redis_test_tier_new (buffer, address, NULL));
}

/* Cascades from one manager's primary, promotions into it once evicted,
 * and a second manager (another process's view) loading the same chunks. */
static void
test_through_managers (Fixture       *f,
                       gconstpointer  data)
{
  TestStack a = { 0 }, b = { 0 };

  test_stack_init (&a, 8, REDIS_TEST_SLOT, make_tier, f->address);
  test_stack_store (&a, 0, 4);
  test_stack_store (&a, 4, 4);
  test_stack_store (&a, 8, 4);
  g_assert_cmpuint (kv_redis_tier_get_counter (KV_REDIS_TIER (a.tier), KV_REDIS_COUNTER_STORED_CHUNKS), ==, 12);
  /* keys 0 and 1 left the 8-slot primary and come back from redis */
  g_assert_cmpint (kv_primary_tier_lookup (a.primary, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (test_stack_promote (&a, 0), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&a, 1), ==, KV_LOOKUP_RESULT_HIT);
  test_stack_clear (&a);

  test_stack_init (&b, 8, REDIS_TEST_SLOT, make_tier, f->address);
  for (guint i = 0; i < 12; i += 3)
    g_assert_cmpint (test_stack_promote (&b, i), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&b, 20), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_redis_tier_get_counter (KV_REDIS_TIER (b.tier), KV_REDIS_COUNTER_LOADED_CHUNKS), ==, 4);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (b.manager), ==, 0);
  test_stack_clear (&b);
}

/* ---- the index of known keys ------------------------------------------------ */

/* The EXISTS commands the shared server has run (INFO commandstats). */
static guint64
exists_calls (void)
{
  g_autofree char *info = redis_cli (&shared_server, "INFO", "commandstats", NULL);
  const char *line = strstr (info, "cmdstat_exists:calls=");

  if (line == NULL)
    return 0;
  return g_ascii_strtoull (line + strlen ("cmdstat_exists:calls="), NULL, 10);
}

/* A lookup of @key by @tier answers @expected after sending @n_exists
 * EXISTS commands to the server. */
static void
assert_lookup (KvRedisTier    *tier,
               KvKey          *key,
               KvLookupResult  expected,
               guint           n_exists)
{
  guint64 before = exists_calls ();

  g_assert_cmpint (redis_test_lookup (tier, key), ==, expected);
  g_assert_cmpuint (exists_calls () - before, ==, n_exists);
}

/* Keys this tier stored are looked up without an EXISTS, then load
 * byte-exact; a key it never stored is an EXISTS's MISS, every time;
 * another writer's key is an EXISTS's HIT, then indexed. A SET NX that
 * finds the key there indexes it too. */
static void
test_index_stored (Fixture       *f,
                   gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = store_range (f, 0, 3);
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvRedisTier) other = NULL;
  g_autoptr(KvJobResult) other_stored = NULL;
  g_autoptr(KvJobResult) skipped = NULL;

  g_assert_true (kv_job_result_get_success (stored));
  g_assert_cmpuint (kv_redis_tier_get_index_size (f->tier), ==, 3);
  for (guint i = 0; i < 3; i++)
    assert_lookup (f->tier, f->keys[i], KV_LOOKUP_RESULT_HIT, 0);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_INDEX_HITS), ==, 3);
  loaded = load_range (f, 0, 3);
  g_assert_true (kv_job_result_get_success (loaded));
  for (guint i = 0; i < 3; i++)
    g_assert_true (test_chunk_check (slot (f, 8 + i), REDIS_TEST_SLOT, i));
  g_assert_cmpuint (kv_redis_tier_get_index_size (f->tier), ==, 3);
  /* never stored: an EXISTS, a miss, not indexed */
  assert_lookup (f->tier, f->keys[3], KV_LOOKUP_RESULT_MISS, 1);
  assert_lookup (f->tier, f->keys[3], KV_LOOKUP_RESULT_MISS, 1);

  /* stored by another tier on the server: found by an EXISTS, then known */
  other = redis_test_tier_new (f->buffer, f->address, NULL);
  other_stored = store_range_with (f, other, 4, 2);
  g_assert_true (kv_job_result_get_success (other_stored));
  assert_lookup (f->tier, f->keys[4], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (f->tier, f->keys[4], KV_LOOKUP_RESULT_HIT, 0);
  g_assert_cmpuint (kv_redis_tier_get_index_size (f->tier), ==, 4);
  /* the other's key 5, stored again here: skipped by NX, and known */
  skipped = store_range_with (f, f->tier, 5, 1);
  g_assert_true (kv_job_result_get_success (skipped));
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_SKIPPED_CHUNKS), ==, 1);
  assert_lookup (f->tier, f->keys[5], KV_LOOKUP_RESULT_HIT, 0);
  /* key 4's first lookup counts too: its EXISTS indexed the key, and the
   * retry that followed RETRY was answered by the index */
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_INDEX_HITS), ==, 6);
  redis_test_tier_free (g_steal_pointer (&other));

  /* shut down: the index is emptied */
  g_assert_true (kv_secondary_tier_shutdown (KV_SECONDARY_TIER (f->tier), NULL));
  g_assert_cmpuint (kv_redis_tier_get_index_size (f->tier), ==, 0);
}

/* An indexed key deleted behind the tier's back (another node, an
 * operator, maxmemory): the lookup says HIT, the load finds it missing
 * (reported once, counted, not the server's fault), and the next lookup
 * sends an EXISTS and says MISS. */
static void
test_index_stale (Fixture       *f,
                  gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = store_range (f, 0, 2);
  g_autoptr(KvJobResult) loaded = NULL;
  g_autoptr(KvJobResult) still = NULL;
  g_autofree char *k0 = key_of (f, 0);
  g_autofree char *deleted = NULL;
  guint n_landed = 0;

  g_assert_true (kv_job_result_get_success (stored));
  deleted = redis_cli (&shared_server, "DEL", k0, NULL);
  g_assert_cmpstr (deleted, ==, "1");

  assert_lookup (f->tier, f->keys[0], KV_LOOKUP_RESULT_HIT, 0);
  /* test_tier_run_job checks that the job is reported, once */
  loaded = load_range (f, 0, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_null (kv_job_result_get_successful_keys (loaded, &n_landed));
  g_assert_cmpuint (n_landed, ==, 0);
  g_assert_false (kv_job_result_get_checksum_failed (loaded));
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_MISSING_CHUNKS), ==, 1);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_LOAD_FAILURES), ==, 1);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_INDEX_STALE_KEYS), ==, 1);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_CORRUPT_CHUNKS), ==, 0);
  g_assert_cmpuint (kv_redis_tier_get_index_size (f->tier), ==, 1);
  /* missing is the data's failure, not the server's */
  g_assert_true (kv_circuit_breaker_allows_requests (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (f->tier))));
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (KV_SECONDARY_TIER (f->tier)), ==, 0);

  assert_lookup (f->tier, f->keys[0], KV_LOOKUP_RESULT_MISS, 1);
  assert_lookup (f->tier, f->keys[1], KV_LOOKUP_RESULT_HIT, 0);
  still = load_range (f, 1, 1);
  g_assert_true (kv_job_result_get_success (still));
  g_assert_true (test_chunk_check (slot (f, 8), REDIS_TEST_SLOT, 1));
  /* a missing key not in the index is no stale entry */
  g_clear_pointer (&loaded, kv_job_result_unref);
  loaded = load_range (f, 0, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_MISSING_CHUNKS), ==, 2);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_INDEX_STALE_KEYS), ==, 1);
}

static KvSecondaryTier *
make_tier (KvHostBuffer *buffer,
           gpointer      address);

/* The same through a manager: the promotion of a stale entry fails, the
 * manager answers a miss, no slot stays pinned, no job is left. */
static void
test_index_stale_manager (Fixture       *f,
                          gconstpointer  data)
{
  TestStack a = { 0 }, b = { 0 };
  g_autofree char *k1 = NULL;
  g_autofree char *deleted = NULL;
  KvRedisTier *tier_b;

  test_stack_init (&a, 8, REDIS_TEST_SLOT, make_tier, f->address);
  test_stack_init (&b, 8, REDIS_TEST_SLOT, make_tier, f->address);
  tier_b = KV_REDIS_TIER (b.tier);
  g_assert_cmpuint (test_stack_store (&a, 0, 2), ==, 2);
  /* b finds both by EXISTS, and indexes them; one is deleted after */
  assert_lookup (tier_b, f->keys[0], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (tier_b, f->keys[1], KV_LOOKUP_RESULT_HIT, 1);
  k1 = kv_redis_tier_get_redis_key (tier_b, f->keys[1]);
  deleted = redis_cli (&shared_server, "DEL", k1, NULL);
  g_assert_cmpstr (deleted, ==, "1");

  g_assert_cmpint (test_stack_promote (&b, 1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier_b, KV_REDIS_COUNTER_INDEX_STALE_KEYS), ==, 1);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier_b, KV_REDIS_COUNTER_MISSING_CHUNKS), ==, 1);
  test_stack_assert_no_pins (&b, 2);
  /* then an EXISTS's miss; the other one is promoted from the index */
  g_assert_cmpint (test_stack_promote (&b, 1), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (test_stack_promote (&b, 0), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier_b, KV_REDIS_COUNTER_LOADED_CHUNKS), ==, 1);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier_b, KV_REDIS_COUNTER_INDEX_STALE_KEYS), ==, 1);
  test_stack_assert_no_pins (&b, 2);
  test_stack_clear (&a);
  test_stack_clear (&b);
}

/* An indexed key whose value is overwritten with garbage behind the
 * tier's back: the lookup says HIT, the load fails, the tier deletes the
 * value and forgets the key: its next lookup sends an EXISTS. */
static void
test_index_damaged (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = store_range (f, 0, 2);
  g_autoptr(KvJobResult) loaded = NULL;
  g_autofree char *k0 = key_of (f, 0);
  g_autofree char *set = NULL;
  g_autofree char *exists = NULL;
  gint64 end;

  g_assert_true (kv_job_result_get_success (stored));
  set = redis_cli (&shared_server, "SET", k0, "garbage", NULL);
  g_assert_cmpstr (set, ==, "OK");

  assert_lookup (f->tier, f->keys[0], KV_LOOKUP_RESULT_HIT, 0);
  loaded = load_range (f, 0, 1);
  g_assert_false (kv_job_result_get_success (loaded));
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_CORRUPT_CHUNKS), ==, 1);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_INDEX_STALE_KEYS), ==, 0);
  g_assert_cmpuint (kv_redis_tier_get_index_size (f->tier), ==, 1);
  /* the DEL is sent after the load is reported */
  end = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  do
    {
      g_free (exists);
      exists = redis_cli (&shared_server, "EXISTS", k0, NULL);
    }
  while (g_strcmp0 (exists, "0") != 0 && g_get_monotonic_time () < end);
  g_assert_cmpstr (exists, ==, "0");
  assert_lookup (f->tier, f->keys[0], KV_LOOKUP_RESULT_MISS, 1);
  assert_lookup (f->tier, f->keys[1], KV_LOOKUP_RESULT_HIT, 0);
}

/* index-max-keys = 0: every lookup an EXISTS; = 2: the third key stored
 * is not indexed, and found by an EXISTS every time. */
static void
test_index_bounded (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(KvRedisTier) off = redis_test_tier_new (f->buffer, f->address, "index-max-keys", 0u, NULL);
  g_autoptr(KvRedisTier) two = NULL;
  g_autoptr(KvJobResult) stored = store_range_with (f, off, 0, 3);

  g_assert_true (kv_job_result_get_success (stored));
  g_assert_cmpuint (kv_redis_tier_get_index_size (off), ==, 0);
  for (guint round = 0; round < 2; round++)
    for (guint i = 0; i < 3; i++)
      assert_lookup (off, f->keys[i], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (off, f->keys[3], KV_LOOKUP_RESULT_MISS, 1);
  g_assert_cmpuint (kv_redis_tier_get_counter (off, KV_REDIS_COUNTER_INDEX_HITS), ==, 0);
  redis_test_tier_free (g_steal_pointer (&off));

  two = redis_test_tier_new (f->buffer, f->address, "index-max-keys", 2u, NULL);
  /* one job each, so that the first two are the ones indexed (NX finds
   * them there: a skipped store indexes its key too) */
  for (guint i = 0; i < 3; i++)
    {
      g_autoptr(KvJobResult) again = store_range_with (f, two, i, 1);

      g_assert_true (kv_job_result_get_success (again));
    }
  g_assert_cmpuint (kv_redis_tier_get_index_size (two), ==, 2);
  assert_lookup (two, f->keys[0], KV_LOOKUP_RESULT_HIT, 0);
  assert_lookup (two, f->keys[1], KV_LOOKUP_RESULT_HIT, 0);
  assert_lookup (two, f->keys[2], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (two, f->keys[2], KV_LOOKUP_RESULT_HIT, 1);
  redis_test_tier_free (g_steal_pointer (&two));
}

/* With a ttl, keys expire by themselves: the tier keeps no index, every
 * lookup sends its EXISTS, and an expired key is a plain miss. */
static void
test_index_ttl (Fixture       *f,
                gconstpointer  data)
{
  g_autoptr(KvRedisTier) tier = redis_test_tier_new (f->buffer, f->address, "ttl-ms", (guint64) 300, NULL);
  g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 1);
  guint max_keys = 0;

  g_assert_true (kv_job_result_get_success (stored));
  g_object_get (tier, "index-max-keys", &max_keys, NULL);
  g_assert_cmpuint (max_keys, ==, 1u << 20);
  g_assert_cmpuint (kv_redis_tier_get_index_size (tier), ==, 0);
  assert_lookup (tier, f->keys[0], KV_LOOKUP_RESULT_HIT, 1);
  assert_lookup (tier, f->keys[0], KV_LOOKUP_RESULT_HIT, 1);
  g_usleep (450 * 1000);
  assert_lookup (tier, f->keys[0], KV_LOOKUP_RESULT_MISS, 1);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_INDEX_HITS), ==, 0);
  redis_test_tier_free (g_steal_pointer (&tier));
}

/* While the server is unreachable, indexed keys are looked up with an
 * EXISTS (a MISS), not answered HIT for a load bound to fail; the tier's
 * breaker, set out of the way here, is not what answers. */
static void
test_index_server_down (Fixture       *f,
                        gconstpointer  data)
{
  g_autofree char *dir = g_build_filename (test_dir, "index-down", NULL);
  RedisServer server = { 0 };
  g_autofree char *address = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  g_autofree char *label = NULL;
  const char *labels[] = { NULL, NULL };
  gint64 end;
  gdouble down = 0;

  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  redis_server_start (&server, dir, NULL);
  address = redis_server_address (&server);
  tier = redis_test_tier_new (f->buffer, address, "breaker-threshold", 1000, NULL);
  label = kv_secondary_tier_dup_metric_label (KV_SECONDARY_TIER (tier));
  labels[0] = label;
  {
    g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 2);

    g_assert_true (kv_job_result_get_success (stored));
  }
  g_assert_cmpint (redis_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_INDEX_HITS), ==, 1);

  redis_server_stop (&server, TRUE);
  /* the tier sees its connection closed */
  end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (down < 1)
    {
      g_autoptr(KvStats) stats = kv_secondary_tier_get_stats (KV_SECONDARY_TIER (tier));

      g_assert_cmpint (g_get_monotonic_time (), <, end);
      g_usleep (20 * 1000);
      g_assert_true (kv_stats_lookup (stats, "kvtier_redis_servers_down", labels, &down));
    }
  g_assert_cmpint (redis_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (redis_test_lookup (tier, f->keys[1]), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_INDEX_HITS), ==, 1);
  /* the keys are still known, for when the server answers again */
  g_assert_cmpuint (kv_redis_tier_get_index_size (tier), ==, 2);
  g_assert_true (kv_circuit_breaker_allows_requests (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (tier))));
  redis_test_tier_free (g_steal_pointer (&tier));
  redis_server_clear (&server);
}

/* The gauge of the index's keys, with the tier's label. */
static void
test_index_metrics (Fixture       *f,
                    gconstpointer  data)
{
  g_autoptr(KvJobResult) stored = store_range (f, 0, 3);
  g_autoptr(KvMetricRegistry) registry = kv_metric_registry_new ();
  g_autoptr(KvStats) stats = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *label = kv_secondary_tier_dup_metric_label (KV_SECONDARY_TIER (f->tier));
  const char *labels[] = { label, NULL };
  gdouble value = -1;

  g_assert_true (kv_job_result_get_success (stored));
  g_assert_true (kv_secondary_tier_register_metrics (KV_SECONDARY_TIER (f->tier), registry, &error));
  g_assert_no_error (error);
  g_assert_true (kv_metric_registry_has_metric (registry, "kvtier_redis_index_keys"));
  g_assert_true (kv_metric_registry_has_metric (registry, "kvtier_redis_index_hits"));
  g_assert_true (kv_metric_registry_has_metric (registry, "kvtier_redis_index_stale_keys"));
  stats = kv_secondary_tier_get_stats (KV_SECONDARY_TIER (f->tier));
  g_assert_true (kv_stats_lookup (stats, "kvtier_redis_index_keys", labels, &value));
  g_assert_cmpfloat (value, ==, 3);
  g_clear_object (&stats);
  g_assert_cmpint (redis_test_lookup (f->tier, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  stats = kv_secondary_tier_get_stats (KV_SECONDARY_TIER (f->tier));
  g_assert_true (kv_stats_lookup (stats, "kvtier_redis_index_hits", labels, &value));
  g_assert_cmpfloat (value, ==, 1);
}

/* ---- connection settings ------------------------------------------------- */

static void
test_select_database (Fixture       *f,
                      gconstpointer  data)
{
  g_autoptr(KvRedisTier) tier = redis_test_tier_new (f->buffer, f->address, "database", 3, NULL);
  g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 1);
  g_autofree char *k0 = kv_redis_tier_get_redis_key (tier, f->keys[0]);
  g_autofree char *in_0 = redis_cli (&shared_server, "EXISTS", k0, NULL);
  g_autofree char *in_3 = redis_cli (&shared_server, "-n", "3", "EXISTS", k0, NULL);

  g_assert_true (kv_job_result_get_success (stored));
  g_assert_cmpstr (in_0, ==, "0");
  g_assert_cmpstr (in_3, ==, "1");
  redis_test_tier_free (g_steal_pointer (&tier));
}

static void
test_auth (Fixture       *f,
           gconstpointer  data)
{
  g_autofree char *dir = g_build_filename (test_dir, "auth", NULL);
  const char *extra[] = { "--requirepass", "s3cret", NULL };
  RedisServer server = { 0 };
  g_autofree char *address = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  g_autofree char *acl = NULL;

  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  server.password = g_strdup ("s3cret");
  redis_server_start (&server, dir, extra);
  address = redis_server_address (&server);

  /* no password: refused, and the error names the server */
  tier = redis_test_tier_new_full (f->buffer, address, &error, NULL);
  g_assert_null (tier);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, address));
  g_assert_nonnull (strstr (error->message, "NOAUTH"));
  g_clear_error (&error);

  /* a wrong password */
  tier = redis_test_tier_new_full (f->buffer, address, &error, "password", "wrong", NULL);
  g_assert_null (tier);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, address));
  g_assert_nonnull (strstr (error->message, "WRONGPASS"));
  g_clear_error (&error);

  /* the right one */
  tier = redis_test_tier_new (f->buffer, address, "password", "s3cret", NULL);
  {
    g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 1);
    g_autoptr(KvJobResult) loaded = load_range_with (f, tier, 0, 1);

    g_assert_true (kv_job_result_get_success (stored));
    g_assert_true (kv_job_result_get_success (loaded));
    g_assert_true (test_chunk_check (slot (f, 8), REDIS_TEST_SLOT, 0));
  }
  redis_test_tier_free (g_steal_pointer (&tier));

  /* an ACL user */
  acl = redis_cli (&server, "ACL", "SETUSER", "kv", "on", ">kvpass", "~kvtier:*", "+@all", NULL);
  g_assert_cmpstr (acl, ==, "OK");
  tier = redis_test_tier_new_full (f->buffer, address, &error, "username", "kv",
                                   "password", "s3cret", NULL);
  g_assert_null (tier);
  g_assert_nonnull (strstr (error->message, "WRONGPASS"));
  g_clear_error (&error);
  tier = redis_test_tier_new (f->buffer, address, "username", "kv", "password", "kvpass", NULL);
  {
    g_autoptr(KvJobResult) stored = store_range_with (f, tier, 1, 1);

    g_assert_true (kv_job_result_get_success (stored));
  }
  redis_test_tier_free (g_steal_pointer (&tier));
  redis_server_clear (&server);
}

static void
test_bad_settings (Fixture       *f,
                   gconstpointer  data)
{
  struct {
    const char *servers;
    const char *property;
    guint       value;
    const char *expected;
  } cases[] = {
    { "no-port", NULL, 0, "no-port" },
    { "127.0.0.1:0", NULL, 0, "127.0.0.1:0" },
    { "127.0.0.1:1,127.0.0.1:2", NULL, 0, "cluster=true" },
    { "127.0.0.1:1", "read-from-replicas", TRUE, "read-from-replicas" },
    { "127.0.0.1:1", "node-inflight-bytes", 100, "node-inflight-bytes" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(KvRedisTier) tier = NULL;

      if (cases[i].property == NULL)
        tier = redis_test_tier_new_full (f->buffer, cases[i].servers, &error, NULL);
      else if (g_str_equal (cases[i].property, "node-inflight-bytes"))
        tier = redis_test_tier_new_full (f->buffer, cases[i].servers, &error,
                                         cases[i].property, (guint64) cases[i].value, NULL);
      else
        tier = redis_test_tier_new_full (f->buffer, cases[i].servers, &error,
                                         cases[i].property, cases[i].value, NULL);
      g_assert_null (tier);
      g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, cases[i].expected));
    }
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(KvRedisTier) tier = redis_test_tier_new_full (f->buffer, "127.0.0.1:1", &error,
                                                            "cluster", TRUE, "database", 2, NULL);

    g_assert_null (tier);
    g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  }
}

/* Nothing listens: construction fails, naming the address. */
static void
test_unreachable (Fixture       *f,
                  gconstpointer  data)
{
  guint port = redis_test_free_port ();
  g_autofree char *address = g_strdup_printf ("127.0.0.1:%u", port);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvRedisTier) tier = redis_test_tier_new_full (f->buffer, address, &error, NULL);

  g_assert_null (tier);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, address));
}

/* ---- failures ------------------------------------------------------------ */

/* The server dies: jobs fail (counted, each reported once, no hang), the
 * breaker opens, lookups answer MISS; it comes back on the same port and
 * service resumes. */
static void
test_server_dies (Fixture       *f,
                  gconstpointer  data)
{
  g_autofree char *dir = g_build_filename (test_dir, "dies", NULL);
  RedisServer server = { 0 };
  g_autofree char *address = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  KvCircuitBreaker *breaker;
  guint port;

  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  redis_server_start (&server, dir, NULL);
  port = server.port;
  address = redis_server_address (&server);
  tier = redis_test_tier_new (f->buffer, address, "breaker-threshold", 3,
                              "breaker-open-ms", 200, "deadline-ms", 2000, NULL);
  breaker = kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (tier));
  {
    g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 4);

    g_assert_true (kv_job_result_get_success (stored));
  }
  redis_server_stop (&server, TRUE);
  for (guint i = 0; i < 4; i++)
    {
      g_autoptr(KvJobResult) loaded = load_range_with (f, tier, 0, 2);

      g_assert_false (kv_job_result_get_success (loaded));
    }
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS), >=, 4);
  g_assert_cmpuint (kv_secondary_tier_get_n_expired_jobs (KV_SECONDARY_TIER (tier)), ==, 0);
  g_assert_false (kv_circuit_breaker_allows_requests (breaker));
  g_assert_cmpint (redis_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);

  /* back (empty: no persistence); a probe closes the breaker */
  redis_server_start_on (&server, dir, port, NULL);
  {
    gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
    gboolean stored_ok = FALSE;

    while (!stored_ok)
      {
        g_assert_cmpint (g_get_monotonic_time (), <, end);
        g_usleep (50000);
        /* a lookup runs the probe once the breaker's interval passed */
        redis_test_lookup (tier, f->keys[0]);
        if (kv_circuit_breaker_allows_requests (breaker))
          {
            g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 2);

            stored_ok = kv_job_result_get_success (stored);
          }
      }
  }
  {
    g_autoptr(KvJobResult) loaded = load_range_with (f, tier, 0, 2);

    g_assert_true (kv_job_result_get_success (loaded));
    g_assert_true (test_chunk_check (slot (f, 8), REDIS_TEST_SLOT, 0));
    g_assert_true (test_chunk_check (slot (f, 9), REDIS_TEST_SLOT, 1));
  }
  redis_test_tier_free (g_steal_pointer (&tier));
  redis_server_clear (&server);
}

/* Lookups while the server is down: every EXISTS of a batch fails at once,
 * on the I/O thread, often after the lookup worker gave up waiting for it
 * (a 1 ms deadline). The batch stays alive while its dispatch still walks
 * it (it was freed under lookup_dispatch(): a use-after-free, then a crash
 * in format_key_op()). Several one-key requests per step: one batch each. */
static void
test_lookups_node_down (Fixture       *f,
                        gconstpointer  data)
{
  g_autofree char *dir = g_build_filename (test_dir, "lookups-down", NULL);
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  RedisServer server = { 0 };
  g_autofree char *address = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  KvSecondaryTier *st;
  guint n_miss = 0;

  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  redis_server_start (&server, dir, NULL);
  address = redis_server_address (&server);
  tier = redis_test_tier_new (f->buffer, address, "deadline-ms", 1, "breaker-threshold", 2,
                              "breaker-open-ms", 60000, NULL);
  st = KV_SECONDARY_TIER (tier);
  redis_server_stop (&server, TRUE);

  for (guint round = 0; round < 150; round++)
    {
      KvRequest *requests[8];
      gboolean known[8] = { FALSE, };
      guint n_known = 0;
      gint64 until = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

      for (guint r = 0; r < G_N_ELEMENTS (requests); r++)
        {
          g_autofree char *id = g_strdup_printf ("down-%u-%u", round, r);

          requests[r] = kv_request_new (id, NULL);
        }
      while (n_known < G_N_ELEMENTS (requests))
        {
          g_assert_cmpint (g_get_monotonic_time (), <, until);
          for (guint r = 0; r < G_N_ELEMENTS (requests); r++)
            if (!known[r])
              {
                KvLookupResult result = kv_secondary_tier_lookup (st, f->keys[r], requests[r]);

                if (result != KV_LOOKUP_RESULT_RETRY)
                  {
                    /* nothing is there to find */
                    g_assert_cmpint (result, ==, KV_LOOKUP_RESULT_MISS);
                    known[r] = TRUE;
                    n_known++;
                    n_miss++;
                  }
              }
          kv_secondary_tier_on_schedule_end (st, end);
          g_usleep (200);
        }
      for (guint r = 0; r < G_N_ELEMENTS (requests); r++)
        {
          kv_secondary_tier_on_request_finished (st, requests[r]);
          g_object_unref (requests[r]);
        }
    }
  g_assert_cmpuint (n_miss, ==, 150 * 8);
  redis_test_tier_free (g_steal_pointer (&tier));
  redis_server_clear (&server);
}

/* Redis evicts under maxmemory: evicted keys are plain misses, with no
 * error storm and no open breaker. The tier stored every key, so its index
 * answers HIT for all of them: an evicted key's load fails as missing
 * (a stale entry, removed), and its next lookup, an EXISTS, misses. */
static void
test_maxmemory_evicts (Fixture       *f,
                       gconstpointer  data)
{
  g_autofree char *dir = g_build_filename (test_dir, "maxmemory", NULL);
  const char *extra[] = { "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru", NULL };
  RedisServer server = { 0 };
  g_autofree char *address = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  g_autoptr(KvHostBuffer) big = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *evicted = NULL;
  KvKey *keys[64];
  guint n_hit = 0, n_loaded = 0, n_hit_again = 0;
  const gsize chunk = 64 * 1024;

  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  redis_server_start (&server, dir, extra);
  address = redis_server_address (&server);
  big = kv_host_buffer_new (8, chunk, &error);
  g_assert_no_error (error);
  tier = redis_test_tier_new (big, address, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    keys[i] = test_chunk_key (1000 + i);

  /* 64 × 68 KiB into 3 MB */
  for (guint first = 0; first < G_N_ELEMENTS (keys); first += 8)
    {
      guint32 slots[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
      g_autoptr(KvJobResult) stored = NULL;

      for (guint i = 0; i < 8; i++)
        test_chunk_fill (kv_host_buffer_peek_slot (big, i), chunk, 1000 + first + i);
      stored = test_tier_run_job (tier, 0, FALSE, &keys[first], slots, 8, NULL);
      g_assert_true (kv_job_result_get_success (stored));
    }
  evicted = redis_cli (&server, "INFO", "stats", NULL);
  g_assert_nonnull (strstr (evicted, "evicted_keys:"));
  g_assert_null (strstr (evicted, "evicted_keys:0\r"));

  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    {
      guint32 slot0 = 0;

      if (redis_test_lookup (tier, keys[i]) == KV_LOOKUP_RESULT_HIT)
        n_hit++;
      {
        g_autoptr(KvJobResult) loaded = test_tier_run_job (tier, 0, TRUE, &keys[i], &slot0, 1, NULL);

        if (kv_job_result_get_success (loaded))
          {
            n_loaded++;
            g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (big, 0), chunk, 1000 + i));
          }
      }
    }
  g_assert_cmpuint (n_hit, ==, G_N_ELEMENTS (keys));
  g_assert_cmpuint (n_loaded, >, 0);
  g_assert_cmpuint (n_loaded, <, G_N_ELEMENTS (keys));
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_MISSING_CHUNKS), ==,
                    G_N_ELEMENTS (keys) - n_loaded);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_INDEX_STALE_KEYS), ==,
                    G_N_ELEMENTS (keys) - n_loaded);
  g_assert_cmpuint (kv_redis_tier_get_index_size (tier), ==, n_loaded);
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    if (redis_test_lookup (tier, keys[i]) == KV_LOOKUP_RESULT_HIT)
      n_hit_again++;
  g_assert_cmpuint (n_hit_again, ==, n_loaded);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS), ==, 0);
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_ERROR_REPLIES), ==, 0);
  g_assert_true (kv_circuit_breaker_allows_requests (
                   kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (tier))));
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    kv_key_unref (keys[i]);
  redis_test_tier_free (g_steal_pointer (&tier));
  redis_server_clear (&server);
}

/* ---- a server that stops reading ----------------------------------------- */

static gpointer
continue_later (gpointer data)
{
  RedisServer *server = data;

  g_usleep (300 * G_TIME_SPAN_MILLISECOND);
  g_assert_cmpint (kill (server->pid, SIGCONT), ==, 0);
  return NULL;
}

/* 16 MiB of stores and loads with the server stopped (SIGSTOP) for the
 * first 300 ms: more than the sockets buffer, so the writes stop part
 * way through a batch (a vector written in part) and wait for room, and
 * the loads for bytes; every value lands whole and loads byte-exact. */
static void
test_server_stops_reading (Fixture       *f,
                           gconstpointer  data)
{
  g_autofree char *dir = g_build_filename (test_dir, "stops-reading", NULL);
  RedisServer server = { 0 };
  g_autofree char *address = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  g_autoptr(KvHostBuffer) big = NULL;
  g_autoptr(GError) error = NULL;
  KvKey *keys[64];
  guint32 slots[64];
  const gsize chunk = 256 * 1024;

  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  redis_server_start (&server, dir, NULL);
  address = redis_server_address (&server);
  big = kv_host_buffer_new (G_N_ELEMENTS (keys), chunk, &error);
  g_assert_no_error (error);
  tier = redis_test_tier_new (big, address, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    {
      keys[i] = test_chunk_key (2000 + i);
      slots[i] = i;
      test_chunk_fill (kv_host_buffer_peek_slot (big, i), chunk, 2000 + i);
    }

  for (guint pass = 0; pass < 2; pass++)
    {
      g_autoptr(KvJobResult) result = NULL;
      GThread *thread;
      gint64 start;

      if (pass == 1)
        for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
          memset (kv_host_buffer_peek_slot (big, i), 0, chunk);
      g_assert_cmpint (kill (server.pid, SIGSTOP), ==, 0);
      start = g_get_monotonic_time ();
      thread = g_thread_new ("continue-later", continue_later, &server);
      result = test_tier_run_job (tier, 0, pass == 1, keys, slots, G_N_ELEMENTS (keys), NULL);
      g_thread_join (thread);
      g_assert_true (kv_job_result_get_success (result));
      /* it waited for the server (a lower bound only) */
      g_assert_cmpint (g_get_monotonic_time () - start, >=, 300 * G_TIME_SPAN_MILLISECOND);
    }
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    g_assert_true (test_chunk_check (kv_host_buffer_peek_slot (big, i), chunk, 2000 + i));
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_STORED_CHUNKS), ==,
                    G_N_ELEMENTS (keys));
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS), ==, 0);

  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    kv_key_unref (keys[i]);
  redis_test_tier_free (g_steal_pointer (&tier));
  redis_server_clear (&server);
}

/* ---- a hostile server ---------------------------------------------------- */

typedef struct
{
  GSocket    *listener;
  guint       port;
  const char *get_reply;     /* sent for a GET */
  const char *exists_reply;  /* sent for an EXISTS */
  GThread    *thread;
  gboolean    client_left_open; /* a client kept its socket 10 s unused */
  guint       trickle_ms;       /* replies but the first PING's: a byte every trickle_ms */
  gint        n_accepted;       /* (atomic) */
  gint        n_dropped;        /* (atomic) connections the client closed while it trickled */
} FakeServer;

/* Sends @reply a byte at a time; FALSE once the client is gone. */
static gboolean
fake_trickle (FakeServer  *fake,
              GSocket     *client,
              const char  *reply,
              gsize        len)
{
  for (gsize i = 0; i < len; i++)
    {
      g_usleep (fake->trickle_ms * 1000);
      if (g_socket_send (client, reply + i, 1, NULL, NULL) != 1)
        return FALSE;
    }
  return TRUE;
}

/* Answers PING with PONG, GET and EXISTS with the canned replies, one
 * connection at a time, until the listener closes. */
static gpointer
fake_server_main (gpointer data)
{
  FakeServer *fake = data;

  for (;;)
    {
      g_autoptr(GSocket) client = g_socket_accept (fake->listener, NULL, NULL);
      char buf[4096];
      gssize n;

      g_autoptr(GError) error = NULL;

      gboolean gone = FALSE;

      if (client == NULL)
        return NULL;
      g_atomic_int_inc (&fake->n_accepted);
      g_socket_set_timeout (client, 10);
      while (!gone && (n = g_socket_receive (client, buf, sizeof buf - 1, NULL, &error)) > 0)
        {
          buf[n] = '\0';
          /* every command of the chunk read answered, in order */
          for (char *p = buf; !gone && (p = strstr (p, "*")) != NULL; p++)
            {
              const char *reply = NULL;
              gboolean ping = FALSE;

              if (strncmp (p + 1, "1\r\n$4\r\nPING", 11) == 0)
                {
                  reply = "+PONG\r\n";
                  ping = TRUE;
                }
              else if (strncmp (p + 1, "2\r\n$3\r\nGET", 10) == 0)
                reply = fake->get_reply;
              else if (strncmp (p + 1, "2\r\n$6\r\nEXISTS", 13) == 0)
                reply = fake->exists_reply;
              if (reply == NULL)
                continue;
              if (fake->trickle_ms > 0 && !ping)
                {
                  gone = !fake_trickle (fake, client, reply, strlen (reply));
                  if (gone)
                    g_atomic_int_inc (&fake->n_dropped);
                }
              else
                g_socket_send (client, reply, strlen (reply), NULL, NULL);
            }
        }
      if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT))
        fake->client_left_open = TRUE;
    }
}

static void
fake_server_start (FakeServer *fake)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
  g_autoptr(GSocketAddress) bound = NULL;

  fake->listener = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                 G_SOCKET_PROTOCOL_TCP, &error);
  g_assert_no_error (error);
  g_assert_true (g_socket_bind (fake->listener, any, TRUE, &error));
  g_assert_true (g_socket_listen (fake->listener, &error));
  bound = g_socket_get_local_address (fake->listener, &error);
  fake->port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  fake->thread = g_thread_new ("fake-redis", fake_server_main, fake);
}

static void
fake_server_stop (FakeServer *fake)
{
  g_socket_shutdown (fake->listener, TRUE, TRUE, NULL);
  g_socket_close (fake->listener, NULL);
  g_thread_join (fake->thread);
  g_clear_object (&fake->listener);
}

/* A bulk reply longer than any chunk, an array of a billion elements, a
 * reply of the wrong type: each fails the command and closes the
 * connection, without allocating what the server announced. */
static void
test_hostile_replies (Fixture       *f,
                      gconstpointer  data)
{
  const char *get_replies[] = {
    "$999999999999\r\n",
    "*3\r\n:1\r\n:2\r\n:3\r\n",
    "$12x\r\n",
  };
  const char *exists_replies[] = {
    "*999999999\r\n",
    "$999999999\r\n",
  };

  for (guint i = 0; i < G_N_ELEMENTS (get_replies); i++)
    {
      FakeServer fake = { 0 };
      g_autofree char *address = NULL;
      g_autoptr(KvRedisTier) tier = NULL;

      fake.get_reply = get_replies[i];
      fake.exists_reply = ":1\r\n";
      fake_server_start (&fake);
      address = g_strdup_printf ("127.0.0.1:%u", fake.port);
      tier = redis_test_tier_new (f->buffer, address, NULL);
      {
        g_autoptr(KvJobResult) loaded = load_range_with (f, tier, 0, 1);

        g_assert_false (kv_job_result_get_success (loaded));
      }
      g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_LOADED_CHUNKS), ==, 0);
      g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS), ==, 1);
      redis_test_tier_free (g_steal_pointer (&tier));
      fake_server_stop (&fake);
    }
  for (guint i = 0; i < G_N_ELEMENTS (exists_replies); i++)
    {
      FakeServer fake = { 0 };
      g_autofree char *address = NULL;
      g_autoptr(KvRedisTier) tier = NULL;

      fake.get_reply = "$-1\r\n";
      fake.exists_reply = exists_replies[i];
      fake_server_start (&fake);
      address = g_strdup_printf ("127.0.0.1:%u", fake.port);
      tier = redis_test_tier_new (f->buffer, address, NULL);
      g_assert_cmpint (redis_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
      g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS), ==, 1);
      redis_test_tier_free (g_steal_pointer (&tier));
      fake_server_stop (&fake);
    }
  /* a nested value that announces a gigabyte and never comes: the lookup
   * is a miss at the deadline, and the wedged connection is closed at
   * twice the deadline */
  {
    FakeServer fake = { 0 };
    g_autofree char *address = NULL;
    g_autoptr(KvRedisTier) tier = NULL;
    gint64 end;

    fake.get_reply = "$-1\r\n";
    fake.exists_reply = "*1\r\n$999999999\r\n";
    fake_server_start (&fake);
    address = g_strdup_printf ("127.0.0.1:%u", fake.port);
    tier = redis_test_tier_new (f->buffer, address, "deadline-ms", 300, NULL);
    g_assert_cmpint (redis_test_lookup (tier, f->keys[0]), ==, KV_LOOKUP_RESULT_MISS);
    end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
    while (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS) == 0)
      {
        g_assert_cmpint (g_get_monotonic_time (), <, end);
        g_usleep (20 * 1000);
      }
    redis_test_tier_free (g_steal_pointer (&tier));
    fake_server_stop (&fake);
  }
}

/* The id of the redis client that is not this redis-cli: the tier's one
 * connection. */
static char *
tier_client_id (void)
{
  g_autofree char *list = redis_cli (&shared_server, "CLIENT", "LIST", NULL);
  g_auto(GStrv) lines = g_strsplit (list, "\n", -1);
  char *id = NULL;

  for (guint i = 0; lines[i] != NULL; i++)
    if (g_str_has_prefix (lines[i], "id=") && strstr (lines[i], "cmd=client") == NULL)
      {
        g_assert_null (id);
        id = g_strndup (lines[i] + 3, strcspn (lines[i] + 3, " "));
      }
  g_assert_nonnull (id);
  return id;
}

/* Poison values under the tier's own keys: a list (GET answers WRONGTYPE)
 * and a string 9 MiB longer than a chunk record. Each load fails, the
 * value is deleted and counted as a damaged one, the shared connection
 * stays (no node error, the same client), and the keys store again (SET
 * NX could never replace them: every later load failed; the long value
 * closed the connection at each load). */
static void
test_poison_values (Fixture       *f,
                    gconstpointer  data)
{
  g_autofree char *list_key = key_of (f, 0);
  g_autofree char *long_key = key_of (f, 1);
  g_autofree char *offset = g_strdup_printf ("%u", KV_CHUNK_HEADER_SIZE + REDIS_TEST_SLOT + (9u << 20));
  g_autofree char *out = NULL;
  g_autofree char *client = NULL;
  g_autofree char *client_after = NULL;
  gint64 until;

  out = redis_cli (&shared_server, "RPUSH", list_key, "a", "b", NULL);
  g_assert_cmpstr (out, ==, "2");
  g_clear_pointer (&out, g_free);
  out = redis_cli (&shared_server, "SETRANGE", long_key, offset, "x", NULL);
  g_clear_pointer (&out, g_free);
  /* a lookup connects */
  g_assert_cmpint (redis_test_lookup (f->tier, f->keys[0]), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (redis_test_lookup (f->tier, f->keys[1]), ==, KV_LOOKUP_RESULT_HIT);
  client = tier_client_id ();

  for (guint i = 0; i < 2; i++)
    {
      g_autoptr(KvJobResult) loaded = load_range (f, i, 1);

      g_assert_false (kv_job_result_get_success (loaded));
    }
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_CORRUPT_CHUNKS), ==, 2);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_NODE_ERRORS), ==, 0);
  g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_ERROR_REPLIES), ==, 0);
  /* deleted (the DEL follows the load) */
  until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  for (;;)
    {
      g_autofree char *exists = redis_cli (&shared_server, "EXISTS", list_key, long_key, NULL);

      if (g_str_equal (exists, "0"))
        break;
      g_assert_cmpint (g_get_monotonic_time (), <, until);
      g_usleep (10 * 1000);
    }
  client_after = tier_client_id ();
  g_assert_cmpstr (client, ==, client_after);

  /* stored again, loaded byte-exact */
  {
    g_autoptr(KvJobResult) stored = store_range (f, 0, 2);
    g_autoptr(KvJobResult) loaded = NULL;

    g_assert_true (kv_job_result_get_success (stored));
    g_assert_cmpuint (counter (f, KV_REDIS_COUNTER_STORED_CHUNKS), ==, 2);
    loaded = load_range (f, 0, 2);
    g_assert_true (kv_job_result_get_success (loaded));
    g_assert_true (test_chunk_check (slot (f, 8), REDIS_TEST_SLOT, 0));
    g_assert_true (test_chunk_check (slot (f, 9), REDIS_TEST_SLOT, 1));
  }
}

/* A server that trickles its replies, a byte every 20 ms, is never silent
 * for long: a reply is bound by its time, not only by the silence. The
 * connection is closed once a reply took twice the deadline, the load
 * fails, and the next reconnects (on main, nothing closed it: ten loads
 * with a 1 s deadline took ~196 s, each drain waiting for its value). */
static void
test_trickling_server (Fixture       *f,
                       gconstpointer  data)
{
  FakeServer fake = { 0 };
  g_autofree char *address = NULL;
  g_autofree char *value = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  KvSecondaryTier *st;
  gint64 start, until;

  /* a value of the right size: only its pace is wrong */
  value = g_strdup_printf ("$%d\r\n%0*d\r\n", KV_CHUNK_HEADER_SIZE + REDIS_TEST_SLOT,
                           KV_CHUNK_HEADER_SIZE + REDIS_TEST_SLOT, 0);
  fake.get_reply = value;
  fake.exists_reply = ":1\r\n";
  fake.trickle_ms = 20;
  fake_server_start (&fake);
  address = g_strdup_printf ("127.0.0.1:%u", fake.port);
  tier = redis_test_tier_new (f->buffer, address, "deadline-ms", 300, NULL);
  st = KV_SECONDARY_TIER (tier);

  for (guint round = 0; round < 3; round++)
    {
      g_autoptr(KvRequest) request = kv_request_new ("trickle", NULL);
      guint32 slot = 8;
      g_autoptr(KvTransferJob) job = kv_transfer_job_new (100 + round, &f->keys[0], &slot, 1, TRUE,
                                                          request);
      KvJobResult **results = NULL;

      /* past the node's backoff (50 ms after a lost connection): this
       * load reaches the server */
      if (round > 0)
        g_usleep (300 * 1000);
      start = g_get_monotonic_time ();
      g_assert_true (kv_secondary_tier_submit_load (st, job, NULL));
      /* its deadline fails it (the base class), on main as now */
      until = start + 10 * G_USEC_PER_SEC;
      while ((results = kv_secondary_tier_get_finished_jobs (st)) == NULL || results[0] == NULL)
        {
          g_free (results);
          g_assert_cmpint (g_get_monotonic_time (), <, until);
          g_usleep (10 * 1000);
        }
      g_assert_false (kv_job_result_get_success (results[0]));
      kv_job_result_unref (results[0]);
      g_free (results);
      /* and the connection that trickles is closed: 600 ms, checked every 250 ms */
      until = start + 3 * G_USEC_PER_SEC;
      while (g_atomic_int_get (&fake.n_dropped) < (gint) round + 1)
        {
          g_assert_cmpint (g_get_monotonic_time (), <, until);
          g_usleep (10 * 1000);
        }
      g_test_message ("round %u: the trickling connection closed after %.2f s", round,
                      (g_get_monotonic_time () - start) / 1e6);
      /* the tier has its job back: nothing of it is in flight */
      g_assert_true (kv_secondary_tier_drain_jobs (st, NULL));
    }
  g_assert_cmpuint (kv_redis_tier_get_counter (tier, KV_REDIS_COUNTER_NODE_ERRORS), >=, 3);
  g_assert_cmpint (g_atomic_int_get (&fake.n_accepted), >=, 3);
  redis_test_tier_free (g_steal_pointer (&tier));
  fake_server_stop (&fake);
}

/* ---- TLS ----------------------------------------------------------------- */

static gboolean
run_openssl (const char *dir,
             const char *script)
{
  g_autoptr(GError) error = NULL;
  const char *argv[] = { "/bin/sh", "-c", script, NULL };
  int status = 0;

  if (!g_spawn_sync (dir, (char **) argv, NULL, G_SPAWN_STDOUT_TO_DEV_NULL |
                     G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL, NULL, &status, &error))
    return FALSE;
  return g_spawn_check_wait_status (status, NULL);
}

static void
test_tls (Fixture       *f,
          gconstpointer  data)
{
  g_autofree char *dir = g_build_filename (test_dir, "tls", NULL);
  g_autofree char *ca = NULL;
  g_autofree char *cert = NULL;
  g_autofree char *key = NULL;
  g_autofree char *address = NULL;
  g_autoptr(KvRedisTier) tier = NULL;
  g_autoptr(GError) error = NULL;
  RedisServer server = { 0 };
  const char *script =
    "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kvtier-test-ca "
    "  -keyout ca.key -out ca.pem && "
    "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr && "
    "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
    "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
    "  -extfile san.ext -out server.pem";

  g_autofree char *openssl = g_find_program_in_path ("openssl");

  if (openssl == NULL)
    {
      g_test_skip ("openssl is not installed");
      return;
    }
  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  g_assert_true (run_openssl (dir, script));
  ca = g_build_filename (dir, "ca.pem", NULL);
  cert = g_build_filename (dir, "server.pem", NULL);
  key = g_build_filename (dir, "server.key", NULL);
  {
    const char *extra[] = { "--tls-cert-file", cert, "--tls-key-file", key,
                            "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
                            "--tls-port", NULL };
    const char *cli_tls[] = { "--tls", "--cacert", ca, NULL };

    server.tls_args = g_strdupv ((char **) cli_tls);
    redis_server_start (&server, dir, extra);
  }
  address = redis_server_address (&server);

  /* the test's CA signs the server: connects, round trip */
  /* a TLS handshake under ASan with full malloc stack traces (the asan
   * suite's fast_unwind_on_malloc=0) takes seconds */
  tier = redis_test_tier_new (f->buffer, address, "tls", TRUE, "tls-ca-file", ca,
                              "connect-timeout-ms", 60000, "deadline-ms", 60000, NULL);
  {
    g_autoptr(KvJobResult) stored = store_range_with (f, tier, 0, 3);
    g_autoptr(KvJobResult) loaded = load_range_with (f, tier, 0, 3);

    g_assert_true (kv_job_result_get_success (stored));
    g_assert_true (kv_job_result_get_success (loaded));
    for (guint i = 0; i < 3; i++)
      g_assert_true (test_chunk_check (slot (f, 8 + i), REDIS_TEST_SLOT, i));
    g_assert_cmpint (redis_test_lookup (tier, f->keys[1]), ==, KV_LOOKUP_RESULT_HIT);
  }
  redis_test_tier_free (g_steal_pointer (&tier));

  /* without the CA, the certificate is not trusted */
  tier = redis_test_tier_new_full (f->buffer, address, &error, "tls", TRUE, NULL);
  g_assert_null (tier);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, address));
  g_clear_error (&error);

  /* a server that accepts but never answers the handshake: the connect
   * timeout ends it */
  {
    FakeServer fake = { 0 };
    g_autofree char *fake_address = NULL;
    gint64 start = g_get_monotonic_time ();

    fake.get_reply = "$-1\r\n";
    fake.exists_reply = ":0\r\n";
    fake_server_start (&fake);
    fake_address = g_strdup_printf ("127.0.0.1:%u", fake.port);
    tier = redis_test_tier_new_full (f->buffer, fake_address, &error, "tls", TRUE,
                                     "tls-ca-file", ca, "connect-timeout-ms", 300, NULL);
    g_assert_null (tier);
    g_assert_nonnull (error);
    g_assert_nonnull (strstr (error->message, fake_address));
    g_test_message ("handshake never answered: %s after %" G_GINT64_FORMAT " ms", error->message,
                    (g_get_monotonic_time () - start) / 1000);
    g_clear_error (&error);
    fake_server_stop (&fake);
    /* the failed tier released its half-made TLS connection */
    g_assert_false (fake.client_left_open);
  }

  /* plain TCP to a TLS port: no answer that passes */
  tier = redis_test_tier_new_full (f->buffer, address, &error, "connect-timeout-ms", 500, NULL);
  g_assert_null (tier);
  g_assert_nonnull (error);
  redis_server_clear (&server);
}

int
main (int argc, char **argv)
{
  int status;

  g_test_init (&argc, &argv, NULL);
  if (!redis_test_init ())
    return 0;
  test_dir = test_dir_make ("kvtier-redis-test");
  {
    g_autofree char *dir = g_build_filename (test_dir, "shared", NULL);

    g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
    redis_server_start (&shared_server, dir, NULL);
  }

#define ADD(path, func) \
  g_test_add ("/redis-tier/" path, Fixture, NULL, setup_tier, func, teardown)
#define ADD_BARE(path, func) \
  g_test_add ("/redis-tier/" path, Fixture, NULL, setup, func, teardown)
  ADD ("round-trip", test_round_trip);
  ADD ("many-keys", test_many_keys);
  ADD ("carried-checksum", test_carried_checksum);
  ADD ("set-nx-skip", test_set_nx_skip);
  ADD ("missing-key", test_missing_key);
  ADD ("key-names", test_key_names);
  g_test_add_func ("/redis-tier/key-slot", test_key_slot);
  ADD_BARE ("ttl", test_ttl);
  ADD_BARE ("store-past-deadline", test_store_past_deadline);
  ADD_BARE ("through-managers", test_through_managers);
  ADD ("index/stored", test_index_stored);
  ADD ("index/stale", test_index_stale);
  ADD_BARE ("index/stale-through-manager", test_index_stale_manager);
  ADD ("index/damaged", test_index_damaged);
  ADD_BARE ("index/bounded", test_index_bounded);
  ADD_BARE ("index/ttl", test_index_ttl);
  ADD_BARE ("index/server-down", test_index_server_down);
  ADD ("index/metrics", test_index_metrics);
  g_test_add ("/redis-tier/damaged/payload", Fixture, GUINT_TO_POINTER (DAMAGE_PAYLOAD),
              setup_tier, test_damaged_value, teardown);
  g_test_add ("/redis-tier/damaged/header", Fixture, GUINT_TO_POINTER (DAMAGE_HEADER),
              setup_tier, test_damaged_value, teardown);
  g_test_add ("/redis-tier/damaged/truncated", Fixture, GUINT_TO_POINTER (DAMAGE_TRUNCATED),
              setup_tier, test_damaged_value, teardown);
  g_test_add ("/redis-tier/damaged/longer", Fixture, GUINT_TO_POINTER (DAMAGE_LONGER),
              setup_tier, test_damaged_value, teardown);
  g_test_add ("/redis-tier/damaged/other-key", Fixture, GUINT_TO_POINTER (DAMAGE_OTHER_KEY),
              setup_tier, test_damaged_value, teardown);
  g_test_add ("/redis-tier/damaged/namespace", Fixture, GUINT_TO_POINTER (DAMAGE_NAMESPACE),
              setup_tier, test_damaged_value, teardown);
  ADD_BARE ("select-database", test_select_database);
  ADD_BARE ("auth", test_auth);
  ADD_BARE ("bad-settings", test_bad_settings);
  ADD_BARE ("unreachable", test_unreachable);
  ADD_BARE ("server-dies", test_server_dies);
  ADD_BARE ("lookups-node-down", test_lookups_node_down);
  ADD_BARE ("maxmemory-evicts", test_maxmemory_evicts);
  ADD_BARE ("server-stops-reading", test_server_stops_reading);
  ADD_BARE ("hostile-replies", test_hostile_replies);
  ADD_BARE ("trickling-server", test_trickling_server);
  ADD ("poison-values", test_poison_values);
  ADD_BARE ("tls", test_tls);
#undef ADD
#undef ADD_BARE

  status = g_test_run ();
  redis_server_clear (&shared_server);
  test_dir_remove (test_dir);
  g_free (test_dir);
  return status;
}
