# SPDX-License-Identifier: LGPL-2.1-or-later
"""Bindability of Kv-1.gir: what g-ir-scanner accepts without a warning but
bindings cannot call or implement."""

import os
import xml.etree.ElementTree as ET

import pytest

CORE = '{http://www.gtk.org/introspection/core/1.0}'
C_NS = '{http://www.gtk.org/introspection/c/1.0}'
CALLABLES = {CORE + tag for tag in ('function', 'method', 'constructor', 'virtual-method')}


@pytest.fixture(scope='module')
def gir():
    path = os.environ.get('KVTIER_GIR')
    if not path:
        pytest.skip('KVTIER_GIR is not set (meson sets it to the built Kv-1.gir)')
    return ET.parse(path).getroot()


def callables(root):
    for node in root.iter():
        if node.tag in CALLABLES and node.get('introspectable') != '0':
            yield node


def name_of(node):
    return node.get(C_NS + 'identifier') or node.get('name')


def parameters(node):
    params = node.find(CORE + 'parameters')
    return [] if params is None else params.findall(CORE + 'parameter')


def test_array_lengths_have_the_direction_of_their_array(gir):
    """An out array whose length is an input parameter turns that parameter
    into an out parameter in the GIR (g-ir-scanner copies the direction):
    bindings then pass garbage as the length and crash."""
    bad = []
    for node in callables(gir):
        params = parameters(node)
        for p in params:
            array = p.find(CORE + 'array')
            if array is None or array.get('length') is None:
                continue
            length = params[int(array.get('length'))]
            if (p.get('direction') or 'in') != (length.get('direction') or 'in'):
                bad.append(f"{name_of(node)}: {p.get('name')} is {p.get('direction') or 'in'}, "
                           f"its length {length.get('name')} is {length.get('direction') or 'in'}")
    assert bad == []


def test_no_caller_allocated_arrays(gir):
    """PyGObject 3.42 allocates a GArray for any caller-allocated array
    argument, which a C function expecting a plain array overwrites."""
    bad = [f"{name_of(node)}: {p.get('name')}"
           for node in callables(gir) for p in parameters(node)
           if p.get('caller-allocates') == '1' and p.find(CORE + 'array') is not None]
    assert bad == []


def secondary_tier(gir):
    for cls in gir.iter(CORE + 'class'):
        if cls.get('name') == 'SecondaryTier':
            return cls
    raise AssertionError('no SecondaryTier class in the GIR')


def test_tier_vfuncs_take_no_callbacks_and_no_raw_buffers(gir):
    """GJS refuses to implement a vfunc that takes a callback, and
    PyGObject passes array lengths as extra arguments: tier vfuncs take
    boxed values, objects and zero-terminated arrays only."""
    vfuncs = secondary_tier(gir).findall(CORE + 'virtual-method')
    names = {v.get('name') for v in vfuncs}
    assert {'drain_jobs', 'get_finished_jobs', 'has_pending_work', 'lookup', 'on_new_request',
            'on_request_finished', 'on_schedule_end', 'serve_external_requests', 'shutdown',
            'submit_load', 'submit_store', 'take_events', 'touch'} <= names
    for vfunc in vfuncs:
        for p in parameters(vfunc):
            what = f"{vfunc.get('name')}({p.get('name')})"
            t = p.find(CORE + 'type')
            assert t is None or t.get('name') not in ('gpointer', 'gconstpointer'), what
            assert p.get('closure') is None and p.get('scope') is None, what
            array = p.find(CORE + 'array')
            if array is not None:
                assert array.get('length') is None, f'{what} has a length parameter'
                # zero-terminated is the default the GIR leaves out
                assert array.get('zero-terminated', '1') == '1', what
            assert (p.get('direction') or 'in') == 'in', f'{what} is an out parameter'


def test_failing_tier_vfuncs_throw(gir):
    """Vfuncs that can fail report it with a GError, so that a GLib.Error
    raised by a binding reaches the caller, and return a gboolean, so that
    a swallowed exception (zero) reads as a failure."""
    throwing = [v for v in secondary_tier(gir).findall(CORE + 'virtual-method')
                if v.get('throws') == '1']
    assert {'submit_store', 'submit_load', 'drain_jobs', 'shutdown'} <= \
        {v.get('name') for v in throwing}
    for vfunc in throwing:
        returns = vfunc.find(CORE + 'return-value').find(CORE + 'type')
        assert returns is not None and returns.get('name') == 'gboolean', vfunc.get('name')
