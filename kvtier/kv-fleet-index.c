/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fleet-index.h"

#include "kv-key-private.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

/* The index's table (an entry array, open-addressed slots, holders),
 * the nodes' updates, snapshots and expiry, and the lookup walk. One unit
 * because the walk inlines the table's probe and prefetches through its
 * layout; a quarter of it is the public API's documentation. Hence a
 * little over ~1,500 lines. */

/**
 * KvFleetIndex:
 *
 * Where every chunk lives across a fleet of kvtier nodes: for each chunk
 * key, the nodes that hold it and where on each node (device, primary
 * tier, a local tier, a remote tier). It is fed by the nodes' event
 * streams (`kvtier serve` streams a snapshot, then sequenced deltas; see
 * the fleet page) or by hand with [method@Kv.FleetIndex.update], and
 * answers, for a request's chunk keys, each node's longest cached prefix
 * ([method@Kv.FleetIndex.lookup]) in time proportional to that prefix.
 *
 * A node that sends nothing (no delta, no heartbeat) for
 * [property@Kv.FleetIndex:node-timeout-ms] is forgotten by the next
 * [method@Kv.FleetIndex.expire]: its entries leave the index, a message
 * naming it is logged, [signal@Kv.FleetIndex::node-forgotten] is emitted
 * and [property@Kv.FleetIndex:n-forgotten] counts it. Updates for a
 * forgotten node are refused until it is added again and sends a new
 * snapshot, so the view never mixes an old state with new deltas.
 *
 * Memory: one 64-byte entry per distinct key (the key's bytes inline when
 * its hash has at most 32 bytes, and up to four holding nodes inline),
 * plus an 8-byte slot per entry at a load of at most 3/4 (so 8 to 21 bytes
 * more per key), plus 4 bytes for every holder beyond the fourth: 80 bytes
 * per key over 1 M keys. A key of a longer hash keeps a reference to its
 * #KvKey instead. The entry array grows by 64 KiB, or by 2 MiB once over
 * 32 MiB; it and a slot array of 2 MiB or more ask for huge pages.
 *
 * Every method is thread-safe: lookups share a reader lock, updates take
 * it for writing. Signals are emitted on the thread that called, with no
 * lock held.
 */

#define KEY_INLINE        32
#define INLINE_HOLDERS    4
#define MIN_SLOTS         64
#ifndef SLOT_AHEAD
#define SLOT_AHEAD        16
#endif
#ifndef ENTRY_AHEAD
#define ENTRY_AHEAD       8
#endif

typedef struct
{
  guint16 node;
  guint8  locations;
  guint8  epoch;
} Holder;

typedef struct
{
  guint32 hash;
  guint32 group;
  guint16 n_holders;
  guint16 holder_cap;   /* 0: the holders are inline */
  guint8  key_len;      /* 0: key.ext holds the key */
  guint8  reserved[3];
  union {
    guint8  bytes[KEY_INLINE];
    KvKey  *ext;
  } key;
  union {
    Holder  inline_[INLINE_HOLDERS];
    Holder *heap;
  } holders;
} Entry;

G_STATIC_ASSERT (sizeof (Entry) == 64);

typedef struct
{
  guint32 tag;     /* the key's hash */
  guint32 index;   /* entry index + 1; 0: empty */
} Slot;

typedef struct
{
  char    *name;
  gint64   last_seen_us;
  guint64  n_keys;
  guint8   epoch;
  gboolean alive;
} Node;

struct _KvFleetIndex
{
  GObject parent_instance;

  GRWLock    lock;
  KvClock   *clock;
  guint      node_timeout_ms;

  Slot      *slots;
  guint32    n_slots;       /* a power of two */
  guint32    n_entries;
  Entry     *entries;       /* n_entries used of entries_cap, mapped */
  guint32    entries_cap;
  guint64    heap_holders;  /* holders allocated outside entries */

  GArray    *nodes;         /* Node, by id */
  guint64    n_forgotten;   /* atomic */
};

enum {
  PROP_0,
  PROP_CLOCK,
  PROP_NODE_TIMEOUT_MS,
  PROP_N_KEYS,
  PROP_N_NODES,
  PROP_N_FORGOTTEN,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

enum {
  SIGNAL_NODE_FORGOTTEN,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

G_DEFINE_FINAL_TYPE (KvFleetIndex, kv_fleet_index, G_TYPE_OBJECT)

/* ---- entries -------------------------------------------------------------- */

static inline Entry *
entry_at (KvFleetIndex *self,
          guint32       index)
{
  return &self->entries[index];
}

static inline guint64
load64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, sizeof v);
  return v;
}

/* Two 32-byte digests, compared with word loads. */
static inline gboolean
equal32 (const guint8 *a,
         const guint8 *b)
{
  return ((load64 (a) ^ load64 (b)) | (load64 (a + 8) ^ load64 (b + 8)) |
          (load64 (a + 16) ^ load64 (b + 16)) | (load64 (a + 24) ^ load64 (b + 24))) == 0;
}

static inline Holder *
entry_holders (Entry *entry)
{
  return entry->holder_cap == 0 ? entry->holders.inline_ : entry->holders.heap;
}

static inline gboolean
entry_matches (const Entry  *entry,
               guint32       group,
               const guint8 *hash,
               gsize         hash_len)
{
  if (entry->group != group)
    return FALSE;
  /* the usual key, a 32-byte digest: four word compares, no call */
  if (entry->key_len == KEY_INLINE && hash_len == KEY_INLINE)
    return equal32 (entry->key.bytes, hash);
  if (entry->key_len != 0)
    return entry->key_len == hash_len && memcmp (entry->key.bytes, hash, hash_len) == 0;
  {
    gsize len = 0;
    const guint8 *bytes = kv_key_get_hash (entry->key.ext, &len);

    return len == hash_len && memcmp (bytes, hash, hash_len) == 0;
  }
}

static void
entry_clear (KvFleetIndex *self,
             Entry        *entry)
{
  if (entry->holder_cap != 0)
    {
      self->heap_holders -= entry->holder_cap;
      g_free (entry->holders.heap);
    }
  if (entry->key_len == 0)
    kv_key_unref (entry->key.ext);
}

/* ---- slots ----------------------------------------------------------------- */

/* The slot of @key, or -1. */
static inline gint64
find_slot (KvFleetIndex *self,
           guint32       hash,
           guint32       group,
           const guint8 *bytes,
           gsize         len)
{
  guint32 mask = self->n_slots - 1;
  guint32 pos = hash & mask;

  for (;;)
    {
      const Slot *slot = &self->slots[pos];

      if (slot->index == 0)
        return -1;
      if (slot->tag == hash && entry_matches (entry_at (self, slot->index - 1), group, bytes, len))
        return pos;
      pos = (pos + 1) & mask;
    }
}

static inline Entry *
find_entry (KvFleetIndex *self,
            KvKey        *key)
{
  gsize len = 0;
  const guint8 *bytes = kv_key_get_hash (key, &len);
  gint64 pos = find_slot (self, kv_key_hash (key), kv_key_get_group (key), bytes, len);

  return pos < 0 ? NULL : entry_at (self, self->slots[pos].index - 1);
}

static void
place_slot (Slot    *slots,
            guint32  mask,
            guint32  tag,
            guint32  index)
{
  guint32 pos = tag & mask;

  while (slots[pos].index != 0)
    pos = (pos + 1) & mask;
  slots[pos].tag = tag;
  slots[pos].index = index;
}

/* A slot array of 2 MiB or more sits on huge pages where the system
 * gives them: a lookup's slots are random reads over the whole array, and
 * with 4 KiB pages nearly every one is a TLB miss as well as a cache miss
 * (a page walk, in a virtual machine a two-level one). */
#define HUGE_PAGE_SIZE (2u << 20)

static Slot *
slots_alloc (guint32 n_slots)
{
  gsize size = (gsize) n_slots * sizeof (Slot);
  Slot *slots;

  if (size < HUGE_PAGE_SIZE)
    return g_new0 (Slot, n_slots);
  slots = g_aligned_alloc (n_slots, sizeof (Slot), HUGE_PAGE_SIZE);
#ifdef MADV_HUGEPAGE
  /* before the pages are touched, so that they are faulted in huge */
  (void) madvise (slots, size, MADV_HUGEPAGE);
#endif
  memset (slots, 0, size);
  return slots;
}

static void
slots_free (Slot    *slots,
            guint32  n_slots)
{
  if ((gsize) n_slots * sizeof (Slot) < HUGE_PAGE_SIZE)
    g_free (slots);
  else
    g_aligned_free (slots);
}

/* The entry array is one mapping, so that an entry is found by its index
 * with no table of pages in between (one dependent load less in the
 * lookup's walk) and grown or shrunk by mremap() without copying. It
 * grows by 64 KiB while smaller than 32 MiB and by a huge page after, so
 * it holds at most 64 KiB, or 1/16, more than its entries need. */
#define ENTRIES_SMALL_STEP ((64u << 10) / sizeof (Entry))
#define ENTRIES_HUGE_STEP  (HUGE_PAGE_SIZE / sizeof (Entry))
#define ENTRIES_HUGE_FROM  ((32u << 20) / sizeof (Entry))

static inline guint32
entries_step (guint32 n_entries)
{
  return n_entries < ENTRIES_HUGE_FROM ? ENTRIES_SMALL_STEP : ENTRIES_HUGE_STEP;
}

/* the capacity that holds @n_entries, at least one step */
static guint32
entries_cap_for (guint32 n_entries)
{
  guint32 step = entries_step (n_entries);

  return MAX (((n_entries + step - 1) / step) * step, ENTRIES_SMALL_STEP);
}

static void
entries_set_cap (KvFleetIndex *self,
                 guint32       cap)
{
  gsize size = (gsize) cap * sizeof (Entry);
  void *entries;

  if (self->entries == NULL)
    entries = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  else
    entries = mremap (self->entries, (gsize) self->entries_cap * sizeof (Entry), size,
                      MREMAP_MAYMOVE);
  if (entries == MAP_FAILED)
    g_error ("fleet index: cannot map %" G_GSIZE_FORMAT " bytes for %u entries: %s",
             size, cap, g_strerror (errno));
#ifdef MADV_HUGEPAGE
  /* before the new pages are touched, so that they are faulted in huge */
  if (size >= HUGE_PAGE_SIZE)
    (void) madvise (entries, size, MADV_HUGEPAGE);
#endif
  self->entries = entries;
  self->entries_cap = cap;
}

static void
resize_slots (KvFleetIndex *self,
              guint32       n_slots)
{
  Slot *slots = slots_alloc (n_slots);

  for (guint32 i = 0; i < self->n_entries; i++)
    place_slot (slots, n_slots - 1, entry_at (self, i)->hash, i + 1);
  slots_free (self->slots, self->n_slots);
  self->slots = slots;
  self->n_slots = n_slots;
}

/* Empties slot @pos, shifting back the slots of its run that may move
 * (linear probing without tombstones). */
static void
remove_slot (KvFleetIndex *self,
             guint32       pos)
{
  guint32 mask = self->n_slots - 1;
  guint32 hole = pos;
  guint32 j = pos;

  for (;;)
    {
      guint32 home;

      j = (j + 1) & mask;
      if (self->slots[j].index == 0)
        break;
      home = self->slots[j].tag & mask;
      /* slot j may fill the hole when its home is not in (hole, j] */
      if ((hole <= j) ? (home <= hole || home > j) : (home <= hole && home > j))
        {
          self->slots[hole] = self->slots[j];
          hole = j;
        }
    }
  self->slots[hole].index = 0;
  self->slots[hole].tag = 0;
}

/* Creates the entry of @key (not present), without holders. */
static Entry *
insert_entry (KvFleetIndex *self,
              KvKey        *key)
{
  gsize len = 0;
  const guint8 *bytes = kv_key_get_hash (key, &len);
  guint32 index = self->n_entries;
  Entry *entry;

  if ((guint64) (self->n_entries + 1) * 4 > (guint64) self->n_slots * 3)
    resize_slots (self, self->n_slots * 2);
  /* (a mapping: each entry on a cache line, one miss per entry read) */
  if (index >= self->entries_cap)
    entries_set_cap (self, entries_cap_for (index + 1));
  self->n_entries++;
  entry = entry_at (self, index);
  memset (entry, 0, sizeof *entry);
  entry->hash = kv_key_hash (key);
  entry->group = kv_key_get_group (key);
  if (len <= KEY_INLINE)
    {
      entry->key_len = (guint8) len;
      memcpy (entry->key.bytes, bytes, len);
    }
  else
    entry->key.ext = kv_key_ref (key);
  place_slot (self->slots, self->n_slots - 1, entry->hash, index + 1);
  return entry;
}

/* Finds the slot of entry @index (which exists). */
static guint32
slot_of_entry (KvFleetIndex *self,
               guint32       index)
{
  guint32 mask = self->n_slots - 1;
  guint32 pos = entry_at (self, index)->hash & mask;

  while (self->slots[pos].index != index + 1)
    pos = (pos + 1) & mask;
  return pos;
}

/* Removes entry @index: its slot goes, the last entry moves into its
 * place, so entries stay dense. */
static void
delete_entry (KvFleetIndex *self,
              guint32       index)
{
  guint32 last = self->n_entries - 1;

  remove_slot (self, slot_of_entry (self, index));
  entry_clear (self, entry_at (self, index));
  if (index != last)
    {
      guint32 pos = slot_of_entry (self, last);

      *entry_at (self, index) = *entry_at (self, last);
      self->slots[pos].index = index + 1;
    }
  self->n_entries--;
  /* the tail is given back once two steps are free, so a count going up
   * and down across a step boundary does not remap every time */
  if (self->entries_cap >= entries_cap_for (self->n_entries) + 2 * entries_step (self->n_entries))
    entries_set_cap (self, entries_cap_for (self->n_entries) + entries_step (self->n_entries));
}

/* ---- holders ---------------------------------------------------------------- */

static gint
find_holder (Entry   *entry,
             guint16  node)
{
  Holder *holders = entry_holders (entry);

  for (guint i = 0; i < entry->n_holders; i++)
    if (holders[i].node == node)
      return (gint) i;
  return -1;
}

static void
add_holder (KvFleetIndex *self,
            Entry        *entry,
            Holder        holder)
{
  guint cap = entry->holder_cap == 0 ? INLINE_HOLDERS : entry->holder_cap;

  if (entry->n_holders == cap)
    {
      guint new_cap = cap * 2;
      Holder *heap = g_new (Holder, new_cap);

      memcpy (heap, entry_holders (entry), sizeof (Holder) * entry->n_holders);
      if (entry->holder_cap != 0)
        {
          self->heap_holders -= entry->holder_cap;
          g_free (entry->holders.heap);
        }
      entry->holders.heap = heap;
      entry->holder_cap = (guint16) new_cap;
      self->heap_holders += new_cap;
    }
  entry_holders (entry)[entry->n_holders++] = holder;
}

/* Removes holder @i of entry @index; the entry goes with its last holder. */
static void
remove_holder (KvFleetIndex *self,
               guint32       index,
               guint         i)
{
  Entry *entry = entry_at (self, index);
  Holder *holders = entry_holders (entry);

  holders[i] = holders[--entry->n_holders];
  if (entry->n_holders == 0)
    {
      delete_entry (self, index);
      return;
    }
  /* back inline when few enough are left */
  if (entry->holder_cap != 0 && entry->n_holders <= INLINE_HOLDERS)
    {
      Holder *heap = entry->holders.heap;

      self->heap_holders -= entry->holder_cap;
      entry->holder_cap = 0;
      memcpy (entry->holders.inline_, heap, sizeof (Holder) * entry->n_holders);
      g_free (heap);
    }
}

/* ---- nodes ------------------------------------------------------------------- */

static inline Node *
node_at (KvFleetIndex *self,
         guint         node)
{
  return &g_array_index (self->nodes, Node, node);
}

static gint64
now_us (KvFleetIndex *self)
{
  return kv_clock_get_time (self->clock);
}

/* Removes every holder of @node (or, with @only_stale, those not of its
 * current epoch). Entries are visited from the end, since a deleted entry
 * takes the last one's place. Writer lock held. */
static void
sweep_node (KvFleetIndex *self,
            guint16       node,
            gboolean      only_stale)
{
  Node *info = node_at (self, node);

  for (guint32 index = self->n_entries; index-- > 0;)
    {
      Entry *entry = entry_at (self, index);
      gint i = find_holder (entry, node);

      if (i < 0)
        continue;
      if (only_stale && entry_holders (entry)[i].epoch == info->epoch)
        continue;
      remove_holder (self, index, (guint) i);
      info->n_keys--;
    }
}

/* Sets @node's places for @key; NONE removes. Writer lock held. */
static void
set_locations (KvFleetIndex *self,
               guint16       node,
               KvKey        *key,
               guint8        locations)
{
  Node *info = node_at (self, node);
  gsize len = 0;
  const guint8 *bytes = kv_key_get_hash (key, &len);
  gint64 pos = find_slot (self, kv_key_hash (key), kv_key_get_group (key), bytes, len);
  guint32 index;
  Entry *entry;
  gint i;

  locations &= (1u << KV_FLEET_N_LOCATIONS) - 1;
  if (pos < 0)
    {
      if (locations == 0)
        return;
      entry = insert_entry (self, key);
      add_holder (self, entry, (Holder) { node, locations, info->epoch });
      info->n_keys++;
      return;
    }
  index = self->slots[pos].index - 1;
  entry = entry_at (self, index);
  i = find_holder (entry, node);
  if (i < 0)
    {
      if (locations == 0)
        return;
      add_holder (self, entry, (Holder) { node, locations, info->epoch });
      info->n_keys++;
    }
  else if (locations == 0)
    {
      remove_holder (self, index, (guint) i);
      info->n_keys--;
    }
  else
    {
      Holder *holder = &entry_holders (entry)[i];

      holder->locations = locations;
      holder->epoch = info->epoch;
    }
}

/**
 * kv_fleet_index_add_node:
 * @self: an index
 * @name: the node's name, its peer address ("HOST:PORT"), which routing
 *   names as a request's `kv_peer`
 *
 * Adds a node, or finds the one of that name. A node that was forgotten
 * is alive again (with nothing held, until its next snapshot).
 *
 * Returns: the node's id, or %G_MAXUINT when the index holds
 *   %KV_FLEET_INDEX_MAX_NODES nodes already
 */
guint
kv_fleet_index_add_node (KvFleetIndex *self,
                         const char   *name)
{
  guint id;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), G_MAXUINT);
  g_return_val_if_fail (name != NULL, G_MAXUINT);

  g_rw_lock_writer_lock (&self->lock);
  for (id = 0; id < self->nodes->len; id++)
    if (g_str_equal (node_at (self, id)->name, name))
      break;
  if (id == self->nodes->len)
    {
      Node node = { 0 };

      if (self->nodes->len >= KV_FLEET_INDEX_MAX_NODES)
        {
          g_rw_lock_writer_unlock (&self->lock);
          g_warning ("fleet index: cannot add node %s: the index holds %u nodes already",
                     name, KV_FLEET_INDEX_MAX_NODES);
          return G_MAXUINT;
        }
      node.name = g_strdup (name);
      g_array_append_val (self->nodes, node);
    }
  node_at (self, id)->alive = TRUE;
  node_at (self, id)->last_seen_us = now_us (self);
  g_rw_lock_writer_unlock (&self->lock);
  return id;
}

/**
 * kv_fleet_index_find_node:
 * @self: an index
 * @name: a node's name
 *
 * Finds a node by name.
 *
 * Returns: its id, or -1
 */
gint
kv_fleet_index_find_node (KvFleetIndex *self,
                          const char   *name)
{
  gint found = -1;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), -1);
  g_return_val_if_fail (name != NULL, -1);

  g_rw_lock_reader_lock (&self->lock);
  for (guint id = 0; id < self->nodes->len && found < 0; id++)
    if (g_str_equal (node_at (self, id)->name, name))
      found = (gint) id;
  g_rw_lock_reader_unlock (&self->lock);
  return found;
}

/**
 * kv_fleet_index_get_n_nodes:
 * @self: an index
 *
 * Gets how many nodes were ever added (ids run from 0 to this, alive or
 * forgotten).
 *
 * Returns: the number of node ids
 */
guint
kv_fleet_index_get_n_nodes (KvFleetIndex *self)
{
  guint n;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);

  g_rw_lock_reader_lock (&self->lock);
  n = self->nodes->len;
  g_rw_lock_reader_unlock (&self->lock);
  return n;
}

/**
 * kv_fleet_index_dup_node_name:
 * @self: an index
 * @node: a node id
 *
 * Gets a node's name.
 *
 * Returns: (transfer full) (nullable): the name, or %NULL for an unknown id
 */
char *
kv_fleet_index_dup_node_name (KvFleetIndex *self,
                              guint         node)
{
  char *name = NULL;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), NULL);

  g_rw_lock_reader_lock (&self->lock);
  if (node < self->nodes->len)
    name = g_strdup (node_at (self, node)->name);
  g_rw_lock_reader_unlock (&self->lock);
  return name;
}

/**
 * kv_fleet_index_is_node_alive:
 * @self: an index
 * @node: a node id
 *
 * Gets whether a node is alive: added, and not forgotten since.
 *
 * Returns: %TRUE if the node is alive
 */
gboolean
kv_fleet_index_is_node_alive (KvFleetIndex *self,
                              guint         node)
{
  gboolean alive = FALSE;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), FALSE);

  g_rw_lock_reader_lock (&self->lock);
  if (node < self->nodes->len)
    alive = node_at (self, node)->alive;
  g_rw_lock_reader_unlock (&self->lock);
  return alive;
}

/**
 * kv_fleet_index_get_node_n_keys:
 * @self: an index
 * @node: a node id
 *
 * Gets how many keys a node holds, anywhere.
 *
 * Returns: a count of keys, 0 for an unknown or forgotten node
 */
guint64
kv_fleet_index_get_node_n_keys (KvFleetIndex *self,
                                guint         node)
{
  guint64 n = 0;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);

  g_rw_lock_reader_lock (&self->lock);
  if (node < self->nodes->len)
    n = node_at (self, node)->n_keys;
  g_rw_lock_reader_unlock (&self->lock);
  return n;
}

static void
forget_locked (KvFleetIndex *self,
               guint         node)
{
  sweep_node (self, (guint16) node, FALSE);
  node_at (self, node)->alive = FALSE;
}

/**
 * kv_fleet_index_forget_node:
 * @self: an index
 * @node: a node id
 *
 * Removes every entry of @node and marks it forgotten: updates for it are
 * refused until it is added again. Unlike
 * [method@Kv.FleetIndex.expire], nothing is logged or emitted. It takes
 * time proportional to the keys of the whole index.
 */
void
kv_fleet_index_forget_node (KvFleetIndex *self,
                            guint         node)
{
  g_return_if_fail (KV_IS_FLEET_INDEX (self));

  g_rw_lock_writer_lock (&self->lock);
  if (node < self->nodes->len)
    forget_locked (self, node);
  g_rw_lock_writer_unlock (&self->lock);
}

/* Takes the writer lock for an update from @node; FALSE (unlocked) when
 * the node is unknown or forgotten. */
static gboolean
lock_alive_node (KvFleetIndex *self,
                 guint         node)
{
  g_rw_lock_writer_lock (&self->lock);
  if (node >= self->nodes->len || !node_at (self, node)->alive)
    {
      g_rw_lock_writer_unlock (&self->lock);
      return FALSE;
    }
  node_at (self, node)->last_seen_us = now_us (self);
  return TRUE;
}

/**
 * kv_fleet_index_update:
 * @self: an index
 * @node: a node id
 * @key: a chunk key
 * @locations: every place @node now holds @key, or
 *   %KV_FLEET_LOCATION_NONE when it no longer holds it
 *
 * Sets where @node holds @key (a whole state, not a change, so applying it
 * twice is harmless). Counts as a sign of life of the node.
 *
 * Returns: %TRUE, or %FALSE when @node is unknown or forgotten (the update
 *   is dropped: a forgotten node must send a new snapshot)
 */
gboolean
kv_fleet_index_update (KvFleetIndex    *self,
                       guint            node,
                       KvKey           *key,
                       KvFleetLocation  locations)
{
  guint8 loc = (guint8) locations;

  g_return_val_if_fail (key != NULL, FALSE);
  return kv_fleet_index_update_many (self, node, &key, &loc, 1);
}

/**
 * kv_fleet_index_update_many:
 * @self: an index
 * @node: a node id
 * @keys: (array length=n_keys): chunk keys
 * @locations: (array length=n_keys): for each key, the #KvFleetLocation
 *   flags where @node now holds it (0: nowhere)
 * @n_keys: the length of @keys and @locations
 *
 * Applies [method@Kv.FleetIndex.update] to each key in order, under one
 * lock.
 *
 * Returns: %TRUE, or %FALSE when @node is unknown or forgotten
 */
gboolean
kv_fleet_index_update_many (KvFleetIndex  *self,
                            guint          node,
                            KvKey * const *keys,
                            const guint8  *locations,
                            guint          n_keys)
{
  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), FALSE);
  g_return_val_if_fail (keys != NULL || n_keys == 0, FALSE);
  g_return_val_if_fail (locations != NULL || n_keys == 0, FALSE);

  if (!lock_alive_node (self, node))
    return FALSE;
  for (guint i = 0; i < n_keys; i++)
    set_locations (self, (guint16) node, keys[i], locations[i]);
  g_rw_lock_writer_unlock (&self->lock);
  return TRUE;
}

/**
 * kv_fleet_index_begin_snapshot:
 * @self: an index
 * @node: a node id
 *
 * Starts a full snapshot of @node: what it holds is sent again with
 * [method@Kv.FleetIndex.update], and [method@Kv.FleetIndex.end_snapshot]
 * removes whatever was not. Lookups go on meanwhile and see the old
 * state of the keys not sent yet.
 *
 * Returns: %TRUE, or %FALSE when @node is unknown or forgotten
 */
gboolean
kv_fleet_index_begin_snapshot (KvFleetIndex *self,
                               guint         node)
{
  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), FALSE);

  if (!lock_alive_node (self, node))
    return FALSE;
  node_at (self, node)->epoch++;
  g_rw_lock_writer_unlock (&self->lock);
  return TRUE;
}

/**
 * kv_fleet_index_end_snapshot:
 * @self: an index
 * @node: a node id
 *
 * Ends @node's snapshot: every key of the node not updated since
 * [method@Kv.FleetIndex.begin_snapshot] is removed. Takes time
 * proportional to the keys of the whole index.
 *
 * Returns: %TRUE, or %FALSE when @node is unknown or forgotten
 */
gboolean
kv_fleet_index_end_snapshot (KvFleetIndex *self,
                             guint         node)
{
  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), FALSE);

  if (!lock_alive_node (self, node))
    return FALSE;
  sweep_node (self, (guint16) node, TRUE);
  g_rw_lock_writer_unlock (&self->lock);
  return TRUE;
}

/**
 * kv_fleet_index_heartbeat:
 * @self: an index
 * @node: a node id
 *
 * Records a sign of life of @node (its stream's heartbeat).
 *
 * Returns: %TRUE, or %FALSE when @node is unknown or forgotten
 */
gboolean
kv_fleet_index_heartbeat (KvFleetIndex *self,
                          guint         node)
{
  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), FALSE);

  if (!lock_alive_node (self, node))
    return FALSE;
  g_rw_lock_writer_unlock (&self->lock);
  return TRUE;
}

/**
 * kv_fleet_index_expire:
 * @self: an index
 *
 * Forgets every alive node that sent nothing for longer than
 * [property@Kv.FleetIndex:node-timeout-ms]: its entries leave the index,
 * a message naming it is logged and
 * [signal@Kv.FleetIndex::node-forgotten] is emitted (on this thread). Call
 * it from a timer, or before routing.
 *
 * Returns: how many nodes were forgotten
 */
guint
kv_fleet_index_expire (KvFleetIndex *self)
{
  g_autoptr(GArray) forgotten = NULL;
  g_autoptr(GPtrArray) lines = NULL;
  gint64 now;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);

  if (self->node_timeout_ms == 0)
    return 0;
  now = now_us (self);

  /* most calls find nothing: look under the reader lock first */
  g_rw_lock_reader_lock (&self->lock);
  for (guint id = 0; id < self->nodes->len && forgotten == NULL; id++)
    if (node_at (self, id)->alive &&
        now - node_at (self, id)->last_seen_us > (gint64) self->node_timeout_ms * 1000)
      forgotten = g_array_new (FALSE, FALSE, sizeof (guint));
  g_rw_lock_reader_unlock (&self->lock);
  if (forgotten == NULL)
    return 0;

  lines = g_ptr_array_new_with_free_func (g_free);
  g_rw_lock_writer_lock (&self->lock);
  for (guint id = 0; id < self->nodes->len; id++)
    {
      Node *info = node_at (self, id);
      guint64 n_keys = info->n_keys;

      if (!info->alive || now - info->last_seen_us <= (gint64) self->node_timeout_ms * 1000)
        continue;
      forget_locked (self, id);
      g_array_append_val (forgotten, id);
      g_ptr_array_add (lines, g_strdup_printf ("fleet index: node %s sent nothing for %"
                                               G_GINT64_FORMAT " ms: its %" G_GUINT64_FORMAT
                                               " chunks are forgotten", info->name,
                                               (now - info->last_seen_us) / 1000, n_keys));
      __atomic_add_fetch (&self->n_forgotten, 1, __ATOMIC_RELAXED);
    }
  g_rw_lock_writer_unlock (&self->lock);

  /* log handlers and signal handlers run with no lock held */
  for (guint i = 0; i < forgotten->len; i++)
    {
      guint id = g_array_index (forgotten, guint, i);
      g_autofree char *name = kv_fleet_index_dup_node_name (self, id);

      g_message ("%s", (const char *) lines->pdata[i]);
      g_signal_emit (self, signals[SIGNAL_NODE_FORGOTTEN], 0, id, name);
    }
  return forgotten->len;
}

/* ---- lookups ------------------------------------------------------------------ */

/**
 * kv_fleet_index_get_locations:
 * @self: an index
 * @node: a node id
 * @key: a chunk key
 *
 * Gets where @node holds @key.
 *
 * Returns: the places, %KV_FLEET_LOCATION_NONE when it does not hold it
 */
KvFleetLocation
kv_fleet_index_get_locations (KvFleetIndex *self,
                              guint         node,
                              KvKey        *key)
{
  KvFleetLocation locations = KV_FLEET_LOCATION_NONE;
  Entry *entry;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), KV_FLEET_LOCATION_NONE);
  g_return_val_if_fail (key != NULL, KV_FLEET_LOCATION_NONE);

  g_rw_lock_reader_lock (&self->lock);
  entry = find_entry (self, key);
  if (entry != NULL)
    {
      gint i = find_holder (entry, (guint16) node);

      if (i >= 0)
        locations = entry_holders (entry)[i].locations;
    }
  g_rw_lock_reader_unlock (&self->lock);
  return locations;
}

/* A lookup reads, for each key, its slot and then its entry; over a large
 * index both are cache misses. The walk has two ways to find the next
 * key's entry:
 *
 * - following: a prompt's chunks are stored in order, so their events
 *   arrive in order and their entries sit one after another; the entry
 *   after the last one found is tried first, compared key for key, and
 *   taken when it is the key's (the lines ahead are streamed in by the
 *   prefetch below and the processor's own). No slot is read.
 * - probing: from the first key whose entry is not the next one (the
 *   prompt branched off another one there, or deletions moved entries),
 *   slots are fetched ahead in two stages, the slot SLOT_AHEAD keys ahead
 *   and the entry (through the slot, which has arrived by then)
 *   ENTRY_AHEAD keys ahead, so that the misses of many successive keys are
 *   in flight together instead of one after the other. A walk that stops
 *   early has fetched at most SLOT_AHEAD keys it did not need.
 *
 * Either way a key is found only by comparing its whole hash, so the
 * answer does not depend on where entries sit, only its speed does. The
 * walk keeps the table's pointers in locals (the answers it writes could
 * alias the index's fields as far as the compiler knows) and reads each
 * key's fields from the key. */
G_STATIC_ASSERT (SLOT_AHEAD > ENTRY_AHEAD);

#ifndef FOLLOW_AHEAD
#define FOLLOW_AHEAD      8
#endif
#ifndef FOLLOW_RUN
#define FOLLOW_RUN        4
#endif

typedef struct
{
  const Slot   *slots;
  guint32       mask;
  Entry        *entries;
  guint32       n_entries;
} Table;

static inline Entry *
table_entry (const Table *table,
             guint32      index)
{
  return &table->entries[index];
}

static inline void
prefetch_slot (const Table *table,
               const KvKey *key)
{
  __builtin_prefetch (&table->slots[key->hash & table->mask]);
}

static inline void
prefetch_entry (const Table *table,
                const KvKey *key)
{
  Slot slot = table->slots[key->hash & table->mask];

  if (slot.index != 0)
    __builtin_prefetch (table_entry (table, slot.index - 1));
}

static inline __attribute__ ((always_inline)) gboolean
key_matches (const Entry *entry,
             const KvKey *key)
{
  return entry->group == key->group &&
         (entry->key_len == KEY_INLINE && key->hash_len == KEY_INLINE
            ? equal32 (entry->key.bytes, key->data)
            : entry_matches (entry, key->group, key->data, key->hash_len));
}

/* find_slot() for a lookup's walk, inlined: the usual 32-byte key costs
 * a few loads and compares. */
static inline __attribute__ ((always_inline)) Entry *
probe_entry (const Table *table,
             const KvKey *key)
{
  guint32 hash = key->hash;
  guint32 pos = hash & table->mask;

  for (;;)
    {
      Slot slot = table->slots[pos];

      if (slot.index == 0)
        return NULL;
      if (slot.tag == hash)
        {
          Entry *entry = table_entry (table, slot.index - 1);

          if (key_matches (entry, key))
            return entry;
        }
      pos = (pos + 1) & table->mask;
    }
}

static inline __attribute__ ((always_inline)) gboolean
entry_is (const Table *table,
          gint64       index,
          const KvKey *key)
{
  return index >= 0 && index < table->n_entries && table->entries[index].hash == key->hash &&
         key_matches (&table->entries[index], key);
}

/* The entry next to @entry in the walk's direction @step (1 or -1), when
 * it is @key's, else the one the other way (and @step turns): a run of
 * entries moved by removals lies backwards (each removal moves the last
 * entry into its place). */
static inline __attribute__ ((always_inline)) Entry *
follow_entry (const Table *table,
              const Entry *entry,
              const KvKey *key,
              gint        *step)
{
  gint64 index = entry - table->entries;

  if (entry_is (table, index + *step, key))
    return &table->entries[index + *step];
  if (entry_is (table, index - *step, key))
    {
      *step = -*step;
      return &table->entries[index + *step];
    }
  return NULL;
}

/* The counts by place, in the order of the place bits. */
G_STATIC_ASSERT (G_STRUCT_OFFSET (KvFleetNodeMatch, n_primary) ==
                 G_STRUCT_OFFSET (KvFleetNodeMatch, n_device) + sizeof (guint));
G_STATIC_ASSERT (G_STRUCT_OFFSET (KvFleetNodeMatch, n_disk) ==
                 G_STRUCT_OFFSET (KvFleetNodeMatch, n_device) + 2 * sizeof (guint));
G_STATIC_ASSERT (G_STRUCT_OFFSET (KvFleetNodeMatch, n_remote) ==
                 G_STRUCT_OFFSET (KvFleetNodeMatch, n_device) + 3 * sizeof (guint));
G_STATIC_ASSERT (KV_FLEET_LOCATION_DEVICE == 1 << 0 && KV_FLEET_LOCATION_PRIMARY == 1 << 1 &&
                 KV_FLEET_LOCATION_DISK == 1 << 2 && KV_FLEET_LOCATION_REMOTE == 1 << 3);

static inline void
tally (KvFleetNodeMatch *match,
       guint8            locations)
{
  /* the fastest place, the lowest bit, counts; a chunk only remote (or,
   * never stored so, nowhere) counts as remote: no branch to mispredict
   * where places vary along a prefix */
  (&match->n_device)[__builtin_ctz (locations | KV_FLEET_LOCATION_REMOTE)]++;
}

static int
compare_by_node (gconstpointer a,
                 gconstpointer b)
{
  const KvFleetNodeMatch *x = a, *y = b;

  return (x->node > y->node) - (x->node < y->node);
}

/* The nodes still in the running, at the back of the answers: those
 * that dropped out, their prefix final, are before them. */
typedef struct
{
  KvFleetNodeMatch *matches;
  guint             n_running;
  guint             n_done;
} Walk;

/* Counts @entry for each node still in the running; a node that does not
 * hold it is out. Returns whether any node is still in the running. */
static inline __attribute__ ((always_inline)) gboolean
walk_entry (Walk  *walk,
            Entry *entry)
{
  Holder *holders = entry_holders (entry);
  guint n_holders = entry->n_holders;

  /* the usual walk: one node still in the running */
  if (walk->n_running - walk->n_done == 1)
    {
      KvFleetNodeMatch *m = &walk->matches[walk->n_done];
      guint16 node = (guint16) m->node;
      guint h = 0;

      while (h < n_holders && holders[h].node != node)
        h++;
      if (h == n_holders)
        {
          walk->n_done++;
          return FALSE;
        }
      m->prefix++;
      tally (m, holders[h].locations);
      return TRUE;
    }
  for (guint r = walk->n_done; r < walk->n_running; r++)
    {
      KvFleetNodeMatch *running = walk->matches;
      guint16 node = (guint16) running[r].node;
      guint h = 0;

      while (h < n_holders && holders[h].node != node)
        h++;
      if (h == n_holders)
        {
          /* out of the running: its prefix is final */
          KvFleetNodeMatch tmp = running[walk->n_done];

          running[walk->n_done] = running[r];
          running[r] = tmp;
          walk->n_done++;
          continue;
        }
      running[r].prefix++;
      tally (&running[r], holders[h].locations);
    }
  return walk->n_running > walk->n_done;
}

/**
 * kv_fleet_index_lookup_into: (skip)
 * @self: an index
 * @keys: (array length=n_keys): a request's chunk keys, in prompt order
 * @n_keys: the length of @keys
 * @matches: (array length=max_matches) (out caller-allocates): where the
 *   nodes' answers go
 * @max_matches: the length of @matches; a fleet's node count is enough
 *
 * [method@Kv.FleetIndex.lookup] into a caller's array, with no allocation
 * when @max_matches is at least the number of holders of the first key
 * (answers beyond @max_matches are dropped). The walk stops at the first
 * key no node still in the running holds, so its cost is proportional to
 * the longest prefix.
 *
 * Returns: the number of answers written, in node order
 */
guint
kv_fleet_index_lookup_into (KvFleetIndex     *self,
                            KvKey * const    *keys,
                            guint             n_keys,
                            KvFleetNodeMatch *matches,
                            guint             max_matches)
{
  Walk walk = { matches, 0, 0 };
  Entry *entry, *next;
  gint step = 1;
  Holder *holders;
  Table table;
  guint i;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);
  g_return_val_if_fail (keys != NULL || n_keys == 0, 0);
  g_return_val_if_fail (matches != NULL || max_matches == 0, 0);

  if (n_keys == 0 || max_matches == 0)
    return 0;

  g_rw_lock_reader_lock (&self->lock);
  table.slots = self->slots;
  table.mask = self->n_slots - 1;
  table.entries = self->entries;
  table.n_entries = self->n_entries;

  entry = probe_entry (&table, keys[0]);
  if (entry == NULL)
    goto out;
  holders = entry_holders (entry);
  for (guint h = 0; h < entry->n_holders && walk.n_running < max_matches; h++)
    {
      KvFleetNodeMatch *m;

      if (!node_at (self, holders[h].node)->alive)
        continue;
      m = &matches[walk.n_running++];
      memset (m, 0, sizeof *m);
      m->node = holders[h].node;
      m->prefix = 1;
      tally (m, holders[h].locations);
    }
  if (walk.n_running == 0)
    goto out;

  /* following; where a run breaks after FOLLOW_RUN keys or more, the
   * layout is in prompt order and the prompt only branched: the next key
   * is probed alone and following resumes from it */
  for (i = 1; i < n_keys;)
    {
      guint run = 0;

      for (; i < n_keys; i++, run++)
        {
          __builtin_prefetch (entry + step * FOLLOW_AHEAD);
          next = follow_entry (&table, entry, keys[i], &step);
          if (next == NULL)
            break;
          entry = next;
          if (!walk_entry (&walk, entry))
            goto out;
        }
      if (i == n_keys)
        goto out;
      if (run < FOLLOW_RUN)
        break;
      entry = probe_entry (&table, keys[i]);
      if (entry == NULL || !walk_entry (&walk, entry))
        goto out;
      i++;
      step = 1;
    }
  if (i == n_keys)
    goto out;

  /* probing, from key i on */
  for (guint k = i; k < MIN (n_keys, i + SLOT_AHEAD); k++)
    prefetch_slot (&table, keys[k]);
  for (guint k = i; k < MIN (n_keys, i + ENTRY_AHEAD); k++)
    prefetch_entry (&table, keys[k]);
  for (; i < n_keys; i++)
    {
      if (i + SLOT_AHEAD < n_keys)
        prefetch_slot (&table, keys[i + SLOT_AHEAD]);
      if (i + ENTRY_AHEAD < n_keys)
        prefetch_entry (&table, keys[i + ENTRY_AHEAD]);
      entry = probe_entry (&table, keys[i]);
      if (entry == NULL || !walk_entry (&walk, entry))
        break;
    }

out:
  g_rw_lock_reader_unlock (&self->lock);
  if (walk.n_running > 1)
    qsort (matches, walk.n_running, sizeof (KvFleetNodeMatch), compare_by_node);
  return walk.n_running;
}

/**
 * kv_fleet_index_lookup:
 * @self: an index
 * @keys: (array length=n_keys): a request's chunk keys, in prompt order
 * @n_keys: the length of @keys
 *
 * For each alive node that holds the request's first chunk: how many
 * leading chunks it holds, and where they sit. The cost is proportional to
 * the longest prefix any node holds, not to the size of the index.
 *
 * Returns: (transfer full): the nodes' answers
 */
KvFleetMatch *
kv_fleet_index_lookup (KvFleetIndex  *self,
                       KvKey * const *keys,
                       guint          n_keys)
{
  KvFleetNodeMatch stack[64];
  g_autofree KvFleetNodeMatch *heap = NULL;
  KvFleetNodeMatch *matches = stack;
  guint max = G_N_ELEMENTS (stack);
  guint n;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), NULL);
  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);

  g_rw_lock_reader_lock (&self->lock);
  if (self->nodes->len > max)
    max = self->nodes->len;
  g_rw_lock_reader_unlock (&self->lock);
  if (max > G_N_ELEMENTS (stack))
    matches = heap = g_new (KvFleetNodeMatch, max);
  n = kv_fleet_index_lookup_into (self, keys, n_keys, matches, max);
  return kv_fleet_match_new (n_keys, matches, n);
}

/* ---- counters --------------------------------------------------------------------- */

/**
 * kv_fleet_index_get_n_keys:
 * @self: an index
 *
 * Gets how many distinct keys at least one node holds.
 *
 * Returns: a count of keys
 */
guint64
kv_fleet_index_get_n_keys (KvFleetIndex *self)
{
  guint64 n;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);

  g_rw_lock_reader_lock (&self->lock);
  n = self->n_entries;
  g_rw_lock_reader_unlock (&self->lock);
  return n;
}

/**
 * kv_fleet_index_get_n_forgotten:
 * @self: an index
 *
 * Gets how many times a silent node was forgotten by
 * [method@Kv.FleetIndex.expire].
 *
 * Returns: a count of expiries
 */
guint64
kv_fleet_index_get_n_forgotten (KvFleetIndex *self)
{
  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);
  return __atomic_load_n (&self->n_forgotten, __ATOMIC_RELAXED);
}

/**
 * kv_fleet_index_get_memory_size:
 * @self: an index
 *
 * Gets the bytes the index allocated for its keys: the entry array, slots,
 * holders beyond the inline ones and the keys too long to sit inline
 * (node names not counted).
 *
 * Returns: a size in bytes
 */
guint64
kv_fleet_index_get_memory_size (KvFleetIndex *self)
{
  guint64 size;

  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);

  g_rw_lock_reader_lock (&self->lock);
  size = (guint64) self->entries_cap * sizeof (Entry) +
         (guint64) self->n_slots * sizeof (Slot) +
         self->heap_holders * sizeof (Holder);
  for (guint32 i = 0; i < self->n_entries; i++)
    {
      Entry *entry = entry_at (self, i);

      if (entry->key_len == 0)
        {
          gsize len = 0;

          kv_key_get_hash (entry->key.ext, &len);
          size += 32 + len;  /* the key's header and bytes */
        }
    }
  g_rw_lock_reader_unlock (&self->lock);
  return size;
}

/**
 * kv_fleet_index_get_node_timeout_ms:
 * @self: an index
 *
 * Gets [property@Kv.FleetIndex:node-timeout-ms].
 *
 * Returns: the timeout in milliseconds, 0 for none
 */
guint
kv_fleet_index_get_node_timeout_ms (KvFleetIndex *self)
{
  g_return_val_if_fail (KV_IS_FLEET_INDEX (self), 0);
  return g_atomic_int_get (&self->node_timeout_ms);
}

/**
 * kv_fleet_index_set_node_timeout_ms:
 * @self: an index
 * @timeout_ms: the timeout in milliseconds, 0 for none
 *
 * Sets [property@Kv.FleetIndex:node-timeout-ms].
 */
void
kv_fleet_index_set_node_timeout_ms (KvFleetIndex *self,
                                    guint         timeout_ms)
{
  g_return_if_fail (KV_IS_FLEET_INDEX (self));

  if ((guint) g_atomic_int_get (&self->node_timeout_ms) == timeout_ms)
    return;
  g_atomic_int_set (&self->node_timeout_ms, timeout_ms);
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_NODE_TIMEOUT_MS]);
}

/* ---- GObject ------------------------------------------------------------------------ */

/**
 * kv_fleet_index_new:
 *
 * Creates an empty index on the default clock.
 *
 * Returns: (transfer full): a new index
 */
KvFleetIndex *
kv_fleet_index_new (void)
{
  return g_object_new (KV_TYPE_FLEET_INDEX, NULL);
}

static void
kv_fleet_index_finalize (GObject *object)
{
  KvFleetIndex *self = KV_FLEET_INDEX (object);

  for (guint32 i = 0; i < self->n_entries; i++)
    entry_clear (self, entry_at (self, i));
  munmap (self->entries, (gsize) self->entries_cap * sizeof (Entry));
  slots_free (self->slots, self->n_slots);
  for (guint id = 0; id < self->nodes->len; id++)
    g_free (node_at (self, id)->name);
  g_array_unref (self->nodes);
  g_clear_object (&self->clock);
  g_rw_lock_clear (&self->lock);

  G_OBJECT_CLASS (kv_fleet_index_parent_class)->finalize (object);
}

static void
kv_fleet_index_get_property (GObject    *object,
                             guint       prop_id,
                             GValue     *value,
                             GParamSpec *pspec)
{
  KvFleetIndex *self = KV_FLEET_INDEX (object);

  switch (prop_id)
    {
    case PROP_CLOCK:
      g_value_set_object (value, self->clock);
      break;
    case PROP_NODE_TIMEOUT_MS:
      g_value_set_uint (value, kv_fleet_index_get_node_timeout_ms (self));
      break;
    case PROP_N_KEYS:
      g_value_set_uint64 (value, kv_fleet_index_get_n_keys (self));
      break;
    case PROP_N_NODES:
      g_value_set_uint (value, kv_fleet_index_get_n_nodes (self));
      break;
    case PROP_N_FORGOTTEN:
      g_value_set_uint64 (value, kv_fleet_index_get_n_forgotten (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_fleet_index_set_property (GObject      *object,
                             guint         prop_id,
                             const GValue *value,
                             GParamSpec   *pspec)
{
  KvFleetIndex *self = KV_FLEET_INDEX (object);

  switch (prop_id)
    {
    case PROP_CLOCK:
      g_clear_object (&self->clock);
      self->clock = g_value_dup_object (value);
      if (self->clock == NULL)
        self->clock = g_object_ref (kv_clock_get_default ());
      break;
    case PROP_NODE_TIMEOUT_MS:
      kv_fleet_index_set_node_timeout_ms (self, g_value_get_uint (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_fleet_index_class_init (KvFleetIndexClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_fleet_index_finalize;
  object_class->get_property = kv_fleet_index_get_property;
  object_class->set_property = kv_fleet_index_set_property;

  /**
   * KvFleetIndex:clock:
   *
   * The clock that times the nodes' silence (the default clock unless a
   * test gives a manual one).
   */
  properties[PROP_CLOCK] =
    g_param_spec_object ("clock", NULL, NULL, KV_TYPE_CLOCK,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);
  /**
   * KvFleetIndex:node-timeout-ms:
   *
   * How long a node may send nothing (no update, no heartbeat) before
   * [method@Kv.FleetIndex.expire] forgets it; 0: never.
   */
  properties[PROP_NODE_TIMEOUT_MS] =
    g_param_spec_uint ("node-timeout-ms", NULL, NULL, 0, G_MAXUINT, 10000,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT | G_PARAM_EXPLICIT_NOTIFY |
                       G_PARAM_STATIC_STRINGS);
  /**
   * KvFleetIndex:n-keys:
   *
   * Distinct keys at least one node holds (read when asked, not
   * notified).
   */
  properties[PROP_N_KEYS] =
    g_param_spec_uint64 ("n-keys", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /**
   * KvFleetIndex:n-nodes:
   *
   * Node ids handed out, alive or forgotten (not notified).
   */
  properties[PROP_N_NODES] =
    g_param_spec_uint ("n-nodes", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /**
   * KvFleetIndex:n-forgotten:
   *
   * Times a silent node was forgotten (not notified: see
   * [signal@Kv.FleetIndex::node-forgotten]).
   */
  properties[PROP_N_FORGOTTEN] =
    g_param_spec_uint64 ("n-forgotten", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);

  /**
   * KvFleetIndex::node-forgotten:
   * @self: the index
   * @node: the node's id
   * @name: the node's name
   *
   * A node sent nothing for longer than
   * [property@Kv.FleetIndex:node-timeout-ms] and its entries left the
   * index. Emitted by [method@Kv.FleetIndex.expire], on its caller's
   * thread.
   */
  signals[SIGNAL_NODE_FORGOTTEN] =
    g_signal_new ("node-forgotten", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                  0, NULL, NULL, NULL, G_TYPE_NONE, 2, G_TYPE_UINT, G_TYPE_STRING);
}

static void
kv_fleet_index_init (KvFleetIndex *self)
{
  g_rw_lock_init (&self->lock);
  self->clock = g_object_ref (kv_clock_get_default ());
  self->node_timeout_ms = 10000;
  self->n_slots = MIN_SLOTS;
  self->slots = slots_alloc (self->n_slots);
  entries_set_cap (self, entries_cap_for (0));
  self->nodes = g_array_new (FALSE, FALSE, sizeof (Node));
}
