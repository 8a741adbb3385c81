/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-wakeup-source-private.h"

/* The GSource behind kv_tiering_manager_create_source() and
 * kv_connector_create_source(): ready while a wake-up fd is readable, and
 * holding its owner so the fd outlives the source. */

typedef struct
{
  GSource            source;
  GObject           *owner;
  KvWakeupRearmFunc  rearm;
} KvWakeupSource;

static gboolean
kv_wakeup_source_dispatch (GSource     *source,
                           GSourceFunc  callback,
                           gpointer     user_data)
{
  KvWakeupSource *ws = (KvWakeupSource *) source;

  if (ws->rearm != NULL)
    ws->rearm (ws->owner);
  if (callback == NULL)
    return G_SOURCE_CONTINUE;
  return callback (user_data);
}

static void
kv_wakeup_source_finalize (GSource *source)
{
  KvWakeupSource *ws = (KvWakeupSource *) source;

  g_clear_object (&ws->owner);
}

static GSourceFuncs kv_wakeup_source_funcs = {
  .dispatch = kv_wakeup_source_dispatch,
  .finalize = kv_wakeup_source_finalize,
};

/*
 * _kv_wakeup_source_new:
 * @owner: the object whose @fd this is; the source keeps a reference
 * @fd: a file descriptor that is readable while there is work
 * @rearm: (nullable): called before each callback
 * @name: a static name for the source
 *
 * Returns: (transfer full): a new source, not attached
 */
GSource *
_kv_wakeup_source_new (GObject           *owner,
                       int                fd,
                       KvWakeupRearmFunc  rearm,
                       const char        *name)
{
  GSource *source = g_source_new (&kv_wakeup_source_funcs, sizeof (KvWakeupSource));
  KvWakeupSource *ws = (KvWakeupSource *) source;

  ws->owner = g_object_ref (owner);
  ws->rearm = rearm;
  g_source_set_static_name (source, name);
  g_source_add_unix_fd (source, fd, G_IO_IN);
  return source;
}
