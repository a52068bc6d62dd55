"""triec.integrations.constraints: which constraints triec serves, what it compiles for them, and what it refuses.

The regex parser is checked against Python's ``re`` (every parse it accepts
must full-match exactly its literals, on hand-written and random patterns) and,
with the engines, against xgrammar's ``compile_regex`` mask for mask (the engine
a delegated regex goes to). Artifacts by name reuse the vLLM processors' store,
so the same safety checks are exercised here with real artifacts on disk.
"""

from __future__ import annotations

import json
import os
import random
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import triec
import triec.synthetic.sets
from triec.errors import RequestError, ValuesError
from triec.integrations import serving
from triec.integrations.constraints import (
    ARTIFACT_KEYWORD,
    RESTRICT_KEYWORD,
    Constraints,
    Delegate,
    TableGrammar,
    content_key,
    literal_alternation,
    string_enum,
)
from triec.integrations.limits import Limits
from triec.runtime.bitmask import ids_of as row_ids

V = 151_936
COLORS = ["red", "green", "blue", "re", "gre", 'say "hi"', "naïve", "日本"]


@pytest.fixture(scope="module")
def served() -> triec.Vocabulary:
    return triec.Vocabulary.load("qwen2", vocab_size=V, eos_token_ids=[151643, 151645])


def rows_of(table: triec.MaskTable | TableGrammar, states: list[int] | None = None) -> np.ndarray:
    table = table.table if isinstance(table, TableGrammar) else table
    states = list(range(table.num_states)) if states is None else states
    out = np.zeros((len(states), table.words_per_row), dtype=np.int32)
    table.fill_bitmask(states, out)
    return out


# ----------------------------------------------------------------------------- the regex parser

ACCEPTED = {
    "(foo|bar)": ["foo", "bar"],
    "(?:foo|bar)": ["foo", "bar"],
    "foo|bar": ["foo", "bar"],
    "^(a|b)$": ["a", "b"],
    "^(?:a|b)$": ["a", "b"],
    "^a|b$": ["a", "b"],
    "(a|)": ["a", ""],
    "(|a||b)": ["", "a", "", "b"],
    "()": [""],
    "(?:)": [""],
    "": [""],
    "^$": [""],
    "^": [""],
    "$": [""],
    "single": ["single"],
    r"a\.b|c\|d|e\\f": ["a.b", "c|d", "e\\f"],
    r"\(x\)\[y\]\{z\}\*\+\?\^\$": ["(x)[y]{z}*+?^$"],
    r"\u00e9|\u65E5\u672c|\U0001F600": ["é", "日本", "😀"],
    r"\x41\x7f|\x41g": ["A\x7f", "Ag"],
    r"\n\r\t\f\v\a": ["\n\r\t\f\v\a"],
    "\\\t\\\n\\ \\-\\#\\~\\&": ["\t\n -#~&"],
    r"\_\é\/\"\'\,\:\;\<\>\=\!\@\%\`": ["_é/\"',:;<>=!@%`"],
    "a b-c,d:e/f\"g'h#i~j&k!l@m%n=o<p>q;r`s": ["a b-c,d:e/f\"g'h#i~j&k!l@m%n=o<p>q;r`s"],
    "naïve|日本|😀|\u2028|\x01": ["naïve", "日本", "😀", "\u2028", "\x01"],
}

DELEGATED = [
    "(foo|bar)+",
    "foo|bar*",
    "colou?r",
    "a.b",
    "[ab]",
    "[a-z]+",
    "a{2}",
    "a{",
    "a}",
    "a]",
    r"\d+",
    r"\w",
    r"\s",
    r"\b",
    r"\B",
    r"\A",
    r"\Z",
    r"\0",
    r"\1",
    r"\N{LATIN SMALL LETTER A}",
    r"\e",
    r"\cA",
    r"\k",
    r"\x41B",
    r"\x4",
    r"\u12",
    r"\ud800",
    r"\U00110000",
    "\\",
    "a\\",
    "(a)|(b)",
    "((a|b))",
    "(a)(b)",
    "(a|b",
    "a|b)",
    "(?i)a",
    "(?P<n>a|b)",
    "(?=a)a",
    "(?<n>a)",
    "a^b",
    "a$b",
    "^^a",
    "a$$",
    "(^a|b)",
    "(a|b$)",
    "x(a|b)",
    "(a|b)x",
    "a|(b)",
    "\ud800",
]


@pytest.mark.parametrize("pattern", sorted(ACCEPTED))
def test_literal_alternations_parse_to_their_literals(pattern: str) -> None:
    values = ACCEPTED[pattern]
    assert literal_alternation(pattern) == values
    try:
        compiled = re.compile(pattern)
    except re.error:
        pytest.fail(f"{pattern!r} is accepted but is no Python regex")
    for v in values:
        assert compiled.fullmatch(v), (pattern, v)
    for s in {v + "x" for v in values} | {v[:-1] for v in values if v} | {"x", pattern}:
        assert (compiled.fullmatch(s) is not None) == (s in values), (pattern, s)


@pytest.mark.parametrize("pattern", DELEGATED)
def test_anything_with_a_real_metacharacter_is_delegated(pattern: str) -> None:
    assert literal_alternation(pattern) is None


def _spell(value: str, rng: random.Random) -> str:
    """``value`` as a regex literal, each character in one of the spellings users and re.escape write."""
    out = []
    for i, ch in enumerate(value):
        nxt = value[i + 1] if i + 1 < len(value) else ""
        o = ord(ch)
        ways = [re.escape(ch), f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}", f"\\U{o:08X}"]
        if o <= 0xFF and nxt not in "0123456789abcdefABCDEF":
            ways.append(f"\\x{o:02x}")
        if not ch.isascii() or not ch.isalnum():
            ways.append("\\" + ch)  # a backslash before any non-alphanumeric character is that character
        if ch in "\n\r\t\f\v\a":
            ways.append("\\" + {"\n": "n", "\r": "r", "\t": "t", "\f": "f", "\v": "v", "\a": "a"}[ch])
        if ch not in "\\()|^$.*+?[]{}":
            ways.append(ch)
        out.append(rng.choice(ways))
    return "".join(out)


ALPHABET = "ab" + "A0_-.,:;/\\|()[]{}^$*+?#~&!@%=<>'\"` \t\n\r\x0b\x0c\x07\x01\x7fé日😀"
WRAPPERS = ["{}", "({})", "(?:{})", "^{}$", "^({})$", "^(?:{})$", "^{}", "{}$"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet=ALPHABET, max_size=8), min_size=1, max_size=8), st.integers(0, 2**32))
def test_random_alternations_round_trip_and_match_python_re(values: list[str], seed: int) -> None:
    rng = random.Random(seed)
    body = "|".join(_spell(v, rng) for v in values)
    pattern = rng.choice(WRAPPERS).format(body)
    assert literal_alternation(pattern) == values, pattern
    compiled = re.compile(pattern)
    probes = (
        set(values) | {v + c for v in values for c in "a|\n"} | {v[1:] for v in values} | {"".join(values), pattern}
    )
    for s in probes:
        assert (compiled.fullmatch(s) is not None) == (s in values), (pattern, s)


PIECES = [
    "a",
    "b",
    "é",
    "|",
    "(",
    ")",
    "(?:",
    "(?",
    "^",
    "$",
    "\\",
    "\\\\",
    "\\x41",
    "\\x4",
    "\\u0041",
    "\\d",
    "\\.",
    "\\n",
    "\\0",
    "?",
    "*",
    "+",
    ".",
    "[",
    "]",
    "{",
    "}",
    ":",
    "P",
    "<",
    ">",
    "1",
    " ",
]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12))
def test_whatever_the_parser_accepts_python_re_full_matches_exactly(pieces: list[str]) -> None:
    """Soundness on arbitrary pattern text: a parse is a promise that the regex's language is those literals."""
    pattern = "".join(pieces)
    values = literal_alternation(pattern)
    if values is None:
        return
    compiled = re.compile(pattern)  # an accepted pattern is a valid regex
    for v in values:
        assert compiled.fullmatch(v), (pattern, v)
    for s in {v + "a" for v in values} | {v[:-1] for v in values if v} | {pattern, "a", "b", "ab", "A", ""}:
        assert (compiled.fullmatch(s) is not None) == (s in values), (pattern, s)


@pytest.mark.engines
@pytest.mark.parametrize("seed", range(6))
def test_served_regexes_equal_xgrammars_masks_state_by_state(served: triec.Vocabulary, seed: int) -> None:
    """The regexes triec takes over, compiled by xgrammar (where SGLang would send them), allow the same tokens."""
    pytest.importorskip("xgrammar")
    from triec.engines import make_engine

    engine = make_engine("xgrammar", served)
    rng = random.Random(seed)
    values = sorted(
        {"".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 12))}
    )
    pattern = rng.choice(WRAPPERS).format("|".join(_spell(v, rng) for v in values))
    table = Constraints(served).regex(pattern)
    assert isinstance(table, TableGrammar)
    ctx = engine.compiler.compile_regex(pattern)
    row = np.zeros(table.words_per_row, dtype=np.int32)
    xrow = np.zeros_like(row)
    for _ in range(30):  # random walks to EOS, every state compared
        m, x = table.matcher(), engine.matcher(ctx)
        while not m.is_terminated():
            m.fill_bitmask(row)
            x.fill(xrow)
            assert np.array_equal(row, xrow), (pattern, m.state)
            token = int(rng.choice(row_ids(row)))
            assert m.accept_token(token) and x.consume(token)


# ----------------------------------------------------------------------------- choice lists, the cache, the limits


def test_a_choice_is_the_table_of_its_values(served: triec.Vocabulary) -> None:
    c = Constraints(served)
    g = c.choice(COLORS)
    ref = triec.compile(COLORS, served)
    assert sorted(g.table.values) == sorted(COLORS)
    assert np.array_equal(rows_of(g), rows_of(ref))
    assert g.nbytes > 0 and g.vocab_size == V and g.words_per_row == (V + 31) // 32
    assert c.choice([*list(reversed(COLORS)), "red"]) is g  # one entry per distinct set
    assert c.choice(COLORS, encoding="json") is not g
    assert content_key(COLORS, triec.Encoding()) == content_key(COLORS[::-1], triec.Encoding())


def test_choice_refusals_are_one_line_request_errors(served: triec.Vocabulary) -> None:
    c = Constraints(served, limits=Limits(max_values=5, max_bytes=20, cache_bytes=1 << 20))
    for bad, words in [
        (["a"] * 6, "at most 5"),
        (["x" * 21], "bytes of values"),
        (["é" * 11], "bytes of values"),  # 22 bytes in 11 characters
        ([], "at least one"),
        (["a", 1], "must be strings"),
        ("abc", "list of strings"),
        (["\ud800"], "cannot be compiled"),
    ]:
        with pytest.raises(RequestError, match=words) as info:
            c.choice(bad)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)
    assert isinstance(c.choice(["a"] * 5), TableGrammar)  # duplicates count: the limit is on what was sent


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIEC_MAX_CHOICES", "7")
    monkeypatch.setenv("TRIEC_CACHE_BYTES", "1000")
    assert Limits.from_env() == Limits(max_values=7, max_bytes=Limits().max_bytes, cache_bytes=1000)
    monkeypatch.setenv("TRIEC_MAX_CHOICE_BYTES", "lots")
    with pytest.raises(ValuesError, match="TRIEC_MAX_CHOICE_BYTES"):
        Limits.from_env()


def test_the_cache_keeps_tables_within_its_bound(served: triec.Vocabulary) -> None:
    one = Constraints(served).choice(["alpha", "beta"]).nbytes
    c = Constraints(served, limits=Limits(cache_bytes=int(2.5 * one)))
    a, b = c.choice(["alpha", "beta"]), c.choice(["gamma", "delta"])
    assert c.choice(["alpha", "beta"]) is a  # a is now the most recent
    d = c.choice(["omega", "kappa"])  # evicts b, the least recently used
    assert len(c.cache) == 2 and c.cache.nbytes <= c.limits.cache_bytes
    assert c.is_live(a) and c.is_live(d) and not c.is_live(b)
    assert c.choice(["gamma", "delta"]) is not b
    small = Constraints(served, limits=Limits(cache_bytes=10))
    g = small.choice(["alpha", "beta"])  # larger than the whole cache: served, not kept
    assert len(small.cache) == 0 and not small.is_live(g)
    c.clear()
    assert len(c.cache) == 0 and not c.is_live(a)


def test_regexes_compile_their_literals_or_delegate(served: triec.Vocabulary) -> None:
    c = Constraints(served)
    g = c.regex("(" + "|".join(re.escape(v) for v in COLORS) + ")")
    assert isinstance(g, TableGrammar) and g is c.choice(COLORS)
    assert isinstance(c.regex("[a-z]+"), Delegate)
    with pytest.raises(RequestError, match="at most 2"):
        Constraints(served, limits=Limits(max_values=2)).regex("a|b|c")


# ----------------------------------------------------------------------------- json schemas


def test_string_enums_compile_as_json_literals(served: triec.Vocabulary) -> None:
    c = Constraints(served)
    for schema in (
        {"enum": COLORS},
        {"type": "string", "enum": COLORS},
        {"enum": COLORS, "title": "t", "description": "d"},
    ):
        assert string_enum(schema) == COLORS
        g = c.json_schema(json.dumps(schema))
        assert isinstance(g, TableGrammar)
        assert sorted(g.table.strings) == sorted(json.dumps(v, ensure_ascii=False) for v in COLORS)
        assert sorted(g.table.values) == sorted(COLORS)
    assert c.json_schema({"enum": COLORS}) is c.json_schema(json.dumps({"type": "string", "enum": COLORS}))


@pytest.mark.parametrize(
    "schema",
    [
        {"enum": ["a", 1]},
        {"enum": []},
        {"enum": "a"},
        {"type": "integer", "enum": ["a"]},
        {"enum": ["a"], "minLength": 2},
        {"type": "string"},
        {"const": "a"},
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {"type": "object", "properties": {"a": {"enum": ["x"]}}},
        [1, 2],
        "abc",
        True,
        None,
    ],
)
def test_other_schemas_are_delegated(served: triec.Vocabulary, schema: object) -> None:
    for any_whitespace in (True, False):
        assert isinstance(Constraints(served, any_whitespace=any_whitespace).json_schema(json.dumps(schema)), Delegate)


def test_invalid_json_is_delegated_for_the_engine_to_report(served: triec.Vocabulary) -> None:
    assert isinstance(Constraints(served).json_schema('{"enum": ['), Delegate)
    assert isinstance(Constraints(served).json_schema("[" * 100_000), Delegate)


def test_flat_objects_as_values_with_compact_json_else_by_the_schema_layer(served: triec.Vocabulary) -> None:
    schema = {
        "type": "object",
        "properties": {"label": {"enum": ["spam", "ham"]}, "v": {"const": 1}},
        "required": ["label", "v"],
    }
    pytest.importorskip("xgrammar")
    loose = Constraints(served, any_whitespace=True).json_schema(schema)  # its instances are not only compact ones
    assert isinstance(loose, TableGrammar) and loose.table.info["whitespace"] == "any"
    g = Constraints(served, any_whitespace=False).json_schema(json.dumps(schema))
    assert isinstance(g, TableGrammar)
    assert np.array_equal(rows_of(g), rows_of(triec.compile_json_schema(schema, served)))
    assert sorted(g.table.strings) == ['{"label": "ham", "v": 1}', '{"label": "spam", "v": 1}']


def test_the_schema_hook_serves_what_the_finite_cases_do_not(served: triec.Vocabulary) -> None:
    seen = []

    def hook(schema: dict, vocab: triec.Vocabulary, any_whitespace: bool) -> triec.MaskTable | None:
        seen.append((schema.get("title"), any_whitespace))
        if schema.get("title") == "refuse":
            raise ValuesError("not this shape")
        return triec.compile(["x"], vocab) if schema.get("title") == "mine" else None

    c = Constraints(served, schema_hook=hook)
    mine = {"type": "object", "title": "mine", "properties": {}}
    g = c.json_schema(mine)
    assert isinstance(g, TableGrammar) and g.table.values == ["x"] and g.nbytes > 0
    assert c.json_schema(json.dumps(mine)) is g and c.is_live(g)  # cached by the schema's text: the hook ran once
    assert isinstance(c.json_schema({"type": "object", "title": "other"}), Delegate)
    assert isinstance(c.json_schema({"type": "object", "title": "refuse"}), Delegate)
    assert isinstance(c.json_schema({"enum": ["a"]}), TableGrammar)  # the finite cases come first
    assert seen == [("mine", True), ("other", True), ("refuse", True)]
    assert isinstance(Constraints(served).json_schema(mine), Delegate)  # no hook: delegated


def test_structural_tags_are_delegated_without_a_hook(served: triec.Vocabulary) -> None:
    tag = json.dumps({"type": "structural_tag", "structures": [], "triggers": []})
    assert isinstance(Constraints(served).structural_tag(tag), Delegate)
    table = triec.compile(["<tool_call>a"], served)
    c = Constraints(served, structural_tag_hook=lambda doc, vocab: table if doc.get("triggers") == [] else None)
    g = c.structural_tag(tag)
    assert isinstance(g, TableGrammar) and g.table is table and c.structural_tag(tag) is g
    assert isinstance(c.structural_tag(json.dumps({"triggers": ["x"]})), Delegate)
    assert isinstance(c.structural_tag("not json"), Delegate)


# ----------------------------------------------------------------------------- artifacts by name


@pytest.fixture
def artifact_dir(tmp_path, served: triec.Vocabulary, vocabs: dict[str, triec.Vocabulary]):
    root = tmp_path / "artifacts"
    root.mkdir()
    triec.compile(COLORS, served).save(root / "colors.triec")
    triec.compile(COLORS, triec.Vocabulary.load("qwen2", vocab_size=V, eos_token_ids=[151643])).save(
        root / "one-eos.triec"
    )
    odd = triec.Vocabulary.load("qwen2", vocab_size=V, eos_token_ids=[151644])  # an EOS id the model does not stop on
    triec.compile(COLORS, odd).save(root / "oddeos.triec")
    triec.compile(COLORS, vocabs["gpt2"]).save(root / "gpt2.triec")
    triec.compile(COLORS, triec.Vocabulary.load("qwen2")).save(root / "narrow.triec")
    (root / "broken.triec").write_bytes(b"not an artifact")
    outside = tmp_path / "outside.triec"
    triec.compile(COLORS, served).save(outside)
    os.symlink(outside, root / "escape.triec")
    return root


def test_an_artifact_by_name_is_its_table(served: triec.Vocabulary, artifact_dir) -> None:
    c = Constraints(served, artifact_dir=artifact_dir, tokenizer="qwen2")
    g = c.json_schema(json.dumps({ARTIFACT_KEYWORD: "colors"}))
    assert isinstance(g, TableGrammar) and g.artifact == "colors" and g.table is g.parent
    assert np.array_equal(rows_of(g), rows_of(triec.compile(COLORS, served)))
    assert c.is_live(g)
    sub = c.json_schema({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: ["red", "re", "red"]})
    assert isinstance(sub, TableGrammar) and sorted(sub.table.values) == ["re", "red"] and sub.parent is g.table
    assert np.array_equal(rows_of(sub), rows_of(triec.compile(["red", "re"], served)))
    assert c.json_schema({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: ["re", "red"]}) is sub
    one = c.artifact("one-eos")  # its own EOS ids: the served tokenizer fingerprinted with them
    assert one.table.eos_token_ids == (151643,)


def test_an_artifact_file_that_changes_is_reloaded(served: triec.Vocabulary, artifact_dir) -> None:
    c = Constraints(served, artifact_dir=artifact_dir)
    g = c.artifact("colors")
    sub = c.artifact("colors", ["red"])
    triec.compile(["red", "orange"], served).save(artifact_dir / "colors.triec")
    st = os.stat(artifact_dir / "colors.triec")
    os.utime(artifact_dir / "colors.triec", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert not c.is_live(g) and not c.is_live(sub)
    assert sorted(c.artifact("colors").table.values) == ["orange", "red"]
    (artifact_dir / "colors.triec").unlink()
    assert not c.is_live(g)


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({ARTIFACT_KEYWORD: "missing"}, "no artifact named"),
        ({ARTIFACT_KEYWORD: "../outside"}, "not an artifact name"),
        ({ARTIFACT_KEYWORD: "/etc/passwd"}, "not an artifact name"),
        ({ARTIFACT_KEYWORD: "a..b"}, "not an artifact name"),
        ({ARTIFACT_KEYWORD: "escape"}, "link leading out"),
        ({ARTIFACT_KEYWORD: "broken"}, "not a valid triec artifact"),
        ({ARTIFACT_KEYWORD: "gpt2"}, "has masks 50257 wide"),
        ({ARTIFACT_KEYWORD: "narrow"}, "151646 wide"),
        ({ARTIFACT_KEYWORD: 3}, "must be an artifact name"),
        ({ARTIFACT_KEYWORD: "colors", "type": "string"}, "holds only"),
        ({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: {"red": 1}}, "non-empty list of strings"),
        ({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: []}, "non-empty list of strings"),
        ({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: ["red", 3]}, "values must be strings"),
        ({ARTIFACT_KEYWORD: "oddeos"}, "[151644] would not stop generation"),
        ({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: ["purple"]}, "purple"),
    ],
)
def test_artifact_requests_are_checked_at_admission(served: triec.Vocabulary, artifact_dir, schema, words) -> None:
    c = Constraints(served, artifact_dir=artifact_dir, tokenizer="qwen2")
    with pytest.raises(RequestError, match=re.escape(words)) as info:
        c.json_schema(json.dumps(schema))
    assert "\n" not in str(info.value)


def test_restrict_values_are_checked_in_one_place(served: triec.Vocabulary, artifact_dir) -> None:
    """``restrict`` (extra_args) and ``x-triec-restrict`` (a schema) go through serving.restrict_values: the same
    rules (a lone string is one value), the same messages naming the key."""
    assert serving.parse_extra_args({"triec": "colors", "restrict": "red"}) == serving.TriecRequest("colors", ("red",))
    c = Constraints(served, artifact_dir=artifact_dir, tokenizer="qwen2")
    assert sorted(c.json_schema({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: "red"}).table.values) == ["red"]
    for bad in ([], {"a": 1}, ["a", 1], ["x"] * (serving.MAX_RESTRICT + 1)):
        with pytest.raises(RequestError) as by_args:
            serving.parse_extra_args({"triec": "colors", "restrict": bad})
        with pytest.raises(RequestError) as by_schema:
            c.json_schema({ARTIFACT_KEYWORD: "colors", RESTRICT_KEYWORD: bad})
        assert str(by_schema.value) == str(by_args.value).replace("'restrict'", repr(RESTRICT_KEYWORD))


def test_an_artifact_is_refused_as_the_processors_refuse_it(served: triec.Vocabulary, artifact_dir) -> None:
    """One door: an artifact named through a JSON schema (SGLang, the vLLM backend) is admitted by serving.admit,
    as the processors' request is: an artifact whose EOS ids the server does not stop on gets the same refusal."""
    from types import SimpleNamespace

    model = serving.ServedModel("qwen2", V, 151643, (151643, 151645))
    processors = SimpleNamespace(
        extra_args={"triec": "oddeos"}, stop_token_ids=None, ignore_eos=False, min_tokens=0, structured_outputs=None
    )
    with pytest.raises(RequestError) as by_processors:
        serving.check_request(processors, model, serving.ArtifactStore(artifact_dir))
    backend = Constraints(
        served, artifact_dir=artifact_dir, tokenizer="qwen2", served=model, fix_stops=serving.STOPS_HINT
    )
    with pytest.raises(RequestError) as by_schema:
        backend.json_schema({ARTIFACT_KEYWORD: "oddeos"}, stops=model.stop_ids(processors))
    assert str(by_schema.value) == str(by_processors.value)
    assert "artifact 'oddeos' ends values with EOS ids [151644], but [151644] would not stop" in str(by_schema.value)
    assert backend.json_schema({ARTIFACT_KEYWORD: "oddeos"}, stops=[151644]).table.eos_token_ids == (151644,)


def test_an_artifact_for_another_tokenizer_of_the_same_width_is_refused(
    served: triec.Vocabulary, artifact_dir, vocabs
) -> None:
    gpt2 = vocabs["gpt2"]
    triec.compile(COLORS, triec.Vocabulary(gpt2.token_bytes, eos_token_ids=[50256], vocab_size=V)).save(
        artifact_dir / "wide.triec"
    )
    with pytest.raises(RequestError, match="another tokenizer"):
        Constraints(served, artifact_dir=artifact_dir).artifact("wide")


def test_tool_schema_artifacts_are_served_and_a_missing_directory_is_refused(
    served: triec.Vocabulary, artifact_dir, monkeypatch
) -> None:
    pytest.importorskip("llguidance")
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": ["a", "b"]}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    }
    triec.compile_schema(schema, served).save(artifact_dir / "toolcall.triec")
    grammar = Constraints(served, artifact_dir=artifact_dir).artifact("toolcall")
    m = grammar.matcher()  # a schema table's own matcher, with the Matcher methods
    first = m.allowed().tolist()
    assert first and m.accept_token(first[0]) and m.fork().allowed().tolist() == m.allowed().tolist()
    m.rollback(1)
    assert m.allowed().tolist() == first
    with pytest.raises(RequestError, match="narrows a table of values only"):
        Constraints(served, artifact_dir=artifact_dir).artifact("toolcall", ["a"])
    monkeypatch.delenv("TRIEC_ARTIFACT_DIR", raising=False)
    with pytest.raises(RequestError, match="TRIEC_ARTIFACT_DIR"):
        Constraints(served).json_schema({ARTIFACT_KEYWORD: "colors"})


# ----------------------------------------------------------------------------- the schema layer's hooks


def test_the_required_tools_schema_and_enums_anywhere_are_served_by_the_schema_layer(served: triec.Vocabulary) -> None:
    """vLLM's tool_choice="required" schema becomes a tool registry, a schema with a large enum inside becomes slots;
    both in the engine's whitespace convention, and a schema without a large enum is delegated."""
    pytest.importorskip("xgrammar")
    from triec.schema.tools import tools_from_required_schema

    required = {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {
                        "name": {"type": "string", "enum": [n]},
                        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
                    },
                    "required": ["name", "parameters"],
                }
                for n in ("get", "get_user", "put")
            ],
        },
    }
    tools, parallel = tools_from_required_schema(required)
    assert [t.name for t in tools] == ["get", "get_user", "put"] and parallel
    assert tools_from_required_schema({**required, "maxItems": 1})[1] is False
    assert tools_from_required_schema({**required, "minItems": 2}) is None
    for ws in (True, False):
        c = Constraints(served, any_whitespace=ws)
        grammar = c.json_schema(required)
        assert isinstance(grammar, TableGrammar) and grammar.table.info["shape"] == "tools"
        assert grammar.table.info["whitespace"] == ("any" if ws else "compact")
        codes = [f"C{i:05d}" for i in range(10_000)]  # the default threshold: a trie from 10,000 members
        enums = {"type": "object", "properties": {"code": {"enum": codes}}, "required": ["code"]}
        assert isinstance(c.json_schema(enums), TableGrammar)
        assert isinstance(c.json_schema({"type": "object", "properties": {"q": {"type": "string"}}}), Delegate)
