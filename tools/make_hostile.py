"""Write the hand-made hostile artifacts in fixtures/hostile/ (one broken rule each).

    python tools/make_hostile.py

Every file starts from fixtures/golden/tiny-gpt2.triec (``schema_*``: from the
version-3 schema golden fixtures/golden/extraction-gpt2.triec; ``d19_*``: from a
golden file of the first schema layout) and breaks exactly one rule of
docs/format.md, keeping every other check satisfied (the CRCs are recomputed
unless the CRC is the thing being broken), so that each test proves the loader
catches that rule and names it. tests/test_hostile.py lists what each file must
raise.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "fixtures" / "golden" / "tiny-gpt2.triec"
SCHEMA_GOLDEN = ROOT / "fixtures" / "golden" / "extraction-gpt2.triec"
D19_GOLDEN = ROOT / "fixtures" / "golden" / "d19-tools-gpt2-llguidance.triec"
OUT = ROOT / "fixtures" / "hostile"
PRE = struct.Struct("<8sIIII")


def split(data: bytes) -> tuple[tuple[Any, ...], dict[str, Any], bytes]:
    pre = PRE.unpack_from(data, 0)
    head_len = pre[2]
    header = msgpack.unpackb(data[PRE.size : PRE.size + head_len], raw=False)
    data_start = (PRE.size + head_len + 63) // 64 * 64
    return pre, header, data[data_start:]


def join(pre: tuple[Any, ...], header: dict[str, Any] | bytes, body: bytes, *, fix_crc: bool = True) -> bytes:
    head = header if isinstance(header, bytes) else msgpack.packb(header, use_bin_type=True)
    magic, version, _, crc, reserved = pre
    out = bytearray(PRE.pack(magic, version, len(head), zlib.crc32(head) if fix_crc else crc, reserved))
    out += head
    out += bytes((len(out) + 63) // 64 * 64 - len(out))
    return bytes(out + body)


def patch_section(header: dict[str, Any], body: bytes, name: str, edit: Callable[[np.ndarray], None]) -> bytes:
    """Apply ``edit`` to a section's array and recompute its CRC, so only the content is wrong."""
    (sec,) = [s for s in header["sections"] if s["name"] == name]
    arr = np.frombuffer(body, dtype=np.dtype(sec["dtype"]), count=sec["count"], offset=sec["offset"]).copy()
    edit(arr)
    raw = arr.tobytes()
    sec["crc32"] = zlib.crc32(raw)
    return body[: sec["offset"]] + raw + body[sec["offset"] + len(raw) :]


def cases(golden: bytes) -> dict[str, bytes]:
    pre, _header, body = split(golden)
    out: dict[str, bytes] = {}

    def with_header(name: str, edit: Callable[[dict[str, Any]], None]) -> None:
        _, h, b = split(golden)
        edit(h)
        out[name] = join(pre, h, b)

    out["huge_header_length"] = golden[:12] + struct.pack("<I", 0xFFFFFFF0) + golden[16:]
    out["header_not_msgpack"] = join(pre, b"\xc1" * 40, body)  # 0xc1 is never valid msgpack
    out["header_crc_mismatch"] = golden[:16] + struct.pack("<I", pre[3] ^ 1) + golden[20:]
    out["newer_version"] = golden[:8] + struct.pack("<I", 99) + golden[12:]
    out["wrong_magic"] = b"GIF89a\0\0" + golden[8:]
    out["reserved_nonzero"] = golden[:20] + struct.pack("<I", 7) + golden[24:]
    out["truncated_in_section"] = golden[: len(golden) - 10]
    out["trailing_bytes"] = golden + b"\0" * 64

    def overlap(h: dict[str, Any]) -> None:
        h["sections"][1]["offset"] = 0  # allowed_tokens on top of allowed_offsets

    with_header("overlapping_sections", overlap)

    def past_end(h: dict[str, Any]) -> None:
        h["sections"][-1]["offset"] = 1 << 30

    with_header("offset_past_end", past_end)

    def misaligned(h: dict[str, Any]) -> None:
        h["sections"][1]["offset"] += 4

    with_header("misaligned_section", misaligned)

    def count_mismatch(h: dict[str, Any]) -> None:
        h["num_states"] += 1  # sections no longer match the state count

    with_header("count_mismatch", count_mismatch)

    def count_overflow(h: dict[str, Any]) -> None:
        h["sections"][2]["count"] = 1 << 62

    with_header("count_overflow", count_overflow)

    def eos_out_of_range(h: dict[str, Any]) -> None:
        h["eos_token_ids"] = [h["vocab_size"]]

    with_header("eos_out_of_range", eos_out_of_range)

    def bool_count(h: dict[str, Any]) -> None:
        h["num_values"] = True

    with_header("bool_count", bool_count)

    def missing_sections(h: dict[str, Any]) -> None:
        del h["sections"][-1]

    with_header("missing_section", missing_sections)

    def wrong_dtype(h: dict[str, Any]) -> None:
        h["sections"][1]["dtype"] = "<f4"

    with_header("wrong_dtype", wrong_dtype)

    _, h, b = split(golden)
    vocab = h["vocab_size"]

    def token_out_of_range(a: np.ndarray) -> None:
        a[0] = vocab

    out["token_id_out_of_range"] = join(pre, h, patch_section(h, b, "allowed_tokens", token_out_of_range))

    _, h, b = split(golden)

    def next_out_of_range(a: np.ndarray) -> None:
        a[0] = h["num_states"] + 5

    out["next_state_out_of_range"] = join(pre, h, patch_section(h, b, "allowed_next", next_out_of_range))

    _, h, b = split(golden)

    def not_monotone(a: np.ndarray) -> None:
        a[2], a[3] = a[3], a[2]

    out["offsets_not_monotone"] = join(pre, h, patch_section(h, b, "allowed_offsets", not_monotone))

    _, h, b = split(golden)

    def invalid_utf8(a: np.ndarray) -> None:
        a[-1] = 0xFF

    out["values_not_utf8"] = join(pre, h, patch_section(h, b, "state_byte", invalid_utf8))

    def section_case(name: str, section: str, edit: Callable[[np.ndarray, dict[str, Any]], None]) -> None:
        _, h, b = split(golden)
        out[name] = join(pre, h, patch_section(h, b, section, lambda a: edit(a, h)))

    def negative_token(a: np.ndarray, h: dict[str, Any]) -> None:
        a[1] = -1

    section_case("token_id_negative", "allowed_tokens", negative_token)

    def offsets_end(a: np.ndarray, h: dict[str, Any]) -> None:
        a[-1] -= 1

    section_case("offsets_wrong_end", "allowed_offsets", offsets_end)

    def value_state_order(a: np.ndarray, h: dict[str, Any]) -> None:
        a[1], a[2] = a[2], a[1]

    section_case("value_state_not_increasing", "value_state", value_state_order)

    def value_state_end(a: np.ndarray, h: dict[str, Any]) -> None:
        a[-1] = h["num_states"]

    section_case("value_state_past_end", "value_state", value_state_end)

    def lcp_too_long(a: np.ndarray, h: dict[str, Any]) -> None:
        a[-1] = 1000

    section_case("value_lcp_too_long", "value_lcp", lcp_too_long)

    def lcp_negative(a: np.ndarray, h: dict[str, Any]) -> None:
        a[-1] = -1

    section_case("value_lcp_negative", "value_lcp", lcp_negative)

    def values_out_of_order(a: np.ndarray, h: dict[str, Any]) -> None:
        a[1] = 0x7A  # the second value's first new byte becomes 'z': it now sorts after its successors

    section_case("values_out_of_order", "state_byte", values_out_of_order)

    def vocab_zero(h: dict[str, Any]) -> None:
        h["vocab_size"] = 0
        h["eos_token_ids"] = []

    with_header("vocab_size_zero", vocab_zero)

    _, h, b = split(golden)
    (sec,) = [s for s in h["sections"] if s["name"] == "allowed_next"]
    flipped = bytearray(b)
    flipped[sec["offset"]] ^= 0x01  # CRC left as it was
    out["section_crc_mismatch"] = join(pre, h, bytes(flipped))
    return out


def _decode(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray], int]:
    pre, header, body = split(data)
    arrays = {}
    for sec in header.pop("sections"):
        arrays[sec["name"]] = np.frombuffer(
            body, dtype=np.dtype(sec["dtype"]), count=sec["count"], offset=sec["offset"]
        ).copy()
    return header, arrays, pre[1]


def _encode(header: dict[str, Any], arrays: dict[str, np.ndarray], version: int) -> bytes:
    """The container's own writer: every offset and CRC recomputed."""
    from triec.artifact import container

    return container.encode(dict(header), [(n, a.dtype.str, a) for n, a in arrays.items()], version)


def schema_cases(schema: bytes, d19: bytes) -> dict[str, bytes]:
    """One broken rule each for the version-3 schema layout and the first schema layout."""
    out: dict[str, bytes] = {}

    def case(name: str, source: bytes, edit: Callable[[dict[str, Any], dict[str, np.ndarray]], None]) -> None:
        header, arrays, version = _decode(source)
        edit(header, arrays)
        out[name] = _encode(header, arrays, version)

    case("schema_no_slots", schema, lambda h, a: h["schema"].update(num_slots=0))
    case("schema_two_starts", schema, lambda h, a: h["schema"].update(start_slot=0))
    case("schema_unknown_engine", schema, lambda h, a: h["schema"].update(engine="outlines-core"))
    case("schema_version_3_masks", schema, lambda h, a: h.update(format="triec-masks"))
    case("schema_entry_leaf_out_of_range", schema, lambda h, a: a["entry_leaf"].__setitem__(0, 1000))
    case("schema_group_token_eos", schema, lambda h, a: a["group_tokens"].__setitem__(0, 50256))
    case(
        "schema_trie_target_out_of_range",
        schema,
        lambda h, a: a["group_target"].__setitem__(np.flatnonzero(a["group_kind"] == 0)[0], 10_000),
    )
    case("schema_held_slot_out_of_range", schema, lambda h, a: a["grammar_slots"].__setitem__(0, 9))
    case("schema_info_not_msgpack", schema, lambda h, a: a["info"].__setitem__(0, 0xC1))
    case("schema_counts_disagree", schema, lambda h, a: a["slot_table"].__setitem__(3, a["slot_table"][3] + 1))
    case(
        "schema_group_tokens_not_ascending",
        schema,
        lambda h, a: a["group_tokens"].__setitem__(slice(0, 2), a["group_tokens"][:2][::-1].copy()),
    )
    header, arrays, version = _decode(schema)
    flipped = bytearray(_encode(header, arrays, version))
    _, h, body = split(bytes(flipped))
    (sec,) = [s for s in h["sections"] if s["name"] == "grammar_text"]
    data_start = len(flipped) - len(body)
    flipped[data_start + sec["offset"] + 1] ^= 0x01  # CRC left as it was; still UTF-8
    out["schema_section_crc_mismatch"] = bytes(flipped)
    case("d19_entry_row_out_of_range", d19, lambda h, a: a["entry_row"].__setitem__(0, 0))
    case(
        "d19_continuation_sha256_mismatch",
        d19,
        lambda h, a: h["schema"].update(continuation_sha256="sha256:" + "0" * 64),
    )
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    golden = GOLDEN.read_bytes()
    made = cases(golden)
    made.update(schema_cases(SCHEMA_GOLDEN.read_bytes(), D19_GOLDEN.read_bytes()))
    for name, data in made.items():
        (OUT / f"{name}.triec").write_bytes(data)
    print(f"wrote {len(made)} files to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
