/**
 * The MCP server definition agent mode gets: `python -m accelopt mcp` with the editor's
 * settings, refused with the fix when the interpreter lacks the package, and (with the real
 * interpreter) a server that answers MCP over stdio with AccelOpt's tools.
 */

import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, it } from 'node:test';

import * as vscodeMock from './support/vscode';
import {
  AcceloptMcpProvider,
  MCP_PROVIDER_ID,
  MCP_SERVER_LABEL,
  mcpServerArgs,
  registerMcpServer,
  type McpServerDeps,
} from '../src/mcpServer';
import { readSettings, type ClientSettings } from '../src/settings';
import { McpStdioServerDefinition, mock } from './support/vscode';

const REPO = resolve(__dirname, '../../..');
const PYTHON = process.env.ACCELOPT_PYTHON ?? join(REPO, '.venv/bin/python');
const PATHS = { workspaceFolder: REPO, home: '/home/u' };

function settings(values: Record<string, unknown> = {}): ClientSettings {
  return readSettings({ get: <T>(key: string) => values[key] as T | undefined }, PATHS);
}

function deps(values: Record<string, unknown>, storedKey?: string): McpServerDeps {
  return {
    output: vscodeMock.window.createOutputChannel('AccelOpt MCP test') as never,
    readSettings: () => settings(values),
    storedApiKey: async () => storedKey,
    pythonExtensionInterpreter: async () => undefined,
    workspaceFolder: () => REPO,
    version: '0.1.0',
  };
}

describe('the MCP server definition', () => {
  it('is contributed in package.json under the id the code registers', () => {
    const manifest = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
    const providers = manifest.contributes.mcpServerDefinitionProviders as { id: string; label: string }[];
    assert.deepEqual(
      providers.map((p) => p.id),
      [MCP_PROVIDER_ID],
    );
    assert.ok(providers[0].label);
    // registerMcpServerDefinitionProvider is API from VS Code 1.101 on
    const [major, minor] = /\^(\d+)\.(\d+)/.exec(manifest.engines.vscode)!.slice(1).map(Number);
    assert.ok(major > 1 || minor >= 101, manifest.engines.vscode);
  });

  it('passes the editor settings as flags of `accelopt mcp`', () => {
    // the default hardware, 'auto', is no flag: each kernel's API generation chooses
    assert.deepEqual(mcpServerArgs(settings()), [
      '-m',
      'accelopt',
      'mcp',
      '--backend',
      'simulator',
      '--size',
      'full',
      '--agents',
      'offline',
    ]);
    const llm = mcpServerArgs(
      settings({
        hardware: 'trn2',
        inputSize: 'small',
        agents: 'llm',
        'llm.baseUrl': 'http://localhost:8000/v1',
        'llm.model': 'qwen',
        'llm.apiKeyEnvVar': 'MY_KEY',
        'memory.path': '${workspaceFolder}/.accelopt/memory.sqlite',
        'llm.configFile': '~/accelopt.toml',
        rayAddress: 'local',
      }),
    );
    assert.deepEqual(llm.slice(3), [
      '--backend',
      'simulator',
      '--hardware',
      'trn2',
      '--size',
      'small',
      '--agents',
      'llm',
      '--config',
      '/home/u/accelopt.toml',
      '--memory',
      `${REPO}/.accelopt/memory.sqlite`,
      '--ray',
      'local',
      '--llm-base-url',
      'http://localhost:8000/v1',
      '--llm-model',
      'qwen',
      '--llm-api-key-env',
      'MY_KEY',
    ]);
  });

  it('lists one stdio server on the configured interpreter, the key only once it is started', async () => {
    const provider = new AcceloptMcpProvider(
      deps({ pythonPath: PYTHON, 'llm.apiKeyEnvVar': 'MY_KEY' }, 'sk-test'),
    );
    const [server] = await provider.provideMcpServerDefinitions();
    assert.ok(server instanceof McpStdioServerDefinition);
    assert.equal(server.label, MCP_SERVER_LABEL);
    assert.equal(server.command, PYTHON);
    assert.equal(server.cwd?.fsPath, REPO);
    assert.equal(server.env.MY_KEY, undefined);
    const resolved = await provider.resolveMcpServerDefinition(server);
    assert.equal(resolved?.env.MY_KEY, 'sk-test');
    provider.dispose();
  });

  it('refuses to start on an interpreter without the package, saying which and why', async () => {
    mock.messages = [];
    const scratch = mkdtempSync(join(tmpdir(), 'accelopt-mcp-'));
    const bare = join(scratch, 'python');
    writeFileSync(bare, `#!/bin/sh\nexec "${PYTHON}" -S -I "$@"\n`);
    chmodSync(bare, 0o755);
    const provider = new AcceloptMcpProvider(deps({ pythonPath: bare }));
    const [server] = await provider.provideMcpServerDefinitions();
    assert.equal(await provider.resolveMcpServerDefinition(server), undefined);
    const [error] = mock.messages.filter((m) => m.severity === 'error');
    assert.match(error.text, /AccelOpt MCP server: .*does not have the accelopt package/);
    assert.ok(error.text.includes(bare));
  });

  it('registers nothing in an editor without the MCP API, or one that refuses it', () => {
    const module = vscodeMock as unknown as { lm: unknown };
    const saved = module.lm;
    module.lm = undefined;
    try {
      assert.equal(registerMcpServer(deps({})), undefined);
    } finally {
      module.lm = saved;
    }
    module.lm = {
      registerMcpServerDefinitionProvider: () => {
        throw new Error('chat is disabled');
      },
    };
    try {
      assert.equal(registerMcpServer(deps({})), undefined);
    } finally {
      module.lm = saved;
    }
    const registered = registerMcpServer(deps({}));
    assert.ok(registered && mock.mcpProviders.get(MCP_PROVIDER_ID) === registered.provider);
    registered.registration.dispose();
    registered.provider.dispose();
  });

  it('starts a server that answers MCP with the AccelOpt tools', async () => {
    const provider = new AcceloptMcpProvider(deps({ pythonPath: PYTHON, inputSize: 'small' }));
    const [listed] = await provider.provideMcpServerDefinitions();
    const server = (await provider.resolveMcpServerDefinition(listed))!;
    const env = {
      ...process.env,
      ...(server.env as Record<string, string>),
      ACCELOPT_MEMORY: join(mkdtempSync(join(tmpdir(), 'accelopt-mcp-mem-')), 'm.sqlite'),
    };
    const child = spawn(server.command, server.args, {
      cwd: server.cwd?.fsPath,
      env,
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const replies = new Map<number, (value: Record<string, unknown>) => void>();
    createInterface({ input: child.stdout }).on('line', (line) => {
      const message = JSON.parse(line) as { id?: number; result?: Record<string, unknown> };
      if (message.id !== undefined) {
        replies.get(message.id)?.(message.result ?? { error: message });
      }
    });
    let nextId = 1;
    const request = (method: string, params: unknown): Promise<Record<string, unknown>> =>
      new Promise((done) => {
        const id = nextId++;
        replies.set(id, done);
        child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
      });
    try {
      const init = await request('initialize', {
        protocolVersion: '2025-06-18',
        capabilities: {},
        clientInfo: { name: 'accelopt-extension-test', version: '0' },
      });
      assert.equal((init.serverInfo as { name: string }).name, 'accelopt');
      child.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
      const tools = (await request('tools/list', {})).tools as { name: string }[];
      assert.ok(tools.some((tool) => tool.name === 'optimize_kernel'));
      const targets = await request('tools/call', { name: 'list_targets', arguments: {} });
      const structured = targets.structuredContent as { targets: { name: string }[] };
      assert.deepEqual(structured.targets.map((t) => t.name).slice(0, 2), ['trn1', 'trn2']);
    } finally {
      child.stdin.end();
      await new Promise((done) => child.once('exit', done));
    }
  });
});
