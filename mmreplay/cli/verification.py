"""``mmreplay verify``: scan a store for damage, then decode every stored transition and check it against
its tables.

The report is a plain dict (what ``--json`` prints): counts, every damaged row and frame, the problems
found (at most ``max_problems``), and whether it stopped early.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mmreplay.disk.atomic_builds import leftovers
from mmreplay.errors import CorruptStoreError, StepsEvictedError, StoreNotFoundError
from mmreplay.store import DamagedStore, ReplayStore
from mmreplay.store.reading.episode_list import Episode

CHUNK_STEPS = 1024


def open_to_describe(path: str) -> ReplayStore:
    """Open a store read-only; a missing one's error names the leftovers of a killed build beside it."""
    try:
        return ReplayStore.open(path, "r")
    except StoreNotFoundError as error:
        left = leftovers(Path(path))
        if left:
            raise StoreNotFoundError(f"{error}; beside it: {', '.join(p.name for p in left)} (left by a killed "
                                     "import or export; the next one to this path removes it)") from None
        raise


def _scan(path: str, progress: Any) -> DamagedStore:
    """The store at ``path`` opened and scanned for damage; a missing one's error names the leftovers of a
    killed build beside it (``open_to_describe``)."""
    try:
        return DamagedStore(path, progress=progress)
    except StoreNotFoundError:
        open_to_describe(path)  # raises, naming them
        raise


def verify_store(path: str, *, progress: bool = False, max_problems: int = 100) -> dict[str, Any]:
    """Check every stored row and frame, then every transition and episode; returns what is wrong.

    First the damage scan (``mmreplay.store.DamagedStore``): every stored row and field row against its
    checksum and the layout, every frame the stored transitions need decoded (``frames_decoded`` counts
    them, each once), and each stored transition found intact or not; it goes on past any damage, names
    each damaged row and frame (``damaged_rows``, ``damaged_frames``: step, file, offset, problem) and
    counts the transitions it checked (``transitions``), the ``damaged_transitions`` (their steps in
    ``damaged_steps``: those a read refuses) and the ``intact_transitions``. Then, on a store without damage: each transition's step and env are what was
    asked, rewards are finite, each obs continues the previous next_obs of its episode, each next_obs is
    its obs shifted by one frame unless the transition ended its episode (then it was stored as given), and
    terminated/truncated only end an episode, matching how the episode table says it ended. User fields
    (``report["fields"]`` names them) are checked with every row. At most ``max_problems`` are listed in
    ``problems`` (``stopped_early`` says whether it stopped there); the damage lists are whole.
    """
    report: dict[str, Any] = {"path": path, "transitions": 0, "episodes": 0, "frames_decoded": 0, "fields": [],
                              "problems": [], "stopped_early": False, "damaged_rows": [], "damaged_frames": [],
                              "damaged_transitions": 0, "intact_transitions": 0, "damaged_steps": [],
                              "evicted_while_verifying": 0}
    problems: list[str] = report["problems"]
    try:
        with tqdm(disable=not progress, file=sys.stderr, unit="frame+row", desc="scan") as bar:
            scanned = _scan(path, bar.update)
    except CorruptStoreError as error:
        problems.append(f"cannot open the store: {error}")
        return report
    with scanned:
        scan = scanned.scan
        missing = scanned.missing_files()
        report.update(fields=list(scanned.fields), transitions=len(scan.stored), frames_decoded=scan.frames_checked,
                      damaged_rows=[damage.as_dict() for damage in scan.rows],
                      damaged_frames=[damage.as_dict() for damage in scan.frames],
                      damaged_transitions=len(scan.damaged_steps), intact_transitions=len(scan.intact_steps),
                      damaged_steps=scan.damaged_steps.tolist())
    if missing or not scan.clean:
        problems.extend(f"missing file: {name}" for name in missing)
        problems.extend(damage.describe() for damage in (*scan.rows, *scan.frames))
        if not scan.rows and not scan.frames:  # intact rows and frames, yet some stack cannot be followed
            problems.extend(f"step {step}: a frame of its stacks lies outside the frames kept"
                            for step in scan.damaged_steps.tolist())
        report["stopped_early"] = len(problems) > max_problems
        del problems[max_problems:]
        return report
    try:
        store = open_to_describe(path)
    except CorruptStoreError as error:
        problems.append(f"cannot open the store: {error}")
        return report
    with store:
        report["fields"] = list(store.fields)
        episodes: list[Episode]
        try:
            episodes = store.episodes()
        except CorruptStoreError as error:
            problems.append(f"cannot list episodes: {error}")
            episodes = []
        # The steps the episodes cover; a live writer may have evicted some of them since (skipped below).
        stored = store.stored_steps if not episodes else range(
            min(int(episode.steps[0]) for episode in episodes), max(int(episode.steps[-1]) for episode in episodes) + 1)
        report["transitions"] = len(stored)
        report["evicted_while_verifying"] = 0
        report["episodes"] = len(episodes)
        episode_of = np.full(len(stored), -1, np.int64)  # each step's episode, by its position in the list
        for position, episode in enumerate(episodes):
            episode_of[episode.steps - stored.start] = position
        if episodes and (episode_of < 0).any():
            problems.append(f"step {int(np.flatnonzero(episode_of < 0)[0]) + stored.start} belongs to no episode")
        last_next: dict[int, np.ndarray] = {}
        with tqdm(total=len(stored), disable=not progress, file=sys.stderr, unit="transition", desc="verify") as bar:
            for start in range(stored.start, stored.stop, CHUNK_STEPS):
                steps = np.arange(start, min(start + CHUNK_STEPS, stored.stop), dtype=np.int64)
                # A live writer evicts the oldest steps: those are skipped, and the episodes they cut
                # start their continuity checks afresh.
                kept = steps[steps >= store.stored_steps.start]
                if len(kept) < len(steps):
                    report["evicted_while_verifying"] += len(steps) - len(kept)
                    last_next.clear()
                try:
                    if len(kept):
                        _verify_chunk(store, kept, episode_of[kept - stored.start], episodes, last_next, report)
                except StepsEvictedError as error:
                    report["evicted_while_verifying"] += len(error.steps)
                    last_next.clear()
                bar.update(len(steps))
                if len(problems) >= max_problems:
                    del problems[max_problems:]
                    report["stopped_early"] = True
                    break
    return report


def _verify_chunk(store: ReplayStore, steps: np.ndarray, episode_of: np.ndarray, episodes: list[Any],
                  last_next: dict[int, np.ndarray], report: dict[str, Any]) -> None:
    problems: list[str] = report["problems"]
    try:
        batch = store.read(steps)
    except CorruptStoreError:
        for step in steps.tolist():  # find the damaged transitions one by one
            try:
                store.read([step])
            except CorruptStoreError as error:
                problems.append(f"step {step}: {error}")
            except StepsEvictedError as error:
                report["evicted_while_verifying"] += len(error.steps)
        return
    for what, bad in (("index differs from the step read", batch.index != steps),
                      (f"env_index outside [0, {store.num_envs})", (batch.env_index < 0) | (batch.env_index >= store.num_envs)),
                      ("reward is not finite", ~np.isfinite(batch.reward))):
        problems.extend(f"step {step}: {what}" for step in steps[bad].tolist())
    for i, step in enumerate(steps.tolist()):
        number = int(episode_of[i])
        if number < 0:
            continue
        episode = episodes[number]
        if batch.env_index[i] != episode.env_index:
            problems.append(f"step {step}: env {batch.env_index[i]} but its episode {episode.id} is env "
                            f"{episode.env_index}")
        # Frames compare by their bytes, as the store compares them (a NaN frame equals itself).
        if number in last_next and last_next[number].tobytes() != batch.obs[i].tobytes():
            problems.append(f"step {step}: obs does not continue the previous next_obs of episode {episode.id}")
        last = step == int(episode.steps[-1])
        ended = "terminated" if batch.terminated[i] else "truncated" if batch.truncated[i] else None
        if not ended and batch.next_obs[i, :-1].tobytes() != batch.obs[i, 1:].tobytes():
            problems.append(f"step {step}: next_obs is not obs shifted by one frame, though it did not end its episode")
        if ended and not last:
            problems.append(f"step {step}: {ended} inside episode {episode.id}, which goes on")
        if last and ended and episode.ended_by != ended:
            problems.append(f"step {step}: {ended}, but episode {episode.id} is listed as {episode.ended_by!r}")
        if last:
            last_next.pop(number, None)
        else:
            last_next[number] = batch.next_obs[i].copy()
