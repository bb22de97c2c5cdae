"""The emulator's fast paths: ways of producing exactly what running the kernel's Python would,
without running all of it. None changes what a run records; each is a speed-up only.

- `replay`, `replaycode`: a trace-only run logs a kernel statement's API call once and compiles
  a replay of its effects for later calls with the same argument structure;
- `fastforward`, `fastforwardcode`, `loopbody`: a regular loop's middle iterations are written
  from a template learned from two real ones;
- `siteindex`: an indexing expression's form is compiled per kernel call site;
- `codecache`: the compiled code these generate, shared by source text.

The semantic core (`tensor`, `instructions`, `loops`, `language`, `isa`) reaches them only where a
run's `KernelContext.fast_paths` allows it; `run_kernel(..., fast_paths=False)` turns them all
off (the digest check, `benchmarks/trace_digest.py --fast-paths off`, and the tests compare the
two).
"""
