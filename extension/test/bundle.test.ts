/**
 * The bundle that ships in the .vsix (dist/extension.js, built by esbuild before the tests) loads
 * with nothing but `vscode` from outside, and exports the entry points the editor calls.
 */

import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';

const BUNDLE = join(resolve(__dirname, '../../..'), 'dist', 'extension.js');

describe('the bundle', () => {
  it('exists, needs only vscode at run time, and exports activate and deactivate', () => {
    assert.ok(existsSync(BUNDLE), `${BUNDLE} is missing: run \`npm run build\` first`);
    const source = readFileSync(BUNDLE, 'utf8');
    const external = [...source.matchAll(/require\("([^"./][^"]*)"\)/g)].map((m) => m[1]);
    const notBuiltIn = external.filter(
      (name) =>
        name !== 'vscode' &&
        !name.startsWith('node:') &&
        !require('node:module').builtinModules.includes(name),
    );
    assert.deepEqual([...new Set(notBuiltIn)], [], 'the bundle must not require packages from node_modules');
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const extension = require(BUNDLE) as { activate?: unknown; deactivate?: unknown };
    assert.equal(typeof extension.activate, 'function');
    assert.equal(typeof extension.deactivate, 'function');
  });
});
