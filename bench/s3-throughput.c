/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <kvtier.h>

#include "bench-stack.h"
#include "bench-util.h"
#include "kv-chunk-format.h"
#include "kv-s3-sigv4.h"
#include "kv-s3-tier.h"
#include "s3-gateway.h"
#include "s3-own-framing.h"

/*
 * s3-throughput: how close the s3 tier gets to its object store.
 *
 * With no --endpoint it starts its own Ceph RADOS Gateway on a one-node
 * RADOS cluster (tests/s3/s3-gateway.c, memstore, loopback) and makes the
 * bucket; with --endpoint it uses that store and an existing --bucket
 * (credentials from --access-key/--secret-key or the environment). For
 * each chunk size, against the same store, in one run:
 *
 *  - the ceiling, the faster of two plain clients doing the same requests
 *    over the same number of connections, with none of the tier (only its
 *    SigV4 function signs the requests: curl 7.88's own signing gets
 *    UNSIGNED-PAYLOAD uploads wrong), PUTs of objects of the tier's size
 *    (the chunk plus its 4096-byte header) from one buffer per
 *    connection, then GETs of them into one buffer per connection:
 *      - libcurl's multi interface (what the tier uses for https); then
 *        HEADs of the same objects, not part of the ratio: the tier's load
 *        sends a HEAD (its lookup) and a GET per chunk, and the `#` line's
 *        "GET after HEAD" (the bytes over the two passes' time, not
 *        overlapped as the tier overlaps them) says what the HEADs cost on
 *        the same connections;
 *      - on a plain http endpoint, plain sockets with the HTTP/1.1 framing
 *        of bench/s3-own-framing.c: a PUT is one writev from the object's
 *        memory, a GET's body is read straight into it. Its CPU per GB,
 *        the framing floor, is about all that a client must spend on that
 *        machine (the kernel's TCP, the polls, the signing); it is printed
 *        beside the tier's;
 *  - store: chunks cascade from a KvTieringManager's primary to the tier
 *    (prepare_store, complete_store), until every PUT was answered;
 *  - load: a fresh manager on a fresh primary, over a fresh tier (its
 *    index of known chunks empty), looks every chunk up (RETRY until the
 *    HEADs are answered) and promotes it (GET straight into the slot),
 *    until every one landed;
 *  - load-indexed: the same on another fresh stack whose tier first looked
 *    every chunk up, untimed (its HEADs fill its index, as a process that
 *    stored the chunks itself or saw them once): every lookup of the timed
 *    pass is answered from the index, and a load is its GET alone.
 *
 *   store 256KiB s3: <x> GB/s = <y>% of ceiling <z> GB/s, cpu <c> s/GB (framing floor <f> s/GB)
 *
 * Stored slots carry their checksum, as KvHostDevice's copy into the
 * primary leaves it: the tier writes it into the record without reading
 * the payload (as bench/fs-throughput); --no-carried-checksum measures the
 * tier computing it instead.
 *
 * After an untimed warm-up of the ceiling's requests, each round measures
 * the ceiling, then the store, then the load; with
 * --rounds R (3) the median round by ratio is printed, each round as a `#`
 * line. GB/s counts payload bytes for the tier and object bytes for the
 * ceiling (what each moved). CPU is this process's (user + system, all
 * threads) per GB of payload; the gateway's is not counted. Every pass
 * writes objects of its own (new keys for the ceiling and the tier, each
 * round: overwriting costs a gateway more than creating), so the store
 * ends up holding about 2 x --total x --rounds per chunk size, summed
 * over the sizes (3 GiB per size with the defaults), in the memstore
 * OSD's memory for the bench's own gateway: --total 1GiB with three
 * rounds and two sizes is 12 GiB, more than a 23 GiB machine shared with
 * other work keeps (the OSD was killed for memory there). Every request
 * is bounded (REQUEST_TIMEOUT_MS), so a store that dies fails the run.
 *
 *   s3-throughput [--endpoint URL --bucket NAME] [--total SIZE]
 *                 [--chunk-sizes 256KiB,2MiB] [--connections N] [--rounds R]
 */

/* The most one request may take, the ceiling's as the tier's (its
 * deadline-ms). */
#define REQUEST_TIMEOUT_MS 60000

static char *opt_endpoint;
static char *opt_bucket;
static char *opt_access_key;
static char *opt_secret_key;
static char *opt_region;
static char *opt_total_str;
static char *opt_chunks;
static gint opt_connections = 16;
static gint opt_rounds = 3;
static gboolean opt_carry_checksum = TRUE;

static GOptionEntry entries[] = {
  { "endpoint", 0, 0, G_OPTION_ARG_STRING, &opt_endpoint, "An existing S3 endpoint (default: start a gateway)", "URL" },
  { "bucket", 0, 0, G_OPTION_ARG_STRING, &opt_bucket, "Its bucket (it must exist)", "NAME" },
  { "access-key", 0, 0, G_OPTION_ARG_STRING, &opt_access_key, "Access key (default: AWS_ACCESS_KEY_ID)", "KEY" },
  { "secret-key", 0, 0, G_OPTION_ARG_STRING, &opt_secret_key, "Secret key (default: AWS_SECRET_ACCESS_KEY)", "KEY" },
  { "region", 0, 0, G_OPTION_ARG_STRING, &opt_region, "Region (default us-east-1)", "NAME" },
  { "total", 0, 0, G_OPTION_ARG_STRING, &opt_total_str, "Bytes per pass (default 256MiB)", "SIZE" },
  { "chunk-sizes", 0, 0, G_OPTION_ARG_STRING, &opt_chunks, "Chunk sizes (default 256KiB,2MiB)", "LIST" },
  { "connections", 0, 0, G_OPTION_ARG_INT, &opt_connections, "Connections of the tier and of the ceiling (default 16)", "N" },
  { "rounds", 0, 0, G_OPTION_ARG_INT, &opt_rounds, "Rounds; the median by ratio is reported (default 3)", "R" },
  { "no-carried-checksum", 0, G_OPTION_FLAG_REVERSE, G_OPTION_ARG_NONE, &opt_carry_checksum,
    "Stored slots carry no checksum: the tier computes each one", NULL },
  { NULL }
};

typedef struct
{
  char *endpoint;
  char *bucket;
  char *access_key;
  char *secret_key;
  char *region;
} Store;

/* ---- the ceiling: plain libcurl ------------------------------------------ */

typedef struct
{
  CURL              *easy;
  struct curl_slist *headers;
  guint8            *buffer;      /* the object sent, or received */
  gsize              size;
  gsize              offset;
  gboolean           busy;
} Transfer;

static size_t
ceiling_read (char   *out,
              size_t  size,
              size_t  nitems,
              void   *data)
{
  Transfer *t = data;
  gsize n = MIN (size * nitems, t->size - t->offset);

  memcpy (out, t->buffer + t->offset, n);
  t->offset += n;
  return n;
}

static size_t
ceiling_write (char   *in,
               size_t  size,
               size_t  nmemb,
               void   *data)
{
  Transfer *t = data;
  gsize n = size * nmemb;

  if (t->offset + n > t->size)
    return 0;
  memcpy (t->buffer + t->offset, in, n);
  t->offset += n;
  return n;
}

/* The headers of a signed request (host, date, payload hash,
 * Authorization), as a curl list. */
static struct curl_slist *
signed_headers (const Store *store,
                const char  *method,
                const char  *path,
                gboolean     unsigned_payload)
{
  g_autoptr(GUri) uri = g_uri_parse (store->endpoint, G_URI_FLAGS_NONE, NULL);
  g_autofree char *host = g_uri_get_port (uri) > 0 ?
    g_strdup_printf ("%s:%d", g_uri_get_host (uri), g_uri_get_port (uri)) : g_strdup (g_uri_get_host (uri));
  const char *hash = unsigned_payload ? KV_S3_UNSIGNED_PAYLOAD : KV_S3_EMPTY_SHA256;
  g_autofree char *authorization = NULL;
  char date[KV_S3_AMZ_DATE_LEN];
  KvS3Header headers[3];
  struct curl_slist *list = NULL;
  KvS3Signer signer;

  kv_s3_amz_date (g_get_real_time () / G_USEC_PER_SEC, date);
  headers[0] = (KvS3Header) { "host", host };
  headers[1] = (KvS3Header) { "x-amz-content-sha256", hash };
  headers[2] = (KvS3Header) { "x-amz-date", date };
  kv_s3_signer_init (&signer, store->access_key, store->secret_key, store->region, "s3");
  authorization = kv_s3_signer_authorization (&signer, method, path, "", headers, 3, hash, date);
  kv_s3_signer_clear (&signer);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *line = g_strdup_printf ("%s: %s", headers[i].name, headers[i].value);

      list = curl_slist_append (list, line);
    }
  {
    g_autofree char *line = g_strdup_printf ("Authorization: %s", authorization);

    list = curl_slist_append (list, line);
  }
  return curl_slist_append (list, "Expect:");
}

static void
ceiling_start (CURLM       *multi,
               Transfer    *t,
               const Store *store,
               const char  *prefix,
               guint64      index,
               const char  *method)
{
  gboolean put = strcmp (method, "PUT") == 0;
  g_autofree char *path = g_strdup_printf ("/%s/%s/%" G_GUINT64_FORMAT, store->bucket, prefix, index);
  g_autofree char *url = g_strconcat (store->endpoint, path, NULL);

  g_clear_pointer (&t->headers, curl_slist_free_all);
  t->headers = signed_headers (store, method, path, put);
  t->offset = 0;
  t->busy = TRUE;
  /* the handle's other options are set once (a reset would free its
   * buffers, which the next request would allocate again) */
  curl_easy_setopt (t->easy, CURLOPT_URL, url);
  curl_easy_setopt (t->easy, CURLOPT_HTTPHEADER, t->headers);
  if (put)
    {
      curl_easy_setopt (t->easy, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt (t->easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t) t->size);
    }
  else if (strcmp (method, "HEAD") == 0)
    curl_easy_setopt (t->easy, CURLOPT_NOBODY, 1L);
  else
    curl_easy_setopt (t->easy, CURLOPT_HTTPGET, 1L);
  curl_multi_add_handle (multi, t->easy);
}

/* PUTs (then GETs, then HEADs) n objects of @size over opt_connections
 * connections; returns the seconds the pass took, FALSE when a request
 * failed. */
static gboolean
ceiling_pass (CURLM       *multi,
              Transfer    *transfers,
              const Store *store,
              const char  *prefix,
              guint64      n,
              const char  *method,
              double      *seconds)
{
  double start = bench_now_s ();
  guint64 next = 0, done = 0;
  gboolean ok = TRUE;

  while (done < n && ok)
    {
      CURLMsg *message;
      int running = 0, left = 0;

      for (gint i = 0; i < opt_connections && next < n; i++)
        if (!transfers[i].busy)
          ceiling_start (multi, &transfers[i], store, prefix, next++, method);
      curl_multi_perform (multi, &running);
      while ((message = curl_multi_info_read (multi, &left)) != NULL)
        if (message->msg == CURLMSG_DONE)
          {
            Transfer *t = NULL;
            long status = 0;

            curl_easy_getinfo (message->easy_handle, CURLINFO_PRIVATE, (char **) &t);
            curl_easy_getinfo (message->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            if (message->data.result != CURLE_OK || status != 200 ||
                (strcmp (method, "GET") == 0 && t->offset != t->size))
              {
                g_printerr ("ceiling %s: %s, HTTP %ld\n", method,
                            curl_easy_strerror (message->data.result), status);
                ok = FALSE;
              }
            curl_multi_remove_handle (multi, t->easy);
            t->busy = FALSE;
            done++;
          }
      if (done < n && ok)
        curl_multi_poll (multi, NULL, 0, 100, NULL);
    }
  *seconds = bench_now_s () - start;
  return ok;
}

/* ---- the framing floor: own HTTP/1.1 framing over plain sockets ---------- */

static char *
sign_lines (const char *method,
            const char *path,
            gboolean    put,
            gpointer    user_data)
{
  struct curl_slist *headers = signed_headers (user_data, method, path, put);
  GString *lines = g_string_new (NULL);

  for (struct curl_slist *h = headers; h != NULL; h = h->next)
    if (strcmp (h->data, "Expect:") != 0)
      g_string_append_printf (lines, "%s\r\n", h->data);
  curl_slist_free_all (headers);
  return g_string_free (lines, FALSE);
}

typedef struct
{
  double put_gbs;
  double put_cpu;
  double get_gbs;
  double get_cpu;
} FramingFloor;

/* PUTs then GETs @n objects of @object_size with the bench's own framing;
 * FALSE (and nothing measured) for an https endpoint. */
static gboolean
measure_framing_floor (const Store   *store,
                       const char    *pass,
                       gsize          object_size,
                       guint64        n,
                       FramingFloor  *floor_,
                       GError       **error)
{
  g_autoptr(GUri) uri = g_uri_parse (store->endpoint, G_URI_FLAGS_NONE, NULL);
  g_autofree char *prefix = g_strdup_printf ("/%s/s3-throughput-framing/%" G_GSIZE_FORMAT "/%s", store->bucket,
                                             object_size, pass);
  const char *host = uri != NULL ? g_uri_get_host (uri) : NULL;
  guint16 port = uri != NULL && g_uri_get_port (uri) > 0 ? g_uri_get_port (uri) : 80;
  double seconds, cpu;

  if (uri == NULL || g_strcmp0 (g_uri_get_scheme (uri), "http") != 0)
    return FALSE;
  if (!s3_own_framing_pass (host, port, opt_connections, sign_lines, (gpointer) store, prefix, "PUT", n,
                            object_size, REQUEST_TIMEOUT_MS, &seconds, &cpu, error))
    return FALSE;
  floor_->put_cpu = cpu / (n * object_size / 1e9);
  floor_->put_gbs = n * object_size / 1e9 / seconds;
  if (!s3_own_framing_pass (host, port, opt_connections, sign_lines, (gpointer) store, prefix, "GET", n,
                            object_size, REQUEST_TIMEOUT_MS, &seconds, &cpu, error))
    return FALSE;
  floor_->get_cpu = cpu / (n * object_size / 1e9);
  floor_->get_gbs = n * object_size / 1e9 / seconds;
  return TRUE;
}

/* The ceiling of one round, each direction, in GB/s of object bytes. */
static gboolean
measure_ceiling (const Store *store,
                 const char  *pass,
                 gsize        object_size,
                 guint64      n,
                 double      *put_gbs,
                 double      *get_gbs,
                 double      *put_cpu,
                 double      *get_cpu,
                 double      *head_get_gbs)
{
  CURLM *multi = curl_multi_init ();
  Transfer *transfers = g_new0 (Transfer, opt_connections);
  g_autofree char *prefix = g_strdup_printf ("s3-throughput-ceiling/%" G_GSIZE_FORMAT "/%s",
                                             object_size, pass);
  double put_s = 0, get_s = 0, head_s = 0;
  gboolean ok;

  curl_multi_setopt (multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long) opt_connections);
  curl_multi_setopt (multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) opt_connections);
  curl_multi_setopt (multi, CURLMOPT_MAXCONNECTS, (long) opt_connections);
  for (gint i = 0; i < opt_connections; i++)
    {
      CURL *easy = curl_easy_init ();

      curl_easy_setopt (easy, CURLOPT_PRIVATE, &transfers[i]);
      curl_easy_setopt (easy, CURLOPT_NOSIGNAL, 1L);
      /* a store that stops answering (its OSD killed for memory) fails
       * the pass instead of hanging it; the tier's jobs have the same
       * bound (deadline-ms) */
      curl_easy_setopt (easy, CURLOPT_CONNECTTIMEOUT_MS, (long) REQUEST_TIMEOUT_MS);
      curl_easy_setopt (easy, CURLOPT_TIMEOUT_MS, (long) REQUEST_TIMEOUT_MS);
      curl_easy_setopt (easy, CURLOPT_BUFFERSIZE, 512L * 1024);
      curl_easy_setopt (easy, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
      curl_easy_setopt (easy, CURLOPT_READFUNCTION, ceiling_read);
      curl_easy_setopt (easy, CURLOPT_READDATA, &transfers[i]);
      curl_easy_setopt (easy, CURLOPT_WRITEFUNCTION, ceiling_write);
      curl_easy_setopt (easy, CURLOPT_WRITEDATA, &transfers[i]);
      transfers[i].easy = easy;
      transfers[i].size = object_size;
      transfers[i].buffer = g_malloc (object_size);
      memset (transfers[i].buffer, 0x5a + i, object_size);
    }
  *put_cpu = bench_self_cpu_s ();
  ok = ceiling_pass (multi, transfers, store, prefix, n, "PUT", &put_s);
  *put_cpu = (bench_self_cpu_s () - *put_cpu) / (n * object_size / 1e9);
  *get_cpu = bench_self_cpu_s ();
  ok = ok && ceiling_pass (multi, transfers, store, prefix, n, "GET", &get_s);
  *get_cpu = (bench_self_cpu_s () - *get_cpu) / (n * object_size / 1e9);
  /* not the ceiling: the tier's load also HEADs each chunk (its lookup)
   * on the same connections; "GET after HEAD" says what that costs */
  ok = ok && ceiling_pass (multi, transfers, store, prefix, n, "HEAD", &head_s);
  for (gint i = 0; i < opt_connections; i++)
    {
      /* still in the multi when the pass stopped at a failure */
      if (transfers[i].busy)
        curl_multi_remove_handle (multi, transfers[i].easy);
      curl_easy_cleanup (transfers[i].easy);
      g_clear_pointer (&transfers[i].headers, curl_slist_free_all);
      g_free (transfers[i].buffer);
    }
  g_free (transfers);
  curl_multi_cleanup (multi);
  *put_gbs = n * object_size / 1e9 / put_s;
  *get_gbs = n * object_size / 1e9 / get_s;
  *head_get_gbs = n * object_size / 1e9 / (head_s + get_s);
  return ok;
}

/* ---- the tier through a manager ------------------------------------------ */

static guint64
loaded_chunks (KvSecondaryTier *tier)
{
  return kv_s3_tier_get_counter (KV_S3_TIER (tier), KV_S3_COUNTER_LOADED_CHUNKS);
}

static guint64
load_failures (KvSecondaryTier *tier)
{
  return kv_s3_tier_get_counter (KV_S3_TIER (tier), KV_S3_COUNTER_LOAD_FAILURES);
}

static gboolean
stack_init (BenchStack   *s,
            const Store  *store,
            const char   *namespace_,
            gsize         chunk,
            guint         n_slots,
            GError      **error)
{
  s->key_tag = 0x53;
  s->loaded_chunks = loaded_chunks;
  s->load_failures = load_failures;
  if (!bench_stack_init_primary (s, n_slots, chunk, 0x5a, error))
    return FALSE;
  if (opt_carry_checksum)
    bench_stack_carry_checksums (s);
  return bench_stack_add_tier (s, g_initable_new (KV_TYPE_S3_TIER, NULL, error,
                                                  "tier-type", "s3",
                                                  "primary", s->buffer,
                                                  "endpoint", store->endpoint,
                                                  "bucket", store->bucket,
                                                  "region", store->region,
                                                  "access-key", store->access_key,
                                                  "secret-key", store->secret_key,
                                                  "namespace", namespace_,
                                                  "max-connections", (guint) opt_connections,
                                                  "deadline-ms", REQUEST_TIMEOUT_MS,
                                                  NULL), error);
}

/* Untimed: every chunk looked up at the tier, so that its HEADs put
 * every one in the tier's index. */
static gboolean
warm_index (BenchStack *s,
            guint64     n_chunks)
{
  bench_stack_look_up_all (s, n_chunks, (gint64) REQUEST_TIMEOUT_MS * 1000);
  return kv_s3_tier_get_index_size (KV_S3_TIER (s->tier)) >= n_chunks;
}

typedef struct
{
  double gbs;
  double ceiling;
  double cpu;
  double floor_cpu;   /* the framing floor's, 0 when not measured */
} Sample;

static gint
sample_compare (gconstpointer a,
                gconstpointer b)
{
  const Sample *x = a, *y = b;
  double rx = x->gbs / x->ceiling, ry = y->gbs / y->ceiling;

  return (rx > ry) - (rx < ry);
}

/* The median round by ratio. */
static void
report (const char *what,
        const char *size,
        GArray     *samples)
{
  const Sample *m;

  g_array_sort (samples, sample_compare);
  m = &g_array_index (samples, Sample, samples->len / 2);
  g_print ("%s %s s3: %.2f GB/s = %.0f%% of ceiling %.2f GB/s, cpu %.3f s/GB", what, size, m->gbs,
           100 * m->gbs / m->ceiling, m->ceiling, m->cpu);
  if (m->floor_cpu > 0)
    g_print (" (framing floor %.3f s/GB)", m->floor_cpu);
  g_print ("\n");
}

static gboolean
run_chunk_size (const Store  *store,
                gsize         chunk,
                guint64       total,
                GError      **error)
{
  g_autofree char *name = bench_size_name (chunk);
  guint64 n_chunks = MAX (total / chunk, 16);
  double gb = n_chunks * chunk / 1e9;
  guint primary_slots = MIN (n_chunks, MAX ((256u << 20) / chunk, 16));
  guint batch = MAX ((16u << 20) / chunk, 1);
  g_autoptr(GArray) stores = g_array_new (FALSE, FALSE, sizeof (Sample));
  g_autoptr(GArray) loads = g_array_new (FALSE, FALSE, sizeof (Sample));
  g_autoptr(GArray) indexed = g_array_new (FALSE, FALSE, sizeof (Sample));

  /* untimed: a bucket's first requests (index shards, pools) and the
   * first connections are slower than the rest, and would go to the
   * ceiling, which runs first */
  {
    double put_gbs, get_gbs, put_cpu, get_cpu, head_get_gbs;

    if (!measure_ceiling (store, "warm-up", chunk + KV_CHUNK_HEADER_SIZE, MIN (n_chunks, 64), &put_gbs,
                          &get_gbs, &put_cpu, &get_cpu, &head_get_gbs))
      {
        g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "the warm-up requests failed");
        return FALSE;
      }
  }
  for (gint round = 0; round < opt_rounds; round++)
    {
      double put_ceiling, get_ceiling, put_cpu, get_cpu, head_get, t, c;
      FramingFloor framing = { 0 };
      BenchStack s = { 0 };
      Sample sample;
      guint64 n_done;

      g_autofree char *pass = g_strdup_printf ("round-%d", round);

      if (!measure_ceiling (store, pass, chunk + KV_CHUNK_HEADER_SIZE, n_chunks, &put_ceiling,
                            &get_ceiling, &put_cpu, &get_cpu, &head_get))
        {
          g_set_error (error, KV_TIER_ERROR, KV_TIER_ERROR_FAILED, "no ceiling measured");
          return FALSE;
        }
      g_print ("#   round %d libcurl: PUT %.2f GB/s, cpu %.3f s/GB; GET %.2f GB/s, cpu %.3f s/GB "
               "(%d connections); GET after HEAD %.2f GB/s\n", round + 1, put_ceiling, put_cpu,
               get_ceiling, get_cpu, opt_connections, head_get);
      {
        g_autoptr(GError) local_error = NULL;

        if (measure_framing_floor (store, pass, chunk + KV_CHUNK_HEADER_SIZE, n_chunks, &framing, &local_error))
          {
            g_print ("#   round %d own framing: PUT %.2f GB/s, cpu %.3f s/GB; GET %.2f GB/s, cpu %.3f s/GB "
                     "(plain sockets, no copies)\n", round + 1, framing.put_gbs, framing.put_cpu,
                     framing.get_gbs, framing.get_cpu);
            put_ceiling = MAX (put_ceiling, framing.put_gbs);
            get_ceiling = MAX (get_ceiling, framing.get_gbs);
          }
        else if (local_error != NULL)
          {
            g_propagate_prefixed_error (error, g_steal_pointer (&local_error), "framing floor: ");
            return FALSE;
          }
      }

      if (!stack_init (&s, store, pass, chunk, primary_slots, error))
        {
          bench_stack_clear (&s);
          return FALSE;
        }
      c = bench_self_cpu_s ();
      t = bench_stack_run_store (&s, 0, n_chunks, batch);
      c = bench_self_cpu_s () - c;
      n_done = kv_s3_tier_get_counter (KV_S3_TIER (s.tier), KV_S3_COUNTER_STORED_CHUNKS);
      bench_shortfall (n_done, n_chunks, "stored");
      sample = (Sample) { gb / t, put_ceiling, c / gb, framing.put_cpu };
      g_print ("#   round %d: store %.2f GB/s (%.0f%%), cpu %.3f s/GB\n", round + 1, sample.gbs,
               100 * sample.gbs / sample.ceiling, sample.cpu);
      g_array_append_val (stores, sample);
      bench_stack_clear (&s);

      if (!stack_init (&s, store, pass, chunk, primary_slots, error))
        {
          bench_stack_clear (&s);
          return FALSE;
        }
      t = bench_stack_timed_load (&s, n_chunks, batch, "loaded", &c);
      sample = (Sample) { gb / t, get_ceiling, c / gb, framing.get_cpu };
      g_print ("#   round %d: load %.2f GB/s (%.0f%%; %.0f%% of GET after HEAD), cpu %.3f s/GB\n",
               round + 1, sample.gbs, 100 * sample.gbs / sample.ceiling, 100 * sample.gbs / head_get,
               sample.cpu);
      g_array_append_val (loads, sample);
      bench_stack_clear (&s);

      if (!stack_init (&s, store, pass, chunk, primary_slots, error))
        {
          bench_stack_clear (&s);
          return FALSE;
        }
      if (!warm_index (&s, n_chunks))
        g_print ("# load-indexed: only %u of %" G_GUINT64_FORMAT " chunks in the index\n",
                 kv_s3_tier_get_index_size (KV_S3_TIER (s.tier)), n_chunks);
      {
        KvS3Tier *tier = KV_S3_TIER (s.tier);
        guint64 requests = kv_s3_tier_get_counter (tier, KV_S3_COUNTER_REQUESTS);
        guint64 hits = kv_s3_tier_get_counter (tier, KV_S3_COUNTER_INDEX_HITS);

        t = bench_stack_timed_load (&s, n_chunks, batch, "loaded (index warm)", &c);
        requests = kv_s3_tier_get_counter (tier, KV_S3_COUNTER_REQUESTS) - requests;
        hits = kv_s3_tier_get_counter (tier, KV_S3_COUNTER_INDEX_HITS) - hits;
        sample = (Sample) { gb / t, get_ceiling, c / gb, framing.get_cpu };
        g_print ("#   round %d: load-indexed %.2f GB/s (%.0f%%), cpu %.3f s/GB; %" G_GUINT64_FORMAT
                 " lookups from the index, %.2f requests a chunk\n", round + 1, sample.gbs,
                 100 * sample.gbs / sample.ceiling, sample.cpu, hits, (double) requests / n_chunks);
      }
      g_array_append_val (indexed, sample);
      bench_stack_clear (&s);
    }
  report ("store", name, stores);
  report ("load", name, loads);
  report ("load-indexed", name, indexed);
  return TRUE;
}

/* Makes the bucket of the bench's own gateway (a plain PUT). */
static gboolean
create_bucket (const Store  *store,
               GError      **error)
{
  g_autofree char *path = g_strdup_printf ("/%s", store->bucket);
  g_autofree char *url = g_strconcat (store->endpoint, path, NULL);
  struct curl_slist *headers = signed_headers (store, "PUT", path, FALSE);
  CURL *easy = curl_easy_init ();
  long status = 0;
  CURLcode result;

  curl_easy_setopt (easy, CURLOPT_URL, url);
  curl_easy_setopt (easy, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt (easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt (easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt (easy, CURLOPT_TIMEOUT_MS, (long) REQUEST_TIMEOUT_MS);
  result = curl_easy_perform (easy);
  curl_easy_getinfo (easy, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup (easy);
  curl_slist_free_all (headers);
  if (result != CURLE_OK || status != 200)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "PUT %s: %s, HTTP %ld", url,
                   curl_easy_strerror (result), status);
      return FALSE;
    }
  return TRUE;
}

int
main (int argc, char **argv)
{
  g_autoptr(GOptionContext) context = g_option_context_new ("- s3 tier throughput");
  g_autoptr(GError) error = NULL;
  g_autoptr(S3Gateway) gateway = NULL;
  g_auto(GStrv) sizes = NULL;
  guint64 total = 256ULL << 20;
  Store store = { 0 };
  int status = 0;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  if ((opt_total_str != NULL && !bench_parse_size (opt_total_str, &total)) || opt_connections < 1 ||
      opt_rounds < 1)
    {
      g_printerr ("Invalid --total, --connections or --rounds\n");
      return 2;
    }
  curl_global_init (CURL_GLOBAL_DEFAULT);
  store.region = g_strdup (opt_region != NULL ? opt_region : "us-east-1");
  if (opt_endpoint != NULL)
    {
      store.endpoint = g_strdup (opt_endpoint);
      store.bucket = g_strdup (opt_bucket);
      store.access_key = g_strdup (opt_access_key != NULL ? opt_access_key : g_getenv ("AWS_ACCESS_KEY_ID"));
      store.secret_key = g_strdup (opt_secret_key != NULL ? opt_secret_key : g_getenv ("AWS_SECRET_ACCESS_KEY"));
      if (store.bucket == NULL || store.access_key == NULL || store.secret_key == NULL)
        {
          g_printerr ("--endpoint needs --bucket and credentials (--access-key and --secret-key, "
                      "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)\n");
          return 2;
        }
    }
  else
    {
      gateway = s3_gateway_start (&error);
      if (gateway == NULL)
        {
          g_printerr ("Cannot start a Ceph RADOS Gateway: %s\n", error->message);
          return 1;
        }
      store.endpoint = g_strdup (gateway->endpoint);
      store.bucket = g_strdup ("s3-throughput");
      store.access_key = g_strdup (gateway->access_key);
      store.secret_key = g_strdup (gateway->secret_key);
      if (!create_bucket (&store, &error))
        {
          g_printerr ("%s\n", error->message);
          return 1;
        }
    }
  g_print ("# %s bucket %s%s, %" G_GUINT64_FORMAT " MiB per pass, %d connections\n",
           store.endpoint, store.bucket, gateway != NULL ? " (own Ceph RADOS Gateway, memstore)" : "",
           total >> 20, opt_connections);
  sizes = g_strsplit (opt_chunks != NULL ? opt_chunks : "256KiB,2MiB", ",", -1);
  for (guint i = 0; sizes[i] != NULL && status == 0; i++)
    {
      guint64 chunk;

      if (!bench_parse_size (sizes[i], &chunk) || chunk % 4096 != 0)
        {
          g_printerr ("Invalid chunk size %s\n", sizes[i]);
          status = 2;
        }
      else if (!run_chunk_size (&store, chunk, total, &error))
        {
          g_printerr ("%s\n", error->message);
          status = 1;
        }
    }
  if (status == 0 && bench_shortfall_seen ())
    status = 1;
  g_free (store.endpoint);
  g_free (store.bucket);
  g_free (store.access_key);
  g_free (store.secret_key);
  g_free (store.region);
  return status;
}
