#!/usr/bin/env bash
# Host time of eager training steps, A/B on one GPU machine: the tree in .ab/old (made here with
# `git archive <rev> minidl kernels benchmarks examples | tar x -C .ab/old`; carry ".ab") against the working
# tree, alternating, ROUNDS rounds (which tree goes first alternates too: a fixed order once showed a 15-20% gap
# on the MNIST step that the call count did not explain). Each line: tree, case, wall ms per step
# (benchmarks/profile_gpt_host.py, without its profiler). The host times of one machine vary by a third from another's: compare within a run.
#   ROUNDS=2 bash scripts/gpu_host_ab.sh | tee $OUT/host_ab.txt
# PIN=<cpu> runs every step on that one CPU (taskset): the process no longer moves between cores, which is where
# the bimodal host times of these machines seemed to come from (see benchmarks/results/gpu_train_step.md).
set -u
ROUNDS=${ROUNDS:-2}
PIN=${PIN:-}
pin=(); [ -n "$PIN" ] && pin=(taskset -c "$PIN")
CASES=${CASES:-"gpt_bf16:--steps 10|mnist_fp32:--model 0 --math fp32 --steps 30|mnist_tf32:--model 0 --math tf32 --steps 30|cifar_fp32:--model 1 --math fp32 --steps 30"}
for r in $(seq "$ROUNDS"); do
  order="old new"; [ $((r % 2)) -eq 0 ] && order="new old"   # alternate who goes first (a second process can differ)
  for tree in $order; do
    root=$([ "$tree" = old ] && echo "$PWD/.ab/old" || echo "$PWD")
    IFS='|' read -ra cases <<< "$CASES"
    for c in "${cases[@]}"; do
      name=${c%%:*}; args=${c#*:}
      # shellcheck disable=SC2086
      ms=$(cd "$root" && PYTHONPATH="$root" timeout 120 "${pin[@]}" python3 benchmarks/profile_gpt_host.py $args --top 1 2>&1 \
           | grep -o '[0-9.]* ms per step' | head -1)
      echo "round $r $tree $name ${ms:-failed}"
    done
  done
done
