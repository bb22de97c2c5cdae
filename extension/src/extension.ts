/**
 * AccelOpt for VS Code: wires the modules together. Nothing here decides anything.
 */

import * as os from 'node:os';

import * as vscode from 'vscode';

import { ApiKeyStore } from './apiKey';
import { CandidateStore } from './candidateStore';
import { CandidatesTreeProvider } from './candidatesTree';
import { registerCommands } from './commands';
import { CANDIDATE_SCHEME, CandidateContentProvider } from './diffProvider';
import { registerMcpServer } from './mcpServer';
import { MemoryTreeProvider } from './memoryTree';
import { onPythonInterpreterChange, pythonExtensionInterpreter } from './pythonExtension';
import { ServerConnection } from './serverConnection';
import { ServerLauncher, type ServerState } from './serverLauncher';
import { SearchTreePanels } from './searchTreePanel';
import { TimelinePanels } from './timelinePanel';
import { changeEffect, readSettings, type ClientSettings } from './settings';

let launcher: ServerLauncher | undefined;

function workspaceFolder(): string | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
}

function currentSettings(): ClientSettings {
  return readSettings(
    vscode.workspace.getConfiguration('accelopt'),
    { workspaceFolder: workspaceFolder(), home: os.homedir() },
    vscode.workspace.isTrusted,
  );
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel('AccelOpt');
  const store = new CandidateStore();
  const apiKeys = new ApiKeyStore(context.secrets);
  // The connection reaches whichever client the launcher runs now; the launcher attaches the
  // connection's handlers to each new client.
  let serverLauncher: ServerLauncher | undefined;
  const connection = new ServerConnection(() => serverLauncher?.runningClient, store);
  serverLauncher = new ServerLauncher({
    output,
    readSettings: currentSettings,
    storedApiKey: () => apiKeys.get(),
    pythonExtensionInterpreter: () =>
      pythonExtensionInterpreter(vscode.window.activeTextEditor?.document.uri),
    workspaceFolder,
    attach: (client) => connection.attach(client),
  });
  launcher = serverLauncher;

  // Agent mode's MCP servers: `accelopt mcp` on the same interpreter, with the same settings.
  const mcp = registerMcpServer({
    output,
    readSettings: currentSettings,
    storedApiKey: () => apiKeys.get(),
    pythonExtensionInterpreter: () =>
      pythonExtensionInterpreter(vscode.window.activeTextEditor?.document.uri),
    workspaceFolder,
    version: String(context.extension?.packageJSON?.version ?? '0'),
  });
  if (mcp) {
    context.subscriptions.push(mcp.provider, mcp.registration);
  }

  const timelines = new TimelinePanels(context.extensionUri, {
    timeline: (params) => connection.timeline(params),
    candidates: (uri, kernelName) => store.kernel(uri, kernelName)?.candidates.map((c) => c.info) ?? [],
  });
  const searchTrees = new SearchTreePanels(context.extensionUri, store, (searchId) =>
    connection.searchTree(searchId),
  );
  const candidates = new CandidatesTreeProvider(store);
  const memory = new MemoryTreeProvider(() => connection.memory());
  const memoryView = vscode.window.createTreeView('accelopt.memory', { treeDataProvider: memory });
  memory.onDidChangeTreeData(() => {
    memoryView.description = memory.description;
  });

  let searchesRunning = 0;
  const setServerState = (state: ServerState): void => {
    void vscode.commands.executeCommand('setContext', 'accelopt.serverState', state);
  };

  context.subscriptions.push(
    output,
    connection,
    timelines,
    searchTrees,
    vscode.window.onDidChangeVisibleTextEditors(() => timelines.decorate()),
    candidates,
    memory,
    memoryView,
    vscode.window.createTreeView('accelopt.candidates', {
      treeDataProvider: candidates,
      showCollapseAll: true,
    }),
    vscode.workspace.registerTextDocumentContentProvider(
      CANDIDATE_SCHEME,
      new CandidateContentProvider(store),
    ),
    ...registerCommands({
      store,
      connection,
      launcher: serverLauncher,
      memory,
      apiKeys,
      output,
      timelines,
      searchTrees,
      readSettings: currentSettings,
    }),
    serverLauncher.onDidChangeState((state) => {
      setServerState(state);
      if (state === 'running') {
        void memory.refresh();
      } else if (state === 'stopped' || state === 'failed') {
        store.clear(); // the server's searches are gone with it
      }
    }),
    store.onDidChange(() => {
      // When the last running search ends, it may have written lessons.
      const running = store.runningSearches().length;
      if (running === 0 && searchesRunning > 0) {
        void memory.refresh();
      }
      searchesRunning = running;
    }),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('accelopt')) {
        mcp?.provider.refresh();
      }
      const effect = changeEffect((section) => event.affectsConfiguration(section));
      if (effect === 'restart') {
        void restartAfterSettingsChange(serverLauncher, store);
      } else if (effect === 'reload') {
        void serverLauncher.reloadConfiguration();
      }
    }),
    apiKeys.onDidChange(() => {
      mcp?.provider.refresh();
      void restartAfterSettingsChange(serverLauncher, store);
    }),
    // The server takes trust only from its initializationOptions or from this notification.
    vscode.workspace.onDidGrantWorkspaceTrust(
      () => void serverLauncher.runningClient?.sendNotification('accelopt/workspaceTrusted', {}),
    ),
  );
  const interpreterWatch = await onPythonInterpreterChange(() => {
    if (!currentSettings().pythonPath) {
      mcp?.provider.refresh();
      void restartAfterSettingsChange(serverLauncher, store);
    }
  });
  if (interpreterWatch) {
    context.subscriptions.push(interpreterWatch);
  }

  await serverLauncher.start();
}

/** Restarts at once, unless that would kill running searches: then the user decides. */
async function restartAfterSettingsChange(
  serverLauncher: ServerLauncher,
  store: CandidateStore,
): Promise<void> {
  const running = store.runningSearches().length;
  if (running > 0) {
    const choice = await vscode.window.showWarningMessage(
      `AccelOpt settings changed. Restarting the server to apply them stops ${running === 1 ? 'the running search' : `${running} running searches`}.`,
      'Restart Now',
      'Later',
    );
    if (choice !== 'Restart Now') {
      return;
    }
  }
  await serverLauncher.restart();
}

export async function deactivate(): Promise<void> {
  await launcher?.dispose();
  launcher = undefined;
}
