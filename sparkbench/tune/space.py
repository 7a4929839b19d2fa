"""A tune's question, as the user writes it in ``SPACE.yml``: the base variant, the objective, the
budget and the space of flag values to search.

    base: nvidia-mtp2                  # a variant of the matrix (bench_builds × bench_configs, extras)
    objective: single                  # single | {parallel: N} | {goodput: {rate, slo}} | a list of two
    budget: {trials: 4, minutes: 30}   # points measured in this tune; minutes bound the race
    space:
      speculative-config.num_speculative_tokens: [1, 2, 3]
      max-num-batched-tokens: [2048, 4096, 8192]
      env.VLLM_ATTENTION_BACKEND: [FLASH_ATTN, TRITON_ATTN]

A key is a vLLM flag without its dashes, a key inside a flag's JSON value (dotted: the flag, then
the key), or ``env.NAME``. Every problem is an :class:`~sparkbench.errors.InputError` naming the
field and the fix, raised before anything starts (``sparkbench tune`` exits 4).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InputError

#: a value one point gives a key
PointValue = Union[bool, int, float, str, None]
#: an environment variable's name as a space key takes it (``env.NAME``)
ENV_PREFIX = "env."
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY = re.compile(r"^[a-z0-9][a-z0-9-]*(\.[A-Za-z0-9_-]+)*$")


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Parallel(_Closed):
    """The combined decode rate with ``parallel`` streams at once."""

    parallel: Annotated[int, Field(ge=2, le=64)]


class Slo(_Closed):
    """The limits a request must meet to count toward goodput [s]."""

    ttft_s: Annotated[float, Field(gt=0)] | None = None
    tpot_s: Annotated[float, Field(gt=0)] | None = None
    e2e_s: Annotated[float, Field(gt=0)] | None = None


class GoodputAt(_Closed):
    """Requests per second offered, and the SLO a request must meet."""

    rate: Annotated[float, Field(gt=0)]
    slo: Slo


class Goodput(_Closed):
    """Goodput (requests per second that met the SLO) at one arrival rate."""

    goodput: GoodputAt


Objective = Union[Literal["single"], Parallel, Goodput]


class Budget(_Closed):
    """How much the tune may measure: ``trials`` points (the base among them when it is a point of the
    space), and at most ``minutes`` of racing the two leaders."""

    trials: Annotated[int, Field(ge=1, le=200)]
    minutes: Annotated[float, Field(gt=0)] | None = None


class TuneSpace(_Closed):
    """``SPACE.yml`` as a model."""

    base: Annotated[str, Field(pattern=r"^[a-z0-9._-]+$")]
    objective: Union[Objective, Annotated[list[Objective], Field(min_length=2, max_length=2)]]
    budget: Budget
    space: dict[str, list[PointValue]]

    @property
    def objectives(self) -> list[Objective]:
        """The objectives in order (one, or two for a Pareto front)."""
        return list(self.objective) if isinstance(self.objective, list) else [self.objective]

    @property
    def keys(self) -> list[str]:
        """The space's keys in the order written."""
        return list(self.space)


def objective_name(objective: Objective) -> str:
    """``single``, ``parallel@8``, ``goodput@2rps``: the objective's name in tables and tune.json."""
    if isinstance(objective, Parallel):
        return f"parallel@{objective.parallel}"
    if isinstance(objective, Goodput):
        return f"goodput@{objective.goodput.rate:g}rps"
    return "single"


OBJECTIVE_FORMS = ("single, {parallel: N} (N from 2 to 64), {goodput: {rate: R, slo: {ttft_s, tpot_s, e2e_s}}}, "
                   "or a list of two of these (a Pareto front)")


def _pydantic_problems(exc: ValidationError, data: dict) -> list[str]:
    out = []
    for err in exc.errors(include_url=False):
        if err["loc"] and err["loc"][0] == "objective":
            line = f"objective: {data.get('objective')!r} is not an objective; write {OBJECTIVE_FORMS}"
        else:
            line = f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
        if line not in out:
            out.append(line)
    return out


def _key_problems(space: dict[str, list[PointValue]]) -> list[str]:
    out = []
    if not space:
        out.append("space: empty; list at least one flag with two or more values, e.g. "
                   "'max-num-batched-tokens: [4096, 8192]'")
    for key, values in space.items():
        if key.startswith(ENV_PREFIX):
            if not _ENV_NAME.match(key[len(ENV_PREFIX):]):
                out.append(f"space.{key}: not an environment variable's name after 'env.'")
        elif not _KEY.match(key):
            out.append(f"space.{key}: a key is a vLLM flag without dashes (max-num-seqs), a key inside its "
                       f"JSON value (speculative-config.num_speculative_tokens) or env.NAME")
        if not values:
            out.append(f"space.{key}: no values; list the values to try")
        elif len({repr(v) for v in values}) != len(values):
            out.append(f"space.{key}: a value is listed twice")
    return out


def parse_space(data: object, source: str = "SPACE.yml") -> TuneSpace:
    """``data`` (a parsed SPACE.yml) as a :class:`TuneSpace`; else InputError naming every wrong field."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: a tune space is a mapping with base, objective, budget and space")
    problems = []
    try:
        space = TuneSpace.model_validate(data)
    except ValidationError as exc:
        problems = _pydantic_problems(exc, data)
        space = None
    raw_space = data.get("space")
    if isinstance(raw_space, dict):
        problems += _key_problems(raw_space)
    if problems:
        raise InputError(f"{source}: " + "; ".join(problems))
    assert space is not None
    return space


def load_space(path: str | Path) -> TuneSpace:
    """The tune space in ``path`` (YAML); InputError when it cannot be read or is wrong."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{p}: cannot read the tune space ({exc.strerror or exc}); pass the path of a SPACE.yml")
    except yaml.YAMLError as exc:
        raise InputError(f"{p}: not YAML ({exc})")
    return parse_space(data, str(p))
