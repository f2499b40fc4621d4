#!/usr/bin/env bash
# The GPU-feed targets' figures in one call of a lent GPU box (device time is short: one start, one build), the missed
# targets first: the learner kept by each feed (eager and CUDA-graph learners, each feed's windows paired
# with the resident batch's), adds (plain and reference frames, one env and 8), the CUDA tests, sampling
# against the numpy ring (both encodings, 2 and all decode threads), prioritized vs cpprb, the pool tests.
# Stores follow the store's default (reference frames for uint8) unless a stage names both. Fill .devcarry
# here first (python benchmarks/lab/gpu_box_carry.py), then on the box:
#     bash benchmarks/lab/box_all.sh            # the device tool: carry [".devcarry"], timeout_s 560
# Settings (environment): BUDGET (seconds for the whole script, 540), and box_stages.sh's.
set -u
NAME=box_all
BUDGET=${BUDGET:-540}
BENCH_ARGS=${BENCH_ARGS:---learners eager,graph --feeds resident,ring-threads,mmreplay-host,mmreplay-host-g1 --games mspacman,pong,seaquest --seconds 0.5 --rounds 3 --warmup 0.15 --decode-repeats 0}
ADDS_ARGS=${ADDS_ARGS:---encodings lz4-reference,lz4}
SAMPLING_ARGS=${SAMPLING_ARGS:---encodings lz4-reference,lz4 --caps 2,all}
export BENCH_ARGS ADDS_ARGS SAMPLING_ARGS
source "$(dirname "$0")/box_stages.sh"
stage "machine" 15 machine
stage "install wheels" 50 install_wheels
stage "build liblz4" 50 build_liblz4
stage "build extensions" 100 build_extensions
stage "bench_gpu_feed" 200 gpu_feed
stage "adds" 45 adds
stage "CUDA tests" 75 cuda_tests
stage "sampling vs the numpy ring" 110 sampling
stage "prioritized vs cpprb" 35 prioritized
stage "pool and sum-tree tests" 40 pool_tests
finish
