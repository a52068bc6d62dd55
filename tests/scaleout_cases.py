"""The requests of the scale-out tests (tests/test_vllm_scaleout.py): artifacts, prompts, and their checks."""

from __future__ import annotations

import json
from pathlib import Path

COLORS = ["red", "green", "blue", "re", "redder"]
ANIMALS = ["cat", "caterpillar", "dog", "dolphin"]
TOOLS = ["get_weather", "send_alert", "search"]
TOOL_CALL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "enum": TOOLS},
        "arguments": {
            "type": "object",
            "properties": {"urgent": {"type": "boolean"}},
            "required": ["urgent"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}


def make_artifacts(root: Path) -> tuple[Path, Path, list[str]]:
    """(model dir, artifact dir, tool names): the tiny Llama and its artifacts, written once under ``root``."""
    import triec
    import triec.synthetic.sets
    from benchmarks.tiny_llama import make_tiny_llama

    model = make_tiny_llama(root / "model")
    art = root / "artifacts"
    names = list(triec.synthetic.sets.tool_names(200))
    if not (art / "toolcall.triec").is_file():
        art.mkdir(parents=True, exist_ok=True)
        vocab = triec.Vocabulary.load(model)
        triec.compile(COLORS, vocab).save(art / "colors.triec")
        triec.compile(names, vocab).save(art / "tools.triec")
        triec.compile_schema(TOOL_CALL, vocab).save(art / "toolcall.triec")
    return model, art, names


def requests() -> list[dict]:
    """Completions requests (prompt, max_tokens, xargs or structured_outputs, what a valid output is)."""
    import triec.synthetic.sets

    names = list(triec.synthetic.sets.tool_names(200))
    return [
        {"prompt": "Pick a color:", "max_tokens": 8, "xargs": {"triec": "colors"}, "values": COLORS},
        {"prompt": "Pick a tool:", "max_tokens": 24, "xargs": {"triec": "tools"}, "values": names},
        {
            "prompt": "Narrowed:",
            "max_tokens": 24,
            "xargs": {"triec": "tools", "restrict": names[3:7]},
            "values": names[3:7],
        },
        {"prompt": "Call:", "max_tokens": 40, "xargs": {"triec": "toolcall"}, "schema": TOOL_CALL},
        {"prompt": "Animal:", "max_tokens": 8, "structured_outputs": {"choice": ANIMALS}, "values": ANIMALS},
        {
            "prompt": "Color by name:",
            "max_tokens": 8,
            "structured_outputs": {"json": {"x-triec-artifact": "colors"}},
            "values": COLORS,
        },
    ]


def check(req: dict, text: str, finish: str) -> str | None:
    """Why ``text`` is not a valid output of ``req``, or None."""
    if finish != "stop":
        return f"finish {finish}"
    if "values" in req:
        return None if text in req["values"] else f"{text!r} is not a value"
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), req["schema"])
    except (ValueError, jsonschema.ValidationError) as exc:
        return f"{text!r}: {type(exc).__name__}"
    return None
