/**
 * The client's commands, wired to the modules that do the work. Every handler reports failures
 * to the user instead of throwing into the editor's generic "command failed" toast.
 */

import * as vscode from 'vscode';

import type { ApiKeyStore } from './apiKey';
import { acceptCandidate, acceptHunks, rejectCandidate, resolveCandidate } from './candidateActions';
import type { CandidateStore, KernelGroup } from './candidateStore';
import type { CandidatesNode } from './candidatesTree';
import { ClientCommands } from './clientCommands';
import { showCandidateDiff } from './diffProvider';
import { measuredOn } from './format';
import { findKernels, kernelAtLine } from './kernelPicker';
import type { MemoryTreeProvider } from './memoryTree';
import {
  SHOW_CANDIDATES,
  SHOW_DIFF_OF_BEST,
  countCandidates,
  describeOutcome,
  outcomeActions,
  runOptimization,
  sameUri,
  type OptimizeTarget,
} from './optimize';
import type { ServerConnection } from './serverConnection';
import type { ServerLauncher } from './serverLauncher';
import { toSearchOptions, type ClientSettings } from './settings';
import type { SearchTreePanels } from './searchTreePanel';
import type { TimelinePanels } from './timelinePanel';

export interface CommandDeps {
  readonly store: CandidateStore;
  readonly connection: ServerConnection;
  readonly launcher: ServerLauncher;
  readonly memory: MemoryTreeProvider;
  readonly apiKeys: ApiKeyStore;
  readonly output: vscode.OutputChannel;
  readonly timelines: TimelinePanels;
  readonly searchTrees: SearchTreePanels;
  readSettings(): ClientSettings;
}

export function registerCommands(deps: CommandDeps): vscode.Disposable[] {
  const { store, connection } = deps;
  const runServerCommand = (command: string, args: unknown[]): Promise<unknown> =>
    connection.executeCommand(command, args);
  const register = (id: string, handler: (...args: unknown[]) => unknown): vscode.Disposable =>
    vscode.commands.registerCommand(id, async (...args: unknown[]) => {
      try {
        return await handler(...args);
      } catch (error) {
        deps.output.appendLine(
          `[client] ${id} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
        );
        void vscode.window.showErrorMessage(
          `AccelOpt: ${error instanceof Error ? error.message : String(error)}`,
        );
        return undefined;
      }
    });

  return [
    register(ClientCommands.optimizeKernel, (...args) => optimizeKernel(deps, args)),
    register(ClientCommands.showSearchTree, async (...args) => {
      const node = args[0] as CandidatesNode | undefined;
      const group =
        node?.kind === 'kernel'
          ? (node as { group: KernelGroup }).group
          : await chooseTarget(args).then((t) => t && store.kernel(t.uri, t.kernelName));
      if (!group) {
        void vscode.window.showInformationMessage(
          'AccelOpt: no search on this kernel yet. Optimize it first; its search view then follows the search as it runs.',
        );
        return;
      }
      await deps.searchTrees.show(group.searchId, group.kernelName);
    }),
    register(ClientCommands.showTimeline, async (...args) => {
      const target = await chooseTarget(args);
      if (!target) {
        return;
      }
      await deps.launcher.settled();
      if (!deps.connection.running) {
        throw new Error('the AccelOpt server is not running; see AccelOpt: Show Log');
      }
      await deps.timelines.show(vscode.Uri.parse(target.uri), target.kernelName);
    }),
    register(ClientCommands.stopSearch, async (node) => {
      const group =
        (node as CandidatesNode | undefined)?.kind === 'kernel'
          ? (node as { group: KernelGroup }).group
          : undefined;
      if (group) {
        await connection.cancel(group.searchId);
      }
    }),
    register(ClientCommands.showDiff, async (...args) => {
      const candidate = resolveCandidate(store, args);
      if (candidate) {
        await showCandidateDiff(candidate);
      }
    }),
    register(ClientCommands.accept, async (...args) => {
      const candidate = resolveCandidate(store, args);
      if (candidate) {
        const outcome = await acceptCandidate(
          candidate,
          runServerCommand,
          deps.readSettings().saveAfterAccept,
        );
        if (outcome.applied) {
          store.markApplied({ searchId: candidate.searchId, candidateId: candidate.info.id });
        }
      }
    }),
    register(ClientCommands.acceptHunks, async (...args) => {
      const candidate = resolveCandidate(store, args);
      if (candidate) {
        await acceptHunks(candidate, runServerCommand, deps.readSettings().saveAfterAccept);
      }
    }),
    register(ClientCommands.reject, async (...args) => {
      const candidate = resolveCandidate(store, args);
      if (candidate) {
        await rejectCandidate(candidate, store, runServerCommand);
      }
    }),
    register(ClientCommands.refreshMemory, () => deps.memory.refresh()),
    register(ClientCommands.restartServer, async () => {
      await deps.launcher.restart();
    }),
    register(ClientCommands.showLog, () => deps.output.show()),
    register(ClientCommands.setApiKey, async () => {
      const name = deps.readSettings().server.agents.apiKeyEnv;
      if (await deps.apiKeys.promptAndStore(name)) {
        void vscode.window.showInformationMessage(
          `AccelOpt: API key stored; the server now receives it as ${name}.`,
        );
      }
    }),
    register(ClientCommands.clearApiKey, async () => {
      await deps.apiKeys.clear();
      void vscode.window.showInformationMessage('AccelOpt: stored API key removed.');
    }),
  ];
}

/** The kernel to optimize: from the arguments (code lens, tree), else around the cursor. */
async function chooseTarget(args: readonly unknown[]): Promise<OptimizeTarget | undefined> {
  const [first, second] = args;
  if ((typeof first === 'string' || first instanceof vscode.Uri) && typeof second === 'string') {
    return { uri: first.toString(), kernelName: second };
  }
  const node = first as CandidatesNode | undefined;
  if (node?.kind === 'kernel') {
    return { uri: node.group.uri, kernelName: node.group.kernelName };
  }
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.languageId !== 'python') {
    void vscode.window.showInformationMessage(
      'AccelOpt: open a Python file with an NKI kernel (a function decorated with @nki.jit) and run this command again.',
    );
    return undefined;
  }
  const kernels = findKernels(editor.document.getText());
  const uri = editor.document.uri.toString();
  if (kernels.length === 0) {
    void vscode.window.showInformationMessage(
      `AccelOpt: no NKI kernel in ${editor.document.fileName}. A kernel is a function decorated with @nki.jit.`,
    );
    return undefined;
  }
  const here =
    kernelAtLine(kernels, editor.selection.active.line) ?? (kernels.length === 1 ? kernels[0] : undefined);
  if (here) {
    return { uri, kernelName: here.name };
  }
  const picked = await vscode.window.showQuickPick(
    kernels.map((kernel) => ({ label: kernel.name, description: `line ${kernel.startLine + 1}` })),
    { title: 'AccelOpt: which kernel should be optimized?' },
  );
  return picked && { uri, kernelName: picked.label };
}

async function optimizeKernel(deps: CommandDeps, args: readonly unknown[]): Promise<void> {
  const target = await chooseTarget(args);
  if (!target) {
    return;
  }
  await deps.launcher.settled(); // a server (re)starting is only seconds away
  if (!deps.connection.running) {
    const choice = await vscode.window.showErrorMessage(
      'AccelOpt: the language server is not running, so nothing can be optimized.',
      'Show Log',
      'Restart Server',
    );
    if (choice === 'Show Log') {
      deps.output.show();
    } else if (choice === 'Restart Server') {
      await deps.launcher.restart();
    }
    return;
  }
  const running = deps.store
    .runningSearches()
    .find((group) => group.kernelName === target.kernelName && sameUri(group.uri, target.uri));
  if (running) {
    const choice = await vscode.window.showWarningMessage(
      `AccelOpt: ${target.kernelName} is already being optimized.`,
      'Stop It and Start Again',
      'Keep It Running',
    );
    if (choice !== 'Stop It and Start Again') {
      return;
    }
    await deps.connection.cancel(running.searchId);
  }
  // The server optimizes the text as it is in the editor, saved or not.
  const settings = deps.readSettings();
  const outcome = await runOptimization(target, toSearchOptions(settings.server), deps.connection, {
    // 'auto': the server picks the kernel's target; its candidates say which
    measuredOn: measuredOn(
      settings.server.backend,
      settings.server.hardware === 'auto' ? '' : settings.server.hardware,
    ),
    log: (line) => deps.output.appendLine(`[client] ${line}`),
  });
  void deps.memory.refresh();
  const group = deps.store.kernel(target.uri, target.kernelName);
  const best = group?.candidates.find((candidate) => candidate.info.status === 'ok');
  const message = describeOutcome(outcome, target, countCandidates(group?.candidates ?? []), best?.info);
  const actions = outcomeActions(best?.info);
  const show =
    message.severity === 'error'
      ? vscode.window.showErrorMessage
      : message.severity === 'warning'
        ? vscode.window.showWarningMessage
        : vscode.window.showInformationMessage;
  // Not awaited: the command is done when the search is; the message may stay up for a while.
  void show(message.text, ...actions).then(async (choice) => {
    if (choice === SHOW_DIFF_OF_BEST && best) {
      await showCandidateDiff(best);
    } else if (choice === SHOW_CANDIDATES) {
      await vscode.commands.executeCommand('accelopt.candidates.focus');
    }
  });
}
