/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-s3-tier.h"

#include <string.h>

#include "kv-chunk-format.h"
#include "kv-chunk-name.h"
#include "kv-s3-client.h"
#include "kv-s3-credentials.h"
#include "kv-key-index.h"
#include "kv-s3-listing.h"

#define DEFAULT_REGION              "us-east-1"
#define DEFAULT_PREFIX              "kvtier"
#define DEFAULT_MAX_CONNECTIONS     16
#define DEFAULT_CONNECT_TIMEOUT_MS  2000
#define DEFAULT_REPLY_TIMEOUT_MS    10000
#define DEFAULT_MAX_ATTEMPTS        4
/* 16 MiB of index when full (16 bytes a key) */
#define DEFAULT_INDEX_MAX_KEYS      (1u << 20)
#define RETRY_BASE_MS               25
#define MAX_PREFIX_LEN              256
/* How long a lookup batch waits for its HEADs when the tier has no
 * deadline; past it, the unanswered keys are misses. */
#define LOOKUP_WAIT_DEFAULT_MS      2000
/* The key of the object construction and probes GET: never a chunk's
 * (those are hex), so a 404 NoSuchKey says the bucket and credentials
 * work. */
#define PROBE_KEY                   ".kvtier-probe"

typedef struct _S3Job S3Job;
typedef struct _LookupBatch LookupBatch;

/* One key of a job: its request, and the chunk header it sends or
 * receives (the payload is the primary slot itself). The op comes first. */
typedef struct
{
  KvS3Op       op;
  S3Job       *job;
  guint        index;
  KvKey       *key;
  guint32      slot;
  guint8      *header;
  gboolean     has_checksum;   /* stores: carried by the slot */
  guint64      checksum;
  KvChunkHasher *hasher;       /* loads: the payload's, as it lands */
} KeyOp;

/* A load or store. ops, n_outstanding and the I/O times are the I/O
 * thread's; refs and cancelled are atomic. */
struct _S3Job
{
  KvS3Tier   *tier;
  KvTierJob  *tier_job;
  gboolean    is_load;
  guint       n_ops;
  KeyOp      *ops;
  guint       n_outstanding;
  gint        cancelled;
  gint        refs;
  gint64      first_start;
  gint64      last_end;
};

/* The HEADs of one lookup batch; the worker thread waits for them and
 * may give up first. */
typedef struct
{
  KvS3Op       op;
  LookupBatch *batch;
  guint        index;
  guint64      digest;         /* the key's, for the index */
} HeadOp;

struct _LookupBatch
{
  KvS3Tier  *tier;
  guint      n_ops;
  HeadOp    *ops;
  gboolean  *results;
  guint      n_outstanding;   /* tier lock */
  gint       refs;            /* (atomic) the worker, the I/O side */
};

/* A DELETE of a damaged object, or a probe's GET. */
typedef struct
{
  KvS3Op     op;
  KvS3Tier  *tier;
  KvKey     *key;
  guint64    probe_id;
} IoOp;

struct _KvS3Tier
{
  KvSecondaryTier  parent_instance;

  /* construct-only properties */
  char            *endpoint;
  char            *bucket;
  char            *region;
  char            *addressing;
  char            *prefix;
  char            *namespace_;
  char            *access_key;
  char            *secret_key;
  char            *session_token;
  char            *credentials_file;
  char            *credentials_profile;
  char            *tls_ca_file;
  guint            max_connections;
  guint            connect_timeout_ms;
  guint            reply_timeout_ms;
  guint            max_attempts;
  guint            index_max_keys;
  gboolean         index_list_at_start;

  /* set up by init(), then read-only */
  gboolean         initialized;
  KvHostBuffer    *primary;
  gsize            block_size;
  gsize            object_size;     /* header + block */
  guint            n_slots;
  guint8           namespace_digest[KV_CHUNK_NAMESPACE_DIGEST_LEN];
  char            *key_prefix;      /* "<prefix>/<namespace digest hex>/" */
  gsize            key_prefix_len;
  KvLocality       locality;
  KvS3Client      *client;
  /* the chunks this tier knows are in the bucket (its own lock); NULL
   * when index-max-keys is 0 */
  KvKeyIndex      *index;

  /* tier lock */
  GMutex           lock;
  GCond            cond;
  guint            n_live_jobs;
  guint            n_io_ops;        /* lookups, deletes, probes in flight */
  gboolean         shut_down;
  /* index-list-at-start: the thread that lists, until it is joined; and
   * whether the listing ended */
  GThread         *listing;
  gboolean         listed;

  /* the tier's and its client's counts (reported by the base class) */
  KvCounterSet    *counters;
};

enum {
  PROP_0,
  PROP_ENDPOINT,
  PROP_BUCKET,
  PROP_REGION,
  PROP_ADDRESSING,
  PROP_PREFIX,
  PROP_NAMESPACE,
  PROP_ACCESS_KEY,
  PROP_SECRET_KEY,
  PROP_SESSION_TOKEN,
  PROP_CREDENTIALS_FILE,
  PROP_CREDENTIALS_PROFILE,
  PROP_TLS_CA_FILE,
  PROP_MAX_CONNECTIONS,
  PROP_CONNECT_TIMEOUT_MS,
  PROP_REPLY_TIMEOUT_MS,
  PROP_MAX_ATTEMPTS,
  PROP_INDEX_MAX_KEYS,
  PROP_INDEX_LIST_AT_START,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static const char *const counter_names[KV_S3_N_COUNTERS] = {
  "stored_chunks", "loaded_chunks", "missing_chunks", "corrupt_chunks", "deleted_objects",
  "store_failures", "load_failures", "lookup_errors", "index_hits", "index_stale_keys",
  "requests", "retries",
  "transport_errors", "timeouts", "error_replies", "bytes_written", "bytes_read",
};

/* Their families (doc/metrics.md) and help, in the same order. */
static const struct
{
  const char *name;
  const char *doc;
} counter_info[KV_S3_N_COUNTERS] = {
  { "kvtier_s3_stored_chunks", "Chunks stored (PUT)" },
  { "kvtier_s3_loaded_chunks", "Chunks loaded and verified" },
  { "kvtier_s3_missing_chunks", "Chunks a load found no object for (never stored, expired, deleted)" },
  { "kvtier_s3_corrupt_chunks", "Objects that failed their check: deleted, never loaded" },
  { "kvtier_s3_deleted_objects", "Deletes of damaged objects the server confirmed" },
  { "kvtier_s3_store_failures", "Chunks a store failed to write" },
  { "kvtier_s3_load_failures", "Keys of loads that did not land, missing ones included" },
  { "kvtier_s3_lookup_errors", "Existence checks (HEAD) that failed, answered as misses" },
  { "kvtier_s3_index_hits", "Lookups answered from the index of known chunks, without a HEAD" },
  { "kvtier_s3_index_stale_keys", "Indexed chunks a load found missing (deleted by others or expired)" },
  { "kvtier_s3_requests", "HTTP requests sent, retries included" },
  { "kvtier_s3_retries", "HTTP requests sent again" },
  { "kvtier_s3_transport_errors", "Requests lost to the connection or their time" },
  { "kvtier_s3_timeouts", "Requests that took longer than their timeout" },
  { "kvtier_s3_error_replies", "Error replies other than 404" },
  { "kvtier_s3_written_bytes", "Object bytes sent (chunk records)" },
  { "kvtier_s3_read_bytes", "Object bytes received" },
};

/* The client counts the last seven, in the tier's set (first_counter). */
G_STATIC_ASSERT (KV_S3_COUNTER_REQUESTS + KV_S3_CLIENT_RETRIES == KV_S3_COUNTER_RETRIES);
G_STATIC_ASSERT (KV_S3_COUNTER_REQUESTS + KV_S3_CLIENT_TRANSPORT_ERRORS == KV_S3_COUNTER_TRANSPORT_ERRORS);
G_STATIC_ASSERT (KV_S3_COUNTER_REQUESTS + KV_S3_CLIENT_TIMEOUTS == KV_S3_COUNTER_TIMEOUTS);
G_STATIC_ASSERT (KV_S3_COUNTER_REQUESTS + KV_S3_CLIENT_ERROR_REPLIES == KV_S3_COUNTER_ERROR_REPLIES);
G_STATIC_ASSERT (KV_S3_COUNTER_REQUESTS + KV_S3_CLIENT_BYTES_SENT == KV_S3_COUNTER_BYTES_WRITTEN);
G_STATIC_ASSERT (KV_S3_COUNTER_REQUESTS + KV_S3_CLIENT_BYTES_RECEIVED == KV_S3_COUNTER_BYTES_READ);
G_STATIC_ASSERT (KV_S3_COUNTER_REQUESTS + KV_S3_CLIENT_N_COUNTERS == KV_S3_N_COUNTERS);

static void kv_s3_tier_initable_iface_init (GInitableIface *iface);
static void kv_s3_tier_configurable_iface_init (KvConfigurableInterface *iface);

/**
 * KvS3Tier:
 *
 * The s3 tier, registered as `s3`: one chunk per object of a bucket of an
 * S3-compatible object store (AWS S3, Ceph RADOS Gateway, MinIO...),
 * shared by every process that names the same bucket, prefix and
 * namespace.
 *
 * An object's key is `<prefix>/<namespace digest>/<hex block
 * hash>_g<group>`, its body the kvtier chunk record (the 4096-byte header,
 * then the payload), checked on every load, payload checksum included: an
 * object that is short, long, damaged, or written for another key or
 * namespace is deleted, counted, and fails the load for its key. Stores
 * are single PUTs sent from the header and the primary slot as they are,
 * with the checksum the slot carries; loads are GETs whose body lands in
 * the header buffer and the primary slot. A lookup of a chunk the tier
 * knows is in the bucket (its index: stored, found or loaded by this tier,
 * [property@KvS3Tier:index-max-keys] of them) is a HIT at once; any other
 * is a HEAD, a batch per step, off the owner thread (#KvAsyncLookup: RETRY
 * until known), so misses stay exact and other writers' chunks are found.
 * An indexed chunk deleted behind the tier costs one load that finds it
 * missing (a miss for the manager), and leaves the index. `touch`
 * does nothing: an object store keeps no recency that a cheap request
 * could refresh (bound the bucket with a lifecycle rule).
 *
 * Requests run on the tier's own I/O thread (framed by the tier over plain
 * http, bodies sent and received in place; libcurl's multi interface over
 * https; on a GMainContext), over a bounded pool of kept-alive HTTP/1.1 connections,
 * signed with AWS Signature Version 4. Every vfunc runs on the owner
 * thread and returns at once, except construction, which GETs one object
 * to check the endpoint, the bucket and the credentials.
 */
G_DEFINE_FINAL_TYPE_WITH_CODE (KvS3Tier, kv_s3_tier, KV_TYPE_SECONDARY_TIER,
                               G_IMPLEMENT_INTERFACE (G_TYPE_INITABLE,
                                                      kv_s3_tier_initable_iface_init)
                               G_IMPLEMENT_INTERFACE (KV_TYPE_CONFIGURABLE,
                                                      kv_s3_tier_configurable_iface_init))

static void
count (KvS3Tier    *self,
       KvS3Counter  counter,
       guint64      n)
{
  kv_counter_set_add (self->counters, counter, n);
}

/* Every lookup, load and store names its chunk (kv-chunk-name, as the
 * redis tier: a hex table, not a printf per byte). */
static char *
object_key (KvS3Tier *self,
            KvKey    *key)
{
  return kv_chunk_name_for_key (self->key_prefix, self->key_prefix_len, key);
}

/* The real-time bound of a request no job's deadline covers (a DELETE, a
 * probe): the tier's deadline, or LOOKUP_WAIT_DEFAULT_MS without one. */
static gint64
op_deadline (KvS3Tier *self)
{
  guint deadline_ms = kv_secondary_tier_get_deadline_ms (KV_SECONDARY_TIER (self));

  return g_get_monotonic_time () +
         (gint64) (deadline_ms > 0 ? deadline_ms : LOOKUP_WAIT_DEFAULT_MS) * 1000;
}

static void
io_op_started (KvS3Tier *self)
{
  g_mutex_lock (&self->lock);
  self->n_io_ops++;
  g_mutex_unlock (&self->lock);
}

static void
io_op_ended (KvS3Tier *self)
{
  g_mutex_lock (&self->lock);
  self->n_io_ops--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* ---- the index of known chunks ------------------------------------------ */

/* A key is indexed when this tier stored it, a HEAD found it or a load
 * verified it, and forgotten when a load found it missing or damaged or
 * this tier deletes it: lookups of indexed keys send no HEAD. Any thread
 * (the index has its own lock, held for one probe). */
static void
index_add (KvS3Tier *self,
           KvKey    *key)
{
  if (self->index != NULL)
    kv_key_index_add (self->index, kv_key_index_digest (key));
}

static gboolean
index_remove (KvS3Tier *self,
              KvKey    *key)
{
  return self->index != NULL && kv_key_index_remove (self->index, kv_key_index_digest (key));
}

/* ---- damaged objects ----------------------------------------------------- */

static void
io_op_free (IoOp *io)
{
  kv_s3_op_clear (&io->op);
  g_clear_pointer (&io->key, kv_key_unref);
  g_free (io);
}

static void
delete_done (KvS3Op   *op,
             gpointer  user_data)
{
  IoOp *io = user_data;
  KvS3Tier *self = io->tier;

  if (op->outcome == KV_S3_OP_OK || op->outcome == KV_S3_OP_NOT_FOUND)
    {
      /* again: a store of the key that ended between the GET and the
       * DELETE indexed an object the DELETE removed */
      index_remove (self, io->key);
      count (self, KV_S3_COUNTER_DELETED_OBJECTS, 1);
      if (kv_secondary_tier_get_enable_events (KV_SECONDARY_TIER (self)))
        {
          g_autoptr(KvEvent) event = kv_event_new (&io->key, 1, KV_MEDIUM_STORAGE, TRUE,
                                                   self->locality);

          kv_secondary_tier_push_event (KV_SECONDARY_TIER (self), event);
        }
    }
  else
    g_message ("s3 tier: the damaged object %s was not deleted: %s", op->key,
               op->error != NULL ? op->error->message : "?");
  io_op_free (io);
  io_op_ended (self);
}

/* A loaded object failed its check: delete it, so that no one loads it
 * again. A plain DELETE: a valid object another process stored between
 * the GET and the DELETE is lost too, which only costs a miss. */
static void
delete_object (KvS3Tier *self,
               KeyOp    *kop)
{
  IoOp *io = g_new0 (IoOp, 1);

  index_remove (self, kop->key);
  kv_s3_op_init (&io->op, KV_S3_METHOD_DELETE, kop->op.key);
  io->tier = self;
  io->key = kv_key_ref (kop->key);
  io->op.deadline = op_deadline (self);
  io->op.done = delete_done;
  io->op.user_data = io;
  io_op_started (self);
  kv_s3_client_submit (self->client, &io->op);
}

/* ---- jobs ---------------------------------------------------------------- */

static void
s3_job_unref (S3Job *job)
{
  KvS3Tier *self = job->tier;
  KvTierJob *tier_job;

  if (!g_atomic_int_dec_and_test (&job->refs))
    return;
  for (guint i = 0; i < job->n_ops; i++)
    {
      KeyOp *kop = &job->ops[i];

      kv_s3_op_clear (&kop->op);
      g_clear_pointer (&kop->key, kv_key_unref);
      g_clear_pointer (&kop->hasher, kv_chunk_hasher_free);
      g_free (kop->header);
    }
  g_free (job->ops);
  tier_job = job->tier_job;
  g_free (job);
  g_mutex_lock (&self->lock);
  self->n_live_jobs--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  /* Last: the tier job holds the tier, and this may be its last
   * reference (a tier dropped while a job it answered late was in
   * flight): the tier is then finalized here, on the I/O thread, which
   * stop_io() and the client allow. */
  g_object_unref (tier_job);
}

/* On the I/O thread: a key's op ended. */
static void
key_done (S3Job *job)
{
  gint64 now = g_get_monotonic_time ();

  if (job->last_end < now)
    job->last_end = now;
  g_assert (job->n_outstanding > 0);
  if (--job->n_outstanding > 0)
    return;
  if (job->first_start > 0)
    kv_tier_job_record_io (job->tier_job, job->first_start, job->last_end);
  kv_tier_job_report (job->tier_job);
  s3_job_unref (job);
}

static void
note_start (S3Job  *job,
            KvS3Op *op)
{
  if (op->first_start > 0 && (job->first_start == 0 || op->first_start < job->first_start))
    job->first_start = op->first_start;
}

/* Failures of the request that are the store's fault, not the tier's: a
 * job the deadline failed already. */
static KvKeyFailureFlags
failure_flags (const KvS3Op *op)
{
  if (g_error_matches (op->error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return KV_KEY_FAILURE_FLAGS_NOT_A_FAULT;
  return KV_KEY_FAILURE_FLAGS_NONE;
}

static void
store_done (KvS3Op   *op,
            gpointer  user_data)
{
  KeyOp *kop = user_data;
  S3Job *job = kop->job;
  KvS3Tier *self = job->tier;

  note_start (job, op);
  if (op->outcome == KV_S3_OP_OK)
    {
      count (self, KV_S3_COUNTER_STORED_CHUNKS, 1);
      index_add (self, kop->key);
      kv_tier_job_mark_landed (job->tier_job, kop->index);
    }
  else
    {
      g_autoptr(GError) error = op->error != NULL ? g_error_copy (op->error) :
        g_error_new (KV_S3_ERROR, KV_S3_ERROR_FAILED, "S3 PUT %s: HTTP %u", op->key, op->status);

      count (self, KV_S3_COUNTER_STORE_FAILURES, 1);
      g_debug ("s3 tier: %s", error->message);
      kv_tier_job_mark_failed (job->tier_job, kop->index, failure_flags (op), error);
    }
  key_done (job);
}

/* Checks a loaded object in place: the header buffer and the slot. */
static KvChunkCheck
check_object (KvS3Tier *self,
              KeyOp    *kop)
{
  KvChunkCheck check;

  if (kop->op.outcome == KV_S3_OP_WRONG_SIZE)
    return kop->op.content_length >= 0 && (guint64) kop->op.content_length < self->object_size ?
           KV_CHUNK_CHECK_SHORT : KV_CHUNK_CHECK_WRONG_LENGTH;
  /* the payload was hashed as it landed (the op's dest_hasher): no
   * second pass over it */
  check = kv_chunk_check (kop->header, KV_CHUNK_HEADER_SIZE, kop->op.dest[1], self->block_size,
                          self->block_size, self->namespace_digest, kop->key, FALSE);
  if (check == KV_CHUNK_CHECK_OK &&
      kv_chunk_hasher_digest (kop->hasher) != kv_chunk_header_get_payload_checksum (kop->header))
    check = KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM;
  return check;
}

static void
load_done (KvS3Op   *op,
           gpointer  user_data)
{
  KeyOp *kop = user_data;
  S3Job *job = kop->job;
  KvS3Tier *self = job->tier;

  note_start (job, op);
  if (op->outcome == KV_S3_OP_OK || op->outcome == KV_S3_OP_WRONG_SIZE)
    {
      KvChunkCheck check = check_object (self, kop);

      if (check == KV_CHUNK_CHECK_OK)
        {
          /* verified: tiers storing the promoted chunk need not hash it
           * again (the slot is still this load's) */
          kv_host_buffer_set_slot_checksum (self->primary, kop->slot,
                                            kv_chunk_header_get_payload_checksum (kop->header));
          count (self, KV_S3_COUNTER_LOADED_CHUNKS, 1);
          index_add (self, kop->key);
          kv_tier_job_mark_landed (job->tier_job, kop->index);
        }
      else
        {
          g_autoptr(GError) error = g_error_new (KV_S3_ERROR, KV_S3_ERROR_BAD_REPLY,
                                                 "The s3 object %s is damaged (%s): deleted",
                                                 op->key, kv_chunk_check_to_string (check));
          KvKeyFailureFlags flags = KV_KEY_FAILURE_FLAGS_NOT_A_FAULT;

          if (check == KV_CHUNK_CHECK_BAD_PAYLOAD_CHECKSUM ||
              check == KV_CHUNK_CHECK_BAD_HEADER_CHECKSUM)
            flags |= KV_KEY_FAILURE_FLAGS_CHECKSUM;
          count (self, KV_S3_COUNTER_CORRUPT_CHUNKS, 1);
          count (self, KV_S3_COUNTER_LOAD_FAILURES, 1);
          g_message ("s3 tier: %s", error->message);
          delete_object (self, kop);
          kv_tier_job_mark_failed (job->tier_job, kop->index, flags, error);
        }
    }
  else if (op->outcome == KV_S3_OP_NOT_FOUND &&
           g_error_matches (op->error, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_KEY))
    {
      /* never stored, expired by a lifecycle rule, or deleted: a miss
       * (and, when the index answered the lookup, a stale entry: the
       * next lookup sends a HEAD) */
      if (index_remove (self, kop->key))
        count (self, KV_S3_COUNTER_INDEX_STALE_KEYS, 1);
      count (self, KV_S3_COUNTER_MISSING_CHUNKS, 1);
      count (self, KV_S3_COUNTER_LOAD_FAILURES, 1);
      kv_tier_job_mark_missing (job->tier_job, kop->index);
    }
  else
    {
      g_autoptr(GError) error = op->error != NULL ? g_error_copy (op->error) :
        g_error_new (KV_S3_ERROR, KV_S3_ERROR_FAILED, "S3 GET %s: HTTP %u", op->key, op->status);

      count (self, KV_S3_COUNTER_LOAD_FAILURES, 1);
      g_debug ("s3 tier: %s", error->message);
      kv_tier_job_mark_failed (job->tier_job, kop->index, failure_flags (op), error);
    }
  key_done (job);
}

/* A store's header, encoded just before its PUT is sent; without a
 * carried checksum, from the slot's bytes now. A store whose deadline
 * passed while it waited for a connection is dropped unsent. */
static gboolean
store_prepare (KvS3Op   *op,
               gpointer  user_data)
{
  KeyOp *kop = user_data;
  KvS3Tier *self = kop->job->tier;

  if (g_atomic_int_get (&kop->job->cancelled))
    return FALSE;
  if (kop->has_checksum)
    kv_chunk_header_encode_with_checksum (kop->header, self->namespace_digest, kop->key,
                                          self->block_size, kop->checksum, g_get_real_time ());
  else
    kv_chunk_header_encode (kop->header, self->namespace_digest, kop->key, op->body[1],
                            self->block_size, g_get_real_time ());
  return TRUE;
}

static gboolean
job_abort (gpointer user_data)
{
  S3Job *job = user_data;

  /* each op not ended yet ends now (cancelled), in its done */
  for (guint i = 0; i < job->n_ops; i++)
    if (job->ops[i].key != NULL)
      kv_s3_client_abort (job->tier->client, &job->ops[i].op);
  return G_SOURCE_REMOVE;
}

/* The job's deadline passed (any thread; never after its report): its
 * uploads stop at their next buffer, and every op still running is
 * aborted on the I/O thread. An aborted PUT leaves no object: S3 publishes
 * an object only when its whole body arrived. */
static void
job_cancelled (KvTierJob *tier_job,
               gpointer   user_data)
{
  S3Job *job = user_data;

  g_atomic_int_set (&job->cancelled, TRUE);
  g_atomic_int_inc (&job->refs);
  if (!kv_s3_client_invoke_full (job->tier->client, job_abort, job, (GDestroyNotify) s3_job_unref))
    s3_job_unref (job);
}

static gboolean
submit (KvS3Tier       *self,
        KvTransferJob  *transfer_job,
        gboolean        is_load)
{
  S3Job *job = g_new0 (S3Job, 1);
  guint n = kv_transfer_job_get_n_keys (transfer_job);

  job->tier = self;
  job->tier_job = kv_tier_job_new (KV_SECONDARY_TIER (self), transfer_job);
  job->is_load = is_load;
  job->n_ops = n;
  job->ops = g_new0 (KeyOp, MAX (n, 1));
  /* one for the I/O side (the last op reports), one for this function */
  job->refs = 2;
  g_mutex_lock (&self->lock);
  self->n_live_jobs++;
  g_mutex_unlock (&self->lock);

  for (guint i = 0; i < n; i++)
    {
      KvKey *key = kv_transfer_job_get_key (transfer_job, i);
      guint32 slot = kv_transfer_job_get_chunk_id (transfer_job, i);
      KeyOp *kop = &job->ops[i];
      g_autofree char *name = NULL;

      if (slot >= self->n_slots || !kv_chunk_key_fits (key))
        {
          g_autoptr(GError) error =
            g_error_new (KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                         slot >= self->n_slots ? "slot %u is not a slot of the primary" :
                                                 "the key of slot %u is longer than a chunk record holds",
                         slot);

          count (self, is_load ? KV_S3_COUNTER_LOAD_FAILURES : KV_S3_COUNTER_STORE_FAILURES, 1);
          kv_tier_job_mark_failed (job->tier_job, i, KV_KEY_FAILURE_FLAGS_NOT_A_FAULT, error);
          continue;
        }
      name = object_key (self, key);
      kv_s3_op_init (&kop->op, is_load ? KV_S3_METHOD_GET : KV_S3_METHOD_PUT, name);
      kop->job = job;
      kop->index = i;
      kop->key = kv_key_ref (key);
      kop->slot = slot;
      kop->header = g_malloc (KV_CHUNK_HEADER_SIZE);
      /* no deadline of its own: the base class's (on the tier's clock)
       * aborts it through job_cancelled(), retries and backoff included;
       * reply-timeout-ms bounds each attempt */
      kop->op.cancelled = &job->cancelled;
      kop->op.user_data = kop;
      if (is_load)
        {
          kop->op.dest[0] = kop->header;
          kop->op.dest_len[0] = KV_CHUNK_HEADER_SIZE;
          kop->op.dest[1] = kv_host_buffer_peek_slot (self->primary, slot);
          kop->op.dest_len[1] = self->block_size;
          kop->hasher = kv_chunk_hasher_new ();
          kop->op.dest_hasher = kop->hasher;
          kop->op.done = load_done;
        }
      else
        {
          kop->op.body[0] = kop->header;
          kop->op.body_len[0] = KV_CHUNK_HEADER_SIZE;
          kop->op.body[1] = kv_host_buffer_peek_slot (self->primary, slot);
          kop->op.body_len[1] = self->block_size;
          /* the checksum computed once, as the chunk came into the primary */
          kop->has_checksum = kv_host_buffer_get_slot_checksum (self->primary, slot, &kop->checksum);
          kop->op.prepare = store_prepare;
          kop->op.done = store_done;
        }
      job->n_outstanding++;
    }

  if (job->n_outstanding == 0)
    {
      kv_tier_job_report (job->tier_job);
      s3_job_unref (job);
    }
  else
    {
      /* counted before the first op can end */
      guint n_ops = job->n_outstanding;

      for (guint i = 0, sent = 0; i < n && sent < n_ops; i++)
        if (job->ops[i].key != NULL)
          {
            sent++;
            kv_s3_client_submit (self->client, &job->ops[i].op);
          }
      kv_tier_job_set_cancel_func (job->tier_job, job_cancelled, job, NULL);
    }
  s3_job_unref (job);
  return TRUE;
}

static gboolean
kv_s3_tier_submit_store (KvSecondaryTier  *tier,
                         KvTransferJob    *job,
                         GError          **error)
{
  return submit (KV_S3_TIER (tier), job, FALSE);
}

static gboolean
kv_s3_tier_submit_load (KvSecondaryTier  *tier,
                        KvTransferJob    *job,
                        GError          **error)
{
  return submit (KV_S3_TIER (tier), job, TRUE);
}

/* ---- lookups ------------------------------------------------------------- */

static void
lookup_batch_unref (LookupBatch *batch)
{
  if (!g_atomic_int_dec_and_test (&batch->refs))
    return;
  for (guint i = 0; i < batch->n_ops; i++)
    kv_s3_op_clear (&batch->ops[i].op);
  g_free (batch->ops);
  g_free (batch->results);
  g_free (batch);
}

static void
head_done (KvS3Op   *op,
           gpointer  user_data)
{
  HeadOp *head = user_data;
  LookupBatch *batch = head->batch;
  KvS3Tier *self = batch->tier;
  /* an object of another length is not this chunk: a miss (a load would
   * delete it; a store will replace it) */
  gboolean exists = op->outcome == KV_S3_OP_OK &&
                    op->content_length == (gint64) self->object_size;
  gboolean last;

  if (op->outcome == KV_S3_OP_FAILED ||
      (op->outcome == KV_S3_OP_NOT_FOUND &&
       !g_error_matches (op->error, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_KEY)))
    {
      count (self, KV_S3_COUNTER_LOOKUP_ERRORS, 1);
      g_debug ("s3 tier: lookup: %s", op->error != NULL ? op->error->message : "?");
    }
  if (exists && self->index != NULL)
    kv_key_index_add (self->index, head->digest);
  g_mutex_lock (&self->lock);
  batch->results[head->index] = exists;
  last = --batch->n_outstanding == 0;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  if (last)
    {
      lookup_batch_unref (batch);
      io_op_ended (self);
    }
}

/* On a lookup worker: a HEAD per key, all at once (the client sends as
 * many as it has connections). A key whose HEAD fails or is not answered
 * within the deadline is a miss. */
static void
batch_heads (KvKey * const *keys,
             guint          n_keys,
             KvRequest     *request,
             gboolean      *results,
             gpointer       user_data)
{
  KvS3Tier *self = user_data;
  LookupBatch *batch = g_new0 (LookupBatch, 1);
  guint wait_ms = kv_secondary_tier_get_deadline_ms (KV_SECONDARY_TIER (self));
  gint64 end_time = g_get_monotonic_time () +
                    (wait_ms > 0 ? wait_ms : LOOKUP_WAIT_DEFAULT_MS) * G_TIME_SPAN_MILLISECOND;
  guint n = 0;

  batch->tier = self;
  batch->ops = g_new0 (HeadOp, MAX (n_keys, 1));
  batch->results = g_new0 (gboolean, MAX (n_keys, 1));
  batch->refs = 2;
  for (guint i = 0; i < n_keys; i++)
    {
      HeadOp *head;
      g_autofree char *name = NULL;

      results[i] = FALSE;
      if (!kv_chunk_key_fits (keys[i]))
        continue;
      head = &batch->ops[n++];
      name = object_key (self, keys[i]);
      kv_s3_op_init (&head->op, KV_S3_METHOD_HEAD, name);
      head->batch = batch;
      head->index = i;
      head->digest = kv_key_index_digest (keys[i]);
      /* the batch is given up then: so are its HEADs */
      head->op.deadline = end_time;
      head->op.done = head_done;
      head->op.user_data = head;
    }
  batch->n_ops = n;
  batch->n_outstanding = n;
  if (n == 0)
    {
      g_atomic_int_set (&batch->refs, 1);
      lookup_batch_unref (batch);
      return;
    }
  io_op_started (self);
  for (guint i = 0; i < n; i++)
    kv_s3_client_submit (self->client, &batch->ops[i].op);

  g_mutex_lock (&self->lock);
  while (batch->n_outstanding > 0 && !self->shut_down)
    if (!g_cond_wait_until (&self->cond, &self->lock, end_time))
      break;
  for (guint i = 0; i < n_keys; i++)
    results[i] = batch->results[i];
  g_mutex_unlock (&self->lock);
  lookup_batch_unref (batch);
}

static KvLookupResult
kv_s3_tier_lookup (KvSecondaryTier *tier,
                   KvKey           *key,
                   KvRequest       *request)
{
  KvS3Tier *self = KV_S3_TIER (tier);

  /* An open breaker and a load of the key that failed for this request
   * answer MISS before this is called. */
  if (!kv_chunk_key_fits (key))
    return KV_LOOKUP_RESULT_MISS;
  /* a chunk known to be in the bucket: no HEAD (a stale entry costs one
   * failed load, which the manager takes as a miss) */
  if (self->index != NULL && kv_key_index_contains (self->index, kv_key_index_digest (key)))
    {
      count (self, KV_S3_COUNTER_INDEX_HITS, 1);
      return KV_LOOKUP_RESULT_HIT;
    }
  /* the async lookup, which the base class also flushes at each step's
   * end, counts as pending work, cleans up and shuts down */
  return KV_SECONDARY_TIER_CLASS (kv_s3_tier_parent_class)->lookup (tier, key, request);
}

static gboolean
kv_s3_tier_has_pending_work (KvSecondaryTier *tier)
{
  KvS3Tier *self = KV_S3_TIER (tier);
  gboolean pending;

  g_mutex_lock (&self->lock);
  pending = self->n_live_jobs > 0;
  g_mutex_unlock (&self->lock);
  return pending;
}

static KvOffloadPolicy
kv_s3_tier_on_new_request (KvSecondaryTier *tier,
                           KvRequest       *request)
{
  return KV_OFFLOAD_POLICY_CHUNK_LEVEL;
}

/* ---- probe --------------------------------------------------------------- */

static void
probe_done (KvS3Op   *op,
            gpointer  user_data)
{
  IoOp *io = user_data;
  KvS3Tier *self = io->tier;
  /* the object exists or not: either way the store answered */
  gboolean healthy = op->outcome == KV_S3_OP_OK || op->outcome == KV_S3_OP_WRONG_SIZE ||
                     (op->outcome == KV_S3_OP_NOT_FOUND &&
                      g_error_matches (op->error, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_KEY));
  guint64 probe_id = io->probe_id;

  io_op_free (io);
  kv_secondary_tier_complete_probe (KV_SECONDARY_TIER (self), probe_id, healthy);
  io_op_ended (self);
}

static char *
probe_key (KvS3Tier *self)
{
  return g_strconcat (self->key_prefix, PROBE_KEY, NULL);
}

static gboolean
kv_s3_tier_probe (KvSecondaryTier  *tier,
                  guint64           probe_id,
                  GCancellable     *cancellable,
                  GError          **error)
{
  KvS3Tier *self = KV_S3_TIER (tier);
  g_autofree char *key = probe_key (self);
  IoOp *io = g_new0 (IoOp, 1);
  static guint8 sink;

  kv_s3_op_init (&io->op, KV_S3_METHOD_GET, key);
  io->tier = self;
  io->probe_id = probe_id;
  /* a probe object is never written: any length is a wrong size, landing
   * nowhere */
  io->op.dest[0] = &sink;
  io->op.dest_len[0] = 1;
  io->op.deadline = op_deadline (self);
  io->op.done = probe_done;
  io->op.user_data = io;
  io_op_started (self);
  kv_s3_client_submit (self->client, &io->op);
  return TRUE;
}

/* ---- metrics ------------------------------------------------------------- */

static const char *const tier_label_names[] = { "tier", NULL };

const char *
kv_s3_counter_get_name (KvS3Counter counter)
{
  g_return_val_if_fail (counter < KV_S3_N_COUNTERS, NULL);
  return counter_names[counter];
}

#define S3_INDEX_KEYS "kvtier_s3_index_keys"

static gboolean
kv_s3_tier_register_metrics (KvSecondaryTier   *tier,
                             KvMetricRegistry  *registry,
                             GError           **error)
{
  for (guint c = 0; c < KV_S3_N_COUNTERS; c++)
    if (!kv_metric_registry_add_counter (registry, counter_info[c].name, counter_info[c].doc,
                                         tier_label_names, error))
      return FALSE;
  return kv_metric_registry_add_gauge (registry, S3_INDEX_KEYS,
                                       "Chunks in the index of chunks known to be in the bucket",
                                       tier_label_names, error);
}

/* The gauge; the base class adds the counters. */
static KvStats *
kv_s3_tier_get_stats (KvSecondaryTier *tier)
{
  KvS3Tier *self = KV_S3_TIER (tier);
  g_autofree char *label = kv_secondary_tier_dup_metric_label (tier);
  const char *labels[] = { label, NULL };
  KvStats *stats = kv_stats_new ();

  kv_stats_set_gauge (stats, S3_INDEX_KEYS, kv_s3_tier_get_index_size (self), labels);
  return stats;
}

/* ---- shutdown ------------------------------------------------------------ */

/* Fails every request in flight, waits for every job and I/O op to be
 * reported, then stops the client's thread. */
static void
stop_io (KvS3Tier *self)
{
  if (self->client == NULL)
    return;
  g_mutex_lock (&self->lock);
  self->shut_down = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  /* The async lookup is shut down after this, by the base class: a
   * check waiting for its HEADs was woken above, and one that starts
   * later fails at once on the closed client. */
  kv_s3_client_shutdown (self->client);
  /* its request failed on the closed client, and it sends no other */
  if (self->listing != NULL)
    g_thread_join (g_steal_pointer (&self->listing));
  g_mutex_lock (&self->lock);
  while (self->n_live_jobs > 0 || self->n_io_ops > 0)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
  /* no request left to add to it: give its memory back */
  if (self->index != NULL)
    kv_key_index_clear (self->index);
}

static gboolean
kv_s3_tier_shutdown (KvSecondaryTier  *tier,
                     GError          **error)
{
  stop_io (KV_S3_TIER (tier));
  return TRUE;
}

/* ---- construction -------------------------------------------------------- */

static gboolean
prefix_ok (const char *prefix)
{
  gsize len = strlen (prefix);

  if (len > MAX_PREFIX_LEN || (len > 0 && (prefix[0] == '/' || prefix[len - 1] == '/')) ||
      strstr (prefix, "//") != NULL)
    return FALSE;
  for (const char *p = prefix; *p != '\0'; p++)
    if (!g_ascii_isgraph (*p))
      return FALSE;
  return TRUE;
}

/* The endpoint in use: the setting, or AWS's for the region. */
static char *
effective_endpoint (KvS3Tier *self)
{
  if (self->endpoint != NULL && self->endpoint[0] != '\0')
    return g_strdup (self->endpoint);
  return g_strdup_printf ("https://s3.%s.amazonaws.com", self->region != NULL ? self->region : "");
}

static KvS3Addressing
effective_addressing (KvS3Tier   *self,
                      const char *endpoint)
{
  g_autoptr(GUri) uri = NULL;

  if (g_strcmp0 (self->addressing, "path") == 0)
    return KV_S3_ADDRESSING_PATH;
  if (g_strcmp0 (self->addressing, "virtual") == 0)
    return KV_S3_ADDRESSING_VIRTUAL;
  /* auto: AWS wants virtual-hosted requests (path-style is deprecated
   * there), most other stores answer path-style without DNS set-up */
  uri = g_uri_parse (endpoint, G_URI_FLAGS_NONE, NULL);
  if (uri != NULL && g_uri_get_host (uri) != NULL &&
      g_str_has_suffix (g_uri_get_host (uri), ".amazonaws.com") &&
      self->bucket != NULL && strchr (self->bucket, '.') == NULL)
    return KV_S3_ADDRESSING_VIRTUAL;
  return KV_S3_ADDRESSING_PATH;
}

/* What init refuses before it sends a request, and the KvConfigurable
 * check: no network. */
static gboolean
check_configuration (KvS3Tier         *self,
                     KvS3Credentials  *out_credentials,
                     char            **out_endpoint,
                     GError          **error)
{
  KvHostBuffer *primary = kv_secondary_tier_get_primary (KV_SECONDARY_TIER (self));
  g_auto(KvS3Credentials) credentials = { 0 };
  g_autofree char *endpoint = effective_endpoint (self);
  KvS3ClientConfig config = { 0 };
  g_autoptr(GError) local_error = NULL;

  if (primary == NULL)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The s3 tier needs a primary buffer (the primary property)");
      return FALSE;
    }
  if (self->bucket == NULL || self->bucket[0] == '\0')
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The s3 tier needs a bucket (an existing one: the tier makes none)");
      return FALSE;
    }
  if (g_strcmp0 (self->addressing, "auto") != 0 && g_strcmp0 (self->addressing, "path") != 0 &&
      g_strcmp0 (self->addressing, "virtual") != 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "addressing=%s: use auto, path or virtual", self->addressing);
      return FALSE;
    }
  if (self->prefix == NULL || !prefix_ok (self->prefix))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "prefix=%s: at most %u printable characters without spaces, not starting "
                   "or ending with '/', no '//'", self->prefix != NULL ? self->prefix : "",
                   MAX_PREFIX_LEN);
      return FALSE;
    }
  if (self->namespace_ == NULL || self->namespace_[0] == '\0')
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "The s3 tier needs a namespace");
      return FALSE;
    }
  if (self->index_list_at_start && self->index_max_keys == 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "index-list-at-start=true needs an index: index-max-keys is 0");
      return FALSE;
    }
  config.endpoint = endpoint;
  config.bucket = self->bucket;
  config.region = self->region;
  config.addressing = effective_addressing (self, endpoint);
  config.ca_file = self->tls_ca_file;
  config.max_connections = self->max_connections;
  config.connect_timeout_ms = self->connect_timeout_ms;
  config.reply_timeout_ms = self->reply_timeout_ms;
  config.max_attempts = self->max_attempts;
  if (!kv_s3_client_check_config (&config, &local_error))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT, "%s", local_error->message);
      return FALSE;
    }
  if (!kv_s3_credentials_resolve (self->access_key, self->secret_key, self->session_token,
                                  self->credentials_file, self->credentials_profile,
                                  &credentials, &local_error))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT, "%s", local_error->message);
      return FALSE;
    }
  if (out_credentials != NULL)
    {
      *out_credentials = credentials;
      memset (&credentials, 0, sizeof credentials);
    }
  if (out_endpoint != NULL)
    *out_endpoint = g_steal_pointer (&endpoint);
  return TRUE;
}

static gboolean
kv_s3_tier_check (KvConfigurable  *configurable,
                  GError         **error)
{
  return check_configuration (KV_S3_TIER (configurable), NULL, NULL, error);
}

static void
kv_s3_tier_configurable_iface_init (KvConfigurableInterface *iface)
{
  iface->check = kv_s3_tier_check;
}

/* One GET of the probe key: the endpoint answers, the credentials are
 * good, the bucket exists (a 404 NoSuchKey says all three). */
static gboolean
first_contact (KvS3Tier  *self,
               GError   **error)
{
  g_autofree char *key = probe_key (self);
  guint8 sink;
  KvS3Op op;
  gboolean ok;

  kv_s3_op_init (&op, KV_S3_METHOD_GET, key);
  op.dest[0] = &sink;
  op.dest_len[0] = 1;
  op.deadline = g_get_monotonic_time () +
                (gint64) (self->connect_timeout_ms + self->reply_timeout_ms) * 1000;
  kv_s3_client_run (self->client, &op);
  ok = op.outcome == KV_S3_OP_OK || op.outcome == KV_S3_OP_WRONG_SIZE ||
       (op.outcome == KV_S3_OP_NOT_FOUND &&
        g_error_matches (op.error, KV_S3_ERROR, KV_S3_ERROR_NO_SUCH_KEY));
  if (!ok)
    {
      if (op.error != NULL)
        g_propagate_prefixed_error (error, g_steal_pointer (&op.error), "The s3 tier cannot start: ");
      else
        g_set_error (error, KV_S3_ERROR, KV_S3_ERROR_FAILED,
                     "The s3 tier cannot start: GET %s answered HTTP %u", key, op.status);
    }
  kv_s3_op_clear (&op);
  return ok;
}

/* Adds the chunks of one listing page to the index: objects of this
 * namespace whose name is a chunk's and whose size is a chunk record's.
 * FALSE once the index is full. */
static gboolean
index_page (KvS3Tier           *self,
            const KvS3ListPage *page,
            guint              *n_added)
{
  for (guint i = 0; i < page->keys->len; i++)
    {
      const char *name = page->keys->pdata[i];
      guint8 hash[KV_CHUNK_MAX_KEY_HASH_LEN];
      gsize hash_len = 0;
      guint32 group = 0;

      if (strncmp (name, self->key_prefix, self->key_prefix_len) != 0 ||
          g_array_index (page->sizes, gint64, i) != (gint64) self->object_size ||
          !kv_chunk_name_parse (name + self->key_prefix_len, hash, &hash_len, &group))
        continue;
      if (!kv_key_index_add (self->index, kv_key_index_digest_hash (hash, hash_len, group)))
        return FALSE;
      (*n_added)++;
    }
  return TRUE;
}

/* Whether the tier is shutting down (the listing stops). */
static gboolean
is_shut_down (KvS3Tier *self)
{
  gboolean shut_down;

  g_mutex_lock (&self->lock);
  shut_down = self->shut_down;
  g_mutex_unlock (&self->lock);
  return shut_down;
}

/* index-list-at-start: ListObjectsV2 of the namespace's prefix, a page at
 * a time (each at most KV_S3_LIST_MAX_BODY bytes, within the connect and
 * reply timeouts), until the last page, a full index or the tier's
 * shutdown. Its own thread, from construction on: lookups of chunks not
 * listed yet send their HEAD meanwhile. A failure is logged; the index
 * keeps what was listed. */
static gpointer
list_into_index (gpointer data)
{
  KvS3Tier *self = data;
  g_autofree char *token = NULL;
  g_autofree char *max_keys = g_strdup_printf ("%u", KV_S3_LIST_MAX_KEYS);
  g_autoptr(GString) reply = g_string_sized_new (64 * 1024);
  /* a page per KV_S3_LIST_MAX_KEYS keys the index holds, and the last */
  guint max_pages = self->index_max_keys / KV_S3_LIST_MAX_KEYS + 2;
  guint n_pages = 0, n_added = 0;
  gint64 start = g_get_monotonic_time ();

  while (n_pages < max_pages && !is_shut_down (self))
    {
      const char *query[] = {
        "list-type", "2", "max-keys", max_keys, "prefix", self->key_prefix,
        token != NULL ? "continuation-token" : NULL, token, NULL,
      };
      g_auto(KvS3ListPage) page = { 0 };
      g_autoptr(GError) error = NULL;
      KvS3Op op;
      gboolean more;

      kv_s3_op_init (&op, KV_S3_METHOD_GET, NULL);
      op.query = query;
      op.reply = reply;
      op.reply_max = KV_S3_LIST_MAX_BODY;
      op.deadline = g_get_monotonic_time () +
                    (gint64) (self->connect_timeout_ms + self->reply_timeout_ms) * 1000;
      kv_s3_client_run (self->client, &op);
      n_pages++;
      if (op.outcome != KV_S3_OP_OK)
        {
          if (!is_shut_down (self))
            g_message ("s3 tier: the listing that fills the index stopped: %s",
                       op.error != NULL ? op.error->message : "no reply");
          kv_s3_op_clear (&op);
          break;
        }
      kv_s3_op_clear (&op);
      if (!kv_s3_list_page_parse (reply->str, reply->len, &page, &error))
        {
          g_message ("s3 tier: the listing that fills the index stopped: %s", error->message);
          break;
        }
      more = index_page (self, &page, &n_added) &&
             kv_key_index_get_size (self->index) < self->index_max_keys;
      if (!more || !page.truncated)
        break;
      g_free (token);
      token = g_steal_pointer (&page.next_token);
    }
  g_debug ("s3 tier: %u chunks indexed from %u listing pages in %.3f s", n_added, n_pages,
           (g_get_monotonic_time () - start) / 1e6);
  g_mutex_lock (&self->lock);
  self->listed = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  return NULL;
}

/**
 * kv_s3_tier_wait_for_listing:
 * @self: a #KvS3Tier
 *
 * Waits until the listing that index-list-at-start began at construction
 * has ended (at once when there is none), so that the index holds what
 * it listed. For tests and benchmarks: lookups need not wait.
 */
void
kv_s3_tier_wait_for_listing (KvS3Tier *self)
{
  g_return_if_fail (KV_IS_S3_TIER (self));

  g_mutex_lock (&self->lock);
  while (self->listing != NULL && !self->listed)
    g_cond_wait (&self->cond, &self->lock);
  g_mutex_unlock (&self->lock);
}

static gboolean
kv_s3_tier_initable_init (GInitable     *initable,
                          GCancellable  *cancellable,
                          GError       **error)
{
  KvS3Tier *self = KV_S3_TIER (initable);
  KvSecondaryTier *tier = KV_SECONDARY_TIER (initable);
  g_auto(KvS3Credentials) credentials = { 0 };
  g_autofree char *endpoint = NULL;
  g_autofree char *head = NULL;
  KvS3ClientConfig config = { 0 };
  g_autoptr(KvAsyncLookup) async_lookup = NULL;

  if (self->initialized)
    return TRUE;
  if (!check_configuration (self, &credentials, &endpoint, error))
    return FALSE;

  self->primary = kv_secondary_tier_get_primary (tier);
  self->block_size = kv_host_buffer_get_slot_size (self->primary);
  self->object_size = KV_CHUNK_HEADER_SIZE + self->block_size;
  self->n_slots = kv_host_buffer_get_n_slots (self->primary);
  self->locality = kv_secondary_tier_get_locality (tier);
  kv_chunk_namespace_digest (self->namespace_, self->block_size, self->namespace_digest);
  head = self->prefix[0] != '\0' ? g_strconcat (self->prefix, "/", NULL) : g_strdup ("");
  self->key_prefix = kv_chunk_name_namespace_prefix (head, self->namespace_digest, '/');
  self->key_prefix_len = strlen (self->key_prefix);

  config.endpoint = endpoint;
  config.bucket = self->bucket;
  config.region = self->region;
  config.addressing = effective_addressing (self, endpoint);
  config.access_key = credentials.access_key;
  config.secret_key = credentials.secret_key;
  config.session_token = credentials.session_token;
  config.ca_file = self->tls_ca_file;
  config.max_connections = self->max_connections;
  config.connect_timeout_ms = self->connect_timeout_ms;
  config.reply_timeout_ms = self->reply_timeout_ms;
  config.max_attempts = self->max_attempts;
  config.retry_base_ms = RETRY_BASE_MS;
  /* the client counts in the tier's set, after the tier's own counters */
  config.counters = self->counters;
  config.first_counter = KV_S3_COUNTER_REQUESTS;
  {
    g_autoptr(GError) local_error = NULL;

    self->client = kv_s3_client_new (&config, &local_error);
    if (self->client == NULL)
      {
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                     "The s3 tier cannot start: %s", local_error->message);
        return FALSE;
      }
  }

  /* Contact the store once, so that a wrong endpoint, bucket or key fails
   * here with one clear error rather than as failed jobs. */
  if (!first_contact (self, error))
    {
      kv_s3_client_shutdown (self->client);
      g_clear_object (&self->client);
      return FALSE;
    }
  g_debug ("s3 tier: %s bucket %s, credentials from %s", endpoint, self->bucket, credentials.source);

  if (self->index_max_keys > 0)
    self->index = kv_key_index_new (self->index_max_keys);
  if (self->index != NULL && self->index_list_at_start)
    self->listing = g_thread_new ("kv-s3-list", list_into_index, self);
  async_lookup = kv_async_lookup_new (kv_secondary_tier_get_tier_type (tier),
                                      batch_heads, self, NULL, 2, 8, 16384);
  /* the base class runs it (see kv_secondary_tier_set_async_lookup) */
  kv_secondary_tier_set_async_lookup (tier, async_lookup);
  self->initialized = TRUE;
  return TRUE;
}

static void
kv_s3_tier_initable_iface_init (GInitableIface *iface)
{
  iface->init = kv_s3_tier_initable_init;
}

/* ---- GObject ------------------------------------------------------------- */

static void
kv_s3_tier_dispose (GObject *object)
{
  KvS3Tier *self = KV_S3_TIER (object);

  /* internal teardown only: no vfunc, no signal */
  stop_io (self);
  G_OBJECT_CLASS (kv_s3_tier_parent_class)->dispose (object);
}

static void
wipe (char **field)
{
  if (*field != NULL)
    memset (*field, 0, strlen (*field));
  g_clear_pointer (field, g_free);
}

static void
kv_s3_tier_finalize (GObject *object)
{
  KvS3Tier *self = KV_S3_TIER (object);

  g_clear_object (&self->client);
  g_clear_pointer (&self->index, kv_key_index_free);
  g_clear_pointer (&self->counters, kv_counter_set_unref);
  g_free (self->key_prefix);
  g_free (self->endpoint);
  g_free (self->bucket);
  g_free (self->region);
  g_free (self->addressing);
  g_free (self->prefix);
  g_free (self->namespace_);
  g_free (self->access_key);
  wipe (&self->secret_key);
  wipe (&self->session_token);
  g_free (self->credentials_file);
  g_free (self->credentials_profile);
  g_free (self->tls_ca_file);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (kv_s3_tier_parent_class)->finalize (object);
}

static void
kv_s3_tier_get_property (GObject    *object,
                         guint       prop_id,
                         GValue     *value,
                         GParamSpec *pspec)
{
  KvS3Tier *self = KV_S3_TIER (object);

  switch (prop_id)
    {
    case PROP_ENDPOINT: g_value_set_string (value, self->endpoint); break;
    case PROP_BUCKET: g_value_set_string (value, self->bucket); break;
    case PROP_REGION: g_value_set_string (value, self->region); break;
    case PROP_ADDRESSING: g_value_set_string (value, self->addressing); break;
    case PROP_PREFIX: g_value_set_string (value, self->prefix); break;
    case PROP_NAMESPACE: g_value_set_string (value, self->namespace_); break;
    case PROP_ACCESS_KEY: g_value_set_string (value, self->access_key); break;
    /* the secrets are write-only */
    case PROP_CREDENTIALS_FILE: g_value_set_string (value, self->credentials_file); break;
    case PROP_CREDENTIALS_PROFILE: g_value_set_string (value, self->credentials_profile); break;
    case PROP_TLS_CA_FILE: g_value_set_string (value, self->tls_ca_file); break;
    case PROP_MAX_CONNECTIONS: g_value_set_uint (value, self->max_connections); break;
    case PROP_CONNECT_TIMEOUT_MS: g_value_set_uint (value, self->connect_timeout_ms); break;
    case PROP_REPLY_TIMEOUT_MS: g_value_set_uint (value, self->reply_timeout_ms); break;
    case PROP_MAX_ATTEMPTS: g_value_set_uint (value, self->max_attempts); break;
    case PROP_INDEX_MAX_KEYS: g_value_set_uint (value, self->index_max_keys); break;
    case PROP_INDEX_LIST_AT_START: g_value_set_boolean (value, self->index_list_at_start); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
set_string (char         **field,
            const GValue  *value)
{
  g_free (*field);
  *field = g_value_dup_string (value);
}

static void
kv_s3_tier_set_property (GObject      *object,
                         guint         prop_id,
                         const GValue *value,
                         GParamSpec   *pspec)
{
  KvS3Tier *self = KV_S3_TIER (object);

  switch (prop_id)
    {
    case PROP_ENDPOINT: set_string (&self->endpoint, value); break;
    case PROP_BUCKET: set_string (&self->bucket, value); break;
    case PROP_REGION: set_string (&self->region, value); break;
    case PROP_ADDRESSING: set_string (&self->addressing, value); break;
    case PROP_PREFIX: set_string (&self->prefix, value); break;
    case PROP_NAMESPACE: set_string (&self->namespace_, value); break;
    case PROP_ACCESS_KEY: set_string (&self->access_key, value); break;
    case PROP_SECRET_KEY: wipe (&self->secret_key); self->secret_key = g_value_dup_string (value); break;
    case PROP_SESSION_TOKEN: wipe (&self->session_token); self->session_token = g_value_dup_string (value); break;
    case PROP_CREDENTIALS_FILE: set_string (&self->credentials_file, value); break;
    case PROP_CREDENTIALS_PROFILE: set_string (&self->credentials_profile, value); break;
    case PROP_TLS_CA_FILE: set_string (&self->tls_ca_file, value); break;
    case PROP_MAX_CONNECTIONS: self->max_connections = g_value_get_uint (value); break;
    case PROP_CONNECT_TIMEOUT_MS: self->connect_timeout_ms = g_value_get_uint (value); break;
    case PROP_REPLY_TIMEOUT_MS: self->reply_timeout_ms = g_value_get_uint (value); break;
    case PROP_MAX_ATTEMPTS: self->max_attempts = g_value_get_uint (value); break;
    case PROP_INDEX_MAX_KEYS: self->index_max_keys = g_value_get_uint (value); break;
    case PROP_INDEX_LIST_AT_START: self->index_list_at_start = g_value_get_boolean (value); break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

#define CONSTRUCT_FLAGS (G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | \
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY)
#define SECRET_FLAGS    (G_PARAM_WRITABLE | G_PARAM_CONSTRUCT_ONLY | \
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY)

static void
kv_s3_tier_class_init (KvS3TierClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  KvSecondaryTierClass *tier_class = KV_SECONDARY_TIER_CLASS (klass);

  object_class->dispose = kv_s3_tier_dispose;
  object_class->finalize = kv_s3_tier_finalize;
  object_class->get_property = kv_s3_tier_get_property;
  object_class->set_property = kv_s3_tier_set_property;

  tier_class->medium = KV_MEDIUM_STORAGE;
  tier_class->lookup = kv_s3_tier_lookup;
  tier_class->submit_store = kv_s3_tier_submit_store;
  tier_class->submit_load = kv_s3_tier_submit_load;
  tier_class->has_pending_work = kv_s3_tier_has_pending_work;
  tier_class->on_new_request = kv_s3_tier_on_new_request;
  tier_class->shutdown = kv_s3_tier_shutdown;
  tier_class->register_metrics = kv_s3_tier_register_metrics;
  tier_class->get_stats = kv_s3_tier_get_stats;
  tier_class->probe = kv_s3_tier_probe;
  /* A PUT whose body reached the gateway runs when the gateway resumes,
   * whatever the job's cancellable says: a store failed at its deadline
   * keeps its slots pinned until the tier reports it. */
  tier_class->can_cancel_stores = FALSE;

  /**
   * KvS3Tier:endpoint:
   *
   * `http[s]://host[:port]` of the S3 API; %NULL: AWS's endpoint of
   * [property@KvS3Tier:region] (`https://s3.<region>.amazonaws.com`).
   */
  properties[PROP_ENDPOINT] =
    g_param_spec_string ("endpoint", NULL, "http[s]://host[:port] of the S3 API (default: AWS's for the region)",
                         NULL, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:bucket:
   *
   * The bucket the chunks are objects of; it must exist (the tier makes
   * none).
   */
  properties[PROP_BUCKET] =
    g_param_spec_string ("bucket", NULL, "the bucket (it must exist)", NULL, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:region:
   *
   * The region requests are signed for (SigV4's scope).
   */
  properties[PROP_REGION] =
    g_param_spec_string ("region", NULL, "the region requests are signed for", DEFAULT_REGION,
                         CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:addressing:
   *
   * `path` (`https://host/bucket/key`), `virtual`
   * (`https://bucket.host/key`), or `auto`: virtual on AWS, path
   * elsewhere.
   */
  properties[PROP_ADDRESSING] =
    g_param_spec_string ("addressing", NULL, "path, virtual, or auto (virtual on AWS, path elsewhere)",
                         "auto", CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:prefix:
   *
   * What every object key starts with (before the namespace digest);
   * empty: nothing.
   */
  properties[PROP_PREFIX] =
    g_param_spec_string ("prefix", NULL, "the object keys' prefix", DEFAULT_PREFIX, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:namespace:
   *
   * The cache identity (model, dtype, layout, parallelism...): its digest,
   * with the chunk size, is part of every object key and every object's
   * header, so tiers with different identities never read each other's
   * chunks.
   */
  properties[PROP_NAMESPACE] =
    g_param_spec_string ("namespace", NULL, "the cache identity", "default", CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:access-key:
   *
   * The access key id; unset: the environment's or a credentials file's.
   */
  properties[PROP_ACCESS_KEY] =
    g_param_spec_string ("access-key", NULL, "the access key id (else AWS_ACCESS_KEY_ID or a credentials file)",
                         NULL, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:secret-key:
   *
   * The secret access key (write-only).
   */
  properties[PROP_SECRET_KEY] =
    g_param_spec_string ("secret-key", NULL, "the secret access key (write-only)", NULL, SECRET_FLAGS);

  /**
   * KvS3Tier:session-token:
   *
   * A session token of temporary credentials (write-only).
   */
  properties[PROP_SESSION_TOKEN] =
    g_param_spec_string ("session-token", NULL, "the session token of temporary credentials (write-only)",
                         NULL, SECRET_FLAGS);

  /**
   * KvS3Tier:credentials-file:
   *
   * A credentials file in AWS's format (mode 0600, of this user), read
   * when neither the settings nor the environment give credentials;
   * unset: `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`.
   */
  properties[PROP_CREDENTIALS_FILE] =
    g_param_spec_string ("credentials-file", NULL, "an AWS credentials file (mode 0600)", NULL,
                         CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:credentials-profile:
   *
   * The profile (section) of the credentials file.
   */
  properties[PROP_CREDENTIALS_PROFILE] =
    g_param_spec_string ("credentials-profile", NULL, "the credentials file's profile", "default",
                         CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:tls-ca-file:
   *
   * A PEM file of the CAs that sign an https endpoint's certificate;
   * unset: the system's.
   */
  properties[PROP_TLS_CA_FILE] =
    g_param_spec_string ("tls-ca-file", NULL, "the CAs of an https endpoint (PEM)", NULL,
                         CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:max-connections:
   *
   * The most connections (and requests in flight) to the endpoint; more
   * requests wait in the tier.
   */
  properties[PROP_MAX_CONNECTIONS] =
    g_param_spec_uint ("max-connections", NULL, "the most connections (and requests in flight)",
                       1, 1024, DEFAULT_MAX_CONNECTIONS, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:connect-timeout-ms:
   *
   * How long a connection (TLS included) may take to open.
   */
  properties[PROP_CONNECT_TIMEOUT_MS] =
    g_param_spec_uint ("connect-timeout-ms", NULL, "how long a connection may take to open",
                       1, G_MAXINT / 2, DEFAULT_CONNECT_TIMEOUT_MS, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:reply-timeout-ms:
   *
   * The most one request may take, from sending to the last byte of its
   * reply (the job's deadline bounds it too).
   */
  properties[PROP_REPLY_TIMEOUT_MS] =
    g_param_spec_uint ("reply-timeout-ms", NULL, "the most one request may take, reply included",
                       1, G_MAXINT / 2, DEFAULT_REPLY_TIMEOUT_MS, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:max-attempts:
   *
   * How many times a request is sent when the store answers SlowDown or a
   * server error, or the connection breaks (with backoff, within the
   * job's deadline).
   */
  properties[PROP_MAX_ATTEMPTS] =
    g_param_spec_uint ("max-attempts", NULL, "how many times a transiently failing request is sent",
                       1, 100, DEFAULT_MAX_ATTEMPTS, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:index-max-keys:
   *
   * The most chunks the tier's index of the chunks it knows are in the
   * bucket holds (16 to 32 bytes each): a lookup of an indexed chunk is
   * answered without a `HEAD`. When it is full, chunks are not added
   * (their lookups send a `HEAD`); 0 turns the index off.
   */
  properties[PROP_INDEX_MAX_KEYS] =
    g_param_spec_uint ("index-max-keys", NULL,
                       "the most chunks the index of known chunks holds (0: no index)",
                       0, KV_KEY_INDEX_MAX_KEYS_LIMIT, DEFAULT_INDEX_MAX_KEYS, CONSTRUCT_FLAGS);

  /**
   * KvS3Tier:index-list-at-start:
   *
   * Whether the tier fills its index with a listing of the namespace's
   * objects (`ListObjectsV2`, 1000 a page, until the index is full), so
   * that a restarted process looks up the chunks already in the bucket
   * without a `HEAD` each. The listing runs on a thread of its own from
   * construction on; construction does not wait for it, and lookups of
   * chunks not listed yet send their `HEAD` meanwhile. It needs
   * `s3:ListBucket`; a listing that fails is logged and leaves the index
   * as far as it got.
   */
  properties[PROP_INDEX_LIST_AT_START] =
    g_param_spec_boolean ("index-list-at-start", NULL,
                          "fill the index with a listing of the bucket, from construction on",
                          FALSE, CONSTRUCT_FLAGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_s3_tier_init (KvS3Tier *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->region = g_strdup (DEFAULT_REGION);
  self->addressing = g_strdup ("auto");
  self->prefix = g_strdup (DEFAULT_PREFIX);
  self->namespace_ = g_strdup ("default");
  self->credentials_profile = g_strdup ("default");
  self->max_connections = DEFAULT_MAX_CONNECTIONS;
  self->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
  self->reply_timeout_ms = DEFAULT_REPLY_TIMEOUT_MS;
  self->max_attempts = DEFAULT_MAX_ATTEMPTS;
  self->index_max_keys = DEFAULT_INDEX_MAX_KEYS;
  {
    const char *names[KV_S3_N_COUNTERS + 1] = { NULL };

    for (guint c = 0; c < KV_S3_N_COUNTERS; c++)
      names[c] = counter_info[c].name;
    self->counters = kv_counter_set_new (names);
  }
  /* the base class reports what they moved, every one from the first
   * get_stats (the families exist from start-up) */
  kv_secondary_tier_set_counters (KV_SECONDARY_TIER (self), self->counters);
  /* this tier's defaults for the base class's liveness knobs */
  kv_secondary_tier_set_deadline_ms (KV_SECONDARY_TIER (self), 5000);
  kv_circuit_breaker_set_failure_threshold (
    kv_secondary_tier_get_circuit_breaker (KV_SECONDARY_TIER (self)), 5);
}

/* ---- API ----------------------------------------------------------------- */

/* An s3 tier on @endpoint's @bucket with every other property at its
 * default (credentials from the environment or a credentials file).
 * Owner thread; sends one request. */
KvS3Tier *
kv_s3_tier_new (KvHostBuffer  *primary,
                const char    *endpoint,
                const char    *bucket,
                GError       **error)
{
  return g_initable_new (KV_TYPE_S3_TIER, NULL, error,
                         "tier-type", "s3",
                         "primary", primary,
                         "endpoint", endpoint,
                         "bucket", bucket,
                         NULL);
}

/* Any thread. */
guint64
kv_s3_tier_get_counter (KvS3Tier    *self,
                        KvS3Counter  counter)
{
  g_return_val_if_fail (KV_IS_S3_TIER (self), 0);
  g_return_val_if_fail (counter < KV_S3_N_COUNTERS, 0);

  return kv_counter_set_get (self->counters, counter);
}

/* The object key of @key (for tests and tools). */
char *
kv_s3_tier_get_object_key (KvS3Tier *self,
                           KvKey    *key)
{
  g_return_val_if_fail (KV_IS_S3_TIER (self) && self->initialized, NULL);
  return object_key (self, key);
}

/* The chunks in the tier's index now (0 without one). Any thread. */
guint
kv_s3_tier_get_index_size (KvS3Tier *self)
{
  g_return_val_if_fail (KV_IS_S3_TIER (self), 0);
  return self->index != NULL ? kv_key_index_get_size (self->index) : 0;
}
