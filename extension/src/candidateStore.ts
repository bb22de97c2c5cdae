/**
 * The client's picture of every search: candidates grouped by kernel in the search's own ranking
 * (the `rank` the server sends; the client does not rank), kept current from the server's
 * `accelopt/candidates` and `accelopt/searchState` notifications.
 *
 * One kernel (document URI + kernel name) shows the candidates of its most recent search: a new
 * search replaces the previous one, whose candidates were made from older text anyway, and a late
 * notification from the older search is ignored. Independent of `vscode` so it is unit-tested
 * as plain TypeScript.
 */

import type { CandidateInfo, CandidatesNotification, SearchStateNotification } from './protocol';

/** A candidate as the views show it: its place in the ranking and the search it belongs to. */
export interface RankedCandidate {
  readonly info: CandidateInfo;
  /** The search's rank (1 = best) for usable (correct or still evaluating) candidates; 0 for failed ones. */
  readonly position: number;
  readonly searchId: string;
  readonly uri: string;
  readonly kernelName: string;
  /** This candidate was accepted into the document. */
  readonly applied: boolean;
  /** Another candidate of its search was accepted: this one was made from the text before. */
  readonly outdated: boolean;
}

export interface KernelGroup {
  readonly key: string;
  readonly uri: string;
  readonly kernelName: string;
  readonly searchId: string;
  readonly running: boolean;
  readonly documentVersion: number | null;
  /** Usable candidates in the search's ranking. */
  readonly candidates: readonly RankedCandidate[];
  /** Candidates that failed their checks, in the server's order. */
  readonly failed: readonly RankedCandidate[];
  /** The last progress report of the search, if any arrived. */
  readonly progress: SearchStateNotification | undefined;
  /** The candidate accepted into the document, if one was. */
  readonly applied: RankedCandidate | undefined;
}

export interface CandidateRef {
  readonly searchId: string;
  readonly candidateId: string;
}

type Listener = () => void;

export function kernelKey(uri: string, kernelName: string): string {
  return `${uri}#${kernelName}`;
}

function isUsable(candidate: CandidateInfo): boolean {
  return candidate.status === 'ok' || candidate.status === 'pending';
}

/** The search's order: its rank, then id (a total order even for a malformed list). */
export function byRank(a: CandidateInfo, b: CandidateInfo): number {
  return a.rank - b.rank || a.id.localeCompare(b.id);
}

interface MutableGroup {
  uri: string;
  kernelName: string;
  searchId: string;
  running: boolean;
  documentVersion: number | null;
  candidates: CandidateInfo[];
  progress: SearchStateNotification | undefined;
  appliedId: string | undefined;
  touched: number;
}

export class CandidateStore {
  private readonly groups = new Map<string, MutableGroup>();
  /** Order in which searches were first seen; a larger number is a newer search. */
  private readonly searchOrder = new Map<string, number>();
  private readonly listeners = new Set<Listener>();
  /** Searches known to be over: a list still in flight when one stopped must not revive it. */
  private readonly over = new Set<string>();
  private clock = 0;

  onDidChange(listener: Listener): { dispose(): void } {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  /** Takes the server's current list for one search. */
  applyCandidates(notification: CandidatesNotification): void {
    const group = this.groupFor(notification.searchId, notification.uri, notification.kernelName);
    if (!group) {
      return;
    }
    group.running = notification.running && !this.over.has(notification.searchId);
    if (!notification.running) {
      this.over.add(notification.searchId);
    }
    group.documentVersion = notification.documentVersion;
    group.candidates = [...notification.candidates];
    this.changed();
  }

  applySearchState(state: SearchStateNotification): void {
    const group = this.groupFor(state.searchId, state.uri, state.kernelName);
    if (!group) {
      return;
    }
    group.progress = state;
    if (state.state === 'finished') {
      this.over.add(state.searchId);
    }
    group.running = !this.over.has(state.searchId);
    this.changed();
  }

  /** Marks a search as over without waiting for the server (it was cancelled or the server died). */
  markStopped(searchId: string): void {
    this.over.add(searchId);
    for (const group of this.groups.values()) {
      if (group.searchId === searchId && group.running) {
        group.running = false;
        this.changed();
      }
    }
  }

  /** Records that a candidate was accepted: the rest of its search is now outdated. */
  markApplied(ref: CandidateRef): void {
    for (const group of this.groups.values()) {
      if (group.searchId === ref.searchId && group.candidates.some((c) => c.id === ref.candidateId)) {
        group.appliedId = ref.candidateId;
        this.changed();
      }
    }
  }

  /** Drops a candidate at once (the server confirms with a fresh list). */
  remove(ref: CandidateRef): void {
    for (const group of this.groups.values()) {
      if (group.searchId !== ref.searchId) {
        continue;
      }
      const kept = group.candidates.filter((c) => c.id !== ref.candidateId);
      if (kept.length !== group.candidates.length) {
        group.candidates = kept;
        this.changed();
      }
    }
  }

  clear(): void {
    if (this.groups.size === 0) {
      return;
    }
    this.groups.clear();
    this.changed();
  }

  /** Kernels, the most recently started search first (stable while searches report). */
  kernels(): KernelGroup[] {
    return [...this.groups.entries()]
      .sort(([, a], [, b]) => b.touched - a.touched)
      .map(([key, group]) => snapshot(key, group));
  }

  kernel(uri: string, kernelName: string): KernelGroup | undefined {
    const key = kernelKey(uri, kernelName);
    const group = this.groups.get(key);
    return group && snapshot(key, group);
  }

  /** Searches still running. */
  runningSearches(): KernelGroup[] {
    return this.kernels().filter((group) => group.running);
  }

  find(ref: CandidateRef): RankedCandidate | undefined {
    for (const group of this.kernels()) {
      if (group.searchId !== ref.searchId) {
        continue;
      }
      return [...group.candidates, ...group.failed].find((c) => c.info.id === ref.candidateId);
    }
    return undefined;
  }

  private groupFor(searchId: string, uri: string, kernelName: string): MutableGroup | undefined {
    if (!this.searchOrder.has(searchId)) {
      this.searchOrder.set(searchId, this.searchOrder.size);
    }
    const key = kernelKey(uri, kernelName);
    const existing = this.groups.get(key);
    if (existing && existing.searchId !== searchId) {
      const current = this.searchOrder.get(existing.searchId) ?? -1;
      if ((this.searchOrder.get(searchId) ?? -1) < current) {
        return undefined; // a late message from a search this kernel has moved past
      }
    }
    if (!existing || existing.searchId !== searchId) {
      const fresh: MutableGroup = {
        uri,
        kernelName,
        searchId,
        running: true,
        documentVersion: null,
        candidates: [],
        progress: undefined,
        appliedId: undefined,
        touched: ++this.clock,
      };
      this.groups.set(key, fresh);
      return fresh;
    }
    return existing;
  }

  private changed(): void {
    for (const listener of [...this.listeners]) {
      listener();
    }
  }
}

function snapshot(key: string, group: MutableGroup): KernelGroup {
  const wrap = (info: CandidateInfo, position: number): RankedCandidate => ({
    info,
    position,
    searchId: group.searchId,
    uri: group.uri,
    kernelName: group.kernelName,
    applied: info.id === group.appliedId,
    outdated: group.appliedId !== undefined && info.id !== group.appliedId,
  });
  const usable = group.candidates.filter(isUsable).sort(byRank);
  const failed = group.candidates.filter((c) => !isUsable(c)).sort(byRank);
  const candidates = usable.map((info) => wrap(info, info.rank));
  return {
    key,
    uri: group.uri,
    kernelName: group.kernelName,
    searchId: group.searchId,
    running: group.running,
    documentVersion: group.documentVersion,
    candidates,
    failed: failed.map((info) => wrap(info, 0)),
    progress: group.progress,
    applied: candidates.find((candidate) => candidate.applied),
  };
}
