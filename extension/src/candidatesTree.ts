/**
 * The Candidates view: one node per kernel (its latest search), under it the candidates ranked,
 * then a collapsed node holding the ones that failed their checks.
 *
 * Labels carry what a kernel engineer scans for (place, speedup, plan); the description carries
 * percent of peak, status and which backend measured the numbers; the tooltip carries the whole
 * rationale. Clicking a candidate opens its diff.
 */

import * as vscode from 'vscode';

import type { CandidateStore, KernelGroup, RankedCandidate } from './candidateStore';
import { ClientCommands } from './clientCommands';
import {
  formatDollars,
  formatLatency,
  formatPercentOfPeak,
  formatSpeedup,
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

/** Where a kernel's search stands: "iteration 2 of 16 · silu.py · simulated on trn1". */
export function kernelDescription(group: KernelGroup): string {
  const parts: string[] = [];
  const progress = group.progress;
  if (group.applied) {
    parts.push(`candidate ${group.applied.position} applied`);
  } else if (group.running) {
    parts.push(
      progress && progress.totalIterations > 0
        ? `iteration ${Math.min(progress.iteration + 1, progress.totalIterations)} of ${progress.totalIterations}`
        : 'starting…',
    );
  } else {
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
    tooltip.appendMarkdown(
      `Iteration ${group.progress.iteration} of ${group.progress.totalIterations}, cost so far ${formatDollars(group.progress.dollars)}\n\n`,
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
 * "1. 1.84× · 61% of peak": the figures a kernel engineer scans for come first, so a narrow
 * sidebar cuts the plan's title (in the description and the tooltip) rather than the numbers.
 */
export function candidateLabel(candidate: RankedCandidate): string {
  const { info } = candidate;
  if (info.status !== 'ok') {
    return info.title.trim() || 'candidate';
  }
  const peak = formatPercentOfPeak(info.percentOfPeak);
  return `${candidate.position}. ${formatSpeedup(info.speedup)}${peak ? ` · ${peak}` : ''}`;
}

/** "hoist the weight load", with the status when it is not plainly "correct". */
export function candidateDescription(candidate: RankedCandidate): string {
  const { info } = candidate;
  if (info.status !== 'ok') {
    return statusLabel(info.status);
  }
  const title = info.title.trim() || 'baseline';
  if (candidate.applied) {
    return `applied · ${title}`;
  }
  return candidate.outdated ? `outdated · ${title}` : title;
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

type CandidateState = 'ok' | 'pending' | 'failed' | 'applied' | 'outdated';

function candidateState(candidate: RankedCandidate): CandidateState {
  const { status } = candidate.info;
  if (status === 'pending') {
    return 'pending';
  }
  if (status !== 'ok') {
    return 'failed';
  }
  return candidate.applied ? 'applied' : candidate.outdated ? 'outdated' : 'ok';
}

const STATE_ICONS: Record<CandidateState, vscode.ThemeIcon> = {
  ok: new vscode.ThemeIcon('pass', new vscode.ThemeColor('testing.iconPassed')),
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
  // Menus key on this: Accept only for "ok", Show Diff for all but "pending", Reject for all but "applied".
  item.contextValue = `accelopt.candidate.${state}`;
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
