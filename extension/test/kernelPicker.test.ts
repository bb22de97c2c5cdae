import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { findKernels, kernelAtLine } from '../src/kernelPicker';

const SOURCE = [
  'import neuronxcc.nki as nki', // 0
  'import neuronxcc.nki.language as nl', // 1
  '', // 2
  'def helper(x):', // 3
  '    return x', // 4
  '', // 5
  '# accelopt: reference silu_ref.py', // 6
  '@nki.jit', // 7
  'def silu_kernel(x):', // 8
  '    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)', // 9
  '', // 10
  "    # a comment at the body's indentation", // 11
  '    return out', // 12
  '', // 13
  'TILE = 128', // 14
  '', // 15
  '@nki.jit(', // 16
  '    mode="simulation",', // 17
  ')', // 18
  '@other.decorator', // 19
  'async def second_kernel(a, b):', // 20
  '    return a', // 21
  '', // 22
  '@functools.cache', // 23
  'def not_a_kernel():', // 24
  '    pass', // 25
  '@nki.baremetal', // 26
  'def bare(x): return x', // 27
].join('\n');

describe('finding kernels in a file', () => {
  it('finds decorated kernels (nki.jit with arguments, baremetal) and their extent, and nothing else', () => {
    assert.deepEqual(findKernels(SOURCE), [
      { name: 'silu_kernel', startLine: 7, endLine: 12 },
      { name: 'second_kernel', startLine: 16, endLine: 21 },
      { name: 'bare', startLine: 26, endLine: 27 },
    ]);
  });

  it('picks the kernel around the cursor, including its decorator lines', () => {
    const kernels = findKernels(SOURCE);
    assert.equal(kernelAtLine(kernels, 7)?.name, 'silu_kernel');
    assert.equal(kernelAtLine(kernels, 11)?.name, 'silu_kernel');
    assert.equal(kernelAtLine(kernels, 17)?.name, 'second_kernel');
    assert.equal(kernelAtLine(kernels, 4), undefined, 'inside a helper');
    assert.equal(kernelAtLine(kernels, 14), undefined, 'between kernels');
  });

  it('handles CRLF files and files without kernels', () => {
    assert.deepEqual(findKernels('@nki.jit\r\ndef k(x):\r\n    return x\r\n'), [
      { name: 'k', startLine: 0, endLine: 2 },
    ]);
    assert.deepEqual(findKernels('def f():\n    pass\n'), []);
  });
});
