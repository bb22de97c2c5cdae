/** Builders for protocol messages, with every field present as the server sends them. */

import type { CandidateInfo, CandidatesNotification, SearchStateNotification } from '../../src/protocol';

export const KERNEL_URI = 'file:///work/kernels/silu.py';

export function candidate(id: string, overrides: Partial<CandidateInfo> = {}): CandidateInfo {
  return {
    id,
    rank: 1,
    speedup: 1.5,
    latencyMs: 0.02,
    percentOfPeak: 0.4,
    status: 'ok',
    title: `plan ${id}`,
    rationale: [`plan ${id}`],
    text: `# kernel text of ${id}\n`,
    diff: '',
    backend: 'simulator',
    hardware: 'trn1',
    ...overrides,
  };
}

export function candidates(
  searchId: string,
  list: CandidateInfo[],
  overrides: Partial<CandidatesNotification> = {},
): CandidatesNotification {
  return {
    searchId,
    uri: KERNEL_URI,
    kernelName: 'silu_kernel',
    documentVersion: 1,
    running: true,
    candidates: list,
    ...overrides,
  };
}

export function searchState(
  searchId: string,
  overrides: Partial<SearchStateNotification> = {},
): SearchStateNotification {
  return {
    searchId,
    uri: KERNEL_URI,
    kernelName: 'silu_kernel',
    state: 'iteration',
    iteration: 1,
    totalIterations: 4,
    bestSpeedup: null,
    dollars: 0,
    message: '',
    ...overrides,
  };
}
