/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "kv-peer-frame.h"

G_BEGIN_DECLS

/* The peer handshake's cryptography (doc/protocol.md, "Handshake"):
 * nonces from the kernel's CSPRNG, HMAC-SHA256 proofs over both nonces and
 * the session parameters, compared in constant time. */

/* The minimum length of a shared secret, in bytes. */
#define KV_PEER_MIN_SECRET_LEN 16
#define KV_PEER_MAX_SECRET_LEN 4096

typedef enum {
  KV_PEER_ROLE_CLIENT,
  KV_PEER_ROLE_SERVER,
} KvPeerRole;

gboolean kv_peer_random_nonce      (guint8          nonce[KV_PEER_NONCE_LEN],
                                    GError        **error);
void     kv_peer_handshake_mac     (GBytes         *secret,
                                    KvPeerRole      role,
                                    const guint8    client_nonce[KV_PEER_NONCE_LEN],
                                    const guint8    server_nonce[KV_PEER_NONCE_LEN],
                                    const guint8    params[KV_PEER_AUTH_PARAMS_SIZE],
                                    guint8          mac[KV_PEER_MAC_LEN]);
gboolean kv_peer_handshake_verify  (GBytes         *secret,
                                    KvPeerRole      role,
                                    const guint8    client_nonce[KV_PEER_NONCE_LEN],
                                    const guint8    server_nonce[KV_PEER_NONCE_LEN],
                                    const guint8    params[KV_PEER_AUTH_PARAMS_SIZE],
                                    const guint8    mac[KV_PEER_MAC_LEN]);
gboolean kv_peer_constant_time_equal (const guint8 *a,
                                      const guint8 *b,
                                      gsize         len);
GBytes  *kv_peer_secret_load       (const char     *path,
                                    GError        **error);

/* The client's side of the handshake, between its own reads and writes
 * (the peer tier's client and the event subscriber both connect as
 * clients). @peer_name says what the other side is in messages ("peer",
 * "node").
 *
 * kv_peer_handshake_append_client_auth() checks the server's HELLO (its
 * protocol version, else KV_PEER_ERROR_VERSION) and replaces @out's
 * contents with the client's AUTH frame: the session parameters of
 * @block_size and @namespace_digest and the client's proof over them.
 *
 * kv_peer_handshake_check_server_auth() checks the server's AUTH, whose
 * body starts at @server_params: its proof over its own parameters
 * (KV_PEER_ERROR_AUTH_FAILED) and that it serves the same namespace and
 * chunk size (KV_PEER_ERROR_NAMESPACE). The limits it states are the
 * caller's to check. */
gboolean kv_peer_handshake_append_client_auth (GByteArray          *out,
                                               GBytes              *secret,
                                               const guint8         client_nonce[KV_PEER_NONCE_LEN],
                                               const KvPeerMessage *hello,
                                               guint64              block_size,
                                               const guint8         namespace_digest[32],
                                               const char          *peer_name,
                                               GError             **error);
gboolean kv_peer_handshake_check_server_auth  (GBytes              *secret,
                                               const guint8         client_nonce[KV_PEER_NONCE_LEN],
                                               const KvPeerMessage *hello,
                                               const guint8         server_params[KV_PEER_AUTH_PARAMS_SIZE],
                                               const KvPeerMessage *auth,
                                               guint64              block_size,
                                               const guint8         namespace_digest[32],
                                               const char          *peer_name,
                                               GError             **error);

G_END_DECLS
