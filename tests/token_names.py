"""Token ids as a failure message shows them: "['20' (id 397), EOS (id 3)]".

    from token_names import token_list
    token_list(ids, lambda t: repr(vocab[t]))

Each test file knows its own vocabulary (a toy list of strings, a bytes table, a real
tokenizer), so it passes `name_of`, which turns one id into its shown text; the list's
shape is the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


def token_list(ids: Iterable[int], name_of: Callable[[int], str], most: int | None = None) -> str:
    """Each id as "name (id N)", `most` of them at most (the rest counted)."""
    tokens = [int(t) for t in ids]
    shown = tokens if most is None else tokens[:most]
    more = f", and {len(tokens) - len(shown)} more" if len(shown) < len(tokens) else ""
    return "[" + ", ".join(f"{name_of(t)} (id {t})" for t in shown) + more + "]"
