"""Plausible wrong solutions of sheet s6 (exercises/s6.md); the format is in __init__.py."""

MUTATIONS = [
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
    (
        "task6_1",
        "the fallback asks the triggers one by one (the first trigger's longest prefix, not the longest suffix)",
        "for start in range(len(text) + 1):\n    if text[start:] in self.states:\n        return self.states[text[start:]]",
        "for t in self.triggers:\n    for k in range(len(t), 0, -1):\n        if text.endswith(t[:k]) and t[:k] in self.states:\n"
        "            return self.states[t[:k]]",
    ),
    (
        "task6_1",
        "a path from a state back to itself through q dropped (p == r skipped)",
        "        for r, e_out in out:\n            path = e_in + loop + e_out",
        "        for r, e_out in out:\n            if p == r:\n                continue\n            path = e_in + loop + e_out",
    ),
    ("task6_1", "_eliminate: only the first state of `order`", "for q in order:", "for q in order[:1]:"),
    (
        "task6_1",
        "_eliminate: the old edges into and out of q left in place",
        "    for key in [k for k in edges if q in k]:\n        del edges[key]\n",
        "",
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
    (
        "task6_1",
        "_eliminate: a self-loop starred without a group (`ab*` for `(ab)*`)",
        'loop = _star(edges.pop((q, q), ""))',
        'loop = edges.pop((q, q), "")\n    loop = loop + "*" if loop else ""',
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
    # Stranger 7's (2026-12-06): passed while every test's arguments were JSON.
    (
        "task6_2",
        "an apostrophe outside a string opens one (a Python-style {'city': 'Paris'} never closes)",
        "elif ch == '\"':\n    self.in_string = True\n",
        'elif ch in "\\"\'":\n    self.in_string = True\n',
    ),
    # (a stranger's mistakes, grader honesty round 7: each passed every test of the time)
    (
        "task6_2",
        "a closing bracket ends the value whether or not one was opened",
        "return self.opened and self.depth <= 0",
        "return self.depth <= 0",
    ),
    (
        "task6_2",
        "a string that closes at depth 0 ends the value",
        "    elif ch == '\"':\n        self.in_string = False\n",
        "    elif ch == '\"':\n        self.in_string = False\n        return self.depth == 0\n",
    ),
    (
        "task6_2",
        "a backslash escapes the next character outside strings too",
        "if self.in_string:\n    if self.escaped:",
        'if self.escaped:\n    self.escaped = False\n    return False\nif ch == "\\\\":\n    self.escaped = True\n    return False\nif self.in_string:\n    if self.escaped:',
    ),
    (
        "task6_2",
        "the value closes only at depth exactly 0 (a stray close before it keeps it open)",
        "return self.opened and self.depth <= 0",
        "return self.opened and self.depth == 0",
    ),
]
