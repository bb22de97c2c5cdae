/**
 * Offers `accelopt mcp` to VS Code's agent mode through the MCP server definition provider API,
 * so Copilot's agent finds AccelOpt's tools (profile, check, optimize...) with no setup.
 *
 * The server runs on the same interpreter as the language server and with the same settings
 * (backend, hardware, input size, agents, LLM endpoint and configuration file, memory, Ray),
 * passed as flags. The API key,
 * when one is stored, is added to the server's environment only when the editor starts it
 * (`resolveMcpServerDefinition`), never in the definition the editor lists. Editors without the
 * API (older VS Code, some forks) skip the registration: the README shows the manual config.
 */

import * as vscode from 'vscode';

import {
  checkAcceloptImport,
  explainImportFailure,
  resolveInterpreter,
  type Interpreter,
} from './interpreter';
import type { ClientSettings } from './settings';

/** Must match `contributes.mcpServerDefinitionProviders[].id` in package.json. */
export const MCP_PROVIDER_ID = 'accelopt.mcp';
export const MCP_SERVER_LABEL = 'AccelOpt';

export interface McpServerDeps {
  readonly output: vscode.OutputChannel;
  readSettings(): ClientSettings;
  storedApiKey(): Thenable<string | undefined>;
  pythonExtensionInterpreter(): Promise<string | undefined>;
  workspaceFolder(): string | undefined;
  /** Shown to the editor as the server's version: a new one prompts it to refresh the tools. */
  readonly version: string;
}

/** `python -m accelopt mcp ...` with the editor's AccelOpt settings as flags. */
export function mcpServerArgs(settings: ClientSettings): string[] {
  const server = settings.server;
  const args = ['-m', 'accelopt', 'mcp', '--backend', server.backend];
  if (server.hardware !== 'auto') {
    // 'auto' (the default) lets each kernel's API generation choose; only a chosen target is a flag
    args.push('--hardware', server.hardware);
  }
  args.push('--size', server.inputSize, '--agents', server.agents.mode);
  if (server.agents.configFile) {
    args.push('--config', server.agents.configFile); // the flags below win over the file
  }
  if (server.memoryPath) {
    args.push('--memory', server.memoryPath);
  }
  if (server.ray) {
    args.push('--ray', server.ray);
  }
  if (server.agents.mode === 'llm') {
    if (server.agents.baseUrl) {
      args.push('--llm-base-url', server.agents.baseUrl);
    }
    if (server.agents.model) {
      args.push('--llm-model', server.agents.model);
    }
    args.push('--llm-api-key-env', server.agents.apiKeyEnv);
  }
  return args;
}

/**
 * What the server's environment adds to the extension host's (the editor starts MCP servers
 * with its own environment plus these): unbuffered logs, and the stored API key under the
 * variable the settings name.
 */
export function mcpServerEnvironment(
  apiKeyEnvVar: string,
  storedKey: string | undefined,
): Record<string, string> {
  const env: Record<string, string> = { PYTHONUNBUFFERED: '1' };
  if (storedKey) {
    env[apiKeyEnvVar] = storedKey;
  }
  return env;
}

export class AcceloptMcpProvider
  implements vscode.McpServerDefinitionProvider<vscode.McpStdioServerDefinition>, vscode.Disposable
{
  private readonly changes = new vscode.EventEmitter<void>();
  readonly onDidChangeMcpServerDefinitions = this.changes.event;

  constructor(private readonly deps: McpServerDeps) {}

  /** The settings, the interpreter or the API key changed: the editor asks again. */
  refresh(): void {
    this.changes.fire();
  }

  async provideMcpServerDefinitions(): Promise<vscode.McpStdioServerDefinition[]> {
    const settings = this.deps.readSettings();
    const interpreter = await this.interpreter(settings);
    const server = new vscode.McpStdioServerDefinition(
      MCP_SERVER_LABEL,
      interpreter.command,
      mcpServerArgs(settings),
      mcpServerEnvironment(settings.server.agents.apiKeyEnv, undefined),
      this.deps.version,
    );
    const folder = this.deps.workspaceFolder();
    if (folder) {
      server.cwd = vscode.Uri.file(folder);
    }
    return [server];
  }

  /** Before the editor starts the server: prove the interpreter has the package, add the key. */
  async resolveMcpServerDefinition(
    server: vscode.McpStdioServerDefinition,
  ): Promise<vscode.McpStdioServerDefinition | undefined> {
    const settings = this.deps.readSettings();
    const check = await checkAcceloptImport(server.command);
    if (!check.ok) {
      const interpreter = await this.interpreter(settings);
      const message = explainImportFailure(
        interpreter.command === server.command ? interpreter : { command: server.command, source: 'setting' },
        check,
      );
      this.deps.output.appendLine(`[mcp] ${message}`);
      void vscode.window.showErrorMessage(`AccelOpt MCP server: ${message}`);
      return undefined;
    }
    server.env = {
      ...server.env,
      ...mcpServerEnvironment(settings.server.agents.apiKeyEnv, await this.deps.storedApiKey()),
    };
    return server;
  }

  dispose(): void {
    this.changes.dispose();
  }

  private interpreter(settings: ClientSettings): Promise<Interpreter> {
    return resolveInterpreter({
      setting: () => settings.pythonPath,
      pythonExtension: () => this.deps.pythonExtensionInterpreter(),
    });
  }
}

/**
 * Registers the provider; undefined (and a log line) when this editor has no MCP server API.
 * Push the returned provider into the extension's subscriptions and call `refresh` when the
 * settings, the interpreter or the stored API key change.
 */
export function registerMcpServer(
  deps: McpServerDeps,
): { provider: AcceloptMcpProvider; registration: vscode.Disposable } | undefined {
  const lm = (vscode as { lm?: Partial<typeof vscode.lm> }).lm;
  if (typeof lm?.registerMcpServerDefinitionProvider !== 'function') {
    deps.output.appendLine(
      '[mcp] this editor has no MCP server definition API: configure `accelopt mcp` by hand (see the README)',
    );
    return undefined;
  }
  const provider = new AcceloptMcpProvider(deps);
  try {
    const registration = lm.registerMcpServerDefinitionProvider(MCP_PROVIDER_ID, provider);
    return { provider, registration };
  } catch (error) {
    // An editor whose agent features are off or broken must not cost us the language server.
    deps.output.appendLine(`[mcp] registering the MCP server failed: ${String(error)}`);
    provider.dispose();
    return undefined;
  }
}
