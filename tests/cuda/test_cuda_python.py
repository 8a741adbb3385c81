# SPDX-License-Identifier: LGPL-2.1-or-later
"""The CUDA device from Python, as an engine's adapter drives it: created by
the registry from an a{sv} dictionary (addresses as text or as a guint64),
its layout errors as GLib.Error, its action signals emitted by name. Runs
on the CUDA runtime's test double (KVTIER_PLUGIN_PATH starts with the fake
`kvtier-cuda` module), so it needs no GPU."""

import struct

import gi
gi.require_version('Kv', '1')
from gi.repository import GLib, Kv  # noqa: E402
import pytest  # noqa: E402

M64 = (1 << 64) - 1


def pattern_word(seed, i):
    """kv_cuda_pattern_word (plugins/cuda/kv-cuda-kernels.h)."""
    x = (seed * 0x9E3779B97F4A7C15 + i) & M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x


N_LAYERS, N_BLOCKS, BLOCK, BPC = 4, 64, 4096, 4


def registry():
    r = Kv.TierRegistry.new()
    r.load_plugins()
    return r


def props(**extra):
    d = {
        'n-layers': GLib.Variant('u', N_LAYERS),
        'n-blocks': GLib.Variant('u', N_BLOCKS),
        'block-bytes': GLib.Variant('t', BLOCK),
        'blocks-per-chunk': GLib.Variant('u', BPC),
    }
    d.update(extra)
    return GLib.Variant('a{sv}', d)


def test_store_computed_blocks():
    buf = Kv.HostBuffer.new(4, N_LAYERS * BPC * BLOCK)
    dev = registry().create_device('cuda', buf, props())
    assert isinstance(dev, Kv.Device)
    assert dev.props.device_name.startswith('kvtier fake CUDA device')
    assert dev.emit('fill-blocks', 7, 8, BPC)

    job = dev.submit_store([8, 9, 10, 11], [2])
    assert job > 0
    dev.wait_all()
    results = dev.get_finished()
    assert [r.get_job_id() for r in results] == [job]
    assert results[0].get_success()
    assert results[0].get_transfer_bytes() == N_LAYERS * BPC * BLOCK

    data = buf.read_slot(2).get_data()
    words = struct.unpack('<%dQ' % (len(data) // 8), data)
    per_layer = BPC * BLOCK // 8
    for layer in range(N_LAYERS):
        expected = pattern_word(7, layer + 1)
        assert set(words[layer * per_layer:(layer + 1) * per_layer]) == {expected}

    assert dev.emit('check-blocks', 7, 8, BPC) == 0
    assert dev.emit('check-blocks', 8, 8, BPC) == N_LAYERS * BPC * BLOCK // 8
    assert dev.shutdown()


@pytest.mark.parametrize('extra, fragment', [
    ({'layer-addresses': GLib.Variant('as', ['0x7f0000000000', '0x7f0000001000',
                                             '0x7f1000000000', '0x7f2000000000'])},
     'share bytes'),
    ({'layer-addresses': GLib.Variant('as', [hex(0x7f0000000000 + i * (1 << 30))
                                             for i in range(N_LAYERS)])},
     'is not memory of CUDA device 0'),
    ({'base-address': GLib.Variant('t', 0x7f0000000000),
      'layer-stride-bytes': GLib.Variant('t', BLOCK),
      'block-stride-bytes': GLib.Variant('t', N_LAYERS * BLOCK)},
     'is not memory of CUDA device 0'),
    ({'base-address': GLib.Variant('t', 0x7f0000000000),
      'layer-stride-bytes': GLib.Variant('t', BLOCK // 2),
      'block-stride-bytes': GLib.Variant('t', N_LAYERS * BLOCK)},
     'share bytes'),
])
def test_layout_errors(extra, fragment):
    buf = Kv.HostBuffer.new(4, N_LAYERS * BPC * BLOCK)
    with pytest.raises(GLib.Error) as info:
        registry().create_device('cuda', buf, props(**extra))
    assert info.value.matches(Kv.tier_error_quark(), Kv.TierError.INVALID_ARGUMENT)
    assert fragment in info.value.message


def test_cancel():
    """Jobs queued behind the GPU's window are failed by the cancel action;
    every job is still reported, once, successes first in each direction."""
    buf = Kv.HostBuffer.new(8, N_LAYERS * BPC * BLOCK)
    dev = registry().create_device('cuda', buf, props())
    stores = [dev.submit_store([4 * (k % 8) + j for j in range(BPC)], [k % 4])
              for k in range(200)]
    loads = [dev.submit_load([4 + k % 4], [32 + 4 * (k % 8) + j for j in range(BPC)])
             for k in range(200)]
    cancelled = dev.emit('cancel')
    dev.wait_all()
    results = dev.get_finished()
    assert sorted(r.get_job_id() for r in results) == sorted(stores + loads)
    failed = [r for r in results if not r.get_success()]
    assert len(failed) == cancelled
    for ids in (stores, loads):
        outcome = {r.get_job_id(): r.get_success() for r in results if r.get_job_id() in ids}
        flags = [outcome[i] for i in ids]
        assert flags == sorted(flags, reverse=True)   # no success after a failure
    if cancelled:
        assert 'cancelled' in dev.props.last_error
    assert dev.shutdown()
