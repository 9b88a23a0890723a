"""Deterministic English-ish word list and text shared by make_model.py (training the
tokenizer, vLLM venv) and vllm_server.py (building long prompts, test venv).

Standard library only. The tokenizer built by make_model.py is a WordLevel tokenizer with a
whitespace/punctuation pre-tokenizer trained on :func:`text`, so every word of :data:`WORDS`
and every punctuation mark of :data:`PUNCT` is exactly one token.
"""
from __future__ import annotations

import random

COMMON = (
    "the of and to in is was he for it with as his on be at by had are but from or have an "
    "they which one you were her all she there would their we him been has when who will more "
    "no if out so said what up its about into than them can only other new some could time "
    "these two may then do first any my now such like our over man me even most made after "
    "also did many before must through back years where much your way well down should "
    "because each just those people how too little state good very make world still own see "
    "men work long get here between both life being under never day same another know while "
    "last might us great old year off come since against go came right used take three engine "
    "server model request token batch queue cache metric health check stuck idle busy restart "
    "watchdog prompt answer slow fast river stone garden window market winter summer morning "
    "evening letter story music paper water light house city field mountain"
).split()

_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
           "z", "br", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr", "ch")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "io")
_CODAS = ("", "n", "r", "s", "t", "l", "m", "nd", "st", "ck")

PUNCT = (".", ",")


def _make_words(n_extra: int = 3000, seed: int = 20240601) -> tuple[str, ...]:
    rng = random.Random(seed)
    seen = set(COMMON)
    words = list(COMMON)
    while len(words) < len(COMMON) + n_extra:
        w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                    for _syl in range(rng.choice((1, 2, 2, 3))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return tuple(words)


#: All words the tokenizer knows (each one token). About 3,200.
WORDS: tuple[str, ...] = _make_words()


def text(n_words: int, seed: int = 0) -> str:
    """English-ish text of exactly ``n_words`` words (plus '.'/',' marks, each one token)."""
    rng = random.Random(seed)
    out = []
    sentence = 0
    for i in range(n_words):
        w = rng.choice(WORDS)
        out.append(w)
        sentence += 1
        if sentence >= 8 and rng.random() < 0.2:
            out[-1] = w + "."
            sentence = 0
        elif sentence >= 3 and rng.random() < 0.05:
            out[-1] = w + ","
    return " ".join(out)


def words_only(n_words: int, seed: int = 0) -> str:
    """``n_words`` known words separated by single spaces: exactly ``n_words`` tokens."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _word in range(n_words))
