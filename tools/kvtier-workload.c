/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kvtier-workload.h"
#include "kvtier-json.h"

#include <string.h>

#include <json-glib/json-glib.h>

/* Workloads for `kvtier bench`: the Mooncake trace format, and a synthetic
 * multi-turn chat generator that needs no files. */

static void
clear_request (gpointer data)
{
  ToolRequest *request = data;

  g_free (request->ids);
}

static ToolWorkload *
workload_new (const char *kind)
{
  ToolWorkload *workload = g_new0 (ToolWorkload, 1);

  workload->kind = g_strdup (kind);
  workload->requests = g_array_new (FALSE, TRUE, sizeof (ToolRequest));
  g_array_set_clear_func (workload->requests, clear_request);
  return workload;
}

void
tool_workload_free (ToolWorkload *workload)
{
  if (workload == NULL)
    return;
  g_free (workload->description);
  g_free (workload->kind);
  g_array_unref (workload->requests);
  g_free (workload);
}

guint64
tool_request_chunk_tokens (const ToolRequest *request,
                           guint              index)
{
  guint64 before = (guint64) index * TOOL_TOKENS_PER_CHUNK;

  /* The trace's last block is usually partial; it still has an id. */
  if (index + 1 == request->n_chunks && request->input_tokens > before &&
      request->input_tokens - before < TOOL_TOKENS_PER_CHUNK)
    return request->input_tokens - before;
  return TOOL_TOKENS_PER_CHUNK;
}

static gboolean
read_int (JsonObject  *object,
          const char  *member,
          gint64      *out,
          const char  *path,
          guint        line,
          GError     **error)
{
  JsonNode *node = json_object_get_member (object, member);

  if (node == NULL)
    return TRUE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_INT64 ||
      json_node_get_int (node) < 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s:%u: \"%s\" is not a non-negative integer", path, line, member);
      return FALSE;
    }
  *out = json_node_get_int (node);
  return TRUE;
}

/**
 * tool_workload_parse_trace_line:
 * @line: (array length=length): one line of a Mooncake trace, not empty
 * @length: bytes of @line
 * @path: the trace's file name, for the messages
 * @line_number: the line's number, for the messages
 * @request: (out caller-allocates): the request, its ids to be freed
 * @error: return location for a #GError
 *
 * Reads one request: a JSON object with a `hash_ids` array of
 * non-negative integers and optional `timestamp` and `input_length`. The
 * line is bounded (%TOOL_TRACE_MAX_LINE_BYTES) and its nesting checked
 * before it is parsed.
 *
 * Returns: %TRUE with @request filled, or %FALSE with @error set
 */
gboolean
tool_workload_parse_trace_line (const char   *line,
                                gsize         length,
                                const char   *path,
                                guint         line_number,
                                ToolRequest  *request,
                                GError      **error)
{
  g_autoptr(GError) parse_error = NULL;
  g_autoptr(JsonNode) root = NULL;
  g_autofree guint64 *ids = NULL;
  JsonObject *object;
  JsonArray *hash_ids;
  JsonNode *node;
  gint64 arrival_ms = 0;
  gint64 input_tokens = 0;
  guint n_chunks;

  root = tool_json_parse (line, length, TOOL_TRACE_MAX_LINE_BYTES, &parse_error);
  if (root == NULL)
    {
      /* a syntax error, or a line past the limits */
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "%s:%u: %s%s", path, line_number,
                   parse_error->domain == JSON_PARSER_ERROR ? "not JSON: " : "",
                   parse_error->message);
      return FALSE;
    }
  if (!JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s:%u: a request is a JSON object", path, line_number);
      return FALSE;
    }
  object = json_node_get_object (root);

  if (!read_int (object, "timestamp", &arrival_ms, path, line_number, error) ||
      !read_int (object, "input_length", &input_tokens, path, line_number, error))
    return FALSE;

  node = json_object_get_member (object, "hash_ids");
  if (node == NULL || !JSON_NODE_HOLDS_ARRAY (node))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s:%u: missing \"hash_ids\" array", path, line_number);
      return FALSE;
    }
  hash_ids = json_node_get_array (node);
  n_chunks = json_array_get_length (hash_ids);
  ids = g_new (guint64, MAX (n_chunks, 1));
  for (guint i = 0; i < n_chunks; i++)
    {
      JsonNode *id = json_array_get_element (hash_ids, i);

      if (!JSON_NODE_HOLDS_VALUE (id) || json_node_get_value_type (id) != G_TYPE_INT64 ||
          json_node_get_int (id) < 0)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       "%s:%u: hash_ids[%u] is not a non-negative integer",
                       path, line_number, i);
          return FALSE;
        }
      ids[i] = (guint64) json_node_get_int (id);
    }

  request->ids = g_steal_pointer (&ids);
  request->n_chunks = n_chunks;
  request->arrival_ms = arrival_ms;
  request->input_tokens = input_tokens > 0 ? (guint64) input_tokens
                                           : (guint64) n_chunks * TOOL_TOKENS_PER_CHUNK;
  return TRUE;
}

ToolWorkload *
tool_workload_load_trace (const char  *path,
                          guint        max_requests,
                          GError     **error)
{
  g_autoptr(ToolWorkload) workload = workload_new ("trace");
  g_autofree char *data = NULL;
  g_auto(GStrv) lines = NULL;
  g_autofree char *base = NULL;
  guint64 n_refs = 0;

  if (!g_file_get_contents (path, &data, NULL, error))
    return NULL;

  lines = g_strsplit (data, "\n", -1);
  for (guint n = 0; lines[n] != NULL; n++)
    {
      const char *line = g_strstrip (lines[n]);
      ToolRequest request = { 0 };

      if (*line == '\0')
        continue;
      if (max_requests > 0 && workload->requests->len >= max_requests)
        break;
      if (!tool_workload_parse_trace_line (line, strlen (line), path, n + 1, &request, error))
        return NULL;
      n_refs += request.n_chunks;
      g_array_append_val (workload->requests, request);
    }

  if (workload->requests->len == 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s: no requests", path);
      return NULL;
    }

  base = g_path_get_basename (path);
  workload->description = g_strdup_printf ("Mooncake trace %s (%u requests, %" G_GUINT64_FORMAT
                                           " chunk references)", base,
                                           workload->requests->len, n_refs);
  return g_steal_pointer (&workload);
}

typedef struct
{
  gint64  arrival_ms;
  guint   order;
  GArray *ids;
} PendingTurn;

static int
compare_turns (gconstpointer a,
               gconstpointer b)
{
  const PendingTurn *x = a;
  const PendingTurn *y = b;

  if (x->arrival_ms != y->arrival_ms)
    return x->arrival_ms < y->arrival_ms ? -1 : 1;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* Multi-turn chats: each conversation starts with one of a few shared
 * system prompts; each turn adds a user message (1-3 chunks) to the
 * history and sends the whole history as the prompt; the answer (1-2
 * chunks) joins the history for the next turn. Conversations start every
 * 250 ms and think 15-60 s between turns, so later turns find their
 * prefix pushed out of the device by other conversations. Chunk ids are
 * prefix-chained like the Mooncake trace's. */
ToolWorkload *
tool_workload_synthetic (const ToolSyntheticParams *params,
                         guint                      max_requests)
{
  g_autoptr(ToolWorkload) workload = workload_new ("synthetic");
  g_autoptr(GRand) rand = g_rand_new_with_seed (params->seed);
  g_autoptr(GArray) turns = g_array_new (FALSE, TRUE, sizeof (PendingTurn));
  guint64 next_id = (guint64) params->system_prompts * params->system_chunks;
  guint64 n_refs = 0;

  for (guint c = 0; c < params->conversations; c++)
    {
      g_autoptr(GArray) history = g_array_new (FALSE, FALSE, sizeof (guint64));
      guint system = g_rand_int_range (rand, 0, (gint32) MAX (params->system_prompts, 1));
      gint64 t = (gint64) c * 250;

      for (guint k = 0; k < params->system_chunks; k++)
        {
          guint64 id = (guint64) system * params->system_chunks + k;

          g_array_append_val (history, id);
        }

      for (guint turn = 0; turn < params->turns; turn++)
        {
          PendingTurn pending = { 0 };
          guint user = g_rand_int_range (rand, 1, 4);
          guint answer = g_rand_int_range (rand, 1, 3);

          for (guint k = 0; k < user; k++)
            {
              guint64 id = next_id++;

              g_array_append_val (history, id);
            }
          pending.arrival_ms = t;
          pending.order = turns->len;
          pending.ids = g_array_copy (history);
          g_array_append_val (turns, pending);

          for (guint k = 0; k < answer; k++)
            {
              guint64 id = next_id++;

              g_array_append_val (history, id);
            }
          t += g_rand_int_range (rand, 15000, 60001);
        }
    }

  g_array_sort (turns, compare_turns);
  for (guint i = 0; i < turns->len; i++)
    {
      PendingTurn *pending = &g_array_index (turns, PendingTurn, i);
      ToolRequest request = { 0 };

      if (max_requests == 0 || workload->requests->len < max_requests)
        {
          request.n_chunks = pending->ids->len;
          request.ids = g_array_steal (pending->ids, NULL);
          g_array_unref (pending->ids);
          request.input_tokens = (guint64) request.n_chunks * TOOL_TOKENS_PER_CHUNK;
          request.arrival_ms = pending->arrival_ms;
          n_refs += request.n_chunks;
          g_array_append_val (workload->requests, request);
        }
      else
        g_array_free (pending->ids, TRUE);
    }

  workload->description =
    g_strdup_printf ("synthetic chats (%u conversations × %u turns, %u system prompts of %u"
                     " chunks, seed %u: %u requests, %" G_GUINT64_FORMAT " chunk references)",
                     params->conversations, params->turns, params->system_prompts,
                     params->system_chunks, params->seed, workload->requests->len, n_refs);
  return g_steal_pointer (&workload);
}

/* The key of a trace block: SHA-256 of its decimal id, the same on every
 * node and in every run. */
KvKey *
tool_workload_chunk_key (guint64 id)
{
  g_autoptr(GChecksum) checksum = g_checksum_new (G_CHECKSUM_SHA256);
  char decimal[24];
  guint8 digest[32];
  gsize len = sizeof digest;

  g_snprintf (decimal, sizeof decimal, "%" G_GUINT64_FORMAT, id);
  g_checksum_update (checksum, (const guchar *) decimal, -1);
  g_checksum_get_digest (checksum, digest, &len);
  return kv_key_new (digest, len, 0);
}
