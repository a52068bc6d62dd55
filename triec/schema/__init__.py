"""Tool-call schemas: an enum field served from a trie, then any JSON Schema run by a grammar engine.

* :mod:`~triec.schema.shape`: the accepted schema shape, split into names, literal prefix and tail, continuation;
* :mod:`~triec.schema.continuation`: the engine (llguidance, xgrammar) driven on the continuation;
* :mod:`~triec.schema.straddle`: tokens crossing a name's end into the tail or the continuation (disk-cached);
* :mod:`~triec.schema.compile`: ``triec.compile_schema``;
* :mod:`~triec.schema.table`: ``SchemaTable``, the compiled schema;
* :mod:`~triec.schema.rows`: its precomputed (word, bits) rows;
* :mod:`~triec.schema.matcher`: ``SchemaMatcher`` per sequence, ``SchemaMaskWriter`` per batch;
* :mod:`~triec.schema.artifact`: the ``triec-schema`` artifact's extra header map and sections.
"""
