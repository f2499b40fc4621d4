#!/usr/bin/env bash
# The eager learner's cells that missed kept >= 0.95 on the last box (MsPacman and Seaquest, batch 256), with
# more rounds than box_all.sh gives them, against the device batches' settings (EAGER_CELLS_ARGS in
# box_stages.sh: the default, group=1, decode_threads=2 and 4, and its thread and decode helpers at
# SCHED_IDLE: mmreplay-host-idle): which, if any, keeps more, beyond the rounds' spread; and, from each line's
# learner_thread columns (bench_gpu_feed.py --table), why: GIL waits (voluntary switches), a core taken
# (involuntary ones) or a slower core (more CPU an update). One call of a lent box, fresh (build ~30 s):
#     python benchmarks/lab/gpu_box_carry.py --no-wheels   # here, if .devcarry lacks the frames
#     bash benchmarks/lab/eager_box.sh                     # the device tool: carry [".devcarry"], timeout_s 280
# Results under $OUT: bench.jsonl, eager_box.log. Settings (environment): BUDGET (250), BENCH_ARGS, and
# box_stages.sh's.
set -u
NAME=eager_box
BUDGET=${BUDGET:-250}
source "$(dirname "$0")/box_stages.sh"
BENCH_ARGS=${BENCH_ARGS:-$EAGER_CELLS_ARGS}
stage "machine" 10 machine
stage "install wheels" 40 install_wheels
stage "build liblz4" 40 build_liblz4
stage "build extensions" 80 build_extensions
stage "bench_gpu_feed (eager, batch 256)" 190 gpu_feed
finish
