/**
 * What the timeline view draws, computed from the server's schedule: lanes, bars coloured by
 * source line, the roofline with the kernel and (after a search) its candidates, and the lines
 * to mark in the editor. Pure data: the webview renders it, tests check it.
 */

import type { CandidateInfo, Schedule, TimelineResult } from './protocol';

export interface TimelineBar {
  lane: number;
  start: number;
  end: number;
  line: number;
  kind: string;
  color: string;
}

export interface RooflineSeries {
  /** The roof: the bandwidth slope up to the ridge, then the compute ceiling (log-log axes). */
  roof: [number, number][];
  points: { name: string; intensity: number; flopsPerS: number; kind: 'kernel' | 'candidate' }[];
  ridge: number;
}

export interface HotLine {
  line: number;
  fraction: number;
  label: string;
}

export interface TimelineViewModel {
  title: string;
  subtitle: string;
  lanes: string[];
  bars: TimelineBar[];
  totalUs: number;
  roofline: RooflineSeries | null;
  hotLines: HotLine[];
  message: string;
}

// Distinct hues for the source lines, in order of first appearance (a qualitative palette).
const PALETTE = [
  '#4e79a7',
  '#f28e2b',
  '#e15759',
  '#76b7b2',
  '#59a14f',
  '#edc948',
  '#b07aa1',
  '#ff9da7',
  '#9c755f',
  '#bab0ac',
];

export function lineColors(schedule: Schedule): Map<number, string> {
  const colors = new Map<number, string>();
  for (const bar of schedule.bars) {
    const line = bar[3];
    if (!colors.has(line)) {
      colors.set(line, PALETTE[colors.size % PALETTE.length]);
    }
  }
  return colors;
}

/** The roofline with the kernel's point and, for each correct candidate, the point it reaches:
 * the same work (FLOPs and HBM bytes come from the task), done in its own latency. */
export function rooflineSeries(
  schedule: Schedule,
  kernelLatencyMs: number | null,
  candidates: readonly CandidateInfo[],
): RooflineSeries | null {
  const point = schedule.roofline;
  if (!point) {
    return null;
  }
  const lo = Math.min(point.intensity, point.ridgeIntensity) / 10;
  const hi = Math.max(point.intensity, point.ridgeIntensity) * 10;
  const roof: [number, number][] = [
    [lo, lo * point.bandwidthBytesPerS],
    [point.ridgeIntensity, point.computePeakFlopsPerS],
    [hi, point.computePeakFlopsPerS],
  ];
  const points: RooflineSeries['points'] = [
    {
      name: schedule.kernelName,
      intensity: point.intensity,
      flopsPerS: point.achievedFlopsPerS,
      kind: 'kernel',
    },
  ];
  if (kernelLatencyMs && kernelLatencyMs > 0) {
    for (const candidate of candidates) {
      if (candidate.status === 'ok' && candidate.latencyMs && candidate.latencyMs > 0) {
        points.push({
          name: `${candidate.id}: ${candidate.title}`,
          intensity: point.intensity,
          flopsPerS: point.achievedFlopsPerS * (kernelLatencyMs / candidate.latencyMs),
          kind: 'candidate',
        });
      }
    }
  }
  return { roof, points, ridge: point.ridgeIntensity };
}

export function hotLines(result: TimelineResult, count = 3): HotLine[] {
  return result.lines.slice(0, count).map((entry) => ({
    line: entry.line,
    fraction: entry.fraction,
    label: `${Math.round(100 * entry.fraction)}% of engine time`,
  }));
}

export function timelineViewModel(
  result: TimelineResult,
  candidates: readonly CandidateInfo[] = [],
): TimelineViewModel {
  const schedule = result.schedule;
  if (!schedule) {
    return {
      title: result.kernelName,
      subtitle: '',
      lanes: [],
      bars: [],
      totalUs: 0,
      roofline: null,
      hotLines: [],
      message: result.message || 'no schedule',
    };
  }
  const colors = lineColors(schedule);
  const bars = schedule.bars.map(([lane, start, end, line, kind]) => ({
    lane,
    start,
    end,
    line,
    kind: schedule.kinds[kind] ?? '?',
    color: colors.get(line) ?? PALETTE[0],
  }));
  const latencyMs = schedule.totalUs / 1000;
  const peak = schedule.roofline
    ? ` · ${(100 * schedule.roofline.percentOfPeak).toFixed(1)}% of roofline peak`
    : '';
  const coalesced = schedule.coalesced ? ' · neighbouring bars of one line drawn as one' : '';
  return {
    title: schedule.kernelName,
    subtitle: `${schedule.totalUs.toFixed(2)} µs, ${schedule.label}${peak} · ${schedule.instructions} instructions${coalesced}`,
    lanes: schedule.lanes.map((lane) => lane.name),
    bars,
    totalUs: schedule.totalUs,
    roofline: rooflineSeries(schedule, latencyMs, candidates),
    hotLines: hotLines(result),
    message: result.message,
  };
}
