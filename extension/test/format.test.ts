import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  formatDollars,
  formatLatency,
  formatPercentOfPeak,
  formatSpeedup,
  isFaster,
  speedupPhrase,
  measuredOn,
  statusLabel,
  uriBasename,
} from '../src/format';

describe('formatting', () => {
  it('speedups, with slower ones called slower', () => {
    assert.equal(formatSpeedup(1.8449), '1.84×');
    assert.equal(formatSpeedup(0.5), '0.50× (slower)');
    assert.equal(formatSpeedup(0.9954), '1.00×', 'not called slower when the figure reads 1.00×');
    assert.equal(isFaster(1.004), false);
    assert.equal(isFaster(1.006), true);
    assert.equal(isFaster(null), false);
    assert.equal(speedupPhrase(1.8449), '1.84× faster');
    assert.equal(speedupPhrase(1.001), '1.00× (no faster)');
    assert.equal(speedupPhrase(0.8), '0.80× (slower)');
    assert.equal(formatSpeedup(null), 'no timing');
    assert.equal(formatSpeedup(Number.POSITIVE_INFINITY), 'no timing');
  });

  it('percent of peak from a fraction, one decimal below 10%', () => {
    assert.equal(formatPercentOfPeak(0.612), '61% of peak');
    assert.equal(formatPercentOfPeak(0.0123), '1.2% of peak');
    assert.equal(formatPercentOfPeak(null), undefined);
  });

  it('latency in µs below a millisecond', () => {
    assert.equal(formatLatency(0.0421), '42.1 µs');
    assert.equal(formatLatency(3.14159), '3.142 ms');
    assert.equal(formatLatency(null), undefined);
  });

  it('dollars, with tiny amounts still visible', () => {
    assert.equal(formatDollars(0), '$0.00');
    assert.equal(formatDollars(0.0042), '$0.0042');
    assert.equal(formatDollars(1.5), '$1.50');
  });

  it('says which backend measured a number', () => {
    assert.equal(measuredOn('simulator', 'trn1'), 'simulated on trn1');
    assert.equal(measuredOn('neuron', 'trn2'), 'measured on trn2');
  });

  it('statuses in words', () => {
    assert.equal(statusLabel('ok'), 'correct');
    assert.equal(statusLabel('incorrect'), 'wrong results');
    assert.equal(statusLabel('some_new_status'), 'some new status');
  });

  it('file names from URIs', () => {
    assert.equal(uriBasename('file:///w/silu%20v2.py'), 'silu v2.py');
    assert.equal(uriBasename('untitled:Untitled-1'), 'untitled:Untitled-1');
    assert.equal(uriBasename('file:///w/k.py?x=1#frag'), 'k.py');
  });
});
