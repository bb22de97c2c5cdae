"""Our own kernels with the structures of the published Trainium1 measurements (NKI_NOTES §7),
used by benchmarks/calibration.py to check the timing model. Written here from the described
structure, not copied from any tutorial."""
