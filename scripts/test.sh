#!/usr/bin/env bash
# Set up .venv and run the test suite (this is the command README.md gives and CI runs).
#   bash scripts/test.sh            # everything: the optional integrations (SB3, TorchRL, ALE, Minari, Pillow) too
#   bash scripts/test.sh -k hdf5    # extra arguments go to pytest
# The suite runs twice over the read path: with the compiled batch decoder (mmreplay._lz4batch) and with
# the pure-Python fallback that installs without a compiler (MMREPLAY_PURE_PYTHON=1 hides the extension).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu  # PyTorch's CPU-only wheels, as setup.sh and README.md install them
# The expected times below: fresh-clone runs on a 2-core machine shared with other work (README.md).
# tianshou, jax and envpool share .venv: their pins keep its numpy, gymnasium and torch.
echo "--- setting up .venv (expected: 5-12 minutes on a fresh clone, seconds when it is up to date)"
bash scripts/setup.sh demo sb3 minari show torchrl tianshou jax envpool
if [ "${MMREPLAY_REQUIRE_EXTENSION:-0}" = "1" ]; then
  .venv/bin/python -c "import mmreplay.frames.lz4_codec as c, mmreplay.sampling.sum_tree as t, mmreplay.frames.reference_codec as r, sys; sys.exit(0 if c.ACCELERATED and t.ACCELERATED and r.ACCELERATED else 'a compiled extension (_lz4batch, _sumtree) did not build')"
fi
echo "--- recording the real Atari frames the tests read (expected: ~10 s once, then cached)"
.venv/bin/python -m mmreplay.testing.atari_frames   # the real frames the tests read: recorded with ALE once (~10 s), then cached
echo "--- the main pass: every test but Ray's and RLlib's (expected: 10-30 minutes, by how busy the cores are)"
# The Ray and RLlib tests, and the manual's Ray and RLlib examples (tests/test_readme.py's ray-sharded and
# rllib-buffer), run in their own venv below (ray[rllib] pins another gymnasium).
.venv/bin/python -m pytest tests --ignore-glob="tests/test_ray_*.py" \
  --ignore=tests/test_rllib_buffer.py -k "not ray-sharded and not rllib-buffer" "$@"
echo "--- again without the compiled extensions (MMREPLAY_PURE_PYTHON=1): store semantics, real frames, corruption, sum tree, reference frames and their encoded batches, device batches (expected: 5-15 minutes)"
MMREPLAY_PURE_PYTHON=1 .venv/bin/python -m pytest -q tests/test_store_model.py tests/test_store_semantics.py \
  tests/test_real_frames.py tests/test_corruption.py tests/test_frame_errors.py tests/test_codec.py \
  tests/test_sum_tree.py tests/test_dense_store.py tests/test_reference_codec.py tests/test_field_widths.py \
  tests/test_sample_out.py tests/test_fast_add.py tests/test_final_obs.py tests/test_dtypes.py tests/test_reading.py \
  tests/test_frame_threads.py tests/test_device_batches.py tests/test_encoded_references.py tests/test_block_batches.py \
  tests/test_encoded_fields.py \
  tests/test_max_times_sampled.py "$@"
echo "--- Ray and RLlib (mmreplay.ray, mmreplay.rllib, the manual's Ray and RLlib examples): their own venv, .venv-ray, since ray[rllib] 2.60.0 pins gymnasium 1.2.2"
[ -x .venv-ray/bin/python ] || python3 -m venv .venv-ray
echo "--- .venv-ray: pip and setuptools, then PyTorch 2.13.0's CPU build from $TORCH_CPU_INDEX (expected: 2-5 minutes; seconds when installed)"
.venv-ray/bin/python -m pip install --quiet --upgrade pip "setuptools>=77"
.venv-ray/bin/python -m pip install --quiet "torch==2.13.0" --index-url "$TORCH_CPU_INDEX"
echo "--- .venv-ray: mmreplay[rllib,test] (editable), ray[rllib] 2.60.0, ALE (expected: 4-8 minutes on a fresh clone; seconds when installed)"
PYTHONWARNINGS="ignore:Editable installation" .venv-ray/bin/python -m pip install --quiet -e ".[rllib,test]" ale-py opencv-python-headless
echo "--- the Ray pass (expected: 7-20 minutes)"
.venv-ray/bin/python -m pytest -q tests/test_ray_*.py tests/test_rllib_buffer.py \
  tests/test_encoded.py tests/test_docstrings.py tests/test_readme.py -k "not test_readme or ray-sharded or rllib-buffer" "$@"

echo "--- d3rlpy (mmreplay.d3rlpy and its guide's example): their own venv, .venv-d3rlpy, since d3rlpy 2.8.1 pins gymnasium 1.0.0"
[ -x .venv-d3rlpy/bin/python ] || python3 -m venv .venv-d3rlpy
echo "--- .venv-d3rlpy: pip and setuptools, then PyTorch 2.13.0's CPU build from $TORCH_CPU_INDEX (expected: 2-5 minutes; seconds when installed)"
.venv-d3rlpy/bin/python -m pip install --quiet --upgrade pip "setuptools>=77"
.venv-d3rlpy/bin/python -m pip install --quiet "torch==2.13.0" --index-url "$TORCH_CPU_INDEX"
echo "--- .venv-d3rlpy: mmreplay[d3rlpy,test] (editable), d3rlpy 2.8.1, ALE (expected: 2-4 minutes on a fresh clone; seconds when installed)"
PYTHONWARNINGS="ignore:Editable installation" .venv-d3rlpy/bin/python -m pip install --quiet -e ".[d3rlpy,test]" ale-py opencv-python-headless
echo "--- the d3rlpy pass (expected: 3-6 minutes)"
.venv-d3rlpy/bin/python -m pytest -q tests/test_d3rlpy.py tests/test_docstrings.py tests/test_readme.py -k "not test_readme or d3rlpy" "$@"
