/**
 * The custom LSP messages between the AccelOpt language server and this client.
 *
 * Mirrors server/accelopt/lsp/protocol.py field for field (camelCase on the wire). Python's
 * `X | None` is `X | null` here: pydantic serialises unset optionals as null, not as absent keys.
 * This module must not import `vscode`, so the Node contract test can use it outside the editor.
 */

/** Per-request overrides of the configured search parameters (all optional). */
export interface SearchOptions {
  agents?: 'offline' | 'llm' | null;
  beamWidth?: number | null;
  plansPerCandidate?: number | null;
  samplesPerPlan?: number | null;
  iterations?: number | null;
  maxEvaluations?: number | null;
  budgetUsd?: number | null;
  wallTimeS?: number | null;
  seed?: number | null;
}

export interface OptimizeParams {
  uri: string;
  kernelName: string;
  options?: SearchOptions;
  workDoneToken?: string | number | null;
}

export type FinishReason = 'completed' | 'budget' | 'early_stop' | 'target_reached' | 'cancelled' | 'error';

export interface OptimizeResult {
  searchId: string;
  reason: FinishReason;
  message: string;
  bestSpeedup: number | null;
  candidates: number;
  /** The LLM agents' endpoint calls (made, usable, failures by cause); absent for offline agents. */
  agentCalls?: string | null;
  agentFailures?: number;
}

export interface CancelParams {
  searchId: string;
}

/** Evaluation statuses (profiling/evaluation.py EvalStatus) plus "pending" while one is evaluated. */
export type CandidateStatus =
  | 'ok'
  | 'syntax_error'
  | 'compile_error'
  | 'runtime_error'
  | 'incorrect'
  | 'timeout'
  | 'rejected'
  | 'pending';

export interface CandidateInfo {
  id: string;
  rank: number;
  speedup: number | null;
  latencyMs: number | null;
  /** A fraction in [0, 1] (peak latency / latency), like Profile.percent_of_peak. */
  percentOfPeak: number | null;
  status: CandidateStatus | string;
  /** The last plan's title, for labels. */
  title: string;
  /** Plan titles from the baseline to this candidate, oldest first. */
  rationale: string[];
  /** Full text of the document with this candidate in place of the kernel. */
  text: string;
  /** Unified diff against the document as it was when the search started. */
  diff: string;
  /** Which backend measured the numbers: "simulator" or "neuron". */
  backend: string;
  hardware: string;
}

export interface CandidatesNotification {
  searchId: string;
  uri: string;
  kernelName: string;
  documentVersion: number | null;
  running: boolean;
  candidates: CandidateInfo[];
}

export interface CandidatesParams {
  searchId: string;
}

export type SearchState = 'started' | 'iteration' | 'finished';

export interface SearchStateNotification {
  searchId: string;
  uri: string;
  kernelName: string;
  state: SearchState;
  iteration: number;
  totalIterations: number;
  bestSpeedup: number | null;
  dollars: number;
  message: string;
}

export interface ApplyResult {
  applied: boolean;
  message: string;
}

export interface MemoryParams {
  limit?: number;
  kernelFamily?: string | null;
}

export interface ExperienceInfo {
  id: number;
  title: string;
  speedup: number;
  positive: boolean;
  kernelFamily: string;
  hardware: string;
  backend: string;
  model: string;
  createdAt: string;
  plan: string;
}

export interface MemoryResult {
  experiences: ExperienceInfo[];
  path: string;
}

/** Method and command names, as protocol.py's module docstring lists them. */
/** server/accelopt/profiling/schedule_view.py `Schedule`, camelCase. */
export interface Schedule {
  kernelName: string;
  /** How the figures were obtained, e.g. "simulated on trn1". */
  label: string;
  totalUs: number;
  lanes: { name: string; busyUs: number }[];
  kinds: string[];
  /** [lane, startUs, endUs, line, kind index] per bar. */
  bars: [number, number, number, number, number][];
  coalesced: boolean;
  instructions: number;
  roofline: RooflinePoint | null;
}

export interface RooflinePoint {
  intensity: number;
  achievedFlopsPerS: number;
  computePeakFlopsPerS: number;
  bandwidthBytesPerS: number;
  ridgeIntensity: number;
  /** A fraction, as in the profile. */
  percentOfPeak: number;
  bound: string;
}

export interface TreeNode {
  id: string;
  parentId: string | null;
  iteration: number;
  title: string;
  status: string;
  speedup: number | null;
  inBeam: boolean;
  duplicateOf: string | null;
}

export interface SearchTree {
  searchId: string;
  kernelName: string;
  running: boolean;
  iteration: number;
  totalIterations: number;
  nodes: TreeNode[];
  bestByIteration: number[];
}

export interface TimelineParams {
  uri: string;
  kernelName: string;
}

export interface TimelineResult {
  kernelName: string;
  schedule: Schedule | null;
  lines: { line: number; fraction: number; text: string }[];
  message: string;
}

export const Methods = {
  timeline: 'accelopt/timeline',
  searchTree: 'accelopt/searchTree',
  optimize: 'accelopt/optimize',
  cancel: 'accelopt/cancel',
  memory: 'accelopt/memory',
  candidates: 'accelopt/candidates',
  searchState: 'accelopt/searchState',
} as const;

/** Commands the server executes (workspace/executeCommand). */
export const ServerCommands = {
  optimize: 'accelopt.optimize',
  applyCandidate: 'accelopt.applyCandidate',
  rejectCandidate: 'accelopt.rejectCandidate',
  candidateHunks: 'accelopt.candidateHunks',
  applyHunks: 'accelopt.applyHunks',
} as const;

/** One change of a candidate against the text its search started from (1-based lines; an
 * insertion has endLine = startLine - 1). */
export interface Hunk {
  index: number;
  startLine: number;
  endLine: number;
  removed: string[];
  added: string[];
}
