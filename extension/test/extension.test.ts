/**
 * Activation as the editor does it, with an interpreter that lacks the accelopt package: the
 * views and commands are all there, the user gets one message with the fix, and commands that
 * need the server say it is not running. (Starting a real server needs the real editor: the
 * contract test covers the server side, the code-server test the whole.)
 */

import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { ClientCommands } from '../src/clientCommands';
import { CANDIDATE_SCHEME } from '../src/diffProvider';
import { activate, deactivate } from '../src/extension';
import { MCP_PROVIDER_ID } from '../src/mcpServer';
import { EventEmitter, Uri, mock } from './support/vscode';

const REPO = resolve(__dirname, '../../..');
const PYTHON = process.env.ACCELOPT_PYTHON ?? join(REPO, '.venv/bin/python');

function secretStorage() {
  const values = new Map<string, string>();
  const changes = new EventEmitter<{ key: string }>();
  return {
    get: async (key: string) => values.get(key),
    store: async (key: string, value: string) => {
      values.set(key, value);
      changes.fire({ key });
    },
    delete: async (key: string) => {
      values.delete(key);
      changes.fire({ key });
    },
    onDidChange: changes.event,
  };
}

describe('activation without the accelopt package', () => {
  const context = { subscriptions: [] as { dispose(): unknown }[], secrets: secretStorage() };
  let python: string;

  before(async () => {
    mock.reset();
    const scratch = mkdtempSync(join(tmpdir(), 'accelopt-activate-'));
    python = join(scratch, 'python');
    writeFileSync(python, `#!/bin/sh\nexec "${PYTHON}" -S -I "$@"\n`);
    chmodSync(python, 0o755);
    mock.configuration = { pythonPath: python };
    mock.workspaceFolders = [{ uri: Uri.file(scratch) }];
    await activate(context as never);
  });

  after(async () => {
    await deactivate();
    context.subscriptions.forEach((subscription) => subscription.dispose());
  });

  it('registers the views, the candidate documents and every command', () => {
    assert.deepEqual([...mock.treeViews.keys()].sort(), ['accelopt.candidates', 'accelopt.memory']);
    assert.ok(mock.contentProviders.has(CANDIDATE_SCHEME));
    for (const id of Object.values(ClientCommands)) {
      assert.ok(mock.commandHandlers.has(id), id);
    }
  });

  it("offers the MCP server to agent mode under the manifest's provider id", () => {
    assert.ok(mock.mcpProviders.has(MCP_PROVIDER_ID));
  });

  it('tells the user, once, which interpreter lacks the package and how to fix it', () => {
    const errors = mock.messages.filter((message) => message.severity === 'error');
    assert.equal(errors.length, 1);
    assert.match(errors[0].text, /does not have the accelopt package/);
    assert.ok(errors[0].text.includes(`\`${python}\` (from the setting accelopt.pythonPath)`));
    assert.deepEqual(errors[0].actions, ['Open Settings', 'Show Log', 'Retry']);
    const log = mock.outputs.get('AccelOpt') ?? [];
    assert.ok(log.some((line) => line.includes(`Python interpreter: ${python} (setting)`)));
    assert.ok(log.some((line) => line.includes("No module named 'accelopt'")));
  });

  it('sets the server state the welcome views show', () => {
    const states = mock.executed
      .filter((call) => call.command === 'setContext' && call.args[0] === 'accelopt.serverState')
      .map((call) => call.args[1]);
    assert.deepEqual(states, ['starting', 'failed']);
  });

  it('answers Optimize with "the server is not running" instead of failing silently', async () => {
    mock.messages = [];
    await mock.commandHandlers.get(ClientCommands.optimizeKernel)?.('file:///w/silu.py', 'silu_kernel');
    assert.equal(mock.messages.length, 1);
    assert.match(mock.messages[0].text, /language server is not running/);
    assert.deepEqual(mock.messages[0].actions, ['Show Log', 'Restart Server']);
  });

  it('asks for a kernel when run outside a Python file', async () => {
    mock.messages = [];
    await mock.commandHandlers.get(ClientCommands.optimizeKernel)?.();
    assert.match(mock.messages[0].text, /open a Python file with an NKI kernel/);
  });
});
