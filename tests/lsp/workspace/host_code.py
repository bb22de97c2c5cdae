"""Two kernels kept the way people keep them: with torch, argparse and a __main__ harness."""

import argparse

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import torch


# accelopt: inputs x=float32[128,512]
@nki.jit
def double_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.multiply(nl.load(x), 2.0))
    return out


# accelopt: inputs x=float32[128,512]
@nki.jit
def square_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.multiply(t, t))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    print(torch.from_numpy(double_kernel(torch.ones(128, 512).numpy())))
