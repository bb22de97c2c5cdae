import * as assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { CandidateInfo, Schedule, TimelineResult } from '../src/protocol';
import { hotLines, lineColors, rooflineSeries, timelineViewModel } from '../src/timelineModel';

const schedule: Schedule = {
  kernelName: 'silu_kernel',
  label: 'simulated on trn1',
  totalUs: 20,
  lanes: [
    { name: 'tensor', busyUs: 0 },
    { name: 'vector', busyUs: 4 },
    { name: 'scalar', busyUs: 2 },
    { name: 'gpsimd', busyUs: 0 },
    { name: 'DMA queue 0', busyUs: 10 },
  ],
  kinds: ['dma', 'activation', 'tensor_tensor'],
  bars: [
    [4, 0, 5, 24, 0],
    [2, 5, 7, 26, 1],
    [1, 7, 11, 27, 2],
    [4, 11, 16, 30, 0],
    [4, 16, 20, 24, 0],
  ],
  coalesced: false,
  instructions: 5,
  roofline: {
    intensity: 0.5,
    achievedFlopsPerS: 1e11,
    computePeakFlopsPerS: 2e12,
    bandwidthBytesPerS: 4e11,
    ridgeIntensity: 5,
    percentOfPeak: 0.25,
    bound: 'hbm',
  },
};

const result: TimelineResult = {
  kernelName: 'silu_kernel',
  schedule,
  lines: [
    { line: 27, fraction: 0.42, text: 'y = x * s' },
    { line: 26, fraction: 0.21, text: 's = sigmoid(x)' },
    { line: 24, fraction: 0.2, text: 'x = load' },
    { line: 30, fraction: 0.1, text: 'store' },
  ],
  message: '',
};

function candidate(id: string, latencyMs: number | null, status = 'ok'): CandidateInfo {
  return {
    id,
    rank: 1,
    speedup: null,
    latencyMs,
    percentOfPeak: null,
    status,
    title: `plan ${id}`,
    rationale: [],
    text: '',
    diff: '',
    backend: 'simulator',
    hardware: 'trn1',
  };
}

describe('timeline view model', () => {
  it('colours bars by source line, one colour per line in order of appearance', () => {
    const colors = lineColors(schedule);
    assert.deepEqual([...colors.keys()], [24, 26, 27, 30]);
    assert.equal(new Set(colors.values()).size, 4);
    const model = timelineViewModel(result);
    const of24 = model.bars.filter((b) => b.line === 24).map((b) => b.color);
    assert.equal(new Set(of24).size, 1);
    assert.deepEqual(
      model.bars.map((b) => b.kind),
      ['dma', 'activation', 'tensor_tensor', 'dma', 'dma'],
    );
  });

  it('says what produced the figures and where the kernel stands', () => {
    const model = timelineViewModel(result);
    assert.equal(model.lanes.length, 5);
    assert.match(model.subtitle, /20\.00 µs, simulated on trn1 · 25\.0% of roofline peak · 5 instructions/);
  });

  it('draws the roof through the ridge and places candidates by their latency', () => {
    const series = rooflineSeries(schedule, 0.02, [
      candidate('c1', 0.01),
      candidate('c2', 0.04),
      candidate('c3', 0.01, 'incorrect'),
    ]);
    assert.ok(series);
    assert.deepEqual(series.roof[1], [5, 2e12]);
    assert.equal(series.roof[0][1] / series.roof[0][0], 4e11); // the slope is the bandwidth
    const [kernel, faster, slower] = series.points;
    assert.equal(kernel.kind, 'kernel');
    assert.equal(faster.flopsPerS, 2e11); // twice as fast: twice the FLOP/s for the same work
    assert.equal(slower.flopsPerS, 5e10);
    assert.equal(series.points.length, 3, 'an incorrect candidate has no place on the roofline');
  });

  it('marks the three costliest lines', () => {
    assert.deepEqual(
      hotLines(result).map((h) => [h.line, h.label]),
      [
        [27, '42% of engine time'],
        [26, '21% of engine time'],
        [24, '20% of engine time'],
      ],
    );
  });

  it('shows the reason when there is no schedule', () => {
    const model = timelineViewModel({
      kernelName: 'k',
      schedule: null,
      lines: [],
      message: 'compile_error (line 3): partition',
    });
    assert.deepEqual(model.bars, []);
    assert.equal(model.message, 'compile_error (line 3): partition');
  });
});
