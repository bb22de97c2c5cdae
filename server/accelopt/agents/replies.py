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

from accelopt.nki.python_source import parse_module
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
        tree = parse_module(code)
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
        tree = parse_module(original.text)
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


# A title that is a line of code, a linter comment, a docstring fence or a template placeholder
# is what a model writes when it ignores the format; none of them names an optimization.
_CODE_START = re.compile(r"^(\"\"\"|\'\'\'|#|@|import |from |def |class |return |[{}\[\]()<])")
_NOT_PROSE = re.compile(r"pylint:|noqa|type: ignore|<[a-z ]+>", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z]{2,}")


def title_problem(title: str, echo: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Why `title` is not the name of an optimization step, or None."""
    text = title.strip()
    if not text:
        return "it is empty"
    if len(_WORD.findall(text)) < 2:
        return f"{text[:40]!r} has fewer than two words"
    if _CODE_START.match(text) or _NOT_PROSE.search(text):
        return f"{text[:40]!r} is code or markup, not a plan"
    if _is_code(text):
        return f"{text[:40]!r} is a line of code, not a plan"
    lowered = _clean_title(text).lower()
    instructions = (_clean_title(line).lower() for line in echo)
    if any(lowered == line or (len(lowered) >= 20 and line.startswith(lowered)) for line in instructions):
        return "it repeats the instructions"
    return None


def _is_code(text: str) -> bool:
    try:
        tree = parse_module(text)
    except SyntaxError:
        return False
    # Prose seldom parses; when it does, it is a bare name or constant ("Vectorize").
    return not (len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr)
                and isinstance(tree.body[0].value, ast.Name | ast.Constant))


def parse_plan(reply: str, known_lessons: set[int], echo: set[str] | frozenset[str] = frozenset()) -> Plan:
    """A plan from JSON {"title", "description", "lessons": [ids]}, or from free text (first line
    = title). Lesson ids the planner cites that were not in its prompt are dropped. A reply whose
    title is not a plan (a number, a code line, the echoed instructions) is refused."""
    data = _json_object(reply)
    if data and isinstance(title := data.get("title"), str) and title.strip():
        cited = data.get("lessons") or data.get("lesson_ids") or []
        ids = (
            [int(x) for x in cited if isinstance(x, int | str) and str(x).isdigit()]
            if isinstance(cited, list)
            else []
        )
        plan = Plan(
            title=str(data["title"]).strip()[:200],
            description=str(data.get("description", "")).strip(),
            lesson_ids=[i for i in ids if i in known_lessons],
        )
    else:
        lines = [ln for ln in reply.strip().splitlines() if ln.strip() and not ln.strip().startswith("```")]
        if not lines:
            raise ReplyError("the planner's reply was empty")
        cited_ids = {int(n) for n in re.findall(r"lesson\s*#?(\d+)", reply, re.IGNORECASE)}
        plan = Plan(
            title=_clean_title(lines[0])[:200],
            description="\n".join(lines[1:]).strip(),
            lesson_ids=sorted(cited_ids & known_lessons),
        )
    problem = title_problem(plan.title, echo)
    if problem:
        raise ReplyError(f"the planner's reply is not a plan: its title {problem}")
    return plan


def lesson_problem(lesson: Lesson, echo: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Why `lesson` should not enter the memory, or None: later planners read every stored
    lesson, so one that names no technique, states no step or repeats the prompt costs them."""
    problem = title_problem(lesson.title, echo)
    if problem:
        return f"its title {problem}"
    if len(_WORD.findall(lesson.plan)) < 2:
        return "it states no reusable step (its plan has fewer than two words)"
    if lesson.plan.strip().lower() in echo:
        return "its plan repeats the instructions"
    return None


def parse_lesson(reply: str, positive: bool, echo: set[str] | frozenset[str] = frozenset()) -> Lesson:
    data = _json_object(reply)
    if data and isinstance(title := data.get("title"), str) and title.strip():
        lesson = Lesson(
            title=str(data["title"]).strip()[:200],
            plan=str(data.get("plan", "") or data.get("description", "")).strip(),
            before=str(data.get("before", "")).strip(),
            after=str(data.get("after", "")).strip(),
            positive=positive,
        )
    else:
        blocks = [code for _, code in code_blocks(reply)]
        prose = [ln for ln in _FENCE.sub("", reply).splitlines() if ln.strip()]
        if not prose and not blocks:
            raise ReplyError("the summarizer's reply was empty")
        lesson = Lesson(
            title=_clean_title(prose[0])[:200] if prose else "",
            plan="\n".join(prose[1:]).strip(),
            before=blocks[0] if blocks else "",
            after=blocks[1] if len(blocks) > 1 else "",
            positive=positive,
        )
    problem = lesson_problem(lesson, echo)
    if problem:
        raise ReplyError(f"the summarizer's reply is not a lesson: {problem}")
    return lesson
