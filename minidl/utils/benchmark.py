"""torch.utils.benchmark's Timer, on Python's timeit: the per-sample-gradients and model-ensembling tutorials time
their two versions with it. A GPU statement is synchronised before each reading (minidl.cuda.synchronize), as
torch's Timer does, so a measurement covers the kernels, not only their launch."""
from __future__ import annotations

import statistics
import timeit


def _synchronize():
    from .. import cuda

    if cuda.is_available():
        cuda.synchronize()


class Measurement:
    """The times of `number_per_run` runs of a statement, repeated: mean, median, iqr (seconds per run), as
    torch.utils.benchmark.Measurement."""

    def __init__(self, number_per_run, raw_times, task_spec):
        self.number_per_run, self.raw_times, self.task_spec = number_per_run, list(raw_times), task_spec
        self.times = [t / number_per_run for t in self.raw_times]

    @property
    def mean(self):
        return statistics.fmean(self.times)

    @property
    def median(self):
        return statistics.median(self.times)

    @property
    def iqr(self):
        if len(self.times) < 2:
            return 0.0
        q = statistics.quantiles(self.times, n=4)
        return q[2] - q[0]

    def __repr__(self):
        median = self.median
        unit, scale = ("s", 1) if median >= 1 else ("ms", 1e3) if median >= 1e-3 else ("us", 1e6)
        label = f"{self.task_spec['label']}: " if self.task_spec.get("label") else ""
        return (f"<minidl.utils.benchmark.Measurement object>\n{label}{self.task_spec['stmt']}\n"
                f"  {median * scale:.2f} {unit}\n  1 measurement, {self.number_per_run} runs , 1 thread")


class Timer:
    """Timer(stmt, setup="pass", globals=None, label=None, ...).timeit(number) / blocked_autorange() /
    adaptive_autorange(): the time of stmt per run."""

    def __init__(self, stmt="pass", setup="pass", global_setup="", timer=timeit.default_timer, globals=None,
                 label=None, sub_label=None, description=None, env=None, num_threads=1, language="python"):
        self._timer = timeit.Timer(stmt=f"{stmt}\n_synchronize()", setup=setup, timer=timer,
                                   globals=dict(globals or {}, _synchronize=_synchronize))
        self.task_spec = {"stmt": stmt, "label": label, "sub_label": sub_label, "description": description}

    def timeit(self, number=1000000):
        self._timer.timeit(number=1)   # (a warm-up run, as torch's)
        return Measurement(number, [self._timer.timeit(number=number)], self.task_spec)

    def blocked_autorange(self, callback=None, min_run_time=0.2):
        number, _ = self._timer.autorange()
        times, spent = [], 0.0
        while spent < min_run_time or not times:
            t = self._timer.timeit(number=number)
            times.append(t)
            spent += t
            if callback is not None:
                callback(number, t)
        return Measurement(number, times, self.task_spec)

    def adaptive_autorange(self, threshold=0.1, *, min_run_time=0.01, max_run_time=10.0, callback=None):
        return self.blocked_autorange(callback=callback, min_run_time=min_run_time)


__all__ = ["Timer", "Measurement"]
