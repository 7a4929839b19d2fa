"""What every model of the result document shares: the two kinds of block and the scalar types.

A block is strict as JSON Schema is: a number is an int or a float (never a bool or a string), an
integer is an int or an integral float (``3.0``, as ``jsonschema`` counts it), a string is a str,
a list is a list; nothing is coerced. ``Block`` lets unknown keys through (the schema's objects
without ``additionalProperties: false``); ``Closed`` refuses them.

How a field says what the schema says of its key:

* ``x: T`` (no default): required, never null; ``x: Optional[T]``: required, may be null;
* ``x: T = None``: may be absent, never null (the default only stands for "absent");
* ``x: Optional[T] = None``: may be absent or null.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WrapValidator

try:  # Python 3.12+
    from typing import TypeAliasType  # type: ignore[attr-defined]
except ImportError:  # Python 3.10, 3.11: from typing_extensions, which pydantic itself depends on
    from typing_extensions import TypeAliasType

__all__ = ["Above0", "Block", "Closed", "Count", "DecodeSource", "Fraction", "Int", "NonNegative", "Positive", "Rate",
           "Seconds", "Share", "Timestamp", "bounded"]

_STRICT = ConfigDict(strict=True, regex_engine="python-re", protected_namespaces=())


class Block(BaseModel):
    # An object of the result document that lets unknown keys through (the schema's default).
    model_config = ConfigDict(extra="allow", **_STRICT)


class Closed(BaseModel):
    # An object of the result document that refuses unknown keys (additionalProperties: false).
    model_config = ConfigDict(extra="forbid", **_STRICT)


def _integral(value: Any) -> Any:
    """JSON Schema's integer: ``3.0`` is one (``jsonschema`` agrees), pydantic's strict int is not."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: an integer (JSON Schema's: an int, or a float without a fraction)
Int = Annotated[int, BeforeValidator(_integral)]
#: an integer >= 0 / >= 1 (the bound inside the validator: pydantic writes it to the schema as minimum)
Count = Annotated[int, Field(ge=0), BeforeValidator(_integral)]
Positive = Annotated[int, Field(ge=1), BeforeValidator(_integral)]


def _nan_passes(value: Any, handler: Any) -> Any:
    """JSON Schema's bounds let NaN through (every comparison with it is false), and so does the model."""
    if isinstance(value, float) and value != value:
        return value
    return handler(value)


def bounded(**bounds: float) -> Any:
    """A number (an int or a float) within ``bounds`` (``ge``, ``gt``, ``le``: minimum,
    exclusiveMinimum, maximum)."""
    return Annotated[float, Field(**bounds), WrapValidator(_nan_passes)]


#: a number >= 0 / > 0 / in [0, 1]
NonNegative = bounded(ge=0)
Above0 = bounded(gt=0)
Share = bounded(ge=0, le=1)

#: how a request's decode rate was obtained (``null``: no figure, where the key allows it)
DecodeSource = Literal["usage", "timings_per_token", "chunk_count", "server_timings", "server_metrics",
                       "chunk_count_bounded"]

# The named scalars: each one of the schema's $defs, under its own name.
Timestamp = TypeAliasType(
    "timestamp", Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")])
Rate = TypeAliasType("rate", Annotated[Optional[NonNegative], Field(description="tokens per second")])
Seconds = TypeAliasType("seconds", Optional[NonNegative])
Fraction = TypeAliasType("fraction", Optional[Share])
