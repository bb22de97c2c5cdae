"""FAKE `neuronxcc` package for the neuron backend's contract tests (see ../README.md).

It is put on sys.path only by tests/contract; it is not the Neuron compiler."""

FAKE = True
