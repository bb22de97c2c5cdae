"""The NKI emulator: NKI kernels run unchanged on the CPU with numpy.

Entry points (all in `accelopt.nki.runtime`):
  install_aliases()        make `neuronxcc.nki[.language|.isa|.typing]` and `nki[...]` import the
                           emulator (only in the process that emulates)
  load_kernel(text, name)  execute kernel source as a module and return the kernel function
  run_kernel(fn, inputs)   run it: outputs (numpy) and the instruction trace (`trace.Trace`);
                           numerics=False traces shapes and regions only
  simulate(kernel)(*xs)    the SDK's `nki.simulate_kernel` shape

Layout: `language.py` (nl), `isa.py` (nisa), `typing.py` (nt) are the kernel-facing API;
`instructions.py` holds the rules every instruction shares; `tensor.py` and `indexing.py` model
tensors, views and index grids; `context.py` is one run's state; `errors.py` the compiler-style
errors (`NkiError`); `trace.py` the contract with the timing model.
"""
