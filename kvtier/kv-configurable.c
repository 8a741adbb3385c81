/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-configurable.h"

#include "kv-types.h"

/**
 * KvConfigurable:
 *
 * An object whose configuration can be checked without building it.
 *
 * Tiers and devices refuse some configurations only when they start: an fs
 * tier without a root, a vLLM layout without the model's identity. A tier
 * or device class that implements this interface next to
 * [iface@Gio.Initable] lets [method@Kv.Config.check] (and `kvtier config
 * check`) report those refusals without starting anything. The object is
 * constructed with its properties, and [method@Kv.Configurable.check] runs
 * the checks that [method@Gio.Initable.init] would run before its first
 * side effect, with the same errors. It must not open or create files,
 * directories, sockets or devices, map memory, or start threads.
 *
 * The simplest correct implementation is one function that both `check`
 * and `init` call first.
 */
G_DEFINE_INTERFACE (KvConfigurable, kv_configurable, G_TYPE_OBJECT)

static void
kv_configurable_default_init (KvConfigurableInterface *iface)
{
}

/**
 * kv_configurable_check:
 * @self: a constructed, not yet initialized object
 * @error: return location for a #GError
 *
 * Checks the configuration of @self as its initialization would, without
 * side effects. An implementation that returns %FALSE without an error (as
 * a binding whose exception was swallowed does) counts as a failure.
 *
 * Returns: %TRUE when initialization would accept the configuration,
 *   %FALSE with @error set otherwise
 */
gboolean
kv_configurable_check (KvConfigurable  *self,
                       GError         **error)
{
  KvConfigurableInterface *iface;
  g_autoptr(GError) local_error = NULL;

  g_return_val_if_fail (KV_IS_CONFIGURABLE (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  iface = KV_CONFIGURABLE_GET_IFACE (self);
  if (iface->check == NULL)
    return TRUE;
  if (iface->check (self, &local_error))
    {
      if (local_error != NULL)
        g_warning ("%s: check succeeded but set an error: %s",
                   G_OBJECT_TYPE_NAME (self), local_error->message);
      return TRUE;
    }
  if (local_error == NULL)
    g_set_error (&local_error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED,
                 "%s: the configuration check failed without saying why",
                 G_OBJECT_TYPE_NAME (self));
  g_propagate_error (error, g_steal_pointer (&local_error));
  return FALSE;
}
