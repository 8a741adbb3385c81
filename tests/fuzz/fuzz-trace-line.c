/* SPDX-License-Identifier: LGPL-2.1-or-later */

/* One line of a Mooncake trace (tools/kvtier-workload.c) on arbitrary
 * bytes: the reader either fills a request or names the line in its
 * error, never crashes, never recurses past the depth limit (the check
 * runs before json-glib), and what it accepts reads back the same when
 * written out again. */

#include "config.h"

#include "fuzz-common.h"

#include "../../tools/kvtier-json.h"
#include "../../tools/kvtier-workload.h"

#include <string.h>

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_make_criticals_fatal ();
  return 0;
}

/* The request as a trace line, written as the trace format has it. */
static char *
request_to_line (const ToolRequest *request)
{
  GString *line = g_string_new (NULL);

  g_string_append_printf (line, "{\"timestamp\": %" G_GINT64_FORMAT ", \"input_length\": %"
                          G_GUINT64_FORMAT ", \"hash_ids\": [", request->arrival_ms,
                          request->input_tokens);
  for (guint i = 0; i < request->n_chunks; i++)
    g_string_append_printf (line, "%s%" G_GUINT64_FORMAT, i > 0 ? ", " : "", request->ids[i]);
  g_string_append (line, "]}");
  return g_string_free (line, FALSE);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GError) error = NULL;
  ToolRequest request = { 0 };
  const char *text = (const char *) data;

  if (!tool_workload_parse_trace_line (text, size, "trace.jsonl", 7, &request, &error))
    {
      g_assert_nonnull (error);
      g_assert_true (g_str_has_prefix (error->message, "trace.jsonl:7: "));
      g_assert_null (request.ids);
      return 0;
    }
  g_assert_no_error (error);

  /* Only bounded, shallow, NUL-free lines get this far. */
  g_assert_cmpuint (size, <=, TOOL_TRACE_MAX_LINE_BYTES);
  g_assert_null (memchr (text, '\0', size));
  g_assert_true (tool_json_check_depth (text, size, TOOL_JSON_MAX_DEPTH, NULL));
  g_assert_nonnull (request.ids);
  g_assert_cmpint (request.arrival_ms, >=, 0);
  for (guint i = 0; i < request.n_chunks; i++)
    g_assert_cmpuint (request.ids[i], <=, (guint64) G_MAXINT64);
  if (request.n_chunks > 0)
    g_assert_cmpuint (request.input_tokens, >, 0);

  /* Written out and read again, the request is the same. */
  {
    g_autofree char *line = request_to_line (&request);
    ToolRequest again = { 0 };

    if (strlen (line) <= TOOL_TRACE_MAX_LINE_BYTES)
      {
        g_assert_true (tool_workload_parse_trace_line (line, strlen (line), "again", 1, &again,
                                                       &error));
        g_assert_no_error (error);
        g_assert_cmpint (again.arrival_ms, ==, request.arrival_ms);
        g_assert_cmpuint (again.input_tokens, ==, request.input_tokens);
        g_assert_cmpuint (again.n_chunks, ==, request.n_chunks);
        g_assert_cmpmem (again.ids, again.n_chunks * sizeof (guint64),
                         request.ids, request.n_chunks * sizeof (guint64));
        g_free (again.ids);
      }
  }
  g_free (request.ids);
  return 0;
}
