/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "bench-stack.h"

#include <string.h>

#include "bench-util.h"
#include "kv-chunk-format.h"

/* A primary of @n_slots slots of @chunk bytes, each byte @fill (touched
 * now, outside what is measured), and a manager over it. */
gboolean
bench_stack_init_primary (BenchStack  *s,
                          guint        n_slots,
                          gsize        chunk,
                          guint8       fill,
                          GError     **error)
{
  s->buffer = kv_host_buffer_new (n_slots, chunk, error);
  if (s->buffer == NULL)
    return FALSE;
  memset (kv_host_buffer_get_data (s->buffer), fill, kv_host_buffer_get_size (s->buffer));
  s->primary = kv_primary_tier_new (s->buffer, NULL, FALSE);
  s->manager = kv_tiering_manager_new (s->primary);
  if (s->wakeup_ms == 0)
    s->wakeup_ms = 5;
  return TRUE;
}

/* Adds @tier (transfer full; NULL when making it failed, with @error
 * set) to the manager. */
gboolean
bench_stack_add_tier (BenchStack  *s,
                      gpointer     tier,
                      GError     **error)
{
  if (tier == NULL)
    return FALSE;
  s->tier = KV_SECONDARY_TIER (tier);
  if (!kv_tiering_manager_add_tier (s->manager, s->tier, error))
    return FALSE;
  s->wakeup_fd = kv_tiering_manager_get_wakeup_fd (s->manager);
  return TRUE;
}

/* From now on stored slots carry their checksum, as KvHostDevice's copy
 * into the primary leaves it (kv_host_buffer_set_slot_checksum()): the
 * tier writes it into the chunk record without reading the payload.
 * Every slot holds the same bytes (bench_stack_init_primary()), so one
 * checksum serves them all. */
void
bench_stack_carry_checksums (BenchStack *s)
{
  s->carry_checksum = TRUE;
  s->slot_checksum = kv_chunk_checksum (kv_host_buffer_peek_slot (s->buffer, 0),
                                        kv_host_buffer_get_slot_size (s->buffer));
}

void
bench_stack_clear (BenchStack *s)
{
  if (s->manager != NULL)
    kv_tiering_manager_shutdown (s->manager, NULL);
  g_clear_object (&s->manager);
  g_clear_object (&s->tier);
  g_clear_object (&s->primary);
  g_clear_object (&s->buffer);
}

/* One engine step: the manager consumes the tier's results. */
void
bench_stack_step (BenchStack *s)
{
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);

  kv_tiering_manager_on_schedule_end (s->manager, end);
}

/* Sleeps until some tier result is queued (the manager's eventfd), at
 * most wakeup_ms. */
void
bench_stack_wait_wakeup (BenchStack *s)
{
  GPollFD pfd = { s->wakeup_fd, G_IO_IN, 0 };

  g_poll (&pfd, 1, s->wakeup_ms);
}

/* Chunk @i's key: its number, then key_tag (so that two benches sharing
 * a store do not share keys). */
KvKey *
bench_stack_key (BenchStack *s,
                 guint64     i)
{
  guint8 hash[32] = { 0 };

  for (guint b = 0; b < 8; b++)
    hash[b] = (guint8) (i >> (8 * b));
  hash[31] = s->key_tag;
  return kv_key_new (hash, sizeof hash, 0);
}

/* Cascades chunks first..first+n_chunks-1 to the tier, @batch per
 * request; returns the seconds until every store was answered. */
gdouble
bench_stack_run_store (BenchStack *s,
                       guint64     first,
                       guint64     n_chunks,
                       guint       batch)
{
  g_autoptr(GError) error = NULL;
  gdouble start = bench_now_s ();
  guint64 next = 0;
  guint n_req = 0;

  while (next < n_chunks)
    {
      guint n = MIN (batch, n_chunks - next);
      g_autofree char *id = g_strdup_printf ("s%u", n_req++);
      g_autoptr(KvRequest) request = kv_request_new (id, NULL);
      g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
      g_autoptr(KvPrepareStoreResult) prepared = NULL;
      guint n_to_store = 0;
      guint n_stuck = 0;
      KvKey * const *to_store;

      for (guint i = 0; i < n; i++)
        g_ptr_array_add (keys, bench_stack_key (s, first + next + i));
      kv_tiering_manager_on_new_request (s->manager, request);
      while ((prepared = kv_tiering_manager_prepare_store (s->manager, (KvKey * const *) keys->pdata,
                                                           n, request, &error)) == NULL)
        {
          /* every slot is pinned by a cascade in flight: wait for one
           * (with none in flight for a while, nothing will free one) */
          if (kv_secondary_tier_get_n_jobs_in_flight (s->tier) > 0)
            n_stuck = 0;
          else if (++n_stuck > 100)
            g_error ("the store pass cannot go on: %s", error->message);
          g_clear_error (&error);
          bench_stack_step (s);
          bench_stack_wait_wakeup (s);
        }
      to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_to_store);
      if (s->carry_checksum)
        {
          guint n_ids = 0;
          const guint32 *ids = kv_prepare_store_result_get_chunk_ids (prepared, &n_ids);

          /* the device → primary copy is not what is measured: the slots
           * keep their bytes and carry their checksum as KvHostDevice's
           * copy leaves it */
          for (guint i = 0; i < n_ids; i++)
            kv_host_buffer_set_slot_checksum (s->buffer, ids[i], s->slot_checksum);
        }
      if (n_to_store > 0)
        kv_tiering_manager_complete_store (s->manager, to_store, n_to_store, request, TRUE);
      kv_tiering_manager_on_request_finished (s->manager, request);
      bench_stack_step (s);
      next += n;
    }
  kv_secondary_tier_drain_jobs (s->tier, NULL);
  bench_stack_step (s);
  bench_stack_step (s);
  return bench_now_s () - start;
}

/* Turns of the load pass (each waits up to wakeup_ms) with no chunk
 * accepted and no job in flight before it gives up. */
#define BENCH_IDLE_TURNS 200

/* Looks chunks 0..n_chunks-1 up, @batch per request, RETRY until the
 * tier knows, and promotes them; returns the seconds until every one
 * landed (or a load failed: the tier's own counts say). */
gdouble
bench_stack_run_load (BenchStack *s,
                      guint64     n_chunks,
                      guint       batch)
{
  gdouble start = bench_now_s ();
  guint64 next = 0;
  guint n_req = 0;
  guint64 target = s->loaded_chunks (s->tier) + n_chunks;
  guint n_idle = 0;

  while (next < n_chunks)
    {
      guint n = MIN (batch, n_chunks - next);
      g_autofree char *id = g_strdup_printf ("l%u", n_req++);
      g_autoptr(KvRequest) request = kv_request_new (id, NULL);
      guint accepted = 0;

      kv_tiering_manager_on_new_request (s->manager, request);
      /* RETRY until the tier's existence checks answered (for this
       * request) */
      for (gboolean retry = TRUE; retry;)
        {
          retry = FALSE;
          accepted = 0;
          for (guint i = 0; i < n; i++)
            {
              g_autoptr(KvKey) key = bench_stack_key (s, next + i);
              KvLookupResult r = kv_tiering_manager_lookup (s->manager, key, request);

              if (r == KV_LOOKUP_RESULT_RETRY)
                retry = TRUE;
              else if ((r == KV_LOOKUP_RESULT_HIT_PENDING || r == KV_LOOKUP_RESULT_HIT) &&
                       accepted == i)
                accepted++;
            }
          if (retry)
            {
              bench_stack_step (s);
              bench_stack_wait_wakeup (s);
            }
        }
      kv_tiering_manager_on_request_finished (s->manager, request);
      bench_stack_step (s);
      next += accepted;
      if (accepted < n)
        bench_stack_wait_wakeup (s);
      if (accepted == 0 && s->load_failures (s->tier) > 0)
        break;
      /* a chunk the tier does not hold answers MISS every time: with
       * nothing in flight for a while, none of it will come */
      if (accepted > 0 || kv_secondary_tier_get_n_jobs_in_flight (s->tier) > 0)
        n_idle = 0;
      else if (++n_idle > BENCH_IDLE_TURNS)
        {
          g_printerr ("error: the load pass gave up at chunk %" G_GUINT64_FORMAT
                      ", which the tier does not hold\n", next);
          break;
        }
    }
  while (s->loaded_chunks (s->tier) < target && s->load_failures (s->tier) == 0)
    {
      guint64 before = s->loaded_chunks (s->tier);

      kv_secondary_tier_drain_jobs (s->tier, NULL);
      bench_stack_step (s);
      if (s->loaded_chunks (s->tier) == before &&
          kv_secondary_tier_get_n_jobs_in_flight (s->tier) == 0)
        break;   /* nothing left that could land: the caller counts the shortfall */
    }
  bench_stack_step (s);
  return bench_now_s () - start;
}

/* bench_stack_run_load(), timed: returns its seconds, sets *@out_cpu_s
 * to the CPU this process spent in it, and reports a shortfall of loaded
 * chunks (the tier's own count) as @what (bench_shortfall()). */
gdouble
bench_stack_timed_load (BenchStack *s,
                        guint64     n_chunks,
                        guint       batch,
                        const char *what,
                        gdouble    *out_cpu_s)
{
  guint64 loaded = s->loaded_chunks (s->tier);
  gdouble cpu = bench_self_cpu_s ();
  gdouble t = bench_stack_run_load (s, n_chunks, batch);

  *out_cpu_s = bench_self_cpu_s () - cpu;
  bench_shortfall (s->loaded_chunks (s->tier) - loaded, n_chunks, what);
  return t;
}

/* Untimed: looks every chunk of [0, n_chunks) up straight at the tier (no
 * promotion), stepping it until none answers RETRY or @timeout_us passed,
 * so that a tier with an index of known chunks (redis, s3) knows them. */
void
bench_stack_look_up_all (BenchStack *s,
                         guint64     n_chunks,
                         gint64      timeout_us)
{
  g_autoptr(KvRequest) request = kv_request_new ("look-up-all", NULL);
  g_autoptr(KvScheduleEnd) end = kv_schedule_end_new (NULL, NULL);
  gint64 deadline = g_get_monotonic_time () + timeout_us;
  gboolean retry = TRUE;

  while (retry && g_get_monotonic_time () < deadline)
    {
      retry = FALSE;
      for (guint64 i = 0; i < n_chunks; i++)
        {
          g_autoptr(KvKey) key = bench_stack_key (s, i);

          if (kv_secondary_tier_lookup (s->tier, key, request) == KV_LOOKUP_RESULT_RETRY)
            retry = TRUE;
        }
      if (retry)
        {
          kv_secondary_tier_on_schedule_end (s->tier, end);
          g_usleep (1000);
        }
    }
  kv_secondary_tier_on_request_finished (s->tier, request);
}

static gboolean shortfall_seen;

/* Reports a pass that moved fewer chunks (@got) than it was given
 * (@want): its figures are not the tier's rate, so the bench is to exit
 * with 1 (bench_shortfall_seen()), which fails CI's small run of it. */
void
bench_shortfall (guint64     got,
                 guint64     want,
                 const char *what)
{
  if (got >= want)
    return;
  g_printerr ("error: %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " chunks %s\n", got, want, what);
  shortfall_seen = TRUE;
}

gboolean
bench_shortfall_seen (void)
{
  return shortfall_seen;
}
