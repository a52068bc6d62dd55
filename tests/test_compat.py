"""Every module path of triec 0.1 still imports (for one release), and hands out the same objects as the new paths.

Moved modules warn once with a ``DeprecationWarning`` naming the new path
(triec/_compat.py); old paths that are packages now (``triec.runtime``,
``triec.artifact``, ``triec.engines``) and modules that stayed import silently.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from triec import _compat

# The public names each module of triec 0.1.0 defined at its top level (from the 0.1 tree, by ast).
OLD_NAMES: dict[str, list[str]] = {
    "triec": [],
    "triec._version": [],
    "triec.artifact": [
        "ALIGN",
        "FORMAT_NAME",
        "FORMAT_VERSION",
        "MAGIC",
        "MAX_HEADER",
        "PLAIN_FORMAT_VERSION",
        "PREAMBLE",
        "SECTIONS",
        "ZSTD_MAGIC",
        "atomic_write",
        "encode_artifact",
        "load",
        "parse_artifact",
        "write_artifact",
    ],
    "triec.automaton": [
        "CACHE_FORMAT",
        "VocabAutomaton",
        "build_automaton",
        "load_cached",
        "load_or_build",
        "save_cached",
    ],
    "triec.bench": [
        "ALL_ENGINES",
        "BenchInterrupted",
        "BenchProgress",
        "DEFAULT_BATCH",
        "DEFAULT_K",
        "DEFAULT_PATHS",
        "DEFAULT_TIMEOUT",
        "LONG_COMPILE",
        "MAX_BATCH",
        "MAX_K",
        "TIMED",
        "batch_prefixes",
        "decode_paths",
        "machine_info",
        "markdown_table",
        "parse_engines",
        "parse_int_list",
        "plot",
        "run_bench",
        "run_cell",
        "summary",
        "table_rows",
        "value_set",
        "versions",
    ],
    "triec.cli": ["main"],
    "triec.cli.__main__": [],
    "triec.cli._coercion": ["convert", "install", "kind_of"],
    "triec.cli._common": ["Phases", "app", "err", "out", "report_errors"],
    "triec.cli._progress": ["BenchBar", "PhaseDisplay", "SHOW_AFTER_S", "VerifyBars", "interactive"],
    "triec.cli.bench": ["bench_cmd"],
    "triec.cli.compile": ["compile_cmd"],
    "triec.cli.inspect": ["inspect_cmd"],
    "triec.cli.verify": ["verify_cmd"],
    "triec.compiler": [
        "CompileStats",
        "IMPLEMENTATIONS",
        "MAX_VALUE_BYTES",
        "SMALL_SET",
        "TINY_SET",
        "compile",
        "compile_json_schema",
        "compile_keys",
        "compile_sorted",
        "mask_table",
        "prepare_buffer",
        "prepare_values",
        "spell_all",
    ],
    "triec.continuation": [
        "EngineDriver",
        "LLGuidanceDriver",
        "XGrammarDriver",
        "driver",
    ],  # Continuation, PLACEHOLDER: removed (D19's; grammars in triec.schema.grammar)
    "triec.csr": ["concat_ranges"],
    "triec.disk_cache": ["cache_dir", "load_arrays", "save_arrays"],
    "triec.encoding": ["ENCODINGS", "Encoding", "JSON", "PLAIN", "RAW", "as_encoding", "json_string_literal"],
    "triec.engines": [
        "ENGINES",
        "Engine",
        "EngineUnavailable",
        "EngineUnsupported",
        "LLGuidanceEngine",
        "Matcher",
        "OutlinesCoreEngine",
        "XGrammarEngine",
        "ebnf_literal",
        "engine_version",
        "install_hint",
        "is_installed",
        "make_engine",
        "regex_literal",
        "row_ids",
        "xgrammar_regex_literal",
    ],
    "triec.errors": [
        "ArtifactChecksumError",
        "ArtifactContentError",
        "ArtifactError",
        "ArtifactVersionError",
        "OutputError",
        "TokenNotAllowed",
        "TokenizerError",
        "TokenizerMismatch",
        "TriecError",
        "ValueNotInTable",
        "ValuesError",
    ],
    "triec.inspect": [
        "allowed_counts",
        "depth_distribution",
        "describe_state",
        "escape_bytes",
        "schema_summary",
        "section_sizes",
        "state_depths",
        "straddle_counts",
        "summary",
        "widest_states",
    ],
    "triec.integrations": [],
    "triec.integrations.transformers": ["TriecLogitsProcessor"],
    "triec.integrations.vllm": [],
    "triec.integrations.vllm._core": [
        "ARG_NAME",
        "ARG_RESTRICT",
        "ArtifactStore",
        "BatchState",
        "ENV_DIR",
        "EOS_ONLY",
        "MAX_RESTRICT",
        "RequestError",
        "SCHEMA",
        "SUFFIX",
        "ServedModel",
        "Table",
        "TriecRequest",
        "UNCONSTRAINED",
        "check_request",
        "end_everything",
        "engine_eos_ids",
        "engine_served",
        "engine_start",
        "frontend_served_model",
        "is_schema",
        "log",
        "parse_extra_args",
        "reset_store",
        "safe_parse",
        "served_fingerprint",
        "served_model_from_config",
        "store",
        "to_device",
        "validate",
    ],
    "triec.integrations.vllm.v1": ["TriecLogitsProcessor"],
    "triec.integrations.vllm.v2": ["TriecLogitsProcessorV2"],
    "triec.json_schema": ["is_object_schema", "parse_schema"],
    "triec.keysort": ["SortedKeys", "sort_unique"],
    "triec.mask_writer": ["MaskWriter"],
    "triec.memo": ["T", "per_table"],
    "triec.reference": ["brute_force_allowed", "prefix_states", "reference_transitions"],
    "triec.restrict": ["PathIndex", "RestrictedTable", "path_index"],
    "triec.runtime": ["FINISHED", "MaskTable", "StateQueries"],
    "triec.schema_artifact": [
        "FORMAT_NAME",
        "SCHEMA_SECTIONS",
        "build_schema_table",
        "check_schema_indices",
        "expected_counts",
        "validate_schema_contents",
    ],  # schema_arrays, schema_header: removed (the D19 layout is read, never written)
    "triec.schema_compiler": ["compile_schema", "name_keys"],
    "triec.schema_table": [
        "SchemaMaskWriter",
        "SchemaMatcher",
        "SchemaTable",
    ],  # SourceWords, source_words: removed (each slot's rows: Slot.words)
    "triec.schema_verify": ["SchemaCheck", "compare_schema"],
    "triec.straddle": [
        "QUOTE"
    ],  # the straddle tables and their disk cache: removed (a slot's crossing tokens, triec.schema.slot)
    "triec.synthetic": [
        "ACTIONS",
        "ADJECTIVES",
        "BRANDS",
        "CATEGORIES",
        "COLORS",
        "NAMESPACES",
        "PRODUCT_NAMES_MAX",
        "RESOURCES",
        "TOOL_NAMES_MAX",
        "WIDE_CODES_MAX",
        "product_names",
        "tool_names",
        "wide_codes",
    ],
    "triec.token_bytes": [
        "BYTE_LEVEL",
        "MAX_TOKEN_IDS",
        "SENTENCEPIECE",
        "decode_token_bytes",
        "detect_family",
        "guess_eos_token_ids",
        "ids_for_tokens",
        "model_vocab",
        "unicode_to_byte",
    ],
    "triec.tokenizer_source": [
        "BUNDLED",
        "DEFAULT_TOKENIZER",
        "MAX_TOKENIZER_BYTES",
        "TokenizerSource",
        "locate",
        "read_tokenizer_file",
    ],
    "triec.tool_schema": [
        "CONVENTION",
        "ENGINES",
        "ITEM_SEPARATOR",
        "KEY_SEPARATOR",
        "SchemaShapeError",
        "ToolSchema",
        "canonical_json",
        "looks_like_tool_schema",
        "parse_tool_schema",
        "with_enum",
    ],
    "triec.torch_table": ["DEFAULT_MAX_GATHER", "DEFAULT_NARROW_WORDS", "INVALID", "TorchMaskTable"],
    "triec.trie": ["Trie", "build_trie", "build_trie_from_buffer", "join_keys", "longest_common_prefixes"],
    "triec.validate": ["check_indices", "validate_contents"],
    "triec.values": ["FORMATS", "MAX_VALUES_BYTES", "parse_input", "parse_values", "read_input", "read_values"],
    "triec.verify": [
        "AGAINST",
        "BRUTE_FORCE_BUDGET",
        "CheckProgress",
        "CheckResult",
        "DEFAULT_STATES",
        "DEFAULT_WALKS",
        "MAX_EXAMPLES",
        "Mismatch",
        "PROGRESS_EVERY",
        "ProgressFn",
        "VerifyReport",
        "WRONG_TOKENIZER",
        "compare_engine",
        "compare_reference",
        "escape_bytes",
        "load_checked",
        "parse_against",
        "resolve_vocabulary",
        "select_states",
        "state_depths",
        "token_paths",
        "verify",
    ],
    "triec.vocab_cache": [
        "CACHE_FORMAT",
        "DecodedTokenizer",
        "cache_key",
        "decode",
        "load_cached",
        "load_or_decode",
        "save_cached",
    ],
    "triec.vocabulary": ["Vocabulary", "fingerprint_token_bytes"],
    "triec.walk": ["CHUNK", "Children", "Transitions", "two_byte_table", "walk"],
    "triec.word_masks": ["StateWords", "build_state_words", "state_words", "words_from_pairs"],
}


# Paths of the unreleased 0.2 layout that issue 41 renamed (``build`` -> ``compiler``, ``check`` split, ``host`` ->
# ``numpy``): each still imports, with a warning, for one release. Their names are the new modules' own.
RENAMED_02: set[str] = {
    "triec.build",
    "triec.build.compile",
    "triec.build.canonical",
    "triec.build.json_schema",
    "triec.build.keysort",
    "triec.build.reference",
    "triec.build.values",
    "triec.build.walk",
    "triec.check",
    "triec.check.bench",
    "triec.check.inspect",
    "triec.check.paths",
    "triec.check.registries",
    "triec.check.schema_verify",
    "triec.check.states",
    "triec.check.synthetic",
    "triec.check.verify",
    "triec.runtime.host",
}


def _private(path: str) -> bool:
    return any(part.startswith("_") for part in path.split(".")[1:])


def test_every_moved_path_existed_and_every_old_path_is_accounted_for() -> None:
    assert set(_compat.MOVED) <= set(OLD_NAMES) | RENAMED_02
    for path in set(OLD_NAMES) - set(_compat.MOVED):  # not moved: the real module, same path
        assert importlib.util.find_spec(path) is not None and importlib.util.find_spec(path).origin != "moved", path


@pytest.mark.parametrize("path", sorted(_compat.MOVED))
def test_a_moved_path_warns_and_re_exports_the_same_objects(path: str) -> None:
    sys.modules.pop(path, None)  # the warning comes once per import of the module
    new = _compat.MOVED[path]
    with pytest.warns(DeprecationWarning, match=rf"{path} is deprecated .*import from {new[0]}") as record:
        old = importlib.import_module(path)
    assert record[0].filename == __file__  # the warning points at the importing line, not at importlib
    homes = [importlib.import_module(h) for h in new]
    for name in OLD_NAMES.get(path, []):
        if name in _compat.RENAMED.get(path, {}):  # renamed since: the new name's object
            home_path, _, new = _compat.RENAMED[path][name].partition(":")
            assert getattr(old, name) is getattr(importlib.import_module(home_path), new), name
            continue
        home = next((h for h in homes if hasattr(h, name)), None)
        assert home is not None, f"{path}.{name} has no new home among {new}"
        assert getattr(old, name) is getattr(home, name), name
    assert set(OLD_NAMES.get(path, [])) <= set(old.__all__) <= set(dir(old))
    if path in RENAMED_02:  # a renamed 0.2 module hands out every public name of its new home
        assert set(_compat._public(homes[0])) <= set(old.__all__)


@pytest.mark.parametrize("path", sorted(set(OLD_NAMES) - set(_compat.MOVED) - {"triec.cli.__main__"}))
def test_a_path_that_stayed_imports_silently_with_its_old_names(path: str) -> None:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            module = importlib.import_module(path)
        except ModuleNotFoundError as exc:  # triec.integrations.vllm.v1 and v2 need vLLM
            if exc.name and exc.name.startswith("triec"):
                raise
            pytest.skip(f"{path} needs {exc.name}")
    assert not [w for w in record if "will be removed in triec" in str(w.message)]  # frameworks may warn of their own
    if _private(path):
        return  # private modules (triec.cli._common, ...) promise no names
    missing = [name for name in OLD_NAMES[path] if not hasattr(module, name)]
    assert missing == []


def test_star_import_of_a_moved_path_gives_its_names_not_its_imports() -> None:
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning):
        sys.modules.pop("triec.build.compile", None)
        exec("from triec.build.compile import *", namespace)
    assert {"compile", "compile_json_schema", "compile_sorted", "CompileStats"} <= set(namespace)
    assert not {"np", "annotations", "TYPE_CHECKING", "dataclass"} & set(namespace)


def test_a_moved_path_follows_monkeypatches_of_the_new_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import triec.compiler.values

    with pytest.warns(DeprecationWarning):
        sys.modules.pop("triec.values", None)
        old = importlib.import_module("triec.values")
    monkeypatch.setattr(triec.compiler.values, "MAX_VALUES_BYTES", 7)
    assert old.MAX_VALUES_BYTES == 7


def test_star_import_of_a_package_that_was_a_module_gives_its_old_names() -> None:
    namespace: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from triec.compiler import *", namespace)
    assert {"compile", "compile_json_schema", "prepare_values", "spell_all", "CompileStats"} <= set(namespace)
    assert namespace["compile"] is importlib.import_module("triec.compiler.entry").compile
