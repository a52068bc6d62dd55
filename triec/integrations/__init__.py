"""Adapters to serving frameworks; each submodule imports its framework, this package imports nothing."""
