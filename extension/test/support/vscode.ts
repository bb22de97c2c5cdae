/**
 * A small hand-written stand-in for the `vscode` module, enough for the client's modules to run
 * under Node's test runner. It records what the code asks of the editor (messages, commands,
 * progress reports) in `mock`, and lets a test script the user's answers.
 *
 * Only what the modules use is here; a test that needs more should add it, not work around it.
 */

import { URI } from 'vscode-uri';

export const Uri = URI;
export type Uri = URI;

export interface Disposable {
  dispose(): unknown;
}

export class Disposable {
  constructor(private readonly callOnDispose: () => unknown) {}
  static from(...items: { dispose(): unknown }[]): Disposable {
    return new Disposable(() => items.forEach((item) => item.dispose()));
  }
  dispose(): unknown {
    return this.callOnDispose();
  }
}

export type Event<T> = (listener: (value: T) => unknown) => Disposable;

export class EventEmitter<T> {
  private readonly listeners = new Set<(value: T) => unknown>();
  readonly event: Event<T> = (listener) => {
    this.listeners.add(listener);
    return new Disposable(() => this.listeners.delete(listener));
  };
  fire(value: T): void {
    [...this.listeners].forEach((listener) => listener(value));
  }
  dispose(): void {
    this.listeners.clear();
  }
}

export interface CancellationToken {
  readonly isCancellationRequested: boolean;
  readonly onCancellationRequested: Event<void>;
}

export class CancellationTokenSource {
  private readonly emitter = new EventEmitter<void>();
  private cancelled = false;
  readonly token: CancellationToken = {
    get isCancellationRequested() {
      return false;
    },
    onCancellationRequested: this.emitter.event,
  };
  constructor() {
    const self = this;
    Object.defineProperty(this.token, 'isCancellationRequested', { get: () => self.cancelled });
  }
  cancel(): void {
    if (!this.cancelled) {
      this.cancelled = true;
      this.emitter.fire();
    }
  }
  dispose(): void {
    this.emitter.dispose();
  }
}

export enum TreeItemCollapsibleState {
  None = 0,
  Collapsed = 1,
  Expanded = 2,
}

export class ThemeColor {
  constructor(readonly id: string) {}
}

export class ThemeIcon {
  constructor(
    readonly id: string,
    readonly color?: ThemeColor,
  ) {}
}

export class MarkdownString {
  value = '';
  appendMarkdown(text: string): this {
    this.value += text;
    return this;
  }
  appendText(text: string): this {
    this.value += text.replace(/[\\`*_{}[\]()#+\-.!]/g, '\\$&');
    return this;
  }
}

export interface Command {
  title: string;
  command: string;
  arguments?: unknown[];
}

export class TreeItem {
  id?: string;
  description?: string;
  tooltip?: string | MarkdownString;
  iconPath?: ThemeIcon;
  contextValue?: string;
  command?: Command;
  constructor(
    public label: string,
    public collapsibleState: TreeItemCollapsibleState = TreeItemCollapsibleState.None,
  ) {}
}

// Base classes vscode-languageclient extends when it loads; the unit tests never construct them.
export class CallHierarchyItem {}
export class CodeLens {}
export class CompletionItem {}
export class DocumentLink {}
export class InlayHint {}
export class SymbolInformation {}
export class TypeHierarchyItem {}
export class CodeAction {}
export class Diagnostic {}
export class CancellationError extends Error {}

export enum ProgressLocation {
  SourceControl = 1,
  Window = 10,
  Notification = 15,
}

export interface ProgressStep {
  message?: string;
  increment?: number;
}

export interface MessageRecord {
  severity: 'info' | 'warning' | 'error';
  text: string;
  actions: string[];
}

export interface ProgressRecord {
  title: string;
  cancellable: boolean;
  reports: ProgressStep[];
  source: CancellationTokenSource;
  done: boolean;
}

export interface TextDocumentLike {
  uri: URI;
  languageId: string;
  fileName: string;
  getText(): string;
  save(): Promise<boolean>;
}

/** What the code asked of the editor, and what the "user" answers next. */
export const mock = {
  messages: [] as MessageRecord[],
  /** Answers to the next show*Message calls, in order (undefined = dismissed). */
  answers: [] as (string | undefined)[],
  executed: [] as { command: string; args: unknown[] }[],
  commandHandlers: new Map<string, (...args: unknown[]) => unknown>(),
  progress: [] as ProgressRecord[],
  /** Called with each new progress, so a test can act while the task runs. */
  onProgressStart: undefined as ((record: ProgressRecord) => void) | undefined,
  textDocuments: [] as TextDocumentLike[],
  extensions: new Map<string, unknown>(),
  configuration: {} as Record<string, unknown>,
  inputBoxAnswer: undefined as string | undefined,
  quickPickAnswer: undefined as string | string[] | undefined,
  activeTextEditor: undefined as unknown,
  treeViews: new Map<string, unknown>(),
  outputs: new Map<string, string[]>(),
  contentProviders: new Map<string, unknown>(),
  configurationListeners: new EventEmitter<{ affectsConfiguration(section: string): boolean }>(),
  workspaceFolders: [] as { uri: URI }[],
  /** MCP server definition providers registered through `lm`, by id. */
  mcpProviders: new Map<string, unknown>(),
  reset(): void {
    this.messages = [];
    this.answers = [];
    this.executed = [];
    this.commandHandlers.clear();
    this.progress = [];
    this.onProgressStart = undefined;
    this.textDocuments = [];
    this.extensions.clear();
    this.configuration = {};
    this.inputBoxAnswer = undefined;
    this.quickPickAnswer = undefined;
    this.activeTextEditor = undefined;
    this.treeViews.clear();
    this.outputs.clear();
    this.contentProviders.clear();
    this.configurationListeners = new EventEmitter();
    this.workspaceFolders = [];
    this.mcpProviders.clear();
  },
};

function message(severity: MessageRecord['severity']) {
  return (text: string, ...actions: string[]): Promise<string | undefined> => {
    mock.messages.push({ severity, text, actions });
    return Promise.resolve(mock.answers.shift());
  };
}

export const window = {
  showInformationMessage: message('info'),
  showWarningMessage: message('warning'),
  showErrorMessage: message('error'),
  get activeTextEditor(): unknown {
    return mock.activeTextEditor;
  },
  async withProgress<R>(
    options: { location: ProgressLocation; title?: string; cancellable?: boolean },
    task: (progress: { report(step: ProgressStep): void }, token: CancellationToken) => Thenable<R>,
  ): Promise<R> {
    const record: ProgressRecord = {
      title: options.title ?? '',
      cancellable: options.cancellable ?? false,
      reports: [],
      source: new CancellationTokenSource(),
      done: false,
    };
    mock.progress.push(record);
    mock.onProgressStart?.(record);
    try {
      return await task({ report: (step) => record.reports.push(step) }, record.source.token);
    } finally {
      record.done = true;
    }
  },
  createTreeView(id: string, options: { treeDataProvider: unknown }) {
    mock.treeViews.set(id, options.treeDataProvider);
    return { description: undefined as string | undefined, dispose: () => mock.treeViews.delete(id) };
  },
  createOutputChannel(name: string) {
    const lines: string[] = [];
    mock.outputs.set(name, lines);
    return {
      name,
      lines,
      appendLine: (line: string) => lines.push(line),
      append: (text: string) => lines.push(text),
      show: () => undefined,
      dispose: () => undefined,
    };
  },
  async showInputBox(): Promise<string | undefined> {
    return mock.inputBoxAnswer;
  },
  async showQuickPick<T extends { label: string }>(
    items: T[],
    options?: { canPickMany?: boolean },
  ): Promise<T | T[] | undefined> {
    const answer = mock.quickPickAnswer;
    if (options?.canPickMany) {
      const labels = Array.isArray(answer) ? answer : answer === undefined ? [] : [answer];
      return answer === undefined ? undefined : items.filter((item) => labels.includes(item.label));
    }
    return items.find((item) => item.label === answer);
  },
  visibleTextEditors: [] as unknown[],
  onDidChangeVisibleTextEditors(): Disposable {
    return new Disposable(() => undefined);
  },
  createTextEditorDecorationType() {
    return { dispose: () => undefined };
  },
};

export const commands = {
  async executeCommand(command: string, ...args: unknown[]): Promise<unknown> {
    mock.executed.push({ command, args });
    return mock.commandHandlers.get(command)?.(...args);
  },
  registerCommand(command: string, handler: (...args: unknown[]) => unknown): Disposable {
    mock.commandHandlers.set(command, handler);
    return new Disposable(() => mock.commandHandlers.delete(command));
  },
};

export const workspace = {
  get workspaceFolders(): { uri: URI }[] {
    return mock.workspaceFolders;
  },
  /** The extension runs only in trusted workspaces (its manifest says so). */
  isTrusted: true,
  onDidGrantWorkspaceTrust(listener: () => unknown): Disposable {
    void listener;
    return new Disposable(() => undefined);
  },
  onDidChangeConfiguration(
    listener: (event: { affectsConfiguration(section: string): boolean }) => unknown,
  ): Disposable {
    return mock.configurationListeners.event(listener);
  },
  registerTextDocumentContentProvider(scheme: string, provider: unknown): Disposable {
    mock.contentProviders.set(scheme, provider);
    return new Disposable(() => mock.contentProviders.delete(scheme));
  },
  get textDocuments(): TextDocumentLike[] {
    return mock.textDocuments;
  },
  getConfiguration() {
    return { get: <T>(key: string): T | undefined => mock.configuration[key] as T | undefined };
  },
};

export const extensions = {
  getExtension(id: string): unknown {
    return mock.extensions.get(id);
  },
};

export class McpStdioServerDefinition {
  cwd?: URI;
  constructor(
    readonly label: string,
    public command: string,
    public args: string[] = [],
    public env: Record<string, string | number | null> = {},
    public version?: string,
  ) {}
}

export const lm = {
  registerMcpServerDefinitionProvider(id: string, provider: unknown): Disposable {
    mock.mcpProviders.set(id, provider);
    return new Disposable(() => mock.mcpProviders.delete(id));
  },
};
