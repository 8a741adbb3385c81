/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#if !defined(KVTIER_INSIDE) && !defined(KVTIER_COMPILATION)
#error "Only <kvtier.h> can be included directly."
#endif

#include <gio/gio.h>

#include "kv-version-macros.h"

G_BEGIN_DECLS

#define KV_TYPE_CONFIGURABLE (kv_configurable_get_type ())

KVTIER_AVAILABLE_IN_ALL
G_DECLARE_INTERFACE (KvConfigurable, kv_configurable, KV, CONFIGURABLE, GObject)

/**
 * KvConfigurableInterface:
 * @check: check the construct properties as [iface@Gio.Initable] init
 *   would, without side effects.
 *
 * The interface of objects whose configuration can be checked before they
 * are initialized.
 */
struct _KvConfigurableInterface
{
  GTypeInterface g_iface;

  gboolean (*check) (KvConfigurable  *self,
                     GError         **error);

  /*< private >*/
  gpointer _reserved[4];
};

KVTIER_AVAILABLE_IN_ALL
gboolean kv_configurable_check (KvConfigurable  *self,
                                GError         **error);

G_END_DECLS
