"""Plausible wrong solutions of sheet s4 (exercises/s4.md); the format is in __init__.py."""

MUTATIONS = [
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
    # A stranger's mistakes (issue 32): written from the pages and the reference alone, the
    # ones the task's tests let through until their tests were strengthened.
    (
        "task4_1",
        "a byte into state 0 taken for a dead one (a character that loops back to the start)",
        "byte_dfa.table[state] >= 0",
        "byte_dfa.table[state] > 0",
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
    # Stranger 15's (2026-12-06, /work/scratch/stranger15): passed the grader, each caught now.
    (
        "task4_1",
        "a half-written character whose live bytes all reach one state taken as forced (the first byte)",
        "    if len(options) == 1:\n",
        "    if len(options) >= 1 and len(set(byte_dfa.table[state, options].tolist())) == 1:\n",
    ),
    (
        "task4_1",
        "a forced character back into state 0 dropped (`and nxt` reads state 0 as false)",
        "if not char_class.negated and len(char_class.chars) == 1:",
        "if not char_class.negated and len(char_class.chars) == 1 and nxt:",
    ),
    # (a stranger's mistakes, grader honesty round 7: each passed every test of the time)
    (
        "task4_2",
        "the cycle guard a count of steps, as many as the map has edges, not the states seen",
        "seen = set()\nwhile state in self.char_edges and state not in seen:\n    seen.add(state)",
        "steps = 0\nwhile state in self.char_edges and steps < len(self.char_edges):\n    steps += 1",
    ),
    (
        "task4_1",
        "byte_edges holds the table's numpy integers (no int())",
        "byte_edges[state] = (int(options[0]), int(byte_dfa.table[state, options[0]]))",
        "byte_edges[state] = (options[0], byte_dfa.table[state, options[0]])",
    ),
    # (a third stranger's, grader honesty round 9: the caller's list became the request's)
    (
        "task4_4",
        "the request takes the caller's list itself (decoding appends to the caller's list)",
        "req.output_ids = list(new_output_ids)",
        "req.output_ids = new_output_ids",
    ),
]
