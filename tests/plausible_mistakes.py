"""The autograder's plausible wrong solutions: the mistakes students make, one entry each.

tests/test_autograder.py checks that each one fails its task's tests on a fixed input;
scripts/mutant_reruns.py reruns them with fresh hypothesis seeds. A stranger's mistake that
passed the grader is added here, with the test that now catches it.
"""

# (task, the mistake, text of the reference region as `minisglang solutions` prints it,
# what the student wrote instead). Each one must fail the task's tests on a fixed input: a
# plain test, a parametrized case or a property test's explicit `@example`.
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
    (
        "task2_1",
        "bits packed most significant first",
        "<< torch.arange(32, dtype=torch.int64)",
        "<< torch.arange(31, -1, -1, dtype=torch.int64)",
    ),
    ("task2_1", "the word count rounded down", "words = (v + 31) // 32", "words = v // 32"),
    ("task2_1", "the bits right-aligned in the last word", "padded[..., :v]", "padded[..., words * 32 - v:]"),
    ("task2_2", "bits read most significant first", "_BIT.to(mask.device)", "(31 - _BIT).to(mask.device)"),
    ("task2_2", "the padding bits kept", "[..., :vocab_size]", ""),
    ("task2_2", "no `& 1`: the arithmetic shift drags the sign bit along", ") & 1", ")"),
    ("task2_2", "the batch dimension flattened too", "bits.flatten(-2)", "bits.flatten()"),
    (
        "task2_3",
        "unconstrained rows left all-forbidden",
        "    self.all_allowed if",
        "    torch.zeros_like(self.all_allowed) if",
    ),
    (
        "task2_3",
        "finished requests masked by their state",
        "if req.grammar is None or req.finished",
        "if req.grammar is None",
    ),
    (
        "task2_3",
        "every request on the first request's FSM",
        "else req.grammar.fsm.state_row",
        "else reqs[0].grammar.fsm.state_row",
    ),
    (
        "task2_3",
        "a new tensor instead of writing into `mask`",
        "torch.stack(rows, out=mask)",
        "mask = torch.stack(rows)",
    ),
    ("task2_4", "the allowed tokens masked instead of the others", "masked_fill_(~allowed,", "masked_fill_(allowed,"),
    ("task2_4", "not in place", "logits.masked_fill_(", "logits = logits.masked_fill("),
    ("task2_4", "the mask unpacked to its full width", "logits.shape[-1])", "mask.shape[-1] * 32)"),
    ("task2_4", "a large negative number instead of -inf", 'float("-inf")', "-1e4"),
    ("task3_1", "an existing entry is replaced (compiled again)", "        return entry\n", "        pass\n"),
    ("task3_1", "a hit does not refresh the entry's LRU place", "    self.entries.move_to_end(key)\n", ""),
    (
        "task3_1",
        "a failed compile's entry replaced at the next lookup (a bad regex compiled again for every request)",
        "    if entry is not None:\n",
        "    if entry is not None and entry.error is None:\n",
    ),
    (
        "task3_1",
        "the lookup outside the lock (two threads both miss, both compile)",
        "with self.lock:  # check-and-insert must be one step, or two threads compile twice\n"
        "    entry = self.entries.get(key)\n",
        "entry = self.entries.get(key)\nwith self.lock:\n",
    ),
    ("task3_1", "the compile never started", "self.pool.submit(self._compile, key, regex, entry)\n", ""),
    (
        "task3_1",
        "no eviction at insert (failed compiles never reach _compile's, so the cache grows)",
        "    self.entries[key] = entry\n    self._evict_lru()\n",
        "    self.entries[key] = entry\n",
    ),
    (
        "task3_1",
        "evicted before the new entry is stored (one entry over the bound)",
        "    self.entries[key] = entry\n    self._evict_lru()\n",
        "    self._evict_lru()\n    self.entries[key] = entry\n",
    ),
    ("task3_2", "the timeout ignored", "entry.event.wait(timeout)", "entry.event.wait()"),
    # A student's (stop 40's trial), which survived: a failed compile (no value) read as a timeout.
    (
        "task3_2",
        "a failed compile reported as a timeout",
        "if not entry.event.wait(timeout):",
        "entry.event.wait(timeout)\nif entry.value is None:",
    ),
    (
        "task3_2",
        "the timeout message quotes the regex with repr (backslashes doubled)",
        "{shown_regex(regex)}",
        "{regex!r}",
    ),
    (
        "task3_2",
        "the cache read outside the lock (a hit skips the LRU move too)",
        "entry = self.init_fsm_in_background(regex)",
        "entry = self.entries.get(self.key(regex)) or self.init_fsm_in_background(regex)",
    ),
    (
        "task3_2",
        "no wait: a compile still running is an error",
        "if not entry.event.wait(timeout):",
        "if not entry.event.is_set():",
    ),
    ("task3_2", "a compile error returned as None", "    raise ConstraintError(entry.error)\n", "    return None\n"),
    (
        "task3_2",
        "a compile error wrapped in a message of its own",
        "    raise ConstraintError(entry.error)\n",
        '    raise ConstraintError(f"compile failed: {entry.error}")\n',
    ),
    (
        "task3_3",
        "a slow compile never times out",
        "elif time.monotonic() - waiting.since > self.timeout:",
        "elif False:",
    ),
    ("task3_3", "released requests stay pending", "del self.pending[req.rid]\n", ""),
    ("task3_3", "a request taken before its compile finished", "if self.is_done(waiting.handle):", "if True:"),
    (
        "task3_3",
        "the timeout checked before is_done (a compile done after the timeout is aborted)",
        "if self.is_done(waiting.handle):",
        "if self.is_done(waiting.handle) and time.monotonic() - waiting.since <= self.timeout:",
    ),
    (
        "task3_3",
        "unconstrained requests wait behind a compiling one",
        "    continue  # still compiling: the ones behind it go on",
        "    break",
    ),
    (
        "task4_1",
        "jumps from accepting states (stopping is a choice too)",
        "if len(edges) != 1 or state in dfa.finals:",
        "if len(edges) != 1:",
    ),
    (
        "task4_1",
        "a negated one-character class taken for that character",
        "if not char_class.negated and len(char_class.chars) == 1:",
        "if len(char_class.chars) == 1:",
    ),
    ("task4_1", "any one of several characters is forced", "len(char_class.chars) == 1", "len(char_class.chars) >= 1"),
    ("task4_1", "no forced continuation bytes", "    if len(options) == 1:", "    if False:"),
    (
        "task4_2",
        "nothing forced returns empty bytes, not None",
        "return (bytes(out), state) if out else None",
        "return (bytes(out), state)",
    ),
    (
        "task4_2",
        "the end of a half-written character not forced",
        "while state >= self.num_char_states and state in self.byte_edges:",
        "while False:",
    ),
    (
        "task4_2",
        "only one character of the chain",
        "while state in self.char_edges and state not in seen:",
        "if state in self.char_edges:",
    ),
    (
        "task4_3",
        "no prompt-fusion check",
        "if all_ids[:prompt_len] != req.origin_input_ids:\n    return None",
        "if False:\n    return None",
    ),
    (
        "task4_3",
        "no byte-exact check",
        'if b"".join(tok.token_bytes[t] or b"" for t in new_output_ids) != out_bytes + jump_bytes:',
        "if False:",
    ),
    (
        "task4_3",
        "a jump that reaches max_new_tokens accepted",
        "if len(new_output_ids) >= req.sampling_params.max_new_tokens:",
        "if False:",
    ),
    (
        "task4_3",
        "the output encoded alone, after the prompt's ids",
        "all_ids = tok.encode_extended(req.prompt, req.origin_input_ids, new_text)",
        "all_ids = req.origin_input_ids + tok.encode(new_text)",
    ),
    (
        "task4_3",
        "bytes that are not UTF-8 raise",
        "except UnicodeDecodeError:\n    return None",
        "except UnicodeDecodeError:\n    raise",
    ),
    (
        "task4_4",
        "the detokenizer's offset left behind (the new ids fed twice)",
        "req.detok_offset = len(req.output_ids)\n",
        "",
    ),
    ("task4_4", "the detokenizer not restarted", "req.detokenizer = IncrementalDetokenizer(self.tokenizer)\n", ""),
    ("task4_4", "left in the running batch too", "self.running.remove(req)\n", ""),
    ("task4_4", "the KV not handed to the tree", "self.release_memory(req)", "pass"),
    (
        "task4_4",
        "output_text decoded by the tokenizer, the new detokenizer never fed (new ids ending mid-character)",
        "req.output_text = req.detokenizer.feed(req.output_ids)",
        "req.output_text = self.tokenizer.decode(req.output_ids)",
    ),
    (
        "task4_4",
        "queued at the front, ahead of the requests already waiting",
        "self.waiting_queue.append(req)",
        "self.waiting_queue.insert(0, req)",
    ),
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
    (
        "task6_2",
        'a backslash escapes nothing (the quote of \\" ends the string)',
        '    elif ch == "\\\\":\n        self.escaped = True\n',
        "",
    ),
    (
        "task6_2",
        "an escape never ends (everything after a backslash is escaped)",
        "    if self.escaped:\n        self.escaped = False\n",
        "    if self.escaped:\n        pass\n",
    ),
    ("task6_2", "strings not tracked (a brace inside a string counts)", "if self.in_string:", "if False:"),
    (
        "task6_2",
        "the value closes at the first closing bracket, nested or not",
        "return self.opened and self.depth <= 0",
        "return self.opened",
    ),
    ("task6_2", "closes one bracket late", "self.depth <= 0", "self.depth < 0"),
    (
        "task6_1",
        "the shortest suffix, not the longest (every mismatch restarts from nothing)",
        "for start in range(len(text) + 1):",
        "for start in range(len(text), -1, -1):",
    ),
    (
        "task6_1",
        "the naive restart: on a mismatch only the last character is kept (misses the aab in aaab)",
        "for start in range(len(text) + 1):",
        "for start in (0, len(text) - 1, len(text)):",
    ),
    (
        "task6_1",
        "a trigger looked for at the start of the text, not at its end",
        "if text.endswith(t):",
        "if text.startswith(t):",
    ),
    (
        "task6_1",
        "the self-loop of an eliminated state dropped",
        'loop = _star(edges.pop((q, q), ""))',
        'edges.pop((q, q), "")\n    loop = ""',
    ),
    (
        "task6_1",
        "the self-loop taken exactly once, not any number of times",
        'loop = _star(edges.pop((q, q), ""))',
        'loop = edges.pop((q, q), "")',
    ),
    (
        "task6_1",
        "a parallel edge overwritten instead of joined as an alternative",
        "edges[p, r] = _alt([edges[p, r], path]) if (p, r) in edges else path",
        "edges[p, r] = path",
    ),
    ("task6_1", "the rerouted path written backwards", "path = e_in + loop + e_out", "path = e_out + loop + e_in"),
    # A student's (stop 40's trial), which survived: the dead-end rule and the order of the checks.
    (
        "task7_1",
        "a draft that leads to a state allowing nothing kept",
        "if not bool(rows[i + 1].any()):\n            return drafts[:i], rows[: i + 1]",
        "if not bool(rows[i + 1].any()):\n            return drafts[: i + 1], rows[: i + 2]",
    ),
    (
        "task7_1",
        "whether the match ended asked before whether the budget made the next row",
        "if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]\n"
        "        if g.is_terminated():  # the request ends with this draft: no row after it is read\n"
        "            return drafts[: i + 1], rows[: i + 2]\n",
        "if g.is_terminated():\n            return drafts[: i + 1], rows[: i + 2]\n"
        "        if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]\n",
    ),
    (
        "task7_1",
        "the grammar never rolled back (the kept drafts stay accepted)",
        "finally:\n    g.rollback(accepted)",
        "finally:\n    pass",
    ),
    (
        "task7_1",
        "rolled back by the number of drafts, not by the number accepted",
        "g.rollback(accepted)",
        "g.rollback(len(drafts))",
    ),
    (
        "task7_1",
        "rolled back only when every draft was allowed, not on an early return",
        "    return drafts, rows\nfinally:\n    g.rollback(accepted)",
        "    g.rollback(accepted)\n    return drafts, rows\nfinally:\n    pass",
    ),
    (
        "task7_1",
        "the next position's row written over the current one",
        "g.fill_vocab_mask(rows, i + 1)",
        "g.fill_vocab_mask(rows, i)",
    ),
    (
        "task7_1",
        "a draft not checked against its row (the grammar is asked to accept a forbidden one)",
        "        if not allows(rows[i], draft):\n            return drafts[:i], rows[: i + 1]\n",
        "",
    ),
    (
        "task7_1",
        "the draft that ends the match dropped",
        "return drafts[: i + 1], rows[: i + 2]",
        "return drafts[:i], rows[: i + 1]",
    ),
    ("task7_1", "drafts after the end of the match kept", "if g.is_terminated():", "if False:"),
    ("task7_2", "no token of the model's own after the drafts", "out.append(picks[len(out)])\n", ""),
    (
        "task7_2",
        "the model's token read from the last row, wherever the drafts stopped",
        "picks[len(out)]",
        "picks[-1]",
    ),
    (
        "task7_2",
        "a disagreeing draft skipped, not the end of the run (the forward never saw the model's token)",
        "break",
        "continue",
    ),
    (
        "task7_2",
        "the model's token read one position early (the last kept draft's row)",
        "picks[len(out)]",
        "picks[max(len(out) - 1, 0)]",
    ),
    (
        "task7_2",
        "the rejected draft kept beside the model's token",
        "        break\n",
        "        out.append(draft)\n        break\n",
    ),
    # A student's (stop 40's trial), which survived: the rejection's token drawn before the uniform.
    (
        "task7_3",
        "the rejection's token drawn before the uniform, at every draft (the right distribution, other tokens)",
        "if p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft:\n        out.append(draft)\n"
        "        continue\n    residual = probs[i].clone()\n    residual[draft] = 0.0\n"
        "    out.append(int(torch.multinomial(residual, 1, generator=generator)))\n    return out\n",
        "residual = probs[i].clone()\n    residual[draft] = 0.0\n"
        "    instead = int(torch.multinomial(residual, 1, generator=generator)) if residual.sum() > 0 else draft\n"
        "    if p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft:\n        out.append(draft)\n"
        "        continue\n    out.append(instead)\n    return out\n",
    ),
    (
        "task7_3",
        "a rejected position sampled from p itself, not from p without the draft",
        "    residual[draft] = 0.0\n",
        "",
    ),
    (
        "task7_3",
        "the draft's probability not divided by its row's sum (the rows are not normalised)",
        "float(probs[i, draft] / probs[i].sum())",
        "float(probs[i, draft])",
    ),
    (
        "task7_3",
        "a rejection goes on to the next draft (the forward never saw the token that replaced it)",
        "    out.append(int(torch.multinomial(residual, 1, generator=generator)))\n    return out\n",
        "    out.append(int(torch.multinomial(residual, 1, generator=generator)))\n    break\n",
    ),
    (
        "task7_3",
        "no token after the last kept draft",
        "out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=generator)))\n",
        "",
    ),
    ("task7_3", "a draft kept when the uniform is above p(d), not below", "< p_draft", "> p_draft"),
    ("task7_3", "a draft the grammar forbids still spends a uniform draw", "if p_draft > 0 and float(", "if float("),
    # Issue 32, mistakes the earlier tests let through, by class. Inputs outside the finite
    # examples (loops back to the start state 0, fixed adversarial trigger sets):
    ("task1_2", "state 0 taken for a dead walk (tokens back to the start dropped)", "if end < 0:", "if end <= 0:"),
    (
        "task1_5",
        "state 0 taken for the dead state (a loop back to the start aborts)",
        "if g.state < 0:",
        "if g.state <= 0:",
    ),
    (
        "task3_2",
        "timeout=0 taken for no timeout (waits forever)",
        "if not entry.event.wait(timeout):",
        "if not entry.event.wait(timeout or None):",
    ),
    ("task5_1", "state 0 taken for a refusal (a token back to the start raises)", "if nxt < 0:", "if nxt <= 0:"),
    (
        "task5_3",
        "an unbounded repetition's lower bound dropped (a{2,} read as a*)",
        "max(node.low - 1, 0)",
        "0 if node.high is None else max(node.low - 1, 0)",
    ),
    (
        "task6_1",
        "the fallback asks the triggers one by one (the first trigger's longest prefix, not the longest suffix)",
        "for start in range(len(text) + 1):\n    if text[start:] in self.states:\n        return self.states[text[start:]]",
        "for t in self.triggers:\n    for k in range(len(t), 0, -1):\n        if text.endswith(t[:k]) and t[:k] in self.states:\n"
        "            return self.states[t[:k]]",
    ),
    # Rules the pages state that no test checked:
    (
        "task3_1",
        "the cache keyed by the regex alone (another tokenizer's index would be served)",
        "key = self.key(regex)",
        "key = regex",
    ),
    (
        "task3_3",
        "the timeout message always says regex (a JSON schema's too)",
        'f"compiling the {req.sampling_params.constraint()[0]} took',
        'f"compiling the regex took',
    ),
    (
        "task3_3",
        "the handle's own fields read instead of is_done (s5's futures have no event)",
        "if self.is_done(waiting.handle):",
        "if waiting.handle.event.is_set():",
    ),
    (
        "task4_1",
        "byte_edges also for whole-character states (the page: intermediate states only)",
        "for state in range(byte_dfa.num_char_states, byte_dfa.num_states):",
        "for state in range(byte_dfa.num_states):",
    ),
    (
        "task4_3",
        "only the prompt's last token compared (an earlier prompt token may change too)",
        "if all_ids[:prompt_len] != req.origin_input_ids:",
        "if all_ids[prompt_len - 1:prompt_len] != req.origin_input_ids[-1:]:",
    ),
    (
        "task4_3",
        "a special token's bytes (None) joined as they are",
        'out_bytes = b"".join(tok.token_bytes[t] or b"" for t in req.output_ids)',
        'out_bytes = b"".join(tok.token_bytes[t] for t in req.output_ids)',
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
    (
        "task6_1",
        "a path from a state back to itself through q dropped (p == r skipped)",
        "        for r, e_out in out:\n            path = e_in + loop + e_out",
        "        for r, e_out in out:\n            if p == r:\n                continue\n            path = e_in + loop + e_out",
    ),
    # Concurrency: the cache's entries touched outside its lock (six threads, a guarded dict):
    (
        "task3_1",
        "the LRU eviction run after the lock is released (another thread may be iterating the entries)",
        "    self.entries[key] = entry\n    self._evict_lru()\nself.pool.submit",
        "    self.entries[key] = entry\nself._evict_lru()\nself.pool.submit",
    ),
    (
        "task3_1",
        "a hit moved to the LRU end after the lock is released",
        "    if entry is not None:\n        self.entries.move_to_end(key)\n        return entry\n    entry = CacheEntry()\n"
        "    self.entries[key] = entry\n    self._evict_lru()\n",
        "    hit = entry is not None\n    if not hit:\n        entry = CacheEntry()\n        self.entries[key] = entry\n"
        "        self._evict_lru()\nif hit:\n    self.entries.move_to_end(key)\n    return entry\n",
    ),
    # A stranger's mistakes (issue 32): written from the pages and the reference alone, the
    # ones the task's tests let through until their tests were strengthened.
    (
        "task4_1",
        "a byte into state 0 taken for a dead one (a character that loops back to the start)",
        "byte_dfa.table[state] >= 0",
        "byte_dfa.table[state] > 0",
    ),
    (
        "task7_1",
        "a draft kept when the budget could not make the row after it (that row left all ones)",
        "if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]",
        "if not self.work.ready(req):\n            return drafts[: i + 1], rows[: i + 2]",
    ),
    (
        "task7_3",
        "the uniform drawn from the global RNG, not the request's generator (a seed no longer replays)",
        "float(torch.rand((), generator=generator))",
        "float(torch.rand(()))",
    ),
    # Stage s7 worked through as a stranger: mistakes only generated examples caught (the run
    # where every draft is allowed, tied maxima), or nothing did (a 0-d tensor for a token id
    # compares equal to its int; a row filled beyond the budget gives the same answer); 7_3's
    # tensor was caught, but blamed on the mask.
    (
        "task7_1",
        "every draft allowed: the row after the last one dropped",
        "    return drafts, rows\nfinally:",
        "    return drafts, rows[:-1]\nfinally:",
    ),
    (
        "task7_1",
        "every draft allowed: the last draft left out",
        "    return drafts, rows\nfinally:",
        "    return drafts[:-1], rows[:-1]\nfinally:",
    ),
    (
        "task7_1",
        "the loop stops before the last draft",
        "for i, draft in enumerate(drafts):",
        "for i, draft in enumerate(drafts[:-1]):",
    ),
    (
        "task7_1",
        "every draft allowed: the last one not rolled back",
        "    return drafts, rows\nfinally:",
        "    accepted -= 1\n    return drafts, rows\nfinally:",
    ),
    (
        "task7_1",
        "the next row filled before the budget is asked (made anyway, unbounded)",
        "        if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]\n"
        "        if g.is_terminated():  # the request ends with this draft: no row after it is read\n"
        "            return drafts[: i + 1], rows[: i + 2]\n        g.fill_vocab_mask(rows, i + 1)\n",
        "        g.fill_vocab_mask(rows, i + 1)\n        if not self.work.ready(req):\n"
        "            return drafts[:i], rows[: i + 1]\n        if g.is_terminated():\n"
        "            return drafts[: i + 1], rows[: i + 2]\n",
    ),
    (
        "task7_2",
        "a draft kept when it ties with the row's maximum, not only when it is the argmax",
        "for pick, draft in zip(picks, drafts):\n    if pick != draft:",
        "for i, draft in enumerate(drafts):\n    if logits[i, draft] != logits[i].max():",
    ),
    (
        "task7_2",
        "the model's token returned as a 0-d tensor (equal to its int in a comparison)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = list(logits.argmax(dim=-1))",
    ),
    (
        "task7_1",
        "the kept drafts counted from the loop's index (no drafts: the index is never set)",
        "    return drafts, rows\nfinally:",
        "    return drafts[: i + 1], rows[: i + 2]\nfinally:",
    ),
    (
        "task7_3",
        "the rejected draft zeroed in the caller's row (no copy)",
        "residual = probs[i].clone()",
        "residual = probs[i]",
    ),
    (
        "task7_3",
        "the token after the last draft returned as a tensor, not an int",
        "out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=generator)))",
        "out.append(torch.multinomial(probs[len(drafts)], 1, generator=generator)[0])",
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
    ("task6_1", "_eliminate: only the first state of `order`", "for q in order:", "for q in order[:1]:"),
    (
        "task6_1",
        "_eliminate: the old edges into and out of q left in place",
        "    for key in [k for k in edges if q in k]:\n        del edges[key]\n",
        "",
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
    # Student 0607's wrong solutions of task 6_1 (2026-12-05): each already failed, two of them
    # (the sink's name, the snapshot of the edges) only on one test each; kept so they stay caught.
    (
        "task6_1",
        "_next: the sink named by the whole text, not by the trigger it ends with",
        'return ("trigger", t)',
        'return ("trigger", text)',
    ),
    (
        "task6_1",
        "_eliminate: edges into and out of q read from a snapshot taken before the first state",
        'for q in order:\n    loop = _star(edges.pop((q, q), ""))\n'
        "    into = [(p, e) for (p, r), e in edges.items() if r == q]\n"
        "    out = [(r, e) for (p, r), e in edges.items() if p == q]",
        'snapshot = dict(edges)\nfor q in order:\n    loop = _star(edges.pop((q, q), ""))\n'
        "    into = [(p, e) for (p, r), e in snapshot.items() if r == q and p != q and (p, r) in edges]\n"
        "    out = [(r, e) for (p, r), e in snapshot.items() if p == q and r != q and (p, r) in edges]",
    ),
    (
        "task6_1",
        "_eliminate: only paths to numbered states rerouted (paths to END and the trigger sinks lost)",
        "out = [(r, e) for (p, r), e in edges.items() if p == q]",
        "out = [(r, e) for (p, r), e in edges.items() if p == q and isinstance(r, int)]",
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
    (
        "task6_1",
        "_eliminate: a self-loop starred without a group (`ab*` for `(ab)*`)",
        'loop = _star(edges.pop((q, q), ""))',
        'loop = edges.pop((q, q), "")\n    loop = loop + "*" if loop else ""',
    ),
    (
        "task7_3",
        "a certain draft (p = 1) kept without drawing its uniform",
        "    if p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft:",
        "    if p_draft >= 1.0 or (p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft):",
    ),
    (
        "task7_2",
        "the argmax of a float16 softmax (rounding makes ties)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = torch.softmax(logits.float(), dim=-1).half().argmax(dim=-1).tolist()",
    ),
    # Student 345's wrong solutions of s3-s5 that passed (2026-12-05), each with the test that
    # catches it now.
    (
        "task3_3",
        "a request with a constraint taken for a pending one (one given its grammar at arrival crashes the poll)",
        "if waiting is None:",
        "if req.sampling_params.constraint() is None:",
    ),
    (
        "task3_3",
        "pending requests released first, then the others (an unconstrained request overtaken)",
        "for req in queue:",
        "for req in [r for r in queue if r.rid in self.pending] + [r for r in queue if r.rid not in self.pending]:",
    ),
    (
        "task3_3",
        "a wait of exactly the timeout aborted (the page: longer than the timeout)",
        "time.monotonic() - waiting.since > self.timeout",
        "time.monotonic() - waiting.since >= self.timeout",
    ),
    (
        "task3_3",
        "the wait compared in whole milliseconds (a wait 0.5 ms past the timeout goes on)",
        "time.monotonic() - waiting.since > self.timeout",
        "int((time.monotonic() - waiting.since) * 1000) > self.timeout * 1000",
    ),
    (
        "task3_2",
        "the timeout cut to whole seconds (0.9 s waits 0 s)",
        "if not entry.event.wait(timeout):",
        "if not entry.event.wait(None if timeout is None else int(timeout)):",
    ),
    (
        "task3_2",
        "the timeout printed with :g (1.0 reads 1 s; the page: {timeout} as given)",
        "took longer than {timeout} s",
        "took longer than {timeout:g} s",
    ),
    (
        "task3_2",
        "a compile error tested for truth (an empty message returns None)",
        "if entry.error is not None:",
        "if entry.error:",
    ),
    (
        "task3_1",
        "evicted only when the count is over (the byte bound never applies at insert)",
        "    self.entries[key] = entry\n    self._evict_lru()\n",
        "    self.entries[key] = entry\n    if len(self.entries) > self.max_entries:\n        self._evict_lru()\n",
    ),
    (
        "task3_1",
        "a hit moved to the LRU end only when its compile is finished",
        "        self.entries.move_to_end(key)\n",
        "        if entry.event.is_set():\n            self.entries.move_to_end(key)\n",
    ),
    (
        "task4_3",
        "the byte-exact check on the jump alone (a normalised output passes)",
        'if b"".join(tok.token_bytes[t] or b"" for t in new_output_ids) != out_bytes + jump_bytes:',
        'if not b"".join(tok.token_bytes[t] or b"" for t in new_output_ids).endswith(jump_bytes):',
    ),
    (
        "task4_3",
        "the byte-exact check on the output alone (a normalised jump passes)",
        'if b"".join(tok.token_bytes[t] or b"" for t in new_output_ids) != out_bytes + jump_bytes:',
        'if not b"".join(tok.token_bytes[t] or b"" for t in new_output_ids).startswith(out_bytes):',
    ),
    (
        "task4_3",
        "the byte-exact check on the length alone (a lowercased output passes)",
        'if b"".join(tok.token_bytes[t] or b"" for t in new_output_ids) != out_bytes + jump_bytes:',
        'if len(b"".join(tok.token_bytes[t] or b"" for t in new_output_ids)) != len(out_bytes + jump_bytes):',
    ),
    (
        "task4_2",
        "no guard against revisiting a state (a cycle of forced characters is walked forever)",
        "while state in self.char_edges and state not in seen:",
        "while state in self.char_edges:",
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
    # Student 67's wrong solutions of s6-s7 that passed (2026-12-05), each with the test that
    # catches it now.
    (
        "task7_2",
        "the argmax read off a descending sort (not stable: a tie across a wide row goes to a higher id)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = logits.sort(dim=-1, descending=True).indices[:, 0].tolist()",
    ),
    (
        "task7_2",
        "the argmax read off topk(1) (a tie goes to whichever id topk returns, not the lowest)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = logits.topk(1, dim=-1).indices[:, 0].tolist()",
    ),
    (
        "task7_1",
        "accept_token judges the draft (its GrammarError stops the chain), not the row: a draft the row forbids is kept",
        "        if not allows(rows[i], draft):\n            return drafts[:i], rows[: i + 1]\n        g.accept_token(draft)\n",
        "        try:\n            g.accept_token(draft)\n        except GrammarError:\n            return drafts[:i], rows[: i + 1]\n",
    ),
    (
        "task6_2",
        "closed whenever the depth is 0 outside a string, `opened` or not (whitespace before the value ends it)",
        "    self.depth -= 1\n    return self.opened and self.depth <= 0\nreturn False",
        "    self.depth -= 1\nreturn not self.in_string and self.depth <= 0",
    ),
    (
        "task6_2",
        "the depth kept on the class, shared by every scan (a call cut short leaves the next scan deep)",
        'elif ch in "{[":\n    self.depth += 1\n    self.opened = True\nelif ch in "}]":\n    self.depth -= 1\n',
        'elif ch in "{[":\n    _JsonScan.shared_depth = getattr(_JsonScan, "shared_depth", 0) + 1\n'
        "    self.depth = _JsonScan.shared_depth\n    self.opened = True\n"
        'elif ch in "}]":\n    _JsonScan.shared_depth = getattr(_JsonScan, "shared_depth", 0) - 1\n'
        "    self.depth = _JsonScan.shared_depth\n",
    ),
    (
        "task6_2",
        "a string also quoted with ' (the apostrophe of what's ends the string)",
        "    elif ch == '\"':\n        self.in_string = False\nelif ch == '\"':\n    self.in_string = True\n",
        '    elif ch in "\\"\'":\n        self.in_string = False\nelif ch in "\\"\'":\n    self.in_string = True\n',
    ),
    (
        "task7_1",
        "the caller's drafts cut in place (del drafts[i:]) and returned, not a slice",
        "        if not allows(rows[i], draft):\n            return drafts[:i], rows[: i + 1]\n",
        "        if not allows(rows[i], draft):\n            del drafts[i:]\n            return drafts, rows[: i + 1]\n",
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
        "task2_4",
        "the caller's mask inverted in place to get the forbidden bits",
        "allowed = unpack_bits(mask.to(logits.device), logits.shape[-1])\nlogits.masked_fill_(~allowed,",
        "mask.bitwise_not_()\nforbidden = unpack_bits(mask.to(logits.device), logits.shape[-1])\n"
        "logits.masked_fill_(forbidden,",
    ),
    ("task2_2", "_BIT left on the CPU (a mask on a GPU is shifted by a CPU tensor)", "_BIT.to(mask.device)", "_BIT"),
    (
        "task1_2",
        "visited = the walked states, not the queued ones (a state queued twice is walked twice)",
        "    if end not in seen:\n        seen.add(end)\n",
        "    if end not in state_to_tokens and end != state:\n",
    ),
    (
        "task2_1",
        "one output buffer per shape kept between calls (a second FSM's packing overwrites the first's rows)",
        "return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)",
        'out = pack_bits.__dict__.setdefault("buffers", {}).setdefault(\n'
        "    tuple(packed.shape), torch.empty(packed.shape, dtype=torch.int32)\n"
        ")\n"
        "return out.copy_(torch.where(packed >= 2**31, packed - 2**32, packed))",
    ),
    # Student 345's second round (2026-12-05, afternoon): wrong solutions of s3-s5 that passed,
    # each with the test that catches it now.
    (
        "task3_1",
        "the compile submitted with the regex for its key (a timed-out compile is never dropped: cached for good)",
        "self.pool.submit(self._compile, key, regex, entry)",
        "self.pool.submit(self._compile, regex, regex, entry)",
    ),
    (
        "task3_1",
        "the key of the stripped regex (`ab ` served the FSM of `ab`)",
        "key = self.key(regex)",
        "key = self.key(regex.strip())",
    ),
    (
        "task3_1",
        "the key of the lowercased regex (`AB` served the FSM of `ab`)",
        "key = self.key(regex)",
        "key = self.key(regex.lower())",
    ),
    (
        "task3_3",
        "the kind guessed from the request's fields (regex, else json_schema: an ebnf request's timeout misnamed)",
        "{req.sampling_params.constraint()[0]}",
        "{'regex' if req.sampling_params.regex is not None else 'json_schema'}",
    ),
    (
        "task3_3",
        "one take per compile, its grammar handed to every request of that compile (they advance one state)",
        "if self.is_done(waiting.handle):\n        self.take(req, waiting.handle)\n",
        'if self.is_done(waiting.handle):\n        grammars = self.__dict__.setdefault("_taken", {})\n'
        "        if id(waiting.handle) not in grammars:\n            self.take(req, waiting.handle)\n"
        "            grammars[id(waiting.handle)] = req.grammar\n        else:\n"
        "            req.grammar = grammars[id(waiting.handle)]\n",
    ),
    (
        "task3_2",
        "no timeout read as a default of 30 s (the page: None waits as long as the compile takes)",
        "if not entry.event.wait(timeout):",
        "if not entry.event.wait(30.0 if timeout is None else timeout):",
    ),
    (
        "task3_2",
        "the timeout waited twice (a compile done between 1 and 2 timeouts is returned, not a timeout)",
        "if not entry.event.wait(timeout):",
        "entry.event.wait(timeout)\nif not entry.event.wait(timeout):",
    ),
    (
        "task4_3",
        "the output cut after len(encode(prompt)) ids, not the request's own prompt ids (a chat that spells a "
        "special token: every jump refused)",
        "new_output_ids = all_ids[prompt_len:]",
        "new_output_ids = all_ids[len(tok.encode(req.prompt)) :]",
    ),
    (
        "task4_3",
        "the whole of prompt + text encoded again (a chat whose message spells a special token: its text becomes "
        "the special token, and every jump is refused)",
        "all_ids = tok.encode_extended(req.prompt, req.origin_input_ids, new_text)  # = encode(prompt + text)",
        "all_ids = tok.encode(req.prompt + new_text)",
    ),
    (
        "task4_3",
        "a jump refused when the new output has fewer ids than the old (letters re-encoded as one word)",
        "return new_output_ids",
        "if len(new_output_ids) < len(req.output_ids):\n    return None\nreturn new_output_ids",
    ),
    (
        "task4_3",
        "a jump refused while the output is empty (nothing to re-encode: the schema's opening text never jumps)",
        "tok = self.tokenizer\n",
        "tok = self.tokenizer\nif not req.output_ids:\n    return None\n",
    ),
    (
        "task4_3",
        "a jump refused when it rewrites the model's own tokens (the page keeps the tokenizer's spelling)",
        "return new_output_ids",
        "if new_output_ids[: max(len(req.output_ids) - 1, 0)] != req.output_ids[:-1]:\n    return None\n"
        "return new_output_ids",
    ),
    (
        "task4_4",
        "the jumper put back at its place by arrival time, not at the end (ahead of requests that came after it)",
        "self.waiting_queue.append(req)  # re-admitted by the next prefill, with a prefix hit",
        "at = next(\n    (i for i, r in enumerate(self.waiting_queue) if r.arrival_time > req.arrival_time),\n"
        "    len(self.waiting_queue),\n)\nself.waiting_queue.insert(at, req)",
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
        "task4_1",
        "only ASCII characters jump (a forced 程 after 编 is not an edge)",
        "if not char_class.negated and len(char_class.chars) == 1:",
        "if not char_class.negated and len(char_class.chars) == 1 and ord(next(iter(char_class.chars))) < 128:",
    ),
    (
        "task4_2",
        "None unless a whole character was appended (the forced rest of a half-written character dropped)",
        "return (bytes(out), state) if out else None",
        "return (bytes(out), state) if seen else None",
    ),
    (
        "task4_2",
        "the byte walk stops short of a character state that does not jump (程's last byte left to the model)",
        "while state >= self.num_char_states and state in self.byte_edges:\n    byte, state = self.byte_edges[state]\n"
        "    out.append(byte)\n",
        "while state >= self.num_char_states and state in self.byte_edges:\n    byte, nxt = self.byte_edges[state]\n"
        "    if nxt < self.num_char_states and nxt not in self.char_edges:\n        break\n    state = nxt\n"
        "    out.append(byte)\n",
    ),
    (
        "task5_2",
        "a prefix element optional from the one before min_items (minItems 2 of a 2-element prefix: [8] accepted)",
        "return more if i < min_items else _repeat(more, 0, 1)",
        "return more if i + 1 < min_items else _repeat(more, 0, 1)",
    ),
    # An instructor's fake class (2026-12-05): three wrong solutions of their own invention.
    (
        "task1_3",
        "EOS allowed in every state (the model may always stop)",
        "return row",
        "row[grammar.fsm.index.eos_token_id] = True\nreturn row",
    ),
    (
        "task4_2",
        "the jumped bytes returned with the state the walk started from, not the one it reached",
        "out = bytearray()\nwhile state >= self.num_char_states and state in self.byte_edges:\n"
        "    byte, state = self.byte_edges[state]\n    out.append(byte)\nseen = set()\n"
        "while state in self.char_edges and state not in seen:\n    seen.add(state)  # a DFA with no dead states "
        'cannot cycle here; guard anyway\n    ch, state = self.char_edges[state]\n    out += ch.encode("utf-8")\n'
        "return (bytes(out), state) if out else None",
        "out, start = bytearray(), state\nwhile state >= self.num_char_states and state in self.byte_edges:\n"
        "    byte, state = self.byte_edges[state]\n    out.append(byte)\nseen = set()\n"
        "while state in self.char_edges and state not in seen:\n    seen.add(state)  # a DFA with no dead states "
        'cannot cycle here; guard anyway\n    ch, state = self.char_edges[state]\n    out += ch.encode("utf-8")\n'
        "return (bytes(out), start) if out else None",
    ),
    (
        "task7_3",
        "the rejection's token drawn with the global generator, not the request's",
        "out.append(int(torch.multinomial(residual, 1, generator=generator)))",
        "out.append(int(torch.multinomial(residual, 1)))",
    ),
    # A stranger's wrong solutions (mistakes3, 2026-12-05), each of which passed the grader.
    (
        "task2_3",
        "rows read from bitmasks by state number (bitmasks[state], not state_row[state]): wrong past a gap in "
        "the index's states",
        "req.grammar.fsm.state_row[req.grammar.state]",
        "req.grammar.fsm.bitmasks[req.grammar.state]",
    ),
    (
        "task2_4",
        "the mask unpacked on its own device, not the logits' (masked_fill_ mixes a GPU's logits with a CPU mask)",
        "unpack_bits(mask.to(logits.device), logits.shape[-1])",
        "unpack_bits(mask, logits.shape[-1])",
    ),
    (
        "task7_1",
        "a draft counted before accept_token returned: an accept that raises rolls back one token too many",
        "        g.accept_token(draft)\n        accepted += 1\n",
        "        accepted += 1\n        g.accept_token(draft)\n",
    ),
    (
        "task7_1",
        "a dead end found by the sum of the packed words (words 64 and -64 sum to 0 though 27 bits are set)",
        "if not bool(rows[i + 1].any()):",
        "if int(rows[i + 1].sum()) == 0:",
    ),
    (
        "task2_1",
        "written for [V] and [B, V] only (the sheet: any number of leading dimensions)",
        "padded = torch.zeros(*allowed.shape[:-1], words * 32, dtype=torch.int64)\npadded[..., :v] = allowed.to(torch.int64)",
        "if allowed.dim() == 1:\n    return pack_bits(allowed[None])[0]\n"
        "padded = torch.zeros(allowed.shape[0], words * 32, dtype=torch.int64)\npadded[:, :v] = allowed.to(torch.int64)",
    ),
    (
        "task2_2",
        "flatten(1), not flatten(-2): right for a [B, W] mask only ([W] keeps its [W, 32] bits, [A, B, W] merges B)",
        "bits.flatten(-2)[..., :vocab_size]",
        "bits.flatten(1)[..., :vocab_size]",
    ),
    (
        "task5_2",
        "the required elements past the prefix written out one by one (minItems: 900 is 900 copies of the element)",
        "return _repeat(sep + items, max(min_items - i, 0), hi)",
        "need = max(min_items - i, 0)\n        out = EPSILON\n        for _ in range(need):\n"
        "            out = out + sep + items\n        return out + _repeat(sep + items, 0, None if hi is None else hi - need)",
    ),
]
