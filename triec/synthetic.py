"""Seeded synthetic value sets: the paper's tool names, and product paths.

Deterministic for a given (k, seed), so tests, benchmarks and docs all talk
about the same sets.
"""

from __future__ import annotations

import random

NAMESPACES = ("slack", "github", "stripe", "aws", "google", "microsoft", "salesforce", "jira", "notion", "discord")
ACTIONS = ("get", "create", "update", "delete", "list", "search", "send", "fetch", "upload", "download")
RESOURCES = (
    "user", "message", "file", "project", "issue", "payment", "invoice", "document", "channel", "repository",
)  # fmt: skip


def tool_names(k: int, seed: int = 0) -> list[str]:
    """``k`` distinct tool names: ``namespace.action_resource`` (1,000) and ``action_resource`` (100).

    Up to 1,100 they are a seeded sample of that base set; past it, names get a
    seeded numeric suffix (``slack.get_user_4821``), 70% of them namespaced.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
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
