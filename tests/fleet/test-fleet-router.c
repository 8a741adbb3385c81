/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include <string.h>

#include <kvtier.h>

/* KvFleetRouter's policies on a hand-made index. */

typedef struct
{
  KvFleetIndex *index;
  KvKey        *keys[8];
  guint         nodes[4];
} Fixture;

static void
fixture_setup (Fixture       *fx,
               gconstpointer  data)
{
  fx->index = kv_fleet_index_new ();
  for (guint i = 0; i < G_N_ELEMENTS (fx->keys); i++)
    {
      guint8 hash[32];

      memset (hash, (int) i + 1, sizeof hash);
      fx->keys[i] = kv_key_new (hash, sizeof hash, 0);
    }
  for (guint n = 0; n < G_N_ELEMENTS (fx->nodes); n++)
    {
      g_autofree char *name = g_strdup_printf ("127.0.0.1:%u", 7000 + n);

      fx->nodes[n] = kv_fleet_index_add_node (fx->index, name);
    }
}

static void
fixture_teardown (Fixture       *fx,
                  gconstpointer  data)
{
  for (guint i = 0; i < G_N_ELEMENTS (fx->keys); i++)
    kv_key_unref (fx->keys[i]);
  g_object_unref (fx->index);
}

/* Node @node holds the first @n keys in its primary tier. */
static void
hold (Fixture *fx,
      guint    node,
      guint    n)
{
  for (guint i = 0; i < n; i++)
    g_assert_true (kv_fleet_index_update (fx->index, fx->nodes[node], fx->keys[i],
                                          KV_FLEET_LOCATION_PRIMARY));
}

static guint
route (KvFleetRouter    *router,
       Fixture          *fx,
       guint             n_keys,
       KvRouteDecision **out)
{
  g_autoptr(GError) error = NULL;
  KvRouteDecision *decision = kv_fleet_router_route (router, fx->keys, n_keys, &error);
  guint node;

  g_assert_no_error (error);
  g_assert_nonnull (decision);
  node = kv_route_decision_get_node (decision);
  if (out != NULL)
    *out = decision;
  else
    kv_route_decision_unref (decision);
  return node;
}

static void
test_round_robin (Fixture       *fx,
                  gconstpointer  data)
{
  g_autoptr(KvFleetRouter) router = kv_fleet_router_new (fx->index, KV_ROUTE_POLICY_ROUND_ROBIN);

  hold (fx, 2, 8);
  g_object_set (router, "use-peers", FALSE, NULL);
  for (guint i = 0; i < 8; i++)
    g_assert_cmpuint (route (router, fx, 8, NULL), ==, i % 4);
  /* a forgotten node is skipped */
  kv_fleet_index_forget_node (fx->index, fx->nodes[1]);
  g_assert_cmpuint (route (router, fx, 8, NULL), ==, 0);
  g_assert_cmpuint (route (router, fx, 8, NULL), ==, 2);
  g_assert_cmpuint (route (router, fx, 8, NULL), ==, 3);
  g_assert_cmpuint (route (router, fx, 8, NULL), ==, 0);
  g_assert_cmpuint (kv_fleet_router_get_n_routed (router, 0), ==, 4);
}

static void
test_least_loaded (Fixture       *fx,
                   gconstpointer  data)
{
  g_autoptr(KvFleetRouter) router = kv_fleet_router_new (fx->index, KV_ROUTE_POLICY_LEAST_LOADED);

  g_assert_cmpuint (route (router, fx, 4, NULL), ==, 0);
  g_assert_cmpuint (route (router, fx, 4, NULL), ==, 1);
  g_assert_cmpuint (route (router, fx, 4, NULL), ==, 2);
  kv_fleet_router_finish (router, 1);
  /* 1 and 3 are idle; 1 was given more requests so far */
  g_assert_cmpuint (route (router, fx, 4, NULL), ==, 3);
  g_assert_cmpuint (route (router, fx, 4, NULL), ==, 1);
  g_assert_cmpuint (kv_fleet_router_get_load (router, 1), ==, 1);
  g_assert_cmpuint (kv_fleet_router_get_load (router, 0), ==, 1);
}

/* The node with the longest prefix gets the request, until its load
 * leaves the bound; the others are then told to fetch from it. */
static void
test_cache_aware (Fixture       *fx,
                  gconstpointer  data)
{
  g_autoptr(KvFleetRouter) router = kv_fleet_router_new (fx->index, KV_ROUTE_POLICY_CACHE_AWARE);
  g_autoptr(KvRouteDecision) first = NULL;
  g_autoptr(KvRouteDecision) second = NULL;
  g_autoptr(KvRouteDecision) third = NULL;
  g_autoptr(GVariant) params = NULL;
  g_autoptr(GVariant) none = NULL;
  const char *peer = NULL;

  hold (fx, 1, 6);
  hold (fx, 3, 3);

  g_assert_cmpuint (route (router, fx, 8, &first), ==, 1);
  g_assert_cmpuint (kv_route_decision_get_prefix (first), ==, 6);
  g_assert_cmpint (kv_route_decision_get_peer (first), ==, -1);
  g_assert_null (kv_route_decision_get_peer_name (first));
  g_assert_cmpuint (kv_route_decision_get_n_computed (first), ==, 2);
  none = kv_route_decision_dup_transfer_params (first);
  g_assert_cmpuint (g_variant_n_children (none), ==, 0);

  /* node 1 has load 1; the bound is 1.25 × (1 + 1) / 4 < 2: it is out,
   * and the cheapest other node (3, which holds 3 of the 6) fetches the
   * rest from node 1 */
  g_assert_cmpuint (route (router, fx, 8, &second), ==, 3);
  g_assert_cmpuint (kv_route_decision_get_prefix (second), ==, 3);
  g_assert_cmpint (kv_route_decision_get_peer (second), ==, 1);
  g_assert_cmpstr (kv_route_decision_get_peer_name (second), ==, "127.0.0.1:7001");
  g_assert_cmpuint (kv_route_decision_get_peer_prefix (second), ==, 6);
  g_assert_cmpuint (kv_route_decision_get_n_computed (second), ==, 2);
  params = kv_route_decision_dup_transfer_params (second);
  g_assert_true (g_variant_lookup (params, "kv_peer", "&s", &peer));
  g_assert_cmpstr (peer, ==, "127.0.0.1:7001");

  /* without a bound, node 1 keeps them all */
  g_object_set (router, "max-load-factor", 0.0, NULL);
  g_assert_cmpuint (route (router, fx, 8, &third), ==, 1);
  kv_fleet_router_finish (router, 1);
  kv_fleet_router_finish (router, 1);
  kv_fleet_router_finish (router, 3);

  /* a load cost larger than what the cache saves sends it elsewhere */
  g_object_set (router, "load-cost", 100.0, NULL);
  route (router, fx, 8, NULL);   /* node 1 again: load 0 everywhere */
  g_assert_cmpuint (route (router, fx, 8, NULL), !=, 1);

  /* without peers, the other nodes count only their own prefix */
  {
    g_autoptr(KvFleetRouter) local = kv_fleet_router_new (fx->index, KV_ROUTE_POLICY_CACHE_AWARE);
    g_autoptr(KvRouteDecision) d1 = NULL;
    g_autoptr(KvRouteDecision) d2 = NULL;

    g_object_set (local, "use-peers", FALSE, NULL);
    g_assert_cmpuint (route (local, fx, 8, &d1), ==, 1);
    /* 1 is out of the bound; 3 holds the most of the rest */
    g_assert_cmpuint (route (local, fx, 8, &d2), ==, 3);
    g_assert_cmpint (kv_route_decision_get_peer (d2), ==, -1);
    g_assert_cmpuint (kv_route_decision_get_n_computed (d2), ==, 5);
  }
}

static void
test_no_node (void)
{
  g_autoptr(KvFleetIndex) index = kv_fleet_index_new ();
  g_autoptr(KvFleetRouter) router = kv_fleet_router_new (index, KV_ROUTE_POLICY_CACHE_AWARE);
  g_autoptr(GError) error = NULL;
  KvRoutePolicy policy;

  g_assert_null (kv_fleet_router_route (router, NULL, 0, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND);
  g_clear_error (&error);

  g_assert_true (kv_route_policy_from_string ("least-loaded", &policy, NULL));
  g_assert_cmpint (policy, ==, KV_ROUTE_POLICY_LEAST_LOADED);
  g_assert_cmpstr (kv_route_policy_to_string (KV_ROUTE_POLICY_CACHE_AWARE), ==, "cache-aware");
  g_assert_false (kv_route_policy_from_string ("random", &policy, &error));
  g_assert_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  g_test_add ("/fleet/router/round-robin", Fixture, NULL, fixture_setup, test_round_robin,
              fixture_teardown);
  g_test_add ("/fleet/router/least-loaded", Fixture, NULL, fixture_setup, test_least_loaded,
              fixture_teardown);
  g_test_add ("/fleet/router/cache-aware", Fixture, NULL, fixture_setup, test_cache_aware,
              fixture_teardown);
  g_test_add_func ("/fleet/router/no-node", test_no_node);

  return g_test_run ();
}
