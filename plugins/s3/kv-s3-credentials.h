/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Where the s3 tier's credentials come from, first found wins: the tier's
 * own settings, the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN), or a credentials file in AWS's format (the
 * credentials-file setting, else AWS_SHARED_CREDENTIALS_FILE, else
 * ~/.aws/credentials when it exists) whose mode is checked like the peer
 * secret's. */

/* The longest credentials file read. */
#define KV_S3_MAX_CREDENTIALS_FILE (64 * 1024)

typedef struct
{
  char *access_key;
  char *secret_key;
  char *session_token;   /* nullable */
  char *source;          /* "the tier's settings", "the environment", "/path [profile]" */
} KvS3Credentials;

/* Resolves the credentials; @access_key... are the tier's settings
 * (nullable), @file and @profile its credentials-file and
 * credentials-profile (nullable). Reads the environment and at most one
 * file; no network. */
gboolean kv_s3_credentials_resolve (const char       *access_key,
                                    const char       *secret_key,
                                    const char       *session_token,
                                    const char       *file,
                                    const char       *profile,
                                    KvS3Credentials  *out,
                                    GError          **error);
void     kv_s3_credentials_clear   (KvS3Credentials  *credentials);

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (KvS3Credentials, kv_s3_credentials_clear)

G_END_DECLS
