"""A self-contained HTML report of one search, built from its event stream: the outcome, progress
over iterations, the candidate tree, each candidate's diff against its parent, its profile and the
agents' notes, and the cost. No scripts and no external assets: it opens anywhere."""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable
from html import escape

from accelopt.search.candidate import Candidate
from accelopt.search.events import (
    CandidateEvent,
    CostEvent,
    Finished,
    IterationEvent,
    LessonEvent,
    SearchEvent,
    Started,
)

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; border-bottom: 1px solid #eee; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #17702a; } .bad { color: #b3261e; } .muted { color: #777; }
ul.tree, ul.tree ul { list-style: none; padding-left: 1.4em; border-left: 1px dotted #bbb; }
pre { background: #f7f7f7; padding: 8px; overflow-x: auto; font-size: 12px; }
pre .add { background: #e6ffec; } pre .del { background: #ffebe9; } pre .hunk { color: #6a6af0; }
details { margin: 4px 0; } summary { cursor: pointer; }
.label { font-size: 12px; background: #eef; border-radius: 3px; padding: 0 4px; }
"""


def build_report(events: Iterable[SearchEvent]) -> str:
    started: Started | None = None
    finished: Finished | None = None
    cost: CostEvent | None = None
    iterations: list[IterationEvent] = []
    lessons: list[LessonEvent] = []
    candidates: dict[str, Candidate] = {}
    for event in events:
        if isinstance(event, Started):
            started = event
            candidates[event.baseline.id] = event.baseline
        elif isinstance(event, CandidateEvent):
            candidates[event.candidate.id] = event.candidate
        elif isinstance(event, IterationEvent):
            iterations.append(event)
        elif isinstance(event, LessonEvent):
            lessons.append(event)
        elif isinstance(event, CostEvent):
            cost = event
        elif isinstance(event, Finished):
            finished = event
    title = f"AccelOpt search: {started.kernel_name}" if started else "AccelOpt search"
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>",
        f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>",
        _summary(started, finished, cost, candidates),
        _ranking(finished),
        _progress(iterations, started),
        _tree(candidates),
        _lessons(lessons),
        _details(candidates),
        "</body></html>",
    ]
    return "\n".join(parts)


def _fmt(value: float | None, pattern: str = "{:.3f}") -> str:
    return "–" if value is None else pattern.format(value)


def _pct(fraction: float | None) -> str:
    return "–" if fraction is None else f"{100 * fraction:.1f}%"


def _summary(
    started: Started | None,
    finished: Finished | None,
    cost: CostEvent | None,
    candidates: dict[str, Candidate],
) -> str:
    rows: list[tuple[str, str]] = []
    if started:
        base = started.baseline
        label = base.profile.label if base.profile else f"{started.backend} on {started.hardware}"
        rows += [
            ("kernel", started.kernel_name),
            ("backend", f"{started.backend}: every latency below is {label}"),
            ("agents", started.agents),
            (
                "baseline",
                f"{_fmt(base.latency_ms, '{:.4f} ms')} · {_pct(base.percent_of_peak)} of peak · {base.status}",
            ),
        ]
        if base.timed_size:
            checked = f"outputs checked at the {base.checked_size} size, " if base.checked_size else ""
            rows.append(("input sizes", f"{checked}latencies timed at the {base.timed_size} size"))
        rows += [("note", note) for note in base.evaluation_notes]
    if finished:
        best = finished.ranked[0].candidate if finished.ranked else None
        rows += [
            ("outcome", f"{finished.reason}: {finished.message}"),
            (
                "best",
                f"{best.id}: {_fmt(best.speedup)}x · {_fmt(best.latency_ms, '{:.4f} ms')} · "
                f"{_pct(best.percent_of_peak)} of peak"
                if best
                else "–",
            ),
            ("evaluations", f"{finished.evaluations} (wall time {finished.wall_time_s:.1f} s)"),
        ]
        if finished.endpoint.calls:
            rows.append(("agent calls", finished.endpoint.describe()))
    statuses: dict[str, int] = defaultdict(int)
    for c in candidates.values():
        statuses[str(c.status)] += 1
    rows.append(("candidates", ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))))
    if cost:
        rows.append(
            (
                "cost",
                f"{cost.prompt_tokens:,} prompt + {cost.completion_tokens:,} completion tokens · ${cost.dollars:.4f}",
            )
        )
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _ranking(finished: Finished | None) -> str:
    if not finished or not finished.ranked:
        return "<h2>Ranking</h2><p class='muted'>no correct candidate</p>"
    rows = []
    for item in finished.ranked:
        c = item.candidate
        chain = " → ".join(p.title for p in c.rationale) or "(baseline)"
        rows.append(
            f"<tr><td class='num'>{item.rank}</td><td><a href='#{c.id}'>{c.id}</a></td>"
            f"<td class='num'>{_fmt(c.speedup)}x</td><td class='num'>{_fmt(c.latency_ms, '{:.4f}')}</td>"
            f"<td class='num'>{_pct(c.percent_of_peak)}</td><td>{escape(chain)}</td></tr>"
        )
    head = "<tr><th>#</th><th>id</th><th>speedup</th><th>latency ms</th><th>of peak</th><th>plans from the baseline</th></tr>"
    return f"<h2>Ranking</h2><table>{head}{''.join(rows)}</table>"


def _progress(iterations: list[IterationEvent], started: Started | None) -> str:
    if not iterations:
        return "<h2>Progress</h2><p class='muted'>no iteration completed</p>"
    points = [(0, 1.0)] + [(it.iteration, it.best_speedup) for it in iterations]
    width, height, pad = 640, 220, 36
    low, high = min(s for _, s in points), max(s for _, s in points)
    span = max(high - low, 0.01 * high)  # a flat run still gets a readable axis
    bottom, top = low - 0.05 * span, high + 0.05 * span
    last = max(i for i, _ in points) or 1

    def xy(i: int, s: float) -> str:
        x = pad + (width - 2 * pad) * i / last
        y = height - pad - (height - 2 * pad) * (s - bottom) / (top - bottom)
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(i, s) for i, s in points)
    dots = "".join(
        f"<circle cx='{xy(i, s).split(',')[0]}' cy='{xy(i, s).split(',')[1]}' r='3'><title>iteration {i}: {s:.3f}x</title></circle>"
        for i, s in points
    )
    svg = (
        f"<svg width='{width}' height='{height}' role='img' aria-label='best speedup per iteration'>"
        f"<line x1='{pad}' y1='{height - pad}' x2='{width - pad}' y2='{height - pad}' stroke='#999'/>"
        f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{height - pad}' stroke='#999'/>"
        f"<text x='{pad}' y='{pad - 8}' font-size='11'>best speedup: {low:.3f}x → {high:.3f}x</text>"
        f"<text x='{width - pad}' y='{height - 8}' font-size='11' text-anchor='end'>iteration {last}</text>"
        f"<polyline fill='none' stroke='#2a62c9' stroke-width='2' points='{line}'/>{dots}</svg>"
    )
    rows = "".join(
        f"<tr><td class='num'>{it.iteration}</td><td class='num'>{it.best_speedup:.3f}x</td>"
        f"<td class='num'>{_pct(it.best_percent_of_peak)}</td><td class='num'>{it.evaluations}</td>"
        f"<td>{escape(', '.join(it.beam))}</td></tr>"
        for it in iterations
    )
    head = "<tr><th>iteration</th><th>best</th><th>of peak</th><th>evaluations</th><th>beam</th></tr>"
    return f"<h2>Progress</h2>{svg}<table>{head}{rows}</table>"


def _status_class(c: Candidate) -> str:
    return "ok" if c.status == "ok" else "bad"


def _tree(candidates: dict[str, Candidate]) -> str:
    children: dict[str | None, list[Candidate]] = defaultdict(list)
    for c in candidates.values():
        children[c.parent_id].append(c)

    def node(c: Candidate) -> str:
        plan = escape(c.plan.title) if c.plan else "baseline"
        extra = f" <span class='muted'>fixes {c.fixed_from}</span>" if c.fixed_from else ""
        extra += f" <span class='muted'>(same kernel as {c.duplicate_of})</span>" if c.duplicate_of else ""
        speed = f" {_fmt(c.speedup)}x" if c.speedup is not None else ""
        kids = "".join(node(k) for k in children.get(c.id, []))
        return (
            f"<li><a href='#{c.id}'>{c.id}</a> <span class='{_status_class(c)}'>{escape(str(c.status))}{speed}</span>"
            f" · {plan}{extra}{f'<ul>{kids}</ul>' if kids else ''}</li>"
        )

    roots = "".join(node(c) for c in children.get(None, []))
    return f"<h2>Candidate tree</h2><ul class='tree'>{roots}</ul>"


def _lessons(lessons: list[LessonEvent]) -> str:
    if not lessons:
        return ""
    rows = "".join(
        f"<tr><td class='num'>{e.experience_id if e.experience_id is not None else '–'}</td>"
        f"<td class='{'ok' if e.lesson.positive else 'bad'}'>{'failed' if e.speedup is None else f'{e.speedup:.3f}x'}</td><td>{escape(e.lesson.title)}</td>"
        f"<td>{escape(e.lesson.plan)}</td></tr>"
        for e in lessons
    )
    return f"<h2>Lessons written to memory</h2><table><tr><th>id</th><th>speedup</th><th>lesson</th><th>plan</th></tr>{rows}</table>"


def _diff(before: str, after: str) -> str:
    lines = []
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), "parent", "candidate", lineterm="", n=3
    ):
        css = (
            "hunk"
            if line.startswith("@@")
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else ""
        )
        lines.append(f"<span class='{css}'>{escape(line)}</span>" if css else escape(line))
    return "<pre>" + ("\n".join(lines) or "(no change)") + "</pre>"


def _details(candidates: dict[str, Candidate]) -> str:
    parts = ["<h2>Candidates</h2>"]
    for c in candidates.values():
        parent = candidates.get(c.parent_id) if c.parent_id else None
        head = (
            f"<b>{c.id}</b> <span class='{_status_class(c)}'>{escape(str(c.status))}</span> · "
            f"{escape(c.plan.title) if c.plan else 'baseline'}"
            + (f" · {_fmt(c.speedup)}x · {_pct(c.percent_of_peak)} of peak" if c.speedup is not None else "")
        )
        body = []
        if c.rationale:
            chain = "".join(f"<li><b>{escape(p.title)}</b> {escape(p.description)}</li>" for p in c.rationale)
            body.append(f"<p>Plans from the baseline:</p><ol>{chain}</ol>")
        if c.lessons_used:
            body.append(f"<p>Lessons used: {', '.join(str(i) for i in c.lessons_used)}</p>")
        if c.message:
            where = f" (line {c.line})" if c.line else ""
            body.append(f"<p class='bad'>{escape(str(c.status))}{where}: {escape(c.message)}</p>")
        if c.duplicate_of:
            body.append(f"<p class='muted'>same kernel as {c.duplicate_of}: evaluated once</p>")
        if c.agent_notes:
            notes = "".join(f"<li>{escape(n)}</li>" for n in c.agent_notes)
            body.append(f"<p>Agent notes:</p><ul>{notes}</ul>")
        # A duplicate's source is shown under its first candidate; an agent error wrote none.
        if not c.duplicate_of and c.status != "agent_error":
            if parent is not None:
                body.append(
                    f"<p>Diff against its parent {escape(parent.id)}:</p>{_diff(parent.kernel.text, c.kernel.text)}"
                )
            else:
                body.append(f"<pre>{escape(c.kernel.text)}</pre>")
            if c.profile is not None:
                body.append(_profile(c))
        parts.append(f"<details id='{c.id}'><summary>{head}</summary>{''.join(body)}</details>")
    return "\n".join(parts)


def _profile(c: Candidate) -> str:
    assert c.profile is not None
    fields = "".join(
        f"<tr><td>{escape(k)}</td><td class='num'>{v:,.6g}</td></tr>"
        for k, v in c.profile.summary_fields().items()
    )
    lines = "".join(
        f"<tr><td class='num'>{cost.line}</td><td class='num'>{100 * cost.fraction:.0f}%</td>"
        f"<td><code>{escape(cost.text.strip())}</code></td></tr>"
        for cost in c.profile.lines[:8]
    )
    costly = f"<p>Costliest lines:</p><table>{lines}</table>" if lines else ""
    return (
        f"<details><summary>profile <span class='label'>{escape(c.profile.label)}</span> · bound "
        f"{escape(c.profile.bound)}</summary><table>{fields}</table>{costly}</details>"
    )
