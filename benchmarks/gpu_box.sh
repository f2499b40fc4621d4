#!/usr/bin/env bash
# The one script to run on a lent GPU box (16 cores, one H100/H200, Python 3.12 with a CUDA torch,
# numpy, h5py, gcc; no registry, no lz4, no ALE): build mmreplay there, run the CUDA tests, then
# benchmarks/bench_gpu_feed.py within what is left of an 8-minute budget. Run from the repository root with
# .devcarry carried (fill it first here: python scripts/gpu_box_carry.py):
#
#     bash benchmarks/gpu_box.sh            # the device tool: command "bash benchmarks/gpu_box.sh",
#                                           # carry [".devcarry"], timeout_s 540
#
# Every stage runs under its own `timeout`; a stage that fails is reported and the next one runs.
# Everything is printed and kept under $OUT: gpu_box.log (all of it), bench.jsonl (one JSON line per
# figure), tests.txt, build.txt. Settings (environment): BUDGET (seconds for the whole script, 470),
# CARRY (.devcarry), PYTHON (python3), BENCH_ARGS (more arguments for the benchmark).
set -u
OUT=${OUT:-/tmp/gpu_box_out}
CARRY=${CARRY:-.devcarry}
PYTHON=${PYTHON:-python3}
BUDGET=${BUDGET:-470}
BENCH_ARGS=${BENCH_ARGS:-}
WORK=/tmp/gpu_box_build
SITE=$WORK/site
LIBS=$WORK/lib
HEADERS=$WORK/include
mkdir -p "$OUT" "$SITE" "$LIBS" "$HEADERS"
exec > >(tee -a "$OUT/gpu_box.log") 2>&1
STARTED=$(date +%s)
elapsed() { echo $(( $(date +%s) - STARTED )); }
left() { echo $(( BUDGET - $(elapsed) )); }
FAILED=()

# stage NAME SECONDS COMMAND...: run COMMAND under `timeout` (never past the budget), report its status.
stage() {
    local name=$1 limit=$2
    shift 2
    if (( limit > $(left) - 5 )); then limit=$(( $(left) - 5 )); fi
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
export MMREPLAY_FRAMES_DIR="$WORK/frames-cache"   # nothing is recorded here: tests that need ALE are not run

machine() {
    nproc; uptime
    nvidia-smi --query-gpu=name,memory.total,driver_version,utilization.gpu --format=csv || true
    "$PYTHON" -c "import sys, torch, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '', 'numpy', numpy.__version__)"
    git log --oneline -1 2>/dev/null || true
    ls "$CARRY" "$CARRY"/* | head -40
}

install_wheels() {
    # lz4 (python-lz4: mmreplay's codec), nvCOMP's C library, a recent setuptools; pytest and hypothesis.
    local wheels=("$CARRY"/whl/lz4-*.whl "$CARRY"/whl/nvidia_libnvcomp_cu13-*.whl "$CARRY"/whl/setuptools-*.whl)
    [[ -d "$CARRY/testwhl" ]] && wheels+=("$CARRY"/testwhl/*.whl)
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$SITE" "${wheels[@]}" || return 1
    "$PYTHON" -c "import lz4.block, pytest, hypothesis; print('lz4', lz4.version, 'pytest', pytest.__version__, 'hypothesis', hypothesis.__version__)"
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
    ls -la "$LIBS"
}

build_extensions() {
    "$PYTHON" setup.py build_ext --inplace > "$OUT/build.txt" 2>&1
    local rc=$?
    tail -5 "$OUT/build.txt"
    "$PYTHON" -c "import mmreplay.frames.lz4_codec as c, mmreplay.sampling.sum_tree as t; print('ACCELERATED', c.ACCELERATED, t.ACCELERATED); assert c.ACCELERATED"
    return $(( rc || $? ))
}

cuda_tests() {
    # The device batches on the GPU (and their CPU checks), nvCOMP against the host, the CRC and probe tests;
    # the CPU feed tests of test_device_decode replay Pong, which needs ALE: not here.
    "$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/test_device_batches.py 2>&1 | tee "$OUT/tests.txt"
    local batches=${PIPESTATUS[0]}
    "$PYTHON" -m pytest -q -p no:cacheprovider -rs tests/test_device_decode.py \
        -k "cuda or nvcomp or parity or prefix or zlib or narrower or wider or table or seeds" 2>&1 | tee -a "$OUT/tests.txt"
    return $(( batches || PIPESTATUS[0] ))
}

bench() {
    local budget=$(( $(left) - 25 ))
    # shellcheck disable=SC2086
    "$PYTHON" benchmarks/bench_gpu_feed.py --data-dir "$CARRY/frames" --budget "$budget" --seconds 1.2 \
        --feed-seconds 0.5 --warmup 0.3 --decode-repeats 20 $BENCH_ARGS | tee "$OUT/bench.jsonl"
    return "${PIPESTATUS[0]}"
}

export OUT CARRY PYTHON BUDGET BENCH_ARGS WORK SITE LIBS HEADERS STARTED
export -f elapsed left machine install_wheels build_liblz4 build_extensions cuda_tests bench
stage "machine" 30 machine
stage "install wheels" 90 install_wheels
stage "build liblz4" 90 build_liblz4
stage "build extensions" 150 build_extensions
stage "CUDA tests" 150 cuda_tests
stage "bench_gpu_feed" 600 bench
stage "table" 15 "$PYTHON" benchmarks/bench_gpu_feed.py --table "$OUT/bench.jsonl"
echo "=== [$(elapsed)s] done; failed or skipped stages: ${FAILED[*]:-none}"
echo "=== what to read: the table above, cells 'updates/s (kept)' (issue 25's target: kept >= 0.95 for mmreplay-host and mmreplay-nvcomp)"
sleep 1  # let tee write the last lines
