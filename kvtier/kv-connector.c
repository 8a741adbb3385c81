/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-connector.h"
#include "kv-metric-registry-private.h"

#include "kv-prefix-lookup-private.h"
#include "kv-tiering-manager-private.h"
#include "kv-wakeup-source-private.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>


/* vLLM's transfer types, indexed by KvDeviceDirection. */
static const char * const transfer_types[2] = { "GPU_to_CPU", "CPU_to_GPU" };

typedef struct
{
  KvRequest  *request;
  GHashTable *sources;   /* KvKey → GUINT_TO_POINTER (source + 1): first found */
  guint       n_transfers;
  gboolean    finished;
} RequestState;

typedef struct
{
  KvDeviceDirection     direction;
  RequestState         *state;
  KvKey               **keys;       /* borrowed from @lookup or @prepared */
  guint                 n_keys;
  KvPrefixLookup       *lookup;     /* loads */
  KvPrepareStoreResult *prepared;   /* stores */
} Job;

/* Counted since the last get_stats(). */
typedef struct
{
  guint64 *hits;          /* n_sources */
  guint64  computed;
  guint64  refused;
  guint64  bytes[2];
  gdouble  time[2];
  guint64  failures[2];
  guint64  mgr_ns;
  guint64  lookups;
  guint64  steps;
} Counters;

struct _KvConnector
{
  GObject           parent_instance;

  KvTieringManager *manager;
  KvPrimaryTier    *primary;
  KvDevice         *device;
  guint             n_tiers;
  guint             n_sources;
  guint             bpc;
  char            **source_labels;  /* n_sources, for metric labels */

  GHashTable       *requests;   /* request id → RequestState */
  GHashTable       *jobs;       /* device job id (guint64 *) → Job */
  GPtrArray        *ready;      /* KvRequest: no transfer left since the last take_finished */
  int               epoll_fd;
  gboolean          shut_down;

  Counters          counters;
  guint64           total_mgr_ns;
  guint64           total_lookup_ns;
  guint64           total_lookups;
};

G_DEFINE_FINAL_TYPE (KvConnector, kv_connector, G_TYPE_OBJECT)

enum {
  PROP_0,
  PROP_MANAGER,
  PROP_DEVICE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static inline guint64
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (guint64) ts.tv_sec * G_GUINT64_CONSTANT (1000000000) + (guint64) ts.tv_nsec;
}

/* Every manager call is timed into the manager time the connector reports. */
#define TIMED(self, stmt)                                   \
  G_STMT_START {                                            \
    guint64 _t0 = now_ns ();                                \
    stmt;                                                   \
    kv_connector_add_manager_time ((self), now_ns () - _t0); \
  } G_STMT_END

static inline void
kv_connector_add_manager_time (KvConnector *self,
                               guint64      ns)
{
  self->counters.mgr_ns += ns;
  self->total_mgr_ns += ns;
}

static void
request_state_free (gpointer data)
{
  RequestState *state = data;

  g_hash_table_unref (state->sources);
  g_object_unref (state->request);
  g_free (state);
}

static void
job_free (gpointer data)
{
  Job *job = data;

  g_clear_pointer (&job->lookup, kv_prefix_lookup_unref);
  g_clear_pointer (&job->prepared, kv_prepare_store_result_unref);
  g_free (job);
}

static void
kv_connector_dispose (GObject *object)
{
  KvConnector *self = KV_CONNECTOR (object);

  /* Jobs still listed were never reported: their requests go with them. */
  g_clear_pointer (&self->jobs, g_hash_table_unref);
  g_clear_pointer (&self->requests, g_hash_table_unref);
  g_clear_pointer (&self->ready, g_ptr_array_unref);
  g_clear_object (&self->device);
  g_clear_object (&self->primary);
  g_clear_object (&self->manager);

  G_OBJECT_CLASS (kv_connector_parent_class)->dispose (object);
}

static void
kv_connector_finalize (GObject *object)
{
  KvConnector *self = KV_CONNECTOR (object);

  if (self->epoll_fd >= 0)
    close (self->epoll_fd);
  g_strfreev (self->source_labels);
  g_free (self->counters.hits);

  G_OBJECT_CLASS (kv_connector_parent_class)->finalize (object);
}

static void
kv_connector_get_property (GObject    *object,
                           guint       prop_id,
                           GValue     *value,
                           GParamSpec *pspec)
{
  KvConnector *self = KV_CONNECTOR (object);

  switch (prop_id)
    {
    case PROP_MANAGER:
      g_value_set_object (value, self->manager);
      break;
    case PROP_DEVICE:
      g_value_set_object (value, self->device);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_connector_class_init (KvConnectorClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = kv_connector_dispose;
  object_class->finalize = kv_connector_finalize;
  object_class->get_property = kv_connector_get_property;

  /**
   * KvConnector:manager:
   *
   * The tiering manager the connector drives.
   */
  properties[PROP_MANAGER] =
    g_param_spec_object ("manager", NULL, NULL, KV_TYPE_TIERING_MANAGER,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);

  /**
   * KvConnector:device:
   *
   * The device that moves chunks between device blocks and primary slots.
   */
  properties[PROP_DEVICE] =
    g_param_spec_object ("device", NULL, NULL, KV_TYPE_DEVICE,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_connector_init (KvConnector *self)
{
  self->epoll_fd = -1;
  self->requests = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, request_state_free);
  self->jobs = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, job_free);
  self->ready = g_ptr_array_new_null_terminated (8, g_object_unref, TRUE);
}

/**
 * KvConnector:
 *
 * The engine-facing object, kvtier's counterpart of vLLM's offloading
 * connector: it owns a [class@Kv.TieringManager] and a [class@Kv.Device]
 * and gives an inference engine one call per thing it does in a step.
 *
 * - [method@Kv.Connector.add_request] and
 *   [method@Kv.Connector.finish_request] bracket a request.
 * - [method@Kv.Connector.lookup] looks a prompt's chunks up, after the
 *   engine's own device prefix, in the manager (primary tier, then the
 *   secondary tiers, which start promotions) and says how many leading
 *   chunks are where.
 * - [method@Kv.Connector.load] copies the ready hits into device blocks
 *   the engine names (the block table is the engine's): primary slots are
 *   pinned until the device has read them.
 *   [method@Kv.Connector.store] copies newly computed chunks from device
 *   blocks into primary slots; when the copy is done the manager completes
 *   the store and cascades it to every secondary tier.
 *   [method@Kv.Connector.touch] refreshes the recency of reused chunks.
 * - [method@Kv.Connector.end_step] ends the scheduler step.
 * - [method@Kv.Connector.get_wakeup_fd] (or a source from
 *   [method@Kv.Connector.create_source]) becomes readable when a device
 *   transfer or a tier job has finished, so an idle engine sleeps instead
 *   of polling; [method@Kv.Connector.take_finished] then reports each
 *   device transfer exactly once, after applying it to the manager.
 * - [method@Kv.Connector.get_stats] returns, and resets, the manager's
 *   metrics (vLLM's names) with the connector's own: bytes and time per
 *   device direction (`vllm:kv_offload_total_bytes` and
 *   `vllm:kv_offload_total_time`, labelled `GPU_to_CPU` / `CPU_to_GPU`),
 *   hits per source, computed chunks, refused stores and the time spent in
 *   the manager.
 *
 * Everything runs on the owner thread, the one that drives the manager.
 */

/**
 * kv_connector_new:
 * @manager: a tiering manager
 * @device: an initialized device whose primary buffer is @manager's
 * @error: return location for an error
 *
 * Creates a connector that drives @manager and @device. The connector
 * takes every result of @device: do not submit to it or take its results
 * behind the connector's back.
 *
 * Returns: (transfer full): a new connector, or %NULL with @error set when
 *   the device does not copy into the manager's primary buffer or is not
 *   initialized
 */
KvConnector *
kv_connector_new (KvTieringManager  *manager,
                  KvDevice          *device,
                  GError           **error)
{
  g_autoptr(KvConnector) self = NULL;
  KvPrimaryTier *primary;
  int fds[2];

  g_return_val_if_fail (KV_IS_TIERING_MANAGER (manager), NULL);
  g_return_val_if_fail (KV_IS_DEVICE (device), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  primary = kv_tiering_manager_get_primary (manager);
  if (kv_device_get_primary (device) != kv_primary_tier_get_buffer (primary))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "%s: the device copies into another buffer than the manager's"
                   " primary tier", G_OBJECT_TYPE_NAME (device));
      return NULL;
    }
  if (kv_device_get_wakeup_fd (device) < 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "%s: the device is not initialized (create it with"
                   " g_initable_new() or its constructor)", G_OBJECT_TYPE_NAME (device));
      return NULL;
    }

  self = g_object_new (KV_TYPE_CONNECTOR, NULL);
  self->manager = g_object_ref (manager);
  self->primary = g_object_ref (primary);
  self->device = g_object_ref (device);
  self->bpc = kv_device_get_blocks_per_chunk (device);
  self->n_tiers = kv_tiering_manager_get_n_tiers (manager);
  self->n_sources = KV_CHUNK_SOURCE_TIER + self->n_tiers;
  self->counters.hits = g_new0 (guint64, self->n_sources);
  self->source_labels = g_new0 (char *, self->n_sources + 1);
  self->source_labels[KV_CHUNK_SOURCE_DEVICE] = g_strdup ("device");
  self->source_labels[KV_CHUNK_SOURCE_PRIMARY] = g_strdup ("0:primary");
  for (guint t = 0; t < self->n_tiers; t++)
    self->source_labels[KV_CHUNK_SOURCE_TIER + t] =
      g_strdup_printf ("%u:%s", t + 1,
                       kv_secondary_tier_get_tier_type (kv_tiering_manager_get_tier (manager, t)));

  /* One descriptor for both wake-ups: an epoll set is itself readable
   * while one of its members is. */
  self->epoll_fd = epoll_create1 (EPOLL_CLOEXEC);
  fds[0] = kv_device_get_wakeup_fd (device);
  fds[1] = kv_tiering_manager_get_wakeup_fd (manager);
  for (guint i = 0; i < G_N_ELEMENTS (fds) && self->epoll_fd >= 0; i++)
    {
      struct epoll_event event = { .events = EPOLLIN, .data.u32 = i };

      if (fds[i] >= 0 && epoll_ctl (self->epoll_fd, EPOLL_CTL_ADD, fds[i], &event) < 0)
        {
          close (self->epoll_fd);
          self->epoll_fd = -1;
        }
    }
  if (self->epoll_fd < 0)
    {
      int errsv = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errsv),
                   "Could not create the connector's wake-up descriptor: %s",
                   g_strerror (errsv));
      return NULL;
    }

  return g_steal_pointer (&self);
}

/**
 * kv_connector_get_manager:
 * @self: a connector
 *
 * Gets the manager.
 *
 * Returns: (transfer none): the manager
 */
KvTieringManager *
kv_connector_get_manager (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);
  return self->manager;
}

/**
 * kv_connector_get_device:
 * @self: a connector
 *
 * Gets the device.
 *
 * Returns: (transfer none): the device
 */
KvDevice *
kv_connector_get_device (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);
  return self->device;
}

static RequestState *
find_request (KvConnector *self,
              KvRequest   *request)
{
  return g_hash_table_lookup (self->requests, kv_request_get_id (request));
}

static void
maybe_forget_request (KvConnector  *self,
                      RequestState *state)
{
  if (state->finished && state->n_transfers == 0)
    g_hash_table_remove (self->requests, kv_request_get_id (state->request));
}

/**
 * kv_connector_add_request:
 * @self: a connector
 * @request: a new request
 *
 * Announces @request to the manager (and through it to every tier). Call
 * once per request, before its first lookup. Announcing a request whose id
 * is still tracked starts it over.
 *
 * Returns: the offload policy the tiers want for it
 */
KvOffloadPolicy
kv_connector_add_request (KvConnector *self,
                          KvRequest   *request)
{
  RequestState *state;
  KvOffloadPolicy policy;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_return_val_if_fail (KV_IS_REQUEST (request), KV_OFFLOAD_POLICY_CHUNK_LEVEL);
  g_return_val_if_fail (!self->shut_down, KV_OFFLOAD_POLICY_CHUNK_LEVEL);

  state = find_request (self, request);
  if (state == NULL)
    {
      state = g_new0 (RequestState, 1);
      state->request = g_object_ref (request);
      state->sources = g_hash_table_new_full (kv_key_hash, kv_key_equal,
                                              (GDestroyNotify) kv_key_unref, NULL);
      g_hash_table_insert (self->requests, (gpointer) kv_request_get_id (state->request), state);
    }
  else
    {
      /* Its transfers still in flight stay counted until they land. */
      g_hash_table_remove_all (state->sources);
      state->finished = FALSE;
    }

  TIMED (self, policy = kv_tiering_manager_on_new_request (self->manager, request));
  return policy;
}

/**
 * kv_connector_finish_request:
 * @self: a connector
 * @request: a request announced with [method@Kv.Connector.add_request]
 *
 * Tells the manager that @request is finished: no lookup, load or store
 * for it follows. Transfers already submitted still complete and are
 * reported by [method@Kv.Connector.take_finished].
 *
 * Returns: %TRUE when transfers of @request are still in flight: the
 *   engine must keep the request's device blocks until they are reported
 */
gboolean
kv_connector_finish_request (KvConnector *self,
                             KvRequest   *request)
{
  RequestState *state;
  gboolean busy;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), FALSE);
  g_return_val_if_fail (KV_IS_REQUEST (request), FALSE);
  g_return_val_if_fail (!self->shut_down, FALSE);

  state = find_request (self, request);
  if (state == NULL)
    {
      g_critical ("kv_connector_finish_request: request %s was not added",
                  kv_request_get_id (request));
      return FALSE;
    }

  if (state->finished)
    {
      g_critical ("kv_connector_finish_request: request %s was finished already",
                  kv_request_get_id (request));
      return state->n_transfers > 0;
    }

  TIMED (self, kv_tiering_manager_on_request_finished (self->manager, request));
  state->finished = TRUE;
  busy = state->n_transfers > 0;
  maybe_forget_request (self, state);
  return busy;
}

/**
 * kv_connector_get_n_transfers:
 * @self: a connector
 * @request: a request
 *
 * Gets the number of device transfers of @request not yet reported by
 * [method@Kv.Connector.take_finished]. A request whose loads are all
 * reported has its loaded chunks in its device blocks: it is ready to run.
 *
 * Returns: the number of transfers in flight, 0 for an unknown request
 */
guint
kv_connector_get_n_transfers (KvConnector *self,
                              KvRequest   *request)
{
  RequestState *state;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), 0);
  g_return_val_if_fail (KV_IS_REQUEST (request), 0);

  state = find_request (self, request);
  return state != NULL ? state->n_transfers : 0;
}

/**
 * kv_connector_lookup:
 * @self: a connector
 * @request: a request announced with [method@Kv.Connector.add_request]
 * @keys: (array length=n_keys): the keys of the prompt's chunks, in order
 * @n_keys: the number of chunks
 * @n_device: how many leading chunks the engine's device prefix cache
 *   holds already; they are not looked up
 * @error: return location for an error
 *
 * Looks the prompt up after its device prefix: in the manager, chunk by
 * chunk, up to the first chunk no tier holds (a miss, or a tier that does
 * not know yet). A chunk a secondary tier holds starts its promotion into
 * the primary tier, submitted at the end of the step. Call it again in a
 * later step while the answer is not complete
 * ([method@Kv.PrefixLookup.is_complete]): the chunks on their way answer
 * ready once they landed, and keep the source of the promotion that
 * brought them (the tier the manager promoted from; after a failed load,
 * the tier of the promotion that followed).
 *
 * Returns: (transfer full): how many leading chunks are where, or %NULL
 *   with @error set when the request was not added or @n_device exceeds
 *   @n_keys
 */
KvPrefixLookup *
kv_connector_lookup (KvConnector    *self,
                     KvRequest      *request,
                     KvKey * const  *keys,
                     guint           n_keys,
                     guint           n_device,
                     GError        **error)
{
  g_autoptr(KvPrefixLookup) lookup = NULL;
  g_autofree KvLookupResult *results = NULL;
  g_autofree guint *promoted_from = NULL;
  RequestState *state;
  guint64 t0, dt;
  guint stop, n_looked;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);
  g_return_val_if_fail (KV_IS_REQUEST (request), NULL);
  g_return_val_if_fail (keys != NULL || n_keys == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  g_return_val_if_fail (!self->shut_down, NULL);

  state = find_request (self, request);
  if (state == NULL || state->finished)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND,
                   "lookup: request %s is not active; call kv_connector_add_request() first",
                   kv_request_get_id (request));
      return NULL;
    }
  if (n_device > n_keys)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "lookup of %s: a device prefix of %u chunks in a prompt of %u",
                   kv_request_get_id (request), n_device, n_keys);
      return NULL;
    }

  lookup = _kv_prefix_lookup_new (request, keys, n_keys, self->n_sources);
  lookup->n_device = n_device;
  for (guint c = 0; c < n_device; c++)
    lookup->sources[c] = KV_CHUNK_SOURCE_DEVICE;
  lookup->n_from[KV_CHUNK_SOURCE_DEVICE] = n_device;

  results = g_new (KvLookupResult, MAX (n_keys, 1));
  promoted_from = g_new (guint, MAX (n_keys, 1));

  /* The manager says which tier a lookup started a promotion from. */
  t0 = now_ns ();
  for (stop = n_device; stop < n_keys; stop++)
    {
      results[stop] = _kv_tiering_manager_lookup_promoting (self->manager, keys[stop], request,
                                                            &promoted_from[stop]);
      if (results[stop] == KV_LOOKUP_RESULT_MISS || results[stop] == KV_LOOKUP_RESULT_RETRY)
        break;
    }
  dt = now_ns () - t0;
  kv_connector_add_manager_time (self, dt);
  self->total_lookup_ns += dt;
  n_looked = MIN (stop + 1, n_keys) - n_device;
  self->counters.lookups += n_looked;
  self->total_lookups += n_looked;

  stop = MIN (stop, n_keys);
  lookup->n_hits = stop - n_device;
  lookup->retry = stop < n_keys && results[stop] == KV_LOOKUP_RESULT_RETRY;
  while (n_device + lookup->n_ready < stop &&
         results[n_device + lookup->n_ready] == KV_LOOKUP_RESULT_HIT)
    lookup->n_ready++;

  for (guint c = n_device; c < stop; c++)
    {
      gpointer known;
      guint8 source;

      if (promoted_from[c] != KV_TIER_INDEX_NONE)
        {
          /* this lookup promotes it: also after a failed load from another tier */
          source = (guint8) (KV_CHUNK_SOURCE_TIER + promoted_from[c]);
          g_hash_table_replace (state->sources, kv_key_ref (keys[c]), GUINT_TO_POINTER (source + 1u));
        }
      else if ((known = g_hash_table_lookup (state->sources, keys[c])) != NULL)
        source = (guint8) (GPOINTER_TO_UINT (known) - 1);
      else
        {
          /* in the primary tier, or on its way in for another request */
          source = KV_CHUNK_SOURCE_PRIMARY;
          g_hash_table_insert (state->sources, kv_key_ref (keys[c]), GUINT_TO_POINTER (source + 1u));
        }
      lookup->sources[c] = source;
      lookup->n_from[source]++;
    }

  return g_steal_pointer (&lookup);
}

static guint64
add_job (KvConnector  *self,
         guint64       job_id,
         Job          *job)
{
  guint64 *key = g_new (guint64, 1);

  *key = job_id;
  job->state->n_transfers++;
  g_hash_table_insert (self->jobs, key, job);
  return job_id;
}

/**
 * kv_connector_load:
 * @self: a connector
 * @lookup: a lookup from [method@Kv.Connector.lookup] whose request is
 *   being scheduled now
 * @block_ids: (array length=n_block_ids) (nullable): the device blocks
 *   the ready hits go to, in block-table order
 * @n_block_ids: the number of blocks: blocks-per-chunk for each ready hit
 *   (the first chunk may be partial, see [method@Kv.Device.submit_load])
 * @error: return location for an error
 *
 * Schedules @lookup's request: loads its ready hits (the chunks
 * `[n_device, n_device + n_ready)`) into @block_ids. Their primary slots
 * are pinned until the device has copied them; the transfer is reported
 * by [method@Kv.Connector.take_finished]. The rest of the prompt is
 * counted as computed. Each lookup is loaded at most once.
 *
 * Returns: the device job id, 0 without @error when there was nothing to
 *   load, or 0 with @error set (nothing stays pinned)
 */
guint64
kv_connector_load (KvConnector     *self,
                   KvPrefixLookup  *lookup,
                   const guint32   *block_ids,
                   guint            n_block_ids,
                   GError         **error)
{
  g_autofree guint32 *chunk_ids = NULL;
  RequestState *state;
  KvKey **keys;
  guint n;
  guint64 job_id;
  Job *job;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), 0);
  g_return_val_if_fail (lookup != NULL, 0);
  g_return_val_if_fail (block_ids != NULL || n_block_ids == 0, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);
  g_return_val_if_fail (!self->shut_down, 0);

  state = find_request (self, lookup->request);
  if (state == NULL || state->finished || lookup->loaded)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "load of %s: %s", kv_request_get_id (lookup->request),
                   lookup->loaded ? "the lookup was loaded already" : "the request is not active");
      return 0;
    }

  n = lookup->n_ready;
  keys = lookup->keys + lookup->n_device;
  job_id = 0;
  if (n > 0)
    {
      TIMED (self, chunk_ids = kv_tiering_manager_prepare_load (self->manager, keys, n,
                                                                 lookup->request, NULL, error));
      if (chunk_ids == NULL)
        return 0;
      job_id = kv_device_submit_load (self->device, chunk_ids, n, block_ids, n_block_ids, error);
      if (job_id == 0)
        {
          TIMED (self, kv_tiering_manager_complete_load (self->manager, keys, n, lookup->request));
          return 0;
        }
    }
  else if (n_block_ids > 0)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "load of %s: %u blocks for no ready chunk",
                   kv_request_get_id (lookup->request), n_block_ids);
      return 0;
    }

  lookup->loaded = TRUE;
  self->counters.hits[KV_CHUNK_SOURCE_DEVICE] += lookup->n_device;
  for (guint c = lookup->n_device; c < lookup->n_device + n; c++)
    self->counters.hits[lookup->sources[c]]++;
  self->counters.computed += lookup->n_chunks - lookup->n_device - n;

  if (job_id == 0)
    return 0;

  job = g_new0 (Job, 1);
  job->direction = KV_DEVICE_DIRECTION_TO_DEVICE;
  job->state = state;
  job->keys = keys;
  job->n_keys = n;
  job->lookup = kv_prefix_lookup_ref (lookup);
  return add_job (self, job_id, job);
}

/**
 * kv_connector_store:
 * @self: a connector
 * @request: an active request
 * @keys: (array length=n_keys): keys of chunks the request computed
 * @n_keys: the number of chunks
 * @block_ids: (array length=n_block_ids): the device blocks holding them,
 *   blocks-per-chunk per chunk, in order
 * @n_block_ids: the number of blocks
 * @error: return location for an error
 *
 * Offloads computed chunks: the primary tier allocates slots for the ones
 * it does not hold (a key repeated in @keys is stored once), the device
 * copies them out of @block_ids, and when the copy is reported the manager
 * completes the store and cascades it to every secondary tier. The engine
 * keeps the blocks until [method@Kv.Connector.take_finished] reports the
 * transfer.
 *
 * Returns: the device job id; 0 without @error when the primary tier holds
 *   every chunk already; 0 with %KV_TIER_ERROR_NO_SPACE when the primary
 *   tier has no room (nothing changed: the chunks are simply not
 *   offloaded), or another error (no slot stays allocated)
 */
guint64
kv_connector_store (KvConnector    *self,
                    KvRequest      *request,
                    KvKey * const  *keys,
                    guint           n_keys,
                    const guint32  *block_ids,
                    guint           n_block_ids,
                    GError        **error)
{
  g_autoptr(KvPrepareStoreResult) prepared = NULL;
  g_autofree guint32 *blocks = NULL;
  g_autoptr(GError) local_error = NULL;
  KvKey * const *to_store;
  const guint32 *chunk_ids;
  RequestState *state;
  guint n_store = 0, n_ids = 0, j = 0;
  guint64 job_id;
  Job *job;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), 0);
  g_return_val_if_fail (KV_IS_REQUEST (request), 0);
  g_return_val_if_fail (keys != NULL || n_keys == 0, 0);
  g_return_val_if_fail (block_ids != NULL || n_block_ids == 0, 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);
  g_return_val_if_fail (!self->shut_down, 0);

  state = find_request (self, request);
  if (state == NULL || state->finished)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_NOT_FOUND,
                   "store: request %s is not active", kv_request_get_id (request));
      return 0;
    }
  if ((guint64) n_block_ids != (guint64) n_keys * self->bpc)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_INVALID_ARGUMENT,
                   "store of %s: %u blocks for %u chunks of %u blocks",
                   kv_request_get_id (request), n_block_ids, n_keys, self->bpc);
      return 0;
    }
  if (n_keys == 0)
    return 0;

  TIMED (self, prepared = kv_tiering_manager_prepare_store (self->manager, keys, n_keys, request,
                                                             &local_error));
  if (prepared == NULL)
    {
      if (g_error_matches (local_error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE))
        self->counters.refused += n_keys;
      g_propagate_error (error, g_steal_pointer (&local_error));
      return 0;
    }
  to_store = kv_prepare_store_result_get_keys_to_store (prepared, &n_store);
  chunk_ids = kv_prepare_store_result_get_chunk_ids (prepared, &n_ids);
  if (n_store == 0)
    return 0;

  /* The keys to store are the first occurrences of the new keys, in
   * order: walk @keys once to find their blocks. */
  blocks = g_new (guint32, (gsize) n_store * self->bpc);
  for (guint t = 0; t < n_store; t++)
    {
      while (j < n_keys && !kv_key_equal (keys[j], to_store[t]))
        j++;
      g_assert (j < n_keys);
      memcpy (blocks + (gsize) t * self->bpc, block_ids + (gsize) j * self->bpc,
              self->bpc * sizeof (guint32));
      j++;
    }

  job_id = kv_device_submit_store (self->device, blocks, n_store * self->bpc, chunk_ids, n_ids,
                                   error);
  if (job_id == 0)
    {
      /* The slots were allocated for nothing: give them back. */
      TIMED (self, kv_tiering_manager_complete_store (self->manager, to_store, n_store, request,
                                                       FALSE));
      return 0;
    }

  job = g_new0 (Job, 1);
  job->direction = KV_DEVICE_DIRECTION_TO_PRIMARY;
  job->state = state;
  job->keys = (KvKey **) to_store;
  job->n_keys = n_store;
  job->prepared = g_steal_pointer (&prepared);
  return add_job (self, job_id, job);
}

/**
 * kv_connector_touch:
 * @self: a connector
 * @request: an active request
 * @keys: (array length=n_keys): keys of chunks the request reuses
 *   (device hits included), in prompt order
 * @n_keys: the number of keys
 *
 * Marks reused chunks recently used in the primary tier and every
 * secondary tier, so chunks served from the device stay cached below it.
 */
void
kv_connector_touch (KvConnector   *self,
                    KvRequest     *request,
                    KvKey * const *keys,
                    guint          n_keys)
{
  g_return_if_fail (KV_IS_CONNECTOR (self));
  g_return_if_fail (KV_IS_REQUEST (request));
  g_return_if_fail (keys != NULL || n_keys == 0);
  g_return_if_fail (!self->shut_down);

  if (n_keys > 0)
    TIMED (self, kv_tiering_manager_touch (self->manager, keys, n_keys, request));
}

/**
 * kv_connector_end_step:
 * @self: a connector
 * @new_request_ids: (array zero-terminated=1) (nullable): ids of the
 *   requests scheduled for the first time in this step
 * @preempted_request_ids: (array zero-terminated=1) (nullable): ids of the
 *   requests preempted in this step
 *
 * Ends the scheduler step: the manager submits the promotions the step's
 * lookups started, flushes parked cascades and lets every tier end its
 * step ([method@Kv.TieringManager.on_schedule_end]).
 */
void
kv_connector_end_step (KvConnector        *self,
                       const char * const *new_request_ids,
                       const char * const *preempted_request_ids)
{
  g_autoptr(KvScheduleEnd) schedule_end = NULL;

  g_return_if_fail (KV_IS_CONNECTOR (self));
  g_return_if_fail (!self->shut_down);

  schedule_end = kv_schedule_end_new (new_request_ids, preempted_request_ids);
  TIMED (self, kv_tiering_manager_on_schedule_end (self->manager, schedule_end));
  self->counters.steps++;
}

static gint
compare_results (gconstpointer a,
                 gconstpointer b)
{
  guint64 x = kv_job_result_get_job_id (*(KvJobResult * const *) a);
  guint64 y = kv_job_result_get_job_id (*(KvJobResult * const *) b);

  return x < y ? -1 : x > y;
}

static void
apply_result (KvConnector *self,
              KvJobResult *result)
{
  guint64 id = kv_job_result_get_job_id (result);
  gboolean ok = kv_job_result_get_success (result);
  Job *job = g_hash_table_lookup (self->jobs, &id);
  RequestState *state;

  if (job == NULL)
    {
      g_critical ("KvConnector: device job %" G_GUINT64_FORMAT " was not submitted by the"
                  " connector", id);
      return;
    }

  self->counters.bytes[job->direction] += MAX (kv_job_result_get_transfer_bytes (result), 0);
  self->counters.time[job->direction] += kv_job_result_get_transfer_time (result);
  if (!ok)
    self->counters.failures[job->direction]++;

  /* A failed load still releases its slots; a failed store frees them. */
  if (job->direction == KV_DEVICE_DIRECTION_TO_DEVICE)
    TIMED (self, kv_tiering_manager_complete_load (self->manager, job->keys, job->n_keys,
                                                    job->state->request));
  else
    TIMED (self, kv_tiering_manager_complete_store (self->manager, job->keys, job->n_keys,
                                                     job->state->request, ok));

  state = job->state;
  state->n_transfers--;
  if (state->n_transfers == 0)
    {
      g_ptr_array_add (self->ready, g_object_ref (state->request));
    }
  g_hash_table_remove (self->jobs, &id);
  maybe_forget_request (self, state);
}

/**
 * kv_connector_take_finished:
 * @self: a connector
 *
 * Takes the device transfers that finished since the last call and
 * applies them: a finished load releases its primary slots, a finished
 * store completes in the manager, which cascades it to the secondary
 * tiers (a failed one frees its slots). Loads come first, then stores,
 * each in submission order. Every transfer submitted by
 * [method@Kv.Connector.load] or [method@Kv.Connector.store] is reported
 * here exactly once. Never blocks.
 *
 * Returns: (transfer full) (array zero-terminated=1): the results, by the
 *   job ids the connector returned; possibly none
 */
KvJobResult **
kv_connector_take_finished (KvConnector *self)
{
  g_autoptr(GPtrArray) loads = NULL;
  g_autoptr(GPtrArray) stores = NULL;
  KvJobResult **results;
  GPtrArray *out;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);

  results = kv_device_get_finished (self->device);
  g_ptr_array_set_size (self->ready, 0);
  loads = g_ptr_array_new ();
  stores = g_ptr_array_new ();
  for (KvJobResult **r = results; *r != NULL; r++)
    {
      guint64 id = kv_job_result_get_job_id (*r);
      Job *job = g_hash_table_lookup (self->jobs, &id);

      g_ptr_array_add (job != NULL && job->direction == KV_DEVICE_DIRECTION_TO_DEVICE
                       ? loads : stores, *r);
    }
  g_free (results);
  g_ptr_array_sort (loads, compare_results);
  g_ptr_array_sort (stores, compare_results);

  out = g_ptr_array_sized_new (loads->len + stores->len + 1);
  for (guint k = 0; k < loads->len; k++)
    {
      apply_result (self, loads->pdata[k]);
      g_ptr_array_add (out, loads->pdata[k]);
    }
  for (guint k = 0; k < stores->len; k++)
    {
      apply_result (self, stores->pdata[k]);
      g_ptr_array_add (out, stores->pdata[k]);
    }
  g_ptr_array_add (out, NULL);
  return (KvJobResult **) g_ptr_array_free (out, FALSE);
}

/**
 * kv_connector_get_ready_requests:
 * @self: a connector
 *
 * Says which requests are ready now: those whose last transfer in flight
 * was reported by the latest [method@Kv.Connector.take_finished]. Their
 * loaded chunks are in their device blocks (the request can run) and no
 * store reads their blocks any more (a finished request's blocks may be
 * freed): vLLM's "finished receiving" and "finished sending" in one answer.
 *
 * Returns: (transfer none) (array zero-terminated=1): the requests, valid
 *   until the next [method@Kv.Connector.take_finished]
 */
KvRequest **
kv_connector_get_ready_requests (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);
  return (KvRequest **) self->ready->pdata;
}

/**
 * kv_connector_has_pending_work:
 * @self: a connector
 *
 * Says whether the engine must keep stepping with no request to run:
 * device transfers are not reported yet, or the manager has tier jobs,
 * parked cascades or lookups in flight.
 *
 * Returns: %TRUE while work is pending
 */
gboolean
kv_connector_has_pending_work (KvConnector *self)
{
  gboolean pending;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), FALSE);

  if (g_hash_table_size (self->jobs) > 0)
    return TRUE;
  if (self->shut_down)
    return FALSE;
  TIMED (self, pending = kv_tiering_manager_has_pending_work (self->manager));
  return pending;
}

/**
 * kv_connector_wait:
 * @self: a connector
 * @error: return location for an error
 *
 * Blocks until every device transfer submitted so far has finished; they
 * are still reported by [method@Kv.Connector.take_finished]. For
 * synchronous runs and shutdown: an engine's steady state sleeps on
 * [method@Kv.Connector.get_wakeup_fd] instead.
 *
 * Returns: %TRUE when they finished, %FALSE with @error set otherwise
 */
gboolean
kv_connector_wait (KvConnector  *self,
                   GError      **error)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return kv_device_wait_all (self->device, error);
}

/**
 * kv_connector_get_wakeup_fd:
 * @self: a connector
 *
 * Gets a descriptor that is readable while a device transfer is waiting
 * for [method@Kv.Connector.take_finished] or a tier job is waiting for the
 * manager's next step. An idle engine sleeps in poll() on it; when it is
 * readable, take the finished transfers and end a step
 * ([method@Kv.Connector.end_step]), which consumes the tier results. The
 * descriptor belongs to @self; do not close it.
 *
 * Returns: the descriptor
 */
int
kv_connector_get_wakeup_fd (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), -1);
  return self->epoll_fd;
}

/**
 * kv_connector_create_source:
 * @self: a connector
 *
 * Creates a #GSource that dispatches while
 * [method@Kv.Connector.get_wakeup_fd] is readable, for engines that run a
 * #GMainLoop: attach it to the owner thread's context and set a callback
 * (g_source_set_callback()) that takes the finished transfers and runs a
 * step. The source stays ready until they are consumed.
 *
 * Returns: (transfer full): a new source, not attached
 */
GSource *
kv_connector_create_source (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);

  /* nothing to re-arm: the epoll fd is readable while the device's or the
   * manager's eventfd is, and those are cleared where results are taken */
  return _kv_wakeup_source_new (G_OBJECT (self), self->epoll_fd, NULL, "KvConnector wake-up");
}

/**
 * kv_connector_get_stats:
 * @self: a connector
 *
 * Returns and resets the metrics since the last call: the manager's
 * ([method@Kv.TieringManager.get_stats], vLLM's
 * `vllm:kv_offload_tiering_*` names, with the tiers' own) and the
 * connector's:
 *
 * - `vllm:kv_offload_total_bytes` and `vllm:kv_offload_total_time`
 *   (seconds the device reported), labelled by `transfer_type`:
 *   `GPU_to_CPU` (stores) and `CPU_to_GPU` (loads);
 * - `kvtier_connector_transfer_failures_total`, by `transfer_type`;
 * - `kvtier_connector_chunk_hits_total` by `source` (`device`, `0:primary`,
 *   `1:fs` …): where the chunks of scheduled requests came from;
 * - `kvtier_connector_computed_chunks_total`: the chunks they computed;
 * - `kvtier_connector_refused_store_chunks_total`: chunks the primary tier had
 *   no room for;
 * - `kvtier_connector_manager_seconds_total` (seconds inside the manager),
 *   `kvtier_connector_manager_lookups_total`, `kvtier_connector_steps_total`.
 *
 * Returns: (transfer full): the metrics
 */
KvStats *
kv_connector_get_stats (KvConnector *self)
{
  KvStats *stats;
  Counters *c;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);

  stats = kv_tiering_manager_get_stats (self->manager);
  if (stats == NULL)
    stats = kv_stats_new ();
  c = &self->counters;

  for (guint d = 0; d < 2; d++)
    {
      const char *labels[] = { transfer_types[d], NULL };

      kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_BYTES, (gdouble) c->bytes[d], labels);
      kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_TIME, c->time[d], labels);
      kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_FAILURES, (gdouble) c->failures[d], labels);
    }
  for (guint s = 0; s < self->n_sources; s++)
    {
      const char *labels[] = { self->source_labels[s], NULL };

      kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_HITS, (gdouble) c->hits[s], labels);
    }
  kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_COMPUTED, (gdouble) c->computed, NULL);
  kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_REFUSED, (gdouble) c->refused, NULL);
  kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_MANAGER_TIME, c->mgr_ns / 1e9, NULL);
  kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_MANAGER_LOOKUPS, (gdouble) c->lookups, NULL);
  kv_stats_increase_counter (stats, KV_METRIC_CONNECTOR_STEPS, (gdouble) c->steps, NULL);

  memset (c->hits, 0, sizeof (guint64) * self->n_sources);
  c->computed = c->refused = c->mgr_ns = c->lookups = c->steps = 0;
  memset (c->bytes, 0, sizeof c->bytes);
  memset (c->time, 0, sizeof c->time);
  memset (c->failures, 0, sizeof c->failures);
  return stats;
}

/**
 * kv_connector_create_metric_registry:
 * @self: a connector
 * @error: return location for an error
 *
 * Builds the definitions of every metric [method@Kv.Connector.get_stats]
 * reports: the manager's and its tiers'
 * ([method@Kv.TieringManager.create_metric_registry]) and the connector's.
 *
 * Returns: (transfer full): a new registry, or %NULL if two definitions clash
 */
KvMetricRegistry *
kv_connector_create_metric_registry (KvConnector  *self,
                                     GError      **error)
{
  g_autoptr(KvMetricRegistry) registry = NULL;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  registry = kv_tiering_manager_create_metric_registry (self->manager, error);
  if (registry == NULL || !kv_metric_registry_add_connector_metrics (registry, error))
    return NULL;
  return g_steal_pointer (&registry);
}

/**
 * kv_connector_get_manager_time:
 * @self: a connector
 *
 * Gets the seconds spent inside the manager's calls since the connector
 * was created (not reset by [method@Kv.Connector.get_stats]), for
 * per-step accounting.
 *
 * Returns: seconds
 */
gdouble
kv_connector_get_manager_time (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), 0);
  return self->total_mgr_ns / 1e9;
}

/**
 * kv_connector_get_lookup_time:
 * @self: a connector
 *
 * Gets the seconds spent inside the manager's lookups (tier lookups
 * included) since the connector was created: part of
 * [method@Kv.Connector.get_manager_time].
 *
 * Returns: seconds
 */
gdouble
kv_connector_get_lookup_time (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), 0);
  return self->total_lookup_ns / 1e9;
}

/**
 * kv_connector_get_n_manager_lookups:
 * @self: a connector
 *
 * Gets the number of chunks looked up in the manager since the connector
 * was created.
 *
 * Returns: the number of manager lookups
 */
guint64
kv_connector_get_n_manager_lookups (KvConnector *self)
{
  g_return_val_if_fail (KV_IS_CONNECTOR (self), 0);
  return self->total_lookups;
}

/**
 * kv_connector_shutdown:
 * @self: a connector
 * @error: return location for an error
 *
 * Waits for every device transfer, applies the results (releasing every
 * pin they held), shuts the device down, then the manager (which drains
 * its tiers). Calling it again does nothing. Blocks.
 *
 * Returns: %TRUE on success, %FALSE with @error set when the device or a
 *   tier failed to shut down
 */
gboolean
kv_connector_shutdown (KvConnector  *self,
                       GError      **error)
{
  KvJobResult **results;

  g_return_val_if_fail (KV_IS_CONNECTOR (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (self->shut_down)
    return TRUE;
  if (!kv_device_shutdown (self->device, error))
    return FALSE;
  results = kv_connector_take_finished (self);
  for (KvJobResult **r = results; *r != NULL; r++)
    kv_job_result_unref (*r);
  g_free (results);
  self->shut_down = TRUE;
  return kv_tiering_manager_shutdown (self->manager, error);
}
