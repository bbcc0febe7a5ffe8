"""Numpy statements as text that compile to one function: what the derivation prints and
the compiled program runs (`models.derivation`, `models.compiled`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Statement = tuple[str, str, tuple[str, ...]]  # target, numpy expression, temporaries it uses
Output = tuple[str, tuple[str, ...]]  # numpy expression, temporaries it uses


@dataclass(frozen=True)
class Code:
    """Numpy statements computing named outputs from `arguments`, in dependency order."""

    arguments: tuple[str, ...]
    statements: tuple[Statement, ...]
    outputs: dict[str, Output]

    def to_json(self) -> dict[str, Any]:
        outputs = {name: [text, list(uses)] for name, (text, uses) in self.outputs.items()}
        return {"arguments": list(self.arguments),
                "statements": [[t, text, list(uses)] for t, text, uses in self.statements],
                "outputs": outputs}

    @classmethod
    def from_json(cls, data: Any) -> Code:
        """Rebuild from `to_json`, checking every part's type (a cache file is untrusted)."""
        def names(value: Any) -> tuple[str, ...]:
            if not isinstance(value, list) or not all(
                isinstance(v, str) and _IDENTIFIER.fullmatch(v) for v in value
            ):
                raise ValueError("expected a list of identifiers")
            return tuple(value)

        def text(value: Any) -> str:
            if not isinstance(value, str) or "\n" in value:
                raise ValueError("expected an expression")
            return value

        statements = tuple((names([t])[0], text(e), names(u)) for t, e, u in data["statements"])
        outputs = {name: (text(e), names(u)) for name, (e, u) in data["outputs"].items()}
        return cls(names(data["arguments"]), statements, outputs)

    def function(self, names: tuple[str, ...]) -> Callable[..., tuple[Any, ...]]:
        """A numpy function returning the outputs `names`, with only the statements they need."""
        needed = {use for name in names for use in self.outputs[name][1]}
        for target, _, uses in reversed(self.statements):
            if target in needed:
                needed.update(uses)
        lines = [f"def compiled({', '.join(self.arguments)}):"]
        lines += [f"    {t} = {text}" for t, text, _ in self.statements if t in needed]
        lines.append(f"    return ({''.join(self.outputs[name][0] + ', ' for name in names)})")
        namespace: dict[str, Any] = {"numpy": np}
        exec(compile("\n".join(lines), f"<lambdadnn model {','.join(names)}>", "exec"), namespace)
        function: Callable[..., tuple[Any, ...]] = namespace["compiled"]
        return function
