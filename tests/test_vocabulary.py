"""Tokenizer resolution and the decoded vocabulary: bundled names, paths, directories, Hub ids.

Real tokenizers only: the bundled gpt2 and qwen2, and the phi3 fixture copied
into temporary directories to exercise path and directory resolution.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import zstandard

import triec
from triec.tokenizer.source import locate
from triec.tokenizer.vocabulary import fingerprint_token_bytes

ROOT = Path(__file__).resolve().parent.parent
PHI3_ZST = ROOT / "fixtures" / "tokenizers" / "phi3" / "tokenizer.json.zst"


@pytest.fixture(scope="module")
def phi3_json_bytes() -> bytes:
    return zstandard.ZstdDecompressor().decompress(PHI3_ZST.read_bytes(), max_output_size=1 << 30)


@pytest.fixture(scope="module")
def phi3_vocab_map(phi3_json_bytes: bytes) -> dict[str, int]:
    return json.loads(phi3_json_bytes)["model"]["vocab"]


@pytest.fixture
def phi3_plain(tmp_path: Path, phi3_json_bytes: bytes) -> Path:
    """A directory holding a plain (decompressed) phi3 tokenizer.json."""
    d = tmp_path / "phi3-plain"
    d.mkdir()
    (d / "tokenizer.json").write_bytes(phi3_json_bytes)
    return d


@pytest.fixture
def phi3_zst_dir(tmp_path: Path) -> Path:
    """A directory holding the compressed phi3 tokenizer.json.zst."""
    d = tmp_path / "phi3-zst"
    d.mkdir()
    shutil.copy(PHI3_ZST, d / "tokenizer.json.zst")
    return d


# ----------------------------------------------------------------- bundled vocabularies


def test_gpt2_facts(vocabs: dict[str, triec.Vocabulary]) -> None:
    v = vocabs["gpt2"]
    assert v.name == "gpt2"
    assert v.family == "byte_level"
    assert v.num_tokens == 50257
    assert v.vocab_size == 50257
    assert v.eos_token_ids == (50256,)
    assert v.token_bytes[50256] == b""  # <|endoftext|>: special and EOS


def test_qwen2_facts(vocabs: dict[str, triec.Vocabulary]) -> None:
    v = vocabs["qwen2"]
    assert v.name == "qwen2"
    assert v.family == "byte_level"
    assert v.num_tokens == 151646
    assert v.vocab_size == 151646
    assert v.eos_token_ids == (151643, 151645)
    # <|endoftext|>, <|im_start|>, <|im_end|>: all special; <|im_start|> is not EOS but still empty.
    assert v.token_bytes[151643:151646] == (b"", b"", b"")


def test_default_tokenizer_is_qwen2(vocabs: dict[str, triec.Vocabulary]) -> None:
    assert locate(None).name == "qwen2"


@pytest.mark.parametrize(
    ("piece", "expected"),
    [("\u0120the", b" the"), ("\u010a", b"\n"), ("!", b"!"), ("\u00c3\u00a9", "\u00e9".encode()), ("\u0120", b" ")],
)
def test_gpt2_byte_level_pieces(vocabs: dict[str, triec.Vocabulary], piece: str, expected: bytes) -> None:
    tid = locate("gpt2").tokenizer_json["model"]["vocab"][piece]
    assert vocabs["gpt2"].token_bytes[tid] == expected


def test_gpt2_token_bytes_agree_with_the_tokenizers_library(vocabs: dict[str, triec.Vocabulary]) -> None:
    """Every gpt2 token that is valid UTF-8 on its own decodes to exactly those bytes."""
    tokenizers = pytest.importorskip("tokenizers")
    doc = locate("gpt2").tokenizer_json
    tok = tokenizers.Tokenizer.from_str(json.dumps(doc))
    tb = vocabs["gpt2"].token_bytes
    ids = list(range(0, 50256, 7))  # a spread sample keeps this fast
    decoded = tok.decode_batch([[i] for i in ids], skip_special_tokens=False)
    checked = 0
    for i, text in zip(ids, decoded, strict=False):
        try:
            expected = tb[i].decode("utf-8")
        except UnicodeDecodeError:
            continue  # a partial UTF-8 sequence: the library shows U+FFFD
        assert text == expected, (i, text, tb[i])
        checked += 1
    assert checked > 6000


# ----------------------------------------------------------------- phi3: SentencePiece with byte fallback


def test_phi3_facts(vocabs: dict[str, triec.Vocabulary]) -> None:
    v = vocabs["phi3"]
    assert v.family == "sentencepiece"
    assert v.num_tokens == 32064
    assert v.eos_token_ids == (32000,)  # <|endoftext|>, found by its conventional name
    assert v.name == str(PHI3_ZST.resolve())


@pytest.mark.parametrize(
    ("piece", "expected"),
    [
        ("<0x41>", b"A"),
        ("<0x0A>", b"\n"),
        ("<0xE2>", b"\xe2"),  # one byte of a multi-byte character
        ("\u2581the", b" the"),
        ("\u2581", b" "),
        ("the", b"the"),
    ],
)
def test_phi3_pieces(
    vocabs: dict[str, triec.Vocabulary], phi3_vocab_map: dict[str, int], piece: str, expected: bytes
) -> None:
    assert vocabs["phi3"].token_bytes[phi3_vocab_map[piece]] == expected


def test_phi3_space_pieces_start_with_a_space(
    vocabs: dict[str, triec.Vocabulary], phi3_vocab_map: dict[str, int]
) -> None:
    tb = vocabs["phi3"].token_bytes
    spaced = [(p, i) for p, i in phi3_vocab_map.items() if p.startswith("\u2581")]
    assert len(spaced) > 10000
    for piece, tid in spaced:
        assert tb[tid].startswith(b" "), piece
        assert b"\xe2\x96\x81" not in tb[tid]  # no literal U+2581 survives


@pytest.mark.parametrize("piece", ["<unk>", "<s>", "</s>"])
def test_phi3_control_pieces_are_empty(
    vocabs: dict[str, triec.Vocabulary], phi3_vocab_map: dict[str, int], piece: str
) -> None:
    assert vocabs["phi3"].token_bytes[phi3_vocab_map[piece]] == b""


def test_phi3_special_tokens_are_empty(vocabs: dict[str, triec.Vocabulary], phi3_json_bytes: bytes) -> None:
    added = json.loads(phi3_json_bytes)["added_tokens"]
    special = [a["id"] for a in added if a["special"]]
    assert {32000, 32001, 32007, 32010} <= set(special)
    tb = vocabs["phi3"].token_bytes
    assert all(tb[i] == b"" for i in special)
    # And nothing else is empty apart from </s> (a control piece not marked special).
    assert {i for i, b in enumerate(tb) if not b} == set(special) | {2}


def test_special_tokens_never_allowed(vocabs: dict[str, triec.Vocabulary]) -> None:
    """A value spelling a special token's text is reached by ordinary tokens, never the special id."""
    v = vocabs["qwen2"]
    table = triec.compile(["<|im_start|>"], v)
    allowed = {int(t) for s in range(table.num_states) for t in table.allowed(s)}
    assert 151644 not in allowed
    assert table.num_allowed > 0


# ----------------------------------------------------------------- resolution by path and directory


def test_path_to_plain_tokenizer_json(phi3_plain: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    v = triec.Vocabulary.load(phi3_plain / "tokenizer.json")
    assert v.name == str((phi3_plain / "tokenizer.json").resolve())
    assert v.num_tokens == 32064
    assert v.fingerprint == vocabs["phi3"].fingerprint


def test_directory_with_plain_tokenizer_json(phi3_plain: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    v = triec.Vocabulary.load(phi3_plain)
    assert v.name == str((phi3_plain / "tokenizer.json").resolve())
    assert v.fingerprint == vocabs["phi3"].fingerprint
    assert v.eos_token_ids == (32000,)


def test_directory_with_compressed_tokenizer_json(phi3_zst_dir: Path, vocabs: dict[str, triec.Vocabulary]) -> None:
    v = triec.Vocabulary.load(str(phi3_zst_dir))
    assert v.name == str((phi3_zst_dir / "tokenizer.json.zst").resolve())
    assert v.fingerprint == vocabs["phi3"].fingerprint


def test_directory_prefers_plain_json(phi3_plain: Path) -> None:
    (phi3_plain / "tokenizer.json.zst").write_bytes(b"not zstd")
    assert triec.Vocabulary.load(phi3_plain).name.endswith("tokenizer.json")


def test_generation_config_eos_list(phi3_plain: Path) -> None:
    (phi3_plain / "generation_config.json").write_text(json.dumps({"eos_token_id": [32000, 32001, 32007]}))
    v = triec.Vocabulary.load(phi3_plain)
    assert v.eos_token_ids == (32000, 32001, 32007)
    table = triec.compile(["a"], v)
    assert table.eos_token_ids == (32000, 32001, 32007)
    end = table.state_for_prefix("a")
    assert end is not None
    assert {32000, 32001, 32007} <= set(table.allowed(end).tolist())
    assert table.advance(end, 32007) == triec.FINISHED


def test_generation_config_eos_beside_a_file_path(phi3_zst_dir: Path) -> None:
    (phi3_zst_dir / "generation_config.json").write_text(json.dumps({"eos_token_id": 32007}))
    assert triec.Vocabulary.load(phi3_zst_dir / "tokenizer.json.zst").eos_token_ids == (32007,)


def test_config_json_eos_when_no_generation_config(phi3_plain: Path) -> None:
    (phi3_plain / "config.json").write_text(json.dumps({"eos_token_id": 32010}))
    assert triec.Vocabulary.load(phi3_plain).eos_token_ids == (32010,)


def test_tokenizer_config_eos_name(phi3_plain: Path) -> None:
    (phi3_plain / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|end|>"}))
    assert triec.Vocabulary.load(phi3_plain).eos_token_ids == (32007,)


def test_explicit_eos_beats_generation_config(phi3_plain: Path) -> None:
    (phi3_plain / "generation_config.json").write_text(json.dumps({"eos_token_id": [32000, 32001]}))
    assert triec.Vocabulary.load(phi3_plain, eos_token_ids=[32007]).eos_token_ids == (32007,)


def test_config_vocab_size_pads_the_mask(phi3_plain: Path) -> None:
    (phi3_plain / "config.json").write_text(json.dumps({"vocab_size": 32128}))
    v = triec.Vocabulary.load(phi3_plain)
    assert v.vocab_size == 32128
    assert v.num_tokens == 32064
    # A config narrower than the tokenizer is ignored rather than failing.
    (phi3_plain / "config.json").write_text(json.dumps({"vocab_size": 100}))
    assert triec.Vocabulary.load(phi3_plain).vocab_size == 32064


def test_directory_without_tokenizer(tmp_path: Path) -> None:
    with pytest.raises(triec.TokenizerError, match=r"holds no tokenizer.json"):
        triec.Vocabulary.load(tmp_path)


def test_not_json_tokenizer_file(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("hello")
    with pytest.raises(triec.TokenizerError, match="not valid JSON"):
        triec.Vocabulary.load(path)


# ----------------------------------------------------------------- names that resolve to nothing


def test_unknown_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(triec.TokenizerError) as info:
        triec.Vocabulary.load("gpt-7")
    msg = str(info.value)
    assert "'gpt-7'" in msg
    assert "not a bundled name (gpt2, qwen2)" in msg
    assert "tokenizer.json" in msg


def test_hub_id_offline_names_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    if "huggingface_hub.constants" in sys.modules:
        # huggingface_hub reads the environment once, at import; keep it offline if already imported.
        monkeypatch.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", True)
    with pytest.raises(triec.TokenizerError) as info:
        triec.Vocabulary.load("nonexistent-org/nonexistent-model")
    msg = str(info.value)
    assert "'nonexistent-org/nonexistent-model'" in msg
    assert "Hugging Face cache" in msg


# ----------------------------------------------------------------- width and EOS


def test_vocab_size_smaller_than_tokenizer() -> None:
    with pytest.raises(triec.TokenizerError, match="vocab_size 50000 is smaller than the tokenizer's 50257 tokens"):
        triec.Vocabulary.load("gpt2", vocab_size=50000)


def test_vocab_size_larger_pads(vocabs: dict[str, triec.Vocabulary]) -> None:
    v = triec.Vocabulary.load("gpt2", vocab_size=50304)
    assert v.vocab_size == 50304
    assert v.num_tokens == 50257
    assert v.fingerprint == vocabs["gpt2"].fingerprint  # padding is not part of the token bytes
    table = triec.compile(["hello world", "hello"], v)
    assert table.vocab_size == 50304
    assert int(table.allowed_tokens.max()) < 50257
    assert table.bitmask(0).shape == (50304 // 32,)


@pytest.mark.parametrize("eos", [[13], [50256, 13], [13, 50256, 13]])
def test_eos_override(eos: list[int]) -> None:
    v = triec.Vocabulary.load("gpt2", eos_token_ids=eos)
    assert v.eos_token_ids == tuple(sorted(set(eos)))
    assert v.token_bytes[13] == b""  # "." is EOS now, so no value may contain it as a token


def test_eos_override_reaches_the_table() -> None:
    v = triec.Vocabulary.load("gpt2", eos_token_ids=[13, 50256])
    table = triec.compile(["a."], v)
    assert table.eos_token_ids == (13, 50256)
    end = table.state_for_prefix("a.")
    assert end is not None and table.is_accepting(end)
    assert table.allowed(end).tolist() == [13, 50256]
    # "." must now be spelled by another token than id 13.
    dot_state = table.state_for_prefix("a")
    assert 13 not in table.allowed(dot_state).tolist()


@pytest.mark.parametrize("eos", [[50257], [-1], [50256, 10**6]])
def test_eos_out_of_range(eos: list[int]) -> None:
    with pytest.raises(triec.TokenizerError, match="outside the vocabulary"):
        triec.Vocabulary.load("gpt2", eos_token_ids=eos)


def test_eos_inside_padding_is_accepted() -> None:
    v = triec.Vocabulary.load("gpt2", vocab_size=50304, eos_token_ids=[50300])
    assert v.eos_token_ids == (50300,)


# ----------------------------------------------------------------- fingerprint


def test_fingerprint_stable_across_loads(vocabs: dict[str, triec.Vocabulary]) -> None:
    for name, spec in (("gpt2", "gpt2"), ("phi3", str(PHI3_ZST))):
        again = triec.Vocabulary.load(spec)
        assert again.fingerprint == vocabs[name].fingerprint
        assert again.fingerprint == fingerprint_token_bytes(again.token_bytes)
        assert again.fingerprint.startswith("sha256:") and len(again.fingerprint) == 7 + 64


def test_fingerprint_differs_between_tokenizers(vocabs: dict[str, triec.Vocabulary]) -> None:
    fps = {name: v.fingerprint for name, v in vocabs.items()}
    assert len(set(fps.values())) == len(fps) == 3


def test_fingerprint_differs_between_eos_choices(vocabs: dict[str, triec.Vocabulary]) -> None:
    default = vocabs["gpt2"].fingerprint
    with_dot = triec.Vocabulary.load("gpt2", eos_token_ids=[50256, 13]).fingerprint
    with_newline = triec.Vocabulary.load("gpt2", eos_token_ids=[50256, 198]).fingerprint
    assert len({default, with_dot, with_newline}) == 3


def test_fingerprint_depends_on_every_byte() -> None:
    base = [b"a", b"bc", b""]
    fp = fingerprint_token_bytes(base)
    assert fingerprint_token_bytes([b"a", b"bd", b""]) != fp
    assert fingerprint_token_bytes([b"ab", b"c", b""]) != fp  # same concatenation, other split
    assert fingerprint_token_bytes([b"a", b"bc"]) != fp  # one id fewer
    assert fingerprint_token_bytes(list(base)) == fp
