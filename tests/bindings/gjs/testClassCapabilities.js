// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Capabilities a JavaScript tier class states once for every instance
// (Kv.SecondaryTier.type_set_*): an instance made from C (the registry, as
// the GJS module loader does; GObject.Object.new_with_properties() with no
// property) has them, and the manager honours them; an instance may narrow
// them, never widen them.

import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';

import {Engine} from './engine.js';
import {assert, assertEqual, assertThrows, run, test} from './harness.js';

// Takes every job and never reports it (a store already handed to a server
// that stalled). Made from C, its constructor does not run: state is made
// on first use.
const HoldingTier = GObject.registerClass({GTypeName: 'JsHoldingTier'},
class HoldingTier extends Kv.SecondaryTier {
    get jobs() {
        this._jobs ??= [];
        return this._jobs;
    }

    vfunc_lookup(_key, _request) {
        return Kv.LookupResult.MISS;
    }

    vfunc_on_new_request(_request) {
        return Kv.OffloadPolicy.CHUNK_LEVEL;
    }

    vfunc_submit_store(job) {
        this.jobs.push(job);
        return true;
    }

    vfunc_submit_load(job) {
        this.jobs.push(job);
        return true;
    }
});

const FetchOnlyTier = GObject.registerClass({GTypeName: 'JsFetchOnlyTier'},
    class FetchOnlyTier extends HoldingTier {});
const UncancellableTier = GObject.registerClass({GTypeName: 'JsUncancellableTier'},
    class UncancellableTier extends HoldingTier {});
// a subclass whose class exists before its parent's statement
const DefinedBeforeStatement = GObject.registerClass({GTypeName: 'JsDefinedBeforeStatement'},
    class DefinedBeforeStatement extends UncancellableTier {});

// the class itself or its GType: either converts to a GType
Kv.SecondaryTier.type_set_accepts_cascaded_stores(FetchOnlyTier, false);
Kv.SecondaryTier.type_set_can_cancel_stores(FetchOnlyTier.$gtype, false);
Kv.SecondaryTier.type_set_can_cancel_stores(UncancellableTier, false);

const DefinedAfterStatement = GObject.registerClass({GTypeName: 'JsDefinedAfterStatement'},
    class DefinedAfterStatement extends UncancellableTier {});

let nRegistered = 0;

// An instance made by C's g_object_new(), as the registry and the tier
// module loaders make one.
function createFromC(klass, buffer = Kv.HostBuffer.new(4, 4096)) {
    const registry = Kv.TierRegistry.new();
    const name = `js-tier-${nRegistered++}`;
    assert(registry.register_tier_type(name, klass.$gtype), 'registered');
    const tier = registry.create_tier(name, buffer, null, null);
    assert(tier instanceof klass, `made a ${klass.name}`);
    return tier;
}

test('an instance made from C has its class capabilities', () => {
    let tier = createFromC(FetchOnlyTier);
    assertEqual(tier.get_accepts_cascaded_stores(), false, 'accepts cascaded stores');
    assertEqual(tier.accepts_cascaded_stores, false, 'accepts-cascaded-stores');
    assertEqual(tier.get_can_cancel_stores(), false, 'can cancel stores');
    assertEqual(tier.can_cancel_stores, false, 'can-cancel-stores');
    tier.shutdown();

    for (const klass of [UncancellableTier, DefinedBeforeStatement, DefinedAfterStatement]) {
        tier = createFromC(klass);
        assertEqual(tier.get_can_cancel_stores(), false, `${klass.name} can cancel stores`);
        assertEqual(tier.get_accepts_cascaded_stores(), true, `${klass.name} accepts`);
        tier.shutdown();
    }

    tier = GObject.Object.new_with_properties(UncancellableTier.$gtype, [], []);
    assertEqual(tier.get_can_cancel_stores(), false, 'can cancel stores (new_with_properties)');

    tier = createFromC(HoldingTier);
    assertEqual(tier.get_can_cancel_stores(), true, 'default can cancel stores');
    assertEqual(tier.get_accepts_cascaded_stores(), true, 'default accepts');
    tier.shutdown();
});

test('an instance may narrow its class, never widen it', () => {
    const buffer = Kv.HostBuffer.new(4, 4096);
    const widened = new FetchOnlyTier({
        primary: buffer, can_cancel_stores: true, accepts_cascaded_stores: true,
    });
    assertEqual(widened.get_can_cancel_stores(), false, 'widened can cancel stores');
    assertEqual(widened.get_accepts_cascaded_stores(), false, 'widened accepts');
    const narrowed = new HoldingTier({primary: buffer, can_cancel_stores: false});
    assertEqual(narrowed.get_can_cancel_stores(), false, 'narrowed can cancel stores');
});

test('the manager makes no cascade job for a fetch-only class', () => {
    const engine = new Engine();
    const tier = createFromC(FetchOnlyTier, engine.buffer);
    engine.manager.add_tier(tier);
    const req = Kv.Request.new('r', null);
    engine.manager.on_new_request(req);
    engine.store(req, [0, 1]);
    engine.step();
    assertEqual(tier.jobs.length, 0, 'jobs submitted');
    assertEqual(engine.manager.get_n_active_jobs(), 0, 'active jobs');
    assertEqual(engine.primary.get_n_evictable(), 2, 'evictable chunks');
    engine.manager.on_request_finished(req);
    engine.manager.shutdown();
});

test('the manager keeps the pins of an uncancellable class past the deadline', () => {
    const engine = new Engine();
    const tier = createFromC(UncancellableTier, engine.buffer);
    tier.deadline_ms = 50;
    engine.manager.add_tier(tier);
    const req = Kv.Request.new('r', null);
    engine.manager.on_new_request(req);
    engine.store(req, [0]);
    engine.step();
    assertEqual(tier.jobs.length, 1, 'stores submitted');
    assert(tier.drain_jobs(), 'drain_jobs');
    assertEqual(tier.get_n_expired_jobs(), 1, 'jobs failed at the deadline');
    engine.step();
    engine.step();
    assertEqual(engine.primary.get_ref_count(engine.keys[0])[1], 1, 'pin after the deadline');
    tier.complete_job(Kv.JobResult.new(tier.jobs[0].get_id(), true));
    engine.step();
    engine.step();
    assertEqual(engine.primary.get_ref_count(engine.keys[0])[1], 0, 'pin once reported');
    engine.manager.on_request_finished(req);
    engine.manager.shutdown();
});

function assertTierError(code, fn, what) {
    assertThrows(fn, e => {
        assert(e.matches(Kv.tier_error_quark(), code), `${what}: ${e}`);
    }, what);
}

test('misuse is an error', () => {
    assertTierError(Kv.TierError.INVALID_ARGUMENT,
        () => Kv.SecondaryTier.type_set_can_cancel_stores(Kv.HostBuffer, false),
        'a type that is not a tier');
    assertTierError(Kv.TierError.INVALID_ARGUMENT,
        () => Kv.SecondaryTier.type_set_can_cancel_stores(Kv.SecondaryTier, false),
        'the base class');

    const Instantiated = GObject.registerClass({GTypeName: 'JsInstantiatedTier'},
        class Instantiated extends HoldingTier {});
    new Instantiated({primary: Kv.HostBuffer.new(4, 4096)});
    assertTierError(Kv.TierError.BUSY,
        () => Kv.SecondaryTier.type_set_lazy_promotion_allocation(Instantiated, true),
        'after an instance');
    const later = new Instantiated({primary: Kv.HostBuffer.new(4, 4096)});
    assertEqual(later.get_lazy_promotion_allocation(), false, 'refused: unchanged');
});

run();
