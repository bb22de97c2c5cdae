/**
 * The manifest (package.json) and the code must agree: a command a menu names but nobody
 * registers, or a setting the code reads but the Settings UI does not show, fails here rather
 * than silently in the editor.
 */

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';

import { ClientCommands } from '../src/clientCommands';
import { readSettings } from '../src/settings';

const ROOT = resolve(__dirname, '../../..');
const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
const contributes = manifest.contributes;
const declaredCommands = new Set<string>(contributes.commands.map((c: { command: string }) => c.command));
const properties = Object.keys(contributes.configuration.properties);
/** Commands of the editor itself that the manifest may link to. */
const BUILT_IN = new Set(['workbench.action.openSettings']);

describe('package.json', () => {
  it('declares every command the client registers, each with a title under the AccelOpt category', () => {
    for (const id of Object.values(ClientCommands)) {
      assert.ok(declaredCommands.has(id), `${id} is registered but not declared`);
    }
    for (const command of contributes.commands) {
      assert.equal(command.category, 'AccelOpt', command.command);
      assert.ok(command.title, command.command);
      assert.ok(
        (Object.values(ClientCommands) as string[]).includes(command.command),
        `${command.command} is declared but never registered`,
      );
    }
  });

  it('only links menus and welcome views to declared or built-in commands', () => {
    const used: string[] = [];
    for (const entries of Object.values(contributes.menus) as { command: string }[][]) {
      used.push(...entries.map((entry) => entry.command));
    }
    for (const welcome of contributes.viewsWelcome) {
      for (const match of welcome.contents.matchAll(/\(command:([\w.]+)/g)) {
        used.push(match[1]);
      }
    }
    for (const command of used) {
      assert.ok(declaredCommands.has(command) || BUILT_IN.has(command), `${command} is not declared`);
    }
  });

  it('declares every setting the client reads, and reads every setting it declares', () => {
    const read = new Set<string>();
    readSettings(
      { get: (key: string) => (read.add(`accelopt.${key}`), undefined) },
      { workspaceFolder: undefined, home: '/h' },
    );
    read.add('accelopt.trace.server'); // read by vscode-languageclient itself, from the client id "accelopt"
    assert.deepEqual([...read].sort(), [...properties].sort());
    for (const key of properties) {
      const property = contributes.configuration.properties[key];
      assert.ok(property.description || property.markdownDescription, `${key} has no description`);
    }
  });

  it('puts the views in the AccelOpt container, with an icon that exists, and welcome text for both', () => {
    const [container] = contributes.viewsContainers.activitybar;
    assert.equal(container.id, 'accelopt');
    assert.ok(existsSync(join(ROOT, container.icon)), container.icon);
    const views = contributes.views.accelopt.map((view: { id: string }) => view.id);
    assert.deepEqual(views, ['accelopt.candidates', 'accelopt.memory']);
    const welcomed = new Set(contributes.viewsWelcome.map((welcome: { view: string }) => welcome.view));
    assert.deepEqual([...welcomed].sort(), [...views].sort());
  });

  it('activates on Python files, runs the bundle, and targets the VS Code API it is typed against', () => {
    assert.ok(manifest.activationEvents.includes('onLanguage:python'));
    // it runs the workspace's kernels and the interpreter its settings name: trusted folders only
    assert.equal(manifest.capabilities.untrustedWorkspaces.supported, false);
    assert.equal(manifest.main, './dist/extension.js');
    const bundler = readFileSync(join(ROOT, 'extension/esbuild.mjs'), 'utf8');
    assert.match(bundler, /outfile: 'dist\/extension\.js'/);
    const engine = /^\^(\d+\.\d+)/.exec(manifest.engines.vscode)?.[1];
    assert.equal(manifest.devDependencies['@types/vscode'].replace(/\.\d+$/, ''), engine);
    assert.ok(manifest.scripts.package.includes('vsce package'));
    assert.ok(manifest.scripts.build.includes('esbuild'));
  });
});
