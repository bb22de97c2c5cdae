/**
 * The search view: the beam tree of a kernel's newest search and its best speedup per
 * iteration, redrawn as candidates arrive. Clicking a candidate opens its diff. When the search
 * ends, or is cancelled, the last picture stays.
 */

import * as vscode from 'vscode';

import type { CandidateStore } from './candidateStore';
import { ClientCommands } from './clientCommands';
import type { SearchTree } from './protocol';
import { searchViewModel } from './searchTreeModel';
import { webviewPage } from './webviewPage';

export class SearchTreePanels implements vscode.Disposable {
  private readonly panels = new Map<string, vscode.WebviewPanel>();
  private readonly pending = new Set<string>();
  private readonly subscription: { dispose(): void };

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly store: CandidateStore,
    private readonly fetch: (searchId: string) => Promise<SearchTree | null>,
  ) {
    this.subscription = store.onDidChange(() => {
      for (const searchId of this.panels.keys()) {
        void this.refresh(searchId);
      }
    });
  }

  async show(searchId: string, kernelName: string): Promise<void> {
    let panel = this.panels.get(searchId);
    if (panel) {
      panel.reveal(undefined, true);
    } else {
      panel = vscode.window.createWebviewPanel(
        'accelopt.searchTree',
        `Search: ${kernelName}`,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        {
          enableScripts: true,
          retainContextWhenHidden: true,
          localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview')],
        },
      );
      this.panels.set(searchId, panel);
      panel.onDidDispose(() => this.panels.delete(searchId));
      panel.webview.onDidReceiveMessage((message: { type?: string; candidateId?: string }) => {
        if (message.type === 'ready') {
          void this.refresh(searchId); // a model posted before the page listened was lost
        } else if (message.type === 'open' && message.candidateId) {
          void this.open(searchId, message.candidateId);
        }
      });
      panel.webview.html = webviewPage(
        panel.webview,
        vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview', 'searchTree.js'),
        `Search on ${kernelName}`,
        [
          ['tree', 460],
          ['best', 220],
        ],
      );
    }
    await this.refresh(searchId);
  }

  private async refresh(searchId: string): Promise<void> {
    const panel = this.panels.get(searchId);
    if (!panel || this.pending.has(searchId)) {
      return; // one request at a time; the next change asks again
    }
    this.pending.add(searchId);
    try {
      const tree = await this.fetch(searchId);
      if (tree) {
        await panel.webview.postMessage({ type: 'model', model: searchViewModel(tree) });
      }
    } finally {
      this.pending.delete(searchId);
    }
  }

  private async open(searchId: string, candidateId: string): Promise<void> {
    if (!this.store.find({ searchId, candidateId })) {
      void vscode.window.showInformationMessage(
        `AccelOpt: candidate ${candidateId} is not among the kernels kept for review (only correct candidates have a diff).`,
      );
      return;
    }
    await vscode.commands.executeCommand(ClientCommands.showDiff, searchId, candidateId);
  }

  dispose(): void {
    this.subscription.dispose();
    for (const panel of this.panels.values()) {
      panel.dispose();
    }
  }
}
