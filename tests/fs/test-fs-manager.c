/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-chunk-data.h"
#include "test-dir.h"
#include "test-fs-tier.h"
#include "test-manager-stack.h"

/* The fs tier under a KvTieringManager: cascades, promotions, events seen
 * through the manager, and damaged files (bit flips in the header and the
 * payload, truncation, a file renamed to another key's name, an empty
 * file): each detected, deleted, counted and never loaded. */

typedef struct
{
  FsVariant   variant;
  const char *root;
  KvClock    *clock;
  gboolean    events;
} TierSpec;

static KvSecondaryTier *
make_tier (KvHostBuffer *buffer,
           gpointer      data)
{
  TierSpec *spec = data;
  g_autoptr(GError) error = NULL;
  KvFsTier *tier = fs_test_tier_new_full (buffer, spec->root, &spec->variant, spec->clock, &error,
                                          "enable-events", spec->events,
                                          "deadline-ms", 1000, "breaker-threshold", 0, NULL);

  g_assert_no_error (error);
  return KV_SECONDARY_TIER (tier);
}

static void
test_cascade_and_promotion (gconstpointer data)
{
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  TierSpec spec = { *(const FsVariant *) data, root, NULL, FALSE };
  TestStack a = { 0 }, b = { 0 };

  test_stack_init (&a, 8, FS_TEST_SLOT, make_tier, &spec);
  g_assert_cmpuint (test_stack_store (&a, 0, 4), ==, 4);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (a.tier), KV_FS_COUNTER_STORED_CHUNKS), ==, 4);
  test_stack_assert_no_pins (&a, 4);
  /* 8 more chunks push the first ones out of the 8-slot primary... */
  g_assert_cmpuint (test_stack_store (&a, 4, 4), ==, 4);
  g_assert_cmpuint (test_stack_store (&a, 8, 4), ==, 4);
  {
    g_autoptr(KvKey) k0 = test_chunk_key (0);

    g_assert_cmpint (kv_primary_tier_lookup (a.primary, k0), ==, KV_LOOKUP_RESULT_MISS);
  }
  /* ...and they come back from the fs tier (promotion) */
  g_assert_cmpint (test_stack_promote (&a, 0), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&a, 1), ==, KV_LOOKUP_RESULT_HIT);
  test_stack_assert_no_pins (&a, 12);
  test_stack_clear (&a);

  /* another process (a fresh primary) on the same directory */
  test_stack_init (&b, 8, FS_TEST_SLOT, make_tier, &spec);
  kv_fs_tier_wait_index_ready (KV_FS_TIER (b.tier));
  for (guint i = 0; i < 12; i++)
    g_assert_cmpint (test_stack_promote (&b, i), ==, KV_LOOKUP_RESULT_HIT);
  g_assert_cmpint (test_stack_promote (&b, 20), ==, KV_LOOKUP_RESULT_MISS);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (b.tier), KV_FS_COUNTER_LOADED_CHUNKS), ==, 12);
  test_stack_assert_no_pins (&b, 21);
  test_stack_clear (&b);
  test_dir_remove (root);
}

static void
test_cascade_event (gconstpointer data)
{
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  TierSpec spec = { *(const FsVariant *) data, root, NULL, TRUE };
  TestStack s = { 0 };
  KvEvent **events;
  guint n_storage = 0;

  test_stack_init (&s, 8, FS_TEST_SLOT, make_tier, &spec);
  test_stack_store (&s, 0, 3);
  events = kv_tiering_manager_take_events (s.manager);
  for (guint i = 0; events[i] != NULL; i++)
    {
      if (kv_event_get_medium (events[i]) == KV_MEDIUM_STORAGE)
        {
          guint n_keys = 0;

          kv_event_get_keys (events[i], &n_keys);
          g_assert_cmpuint (n_keys, ==, 3);
          g_assert_false (kv_event_get_removed (events[i]));
          n_storage++;
        }
      kv_event_unref (events[i]);
    }
  g_free (events);
  g_assert_cmpuint (n_storage, ==, 1);
  test_stack_clear (&s);
  test_dir_remove (root);
}

typedef enum {
  DAMAGE_HEADER_BIT,
  DAMAGE_PAYLOAD_BIT,
  DAMAGE_TRUNCATE,
  DAMAGE_RENAMED,
  DAMAGE_EMPTY,
} Damage;

static void
damage_file (KvFsTier *tier,
             Damage    damage)
{
  g_autoptr(KvKey) victim = test_chunk_key (0);
  g_autoptr(KvKey) other = test_chunk_key (1);
  g_autofree char *path = kv_fs_tier_get_chunk_path (tier, victim);
  g_autofree char *other_path = kv_fs_tier_get_chunk_path (tier, other);
  g_autofree char *contents = NULL;
  gsize length = 0;

  g_assert_true (g_file_get_contents (path, &contents, &length, NULL));
  switch (damage)
    {
    case DAMAGE_HEADER_BIT:
      contents[100] ^= 0x04;          /* inside the key hash */
      break;
    case DAMAGE_PAYLOAD_BIT:
      contents[length - 1] ^= 0x40;
      break;
    case DAMAGE_TRUNCATE:
      length -= 4096;
      break;
    case DAMAGE_RENAMED:
      /* key 1's file under key 0's name */
      g_free (contents);
      g_assert_true (g_file_get_contents (other_path, &contents, &length, NULL));
      break;
    case DAMAGE_EMPTY:
      length = 0;
      break;
    }
  g_assert_true (g_file_set_contents (path, contents, length, NULL));
}

/* A fresh stack on the damaged directory tries to promote key 0. */
static void
test_corruption (gconstpointer data)
{
  static const struct { Damage damage; const char *name; gboolean checksum; } cases[] = {
    { DAMAGE_HEADER_BIT, "header bit flip", TRUE },
    { DAMAGE_PAYLOAD_BIT, "payload bit flip", TRUE },
    { DAMAGE_TRUNCATE, "truncation", FALSE },
    { DAMAGE_RENAMED, "renamed to another key", FALSE },
    { DAMAGE_EMPTY, "zero-length", FALSE },
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree char *root = test_dir_make ("kvtier-fs-test");
      TierSpec spec = { *(const FsVariant *) data, root, NULL, TRUE };
      TestStack s = { 0 };
      g_autoptr(KvKey) key = test_chunk_key (0);
      g_autofree char *path = NULL;
      KvEvent **events;
      gboolean removed_event = FALSE;

      test_stack_init (&s, 8, FS_TEST_SLOT, make_tier, &spec);
      test_stack_store (&s, 0, 2);
      damage_file (KV_FS_TIER (s.tier), cases[c].damage);
      path = kv_fs_tier_get_chunk_path (KV_FS_TIER (s.tier), key);
      test_stack_clear (&s);

      test_stack_init (&s, 8, FS_TEST_SLOT, make_tier, &spec);
      kv_fs_tier_wait_index_ready (KV_FS_TIER (s.tier));
      if (cases[c].damage == DAMAGE_TRUNCATE || cases[c].damage == DAMAGE_EMPTY)
        {
          /* a file of the wrong size is caught by the restart scan */
          g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 1);
          g_assert_cmpint (test_stack_promote (&s, 0), ==, KV_LOOKUP_RESULT_MISS);
        }
      else
        {
          /* the index knows the file; the load finds it bad */
          g_assert_cmpint (test_stack_promote (&s, 0), ==, KV_LOOKUP_RESULT_MISS);
          g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_CORRUPT_CHUNKS), ==, 1);
          g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_CHECKSUM_FAILURES),
                            ==, cases[c].checksum ? 1 : 0);
          g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_LOADED_CHUNKS), ==, 0);
          events = kv_tiering_manager_take_events (s.manager);
          for (guint i = 0; events[i] != NULL; i++)
            {
              removed_event |= kv_event_get_medium (events[i]) == KV_MEDIUM_STORAGE &&
                               kv_event_get_removed (events[i]);
              kv_event_unref (events[i]);
            }
          g_free (events);
          g_assert_true (removed_event);
        }
      /* deleted, never loaded: the primary does not have it, nor the tier */
      g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
      g_assert_cmpint (kv_primary_tier_lookup (s.primary, key), ==, KV_LOOKUP_RESULT_MISS);
      g_assert_cmpint (test_stack_promote (&s, 0), ==, KV_LOOKUP_RESULT_MISS);
      /* the undamaged neighbour still loads */
      g_assert_cmpint (test_stack_promote (&s, 1), ==, KV_LOOKUP_RESULT_HIT);
      test_stack_assert_no_pins (&s, 2);
      g_test_message ("%s: detected, deleted, counted", cases[c].name);
      test_stack_clear (&s);
      test_dir_remove (root);
    }
}

/* A cascade that stalls past its deadline is reported failed and its
 * primary slots are unpinned. */
static void
test_stalled_cascade_unpins (gconstpointer data)
{
  g_autofree char *root = test_dir_make ("kvtier-fs-test");
  g_autoptr(KvClock) clock = kv_clock_new_manual (1000000);
  TierSpec spec = { *(const FsVariant *) data, root, clock, FALSE };
  TestStack s = { 0 };
  g_autoptr(KvRequest) request = kv_request_new ("stalled", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  KvKey *keys[2] = { test_chunk_key (0), test_chunk_key (1) };
  KvKey * const *to_store;
  guint n_to_store = 0;
  gint ref = -5;

  test_stack_init (&s, 8, FS_TEST_SLOT, make_tier, &spec);
  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (KV_FS_TIER (s.tier)), TRUE);
  kv_tiering_manager_on_new_request (s.manager, request);
  prepared = kv_tiering_manager_prepare_store (s.manager, keys, 2, request, &error);
  g_assert_no_error (error);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  kv_tiering_manager_complete_store (s.manager, to_store, n_to_store, request, TRUE);
  test_stack_step (&s);
  g_assert_true (kv_primary_tier_get_ref_count (s.primary, keys[0], &ref));
  g_assert_cmpint (ref, ==, 1);                   /* pinned by the cascade */

  kv_clock_advance (clock, 1000 * 1000);
  test_stack_step (&s);                             /* the deadline passes */
  test_stack_step (&s);
  g_assert_true (kv_primary_tier_get_ref_count (s.primary, keys[0], &ref));
  g_assert_cmpint (ref, ==, 0);
  g_assert_cmpuint (kv_fs_tier_get_counter (KV_FS_TIER (s.tier), KV_FS_COUNTER_TIMEOUTS), ==, 1);
  kv_tiering_manager_on_request_finished (s.manager, request);
  kv_fs_engine_set_stalled (kv_fs_tier_get_engine (KV_FS_TIER (s.tier)), FALSE);
  test_stack_settle (&s);
  test_stack_assert_no_pins (&s, 2);
  g_assert_cmpuint (test_dir_count_files (root, ".kv"), ==, 0);
  test_stack_clear (&s);
  kv_key_unref (keys[0]);
  kv_key_unref (keys[1]);
  test_dir_remove (root);
}

int
main (int argc, char **argv)
{
  static const FsVariant variants[] = {
#if KV_FS_HAVE_URING
    { KV_FS_IO_ENGINE_URING, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER },
#endif
    { KV_FS_IO_ENGINE_GIO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_KVTIER },
    { KV_FS_IO_ENGINE_THREADS, KV_FS_O_DIRECT_OFF, KV_FS_LAYOUT_KIND_KVTIER },
  };
  static const FsVariant vllm = { KV_FS_IO_ENGINE_AUTO, KV_FS_O_DIRECT_AUTO, KV_FS_LAYOUT_KIND_VLLM };

  g_test_init (&argc, &argv, G_TEST_OPTION_ISOLATE_DIRS, NULL);

  for (guint i = 0; i < G_N_ELEMENTS (variants); i++)
    if (!fs_test_skip_engine (variants[i].engine))
    {
      const char *e = fs_engine_name (variants[i].engine);
      g_autofree char *p1 = g_strdup_printf ("/kvtier/fs/manager/%s/cascade-and-promotion", e);
      g_autofree char *p2 = g_strdup_printf ("/kvtier/fs/manager/%s/corruption", e);
      g_autofree char *p3 = g_strdup_printf ("/kvtier/fs/manager/%s/stalled-cascade-unpins", e);

      g_test_add_data_func (p1, &variants[i], test_cascade_and_promotion);
      g_test_add_data_func (p2, &variants[i], test_corruption);
      g_test_add_data_func (p3, &variants[i], test_stalled_cascade_unpins);
    }
  g_test_add_data_func ("/kvtier/fs/manager/vllm/cascade-and-promotion", &vllm,
                        test_cascade_and_promotion);
  g_test_add_data_func ("/kvtier/fs/manager/cascade-event", &variants[G_N_ELEMENTS (variants) - 1],
                        test_cascade_event);

  return g_test_run ();
}
