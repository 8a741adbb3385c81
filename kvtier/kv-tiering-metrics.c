/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-tiering-metrics-private.h"

#include <string.h>

#include "kv-ema-backpressure-detector.h"
#include "kv-stats-private.h"

/* The reference's buckets (TieringOffloadingSpec.build_metric_definitions). */
static const gdouble sync_buckets[] = {
  1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1,
};
static const gdouble async_buckets[] = {
  1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10,
};
#define N_SYNC_BUCKETS  G_N_ELEMENTS (sync_buckets)
#define N_ASYNC_BUCKETS G_N_ELEMENTS (async_buckets)

/* Value of an observation once its lookup was counted; any other value is
 * the (relative) time the key was first deferred with RETRY. */
#define RESOLVED_MARK G_MININT64

/* A primary entry's stamp word: in its low 56 bits, the serial of the last
 * request that counted the chunk on the primary label (a hit, or the miss
 * of the lookup that promoted it); in its high 8 bits, a tier label the
 * same request counted the chunk's hit on when that lookup promoted it
 * from there (0: none). Serials, one per request, never reach 2^56. */
#define STAMP_SERIAL_BITS 56
#define STAMP_SERIAL_MASK ((G_GUINT64_CONSTANT (1) << STAMP_SERIAL_BITS) - 1)
#define STAMP_MAX_LABEL 255
#define stamp_serial(stamp) ((stamp) & STAMP_SERIAL_MASK)
#define stamp_label(stamp) ((guint) ((stamp) >> STAMP_SERIAL_BITS))

/* Keys a label's table remembers beyond those of accounting requests (see
 * observation_for()): as many as the primary tier holds chunks, within
 * these bounds. A remembered key costs about 100 bytes (plus the key itself
 * once nothing else holds it). */
#define KEEP_KEYS_MIN 4096
#define KEEP_KEYS_MAX 65536

typedef struct
{
  /* lookups, counted here to keep the lookup path allocation-free */
  guint64 queries;
  guint64 hits;
  guint64 sync_counts[N_SYNC_BUCKETS + 1];
  guint64 sync_n;
  gdouble sync_sum;
  guint64 async_counts[N_ASYNC_BUCKETS + 1];
  guint64 async_n;
  gdouble async_sum;
  /* hits counted through a primary stamp: one query, one hit and a 0 s
   * sync-delay sample each, folded into the above when stats are taken */
  guint64 stamped_hits;
  /* jobs in flight, by KvJobKind */
  guint64 active_jobs[3];
  guint64 write_chunks;   /* primary slots being written by promotions */
  guint64 read_chunks;    /* primary slots being read by cascades and served stores */
  /* bytes and transfer time of finished jobs, by KvJobKind: summed here per
   * job and folded into the stats when they are taken, so that a job
   * probes no table of them */
  gdouble moved_bytes[3];
  gdouble moved_time[3];
  gboolean has_moved_bytes[3];
  gboolean has_moved_time[3];
} LabelState;

/* The families of each job kind's moved bytes and time and failures. */
static const struct
{
  const char *bytes;
  const char *time;
  const char *failures;
  const char *active;
} job_families[3] = {
  [KV_JOB_KIND_CASCADE] = { KV_METRIC_WRITE_BYTES, KV_METRIC_WRITE_TIME,
                            KV_METRIC_CASCADE_JOB_FAILURES, KV_METRIC_ACTIVE_CASCADE_JOBS },
  [KV_JOB_KIND_PROMOTION] = { KV_METRIC_READ_BYTES, KV_METRIC_READ_TIME,
                              KV_METRIC_PROMOTION_JOB_FAILURES, KV_METRIC_ACTIVE_PROMOTION_JOBS },
  [KV_JOB_KIND_SERVED] = { KV_METRIC_SERVED_BYTES, KV_METRIC_SERVED_TIME,
                           KV_METRIC_SERVED_JOB_FAILURES, KV_METRIC_ACTIVE_SERVED_JOBS },
};

/* Finished requests' states kept for the next new requests, so that a
 * steady stream of requests allocates nothing here. */
#define MAX_SPARE_STATES 64

typedef struct
{
  char        *id;
  gsize        id_size;   /* bytes allocated for id */
  gboolean     accounting;
  /* Unique for the tracker's lifetime: observations name their request by
   * it, so a request that stops accounting needs no per-key work. */
  guint64      serial;
  /* The request has observations in the primary label's table (a miss
   * that promoted nothing, or a count whose primary stamp was taken over or
   * dropped): a primary hit whose stamp is not this request's must ask the
   * table. While FALSE, the stamp alone says whether the chunk was
   * counted. */
  gboolean     primary_in_table;
  /* Bit i: the request may have observations in tier label i's table (set
   * with the first; labels from 64 on are always asked). */
  guint64      tiers_in_table;
} RequestState;

/* What one request saw of one key on one tier label (reference §9's
 * observed_lookups[label][key]). The table of the label maps the key to
 * its first observation; observations of the same key by other requests,
 * rare (two waiting requests sharing a prefix), are chained behind it.
 * An observation whose request is no longer accounting is dead and is
 * reused by the next request that looks the key up, so a key looked up by
 * request after request costs one table lookup and no allocation. Keys
 * are forgotten oldest first once the table is over its bound. */
typedef struct _Observation Observation;
struct _Observation
{
  KvKey       *key;      /* referenced in the table's observation, NULL in chained ones */
  guint64      serial;   /* the RequestState that made it */
  gint64       value;    /* RESOLVED_MARK or when the key was first deferred */
  Observation *next;     /* chain of the same key; in the spare list, the next spare */
  GList        age;      /* table's observations: in the label's queue, oldest first */
};

struct _KvTieringMetrics
{
  guint         n_labels;
  char        **labels;
  /* labels[i] as a one-element label tuple for KvStats */
  const char ***label_values;
  guint         n_primary_chunks;
  gsize         chunk_size;
  KvClock      *clock;
  gint64        epoch_us;

  LabelState   *label_state;
  GHashTable   *requests;      /* id -> RequestState* */

  /* lookup accounting: per label, a table KvKey -> Observation and its
   * keys in insertion order */
  GHashTable  **observed;
  GQueue       *observed_age;
  guint         keep_keys;
  /* accounting requests: &RequestState.serial -> RequestState */
  GHashTable   *live;
  GPtrArray    *spare_states;
  guint64       next_serial;
  guint64       oldest_live;   /* no serial below it is live */
  guint64       known_dead;    /* a serial found not live: the usual repeat */
  Observation  *spare;
  /* Cache for the hot path. The request is referenced so that its address
   * cannot be reused by another request while cached. */
  KvRequest    *last_request;
  RequestState *last_state;
  KvStats      *pending;       /* job and backpressure metrics */
  gboolean      every_series_sent;
  /* The manager's lookup in progress: the primary miss it counted and the
   * tier hit it may count after it, whose observations wait for the lookup
   * to settle (see hold_primary_miss()). held_key is NULL when none. */
  KvKey        *held_key;
  RequestState *held_state;
  guint         held_label;
};

char *
kv_tiering_metrics_make_tier_label (guint       index,
                                    const char *tier_type)
{
  g_return_val_if_fail (tier_type != NULL, NULL);

  return g_strdup_printf ("%u:%s", index, tier_type);
}

static void
request_state_free (gpointer data)
{
  RequestState *state = data;

  g_free (state->id);
  g_free (state);
}

static Observation *
observation_take (KvTieringMetrics *m)
{
  Observation *obs = m->spare;

  if (obs != NULL)
    m->spare = obs->next;
  else
    obs = g_new (Observation, 1);
  obs->key = NULL;
  obs->next = NULL;
  obs->age.data = obs;
  obs->age.prev = obs->age.next = NULL;
  return obs;
}

static void
observation_release (KvTieringMetrics *m,
                     Observation      *obs)
{
  g_clear_pointer (&obs->key, kv_key_unref);
  obs->next = m->spare;
  m->spare = obs;
}

/* Frees a table's observation and its chain. */
static void
observation_free_chain (Observation *obs)
{
  while (obs != NULL)
    {
      Observation *next = obs->next;

      g_clear_pointer (&obs->key, kv_key_unref);
      g_free (obs);
      obs = next;
    }
}

KvTieringMetrics *
kv_tiering_metrics_new (const char * const *tier_labels,
                        guint               n_primary_chunks,
                        gsize               chunk_size,
                        KvClock            *clock)
{
  KvTieringMetrics *m;

  g_return_val_if_fail (tier_labels != NULL && tier_labels[0] != NULL, NULL);
  g_return_val_if_fail (clock == NULL || KV_IS_CLOCK (clock), NULL);

  m = g_new0 (KvTieringMetrics, 1);
  m->n_primary_chunks = n_primary_chunks;
  m->chunk_size = chunk_size;
  m->clock = g_object_ref (clock != NULL ? clock : kv_clock_get_default ());
  m->epoch_us = kv_clock_get_time (m->clock);
  m->labels = g_new0 (char *, 1);
  m->requests = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, request_state_free);
  for (guint i = 0; tier_labels[i] != NULL; i++)
    kv_tiering_metrics_add_label (m, tier_labels[i]);
  m->keep_keys = CLAMP (n_primary_chunks, KEEP_KEYS_MIN, KEEP_KEYS_MAX);
  m->live = g_hash_table_new (g_int64_hash, g_int64_equal);
  m->spare_states = g_ptr_array_new_with_free_func (request_state_free);
  m->oldest_live = 1;
  m->pending = kv_stats_new ();
  return m;
}

guint
kv_tiering_metrics_add_label (KvTieringMetrics *m,
                              const char       *label)
{
  guint i;

  g_return_val_if_fail (m != NULL, 0);
  g_return_val_if_fail (label != NULL, 0);

  i = m->n_labels++;
  m->labels = g_renew (char *, m->labels, m->n_labels + 1);
  m->labels[i] = g_strdup (label);
  m->labels[m->n_labels] = NULL;
  m->label_values = g_renew (const char **, m->label_values, m->n_labels);
  m->label_values[i] = g_new0 (const char *, 2);
  m->label_values[i][0] = m->labels[i];
  m->label_state = g_renew (LabelState, m->label_state, m->n_labels);
  memset (&m->label_state[i], 0, sizeof (LabelState));
  m->observed = g_renew (GHashTable *, m->observed, m->n_labels);
  m->observed[i] = g_hash_table_new_full (kv_key_hash, kv_key_equal, NULL,
                                          (GDestroyNotify) observation_free_chain);
  /* GQueues are moved by value: nothing points at the queue itself */
  m->observed_age = g_renew (GQueue, m->observed_age, m->n_labels);
  g_queue_init (&m->observed_age[i]);
  return i;
}

void
kv_tiering_metrics_free (KvTieringMetrics *m)
{
  if (m == NULL)
    return;

  g_object_unref (m->pending);
  g_clear_object (&m->last_request);
  for (guint i = 0; i < m->n_labels; i++)
    g_hash_table_unref (m->observed[i]);
  g_free (m->observed);
  g_free (m->observed_age);
  while (m->spare != NULL)
    {
      Observation *next = m->spare->next;

      g_free (m->spare);
      m->spare = next;
    }
  g_hash_table_unref (m->live);
  g_hash_table_unref (m->requests);
  g_ptr_array_unref (m->spare_states);
  g_free (m->label_state);
  g_object_unref (m->clock);
  for (guint i = 0; i < m->n_labels; i++)
    g_free (m->label_values[i]);
  g_free (m->label_values);
  g_strfreev (m->labels);
  g_free (m);
}

guint
kv_tiering_metrics_get_n_labels (KvTieringMetrics *m)
{
  g_return_val_if_fail (m != NULL, 0);

  return m->n_labels;
}

const char *
kv_tiering_metrics_get_label (KvTieringMetrics *m,
                              guint             label_index)
{
  g_return_val_if_fail (m != NULL, NULL);
  g_return_val_if_fail (label_index < m->n_labels, NULL);

  return m->labels[label_index];
}

/* A state for @id, which has none; a request that starts out not
 * accounting is never live. */
static RequestState *
request_state_add (KvTieringMetrics *m,
                   const char       *id,
                   gboolean          accounting)
{
  RequestState *state;
  gsize id_size = strlen (id) + 1;

  if (m->spare_states->len > 0)
    state = g_ptr_array_steal_index_fast (m->spare_states, m->spare_states->len - 1);
  else
    state = g_new0 (RequestState, 1);
  if (state->id_size < id_size)
    {
      g_free (state->id);
      state->id = g_malloc (id_size);
      state->id_size = id_size;
    }
  memcpy (state->id, id, id_size);
  state->accounting = accounting;
  state->primary_in_table = FALSE;
  state->tiers_in_table = 0;
  state->serial = ++m->next_serial;
  g_hash_table_insert (m->requests, state->id, state);
  if (accounting)
    g_hash_table_add (m->live, &state->serial);
  else if (state->serial == m->oldest_live)
    /* no request is live (the newest serial would be the oldest): keep
     * the bound tight, as retiring the request would, so that stamps of
     * earlier requests stay known dead without a table probe */
    m->oldest_live = m->next_serial + 1;
  return state;
}

static RequestState *
get_request_state (KvTieringMetrics *m,
                   KvRequest        *request,
                   const char       *id)
{
  RequestState *state;

  /* The manager looks up a request's keys in a row. */
  if (request != NULL && request == m->last_request)
    return m->last_state;

  state = g_hash_table_lookup (m->requests, id);
  if (state == NULL)
    state = request_state_add (m, id, TRUE);

  if (request != NULL)
    {
      g_set_object (&m->last_request, request);
      m->last_state = state;
    }
  return state;
}

/* The request stops accounting: its observations die at once, whatever
 * their number (they are reused or forgotten later). */
static void
request_state_retire (KvTieringMetrics *m,
                      RequestState     *state)
{
  GHashTableIter iter;
  gpointer key;

  if (!state->accounting)
    return;
  state->accounting = FALSE;
  g_hash_table_remove (m->live, &state->serial);

  if (state->serial != m->oldest_live)
    return;
  /* The oldest live request left: find the next oldest (the live requests
   * are those still waiting for blocks, a short list). */
  m->oldest_live = m->next_serial + 1;
  g_hash_table_iter_init (&iter, m->live);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    m->oldest_live = MIN (m->oldest_live, *(guint64 *) key);
}

static inline gboolean
serial_is_live (KvTieringMetrics *m,
                guint64           serial)
{
  if (serial < m->oldest_live || serial == m->known_dead)
    return FALSE;
  if (g_hash_table_contains (m->live, &serial))
    return TRUE;
  /* Serials are never reused: a dead one stays dead. */
  m->known_dead = serial;
  return FALSE;
}

static gboolean
entry_is_dead (KvTieringMetrics *m,
               Observation      *head)
{
  for (Observation *obs = head; obs != NULL; obs = obs->next)
    if (serial_is_live (m, obs->serial))
      return FALSE;
  return TRUE;
}

/* Over its bound, a label's table forgets its oldest key, unless a request
 * still accounting observed it: that key is moved to the young end and the
 * table stays over its bound by one until the next insert, so the table
 * holds at most keep_keys keys plus those of accounting requests. */
static void
forget_oldest (KvTieringMetrics *m,
               guint             label_index)
{
  GQueue *age = &m->observed_age[label_index];
  GList *link = age->head;
  Observation *head = link->data;

  g_queue_unlink (age, link);
  if (!entry_is_dead (m, head))
    {
      g_queue_push_tail_link (age, link);
      return;
    }

  g_hash_table_steal (m->observed[label_index], head->key);
  while (head->next != NULL)
    {
      Observation *chained = head->next;

      head->next = chained->next;
      observation_release (m, chained);
    }
  observation_release (m, head);
}

/* The observation of @key by the request of @serial on @label, or NULL. */
static Observation *
observation_of (KvTieringMetrics *m,
                guint64           serial,
                guint             label_index,
                KvKey            *key)
{
  for (Observation *obs = g_hash_table_lookup (m->observed[label_index], key); obs != NULL;
       obs = obs->next)
    if (obs->serial == serial)
      return obs;
  return NULL;
}

/* Whether @state looked @key up on @label before, asking the table only
 * when the request has observations there. */
static gboolean
observed_before (KvTieringMetrics *m,
                 RequestState     *state,
                 guint             label_index,
                 KvKey            *key)
{
  if (label_index == 0 ? !state->primary_in_table
                       : label_index < 64 && (state->tiers_in_table & (G_GUINT64_CONSTANT (1) << label_index)) == 0)
    return FALSE;
  return observation_of (m, state->serial, label_index, key) != NULL;
}

static Observation *observation_for (KvTieringMetrics *m, RequestState *state,
                                     guint label_index, KvKey *key, gboolean *fresh);

/* Keeps in @label's table that @state counted @key there. */
static void
record_resolved (KvTieringMetrics *m,
                 RequestState     *state,
                 guint             label_index,
                 KvKey            *key)
{
  gboolean fresh;

  observation_for (m, state, label_index, key, &fresh)->value = RESOLVED_MARK;
}

/* The observation of @key by @state on @label, or a fresh one for it
 * (*fresh TRUE: the request never looked the key up before). */
static Observation *
observation_for (KvTieringMetrics *m,
                 RequestState     *state,
                 guint             label_index,
                 KvKey            *key,
                 gboolean         *fresh)
{
  GHashTable *table = m->observed[label_index];
  Observation *head = g_hash_table_lookup (table, key);
  Observation *obs;

  if (label_index == 0)
    state->primary_in_table = TRUE;
  else if (label_index < 64)
    state->tiers_in_table |= G_GUINT64_CONSTANT (1) << label_index;
  *fresh = TRUE;
  if (G_LIKELY (head != NULL))
    {
      Observation *dead = NULL;

      if (head->serial == state->serial)
        {
          *fresh = FALSE;
          return head;
        }
      for (obs = head->next; obs != NULL; obs = obs->next)
        if (obs->serial == state->serial)
          {
            *fresh = FALSE;
            return obs;
          }

      /* Not seen by this request: reuse a dead observation of the key. */
      for (obs = head; dead == NULL && obs != NULL; obs = obs->next)
        if (!serial_is_live (m, obs->serial))
          dead = obs;
      if (dead == NULL)
        {
          dead = observation_take (m);
          dead->next = head->next;
          head->next = dead;
        }
      dead->serial = state->serial;
      return dead;
    }

  if (g_hash_table_size (table) >= m->keep_keys)
    forget_oldest (m, label_index);

  obs = observation_take (m);
  obs->key = kv_key_ref (key);
  obs->serial = state->serial;
  g_hash_table_insert (table, obs->key, obs);
  g_queue_push_tail_link (&m->observed_age[label_index], &obs->age);
  return obs;
}

/* One query (and hit) and its sync-delay sample. */
static inline void
count_answer (LabelState *ls,
              gboolean    hit,
              gdouble     dt_s)
{
  ls->queries += 1;
  ls->hits += hit;
  /* Most lookups take well under the first bound: skip the search. */
  ls->sync_counts[dt_s <= sync_buckets[0] ? 0
                                          : kv_stats_bucket_index (sync_buckets, N_SYNC_BUCKETS, dt_s)] += 1;
  ls->sync_n += 1;
  ls->sync_sum += dt_s;
}

/* Records what @stamp says its request counted of @key (on the primary
 * label, and on a tier's when the stamp names one) in the tables, if that
 * request still accounts: the stamp is about to be taken over or dropped. */
static void
primary_spill (KvTieringMetrics *m,
               KvKey            *key,
               guint64           stamp)
{
  guint64 serial = stamp_serial (stamp);
  gpointer orig = NULL;
  RequestState *owner;

  if (serial < m->oldest_live || serial == m->known_dead ||
      !g_hash_table_lookup_extended (m->live, &serial, &orig, NULL))
    return;
  /* live holds &RequestState.serial */
  owner = (RequestState *) ((guint8 *) orig - G_STRUCT_OFFSET (RequestState, serial));
  record_resolved (m, owner, 0, key);
  if (stamp_label (stamp) != 0)
    record_resolved (m, owner, stamp_label (stamp), key);
}

/* @stamp, what a request counted of @key, goes into @word (a primary
 * entry's stamp word: what it held first goes to the tables), or, with
 * @word NULL, into the tables. */
static void
move_stamp (KvTieringMetrics *m,
            KvKey            *key,
            guint64           stamp,
            guint64          *word)
{
  if (word == NULL)
    {
      primary_spill (m, key, stamp);
      return;
    }
  /* a new entry's word is 0 */
  if (*word != 0)
    primary_spill (m, key, *word);
  *word = stamp;
}

/* The observations the lookup held go into @word, the stamp word of the
 * entry it made for a promotion, or, with @word NULL (it made none), into
 * the tables. */
static void
settle_held (KvTieringMetrics *m,
             guint64          *word)
{
  KvKey *key = m->held_key;

  if (key == NULL)
    return;
  m->held_key = NULL;
  move_stamp (m, key, m->held_state->serial | ((guint64) m->held_label << STAMP_SERIAL_BITS), word);
  m->held_label = 0;
}

/* A primary miss of the manager's lookup, counted now. Its observation is
 * held until the lookup settles (hook_lookup_settled()), with the hit on
 * the tier it finds the chunk in (hook_tier_lookup()): when the lookup
 * promotes the chunk, the new entry's stamp keeps both, and the lookup that
 * finds a chunk in a tier inserts nothing into a table (two inserts, and
 * as many keys forgotten, were most of its cost). */
static void
hold_primary_miss (KvTieringMetrics *m,
                   KvRequest        *request,
                   KvKey            *key)
{
  RequestState *state = request == m->last_request ? m->last_state
                                                    : get_request_state (m, request, kv_request_get_id (request));

  /* a lookup that never settled (not the manager's way) loses nothing */
  settle_held (m, NULL);
  if (!state->accounting)
    return;
  /* counted before: a primary observation is always resolved */
  if (observed_before (m, state, 0, key))
    return;
  count_answer (&m->label_state[0], FALSE, 0);
  m->held_key = key;
  m->held_state = state;
  m->held_label = 0;
}

/* A primary hit whose stamp is not the request's: the table decides when
 * the request may have counted the chunk before (see RequestState). */
G_GNUC_NO_INLINE static void
primary_hit_taken_over (KvTieringMetrics *m,
                        RequestState     *state,
                        KvKey            *key,
                        guint64           previous)
{
  if (previous != 0)
    primary_spill (m, key, previous);

  if (state->primary_in_table)
    {
      Observation *head = g_hash_table_lookup (m->observed[0], key);

      for (Observation *obs = head; obs != NULL; obs = obs->next)
        if (obs->serial == state->serial)
          return;   /* a primary label observation is always resolved */
    }
  m->label_state[0].stamped_hits += 1;
}

/* @may_hold: the manager's lookup, which settles (hook_lookup_settled()). */
static inline void
on_primary_lookup (KvTieringMetrics *m,
                   KvRequest        *request,
                   KvKey            *key,
                   KvLookupResult    result,
                   guint64          *stamp,
                   gboolean          may_hold)
{
  RequestState *state;
  guint64 previous;

  if (G_UNLIKELY (result != KV_LOOKUP_RESULT_HIT))
    {
      if (may_hold && result == KV_LOOKUP_RESULT_MISS)
        hold_primary_miss (m, request, key);
      else
        kv_tiering_metrics_on_lookup (m, request, key, 0, result, 0);
      return;
    }

  state = G_LIKELY (request == m->last_request) ? m->last_state
                                                : get_request_state (m, request, kv_request_get_id (request));
  /* counted already by this request: the usual repeat, one compare */
  if (!state->accounting || *stamp == state->serial)
    return;

  previous = *stamp;
  /* the lookup of this request that promoted the chunk counted its miss:
   * the stamp stays, with the tier hit it may hold */
  if (stamp_serial (previous) == state->serial)
    return;
  *stamp = state->serial;
  /* A primary lookup is one hash probe, far below the 1 µs resolution of
   * the clock: its sync-delay sample is 0 s. The previous owner is most
   * often a request that stopped counting. */
  if (G_LIKELY (!state->primary_in_table &&
                (stamp_serial (previous) < m->oldest_live ||
                 stamp_serial (previous) == m->known_dead)))
    m->label_state[0].stamped_hits += 1;
  else
    primary_hit_taken_over (m, state, key, previous);
}

void
kv_tiering_metrics_on_primary_lookup (KvTieringMetrics *m,
                                      KvRequest        *request,
                                      KvKey            *key,
                                      KvLookupResult    result,
                                      guint64          *stamp)
{
  on_primary_lookup (m, request, key, result, stamp, FALSE);
}

void
kv_tiering_metrics_on_stamp_dropped (KvKey    *key,
                                     guint64   stamp,
                                     gpointer  user_data)
{
  primary_spill (user_data, key, stamp);
}

void
kv_tiering_metrics_on_lookup (KvTieringMetrics *m,
                              KvRequest        *request,
                              KvKey            *key,
                              guint             label_index,
                              KvLookupResult    result,
                              gint64            duration_us)
{
  RequestState *state;
  LabelState *ls;
  Observation *obs;
  gboolean fresh;
  gdouble dt_s;

  /* Private API on the lookup hot path: no GType check. */
  g_return_if_fail (m != NULL);
  g_return_if_fail (request != NULL);
  g_return_if_fail (key != NULL);
  g_return_if_fail (label_index < m->n_labels);

  if (result == KV_LOOKUP_RESULT_HIT_PENDING)
    return;

  state = request == m->last_request ? m->last_state
                                      : get_request_state (m, request, kv_request_get_id (request));
  if (!state->accounting)
    return;

  obs = observation_for (m, state, label_index, key, &fresh);

  if (result == KV_LOOKUP_RESULT_RETRY)
    {
      /* Remember when the key was first deferred (setdefault). */
      if (fresh)
        obs->value = kv_clock_get_time (m->clock) - duration_us - m->epoch_us;
      return;
    }

  if (!fresh && obs->value == RESOLVED_MARK)
    return;

  ls = &m->label_state[label_index];
  dt_s = duration_us / 1e6;
  count_answer (ls, result == KV_LOOKUP_RESULT_HIT, dt_s);

  if (!fresh)
    {
      gint64 started_us = obs->value + m->epoch_us;
      gdouble waited_s = (kv_clock_get_time (m->clock) - started_us) / 1e6;

      ls->async_counts[kv_stats_bucket_index (async_buckets, N_ASYNC_BUCKETS, waited_s)] += 1;
      ls->async_n += 1;
      ls->async_sum += waited_s;
    }

  obs->value = RESOLVED_MARK;
}

void
kv_tiering_metrics_on_request_allocated (KvTieringMetrics *m,
                                         const char       *request_id)
{
  RequestState *state;

  g_return_if_fail (m != NULL);
  g_return_if_fail (request_id != NULL);

  /* A request seen first here never counts a lookup: its state starts
   * retired, without passing through the live requests. */
  state = g_hash_table_lookup (m->requests, request_id);
  if (state == NULL)
    request_state_add (m, request_id, FALSE);
  else
    request_state_retire (m, state);
}

void
kv_tiering_metrics_on_request_finished (KvTieringMetrics *m,
                                        const char       *request_id)
{
  RequestState *state;

  g_return_if_fail (m != NULL);
  g_return_if_fail (request_id != NULL);

  state = g_hash_table_lookup (m->requests, request_id);
  if (state == NULL)
    return;

  if (m->last_state == state)
    {
      m->last_state = NULL;
      g_clear_object (&m->last_request);
    }
  request_state_retire (m, state);
  if (m->spare_states->len < MAX_SPARE_STATES)
    {
      g_hash_table_steal (m->requests, request_id);
      g_ptr_array_add (m->spare_states, state);
    }
  else
    {
      g_hash_table_remove (m->requests, request_id);
    }
}

void
kv_tiering_metrics_on_job_registered (KvTieringMetrics *m,
                                      guint             label_index,
                                      KvJobKind         kind,
                                      guint             n_chunks)
{
  LabelState *ls;

  g_return_if_fail (m != NULL);
  g_return_if_fail (label_index < m->n_labels);
  g_return_if_fail (kind <= KV_JOB_KIND_SERVED);

  ls = &m->label_state[label_index];
  ls->active_jobs[kind] += 1;
  if (kind == KV_JOB_KIND_PROMOTION)
    ls->write_chunks += n_chunks;
  else
    ls->read_chunks += n_chunks;
}

void
kv_tiering_metrics_on_job_finished (KvTieringMetrics *m,
                                    guint             label_index,
                                    KvJobKind         kind,
                                    guint             n_chunks,
                                    KvJobResult      *result)
{
  const char * const *labels;
  LabelState *ls;
  gboolean success;
  gdouble transfer_time;
  guint n_moved = 0;
  guint64 *chunks;

  g_return_if_fail (m != NULL);
  g_return_if_fail (label_index < m->n_labels);
  g_return_if_fail (kind <= KV_JOB_KIND_SERVED);
  g_return_if_fail (result != NULL);

  ls = &m->label_state[label_index];
  labels = m->label_values[label_index];
  success = kv_job_result_get_success (result);
  transfer_time = kv_job_result_get_transfer_time (result);

  chunks = kind == KV_JOB_KIND_PROMOTION ? &ls->write_chunks : &ls->read_chunks;
  g_return_if_fail (ls->active_jobs[kind] > 0 && *chunks >= n_chunks);
  ls->active_jobs[kind] -= 1;
  *chunks -= n_chunks;

  if (!success)
    kv_stats_increase_counter (m->pending, job_families[kind].failures, 1, labels);

  /* Bytes count what landed: every chunk of a successful job, or the
   * successful keys of a partially failed promotion. The tier's transfer
   * time goes with those bytes only, so bytes / time stays a throughput. */
  if (success)
    n_moved = n_chunks;
  else if (kind == KV_JOB_KIND_PROMOTION && kv_job_result_has_successful_keys (result))
    kv_job_result_get_successful_keys (result, &n_moved);
  else
    return;

  ls->moved_bytes[kind] += (gdouble) n_moved * m->chunk_size;
  ls->has_moved_bytes[kind] = TRUE;
  if (transfer_time >= 0.0)
    {
      ls->moved_time[kind] += transfer_time;
      ls->has_moved_time[kind] = TRUE;
    }
}

void
kv_tiering_metrics_on_promotion_allocation_failure (KvTieringMetrics *m)
{
  g_return_if_fail (m != NULL);

  kv_stats_increase_counter (m->pending, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, 1, NULL);
}

void
kv_tiering_metrics_on_promotion_reserved (KvTieringMetrics *m,
                                          guint             label_index,
                                          guint             n_chunks)
{
  g_return_if_fail (m != NULL);
  g_return_if_fail (label_index < m->n_labels);

  m->label_state[label_index].write_chunks += n_chunks;
}

void
kv_tiering_metrics_on_hit_pending_released (KvTieringMetrics *m)
{
  g_return_if_fail (m != NULL);

  kv_stats_increase_counter (m->pending, KV_METRIC_HIT_PENDING_RELEASES, 1, NULL);
}

KvStats *
kv_tiering_metrics_take_stats (KvTieringMetrics *m)
{
  KvStats *stats;

  g_return_val_if_fail (m != NULL, NULL);

  stats = kv_stats_take (m->pending);
  if (!m->every_series_sent)
    {
      kv_tiering_metrics_add_every_series (m, stats);
      m->every_series_sent = TRUE;
    }

  for (guint i = 0; i < m->n_labels; i++)
    {
      LabelState *ls = &m->label_state[i];
      const char * const *labels = m->label_values[i];

      ls->queries += ls->stamped_hits;
      ls->hits += ls->stamped_hits;
      ls->sync_counts[0] += ls->stamped_hits;
      ls->sync_n += ls->stamped_hits;
      ls->stamped_hits = 0;

      if (ls->queries > 0)
        kv_stats_increase_counter (stats, KV_METRIC_CHUNK_QUERIES, ls->queries, labels);
      if (ls->hits > 0)
        kv_stats_increase_counter (stats, KV_METRIC_CHUNK_HITS, ls->hits, labels);
      if (ls->sync_n > 0)
        kv_stats_add_histogram_buckets (stats, KV_METRIC_LOOKUP_SYNC_DELAY, labels,
                                        sync_buckets, N_SYNC_BUCKETS, ls->sync_counts, ls->sync_sum);
      if (ls->async_n > 0)
        kv_stats_add_histogram_buckets (stats, KV_METRIC_LOOKUP_ASYNC_DELAY, labels,
                                        async_buckets, N_ASYNC_BUCKETS, ls->async_counts, ls->async_sum);

      ls->queries = ls->hits = 0;
      memset (ls->sync_counts, 0, sizeof ls->sync_counts);
      ls->sync_n = 0;
      ls->sync_sum = 0.0;
      memset (ls->async_counts, 0, sizeof ls->async_counts);
      ls->async_n = 0;
      ls->async_sum = 0.0;

      /* the sums start from 0 as the counters of a fresh stats object do,
       * so the values are those of adding each job to the counter */
      for (guint p = 0; p < G_N_ELEMENTS (job_families); p++)
        {
          if (ls->has_moved_bytes[p])
            kv_stats_increase_counter (stats, job_families[p].bytes, ls->moved_bytes[p], labels);
          if (ls->has_moved_time[p])
            kv_stats_increase_counter (stats, job_families[p].time, ls->moved_time[p], labels);
          ls->moved_bytes[p] = ls->moved_time[p] = 0.0;
          ls->has_moved_bytes[p] = ls->has_moved_time[p] = FALSE;
        }

      /* Jobs only run on secondary tiers; their gauges are always sent. */
      if (i == 0)
        continue;

      kv_stats_set_gauge (stats, KV_METRIC_PRIMARY_WRITE_USAGE_PERC,
                          m->n_primary_chunks > 0 ? (gdouble) ls->write_chunks / m->n_primary_chunks : 0.0,
                          labels);
      kv_stats_set_gauge (stats, KV_METRIC_PRIMARY_READ_USAGE_PERC,
                          m->n_primary_chunks > 0 ? (gdouble) ls->read_chunks / m->n_primary_chunks : 0.0,
                          labels);
      for (guint k = 0; k < G_N_ELEMENTS (job_families); k++)
        kv_stats_set_gauge (stats, job_families[k].active, ls->active_jobs[k], labels);
    }

  return stats;
}

void
kv_tiering_metrics_add_every_series (KvTieringMetrics *m,
                                     KvStats          *stats)
{
  static const char * const counters[] = {
    KV_METRIC_READ_BYTES, KV_METRIC_READ_TIME, KV_METRIC_WRITE_BYTES, KV_METRIC_WRITE_TIME,
    KV_METRIC_PROMOTION_JOB_FAILURES, KV_METRIC_CASCADE_JOB_FAILURES,
    KV_METRIC_SERVED_BYTES, KV_METRIC_SERVED_TIME, KV_METRIC_SERVED_JOB_FAILURES,
    KV_METRIC_CHUNK_QUERIES, KV_METRIC_CHUNK_HITS,
  };
  static const guint64 no_sync[N_SYNC_BUCKETS + 1] = { 0 };
  static const guint64 no_async[N_ASYNC_BUCKETS + 1] = { 0 };

  g_return_if_fail (m != NULL);
  g_return_if_fail (KV_IS_STATS (stats));

  kv_stats_increase_counter (stats, KV_METRIC_PROMOTION_ALLOCATION_FAILURES, 0, NULL);
  kv_stats_increase_counter (stats, KV_METRIC_HIT_PENDING_RELEASES, 0, NULL);
  for (guint i = 0; i < m->n_labels; i++)
    {
      const char * const *labels = m->label_values[i];

      /* jobs only run on secondary tiers: the primary label has lookups */
      for (guint c = i == 0 ? G_N_ELEMENTS (counters) - 2 : 0; c < G_N_ELEMENTS (counters); c++)
        kv_stats_increase_counter (stats, counters[c], 0, labels);
      kv_stats_add_histogram_buckets (stats, KV_METRIC_LOOKUP_SYNC_DELAY, labels,
                                      sync_buckets, N_SYNC_BUCKETS, no_sync, 0.0);
      kv_stats_add_histogram_buckets (stats, KV_METRIC_LOOKUP_ASYNC_DELAY, labels,
                                      async_buckets, N_ASYNC_BUCKETS, no_async, 0.0);
    }
}

gboolean
kv_tiering_metrics_is_idle (KvTieringMetrics *m)
{
  g_return_val_if_fail (m != NULL, TRUE);

  for (guint i = 0; i < m->n_labels; i++)
    {
      const LabelState *ls = &m->label_state[i];

      if (ls->active_jobs[KV_JOB_KIND_CASCADE] != 0 ||
          ls->active_jobs[KV_JOB_KIND_PROMOTION] != 0 ||
          ls->active_jobs[KV_JOB_KIND_SERVED] != 0 ||
          ls->write_chunks != 0 || ls->read_chunks != 0)
        return FALSE;
    }
  return TRUE;
}

gboolean
kv_tiering_metrics_register (KvMetricRegistry  *registry,
                             GError           **error)
{
  static const char * const tier[] = { "tier", NULL };

  g_return_val_if_fail (KV_IS_METRIC_REGISTRY (registry), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  /* vLLM's TieringOffloadingMetrics: names exactly as vLLM defines them */
  return
    kv_metric_registry_add_histogram (registry, KV_METRIC_LOOKUP_SYNC_DELAY,
                                      "Time a tier took to answer one chunk lookup, in seconds",
                                      tier, sync_buckets, N_SYNC_BUCKETS, error) &&
    kv_metric_registry_add_histogram (registry, KV_METRIC_LOOKUP_ASYNC_DELAY,
                                      "Time from a chunk's first deferred (retry) lookup to its "
                                      "answer, in seconds",
                                      tier, async_buckets, N_ASYNC_BUCKETS, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_READ_BYTES,
                                    "Bytes promoted from a secondary tier into the primary tier",
                                    tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_READ_TIME,
                                    "Seconds a secondary tier spent promoting chunks into the "
                                    "primary tier", tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_WRITE_BYTES,
                                    "Bytes cascaded from the primary tier into a secondary tier "
                                    "(not those served to other nodes)",
                                    tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_WRITE_TIME,
                                    "Seconds a secondary tier spent storing cascaded chunks",
                                    tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_PROMOTION_JOB_FAILURES,
                                    "Promotion jobs that failed in full or in part",
                                    tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_CASCADE_JOB_FAILURES,
                                    "Cascade (store) jobs that failed", tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_CHUNK_QUERIES,
                                    "Chunks looked up in a tier (once per request and chunk)",
                                    tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_CHUNK_HITS,
                                    "Chunk lookups a tier answered with a hit", tier, error) &&
    kv_metric_registry_add_gauge (registry, KV_METRIC_PRIMARY_WRITE_USAGE_PERC,
                                  "Fraction of the primary tier's slots being written by a "
                                  "tier's promotions", tier, error) &&
    kv_metric_registry_add_gauge (registry, KV_METRIC_PRIMARY_READ_USAGE_PERC,
                                  "Fraction of the primary tier's slots being read by a tier's "
                                  "cascades and served stores (a slot read by two tiers counts "
                                  "twice)", tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_PROMOTION_ALLOCATION_FAILURES,
                                    "Promotions not started because the primary tier had no "
                                    "free slot", NULL, error) &&
    kv_metric_registry_add_gauge (registry, KV_METRIC_ACTIVE_PROMOTION_JOBS,
                                  "Promotion jobs in flight", tier, error) &&
    kv_metric_registry_add_gauge (registry, KV_METRIC_ACTIVE_CASCADE_JOBS,
                                  "Cascade jobs in flight", tier, error) &&
    /* kvtier's own */
    kv_metric_registry_add_counter (registry, KV_METRIC_HIT_PENDING_RELEASES,
                                    "Chunks a request stopped waiting for at the manager's "
                                    "hit-pending-deadline (it recomputed them)", NULL, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_SERVED_BYTES,
                                    "Bytes a tier served from the primary tier to another "
                                    "node's request (not written into the tier)", tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_SERVED_TIME,
                                    "Seconds a tier spent serving chunks to other nodes' "
                                    "requests", tier, error) &&
    kv_metric_registry_add_counter (registry, KV_METRIC_SERVED_JOB_FAILURES,
                                    "Store jobs serving another node's request that failed",
                                    tier, error) &&
    kv_metric_registry_add_gauge (registry, KV_METRIC_ACTIVE_SERVED_JOBS,
                                  "Store jobs serving other nodes' requests in flight",
                                  tier, error);
}

/* ---- the manager's hook -------------------------------------------------- */

static void
hook_primary_lookup (gpointer        data,
                     KvRequest      *request,
                     KvKey          *key,
                     KvLookupResult  result,
                     guint64        *stamp)
{
  on_primary_lookup (data, request, key, result, stamp, TRUE);
}

static void
hook_tier_lookup (gpointer        data,
                  KvRequest      *request,
                  KvKey          *key,
                  guint           label,
                  KvLookupResult  result,
                  gint64          duration_us)
{
  KvTieringMetrics *m = data;

  /* the first hit of the chunk on this tier for the request whose primary
   * miss is held: held with it (the lookup answers with this tier's hit) */
  if (result == KV_LOOKUP_RESULT_HIT && key == m->held_key && label <= STAMP_MAX_LABEL &&
      !observed_before (m, m->held_state, label, key))
    {
      count_answer (&m->label_state[label], TRUE, duration_us / 1e6);
      m->held_label = label;
      return;
    }
  kv_tiering_metrics_on_lookup (m, request, key, label, result, duration_us);
}

static void
hook_stamp_moved (gpointer  data,
                  KvKey    *key,
                  guint64   stamp,
                  guint64  *word)
{
  move_stamp (data, key, stamp, word);
}

static void
hook_lookup_settled (gpointer  data,
                     guint64  *promoted_stamp)
{
  settle_held (data, promoted_stamp);
}

static void
hook_job_registered (gpointer  data,
                     guint     label,
                     KvJobKind kind,
                     guint     n_keys)
{
  kv_tiering_metrics_on_job_registered (data, label, kind, n_keys);
}

static void
hook_job_finished (gpointer     data,
                   guint        label,
                   KvJobKind    kind,
                   guint        n_keys,
                   KvJobResult *result)
{
  kv_tiering_metrics_on_job_finished (data, label, kind, n_keys, result);
}

static void
hook_promotion_allocation_failed (gpointer data)
{
  kv_tiering_metrics_on_promotion_allocation_failure (data);
}

static void
hook_request_allocated (gpointer    data,
                        const char *request_id)
{
  kv_tiering_metrics_on_request_allocated (data, request_id);
}

static void
hook_request_finished (gpointer    data,
                       const char *request_id)
{
  kv_tiering_metrics_on_request_finished (data, request_id);
}

static void
hook_promotion_reserved (gpointer data,
                         guint    label,
                         guint    n_chunks)
{
  kv_tiering_metrics_on_promotion_reserved (data, label, n_chunks);
}

static void
hook_hit_pending_released (gpointer    data,
                           const char *request_id)
{
  kv_tiering_metrics_on_hit_pending_released (data);
}

const KvTieringManagerHooks kv_tiering_metrics_hooks = {
  .primary_lookup = hook_primary_lookup,
  .tier_lookup = hook_tier_lookup,
  .lookup_settled = hook_lookup_settled,
  .stamp_moved = hook_stamp_moved,
  .job_registered = hook_job_registered,
  .job_finished = hook_job_finished,
  .promotion_allocation_failed = hook_promotion_allocation_failed,
  /* a request id seen again starts over, lookup accounting included */
  .request_restarted = hook_request_finished,
  .request_allocated = hook_request_allocated,
  .request_finished = hook_request_finished,
  .promotion_reserved = hook_promotion_reserved,
  .hit_pending_released = hook_hit_pending_released,
};
