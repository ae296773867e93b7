"""Plausible wrong solutions of sheet s1 (exercises/s1.md); the format is in __init__.py."""

MUTATIONS = [
    (
        "task1_1",
        "a dead byte does not end the walk (rows[-1] is the last row)",
        "    if state < 0:\n        return -1\n",
        "",
    ),
    ("task1_1", "state 0 taken for the dead state", "if state < 0:", "if state <= 0:"),
    (
        "task1_1",
        "an empty token taken for a dead walk",
        "rows = self._rows\n",
        "rows = self._rows\nif not data:\n    return -1\n",
    ),
    ("task1_1", "only the first byte walked", "for b in data:", "for b in data[:1]:"),
    ("task1_2", "no `seen` check: the worklist never empties", "if end not in seen:", "if True:"),
    (
        "task1_2",
        "only the first of several tokens with the same bytes",
        "for token_id in token_ids:\n        tokens[token_id] = end\n",
        "tokens[token_ids[0]] = end\n",
    ),
    ("task1_2", "dead walks kept", "    if end < 0:\n        continue\n", ""),
    ("task1_2", "new states never queued", "        worklist.append(end)\n", ""),
    ("task1_3", "the mask inverted (True = forbidden)", "return row", "return ~row"),
    (
        "task1_3",
        "as wide as the tokenizer, not the (padded) logits",
        "torch.zeros(self.ctx.vocab_size,",
        "torch.zeros(len(self.ctx.tokenizer.token_bytes),",
    ),
    (
        "task1_3",
        "EOS left out of the allowed set",
        "allowed = grammar.fsm.index.allowed_token_ids(grammar.state)",
        "allowed = [t for t in grammar.fsm.index.allowed_token_ids(grammar.state)\n"
        "           if t != grammar.fsm.index.eos_token_id]",
    ),
    ("task1_3", "an integer row, not a bool one", "dtype=torch.bool", "dtype=torch.long"),
    ("task1_4", "the allowed tokens masked instead of the others", "masked_fill_(~row,", "masked_fill_(row,"),
    ("task1_4", "an all-False row sampled from instead of aborted", "if not bool(row.any()):", "if False:"),
    ("task1_4", "forbidden logits set to 0, not -inf", 'float("-inf")', "0.0"),
    (
        "task1_4",
        "every row masked with the first request's state",
        "self.allowed_mask(req.grammar)",
        "self.allowed_mask(reqs[0].grammar)",
    ),
    (
        "task1_5",
        "EOS moves the state to -1 (the state must stay)",
        '    req.finish("stop", matched=token_id)\n',
        '    g.state = -1\n    req.finish("stop", matched=token_id)\n',
    ),
    ("task1_5", "a complete match does not finish by itself", "elif g.fsm.is_complete(g.state):", "elif False:"),
    (
        "task1_5",
        "finishes in any accepting state (may stop is not must stop)",
        "elif g.fsm.is_complete(g.state):",
        "elif index.is_final(g.state):",
    ),
    ("task1_5", "EOS finish does not say it matched EOS", "matched=token_id", "matched=None"),
    ("task1_5", "a forbidden token does not abort", 'req.finish("abort", AbortKind.GRAMMAR,', 'req.finish("stop",'),
    # Issue 32, mistakes the earlier tests let through, by class. Inputs outside the finite
    # examples (loops back to the start state 0, fixed adversarial trigger sets):
    ("task1_2", "state 0 taken for a dead walk (tokens back to the start dropped)", "if end < 0:", "if end <= 0:"),
    (
        "task1_5",
        "state 0 taken for the dead state (a loop back to the start aborts)",
        "if g.state < 0:",
        "if g.state <= 0:",
    ),
    # Student 126's wrong solutions that passed (2026-12-05), each with the test that catches it now.
    (
        "task1_3",
        "rows kept by state number alone (two regexes share state numbers)",
        "row = torch.zeros(self.ctx.vocab_size, dtype=torch.bool)\nallowed = grammar.fsm.index.allowed_token_ids(grammar.state)\n"
        "if allowed:\n    row[torch.tensor(allowed, dtype=torch.long)] = True\nreturn row",
        'cache = self.__dict__.setdefault("_rows_by_state", {})\nif grammar.state not in cache:\n'
        "    row = torch.zeros(self.ctx.vocab_size, dtype=torch.bool)\n"
        "    allowed = grammar.fsm.index.allowed_token_ids(grammar.state)\n"
        "    if allowed:\n        row[torch.tensor(allowed, dtype=torch.long)] = True\n"
        "    cache[grammar.state] = row\nreturn cache[grammar.state]",
    ),
    # Student 12's wrong solutions that passed (2026-12-05), each with the test that catches it now.
    (
        "task1_1",
        "the numpy table read (numpy integers leak into the index)",
        "state = rows[state][b]",
        "state = self.table[state, b]",
    ),
    ("task1_2", "the progress bar's total never grown (the bar overruns a total of 1)", "        bar.total += 1\n", ""),
    (
        "task1_3",
        "one row per (regex, state) cached and handed out again (a caller's in-place edit corrupts it)",
        "row = torch.zeros(self.ctx.vocab_size, dtype=torch.bool)\nallowed = grammar.fsm.index.allowed_token_ids(grammar.state)\n"
        "if allowed:\n    row[torch.tensor(allowed, dtype=torch.long)] = True\nreturn row",
        'cache = self.__dict__.setdefault("_rows", {})\nkey = (grammar.fsm.regex, grammar.state)\nif key not in cache:\n'
        "    row = torch.zeros(self.ctx.vocab_size, dtype=torch.bool)\n"
        "    allowed = grammar.fsm.index.allowed_token_ids(grammar.state)\n"
        "    if allowed:\n        row[torch.tensor(allowed, dtype=torch.long)] = True\n"
        "    cache[key] = row\nreturn cache[key]",
    ),
    (
        "task1_3",
        "one buffer refilled and returned by every call",
        "row = torch.zeros(self.ctx.vocab_size, dtype=torch.bool)\n",
        'row = self.__dict__.setdefault("_row", torch.zeros(self.ctx.vocab_size, dtype=torch.bool))\nrow.zero_()\n',
    ),
    (
        "task1_5",
        "EOS in a state that does not accept aborts instead of stopping",
        '    req.finish("stop", matched=token_id)\n',
        "    if not index.is_final(g.state):\n"
        '        req.finish("abort", AbortKind.GRAMMAR, message=f"EOS is not allowed in state {g.state}")\n'
        "        return\n"
        '    req.finish("stop", matched=token_id)\n',
    ),
    (
        "task1_2",
        "visited = the walked states, not the queued ones (a state queued twice is walked twice)",
        "    if end not in seen:\n        seen.add(end)\n",
        "    if end not in state_to_tokens and end != state:\n",
    ),
    # An instructor's fake class (2026-12-05): three wrong solutions of their own invention.
    (
        "task1_3",
        "EOS allowed in every state (the model may always stop)",
        "return row",
        "row[grammar.fsm.index.eos_token_id] = True\nreturn row",
    ),
    # Stranger 15's (2026-12-06): an added mask makes nan of a forbidden +inf logit.
    (
        "task1_4",
        "the mask added (0 or -inf), not filled in: a forbidden +inf logit becomes nan",
        'logits[i].masked_fill_(~row, float("-inf"))',
        'logits[i] += torch.where(row, 0.0, float("-inf")).to(logits.dtype)',
    ),
    # (a stranger's mistakes, grader honesty round 8: each passed every test of the time)
    (
        "task1_4",
        "the row never moved to the logits' device (on a GPU, masked_fill_ raises)",
        "row = self.allowed_mask(req.grammar).to(logits.device)",
        "row = self.allowed_mask(req.grammar)",
    ),
    (
        "task1_4",
        "the regex in the abort message written with repr() (its backslashes doubled)",
        "of regex {shown_regex(req.grammar.fsm.regex)}",
        "of regex {req.grammar.fsm.regex!r}",
    ),
    (
        "task1_5",
        "finished where the state accepts and allows at most two tokens, not EOS alone",
        "elif g.fsm.is_complete(g.state):",
        "elif index.is_final(g.state) and len(index.allowed_token_ids(g.state)) <= 2:",
    ),
]
