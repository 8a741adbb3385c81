/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-manager-stack.h"

#include <string.h>

#include "test-chunk-data.h"

/* A primary of @n_slots slots of @slot_size, a manager on it, and the tier
 * @make_tier makes on the primary's buffer, added to the manager. */
void
test_stack_init (TestStack         *s,
                 guint              n_slots,
                 gsize              slot_size,
                 TestStackTierFunc  make_tier,
                 gpointer           data)
{
  g_autoptr(GError) error = NULL;

  memset (s, 0, sizeof *s);
  s->key = test_chunk_key;
  s->fill = test_chunk_fill;
  s->buffer = kv_host_buffer_new (n_slots, slot_size, &error);
  g_assert_no_error (error);
  s->primary = kv_primary_tier_new (s->buffer, NULL, TRUE);
  s->manager = kv_tiering_manager_new (s->primary);
  s->tier = make_tier (s->buffer, data);
  g_assert_nonnull (s->tier);
  g_assert_true (kv_tiering_manager_add_tier (s->manager, s->tier, &error));
  g_assert_no_error (error);
}

/* Shuts the manager down (which reports every job) and drops everything. */
void
test_stack_clear (TestStack *s)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (kv_tiering_manager_shutdown (s->manager, &error));
  g_assert_no_error (error);
  g_clear_object (&s->manager);
  g_clear_object (&s->tier);
  g_clear_object (&s->primary);
  g_clear_object (&s->buffer);
}

/* Ends a step. */
void
test_stack_step (TestStack *s)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (s->manager, end);
}

/* Waits for the tier's jobs, then lets the manager take their results
 * (results are consumed at most once per step, at its first entry point,
 * so this ends the current step and runs one more). */
void
test_stack_settle (TestStack *s)
{
  g_assert_true (kv_secondary_tier_drain_jobs (s->tier, NULL));
  test_stack_step (s);
  test_stack_step (s);
}

/* The engine's path for a GPU → primary store: prepare, fill each new
 * slot with its key's bytes (chunk first + i), complete; the manager then
 * cascades to the tier, and this waits for it. Returns how many keys were
 * new to the primary. */
guint
test_stack_store (TestStack *s,
                  guint      first,
                  guint      n)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *id = g_strdup_printf ("store-%u", s->n_requests++);
  g_autoptr(KvRequest) request = kv_request_new (id, NULL);
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  gsize slot_size = kv_host_buffer_get_slot_size (s->buffer);
  KvKey * const *to_store;
  const guint32 *chunk_ids;
  guint n_to_store = 0;

  for (guint i = 0; i < n; i++)
    g_ptr_array_add (keys, s->key (first + i));
  kv_tiering_manager_on_new_request (s->manager, request);
  prepared = kv_tiering_manager_prepare_store (s->manager, (KvKey * const *) keys->pdata, n,
                                               request, &error);
  g_assert_no_error (error);
  g_assert_nonnull (prepared);
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, NULL);
  for (guint i = 0; i < n_to_store; i++)
    for (guint k = 0; k < n; k++)
      if (kv_key_equal (to_store[i], keys->pdata[k]))
        {
          kv_host_buffer_clear_slot_checksum (s->buffer, chunk_ids[i]);
          s->fill (kv_host_buffer_peek_slot (s->buffer, chunk_ids[i]), slot_size, first + k);
        }
  if (n_to_store > 0)
    kv_tiering_manager_complete_store (s->manager, to_store, n_to_store, request, TRUE);
  kv_tiering_manager_on_request_finished (s->manager, request);
  test_stack_settle (s);
  return n_to_store;
}

/* Looks @key up for @request, stepping, until the answer is not RETRY
 * (the tier asked its storage and has not heard back); at most 10 s. */
KvLookupResult
test_stack_lookup_settled (TestStack *s,
                           KvKey     *key,
                           KvRequest *request)
{
  gint64 end = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  KvLookupResult r;

  while ((r = kv_tiering_manager_lookup (s->manager, key, request)) == KV_LOOKUP_RESULT_RETRY)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, end);
      test_stack_step (s);
      /* what the owner thread's main loop would run meanwhile (a tier in
       * JavaScript answers from its callbacks) */
      while (g_main_context_iteration (NULL, FALSE))
        ;
      g_usleep (500);
    }
  return r;
}

/* Whether primary slot @slot holds chunk @index's bytes. */
gboolean
test_stack_chunk_is (TestStack *s,
                     guint32    slot,
                     guint      index)
{
  gsize len = kv_host_buffer_get_slot_size (s->buffer);
  g_autofree guint8 *expected = g_malloc (len);

  s->fill (expected, len, index);
  return memcmp (kv_host_buffer_peek_slot (s->buffer, slot), expected, len) == 0;
}

/* Promotes chunk @index from the tier (it must not be in the primary):
 * returns the final lookup result, and with a HIT checks the bytes. */
KvLookupResult
test_stack_promote (TestStack *s,
                    guint      index)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *id = g_strdup_printf ("load-%u", s->n_requests++);
  g_autoptr(KvRequest) request = kv_request_new (id, NULL);
  g_autoptr(KvKey) key = s->key (index);
  KvLookupResult r;

  kv_tiering_manager_on_new_request (s->manager, request);
  r = test_stack_lookup_settled (s, key, request);
  if (r == KV_LOOKUP_RESULT_HIT_PENDING)
    {
      test_stack_step (s);             /* submits the promotion */
      test_stack_settle (s);           /* the load lands, the manager sees it */
      r = kv_tiering_manager_lookup (s->manager, key, request);
    }
  if (r == KV_LOOKUP_RESULT_HIT)
    {
      g_autofree guint32 *chunks = NULL;
      guint n_chunks = 0;

      chunks = kv_tiering_manager_prepare_load (s->manager, &key, 1, request, &n_chunks, &error);
      g_assert_no_error (error);
      g_assert_nonnull (chunks);
      g_assert_cmpuint (n_chunks, ==, 1);
      g_assert_true (test_stack_chunk_is (s, chunks[0], index));
      kv_tiering_manager_complete_load (s->manager, &key, 1, request);
    }
  kv_tiering_manager_on_request_finished (s->manager, request);
  test_stack_step (s);
  return r;
}

/* No primary slot of chunks [0, @n_keys) is pinned, none is half-written,
 * and the manager has no job in flight. */
void
test_stack_assert_no_pins (TestStack *s,
                           guint      n_keys)
{
  for (guint i = 0; i < n_keys; i++)
    {
      g_autoptr(KvKey) key = s->key (i);
      gint ref = 0;

      if (kv_primary_tier_get_ref_count (s->primary, key, &ref))
        g_assert_cmpint (ref, ==, 0);
    }
  g_assert_cmpuint (kv_primary_tier_get_n_write_pending (s->primary), ==, 0);
  g_assert_cmpuint (kv_tiering_manager_get_n_active_jobs (s->manager), ==, 0);
}
