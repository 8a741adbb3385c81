/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include <string.h>

#include "kv-arc-policy.h"
#include "kv-cache-policy.h"
#include "kv-lru-policy.h"
#include "kv-types.h"

#define N_TEST_KEYS 40

/* keys[i] is named by the letter 'a' + i (for i < 26) in the assertions. */
typedef struct
{
  KvKey *keys[N_TEST_KEYS];
} Fixture;

static void
fixture_setup (Fixture       *fx,
               gconstpointer  data)
{
  for (guint i = 0; i < N_TEST_KEYS; i++)
    {
      guint8 hash[8] = { 0xca, 0xfe, 0, 0, 0, 0, 0, (guint8) i };

      fx->keys[i] = kv_key_new (hash, sizeof hash, 0);
    }
}

static void
fixture_teardown (Fixture       *fx,
                  gconstpointer  data)
{
  for (guint i = 0; i < N_TEST_KEYS; i++)
    kv_key_unref (fx->keys[i]);
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

/* Renders evicted keys as letters ("abc") and frees them. */
static char *
take_names (Fixture  *fx,
            KvKey   **keys)
{
  GString *names = g_string_new (NULL);

  g_assert_nonnull (keys);
  for (KvKey **k = keys; *k != NULL; k++)
    {
      g_string_append_c (names, 'a' + key_index (fx, *k));
      kv_key_unref (*k);
    }
  g_free (keys);

  return g_string_free (names, FALSE);
}

static void
assert_evict (Fixture       *fx,
              KvCachePolicy *policy,
              guint          n,
              KvKey * const *protected_keys,
              guint          n_protected,
              const char    *expected)
{
  g_autofree char *names = take_names (fx, kv_cache_policy_evict (policy, n, protected_keys,
                                                                  n_protected));

  g_assert_cmpstr (names, ==, expected);
}

#define K(c) (fx->keys[(c) - 'a'])

static void
insert_all (Fixture       *fx,
            KvCachePolicy *policy,
            const char    *names,
            gboolean       evictable)
{
  for (const char *c = names; *c != '\0'; c++)
    kv_cache_policy_insert (policy, K (*c), evictable);
}

/* --- LRU --- */

static void
test_lru_evict_oldest_first (Fixture       *fx,
                             gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();

  insert_all (fx, policy, "abcd", TRUE);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 4);

  assert_evict (fx, policy, 1, NULL, 0, "a");
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 3);
  assert_evict (fx, policy, 3, NULL, 0, "bcd");
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 0);
  g_assert_null (kv_cache_policy_evict (policy, 1, NULL, 0));
}

static void
test_lru_evict_zero (Fixture       *fx,
                     gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();

  /* Empty (not NULL) even with nothing to evict. */
  assert_evict (fx, policy, 0, NULL, 0, "");
  insert_all (fx, policy, "ab", TRUE);
  assert_evict (fx, policy, 0, NULL, 0, "");
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);
}

static void
test_lru_insert_non_evictable (Fixture       *fx,
                               gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();

  kv_cache_policy_insert (policy, K ('a'), FALSE);
  kv_cache_policy_insert (policy, K ('b'), TRUE);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 1);
  g_assert_null (kv_cache_policy_evict (policy, 2, NULL, 0));

  /* Becoming evictable puts a at the most recent end, after b. */
  kv_cache_policy_mark_evictable (policy, K ('a'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);
  assert_evict (fx, policy, 2, NULL, 0, "ba");
}

static void
test_lru_mark_non_evictable (Fixture       *fx,
                             gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();

  insert_all (fx, policy, "abc", TRUE);
  kv_cache_policy_mark_non_evictable (policy, K ('a'));
  kv_cache_policy_mark_non_evictable (policy, K ('a'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);
  assert_evict (fx, policy, 1, NULL, 0, "b");

  /* Released: most recent. */
  kv_cache_policy_mark_evictable (policy, K ('a'));
  kv_cache_policy_mark_evictable (policy, K ('a'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);
  assert_evict (fx, policy, 2, NULL, 0, "ca");
}

static void
test_lru_touch_reversed (Fixture       *fx,
                         gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();
  KvKey *touched[] = { K ('a'), K ('b') };

  insert_all (fx, policy, "abcd", TRUE);
  /* [a, b]: b is moved first, then a, so a ends up the most recent. */
  kv_cache_policy_touch (policy, touched, G_N_ELEMENTS (touched));
  assert_evict (fx, policy, 4, NULL, 0, "cdba");
}

static void
test_lru_touch_skips_pinned (Fixture       *fx,
                             gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();
  KvKey *touched[] = { K ('b'), K ('z') };

  insert_all (fx, policy, "abc", TRUE);
  kv_cache_policy_mark_non_evictable (policy, K ('b'));
  /* A pinned key and an unknown key are not moved (nor added). */
  kv_cache_policy_touch (policy, touched, G_N_ELEMENTS (touched));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);
  kv_cache_policy_touch (policy, touched, 0);
  assert_evict (fx, policy, 2, NULL, 0, "ac");
  kv_cache_policy_mark_evictable (policy, K ('b'));
  assert_evict (fx, policy, 1, NULL, 0, "b");
}

static void
test_lru_protected (Fixture       *fx,
                    gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();
  g_autoptr(KvKey) a_copy = NULL;
  KvKey *protect_small[1];
  KvKey *protect_large[20];

  insert_all (fx, policy, "abcdef", TRUE);

  /* Protection compares keys by value, not by pointer. */
  {
    gsize len;
    const guint8 *hash = kv_key_get_hash (K ('a'), &len);

    a_copy = kv_key_new (hash, len, 0);
  }
  protect_small[0] = a_copy;
  assert_evict (fx, policy, 2, protect_small, 1, "bc");

  /* More than 16 protected keys: the hash-set path. d and e are in it. */
  for (guint i = 0; i < G_N_ELEMENTS (protect_large); i++)
    protect_large[i] = fx->keys[i + 3];
  assert_evict (fx, policy, 1, protect_large, G_N_ELEMENTS (protect_large), "a");
  g_assert_null (kv_cache_policy_evict (policy, 1, protect_large, G_N_ELEMENTS (protect_large)));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 3);
  assert_evict (fx, policy, 3, NULL, 0, "def");
}

/* A key protected in one evict() is not protected in the next, even when
 * that first call changed nothing, and protecting an untracked key
 * protects nothing. */
static void
test_lru_protection_per_call (Fixture       *fx,
                              gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();
  KvKey *protect_a[] = { K ('a') };
  KvKey *protect_b[] = { K ('b') };

  insert_all (fx, policy, "abc", TRUE);
  g_assert_null (kv_cache_policy_evict (policy, 3, protect_a, 1));
  assert_evict (fx, policy, 1, NULL, 0, "a");

  assert_evict (fx, policy, 1, protect_b, 1, "c");
  assert_evict (fx, policy, 1, NULL, 0, "b");

  /* d and e reuse the nodes of evicted keys; protecting a key no longer
   * tracked protects nothing. */
  insert_all (fx, policy, "de", TRUE);
  assert_evict (fx, policy, 2, protect_b, 1, "de");
}

/* Many more keys than one block of nodes: order, removal, reuse after
 * clear and eviction all hold across blocks. */
static void
test_lru_many_keys (Fixture       *fx,
                    gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  guint n = 1000;

  for (guint i = 0; i < n; i++)
    {
      guint8 hash[8] = { 0xbe, 0xef, 0, 0, 0, 0, (guint8) (i >> 8), (guint8) i };

      g_ptr_array_add (keys, kv_key_new (hash, sizeof hash, 0));
    }

  for (guint round = 0; round < 2; round++)
    {
      g_autofree KvKey **evicted = NULL;
      KvKey *protect[] = { keys->pdata[0], keys->pdata[n - 1] };

      for (guint i = 0; i < n; i++)
        kv_cache_policy_insert (policy, keys->pdata[i], TRUE);
      /* Every odd key leaves; the even ones stay in order. */
      for (guint i = 1; i < n; i += 2)
        kv_cache_policy_remove (policy, keys->pdata[i]);
      g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, n / 2);

      evicted = kv_cache_policy_evict (policy, n / 2 - 1, protect, G_N_ELEMENTS (protect));
      g_assert_nonnull (evicted);
      for (guint i = 0; i < n / 2 - 1; i++)
        {
          g_assert_true (kv_key_equal (evicted[i], keys->pdata[2 * (i + 1)]));
          kv_key_unref (evicted[i]);
        }
      g_assert_null (evicted[n / 2 - 1]);
      g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 1);

      if (round == 0)
        kv_cache_policy_clear (policy);
    }
}

static void
test_lru_atomic (Fixture       *fx,
                 gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();
  KvKey *protect[] = { K ('a') };

  insert_all (fx, policy, "abc", TRUE);
  kv_cache_policy_mark_non_evictable (policy, K ('c'));

  /* Two keys are evictable but one is protected: nothing changes. */
  g_assert_null (kv_cache_policy_evict (policy, 2, protect, 1));
  g_assert_null (kv_cache_policy_evict (policy, 3, NULL, 0));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);
  assert_evict (fx, policy, 2, NULL, 0, "ab");
}

static void
test_lru_remove_clear (Fixture       *fx,
                       gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_lru_policy_new ();

  insert_all (fx, policy, "abc", TRUE);
  kv_cache_policy_insert (policy, K ('d'), FALSE);
  kv_cache_policy_remove (policy, K ('b'));
  kv_cache_policy_remove (policy, K ('d'));
  kv_cache_policy_remove (policy, K ('z'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);

  /* d is unknown now: marking it does nothing. */
  kv_cache_policy_mark_evictable (policy, K ('d'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);

  kv_cache_policy_clear (policy);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 0);
  g_assert_null (kv_cache_policy_evict (policy, 1, NULL, 0));

  /* Usable again after clear. */
  insert_all (fx, policy, "ca", TRUE);
  assert_evict (fx, policy, 2, NULL, 0, "ca");
}

static void
test_new_for_name (void)
{
  GError *error = NULL;
  g_autoptr(KvCachePolicy) lru = NULL;
  g_autoptr(KvCachePolicy) arc = NULL;
  KvCachePolicy *unknown;
  guint capacity = 99;

  lru = kv_cache_policy_new_for_name ("lru", &error);
  g_assert_no_error (error);
  g_assert_true (KV_IS_LRU_POLICY (lru));

  arc = kv_cache_policy_new_for_name ("arc", &error);
  g_assert_no_error (error);
  g_assert_true (KV_IS_ARC_POLICY (arc));
  g_object_get (arc, "capacity", &capacity, NULL);
  g_assert_cmpuint (capacity, ==, 0);

  unknown = kv_cache_policy_new_for_name ("fifo", &error);
  g_assert_null (unknown);
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "fifo"));
  g_assert_nonnull (strstr (error->message, "lru, arc"));
  g_clear_error (&error);
}

/* --- ARC --- */

static void
test_arc_touch_promotes_to_t2 (Fixture       *fx,
                               gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (4);
  KvKey *touched[] = { K ('a') };

  insert_all (fx, policy, "abc", TRUE);
  kv_cache_policy_touch (policy, touched, 1);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 3);

  /* |T1| = 2 > p = 0: T1 first (b, c), though a is the oldest; T2 last. */
  assert_evict (fx, policy, 1, NULL, 0, "b");
  assert_evict (fx, policy, 1, NULL, 0, "c");
  assert_evict (fx, policy, 1, NULL, 0, "a");
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (KV_ARC_POLICY (policy)), ==, 0);
}

static void
test_arc_touch_reversed (Fixture       *fx,
                         gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (4);
  KvKey *touched[] = { K ('a'), K ('b') };

  insert_all (fx, policy, "abc", TRUE);
  kv_cache_policy_touch (policy, touched, G_N_ELEMENTS (touched));
  /* T1 = [c], T2 = [b, a] (a most recent). */
  assert_evict (fx, policy, 3, NULL, 0, "cba");
}

static void
test_arc_ghost_b1_grows_target (Fixture       *fx,
                                gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (4);
  KvArcPolicy *arc = KV_ARC_POLICY (policy);
  KvKey *protect_t1[] = { K ('b'), K ('c'), K ('d') };

  insert_all (fx, policy, "abcd", TRUE);
  assert_evict (fx, policy, 1, NULL, 0, "a");
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 3);

  /* a comes back from B1: T1 was too small, and a goes to T2. */
  kv_cache_policy_insert (policy, K ('a'), TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 1);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 4);

  /* a is in T2: with T1 protected, it is the only candidate. */
  assert_evict (fx, policy, 1, protect_t1, G_N_ELEMENTS (protect_t1), "a");

  /* a comes back from B2: T2 was too small, the target shrinks. */
  kv_cache_policy_insert (policy, K ('a'), FALSE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 3);
  kv_cache_policy_mark_evictable (policy, K ('a'));

  /* |T1| = 3 > 0: T1 (b, c, d) goes before T2 (a). */
  assert_evict (fx, policy, 4, NULL, 0, "bcda");
}

static void
test_arc_target_bounds_t1 (Fixture       *fx,
                           gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (4);
  KvArcPolicy *arc = KV_ARC_POLICY (policy);
  KvKey *touched[] = { K ('c') };

  /* Grow p to 2 with two B1 ghost hits. */
  insert_all (fx, policy, "ab", TRUE);
  assert_evict (fx, policy, 2, NULL, 0, "ab");
  insert_all (fx, policy, "ab", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 2);

  /* T2 = [a, b, c] (c touched into it), T1 = [d, e]. */
  insert_all (fx, policy, "c", TRUE);
  kv_cache_policy_touch (policy, touched, 1);
  insert_all (fx, policy, "de", TRUE);

  /* |T1| = 2 is not above p = 2, so T2 goes first, least recent first,
   * and T1 follows once T2 is empty. */
  assert_evict (fx, policy, 5, NULL, 0, "abcde");
}

static void
test_arc_scan_resistance (Fixture       *fx,
                          gconstpointer  data)
{
  g_autoptr(KvCachePolicy) arc = kv_arc_policy_new (4);
  g_autoptr(KvCachePolicy) lru = kv_lru_policy_new ();
  KvCachePolicy *policies[] = { arc, lru };
  KvKey *hot[] = { K ('a') };
  gboolean hot_evicted[2] = { FALSE, FALSE };

  for (guint p = 0; p < 2; p++)
    {
      KvCachePolicy *policy = policies[p];

      /* A frequently used key, then three others: the cache is full. */
      kv_cache_policy_insert (policy, K ('a'), TRUE);
      kv_cache_policy_touch (policy, hot, 1);
      insert_all (fx, policy, "bcd", TRUE);

      /* A one-time scan of ten new keys, one eviction per key. */
      for (guint i = 0; i < 10; i++)
        {
          KvKey **evicted = kv_cache_policy_evict (policy, 1, NULL, 0);

          g_assert_nonnull (evicted);
          g_assert_nonnull (evicted[0]);
          g_assert_null (evicted[1]);
          if (kv_key_equal (evicted[0], K ('a')))
            hot_evicted[p] = TRUE;
          kv_key_unref (evicted[0]);
          g_free (evicted);
          kv_cache_policy_insert (policy, fx->keys[10 + i], TRUE);
        }
      g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 4);
    }

  /* ARC keeps the T2 key through the scan; LRU evicts it first. */
  g_assert_false (hot_evicted[0]);
  g_assert_true (hot_evicted[1]);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (KV_ARC_POLICY (arc)), ==, 0);
}

static void
test_arc_only_evictable (Fixture       *fx,
                         gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (4);
  KvKey *touched[] = { K ('c') };

  kv_cache_policy_insert (policy, K ('a'), FALSE);
  insert_all (fx, policy, "bc", TRUE);
  kv_cache_policy_touch (policy, touched, 1);
  kv_cache_policy_mark_non_evictable (policy, K ('c'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 1);

  /* a is older but pinned; c (T2) is pinned too. */
  g_assert_null (kv_cache_policy_evict (policy, 2, NULL, 0));
  assert_evict (fx, policy, 1, NULL, 0, "b");

  /* Releasing does not reorder: a is still T1's least recent. */
  kv_cache_policy_mark_evictable (policy, K ('a'));
  kv_cache_policy_mark_evictable (policy, K ('c'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);
  assert_evict (fx, policy, 2, NULL, 0, "ac");
}

static void
test_arc_atomic (Fixture       *fx,
                 gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (4);
  KvArcPolicy *arc = KV_ARC_POLICY (policy);
  KvKey *protect[] = { K ('b') };

  insert_all (fx, policy, "abc", TRUE);
  kv_cache_policy_mark_non_evictable (policy, K ('c'));

  g_assert_null (kv_cache_policy_evict (policy, 3, NULL, 0));
  g_assert_null (kv_cache_policy_evict (policy, 2, protect, 1));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);

  /* The failed calls changed nothing. */
  assert_evict (fx, policy, 0, NULL, 0, "");
  assert_evict (fx, policy, 1, protect, 1, "a");
  assert_evict (fx, policy, 1, NULL, 0, "b");
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);
}

static void
test_arc_ghost_trim (Fixture       *fx,
                     gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (2);
  KvArcPolicy *arc = KV_ARC_POLICY (policy);

  /* B1 = [a, b]: |T1| + |B1| = 2 is within capacity 2. */
  insert_all (fx, policy, "ab", TRUE);
  assert_evict (fx, policy, 2, NULL, 0, "ab");

  /* T1 = [c, d]; evicting c makes B1 = [a, b, c] and |T1| = 1, so a and b
   * are trimmed (|T1| + |B1| ≤ 2) and only c stays a ghost. */
  insert_all (fx, policy, "cd", TRUE);
  assert_evict (fx, policy, 1, NULL, 0, "c");

  /* a and b are forgotten: storing them again is no ghost hit. */
  insert_all (fx, policy, "ab", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);
  assert_evict (fx, policy, 2, NULL, 0, "da");
  /* T1 = [b]; B1 = [c, d, a] trimmed to [a]: c and d are forgotten too... */
  insert_all (fx, policy, "c", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);

  /* ... while a still is a ghost. */
  insert_all (fx, policy, "a", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 1);
}

static void
test_arc_ghost_trim_b2 (Fixture       *fx,
                        gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (2);
  KvArcPolicy *arc = KV_ARC_POLICY (policy);
  KvKey *touched[] = { K ('a'), K ('b') };
  KvKey *touched_c[] = { K ('c') };

  /* T2 = [b, a], evicted into B2 = [b, a]. */
  insert_all (fx, policy, "ab", TRUE);
  kv_cache_policy_touch (policy, touched, 2);
  assert_evict (fx, policy, 2, NULL, 0, "ba");

  /* c into T2 and out into B2 = [b, a, c]: trimmed to [a, c]. */
  insert_all (fx, policy, "c", TRUE);
  kv_cache_policy_touch (policy, touched_c, 1);
  assert_evict (fx, policy, 1, NULL, 0, "c");

  /* a is still a B2 ghost and goes to T2 (p, already 0, stays 0); b was
   * forgotten and goes to T1. Any other outcome would evict a first. */
  insert_all (fx, policy, "ab", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);
  /* T1 = [b], T2 = [a]: |T1| = 1 > 0, so b first. */
  assert_evict (fx, policy, 2, NULL, 0, "ba");
}

static void
test_arc_ghost_trim_keeps_protected (Fixture       *fx,
                                     gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (2);
  KvArcPolicy *arc = KV_ARC_POLICY (policy);
  KvKey *protect[] = { K ('a') };

  insert_all (fx, policy, "ab", TRUE);
  assert_evict (fx, policy, 2, NULL, 0, "ab");
  insert_all (fx, policy, "cd", TRUE);

  /* Evicting c to make room for a: B1 = [a, b, c] must shrink to one ghost
   * (|T1| = 1). a is protected, so b and c are trimmed instead... */
  assert_evict (fx, policy, 1, protect, 1, "c");

  /* ... and storing a is the ghost hit, while b and c are forgotten. */
  insert_all (fx, policy, "bc", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);
  insert_all (fx, policy, "a", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 1);
}

static void
test_arc_remove_clear (Fixture       *fx,
                       gconstpointer  data)
{
  g_autoptr(KvCachePolicy) policy = kv_arc_policy_new (4);
  KvArcPolicy *arc = KV_ARC_POLICY (policy);
  guint capacity = 99;

  insert_all (fx, policy, "abc", TRUE);
  assert_evict (fx, policy, 1, NULL, 0, "a");
  insert_all (fx, policy, "a", TRUE);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 1);

  kv_cache_policy_remove (policy, K ('b'));
  kv_cache_policy_remove (policy, K ('z'));
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 2);

  /* Capacity can be changed later (a primary tier sets an unset one). */
  g_object_set (policy, "capacity", 8, NULL);
  g_object_get (policy, "capacity", &capacity, NULL);
  g_assert_cmpuint (capacity, ==, 8);

  kv_cache_policy_clear (policy);
  g_assert_cmpuint (kv_cache_policy_get_n_evictable (policy), ==, 0);
  g_assert_cmpuint (kv_arc_policy_get_target_t1 (arc), ==, 0);
  g_assert_null (kv_cache_policy_evict (policy, 1, NULL, 0));

  insert_all (fx, policy, "ba", TRUE);
  assert_evict (fx, policy, 2, NULL, 0, "ba");
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

#define ADD(path, func) \
  g_test_add ("/kvtier/cache-policy/" path, Fixture, NULL, fixture_setup, func, fixture_teardown)

  ADD ("lru/evict-oldest-first", test_lru_evict_oldest_first);
  ADD ("lru/evict-zero", test_lru_evict_zero);
  ADD ("lru/insert-non-evictable", test_lru_insert_non_evictable);
  ADD ("lru/mark-non-evictable", test_lru_mark_non_evictable);
  ADD ("lru/touch-reversed", test_lru_touch_reversed);
  ADD ("lru/touch-skips-pinned", test_lru_touch_skips_pinned);
  ADD ("lru/protected", test_lru_protected);
  ADD ("lru/protection-per-call", test_lru_protection_per_call);
  ADD ("lru/many-keys", test_lru_many_keys);
  ADD ("lru/atomic", test_lru_atomic);
  ADD ("lru/remove-clear", test_lru_remove_clear);
  g_test_add_func ("/kvtier/cache-policy/new-for-name", test_new_for_name);
  ADD ("arc/touch-promotes-to-t2", test_arc_touch_promotes_to_t2);
  ADD ("arc/touch-reversed", test_arc_touch_reversed);
  ADD ("arc/ghost-hits-adapt-target", test_arc_ghost_b1_grows_target);
  ADD ("arc/target-bounds-t1", test_arc_target_bounds_t1);
  ADD ("arc/scan-resistance", test_arc_scan_resistance);
  ADD ("arc/only-evictable", test_arc_only_evictable);
  ADD ("arc/atomic", test_arc_atomic);
  ADD ("arc/ghost-trim", test_arc_ghost_trim);
  ADD ("arc/ghost-trim-b2", test_arc_ghost_trim_b2);
  ADD ("arc/ghost-trim-keeps-protected", test_arc_ghost_trim_keeps_protected);
  ADD ("arc/remove-clear", test_arc_remove_clear);

#undef ADD

  return g_test_run ();
}
