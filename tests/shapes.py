"""Adversarial set shapes for the compiler (issue 9): wide, shallow, deep, dense, prefix-heavy.

Each generator is deterministic, so a failure names a set anyone can rebuild.
The shapes are the ones real code lists and identifier sets have and that the
tool-name benchmark does not: thousands of nodes at one depth, each carrying
several live vocabulary prefixes (digit and hex runs), one node with thousands
of children, long unary chains, values nested inside values.
"""

from __future__ import annotations

import datetime
import random
import string
import uuid

from triec.synthetic.sets import titles, wide_codes


def issue_reproducer() -> list[str]:
    """The set of issue 9 (26,000 codes ``A00.0`` .. ``Z99.9``) that crashed the walk."""
    return [f"{c}{i:02d}.{j}" for c in string.ascii_uppercase for i in range(100) for j in range(10)]


def digit_strings() -> list[str]:
    """Every string of 1 to 4 digits: both ``7`` and ``0007``, 11,110 values."""
    out: list[str] = []
    for width in range(1, 5):
        out += [f"{i:0{width}d}" for i in range(10**width)]
    return out


def numbers_plain() -> list[str]:
    """0 .. 9999 without padding: values that are prefixes of ten others each."""
    return [str(i) for i in range(10_000)]


def six_digit_step7(limit: int = 1_000_000) -> list[str]:
    """Zero-padded six-digit numbers in steps of 7 below ``limit`` (the issue's gpt2 case: all 142,858)."""
    return [f"{i:06d}" for i in range(0, limit, 7)]


def icd10_like(k: int = 6_000, seed: int = 1) -> list[str]:
    """ICD-10-CM style: ``A00``, ``A00.0``, ``S72.001A``: letter, two digits, dot, 1-4 chars, suffix letters."""
    return wide_codes(k, seed)


def hex_ids(k: int = 4_000, seed: int = 2) -> list[str]:
    """Random 8-hex-digit ids, upper and lower case, plus 40-hex-digit (sha1-like) ones."""
    rng = random.Random(seed)
    out = {f"{rng.getrandbits(32):08x}" for _ in range(k)}
    out |= {f"{rng.getrandbits(32):08X}" for _ in range(k // 4)}
    out |= {f"{rng.getrandbits(160):040x}" for _ in range(k // 8)}
    return sorted(out)


def uuids(k: int = 1_500, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(k)]


def dates_and_times() -> list[str]:
    """Every date of 2023-2024, every ``HH:MM`` of a day, and some ISO timestamps."""
    day = datetime.date(2023, 1, 1)
    out = []
    while day.year < 2025:
        out.append(day.isoformat())
        day += datetime.timedelta(days=1)
    out += [f"{h:02d}:{m:02d}" for h in range(24) for m in range(60)]
    rng = random.Random(4)
    for _ in range(1_000):
        t = datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=rng.randrange(366 * 86_400))
        out.append(t.isoformat() + "Z")
    return out


def root_fan_out() -> list[str]:
    """Thousands of distinct single characters, each its own value: ASCII, Latin, Greek,
    Cyrillic, Hebrew, Arabic, Devanagari, CJK, Hangul, emoji."""
    ranges = [
        (0x21, 0x7F),
        (0xA1, 0x180),
        (0x391, 0x3CA),
        (0x400, 0x460),
        (0x5D0, 0x5EB),
        (0x621, 0x64B),
        (0x905, 0x93A),
        (0x3041, 0x3097),
        (0x4E00, 0x5600),
        (0xAC00, 0xAE00),
        (0x1F300, 0x1F650),
    ]
    return [chr(c) for lo, hi in ranges for c in range(lo, hi)]


def long_prefix_wide_end(prefix_bytes: int = 300, fan: int = 1_600) -> list[str]:
    """One long shared prefix (text, spaces and punctuation), then thousands of different endings."""
    base = ("The quick brown fox jumps over the lazy dog; " * 40)[:prefix_bytes]
    ends = [str(i) for i in range(fan // 2)] + root_fan_out()[: fan // 2]
    return [base] + [base + e for e in ends]


def nested_prefixes(depth: int = 60, fan: int = 60) -> list[str]:
    """Every prefix of one string is a value, and each has ``fan`` extensions."""
    word = "get_user_by_identifier_from_the_remote_registry_service_v2_x"[:depth]
    prefixes = [word[:i] for i in range(1, len(word) + 1)]
    return prefixes + [p + f"{j:02d}" for p in prefixes for j in range(fan)]


def whitespace_runs(n: int = 300) -> list[str]:
    """Runs of one repeated byte of every length: deep chains that tokenizers cover with long tokens."""
    return [" " * i for i in range(1, n)] + ["\n" * i for i in range(1, 80)] + ["-" * i for i in range(1, 120)]


def whole_tokens(token_bytes: tuple[bytes, ...] | list[bytes], k: int = 3_000, seed: int = 5) -> list[str]:
    """Values that are exactly one token: the longest tokens and a sample of the rest."""
    texts = []
    for b in token_bytes:
        try:
            texts.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    texts = sorted({t for t in texts if t})
    longest = sorted(texts, key=len)[-200:]
    return sorted(set(random.Random(seed).sample(texts, min(k, len(texts))) + longest))


# name -> generator; vocabulary-dependent shapes take the token bytes
SHAPES = {
    "issue_reproducer": issue_reproducer,
    "digit_strings": digit_strings,
    "numbers_plain": numbers_plain,
    "six_digit_step7_part": lambda: six_digit_step7(140_000),
    "icd10_like": icd10_like,
    "hex_ids": hex_ids,
    "uuids": uuids,
    "dates_and_times": dates_and_times,
    "root_fan_out": root_fan_out,
    "long_prefix_wide_end": long_prefix_wide_end,
    "nested_prefixes": nested_prefixes,
    "whitespace_runs": whitespace_runs,
    "entity_titles": lambda: titles(3_000),  # issue 43: little sharing, most states on tails
}
