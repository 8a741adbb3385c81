/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-accept-loop.h"

#include <sys/resource.h>

/* Accepts per wake-up: the others wait for the next turn of the context,
 * so that one busy listener does not starve the connections it serves. */
#define ACCEPTS_PER_WAKEUP 16
#define PAUSE_MIN_MS 50
#define PAUSE_MAX_MS 1000

/*
 * KvAcceptLoop:
 *
 * A listening TCP socket and the loop that accepts its connections on a
 * #GMainContext, for the servers of kvtier (the peer server, the HTTP
 * endpoint of `kvtier serve`).
 *
 * Unlike #GSocketService, it backs off when an accept fails: out of file
 * descriptors (`EMFILE`, `ENFILE`) or memory, the pending connections stay
 * in the kernel's backlog and accepting pauses for 50 ms, doubling up to
 * 1 s while it keeps failing, instead of spinning on a socket that stays
 * readable. Each such episode is logged once when it begins and once
 * when it ends. Not thread-safe: everything runs on its context, which
 * the caller iterates.
 */
struct _KvAcceptLoop
{
  char             *name;
  GSocket          *socket;
  GSocketAddress   *local_address;
  GMainContext     *context;
  KvAcceptLoopFunc  func;
  gpointer          user_data;

  GSource          *watch;
  GSource          *pause;
  guint             pause_ms;      /* 0: not paused */
  guint64           n_refused;     /* accepts failed in this episode */
  guint64           n_pauses;      /* (atomic) */
  guint64          *pause_counter; /* (atomic) the owner's, or NULL */
};

static void watch_start (KvAcceptLoop *self);

static void
clear_source (GSource **source)
{
  if (*source != NULL)
    {
      g_source_destroy (*source);
      g_clear_pointer (source, g_source_unref);
    }
}

static gboolean
pause_over (gpointer data)
{
  KvAcceptLoop *self = data;

  g_clear_pointer (&self->pause, g_source_unref);
  watch_start (self);
  return G_SOURCE_REMOVE;
}

/* Stops accepting for a while after @error. */
static void
pause_accepting (KvAcceptLoop *self,
                 const GError *error)
{
  gboolean exhausted = g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TOO_MANY_OPEN_FILES) ||
                       g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NO_SPACE);

  if (self->pause_ms == 0)
    {
      struct rlimit limit = { 0 };

      __atomic_fetch_add (&self->n_pauses, 1, __ATOMIC_RELAXED);
      if (self->pause_counter != NULL)
        __atomic_fetch_add (self->pause_counter, 1, __ATOMIC_RELAXED);
      if (exhausted)
        {
          getrlimit (RLIMIT_NOFILE, &limit);
          g_warning ("%s: cannot accept connections: %s (descriptor limit %llu): pausing "
                     "accepts, the connections wait in the backlog",
                     self->name, error->message, (unsigned long long) limit.rlim_cur);
        }
      else
        g_debug ("%s: accept failed: %s", self->name, error->message);
      self->pause_ms = PAUSE_MIN_MS;
    }
  else
    self->pause_ms = MIN (self->pause_ms * 2, PAUSE_MAX_MS);
  self->n_refused++;
  clear_source (&self->watch);
  self->pause = g_timeout_source_new (self->pause_ms);
  g_source_set_callback (self->pause, pause_over, self, NULL);
  g_source_attach (self->pause, self->context);
}

static gboolean
socket_ready (GSocket      *socket,
              GIOCondition  condition,
              gpointer      data)
{
  KvAcceptLoop *self = data;

  for (guint i = 0; i < ACCEPTS_PER_WAKEUP; i++)
    {
      g_autoptr(GError) error = NULL;
      GSocket *client = g_socket_accept (self->socket, NULL, &error);

      if (client == NULL)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            return G_SOURCE_CONTINUE;
          pause_accepting (self, error);
          return G_SOURCE_CONTINUE;  /* the watch is destroyed already */
        }
      if (self->pause_ms != 0)
        {
          g_message ("%s: accepting connections again (%" G_GUINT64_FORMAT " accepts failed "
                     "meanwhile)", self->name, self->n_refused);
          self->pause_ms = 0;
          self->n_refused = 0;
        }
      self->func (self, client, self->user_data);
      if (self->socket == NULL)
        break;  /* stopped by the callback */
    }
  return G_SOURCE_CONTINUE;
}

static void
watch_start (KvAcceptLoop *self)
{
  if (self->socket == NULL)
    return;
  self->watch = g_socket_create_source (self->socket, G_IO_IN, NULL);
  g_source_set_callback (self->watch, (GSourceFunc) (void (*) (void)) socket_ready, self, NULL);
  g_source_attach (self->watch, self->context);
}

/* Stops it (see kv_accept_loop_stop()) and frees it. */
void
kv_accept_loop_free (KvAcceptLoop *self)
{
  if (self == NULL)
    return;
  kv_accept_loop_stop (self);
  g_clear_object (&self->local_address);
  g_clear_pointer (&self->context, g_main_context_unref);
  g_free (self->name);
  g_free (self);
}

/*
 * Listens on @address (port 0: one the kernel picks) with a backlog of
 * @backlog and calls @func on @context for each connection accepted,
 * from the first iteration of @context on. @name names the server in its
 * log messages. NULL with @error set if the address cannot be bound.
 */
KvAcceptLoop *
kv_accept_loop_new (const char        *name,
                    GSocketAddress    *address,
                    int                backlog,
                    GMainContext      *context,
                    KvAcceptLoopFunc   func,
                    gpointer           user_data,
                    GError           **error)
{
  g_autoptr(KvAcceptLoop) self = g_new0 (KvAcceptLoop, 1);

  g_return_val_if_fail (G_IS_SOCKET_ADDRESS (address), NULL);
  g_return_val_if_fail (func != NULL, NULL);

  self->name = g_strdup (name);
  self->context = g_main_context_ref (context != NULL ? context : g_main_context_default ());
  self->func = func;
  self->user_data = user_data;
  self->socket = g_socket_new (g_socket_address_get_family (address), G_SOCKET_TYPE_STREAM,
                               G_SOCKET_PROTOCOL_TCP, error);
  if (self->socket == NULL)
    return NULL;
  g_socket_set_blocking (self->socket, FALSE);
  g_socket_set_listen_backlog (self->socket, backlog);
  if (!g_socket_bind (self->socket, address, TRUE, error) ||
      !g_socket_listen (self->socket, error))
    {
      g_socket_close (self->socket, NULL);
      g_clear_object (&self->socket);
      return NULL;
    }
  self->local_address = g_socket_get_local_address (self->socket, error);
  if (self->local_address == NULL)
    {
      g_socket_close (self->socket, NULL);
      g_clear_object (&self->socket);
      return NULL;
    }
  watch_start (self);
  return g_steal_pointer (&self);
}

/* The address it listens on, with the port it got. */
GSocketAddress *
kv_accept_loop_get_local_address (KvAcceptLoop *self)
{
  return self->local_address;
}

/* Closes the listening socket: no more connections. On the loop's
 * context (or once nothing iterates it). */
void
kv_accept_loop_stop (KvAcceptLoop *self)
{
  clear_source (&self->watch);
  clear_source (&self->pause);
  if (self->socket != NULL)
    {
      g_socket_close (self->socket, NULL);
      g_clear_object (&self->socket);
    }
}

/* Times accepting paused after a failed accept (descriptors or memory
 * ran out). Any thread. */
guint64
kv_accept_loop_get_n_pauses (KvAcceptLoop *self)
{
  return __atomic_load_n (&self->n_pauses, __ATOMIC_RELAXED);
}

/* Also counts each pause in *@counter (atomically), a counter of the
 * owner's metrics. */
void
kv_accept_loop_set_pause_counter (KvAcceptLoop *self,
                                  guint64      *counter)
{
  self->pause_counter = counter;
}
