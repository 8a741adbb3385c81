/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-peer-handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Fills @nonce from getrandom(2), the kernel's CSPRNG: never a PRNG seeded
 * by time, so that no two sessions share a challenge. */
gboolean
kv_peer_random_nonce (guint8   nonce[KV_PEER_NONCE_LEN],
                      GError **error)
{
  gsize filled = 0;

  while (filled < KV_PEER_NONCE_LEN)
    {
      ssize_t n = getrandom (nonce + filled, KV_PEER_NONCE_LEN - filled, 0);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          int saved = errno;

          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                       "Cannot read random bytes for a handshake nonce: %s", g_strerror (saved));
          return FALSE;
        }
      filled += n;
    }
  return TRUE;
}

/* HMAC-SHA256 (secret; label, client nonce, server nonce, parameters). The
 * label tells the two directions apart, so that a proof the server sends
 * cannot be reflected back to it as the client's. */
void
kv_peer_handshake_mac (GBytes       *secret,
                       KvPeerRole    role,
                       const guint8  client_nonce[KV_PEER_NONCE_LEN],
                       const guint8  server_nonce[KV_PEER_NONCE_LEN],
                       const guint8  params[KV_PEER_AUTH_PARAMS_SIZE],
                       guint8        mac[KV_PEER_MAC_LEN])
{
  static const char client_label[] = "kvtier-peer v1 client";
  static const char server_label[] = "kvtier-peer v1 server";
  const char *label = role == KV_PEER_ROLE_CLIENT ? client_label : server_label;
  gsize key_len = 0;
  const guint8 *key = g_bytes_get_data (secret, &key_len);
  g_autoptr(GHmac) hmac = g_hmac_new (G_CHECKSUM_SHA256, key, key_len);
  gsize len = KV_PEER_MAC_LEN;

  g_hmac_update (hmac, (const guchar *) label, sizeof client_label);  /* NUL included */
  g_hmac_update (hmac, client_nonce, KV_PEER_NONCE_LEN);
  g_hmac_update (hmac, server_nonce, KV_PEER_NONCE_LEN);
  g_hmac_update (hmac, params, KV_PEER_AUTH_PARAMS_SIZE);
  g_hmac_get_digest (hmac, mac, &len);
}

/* Whether @a and @b are equal, in time that does not depend on where they
 * differ. */
gboolean
kv_peer_constant_time_equal (const guint8 *a,
                             const guint8 *b,
                             gsize         len)
{
  volatile guint8 diff = 0;

  for (gsize i = 0; i < len; i++)
    diff |= a[i] ^ b[i];
  return diff == 0;
}

gboolean
kv_peer_handshake_verify (GBytes       *secret,
                          KvPeerRole    role,
                          const guint8  client_nonce[KV_PEER_NONCE_LEN],
                          const guint8  server_nonce[KV_PEER_NONCE_LEN],
                          const guint8  params[KV_PEER_AUTH_PARAMS_SIZE],
                          const guint8  mac[KV_PEER_MAC_LEN])
{
  guint8 expected[KV_PEER_MAC_LEN];
  gboolean equal;

  kv_peer_handshake_mac (secret, role, client_nonce, server_nonce, params, expected);
  equal = kv_peer_constant_time_equal (expected, mac, KV_PEER_MAC_LEN);
  memset (expected, 0, sizeof expected);
  return equal;
}

gboolean
kv_peer_handshake_append_client_auth (GByteArray          *out,
                                      GBytes              *secret,
                                      const guint8         client_nonce[KV_PEER_NONCE_LEN],
                                      const KvPeerMessage *hello,
                                      guint64              block_size,
                                      const guint8         namespace_digest[32],
                                      const char          *peer_name,
                                      GError             **error)
{
  guint8 params[KV_PEER_AUTH_PARAMS_SIZE];
  guint8 mac[KV_PEER_MAC_LEN];

  if (hello->version != KV_PEER_PROTOCOL_VERSION)
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_VERSION,
                   "the %s speaks protocol version %u, not %u", peer_name, hello->version,
                   KV_PEER_PROTOCOL_VERSION);
      return FALSE;
    }
  kv_peer_frame_auth_params (params, block_size, namespace_digest, 0, 0);
  kv_peer_handshake_mac (secret, KV_PEER_ROLE_CLIENT, client_nonce, hello->nonce, params, mac);
  g_byte_array_set_size (out, 0);
  kv_peer_frame_append_auth (out, params, mac);
  return TRUE;
}

gboolean
kv_peer_handshake_check_server_auth (GBytes              *secret,
                                     const guint8         client_nonce[KV_PEER_NONCE_LEN],
                                     const KvPeerMessage *hello,
                                     const guint8         server_params[KV_PEER_AUTH_PARAMS_SIZE],
                                     const KvPeerMessage *auth,
                                     guint64              block_size,
                                     const guint8         namespace_digest[32],
                                     const char          *peer_name,
                                     GError             **error)
{
  /* The server proves it knows the secret too, over its own parameters. */
  if (!kv_peer_handshake_verify (secret, KV_PEER_ROLE_SERVER, client_nonce, hello->nonce,
                                 server_params, auth->mac))
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_AUTH_FAILED,
                   "the %s could not prove it knows the shared secret", peer_name);
      return FALSE;
    }
  if (auth->block_size != block_size ||
      !kv_peer_constant_time_equal (auth->namespace_digest, namespace_digest, 32))
    {
      g_set_error (error, KV_PEER_FRAME_ERROR_DOMAIN, KV_PEER_ERROR_NAMESPACE,
                   "the %s serves another cache namespace or chunk size", peer_name);
      return FALSE;
    }
  return TRUE;
}

/* Reads the shared secret: a regular file of the current user that no one
 * else may read or write (like an ssh key), at most 4 KiB, its bytes as
 * they are but for one trailing newline. */
GBytes *
kv_peer_secret_load (const char  *path,
                     GError     **error)
{
  g_autofree guint8 *data = NULL;
  struct stat st;
  gssize n;
  int fd;

  fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0)
    {
      int saved = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                   "Cannot open the peer secret file ‘%s’: %s", path, g_strerror (saved));
      return NULL;
    }
  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    {
      close (fd);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "The peer secret file ‘%s’ is not a regular file", path);
      return NULL;
    }
  if (st.st_uid != geteuid () || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    {
      close (fd);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "The peer secret file ‘%s’ must belong to this user and be readable by no "
                   "one else (chmod 600)", path);
      return NULL;
    }
  data = g_malloc (KV_PEER_MAX_SECRET_LEN + 1);
  do
    n = read (fd, data, KV_PEER_MAX_SECRET_LEN + 1);
  while (n < 0 && errno == EINTR);
  close (fd);
  if (n < 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                   "Cannot read the peer secret file ‘%s’", path);
      return NULL;
    }
  if (n > 0 && data[n - 1] == '\n')
    n--;
  if (n < KV_PEER_MIN_SECRET_LEN || n > KV_PEER_MAX_SECRET_LEN)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "The peer secret in ‘%s’ must be %u to %u bytes long",
                   path, KV_PEER_MIN_SECRET_LEN, KV_PEER_MAX_SECRET_LEN);
      return NULL;
    }
  return g_bytes_new_take (g_steal_pointer (&data), n);
}
