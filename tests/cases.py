"""Value sets shared by the exactness and decode-walk tests: the hard cases of issue 2."""

from __future__ import annotations

import random


def _long_value(min_bytes: int = 2048, seed: int = 7) -> str:
    """A deterministic value of at least 2 KB mixing ASCII, whitespace and multi-byte characters."""
    rng = random.Random(seed)
    parts = ["alpha", "beta_", "gamma.", " ", "  ", "\t", "é", "日本", "👩\u200d👧", "...", "x1", "Ω", "🏳️\u200d🌈"]
    out = ""
    while len(out.encode("utf-8")) < min_bytes:
        out += rng.choice(parts)
    return out


LONG = _long_value()

CASES: dict[str, list[str]] = {
    # values that are prefixes of other values: accepting states inside the trie
    "prefix_chain": ["get", "get_user", "get_user_by_id", "get_users", "g", "get_user_by_idx", "set_user"],
    # tokens here hold partial UTF-8 characters (byte-level pieces, <0xNN> byte fallback)
    "unicode": [
        "café",
        "naïve",
        "Ångström",
        "e\u0301",  # e + combining acute
        "日本",
        "日本語",
        "中文字符",
        "👩",
        "👩\u200d💻",
        "👩\u200d👩\u200d👧",
        "🏳️\u200d🌈",
        "👍🏽",
        "😀😀😀",
        "Ωmega",
        "привет",
    ],
    "whitespace": [
        " leading",
        "trailing ",
        "\ttab",
        "a\tb",
        "\u00a0nbsp",
        "a  b",
        "a b",
        "!?",
        "...",
        ".",
        " ",
        "  ",
        "\n",
        "a\nb",
        "x  ",
        "(paren)",
        '"quoted"',
    ],
    "single": ["hello_world"],
    "empty_alone": [""],
    "empty_plus": ["", "a", "ab", " ", "日", "a b"],
    # control bytes, and text that looks like special tokens or like the tokenizers' own
    # byte notation ("<0x41>", "\u2581", "\u0120"): such values must be spelled with ordinary
    # tokens, and EOS must never be allowed in the middle of "<|endoftext|>"
    "edge_bytes": [
        "\x00",
        "a\x00b",
        "\r\n",
        "\x7f",
        "<|endoftext|>",
        "<|im_end|>",
        "</s>",
        "<unk>",
        "<0x41>",
        "\u2581",
        "\u2581x",
        "\u0120",
        "A",
    ],
    # multi-block LCPs: values sharing 1000 / 1500 / 2048+ bytes
    "long_2kb": [LONG, LONG[:1000], LONG + "!", LONG[:1500] + "Z", "short"],
}
