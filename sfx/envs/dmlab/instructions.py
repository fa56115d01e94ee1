"""Language instructions of DMLab's ``language_*`` levels as fixed-length integer token arrays.

With ``--dmlab_use_instructions`` the ``dmlab_`` envs observe ``obs['instr']`` =
``Box(0, vocab_size - 1, (max_len,), int32)`` made by :class:`InstructionTokenizer`; sfx's model
reads it with an embedding + GRU (0 is padding and is skipped) whose output is concatenated with
the image encoder's, as IMPALA does on DMLab-30 (``sfx.models.encoders.TokenEncoder``).

Tokens are words hashed into a fixed vocabulary, so no vocabulary file has to be built or shipped,
the same word maps to the same id in every process and every run (a keyed hash, not Python's
randomised ``hash``), and unseen words still get an id. DMLab-30 instructions use a few hundred
distinct words, so with the default 1000 ids collisions are rare and merely merge two words.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

DEFAULT_VOCAB_SIZE = 1000
DEFAULT_MAX_LEN = 16
PAD_ID = 0

_WORD = re.compile(r"[a-z0-9]+")


class InstructionTokenizer:
    """Instruction string -> ``int32[max_len]`` word ids in ``[1, vocab_size)``, 0-padded.

    Words are lowercase runs of letters and digits; longer instructions are cut at ``max_len`` words.

    Args:
        vocab_size: number of ids including the padding id 0 (>= 2).
        max_len: tokens per instruction (>= 1).
    """

    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE, max_len: int = DEFAULT_MAX_LEN) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2 (id 0 is padding), got {vocab_size}")
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.vocab_size = int(vocab_size)
        self.max_len = int(max_len)
        self._cache: dict[str, int] = {}

    def word_id(self, word: str) -> int:
        """The id of one (already lowercased) word, in ``[1, vocab_size)``."""
        wid = self._cache.get(word)
        if wid is None:
            digest = hashlib.blake2s(word.encode("utf-8"), digest_size=8).digest()
            wid = 1 + int.from_bytes(digest, "little") % (self.vocab_size - 1)
            self._cache[word] = wid
        return wid

    def words(self, instruction: str) -> list[str]:
        """The words of ``instruction`` (lowercased, punctuation dropped), all of them."""
        return _WORD.findall(instruction.lower())

    def __call__(self, instruction: str) -> np.ndarray:
        """``int32[max_len]``: the first ``max_len`` word ids, then zeros."""
        out = np.zeros(self.max_len, dtype=np.int32)
        for i, word in enumerate(self.words(instruction)[: self.max_len]):
            out[i] = self.word_id(word)
        return out
