/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include "test-object.h"

#include <gobject/gvaluecollector.h>

struct _TestProperties
{
  GType         type;
  GObjectClass *klass;
  GPtrArray    *names;    /* const char *, static or the pspec's */
  GArray       *values;   /* GValue */
};

TestProperties *
test_properties_new (GType type)
{
  TestProperties *self = g_new0 (TestProperties, 1);

  self->type = type;
  self->klass = g_type_class_ref (type);
  self->names = g_ptr_array_new ();
  self->values = g_array_new (FALSE, TRUE, sizeof (GValue));
  g_array_set_clear_func (self->values, (GDestroyNotify) g_value_unset);
  return self;
}

void
test_properties_free (TestProperties *self)
{
  g_ptr_array_unref (self->names);
  g_array_unref (self->values);
  g_type_class_unref (self->klass);
  g_free (self);
}

/* The value slot for @name, emptied: an earlier setting is dropped. */
static GValue *
slot_for (TestProperties *self,
          const char     *name)
{
  GValue empty = G_VALUE_INIT;

  for (guint i = 0; i < self->names->len; i++)
    if (g_str_equal (self->names->pdata[i], name))
      {
        GValue *value = &g_array_index (self->values, GValue, i);

        g_value_unset (value);
        return value;
      }
  g_ptr_array_add (self->names, (gpointer) name);
  g_array_append_val (self->values, empty);
  return &g_array_index (self->values, GValue, self->values->len - 1);
}

static void
collect_one (TestProperties *self,
             const char     *name,
             GType           value_type,
             va_list        *args)
{
  GParamSpec *pspec = g_object_class_find_property (self->klass, name);
  g_autofree char *message = NULL;
  GValue *value;

  if (pspec == NULL)
    g_error ("%s has no property %s", g_type_name (self->type), name);
  pspec = g_param_spec_get_redirect_target (pspec) ? g_param_spec_get_redirect_target (pspec) : pspec;
  value = slot_for (self, pspec->name);
  G_VALUE_COLLECT_INIT (value, value_type != G_TYPE_INVALID ? value_type : pspec->value_type,
                        *args, 0, &message);
  if (message != NULL)
    g_error ("property %s of %s: %s", name, g_type_name (self->type), message);
}

/* Sets @name to the value that follows, of @value_type. */
void
test_properties_set (TestProperties *self,
                     const char     *name,
                     GType           value_type,
                     ...)
{
  va_list args;

  va_start (args, value_type);
  collect_one (self, name, value_type, &args);
  va_end (args);
}

/* Sets the name-value pairs of @args, from @first_property to a NULL
 * name; each value has its property's type. */
void
test_properties_collect (TestProperties *self,
                         const char     *first_property,
                         va_list         args)
{
  va_list copy;

  va_copy (copy, args);
  for (const char *name = first_property; name != NULL; name = va_arg (copy, const char *))
    collect_one (self, name, G_TYPE_INVALID, &copy);
  va_end (copy);
}

/* The object, initialized when it is a GInitable; NULL with @error set
 * when that fails. */
GObject *
test_properties_new_initable (TestProperties  *self,
                              GError         **error)
{
  GObject *object = g_object_new_with_properties (self->type, self->names->len,
                                                  (const char **) self->names->pdata,
                                                  (const GValue *) self->values->data);

  if (G_IS_INITABLE (object) && !g_initable_init (G_INITABLE (object), NULL, error))
    g_clear_object (&object);
  return object;
}
