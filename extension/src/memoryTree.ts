/**
 * The Memory view: the lessons in the optimization memory (`accelopt/memory`), newest first.
 * Refreshed on demand, when a search finishes, and when the server (re)starts.
 */

import * as vscode from 'vscode';

import { formatSpeedup, measuredOn, speedupPhrase } from './format';
import type { ExperienceInfo, MemoryResult } from './protocol';

export type MemoryNode =
  | { readonly kind: 'experience'; readonly experience: ExperienceInfo }
  | { readonly kind: 'message'; readonly text: string; readonly detail?: string };

export type MemoryFetcher = () => Promise<MemoryResult | undefined>;

export class MemoryTreeProvider implements vscode.TreeDataProvider<MemoryNode>, vscode.Disposable {
  private readonly changeEmitter = new vscode.EventEmitter<MemoryNode | undefined>();
  readonly onDidChangeTreeData = this.changeEmitter.event;
  private nodes: MemoryNode[] = [];
  private pathValue: string | undefined;
  private inFlight: Promise<void> | undefined;

  constructor(private readonly fetch: MemoryFetcher) {}

  /** Where the memory lives (its full path is in every lesson's tooltip). */
  get path(): string | undefined {
    return this.pathValue;
  }

  /** The view's description: the memory file's name, not a long (often temporary) directory. */
  get description(): string | undefined {
    return this.pathValue === undefined ? undefined : fileName(this.pathValue);
  }

  dispose(): void {
    this.changeEmitter.dispose();
  }

  /** Re-reads the memory; concurrent calls share one request. */
  refresh(): Promise<void> {
    this.inFlight ??= this.load().finally(() => {
      this.inFlight = undefined;
    });
    return this.inFlight;
  }

  getChildren(node?: MemoryNode): MemoryNode[] {
    return node ? [] : this.nodes;
  }

  getTreeItem(node: MemoryNode): vscode.TreeItem {
    if (node.kind === 'message') {
      const item = new vscode.TreeItem(node.text, vscode.TreeItemCollapsibleState.None);
      item.iconPath = new vscode.ThemeIcon('warning');
      item.tooltip = node.detail;
      return item;
    }
    return experienceItem(node.experience, this.pathValue);
  }

  private async load(): Promise<void> {
    try {
      const result = await this.fetch();
      if (result === undefined) {
        this.nodes = []; // no server: the welcome view explains
        this.pathValue = undefined;
      } else {
        this.pathValue = result.path;
        this.nodes = [...result.experiences]
          .sort((a, b) => b.createdAt.localeCompare(a.createdAt) || b.id - a.id)
          .map((experience) => ({ kind: 'experience', experience }));
      }
    } catch (error) {
      this.nodes = [
        { kind: 'message', text: 'Could not read the optimization memory', detail: String(error) },
      ];
    }
    this.changeEmitter.fire(undefined);
  }
}

/** "1.31× faster · silu · simulated on trn1" */
export function experienceDescription(experience: ExperienceInfo): string {
  return [
    speedupPhrase(experience.speedup),
    experience.kernelFamily,
    measuredOn(experience.backend, experience.hardware),
  ]
    .filter((part) => part !== '')
    .join(' · ');
}

/** "/tmp/x/memory.sqlite" -> "memory.sqlite" (either separator: the server may run on Windows). */
export function fileName(path: string): string {
  const trimmed = path.replace(/[\\/]+$/, '');
  return trimmed.slice(Math.max(trimmed.lastIndexOf('/'), trimmed.lastIndexOf('\\')) + 1) || path;
}

function experienceItem(experience: ExperienceInfo, memoryPath: string | undefined): vscode.TreeItem {
  const item = new vscode.TreeItem(experience.title, vscode.TreeItemCollapsibleState.None);
  item.id = `experience/${experience.id}`;
  item.description = experienceDescription(experience);
  item.iconPath = experience.positive
    ? new vscode.ThemeIcon('arrow-up', new vscode.ThemeColor('testing.iconPassed'))
    : new vscode.ThemeIcon('arrow-down', new vscode.ThemeColor('testing.iconFailed'));
  const md = new vscode.MarkdownString();
  md.appendMarkdown(`**${experience.positive ? 'Worked' : 'Did not work'}:** `);
  md.appendText(experience.title);
  md.appendMarkdown('\n\n');
  md.appendText(experience.plan);
  md.appendMarkdown(
    `\n\n${formatSpeedup(experience.speedup)} (${measuredOn(experience.backend, experience.hardware)}), by ${experience.model}, ${experience.createdAt}`,
  );
  if (memoryPath !== undefined) {
    md.appendMarkdown('\n\nIn the memory at ');
    md.appendText(memoryPath);
  }
  item.tooltip = md;
  return item;
}
