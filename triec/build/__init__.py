"""Compiling: values and a vocabulary in, a :class:`~triec.runtime.table.MaskTable` out.

* :mod:`~triec.build.values`: reading values files (lines, JSON arrays, ``enum`` fragments, flat schemas);
* :mod:`~triec.build.json_schema`: the flat object schemas whose instances are a finite set;
* :mod:`~triec.build.keysort`: sorting and deduplicating values held in one byte buffer, with their LCPs;
* :mod:`~triec.build.walk`: the fast compile, every allowed (state, token, next) triple in rounds;
* :mod:`~triec.build.reference`: the simple pyahocorasick compile and the brute-force definition;
* :mod:`~triec.build.compile`: ``triec.compile`` and ``triec.compile_json_schema``.
"""
