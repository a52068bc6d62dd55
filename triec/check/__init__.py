"""Checking and measuring tables: nothing a compile or a serving process imports.

* :mod:`~triec.check.paths`: a token path to every state, and bytes printed for people;
* :mod:`~triec.check.verify`: ``triec verify``, an artifact against the reference or a peer engine;
* :mod:`~triec.check.schema_verify`: a tool-schema table against an engine on the whole schema;
* :mod:`~triec.check.inspect`: ``triec inspect``, what a table holds;
* :mod:`~triec.check.bench`: ``triec bench``, triec beside the peer engines, one process per cell;
* :mod:`~triec.check.synthetic`: the seeded value sets the tests, benchmarks and docs share.
"""
