/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-gjs-loader.h"

#include <gjs/gjs.h>
#include <girepository.h>

/*
 * The JavaScript loader: evaluates a tier module as an ES module in GJS,
 * the way libpeas's gjs loader runs plugins.
 *
 * GJS runs JavaScript on one thread: the loader uses the GJS context of
 * the thread that first loads a module (the running one inside `gjs`, a
 * new one elsewhere) and refuses loads from any other thread. The tiers a
 * module defines belong to a manager driven from that thread; their jobs
 * complete from callbacks of its default main context, which the loader
 * names as its main-context, so the registry gives it to each tier as its
 * completion context and draining or shutting a tier down iterates it.
 *
 * The module is imported with a dynamic import() whose rejection handler
 * keeps the exception's text and place: GJS itself would only log them.
 * The result is read back through a small GObject class defined in
 * JavaScript (KvtierGjsModuleState), whose properties C can read.
 */

struct _KvGjsLoader
{
  KvTierModuleLoader  parent_instance;

  GjsContext         *context;   /* on owner */
  GThread            *owner;
  GType               state_type;
};

G_DEFINE_FINAL_TYPE (KvGjsLoader, kv_gjs_loader, KV_TYPE_TIER_MODULE_LOADER)

/* Evaluated once per context: the table of imports and the class that
 * reports on them. */
static const char state_source[] =
  "(() => {\n"
  "  const GObject = imports.gi.GObject;\n"
  "  const imports_ = new Map();\n"
  "  const where = e => {\n"
  "    let file = e?.fileName, line = e?.lineNumber, column = e?.columnNumber;\n"
  "    if (!file && typeof e?.stack === 'string') {\n"
  "      const m = /@(.*):(\\d+):(\\d+)$/m.exec(e.stack);\n"
  "      if (m)\n"
  "        [file, line, column] = [m[1], m[2], m[3]];\n"
  "    }\n"
  "    if (!file)\n"
  "      return '';\n"
  "    file = String(file).replace(/^file:\\/\\//, '');\n"
  "    return ` (at ${file}${line ? `:${line}` : ''}${column ? `:${column}` : ''})`;\n"
  "  };\n"
  "  const describe = e => {\n"
  "    let text;\n"
  "    try {\n"
  "      text = e instanceof Error ? `${e.name}: ${e.message}` : String(e);\n"
  "    } catch (_) {\n"
  "      text = 'an exception that cannot be printed';\n"
  "    }\n"
  "    return text + where(e);\n"
  "  };\n"
  "  globalThis.__kvtierImportTierModule = uri => {\n"
  "    imports_.set(uri, null);\n"
  "    import(uri).then(() => imports_.set(uri, ''), e => imports_.set(uri, describe(e)));\n"
  "  };\n"
  "  GObject.registerClass({\n"
  "    GTypeName: 'KvtierGjsModuleState',\n"
  "    Properties: {\n"
  "      'uri': GObject.ParamSpec.string('uri', '', '',\n"
  "        GObject.ParamFlags.READWRITE | GObject.ParamFlags.CONSTRUCT_ONLY, null),\n"
  "      'settled': GObject.ParamSpec.boolean('settled', '', '', GObject.ParamFlags.READABLE, false),\n"
  "      'error': GObject.ParamSpec.string('error', '', '', GObject.ParamFlags.READABLE, null),\n"
  "    },\n"
  "  }, class extends GObject.Object {\n"
  "    get uri() { return this._uri ?? null; }\n"
  "    set uri(value) { this._uri = value; }\n"
  "    get settled() { return imports_.get(this._uri) !== null; }\n"
  "    get error() { return imports_.get(this._uri) || null; }\n"
  "  });\n"
  "})();\n";

/* How long a module may take to finish evaluating (a top-level await). */
#define EVALUATION_TIMEOUT_US (60 * G_USEC_PER_SEC)

/* A kvtier installed outside the system's prefix has its typelib where
 * GObject-Introspection does not look by default. Unless GI_TYPELIB_PATH
 * says where to look (the build tree's tests do), look in kvtier's own
 * typelib directory first, the one matching the library this process runs. */
static void
search_installed_typelib (void)
{
  static gsize done;

  if (g_once_init_enter (&done))
    {
      if (g_getenv ("GI_TYPELIB_PATH") == NULL)
        g_irepository_prepend_search_path (KVTIER_TYPELIBDIR);
      g_once_init_leave (&done, 1);
    }
}

static gboolean
ensure_context (KvGjsLoader  *self,
                GError      **error)
{
  g_autoptr(GError) local_error = NULL;
  int status = 0;

  if (self->owner != NULL && self->owner != g_thread_self ())
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "JavaScript tier modules load on the thread that loaded the first one"
                   " (GJS runs JavaScript on one thread)");
      return FALSE;
    }
  if (self->context != NULL)
    return TRUE;

  search_installed_typelib ();
  self->context = gjs_context_get_current ();
  if (self->context != NULL)
    g_object_ref (self->context);
  else
    self->context = gjs_context_new ();
  self->owner = g_thread_self ();

  self->state_type = g_type_from_name ("KvtierGjsModuleState");
  if (self->state_type == G_TYPE_INVALID)
    {
      if (!gjs_context_eval (self->context, state_source, -1, "<kvtier-loader>", &status,
                             &local_error))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                       "cannot set up GJS: %s", local_error->message);
          return FALSE;
        }
      self->state_type = g_type_from_name ("KvtierGjsModuleState");
      g_assert (self->state_type != G_TYPE_INVALID);
    }
  return TRUE;
}

static gboolean
kv_gjs_loader_load_file (KvTierModuleLoader  *loader,
                         const char          *path,
                         GError             **error)
{
  KvGjsLoader *self = KV_GJS_LOADER (loader);
  g_autoptr(GError) local_error = NULL;
  g_autofree char *uri = NULL;
  g_autofree char *script = NULL;
  g_autofree char *message = NULL;
  g_autoptr(GObject) state = NULL;
  g_autoptr(GString) quoted = NULL;
  gboolean settled = FALSE;
  gint64 deadline;
  int status = 0;

  if (!ensure_context (self, error))
    return FALSE;

  uri = g_filename_to_uri (path, NULL, error);
  if (uri == NULL)
    return FALSE;

  /* the URI as a JavaScript string literal */
  quoted = g_string_new ("'");
  for (const char *p = uri; *p; p++)
    {
      if (*p == '\'' || *p == '\\')
        g_string_append_c (quoted, '\\');
      g_string_append_c (quoted, *p);
    }
  g_string_append_c (quoted, '\'');
  script = g_strdup_printf ("__kvtierImportTierModule(%s);", quoted->str);
  if (!gjs_context_eval (self->context, script, -1, "<kvtier-loader>", &status, &local_error))
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                   "cannot start the import: %s", local_error->message);
      return FALSE;
    }

  /* GJS runs the import's jobs from its job queue, on this thread's
   * default main context. */
  state = g_object_new (self->state_type, "uri", uri, NULL);
  deadline = g_get_monotonic_time () + EVALUATION_TIMEOUT_US;
  for (;;)
    {
      g_object_get (state, "settled", &settled, NULL);
      if (settled || g_get_monotonic_time () >= deadline)
        break;
      g_main_context_iteration (NULL, FALSE);
      g_object_get (state, "settled", &settled, NULL);
      if (settled)
        break;
      g_usleep (1000);
    }
  if (!settled)
    {
      g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_TIMED_OUT,
                   "the module did not finish evaluating within %d s"
                   " (a top-level await that never settles?)",
                   (int) (EVALUATION_TIMEOUT_US / G_USEC_PER_SEC));
      return FALSE;
    }

  g_object_get (state, "error", &message, NULL);
  if (message != NULL)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, message);
      return FALSE;
    }
  return TRUE;
}

static void
kv_gjs_loader_class_init (KvGjsLoaderClass *klass)
{
  KvTierModuleLoaderClass *loader_class = KV_TIER_MODULE_LOADER_CLASS (klass);

  loader_class->load_file = kv_gjs_loader_load_file;
}

static void
kv_gjs_loader_init (KvGjsLoader *self)
{
}

/* The process's GJS loader. Its tiers complete their jobs from callbacks
 * of the default main context, where GJS runs promise jobs and GIO runs
 * the callbacks of calls made on the main thread. */
KvTierModuleLoader *
kv_gjs_loader_get_default (void)
{
  static gsize initialized;
  static KvTierModuleLoader *loader;

  if (g_once_init_enter (&initialized))
    {
      loader = g_object_new (KV_TYPE_GJS_LOADER,
                             "language", "JavaScript",
                             "main-context", g_main_context_default (),
                             NULL);
      g_once_init_leave (&initialized, 1);
    }
  return loader;
}
