"""Plausible wrong solutions of sheet s3 (exercises/s3.md); the format is in __init__.py."""

MUTATIONS = [
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
        "task3_2",
        "timeout=0 taken for no timeout (waits forever)",
        "if not entry.event.wait(timeout):",
        "if not entry.event.wait(timeout or None):",
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
    # Stranger 15's (2026-12-06, /work/scratch/stranger15): passed the grader, each caught now.
    (
        "task3_2",
        "the value asked instead of the error (a compile that failed after making its FSM returns it)",
        "if entry.error is not None:\n    raise ConstraintError(entry.error)",
        'if entry.value is None:\n    raise ConstraintError(entry.error or "compile failed")',
    ),
]
