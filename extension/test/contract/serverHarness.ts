/**
 * The editor's half of the protocol, played over stdio against the real Python server
 * (`python -m accelopt lsp`): what the extension (through vscode-languageclient) and VS Code do.
 * It answers `workspace/configuration` from the extension's own settings module, applies
 * `workspace/applyEdit` the way VS Code does (a versioned edit against another version is
 * refused), and records every AccelOpt notification and progress report.
 */

import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Readable, Writable } from 'node:stream';

import {
  Emitter,
  ProgressType,
  StreamMessageReader,
  StreamMessageWriter,
  createMessageConnection,
  type MessageConnection,
} from 'vscode-jsonrpc/node';

import type { SearchChannel } from '../../src/optimize';
import {
  Methods,
  type CandidatesNotification,
  type OptimizeParams,
  type OptimizeResult,
  type SearchStateNotification,
} from '../../src/protocol';
import { configurationSection, type ServerConfiguration } from '../../src/settings';
import { assertCandidatesNotification, assertSearchState } from './protocolShapes';
import { applyTextEdits, type TextEdit } from './textEdits';

export const REPO = resolve(__dirname, '../../../..');

export function pythonForTests(): string {
  return process.env.ACCELOPT_PYTHON ?? join(REPO, '.venv/bin/python');
}

interface Document {
  version: number;
  text: string;
}

export interface ProgressValue {
  kind: 'begin' | 'report' | 'end';
  title?: string;
  message?: string;
  cancellable?: boolean;
  percentage?: number;
}

interface VersionedEdit {
  textDocument: { uri: string; version: number | null };
  edits: TextEdit[];
}

const progressType = new ProgressType<ProgressValue>();

export class ServerHarness {
  readonly root: string;
  readonly connection: MessageConnection;
  readonly candidates: CandidatesNotification[] = [];
  readonly states: SearchStateNotification[] = [];
  readonly messages: { type: number; message: string }[] = [];
  readonly progress = new Map<string, ProgressValue[]>();
  readonly stderr: string[] = [];
  private readonly documents = new Map<string, Document>();
  private readonly process: ChildProcessByStdio<Writable, Readable, Readable>;
  private readonly exited: Promise<number | null>;
  private readonly waiters = new Set<() => void>();
  private readonly stateEmitter = new Emitter<SearchStateNotification>();
  private readonly candidatesEmitter = new Emitter<CandidatesNotification>();

  /** How many times the server asked for its settings (workspace/configuration). */
  configurationRequests = 0;

  constructor(public configuration: ServerConfiguration) {
    this.root = mkdtempSync(join(tmpdir(), 'accelopt-contract-'));
    for (const name of ['silu.py', 'silu_ref.py']) {
      copyFileSync(join(REPO, 'kernels_examples', name), join(this.root, name));
    }
    const python = pythonForTests();
    if (!existsSync(python)) {
      throw new Error(`no Python interpreter at ${python}: set ACCELOPT_PYTHON or run \`make setup\``);
    }
    this.process = spawn(python, ['-m', 'accelopt', 'lsp'], {
      cwd: this.root,
      env: { ...process.env, PYTHONUNBUFFERED: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.exited = new Promise((resolveExit) => this.process.on('exit', (code) => resolveExit(code)));
    this.process.stderr.on('data', (chunk: Buffer) => this.stderr.push(chunk.toString()));
    this.connection = createMessageConnection(
      new StreamMessageReader(this.process.stdout),
      new StreamMessageWriter(this.process.stdin),
    );
    this.install();
    this.connection.listen();
  }

  private install(): void {
    const c = this.connection;
    c.onRequest('workspace/configuration', (params: { items: { section?: string }[] }) => {
      this.configurationRequests += 1;
      this.wake();
      // What the extension's middleware answers: the same object as initializationOptions.
      return params.items.map((item) => configurationSection(this.configuration, item.section) ?? null);
    });
    c.onRequest('workspace/applyEdit', (params: { edit: { documentChanges?: VersionedEdit[] } }) => {
      for (const change of params.edit.documentChanges ?? []) {
        const doc = this.documents.get(change.textDocument.uri);
        if (!doc || (change.textDocument.version !== null && change.textDocument.version !== doc.version)) {
          return { applied: false, failureReason: 'the document changed (version mismatch)' };
        }
      }
      for (const change of params.edit.documentChanges ?? []) {
        const doc = this.documents.get(change.textDocument.uri)!;
        this.change(change.textDocument.uri, applyTextEdits(doc.text, change.edits));
      }
      return { applied: true };
    });
    c.onNotification(Methods.candidates, (notification: CandidatesNotification) => {
      assertCandidatesNotification(notification);
      this.candidates.push(notification);
      this.candidatesEmitter.fire(notification);
      this.wake();
    });
    c.onNotification(Methods.searchState, (state: SearchStateNotification) => {
      assertSearchState(state);
      this.states.push(state);
      this.stateEmitter.fire(state);
      this.wake();
    });
    c.onNotification('window/showMessage', (message: { type: number; message: string }) => {
      this.messages.push(message);
      this.wake();
    });
    c.onUnhandledProgress((params) =>
      this.recordProgress(String(params.token), params.value as ProgressValue),
    );
    // Everything else the server may ask of an editor (progress creation, refreshes, capability
    // registration) succeeds with no answer, as in VS Code.
    c.onRequest(() => null);
    c.onNotification(() => undefined);
  }

  /** initialize + initialized; resolves with the server's capabilities. */
  async initialize(): Promise<Record<string, unknown>> {
    const result = await this.connection.sendRequest<{ capabilities: Record<string, unknown> }>(
      'initialize',
      {
        processId: process.pid,
        rootUri: pathToFileURL(this.root).toString(),
        workspaceFolders: [{ uri: pathToFileURL(this.root).toString(), name: 'contract' }],
        initializationOptions: this.configuration,
        capabilities: {
          window: { workDoneProgress: true, showMessage: {} },
          workspace: {
            configuration: true,
            applyEdit: true,
            workspaceEdit: { documentChanges: true },
            didChangeConfiguration: { dynamicRegistration: true },
          },
          textDocument: {
            hover: { contentFormat: ['markdown', 'plaintext'] },
            codeAction: { resolveSupport: { properties: ['edit', 'command'] } },
            synchronization: { didSave: true },
          },
        },
      },
    );
    await this.connection.sendNotification('initialized', {});
    return result.capabilities;
  }

  uri(name: string): string {
    return pathToFileURL(join(this.root, name)).toString();
  }

  open(name: string, text: string): string {
    const uri = this.uri(name);
    this.documents.set(uri, { version: 1, text });
    void this.connection.sendNotification('textDocument/didOpen', {
      textDocument: { uri, languageId: 'python', version: 1, text },
    });
    return uri;
  }

  /** A whole-document change, as VS Code sends one after an edit. */
  change(uri: string, text: string): void {
    const doc = this.documents.get(uri)!;
    doc.version += 1;
    doc.text = text;
    void this.connection.sendNotification('textDocument/didChange', {
      textDocument: { uri, version: doc.version },
      contentChanges: [{ text }],
    });
  }

  text(uri: string): string {
    return this.documents.get(uri)!.text;
  }

  version(uri: string): number {
    return this.documents.get(uri)!.version;
  }

  executeCommand(command: string, ...args: unknown[]): Promise<unknown> {
    return this.connection.sendRequest('workspace/executeCommand', { command, arguments: args });
  }

  /** Resolves once `predicate` holds (checked on every message), or fails after `timeoutMs`. */
  waitFor<T>(predicate: () => T | undefined | false, what: string, timeoutMs = 60_000): Promise<T> {
    return new Promise((resolveWait, reject) => {
      const check = (): boolean => {
        const value = predicate();
        if (value) {
          this.waiters.delete(check);
          clearTimeout(timer);
          resolveWait(value);
          return true;
        }
        return false;
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(
          new Error(
            `timed out after ${timeoutMs} ms waiting for ${what}\nserver log:\n${this.stderr.join('')}`,
          ),
        );
      }, timeoutMs);
      if (!check()) {
        this.waiters.add(check);
      }
    });
  }

  private recordProgress(token: string, value: ProgressValue): void {
    this.progress.set(token, [...(this.progress.get(token) ?? []), value]);
    this.wake();
  }

  private wake(): void {
    for (const waiter of [...this.waiters]) {
      waiter();
    }
  }

  /** The extension's SearchChannel, over this connection: what optimize.ts talks to. */
  searchChannel(): SearchChannel {
    const c = this.connection;
    return {
      optimize: (params: OptimizeParams, token) =>
        c.sendRequest<OptimizeResult>(Methods.optimize, params, token),
      cancel: async (searchId: string) => {
        await c.sendRequest(Methods.cancel, { searchId });
      },
      onSearchState: (listener) => this.stateEmitter.event(listener),
      onCandidates: (listener) => this.candidatesEmitter.event(listener),
      onProgressMessage: (token, listener) =>
        c.onProgress(progressType, token, (value) => {
          this.recordProgress(token, value);
          if (value.kind !== 'end' && value.message) {
            listener(value.message, value.percentage);
          }
        }),
    };
  }

  /** shutdown + exit, as the client does on deactivation; resolves with the exit code. */
  async stop(): Promise<number | null> {
    try {
      await this.connection.sendRequest('shutdown');
      await this.connection.sendNotification('exit');
    } catch {
      this.process.kill();
    }
    const timeout = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 10_000));
    const code = await Promise.race([this.exited, timeout]);
    if (code === 'timeout') {
      this.process.kill('SIGKILL');
      return null;
    }
    this.connection.dispose();
    return code;
  }
}
