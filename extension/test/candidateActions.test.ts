import './support/installVscodeMock';

import assert from 'node:assert/strict';
import { beforeEach, describe, it } from 'node:test';

import {
  acceptCandidate,
  acceptHunks,
  hunkItems,
  rejectCandidate,
  resolveCandidate,
  toCandidateRef,
} from '../src/candidateActions';
import { CandidateStore, type RankedCandidate } from '../src/candidateStore';
import { KERNEL_URI, candidate, candidates } from './support/fixtures';
import { Uri, mock } from './support/vscode';

function storeWith(...ids: string[]): CandidateStore {
  const store = new CandidateStore();
  store.applyCandidates(
    candidates(
      's1',
      ids.map((id) => candidate(id, { speedup: 1.84, title: `plan ${id}` })),
    ),
  );
  return store;
}

function openDocument(uri: string): { saved: number } {
  const state = { saved: 0 };
  mock.textDocuments.push({
    uri: Uri.parse(uri),
    languageId: 'python',
    fileName: Uri.parse(uri).fsPath,
    getText: () => '',
    save: async () => {
      state.saved++;
      return true;
    },
  });
  return state;
}

describe('candidate actions', () => {
  beforeEach(() => mock.reset());

  it('understands every way a candidate is named: tree node, click reference, server arguments', () => {
    const store = storeWith('c1');
    const ranked = store.find({ searchId: 's1', candidateId: 'c1' }) as RankedCandidate;
    const expected = { searchId: 's1', candidateId: 'c1' };
    assert.deepEqual(toCandidateRef([{ kind: 'candidate', candidate: ranked }]), expected);
    assert.deepEqual(toCandidateRef([{ searchId: 's1', candidateId: 'c1' }]), expected);
    assert.deepEqual(toCandidateRef(['s1', 'c1']), expected);
    assert.equal(toCandidateRef([]), undefined);
    assert.equal(toCandidateRef([{ kind: 'kernel' }]), undefined);
  });

  it('warns when the candidate is gone', () => {
    assert.equal(resolveCandidate(new CandidateStore(), ['s1', 'c1']), undefined);
    assert.match(mock.messages[0].text, /no longer available/);
  });

  it("accepts through the server's applyCandidate, saves the file and says what was applied", async () => {
    const store = storeWith('c1');
    const document = openDocument(KERNEL_URI);
    const calls: [string, unknown[]][] = [];
    const outcome = await acceptCandidate(
      store.find({ searchId: 's1', candidateId: 'c1' })!,
      async (command, args) => {
        calls.push([command, args]);
        return { applied: true, message: '' };
      },
      true,
    );
    assert.deepEqual(outcome, { applied: true });
    assert.deepEqual(calls, [['accelopt.applyCandidate', ['s1', 'c1']]]);
    assert.equal(document.saved, 1);
    assert.equal(mock.messages[0].severity, 'info');
    assert.match(
      mock.messages[0].text,
      /applied "plan c1" to silu_kernel in silu\.py: 1\.84× faster, simulated on trn1/,
    );
  });

  it("lists a candidate's changes by place and first line", () => {
    const items = hunkItems([
      { index: 0, startLine: 12, endLine: 12, removed: ['TILE_COLS = 512'], added: ['TILE_COLS = 1024'] },
      { index: 1, startLine: 26, endLine: 27, removed: ['a', 'b'], added: [] },
      { index: 2, startLine: 30, endLine: 29, removed: [], added: ['    pass'] },
    ]);
    assert.deepEqual(
      items.map((i) => [i.label, i.description, i.detail]),
      [
        ['Change 1: line 12', '−1 +1', '+ TILE_COLS = 1024'],
        ['Change 2: lines 26–27', '−2', '− a'],
        ['Change 3: insert before line 30', '+1', '+ pass'],
      ],
    );
  });

  it('applies only the changes the user picked', async () => {
    const store = storeWith('c1');
    openDocument(KERNEL_URI);
    const calls: [string, unknown[]][] = [];
    mock.quickPickAnswer = ['Change 2: line 20'];
    const outcome = await acceptHunks(
      store.find({ searchId: 's1', candidateId: 'c1' })!,
      async (command, args) => {
        calls.push([command, args]);
        if (command === 'accelopt.candidateHunks') {
          return [
            { index: 0, startLine: 10, endLine: 10, removed: ['x'], added: ['y'] },
            { index: 1, startLine: 20, endLine: 20, removed: ['p'], added: ['q'] },
          ];
        }
        return { applied: true, message: '' };
      },
      false,
    );
    assert.deepEqual(outcome, { applied: true });
    assert.deepEqual(calls, [
      ['accelopt.candidateHunks', ['s1', 'c1']],
      ['accelopt.applyHunks', ['s1', 'c1', [1]]],
    ]);
  });

  it('does not save when the user asked not to', async () => {
    const store = storeWith('c1');
    const document = openDocument(KERNEL_URI);
    await acceptCandidate(
      store.find({ searchId: 's1', candidateId: 'c1' })!,
      async () => ({ applied: true, message: '' }),
      false,
    );
    assert.equal(document.saved, 0);
  });

  it('leaves the report of a stale document to the server, which has shown it, and adds one only when it did not', async () => {
    const store = storeWith('c1');
    const ranked = store.find({ searchId: 's1', candidateId: 'c1' })!;
    const document = openDocument(KERNEL_URI);
    const serverText =
      'AccelOpt: silu.py changed since the search on `silu_kernel` started (version 1, now 3).';

    const refused = await acceptCandidate(
      ranked,
      async () => ({ applied: false, message: serverText }),
      true,
    );
    assert.deepEqual(refused, { applied: false, reason: serverText, shownByServer: true });
    assert.equal(mock.messages.length, 0, 'the server already showed this; a second toast would repeat it');

    const silent = await acceptCandidate(ranked, async () => ({ applied: false, message: '' }), true);
    assert.equal(silent.applied, false);
    assert.equal(mock.messages.length, 1);
    assert.equal(mock.messages[0].severity, 'warning');
    assert.match(
      mock.messages[0].text,
      /did not apply the candidate to silu\.py: silu\.py may have changed after the search started/,
    );
    assert.equal(document.saved, 0, 'nothing applied, nothing saved');
  });

  it('reports a server error instead of throwing', async () => {
    const store = storeWith('c1');
    const outcome = await acceptCandidate(
      store.find({ searchId: 's1', candidateId: 'c1' })!,
      () => Promise.reject(new Error('unknown search s1')),
      true,
    );
    assert.deepEqual(outcome, { applied: false, reason: 'unknown search s1', shownByServer: false });
    assert.match(mock.messages[0].text, /unknown search s1/);
  });

  it('rejects: gone from the view at once, and the server told', async () => {
    const store = storeWith('c1', 'c2');
    const calls: [string, unknown[]][] = [];
    await rejectCandidate(
      store.find({ searchId: 's1', candidateId: 'c1' })!,
      store,
      async (command, args) => {
        calls.push([command, args]);
        return null;
      },
    );
    assert.deepEqual(calls, [['accelopt.rejectCandidate', ['s1', 'c1']]]);
    assert.deepEqual(
      store.kernels()[0].candidates.map((c) => c.info.id),
      ['c2'],
    );
  });
});
