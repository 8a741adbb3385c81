/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

/* Python.h before any system header, as Python's documentation asks. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kv-python-loader.h"

#include <dlfcn.h>
#include <girepository.h>

/*
 * The Python loader: imports a tier module with libpython 3, the way
 * libpeas's python3 loader runs plugins.
 *
 * In a program that is not Python (kvtier, a C engine, gjs) the first
 * load starts an interpreter: without Python's signal handlers (the
 * program keeps SIGINT and SIGTERM), with the site packages of the Python
 * kvtier was built against, so PyGObject (`gi`) is found. It then releases
 * the GIL: Python tiers run their vfuncs on the owner thread and their
 * workers on threads of their own, each taking the GIL through PyGObject.
 * Inside a running Python the loader uses that interpreter. The
 * interpreter is never finalized: the types it defined live as long as
 * the process.
 */

struct _KvPythonLoader
{
  KvTierModuleLoader  parent_instance;
};

G_DEFINE_FINAL_TYPE (KvPythonLoader, kv_python_loader, KV_TYPE_TIER_MODULE_LOADER)

/* Runs under the GIL. Imports the file as a module of its own (named after
 * the file unless that name is taken), with its directory on sys.path
 * like a script's, and returns None, or one line saying what went wrong
 * and where. */
static const char load_helper_source[] =
  "def _kvtier_load(path):\n"
  "    import importlib.util, os, sys, traceback\n"
  "    try:\n"
  "        import gi\n"
  "        gi.require_version('Kv', '1')\n"
  "        from gi.repository import Kv  # noqa: F401\n"
  "    except BaseException as e:\n"
  "        return f'PyGObject cannot load kvtier (gi.repository.Kv): {type(e).__name__}: {e}'\n"
  "    directory = os.path.dirname(path)\n"
  "    stem = os.path.splitext(os.path.basename(path))[0]\n"
  "    name = stem\n"
  "    if not stem.isidentifier() or stem in sys.modules:\n"
  "        name = '_kvtier_module_%d_%s' % (len(sys.modules), ''.join(\n"
  "            c if c.isalnum() else '_' for c in stem))\n"
  "    if directory not in sys.path:\n"
  "        sys.path.insert(0, directory)\n"
  "    try:\n"
  "        spec = importlib.util.spec_from_file_location(name, path)\n"
  "        module = importlib.util.module_from_spec(spec)\n"
  "        sys.modules[name] = module\n"
  "        spec.loader.exec_module(module)\n"
  "    except BaseException as e:\n"
  "        sys.modules.pop(name, None)\n"
  "        frames = [f for f in traceback.extract_tb(e.__traceback__)\n"
  "                  if not f.filename.startswith('<')]\n"
  "        where = ''\n"
  "        if frames and not isinstance(e, SyntaxError):\n"
  "            where = f' (at {frames[-1].filename}:{frames[-1].lineno})'\n"
  "        return f'{type(e).__name__}: {e}{where}'\n"
  "    return None\n";

G_LOCK_DEFINE_STATIC (interpreter);
static gboolean interpreter_ready;
static char *interpreter_error;
static PyObject *load_helper;   /* under the GIL */

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

/* Starts the interpreter once, or finds the one this process runs. */
static gboolean
ensure_interpreter (GError **error)
{
  search_installed_typelib ();
  G_LOCK (interpreter);
  if (!interpreter_ready && interpreter_error == NULL)
    {
      if (Py_IsInitialized ())
        interpreter_ready = TRUE;
      else
        {
          PyConfig config;
          PyStatus status;

          /* Extension modules (PyGObject's _gi) take Python's symbols from
           * the global scope, where a library this module pulled in
           * privately is not: make libpython global first. */
          if (dlopen (KV_PYTHON_LIBRARY, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD) == NULL)
            g_debug ("Cannot make %s global: %s", KV_PYTHON_LIBRARY, dlerror ());

          PyConfig_InitPythonConfig (&config);
          config.install_signal_handlers = 0;
          config.parse_argv = 0;
          /* the interpreter kvtier was built against, not whichever
           * python3 comes first on PATH */
          status = PyConfig_SetBytesString (&config, &config.program_name, KV_PYTHON_PROGRAM);
          if (!PyStatus_Exception (status))
            status = Py_InitializeFromConfig (&config);
          PyConfig_Clear (&config);
          if (PyStatus_Exception (status))
            interpreter_error = g_strdup_printf ("cannot start Python: %s%s%s",
                                                 status.func != NULL ? status.func : "",
                                                 status.func != NULL ? ": " : "",
                                                 status.err_msg != NULL ? status.err_msg : "failed");
          else
            {
              /* Other threads (the tiers' workers, PyGObject's closures)
               * take the GIL when they need it. */
              PyEval_SaveThread ();
              interpreter_ready = TRUE;
            }
        }
    }
  if (interpreter_error != NULL)
    g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "%s", interpreter_error);
  G_UNLOCK (interpreter);
  return interpreter_error == NULL;
}

/* The message of the pending Python exception, which it clears. */
static char *
take_python_error (void)
{
  PyObject *type = NULL, *value = NULL, *traceback = NULL;
  PyObject *text;
  char *message = NULL;

  PyErr_Fetch (&type, &value, &traceback);
  PyErr_NormalizeException (&type, &value, &traceback);
  text = value != NULL ? PyObject_Str (value) : NULL;
  if (text != NULL && PyUnicode_Check (text))
    message = g_strdup_printf ("%s: %s", type != NULL ? ((PyTypeObject *) type)->tp_name : "error",
                               PyUnicode_AsUTF8 (text));
  else
    message = g_strdup ("an exception that cannot be printed");
  PyErr_Clear ();
  Py_XDECREF (text);
  Py_XDECREF (type);
  Py_XDECREF (value);
  Py_XDECREF (traceback);
  return message;
}

static PyObject *
get_load_helper (char **out_error)
{
  PyObject *globals, *result;

  if (load_helper != NULL)
    return load_helper;

  globals = PyDict_New ();
  if (globals == NULL)
    {
      *out_error = take_python_error ();
      return NULL;
    }
  PyDict_SetItemString (globals, "__builtins__", PyEval_GetBuiltins ());
  result = PyRun_String (load_helper_source, Py_file_input, globals, globals);
  if (result == NULL)
    {
      *out_error = take_python_error ();
      Py_DECREF (globals);
      return NULL;
    }
  Py_DECREF (result);
  load_helper = PyDict_GetItemString (globals, "_kvtier_load");
  Py_XINCREF (load_helper);
  Py_DECREF (globals);
  if (load_helper == NULL)
    *out_error = g_strdup ("the loader's helper is missing");
  return load_helper;
}

static gboolean
kv_python_loader_load_file (KvTierModuleLoader  *loader,
                            const char          *path,
                            GError             **error)
{
  PyGILState_STATE gil;
  PyObject *helper, *result;
  g_autofree char *failure = NULL;

  if (!ensure_interpreter (error))
    return FALSE;

  gil = PyGILState_Ensure ();
  helper = get_load_helper (&failure);
  if (helper != NULL)
    {
      result = PyObject_CallFunction (helper, "s", path);
      if (result == NULL)
        failure = take_python_error ();
      else if (PyUnicode_Check (result))
        failure = g_strdup (PyUnicode_AsUTF8 (result));
      Py_XDECREF (result);
    }
  PyGILState_Release (gil);

  if (failure != NULL)
    {
      g_set_error_literal (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, failure);
      return FALSE;
    }
  return TRUE;
}

static void
kv_python_loader_class_init (KvPythonLoaderClass *klass)
{
  KvTierModuleLoaderClass *loader_class = KV_TIER_MODULE_LOADER_CLASS (klass);

  loader_class->load_file = kv_python_loader_load_file;
}

static void
kv_python_loader_init (KvPythonLoader *self)
{
}

/* The process's Python loader (one interpreter per process). */
KvTierModuleLoader *
kv_python_loader_get_default (void)
{
  static gsize initialized;
  static KvTierModuleLoader *loader;

  if (g_once_init_enter (&initialized))
    {
      loader = g_object_new (KV_TYPE_PYTHON_LOADER, "language", "Python", NULL);
      g_once_init_leave (&initialized, 1);
    }
  return loader;
}
