"""Graphviz DOT text for a radix cache: what is cached, what is locked, where a match ended.

Each node is a box showing the tokens on the edge into it (ids, or text when a tokenizer
is given), its lock count and how many KV slots it holds. Locked nodes are shaded, and one
node (say, the last node of a ``match_prefix``) can be highlighted with a red border.
Show it with ``Drawing(radix_tree_dot(cache))`` from ``minisglang.drawings.render``.
"""
from __future__ import annotations

from minisglang.drawings.render import dot_escape
from minisglang.radix_cache import RadixCache, TreeNode

MAX_KEY_IDS = 8  # token ids shown per node before "…"
MAX_KEY_CHARS = 24  # decoded characters shown per node before "…"
LOCKED_FILL = "#d9d9d9"
HIGHLIGHT_COLOR = "#d62728"


def _key_label(key: list[int], tokenizer) -> str:
    """The edge tokens as one line of plain text: the ids, or the decoded text as Python
    prints it (quoted, newlines and backslashes escaped), like the FSM drawings do."""
    if tokenizer is None:
        shown = " ".join(str(t) for t in key[:MAX_KEY_IDS])
        return shown + (" …" if len(key) > MAX_KEY_IDS else "")
    # Keep special tokens (BOS, EOS): dropping them would make an edge look empty.
    text = tokenizer.decode(list(key), skip_special_tokens=False)
    cut = len(text) > MAX_KEY_CHARS
    return repr(text[:MAX_KEY_CHARS]) + ("…" if cut else "")


def radix_tree_dot(
    cache: RadixCache, tokenizer=None, highlight: TreeNode | None = None, title: str | None = None
) -> str:
    """DOT source of ``cache``'s tree: a title (default: the node and slot counts), one box
    per node (the root included), one arrow per parent-child edge. ``tokenizer`` needs
    ``decode(ids, skip_special_tokens=False)``."""
    nodes, stack = 0, [cache.root_node]
    while stack:
        node = stack.pop()
        nodes += 1
        stack.extend(node.children.values())
    title = title or f"radix tree: {nodes} nodes, {cache.total_size()} cached tokens"
    lines = [
        f'digraph radix_tree {{ label="{dot_escape(title)}"; labelloc=t;',   # the title on top
        '  node [shape=box, fontname="monospace"];',
    ]
    names: dict[TreeNode, str] = {}
    queue = [cache.root_node]
    while queue:
        node = queue.pop(0)
        name = f"n{len(names)}"
        names[node] = name
        head = "root" if node is cache.root_node else _key_label(node.key, tokenizer)
        label_lines = [head, f"lock={node.lock_ref} slots={len(node.value)}"]
        # DOT's own "\n" escape separates label lines; each line is escaped first.
        attrs = ['label="' + "\\n".join(dot_escape(s) for s in label_lines) + '"']
        if node.lock_ref > 0:
            attrs.append(f'style=filled, fillcolor="{LOCKED_FILL}"')
        if node is highlight:
            attrs.append(f'color="{HIGHLIGHT_COLOR}", penwidth=3')
        lines.append(f"  {name} [{', '.join(attrs)}];")
        if node.parent is not None:
            lines.append(f"  {names[node.parent]} -> {name};")
        # Children in token order, so the same tree always gives the same drawing.
        queue.extend(node.children[t] for t in sorted(node.children))
    lines.append("}")
    return "\n".join(lines) + "\n"
