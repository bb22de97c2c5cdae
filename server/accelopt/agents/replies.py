"""Reading what a model wrote: a kernel module, a plan, a lesson.

Models do not always follow the requested format. The kernel reader accepts one fenced block,
several (it picks the one that defines the kernel), none (the whole reply, if it is Python),
just the kernel function (spliced into the original module) and a renamed kernel (renamed back).
Every repair is reported in `notes`.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

from accelopt.profiling.evaluation import KernelSource
from accelopt.search.candidate import Lesson, Plan

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


class ReplyError(ValueError):
    """The reply holds nothing usable; the message says why."""


@dataclass
class Parsed:
    kernel: KernelSource
    notes: list[str] = field(default_factory=list)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) for every fenced block; an unterminated last fence runs to the end."""
    return [(m.group(1).lower(), m.group(2).strip("\n")) for m in _FENCE.finditer(text)]


def _functions(code: str) -> list[ast.FunctionDef] | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)]


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) or "trace" in ast.unparse(d) for d in fn.decorator_list)


def parse_kernel(reply: str, original: KernelSource) -> Parsed:
    """The kernel module in `reply`, named like `original`."""
    notes: list[str] = []
    blocks = [code for lang, code in code_blocks(reply) if lang in ("", "python", "py", "python3")]
    if not blocks:
        if _functions(reply.strip()):
            blocks = [reply.strip()]
            notes.append("reply had no code block; used the whole reply as the module")
        else:
            raise ReplyError("no code in the reply (expected one ```python block with the whole module)")
    code = _choose_block(blocks, original.name, notes)
    code = _rename_kernel(code, original, notes)
    code = _complete_module(code, original, notes)
    return Parsed(KernelSource(text=code if code.endswith("\n") else code + "\n", name=original.name), notes)


def _choose_block(blocks: list[str], name: str, notes: list[str]) -> str:
    if len(blocks) == 1:
        return blocks[0]
    defining = [b for b in blocks if re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", b, re.MULTILINE)]
    pool = defining or [b for b in blocks if _functions(b)] or blocks
    chosen = max(pool, key=len)  # the full module rather than an excerpt of it
    notes.append(
        f"reply had {len(blocks)} code blocks; used the one with {'the kernel' if defining else 'most code'}"
    )
    return chosen


def _rename_kernel(code: str, original: KernelSource, notes: list[str]) -> str:
    functions = _functions(code)
    if not functions or any(fn.name == original.name for fn in functions):
        return code
    kernels = [fn for fn in functions if _is_jit(fn)] or (functions if len(functions) == 1 else [])
    if len(kernels) != 1:
        return code  # ambiguous: leave it, the evaluation will report the missing kernel
    old = kernels[0].name
    notes.append(f"the reply renamed the kernel to {old!r}; renamed it back to {original.name!r}")
    return re.sub(rf"\b{re.escape(old)}\b", original.name, code)


def _complete_module(code: str, original: KernelSource, notes: list[str]) -> str:
    """A reply with only the kernel function (no imports) replaces that function in the original
    module, keeping the original's imports and helpers."""
    if re.search(r"^\s*(import|from)\s+\S", code, re.MULTILINE):
        return code
    try:
        tree = ast.parse(original.text)
    except SyntaxError:
        return code
    target = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == original.name), None)
    if target is None or not _functions(code):
        return code
    lines = original.text.splitlines()
    start = min([target.lineno, *(d.lineno for d in target.decorator_list)]) - 1
    end = target.end_lineno or target.lineno
    body = code.splitlines()
    if not any(line.lstrip().startswith("@") for line in body):
        decorators = lines[start : target.lineno - 1]
        body = decorators + body
    notes.append("reply had only the kernel function; spliced it into the original module")
    return "\n".join(lines[:start] + body + lines[end:])


# -- plans and lessons ------------------------------------------------------------------------


def _json_object(text: str) -> dict[str, object] | None:
    candidates = [code for lang, code in code_blocks(text) if lang in ("json", "")] + [text]
    for chunk in candidates:
        start, end = chunk.find("{"), chunk.rfind("}")
        if start < 0 or end <= start:
            continue
        try:
            value = json.loads(chunk[start : end + 1])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _clean_title(line: str) -> str:
    line = re.sub(r"^\s*(#+|\*\*|[-*]|\d+[.)])\s*", "", line)
    line = re.sub(r"^(title|plan)\s*:\s*", "", line, flags=re.IGNORECASE)
    return line.strip().strip("*").strip()


def parse_plan(reply: str, known_lessons: set[int]) -> Plan:
    """A plan from JSON {"title", "description", "lessons": [ids]}, or from free text (first line
    = title). Lesson ids the planner cites that were not in its prompt are dropped."""
    data = _json_object(reply)
    if data and isinstance(title := data.get("title"), str) and title.strip():
        cited = data.get("lessons") or data.get("lesson_ids") or []
        ids = (
            [int(x) for x in cited if isinstance(x, int | str) and str(x).isdigit()]
            if isinstance(cited, list)
            else []
        )
        return Plan(
            title=str(data["title"]).strip()[:200],
            description=str(data.get("description", "")).strip(),
            lesson_ids=[i for i in ids if i in known_lessons],
        )
    lines = [ln for ln in reply.strip().splitlines() if ln.strip() and not ln.strip().startswith("```")]
    if not lines:
        raise ReplyError("the planner's reply was empty")
    title = _clean_title(lines[0])
    if not title:
        raise ReplyError("the planner's reply had no plan title")
    cited = {int(n) for n in re.findall(r"lesson\s*#?(\d+)", reply, re.IGNORECASE)}
    return Plan(
        title=title[:200], description="\n".join(lines[1:]).strip(), lesson_ids=sorted(cited & known_lessons)
    )


def parse_lesson(reply: str, positive: bool) -> Lesson:
    data = _json_object(reply)
    if data and isinstance(title := data.get("title"), str) and title.strip():
        return Lesson(
            title=str(data["title"]).strip()[:200],
            plan=str(data.get("plan", "") or data.get("description", "")).strip(),
            before=str(data.get("before", "")).strip(),
            after=str(data.get("after", "")).strip(),
            positive=positive,
        )
    blocks = [code for _, code in code_blocks(reply)]
    prose = [ln for ln in _FENCE.sub("", reply).splitlines() if ln.strip()]
    if not prose and not blocks:
        raise ReplyError("the summarizer's reply was empty")
    return Lesson(
        title=_clean_title(prose[0])[:200] if prose else "lesson",
        plan="\n".join(prose[1:]).strip(),
        before=blocks[0] if blocks else "",
        after=blocks[1] if len(blocks) > 1 else "",
        positive=positive,
    )
