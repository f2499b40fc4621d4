"""Does ``import_dopamine`` read checkpoints written by Dopamine's own code as Dopamine's own sampler does?

Two steps, two Python environments (Dopamine needs TensorFlow and gin, which mmreplay never installs):

1. ``write`` runs with a Python that has ``dopamine-rl`` (tested: dopamine-rl 4.1.2, TensorFlow 2.21 CPU,
   Python 3.11). It fills ``dopamine.tf.replay_memory.circular_replay_buffer.OutOfGraphReplayBuffer``
   with frames (real Atari frames from ``mmreplay.testing.atari_frames`` when given, else random ones), each
   stamped with its written slot number in its first three pixels, through episodes of 1, 2 and more
   steps that end by termination or (scenario ``dopamine``) by a time limit (``episode_end=True``), so
   the ring wraps several times. Two scenarios:

   * ``dopamine``: today's ``OutOfGraphReplayBuffer.save`` at chosen add counts, with overlaps and a gap
     between checkpoints (``episode_end_indices`` files included);
   * ``batch_rl``: the way batch_rl's ``OutOfGraphLoggedReplayBuffer`` logged the DQN Replay Dataset
     (2019 Dopamine: no time limits, no ``episode_end_indices`` file): a checkpoint each time the ring is
     full (after an add that leaves ``add_count % capacity == capacity - 1``) and a final one written like
     its ``log_final_buffer``, ``add_count`` replaced by the ring cursor (this harness's own code, written
     from reading batch_rl's; no batch_rl code is used).

   Then, for every checkpoint, it loads it into a fresh buffer with Dopamine's ``load`` (with the true
   add_count for the final log), lists every index ``is_valid_transition`` accepts, and records what
   ``sample_transition_batch(indices=...)`` returns for each: digests of the state and next_state
   stacks, action, reward, terminal, keyed by written slot.

2. ``compare`` runs with mmreplay (the main checkout's or a branch's, by ``PYTHONPATH``): it imports
   every scenario with ``import_dopamine`` (all checkpoints, default arguments) and compares every
   imported transition with Dopamine's record of the same slot (found by the stamp of its obs's newest
   frame), and counts the transitions Dopamine samples that the import lacks, by kind.

    DOPAMINE_PY=/work/scratch/dopamine/venv/bin/python
    python benchmarks/dopamine_real.py all --work /tmp/dopamine_real --dopamine-python $DOPAMINE_PY
    python benchmarks/dopamine_real.py compare --work /tmp/dopamine_real      # again, another mmreplay
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

SHAPE = (84, 84)
STACK = 4
CAPACITY = 1000


def stamp(frame: np.ndarray, slot: int) -> np.ndarray:
    """The frame with ``slot + 1`` in its first three pixels (never all zero, so never taken for padding)."""
    out = frame.copy()
    out.reshape(-1)[:3] = [(slot + 1) >> 16 & 255, (slot + 1) >> 8 & 255, (slot + 1) & 255]
    return out


def stamped_slot(frame: np.ndarray) -> int:
    a, b, c = (int(v) for v in frame.reshape(-1)[:3])
    return (a << 16 | b << 8 | c) - 1


def digest(array: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=12).hexdigest()


# -- step 1: Dopamine's side ---------------------------------------------------------------------


def episode_plan(rng: np.random.Generator, slots: int, *, truncations: bool) -> list[tuple[int, str]]:
    """Episode lengths and how each ends: 1- and 2-step episodes, long ones, the last one unfinished."""
    plan, total = [], 0
    lengths = [1, 2, 1, 2, 37, 120, 3, 260, 1, 55]
    while total < slots:
        length = lengths[len(plan) % len(lengths)] if len(plan) < 30 else int(rng.integers(1, 300))
        end = "truncated" if truncations and rng.random() < 0.3 else "terminated"
        plan.append((length, end))
        total += length + STACK - 1
    plan[-1] = (plan[-1][0], "unfinished")
    return plan


def write(work: Path, frames_path: Path | None) -> None:
    from dopamine.tf.replay_memory.circular_replay_buffer import OutOfGraphReplayBuffer  # noqa: PLC0415

    rng = np.random.default_rng(0)
    if frames_path is not None:
        source = np.load(frames_path)["frames"]
    else:
        source = rng.integers(0, 256, (4000, *SHAPE), dtype=np.uint8)
    for scenario, truncations, slots in (("dopamine", True, 4300), ("batch_rl", False, 4600)):
        folder = work / scenario
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)

        def new_buffer() -> Any:
            return OutOfGraphReplayBuffer(SHAPE, STACK, CAPACITY, 32, update_horizon=1,
                                          checkpoint_duration=10**6)

        buffer = new_buffer()
        saves = [900, 1700, 2600, 3800]  # save once add_count reaches each; 2600 -> 3800 leaves a gap
        true_counts: dict[int, int] = {}
        log_count = 0
        used = 0
        for length, end in episode_plan(rng, slots, truncations=truncations):
            for step in range(length):
                last = step == length - 1
                terminal = last and end == "terminated"
                episode_end = last and end == "truncated"
                # The slot this observation lands in: after the padding the buffer writes first.
                padding = STACK - 1 if buffer._next_experience_is_episode_start else 0
                slot = buffer.add_count + padding
                frame = stamp(source[used % len(source)], slot)
                used += 1
                action, reward = int(rng.integers(0, 6)), float(rng.choice([0.0, 0.0, 1.0, -1.0]))
                buffer.add(frame, action, reward, int(terminal), episode_end=episode_end)
                count = int(buffer.add_count)
                if scenario == "dopamine" and len(true_counts) < len(saves) and count >= saves[len(true_counts)]:
                    true_counts[len(true_counts)] = count
                    buffer.save(str(folder), len(true_counts) - 1)
                if scenario == "batch_rl" and count % CAPACITY == CAPACITY - 1:
                    buffer.save(str(folder), log_count)  # batch_rl's _log_buffer writes the same files
                    true_counts[log_count] = int(buffer.add_count)
                    log_count += 1
        if scenario == "batch_rl":
            true_count = buffer.add_count
            buffer.add_count = np.array(buffer.cursor())  # log_final_buffer: add_count replaced by the cursor
            buffer.save(str(folder), log_count)
            buffer.add_count = true_count
            true_counts[log_count] = int(true_count)
            for path in folder.glob("episode_end_indices_ckpt.*.gz"):
                path.unlink()  # the 2019 code that logged the DQN Replay Dataset had no such member
        records, padding_samples = {}, set()
        for number, count in sorted(true_counts.items()):
            oracle = new_buffer()
            oracle.load(str(folder), number)
            oracle.add_count = np.array(count)
            valid = [i for i in range(CAPACITY) if oracle.is_valid_transition(i)]
            batch = oracle.sample_transition_batch(batch_size=len(valid), indices=valid)
            names = [e.name for e in oracle.get_transition_elements(len(valid))]
            fields = dict(zip(names, batch))
            for j, index in enumerate(valid):
                written = count - 1 - (count - 1 - index) % CAPACITY  # the newest written slot in ring slot index
                state = np.moveaxis(fields["state"][j], -1, 0)  # Dopamine stacks on the last axis
                if not state[-1].any():
                    # A padding slot: after a time limit nothing in Dopamine's is_valid_transition stops it
                    # (no terminal in the stack), so Dopamine samples padding as if it were a step.
                    padding_samples.add(written)
                    continue
                records[written] = {"state": digest(state), "next_state": digest(np.moveaxis(fields["next_state"][j], -1, 0)),
                                    "action": int(fields["action"][j]), "reward": float(fields["reward"][j]),
                                    "terminal": bool(fields["terminal"][j])}
                assert stamped_slot(state[-1]) == written, (scenario, number, index, written)
        (folder.parent / f"{scenario}.oracle.json").write_text(json.dumps(
            {"checkpoints": sorted(true_counts), "true_counts": true_counts,
             "records": {str(k): v for k, v in sorted(records.items())}, "padding_samples": len(padding_samples)}))
        print(f"{scenario}: {len(true_counts)} checkpoints, add_counts {list(true_counts.values())}, "
              f"{len(records)} slots Dopamine samples, and {len(padding_samples)} padding slots it samples "
              "after time limits (not compared)")


# -- step 2: mmreplay's side ---------------------------------------------------------------------


def compare(work: Path) -> dict[str, Any]:
    import mmreplay  # noqa: PLC0415
    from mmreplay import ReplayStore  # noqa: PLC0415
    from mmreplay.dopamine import import_dopamine  # noqa: PLC0415

    results: dict[str, Any] = {"mmreplay": getattr(mmreplay, "__file__", "?")}
    for scenario in ("dopamine", "batch_rl"):
        oracle = json.loads((work / f"{scenario}.oracle.json").read_text())
        records = {int(k): v for k, v in oracle["records"].items()}
        target = work / f"{scenario}.mmr"
        shutil.rmtree(target, ignore_errors=True)
        row: dict[str, Any] = {"dopamine_samples": len(records),
                               "dopamine_padding_samples_not_compared": oracle["padding_samples"]}
        results[scenario] = row
        try:
            row["imported"] = import_dopamine(work / scenario, target)
        except Exception as error:  # noqa: BLE001 - the failure is the finding
            row["import_error"] = f"{type(error).__name__}: {error}"
            continue
        kinds: Counter[str] = Counter()
        seen = set()
        with ReplayStore.open(target, "r") as store:
            stored = store.stored_steps
            for start in range(stored.start, stored.stop, 512):
                batch = store.read(np.arange(start, min(start + 512, stored.stop)))
                for i in range(len(batch.index)):
                    slot = stamped_slot(batch.obs[i, -1])
                    record = records.get(slot)
                    if record is None:
                        # Dopamine's invalid_range keeps it from sampling the first slots of each ring
                        # (their stacks reach into the slots before the cursor); an import that joins
                        # checkpoints has those frames. Check the stack by its stamps instead.
                        stamps = [stamped_slot(f) if f.any() else None for f in batch.obs[i]]
                        ok = all(s is None or s == slot - (len(stamps) - 1 - k) for k, s in enumerate(stamps))
                        kinds[f"extra (Dopamine does not sample it), stack {'consistent' if ok else 'WRONG'}"] += 1
                        continue
                    seen.add(slot)
                    kinds["compared"] += 1
                    if digest(batch.obs[i]) != record["state"]:
                        kinds["obs differs"] += 1
                    if digest(batch.next_obs[i]) != record["next_state"]:
                        kinds["next_obs differs"] += 1
                    if int(batch.action[i]) != record["action"]:
                        kinds["action differs"] += 1
                    if float(batch.reward[i]) != record["reward"]:
                        kinds["reward differs"] += 1
                    if bool(batch.terminated[i]) != record["terminal"]:
                        kinds["terminal differs"] += 1
            episodes = store.episodes()
            row["episodes"] = len(episodes)
            row["truncated_episodes"] = sum(e.ended_by == "truncated" for e in episodes)
            row["incomplete_episodes"] = sum(not e.complete for e in episodes)
        kinds["missing (Dopamine samples it)"] = len(set(records) - seen)
        row.update(kinds)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("write", "compare", "all"))
    parser.add_argument("--work", type=Path, required=True, help="scratch directory for checkpoints and stores")
    parser.add_argument("--frames", type=Path, help="an atari_frames .npz to take frames from (default: random)")
    parser.add_argument("--dopamine-python", help="for 'all': the Python that has dopamine-rl")
    arguments = parser.parse_args(argv)
    arguments.work.mkdir(parents=True, exist_ok=True)
    if arguments.step == "write":
        write(arguments.work, arguments.frames)
        return
    if arguments.step == "all":
        command = [arguments.dopamine_python or "python", __file__, "write", "--work", str(arguments.work)]
        subprocess.run(command + (["--frames", str(arguments.frames)] if arguments.frames else []), check=True)
    print(json.dumps(compare(arguments.work), indent=1))


if __name__ == "__main__":
    main()
