/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "bench-util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* "256KiB", "2MiB", "1GiB", "4096" (also K, M, G) → bytes; FALSE for
 * anything else or zero. */
gboolean
bench_parse_size (const char *text,
                  guint64    *out)
{
  char *end = NULL;
  gdouble value = g_ascii_strtod (text, &end);
  guint64 unit = 1;

  if (end == text || !(value > 0))
    return FALSE;
  if (g_ascii_strcasecmp (end, "KiB") == 0 || g_ascii_strcasecmp (end, "K") == 0)
    unit = G_GUINT64_CONSTANT (1) << 10;
  else if (g_ascii_strcasecmp (end, "MiB") == 0 || g_ascii_strcasecmp (end, "M") == 0)
    unit = G_GUINT64_CONSTANT (1) << 20;
  else if (g_ascii_strcasecmp (end, "GiB") == 0 || g_ascii_strcasecmp (end, "G") == 0)
    unit = G_GUINT64_CONSTANT (1) << 30;
  else if (*end != '\0')
    return FALSE;
  if (value * unit >= 18e18)
    return FALSE;
  *out = (guint64) (value * unit);
  return *out > 0;
}

char *
bench_size_name (guint64 bytes)
{
  if (bytes % (G_GUINT64_CONSTANT (1) << 20) == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT "MiB", bytes >> 20);
  if (bytes % 1024 == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT "KiB", bytes >> 10);
  return g_strdup_printf ("%" G_GUINT64_FORMAT "B", bytes);
}

gdouble
bench_now_s (void)
{
  return g_get_monotonic_time () / 1e6;
}

/* User + system CPU of @who (getrusage()). */
static gdouble
cpu_s (int who)
{
  struct rusage usage;

  getrusage (who, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 +
         usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6;
}

/* User + system CPU of this process, all threads. */
gdouble
bench_self_cpu_s (void)
{
  return cpu_s (RUSAGE_SELF);
}

/* User + system CPU of the calling thread. */
gdouble
bench_thread_cpu_s (void)
{
  return cpu_s (RUSAGE_THREAD);
}

/* User + system CPU of a live process (/proc/PID/stat); 0 if it is gone. */
gdouble
bench_process_cpu_s (GPid pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d/stat", (int) pid);
  g_autofree char *stat = NULL;
  g_auto(GStrv) fields = NULL;
  const char *end;

  if (!g_file_get_contents (path, &stat, NULL, NULL) || (end = strrchr (stat, ')')) == NULL ||
      end[1] == '\0')
    return 0;
  fields = g_strsplit (end + 2, " ", -1);
  if (g_strv_length (fields) < 13)
    return 0;
  /* utime and stime are fields 14 and 15, the 12th and 13th after ')' */
  return (g_ascii_strtod (fields[11], NULL) + g_ascii_strtod (fields[12], NULL)) / sysconf (_SC_CLK_TCK);
}

static int
compare_doubles (const void *a,
                 const void *b)
{
  gdouble x = **(const gdouble * const *) a, y = **(const gdouble * const *) b;

  return x < y ? -1 : x > y;
}

/* The index of the median of @values (the upper one of an even count). */
guint
bench_median_index (const gdouble *values,
                    guint          n)
{
  g_autofree const gdouble **sorted = g_new (const gdouble *, n);

  g_return_val_if_fail (n > 0, 0);
  for (guint i = 0; i < n; i++)
    sorted[i] = &values[i];
  qsort (sorted, n, sizeof *sorted, compare_doubles);
  return (guint) (sorted[n / 2] - values);
}

gdouble
bench_median (const gdouble *values,
              guint          n)
{
  return values[bench_median_index (values, n)];
}
