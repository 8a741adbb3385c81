# SPDX-License-Identifier: LGPL-2.1-or-later
"""Stand-ins for vLLM's KV-offload types, for when vLLM is not importable.

:mod:`kvtier.vllm` uses vLLM's own classes when it can import them
(``vllm.v1.kv_offload.base``, ``vllm.v1.kv_offload.tiering.base`` and the
offloading connector's ``metrics`` module). Without vLLM it uses these:
written for kvtier from what vLLM's files of the tiering layer say (the
version of ``tiering/base.py`` whose jobs are ``TransferJob`` with
``chunk_ids`` and whose tiers take a ``backpressure_detector``, and the
``ReqContext`` that carries ``kv_hints``): the same names, fields, field
order, defaults, methods and assertions, so that code written against
vLLM's types (a tier, a test engine replaying vLLM's calls) behaves the
same against them.

Nothing here talks to kvtier; see :mod:`kvtier.vllm` for the adapter.
"""

import abc
import dataclasses
import enum
import time
from typing import Any, ClassVar, NamedTuple, Optional

__all__ = [
    'JobResult', 'Locality', 'LookupResult', 'Medium', 'OffloadPolicy',
    'OffloadingConnectorStats', 'OffloadingCounterMetadata', 'OffloadingEvent',
    'OffloadingGaugeMetadata', 'OffloadingHistogramMetadata', 'OffloadingMetricMetadata',
    'ParentManager', 'ReqContext', 'RequestOffloadingContext', 'ScheduleEndContext',
    'SecondaryTierManager', 'TierFilter', 'TierMatcher', 'TieringOffloadingMetrics',
    'TransferJob', 'get_offload_block_hash', 'get_offload_group_idx', 'make_offload_key',
]


# ---- keys: the block hash, then the group index as 4 bytes big-endian -------

def make_offload_key(block_hash, group_idx):
    return bytes(block_hash) + int(group_idx).to_bytes(4, 'big', signed=False)


def get_offload_block_hash(key):
    return key[:-4]


def get_offload_group_idx(key):
    return int.from_bytes(key[-4:], 'big', signed=False)


# ---- enumerations ------------------------------------------------------------

class Medium(enum.Enum):
    CPU = 'CPU'
    STORAGE = 'STORAGE'


class Locality(enum.Enum):
    # Built from a string by exact value: Locality('local') raises
    # ValueError, as vLLM's does.
    LOCAL = 'LOCAL'
    REMOTE = 'REMOTE'


class LookupResult(enum.Enum):
    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


class OffloadPolicy(enum.Enum):
    CHUNK_LEVEL = 'chunk_level'
    REQUEST_LEVEL = 'request_level'


# ---- the per-request load filter ------------------------------------------------

class TierMatcher(NamedTuple):
    medium: Optional[Medium] = None
    locality: Optional[Locality] = None

    def matches(self, medium, locality):
        return ((self.medium is None or medium is None or self.medium == medium) and
                (self.locality is None or locality is None or self.locality == locality))


@dataclasses.dataclass(frozen=True)
class TierFilter:
    matchers: tuple = ()

    ALL: ClassVar['TierFilter']

    def allows(self, medium, locality):
        # ALL is told apart by identity: an equal filter built elsewhere
        # goes through its matchers.
        if self is TierFilter.ALL:
            return True
        return any(m.matches(medium, locality) for m in self.matchers)


TierFilter.ALL = TierFilter(matchers=(TierMatcher(),))


# ---- request and step contexts -----------------------------------------------

@dataclasses.dataclass
class ReqContext:
    """One request as every call about it sees it. ``kv_hints`` sits between
    the parameters and the filter, so only a ReqContext built by keyword
    means the same on a vLLM with and without it."""

    req_id: str
    kv_transfer_params: Optional[dict] = None
    kv_hints: Any = None
    load_tier_filter: TierFilter = TierFilter.ALL
    # Per-request scratch space keyed by the value's type.
    _state: dict = dataclasses.field(default_factory=dict, repr=False, init=False)
    _offload_key_positions: dict = dataclasses.field(default_factory=dict, repr=False,
                                                     init=False)

    def set_state(self, val):
        self._state[type(val)] = val

    def get_state(self, cls):
        return self._state.get(cls)

    def set_offload_key_position(self, key, end_token):
        self._offload_key_positions[key] = end_token

    def get_offload_key_position(self, key):
        return self._offload_key_positions.get(key)


@dataclasses.dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.CHUNK_LEVEL


class ScheduleEndContext(NamedTuple):
    new_req_ids: Any
    preempted_req_ids: Any


@dataclasses.dataclass
class OffloadingEvent:
    keys: list
    medium: Medium
    removed: bool
    locality: Optional[Locality] = None
    ownership: Optional[str] = None
    removal_expected: bool = False


# ---- metric definitions -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: tuple = ()


@dataclasses.dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclasses.dataclass(frozen=True)
class OffloadingGaugeMetadata(OffloadingMetricMetadata):
    pass


@dataclasses.dataclass(frozen=True)
class OffloadingHistogramMetadata(OffloadingMetricMetadata):
    buckets: Optional[tuple] = None


class TieringOffloadingMetrics:
    """The names of the tiering manager's own metrics."""

    LOOKUP_SYNC_DELAY = 'vllm:kv_offload_tiering_lookup_sync_delay_seconds'
    LOOKUP_ASYNC_DELAY = 'vllm:kv_offload_tiering_lookup_async_delay_seconds'
    READ_BYTES = 'vllm:kv_offload_tiering_read_bytes'
    READ_TIME = 'vllm:kv_offload_tiering_read_time'
    WRITE_BYTES = 'vllm:kv_offload_tiering_write_bytes'
    WRITE_TIME = 'vllm:kv_offload_tiering_write_time'
    PROMOTION_JOB_FAILURES = 'vllm:kv_offload_tiering_promotion_job_failures'
    CASCADE_JOB_FAILURES = 'vllm:kv_offload_tiering_cascade_job_failures'
    CHUNK_QUERIES = 'vllm:kv_offload_tiering_chunk_queries'
    CHUNK_HITS = 'vllm:kv_offload_tiering_chunk_hits'
    PRIMARY_WRITE_USAGE_PERC = 'vllm:kv_offload_tiering_primary_write_usage_perc'
    PRIMARY_READ_USAGE_PERC = 'vllm:kv_offload_tiering_primary_read_usage_perc'
    PROMOTION_ALLOCATION_FAILURES = 'vllm:kv_offload_tiering_promotion_allocation_failures'
    ACTIVE_PROMOTION_JOBS = 'vllm:kv_offload_tiering_active_promotion_jobs'
    ACTIVE_CASCADE_JOBS = 'vllm:kv_offload_tiering_active_cascade_jobs'
    BACKPRESSURE_STORE_LATENCY_EMA = 'vllm:kv_offload_tiering_backpressure_store_latency_ema'
    BACKPRESSURE_STORES_DROPPED = 'vllm:kv_offload_tiering_backpressure_stores_dropped'
    BACKPRESSURE_BLOCKS_DROPPED = 'vllm:kv_offload_tiering_backpressure_blocks_dropped'


# ---- the stats container ----------------------------------------------------------

_TYPES, _DATA = 'types', 'data'
_COUNTER, _GAUGE, _HISTOGRAM = 'counter', 'gauge', 'histogram'


@dataclasses.dataclass
class OffloadingConnectorStats:
    """vLLM's offloading stats: ``data`` is ``{"types": {name: "counter" |
    "gauge" | "histogram"}, "data": {name: {labelvalues: value}}}``, a
    number per label tuple, a list of observations for a histogram. It is
    self-describing, so it survives vLLM's IPC to the process that owns the
    Prometheus families. Counters add up, gauges keep the latest value,
    histograms concatenate."""

    data: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if _DATA not in self.data:
            self.reset()

    def reset(self):
        self.data = {_TYPES: {}, _DATA: {}}

    @property
    def _types(self):
        return self.data[_TYPES]

    @property
    def _values(self):
        return self.data[_DATA]

    def aggregate(self, other):
        if other.is_empty():
            return self
        assert isinstance(other, OffloadingConnectorStats)
        for name, by_labels in other._values.items():
            kind = other._types.get(name)
            if kind is None:
                raise AssertionError(f'Unknown offloading stats key: {name}')
            self._types.setdefault(name, kind)
            mine = self._values.setdefault(name, {})
            for labelvalues, value in by_labels.items():
                if kind == _HISTOGRAM:
                    assert isinstance(value, list)
                    if labelvalues in mine:
                        assert isinstance(mine[labelvalues], list)
                        mine[labelvalues].extend(value)
                    else:
                        mine[labelvalues] = list(value)
                elif kind == _COUNTER:
                    assert isinstance(value, (int, float))
                    mine[labelvalues] = mine.get(labelvalues, 0) + value
                elif kind == _GAUGE:
                    assert isinstance(value, (int, float))
                    mine[labelvalues] = value
                else:
                    raise AssertionError(f"Unknown metric type '{kind}' for key: {name}")
        return self

    def reduce(self):
        """Flat ``{"name:labeltuple": number}`` (just ``"name"`` without
        labels); a histogram as ``..._count`` and ``..._sum``."""
        flat = {}
        for name, by_labels in self._values.items():
            kind = self._types.get(name)
            if kind is None:
                raise AssertionError(f'Unknown offloading stats key: {name}')
            for labelvalues, value in by_labels.items():
                key = f'{name}:{labelvalues}' if labelvalues else name
                if kind == _HISTOGRAM:
                    assert isinstance(value, list)
                    flat[f'{key}_count'] = len(value)
                    flat[f'{key}_sum'] = sum(value)
                elif kind in (_COUNTER, _GAUGE):
                    assert isinstance(value, (int, float))
                    flat[key] = value
                else:
                    raise AssertionError(f"Unknown metric type '{kind}' for key: {name}")
        return flat

    def is_empty(self):
        return not self.data.get(_DATA)

    def increase_counter(self, counter_name, counter_increase_value=1, labelvalues=()):
        self._types.setdefault(counter_name, _COUNTER)
        values = self._values.setdefault(counter_name, {})
        values[labelvalues] = values.get(labelvalues, 0) + counter_increase_value

    def set_gauge(self, gauge_name, gauge_value, labelvalues=()):
        self._types.setdefault(gauge_name, _GAUGE)
        self._values.setdefault(gauge_name, {})[labelvalues] = gauge_value

    def observe_histogram(self, histogram_name, histogram_value, labelvalues=()):
        self._types.setdefault(histogram_name, _HISTOGRAM)
        self._values.setdefault(histogram_name, {}).setdefault(labelvalues, []).append(
            histogram_value)


# ---- jobs ------------------------------------------------------------------------

@dataclasses.dataclass
class TransferJob:
    job_id: int
    keys: Any
    chunk_ids: Any
    is_promotion: bool
    req_context: ReqContext
    submit_time: float = dataclasses.field(default_factory=time.monotonic)


@dataclasses.dataclass
class JobResult:
    job_id: int
    # True only when every key landed.
    success: bool
    # Promotions only: the keys that did land, a subset of the job's; None
    # when every key shares `success`.
    successful_keys: Any = None
    transfer_time: Optional[float] = None
    transfer_bytes: Optional[int] = None


# ---- the interfaces ------------------------------------------------------------------

class ParentManager(abc.ABC):
    """The tiering manager as a tier serving remote requests sees it,
    during ``serve_external_requests`` only: ``on_new_request``, then
    ``lookup`` and ``create_store_job`` (None when the store was not
    admitted), and ``on_request_finished`` always."""

    @abc.abstractmethod
    def on_new_request(self, req_context):
        ...

    @abc.abstractmethod
    def lookup(self, key, req_context):
        ...

    @abc.abstractmethod
    def create_store_job(self, keys, req_context):
        ...

    @abc.abstractmethod
    def on_request_finished(self, req_context):
        ...


class SecondaryTierManager(abc.ABC):
    """vLLM's secondary-tier interface: every method runs on the scheduler
    thread and returns at once; jobs are reported by polling
    :meth:`get_finished_jobs`, each exactly once."""

    medium: ClassVar[Optional[Medium]] = None

    def __init__(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        assert primary_kv_view.strides is not None, 'primary_kv_view.strides cannot be None'
        self._block_size_bytes = primary_kv_view.strides[0]
        self.tier_type = tier_type
        self.locality = None
        self._bp_detector = backpressure_detector

    @property
    def block_size_bytes(self):
        return self._block_size_bytes

    @property
    def bp_detector(self):
        return self._bp_detector

    @abc.abstractmethod
    def lookup(self, key, req_context):
        ...

    @abc.abstractmethod
    def submit_store(self, job_metadata):
        ...

    @abc.abstractmethod
    def submit_load(self, job_metadata):
        ...

    @abc.abstractmethod
    def get_finished_jobs(self):
        ...

    def has_pending_work(self):
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context):
        return

    @abc.abstractmethod
    def on_new_request(self, req_context):
        ...

    def on_request_finished(self, req_context):
        return

    def serve_external_requests(self, parent):
        return

    def on_schedule_end(self, context):
        return

    @abc.abstractmethod
    def drain_jobs(self):
        ...

    def shutdown(self):
        return

    @classmethod
    def build_metric_definitions(cls, extra_config):
        return {}

    def get_stats(self):
        return None
