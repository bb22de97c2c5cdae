/**
 * The interpreter selected in the Python extension (ms-python.python), through its public API.
 * Both the environments API (current) and the older `settings.getExecutionDetails` are understood.
 */

import * as vscode from 'vscode';

const PYTHON_EXTENSION_ID = 'ms-python.python';

interface ResolvedEnvironment {
  executable?: { uri?: vscode.Uri };
}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined;
    resolveEnvironment(path: { path: string } | string): Promise<ResolvedEnvironment | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand?: string[] } | undefined;
  };
}

async function api(): Promise<PythonExtensionApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID);
  if (!extension) {
    return undefined;
  }
  return extension.isActive ? extension.exports : await extension.activate();
}

export async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  const python = await api();
  const environments = python?.environments;
  if (environments) {
    const active = environments.getActiveEnvironmentPath(resource);
    if (active) {
      const resolved = await environments.resolveEnvironment(active);
      return resolved?.executable?.uri?.fsPath ?? active.path;
    }
  }
  const command = python?.settings?.getExecutionDetails?.(resource)?.execCommand;
  // A multi-word command (`conda run -n env python`) cannot be spawned as one program: skip it.
  return command && command.length === 1 ? command[0] : undefined;
}

/** Calls back when the user picks another interpreter in the Python extension. */
export async function onPythonInterpreterChange(
  listener: () => void,
): Promise<vscode.Disposable | undefined> {
  const python = await api().catch(() => undefined);
  return python?.environments?.onDidChangeActiveEnvironmentPath?.(() => listener());
}
