"""The one error a rewrite raises: it does not apply here, and why."""

from __future__ import annotations


class NotApplicable(Exception):
    """A rewrite refused a site; `reason` says why in words a kernel engineer would use."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
