"""triec's version, in one place: pyproject.toml reads it, and every artifact records it (``triec_version``)."""

__version__ = "0.1.0"
