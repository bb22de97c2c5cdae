import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  DEFAULT_API_KEY_ENV_VAR,
  changeEffect,
  configurationSection,
  expandPath,
  readSettings,
  serverEnvironment,
  toSearchOptions,
  type ConfigurationReader,
} from '../src/settings';

function reader(values: Record<string, unknown>): ConfigurationReader {
  return { get: <T>(key: string) => values[key] as T | undefined };
}

const paths = { workspaceFolder: '/work/project', home: '/home/me' };

describe('settings', () => {
  it('fills every server field with its default when nothing is set', () => {
    const settings = readSettings(reader({}), paths);
    assert.equal(settings.pythonPath, undefined);
    assert.equal(settings.saveAfterAccept, true);
    assert.deepEqual(settings.server, {
      backend: 'simulator',
      hardware: 'auto',
      inputSize: 'full',
      agents: {
        mode: 'offline',
        baseUrl: null,
        model: null,
        models: {},
        apiKeyEnv: DEFAULT_API_KEY_ENV_VAR,
        configFile: null,
      },
      search: {
        beamWidth: 6,
        plansPerCandidate: 12,
        samplesPerPlan: 2,
        iterations: 16,
        fixAttempts: 2,
        budgetUsd: null,
        maxEvaluations: null,
        wallTimeS: null,
      },
      memoryPath: null,
      maxCandidates: 5,
      ray: null,
      workspaceTrusted: false,
    });
  });

  it('maps the settings a user sets, turning "0 = no limit" into null and expanding paths', () => {
    const settings = readSettings(
      reader({
        pythonPath: '${workspaceFolder}/.venv/bin/python',
        backend: 'neuron',
        hardware: 'trn2',
        agents: 'llm',
        'llm.baseUrl': ' http://localhost:8000/v1 ',
        'llm.apiKeyEnvVar': 'VLLM_KEY',
        'llm.configFile': '${workspaceFolder}/accelopt.toml',
        'llm.model': 'gpt-oss-120b',
        'llm.models.planner': 'qwen3-coder',
        'llm.models.executor': '',
        inputSize: 'small',
        maxCandidates: 8,
        rayAddress: ' 10.1.2.3:6379 ',
        'search.beamWidth': 2,
        'search.iterations': 3,
        'search.fixAttempts': 0,
        'budget.maxDollars': 0,
        'budget.maxEvaluations': 40,
        'budget.maxWallTimeSeconds': 90.5,
        'memory.path': '~/lessons.sqlite',
        'editor.saveAfterAccept': false,
      }),
      paths,
    );
    assert.equal(settings.pythonPath, '/work/project/.venv/bin/python');
    assert.equal(settings.saveAfterAccept, false);
    const server = settings.server;
    assert.equal(server.backend, 'neuron');
    assert.equal(server.hardware, 'trn2');
    assert.equal(server.inputSize, 'small');
    assert.equal(server.maxCandidates, 8);
    assert.equal(server.ray, '10.1.2.3:6379');
    assert.deepEqual(server.agents, {
      mode: 'llm',
      baseUrl: 'http://localhost:8000/v1',
      model: 'gpt-oss-120b',
      models: { planner: 'qwen3-coder' },
      apiKeyEnv: 'VLLM_KEY',
      configFile: '/work/project/accelopt.toml',
    });
    assert.deepEqual(server.search, {
      beamWidth: 2,
      plansPerCandidate: 12,
      samplesPerPlan: 2,
      iterations: 3,
      fixAttempts: 0,
      budgetUsd: null,
      maxEvaluations: 40,
      wallTimeS: 90.5,
    });
    assert.equal(server.memoryPath, '/home/me/lessons.sqlite');

    assert.deepEqual(toSearchOptions(server), {
      agents: 'llm',
      beamWidth: 2,
      plansPerCandidate: 12,
      samplesPerPlan: 2,
      iterations: 3,
      maxEvaluations: 40,
      budgetUsd: null,
      wallTimeS: 90.5,
    });
  });

  it('falls back to defaults for values the server would reject', () => {
    const { server } = readSettings(
      reader({
        backend: 'gpu',
        'llm.apiKeyEnvVar': 'MY KEY=1',
        'search.beamWidth': 0,
        'search.samplesPerPlan': 1.5,
        'budget.maxEvaluations': -3,
      }),
      paths,
    );
    assert.equal(server.backend, 'simulator');
    assert.equal(server.agents.apiKeyEnv, DEFAULT_API_KEY_ENV_VAR, 'not a valid variable name');
    assert.equal(server.search.beamWidth, 6);
    assert.equal(server.search.samplesPerPlan, 2);
    assert.equal(server.search.maxEvaluations, null);
  });

  it('expands ~, ${userHome} and ${workspaceFolder}, leaving the latter alone with no folder open', () => {
    assert.equal(expandPath('~', paths), '/home/me');
    assert.equal(expandPath('${userHome}/x', paths), '/home/me/x');
    assert.equal(
      expandPath('${workspaceFolder}/m.db', { ...paths, workspaceFolder: undefined }),
      '${workspaceFolder}/m.db',
    );
    assert.equal(expandPath('/abs/~/path', paths), '/abs/~/path');
  });

  it('answers workspace/configuration for the whole section and for parts of it', () => {
    const { server } = readSettings(reader({ 'search.iterations': 5 }), paths);
    assert.equal(configurationSection(server, 'accelopt'), server);
    assert.deepEqual(configurationSection(server, 'accelopt.search'), server.search);
    assert.equal(configurationSection(server, 'accelopt.search.iterations'), 5);
    assert.equal(configurationSection(server, 'accelopt.nothing'), null);
    assert.equal(configurationSection(server, 'python'), undefined);
    assert.equal(configurationSection(server, undefined), undefined);
  });

  it('restarts the server for the interpreter and the key variable, and has it re-read the rest', () => {
    // What vscode.ConfigurationChangeEvent.affectsConfiguration answers for a changed key.
    const changed =
      (...keys: string[]) =>
      (section: string) =>
        keys.some((key) => key === section || key.startsWith(`${section}.`));
    assert.equal(changeEffect(changed('accelopt.pythonPath')), 'restart');
    assert.equal(changeEffect(changed('accelopt.llm.apiKeyEnvVar')), 'restart');
    assert.equal(changeEffect(changed('accelopt.llm.apiKeyEnvVar', 'accelopt.search.iterations')), 'restart');
    assert.equal(changeEffect(changed('accelopt.search.iterations')), 'reload');
    assert.equal(changeEffect(changed('accelopt.llm.model')), 'reload');
    assert.equal(changeEffect(changed('accelopt.backend')), 'reload');
    assert.equal(changeEffect(changed('accelopt.editor.saveAfterAccept')), 'none');
    assert.equal(changeEffect(changed('accelopt.trace.server')), 'none');
    assert.equal(changeEffect(changed('python.defaultInterpreterPath')), 'none');
  });

  it('hands a stored API key to the server in the configured variable, and only then', () => {
    const base = { PATH: '/usr/bin', OPENAI_API_KEY: 'from-shell' };
    const withKey = serverEnvironment(base, 'VLLM_KEY', 'sk-stored');
    assert.equal(withKey.VLLM_KEY, 'sk-stored');
    assert.equal(withKey.OPENAI_API_KEY, 'from-shell');
    assert.equal(withKey.PATH, '/usr/bin');
    const without = serverEnvironment(base, 'VLLM_KEY', undefined);
    assert.equal('VLLM_KEY' in without, false);
    assert.equal(
      (base as Record<string, string>).VLLM_KEY,
      undefined,
      "the editor's own environment is untouched",
    );
  });
});
