/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

/**
 * KvWakeupRearmFunc:
 * @owner: the object the source was made for
 *
 * Called at each dispatch before the callback, so that what is queued
 * while the callback runs wakes the loop again instead of being lost.
 */
typedef void (*KvWakeupRearmFunc) (gpointer owner);

G_GNUC_INTERNAL
GSource *_kv_wakeup_source_new (GObject           *owner,
                                int                fd,
                                KvWakeupRearmFunc  rearm,
                                const char        *name);

G_END_DECLS
