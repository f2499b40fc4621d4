#!/usr/bin/env bash
# A change to the add path (or the pool) measured against the code before it, on a lent GPU box, in one call:
# build this tree and BASE's package, run the pool and add-path tests, then bench_adds.py (plain and reference
# frames, one env with and without its helper, 8 envs; each reference form's frames-ahead counts) for this
# tree and BASE in turns (this, base, three times each: the last box's speed drifted ~25% between turns of one
# tree), each in its own process; then the prioritized benchmark against cpprb (1x1 frames) and, as the budget
# allows, the device batches' tests on CUDA (test_device_batches: groups of batches read at once among them),
# the eager learner's kept cells (eager_box.sh measures them with more rounds) and PER on Pong frames. BASE's tree travels as
# $CARRY/base.tar (`git archive BASE mmreplay setup.py`, made by scripts/gpu_box_carry.py --base BASE).
#     python scripts/gpu_box_carry.py --base BASE --no-wheels   # here
#     bash benchmarks/adds_box.sh                                # the device tool: carry [".devcarry"], timeout_s 500
# Results under $OUT: adds-<label>-<turn>.jsonl, bench.jsonl, tests.txt, adds_box.log.
# Settings (environment): BUDGET (470), ADDS_ARGS, BENCH_ARGS, and box_stages.sh's.
set -u
NAME=adds_box
BUDGET=${BUDGET:-470}
ADDS_ARGS=${ADDS_ARGS:---encodings lz4-reference,lz4 --adds 16000 --block 2000}
BENCH_ARGS=${BENCH_ARGS:---learners eager --feeds resident,ring-threads,mmreplay-host,mmreplay-host-g1,mmreplay-host-t2 --games mspacman,pong,seaquest --seconds 0.5 --rounds 4 --warmup 0.15 --decode-repeats 0}
export ADDS_ARGS BENCH_ARGS
source "$(dirname "$0")/box_stages.sh"

base_tree() {
    local base=$WORK/base
    rm -rf "$base" && mkdir -p "$base" && tar xf "$CARRY/base.tar" -C "$base" || return 1
    (cd "$base" && "$PYTHON" setup.py build_ext --inplace -j 8 > "$OUT/build-base.txt" 2>&1) || { tail -5 "$OUT/build-base.txt"; return 1; }
    (cd "$WORK" && PYTHONPATH="$base:$SITE" "$PYTHON" -c "import mmreplay, mmreplay.frames.lz4_codec as c; print(mmreplay.__file__, c.ACCELERATED)")
}

add_tests() {
    "$PYTHON" -m pytest -q -p no:cacheprovider -x tests/test_frame_threads.py tests/test_sum_tree.py \
        -k "not pong and not mspacman and not ring_written and not compressed_ahead_are_written" 2>&1 | tail -4 | tee -a "$OUT/tests.txt"
    return "${PIPESTATUS[0]}"
}

adds_turn() {
    # adds_turn LABEL TURN: bench_adds.py with this tree's package (new) or BASE's (base).
    local label=$1 turn=$2 path="$SITE:$PWD"
    [[ $label == base ]] && path="$WORK/base:$SITE"
    # shellcheck disable=SC2086
    PYTHONPATH=$path "$PYTHON" benchmarks/bench_adds.py --data-dir "$CARRY/frames" --json $ADDS_ARGS \
        | tee "$OUT/adds-$label-$turn.jsonl" | grep -v '^{'
    return "${PIPESTATUS[0]}"
}
prioritized_pong() {
    # Prioritized sample + update on real Pong frames (84x84, stacks of 4, capacity 100,000) against cpprb.
    "$PYTHON" benchmarks/bench_prioritized.py --data-dir "$CARRY/frames" --no-sequences --json --repeats 6 \
        --seconds 0.4 | grep -v "1x1 frames" | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}
export -f base_tree add_tests adds_turn prioritized_pong

stage "machine" 10 machine
stage "install wheels" 40 install_wheels
stage "build liblz4" 40 build_liblz4
stage "build extensions" 80 build_extensions
stage "base tree" 80 base_tree
stage "pool tests" 40 add_tests
stage "adds: this tree (1)" 30 "adds_turn new 1"
stage "adds: base (2)" 30 "adds_turn base 2"
stage "adds: this tree (3)" 30 "adds_turn new 3"
stage "adds: base (4)" 30 "adds_turn base 4"
stage "adds: this tree (5)" 30 "adds_turn new 5"
stage "adds: base (6)" 30 "adds_turn base 6"
stage "prioritized vs cpprb" 35 prioritized
stage "device batches on CUDA" 60 device_batch_tests
stage "bench_gpu_feed (eager)" 130 gpu_feed
stage "prioritized vs cpprb, Pong frames" 90 prioritized_pong
finish
