// SPDX-License-Identifier: LGPL-2.1-or-later
//
// Kv.PinLease from JavaScript: a tier pins chunks that are ready in the
// primary tier through the Kv.ParentManager it is handed at each step,
// reads which keys are pinned and in which slots, and releases the lease
// once; while it is held the chunks are not evicted and reset_cache() is
// BUSY.

import GObject from 'gi://GObject';
import Kv from 'gi://Kv?version=1';

import {Engine, pattern} from './engine.js';
import {assert, assertBytesEqual, assertDeepEqual, assertEqual, assertThrows, run, test}
    from './harness.js';

const NO_SLOT = 0xffffffff;     // G_MAXUINT32: a key the lease did not pin

// Stores nothing of its own; keeps the parent manager it is handed, as a
// tier that serves chunks to other nodes does.
const ServingTier = GObject.registerClass({GTypeName: 'JsPinServingTier'},
class ServingTier extends Kv.SecondaryTier {
    vfunc_lookup(_key, _request) {
        return Kv.LookupResult.MISS;
    }

    vfunc_on_new_request(_request) {
        return Kv.OffloadPolicy.CHUNK_LEVEL;
    }

    vfunc_submit_store(_job) {
        throw new Error('a fetch-only tier takes no store');
    }

    vfunc_submit_load(_job) {
        throw new Error('nothing to load');
    }

    vfunc_serve_external_requests(parent) {
        this.parent = parent;
    }
});

function serve() {
    const engine = new Engine({nSlots: 4});
    const tier = new ServingTier({
        primary: engine.buffer, tier_type: 'serving', accepts_cascaded_stores: false,
    });
    engine.manager.add_tier(tier);
    const req = Kv.Request.new('r', null);
    engine.manager.on_new_request(req);
    engine.step();
    assert(tier.parent instanceof Kv.ParentManager, 'handed a parent manager');
    return {engine, parent: tier.parent, req};
}

function finish({engine, req}) {
    engine.manager.on_request_finished(req);
    engine.manager.shutdown();
}

function refCount(engine, i) {
    return engine.primary.get_ref_count(engine.keys[i])[1];
}

test('a lease says which keys it pinned, and where', () => {
    const served = serve();
    const {engine, parent, req} = served;
    engine.store(req, [0, 1]);
    engine.step();
    const [found0, slot0] = engine.primary.get_chunk_id(engine.keys[0]);
    const [found1, slot1] = engine.primary.get_chunk_id(engine.keys[1]);
    assert(found0 && found1, 'stored');

    const asked = [0, 5, 1, 0];     // key 5 is not in the primary tier
    const lease = parent.pin(asked.map(i => engine.keys[i]));
    assert(lease instanceof Kv.PinLease, 'a Kv.PinLease');
    assertEqual(lease.get_n_keys(), 4, 'keys');
    assertEqual(lease.get_n_pinned(), 3, 'pinned keys');
    assertDeepEqual(asked.map((_, n) => lease.get_key(n).to_string()),
        asked.map(i => engine.keys[i].to_string()), 'keys in order');
    assertDeepEqual(asked.map((_, n) => lease.is_pinned(n)), [true, false, true, true],
        'is_pinned');
    assertDeepEqual(asked.map((_, n) => lease.get_chunk_id(n)),
        [slot0, NO_SLOT, slot1, slot0], 'chunk ids');
    assertDeepEqual(Array.from(lease.get_chunk_ids()), [slot0, NO_SLOT, slot1, slot0],
        'get_chunk_ids');
    assertBytesEqual(engine.buffer.read_slot(slot1).toArray(), pattern(1), 'slot bytes');
    assertEqual(refCount(engine, 0), 2, 'key 0 asked twice: pins');
    assertEqual(engine.manager.get_n_active_jobs(), 0, 'jobs');

    assert(lease.release(true), 'release');
    assertEqual(refCount(engine, 0), 2, 'pins before the next step');
    engine.step();
    assertEqual(refCount(engine, 0), 0, 'pins of key 0 after the step');
    assertEqual(refCount(engine, 1), 0, 'pins of key 1 after the step');

    assertThrows(() => lease.release(true), e => {
        assert(e.matches(Kv.tier_error_quark(), Kv.TierError.INVALID_ARGUMENT),
            `second release: ${e}`);
    }, 'second release');
    finish(served);
});

test('a leased chunk is not evicted, and reset_cache is BUSY while held', () => {
    const served = serve();
    const {engine, parent, req} = served;
    engine.store(req, [0, 1, 2, 3]);
    engine.step();
    assertEqual(engine.primary.get_n_free(), 0, 'free slots');
    const lease = parent.pin([engine.keys[0]]);
    const slot = lease.get_chunk_id(0);

    // three new chunks evict the three unleased ones, never the leased one
    engine.store(req, [8, 9, 10]);
    engine.step();
    assertEqual(engine.primary.lookup(engine.keys[0]), Kv.LookupResult.HIT, 'leased key');
    for (const i of [1, 2, 3])
        assertEqual(engine.primary.lookup(engine.keys[i]), Kv.LookupResult.MISS, `key ${i}`);
    assertBytesEqual(engine.buffer.read_slot(slot).toArray(), pattern(0), 'leased slot');

    assertThrows(() => engine.manager.reset_cache(), e => {
        assert(e.matches(Kv.tier_error_quark(), Kv.TierError.BUSY), `reset_cache: ${e}`);
        assert(e.message.includes('pin lease'), `reset_cache message: ${e.message}`);
    }, 'reset_cache while leased');
    assertEqual(refCount(engine, 0), 1, 'pins while leased');

    assert(lease.release(false), 'release');
    engine.step();
    assertEqual(refCount(engine, 0), 0, 'pins after the step');
    assert(engine.manager.reset_cache(), 'reset_cache');
    assertEqual(engine.primary.lookup(engine.keys[0]), Kv.LookupResult.MISS, 'after reset');
    finish(served);
});

run();
