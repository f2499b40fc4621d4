#!/usr/bin/env bash
# What issue 25 still needs a lent GPU box for, in one call: a change to the add path (or the pool) against
# the code before it, and the eager learner's cells that missed kept >= 0.95. It builds this tree and BASE's
# package, runs the pool and add-path tests, then bench_adds.py (plain and reference frames, one env with and
# without its helper, 8 envs; each reference form's frames-ahead counts) for this tree and BASE in turns
# (this, base, three times each: the last box's speed drifted ~25% between turns of one tree), each in its own
# process; then bench_gpu_feed.py's eager batch-256 cells on MsPacman and Seaquest (EAGER_CELLS_ARGS,
# box_stages.sh: the stage eager_box.sh runs alone), with the learner thread's columns; then, as the budget
# allows, the prioritized benchmark against cpprb (1x1 frames), the device batches' tests on CUDA and PER on
# Pong frames. BASE's tree travels as $CARRY/base.tar (`git archive BASE mmreplay setup.py`).
#     python scripts/gpu_box_carry.py --base BASE --no-wheels   # here
#     bash benchmarks/adds_box.sh                                # the device tool: carry [".devcarry"], timeout_s 560
#     python benchmarks/pair_adds.py --summarize OUT/adds-*.jsonl  # here, on what came back
# Results under $OUT: adds-<label>-<turn>.jsonl, bench.jsonl, tests.txt, adds_box.log.
# Settings (environment): BUDGET (530), ADDS_ARGS, BENCH_ARGS (default EAGER_CELLS_ARGS), and box_stages.sh's.
set -u
NAME=adds_box
BUDGET=${BUDGET:-530}
ADDS_ARGS=${ADDS_ARGS:---encodings lz4-reference,lz4 --adds 16000 --block 2000}
source "$(dirname "$0")/box_stages.sh"
BENCH_ARGS=${BENCH_ARGS:-$EAGER_CELLS_ARGS}

prioritized_pong() {
    # Prioritized sample + update on real Pong frames (84x84, stacks of 4, capacity 100,000) against cpprb.
    "$PYTHON" benchmarks/bench_prioritized.py --data-dir "$CARRY/frames" --no-sequences --json --repeats 6 \
        --seconds 0.4 | grep -v "1x1 frames" | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}
export -f prioritized_pong

stage "machine" 10 machine
stage "install wheels" 40 install_wheels
stage "build liblz4" 40 build_liblz4
stage "build extensions" 80 build_extensions
stage "base tree" 80 base_tree
stage "pool tests" 40 pool_tests
stage "adds: this tree (1)" 30 "adds_turn new 1"
stage "adds: base (2)" 30 "adds_turn base 2"
stage "adds: this tree (3)" 30 "adds_turn new 3"
stage "adds: base (4)" 30 "adds_turn base 4"
stage "adds: this tree (5)" 30 "adds_turn new 5"
stage "adds: base (6)" 30 "adds_turn base 6"
stage "bench_gpu_feed (eager, batch 256)" 190 gpu_feed
stage "prioritized vs cpprb" 35 prioritized
stage "device batches on CUDA" 60 device_batch_tests
stage "prioritized vs cpprb, Pong frames" 90 prioritized_pong
finish
