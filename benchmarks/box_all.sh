#!/usr/bin/env bash
# Issue 25's figures in one call of a lent GPU box (device time is short: one start, one build): the stages
# of cores_box.sh (pool tests, prioritized vs cpprb, adds, sampling by decode threads) and of gpu_box.sh
# (CUDA tests, the learner kept by each feed), the most needed first. Fill .devcarry here first
# (python scripts/gpu_box_carry.py), then on the box:
#     bash benchmarks/box_all.sh            # the device tool: carry [".devcarry"], timeout_s 570
# Settings (environment): BUDGET (seconds for the whole script, 530), and box_stages.sh's.
set -u
NAME=box_all
BUDGET=${BUDGET:-530}
source "$(dirname "$0")/box_stages.sh"
stage "machine" 15 machine
stage "install wheels" 60 install_wheels
stage "build liblz4" 60 build_liblz4
stage "build extensions" 90 build_extensions
stage "prioritized vs cpprb" 35 prioritized
stage "adds" 35 adds
stage "sampling vs the numpy ring" 140 sampling
stage "CUDA tests" 70 cuda_tests
stage "bench_gpu_feed" 170 gpu_feed
stage "pool and sum-tree tests" 40 pool_tests
finish
