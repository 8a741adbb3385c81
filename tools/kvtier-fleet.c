/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-tool.h"
#include "kvtier-workload.h"
#include "kvtier-fleet.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

/*
 * `kvtier bench --nodes N --router POLICY`: a fleet on one machine. N
 * nodes, each a KvConnector over its own simulated device, primary tier,
 * fs tier (a temporary directory) and peer tier (listening on 127.0.0.1,
 * its peers the other nodes), replay a trace. A KvFleetIndex follows every
 * node's event stream over loopback (KvPeerSubscriber, as `kvtier route`
 * does), and a KvFleetRouter picks the node of each request; with peers,
 * the request's `kv_peer` names the node holding a longer prefix, and the
 * chosen node's peer tier fetches from it.
 *
 * Requests run one at a time, in arrival order. Each node also has a
 * simulated clock: a request occupies its node for the tokens it computes
 * at --prefill-rate, from its arrival (the trace's timestamp) or when the
 * node is free; the router counts it in flight until then. So the load the
 * router sees depends on the trace and the routing, not on this machine.
 * With --sync every transfer, cascade and event of every node is waited
 * for before the next request is routed: hit counts are then the same on
 * every run.
 *
 * The fleet's capacities (--gpu-size, --primary-size, --tier-size) are
 * split evenly among the N nodes, so a run of N nodes has the memory of a
 * run of one; the device of a node is never smaller than the longest
 * request. Each run is a fresh fleet.
 */

#define MAX_WAIT_NS (G_GINT64_CONSTANT (60) * 1000000000)

enum {
  SOURCE_DEVICE,
  SOURCE_PRIMARY,
  SOURCE_DISK,
  SOURCE_PEER,
  N_SOURCES
};

static const char *const source_names[N_SOURCES] = { "device", "primary", "disk", "peer" };

/* One block of the trace, shared by the nodes. */
typedef struct
{
  guint64  id;
  KvKey   *key;
} Block;

/* A block on a node's device. */
typedef struct
{
  Block   *block;
  gint32   slot;
  guint32  pins;
  GList    link;
} DevChunk;

typedef struct
{
  guint              index;
  char              *address;
  char              *root;
  KvConfig          *config;
  KvTieringManager  *manager;
  KvDevice          *device;
  KvHostDevice      *host;
  KvConnector       *connector;
  KvSecondaryTier   *peer_tier;
  GObject           *subscriber;

  guint              n_dev_slots;
  guint              n_layers;
  gsize              block_bytes;
  GHashTable        *dev;          /* Block → DevChunk */
  GArray            *free_slots;
  GQueue             recency;      /* least recent first */
  GPtrArray         *dev_stored;   /* KvKey: device events to publish */
  GPtrArray         *dev_removed;

  GHashTable        *jobs;         /* job id → TRUE, transfers not reported */
  guint              n_failed_jobs;
  gdouble            busy_until_s; /* simulated */
} Node;

typedef struct
{
  guint          n_nodes;
  KvRoutePolicy  policy;
  gboolean       peers;
  char          *label;

  guint64        requests;
  guint64        skipped;
  guint64        chunks;
  guint64        hits[N_SOURCES];
  guint64        tokens_prompt;
  guint64        tokens_saved;
  guint64        cross_bytes;
  guint64        max_requests;
  guint64        min_requests;
  gdouble        imbalance;
  guint64        verified;
  guint64        mismatches;
  guint64        failed_transfers;
  gdouble        wall_s;
} Run;

typedef struct
{
  gdouble  finish_s;
  guint    node;
} InFlight;

typedef struct
{
  /* options */
  char     *trace_path;
  gint      max_requests;
  char     *nodes_text;
  char     *router_text;
  char     *chunk_size_text;
  gint      layers;
  char     *gpu_size_text;
  char     *primary_size_text;
  char     *tier_size_text;
  gdouble   prefill_rate;
  gboolean  sync;
  gboolean  no_verify;
  char     *json_path;
  char     *plot_path;
  gboolean  quiet;

  /* set-up */
  ToolWorkload   *workload;
  KvTierRegistry *registry;
  GType           subscriber_type;
  guint64         chunk_size;
  guint64         gpu_chunks;
  guint64         primary_chunks;
  guint64         tier_chunks;
  guint           longest;
  char           *dir;
  char           *secret_path;
  GHashTable     *blocks;      /* id → Block */
  GArray         *runs;        /* Run */

  /* the run in progress */
  GPtrArray      *nodes;
  KvFleetIndex   *index;
  KvFleetRouter  *router;
  GArray         *in_flight;   /* InFlight, by finish time */
  GError         *failure;
} Fleet;

/* ------------------------------------------------------------------------ */
/* Blocks and devices */

static void
block_free (Block *block)
{
  kv_key_unref (block->key);
  g_free (block);
}

static Block *
intern_block (Fleet   *f,
              guint64  id)
{
  Block *block = g_hash_table_lookup (f->blocks, &id);

  if (block == NULL)
    {
      block = g_new0 (Block, 1);
      block->id = id;
      block->key = tool_workload_chunk_key (id);
      g_hash_table_insert (f->blocks, &block->id, block);
    }
  return block;
}

static guint64
piece_word (guint64 id,
            guint   layer)
{
  guint64 z = id * G_GUINT64_CONSTANT (0x9E3779B97F4A7C15) + layer + 1;

  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static void
compute_chunk (Node     *node,
               DevChunk *chunk)
{
  for (guint layer = 0; layer < node->n_layers; layer++)
    {
      guint64 word = piece_word (chunk->block->id, layer);
      guint64 *mem = kv_host_device_peek_block (node->host, layer, chunk->slot);

      for (gsize w = 0; w < node->block_bytes / sizeof (guint64); w++)
        mem[w] = word;
    }
}

static gboolean
chunk_is_right (Node     *node,
                DevChunk *chunk)
{
  for (guint layer = 0; layer < node->n_layers; layer++)
    {
      guint64 word = piece_word (chunk->block->id, layer);
      const guint64 *mem = kv_host_device_peek_block (node->host, layer, chunk->slot);

      for (gsize w = 0; w < node->block_bytes / sizeof (guint64); w++)
        if (mem[w] != word)
          return FALSE;
    }
  return TRUE;
}

static void
dev_chunk_free (DevChunk *chunk)
{
  g_free (chunk);
}

/* Gives every block of the request a device slot (evicting the least
 * recent unpinned chunks) and pins them; FALSE (nothing changed) when the
 * device cannot hold them all. @fresh says which got a slot now. */
static gboolean
dev_claim (Node      *node,
           Block    **blocks,
           guint      n,
           DevChunk **chunks,
           gboolean  *fresh)
{
  guint missing = 0, evictable = 0;

  for (guint c = 0; c < n; c++)
    {
      chunks[c] = g_hash_table_lookup (node->dev, blocks[c]);
      fresh[c] = FALSE;
      if (chunks[c] != NULL)
        chunks[c]->pins++;
      else
        {
          gboolean seen = FALSE;

          for (guint d = 0; d < c && !seen; d++)
            seen = blocks[d] == blocks[c];
          missing += !seen;
        }
    }
  for (GList *l = node->recency.head; l != NULL; l = l->next)
    evictable += ((DevChunk *) l->data)->pins == 0;
  if (node->free_slots->len + evictable < missing)
    {
      for (guint c = 0; c < n; c++)
        if (chunks[c] != NULL)
          chunks[c]->pins--;
      return FALSE;
    }

  for (guint c = 0; c < n; c++)
    {
      DevChunk *chunk;
      gint32 slot;

      if (chunks[c] != NULL)
        continue;
      chunk = g_hash_table_lookup (node->dev, blocks[c]);
      if (chunk == NULL)
        {
          if (node->free_slots->len > 0)
            {
              slot = g_array_index (node->free_slots, gint32, node->free_slots->len - 1);
              g_array_set_size (node->free_slots, node->free_slots->len - 1);
            }
          else
            {
              GList *l = node->recency.head;
              DevChunk *victim;

              while (((DevChunk *) l->data)->pins > 0)
                l = l->next;
              victim = l->data;
              g_queue_unlink (&node->recency, &victim->link);
              slot = victim->slot;
              g_ptr_array_add (node->dev_removed, kv_key_ref (victim->block->key));
              g_hash_table_remove (node->dev, victim->block);
            }
          chunk = g_new0 (DevChunk, 1);
          chunk->block = blocks[c];
          chunk->slot = slot;
          chunk->link.data = chunk;
          g_hash_table_insert (node->dev, blocks[c], chunk);
          g_queue_push_tail_link (&node->recency, &chunk->link);
          g_ptr_array_add (node->dev_stored, kv_key_ref (blocks[c]->key));
          fresh[c] = TRUE;
        }
      chunk->pins++;
      chunks[c] = chunk;
    }
  return TRUE;
}

static void
dev_release (Node      *node,
             DevChunk **chunks,
             guint      n)
{
  for (guint c = 0; c < n; c++)
    {
      /* the whole prompt is now the most recent on the device */
      g_queue_unlink (&node->recency, &chunks[c]->link);
      g_queue_push_tail_link (&node->recency, &chunks[c]->link);
      chunks[c]->pins--;
    }
}

/* ------------------------------------------------------------------------ */
/* Stepping the fleet */

static void
publish (Node      *node,
         guint      source,
         KvEvent  **events)
{
  for (KvEvent **e = events; *e != NULL; e++)
    {
      g_signal_emit_by_name (node->peer_tier, "publish-event", source, *e);
      kv_event_unref (*e);
    }
  g_free (events);
}

static void
publish_device (Node       *node,
                GPtrArray  *keys,
                gboolean    removed)
{
  g_autoptr(KvEvent) event = NULL;

  if (keys->len == 0)
    return;
  event = kv_event_new ((KvKey * const *) keys->pdata, keys->len, KV_MEDIUM_UNSPECIFIED, removed,
                        KV_LOCALITY_LOCAL);
  g_signal_emit_by_name (node->peer_tier, "publish-event", (guint) KV_CHUNK_SOURCE_DEVICE, event);
  g_ptr_array_set_size (keys, 0);
}

/* Ends a step of @node: the manager steps (its peer tier answers the other
 * nodes), finished transfers are collected, and the events of the step go
 * to the node's stream. */
static void
step_node (Node               *node,
           const char * const *new_ids)
{
  static const char *const none[] = { NULL };
  KvJobResult **results;

  kv_connector_end_step (node->connector, new_ids != NULL ? new_ids : none, NULL);
  results = kv_connector_take_finished (node->connector);
  for (KvJobResult **r = results; *r != NULL; r++)
    {
      guint64 id = kv_job_result_get_job_id (*r);

      if (!kv_job_result_get_success (*r))
        node->n_failed_jobs++;
      g_hash_table_remove (node->jobs, &id);
      kv_job_result_unref (*r);
    }
  g_free (results);

  publish_device (node, node->dev_removed, TRUE);
  publish_device (node, node->dev_stored, FALSE);
  publish (node, KV_CHUNK_SOURCE_PRIMARY,
           kv_primary_tier_take_events (kv_tiering_manager_get_primary (node->manager)));
  for (guint t = 0; t < kv_tiering_manager_get_n_tiers (node->manager); t++)
    publish (node, KV_CHUNK_SOURCE_TIER + t,
             kv_secondary_tier_take_events (kv_tiering_manager_get_tier (node->manager, t)));
}

static void
step_all (Fleet *f)
{
  for (guint i = 0; i < f->nodes->len; i++)
    step_node (f->nodes->pdata[i], NULL);
}

/* Sleeps until a node has something to collect, at most 1 ms. */
static void
wait_any (Fleet *f)
{
  g_autofree struct pollfd *fds = g_new0 (struct pollfd, f->nodes->len);

  for (guint i = 0; i < f->nodes->len; i++)
    {
      fds[i].fd = kv_connector_get_wakeup_fd (((Node *) f->nodes->pdata[i])->connector);
      fds[i].events = POLLIN;
    }
  (void) poll (fds, f->nodes->len, 1);
}

static gboolean
fleet_busy (Fleet *f)
{
  for (guint i = 0; i < f->nodes->len; i++)
    {
      Node *node = f->nodes->pdata[i];

      if (g_hash_table_size (node->jobs) > 0 || kv_connector_has_pending_work (node->connector))
        return TRUE;
    }
  return FALSE;
}

/* --sync: every node quiet, every event applied to the index. */
static gboolean
settle (Fleet   *f,
        GError **error)
{
  gint64 until = tool_now_ns () + MAX_WAIT_NS;

  do
    {
      step_all (f);
      if (!fleet_busy (f))
        break;
      wait_any (f);
    }
  while (tool_now_ns () < until);

  for (guint i = 0; i < f->nodes->len; i++)
    {
      Node *node = f->nodes->pdata[i];
      guint pending = 1;
      guint64 seq = 0, applied = 0;

      while (tool_now_ns () < until)
        {
          g_object_get (node->peer_tier, "events-pending", &pending, NULL);
          if (pending == 0)
            break;
          g_usleep (100);
        }
      g_object_get (node->peer_tier, "event-seq", &seq, NULL);
      while (tool_now_ns () < until)
        {
          g_object_get (node->subscriber, "applied-seq", &applied, NULL);
          if (applied >= seq)
            break;
          g_usleep (100);
        }
      if (pending != 0 || applied < seq)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                       "node %s: its event stream did not reach the index in time", node->address);
          return FALSE;
        }
    }
  if (fleet_busy (f))
    {
      g_autoptr(GString) busy = g_string_new ("");

      for (guint i = 0; i < f->nodes->len; i++)
        {
          Node *node = f->nodes->pdata[i];

          if (g_hash_table_size (node->jobs) == 0 && !kv_connector_has_pending_work (node->connector))
            continue;
          g_string_append_printf (busy, " %s (%u device transfers, %u tier jobs", node->address,
                                  g_hash_table_size (node->jobs),
                                  kv_tiering_manager_get_n_active_jobs (node->manager));
          for (guint t = 0; t < kv_tiering_manager_get_n_tiers (node->manager); t++)
            if (kv_secondary_tier_has_pending_work (kv_tiering_manager_get_tier (node->manager, t)))
              g_string_append_printf (busy, ", the %s tier has work",
                                      kv_secondary_tier_get_tier_type (kv_tiering_manager_get_tier (node->manager, t)));
          g_string_append (busy, ")");
        }
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                   "the fleet's transfers did not finish in time:%s", busy->str);
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* One request on one node */

static gboolean
serve_request (Fleet             *f,
               Run               *run,
               Node              *node,
               guint              index,
               const ToolRequest *spec,
               GVariant          *params,
               GError           **error)
{
  guint n = spec->n_chunks;
  g_autofree Block **blocks = g_new (Block *, MAX (n, 1));
  g_autofree KvKey **keys = g_new (KvKey *, n + 1);
  g_autofree DevChunk **chunks = g_new0 (DevChunk *, MAX (n, 1));
  g_autofree gboolean *fresh = g_new0 (gboolean, MAX (n, 1));
  g_autofree char *id = g_strdup_printf ("req-%u", index);
  g_autoptr(KvRequest) request = kv_request_new (id, params);
  g_autoptr(KvPrefixLookup) lookup = NULL;
  const char *new_ids[] = { id, NULL };
  gint64 until = tool_now_ns () + MAX_WAIT_NS;
  guint i = 0, j;
  guint64 load_job = 0, store_job = 0;

  for (guint c = 0; c < n; c++)
    {
      blocks[c] = intern_block (f, spec->ids[c]);
      keys[c] = blocks[c]->key;
    }
  keys[n] = NULL;
  kv_connector_add_request (node->connector, request);

  /* the device prefix cache, then the tiers (the peer's answers come
   * back over the network: the fleet steps meanwhile) */
  while (i < n && g_hash_table_contains (node->dev, blocks[i]))
    i++;
  for (;;)
    {
      g_clear_pointer (&lookup, kv_prefix_lookup_unref);
      lookup = kv_connector_lookup (node->connector, request, keys, n, i, error);
      if (lookup == NULL)
        return FALSE;
      if (kv_prefix_lookup_is_complete (lookup) || tool_now_ns () > until)
        break;
      step_all (f);
      wait_any (f);
    }
  j = i + kv_prefix_lookup_get_n_ready (lookup);

  if (!dev_claim (node, blocks, n, chunks, fresh))
    {
      run->skipped++;
      kv_connector_finish_request (node->connector, request);
      return TRUE;
    }

  if (j > i)
    {
      g_autofree guint32 *slots = g_new (guint32, j - i);

      for (guint c = i; c < j; c++)
        slots[c - i] = (guint32) chunks[c]->slot;
      load_job = kv_connector_load (node->connector, lookup, slots, j - i, error);
      if (load_job == 0 && error != NULL && *error != NULL)
        return FALSE;
      if (load_job != 0)
        g_hash_table_add (node->jobs, g_memdup2 (&load_job, sizeof load_job));
      kv_connector_touch (node->connector, request, keys, j);
    }
  else if (i > 0)
    kv_connector_touch (node->connector, request, keys, i);

  for (guint c = j; c < n; c++)
    compute_chunk (node, chunks[c]);
  if (j < n)
    {
      g_autofree guint32 *slots = g_new (guint32, n - j);
      g_autoptr(GError) store_error = NULL;

      for (guint c = j; c < n; c++)
        slots[c - j] = (guint32) chunks[c]->slot;
      store_job = kv_connector_store (node->connector, request, keys + j, n - j, slots, n - j,
                                      &store_error);
      if (store_job == 0 && store_error != NULL &&
          !g_error_matches (store_error, KV_TIER_ERROR, KV_TIER_ERROR_NO_SPACE))
        {
          g_propagate_error (error, g_steal_pointer (&store_error));
          return FALSE;
        }
      if (store_job != 0)
        g_hash_table_add (node->jobs, g_memdup2 (&store_job, sizeof store_job));
    }

  /* the step that runs the request; then its transfers */
  step_node (node, new_ids);
  while ((load_job != 0 && g_hash_table_contains (node->jobs, &load_job)) ||
         (store_job != 0 && g_hash_table_contains (node->jobs, &store_job)))
    {
      if (tool_now_ns () > until)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                       "request %s on node %s: its transfers did not finish in time", id,
                       node->address);
          return FALSE;
        }
      wait_any (f);
      step_all (f);
    }

  if (!f->no_verify && node->n_failed_jobs == 0)
    for (guint c = i; c < j; c++)
      {
        run->verified++;
        if (!chunk_is_right (node, chunks[c]))
          run->mismatches++;
      }
  run->failed_transfers += node->n_failed_jobs;
  node->n_failed_jobs = 0;
  kv_connector_finish_request (node->connector, request);
  dev_release (node, chunks, n);

  run->requests++;
  run->chunks += n;
  for (guint c = 0; c < n; c++)
    {
      guint64 tokens = tool_request_chunk_tokens (spec, c);
      gint source = c < i ? KV_CHUNK_SOURCE_DEVICE : c < j ? kv_prefix_lookup_get_source (lookup, c) : -1;

      run->tokens_prompt += tokens;
      if (source < 0)
        continue;
      run->tokens_saved += tokens;
      /* the tiers: the fs tier first, then the peer tier */
      run->hits[MIN ((guint) source, SOURCE_PEER)]++;
    }
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* A fleet */

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
set_u64 (KvConfig    *config,
         const char  *section,
         const char  *key,
         guint64      value,
         GError     **error)
{
  char text[32];

  g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, value);
  return kv_config_set_value (config, section, key, text, error);
}

/* Free ports on 127.0.0.1 for the nodes: bound and closed again, so the
 * configurations can name every node before any listens. */
static gboolean
pick_ports (guint     n,
            guint16  *ports,
            GError  **error)
{
  g_autoptr(GPtrArray) sockets = g_ptr_array_new_with_free_func (g_object_unref);

  for (guint i = 0; i < n; i++)
    {
      g_autoptr(GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
      g_autoptr(GSocketAddress) any = g_inet_socket_address_new (loopback, 0);
      g_autoptr(GSocketAddress) bound = NULL;
      GSocket *socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                      G_SOCKET_PROTOCOL_TCP, error);

      if (socket == NULL)
        return FALSE;
      g_ptr_array_add (sockets, socket);
      if (!g_socket_bind (socket, any, FALSE, error))
        return FALSE;
      bound = g_socket_get_local_address (socket, error);
      if (bound == NULL)
        return FALSE;
      ports[i] = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
    }
  return TRUE;
}

static void
node_free (Node *node)
{
  g_autoptr(GError) error = NULL;

  if (node->subscriber != NULL)
    g_object_run_dispose (node->subscriber);
  g_clear_object (&node->subscriber);
  if (node->connector != NULL && !kv_connector_shutdown (node->connector, &error))
    g_printerr ("kvtier: node %s: shutdown: %s\n", node->address, error->message);
  else if (node->connector == NULL && node->manager != NULL)
    kv_tiering_manager_shutdown (node->manager, NULL);
  g_clear_object (&node->connector);
  g_clear_object (&node->device);
  g_clear_object (&node->manager);
  g_clear_object (&node->config);
  if (node->dev != NULL)
    g_hash_table_unref (node->dev);
  g_clear_pointer (&node->free_slots, g_array_unref);
  g_clear_pointer (&node->dev_stored, g_ptr_array_unref);
  g_clear_pointer (&node->dev_removed, g_ptr_array_unref);
  g_clear_pointer (&node->jobs, g_hash_table_unref);
  if (node->root != NULL)
    tool_remove_tree (node->root);
  g_free (node->root);
  g_free (node->address);
  g_free (node);
}

static Node *
node_new (Fleet        *f,
          guint         index,
          guint         n_nodes,
          gboolean      peers,
          const guint16 *ports,
          GError      **error)
{
  Node *node = g_new0 (Node, 1);
  g_autoptr(GString) peer_list = g_string_new ("");
  guint64 dev_chunks = MAX (f->gpu_chunks / n_nodes, f->longest);
  guint64 primary_chunks = MAX (f->primary_chunks / n_nodes, 1);
  guint64 tier_chunks = MAX (f->tier_chunks / n_nodes, 1);
  KvConfig *c;

  node->index = index;
  node->address = g_strdup_printf ("127.0.0.1:%u", ports[index]);
  node->root = g_strdup_printf ("%s/node-%u", f->dir, index);
  node->dev = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL, (GDestroyNotify) dev_chunk_free);
  node->dev_stored = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  node->dev_removed = g_ptr_array_new_with_free_func ((GDestroyNotify) kv_key_unref);
  node->jobs = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  if (g_mkdir (node->root, 0700) != 0)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "cannot make %s: %s",
                   node->root, g_strerror (errno));
      goto failed;
    }
  /* the other nodes, starting after this one, so they are asked in turns */
  for (guint k = 1; k < n_nodes && peers; k++)
    g_string_append_printf (peer_list, "%s127.0.0.1:%u", peer_list->len > 0 ? "," : "",
                            ports[(index + k) % n_nodes]);

  c = node->config = kv_config_new (f->registry);
  if (!set_u64 (c, "primary", "size", primary_chunks * f->chunk_size, error) ||
      !set_u64 (c, "primary", "slot-size", f->chunk_size, error) ||
      !set (c, "primary", "events", "true", error) ||
      !set (c, "device", "type", "host", error) ||
      !set_u64 (c, "device", "n-blocks", dev_chunks, error) ||
      !set_u64 (c, "device", "block-bytes", f->chunk_size / f->layers, error) ||
      !set_u64 (c, "device", "n-layers", f->layers, error) ||
      !set (c, "device", "blocks-per-chunk", "1", error) ||
      !set (c, "tier disk", "type", "fs", error) ||
      !set (c, "tier disk", "root", node->root, error) ||
      /* the tier counts whole files: a 4 KiB header per chunk */
      !set_u64 (c, "tier disk", "max-size", tier_chunks * (f->chunk_size + 4096), error) ||
      !set (c, "tier disk", "enable-events", "true", error) ||
      /* fixed slots in preallocated files: no file made per chunk */
      !set (c, "tier disk", "layout", "slab", error) ||
      !set (c, "tier peer", "type", "peer", error) ||
      !set (c, "tier peer", "namespace", "kvtier-bench-fleet", error) ||
      !set (c, "tier peer", "secret-file", f->secret_path, error) ||
      !set (c, "tier peer", "listen", node->address, error) ||
      (peer_list->len > 0 && !set (c, "tier peer", "peers", peer_list->str, error)) ||
      !set (c, "tier peer", "max-subscribers", "2", error) ||
      !set (c, "tier peer", "heartbeat-ms", "200", error))
    goto failed;

  node->manager = kv_config_create_manager (c, error);
  if (node->manager == NULL)
    goto failed;
  node->device = kv_config_create_device (c, kv_primary_tier_get_buffer (kv_tiering_manager_get_primary (node->manager)),
                                          error);
  if (node->device == NULL)
    goto failed;
  node->host = KV_HOST_DEVICE (node->device);
  node->connector = kv_connector_new (node->manager, node->device, error);
  if (node->connector == NULL)
    goto failed;
  for (guint t = 0; t < kv_tiering_manager_get_n_tiers (node->manager); t++)
    if (g_str_equal (kv_secondary_tier_get_tier_type (kv_tiering_manager_get_tier (node->manager, t)),
                     "peer"))
      node->peer_tier = kv_tiering_manager_get_tier (node->manager, t);
  /* the report counts the fs tier's hits (source 2) apart from the peer's (3) */
  g_assert (node->peer_tier == kv_tiering_manager_get_tier (node->manager, 1));
  node->n_layers = kv_device_get_n_layers (node->device);
  node->block_bytes = kv_device_get_block_bytes (node->device);
  node->n_dev_slots = kv_device_get_n_blocks (node->device);
  node->free_slots = g_array_sized_new (FALSE, FALSE, sizeof (gint32), node->n_dev_slots);
  for (guint s = node->n_dev_slots; s > 0; s--)
    {
      gint32 slot = (gint32) s - 1;

      g_array_append_val (node->free_slots, slot);
    }
  g_queue_init (&node->recency);
  return node;

failed:
  g_prefix_error (error, "node %u: ", index);
  node_free (node);
  return NULL;
}

static gboolean
fleet_start (Fleet    *f,
             Run      *run,
             GError  **error)
{
  g_autofree guint16 *ports = g_new0 (guint16, run->n_nodes);

  if (!pick_ports (run->n_nodes, ports, error))
    return FALSE;
  f->nodes = g_ptr_array_new_with_free_func ((GDestroyNotify) node_free);
  f->index = g_object_new (KV_TYPE_FLEET_INDEX, "node-timeout-ms", 0, NULL);
  for (guint i = 0; i < run->n_nodes; i++)
    {
      Node *node = node_new (f, i, run->n_nodes, run->peers, ports, error);

      if (node == NULL)
        return FALSE;
      g_ptr_array_add (f->nodes, node);
      /* index ids follow the nodes' order */
      g_assert (kv_fleet_index_add_node (f->index, node->address) == i);
    }
  for (guint i = 0; i < run->n_nodes; i++)
    {
      Node *node = f->nodes->pdata[i];

      node->subscriber = g_initable_new (f->subscriber_type, NULL, error,
                                         "address", node->address,
                                         "index", f->index,
                                         "secret-file", f->secret_path,
                                         "namespace", "kvtier-bench-fleet",
                                         "slot-size", f->chunk_size,
                                         "silence-timeout-ms", 120000,
                                         "reconnect-ms", 20,
                                         NULL);
      if (node->subscriber == NULL)
        return FALSE;
    }
  /* every node is followed before the first request */
  for (guint i = 0; i < run->n_nodes; i++)
    {
      Node *node = f->nodes->pdata[i];
      gint64 until = tool_now_ns () + MAX_WAIT_NS;
      guint64 snapshots = 0;

      while (snapshots == 0 && tool_now_ns () < until)
        {
          step_all (f);
          g_usleep (1000);
          g_object_get (node->subscriber, "n-snapshots", &snapshots, NULL);
        }
      if (snapshots == 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                       "node %s: its event stream could not be followed", node->address);
          return FALSE;
        }
    }
  f->router = kv_fleet_router_new (f->index, run->policy);
  g_object_set (f->router, "use-peers", run->peers, NULL);
  f->in_flight = g_array_new (FALSE, FALSE, sizeof (InFlight));
  /* every subscriber has its first snapshot before the first request */
  return settle (f, error);
}

static void
fleet_stop (Fleet *f)
{
  g_clear_object (&f->router);
  g_clear_pointer (&f->nodes, g_ptr_array_unref);
  g_clear_object (&f->index);
  g_clear_pointer (&f->in_flight, g_array_unref);
}

/* Requests whose simulated prefill ended by @t_s leave the router's load. */
static void
finish_until (Fleet   *f,
              gdouble  t_s)
{
  guint k = 0;

  while (k < f->in_flight->len && g_array_index (f->in_flight, InFlight, k).finish_s <= t_s)
    kv_fleet_router_finish (f->router, g_array_index (f->in_flight, InFlight, k++).node);
  g_array_remove_range (f->in_flight, 0, k);
}

static void
add_in_flight (Fleet   *f,
               gdouble  finish_s,
               guint    node)
{
  InFlight item = { finish_s, node };
  guint k = f->in_flight->len;

  while (k > 0 && g_array_index (f->in_flight, InFlight, k - 1).finish_s > finish_s)
    k--;
  g_array_insert_val (f->in_flight, k, item);
}

static gdouble
stat_sum (KvStats    *stats,
          const char *name)
{
  g_autoptr(GVariant) flat = NULL;
  GVariantIter iter;
  const char *key;
  gdouble value, sum = 0;

  if (stats == NULL)
    return 0;
  flat = kv_stats_reduce (stats);
  g_variant_iter_init (&iter, flat);
  while (g_variant_iter_next (&iter, "{&sd}", &key, &value))
    if (g_str_has_prefix (key, name) && key[strlen (name)] == ':')
      sum += value;
  return sum;
}

static void
show_progress (Fleet *f,
               Run   *run,
               guint  done,
               guint  total)
{
  if (f->quiet || !isatty (STDERR_FILENO))
    return;
  fprintf (stderr, "\r  %s, %u node%s: %u/%u requests  ", run->label, run->n_nodes,
           run->n_nodes == 1 ? "" : "s", done, total);
  fflush (stderr);
}

static gboolean
fleet_run (Fleet   *f,
           Run     *run,
           GError **error)
{
  GArray *requests = f->workload->requests;
  gint64 start = tool_now_ns ();
  gboolean ok = TRUE;

  if (!fleet_start (f, run, error))
    {
      fleet_stop (f);
      return FALSE;
    }

  for (guint r = 0; r < requests->len && ok; r++)
    {
      const ToolRequest *spec = &g_array_index (requests, ToolRequest, r);
      g_autofree KvKey **keys = g_new (KvKey *, MAX (spec->n_chunks, 1));
      g_autoptr(KvRouteDecision) decision = NULL;
      g_autoptr(GVariant) params = NULL;
      gdouble arrival_s = spec->arrival_ms / 1000.0;
      guint64 computed_tokens = run->tokens_prompt - run->tokens_saved;
      Node *node;

      for (guint c = 0; c < spec->n_chunks; c++)
        keys[c] = intern_block (f, spec->ids[c])->key;
      finish_until (f, arrival_s);
      decision = kv_fleet_router_route (f->router, keys, spec->n_chunks, error);
      if (decision == NULL)
        {
          ok = FALSE;
          break;
        }
      node = f->nodes->pdata[kv_route_decision_get_node (decision)];
      params = run->peers ? kv_route_decision_dup_transfer_params (decision) : NULL;
      ok = serve_request (f, run, node, r, spec, params, error);
      if (!ok)
        break;

      /* the node computes what it did not find, after what it had queued */
      computed_tokens = (run->tokens_prompt - run->tokens_saved) - computed_tokens;
      node->busy_until_s = MAX (node->busy_until_s, arrival_s) +
                           (f->prefill_rate > 0 ? computed_tokens / f->prefill_rate : 0);
      add_in_flight (f, node->busy_until_s, node->index);

      if (f->sync)
        ok = settle (f, error);
      if (r % 50 == 0)
        show_progress (f, run, r, requests->len);
    }
  if (ok)
    ok = settle (f, error);
  if (!f->quiet && isatty (STDERR_FILENO))
    fprintf (stderr, "\r\033[K");

  if (ok)
    {
      guint64 total = 0;

      run->min_requests = G_MAXUINT64;
      for (guint i = 0; i < f->nodes->len; i++)
        {
          Node *node = f->nodes->pdata[i];
          g_autoptr(KvStats) stats = kv_connector_get_stats (node->connector);
          guint64 n = kv_fleet_router_get_n_routed (f->router, i);

          run->cross_bytes += (guint64) stat_sum (stats, "kvtier_peer_fetched_bytes");
          run->max_requests = MAX (run->max_requests, n);
          run->min_requests = MIN (run->min_requests, n);
          total += n;
        }
      run->imbalance = total > 0 ? run->max_requests / ((gdouble) total / f->nodes->len) : 0;
    }
  run->wall_s = (tool_now_ns () - start) / 1e9;
  fleet_stop (f);
  return ok;
}

/* ------------------------------------------------------------------------ */
/* Report */

static gdouble
hit_share (const Run *run)
{
  guint64 hits = 0;

  for (guint s = 0; s < N_SOURCES; s++)
    hits += run->hits[s];
  return run->chunks > 0 ? (gdouble) hits / run->chunks : 0;
}

static guint64
total_hits (const Run *run)
{
  guint64 hits = 0;

  for (guint s = 0; s < N_SOURCES; s++)
    hits += run->hits[s];
  return hits;
}

static const Run *
baseline (Fleet *f)
{
  for (guint k = 0; k < f->runs->len; k++)
    if (g_array_index (f->runs, Run, k).n_nodes == 1)
      return &g_array_index (f->runs, Run, k);
  return NULL;
}

static void
print_report (Fleet *f)
{
  const Run *base = baseline (f);
  g_autofree char *chunk = tool_format_size (f->chunk_size);

  printf ("kvtier bench --nodes: %s, %u requests\n", f->workload->description,
          f->workload->requests->len);
  printf ("fleet capacity (split among the nodes): device %" G_GUINT64_FORMAT ", primary %"
          G_GUINT64_FORMAT ", disk %" G_GUINT64_FORMAT " chunks of %s; prefill %.0f tokens/s"
          " per node%s\n\n", f->gpu_chunks, f->primary_chunks, f->tier_chunks, chunk,
          f->prefill_rate, f->sync ? "; --sync" : "");
  printf ("%-6s %-26s %8s %8s %8s %8s %8s %8s %9s %11s %10s %9s\n", "nodes", "router", "hit rate",
          "vs 1", "device", "primary", "disk", "peer", "imbalance", "tokens saved", "cross MiB",
          "wall s");
  for (guint k = 0; k < f->runs->len; k++)
    {
      const Run *run = &g_array_index (f->runs, Run, k);
      g_autofree char *saved = tool_format_count (run->tokens_saved);
      g_autofree char *ratio = base != NULL && total_hits (base) > 0
        ? g_strdup_printf ("%.1f %%", 100.0 * total_hits (run) / total_hits (base))
        : g_strdup ("-");

      printf ("%-6u %-26s %7.1f%% %8s %8" G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %8"
              G_GUINT64_FORMAT " %8" G_GUINT64_FORMAT " %9.3f %11s %10.1f %9.1f\n",
              run->n_nodes, run->label, 100.0 * hit_share (run), ratio, run->hits[SOURCE_DEVICE],
              run->hits[SOURCE_PRIMARY], run->hits[SOURCE_DISK], run->hits[SOURCE_PEER],
              run->imbalance, saved, run->cross_bytes / (1024.0 * 1024.0), run->wall_s);
    }
  printf ("\nhit rate: prompt chunks found (any source) / chunks looked up; vs 1: hits against"
          " one node with the whole capacity;\nimbalance: most requests on a node / the mean;"
          " cross MiB: chunk bytes fetched between nodes\n");
}

static gboolean
write_json (Fleet       *f,
            const char  *path,
            GError     **error)
{
  g_autoptr(JsonBuilder) builder = json_builder_new ();
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  const Run *base = baseline (f);

  json_builder_begin_object (builder);
  tool_json_add_string (builder, "workload", f->workload->description);
  tool_json_add_int (builder, "requests", f->workload->requests->len);
  tool_json_add_int (builder, "chunk_size", (gint64) f->chunk_size);
  tool_json_add_int (builder, "gpu_chunks", (gint64) f->gpu_chunks);
  tool_json_add_int (builder, "primary_chunks", (gint64) f->primary_chunks);
  tool_json_add_int (builder, "disk_chunks", (gint64) f->tier_chunks);
  tool_json_add_double (builder, "prefill_rate", f->prefill_rate);
  json_builder_set_member_name (builder, "sync");
  json_builder_add_boolean_value (builder, f->sync);
  json_builder_set_member_name (builder, "runs");
  json_builder_begin_array (builder);
  for (guint k = 0; k < f->runs->len; k++)
    {
      const Run *run = &g_array_index (f->runs, Run, k);

      json_builder_begin_object (builder);
      tool_json_add_int (builder, "nodes", run->n_nodes);
      tool_json_add_string (builder, "router", kv_route_policy_to_string (run->policy));
      json_builder_set_member_name (builder, "peers");
      json_builder_add_boolean_value (builder, run->peers);
      tool_json_add_int (builder, "requests", (gint64) run->requests);
      tool_json_add_int (builder, "skipped", (gint64) run->skipped);
      tool_json_add_int (builder, "chunks", (gint64) run->chunks);
      json_builder_set_member_name (builder, "hits");
      json_builder_begin_object (builder);
      for (guint s = 0; s < N_SOURCES; s++)
        tool_json_add_int (builder, source_names[s], (gint64) run->hits[s]);
      json_builder_end_object (builder);
      tool_json_add_double (builder, "hit_rate", hit_share (run));
      tool_json_add_double (builder, "hits_vs_one_node",
                            base != NULL && total_hits (base) > 0
                              ? (gdouble) total_hits (run) / total_hits (base) : 0.0);
      tool_json_add_int (builder, "prompt_tokens", (gint64) run->tokens_prompt);
      tool_json_add_int (builder, "prefill_tokens_saved", (gint64) run->tokens_saved);
      tool_json_add_int (builder, "cross_node_bytes", (gint64) run->cross_bytes);
      tool_json_add_int (builder, "max_requests_per_node", (gint64) run->max_requests);
      tool_json_add_int (builder, "min_requests_per_node", (gint64) run->min_requests);
      tool_json_add_double (builder, "imbalance", run->imbalance);
      tool_json_add_int (builder, "verified_chunks", (gint64) run->verified);
      tool_json_add_int (builder, "verify_mismatches", (gint64) run->mismatches);
      tool_json_add_double (builder, "wall_s", run->wall_s);
      json_builder_end_object (builder);
    }
  json_builder_end_array (builder);
  json_builder_end_object (builder);
  root = json_builder_get_root (builder);
  json_generator_set_root (generator, root);
  json_generator_set_pretty (generator, TRUE);
  return json_generator_to_file (generator, path, error);
}

static gboolean
write_plot (Fleet       *f,
            const char  *path,
            GError     **error)
{
  g_autoptr(GPtrArray) series = g_ptr_array_new_with_free_func ((GDestroyNotify) tool_fleet_series_free);
  g_autofree char *title = g_strdup_printf ("kvtier bench --nodes: %s", f->workload->description);

  for (guint k = 0; k < f->runs->len; k++)
    {
      const Run *run = &g_array_index (f->runs, Run, k);
      ToolFleetSeries *s = NULL;

      /* one node is not a policy: it starts every policy's line below */
      if (run->n_nodes == 1 && f->runs->len > 1)
        continue;
      for (guint i = 0; i < series->len; i++)
        if (g_str_equal (((ToolFleetSeries *) series->pdata[i])->label, run->label))
          s = series->pdata[i];
      if (s == NULL)
        {
          s = tool_fleet_series_new (run->label);
          g_ptr_array_add (series, s);
        }
      tool_fleet_series_add (s, run->n_nodes, 100.0 * hit_share (run), run->imbalance);
    }
  /* one node is every policy's first point */
  for (guint k = 0; k < f->runs->len; k++)
    {
      const Run *run = &g_array_index (f->runs, Run, k);

      if (run->n_nodes != 1)
        continue;
      for (guint i = 0; i < series->len; i++)
        {
          ToolFleetSeries *s = series->pdata[i];

          if (!g_str_equal (s->label, run->label))
            tool_fleet_series_add (s, 1, 100.0 * hit_share (run), run->imbalance);
        }
    }
  return tool_plot_fleet_write (path, title, series, error);
}

/* ------------------------------------------------------------------------ */

static gboolean
parse_nodes (const char  *text,
             GArray      *out,
             GError     **error)
{
  g_auto(GStrv) parts = g_strsplit (text, ",", -1);

  for (guint i = 0; parts[i] != NULL; i++)
    {
      guint64 n;

      if (!g_ascii_string_to_unsigned (g_strstrip (parts[i]), 10, 1, 64, &n, error))
        {
          g_prefix_error (error, "--nodes: ");
          return FALSE;
        }
      g_array_append_val (out, n);
    }
  return TRUE;
}

static gboolean
parse_router (const char  *text,
              GArray      *specs,
              GError     **error)
{
  g_auto(GStrv) parts = g_strsplit (text, ",", -1);

  for (guint i = 0; parts[i] != NULL; i++)
    {
      char *name = g_strstrip (parts[i]);
      char *slash = strchr (name, '/');
      Run spec = { 0 };

      spec.peers = TRUE;
      if (slash != NULL)
        {
          if (!g_str_equal (slash + 1, "no-peers"))
            {
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                           "--router: ‘%s’: the only variant is POLICY/no-peers", name);
              return FALSE;
            }
          spec.peers = FALSE;
          *slash = '\0';
        }
      if (!kv_route_policy_from_string (name, &spec.policy, error))
        {
          g_prefix_error (error, "--router: ");
          return FALSE;
        }
      spec.label = g_strdup_printf ("%s%s", name, spec.peers ? " + peers" : ", no peers");
      g_array_append_val (specs, spec);
    }
  return TRUE;
}

static void
run_clear (Run *run)
{
  g_free (run->label);
}

#define USAGE_ERROR(context, ...)                             \
  G_STMT_START {                                              \
    status = tool_usage_error (context, __VA_ARGS__);         \
    goto out;                                                 \
  } G_STMT_END

int
tool_bench_fleet (int    argc,
                  char **argv)
{
  Fleet fleet = {
    .router_text = NULL,
    .layers = 2,
    .prefill_rate = 10000,
  };
  Fleet *f = &fleet;
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) node_counts = g_array_new (FALSE, FALSE, sizeof (guint64));
  g_autoptr(GArray) specs = g_array_new (FALSE, TRUE, sizeof (Run));
  gboolean plugin_errors = FALSE;
  gboolean synthetic = FALSE;
  int status = TOOL_EXIT_OK;
  GOptionEntry entries[] = {
    { "nodes", 0, 0, G_OPTION_ARG_STRING, &f->nodes_text,
      "Fleet sizes to simulate, e.g. 1,4,8 (each a separate run)", "N[,N…]" },
    { "router", 0, 0, G_OPTION_ARG_STRING, &f->router_text,
      "Routing policies: round-robin, least-loaded, cache-aware, each optionally /no-peers"
      " (default round-robin/no-peers,cache-aware)", "POLICY[,…]" },
    { "trace", 't', 0, G_OPTION_ARG_FILENAME, &f->trace_path,
      "Replay a Mooncake trace (JSON lines with hash_ids)", "FILE" },
    { "synthetic", 's', 0, G_OPTION_ARG_NONE, &synthetic,
      "Replay built-in synthetic chats (the default)", NULL },
    { "requests", 'n', 0, G_OPTION_ARG_INT, &f->max_requests,
      "Replay only the first N requests", "N" },
    { "chunk-size", 0, 0, G_OPTION_ARG_STRING, &f->chunk_size_text,
      "Bytes of one chunk, a multiple of 4096 (default 8KiB)", "SIZE" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &f->layers, "Model layers (default 2)", "N" },
    { "gpu-size", 0, 0, G_OPTION_ARG_STRING, &f->gpu_size_text,
      "The fleet's device capacity (default 4096 chunks)", "SIZE" },
    { "primary-size", 0, 0, G_OPTION_ARG_STRING, &f->primary_size_text,
      "The fleet's primary-tier capacity (default 8192 chunks)", "SIZE" },
    { "tier-size", 0, 0, G_OPTION_ARG_STRING, &f->tier_size_text,
      "The fleet's disk-tier capacity (default 16384 chunks)", "SIZE" },
    { "prefill-rate", 0, 0, G_OPTION_ARG_DOUBLE, &f->prefill_rate,
      "Simulated prefill speed of each node in tokens/s, which sets the load the router"
      " sees (default 10000)", "RATE" },
    { "sync", 0, 0, G_OPTION_ARG_NONE, &f->sync,
      "Wait for every transfer and event of the fleet before routing the next request"
      " (hit counts are the same on every run)", NULL },
    { "no-verify", 0, 0, G_OPTION_ARG_NONE, &f->no_verify,
      "Do not check loaded chunks byte for byte", NULL },
    { "json", 'j', 0, G_OPTION_ARG_FILENAME, &f->json_path, "Write the results as JSON", "FILE" },
    { "plot", 'p', 0, G_OPTION_ARG_FILENAME, &f->plot_path,
      "Draw hit rate and load imbalance against the number of nodes (.svg or .png)", "FILE" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &f->quiet, "Print no table", NULL },
    { NULL }
  };

  context = g_option_context_new ("--nodes N[,N…] - simulate a fleet of nodes");
  g_option_context_set_summary (context,
    "Replays a workload across N kvtier nodes in this process (each with its own simulated\n"
    "device, primary tier, fs tier and peer tier on 127.0.0.1), routed by a KvFleetRouter\n"
    "over a KvFleetIndex that follows the nodes' event streams. The fleet's capacities are\n"
    "split among the nodes. Prints hits by source, prefill tokens saved, load imbalance and\n"
    "cross-node bytes per fleet size and policy.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    USAGE_ERROR (context, "%s", error->message);
  if (argc > 1)
    USAGE_ERROR (context, "unexpected argument '%s'", argv[1]);
  if (f->nodes_text == NULL)
    USAGE_ERROR (context, "--nodes is required");
  if (f->trace_path != NULL && synthetic)
    USAGE_ERROR (context, "--trace and --synthetic exclude each other");
  if (f->layers < 1 || f->max_requests < 0 || f->prefill_rate < 0)
    USAGE_ERROR (context, "--layers must be at least 1, --requests and --prefill-rate not negative");
  if (!parse_nodes (f->nodes_text, node_counts, &error) ||
      !parse_router (f->router_text != NULL ? f->router_text : "round-robin/no-peers,cache-aware",
                     specs, &error))
    USAGE_ERROR (context, "%s", error->message);
  if (f->plot_path != NULL && !g_str_has_suffix (f->plot_path, ".svg") &&
      !g_str_has_suffix (f->plot_path, ".png"))
    USAGE_ERROR (context, "--plot FILE must end in .svg or .png");
  f->chunk_size = 8192;
  if (f->chunk_size_text != NULL &&
      (!tool_parse_size (f->chunk_size_text, &f->chunk_size, &error) ||
       f->chunk_size == 0 || f->chunk_size % 4096 != 0))
    USAGE_ERROR (context, "--chunk-size %s is not a multiple of 4096", f->chunk_size_text);
  if (f->chunk_size % ((guint64) f->layers * 8) != 0)
    USAGE_ERROR (context, "a chunk of %" G_GUINT64_FORMAT " bytes does not split into %d layers"
                 " of whole 8-byte words", f->chunk_size, f->layers);
  {
    const char *texts[] = { f->gpu_size_text, f->primary_size_text, f->tier_size_text };
    guint64 *chunks[] = { &f->gpu_chunks, &f->primary_chunks, &f->tier_chunks };
    const guint64 defaults[] = { 4096, 8192, 16384 };

    for (guint k = 0; k < G_N_ELEMENTS (texts); k++)
      {
        guint64 bytes = defaults[k] * f->chunk_size;

        if (texts[k] != NULL && !tool_parse_size (texts[k], &bytes, &error))
          USAGE_ERROR (context, "%s", error->message);
        *chunks[k] = bytes / f->chunk_size;
        if (*chunks[k] == 0)
          USAGE_ERROR (context, "a capacity of %s holds no chunk", texts[k]);
      }
  }

  if (f->trace_path != NULL)
    f->workload = tool_workload_load_trace (f->trace_path, (guint) f->max_requests, &error);
  else
    {
      ToolSyntheticParams params = { 300, 6, 8, 6, 1 };

      f->workload = tool_workload_synthetic (&params, (guint) f->max_requests);
    }
  if (f->workload == NULL)
    {
      g_printerr ("kvtier: %s\n", error->message);
      status = TOOL_EXIT_FAILURE;
      goto out;
    }
  for (guint r = 0; r < f->workload->requests->len; r++)
    f->longest = MAX (f->longest, g_array_index (f->workload->requests, ToolRequest, r).n_chunks);

  f->registry = tool_load_registry (TRUE, &plugin_errors);
  f->subscriber_type = g_type_from_name ("KvPeerSubscriber");
  if (kv_tier_registry_lookup_tier_type (f->registry, "fs", NULL) == G_TYPE_INVALID ||
      kv_tier_registry_lookup_tier_type (f->registry, "peer", NULL) == G_TYPE_INVALID ||
      f->subscriber_type == G_TYPE_INVALID)
    {
      g_printerr ("kvtier: --nodes needs the fs and peer plugins (KVTIER_PLUGIN_PATH)\n");
      status = TOOL_EXIT_FAILURE;
      goto out;
    }
  f->dir = g_dir_make_tmp ("kvtier-fleet-XXXXXX", &error);
  if (f->dir == NULL)
    {
      g_printerr ("kvtier: %s\n", error->message);
      status = TOOL_EXIT_FAILURE;
      goto out;
    }
  {
    guint8 raw[32];
    g_autofree char *hex = NULL;

    for (guint i = 0; i < sizeof raw; i++)
      raw[i] = (guint8) g_random_int_range (0, 256);
    hex = g_compute_checksum_for_data (G_CHECKSUM_SHA256, raw, sizeof raw);
    f->secret_path = g_build_filename (f->dir, "secret", NULL);
    if (!g_file_set_contents_full (f->secret_path, hex, -1, G_FILE_SET_CONTENTS_NONE, 0600, &error))
      {
        g_printerr ("kvtier: %s\n", error->message);
        status = TOOL_EXIT_FAILURE;
        goto out;
      }
  }
  f->blocks = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL, (GDestroyNotify) block_free);
  f->runs = g_array_new (FALSE, TRUE, sizeof (Run));
  g_array_set_clear_func (f->runs, (GDestroyNotify) run_clear);

  for (guint k = 0; k < node_counts->len; k++)
    {
      guint n = (guint) g_array_index (node_counts, guint64, k);

      for (guint s = 0; s < specs->len; s++)
        {
          const Run *spec = &g_array_index (specs, Run, s);
          Run run = { 0 };

          /* one node: every policy is the same */
          if (n == 1 && s > 0)
            break;
          run.n_nodes = n;
          run.policy = spec->policy;
          run.peers = spec->peers;
          run.label = g_strdup (n == 1 ? "one node" : spec->label);
          if (!fleet_run (f, &run, &error))
            {
              g_printerr ("kvtier: %s, %u nodes: %s\n", run.label, n, error->message);
              g_free (run.label);
              status = TOOL_EXIT_FAILURE;
              goto out;
            }
          g_array_append_val (f->runs, run);
        }
    }

  if (!f->quiet)
    print_report (f);
  if (f->json_path != NULL && !write_json (f, f->json_path, &error))
    {
      g_printerr ("kvtier: cannot write %s: %s\n", f->json_path, error->message);
      status = TOOL_EXIT_FAILURE;
    }
  g_clear_error (&error);
  if (f->plot_path != NULL && !write_plot (f, f->plot_path, &error))
    {
      g_printerr ("kvtier: cannot draw %s: %s\n", f->plot_path, error->message);
      status = TOOL_EXIT_FAILURE;
    }
  for (guint k = 0; k < f->runs->len; k++)
    {
      const Run *run = &g_array_index (f->runs, Run, k);

      if (run->mismatches > 0 || run->failed_transfers > 0)
        {
          g_printerr ("kvtier: %s, %u nodes: %" G_GUINT64_FORMAT " loaded chunks did not hold the"
                      " bytes that were stored, %" G_GUINT64_FORMAT " transfers failed\n",
                      run->label, run->n_nodes, run->mismatches, run->failed_transfers);
          status = TOOL_EXIT_FAILURE;
        }
    }

out:
  for (guint s = 0; s < specs->len; s++)
    run_clear (&g_array_index (specs, Run, s));
  g_clear_pointer (&f->runs, g_array_unref);
  g_clear_pointer (&f->blocks, g_hash_table_unref);
  if (f->dir != NULL)
    tool_remove_tree (f->dir);
  g_free (f->dir);
  g_free (f->secret_path);
  g_clear_object (&f->registry);
  g_clear_pointer (&f->workload, tool_workload_free);
  g_free (f->trace_path);
  g_free (f->nodes_text);
  g_free (f->router_text);
  g_free (f->chunk_size_text);
  g_free (f->gpu_size_text);
  g_free (f->primary_size_text);
  g_free (f->tier_size_text);
  g_free (f->json_path);
  g_free (f->plot_path);
  return status;
}
