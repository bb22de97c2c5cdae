/**
 * The LLM endpoint's API key, kept in the editor's secret storage (never in settings, never in a
 * log) and handed to the server process in the environment variable the settings name.
 */

import * as vscode from 'vscode';

const SECRET_NAME = 'accelopt.llm.apiKey';

export class ApiKeyStore {
  constructor(private readonly secrets: vscode.SecretStorage) {}

  get(): Thenable<string | undefined> {
    return this.secrets.get(SECRET_NAME);
  }

  /** Fires when the stored key is set or cleared (from this window or another one). */
  onDidChange(listener: () => void): vscode.Disposable {
    return this.secrets.onDidChange((event) => {
      if (event.key === SECRET_NAME) {
        listener();
      }
    });
  }

  /** Asks for the key with a password box; returns whether one was stored. */
  async promptAndStore(envVarName: string): Promise<boolean> {
    const key = await vscode.window.showInputBox({
      title: 'AccelOpt: API key for the LLM endpoint',
      prompt: `Stored in the editor's secret storage and given to the AccelOpt server as ${envVarName}.`,
      password: true,
      ignoreFocusOut: true,
      validateInput: (value) => (value.trim() === '' ? 'Enter a key, or press Escape to cancel.' : undefined),
    });
    if (key === undefined) {
      return false;
    }
    await this.secrets.store(SECRET_NAME, key.trim());
    return true;
  }

  clear(): Thenable<void> {
    return this.secrets.delete(SECRET_NAME);
  }
}
