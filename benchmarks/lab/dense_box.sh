#!/usr/bin/env bash
# The dense-frames targets' figures on a lent 16-core box, in under 2 minutes: plain lz4 against reference frames, paired,
# on Pong, Breakout and MsPacman (bench_encodings.py: bytes on disk per transition at capacity 100,000,
# stack 4; add rates with 1 env and 8 envs; sample rates; ratio medians with quartiles). Fill .devcarry here
# first (python benchmarks/lab/gpu_box_carry.py: wheels, sources, the streams of Pong, MsPacman, Seaquest and
# Breakout, a tqdm wheel), then on the box (the device tool: carry [".devcarry"], timeout_s 150):
#     bash benchmarks/lab/dense_box.sh
# The stages and the build are benchmarks/lab/box_stages.sh's; BUDGET 115 s. Dopamine's checkpoint sizes are
# not measured there (no TensorFlow): bench_encodings.py --dopamine-python here.
set -u
NAME=dense_box
BUDGET=${BUDGET:-115}
source "$(dirname "$0")/box_stages.sh"
stage "install wheels" 30 install_wheels
stage "build liblz4" 20 build_liblz4
stage "build extensions" 40 build_extensions
stage "plain vs reference frames" 100 encodings
finish
echo "=== what to read: bench.jsonl (dense-frames targets: reference/plain add and sample ratios >= 0.9; bytes/transition"
echo "===   Pong <= 100, Breakout <= 110, MsPacman <= 300)"
