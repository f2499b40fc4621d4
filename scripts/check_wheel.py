"""Check an installed mmreplay wheel: every compiled extension imports and is used, with no compiler on
PATH, and the liblz4 it runs with is the copy inside the wheel (``mmreplay.libs/``), not the system's.

Run by scripts/build_wheel.sh with the interpreter of a fresh venv the wheel was installed into, from a
directory outside the repository, with PATH holding no compiler, and where the machine allows it in a
mount namespace where the system's liblz4 files are covered by an empty file (``--system-lz4-hidden``
then checks that loading the system's liblz4 fails). Exits 1 with a list of what failed.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

COMPILERS = ("cc", "gcc", "clang", "c99")
LZ4_EXTENSIONS = ("_lz4batch",)  # _sumtree links no library


def main() -> int:
    failures: list[str] = []
    if "--system-lz4-hidden" in sys.argv[1:]:
        failures += check_system_lz4_hidden()
    found = [name for name in COMPILERS if shutil.which(name)]
    if found:
        failures.append(f"a C compiler is on PATH ({', '.join(found)}); the check must run without one")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import mmreplay
        import mmreplay.frames.lz4_codec
        import mmreplay.frames.reference_codec
        import mmreplay.sampling.sum_tree
    failures += [f"import warned: {w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught
                 if w.category.__name__ == "PerformanceWarning"]

    package = Path(mmreplay.__file__).resolve().parent
    libs = (package.parent / "mmreplay.libs").resolve()
    print(f"mmreplay {mmreplay.__version__} from {package}")
    if "site-packages" not in package.parts:
        failures.append(f"mmreplay was imported from {package}, not from the venv's site-packages")
    for module in (mmreplay.frames.lz4_codec, mmreplay.frames.reference_codec, mmreplay.sampling.sum_tree):
        print(f"  {module.__name__}.ACCELERATED = {module.ACCELERATED}")
        if not module.ACCELERATED:
            failures.append(f"{module.__name__}.ACCELERATED is False")
    failures += check_store_round_trip()
    for name in LZ4_EXTENSIONS:
        failures += check_links(package, name, libs)
    failures += check_mapped_lz4(libs)

    for failure in failures:
        print(f"FAILED: {failure}")
    print("wheel check: ok" if not failures else f"wheel check: {len(failures)} failure(s)")
    return 1 if failures else 0


def check_system_lz4_hidden() -> list[str]:
    """The system's liblz4 cannot be loaded here, so whatever runs below does without it."""
    try:
        ctypes.CDLL("liblz4.so.1")
    except OSError as error:
        print(f"  system liblz4 hidden: loading liblz4.so.1 fails ({error})")
        return []
    return ["the system's liblz4.so.1 loads: it was meant to be hidden"]


def check_store_round_trip() -> list[str]:
    """A store of each frame encoding, written and sampled through the compiled code, gives back its frames."""
    from mmreplay import ReplayStore

    failures = []
    rng = np.random.default_rng(0)
    frames = (rng.integers(0, 4, (40, 84, 84), dtype=np.uint8) * 60).astype(np.uint8)
    with tempfile.TemporaryDirectory() as directory:
        for encoding in ("lz4", "lz4-reference"):
            path = Path(directory) / f"{encoding}.mmr"
            with ReplayStore.create(path, frame_shape=(84, 84), capacity=64, stack_size=1,
                                    frame_encoding=encoding) as store:
                for step in range(len(frames) - 1):
                    store.add(frames[step], np.int64(0), np.float32(1.0), frames[step + 1], False, False)
                batch = store.sample(32, rng=np.random.default_rng(1))
            if not (np.array_equal(batch.obs[:, 0], frames[batch.index])
                    and np.array_equal(batch.next_obs[:, 0], frames[batch.index + 1])):
                failures.append(f"a {encoding} store sampled frames that differ from those added")
    print(f"  stores written and sampled back: {'ok' if not failures else 'FAILED'}")
    return failures


def check_links(package: Path, name: str, libs: Path) -> list[str]:
    """The extension's liblz4, as the dynamic loader resolves it (ldd), lies in the wheel's mmreplay.libs/."""
    [extension] = package.glob(f"{name}.*.so")
    listing = subprocess.run(["ldd", str(extension)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    resolved = [line.split() for line in listing.stdout.splitlines() if "=>" in line and "lz4" in line.split("=>")[0]]
    print(f"  {extension.name} links: " + "; ".join(" ".join(parts[:3]) for parts in resolved))
    if not resolved:
        said = (listing.stderr or listing.stdout).strip().splitlines()
        return [f"ldd lists no liblz4 for {extension.name}" + (f" (ldd: {said[0]})" if said else "")]
    return [f"{extension.name} resolves {parts[0]} to {parts[2] if len(parts) > 2 else '?'}, not inside {libs}"
            for parts in resolved if len(parts) < 3 or Path(parts[2]).resolve().parent != libs]


def check_mapped_lz4(libs: Path) -> list[str]:
    """In this process, after the extensions ran: a liblz4 is mapped, and each one mapped is the wheel's."""
    mapped = sorted({line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                     if "/liblz4" in line.split()[-1]})
    print(f"  liblz4 mapped in this process: {', '.join(mapped) or 'none'}")
    if not mapped:
        return ["no liblz4 is mapped in this process"]
    return [f"{path} is mapped, from outside {libs}" for path in mapped if Path(path).resolve().parent != libs]


if __name__ == "__main__":
    sys.exit(main())
