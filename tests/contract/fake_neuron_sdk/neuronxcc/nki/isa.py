"""FAKE `neuronxcc.nki.isa`: AccelOpt's emulator module under the SDK's name (contract tests only)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("accelopt.nki.isa")
