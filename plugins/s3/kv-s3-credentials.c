/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-s3-credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gio/gio.h>

static void
wipe_free (char *s)
{
  if (s != NULL)
    memset (s, 0, strlen (s));
  g_free (s);
}

void
kv_s3_credentials_clear (KvS3Credentials *credentials)
{
  g_clear_pointer (&credentials->access_key, g_free);
  g_clear_pointer (&credentials->secret_key, wipe_free);
  g_clear_pointer (&credentials->session_token, wipe_free);
  g_clear_pointer (&credentials->source, g_free);
}

static gboolean
set (const char      *access_key,
     const char      *secret_key,
     const char      *session_token,
     const char      *source,
     KvS3Credentials *out)
{
  out->access_key = g_strdup (access_key);
  out->secret_key = g_strdup (secret_key);
  out->session_token = session_token != NULL && session_token[0] != '\0' ? g_strdup (session_token) : NULL;
  out->source = g_strdup (source);
  return TRUE;
}

static gboolean
is_set (const char *s)
{
  return s != NULL && s[0] != '\0';
}

/* Reads a credentials file: a regular file of this user that no one else
 * may read or write (it holds a secret, as an ssh key), at most
 * KV_S3_MAX_CREDENTIALS_FILE bytes. */
static char *
read_private_file (const char  *path,
                   gsize       *out_len,
                   GError     **error)
{
  g_autofree char *data = NULL;
  struct stat st;
  gsize len = 0;
  int fd;

  fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0)
    {
      int saved = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                   "Cannot open the s3 credentials file ‘%s’: %s", path, g_strerror (saved));
      return NULL;
    }
  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    {
      close (fd);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "The s3 credentials file ‘%s’ is not a regular file", path);
      return NULL;
    }
  if (st.st_uid != geteuid () || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    {
      close (fd);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                   "The s3 credentials file ‘%s’ must belong to this user and be readable by no "
                   "one else (chmod 600)", path);
      return NULL;
    }
  data = g_malloc (KV_S3_MAX_CREDENTIALS_FILE + 1);
  for (;;)
    {
      gssize n = read (fd, data + len, KV_S3_MAX_CREDENTIALS_FILE + 1 - len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int saved = errno;

          close (fd);
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                       "Cannot read the s3 credentials file ‘%s’: %s", path, g_strerror (saved));
          return NULL;
        }
      if (n == 0)
        break;
      len += n;
      if (len > KV_S3_MAX_CREDENTIALS_FILE)
        {
          close (fd);
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                       "The s3 credentials file ‘%s’ is longer than %u bytes", path,
                       KV_S3_MAX_CREDENTIALS_FILE);
          return NULL;
        }
    }
  close (fd);
  data[len] = '\0';
  *out_len = len;
  return g_steal_pointer (&data);
}

static gboolean
from_file (const char       *path,
           const char       *profile,
           KvS3Credentials  *out,
           GError          **error)
{
  g_autoptr(GKeyFile) keys = g_key_file_new ();
  g_autoptr(GError) local_error = NULL;
  g_autofree char *data = NULL;
  g_autofree char *access_key = NULL;
  g_autofree char *secret_key = NULL;
  g_autofree char *token = NULL;
  g_autofree char *source = NULL;
  gsize len = 0;

  data = read_private_file (path, &len, error);
  if (data == NULL)
    return FALSE;
  if (!g_key_file_load_from_data (keys, data, len, G_KEY_FILE_NONE, &local_error))
    {
      memset (data, 0, len);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "The s3 credentials file ‘%s’ does not parse: %s", path, local_error->message);
      return FALSE;
    }
  memset (data, 0, len);
  if (!g_key_file_has_group (keys, profile))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   "The s3 credentials file ‘%s’ has no [%s] profile", path, profile);
      return FALSE;
    }
  access_key = g_key_file_get_string (keys, profile, "aws_access_key_id", NULL);
  secret_key = g_key_file_get_string (keys, profile, "aws_secret_access_key", NULL);
  token = g_key_file_get_string (keys, profile, "aws_session_token", NULL);
  if (!is_set (access_key) || !is_set (secret_key))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "The [%s] profile of the s3 credentials file ‘%s’ needs aws_access_key_id "
                   "and aws_secret_access_key", profile, path);
      wipe_free (g_steal_pointer (&secret_key));
      wipe_free (g_steal_pointer (&token));
      return FALSE;
    }
  source = g_strdup_printf ("%s [%s]", path, profile);
  set (g_strstrip (access_key), g_strstrip (secret_key), token != NULL ? g_strstrip (token) : NULL,
       source, out);
  wipe_free (g_steal_pointer (&secret_key));
  wipe_free (g_steal_pointer (&token));
  return TRUE;
}

gboolean
kv_s3_credentials_resolve (const char       *access_key,
                           const char       *secret_key,
                           const char       *session_token,
                           const char       *file,
                           const char       *profile,
                           KvS3Credentials  *out,
                           GError          **error)
{
  const char *env_access = g_getenv ("AWS_ACCESS_KEY_ID");
  const char *env_secret = g_getenv ("AWS_SECRET_ACCESS_KEY");
  const char *env_file = g_getenv ("AWS_SHARED_CREDENTIALS_FILE");
  g_autofree char *home_file = NULL;

  memset (out, 0, sizeof *out);
  if (!is_set (profile))
    profile = "default";

  /* the tier's own settings */
  if (is_set (access_key) || is_set (secret_key))
    {
      if (!is_set (access_key) || !is_set (secret_key))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "The s3 tier's %s is set but not its %s: set both, or neither (the "
                       "environment or a credentials file then)",
                       is_set (access_key) ? "access-key" : "secret-key",
                       is_set (access_key) ? "secret-key" : "access-key");
          return FALSE;
        }
      return set (access_key, secret_key, session_token, "the tier's settings", out);
    }
  if (is_set (session_token))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "The s3 tier's session-token needs its access-key and secret-key");
      return FALSE;
    }

  /* the environment */
  if (is_set (env_access) || is_set (env_secret))
    {
      if (!is_set (env_access) || !is_set (env_secret))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "%s is set in the environment but not %s",
                       is_set (env_access) ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                       is_set (env_access) ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
          return FALSE;
        }
      return set (env_access, env_secret, g_getenv ("AWS_SESSION_TOKEN"), "the environment", out);
    }

  /* a credentials file: one named is required to be there */
  if (is_set (file))
    return from_file (file, profile, out, error);
  if (is_set (env_file))
    return from_file (env_file, profile, out, error);
  /* $HOME as the AWS tools read it (g_get_home_dir() caches it) */
  home_file = g_build_filename (is_set (g_getenv ("HOME")) ? g_getenv ("HOME") : g_get_home_dir (),
                                ".aws", "credentials", NULL);
  if (g_file_test (home_file, G_FILE_TEST_EXISTS))
    return from_file (home_file, profile, out, error);

  g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
               "The s3 tier has no credentials: set access-key and secret-key, or "
               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file "
               "(credentials-file, AWS_SHARED_CREDENTIALS_FILE, or %s)", home_file);
  return FALSE;
}
