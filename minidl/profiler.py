"""minidl.profiler: where the time of a training step goes (torch.profiler's names and shape).

    with minidl.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                 record_shapes=True) as prof:
        for _ in range(3):
            train_step()
            prof.step()                      # marks a step boundary (launches per step)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))
    prof.export_chrome_trace("trace.json")   # chrome://tracing or https://ui.perfetto.dev
    prof.plot_timeline("timeline.png")      # host and GPU rows, one bar per primitive call
    prof.launches_per_step()                 # [launches of step 1, step 2, ...]

What is recorded, exactly:
  * every call of a public primitive of minidl.primitives (convolution_forward, batch_norm_backward,
    gemm, multi_tensor_adam, ...), and of the ConvolutionPlan methods a layer calls instead (recorded
    as convolution_forward, convolution_backward_data, ...), i.e. every call the framework
    (nn.functional, optim, nn.utils) makes into the primitive library: its name, input shapes (record_shapes=True), host time (wall
    clock around the call, perf_counter_ns) and, for GPU calls with the CUDA activity, the GPU time
    between two CUDA events recorded on the current stream before and after the call;
  * user ranges: `with minidl.profiler.record_function("name"):`;
  * kernel launches: each launch of a kernel of kernels/*.cu (every kernel the primitive library
    launches is a minidl/primitives/cuda/_launch.Kernel, whose launch counts itself while a profile is
    active, also when a launcher kept the kernel in a launch plan made before the profile), attributed
    to the primitive call that made it. NOT counted:
    CuPy's own kernels (array arithmetic written with CuPy in the framework: loss formulas, the
    per-parameter optimizer path, `x + y` of Tensors, fills and copies) and cuBLAS calls (Linear
    with backends.cuda.use_cublas). The step's `other_launches` column is therefore a lower bound
    of the true number of launches; `launches` of the primitives is exact.

How: entering a profile replaces the public functions in the `minidl.primitives` namespace by timing
wrappers and puts them back on exit, so nothing is measured, wrapped or slowed when no profile is
active (the only check left on the launch path is one global read in Kernel.__call__).
CUDA events cost a few µs of host time per call; host times under the CUDA activity include them.
On the CPU path (NumPy) only host times are recorded.
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field

from . import _device

__all__ = ["profile", "ProfilerActivity", "ProfilerAction", "record_function", "schedule", "tensorboard_trace_handler",
           "FunctionEvent", "EventList"]


class ProfilerAction:
    """What a schedule asks of a step (torch.profiler.ProfilerAction)."""

    NONE, WARMUP, RECORD, RECORD_AND_SAVE = "none", "warmup", "record", "record_and_save"


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """torch.profiler.schedule: after skip_first steps, cycles of `wait` idle steps, `warmup` steps (run, not
    recorded) and `active` recorded steps, the last of which hands the profile to on_trace_ready; `repeat` cycles
    (0: as many as there are steps)."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError("schedule: wait, warmup, repeat and skip_first must be >= 0 and active > 0")

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < wait:
            return ProfilerAction.NONE
        if at < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An on_trace_ready that writes each cycle's Chrome trace into dir_name (worker_name.<ns>.pt.trace.json), the
    file TensorBoard's profiler plugin and Perfetto read."""
    import os
    import socket

    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{worker}.{time.time_ns()}.pt.trace.json")
        prof.export_chrome_trace(path)
        if use_gzip:
            import gzip
            import shutil

            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(path)

    return handler


class ProfilerActivity:
    CPU = "cpu"
    CUDA = "cuda"


# Primitive-library names that are not operations (descriptors, shape helpers, policies).
_NOT_OPS = {"get_array_module", "is_cuda_array", "batch_norm_param_shape", "convolution_output_shape",
            "find_convolution_algorithms", "get_convolution_algorithm", "set_convolution_policy",
            "get_convolution_policy", "convolution_policy", "clear_convolution_algorithm_cache",
            "multi_tensor_supported", "pooling_output_shape", "dropout_mask"}

# Methods of primitive-library objects that run a primitive, recorded under the primitive's name:
# a layer keeps a ConvolutionPlan per shape and calls it instead of convolution_forward(...); a Linear layer's GEMMs
# run through GemmPlans (nn/functional/dense.py) instead of gemm(...).
_METHODS = {("ConvolutionPlan", "forward"): "convolution_forward",
            ("ConvolutionPlan", "backward_data"): "convolution_backward_data",
            ("ConvolutionPlan", "backward_filter"): "convolution_backward_filter",
            ("ConvolutionPlan", "backward_bias"): "convolution_backward_bias",
            ("GemmPlan", "__call__"): "gemm"}

_active: "profile | None" = None


@dataclass
class FunctionEvent:
    """One recorded call: name, input shapes, host interval (ns since the profile began), GPU time
    (ms, None without the CUDA activity or for a CPU call), kernel launches made inside it."""
    name: str
    shapes: list = field(default_factory=list)
    host_start_ns: int = 0
    host_end_ns: int = 0
    launches: int = 0
    device: str = "cpu"
    step: int = 0
    kind: str = "primitive"      # or "user" (record_function)
    _start_event: object = None
    _end_event: object = None
    cuda_time_ms: float | None = None
    cuda_start_ms: float | None = None

    @property
    def cpu_time_ms(self) -> float:
        return (self.host_end_ns - self.host_start_ns) / 1e6


def _shapes(args, kwargs):
    out = []
    for a in list(args) + list(kwargs.values()):
        if hasattr(a, "shape") and hasattr(a, "dtype"):
            out.append(tuple(int(s) for s in a.shape))
        elif isinstance(a, (list, tuple)) and a and hasattr(a[0], "shape"):
            out.append(f"[{len(a)} arrays]")
    return out


def _on_gpu(args, kwargs) -> bool:
    for a in list(args) + list(kwargs.values()):
        if _device.is_cuda_array(a):
            return True
        if isinstance(a, (list, tuple)) and a and _device.is_cuda_array(a[0]):
            return True
    return False


def _count_launch():
    """What every kernel launch calls while a profile is active (primitives/_common.launch_counter, read by
    _launch.Kernel.__call__): one more launch for the active profile."""
    if _active is not None:
        _active._launches += 1


class profile:
    """Record primitive calls, their host and GPU times and kernel launches (see the module docstring).

    activities: a list of ProfilerActivity (default: CPU, plus CUDA when the GPU is usable).
    record_shapes: keep each call's input shapes (key_averages(group_by_input_shape=True)).
    """

    def __init__(self, activities=None, record_shapes=False, with_stack=False, profile_memory=False, schedule=None,
                 on_trace_ready=None):
        if activities is None:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if _device.cuda_unavailable_reason() is None
                                                   else [])
        activities = [getattr(a, "value", a) for a in activities]
        unknown = [a for a in activities if a not in (ProfilerActivity.CPU, ProfilerActivity.CUDA)]
        if unknown:
            raise ValueError(f"profile: unknown activities {unknown}; use ProfilerActivity.CPU / CUDA")
        self.activities = set(activities)
        self.record_shapes = bool(record_shapes)
        self.events: list[FunctionEvent] = []
        self._launches = 0
        self._step = 0
        self._step_launches: list[int] = []
        self._step_start_launches = 0
        self._saved = {}
        self._saved_methods = {}
        self._t0 = 0
        self._gpu_origin = None
        self._finished = False
        # schedule (torch.profiler.schedule): what to do at each step; record only in its RECORD steps, and hand the
        # profile to on_trace_ready at the end of each RECORD_AND_SAVE step (its results cover that cycle)
        self.schedule, self.on_trace_ready = schedule, on_trace_ready
        self._action = ProfilerAction.RECORD if schedule is None else schedule(0)
        self._in_trace_ready = False

    # -- context ---------------------------------------------------------------------------------
    def __enter__(self):
        global _active
        if _active is not None:
            raise RuntimeError("profile: a profile is already active (profiles do not nest)")
        from . import primitives as P
        self._t0 = time.perf_counter_ns()
        if ProfilerActivity.CUDA in self.activities and _device.cuda_unavailable_reason() is None:
            cupy = _device.require_cuda("profiler")
            self._gpu_origin = cupy.cuda.Event()
            self._gpu_origin.record()
        for name in dir(P):
            fn = getattr(P, name)
            if (name.startswith("_") or name in _NOT_OPS or not callable(fn) or isinstance(fn, type)
                    or not getattr(fn, "__module__", "").startswith("minidl.primitives")):
                continue
            self._saved[name] = fn
            setattr(P, name, self._wrap(name, fn))
        for (cls_name, method), name in _METHODS.items():
            cls = getattr(P, cls_name, None)
            if cls is not None and method in cls.__dict__:
                original = cls.__dict__[method]
                self._saved_methods[(cls, method)] = original
                setattr(cls, method, self._wrap_method(name, original))
        _active = self
        P._common.launch_counter = _count_launch   # every kernel launch is counted from now on
        return self

    def __exit__(self, *exc):
        global _active
        from . import primitives as P
        for name, fn in self._saved.items():
            setattr(P, name, fn)
        for (cls, method), original in self._saved_methods.items():
            setattr(cls, method, original)
        self._saved, self._saved_methods = {}, {}
        P._common.launch_counter = None
        _active = None
        if self._launches != self._step_start_launches or not self._step_launches:
            self._step_launches.append(self._launches - self._step_start_launches)
        self._resolve_gpu_times()
        self._finished = True
        return False

    def step(self):
        """Mark the end of a training step: launches_per_step() counts between two marks. With a schedule: the next
        step's action, and on_trace_ready(self) after a RECORD_AND_SAVE step."""
        self._step_launches.append(self._launches - self._step_start_launches)
        self._step_start_launches = self._launches
        self._step += 1
        if self.schedule is None:
            return
        if self._action == ProfilerAction.RECORD_AND_SAVE:
            self._trace_ready()
        self._action = self.schedule(self._step)

    def _trace_ready(self):
        """Hand the cycle's events to on_trace_ready (results readable inside it), then start the next cycle."""
        self._resolve_gpu_times()
        if self.on_trace_ready is not None:
            self._in_trace_ready = True
            try:
                self.on_trace_ready(self)
            finally:
                self._in_trace_ready = False
        self.events = []

    def _wrap(self, name, fn):
        prof = self

        def recorded(*args, **kwargs):
            return prof._record(name, "primitive", fn, args, kwargs)

        recorded.__name__ = name
        recorded.__doc__ = fn.__doc__
        recorded.__wrapped__ = fn
        return recorded

    def _wrap_method(self, name, method):
        prof = self

        def recorded(obj, *args, **kwargs):
            return prof._record(name, "primitive", lambda *a, **k: method(obj, *a, **k), args, kwargs)

        recorded.__name__ = method.__name__
        recorded.__doc__ = method.__doc__
        recorded.__wrapped__ = method
        return recorded

    def _record(self, name, kind, fn, args, kwargs):
        if self._action not in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            return fn(*args, **kwargs)   # (a schedule's wait or warm-up step)
        gpu = _on_gpu(args, kwargs)
        ev = FunctionEvent(name, _shapes(args, kwargs) if self.record_shapes else [], device="cuda" if gpu else "cpu",
                           step=self._step, kind=kind)
        with _timed(self, ev, gpu and self._gpu_origin is not None):
            return fn(*args, **kwargs)

    def _resolve_gpu_times(self):
        if self._gpu_origin is None:
            return
        cupy = _device.require_cuda("profiler")
        cupy.cuda.Device().synchronize()
        for ev in self.events:
            if ev._start_event is not None:
                ev.cuda_start_ms = cupy.cuda.get_elapsed_time(self._gpu_origin, ev._start_event)
                ev.cuda_time_ms = cupy.cuda.get_elapsed_time(ev._start_event, ev._end_event)
                ev._start_event = ev._end_event = None

    # -- results ---------------------------------------------------------------------------------
    def _check_finished(self, op):
        if not self._finished and not self._in_trace_ready:
            raise RuntimeError(f"profile.{op}: call it after the `with profile(...)` block has ended")

    def key_averages(self, group_by_input_shape=False) -> "EventList":
        """One row per primitive (and input shapes, if asked): calls, host and GPU totals, launches."""
        self._check_finished("key_averages")
        rows = {}
        for ev in self.events:
            key = (ev.name, str(ev.shapes)) if group_by_input_shape else (ev.name, "")
            r = rows.setdefault(key, {"name": ev.name, "shapes": key[1], "count": 0, "cpu_time_total": 0.0,
                                      "cuda_time_total": 0.0, "launches": 0, "kind": ev.kind})
            r["count"] += 1
            r["cpu_time_total"] += ev.cpu_time_ms
            r["cuda_time_total"] += ev.cuda_time_ms or 0.0
            r["launches"] += ev.launches
        return EventList(list(rows.values()), steps=max(1, len(self._step_launches)),
                         total_launches=self._launches, show_cuda=self._gpu_origin is not None)

    def launches_per_step(self) -> list:
        """Kernel launches (kernels/*.cu, see the module docstring) between successive step() marks."""
        self._check_finished("launches_per_step")
        return list(self._step_launches)

    def export_chrome_trace(self, path):
        """Write a Chrome trace (JSON, chrome://tracing / Perfetto): a host row and a GPU row."""
        self._check_finished("export_chrome_trace")
        trace = []
        for ev in self.events:
            args = {"launches": ev.launches, "step": ev.step}
            if ev.shapes:
                args["shapes"] = [list(s) if isinstance(s, tuple) else s for s in ev.shapes]
            trace.append({"name": ev.name, "ph": "X", "pid": 0, "tid": "host", "cat": ev.kind,
                          "ts": ev.host_start_ns / 1e3, "dur": max(ev.cpu_time_ms * 1e3, 0.001), "args": args})
            if ev.cuda_time_ms is not None:
                trace.append({"name": ev.name, "ph": "X", "pid": 0, "tid": "gpu", "cat": "gpu",
                              "ts": ev.cuda_start_ms * 1e3, "dur": max(ev.cuda_time_ms * 1e3, 0.001), "args": args})
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)
        return path

    def plot_timeline(self, path=None, ax=None, max_events=2000):
        """A timeline: one bar per call on a host row and (CUDA) a GPU row, coloured by primitive. The
        white space on the GPU row is where the GPU waited for the host (launch gaps)."""
        self._check_finished("plot_timeline")
        import matplotlib

        if ax is None:
            matplotlib.use(matplotlib.get_backend())
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(12, 2.6))
        else:
            fig = ax.figure
        events = [e for e in self.events if e.kind == "primitive"][:max_events]
        names = sorted({e.name for e in events})
        cmap = matplotlib.colormaps["tab20"]
        colour = {n: cmap(i % 20) for i, n in enumerate(names)}
        for e in events:
            ax.broken_barh([(e.host_start_ns / 1e6, max(e.cpu_time_ms, 1e-4))], (1.1, 0.8), color=colour[e.name])
            if e.cuda_time_ms is not None:
                ax.broken_barh([(e.cuda_start_ms, max(e.cuda_time_ms, 1e-4))], (0.1, 0.8), color=colour[e.name])
        ax.set_yticks([0.5, 1.5], ["GPU", "host"])
        ax.set_xlabel("time since the profile began (ms)")
        handles = [matplotlib.patches.Patch(color=colour[n], label=n) for n in names[:12]]
        ax.legend(handles=handles, fontsize=6, ncol=4, loc="upper left", bbox_to_anchor=(0, -0.35))
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120, bbox_inches="tight")
        return fig

    def plot_launches_per_step(self, path=None, ax=None, label=None):
        """Bar chart of kernel launches per step."""
        self._check_finished("plot_launches_per_step")
        import matplotlib.pyplot as plt

        fig, ax = (plt.subplots(figsize=(5, 2.5)) if ax is None else (ax.figure, ax))
        counts = self.launches_per_step()
        ax.bar(range(1, len(counts) + 1), counts, label=label)
        ax.set_xlabel("step")
        ax.set_ylabel("kernel launches")
        if path is not None:
            fig.savefig(path, dpi=120, bbox_inches="tight")
        return fig


class EventList(list):
    """The rows of key_averages(): dicts with name, shapes, count, cpu_time_total, cuda_time_total
    (ms) and launches."""

    def __init__(self, rows, steps=1, total_launches=0, show_cuda=True):
        super().__init__(rows)
        self.steps, self.total_launches, self.show_cuda = steps, total_launches, show_cuda

    def table(self, sort_by="cpu_time_total", row_limit=100) -> str:
        """A text table sorted by sort_by (cpu_time_total, cuda_time_total, count, launches), largest first."""
        keys = ("cpu_time_total", "cuda_time_total", "count", "launches")
        if sort_by not in keys:
            raise ValueError(f"table: sort_by must be one of {keys}, got {sort_by!r}")
        rows = sorted(self, key=lambda r: r[sort_by], reverse=True)[:row_limit]
        prims = [r for r in self if r.get("kind") == "primitive"]  # user ranges contain primitives
        host_total = sum(r["cpu_time_total"] for r in prims) or 1.0
        gpu_total = sum(r["cuda_time_total"] for r in prims) or 1.0
        width = max([len("Name")] + [len(r["name"]) for r in rows]) + 2
        shapes = any(r["shapes"] for r in rows)
        head = f"{'Name':<{width}}{'Calls':>7}{'Host total':>13}{'Host %':>8}{'Host avg':>11}"
        if self.show_cuda:
            head += f"{'GPU total':>12}{'GPU %':>8}{'GPU avg':>10}"
        head += f"{'Launches':>10}" + ("  Input shapes" if shapes else "")
        lines = [head, "-" * len(head)]
        for r in rows:
            line = (f"{r['name']:<{width}}{r['count']:>7}{r['cpu_time_total']:>11.3f}ms"
                    f"{100 * r['cpu_time_total'] / host_total:>7.1f}%{r['cpu_time_total'] / r['count'] * 1e3:>9.1f}us")
            if self.show_cuda:
                line += (f"{r['cuda_time_total']:>10.3f}ms{100 * r['cuda_time_total'] / gpu_total:>7.1f}%"
                         f"{r['cuda_time_total'] / r['count'] * 1e3:>8.1f}us")
            line += f"{r['launches']:>10}" + (f"  {r['shapes']}" if shapes else "")
            lines.append(line)
        lines.append("-" * len(head))
        summary = (f"{len(prims)} primitives, {sum(r['count'] for r in prims)} calls, host {host_total:.3f} ms in "
                   f"primitives")
        if self.show_cuda:
            summary += f", GPU {gpu_total:.3f} ms, {self.total_launches} launches of kernels/*.cu " \
                       f"({self.total_launches / self.steps:.1f} per step; CuPy's own kernels not counted)"
        lines.append(summary)
        return "\n".join(lines)


@contextlib.contextmanager
def record_function(name: str):
    """A user range in the profile (e.g. "forward", "optimizer"); does nothing when no profile is active."""
    prof = _active
    if prof is None:
        yield
        return
    with _user_range(prof, name):
        yield


@contextlib.contextmanager
def _user_range(prof, name):
    gpu = prof._gpu_origin is not None
    ev = FunctionEvent(name, device="cuda" if gpu else "cpu", step=prof._step, kind="user")
    with _timed(prof, ev, gpu):
        yield


@contextlib.contextmanager
def _timed(prof, ev, gpu):
    """Time the block into `ev`: the host clock, CUDA events around it when `gpu`, and the kernel launches it made;
    then `ev` joins prof.events (a primitive's call and a user range alike)."""
    if gpu:
        cupy = _device.require_cuda("profiler")
        ev._start_event, ev._end_event = cupy.cuda.Event(), cupy.cuda.Event()
    before = prof._launches
    ev.host_start_ns = time.perf_counter_ns() - prof._t0
    if gpu:
        ev._start_event.record()
    try:
        yield
    finally:
        if gpu:
            ev._end_event.record()
        ev.host_end_ns = time.perf_counter_ns() - prof._t0
        ev.launches = prof._launches - before
        prof.events.append(ev)
