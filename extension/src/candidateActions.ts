/**
 * Show diff, Accept and Reject for one candidate, however the user got to it: a tree item's
 * inline action (the tree node), a click on the item (a `{searchId, candidateId}` reference), or
 * the server's code action (`[searchId, candidateId]`).
 *
 * Accept goes through the server's `accelopt.applyCandidate`, which sends `workspace/applyEdit`
 * pinned to the document version the search started from; a document edited since is refused,
 * and the user is told so in plain words. The server shows its refusals itself
 * (window/showMessage) and returns the same text, so the client adds a message only when the
 * server could not say anything (no answer, an error): one toast per refusal, never two.
 */

import * as vscode from 'vscode';

import type { CandidateRef, CandidateStore, RankedCandidate } from './candidateStore';
import { measuredOn, speedupPhrase, uriBasename } from './format';
import { ServerCommands, type ApplyResult, type Hunk } from './protocol';

/** Runs a server command (workspace/executeCommand); undefined when the server is not running. */
export type ServerCommandRunner = (command: string, args: unknown[]) => Promise<unknown>;

export function toCandidateRef(args: readonly unknown[]): CandidateRef | undefined {
  const [first, second] = args;
  if (typeof first === 'string' && typeof second === 'string') {
    return { searchId: first, candidateId: second };
  }
  if (first && typeof first === 'object') {
    const node = first as {
      kind?: unknown;
      candidate?: RankedCandidate;
      searchId?: unknown;
      candidateId?: unknown;
    };
    if (node.kind === 'candidate' && node.candidate) {
      return { searchId: node.candidate.searchId, candidateId: node.candidate.info.id };
    }
    if (typeof node.searchId === 'string' && typeof node.candidateId === 'string') {
      return { searchId: node.searchId, candidateId: node.candidateId };
    }
  }
  return undefined;
}

export function resolveCandidate(
  store: CandidateStore,
  args: readonly unknown[],
): RankedCandidate | undefined {
  const ref = toCandidateRef(args);
  const candidate = ref && store.find(ref);
  if (!candidate) {
    void vscode.window.showWarningMessage(
      'AccelOpt: this candidate is no longer available (a newer search replaced it, or the server restarted).',
    );
  }
  return candidate;
}

export type AcceptOutcome =
  | { readonly applied: true }
  | { readonly applied: false; readonly reason: string; readonly shownByServer: boolean };

function isApplyResult(value: unknown): value is ApplyResult {
  return typeof value === 'object' && value !== null && typeof (value as ApplyResult).applied === 'boolean';
}

/** A pick list entry per change: where it is and what it does, first lines shown. */
export function hunkItems(
  hunks: readonly Hunk[],
): { label: string; description: string; detail: string; index: number }[] {
  const first = (lines: readonly string[]): string => (lines.find((l) => l.trim()) ?? '').trim();
  return hunks.map((hunk) => {
    const where =
      hunk.endLine < hunk.startLine
        ? `insert before line ${hunk.startLine}`
        : hunk.endLine === hunk.startLine
          ? `line ${hunk.startLine}`
          : `lines ${hunk.startLine}–${hunk.endLine}`;
    const removed = hunk.removed.length ? `−${hunk.removed.length}` : '';
    const added = hunk.added.length ? `+${hunk.added.length}` : '';
    return {
      label: `Change ${hunk.index + 1}: ${where}`,
      description: [removed, added].filter(Boolean).join(' '),
      detail: hunk.added.length ? `+ ${first(hunk.added)}` : `− ${first(hunk.removed)}`,
      index: hunk.index,
    };
  });
}

/** Ask the server for the candidate's changes, let the user pick some, apply only those. */
export async function acceptHunks(
  candidate: RankedCandidate,
  runServerCommand: ServerCommandRunner,
  saveAfterAccept: boolean,
): Promise<AcceptOutcome> {
  const hunks = ((await runServerCommand(ServerCommands.candidateHunks, [
    candidate.searchId,
    candidate.info.id,
  ])) ?? []) as Hunk[];
  if (hunks.length === 0) {
    const reason = 'the candidate changes nothing (or its search is gone).';
    void vscode.window.showInformationMessage(`AccelOpt: ${reason}`);
    return { applied: false, reason, shownByServer: false };
  }
  const picked = await vscode.window.showQuickPick(hunkItems(hunks), {
    canPickMany: true,
    title: `AccelOpt: which changes of "${candidate.info.title}" to apply? (the others are left out)`,
  });
  if (!picked || picked.length === 0) {
    return { applied: false, reason: 'no change chosen', shownByServer: true };
  }
  return acceptCandidate(
    candidate,
    runServerCommand,
    saveAfterAccept,
    picked.map((item) => item.index),
  );
}

export async function acceptCandidate(
  candidate: RankedCandidate,
  runServerCommand: ServerCommandRunner,
  saveAfterAccept: boolean,
  hunks?: readonly number[],
): Promise<AcceptOutcome> {
  const name = uriBasename(candidate.uri);
  let outcome: AcceptOutcome;
  try {
    const result = hunks
      ? await runServerCommand(ServerCommands.applyHunks, [candidate.searchId, candidate.info.id, [...hunks]])
      : await runServerCommand(ServerCommands.applyCandidate, [candidate.searchId, candidate.info.id]);
    if (!isApplyResult(result)) {
      outcome = { applied: false, reason: 'the server gave no answer.', shownByServer: false };
    } else if (!result.applied) {
      outcome = result.message
        ? { applied: false, reason: result.message, shownByServer: true }
        : {
            applied: false,
            reason: `${name} may have changed after the search started, so the candidate no longer fits it. Optimize the kernel again on the current text.`,
            shownByServer: false,
          };
    } else {
      outcome = { applied: true };
    }
  } catch (error) {
    outcome = {
      applied: false,
      reason: error instanceof Error ? error.message : String(error),
      shownByServer: false,
    };
  }

  if (!outcome.applied) {
    if (!outcome.shownByServer) {
      void vscode.window.showWarningMessage(
        `AccelOpt did not apply the candidate to ${name}: ${outcome.reason}`,
      );
    }
    return outcome;
  }
  if (saveAfterAccept) {
    const target = vscode.Uri.parse(candidate.uri).toString();
    const document = vscode.workspace.textDocuments.find((doc) => doc.uri.toString() === target);
    await document?.save();
  }
  const { info } = candidate;
  void vscode.window.showInformationMessage(
    `AccelOpt: applied "${info.title}" to ${candidate.kernelName} in ${name}: ${speedupPhrase(info.speedup)}, ${measuredOn(info.backend, info.hardware)}. Undo restores the previous kernel.`,
  );
  return outcome;
}

export async function rejectCandidate(
  candidate: RankedCandidate,
  store: CandidateStore,
  runServerCommand: ServerCommandRunner,
): Promise<void> {
  const ref = { searchId: candidate.searchId, candidateId: candidate.info.id };
  store.remove(ref); // at once; the server confirms with a fresh candidates notification
  try {
    await runServerCommand(ServerCommands.rejectCandidate, [ref.searchId, ref.candidateId]);
  } catch (error) {
    void vscode.window.showWarningMessage(
      `AccelOpt: the server could not drop the candidate: ${String(error)}`,
    );
  }
}
