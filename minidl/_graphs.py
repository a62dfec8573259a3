"""CUDA graphs: capture a sequence of GPU work once, replay it with one launch (torch.cuda's API).

A training step of a small network is launch-bound: Python queues a few hundred kernels and each
launch costs several microseconds of host time, longer than the kernel runs. A CUDA graph records
those launches once (stream capture) and replays them with one call, about 1 µs per kernel.

    g = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(g):            # capture on a side stream; nothing runs yet
        static_y = model(static_x)
    static_x.copy_(batch); g.replay()     # runs the captured kernels on the current stream

What a replay repeats is exactly what was captured: the same kernels, the same arguments, the same
device addresses. So
* inputs must live in *static* tensors that the user refills before each replay (copy_), and the
  outputs are static tensors that each replay overwrites;
* every value that changes from step to step must be read by the kernels from device memory:
  dropout's Philox (seed, offset) (minidl.random.philox_state, advanced on the device), batch norm's
  running statistics and num_batches_tracked (device arrays updated in place), the optimizer's step
  count and learning rate (device values in an optimizer that says so, see `_optimizer_is_capturable`);
* host work inside the capture runs once and is frozen. Ops that need it raise instead, naming the op
  (`minidl._device.check_not_capturing`): a host read (.item(), .tolist(), float()/bool() of a GPU
  tensor, .cpu(), a tensor made from host data), an algorithm search (cudnn.benchmark measuring a new
  shape), the eager index checks (backends.cuda.check_indices).

Memory: arrays allocated during capture come from a private CuPy MemoryPool (`graph_pool_handle()`,
or the graph's own), kept alive by the graph; the primitive library's workspace during capture is a
Handle owned by the graph, so eager calls never share scratch memory with a replay.

`make_graphed_callables(module, sample_args)` captures a module's forward and backward as two graphs
behind an autograd Function; `CUDAGraphStep` / `graphed_step` captures a whole training step (forward,
loss, backward, optimizer.step) after a few eager warm-up steps.
"""
from __future__ import annotations

import gc
import numbers

from . import _device

__all__ = ["CUDAGraph", "graph", "graph_pool_handle", "make_graphed_callables", "CUDAGraphStep",
           "graphed_step", "is_current_stream_capturing"]


def _cupy(op):
    return _device.require_cuda(op)


def is_current_stream_capturing() -> bool:
    """True while the current stream is being captured (torch.cuda.is_current_stream_capturing)."""
    return _device.is_capturing()


class _GraphPool:
    """A private memory pool for captured allocations (what graph_pool_handle() returns)."""

    def __init__(self, cupy):
        self.memory_pool = cupy.cuda.MemoryPool()

    def used_bytes(self) -> int:
        return int(self.memory_pool.used_bytes())

    def total_bytes(self) -> int:
        return int(self.memory_pool.total_bytes())


def graph_pool_handle():
    """A memory pool that several graphs may share (torch.cuda.graph_pool_handle): pass it as `pool=`
    to each capture. Graphs that share a pool must be replayed in the order they were captured."""
    return _GraphPool(_cupy("cuda.graph_pool_handle"))


class CUDAGraph:
    """One captured CUDA graph (torch.cuda.CUDAGraph): capture_begin / capture_end, replay, reset, pool."""

    def __init__(self):
        self._graph = None
        self._pool = None
        self._allocator = None
        self._handle_scope = None
        self._capture_stream = None

    def capture_begin(self, pool=None):
        """Start capturing the work queued on the current stream (which must not be the default
        stream: use the `graph` context, which sets up a side stream). Allocations go to `pool` (a
        graph_pool_handle() or another graph's pool()), else to a pool of this graph's own."""
        op = "CUDAGraph.capture_begin"
        cupy = _cupy(op)
        if self._graph is not None or self._capture_stream is not None:
            raise RuntimeError(f"{op}: this graph was already captured; call reset() first")
        if pool is not None and not isinstance(pool, _GraphPool):
            raise TypeError(f"{op}: pool must come from minidl.cuda.graph_pool_handle() or graph.pool(), "
                            f"got {type(pool).__name__}")
        stream = cupy.cuda.get_current_stream()
        if stream.ptr == 0:
            raise RuntimeError(f"{op}: cannot capture on the default (legacy) stream; capture inside "
                               "`with minidl.cuda.graph(g):` (it uses a side stream)")
        from .primitives.cuda import handle as handle_module

        self._pool = pool if pool is not None else _GraphPool(cupy)
        self._allocator = cupy.cuda.using_allocator(self._pool.memory_pool.malloc)
        self._allocator.__enter__()
        # The primitive library's workspace during capture belongs to this graph (see module doc).
        self._handle_scope = handle_module.use_handle(handle_module.Handle(cupy.cuda.Device().id))
        self._handle_scope.__enter__()
        try:
            stream.begin_capture()
        except BaseException:
            self._exit_scopes()
            raise
        self._capture_stream = stream

    def _exit_scopes(self):
        if self._handle_scope is not None:
            self._handle_scope.__exit__(None, None, None)
            self._handle_scope = None
        if self._allocator is not None:
            self._allocator.__exit__(None, None, None)
            self._allocator = None

    def capture_end(self):
        """End the capture started by capture_begin; the graph is then ready to replay."""
        op = "CUDAGraph.capture_end"
        if self._capture_stream is None:
            raise RuntimeError(f"{op}: no capture in progress (call capture_begin first)")
        stream, self._capture_stream = self._capture_stream, None
        try:
            self._graph = stream.end_capture()
        finally:
            self._exit_scopes()
        self._graph.upload(stream)

    def replay(self):
        """Run the captured work on the current stream (ordered after what was queued before)."""
        if self._graph is None:
            raise RuntimeError("CUDAGraph.replay: nothing captured yet (capture with minidl.cuda.graph(g))")
        self._graph.launch(_cupy("CUDAGraph.replay").cuda.get_current_stream())

    def reset(self):
        """Drop the captured graph (its memory pool goes when nothing else holds it)."""
        self._graph = None
        self._pool = None

    def pool(self):
        """This graph's memory pool, to share with a later capture (torch's CUDAGraph.pool())."""
        if self._pool is None:
            raise RuntimeError("CUDAGraph.pool: the graph has no pool yet (capture it first)")
        return self._pool

    def debug_dump(self, path):
        """Write the graph's structure (Graphviz DOT) to `path`, where CuPy offers it."""
        if self._graph is None:
            raise RuntimeError("CUDAGraph.debug_dump: nothing captured yet")
        dump = getattr(self._graph, "debug_dot_print", None)
        if dump is None:
            raise NotImplementedError("CUDAGraph.debug_dump: this CuPy has no Graph.debug_dot_print")
        dump(str(path))


_side_streams: dict = {}


def _side_stream(cupy):
    device = cupy.cuda.Device().id
    if device not in _side_streams:
        _side_streams[device] = cupy.cuda.Stream(non_blocking=True)
    return _side_streams[device]


class graph:
    """`with minidl.cuda.graph(g, pool=None, stream=None):` captures the block into CUDAGraph g.

    As torch.cuda.graph: waits for the device, collects garbage (so no array is freed into the pool
    mid-capture by the collector), then captures on `stream` (default: a side stream of minidl's).
    If the block raises, the capture is ended and the block's error is raised.
    """

    def __init__(self, cuda_graph, pool=None, stream=None):
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"cuda.graph: expected a minidl.cuda.CUDAGraph, got {type(cuda_graph).__name__}")
        self.cuda_graph, self.pool = cuda_graph, pool
        self.stream = stream

    def __enter__(self):
        cupy = _cupy("cuda.graph")
        cupy.cuda.Device().synchronize()
        gc.collect()
        self.stream = self.stream if self.stream is not None else _side_stream(cupy)
        self._stream_scope = self.stream
        self._stream_scope.__enter__()
        try:
            self.cuda_graph.capture_begin(pool=self.pool)
        except BaseException:
            self._stream_scope.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.cuda_graph.capture_end()
            else:
                try:  # end the (maybe invalidated) capture; the block's own error is the one to see
                    self.cuda_graph.capture_end()
                except Exception:
                    pass
                self.cuda_graph.reset()
        finally:
            self._stream_scope.__exit__(None, None, None)
        return False


# ------------------------------------------------------------------------------------------------
# Static inputs: what a replay reads, checked against what the user hands in
# ------------------------------------------------------------------------------------------------


def _describe(t) -> str:
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"


def check_static_args(op: str, static, args) -> None:
    """Raise if `args` differ from the captured static inputs in number, shape, dtype or device: a
    replay would read the static buffers' shape whatever the new batch is (a shape change needs a new
    capture, or an eager step)."""
    from .autograd.tensor import Tensor

    if len(args) != len(static):
        raise ValueError(f"{op}: captured with {len(static)} inputs, called with {len(args)}")
    for i, (s, a) in enumerate(zip(static, args)):
        if not isinstance(a, Tensor):
            raise TypeError(f"{op}: input {i} must be a Tensor (captured: {_describe(s)}), got {type(a).__name__}")
        if tuple(a.shape) != tuple(s.shape) or a.dtype != s.dtype or a.device != s.device:
            raise ValueError(
                f"{op}: input {i} has {_describe(a)} but the graph was captured with {_describe(s)}; a "
                "replay cannot change shapes: run this batch eagerly (e.g. the last, partial batch) or "
                "capture another graph for the new shape")


def _optimizer_is_capturable(optimizer) -> bool:
    """Whether the optimizer keeps its step count and learning rate on the device, so a replay sees
    the values of its time: the class says `_capturable = True`, or every group has torch's
    `capturable=True`."""
    if getattr(optimizer, "_capturable", False):
        return True
    return all(bool(g.get("capturable", False)) for g in optimizer.param_groups)


def _host_numbers(optimizer):
    """{(where, key): value} for every plain Python number in the optimizer's groups and state."""
    found = {}
    for i, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            if key != "params" and isinstance(value, numbers.Number) and not isinstance(value, bool):
                found[(f"param_groups[{i}]", key)] = value
    for j, (p, state) in enumerate(optimizer.state.items()):
        for key, value in state.items():
            if isinstance(value, numbers.Number) and not isinstance(value, bool):
                found[(f"state of parameter {j}", key)] = value
    return found


def _tensors_of(value):
    from .autograd.tensor import Tensor

    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_of(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_of(v)]
    return []


class CUDAGraphStep:
    """A whole training step captured once and replayed: `step = CUDAGraphStep(fn, optimizers=opt)`.

    `fn(*inputs)` is one eager training step (forward, loss, backward, optimizer.step(); zero_grad
    inside it, set_to_none) on GPU tensors; it returns what the caller wants back (the loss). Then
    `step(*inputs)` behaves like `fn(*inputs)`, call for call:

    * the first call makes the static input tensors (copies of the inputs);
    * each call copies its inputs into the static ones (same shapes, dtypes and devices, else a
      ValueError: run another shape eagerly with `step.eager(*inputs)`);
    * the first `warmup` calls run `fn` eagerly on a side stream (kernels compile, algorithms are
      chosen, optimizer state and gradients are allocated);
    * the next call captures `fn` into a CUDA graph (nothing runs during capture) and replays it;
      every later call only replays. The returned tensors are static: each replay overwrites them.

    Per-step values must live on the device (see the module doc). An optimizer that reads its
    learning rate or step count on the host (`_optimizer_is_capturable` false) would replay the
    capture's values forever, so: a host number of its state that changes during capture (Adam's
    step) raises at capture; a learning rate changed on the host after capture (a scheduler) raises
    at the next call. Pass every optimizer the step uses as `optimizers=`.

    Gradients: the captured backward writes each parameter's gradient into arrays of the graph's
    pool. Before each replay the parameters of `optimizers` (and `params`, for a step whose optimizer
    runs outside the graph) get those static gradient tensors back as `.grad`, so an eager step in
    between (a partial batch, `step.eager`) cannot leave `.grad` pointing at arrays the graph no
    longer writes.
    """

    def __init__(self, fn, *, optimizers=(), warmup=3, pool=None, params=()):
        if not callable(fn):
            raise TypeError(f"CUDAGraphStep: fn must be callable, got {type(fn).__name__}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"CUDAGraphStep: warmup must be an int >= 1 (eager steps before the capture), got {warmup!r}")
        from .optim.optimizer import Optimizer

        if isinstance(optimizers, Optimizer):
            optimizers = (optimizers,)
        optimizers = tuple(optimizers)
        for o in optimizers:
            if not isinstance(o, Optimizer):
                raise TypeError(f"CUDAGraphStep: optimizers must be minidl optimizers, got {type(o).__name__}")
        self.fn, self.optimizers, self.warmup, self.pool = fn, optimizers, warmup, pool
        seen, self.params = set(), []
        for p in [p for o in optimizers for g in o.param_groups for p in g["params"]] + list(params):
            if id(p) not in seen:
                seen.add(id(p))
                self.params.append(p)
        self._static_grads = []
        self.static_inputs = None
        self.static_outputs = None
        self.graph = None
        self.calls = 0
        self._lr_at_capture = None

    # -- the pieces ---------------------------------------------------------------------------
    def _make_static(self, args):
        from .autograd.tensor import Tensor

        op = "CUDAGraphStep"
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                raise TypeError(f"{op}: input {i} must be a Tensor, got {type(a).__name__}")
            if not a.is_cuda:
                raise ValueError(f"{op}: input {i} is on {a.device}; a CUDA graph step needs GPU tensors "
                                 "(move the batch with .to('cuda') first)")
            if a.requires_grad:
                raise ValueError(f"{op}: input {i} requires grad; pass data tensors (parameters belong "
                                 "to the model, not to the step's inputs)")
        return tuple(Tensor._make(a._data.copy()) for a in args)

    def _check_lr(self):
        if self._lr_at_capture is None:
            return
        for opt, captured in zip(self.optimizers, self._lr_at_capture):
            if captured is None:
                continue
            for i, (group, lr) in enumerate(zip(opt.param_groups, captured)):
                if group["lr"] != lr:
                    raise RuntimeError(
                        f"CUDAGraphStep: the learning rate of {type(opt).__name__} param_groups[{i}] changed on "
                        f"the host ({lr} -> {group['lr']}) after the step was captured; this optimizer reads lr "
                        "on the host, so every replay would still use the captured value. Use an optimizer "
                        "that keeps lr on the device (capturable), or run the step eagerly (the examples: --no-graph)")

    def _run_eager_on_side_stream(self, cupy):
        side, current = _side_stream(cupy), cupy.cuda.get_current_stream()
        side.wait_event(current.record())
        with side:
            out = self.fn(*self.static_inputs)
        current.wait_event(side.record())
        return out

    def _capture(self, cupy):
        before = [None if _optimizer_is_capturable(o) else _host_numbers(o) for o in self.optimizers]
        self.graph = CUDAGraph()
        try:
            with graph(self.graph, pool=self.pool):
                self.static_outputs = self.fn(*self.static_inputs)
        except BaseException:
            self.graph = None  # not captured: the next call tries again (and raises again, by name)
            raise
        for opt, snapshot in zip(self.optimizers, before):
            if snapshot is None:
                continue
            after = _host_numbers(opt)
            changed = [(where, key, snapshot.get((where, key)), after[(where, key)])
                       for (where, key) in after if snapshot.get((where, key)) != after[(where, key)]]
            if changed:
                self.graph = None
                where, key, old, new = changed[0]
                raise RuntimeError(
                    f"CUDAGraphStep: {type(opt).__name__} changed the host value {key!r} of its {where} during "
                    f"capture ({old} -> {new}); it keeps that count on the host, so every replay would reuse "
                    "the captured value. Use an optimizer with its step count on the device (capturable), "
                    "or run the step eagerly (the examples: --no-graph)")
        self._lr_at_capture = [None if s is None else [g["lr"] for g in o.param_groups]
                               for o, s in zip(self.optimizers, before)]
        self._static_grads = [(p, p.grad) for p in self.params]

    # -- the call -----------------------------------------------------------------------------
    def __call__(self, *args):
        op = "CUDAGraphStep"
        cupy = _cupy(op)
        if self.static_inputs is None:
            self.static_inputs = self._make_static(args)
        else:
            check_static_args(op, self.static_inputs, args)
            self._check_lr()
            for s, a in zip(self.static_inputs, args):
                if a is not s:
                    s._data[...] = a._data
        self.calls += 1
        if self.calls <= self.warmup:
            return self._run_eager_on_side_stream(cupy)
        if self.graph is None:
            self._capture(cupy)
        for p, g in self._static_grads:
            if p.grad is not g:
                p.grad = g
        self.graph.replay()
        return self.static_outputs

    def eager(self, *args):
        """Run fn eagerly on these inputs (any shape: e.g. the last, partial batch); nothing is captured."""
        return self.fn(*args)

    @property
    def captured(self) -> bool:
        return self.graph is not None


def graphed_step(fn=None, *, optimizers=(), warmup=3, pool=None, params=()):
    """Decorator form of CUDAGraphStep:

        @minidl.cuda.graphed_step(optimizers=opt)
        def train_step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        for x, y in loader:            # same shapes every call (drop or eagerly run a partial batch)
            loss = train_step(x.to("cuda"), y.to("cuda"))
    """
    if fn is None:
        return lambda f: CUDAGraphStep(f, optimizers=optimizers, warmup=warmup, pool=pool, params=params)
    return CUDAGraphStep(fn, optimizers=optimizers, warmup=warmup, pool=pool, params=params)


# ------------------------------------------------------------------------------------------------
# make_graphed_callables: a module's forward and backward as two graphs behind an autograd Function
# ------------------------------------------------------------------------------------------------


def make_graphed_callables(callables, sample_args, num_warmup_iters=3):
    """torch.cuda.make_graphed_callables for minidl Modules (or a tuple of them).

    Each module's forward (on static copies of sample_args) and its backward (from static output
    gradients to the inputs' and parameters' gradients) are captured as two graphs sharing one pool.
    The returned callable runs the forward graph and records one autograd Function whose backward
    replays the backward graph, so `loss.backward()` fills the parameters' .grad as before. The
    module's parameters must not be replaced afterwards (updating them in place, as optimizers do, is
    fine). Warm-up runs `num_warmup_iters` forward+backward passes (their gradients are discarded;
    batch norm's running statistics do advance, as in torch).
    """
    from .nn.module import Module

    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError(f"make_graphed_callables: {len(callables)} callables but {len(sample_args)} sample_args")
    cupy = _cupy("make_graphed_callables")
    pool = graph_pool_handle()
    results = []
    for module, args in zip(callables, sample_args):
        if not isinstance(module, Module):
            raise TypeError(f"make_graphed_callables: expected minidl.nn.Module objects, got {type(module).__name__}")
        if not isinstance(args, tuple):
            args = (args,)
        results.append(_GraphedModule(module, args, pool, num_warmup_iters, cupy))
    return results[0] if single else tuple(results)


class _GraphedModule:
    def __init__(self, module, sample_args, pool, warmup, cupy):
        from .autograd.function import Function
        from .autograd.tensor import Tensor

        op = "make_graphed_callables"
        for i, a in enumerate(sample_args):
            if not isinstance(a, Tensor) or not a.is_cuda:
                raise ValueError(f"{op}: sample_args[{i}] must be a GPU Tensor")
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.static_inputs = tuple(Tensor._make(a._data.copy(), requires_grad=a.requires_grad) for a in sample_args)
        grad_inputs = [t for t in self.static_inputs if t.requires_grad] + self.params

        def forward_backward(grad_outputs=None):
            saved = [p.grad for p in grad_inputs]
            for p in grad_inputs:
                p.grad = None
            outputs = module(*self.static_inputs)
            outs = outputs if isinstance(outputs, tuple) else (outputs,)
            return outputs, outs, saved

        side = _side_stream(cupy)
        side.wait_event(cupy.cuda.get_current_stream().record())
        with side:
            for _ in range(warmup):
                _, outs, saved = forward_backward()
                for o in outs:
                    if o.requires_grad:
                        o.backward(Tensor._make(cupy.ones_like(o._data)), retain_graph=False)
                for p, g in zip(grad_inputs, saved):
                    p.grad = g
        cupy.cuda.get_current_stream().wait_event(side.record())

        self.forward_graph, self.backward_graph = CUDAGraph(), CUDAGraph()
        with graph(self.forward_graph, pool=pool):
            outputs, outs, saved = forward_backward()
        self.single_output = not isinstance(outputs, tuple)
        self.static_outputs = outs
        self.static_grad_outputs = tuple(Tensor._make(cupy.zeros_like(o._data)) for o in outs)
        with graph(self.backward_graph, pool=pool):
            for o, g in zip(outs, self.static_grad_outputs):
                if o.requires_grad:
                    o.backward(g, retain_graph=True)
            self.static_grads = [t.grad for t in grad_inputs]
        for p, g in zip(grad_inputs, saved):
            p.grad = g
        owner = self

        class Graphed(Function):
            def forward(self, *arrays):
                for s, a in zip(owner.static_inputs, arrays[:len(owner.static_inputs)]):
                    if a is not s._data:
                        s._data[...] = a
                owner.forward_graph.replay()
                return tuple(o._data for o in owner.static_outputs)

            def backward(self, *grads):
                for s, g in zip(owner.static_grad_outputs, grads):
                    s._data[...] = g
                owner.backward_graph.replay()
                static = [None if g is None else g._data for g in owner.static_grads]
                it = iter(static)
                result = []
                for t in owner.static_inputs:
                    result.append(next(it) if t.requires_grad else None)
                result += [next(it) for _ in owner.params]
                return tuple(result)

        self._function = Graphed

    def __call__(self, *args):
        check_static_args("make_graphed_callables", self.static_inputs, args)
        outs = self._function.apply(*args, *self.params)
        if not isinstance(outs, tuple):
            outs = (outs,)
        return outs[0] if self.single_output else outs
