"""SIGKILL imports and exports at random moments: the target holds nothing or the complete result.

Each trial starts one of ``export_hdf5`` (mmreplay layout), ``export_hdf5`` (Minari layout),
``import_hdf5`` and ``import_dopamine`` in a child process and kills it with SIGKILL in one of three
phases, in turn: anywhere (a random delay after its imports, up to 1.2 times what the operation takes
uninterrupted), just after its build directory appears, or just after its result is renamed into place
(the directory watched every 0.2 ms, then a random 0 to 2 ms). It then checks that

* the target path is either absent or the complete result (a store whose transitions and episodes are
  those expected, an HDF5 file or Minari dataset with every transition),
* into nothing, running the same operation again succeeds and leaves no ``.NAME.*`` sibling behind
  (the leftovers of the killed run are removed by it), and
* onto the complete result, running it again is refused and removes nothing (nothing is removed before
  a call's arguments are accepted); once the result is removed, the next run succeeds and leaves no
  sibling behind.

Prints one JSON object of counts; exits 1 if any trial failed.

    python scripts/kill_builds.py --trials 200 --seed 1
    python scripts/kill_builds.py --trials 200 --operations export-minari
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OPERATIONS = ("export-mmreplay", "export-minari", "import-hdf5", "import-dopamine")
SHAPE = (84, 84)


def make_sources(work: Path, transitions: int) -> None:
    """A store, its export and a Dopamine checkpoint holding the same kind of data."""
    from mmreplay import ReplayStore, export_hdf5  # noqa: PLC0415

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (64, *SHAPE), dtype=np.uint8)
    with ReplayStore.create(work / "source.mmr", frame_shape=SHAPE, capacity=transitions, stack_size=4) as store:
        for t in range(transitions):
            ended = t % 97 == 96
            store.add(frames[t % 64], t % 6, 1.0, frames[(t + 1) % 64], ended, False)
        export_hdf5(store, work / "source.h5")
    dopamine = work / "dopamine"
    dopamine.mkdir()
    capacity = transitions
    observation = np.zeros((capacity, *SHAPE), np.uint8)
    terminal = np.zeros(capacity, np.uint8)
    slot = 3  # three padding slots first
    while slot < capacity:
        for step in range(min(100, capacity - slot)):
            observation[slot] = frames[slot % 64]
            terminal[slot] = step == 99
            slot += 1
        slot += 3
    arrays = {"$store$_observation": observation, "$store$_action": np.zeros(capacity, np.int32),
              "$store$_reward": np.ones(capacity, np.float32), "$store$_terminal": terminal,
              "add_count": np.array(capacity - 1), "invalid_range": np.arange(capacity - 2, capacity + 2) % capacity}
    for name, array in arrays.items():
        with gzip.open(dopamine / f"{name}_ckpt.0.gz", "wb") as out:
            np.save(out, array, allow_pickle=False)


def operation_code(operation: str, work: Path, target: Path) -> str:
    calls = {
        "export-mmreplay": f"export_hdf5(ReplayStore.open({str(work / 'source.mmr')!r}, 'r'), {str(target)!r})",
        "export-minari": f"export_hdf5(ReplayStore.open({str(work / 'source.mmr')!r}, 'r'), {str(target)!r}, "
                         "layout='minari')",
        "import-hdf5": f"import_hdf5({str(work / 'source.h5')!r}, {str(target)!r})",
        "import-dopamine": f"import_dopamine({str(work / 'dopamine')!r}, {str(target)!r})",
    }
    # "ready" once the imports are done, so that the kill lands inside the operation; then its duration.
    return ("import time; from mmreplay import ReplayStore, export_hdf5, import_hdf5, import_dopamine; "
            f"print('ready', flush=True); began = time.perf_counter(); {calls[operation]}; "
            "print(time.perf_counter() - began, flush=True)")


def run_operation(operation: str, work: Path, target: Path, *, check: bool = True) -> int:
    """Run it to its end; returns its exit status."""
    done = subprocess.run([sys.executable, "-c", operation_code(operation, work, target)], check=check,
                          stdout=subprocess.DEVNULL, stderr=None if check else subprocess.DEVNULL, timeout=600)
    return done.returncode


def timeline(operation: str, work: Path, target: Path) -> dict[str, float]:
    """Run it uninterrupted, watching ``work``: seconds after "ready" until its build directory appeared
    ("made"), until the target appeared ("renamed"), and until it returned ("duration")."""
    child = subprocess.Popen([sys.executable, "-c", operation_code(operation, work, target)],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    began = time.perf_counter()
    seen: dict[str, float] = {}
    prefix = f".{target.name}."
    while child.poll() is None and time.perf_counter() - began < 600:
        now = time.perf_counter() - began
        if "made" not in seen and any(name.startswith(prefix) for name in os.listdir(work)):
            seen["made"] = now
        if "renamed" not in seen and os.path.lexists(target):
            seen["renamed"] = now
        time.sleep(0.0002)
    duration = float(child.stdout.read().split()[-1])
    child.wait()
    return {"made": seen.get("made", 0.0), "renamed": seen.get("renamed", duration), "duration": duration}


PHASES = ("anywhere", "made", "renamed")


def wait_to_kill(chooser: random.Random, phase: str, child: subprocess.Popen[str], work: Path, target: Path,
                 duration: float) -> None:
    """Return when ``child`` is to be killed: after a random delay (``anywhere`` in the run), or just after
    its build directory appeared (``made``) or its result appeared at the target (``renamed``), watched
    for every 0.2 ms, then a random 0 to 2 ms more (timed steps would drift with the machine's load)."""
    if phase == "anywhere":
        time.sleep(chooser.uniform(0, 1.2 * duration))
        return
    prefix = f".{target.name}."
    began = time.perf_counter()
    while child.poll() is None and time.perf_counter() - began < 600:
        if os.path.lexists(target) if phase == "renamed" else any(n.startswith(prefix) for n in os.listdir(work)):
            break
        time.sleep(0.0002)
    time.sleep(chooser.uniform(0, 0.002))


def siblings(work: Path, target: Path) -> list[str]:
    return sorted(p.name for p in work.glob(f".{target.name}.*"))


def remove(target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)


def describe(operation: str, target: Path) -> object:
    """What the complete result holds (compared between a killed run's result and a clean one)."""
    if not target.exists():
        return None
    if operation.startswith("import"):
        from mmreplay import ReplayStore  # noqa: PLC0415

        with ReplayStore.open(target, "r") as store:
            return [len(store), [(e.length, e.ended_by) for e in store.episodes()]]
    import h5py  # noqa: PLC0415

    path = target / "data" / "main_data.hdf5" if operation == "export-minari" else target
    with h5py.File(path, "r") as file:
        return [int(file.attrs["transitions"]), sorted(file.keys())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--transitions", type=int, default=1000)
    parser.add_argument("--operations", nargs="+", choices=OPERATIONS, default=list(OPERATIONS))
    arguments = parser.parse_args(argv)
    operations = arguments.operations
    chooser = random.Random(arguments.seed)
    counts = {"trials": 0, "nothing at the target": 0, "complete result": 0, "failures": 0}
    by_phase = {phase: 0 for phase in PHASES}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kill_builds-") as scratch:
        work = Path(scratch)
        make_sources(work, arguments.transitions)
        expected, times = {}, {}
        for operation in operations:
            target = work / f"clean-{operation}"
            times[operation] = timeline(operation, work, target)
            expected[operation] = describe(operation, target)
        for trial in range(arguments.trials):
            operation = operations[trial % len(operations)]
            phase = PHASES[(trial // len(operations)) % len(PHASES)]
            target = work / f"t{trial}-{operation}"
            child = subprocess.Popen([sys.executable, "-c", operation_code(operation, work, target)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            wait_to_kill(chooser, phase, child, work, target, times[operation]["duration"])
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            counts["trials"] += 1
            by_phase[phase] += 1
            try:
                found = describe(operation, target)
            except Exception as error:  # noqa: BLE001 - a half-written result is what this looks for
                found = f"unreadable: {error}"
            if found is None:
                counts["nothing at the target"] += 1
            elif found == expected[operation]:
                counts["complete result"] += 1
            else:
                failures.append(f"trial {trial} {operation} ({phase}): {found!r} != {expected[operation]!r}")
                continue
            if found is not None:
                # Onto the complete result the run is refused, and removes nothing; then the result goes.
                before = siblings(work, target)
                if run_operation(operation, work, target, check=False) == 0:
                    failures.append(f"trial {trial} {operation} ({phase}): a run onto the result was not refused")
                if siblings(work, target) != before:
                    failures.append(f"trial {trial} {operation} ({phase}): a refused run removed "
                                    f"{sorted(set(before) - set(siblings(work, target)))}")
                remove(target)
            # Into nothing it must succeed, and remove what the killed run left beside the target.
            run_operation(operation, work, target)
            if describe(operation, target) != expected[operation]:
                failures.append(f"trial {trial} {operation} ({phase}): the run after the kill gave another result")
            left = siblings(work, target)
            if left:
                failures.append(f"trial {trial} {operation} ({phase}): leftovers {left}")
            remove(target)
    counts["failures"] = len(failures)
    print(json.dumps({**counts, "trials_by_phase": by_phase, "failures_listed": failures[:20],
                      "uninterrupted_seconds": {k: {name: round(v, 3) for name, v in t.items()}
                                                for k, t in times.items()}}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
