/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"
#include "kvtier-workload.h"
#include "kvtier-fleet.h"

#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <json-glib/json-glib.h>

/*
 * `kvtier bench`: an engine simulation that replays a workload through the
 * whole stack. Per step, the scheduler admits waiting requests; each looks
 * its prompt chunks up in the device prefix cache, then in the tiering
 * manager (primary, then the secondary tiers); hits are loaded through
 * promotion and the device, the rest is "computed" (written into device
 * memory) and stored (device → primary, then the cascade to every tier).
 * The device is small enough that chunks fall out of it, which is what
 * offloading is for. Everything below the engine's own block table goes
 * through a KvConnector, as an engine's would; every step ends with
 * kv_connector_end_step().
 *
 * Arrival times only order the requests (a closed loop: the next request is
 * admitted as soon as there is room). The connector times every manager
 * call.
 */

/* A request whose prefix is still on its way waits; after this long it
 * loads what is there and computes the rest (a tier that never answers
 * must not hang the run). */
#define MAX_DEFER_NS (G_GINT64_CONSTANT (30) * 1000000000)
#define MIB (1024.0 * 1024.0)

/* The connector's chunk sources: device, primary, then each tier. */
enum {
  SOURCE_DEVICE = KV_CHUNK_SOURCE_DEVICE,
  SOURCE_PRIMARY = KV_CHUNK_SOURCE_PRIMARY,
  SOURCE_TIER0 = KV_CHUNK_SOURCE_TIER,   /* SOURCE_TIER0 + i: secondary tier i */
};

typedef struct _Chunk Chunk;

struct _Chunk
{
  guint64  id;
  KvKey   *key;
  gint32   slot;       /* device slot (blocks slot × bpc ...), or -1 */
  guint32  pins;       /* running requests and store jobs using it */
  GList    link;       /* in the device recency queue while on the device */
  guint32  refs;       /* times a served request referenced it */
};

typedef enum {
  REQ_WAITING,
  REQ_LOADING,
  REQ_DONE,
} ReqState;

typedef struct
{
  guint              index;
  char              *id;
  const ToolRequest *spec;
  Chunk            **chunks;
  KvRequest         *request;
  ReqState           state;
  gboolean           announced;
  guint              deferrals;
  gint64             first_deferred_ns;
  guint              loaded_from;   /* [loaded_from, loaded_to) loaded from primary */
  guint              loaded_to;
  gboolean           load_failed;
} Req;

/* The chunks of a store in flight: their device blocks stay put until the
 * connector reports the transfer. */
typedef struct
{
  Chunk     **chunks;
  guint       n;
} StoreJob;

/* How progress is shown: a bar redrawn in place on a terminal, plain lines
 * every PROGRESS_LINE_NS elsewhere (a log, a CI job), or nothing. */
typedef enum {
  PROGRESS_NONE,
  PROGRESS_BAR,
  PROGRESS_LINES,
} ProgressKind;

#define PROGRESS_LINE_NS (5 * G_GINT64_CONSTANT (1000000000))

typedef struct
{
  ProgressKind kind;
  GMutex       lock;      /* the bar, against log lines from other threads */
  GString     *bar;       /* the bar on screen now (empty: none), NULL after the run */
} Progress;

/* One per process: the log writer outlives the run. */
static Progress progress_state;

typedef struct
{
  /* options */
  guint64   chunk_size;   /* resolved from --chunk-size and the mode */
  char     *config_path;
  char     *trace_path;
  gboolean  synthetic;
  gint      conversations;
  gint      turns;
  gint      seed;
  gint      max_requests;
  char     *chunk_size_text;
  gint      layers;
  gboolean  layers_given;
  char     *gpu_size_text;
  char     *device_type;   /* --device, or NULL: the configuration's or host */
  char     *primary_size_text;
  char     *tier_size_text;
  gint      batch;
  gint      lookups_per_step;
  gdouble   prefill_rate;   /* tokens per second of simulated compute */
  gboolean  sync;
  gboolean  no_device_cache;
  char     *backpressure;
  char     *json_path;
  char     *plot_path;
  gboolean  no_verify;
  gboolean  no_progress;
  char     *progress_mode;   /* --progress: auto, always or never */
  gboolean  quiet;
  char    **tier_modules;

  /* setup */
  ToolWorkload      *workload;
  KvTierRegistry    *registry;
  KvConfig          *config;
  KvTieringManager  *manager;
  KvPrimaryTier     *primary;
  KvDevice          *device;
  KvConnector       *connector;
  KvHostDevice      *host;        /* the device, when it is a host device */
  gboolean           device_fills; /* it computes and checks chunks itself (cuda) */
  char              *temp_root;   /* the default fs tier's directory */
  char              *tier_note;   /* why the default tier is not fs */
  guint              n_tiers;
  char             **tier_names;
  KvSecondaryTier  **tiers;
  GMainContext      *completion_context; /* where module tiers complete (JavaScript) */
  gsize              chunk_bytes;
  gsize              slot_size;
  guint              bpc;
  guint              n_layers;
  gsize              block_bytes;
  guint              n_dev_slots;

  /* chunks */
  GHashTable *by_id;     /* guint64 id → Chunk */
  GHashTable *by_key;    /* KvKey → Chunk */
  Chunk     **dev_owner; /* per device slot */
  GArray     *free_slots;
  GQueue      recency;   /* device chunks, least recent first */
  guint       n_evictable; /* device chunks with no pin */

  /* requests */
  GPtrArray  *reqs;
  GQueue      waiting;
  guint       next_request;
  guint       n_running;
  guint       n_done;
  guint       n_skipped;
  GHashTable *load_jobs;   /* job id → Req */
  GHashTable *store_jobs;  /* job id → StoreJob */
  GPtrArray  *new_ids;     /* request ids scheduled this step */

  /* counters */
  guint64  lookups;
  guint64 *hits;           /* per source */
  guint64  misses;
  guint64  manager_lookups;   /* chunks looked up in the manager */
  guint64  deferrals;
  guint64  deferral_timeouts;
  guint64  tokens_prompt;
  guint64  tokens_device;
  guint64  tokens_offload;
  guint64  tokens_computed;
  guint64  store_refused;
  guint64  verified_chunks;
  guint64  verify_mismatches;
  guint64  transfer_failures;  /* device jobs that failed */
  GError  *failure;            /* why a request could not be scheduled */
  KvStats *stats;          /* everything the connector reported */

  /* steps */
  guint64  steps;
  gint64   step_mgr_ns;
  guint64  step_lookups;
  guint64  step_computed;   /* tokens computed this step */
  gint64   compute_ns;      /* simulated GPU time, whole run */
  GArray  *busy_mgr_ns;    /* gint64 per step that looked up chunks */
  GArray  *busy_lookups;   /* guint64, same steps */
  gint64   mgr_ns_total;
  gint64   lookup_ns_total;  /* inside the manager's lookups only */
  gint64   start_ns;
  gint64   end_ns;
  gint64   last_sample_ns;
  gint64   last_progress_ns;
  GPtrArray *samples;
  Progress *progress;
} Bench;

/* ------------------------------------------------------------------------ */
/* Chunks and the device prefix cache */

static void
chunk_free (Chunk *chunk)
{
  kv_key_unref (chunk->key);
  g_free (chunk);
}

static Chunk *
intern_chunk (Bench   *b,
              guint64  id)
{
  Chunk *chunk = g_hash_table_lookup (b->by_id, &id);

  if (chunk == NULL)
    {
      chunk = g_new0 (Chunk, 1);
      chunk->id = id;
      chunk->key = tool_workload_chunk_key (id);
      chunk->slot = -1;
      chunk->link.data = chunk;
      g_hash_table_insert (b->by_id, &chunk->id, chunk);
      g_hash_table_insert (b->by_key, chunk->key, chunk);
    }
  return chunk;
}

static void
pin (Bench *b,
     Chunk *chunk)
{
  g_assert (chunk->slot >= 0);
  if (chunk->pins++ == 0)
    b->n_evictable--;
}

static void
unpin (Bench *b,
       Chunk *chunk)
{
  g_assert (chunk->slot >= 0 && chunk->pins > 0);
  if (--chunk->pins > 0)
    return;
  if (!b->no_device_cache)
    {
      b->n_evictable++;
      return;
    }
  /* No prefix cache: device memory is held only while in use. */
  g_queue_unlink (&b->recency, &chunk->link);
  g_array_append_val (b->free_slots, chunk->slot);
  b->dev_owner[chunk->slot] = NULL;
  chunk->slot = -1;
}

/* Gives @chunk a device slot, evicting the least recent unpinned chunk;
 * the new chunk comes back pinned. */
static void
dev_allocate (Bench *b,
              Chunk *chunk)
{
  gint32 slot;

  g_assert (chunk->slot < 0);
  if (b->free_slots->len > 0)
    {
      slot = g_array_index (b->free_slots, gint32, b->free_slots->len - 1);
      g_array_set_size (b->free_slots, b->free_slots->len - 1);
    }
  else
    {
      GList *l = b->recency.head;
      Chunk *victim;

      while (((Chunk *) l->data)->pins > 0)
        l = l->next;
      victim = l->data;
      g_queue_unlink (&b->recency, &victim->link);
      slot = victim->slot;
      victim->slot = -1;
      b->n_evictable--;
    }
  chunk->slot = slot;
  chunk->pins = 1;
  b->dev_owner[slot] = chunk;
  g_queue_push_tail_link (&b->recency, &chunk->link);
}

static void
dev_touch (Bench *b,
           Chunk *chunk)
{
  g_queue_unlink (&b->recency, &chunk->link);
  g_queue_push_tail_link (&b->recency, &chunk->link);
}

/* The fill pattern of one (chunk × layer) piece: what "computing" it
 * writes, and what a load must bring back. */
static guint64
piece_word (guint64 id,
            guint   layer)
{
  guint64 z = id * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15) + layer + 1;

  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* A device whose memory the bench cannot touch (a GPU) computes and
 * checks chunks itself, with the same pattern, through its "fill-blocks"
 * and "check-blocks" actions. */
static void
device_compute_chunk (Bench *b,
                      Chunk *chunk)
{
  gboolean ok = FALSE;

  g_signal_emit_by_name (b->device, "fill-blocks", (guint64) chunk->id,
                         (guint) chunk->slot * b->bpc, b->bpc, &ok);
  /* A chunk the device could not write cannot be stored right. */
  if (!ok)
    b->verify_mismatches++;
}

static gboolean
device_chunk_matches (Bench *b,
                      Chunk *chunk)
{
  guint64 mismatches = G_MAXUINT64;

  g_signal_emit_by_name (b->device, "check-blocks", (guint64) chunk->id,
                         (guint) chunk->slot * b->bpc, b->bpc, &mismatches);
  return mismatches == 0;
}

static void
compute_chunk (Bench *b,
               Chunk *chunk)
{
  if (b->host == NULL)
    {
      if (b->device_fills)
        device_compute_chunk (b, chunk);
      return;
    }
  for (guint layer = 0; layer < b->n_layers; layer++)
    {
      guint64 word = piece_word (chunk->id, layer);

      for (guint j = 0; j < b->bpc; j++)
        {
          guint64 *mem = kv_host_device_peek_block (b->host, layer, chunk->slot * b->bpc + j);

          for (gsize w = 0; w < b->block_bytes / sizeof (guint64); w++)
            mem[w] = word;
        }
    }
}

static void
verify_chunk (Bench *b,
              Chunk *chunk)
{
  gboolean ok = TRUE;

  if ((b->host == NULL && !b->device_fills) || b->no_verify)
    return;
  if (b->host == NULL)
    ok = device_chunk_matches (b, chunk);
  for (guint layer = 0; layer < b->n_layers && ok && b->host != NULL; layer++)
    {
      guint64 word = piece_word (chunk->id, layer);

      for (guint j = 0; j < b->bpc && ok; j++)
        {
          const guint64 *mem = kv_host_device_peek_block (b->host, layer, chunk->slot * b->bpc + j);

          for (gsize w = 0; w < b->block_bytes / sizeof (guint64); w++)
            if (mem[w] != word)
              {
                ok = FALSE;
                break;
              }
        }
    }
  b->verified_chunks++;
  if (!ok)
    b->verify_mismatches++;
}

/* Device blocks of chunks, in block-table order. */
static guint32 *
chunk_blocks (Bench  *b,
              Chunk **chunks,
              guint   n)
{
  guint32 *blocks = g_new (guint32, (gsize) n * b->bpc + 1);

  for (guint i = 0; i < n; i++)
    for (guint j = 0; j < b->bpc; j++)
      blocks[i * b->bpc + j] = (guint32) chunks[i]->slot * b->bpc + j;
  return blocks;
}

/* ------------------------------------------------------------------------ */
/* Requests */

static void
req_free (Req *req)
{
  g_free (req->id);
  g_free (req->chunks);
  g_clear_object (&req->request);
  g_free (req);
}

static void
store_job_free (StoreJob *job)
{
  g_free (job->chunks);
  g_free (job);
}

static Req *
req_new (Bench             *b,
         guint              index,
         const ToolRequest *spec)
{
  Req *req = g_new0 (Req, 1);

  req->index = index;
  req->id = g_strdup_printf ("req-%u", index);
  req->spec = spec;
  req->chunks = g_new (Chunk *, MAX (spec->n_chunks, 1));
  for (guint i = 0; i < spec->n_chunks; i++)
    req->chunks[i] = intern_chunk (b, spec->ids[i]);
  req->request = kv_request_new (req->id, NULL);
  return req;
}

static KvKey **
keys_of (Chunk **chunks,
         guint   n)
{
  KvKey **keys = g_new (KvKey *, n + 1);

  for (guint i = 0; i < n; i++)
    keys[i] = chunks[i]->key;
  keys[n] = NULL;
  return keys;
}

/* The request's loads landed (the connector released their primary
 * slots): it runs, and finishes. */
static void
finish_request (Bench *b,
                Req   *req)
{
  guint n = req->spec->n_chunks;

  for (guint c = req->loaded_from; c < req->loaded_to && !req->load_failed; c++)
    verify_chunk (b, req->chunks[c]);

  kv_connector_finish_request (b->connector, req->request);

  /* The whole prompt is now the most recent thing on the device. */
  for (guint c = 0; c < n; c++)
    {
      if (req->chunks[c]->pins > 1 || !b->no_device_cache)
        dev_touch (b, req->chunks[c]);
      unpin (b, req->chunks[c]);
    }
  req->state = REQ_DONE;
  b->n_running--;
  b->n_done++;
  g_clear_object (&req->request);
}

typedef enum {
  SCHEDULED,
  DEFERRED,
  NO_ROOM,
  FAILED,     /* b->failure says why */
} Outcome;

/* Gives every chunk of @req that is not on the device a slot, evicting the
 * least recent unpinned chunks, and pins the whole prompt; FALSE (nothing
 * changed) when the device has no room. A chunk the prompt names twice
 * gets one slot and one pin per occurrence. */
static gboolean
dev_claim (Bench *b,
           Req   *req)
{
  guint n = req->spec->n_chunks;
  g_autofree gboolean *fresh = g_new0 (gboolean, MAX (n, 1));
  guint missing = 0;

  /* A slot of -2 marks a missing chunk counted once. */
  for (guint c = 0; c < n; c++)
    {
      Chunk *chunk = req->chunks[c];

      if (chunk->slot >= 0)
        pin (b, chunk);
      else
        {
          fresh[c] = TRUE;
          if (chunk->slot == -1)
            {
              chunk->slot = -2;
              missing++;
            }
        }
    }
  if (b->free_slots->len + b->n_evictable < missing)
    {
      for (guint c = 0; c < n; c++)
        if (!fresh[c])
          unpin (b, req->chunks[c]);
        else
          req->chunks[c]->slot = -1;
      return FALSE;
    }
  for (guint c = 0; c < n; c++)
    if (fresh[c])
      {
        if (req->chunks[c]->slot == -2)
          dev_allocate (b, req->chunks[c]);
        else
          pin (b, req->chunks[c]);
      }
  return TRUE;
}

static Outcome
try_schedule (Bench *b,
              Req   *req)
{
  guint n = req->spec->n_chunks;
  g_autofree KvKey **keys = keys_of (req->chunks, n);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autoptr(GError) error = NULL;
  guint i = 0, j, c;

  if (!req->announced)
    {
      kv_connector_add_request (b->connector, req->request);
      req->announced = TRUE;
    }

  /* 1. The device prefix cache. */
  while (i < n && req->chunks[i]->slot >= 0)
    i++;

  /* 2. The connector, for the rest: the manager up to the first miss. */
  lookup = kv_connector_lookup (b->connector, req->request, keys, n, i, &error);
  if (lookup == NULL)
    {
      g_propagate_prefixed_error (&b->failure, g_steal_pointer (&error), "lookup of %s: ", req->id);
      return FAILED;
    }
  /* [i, j) is ready in the primary tier. */
  j = i + kv_prefix_lookup_get_n_ready (lookup);
  if (!kv_prefix_lookup_is_complete (lookup))
    {
      if (req->deferrals++ == 0)
        req->first_deferred_ns = tool_now_ns ();
      b->deferrals++;
      if (tool_now_ns () - req->first_deferred_ns < MAX_DEFER_NS)
        return DEFERRED;
      /* Waited long enough: load what is there, compute the rest. */
      b->deferral_timeouts++;
    }

  /* 3. Room on the device for the chunks not there yet. Chunks already
   * there (even after a gap in the prefix) keep their slot. */
  if (!dev_claim (b, req))
    return NO_ROOM;

  /* 4. Load the offloaded hits [i, j). */
  req->loaded_from = i;
  req->loaded_to = j;
  {
    g_autofree guint32 *blocks = chunk_blocks (b, req->chunks + i, j - i);
    guint64 job = kv_connector_load (b->connector, lookup, blocks, (j - i) * b->bpc, &error);

    if (job == 0 && error != NULL)
      {
        g_propagate_prefixed_error (&b->failure, g_steal_pointer (&error), "load of %s: ", req->id);
        return FAILED;
      }
    if (job != 0)
      g_hash_table_insert (b->load_jobs, g_memdup2 (&job, sizeof job), req);
  }

  /* Recency for every chunk the request reuses, device hits included. */
  if (j > 0)
    kv_connector_touch (b->connector, req->request, keys, j);

  /* 5. Compute the rest, and store it: device → primary, then the cascade
   * when the copy is done. */
  for (c = j; c < n; c++)
    compute_chunk (b, req->chunks[c]);
  if (j < n)
    {
      g_autofree guint32 *blocks = chunk_blocks (b, req->chunks + j, n - j);
      guint64 job = kv_connector_store (b->connector, req->request, keys + j, n - j,
                                        blocks, (n - j) * b->bpc, &error);

      if (job == 0 && g_error_matches (error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE))
        b->store_refused += n - j;
      else if (job == 0 && error != NULL)
        {
          g_propagate_prefixed_error (&b->failure, g_steal_pointer (&error), "store of %s: ", req->id);
          return FAILED;
        }
      else if (job != 0)
        {
          StoreJob *sj = g_new0 (StoreJob, 1);

          /* The device reads these blocks until the store is reported. */
          sj->n = n - j;
          sj->chunks = g_memdup2 (req->chunks + j, sizeof (Chunk *) * sj->n);
          for (guint k = 0; k < sj->n; k++)
            pin (b, sj->chunks[k]);
          g_hash_table_insert (b->store_jobs, g_memdup2 (&job, sizeof job), sj);
        }
    }

  /* Accounting, once per served request. */
  b->lookups += n;
  for (c = 0; c < n; c++)
    {
      guint64 tokens = tool_request_chunk_tokens (req->spec, c);

      b->tokens_prompt += tokens;
      req->chunks[c]->refs++;
      if (c < i)
        {
          b->hits[SOURCE_DEVICE]++;
          b->tokens_device += tokens;
        }
      else if (c < j)
        {
          b->hits[kv_prefix_lookup_get_source (lookup, c)]++;
          b->tokens_offload += tokens;
        }
      else
        {
          b->misses++;
          b->tokens_computed += tokens;
          b->step_computed += tokens;
        }
    }

  g_ptr_array_add (b->new_ids, g_strdup (req->id));
  b->n_running++;
  req->state = REQ_LOADING;
  if (j == i)
    finish_request (b, req);
  return SCHEDULED;
}

/* ------------------------------------------------------------------------ */
/* Steps */

/* Takes the connector's finished transfers (loads first, each kind in job
 * order, so a --sync run is deterministic): the connector has released the
 * loads' primary slots and completed the stores in the manager (which
 * cascades them); here finished loads release their requests and finished
 * stores their device blocks. */
static guint
drain_device (Bench *b)
{
  KvJobResult **results = kv_connector_take_finished (b->connector);
  guint n = 0;

  for (KvJobResult **r = results; *r != NULL; r++, n++)
    {
      guint64 id = kv_job_result_get_job_id (*r);
      gboolean ok = kv_job_result_get_success (*r);
      Req *req = g_hash_table_lookup (b->load_jobs, &id);

      /* A failed transfer still releases what it held; the chunks a failed
       * load should have brought are not checked, and the run fails. */
      if (!ok)
        b->transfer_failures++;
      if (req != NULL)
        {
          req->load_failed = !ok;
          finish_request (b, req);
          g_hash_table_remove (b->load_jobs, &id);
        }
      else
        {
          StoreJob *sj = g_hash_table_lookup (b->store_jobs, &id);

          g_assert (sj != NULL);
          for (guint k = 0; k < sj->n; k++)
            unpin (b, sj->chunks[k]);
          g_hash_table_remove (b->store_jobs, &id);
        }
      kv_job_result_unref (*r);
    }
  g_free (results);
  return n;
}

/* ------------------------------------------------------------------------ */
/* Samples, metrics and progress */

static volatile sig_atomic_t interrupted;

static void
on_interrupt (int signum)
{
  interrupted = 1;
}

static const char *
tier_label (Bench *b,
            guint  t,
            char  *buf,
            gsize  len)
{
  g_snprintf (buf, len, "%u:%s", t + 1, kv_secondary_tier_get_tier_type (b->tiers[t]));
  return buf;
}

static gdouble
stat_value (Bench      *b,
            const char *name,
            guint       t)
{
  char label[128];
  const char *labels[] = { tier_label (b, t, label, sizeof label), NULL };
  gdouble value = 0;

  if (b->stats == NULL || !kv_stats_lookup (b->stats, name, labels, &value))
    return 0;
  return value;
}

#define STAT_READ_BYTES "vllm:kv_offload_tiering_read_bytes"
#define STAT_READ_TIME "vllm:kv_offload_tiering_read_time"
#define STAT_WRITE_BYTES "vllm:kv_offload_tiering_write_bytes"
#define STAT_WRITE_TIME "vllm:kv_offload_tiering_write_time"
#define STAT_STORES_DROPPED "vllm:kv_offload_tiering_backpressure_stores_dropped"
#define STAT_BLOCKS_DROPPED "vllm:kv_offload_tiering_backpressure_blocks_dropped"
#define STAT_DEVICE_BYTES "vllm:kv_offload_total_bytes"
#define STAT_DEVICE_TIME "vllm:kv_offload_total_time"

/* A device path's metric: GPU_to_CPU (stores) or CPU_to_GPU (loads). */
static gdouble
device_stat (Bench      *b,
             const char *name,
             const char *transfer_type)
{
  const char *labels[] = { transfer_type, NULL };
  gdouble value = 0;

  if (b->stats == NULL || !kv_stats_lookup (b->stats, name, labels, &value))
    return 0;
  return value;
}

/* Folds the connector's return-and-reset metrics (the manager's, the
 * tiers' and the device paths) into the run's totals. */
static void
collect_stats (Bench *b)
{
  g_autoptr(KvStats) stats = kv_connector_get_stats (b->connector);

  if (stats == NULL)
    return;
  if (b->stats == NULL)
    b->stats = g_steal_pointer (&stats);
  else
    kv_stats_aggregate (b->stats, stats);
}

/* The failure counters of a tier, found by the last part of their metric
 * name in whatever its stats hold (every family labelled with the tier's
 * "<i>:<type>"): vLLM's job failures, the tier's own counters (the fs
 * tier's kvtier_fs_no_space_errors …) and the base class's
 * (kvtier_tier_deadline_failures, kvtier_tier_breaker_openings …), as
 * long as its name ends the same way. */
typedef struct
{
  const char *key;        /* JSON member */
  const char *label;      /* in the table */
  const char *suffixes[4];
  gboolean    sum;        /* add the counters up (distinct things) */
} FailureKind;

static const FailureKind failure_kinds[] = {
  { "failed_stores", "failed stores", { "cascade_job_failures", NULL } },
  { "failed_loads", "failed loads", { "promotion_job_failures", NULL } },
  { "no_space", "ENOSPC", { "no_space_errors", NULL } },
  { "io_errors", "I/O errors", { "io_errors", NULL } },
  { "evictions", "evictions", { "evicted_chunks", "evictions", NULL } },
  { "corrupt_chunks", "corrupt chunks", { "corrupt_chunks", NULL } },
  /* the tier's own breaker, and those of its servers or peers
   * (kvtier_redis_node_breaker_openings, kvtier_peer_breaker_openings) */
  { "breaker_openings", "breaker openings", { "breaker_openings", NULL }, TRUE },
  { "timeouts", "timeouts", { "deadline_failures", NULL } },
  { "late_completions", "late completions", { "late_completions", NULL } },
};

#define N_FAILURE_KINDS G_N_ELEMENTS (failure_kinds)

static gboolean
name_ends_with_part (const char *name,
                     const char *suffix)
{
  gsize len = strlen (name), slen = strlen (suffix);

  /* the whole last part: "kvtier_fs_no_space_errors" ends with
   * "no_space_errors" after a '_' or ':' */
  return len > slen && g_str_has_suffix (name, suffix) &&
         (name[len - slen - 1] == '_' || name[len - slen - 1] == ':');
}

/* Each failure kind of tier @t: the largest of the counters that name it
 * (two tiers' counters may count the same thing), or their sum for the
 * kinds that add up (breakers: the tier's and each server's). */
static void
tier_failures (Bench   *b,
               guint    t,
               guint64 *out)
{
  g_autoptr(GVariant) flat = NULL;
  g_autofree char *indexed = NULL;
  const char *type = kv_secondary_tier_get_tier_type (b->tiers[t]);
  GVariantIter iter;
  const char *flat_key;
  gdouble value;

  memset (out, 0, sizeof (guint64) * N_FAILURE_KINDS);
  if (b->stats == NULL)
    return;
  indexed = g_strdup_printf ("('%u:%s',)", t + 1, type);
  flat = kv_stats_reduce (b->stats);
  g_variant_iter_init (&iter, flat);
  while (g_variant_iter_next (&iter, "{&sd}", &flat_key, &value))
    {
      const char *labels = g_strrstr (flat_key, ":(");
      g_autofree char *name = NULL;
      g_autofree char *by_type = NULL;

      if (labels == NULL)
        continue;
      by_type = g_strdup_printf ("('%s',)", type);
      if (!g_str_equal (labels + 1, indexed) && !g_str_equal (labels + 1, by_type))
        continue;
      name = g_strndup (flat_key, labels - flat_key);
      for (guint k = 0; k < N_FAILURE_KINDS; k++)
        for (guint s = 0; failure_kinds[k].suffixes[s] != NULL; s++)
          if (name_ends_with_part (name, failure_kinds[k].suffixes[s]))
            out[k] = failure_kinds[k].sum ? out[k] + (guint64) value : MAX (out[k], (guint64) value);
    }
}

static guint
n_sources (Bench *b)
{
  return SOURCE_TIER0 + b->n_tiers;
}

static guint
n_paths (Bench *b)
{
  return 2 + 2 * b->n_tiers;
}

/* Bytes moved on each path so far: device → primary, primary → device,
 * then primary → tier and tier → primary for each tier. */
static void
path_bytes (Bench   *b,
            guint64 *out)
{
  out[0] = (guint64) device_stat (b, STAT_DEVICE_BYTES, "GPU_to_CPU");
  out[1] = (guint64) device_stat (b, STAT_DEVICE_BYTES, "CPU_to_GPU");
  for (guint t = 0; t < b->n_tiers; t++)
    {
      out[2 + 2 * t] = (guint64) stat_value (b, STAT_WRITE_BYTES, t);
      out[3 + 2 * t] = (guint64) stat_value (b, STAT_READ_BYTES, t);
    }
}

static gdouble
path_time (Bench *b,
           guint  path)
{
  if (path == 0)
    return device_stat (b, STAT_DEVICE_TIME, "GPU_to_CPU");
  if (path == 1)
    return device_stat (b, STAT_DEVICE_TIME, "CPU_to_GPU");
  return stat_value (b, (path % 2 == 0) ? STAT_WRITE_TIME : STAT_READ_TIME, (path - 2) / 2);
}

static char *
path_name (Bench *b,
           guint  path)
{
  if (path == 0)
    return g_strdup ("device → primary");
  if (path == 1)
    return g_strdup ("primary → device");
  if (path % 2 == 0)
    return g_strdup_printf ("primary → %s", b->tier_names[(path - 2) / 2]);
  return g_strdup_printf ("%s → primary", b->tier_names[(path - 2) / 2]);
}

static char *
path_key (Bench *b,
          guint  path)
{
  if (path == 0)
    return g_strdup ("device_to_primary");
  if (path == 1)
    return g_strdup ("primary_to_device");
  if (path % 2 == 0)
    return g_strdup_printf ("primary_to_%s", b->tier_names[(path - 2) / 2]);
  return g_strdup_printf ("%s_to_primary", b->tier_names[(path - 2) / 2]);
}

static void
sample_free (ToolSample *sample)
{
  g_free (sample->hits);
  g_free (sample->bytes);
  g_free (sample);
}

static void
take_sample (Bench  *b,
             gint64  now)
{
  ToolSample *sample = g_new0 (ToolSample, 1);

  collect_stats (b);
  sample->t_s = (now - b->start_ns) / 1e9;
  sample->lookups = b->lookups;
  sample->misses = b->misses;
  sample->hits = g_memdup2 (b->hits, sizeof (guint64) * n_sources (b));
  sample->bytes = g_new0 (guint64, n_paths (b));
  path_bytes (b, sample->bytes);
  g_ptr_array_add (b->samples, sample);
  b->last_sample_ns = now;
}

static gdouble
hit_rate (Bench *b)
{
  return b->lookups > 0 ? 100.0 * (b->lookups - b->misses) / b->lookups : 0.0;
}

/* The log writer of a run: a log line (a tier's message, from any
 * thread) goes above the progress bar, which is drawn again below it. */
static GLogWriterOutput
write_log_above_bar (GLogLevelFlags   level,
                     const GLogField *fields,
                     gsize            n_fields,
                     gpointer         data)
{
  Progress *progress = data;
  GLogWriterOutput output;

  g_mutex_lock (&progress->lock);
  if (progress->bar != NULL && progress->bar->len > 0)
    fputs ("\r\033[K", stderr);
  fflush (stderr);
  output = g_log_writer_default (level, fields, n_fields, NULL);
  if (progress->bar != NULL && progress->bar->len > 0)
    fputs (progress->bar->str, stderr);
  fflush (stderr);
  g_mutex_unlock (&progress->lock);
  return output;
}

static void
show_progress (Bench    *b,
               gint64    now,
               gboolean  final)
{
  guint total = b->reqs->len;
  guint done = b->n_done + b->n_skipped;
  gdouble elapsed = (now - b->start_ns) / 1e9;
  guint pct = total > 0 ? (guint) ((guint64) done * 100 / total) : 100;
  gdouble rate = elapsed > 0 ? done / elapsed : 0.0;
  Progress *progress = b->progress;

  b->last_progress_ns = now;
  if (progress->kind == PROGRESS_LINES)
    {
      /* plain lines, whole and timed, for logs */
      g_mutex_lock (&progress->lock);
      fprintf (stderr, "kvtier bench: %s%.0f s: %3u %%  %u/%u requests  %.0f req/s  hit rate "
               "%.1f %%\n", final ? "done at " : "", elapsed, pct, done, total, rate, hit_rate (b));
      fflush (stderr);
      g_mutex_unlock (&progress->lock);
      return;
    }
  if (progress->kind != PROGRESS_BAR)
    return;

  g_mutex_lock (&progress->lock);
  if (progress->bar == NULL)
    progress->bar = g_string_new (NULL);
  if (final)
    {
      g_string_truncate (progress->bar, 0);
      fputs ("\r\033[K", stderr);
    }
  else
    {
      char bar[31];
      guint filled = total > 0 ? (guint) ((guint64) done * 30 / total) : 30;

      for (guint k = 0; k < 30; k++)
        bar[k] = k < filled ? '#' : '.';
      bar[30] = '\0';
      g_string_printf (progress->bar, "  [%s] %3u%%  %u/%u requests  %.0f req/s  hit rate %.1f %%  ",
                       bar, pct, done, total, rate, hit_rate (b));
      fputs ("\r", stderr);
      fputs (progress->bar->str, stderr);
    }
  fflush (stderr);
  g_mutex_unlock (&progress->lock);
}

/* ------------------------------------------------------------------------ */
/* The loop */

static guint64
waiting_chunks (Bench *b)
{
  guint64 n = 0;

  for (GList *l = b->waiting.head; l != NULL; l = l->next)
    n += ((Req *) l->data)->spec->n_chunks;
  return n;
}

/* Moves requests from the workload into the waiting queue: enough to fill
 * a step, not so many that thousands are announced to the manager early. */
static void
refill_waiting (Bench *b)
{
  guint want = b->lookups_per_step > 0 ? 0 : (guint) b->batch * 2;

  while (b->next_request < b->reqs->len)
    {
      Req *req;

      if (b->lookups_per_step > 0)
        {
          if (waiting_chunks (b) >= (guint64) b->lookups_per_step * 2)
            break;
        }
      else if (b->waiting.length >= want)
        break;

      req = g_ptr_array_index (b->reqs, b->next_request++);
      if (req->spec->n_chunks > b->n_dev_slots)
        {
          /* Longer than the whole device: no engine could run it. */
          b->n_skipped++;
          req->state = REQ_DONE;
          continue;
        }
      g_queue_push_tail (&b->waiting, req);
    }
}

static gboolean
work_left (Bench *b)
{
  if (b->n_done + b->n_skipped < b->reqs->len || b->waiting.length > 0)
    return TRUE;
  return kv_connector_has_pending_work (b->connector);
}

/* Sleeps until a device transfer or a tier job finished. */
static void
wait_for_wakeup (Bench *b,
                 int    timeout_ms)
{
  struct pollfd pfd = { kv_connector_get_wakeup_fd (b->connector), POLLIN, 0 };

  (void) poll (&pfd, 1, timeout_ms);
}

static gboolean
run (Bench   *b,
     GError **error)
{
  gboolean progress = b->progress->kind != PROGRESS_NONE;
  gint64 progress_every = b->progress->kind == PROGRESS_BAR ? 100 * G_GINT64_CONSTANT (1000000)
                                                             : PROGRESS_LINE_NS;
  guint64 idle_steps = 0;

  b->start_ns = tool_now_ns ();
  b->last_sample_ns = b->start_ns;
  take_sample (b, b->start_ns);
  if (progress)
    show_progress (b, b->start_ns, FALSE);

  while (!interrupted)
    {
      gint64 step_start = tool_now_ns ();
      guint completions;
      guint admitted = 0;
      gboolean stop_admitting = FALSE;
      gint64 now;
      gdouble mgr_s = kv_connector_get_manager_time (b->connector);
      guint64 looked_up = kv_connector_get_n_manager_lookups (b->connector);

      b->step_mgr_ns = 0;
      b->step_lookups = 0;
      b->step_computed = 0;
      g_ptr_array_set_size (b->new_ids, 0);

      if (b->completion_context != NULL)
        while (g_main_context_iteration (b->completion_context, FALSE))
          ;
      completions = drain_device (b);
      refill_waiting (b);

      for (GList *l = b->waiting.head, *next; l != NULL && !stop_admitting; l = next)
        {
          Req *req = l->data;

          next = l->next;
          b->step_lookups = kv_connector_get_n_manager_lookups (b->connector) - looked_up;
          if (b->lookups_per_step > 0 ? b->step_lookups >= (guint64) b->lookups_per_step
                                      : admitted >= (guint) b->batch)
            break;
          switch (try_schedule (b, req))
            {
            case SCHEDULED:
              g_queue_delete_link (&b->waiting, l);
              admitted++;
              break;
            case DEFERRED:
              /* --sync keeps the workload's order: nothing overtakes. */
              if (b->sync)
                stop_admitting = TRUE;
              break;
            case NO_ROOM:
              stop_admitting = TRUE;
              break;
            case FAILED:
              g_propagate_error (error, g_steal_pointer (&b->failure));
              return FALSE;
            default:
              g_assert_not_reached ();
            }
          if (b->lookups_per_step > 0 && next == NULL)
            {
              refill_waiting (b);
              next = l->next;
            }
        }

      if (b->sync)
        {
          if (!kv_connector_wait (b->connector, error))
            return FALSE;
          completions += drain_device (b);
        }

      g_ptr_array_add (b->new_ids, NULL);
      kv_connector_end_step (b->connector, (const char * const *) b->new_ids->pdata, NULL);
      g_ptr_array_set_size (b->new_ids, b->new_ids->len - 1);
      /* The step's manager time, from the connector's clock. */
      b->step_mgr_ns = (gint64) ((kv_connector_get_manager_time (b->connector) - mgr_s) * 1e9);
      b->step_lookups = kv_connector_get_n_manager_lookups (b->connector) - looked_up;

      if (b->sync)
        for (guint t = 0; t < b->n_tiers; t++)
          if (!kv_secondary_tier_drain_jobs (b->tiers[t], error))
            return FALSE;

      /* The GPU runs the step: prefill of the computed tokens, while the
       * transfers go on in the background. */
      if (b->prefill_rate > 0 && b->step_computed > 0)
        {
          gint64 ns = (gint64) (b->step_computed * 1e9 / b->prefill_rate);

          b->compute_ns += ns;
          g_usleep (ns / 1000);
        }

      b->steps++;
      b->mgr_ns_total += b->step_mgr_ns;
      if (admitted > 0 || b->step_lookups > 0)
        g_debug ("step %" G_GUINT64_FORMAT ": %u scheduled, %" G_GUINT64_FORMAT " manager lookups,"
                 " manager %.3f ms, step %.3f ms, %u waiting, %u free device slots%s",
                 b->steps, admitted, b->step_lookups, b->step_mgr_ns / 1e6,
                 (tool_now_ns () - step_start) / 1e6, b->waiting.length, b->free_slots->len,
                 stop_admitting ? ", admission stopped" : "");
      if (b->step_lookups > 0)
        {
          g_array_append_val (b->busy_mgr_ns, b->step_mgr_ns);
          g_array_append_val (b->busy_lookups, b->step_lookups);
        }

      now = tool_now_ns ();
      if (now - b->last_sample_ns >= 200 * G_GINT64_CONSTANT (1000000))
        take_sample (b, now);
      if (progress && now - b->last_progress_ns >= progress_every)
        show_progress (b, now, FALSE);

      if (!work_left (b))
        break;

      /* Nothing moved: sleep until a transfer finishes (or 1 ms, for
       * lookups that resolve without a completion). */
      if (admitted == 0 && completions == 0)
        {
          idle_steps++;
          wait_for_wakeup (b, 1);
        }
    }

  b->end_ns = tool_now_ns ();
  b->manager_lookups = kv_connector_get_n_manager_lookups (b->connector);
  b->lookup_ns_total = (gint64) (kv_connector_get_lookup_time (b->connector) * 1e9);
  take_sample (b, b->end_ns);
  if (progress)
    show_progress (b, b->end_ns, TRUE);
  if (interrupted)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_CANCELLED, "interrupted");
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* Setup */

static gboolean
set (KvConfig    *config,
     const char  *section,
     const char  *key,
     const char  *value,
     GError     **error)
{
  return kv_config_set_value (config, section, key, value, error);
}

static gboolean
type_has_property (KvTierRegistry *registry,
                   const char     *type_name,
                   const char     *property)
{
  GType type = kv_tier_registry_lookup_tier_type (registry, type_name, NULL);
  g_autoptr(GTypeClass) klass = NULL;

  if (type == G_TYPE_INVALID)
    return FALSE;
  klass = g_type_class_ref (type);
  return g_object_class_find_property (G_OBJECT_CLASS (klass), property) != NULL;
}

static gboolean
build_config (Bench   *b,
              GError **error)
{
  guint64 chunk_size = b->chunk_size, gpu_size = 0, primary_size = 0, tier_size = 0;
  gboolean have_chunk = b->chunk_size_text != NULL;
  gboolean have_gpu = b->gpu_size_text != NULL;
  g_autofree char *slot_text = NULL;
  gboolean overhead = b->lookups_per_step > 0;
  char text[64];

  /* Defaults, in chunks: a device that holds a few batches, a primary
   * tier twice that, the rest goes to the secondary tier. */
  gpu_size = chunk_size * (overhead ? (guint64) b->lookups_per_step * 3 : 1024);
  primary_size = chunk_size * (overhead ? (guint64) b->lookups_per_step * 6 : 2048);
  if (have_gpu && !tool_parse_size (b->gpu_size_text, &gpu_size, error))
    return FALSE;
  if (b->primary_size_text != NULL && !tool_parse_size (b->primary_size_text, &primary_size, error))
    return FALSE;
  if (b->tier_size_text != NULL && !tool_parse_size (b->tier_size_text, &tier_size, error))
    return FALSE;

  if (b->config_path != NULL)
    {
      b->config = kv_config_new_from_file (b->registry, b->config_path, error);
      if (b->config == NULL)
        return FALSE;
      /* Without --chunk-size a chunk fills the configuration's slot; a
       * configuration that sets no slot-size keeps the bench's chunk size
       * rather than the library's default slot (2 MiB), which would make
       * every chunk eight times larger and a tier sized for the bench's
       * chunks hold an eighth as many. */
      if (!have_chunk &&
          (slot_text = kv_config_get_value (b->config, "primary", "slot-size")) == NULL)
        {
          g_autofree char *size_text = tool_format_size (chunk_size);

          g_printerr ("kvtier bench: %s sets no [primary] slot-size: chunks are %s, the"
                      " bench's default (set slot-size or --chunk-size to change it)\n",
                      b->config_path, size_text);
          have_chunk = TRUE;
        }
      else if (!have_chunk)
        {
          chunk_size = kv_config_get_slot_size (b->config);
          if (!have_gpu)
            gpu_size = chunk_size * (overhead ? (guint64) b->lookups_per_step * 3 : 1024);
          if (chunk_size % ((guint64) b->layers * 8) != 0)
            {
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                           "the slot size %" G_GUINT64_FORMAT " of %s does not split into"
                           " %d layers of whole 8-byte words", chunk_size, b->config_path,
                           b->layers);
              return FALSE;
            }
        }
      if (b->primary_size_text != NULL)
        {
          g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, primary_size);
          if (!set (b->config, "primary", "size", text, error))
            return FALSE;
        }
      if (have_chunk)
        {
          g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, chunk_size);
          if (!set (b->config, "primary", "slot-size", text, error))
            return FALSE;
        }
    }
  else
    {
      g_autofree char *tier_type = NULL;

      b->config = kv_config_new (b->registry);
      g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, primary_size);
      if (!set (b->config, "primary", "size", text, error))
        return FALSE;
      g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, chunk_size);
      if (!set (b->config, "primary", "slot-size", text, error))
        return FALSE;

      if (kv_tier_registry_lookup_tier_type (b->registry, "fs", NULL) != G_TYPE_INVALID)
        tier_type = g_strdup ("fs");
      else if (kv_tier_registry_lookup_tier_type (b->registry, "example", NULL) != G_TYPE_INVALID)
        {
          tier_type = g_strdup ("example");
          b->tier_note = g_strdup ("the fs tier plugin was not found; using the in-memory"
                                   " example tier instead");
        }
      else
        b->tier_note = g_strdup ("no tier plugin was found (neither fs nor example):"
                                 " primary tier only");

      if (tier_type != NULL)
        {
          g_autofree char *section = g_strdup_printf ("tier %s", tier_type);

          if (!set (b->config, section, "type", tier_type, error))
            return FALSE;
          if (g_str_equal (tier_type, "fs"))
            {
              b->temp_root = g_dir_make_tmp ("kvtier-bench-XXXXXX", error);
              if (b->temp_root == NULL)
                return FALSE;
              if (!set (b->config, section, "root", b->temp_root, error))
                return FALSE;
            }
          /* The EMA presets are seconds per MiB for real chunks (tens of
           * MiB); the bench's scaled-down chunks would read as slow, so the
           * detector is opt-in here. */
          if (b->backpressure != NULL &&
              !set (b->config, section, "backpressure", b->backpressure, error))
            return FALSE;
          if (b->tier_size_text != NULL)
            {
              if (!type_has_property (b->registry, tier_type, "max-size"))
                {
                  g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                               "--tier-size: the %s tier has no max-size property", tier_type);
                  return FALSE;
                }
              g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, tier_size);
              if (!set (b->config, section, "max-size", text, error))
                return FALSE;
            }
        }
    }

  /* The device: from the configuration, or --device (the simulated GPU by
   * default) sized by the options (one block per chunk per layer). */
  if (b->device_type != NULL && kv_config_get_device_type (b->config) != NULL &&
      !g_str_equal (b->device_type, kv_config_get_device_type (b->config)))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "--device %s: the configuration's [device] is of type %s",
                   b->device_type, kv_config_get_device_type (b->config));
      return FALSE;
    }
  if (kv_config_get_device_type (b->config) == NULL || have_chunk || have_gpu || b->layers_given)
    {
      guint64 n_blocks = gpu_size / chunk_size;

      if (kv_config_get_device_type (b->config) == NULL &&
          !set (b->config, "device", "type", b->device_type != NULL ? b->device_type : "host",
                error))
        return FALSE;
      if (n_blocks == 0 || n_blocks > G_MAXUINT32)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "--gpu-size %" G_GUINT64_FORMAT " holds no chunk of %" G_GUINT64_FORMAT
                       " bytes", gpu_size, chunk_size);
          return FALSE;
        }
      g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, n_blocks);
      if (!set (b->config, "device", "n-blocks", text, error))
        return FALSE;
      g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, chunk_size / (guint64) b->layers);
      if (!set (b->config, "device", "block-bytes", text, error))
        return FALSE;
      g_snprintf (text, sizeof text, "%d", b->layers);
      if (!set (b->config, "device", "n-layers", text, error))
        return FALSE;
      if (!set (b->config, "device", "blocks-per-chunk", "1", error))
        return FALSE;
    }
  return TRUE;
}

static gboolean
setup (Bench   *b,
       GError **error)
{
  g_auto(GStrv) names = NULL;
  KvHostBuffer *buffer;

  if (!tool_load_tier_modules (b->registry, b->tier_modules, error) ||
      !build_config (b, error))
    return FALSE;

  b->manager = kv_config_create_manager (b->config, error);
  if (b->manager == NULL)
    return FALSE;
  b->primary = g_object_ref (kv_tiering_manager_get_primary (b->manager));
  buffer = kv_primary_tier_get_buffer (b->primary);
  b->device = kv_config_create_device (b->config, buffer, error);
  if (b->device == NULL)
    return FALSE;
  if (KV_IS_HOST_DEVICE (b->device))
    b->host = KV_HOST_DEVICE (b->device);
  else
    b->device_fills = g_signal_lookup ("fill-blocks", G_OBJECT_TYPE (b->device)) != 0 &&
                      g_signal_lookup ("check-blocks", G_OBJECT_TYPE (b->device)) != 0;
  b->connector = kv_connector_new (b->manager, b->device, error);
  if (b->connector == NULL)
    return FALSE;

  b->bpc = kv_device_get_blocks_per_chunk (b->device);
  b->n_layers = kv_device_get_n_layers (b->device);
  b->block_bytes = kv_device_get_block_bytes (b->device);
  b->chunk_bytes = kv_device_get_chunk_bytes (b->device);
  b->slot_size = kv_primary_tier_get_slot_size (b->primary);
  b->n_dev_slots = kv_device_get_n_blocks (b->device) / b->bpc;
  if (b->block_bytes % sizeof (guint64) != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "device block-bytes %" G_GSIZE_FORMAT " is not a multiple of 8",
                   b->block_bytes);
      return FALSE;
    }

  names = kv_config_get_tier_names (b->config);
  b->n_tiers = kv_tiering_manager_get_n_tiers (b->manager);
  g_assert (b->n_tiers == g_strv_length (names));
  b->tier_names = g_steal_pointer (&names);
  b->tiers = g_new0 (KvSecondaryTier *, b->n_tiers + 1);
  for (guint t = 0; t < b->n_tiers; t++)
    {
      if (g_str_equal (b->tier_names[t], "device") || g_str_equal (b->tier_names[t], "primary"))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "a tier may not be called '%s' in a bench (the report uses the name)",
                       b->tier_names[t]);
          return FALSE;
        }
      b->tiers[t] = kv_tiering_manager_get_tier (b->manager, t);
      /* a tier whose jobs complete from main-loop callbacks (a JavaScript
       * tier module): each step iterates that context */
      if (b->completion_context == NULL)
        g_object_get (b->tiers[t], "completion-context", &b->completion_context, NULL);
    }
  b->hits = g_new0 (guint64, n_sources (b));

  b->dev_owner = g_new0 (Chunk *, b->n_dev_slots);
  b->free_slots = g_array_sized_new (FALSE, FALSE, sizeof (gint32), b->n_dev_slots);
  for (guint s = b->n_dev_slots; s > 0; s--)
    {
      gint32 slot = (gint32) s - 1;

      g_array_append_val (b->free_slots, slot);
    }

  for (guint r = 0; r < b->workload->requests->len; r++)
    g_ptr_array_add (b->reqs, req_new (b, r, &g_array_index (b->workload->requests,
                                                              ToolRequest, r)));

  /* Fault the primary tier in now: first-touch page faults would
   * otherwise dominate the first pass over it. */
  memset (kv_host_buffer_get_data (buffer), 0, kv_host_buffer_get_size (buffer));
  return TRUE;
}

static void
teardown (Bench *b)
{
  g_autoptr(GError) error = NULL;
  gint64 t0 = tool_now_ns ();

  if (b->connector != NULL)
    {
      if (!kv_connector_shutdown (b->connector, &error))
        g_printerr ("kvtier: shutdown: %s\n", error->message);
    }
  else
    {
      /* Setup failed before the connector: shut down what was made. */
      if (b->device != NULL && !kv_device_shutdown (b->device, &error))
        {
          g_printerr ("kvtier: device shutdown: %s\n", error->message);
          g_clear_error (&error);
        }
      if (b->manager != NULL && !kv_tiering_manager_shutdown (b->manager, &error))
        g_printerr ("kvtier: manager shutdown: %s\n", error->message);
    }
  g_debug ("shutdown took %.2f s", (tool_now_ns () - t0) / 1e9);

  g_clear_pointer (&b->reqs, g_ptr_array_unref);
  g_clear_pointer (&b->load_jobs, g_hash_table_unref);
  g_clear_pointer (&b->store_jobs, g_hash_table_unref);
  g_clear_object (&b->connector);
  g_clear_object (&b->device);
  g_clear_object (&b->primary);
  g_clear_object (&b->manager);
  g_clear_object (&b->config);
  g_clear_pointer (&b->by_key, g_hash_table_unref);
  g_clear_pointer (&b->by_id, g_hash_table_unref);
  g_queue_clear (&b->waiting);
  g_free (b->dev_owner);
  g_clear_pointer (&b->free_slots, g_array_unref);
  g_clear_pointer (&b->new_ids, g_ptr_array_unref);
  g_clear_pointer (&b->busy_mgr_ns, g_array_unref);
  g_clear_pointer (&b->busy_lookups, g_array_unref);
  g_clear_pointer (&b->samples, g_ptr_array_unref);
  g_clear_object (&b->stats);
  g_clear_error (&b->failure);
  g_free (b->hits);
  g_free (b->tiers);
  g_clear_pointer (&b->completion_context, g_main_context_unref);
  g_strfreev (b->tier_names);
  g_strfreev (b->tier_modules);
  g_clear_object (&b->registry);
  g_clear_pointer (&b->workload, tool_workload_free);
  if (b->temp_root != NULL)
    {
      t0 = tool_now_ns ();
      tool_remove_tree (b->temp_root);
      g_debug ("removing %s took %.2f s", b->temp_root, (tool_now_ns () - t0) / 1e9);
    }
  g_free (b->temp_root);
  g_free (b->tier_note);
  g_free (b->config_path);
  g_free (b->trace_path);
  g_free (b->chunk_size_text);
  g_free (b->gpu_size_text);
  g_free (b->device_type);
  g_free (b->primary_size_text);
  g_free (b->tier_size_text);
  g_free (b->json_path);
  g_free (b->plot_path);
  g_free (b->backpressure);
  g_free (b->progress_mode);
  g_mutex_lock (&b->progress->lock);
  if (b->progress->bar != NULL)
    g_string_free (g_steal_pointer (&b->progress->bar), TRUE);
  g_mutex_unlock (&b->progress->lock);
}

/* ------------------------------------------------------------------------ */
/* Report */

static int
compare_gint64 (gconstpointer a,
                gconstpointer b)
{
  gint64 x = *(const gint64 *) a, y = *(const gint64 *) b;

  return x < y ? -1 : x > y;
}

static gint64
percentile (GArray  *sorted,
            gdouble  p)
{
  guint index;

  if (sorted->len == 0)
    return 0;
  index = (guint) ceil (p / 100.0 * sorted->len);
  index = CLAMP (index, 1, sorted->len) - 1;
  return g_array_index (sorted, gint64, index);
}

typedef struct
{
  gdouble wall_s;
  gdouble mgr_s;
  gint64  p50_ns;
  gint64  p99_ns;
  gint64  max_ns;
  gdouble lookups_mean;
  guint64 lookups_max;
  guint64 busy_steps;
} Summary;

static void
summarize (Bench   *b,
           Summary *s)
{
  g_autoptr(GArray) sorted = g_array_copy (b->busy_mgr_ns);
  guint64 total_lookups = 0;

  g_array_sort (sorted, compare_gint64);
  s->wall_s = (b->end_ns - b->start_ns) / 1e9;
  s->mgr_s = b->mgr_ns_total / 1e9;
  s->p50_ns = percentile (sorted, 50);
  s->p99_ns = percentile (sorted, 99);
  s->max_ns = sorted->len > 0 ? g_array_index (sorted, gint64, sorted->len - 1) : 0;
  s->busy_steps = b->busy_lookups->len;
  s->lookups_max = 0;
  for (guint k = 0; k < b->busy_lookups->len; k++)
    {
      guint64 v = g_array_index (b->busy_lookups, guint64, k);

      total_lookups += v;
      s->lookups_max = MAX (s->lookups_max, v);
    }
  s->lookups_mean = s->busy_steps > 0 ? (gdouble) total_lookups / s->busy_steps : 0;
}

static char *
format_duration_ns (gint64 ns)
{
  if (ns < 1000)
    return g_strdup_printf ("%" G_GINT64_FORMAT " ns", ns);
  if (ns < 1000000)
    return g_strdup_printf ("%.1f µs", ns / 1e3);
  return g_strdup_printf ("%.2f ms", ns / 1e6);
}

static char *
format_tokens (guint64 tokens)
{
  if (tokens >= 1000000)
    return g_strdup_printf ("%.1f M", tokens / 1e6);
  return tool_format_count (tokens);
}

static gdouble
percent (guint64 part,
         guint64 whole)
{
  return whole > 0 ? 100.0 * part / whole : 0.0;
}

static const char *
source_name (Bench *b,
             guint  source)
{
  if (source == SOURCE_DEVICE)
    return "device";
  if (source == SOURCE_PRIMARY)
    return "primary";
  return b->tier_names[source - SOURCE_TIER0];
}

/* What is run on what, printed before the run starts. */
static void
print_header (Bench *b)
{
  g_autofree char *chunk = tool_format_size (b->chunk_bytes);
  g_autofree char *dev = tool_format_size ((guint64) b->n_dev_slots * b->chunk_bytes);
  g_autofree char *prim = tool_format_size ((guint64) kv_primary_tier_get_n_slots (b->primary) * b->slot_size);
  g_autofree char *slot = tool_format_size (b->slot_size);
  GString *tiers = g_string_new (NULL);

  for (guint t = 0; t < b->n_tiers; t++)
    {
      const char *type = kv_secondary_tier_get_tier_type (b->tiers[t]);

      g_string_append_printf (tiers, "%s%s (%s)", t > 0 ? ", " : "", b->tier_names[t], type);
    }
  if (b->temp_root != NULL)
    g_string_append_printf (tiers, " in %s (removed at exit)", b->temp_root);

  printf ("kvtier bench: %s\n", b->workload->description);
  printf ("  device   %s: %u chunks of %s (%s), %u layers%s\n",
          kv_config_get_device_type (b->config), b->n_dev_slots, chunk, dev, b->n_layers,
          b->sync ? ", synchronous steps" : "");
  printf ("  primary  %u slots of %s (%s)\n", kv_primary_tier_get_n_slots (b->primary), slot, prim);
  printf ("  tiers    %s\n", tiers->len > 0 ? tiers->str : "none");
  if (b->tier_note != NULL)
    printf ("  note     %s\n", b->tier_note);
  printf ("  requests %u", b->reqs->len);
  if (b->lookups_per_step > 0)
    printf (", steps of about %d chunk lookups\n", b->lookups_per_step);
  else
    printf (", up to %d scheduled per step\n", b->batch);
  printf ("\n");
  fflush (stdout);
  g_string_free (tiers, TRUE);
}

static void
print_report (Bench         *b,
              const Summary *s)
{
  g_autofree char *p50 = format_duration_ns (s->p50_ns);
  g_autofree char *p99 = format_duration_ns (s->p99_ns);
  g_autofree char *prompt = format_tokens (b->tokens_prompt);
  g_autofree char *computed = format_tokens (b->tokens_computed);
  g_autofree char *saved = format_tokens (b->tokens_offload);
  g_autofree char *without = format_tokens (b->tokens_computed + b->tokens_offload);
  g_autofree guint64 *bytes = g_new0 (guint64, n_paths (b));

  path_bytes (b, bytes);
  printf ("  %-28s %12" G_GUINT64_FORMAT "\n", "steps", b->steps);

  printf ("  %-28s %12u", "requests", b->n_done);
  if (b->n_skipped > 0)
    printf ("   (%u skipped: longer than the device)", b->n_skipped);
  printf ("\n");
  printf ("  %-28s %12" G_GUINT64_FORMAT "\n", "prefix chunks looked up", b->lookups);
  for (guint src = 0; src < n_sources (b); src++)
    {
      g_autofree char *label = g_strdup_printf ("  %s %s", src == 0 ? "hits " : "     ",
                                                source_name (b, src));

      printf ("  %-28s %12" G_GUINT64_FORMAT "   %5.1f %%\n", label, b->hits[src],
              percent (b->hits[src], b->lookups));
    }
  printf ("  %-28s %12" G_GUINT64_FORMAT "   %5.1f %%\n", "  misses", b->misses,
          percent (b->misses, b->lookups));
  printf ("  prefill tokens: %s in prompts, %s computed; without offloading %s would"
          " have been computed:\n", prompt, computed, without);
  printf ("  %-28s %12s   %5.1f %% of prompt tokens\n", "saved by offloading", saved,
          percent (b->tokens_offload, b->tokens_prompt));
  printf ("\n");

  printf ("  %-28s %12s %12s %12s\n", "path", "bytes", "GB/s (run)", "GB/s (jobs)");
  for (guint p = 0; p < n_paths (b); p++)
    {
      g_autofree char *name = path_name (b, p);
      g_autofree char *size = tool_format_size (bytes[p]);
      gdouble job_time = path_time (b, p);

      printf ("  %-30s %12s %12.2f ", name, size, s->wall_s > 0 ? bytes[p] / s->wall_s / 1e9 : 0.0);
      if (job_time > 0)
        printf ("%12.2f\n", bytes[p] / job_time / 1e9);
      else
        printf ("%12s\n", "-");
    }
  printf ("\n");

  for (guint t = 0; t < b->n_tiers; t++)
    printf ("  %-28s %s: %.0f stores (%.0f chunks)\n", t == 0 ? "backpressure drops" : "",
            b->tier_names[t], stat_value (b, STAT_STORES_DROPPED, t),
            stat_value (b, STAT_BLOCKS_DROPPED, t));
  for (guint t = 0; t < b->n_tiers; t++)
    {
      guint64 failures[N_FAILURE_KINDS];
      GString *line = g_string_new (NULL);

      tier_failures (b, t, failures);
      for (guint k = 0; k < N_FAILURE_KINDS; k++)
        g_string_append_printf (line, "%s%" G_GUINT64_FORMAT " %s", k > 0 ? ", " : "",
                                failures[k], failure_kinds[k].label);
      printf ("  %-28s %s: %s\n", t == 0 ? "failures" : "", b->tier_names[t], line->str);
      g_string_free (line, TRUE);
    }
  if (b->store_refused > 0)
    printf ("  %-28s %" G_GUINT64_FORMAT " chunks (primary tier full of pinned chunks)\n",
            "stores refused", b->store_refused);
  printf ("  %-28s p50 %s, p99 %s over %" G_GUINT64_FORMAT " steps with lookups"
          " (mean %.0f lookups per step)\n", "manager time per step", p50, p99, s->busy_steps,
          s->lookups_mean);
  printf ("  %-28s %.3f s of %.2f s wall time: %.2f %%\n", "manager time, total", s->mgr_s,
          s->wall_s, percent ((guint64) (s->mgr_s * 1e6), (guint64) (s->wall_s * 1e6)));
  if (b->manager_lookups > 0)
    printf ("  %-28s %" G_GUINT64_FORMAT " in %.3f s, %.0f ns each (tier lookups included)\n",
            "manager lookups", b->manager_lookups, b->lookup_ns_total / 1e9,
            (gdouble) b->lookup_ns_total / b->manager_lookups);
  printf ("  %-28s %.2f s, %.0f requests/s", "wall time", s->wall_s,
          s->wall_s > 0 ? b->n_done / s->wall_s : 0.0);
  if (b->prefill_rate > 0)
    printf (" (%.2f s of it simulated prefill at %.0f tokens/s)", b->compute_ns / 1e9,
            b->prefill_rate);
  printf ("\n");
  if ((b->host != NULL || b->device_fills) && !b->no_verify)
    printf ("  %-28s %" G_GUINT64_FORMAT " loaded chunks checked byte for byte, %" G_GUINT64_FORMAT
            " mismatches\n", "verified", b->verified_chunks, b->verify_mismatches);
  if (b->deferrals > 0)
    printf ("  %-28s %" G_GUINT64_FORMAT " (a prefix still on its way; %" G_GUINT64_FORMAT
            " gave up after %.0f s)\n", "deferred schedulings", b->deferrals,
            b->deferral_timeouts, MAX_DEFER_NS / 1e9);
}

/* The schema is documented in doc/bench.md; add fields, never change one. */
static gboolean
write_json (Bench          *b,
            const Summary  *s,
            const char     *path,
            GError        **error)
{
  g_autoptr(JsonBuilder) builder = json_builder_new ();
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree guint64 *bytes = g_new0 (guint64, n_paths (b));

  path_bytes (b, bytes);
  json_builder_begin_object (builder);
  tool_json_add_string (builder, "schema", "kvtier-bench/1");

  json_builder_set_member_name (builder, "workload");
  json_builder_begin_object (builder);
  tool_json_add_string (builder, "kind", b->workload->kind);
  tool_json_add_string (builder, "description", b->workload->description);
  tool_json_add_int (builder, "tokens_per_chunk", TOOL_TOKENS_PER_CHUNK);
  json_builder_end_object (builder);

  json_builder_set_member_name (builder, "setup");
  json_builder_begin_object (builder);
  tool_json_add_int (builder, "chunk_bytes", (gint64) b->chunk_bytes);
  tool_json_add_int (builder, "device_chunks", b->n_dev_slots);
  tool_json_add_int (builder, "primary_chunks", kv_primary_tier_get_n_slots (b->primary));
  json_builder_set_member_name (builder, "tiers");
  json_builder_begin_array (builder);
  for (guint t = 0; t < b->n_tiers; t++)
    {
      json_builder_begin_object (builder);
      tool_json_add_string (builder, "name", b->tier_names[t]);
      tool_json_add_string (builder, "type", kv_secondary_tier_get_tier_type (b->tiers[t]));
      json_builder_end_object (builder);
    }
  json_builder_end_array (builder);
  tool_json_add_int (builder, "batch", b->lookups_per_step > 0 ? 0 : b->batch);
  tool_json_add_int (builder, "lookups_per_step", b->lookups_per_step);
  json_builder_set_member_name (builder, "sync");
  json_builder_add_boolean_value (builder, b->sync);
  tool_json_add_double (builder, "prefill_rate", b->prefill_rate);
  json_builder_end_object (builder);

  tool_json_add_int (builder, "requests", b->n_done);
  tool_json_add_int (builder, "requests_skipped", b->n_skipped);
  tool_json_add_int (builder, "lookups", (gint64) b->lookups);
  json_builder_set_member_name (builder, "hits");
  json_builder_begin_object (builder);
  for (guint src = 0; src < n_sources (b); src++)
    {
      tool_json_add_int (builder, source_name (b, src), (gint64) b->hits[src]);
    }
  json_builder_end_object (builder);
  tool_json_add_int (builder, "misses", (gint64) b->misses);
  tool_json_add_int (builder, "manager_lookups", (gint64) b->manager_lookups);
  tool_json_add_int (builder, "deferrals", (gint64) b->deferrals);
  tool_json_add_int (builder, "deferral_timeouts", (gint64) b->deferral_timeouts);
  tool_json_add_int (builder, "store_refused_chunks", (gint64) b->store_refused);

  json_builder_set_member_name (builder, "tokens");
  json_builder_begin_object (builder);
  tool_json_add_int (builder, "prompt", (gint64) b->tokens_prompt);
  tool_json_add_int (builder, "from_device", (gint64) b->tokens_device);
  tool_json_add_int (builder, "from_offload", (gint64) b->tokens_offload);
  tool_json_add_int (builder, "computed", (gint64) b->tokens_computed);
  tool_json_add_int (builder, "computed_without_offload",
                     (gint64) (b->tokens_computed + b->tokens_offload));
  tool_json_add_int (builder, "saved", (gint64) b->tokens_offload);
  json_builder_end_object (builder);

  json_builder_set_member_name (builder, "paths");
  json_builder_begin_object (builder);
  for (guint p = 0; p < n_paths (b); p++)
    {
      g_autofree char *key = path_key (b, p);
      gdouble job_time = path_time (b, p);

      json_builder_set_member_name (builder, key);
      json_builder_begin_object (builder);
      tool_json_add_int (builder, "bytes", (gint64) bytes[p]);
      tool_json_add_double (builder, "gbps_run", s->wall_s > 0 ? bytes[p] / s->wall_s / 1e9 : 0.0);
      tool_json_add_double (builder, "job_time_s", job_time);
      tool_json_add_double (builder, "gbps_jobs", job_time > 0 ? bytes[p] / job_time / 1e9 : 0.0);
      json_builder_end_object (builder);
    }
  json_builder_end_object (builder);

  json_builder_set_member_name (builder, "backpressure_drops");
  json_builder_begin_object (builder);
  for (guint t = 0; t < b->n_tiers; t++)
    {
      json_builder_set_member_name (builder, b->tier_names[t]);
      json_builder_begin_object (builder);
      tool_json_add_int (builder, "stores", (gint64) stat_value (b, STAT_STORES_DROPPED, t));
      tool_json_add_int (builder, "chunks", (gint64) stat_value (b, STAT_BLOCKS_DROPPED, t));
      json_builder_end_object (builder);
    }
  json_builder_end_object (builder);

  json_builder_set_member_name (builder, "failures");
  json_builder_begin_object (builder);
  for (guint t = 0; t < b->n_tiers; t++)
    {
      guint64 failures[N_FAILURE_KINDS];

      tier_failures (b, t, failures);
      json_builder_set_member_name (builder, b->tier_names[t]);
      json_builder_begin_object (builder);
      for (guint k = 0; k < N_FAILURE_KINDS; k++)
        tool_json_add_int (builder, failure_kinds[k].key, (gint64) failures[k]);
      json_builder_end_object (builder);
    }
  json_builder_end_object (builder);

  json_builder_set_member_name (builder, "manager");
  json_builder_begin_object (builder);
  tool_json_add_int (builder, "steps", (gint64) b->steps);
  tool_json_add_int (builder, "steps_with_lookups", (gint64) s->busy_steps);
  tool_json_add_double (builder, "time_s", s->mgr_s);
  tool_json_add_double (builder, "share_of_wall", s->wall_s > 0 ? s->mgr_s / s->wall_s : 0.0);
  tool_json_add_double (builder, "lookup_time_s", b->lookup_ns_total / 1e9);
  tool_json_add_double (builder, "step_time_p50_s", s->p50_ns / 1e9);
  tool_json_add_double (builder, "step_time_p99_s", s->p99_ns / 1e9);
  tool_json_add_double (builder, "step_time_max_s", s->max_ns / 1e9);
  tool_json_add_double (builder, "lookups_per_step_mean", s->lookups_mean);
  tool_json_add_int (builder, "lookups_per_step_max", (gint64) s->lookups_max);
  json_builder_end_object (builder);

  json_builder_set_member_name (builder, "verify");
  json_builder_begin_object (builder);
  tool_json_add_int (builder, "chunks", (gint64) b->verified_chunks);
  tool_json_add_int (builder, "mismatches", (gint64) b->verify_mismatches);
  tool_json_add_int (builder, "failed_device_transfers", (gint64) b->transfer_failures);
  json_builder_end_object (builder);

  tool_json_add_double (builder, "wall_s", s->wall_s);
  tool_json_add_double (builder, "compute_s", b->compute_ns / 1e9);
  tool_json_add_double (builder, "requests_per_s", s->wall_s > 0 ? b->n_done / s->wall_s : 0.0);
  json_builder_end_object (builder);

  root = json_builder_get_root (builder);
  json_generator_set_root (generator, root);
  json_generator_set_pretty (generator, TRUE);
  return json_generator_to_file (generator, path, error);
}

static gboolean
write_plot (Bench       *b,
            const char  *path,
            GError     **error)
{
  g_autofree const char **sources = g_new0 (const char *, n_sources (b) + 1);
  g_autoptr(GPtrArray) paths = g_ptr_array_new_with_free_func (g_free);
  g_autofree char *title = g_strdup_printf ("kvtier bench: %s", b->workload->description);
  ToolPlotInfo info = { 0 };

  for (guint src = 0; src < n_sources (b); src++)
    sources[src] = source_name (b, src);
  for (guint p = 0; p < n_paths (b); p++)
    g_ptr_array_add (paths, path_name (b, p));
  info.n_sources = n_sources (b);
  info.source_names = sources;
  info.n_paths = n_paths (b);
  info.path_names = (const char **) paths->pdata;
  info.samples = b->samples;
  info.title = title;
  return tool_plot_write (path, &info, error);
}

/* ------------------------------------------------------------------------ */

/* A usage error: every option string parsed so far is freed by teardown(). */
#define USAGE_ERROR(context, ...)                             \
  G_STMT_START {                                              \
    status = tool_usage_error (context, __VA_ARGS__);         \
    goto out;                                                 \
  } G_STMT_END

int
tool_bench (int    argc,
            char **argv)
{
  Bench bench = {
    .conversations = 300,
    .turns = 6,
    .seed = 1,
    .batch = 8,
    .prefill_rate = 300000,
    .progress = &progress_state,
  };
  Bench *b = &bench;
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  ToolSyntheticParams params = { 0 };
  gboolean plugin_errors = FALSE;
  Summary summary = { 0 };
  gint64 setup_ns;
  gboolean ok;
  int status = TOOL_EXIT_OK;
  GOptionEntry entries[] = {
    { "config", 'c', 0, G_OPTION_ARG_FILENAME, &b->config_path,
      "Configuration file (primary, device, tiers); the size options below override it", "FILE" },
    { "trace", 't', 0, G_OPTION_ARG_FILENAME, &b->trace_path,
      "Replay a Mooncake trace (JSON lines with hash_ids)", "FILE" },
    { "synthetic", 's', 0, G_OPTION_ARG_NONE, &b->synthetic,
      "Replay built-in synthetic multi-turn chats (the default)", NULL },
    { "conversations", 0, 0, G_OPTION_ARG_INT, &b->conversations,
      "Synthetic: conversations (default 300)", "N" },
    { "turns", 0, 0, G_OPTION_ARG_INT, &b->turns, "Synthetic: turns per conversation (default 6)", "N" },
    { "seed", 0, 0, G_OPTION_ARG_INT, &b->seed, "Synthetic: random seed (default 1)", "N" },
    { "requests", 'n', 0, G_OPTION_ARG_INT, &b->max_requests,
      "Replay only the first N requests (default: all)", "N" },
    { "chunk-size", 0, 0, G_OPTION_ARG_STRING, &b->chunk_size_text,
      "Bytes of one chunk of 512 tokens, a multiple of 4096 (default 256KiB)", "SIZE" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &b->layers,
      "Model layers: a device block is chunk-size / layers (default 8)", "N" },
    { "gpu-size", 0, 0, G_OPTION_ARG_STRING, &b->gpu_size_text,
      "Device KV capacity (default 1024 chunks)", "SIZE" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &b->device_type,
      "Device type: host (simulated GPU, default) or cuda (a real GPU, chunks computed"
      " and checked on it)", "TYPE" },
    { "primary-size", 0, 0, G_OPTION_ARG_STRING, &b->primary_size_text,
      "Primary tier capacity (default 2048 chunks)", "SIZE" },
    { "tier-size", 0, 0, G_OPTION_ARG_STRING, &b->tier_size_text,
      "Capacity of the default fs tier (default: unbounded)", "SIZE" },
    { "batch", 'b', 0, G_OPTION_ARG_INT, &b->batch,
      "Requests scheduled per step (default 8)", "N" },
    { "lookups-per-step", 0, 0, G_OPTION_ARG_INT, &b->lookups_per_step,
      "Fill each step with about N manager lookups, to measure the manager's share of"
      " step time (small chunks unless --chunk-size)", "N" },
    { "no-device-cache", 0, 0, G_OPTION_ARG_NONE, &b->no_device_cache,
      "No prefix caching on the device: every prompt chunk is looked up in the manager"
      " (the default with --lookups-per-step)", NULL },
    { "backpressure", 0, 0, G_OPTION_ARG_STRING, &b->backpressure,
      "Backpressure of the default tier: none (the default) or ema", "KIND" },
    { "prefill-rate", 0, 0, G_OPTION_ARG_DOUBLE, &b->prefill_rate,
      "Simulated GPU prefill speed in tokens/s: each step lasts its computed tokens / RATE"
      " (default 300000; 0: no compute time)", "RATE" },
    { "sync", 0, 0, G_OPTION_ARG_NONE, &b->sync,
      "Wait for every transfer before the step ends (deterministic runs)", NULL },
    { "json", 'j', 0, G_OPTION_ARG_FILENAME, &b->json_path,
      "Write the results as JSON (schema in doc/bench.md)", "FILE" },
    { "plot", 'p', 0, G_OPTION_ARG_FILENAME, &b->plot_path,
      "Draw hit rates and tier traffic over time (.svg or .png)", "FILE" },
    { "no-verify", 0, 0, G_OPTION_ARG_NONE, &b->no_verify,
      "Do not check loaded chunks byte for byte", NULL },
    { "progress", 0, 0, G_OPTION_ARG_STRING, &b->progress_mode,
      "Progress on stderr: auto (a bar on a terminal, a plain line every 5 s elsewhere;"
      " none with --quiet), always, or never (default auto)", "WHEN" },
    { "no-progress", 0, 0, G_OPTION_ARG_NONE, &b->no_progress, "The same as --progress=never", NULL },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &b->quiet, "Print no table (with --json)", NULL },
    TOOL_TIER_MODULE_OPTION (&b->tier_modules),
    { NULL }
  };

  /* --nodes: a fleet of nodes, simulated by kvtier-fleet.c */
  for (int i = 1; i < argc; i++)
    if (g_str_equal (argv[i], "--nodes") || g_str_has_prefix (argv[i], "--nodes="))
      return tool_bench_fleet (argc, argv);

  context = g_option_context_new ("- replay requests through device, primary and tiers");
  g_option_context_set_summary (context,
    "Simulates an inference engine: each step, requests look their prompt chunks up in the\n"
    "device prefix cache and then the tiering manager, load the hits, compute the rest and\n"
    "store it (device → primary → every tier). Prints what offloading saved.\n"
    "Without --config: a host device, the primary tier in memory and an fs tier in a\n"
    "fresh temporary directory that is removed at exit.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    USAGE_ERROR (context, "%s", error->message);
  if (argc > 1)
    USAGE_ERROR (context, "unexpected argument '%s'", argv[1]);
  if (b->trace_path != NULL && b->synthetic)
    USAGE_ERROR (context, "--trace and --synthetic exclude each other");
  if (b->batch < 1)
    USAGE_ERROR (context, "--batch must be at least 1");
  if (b->prefill_rate < 0)
    USAGE_ERROR (context, "--prefill-rate must not be negative");
  if (b->layers < 0 || b->max_requests < 0 || b->lookups_per_step < 0)
    USAGE_ERROR (context, "--layers, --requests and --lookups-per-step must not be negative");
  if (b->conversations < 1 || b->turns < 1)
    USAGE_ERROR (context, "--conversations and --turns must be at least 1");
  if (b->backpressure != NULL && !g_str_equal (b->backpressure, "ema") &&
      !g_str_equal (b->backpressure, "none"))
    USAGE_ERROR (context, "--backpressure must be ema or none, not '%s'",
                             b->backpressure);
  if (b->backpressure != NULL && b->config_path != NULL)
    USAGE_ERROR (context, "--backpressure sets the default tier's; with --config,"
                             " set it in the file");
  if (b->progress_mode != NULL && !g_str_equal (b->progress_mode, "auto") &&
      !g_str_equal (b->progress_mode, "always") && !g_str_equal (b->progress_mode, "never"))
    USAGE_ERROR (context, "--progress must be auto, always or never, not '%s'", b->progress_mode);
  if (b->no_progress && b->progress_mode != NULL && !g_str_equal (b->progress_mode, "never"))
    USAGE_ERROR (context, "--no-progress and --progress=%s contradict each other", b->progress_mode);
  if (b->no_progress || g_strcmp0 (b->progress_mode, "never") == 0 ||
      (b->quiet && g_strcmp0 (b->progress_mode, "always") != 0))
    b->progress->kind = PROGRESS_NONE;
  else
    b->progress->kind = isatty (STDERR_FILENO) ? PROGRESS_BAR : PROGRESS_LINES;
  if (b->lookups_per_step > 0)
    b->no_device_cache = TRUE;
  if (b->plot_path != NULL && !g_str_has_suffix (b->plot_path, ".svg") &&
      !g_str_has_suffix (b->plot_path, ".png"))
    USAGE_ERROR (context, "--plot FILE must end in .svg or .png");
  /* The chunk geometry: 256 KiB of 8 layers, or 4 KiB of 1 layer for the
   * manager-overhead mode (many chunks per step). */
  b->layers_given = b->layers != 0;
  if (b->layers == 0)
    b->layers = b->lookups_per_step > 0 ? 1 : 8;
  b->chunk_size = b->lookups_per_step > 0 ? 4096 : 256 * 1024;
  if (b->chunk_size_text != NULL)
    {
      g_autoptr(GError) size_error = NULL;

      if (!tool_parse_size (b->chunk_size_text, &b->chunk_size, &size_error))
        USAGE_ERROR (context, "--chunk-size: %s", size_error->message);
      if (b->chunk_size == 0 || b->chunk_size % 4096 != 0)
        USAGE_ERROR (context, "--chunk-size %s is not a multiple of 4096",
                                 b->chunk_size_text);
    }
  if (b->chunk_size % ((guint64) b->layers * 8) != 0)
    USAGE_ERROR (context, "a chunk of %" G_GUINT64_FORMAT " bytes does not split"
                             " into %d layers of whole 8-byte words", b->chunk_size, b->layers);
  {
    const char *sizes[] = { b->chunk_size_text, b->gpu_size_text, b->primary_size_text,
                            b->tier_size_text };
    const char *names[] = { "--chunk-size", "--gpu-size", "--primary-size", "--tier-size" };

    for (guint k = 0; k < G_N_ELEMENTS (sizes); k++)
      {
        guint64 ignored;
        g_autoptr(GError) size_error = NULL;

        if (sizes[k] != NULL && !tool_parse_size (sizes[k], &ignored, &size_error))
          USAGE_ERROR (context, "%s: %s", names[k], size_error->message);
      }
  }

  if (b->trace_path != NULL)
    b->workload = tool_workload_load_trace (b->trace_path, (guint) b->max_requests, &error);
  else
    {
      params.conversations = (guint) b->conversations;
      params.turns = (guint) b->turns;
      params.system_prompts = 8;
      params.system_chunks = 6;
      params.seed = (guint) b->seed;
      b->workload = tool_workload_synthetic (&params, (guint) b->max_requests);
    }
  if (b->workload == NULL)
    {
      g_printerr ("kvtier: %s\n", error->message);
      status = TOOL_EXIT_FAILURE;
      goto out;
    }

  b->registry = tool_load_registry (TRUE, &plugin_errors);
  b->by_id = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL, (GDestroyNotify) chunk_free);
  b->by_key = g_hash_table_new (kv_key_hash, kv_key_equal);
  b->reqs = g_ptr_array_new_with_free_func ((GDestroyNotify) req_free);
  b->load_jobs = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  b->store_jobs = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free,
                                         (GDestroyNotify) store_job_free);
  b->new_ids = g_ptr_array_new_with_free_func (g_free);
  b->busy_mgr_ns = g_array_new (FALSE, FALSE, sizeof (gint64));
  b->busy_lookups = g_array_new (FALSE, FALSE, sizeof (guint64));
  b->samples = g_ptr_array_new_with_free_func ((GDestroyNotify) sample_free);
  g_queue_init (&b->waiting);
  g_queue_init (&b->recency);

  signal (SIGINT, on_interrupt);
  signal (SIGTERM, on_interrupt);

  /* log lines of the tiers (any thread) go to stderr, above the progress
   * bar; stdout is the report's */
  g_log_writer_default_set_use_stderr (TRUE);
  g_log_set_writer_func (write_log_above_bar, b->progress, NULL);

  setup_ns = tool_now_ns ();
  ok = setup (b, &error);
  g_debug ("setup took %.2f s", (tool_now_ns () - setup_ns) / 1e9);
  if (ok && !b->quiet)
    print_header (b);
  if (!ok || !run (b, &error))
    {
      g_printerr ("kvtier: %s\n", error->message);
      status = g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED) ? 130 : TOOL_EXIT_FAILURE;
    }
  else
    {
      collect_stats (b);
      summarize (b, &summary);
      if (!b->quiet)
        print_report (b, &summary);
      if (b->json_path != NULL && !write_json (b, &summary, b->json_path, &error))
        {
          g_printerr ("kvtier: cannot write %s: %s\n", b->json_path, error->message);
          status = TOOL_EXIT_FAILURE;
        }
      g_clear_error (&error);
      if (b->plot_path != NULL && !write_plot (b, b->plot_path, &error))
        {
          g_printerr ("kvtier: cannot draw %s: %s\n", b->plot_path, error->message);
          status = TOOL_EXIT_FAILURE;
        }
      if (b->transfer_failures > 0)
        {
          g_printerr ("kvtier: %" G_GUINT64_FORMAT " device transfers failed\n",
                      b->transfer_failures);
          status = TOOL_EXIT_FAILURE;
        }
      if (b->verify_mismatches > 0)
        {
          g_printerr ("kvtier: %" G_GUINT64_FORMAT " loaded chunks did not hold the bytes"
                      " that were stored\n", b->verify_mismatches);
          status = TOOL_EXIT_FAILURE;
        }
    }

out:
  teardown (b);
  return status;
}
