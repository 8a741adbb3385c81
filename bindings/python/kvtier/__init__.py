# SPDX-License-Identifier: LGPL-2.1-or-later
"""Pythonic helpers over the kvtier GObject API (``gi.repository.Kv``).

Everything here is plain Python over PyGObject; the objects it returns are
the ``Kv`` objects themselves, so the whole ``Kv`` API stays available::

    import kvtier

    @kvtier.register_tier('pymem')
    class MemTier(kvtier.Kv.SecondaryTier):
        ...

    with kvtier.open_manager({
        'primary': {'size': '64MiB', 'slot-size': '2MiB'},
        'tiers': {'memory': {'type': 'pymem'}},
    }) as manager:
        ...                     # manager.shutdown() runs on exit

    view = kvtier.slot_array(manager.get_primary().get_buffer(), 3)

What it adds:

- :func:`open_manager` / :func:`shutting_down`: context managers that shut
  the manager down (reporting every job) when the block exits;
- :func:`config_from_dict`: a ``Kv.Config`` from plain dicts, lists and
  numbers, through the ``a{sv}`` form of the configuration;
- :func:`register_tier`: a class decorator naming a tier class in a
  ``Kv.TierRegistry``;
- :func:`tier_capabilities`: a class decorator stating what every instance
  of a tier class can do, however it is made;
- zero-copy access to primary slots: :func:`slot_view` (a writable
  ``memoryview``), :func:`slot_array` and :func:`buffer_array` (numpy
  arrays), :func:`bytes_view` (a read-only ``memoryview`` over any
  ``GLib.Bytes``, such as ``read_slot()``'s), and :func:`write_slot`, which
  copies once from any buffer-protocol object;
- :func:`lookup_many`, the Python form of the C-only
  ``kv_tiering_manager_lookup_many()``;
- Python ``enum.IntEnum`` versions of every ``Kv`` enumeration
  (:class:`LookupResult`, :class:`Medium`...), equal to the ``Kv`` values.

PyGObject 3.42 cannot expose the memory of a ``GLib.Bytes``
(``get_data()`` returns a copy, and ``GLib.Bytes`` has no buffer protocol),
so the zero-copy views map the memory with ``ctypes`` at the address the C
library reports. Every view keeps the object that owns the memory alive.
"""

import contextlib
import ctypes
import enum

import gi

gi.require_version('GLib', '2.0')
gi.require_version('GObject', '2.0')
gi.require_version('Kv', '1')
from gi.repository import GLib, GObject, Kv  # noqa: E402

__all__ = [
    'Kv',
    'bytes_view', 'buffer_array', 'config_from_dict', 'lookup_many', 'open_manager',
    'register_tier', 'shutting_down', 'slot_array', 'slot_view', 'tier_capabilities',
    'write_slot',
]


# ---- enumerations ------------------------------------------------------------

def _python_enum(gi_enum):
    members = []
    for value in sorted(gi_enum.__enum_values__):
        nick = gi_enum.__enum_values__[value].value_nick
        members.append((nick.upper().replace('-', '_'), value))
    py_enum = enum.IntEnum(gi_enum.__name__, members, module=__name__)
    py_enum.__doc__ = f'Python enumeration of Kv.{gi_enum.__name__}; members equal its values.'
    py_enum.gi_type = gi_enum
    return py_enum


def _install_enums():
    enums = {}
    for name in dir(Kv):
        obj = getattr(Kv, name)
        if isinstance(obj, type) and issubclass(obj, GObject.GEnum) and obj is not GObject.GEnum:
            enums[name] = _python_enum(obj)
    globals().update(enums)
    return enums


_ENUMS = _install_enums()
__all__ += sorted(_ENUMS)


# ---- configuration -------------------------------------------------------------

def _variant(value, where):
    if isinstance(value, GLib.Variant):
        return value
    # Enumerations go by nick, the spelling configuration files use.
    if isinstance(value, GObject.GEnum):
        return GLib.Variant('s', value.value_nick)
    if isinstance(value, enum.Enum) and hasattr(value, 'gi_type'):
        return GLib.Variant('s', value.gi_type(int(value)).value_nick)
    if isinstance(value, bool):
        return GLib.Variant('b', value)
    if isinstance(value, int):
        return GLib.Variant('x', value)
    if isinstance(value, float):
        return GLib.Variant('d', value)
    if isinstance(value, str):
        return GLib.Variant('s', value)
    if isinstance(value, dict):
        return GLib.Variant('a{sv}', {str(k): _variant(v, f'{where}.{k}') for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            return GLib.Variant('as', list(value))
        if all(isinstance(v, dict) for v in value):
            return GLib.Variant('aa{sv}', [
                {str(k): _variant(v, f'{where}[{i}].{k}') for k, v in item.items()}
                for i, item in enumerate(value)])
    raise TypeError(f'{where}: cannot put {type(value).__name__} {value!r} in a kvtier '
                    f'configuration (use str, int, float, bool, dict or a list of str or dict)')


def config_from_dict(config, registry=None):
    """Builds a ``Kv.Config`` from plain Python values.

    ``config`` has the keys ``primary`` (a dict), ``device`` (a dict with
    ``type``) and ``tiers``: either a list of dicts that each have ``name``
    and ``type``, or a dict from tier name to its settings. Values are
    strings in the configuration file syntax (``'2MiB'``, ``'lru'``) or
    numbers and booleans. Raises ``GLib.Error`` (``Kv.config_error_quark()``)
    naming the key that is wrong.
    """
    config = dict(config)
    tiers = config.get('tiers')
    if isinstance(tiers, dict):
        config['tiers'] = [dict(settings, name=name) for name, settings in tiers.items()]
    return Kv.Config.new_from_variant(registry, _variant(config, 'config'))


# ---- manager lifetime -------------------------------------------------------

@contextlib.contextmanager
def shutting_down(manager):
    """Yields ``manager`` and shuts it down when the block exits, even on an
    exception: every job still in flight is reported and every tier stops
    its threads. A shutdown error is raised unless the block itself raised.
    """
    try:
        yield manager
    except BaseException:
        try:
            manager.shutdown()
        except GLib.Error:
            pass            # the block's own exception is the one to see
        raise
    manager.shutdown()


def open_manager(config, registry=None):
    """A context manager that creates a ``Kv.TieringManager`` from
    ``config`` (a dict for :func:`config_from_dict`, or a ``Kv.Config``)
    and shuts it down when the block exits."""
    if not isinstance(config, Kv.Config):
        config = config_from_dict(config, registry)
    return shutting_down(config.create_manager())


# ---- registration by name ---------------------------------------------------

def register_tier(name, registry=None):
    """Class decorator: registers a ``Kv.SecondaryTier`` subclass under
    ``name`` in ``registry`` (the default registry if None), so that
    configurations can use ``type = name``."""
    def decorate(cls):
        (registry or Kv.TierRegistry.get_default()).register_tier_type(name, cls.__gtype__)
        return cls
    return decorate


_CAPABILITIES = {
    'accepts_cascaded_stores': Kv.SecondaryTier.type_set_accepts_cascaded_stores,
    'can_cancel_stores': Kv.SecondaryTier.type_set_can_cancel_stores,
    'lazy_promotion_allocation': Kv.SecondaryTier.type_set_lazy_promotion_allocation,
}


def tier_capabilities(**capabilities):
    """Class decorator: states ``capabilities`` (``accepts_cascaded_stores``,
    ``can_cancel_stores``, ``lazy_promotion_allocation``) for every instance
    of a ``Kv.SecondaryTier`` subclass, including those the registry or a
    tier module loader makes from C, which run no ``__init__`` with
    keywords (``Kv.SecondaryTier.type_set_*``). Apply it before any
    instance exists; an instance may still narrow it with the property of
    the same name, never widen it::

        @kvtier.tier_capabilities(can_cancel_stores=False)
        class MyTier(kvtier.Kv.SecondaryTier):
            ...
    """
    unknown = sorted(set(capabilities) - set(_CAPABILITIES))
    if unknown:
        raise TypeError('unknown tier capabilities: %s' % ', '.join(unknown))

    def decorate(cls):
        for name, value in capabilities.items():
            _CAPABILITIES[name](cls, value)
        return cls
    return decorate


# ---- zero-copy slot access --------------------------------------------------

_glib = ctypes.CDLL('libglib-2.0.so.0')
_glib.g_bytes_get_data.restype = ctypes.c_void_p
_glib.g_bytes_get_data.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]


def _boxed_address(boxed):
    # PyGObject hashes a boxed wrapper by the address of the C struct.
    return hash(boxed)


def _memory(address, size, owner, readonly):
    array = (ctypes.c_ubyte * size).from_address(address)
    array._kvtier_owner = owner            # keeps the memory's owner alive
    view = memoryview(array).cast('B')
    return view.toreadonly() if readonly else view


def _check_slot(buffer, slot):
    n_slots = buffer.get_n_slots()
    if not 0 <= slot < n_slots:
        raise IndexError(f'slot {slot} is out of range (the buffer has {n_slots} slots)')


def slot_view(buffer, slot):
    """A writable ``memoryview`` of one slot of a ``Kv.HostBuffer``, without
    copying. Valid as long as the view exists (it keeps ``buffer`` alive);
    what the bytes mean depends on the slot's state in the primary tier."""
    _check_slot(buffer, slot)
    return _memory(buffer.peek_slot(slot), buffer.get_slot_size(), buffer, readonly=False)


def slot_array(buffer, slot, dtype='uint8'):
    """One slot as a writable 1-D numpy array of ``dtype``, without
    copying."""
    import numpy
    return numpy.frombuffer(slot_view(buffer, slot), dtype=dtype)


def buffer_array(buffer, dtype='uint8'):
    """Every slot of a ``Kv.HostBuffer`` as a writable numpy array of shape
    ``(n_slots, slot_size / itemsize)``, without copying."""
    import numpy
    view = _memory(buffer.get_data(), buffer.get_size(), buffer, readonly=False)
    return numpy.frombuffer(view, dtype=dtype).reshape(buffer.get_n_slots(), -1)


def bytes_view(data):
    """A read-only ``memoryview`` of a ``GLib.Bytes`` (for example what
    ``Kv.HostBuffer.read_slot()`` returns) without copying; it keeps the
    ``GLib.Bytes``, and so the memory, alive."""
    size = ctypes.c_size_t()
    address = _glib.g_bytes_get_data(_boxed_address(data), ctypes.byref(size))
    if size.value == 0:
        return memoryview(b'')
    return _memory(address, size.value, data, readonly=True)


def write_slot(buffer, slot, data):
    """Copies ``data`` (any buffer-protocol object: bytes, bytearray,
    memoryview, numpy array) to the start of a slot with one copy.
    ``Kv.HostBuffer.write_slot()`` takes a ``GLib.Bytes``, which costs a
    second copy from Python. Like it, forgets the checksum the slot
    carried (``Kv.HostBuffer.get_slot_checksum()``); whoever changes a
    slot through :func:`slot_view` or :func:`slot_array` calls
    ``buffer.clear_slot_checksum(slot)`` itself."""
    source = memoryview(data).cast('B')
    view = slot_view(buffer, slot)
    if source.nbytes > view.nbytes:
        raise ValueError(f'{source.nbytes} bytes do not fit a slot of {view.nbytes} bytes')
    buffer.clear_slot_checksum(slot)
    view[:source.nbytes] = source


# ---- manager calls that are C-only in the GIR -------------------------------------

def lookup_many(manager, keys, request):
    """Looks up each key as ``manager.lookup()`` would, in order, and
    returns a list of :class:`LookupResult`: what the C-only
    ``kv_tiering_manager_lookup_many()`` does, whose caller-allocated result
    array introspection cannot describe."""
    result = _ENUMS['LookupResult']
    return [result(int(manager.lookup(key, request))) for key in keys]
