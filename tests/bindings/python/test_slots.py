# SPDX-License-Identifier: LGPL-2.1-or-later
"""How Python reaches primary slot memory, and which paths copy.

Kv.HostBuffer.read_slot() returns a GLib.Bytes that points into the slot
(no copy in C). PyGObject 3.42 copies it into a Python bytes object in
get_data() and gives GLib.Bytes no buffer protocol, so there is no
zero-copy view through PyGObject alone; the kvtier helper package maps the
same memory with ctypes. These tests compare addresses to tell a view
from a copy."""

import ctypes

import pytest
from gi.repository import GLib, Kv

numpy = pytest.importorskip('numpy')
kvtier = pytest.importorskip('kvtier')

SLOT = 4096


def address_of(buffer_like):
    return numpy.frombuffer(buffer_like, dtype='uint8').__array_interface__['data'][0]


@pytest.fixture
def buffer():
    b = Kv.HostBuffer.new(4, SLOT)
    kvtier.write_slot(b, 2, b'slot two')
    return b


def test_read_slot_bytes_point_into_the_slot(buffer):
    data = buffer.read_slot(2)
    glib = ctypes.CDLL('libglib-2.0.so.0')
    glib.g_bytes_get_data.restype = ctypes.c_void_p
    glib.g_bytes_get_data.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    size = ctypes.c_size_t()
    assert glib.g_bytes_get_data(hash(data), ctypes.byref(size)) == buffer.peek_slot(2)
    assert size.value == SLOT


def test_pygobject_get_data_is_one_copy(buffer):
    copied = buffer.read_slot(2).get_data()
    assert isinstance(copied, bytes)
    assert copied[:8] == b'slot two'
    assert address_of(copied) != buffer.peek_slot(2)


def test_pygobject_bytes_buffer_protocol(buffer):
    data = buffer.read_slot(2)
    try:
        view = memoryview(data)
    except TypeError:
        return              # PyGObject 3.42: no buffer protocol on GLib.Bytes
    # A PyGObject that exports it must do so without a copy.
    assert address_of(view) == buffer.peek_slot(2)


def test_helper_views_are_zero_copy(buffer):
    view = kvtier.bytes_view(buffer.read_slot(2))
    assert address_of(view) == buffer.peek_slot(2)
    assert bytes(view[:8]) == b'slot two'
    array = kvtier.slot_array(buffer, 2)
    assert address_of(array) == buffer.peek_slot(2)
    array[:3] = 0x2a
    assert buffer.read_slot(2).get_data()[:4] == b'***t'


def test_write_paths_land_the_same_bytes(buffer):
    payload = bytes(range(256)) * (SLOT // 256)
    # PyGObject: bytes → GLib.Bytes (a copy) → slot (a copy)
    assert buffer.write_slot(0, GLib.Bytes.new(payload))
    # helper: buffer → slot (one copy)
    kvtier.write_slot(buffer, 1, memoryview(payload))
    assert buffer.read_slot(0).get_data() == payload
    assert buffer.read_slot(1).get_data() == payload
