/**
 * Contract test: the extension's client modules against the REAL Python language server
 * (`python -m accelopt lsp` over stdio, vscode-jsonrpc on this side), with the offline agents and
 * a tiny search on the example kernel. Only the editor is played (serverHarness.ts and the
 * `vscode` mock); the server, the simulator, the search and the sandbox are all real.
 */

import '../support/installVscodeMock';

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';

import { acceptCandidate, rejectCandidate } from '../../src/candidateActions';
import { CandidateStore, type RankedCandidate } from '../../src/candidateStore';
import { countCandidates, describeOutcome, runOptimization, type OptimizeTarget } from '../../src/optimize';
import { Methods, ServerCommands, type OptimizeResult } from '../../src/protocol';
import { readSettings, toSearchOptions, type ClientSettings } from '../../src/settings';
import { mock, type ProgressRecord } from '../support/vscode';
import { assertApplyResult, assertMemoryResult, assertOptimizeResult } from './protocolShapes';
import { REPO, ServerHarness } from './serverHarness';

const TINY_SEARCH: Record<string, unknown> = {
  inputSize: 'small',
  'search.iterations': 1,
  'search.beamWidth': 2,
  'search.plansPerCandidate': 2,
  'search.samplesPerPlan': 1,
  'search.fixAttempts': 0,
};

function settings(overrides: Record<string, unknown>): ClientSettings {
  return readSettings(
    { get: <T>(key: string) => overrides[key] as T | undefined },
    { workspaceFolder: undefined, home: '/nonexistent' },
    true, // the extension runs only in a trusted workspace (VS Code's isTrusted)
  );
}

describe('the extension against the real language server', { timeout: 240_000 }, () => {
  let server: ServerHarness;
  let config: ClientSettings;
  let target: OptimizeTarget;
  const store = new CandidateStore();
  const silu = readFileSync(join(REPO, 'kernels_examples', 'silu.py'), 'utf8');
  let firstSearch: string;
  let ranked: readonly RankedCandidate[] = [];

  before(async () => {
    mock.reset();
    // The harness needs the scratch folder for the memory path, so settings come in two steps.
    server = new ServerHarness(settings(TINY_SEARCH).server);
    config = settings({ ...TINY_SEARCH, 'memory.path': join(server.root, 'memory.sqlite') });
    server.configuration = config.server;
  });

  after(async () => {
    const code = await server?.stop();
    assert.equal(code, 0, `the server did not exit cleanly\n${server?.stderr.join('')}`);
  });

  it("initializes with the extension's settings and offers the commands the client relies on", async () => {
    const capabilities = await server.initialize();
    const commands = (capabilities.executeCommandProvider as { commands: string[] }).commands;
    for (const command of Object.values(ServerCommands)) {
      assert.ok(commands.includes(command), `${command} not offered (offered: ${commands.join(', ')})`);
    }
    assert.ok(capabilities.hoverProvider && capabilities.codeLensProvider && capabilities.codeActionProvider);
    target = { uri: server.open('silu.py', silu), kernelName: 'silu_kernel' };
  });

  it('runs a search from the Optimize command: progress with iteration (no cost offline), candidates streamed while it runs', async () => {
    let record: ProgressRecord | undefined;
    mock.onProgressStart = (r) => (record = r);
    const outcome = await runOptimization(target, toSearchOptions(config.server), server.searchChannel());

    assert.equal(outcome.kind, 'finished', JSON.stringify(outcome));
    const result = (outcome as { result: OptimizeResult }).result;
    assertOptimizeResult(result);
    assert.ok(['completed', 'budget', 'early_stop', 'target_reached'].includes(result.reason), result.reason);
    firstSearch = result.searchId;

    // the progress notification the user watches
    const messages = record!.reports.map((step) => step.message ?? '');
    assert.ok(
      messages.some((m) =>
        /^iteration 1 of 1 · (best \d+\.\d\d×|no faster kernel yet) · \d+ checked$/.test(m),
      ),
      messages.join(' | '),
    );
    assert.ok(
      messages.every((m) => !m.includes('$')),
      `offline agents cost nothing, so no cost is shown: ${messages.join(' | ')}`,
    );
    // the server also reported work-done progress on the token the client made
    const workDone = [...server.progress.values()].find((values) => values[0]?.kind === 'begin');
    assert.ok(workDone && workDone.at(-1)?.kind === 'end', JSON.stringify([...server.progress.entries()]));

    const states = server.states.filter((s) => s.searchId === firstSearch).map((s) => s.state);
    assert.equal(states[0], 'started');
    assert.equal(states.at(-1), 'finished');

    const lists = server.candidates.filter((n) => n.searchId === firstSearch);
    assert.ok(
      lists.some((n) => n.running && n.candidates.length > 0),
      'candidates must arrive while the search runs',
    );
    lists.forEach((n) => store.applyCandidates(n));
    server.states.forEach((s) => store.applySearchState(s));
    const group = store.kernel(target.uri, target.kernelName);
    assert.ok(group && !group.running);
    assert.equal(group.documentVersion, 1);
    ranked = group.candidates;
    assert.ok(ranked.length >= 1, 'the search produced no usable candidate');
    const best = ranked[0].info;
    assert.equal(best.status, 'ok');
    assert.equal(best.backend, 'simulator');
    assert.equal(best.hardware, 'trn1');
    assert.ok(best.speedup !== null && best.speedup > 0 && best.latencyMs !== null && best.latencyMs > 0);
    assert.ok(
      best.percentOfPeak !== null && best.percentOfPeak > 0 && best.percentOfPeak <= 1,
      'a fraction of peak',
    );
    assert.ok(best.text.includes('def silu_kernel(') && best.text !== silu);
    assert.ok(best.diff.startsWith('--- '));
    assert.equal(result.candidates, lists.at(-1)!.candidates.length);

    const summary = describeOutcome(outcome, target, countCandidates(ranked), best);
    assert.match(summary.text, /simulated on trn1/);
  });

  it("accepts the best candidate through the server, which edits the document at the search's version", async () => {
    const best = ranked[0];
    const outcome = await acceptCandidate(
      best,
      async (command, args) => {
        const answer = await server.executeCommand(command, ...args);
        assertApplyResult(answer);
        return answer;
      },
      false,
    );
    assert.deepEqual(outcome, { applied: true });
    assert.equal(server.text(target.uri), best.info.text, 'the document is now the candidate');
    assert.equal(server.version(target.uri), 2);
    assert.match(
      mock.messages.at(-1)!.text,
      /applied ".*" to silu_kernel in silu\.py: \d+\.\d\d×( faster| \(no faster\)| \(slower\)), simulated on trn1\./,
    );
  });

  it("refuses a candidate made from the old text, saying so once (the server's own message)", async () => {
    const stale = ranked[ranked.length > 1 ? 1 : 0];
    const shownBefore = mock.messages.length;
    const outcome = await acceptCandidate(
      stale,
      (command, args) => server.executeCommand(command, ...args),
      false,
    );
    assert.equal(outcome.applied, false);
    assert.ok(
      !outcome.applied && outcome.shownByServer && /changed since the search/.test(outcome.reason),
      JSON.stringify(outcome),
    );
    await server.waitFor(
      () => server.messages.find((m) => /changed since the search/.test(m.message)),
      "the server's warning",
    );
    assert.equal(mock.messages.length, shownBefore, 'no second toast from the client');
    assert.equal(
      server.text(target.uri),
      ranked[0].info.text,
      'a stale candidate never clobbers the document',
    );
  });

  it('rejects a candidate: the server drops it from the list it sends', async () => {
    const victim = ranked.at(-1)!;
    const before = server.candidates.length;
    await rejectCandidate(victim, store, (command, args) => server.executeCommand(command, ...args));
    const update = await server.waitFor(
      () => server.candidates.slice(before).find((n) => n.searchId === firstSearch),
      'a candidates notification after the reject',
    );
    assert.ok(
      !update.candidates.some((c) => c.id === victim.info.id),
      'the rejected candidate is still listed',
    );
    store.applyCandidates(update);
    assert.equal(store.find({ searchId: firstSearch, candidateId: victim.info.id }), undefined);
  });

  it('lists the optimization memory where the settings put it', async () => {
    const memory = await server.connection.sendRequest(Methods.memory, { limit: 20 });
    assertMemoryResult(memory);
    assert.equal((memory as { path: string }).path, join(server.root, 'memory.sqlite'));
  });

  it('applies changed settings without a restart: the server re-reads them when told', async () => {
    const moved = settings({ ...TINY_SEARCH, 'memory.path': join(server.root, 'moved', 'memory.sqlite') });
    const asked = server.configurationRequests;
    server.configuration = moved.server;
    // what ServerLauncher.reloadConfiguration sends
    await server.connection.sendNotification('workspace/didChangeConfiguration', {
      settings: { accelopt: moved.server },
    });
    await server.waitFor(
      () => server.configurationRequests > asked,
      'the server to ask for its settings again',
    );
    // The answer is applied by the server as it arrives; ask until it shows (a few ms at most).
    const wanted = join(server.root, 'moved', 'memory.sqlite');
    let path = '';
    for (let attempt = 0; attempt < 50 && path !== wanted; attempt++) {
      path = ((await server.connection.sendRequest(Methods.memory, { limit: 1 })) as { path: string }).path;
      if (path !== wanted) {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    assert.equal(path, wanted);
    server.configuration = config.server;
    await server.connection.sendNotification('workspace/didChangeConfiguration', {
      settings: { accelopt: config.server },
    });
  });

  it('stops a search when the progress notification is cancelled, and stays responsive', async () => {
    const longer = { ...toSearchOptions(config.server), iterations: 8 };
    const statesBefore = server.states.length;
    let cancelledAt = 0;
    mock.onProgressStart = (record) => {
      void server
        .waitFor(
          () => server.states.slice(statesBefore).find((s) => s.state === 'started'),
          'the search to start',
        )
        .then(() => {
          cancelledAt = Date.now();
          record.source.cancel();
        });
    };
    const outcome = await runOptimization(target, longer, server.searchChannel(), { stopTimeoutMs: 30_000 });
    const stopSeconds = (Date.now() - cancelledAt) / 1000;
    assert.equal(outcome.kind, 'cancelled', JSON.stringify(outcome));
    assert.ok(outcome.kind === 'cancelled' && outcome.confirmed, 'the server confirmed the stop');
    assert.ok(stopSeconds < 20, `stopping took ${stopSeconds.toFixed(1)} s`);
    const searchId = server.states.slice(statesBefore).find((s) => s.state === 'started')!.searchId;
    await server.waitFor(
      () => server.states.find((s) => s.searchId === searchId && s.state === 'finished'),
      'the cancelled search to report finished',
    );
    // A list sent before the stop must be followed by a final one that says the search is over.
    const lists = server.candidates.filter((n) => n.searchId === searchId);
    if (lists.length > 0) {
      await server.waitFor(
        () => server.candidates.filter((n) => n.searchId === searchId).at(-1)?.running === false,
        'a final candidates list',
      );
    }
    assertMemoryResult(await server.connection.sendRequest(Methods.memory, { limit: 1 }));
  });

  it('stops a search with accelopt/cancel alone', async () => {
    const statesBefore = server.states.length;
    const pending = server.connection.sendRequest<OptimizeResult>(Methods.optimize, {
      uri: target.uri,
      kernelName: target.kernelName,
      options: { ...toSearchOptions(config.server), iterations: 8 },
    });
    const started = await server.waitFor(
      () => server.states.slice(statesBefore).find((s) => s.state === 'started'),
      'the search to start',
    );
    await server.connection.sendRequest(Methods.cancel, { searchId: started.searchId });
    const result = await pending;
    assertOptimizeResult(result);
    assert.equal(result.reason, 'cancelled');
    assert.equal(result.searchId, started.searchId);
  });
});
