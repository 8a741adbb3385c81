# SPDX-License-Identifier: LGPL-2.1-or-later
"""Stand-ins for vLLM's KV-offload data types, for when vLLM is not installed.

:mod:`kvtier.vllm` uses vLLM's own classes (``vllm.v1.kv_offload.base`` and
``vllm.v1.kv_offload.tiering.base``) when it can import them. Without vLLM
it uses these, written from the behaviour reference
(doc/vllm.md lists what each one is): the same names, fields, defaults and
comparison rules, so that code written against vLLM's types (a tier, or a
test engine replaying vLLM's calls) runs unchanged against the adapter.

Nothing here talks to kvtier; see :mod:`kvtier.vllm` for the adapter.
"""

import abc
import dataclasses
import enum
import time
from typing import Any, ClassVar, NamedTuple, Optional

__all__ = [
    'JobResult', 'Locality', 'LookupResult', 'Medium', 'OffloadPolicy', 'OffloadingEvent',
    'ReqContext', 'RequestOffloadingContext', 'ScheduleEndContext', 'SecondaryTierManager',
    'TierFilter', 'TierMatcher', 'TieringStats', 'TransferJob',
    'get_offload_block_hash', 'get_offload_group_idx', 'make_offload_key',
]


# ---- keys: block hash followed by the group index, 4 bytes big-endian --------

def make_offload_key(block_hash, group_idx):
    return bytes(block_hash) + int(group_idx).to_bytes(4, 'big')


def get_offload_block_hash(key):
    return key[:-4]


def get_offload_group_idx(key):
    return int.from_bytes(key[-4:], 'big')


# ---- enumerations -------------------------------------------------------------

class Medium(enum.Enum):
    CPU = 'CPU'
    STORAGE = 'STORAGE'


class Locality(enum.Enum):
    # Built from a string by exact, case-sensitive value: Locality('local')
    # raises ValueError, as vLLM's does.
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


# ---- per-request load filter -----------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TierMatcher:
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
        if self is TierFilter.ALL:
            return True
        return any(m.matches(medium, locality) for m in self.matchers)


TierFilter.ALL = TierFilter((TierMatcher(),))


# ---- request and step contexts -------------------------------------------------

class ReqContext:
    """One request, as every lookup of it sees it; tiers keep parsed
    per-request state in it with :meth:`set_state`, keyed by type."""

    def __init__(self, req_id, kv_transfer_params=None, load_tier_filter=TierFilter.ALL):
        self.req_id = req_id
        self.kv_transfer_params = kv_transfer_params
        self.load_tier_filter = load_tier_filter
        self._state = {}

    def set_state(self, value):
        self._state[type(value)] = value

    def get_state(self, cls):
        return self._state.get(cls)

    def __repr__(self):
        return f'ReqContext(req_id={self.req_id!r})'


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


# ---- jobs ----------------------------------------------------------------------

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
    success: bool
    successful_keys: Any = None
    transfer_time: Optional[float] = None
    transfer_bytes: Optional[int] = None


# ---- statistics ----------------------------------------------------------------

class TieringStats:
    """The shape of vLLM's offloading stats container: values by metric
    name and label tuple, taken and reset by ``get_stats()``."""

    def __init__(self):
        self.data = {'data': {}}
        self.gauges = set()         # names whose values are set, not summed

    def _slot(self, name, labelvalues):
        return self.data['data'].setdefault(name, {}), tuple(labelvalues)

    def increase_counter(self, name, value=1, labelvalues=()):
        values, labels = self._slot(name, labelvalues)
        values[labels] = values.get(labels, 0) + value

    def set_gauge(self, name, value, labelvalues=()):
        values, labels = self._slot(name, labelvalues)
        values[labels] = value
        self.gauges.add(name)

    def observe_histogram(self, name, value, labelvalues=()):
        values, labels = self._slot(name, labelvalues)
        values.setdefault(labels, []).append(value)

    def aggregate(self, other):
        gauges = getattr(other, 'gauges', set())
        self.gauges |= gauges
        for name, values in other.data['data'].items():
            mine = self.data['data'].setdefault(name, {})
            for labels, value in values.items():
                if isinstance(value, list):
                    mine.setdefault(labels, []).extend(value)
                elif labels in mine and name not in gauges:
                    mine[labels] += value
                else:
                    mine[labels] = value
        return self

    def is_empty(self):
        return not self.data['data']

    def reduce(self):
        flat = {}
        for name, values in self.data['data'].items():
            for labels, value in values.items():
                if isinstance(value, list):
                    flat[f'{name}_count:{labels!r}'] = len(value)
                    flat[f'{name}_sum:{labels!r}'] = sum(value)
                else:
                    flat[f'{name}:{labels!r}'] = value
        return flat


# ---- the secondary-tier interface -------------------------------------------------

class SecondaryTierManager(abc.ABC):
    """vLLM's secondary-tier interface: every method runs on the scheduler
    thread and returns at once; jobs are reported by polling
    :meth:`get_finished_jobs`, each exactly once."""

    medium: ClassVar[Optional[Medium]] = None

    def __init__(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None
        self._bp_detector = backpressure_detector
        self.block_size_bytes = memoryview(primary_kv_view).strides[0]

    @property
    def bp_detector(self):
        return self._bp_detector

    @abc.abstractmethod
    def lookup(self, key, req_context):
        ...

    @abc.abstractmethod
    def submit_store(self, job):
        ...

    @abc.abstractmethod
    def submit_load(self, job):
        ...

    @abc.abstractmethod
    def get_finished_jobs(self):
        ...

    @abc.abstractmethod
    def on_new_request(self, req_context):
        ...

    @abc.abstractmethod
    def drain_jobs(self):
        ...

    def has_pending_work(self):
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context):
        pass

    def on_request_finished(self, req_context):
        pass

    def serve_external_requests(self, parent):
        pass

    def on_schedule_end(self, ctx):
        pass

    def shutdown(self):
        pass

    @classmethod
    def build_metric_definitions(cls, extra_config=None):
        return {}

    def get_stats(self):
        return None
