"""Every collective, several dtypes and reductions, against NumPy computed from every rank's known input."""
import numpy as np

import minidl
import minidl.distributed as dist
from _setup import setup

args, rank, world = setup()
dev = args.device
R = np.arange(world)


def data(r, dtype, shape=(3, 5)):
    """Rank r's input: different on every rank, exact in every dtype checked."""
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + r + 1).astype(dtype)


def t(a, dtype=None):
    return minidl.tensor(a, dtype=dtype, device=dev)


def check(name, got, want, tol=0.0):
    got = np.asarray(got.float().cpu().numpy() if got.dtype in (minidl.float16, minidl.bfloat16) else got.cpu().numpy())
    assert got.shape == want.shape, f"{name}: shape {got.shape} vs {want.shape}"
    assert np.allclose(got, want, rtol=tol, atol=tol), f"{name}: rank {rank} got {got}, expected {want}"


reduce = {"SUM": lambda xs: np.sum(xs, 0), "MAX": lambda xs: np.max(xs, 0), "MIN": lambda xs: np.min(xs, 0),
          "PRODUCT": lambda xs: np.prod(xs, 0), "AVG": lambda xs: np.mean(xs, 0)}
for dtype in ("float32", "float64", "int64", "float16", "bfloat16"):
    np_dtype = np.float32 if dtype in ("float16", "bfloat16") else dtype
    for op, fn in reduce.items():
        if op == "AVG" and dtype == "int64":
            continue
        x = t(data(rank, np_dtype), getattr(minidl, dtype))
        dist.all_reduce(x, getattr(dist.ReduceOp, op))
        want = fn(np.stack([data(r, np.float64) for r in R]))
        tol = 0.0 if dtype in ("float64", "int64") else (1e-2 if dtype in ("float16", "bfloat16") else 1e-6) * np.abs(want).max()
        check(f"all_reduce {op} {dtype}", x, want, tol)

# a non-contiguous tensor (a transposed view) is reduced in place through a contiguous copy
base = t(data(rank, np.float32))
view = base.t()
version = view._version
dist.all_reduce(view)
check("all_reduce of a transposed view", base, np.sum([data(r, np.float32) for r in R], 0))
assert view._version > version, "all_reduce must bump the version counter, as an in-place op"

# async_op: a Work to wait on
x = t(data(rank, np.float32))
work = dist.all_reduce(x, async_op=True)
work.wait()
check("all_reduce async", x, np.sum([data(r, np.float32) for r in R], 0))

for src in range(world):
    x = t(data(rank, np.float32))
    dist.broadcast(x, src=src)
    check(f"broadcast from {src}", x, data(src, np.float32))

outs = [minidl.zeros(3, 5, device=dev) for _ in R]
dist.all_gather(outs, t(data(rank, np.float32)))
for r in R:
    check(f"all_gather [{r}]", outs[r], data(r, np.float32))

flat = minidl.zeros(world * 15, device=dev)
dist.all_gather_into_tensor(flat, t(data(rank, np.float32)))
check("all_gather_into_tensor", flat, np.concatenate([data(r, np.float32).ravel() for r in R]))

out = minidl.zeros(3, 5, device=dev)
dist.reduce_scatter(out, [t(data(rank * world + k, np.float32)) for k in R])
check("reduce_scatter", out, np.sum([data(r * world + rank, np.float32) for r in R], 0))

out = minidl.zeros(4, device=dev)
dist.reduce_scatter_tensor(out, t(np.arange(4 * world, dtype=np.float32) * (rank + 1)), op=dist.ReduceOp.MAX)
check("reduce_scatter_tensor MAX", out, np.arange(4 * world, dtype=np.float32)[rank * 4:(rank + 1) * 4] * world)

# the differentiable all-reduce: its backward is an all-reduce of the output gradients
from minidl.distributed.nn.functional import all_reduce as all_reduce_grad  # noqa: E402

x = t(data(rank, np.float32)).requires_grad_()
y = all_reduce_grad(x)
(y * (rank + 1)).sum().backward()
check("autograd all_reduce forward", y.detach(), np.sum([data(r, np.float32) for r in R], 0))
check("autograd all_reduce backward", x.grad, np.full((3, 5), float(np.sum(R + 1))))

dist.barrier()
if rank == 0:
    print(f"collectives: all checks passed on {world} ranks ({dist.get_backend()})")
dist.destroy_process_group()
