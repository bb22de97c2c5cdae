/**
 * Starts, stops and restarts the AccelOpt language server (`python -m accelopt lsp`, stdio).
 *
 * Before each start it finds the interpreter (interpreter.ts) and proves it can import the
 * package, so a missing install is one clear message with the fix instead of a crash loop. The
 * server's stderr (its log) goes to the "AccelOpt" output channel. Start, stop and restart are
 * serialized: a restart requested while one is in flight waits for it.
 */

import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  State,
  type ServerOptions,
} from 'vscode-languageclient/node';

import { buildClientOptions } from './clientOptions';
import {
  checkAcceloptImport,
  explainImportFailure,
  resolveInterpreter,
  type Interpreter,
} from './interpreter';
import { serverEnvironment, type ClientSettings } from './settings';

export type ServerState = 'stopped' | 'starting' | 'running' | 'failed';

export interface LauncherDeps {
  readonly output: vscode.OutputChannel;
  readSettings(): ClientSettings;
  storedApiKey(): Thenable<string | undefined>;
  pythonExtensionInterpreter(): Promise<string | undefined>;
  workspaceFolder(): string | undefined;
  /** Wires notification handlers on a new client, before it starts; disposed when it stops. */
  attach(client: LanguageClient): vscode.Disposable[];
}

export class ServerLauncher implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private attached: vscode.Disposable[] = [];
  private stateValue: ServerState = 'stopped';
  private stopping = false;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly stateEmitter = new vscode.EventEmitter<ServerState>();
  readonly onDidChangeState = this.stateEmitter.event;

  constructor(private readonly deps: LauncherDeps) {}

  get state(): ServerState {
    return this.stateValue;
  }

  /** The running client, or undefined while the server is not up. */
  get runningClient(): LanguageClient | undefined {
    return this.stateValue === 'running' ? this.client : undefined;
  }

  /** Resolves when no start, stop or restart is in flight (a command waits here for the server). */
  settled(): Promise<void> {
    return this.queue.then(() => undefined);
  }

  start(): Promise<boolean> {
    return this.serialized(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.serialized(() => this.doStop());
  }

  restart(): Promise<boolean> {
    return this.serialized(async () => {
      await this.doStop();
      return this.doStart();
    });
  }

  /** Tells a running server its settings changed; it re-reads them (workspace/configuration). */
  async reloadConfiguration(): Promise<void> {
    const client = this.runningClient;
    if (client) {
      await client.sendNotification(DidChangeConfigurationNotification.type, {
        settings: { accelopt: this.deps.readSettings().server },
      });
    }
  }

  async dispose(): Promise<void> {
    await this.stop();
    this.stateEmitter.dispose();
  }

  private serialized<T>(task: () => Promise<T>): Promise<T> {
    const next = this.queue.then(task, task);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private setState(state: ServerState): void {
    if (state !== this.stateValue) {
      this.stateValue = state;
      this.stateEmitter.fire(state);
    }
  }

  private async doStart(): Promise<boolean> {
    const { output } = this.deps;
    this.setState('starting');
    const settings = this.deps.readSettings();
    const interpreter = await resolveInterpreter({
      setting: () => settings.pythonPath,
      pythonExtension: () => this.deps.pythonExtensionInterpreter(),
    });
    output.appendLine(`[client] Python interpreter: ${interpreter.command} (${interpreter.source})`);
    const check = await checkAcceloptImport(interpreter.command);
    if (!check.ok) {
      const message = explainImportFailure(interpreter, check);
      output.appendLine(`[client] ${message}`);
      output.appendLine(`[client] ${check.detail}`);
      this.setState('failed');
      void this.offerFix(message);
      return false;
    }
    output.appendLine(`[client] accelopt package: ${check.location}`);

    const env = serverEnvironment(
      process.env,
      settings.server.agents.apiKeyEnv,
      await this.deps.storedApiKey(),
    );
    const client = new LanguageClient(
      'accelopt',
      'AccelOpt',
      this.serverOptions(interpreter, env),
      buildClientOptions(settings, this.deps.output, () => this.deps.readSettings().server),
    );
    this.client = client;
    this.attached = this.deps.attach(client);
    client.onDidChangeState((event) => {
      // After a crash the client restarts the server a few times, then gives up: follow it, so
      // the views say "not running" rather than pretend.
      if (this.stopping || this.client !== client) {
        return;
      }
      if (event.newState === State.Running) {
        this.setState('running');
      } else if (event.newState === State.Starting) {
        this.setState('starting');
      } else {
        this.setState('failed');
      }
    });
    try {
      await client.start();
    } catch (error) {
      output.appendLine(`[client] The server did not start: ${String(error)}`);
      this.setState('failed');
      void this.offerFix('AccelOpt: the language server did not start. The log says why.');
      return false;
    }
    this.setState('running');
    return true;
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    for (const disposable of this.attached.splice(0)) {
      disposable.dispose();
    }
    if (client) {
      this.stopping = true;
      try {
        if (client.needsStop()) {
          await client.stop(5_000);
        }
      } catch (error) {
        this.deps.output.appendLine(`[client] Stopping the server: ${String(error)}`);
      } finally {
        this.stopping = false;
      }
    }
    this.setState('stopped');
  }

  private serverOptions(interpreter: Interpreter, env: NodeJS.ProcessEnv): ServerOptions {
    return {
      command: interpreter.command,
      args: ['-m', 'accelopt', 'lsp'],
      options: { env, cwd: this.deps.workspaceFolder() },
    };
  }

  private async offerFix(message: string): Promise<void> {
    const choice = await vscode.window.showErrorMessage(message, 'Open Settings', 'Show Log', 'Retry');
    if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'accelopt.pythonPath');
    } else if (choice === 'Show Log') {
      this.deps.output.show();
    } else if (choice === 'Retry') {
      await this.restart();
    }
  }
}
