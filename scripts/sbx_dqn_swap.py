"""Does SBX's DQN (Stable-Baselines-Jax, ``sbx-rl``) train the same with ``mmreplay.sb3.MmreplayBuffer`` as
with SB3's own ``ReplayBuffer``?

The script trains ``sbx.DQN("CnnPolicy", ...)`` on real Atari (ALE, ``make_atari_env`` and
``VecFrameStack(n_stack=4)``, as SB3's Atari recipe has it) twice, each run in a fresh process with the same
seed and settings: ``sb3`` with SBX's default buffer (SB3's ``ReplayBuffer``), and ``mmreplay`` with only
``replay_buffer_class=MmreplayBuffer, replay_buffer_kwargs={"path": ...}`` added. SBX's code is used as pip
installs it, unchanged. Each run records what SB3's logger records (``train/critic_loss``, ``rollout/ep_rew_mean``
and the others, at every dump) and the returns of the episodes its ``Monitor`` saw; the two runs are then
compared value by value. Exits 1 when a run failed or any value differs.

Run it in an environment where ``sbx-rl`` installs (``pip install sbx-rl ale-py``; SB3 and jax come with it),
with this repository on ``PYTHONPATH``::

    PYTHONPATH=. python scripts/sbx_dqn_swap.py --total-timesteps 6000 --learning-starts 1000 --json sbx.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BUFFERS = ("sb3", "mmreplay")
TIMING_KEYS = ("time/fps", "time/time_elapsed")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="PongNoFrameskip-v4")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=6_000)
    parser.add_argument("--learning-starts", type=int, default=1_000)
    parser.add_argument("--buffer-size", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=None, help="where the runs write (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write both runs' records here")
    parser.add_argument("--child", nargs=2, metavar=("BUFFER", "RECORD"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run_child(args: argparse.Namespace, buffer: str, record_path: Path) -> int:
    """Train SBX's DQN in this process with ``buffer``; write what it logged to ``record_path``."""
    import ale_py  # noqa: F401  (registers the NoFrameskip-v4 envs with gymnasium)
    from sbx import DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.logger import KVWriter, configure
    from stable_baselines3.common.vec_env import VecFrameStack

    logged: list[dict[str, float]] = []

    class Recording(KVWriter):
        def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
            logged.append({key: float(value) for key, value in key_values.items()
                           if isinstance(value, (int, float)) and key not in TIMING_KEYS})

    env = VecFrameStack(make_atari_env(args.env_id, n_envs=1, seed=args.seed), n_stack=4)
    kwargs: dict[str, Any] = {}
    if buffer == "mmreplay":
        from mmreplay.sb3 import MmreplayBuffer

        kwargs = dict(replay_buffer_class=MmreplayBuffer,
                      replay_buffer_kwargs={"path": str(record_path.parent.resolve() / "replay.mmr")})
    model = DQN("CnnPolicy", env, buffer_size=args.buffer_size, learning_starts=args.learning_starts, seed=args.seed,
                verbose=0, **kwargs)
    logger = configure(None, [])
    logger.output_formats.append(Recording())
    model.set_logger(logger)
    record: dict[str, Any] = {"buffer": buffer, "logged": logged, "error": None}
    try:
        model.learn(total_timesteps=args.total_timesteps, log_interval=1)
        record["returns"] = [float(info["r"]) for info in model.ep_info_buffer]
    except BaseException as error:  # the record says how the run ended
        record["error"] = f"{type(error).__name__}: {error}"
    record_path.write_text(json.dumps(record))
    return 1 if record["error"] else 0


def run_one(args: argparse.Namespace, buffer: str, work: Path) -> dict[str, Any]:
    run_dir = work / buffer
    run_dir.mkdir(parents=True, exist_ok=False)
    record_path = run_dir / "record.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", buffer, str(record_path),
               f"--env-id={args.env_id}", f"--seed={args.seed}", f"--total-timesteps={args.total_timesteps}",
               f"--learning-starts={args.learning_starts}", f"--buffer-size={args.buffer_size}"]
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
               OMP_NUM_THREADS="1")
    started = time.perf_counter()
    with open(run_dir / "output.log", "wb") as log:
        code = subprocess.run(command, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    record: dict[str, Any] = {"buffer": buffer, "logged": [], "error": f"exit status {code}, no record"}
    if record_path.exists():
        record = json.loads(record_path.read_text())
    record["wall_s"] = time.perf_counter() - started
    return record


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> tuple[bool, str]:
    if ours["error"] or theirs["error"]:
        return False, f"sb3 error: {theirs['error']}; mmreplay error: {ours['error']}"
    if ours["logged"] != theirs["logged"] or ours.get("returns") != theirs.get("returns"):
        for i, (a, b) in enumerate(zip(theirs["logged"], ours["logged"])):
            if a != b:
                return False, f"first difference at dump {i}: sb3 {a} vs mmreplay {b}"
        return False, f"sb3 dumped {len(theirs['logged'])} times, mmreplay {len(ours['logged'])}"
    return True, f"all {len(ours['logged'])} dumps and {len(ours.get('returns', []))} episode returns identical"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args, args.child[0], Path(args.child[1]))
    work = args.work or Path(tempfile.mkdtemp(prefix="sbx-dqn-"))
    records = {buffer: run_one(args, buffer, work) for buffer in BUFFERS}
    for buffer, record in records.items():
        losses = [d.get("train/critic_loss", d.get("train/loss")) for d in record["logged"]
                  if "train/critic_loss" in d or "train/loss" in d]  # SBX's DQN logs its TD loss as critic_loss
        print(f"{buffer}: {len(record.get('returns', []))} episodes, returns {record.get('returns')}, "
              f"{len(losses)} loss dumps (last {losses[-1] if losses else None}), {record['wall_s']:.0f} s, "
              f"{'ok' if not record['error'] else record['error']}")
    identical, what = compare(records["mmreplay"], records["sb3"])
    print(f"{'IDENTICAL' if identical else 'DIFFERENT'}: {what}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"work": str(work), "json": str(args.json)},
                                         "records": records}, indent=1, default=str))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
