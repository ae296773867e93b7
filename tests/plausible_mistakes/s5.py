"""Plausible wrong solutions of sheet s5 (exercises/s5.md); the format is in __init__.py."""

MUTATIONS = [
    (
        "task5_1",
        "the state pushed onto `history` before a refused token raises",
        "nxt = index.next_state(self.state, token_id)\nif nxt < 0:",
        "self.history.append(self.state)\nnxt = index.next_state(self.state, token_id)\nif nxt < 0:",
    ),
    (
        "task5_1",
        "EOS not recorded in `history` (rollback over it breaks)",
        "    self.history.append(self.state)\n    self.terminated = True\n",
        "    self.terminated = True\n",
    ),
    (
        "task5_1",
        "terminated in any accepting state",
        "self.terminated = self.fsm.is_complete(nxt)",
        "self.terminated = index.is_final(nxt)",
    ),
    (
        "task5_1",
        "EOS accepted where the match is not complete",
        "if token_id == index.eos_token_id and index.is_final(self.state):",
        "if token_id == index.eos_token_id:",
    ),
    (
        "task5_1",
        "the mask row inverted (True = blocked, as some libraries use)",
        "vocab_mask[idx] = self.fsm.state_row[self.state]",
        "vocab_mask[idx] = ~self.fsm.state_row[self.state]",
    ),
    (
        "task5_2",
        "minItems ignored",
        "if min_items == 0:\n        elements = _repeat(elements, 0, 1)",
        "elements = _repeat(elements, 0, 1)",
    ),
    (
        "task5_2",
        "maxItems off by one",
        "if max_items is not None and i >= max_items:",
        "if max_items is not None and i > max_items:",
    ),
    (
        "task5_2",
        "no whitespace around the elements",
        "return OPEN_BRACKET + ws + elements + ws + CLOSE_BRACKET",
        "return OPEN_BRACKET + elements + CLOSE_BRACKET",
    ),
    (
        "task5_2",
        "an impossible array allows the empty list",
        "    return None\n",
        "    return OPEN_BRACKET + CLOSE_BRACKET\n",
    ),
    (
        "task5_2",
        "maxItems below the prefix's length does not cut the prefix",
        "if max_items is not None and i >= max_items:\n        return EPSILON\n",
        "if i >= len(prefix) and max_items is not None and i >= max_items:\n        return EPSILON\n",
    ),
    (
        "task5_3",
        "a head that matches the empty string never skipped (a?b cannot start with b)",
        "if not head.nullable:\n            break",
        "if True:\n            break",
    ),
    ("task5_3", "a repetition's lower bound not lowered (a{2} never ends)", "max(node.low - 1, 0)", "node.low"),
    (
        "task5_3",
        "a repetition's upper bound not lowered (a{0,2} reads any number of a)",
        "None if node.high is None else node.high - 1",
        "node.high",
    ),
    (
        "task5_3",
        "the rest of a repetition dropped after one iteration",
        "out = self.concat(self.derivative(body, byte), rest)",
        "out = self.derivative(body, byte)",
    ),
    (
        "task5_3",
        "the tail of a sequence dropped",
        "options.append(self.concat(self.derivative(head, byte), tail))",
        "options.append(self.derivative(head, byte))",
    ),
    (
        "task5_3",
        "a sequence's derivative recursing into its tail (deep regexes overflow the stack)",
        "options, x = [], node\n    while True:\n        if x.kind != CONCAT:\n"
        "            options.append(self.derivative(x, byte))\n            break\n        head, tail = x.parts\n"
        "        options.append(self.concat(self.derivative(head, byte), tail))\n        if not head.nullable:\n"
        "            break\n        x = tail\n    out = self.alt(options)",
        "head, tail = node.parts\n    out = self.concat(self.derivative(head, byte), tail)\n    if head.nullable:\n"
        "        out = self.alt([out, self.derivative(tail, byte)])",
    ),
    ("task5_1", "state 0 taken for a refusal (a token back to the start raises)", "if nxt < 0:", "if nxt <= 0:"),
    (
        "task5_3",
        "an unbounded repetition's lower bound dropped (a{2,} read as a*)",
        "max(node.low - 1, 0)",
        "0 if node.high is None else max(node.low - 1, 0)",
    ),
    (
        "task5_1",
        "EOS moves the matcher to a sentinel state -1 (the next fill_vocab_mask raises KeyError)",
        "    self.terminated = True\n    return\n",
        "    self.terminated = True\n    self.state = -1\n    return\n",
    ),
    (
        "task5_2",
        "a bounded repeat unrolled into one optional group per element (maxItems 1000: 1000 groups)",
        "return _repeat(sep + items, max(min_items - i, 0), hi)",
        "return _concat(*[sep + items] * max(min_items - i, 0), _repeat(sep + items, 0, None) if hi is None\n"
        "        else _concat(*[_repeat(sep + items, 0, 1)] * (hi - max(min_items - i, 0))))",
    ),
    # A stranger's plausible mistakes that the tests let through (2026-12-04), and the fixed
    # input that now catches each: `ab?` (EOS and one token after `a`), a reused mask buffer,
    # `[  ]` under maxItems 0, and `_eliminate` over two states.
    (
        "task5_1",
        "terminated: final with at most two tokens allowed (may stop taken for must stop)",
        "self.terminated = self.fsm.is_complete(nxt)",
        "self.terminated = index.is_final(nxt) and len(index.allowed_token_ids(nxt)) <= 2",
    ),
    (
        "task5_1",
        "fill ANDs the state's row into the buffer instead of writing it",
        "vocab_mask[idx] = self.fsm.state_row[self.state]",
        "vocab_mask[idx] &= self.fsm.state_row[self.state]",
    ),
    (
        "task5_2",
        "maxItems 0: one whitespace inside []",
        "elements = EPSILON",
        "return OPEN_BRACKET + ws + CLOSE_BRACKET",
    ),
    # Student 05's wrong solutions of task 5_1 (2026-12-05): each already failed, kept here so
    # that a fixed input goes on catching it (the stage's advance catches only GrammarError;
    # `bitmasks` rows are numbered in sorted state order, not by state id).
    (
        "task5_1",
        "a refused token raises ValueError, not GrammarError (the stage's advance lets it escape)",
        'raise GrammarError(f"token {token_id} is not allowed',
        'raise ValueError(f"token {token_id} is not allowed',
    ),
    (
        "task5_1",
        "fill indexes `bitmasks` by the state id instead of `state_row`",
        "vocab_mask[idx] = self.fsm.state_row[self.state]",
        "vocab_mask[idx] = self.fsm.bitmasks[self.state]",
    ),
    (
        "task5_2",
        "whitespace before each comma too (`[0 ,0]` accepted)",
        "ws, sep = self.ws, self.sep",
        "ws, sep = self.ws, self.ws + self.sep",
    ),
    (
        "task5_1",
        "the refusal names the state the index answered (-1), not the matcher's",
        'raise GrammarError(f"token {token_id} is not allowed in state {self.state}")',
        'raise GrammarError(f"token {token_id} is not allowed in state {nxt}")',
    ),
    (
        "task5_1",
        "completeness asks for the state's token list before is_final (every step lists a JSON string's vocabulary)",
        "self.terminated = self.fsm.is_complete(nxt)  # accepting, and only EOS can follow",
        "self.terminated = index.allowed_token_ids(nxt) == [index.eos_token_id] and index.is_final(nxt)",
    ),
    (
        "task5_1",
        "completeness read off the token list alone (right, but every state's tokens listed at every step)",
        "self.terminated = self.fsm.is_complete(nxt)  # accepting, and only EOS can follow",
        "self.terminated = index.allowed_token_ids(nxt) == [index.eos_token_id]",
    ),
    (
        "task5_1",
        "the row written from idx to the end of the mask (vocab_mask[idx:]: the later rows overwritten)",
        "vocab_mask[idx] = self.fsm.state_row[self.state]",
        "vocab_mask[idx:] = self.fsm.state_row[self.state]",
    ),
    (
        "task5_2",
        "a prefix element optional from the one before min_items (minItems 2 of a 2-element prefix: [8] accepted)",
        "return more if i < min_items else _repeat(more, 0, 1)",
        "return more if i + 1 < min_items else _repeat(more, 0, 1)",
    ),
    (
        "task5_2",
        "the required elements past the prefix written out one by one (minItems: 900 is 900 copies of the element)",
        "return _repeat(sep + items, max(min_items - i, 0), hi)",
        "need = max(min_items - i, 0)\n        out = EPSILON\n        for _ in range(need):\n"
        "            out = out + sep + items\n        return out + _repeat(sep + items, 0, None if hi is None else hi - need)",
    ),
    # Stranger 15's (2026-12-06, /work/scratch/stranger15): passed the grader, each caught now.
    (
        "task5_1",
        "the move records nothing in self.terminated (is_terminated's prepare made up for it)",
        "self.state = nxt\nself.terminated = self.fsm.is_complete(nxt)  # accepting, and only EOS can follow",
        "self.state = nxt",
    ),
    # (a stranger's mistake, grader honesty round 7: it passed every test of the time)
    (
        "task5_1",
        "completeness read by listing the next state's tokens (the lazy automaton's row built in accept_token)",
        "self.terminated = self.fsm.is_complete(nxt)",
        "self.terminated = index.is_final(nxt) and list(index.allowed_token_ids(nxt)) == [index.eos_token_id]",
    ),
]
