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

/** Describes a kernel's search: where it stands and how good the best candidate is. */
export function kernelDescription(group: KernelGroup): string {
  const parts = [uriBasename(group.uri)];
  const best = group.candidates[0]?.info;
  const progress = group.progress;
  if (group.running) {
    parts.push(
      progress && progress.totalIterations > 0
        ? `searching, iteration ${progress.iteration} of ${progress.totalIterations}`
        : 'searching…',
    );
  }
  if (best && best.status === 'ok') {
    parts.push(`best ${formatSpeedup(best.speedup)}`);
  }
  if (!group.running) {
    parts.push(pluralize(group.candidates.length, 'candidate'));
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

/** "1. 1.84× · hoist the weight load" */
export function candidateLabel(candidate: RankedCandidate): string {
  const { info } = candidate;
  const title = info.title.trim() || 'baseline';
  if (info.status === 'pending') {
    return `${title}`;
  }
  if (info.status !== 'ok') {
    return title;
  }
  return `${candidate.position}. ${formatSpeedup(info.speedup)} · ${title}`;
}

/** "61% of peak · correct · simulated on trn1" */
export function candidateDescription(candidate: RankedCandidate): string {
  const { info } = candidate;
  const parts: string[] = [];
  const peak = formatPercentOfPeak(info.percentOfPeak);
  if (peak && info.status === 'ok') {
    parts.push(peak);
  }
  parts.push(statusLabel(info.status));
  if (info.status === 'ok') {
    parts.push(measuredOn(info.backend, info.hardware));
  }
  return parts.join(' · ');
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
  } else {
    md.appendMarkdown(`Status: ${statusLabel(info.status)}\n\n`);
  }
  if (info.rationale.length > 0) {
    md.appendMarkdown('How it was made, step by step from the original:\n\n');
    info.rationale.forEach((step, index) => md.appendMarkdown(`${index + 1}. ${escapeMarkdown(step)}\n`));
  }
  return md;
}

function candidateItem(candidate: RankedCandidate): vscode.TreeItem {
  const { info } = candidate;
  const item = new vscode.TreeItem(candidateLabel(candidate), vscode.TreeItemCollapsibleState.None);
  item.id = `${candidate.searchId}/${info.id}`;
  item.description = candidateDescription(candidate);
  item.tooltip = candidateTooltip(candidate);
  const state = info.status === 'ok' ? 'ok' : info.status === 'pending' ? 'pending' : 'failed';
  item.contextValue = `accelopt.candidate.${state}`;
  item.iconPath =
    state === 'ok'
      ? new vscode.ThemeIcon('pass', new vscode.ThemeColor('testing.iconPassed'))
      : state === 'pending'
        ? new vscode.ThemeIcon('loading~spin')
        : new vscode.ThemeIcon('error', new vscode.ThemeColor('testing.iconFailed'));
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
