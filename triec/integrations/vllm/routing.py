"""Which vLLM requests triec serves: the frontend's decision for one request (:func:`claims`), before any engine.

vLLM's frontend checks a structured-outputs request with xgrammar's ``validate_xgrammar_grammar``;
:mod:`.patches` replaces it with one that asks :func:`claims` first. A constraint triec serves (``choice`` lists,
literal-alternation ``regex``, ``json`` string enums, artifacts by name, vLLM's ``tool_choice="required"`` schema
and tool-call structural tags) is admitted here, or refused with one line (:class:`RequestRefused`, HTTP 400: a
list over the limits, a bad artifact name); anything else keeps xgrammar's check. :func:`plan_json` says what
happens to a ``json`` constraint; the engine side (:func:`.backend.triec_grammar`) must agree with it
(``tests/test_vllm_backend_core.py``). Under ``disable_any_whitespace`` JSON beyond string enums is xgrammar's
(:func:`compact_ok`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from triec.errors import RequestError, TriecError
from triec.integrations.constraints import ARTIFACT_KEYWORD, Constraints, literal_alternation, string_enum
from triec.integrations.limits import Limits
from triec.integrations.serving import STOPS_HINT, ServedModel, known_server, store
from triec.integrations.vllm import internals
from triec.integrations.vllm.structured import tagged_tools
from triec.schema.tags import is_legacy, parse_structural_tag
from triec.schema.tools import parse_tools, tools_from_required_schema

if TYPE_CHECKING:  # vLLM's class, read from the installed vLLM by internals: Any to a type checker
    VLLMClientError = Any
else:
    VLLMClientError = internals.client_error()

COMPACT_ENV = "TRIEC_VLLM_COMPACT_JSON"
"""``1``: serve JSON objects and tool calls in triec's compact spelling (``", "``, ``": "``) where vLLM allows any
whitespace (its default): a narrowing, every output still valid per the schema. Off by default (exact only)."""


class RequestRefused(VLLMClientError, RequestError):
    """A constraint triec would serve but refuses (over the limits, a bad artifact): HTTP 400, one line.

    A ``VLLMClientError`` that is *not* a ``VLLMValidationError``: with backend
    ``auto``, vLLM catches ``VLLMValidationError`` from the xgrammar check and
    retries the request with guidance (sampling_params.py, ``_validate_structured_outputs``),
    which would serve what the limits refuse; this passes through and the server
    answers 400 (``VLLMClientError``, entrypoints/serve/exception_handling).
    """


def compact_ok(any_whitespace: bool) -> bool:
    """Whether triec's JSON spelling is one vLLM's xgrammar backend allows: with any whitespace and the opt-in only.

    With ``disable_any_whitespace`` vLLM spells JSON ``","`` and ``":"`` (xgrammar
    separators), triec ``", "`` and ``": "``: different languages, so delegated.
    """
    return any_whitespace and os.environ.get(COMPACT_ENV, "") == "1"


def plan_json(doc: Any, any_whitespace: bool) -> str | None:
    """What the frontend does with a ``json`` constraint: ``"artifact"``, ``"enum"``, ``"object"``, ``"tools"``
    (triec admits it), or None (xgrammar's own check admits it; the engine may still serve it through the schema
    layer, e.g. a schema with large enums anywhere, or delegate).

    ``tests/test_vllm_backend_core.py`` checks the frontend and the engine agree on the shapes admitted here.
    """
    if isinstance(doc, dict) and ARTIFACT_KEYWORD in doc:
        return "artifact"
    if string_enum(doc) is not None:
        return "enum"
    from triec.compiler.json_schema import is_object_schema, parse_schema

    if is_object_schema(doc) and compact_ok(any_whitespace):
        try:
            parse_schema(doc)
            return "object"
        except TriecError:
            pass
    if any_whitespace and tools_from_required_schema(doc) is not None:
        return "tools"  # exact with any whitespace (xgrammar's argument grammars), triec's spelling with the opt-in
    return None


def _utf8(values: list[str]) -> bool:
    try:
        for v in values:
            v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _claim_values(values: Any, kind: str, limits: Limits) -> bool:
    """A list triec will compile: RequestRefused for bad input, False where xgrammar must serve it."""
    if not isinstance(values, list) or not values:
        raise RequestRefused(f"{kind} must be a non-empty list of strings")
    bad = next((v for v in values if not isinstance(v, str)), None)
    if bad is not None:
        raise RequestRefused(f"{kind} values must be strings, not {type(bad).__name__} {bad!r:.60}")
    try:
        limits.check(values, kind)
    except RequestError as exc:
        raise RequestRefused(str(exc)) from None
    return _utf8(values)  # lone surrogates: no UTF-8 text for triec; xgrammar decides, as without triec


_FRONTEND: dict[tuple[Any, ...], Constraints] = {}


_FRONTEND_LOCK = threading.Lock()


def _frontend_constraints(served: ServedModel) -> Constraints:
    """The frontend's Constraints for a served model: artifacts admitted against it (by the serving core)."""
    key = (served.tokenizer, served.vocab_size, served.eos_token_id, served.generation_eos_ids)
    with _FRONTEND_LOCK:
        found = _FRONTEND.get(key)
        if found is None:
            found = _FRONTEND[key] = Constraints(
                served.vocabulary(),
                tokenizer=served.tokenizer,
                served=served,
                fix_stops=STOPS_HINT,
                artifact_store=store,
            )
        return found


def claims(
    structured_outputs: Any,
    served: ServedModel | None = None,
    any_whitespace: bool = True,
    stops: Iterable[int] | None = None,
) -> bool:
    """The frontend decision for one request: True when triec serves it (admitted here), False to delegate.

    Raises :class:`RequestRefused` for a constraint triec would serve but
    cannot (the request gets HTTP 400 and the engine never sees it). An
    artifact by name is admitted by the serving core for ``served`` and the
    request's stop ids ``stops``, as the processors admit theirs.
    """
    so = structured_outputs
    limits = Limits.from_env()
    if so.choice is not None:
        return _claim_values(so.choice, "structured_outputs.choice", limits)
    if so.regex is not None:
        values = literal_alternation(so.regex)
        return values is not None and _claim_values(values, "structured_outputs.regex", limits)
    if so.json is not None:
        doc = so.json
        if isinstance(doc, str):
            try:
                doc = json.loads(doc)
            except (ValueError, RecursionError):
                return False  # xgrammar reports it as it always does
        plan = plan_json(doc, any_whitespace)
        if plan == "enum":
            return _claim_values(string_enum(doc), "structured_outputs.json enum", limits)
        if plan == "artifact":
            try:
                _frontend_constraints(known_server(served)).json_schema(doc, stops=stops)
            except RequestError as exc:
                raise RequestRefused(str(exc)) from None
            except Exception as exc:  # noqa: BLE001  the served tokenizer: decoded here for the artifact checks
                raise RequestRefused(f"triec cannot read the served tokenizer: {type(exc).__name__}: {exc}") from None
            return True
        if plan == "tools":
            registry = tools_from_required_schema(doc)
            assert registry is not None
            _claim_tools([{"name": t.name, "parameters": t.parameters} for t in registry[0]])
            return True
        if plan == "object":
            from triec.compiler.json_schema import parse_schema

            return _claim_values(parse_schema(doc)[0], "structured_outputs.json enum", limits)
        return False
    if so.structural_tag is not None:
        return _claim_tag(so.structural_tag)
    return False


def legacy_with_at_least_one(doc: Any) -> bool:
    """A legacy ``{"structures", "triggers"}`` tag that says ``at_least_one``: vLLM compiles it without (xgrammar's
    legacy call takes none), SGLang with; the schema layer reads SGLang's meaning, so vLLM's stays xgrammar's."""
    return is_legacy(doc) and "at_least_one" in doc


def _claim_tag(tag: Any) -> bool:
    """A structural tag the schema layer serves (tool calls whose begins carry the names, e.g. vLLM's strict
    hermes tags, any number of calls): its own reading of the tag and of every tool's arguments schema."""
    try:
        doc = json.loads(tag) if isinstance(tag, str) else tag
    except (ValueError, RecursionError):
        return False
    if legacy_with_at_least_one(doc):
        return False
    try:
        parse_structural_tag(doc)
    except TriecError:
        return False  # a shape triec does not serve: xgrammar's check and engine, unchanged
    calls = tagged_tools(doc)
    if calls is not None:
        _claim_tools(calls.tools)
    return True


def _claim_tools(tools: list[dict[str, Any]]) -> None:
    """A registry the schema layer will compile: its own reading of every entry (RequestRefused names the bad one)."""
    try:
        parse_tools(tools, "tools", "xgrammar")
    except TriecError as exc:
        raise RequestRefused(str(exc)) from None


__all__ = ["COMPACT_ENV", "RequestRefused", "claims", "compact_ok", "legacy_with_at_least_one", "plan_json"]
