/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-events.h"

#include <string.h>

#include "kv-chunk-format.h"
#include "kv-peer-stream.h"

/*
 * A node's event stream (doc/protocol.md, "Event stream"): what the node
 * holds and where, for subscribers that follow it (a fleet index, a
 * router).
 *
 * The owner thread only queues: kv_peer_events_publish() takes a
 * reference on each KvEvent the node's tiers already made (one per batch,
 * not per key) and wakes the server's I/O thread. There, every key of the
 * event updates a table of which of the node's sources (device, primary,
 * each secondary tier) hold it; a key whose set of places (device,
 * primary, disk, remote) changed becomes an entry of the next EVENTS
 * frame, which gets the next sequence number and is kept in a bounded
 * backlog shared by every subscriber.
 *
 * A new subscriber gets a snapshot of the table at the current sequence
 * number (its keys referenced, so the table may change meanwhile), then
 * the EVENTS frames after it from the backlog. One that falls so far
 * behind that the backlog dropped the next frame it needs gets a new
 * snapshot (a resync), so what a subscriber sees is always exact; one
 * whose write does not finish within io-timeout-ms is dropped (a slow
 * reader). A caught-up subscriber gets a HEARTBEAT every heartbeat-ms, so
 * it can tell a quiet node from a dead one.
 */

typedef struct
{
  guint    source;
  KvEvent *event;
} Pending;

typedef struct
{
  guint64  seq;
  GBytes  *bytes;
} BacklogFrame;

struct _KvPeerEventsSubscriber
{
  gint                  ref_count;     /* I/O thread only */
  KvPeerEvents         *events;
  GIOStream            *stream;
  GCancellable         *cancellable;
  KvPeerEventsGoneFunc  gone_func;
  gpointer              gone_data;
  GDestroyNotify        gone_data_free;
  gboolean              gone;
  gboolean              writing;
  gboolean              live;

  /* a snapshot being sent */
  KvKey               **snap_keys;
  guint8               *snap_locations;
  guint                 snap_n;
  guint                 snap_pos;
  guint64               snap_seq;
  gboolean              snap_begun;

  guint64               next_seq;      /* live: the next EVENTS frame to send */
  guint                 n_sending;     /* EVENTS frames in the write */
  GByteArray           *buf;
  GPtrArray            *sending;       /* GBytes of the write */
  GOutputVector        *vectors;
  GSource              *timer;
  gint64                last_write_us;
};

struct _KvPeerEvents
{
  GObject parent_instance;

  KvPeerEventsSettings  settings;
  KvPeerCounters       *counters;

  GMutex                lock;
  GPtrArray            *pending;        /* Pending, under lock */
  GSource              *apply_source;   /* under lock */
  GMainContext         *context;        /* under lock */
  gboolean              closed;         /* under lock */
  gint                  n_pending;      /* atomic */

  /* I/O thread */
  GSource              *heartbeat;
  GHashTable           *table;          /* KvKey → source mask */
  guint8                source_class[KV_PEER_EVENTS_MAX_SOURCES];
  GPtrArray            *backlog;        /* BacklogFrame, oldest first from backlog_start */
  guint                 backlog_start;
  guint64               backlog_size;
  GPtrArray            *subscribers;
  gboolean              warned_source;

  guint64               seq;            /* atomic */
  gint                  n_subscribers;  /* atomic */
  guint64               n_keys;         /* atomic */
  guint64               n_snapshots;    /* atomic */
  guint64               n_resyncs;      /* atomic */
};

G_DEFINE_FINAL_TYPE (KvPeerEvents, kv_peer_events, G_TYPE_OBJECT)

#define MAX_FRAMES_PER_WRITE 64

static void write_next (KvPeerEventsSubscriber *sub);

/* ---- the table -------------------------------------------------------------- */

static guint8
classes_of (KvPeerEvents *self,
            guint32       mask)
{
  guint8 classes = 0;

  for (guint s = 0; mask != 0; s++, mask >>= 1)
    if (mask & 1)
      classes |= self->source_class[s];
  return classes;
}

static guint8
class_of_source (guint    source,
                 KvEvent *event)
{
  if (source == KV_PEER_EVENTS_SOURCE_DEVICE)
    return KV_FLEET_LOCATION_DEVICE;
  if (source == KV_PEER_EVENTS_SOURCE_PRIMARY)
    return KV_FLEET_LOCATION_PRIMARY;
  return kv_event_get_locality (event) == KV_LOCALITY_REMOTE ? KV_FLEET_LOCATION_REMOTE
                                                             : KV_FLEET_LOCATION_DISK;
}

typedef struct
{
  GByteArray *frame;
  guint       start;
  guint32     n;
} Delta;

static void
backlog_trim (KvPeerEvents *self)
{
  /* the newest frame stays, whatever its size */
  while (self->backlog->len - self->backlog_start > 1 &&
         self->backlog_size > self->settings.backlog_bytes)
    {
      BacklogFrame *oldest = self->backlog->pdata[self->backlog_start];

      self->backlog_size -= g_bytes_get_size (oldest->bytes);
      g_bytes_unref (oldest->bytes);
      g_free (oldest);
      self->backlog->pdata[self->backlog_start++] = NULL;
    }
  if (self->backlog_start > 64 && self->backlog_start * 2 > self->backlog->len)
    {
      g_ptr_array_remove_range (self->backlog, 0, self->backlog_start);
      self->backlog_start = 0;
    }
}

static void
delta_finish (KvPeerEvents *self,
              Delta        *delta)
{
  BacklogFrame *frame;

  if (delta->frame == NULL)
    return;
  kv_peer_stream_end_entries (delta->frame, delta->start, delta->n);
  frame = g_new (BacklogFrame, 1);
  frame->seq = self->seq + 1;
  frame->bytes = g_byte_array_free_to_bytes (g_steal_pointer (&delta->frame));
  self->backlog_size += g_bytes_get_size (frame->bytes);
  g_ptr_array_add (self->backlog, frame);
  __atomic_store_n (&self->seq, frame->seq, __ATOMIC_RELEASE);
  delta->n = 0;
  backlog_trim (self);
}

static void
delta_add (KvPeerEvents *self,
           Delta        *delta,
           KvKey        *key,
           guint8        classes)
{
  if (delta->frame == NULL)
    {
      delta->frame = g_byte_array_new ();
      delta->start = kv_peer_stream_begin_entries (delta->frame, KV_PEER_FRAME_EVENTS, self->seq + 1);
    }
  kv_peer_stream_add_entry (delta->frame, key, classes);
  if (++delta->n == self->settings.max_entries)
    delta_finish (self, delta);
}

static void
apply_event (KvPeerEvents *self,
             guint         source,
             KvEvent      *event,
             Delta        *delta)
{
  guint n_keys = 0;
  KvKey * const *keys = kv_event_get_keys (event, &n_keys);
  gboolean removed = kv_event_get_removed (event);
  guint32 bit;

  if (source >= KV_PEER_EVENTS_MAX_SOURCES)
    {
      if (!self->warned_source)
        g_warning ("peer events: event source %u is beyond the %u a stream tells apart; "
                   "its events are not streamed", source, KV_PEER_EVENTS_MAX_SOURCES);
      self->warned_source = TRUE;
      return;
    }
  bit = 1u << source;
  self->source_class[source] = class_of_source (source, event);

  for (guint i = 0; i < n_keys; i++)
    {
      KvKey *key = keys[i];
      gpointer value = NULL;
      gboolean present;
      guint32 old_mask, new_mask;
      guint8 old_classes, new_classes;

      /* a key the protocol cannot carry is not streamed */
      if (!kv_chunk_key_fits (key))
        continue;
      present = g_hash_table_lookup_extended (self->table, key, NULL, &value);
      old_mask = present ? GPOINTER_TO_UINT (value) : 0;
      new_mask = removed ? old_mask & ~bit : old_mask | bit;
      if (new_mask == old_mask)
        continue;
      if (new_mask == 0)
        {
          g_hash_table_remove (self->table, key);
          __atomic_sub_fetch (&self->n_keys, 1, __ATOMIC_RELAXED);
        }
      else if (present)
        g_hash_table_insert (self->table, kv_key_ref (key), GUINT_TO_POINTER (new_mask));
      else
        {
          g_hash_table_insert (self->table, kv_key_ref (key), GUINT_TO_POINTER (new_mask));
          __atomic_add_fetch (&self->n_keys, 1, __ATOMIC_RELAXED);
        }
      old_classes = classes_of (self, old_mask);
      new_classes = classes_of (self, new_mask);
      if (old_classes != new_classes)
        delta_add (self, delta, key, new_classes);
    }
}

/* I/O thread: applies what the owner thread queued, then wakes the
 * subscribers. */
static gboolean
apply_pending (gpointer data)
{
  KvPeerEvents *self = data;
  g_autoptr(GPtrArray) taken = NULL;
  Delta delta = { 0 };

  g_mutex_lock (&self->lock);
  taken = g_steal_pointer (&self->pending);
  self->pending = g_ptr_array_new ();
  g_clear_pointer (&self->apply_source, g_source_unref);
  g_mutex_unlock (&self->lock);

  for (guint i = 0; i < taken->len; i++)
    {
      Pending *p = taken->pdata[i];

      apply_event (self, p->source, p->event, &delta);
      kv_event_unref (p->event);
      g_free (p);
    }
  delta_finish (self, &delta);
  /* after the sequence number: whoever sees no pending event sees it */
  g_atomic_int_add (&self->n_pending, -(gint) taken->len);

  for (guint i = 0; i < self->subscribers->len; i++)
    write_next (self->subscribers->pdata[i]);
  return G_SOURCE_REMOVE;
}

/* Lock held. */
static void
schedule_apply (KvPeerEvents *self)
{
  if (self->apply_source != NULL || self->context == NULL || self->pending->len == 0)
    return;
  self->apply_source = g_idle_source_new ();
  g_source_set_priority (self->apply_source, G_PRIORITY_DEFAULT);
  g_source_set_callback (self->apply_source, apply_pending, self, NULL);
  g_source_attach (self->apply_source, self->context);
}

/* Queues @event (referenced) of @source for the stream. The owner thread
 * calls it once per event its tiers made: no per-key work here. */
void
kv_peer_events_publish (KvPeerEvents *self,
                        guint         source,
                        KvEvent      *event)
{
  Pending *p;

  g_return_if_fail (KV_IS_PEER_EVENTS (self));
  g_return_if_fail (event != NULL);

  g_mutex_lock (&self->lock);
  if (self->closed)
    {
      g_mutex_unlock (&self->lock);
      return;
    }
  p = g_new (Pending, 1);
  p->source = source;
  p->event = kv_event_ref (event);
  g_ptr_array_add (self->pending, p);
  g_atomic_int_inc (&self->n_pending);
  schedule_apply (self);
  g_mutex_unlock (&self->lock);
}

/* ---- subscribers --------------------------------------------------------- */

static KvPeerEventsSubscriber *
sub_ref (KvPeerEventsSubscriber *sub)
{
  sub->ref_count++;
  return sub;
}

static void
snapshot_clear (KvPeerEventsSubscriber *sub)
{
  for (guint i = sub->snap_pos; i < sub->snap_n; i++)
    kv_key_unref (sub->snap_keys[i]);
  g_clear_pointer (&sub->snap_keys, g_free);
  g_clear_pointer (&sub->snap_locations, g_free);
  sub->snap_n = sub->snap_pos = 0;
}

static void
stop_timer (KvPeerEventsSubscriber *sub)
{
  if (sub->timer != NULL)
    {
      g_source_destroy (sub->timer);
      g_clear_pointer (&sub->timer, g_source_unref);
    }
}

static void
sub_unref (KvPeerEventsSubscriber *sub)
{
  if (--sub->ref_count > 0)
    return;
  g_assert (sub->timer == NULL);
  snapshot_clear (sub);
  g_clear_object (&sub->stream);
  g_clear_object (&sub->cancellable);
  g_byte_array_unref (sub->buf);
  g_ptr_array_unref (sub->sending);
  g_free (sub->vectors);
  g_object_unref (sub->events);
  g_free (sub);
}

/* Asks the server to drop @sub, once. */
static void
sub_go (KvPeerEventsSubscriber *sub,
        KvPeerCounter           why)
{
  if (sub->gone)
    return;
  sub_ref (sub);
  sub->gone_func (sub->gone_data, why);
  /* a server that did not unsubscribe it still gets no more frames */
  sub->gone = TRUE;
  sub_unref (sub);
}

static gboolean
write_timed_out (gpointer data)
{
  KvPeerEventsSubscriber *sub = data;

  g_clear_pointer (&sub->timer, g_source_unref);
  g_debug ("peer events: a subscriber did not read a frame within %u ms",
           sub->events->settings.io_timeout_ms);
  sub_go (sub, KV_PEER_COUNTER_SLOW_READERS);
  return G_SOURCE_REMOVE;
}

static void
start_snapshot (KvPeerEventsSubscriber *sub)
{
  KvPeerEvents *self = sub->events;
  GHashTableIter iter;
  gpointer key, value;
  guint i = 0;

  snapshot_clear (sub);
  sub->snap_n = g_hash_table_size (self->table);
  sub->snap_keys = g_new (KvKey *, MAX (sub->snap_n, 1));
  sub->snap_locations = g_new (guint8, MAX (sub->snap_n, 1));
  g_hash_table_iter_init (&iter, self->table);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      sub->snap_keys[i] = kv_key_ref (key);
      sub->snap_locations[i] = classes_of (self, GPOINTER_TO_UINT (value));
      i++;
    }
  sub->snap_pos = 0;
  sub->snap_seq = self->seq;
  sub->snap_begun = FALSE;
  sub->live = FALSE;
  __atomic_add_fetch (&self->n_snapshots, 1, __ATOMIC_RELAXED);
}

static void
written (GObject      *stream,
         GAsyncResult *result,
         gpointer      data)
{
  KvPeerEventsSubscriber *sub = data;
  g_autoptr(GError) error = NULL;
  gboolean ok = g_output_stream_writev_all_finish (G_OUTPUT_STREAM (stream), result, NULL, &error);

  stop_timer (sub);
  sub->writing = FALSE;
  g_ptr_array_set_size (sub->sending, 0);
  if (!sub->gone)
    {
      if (!ok)
        {
          g_debug ("peer events: writing to a subscriber failed: %s", error->message);
          sub_go (sub, KV_PEER_COUNTER_CONNECTION_ERRORS);
        }
      else
        {
          sub->last_write_us = g_get_monotonic_time ();
          sub->next_seq += sub->n_sending;
          sub->n_sending = 0;
          write_next (sub);
        }
    }
  sub_unref (sub);
}

/* Writes the @n vectors of sub->vectors within the I/O timeout. */
static void
write_vectors (KvPeerEventsSubscriber *sub,
               guint                   n)
{
  KvPeerEvents *self = sub->events;

  sub->writing = TRUE;
  if (self->settings.io_timeout_ms > 0)
    {
      sub->timer = g_timeout_source_new (self->settings.io_timeout_ms);
      g_source_set_callback (sub->timer, write_timed_out, sub, NULL);
      g_source_attach (sub->timer, g_main_context_get_thread_default ());
    }
  g_output_stream_writev_all_async (g_io_stream_get_output_stream (sub->stream), sub->vectors, n,
                                    G_PRIORITY_DEFAULT, sub->cancellable, written, sub_ref (sub));
}

static void
write_buf (KvPeerEventsSubscriber *sub)
{
  sub->vectors[0].buffer = sub->buf->data;
  sub->vectors[0].size = sub->buf->len;
  write_vectors (sub, 1);
}

/* The next piece of a snapshot: its start, a frame of entries, or its end
 * (after which the subscriber is live). */
static void
write_snapshot_piece (KvPeerEventsSubscriber *sub)
{
  KvPeerEvents *self = sub->events;

  g_byte_array_set_size (sub->buf, 0);
  if (!sub->snap_begun)
    {
      kv_peer_stream_append_begin (sub->buf, sub->snap_seq, sub->snap_n);
      sub->snap_begun = TRUE;
    }
  if (sub->snap_pos < sub->snap_n)
    {
      guint n = MIN (sub->snap_n - sub->snap_pos, self->settings.max_entries);
      guint start = kv_peer_stream_begin_entries (sub->buf, KV_PEER_FRAME_SNAPSHOT_ENTRIES,
                                                  sub->snap_seq);

      for (guint i = 0; i < n; i++, sub->snap_pos++)
        {
          kv_peer_stream_add_entry (sub->buf, sub->snap_keys[sub->snap_pos],
                                    sub->snap_locations[sub->snap_pos]);
          kv_key_unref (sub->snap_keys[sub->snap_pos]);
        }
      kv_peer_stream_end_entries (sub->buf, start, n);
    }
  else
    {
      kv_peer_stream_append_seq (sub->buf, KV_PEER_FRAME_SNAPSHOT_END, sub->snap_seq);
      sub->live = TRUE;
      sub->next_seq = sub->snap_seq + 1;
      snapshot_clear (sub);
    }
  write_buf (sub);
}

/* Sends what @sub needs next, if it is not writing already. */
static void
write_next (KvPeerEventsSubscriber *sub)
{
  KvPeerEvents *self = sub->events;
  guint64 oldest;
  guint n = 0;

  if (sub->gone || sub->writing)
    return;
  if (!sub->live)
    {
      write_snapshot_piece (sub);
      return;
    }
  if (sub->next_seq > self->seq)
    return;  /* caught up */

  oldest = ((BacklogFrame *) self->backlog->pdata[self->backlog_start])->seq;
  if (sub->next_seq < oldest)
    {
      /* fell behind the backlog: only a new snapshot makes it exact */
      g_debug ("peer events: a subscriber fell behind (needs %" G_GUINT64_FORMAT ", the "
               "backlog starts at %" G_GUINT64_FORMAT "): resync", sub->next_seq, oldest);
      __atomic_add_fetch (&self->n_resyncs, 1, __ATOMIC_RELAXED);
      start_snapshot (sub);
      write_snapshot_piece (sub);
      return;
    }
  for (guint64 seq = sub->next_seq; seq <= self->seq && n < MAX_FRAMES_PER_WRITE; seq++, n++)
    {
      BacklogFrame *frame = self->backlog->pdata[self->backlog_start + (seq - oldest)];

      g_assert (frame->seq == seq);
      g_ptr_array_add (sub->sending, g_bytes_ref (frame->bytes));
      sub->vectors[n].buffer = g_bytes_get_data (frame->bytes, &sub->vectors[n].size);
    }
  sub->n_sending = n;
  write_vectors (sub, n);
}

static gboolean
heartbeat_tick (gpointer data)
{
  KvPeerEvents *self = data;
  gint64 now = g_get_monotonic_time ();

  for (guint i = 0; i < self->subscribers->len; i++)
    {
      KvPeerEventsSubscriber *sub = self->subscribers->pdata[i];

      if (sub->gone || sub->writing || !sub->live || sub->next_seq <= self->seq ||
          now - sub->last_write_us < (gint64) self->settings.heartbeat_ms * 1000 * 9 / 10)
        continue;
      g_byte_array_set_size (sub->buf, 0);
      kv_peer_stream_append_seq (sub->buf, KV_PEER_FRAME_HEARTBEAT, sub->next_seq - 1);
      write_buf (sub);
    }
  return G_SOURCE_CONTINUE;
}

/* I/O thread. Takes @gone_data: freed with @gone_data_free when the
 * subscriber is unsubscribed, or at once when it is refused. */
KvPeerEventsSubscriber *
kv_peer_events_subscribe (KvPeerEvents          *self,
                          GIOStream             *stream,
                          GCancellable          *cancellable,
                          KvPeerEventsGoneFunc   gone_func,
                          gpointer               gone_data,
                          GDestroyNotify         gone_data_free,
                          GError               **error)
{
  KvPeerEventsSubscriber *sub;

  g_return_val_if_fail (KV_IS_PEER_EVENTS (self), NULL);

  if (self->subscribers->len >= self->settings.max_subscribers)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_BUSY,
                   "this node streams its events to %u subscribers already",
                   self->settings.max_subscribers);
      /* @gone_data is ours either way */
      if (gone_data_free != NULL)
        gone_data_free (gone_data);
      return NULL;
    }
  sub = g_new0 (KvPeerEventsSubscriber, 1);
  sub->ref_count = 1;   /* the list's */
  sub->events = g_object_ref (self);
  sub->stream = g_object_ref (stream);
  sub->cancellable = cancellable != NULL ? g_object_ref (cancellable) : g_cancellable_new ();
  sub->gone_func = gone_func;
  sub->gone_data = gone_data;
  sub->gone_data_free = gone_data_free;
  sub->buf = g_byte_array_new ();
  sub->sending = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  sub->vectors = g_new0 (GOutputVector, MAX_FRAMES_PER_WRITE);
  g_ptr_array_add (self->subscribers, sub);
  g_atomic_int_inc (&self->n_subscribers);
  start_snapshot (sub);
  write_next (sub);
  return sub;
}

/* I/O thread: the server closed the subscriber's connection. */
void
kv_peer_events_unsubscribe (KvPeerEvents           *self,
                            KvPeerEventsSubscriber *sub)
{
  g_return_if_fail (KV_IS_PEER_EVENTS (self));

  if (!g_ptr_array_remove (self->subscribers, sub))
    return;
  g_atomic_int_add (&self->n_subscribers, -1);
  sub->gone = TRUE;
  /* a write in flight ends cancelled and drops its own reference */
  stop_timer (sub);
  if (sub->gone_data_free != NULL)
    sub->gone_data_free (sub->gone_data);
  sub->gone_data = NULL;
  sub_unref (sub);
}

/* ---- the stream ---------------------------------------------------------------- */

guint64
kv_peer_events_get_seq (KvPeerEvents *self)
{
  return __atomic_load_n (&self->seq, __ATOMIC_ACQUIRE);
}

guint
kv_peer_events_get_n_pending (KvPeerEvents *self)
{
  return g_atomic_int_get (&self->n_pending);
}

guint
kv_peer_events_get_n_subscribers (KvPeerEvents *self)
{
  return g_atomic_int_get (&self->n_subscribers);
}

guint64
kv_peer_events_get_n_keys (KvPeerEvents *self)
{
  return __atomic_load_n (&self->n_keys, __ATOMIC_RELAXED);
}

guint64
kv_peer_events_get_n_snapshots (KvPeerEvents *self)
{
  return __atomic_load_n (&self->n_snapshots, __ATOMIC_RELAXED);
}

guint64
kv_peer_events_get_n_resyncs (KvPeerEvents *self)
{
  return __atomic_load_n (&self->n_resyncs, __ATOMIC_RELAXED);
}

/* The server's I/O context, once, before it runs; NULL when the server
 * stopped: nothing more is applied and later events are dropped. */
void
kv_peer_events_set_context (KvPeerEvents *self,
                            GMainContext *context)
{
  g_return_if_fail (KV_IS_PEER_EVENTS (self));

  g_mutex_lock (&self->lock);
  if (context == NULL)
    {
      self->closed = TRUE;
      if (self->apply_source != NULL)
        {
          g_source_destroy (self->apply_source);
          g_clear_pointer (&self->apply_source, g_source_unref);
        }
      if (self->heartbeat != NULL)
        {
          g_source_destroy (self->heartbeat);
          g_clear_pointer (&self->heartbeat, g_source_unref);
        }
      g_clear_pointer (&self->context, g_main_context_unref);
      g_mutex_unlock (&self->lock);
      return;
    }
  g_return_if_fail (self->context == NULL && !self->closed);
  self->context = g_main_context_ref (context);
  if (self->settings.heartbeat_ms > 0)
    {
      self->heartbeat = g_timeout_source_new (self->settings.heartbeat_ms);
      g_source_set_callback (self->heartbeat, heartbeat_tick, self, NULL);
      g_source_attach (self->heartbeat, context);
    }
  schedule_apply (self);
  g_mutex_unlock (&self->lock);
}

static void
pending_free (gpointer data)
{
  Pending *p = data;

  kv_event_unref (p->event);
  g_free (p);
}

static void
backlog_frame_free (gpointer data)
{
  BacklogFrame *frame = data;

  if (frame == NULL)
    return;
  g_bytes_unref (frame->bytes);
  g_free (frame);
}

static void
kv_peer_events_finalize (GObject *object)
{
  KvPeerEvents *self = KV_PEER_EVENTS (object);

  kv_peer_events_set_context (self, NULL);
  g_ptr_array_set_free_func (self->pending, pending_free);
  g_ptr_array_unref (self->pending);
  g_hash_table_unref (self->table);
  g_ptr_array_unref (self->backlog);
  g_ptr_array_unref (self->subscribers);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (kv_peer_events_parent_class)->finalize (object);
}

static void
kv_peer_events_class_init (KvPeerEventsClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = kv_peer_events_finalize;
}

static void
kv_peer_events_init (KvPeerEvents *self)
{
  g_mutex_init (&self->lock);
  self->pending = g_ptr_array_new ();
  self->table = g_hash_table_new_full (kv_key_hash, kv_key_equal, (GDestroyNotify) kv_key_unref, NULL);
  self->backlog = g_ptr_array_new_with_free_func (backlog_frame_free);
  self->subscribers = g_ptr_array_new ();
}

/* A stream with @settings; counts rejections in @counters (which must
 * outlive it). */
KvPeerEvents *
kv_peer_events_new (const KvPeerEventsSettings *settings,
                    KvPeerCounters             *counters)
{
  KvPeerEvents *self = g_object_new (KV_TYPE_PEER_EVENTS, NULL);

  self->settings = *settings;
  self->settings.max_entries = CLAMP (settings->max_entries, 1, KV_PEER_MAX_KEYS_LIMIT);
  self->counters = counters;
  return self;
}
