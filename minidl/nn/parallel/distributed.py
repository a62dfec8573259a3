"""DistributedDataParallel: one replica of the model per process, gradients averaged by all-reduce.

What one training step does, on every rank (torch's design, in small):
1. forward: (broadcast the buffers from rank 0, as batch norm's running statistics), run the module, and
   count, walking the graph the forward just recorded, how many gradient contributions each parameter will
   receive in backward;
2. backward: a hook on each parameter hears each contribution arrive; when all of a parameter's have
   arrived it is ready, and when every parameter of a bucket (about 25 MB of gradients, in reverse order of
   model.parameters(), the order in which backward produces them) is ready, the bucket's gradients are
   flattened into one array, divided by the world size, and all-reduced. On the GPU the all-reduce runs on
   a side stream, so it overlaps the rest of the backward pass; on the CPU (MPI) it is a non-blocking call.
   Buckets are always launched in the same order (0, 1, 2, ...) on every rank, as collectives must be;
3. when backward ends (an engine callback), wait for the buckets and copy the averaged gradients back
   into each parameter's .grad. The optimizer step then sees the same gradients on every rank.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from ... import _device, _layout
from ... import distributed as dist
from ...autograd.function import is_grad_enabled, no_grad, queue_callback
from ...autograd.tensor import Tensor
from ..module import Module

_FIRST_BUCKET_BYTES = 1024 * 1024   # torch's: a small first bucket starts the communication early


class _Bucket:
    def __init__(self, index, params, indices):
        self.index, self.params, self.indices = index, params, indices
        self.sizes = [p.numel() for p in params]
        self.offsets = np.cumsum([0] + self.sizes).tolist()
        self.dtype = params[0]._data.dtype


class _StepState:
    """What one synchronised backward pass tracks: contributions still to come, buckets ready and launched."""

    def __init__(self, uses, n_buckets):
        self.uses_left = list(uses)
        self.used = [u > 0 for u in uses]
        self.done = [False] * len(uses)
        self.ready = [0] * n_buckets
        self.launched = [None] * n_buckets      # (flat array, work) once launched
        self.next_bucket = 0
        self.callback_queued = False


class DistributedDataParallel(Module):
    """DistributedDataParallel(module, device_ids=None, ..., bucket_cap_mb=25, find_unused_parameters=False):
    wrap the model after init_process_group() and after moving it to this process's device; train it as
    usual. The wrapped model is `.module`; state dicts carry the "module." prefix, as torch's."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, **kwargs):
        super().__init__()
        op = "DistributedDataParallel"
        if not dist.is_initialized():
            raise ValueError(f"{op}: call minidl.distributed.init_process_group() before wrapping the model "
                             "(and start the processes with python -m minidl.distributed.run --nproc-per-node N)")
        if process_group is not None:
            raise NotImplementedError(f"{op}: process_group: minidl has one process group, the world; pass None")
        if not isinstance(module, Module):
            raise TypeError(f"{op}: expected an nn.Module, got {type(module).__name__}")
        self.module = module
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise RuntimeError(f"{op}: the module has no parameter that requires a gradient; there is nothing to "
                               "average")
        devices = {p.device for p in params}
        if len(devices) > 1:
            raise ValueError(f"{op}: the module's parameters are on several devices ({sorted(map(str, devices))}); "
                             "minidl's DDP needs one device per process")
        self.device = devices.pop()
        if device_ids is not None:
            ids = [_device.Device(d if not isinstance(d, int) else f"cuda:{d}") for d in device_ids]
            if self.device.type == "cpu":
                raise ValueError(f"{op}: device_ids must be None for a module on the CPU, got {device_ids}")
            if len(ids) != 1 or ids[0] != self.device:
                raise ValueError(f"{op}: device_ids={device_ids} but the module is on {self.device}; pass "
                                 "device_ids=[local_rank] after model.to(f'cuda:{local_rank}'), or None")
        self.dim, self.broadcast_buffers = dim, broadcast_buffers
        self.find_unused_parameters, self.static_graph = find_unused_parameters, static_graph
        self.gradient_as_bucket_view = gradient_as_bucket_view   # accepted: minidl's gradients are always bucket views
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        self._params = params
        self._names = {id(p): n for n, p in module.named_parameters()}
        self._index = {id(p): i for i, p in enumerate(params)}
        self._world = dist.get_world_size()
        self._state = None
        self._static_uses = None
        # Set to a list to record what one backward pass does, for a timeline (tutorial 10): tuples
        # (perf_counter seconds, "ready", parameter index), (t, "launch", bucket), (t0, "wait", bucket, t1).
        self.timeline = None
        self._side_stream = None
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
        self._buckets = self._make_buckets(params, self.bucket_bytes_cap)
        self._bucket_of = {}
        for b in self._buckets:
            for i in b.indices:
                self._bucket_of[i] = b.index
        self._verify_same_model(op, params)
        with no_grad():
            self._broadcast_coalesced(params + [b for b in module.buffers() if b is not None])
        self._buffer_groups = None     # the buffers as views of one array per dtype (_sync_buffers)
        self._hook_handles = [p.register_post_accumulate_grad_hook(self._make_hook(i)) for i, p in enumerate(params)]

    # ---------------------------------------------------------------------------------------------- set-up
    @staticmethod
    def _make_buckets(params, cap):
        buckets, current, limit = [], [], min(_FIRST_BUCKET_BYTES, cap)
        order = list(range(len(params)))[::-1]
        size = 0
        for i in order:
            p = params[i]
            nbytes = p.numel() * p._data.dtype.itemsize
            if current and (size + nbytes > limit or params[current[0]]._data.dtype != p._data.dtype):
                buckets.append(current)
                current, size, limit = [], 0, cap
            current.append(i)
            size += nbytes
        if current:
            buckets.append(current)
        return [_Bucket(k, [params[i] for i in idx], idx) for k, idx in enumerate(buckets)]

    def _verify_same_model(self, op, params):
        """Every rank must wrap the same model: compare the parameter count and sizes across ranks."""
        if self._world == 1:
            return
        xp = _device.array_module(self.device)
        sig = np.array([len(params), sum(p.numel() for p in params),
                        sum((k + 1) * p.numel() for k, p in enumerate(params))], dtype=np.int64)
        hi = Tensor._make(xp.asarray(sig))
        lo = Tensor._make(xp.asarray(-sig))
        dist.all_reduce(hi, dist.ReduceOp.MAX)
        dist.all_reduce(lo, dist.ReduceOp.MAX)
        hi_, lo_ = _device.move_array(hi._data, "cpu"), -_device.move_array(lo._data, "cpu")
        if not np.array_equal(hi_, lo_):
            raise RuntimeError(
                f"{op}: the ranks wrap different models: this rank (rank {dist.get_rank()}) has {sig[0]} parameters "
                f"with {sig[1]} elements, and across ranks the counts range over {lo_[0]}..{hi_[0]} parameters and "
                f"{lo_[1]}..{hi_[1]} elements. Build the same model on every rank.")

    def _broadcast_coalesced(self, tensors):
        """Broadcast tensors from rank 0, one collective per dtype (their arrays flattened into one)."""
        if self._world == 1 or not tensors:
            return
        by_dtype = {}
        for t in tensors:
            by_dtype.setdefault(t._data.dtype, []).append(t)
        xp = _device.array_module(self.device)
        for group in by_dtype.values():
            flat = xp.concatenate([xp.ascontiguousarray(t._data).reshape(-1) for t in group])
            dist._backend_for("broadcast", group[0]).broadcast(flat, 0).wait()
            offset = 0
            for t in group:
                n = t.numel()
                t._data[...] = flat[offset:offset + n].reshape(t.shape)
                offset += n

    def _sync_buffers(self):
        """Broadcast the buffers (batch norm's running statistics) from rank 0, as torch does before each
        forward. The buffers live as views of one flat array per dtype, so that this is one broadcast per
        dtype and no copy; a buffer whose array was replaced since is copied into its view again first."""
        buffers = [b for b in self.module.buffers() if b is not None]
        if self._buffer_groups is None or [id(b) for b in buffers] != self._buffer_ids:
            xp = _device.array_module(self.device)
            groups = {}
            for b in buffers:
                groups.setdefault(b._data.dtype, []).append(b)
            self._buffer_groups = []
            for dtype, group in groups.items():
                flat = xp.empty(sum(b.numel() for b in group), dtype=dtype)
                views, offset = [], 0
                for b in group:
                    view = flat[offset:offset + b.numel()].reshape(b._data.shape)
                    view[...] = b._data
                    b._data = view
                    views.append(view)
                    offset += b.numel()
                self._buffer_groups.append((flat, group, views))
            self._buffer_ids = [id(b) for b in buffers]
        for flat, group, views in self._buffer_groups:
            for b, view in zip(group, views):
                if b._data is not view:        # replaced (load_state_dict, .to(), ...): back into the flat array
                    view[...] = b._data
                    b._data = view
            dist._backend_for("broadcast", group[0]).broadcast(flat, 0).wait()

    # --------------------------------------------------------------------------------------------- forward
    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers and self._world > 1:
            with no_grad():
                self._sync_buffers()
        output = self.module(*inputs, **kwargs)
        if is_grad_enabled() and self.require_backward_grad_sync:
            self._prepare_for_backward(output)
        else:
            self._state = None        # no_sync() or no grad: backward (if any) accumulates locally
        return output

    def _prepare_for_backward(self, output):
        if self.static_graph and self._static_uses is not None:
            uses = self._static_uses
        else:
            uses = self._count_uses(output)
            if self.static_graph:
                self._static_uses = uses
        self._state = _StepState(uses, len(self._buckets))
        if self.find_unused_parameters:
            for i, u in enumerate(uses):
                if u == 0:
                    self._mark_ready(i)

    def _count_uses(self, output):
        """How many gradient contributions each parameter gets in backward: the number of times it is an input
        of a Function in the graph that produced `output` (backward adds one contribution per such input)."""
        uses = [0] * len(self._params)
        index = self._index
        stack = [t._ctx for t in _tensors_in(output) if t._ctx is not None]
        seen = set()
        while stack:
            fn = stack.pop()
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            for inp in fn.inputs:
                if inp is None:
                    continue
                ctx = inp._ctx
                if ctx is None:
                    i = index.get(id(inp))
                    if i is not None:
                        uses[i] += 1
                elif id(ctx) not in seen:
                    stack.append(ctx)
        return uses

    # -------------------------------------------------------------------------------------------- backward
    def _make_hook(self, i):
        def hook(param):
            st = self._state
            if st is None:
                return
            if not st.callback_queued:
                st.callback_queued = True
                queue_callback(self._finish_backward)
            left = st.uses_left[i] - 1
            st.uses_left[i] = left
            if left == 0:
                self._mark_ready(i)
            elif left < 0:
                self._state = None
                raise RuntimeError(
                    f"DistributedDataParallel: parameter {self._names.get(id(param), i)!r} received more gradients "
                    "than the forward pass gave it: backward ran twice on one forward (retain_graph=True), which "
                    "would all-reduce it twice. Run forward again before each backward, or use no_sync().")
        return hook

    def _mark_ready(self, i):
        st = self._state
        st.done[i] = True
        if self.timeline is not None:
            self.timeline.append((time.perf_counter(), "ready", i))
        b = self._bucket_of[i]
        st.ready[b] += 1
        while st.next_bucket < len(self._buckets) and st.ready[st.next_bucket] == len(self._buckets[st.next_bucket].params):
            self._launch(self._buckets[st.next_bucket])
            st.next_bucket += 1

    def _launch(self, bucket):
        xp = _device.array_module(self.device)
        parts = []
        for p in bucket.params:
            g = p.grad
            parts.append(xp.zeros(p.numel(), dtype=bucket.dtype) if g is None else g._data.reshape(-1))
        if _device.is_capturing():
            # CuPy's concatenate of many arrays sends their addresses from the host, which a capture
            # forbids: one device copy per gradient instead (replays cost the same either way)
            flat = xp.empty(bucket.offsets[-1], dtype=bucket.dtype)
            for k, part in enumerate(parts):
                flat[bucket.offsets[k]:bucket.offsets[k + 1]] = part
        else:
            flat = xp.concatenate(parts) if len(parts) > 1 else xp.array(parts[0], copy=True)
        flat /= self._world
        backend = dist._backend_for("DistributedDataParallel", bucket.params[0])
        if self.device.type == "cuda":
            import cupy

            if self._side_stream is None:
                self._side_stream = cupy.cuda.Stream(non_blocking=True)
            current = cupy.cuda.get_current_stream()
            ready = cupy.cuda.Event(disable_timing=True)
            ready.record(current)
            self._side_stream.wait_event(ready)
            # flat stays alive (in st.launched) until _finish_backward has made the current stream wait for it
            work = backend.all_reduce(flat, "sum", stream=self._side_stream)
        else:
            work = backend.all_reduce(flat, "sum")
        self._state.launched[bucket.index] = (flat, work)
        if self.timeline is not None:
            self.timeline.append((time.perf_counter(), "launch", bucket.index))

    def _finish_backward(self):
        st, self._state = self._state, None
        if st is None:
            return
        if st.next_bucket < len(self._buckets):
            missing = [self._names.get(id(self._params[i]), str(i)) for i, done in enumerate(st.done) if not done]
            # wait for what was launched, so that no collective is left half done, then explain
            for entry in st.launched:
                if entry is not None:
                    entry[1].wait()
            raise RuntimeError(
                "DistributedDataParallel: these parameters received no gradient in this backward pass, so their "
                f"gradient buckets could not be all-reduced: {missing}. If the forward pass does not use them "
                "(or the loss does not depend on them), pass find_unused_parameters=True to "
                "DistributedDataParallel, as in torch; or remove them from the model.")
        used = None
        if self.find_unused_parameters:
            xp = _device.array_module(self.device)
            flags = Tensor._make(xp.asarray(np.array(st.used, dtype=np.int32)))
            dist.all_reduce(flags, dist.ReduceOp.MAX)
            used = _device.move_array(flags._data, "cpu").astype(bool)
        for bucket in self._buckets:
            flat, work = st.launched[bucket.index]
            t0 = time.perf_counter()
            work.wait()
            if self.timeline is not None:
                self.timeline.append((t0, "wait", bucket.index, time.perf_counter()))
            for k, (p, i) in enumerate(zip(bucket.params, bucket.indices)):
                if used is not None and not used[i]:
                    continue          # unused on every rank: its .grad stays as it was (None), as torch
                g = flat[bucket.offsets[k]:bucket.offsets[k + 1]].reshape(p.shape)
                if p.ndim in (4, 5) and _layout.strictly_channels_last(p._data):
                    g = _layout.copy_as(g, True)     # a channels_last filter keeps a channels_last gradient
                # The averaged gradient is a view of the bucket's array (torch's gradient_as_bucket_view): no
                # copy. The array is this step's own; the next backward flattens into a new one.
                if p.grad is None:
                    p.grad = Tensor._make(g)
                else:
                    p.grad._data = g
                    p.grad._version += 1

    # ------------------------------------------------------------------------------------------------ misc
    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward accumulates gradients locally without all-reducing them (gradient accumulation);
        the first backward after a forward outside all-reduces the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def join(self, *args, **kwargs):
        raise NotImplementedError("DistributedDataParallel.join: uneven inputs are not supported in minidl; give every "
                                  "rank the same number of batches (DistributedSampler does)")

    def register_comm_hook(self, state, hook):
        raise NotImplementedError("DistributedDataParallel.register_comm_hook: minidl's DDP always averages by "
                                  "all-reduce; communication hooks are not supported")

    def extra_repr(self):
        return (f"world_size={self._world}, buckets={len(self._buckets)}, "
                f"find_unused_parameters={self.find_unused_parameters}")


def _tensors_in(output):
    if isinstance(output, Tensor):
        yield output
    elif isinstance(output, (list, tuple)):
        for o in output:
            yield from _tensors_in(o)
    elif isinstance(output, dict):
        for o in output.values():
            yield from _tensors_in(o)
