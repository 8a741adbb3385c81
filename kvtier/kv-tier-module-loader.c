/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-tier-module-loader.h"

#include "kv-types.h"

/**
 * KvTierModuleLoader:
 *
 * Evaluates source files written in another language (Python, JavaScript)
 * so that the tier classes they define become GTypes that a
 * [class@Kv.TierRegistry] can name, the way libpeas's loaders run Python
 * and GJS plugins.
 *
 * Applications do not use loaders directly: they call
 * [method@Kv.TierRegistry.load_tier_module] (or write `module = FILE` in a
 * `[tier NAME]` section of a configuration), and the registry picks the
 * loader by the file's extension. kvtier ships two, each a loadable
 * module of its own so that no program embeds an interpreter it does not
 * use:
 *
 * - `python` (`.py`): embeds libpython 3 and imports the file with
 *   PyGObject available; inside a running Python interpreter it uses that
 *   one. Python tiers run on any thread (PyGObject takes the GIL).
 * - `gjs` (`.js`, `.mjs`): evaluates the file as an ES module in a GJS
 *   context on the calling thread (or the thread's running context inside
 *   `gjs`). JavaScript runs only on that thread: its tiers belong to a
 *   manager driven from it, and their jobs complete from callbacks of
 *   its main context ([property@Kv.TierModuleLoader:main-context]).
 *
 * A loader module is a kvtier plugin (see [class@Kv.TierRegistry]) in
 * `$libdir/kvtier-1/loaders` or a directory of `KVTIER_LOADER_PATH`, whose
 * register function calls
 * [method@Kv.TierRegistry.register_module_loader] with its file
 * extension and loader type.
 */

typedef struct
{
  char         *language;
  GMainContext *main_context;
} KvTierModuleLoaderPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (KvTierModuleLoader, kv_tier_module_loader, G_TYPE_OBJECT)

enum {
  PROP_0,
  PROP_LANGUAGE,
  PROP_MAIN_CONTEXT,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void
kv_tier_module_loader_finalize (GObject *object)
{
  KvTierModuleLoaderPrivate *priv =
    kv_tier_module_loader_get_instance_private (KV_TIER_MODULE_LOADER (object));

  g_free (priv->language);
  g_clear_pointer (&priv->main_context, g_main_context_unref);

  G_OBJECT_CLASS (kv_tier_module_loader_parent_class)->finalize (object);
}

static void
kv_tier_module_loader_get_property (GObject    *object,
                                    guint       prop_id,
                                    GValue     *value,
                                    GParamSpec *pspec)
{
  KvTierModuleLoaderPrivate *priv =
    kv_tier_module_loader_get_instance_private (KV_TIER_MODULE_LOADER (object));

  switch (prop_id)
    {
    case PROP_LANGUAGE:
      g_value_set_string (value, priv->language);
      break;
    case PROP_MAIN_CONTEXT:
      g_value_set_boxed (value, priv->main_context);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_tier_module_loader_set_property (GObject      *object,
                                    guint         prop_id,
                                    const GValue *value,
                                    GParamSpec   *pspec)
{
  KvTierModuleLoaderPrivate *priv =
    kv_tier_module_loader_get_instance_private (KV_TIER_MODULE_LOADER (object));

  switch (prop_id)
    {
    case PROP_LANGUAGE:
      g_free (priv->language);
      priv->language = g_value_dup_string (value);
      break;
    case PROP_MAIN_CONTEXT:
      g_clear_pointer (&priv->main_context, g_main_context_unref);
      priv->main_context = g_value_dup_boxed (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
kv_tier_module_loader_class_init (KvTierModuleLoaderClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = kv_tier_module_loader_finalize;
  object_class->get_property = kv_tier_module_loader_get_property;
  object_class->set_property = kv_tier_module_loader_set_property;

  /**
   * KvTierModuleLoader:language:
   *
   * The language of the files this loader evaluates (`Python`,
   * `JavaScript`), as error messages name it.
   */
  properties[PROP_LANGUAGE] =
    g_param_spec_string ("language", NULL,
                         "The language of the files this loader evaluates",
                         NULL,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                         G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  /**
   * KvTierModuleLoader:main-context:
   *
   * The main context whose callbacks complete the jobs of the tiers this
   * loader's files define, or %NULL when they complete from the tiers'
   * own threads. The registry gives it to each such tier as its
   * [property@Kv.SecondaryTier:completion-context], so that draining and
   * shutting the tier down iterate it (a JavaScript tier's completions
   * are main-loop callbacks on the owner thread).
   */
  properties[PROP_MAIN_CONTEXT] =
    g_param_spec_boxed ("main-context", NULL,
                        "The main context whose callbacks complete the jobs of this loader's tiers (none: their own threads)",
                        G_TYPE_MAIN_CONTEXT,
                        G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY |
                        G_PARAM_STATIC_STRINGS | G_PARAM_EXPLICIT_NOTIFY);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
kv_tier_module_loader_init (KvTierModuleLoader *self)
{
}

/**
 * kv_tier_module_loader_load_file: (virtual load_file)
 * @self: a loader
 * @path: (type filename): the absolute path of a source file
 * @error: return location for a #GError
 *
 * Evaluates the file at @path in the loader's interpreter, on the calling
 * thread. Called by [method@Kv.TierRegistry.load_tier_module], which
 * finds out which tier types the file defined.
 *
 * Returns: %TRUE when the file was evaluated; %FALSE with @error set to
 *   the cause otherwise. A loader that returns %FALSE without an error is
 *   reported as %KV_TIER_ERROR_FAILED.
 */
gboolean
kv_tier_module_loader_load_file (KvTierModuleLoader  *self,
                                 const char          *path,
                                 GError             **error)
{
  KvTierModuleLoaderClass *klass;
  g_autoptr(GError) local_error = NULL;

  g_return_val_if_fail (KV_IS_TIER_MODULE_LOADER (self), FALSE);
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  klass = KV_TIER_MODULE_LOADER_GET_CLASS (self);
  g_return_val_if_fail (klass->load_file != NULL, FALSE);

  if (klass->load_file (self, path, &local_error))
    return TRUE;
  if (local_error == NULL)
    g_set_error (&local_error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                 "%s's load_file failed without saying why", G_OBJECT_TYPE_NAME (self));
  g_propagate_error (error, g_steal_pointer (&local_error));
  return FALSE;
}

/**
 * kv_tier_module_loader_get_language:
 * @self: a loader
 *
 * Gets [property@Kv.TierModuleLoader:language]. Any thread.
 *
 * Returns: (nullable): the language name
 */
const char *
kv_tier_module_loader_get_language (KvTierModuleLoader *self)
{
  KvTierModuleLoaderPrivate *priv;

  g_return_val_if_fail (KV_IS_TIER_MODULE_LOADER (self), NULL);

  priv = kv_tier_module_loader_get_instance_private (self);
  return priv->language;
}

/**
 * kv_tier_module_loader_get_main_context:
 * @self: a loader
 *
 * Gets [property@Kv.TierModuleLoader:main-context]. Any thread.
 *
 * Returns: (transfer none) (nullable): the main context, or %NULL
 */
GMainContext *
kv_tier_module_loader_get_main_context (KvTierModuleLoader *self)
{
  KvTierModuleLoaderPrivate *priv;

  g_return_val_if_fail (KV_IS_TIER_MODULE_LOADER (self), NULL);

  priv = kv_tier_module_loader_get_instance_private (self);
  return priv->main_context;
}
