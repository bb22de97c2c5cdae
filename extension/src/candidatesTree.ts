/**
 * The Candidates view: one node per kernel (its latest search), under it the candidates ranked,
 * then a collapsed node holding the ones that failed their checks.
 *
 * Labels carry what a kernel engineer scans for (rank and speedup); the description carries the
 * plan's title, percent of peak and state; the tooltip carries the whole rationale. Only a real
 * gain gets the green check. Clicking a candidate opens its diff.
 */

import * as vscode from 'vscode';

import type { CandidateStore, KernelGroup, RankedCandidate } from './candidateStore';
import { ClientCommands } from './clientCommands';
import {
  formatDollars,
  formatLatency,
  formatPercentOfPeak,
  formatSpeedup,
  isFaster,
  measuredOn,
  pluralize,
  statusLabel,
  uriBasename,
} from './format';

export type CandidatesNode =
  | { readonly kind: 'kernel'; readonly group: KernelGroup }
  | { readonly kind: 'candidate'; readonly candidate: RankedCandidate }
  | { readonly kind: 'failed'; readonly group: KernelGroup }
  | { readonly kind: 'message'; readonly group: KernelGroup; readonly text: string };

export class CandidatesTreeProvider implements vscode.TreeDataProvider<CandidatesNode>, vscode.Disposable {
  private readonly changeEmitter = new vscode.EventEmitter<CandidatesNode | undefined>();
  readonly onDidChangeTreeData = this.changeEmitter.event;
  private readonly subscription: { dispose(): void };

  constructor(private readonly store: CandidateStore) {
    this.subscription = store.onDidChange(() => this.changeEmitter.fire(undefined));
  }

  dispose(): void {
    this.subscription.dispose();
    this.changeEmitter.dispose();
  }

  getChildren(node?: CandidatesNode): CandidatesNode[] {
    if (!node) {
      return this.store.kernels().map((group) => ({ kind: 'kernel', group }));
    }
    switch (node.kind) {
      case 'kernel': {
        const { group } = node;
        const children: CandidatesNode[] = group.candidates.map((candidate) => ({
          kind: 'candidate',
          candidate,
        }));
        if (group.failed.length > 0) {
          children.push({ kind: 'failed', group });
        }
        if (children.length === 0) {
          const text = group.running ? 'Waiting for the first candidate…' : 'The search found no candidates.';
          children.push({ kind: 'message', group, text });
        }
        return children;
      }
      case 'failed':
        return node.group.failed.map((candidate) => ({ kind: 'candidate', candidate }));
      default:
        return [];
    }
  }

  getTreeItem(node: CandidatesNode): vscode.TreeItem {
    switch (node.kind) {
      case 'kernel':
        return kernelItem(node.group);
      case 'candidate':
        return candidateItem(node.candidate);
      case 'failed': {
        const item = new vscode.TreeItem(
          `${pluralize(node.group.failed.length, 'candidate')} failed their checks`,
          vscode.TreeItemCollapsibleState.Collapsed,
        );
        item.id = `${node.group.searchId}/failed`;
        item.iconPath = new vscode.ThemeIcon('warning');
        item.tooltip =
          'Rewrites that did not compile, crashed, or gave results different from the original kernel. Never offered for accepting.';
        return item;
      }
      case 'message': {
        const item = new vscode.TreeItem(node.text, vscode.TreeItemCollapsibleState.None);
        item.id = `${node.group.searchId}/message`;
        item.iconPath = new vscode.ThemeIcon(node.group.running ? 'loading~spin' : 'info');
        return item;
      }
    }
  }
}

/**
 * Where a kernel's search stands, best figure first so a narrow sidebar keeps it:
 * "best 1.31× · iteration 2 of 16 · silu.py · simulated on trn1". The file name comes late: one
 * kernel per file is the common case, so it is the part a person misses least when cut.
 */
export function kernelDescription(group: KernelGroup): string {
  const parts: string[] = [];
  const progress = group.progress;
  const best = group.candidates.find((candidate) => candidate.info.status === 'ok');
  if (group.applied) {
    parts.push(`${formatSpeedup(group.applied.info.speedup)} applied (candidate ${group.applied.position})`);
  } else if (best && isFaster(best.info.speedup)) {
    parts.push(`best ${formatSpeedup(best.info.speedup)}`);
  } else if (best && !group.running) {
    parts.push('none faster');
  }
  if (group.running) {
    parts.push(
      progress && progress.totalIterations > 0
        ? `iteration ${Math.min(progress.iteration + 1, progress.totalIterations)} of ${progress.totalIterations}`
        : 'starting…',
    );
  } else if (!group.applied) {
    parts.push(pluralize(group.candidates.length, 'candidate'));
  }
  parts.push(uriBasename(group.uri));
  const measured = group.candidates[0]?.info ?? group.failed[0]?.info;
  if (measured) {
    parts.push(measuredOn(measured.backend, measured.hardware));
  }
  return parts.join(' · ');
}

function kernelItem(group: KernelGroup): vscode.TreeItem {
  const item = new vscode.TreeItem(group.kernelName, vscode.TreeItemCollapsibleState.Expanded);
  item.id = `kernel/${group.key}`;
  item.description = kernelDescription(group);
  item.iconPath = new vscode.ThemeIcon(group.running ? 'sync~spin' : 'symbol-function');
  item.contextValue = group.running ? 'accelopt.kernel.running' : 'accelopt.kernel';
  const tooltip = new vscode.MarkdownString();
  tooltip.appendMarkdown(
    `**${escapeMarkdown(group.kernelName)}** in \`${escapeMarkdown(uriBasename(group.uri))}\`\n\n`,
  );
  if (group.progress) {
    // Offline agents cost nothing; "$0.00" would only be noise.
    const cost = group.progress.dollars > 0 ? `, cost so far ${formatDollars(group.progress.dollars)}` : '';
    tooltip.appendMarkdown(
      `Iterations done: ${group.progress.iteration} of ${group.progress.totalIterations}${cost}\n\n`,
    );
  }
  tooltip.appendMarkdown(
    group.running
      ? 'The search is running; candidates appear as they pass their checks.'
      : 'The search is over.',
  );
  item.tooltip = tooltip;
  return item;
}

/**
 * "1. 1.84×": rank and speedup only, so a narrow sidebar has room left for what tells the
 * candidates apart, the plan's title (in the description, which VS Code cuts first).
 */
export function candidateLabel(candidate: RankedCandidate): string {
  const { info } = candidate;
  if (info.status !== 'ok') {
    return info.title.trim() || 'candidate';
  }
  return `${candidate.position}. ${formatSpeedup(info.speedup)}`;
}

/**
 * "fuse the activation · 61% of peak", led by the state when it is not plainly a win:
 * "applied · …", "outdated · …", "no faster · …" (a correct rewrite that reads 1.00×).
 */
export function candidateDescription(candidate: RankedCandidate): string {
  const { info } = candidate;
  if (info.status !== 'ok') {
    return statusLabel(info.status);
  }
  const parts: string[] = [];
  if (candidate.applied) {
    parts.push('applied');
  } else if (candidate.outdated) {
    parts.push('outdated');
  } else if (isNoFaster(info.speedup)) {
    parts.push('no faster');
  }
  parts.push(info.title.trim() || 'baseline');
  const peak = formatPercentOfPeak(info.percentOfPeak);
  if (peak) {
    parts.push(peak);
  }
  return parts.join(' · ');
}

/** Reads "1.00×": correct, but not a win ("slower" already says itself in the label). */
function isNoFaster(speedup: number | null): boolean {
  return speedup !== null && Number.isFinite(speedup) && Number(speedup.toFixed(2)) === 1;
}

export function candidateTooltip(candidate: RankedCandidate): vscode.MarkdownString {
  const { info } = candidate;
  const md = new vscode.MarkdownString();
  md.appendMarkdown(`**${escapeMarkdown(info.title.trim() || 'baseline')}**\n\n`);
  if (info.status === 'ok') {
    const figures = [
      `speedup ${formatSpeedup(info.speedup)}`,
      formatLatency(info.latencyMs),
      formatPercentOfPeak(info.percentOfPeak),
    ].filter((part): part is string => Boolean(part));
    md.appendMarkdown(`${figures.join(' · ')} (${measuredOn(info.backend, info.hardware)})\n\n`);
    md.appendMarkdown('Correct: same results as the original kernel on random inputs.\n\n');
  } else {
    md.appendMarkdown(`Status: ${statusLabel(info.status)}\n\n`);
  }
  if (candidate.applied) {
    md.appendMarkdown('Applied to the file.\n\n');
  } else if (candidate.outdated) {
    md.appendMarkdown(
      'Made from the kernel as it was before another candidate was applied. Optimize again to build on the new kernel.\n\n',
    );
  }
  if (info.rationale.length > 0) {
    md.appendMarkdown('How it was made, step by step from the original:\n\n');
    info.rationale.forEach((step, index) => md.appendMarkdown(`${index + 1}. ${escapeMarkdown(step)}\n`));
  }
  return md;
}

type CandidateState = 'ok' | 'notFaster' | 'pending' | 'failed' | 'applied' | 'outdated';

function candidateState(candidate: RankedCandidate): CandidateState {
  const { status } = candidate.info;
  if (status === 'pending') {
    return 'pending';
  }
  if (status !== 'ok') {
    return 'failed';
  }
  if (candidate.applied) {
    return 'applied';
  }
  if (candidate.outdated) {
    return 'outdated';
  }
  return isFaster(candidate.info.speedup) ? 'ok' : 'notFaster';
}

const STATE_ICONS: Record<CandidateState, vscode.ThemeIcon> = {
  ok: new vscode.ThemeIcon('pass', new vscode.ThemeColor('testing.iconPassed')),
  // Correct but not a win: no green check, so only real gains look like gains.
  notFaster: new vscode.ThemeIcon('circle-outline'),
  applied: new vscode.ThemeIcon('check-all', new vscode.ThemeColor('testing.iconPassed')),
  outdated: new vscode.ThemeIcon('history'),
  pending: new vscode.ThemeIcon('loading~spin'),
  failed: new vscode.ThemeIcon('error', new vscode.ThemeColor('testing.iconFailed')),
};

function candidateItem(candidate: RankedCandidate): vscode.TreeItem {
  const { info } = candidate;
  const item = new vscode.TreeItem(candidateLabel(candidate), vscode.TreeItemCollapsibleState.None);
  item.id = `${candidate.searchId}/${info.id}`;
  item.description = candidateDescription(candidate);
  item.tooltip = candidateTooltip(candidate);
  const state = candidateState(candidate);
  // Menus key on this: Accept only for "ok", Show Diff for all but "pending", Reject for all but
  // "applied". A correct rewrite that is not faster may still be accepted, so it counts as "ok".
  item.contextValue = `accelopt.candidate.${state === 'notFaster' ? 'ok' : state}`;
  item.iconPath = STATE_ICONS[state];
  if (state !== 'pending') {
    item.command = {
      command: ClientCommands.showDiff,
      title: 'Show Diff',
      arguments: [{ searchId: candidate.searchId, candidateId: info.id }],
    };
  }
  return item;
}

function escapeMarkdown(text: string): string {
  return text.replace(/[\\`*_{}[\]()#+\-.!|<>]/g, (char) => `\\${char}`);
}
