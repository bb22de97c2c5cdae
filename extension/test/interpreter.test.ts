import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, writeFileSync, chmodSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, it } from 'node:test';

import {
  DEFAULT_PYTHON,
  checkAcceloptImport,
  explainImportFailure,
  resolveInterpreter,
} from '../src/interpreter';

const REPO = resolve(__dirname, '../../..');
/** The project's interpreter, which has accelopt installed (as the test script guarantees). */
const PYTHON = process.env.ACCELOPT_PYTHON ?? join(REPO, '.venv/bin/python');

describe('interpreter discovery', () => {
  it('prefers the explicit setting, then the Python extension, then python3', async () => {
    const fromAll = await resolveInterpreter({
      setting: () => '/opt/py/bin/python',
      pythonExtension: async () => '/env/bin/python',
    });
    assert.deepEqual(fromAll, { command: '/opt/py/bin/python', source: 'setting' });
    const fromExtension = await resolveInterpreter({
      setting: () => undefined,
      pythonExtension: async () => '/env/bin/python',
    });
    assert.deepEqual(fromExtension, { command: '/env/bin/python', source: 'python-extension' });
    const fallback = await resolveInterpreter({
      setting: () => undefined,
      pythonExtension: async () => undefined,
    });
    assert.deepEqual(fallback, { command: DEFAULT_PYTHON, source: 'default' });
  });

  it("falls back to python3 when the Python extension's API throws", async () => {
    const result = await resolveInterpreter({
      setting: () => undefined,
      pythonExtension: () => Promise.reject(new Error('extension host hiccup')),
    });
    assert.equal(result.source, 'default');
  });
});

describe('checking that the interpreter can import accelopt (real subprocesses)', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'accelopt-interp-'));

  function script(name: string, body: string): string {
    const path = join(scratch, name);
    writeFileSync(path, `#!/bin/sh\n${body}\n`);
    chmodSync(path, 0o755);
    return path;
  }

  it('finds the package in the project interpreter and says where it lives', async () => {
    assert.ok(existsSync(PYTHON), `no interpreter at ${PYTHON}`);
    const check = await checkAcceloptImport(PYTHON);
    assert.equal(check.ok, true, JSON.stringify(check));
    assert.ok(check.ok && check.location.endsWith('accelopt'));
  });

  it('reports an interpreter that does not exist, with the setting to fix', async () => {
    const check = await checkAcceloptImport(join(scratch, 'no-such-python'));
    assert.equal(check.ok, false);
    assert.ok(!check.ok && check.problem === 'no-interpreter');
    const text = explainImportFailure(
      { command: '/nope/python', source: 'setting' },
      check as Exclude<typeof check, { ok: true }>,
    );
    assert.match(text, /no Python interpreter at `\/nope\/python` \(from the setting accelopt\.pythonPath\)/);
    assert.match(text, /Set accelopt\.pythonPath/);
  });

  it('reports an interpreter without the package, with the pip command that installs it', async () => {
    // The same Python with site-packages switched off (-S) cannot see the installed package.
    const bare = script('python-without-accelopt', `exec "${PYTHON}" -S -I "$@"`);
    const check = await checkAcceloptImport(bare);
    assert.ok(!check.ok && check.problem === 'no-package', JSON.stringify(check));
    const text = explainImportFailure({ command: bare, source: 'python-extension' }, check);
    assert.match(text, /selected in the Python extension/);
    assert.ok(text.includes(`\`${bare} -m pip install -e <your AccelOpt checkout>\``));
  });

  it('tells a broken install apart from a missing one', async () => {
    const fakeRoot = join(scratch, 'broken');
    mkdirSync(join(fakeRoot, 'accelopt'), { recursive: true });
    writeFileSync(join(fakeRoot, 'accelopt', '__init__.py'), 'raise ImportError("half-installed")\n');
    const broken = script('python-broken-accelopt', `PYTHONPATH="${fakeRoot}" exec "${PYTHON}" -S "$@"`);
    const check = await checkAcceloptImport(broken);
    assert.ok(!check.ok && check.problem === 'broken', JSON.stringify(check));
    assert.match(check.detail, /half-installed/);
  });
});
