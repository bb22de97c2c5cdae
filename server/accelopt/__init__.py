"""AccelOpt for the editor: optimize NKI kernels for AWS Trainium."""

__version__ = "0.1.0"
