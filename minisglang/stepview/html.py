"""A trace as one self-contained HTML page: inline CSS, JS and SVG, nothing fetched.

The page shows one step at a time (keys ← and →, Home, End, or the slider): the automaton
with the current state highlighted, the output so far with each token boxed and
coloured by how it came, the model's top tokens before the mask (struck through where
the mask forbade them) and after it, and a plot of the mass kept at every step. Each
step is an element `<li data-step="i" data-state=... data-allowed=... data-mass=...>`
for tests and curious students; the numbers a step shows come from one JSON block that
the script reads (so a 200-step trace at a 65k vocabulary stays well under 1 MB).
"""

from __future__ import annotations

import html
import json
import uuid
from typing import Any

from .automaton import Automaton
from .record import Trace, TraceEvent

COLOURS = {"sampled": "#d8ecff", "forced": "#ffe0b2", "jumped": "#c8e6c9", "recut": "#fff59d", "draft": "#e1bee7"}
HOW = {
    "sampled": "sampled",
    "forced": "forced (the only allowed token)",
    "jumped": "jumped (forced text)",
    "recut": "re-cut (written text, split again)",
    "draft": "draft accepted (s7)",
}
PLOT_W, PLOT_H = 900, 170


def _round(p: float) -> float:
    return float(f"{p:.4g}")


def event_text(e: TraceEvent) -> str:
    """One line a reader understands, for one event."""
    i = e.info
    if e.kind == "jump":
        return (
            f"jump-forward: forced text {i['forced']!r}; re-cut at token {i['at']}: {i['old']} → {i['new']}, "
            f"then re-admitted"
        )
    if e.kind == "admit":
        hit = i.get("prefix_len", 0)
        return f"admitted (prefill); the radix tree supplied {hit} tokens" if hit else "admitted (prefill)"
    if e.kind == "drafts":
        return f"drafts (s7): proposed {i['proposed_text']}, accepted {i['accepted']}, rejected {i['rejected']}"
    if e.kind == "finish":
        reason = i.get("reason") or {}
        extra = {k: getattr(v, "value", v) for k, v in reason.items() if k != "type"}  # an AbortKind by its name
        return f"finished: {reason.get('type')}" + (f" {extra}" if extra else "")
    if e.kind == "sit_out":
        return "sat out this step (its grammar's work did not fit the step's budget)"
    return f"{e.kind}: {i}"


def page_data(trace: Trace) -> dict[str, Any]:
    """What the script needs, per step: the numbers, the top tokens, the events before
    it, and the change to the boxed output (keep the first `keep` boxes, add these)."""
    auto = trace.automaton if isinstance(trace.automaton, Automaton) else None
    events: dict[int, list[str]] = {}
    jumps: dict[int, list[TraceEvent]] = {}
    sat_out: dict[int, int] = {}  # the steps a run of sit-outs has lasted, at the end of a step's list
    for e in trace.events:
        lines = events.setdefault(e.before_step, [])
        if e.kind == "sit_out" and sat_out.get(e.before_step):
            # One line for a run: a loaded machine's notebook 08 once listed four identical ones.
            sat_out[e.before_step] += 1
            lines[-1] = f"sat out {sat_out[e.before_step]} steps (its grammar's work did not fit the step's budget)"
            continue
        sat_out[e.before_step] = 1 if e.kind == "sit_out" else 0
        lines.append(event_text(e))
        if e.kind == "jump":
            jumps.setdefault(e.before_step, []).append(e)
    steps, boxes = [], 0
    for s in trace.steps:
        keep, new = boxes, []  # type: tuple[int, list[list[Any]]]
        for j in jumps.get(s.index, []):
            keep = min(keep, j.info["at"])
            kinds = j.info.get("new_how") or ["jumped"] * len(j.info["new"])
            new = new[: max(j.info["at"] - keep, 0)] + [[t, k] for t, k in zip(j.info["new"], kinds)]
        new.append([s.token_text, s.how, 1] if s.special else [s.token_text, s.how])
        boxes = keep + len(new)
        steps.append(
            {
                "state": s.state,
                "node": None if auto is None else auto.node_of.get(str(s.state)),
                "allowed": s.allowed,
                "vocab": s.vocab,
                "mass": _round(s.mass),
                "t": s.temperature,
                "tok": s.token_text,
                "how": s.how,
                "top": [[t.text, _round(t.prob), int(t.allowed)] for t in s.top],
                "after": [[t.text, _round(t.prob)] for t in s.top_after],
                "ev": events.get(s.index, []),
                "keep": keep,
                "add": new,
            }
        )
    return {"steps": steps, "end": events.get(len(trace.steps), []), "colours": COLOURS, "how": HOW}


def mass_plot(trace: Trace, title: str | None = None) -> str:
    """An inline SVG line of the mass kept per step (0 at the bottom, 1 at the top), with
    the page's step marker; with a `title`, a standalone figure instead (a file of its own:
    its namespace, its title for screen readers and its own styles, no marker)."""
    n = max(len(trace.steps), 1)
    x = lambda i: 50 + (PLOT_W - 70) * (i / max(n - 1, 1))  # noqa: E731
    y = lambda m: 15 + (PLOT_H - 45) * (1 - m)  # noqa: E731
    points = " ".join(f"{x(i):.1f},{y(s.mass):.1f}" for i, s in enumerate(trace.steps))
    grid = "".join(
        f'<line x1="50" x2="{PLOT_W - 20}" y1="{y(m):.1f}" y2="{y(m):.1f}" class="grid"/>'
        f'<text x="44" y="{y(m) + 6:.1f}" text-anchor="end">{m:g}</text>'
        for m in (0, 0.5, 1)
    )
    standalone = title is not None
    head = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    marker = "" if standalone else f'<line class="marker" x1="50" x2="50" y1="10" y2="{PLOT_H - 28}"/>'
    # A figure's caption names steps, so the standalone plot numbers them under the line (the
    # page has its marker instead); its axis label moves down below the numbers.
    height, ticks = PLOT_H, ""
    if standalone:
        every = next(e for e in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10**9) if n / e <= 10)
        ticks = "".join(
            f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y(0):.1f}" y2="{y(0) + 5:.1f}" class="grid"/>'
            f'<text class="step" x="{x(i):.1f}" y="{y(0) + 22:.1f}" text-anchor="middle">{i}</text>'
            for i in range(0, n, every)
        )
        height = PLOT_H + 24
    svg = (
        f'<svg{head} class="plot" viewBox="0 0 {PLOT_W} {height}" width="{PLOT_W}" height="{height}" '
        f'role="img" aria-label="mass kept per step">'
        + (f"<title>{html.escape(title)}</title><style>{PLOT_STYLE}</style>" if title is not None else "")
        + f'{grid}{ticks}<polyline points="{points}" class="mass"/>{marker}'
        f'<text x="{PLOT_W / 2}" y="{height - 6}" text-anchor="middle">step (mass the mask kept)</text></svg>'
    )
    return svg + "\n" if standalone else svg


# A standalone plot's own styles (the page's CSS gives the same classes these looks).
PLOT_STYLE = (
    ".grid{stroke:#ddd}.mass{fill:none;stroke:#1976d2;stroke-width:3}"
    "text{font-family:Helvetica,Arial,sans-serif;font-size:18px;fill:#444}"
)


def automaton_svg(auto: Automaton | None) -> str:
    """The automaton's SVG (rendered once, by graphviz), or a note saying why there is none."""
    if auto is None:
        return '<p class="note">no automaton recorded (trace(..., draw=False))</p>'
    if auto.dot is None:
        return f'<p class="note">{html.escape(auto.note)}</p>'
    if auto.svg is None:
        from ..drawings.render import GraphvizNotFoundError, render_dot

        try:
            svg = render_dot(auto.dot, "svg").decode("utf-8")
            auto.svg = svg[svg.index("<svg") :]  # without the XML prolog and DOCTYPE
        except GraphvizNotFoundError as e:
            return f'<p class="note">{html.escape(str(e))}</p>'
    return (
        f'<p class="note">{html.escape(auto.note)} · click the drawing (or press z) to fit or zoom it</p>'
        f'<div class="svgbox" title="click (or z): fit the drawing into the column, or show it at its own size">'
        f"{auto.svg}</div>"
    )


CSS = """
.tv{font-family:Helvetica,Arial,sans-serif;font-size:20px;line-height:1.4;color:#111;max-width:1800px}
.tv h1{font-size:28px;margin:4px 0}.tv .meta{font-size:18px;color:#444}
.tv .bar{display:flex;gap:16px;align-items:center;margin:10px 0;font-size:22px}
.tv .bar input{flex:1;height:28px}.tv button{font-size:22px;padding:2px 14px}
.tv .cols{display:flex;gap:24px;flex-wrap:wrap}.tv .col{flex:1;min-width:480px}
.tv .svgbox{overflow:auto;max-height:520px;border:1px solid #ddd}
.tv .svgbox svg{max-width:100%;height:auto;cursor:zoom-in}
.tv .svgbox.full svg{max-width:none;cursor:zoom-out}
.tv g.node.current ellipse{fill:#ffd54f;stroke:#e65100;stroke-width:4}
.tv .out{font-family:Menlo,Consolas,monospace;font-size:22px;white-space:pre-wrap;word-break:break-all;
  border:1px solid #ccc;padding:8px;min-height:2em}
.tv .tok{border:1px solid #888;border-radius:4px;margin:0 1px;padding:0 1px}
.tv .tok.last{outline:3px solid #e65100}
.tv .tok[data-label]::before{content:attr(data-label);color:#555;font-size:18px}
.tv table{border-collapse:collapse;font-size:19px}.tv td,.tv th{padding:2px 8px;text-align:left}
.tv td.t{font-family:Menlo,Consolas,monospace;white-space:pre}
.tv tr.no td.t{text-decoration:line-through;color:#b00}
.tv .pbar{display:inline-block;height:14px;background:#1976d2;vertical-align:middle}
.tv .stats b{font-size:24px}.tv .ev{color:#6a1b9a}
.tv svg.plot{max-width:100%;height:auto}
.tv .plot .grid{stroke:#ddd}.tv .plot .mass{fill:none;stroke:#1976d2;stroke-width:3}
.tv .plot .marker{stroke:#e65100;stroke-width:3}.tv .plot text{font-size:18px;fill:#444}
.tv .legend span{display:inline-block;padding:0 6px;margin:0 8px 4px 0;border:1px solid #888;border-radius:4px}
.tv ol.steps{display:none}.tv .note{color:#555;font-size:18px}
"""

SCRIPT = """
(function(root){
  var data=JSON.parse(root.querySelector('script.tv-data').textContent);
  var steps=data.steps, n=steps.length, cur=0;
  var $=function(c){return root.querySelector(c)};
  var slider=$('.slider'), out=$('.out'), nodes={}, box=$('.svgbox'), drawn=box&&box.querySelector('svg');
  root.querySelectorAll('g.node').forEach(function(g){var t=g.querySelector('title');if(t)nodes[t.textContent]=g;});
  function esc(s){return s.replace(/[&<>]/g,function(c){return {'&':'&amp;','<':'&lt;','>':'&gt;'}[c];});}
  function shown(t){return "'"+t.replace(/ /g,'\\u2423').replace(/\\n/g,'\\\\n')+"'";}
  function boxes(i){var b=[];for(var k=0;k<=i;k++){b=b.slice(0,steps[k].keep).concat(steps[k].add);}return b;}
  function show(i){
    if(!n)return; cur=Math.max(0,Math.min(n-1,i)); var s=steps[cur];
    slider.value=cur; $('.stepno').textContent='step '+cur+' / '+(n-1);
    root.querySelectorAll('li[data-step]').forEach(function(li){li.classList.toggle('current',+li.dataset.step===cur);});
    root.querySelectorAll('g.node.current').forEach(function(g){g.classList.remove('current');});
    if(s.node!==null&&nodes[s.node])nodes[s.node].classList.add('current');
    reveal();
    $('.state').textContent=s.state===null?'(not exposed)':s.state;
    $('.allowed').textContent=s.allowed; $('.vocab').textContent=s.vocab;
    $('.mass').textContent=(100*s.mass).toPrecision(4)+'%'; $('.temp').textContent=s.t;
    $('.chosen').textContent=shown(s.tok)+' ('+data.how[s.how]+')';
    var b=boxes(cur); out.innerHTML='';
    b.forEach(function(x,k){var e=document.createElement('span');e.className='tok'+(k===b.length-1?' last':'');
      e.style.background=data.colours[x[1]];e.title=x[1];
      if(x[2]){e.dataset.label=x[0];}else{e.textContent=x[0];} out.appendChild(e);});
    var rows=s.top.map(function(t){var w=Math.max(1,Math.round(200*t[1]));
      return '<tr class="'+(t[2]?'ok':'no')+'"><td class="t">'+esc(shown(t[0]))+'</td><td>'+(100*t[1]).toPrecision(3)+
      '%</td><td><span class="pbar" style="width:'+w+'px"></span></td><td>'+(t[2]?'allowed':'masked')+'</td></tr>';});
    $('.before tbody').innerHTML=rows.join('');
    $('.after tbody').innerHTML=s.after.map(function(t){return '<tr><td class="t">'+esc(shown(t[0]))+'</td><td>'+
      (100*t[1]).toPrecision(3)+'%</td><td><span class="pbar" style="width:'+Math.max(1,Math.round(200*t[1]))+
      'px"></span></td></tr>';}).join('');
    var ev=s.ev.concat(cur===n-1?data.end:[]);
    $('.events').innerHTML=ev.length?ev.map(function(e){return '<li>'+esc(e)+'</li>';}).join(''):'<li>(none)</li>';
    var m=$('.plot .marker'), x=50+(__W__-70)*(n>1?cur/(n-1):0); m.setAttribute('x1',x); m.setAttribute('x2',x);
  }
  // A drawing fitted into the column below 60% of its size has labels under ~8 px on a
  // projector: show it at its own size instead, the box scrolled to the current node.
  function reveal(){var g=root.querySelector('g.node.current');
    if(!box||!g||!box.classList.contains('full'))return;
    var b=box.getBoundingClientRect(), r=g.getBoundingClientRect();
    box.scrollLeft+=(r.left+r.right-b.left-b.right)/2; box.scrollTop+=(r.top+r.bottom-b.top-b.bottom)/2;}
  function zoom(){if(!box)return; box.classList.toggle('full'); reveal();}
  if(drawn&&drawn.viewBox&&drawn.viewBox.baseVal&&drawn.viewBox.baseVal.width){
    var own=drawn.viewBox.baseVal.width*4/3;  // graphviz's units are points
    if(box.clientWidth<0.6*own)box.classList.add('full');}
  if(box)box.addEventListener('click',zoom);
  slider.max=Math.max(n-1,0); slider.addEventListener('input',function(){show(+slider.value);});
  $('.prev').addEventListener('click',function(){show(cur-1);});
  $('.next').addEventListener('click',function(){show(cur+1);});
  function key(e){if(e.key==='ArrowRight'){show(cur+1);e.preventDefault();}
    else if(e.key==='ArrowLeft'){show(cur-1);e.preventDefault();}
    else if(e.key==='Home'){show(0);e.preventDefault();}else if(e.key==='End'){show(n-1);e.preventDefault();}
    else if(e.key==='z'){zoom();e.preventDefault();}}
  root.addEventListener('keydown',key);
  if(root.dataset.page)document.addEventListener('keydown',function(e){if(!root.contains(e.target))key(e);});
  show(0);
})(document.getElementById('__ID__'));
"""


def trace_body(trace: Trace, root_id: str, page: bool) -> str:
    """The step view's markup, styles and script, in one element with id `root_id`."""
    data = json.dumps(page_data(trace), ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    constraint = next(
        ((k, v) for k in ("regex", "json_schema", "ebnf", "structural_tag") if (v := trace.params.get(k)) is not None),
        None,
    )
    shown = (
        "unconstrained"
        if constraint is None
        else (f"{constraint[0]}: {constraint[1][:300]}" + ("…" if len(constraint[1]) > 300 else ""))
    )
    where = trace.stage + (f", backend {trace.backend}" if trace.backend else "")
    items = "".join(
        f'<li data-step="{s.index}" data-state="{html.escape(str(s.state))}" data-allowed="{s.allowed}" '
        f'data-mass="{_round(s.mass)}"></li>'
        for s in trace.steps
    )
    legend = "".join(f'<span style="background:{c}">{html.escape(HOW[k])}</span>' for k, c in COLOURS.items())
    stop = trace.stop_reason or {}
    return f"""<div class="tv" id="{root_id}" tabindex="0"{' data-page="1"' if page else ""}>
<style>{CSS}</style>
<h1>Step view: {html.escape(trace.prompt[:120])}</h1>
<div class="meta">{html.escape(shown)}<br>stage {html.escape(where)} · {len(trace.steps)} steps ·
stop: {html.escape(str(stop.get("type")))} · temperature {trace.params.get("temperature")}</div>
<div class="bar"><button class="prev" title="previous step (←)">←</button>
<input class="slider" type="range" min="0" max="0" value="0" aria-label="step">
<button class="next" title="next step (→)">→</button><span class="stepno"></span></div>
<div class="stats">state <b class="state"></b> · allowed <b class="allowed"></b> of <span class="vocab"></span> tokens ·
mass kept <b class="mass"></b> (at T=<span class="temp"></span>) · chosen <b class="chosen"></b></div>
<div class="cols"><div class="col"><h2>Output so far</h2><div class="out"></div>
<div class="legend">{legend}</div>
<h2>Events before this step</h2><ul class="events ev"></ul>
<h2>Mass kept at each step</h2>{mass_plot(trace)}</div>
<div class="col"><h2>Automaton</h2>{automaton_svg(trace.automaton)}
<h2>Top tokens before the mask</h2><table class="before"><tbody></tbody></table>
<h2>After the mask</h2><table class="after"><tbody></tbody></table></div></div>
<ol class="steps">{items}</ol>
<script type="application/json" class="tv-data">{data}</script>
<script>{SCRIPT.replace("__ID__", root_id).replace("__W__", str(PLOT_W))}</script>
</div>"""


def trace_page(trace: Trace) -> str:
    """The whole page (what `Trace.save` writes)."""
    body = trace_body(trace, "trace", page=True)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>minisglang trace: {html.escape(trace.prompt[:60])}</title></head><body>{body}</body></html>\n"
    )


def trace_fragment(trace: Trace) -> str:
    """For Jupyter: the page in an iframe (its styles and keys stay its own)."""
    page = trace_page(trace)
    return (
        f'<iframe id="tv-{uuid.uuid4().hex[:8]}" srcdoc="{html.escape(page, quote=True)}" '
        f'style="width:100%;height:1000px;border:1px solid #ccc"></iframe>'
    )
