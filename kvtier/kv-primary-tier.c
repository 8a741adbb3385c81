/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include "config.h"

#include "kv-primary-tier.h"
#include "kv-primary-tier-private.h"
#include "kv-host-buffer-private.h"
#include "kv-prepare-store-result-private.h"

#include "kv-cache-policy-private.h"
#include "kv-entry-table-private.h"
#include "kv-lru-policy.h"

/* The primary tier: chunk states, slot allocation, eviction through the
 * cache policy, and events. Its index of keys is kv-entry-table.c, whose
 * lookup and probe are inline in kv-entry-table-private.h so that the
 * manager's per-key hot path still reads one bucket and calls nothing.
 * A little over ~1,500 lines: a quarter is the public API's documentation,
 * which gi-docgen reads from here. */

/* Batches up to this many keys keep their per-call scratch arrays on the
 * stack (the manager's usual batches are a request's chunks). */
#define KV_STACK_KEYS 64

/* The state of one stored chunk (vLLM's BlockStatus): ref_cnt −1 while its
 * slot is being written, 0 when ready and evictable, n > 0 while n readers
 * (GPU loads, cascade reads) pin it. */
typedef struct _KvEntry KvEntry;
struct _KvEntry
{
  KvKey     *key;
  guint32    slot;
  gint32     ref_cnt;
  union {
    /* the key's node in the built-in LRU policy (see self->lru) */
    KvLruNode *lru_node;
    /* while unused (key NULL): the next spare entry */
    KvEntry   *next_spare;
  };
};

/* Entries are allocated this many at a time: filling the tier then costs
 * one allocation per block of chunks, not one per chunk. */
#define KV_ENTRY_BLOCK 256

/**
 * KvPrimaryTier:
 *
 * The CPU primary tier: chunk states, slot allocation, eviction and events
 * over the slots of a [class@Kv.HostBuffer], as vLLM's
 * `CPUPrimaryTierOffloadingManager`.
 *
 * Each stored chunk holds one slot and a reference count: −1 while its
 * bytes are being written (a store from the GPU or a promotion from a
 * secondary tier; [method@Kv.PrimaryTier.lookup] answers
 * %KV_LOOKUP_RESULT_HIT_PENDING), 0 when it is ready and may be evicted, and
 * n > 0 while n readers pin it (`kv_primary_tier_prepare_load()` for the
 * GPU, `kv_primary_tier_prepare_read()` for a cascade to a secondary tier).
 * Those two fill a caller-allocated array and are for C only; bindings pin
 * loads with [method@Kv.TieringManager.prepare_load].
 *
 * Slots come from a bump allocator first (never-used slots, in order) and
 * then from a last-in-first-out list of freed slots.
 * [method@Kv.PrimaryTier.prepare_store] evicts just enough ready, unpinned
 * chunks to fit a batch, chosen by the [iface@Kv.CachePolicy], and never one
 * of the batch's own keys; when that is impossible it fails without changing
 * anything.
 *
 * With [property@Kv.PrimaryTier:enable-events], storing and evicting queue
 * [struct@Kv.Event]s (medium %KV_MEDIUM_CPU) that
 * [method@Kv.PrimaryTier.take_events] drains.
 *
 * Every method runs on the owner thread; per-key work is O(1).
 */
struct _KvPrimaryTier
{
  GObject parent_instance;

  KvHostBuffer *buffer;
  KvCachePolicy *policy;
  /* looked up once: the policy is called several times per key */
  KvCachePolicyInterface *policy_iface;
  /* the policy when it is the built-in LRU: entries then keep their node,
   * so that pinning and releasing a chunk skip the policy's table */
  KvLruPolicy *lru;
  gboolean enable_events;

  guint n_slots;
  gsize slot_size;
  /* the buffer's per-slot "checksum known" flags: a slot handed to a new
   * writer, or freed, no longer has the checksum of its old bytes */
  guint8 *slot_checksum_known;

  /* KvKey (the entry's own key) → KvEntry, tagged while pending */
  KvEntryTable entries;
  /* unused KvEntry structs (of removed chunks, or never used yet), taken
   * by the next stores */
  KvEntry *spare_entries;
  /* the arrays of KV_ENTRY_BLOCK entries that every KvEntry lives in */
  GPtrArray *entry_blocks;

  /* bump allocator: slots [0, n_bumped) have been handed out at least once */
  guint n_bumped;
  /* freed slots, reused last in first out: a stack of at most n_slots */
  guint32 *free_list;
  guint n_free_list;

  guint n_evictable;
  guint n_write_pending;

  /* KvEvent, oldest first */
  GPtrArray *events;

  /* told about a stamped entry that goes away (see the private header) */
  KvPrimaryStampDropFunc stamp_drop_func;
  gpointer stamp_drop_data;

  /* the owner thread of the manager that owns this tier, if any */
  KvOwnerThread *owner;
};

enum {
  PROP_0,
  PROP_BUFFER,
  PROP_POLICY,
  PROP_ENABLE_EVENTS,
  PROP_N_SLOTS,
  PROP_SLOT_SIZE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

G_DEFINE_FINAL_TYPE (KvPrimaryTier, kv_primary_tier, G_TYPE_OBJECT)

/* Returns @val without touching anything when a manager owns the tier and
 * the caller is not its owner thread. */
#define OWNER_CHECK(self, val) \
  G_STMT_START { \
    if ((self)->owner != NULL) \
      KV_OWNER_CHECK_RETURN ((self)->owner, "KvPrimaryTier (owned by a KvTieringManager)", TRUE, val); \
  } G_STMT_END

void
_kv_primary_tier_set_owner (KvPrimaryTier *self,
                            KvOwnerThread *owner)
{
  g_return_if_fail (KV_IS_PRIMARY_TIER (self));

  self->owner = owner;
}

/* The table's value is the entry pointer, tagged with this bit while the
 * entry is being written (ref_cnt −1). lookup() then answers from the table
 * alone, without touching the entry: one cache miss less on the
 * manager's per-key hot path. Entries are pointer-aligned, so the bit is free. */
#define KV_ENTRY_PENDING_TAG ((guintptr) 1)

static inline KvEntry *
entry_from_value (gpointer value)
{
  return (KvEntry *) ((guintptr) value & ~KV_ENTRY_PENDING_TAG);
}

/* Removes @key's entry from the index, telling the stamps' owner first. */
static void
primary_unindex (KvPrimaryTier *self,
                 KvKey         *key)
{
  KvBucket *bucket = _kv_entry_table_find (&self->entries, key);

  if (bucket == NULL)
    return;
  if (bucket->stamp != 0 && self->stamp_drop_func != NULL)
    self->stamp_drop_func (bucket->key, bucket->stamp, self->stamp_drop_data);
  _kv_entry_table_remove_bucket (&self->entries, bucket);
}

static inline KvEntry *
primary_get_entry (KvPrimaryTier *self,
                   const KvKey   *key)
{
  return entry_from_value (_kv_entry_table_lookup (&self->entries, key));
}

static KvEntry *
primary_take_entry (KvPrimaryTier *self,
                    KvKey         *key)
{
  KvEntry *entry;

  if (G_UNLIKELY (self->spare_entries == NULL))
    {
      KvEntry *block = g_new (KvEntry, KV_ENTRY_BLOCK);

      g_ptr_array_add (self->entry_blocks, block);
      for (guint i = 0; i < KV_ENTRY_BLOCK; i++)
        {
          block[i].key = NULL;
          block[i].next_spare = i + 1 < KV_ENTRY_BLOCK ? &block[i + 1] : NULL;
        }
      self->spare_entries = block;
    }
  entry = self->spare_entries;
  self->spare_entries = entry->next_spare;
  entry->key = kv_key_ref (key);
  entry->slot = G_MAXUINT32;
  entry->ref_cnt = -1;
  entry->lru_node = NULL;
  return entry;
}

/* The entry must be out of the table. */
static void
primary_release_entry (KvPrimaryTier *self,
                       KvEntry       *entry)
{
  g_clear_pointer (&entry->key, kv_key_unref);
  entry->next_spare = self->spare_entries;
  self->spare_entries = entry;
}

/* ---- the policy, by node when it is the built-in LRU ---- */

/* The LRU policy's lookups by key (see _kv_lru_policy_attach()). */
static KvLruNode *
primary_resolve_lru_node (gpointer     user_data,
                          const KvKey *key)
{
  KvEntry *entry = primary_get_entry (user_data, key);

  return entry != NULL ? entry->lru_node : NULL;
}

static inline void
policy_insert (KvPrimaryTier *self,
               KvEntry       *entry,
               gboolean       evictable)
{
  if (self->lru != NULL)
    entry->lru_node = _kv_lru_policy_insert_node (self->lru, entry->key, evictable, entry);
  else
    self->policy_iface->insert (self->policy, entry->key, evictable);
}

static inline void
policy_mark_evictable (KvPrimaryTier *self,
                       KvEntry       *entry)
{
  if (self->lru != NULL)
    _kv_lru_policy_set_node_evictable (self->lru, entry->lru_node, entry->key, TRUE);
  else
    self->policy_iface->mark_evictable (self->policy, entry->key);
}

static inline void
policy_mark_non_evictable (KvPrimaryTier *self,
                           KvEntry       *entry)
{
  if (self->lru != NULL)
    _kv_lru_policy_set_node_evictable (self->lru, entry->lru_node, entry->key, FALSE);
  else
    self->policy_iface->mark_non_evictable (self->policy, entry->key);
}

static inline void
policy_remove (KvPrimaryTier *self,
               KvEntry       *entry)
{
  if (self->lru != NULL)
    _kv_lru_policy_remove_node (self->lru, entry->lru_node, entry->key);
  else
    self->policy_iface->remove (self->policy, entry->key);
  entry->lru_node = NULL;
}

static inline guint
primary_n_free (KvPrimaryTier *self)
{
  return self->n_free_list + self->n_slots - self->n_bumped;
}

static guint32
primary_take_slot (KvPrimaryTier *self)
{
  guint32 slot;

  if (self->n_bumped < self->n_slots)
    slot = self->n_bumped++;
  else
    {
      g_assert (self->n_free_list > 0);
      slot = self->free_list[--self->n_free_list];
    }
  /* a new writer: the checksum of the old bytes no longer holds */
  self->slot_checksum_known[slot] = FALSE;
  return slot;
}

static void
primary_queue_event (KvPrimaryTier *self,
                     KvKey * const *keys,
                     guint          n_keys,
                     gboolean       removed)
{
  if (!self->enable_events || n_keys == 0)
    return;

  /* No locality: like vLLM's CPU manager, the primary leaves it unset. */
  g_ptr_array_add (self->events,
                   kv_event_new (keys, n_keys, KV_MEDIUM_CPU, removed,
                                 KV_LOCALITY_UNSPECIFIED));
}

/* Removes an entry and frees its slot. The policy is not told. */
static void
primary_remove_entry (KvPrimaryTier *self,
                      KvEntry       *entry)
{
  if (entry->ref_cnt == 0)
    self->n_evictable--;
  else if (entry->ref_cnt < 0)
    self->n_write_pending--;

  g_assert (self->n_free_list < self->n_slots);
  self->free_list[self->n_free_list++] = entry->slot;
  self->slot_checksum_known[entry->slot] = FALSE;
  primary_unindex (self, entry->key);
  primary_release_entry (self, entry);
}

static void
primary_clear_entries (KvPrimaryTier *self)
{
  KvEntryTable *table = &self->entries;

  for (guint i = 0; i <= table->mask; i++)
    {
      KvBucket *bucket = &table->buckets[i];
      gpointer value = bucket->value;

      if (value == NULL)
        continue;
      if (bucket->stamp != 0 && self->stamp_drop_func != NULL)
        self->stamp_drop_func (bucket->key, bucket->stamp, self->stamp_drop_data);
      bucket->value = NULL;
      primary_release_entry (self, entry_from_value (value));
    }
  table->n_entries = 0;
}

static void
kv_primary_tier_constructed (GObject *object)
{
  KvPrimaryTier *self = KV_PRIMARY_TIER (object);
  GParamSpec *pspec;

  G_OBJECT_CLASS (kv_primary_tier_parent_class)->constructed (object);

  if (self->buffer == NULL)
    {
      g_critical ("KvPrimaryTier needs a “buffer”");
      return;
    }

  self->n_slots = kv_host_buffer_get_n_slots (self->buffer);
  self->slot_size = kv_host_buffer_get_slot_size (self->buffer);
  self->slot_checksum_known = _kv_host_buffer_get_checksum_flags (self->buffer);
  self->free_list = g_new (guint32, MAX (self->n_slots, 1));

  if (self->policy == NULL)
    self->policy = kv_lru_policy_new ();
  self->policy_iface = KV_CACHE_POLICY_GET_IFACE (self->policy);
  /* KvLruPolicy is final: its exact type means the built-in behaviour. A
   * policy some other tier is attached to gets the interface calls. */
  if (G_OBJECT_TYPE (self->policy) == KV_TYPE_LRU_POLICY &&
      _kv_lru_policy_attach (KV_LRU_POLICY (self->policy), primary_resolve_lru_node, self))
    self->lru = KV_LRU_POLICY (self->policy);

  /* A capacity-aware policy created without a size (such as
   * kv_cache_policy_new_for_name ("arc")) gets the slot count. */
  pspec = g_object_class_find_property (G_OBJECT_GET_CLASS (self->policy), "capacity");
  if (pspec != NULL && pspec->value_type == G_TYPE_UINT &&
      (pspec->flags & G_PARAM_WRITABLE) != 0 &&
      (pspec->flags & G_PARAM_CONSTRUCT_ONLY) == 0)
    {
      guint capacity = 0;

      g_object_get (self->policy, "capacity", &capacity, NULL);
      if (capacity == 0)
        g_object_set (self->policy, "capacity", self->n_slots, NULL);
    }
}

static void
kv_primary_tier_dispose (GObject *object)
{
  KvPrimaryTier *self = KV_PRIMARY_TIER (object);

  g_clear_object (&self->buffer);
  if (self->lru != NULL)
    {
      _kv_lru_policy_detach (self->lru);
      self->lru = NULL;
    }
  g_clear_object (&self->policy);

  G_OBJECT_CLASS (kv_primary_tier_parent_class)->dispose (object);
}

static void
kv_primary_tier_finalize (GObject *object)
{
  KvPrimaryTier *self = KV_PRIMARY_TIER (object);

  self->stamp_drop_func = NULL;
  primary_clear_entries (self);
  _kv_entry_table_clear (&self->entries);
  self->spare_entries = NULL;
  g_clear_pointer (&self->entry_blocks, g_ptr_array_unref);
  g_clear_pointer (&self->free_list, g_free);
  g_clear_pointer (&self->events, g_ptr_array_unref);

  G_OBJECT_CLASS (kv_primary_tier_parent_class)->finalize (object);
}

static void
kv_primary_tier_get_property (GObject    *object,
                              guint       prop_id,
                              GValue     *value,
                              GParamSpec *pspec)
{
  KvPrimaryTier *self = KV_PRIMARY_TIER (object);

  switch (prop_id)
    {
    case PROP_BUFFER:
      g_value_set_object (value, self->buffer);
      break;
    case PROP_POLICY:
      g_value_set_object (value, self->policy);
      break;
    case PROP_ENABLE_EVENTS:
      g_value_set_boolean (value, self->enable_events);
      break;
    case PROP_N_SLOTS:
      g_value_set_uint (value, self->n_slots);
      break;
    case PROP_SLOT_SIZE:
      g_value_set_uint64 (value, self->slot_size);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_primary_tier_set_property (GObject      *object,
                              guint         prop_id,
                              const GValue *value,
                              GParamSpec   *pspec)
{
  KvPrimaryTier *self = KV_PRIMARY_TIER (object);

  switch (prop_id)
    {
    case PROP_BUFFER:
      self->buffer = g_value_dup_object (value);
      break;
    case PROP_POLICY:
      self->policy = g_value_dup_object (value);
      break;
    case PROP_ENABLE_EVENTS:
      self->enable_events = g_value_get_boolean (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_primary_tier_class_init (KvPrimaryTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->constructed = kv_primary_tier_constructed;
  object_class->dispose = kv_primary_tier_dispose;
  object_class->finalize = kv_primary_tier_finalize;
  object_class->get_property = kv_primary_tier_get_property;
  object_class->set_property = kv_primary_tier_set_property;

  /**
   * KvPrimaryTier:buffer:
   *
   * The slot memory. Required.
   */
  properties[PROP_BUFFER] =
    g_param_spec_object ("buffer", NULL, NULL,
                         KV_TYPE_HOST_BUFFER,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvPrimaryTier:policy:
   *
   * The eviction policy; a new [class@Kv.LruPolicy] when not given. A policy
   * with a writable `capacity` property set to 0 (such as an
   * [class@Kv.ArcPolicy] from [func@Kv.CachePolicy.new_for_name]) gets the
   * slot count as its capacity.
   */
  properties[PROP_POLICY] =
    g_param_spec_object ("policy", NULL, NULL,
                         KV_TYPE_CACHE_POLICY,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvPrimaryTier:enable-events:
   *
   * Whether stores and evictions queue [struct@Kv.Event]s for
   * [method@Kv.PrimaryTier.take_events].
   */
  properties[PROP_ENABLE_EVENTS] =
    g_param_spec_boolean ("enable-events", NULL,
                          "Record the primary tier's stored and removed chunks as events",
                          FALSE,
                          G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                          G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  /**
   * KvPrimaryTier:n-slots:
   *
   * The number of slots: the buffer's [property@Kv.HostBuffer:n-slots].
   */
  properties[PROP_N_SLOTS] =
    g_param_spec_uint ("n-slots", NULL, NULL,
                       0, G_MAXUINT32, 0,
                       G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY |
                       G_PARAM_STATIC_STRINGS);

  /**
   * KvPrimaryTier:slot-size:
   *
   * The size of a slot (a chunk) in bytes: the buffer's
   * [property@Kv.HostBuffer:slot-size].
   */
  properties[PROP_SLOT_SIZE] =
    g_param_spec_uint64 ("slot-size", NULL, NULL,
                         0, G_MAXUINT64, 0,
                         G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY |
                       G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_primary_tier_init (KvPrimaryTier *self)
{
  _kv_entry_table_init (&self->entries);
  self->entry_blocks = g_ptr_array_new_with_free_func (g_free);
  self->events = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_event_unref);
}

/**
 * kv_primary_tier_new:
 * @buffer: the slot memory
 * @policy: (nullable): the eviction policy, or %NULL for LRU
 * @enable_events: whether to queue store and eviction events
 *
 * Creates a primary tier over the slots of @buffer. May be called from any
 * thread; the tier is then used on one owner thread.
 *
 * Returns: (transfer full): a new primary tier
 */
KvPrimaryTier *
kv_primary_tier_new (KvHostBuffer  *buffer,
                     KvCachePolicy *policy,
                     gboolean       enable_events)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (buffer), NULL);
  g_return_val_if_fail (policy == NULL || KV_IS_CACHE_POLICY (policy), NULL);

  return g_object_new (KV_TYPE_PRIMARY_TIER,
                       "buffer", buffer,
                       "policy", policy,
                       "enable-events", enable_events,
                       NULL);
}

/**
 * kv_primary_tier_get_buffer:
 * @self: a primary tier
 *
 * Gets the slot memory. May be called from any thread.
 *
 * Returns: (transfer none): the buffer
 */
KvHostBuffer *
kv_primary_tier_get_buffer (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), NULL);

  return self->buffer;
}

/**
 * kv_primary_tier_get_policy:
 * @self: a primary tier
 *
 * Gets the eviction policy. Owner thread only.
 *
 * Returns: (transfer none): the policy
 */
KvCachePolicy *
kv_primary_tier_get_policy (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), NULL);

  return self->policy;
}

/**
 * kv_primary_tier_get_n_slots:
 * @self: a primary tier
 *
 * Gets the number of slots. May be called from any thread.
 *
 * Returns: the value of [property@Kv.PrimaryTier:n-slots]
 */
guint
kv_primary_tier_get_n_slots (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);

  return self->n_slots;
}

/**
 * kv_primary_tier_get_slot_size:
 * @self: a primary tier
 *
 * Gets the size of a slot in bytes. May be called from any thread.
 *
 * Returns: the value of [property@Kv.PrimaryTier:slot-size]
 */
gsize
kv_primary_tier_get_slot_size (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);

  return self->slot_size;
}

/**
 * kv_primary_tier_get_slot_checksum:
 * @self: a primary tier
 * @slot: a slot index, below [property@Kv.PrimaryTier:n-slots]
 * @out_checksum: (out) (optional): the XXH3-64 (seed 0) of the slot's
 *   bytes
 *
 * Gets the checksum carried with the bytes of @slot: computed by the
 * device as it copied the chunk in (see [class@Kv.HostDevice]) or taken
 * from the record of a chunk a secondary tier loaded and verified. The
 * tier forgets it whenever it hands the slot to a new writer (a store or
 * a promotion) and when it frees the slot. The same as
 * [method@Kv.HostBuffer.get_slot_checksum] on the tier's buffer, which is
 * what secondary tiers, holding the buffer, call. Any thread, while the
 * slot is pinned or written by the caller.
 *
 * Returns: %TRUE when the checksum is known, %FALSE when it must be
 *   computed from the bytes
 */
gboolean
kv_primary_tier_get_slot_checksum (KvPrimaryTier *self,
                                   guint32        slot,
                                   guint64       *out_checksum)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), FALSE);
  g_return_val_if_fail (slot < self->n_slots, FALSE);

  return kv_host_buffer_get_slot_checksum (self->buffer, slot, out_checksum);
}

/**
 * kv_primary_tier_lookup:
 * @self: a primary tier
 * @key: a key
 *
 * Says whether the chunk of @key is stored. One hash lookup: no
 * allocation, no system call, no change of recency. Owner thread only.
 *
 * Returns: %KV_LOOKUP_RESULT_MISS when absent,
 *   %KV_LOOKUP_RESULT_HIT_PENDING while its slot is being written, else
 *   %KV_LOOKUP_RESULT_HIT
 */
KvLookupResult
kv_primary_tier_lookup (KvPrimaryTier *self,
                        const KvKey   *key)
{
  gpointer value;

  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), KV_LOOKUP_RESULT_MISS);
  g_return_val_if_fail (key != NULL, KV_LOOKUP_RESULT_MISS);
  OWNER_CHECK (self, KV_LOOKUP_RESULT_MISS);

  value = _kv_entry_table_lookup (&self->entries, key);
  if (value == NULL)
    return KV_LOOKUP_RESULT_MISS;
  if (((guintptr) value & KV_ENTRY_PENDING_TAG) != 0)
    return KV_LOOKUP_RESULT_HIT_PENDING;
  return KV_LOOKUP_RESULT_HIT;
}

KvLookupResult
_kv_primary_tier_lookup_stamp (KvPrimaryTier  *self,
                               const KvKey    *key,
                               guint64       **stamp)
{
  KvBucket *bucket = _kv_entry_table_find (&self->entries, key);

  *stamp = NULL;
  if (bucket == NULL)
    return KV_LOOKUP_RESULT_MISS;
  if (((guintptr) bucket->value & KV_ENTRY_PENDING_TAG) != 0)
    return KV_LOOKUP_RESULT_HIT_PENDING;
  *stamp = &bucket->stamp;
  return KV_LOOKUP_RESULT_HIT;
}

guint64 *
_kv_primary_tier_stamp_of (KvPrimaryTier *self,
                           const KvKey   *key)
{
  KvBucket *bucket = _kv_entry_table_find (&self->entries, key);

  return bucket != NULL ? &bucket->stamp : NULL;
}

void
_kv_primary_tier_set_stamp_drop_func (KvPrimaryTier          *self,
                                      KvPrimaryStampDropFunc  func,
                                      gpointer                user_data)
{
  g_return_if_fail (KV_IS_PRIMARY_TIER (self));

  self->stamp_drop_func = func;
  self->stamp_drop_data = user_data;
  /* stamps belong to whoever installed the function */
  for (guint i = 0; i <= self->entries.mask; i++)
    self->entries.buckets[i].stamp = 0;
}

static gboolean
primary_pin (KvPrimaryTier  *self,
             KvKey * const  *keys,
             guint           n_keys,
             guint32        *chunk_ids,
             GError        **error)
{
  KvEntry *stack_entries[KV_STACK_KEYS];
  g_autofree KvEntry **heap_entries = NULL;
  KvEntry **entries = stack_entries;

  if (n_keys > G_N_ELEMENTS (stack_entries))
    entries = heap_entries = g_new (KvEntry *, n_keys);

  /* Validate everything first so that a failure pins nothing; the entries
   * found are kept, so each key is looked up once. */
  for (guint i = 0; i < n_keys; i++)
    {
      KvEntry *entry = primary_get_entry (self, keys[i]);

      if (entry == NULL || entry->ref_cnt < 0)
        {
          g_autofree char *hex = kv_key_to_string (keys[i]);

          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND,
                       entry == NULL ? "Chunk %s is not in the primary tier"
                                     : "Chunk %s is still being written to the primary tier",
                       hex);
          return FALSE;
        }
      entries[i] = entry;
    }

  for (guint i = 0; i < n_keys; i++)
    {
      KvEntry *entry = entries[i];

      if (entry->ref_cnt == 0)
        {
          self->n_evictable--;
          policy_mark_non_evictable (self, entry);
        }
      entry->ref_cnt++;
      if (chunk_ids != NULL)
        chunk_ids[i] = entry->slot;
    }

  return TRUE;
}

/**
 * kv_primary_tier_prepare_load: (skip)
 * @self: a primary tier
 * @keys: (array length=n_keys): keys of ready chunks, to copy to the GPU
 * @n_keys: the length of @keys
 * @chunk_ids: (out caller-allocates) (array length=n_keys) (optional): room
 *   for @n_keys slot indices, filled with the slot of each key
 * @error: return location for an error
 *
 * Pins the chunks of @keys for a load: they cannot be evicted until
 * [method@Kv.PrimaryTier.complete_load]. Every key must be stored and
 * ready; otherwise nothing is pinned. Owner thread only.
 *
 * C only: @chunk_ids is a caller-allocated array whose length is an input,
 * which introspection cannot describe.
 *
 * Returns: %TRUE on success, %FALSE with @error set
 *   (%KV_TIER_ERROR_NOT_FOUND, naming the key) when a key is absent or still
 *   being written
 */
gboolean
kv_primary_tier_prepare_load (KvPrimaryTier  *self,
                              KvKey * const  *keys,
                              guint           n_keys,
                              guint32        *chunk_ids,
                              GError        **error)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), FALSE);
  g_return_val_if_fail (keys != NULL || n_keys == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  OWNER_CHECK (self, FALSE);

  return primary_pin (self, keys, n_keys, chunk_ids, error);
}

/**
 * kv_primary_tier_prepare_read: (skip)
 * @self: a primary tier
 * @keys: (array length=n_keys): keys of ready chunks, to copy to a
 *   secondary tier
 * @n_keys: the length of @keys
 * @chunk_ids: (out caller-allocates) (array length=n_keys) (optional): room
 *   for @n_keys slot indices, filled with the slot of each key
 * @error: return location for an error
 *
 * Pins the chunks of @keys for a cascade read by a secondary tier, exactly
 * as `kv_primary_tier_prepare_load()` does, and records no access:
 * copying a chunk to another tier does not make it recently used. Release
 * them with [method@Kv.PrimaryTier.complete_load]. Owner thread only. C
 * only, like `kv_primary_tier_prepare_load()`.
 *
 * Returns: %TRUE on success, %FALSE with @error set
 *   (%KV_TIER_ERROR_NOT_FOUND, naming the key) when a key is absent or still
 *   being written
 */
gboolean
kv_primary_tier_prepare_read (KvPrimaryTier  *self,
                              KvKey * const  *keys,
                              guint           n_keys,
                              guint32        *chunk_ids,
                              GError        **error)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), FALSE);
  g_return_val_if_fail (keys != NULL || n_keys == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  OWNER_CHECK (self, FALSE);

  return primary_pin (self, keys, n_keys, chunk_ids, error);
}

/**
 * kv_primary_tier_complete_load:
 * @self: a primary tier
 * @keys: (array length=n_keys): keys pinned by
 *   `kv_primary_tier_prepare_load()` or
 *   `kv_primary_tier_prepare_read()`
 * @n_keys: the length of @keys
 *
 * Unpins the chunks of @keys (loads and cascade reads alike). A chunk whose
 * last pin goes becomes evictable again as the most recently used. A key
 * that is absent or not pinned is a caller bug: it is reported with a
 * critical warning and skipped. Owner thread only.
 */
void
kv_primary_tier_complete_load (KvPrimaryTier *self,
                               KvKey * const *keys,
                               guint          n_keys)
{
  g_return_if_fail (KV_IS_PRIMARY_TIER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  OWNER_CHECK (self, );

  for (guint i = 0; i < n_keys; i++)
    {
      KvEntry *entry = primary_get_entry (self, keys[i]);

      if (entry == NULL || entry->ref_cnt <= 0)
        {
          g_autofree char *hex = kv_key_to_string (keys[i]);

          g_critical ("kv_primary_tier_complete_load: chunk %s is not pinned", hex);
          continue;
        }

      entry->ref_cnt--;
      if (entry->ref_cnt == 0)
        {
          self->n_evictable++;
          policy_mark_evictable (self, entry);
        }
    }
}

/**
 * kv_primary_tier_touch:
 * @self: a primary tier
 * @keys: (array length=n_keys): keys a request used, in request order
 * @n_keys: the length of @keys
 *
 * Marks @keys recently used in the policy; @keys[0] ends up the most recent.
 * Owner thread only.
 */
void
kv_primary_tier_touch (KvPrimaryTier *self,
                       KvKey * const *keys,
                       guint          n_keys)
{
  g_return_if_fail (KV_IS_PRIMARY_TIER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  OWNER_CHECK (self, );

  self->policy_iface->touch (self->policy, keys, n_keys);
}

/* Takes the new entries of a batch that cannot be stored back out of the
 * table: prepare_store changes nothing when it fails. */
static void
primary_unclaim (KvPrimaryTier *self,
                 KvEntry      **fresh,
                 guint          n_fresh)
{
  for (guint i = 0; i < n_fresh; i++)
    {
      _kv_entry_table_remove (&self->entries, fresh[i]->key);
      primary_release_entry (self, fresh[i]);
    }
}

/* kv_primary_tier_prepare_store() into caller-allocated arrays:
 * @to_store (borrowed keys, owned by the new entries) and @chunk_ids have
 * room for @n_keys. *@evicted_inout points to room for @n_keys + 1 evicted
 * keys; a policy other than the built-in LRU may replace it by an array
 * the caller frees (when it differs from the one passed). The evicted keys
 * are NULL-terminated and transfer full. */
gboolean
_kv_primary_tier_prepare_store_into (KvPrimaryTier  *self,
                                     KvKey * const  *keys,
                                     guint           n_keys,
                                     KvKey         **to_store,
                                     guint32        *chunk_ids,
                                     guint          *n_to_store,
                                     KvKey        ***evicted_inout,
                                     guint          *n_evicted,
                                     GError        **error)
{
  KvKey **evicted = *evicted_inout;
  KvEntry *stack_fresh[KV_STACK_KEYS];
  g_autofree KvEntry **heap_fresh = NULL;
  KvEntry **fresh = stack_fresh;
  gpointer stack_victims[KV_STACK_KEYS];
  g_autofree gpointer *heap_victims = NULL;
  guint n_fresh = 0;
  guint n_free;

  *n_to_store = 0;
  *n_evicted = 0;
  evicted[0] = NULL;

  if (n_keys > KV_STACK_KEYS)
    fresh = heap_fresh = g_new (KvEntry *, n_keys);

  /* Each absent key is claimed in the table at once, not ready and without
   * a slot yet: a key repeated in the batch then finds its first
   * occurrence, so deduplication costs nothing more than the presence
   * check. The policy hears about the new keys only once they fit. */
  if (self->lru != NULL)
    _kv_lru_policy_protect_begin (self->lru);
  for (guint i = 0; i < n_keys; i++)
    {
      KvEntry *entry;
      guint hash = kv_key_hash (keys[i]);
      KvBucket *empty = NULL;
      KvBucket *present = _kv_entry_table_probe (&self->entries, keys[i], hash, &empty);

      if (present != NULL)
        {
          /* A key of the batch the tier holds must not be evicted for
           * it; the keys claimed below have no policy node yet. */
          if (self->lru != NULL)
            {
              KvEntry *present_entry = entry_from_value (present->value);

              _kv_lru_policy_protect_node (self->lru, present_entry->lru_node, present_entry->key);
            }
          continue;
        }

      entry = primary_take_entry (self, keys[i]);
      if (G_UNLIKELY (_kv_entry_table_add_grows (&self->entries)))
        {
          _kv_entry_table_add (&self->entries, entry->key, (gpointer) ((guintptr) entry | KV_ENTRY_PENDING_TAG));
        }
      else
        {
          /* the probe found the bucket to claim: no second probe */
          *empty = (KvBucket) { hash, entry->key, (gpointer) ((guintptr) entry | KV_ENTRY_PENDING_TAG), 0 };
          self->entries.n_entries++;
        }
      fresh[n_fresh++] = entry;
    }

  if (n_fresh == 0)
    return TRUE;

  n_free = primary_n_free (self);
  if (n_fresh > n_free)
    {
      guint need = n_fresh - n_free;
      gpointer *victims = NULL;
      gboolean chosen;

      if (need > self->n_evictable)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE,
                       "Cannot store %u chunks in the primary tier: %u slots free, "
                       "%u more needed but only %u chunks are evictable",
                       n_fresh, n_free, need, self->n_evictable);
          primary_unclaim (self, fresh, n_fresh);
          return FALSE;
        }

      if (self->lru != NULL)
        {
          victims = stack_victims;
          if (need > G_N_ELEMENTS (stack_victims))
            victims = heap_victims = g_new (gpointer, need);
          chosen = _kv_lru_policy_evict_into (self->lru, need, evicted, victims);
        }
      else
        {
          KvKey **chosen_keys = self->policy_iface->evict (self->policy, need, keys, n_keys);

          chosen = chosen_keys != NULL;
          if (chosen)
            *evicted_inout = evicted = chosen_keys;
        }
      if (!chosen)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE,
                       "Cannot store %u chunks in the primary tier: %u slots free "
                       "and %u evictable chunks not being stored are needed",
                       n_fresh, n_free, need);
          primary_unclaim (self, fresh, n_fresh);
          return FALSE;
        }

      /* Remove the evicted chunks; keep only those in the list. */
      for (guint i = 0; evicted[i] != NULL; i++)
        {
          KvEntry *entry = victims != NULL ? victims[i] : NULL;

          /* The LRU hands back the entries it was given; a key the policy
           * got some other way is looked up. */
          if (entry == NULL || entry->key != evicted[i])
            entry = primary_get_entry (self, evicted[i]);
          if (entry == NULL || entry->ref_cnt != 0)
            {
              g_autofree char *hex = kv_key_to_string (evicted[i]);

              g_critical ("Cache policy %s evicted chunk %s, which is not an "
                          "evictable chunk of the primary tier",
                          G_OBJECT_TYPE_NAME (self->policy), hex);
              kv_key_unref (evicted[i]);
              continue;
            }
          /* The policy already forgot the key: its node is gone. */
          entry->lru_node = NULL;
          primary_remove_entry (self, entry);
          evicted[(*n_evicted)++] = evicted[i];
        }
      evicted[*n_evicted] = NULL;

      primary_queue_event (self, evicted, *n_evicted, TRUE);

      /* Only a misbehaving policy leaves too few slots. */
      if (primary_n_free (self) < n_fresh)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE,
                       "Cannot store %u chunks in the primary tier: the cache "
                       "policy freed too few slots", n_fresh);
          for (guint i = 0; i < *n_evicted; i++)
            kv_key_unref (evicted[i]);
          *n_evicted = 0;
          evicted[0] = NULL;
          primary_unclaim (self, fresh, n_fresh);
          return FALSE;
        }
    }

  for (guint i = 0; i < n_fresh; i++)
    {
      KvEntry *entry = fresh[i];

      entry->slot = primary_take_slot (self);
      self->n_write_pending++;
      policy_insert (self, entry, FALSE);
      to_store[i] = entry->key;
      chunk_ids[i] = entry->slot;
    }
  *n_to_store = n_fresh;
  return TRUE;
}

/**
 * kv_primary_tier_prepare_store:
 * @self: a primary tier
 * @keys: (array length=n_keys): keys of chunks to store
 * @n_keys: the length of @keys
 * @error: return location for an error
 *
 * Allocates slots for the chunks of @keys that are not stored yet. Keys
 * already present (ready or not) and repeated keys are left out. When too
 * few slots are free, just enough ready, unpinned chunks are evicted, never
 * one of @keys. The new chunks start not ready
 * ([method@Kv.PrimaryTier.lookup] answers %KV_LOOKUP_RESULT_HIT_PENDING)
 * until [method@Kv.PrimaryTier.complete_store].
 *
 * When the chunks cannot all fit, nothing changes and %NULL is returned.
 * Evictions queue one removal event if events are enabled. Owner thread
 * only.
 *
 * Returns: (transfer full): the keys to store with their slots and the
 *   evicted keys (all empty when every key is present already), or %NULL
 *   with @error set (%KV_TIER_ERROR_NO_SPACE)
 */
KvPrepareStoreResult *
kv_primary_tier_prepare_store (KvPrimaryTier  *self,
                               KvKey * const  *keys,
                               guint           n_keys,
                               GError        **error)
{
  KvKey **to_store, **buffer_evicted, **evicted;
  guint32 *chunk_ids;
  guint n_to_store, n_evicted;

  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), NULL);
  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  OWNER_CHECK (self, NULL);

  /* the result's own arrays, filled in place: the evicted keys' references
   * pass to it as they are */
  to_store = g_new (KvKey *, n_keys + 1);
  chunk_ids = g_new0 (guint32, MAX (n_keys, 1));
  evicted = buffer_evicted = g_new (KvKey *, n_keys + 1);
  if (_kv_primary_tier_prepare_store_into (self, keys, n_keys, to_store, chunk_ids, &n_to_store,
                                           &evicted, &n_evicted, error))
    {
      if (evicted != buffer_evicted)
        g_free (buffer_evicted);
      return _kv_prepare_store_result_new_take (to_store, chunk_ids, n_to_store,
                                                evicted, n_evicted);
    }

  for (guint i = 0; i < n_evicted; i++)
    kv_key_unref (evicted[i]);
  if (evicted != buffer_evicted)
    g_free (evicted);
  g_free (buffer_evicted);
  g_free (to_store);
  g_free (chunk_ids);
  return NULL;
}

/**
 * kv_primary_tier_complete_store:
 * @self: a primary tier
 * @keys: (array length=n_keys): keys given to
 *   [method@Kv.PrimaryTier.prepare_store]
 * @n_keys: the length of @keys
 * @success: whether the chunks' bytes were written
 *
 * Finishes a store. On success every key of @keys that is stored but not
 * ready becomes ready and evictable, and one store event lists them (if
 * events are enabled); on failure those keys are removed and their slots
 * freed. Ready keys and absent keys are left alone either way. Owner thread
 * only.
 */
void
kv_primary_tier_complete_store (KvPrimaryTier *self,
                                KvKey * const *keys,
                                guint          n_keys,
                                gboolean       success)
{
  g_autoptr(GPtrArray) stored = NULL;

  g_return_if_fail (KV_IS_PRIMARY_TIER (self));
  g_return_if_fail (keys != NULL || n_keys == 0);
  OWNER_CHECK (self, );

  if (success && self->enable_events)
    stored = g_ptr_array_sized_new (n_keys);

  for (guint i = 0; i < n_keys; i++)
    {
      KvBucket *bucket = _kv_entry_table_find (&self->entries, keys[i]);
      KvEntry *entry = bucket != NULL ? entry_from_value (bucket->value) : NULL;

      if (entry == NULL || entry->ref_cnt >= 0)
        continue;

      if (success)
        {
          entry->ref_cnt = 0;
          /* ready: the bucket's value loses its tag */
          bucket->value = entry;
          self->n_write_pending--;
          self->n_evictable++;
          policy_mark_evictable (self, entry);
          if (stored != NULL)
            g_ptr_array_add (stored, entry->key);
        }
      else
        {
          policy_remove (self, entry);
          primary_remove_entry (self, entry);
        }
    }

  if (stored != NULL)
    primary_queue_event (self, (KvKey * const *) stored->pdata, stored->len, FALSE);
}

gboolean
_kv_primary_tier_complete_store_pinned (KvPrimaryTier *self,
                                        KvKey * const *keys,
                                        guint          n_keys,
                                        guint          n_pins,
                                        guint32       *chunk_ids)
{
  KvBucket *stack_buckets[KV_STACK_KEYS];
  g_autofree KvBucket **heap_buckets = NULL;
  KvBucket **buckets = stack_buckets;
  g_autoptr(GPtrArray) stored = NULL;

  g_return_val_if_fail (n_pins > 0, FALSE);

  if (self->lru == NULL)
    return FALSE;
  if (n_keys > G_N_ELEMENTS (stack_buckets))
    buckets = heap_buckets = g_new (KvBucket *, n_keys);

  /* All or nothing: the long way handles a key that is not being written. */
  for (guint i = 0; i < n_keys; i++)
    {
      KvBucket *bucket = _kv_entry_table_find (&self->entries, keys[i]);

      if (bucket == NULL || ((guintptr) bucket->value & KV_ENTRY_PENDING_TAG) == 0)
        return FALSE;
      buckets[i] = bucket;
    }

  if (self->enable_events)
    stored = g_ptr_array_sized_new (n_keys);

  /* Nothing below changes the table: the buckets stay valid. */
  for (guint i = 0; i < n_keys; i++)
    {
      KvBucket *bucket = buckets[i];
      KvEntry *entry = entry_from_value (bucket->value);

      /* a repeated key is written once and pinned per occurrence, as
       * complete_store() and prepare_read() would */
      if (entry->ref_cnt < 0)
        {
          entry->ref_cnt = 0;
          bucket->value = entry;
          self->n_write_pending--;
          if (stored != NULL)
            g_ptr_array_add (stored, entry->key);
        }
      /* its LRU node was inserted not evictable and stays so */
      entry->ref_cnt += n_pins;
      chunk_ids[i] = entry->slot;
    }

  if (stored != NULL)
    primary_queue_event (self, (KvKey * const *) stored->pdata, stored->len, FALSE);
  return TRUE;
}

guint
_kv_primary_tier_drop_pending_keep_slots (KvPrimaryTier *self,
                                          KvKey * const *keys,
                                          guint          n_keys,
                                          guint32       *slots)
{
  guint n = 0;

  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);
  g_return_val_if_fail (keys != NULL || n_keys == 0, 0);

  for (guint i = 0; i < n_keys; i++)
    {
      KvEntry *entry = primary_get_entry (self, keys[i]);

      if (entry == NULL || entry->ref_cnt >= 0)
        continue;
      policy_remove (self, entry);
      self->n_write_pending--;
      /* Not on the free list: the slot stays allocated, to nobody. */
      slots[n++] = entry->slot;
      primary_unindex (self, entry->key);
      primary_release_entry (self, entry);
    }
  return n;
}

void
_kv_primary_tier_free_slots (KvPrimaryTier *self,
                             const guint32 *slots,
                             guint          n_slots)
{
  g_return_if_fail (KV_IS_PRIMARY_TIER (self));

  for (guint i = 0; i < n_slots; i++)
    {
      g_return_if_fail (slots[i] < self->n_bumped && self->n_free_list < self->n_slots);
      self->free_list[self->n_free_list++] = slots[i];
      self->slot_checksum_known[slots[i]] = FALSE;
    }
}

/**
 * kv_primary_tier_on_request_finished:
 * @self: a primary tier
 * @request: a request that will make no more calls
 *
 * Tells the tier that @request is finished. The built-in policies keep no
 * per-request state, so this does nothing today; it is where a
 * request-aware policy would forget the request. Owner thread only.
 */
void
kv_primary_tier_on_request_finished (KvPrimaryTier *self,
                                     KvRequest     *request)
{
  g_return_if_fail (KV_IS_PRIMARY_TIER (self));
  g_return_if_fail (KV_IS_REQUEST (request));
  OWNER_CHECK (self, );
}

/**
 * kv_primary_tier_take_events:
 * @self: a primary tier
 *
 * Takes the queued store and eviction events, oldest first. Owner thread
 * only.
 *
 * Returns: (array zero-terminated=1) (transfer full): the events; empty
 *   when there are none or events are disabled
 */
KvEvent **
kv_primary_tier_take_events (KvPrimaryTier *self)
{
  GPtrArray *events;

  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), NULL);
  OWNER_CHECK (self, NULL);

  events = g_steal_pointer (&self->events);
  self->events = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_event_unref);

  g_ptr_array_set_free_func (events, NULL);
  g_ptr_array_add (events, NULL);
  return (KvEvent **) g_ptr_array_free (events, FALSE);
}

/**
 * kv_primary_tier_reset:
 * @self: a primary tier
 *
 * Forgets every chunk, pinned or not, and every queued event; all slots
 * become free and fresh again. The caller must make sure no transfer still
 * uses a slot. Owner thread only.
 */
void
kv_primary_tier_reset (KvPrimaryTier *self)
{
  g_return_if_fail (KV_IS_PRIMARY_TIER (self));
  OWNER_CHECK (self, );

  self->policy_iface->clear (self->policy);
  primary_clear_entries (self);
  self->n_free_list = 0;
  self->n_bumped = 0;
  self->n_evictable = 0;
  self->n_write_pending = 0;
  g_ptr_array_set_size (self->events, 0);
}

/**
 * kv_primary_tier_get_ref_count:
 * @self: a primary tier
 * @key: a key
 * @out_ref_count: (out) (optional): the reference count: −1 while being
 *   written, 0 when evictable, n > 0 while pinned n times
 *
 * Gets the reference count of a stored chunk. Owner thread only.
 *
 * Returns: %TRUE if @key is stored
 */
gboolean
kv_primary_tier_get_ref_count (KvPrimaryTier *self,
                               const KvKey   *key,
                               gint          *out_ref_count)
{
  const KvEntry *entry;

  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  OWNER_CHECK (self, FALSE);

  entry = primary_get_entry (self, key);
  if (entry == NULL)
    return FALSE;
  if (out_ref_count != NULL)
    *out_ref_count = entry->ref_cnt;
  return TRUE;
}

/**
 * kv_primary_tier_get_chunk_id:
 * @self: a primary tier
 * @key: a key
 * @out_chunk_id: (out) (optional): the slot of @key
 *
 * Gets the slot of a stored chunk. Owner thread only.
 *
 * Returns: %TRUE if @key is stored
 */
gboolean
kv_primary_tier_get_chunk_id (KvPrimaryTier *self,
                              const KvKey   *key,
                              guint32       *out_chunk_id)
{
  const KvEntry *entry;

  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), FALSE);
  g_return_val_if_fail (key != NULL, FALSE);
  OWNER_CHECK (self, FALSE);

  entry = primary_get_entry (self, key);
  if (entry == NULL)
    return FALSE;
  if (out_chunk_id != NULL)
    *out_chunk_id = entry->slot;
  return TRUE;
}

/**
 * kv_primary_tier_get_n_free:
 * @self: a primary tier
 *
 * Counts the slots that hold no chunk. Owner thread only.
 *
 * Returns: the number of free slots
 */
guint
kv_primary_tier_get_n_free (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);
  OWNER_CHECK (self, 0);

  return primary_n_free (self);
}

/**
 * kv_primary_tier_get_n_allocated:
 * @self: a primary tier
 *
 * Counts the slots that hold a chunk, ready or being written. Owner thread
 * only.
 *
 * Returns: the number of allocated slots
 */
guint
kv_primary_tier_get_n_allocated (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);
  OWNER_CHECK (self, 0);

  return self->n_bumped - self->n_free_list;
}

/**
 * kv_primary_tier_get_n_stored:
 * @self: a primary tier
 *
 * Counts the stored chunks, ready or being written. Owner thread only.
 *
 * Returns: the number of chunks
 */
guint
kv_primary_tier_get_n_stored (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);
  OWNER_CHECK (self, 0);

  return self->entries.n_entries;
}

/**
 * kv_primary_tier_get_n_evictable:
 * @self: a primary tier
 *
 * Counts the ready, unpinned chunks (reference count 0). Owner thread only.
 *
 * Returns: the number of evictable chunks
 */
guint
kv_primary_tier_get_n_evictable (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);
  OWNER_CHECK (self, 0);

  return self->n_evictable;
}

/**
 * kv_primary_tier_get_n_write_pending:
 * @self: a primary tier
 *
 * Counts the chunks whose slots are being written (reference count −1).
 * Owner thread only.
 *
 * Returns: the number of chunks not ready yet
 */
guint
kv_primary_tier_get_n_write_pending (KvPrimaryTier *self)
{
  g_return_val_if_fail (KV_IS_PRIMARY_TIER (self), 0);
  OWNER_CHECK (self, 0);

  return self->n_write_pending;
}
