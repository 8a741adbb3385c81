/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include <string.h>

#include "kv-arc-policy.h"
#include "kv-event.h"
#include "kv-host-buffer.h"
#include "kv-lru-policy.h"
#include "kv-primary-tier.h"
#include "kv-primary-tier-private.h"
#include "kv-request.h"
#include "kv-types.h"

#define SLOT 4096
#define N_TEST_KEYS 40

typedef struct
{
  KvKey *keys[N_TEST_KEYS];
  KvPrimaryTier *tier;
} Fixture;

/* Keys are named by letters in the tests: K('a') is keys[0]. */
#define K(c) (fx->keys[(c) - 'a'])

static void
fixture_setup (Fixture       *fx,
               gconstpointer  data)
{
  for (guint i = 0; i < N_TEST_KEYS; i++)
    {
      guint8 hash[8] = { 0xbe, 0xef, 0, 0, 0, 0, 0, (guint8) i };

      fx->keys[i] = kv_key_new (hash, sizeof hash, 0);
    }
  fx->tier = NULL;
}

static void
fixture_teardown (Fixture       *fx,
                  gconstpointer  data)
{
  if (fx->tier != NULL)
    {
      g_object_add_weak_pointer (G_OBJECT (fx->tier), (gpointer *) &fx->tier);
      g_object_unref (fx->tier);
      g_assert_null (fx->tier);
    }
  for (guint i = 0; i < N_TEST_KEYS; i++)
    kv_key_unref (fx->keys[i]);
}

static KvPrimaryTier *
make_tier (Fixture       *fx,
           guint          n_slots,
           KvCachePolicy *policy,
           gboolean       enable_events)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (n_slots, SLOT, &error);

  g_assert_no_error (error);
  fx->tier = kv_primary_tier_new (buffer, policy, enable_events);
  return fx->tier;
}

static guint
key_index (Fixture     *fx,
           const KvKey *key)
{
  for (guint i = 0; i < N_TEST_KEYS; i++)
    if (kv_key_equal (fx->keys[i], key))
      return i;
  g_assert_not_reached ();
}

static char *
names_of (Fixture       *fx,
          KvKey * const *keys,
          guint          n_keys)
{
  GString *names = g_string_new (NULL);

  for (guint i = 0; i < n_keys; i++)
    g_string_append_c (names, 'a' + key_index (fx, keys[i]));
  return g_string_free (names, FALSE);
}

/* Fills @out with the keys named by @names; returns how many. */
static guint
keys_of (Fixture    *fx,
         const char *names,
         KvKey     **out)
{
  guint n = 0;

  for (const char *c = names; *c != '\0'; c++)
    out[n++] = K (*c);
  return n;
}

static char *
ids_of (const guint32 *ids,
        guint          n)
{
  GString *str = g_string_new (NULL);

  for (guint i = 0; i < n; i++)
    g_string_append_printf (str, "%s%u", i > 0 ? "," : "", ids[i]);
  return g_string_free (str, FALSE);
}

/* prepare_store @names and check the keys to store, their slots and the
 * evicted keys. */
static void
assert_prepare_store (Fixture    *fx,
                      const char *names,
                      const char *expected_keys,
                      const char *expected_ids,
                      const char *expected_evicted)
{
  GError *error = NULL;
  KvKey *keys[N_TEST_KEYS];
  guint n = keys_of (fx, names, keys);
  g_autoptr(KvPrepareStoreResult) result = NULL;
  KvKey * const *to_store;
  KvKey * const *evicted;
  const guint32 *ids;
  guint n_store = 0, n_ids = 0, n_evicted = 0;
  g_autofree char *store_names = NULL;
  g_autofree char *id_names = NULL;
  g_autofree char *evicted_names = NULL;

  result = kv_primary_tier_prepare_store (fx->tier, keys, n, &error);
  g_assert_no_error (error);
  g_assert_nonnull (result);

  to_store = kv_prepare_store_result_get_keys_to_store (result, &n_store);
  ids = kv_prepare_store_result_get_chunk_ids (result, &n_ids);
  evicted = kv_prepare_store_result_get_evicted_keys (result, &n_evicted);
  g_assert_cmpuint (n_store, ==, n_ids);

  store_names = names_of (fx, to_store, n_store);
  id_names = ids_of (ids, n_ids);
  evicted_names = names_of (fx, evicted, n_evicted);
  g_assert_cmpstr (store_names, ==, expected_keys);
  g_assert_cmpstr (id_names, ==, expected_ids);
  g_assert_cmpstr (evicted_names, ==, expected_evicted);
}

static void
complete_store (Fixture    *fx,
                const char *names,
                gboolean    success)
{
  KvKey *keys[N_TEST_KEYS];
  guint n = keys_of (fx, names, keys);

  kv_primary_tier_complete_store (fx->tier, keys, n, success);
}

static void
load (Fixture    *fx,
      const char *names)
{
  GError *error = NULL;
  KvKey *keys[N_TEST_KEYS];
  guint32 ids[N_TEST_KEYS];
  guint n = keys_of (fx, names, keys);

  g_assert_true (kv_primary_tier_prepare_load (fx->tier, keys, n, ids, &error));
  g_assert_no_error (error);
}

static void
unload (Fixture    *fx,
        const char *names)
{
  KvKey *keys[N_TEST_KEYS];
  guint n = keys_of (fx, names, keys);

  kv_primary_tier_complete_load (fx->tier, keys, n);
}

static void
touch (Fixture    *fx,
       const char *names)
{
  KvKey *keys[N_TEST_KEYS];
  guint n = keys_of (fx, names, keys);

  kv_primary_tier_touch (fx->tier, keys, n);
}

static void
assert_no_space (Fixture    *fx,
                 const char *names)
{
  GError *error = NULL;
  KvKey *keys[N_TEST_KEYS];
  guint n = keys_of (fx, names, keys);
  KvPrepareStoreResult *result;

  result = kv_primary_tier_prepare_store (fx->tier, keys, n, &error);
  g_assert_null (result);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE);
  g_clear_error (&error);
}

static gint
ref_count (Fixture *fx,
           char     name)
{
  gint ref = G_MININT;

  g_assert_true (kv_primary_tier_get_ref_count (fx->tier, K (name), &ref));
  return ref;
}

static guint32
chunk_id (Fixture *fx,
          char     name)
{
  guint32 id = G_MAXUINT32;

  g_assert_true (kv_primary_tier_get_chunk_id (fx->tier, K (name), &id));
  return id;
}

static void
assert_counts (Fixture *fx,
               guint    n_stored,
               guint    n_free,
               guint    n_evictable,
               guint    n_write_pending)
{
  g_assert_cmpuint (kv_primary_tier_get_n_stored (fx->tier), ==, n_stored);
  g_assert_cmpuint (kv_primary_tier_get_n_allocated (fx->tier), ==, n_stored);
  g_assert_cmpuint (kv_primary_tier_get_n_free (fx->tier), ==, n_free);
  g_assert_cmpuint (kv_primary_tier_get_n_evictable (fx->tier), ==, n_evictable);
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (fx->tier), ==, n_write_pending);
}

/* Drains the events as "+ab" (stored) / "-cd" (removed), space-separated. */
static char *
take_events (Fixture *fx)
{
  GString *str = g_string_new (NULL);
  KvEvent **events = kv_primary_tier_take_events (fx->tier);

  g_assert_nonnull (events);
  for (KvEvent **e = events; *e != NULL; e++)
    {
      guint n = 0;
      KvKey * const *keys = kv_event_get_keys (*e, &n);
      g_autofree char *names = names_of (fx, keys, n);

      g_assert_cmpint (kv_event_get_medium (*e), ==, KV_MEDIUM_CPU);
      g_assert_cmpint (kv_event_get_locality (*e), ==, KV_LOCALITY_UNSPECIFIED);
      g_assert_null (kv_event_get_ownership (*e));
      g_string_append_printf (str, "%s%c%s", str->len > 0 ? " " : "",
                              kv_event_get_removed (*e) ? '-' : '+', names);
      kv_event_unref (*e);
    }
  g_free (events);

  return g_string_free (str, FALSE);
}

static void
assert_events (Fixture    *fx,
               const char *expected)
{
  g_autofree char *events = take_events (fx);

  g_assert_cmpstr (events, ==, expected);
}

static void
store (Fixture    *fx,
       const char *names)
{
  GError *error = NULL;
  KvKey *keys[N_TEST_KEYS];
  guint n = keys_of (fx, names, keys);
  g_autoptr(KvPrepareStoreResult) result = NULL;

  result = kv_primary_tier_prepare_store (fx->tier, keys, n, &error);
  g_assert_no_error (error);
  kv_primary_tier_complete_store (fx->tier, keys, n, TRUE);
}

/* --- tests --- */

static void
test_properties (Fixture       *fx,
                 gconstpointer  data)
{
  GError *error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (6, 2 * SLOT, &error);
  g_autoptr(KvHostBuffer) prop_buffer = NULL;
  g_autoptr(KvCachePolicy) prop_policy = NULL;
  guint n_slots = 0;
  guint64 slot_size = 0;
  gboolean enable_events = FALSE;

  g_assert_no_error (error);
  fx->tier = kv_primary_tier_new (buffer, NULL, TRUE);

  g_assert_true (kv_primary_tier_get_buffer (fx->tier) == buffer);
  g_assert_true (KV_IS_LRU_POLICY (kv_primary_tier_get_policy (fx->tier)));
  g_assert_cmpuint (kv_primary_tier_get_n_slots (fx->tier), ==, 6);
  g_assert_cmpuint (kv_primary_tier_get_slot_size (fx->tier), ==, 2 * SLOT);

  g_object_get (fx->tier,
                "buffer", &prop_buffer,
                "policy", &prop_policy,
                "n-slots", &n_slots,
                "slot-size", &slot_size,
                "enable-events", &enable_events,
                NULL);
  g_assert_true (prop_buffer == buffer);
  g_assert_true (prop_policy == kv_primary_tier_get_policy (fx->tier));
  g_assert_cmpuint (n_slots, ==, 6);
  g_assert_cmpuint (slot_size, ==, 2 * SLOT);
  g_assert_true (enable_events);

  assert_counts (fx, 0, 6, 0, 0);
  assert_events (fx, "");
}

static void
test_evict_when_full (Fixture       *fx,
                      gconstpointer  data)
{
  make_tier (fx, 5, NULL, FALSE);

  /* Reference §11 item 8: a primary of 5, full. */
  store (fx, "abcde");
  assert_counts (fx, 5, 0, 5, 0);

  /* All pinned (being loaded): nothing can be evicted. */
  load (fx, "abcde");
  assert_counts (fx, 5, 0, 0, 0);
  assert_no_space (fx, "fg");
  assert_counts (fx, 5, 0, 0, 0);

  /* Unpinned in order: a is the least recent. Storing 2 more evicts
   * exactly a and b; their slots are reused last in first out. */
  unload (fx, "abcde");
  assert_counts (fx, 5, 0, 5, 0);
  assert_prepare_store (fx, "fg", "fg", "1,0", "ab");
  assert_counts (fx, 5, 0, 3, 2);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('a')), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('b')), ==, KV_LOOKUP_RESULT_MISS);
  for (const char *c = "cde"; *c != '\0'; c++)
    g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K (*c)), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('f')), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('g')), ==, KV_LOOKUP_RESULT_HIT_PENDING);

  complete_store (fx, "fg", TRUE);
  assert_counts (fx, 5, 0, 5, 0);
}

static void
test_slot_allocation (Fixture       *fx,
                      gconstpointer  data)
{
  make_tier (fx, 4, NULL, FALSE);

  /* Fresh slots in order. */
  assert_prepare_store (fx, "ab", "ab", "0,1", "");
  assert_counts (fx, 2, 2, 0, 2);

  /* Failed: slots 0 then 1 go on the free list. */
  complete_store (fx, "ab", FALSE);
  assert_counts (fx, 0, 4, 0, 0);

  /* Fresh slots come first, even with freed ones waiting... */
  assert_prepare_store (fx, "c", "c", "2", "");
  assert_prepare_store (fx, "d", "d", "3", "");
  assert_counts (fx, 2, 2, 0, 2);
  /* ... then the free list, last freed first. */
  assert_prepare_store (fx, "ef", "ef", "1,0", "");
  assert_counts (fx, 4, 0, 0, 4);

  complete_store (fx, "cdef", TRUE);
  g_assert_cmpuint (chunk_id (fx, 'c'), ==, 2);
  g_assert_cmpuint (chunk_id (fx, 'd'), ==, 3);
  g_assert_cmpuint (chunk_id (fx, 'e'), ==, 1);
  g_assert_cmpuint (chunk_id (fx, 'f'), ==, 0);
  assert_counts (fx, 4, 0, 4, 0);

  /* Evicted c (slot 2) and d (slot 3) are freed in eviction order. */
  assert_prepare_store (fx, "gh", "gh", "3,2", "cd");
}

static void
test_states_and_lookups (Fixture       *fx,
                         gconstpointer  data)
{
  guint32 id = 99;
  gint ref = 99;

  make_tier (fx, 4, NULL, FALSE);

  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('a')), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_false (kv_primary_tier_get_ref_count (fx->tier, K ('a'), &ref));
  g_assert_false (kv_primary_tier_get_chunk_id (fx->tier, K ('a'), &id));
  g_assert_cmpint (ref, ==, 99);
  g_assert_cmpuint (id, ==, 99);

  /* −1: being written. */
  assert_prepare_store (fx, "a", "a", "0", "");
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('a')), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  g_assert_cmpint (ref_count (fx, 'a'), ==, -1);
  g_assert_cmpuint (chunk_id (fx, 'a'), ==, 0);
  assert_counts (fx, 1, 3, 0, 1);

  /* 0: ready and evictable. */
  complete_store (fx, "a", TRUE);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('a')), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (ref_count (fx, 'a'), ==, 0);
  assert_counts (fx, 1, 3, 1, 0);

  /* n: pinned by n readers, loads and cascade reads alike. */
  load (fx, "a");
  {
    GError *error = NULL;
    KvKey *keys[] = { K ('a') };
    guint32 ids[1] = { 77 };

    g_assert_true (kv_primary_tier_prepare_read (fx->tier, keys, 1, ids, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (ids[0], ==, 0);
    /* chunk_ids is optional. */
    g_assert_true (kv_primary_tier_prepare_load (fx->tier, keys, 1, NULL, &error));
    g_assert_no_error (error);
  }
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('a')), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (ref_count (fx, 'a'), ==, 3);
  assert_counts (fx, 1, 3, 0, 0);

  unload (fx, "aa");
  g_assert_cmpint (ref_count (fx, 'a'), ==, 1);
  assert_counts (fx, 1, 3, 0, 0);
  unload (fx, "a");
  g_assert_cmpint (ref_count (fx, 'a'), ==, 0);
  assert_counts (fx, 1, 3, 1, 0);
}

static void
test_prepare_load_validation (Fixture       *fx,
                              gconstpointer  data)
{
  GError *error = NULL;
  KvKey *keys[3];
  guint32 ids[3] = { 91, 92, 93 };
  g_autofree char *b_hex = kv_key_to_string (K ('b'));
  g_autofree char *c_hex = kv_key_to_string (K ('c'));

  make_tier (fx, 4, NULL, FALSE);
  store (fx, "a");
  assert_prepare_store (fx, "b", "b", "1", "");

  /* b is still being written: nothing is pinned, not even a. */
  keys[0] = K ('a');
  keys[1] = K ('b');
  g_assert_false (kv_primary_tier_prepare_load (fx->tier, keys, 2, ids, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, b_hex));
  g_clear_error (&error);

  /* c is absent; the same for cascade reads. */
  keys[1] = K ('a');
  keys[2] = K ('c');
  g_assert_false (kv_primary_tier_prepare_read (fx->tier, keys, 3, ids, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, c_hex));
  g_clear_error (&error);

  g_assert_cmpint (ref_count (fx, 'a'), ==, 0);
  g_assert_cmpint (ref_count (fx, 'b'), ==, -1);
  g_assert_cmpuint (ids[0], ==, 91);
  g_assert_cmpuint (ids[1], ==, 92);
  g_assert_cmpuint (ids[2], ==, 93);
  assert_counts (fx, 2, 2, 1, 1);

  /* Pinning the same key twice in one call counts twice. */
  g_assert_true (kv_primary_tier_prepare_load (fx->tier, keys, 2, ids, &error));
  g_assert_no_error (error);
  g_assert_cmpint (ref_count (fx, 'a'), ==, 2);
  g_assert_cmpuint (ids[0], ==, 0);
  g_assert_cmpuint (ids[1], ==, 0);
  unload (fx, "aa");
}

static void
test_prepare_store_filter (Fixture       *fx,
                           gconstpointer  data)
{
  g_autofree char *many = NULL;
  g_autofree char *many_ids = NULL;
  GString *names = g_string_new (NULL);
  GString *ids = g_string_new (NULL);

  make_tier (fx, 30, NULL, FALSE);
  store (fx, "a");
  assert_prepare_store (fx, "b", "b", "1", "");

  /* Present keys (ready or not) and repeats are left out, order kept. */
  assert_prepare_store (fx, "abccdab", "cd", "2,3", "");
  assert_counts (fx, 4, 26, 1, 3);

  /* Nothing left to store: an empty result, not a failure. */
  assert_prepare_store (fx, "abcd", "", "", "");
  assert_prepare_store (fx, "", "", "", "");
  assert_counts (fx, 4, 26, 1, 3);

  /* A large batch (more than 16 keys: the hash-set path) with repeats. */
  for (char c = 'e'; c <= 'x'; c++)
    g_string_append_c (names, c);
  g_string_append (names, "exa");
  for (guint i = 4; i < 24; i++)
    g_string_append_printf (ids, "%s%u", i > 4 ? "," : "", i);
  many = g_string_free (names, FALSE);
  many_ids = g_string_free (ids, FALSE);
  assert_prepare_store (fx, many, "efghijklmnopqrstuvwx", many_ids, "");
  assert_counts (fx, 24, 6, 1, 23);
}

static void
test_no_space_fail_fast (Fixture       *fx,
                         gconstpointer  data)
{
  make_tier (fx, 3, NULL, TRUE);
  store (fx, "abc");
  assert_events (fx, "+abc");
  load (fx, "c");
  assert_counts (fx, 3, 0, 2, 0);

  /* Three slots needed, two evictable: fails before evicting anything. */
  assert_no_space (fx, "def");
  assert_counts (fx, 3, 0, 2, 0);
  for (const char *c = "abc"; *c != '\0'; c++)
    g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K (*c)), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('d')), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (chunk_id (fx, 'a'), ==, 0);
  g_assert_cmpuint (chunk_id (fx, 'b'), ==, 1);
  g_assert_cmpuint (chunk_id (fx, 'c'), ==, 2);
  assert_events (fx, "");

  /* The eviction order is intact: two new keys evict a and b. */
  assert_prepare_store (fx, "de", "de", "1,0", "ab");
  assert_events (fx, "-ab");
}

static void
test_protected_inputs (Fixture       *fx,
                       gconstpointer  data)
{
  make_tier (fx, 3, NULL, FALSE);
  store (fx, "abc");

  /* a is present (filtered) but protected: b goes instead. */
  assert_prepare_store (fx, "ad", "d", "1", "b");
  complete_store (fx, "d", TRUE);

  /* Order now a, c, d. Storing [e, f] with a and c in the batch needs two
   * evictions, but only d is not protected: nothing changes. */
  assert_no_space (fx, "acef");
  assert_counts (fx, 3, 0, 3, 0);

  /* With one new key only d can go, though a and c are older. */
  assert_prepare_store (fx, "cae", "e", "1", "d");
  assert_counts (fx, 3, 0, 2, 1);
}

/* Protection lasts for its own batch only, whether or not that batch
 * evicted anything. */
static void
test_protection_ends_with_batch (Fixture       *fx,
                                 gconstpointer  data)
{
  make_tier (fx, 4, NULL, FALSE);
  store (fx, "abc");

  /* a is in a batch that fits without evicting. */
  assert_prepare_store (fx, "ad", "d", "3", "");
  complete_store (fx, "d", TRUE);

  /* a is the oldest and no longer protected. */
  assert_prepare_store (fx, "e", "e", "0", "a");
  complete_store (fx, "e", TRUE);

  /* b is protected by a batch that evicts c; the next batch takes b. */
  assert_prepare_store (fx, "bf", "f", "2", "c");
  complete_store (fx, "f", TRUE);
  assert_prepare_store (fx, "g", "g", "1", "b");
}

static void
test_complete_store (Fixture       *fx,
                     gconstpointer  data)
{
  make_tier (fx, 4, NULL, FALSE);
  store (fx, "a");
  assert_prepare_store (fx, "bc", "bc", "1,2", "");

  /* Failure removes not-ready keys only: a (ready) and z (absent) stay as
   * they are. */
  complete_store (fx, "abz", FALSE);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('a')), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('b')), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('c')), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  assert_counts (fx, 2, 2, 1, 1);

  /* b is gone for good: completing it later changes nothing. */
  complete_store (fx, "bc", TRUE);
  g_assert_cmpint (ref_count (fx, 'c'), ==, 0);
  assert_counts (fx, 2, 2, 2, 0);

  /* Success leaves ready and pinned keys alone. */
  load (fx, "c");
  complete_store (fx, "ac", TRUE);
  complete_store (fx, "ac", FALSE);
  g_assert_cmpint (ref_count (fx, 'a'), ==, 0);
  g_assert_cmpint (ref_count (fx, 'c'), ==, 1);
  assert_counts (fx, 2, 2, 1, 0);
  unload (fx, "c");

  /* Freed slot 1 is reused after the fresh slot 3. */
  assert_prepare_store (fx, "de", "de", "3,1", "");
}

static void
test_events (Fixture       *fx,
             gconstpointer  data)
{
  make_tier (fx, 3, NULL, TRUE);

  assert_prepare_store (fx, "ab", "ab", "0,1", "");
  assert_events (fx, "");
  /* Only keys that became ready are in the store event. */
  complete_store (fx, "abz", TRUE);
  assert_events (fx, "+ab");
  assert_events (fx, "");

  /* A failed store emits nothing; nothing completed emits nothing. */
  assert_prepare_store (fx, "c", "c", "2", "");
  complete_store (fx, "c", FALSE);
  complete_store (fx, "ab", TRUE);
  assert_events (fx, "");

  /* Eviction at prepare time, store at completion, in that order. */
  /* Free list: 2 (failed c), then 0 and 1 (evicted a, b); last in first
   * out. */
  assert_prepare_store (fx, "cde", "cde", "1,0,2", "ab");
  complete_store (fx, "dc", TRUE);
  complete_store (fx, "e", TRUE);
  assert_events (fx, "-ab +dc +e");
}

static void
test_events_disabled (Fixture       *fx,
                      gconstpointer  data)
{
  make_tier (fx, 2, NULL, FALSE);

  store (fx, "ab");
  assert_prepare_store (fx, "c", "c", "0", "a");
  complete_store (fx, "c", TRUE);
  assert_events (fx, "");
}

static void
test_complete_load_unpinned (Fixture       *fx,
                             gconstpointer  data)
{
  make_tier (fx, 2, NULL, FALSE);
  store (fx, "a");
  assert_prepare_store (fx, "b", "b", "1", "");
  load (fx, "a");

  /* z is absent, b is not ready: both are reported and skipped, a is
   * released. */
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*chunk * is not pinned*");
  g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, "*chunk * is not pinned*");
  unload (fx, "zab");
  g_test_assert_expected_messages ();
  g_assert_cmpint (ref_count (fx, 'a'), ==, 0);
  g_assert_cmpint (ref_count (fx, 'b'), ==, -1);

  /* a is ready but unpinned now: releasing it again is reported and does
   * not drive its count below zero. */
  {
    g_autofree char *a_hex = kv_key_to_string (K ('a'));
    g_autofree char *pattern = g_strdup_printf ("*chunk %s is not pinned*", a_hex);

    g_test_expect_message ("Kvtier", G_LOG_LEVEL_CRITICAL, pattern);
    unload (fx, "a");
    g_test_assert_expected_messages ();
  }
  g_assert_cmpint (ref_count (fx, 'a'), ==, 0);
  assert_counts (fx, 2, 0, 1, 1);
}

static void
test_reset (Fixture       *fx,
            gconstpointer  data)
{
  make_tier (fx, 3, NULL, TRUE);
  store (fx, "abc");
  load (fx, "a");
  assert_prepare_store (fx, "d", "d", "1", "b");
  complete_store (fx, "c", FALSE);

  kv_primary_tier_reset (fx->tier);
  assert_counts (fx, 0, 3, 0, 0);
  for (const char *c = "abcd"; *c != '\0'; c++)
    g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K (*c)), ==, KV_LOOKUP_RESULT_MISS);
  assert_events (fx, "");
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (kv_primary_tier_get_policy (fx->tier)), ==, 0);

  /* Fresh slots again from 0, and the policy forgot every key. */
  assert_prepare_store (fx, "ef", "ef", "0,1", "");
  complete_store (fx, "ef", TRUE);
  store (fx, "g");
  assert_prepare_store (fx, "h", "h", "0", "e");
  assert_events (fx, "+ef +g -e");
}

static void
test_touch_eviction_order (Fixture       *fx,
                           gconstpointer  data)
{
  make_tier (fx, 4, NULL, FALSE);
  store (fx, "abcd");

  /* Reference §11 item 9: touched keys move to the most recent end,
   * reversed, so a ends up the most recent: c, d, b, a. */
  touch (fx, "ab");
  assert_prepare_store (fx, "ef", "ef", "3,2", "cd");
  complete_store (fx, "ef", TRUE);

  /* Order now b, a, e, f. Pinned keys are not reordered by touch: with b
   * pinned, touching [e, b] only moves e, giving a, f, e. */
  load (fx, "b");
  touch (fx, "eb");
  assert_prepare_store (fx, "g", "g", "0", "a");
  complete_store (fx, "g", TRUE);

  /* Released, b becomes the most recent: f, e, g, b. */
  unload (fx, "b");
  assert_prepare_store (fx, "hi", "hi", "3,2", "fe");
}

static void
test_on_request_finished (Fixture       *fx,
                          gconstpointer  data)
{
  g_autoptr(KvRequest) request = kv_request_new ("req-1", NULL);

  make_tier (fx, 2, NULL, FALSE);
  store (fx, "a");
  kv_primary_tier_on_request_finished (fx->tier, request);
  assert_counts (fx, 1, 1, 1, 0);
}

static void
test_arc_policy (Fixture       *fx,
                 gconstpointer  data)
{
  GError *error = NULL;
  g_autoptr(KvCachePolicy) policy = kv_cache_policy_new_for_name ("arc", &error);
  guint capacity = 0;

  g_assert_no_error (error);
  make_tier (fx, 3, policy, TRUE);
  g_assert_true (kv_primary_tier_get_policy (fx->tier) == policy);

  /* The tier gave the unsized policy its slot count. */
  g_object_get (policy, "capacity", &capacity, NULL);
  g_assert_cmpuint (capacity, ==, 3);

  store (fx, "abc");
  touch (fx, "a");
  assert_events (fx, "+abc");

  /* a was used again (T2); b and c only once (T1): they go first, though
   * a was stored first. */
  assert_prepare_store (fx, "d", "d", "1", "b");
  complete_store (fx, "d", TRUE);
  assert_prepare_store (fx, "e", "e", "2", "c");
  complete_store (fx, "e", TRUE);
  assert_prepare_store (fx, "f", "f", "1", "d");
  complete_store (fx, "f", TRUE);
  assert_events (fx, "-b +d -c +e -d +f");

  /* c comes back from the B1 ghost list (b was trimmed from it, as
   * |T1| + |B1| ≤ 3): T1 should have been larger. */
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (KV_ARC_POLICY (policy)), ==, 0);
  assert_prepare_store (fx, "c", "c", "2", "e");
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (KV_ARC_POLICY (policy)), ==, 1);
  complete_store (fx, "c", TRUE);

  /* Pinned keys are never evicted; the fail-fast check uses the tier's
   * own counts. */
  load (fx, "acf");
  assert_no_space (fx, "g");
  unload (fx, "acf");
  assert_counts (fx, 3, 0, 3, 0);
}

/* The tier's index under churn: random batches stored, failed, pinned and
 * evicted over a pool of keys several times the slot count, checked
 * against a model after every step (the index deletes without tombstones
 * and grows while the tier fills: every key stays reachable, no key is
 * found that is not stored, slots stay unique). */
static void
test_index_churn (void)
{
  const guint n_slots = 200, n_pool = 1000, n_rounds = 6000;
  g_autoptr(GError) error = NULL;
  g_autoptr(KvHostBuffer) buffer = kv_host_buffer_new (n_slots, SLOT, &error);
  g_autoptr(KvPrimaryTier) tier = kv_primary_tier_new (buffer, NULL, FALSE);
  g_autoptr(GHashTable) model = g_hash_table_new (kv_key_hash, kv_key_equal);
  g_autoptr(GRand) rand = g_rand_new_with_seed (42);
  g_autofree KvKey **pool = g_new (KvKey *, n_pool);
  g_autofree guint8 *slot_used = g_new0 (guint8, n_slots);

  for (guint i = 0; i < n_pool; i++)
    {
      guint8 hash[16] = { 0 };

      hash[0] = (guint8) i;
      hash[1] = (guint8) (i >> 8);
      pool[i] = kv_key_new (hash, sizeof hash, i % 2);
    }

  for (guint round = 0; round < n_rounds; round++)
    {
      KvKey *batch[8];
      guint n = g_rand_int_range (rand, 1, G_N_ELEMENTS (batch) + 1);
      g_autoptr(KvPrepareStoreResult) prepared = NULL;
      KvKey * const *to_store, * const *evicted;
      guint n_to_store, n_evicted;
      gboolean success = g_rand_int_range (rand, 0, 10) != 0;

      for (guint i = 0; i < n; i++)
        batch[i] = pool[g_rand_int_range (rand, 0, n_pool)];
      prepared = kv_primary_tier_prepare_store (tier, batch, n, &error);
      g_assert_no_error (error);
      to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
      evicted = kv_prepare_store_result_get_evicted_keys (prepared, &n_evicted);
      for (guint i = 0; i < n_evicted; i++)
        g_assert_true (g_hash_table_remove (model, evicted[i]));
      for (guint i = 0; i < n_to_store; i++)
        {
          g_assert_false (g_hash_table_contains (model, to_store[i]));
          g_assert_cmpint (kv_primary_tier_lookup (tier, to_store[i]), ==, KV_LOOKUP_RESULT_HIT_PENDING);
        }
      kv_primary_tier_complete_store (tier, to_store, n_to_store, success);
      for (guint i = 0; success && i < n_to_store; i++)
        g_hash_table_add (model, to_store[i]);

      if (round % 50 != 0 && round != n_rounds - 1)
        continue;
      memset (slot_used, 0, n_slots);
      for (guint i = 0; i < n_pool; i++)
        {
          KvLookupResult r = kv_primary_tier_lookup (tier, pool[i]);
          guint32 slot = G_MAXUINT32;

          if (!g_hash_table_contains (model, pool[i]))
            {
              g_assert_cmpint (r, ==, KV_LOOKUP_RESULT_MISS);
              continue;
            }
          g_assert_cmpint (r, ==, KV_LOOKUP_RESULT_HIT);
          g_assert_true (kv_primary_tier_get_chunk_id (tier, pool[i], &slot));
          g_assert_cmpuint (slot, <, n_slots);
          g_assert_false (slot_used[slot]);
          slot_used[slot] = TRUE;
        }
      g_assert_cmpuint (kv_primary_tier_get_n_stored (tier), ==, g_hash_table_size (model));
    }

  kv_primary_tier_reset (tier);
  for (guint i = 0; i < n_pool; i++)
    {
      g_assert_cmpint (kv_primary_tier_lookup (tier, pool[i]), ==, KV_LOOKUP_RESULT_MISS);
      kv_key_unref (pool[i]);
    }
  g_assert_cmpuint (kv_primary_tier_get_n_stored (tier), ==, 0);
}

static gint
ref_of (Fixture *fx,
        char     name)
{
  gint ref = G_MININT;

  g_assert_true (kv_primary_tier_get_ref_count (fx->tier, K (name), &ref));
  return ref;
}

/* The manager's cascade shortcut: written → pinned once per cascade job,
 * all or nothing, and the LRU order after the last unpin is that of
 * complete_store() followed by prepare_read(). */
static void
test_complete_store_pinned (Fixture       *fx,
                            gconstpointer  data)
{
  KvKey *keys[N_TEST_KEYS];
  guint32 ids[N_TEST_KEYS];
  guint n;

  make_tier (fx, 4, NULL, TRUE);
  store (fx, "a");
  assert_prepare_store (fx, "bc", "bc", "1,2", "");
  assert_events (fx, "+a");

  /* a is ready already: nothing happens, the manager takes the long way */
  n = keys_of (fx, "ba", keys);
  g_assert_false (_kv_primary_tier_complete_store_pinned (fx->tier, keys, n, 2, ids));
  assert_counts (fx, 3, 1, 1, 2);
  g_assert_cmpint (kv_primary_tier_lookup (fx->tier, K ('b')), ==, KV_LOOKUP_RESULT_HIT_PENDING);
  assert_events (fx, "");

  /* a repeated key is written once and pinned per occurrence */
  n = keys_of (fx, "bcb", keys);
  g_assert_true (_kv_primary_tier_complete_store_pinned (fx->tier, keys, n, 2, ids));
  g_assert_cmpuint (ids[0], ==, 1);
  g_assert_cmpuint (ids[1], ==, 2);
  g_assert_cmpuint (ids[2], ==, 1);
  g_assert_cmpint (ref_of (fx, 'b'), ==, 4);
  g_assert_cmpint (ref_of (fx, 'c'), ==, 2);
  assert_counts (fx, 3, 1, 1, 0);
  assert_events (fx, "+bc");

  /* pinned chunks are not evictable: only a goes */
  assert_prepare_store (fx, "d", "d", "3", "");
  complete_store (fx, "d", TRUE);
  n = keys_of (fx, "c", keys);
  kv_primary_tier_complete_load (fx->tier, keys, n);
  kv_primary_tier_complete_load (fx->tier, keys, n);
  n = keys_of (fx, "bb", keys);
  kv_primary_tier_complete_load (fx->tier, keys, n);
  kv_primary_tier_complete_load (fx->tier, keys, n);
  assert_counts (fx, 4, 0, 4, 0);
  /* unpinned last, c then b are the most recent: a and d go first */
  assert_prepare_store (fx, "ef", "ef", "3,0", "ad");
  assert_events (fx, "+d -ad");
}

/* Another policy hears every call of the long way: no shortcut. */
static void
test_complete_store_pinned_custom_policy (Fixture       *fx,
                                          gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = KV_CACHE_POLICY (kv_arc_policy_new (4));
  KvKey *keys[N_TEST_KEYS];
  guint32 ids[N_TEST_KEYS];
  guint n;

  make_tier (fx, 4, policy, FALSE);
  assert_prepare_store (fx, "ab", "ab", "0,1", "");
  n = keys_of (fx, "ab", keys);
  g_assert_false (_kv_primary_tier_complete_store_pinned (fx->tier, keys, n, 1, ids));
  assert_counts (fx, 2, 2, 0, 2);
}

/* The checksum carried with a slot's bytes holds from when the slot's
 * writer sets it until the tier hands the slot to a new writer or frees
 * it: a stale one would have every secondary tier store a chunk under the
 * previous chunk's checksum. */
static void
test_slot_checksum (Fixture       *fx,
                    gconstpointer  data)
{
  KvHostBuffer *buffer;
  guint64 checksum = 0;
  KvKey *keys[N_TEST_KEYS];
  guint32 ids[N_TEST_KEYS];
  guint n;

  make_tier (fx, 2, NULL, FALSE);
  buffer = kv_primary_tier_get_buffer (fx->tier);

  /* a slot taken by a store: whatever was carried before is forgotten */
  kv_host_buffer_set_slot_checksum (buffer, 0, 0x1111);
  assert_prepare_store (fx, "a", "a", "0", "");
  g_assert_false (kv_primary_tier_get_slot_checksum (fx->tier, 0, &checksum));
  /* the writer (the device) sets it; the chunk becomes ready with it */
  kv_host_buffer_set_slot_checksum (buffer, 0, 0xa0a0);
  complete_store (fx, "a", TRUE);
  g_assert_true (kv_primary_tier_get_slot_checksum (fx->tier, 0, &checksum));
  g_assert_cmpuint (checksum, ==, 0xa0a0);
  g_assert_true (kv_primary_tier_get_slot_checksum (fx->tier, 0, NULL));
  /* pinning and unpinning do not change the bytes */
  load (fx, "a");
  unload (fx, "a");
  n = keys_of (fx, "a", keys);
  g_assert_true (kv_primary_tier_prepare_read (fx->tier, keys, n, ids, NULL));
  kv_primary_tier_complete_load (fx->tier, keys, n);
  g_assert_true (kv_primary_tier_get_slot_checksum (fx->tier, 0, &checksum));
  g_assert_cmpuint (checksum, ==, 0xa0a0);

  /* a failed store frees its slot, and with it the checksum */
  assert_prepare_store (fx, "b", "b", "1", "");
  kv_host_buffer_set_slot_checksum (buffer, 1, 0xb0b0);
  complete_store (fx, "b", FALSE);
  g_assert_false (kv_primary_tier_get_slot_checksum (fx->tier, 1, NULL));

  /* an evicted chunk's slot: freed, then taken by the new key from the
   * free list */
  assert_prepare_store (fx, "b", "b", "1", "");
  kv_host_buffer_set_slot_checksum (buffer, 1, 0xb1b1);
  complete_store (fx, "b", TRUE);
  assert_prepare_store (fx, "c", "c", "0", "a");
  g_assert_false (kv_primary_tier_get_slot_checksum (fx->tier, 0, NULL));
  g_assert_true (kv_primary_tier_get_slot_checksum (fx->tier, 1, &checksum));
  g_assert_cmpuint (checksum, ==, 0xb1b1);
  complete_store (fx, "c", TRUE);
  g_assert_false (kv_primary_tier_get_slot_checksum (fx->tier, 0, NULL));

  /* whoever rewrites a slot through the buffer drops it too */
  {
    g_autoptr(GBytes) x = g_bytes_new_static ("x", 1);

    g_assert_true (kv_host_buffer_write_slot (buffer, 1, x, NULL));
  }
  g_assert_false (kv_primary_tier_get_slot_checksum (fx->tier, 1, NULL));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

#define ADD(path, func) \
  g_test_add ("/kvtier/primary-tier/" path, Fixture, NULL, fixture_setup, func, fixture_teardown)

  ADD ("properties", test_properties);
  ADD ("evict-when-full", test_evict_when_full);
  ADD ("slot-allocation", test_slot_allocation);
  ADD ("states-and-lookups", test_states_and_lookups);
  ADD ("prepare-load-validation", test_prepare_load_validation);
  ADD ("prepare-store-filter", test_prepare_store_filter);
  ADD ("no-space-fail-fast", test_no_space_fail_fast);
  ADD ("protected-inputs", test_protected_inputs);
  ADD ("protection-ends-with-batch", test_protection_ends_with_batch);
  ADD ("complete-store", test_complete_store);
  ADD ("events", test_events);
  ADD ("events-disabled", test_events_disabled);
  ADD ("complete-load-unpinned", test_complete_load_unpinned);
  ADD ("reset", test_reset);
  ADD ("touch-eviction-order", test_touch_eviction_order);
  ADD ("on-request-finished", test_on_request_finished);
  ADD ("arc-policy", test_arc_policy);
  ADD ("complete-store-pinned", test_complete_store_pinned);
  ADD ("complete-store-pinned-custom-policy", test_complete_store_pinned_custom_policy);
  ADD ("slot-checksum", test_slot_checksum);

#undef ADD

  g_test_add_func ("/kvtier/primary-tier/index-churn", test_index_churn);

  return g_test_run ();
}
