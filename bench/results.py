"""How a benchmark script hands its results to the runner: one line of JSON
after a mark (``--json``), read back by ``json_results``; without ``--json``
one readable line per result."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

JSON_MARK = "BENCHJSON "


def print_results(results: dict[str, Any], as_json: bool, line: Callable[[str, Any], str]) -> None:
    if as_json:
        print(JSON_MARK + json.dumps(results))
    else:
        for k, v in results.items():
            print(line(k, v))


def json_results(out: str) -> dict[str, Any] | None:
    """The results a script printed on its JSON line, or None (it failed)."""
    line = next((x for x in out.splitlines() if x.startswith(JSON_MARK)), None)
    return None if line is None else json.loads(line[len(JSON_MARK) :])
