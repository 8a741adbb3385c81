# SPDX-License-Identifier: LGPL-2.1-or-later
"""The adapter's stats in a real Prometheus client, as vLLM exports them.

vLLM's observer (OffloadPromMetrics) creates one prometheus_client family
per name its spec declares (build_metric_definitions(): documentation,
vLLM's engine label then the metric's labels, buckets), then for every
scrape adds each counter, sets each gauge and observes each histogram
value of the aggregated OffloadingConnectorStats; a name, kind or label
count it was not told about raises. Here an fs tier and a tier with a
histogram run under the stand-in manager, and what the Prometheus client
holds afterwards is read back: the counters equal what the tier did, the
histogram's buckets, count and sum are kvtier's own. With
KVTIER_VLLM_SOURCE, vLLM's own OffloadPromMetrics is the observer."""

import importlib
import os
import types as pytypes

import pytest

pytest.importorskip('numpy')
prometheus_client = pytest.importorskip(
    'prometheus_client',
    reason='prometheus_client (Debian: python3-prometheus-client) is not installed')

import kvtier.vllm as kvv  # noqa: E402
from conftest import VLLM_SOURCE  # noqa: E402
from gi.repository import Kv  # noqa: E402
from kvtier.vllm import types as T  # noqa: E402
from test_vllm_adapter import (HISTOGRAM, HISTOGRAM_BUCKETS, ROW,  # noqa: E402
                               histogram_registry, registry)
from vllm_engine import (MANAGER_GAUGE, Engine, SharedRegion,  # noqa: E402
                         TieringManager, create_secondary_tier, metric_definitions)

ENGINE_LABELS = ['engine']          # vLLM's per-engine labels come first


class Observer:
    """What vLLM's OffloadPromMetrics does, on a registry of its own."""

    def __init__(self, definitions):
        self.registry = prometheus_client.CollectorRegistry()
        self.definitions = dict(definitions)
        self.families = {}
        for name, metadata in self.definitions.items():
            kwargs = dict(name=name, documentation=metadata.documentation,
                          labelnames=ENGINE_LABELS + list(metadata.labelnames),
                          registry=self.registry)
            if isinstance(metadata, T.OffloadingCounterMetadata):
                family = prometheus_client.Counter(**kwargs)
            elif isinstance(metadata, T.OffloadingGaugeMetadata):
                family = prometheus_client.Gauge(**kwargs)
            else:
                assert isinstance(metadata, T.OffloadingHistogramMetadata)
                if metadata.buckets is not None:
                    kwargs['buckets'] = metadata.buckets
                family = prometheus_client.Histogram(**kwargs)
            self.families[name] = family

    def observe(self, data, engine_idx=0):
        for name, by_labels in data['data'].items():
            kind = data['types'].get(name)
            assert kind is not None, f'Unknown offloading stats key: {name}'
            assert name in self.families, f'{name} was never declared to vLLM'
            metadata = self.definitions[name]
            for labels, value in by_labels.items():
                assert len(labels) == len(metadata.labelnames), (name, labels)
                metric = self.families[name].labels(str(engine_idx), *labels)
                if kind == 'counter':
                    metric.inc(value)
                elif kind == 'gauge':
                    metric.set(value)
                else:
                    assert kind == 'histogram' and isinstance(value, list), (name, kind)
                    for observation in value:
                        metric.observe(observation)

    def value(self, name, labels):
        return self.registry.get_sample_value(name, dict(zip(ENGINE_LABELS, ['0']), **labels))

    def bucket_samples(self, name, labels):
        """{le: value} of every `<name>_bucket` sample with these labels."""
        want = dict(zip(ENGINE_LABELS, ['0']), **labels)
        return {s.labels['le']: s.value for f in self.registry.collect()
                for s in f.samples if s.name == f'{name}_bucket' and
                {k: v for k, v in s.labels.items() if k != 'le'} == want}

    def counter_total(self, name):
        """A counter family's value summed over its label sets (None: no
        sample), by the name it was declared under."""
        family = name[:-len('_total')] if name.endswith('_total') else name
        values = [s.value for f in self.registry.collect() if f.name == family
                  for s in f.samples if s.name == family + '_total']
        return sum(values) if values else None


class VllmObserver(Observer):
    """vLLM's own OffloadPromMetrics, given a configuration whose spec
    declares what the stand-in manager and its tiers report (the fan-out
    vLLM's TieringOffloadingSpec does over secondary_tiers)."""

    def __init__(self, extra_config):
        offloading_metrics = importlib.import_module(
            'vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics')
        manager_gauge = metric_definitions([])

        class Spec:
            @classmethod
            def build_metric_definitions(cls, extra):
                definitions = dict(manager_gauge)
                for entry in extra['secondary_tiers']:
                    tier_cls = getattr(importlib.import_module(entry['module_path']),
                                       entry['type'])
                    definitions.update(tier_cls.build_metric_definitions(entry))
                return definitions

        self.registry = prometheus_client.CollectorRegistry()
        metric_types = {}
        for cls in (prometheus_client.Counter, prometheus_client.Gauge,
                    prometheus_client.Histogram):
            metric_types[cls] = type(cls.__name__, (cls,), {
                '__init__': lambda s, *a, _cls=cls, **k: _cls.__init__(
                    s, *a, registry=self.registry, **k)})
        config = pytypes.SimpleNamespace(kv_transfer_config=pytypes.SimpleNamespace(
            kv_connector_extra_config=extra_config))
        factory = offloading_metrics.OffloadingSpecFactory
        saved = factory.__dict__.get('get_spec_cls')
        factory.get_spec_cls = staticmethod(lambda extra: Spec)
        try:
            self.prom = offloading_metrics.OffloadPromMetrics(
                config, metric_types, list(ENGINE_LABELS), {0: ['0']})
        finally:
            if saved is None:
                del factory.get_spec_cls
            else:
                factory.get_spec_cls = saved

    def observe(self, data, engine_idx=0):
        self.prom.observe(data, engine_idx)


def make_observer(extra_config, definitions):
    if not VLLM_SOURCE:
        return Observer(definitions)
    try:
        importlib.import_module('vllm.v1.kv_offload.cpu.spec')
    except ImportError as error:
        pytest.skip(f"vLLM's OffloadPromMetrics imports vllm.v1.kv_offload.cpu.spec, "
                    f'which does not import here: {error}')
    return VllmObserver(extra_config)


def test_stats_in_a_prometheus_client(tmp_path):
    region = SharedRegion(f'/dev/shm/kvtier-test-vllm-prom-{os.getpid()}.mmap', 16, ROW)
    entries = [
        {'type': 'KvtierSecondaryTier', 'module_path': 'kvtier.vllm',
         'tier': {'type': 'fs', 'root': str(tmp_path)}, 'registry': registry},
        {'type': 'KvtierSecondaryTier', 'module_path': 'kvtier.vllm',
         'tier': {'type': 'histogram-tier'}, 'registry': histogram_registry},
    ]
    tiers = [create_secondary_tier(entry, region.create_kv_memoryview()) for entry in entries]
    manager = TieringManager(region.n_chunks, tiers)
    observer = make_observer({'secondary_tiers': entries}, manager.observer.definitions)
    checked = manager.observer.observe          # the stand-in's checks, then Prometheus

    def observe(data):
        checked(data)
        observer.observe(data)
    manager.observer.observe = observe
    # kvtier's own count of the histogram, in its buckets, as a /metrics
    # endpoint's cumulative stats keep it
    kvtier_metrics = Kv.MetricRegistry.new()
    kvtier_metrics.add_histogram(HISTOGRAM, 'Test read time', ['tier', 'op'],
                                 list(HISTOGRAM_BUCKETS))
    tiers[1].kvtier_tier.seen = Kv.Stats.new_for_registry(kvtier_metrics)
    try:
        # values in every bucket, on the bounds (a bucket holds its upper
        # bound) and beyond the last, over several scrapes
        tiers[1].kvtier_tier.observations = [0.002, 0.04, 3.0, 0.001, 0.0001]
        Engine(manager, region).run([(f'r{i}', [4 * i + c for c in range(4)])
                                     for i in range(3)])
        manager.drain()
        manager.scrape()
        assert not manager.tracker.jobs and manager.failed_cascades == 0
        for observations in ([0.5, 0.01, 1.0, 7.5, 0.05, 0.05], [0.0002], [42.0, 0.3]):
            tiers[1].kvtier_tier.observations = observations
            manager.scrape()

        # the names are the library's (build_metric_definitions reads them;
        # kvtier:fs_bytes_written is renamed kvtier_fs_written_bytes)
        names = manager.observer.definitions
        [stored] = [n for n in names if 'fs_stored_chunks' in n]
        [written] = [n for n in names if 'fs_' in n and 'written' in n and 'bytes' in n]
        assert observer.counter_total(stored) == 12
        assert observer.counter_total(written) >= 12 * ROW
        hist = {'tier': 'hist', 'op': 'read'}
        counts, total = tiers[1].kvtier_tier.seen.get_histogram_buckets(
            HISTOGRAM, ['hist', 'read'], list(HISTOGRAM_BUCKETS))
        assert counts == [3, 2, 3, 3, 3] and total == pytest.approx(54.4533)
        assert observer.value(f'{HISTOGRAM}_count', hist) == sum(counts)
        assert observer.value(f'{HISTOGRAM}_sum', hist) == pytest.approx(total)
        # every bucket sample of the registry is kvtier's cumulative count
        buckets = observer.bucket_samples(HISTOGRAM, hist)
        bounds = [str(float(b)) for b in HISTOGRAM_BUCKETS] + ['+Inf']
        assert sorted(buckets) == sorted(bounds)
        cumulative = 0
        for le, count in zip(bounds, counts):
            cumulative += count
            assert buckets[le] == cumulative, (le, buckets, counts)
        text = prometheus_client.generate_latest(observer.registry).decode()
        assert f'# TYPE {HISTOGRAM} histogram' in text
        assert f'# HELP {stored}' in text
        assert MANAGER_GAUGE in text
    finally:
        manager.shutdown()
        region.cleanup()
