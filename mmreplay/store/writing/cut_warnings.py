"""The warning an add gets when its obs does not continue its env's open episode, said once per env of an
opened store: a training loop that forgot a flag, or changed an obs after the store saw it as next_obs,
learns it at the first such add."""

from __future__ import annotations

import warnings

from mmreplay.errors import EpisodeCutWarning
from mmreplay.store.writing.add_plans import AddPlan


class CutWarnings:
    """The envs a cut was said for, and the warning for the next."""

    def __init__(self) -> None:
        self.warned: set[int] = set()

    def warn(self, plan: AddPlan, first_step: int) -> None:
        """Say once per env that a written add (``plan``, from ``first_step`` on) started a new episode
        because its obs did not continue the env's open one."""
        for row in plan.cuts:
            env = plan.envs[row]
            if env in self.warned:
                continue
            self.warned.add(env)
            step = first_step + row
            warnings.warn(
                f"env {env}'s obs at step {step} does not continue its episode (it differs from the env's "
                "previous next_obs, and that transition neither terminated nor truncated): a new episode "
                f"starts at step {step}, and the one before it is listed as ended_by='cut'. Pass terminated "
                "or truncated on an episode's last transition (this is said once per env of an opened store)",
                EpisodeCutWarning, stacklevel=5,  # the caller of ReplayStore.add
            )
