"""User fields on the acting side: a writer's ``add(..., fields=)`` checked against the replay's fields and
buffered per env, then sent with the steps (``Send.fields``) for the shard's ``add_encoded(..., fields=)``.

The replay's fields are what ``ShardedReplay.create(fields=...)`` recorded: (name, shape, dtype string)
triples, as ``mmreplay.validation.parse_field_specs`` gives them. The shard's store checks every value again
by ``add``'s rules; the writer checks names, shapes and dtype kinds first, so that a wrong call fails in the
acting process, before anything of it is kept, and not later in the shard.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FieldSpecs = tuple[tuple[str, tuple[int, ...], str], ...]


def parse_writer_fields(value: object, specs: FieldSpecs, num_envs: int) -> list[dict[str, npt.NDArray[Any]]] | None:
    """A writer's ``fields`` for one step of ``num_envs`` envs, as each env's values.

    Args:
        value: a dict of name -> array, each shaped as the field (``num_envs == 1``) or with a leading env
            axis (``(num_envs, *shape)``); None for a replay without fields.
        specs: the replay's fields.
        num_envs: the writer's envs.

    Returns:
        One dict per env of its values, each of the field's dtype; None when the replay has no fields.

    Raises:
        TypeError: ``value`` is not a dict, or a value's dtype cannot be cast to its field's.
        ValueError: ``value`` does not name exactly the replay's fields, or a value's shape is not its
            field's.
    """
    names = [name for name, _, _ in specs]
    if value is None:
        if specs:
            raise ValueError(f"fields is missing; this replay's adds take fields {names}")
        return None
    if not isinstance(value, dict):
        raise TypeError(f"fields must be a dict of name -> array; got {type(value).__name__}")
    if sorted(value) != sorted(names):
        missing = [name for name in names if name not in value]
        extra = [name for name in value if name not in names]
        raise ValueError(f"fields has keys {list(value)}; expected {names} (missing {missing}, unknown {extra})")
    env_axis = () if num_envs == 1 else (num_envs,)
    arrays = {}
    for name, shape, dtype_text in specs:
        dtype = np.dtype(dtype_text)
        array = np.asarray(value[name])
        if array.shape != env_axis + shape:
            raise ValueError(f"fields[{name!r}] has shape {array.shape}; expected {env_axis + shape} for shape "
                             f"{shape} and {num_envs} env{'s' if num_envs > 1 else ''}")
        kind_ok = array.dtype.kind in "biuf" and (
            array.dtype.kind == "b" if dtype.kind == "b" else np.can_cast(array.dtype, dtype, casting="same_kind"))
        if not kind_ok:
            raise TypeError(f"fields[{name!r}] has dtype {array.dtype}; expected values castable to {dtype}")
        arrays[name] = array.reshape(num_envs, *shape)
    # Copies: the caller may reuse its arrays before the send, as it may its observations.
    return [{name: np.array(array[env]) for name, array in arrays.items()} for env in range(num_envs)]


def stack_fields(steps: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    """The fields of a send's steps, each (T, *shape), from each step's values.

    Args:
        steps: each step's values by name, as ``parse_writer_fields`` gave one env's.

    Returns:
        Each field's values stacked along a leading step axis.
    """
    return {name: np.stack([step[name] for step in steps]) for name in steps[0]}
