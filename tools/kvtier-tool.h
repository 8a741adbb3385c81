/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <json-glib/json-glib.h>
#include <kvtier.h>

G_BEGIN_DECLS

/* Exit codes of every subcommand. */
#define TOOL_EXIT_OK      0
#define TOOL_EXIT_FAILURE 1
#define TOOL_EXIT_USAGE   2

/* Tokens of one chunk in the Mooncake trace (its hash blocks are 512 tokens). */
#define TOOL_TOKENS_PER_CHUNK 512

/* One request of a workload: a prompt made of chained chunk ids. */
typedef struct
{
  guint64 *ids;          /* prefix-chained chunk ids, one per chunk */
  guint    n_chunks;
  guint64  input_tokens; /* tokens of the prompt; the last chunk may be partial */
  gint64   arrival_ms;
} ToolRequest;

typedef struct
{
  char   *description;   /* for the report: where the requests came from */
  char   *kind;          /* "trace" or "synthetic" */
  GArray *requests;      /* (element-type ToolRequest), in arrival order */
} ToolWorkload;

typedef struct
{
  guint   conversations;
  guint   turns;
  guint   system_prompts;
  guint   system_chunks;
  guint   seed;
} ToolSyntheticParams;

ToolWorkload *tool_workload_load_trace (const char                *path,
                                        guint                      max_requests,
                                        GError                   **error);
ToolWorkload *tool_workload_synthetic  (const ToolSyntheticParams *params,
                                        guint                      max_requests);
void          tool_workload_free       (ToolWorkload              *workload);
guint64       tool_request_chunk_tokens (const ToolRequest        *request,
                                         guint                     index);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (ToolWorkload, tool_workload_free)

/* One sample of the bench's time series, for --plot. */
typedef struct
{
  gdouble  t_s;
  guint64  lookups;
  guint64  misses;
  guint64 *hits;       /* per source: device, primary, then each tier */
  guint64 *bytes;      /* per path: see ToolPlotInfo.path_names */
} ToolSample;

typedef struct
{
  guint         n_sources;
  const char  **source_names;
  guint         n_paths;
  const char  **path_names;
  GPtrArray    *samples;     /* (element-type ToolSample) */
  const char   *title;
} ToolPlotInfo;

gboolean tool_plot_write (const char          *path,
                          const ToolPlotInfo  *info,
                          GError             **error);

int      tool_bench       (int    argc,
                           char **argv);
int      tool_inspect     (int    argc,
                           char **argv);
int      tool_serve       (int    argc,
                           char **argv);
int      tool_peer        (int    argc,
                           char **argv);

/* Small helpers shared by the subcommands. */
gboolean tool_parse_size  (const char  *text,
                           guint64     *out_size,
                           GError     **error);
char    *tool_format_size (guint64      bytes);
char    *tool_format_count (guint64     n);
int      tool_usage_error (GOptionContext *context,
                           const char     *format,
                           ...) G_GNUC_PRINTF (2, 3);
gint64   tool_now_ns      (void);
void     tool_remove_tree (const char  *root);
KvTierRegistry *tool_load_registry (gboolean    report_errors,
                                    gboolean   *out_plugin_errors);
gboolean tool_load_tier_modules (KvTierRegistry  *registry,
                                 char           **paths,
                                 GError         **error);

/* The --tier-module option of bench, serve, plugins and config check. */
#define TOOL_TIER_MODULE_OPTION(location)                                          \
  { "tier-module", 'm', 0, G_OPTION_ARG_FILENAME_ARRAY, (location),               \
    "Load a Python (.py) or JavaScript (.js) file that defines tier types, named" \
    " after the file (repeatable)", "FILE" }

/* "name": value members of the JSON the subcommands write. */
void     tool_json_add_int    (JsonBuilder *builder,
                               const char  *name,
                               gint64       value);
void     tool_json_add_double (JsonBuilder *builder,
                               const char  *name,
                               gdouble      value);
void     tool_json_add_string (JsonBuilder *builder,
                               const char  *name,
                               const char  *value);

G_END_DECLS
