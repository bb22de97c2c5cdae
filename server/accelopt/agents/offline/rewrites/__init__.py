"""One semantics-preserving libcst rewrite of NKI kernels per module; see ../catalogue.py."""
