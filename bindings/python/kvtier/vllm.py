# SPDX-License-Identifier: LGPL-2.1-or-later
"""kvtier tiers inside vLLM, and vLLM tiers inside kvtier.

:class:`KvtierSecondaryTier` is a vLLM secondary tier (vLLM's
``SecondaryTierManager`` interface) that does its work with any kvtier tier
(``fs``, ``example``, a plugin's, one written in Python), built from a
kvtier configuration section. vLLM loads it by module path from its tier
list in ``kv_connector_extra_config``::

    "secondary_tiers": [{
        "type": "KvtierSecondaryTier",
        "module_path": "kvtier.vllm",
        "tier": {"type": "fs", "root": "/mnt/nvme/kv", "max-size": "500GiB"}
    }]

No byte is copied between vLLM and the kvtier tier: vLLM's primary memory
is a file mapped by every process (``/dev/shm/vllm_offload_*.mmap``); the
adapter finds that file from the address of the view vLLM gives it, maps
the same file as a ``Kv.HostBuffer``, and the kvtier tier reads and writes
vLLM's chunk slots in place.

:func:`wrap_tier` goes the other way: an object with vLLM's secondary-tier
methods becomes a ``Kv.SecondaryTier`` that a ``Kv.TieringManager`` (or
``Kv.Connector``) drives.

When vLLM is importable, the adapter subclasses vLLM's own base class and
speaks its types; otherwise it uses :mod:`kvtier._vllm_types`, stand-ins
with the same names and fields. doc/vllm.md has the details and limits.
"""

import ast
import ctypes
import dataclasses
import inspect
import logging
import math
import os

import numpy

from . import GLib, GObject, Kv, _variant

try:                # a vLLM with the tiering layer
    from vllm.v1.kv_offload import base as _vllm_base
    from vllm.v1.kv_offload.tiering import base as _vllm_tiering
except ImportError:
    _vllm_base = _vllm_tiering = None
try:                # its stats container (the manager aggregates into it)
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import (
        metrics as _vllm_metrics)
except ImportError:
    _vllm_metrics = None

from . import _vllm_types

__all__ = [
    'HAVE_VLLM', 'KvtierSecondaryTier', 'VllmTierWrapper',
    'primary_kv_view', 'region_of_view', 'wrap_tier', 'types',
]

log = logging.getLogger(__name__)

HAVE_VLLM = _vllm_tiering is not None

# Names vLLM gave its types before renaming them: a vLLM that has only the
# old one gets it under the new name.
_OLD_NAMES = {'TransferJob': 'JobMetadata'}


class _Types:
    """vLLM's types where vLLM has them, the stand-ins otherwise."""

    def __init__(self):
        modules = [m for m in (_vllm_tiering, _vllm_base, _vllm_metrics) if m is not None]
        self.vllm_names = set()
        for name in _vllm_types.__all__:
            value = None
            for alias in (name, _OLD_NAMES.get(name)):
                value = next((getattr(m, alias) for m in modules
                              if alias is not None and hasattr(m, alias)), None)
                if value is not None:
                    break
            if value is not None:
                self.vllm_names.add(name)
            setattr(self, name, value if value is not None else getattr(_vllm_types, name))
        # vLLM renamed TransferJob.block_ids to chunk_ids.
        fields = {f.name for f in dataclasses.fields(self.TransferJob)}
        self.job_chunk_field = 'chunk_ids' if 'chunk_ids' in fields else 'block_ids'
        self.job_result_fields = {f.name for f in dataclasses.fields(self.JobResult)}
        self.event_fields = {f.name for f in dataclasses.fields(self.OffloadingEvent)}

    def transfer_job(self, job_id, keys, chunk_ids, is_promotion, req_context):
        """A TransferJob (JobMetadata on an older vLLM) built by keyword,
        under the chunk field name this vLLM uses."""
        return self.TransferJob(job_id=job_id, keys=keys, is_promotion=is_promotion,
                                req_context=req_context, **{self.job_chunk_field: chunk_ids})

    def job_result(self, job_id, success, **fields):
        """A JobResult with the fields this vLLM's JobResult has (an older
        one has no transfer_bytes)."""
        return self.JobResult(job_id=job_id, success=success,
                              **{k: v for k, v in fields.items()
                                 if k in self.job_result_fields})


#: The namespace of vLLM types the adapter speaks (``types.LookupResult``,
#: ``types.TransferJob``...): vLLM's own when importable.
types = _Types()


def _job_chunk_ids(job):
    """A job's primary slots, whichever name its vLLM gives them."""
    chunk_ids = getattr(job, 'chunk_ids', None)
    return job.block_ids if chunk_ids is None else chunk_ids


# ---- vLLM's shared primary region -------------------------------------------------

def _view_address(view):
    """The address and size of a C-contiguous writable buffer."""
    if isinstance(view, numpy.ndarray):
        if not view.flags.c_contiguous:
            raise ValueError('the primary view is not C-contiguous')
        return view.__array_interface__['data'][0], view.nbytes
    mv = memoryview(view)
    if not mv.c_contiguous:
        raise ValueError('the primary view is not C-contiguous')
    if mv.readonly:
        raise ValueError('the primary view is read-only; a tier must be able to write '
                         'promoted chunks into it')
    # from_buffer() exports the buffer; drop the export at once so that the
    # owner (an mmap) can still be closed.
    anchor = ctypes.c_char.from_buffer(mv.cast('B'))
    address = ctypes.addressof(anchor)
    del anchor
    return address, mv.nbytes


@dataclasses.dataclass(frozen=True)
class Region:
    """Where a view's memory lives: the shared file mapping that holds it
    (``path`` is None once the file's name was removed), its ``device``,
    ``inode``, and the file ``offset`` of the view's first byte."""

    path: object
    device: int
    inode: int
    offset: int


def _maps():
    with open('/proc/self/maps', encoding='utf-8', errors='surrogateescape') as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split('-'))
            major, minor = (int(x, 16) for x in fields[3].split(':'))
            path = fields[5].rstrip('\n') if len(fields) > 5 else ''
            yield start, end, fields[1], int(fields[2], 16), os.makedev(major, minor), \
                int(fields[4]), path


def _region_of(address, size):
    """The Region of [address, address + size): one shared mapping of one
    file (the kernel may show it as several consecutive entries)."""
    found = None
    next_start = address
    for start, end, perms, offset, device, inode, path in _maps():
        if end <= next_start or start > next_start:
            continue
        if perms[3] != 's' or inode == 0:
            raise ValueError(f'the primary view at {address:#x} is not in a shared file '
                             f'mapping ({perms} {path or "anonymous"}); kvtier.vllm works on '
                             f"vLLM's shared region")
        file_offset = offset + (next_start - start)
        if found is None:
            name = None if path.endswith(' (deleted)') or not path.startswith('/') else path
            found = Region(name, device, inode, file_offset)
            expected = file_offset
        elif (device, inode) != (found.device, found.inode) or file_offset != expected:
            raise ValueError(f'the primary view at {address:#x} spans more than one '
                             f'mapping of one file')
        expected += min(end, address + size) - next_start
        next_start = min(end, address + size)
        if next_start >= address + size:
            return found
    if found is None:
        raise ValueError(f'the primary view at {address:#x} is not mapped')
    raise ValueError(f'the primary view at {address:#x} ends outside its mapping')


def region_of_view(view):
    """The :class:`Region` of a buffer's memory, from /proc/self/maps.
    Raises ``ValueError`` if that memory is not one shared mapping of a
    file (with or without a name)."""
    return _region_of(*_view_address(view))


def _check_region_name(region, primary_file):
    """Where the region still has a name (or the configuration gives one),
    it must name the file that is mapped: a file replaced since vLLM mapped
    it is refused. A name that is gone is fine: newer vLLM removes it once
    every process mapped the region."""
    if primary_file is not None:
        try:
            st = os.stat(primary_file)
        except FileNotFoundError:
            log.info('primary_file %s does not exist (vLLM removes the name once every '
                     'process mapped the region); using the memory vLLM handed over',
                     primary_file)
        else:
            if (st.st_dev, st.st_ino) != (region.device, region.inode):
                raise ValueError(f'primary_file {primary_file} is not the file mapped under '
                                 f'the primary view')
    if region.path is None:
        return
    try:
        fd = os.open(region.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return                  # removed since /proc/self/maps was read
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if (st.st_dev, st.st_ino) != (region.device, region.inode):
        raise ValueError(f'{region.path} is not the file mapped under the primary view '
                         f'(it was replaced since vLLM mapped it)')


class _Lease:
    """Keeps a view's memory mapped while a Kv.HostBuffer uses it: holds an
    export of the view (so vLLM's region cannot unmap it) until the buffer
    releases it, or until :meth:`end` once no I/O can touch it."""

    def __init__(self, view):
        self._export = memoryview(view)

    def release(self, *_):
        self.end()

    def end(self):
        if self._export is not None:
            self._export.release()
            self._export = None


def _buffer_for_view(view, primary_file=None):
    """A Kv.HostBuffer over the memory of ``view``, a 2-D ``(n_chunks,
    row_stride)`` view of vLLM's shared region, without mapping or copying
    anything: slot c is vLLM's row c. Returns (buffer, lease)."""
    mv = memoryview(view)
    if mv.ndim != 2:
        raise ValueError(f'the primary view has {mv.ndim} dimensions; vLLM hands a tier a '
                         f'2-D (chunks, row bytes) view')
    n_slots, slot_size = mv.shape[0], mv.strides[0]
    if mv.shape[1] * mv.itemsize != slot_size:
        raise ValueError(f'the primary view has rows of {mv.shape[1] * mv.itemsize} bytes '
                         f'{slot_size} bytes apart; kvtier needs rows that touch')
    address, size = _view_address(view)
    _check_region_name(_region_of(address, size), primary_file)
    lease = _Lease(view)
    return Kv.HostBuffer.new_for_memory(address, n_slots, slot_size, lease.release), lease


def primary_kv_view(buffer):
    """vLLM's ``primary_kv_view`` over a ``Kv.HostBuffer``: a writable 2-D
    uint8 memoryview ``(n_slots, slot_size)`` of its memory, no copy; it
    keeps the buffer alive. What a vLLM tier wrapped by :func:`wrap_tier`
    is constructed with."""
    size = buffer.get_size()
    array = (ctypes.c_ubyte * size).from_address(buffer.get_data())
    array._kvtier_owner = buffer
    return memoryview(array).cast('B', (buffer.get_n_slots(), buffer.get_slot_size()))


# ---- conversions -------------------------------------------------------------------

# Enum members vLLM renamed: an older vLLM has only the old name.
_OLD_MEMBER_NAMES = {'CHUNK_LEVEL': 'BLOCK_LEVEL'}


def _enum_map(source, target):
    """Kv enum value -> target member of the same name, or of the name an
    older vLLM gave it (None where none)."""
    def member(name):
        found = getattr(target, name, None)
        if found is None and name in _OLD_MEMBER_NAMES:
            found = getattr(target, _OLD_MEMBER_NAMES[name], None)
        return found
    return {int(v): member(v.value_nick.upper().replace('-', '_'))
            for v in source.__enum_values__.values()}


def _params_variant(params):
    """kv_transfer_params (JSON-like) as an a{sv}; None stays None. A value
    a GVariant cannot hold as it is (bytes, a set, an object) goes as its
    str(): a request's parameters never fail a lookup."""
    if not params:
        return None

    def convert(value, where):
        if value is None:
            return GLib.Variant('ms', None)
        if isinstance(value, (list, tuple)):
            return GLib.Variant('av', [convert(v, f'{where}[{i}]') for i, v in enumerate(value)])
        if isinstance(value, dict):
            return GLib.Variant('a{sv}', {str(k): convert(v, f'{where}.{k}')
                                          for k, v in value.items()})
        try:
            return _variant(value, where)
        except (TypeError, OverflowError):
            return GLib.Variant('s', str(value))

    return convert(dict(params), 'kv_transfer_params')


def _params_dict(variant):
    return variant.unpack() if variant is not None else None


class _Request:
    """A vLLM request as kvtier sees it: its Kv.Request, and the Kv.Key of
    each OffloadKey it used. A deferred request looks its whole prefix up
    again every step; building a Kv.Key is most of a lookup's cost, so each
    is built once per request."""

    __slots__ = ('request', 'keys')

    def __init__(self, request):
        self.request = request
        self.keys = {}

    def key(self, offload_key):
        key = self.keys.get(offload_key)
        if key is None:
            key = self.keys[offload_key] = Kv.Key.new_from_offload_key(offload_key)
        return key


class _Requests:
    """One Kv.Request per vLLM request id, kept until the request ends, so
    that a kvtier tier's per-request state (negative cache, async lookups)
    lives as long as vLLM's request does."""

    def __init__(self):
        self.by_id = {}             # req_id -> _Request

    def state(self, ctx):
        state = self.by_id.get(ctx.req_id)
        if state is None:
            state = self.by_id[ctx.req_id] = _Request(self._new(ctx))
        return state

    def get(self, ctx):
        return self.state(ctx).request

    @staticmethod
    def _new(ctx):
        request = Kv.Request.new(ctx.req_id, _params_variant(ctx.kv_transfer_params))
        tier_filter = getattr(ctx, 'load_tier_filter', None)
        if tier_filter is not None and tier_filter is not types.TierFilter.ALL:
            kv_filter = Kv.TierFilter.new()
            for matcher in tier_filter.matchers:
                kv_filter.add_matcher(
                    Kv.Medium(_MEDIUM_TO_KV[matcher.medium]),
                    Kv.Locality(_LOCALITY_TO_KV[matcher.locality]))
            request.set_load_tier_filter(kv_filter)
        return request

    def finish(self, ctx):
        state = self.by_id.pop(ctx.req_id, None)
        return state.request if state is not None else None

    def __len__(self):
        return len(self.by_id)


_MEDIUM_FROM_KV = _enum_map(Kv.Medium, types.Medium)
_LOCALITY_FROM_KV = _enum_map(Kv.Locality, types.Locality)
_MEDIUM_TO_KV = {None: int(Kv.Medium.UNSPECIFIED), **{
    m: int(getattr(Kv.Medium, m.name)) for m in types.Medium if hasattr(Kv.Medium, m.name)}}
_LOCALITY_TO_KV = {None: int(Kv.Locality.UNSPECIFIED), **{
    x: int(getattr(Kv.Locality, x.name)) for x in types.Locality}}
_POLICY_FROM_KV = _enum_map(Kv.OffloadPolicy, types.OffloadPolicy)


# ---- kvtier tier -> vLLM -------------------------------------------------------------

_SECONDARY_BASE = types.SecondaryTierManager
_BASE_TAKES_DETECTOR = 'backpressure_detector' in inspect.signature(
    _SECONDARY_BASE.__init__).parameters


def _section_from_config_file(path, tier_name, registry):
    config = Kv.Config.new_from_file(registry, path)
    for section in config.to_variant().unpack().get('tiers', []):
        if section.get('name') == tier_name:
            return section
    names = ', '.join(config.get_tier_names()) or 'none'
    raise ValueError(f'{path} has no [tier {tier_name}] section (it has: {names})')


def _tier_section(tier, config_file, tier_name, tier_modules, registry):
    """(kvtier tier type, its section's other keys) from the adapter's
    keyword arguments, after importing ``tier_modules``."""
    for module in tier_modules:
        __import__(module)
    if (tier is None) == (config_file is None):
        raise ValueError('give the kvtier tier either as "tier" (a dict with "type") or as '
                         '"config_file" with "tier_name"')
    if config_file is not None:
        if not tier_name:
            raise ValueError('"config_file" needs "tier_name", the name of one of its tiers')
        section = _section_from_config_file(config_file, tier_name, registry)
    else:
        if not isinstance(tier, dict) or not tier.get('type'):
            raise ValueError('"tier" must be a dict with a "type" (a kvtier tier type, '
                             'such as "fs")')
        section = tier
    section = {k: v.unpack() if isinstance(v, GLib.Variant) else v
               for k, v in section.items()}
    kv_type = section.pop('type')
    section.pop('name', None)
    return kv_type, section


def _tier_class_metrics(registry, kv_type):
    """The Kv.MetricRegistry of what a tier of type ``kv_type`` reports:
    the counters every tier inherits and its class's own, as the library
    defines them. A tier's metric definitions belong to its class
    (Kv.TieringManager asks one instance per class), so they are read from
    an instance that is made but never initialised: no file, thread or
    connection of a real tier is opened."""
    gtype = registry.lookup_tier_type(kv_type)
    metrics = Kv.MetricRegistry.new()
    probe = GObject.new(gtype)
    try:
        probe.register_metrics(metrics)
    finally:
        probe.run_dispose()
    return metrics


def _metric_metadata(metrics, name):
    """One definition of a Kv.MetricRegistry as vLLM's metadata."""
    documentation = metrics.get_documentation(name) or name
    labelnames = tuple(metrics.get_label_names(name) or ())
    kind = metrics.get_kind(name)
    if kind == Kv.MetricKind.COUNTER:
        return types.OffloadingCounterMetadata(documentation=documentation,
                                               labelnames=labelnames)
    if kind == Kv.MetricKind.GAUGE:
        return types.OffloadingGaugeMetadata(documentation=documentation,
                                             labelnames=labelnames)
    return types.OffloadingHistogramMetadata(documentation=documentation,
                                             labelnames=labelnames,
                                             buckets=tuple(metrics.get_buckets(name) or ()))


class _ParentBridge(GObject.Object, Kv.ParentManager):
    """vLLM's ParentManager handle as a Kv.ParentManager, for a kvtier tier
    serving other nodes' requests (valid during serve_external_requests)."""

    __gtype_name__ = 'KvtierVllmParentBridge'

    def __init__(self, adapter):
        super().__init__()
        self._adapter = adapter
        self.parent = None
        self._contexts = {}

    def _ctx(self, request):
        ctx = self._contexts.get(request.get_id())
        if ctx is None:
            ctx = self._contexts[request.get_id()] = types.ReqContext(
                req_id=request.get_id(),
                kv_transfer_params=_params_dict(request.get_transfer_params()))
        return ctx

    def do_on_new_request(self, request):
        policy = self.parent.on_new_request(self._ctx(request)).policy
        return Kv.OffloadPolicy.REQUEST_LEVEL if policy == types.OffloadPolicy.REQUEST_LEVEL \
            else Kv.OffloadPolicy.CHUNK_LEVEL

    def do_lookup(self, key, request):
        result = self.parent.lookup(key.to_offload_key().get_data(), self._ctx(request))
        return getattr(Kv.LookupResult, result.name)

    def do_create_store_job(self, keys, request):
        ctx = self._ctx(request)
        job = self.parent.create_store_job([k.to_offload_key().get_data() for k in keys], ctx)
        if job is None:
            raise GLib.Error.new_literal(Kv.tier_error_quark(), 'the store was not admitted',
                                         int(Kv.TierError.FAILED))
        kv_job = Kv.TransferJob.new(job.job_id, list(keys),
                                    [int(c) for c in _job_chunk_ids(job)], False, request)
        # The tier carries this job out and reports it like one it was given.
        self._adapter._jobs[job.job_id] = job
        return kv_job

    def do_on_request_finished(self, request):
        ctx = self._contexts.pop(request.get_id(), None) or self._ctx(request)
        self.parent.on_request_finished(ctx)


class KvtierSecondaryTier(_SECONDARY_BASE):
    """A vLLM secondary tier backed by a kvtier tier.

    vLLM's tier factory constructs it with ``offloading_spec``,
    ``primary_kv_view``, ``tier_type`` and ``backpressure_detector``, plus
    every other key of the tier's entry in ``secondary_tiers`` as a keyword:

    ``tier``
        the kvtier tier: a dict with ``type`` and the keys of a kvtier
        ``[tier NAME]`` section (``{"type": "fs", "root": "/mnt/kv"}``);
    ``config_file``, ``tier_name``
        or a kvtier configuration file and the name of one of its tiers;
    ``tier_modules``
        modules to import first (ones that register Python tiers);
    ``locality``
        ``"LOCAL"`` or ``"REMOTE"``, as for vLLM's own tiers;
    ``primary_file``
        the shared region's path, when /proc/self/maps cannot tell it.

    ``registry`` (a ``Kv.TierRegistry``) may be given from Python.

    Every method runs on vLLM's scheduler thread and returns at once; the
    kvtier tier does its I/O on its own threads. A job the tier refuses at
    submit is reported failed by the next :meth:`get_finished_jobs`.
    """

    def __init__(self, offloading_spec, primary_kv_view, tier_type,
                 backpressure_detector=None, *, tier=None, config_file=None, tier_name=None,
                 tier_modules=(), locality=None, primary_file=None, registry=None):
        if _BASE_TAKES_DETECTOR:
            super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        else:               # a vLLM from before back-pressure detectors
            super().__init__(offloading_spec, primary_kv_view, tier_type)
            self._bp_detector = backpressure_detector
        if locality is not None:
            locality = types.Locality(locality)          # strict, as vLLM's tiers
        registry = registry or Kv.TierRegistry.get_default()
        kv_type, section = _tier_section(tier, config_file, tier_name, tier_modules, registry)
        for key in section:
            if key.startswith('backpressure'):
                raise ValueError(f'"{key}": under vLLM, back-pressure is vLLM\'s; configure it '
                                 f'with "backpressure" in the tier\'s entry of secondary_tiers')
        if str(section.get('deadline-ms', 0)) != '0':
            raise ValueError('"deadline-ms": vLLM frees a failed load\'s primary slots at once, '
                             'so a kvtier tier may not fail a load it is still writing; '
                             'leave deadline-ms unset under vLLM')
        if locality is not None and 'locality' not in section:
            section['locality'] = locality.value.lower()

        self._buffer, self._lease = _buffer_for_view(primary_kv_view, primary_file)
        properties = GLib.Variant('a{sv}', {k: _variant(v, f'tier.{k}')
                                            for k, v in section.items()})
        self._tier = registry.create_tier(kv_type, self._buffer, None, properties)
        self.kvtier_type = kv_type

        medium = _MEDIUM_FROM_KV[int(self._tier.get_medium())]
        if medium is not None:
            self.medium = medium
        kv_locality = _LOCALITY_FROM_KV[int(self._tier.get_locality())]
        self.locality = locality or kv_locality

        self._metrics = Kv.MetricRegistry.new()
        self._tier.register_metrics(self._metrics)
        self._requests = _Requests()
        self._jobs = {}              # job id -> vLLM TransferJob, until reported
        self._refused = []           # ids of jobs the tier refused at submit
        self._parent = None
        self._closed = False
        # Bound once: these are on the per-chunk path.
        self._kv_lookup = self._tier.lookup
        self._by_req_id = self._requests.by_id
        self._lookup_results = tuple(
            getattr(types.LookupResult, Kv.LookupResult(i).value_nick.upper().replace('-', '_'))
            for i in range(len(Kv.LookupResult.__enum_values__)))

    # -- what the adapter wraps --

    @property
    def kvtier_tier(self):
        """The ``Kv.SecondaryTier`` doing the work."""
        return self._tier

    @property
    def kvtier_buffer(self):
        """The ``Kv.HostBuffer`` over vLLM's primary region."""
        return self._buffer

    # An older vLLM's base class has neither: the adapter answers them the
    # same way under every vLLM it supports.
    if not hasattr(_SECONDARY_BASE, 'block_size_bytes'):
        @property
        def block_size_bytes(self):
            """The bytes of one primary chunk (the view's row stride)."""
            return self._buffer.get_slot_size()

    if not hasattr(_SECONDARY_BASE, 'bp_detector'):
        @property
        def bp_detector(self):
            """The back-pressure detector vLLM passed (None: none)."""
            return self._bp_detector

    # -- lookups and requests --

    def lookup(self, key, req_context):
        # The per-chunk path: no Python call but the tier's when the request
        # and the key were seen before.
        state = self._by_req_id.get(req_context.req_id) or self._requests.state(req_context)
        kv_key = state.keys.get(key) or state.key(key)
        return self._lookup_results[self._kv_lookup(kv_key, state.request)]

    def on_new_request(self, req_context):
        policy = self._tier.on_new_request(self._requests.get(req_context))
        return types.RequestOffloadingContext(policy=_POLICY_FROM_KV[int(policy)])

    def on_request_finished(self, req_context):
        request = self._requests.finish(req_context)
        if request is not None and not self._closed:
            self._tier.on_request_finished(request)

    def touch(self, keys, req_context):
        if not self._closed:
            state = self._requests.state(req_context)
            self._tier.touch([state.key(k) for k in keys], state.request)

    # -- jobs --

    def _kv_job(self, job):
        chunk_ids = _job_chunk_ids(job)
        # a numpy array (vLLM's) or any sequence of ints
        if hasattr(chunk_ids, 'tolist'):
            chunk_ids = chunk_ids.tolist()
        else:
            chunk_ids = list(map(int, chunk_ids))
        state = self._requests.state(job.req_context)
        return Kv.TransferJob.new(job.job_id, [state.key(k) for k in job.keys], chunk_ids,
                                  bool(job.is_promotion), state.request)

    def _submit(self, job, submit):
        if job.job_id in self._jobs:
            raise ValueError(f'job {job.job_id} is already in flight')
        kv_job = self._kv_job(job)          # a malformed job raises here, unregistered
        self._jobs[job.job_id] = job
        try:
            submit(kv_job)
        except GLib.Error as error:
            log.warning('kvtier tier %s refused job %d: %s', self.tier_type, job.job_id,
                        error.message)
            self._refused.append(job.job_id)

    def submit_store(self, job):
        self._submit(job, self._tier.submit_store)

    def submit_load(self, job):
        self._submit(job, self._tier.submit_load)

    def _result(self, kv_result):
        job_id = kv_result.get_job_id()
        job = self._jobs.pop(job_id, None)
        if job is None:
            log.warning('kvtier tier %s reported job %d, which is not in flight; ignored',
                        self.tier_type, job_id)
            return None
        successful_keys = None
        if kv_result.has_successful_keys():
            landed = {k.to_offload_key().get_data() for k in kv_result.get_successful_keys()}
            successful_keys = tuple(k for k in job.keys if bytes(k) in landed) or None
        seconds = kv_result.get_transfer_time()
        n_bytes = kv_result.get_transfer_bytes()
        return types.job_result(job_id, bool(kv_result.get_success()),
                                successful_keys=successful_keys,
                                transfer_time=seconds if seconds >= 0 else None,
                                transfer_bytes=n_bytes if n_bytes >= 0 else None)

    def get_finished_jobs(self):
        results = []
        for job_id in self._refused:
            self._jobs.pop(job_id)
            results.append(types.job_result(job_id, False))
        self._refused = []
        for kv_result in self._tier.get_finished_jobs():
            result = self._result(kv_result)
            if result is not None:
                results.append(result)
        return results

    def has_pending_work(self):
        return bool(self._refused) or self._tier.has_pending_work()

    def drain_jobs(self):
        if not self._closed:
            self._tier.drain_jobs()

    # -- steps --

    def serve_external_requests(self, parent):
        if self._closed:
            return
        if self._parent is None:
            self._parent = _ParentBridge(self)
        self._parent.parent = parent
        try:
            self._tier.serve_external_requests(self._parent)
        finally:
            self._parent.parent = None

    def on_schedule_end(self, ctx):
        if not self._closed:
            self._tier.on_schedule_end(Kv.ScheduleEnd.new(list(ctx.new_req_ids),
                                                          list(ctx.preempted_req_ids)))

    # -- events, stats, shutdown --

    def take_events(self):
        events = []
        for event in self._tier.take_events():
            keys = [k.to_offload_key().get_data() for k in event.get_keys()]
            fields = dict(keys=keys, medium=_MEDIUM_FROM_KV[int(event.get_medium())],
                          removed=bool(event.get_removed()),
                          locality=_LOCALITY_FROM_KV[int(event.get_locality())])
            ownership = event.get_ownership()
            if ownership is not None and 'ownership' in types.event_fields:
                fields['ownership'] = ownership
            events.append(types.OffloadingEvent(**fields))
        return events

    @classmethod
    def build_metric_definitions(cls, extra_config, vllm_tier_name=None):
        """Every metric :meth:`get_stats` can report for the tier entry
        ``extra_config`` (its ``tier`` or ``config_file``/``tier_name``,
        ``tier_modules``), with the documentation, label names and buckets
        the kvtier library defines. vLLM calls it when it builds its
        Prometheus families, before (and in another process than) any tier
        exists. ``vllm_tier_name``, the entry's name that a vLLM naming
        its tiers passes as well, changes nothing: the kvtier tier labels
        its series itself."""
        extra_config = dict(extra_config or {})
        registry = extra_config.get('registry') or Kv.TierRegistry.get_default()
        kv_type, _ = _tier_section(extra_config.get('tier'), extra_config.get('config_file'),
                                   extra_config.get('tier_name'),
                                   extra_config.get('tier_modules', ()), registry)
        metrics = _tier_class_metrics(registry, kv_type)
        return {name: _metric_metadata(metrics, name) for name in metrics.list_names()}

    def get_stats(self):
        """The tier's own metrics since the last call (return and reset) in
        vLLM's ``OffloadingConnectorStats``, or None: counters, gauges and
        histograms as the tier's metric definitions say, labelled as the
        tier labels them. Each name is one :meth:`build_metric_definitions`
        declares."""
        stats = self._tier.get_stats()
        if stats is None or stats.is_empty():
            return None
        out = types.OffloadingConnectorStats()
        histograms = set()
        for key, value in stats.reduce().unpack().items():
            name, labels = _split_stat_name(key)
            kind = self._metrics.get_kind(name) if self._metrics.has_metric(name) else None
            if kind == Kv.MetricKind.GAUGE:
                out.set_gauge(name, value, labelvalues=labels)
            elif kind == Kv.MetricKind.COUNTER:
                out.increase_counter(name, value, labelvalues=labels)
            else:
                # a histogram, flattened to NAME_count / NAME_sum
                base = name.rpartition('_')[0]
                if self._metrics.has_metric(base) and \
                        self._metrics.get_kind(base) == Kv.MetricKind.HISTOGRAM:
                    histograms.add((base, labels))
                else:
                    log.warning('kvtier tier %s reported %s, which it does not define; '
                                'not passed to vLLM', self.tier_type, name)
        for name, labels in sorted(histograms):
            # vLLM's observer observes each value of the list; Kv.Stats may
            # keep counts per bucket only: values inside each bucket give
            # vLLM's families the same bucket counts, _count and _sum.
            bounds = list(self._metrics.get_buckets(name) or ())
            counts, total = stats.get_histogram_buckets(name, list(labels) or None, bounds)
            for value in _bucket_observations(bounds, counts, total):
                out.observe_histogram(name, value, labelvalues=labels)
        return out if not out.is_empty() else None

    def shutdown(self):
        """Shuts the kvtier tier down: every job in flight is reported (by
        :meth:`get_finished_jobs`, which still works) and no I/O touches
        vLLM's region afterwards, so the adapter lets go of it (vLLM can
        then unmap it)."""
        if self._closed:
            return
        self._tier.shutdown()
        self._closed = True
        self._lease.end()


def _bucket_observations(bounds, counts, total):
    """Observations that a Prometheus histogram with the upper bounds
    ``bounds`` counts exactly as ``counts`` (one count per bucket, the last
    one above every bound), whose sum is ``total`` as nearly as floats
    allow (exactly when the counts and the sum are consistent, that is
    when they came from real observations in these buckets)."""
    lows = [-math.inf] + [float(b) for b in bounds]
    highs = [float(b) for b in bounds] + [math.inf]
    # one value per non-empty bucket, then moved within the bucket
    groups = []             # [value, low, high, count]
    for low, high, count in zip(lows, highs, counts):
        if not count:
            continue
        if high != math.inf:
            value = high                            # a bucket holds its upper bound
        elif low != -math.inf:
            value = low + max(abs(low), 1.0)        # above the last bound
        else:
            value = total / count                   # no bounds at all
        groups.append([value, low, high, count])
    delta = total - sum(value * count for value, _, _, count in groups)
    if delta > 0:
        # only the +Inf bucket's values can grow
        up = [g for g in groups if g[2] == math.inf]
        n_up = sum(g[3] for g in up)
        for g in up:
            g[0] += delta / n_up
    elif delta < 0:
        # down towards each bucket's lower bound (excluded), in proportion
        # to the room each has; the first bucket's have no floor
        bounded = [g for g in groups if g[1] != -math.inf]
        room = sum((g[0] - g[1]) * g[3] for g in bounded)
        floorless = [g for g in groups if g[1] == -math.inf]
        share = min(-delta / room, 1.0) if room > 0 and (room > -delta or not floorless) else 0.0
        for g in bounded:
            g[0] = max(g[0] - share * (g[0] - g[1]), math.nextafter(g[1], math.inf))
        rest = total - sum(value * count for value, _, _, count in groups)
        n_floorless = sum(g[3] for g in floorless)
        if rest < 0 and n_floorless:
            for g in floorless:
                g[0] += rest / n_floorless
    return [value for value, _, _, count in groups for _ in range(count)]


def _split_stat_name(name):
    """``"<metric>:<label tuple>"`` (a flattened stats key, whose metric
    name may hold colons itself) as (metric, label tuple)."""
    metric, colon, labels = name.rpartition(':(')
    if not colon:
        return name, ()
    try:
        parsed = ast.literal_eval('(' + labels)
    except (ValueError, SyntaxError):
        return name, ()
    return metric, tuple(parsed) if isinstance(parsed, tuple) else (parsed,)


# ---- vLLM tier -> kvtier ---------------------------------------------------------

_LOOKUP_TO_KV = {'MISS': Kv.LookupResult.MISS, 'HIT': Kv.LookupResult.HIT,
                 'HIT_PENDING': Kv.LookupResult.RETRY, 'RETRY': Kv.LookupResult.RETRY}


def _tier_filter_from_kv(kv_filter):
    """A kvtier filter as vLLM's TierFilter (only the matchers kvtier can
    tell apart: the concrete medium/locality pairs it allows)."""
    if kv_filter is None or kv_filter.is_all():
        return types.TierFilter.ALL
    matchers = tuple(types.TierMatcher(medium, locality)
                     for medium in types.Medium for locality in types.Locality
                     if medium in _MEDIUM_TO_KV and
                     kv_filter.allows(Kv.Medium(_MEDIUM_TO_KV[medium]),
                                      Kv.Locality(_LOCALITY_TO_KV[locality])))
    return types.TierFilter(matchers)


class VllmTierWrapper(Kv.SecondaryTier):
    """A vLLM secondary tier as a ``Kv.SecondaryTier`` (see
    :func:`wrap_tier`). The wrapped object's methods run on the owner
    thread, where the kvtier manager calls the vfuncs; its results reach
    the manager through ``get_finished_jobs``, as under vLLM.

    vLLM's tier interface has no cancellation: a store handed to the vLLM
    tier runs to its end, and may publish after its deadline failed it.
    The class says so (``can-cancel-stores`` is ``False`` for every
    instance, :func:`Kv.SecondaryTier.type_set_can_cancel_stores`), so that
    the manager keeps such a store's primary slots pinned until the vLLM
    tier reports it. Subclasses inherit it, including one a tier module
    loader makes from C, which runs no ``__init__`` with keywords."""

    __gtype_name__ = 'KvtierVllmTier'

    def __init__(self, vllm_tier=None, **properties):
        super().__init__(**properties)
        self._vllm = vllm_tier
        self._contexts = {}          # request id -> vLLM ReqContext
        self._jobs = {}              # job id -> kvtier TransferJob, until reported

    @property
    def vllm_tier(self):
        return self._vllm

    def _ctx(self, request):
        ctx = self._contexts.get(request.get_id())
        if ctx is None:
            # By keyword: newer vLLM has kv_hints between the parameters and
            # the filter.
            ctx = self._contexts[request.get_id()] = types.ReqContext(
                req_id=request.get_id(),
                kv_transfer_params=_params_dict(request.get_transfer_params()),
                load_tier_filter=_tier_filter_from_kv(request.get_load_tier_filter()))
        return ctx

    @staticmethod
    def _fail(what, exception):
        raise GLib.Error.new_literal(Kv.tier_error_quark(), f'{what}: {exception!r}',
                                     int(Kv.TierError.FAILED))

    def do_lookup(self, key, request):
        try:
            result = self._vllm.lookup(key.to_offload_key().get_data(), self._ctx(request))
        except Exception:           # noqa: BLE001 - a lookup cannot fail: a miss
            log.exception('vLLM tier %s: lookup failed; answered MISS', self.get_tier_type())
            return Kv.LookupResult.MISS
        return _LOOKUP_TO_KV.get(getattr(result, 'name', None), Kv.LookupResult.MISS)

    def do_on_new_request(self, request):
        ctx = self._vllm.on_new_request(self._ctx(request))
        policy = getattr(ctx, 'policy', None)
        if policy is not None and policy.name == 'REQUEST_LEVEL':
            return Kv.OffloadPolicy.REQUEST_LEVEL
        return Kv.OffloadPolicy.CHUNK_LEVEL

    def do_on_request_finished(self, request):
        ctx = self._contexts.pop(request.get_id(), None)
        self._vllm.on_request_finished(ctx or self._ctx(request))

    def do_touch(self, keys, request):
        self._vllm.touch([k.to_offload_key().get_data() for k in keys], self._ctx(request))

    def _submit(self, job, submit):
        vjob = types.transfer_job(
            job.get_id(), [k.to_offload_key().get_data() for k in job.get_keys()],
            numpy.array(job.get_chunk_ids(), dtype=numpy.int64 if not job.is_promotion()
                        else numpy.int32),
            bool(job.is_promotion()), self._ctx(job.get_request()))
        self._jobs[job.get_id()] = job
        try:
            submit(vjob)
        except Exception as exception:      # noqa: BLE001 - refused: the manager fails it
            del self._jobs[job.get_id()]
            self._fail(f'submitting job {job.get_id()}', exception)
        return True

    def do_submit_store(self, job):
        return self._submit(job, self._vllm.submit_store)

    def do_submit_load(self, job):
        return self._submit(job, self._vllm.submit_load)

    def _kv_result(self, result):
        job = self._jobs.pop(result.job_id, None)
        if job is None:
            log.warning('vLLM tier %s reported job %d, which is not in flight; ignored',
                        self.get_tier_type(), result.job_id)
            return None
        kv_result = Kv.JobResult.new(result.job_id, bool(result.success))
        if result.successful_keys is not None:
            landed = {bytes(k) for k in result.successful_keys}
            kv_result.set_successful_keys(
                [k for k in job.get_keys() if k.to_offload_key().get_data() in landed])
        if result.transfer_time is not None:
            kv_result.set_transfer_time(float(result.transfer_time))
        transfer_bytes = getattr(result, 'transfer_bytes', None)     # newer vLLM only
        if transfer_bytes is not None:
            kv_result.set_transfer_bytes(int(transfer_bytes))
        return kv_result

    def _collect(self):
        results = [r for r in map(self._kv_result, self._vllm.get_finished_jobs())
                   if r is not None]
        return results

    def do_get_finished_jobs(self):
        # What drain_jobs() collected went through complete_job(), whose
        # queue the base class's implementation drains.
        return Kv.SecondaryTier.do_get_finished_jobs(self) + self._collect()

    def do_has_pending_work(self):
        return bool(self._vllm.has_pending_work())

    def do_take_events(self):
        events = []
        for event in self._vllm.take_events():
            keys = [Kv.Key.new_from_offload_key(bytes(k)) for k in event.keys]
            medium = _MEDIUM_TO_KV.get(event.medium, int(Kv.Medium.UNSPECIFIED))
            locality = _LOCALITY_TO_KV.get(getattr(event, 'locality', None),
                                           int(Kv.Locality.UNSPECIFIED))
            kv_event = Kv.Event.new(keys, Kv.Medium(medium), bool(event.removed),
                                    Kv.Locality(locality))
            if getattr(event, 'ownership', None) is not None:
                kv_event.set_ownership(event.ownership)
            events.append(kv_event)
        return events

    def do_on_schedule_end(self, schedule_end):
        self._vllm.on_schedule_end(types.ScheduleEndContext(
            list(schedule_end.get_new_request_ids() or []),
            list(schedule_end.get_preempted_request_ids() or [])))

    def _drain(self):
        self._vllm.drain_jobs()
        # vLLM's contract: after drain_jobs() every result is available from
        # get_finished_jobs(). Queue them as kvtier's contract wants them.
        for result in self._collect():
            self.complete_job(result)

    def do_drain_jobs(self):
        try:
            self._drain()
        except Exception as exception:      # noqa: BLE001
            self._fail('draining jobs', exception)
        self.wait_jobs()
        return True

    def do_shutdown(self):
        try:
            self._drain()
            self._vllm.shutdown()
        except Exception as exception:      # noqa: BLE001
            self._fail('shutting down', exception)
        return True

    def do_get_stats(self):
        stats = self._vllm.get_stats()
        if stats is None or stats.is_empty():
            return None
        kv_stats = Kv.Stats.new()
        data = getattr(stats, 'data', None)
        if isinstance(data, dict) and isinstance(data.get('types'), dict) and \
                isinstance(data.get('data'), dict):
            # vLLM's self-describing layout: every kind keeps its kind.
            record = {'counter': kv_stats.increase_counter, 'gauge': kv_stats.set_gauge,
                      'histogram': kv_stats.observe_histogram}
            for name, by_labels in data['data'].items():
                add = record.get(data['types'].get(name))
                if add is None:
                    log.warning('vLLM tier %s reported %s of no known kind; dropped',
                                self.get_tier_type(), name)
                    continue
                for labels, value in by_labels.items():
                    labels = [str(x) for x in labels] or None
                    for observation in value if isinstance(value, list) else (value,):
                        add(name, float(observation), labels)
            return kv_stats
        for name, value in stats.reduce().items():      # any other stats object
            metric, labels = _split_stat_name(name)
            kv_stats.increase_counter(metric, float(value), [str(x) for x in labels] or None)
        return kv_stats


# vLLM's tier interface has no cancellation: no wrapped tier can call a
# store back, however the wrapper was made.
Kv.SecondaryTier.type_set_can_cancel_stores(VllmTierWrapper, False)


def wrap_tier(vllm_tier, primary, tier_type=None, **properties):
    """``vllm_tier`` (any object with vLLM's secondary-tier methods) as a
    ``Kv.SecondaryTier`` over ``primary``, the ``Kv.HostBuffer`` that
    ``vllm_tier`` was given as its ``primary_kv_view`` (see
    :func:`primary_kv_view`). ``properties`` are ``Kv.SecondaryTier``
    properties (``locality``, ``medium``...); the medium and locality
    default to the vLLM tier's. The result cannot cancel stores
    (``can-cancel-stores`` is ``False``: vLLM's interface has no
    cancellation). Add it to a manager with
    ``Kv.TieringManager.add_tier()``."""
    medium = getattr(vllm_tier, 'medium', None)
    locality = getattr(vllm_tier, 'locality', None)
    if medium is not None and 'medium' not in properties:
        properties['medium'] = Kv.Medium(_MEDIUM_TO_KV[medium])
    if locality is not None and 'locality' not in properties:
        properties['locality'] = Kv.Locality(_LOCALITY_TO_KV[locality])
    return VllmTierWrapper(vllm_tier, primary=primary,
                           tier_type=tier_type or getattr(vllm_tier, 'tier_type', 'vllm'),
                           **properties)
