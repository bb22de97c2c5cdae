"""How many kernels of a folder of NKI kernel files run unchanged under `accelopt profile`.

    .venv/bin/python benchmarks/public_kernels.py FOLDER [--only NAME ...] [--seeds 1]

The folder holds kernel files (anyone's: keep them outside this repository) and a
`kernels.json` manifest, a list of entries

    {"file": "sub/x.py", "kernel": "name", "inputs": "a=float32[256,512] b=float32[512]",
     "grid": "2, 2", "hardware": "trn2", "note": "why these inputs"}

(`grid` and `hardware` optional; `inputs` optional when the file declares its own
`# accelopt:` directive). The folder is copied to a scratch folder once (so a kernel's sibling
modules and its package's `__init__.py` files are there, as beside the original); each entry's
file there gets its directives inserted right above the kernel's decorators, the kernel's own
text unchanged, and is profiled in
the sandbox with a numeric check against itself (the kernel is its own oracle), so "ran" means:
the emulator executed it numerically, the trace was verified and the timing model timed it.
Prints one row per kernel (ran / the status, error code and message of the first failure) and a
count of failures by cause. `--json FILE` also writes the rows.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
ACCELOPT = ROOT / ".venv" / "bin" / "accelopt"


class Entry(BaseModel):
    file: str
    kernel: str
    inputs: str | None = None
    grid: str | None = None
    hardware: str | None = None
    note: str = ""


class Row(BaseModel):
    file: str
    kernel: str
    status: str
    error_code: str | None = None
    line: int | None = None
    message: str = ""
    seconds: float = 0.0

    @property
    def ran(self) -> bool:
        return self.status == "ok"


def with_directives(text: str, entry: Entry) -> str:
    """`text` with the entry's `# accelopt:` lines right above the kernel's first decorator."""
    lines = text.splitlines(keepends=True)
    definition = re.compile(rf"^(\s*)def\s+{re.escape(entry.kernel)}\s*\(")
    for index, line in enumerate(lines):
        found = definition.match(line)
        if found is None:
            continue
        start = index
        # up over the decorators (and comment lines between them and the `def`)
        while start > 0 and lines[start - 1].lstrip().startswith(("@", "#")):
            start -= 1
        while lines[start].lstrip().startswith("#"):  # comments above the decorators stay above
            start += 1
        indent = found.group(1)
        extra = [f"{indent}# accelopt: inputs {entry.inputs}\n"] if entry.inputs else []
        if entry.grid:
            extra.append(f"{indent}# accelopt: grid {entry.grid}\n")
        return "".join(lines[:start] + extra + lines[start:])
    raise SystemExit(f"{entry.file}: no `def {entry.kernel}(`")


def shorten(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first[:160]


def run_entry(folder: Path, entry: Entry, scratch: Path, seeds: int, timeout: int) -> Row:
    source = folder / entry.file
    copy = scratch / source.relative_to(folder)
    copy.parent.mkdir(parents=True, exist_ok=True)
    original = source.read_text()
    copy.write_text(with_directives(original, entry))
    try:
        return _profile(copy, entry, seeds, timeout)
    finally:
        copy.write_text(original)  # the next entry may import this file as a sibling


def _profile(copy: Path, entry: Entry, seeds: int, timeout: int) -> Row:
    command = [str(ACCELOPT), "profile", str(copy), "--kernel", entry.kernel, "--json", "--seeds", str(seeds)]
    command += ["--timeout", str(timeout)]
    if entry.hardware:
        command += ["--hardware", entry.hardware]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout * 4, check=False)
    seconds = time.monotonic() - started
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        return Row(
            file=entry.file,
            kernel=entry.kernel,
            status="cli_error",
            message=shorten(done.stderr or done.stdout),
            seconds=seconds,
        )
    return Row(
        file=entry.file,
        kernel=entry.kernel,
        status=result.get("status", "?"),
        error_code=result.get("error_code"),
        line=result.get("line"),
        message=shorten(result.get("message") or ""),
        seconds=seconds,
    )


def cause(row: Row) -> str:
    """A failure's group: the error code, else the message with names and numbers blurred."""
    if row.error_code:
        return f"{row.status}: {row.error_code}"
    message = re.sub(r"^\S+\.py:\d+: (error: )?", "", row.message)  # the copy's path and line
    words = re.sub(r"'[^']*'|`[^`]*`|\d+", "_", message)
    return f"{row.status}: {words[:48]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--only", nargs="*", default=None, help="entries whose file contains one of these")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--table", type=Path, default=None, help="reprint the rows a --json run wrote; run nothing"
    )
    args = parser.parse_args()
    if args.table:
        summarize([Row.model_validate(r) for r in json.loads(args.table.read_text())])
        return 0
    folder: Path = args.folder.resolve()
    entries = [Entry.model_validate(e) for e in json.loads((folder / "kernels.json").read_text())]
    if args.only:
        entries = [e for e in entries if any(o in e.file or o == e.kernel for o in args.only)]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="public-kernels-") as scratch:
        shutil.copytree(folder, scratch, dirs_exist_ok=True, ignore=shutil.ignore_patterns("kernels.json"))
        for entry in entries:
            row = run_entry(folder, entry, Path(scratch), args.seeds, args.timeout)
            rows.append(row)
            where = f":{row.line}" if row.line else ""
            verdict = "ran" if row.ran else f"{row.status} {row.error_code or ''}{where} {row.message}"
            print(f"{entry.file} {entry.kernel}  [{row.seconds:.0f}s]  {verdict}", flush=True)
    summarize(rows)
    if args.json:
        args.json.write_text(json.dumps([row.model_dump() for row in rows], indent=1))
    return 0


def summarize(rows: list[Row]) -> None:
    ran = sum(row.ran for row in rows)
    print(f"\n{ran} of {len(rows)} kernels ran")
    for group, count in Counter(cause(row) for row in rows if not row.ran).most_common():
        print(f"  {count:3d}  {group}")


if __name__ == "__main__":
    sys.exit(main())
