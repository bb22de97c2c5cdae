"""The optimization memory: experiences (slow kernel, fast kernel, lesson) persisted in SQLite
across runs and kernels.

Several searches (CLI runs, editor windows) may write at once: the database runs in WAL mode
with a busy timeout and every write is one short transaction. A file that SQLite cannot read is
moved aside and rebuilt from the rows that can still be read, with a warning.

An experience's `slow_kernel` is the kernel a plan was applied to and `fast_kernel` the result;
for a negative lesson (speedup < 1) the "fast" kernel is the slower one: the names follow the
published slow -> fast pairs, the speedup says which way it went.
"""

from __future__ import annotations

import builtins
import logging
import math
import os
import shutil
import sqlite3
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from accelopt.profiling.evaluation import KernelSource
from accelopt.profiling.profile import Profile
from accelopt.search.candidate import Experience
from accelopt.search.kernel_text import api_calls, kernel_family, source_tokens

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
IN_MEMORY = ":memory:"
SELECTION_WINDOW = 2000  # the newest experiences considered when choosing the prompt's lessons

_SCHEMA = """
CREATE TABLE IF NOT EXISTS experiences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    kernel_family TEXT NOT NULL,
    task TEXT NOT NULL,
    hardware TEXT NOT NULL,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    speedup REAL NOT NULL,
    positive INTEGER NOT NULL,
    title TEXT NOT NULL,
    data TEXT NOT NULL  -- the whole Experience as JSON, the source of truth
);
CREATE INDEX IF NOT EXISTS experiences_family ON experiences (kernel_family, created_at);
"""


class MemoryUnavailable(RuntimeError):
    """The memory database cannot be used (e.g. locked past the busy timeout)."""


class RecoveryReport(BaseModel):
    corrupt_copy: str
    salvaged: int
    reason: str


def default_memory_path() -> Path:
    """$ACCELOPT_MEMORY, else the per-user data directory (XDG_DATA_HOME honoured)."""
    explicit = os.environ.get("ACCELOPT_MEMORY")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "accelopt" / "memory.sqlite"


class Memory:
    """Experiences in one SQLite file (or in RAM with path ':memory:', for a search with no store)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, busy_timeout_s: float = 10.0):
        self.path = IN_MEMORY if str(path) == IN_MEMORY else Path(path or default_memory_path())
        self.busy_timeout_s = busy_timeout_s
        self.recovery: RecoveryReport | None = None
        self._decoded: dict[int, tuple[Experience, frozenset[str], frozenset[str]]] = {}
        self._lock = threading.Lock()
        self._conn = self._open()

    # -- connection ---------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        target = self.path if self.path == IN_MEMORY else str(self.path)
        conn = sqlite3.connect(
            target, timeout=self.busy_timeout_s, check_same_thread=False, isolation_level=None
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        return conn

    def _open(self) -> sqlite3.Connection:
        if self.path != IN_MEMORY:
            assert isinstance(self.path, Path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = self._connect()
            self._initialise(conn)
            self._check(conn)
            return conn
        except sqlite3.DatabaseError as exc:
            if self.path == IN_MEMORY or _is_lock_error(exc):
                raise MemoryUnavailable(f"{self.path}: {exc}") from exc
            return self._rebuild(str(exc))

    def _initialise(self, conn: sqlite3.Connection) -> None:
        """Create the schema on first use. An initialised database is only read here, so that
        opening it works while another process holds the write lock."""
        if self.path != IN_MEMORY and conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.executescript(_SCHEMA)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _check(conn: sqlite3.Connection) -> None:
        result = conn.execute("PRAGMA quick_check").fetchone()
        if result is None or result[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {result[0] if result else 'no answer'}")
        conn.execute("SELECT count(*), max(id) FROM experiences").fetchone()

    def _rebuild(self, reason: str) -> sqlite3.Connection:
        """Move the unreadable file aside, start a fresh one and copy in every row still readable."""
        assert isinstance(self.path, Path)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        corrupt = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        shutil.move(str(self.path), corrupt)
        for suffix in ("-wal", "-shm"):
            side = Path(str(self.path) + suffix)
            if side.exists():
                shutil.move(str(side), str(corrupt) + suffix)
        rows = _salvage(corrupt)
        conn = self._connect()
        self._initialise(conn)
        with _transaction(conn):
            for exp in rows:
                _insert(conn, exp, keep_id=True)
        self.recovery = RecoveryReport(corrupt_copy=str(corrupt), salvaged=len(rows), reason=reason)
        message = (
            f"optimization memory {self.path} was unreadable ({reason}); rebuilt it with {len(rows)} "
            f"intact experience(s); the damaged file is kept as {corrupt}"
        )
        log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        return conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.OperationalError as exc:
                if _is_lock_error(exc):
                    raise MemoryUnavailable(
                        f"optimization memory {self.path} stayed locked for more than {self.busy_timeout_s:g} s"
                    ) from exc
                raise

    # -- rows ---------------------------------------------------------------------------------

    def add(self, experience: Experience) -> int:
        with self._locked() as conn, _transaction(conn):
            return _insert(conn, experience, keep_id=False)

    def get(self, experience_id: int) -> Experience | None:
        with self._locked() as conn:
            row = conn.execute("SELECT id, data FROM experiences WHERE id = ?", (experience_id,)).fetchone()
        return _decode(row) if row else None

    def list(
        self, *, kernel_family: str | None = None, limit: int | None = None, newest_first: bool = True
    ) -> list[Experience]:
        query = "SELECT id, data FROM experiences"
        args: list[object] = []
        if kernel_family:
            query += " WHERE kernel_family = ?"
            args.append(kernel_family)
        query += f" ORDER BY created_at {'DESC' if newest_first else 'ASC'}, id {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            query += " LIMIT ?"
            args.append(limit)
        with self._locked() as conn:
            rows = conn.execute(query, args).fetchall()
        return [exp for exp in (_decode(r) for r in rows) if exp is not None]

    def count(self) -> int:
        with self._locked() as conn:
            return int(conn.execute("SELECT count(*) FROM experiences").fetchone()[0])

    def remove(self, experience_id: int) -> bool:
        with self._locked() as conn, _transaction(conn):
            return conn.execute("DELETE FROM experiences WHERE id = ?", (experience_id,)).rowcount > 0

    def clear(self) -> int:
        with self._locked() as conn, _transaction(conn):
            return conn.execute("DELETE FROM experiences").rowcount

    # -- selection ----------------------------------------------------------------------------

    def _recent_with_tokens(
        self, window: int
    ) -> builtins.list[tuple[Experience, frozenset[str], frozenset[str]]]:  # `list` is a method here
        """The newest `window` experiences with their slow kernels' tokens and NKI instructions. Rows are immutable,
        so each is decoded once per Memory object; the id list is read afresh every time, so
        rows added or removed by other processes are seen."""
        with self._locked() as conn:
            ids = [
                int(r[0])
                for r in conn.execute(
                    "SELECT id FROM experiences ORDER BY created_at DESC, id DESC LIMIT ?", (window,)
                )
            ]
            missing = [i for i in ids if i not in self._decoded]
            for start in range(0, len(missing), 500):
                chunk = missing[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for row in conn.execute(f"SELECT id, data FROM experiences WHERE id IN ({marks})", chunk):
                    exp = _decode(row)
                    if exp is not None:
                        self._decoded[exp.id or 0] = (
                            exp,
                            frozenset(source_tokens(exp.slow_kernel)),
                            api_calls(exp.slow_kernel),
                        )
        return [self._decoded[i] for i in ids if i in self._decoded]

    def select_for_prompt(
        self,
        kernel: KernelSource,
        profile: Profile | None = None,
        *,
        limit: int = 16,
        hardware: str | None = None,
        now: datetime | None = None,
    ) -> builtins.list[Experience]:
        """The experiences most relevant to `kernel`, most relevant first.

        Relevance = same kernel family (strongest), overlap of the NKI instructions the two
        kernels use (a matmul-with-norm kernel learns from other matmul-with-norm kernels,
        whatever their variable names), token overlap between the kernel and the experience's
        slow kernel, same roofline bound, same hardware, and recency (half-life of 30 days).
        Positive and negative lessons are interleaved so neither crowds the other out.
        """
        if limit <= 0:
            return []
        now = now or datetime.now(timezone.utc)
        family = kernel_family(kernel.name)
        tokens = source_tokens(kernel.text)
        calls = api_calls(kernel.text)
        scored: list[tuple[float, Experience]] = []
        for exp, exp_tokens, exp_calls in self._recent_with_tokens(SELECTION_WINDOW):
            score = 2.0 if exp.kernel_family == family else 0.0
            score += _jaccard(calls, exp_calls)
            score += _jaccard(tokens, exp_tokens)
            if profile is not None and exp.bound and exp.bound == profile.bound:
                score += 0.5
            if hardware and exp.hardware == hardware:
                score += 0.25
            age_days = max((now - _aware(exp.created_at)).total_seconds(), 0.0) / 86400
            score += 0.5 * math.exp(-age_days * math.log(2) / 30)
            scored.append((score, exp))
        scored.sort(key=lambda pair: (-pair[0], -(pair[1].id or 0)))
        positives = [exp for _, exp in scored if exp.positive]
        negatives = [exp for _, exp in scored if not exp.positive]
        chosen: list[Experience] = []
        while len(chosen) < limit and (positives or negatives):
            for pool in (positives, negatives):
                if pool and len(chosen) < limit:
                    chosen.append(pool.pop(0))
        return chosen


# -- helpers ------------------------------------------------------------------------------------


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _insert(conn: sqlite3.Connection, exp: Experience, *, keep_id: bool) -> int:
    stored = exp if keep_id else exp.model_copy(update={"id": None})
    cursor = conn.execute(
        "INSERT INTO experiences (id, created_at, kernel_family, task, hardware, backend, model, speedup,"
        " positive, title, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            stored.id,
            _aware(stored.created_at).isoformat(),
            stored.kernel_family,
            stored.task,
            stored.hardware,
            stored.backend,
            stored.model,
            float(stored.speedup),
            int(stored.positive),
            stored.lesson.title,
            stored.model_dump_json(exclude={"id"}),
        ),
    )
    assert cursor.lastrowid is not None
    return int(cursor.lastrowid)


def _decode(row: tuple[int, str]) -> Experience | None:
    try:
        exp = Experience.model_validate_json(row[1])
    except ValueError as exc:
        log.warning("memory row %s is unreadable and was skipped: %s", row[0], exc)
        return None
    exp.id = int(row[0])
    return exp


def _salvage(path: Path) -> list[Experience]:
    """Every row of a damaged database that SQLite can still read: a forward scan stops at the
    first broken page, a backward scan then collects the rows after it."""
    found: dict[int, Experience] = {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return []
    try:
        for order in ("ASC", "DESC"):
            try:
                for row in conn.execute(f"SELECT id, data FROM experiences ORDER BY id {order}"):
                    exp = _decode(row)
                    if exp is not None:
                        found.setdefault(int(row[0]), exp)
            except sqlite3.Error:
                continue
    finally:
        conn.close()
    return [found[k] for k in sorted(found)]


def _is_lock_error(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
