"""Does CleanRL's ``dqn_atari.py`` (or, with ``--script dqn_atari_jax.py``, its JAX DQN), as CleanRL ships
it, train the same with mmreplay's buffer?

For each game the script runs CleanRL's ``cleanrl/dqn_atari.py`` twice, unchanged, with the same seed
and the same short settings, each run in a fresh process of its own:

- ``cleanrl``: as shipped, with ``cleanrl_utils.buffers.ReplayBuffer`` (a copy of Stable-Baselines3's);
- ``mmreplay``: with only the buffer construction changed. Before the script runs, this process sets
  ``cleanrl_utils.buffers.ReplayBuffer`` to a factory that returns
  ``mmreplay.sb3.MmreplayBuffer(<CleanRL's arguments>, path=<store dir>)``; the script's own
  ``from cleanrl_utils.buffers import ReplayBuffer`` then picks it up. Nothing else differs, and the
  script never calls ``close()`` or ``flush()``: what the store kept is what a user's run keeps.

Each run's logged scalars are captured by wrapping ``SummaryWriter.add_scalar`` (the event files are
still written): episodic returns and lengths, every ``losses/td_loss`` and ``losses/q_values``. The
two runs of a game are compared value by value (bit for bit, as float32); the table also gives each
run's peak RSS (``wait4``'s ``ru_maxrss``), its buffer's bytes (CleanRL's numpy arrays in RAM,
mmreplay's files as allocated on disk), and its wall time. Afterwards the store is opened read-only
and the transitions it committed are counted against those the script added. With ``--kill-after S``
each mmreplay run is SIGKILLed S seconds after its start instead (no exit hook runs), and the table
counts what its store kept against the adds made before the kill. The script exits 1 when a run
failed or any value differs.

Run it in an environment with CleanRL's pins, beside this repository (never inside it)::

    python3.11 -m venv /work/scratch/cleanrl/venv && V=/work/scratch/cleanrl/venv/bin
    $V/pip install gymnasium==0.29.1 ale-py==0.9.0 tyro==0.5.10 numpy==1.24.4 opencv-python==4.7.0.72 \\
        torch tensorboard stable-baselines3 h5py lz4 tqdm psutil
    $V/pip install -e '.[sb3]'             # mmreplay itself; keeps gymnasium 0.29.1
    git clone https://github.com/vwxyzjn/cleanrl /work/scratch/cleanrl/src
    $V/python benchmarks/cleanrl_dqn.py --cleanrl /work/scratch/cleanrl/src --work /work/scratch/cleanrl/runs

CleanRL pins ale-py 0.8.1, which downloads its ROMs from the internet; ale-py 0.9.0 ships them and
works with gymnasium 0.29.1, but registers its environments only when ``ale_py`` is imported (it has
no gymnasium entry point any more), so each run imports ``ale_py`` before the script, both runs alike.
Torch runs on one thread in both (``--threads``), so that the runs are reproducible on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

BUFFERS = ("cleanrl", "mmreplay")
# CleanRL's Atari DQNs: both build their buffer with ``cleanrl_utils.buffers.ReplayBuffer(...)`` alike.
SCRIPTS = ("dqn_atari.py", "dqn_atari_jax.py")
GAMES = {"pong": "PongNoFrameskip-v4", "breakout": "BreakoutNoFrameskip-v4"}
# Scalars that depend on time, not on training: left out of the comparison.
TIMING_TAGS = ("charts/SPS",)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cleanrl", type=Path, required=True, help="a CleanRL checkout (has cleanrl/dqn_atari.py)")
    parser.add_argument("--script", choices=SCRIPTS, default=SCRIPTS[0],
                        help="which of CleanRL's DQNs: the torch one or the JAX one (flax and optax installed)")
    parser.add_argument("--work", type=Path, default=None, help="where runs write their logs and stores (default: a temp dir)")
    parser.add_argument("--games", nargs="+", choices=sorted(GAMES), default=["pong", "breakout"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-timesteps", type=int, default=20_000)
    parser.add_argument("--learning-starts", type=int, default=2_000)
    parser.add_argument("--buffer-size", type=int, default=20_000)
    parser.add_argument("--train-frequency", type=int, default=4)
    parser.add_argument("--target-network-frequency", type=int, default=1_000)
    parser.add_argument("--buffers", nargs="+", choices=BUFFERS, default=list(BUFFERS),
                        help="which runs to make (the comparison needs both)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each run (OMP_NUM_THREADS)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's record here")
    parser.add_argument("--kill-after", type=float, default=None, metavar="SECONDS",
                        help="SIGKILL each mmreplay run this long after its start, then count what its store kept")
    parser.add_argument("--child", nargs=4, metavar=("BUFFER", "STORE", "RECORD", "COUNTER"), help=argparse.SUPPRESS)
    parser.add_argument("script_args", nargs="*", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def script_arguments(args: argparse.Namespace, env_id: str) -> list[str]:
    """The command line CleanRL's script gets, the same for both runs of a game."""
    return [
        f"--env-id={env_id}",
        f"--seed={args.seed}",
        f"--total-timesteps={args.total_timesteps}",
        f"--learning-starts={args.learning_starts}",
        f"--buffer-size={args.buffer_size}",
        f"--train-frequency={args.train_frequency}",
        f"--target-network-frequency={args.target_network_frequency}",
    ]


# --- inside one run's process -------------------------------------------------------------------


def run_child(cleanrl: Path, buffer: str, store: Path, record_path: Path, counter: str, script_args: list[str],
              script_name: str = SCRIPTS[0]) -> int:
    """Run CleanRL's script in this process with ``buffer``; write what it logged to ``record_path``.

    With a ``counter`` path (not ``-``), each add also stores the number of adds so far in that file,
    through a shared map: the page cache keeps it when the process is killed."""
    import ale_py  # noqa: F401  (registers PongNoFrameskip-v4 and the others with gymnasium)
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter

    sys.path.insert(0, str(cleanrl))
    import cleanrl_utils.buffers

    scalars: list[tuple[str, int, float]] = []
    buffers: list[Any] = []
    record: dict[str, Any] = {"buffer": buffer, "scalars": scalars, "error": None}
    add_scalar = SummaryWriter.add_scalar

    def recording_add_scalar(writer: Any, tag: str, value: Any, global_step: Any = None, *rest: Any, **kw: Any) -> Any:
        # a 0-d float32 tensor converts exactly; an episode's return comes as a 1-element array, which
        # numpy 2 no longer converts with float() (SummaryWriter squeezes it first, as here)
        scalars.append((tag, int(global_step), float(np.asarray(value).squeeze())))
        return add_scalar(writer, tag, value, global_step, *rest, **kw)

    SummaryWriter.add_scalar = recording_add_scalar  # type: ignore[method-assign]
    shipped = cleanrl_utils.buffers.ReplayBuffer

    def replay_buffer(*buffer_args: Any, **buffer_kwargs: Any) -> Any:
        if buffer == "mmreplay":
            from mmreplay.sb3 import MmreplayBuffer

            made = MmreplayBuffer(*buffer_args, **buffer_kwargs, path=store)
        else:
            made = shipped(*buffer_args, **buffer_kwargs)
        buffers.append(made)
        if counter != "-":
            _count_adds(made, Path(counter))
        return made

    cleanrl_utils.buffers.ReplayBuffer = replay_buffer  # type: ignore[misc, assignment]
    script = cleanrl / "cleanrl" / script_name
    sys.argv = [str(script), *script_args]
    try:
        # The script's globals live until this function returns, just before the interpreter exits;
        # the buffer is never closed, only dropped with them, as at the end of a script.
        record["_globals"] = runpy.run_path(str(script), run_name="__main__")
    except BaseException as error:  # the record says how the run ended, whatever it was
        record["error"] = "".join(traceback.format_exception_only(type(error), error)).strip()
        traceback.print_exc()
    if buffers:
        record["transitions_added"] = _transitions_added(buffers[0])
        record["buffer_ram_bytes"] = _ram_bytes(buffers[0])
    record_path.write_text(json.dumps({k: v for k, v in record.items() if not k.startswith("_")}))
    return 1 if record["error"] else 0


def _count_adds(buffer: Any, path: Path) -> None:
    """Wrap the buffer's ``add`` (on the instance) to keep a count of calls in ``path``."""
    import numpy as np

    count = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(1,))
    add = buffer.add

    def counted_add(*args: Any, **kwargs: Any) -> None:
        add(*args, **kwargs)
        count[0] += 1

    buffer.add = counted_add


def _transitions_added(buffer: Any) -> int:
    store = getattr(buffer, "store", None)
    if store is not None:
        return int(store.transitions_added)
    return int(buffer.buffer_size * buffer.n_envs if buffer.full else buffer.pos * buffer.n_envs)


def _ram_bytes(buffer: Any) -> int:
    """The bytes of the buffer's own numpy arrays (0 for mmreplay's, whose frames are on disk)."""
    import numpy as np

    return sum(value.nbytes for value in vars(buffer).values() if isinstance(value, np.ndarray))


# --- in the driving process ---------------------------------------------------------------------


def run_one(args: argparse.Namespace, game: str, buffer: str, work: Path) -> dict[str, Any]:
    """One run in a fresh process (cwd: its own directory); its record with wall time, RSS, disk."""
    run_dir = work / game / buffer
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    store, record_path, counter = run_dir / "store.mmr", run_dir / "record.json", run_dir / "adds.npy"
    kill_after = args.kill_after if buffer == "mmreplay" else None
    command = [sys.executable, str(Path(__file__).resolve()), "--cleanrl", str(args.cleanrl.resolve()), "--script", args.script]
    command += ["--child", buffer, str(store), str(record_path), "-" if kill_after is None else str(counter)]
    command += ["--", *script_arguments(args, GAMES[game])]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    if args.threads == 1:  # XLA's CPU client too (the JAX script), on one thread
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    started = time.perf_counter()
    with open(run_dir / "output.log", "wb") as log:
        process = subprocess.Popen(command, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
        status, usage = wait_or_kill(process.pid, kill_after)
        process.returncode = os.waitstatus_to_exitcode(status)
    record: dict[str, Any] = {"buffer": buffer, "scalars": [], "error": f"exit status {process.returncode}, no record"}
    if record_path.exists():
        record = json.loads(record_path.read_text())
    if kill_after is not None and process.returncode == -signal.SIGKILL:
        import numpy as np

        record["error"] = f"SIGKILLed after {kill_after:g} s"
        record["transitions_added"] = int(np.load(counter)[0]) if counter.exists() else 0
    record.update(game=game, wall_s=time.perf_counter() - started, peak_rss_bytes=usage.ru_maxrss * 1024)
    record["log"] = str(run_dir / "output.log")
    if buffer == "mmreplay":
        record["disk_bytes"] = allocated_bytes(store)
        record["committed"] = committed_transitions(store)
    return record


def wait_or_kill(pid: int, kill_after: float | None) -> tuple[int, Any]:
    """The child's wait status and resource usage; SIGKILL it first if it runs ``kill_after`` seconds."""
    if kill_after is not None:
        deadline = time.monotonic() + kill_after
        while time.monotonic() < deadline:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, usage
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    return status, usage


def allocated_bytes(directory: Path) -> int:
    """Bytes the directory's files take on disk (allocated blocks: segment files are sparse)."""
    return sum(p.stat().st_blocks * 512 for p in directory.rglob("*") if p.is_file()) if directory.exists() else 0


def committed_transitions(store: Path) -> int | str:
    """Transitions a read-only open of the store finds committed, after the run's process ended."""
    from mmreplay import ReplayStore

    try:
        with ReplayStore.open(store, mode="r") as reader:
            return int(reader.transitions_added)
    except Exception as error:  # a store that was never created or cannot be opened is a finding too
        return f"cannot open: {type(error).__name__}: {error}"


def series(record: dict[str, Any], tag: str) -> list[tuple[int, float]]:
    return [(step, value) for t, step, value in record["scalars"] if t == tag]


def compare(shipped: dict[str, Any], ours: dict[str, Any]) -> tuple[bool, str]:
    """(identical, what differs first): every logged scalar but the timing ones, in logging order."""
    a = [s for s in shipped["scalars"] if s[0] not in TIMING_TAGS]
    b = [s for s in ours["scalars"] if s[0] not in TIMING_TAGS]
    for i, (x, y) in enumerate(zip(a, b)):
        if tuple(x) != tuple(y):
            return False, f"first divergence at logged value {i}: cleanrl {tuple(x)} vs mmreplay {tuple(y)}"
    if len(a) != len(b) or shipped["error"] or ours["error"]:
        return False, (
            f"cleanrl logged {len(a)} values, mmreplay {len(b)} (equal up to there); "
            f"cleanrl error: {shipped['error']}; mmreplay error: {ours['error']}"
        )
    return True, f"all {len(a)} logged values bit-identical"


def summary_row(record: dict[str, Any]) -> list[str]:
    returns = [v for _, v in series(record, "charts/episodic_return")]
    losses = [v for _, v in series(record, "losses/td_loss")]
    qs = [v for _, v in series(record, "losses/q_values")]
    ram, disk = record.get("buffer_ram_bytes", 0), record.get("disk_bytes")
    return [
        record["game"],
        record["buffer"],
        f"{record.get('transitions_added', '?'):,}" if isinstance(record.get("transitions_added"), int) else "?",
        f"{len(returns)} (sum {sum(returns):g})",
        f"{len(losses)} (last {losses[-1]:.6g})" if losses else "0",
        f"{len(qs)} (last {qs[-1]:.6g})" if qs else "0",
        f"{record['peak_rss_bytes'] / 2**20:,.0f}",
        f"{ram / 2**20:,.1f} RAM" if disk is None else f"{disk / 2**20:,.1f} disk",
        f"{record['wall_s']:.0f}",
        "-" if disk is None else f"{record['committed']:,}" if isinstance(record["committed"], int) else record["committed"],
        "ok" if not record["error"] else record["error"].splitlines()[-1][:80],
    ]


HEADER = ["game", "buffer", "transitions", "episodes (returns)", "td_loss", "q_values", "peak RSS MiB",
          "buffer MiB", "wall s", "committed", "ended"]


def print_table(rows: list[list[str]]) -> None:
    print("| " + " | ".join(HEADER) + " |")
    print("|" + "|".join("---" for _ in HEADER) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        buffer, store, record, counter = args.child
        return run_child(args.cleanrl.resolve(), buffer, Path(store), Path(record), counter, args.script_args, args.script)
    if not (args.cleanrl / "cleanrl" / args.script).is_file():
        raise SystemExit(f"--cleanrl {args.cleanrl}: expected a CleanRL checkout with cleanrl/{args.script}")
    work = args.work or Path(tempfile.mkdtemp(prefix="cleanrl-dqn-"))
    records, verdicts = [], []
    for game in args.games:
        pair = {}
        for buffer in args.buffers:
            print(f"{game}: running {buffer} ({' '.join(script_arguments(args, GAMES[game]))})", flush=True)
            pair[buffer] = run_one(args, game, buffer, work)
            records.append(pair[buffer])
        if len(pair) == len(BUFFERS):
            verdicts.append((game, *compare(pair["cleanrl"], pair["mmreplay"])))
    print_table([summary_row(r) for r in records])
    for game, identical, what in verdicts:
        print(f"{game}: {'IDENTICAL' if identical else 'DIVERGED'}: {what}")
    if args.json:
        args.json.write_text(json.dumps({"args": sys.argv[1:], "records": records}, indent=1))
    print(f"logs and stores: {work}")
    failed = any(record["error"] for record in records)
    return 0 if all(identical for _, identical, _ in verdicts) and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
