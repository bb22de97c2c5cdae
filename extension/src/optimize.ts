/**
 * "AccelOpt: Optimize Kernel": one `accelopt/optimize` request inside a cancellable progress
 * notification that shows the iteration, the best speedup and the cost so far.
 *
 * Cancelling stops the search for real: the request's token makes the client send
 * `$/cancelRequest`, and once the search id is known `accelopt/cancel` is sent as well (either
 * alone stops it on the server). The notification stays up ("stopping…") until the server has
 * answered, so a person sees when the CPU is free again.
 */

import * as vscode from 'vscode';

import { formatSpeedup, isFaster, measuredOn, pluralize } from './format';
import type {
  CandidateInfo,
  CandidatesNotification,
  OptimizeParams,
  OptimizeResult,
  SearchOptions,
  SearchStateNotification,
} from './protocol';
import { SearchProgress } from './searchProgress';

export interface OptimizeTarget {
  readonly uri: string;
  readonly kernelName: string;
}

/** What a search needs from the server connection (the language client in the extension). */
export interface SearchChannel {
  optimize(params: OptimizeParams, token: vscode.CancellationToken): Promise<OptimizeResult>;
  cancel(searchId: string): Promise<void>;
  onSearchState(listener: (state: SearchStateNotification) => void): vscode.Disposable;
  onCandidates(listener: (list: CandidatesNotification) => void): vscode.Disposable;
  /** Work-done progress reports the server sends on the request's token (percentage 0-100). */
  onProgressMessage(
    token: string,
    listener: (message: string, percentage?: number) => void,
  ): vscode.Disposable;
}

export type OptimizeOutcome =
  | { readonly kind: 'finished'; readonly result: OptimizeResult }
  | { readonly kind: 'cancelled'; readonly searchId: string | undefined; readonly confirmed: boolean }
  | { readonly kind: 'failed'; readonly message: string };

/** JSON-RPC's code for a request the server stopped because the client cancelled it. */
const REQUEST_CANCELLED = -32800;

let tokenCounter = 0;

export function sameUri(a: string, b: string): boolean {
  if (a === b) {
    return true;
  }
  try {
    return vscode.Uri.parse(a).toString() === vscode.Uri.parse(b).toString();
  } catch {
    return false;
  }
}

function isRequestCancelled(error: unknown): boolean {
  return (
    typeof error === 'object' && error !== null && (error as { code?: unknown }).code === REQUEST_CANCELLED
  );
}

export interface RunOptions {
  /** Which backend will measure the candidates, for the title ("simulated on trn1"). */
  readonly measuredOn?: string;
  /** How long to wait for the server to confirm a cancellation before giving up on it. */
  readonly stopTimeoutMs?: number;
  readonly log?: (line: string) => void;
}

export function runOptimization(
  target: OptimizeTarget,
  options: SearchOptions,
  channel: SearchChannel,
  run: RunOptions = {},
): Thenable<OptimizeOutcome> {
  const stopTimeoutMs = run.stopTimeoutMs ?? 15_000;
  const log = run.log ?? (() => undefined);
  return vscode.window.withProgress(
    {
      location: vscode.ProgressLocation.Notification,
      title: `AccelOpt: optimizing ${target.kernelName}${run.measuredOn ? ` (${run.measuredOn})` : ''}`,
      cancellable: true,
    },
    async (progress, token) => {
      const workDoneToken = `accelopt-optimize-${process.pid}-${++tokenCounter}`;
      let searchId: string | undefined;
      let reported = 0;
      let stopping = false;
      const status = new SearchProgress();
      const report = (message: string, percent?: number): void => {
        if (stopping) {
          return;
        }
        const increment = percent !== undefined && percent > reported ? percent - reported : undefined;
        reported = Math.max(reported, percent ?? 0);
        progress.report({ message, increment });
      };
      /**
       * Is this message about our search? The first live one for our kernel tells us its id; the
       * last words of a search stopped just before this one started (finished, not running) do not.
       */
      const ours = (
        message: { searchId: string; uri: string; kernelName: string },
        live: boolean,
      ): boolean => {
        if (message.kernelName !== target.kernelName || !sameUri(message.uri, target.uri)) {
          return false;
        }
        if (searchId === undefined && live) {
          searchId = message.searchId;
        }
        return message.searchId === searchId;
      };
      const subscriptions: vscode.Disposable[] = [
        channel.onSearchState((state) => {
          if (ours(state, state.state !== 'finished')) {
            status.onState(state);
            report(status.message, status.percent);
          }
        }),
        channel.onCandidates((list) => {
          if (ours(list, list.running)) {
            status.onCandidates(list);
            report(status.message, status.percent);
          }
        }),
        // Before the search has started (loading the kernel, planning) the server's own words.
        channel.onProgressMessage(workDoneToken, (message, percentage) => {
          if (message && !status.heard) {
            report(message, percentage);
          }
        }),
      ];
      report('starting…');

      let cancelTimer: NodeJS.Timeout | undefined;
      const cancelled = new Promise<OptimizeOutcome>((resolve) => {
        subscriptions.push(
          token.onCancellationRequested(() => {
            progress.report({ message: 'stopping…' });
            stopping = true;
            if (searchId !== undefined) {
              channel.cancel(searchId).catch((error) => log(`accelopt/cancel failed: ${String(error)}`));
            }
            cancelTimer = setTimeout(
              () => resolve({ kind: 'cancelled', searchId, confirmed: false }),
              stopTimeoutMs,
            );
          }),
        );
      });

      const params: OptimizeParams = {
        uri: target.uri,
        kernelName: target.kernelName,
        options,
        workDoneToken,
      };
      const request = channel.optimize(params, token).then(
        (result): OptimizeOutcome =>
          result.reason === 'cancelled' || token.isCancellationRequested
            ? { kind: 'cancelled', searchId: result.searchId ?? searchId, confirmed: true }
            : { kind: 'finished', result },
        (error: unknown): OptimizeOutcome =>
          isRequestCancelled(error) || token.isCancellationRequested
            ? { kind: 'cancelled', searchId, confirmed: true }
            : { kind: 'failed', message: error instanceof Error ? error.message : String(error) },
      );
      try {
        return await Promise.race([request, cancelled]);
      } finally {
        clearTimeout(cancelTimer);
        subscriptions.forEach((subscription) => subscription.dispose());
      }
    },
  );
}

export interface OutcomeMessage {
  readonly severity: 'info' | 'warning' | 'error';
  readonly text: string;
}

/** How many candidates a search left in the view, and how many of those are faster. */
export interface CandidateCounts {
  readonly usable: number;
  readonly faster: number;
}

export function countCandidates(candidates: readonly { readonly info: CandidateInfo }[]): CandidateCounts {
  return {
    usable: candidates.length,
    faster: candidates.filter(({ info }) => info.status === 'ok' && isFaster(info.speedup)).length,
  };
}

export const SHOW_DIFF_OF_BEST = 'Show Diff of Best';
export const SHOW_CANDIDATES = 'Show Candidates';

/**
 * The buttons on the message when a search ends: the best candidate's diff only when it is
 * faster (a diff of a 1.00× rewrite is not worth a primary button).
 */
export function outcomeActions(best: CandidateInfo | undefined): string[] {
  return best && best.status === 'ok' && isFaster(best.speedup)
    ? [SHOW_DIFF_OF_BEST, SHOW_CANDIDATES]
    : [SHOW_CANDIDATES];
}

/** What the user is told when a search ends. */
export function describeOutcome(
  outcome: OptimizeOutcome,
  target: OptimizeTarget,
  counts: CandidateCounts,
  backend: { backend: string; hardware: string } | undefined,
): OutcomeMessage {
  const where = backend ? ` (${measuredOn(backend.backend, backend.hardware)})` : '';
  const noneFaster = counts.usable > 0 && counts.faster === 0;
  const kept = noneFaster
    ? `${pluralize(counts.usable, 'correct rewrite')}, none faster, in the AccelOpt view`
    : `${pluralize(counts.usable, 'candidate')} in the AccelOpt view`;
  switch (outcome.kind) {
    case 'cancelled':
      return {
        severity: outcome.confirmed ? 'info' : 'warning',
        text: outcome.confirmed
          ? `AccelOpt: stopped the search for ${target.kernelName}; ${kept}.`
          : `AccelOpt: asked the server to stop the search for ${target.kernelName}, but it has not confirmed yet. Restart the server if it keeps running.`,
      };
    case 'failed':
      return {
        severity: 'error',
        text: `AccelOpt: the search for ${target.kernelName} failed: ${outcome.message}`,
      };
    case 'finished': {
      const { result } = outcome;
      if (result.reason === 'error') {
        return {
          severity: 'error',
          text: `AccelOpt: the search for ${target.kernelName} stopped on an error: ${result.message || 'see the server log'}`,
        };
      }
      const why: Record<string, string> = {
        completed: 'finished',
        budget: 'reached its budget',
        early_stop: 'stopped early (no further improvement)',
        target_reached: 'reached the target percent of peak',
      };
      const ended = `AccelOpt: the search for ${target.kernelName} ${why[result.reason] ?? result.reason}`;
      // Failed agent calls are said, not hidden behind "finished".
      const agents =
        result.agentCalls && (result.agentFailures ?? 0) > 0 ? ` Agents: ${result.agentCalls}.` : '';
      const severity = agents ? 'warning' : 'info';
      if (!isFaster(result.bestSpeedup) && noneFaster) {
        // "kept" already says nothing is faster; say it once.
        return { severity, text: `${ended}${where}: ${kept}.${agents}` };
      }
      const best = isFaster(result.bestSpeedup)
        ? `best candidate ${formatSpeedup(result.bestSpeedup)} faster${where}`
        : `no faster kernel found${where}`;
      return { severity, text: `${ended}: ${best}; ${kept}.${agents}` };
    }
  }
}
