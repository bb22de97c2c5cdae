import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { CandidateStore, byRank } from '../src/candidateStore';
import { candidate, candidates, searchState } from './support/fixtures';

describe('candidate ranking', () => {
  it("keeps the search's ranking, whatever the figures say", () => {
    const list = [
      candidate('third', { speedup: 2.0, rank: 3 }),
      candidate('first', { speedup: 1.1, rank: 1 }),
      candidate('second', { speedup: 1.9, percentOfPeak: 0.9, rank: 2 }),
    ];
    const order = [...list].sort(byRank).map((c) => c.id);
    assert.deepEqual(order, ['first', 'second', 'third']);
  });
});

describe('CandidateStore', () => {
  it('groups by kernel and ranks, keeping failed candidates apart', () => {
    const store = new CandidateStore();
    store.applyCandidates(
      candidates('s1', [
        candidate('a', { speedup: 1.2, rank: 2 }),
        candidate('broken', { status: 'compile_error', speedup: null, rank: 3 }),
        candidate('b', { speedup: 1.9, rank: 1 }),
      ]),
    );
    store.applyCandidates(
      candidates('s2', [candidate('c', { speedup: 1.3 })], {
        uri: 'file:///w/softmax.py',
        kernelName: 'softmax_kernel',
      }),
    );

    const kernels = store.kernels();
    assert.deepEqual(
      kernels.map((k) => k.kernelName),
      ['softmax_kernel', 'silu_kernel'],
      'the most recently started search comes first',
    );
    const silu = kernels[1];
    assert.deepEqual(
      silu.candidates.map((c) => [c.position, c.info.id]),
      [
        [1, 'b'],
        [2, 'a'],
      ],
    );
    assert.deepEqual(
      silu.failed.map((c) => c.info.id),
      ['broken'],
    );
    assert.equal(store.find({ searchId: 's1', candidateId: 'broken' })?.info.status, 'compile_error');
    assert.equal(store.find({ searchId: 's2', candidateId: 'b' }), undefined, 'ids are per search');
  });

  it("replaces a kernel's candidates when a newer search reports, and ignores late news from the older one", () => {
    const store = new CandidateStore();
    store.applyCandidates(candidates('old', [candidate('x')]));
    store.applyCandidates(candidates('new', [candidate('y')]));
    store.applyCandidates(candidates('old', [candidate('x'), candidate('z')], { running: false }));

    const [group] = store.kernels();
    assert.equal(store.kernels().length, 1);
    assert.equal(group.searchId, 'new');
    assert.deepEqual(
      group.candidates.map((c) => c.info.id),
      ['y'],
    );
    assert.equal(group.running, true);
  });

  it('tracks progress and the end of a search from searchState', () => {
    const store = new CandidateStore();
    store.applySearchState(searchState('s1', { state: 'started', iteration: 0 }));
    assert.equal(store.runningSearches().length, 1);
    store.applySearchState(searchState('s1', { iteration: 2, bestSpeedup: 1.4 }));
    assert.equal(store.kernels()[0].progress?.iteration, 2);
    store.applySearchState(searchState('s1', { state: 'finished', iteration: 4 }));
    assert.equal(store.runningSearches().length, 0);
  });

  it('removes a rejected candidate at once and tells listeners of every change', () => {
    const store = new CandidateStore();
    let changes = 0;
    const subscription = store.onDidChange(() => changes++);
    store.applyCandidates(candidates('s1', [candidate('a'), candidate('b')]));
    store.remove({ searchId: 's1', candidateId: 'a' });
    store.remove({ searchId: 's1', candidateId: 'not-there' });
    assert.deepEqual(
      store.kernels()[0].candidates.map((c) => c.info.id),
      ['b'],
    );
    assert.equal(changes, 2, 'removing an unknown candidate is not a change');
    subscription.dispose();
    store.clear();
    assert.equal(changes, 2, 'a disposed listener hears nothing');
    assert.deepEqual(store.kernels(), []);
  });

  it('remembers the accepted candidate and calls the rest of its search outdated', () => {
    const store = new CandidateStore();
    store.applyCandidates(candidates('s1', [candidate('a', { speedup: 2 }), candidate('b')]));
    store.markApplied({ searchId: 's1', candidateId: 'zzz' });
    assert.equal(store.kernels()[0].applied, undefined, 'an unknown candidate changes nothing');
    store.markApplied({ searchId: 's1', candidateId: 'a' });
    const group = store.kernels()[0];
    assert.equal(group.applied?.info.id, 'a');
    assert.deepEqual(
      group.candidates.map((c) => [c.info.id, c.applied, c.outdated]),
      [
        ['a', true, false],
        ['b', false, true],
      ],
    );
    store.applyCandidates(
      candidates('s1', [candidate('a', { speedup: 2 }), candidate('b')], { running: false }),
    );
    assert.equal(store.kernels()[0].applied?.info.id, 'a', 'a later list of the same search keeps the mark');
  });

  it('marks a search stopped without waiting for the server', () => {
    const store = new CandidateStore();
    store.applyCandidates(candidates('s1', [candidate('a')]));
    store.markStopped('s1');
    assert.equal(store.kernels()[0].running, false);
    assert.equal(store.kernels()[0].candidates.length, 1, 'the candidates found so far stay');
    store.applyCandidates(candidates('s1', [candidate('a'), candidate('b')], { running: true }));
    store.applySearchState(searchState('s1', { iteration: 2 }));
    assert.equal(store.kernels()[0].running, false, 'a message still in flight does not revive it');
    assert.equal(store.kernels()[0].candidates.length, 2, 'but its candidates are taken');
  });
});
