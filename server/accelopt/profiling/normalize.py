"""Source normalization for deduplication and caching: two kernels that differ only in
comments, blank lines or trailing whitespace are the same kernel."""

from __future__ import annotations

import io
import tokenize


def normalize_source(text: str) -> str:
    try:
        # Two-tuples put untokenize in its position-free mode, which also evens out spacing.
        tokens = [
            (tok.type, tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type not in (tokenize.COMMENT, tokenize.NL)
        ]
        return tokenize.untokenize(tokens).strip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        lines = [ln.rstrip() for ln in text.splitlines()]
        return "\n".join(ln for ln in lines if ln.strip())
