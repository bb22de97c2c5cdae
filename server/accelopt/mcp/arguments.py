"""Bad tool arguments told in a line an agent (or a person in the MCP Inspector) can act on.

The SDK answers arguments that do not match a tool's input schema with pydantic's own report:
the model's internal name ("profile_kernelArguments"), `[type=..., input_value=...]` codes and a
link to pydantic's documentation on every error. This says, per argument, what was wrong and
what was sent, e.g. "profile_kernel: argument `seeds`: Input should be a valid integer (got
'many')".
"""

from __future__ import annotations

from pydantic import ValidationError

_SHOWN_VALUE_CHARS = 60


def describe_invalid_arguments(tool: str, error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        problem = f"argument `{where}`: {item['msg']}"
        if item["type"] != "missing" and "input" in item:
            problem += f" (got {_shown(item['input'])})"
        problems.append(problem)
    return f"{tool}: " + "; ".join(problems)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[: _SHOWN_VALUE_CHARS - 1] + "…"
