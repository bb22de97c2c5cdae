import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { beforeEach, describe, it } from 'node:test';

import {
  countCandidates,
  describeOutcome,
  outcomeActions,
  runOptimization,
  type SearchChannel,
} from '../src/optimize';
import type { CandidatesNotification } from '../src/protocol';
import { SearchProgress } from '../src/searchProgress';
import type { OptimizeParams, OptimizeResult, SearchStateNotification } from '../src/protocol';
import { KERNEL_URI, candidate, candidates, searchState } from './support/fixtures';
import {
  Disposable,
  EventEmitter,
  mock,
  type CancellationToken,
  type ProgressRecord,
} from './support/vscode';

/**
 * A server connection the test drives by hand: it records the request, lets the test push
 * search states, and answers when the test says (or when cancelled, like the real server).
 */
class ScriptedChannel implements SearchChannel {
  readonly states = new EventEmitter<SearchStateNotification>();
  readonly cancelled: string[] = [];
  params: OptimizeParams | undefined;
  token: CancellationToken | undefined;
  private answer: ((result: OptimizeResult) => void) | undefined;
  private fail: ((error: unknown) => void) | undefined;
  /** What the server does when the request's token is cancelled. */
  onTokenCancelled: 'answer-cancelled' | 'error-cancelled' | 'ignore' = 'answer-cancelled';

  optimize(params: OptimizeParams, token: CancellationToken): Promise<OptimizeResult> {
    this.params = params;
    this.token = token;
    return new Promise((resolve, reject) => {
      this.answer = resolve;
      this.fail = reject;
      token.onCancellationRequested(() => {
        if (this.onTokenCancelled === 'answer-cancelled') {
          resolve(result('cancelled'));
        } else if (this.onTokenCancelled === 'error-cancelled') {
          reject(Object.assign(new Error('Request cancelled'), { code: -32800 }));
        }
      });
    });
  }

  async cancel(searchId: string): Promise<void> {
    this.cancelled.push(searchId);
  }

  onSearchState(listener: (state: SearchStateNotification) => void): Disposable {
    return this.states.event(listener);
  }

  readonly lists = new EventEmitter<CandidatesNotification>();

  onCandidates(listener: (list: CandidatesNotification) => void): Disposable {
    return this.lists.event(listener);
  }

  readonly workDone = new EventEmitter<{ message: string; percentage?: number }>();

  onProgressMessage(token: string, listener: (message: string, percentage?: number) => void): Disposable {
    assert.equal(token, this.params?.workDoneToken ?? token, "progress is read on the request's own token");
    return this.workDone.event((value) => listener(value.message, value.percentage));
  }

  finish(value: OptimizeResult): void {
    this.answer?.(value);
  }

  crash(error: unknown): void {
    this.fail?.(error);
  }
}

function result(reason: OptimizeResult['reason'], overrides: Partial<OptimizeResult> = {}): OptimizeResult {
  return { searchId: 's1', reason, message: '', bestSpeedup: 1.84, candidates: 3, ...overrides };
}

const target = { uri: KERNEL_URI, kernelName: 'silu_kernel' };

function started(): Promise<ProgressRecord> {
  return new Promise((resolve) => {
    mock.onProgressStart = (record) => setImmediate(() => resolve(record));
  });
}

describe('optimize', () => {
  beforeEach(() => mock.reset());

  it('sends the request with the search options and a work-done token, and shows iteration, best speedup and cost', async () => {
    const channel = new ScriptedChannel();
    const progress = started();
    const outcome = runOptimization(target, { iterations: 4, beamWidth: 2 }, channel, {
      measuredOn: 'simulated on trn1',
    });
    const record = await progress;
    assert.equal(record.title, 'AccelOpt: optimizing silu_kernel (simulated on trn1)');
    assert.equal(record.cancellable, true);
    assert.equal(channel.params?.uri, KERNEL_URI);
    assert.equal(channel.params?.kernelName, 'silu_kernel');
    assert.deepEqual(channel.params?.options, { iterations: 4, beamWidth: 2 });
    assert.equal(typeof channel.params?.workDoneToken, 'string');

    // the last words of a search on this kernel stopped just before: not ours
    channel.states.fire(searchState('s0', { state: 'finished', iteration: 1 }));
    channel.lists.fire(candidates('s0', [candidate('old', { speedup: 5 })], { running: false }));
    channel.states.fire(searchState('s1', { state: 'started', iteration: 0 }));
    channel.states.fire(searchState('other', { kernelName: 'softmax_kernel', iteration: 3 }));
    channel.lists.fire(
      candidates('s1', [candidate('a', { speedup: 1.1 }), candidate('b', { status: 'incorrect' })]),
    );
    channel.lists.fire(
      candidates('other', [candidate('x', { speedup: 9 })], { kernelName: 'softmax_kernel' }),
    );
    channel.states.fire(
      searchState('s1', { iteration: 2, totalIterations: 4, bestSpeedup: 1.3149, dollars: 0.0421 }),
    );
    channel.finish(result('completed'));

    assert.deepEqual(await outcome, { kind: 'finished', result: result('completed') });
    assert.deepEqual(
      record.reports.map((step) => [step.message, step.increment]),
      [
        ['starting…', undefined],
        ['profiling the original kernel…', undefined],
        ['iteration 1 of 4 · best 1.10× · 2 checked', undefined],
        ['iteration 3 of 4 · best 1.31× · 2 checked · $0.04', 50],
      ],
      'other searches do not leak in; two of four iterations done',
    );
  });

  it("shows the server's own words until the search has started, then its own", async () => {
    const channel = new ScriptedChannel();
    const progress = started();
    const outcome = runOptimization(target, {}, channel);
    const record = await progress;
    channel.workDone.fire({ message: 'planning', percentage: 0 });
    channel.states.fire(searchState('s1', { state: 'started', iteration: 0, totalIterations: 2 }));
    channel.workDone.fire({ message: 'iteration 0/2 · best 1.00× · 3 evaluated · $0.00', percentage: 25 });
    channel.finish(result('completed'));
    await outcome;
    assert.deepEqual(
      record.reports.map((step) => step.message),
      ['starting…', 'planning', 'profiling the original kernel…'],
    );
  });

  it('stops the search when the user cancels: the request token and accelopt/cancel both fire', async () => {
    const channel = new ScriptedChannel();
    const progress = started();
    const outcome = runOptimization(target, {}, channel);
    const record = await progress;
    channel.states.fire(searchState('s1', { state: 'started' }));
    record.source.cancel();

    assert.deepEqual(await outcome, { kind: 'cancelled', searchId: 's1', confirmed: true });
    assert.equal(channel.token?.isCancellationRequested, true);
    assert.deepEqual(channel.cancelled, ['s1']);
    assert.equal(record.reports.at(-1)?.message, 'stopping…');
  });

  it("treats the server's RequestCancelled error as a confirmed stop", async () => {
    const channel = new ScriptedChannel();
    channel.onTokenCancelled = 'error-cancelled';
    const progress = started();
    const outcome = runOptimization(target, {}, channel);
    (await progress).source.cancel();
    assert.deepEqual(await outcome, { kind: 'cancelled', searchId: undefined, confirmed: true });
    assert.deepEqual(channel.cancelled, [], 'no search id was known, so only $/cancelRequest could go');
  });

  it('gives up waiting when the server never confirms, and says so', async () => {
    const channel = new ScriptedChannel();
    channel.onTokenCancelled = 'ignore';
    const progress = started();
    const outcome = runOptimization(target, {}, channel, { stopTimeoutMs: 50 });
    (await progress).source.cancel();
    const value = await outcome;
    assert.deepEqual(value, { kind: 'cancelled', searchId: undefined, confirmed: false });
    assert.equal(describeOutcome(value, target, { usable: 0, faster: 0 }, undefined).severity, 'warning');
  });

  it('reports a failed request as a failure, not a cancellation', async () => {
    const channel = new ScriptedChannel();
    const progress = started();
    const outcome = runOptimization(target, {}, channel);
    await progress;
    channel.crash(new Error('kernel silu_kernel not found in silu.py'));
    assert.deepEqual(await outcome, { kind: 'failed', message: 'kernel silu_kernel not found in silu.py' });
  });
});

describe('what the user reads', () => {
  it('names the iteration under way, the best speedup so far, the candidates checked and the cost', () => {
    const status = new SearchProgress();
    assert.equal(status.message, 'starting…');
    status.onState(searchState('s', { state: 'started', iteration: 0, totalIterations: 16 }));
    assert.equal(status.message, 'profiling the original kernel…');
    status.onCandidates(
      candidates('s', [candidate('a', { status: 'pending' }), candidate('b', { status: 'timeout' })]),
    );
    assert.equal(
      status.message,
      'iteration 1 of 16 · no faster kernel yet · 1 checked',
      'nothing spent (offline agents): no "$0.00"',
    );
    status.onState(searchState('s', { iteration: 3, totalIterations: 16, bestSpeedup: 1.0 }));
    assert.equal(
      status.message,
      'iteration 4 of 16 · no faster kernel yet · 1 checked',
      'a best of 1.00× is not a find',
    );
    status.onState(searchState('s', { iteration: 16, totalIterations: 16, bestSpeedup: 1.5, dollars: 1.25 }));
    assert.equal(
      status.message,
      'iteration 16 of 16 · best 1.50× · 1 checked · $1.25',
      'never past the last',
    );
    assert.equal(status.percent, 100);
    status.onState(
      searchState('s', { state: 'finished', iteration: 16, totalIterations: 16, bestSpeedup: 1.5 }),
    );
    assert.equal(status.percent, 100);
  });

  it('names the outcome, the best speedup and the backend that measured it', () => {
    const sim = { backend: 'simulator', hardware: 'trn1' };
    assert.equal(
      describeOutcome(
        { kind: 'finished', result: result('completed') },
        target,
        { usable: 3, faster: 2 },
        sim,
      ).text,
      'AccelOpt: the search for silu_kernel finished: best candidate 1.84× faster (simulated on trn1); 3 candidates in the AccelOpt view.',
    );
    assert.match(
      describeOutcome(
        { kind: 'finished', result: result('budget', { bestSpeedup: 1.0 }) },
        target,
        { usable: 0, faster: 0 },
        sim,
      ).text,
      /reached its budget: no faster kernel found \(simulated on trn1\); 0 candidates in/,
    );
    assert.equal(
      describeOutcome(
        { kind: 'finished', result: result('completed', { bestSpeedup: 1.0 }) },
        target,
        { usable: 5, faster: 0 },
        sim,
      ).text,
      'AccelOpt: the search for silu_kernel finished (simulated on trn1): 5 correct rewrites, none faster, in the AccelOpt view.',
    );
    const partly = describeOutcome(
      {
        kind: 'finished',
        result: result('completed', {
          agentCalls: '12 endpoint calls, 9 usable; 3 failed (2 cut off, 1 timeout); 20,000 tokens',
          agentFailures: 3,
        }),
      },
      target,
      { usable: 3, faster: 2 },
      sim,
    );
    assert.equal(partly.severity, 'warning');
    assert.match(partly.text, /Agents: 12 endpoint calls, 9 usable; 3 failed \(2 cut off, 1 timeout\)/);
    const error = describeOutcome(
      { kind: 'finished', result: result('error', { message: 'endpoint unreachable' }) },
      target,
      { usable: 0, faster: 0 },
      sim,
    );
    assert.equal(error.severity, 'error');
    assert.match(error.text, /endpoint unreachable/);
    assert.match(
      describeOutcome(
        { kind: 'cancelled', searchId: 's1', confirmed: true },
        target,
        { usable: 2, faster: 1 },
        sim,
      ).text,
      /stopped the search for silu_kernel; 2 candidates in the AccelOpt view\.$/,
    );
    assert.equal(
      describeOutcome(
        { kind: 'cancelled', searchId: 's1', confirmed: true },
        target,
        { usable: 2, faster: 0 },
        sim,
      ).text,
      'AccelOpt: stopped the search for silu_kernel; 2 correct rewrites, none faster, in the AccelOpt view.',
    );
  });

  it('counts the faster candidates: 1.004× reads 1.00× and is not faster, failures never count', () => {
    assert.deepEqual(
      countCandidates([
        { info: candidate('a', { speedup: 1.07 }) },
        { info: candidate('b', { speedup: 1.004 }) },
        { info: candidate('c', { speedup: 0.9 }) },
        { info: candidate('d', { status: 'incorrect', speedup: 3 }) },
      ]),
      { usable: 4, faster: 1 },
    );
  });

  it('offers the diff of the best candidate only when it is faster', () => {
    assert.deepEqual(outcomeActions(candidate('a', { speedup: 1.07 })), [
      'Show Diff of Best',
      'Show Candidates',
    ]);
    assert.deepEqual(outcomeActions(candidate('a', { speedup: 1.0 })), ['Show Candidates']);
    assert.deepEqual(outcomeActions(candidate('a', { speedup: 1.004 })), ['Show Candidates']);
    assert.deepEqual(outcomeActions(candidate('a', { speedup: 0.8 })), ['Show Candidates']);
    assert.deepEqual(outcomeActions(candidate('a', { status: 'timeout', speedup: 2 })), ['Show Candidates']);
    assert.deepEqual(outcomeActions(undefined), ['Show Candidates']);
  });
});
