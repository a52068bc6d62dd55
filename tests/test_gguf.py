"""GGUF vocabularies: equal, id by id, to the tokenizer.json they were converted from.

The GGUF files are written by the ``gguf`` package (llama.cpp's own writer) with
the token types llama.cpp's converter gives (control for special added tokens,
user-defined for the others, byte for ``<0xNN>``, unknown for ``<unk>``); the
SmolLM2 GGUF of the trained-model fixture is checked against the tokenizer.json
transformers makes of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TOKENIZERS  # tests/ is on sys.path

import triec
from triec.errors import TokenizerError
from triec.tokenizer import gguf as gg
from triec.tokenizer.source import locate

gguf = pytest.importorskip("gguf")


def _write_gguf(path: Path, spec: str, *, model: str | None = None, tensors: bool = True) -> triec.Vocabulary:
    """``spec``'s tokenizer.json as a GGUF, the way llama.cpp's converter types its tokens; returns the json route."""
    doc = locate(spec).tokenizer_json
    vocab = triec.Vocabulary.load(spec)
    pieces = {i: p for p, i in doc["model"]["vocab"].items()}
    added = {a["id"]: a for a in doc.get("added_tokens") or []}
    n = max([*pieces, *added]) + 1
    tokens, types = [], []
    sentencepiece = "ByteFallback" in json.dumps(doc.get("decoder"))
    for i in range(n):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gg.CONTROL if added[i].get("special") else gg.USER_DEFINED)
        else:
            piece = pieces[i]
            tokens.append(piece)
            if sentencepiece and piece.startswith("<0x") and len(piece) == 6:
                types.append(gg.BYTE)
            elif sentencepiece and piece == "<unk>":
                types.append(gg.UNKNOWN)
            elif sentencepiece and piece in ("<s>", "</s>"):
                types.append(gg.CONTROL)
            else:
                types.append(gg.NORMAL)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model(model or ("llama" if sentencepiece else "gpt2"))
    w.add_token_list(tokens)
    w.add_token_types(types)
    if not sentencepiece:
        merges = doc["model"].get("merges") or []
        w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    eos = list(vocab.eos_token_ids)  # llama.cpp's converter: EOS, and end-of-turn where the model has one
    w.add_eos_token_id(eos[0])
    if len(eos) > 1:
        w.add_eot_token_id(eos[1])
    if tensors:
        import numpy as np

        w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return vocab


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_gguf_vocabulary_equals_its_tokenizer_json_twin(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.gguf"
    twin = _write_gguf(path, TOKENIZERS[name])
    got = triec.Vocabulary.load(path)
    assert got.num_tokens == twin.num_tokens
    diff = [i for i, (a, b) in enumerate(zip(got.token_bytes, twin.token_bytes, strict=True)) if a != b]
    assert not diff, [(i, got.token_bytes[i], twin.token_bytes[i]) for i in diff[:5]]
    assert got.eos_token_ids == twin.eos_token_ids and got.fingerprint == twin.fingerprint
    # and a table compiled on it is the same table
    values = ["medical_billing", "médico", "42 apples", "<tool_call>"]
    a, b = triec.compile(values, got), triec.compile(values, twin)
    assert a.num_states == b.num_states and all(
        sorted(a.allowed(s).tolist()) == sorted(b.allowed(s).tolist()) for s in range(a.num_states)
    )


def test_cli_compiles_with_a_gguf_tokenizer(tmp_path: Path) -> None:
    path = tmp_path / "gpt2.gguf"
    _write_gguf(path, "gpt2")
    values = tmp_path / "v.txt"
    values.write_text("alpha\nbeta\n")
    out = tmp_path / "v.triec"
    run = subprocess.run(
        [sys.executable, "-m", "triec.cli", "compile", str(values), "-t", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert triec.load(out).values == ["alpha", "beta"]


def test_bad_gguf_files_are_refused_with_the_file_named(tmp_path: Path) -> None:
    not_gguf = tmp_path / "a.gguf"
    not_gguf.write_bytes(b"GGML" + b"\0" * 40)
    with pytest.raises(TokenizerError, match=r"a\.gguf: not a GGUF file"):
        triec.Vocabulary.load(not_gguf)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(TokenizerError, match=r"empty.gguf"):
        triec.Vocabulary.load(empty)
    whole = tmp_path / "whole.gguf"
    _write_gguf(whole, "gpt2", tensors=False)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:5000])
    with pytest.raises(TokenizerError, match=r"cut\.gguf: GGUF .*past the end"):
        triec.Vocabulary.load(cut)
    bert = tmp_path / "bert.gguf"
    _write_gguf(bert, "gpt2", model="bert")
    with pytest.raises(TokenizerError, match=r"bert\.gguf: GGUF tokenizer model 'bert' is not supported"):
        triec.Vocabulary.load(bert)
    run = subprocess.run(
        [sys.executable, "-m", "triec.cli", "inspect", "x.triec"], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 2
    values = tmp_path / "v.txt"
    values.write_text("alpha\n")
    run = subprocess.run(
        [sys.executable, "-m", "triec.cli", "compile", str(values), "-t", str(bert), "-o", str(tmp_path / "o.triec")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "bert.gguf" in run.stderr and not (tmp_path / "o.triec").exists()


def test_metadata_reader_reads_every_value_type(tmp_path: Path) -> None:
    path = tmp_path / "kv.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_uint32("a.u32", 7)
    w.add_int64("a.i64", -5)
    w.add_float32("a.f32", 0.5)
    w.add_bool("a.bool", True)
    w.add_string("a.str", "héllo")
    w.add_array("a.ints", [1, 2, 3])
    w.add_array("a.strs", ["x", "", "ÿ"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta = gg.read_metadata(path)
    assert meta["a.u32"] == 7 and meta["a.i64"] == -5 and meta["a.f32"] == 0.5 and meta["a.bool"] is True
    assert meta["a.str"] == "héllo" and meta["a.ints"] == [1, 2, 3] and meta["a.strs"] == ["x", "", "ÿ"]
    assert meta["general.architecture"] == "llama"
