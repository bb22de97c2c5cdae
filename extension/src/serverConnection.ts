/**
 * The AccelOpt messages over whichever language client is running: requests out, notifications
 * in (fanned out to the candidate store and to anyone listening for search states). Survives
 * server restarts: `attach` is called on each new client.
 */

import * as vscode from 'vscode';
import { ExecuteCommandRequest, WorkDoneProgress, type LanguageClient } from 'vscode-languageclient/node';

import type { CandidateStore } from './candidateStore';
import type { SearchChannel } from './optimize';
import {
  Methods,
  type CancelParams,
  type CandidatesNotification,
  type MemoryParams,
  type MemoryResult,
  type OptimizeParams,
  type OptimizeResult,
  type SearchStateNotification,
  type SearchTree,
  type TimelineParams,
  type TimelineResult,
} from './protocol';

export class ServerNotRunningError extends Error {
  constructor() {
    super('the AccelOpt server is not running (see "AccelOpt: Show Server Log").');
  }
}

export class ServerConnection implements SearchChannel, vscode.Disposable {
  private readonly stateEmitter = new vscode.EventEmitter<SearchStateNotification>();
  private readonly candidatesEmitter = new vscode.EventEmitter<CandidatesNotification>();

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly store: CandidateStore,
  ) {}

  dispose(): void {
    this.stateEmitter.dispose();
    this.candidatesEmitter.dispose();
  }

  /** Subscribes to a new client's notifications (before it starts). */
  attach(client: LanguageClient): vscode.Disposable[] {
    return [
      client.onNotification(Methods.candidates, (notification: CandidatesNotification) => {
        this.store.applyCandidates(notification);
        this.candidatesEmitter.fire(notification);
      }),
      client.onNotification(Methods.searchState, (state: SearchStateNotification) => {
        this.store.applySearchState(state);
        this.stateEmitter.fire(state);
      }),
    ];
  }

  get running(): boolean {
    return this.client() !== undefined;
  }

  private required(): LanguageClient {
    const client = this.client();
    if (!client) {
      throw new ServerNotRunningError();
    }
    return client;
  }

  optimize(params: OptimizeParams, token: vscode.CancellationToken): Promise<OptimizeResult> {
    return this.required().sendRequest<OptimizeResult>(Methods.optimize, params, token);
  }

  async cancel(searchId: string): Promise<void> {
    const params: CancelParams = { searchId };
    await this.required().sendRequest(Methods.cancel, params);
    this.store.markStopped(searchId);
  }

  onSearchState(listener: (state: SearchStateNotification) => void): vscode.Disposable {
    return this.stateEmitter.event(listener);
  }

  onCandidates(listener: (list: CandidatesNotification) => void): vscode.Disposable {
    return this.candidatesEmitter.event(listener);
  }

  onProgressMessage(
    token: string,
    listener: (message: string, percentage?: number) => void,
  ): vscode.Disposable {
    const client = this.client();
    if (!client) {
      return new vscode.Disposable(() => undefined);
    }
    return client.onProgress(WorkDoneProgress.type, token, (value) => {
      if (value.kind !== 'end' && value.message) {
        listener(value.message, value.percentage);
      }
    });
  }

  executeCommand(command: string, args: unknown[]): Promise<unknown> {
    return this.required().sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
  }

  /** Every candidate of a search under its parent (null: the server no longer knows it). */
  searchTree(searchId: string): Promise<SearchTree | null> {
    return this.required().sendRequest<SearchTree | null>(Methods.searchTree, { searchId });
  }

  /** The engine timeline of one kernel as it is in the editor now. */
  timeline(params: TimelineParams): Promise<TimelineResult> {
    return this.required().sendRequest<TimelineResult>(Methods.timeline, params);
  }

  /** The memory, or undefined when no server runs (the view then shows its welcome text). */
  async memory(limit = 200): Promise<MemoryResult | undefined> {
    const client = this.client();
    if (!client) {
      return undefined;
    }
    const params: MemoryParams = { limit };
    return client.sendRequest<MemoryResult>(Methods.memory, params);
  }
}
