/**
 * Settings (section `accelopt`) -> what the server and the launcher need.
 *
 * The server receives one object, `ServerConfiguration` (the server's `ServerSettings`), both as
 * `initializationOptions` and as the answer to `workspace/configuration` for section "accelopt"
 * (the client's middleware substitutes it), so the two paths never disagree. The settings UI is
 * laid out for people (`accelopt.llm.*`, `accelopt.budget.*`); this module maps it to the wire.
 * "0 means no limit" in the settings UI becomes `null` on the wire. The API key is never a setting: only the *name* of the environment variable
 * that carries it (see apiKey.ts).
 *
 * No `vscode` import: the reader is any object with `get`, which vscode.WorkspaceConfiguration is.
 */

import type { SearchOptions } from './protocol';

export interface ConfigurationReader {
  get<T>(section: string): T | undefined;
}

export type Backend = 'simulator' | 'neuron';
/** 'auto': the kernel's own target (trn1 for legacy neuronxcc.nki kernels, trn2 for nki.*). */
export type Hardware = 'auto' | 'trn1' | 'trn2' | 'trn3';
export type AgentsKind = 'offline' | 'llm';
export type InputSize = 'full' | 'small';
export type AgentRole = 'planner' | 'executor' | 'fixer' | 'summarizer';
export const AGENT_ROLES: readonly AgentRole[] = ['planner', 'executor', 'fixer', 'summarizer'];

/**
 * The wire form of the server's settings: server/accelopt/lsp/config.py `ServerSettings`, field
 * for field in camelCase. `null` leaves the server's default in place.
 */
export interface ServerConfiguration {
  backend: Backend;
  hardware: Hardware;
  inputSize: InputSize;
  agents: {
    mode: AgentsKind;
    baseUrl: string | null;
    /** The model every role uses unless `models` names another for it. */
    model: string | null;
    /** Only the roles the user set: the server's `models` holds strings, never null. */
    models: Partial<Record<AgentRole, string>>;
    apiKeyEnv: string;
    /** The CLI's configuration file, whose [llm] (and [search]) the server reads too. */
    configFile: string | null;
  };
  search: {
    beamWidth: number;
    plansPerCandidate: number;
    samplesPerPlan: number;
    iterations: number;
    fixAttempts: number;
    budgetUsd: number | null;
    maxEvaluations: number | null;
    wallTimeS: number | null;
  };
  memoryPath: string | null;
  maxCandidates: number;
  /** Evaluations as Ray tasks: 'local' or a cluster address; null evaluates locally. */
  ray: string | null;
  /**
   * `vscode.workspace.isTrusted`: the server runs kernels only in a trusted workspace (see
   * server/accelopt/lsp/trust.py). The extension is disabled in Restricted Mode anyway
   * (`capabilities.untrustedWorkspaces.supported: false`); this makes the server's gate explicit.
   */
  workspaceTrusted: boolean;
}

export interface ClientSettings {
  /** Explicit interpreter, already expanded; undefined when the setting is empty. */
  pythonPath: string | undefined;
  saveAfterAccept: boolean;
  server: ServerConfiguration;
}

export const DEFAULT_API_KEY_ENV_VAR = 'OPENAI_API_KEY';

/**
 * Setting keys (below `accelopt.`) that shape the server process itself: the interpreter, and the
 * environment that carries the API key. Changing one needs a new process.
 */
const PROCESS_KEYS = ['pythonPath', 'llm.apiKeyEnvVar'];

/**
 * Setting keys the running server re-reads (workspace/configuration) when told they changed.
 * The rest (`editor.*`, `trace.*`) only the client reads.
 */
const SERVER_KEYS = [
  'backend',
  'hardware',
  'inputSize',
  'agents',
  'llm',
  'search',
  'budget',
  'memory',
  'maxCandidates',
];

export interface PathContext {
  workspaceFolder: string | undefined;
  home: string;
}

function oneOf<T extends string>(value: unknown, allowed: readonly T[], fallback: T): T {
  return allowed.includes(value as T) ? (value as T) : fallback;
}

function positiveInt(value: unknown, fallback: number, minimum = 1): number {
  return typeof value === 'number' && Number.isInteger(value) && value >= minimum ? value : fallback;
}

/** Budgets: a positive number is a limit; 0, empty or nonsense means no limit (null). */
function limit(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : null;
}

function text(value: unknown): string | null {
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : null;
}

/** Expands `${workspaceFolder}`, `${userHome}` and a leading `~` in a path setting. */
export function expandPath(value: string, context: PathContext): string {
  let result = value.trim();
  if (result === '~' || result.startsWith('~/')) {
    result = context.home + result.slice(1);
  }
  result = result.replace(/\$\{userHome\}/g, context.home);
  if (context.workspaceFolder !== undefined) {
    result = result.replace(/\$\{workspaceFolder\}/g, context.workspaceFolder);
  }
  return result;
}

/** A valid environment variable name, or the default one when the setting holds something else. */
export function apiKeyEnvVarName(value: unknown): string {
  const name = text(value);
  return name !== null && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) ? name : DEFAULT_API_KEY_ENV_VAR;
}

export function readSettings(
  config: ConfigurationReader,
  paths: PathContext,
  workspaceTrusted = false,
): ClientSettings {
  const pythonPath = text(config.get('pythonPath'));
  const memoryPath = text(config.get('memory.path'));
  const configFile = text(config.get('llm.configFile'));
  const models: Partial<Record<AgentRole, string>> = {};
  for (const role of AGENT_ROLES) {
    const model = text(config.get(`llm.models.${role}`));
    if (model !== null) {
      models[role] = model;
    }
  }
  return {
    pythonPath: pythonPath === null ? undefined : expandPath(pythonPath, paths),
    saveAfterAccept: config.get<boolean>('editor.saveAfterAccept') !== false,
    server: {
      backend: oneOf(config.get('backend'), ['simulator', 'neuron'] as const, 'simulator'),
      hardware: oneOf(config.get('hardware'), ['auto', 'trn1', 'trn2', 'trn3'] as const, 'auto'),
      inputSize: oneOf(config.get('inputSize'), ['full', 'small'] as const, 'full'),
      agents: {
        mode: oneOf(config.get('agents'), ['offline', 'llm'] as const, 'offline'),
        baseUrl: text(config.get('llm.baseUrl')),
        model: text(config.get('llm.model')),
        models,
        apiKeyEnv: apiKeyEnvVarName(config.get('llm.apiKeyEnvVar')),
        configFile: configFile === null ? null : expandPath(configFile, paths),
      },
      search: {
        beamWidth: positiveInt(config.get('search.beamWidth'), 6),
        plansPerCandidate: positiveInt(config.get('search.plansPerCandidate'), 12),
        samplesPerPlan: positiveInt(config.get('search.samplesPerPlan'), 2),
        iterations: positiveInt(config.get('search.iterations'), 16),
        fixAttempts: positiveInt(config.get('search.fixAttempts'), 2, 0),
        budgetUsd: limit(config.get('budget.maxDollars')),
        maxEvaluations: limit(config.get('budget.maxEvaluations')),
        wallTimeS: limit(config.get('budget.maxWallTimeSeconds')),
      },
      memoryPath: memoryPath === null ? null : expandPath(memoryPath, paths),
      maxCandidates: positiveInt(config.get('maxCandidates'), 5),
      ray: text(config.get('rayAddress')),
      workspaceTrusted,
    },
  };
}

/**
 * The per-request options of `accelopt/optimize`, from the settings as they are when the user
 * starts a search (so a change applies to the next search even before the server re-reads its
 * configuration).
 */
export function toSearchOptions(server: ServerConfiguration): SearchOptions {
  const { search } = server;
  return {
    agents: server.agents.mode,
    beamWidth: search.beamWidth,
    plansPerCandidate: search.plansPerCandidate,
    samplesPerPlan: search.samplesPerPlan,
    iterations: search.iterations,
    maxEvaluations: search.maxEvaluations,
    budgetUsd: search.budgetUsd,
    wallTimeS: search.wallTimeS,
  };
}

/**
 * What a configuration change asks of the server: a new process (interpreter, API-key variable),
 * a re-read of its settings (keeping its profiles, searches and candidates), or nothing.
 */
export function changeEffect(affects: (section: string) => boolean): 'restart' | 'reload' | 'none' {
  if (PROCESS_KEYS.some((key) => affects(`accelopt.${key}`))) {
    return 'restart';
  }
  return SERVER_KEYS.some((key) => affects(`accelopt.${key}`)) ? 'reload' : 'none';
}

/**
 * The server process's environment: the editor's own, plus the API key from secret storage (when
 * one is stored) under the configured variable name.
 */
export function serverEnvironment(
  base: NodeJS.ProcessEnv,
  apiKeyEnvVar: string,
  storedKey: string | undefined,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base };
  if (storedKey) {
    env[apiKeyEnvVar] = storedKey;
  }
  // Log lines (stderr) reach the output channel as they are written, not when a buffer fills.
  env.PYTHONUNBUFFERED = '1';
  return env;
}

/**
 * The answer to `workspace/configuration` for an AccelOpt section: "accelopt" is the whole
 * ServerConfiguration, "accelopt.search" its `search` part, and so on. Undefined for any other
 * section (the editor answers those itself).
 */
export function configurationSection(server: ServerConfiguration, section: string | undefined): unknown {
  if (section === 'accelopt') {
    return server;
  }
  if (section === undefined || !section.startsWith('accelopt.')) {
    return undefined;
  }
  let value: unknown = server;
  for (const part of section.slice('accelopt.'.length).split('.')) {
    if (value === null || typeof value !== 'object' || !(part in value)) {
      return null;
    }
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}
