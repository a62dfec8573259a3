"""minidl.distributed on the CPU: several processes over MPI, started by the launcher as a user would.

Each multi-process test runs a program from tests/distributed/ through
`python -m minidl.distributed.run --nproc-per-node N ...`; the program checks its own results (exit code 0)
or writes weights that are compared here with one process trained on the whole batches.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
from minidl.data import DistributedSampler

HERE = os.path.join(os.path.dirname(__file__), "distributed")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import mpi4py  # noqa: F401
    HAVE_MPI = True
except ImportError:
    HAVE_MPI = False
# CI installs the dev extra, which has mpi4py and mpich: there a missing MPI is a failure, not a skip
needs_mpi = pytest.mark.skipif(not HAVE_MPI and not os.environ.get("CI"),
                               reason="mpi4py is not installed (pip install 'minidl[distributed]')")


def launch(*args, nproc=2, timeout=120, start=None):
    cmd = [sys.executable, "-m", "minidl.distributed.run", "--nproc-per-node", str(nproc)]
    if start:
        cmd += ["--start", start]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    proc = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, cwd=HERE, env=env)
    return proc, time.monotonic() - t0


@needs_mpi
@pytest.mark.parametrize("nproc", [2, 3])
def test_every_collective_matches_numpy(nproc):
    proc, _ = launch("collectives.py", nproc=nproc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"all checks passed on {nproc} ranks" in proc.stdout


@needs_mpi
@pytest.mark.parametrize("mode", ["plain", "syncbn", "no_sync", "unused"])
def test_ddp_matches_one_process_on_the_whole_batches(mode, tmp_path):
    proc, _ = launch("ddp_train.py", "--mode", mode, "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ref = subprocess.run([sys.executable, "ddp_train.py", "--mode", mode, "--reference", "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=HERE, timeout=120)
    assert ref.returncode == 0, ref.stderr
    want = np.load(tmp_path / "reference.npz")
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    assert sorted(ranks[0].keys()) == sorted(want.keys())
    if mode == "syncbn":   # the global batch's statistics reach the running buffers too
        assert "b_bn.running_mean" in want and "b_bn.running_var" in want
    for k in want:
        np.testing.assert_array_equal(ranks[0][k], ranks[1][k], err_msg=f"{k}: the ranks' weights differ")
        np.testing.assert_allclose(ranks[0][k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


@needs_mpi
def test_ddp_without_find_unused_parameters_names_the_unused_one(tmp_path):
    proc, _ = launch("ddp_train.py", "--mode", "unused_error", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("raised as expected") == 2


@needs_mpi
def test_launcher_stops_the_others_when_a_rank_dies():
    proc, seconds = launch("failures.py", "--case", "die")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert seconds < 25, f"the launcher took {seconds:.0f} s: rank 0 was not stopped"
    assert "exit code 3" in proc.stderr


@needs_mpi
def test_a_killed_rank_stops_the_launcher_and_leaves_no_process_behind(tmp_path):
    """SIGKILL: the rank cannot clean up or call MPI_Abort; mpiexec must still end the run with a non-zero code,
    and the rank waiting in its all_reduce must not outlive it. (On GPUs, spawned ranks and NCCL:
    tests/gpu/test_distributed_gpu.py.)"""
    marker = f"failures.py --case kill --tag {tmp_path.name}"
    proc, seconds = launch("failures.py", "--case", "kill", "--tag", tmp_path.name)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert seconds < 25, f"the launcher took {seconds:.0f} s"
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"


def test_launcher_spawn_stops_the_others_when_a_rank_dies():
    proc, seconds = launch("failures.py", "--case", "sleep", start="spawn")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert seconds < 25
    assert "rank 1 (local rank 1) exited with code 4; stopped the other 1 process(es)" in proc.stderr


@needs_mpi
def test_a_collective_that_waits_past_the_timeout_raises_naming_rank_and_op():
    proc, seconds = launch("failures.py", "--case", "timeout")
    assert proc.returncode != 0
    assert "rank 0: all_reduce (sum of 4 float32 element(s)) over mpi did not finish within 2 s" in proc.stderr, proc.stderr
    assert seconds < 25


@needs_mpi
def test_mpi_backend_in_processes_not_started_by_mpiexec_says_how_to_start_them():
    proc, _ = launch("collectives.py", start="spawn")
    assert proc.returncode != 0
    assert "the processes were not started by mpiexec" in proc.stderr


def test_launcher_environment_follows_torchrun(tmp_path):
    script = tmp_path / "env.py"
    # one write per process (a print() under PYTHONUNBUFFERED writes the line and its newline separately, and the
    # two ranks share the launcher's stdout: their lines could interleave)
    script.write_text("import os\nkeys = ['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', "
                      "'MASTER_PORT', 'OMP_NUM_THREADS', 'NCCL_NVLS_ENABLE']\n"
                      "os.write(1, (' '.join(f'{k}={os.environ.get(k)}' for k in keys) + '\\n').encode())\n")
    proc, _ = launch(str(script), "--flag", start="spawn")
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.strip().splitlines())
    assert len(lines) == 2
    for r, line in enumerate(lines):
        assert f"RANK={r} LOCAL_RANK={r} WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1" in line
        assert "OMP_NUM_THREADS=1" in line and "NCCL_NVLS_ENABLE=0" in line


def test_launcher_refuses_several_machines():
    proc = subprocess.run([sys.executable, "-m", "minidl.distributed.run", "--nnodes", "2", "x.py"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "runs on one machine" in proc.stderr


# ---------------------------------------------------------------------------------------------- in-process


def test_calls_before_init_process_group_say_what_to_do():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="init_process_group"):
        dist.get_rank()
    with pytest.raises(ValueError, match="init_process_group"):
        dist.all_reduce(minidl.ones(2))
    with pytest.raises(ValueError, match="init_process_group"):
        minidl.nn.parallel.DistributedDataParallel(minidl.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="num_replicas and rank"):
        DistributedSampler(range(10))


def test_init_process_group_without_the_launchers_environment_names_the_variable():
    code = ("import os\nfor k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'): os.environ.pop(k, None)\n"
            "import minidl.distributed as d\n"
            "try:\n    d.init_process_group('nccl')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "RANK" in out or "NCCL needs a GPU" in out, out
    with pytest.raises(ValueError, match="unknown backend 'tcp'"):
        dist.init_process_group("tcp")
    with pytest.raises(TypeError, match="timedelta"):
        dist.init_process_group("nccl", timeout=30)
    assert not dist.is_initialized()


@pytest.mark.parametrize("n", [0, 1, 7, 10, 11, 23])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_partitions_as_torch(n, replicas, drop_last):
    torch_data = pytest.importorskip("torch.utils.data")
    if n == 0 and not drop_last:
        pass
    for rank in range(replicas):
        ours = DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        theirs = torch_data.DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        if n == 0 and not drop_last:
            assert len(ours) == len(theirs) == 0
            continue
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_shuffles_the_same_way_on_every_rank(drop_last):
    n, replicas = 23, 3
    shares = [list(DistributedSampler(range(n), replicas, r, seed=5, drop_last=drop_last)) for r in range(replicas)]
    flat = sorted(i for s in shares for i in s)
    if drop_last:   # disjoint, n rounded down to a multiple of the world
        assert len(flat) == len(set(flat)) == (n // replicas) * replicas
    else:           # every index, and the first few again to make the shares equal
        assert set(flat) == set(range(n)) and len(flat) == 24
    sampler = DistributedSampler(range(n), replicas, 0, seed=5)
    first = list(sampler)
    assert list(sampler) == first, "an epoch without set_epoch repeats the order"
    sampler.set_epoch(1)
    assert list(sampler) != first
    with pytest.raises(ValueError, match=r"Invalid rank 3, rank should be in the interval \[0, 2\]"):
        DistributedSampler(range(n), 3, 3)


def test_sync_batch_norm_is_batch_norm_outside_a_group():
    minidl.manual_seed(0)
    model = minidl.nn.Sequential(minidl.nn.Conv2d(3, 4, 3), minidl.nn.BatchNorm2d(4), minidl.nn.ReLU())
    conv = minidl.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(conv[1], minidl.nn.SyncBatchNorm)
    assert conv[1].weight is model[1].weight and conv[1].running_mean is model[1].running_mean
    assert list(conv.state_dict()) == list(model.state_dict())
    torch = pytest.importorskip("torch")
    t = torch.nn.SyncBatchNorm.convert_sync_batchnorm(
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()))
    assert list(conv.state_dict()) == list(t.state_dict())
    x = minidl.randn(4, 3, 6, 6)
    ref = minidl.nn.BatchNorm2d(4)
    ref.load_state_dict(conv[1].state_dict())
    np.testing.assert_allclose(conv(x).detach().numpy(), minidl.nn.functional.relu(ref(model[0](x))).detach().numpy(),
                               rtol=1e-6, atol=1e-6)


def test_post_accumulate_grad_hook_and_queue_callback():
    from minidl.autograd.function import queue_callback

    w = minidl.ones(3, requires_grad=True)
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numpy().copy()))
    queue_order = []
    y = (w * 2).sum() + (w * 3).sum()
    w2 = w * 1
    w2.register_hook(lambda g: queue_callback(lambda: queue_order.append("end")) or None)
    (y + w2.sum()).backward()
    assert len(seen) == 3, "one call per gradient contribution"
    np.testing.assert_array_equal(seen[-1], np.full(3, 6.0))
    assert queue_order == ["end"]
    handle.remove()
    (w * 1).sum().backward()
    assert len(seen) == 3
    x = minidl.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        x.register_post_accumulate_grad_hook(print)


# ------------------------------------------------------------------------------------------------ examples
def _example(name, *args, nproc=2, cwd=ROOT):
    cmd = [sys.executable, "-m", "minidl.distributed.run", "--nproc-per-node", str(nproc),
           os.path.join(ROOT, "examples", name), *args]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


@needs_mpi
def test_ptb_lm_data_parallel_matches_one_process_at_the_same_global_batch(tmp_path):
    from tests.test_examples import write_word_corpus

    write_word_corpus(tmp_path)
    args = ["--device", "cpu", "--data", str(tmp_path), "--hidden-size", "16", "--embed-size", "16",
            "--batch-size", "4", "--bptt", "8", "--limit-batches", "6", "--epochs", "2", "--no-progress",
            "--optimizer", "adam", "--lr", "2e-2", "--dropout", "0"]
    proc = _example("ptb_lm.py", *args, "--checkpoint", str(tmp_path / "dp.mdl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("test perplexity") == 1, "only rank 0 reports"
    one = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "ptb_lm.py"), *args, "--checkpoint",
                          str(tmp_path / "one.mdl")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert one.returncode == 0, one.stderr
    dp, single = minidl.load(str(tmp_path / "dp.mdl")), minidl.load(str(tmp_path / "one.mdl"))
    for k, v in single["model"].items():
        np.testing.assert_allclose(np.asarray(dp["model"][k].numpy()), np.asarray(v.numpy()), rtol=2e-4, atol=2e-5,
                                   err_msg=f"{k}: 2 processes x 2 streams differ from 1 process x 4 streams")


@needs_mpi
def test_train_cifar10_data_parallel_runs_and_checks_the_batch(tmp_path):
    from tests.test_examples import write_cifar_binary

    write_cifar_binary(tmp_path / "data")
    args = ["--device", "cpu", "--data", str(tmp_path / "data"), "--width", "8", "--limit-batches", "3",
            "--epochs", "1", "--no-progress", "--tta", "none", "--checkpoint", str(tmp_path / "c.mdl")]
    proc = _example("train_cifar10.py", *args, "--batch-size", "16", "--sync-bn")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "data-parallel over 2 processes (8 images each per step)" in proc.stdout
    assert os.path.exists(tmp_path / "c.mdl") and proc.stdout.count("epoch 1:") == 1
    bad = _example("train_cifar10.py", *args, "--batch-size", "15")
    assert bad.returncode != 0 and "must be a multiple of the 2 processes" in bad.stderr
    helped = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_cifar10.py"), "--help"],
                            capture_output=True, text=True, cwd=ROOT)
    assert "python -m minidl.distributed.run --nproc-per-node N" in helped.stdout


@needs_mpi
def test_a_torch_ddp_program_runs_unmodified():
    """tests/distributed/torch_ddp_program.py is written for torch (gloo, DistributedSampler, DDP); it runs
    on minidl through the launcher and minidl.run, and checks that the replicas agree and the loss falls."""
    proc, _ = launch("-m", "minidl.run", "torch_ddp_program.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch DDP program: 2 replicas agree" in proc.stdout
