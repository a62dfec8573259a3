#!/usr/bin/env bash
# Stage the datasets the GPU runs need (tutorials in full mode, examples) into .data/ (git-ignored), so
# that the device tool can carry them (`carry: [".data"]`, 64 MiB per call with the working tree):
# MNIST's idx files gzipped (the reader takes .gz as is, ~11 MB instead of 53), the CIFAR-10 JPEG
# tars (~19 MB) Tiny Shakespeare (1.1 MB) and PTB (5.7 MB). On the GPU machine: MINIDL_DATA=$PWD/.data. Reads from $1 (default ../shared/data).
#   bash scripts/stage_device_data.sh [../shared/data]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-../shared/data}
mkdir -p .data/MNIST/raw
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -s ".data/MNIST/raw/$f.gz" ] || gzip -9 -c "$SRC/MNIST/raw/$f" > ".data/MNIST/raw/$f.gz"
done
cp -u "$SRC"/cifar10-jpeg-train.tar.gz "$SRC"/cifar10-jpeg-test.tar.gz .data/
mkdir -p .data/tinyshakespeare   # 1.1 MB: char_rnn.py, char_gpt.py, tutorials 6 and 9
cp -u "$SRC"/tinyshakespeare/input.txt .data/tinyshakespeare/
mkdir -p .data/ptb                # 5.7 MB: ptb_lm.py, tutorial 6's word model
cp -u "$SRC"/ptb/* .data/ptb/
du -sh .data
