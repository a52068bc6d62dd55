"""Seeded synthetic value sets: the paper's tool names, and product paths.

Deterministic for a given (k, seed), so tests, benchmarks and docs all talk
about the same sets.
"""

from __future__ import annotations

import random

NAMESPACES = ("slack", "github", "stripe", "aws", "google", "microsoft", "salesforce", "jira", "notion", "discord")
ACTIONS = ("get", "create", "update", "delete", "list", "search", "send", "fetch", "upload", "download")
RESOURCES = (
    "user",
    "message",
    "file",
    "project",
    "issue",
    "payment",
    "invoice",
    "document",
    "channel",
    "repository",
)


TOOL_NAMES_MAX = 10_000_000
"""Past this, drawing without repeats slows down: 110M distinct tool names exist (64M product names)."""
PRODUCT_NAMES_MAX = 10_000_000


def tool_names(k: int, seed: int = 0) -> list[str]:
    """``k`` distinct tool names: ``namespace.action_resource`` (1,000) and ``action_resource`` (100).

    Up to 1,100 they are a seeded sample of that base set; past it, names get a
    seeded numeric suffix (``slack.get_user_4821``), 70% of them namespaced.
    """
    if not 0 <= k <= TOOL_NAMES_MAX:
        raise ValueError(f"k must be in 0..{TOOL_NAMES_MAX:,} (the distinct tool names there are), not {k}")
    rng = random.Random(seed)
    base = [f"{n}.{a}_{r}" for n in NAMESPACES for a in ACTIONS for r in RESOURCES]
    base += [f"{a}_{r}" for a in ACTIONS for r in RESOURCES]
    rng.shuffle(base)
    if k <= len(base):
        return base[:k]
    out = list(base)
    seen = set(out)
    while len(out) < k:
        name = f"{rng.choice(ACTIONS)}_{rng.choice(RESOURCES)}_{rng.randrange(100_000)}"
        if rng.random() < 0.7:
            name = f"{rng.choice(NAMESPACES)}.{name}"
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


CATEGORIES = ("Electronics", "Home & Kitchen", "Sports", "Toys", "Beauty", "Garden", "Automotive", "Books")
BRANDS = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Wonka", "Tyrell", "Cyberdyne")
ADJECTIVES = ("Classic", "Deluxe", "Ultra", "Compact", "Pro", "Eco", "Smart", "Mini", "Max", "Lite")
COLORS = ("Red", "Blue", "Black", "White", "Green", "Silver", "Gold", "Pink")


def product_names(k: int = 1500, seed: int = 0) -> list[str]:
    """``k`` distinct product paths: ``Category > Brand > Adjective 1234 > Color``."""
    if not 0 <= k <= PRODUCT_NAMES_MAX:
        raise ValueError(f"k must be in 0..{PRODUCT_NAMES_MAX:,}, not {k}")
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < k:
        name = (
            f"{rng.choice(CATEGORIES)} > {rng.choice(BRANDS)} > "
            f"{rng.choice(ADJECTIVES)} {rng.randrange(10_000)} > {rng.choice(COLORS)}"
        )
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


WIDE_CODES_MAX = 10_000_000


def wide_codes(k: int, seed: int = 0) -> list[str]:
    """``k`` distinct ICD-10-CM style codes (``A00``, ``A00.0``, ``S72.001A``): wide and shallow.

    A letter, a digit, a digit or letter, then mostly a dot and 1-4 digits or
    letters, some with a 7th-character extension (A, D, S). Thousands of nodes
    share each depth and digit runs keep several vocabulary prefixes alive at
    each: the shape that broke the walk in issue 9, unlike the tool names.
    Generated with numpy (a million codes in well under a second), seeded.
    """
    if not 0 <= k <= WIDE_CODES_MAX:
        raise ValueError(f"k must be in 0..{WIDE_CODES_MAX:,}, not {k}")
    import numpy as np

    rng = np.random.default_rng(seed)
    alphabets = [
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        "0123456789" * 3 + "ABCDEFGHJKLMNPQRSTVWXYZ",
        ".",
        *["0123456789" * 4 + "ABCDEFGHJKX"] * 4,
        "ADS",
    ]
    tables = [np.frombuffer(a.encode(), dtype=np.uint8).astype(np.uint32) for a in alphabets]
    out: dict[str, None] = {}
    while len(out) < k:
        n = max(1024, int(1.3 * (k - len(out))))
        chars = np.zeros((n, len(tables)), dtype=np.uint32)
        for j, t in enumerate(tables):
            chars[:, j] = t[rng.integers(0, t.shape[0], n)]
        sub = rng.integers(1, 5, n)  # characters after the dot
        sub[rng.random(n) >= 0.93] = 0  # a bare category: no dot
        ext = (sub == 4) & (rng.random(n) < 0.6)
        width = np.where(sub > 0, 4 + sub, 3) + ext
        chars[np.arange(len(tables)) >= width[:, None]] = 0
        for code in chars.view(f"<U{len(tables)}").ravel().tolist():
            out[code] = None
            if len(out) == k:
                break
    return list(out)


TITLES_MAX = 20_000_000
ONSETS = (
    "",
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "z",
    "br",
    "ch",
    "st",
    "th",
    "tr",
    "gr",
)
NUCLEI = ("a", "e", "i", "o", "u", "ai", "ou", "ea")
CODAS = ("", "", "", "n", "r", "l", "s", "m", "nd", "rt")
QUALIFIERS = ("film", "album", "river", "band", "novel", "song", "village", "footballer", "TV series", "disambiguation")


def titles(k: int, seed: int = 7) -> list[str]:
    """``k`` distinct Wikipedia-like titles: 1-3 capitalized words of 1-4 random syllables, 40% of them with a
    parenthesized qualifier (``Brandel Tovi (film)``), about 25 bytes each: sets that share few prefixes (issue
    43's entity titles), so most trie states lie on tails (one value below). ``titles(k)`` is the first ``k`` of
    ``titles(k')`` for any ``k' > k``.

    Built as a byte matrix with numpy (a million titles in about a second), seeded.
    """
    if not 0 <= k <= TITLES_MAX:
        raise ValueError(f"k must be in 0..{TITLES_MAX:,}, not {k}")
    import numpy as np

    def padded(texts: list[str]) -> np.ndarray:
        width = max(len(t) for t in texts)
        return np.array([list(t.encode().ljust(width, b"\0")) for t in texts], dtype=np.uint8)

    syllables = padded([o + n + c for o in ONSETS for n in NUCLEI for c in CODAS])
    qualifiers = padded([f" ({q})" for q in QUALIFIERS])
    rng = np.random.default_rng(seed)
    out: dict[str, None] = {}
    while len(out) < k:
        n = 1 << 16  # a fixed batch: titles(k) is the first k of titles(k') for every k' > k
        words = rng.integers(1, 4, n)
        columns = []
        for w in range(3):
            used = words > w
            if w:
                columns.append(np.where(used, ord(" "), 0).astype(np.uint8)[:, None])
            count = rng.integers(1, 5, n)
            for s in range(4):
                pick = syllables[rng.integers(0, syllables.shape[0], n)]
                pick[~(used & (count > s))] = 0
                if s == 0:  # the word's first letter, capitalized (syllables are left-aligned, lower-case ASCII)
                    pick[:, 0] = np.where(pick[:, 0] > 0, pick[:, 0] - 32, 0)
                columns.append(pick)
        tail = qualifiers[rng.integers(0, qualifiers.shape[0], n)]
        tail[rng.random(n) >= 0.4] = 0
        columns += [tail, np.full((n, 1), ord("\n"), dtype=np.uint8)]
        flat = np.concatenate(columns, axis=1).reshape(-1)
        for title in flat[flat != 0].tobytes().decode().split("\n")[:-1]:
            out[title] = None
            if len(out) == k:
                break
    return list(out)
