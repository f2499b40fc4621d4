#!/usr/bin/env bash
# Issue 28's figures on a lent 16-core box, in under 2 minutes: plain lz4 against reference frames, paired,
# on Pong, Breakout and MsPacman (bench_encodings.py: bytes on disk per transition at capacity 100,000,
# stack 4; add rates with 1 env and 8 envs; sample rates; ratio medians with quartiles). The box has Python
# 3.12 with numpy, setuptools and gcc, and no registry, lz4 package, liblz4 headers or ALE: everything comes
# from .devcarry, as for cores_box.sh and gpu_box.sh (this `prepare` adds what it needs: Breakout's stream).
#
# Here, first fill .devcarry (ignored by git; ~17 MiB):
#     bash benchmarks/dense_box.sh prepare
# On the box (the device tool: command "bash benchmarks/dense_box.sh", carry [".devcarry"], timeout_s 150):
#     bash benchmarks/dense_box.sh
#
# Each stage runs under `timeout`, never past BUDGET (115 s); a failed stage is reported and the next runs.
# Kept under $OUT: dense_box.log (everything), bench.jsonl (one JSON line per game), build.txt.
# Dopamine's checkpoint sizes are not measured there (no TensorFlow): bench_encodings.py --dopamine-python here.
set -u
CARRY=${CARRY:-.devcarry}
PYTHON=${PYTHON:-python3}

if [[ "${1:-}" == "prepare" ]]; then
    SOURCE=${SOURCE:-/work/main/.devcarry}
    PREPARE_PYTHON=${PREPARE_PYTHON:-/work/main/.venv/bin/python}
    mkdir -p "$CARRY/whl" "$CARRY/src" "$CARRY/frames" || exit 1
    # The wheels and sources the other box scripts carry (lz4, setuptools, the lz4 sdist, zlib's headers),
    # copied from SOURCE where this carry lacks them.
    for file in "$SOURCE"/whl/lz4-*.whl "$SOURCE"/whl/setuptools-*.whl; do
        [[ -e "$CARRY/whl/$(basename "$file")" ]] || cp "$file" "$CARRY/whl/" || exit 1
    done
    for file in "$SOURCE"/src/lz4-*.tar.gz "$SOURCE"/src/zlib.h "$SOURCE"/src/zconf.h; do
        [[ -e "$CARRY/src/$(basename "$file")" ]] || cp "$file" "$CARRY/src/" || exit 1
    done
    # tqdm (mmreplay imports it), should the box's Python lack it: a pure-Python wheel.
    if ! ls "$CARRY"/whl/tqdm-*.whl > /dev/null 2>&1; then
        timeout 120 "$PREPARE_PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$CARRY/whl" tqdm \
            || exit 1
    fi
    # The 20,000-frame streams of the three games (recorded with ALE where the atari_frames cache lacks one).
    PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" timeout 600 "$PREPARE_PYTHON" -c "
import shutil, atari_frames
for game in ('pong', 'breakout', 'mspacman'):
    source = atari_frames.stream_path(game, atari_frames.BENCHMARK_FRAMES)
    if not source.exists():
        atari_frames.load(game, atari_frames.BENCHMARK_FRAMES)
    shutil.copyfile(source, '$CARRY/frames/atari_%s.npz' % game)
" || exit 1
    du -sh "$CARRY" "$CARRY"/*
    exit 0
fi

OUT=${OUT:-/tmp/dense_box_out}
BUDGET=${BUDGET:-115}
WORK=/tmp/dense_box_build
SITE=$WORK/site
LIBS=$WORK/lib
HEADERS=$WORK/include
mkdir -p "$OUT" "$SITE" "$LIBS" "$HEADERS"
exec > >(tee -a "$OUT/dense_box.log") 2>&1
STARTED=$(date +%s)
elapsed() { echo $(( $(date +%s) - STARTED )); }
left() { echo $(( BUDGET - $(elapsed) )); }
FAILED=()

stage() {
    local name=$1 limit=$2
    shift 2
    if (( limit > $(left) - 3 )); then limit=$(( $(left) - 3 )); fi
    if (( limit < 5 )); then
        echo "=== [$(elapsed)s] $name: SKIPPED (budget spent)"; FAILED+=("$name(skipped)"); return 0
    fi
    echo "=== [$(elapsed)s] $name (limit ${limit}s)"
    timeout -k 5 "$limit" bash -c "$*"
    local rc=$?
    if (( rc == 0 )); then echo "=== [$(elapsed)s] $name: ok"
    else echo "=== [$(elapsed)s] $name: FAILED rc=$rc$( ((rc == 124)) && echo ' (timed out)')"; FAILED+=("$name"); fi
    return 0
}

export PYTHONPATH="$SITE:$PWD"
export C_INCLUDE_PATH="$HEADERS${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
export LIBRARY_PATH="$LIBS${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MMREPLAY_FRAMES_DIR="$WORK/frames-cache"  # nothing is recorded: the benchmark reads $CARRY/frames

setup() {
    nproc; git log --oneline -1 2>/dev/null || true
    local wheels=("$CARRY"/whl/lz4-*.whl "$CARRY"/whl/setuptools-*.whl)
    "$PYTHON" -c "import tqdm" 2>/dev/null || wheels+=("$CARRY"/whl/tqdm-*.whl)
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}" || return 1
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
    "$PYTHON" setup.py build_ext --inplace -j 8 > "$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; return 1; }
    "$PYTHON" -c "import mmreplay.frames.lz4_codec as c; print('ACCELERATED', c.ACCELERATED); assert c.ACCELERATED"
}

encodings() {
    local games=(pong breakout mspacman)
    [[ -f "$CARRY/frames/atari_breakout.npz" ]] || games=(pong mspacman)
    "$PYTHON" benchmarks/bench_encodings.py --data-dir "$CARRY/frames" --games "${games[@]}" --capacity 100000 \
        --rounds 7 --window 0.25 --json "$OUT/bench.jsonl" --tmpdir "$WORK"
}

export OUT CARRY PYTHON BUDGET WORK SITE LIBS HEADERS STARTED
export -f elapsed left setup encodings
stage "setup and build" 50 setup
stage "plain vs reference frames" 100 encodings
echo "=== [$(elapsed)s] done; failed or skipped stages: ${FAILED[*]:-none}"
echo "=== what to read: bench.jsonl (issue 28: reference/plain add and sample ratios >= 0.9; bytes/transition"
echo "===   Pong <= 100, Breakout <= 110, MsPacman <= 300)"
sleep 1
