import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { Middleware } from 'vscode-languageclient/node';

import { ClientCommands } from '../src/clientCommands';
import { buildClientOptions } from '../src/clientOptions';
import { readSettings, type ClientSettings } from '../src/settings';

function settingsWith(values: Record<string, unknown>): ClientSettings {
  return readSettings(
    { get: <T>(key: string) => values[key] as T | undefined },
    { workspaceFolder: '/w', home: '/h' },
  );
}

const output = { name: 'AccelOpt' } as never;
const noToken = {} as never;

describe('language client options', () => {
  it('sends Python documents to the server and the settings as initializationOptions', () => {
    const settings = settingsWith({ 'search.iterations': 3, hardware: 'trn2' });
    const options = buildClientOptions(settings, output, () => settings.server);
    assert.deepEqual(options.documentSelector, [
      { scheme: 'file', language: 'python' },
      { scheme: 'untitled', language: 'python' },
    ]);
    assert.equal(options.initializationOptions, settings.server);
    assert.equal(options.outputChannel, output);
  });

  it('answers workspace/configuration for "accelopt" with the settings as they are now, other sections as the editor does', async () => {
    let current = settingsWith({ 'search.iterations': 3 });
    const middleware = buildClientOptions(current, output, () => current.server).middleware as Middleware;
    current = settingsWith({ 'search.iterations': 9 }); // the user changed a setting since the start
    const editorAnswers = [{ raw: 'accelopt as VS Code has it' }, { tabSize: 4 }, 5];
    const answers = await middleware.workspace!.configuration!(
      { items: [{ section: 'accelopt' }, { section: 'editor' }, { section: 'accelopt.search.iterations' }] },
      noToken,
      async () => editorAnswers,
    );
    assert.deepEqual(answers, [current.server, { tabSize: 4 }, 9]);

    const failure = new Error('no workspace');
    assert.equal(
      await middleware.workspace!.configuration!({ items: [] }, noToken, async () => failure as never),
      failure,
    );
  });

  it("routes the server's Optimize lens and Apply action through the client's commands", async () => {
    const middleware = buildClientOptions(settingsWith({}), output, () => settingsWith({}).server)
      .middleware as Middleware;
    const lenses = await middleware.provideCodeLenses!(
      {} as never,
      noToken,
      async () =>
        [
          {
            range: {},
            command: { title: 'Optimize', command: 'accelopt.optimize', arguments: ['file:///k.py', 'k'] },
          },
        ] as never,
    );
    assert.equal(
      (lenses as { command: { command: string } }[])[0].command.command,
      ClientCommands.optimizeKernel,
    );

    const resolved = await middleware.resolveCodeAction!(
      { title: 'Apply candidate 1' } as never,
      noToken,
      async (action) =>
        ({
          ...action,
          command: { title: 'Apply', command: 'accelopt.applyCandidate', arguments: ['s', 'c'] },
        }) as never,
    );
    assert.deepEqual((resolved as { command: unknown }).command, {
      title: 'Apply',
      command: ClientCommands.accept,
      arguments: ['s', 'c'],
    });
  });
});
