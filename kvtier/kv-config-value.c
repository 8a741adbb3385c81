/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "kv-config-value-private.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "kv-config.h"
#include "kv-secondary-tier.h"

/* Property values from configuration text and GVariants, and back: the
 * one place that knows how a GParamSpec's value is written, read and
 * range-checked. KvConfig and KvTierRegistry both use it. */

#define KIB G_GUINT64_CONSTANT (1024)

gboolean
kv_config_value_is_size (GParamSpec *pspec)
{
  return g_str_equal (pspec->name, "size") ||
         g_str_has_suffix (pspec->name, "-size") ||
         g_str_has_suffix (pspec->name, "-bytes");
}

static gboolean
value_type_supported (GType type)
{
  switch (G_TYPE_FUNDAMENTAL (type))
    {
    case G_TYPE_BOOLEAN:
    case G_TYPE_INT:
    case G_TYPE_UINT:
    case G_TYPE_LONG:
    case G_TYPE_ULONG:
    case G_TYPE_INT64:
    case G_TYPE_UINT64:
    case G_TYPE_FLOAT:
    case G_TYPE_DOUBLE:
    case G_TYPE_ENUM:
    case G_TYPE_FLAGS:
    case G_TYPE_STRING:
      return TRUE;
    default:
      return type == G_TYPE_STRV;
    }
}

/* A tier class written in Python or JavaScript cannot set the C class
 * field `medium`: its configuration may name the medium instead. */
static gboolean
tier_class_lacks_medium (GType type)
{
  g_autoptr(GTypeClass) klass = NULL;

  if (!g_type_is_a (type, KV_TYPE_SECONDARY_TIER))
    return FALSE;
  klass = g_type_class_ref (type);
  return KV_SECONDARY_TIER_CLASS (klass)->medium == KV_MEDIUM_UNSPECIFIED;
}

gboolean
kv_config_value_is_configurable (GParamSpec *pspec,
                                 GType       type)
{
  /* set by the code that makes the tier (metric-label: by the manager,
   * which would overwrite a configured one) */
  static const char * const managed[] = {
    "primary", "tier-type", "backpressure-detector", "medium", "metric-label", NULL
  };

  if ((pspec->flags & G_PARAM_WRITABLE) == 0 || (pspec->flags & G_PARAM_DEPRECATED) != 0)
    return FALSE;
  if (g_strv_contains (managed, pspec->name) &&
      !(g_str_equal (pspec->name, "medium") && tier_class_lacks_medium (type)))
    return FALSE;
  return value_type_supported (G_PARAM_SPEC_VALUE_TYPE (pspec));
}

gboolean
kv_config_value_parse_size (const char  *text,
                      guint64     *out_size,
                      GError     **error)
{
  static const struct { const char *unit; guint64 mult; } units[] = {
    { "", 1 }, { "b", 1 }, { "kib", KIB }, { "mib", KIB * KIB },
    { "gib", KIB * KIB * KIB }, { "tib", KIB * KIB * KIB * KIB },
  };
  const char *p = text;
  guint64 whole = 0, frac = 0, frac_div = 1, mult = 0;
  g_autofree char *unit = NULL;
  gboolean digits = FALSE;

  while (g_ascii_isspace (*p))
    p++;
  for (; g_ascii_isdigit (*p); p++)
    {
      if (whole > (G_MAXUINT64 - 9) / 10)
        goto overflow;
      whole = whole * 10 + (guint64) (*p - '0');
      digits = TRUE;
    }
  if (*p == '.')
    {
      /* Six decimals at most keep frac × mult within 64 bits. */
      for (p++; g_ascii_isdigit (*p); p++)
        {
          if (frac_div >= 1000000)
            goto bad;
          frac = frac * 10 + (guint64) (*p - '0');
          frac_div *= 10;
          digits = TRUE;
        }
    }
  if (!digits)
    goto bad;
  while (g_ascii_isspace (*p))
    p++;
  unit = g_ascii_strdown (p, -1);
  g_strchomp (unit);

  for (guint i = 0; i < G_N_ELEMENTS (units); i++)
    if (g_str_equal (unit, units[i].unit))
      mult = units[i].mult;
  if (mult == 0)
    goto bad;

  if (whole > G_MAXUINT64 / mult)
    goto overflow;
  /* A fraction must come out as whole bytes: 1.5KiB yes, 1.5 no. */
  if ((frac * mult) % frac_div != 0)
    {
      g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                   "'%s' is not a whole number of bytes", text);
      return FALSE;
    }
  if (whole * mult > G_MAXUINT64 - frac * mult / frac_div)
    goto overflow;
  *out_size = whole * mult + frac * mult / frac_div;
  return TRUE;

bad:
  g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
               "'%s' is not a size (a number with an optional unit: B, KiB,"
               " MiB, GiB, TiB)", text);
  return FALSE;

overflow:
  g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
               "'%s' is too large", text);
  return FALSE;
}

char *
kv_config_value_format_size (guint64 size)
{
  static const char * const units[] = { "TiB", "GiB", "MiB", "KiB" };
  guint64 mult = KIB * KIB * KIB * KIB;

  if (size == 0)
    return g_strdup ("0");
  for (guint i = 0; i < G_N_ELEMENTS (units); i++, mult /= KIB)
    if (size % mult == 0)
      return g_strdup_printf ("%" G_GUINT64_FORMAT "%s", size / mult, units[i]);
  return g_strdup_printf ("%" G_GUINT64_FORMAT, size);
}

/* The shortest text that reads back as exactly @d. */
static char *
format_double (gdouble d)
{
  char buf[G_ASCII_DTOSTR_BUF_SIZE];

  for (int precision = 1; precision <= 17; precision++)
    {
      char format[8];

      g_snprintf (format, sizeof format, "%%.%dg", precision);
      g_ascii_formatd (buf, sizeof buf, format, d);
      if (g_ascii_strtod (buf, NULL) == d)
        break;
    }
  return g_strdup (buf);
}

static char *
enum_nicks (GType type)
{
  GString *s = g_string_new (NULL);

  if (G_TYPE_IS_ENUM (type))
    {
      g_autoptr(GEnumClass) klass = g_type_class_ref (type);

      for (guint i = 0; i < klass->n_values; i++)
        g_string_append_printf (s, "%s%s", i > 0 ? ", " : "", klass->values[i].value_nick);
    }
  else
    {
      g_autoptr(GFlagsClass) klass = g_type_class_ref (type);

      for (guint i = 0; i < klass->n_values; i++)
        g_string_append_printf (s, "%s%s", i > 0 ? ", " : "", klass->values[i].value_nick);
    }
  return g_string_free (s, FALSE);
}

static gboolean
out_of_range (const char  *text,
              const char  *min,
              const char  *max,
              GError     **error)
{
  g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
               "%s is out of range (minimum %s, maximum %s)", text, min, max);
  return FALSE;
}

/* Checks an integer against the pspec's range and stores it. */
static gboolean
set_integer (GParamSpec  *pspec,
             gboolean     negative,
             guint64      magnitude,
             const char  *text,
             GValue      *value,
             GError     **error)
{
  gint64 smin = 0, smax = 0;
  guint64 umin = 0, umax = 0;
  gboolean is_signed = TRUE;
  gint64 sval = 0;

  switch (G_TYPE_FUNDAMENTAL (G_PARAM_SPEC_VALUE_TYPE (pspec)))
    {
    case G_TYPE_INT:
      smin = G_PARAM_SPEC_INT (pspec)->minimum;
      smax = G_PARAM_SPEC_INT (pspec)->maximum;
      break;
    case G_TYPE_LONG:
      smin = G_PARAM_SPEC_LONG (pspec)->minimum;
      smax = G_PARAM_SPEC_LONG (pspec)->maximum;
      break;
    case G_TYPE_INT64:
      smin = G_PARAM_SPEC_INT64 (pspec)->minimum;
      smax = G_PARAM_SPEC_INT64 (pspec)->maximum;
      break;
    case G_TYPE_UINT:
      is_signed = FALSE;
      umin = G_PARAM_SPEC_UINT (pspec)->minimum;
      umax = G_PARAM_SPEC_UINT (pspec)->maximum;
      break;
    case G_TYPE_ULONG:
      is_signed = FALSE;
      umin = G_PARAM_SPEC_ULONG (pspec)->minimum;
      umax = G_PARAM_SPEC_ULONG (pspec)->maximum;
      break;
    case G_TYPE_UINT64:
      is_signed = FALSE;
      umin = G_PARAM_SPEC_UINT64 (pspec)->minimum;
      umax = G_PARAM_SPEC_UINT64 (pspec)->maximum;
      break;
    default:
      g_assert_not_reached ();
    }

  if (is_signed)
    {
      g_autofree char *lo = g_strdup_printf ("%" G_GINT64_FORMAT, smin);
      g_autofree char *hi = g_strdup_printf ("%" G_GINT64_FORMAT, smax);

      if (negative ? magnitude > (guint64) G_MAXINT64 + 1 : magnitude > (guint64) G_MAXINT64)
        return out_of_range (text, lo, hi, error);
      sval = negative ? (gint64) (0 - magnitude) : (gint64) magnitude;
      if (sval < smin || sval > smax)
        return out_of_range (text, lo, hi, error);
    }
  else
    {
      g_autofree char *lo = kv_config_value_is_size (pspec) ? kv_config_value_format_size (umin)
                            : g_strdup_printf ("%" G_GUINT64_FORMAT, umin);
      g_autofree char *hi = kv_config_value_is_size (pspec) ? kv_config_value_format_size (umax)
                            : g_strdup_printf ("%" G_GUINT64_FORMAT, umax);

      if ((negative && magnitude != 0) || magnitude < umin || magnitude > umax)
        return out_of_range (text, lo, hi, error);
    }

  g_value_init (value, G_PARAM_SPEC_VALUE_TYPE (pspec));
  switch (G_TYPE_FUNDAMENTAL (G_PARAM_SPEC_VALUE_TYPE (pspec)))
    {
    case G_TYPE_INT: g_value_set_int (value, (gint) sval); break;
    case G_TYPE_LONG: g_value_set_long (value, (glong) sval); break;
    case G_TYPE_INT64: g_value_set_int64 (value, sval); break;
    case G_TYPE_UINT: g_value_set_uint (value, (guint) magnitude); break;
    case G_TYPE_ULONG: g_value_set_ulong (value, (gulong) magnitude); break;
    case G_TYPE_UINT64: g_value_set_uint64 (value, magnitude); break;
    default: g_assert_not_reached ();
    }
  return TRUE;
}

static gboolean
set_double (GParamSpec  *pspec,
            gdouble      d,
            const char  *text,
            GValue      *value,
            GError     **error)
{
  gdouble min, max;

  if (G_IS_PARAM_SPEC_FLOAT (pspec))
    {
      min = G_PARAM_SPEC_FLOAT (pspec)->minimum;
      max = G_PARAM_SPEC_FLOAT (pspec)->maximum;
    }
  else
    {
      min = G_PARAM_SPEC_DOUBLE (pspec)->minimum;
      max = G_PARAM_SPEC_DOUBLE (pspec)->maximum;
    }
  if (!isfinite (d) || d < min || d > max)
    {
      g_autofree char *lo = format_double (min);
      g_autofree char *hi = format_double (max);

      return out_of_range (text, lo, hi, error);
    }
  g_value_init (value, G_PARAM_SPEC_VALUE_TYPE (pspec));
  if (G_IS_PARAM_SPEC_FLOAT (pspec))
    g_value_set_float (value, (gfloat) d);
  else
    g_value_set_double (value, d);
  return TRUE;
}

static char **
split_list (const char *text)
{
  g_auto(GStrv) parts = g_strsplit_set (text, ",;", -1);
  GPtrArray *out = g_ptr_array_new ();

  for (guint i = 0; parts[i] != NULL; i++)
    {
      char *item = g_strstrip (parts[i]);

      if (*item != '\0')
        g_ptr_array_add (out, g_strdup (item));
    }
  g_ptr_array_add (out, NULL);
  return (char **) g_ptr_array_free (out, FALSE);
}

gboolean
kv_config_value_from_string (GParamSpec  *pspec,
                             const char  *text,
                             GValue      *value,
                             GError     **error)
{
  GType type = G_PARAM_SPEC_VALUE_TYPE (pspec);
  g_autofree char *stripped = g_strstrip (g_strdup (text));

  switch (G_TYPE_FUNDAMENTAL (type))
    {
    case G_TYPE_BOOLEAN:
      {
        static const char * const yes[] = { "true", "yes", "on", "1", NULL };
        static const char * const no[] = { "false", "no", "off", "0", NULL };
        g_autofree char *lower = g_ascii_strdown (stripped, -1);

        g_value_init (value, G_TYPE_BOOLEAN);
        if (g_strv_contains (yes, lower))
          g_value_set_boolean (value, TRUE);
        else if (g_strv_contains (no, lower))
          g_value_set_boolean (value, FALSE);
        else
          {
            g_value_unset (value);
            g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                         "'%s' is not a boolean (accepted: true, false, yes, no,"
                         " on, off, 1, 0)", text);
            return FALSE;
          }
        return TRUE;
      }

    case G_TYPE_INT:
    case G_TYPE_UINT:
    case G_TYPE_LONG:
    case G_TYPE_ULONG:
    case G_TYPE_INT64:
    case G_TYPE_UINT64:
      {
        gboolean negative = stripped[0] == '-';
        guint64 magnitude;
        g_autoptr(GError) local_error = NULL;

        if (!kv_config_value_parse_size (stripped + (negative ? 1 : 0), &magnitude, &local_error))
          {
            if (kv_config_value_is_size (pspec))
              g_propagate_error (error, g_steal_pointer (&local_error));
            else
              g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                           "'%s' is not an integer", text);
            return FALSE;
          }
        return set_integer (pspec, negative, magnitude, text, value, error);
      }

    case G_TYPE_FLOAT:
    case G_TYPE_DOUBLE:
      {
        char *end = NULL;
        gdouble d;

        errno = 0;
        d = g_ascii_strtod (stripped, &end);
        /* ERANGE with a finite result is an underflow: a subnormal (as a
         * dictionary's double may be) or zero is still a number. */
        if (*stripped == '\0' || end == NULL || *end != '\0' ||
            (errno != 0 && !(errno == ERANGE && isfinite (d))))
          {
            g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                         "'%s' is not a number", text);
            return FALSE;
          }
        return set_double (pspec, d, text, value, error);
      }

    case G_TYPE_ENUM:
      {
        g_autoptr(GEnumClass) klass = g_type_class_ref (type);

        for (guint i = 0; i < klass->n_values; i++)
          if (g_ascii_strcasecmp (stripped, klass->values[i].value_nick) == 0 ||
              g_str_equal (stripped, klass->values[i].value_name))
            {
              g_value_init (value, type);
              g_value_set_enum (value, klass->values[i].value);
              return TRUE;
            }
        {
          g_autofree char *choices = enum_nicks (type);

          g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                       "'%s' is not one of: %s", text, choices);
        }
        return FALSE;
      }

    case G_TYPE_FLAGS:
      {
        g_autoptr(GFlagsClass) klass = g_type_class_ref (type);
        g_auto(GStrv) parts = g_strsplit_set (stripped, ",|", -1);
        guint flags = 0;

        for (guint p = 0; parts[p] != NULL; p++)
          {
            const char *part = g_strstrip (parts[p]);
            gboolean found = FALSE;

            if (*part == '\0')
              continue;
            for (guint i = 0; i < klass->n_values && !found; i++)
              if (g_ascii_strcasecmp (part, klass->values[i].value_nick) == 0)
                {
                  flags |= klass->values[i].value;
                  found = TRUE;
                }
            if (!found)
              {
                g_autofree char *choices = enum_nicks (type);

                g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                             "'%s' is not a list of: %s", text, choices);
                return FALSE;
              }
          }
        g_value_init (value, type);
        g_value_set_flags (value, flags);
        return TRUE;
      }

    case G_TYPE_STRING:
      g_value_init (value, G_TYPE_STRING);
      g_value_set_string (value, text);
      return TRUE;

    default:
      if (type == G_TYPE_STRV)
        {
          g_value_init (value, G_TYPE_STRV);
          g_value_take_boxed (value, split_list (text));
          return TRUE;
        }
      g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                   "a %s cannot be set from a configuration", g_type_name (type));
      return FALSE;
    }
}

gboolean
kv_config_value_from_variant (GParamSpec  *pspec,
                              GVariant    *variant,
                              GValue      *value,
                              GError     **error)
{
  GType type = G_PARAM_SPEC_VALUE_TYPE (pspec);
  GType fundamental = G_TYPE_FUNDAMENTAL (type);
  g_autofree char *printed = NULL;

  /* Strings are configuration text, whatever the property type. */
  if (g_variant_is_of_type (variant, G_VARIANT_TYPE_STRING))
    return kv_config_value_from_string (pspec, g_variant_get_string (variant, NULL),
                                        value, error);

  printed = g_variant_print (variant, FALSE);

  if (fundamental == G_TYPE_BOOLEAN && g_variant_is_of_type (variant, G_VARIANT_TYPE_BOOLEAN))
    {
      g_value_init (value, G_TYPE_BOOLEAN);
      g_value_set_boolean (value, g_variant_get_boolean (variant));
      return TRUE;
    }

  if (fundamental == G_TYPE_INT || fundamental == G_TYPE_UINT ||
      fundamental == G_TYPE_LONG || fundamental == G_TYPE_ULONG ||
      fundamental == G_TYPE_INT64 || fundamental == G_TYPE_UINT64 ||
      fundamental == G_TYPE_FLOAT || fundamental == G_TYPE_DOUBLE)
    {
      gboolean negative = FALSE;
      guint64 magnitude = 0;
      gboolean is_integer = TRUE;
      gdouble d = 0;
      gint64 s;

      switch (g_variant_classify (variant))
        {
        case G_VARIANT_CLASS_BYTE: magnitude = g_variant_get_byte (variant); break;
        case G_VARIANT_CLASS_UINT16: magnitude = g_variant_get_uint16 (variant); break;
        case G_VARIANT_CLASS_UINT32: magnitude = g_variant_get_uint32 (variant); break;
        case G_VARIANT_CLASS_UINT64: magnitude = g_variant_get_uint64 (variant); break;
        case G_VARIANT_CLASS_INT16: s = g_variant_get_int16 (variant); goto signed_value;
        case G_VARIANT_CLASS_INT32: s = g_variant_get_int32 (variant); goto signed_value;
        case G_VARIANT_CLASS_INT64: s = g_variant_get_int64 (variant);
        signed_value:
          negative = s < 0;
          magnitude = negative ? (guint64) 0 - (guint64) s : (guint64) s;
          break;
        case G_VARIANT_CLASS_DOUBLE:
          is_integer = FALSE;
          d = g_variant_get_double (variant);
          break;
        default:
          goto mismatch;
        }

      if (fundamental == G_TYPE_FLOAT || fundamental == G_TYPE_DOUBLE)
        {
          if (is_integer)
            d = negative ? -(gdouble) magnitude : (gdouble) magnitude;
          return set_double (pspec, d, printed, value, error);
        }
      if (!is_integer)
        goto mismatch;
      return set_integer (pspec, negative, magnitude, printed, value, error);
    }

  if (type == G_TYPE_STRV && g_variant_is_of_type (variant, G_VARIANT_TYPE_STRING_ARRAY))
    {
      g_value_init (value, G_TYPE_STRV);
      g_value_take_boxed (value, g_variant_dup_strv (variant, NULL));
      return TRUE;
    }

mismatch:
  {
    g_autofree char *expected = kv_config_value_describe_type (pspec);

    g_set_error (error, KV_CONFIG_ERROR, KV_CONFIG_ERROR_INVALID_VALUE,
                 "%s (of GVariant type '%s') is not a %s", printed,
                 g_variant_get_type_string (variant), expected);
  }
  return FALSE;
}

char *
kv_config_value_to_string (GParamSpec   *pspec,
                           const GValue *value)
{
  GType type = G_VALUE_TYPE (value);

  switch (G_TYPE_FUNDAMENTAL (type))
    {
    case G_TYPE_BOOLEAN:
      return g_strdup (g_value_get_boolean (value) ? "true" : "false");
    case G_TYPE_INT:
      return g_strdup_printf ("%d", g_value_get_int (value));
    case G_TYPE_LONG:
      return g_strdup_printf ("%ld", g_value_get_long (value));
    case G_TYPE_INT64:
      return g_strdup_printf ("%" G_GINT64_FORMAT, g_value_get_int64 (value));
    case G_TYPE_UINT:
    case G_TYPE_ULONG:
    case G_TYPE_UINT64:
      {
        guint64 u = G_TYPE_FUNDAMENTAL (type) == G_TYPE_UINT ? g_value_get_uint (value)
                    : G_TYPE_FUNDAMENTAL (type) == G_TYPE_ULONG ? g_value_get_ulong (value)
                    : g_value_get_uint64 (value);

        if (kv_config_value_is_size (pspec) && u != G_MAXUINT64)
          return kv_config_value_format_size (u);
        return g_strdup_printf ("%" G_GUINT64_FORMAT, u);
      }
    case G_TYPE_FLOAT:
      return format_double (g_value_get_float (value));
    case G_TYPE_DOUBLE:
      return format_double (g_value_get_double (value));
    case G_TYPE_ENUM:
      {
        g_autoptr(GEnumClass) klass = g_type_class_ref (type);
        GEnumValue *ev = g_enum_get_value (klass, g_value_get_enum (value));

        return ev != NULL ? g_strdup (ev->value_nick)
                          : g_strdup_printf ("%d", g_value_get_enum (value));
      }
    case G_TYPE_FLAGS:
      {
        g_autoptr(GFlagsClass) klass = g_type_class_ref (type);
        GString *s = g_string_new (NULL);
        guint flags = g_value_get_flags (value);

        for (guint i = 0; i < klass->n_values; i++)
          if (klass->values[i].value != 0 &&
              (flags & klass->values[i].value) == klass->values[i].value)
            g_string_append_printf (s, "%s%s", s->len > 0 ? "," : "",
                                    klass->values[i].value_nick);
        return g_string_free (s, FALSE);
      }
    case G_TYPE_STRING:
      return g_strdup (g_value_get_string (value) != NULL ? g_value_get_string (value) : "");
    default:
      if (type == G_TYPE_STRV)
        {
          const char * const *strv = g_value_get_boxed (value);

          return strv != NULL ? g_strjoinv (",", (char **) strv) : g_strdup ("");
        }
      return NULL;
    }
}

GVariant *
kv_config_value_to_variant (GParamSpec   *pspec,
                            const GValue *value)
{
  GType type = G_VALUE_TYPE (value);

  switch (G_TYPE_FUNDAMENTAL (type))
    {
    case G_TYPE_BOOLEAN:
      return g_variant_new_boolean (g_value_get_boolean (value));
    case G_TYPE_INT:
      return g_variant_new_int32 (g_value_get_int (value));
    case G_TYPE_UINT:
      return g_variant_new_uint32 (g_value_get_uint (value));
    case G_TYPE_LONG:
      return g_variant_new_int64 (g_value_get_long (value));
    case G_TYPE_ULONG:
      return g_variant_new_uint64 (g_value_get_ulong (value));
    case G_TYPE_INT64:
      return g_variant_new_int64 (g_value_get_int64 (value));
    case G_TYPE_UINT64:
      return g_variant_new_uint64 (g_value_get_uint64 (value));
    case G_TYPE_FLOAT:
      return g_variant_new_double (g_value_get_float (value));
    case G_TYPE_DOUBLE:
      return g_variant_new_double (g_value_get_double (value));
    case G_TYPE_STRING:
      return g_variant_new_string (g_value_get_string (value) != NULL
                                   ? g_value_get_string (value) : "");
    default:
      if (type == G_TYPE_STRV)
        {
          const char * const *strv = g_value_get_boxed (value);

          return g_variant_new_strv (strv, -1);
        }
      else
        {
          g_autofree char *text = kv_config_value_to_string (pspec, value);

          return g_variant_new_string (text != NULL ? text : "");
        }
    }
}

char *
kv_config_value_describe_type (GParamSpec *pspec)
{
  GType type = G_PARAM_SPEC_VALUE_TYPE (pspec);

  switch (G_TYPE_FUNDAMENTAL (type))
    {
    case G_TYPE_BOOLEAN:
      return g_strdup ("boolean");
    case G_TYPE_INT:
    case G_TYPE_LONG:
    case G_TYPE_INT64:
      return g_strdup ("integer");
    case G_TYPE_UINT:
    case G_TYPE_ULONG:
    case G_TYPE_UINT64:
      return g_strdup (kv_config_value_is_size (pspec) ? "size" : "unsigned integer");
    case G_TYPE_FLOAT:
    case G_TYPE_DOUBLE:
      return g_strdup ("number");
    case G_TYPE_ENUM:
      {
        g_autofree char *nicks = enum_nicks (type);

        return g_strdup_printf ("one of %s", nicks);
      }
    case G_TYPE_FLAGS:
      {
        g_autofree char *nicks = enum_nicks (type);

        return g_strdup_printf ("list of %s", nicks);
      }
    case G_TYPE_STRING:
      return g_strdup ("string");
    default:
      return g_strdup (type == G_TYPE_STRV ? "string list" : g_type_name (type));
    }
}
