# Sourced by the lent-box scripts (gpu_box.sh, cores_box.sh, box_all.sh): the build of mmreplay on a box with
# no registry, no lz4 package and no liblz4 headers (Python 3.12, gcc, numpy; torch with CUDA where there is a
# GPU), from the wheels and sources carried in $CARRY (filled here by `python benchmarks/lab/gpu_box_carry.py`), and
# each measuring stage as one function. The caller sets NAME (its log's name) and BUDGET (seconds for the
# whole run), then calls `stage NAME SECONDS FUNCTION` for each stage it wants. Every stage runs under its
# own `timeout`, never past BUDGET; a stage that fails is reported and the next one runs. Everything is
# printed and kept under $OUT: NAME.log (all of it), bench.jsonl (one JSON line per figure), build.txt,
# tests.txt. Settings (environment): CARRY (.devcarry), PYTHON (python3), BENCH_ARGS (more arguments for
# bench_gpu_feed.py), GPU_BENCH_SECONDS (its budget; default: its stage's limit less 30 s), ADDS_ARGS and
# SAMPLING_ARGS (more arguments for bench_adds.py and bench_sampling_threads.py).
CARRY=${CARRY:-.devcarry}
PYTHON=${PYTHON:-python3}
BENCH_ARGS=${BENCH_ARGS:-}
# The eager learner's cells that missed kept >= 0.95 on the last box (MsPacman and Seaquest, batch 256), 6
# rounds each, for the device batches' default, its thread and decode helpers at SCHED_IDLE
# (mmreplay-host-idle), group=1 and decode_threads=2 and 4: the stage that eager_box.sh runs.
EAGER_CELLS_ARGS="--learners eager --feeds resident,mmreplay-host,mmreplay-host-idle,mmreplay-host-g1,mmreplay-host-t2,mmreplay-host-t4 --games mspacman,seaquest --batch-sizes 256 --seconds 0.5 --rounds 6 --warmup 0.15 --decode-repeats 0"
ADDS_ARGS=${ADDS_ARGS:-}
SAMPLING_ARGS=${SAMPLING_ARGS:-}
OUT=${OUT:-/tmp/${NAME}_out}
WORK=/tmp/${NAME}_build
SITE=$WORK/site
LIBS=$WORK/lib
HEADERS=$WORK/include
mkdir -p "$OUT" "$SITE" "$LIBS" "$HEADERS"
exec > >(tee -a "$OUT/$NAME.log") 2>&1
STARTED=$(date +%s)
elapsed() { echo $(( $(date +%s) - STARTED )); }
left() { echo $(( BUDGET - $(elapsed) )); }
FAILED=()

# stage NAME SECONDS COMMAND...: run COMMAND under `timeout` (never past the budget), report its status.
stage() {
    local name=$1 limit=$2
    shift 2
    if (( limit > $(left) - 3 )); then limit=$(( $(left) - 3 )); fi
    if (( limit < 5 )); then
        echo "=== [$(elapsed)s] $name: SKIPPED (budget spent)"; FAILED+=("$name(skipped)"); return 0
    fi
    echo "=== [$(elapsed)s] $name (limit ${limit}s)"
    STAGE_LIMIT=$limit timeout -k 5 "$limit" bash -c "$*"  # the stage functions are exported (export -f below)
    local rc=$?
    if (( rc == 0 )); then echo "=== [$(elapsed)s] $name: ok"
    else echo "=== [$(elapsed)s] $name: FAILED rc=$rc$( ((rc == 124)) && echo ' (timed out)')"; FAILED+=("$name"); fi
    return 0
}

finish() {
    echo "=== [$(elapsed)s] done; failed or skipped stages: ${FAILED[*]:-none}"
    sleep 1  # let tee write the last lines
}

export PYTHONPATH="$SITE:$PWD"
export C_INCLUDE_PATH="$HEADERS${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
export LIBRARY_PATH="$LIBS${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MMREPLAY_FRAMES_DIR="$WORK/frames-cache"  # nothing is recorded there: the benchmarks read $CARRY/frames

machine() {
    nproc; uptime; lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)" || true
    cat /sys/fs/cgroup/cpu.max 2>/dev/null || true
    nvidia-smi --query-gpu=name,memory.total,driver_version,utilization.gpu --format=csv 2>/dev/null || true
    "$PYTHON" -c "
import os, sys, numpy
print(sys.version.split()[0], 'numpy', numpy.__version__, 'affinity', len(os.sched_getaffinity(0)))
try:
    import torch
    print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')
except ImportError:
    print('no torch')"
    git log --oneline -1 2>/dev/null || true
    ls "$CARRY" "$CARRY"/*
}

install_wheels() {
    # lz4 (python-lz4: mmreplay's codec), cpprb (the PER peer), nvCOMP's C library where carried, a recent
    # setuptools; pytest and hypothesis (testwhl/) for the tests.
    local wheels=("$CARRY"/whl/*.whl)
    [[ -d "$CARRY/testwhl" ]] && wheels+=("$CARRY"/testwhl/*.whl)
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}" || return 1
    "$PYTHON" -c "import lz4.block, tqdm; print('lz4', lz4.version, 'tqdm', tqdm.__version__)" || return 1
    "$PYTHON" -c "import cpprb" 2>/dev/null || echo "no cpprb carried: the prioritized stage has no peer"
}

build_liblz4() {
    # liblz4.so.1 from the lz4 sdist's own copy of the library, its headers, and zlib's headers beside it.
    rm -rf "$WORK/lz4src" && mkdir -p "$WORK/lz4src"
    tar xzf "$CARRY"/src/lz4-*.tar.gz -C "$WORK/lz4src" --strip-components=1
    local src="$WORK/lz4src/lz4libs" objects=()
    for file in lz4 lz4hc lz4frame xxhash; do
        gcc -O3 -fPIC -c "$src/$file.c" -o "$WORK/$file.o" & objects+=("$WORK/$file.o")
    done
    wait
    gcc -shared -Wl,-soname,liblz4.so.1 -o "$LIBS/liblz4.so.1" "${objects[@]}" || return 1
    ln -sf liblz4.so.1 "$LIBS/liblz4.so"
    cp "$src"/lz4.h "$src"/lz4hc.h "$src"/lz4frame.h "$CARRY"/src/zlib.h "$CARRY"/src/zconf.h "$HEADERS"/
    local libz
    libz=$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
    for candidate in "$libz" /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1 /usr/lib64/libz.so.1; do
        if [[ -n "$candidate" && -e "$candidate" ]]; then ln -sf "$candidate" "$LIBS/libz.so"; break; fi
    done
}

build_extensions() {
    "$PYTHON" setup.py build_ext --inplace -j 8 > "$OUT/build.txt" 2>&1
    local rc=$?
    tail -3 "$OUT/build.txt"
    "$PYTHON" -c "
import mmreplay.frames.lz4_codec as c, mmreplay.sampling.sum_tree as t
from mmreplay.frames.threads import thread_limit, usable_cores
print('ACCELERATED', c.ACCELERATED, t.ACCELERATED, 'usable cores', usable_cores(), 'thread limit', thread_limit())
assert c.ACCELERATED and t.ACCELERATED"
    return $(( rc || $? ))
}

device_batch_tests() {
    # The device batches on the GPU (and their CPU checks), groups of batches read at once among them.
    "$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/test_device_batches.py 2>&1 | tee -a "$OUT/tests.txt"
    return "${PIPESTATUS[0]}"
}

cuda_tests() {
    # The device batches' tests, nvCOMP against the host, the CRC and probe tests; the CPU feed tests of
    # test_device_decode replay Pong, which needs ALE: not here.
    device_batch_tests
    local batches=$?
    "$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/test_device_decode.py \
        -k "cuda or nvcomp or parity or prefix or zlib or narrower or wider or table or seeds" 2>&1 | tee -a "$OUT/tests.txt"
    return $(( batches || PIPESTATUS[0] ))
}

gpu_feed() {
    # Learner kept by each feed (the GPU-feed targets); stops starting figures 30 s before its stage's limit.
    local budget=${GPU_BENCH_SECONDS:-$(( STAGE_LIMIT - 30 ))}
    # shellcheck disable=SC2086
    "$PYTHON" benchmarks/bench_gpu_feed.py --data-dir "$CARRY/frames" --budget "$budget" --seconds 1.2 \
        --feed-seconds 0.5 --warmup 0.3 --decode-repeats 20 $BENCH_ARGS | tee -a "$OUT/bench.jsonl"
    local rc=${PIPESTATUS[0]}
    "$PYTHON" benchmarks/bench_gpu_feed.py --table "$OUT/bench.jsonl"
    return "$rc"
}

pool_tests() {
    # The pool at every thread count up to its maximum, callers at once, compression, the cgroup reading,
    # and the prioritized calls bit for bit the numpy code's (those recording ALE frames: not here, no ALE).
    if ! "$PYTHON" -c "import pytest, hypothesis" 2>/dev/null; then echo "no pytest here (no testwhl carried)"; return 0; fi
    "$PYTHON" -m pytest -q -p no:cacheprovider -x tests/test_frame_threads.py tests/test_sum_tree.py \
        -k "not pong and not mspacman and not ring_written" 2>&1 | tail -15 | tee -a "$OUT/tests.txt"
    return "${PIPESTATUS[0]}"
}

sampling() {
    # glibc's allocator kept steady, as bench_core's workers run (--malloc steady): a batch of 256 stacks
    # (9 MB) would otherwise be a fresh mmap, page-faulted in again, for the ring and mmreplay alike.
    MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=268435456 "$PYTHON" benchmarks/bench_sampling_threads.py \
        --data-dir "$CARRY/frames" --json --seconds 0.25 --rounds 3 $SAMPLING_ARGS | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}

adds() {
    "$PYTHON" benchmarks/bench_adds.py --data-dir "$CARRY/frames" --json --adds 24000 --block 2000 $ADDS_ARGS \
        | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}

prioritized() {
    "$PYTHON" benchmarks/bench_prioritized.py --data-dir "$CARRY/frames" --no-pong --no-sequences --json \
        --repeats 8 --seconds 0.5 | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}

encodings() {
    # Plain lz4 against reference frames, paired (the dense-frames targets): bytes per transition, add and sample ratios.
    local games=(pong breakout mspacman)
    [[ -f "$CARRY/frames/atari_breakout.npz" ]] || games=(pong mspacman)
    "$PYTHON" benchmarks/bench_encodings.py --data-dir "$CARRY/frames" --games "${games[@]}" --capacity 100000 \
        --rounds 7 --window 0.25 --json "$OUT/bench.jsonl" --tmpdir "$WORK"
}

export OUT CARRY PYTHON BUDGET BENCH_ARGS ADDS_ARGS SAMPLING_ARGS WORK SITE LIBS HEADERS STARTED EAGER_CELLS_ARGS
export -f elapsed left machine install_wheels build_liblz4 build_extensions device_batch_tests cuda_tests gpu_feed pool_tests \
    sampling adds prioritized encodings
