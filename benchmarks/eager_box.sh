#!/usr/bin/env bash
# The eager learner's cells that missed kept >= 0.95 on the last box (MsPacman and Seaquest, batch 256), with
# more rounds than box_all.sh gives them, against the group and the decode threads of the device batches'
# thread (the default, group=1 and 2, decode_threads=2 and 4): which, if any, keeps more, beyond the rounds'
# spread. One call of a lent box, fresh (build ~30 s):
#     python scripts/gpu_box_carry.py --no-wheels   # here, if .devcarry lacks the frames
#     bash benchmarks/eager_box.sh                  # the device tool: carry [".devcarry"], timeout_s 280
# Results under $OUT: bench.jsonl, eager_box.log. Settings (environment): BUDGET (250), BENCH_ARGS, and
# box_stages.sh's.
set -u
NAME=eager_box
BUDGET=${BUDGET:-250}
BENCH_ARGS=${BENCH_ARGS:---learners eager --feeds resident,mmreplay-host,mmreplay-host-g1,mmreplay-host-g2,mmreplay-host-t2,mmreplay-host-t4 --games mspacman,seaquest --batch-sizes 256 --seconds 0.5 --rounds 6 --warmup 0.15 --decode-repeats 0}
export BENCH_ARGS
source "$(dirname "$0")/box_stages.sh"
stage "machine" 10 machine
stage "install wheels" 40 install_wheels
stage "build liblz4" 40 build_liblz4
stage "build extensions" 80 build_extensions
stage "bench_gpu_feed (eager, batch 256)" 190 gpu_feed
finish
