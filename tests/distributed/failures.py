"""Ranks that go wrong, for the launcher's tests.

--case die       rank 1 exits with code 3 while rank 0 waits in an all_reduce: the launcher must stop rank 0
                 and exit with 3 (no hang)
--case timeout   rank 1 never calls the all_reduce rank 0 is in (it sleeps, then exits 0): rank 0's collective
                 must give up after the group's timeout (2 s) with an error naming the rank and the op
--case sleep     no process group: rank 1 exits with code 4 while rank 0 sleeps (for --start spawn)
--case kill      rank 1 is killed (SIGKILL, no cleanup at all) while rank 0 waits in an all_reduce
"""
import argparse
import datetime
import os
import sys
import time

import minidl

p = argparse.ArgumentParser()
p.add_argument("--case", required=True)
p.add_argument("--device", default="cpu")
p.add_argument("--tag", default="", help="a word that names this run in the process list (the tests look for it)")
a = p.parse_args()
rank = int(os.environ["RANK"])

if a.case == "sleep":
    if rank == 1:
        sys.exit(4)
    time.sleep(60)
    sys.exit(0)

import minidl.distributed as dist  # noqa: E402

if a.device == "cuda":
    minidl.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if a.device == "cuda" else "mpi", timeout=datetime.timedelta(seconds=2))
dev = f"cuda:{minidl.cuda.current_device()}" if a.device == "cuda" else "cpu"
x = minidl.ones(4, device=dev)
dist.all_reduce(x)                      # everyone is here
if a.case == "kill":
    if rank == 1:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(x)
    if a.device == "cuda":
        minidl.cuda.synchronize()
elif a.case == "die":
    if rank == 1:
        sys.exit(3)
    dist.all_reduce(x)
    if a.device == "cuda":
        minidl.cuda.synchronize()
elif a.case == "timeout":
    if rank == 1:
        time.sleep(8)
        sys.exit(0)
    dist.all_reduce(x)
    if a.device == "cuda":
        minidl.cuda.synchronize()
time.sleep(30)   # only reached when something above failed to stop this rank
