"""What an add writes, decided before anything is written: each new row, the compressed frames with their
episode links, the row each new one continues, and what each env's episode records afterwards.

Two builders make the same ``AddPlan``, and the writer writes either with one write: ``plan_add`` for
``add``'s general path (checked arguments: any mix of episode starts, continuations and detached next_obs
stacks, the frames compressed by an encoder) and ``plan_run`` for a run of ``add_encoded`` steps that each
continue one env's episode with one new frame, whose blocks arrived compressed. (``add``'s fast path,
where every env continues with one new frame, has a compiled write of its own.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from mmreplay.frames.encodings import FrameEncoder
from mmreplay.rows.transitions import (
    DETACHED,
    EPISODE_START,
    FRAGMENT_START,
    TERMINATED,
    TRUNCATED,
)
from mmreplay.store.writing.add_arguments import AddArguments
from mmreplay.store.writing.encoded_adds import EncodedSend
from mmreplay.store.writing.env_episodes import EnvEpisode


@dataclass(slots=True)
class AddPlan:
    """Rows for the next transition steps, in order: row i is a transition of env ``envs[i]`` with
    ``rewards[i]``, ``actions[i]``, ``flags[i]`` and the newest next_obs frame at frame step
    ``next_frames[i]``; ``fields`` are the user fields' values, one per row (None: no fields).

    ``payloads`` are the new frames, compressed, in frame-step order from the ring's next one, with their
    episode links (``prev_deltas``; ``ref_deltas`` all 0 unless the encoder records references).
    ``previous_steps[i]`` is the transition row i continues (None when it starts an episode, and then
    ``starts[i]`` holds the episode's first obs frames: pixels and frame steps). ``records[i]`` are the
    next_obs frames that row i's env's episode records after it (the newest, or a detached transition's
    whole stack; None where a later row of the same env records over them). ``cuts`` are the rows whose
    obs does not continue their env's open episode, which they end without a flag (``ended_by`` "cut").
    """

    envs: list[int]
    rewards: npt.NDArray[np.float32]
    actions: npt.NDArray[Any]
    fields: dict[str, npt.NDArray[Any]] | None
    payloads: list[bytes]
    prev_deltas: list[int]
    ref_deltas: list[int]
    next_frames: list[int]
    flags: list[int]
    previous_steps: list[int | None]
    starts: list[tuple[list[bytes], list[int]] | None]
    records: list[list[bytes] | None]
    cuts: list[int] = field(default_factory=list)


def plan_add(
    arguments: AddArguments,
    episodes: list[EnvEpisode],
    *,
    next_frame_step: int,
    oldest_stored_step: int,
    encoder: FrameEncoder,
    fields: dict[str, npt.NDArray[Any]] | None = None,
    fragment: bool = False,
) -> AddPlan:
    """The plan of ``add``'s general path: which frames each recorded env writes, compressed. Nothing is
    written or changed (but the encoder's state, which its ``rollback`` restores if the plan is not
    written). ``fields``: the checked user fields of every env. With ``fragment``, an obs that starts a
    new episode starts a fragment (flag FRAGMENT_START)."""
    envs = arguments.envs
    every_env = len(envs) == len(arguments.reward)
    plan = AddPlan(
        envs,
        arguments.reward if every_env else arguments.reward[envs],
        arguments.action if every_env else arguments.action[envs],
        None if not fields else {name: array[envs] for name, array in fields.items()},
        [], [], [], [], [], [], [], [],
    )
    payloads, ref_deltas, encode = plan.payloads, plan.ref_deltas, encoder.encode
    next_step = next_frame_step
    for env in envs:
        obs = arguments.obs[env]
        episode = episodes[env]
        flags = TERMINATED * bool(arguments.terminated[env]) | TRUNCATED * bool(arguments.truncated[env])
        continues = episode.continues_with(obs.tobytes(), arguments.stacked)
        if continues and episode.last_step >= oldest_stored_step:
            obs_steps = list(episode.frame_steps)
            plan.previous_steps.append(episode.last_step)
            plan.starts.append(None)
        else:
            stack = _obs_frames_to_store(episode, obs, continues=continues)
            if not continues:
                flags |= FRAGMENT_START if fragment else EPISODE_START
                if episode.open and not fragment:
                    plan.cuts.append(len(plan.flags))
            frames = [frame.tobytes() for frame in stack]
            steps = list(range(next_step, next_step + len(frames)))
            for i, frame in enumerate(stack):
                # A new episode starts a new group of reference frames (reference_codec).
                payload, ref_delta = encode(env, next_step + i, frame, restart=i == 0 and bool(flags & EPISODE_START))
                payloads.append(payload)
                ref_deltas.append(ref_delta)
            plan.prev_deltas.extend([0] + [1] * (len(frames) - 1))
            next_step += len(frames)
            obs_steps = [steps[0]] * (episode.stack_size - len(steps)) + steps
            plan.previous_steps.append(None)
            plan.starts.append((frames, steps))
        # The new frames of next_obs: its newest, or, for a detached transition, all of its frames (no
        # repeats left out: its stack must come back as given), the oldest linked to obs's newest frame.
        new_frames = arguments.next_obs[env] if arguments.detached[env] else arguments.next_obs[env][-1:]
        for i, frame in enumerate(new_frames):
            payload, ref_delta = encode(env, next_step + i, frame, restart=False)
            payloads.append(payload)
            ref_deltas.append(ref_delta)
        plan.prev_deltas.extend([next_step - obs_steps[-1]] + [1] * (len(new_frames) - 1))
        next_step += len(new_frames)
        plan.next_frames.append(next_step - 1)
        plan.flags.append(flags | DETACHED * bool(arguments.detached[env]))
        plan.records.append([frame.tobytes() for frame in new_frames])
    return plan


def _obs_frames_to_store(episode: EnvEpisode, obs: npt.NDArray[Any], *, continues: bool) -> list[npt.NDArray[Any]]:
    """The obs frames a transition that links to no stored transition writes: a new episode's obs stack,
    or (``continues``: the episode goes on, but its newest transition was evicted) the stack the env saw."""
    if continues:
        # Stored again, but its padding (positions that repeat one frame step) as padding again, so a
        # zero-padding store reads back the same stack.
        held = list(episode.frame_steps)
        padding = next((i for i in range(len(held) - 1) if held[i] != held[i + 1]), len(held) - 1)
        return [np.frombuffer(frame, np.uint8) for frame in list(episode.frames)[padding:]]
    stack = list(obs)
    # A stack's leading repeats of its first frame come back by padding: store that frame once.
    first_distinct = 1
    while first_distinct < len(stack) and stack[first_distinct].tobytes() == stack[0].tobytes():
        first_distinct += 1
    return stack[first_distinct - 1 :]


def plan_run(
    send: EncodedSend, start: int, stop: int, episode: EnvEpisode, *, first_step: int, next_frame_step: int
) -> AddPlan:
    """The plan of steps ``[start, stop)`` of an ``add_encoded`` send, each continuing the env's episode
    (``episode``, whose newest transition is still stored) with one new frame, given as the block that
    arrived: the rows, frames and links that ``stop - start`` general-path adds write from transition step
    ``first_step`` and frame step ``next_frame_step`` on. Only the run's last step may end the episode."""
    env, count, steps = send.env, stop - start, send.steps
    terminated, truncated = steps.terminated[start:stop], steps.truncated[start:stop]
    newest_kept = count - episode.stack_size  # the episode keeps its newest stack: earlier rows record nothing
    return AddPlan(
        [env] * count,
        steps.reward[start:stop],
        steps.action[start:stop],
        fields={name: values[start:stop] for name, values in send.fields.items()} or None,
        payloads=send.new_blocks(start, stop),
        prev_deltas=[next_frame_step - episode.frame_steps[-1]] + [1] * (count - 1),
        ref_deltas=[0] * count,
        next_frames=list(range(next_frame_step, next_frame_step + count)),
        flags=(TERMINATED * terminated | TRUNCATED * truncated).tolist(),
        previous_steps=[episode.last_step, *range(first_step, first_step + count - 1)],
        starts=[None] * count,
        records=[[steps.next_obs[start + i, -1].tobytes()] if i >= newest_kept else None for i in range(count)],
    )
