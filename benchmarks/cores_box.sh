#!/usr/bin/env bash
# The one script for issue 25's figures on a lent 16-core box (one GPU, unused here; Python 3.12 with numpy,
# setuptools and gcc; no registry, no lz4 package, no liblz4 headers, no ALE): build mmreplay there, check
# the thread pool and the prioritized calls, then measure, each peer in the same run as mmreplay:
#   - sampling batches/s against the in-RAM numpy ring by decode threads (1, 2, 4, 8, all), Pong, MsPacman
#     and Seaquest, batches 32 and 256, capacity 100,000, stacks of 4 (bench_sampling_threads.py);
#   - adds (stacks with Python scalars, one env; stacks of 8 envs) on each game (bench_adds.py);
#   - prioritized sample(32) + update_priorities(32) at 1,000,000 transitions against cpprb (bench_prioritized.py).
#
# Here, first fill .devcarry (ignored by git: wheels and sources from /work/main/.devcarry, the recorded
# frames as .npz, pytest and hypothesis wheels; ~16 MiB):
#     bash benchmarks/cores_box.sh prepare
# On the box (the device tool: command "bash benchmarks/cores_box.sh", carry [".devcarry"], timeout_s 330):
#     bash benchmarks/cores_box.sh
#
# Every stage runs under its own `timeout`, never past BUDGET (seconds for the whole run, 290); a stage that
# fails is reported and the next one runs. Everything is printed and kept under $OUT: cores_box.log (all of
# it), bench.jsonl (one JSON line per figure), build.txt, tests.txt. Settings (environment): BUDGET, CARRY
# (.devcarry), PYTHON (python3).
set -u
CARRY=${CARRY:-.devcarry}
PYTHON=${PYTHON:-python3}

if [[ "${1:-}" == "prepare" ]]; then
    SOURCE=${SOURCE:-/work/main/.devcarry}
    PREPARE_PYTHON=${PREPARE_PYTHON:-/work/main/.venv/bin/python}
    mkdir -p "$CARRY/whl" "$CARRY/src" "$CARRY/frames" || exit 1
    cp "$SOURCE"/whl/lz4-*.whl "$SOURCE"/whl/cpprb-*.whl "$SOURCE"/whl/setuptools-*.whl "$CARRY/whl/" || exit 1
    cp "$SOURCE"/src/lz4-*.tar.gz "$SOURCE"/src/zlib.h "$SOURCE"/src/zconf.h "$CARRY/src/" || exit 1
    # pytest and hypothesis for the pool's tests there (CPython 3.12 wheels, with their dependencies).
    if ! ls "$CARRY"/testwhl/pytest-*.whl > /dev/null 2>&1; then
        mkdir -p "$CARRY/testwhl" && timeout 300 "$PREPARE_PYTHON" -m pip download --quiet --only-binary=:all: \
            --python-version 3.12 --platform manylinux2014_x86_64 --implementation cp -d "$CARRY/testwhl" \
            pytest hypothesis || exit 1
    fi
    # The 20,000-frame streams the benchmarks replay, from the atari_frames cache (recorded with ALE if missing).
    PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" timeout 600 "$PREPARE_PYTHON" -c "
import shutil, sys, atari_frames
for game in ('pong', 'mspacman', 'seaquest'):
    source = atari_frames.stream_path(game, atari_frames.BENCHMARK_FRAMES)
    if not source.exists():
        atari_frames.load(game, atari_frames.BENCHMARK_FRAMES)
    shutil.copyfile(source, '$CARRY/frames/atari_%s.npz' % game)
" || exit 1
    du -sh "$CARRY" "$CARRY"/*
    exit 0
fi

OUT=${OUT:-/tmp/cores_box_out}
BUDGET=${BUDGET:-290}
WORK=/tmp/cores_box_build
SITE=$WORK/site
LIBS=$WORK/lib
HEADERS=$WORK/include
mkdir -p "$OUT" "$SITE" "$LIBS" "$HEADERS"
exec > >(tee -a "$OUT/cores_box.log") 2>&1
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
    timeout -k 5 "$limit" bash -c "$*"  # the stage functions are exported (export -f below)
    local rc=$?
    if (( rc == 0 )); then echo "=== [$(elapsed)s] $name: ok"
    else echo "=== [$(elapsed)s] $name: FAILED rc=$rc$( ((rc == 124)) && echo ' (timed out)')"; FAILED+=("$name"); fi
    return 0
}

export PYTHONPATH="$SITE:$PWD"
export C_INCLUDE_PATH="$HEADERS${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
export LIBRARY_PATH="$LIBS${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MMREPLAY_FRAMES_DIR="$WORK/frames-cache"  # nothing is recorded here: the benchmarks read $CARRY/frames

machine() {
    nproc; uptime; lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)" || true
    "$PYTHON" -c "import os, sys, numpy; print(sys.version.split()[0], 'numpy', numpy.__version__, 'affinity', len(os.sched_getaffinity(0)))"
    cat /sys/fs/cgroup/cpu.max 2>/dev/null || true
    git log --oneline -1 2>/dev/null || true
    ls "$CARRY" "$CARRY"/*
}

install_wheels() {
    local wheels=("$CARRY"/whl/lz4-*.whl "$CARRY"/whl/cpprb-*.whl "$CARRY"/whl/setuptools-*.whl)
    [[ -d "$CARRY/testwhl" ]] && wheels+=("$CARRY"/testwhl/*.whl)
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}" || return 1
    "$PYTHON" -c "import lz4.block, cpprb; print('lz4', lz4.version, 'cpprb', cpprb.__version__)"
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

pool_tests() {
    # The pool at every thread count up to its maximum, callers at once, compression, the cgroup reading,
    # and the prioritized calls bit for bit the numpy code's (those needing recorded ALE frames: not here).
    if ! "$PYTHON" -c "import pytest, hypothesis" 2>/dev/null; then echo "no pytest here (no testwhl carried)"; return 0; fi
    "$PYTHON" -m pytest -q -p no:cacheprovider -x tests/test_frame_threads.py tests/test_sum_tree.py \
        -k "not pong and not mspacman and not ring_written" 2>&1 | tail -15 | tee "$OUT/tests.txt"
    return "${PIPESTATUS[0]}"
}

sampling() {
    # glibc's allocator kept steady, as bench_core's workers run (--malloc steady): a batch of 256 stacks
    # (9 MB) would otherwise be a fresh mmap, page-faulted in again, for the ring and mmreplay alike.
    MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=268435456 "$PYTHON" benchmarks/bench_sampling_threads.py --data-dir "$CARRY/frames" --json --seconds 0.25 --rounds 3 \
        | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}

adds() {
    "$PYTHON" benchmarks/bench_adds.py --data-dir "$CARRY/frames" --json --adds 24000 --block 2000 \
        | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}

prioritized() {
    "$PYTHON" benchmarks/bench_prioritized.py --data-dir "$CARRY/frames" --no-pong --no-sequences --json \
        --repeats 8 --seconds 0.5 | tee -a "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}

export OUT CARRY PYTHON BUDGET WORK SITE LIBS HEADERS STARTED
export -f elapsed left machine install_wheels build_liblz4 build_extensions pool_tests sampling adds prioritized
stage "machine" 15 machine
stage "install wheels" 60 install_wheels
stage "build liblz4" 60 build_liblz4
stage "build extensions" 90 build_extensions
stage "pool and sum-tree tests" 40 pool_tests
stage "prioritized vs cpprb" 40 prioritized
stage "adds" 40 adds
stage "sampling vs the numpy ring" 200 sampling
echo "=== [$(elapsed)s] done; failed or skipped stages: ${FAILED[*]:-none}"
echo "=== what to read: bench.jsonl; targets (issue 25): sampling ratio >= 1.5 in every game and batch at decode_threads"
echo "===   'all'; adds >= 50,000 transitions/s for '1 env, stacks, Python scalars' on every game; prioritized ratio >= 1.5"
sleep 1  # let tee write the last lines
