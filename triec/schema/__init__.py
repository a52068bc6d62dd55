"""Finite sets inside larger outputs: each large enum (or tool name, or tag begin) served by its own trie, the
structure around them by a grammar engine, exactly (docs/decisions.md D23).

* :mod:`~triec.schema.locate`: which enums of a JSON Schema a trie can serve, and why the others stay in the engine;
* :mod:`~triec.schema.shape`: the literal prefix and tail of a schema whose first property is the enum;
* :mod:`~triec.schema.tools`: tool registries and the call formats (vllm, hermes, llama3, object);
* :mod:`~triec.schema.tags`: xgrammar structural tags whose begins a trie can serve;
* :mod:`~triec.schema.grammar`: the engines (llguidance, xgrammar) behind one driver, and the grammars they run;
* :mod:`~triec.schema.slot`: a slot: one set's trie and every token crossing its edges, classified;
* :mod:`~triec.schema.compile`: ``triec.compile_schema``, ``compile_tools``, ``compile_structural_tag``;
* :mod:`~triec.schema.parts`: ``Grammar`` and ``SchemaParts``, what the matchers read of a table;
* :mod:`~triec.schema.matcher`: ``SchemaMatcher`` per sequence, ``SchemaMaskWriter`` per batch;
* :mod:`~triec.schema.table`: ``SchemaTable``: slots, grammars, where the output starts (composes the matchers);
* :mod:`~triec.schema.artifact`: the ``triec-schema`` artifact: its layout, writer, reader, load checks (and the
  first layout, read only), one module each.
"""
