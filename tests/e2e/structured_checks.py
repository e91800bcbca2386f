"""The check both engine test files apply to their structured-output answers:
the JSON schema ``{"a": bool, "b": "x" | "yy" | "zzz"}`` and the regex
``[0-9]{3}-[a-z]{2}`` that their requests ask for."""

from __future__ import annotations

import json
import re


def assert_structured_outputs(texts: dict[str, list[tuple[str, str]]]) -> None:
    """Every (text, finish reason) finished on its own and matches its request
    (keys starting with ``json`` asked for the schema, the others the regex)."""
    for key, outputs in texts.items():
        for text, finish in outputs:
            assert finish == "stop", (key, text, finish)
            if key.startswith("json"):
                value = json.loads(text)
                assert set(value) == {"a", "b"} and isinstance(value["a"], bool)
                assert value["b"] in ("x", "yy", "zzz")
            else:
                assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", text), (key, text)
