/**
 * The timeline view of one kernel: a webview with the engine lanes and the roofline (drawn by
 * dist/webview/timeline.js), opened from the code lens, the command palette or the hover. A
 * click on a bar moves the cursor to its source line; the costliest lines are marked in the
 * editor with their share of the engine time.
 */

import * as vscode from 'vscode';

import type { CandidateInfo, TimelineParams, TimelineResult } from './protocol';
import { timelineViewModel, type HotLine, type TimelineViewModel } from './timelineModel';
import { webviewPage } from './webviewPage';

export interface TimelineSource {
  timeline(params: TimelineParams): Promise<TimelineResult>;
  /** Correct candidates of the newest search on this kernel, for the roofline. */
  candidates(uri: string, kernelName: string): readonly CandidateInfo[];
}

/** The page: the chart containers the timeline script draws into. */
export function timelineHtml(webview: vscode.Webview, script: vscode.Uri): string {
  return webviewPage(webview, script, 'AccelOpt timeline', [
    ['timeline', 340],
    ['roofline', 300],
  ]);
}

export class TimelinePanels implements vscode.Disposable {
  private readonly panels = new Map<string, vscode.WebviewPanel>();
  private readonly decoration = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor('editorCodeLens.foreground'), margin: '0 0 0 2em' },
    isWholeLine: true,
  });
  private readonly hot = new Map<string, HotLine[]>();
  /** The last model of each panel, sent again when its page says it is ready (a message
   * posted before the page listened is lost). */
  private readonly models = new Map<string, TimelineViewModel>();

  constructor(
    private readonly extensionUri: vscode.Uri,
    private readonly source: TimelineSource,
  ) {}

  async show(uri: vscode.Uri, kernelName: string): Promise<void> {
    const key = `${uri.toString()}#${kernelName}`;
    let panel = this.panels.get(key);
    if (panel) {
      panel.reveal(undefined, true);
    } else {
      panel = vscode.window.createWebviewPanel(
        'accelopt.timeline',
        `Timeline: ${kernelName}`,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        {
          enableScripts: true,
          retainContextWhenHidden: true,
          localResourceRoots: [vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview')],
        },
      );
      this.panels.set(key, panel);
      panel.onDidDispose(() => {
        this.panels.delete(key);
        this.models.delete(key);
      });
      const webview = panel.webview;
      webview.onDidReceiveMessage((message: { type?: string; line?: number }) => {
        const model = this.models.get(key);
        if (message.type === 'ready' && model) {
          void webview.postMessage({ type: 'model', model });
        } else if (message.type === 'reveal' && typeof message.line === 'number') {
          void revealLine(uri, message.line);
        }
      });
      panel.webview.html = timelineHtml(
        panel.webview,
        vscode.Uri.joinPath(this.extensionUri, 'dist', 'webview', 'timeline.js'),
      );
    }
    const model = await this.model(uri, kernelName);
    this.models.set(key, model);
    await panel.webview.postMessage({ type: 'model', model });
    this.hot.set(uri.toString(), model.hotLines);
    this.decorate();
  }

  private async model(uri: vscode.Uri, kernelName: string): Promise<TimelineViewModel> {
    const result = await this.source.timeline({ uri: uri.toString(), kernelName });
    return timelineViewModel(result, this.source.candidates(uri.toString(), kernelName));
  }

  /** Mark the costliest lines in every visible editor of a document with a timeline. */
  decorate(): void {
    for (const editor of vscode.window.visibleTextEditors) {
      const lines = this.hot.get(editor.document.uri.toString()) ?? [];
      editor.setDecorations(
        this.decoration,
        lines
          .filter((hot) => hot.line >= 1 && hot.line <= editor.document.lineCount)
          .map((hot) => ({
            range: editor.document.lineAt(hot.line - 1).range,
            renderOptions: { after: { contentText: `▮ ${hot.label}` } },
          })),
      );
    }
  }

  dispose(): void {
    for (const panel of this.panels.values()) {
      panel.dispose();
    }
    this.decoration.dispose();
  }
}

async function revealLine(uri: vscode.Uri, line: number): Promise<void> {
  const document = await vscode.workspace.openTextDocument(uri);
  const position = new vscode.Position(Math.max(0, Math.min(line - 1, document.lineCount - 1)), 0);
  const existing = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === uri.toString());
  const editor = await vscode.window.showTextDocument(document, {
    viewColumn: existing?.viewColumn ?? vscode.ViewColumn.One,
    selection: new vscode.Range(position, position),
  });
  editor.revealRange(
    new vscode.Range(position, position),
    vscode.TextEditorRevealType.InCenterIfOutsideViewport,
  );
}
