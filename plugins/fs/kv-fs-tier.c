/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-fs-tier.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv-fs-index.h"
#include "kv-fs-layout.h"
#include "kv-fs-op.h"
#include "kv-fs-slab.h"
#include "kv-fs-spares.h"

/* Temporary files of another process sharing the directory are left
 * alone unless they are this old. */
#define STALE_TEMP_AGE_US (G_GINT64_CONSTANT (3600) * G_USEC_PER_SEC)
#define KV_FS_DEFAULT_INFLIGHT_BYTES (G_GUINT64_CONSTANT (256) << 20)
#define KV_FS_DEFAULT_QUEUE_DEPTH 256

/* One job (or one breaker probe) in flight: the tier's own part of it,
 * the I/O ops. What the job reports (the state of each key, time, bytes,
 * the stored event) is its KvTierJob's; deadlines, the breaker and the
 * negative caches are the base class's: a job only learns that its
 * deadline passed through its KvTierJob's cancel func. Fields after the
 * request part are guarded by the tier lock. */
typedef struct
{
  KvFsTier       *tier;
  KvTierJob      *tier_job;     /* NULL for a probe */
  KvTransferJob  *job;          /* NULL for a probe */
  gboolean        is_load;
  gboolean        is_probe;
  guint64         probe_id;
  GCancellable   *probe_cancellable;  /* the probe's, from the base class */
  gulong          probe_handler;
  guint           n_keys;
  KvFsOp         *ops;          /* one per key (per root for a probe) */
  KvFsEntry     **entries;      /* loads: the pinned index entries; stores: the
                                 * evicted entry whose file the store takes over */
  guint8         *from_spare;   /* stores: TRUE where op->reuse_path is a spare file */
  gint            n_outstanding;  /* (atomic) ops not reported yet (see op_done()) */
  gboolean        probe_failed;   /* set as the last op settles the job's ops */
  gboolean        expired;      /* failed by its deadline; I/O may still run */
  guint           refs;         /* the ops (as one), the launcher, a running cancel func */
} FsJob;

/* A delete of an evicted chunk. */
typedef struct
{
  KvFsOp     op;
  KvFsTier  *tier;
  KvFsEntry *entry;
} Maintenance;

struct _KvFsTier
{
  KvSecondaryTier  parent_instance;

  /* construct-only properties */
  char            *root;
  char            *trust_group;   /* trust-group (nullable) */
  char            *namespace_;
  KvFsLayoutKind   layout_kind;
  KvFsDurability   durability;
  gboolean         verify;
  KvFsIoEngine     io_engine;
  KvFsODirect      o_direct_mode;
  gboolean         shared;
  guint64          max_size;
  gboolean         preallocate;
  KvFsEviction     eviction;
  guint            n_read_threads;
  guint            n_write_threads;
  guint64          inflight_bytes;
  guint            queue_depth;
  char            *vllm_identity;
  guint            vllm_rank;
  guint64          slab_size;
  gboolean         slab_map;

  /* set up by init(), then read-only */
  gboolean         initialized;
  KvFsLayout      *layout;
  gboolean        *o_direct;        /* per root */
  KvFsEngine      *engine;
  KvFsIndex       *index;           /* NULL when shared */
  KvAsyncLookup   *async_lookup;    /* shared, or while the index is rebuilt */
  KvHostBuffer    *primary;
  guint            n_slots;
  gsize            block_size;
  gsize            file_size;
  KvLocality       locality;

  /* jobs: guarded by lock */
  GMutex           lock;
  GCond            cond;
  guint            n_live_jobs;
  guint            n_expired_live;  /* of those, failed by their deadline */
  guint            n_deletes;       /* evictions whose unlink is in flight */
  gboolean         shut_down;

  /* with an index, when preallocate is on or a previous run left spare
   * files to delete; else NULL */
  KvFsSpares      *spares;

  /* layout=slab: the slab files and their slots; else NULL */
  KvFsSlab        *slab;

  /* warm restart */
  GThread         *scan_thread;
  gint             scan_cancel;     /* (atomic) */
  gint             index_ready;     /* (atomic) */

  KvCounterSet    *counters;        /* KvFsCounter order */
  guint64          reported[KV_FS_N_COUNTERS];  /* owner thread: taken by get_stats */
  gboolean         stats_taken;                 /* owner thread: get_stats ran */

  /* in this instance's temporary file names */
  guint64          temp_tag;
  char            *temp_marker;

  /* address used as request-state owner */
  guint8           chain_tag;
};

enum {
  PROP_0,
  PROP_ROOT,
  PROP_NAMESPACE,
  PROP_LAYOUT,
  PROP_DURABILITY,
  PROP_VERIFY,
  PROP_IO_ENGINE,
  PROP_O_DIRECT,
  PROP_SHARED,
  PROP_MAX_SIZE,
  PROP_PREALLOCATE,
  PROP_EVICTION,
  PROP_N_READ_THREADS,
  PROP_N_WRITE_THREADS,
  PROP_INFLIGHT_BYTES,
  PROP_QUEUE_DEPTH,
  PROP_PROBE_INTERVAL_MS,
  PROP_VLLM_IDENTITY,
  PROP_VLLM_RANK,
  PROP_ACTIVE_IO_ENGINE,
  PROP_TRUST_GROUP,
  PROP_SLAB_SIZE,
  PROP_SLAB_MAP,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/* kv_fs_tier_hold_scans(), kv_fs_tier_hold_slab_scans_read() */
static GMutex scan_hold_lock;
static GCond scan_hold_cond;
static gboolean scan_hold;
static gboolean scan_hold_read;

static void kv_fs_tier_initable_iface_init (GInitableIface *iface);
static void kv_fs_tier_configurable_iface_init (KvConfigurableInterface *iface);

/**
 * KvFsTier:
 *
 * The filesystem tier, registered as `fs`: one file per chunk under one
 * or more root directories.
 *
 * Stores write a temporary file (`O_EXCL`, mode 0600, directories 0700)
 * and rename it into place, so a crash never exposes part of a chunk; in
 * the kvtier layout every file starts with a 4096-byte header carrying
 * the namespace, the key and XXH3-64 checksums, checked on every load: a
 * file that fails is deleted, the load fails for that key and the key
 * answers MISS afterwards. `layout=vllm` reads and writes vLLM's
 * headerless layout so both share one directory. `layout=slab` keeps no
 * file per chunk: chunks go into the fixed-size slots of a few slab files
 * preallocated to max-size (or a block device), one write and one read
 * each, and the slots' own checksums and sequence numbers make them
 * crash-safe without a rename (see doc/on-disk-format.md).
 *
 * Bytes move straight between the files and the primary slots
 * (`O_DIRECT` where the filesystem allows it) on the tier's I/O engine:
 * io_uring with the primary registered as fixed buffers, GIO streams on
 * the engine's own main context, or a pool of threads. An in-memory
 * index answers lookups at once (rebuilt in the background when a tier
 * starts on an existing directory); `shared=true` checks existence off
 * the owner thread instead. `max-size` bounds the tier with LRU or
 * chain-aware eviction; once full, a store overwrites the file of the
 * chunk it evicts (renamed to a temporary name first) rather than
 * deleting it and creating another, which on ext4 doubles the store
 * rate. Every job has a deadline (5 s unless
 * [property@Kv.SecondaryTier:deadline-ms] says otherwise); five failures
 * in a row (timeouts and I/O errors, not missing or damaged chunks) open
 * the circuit breaker, which answers MISS without touching the disk until
 * a probe (a small O_DIRECT write and read in each root) succeeds. Both
 * are the base class's; this tier only aborts the I/O of a job whose
 * deadline passed, and never publishes such a store.
 *
 * Every vfunc runs on the owner thread and returns at once; completions
 * come from the engine's threads.
 */
G_DEFINE_FINAL_TYPE_WITH_CODE (KvFsTier, kv_fs_tier, KV_TYPE_SECONDARY_TIER,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_fs_tier_initable_iface_init)
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                      kv_fs_tier_configurable_iface_init))

static void
count (KvFsTier    *self,
       KvFsCounter  counter,
       guint64      n)
{
  kv_counter_set_add (self->counters, counter, n);
}

static void
push_event (KvFsTier      *self,
            KvKey * const *keys,
            guint          n_keys,
            gboolean       removed)
{
  g_autoptr(KvEvent) event = NULL;

  if (!kv_secondary_tier_get_enable_events (KV_SECONDARY_TIER (self)) || n_keys == 0)
    return;
  event = kv_event_new (keys, n_keys, KV_MEDIUM_STORAGE, removed, self->locality);
  kv_secondary_tier_push_event (KV_SECONDARY_TIER (self), event);
}

/* ---- evictions ---------------------------------------------------------- */

static void
maintenance_done (KvFsOp   *op,
                  gpointer  user_data)
{
  Maintenance *m = user_data;
  KvFsTier *self = m->tier;

  if (m->entry != NULL)
    kv_fs_index_delete_done (self->index, m->entry);
  kv_fs_op_clear (&m->op);
  g_free (m);
  g_mutex_lock (&self->lock);
  self->n_deletes--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* Counts @victims (entries now DELETING) as evicted and reports them
 * removed. Any thread. */
static void
report_evicted (KvFsTier   *self,
                KvFsEntry **victims,
                guint       n_victims)
{
  g_autoptr(GPtrArray) keys = NULL;

  if (n_victims == 0)
    return;
  keys = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  for (guint i = 0; i < n_victims; i++)
    g_ptr_array_add (keys, kv_key_ref (victims[i]->key));
  count (self, KV_FS_COUNTER_EVICTED_CHUNKS, n_victims);
  push_event (self, (KvKey * const *) keys->pdata, keys->len, TRUE);
}

/* The unlink of @path (on @root; owned by the op), for @entry (a
 * DELETING index entry, or NULL for a file the index does not hold). */
static KvFsOp *
delete_op_new (KvFsTier  *self,
               guint      root,
               char      *path,
               KvFsEntry *entry)
{
  Maintenance *m = g_new0 (Maintenance, 1);

  m->tier = self;
  m->entry = entry;
  kv_fs_op_init (&m->op, KV_FS_OP_DELETE, 0, root, path, NULL);
  m->op.done = maintenance_done;
  m->op.done_data = m;
  return &m->op;
}

/* Submits @n_ops delete ops, counted until they are done (see
 * wait_jobs()). Any thread. */
static void
submit_deletes (KvFsTier      *self,
                KvFsOp * const *ops,
                guint          n_ops)
{
  g_mutex_lock (&self->lock);
  self->n_deletes += n_ops;
  g_mutex_unlock (&self->lock);
  kv_fs_engine_submit (self->engine, ops, n_ops);
}

/* Unlinks the files of @victims (DELETING entries, already reported);
 * each entry leaves the index once its file is gone. Any thread. */
static void
unlink_victims (KvFsTier   *self,
                KvFsEntry **victims,
                guint       n_victims)
{
  g_autoptr(GPtrArray) ops = NULL;

  if (n_victims == 0)
    return;
  ops = g_ptr_array_new ();
  for (guint i = 0; i < n_victims; i++)
    g_ptr_array_add (ops, delete_op_new (self, victims[i]->root,
                                         kv_fs_layout_chunk_path (self->layout,
                                                                  victims[i]->key, NULL),
                                         victims[i]));
  submit_deletes (self, (KvFsOp * const *) ops->pdata, ops->len);
}

/* Deletes the files of @victims (entries now DELETING) and reports them
 * removed. Any thread. */
static void
delete_victims (KvFsTier  *self,
                GPtrArray *victims)
{
  report_evicted (self, (KvFsEntry **) victims->pdata, victims->len);
  unlink_victims (self, (KvFsEntry **) victims->pdata, victims->len);
}

/* Takes out of @victims one whose file a store of @size bytes on @root
 * can take over (same root: a rename cannot cross filesystems; same size:
 * the blocks are all there to overwrite), or returns NULL. */
static KvFsEntry *
take_reusable_victim (GPtrArray *victims,
                      guint      root,
                      guint64    size)
{
  for (guint v = 0; v < victims->len; v++)
    {
      KvFsEntry *entry = victims->pdata[v];

      if (entry->root == root && entry->size == size)
        return g_ptr_array_steal_index_fast (victims, v);
    }
  return NULL;
}

/* A store that was given an evicted chunk's file is over: the victim
 * leaves the index, and its file too if the store never took it over
 * (cancelled before it started, say). Any thread. */
static void
release_reused_victim (KvFsTier  *self,
                       KvFsOp    *op,
                       KvFsEntry *victim)
{
  if (op->reuse_path != NULL)
    {
      unlink_victims (self, &victim, 1);
      return;
    }
  if (op->reused)
    count (self, KV_FS_COUNTER_REUSED_FILES, 1);
  kv_fs_index_delete_done (self->index, victim);
}

/* ---- spare files (preallocate) ------------------------------------------ */

/* A store on @root has no spare there and the tier is full: rather than
 * evict a chunk while another root still holds spare files, gives up
 * one of those (a rename cannot move it across filesystems). Owner
 * thread, the only one that takes spares out of the pool. */
static void
drop_spare_elsewhere (KvFsTier *self,
                      guint     root)
{
  guint other;
  char *path;
  KvFsOp *op;

  if (!kv_fs_index_is_full (self->index, self->file_size))
    return;
  path = kv_fs_spares_pop_elsewhere (self->spares, root, &other);
  if (path == NULL)
    return;
  kv_fs_index_release_reserved (self->index, self->file_size);
  op = delete_op_new (self, other, path, NULL);
  submit_deletes (self, &op, 1);
}

/* A store that was given a spare file is over: counts the spare as used
 * if the store took it over, or puts it back (its bytes reserved again)
 * if the store never started. Any thread. */
static void
release_spare (KvFsTier *self,
               KvFsOp   *op)
{
  if (op->reuse_path == NULL)
    {
      if (op->reused)
        count (self, KV_FS_COUNTER_SPARE_FILES_USED, 1);
      return;
    }
  if (kv_fs_index_reserve (self->index, self->file_size))
    kv_fs_spares_push (self->spares, op->root, g_steal_pointer (&op->reuse_path));
  else
    (void) kv_fs_layout_unlink (self->layout, op->root, op->reuse_path);
}

/* Bytes left the index without a store taking their place: see
 * kv_fs_spares_want(). Any thread. */
static void
want_spares (KvFsTier *self)
{
  if (self->spares != NULL)
    kv_fs_spares_want (self->spares);
}

static void
spare_created (gpointer user_data)
{
  count (user_data, KV_FS_COUNTER_SPARE_FILES_CREATED, 1);
}

/* ---- job completion ----------------------------------------------------- */

/* Lock not held. */
static void
fs_job_free (FsJob *fj)
{
  KvFsTier *self = fj->tier;
  gboolean expired = fj->expired;

  for (guint i = 0; i < fj->n_keys; i++)
    kv_fs_op_clear (&fj->ops[i]);
  g_free (fj->ops);
  g_free (fj->entries);
  g_free (fj->from_spare);
  g_clear_object (&fj->tier_job);
  g_clear_object (&fj->probe_cancellable);
  g_clear_pointer (&fj->job, kv_transfer_job_unref);
  g_free (fj);

  /* drain_jobs() waits for this: no op of the job touches a slot now */
  g_mutex_lock (&self->lock);
  self->n_live_jobs--;
  if (expired)
    self->n_expired_live--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* Drops one of @fj's references. Lock not held. */
static void
fs_job_unref (FsJob *fj)
{
  KvFsTier *self = fj->tier;
  gboolean last;

  g_mutex_lock (&self->lock);
  g_assert (fj->refs > 0);
  last = --fj->refs == 0;
  g_mutex_unlock (&self->lock);
  if (last)
    fs_job_free (fj);
}

/* The last op of @fj is done: report it (the probe to the base class, the
 * job through its KvTierJob) and drop the ops' reference. Lock not held:
 * the report waits for a cancel func that takes it. */
static void
fs_job_finish (FsJob *fj)
{
  if (fj->is_probe)
    {
      gulong handler;

      kv_secondary_tier_complete_probe (KV_SECONDARY_TIER (fj->tier), fj->probe_id,
                                        !fj->probe_failed);
      g_mutex_lock (&fj->tier->lock);
      handler = fj->probe_handler;
      fj->probe_handler = 0;
      g_mutex_unlock (&fj->tier->lock);
      /* not g_cancellable_disconnect(), which waits for a running handler
       * (this may be it); the handler's reference goes with it */
      if (handler != 0)
        g_signal_handler_disconnect (fj->probe_cancellable, handler);
    }
  else
    kv_tier_job_report (fj->tier_job);
  fs_job_unref (fj);
}

/* How an op ended, for its key's mark and for the tier's state. */
typedef struct
{
  gboolean          landed;
  gboolean          skipped;   /* a store of a key the tier holds already */
  gboolean          missing;   /* a load of a chunk no longer there */
  gboolean          removed;   /* a load whose chunk the tier lets go */
  KvKeyFailureFlags failure;   /* neither landed, skipped nor missing */
} OpOutcome;

static OpOutcome
op_outcome (const KvFsOp *op)
{
  OpOutcome o = { FALSE, FALSE, FALSE, FALSE, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT };

  switch (op->kind)
    {
    case KV_FS_OP_STORE:
      o.landed = op->status == KV_FS_OP_STATUS_OK;
      o.skipped = op->status == KV_FS_OP_STATUS_EXISTS;
      /* the device, not the data: counts against the breaker */
      if (op->status == KV_FS_OP_STATUS_IO_ERROR && op->error != ENOSPC)
        o.failure = KV_KEY_FAILURE_FLAGS_NONE;
      break;

    case KV_FS_OP_LOAD:
      switch (op->status)
        {
        case KV_FS_OP_STATUS_OK:
          o.landed = TRUE;
          break;
        case KV_FS_OP_STATUS_CORRUPT:
          o.removed = TRUE;
          if (op->check == KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM ||
              op->check == KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM ||
              op->check == KV_CHUNK_CHECK_BAD_FILE_CHECKSUM)
            o.failure = KV_KEY_FAILURE_FLAGS_CHECKSUM;
          break;
        case KV_FS_OP_STATUS_NOT_FOUND:
          o.removed = TRUE;
          o.missing = TRUE;
          break;
        case KV_FS_OP_STATUS_FOREIGN:
          /* another user's file: a miss from now on, left in place */
          o.removed = TRUE;
          break;
        case KV_FS_OP_STATUS_IO_ERROR:
          /* Transient (EIO, EACCES, ELOOP...): the file may be fine. */
          if (op->error != ELOOP && op->error != EACCES && op->error != EPERM)
            o.failure = KV_KEY_FAILURE_FLAGS_NONE;
          break;
        default:
          break;
        }
      break;

    case KV_FS_OP_PROBE:
      o.landed = op->status == KV_FS_OP_STATUS_OK;
      break;

    case KV_FS_OP_DELETE:
      g_assert_not_reached ();
    }
  return o;
}

/* Marks @op's key in its job as soon as the op is over, so that a job
 * failed by its deadline meanwhile still counts what landed (the
 * partial-load rule). Any engine thread. */
static void
mark_op (FsJob           *fj,
         KvFsOp          *op,
         const OpOutcome *o)
{
  KvFsTier *self = fj->tier;
  guint i = op - fj->ops;

  if (fj->tier_job == NULL)
    return;
  /* verified against its header: other tiers storing the promoted
   * chunk need not read it again (before the key is marked, while the
   * slot is still this load's) */
  if (o->landed && op->kind == KV_FS_OP_LOAD && op->has_payload_checksum)
    kv_host_buffer_set_slot_checksum (self->primary, op->slot, op->payload_checksum);
  if (o->landed)
    kv_tier_job_mark_landed (fj->tier_job, i);
  else if (o->skipped)
    kv_tier_job_mark_skipped (fj->tier_job, i);
  else if (o->missing)
    kv_tier_job_mark_missing (fj->tier_job, i);
  else
    {
      g_autofree char *where = self->slab != NULL ? kv_fs_slab_describe_op (self->slab, op)
                                                  : g_strdup (op->path);
      g_autoptr(GError) error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                             "%s %s: %s%s%s",
                                             op->kind == KV_FS_OP_STORE ? "store" : "load",
                                             where,
                                             kv_fs_op_status_to_string (op->status),
                                             op->error != 0 ? ": " : "",
                                             op->error != 0 ? g_strerror (op->error) : "");

      kv_tier_job_mark_failed (fj->tier_job, i, o->failure, error);
    }
}

/* What @op's outcome means for the tier: counters, slab slot, index
 * entry, events. Run for every op of a job by the thread that reports
 * its last op (see op_done()). */
static void
settle_op (FsJob  *fj,
           KvFsOp *op)
{
  KvFsTier *self = fj->tier;
  guint i = op - fj->ops;
  OpOutcome o = op_outcome (op);

  switch (op->kind)
    {
    case KV_FS_OP_STORE:
      if (o.landed)
        {
          count (self, KV_FS_COUNTER_STORED_CHUNKS, 1);
          count (self, KV_FS_COUNTER_BYTES_WRITTEN, op->payload_len);
        }
      else if (o.skipped)
        count (self, KV_FS_COUNTER_SKIPPED_CHUNKS, 1);
      else
        {
          count (self, KV_FS_COUNTER_STORE_FAILURES, 1);
          if (op->status == KV_FS_OP_STATUS_IO_ERROR && op->error == ENOSPC)
            count (self, KV_FS_COUNTER_NO_SPACE, 1);
          else if (op->status == KV_FS_OP_STATUS_IO_ERROR)
            count (self, KV_FS_COUNTER_IO_ERRORS, 1);
        }
      if (self->slab != NULL)
        kv_fs_slab_store_done (self->slab, op, o.landed);
      if (self->index != NULL)
        kv_fs_index_end_store (self->index, op->key, o.landed);
      if (fj->entries[i] != NULL)
        {
          release_reused_victim (self, op, fj->entries[i]);
          fj->entries[i] = NULL;
        }
      else if (fj->from_spare[i])
        {
          release_spare (self, op);
          fj->from_spare[i] = FALSE;
        }
      /* A full disk: make room so that later stores can succeed. */
      if (op->status == KV_FS_OP_STATUS_IO_ERROR && op->error == ENOSPC && self->index != NULL &&
          self->slab == NULL)
        {
          g_autoptr(GPtrArray) victims = g_ptr_array_new ();

          kv_fs_index_evict_bytes (self->index, 2 * self->file_size, victims);
          delete_victims (self, victims);
        }
      /* A failed store gave back the bytes it held (and those of a
       * victim). Not after ENOSPC: the disk is smaller than max-size,
       * and a spare written now would take the space the next store
       * needs. */
      if (!o.landed && !o.skipped &&
          !(op->status == KV_FS_OP_STATUS_IO_ERROR && op->error == ENOSPC))
        want_spares (self);
      break;

    case KV_FS_OP_LOAD:
      switch (op->status)
        {
        case KV_FS_OP_STATUS_OK:
          count (self, KV_FS_COUNTER_LOADED_CHUNKS, 1);
          count (self, KV_FS_COUNTER_BYTES_READ, op->payload_len);
          break;
        case KV_FS_OP_STATUS_CORRUPT:
          count (self, KV_FS_COUNTER_CORRUPT_CHUNKS, 1);
          if (o.failure == KV_KEY_FAILURE_FLAGS_CHECKSUM)
            count (self, KV_FS_COUNTER_CHECKSUM_FAILURES, 1);
          if (self->slab != NULL)
            {
              g_autofree char *where = kv_fs_slab_describe_op (self->slab, op);

              g_message ("fs tier: freed the slot of a corrupt chunk at %s (%s)", where,
                         kv_chunk_check_to_string (op->check));
            }
          else
            g_message ("fs tier: deleted corrupt chunk file %s (%s)", op->path,
                       kv_chunk_check_to_string (op->check));
          break;
        case KV_FS_OP_STATUS_NOT_FOUND:
          count (self, KV_FS_COUNTER_MISSING_CHUNKS, 1);
          break;
        case KV_FS_OP_STATUS_FOREIGN:
          count (self, KV_FS_COUNTER_FOREIGN_FILES, 1);
          g_message ("fs tier: did not load %s: not a file of the tier's user", op->path);
          break;
        case KV_FS_OP_STATUS_IO_ERROR:
          count (self, KV_FS_COUNTER_IO_ERRORS, 1);
          break;
        default:
          break;
        }
      if (!o.landed)
        count (self, KV_FS_COUNTER_LOAD_FAILURES, 1);
      /* before the index lets the entry go: its slot may be reused then */
      if (self->slab != NULL)
        kv_fs_slab_unpin (self->slab, op, o.landed, o.removed);
      if (fj->entries[i] != NULL)
        {
          kv_fs_index_unpin (self->index, fj->entries[i], o.removed);
          fj->entries[i] = NULL;
        }
      else if (o.removed && self->index != NULL)
        kv_fs_index_remove (self->index, op->key);
      if (o.removed)
        {
          push_event (self, &op->key, 1, TRUE);
          want_spares (self);
        }
      break;

    case KV_FS_OP_PROBE:
      if (self->slab != NULL)
        kv_fs_slab_probe_done (self->slab, op);
      if (!o.landed)
        fj->probe_failed = TRUE;
      break;

    case KV_FS_OP_DELETE:
      g_assert_not_reached ();
    }
}

/* An op of @fj is over: its key is marked at once (mark_op()); the
 * job's last op settles the tier's state for every op of the job, on
 * the thread that reports it, then reports the job. Two engine threads
 * settling ops of one job each would contend on the slab's and the
 * index's locks for every chunk. (An op's slot and index pins are held
 * until then.) */
static void
op_done (KvFsOp   *op,
         gpointer  user_data)
{
  FsJob *fj = user_data;
  OpOutcome outcome = op_outcome (op);
  gint64 io_start = 0, io_end = 0;

  mark_op (fj, op, &outcome);
  /* a full barrier: the last op's reporter sees every op's outcome */
  g_assert (g_atomic_int_get (&fj->n_outstanding) > 0);
  if (!g_atomic_int_dec_and_test (&fj->n_outstanding))
    return;

  for (guint i = 0; i < fj->n_keys; i++)
    {
      KvFsOp *settled = &fj->ops[i];

      /* the ops launched (launch_ops()) */
      if (!kv_fs_op_is_set_up (settled))
        continue;
      settle_op (fj, settled);
      if (settled->start_us > 0 && settled->end_us >= settled->start_us)
        {
          io_start = io_start == 0 ? settled->start_us : MIN (io_start, settled->start_us);
          io_end = MAX (io_end, settled->end_us);
        }
    }
  if (fj->tier_job != NULL && io_start > 0)
    kv_tier_job_record_io (fj->tier_job, io_start, io_end);
  fs_job_finish (fj);
}

/* ---- deadlines, probes --------------------------------------------------- */

/* The base class failed the job at its deadline (or shut down without its
 * report), on the watchdog's thread or the owner's: abort its I/O. A store
 * still writing must not publish (its slots may hold other bytes now);
 * queued ops are cancelled, and one already in the kernel reports when it
 * returns, late, which the base class drops. KvTierJob runs this once,
 * never after the report (which waits for it). */
static void
job_cancelled (KvTierJob *tier_job,
               gpointer   user_data)
{
  FsJob *fj = user_data;
  KvFsTier *self = fj->tier;
  g_autofree KvFsOp **ops = NULL;
  guint n = 0;

  /* Held while the engine cancels: a cancelled op may report the job and
   * drop the ops' reference on this thread. */
  g_mutex_lock (&self->lock);
  fj->refs++;
  if (!fj->expired)
    {
      /* drain_jobs() no longer waits for it (see kv_fs_tier_drain_jobs) */
      fj->expired = TRUE;
      self->n_expired_live++;
      g_cond_broadcast (&self->cond);
    }
  g_mutex_unlock (&self->lock);

  ops = g_new (KvFsOp *, MAX (fj->n_keys, 1));
  for (guint k = 0; k < fj->n_keys; k++)
    {
      g_atomic_int_set (&fj->ops[k].aborted, TRUE);
      if (kv_fs_op_is_set_up (&fj->ops[k]))
        ops[n++] = &fj->ops[k];
    }
  kv_fs_engine_cancel (self->engine, ops, n);

  fs_job_unref (fj);
}

/* The base class failed the probe at its deadline: withdraw its queued
 * ops. The handler holds a reference on @fj, dropped when it is
 * disconnected. */
static void
probe_cancelled (GCancellable *cancellable,
                 gpointer      user_data)
{
  FsJob *fj = user_data;
  KvFsOp *ops[64];
  guint n = 0;

  for (guint k = 0; k < fj->n_keys && n < G_N_ELEMENTS (ops); k++)
    ops[n++] = &fj->ops[k];
  kv_fs_engine_cancel (fj->tier->engine, ops, n);
}

/* Submits @ops of @fj, whose ops' reference is taken, then links the
 * job's cancellation (at once if its deadline passed meanwhile). */
static void
start_ops (KvFsTier  *self,
           FsJob     *fj,
           KvFsOp   **ops,
           guint      n)
{
  /* the launcher's reference: the ops may all report before this returns */
  g_mutex_lock (&self->lock);
  fj->refs++;
  g_mutex_unlock (&self->lock);

  kv_fs_engine_submit (self->engine, ops, n);
  /* After the submit: cancelling unstarted ops would not withdraw them. */
  if (fj->tier_job != NULL)
    kv_tier_job_set_cancel_func (fj->tier_job, job_cancelled, fj, NULL);
  else
    {
      gulong handler;
      gboolean kept = FALSE;

      /* the handler's reference (none if it ran at once, being cancelled) */
      g_mutex_lock (&self->lock);
      fj->refs++;
      g_mutex_unlock (&self->lock);
      handler = g_cancellable_connect (fj->probe_cancellable, G_CALLBACK (probe_cancelled), fj,
                                       (GDestroyNotify) fs_job_unref);
      g_mutex_lock (&self->lock);
      /* a probe reported already disconnects nothing: do it here (its
       * report takes the lock after its last op is counted out) */
      if (g_atomic_int_get (&fj->n_outstanding) > 0)
        {
          fj->probe_handler = handler;
          kept = TRUE;
        }
      g_mutex_unlock (&self->lock);
      if (handler != 0 && !kept)
        g_signal_handler_disconnect (fj->probe_cancellable, handler);
    }

  fs_job_unref (fj);
}

static gboolean
kv_fs_tier_probe (KvSecondaryTier  *tier,
                  guint64           probe_id,
                  GCancellable     *cancellable,
                  GError          **error)
{
  KvFsTier *self = KV_FS_TIER (tier);
  FsJob *fj;
  guint n = kv_fs_layout_get_n_roots (self->layout);
  g_autofree KvFsOp **ops = NULL;

  fj = g_new0 (FsJob, 1);
  fj->tier = self;
  fj->is_probe = TRUE;
  fj->probe_id = probe_id;
  fj->probe_cancellable = g_object_ref (cancellable);
  fj->n_keys = n;
  fj->ops = g_new0 (KvFsOp, n);
  fj->entries = g_new0 (KvFsEntry *, n);
  g_atomic_int_set (&fj->n_outstanding, n);
  ops = g_new (KvFsOp *, n);
  for (guint r = 0; r < n; r++)
    {
      KvFsOp *op = &fj->ops[r];

      kv_fs_op_init (op, KV_FS_OP_PROBE, self->o_direct[r] ? KV_FS_OP_FLAG_O_DIRECT : 0, r,
                     g_build_filename (kv_fs_layout_get_chunk_dir (self->layout, r),
                                       ".kvtier-probe", NULL), NULL);
      /* a block device has no directory: its slab header is read */
      if (kv_fs_layout_root_is_device (self->layout, r))
        kv_fs_slab_init_probe (self->slab, op, r);
      op->temp_tag = self->temp_tag;
      op->done = op_done;
      op->done_data = fj;
      ops[r] = op;
    }

  g_mutex_lock (&self->lock);
  self->n_live_jobs++;
  fj->refs = 1;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  start_ops (self, fj, ops, n);
  return TRUE;
}

/* ---- submission --------------------------------------------------------- */

static FsJob *
fs_job_new (KvFsTier      *self,
            KvTransferJob *job,
            gboolean       is_load)
{
  FsJob *fj = g_new0 (FsJob, 1);
  guint n = kv_transfer_job_get_n_keys (job);

  fj->tier = self;
  fj->tier_job = kv_tier_job_new (KV_SECONDARY_TIER (self), job);
  fj->job = kv_transfer_job_ref (job);
  fj->is_load = is_load;
  fj->n_keys = n;
  fj->ops = g_new0 (KvFsOp, MAX (n, 1));
  fj->entries = g_new0 (KvFsEntry *, MAX (n, 1));
  if (!is_load)
    fj->from_spare = g_new0 (guint8, MAX (n, 1));
  return fj;
}

/* Key @i of @fj fails before any I/O (a bad slot, a key the layout
 * cannot name, an index that refuses it): the data's failure. */
static void
fail_key (FsJob      *fj,
          guint       i,
          const char *why)
{
  g_autoptr(GError) error = g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                                         "%s job %" G_GUINT64_FORMAT ", key %u: %s",
                                         fj->is_load ? "load" : "store",
                                         kv_transfer_job_get_id (fj->job), i, why);

  kv_tier_job_mark_failed (fj->tier_job, i, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT, error);
}

/* The ops of @fj that were set up, in key order;
 * returns how many. */
static guint
collect_ops (FsJob   *fj,
             KvFsOp **ops)
{
  guint n = 0;

  for (guint i = 0; i < fj->n_keys; i++)
    if (kv_fs_op_is_set_up (&fj->ops[i]))
      ops[n++] = &fj->ops[i];
  return n;
}

/* Starts the ops of @fj that were set up by submitting @ops (@n_submit
 * of them: all, or fewer where one carries others, see
 * kv_fs_slab_merge_loads()); a job with none is reported at once. */
static void
launch_ops (KvFsTier  *self,
            FsJob     *fj,
            KvFsOp   **ops,
            guint      n_submit)
{
  guint n = 0;

  for (guint i = 0; i < fj->n_keys; i++)
    if (kv_fs_op_is_set_up (&fj->ops[i]))
      n++;

  g_mutex_lock (&self->lock);
  g_atomic_int_set (&fj->n_outstanding, n);
  fj->refs = 1;
  self->n_live_jobs++;
  g_mutex_unlock (&self->lock);

  if (n == 0)
    {
      fs_job_finish (fj);
      return;
    }
  start_ops (self, fj, ops, n_submit);
}

static void
launch (KvFsTier *self,
        FsJob    *fj)
{
  g_autofree KvFsOp **ops = g_new (KvFsOp *, MAX (fj->n_keys, 1));

  launch_ops (self, fj, ops, collect_ops (fj, ops));
}

/* ---- layout=slab -------------------------------------------------------- */

/* A slot for a store of @key (whose index entry is STORING): a free one,
 * else, while a restart scan runs, that of the oldest chunk it has read,
 * else that of the chunk evicted for it (by the index's order, never one
 * being read). Owner thread. */
static gboolean
slab_take_slot (KvFsTier *self,
                guint32  *out_slot)
{
  g_autoptr(GPtrArray) victims = NULL;
  gboolean found;

  if (kv_fs_slab_alloc (self->slab, NULL, out_slot))
    return TRUE;
  /* A warm restart of a full slab: the slots not read yet are busy, and
   * the index holds none of their keys, only chunks stored since (newer
   * than any of them). The oldest chunk the scan has read gives its
   * slot, as an eviction would, rather than the store failing until the
   * whole scan is over. */
  if (kv_fs_slab_take_scanned (self->slab, out_slot))
    {
      count (self, KV_FS_COUNTER_EVICTED_CHUNKS, 1);
      return TRUE;
    }
  victims = g_ptr_array_new ();
  kv_fs_index_evict_bytes (self->index, self->file_size, victims);
  found = FALSE;
  for (guint v = 0; v < victims->len; v++)
    {
      KvFsEntry *victim = victims->pdata[v];
      guint32 slot;

      /* the first victim's slot is the store's; any other is freed */
      if (kv_fs_slab_alloc (self->slab, victim->key, &slot))
        {
          if (!found)
            {
              *out_slot = slot;
              found = TRUE;
            }
          else
            kv_fs_slab_release (self->slab, slot);
        }
    }
  /* nothing on disk to delete: the slot is the store's now */
  report_evicted (self, (KvFsEntry **) victims->pdata, victims->len);
  for (guint v = 0; v < victims->len; v++)
    kv_fs_index_delete_done (self->index, victims->pdata[v]);
  return found;
}

static gboolean
slab_submit_store (KvFsTier      *self,
                   KvTransferJob *job)
{
  FsJob *fj = fs_job_new (self, job, FALSE);
  KvRequest *request = kv_transfer_job_get_request (job);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();
  KvKey *parent = NULL;

  if (request != NULL)
    parent = kv_request_get_state (request, &self->chain_tag);

  for (guint i = 0; i < fj->n_keys; i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint32 chunk = kv_transfer_job_get_chunk_id (job, i);
      KvFsOp *op = &fj->ops[i];
      KvFsOpFlags flags = 0;
      guint32 slot;
      KvFsBeginStore begin = KV_FS_BEGIN_STORE_BUSY;

      /* a slot the restart scan took on its header's word is written
       * again rather than trusted (see kv_fs_slab_take_unchecked()) */
      if (chunk < self->n_slots && kv_fs_layout_key_supported (self->layout, key) &&
          kv_fs_slab_take_unchecked (self->slab, key))
        kv_fs_index_remove (self->index, key);
      if (chunk < self->n_slots && kv_fs_layout_key_supported (self->layout, key))
        begin = kv_fs_index_begin_store (self->index, key, parent, 0, self->file_size, FALSE,
                                         victims);
      parent = key;
      if (begin == KV_FS_BEGIN_STORE_EXISTS)
        {
          kv_tier_job_mark_skipped (fj->tier_job, i);
          count (self, KV_FS_COUNTER_SKIPPED_CHUNKS, 1);
          continue;
        }
      if (begin == KV_FS_BEGIN_STORE_NEW && !slab_take_slot (self, &slot))
        {
          /* every slot is being read or written, or not scanned yet */
          kv_fs_index_end_store (self->index, key, FALSE);
          begin = KV_FS_BEGIN_STORE_NO_SPACE;
        }
      if (begin != KV_FS_BEGIN_STORE_NEW)
        {
          fail_key (fj, i, "no slab slot to write it to");
          count (self, KV_FS_COUNTER_STORE_FAILURES, 1);
          continue;
        }

      /* no name to publish: data and full both mean fdatasync() of the
       * slab file after the write */
      if (self->durability >= KV_FS_DURABILITY_DATA)
        flags |= KV_FS_OP_FLAG_DATASYNC;
      kv_fs_op_init (op, KV_FS_OP_STORE, flags, 0, NULL, kv_key_ref (key));
      op->payload = kv_host_buffer_peek_slot (self->primary, chunk);
      op->payload_len = self->block_size;
      op->slot = chunk;
      /* computed once, as the chunk came into the primary */
      op->has_payload_checksum = kv_host_buffer_get_slot_checksum (self->primary, chunk,
                                                                   &op->payload_checksum);
      op->namespace_digest = kv_fs_layout_get_namespace_digest (self->layout);
      op->done = op_done;
      op->done_data = fj;
      kv_fs_slab_init_op (self->slab, op, slot);
    }
  /* max-size is the slabs' and the index unbounded: it evicts nothing */
  g_assert (victims->len == 0);

  if (request != NULL && fj->n_keys > 0)
    kv_request_set_state (request, &self->chain_tag,
                          kv_key_ref (kv_transfer_job_get_key (job, fj->n_keys - 1)),
                          (GDestroyNotify) kv_key_unref);
  launch (self, fj);
  return TRUE;
}

static gboolean
slab_submit_load (KvFsTier      *self,
                  KvTransferJob *job)
{
  FsJob *fj = fs_job_new (self, job, TRUE);
  g_autofree KvFsOp **ops = NULL;

  for (guint i = 0; i < fj->n_keys; i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint32 chunk = kv_transfer_job_get_chunk_id (job, i);
      KvFsOp *op = &fj->ops[i];
      guint32 slot;

      if (chunk < self->n_slots && kv_fs_layout_key_supported (self->layout, key))
        fj->entries[i] = kv_fs_index_pin (self->index, key);
      if (fj->entries[i] != NULL && !kv_fs_slab_pin (self->slab, key, &slot))
        {
          kv_fs_index_unpin (self->index, fj->entries[i], FALSE);
          fj->entries[i] = NULL;
        }
      if (fj->entries[i] == NULL)
        {
          /* not held (evicted since the lookup, or not scanned yet) */
          kv_tier_job_mark_missing (fj->tier_job, i);
          count (self, KV_FS_COUNTER_LOAD_FAILURES, 1);
          continue;
        }
      /* A torn slot keeps a valid header (the old chunk's or the new
       * one's): only the payload checksum tells, so it is always checked. */
      kv_fs_op_init (op, KV_FS_OP_LOAD, KV_FS_OP_FLAG_VERIFY, 0, NULL, kv_key_ref (key));
      op->payload = kv_host_buffer_peek_slot (self->primary, chunk);
      op->payload_len = self->block_size;
      op->slot = chunk;
      op->namespace_digest = kv_fs_layout_get_namespace_digest (self->layout);
      op->done = op_done;
      op->done_data = fj;
      kv_fs_slab_init_op (self->slab, op, slot);
    }

  /* adjacent slots of one file: one read */
  ops = g_new (KvFsOp *, MAX (fj->n_keys, 1));
  launch_ops (self, fj, ops, kv_fs_slab_merge_loads (self->slab, ops, collect_ops (fj, ops)));
  return TRUE;
}

/* Every slot read, before the index gets the keys: held there while
 * kv_fs_tier_hold_slab_scans_read() says so. */
static void
slab_scan_read (gpointer user_data)
{
  KvFsTier *self = user_data;

  g_mutex_lock (&scan_hold_lock);
  while (scan_hold_read && !g_atomic_int_get (&self->scan_cancel))
    g_cond_wait (&scan_hold_cond, &scan_hold_lock);
  g_mutex_unlock (&scan_hold_lock);
}

static gpointer
slab_scan_main (gpointer user_data)
{
  KvFsTier *self = user_data;
  guint64 n_bad = 0;
  guint64 n_found;

  g_mutex_lock (&scan_hold_lock);
  while (scan_hold && !g_atomic_int_get (&self->scan_cancel))
    g_cond_wait (&scan_hold_cond, &scan_hold_lock);
  g_mutex_unlock (&scan_hold_lock);

  n_found = kv_fs_slab_scan (self->slab, self->index, &self->scan_cancel, slab_scan_read,
                             self, &n_bad);
  count (self, KV_FS_COUNTER_SCANNED_CHUNKS, n_found);
  count (self, KV_FS_COUNTER_CORRUPT_CHUNKS, n_bad);
  g_atomic_int_set (&self->index_ready, TRUE);
  return NULL;
}

/* The slab files (made, or found and scanned in the background) and an
 * index without a size limit: the slots are the limit. */
static void
slab_start (KvFsTier *self)
{
  self->index = kv_fs_index_new (self->eviction, 0);
  if (kv_fs_slab_needs_scan (self->slab))
    self->scan_thread = g_thread_new ("kvtier-fs-scan", slab_scan_main, self);
  else
    g_atomic_int_set (&self->index_ready, TRUE);
}

/**
 * kv_fs_tier_get_slab_location:
 * @self: a #KvFsTier with `layout=slab`
 * @key: a key the tier holds
 * @out_path: (out) (optional) (transfer full): the slab file's path
 * @out_offset: (out) (optional): where the key's slot (its header) starts
 *   in it
 *
 * Where a chunk of a slab tier is, for inspection and tests.
 *
 * Returns: %FALSE if the tier does not hold @key in a slot
 */
gboolean
kv_fs_tier_get_slab_location (KvFsTier  *self,
                              KvKey     *key,
                              char     **out_path,
                              guint64   *out_offset)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), FALSE);
  g_return_val_if_fail (key != NULL, FALSE);

  return self->slab != NULL && kv_fs_slab_locate (self->slab, key, out_path, out_offset);
}


static KvFsOpFlags
base_flags (KvFsTier *self,
            guint     root)
{
  KvFsOpFlags flags = 0;

  if (self->o_direct[root])
    flags |= KV_FS_OP_FLAG_O_DIRECT;
  if (kv_fs_layout_has_header (self->layout))
    flags |= KV_FS_OP_FLAG_HEADER;
  else if (kv_fs_layout_get_kind (self->layout) == KV_FS_LAYOUT_KIND_VLLM)
    flags |= KV_FS_OP_FLAG_FILE_CRC32C;
  return flags;
}

static gboolean
kv_fs_tier_submit_store (KvSecondaryTier  *tier,
                         KvTransferJob    *job,
                         GError          **error)
{
  KvFsTier *self = KV_FS_TIER (tier);
  FsJob *fj;
  KvRequest *request = kv_transfer_job_get_request (job);
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();
  g_autoptr(GPtrArray) reused = g_ptr_array_new ();
  KvKey *parent = NULL;

  if (self->slab != NULL)
    return slab_submit_store (self, job);
  fj = fs_job_new (self, job, FALSE);

  if (request != NULL)
    parent = kv_request_get_state (request, &self->chain_tag);

  for (guint i = 0; i < fj->n_keys; i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint32 slot = kv_transfer_job_get_chunk_id (job, i);
      KvFsOp *op = &fj->ops[i];
      KvFsOpFlags flags;
      gboolean use_spare = FALSE;
      char *spare = NULL;
      guint root;

      if (slot >= self->n_slots || !kv_fs_layout_key_supported (self->layout, key))
        {
          fail_key (fj, i, slot >= self->n_slots ? "a slot outside the primary buffer"
                                                 : "a key the layout cannot name");
          count (self, KV_FS_COUNTER_STORE_FAILURES, 1);
          parent = key;
          continue;
        }
      root = kv_fs_layout_root_for_key (self->layout, key);
      flags = base_flags (self, root);
      if (self->durability >= KV_FS_DURABILITY_DATA)
        flags |= KV_FS_OP_FLAG_DATASYNC;
      if (self->durability == KV_FS_DURABILITY_FULL)
        flags |= KV_FS_OP_FLAG_DIRSYNC;

      if (self->index != NULL)
        {
          if (self->spares != NULL)
            {
              use_spare = kv_fs_spares_has (self->spares, root);
              if (!use_spare)
                drop_spare_elsewhere (self, root);
            }
          switch (kv_fs_index_begin_store (self->index, key, parent, root,
                                           self->file_size, use_spare, victims))
            {
            case KV_FS_BEGIN_STORE_NEW:
              /* this thread alone takes spares: the one seen is there */
              if (use_spare)
                spare = kv_fs_spares_pop (self->spares, root);
              break;
            case KV_FS_BEGIN_STORE_EXISTS:
              kv_tier_job_mark_skipped (fj->tier_job, i);
              count (self, KV_FS_COUNTER_SKIPPED_CHUNKS, 1);
              parent = key;
              continue;
            case KV_FS_BEGIN_STORE_BUSY:
            case KV_FS_BEGIN_STORE_NO_SPACE:
              fail_key (fj, i, "no room under max-size, or the chunk is busy");
              count (self, KV_FS_COUNTER_STORE_FAILURES, 1);
              parent = key;
              continue;
            }
        }
      else
        flags |= KV_FS_OP_FLAG_SKIP_EXISTING;

      kv_fs_op_init (op, KV_FS_OP_STORE, flags, root,
                     kv_fs_layout_chunk_path (self->layout, key, NULL), kv_key_ref (key));
      op->payload = kv_host_buffer_peek_slot (self->primary, slot);
      op->payload_len = self->block_size;
      op->slot = slot;
      /* computed once, as the chunk came into the primary */
      op->has_payload_checksum = kv_host_buffer_get_slot_checksum (self->primary, slot,
                                                                   &op->payload_checksum);
      op->namespace_digest = kv_fs_layout_get_namespace_digest (self->layout);
      op->temp_tag = self->temp_tag;
      op->done = op_done;
      op->done_data = fj;
      /* A spare file, or in a full tier the file of a chunk evicted for
       * this one: overwrite it instead of creating another. */
      if (spare != NULL)
        {
          op->reuse_path = spare;
          fj->from_spare[i] = TRUE;
          /* One rename instead of two: a spare is no chunk's name. Only
           * where the chunk directories all exist from the start (vLLM's
           * are made on first use, next to the temporary file). */
          if (kv_fs_layout_get_kind (self->layout) == KV_FS_LAYOUT_KIND_KVTIER)
            op->flags |= KV_FS_OP_FLAG_REUSE_IN_PLACE;
        }
      else if (victims->len > 0)
        fj->entries[i] = take_reusable_victim (victims, root, self->file_size);
      if (fj->entries[i] != NULL)
        {
          op->reuse_path = kv_fs_layout_chunk_path (self->layout, fj->entries[i]->key, NULL);
          g_ptr_array_add (reused, fj->entries[i]);
        }
      parent = key;
    }

  /* The request's next store continues this chain. */
  if (request != NULL && fj->n_keys > 0)
    kv_request_set_state (request, &self->chain_tag,
                          kv_key_ref (kv_transfer_job_get_key (job, fj->n_keys - 1)),
                          (GDestroyNotify) kv_key_unref);

  report_evicted (self, (KvFsEntry **) reused->pdata, reused->len);
  delete_victims (self, victims);
  launch (self, fj);
  return TRUE;
}

static gboolean
kv_fs_tier_submit_load (KvSecondaryTier  *tier,
                        KvTransferJob    *job,
                        GError          **error)
{
  KvFsTier *self = KV_FS_TIER (tier);
  /* lazy promotion: the load starts here, so its slots are reserved here (none: no key left) */
  gboolean reserved G_GNUC_UNUSED = kv_secondary_tier_reserve_load_slots (tier, job, NULL);
  FsJob *fj;
  gboolean ready = g_atomic_int_get (&self->index_ready);

  if (self->slab != NULL)
    return slab_submit_load (self, job);
  fj = fs_job_new (self, job, TRUE);

  for (guint i = 0; i < fj->n_keys; i++)
    {
      KvKey *key = kv_transfer_job_get_key (job, i);
      guint32 slot = kv_transfer_job_get_chunk_id (job, i);
      KvFsOp *op = &fj->ops[i];
      KvFsOpFlags flags;
      guint root;

      if (slot >= self->n_slots || !kv_fs_layout_key_supported (self->layout, key))
        {
          fail_key (fj, i, slot >= self->n_slots ? "a slot outside the primary buffer"
                                                 : "a key the layout cannot name");
          count (self, KV_FS_COUNTER_LOAD_FAILURES, 1);
          continue;
        }
      if (self->index != NULL)
        {
          fj->entries[i] = kv_fs_index_pin (self->index, key);
          /* Known absent (evicted since the lookup): no file to read. A
           * key the index has not seen yet during a rebuild may exist. */
          if (fj->entries[i] == NULL && ready)
            {
              kv_tier_job_mark_missing (fj->tier_job, i);
              count (self, KV_FS_COUNTER_LOAD_FAILURES, 1);
              continue;
            }
        }
      root = kv_fs_layout_root_for_key (self->layout, key);
      flags = base_flags (self, root);
      if (self->verify)
        flags |= KV_FS_OP_FLAG_VERIFY;
      kv_fs_op_init (op, KV_FS_OP_LOAD, flags, root,
                     kv_fs_layout_chunk_path (self->layout, key, NULL), kv_key_ref (key));
      op->payload = kv_host_buffer_peek_slot (self->primary, slot);
      op->payload_len = self->block_size;
      op->slot = slot;
      op->namespace_digest = kv_fs_layout_get_namespace_digest (self->layout);
      op->temp_tag = self->temp_tag;
      op->done = op_done;
      op->done_data = fj;
    }

  launch (self, fj);
  return TRUE;
}

/* ---- owner-thread vfuncs ------------------------------------------------ */

static KvLookupResult
kv_fs_tier_lookup (KvSecondaryTier *tier,
                   KvKey           *key,
                   KvRequest       *request)
{
  KvFsTier *self = KV_FS_TIER (tier);

  /* An open breaker and a load of the key that failed for this request
   * (reference #49176) answer MISS before this is called. */
  if (self->index == NULL)
    return kv_async_lookup_lookup (self->async_lookup, key, request);

  switch (kv_fs_index_lookup (self->index, key, TRUE))
    {
    case KV_FS_INDEX_PRESENT:
      return KV_LOOKUP_RESULT_HIT;
    case KV_FS_INDEX_BUSY:
      return KV_LOOKUP_RESULT_MISS;
    case KV_FS_INDEX_ABSENT:
    default:
      if (g_atomic_int_get (&self->index_ready) || self->async_lookup == NULL)
        return KV_LOOKUP_RESULT_MISS;
      /* Still scanning: ask the disk, off this thread. */
      return kv_async_lookup_lookup (self->async_lookup, key, request);
    }
}

static gboolean
kv_fs_tier_has_pending_work (KvSecondaryTier *tier)
{
  KvFsTier *self = KV_FS_TIER (tier);
  gboolean pending;

  g_mutex_lock (&self->lock);
  pending = self->n_live_jobs > 0;
  g_mutex_unlock (&self->lock);
  /* the async lookup's unanswered checks: the base class counts them */
  return pending;
}

static void
kv_fs_tier_touch (KvSecondaryTier  *tier,
                  KvKey           **keys,
                  KvRequest        *request)
{
  KvFsTier *self = KV_FS_TIER (tier);

  if (self->index != NULL && keys != NULL)
    kv_fs_index_touch (self->index, keys, g_strv_length ((char **) keys));
}

static KvOffloadPolicy
kv_fs_tier_on_new_request (KvSecondaryTier *tier,
                           KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

/* ---- metrics ------------------------------------------------------------ */

static const char *const tier_label_names[] = { "tier", NULL };

/* The fs tier's families, in KvFsCounter order (doc/metrics.md); NULL for
 * the counters that mirror the base class's families (timeouts:
 * kvtier_tier_deadline_failures, breaker trips:
 * kvtier_tier_breaker_openings), which are not exported twice. */
static const struct
{
  const char *name;
  const char *doc;
} counter_info[KV_FS_N_COUNTERS] = {
  [KV_FS_COUNTER_STORED_CHUNKS] = { "kvtier_fs_stored_chunks", "Chunks written and published" },
  [KV_FS_COUNTER_SKIPPED_CHUNKS] = { "kvtier_fs_skipped_chunks",
                                     "Chunks a store skipped because the tier held them already" },
  [KV_FS_COUNTER_STORE_FAILURES] = { "kvtier_fs_store_failures", "Chunks a store failed to write" },
  [KV_FS_COUNTER_LOADED_CHUNKS] = { "kvtier_fs_loaded_chunks", "Chunks read into the primary tier" },
  [KV_FS_COUNTER_LOAD_FAILURES] = { "kvtier_fs_load_failures", "Chunks a load failed to read" },
  [KV_FS_COUNTER_CORRUPT_CHUNKS] = { "kvtier_fs_corrupt_chunks",
                                     "Chunk files that failed their check (short, bad header, "
                                     "wrong key, bad checksum) and were deleted" },
  [KV_FS_COUNTER_CHECKSUM_FAILURES] = { "kvtier_fs_checksum_failures",
                                        "Of the corrupt chunk files, those whose payload or "
                                        "header checksum did not match" },
  [KV_FS_COUNTER_MISSING_CHUNKS] = { "kvtier_fs_missing_chunks", "Chunks whose file had vanished" },
  [KV_FS_COUNTER_IO_ERRORS] = { "kvtier_fs_io_errors",
                                "Transient I/O errors (EIO, EACCES, ELOOP...); the files were kept" },
  [KV_FS_COUNTER_NO_SPACE] = { "kvtier_fs_no_space_errors", "Stores that failed with ENOSPC" },
  [KV_FS_COUNTER_TIMEOUTS] = { NULL, NULL },
  [KV_FS_COUNTER_BREAKER_TRIPS] = { NULL, NULL },
  [KV_FS_COUNTER_EVICTED_CHUNKS] = { "kvtier_fs_evicted_chunks",
                                     "Chunks deleted to stay within max-size or to make room "
                                     "after ENOSPC" },
  [KV_FS_COUNTER_REUSED_FILES] = { "kvtier_fs_reused_files",
                                   "Evicted chunks whose file a store took over instead of "
                                   "deleting it" },
  [KV_FS_COUNTER_SPARE_FILES_CREATED] = { "kvtier_fs_spare_files_created",
                                          "Spare files written ahead of stores (preallocate)" },
  [KV_FS_COUNTER_SPARE_FILES_USED] = { "kvtier_fs_spare_files_used",
                                       "Spare files a store took over instead of creating a file" },
  [KV_FS_COUNTER_TEMP_FILES_REMOVED] = { "kvtier_fs_temp_files_removed",
                                         "Stale temporary files removed by the warm-restart scan" },
  [KV_FS_COUNTER_SCANNED_CHUNKS] = { "kvtier_fs_scanned_chunks",
                                     "Chunks found by the warm-restart scan" },
  [KV_FS_COUNTER_BYTES_WRITTEN] = { "kvtier_fs_written_bytes", "Payload bytes stored" },
  [KV_FS_COUNTER_BYTES_READ] = { "kvtier_fs_read_bytes", "Payload bytes loaded" },
  [KV_FS_COUNTER_FOREIGN_FILES] = { "kvtier_fs_foreign_files",
                                    "Files under a chunk's name that are not the tier's user's, "
                                    "not regular or writable by others: never served nor deleted" },
};

#define FS_USED_BYTES "kvtier_fs_used_bytes"

static gboolean
kv_fs_tier_register_metrics (KvSecondaryTier   *tier,
                             KvMetricRegistry  *registry,
                             GError           **error)
{
  for (guint c = 0; c < KV_FS_N_COUNTERS; c++)
    if (counter_info[c].name != NULL &&
        !kv_metric_registry_add_counter (registry, counter_info[c].name, counter_info[c].doc,
                                         tier_label_names, error))
      return FALSE;
  return kv_metric_registry_add_gauge (registry, FS_USED_BYTES,
                                       "Bytes of chunk files the fs tier holds",
                                       tier_label_names, error);
}

/* Counters since the last call (every one on the first call, so that the
 * series exist from the first scrape), and the gauge. Not the base
 * class's take of a counter set: the timeouts and breaker trips are
 * counted here too (kv_fs_tier_get_counter()) but exported only as the
 * base class's own families. */
static KvStats *
kv_fs_tier_get_stats (KvSecondaryTier *tier)
{
  KvFsTier *self = KV_FS_TIER (tier);
  g_autofree char *label = kv_secondary_tier_dup_metric_label (tier);
  const char *labels[] = { label, NULL };
  KvStats *stats = kv_stats_new ();

  for (guint c = 0; c < KV_FS_N_COUNTERS; c++)
    {
      guint64 value = kv_fs_tier_get_counter (self, c);

      if (counter_info[c].name != NULL && (value != self->reported[c] || !self->stats_taken))
        kv_stats_increase_counter (stats, counter_info[c].name, value - self->reported[c], labels);
      self->reported[c] = value;
    }
  self->stats_taken = TRUE;
  kv_stats_set_gauge (stats, FS_USED_BYTES,
                      self->index != NULL ? kv_fs_index_get_used (self->index) : 0, labels);
  return stats;
}

/* Blocks until every job is reported and no op touches the primary (and
 * the files of evicted chunks are gone, so that the tier is settled). */
static void
wait_jobs (KvFsTier *self,
           gboolean  expired_too)
{
  g_mutex_lock (&self->lock);
  while (self->n_live_jobs - (expired_too ? 0 : self->n_expired_live) > 0 || self->n_deletes > 0)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
}

/* Waits for the jobs and deletes in flight, except those whose deadline
 * failed them: an op stuck in the kernel must not hang the engine. Their
 * ops were aborted (a store does not publish) and the manager keeps a
 * failed load's slots until the op returns and reports, late. */
static gboolean
kv_fs_tier_drain_jobs (KvSecondaryTier  *tier,
                       GError          **error)
{
  wait_jobs (KV_FS_TIER (tier), FALSE);
  return KV_SECONDARY_TIER_CLASS (kv_fs_tier_parent_class)->drain_jobs (tier, error);
}

static void
stop_threads (KvFsTier *self)
{
  g_atomic_int_set (&self->scan_cancel, TRUE);
  if (self->scan_thread != NULL)
    {
      g_mutex_lock (&scan_hold_lock);
      g_cond_broadcast (&scan_hold_cond);
      g_mutex_unlock (&scan_hold_lock);
      g_thread_join (self->scan_thread);
      self->scan_thread = NULL;
    }
  if (self->spares != NULL)
    kv_fs_spares_stop (self->spares);
  /* Queued ops are cancelled (their jobs report failed), running ops
   * finish, then the engine's threads stop. */
  if (self->engine != NULL)
    kv_fs_engine_shutdown (self->engine);
  wait_jobs (self, TRUE);
  /* then the base class shuts the async lookup down (after shutdown, or
   * in dispose): its checks only read the layout */
}

static gboolean
kv_fs_tier_shutdown (KvSecondaryTier  *tier,
                     GError          **error)
{
  KvFsTier *self = KV_FS_TIER (tier);

  g_mutex_lock (&self->lock);
  self->shut_down = TRUE;
  g_mutex_unlock (&self->lock);
  stop_threads (self);
  return TRUE;
}

/* ---- warm restart ------------------------------------------------------- */

typedef struct
{
  KvKey  *key;
  guint   root;
  guint64 size;
  gint64  mtime;
} Scanned;

typedef struct
{
  KvFsTier *tier;
  GArray   *found;    /* Scanned */
  guint     n_bad;
} ScanContext;

static void
scan_chunk (KvKey      *key,
            guint       root,
            int         dir_fd,
            const char *name,
            const char *path,
            guint64     size,
            gint64      mtime_us,
            gpointer    user_data)
{
  ScanContext *ctx = user_data;
  KvFsTier *self = ctx->tier;
  Scanned s;

  if (size != self->file_size)
    {
      /* Published files are complete, so a wrong size is damage. */
      if (!self->shared && unlinkat (dir_fd, name, 0) == 0)
        {
          count (self, KV_FS_COUNTER_CORRUPT_CHUNKS, 1);
          ctx->n_bad++;
        }
      return;
    }
  s.key = kv_key_ref (key);
  s.root = root;
  s.size = (size + 4095) & ~(guint64) 4095;
  s.mtime = mtime_us;
  g_array_append_val (ctx->found, s);
}

static void
scan_temp (int         dir_fd,
           const char *name,
           const char *path,
           gint64      mtime_us,
           gpointer    user_data)
{
  ScanContext *ctx = user_data;
  KvFsTier *self = ctx->tier;

  /* A tier that owns its directory has no writer but itself: every
   * temporary file not of this instance is left from a crash. */
  if (strstr (path, self->temp_marker) != NULL)
    return;
  if (self->shared && g_get_real_time () - mtime_us < STALE_TEMP_AGE_US)
    return;
  if (unlinkat (dir_fd, name, 0) == 0)
    count (self, KV_FS_COUNTER_TEMP_FILES_REMOVED, 1);
}

/* A file of a chunk's (or temporary) name that another user owns, or
 * that is no regular file, or a shard directory of another user's:
 * never served, never deleted, reported. */
static void
scan_foreign (const char *path,
              gpointer    user_data)
{
  ScanContext *ctx = user_data;

  count (ctx->tier, KV_FS_COUNTER_FOREIGN_FILES, 1);
  g_message ("fs tier: ignored %s: not a file of the tier's user", path);
}

static const KvFsScanFuncs scan_funcs = { scan_chunk, scan_temp, scan_foreign };

static int
compare_newest_first (gconstpointer a,
                      gconstpointer b)
{
  const Scanned *sa = a;
  const Scanned *sb = b;

  return sa->mtime < sb->mtime ? 1 : sa->mtime > sb->mtime ? -1 : 0;
}

/* Test hook: holds warm-restart scans at their start. */
void
kv_fs_tier_hold_scans (gboolean hold)
{
  g_mutex_lock (&scan_hold_lock);
  scan_hold = hold;
  g_cond_broadcast (&scan_hold_cond);
  g_mutex_unlock (&scan_hold_lock);
}

/* Test hook: holds the warm-restart scans of layout=slab once they have
 * read every slot, before the index gets their keys. */
void
kv_fs_tier_hold_slab_scans_read (gboolean hold)
{
  g_mutex_lock (&scan_hold_lock);
  scan_hold_read = hold;
  g_cond_broadcast (&scan_hold_cond);
  g_mutex_unlock (&scan_hold_lock);
}

static gpointer
scan_main (gpointer user_data)
{
  KvFsTier *self = user_data;
  ScanContext ctx = { self, NULL, 0 };
  g_autoptr(GPtrArray) victims = g_ptr_array_new ();

  g_mutex_lock (&scan_hold_lock);
  while (scan_hold && !g_atomic_int_get (&self->scan_cancel))
    g_cond_wait (&scan_hold_cond, &scan_hold_lock);
  g_mutex_unlock (&scan_hold_lock);
  ctx.found = g_array_new (FALSE, FALSE, sizeof (Scanned));

  for (guint r = 0; r < kv_fs_layout_get_n_roots (self->layout); r++)
    kv_fs_layout_scan (self->layout, r, &scan_funcs, &ctx, &self->scan_cancel);

  /* Oldest first in the eviction order: insert newest-first at its head. */
  g_array_sort (ctx.found, compare_newest_first);
  for (guint i = 0; i < ctx.found->len; i++)
    {
      Scanned *s = &g_array_index (ctx.found, Scanned, i);

      if (self->index != NULL && !g_atomic_int_get (&self->scan_cancel) &&
          kv_fs_index_add_scanned (self->index, s->key, s->root, s->size))
        count (self, KV_FS_COUNTER_SCANNED_CHUNKS, 1);
      kv_key_unref (s->key);
    }
  g_array_unref (ctx.found);

  if (self->index != NULL && !g_atomic_int_get (&self->scan_cancel))
    {
      kv_fs_index_trim (self->index, victims);
      delete_victims (self, victims);
    }
  g_atomic_int_set (&self->index_ready, TRUE);
  if (self->spares != NULL)
    kv_fs_spares_index_ready (self->spares);
  return NULL;
}

/* Whether the chunk directories hold any file yet (a restart to
 * rebuild): the kvtier layout's shard directories always exist, so look
 * inside them. */
static gboolean
has_existing_chunks (KvFsTier *self)
{
  for (guint r = 0; r < kv_fs_layout_get_n_roots (self->layout); r++)
    if (kv_fs_layout_has_entries (self->layout, r))
      return TRUE;
  return FALSE;
}

/* ---- async existence checks (shared, or while scanning) ----------------- */

static void
batch_exists (KvKey * const *keys,
              guint          n_keys,
              KvRequest     *request,
              gboolean      *results,
              gpointer       user_data)
{
  KvFsTier *self = user_data;

  /* Existence of the final name is the criterion: temporary files are
   * invisible, and a published file is complete. */
  for (guint i = 0; i < n_keys; i++)
    results[i] = kv_fs_layout_key_supported (self->layout, keys[i]) &&
                 kv_fs_layout_chunk_exists (self->layout, keys[i]);
}

/* ---- trust-group ------------------------------------------------------- */

/* The gid of @group, a group name or number, or -1 with @error set. */
static gint64
resolve_group (const char  *group,
               GError     **error)
{
  struct group *gr = getgrnam (group);
  guint64 gid;

  if (gr != NULL)
    return gr->gr_gid;
  if (g_ascii_string_to_unsigned (group, 10, 0, G_MAXUINT32 - 1, &gid, NULL))
    return (gint64) gid;
  g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
               "trust-group ‘%s’ is neither a group name nor a group number", group);
  return -1;
}

/* ---- O_DIRECT probe ----------------------------------------------------- */

static gboolean
probe_o_direct (int  dir_fd,
                int *out_errno)
{
  g_autofree char *path = g_strdup_printf (".kvtier-odirect_%08x.tmp", g_random_int ());
  void *buf = NULL;
  gboolean ok = FALSE;
  int fd;

  *out_errno = 0;
  if (posix_memalign (&buf, 4096, 4096) != 0)
    return FALSE;
  memset (buf, 0, 4096);
  fd = openat (dir_fd, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0)
    {
      if (pwrite (fd, buf, 4096, 0) == 4096)
        {
          close (fd);
          fd = openat (dir_fd, path, O_RDONLY | O_NOFOLLOW | O_DIRECT | O_CLOEXEC);
          ok = fd >= 0 && pread (fd, buf, 4096, 0) == 4096;
        }
      if (!ok)
        *out_errno = errno;
      if (fd >= 0)
        close (fd);
      unlinkat (dir_fd, path, 0);
    }
  else
    *out_errno = errno;
  free (buf);
  return ok;
}

/* ---- construction ------------------------------------------------------- */

/* What init refuses before its first side effect, and the KvConfigurable
 * check (so `kvtier config check` refuses the same): returns the layout
 * that the properties describe, without touching the disk. */
static KvFsLayout *
check_configuration (KvFsTier  *self,
                     GError   **error)
{
  KvSecondaryTier *tier = KV_SECONDARY_TIER (self);
  KvHostBuffer *primary = kv_secondary_tier_get_primary (tier);
  KvLocality locality = kv_secondary_tier_get_locality (tier);
  KvFsLayout *layout;

  if (primary == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The fs tier needs a primary buffer (the primary property)");
      return NULL;
    }
  if (locality != KV_LOCALITY_UNSPECIFIED && locality != KV_LOCALITY_LOCAL &&
      locality != KV_LOCALITY_REMOTE)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "Invalid locality %d for the fs tier (accepted: LOCAL, REMOTE)",
                   locality);
      return NULL;
    }
  if (self->shared && self->max_size > 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "max-size=%" G_GUINT64_FORMAT " cannot be combined with shared=true: several "
                   "processes writing one directory cannot account its size; bound it from one "
                   "owner (shared=false) or leave max-size at 0",
                   self->max_size);
      return NULL;
    }
  if (self->preallocate && self->max_size == 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "preallocate=true needs max-size: the spare files fill max-size, and "
                   "max-size is 0 (no limit)");
      return NULL;
    }
  /* a block device root holds as much as the device without max-size */
  if (self->layout_kind == KV_FS_LAYOUT_KIND_SLAB &&
      (self->shared || self->preallocate ||
       (self->max_size == 0 && !g_str_has_prefix (self->root, "/dev/"))))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "layout=slab %s",
                   self->shared ? "cannot be shared=true: the tier's index says which slot "
                                  "holds which chunk, and only one process can keep it" :
                   self->preallocate ? "does not take preallocate=true: its slab files are "
                                       "preallocated already" :
                   "needs max-size: the bytes of slab files it preallocates, which bound it");
      return NULL;
    }
  if (self->layout_kind != KV_FS_LAYOUT_KIND_VLLM && self->vllm_identity != NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "vllm-identity is only used with layout=vllm (layout is %s)",
                   self->layout_kind == KV_FS_LAYOUT_KIND_SLAB ? "slab" : "kvtier");
      return NULL;
    }
  layout = kv_fs_layout_new (self->layout_kind, self->root, self->namespace_,
                             kv_host_buffer_get_slot_size (primary), self->vllm_identity,
                             self->vllm_rank, error);
  if (layout != NULL && self->trust_group != NULL && *self->trust_group != '\0')
    {
      gint64 gid = resolve_group (self->trust_group, error);

      if (gid < 0)
        {
          kv_fs_layout_free (layout);
          return NULL;
        }
      kv_fs_layout_set_trusted_gid (layout, gid);
    }
  return layout;
}

static gboolean
kv_fs_tier_check (KvConfigurable  *configurable,
                  GError         **error)
{
  KvFsLayout *layout = check_configuration (KV_FS_TIER (configurable), error);

  if (layout == NULL)
    return FALSE;
  kv_fs_layout_free (layout);
  return TRUE;
}

static void
kv_fs_tier_configurable_iface_init (KvConfigurableInterface *iface)
{
  iface->check = kv_fs_tier_check;
}

static gboolean
kv_fs_tier_initable_init (GInitable     *initable,
                          GCancellable  *cancellable,
                          GError       **error)
{
  KvFsTier *self = KV_FS_TIER (initable);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (initable);
  g_autoptr(GError) local_error = NULL;
  KvFsEngineConfig config = { 0 };
  guint n_roots;

  if (self->initialized)
    return TRUE;

  self->layout = check_configuration (self, error);
  if (self->layout == NULL)
    return FALSE;
  self->primary = kv_secondary_tier_get_primary (tier);
  self->block_size = kv_host_buffer_get_slot_size (self->primary);
  self->n_slots = kv_host_buffer_get_n_slots (self->primary);
  self->locality = kv_secondary_tier_get_locality (tier);
  self->file_size = kv_fs_layout_get_file_size (self->layout);
  if (!kv_fs_layout_create_dirs (self->layout, error))
    return FALSE;

  n_roots = kv_fs_layout_get_n_roots (self->layout);
  self->o_direct = g_new0 (gboolean, n_roots);
  for (guint r = 0; r < n_roots; r++)
    {
      g_autoptr(KvFsRootDirs) dirs = kv_fs_layout_ref_dirs (self->layout, r);
      int err = 0;

      if (self->o_direct_mode == KV_FS_O_DIRECT_OFF)
        continue;
      /* a block device (layout=slab) takes O_DIRECT of aligned I/O */
      if (kv_fs_layout_root_is_device (self->layout, r))
        {
          self->o_direct[r] = self->block_size % 4096 == 0;
          continue;
        }
      self->o_direct[r] = self->block_size % 4096 == 0 &&
                          probe_o_direct (kv_fs_root_dirs_get_chunk_fd (dirs), &err);
      if (!self->o_direct[r] && self->o_direct_mode == KV_FS_O_DIRECT_ON)
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                       "o-direct=on but the fs tier root ‘%s’ does not support O_DIRECT (%s)",
                       kv_fs_layout_get_root (self->layout, r),
                       err != 0 ? g_strerror (err) : "chunk size not a multiple of 4096");
          return FALSE;
        }
      if (!self->o_direct[r])
        g_debug ("fs tier: root %s does not support O_DIRECT (%s); using buffered I/O",
                 kv_fs_layout_get_root (self->layout, r), g_strerror (err));
    }

  if (self->layout_kind == KV_FS_LAYOUT_KIND_SLAB)
    {
      self->slab = kv_fs_slab_new (self->layout, self->max_size, self->slab_size, self->o_direct,
                                   self->slab_map, error);
      if (self->slab == NULL)
        return FALSE;
    }

  config.n_roots = n_roots;
  config.inflight_bytes = self->inflight_bytes;
  config.n_read_threads = self->n_read_threads;
  config.n_write_threads = self->n_write_threads;
  config.queue_depth = self->queue_depth;
  config.buffer = kv_host_buffer_get_data (self->primary);
  config.buffer_size = kv_host_buffer_get_size (self->primary);
  config.slot_size = self->block_size;
  config.layout = self->layout;
  config.mapped = self->slab != NULL && kv_fs_slab_is_mapped (self->slab);
  if (config.mapped)
    {
      /* Every op is a copy that never waits on a device: threads beyond
       * the cores only take turns (32 threads on 2 cores spent 14 % of
       * a 64 KiB load pass waking each other). Both kinds take the other
       * queue's ops when their own is empty. */
      guint n_cpus = MAX (g_get_num_processors (), 1);

      config.n_read_threads = MIN (config.n_read_threads, MAX ((n_cpus + 1) / 2, 1));
      config.n_write_threads = MIN (config.n_write_threads, MAX (n_cpus / 2, 1));
    }
  /* where every record is a copy, io_uring has no request to make: its
   * ring would only hand the copies to a pool smaller than the thread
   * engine's */
  self->engine = kv_fs_engine_new (self->io_engine == KV_FS_IO_ENGINE_AUTO && config.mapped ?
                                   KV_FS_IO_ENGINE_THREADS : self->io_engine,
                                   &config, &local_error);
  if (self->engine == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "The fs tier cannot start its I/O engine: %s", local_error->message);
      return FALSE;
    }

  if (self->slab != NULL)
    {
      slab_start (self);
      self->initialized = TRUE;
      return TRUE;
    }

  if (!self->shared)
    self->index = kv_fs_index_new (self->eviction, self->max_size);

  if (self->shared || has_existing_chunks (self))
    {
      self->async_lookup = kv_async_lookup_new (kv_secondary_tier_get_tier_type (tier),
                                                batch_exists, self, NULL, 2, 8, 16384);
      /* the base class flushes, cleans up and shuts it down, counts its
       * checks as pending and marks failed loads' keys as misses there */
      kv_secondary_tier_set_async_lookup (tier, self->async_lookup);
    }

  /* preallocate, or spares to delete since it was turned off; before
   * the scan, which says when the index is ready */
  if (self->index != NULL && (self->preallocate || kv_fs_spares_any_on_disk (self->layout)))
    self->spares = kv_fs_spares_new (self->layout, self->index, self->file_size,
                                     self->o_direct, self->preallocate, spare_created, self);

  if (self->index != NULL && self->async_lookup != NULL)
    self->scan_thread = g_thread_new ("kvtier-fs-scan", scan_main, self);
  else
    {
      g_atomic_int_set (&self->index_ready, TRUE);
      if (self->spares != NULL)
        kv_fs_spares_index_ready (self->spares);
    }

  self->initialized = TRUE;
  return TRUE;
}

static void
kv_fs_tier_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_fs_tier_initable_init;
}

/* ---- GObject ------------------------------------------------------------ */

static void
kv_fs_tier_dispose (GObject *object)
{
  KvFsTier *self = KV_FS_TIER (object);

  /* Internal teardown only: no vfunc, no signal. */
  if (self->initialized)
    stop_threads (self);
  g_clear_object (&self->engine);
  g_clear_object (&self->async_lookup);

  G_OBJECT_CLASS (kv_fs_tier_parent_class)->dispose (object);
}

static void
kv_fs_tier_finalize (GObject *object)
{
  KvFsTier *self = KV_FS_TIER (object);

  g_clear_pointer (&self->spares, kv_fs_spares_free);
  g_clear_pointer (&self->slab, kv_fs_slab_free);
  g_clear_pointer (&self->index, kv_fs_index_free);
  g_clear_pointer (&self->layout, kv_fs_layout_free);
  g_clear_pointer (&self->counters, kv_counter_set_unref);
  g_free (self->o_direct);
  g_free (self->temp_marker);
  g_free (self->root);
  g_free (self->trust_group);
  g_free (self->namespace_);
  g_free (self->vllm_identity);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);

  G_OBJECT_CLASS (kv_fs_tier_parent_class)->finalize (object);
}

static void
kv_fs_tier_get_property (GObject    *object,
                         guint       prop_id,
                         GValue     *value,
                         GParamSpec *pspec)
{
  KvFsTier *self = KV_FS_TIER (object);

  switch (prop_id)
    {
    case PROP_ROOT: g_value_set_string (value, self->root); break;
    case PROP_NAMESPACE: g_value_set_string (value, self->namespace_); break;
    case PROP_LAYOUT: g_value_set_enum (value, self->layout_kind); break;
    case PROP_DURABILITY: g_value_set_enum (value, self->durability); break;
    case PROP_VERIFY: g_value_set_boolean (value, self->verify); break;
    case PROP_IO_ENGINE: g_value_set_enum (value, self->io_engine); break;
    case PROP_O_DIRECT: g_value_set_enum (value, self->o_direct_mode); break;
    case PROP_SHARED: g_value_set_boolean (value, self->shared); break;
    case PROP_MAX_SIZE: g_value_set_uint64 (value, self->max_size); break;
    case PROP_PREALLOCATE: g_value_set_boolean (value, self->preallocate); break;
    case PROP_EVICTION: g_value_set_enum (value, self->eviction); break;
    case PROP_N_READ_THREADS: g_value_set_uint (value, self->n_read_threads); break;
    case PROP_N_WRITE_THREADS: g_value_set_uint (value, self->n_write_threads); break;
    case PROP_INFLIGHT_BYTES: g_value_set_uint64 (value, self->inflight_bytes); break;
    case PROP_QUEUE_DEPTH: g_value_set_uint (value, self->queue_depth); break;
    case PROP_PROBE_INTERVAL_MS:
      g_value_set_uint (value, kv_circuit_breaker_get_open_ms (
                          kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self))));
      break;
    case PROP_VLLM_IDENTITY: g_value_set_string (value, self->vllm_identity); break;
    case PROP_VLLM_RANK: g_value_set_uint (value, self->vllm_rank); break;
    case PROP_TRUST_GROUP: g_value_set_string (value, self->trust_group); break;
    case PROP_SLAB_SIZE: g_value_set_uint64 (value, self->slab_size); break;
    case PROP_SLAB_MAP: g_value_set_boolean (value, self->slab_map); break;
    case PROP_ACTIVE_IO_ENGINE:
      g_value_set_string (value, self->engine ? kv_fs_engine_get_name (self->engine) : NULL);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_fs_tier_set_property (GObject      *object,
                         guint         prop_id,
                         const GValue *value,
                         GParamSpec   *pspec)
{
  KvFsTier *self = KV_FS_TIER (object);

  switch (prop_id)
    {
    case PROP_ROOT: g_free (self->root); self->root = g_value_dup_string (value); break;
    case PROP_NAMESPACE:
      g_free (self->namespace_);
      self->namespace_ = g_value_dup_string (value);
      break;
    case PROP_LAYOUT: self->layout_kind = g_value_get_enum (value); break;
    case PROP_DURABILITY: self->durability = g_value_get_enum (value); break;
    case PROP_VERIFY: self->verify = g_value_get_boolean (value); break;
    case PROP_IO_ENGINE: self->io_engine = g_value_get_enum (value); break;
    case PROP_O_DIRECT: self->o_direct_mode = g_value_get_enum (value); break;
    case PROP_SHARED: self->shared = g_value_get_boolean (value); break;
    case PROP_MAX_SIZE: self->max_size = g_value_get_uint64 (value); break;
    case PROP_PREALLOCATE: self->preallocate = g_value_get_boolean (value); break;
    case PROP_EVICTION: self->eviction = g_value_get_enum (value); break;
    case PROP_N_READ_THREADS: self->n_read_threads = g_value_get_uint (value); break;
    case PROP_N_WRITE_THREADS: self->n_write_threads = g_value_get_uint (value); break;
    case PROP_INFLIGHT_BYTES: self->inflight_bytes = g_value_get_uint64 (value); break;
    case PROP_QUEUE_DEPTH: self->queue_depth = g_value_get_uint (value); break;
    case PROP_PROBE_INTERVAL_MS:
      kv_circuit_breaker_set_open_ms (kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self)),
                                      g_value_get_uint (value));
      break;
    case PROP_VLLM_IDENTITY:
      g_free (self->vllm_identity);
      self->vllm_identity = g_value_dup_string (value);
      break;
    case PROP_VLLM_RANK: self->vllm_rank = g_value_get_uint (value); break;
    case PROP_TRUST_GROUP: g_free (self->trust_group); self->trust_group = g_value_dup_string (value); break;
    case PROP_SLAB_SIZE: self->slab_size = g_value_get_uint64 (value); break;
    case PROP_SLAB_MAP: self->slab_map = g_value_get_boolean (value); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

#define CONSTRUCT_FLAGS (G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | \
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY)

static void
kv_fs_tier_class_init (KvFsTierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  object_class->dispose = kv_fs_tier_dispose;
  object_class->finalize = kv_fs_tier_finalize;
  object_class->get_property = kv_fs_tier_get_property;
  object_class->set_property = kv_fs_tier_set_property;

  tier_class->medium = KV_MEDIUM_STORAGE;
  tier_class->lazy_promotion_allocation = TRUE;
  tier_class->lookup = kv_fs_tier_lookup;
  tier_class->submit_store = kv_fs_tier_submit_store;
  tier_class->submit_load = kv_fs_tier_submit_load;
  tier_class->has_pending_work = kv_fs_tier_has_pending_work;
  tier_class->touch = kv_fs_tier_touch;
  tier_class->on_new_request = kv_fs_tier_on_new_request;
  tier_class->drain_jobs = kv_fs_tier_drain_jobs;
  tier_class->shutdown = kv_fs_tier_shutdown;
  tier_class->register_metrics = kv_fs_tier_register_metrics;
  tier_class->get_stats = kv_fs_tier_get_stats;
  tier_class->probe = kv_fs_tier_probe;

  /**
   * KvFsTier:root:
   *
   * The directory that holds the chunks, created (mode 0700) if missing;
   * a comma-separated list spreads chunks over several directories (one
   * per drive) by key hash, each with its own in-flight budget. Changing
   * the list's order or length remaps every chunk.
   */
  properties[PROP_ROOT] =
    g_param_spec_string ("root", NULL,
                         "Directory of the chunk files (a comma-separated list spreads them over several drives)", NULL, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:namespace:
   *
   * The cache identity (model, dtype, layout, parallelism...) for the
   * kvtier layout. Chunks live in a directory named after a digest of it
   * and of the chunk size, and every header carries the digest, so tiers
   * with different identities never read each other's chunks.
   */
  properties[PROP_NAMESPACE] =
    g_param_spec_string ("namespace", NULL,
                         "The cache identity (model, dtype, layout, parallelism); other identities' chunks are never read", "default", CONSTRUCT_FLAGS);

  /**
   * KvFsTier:layout:
   *
   * `kvtier` (checksummed headers), `vllm` (vLLM's headerless files and
   * naming; needs [property@KvFsTier:vllm-identity]) or `slab` (slots in
   * preallocated slab files, see [property@KvFsTier:slab-size]; needs
   * max-size unless the roots are block devices).
   *
   * In the `vllm` layout every stored file gets vLLM's optional file
   * checksum, as vLLM writes it with `checksum_blocks` on: the extended
   * attribute `user.vllm.kv_crc32c`, the CRC32C of the file as 4
   * big-endian bytes, set on the temporary file before it is renamed
   * into place (a filesystem without user attributes stores files
   * without it). Loads check it (with [property@KvFsTier:verify]) where
   * a file has it; a file without it, written by a vLLM with checksums
   * off, is accepted. A mismatch deletes the file and fails its load,
   * counted as %KV_FS_COUNTER_CHECKSUM_FAILURES.
   */
  properties[PROP_LAYOUT] =
    g_param_spec_enum ("layout", NULL,
                       "On-disk layout: kvtier (checksummed headers), vllm (vLLM's files) or slab (preallocated slab files)", KV_TYPE_FS_LAYOUT_KIND,
                       KV_FS_LAYOUT_KIND_KVTIER, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:durability:
   *
   * `none` (no flush, as the reference), `data` (fdatasync before the
   * rename) or `full` (and fsync the directory after it).
   */
  properties[PROP_DURABILITY] =
    g_param_spec_enum ("durability", NULL,
                       "Flushing: none, data (fdatasync before the rename) or full (and fsync the directory)", KV_TYPE_FS_DURABILITY,
                       KV_FS_DURABILITY_NONE, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:verify:
   *
   * Whether loads check the payload checksum (the header is always
   * checked), and in the vLLM layout the `user.vllm.kv_crc32c` file
   * checksum of files that have one.
   */
  properties[PROP_VERIFY] =
    g_param_spec_boolean ("verify", NULL,
                          "Check each loaded chunk's payload checksum", TRUE, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:io-engine:
   *
   * `auto`, `uring`, `gio` or `threads`.
   */
  properties[PROP_IO_ENGINE] =
    g_param_spec_enum ("io-engine", NULL,
                       "How the tier does its I/O: auto, uring (io_uring), gio (GIO async) or threads (a thread pool)", KV_TYPE_FS_IO_ENGINE,
                       KV_FS_IO_ENGINE_AUTO, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:o-direct:
   *
   * `auto` (probe each root), `on` (fail construction where unsupported)
   * or `off`.
   */
  properties[PROP_O_DIRECT] =
    g_param_spec_enum ("o-direct", NULL,
                       "O_DIRECT I/O: auto (probe each root), on (fail where unsupported) or off", KV_TYPE_FS_ODIRECT,
                       KV_FS_O_DIRECT_AUTO, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:shared:
   *
   * Whether other processes or nodes write the same directory. A shared
   * tier keeps no index: lookups check the files in batches off the owner
   * thread and answer RETRY until they know.
   */
  properties[PROP_SHARED] =
    g_param_spec_boolean ("shared", NULL,
                          "Other processes or nodes write the same directory (no index: lookups check the files)", FALSE, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:max-size:
   *
   * The most bytes of chunk files the tier keeps (0: no limit); stores
   * past it evict chunks by [property@KvFsTier:eviction], and take over
   * the evicted chunks' files (see doc/on-disk-format.md).
   */
  properties[PROP_MAX_SIZE] =
    g_param_spec_uint64 ("max-size", NULL,
                         "Most bytes of chunk files the tier keeps; stores past it evict chunks (0: no limit)", 0, G_MAXUINT64, 0, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:preallocate:
   *
   * Whether the tier reserves [property@KvFsTier:max-size] on disk ahead
   * of its chunks. A thread writes spare files, whole, in a spare
   * directory under each root (`.kvtier-spare`) until chunks and spares
   * fill max-size, starting when the tier does; a store takes a spare
   * over (as it takes over an evicted chunk's file) instead of creating
   * a file, so a new tier stores at the rate of a full one: no inode to
   * allocate, no block to allocate. Room that no store fills later (a
   * chunk deleted as corrupt, a failed store) gets a new spare. The
   * spares outlive the tier and are used again by the next one on the
   * directory.
   *
   * The cost: the disk holds max-size from the start, and writing the
   * spares moves max-size bytes once, in the background (see
   * kv_fs_tier_wait_preallocated()). Needs max-size. Turned off again,
   * the next tier deletes the spares.
   */
  properties[PROP_PREALLOCATE] =
    g_param_spec_boolean ("preallocate", NULL,
                          "Write max-size of spare files ahead, so stores reuse files instead of creating them", FALSE, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:eviction:
   *
   * `lru` or `chain` (unreachable chunks and chain tails first).
   */
  properties[PROP_EVICTION] =
    g_param_spec_enum ("eviction", NULL,
                       "Which chunks go first past max-size: lru, or chain (unreachable chunks and chain tails)", KV_TYPE_FS_EVICTION,
                       KV_FS_EVICTION_LRU, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:n-read-threads:
   *
   * Load-first threads of the `threads` engine. Where every slab file is
   * mapped (a memory-backed root), at most half the CPUs, rounded up.
   */
  properties[PROP_N_READ_THREADS] =
    g_param_spec_uint ("n-read-threads", NULL,
                       "Load-first threads of the threads engine", 1, 1024, 16, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:n-write-threads:
   *
   * Store-first threads of the `threads` engine. Where every slab file
   * is mapped (a memory-backed root), at most half the CPUs.
   */
  properties[PROP_N_WRITE_THREADS] =
    g_param_spec_uint ("n-write-threads", NULL,
                       "Store-first threads of the threads engine", 1, 1024, 16, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:inflight-bytes:
   *
   * The most bytes in flight on one root (0: no limit).
   *
   * The default, 256 MiB, is 128 chunks of 2 MiB: a chunk spends part of
   * its time in flight opening, renaming and closing its file rather than
   * moving bytes, and it takes about that many for the device to see the
   * queue depth at which it reaches its ceiling (64 MiB left a quarter of
   * the read bandwidth unused in `bench/fs-throughput`). Loads are taken
   * ahead of stores, but one that arrives when the budget is full waits for
   * a store to finish: a smaller budget shortens that wait, at some cost in
   * throughput.
   */
  properties[PROP_INFLIGHT_BYTES] =
    g_param_spec_uint64 ("inflight-bytes", NULL,
                         "Most bytes in flight on one root (0: no limit)", 0, G_MAXUINT64,
                         KV_FS_DEFAULT_INFLIGHT_BYTES, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:queue-depth:
   *
   * The most chunk operations the `uring` and `gio` engines run at once
   * (each holds a 4 KiB header buffer). A store of a small chunk spends
   * much of its time in renames and opens rather than on the disk, so it
   * takes more operations in flight than the disk alone would to keep a
   * fast disk busy: at 256 KiB, 256 stored 9–17 % faster than 128 in
   * bench/fs-throughput.
   */
  properties[PROP_QUEUE_DEPTH] =
    g_param_spec_uint ("queue-depth", NULL,
                       "Most chunk operations the uring and gio engines run at once", 2, 4096, KV_FS_DEFAULT_QUEUE_DEPTH,
                       CONSTRUCT_FLAGS);

  /**
   * KvFsTier:probe-interval-ms:
   *
   * How often an open breaker probes the roots: the fs tier's name for
   * [property@Kv.SecondaryTier:breaker-open-ms], kept for existing
   * configurations. (`deadline-ms`, `breaker-threshold` and `clock` are
   * the base class's properties; this tier's defaults are 5000 ms and 5.)
   */
  properties[PROP_PROBE_INTERVAL_MS] =
    g_param_spec_uint ("probe-interval-ms", NULL,
                       "Milliseconds between probes of the roots while the breaker is open (same as breaker-open-ms)", 0, G_MAXUINT, 1000,
                       G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvFsTier:vllm-identity:
   *
   * For `layout=vllm`: vLLM's file-mapper identity fields as a JSON
   * object (`model_name`, `tokens_per_hash`, `blocks_per_file`, `tp_size`,
   * `pp_size`, `pcp_size`, `dcp_size`, `dtype`, `kv_cache_groups`,
   * `inference_engine`...). The directory name is the model name and the
   * first 12 hex digits of SHA-256 over its sorted compact JSON.
   */
  properties[PROP_VLLM_IDENTITY] =
    g_param_spec_string ("vllm-identity", NULL,
                         "layout=vllm: vLLM's file-mapper identity fields, as a JSON object", NULL, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:vllm-rank:
   *
   * For `layout=vllm`: the rank in the chunk directory name (`_r<rank>`).
   */
  properties[PROP_VLLM_RANK] =
    g_param_spec_uint ("vllm-rank", NULL,
                       "layout=vllm: the rank in the chunk directory name", 0, G_MAXUINT, 0, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:active-io-engine:
   *
   * The engine in use (`uring`, `gio` or `threads`) once constructed.
   */
  properties[PROP_ACTIVE_IO_ENGINE] =
    g_param_spec_string ("active-io-engine", NULL,
                         "The I/O engine in use once constructed (uring, gio or threads)", NULL,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvFsTier:trust-group:
   *
   * A group (name or number) whose members may write the tier's
   * directories and files, for a root shared with other users;
   * %NULL (the default) trusts no one but the tier's own user. Without
   * it, the tier refuses a root, namespace or shard directory that is
   * not owned by its user or that another user can write, and serves no
   * chunk file of another user. With it, directories and files that
   * belong to the group are accepted too, group-writable ones included
   * (never one anyone may write): every member of the group can then
   * plant chunks this tier serves as its own (their checksums detect
   * damage, not forgery) and delete or replace its chunks. Set it only
   * for a group of users who trust each other's processes with their
   * caches.
   */
  properties[PROP_TRUST_GROUP] =
    g_param_spec_string ("trust-group", NULL,
                         "A group whose members may also write the root, its directories and chunk files (none: only this user)", NULL, CONSTRUCT_FLAGS);

  /**
   * KvFsTier:slab-size:
   *
   * For `layout=slab`: the most bytes of one slab file (1 GiB by
   * default). [property@KvFsTier:max-size] is spread evenly over the
   * roots and cut into slab files of at most this size, each
   * preallocated when made; a slab file holds a 4096-byte header and
   * then slots of the chunk size plus 4096 bytes.
   */
  properties[PROP_SLAB_SIZE] =
    g_param_spec_uint64 ("slab-size", NULL,
                         "layout=slab: most bytes of one slab file", 8192, G_MAXUINT64, KV_FS_SLAB_DEFAULT_SIZE,
                         CONSTRUCT_FLAGS);

  /**
   * KvFsTier:slab-map:
   *
   * For `layout=slab`: whether slab files on a memory-backed root
   * (tmpfs) are mapped into the process, so that a store or load is one
   * copy between the primary slot and the file's pages instead of a
   * read or write through the kernel (on by default). Each file's pages
   * are reserved when it is opened, so a full tmpfs fails the tier's
   * construction, never a store. Other roots are never mapped.
   */
  properties[PROP_SLAB_MAP] =
    g_param_spec_boolean ("slab-map", NULL,
                          "layout=slab: map slab files on memory-backed roots (tmpfs)", TRUE,
                          CONSTRUCT_FLAGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_fs_tier_init (KvFsTier *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->namespace_ = g_strdup ("default");
  self->verify = TRUE;
  /* this tier's defaults for the base class's liveness knobs */
  kv_secondary_tier_set_deadline_ms (KV_SECONDARY_TIER (self), 5000);
  kv_circuit_breaker_set_failure_threshold (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self)), 5);
  self->n_read_threads = 16;
  self->n_write_threads = 16;
  self->inflight_bytes = KV_FS_DEFAULT_INFLIGHT_BYTES;
  self->queue_depth = KV_FS_DEFAULT_QUEUE_DEPTH;
  self->slab_size = KV_FS_SLAB_DEFAULT_SIZE;
  {
    const char *names[KV_FS_N_COUNTERS + 1] = { NULL };

    /* get_stats() reports them; the set only counts (the two the base
     * class exports are never added to it) */
    for (guint c = 0; c < KV_FS_N_COUNTERS; c++)
      names[c] = counter_info[c].name != NULL ? counter_info[c].name : "kvtier_fs_unexported";
    self->counters = kv_counter_set_new (names);
  }
  self->temp_tag = ((guint64) g_random_int () << 32) | g_random_int ();
  self->temp_marker = g_strdup_printf ("_%016" G_GINT64_MODIFIER "x-", self->temp_tag);
}

/* ---- API ---------------------------------------------------------------- */

/* Creates an fs tier on @root with every other property at its default.
 * Owner thread. */
KvFsTier *
kv_fs_tier_new (KvHostBuffer  *primary,
                const char    *root,
                GError       **error)
{
  g_return_val_if_fail (KV_IS_HOST_BUFFER (primary), NULL);
  g_return_val_if_fail (root != NULL, NULL);

  return g_initable_new (KV_TYPE_FS_TIER, NULL, error,
                         "tier-type", "fs",
                         "primary", primary,
                         "root", root,
                         NULL);
}

/* Any thread. */
guint64
kv_fs_tier_get_counter (KvFsTier    *self,
                        KvFsCounter  counter)
{
  KvSecondaryTier *tier = KV_SECONDARY_TIER (self);

  g_return_val_if_fail (KV_IS_FS_TIER (self), 0);
  g_return_val_if_fail (counter < KV_FS_N_COUNTERS, 0);

  /* Deadlines and the breaker are the base class's. */
  if (counter == KV_FS_COUNTER_TIMEOUTS)
    return kv_secondary_tier_get_n_expired_jobs (tier);
  if (counter == KV_FS_COUNTER_BREAKER_TRIPS)
    return kv_circuit_breaker_get_n_trips (kv_secondary_tier_get_circuit_breaker (tier));
  return kv_counter_set_get (self->counters, counter);
}

guint64
kv_fs_tier_get_used_bytes (KvFsTier *self)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), 0);
  return self->index != NULL ? kv_fs_index_get_used (self->index) : 0;
}

guint
kv_fs_tier_get_n_chunks (KvFsTier *self)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), 0);
  return self->index != NULL ? kv_fs_index_get_n_entries (self->index) : 0;
}

char *
kv_fs_tier_get_chunk_path (KvFsTier *self,
                           KvKey    *key)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), NULL);
  g_return_val_if_fail (self->layout != NULL, NULL);
  /* no file per chunk: see kv_fs_tier_get_slab_location() */
  if (self->layout_kind == KV_FS_LAYOUT_KIND_SLAB)
    return NULL;
  return kv_fs_layout_chunk_path (self->layout, key, NULL);
}

gboolean
kv_fs_tier_get_o_direct (KvFsTier *self,
                         guint     root)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), FALSE);
  g_return_val_if_fail (self->layout != NULL && root < kv_fs_layout_get_n_roots (self->layout), FALSE);
  return self->o_direct[root];
}

gboolean
kv_fs_tier_is_breaker_open (KvFsTier *self)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), FALSE);
  return kv_circuit_breaker_get_state (
           kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self))) != KV_CIRCUIT_STATE_CLOSED;
}

gboolean
kv_fs_tier_is_index_ready (KvFsTier *self)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), FALSE);
  return g_atomic_int_get (&self->index_ready);
}

/* Blocks until the warm-restart scan is over. */
void
kv_fs_tier_wait_index_ready (KvFsTier *self)
{
  g_return_if_fail (KV_IS_FS_TIER (self));
  if (self->scan_thread != NULL)
    {
      g_thread_join (self->scan_thread);
      self->scan_thread = NULL;
    }
}

/* The spare files in the pool (preallocate). Any thread. */
guint
kv_fs_tier_get_n_spare_files (KvFsTier *self)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), 0);
  return self->spares != NULL ? kv_fs_spares_get_n (self->spares) : 0;
}

/* Blocks until the spare-file thread has nothing left to do: the spares
 * of a previous run are taken over or deleted and, with preallocate,
 * chunks and spares fill max-size (or the disk refused more), refills
 * asked for by stores and loads so far included. Owner thread. */
void
kv_fs_tier_wait_preallocated (KvFsTier *self)
{
  g_return_if_fail (KV_IS_FS_TIER (self));
  if (self->spares != NULL)
    kv_fs_spares_wait_idle (self->spares);
}

KvFsEngine *
kv_fs_tier_get_engine (KvFsTier *self)
{
  g_return_val_if_fail (KV_IS_FS_TIER (self), NULL);
  return self->engine;
}
