"""Graphviz DOT text for a radix cache: what is cached, what is locked, where a match ended.

Each node is a box showing the tokens on the edge into it (ids, or text when a tokenizer
is given), its lock count and how many KV slots it holds. Locked nodes are shaded, and one
node (say, the last node of a ``match_prefix``) can be highlighted with a red border.
Show it with ``Drawing(radix_tree_dot(cache))`` from ``minisglang.drawings.render``.
``radix_tokens_dot`` draws the same tree for a slide: each token in a box of its own, so
that where a text was cut into tokens shows (`minisglang viz --kind radix`).
"""

from __future__ import annotations

import html

from minisglang.drawings.layout import Layout
from minisglang.drawings.render import dot_escape, show_text
from minisglang.radix_cache import RadixCache, TreeNode

MAX_KEY_IDS = 8  # token ids shown per node before "…"
MAX_KEY_CHARS = 24  # decoded characters shown per node before "…"
LOCKED_FILL = "#d9d9d9"
HIGHLIGHT_COLOR = "#d62728"


def _nodes_in_order(cache: RadixCache) -> list[TreeNode]:
    """Every node of `cache`'s tree, the root first, breadth first and children in token
    order: the same tree always gives the same drawing, node names and all."""
    order = [cache.root_node]
    for node in order:  # the list grows behind the loop: a queue
        order.extend(node.children[t] for t in sorted(node.children))
    return order


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
    order = _nodes_in_order(cache)
    names = {node: f"n{i}" for i, node in enumerate(order)}
    title = title or f"radix tree: {len(order)} nodes, {cache.total_size()} cached tokens"
    lines = [
        f'digraph radix_tree {{ label="{dot_escape(title)}"; labelloc=t;',  # the title on top
        '  node [shape=box, fontname="monospace"];',
    ]
    for node in order:
        name = names[node]
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
    lines.append("}")
    return "\n".join(lines) + "\n"


MAX_TOKENS_SHOWN = 10  # token boxes per node before "… +N"


def _token_cells(key: list[int], tokenizer) -> list[str]:
    """One HTML table cell per token of an edge: its text (`show_text`: quoted, spaces as
    ␣), or its id without a tokenizer; "… +N" for the ones past MAX_TOKENS_SHOWN."""
    cells = []
    for token in key[:MAX_TOKENS_SHOWN]:
        text = str(token) if tokenizer is None else show_text(tokenizer.decode([token], skip_special_tokens=False))
        cells.append(f"<td>{html.escape(text, quote=False)}</td>")
    if len(key) > MAX_TOKENS_SHOWN:
        cells.append(f'<td border="0">… +{len(key) - MAX_TOKENS_SHOWN}</td>')
    return cells


def radix_tokens_dot(
    cache: RadixCache,
    tokenizer=None,
    highlight: TreeNode | None = None,
    title: str | None = None,
    layout: Layout = Layout(rankdir="TB"),
) -> str:
    """DOT source of ``cache``'s tree with token boundaries visible, for a slide.

    Each node's tokens are boxed one by one (where a node's text is cut into tokens is the
    point of chapter 04's re-cut seam: `' 7'` `'7'` and `' 77'` look alike as text), above
    its lock count and slot count; a node with several children is a branch, drawn as a
    fork. Locked nodes are shaded and `highlight` gets a red border, as in
    ``radix_tree_dot``. `layout` gives the direction and the font size (no wrapping: a
    tree's width is its branches)."""
    order = _nodes_in_order(cache)
    names = {node: f"n{i}" for i, node in enumerate(order)}
    title = title or f"radix tree: {len(order)} nodes, {cache.total_size()} cached tokens (one box per token)"
    lines = [
        f'digraph radix_tokens {{ label="{dot_escape(title)}"; labelloc=t;',
        f"  rankdir={layout.rankdir};",
        *layout.font_lines(),
        '  node [shape=plain, fontname="Courier"];',
    ]
    for node in order:
        name = names[node]
        cells = ["<td>root</td>"] if node is cache.root_node else _token_cells(node.key, tokenizer)
        fill = f' bgcolor="{LOCKED_FILL}"' if node.lock_ref > 0 else ""
        border = f' color="{HIGHLIGHT_COLOR}" border="3"' if node is highlight else ' border="1"'
        table = (
            f'<table cellspacing="3" cellborder="1"{border}{fill}><tr>{"".join(cells)}</tr>'
            f'<tr><td colspan="{len(cells)}" border="0">lock={node.lock_ref} slots={len(node.value)}</td></tr>'
            "</table>"
        )
        lines.append(f"  {name} [label=<{table}>];")
        if node.parent is not None:
            lines.append(f"  {names[node.parent]} -> {name};")
    lines.append("}")
    return "\n".join(lines) + "\n"
