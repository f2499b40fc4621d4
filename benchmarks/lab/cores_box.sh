#!/usr/bin/env bash
# The script for the GPU-feed targets' CPU figures on a lent 16-core box (the GPU unused; Python 3.12 with numpy,
# setuptools and gcc; no registry, no lz4 package, no liblz4 headers, no ALE): build mmreplay there, check
# the thread pool and the prioritized calls, then measure, each peer in the same run as mmreplay:
#   - sampling batches/s against the in-RAM numpy ring by decode threads (1, 2, 4, 8, all), Pong, MsPacman
#     and Seaquest, batches 32 and 256, capacity 100,000, stacks of 4 (bench_sampling_threads.py);
#   - adds (stacks with Python scalars, one env; stacks of 8 envs) on each game (bench_adds.py);
#   - prioritized sample(32) + update_priorities(32) at 1,000,000 transitions against cpprb (bench_prioritized.py).
# Fill .devcarry here first (wheels, sources, the recorded frames, pytest and hypothesis):
#     python benchmarks/lab/gpu_box_carry.py
# On the box (the device tool: command "bash benchmarks/lab/cores_box.sh", carry [".devcarry"], timeout_s 330):
#     bash benchmarks/lab/cores_box.sh
# The stages and the build are benchmarks/lab/box_stages.sh's. Settings (environment): BUDGET (290), and its.
set -u
NAME=cores_box
BUDGET=${BUDGET:-290}
source "$(dirname "$0")/box_stages.sh"
stage "machine" 15 machine
stage "install wheels" 60 install_wheels
stage "build liblz4" 60 build_liblz4
stage "build extensions" 90 build_extensions
stage "pool and sum-tree tests" 40 pool_tests
stage "prioritized vs cpprb" 40 prioritized
stage "adds" 40 adds
stage "sampling vs the numpy ring" 200 sampling
finish
echo "=== what to read: bench.jsonl; targets: sampling ratio >= 1.5 in every game and batch at decode_threads"
echo "===   'all'; adds >= 50,000 transitions/s for '1 env, stacks, Python scalars' on every game; prioritized ratio >= 1.5"
