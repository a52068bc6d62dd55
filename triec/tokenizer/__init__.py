"""From a tokenizer to the exact bytes of every token id: what a table is compiled for.

* :mod:`~triec.tokenizer.source`: finding a tokenizer (bundled, a path, a Hugging Face repo id);
* :mod:`~triec.tokenizer.token_bytes`: the bytes each id emits (byte-level BPE, SentencePiece);
* :mod:`~triec.tokenizer.cache`: those bytes cached on disk by the tokenizer file's sha256;
* :mod:`~triec.tokenizer.vocabulary`: ``Vocabulary``, bytes per id, EOS ids, mask width, fingerprint;
* :mod:`~triec.tokenizer.automaton`: the vocabulary's token trie, built once per fingerprint (disk-cached);
* :mod:`~triec.tokenizer.resolve`: the tokenizer a table records, found again and checked against it.
"""
