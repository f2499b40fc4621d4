#!/usr/bin/env bash
# A change to the GPU feed measured against the code before it, on a lent GPU box, in one call: build there,
# run the CUDA tests of the device batches, then bench_gpu_feed.py's learner-kept cells (eager and CUDA-graph
# learners, the ring and mmreplay's device batches) for this tree and for BASE's package, in turns (this,
# base, this), each run's "kept" taken against its own resident batch; then adds, then the plain-against-reference encodings,
# as the budget allows. BASE's tree travels as $CARRY/base.tar (`git archive BASE mmreplay setup.py`, made by
# benchmarks/lab/gpu_box_carry.py --base BASE); its extensions are this tree's where its C sources are the same.
#     python benchmarks/lab/gpu_box_carry.py --base f2aeafb      # here
#     bash benchmarks/lab/feed_box.sh                          # the device tool: carry [".devcarry"], timeout_s 545
# Results under $OUT: feed-<label>-<turn>.jsonl (bench_gpu_feed's JSON lines), bench.jsonl, tests.txt, feed_box.log.
# Settings (environment): BUDGET (480), FEED_ARGS (bench_gpu_feed's cells), and box_stages.sh's.
set -u
NAME=feed_box
BUDGET=${BUDGET:-500}
FEED_ARGS=${FEED_ARGS:---learners eager,graph --feeds resident,ring-inline,ring-threads,mmreplay-host --games pong,mspacman --batch-sizes 32,256 --seconds 1.2 --feed-seconds 0.3 --warmup 0.3 --decode-repeats 0}
export FEED_ARGS
source "$(dirname "$0")/box_stages.sh"

base_tree() {
    # BASE's package beside this one: its Python files, and this tree's built extensions where the C is the same.
    local base=$WORK/base
    rm -rf "$base" && mkdir -p "$base" && tar xf "$CARRY/base.tar" -C "$base" || return 1
    if diff -r -q "$base/mmreplay/_c" mmreplay/_c > /dev/null && diff -q "$base/setup.py" setup.py > /dev/null; then
        cp mmreplay/*.so "$base/mmreplay/" && echo "base: this tree's extensions (the same C sources)"
    else
        (cd "$base" && "$PYTHON" setup.py build_ext --inplace -j 8 > "$OUT/build-base.txt" 2>&1) || return 1
        echo "base: built its own extensions"
    fi
    (cd "$WORK" && PYTHONPATH="$base:$SITE" "$PYTHON" -c "import mmreplay, mmreplay.frames.lz4_codec as c; print(mmreplay.__file__, c.ACCELERATED)")
}

device_tests() {
    "$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/test_device_batches.py 2>&1 | tee -a "$OUT/tests.txt"
    return "${PIPESTATUS[0]}"
}

feed_turn() {
    # feed_turn LABEL TURN: one run of the cells with this tree's package (new) or BASE's (base).
    local label=$1 turn=$2 path="$SITE:$PWD"
    [[ $label == base ]] && path="$WORK/base:$SITE"
    # shellcheck disable=SC2086
    PYTHONPATH=$path "$PYTHON" benchmarks/bench_gpu_feed.py --data-dir "$CARRY/frames" --budget $(( STAGE_LIMIT - 15 )) \
        --label "$label" $FEED_ARGS > "$OUT/feed-$label-$turn.jsonl"
    local rc=$?
    "$PYTHON" benchmarks/bench_gpu_feed.py --table "$OUT/feed-$label-$turn.jsonl"
    return "$rc"
}
export -f base_tree device_tests feed_turn

stage "machine" 10 machine
stage "install wheels" 40 install_wheels
stage "build liblz4" 40 build_liblz4
stage "build extensions" 80 build_extensions
stage "base tree" 60 base_tree
stage "CUDA tests of the device batches" 60 device_tests
stage "feed: this tree (1)" 90 "feed_turn new 1"
stage "feed: base" 90 "feed_turn base 2"
stage "feed: this tree (2)" 90 "feed_turn new 3"
stage "adds" 35 adds
stage "plain vs reference frames" 100 encodings
finish
echo "=== what to read: the tables above (kept = updates/s fed / resident; the GPU-feed target kept >= 0.95 for mmreplay-host)"
