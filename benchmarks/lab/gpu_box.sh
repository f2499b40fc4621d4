#!/usr/bin/env bash
# The script for a lent GPU box (16 cores, one H100/H200, Python 3.12 with a CUDA torch, numpy, h5py, gcc;
# no registry, no lz4, no ALE): build mmreplay there, run the CUDA tests, then benchmarks/bench_gpu_feed.py
# (the GPU-feed targets) within what is left of an 8-minute budget. Run from the repository root with
# .devcarry carried (fill it first here: python benchmarks/lab/gpu_box_carry.py):
#
#     bash benchmarks/lab/gpu_box.sh            # the device tool: command "bash benchmarks/lab/gpu_box.sh",
#                                           # carry [".devcarry"], timeout_s 540
#
# The stages and the build are benchmarks/lab/box_stages.sh's; box_all.sh runs these and cores_box.sh's in one
# call. Settings (environment): BUDGET (seconds for the whole script, 470), and box_stages.sh's.
set -u
NAME=gpu_box
BUDGET=${BUDGET:-470}
source "$(dirname "$0")/box_stages.sh"
stage "machine" 30 machine
stage "install wheels" 90 install_wheels
stage "build liblz4" 90 build_liblz4
stage "build extensions" 150 build_extensions
stage "CUDA tests" 150 cuda_tests
stage "bench_gpu_feed" 600 gpu_feed
finish
echo "=== what to read: the table above, cells 'updates/s (kept)' (the GPU-feed target: kept >= 0.95 for mmreplay-host and mmreplay-nvcomp)"
