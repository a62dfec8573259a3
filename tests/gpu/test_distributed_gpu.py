"""minidl.distributed on GPUs (NCCL): the programs of tests/distributed/ with --device cuda, one process per
visible GPU (on a one-GPU machine: a communicator of size 1, which still runs every NCCL call)."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import minidl

pytestmark = pytest.mark.gpu

HERE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "distributed")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _gpu():
    if not minidl.cuda.is_available():
        pytest.skip(minidl.cuda.unavailable_reason())


def gpus():
    return minidl.cuda.device_count()


def launch(*args, nproc=None, timeout=300):
    cmd = [sys.executable, "-m", "minidl.distributed.run", "--start", "spawn", "--nproc-per-node", str(nproc or gpus())]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), NCCL_NVLS_ENABLE="0")
    t0 = time.monotonic()
    proc = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout, cwd=HERE, env=env)
    return proc, time.monotonic() - t0


def test_every_collective_matches_numpy_over_nccl():
    proc, _ = launch("collectives.py", "--device", "cuda")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"all checks passed on {gpus()} ranks" in proc.stdout


@pytest.mark.parametrize("mode", ["plain", "syncbn", "no_sync", "unused"])
def test_ddp_on_gpus_matches_one_gpu_on_the_whole_batches(mode, tmp_path):
    if 12 % gpus():
        pytest.skip("the test's batch of 12 must split evenly over the GPUs")
    proc, _ = launch("ddp_train.py", "--mode", mode, "--device", "cuda", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ref = subprocess.run([sys.executable, "ddp_train.py", "--mode", mode, "--reference", "--device", "cuda",
                          "--out", str(tmp_path)], capture_output=True, text=True, cwd=HERE, timeout=300)
    assert ref.returncode == 0, ref.stderr
    want = np.load(tmp_path / "reference.npz")
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(gpus())]
    for k in want:
        for r in range(1, gpus()):
            np.testing.assert_array_equal(ranks[0][k], ranks[r][k], err_msg=f"{k}: rank {r} differs from rank 0")
        np.testing.assert_allclose(ranks[0][k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_ddp_step_captured_in_a_cuda_graph_matches_eager():
    proc, _ = launch("ddp_graph.py", "--device", "cuda")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "matches the eager one" in proc.stdout


def test_nccl_rank_death_stops_the_others():
    if gpus() < 2:
        pytest.skip("needs two GPUs")
    proc, seconds = launch("failures.py", "--case", "die", "--device", "cuda", nproc=2)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert seconds < 60


def test_nccl_collective_past_the_timeout_stops_the_rank_naming_the_op():
    if gpus() < 2:
        pytest.skip("needs two GPUs")
    proc, seconds = launch("failures.py", "--case", "timeout", "--device", "cuda", nproc=2)
    assert proc.returncode != 0
    assert "rank 0: all_reduce (sum of 4 float32 element(s)) over nccl did not finish within 2 s" in proc.stderr, proc.stderr
    assert seconds < 60


def test_a_ddp_step_never_makes_the_host_wait_for_the_gpu():
    """A host sync in a DDP step would put the ranks' hosts in lockstep with the all-reduce (see
    tests/distributed/ddp_never_waits.py): the LSTM LM and a CNN, fp32 and bf16 autocast, with and without DDP."""
    proc, _ = launch("ddp_never_waits.py", "--device", "cuda", nproc=1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("never waited") == 8, proc.stdout


def test_a_killed_rank_stops_the_launcher_and_leaves_no_process_behind(tmp_path):
    if gpus() < 2:
        pytest.skip("needs two GPUs")
    marker = f"failures.py --case kill --device cuda --tag {tmp_path.name}"
    proc, seconds = launch("failures.py", "--case", "kill", "--device", "cuda", "--tag", tmp_path.name, nproc=2)
    assert proc.returncode != 0 and "exited with code" in proc.stderr, proc.stdout + proc.stderr
    assert seconds < 60
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"
