"""The compiler: values and a vocabulary in, a :class:`~triec.runtime.table.MaskTable` out.

* :mod:`~triec.compiler.values`: reading values files (lines, JSON arrays, ``enum`` fragments, flat schemas);
* :mod:`~triec.compiler.json_schema`: the flat object schemas whose instances are a finite set;
* :mod:`~triec.compiler.keysort`: sorting and deduplicating values held in one byte buffer, with their LCPs;
* :mod:`~triec.compiler.walk`: the fast compile, every allowed (state, token, next) triple in rounds;
* :mod:`~triec.compiler.canonical`: tables of each value's canonical tokenization (a trie of token ids);
* :mod:`~triec.compiler.reference`: the simple pyahocorasick compile and the brute-force definition;
* :mod:`~triec.compiler.entry`: the entry points, ``triec.compile`` and ``triec.compile_json_schema``.

Named ``compiler``, not ``build``: linters, formatters and .gitignore templates skip every folder called
``build``. ``triec.compiler`` was a module in 0.1: its names resolve here on first use, importing nothing before.
"""

from triec import _compat

_OLD_NAMES = {
    "CompileStats": "triec.compiler.entry",
    "IMPLEMENTATIONS": "triec.compiler.entry",
    "MAX_VALUE_BYTES": "triec.compiler.entry",
    "SMALL_SET": "triec.compiler.entry",
    "TINY_SET": "triec.compiler.entry",
    "compile": "triec.compiler.entry",
    "compile_json_schema": "triec.compiler.entry",
    "compile_keys": "triec.compiler.entry",
    "compile_sorted": "triec.compiler.entry",
    "mask_table": "triec.compiler.entry",
    "prepare_buffer": "triec.compiler.entry",
    "prepare_values": "triec.keys",
    "spell_all": "triec.keys",
}

__getattr__, __dir__ = _compat.reexport(__name__, _OLD_NAMES)
__all__ = sorted(_OLD_NAMES)
