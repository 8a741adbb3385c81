# SPDX-License-Identifier: LGPL-2.1-or-later
"""Kv.Config.check() with a tier written in Python: the tier implements
Kv.Configurable next to Gio.Initable, and check() runs its check without
starting it, refusing what create_manager() refuses with the same error."""

import pytest
from gi.repository import Gio, GLib, GObject, Kv


class CheckedTier(Kv.SecondaryTier, Gio.Initable, Kv.Configurable):
    __gtype_name__ = 'PyCheckedTier'

    label = GObject.Property(type=str, default='', flags=(GObject.ParamFlags.READWRITE |
                                                          GObject.ParamFlags.CONSTRUCT_ONLY))
    checks = 0
    starts = 0

    def _refusal(self):
        if self.props.label == 'refuse':
            return GLib.Error.new_literal(Kv.tier_error_quark(), 'the label says refuse',
                                          Kv.TierError.INVALID_ARGUMENT)
        return None

    def do_check(self):
        CheckedTier.checks += 1
        if self.props.label == 'silent':
            return False          # a failure without an error
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        return True

    def do_init(self, cancellable):
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        CheckedTier.starts += 1
        return True

    def do_lookup(self, key, request):
        return Kv.LookupResult.MISS

    def do_on_new_request(self, request):
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def do_submit_store(self, job):
        return False

    def do_submit_load(self, job):
        return False

    def do_drain_jobs(self):
        return True


def make_config(label):
    registry = Kv.TierRegistry.new()
    assert registry.register_tier_type('pychecked', CheckedTier.__gtype__)
    return Kv.Config.new_from_variant(registry, GLib.Variant('a{sv}', {
        'primary': GLib.Variant('a{sv}', {'size': GLib.Variant('s', '64KiB'),
                                          'slot-size': GLib.Variant('s', '4KiB')}),
        'tiers': GLib.Variant('aa{sv}', [{
            'name': GLib.Variant('s', 't'),
            'type': GLib.Variant('s', 'pychecked'),
            'label': GLib.Variant('s', label),
        }]),
    }))


def test_check_runs_the_python_check_and_starts_nothing():
    CheckedTier.checks = CheckedTier.starts = 0
    config = make_config('fine')
    assert config.check()
    assert (CheckedTier.checks, CheckedTier.starts) == (1, 0)

    manager = config.create_manager()
    assert CheckedTier.starts == 1
    assert manager.shutdown()


def test_check_refuses_what_building_refuses():
    CheckedTier.checks = CheckedTier.starts = 0
    config = make_config('refuse')
    with pytest.raises(GLib.Error) as checked:
        config.check()
    assert checked.value.matches(Kv.config_error_quark(), Kv.ConfigError.FAILED)
    assert checked.value.message == ('configuration dictionary: [tier t]: cannot create the tier:'
                                     ' the label says refuse')
    assert CheckedTier.starts == 0

    with pytest.raises(GLib.Error) as built:
        config.create_manager()
    assert built.value.message == checked.value.message


def test_a_check_that_fails_silently_still_fails():
    config = make_config('silent')
    with pytest.raises(GLib.Error) as checked:
        config.check()
    assert 'PyCheckedTier: the configuration check failed without saying why' in \
        checked.value.message
